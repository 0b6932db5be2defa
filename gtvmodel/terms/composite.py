"""Exact batched node updates PU (32) of piecewise-quadratic data fits with ``l1``, box
constraints and a 2-norm or 1-norm ball (issue 16 item 3).

For a data-fit loss whose row conjugate is quadratic on an interval, ``ell*(a) = s_r a + q_r
a^2 / 2`` on ``[lo_r, hi_r]`` (:attr:`~gtvmodel.terms.losses.Loss.piecewise_quadratic`:
squared ``(t - y)^2`` with ``s = y``, ``q = 1/2`` on ``R``; Huber with ``s = y``, ``q = 1/2`` on
``[-2M, 2M]``; hinge and absolute with ``q = 0``), the node update of Algorithm 1 with the
regularizers and a coordinate box ``lo_i <= z <= hi_i`` (``Box``, ``NonNeg``, an ``inf``-norm
``NormBall`` and their intersections),

    PU_i(v) = argmin_z  L_i(z) + eta_i ||z||_1 + kappa_i ||z||^2 + iota_{C_i}(z)
                        + ||z - v||^2 / (2 tau_i),                                      (32)

has the same dual form as the data rows alone once the other terms are written as rows too:
``eta |z_j| = max_{|a| <= eta} a z_j`` (a row ``e_j`` with ``s = q = 0`` on ``[-eta, eta]``),
``iota{z_j <= hi_j} = max_{a >= 0} a z_j - hi_j a`` (``s = hi_j`` on ``[0, inf)``) and
``iota{z_j >= lo_j} = max_{a <= 0} a z_j - lo_j a`` (``s = lo_j`` on ``(-inf, 0]``).  The
minimizer is ``z = (g - sum_r c_r a_r x_r) / mu`` (``mu = 2 kappa + 1/tau``, ``g = v/tau``) with
the row duals ``a`` solving a box-constrained QP, solved for all nodes at once by
:func:`composite_active_set_prox` (finite termination: exact to rounding, every answer checked
against the KKT conditions; a node that fails the check takes one CVXPY solve instead, counted
in :attr:`CompositeProxBatch.fallbacks`, whose answer is then made exact by the active set it
identifies, :meth:`CompositeProxBatch._polished`).  A Euclidean ball ``||z||_2 <= r_i`` enters every
active-set step: with the rows' active sets fixed, ``z`` solves a trust-region problem on the
null space of the free linear rows, exact in the eigenbasis of its curvature, with the ball's
multiplier ``nu >= 0`` by Newton's method on the secular equation ``1/||z(nu)|| = 1/r``
(:func:`_ball_solve`).  A 1-norm ball ``||z||_1 <= r_i`` has a multiplier ``nu1 >= 0`` that widens
the ``l1`` rows' intervals to ``[-(eta + nu1), eta + nu1]``; with the active set fixed ``z`` and
``||z||_1`` are affine in ``nu1``, so two solves give it exactly (``solve_l1_ball`` in
:func:`composite_active_set_prox`); where the free rows fix ``z`` outside the ball, ``nu1`` grows
until a free row's dual leaves its interval (:func:`_leaving_multiplier`), so the active set
changes.  Other ``p``-norm balls stay on the CVXPY path.  Across Algorithm 1's calls the
work is mostly fixed per step (small arrays): a call starts from the last active sets with
their cached system and factorizations, the later steps run on the nodes still changing only,
and their systems are merged into the cached one when the call ends.  This
generalizes :func:`~gtvmodel.terms.losses.dual_active_set_prox` (``q = 0``, no regularizer or
constraint rows) to quadratic row conjugates.

Smooth data fits without such a conjugate (logistic) with ``l1`` and a box take
:class:`SmoothCompositeProxBatch`: proximal Newton, each step's quadratic model of the data rows
(rows ``sqrt(c_r ell''_r) x_r`` with ``q = 1``) solved exactly by
:func:`composite_active_set_prox`, then a line search on the true objective, stopped by the KKT
conditions of the true problem; across Algorithm 1's calls, plain Newton steps on the last active
sets of the ``l1`` and box rows (updated primal-dual style where a step leaves them) certify
almost every node before any such model is built.
"""

from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np

from .._solver import run_solver
from ..errors import SolverError
from .losses import (
    DataFitBatch,
    Loss,
    _active_set_step,
    _box_qp_projected_gradient,
)

__all__ = ["CompositeProxBatch", "SmoothCompositeProxBatch", "composite_active_set_prox",
           "kkt_certified", "KKT_RTOL"]

#: Relative KKT residual below which :func:`composite_active_set_prox` certifies a node's
#: answer exact (stationarity in ``z`` and the sign conditions of every row dual, relative to
#: the magnitudes of the terms they sum); a node above it takes the CVXPY path.
KKT_RTOL = 1e-11


def composite_active_set_prox(P: np.ndarray, cs: np.ndarray, cq: np.ndarray, lo: np.ndarray,
                              hi: np.ndarray, fixed: np.ndarray, mu: np.ndarray, g: np.ndarray,
                              Z0: np.ndarray, *, coord: np.ndarray | None = None,
                              start: tuple[np.ndarray, ...] | None = None,
                              radius: np.ndarray | None = None,
                              radius1: np.ndarray | None = None, l1row: np.ndarray | None = None,
                              max_iter: int = 50, rtol: float = 1e-13, check: bool = True,
                              cache: dict | None = None) -> tuple[np.ndarray, np.ndarray | None,
                                         tuple[np.ndarray, ...]]:
    """Exact ``argmin_z sum_r c_r ell_r(x_r^T z) + mu_i ||z||^2 / 2 - g_i^T z`` (subject to
    ``||z||_2 <= radius_i`` where ``radius`` is given and finite) for ``k`` nodes, rows with
    ``ell_r*(a) = s_r a + q_r a^2 / 2`` on ``[lo_r, hi_r]`` (the ``l1`` and box rows of the
    module docstring included).

    The row duals solve ``min_a (1/2) a^T (P P^T / mu + diag(c q)) a - (P g / mu - c s)^T a``
    over the box, with ``P_r = c_r x_r`` and gradient ``grad_r = c_r (s_r + q_r a_r) - P_r^T
    z``.  Primal-dual active-set steps (a semismooth Newton method): a row is held at ``lo``
    (state ``-1``) or ``hi`` (``+1``) or free (``0``) by where its trial point ``a_r - grad_r /
    Q_rr`` lies.  With the held duals fixed, a free row with ``q_r > 0`` has ``a_r = (P_r^T z -
    c_r s_r) / (c_r q_r)`` and adds ``P_r P_r^T / (c_r q_r)`` to the curvature ``H = mu I +
    ...``; a free row with ``q_r = 0`` is the equation ``P_r^T z = c_r s_r``.  So ``z`` is the
    minimizer of ``z^T H z / 2 - f^T z`` on the affine set of the free linear rows
    (:func:`_affine_solve`; with a ball, the trust-region problem of :func:`_ball_solve`, whose
    multiplier ``nu`` adds ``nu I`` to ``H``), and the linear rows' duals are the solution of
    ``P_L^T a_L = f - (H + nu I) z`` nearest the previous ones; free unit rows (``coord``) are
    not in the affine set's pseudo-inverse: they fix their coordinates, the other coordinates
    are solved for, and their duals are the stationarity residual there.  A node stops when
    its active set repeats; after ``6`` steps only the most violated row of a node changes per
    step; a node still cycling after ``max_iter`` steps restarts once from projected gradients
    (:func:`~gtvmodel.terms.losses._box_qp_projected_gradient`).  Rows are padded: ``P``
    ``(k, R, d)``, ``cs``/``cq``/``lo``/``hi``/``fixed`` ``(k, R)`` (``fixed``: padding, held at
    ``a = 0``, with ``lo = hi = 0``); ``coord`` ``(R,)`` names the coordinate ``j`` of the unit
    rows ``P_r = e_j`` (``-1`` for the others): where such a row is free, ``z_j = s_r`` is set
    exactly (an ``l1`` zero is ``0.0``, a bound is the bound).  Returns ``(Z, certified,
    (active set, a, nu))`` (the last, passed back as ``start``, starts the next call where
    it left off): ``certified`` is the KKT check :func:`kkt_certified` at ``KKT_RTOL``
    (with the ball's conditions where there is one; None with ``check=False``, for a caller
    that certifies another problem, as :class:`SmoothCompositeProxBatch`).  ``radius1``
    (``(k,)``, ``inf``: none) are 1-norm balls ``||z||_1 <= radius1_i`` and ``l1row`` ``(R,)``
    marks the ``l1`` rows (one per coordinate, not padding at those nodes) whose intervals
    their multipliers widen.  ``cache`` (a dict the caller keeps between calls on the same
    rows, e.g. Algorithm 1's iterations) holds the last full step's system and factorizations
    (:func:`_system_matrices`, :func:`_affine_factors`, :func:`_ball_factors`): a step whose
    active sets and ``mu`` are the cached ones only applies them to the new ``g`` (the KKT
    check that ends the call is the same); the systems that the later steps build for the
    few nodes still changing are written into it when the call ends (:func:`_merge_later`),
    so the next call starts from every node's final active set without rebuilding; it also
    keeps the rows' constants (:func:`_row_constants`).
    """
    k, R, d = P.shape
    c = _row_constants(P, cs, cq, lo, hi, fixed, coord, mu, rtol, cache)
    gamma = c["gamma"]
    Z = np.array(Z0, dtype=float)
    rows = {"P": P, "cs": cs, "cq": cq, "lo": lo, "hi": hi, "fixed": fixed, "coord": c["coord"],
            "unit": c["unit"], "tail": c["tail"], "any_q": c["any_q"]}
    any_ball = radius is not None and bool(np.isfinite(radius).any())
    if any_ball:
        radius = np.broadcast_to(radius, (k,))
        ball = np.isfinite(radius)
    # the balls' multipliers at the current active sets (the last call's where given)
    nu = np.zeros(k) if start is None or len(start) < 3 else np.array(start[2], dtype=float)
    # 1-norm balls: their multipliers widen the l1 rows' dual intervals (lo, hi: effective)
    ball1 = np.zeros(0, dtype=np.int64) if radius1 is None else \
        np.flatnonzero(np.isfinite(radius1) & np.ones(k, dtype=bool))
    if ball1.size:
        radius1 = np.broadcast_to(radius1, (k,))
        nu1 = np.zeros(k)
        l1m = np.asarray(l1row, dtype=bool)
        lo0, hi0, lo, hi = lo, hi, lo.copy(), hi.copy()
        rows["lo"], rows["hi"] = lo, hi

    def every(act: np.ndarray | slice) -> np.ndarray | slice:
        """``act`` as an index: a slice (views, no copies) where it names every node."""
        return act if isinstance(act, slice) or act.size < k else slice(None)

    def states(act: np.ndarray, a: np.ndarray, Za: np.ndarray, free: np.ndarray) -> np.ndarray:
        return _next_states(c, rows, every(act), a, Za, free)

    if start is None:
        a_prev = np.where(fixed, 0.0, np.clip(0.0, lo, hi))
        state = states(np.arange(k), a_prev, Z, ~fixed)[0]
    else:
        state, a_prev = start[0].copy(), start[1].copy()
    # the systems of the later steps (few nodes), with the active sets they were built for
    later: list[tuple[str, np.ndarray, np.ndarray, dict[str, Any]]] = []

    def system(kind: str, act: np.ndarray) -> dict[str, Any]:
        """:func:`_system_matrices` of the nodes ``act`` with the right side of
        :func:`_with_rhs`; for every node at once, the one in ``cache`` under ``kind`` where
        the active sets and ``mu`` are those it was built for (with its factorizations)."""
        ix = every(act)
        full = cache is not None and isinstance(ix, slice)
        hit = cache.get(kind) if full else None
        sy = None
        if hit is not None and np.array_equal(hit[1], mu):
            if np.array_equal(hit[0], state):  # (the cached one: kept as it is)
                return _with_rhs(hit[2], g, np.clip(a_prev, lo, hi))
            chg = np.flatnonzero((hit[0] != state).any(axis=1))
            # where few nodes changed their sets: their systems and factors only
            sy = _updated_system(hit[2], _system_matrices(rows, state[chg], chg, mu[chg]),
                                 chg) if kind == "plain" and chg.size <= k // 4 else None
        if sy is None:
            # a later step's nodes: as many free-row slots as the cached system (merged
            # into it without padding)
            held = cache.get(kind) if cache is not None and not full else None
            sy = _system_matrices(rows, state[ix], ix, mu[ix],
                                  0 if held is None else held[2]["F"])
        if full:
            cache[kind] = (state.copy(), mu.copy(), sy)
        elif cache is not None:  # merged into the cached one when the call ends
            later.append((kind, ix, state[ix], sy))
        # the last duals within their intervals: only a tie-break (duals nearest them), and a
        # wild one (a step that failed) would cancel the new duals' digits
        return _with_rhs(sy, g[ix], np.clip(a_prev[ix], lo[ix], hi[ix]))

    def solve(act: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``z`` and the row duals ``a`` of the nodes ``act`` for their current active sets
        (:func:`system`, then :func:`_affine_solve` or, for nodes with a ball,
        :func:`_ball_solve`, then :func:`_row_duals`)."""
        ix = every(act)
        sy = system("plain", act)
        if not any_ball:
            Za, ad = _affine_solve(sy)
            return Za, _row_duals(sy, Za, ad, None)
        Za, ad, nua = np.empty((act.size, d)), np.zeros((act.size, sy["F"])), np.zeros(act.size)
        on_ball = ball[ix]
        for part, ball_part in ((np.flatnonzero(~on_ball), False),
                                (np.flatnonzero(on_ball), True)):
            if part.size == 0:
                continue
            sub = sy if part.size == act.size else dict(
                {key: (val[part] if isinstance(val, np.ndarray) else val)
                 for key, val in sy.items()}, fac=sy["fac"].setdefault(ball_part, {}))
            if ball_part:
                Za[part], ad[part], nua[part] = _ball_solve(sub, radius[act[part]],
                                                            nu[act[part]])
            else:
                Za[part], ad[part] = _affine_solve(sub)
        nu[ix] = nua
        return Za, _row_duals(sy, Za, ad, nua)

    def solve_l1_ball(J: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``z`` and the row duals ``a`` of the nodes ``J`` (with a 1-norm ball) for their
        current active sets: the held l1 rows' duals are ``+-(eta + nu1)`` and ``z(nu1) = z_a +
        nu1 z_b`` is affine (two solves of :func:`_affine_solve`, one factorization; ``z_b``
        depends on the active sets only), and so is ``||z||_1 = sum_j sigma_j z_j``
        (``sigma``: the held rows' signs; free l1 rows fix ``z_j = 0``): ``nu1 = (r -
        ||z_a||_1) / (sum_j sigma_j z_b,j)`` where ``z_a`` is outside, else 0."""
        ix = every(J)
        lo[ix], hi[ix] = lo0[ix], hi0[ix]
        sy = system("l1-ball", J)
        fac = sy["fac"]
        if "zb" not in fac:
            sig = np.where(l1m & ~fixed[ix], state[ix], 0).astype(float)
            syb = dict(sy, f=-np.einsum("krd,kr->kd", P[ix], sig),
                       zfix=np.zeros_like(sy["zfix"]), bd=np.zeros_like(sy["bd"]),
                       a0=np.zeros_like(sy["a0"]))
            zb, ad_b = _affine_solve(syb)
            # sv: the signs in coordinates (one l1 row per coordinate), ||z||_1 = sv^T z
            sv = np.einsum("krd,kr->kd", P[ix], sig)
            fac.update(sig=sig, fb=syb["f"], zb=zb, ad_b=ad_b, sv=sv,
                       nb=np.einsum("kd,kd->k", sv, zb),
                       moves=-1e-12 * (np.abs(syb["f"]) @ c["ones_d"]) / mu[ix])
        sig, zb, nb = fac["sig"], fac["zb"], fac["nb"]
        za, ad_a = _affine_solve(sy)
        na, r1 = np.einsum("kd,kd->k", fac["sv"], za), radius1[ix]
        moves, out = nb < fac["moves"], na > r1
        t = np.maximum(np.where(out & moves, (r1 - na) / np.where(moves, nb, -1.0), 0.0), 0.0)
        stuck = np.flatnonzero(out & ~moves)
        if stuck.size:  # z cannot move: nu1 up to where a free row's dual leaves its interval
            t[stuck] = _leaving_multiplier(
                {key: (val[stuck] if isinstance(val, np.ndarray) else val)
                 for key, val in sy.items()}, za[stuck], ad_a[stuck], fac["ad_b"][stuck],
                sig[stuck], fac["fb"][stuck], state[J[stuck]], fixed[J[stuck]], lo0[J[stuck]],
                hi0[J[stuck]], l1m)
        nu1[ix] = t
        tc = t[:, None]
        lo[ix] = lo0[ix] - tc * l1m
        hi[ix] = hi0[ix] + tc * l1m
        sy["a_fix"] = sy["a_fix"] + tc * sig
        sy["f"] = sy["f"] + tc * fac["fb"]
        Zj = za + tc * zb
        return Zj, _row_duals(sy, Zj, ad_a + tc * fac["ad_b"], None)

    def solve_all(act: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:func:`solve` and, for the nodes with a 1-norm ball, :func:`solve_l1_ball`."""
        if not ball1.size:
            return solve(act)
        on1 = np.isfinite(radius1[act])
        if on1.all():
            return solve_l1_ball(act)
        Za, a = np.empty((act.size, d)), np.empty((act.size, R))
        for part, fn in ((on1, solve_l1_ball), (~on1, solve)):
            if part.any():
                Za[part], a[part] = fn(act[part])
        return Za, a

    def run(act: np.ndarray) -> np.ndarray:
        """Active-set steps on the nodes ``act``; returns those whose set has not repeated."""
        for it in range(max_iter):
            ix = every(act)
            st = state[act]
            Za, a = solve_all(act)
            Z[ix], a_prev[ix] = Za, a
            free = st == 0
            new, grad = states(ix, a, Za, free)
            act = _active_set_step(state, act, st, new, it, a, grad, gamma[ix], lo[ix], hi[ix],
                                   free)
            if act.size == 0:
                break
        return act

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        left = run(np.arange(k))
        if left.size:  # cycling nodes: near the solution by projected gradients, then again
            mul = mu[left] + nu[left]
            Q = (np.einsum("krd,kqd->krq", P[left], P[left]) / mul[:, None, None]
                 + cq[left][:, :, None] * np.eye(R))
            b = np.einsum("krd,kd->kr", P[left], g[left]) / mul[:, None] - cs[left]
            a = _box_qp_projected_gradient(Q, b, lo[left], hi[left],
                                           np.clip(a_prev[left], lo[left], hi[left]))
            Za = (g[left] - np.einsum("krd,kr->kd", P[left], a)) / mul[:, None]
            a_prev[left] = a
            state[left] = states(left, a, Za, np.zeros(a.shape, dtype=bool))[0]
            run(left)
    if later:
        _merge_later(cache, later, k)
    if not check:
        return Z, None, (state, a_prev, nu)
    ok = kkt_certified(P, cs, cq, lo, hi, fixed, mu, g, Z, a_prev,
                       **({"nu": nu, "radius": radius} if any_ball else {}))
    if ball1.size:  # ||z||_1 <= r, and = r where its multiplier is positive
        n1 = np.abs(Z[ball1]).sum(axis=1)
        r1 = radius1[ball1]
        ok[ball1] &= (n1 <= r1 * (1 + KKT_RTOL)) & ((nu1[ball1] == 0)
                                                   | (n1 >= r1 * (1 - KKT_RTOL)))
    return Z, ok, (state, a_prev, nu)


def _row_constants(P: np.ndarray, cs: np.ndarray, cq: np.ndarray, lo: np.ndarray,
                   hi: np.ndarray, fixed: np.ndarray, coord: np.ndarray | None, mu: np.ndarray,
                   rtol: float, cache: dict | None) -> dict[str, Any]:
    """What :func:`composite_active_set_prox` computes from its rows alone, kept in ``cache``
    (under ``"rows"``) while the rows are the same arrays: ``coord`` and the unit rows
    (``unit``; ``tail``, a slice where they follow the data rows, as in
    :class:`CompositeProxBatch`), the parts of the step's tolerance ``rtol (|c s| + |c q a| +
    ||P_r|| ||z||_1)`` (``tol_s``, ``tol_q``, ``tol_p``), the finite bounds (``nlo``,
    ``nhi``), whether any row has ``q > 0`` (``any_q``), and, while ``mu`` is the same,
    ``gamma = 1 / Q_rr`` (``Q_rr = ||P_r||^2 / mu + c q``)."""
    same = (cache is not None and (hit := cache.get("rows")) is not None
            and all(hit[key] is val for key, val in (("P", P), ("cs", cs), ("cq", cq),
                                                   ("lo", lo), ("hi", hi), ("fixed", fixed),
                                                   ("coord_in", coord)))
            and hit["rtol"] == rtol)
    if not same:
        R, d = P.shape[1:]
        pnorm2 = np.einsum("krd,krd->kr", P, P)
        crd = np.full(R, -1) if coord is None else np.asarray(coord)
        unit = np.flatnonzero(crd >= 0)
        hit = {"P": P, "cs": cs, "cq": cq, "lo": lo, "hi": hi, "fixed": fixed,
               "coord_in": coord, "rtol": rtol, "pnorm2": pnorm2, "coord": crd, "unit": unit,
               "tail": (slice(R - unit.size, R)
                        if np.array_equal(unit, np.arange(R - unit.size, R)) else unit),
               "tol_s": rtol * np.abs(cs), "tol_q": rtol * cq, "tol_p": rtol * np.sqrt(pnorm2),
               "nlo": ~np.isinf(lo), "nhi": ~np.isinf(hi), "any_q": bool(cq.any()),
               "ones_d": np.ones(d), "mu": None}
        if cache is not None:
            cache["rows"] = hit
    if hit["mu"] is None or not np.array_equal(hit["mu"], mu):
        hit["gamma"] = 1.0 / np.maximum(hit["pnorm2"] / mu[:, None] + cq, 1e-300)  # 1 / Q_rr
        hit["mu"] = np.array(mu, dtype=float)
    return hit


def _next_states(c: dict[str, Any], rows: dict[str, np.ndarray], ix: np.ndarray | slice,
                 a: np.ndarray, Za: np.ndarray, free: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The active sets of the nodes ``ix`` after a step of :func:`composite_active_set_prox`
    (rows' duals ``a``, points ``Za``; ``free``: the rows free in it) and the dual gradients
    ``grad_r = c_r (s_r + q_r a_r) - P_r^T z``: :func:`~gtvmodel.terms.losses._box_active_set`
    at the tolerance ``rtol (|c s| + |c q a| + ||P_r|| ||z||_1)`` (constants ``c`` of
    :func:`_row_constants`), fused with the rule that a dual is never held at an infinite
    bound (that row stays free)."""
    lo, hi = rows["lo"][ix], rows["hi"][ix]
    Pz = np.einsum("krd,kd->kr", rows["P"][ix], Za)
    tol = c["tol_s"][ix] + c["tol_p"][ix] * (np.abs(Za) @ c["ones_d"])[:, None]
    if c["any_q"]:
        grad = rows["cs"][ix] + rows["cq"][ix] * a - Pz
        tol += c["tol_q"][ix] * np.abs(a)
    else:
        grad = rows["cs"][ix] - Pz
    big = np.abs(grad) > tol  # below tol a gradient is rounding: a decides (no 2-cycles)
    trial = a - c["gamma"][ix] * np.where(big, grad, 0.0)
    fb = free & big  # a free row whose equation could not be met: to the bound grad points to
    down = np.where(fb, grad > 0, trial <= lo) | rows["fixed"][ix]  # (padding: held at lo)
    up = np.where(fb, grad < 0, trial >= hi) & ~down
    return ((up & c["nhi"][ix]).view(np.int8) - (down & c["nlo"][ix]).view(np.int8)), grad


def _with_rhs(sy: dict[str, Any], g: np.ndarray, a_prev: np.ndarray) -> dict[str, Any]:
    """The system ``sy`` of :func:`_system_matrices` (not changed; its factorizations,
    ``sy["fac"]``, are shared) with the right side ``f = g - P^T (a_fix - c s / (c q))`` of
    ``z^T H z / 2 - f^T z`` and the free linear data rows' previous duals ``a0`` (from
    ``a_prev``)."""
    a0 = (np.where(sy["on"], a_prev[np.arange(g.shape[0])[:, None], sy["sel"]], 0.0) if sy["F"]
          else np.zeros((g.shape[0], 0)))
    return dict(sy, f=g - sy["fP"], a0=a0)


def _system_matrices(rows: dict[str, np.ndarray], st: np.ndarray, act: np.ndarray | slice,
                     mu: np.ndarray, F_min: int = 0) -> dict[str, Any]:
    """The parts of the active sets' system that do not depend on ``g`` (cached across calls
    while the active sets and ``mu`` stay, :func:`composite_active_set_prox`): the held duals
    ``a_fix``, the curvature ``H = mu I + sum_{free q rows} P_r P_r^T / (c_r q_r)``, ``fP =
    P^T (a_fix - c s / (c q))``, the coordinates ``fx`` fixed to ``zfix`` by free unit rows
    (the first row of a coordinate, ``owner``, takes its dual) and the free linear data rows
    ``Pd z = bd`` (gathered into ``F`` slots ``sel``, ``on`` where used; at least ``F_min``
    slots, at most one per data row); ``fac`` holds the factorizations of
    :func:`_affine_solve` / :func:`_ball_solve` once computed."""
    P, cs, fixed, lo, hi = (rows[key][act] for key in ("P", "cs", "fixed", "lo", "hi"))
    n_act, R, d = P.shape
    coord, unit, tail = rows["coord"], rows["unit"], rows["tail"]
    free = (st == 0) & ~fixed
    a_fix = np.where(st < 0, lo, np.where(st > 0, hi, 0.0))  # (free rows: 0)
    a_fix[fixed] = 0.0
    if rows.get("any_q", True):
        cq = rows["cq"][act]
        freeq, freel = free & (cq > 0), free & (cq == 0)
        wq = np.where(freeq, 1.0 / np.where(freeq, cq, 1.0), 0.0)
        fP = np.einsum("krd,kr->kd", P, a_fix - wq * cs)
    else:  # no row with q > 0 (rows["any_q"] False)
        freeq, freel, wq = np.zeros_like(free), free, np.zeros(st.shape)
        fP = np.einsum("krd,kr->kd", P, a_fix)
    # coordinates fixed by free unit rows (reversed: the first row of a coordinate wins)
    fx = np.zeros((n_act, d), dtype=bool)
    zfix = np.zeros((n_act, d))
    owner = np.full((n_act, d), -1)
    if unit.size:
        kk, uu = np.nonzero(freel[:, tail])
        kk, urows = kk[::-1], unit[uu[::-1]]
        cj = coord[urows]
        fx[kk, cj] = True
        zfix[kk, cj] = cs[kk, urows]
        owner[kk, cj] = urows
    H = mu[:, None, None] * np.eye(d)
    any_q = bool(freeq.any())
    if any_q:
        H = H + np.einsum("krd,kre->kde", P * wq[:, :, None], P)
    datal = freel
    if isinstance(tail, slice):  # the data rows come first: a view
        datal = freel[:, :tail.start]
    elif unit.size:
        datal = freel.copy()
        datal[:, unit] = False
    F = min(max(int(datal.sum(axis=1).max(initial=0)), F_min), datal.shape[1])
    if F:
        sel = np.argsort(~datal, axis=1, kind="stable")[:, :F]
        node = np.arange(n_act)[:, None]  # (with sel: fancy indexing, row by row)
        on = datal[node, sel]
        Pd = np.where(on[:, :, None], P[node, sel], 0.0)
        bd = np.where(on, cs[node, sel] - np.einsum("kfd,kd->kf", Pd, zfix), 0.0)
    else:
        sel, on = np.zeros((n_act, 0), dtype=np.int64), np.zeros((n_act, 0), dtype=bool)
        Pd, bd = np.zeros((n_act, 0, d)), np.zeros((n_act, 0))
    return {"P": P, "cs": cs, "freeq": freeq, "wq": wq, "a_fix": a_fix, "fP": fP, "fx": fx,
            "zfix": zfix, "owner": owner, "H": H, "F": F, "sel": sel, "on": on, "Pd": Pd,
            "bd": bd, "any_q": any_q, "fac": {}}


def _updated_system(sy: dict[str, Any], sub: dict[str, Any], chg: np.ndarray
                    ) -> dict[str, Any] | None:
    """The system ``sy`` of every node (:func:`_system_matrices`, with the factorizations it
    has) with the nodes ``chg`` replaced by their system ``sub`` (the free rows' slots padded
    to ``sy``'s ``F``; the same factorizations computed for ``sub`` first); None where they do
    not fit (more free rows, other kinds of factors, a ball split into parts)."""
    for name, factors in (("affine", _affine_factors), ("ball", _ball_factors)):
        if name in sy["fac"]:
            factors(sub)
    return _merged(sy, sub, chg, sy["P"].shape[0])


def _merged(full: dict[str, Any], sub: dict[str, Any], chg: np.ndarray, k: int
            ) -> dict[str, Any] | None:
    """``full`` (``k`` nodes) with the rows ``chg`` of its per-node arrays from ``sub``
    (zero-padded where ``sub``'s free-row axes are shorter: no row there), recursively; None
    where they do not fit."""
    out: dict[Any, Any] = {}
    for key, val in full.items():
        new = sub.get(key)
        if isinstance(val, dict):
            val = _merged(val, new, chg, k) if isinstance(new, dict) and set(new) == set(val) \
                else None
        elif isinstance(val, np.ndarray) and val.ndim and val.shape[0] == k:
            val = _merged_rows(val, new, chg)
        elif key == "F":
            val = val if new <= val else None
        elif val is not None or new is not None:
            val = val if isinstance(val, (bool, np.bool_)) and val == new else None
        else:
            out[key] = None
            continue
        if val is None:
            return None
        out[key] = val
    return out


def _merged_rows(val: np.ndarray, new: Any, chg: np.ndarray) -> np.ndarray | None:
    """A copy of ``val`` with the rows ``chg`` set to ``new`` zero-padded to its shape (None
    where ``new`` does not fit)."""
    if not isinstance(new, np.ndarray) or new.ndim != val.ndim \
            or any(b > a for a, b in zip(val.shape[1:], new.shape[1:], strict=True)):
        return None
    val = val.copy()
    if new.shape[1:] != val.shape[1:]:
        val[chg] = 0
    val[(chg,) + tuple(slice(0, b) for b in new.shape[1:])] = new
    return val


def _merge_later(cache: dict | None, later: list, k: int) -> None:
    """Merges the systems that the later active-set steps of a call of
    :func:`composite_active_set_prox` built for a few nodes (``later``: ``(kind, nodes,
    active sets, system)``, in order) into the call's cached system of every node (in place,
    :func:`_merge_into`), so that the next call starts from the final active sets without
    rebuilding them: a node's last system is that of its final active set.  A system that
    does not fit (other kinds of factors, a ball split into parts) drops the cached one."""
    for kind, nodes, st, sy in later:
        hit = cache.get(kind)
        if hit is None:
            continue
        if _merge_into(hit[2], sy, nodes, k):
            hit[0][nodes] = st
        else:
            del cache[kind]


def _merge_into(full: dict[str, Any], sub: dict[str, Any], nodes: np.ndarray, k: int,
                seen: set[int] | None = None) -> bool:
    """Writes the system ``sub`` of the nodes ``nodes`` (:func:`_system_matrices`, with its
    factorizations) into the rows ``nodes`` of ``full``'s per-node arrays (``k`` rows), in
    place and recursively; a free-row axis shorter in ``sub`` is zero-padded (no row there),
    a longer one grows ``full``'s (zero-padded for the other nodes).  ``P`` and ``cs`` (the
    rows themselves) are the same in both.  Returns False where they do not fit (a factor
    ``full`` has and ``sub`` has not, a per-node array of another length, another
    ``any_q``); ``full`` is then inconsistent and must be dropped.  ``seen``: the arrays
    written so far (one array under two names, as ``B`` and ``H`` in :func:`_ball_factors`,
    is copied before its second write)."""
    seen = set() if seen is None else seen
    n = nodes.size
    # the rows themselves, and (no free q row in either: the same as before) H = mu I
    skip = _SAME_ROWS if full.get("any_q") is not False or sub.get("any_q") is not False \
        else _SAME_ROWS_NO_Q
    for key, val in list(full.items()):
        if key in skip:
            continue
        new = sub.get(key)
        if type(val) is np.ndarray:
            if not (type(new) is np.ndarray and new.shape[0] == n and val.shape[0] == k
                    and val.ndim == new.ndim > 0):
                return False
            if id(val) in seen:
                full[key] = val = val.copy()
            if new.shape[1:] == val.shape[1:]:
                val[nodes] = new
            else:
                full[key] = val = _padded_rows(val, new, nodes)
            seen.add(id(val))
        elif type(val) is dict:
            if type(new) is not dict or not _merge_into(val, new, nodes, k, seen):
                return False
        elif key == "F":
            full[key] = max(val, new)
        elif not (val is None and new is None) and not (
                isinstance(val, (bool, np.bool_)) and val == new):
            return False
    return True


#: Keys of a system (:func:`_system_matrices`) that :func:`_merge_into` leaves: the rows
#: themselves, and where no node has a free ``q`` row, also ``H = mu I`` and the ``q`` rows'
#: masks and weights (all ``False``/``0``).
_SAME_ROWS = frozenset(("P", "cs"))
_SAME_ROWS_NO_Q = frozenset(("P", "cs", "freeq", "wq", "H"))


def _padded_rows(val: np.ndarray, new: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """``val`` with its rows ``nodes`` set to ``new`` where their trailing axes (free-row
    slots) differ: ``new`` zero-padded where shorter; ``val`` grown (zero-padded for the other
    rows, a new array) where ``new`` is longer."""
    shape = tuple(max(a, b) for a, b in zip(val.shape, new.shape, strict=True))
    if shape[1:] != val.shape[1:]:
        grown = np.zeros((val.shape[0],) + shape[1:], dtype=val.dtype)
        grown[tuple(slice(0, a) for a in val.shape)] = val
        val = grown
    val[nodes] = 0
    val[(nodes,) + tuple(slice(0, b) for b in new.shape[1:])] = new
    return val


def _leaving_multiplier(sy: dict[str, Any], z: np.ndarray, ad: np.ndarray, ad_b: np.ndarray,
                        sig: np.ndarray, fb: np.ndarray, state: np.ndarray, fixed: np.ndarray,
                        lo: np.ndarray, hi: np.ndarray, l1m: np.ndarray) -> np.ndarray:
    """The 1-norm ball's multiplier ``nu1`` for nodes whose free linear rows fix ``z`` outside
    the ball (``solve_l1_ball`` of :func:`composite_active_set_prox`): ``nu1`` cannot move
    ``z``, but the row duals ``a(nu1) = a_0 + nu1 a_b`` (:func:`_row_duals` at ``nu1 = 0`` and
    ``1``, ``z`` fixed) move with it; the smallest ``nu1 >= 0`` at which a free row's dual
    reaches its interval ``[lo_r - nu1 [r is l1], hi_r + nu1 [r is l1]]`` (exceeded by ``1e-9``
    relative, so the next step holds that row: the active set changes) is returned, ``0``
    where no free dual moves towards a bound (the node fails the KKT check)."""
    a0 = _row_duals(sy, z, ad, None)
    a1 = _row_duals(dict(sy, a_fix=sy["a_fix"] + sig, f=sy["f"] + fb), z, ad + ad_b, None)
    slope = a1 - a0
    free = (state == 0) & ~fixed
    up, down = slope - l1m, slope + l1m  # the dual's speed relative to each bound
    tiny = 1e-12 * (np.abs(a0) + np.abs(a1) + 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_hi = np.where(free & (up > tiny), (hi - a0) / up, np.inf)
        t_lo = np.where(free & (down < -tiny), (lo - a0) / down, np.inf)
    t = np.minimum(t_hi, t_lo).min(axis=1, initial=np.inf)
    return np.where(np.isfinite(t), np.maximum(t, 0.0) * (1 + 1e-9) + 1e-300, 0.0)


def _affine_solve(sy: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``z`` minimizing ``z^T H z / 2 - f^T z`` with the fixed coordinates at ``zfix`` and
    ``Pd z = bd`` on the others, and the duals ``ad`` of those rows: with ``H = L L^T``
    (Cholesky, on the free coordinates), ``u = L^T z`` is the projection of ``L^{-1} f`` onto
    ``{(Pd L^{-T}) u = bd}`` by one pseudo-inverse (:func:`_affine_factors`; least squares
    where the rows are inconsistent), and ``ad`` is the solution of ``Pd^T ad = f - H z``
    nearest ``a0``."""
    fac = _affine_factors(sy)
    zfix, on = sy["zfix"], sy["on"]
    fr, Li, li = fac["fr"], fac["Li"], fac["li"]
    if Li is not None:
        u0 = np.einsum("kij,kj->ki", Li, np.where(fr, sy["f"] - np.einsum("kij,kj->ki", sy["H"],
                                                                         zfix), zfix))

        def back(u: np.ndarray) -> np.ndarray:  # L^{-T} u
            return np.einsum("kji,kj->ki", Li, u)
    else:  # zfix is 0 on the free coordinates
        u0 = li * np.where(fr, sy["f"], zfix)

        def back(u: np.ndarray) -> np.ndarray:
            return li * u
    if not sy["F"]:
        return np.where(fr, back(u0), zfix), np.zeros((zfix.shape[0], 0))
    A, Ainv = fac["A"], fac["Ainv"]
    # (A, bd and Ainv are 0 in the unused slots)
    u = u0 + np.einsum("kdf,kf->kd", Ainv, sy["bd"] - np.einsum("kfd,kd->kf", A, u0))
    a0 = sy["a0"]
    ad = a0 + np.einsum("kdf,kd->kf", Ainv, u0 - u - np.einsum("kfd,kf->kd", A, a0))
    return np.where(fr, back(u), zfix), np.where(on, ad, 0.0)


def _affine_factors(sy: dict[str, Any]) -> dict[str, Any]:
    """The factors of :func:`_affine_solve` that depend on the active sets only (computed once
    per system, kept in ``sy["fac"]``): ``fr`` (free coordinates), ``Li = L^{-1}`` of ``Hr = L
    L^T`` (``Hr``: ``H`` on the free coordinates, ``I`` on the others) or, where ``H = mu I``,
    ``li`` (``L = sqrt(mu) I`` there), ``A = Pd L^{-T}`` and its pseudo-inverse ``Ainv``
    (:func:`_pinv_rows`)."""
    fac = sy["fac"].setdefault("affine", {})
    if fac:
        return fac
    H, fx, on, F = sy["H"], sy["fx"], sy["on"], sy["F"]
    d = fx.shape[1]
    fr = ~fx
    Li = li = None
    if sy["any_q"]:
        eye = np.eye(d)
        Li = np.linalg.inv(np.linalg.cholesky(np.where(fr[:, :, None] & fr[:, None, :], H,
                                                       eye)))
    else:
        li = np.where(fr, 1.0 / np.sqrt(H[:, 0, :1]), 1.0)
    fac.update(fr=fr, Li=Li, li=li, A=np.zeros((fr.shape[0], 0, d)),
               Ainv=np.zeros((fr.shape[0], d, 0)))  # (no free linear row: empty)
    if F:
        Pf = np.where(fr[:, None, :], sy["Pd"], 0.0)
        A = np.einsum("kfj,kij->kfi", Pf, Li) if Li is not None else Pf * li[:, None, :]
        fac.update(A=A, Ainv=_pinv_rows(A, on))
    return fac


def _ball_solve(sy: dict[str, Any], r: np.ndarray, nu0: np.ndarray, newton_iter: int = 60
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_affine_solve` with the ball ``||z||_2 <= r``: ``z = z0 + y`` with ``z0`` the
    fixed coordinates plus the least-norm solution ``D^+ bd`` of the free linear rows ``D z =
    bd`` on the free coordinates (:func:`_pinv_rows`), and ``y`` in their null space
    (projector ``Pi = I - D^+ D`` there) minimizing ``y^T H y / 2 - b^T y``, ``b = Pi (f - H
    z0)``, over ``||y||^2 <= rho^2 = r^2 - ||z0||^2`` (the three parts are orthogonal): a
    trust-region problem with ``H`` positive definite, exact in the eigenbasis of ``Pi H Pi``
    (``y(nu) = sum_i c_i q_i / (lambda_i + nu)``): ``nu = 0`` where ``y(0)`` is inside, else
    Newton's method on the secular equation ``psi(nu) = 1/||y(nu)|| = 1/rho`` (Moré and
    Sorensen): ``psi`` is concave and increasing, so one step from the last multiplier
    ``nu0`` lands below the root (clipped at ``0``) and the next ones increase to it
    quadratically.  Returns ``(z, ad, nu)``, ``ad`` the solution of ``D^T ad = f - (H + nu I)
    z`` nearest ``a0``."""
    H, fx, zfix, on, F = sy["H"], sy["fx"], sy["zfix"], sy["on"], sy["F"]
    k, d = zfix.shape
    fac = _ball_factors(sy)
    fr, z0, D, Dp, Pi, B, lam, Qv = (fac[key] for key in ("fr", "z0", "D", "Dp", "Pi", "B",
                                                          "lam", "Qv"))
    if not sy["any_q"]:  # H = mu I: y(nu) = b / (mu + nu), nu = ||b|| / rho - mu
        b = fr * (sy["f"] - H[:, 0, :1] * z0)
        for _ in range(2 if F else 0):  # projected onto the null space, twice (rounding)
            b -= fr * np.einsum("kdf,kf->kd", Dp, np.einsum("kfd,kd->kf", D, b))
        c = b
    else:
        if Pi is not None:
            b = (Pi @ (sy["f"] - (H @ z0[:, :, None])[:, :, 0])[:, :, None])[:, :, 0]
        else:  # no fixed coordinate, no linear row: Pi = I
            b = sy["f"]
        c = np.einsum("kdi,kd->ki", Qv, b)
    c2 = c * c
    # rho2 <= 0: the active set's rows leave no point in the ball (it must change)
    rho = np.sqrt(np.maximum(r * r - np.einsum("kd,kd->k", z0, z0), (1e-8 * r) ** 2))
    out = (c2 / (lam * lam)).sum(axis=1) > rho * rho  # ||z(0)|| > r: the ball binds
    nu = np.where(out, nu0, 0.0)
    tol = 4 * np.finfo(float).eps * lam[:, 0]
    for it in range(newton_iter):
        inv = 1.0 / (lam + nu[:, None])
        t = c2 * inv * inv
        n2 = t.sum(axis=1)
        step = (1.0 / rho - 1.0 / np.sqrt(n2)) * n2**1.5 / (t * inv).sum(axis=1)
        new = np.where(out, np.maximum(nu + step, 0.0), 0.0)
        moving = np.abs(new - nu) > tol + 4 * np.finfo(float).eps * nu
        nu = new
        if it and not moving.any():
            break
    y = c / (lam + nu[:, None])
    if Qv is not None:
        y, nu = _refined_ball_point(B, b, lam, Qv, nu, rho, out)
    ny = np.linalg.norm(y, axis=1)
    y *= np.where(out, rho / np.maximum(ny, 1e-300), 1.0)[:, None]  # ||y|| = rho to rounding
    Za = np.where(fx, zfix, z0 + y)
    if not F:
        return Za, np.zeros((k, 0)), nu
    res = fr * (sy["f"] - np.einsum("kij,kj->ki", H, Za) - nu[:, None] * Za)
    a0 = sy["a0"]
    ad = a0
    for _ in range(2):  # the duals nearest a0, refined once
        ad = ad + np.einsum("kdf,kd->kf", Dp, res - np.einsum("kfd,kf->kd", D, ad))
    return Za, np.where(on, ad, 0.0), nu


def _ball_factors(sy: dict[str, Any]) -> dict[str, Any]:
    """The parts of :func:`_ball_solve` that depend on the active sets only (computed once per
    system, kept in ``sy["fac"]``): ``fr``, the free linear rows ``D`` on the free coordinates
    and their pseudo-inverse ``Dp`` (:func:`_pinv_rows`), ``z0`` (fixed coordinates plus ``D^+
    bd``, refined once), and the eigenbasis ``lam``, ``Qv`` of the curvature ``B = Pi H Pi + I -
    Pi`` on the null space (projector ``Pi``; ``lam = mu`` and ``Qv`` None where ``H = mu
    I``)."""
    fac = sy["fac"].setdefault("ball", {})
    if fac:
        return fac
    H, fx, zfix, on, F = sy["H"], sy["fx"], sy["zfix"], sy["on"], sy["F"]
    d = fx.shape[1]
    z0 = zfix.copy()
    fr = (~fx).astype(float)
    Pi = B = Qv = None
    D, Dp = np.zeros((fr.shape[0], 0, d)), np.zeros((fr.shape[0], d, 0))  # no free linear row
    if F:
        D = sy["Pd"] * fr[:, None, :]
        Dp = _pinv_rows(D, on)
        for _ in range(2):  # least-norm solution, refined once (ill-conditioned rows)
            z0 += fr * np.einsum("kdf,kf->kd", Dp, sy["bd"] - np.einsum("kfd,kd->kf", D, z0))
    if not sy["any_q"]:
        lam = H[:, 0, :1] * np.ones((1, d))
    else:
        B = H
        if F or fx.any():
            Pi = fr[:, :, None] * np.eye(d)
            if F:
                Pi -= Dp @ D
                Pi *= fr[:, :, None] * fr[:, None, :]
            B = Pi @ H @ Pi + np.eye(d) - Pi
        lam, Qv = np.linalg.eigh(B)
    fac.update(fr=fr, z0=z0, D=D, Dp=Dp, Pi=Pi, B=B, lam=lam, Qv=Qv)
    return fac


def _refined_ball_point(B: np.ndarray, b: np.ndarray, lam: np.ndarray, Qv: np.ndarray,
                        nu: np.ndarray, rho: np.ndarray, out: np.ndarray, steps: int = 1
                        ) -> tuple[np.ndarray, np.ndarray]:
    """``y = (B + nu I)^{-1} b`` accurate componentwise, with ``nu`` (where ``out``) corrected
    so that ``||y|| = rho``: the eigenbasis ``B ~ Qv diag(lam) Qv^T`` is accurate relative to
    ``||B||`` only, too little for badly scaled data (graded curvatures), so every solve takes
    one step of iterative refinement (residual ``b - (B + nu I) y`` in full), and ``steps``
    Newton steps on the secular equation use the refined ``||y(nu)||``.  Returns ``(y,
    nu)``."""
    def solve(rhs: np.ndarray) -> np.ndarray:
        return np.einsum("kdi,ki->kd", Qv, np.einsum("kdi,kd->ki", Qv, rhs)
                         / (lam + nu[:, None]))

    def refined() -> tuple[np.ndarray, bool]:
        """The refined solve, and whether the refinement moved it beyond rounding."""
        y = solve(b)
        dy = solve(b - np.einsum("kij,kj->ki", B, y) - nu[:, None] * y)
        return y + dy, bool((np.abs(dy) > 1e-15 * np.abs(y).max(axis=1, keepdims=True)).any())

    y, moved = refined()
    # the secular Newton steps again where the refinement moved a point (graded data)
    for _ in range(steps if out.any() and moved else 0):
        ny = np.linalg.norm(y, axis=1)
        slope = np.einsum("kd,kd->k", y, solve(y)) / ny**3
        nu = np.where(out, np.maximum(nu + (1.0 / rho - 1.0 / ny) / slope, 0.0), 0.0)
        y = refined()[0]
    return y, nu


def _pinv_rows(A: np.ndarray, on: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """``pinv(A_i)``, ``(k, d, F)``, of ``k`` blocks ``A_i`` ``(F, d)`` whose rows ``on`` come
    first (the others are zero padding): ``Q R^{-T}`` from the QR factorization ``A_i^T = Q R``
    of the first ``min(F, d)`` rows (a unit diagonal in ``R``'s padding) where the rows are
    independent (``|R_jj| > rtol max |R_jj|``), else by SVD (``numpy.linalg.pinv``: more rows
    than ``d``, or dependent rows; also every block where at most 8 have two rows or more,
    whose one SVD call costs less than the QR path's steps); ``0`` where no row is on, ``a /
    ||a||^2`` for one row ``a``."""
    k, F, d = A.shape
    Fq = min(F, d)
    out = np.zeros((k, d, F))
    nf = on.sum(axis=1)
    one = np.flatnonzero(nf == 1)  # one row a (the first): pinv = a / ||a||^2
    if one.size:
        a = A[one, 0]
        n2 = np.einsum("kd,kd->k", a, a)
        out[one, :, 0] = a / np.where(n2 > 0, n2, np.inf)[:, None]
    some = np.flatnonzero(nf > 1)
    if some.size == 0:
        return out
    if some.size <= 8:  # a few blocks (later active-set steps): one SVD call costs less
        out[some] = np.linalg.pinv(A[some])
        return out
    onq = on[some, :Fq]
    Q, Rm = np.linalg.qr(A[some, :Fq].transpose(0, 2, 1))
    diag = np.abs(np.diagonal(Rm, axis1=1, axis2=2))
    big = np.where(onq, diag, 0.0).max(axis=1, initial=0.0)
    good = (~onq | (diag > rtol * big[:, None])).all(axis=1) & (nf[some] <= Fq)
    Rp = np.where(good[:, None, None], Rm, np.eye(Fq)) + np.eye(Fq) * (~onq)[:, :, None]
    out[some, :, :Fq] = (Q @ np.linalg.inv(Rp).transpose(0, 2, 1)) * onq[:, None, :]
    bad = some[~good]
    if bad.size:
        out[bad] = np.linalg.pinv(A[bad])
    return out


def _row_duals(sy: dict[str, Any], Za: np.ndarray, ad: np.ndarray, nu: np.ndarray | None
               ) -> np.ndarray:
    """Every row's dual at ``z``: held rows their bound, free ``q`` rows ``(P_r^T z - c_r s_r)
    / (c_r q_r)``, free linear data rows ``ad``, and a free unit row owning its coordinate the
    stationarity residual ``f - (H + nu I) z - Pd^T ad`` there."""
    if sy["any_q"]:
        P, cs, wq, freeq = sy["P"], sy["cs"], sy["wq"], sy["freeq"]
        a = np.where(freeq, wq * ((P @ Za[:, :, None])[:, :, 0] - cs), sy["a_fix"])
    else:  # no free q row
        a = sy["a_fix"].copy()
    if sy["F"]:  # the used slots only: a merged system pads ``sel`` with repeated indices
        kk, ff = np.nonzero(sy["on"])
        a[kk, sy["sel"][kk, ff]] = ad[kk, ff]
    fx = sy["fx"]
    if fx.any():
        # (H = mu I where no free q row; ad is 0 in the unused slots)
        res = sy["f"] - (np.einsum("kij,kj->ki", sy["H"], Za) if sy["any_q"]
                         else sy["H"][:, 0, :1] * Za)
        if nu is not None:
            res -= nu[:, None] * Za
        if sy["F"]:
            res -= (sy["Pd"].transpose(0, 2, 1) @ ad[:, :, None])[:, :, 0]
        ki, ji = np.nonzero(fx)
        a[ki, sy["owner"][ki, ji]] = res[ki, ji]
    return a


def kkt_certified(P: np.ndarray, cs: np.ndarray, cq: np.ndarray, lo: np.ndarray,
                  hi: np.ndarray, fixed: np.ndarray, mu: np.ndarray, g: np.ndarray,
                  Z: np.ndarray, a: np.ndarray, rtol: float = KKT_RTOL, *,
                  nu: np.ndarray | None = None, radius: np.ndarray | None = None
                  ) -> np.ndarray:
    """Per node: whether ``(z, a)`` meets the KKT conditions of the problem of
    :func:`composite_active_set_prox` to ``rtol`` relative to the magnitudes of the terms:
    stationarity ``mu z - g + P^T a = 0``, every dual in its interval, and ``grad_r = c_r (s_r
    + q_r a_r) - P_r^T z`` at most 0 where ``a_r > lo_r`` and at least 0 where ``a_r < hi_r``
    (relative to ``|c_r s_r| + |c_r q_r a_r| + |P_r|^T (|mu z| + |g| + |P|^T |a|) / mu``); then
    ``z`` is the exact minimizer up to that residual over the modulus ``mu``.  With balls
    ``||z||_2 <= radius_i`` and their multipliers ``nu >= 0``: stationarity with ``mu + nu``,
    ``||z|| <= r (1 + rtol)`` and, where ``nu > 0``, ``||z|| >= r (1 - rtol)``."""
    if nu is not None:
        mu = mu + nu
    with np.errstate(over="ignore", invalid="ignore"):
        a = np.where(fixed, 0.0, a)
        absa, absP, muZ = np.abs(a), np.abs(P), mu[:, None] * Z
        stat = np.abs(muZ - g + np.einsum("krd,kr->kd", P, a))
        stat_scale = np.abs(muZ) + np.abs(g) + np.einsum("krd,kr->kd", absP, absa)
        # z's own scale is that of the terms it is computed from, (|g| + |P|^T |a|) / mu
        zscale = np.einsum("krd,kd->kr", absP, stat_scale / mu[:, None])
        if cq.any():
            grad = cs + cq * a - np.einsum("krd,kd->kr", P, Z)
            tol = rtol * (np.abs(cs) + cq * absa + zscale)
        else:  # (the same without the zero terms)
            grad = cs - np.einsum("krd,kd->kr", P, Z)
            tol = rtol * (np.abs(cs) + zscale)
        rows_ok = ((a >= lo) & (a <= hi) & ((a <= lo) | (grad <= tol))
                   & ((a >= hi) | (grad >= -tol)))
        rows_ok |= fixed
        # every condition of a node at once: rows, stationarity, finite z and duals
        ok = np.concatenate((rows_ok, stat <= rtol * stat_scale, np.isfinite(Z),
                             np.isfinite(a)), axis=1).all(axis=1)
    if radius is not None:
        nz = np.linalg.norm(Z, axis=1)
        nu = np.zeros_like(nz) if nu is None else nu
        ok &= (nz <= radius * (1 + rtol)) & ((nu <= 0) | (nz >= radius * (1 - rtol))) \
            & (nu >= 0)
    return ok


class CompositeProxBatch(DataFitBatch):
    """Piecewise-quadratic data fits (:attr:`~gtvmodel.terms.losses.Loss.piecewise_quadratic`)
    with ``l1``, a coordinate box per node (``box = (lo, hi)``, ``(k, d)`` each, ``+-inf``
    where unbounded; None: no constraint) and a Euclidean ball ``||z||_2 <= radius_i``
    (``inf``: none): PU (32) exactly and vectorized by :func:`composite_active_set_prox`, its
    ``l1`` and box terms as extra rows, the ball inside each active-set step (its multiplier
    by Newton's method on the secular equation, :func:`_ball_solve`).  A node whose answer
    fails the KKT check takes one CVXPY solve of its PU (32) instead (counted in
    :attr:`fallbacks`)."""

    def __init__(self, cls: type[Loss], nodes: np.ndarray, losses: Any, n: int, d: int,
                 box: tuple[np.ndarray, np.ndarray] | None = None,
                 radius: np.ndarray | None = None, radius1: np.ndarray | None = None):
        super().__init__(cls, nodes, losses, n, d)
        k = self.ms.size
        if box is None:
            box = (np.full((k, d), -np.inf), np.full((k, d), np.inf))
        self.box = (np.broadcast_to(np.asarray(box[0], dtype=float), (k, d)),
                    np.broadcast_to(np.asarray(box[1], dtype=float), (k, d)))
        #: Radii of the nodes' Euclidean balls ``||z||_2 <= r_i`` (``inf``: none).
        self.radius = np.broadcast_to(np.asarray(np.inf if radius is None else radius,
                                                 dtype=float), (k,))
        #: Radii of the nodes' 1-norm balls ``||z||_1 <= r_i`` (``inf``: none).
        self.radius1 = np.broadcast_to(np.asarray(np.inf if radius1 is None else radius1,
                                                  dtype=float), (k,))
        self._balls = tuple(r if np.isfinite(r).any() else None
                            for r in (self.radius, self.radius1))
        #: Node updates that failed the KKT check and were solved by CVXPY instead.
        self.fallbacks = 0

    @property
    def kind(self) -> str:
        """``"<loss kind>-active-set"`` (the path's name in ``NodeUpdates.describe()``)."""
        return f"{self.cls.kind}-active-set"

    def prox_supported(self) -> np.ndarray:
        """Every node whose loss is piecewise quadratic (any ``l1``, ``l2``; computed once)."""
        ok = self.__dict__.get("_prox_ok")
        if ok is None:
            ok = self.__dict__["_prox_ok"] = np.array(
                [ls.piecewise_quadratic for ls in self.losses], dtype=bool)
        return ok

    def _padded(self) -> dict[str, np.ndarray]:
        """The rows of :func:`composite_active_set_prox` padded per node (cached): the data
        rows (``max_i m_i`` slots), then ``d`` ``l1`` rows if any ``eta_i > 0``, ``d`` upper and
        ``d`` lower box rows if any bound is finite."""
        pad = self.__dict__.get("_pad")
        if pad is not None:
            return pad
        k, m, d = self.ms.size, self.max_rows(), self.d
        blocks = [self._data_block()]
        data = blocks[0]
        eta = self.l1[:, None] * np.ones((1, d))
        lo_b, hi_b = self.box
        zero = np.zeros((k, d))
        ball1 = np.isfinite(self.radius1)[:, None] * np.ones((1, d), dtype=bool)
        if (eta > 0).any() or ball1.any():  # eta |z_j| = max_{|a| <= eta} a z_j (with a
            # 1-norm ball: eta + nu1, nu1 its multiplier)
            blocks.append(_unit_rows(zero, -eta, eta, (eta == 0) & ~ball1))
        l1_block = len(blocks) - 1 if len(blocks) > 1 else None
        if np.isfinite(hi_b).any():  # z_j <= hi_j: a >= 0, s = hi_j
            fin = np.isfinite(hi_b)
            blocks.append(_unit_rows(np.where(fin, hi_b, 0.0), zero, np.where(fin, np.inf, 0.0),
                                     ~fin))
        if np.isfinite(lo_b).any():  # z_j >= lo_j: a <= 0, s = lo_j
            fin = np.isfinite(lo_b)
            blocks.append(_unit_rows(np.where(fin, lo_b, 0.0), np.where(fin, -np.inf, 0.0), zero,
                                     ~fin))
        pad = {name: np.concatenate([b[name] for b in blocks], axis=1) for name in data}
        pad["coord"] = np.concatenate([np.full(m, -1)] + [np.arange(d)] * (len(blocks) - 1))
        pad["l1row"] = np.concatenate([np.full(m if i == 0 else d, i == l1_block and i > 0)
                                       for i in range(len(blocks))])
        self.__dict__["_pad"] = pad
        return pad

    def _slot(self) -> np.ndarray:
        """Each sample row's slot among its node's padded data rows."""
        return np.arange(self.Xs.shape[0]) - self.starts[self.local]

    def _data_block(self) -> dict[str, np.ndarray]:
        """The data rows of :meth:`_padded`, ``max_i m_i`` slots per node: ``P_r = c_r x_r``
        and the row conjugate's ``c s``, ``c q`` (from three of its values) and interval."""
        k, m, M, d = self.ms.size, self.max_rows(), self.Xs.shape[0], self.d
        slot = self._slot()
        conj = self.cls._ell_conj
        f0, f1, fm = (conj(np.full(M, t), self.y, self.p) for t in (0.0, 1.0, -1.0))
        lo_r, hi_r = (np.broadcast_to(np.asarray(b, dtype=float), (M,))
                      for b in self.cls._ell_conj_bounds(self.y, self.p))
        data = {"P": np.zeros((k, m, d)), "cs": np.zeros((k, m)), "cq": np.zeros((k, m)),
                "lo": np.zeros((k, m)), "hi": np.zeros((k, m)),
                "fixed": np.ones((k, m), dtype=bool)}
        data["P"][self.local, slot] = self.c[:, None] * self.Xs
        for name, rows in (("cs", self.c * 0.5 * (f1 - fm)), ("cq", self.c * (f1 + fm - 2 * f0)),
                           ("lo", lo_r), ("hi", hi_r)):
            data[name][self.local, slot] = rows
        data["fixed"][self.local, slot] = False
        return data

    def _prox(self, V, tau, W0):
        """:func:`composite_active_set_prox` on ``L_i(z) + eta_i ||z||_1 + kappa_i ||z||^2 +
        iota_{box_i}(z) + iota{||z||_2 <= r_i} + ||z - v_i||^2 / (2 tau_i)``, started from the
        last call's active sets (Algorithm 1 changes them little), else from ``W0`` (else
        ``v_i``) clipped to the box; nodes failing the KKT check take :meth:`cvxpy_prox`."""
        k = self.ms.size
        mu = 2.0 * self.l2 + 1.0 / tau
        start = self.__dict__.get("_dual_start")
        if start is not None and start[0].shape[0] != k:
            start = None
        # the starting point matters only without a last active set (every z is solved for)
        Z = V if start is not None else np.clip(V if W0 is None else np.asarray(W0, dtype=float),
                                                *self.box)
        radius, radius1 = self._balls
        Z, ok, self.__dict__["_dual_start"] = composite_active_set_prox(
            **self._padded(), mu=mu, g=V / tau[:, None], Z0=Z, start=start, radius=radius,
            radius1=radius1, cache=self.__dict__.setdefault("_system_cache", {}))
        bad = np.flatnonzero(~ok)
        if bad.size:
            self.fallbacks += int(bad.size)
            W = np.array([self.cvxpy_prox(int(j), V[j], float(tau[j])) for j in bad])
            Wp, polished = self._polished(bad, W, mu, V, tau)
            keep = self._better_than(bad, Z[bad], W, V[bad], tau[bad])
            Z[bad] = np.where(polished[:, None], Wp,
                              np.where(keep[:, None], Z[bad], W))
        return Z

    def _polished(self, idx: np.ndarray, W: np.ndarray, mu: np.ndarray, V: np.ndarray,
                  tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The CVXPY answers ``W`` of the nodes ``idx`` made exact: the active sets they
        identify (:func:`_states_at`) start :func:`composite_active_set_prox` on those nodes,
        which solves them exactly (and moves on where a row was misidentified); returns the
        answers and where they pass :func:`kkt_certified` (there they replace ``W`` and their
        active sets start the next call).  The active-set steps can cycle on a
        badly conditioned node from far away (Huber with ``l1`` at condition ``1e4``), while
        the solver's point, ``1e-8`` off, lies on the solution's active set."""
        pad = self._padded()
        rows = {key: pad[key][idx] for key in ("P", "cs", "cq", "lo", "hi", "fixed")}
        radius, radius1 = (None if r is None else r[idx] for r in self._balls)
        Zp, ok, new = composite_active_set_prox(
            **rows, coord=pad["coord"], l1row=pad["l1row"], mu=mu[idx],
            g=V[idx] / tau[idx, None], Z0=W, start=_states_at(W, **rows), radius=radius,
            radius1=radius1)
        last = self.__dict__.get("_dual_start")
        if last is not None:
            for full, part in zip(last, new, strict=True):
                full[idx[ok]] = part[ok]
        return Zp, ok

    def _better_than(self, idx: np.ndarray, Z: np.ndarray, W: np.ndarray, V: np.ndarray,
                     tau: np.ndarray) -> np.ndarray:
        """Per node ``idx``: whether the active-set answer ``Z`` (which failed the KKT check)
        is feasible and its PU (32) objective ``L_i(z) + ||z - v_i||^2 / (2 tau_i)`` is at most
        that of the CVXPY answer ``W``.  The check's relative residual can exceed
        :data:`KKT_RTOL` at an exact answer where the rows' duals, recomputed from ``z``,
        cancel (ill-conditioned ``X_i``, small ``1 / tau_i``), while the solver's point is only
        as accurate as its tolerances: of two feasible points of a strongly convex problem the
        lower objective is nearer the minimizer's value."""
        lo, hi = self.box[0][idx], self.box[1][idx]
        feasible = ((Z >= lo) & (Z <= hi)).all(axis=1) & np.isfinite(Z).all(axis=1) \
            & (np.linalg.norm(Z, axis=1) <= self.radius[idx]) \
            & (np.abs(Z).sum(axis=1) <= self.radius1[idx])
        with np.errstate(over="ignore", invalid="ignore"):
            return feasible & (self._prox_objective(idx, Z, V, tau)
                               <= self._prox_objective(idx, W, V, tau))

    def _prox_objective(self, idx: np.ndarray, Z: np.ndarray, V: np.ndarray,
                        tau: np.ndarray) -> np.ndarray:
        """PU (32)'s objective ``L_i(z_i) + eta_i ||z_i||_1 + kappa_i ||z_i||^2 + ||z_i -
        v_i||^2 / (2 tau_i)`` at the rows ``Z`` of the batch's nodes ``idx`` (the data fit by
        :meth:`values`, all nodes at once)."""
        full = np.zeros((self.n, self.d))
        full[self.nodes[idx]] = Z
        return (self.values(full)[self.nodes[idx]] + self.l1[idx] * np.abs(Z).sum(axis=1)
                + self.l2[idx] * (Z**2).sum(axis=1)
                + ((Z - V) ** 2).sum(axis=1) / (2.0 * tau))

    def cvxpy_prox(self, j: int, v: np.ndarray, tau: float) -> np.ndarray:
        """PU (32) of the batch's node ``j`` by one CVXPY solve (gtvmodel's accuracy defaults):
        its loss expression with the box and ball as constraints, the point projected back
        onto them."""
        loss, (lo, hi) = self.losses[j], (self.box[0][j], self.box[1][j])
        z = cp.Variable(self.d)
        cons = ([z[np.isfinite(lo)] >= lo[np.isfinite(lo)]] if np.isfinite(lo).any() else []) \
            + ([z[np.isfinite(hi)] <= hi[np.isfinite(hi)]] if np.isfinite(hi).any() else []) \
            + ([cp.norm(z, 2) <= self.radius[j]] if np.isfinite(self.radius[j]) else []) \
            + ([cp.norm(z, 1) <= self.radius1[j]] if np.isfinite(self.radius1[j]) else [])
        prob = cp.Problem(cp.Minimize(loss.expression(z) + cp.sum_squares(z - v) / (2.0 * tau)),
                          cons)
        what = f"prox of {loss!r} with a box"
        run_solver(prob, None, {}, False, False, what)
        if z.value is None:
            raise SolverError(f"{what}: the solver returned no point", status=prob.status,
                              solver="CLARABEL")
        # the solver's point is feasible to its tolerance only; the box and the ball hold the
        # minimizer, so projecting onto them moves the point nearer to it (the ball's
        # projection, a scaling, then the box's again: within the box, and within the ball
        # whenever the box holds 0)
        w = np.clip(np.asarray(z.value, dtype=float), lo, hi)
        w *= min(1.0, self.radius[j] / max(float(np.linalg.norm(w)), 1e-300),
                 self.radius1[j] / max(float(np.abs(w).sum()), 1e-300))
        return np.clip(w, lo, hi)


def _states_at(Z: np.ndarray, P: np.ndarray, cs: np.ndarray, cq: np.ndarray, lo: np.ndarray,
               hi: np.ndarray, fixed: np.ndarray, rtol: float = 1e-7
               ) -> tuple[np.ndarray, np.ndarray]:
    """The active sets and row duals that a point ``Z`` near the minimizer identifies
    (:func:`composite_active_set_prox`'s ``start``: states ``-1``/``0``/``+1``, duals): a row
    with ``q_r > 0`` has the dual ``clip((P_r^T z - c_r s_r) / (c_r q_r), lo_r, hi_r)`` (held
    where the clip binds); a linear row (``q_r = 0``) is free where ``P_r^T z = c_r s_r`` to
    ``rtol`` relative to ``|c_r s_r| + ||P_r|| ||z||`` (an ``l1`` zero, a bound that binds, a
    kink), else held at the bound its sign points to; never at an infinite bound; padding
    held at ``a = 0``."""
    t = np.einsum("krd,kd->kr", P, Z) - cs
    tol = rtol * (np.abs(cs) + np.linalg.norm(P, axis=2) * np.linalg.norm(Z, axis=1)[:, None])
    quad = cq > 0
    u = np.where(quad, t / np.where(quad, cq, 1.0), 0.0)
    state = np.where(quad, np.where(u <= lo, -1, np.where(u >= hi, 1, 0)),
                     np.where(np.abs(t) <= tol, 0, np.sign(t)))
    state = np.where(((state < 0) & np.isinf(lo)) | ((state > 0) & np.isinf(hi)), 0, state)
    a = np.where(fixed, 0.0, np.clip(u, lo, hi))
    a = np.where(state < 0, lo, np.where(state > 0, hi, a))
    return np.where(fixed, -1, state).astype(np.int8), np.where(fixed, 0.0, a)


def _unit_rows(s: np.ndarray, lo: np.ndarray, hi: np.ndarray, fixed: np.ndarray
               ) -> dict[str, np.ndarray]:
    """``d`` rows ``x = e_j`` per node (``c = 1``, ``q = 0``) with conjugate slope ``s``
    and dual interval ``[lo, hi]`` (``(k, d)`` each); ``fixed`` rows are padding."""
    k, d = s.shape
    return {"P": np.broadcast_to(np.eye(d), (k, d, d)) * ~fixed[:, :, None],
            "cs": np.where(fixed, 0.0, s), "cq": np.zeros((k, d)),
            "lo": np.where(fixed, 0.0, lo), "hi": np.where(fixed, 0.0, hi),
            "fixed": fixed.copy()}


class SmoothCompositeProxBatch(CompositeProxBatch):
    """Smooth data fits that are not piecewise quadratic (:class:`LogisticLoss`, any
    :class:`~gtvmodel.terms.losses.DataFitLoss` with the row derivatives ``_ell_d1`` and
    ``_ell_d2``) with ``l1`` and a coordinate box per node: PU (32) exactly and vectorized by
    a proximal Newton method (:meth:`_prox`).  At ``z_k`` the smooth part ``f(z) = sum_r c_r
    ell(x_r^T z) + mu ||z||^2 / 2 - g^T z`` is replaced by its quadratic model (Hessian ``X^T
    diag(c ell'') X + mu I``), which with the ``l1`` and box rows is the problem of
    :func:`composite_active_set_prox` (data rows ``sqrt(c_r ell''_r) x_r`` with ``ell*(a) =
    a^2 / 2``), solved exactly; a backtracking line search on the true objective follows
    (vectorized over nodes).  A node stops when its point meets the KKT conditions of the true
    problem (:func:`kkt_certified`, the data rows' duals ``ell'(x_r^T z)`` held) at
    ``KKT_RTOL``; nodes that do not within ``max_outer`` steps take one CVXPY solve (counted in
    :attr:`fallbacks`).  A warm call first takes up to ``held_steps`` Newton steps on the last
    call's active sets (:meth:`_held_newton`, :meth:`_held_states`), certified the same way."""

    #: Proximal Newton steps before a node takes the CVXPY path.
    max_outer = 40

    #: Newton steps on the last call's active sets (:meth:`_held_newton`), updated after each
    #: (:meth:`_held_states`), before the general steps.
    held_steps = 3

    @staticmethod
    def accepts(loss: Loss) -> bool:
        """Whether this path computes PU (32) of ``loss`` (with ``l1`` and/or a box): a smooth
        data fit with a batched row formula whose conjugate is not piecewise quadratic."""
        batch = loss.batch_class
        return (loss.base_smooth and not loss.piecewise_quadratic and batch is not None
                and issubclass(batch, DataFitBatch))

    @property
    def kind(self) -> str:
        """``"<loss kind>-prox-newton"`` (the path's name in ``NodeUpdates.describe()``)."""
        return f"{self.cls.kind}-prox-newton"

    def prox_supported(self) -> np.ndarray:
        """Every node (:meth:`accepts` chose the class)."""
        return np.ones(self.ms.size, dtype=bool)

    def _data_block(self) -> dict[str, np.ndarray]:
        """Data rows of the quadratic models: ``ell*(a) = a^2 / 2`` (``c q = 1``, ``s = 0``)
        on ``R``; their ``P`` is set at every step (:meth:`_model_rows`)."""
        k, m, d = self.ms.size, self.max_rows(), self.d
        slot = self._slot()
        data = {"P": np.zeros((k, m, d)), "cs": np.zeros((k, m)), "cq": np.zeros((k, m)),
                "lo": np.zeros((k, m)), "hi": np.zeros((k, m)),
                "fixed": np.ones((k, m), dtype=bool)}
        data["cq"][self.local, slot] = 1.0
        data["lo"][self.local, slot] = -np.inf
        data["hi"][self.local, slot] = np.inf
        data["fixed"][self.local, slot] = False
        return data

    def _rows_of(self, nodes: np.ndarray) -> dict[str, Any]:
        """The sample rows of ``nodes`` (sorted; every node has a row) as compact arrays, in
        the nodes' order: ``Xs``, ``y``, ``p``, ``c``, ``cX = c_r x_r``, ``acX = |c_r x_r|``,
        ``cXX = c_r x_r x_r^T``, each row's position ``loc`` in ``nodes``, the ``reduceat``
        offsets ``offs`` of the nodes' row blocks, and its node and slot in :meth:`_padded`
        (``node``, ``slot``).  All nodes: views of the cached arrays."""
        rp = self._row_products()
        if nodes.size == self.ms.size:
            r: Any = slice(None)
            loc, offs = self.local, self.starts
        else:
            mask = np.zeros(self.ms.size, dtype=bool)
            mask[nodes] = True
            r = np.flatnonzero(mask[self.local])
            loc, offs = self._blocks(self.ms[nodes])
        return {"Xs": self.Xs[r], "y": self.y[r], "p": None if self.p is None else self.p[r],
                "c": self.c[r], "cX": rp["cX"][r], "acX": rp["acX"][r], "cXX": rp["cXX"][r],
                "node": self.local[r], "slot": rp["slot"][r], "loc": loc, "offs": offs,
                "ms": self.ms[nodes]}

    @staticmethod
    def _blocks(ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each row's block and the ``reduceat`` offsets of consecutive blocks of ``ms`` rows."""
        return (np.repeat(np.arange(ms.size), ms),
                np.concatenate(([0], np.cumsum(ms)[:-1])).astype(np.int64))

    def _kept_rows(self, rw: dict[str, Any], keep: np.ndarray) -> dict[str, Any]:
        """:meth:`_rows_of` of the nodes ``keep`` (a mask over ``rw``'s nodes), from ``rw``'s
        rows (no gather from the full arrays)."""
        rk = np.flatnonzero(keep[rw["loc"]])  # (np.take: faster than a mask's gather)
        out = {key: (None if val is None else np.take(val, rk, axis=0))
               for key, val in rw.items() if key not in ("loc", "offs", "ms")}
        out["ms"] = rw["ms"][keep]
        out["loc"], out["offs"] = self._blocks(out["ms"])
        return out

    def _at(self, rw: dict[str, Any], Z: np.ndarray) -> np.ndarray:
        """``t_r = x_r^T z_i`` for ``rw``'s rows (``Z``: their nodes' points, compact)."""
        return np.einsum("rd,rd->r", rw["Xs"], np.take(Z, rw["loc"], axis=0))

    def _derivs(self, rw: dict[str, Any], Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``ell'(x_r^T z)``, ``ell''(x_r^T z)`` for ``rw``'s rows (:meth:`_at`)."""
        return self.cls._ell_d12(self._at(rw, Z), rw["y"], rw["p"])

    @staticmethod
    def _sum(rw: dict[str, Any], rows: np.ndarray) -> np.ndarray:
        """``sum_{r in i} rows_r`` per node of ``rw`` (every node has a row)."""
        return np.add.reduceat(rows, rw["offs"], axis=0)

    def _objective(self, rw: dict[str, Any], Z: np.ndarray, mu: np.ndarray, g: np.ndarray,
                   l1: np.ndarray) -> np.ndarray:
        """``F_i(z) = sum_r c_r ell(x_r^T z) + eta_i ||z||_1 + mu_i ||z||^2 / 2 - g_i^T z`` for
        ``rw``'s nodes (compact arrays)."""
        ell = self.cls._ell(self._at(rw, Z), rw["y"], rw["p"])
        return (self._sum(rw, rw["c"] * ell) + l1 * np.abs(Z).sum(axis=1)
                + 0.5 * mu * (Z**2).sum(axis=1) - (g * Z).sum(axis=1))

    def _model_rows(self, rw: dict[str, Any], P: np.ndarray, Z: np.ndarray, g: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """The quadratic model of ``sum_r c_r ell(x_r^T z) - g^T z`` at ``Z`` (``rw``'s nodes,
        compact): writes its data rows ``sqrt(c_r ell''_r) x_r`` into ``P`` and returns ``(g -
        sum_r c_r (ell'_r - ell''_r t_r) x_r, ell'_r)`` (its linear part, the rows' first
        derivatives)."""
        t = self._at(rw, Z)
        d1, d2 = self.cls._ell_d12(t, rw["y"], rw["p"])
        P[rw["loc"], rw["slot"], :] = np.sqrt(rw["c"] * d2)[:, None] * rw["Xs"]
        return g - self._sum(rw, (rw["c"] * (d1 - d2 * t))[:, None] * rw["Xs"]), d1

    def _true_kkt(self, um: dict[str, Any], nodes: np.ndarray | slice, Z: np.ndarray,
                  aU: np.ndarray, G1: np.ndarray, A1: np.ndarray, mu: np.ndarray,
                  g: np.ndarray) -> np.ndarray:
        """:func:`kkt_certified` of PU (32) itself for ``nodes`` (compact arrays) at ``Z``: the
        data rows ``P_r = c_r x_r`` with their duals ``ell'(x_r^T z)`` held (``lo = hi``, so
        only stationarity and finiteness involve them: ``G1 = sum_r ell'_r c_r x_r``, ``A1 =
        sum_r |ell'_r| |c_r x_r|``), the ``l1`` and box rows ``P_u = e_j`` (:meth:`_unit_map`)
        with the duals ``aU``.  The same conditions at the same tolerance as
        :func:`kkt_certified` on :meth:`_padded`'s rows, without the padded arrays:
        stationarity ``|mu z - g + G1 + sum_u a_u e_j| <= rtol (|mu z| + |g| + A1 + sum_u |a_u|
        e_j)`` per coordinate, every unit dual in ``[lo_u, hi_u]`` with ``grad_u = s_u - z_j``
        at most ``tol_u`` where ``a_u > lo_u`` and at least ``-tol_u`` where ``a_u < hi_u``,
        ``tol_u = rtol (|s_u| + scale_j / mu)``, and a finite ``scale`` (finite ``z``, unit
        duals and ``A1``, so the data duals: :func:`kkt_certified`'s finiteness, also failing
        where the sum overflows); padding rows are left out."""
        fixed, s, lo, hi = (um[key][nodes] for key in ("fixed", "s", "lo", "hi"))
        E, coord = um["Ef"], um["coord"]
        with np.errstate(over="ignore", invalid="ignore"):
            a = np.where(fixed, 0.0, aU)
            muZ = mu[:, None] * Z
            stat = np.abs(muZ - g + G1 + a @ E)
            scale = np.abs(muZ) + np.abs(g) + A1 + np.abs(a) @ E
            grad = s - Z[:, coord]
            tol = KKT_RTOL * (np.abs(s) + (scale / mu[:, None])[:, coord])
            rows_ok = ((a >= lo) & (a <= hi) & ((a <= lo) | (grad <= tol))
                       & ((a >= hi) | (grad >= -tol))) | fixed
            # a finite scale: z, the unit duals and A1 finite (overflow of the sum too)
            return (rows_ok.all(axis=1) & (stat <= KKT_RTOL * scale).all(axis=1)
                    & np.isfinite(scale).all(axis=1))

    def _prox(self, V, tau, W0):
        """Proximal Newton on ``L_i(z) + eta_i ||z||_1 + kappa_i ||z||^2 + iota_{box_i}(z) +
        ||z - v_i||^2 / (2 tau_i)``, from ``W0`` (else ``v_i``) clipped to the box, the
        quadratic models' active sets warm-started from the last call's.  With a last call,
        its answer moved to first order (:meth:`_predicted`) first takes Newton steps on the
        last active sets (:meth:`_held_newton`); the nodes whose point then meets the true KKT
        conditions (:meth:`_true_kkt`) are done.  The others take the general steps
        (:meth:`_general_steps`): each solves the quadratic model exactly
        (:func:`composite_active_set_prox`), stops the nodes whose answer meets the true KKT
        conditions and moves the others along ``zhat - z`` with Armijo backtracking on the true
        objective; the nodes left take :meth:`cvxpy_prox`."""
        k = self.ms.size
        mu = 2.0 * self.l2 + 1.0 / tau
        g = V / tau[:, None]
        pad = self._padded()
        start = self.__dict__.get("_dual_start")
        if start is not None and start[0].shape[0] != k:
            start = None
        Z = np.clip(self._predicted(mu, g, start, pad) if start is not None else
                    V if W0 is None else np.asarray(W0, dtype=float), *self.box)
        done = np.zeros(k, dtype=bool)
        H = None
        if start is not None:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                H = self._held_newton(Z, mu, g, start, pad, done)
        if not done.all():
            start, H = self._general_steps(Z, mu, g, start, pad, done, H)
        self.__dict__["_dual_start"] = start
        self.__dict__["_last"] = {"mu": mu, "g": g, "Z": Z.copy(), "H": H}
        bad = np.flatnonzero(~done)
        if bad.size:
            self.fallbacks += int(bad.size)
            Z[bad] = np.array([self.cvxpy_prox(int(j), V[j], float(tau[j])) for j in bad])
        return Z

    def _general_steps(self, Z: np.ndarray, mu: np.ndarray, g: np.ndarray,
                       start: tuple[np.ndarray, ...] | None, pad: dict[str, np.ndarray],
                       done: np.ndarray, H: np.ndarray | None
                       ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """:meth:`_prox`'s proximal Newton steps for the nodes ``S`` not ``done`` (``Z`` and
        ``done`` updated in place), on compact arrays of ``S`` and their rows only: returns
        the active sets and duals for the next call's start and the data part of the Hessians
        ``X^T diag(c ell'') X`` (those of ``H`` for the nodes done before, else of each node's
        last quadratic model)."""
        k = self.ms.size
        S = np.flatnonzero(~done)
        sx: np.ndarray | slice = S if S.size < k else slice(None)
        um, rw = self._unit_map(pad), self._rows_of(S)
        rows = {key: pad[key][sx] for key in ("cs", "cq", "lo", "hi", "fixed")}
        P = pad["P"][sx].copy()
        Zc, muc, gc, l1c = Z[S], mu[sx], g[sx], self.l1[sx]
        st = None if start is None else tuple(s[sx] for s in start)  # (copies where S < k)
        n = S.size
        fin = np.zeros(n, dtype=bool)
        act = np.arange(n)
        for _ in range(self.max_outer):
            ix = act if act.size < n else slice(None)
            gt, d1 = self._model_rows(rw, P, Zc, gc)
            # the model's own KKT check is not needed: the true one below certifies
            Zh, _, new = composite_active_set_prox(
                P[ix], **{key: val[ix] for key, val in rows.items()}, mu=muc[ix], g=gt[ix],
                Z0=Zc[ix], coord=pad["coord"], start=None if st is None else
                tuple(s[ix] for s in st), check=False)
            if st is None:
                st = tuple(np.array(s) for s in new)
            else:
                for full, part in zip(st, new, strict=True):
                    full[ix] = part
            Znew = Zc.copy()
            Znew[ix] = Zh
            # the model's error at zhat is O(|zhat - z|^2): after a long step the true
            # KKT check cannot pass (skipping it only defers a node to the next step)
            near = np.abs(Zh - Zc[ix]).max(axis=1) <= 1e-4 * (1.0 + np.abs(Zh).max(axis=1))
            cert = np.zeros(n, dtype=bool)
            if near.any():
                cert[act[near]] = self._certified_at(um, rw, act[near], S, Znew, st[1], muc, gc)
            Zc[cert] = Znew[cert]
            fin |= cert
            act = act[~cert[act]]
            if act.size == 0:
                break
            act = self._line_search(rw, act, Zc, Znew, d1, muc, gc, l1c)
            if act.size == 0:
                break
        Z[S], done[S] = Zc, fin
        if start is None or S.size == k:
            start = st
        else:
            for full, part in zip(start, st, strict=True):
                full[S] = part
        Pm = P[:, pad["coord"] < 0]
        Hm = np.einsum("krd,kre->kde", Pm, Pm)
        if H is None or S.size == k:
            return start, Hm
        H = H.copy()
        H[S] = Hm
        return start, H

    def _certified_at(self, um: dict[str, Any], rw: dict[str, Any], sel: np.ndarray,
                      S: np.ndarray, Z: np.ndarray, a: np.ndarray, mu: np.ndarray,
                      g: np.ndarray) -> np.ndarray:
        """:meth:`_true_kkt` of the compact nodes ``sel`` (positions in ``S``, ``rw``'s nodes)
        at ``Z[sel]`` with the unit rows' duals of ``a[sel]`` (the quadratic model's)."""
        keep = np.zeros(S.size, dtype=bool)
        keep[sel] = True
        sub = rw if keep.all() else self._kept_rows(rw, keep)
        Zs = Z[sel]
        d1 = self.cls._ell_d1(self._at(sub, Zs), sub["y"], sub["p"])
        return self._true_kkt(um, S[sel], Zs, a[sel][:, um["U"]],
                              self._sum(sub, d1[:, None] * sub["cX"]),
                              self._sum(sub, np.abs(d1)[:, None] * sub["acX"]), mu[sel], g[sel])

    def _predicted(self, mu: np.ndarray, g: np.ndarray, start: tuple[np.ndarray, ...],
                   pad: dict[str, np.ndarray]) -> np.ndarray:
        """A start for the call at ``g``: the last call's answer moved to first order, ``dz =
        (H_FF)^{-1} (g - g_last)_F`` on the coordinates ``F`` that no free ``l1`` or bound row
        fixes (last active sets ``start``), ``H = X^T diag(c ell'') X + mu I`` with the last
        call's data part (Algorithm 1's next point is near: the Newton steps from there are
        fewer; the stop is the same)."""
        last = self.__dict__.get("_last")
        if last is None or not np.array_equal(last["mu"], mu) or last["g"].shape != g.shape:
            return last["Z"] if last is not None and last["Z"].shape == g.shape else g / mu[:, None]
        um = self._unit_map(pad)
        fr = ((start[0][:, um["U"]] == 0) & ~um["fixed"]) @ um["Ef"] == 0
        dz = self._reduced_solve(last["H"], mu, fr, g - last["g"])
        return last["Z"] + dz

    def _unit_map(self, pad: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The ``l1`` and box rows of :meth:`_padded` (cached): their indices ``U``, the
        one-hot ``Ef`` ``(|U|, d)`` of their coordinates (float), their ``s`` (``z_j`` where
        such a row is free), dual intervals ``lo``, ``hi`` (and where those are infinite) and
        padding."""
        um = self.__dict__.get("_units")
        if um is None:
            U = np.flatnonzero(pad["coord"] >= 0)
            lo, hi = pad["lo"][:, U], pad["hi"][:, U]
            um = self.__dict__["_units"] = {
                "U": U, "Ef": (pad["coord"][U][:, None] == np.arange(self.d)).astype(float),
                "coord": pad["coord"][U], "s": pad["cs"][:, U], "fixed": pad["fixed"][:, U],
                "lo": lo, "hi": hi, "inf_lo": np.isinf(lo), "inf_hi": np.isinf(hi)}
        return um

    def _row_products(self) -> dict[str, np.ndarray]:
        """``c_r x_r`` ``(M, d)``, ``|c_r x_r|``, ``c_r x_r x_r^T`` ``(M, d, d)`` and each
        sample row's slot in :meth:`_padded` (cached)."""
        rp = self.__dict__.get("_row_products_cache")
        if rp is None:
            cX = self.c[:, None] * self.Xs
            rp = self.__dict__["_row_products_cache"] = {
                "cX": cX, "acX": np.abs(cX), "cXX": cX[:, :, None] * self.Xs[:, None, :],
                "slot": self._slot()}
        return rp

    @staticmethod
    def _reduced_solve(Hd: np.ndarray, mu: np.ndarray, free: np.ndarray, rhs: np.ndarray
                       ) -> np.ndarray:
        """``dz`` with ``(Hd + mu I)_FF dz_F = rhs_F`` and ``dz = 0`` off ``F`` (``free``,
        ``(k, d)``), for every node at once (:func:`_spd_solve`)."""
        d = Hd.shape[1]
        H = Hd + mu[:, None, None] * np.eye(d)
        H = np.where(free[:, :, None] & free[:, None, :], H, np.eye(d))
        return _spd_solve(H, np.where(free, rhs, 0.0))

    def _held_states(self, Z: np.ndarray, aU: np.ndarray, stU: np.ndarray,
                     pad: dict[str, np.ndarray], nodes: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
        """The ``l1`` and box rows' active sets (``stU``, duals ``aU``: those rows' columns of
        the nodes ``nodes``, compact) after a step of :meth:`_held_newton` that was not
        certified (a primal-dual active-set update): a free row whose dual left its interval
        is held at the bound it passed; any other row is held at the bound the sign of ``z_j
        - s_r`` points to (``z`` past a bound frees that bound's row: ``z_j`` is set there;
        past ``0`` the ``l1`` row's dual changes sign), and free where it is ``0`` or that bound
        is infinite.  Returns ``(states, duals)`` (held duals at their bounds)."""
        um = self._unit_map(pad)
        lo, hi, fixed = um["lo"][nodes], um["hi"][nodes], um["fixed"][nodes]
        free = (stU == 0) & ~fixed
        sU = np.sign(Z[:, um["coord"]] - um["s"][nodes])
        sU = np.where(free, np.where(aU > hi, 1, np.where(aU < lo, -1, 0)), sU)
        sU = np.where(((sU < 0) & um["inf_lo"][nodes]) | ((sU > 0) & um["inf_hi"][nodes]), 0,
                      sU)
        sU = np.where(fixed, -1, sU)
        aU = np.where(fixed, 0.0, np.where(sU < 0, lo, np.where(sU > 0, hi, aU)))
        return sU.astype(stU.dtype), aU

    def _held_sets(self, um: dict[str, Any], nodes: np.ndarray | slice, stU: np.ndarray,
                   aU: np.ndarray) -> dict[str, np.ndarray]:
        """What the held active sets ``stU`` (duals ``aU``) of the ``l1`` and box rows fix for
        ``nodes``: the free rows (``free``), how many fix each coordinate (``nfix``; a free row
        fixes ``z_j = s_r``), the fixed coordinates (``fixc``) and their values (``zfix``), and
        the held rows' duals summed per coordinate (``held``)."""
        free = (stU == 0) & ~um["fixed"][nodes]
        E = um["Ef"]
        nfix = free @ E
        return {"free": free, "nfix": nfix, "fixc": nfix > 0,
                "zfix": np.where(free, um["s"][nodes], 0.0) @ E,
                "held": np.where(free | um["fixed"][nodes], 0.0, aU) @ E}

    def _held_newton(self, Z: np.ndarray, mu: np.ndarray, g: np.ndarray,
                     start: tuple[np.ndarray, ...], pad: dict[str, np.ndarray],
                     done: np.ndarray) -> np.ndarray:
        """Up to ``held_steps`` Newton steps on PU (32) with the ``l1`` and box rows' last
        active sets held (``start``), on compact arrays of the nodes not yet certified: a free
        such row fixes ``z_j = s_r`` (``0`` or the bound, :meth:`_held_sets`), a held one adds
        its dual (``+-eta``, ``0``) to the gradient; on the other coordinates ``F``, ``(H_FF)
        dz_F = -grad_F`` with ``H = X^T diag(c ell'') X + mu I`` at ``z``.  After a step the
        rows' ``ell'`` and ``ell''`` are evaluated once at the new point: the free rows' duals
        are the stationarity residual on their coordinates, the point is certified by the true
        KKT conditions (:meth:`_true_kkt`; a node with two free rows on one coordinate is
        not), and for the nodes left the held sets are updated (:meth:`_held_states`) and the
        next step's gradient and Hessian come from the same evaluation (re-evaluated only at
        the nodes where a newly fixed coordinate moved ``z``).  A wrong active set or an
        unconverged step is only a node left for the general steps.  Certified nodes get
        their ``Z``, ``done`` and ``start`` (states and duals, the data rows' duals
        ``ell'(x_r^T z)``) in place.  Returns ``X^T diag(c ell'') X`` per node at the start of
        its last step (the next call's :meth:`_predicted`)."""
        um = self._unit_map(pad)
        U = um["U"]
        k, d = Z.shape
        H = np.zeros((k, d, d))
        nodes = np.arange(k)
        rw = self._rows_of(nodes)
        stU, aU = start[0][:, U], start[1][:, U]
        Zs, mu_s, g_s = Z, mu, g
        d1 = d2 = None
        for step in range(self.held_steps):
            ix = nodes if nodes.size < k else slice(None)
            hs = self._held_sets(um, ix, stU, aU)
            Zn = np.where(hs["fixc"], hs["zfix"], Zs)
            if d1 is None:
                d1, d2 = self._derivs(rw, Zn)
            else:  # the last step's evaluation, except where a newly fixed coordinate moved z
                moved = (Zn != Zs).any(axis=1)
                if moved.any():
                    sub = self._kept_rows(rw, moved)
                    rm = moved[rw["loc"]]
                    d1[rm], d2[rm] = self._derivs(sub, Zn[moved])
            Hd = self._sum(rw, d2[:, None, None] * rw["cXX"])
            H[ix] = Hd
            grad = self._sum(rw, d1[:, None] * rw["cX"]) + mu_s[:, None] * Zn - g_s + hs["held"]
            Zs = Zn + self._reduced_solve(Hd, mu_s, ~hs["fixc"], -grad)
            d1, d2 = self._derivs(rw, Zs)
            G1 = self._sum(rw, d1[:, None] * rw["cX"])
            res = g_s - hs["held"] - mu_s[:, None] * Zs - G1
            aU = np.where(hs["free"], res[:, um["coord"]], aU)
            ok = (hs["nfix"] <= 1).all(axis=1) & self._true_kkt(
                um, ix, Zs, aU, G1, self._sum(rw, np.abs(d1)[:, None] * rw["acX"]), mu_s, g_s)
            if ok.any():
                self._write_certified(Z, start, nodes[ok], Zs[ok], stU[ok], aU[ok], rw,
                                      ok, d1, U)
                done[nodes[ok]] = True
            if ok.all() or step == self.held_steps - 1:
                break
            keep = ~ok
            nodes, Zs, stU, aU, mu_s, g_s = (x[keep] for x in (nodes, Zs, stU, aU, mu_s, g_s))
            rk = keep[rw["loc"]]
            d1, d2 = d1[rk], d2[rk]
            rw = self._kept_rows(rw, keep)
            stU, aU = self._held_states(Zs, aU, stU, pad, nodes)
        return H

    @staticmethod
    def _write_certified(Z: np.ndarray, start: tuple[np.ndarray, ...], nodes: np.ndarray,
                         Zc: np.ndarray, stU: np.ndarray, aU: np.ndarray, rw: dict[str, Any],
                         ok: np.ndarray, d1: np.ndarray, U: np.ndarray) -> None:
        """Writes the certified ``nodes``' points ``Zc``, their ``l1``/box rows' states and
        duals and their data rows' duals ``d1`` (the rows of ``rw`` whose node is ``ok``) into
        ``Z`` and ``start`` (in place)."""
        Z[nodes] = Zc
        cols = slice(U[0], U[-1] + 1) if U[-1] - U[0] + 1 == U.size else U  # (usually a tail)
        for full, part in zip(start, (stU, aU), strict=False):
            if isinstance(cols, slice):
                full[nodes, cols] = part
            else:
                full[nodes[:, None], cols] = part
        rm = ok[rw["loc"]]
        start[1][rw["node"][rm], rw["slot"][rm]] = d1[rm]

    def _line_search(self, rw: dict[str, Any], act: np.ndarray, Z: np.ndarray,
                     Znew: np.ndarray, d1: np.ndarray, mu: np.ndarray, g: np.ndarray,
                     l1: np.ndarray) -> np.ndarray:
        """Moves ``Z[act]`` along ``Znew - Z`` (in place; ``rw``'s nodes, compact) by Armijo
        backtracking on the true objective (:meth:`_objective`): the largest ``s = 2^-j`` with
        ``F(z + s dz) <= F(z) + s D / 4 + 1e-13 (1 + |F|)``, ``D = grad f^T dz + eta
        (||zhat||_1 - ||z||_1)``; returns the nodes that moved (a node that cannot is left for
        the CVXPY path)."""
        dz = Znew - Z
        grad = self._sum(rw, (rw["c"] * d1)[:, None] * rw["Xs"]) + mu[:, None] * Z - g
        D = ((grad * dz).sum(axis=1) + l1 * (np.abs(Znew).sum(axis=1) - np.abs(Z).sum(axis=1)))
        F0 = self._objective(rw, Z, mu, g, l1)
        step = np.zeros(Z.shape[0])
        todo = act.copy()
        s = 1.0
        for _ in range(40):
            Ft = self._objective(rw, Z + s * dz, mu, g, l1)
            good = Ft[todo] <= F0[todo] + 0.25 * s * D[todo] + 1e-13 * (1.0 + np.abs(F0[todo]))
            step[todo[good]] = s
            todo = todo[~good]
            if todo.size == 0:
                break
            s *= 0.5
        moved = act[step[act] > 0]
        Z[moved] += step[moved, None] * dz[moved]
        return moved


def _spd_solve(H: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``x_i = H_i^{-1} b_i`` for ``k`` symmetric positive definite ``H_i`` ``(d, d)``: for ``d
    <= 4`` by a Cholesky factorization ``H = L L^T`` written out over the ``d^2 / 2`` entries
    (each a vector over the nodes: no per-node LAPACK call, several times faster there), else
    ``numpy.linalg.solve``.  A matrix that is not positive definite gives ``nan`` (the callers
    certify every answer)."""
    k, d = b.shape
    if d > 4:
        return np.linalg.solve(H, b[:, :, None])[:, :, 0]
    L: list[list[np.ndarray]] = [[] for _ in range(d)]  # L[j][i], i <= j
    with np.errstate(invalid="ignore", divide="ignore"):
        for j in range(d):
            for i in range(j + 1):
                v = H[:, j, i] - sum((L[j][q] * L[i][q] for q in range(i)), np.zeros(k))
                L[j].append(np.sqrt(v) if i == j else v / L[i][i])
        y: list[np.ndarray] = []
        for j in range(d):  # L y = b
            y.append((b[:, j] - sum((L[j][q] * y[q] for q in range(j)), np.zeros(k))) / L[j][j])
        x: list[np.ndarray] = [np.zeros(k)] * d
        for j in reversed(range(d)):  # L^T x = y
            x[j] = (y[j] - sum((L[q][j] * x[q] for q in range(j + 1, d)), np.zeros(k))) / L[j][j]
    return np.stack(x, axis=1)
