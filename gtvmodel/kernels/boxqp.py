"""Box-constrained QPs of row duals by primal-dual active-set steps (a semismooth Newton
method), all nodes at once: :func:`dual_active_set_prox`, the exact node update PU (32) of
paper 001 for row losses with a linear conjugate (hinge, absolute), and the pieces of the
active-set rule shared with :func:`~gtvmodel.kernels.composite.composite_active_set_prox`
(:func:`_box_active_set`, :func:`_active_set_step`, the projected-gradient restart
:func:`_box_qp_projected_gradient`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _compiled
from .nodebox import compiled_box_dual
from .nodeqp import COMPILED_MIN_NODES


def dual_active_set_prox(P: np.ndarray, K: np.ndarray, cs: np.ndarray, lo: np.ndarray,
                         hi: np.ndarray, fixed: np.ndarray, mu: np.ndarray, g: np.ndarray,
                         Z0: np.ndarray, *, start: tuple[np.ndarray, np.ndarray] | None = None,
                         max_iter: int = 50, rtol: float = 1e-13, cache: dict | None = None,
                         compiled: bool | None = None
                         ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Exact ``argmin_z sum_r c_r ell(x_r^T z, y_r) + mu_i ||z||^2 / 2 - g_i^T z`` for ``k``
    nodes at once, for row losses with a *linear* conjugate ``ell*(a) = s_r a`` on ``[lo_r,
    hi_r]`` (hinge, absolute): the node update PU (32) with ``mu = 2 kappa + 1/tau``, ``g =
    v/tau``.

    By duality (``ell(t) = max_{lo <= a <= hi} a t - s a``) the minimizer is ``z = (g - sum_r
    c_r a_r x_r) / mu`` with the row duals ``a`` solving the box QP

        min_a  (1/2) a^T Q a - b^T a   s.t.  lo <= a <= hi,
        Q = (C X)(C X)^T / mu,   b = C X g / mu - C s,   grad_r = c_r (s_r - x_r^T z),

    ``m_i`` variables per node.  It is solved by a primal-dual active-set iteration (a
    semismooth Newton method): a row is held at ``lo`` where ``grad_r > 0``, at ``hi`` where
    ``grad_r < 0`` (beyond the rounding level ``rtol`` of the row's terms; the trial point
    ``a_r - grad_r / Q_rr`` decides between holding and freeing), and the free rows meet their
    equations ``grad_F = 0``, i.e. ``x_r^T z = s_r``: ``z`` is the projection of ``(g - sum_held
    c_r a_r x_r) / mu`` onto that affine set (a pseudo-inverse of the free rows, conditioned
    like ``X`` rather than like ``Q``; least squares where the rows are inconsistent, and any
    number of rows, ``m_i > d`` included), and their duals ``a_F`` the solution nearest the
    previous ones.  A node stops when its active set repeats: then every free row has ``grad_r
    = 0`` and lies in its interval and every held row's gradient has the sign of its bound --
    the KKT conditions of the QP, so ``z`` is the exact minimizer to rounding.  Arrays are
    padded to ``m = max_i m_i`` rows per node: ``P`` ``(k, m, d)`` holds ``c_r x_r``, ``K = P
    P^T`` ``(k, m, m)`` (for the projected-gradient restart), ``cs`` ``c_r s_r``, ``lo``/``hi``
    ``(k, m)``; ``fixed`` marks padding
    rows (held at ``a = 0``).  The first active set is ``start = (active set, a)`` returned
    by a previous call (Algorithm 1 changes it little between iterations), else read off
    ``Z0``.  Returns ``(Z, converged, (active set, a))``; a node whose active set has not
    repeated within ``max_iter`` steps, then again from a projected-gradient start, is flagged
    False for the caller's fallback.  After ``6`` steps only the most violated row of a node
    changes per step (against cycles).  ``cache`` (a dict the caller keeps between calls on
    the same rows) holds every node's last active set and its free rows' pseudo-inverse: a node
    whose active set is the cached one reuses it (it depends on the set only).  ``compiled``:
    the steps node by node in numba's :func:`~gtvmodel.kernels.nodebox.box_dual_pass` (the
    same rules; a node costs its own steps only), the restart of cycling nodes on the numpy
    path; None: where numba is installed and there are ``COMPILED_MIN_NODES`` nodes or more.
    """
    k = cs.shape[0]
    pnorm2 = np.einsum("krd,krd->kr", P, P)
    pnorm = np.sqrt(pnorm2)
    gamma = mu[:, None] / np.maximum(pnorm2, 1e-300)  # 1 / Q_rr
    if start is None:
        a = np.where(fixed, 0.0, 0.5 * (lo + hi))
        grad = _box_dual_grad(P, cs, Z0)
        state = _box_active_set(a, grad, gamma, lo, hi, fixed,
                                rtol * (np.abs(cs) + pnorm * np.abs(Z0).sum(axis=1)[:, None]),
                                ~fixed)
        a_prev = np.clip(a - gamma * grad, lo, hi)
    else:
        state, a_prev = start[0].copy(), start[1].copy()
    q = _BoxQP(P, K, cs, lo, hi, fixed, mu, g, pnorm, gamma, rtol, cache, state, a_prev,
               np.array(Z0, dtype=float))
    if compiled is None:
        compiled = k >= COMPILED_MIN_NODES and _compiled.available()
    if compiled:  # the restart of cycling nodes included
        left = _box_run_compiled(q, max_iter)
    else:
        left = _box_run(q, np.arange(k), max_iter)
        if left.size:  # cycling nodes: near the solution by projected gradients, then again
            _box_restart(q, left)
            left = _box_run(q, left, max_iter)
    done = np.ones(k, dtype=bool)
    done[left] = False
    return q.Z, done, (q.state, q.a_prev)


@dataclass
class _BoxQP:
    """One call of :func:`dual_active_set_prox`: its rows (``P``, ``K``, ``cs``, ``lo``,
    ``hi``, ``fixed``), ``mu``, ``g``, the rows' norms ``pnorm``, ``gamma = 1 / Q_rr``, the
    rounding level ``rtol``, the caller's ``cache``, and the iterates (every node's active set
    ``state``, row duals ``a_prev`` and point ``Z``, updated in place)."""

    P: np.ndarray
    K: np.ndarray
    cs: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    fixed: np.ndarray
    mu: np.ndarray
    g: np.ndarray
    pnorm: np.ndarray
    gamma: np.ndarray
    rtol: float
    cache: dict | None
    state: np.ndarray
    a_prev: np.ndarray
    Z: np.ndarray


def _box_run_compiled(q: _BoxQP, max_iter: int) -> np.ndarray:
    """:func:`_box_run` on every node by the compiled node loop
    :func:`~gtvmodel.kernels.nodebox.box_dual_pass` (its pseudo-inverses in ``q.cache``, as
    :func:`_free_rows_pinv` keeps them), the restart of :func:`_box_restart` included;
    returns the nodes not converged after it."""
    k, m, d = q.P.shape
    cache = {} if q.cache is None else q.cache
    if "state" not in cache or cache["state"].shape != (k, m):
        cache["state"] = np.full((k, m), 127, dtype=np.int8)  # no set yet
        cache["pinv"] = np.zeros((k, d, m))
    q.state = np.ascontiguousarray(q.state, dtype=np.int8)
    q.a_prev = np.ascontiguousarray(q.a_prev, dtype=float)
    done = np.zeros(k, dtype=bool)
    compiled_box_dual()(np.ascontiguousarray(q.P, dtype=float),
                        np.ascontiguousarray(q.cs, dtype=float),
                        np.ascontiguousarray(q.lo, dtype=float),
                        np.ascontiguousarray(q.hi, dtype=float),
                        np.ascontiguousarray(q.fixed, dtype=bool),
                        np.ascontiguousarray(q.mu, dtype=float),
                        np.ascontiguousarray(q.g, dtype=float), float(q.rtol), q.state,
                        q.a_prev, q.Z, cache["state"], cache["pinv"], int(max_iter), done,
                        np.zeros(0), np.zeros(0))  # (no ball)
    return np.flatnonzero(~done)


def _box_tolerance(q: _BoxQP, rows: np.ndarray, Za: np.ndarray) -> np.ndarray:
    """The rounding level ``rtol (|c s| + ||P_r|| ||z||_1)`` of the dual gradients of the
    nodes ``rows`` at their points ``Za``."""
    return q.rtol * (np.abs(q.cs[rows]) + q.pnorm[rows] * np.abs(Za).sum(axis=1)[:, None])


def _box_run(q: _BoxQP, act: np.ndarray, max_iter: int) -> np.ndarray:
    """Active-set steps (:func:`_box_step`) on the nodes ``act``; returns those not
    converged."""
    for it in range(max_iter):
        act = _box_step(q, act, it)
        if act.size == 0:
            break
    return act


def _box_step(q: _BoxQP, act: np.ndarray, it: int) -> np.ndarray:
    """Step ``it`` of :func:`dual_active_set_prox` on the nodes ``act``: ``z`` and the row
    duals for their active sets, then the next sets (:func:`_active_set_step`); returns the
    nodes whose set changed."""
    st, lo_a, hi_a, Pa, mu_a = q.state[act], q.lo[act], q.hi[act], q.P[act], q.mu[act, None]
    free = st == 0
    a_fix = np.where(st < 0, lo_a, np.where(st > 0, hi_a, 0.0))
    a_fix[free | q.fixed[act]] = 0.0
    # z: the projection of h = (g - sum_held c_r a_r x_r) / mu onto {x_r^T z = s_r on
    # the free rows} (least squares where they are inconsistent), by one pseudo-inverse
    # of the free rows (conditioned like X, not like Q = (CX)(CX)^T / mu)
    h = (q.g[act] - np.einsum("krd,kr->kd", Pa, a_fix)) / mu_a
    Pf = np.where(free[:, :, None], Pa, 0.0)
    Pinv = _free_rows_pinv(Pf, st, act, q.cs.shape[0], q.cache)
    Za = h + np.einsum("kdr,kr->kd", Pinv, np.where(
        free, q.cs[act] - np.einsum("krd,kd->kr", Pf, h), 0.0))
    # one step of iterative refinement: at condition ~1e6 the pseudo-inverse leaves a free-row
    # residual far above rounding (the stop test then cycles); a least-squares residual is
    # orthogonal to the range of P_F, so pinv maps it to 0 and inconsistent rows are unchanged
    Za += np.einsum("kdr,kr->kd", Pinv, np.where(
        free, q.cs[act] - np.einsum("krd,kd->kr", Pf, Za), 0.0))
    # the free rows' duals with P_F^T a_F = mu (h - z), nearest the previous ones (Q is
    # singular where m_i > d: a minimum-norm a_F could leave the box needlessly)
    a0 = np.where(free, q.a_prev[act], 0.0)
    a_free = a0 + np.einsum("kdr,kd->kr", Pinv,
                            mu_a * (h - Za) - np.einsum("krd,kr->kd", Pf, a0))
    a = np.where(free, a_free, a_fix)
    q.a_prev[act] = a
    q.Z[act] = Za
    grad = _box_dual_grad(Pa, q.cs[act], Za)
    new = _box_active_set(a, grad, q.gamma[act], lo_a, hi_a, q.fixed[act],
                          _box_tolerance(q, act, Za), free)
    return _active_set_step(q.state, act, st, new, it, a, grad, q.gamma[act], lo_a, hi_a, free)


def _box_restart(q: _BoxQP, left: np.ndarray) -> None:
    """The nodes ``left`` (still cycling) moved near the solution by projected gradients
    (:func:`_box_qp_projected_gradient`), their active sets read off there."""
    P, cs, lo, hi, mu, g = q.P, q.cs, q.lo, q.hi, q.mu, q.g
    a = _box_qp_projected_gradient(q.K[left] / mu[left, None, None],
                                   np.einsum("krd,kd->kr", P[left], g[left]) / mu[left, None]
                                   - cs[left], lo[left], hi[left],
                                   np.clip(q.a_prev[left], lo[left], hi[left]))
    Za = (g[left] - np.einsum("krd,kr->kd", P[left], a)) / mu[left, None]
    q.a_prev[left] = a
    q.state[left] = _box_active_set(a, _box_dual_grad(P[left], cs[left], Za), q.gamma[left],
                                    lo[left], hi[left], q.fixed[left],
                                    _box_tolerance(q, left, Za), np.zeros(a.shape, dtype=bool))


def _free_rows_pinv(Pf: np.ndarray, st: np.ndarray, act: np.ndarray, k: int,
                    cache: dict | None) -> np.ndarray:
    """``pinv(Pf)`` of the free rows ``Pf`` of the active sets ``st`` of the nodes ``act`` (of
    ``k``): from ``cache`` (every node's last active set and pseudo-inverse) where a node's
    active set is the cached one, computed (and cached) for the others."""
    if cache is None:
        return np.linalg.pinv(Pf)
    if "state" not in cache or cache["state"].shape != (k,) + st.shape[1:]:
        cache["state"] = np.full((k,) + st.shape[1:], 127, dtype=st.dtype)  # no set yet
        cache["pinv"] = np.zeros((k,) + Pf.shape[:0:-1])
    changed = (cache["state"][act] != st).any(axis=1)
    if not changed.any():
        return cache["pinv"][act]
    new = act[changed]
    cache["state"][new] = st[changed]
    cache["pinv"][new] = np.linalg.pinv(Pf[changed])
    return cache["pinv"][act]


def _box_qp_projected_gradient(Q: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                               a: np.ndarray, iters: int = 500) -> np.ndarray:
    """Accelerated projected gradient (FISTA, step ``1/lambda_max(Q)``) on ``min (1/2) a^T Q a
    - b^T a`` over ``lo <= a <= hi``, per node: a start near the solution for the active-set
    steps of :func:`dual_active_set_prox` where they cycle."""
    L = np.maximum(np.linalg.eigvalsh(Q)[:, -1], 1e-300)[:, None]
    y, t = a.copy(), 1.0
    for _ in range(iters):
        a_new = np.clip(y - (np.einsum("krq,kq->kr", Q, y) - b) / L, lo, hi)
        t_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        y = a_new + ((t - 1.0) / t_new) * (a_new - a)
        a, t = a_new, t_new
    return a


def _box_dual_grad(P: np.ndarray, cs: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """``grad_r = c_r (s_r - x_r^T z)`` of the box QP of :func:`dual_active_set_prox`."""
    return cs - np.einsum("krd,kd->kr", P, Z)


def _one_change(old: np.ndarray, new: np.ndarray, violation: np.ndarray) -> np.ndarray:
    """``old`` with only the row of largest ``violation`` among the changed rows taken from
    ``new`` (per node; the anti-cycling step of :func:`dual_active_set_prox`)."""
    changed = new != old
    j = np.argmax(np.where(changed, violation + 1e-300, -1.0), axis=1)
    out = old.copy()
    rows = np.flatnonzero(changed.any(axis=1))
    out[rows, j[rows]] = new[rows, j[rows]]
    return out


def _most_violated_change(old: np.ndarray, new: np.ndarray, a: np.ndarray, grad: np.ndarray,
                          gamma: np.ndarray, lo: np.ndarray, hi: np.ndarray, free: np.ndarray
                          ) -> np.ndarray:
    """The anti-cycling step of the dual active-set methods: of the rows whose state changes
    from ``old`` to ``new``, only the one whose trial point ``a - gamma grad`` violates its
    bounds ``[lo, hi]`` most (free rows: by ``gamma |grad|``) changes (:func:`_one_change`)."""
    trial = a - gamma * grad
    return _one_change(old, new, np.abs(trial - np.clip(trial, lo, hi))
                       + gamma * np.abs(grad) * free)


def _active_set_step(state: np.ndarray, act: np.ndarray, old: np.ndarray, new: np.ndarray,
                     it: int, a: np.ndarray, grad: np.ndarray, gamma: np.ndarray,
                     lo: np.ndarray, hi: np.ndarray, free: np.ndarray) -> np.ndarray:
    """One step of the dual active-set methods' outer loop on the nodes ``act``: from the 7th
    step on (a cycle is likely) only the most violated row of a node changes
    (:func:`_most_violated_change`); ``state[act]`` becomes ``new``; returns the nodes whose
    set changed (the others are solved)."""
    if it >= 6:
        new = _most_violated_change(old, new, a, grad, gamma, lo, hi, free)
    same = (new == old).all(axis=1)
    state[act] = new
    return act[~same]


def _box_active_set(a: np.ndarray, grad: np.ndarray, gamma: np.ndarray, lo: np.ndarray,
                    hi: np.ndarray, fixed: np.ndarray, tol: np.ndarray, free: np.ndarray
                    ) -> np.ndarray:
    """``-1`` (held at ``lo``), ``+1`` (at ``hi``) or ``0`` (free) per row: where the trial
    point ``a - gamma grad`` lies (the primal-dual active-set rule; a gradient within ``tol``
    counts as zero, so a solution on a bound stays there); a free row whose equation
    could not be met (``|grad| > tol``: an inconsistent singular system) goes to the bound its
    gradient points to; padding rows: ``-1``."""
    big = np.abs(grad) > tol  # below tol a gradient is rounding: a decides (no 2-cycles)
    trial = a - gamma * np.where(big, grad, 0.0)
    out = np.where(trial <= lo, -1, np.where(trial >= hi, 1, 0))
    out = np.where(free & big, np.where(grad > 0, -1, 1), out)
    return np.where(fixed, -1, out).astype(np.int8)
