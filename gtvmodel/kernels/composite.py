"""Exact batched node updates PU (32) of paper 001 for piecewise-quadratic row conjugates
with ``l1`` rows, coordinate boxes and Euclidean or 1-norm balls (issue 16 item 3), by
primal-dual active-set steps on the rows' duals (:func:`composite_active_set_prox`), and the
KKT check that certifies every answer (:func:`kkt_certified`).

The rows enter as padded arrays (``P = c_r x_r``, ``c_r s_r``, ``c_r q_r``, dual intervals
``[lo_r, hi_r]``); the problem, its dual and the rows' meaning are in the docstring of
:mod:`gtvmodel.terms.composite`, which builds the rows from the losses and constraints.  With
the active sets fixed, the steps solve the systems of :mod:`gtvmodel.kernels.systems` by
:mod:`gtvmodel.kernels.steps` (affine and trust-region ball steps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _compiled
from .boxqp import _active_set_step, _box_qp_projected_gradient
from .nodebox import compiled_box_dual
from .nodeqp import COMPILED_MIN_NODES, compiled_kkt, compiled_next_states
from .nodequad import compiled_quad_rows
from .steps import _affine_solve, _ball_solve, _row_duals
from .systems import _merge_later, _system_matrices, _updated_system, _with_rhs

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
                              cache: dict | None = None, compiled: bool | None = None
                              ) -> tuple[np.ndarray, np.ndarray | None,
                                         tuple[np.ndarray, ...]]:
    """Exact ``argmin_z sum_r c_r ell_r(x_r^T z) + mu_i ||z||^2 / 2 - g_i^T z`` (subject to
    ``||z||_2 <= radius_i`` where ``radius`` is given and finite) for ``k`` nodes, rows with
    ``ell_r*(a) = s_r a + q_r a^2 / 2`` on ``[lo_r, hi_r]`` (the ``l1`` and box rows of the
    docstring of :mod:`gtvmodel.terms.composite` included).

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
    (:func:`~gtvmodel.kernels.boxqp._box_qp_projected_gradient`).  Rows are padded: ``P``
    ``(k, R, d)``, ``cs``/``cq``/``lo``/``hi``/``fixed`` ``(k, R)`` (``fixed``: padding, held at
    ``a = 0``, with ``lo = hi = 0``); ``coord`` ``(R,)`` names the coordinate ``j`` of the unit
    rows ``P_r = e_j`` (``-1`` for the others): where such a row is free, ``z_j = s_r`` is set
    exactly (an ``l1`` zero is ``0.0``, a bound is the bound).  Returns ``(Z, certified,
    (active set, a, nu))`` (the last, passed back as ``start``, starts the next call where
    it left off): ``certified`` is the KKT check :func:`kkt_certified` at ``KKT_RTOL``
    (with the ball's conditions where there is one; None with ``check=False``, for a caller
    that certifies another problem, as
    :class:`~gtvmodel.terms.composite.SmoothCompositeProxBatch`).  ``radius1``
    (``(k,)``, ``inf``: none) are 1-norm balls ``||z||_1 <= radius1_i`` and ``l1row`` ``(R,)``
    marks the ``l1`` rows (one per coordinate, not padding at those nodes) whose intervals
    their multipliers widen.  ``cache`` (a dict the caller keeps between calls on the same
    rows, e.g. Algorithm 1's iterations) holds the last full step's system and factorizations
    (:func:`_system_matrices`, :func:`_affine_factors`, :func:`_ball_factors`): a step whose
    active sets and ``mu`` are the cached ones only applies them to the new ``g`` (the KKT
    check that ends the call is the same); the systems that the later steps build for the
    few nodes still changing are written into it when the call ends (:func:`_merge_later`),
    so the next call starts from every node's final active set without rebuilding; it also
    keeps the rows' constants (:func:`_row_constants`).  ``compiled`` (None: where numba is
    installed and there are ``COMPILED_MIN_NODES`` nodes or more): rows with ``q = 0`` only
    and no 1-norm ball (hinge and absolute losses with ``l1``, boxes and Euclidean balls)
    take the steps node by node in :func:`~gtvmodel.kernels.nodebox.box_dual_pass`
    (:func:`_run_compiled`); rows with ``q > 0`` (squared, Huber) with at most one unit row
    per coordinate and a Euclidean or a 1-norm ball (one kind per call) take theirs in
    :func:`~gtvmodel.kernels.nodequad.quad_rows_pass` (:func:`_run_quad`; without a ball the
    numpy steps, one cached step per call, measured faster).
    """
    run = _prepared(P, cs, cq, lo, hi, fixed, mu, g, Z0, coord, start, radius, radius1, l1row,
                    rtol, cache)
    if compiled is None:
        compiled = run.k >= COMPILED_MIN_NODES and _compiled.available()
    if compiled and not run.c["any_q"] and not run.ball1.size:
        ok = _run_compiled(run, max_iter, rtol)
        return run.Z, ok if check else None, (run.state, run.a_prev, run.nu)
    if compiled and run.c["quad"] and run.any_ball != bool(run.ball1.size):  # (one kind)
        ok = _run_quad(run, max_iter, rtol)
        return run.Z, ok if check else None, (run.state, run.a_prev, run.nu)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        left = _run_steps(run, np.arange(run.k), max_iter)
        if left.size:  # cycling nodes: near the solution by projected gradients, then again
            _restart(run, left)
            _run_steps(run, left, max_iter)
    if run.later and cache is not None:  # (later steps are kept only with a cache)
        _merge_later(cache, run.later, run.k)
    if not check:
        return run.Z, None, (run.state, run.a_prev, run.nu)
    return run.Z, _certified(run), (run.state, run.a_prev, run.nu)


@dataclass
class _Run:
    """One call of :func:`composite_active_set_prox`: the rows (``rows``: ``P``, ``cs``,
    ``cq``, the effective intervals ``lo``, ``hi`` -- widened by the 1-norm balls'
    multipliers --, ``fixed`` and the unit rows' ``coord``, ``unit``, ``tail``, ``any_q``), their
    constants ``c`` (:func:`_row_constants`), ``mu``, ``g``, the caller's ``cache``, the
    iterates (``Z``, active sets ``state``, row duals ``a_prev``, the Euclidean balls'
    multipliers ``nu``; updated in place), the systems the later steps build (``later``,
    merged into ``cache`` at the end), the Euclidean balls (``radius``, ``ball``: where
    finite; ``any_ball``) and the 1-norm balls (``ball1``: their nodes, ``radius1``, their
    multipliers ``nu1``, the ``l1`` rows ``l1m``, the intervals ``lo0``, ``hi0`` before
    widening)."""

    rows: dict[str, Any]
    c: dict[str, Any]
    mu: np.ndarray
    g: np.ndarray
    cache: dict | None
    Z: np.ndarray
    nu: np.ndarray
    k: int
    state: np.ndarray
    a_prev: np.ndarray
    any_ball: bool
    radius: np.ndarray | None
    ball1: np.ndarray
    radius1: np.ndarray | None
    later: list[tuple[str, Any, np.ndarray, dict[str, Any]]] = field(default_factory=list)
    ball: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    nu1: np.ndarray = field(default_factory=lambda: np.zeros(0))
    l1m: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    lo0: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    hi0: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))


def _prepared(P: np.ndarray, cs: np.ndarray, cq: np.ndarray, lo: np.ndarray, hi: np.ndarray,
              fixed: np.ndarray, mu: np.ndarray, g: np.ndarray, Z0: np.ndarray,
              coord: np.ndarray | None, start: tuple[np.ndarray, ...] | None,
              radius: np.ndarray | None, radius1: np.ndarray | None, l1row: np.ndarray | None,
              rtol: float, cache: dict | None) -> _Run:
    """The :class:`_Run` of a call of :func:`composite_active_set_prox` with its arguments:
    the rows' constants, the balls, and the first active sets (``start``'s, else read off
    ``Z0``)."""
    k = P.shape[0]
    c = _row_constants(P, cs, cq, lo, hi, fixed, coord, mu, rtol, cache)
    rows = {"P": P, "cs": cs, "cq": cq, "lo": lo, "hi": hi, "fixed": fixed, "coord": c["coord"],
            "unit": c["unit"], "tail": c["tail"], "any_q": c["any_q"]}
    any_ball = radius is not None and bool(np.isfinite(radius).any())
    # the balls' multipliers at the current active sets (the last call's where given)
    nu = np.zeros(k) if start is None or len(start) < 3 else np.array(start[2], dtype=float)
    # 1-norm balls: their multipliers widen the l1 rows' dual intervals (lo, hi: effective)
    ball1 = np.zeros(0, dtype=np.int64) if radius1 is None else \
        np.flatnonzero(np.isfinite(radius1) & np.ones(k, dtype=bool))
    Z = np.array(Z0, dtype=float)
    if ball1.size:
        rows["lo"], rows["hi"] = lo.copy(), hi.copy()
    if start is None:
        a_prev = np.where(fixed, 0.0, np.clip(0.0, rows["lo"], rows["hi"]))
        state = _next_states(c, rows, slice(None), a_prev, Z, ~fixed)[0]
    else:
        state, a_prev = start[0].copy(), start[1].copy()
    run = _Run(rows, c, mu, g, cache, Z, nu, k, state, a_prev, any_ball, radius, ball1, radius1)
    if radius is not None and any_ball:
        run.radius = np.broadcast_to(radius, (k,))
        run.ball = np.isfinite(run.radius)
    if radius1 is not None and ball1.size:
        run.radius1 = np.broadcast_to(radius1, (k,))
        run.nu1 = np.zeros(k)
        run.l1m = np.asarray(l1row, dtype=bool)
        run.lo0, run.hi0 = lo, hi
    return run


def _every(run: _Run, act: np.ndarray | slice) -> np.ndarray | slice:
    """``act`` as an index: a slice (views, no copies) where it names every node."""
    return act if isinstance(act, slice) or act.size < run.k else slice(None)


def _states(run: _Run, act: np.ndarray | slice, a: np.ndarray, Za: np.ndarray,
            free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_next_states` of the nodes ``act``."""
    return _next_states(run.c, run.rows, _every(run, act), a, Za, free)


def _system(run: _Run, kind: str, act: np.ndarray) -> dict[str, Any]:
    """:func:`_system_matrices` of the nodes ``act`` with the right side of
    :func:`_with_rhs`; for every node at once, the one in ``cache`` under ``kind`` where
    the active sets and ``mu`` are those it was built for (with its factorizations)."""
    cache, state, mu, g, a_prev = run.cache, run.state, run.mu, run.g, run.a_prev
    lo, hi = run.rows["lo"], run.rows["hi"]
    ix = _every(run, act)
    full = cache is not None and isinstance(ix, slice)
    hit = cache.get(kind) if cache is not None and full else None
    sy = None
    if hit is not None and np.array_equal(hit[1], mu):
        if np.array_equal(hit[0], state):  # (the cached one: kept as it is)
            return _with_rhs(hit[2], g, np.clip(a_prev, lo, hi))
        chg = np.flatnonzero((hit[0] != state).any(axis=1))
        # where few nodes changed their sets: their systems and factors only
        sy = _updated_system(hit[2], _system_matrices(run.rows, state[chg], chg, mu[chg]),
                             chg) if kind == "plain" and chg.size <= run.k // 4 else None
    if sy is None:
        # a later step's nodes: as many free-row slots as the cached system (merged
        # into it without padding)
        held = cache.get(kind) if cache is not None and not full else None
        sy = _system_matrices(run.rows, state[ix], ix, mu[ix],
                              0 if held is None else held[2]["F"])
    if cache is not None and full:
        cache[kind] = (state.copy(), mu.copy(), sy)
    elif cache is not None:  # merged into the cached one when the call ends
        run.later.append((kind, ix, state[ix], sy))
    # the last duals within their intervals: only a tie-break (duals nearest them), and a
    # wild one (a step that failed) would cancel the new duals' digits
    return _with_rhs(sy, g[ix], np.clip(a_prev[ix], lo[ix], hi[ix]))


def _solve(run: _Run, act: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``z`` and the row duals ``a`` of the nodes ``act`` for their current active sets
    (:func:`_system`, then :func:`_affine_solve` or, for nodes with a ball,
    :func:`_ball_solve`, then :func:`_row_duals`)."""
    ix = _every(run, act)
    sy = _system(run, "plain", act)
    if not run.any_ball:
        Za, ad = _affine_solve(sy)
        return Za, _row_duals(sy, Za, ad, None)
    assert run.radius is not None
    Za, ad = np.empty((act.size, run.rows["P"].shape[2])), np.zeros((act.size, sy["F"]))
    nua = np.zeros(act.size)
    on_ball = run.ball[ix]
    for part, ball_part in ((np.flatnonzero(~on_ball), False),
                            (np.flatnonzero(on_ball), True)):
        if part.size == 0:
            continue
        sub = sy if part.size == act.size else dict(
            {key: (val[part] if isinstance(val, np.ndarray) else val)
             for key, val in sy.items()}, fac=sy["fac"].setdefault(ball_part, {}))
        if ball_part:
            Za[part], ad[part], nua[part] = _ball_solve(sub, run.radius[act[part]],
                                                        run.nu[act[part]])
        else:
            Za[part], ad[part] = _affine_solve(sub)
    run.nu[ix] = nua
    return Za, _row_duals(sy, Za, ad, nua)


def _l1_ball_factors(run: _Run, sy: dict[str, Any], ix: np.ndarray | slice) -> dict[str, Any]:
    """The parts of :func:`_solve_l1_ball` that depend on the active sets only (kept in
    ``sy["fac"]``): the held ``l1`` rows' signs ``sig``, ``z_b`` (:func:`_affine_solve` with
    the right side ``fb`` of one unit of ``nu1``) and its duals ``ad_b``, the signs in
    coordinates ``sv`` (``||z||_1 = sv^T z``), ``nb = sv^T z_b`` and the rounding level
    ``moves`` below which ``nb`` counts as moving ``z``."""
    fac = sy["fac"]
    if "zb" not in fac:
        P, mu = run.rows["P"], run.mu
        sig = np.where(run.l1m & ~run.rows["fixed"][ix], run.state[ix], 0).astype(float)
        syb = dict(sy, f=-np.einsum("krd,kr->kd", P[ix], sig),
                   zfix=np.zeros_like(sy["zfix"]), bd=np.zeros_like(sy["bd"]),
                   a0=np.zeros_like(sy["a0"]))
        zb, ad_b = _affine_solve(syb)
        # sv: the signs in coordinates (one l1 row per coordinate), ||z||_1 = sv^T z
        sv = np.einsum("krd,kr->kd", P[ix], sig)
        fac.update(sig=sig, fb=syb["f"], zb=zb, ad_b=ad_b, sv=sv,
                   nb=np.einsum("kd,kd->k", sv, zb),
                   moves=-1e-12 * (np.abs(syb["f"]) @ run.c["ones_d"]) / mu[ix])
    return fac


def _solve_l1_ball(run: _Run, J: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``z`` and the row duals ``a`` of the nodes ``J`` (with a 1-norm ball) for their
    current active sets: the held l1 rows' duals are ``+-(eta + nu1)`` and ``z(nu1) = z_a +
    nu1 z_b`` is affine (two solves of :func:`_affine_solve`, one factorization; ``z_b``
    depends on the active sets only, :func:`_l1_ball_factors`), and so is ``||z||_1 = sum_j
    sigma_j z_j`` (``sigma``: the held rows' signs; free l1 rows fix ``z_j = 0``): ``nu1 = (r
    - ||z_a||_1) / (sum_j sigma_j z_b,j)`` where ``z_a`` is outside, else 0."""
    assert run.radius1 is not None
    lo, hi, lo0, hi0, l1m = run.rows["lo"], run.rows["hi"], run.lo0, run.hi0, run.l1m
    ix = _every(run, J)
    lo[ix], hi[ix] = lo0[ix], hi0[ix]
    sy = _system(run, "l1-ball", J)
    fac = _l1_ball_factors(run, sy, ix)
    sig, zb, nb = fac["sig"], fac["zb"], fac["nb"]
    za, ad_a = _affine_solve(sy)
    na, r1 = np.einsum("kd,kd->k", fac["sv"], za), run.radius1[ix]
    moves, out = nb < fac["moves"], na > r1
    t = np.maximum(np.where(out & moves, (r1 - na) / np.where(moves, nb, -1.0), 0.0), 0.0)
    stuck = np.flatnonzero(out & ~moves)
    if stuck.size:  # z cannot move: nu1 up to where a free row's dual leaves its interval
        Js = J[stuck]
        t[stuck] = _leaving_multiplier(
            {key: (val[stuck] if isinstance(val, np.ndarray) else val)
             for key, val in sy.items()}, za[stuck], ad_a[stuck], fac["ad_b"][stuck],
            sig[stuck], fac["fb"][stuck], run.state[Js], run.rows["fixed"][Js], lo0[Js],
            hi0[Js], l1m)
    run.nu1[ix] = t
    tc = t[:, None]
    lo[ix] = lo0[ix] - tc * l1m
    hi[ix] = hi0[ix] + tc * l1m
    sy["a_fix"] = sy["a_fix"] + tc * sig
    sy["f"] = sy["f"] + tc * fac["fb"]
    Zj = za + tc * zb
    return Zj, _row_duals(sy, Zj, ad_a + tc * fac["ad_b"], None)


def _solve_all(run: _Run, act: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_solve` and, for the nodes with a 1-norm ball, :func:`_solve_l1_ball`."""
    if not run.ball1.size:
        return _solve(run, act)
    assert run.radius1 is not None
    on1 = np.isfinite(run.radius1[act])
    if on1.all():
        return _solve_l1_ball(run, act)
    P = run.rows["P"]
    Za, a = np.empty((act.size, P.shape[2])), np.empty((act.size, P.shape[1]))
    for part, fn in ((on1, _solve_l1_ball), (~on1, _solve)):
        if part.any():
            Za[part], a[part] = fn(run, act[part])
    return Za, a


def _run_steps(run: _Run, act: np.ndarray, max_iter: int) -> np.ndarray:
    """Active-set steps on the nodes ``act``; returns those whose set has not repeated."""
    state, lo, hi, gamma = run.state, run.rows["lo"], run.rows["hi"], run.c["gamma"]
    for it in range(max_iter):
        ix = _every(run, act)
        st = state[act]
        Za, a = _solve_all(run, act)
        run.Z[ix], run.a_prev[ix] = Za, a
        free = st == 0
        new, grad = _states(run, ix, a, Za, free)
        act = _active_set_step(state, act, st, new, it, a, grad, gamma[ix], lo[ix], hi[ix],
                               free)
        if act.size == 0:
            break
    return act


def _run_compiled(run: _Run, max_iter: int, rtol: float) -> np.ndarray:
    """The active-set steps of every node in :func:`~gtvmodel.kernels.nodebox.box_dual_pass`
    (rows with ``q = 0``, no 1-norm ball: the box QP of the row duals with the ``l1`` and
    box rows as linear rows, ``H = mu I``, so the projection onto the free rows' equations is
    the same with or without the unit rows in the pseudo-inverse, and a Euclidean ball's
    step is in closed form, :func:`~gtvmodel.kernels.nodebox._ball_step`; its pseudo-inverses
    kept in ``run.cache``); the coordinates of free unit rows set to their values exactly (as
    :func:`_system_matrices` fixes them, the first row of a coordinate winning); returns
    :func:`_certified`, after the nodes that fail it took the numpy steps again from where
    the loop left them (another pseudo-inverse: the free unit rows' coordinates fixed)."""
    rows, k = run.rows, run.k
    P = rows["P"]
    R, d = P.shape[1:]
    cache = {} if run.cache is None else run.cache
    if cache.get("node-state") is None or cache["node-state"].shape != (k, R):
        cache["node-state"] = np.full((k, R), 127, dtype=np.int8)  # no set yet
        cache["node-pinv"] = np.zeros((k, d, R))
    run.state = np.ascontiguousarray(run.state, dtype=np.int8)
    run.a_prev = np.ascontiguousarray(run.a_prev, dtype=float)
    run.Z = np.ascontiguousarray(run.Z, dtype=float)
    done = np.zeros(k, dtype=bool)
    f64 = [np.ascontiguousarray(rows[key], dtype=float) for key in ("P", "cs", "lo", "hi")]
    compiled_box_dual()(*f64, np.ascontiguousarray(rows["fixed"], dtype=bool),
                        np.ascontiguousarray(np.broadcast_to(run.mu, (k,)), dtype=float),
                        np.ascontiguousarray(run.g, dtype=float), float(rtol), run.state,
                        run.a_prev, run.Z, cache["node-state"], cache["node-pinv"],
                        int(max_iter), done,
                        np.ascontiguousarray(run.radius, dtype=float) if run.any_ball
                        else np.zeros(0), run.nu)
    unit = run.c["unit"]
    if unit.size:
        free = (run.state[:, unit] == 0) & ~rows["fixed"][:, unit]
        kk, uu = np.nonzero(free)
        kk, urows = kk[::-1], unit[uu[::-1]]
        run.Z[kk, run.c["coord"][urows]] = rows["cs"][kk, urows]
    ok = _certified(run)
    if run.cache is not None:  # (their pseudo-inverses will not be the loop's)
        cache["node-state"][~ok] = 127
    return _numpy_again(run, ok, max_iter, rtol)


def _run_quad(run: _Run, max_iter: int, rtol: float) -> np.ndarray:
    """The active-set steps of every node in :func:`~gtvmodel.kernels.nodequad.quad_rows_pass`
    (every data row with ``q > 0``, at most one unit row per coordinate, a Euclidean or a
    1-norm ball: ``H`` positive definite, one factorization per step); returns the loop's KKT
    check (:func:`_certified`'s conditions, in the loop) after the nodes that fail it took
    the numpy steps again from where the loop left them (:func:`_numpy_again`)."""
    rows, k = run.rows, run.k
    R = rows["P"].shape[1]
    ball1 = bool(run.ball1.size)
    lo0, hi0 = (run.lo0, run.hi0) if ball1 else (rows["lo"], rows["hi"])
    f64 = [np.ascontiguousarray(x, dtype=float) for x in (rows["P"], rows["cs"], rows["cq"],
                                                          lo0, hi0)]
    lo, hi = f64[3].copy(), f64[4].copy()
    run.state = np.ascontiguousarray(run.state, dtype=np.int8)
    run.a_prev = np.ascontiguousarray(run.a_prev, dtype=float)
    run.Z = np.ascontiguousarray(run.Z, dtype=float)
    run.nu = np.ascontiguousarray(run.nu, dtype=float)
    nu1, done, none = np.zeros(k), np.zeros(k, dtype=bool), np.full(k, np.inf)
    c = run.c
    if c.get("pn") is None:  # (the rows' norms, kept with the rows' constants)
        c["pn"] = np.sqrt(c["pnorm2"])
    compiled_quad_rows()(
        *f64, np.ascontiguousarray(rows["fixed"], dtype=bool),
        np.ascontiguousarray(c["coord"], dtype=np.int64),
        np.ascontiguousarray(run.l1m if ball1 else np.zeros(R, dtype=bool)),
        np.ascontiguousarray(c["gamma"], dtype=float), c["pn"],
        np.ascontiguousarray(np.broadcast_to(run.mu, (k,)), dtype=float),
        np.ascontiguousarray(run.g, dtype=float), float(rtol), KKT_RTOL, run.state,
        run.a_prev, run.Z, run.nu, nu1, lo, hi,
        np.ascontiguousarray(run.radius, dtype=float) if run.any_ball else none,
        np.ascontiguousarray(run.radius1, dtype=float) if ball1 else none,
        int(max_iter), done)
    if ball1:
        run.nu1, rows["lo"], rows["hi"] = nu1, lo, hi
    return _numpy_again(run, done, max_iter, rtol)


def _numpy_again(run: _Run, ok: np.ndarray, max_iter: int, rtol: float) -> np.ndarray:
    """``ok`` after the nodes where it is False (a compiled loop's answers that failed the
    KKT check, or its steps did not end) took the numpy steps of
    :func:`composite_active_set_prox` from the loop's active sets (their answers, sets and
    the check's result written into ``run``)."""
    bad = np.flatnonzero(~ok)
    if bad.size:
        rows = run.rows
        sub = {key: rows[key][bad] for key in ("P", "cs", "cq", "fixed")}
        ball1 = bool(run.ball1.size)
        lo, hi = (run.lo0, run.hi0) if ball1 else (rows["lo"], rows["hi"])
        Zb, okb, (sb, ab, nub) = composite_active_set_prox(
            **sub, lo=lo[bad], hi=hi[bad], mu=run.mu[bad], g=run.g[bad], Z0=run.Z[bad],
            coord=run.c["coord"], start=(run.state[bad], run.a_prev[bad], run.nu[bad]),
            radius=run.radius[bad] if run.radius is not None and run.any_ball else None,
            radius1=run.radius1[bad] if ball1 and run.radius1 is not None else None,
            l1row=run.l1m if ball1 else None, max_iter=max_iter, rtol=rtol, compiled=False)
        run.Z[bad], run.state[bad], run.a_prev[bad], run.nu[bad], ok[bad] = Zb, sb, ab, nub, okb
    return ok


def _restart(run: _Run, left: np.ndarray) -> None:
    """The nodes ``left`` (still cycling) moved near the solution by projected gradients
    (:func:`_box_qp_projected_gradient`, the dual QP with the balls' multipliers fixed), their
    active sets read off there."""
    P, cs, cq, g = run.rows["P"], run.rows["cs"], run.rows["cq"], run.g
    lo, hi, R = run.rows["lo"], run.rows["hi"], P.shape[1]
    mul = run.mu[left] + run.nu[left]
    Q = (np.einsum("krd,kqd->krq", P[left], P[left]) / mul[:, None, None]
         + cq[left][:, :, None] * np.eye(R))
    b = np.einsum("krd,kd->kr", P[left], g[left]) / mul[:, None] - cs[left]
    a = _box_qp_projected_gradient(Q, b, lo[left], hi[left],
                                   np.clip(run.a_prev[left], lo[left], hi[left]))
    Za = (g[left] - np.einsum("krd,kr->kd", P[left], a)) / mul[:, None]
    run.a_prev[left] = a
    run.state[left] = _states(run, left, a, Za, np.zeros(a.shape, dtype=bool))[0]


def _certified(run: _Run) -> np.ndarray:
    """:func:`kkt_certified` of the call's answer (with the Euclidean balls' conditions), and
    for the 1-norm balls ``||z||_1 <= r``, ``= r`` where the multiplier is positive."""
    rows, Z = run.rows, run.Z
    ok = kkt_certified(rows["P"], rows["cs"], rows["cq"], rows["lo"], rows["hi"],
                       rows["fixed"], run.mu, run.g, Z, run.a_prev,
                       nu=run.nu if run.any_ball else None,
                       radius=run.radius if run.any_ball else None)
    ball1 = run.ball1
    if ball1.size:  # ||z||_1 <= r, and = r where its multiplier is positive
        assert run.radius1 is not None
        n1 = np.abs(Z[ball1]).sum(axis=1)
        r1 = run.radius1[ball1]
        ok[ball1] &= (n1 <= r1 * (1 + KKT_RTOL)) & ((run.nu1[ball1] == 0)
                                                   | (n1 >= r1 * (1 - KKT_RTOL)))
    return ok


def _row_constants(P: np.ndarray, cs: np.ndarray, cq: np.ndarray, lo: np.ndarray,
                   hi: np.ndarray, fixed: np.ndarray, coord: np.ndarray | None, mu: np.ndarray,
                   rtol: float, cache: dict | None) -> dict[str, Any]:
    """What :func:`composite_active_set_prox` computes from its rows alone, kept in ``cache``
    (under ``"rows"``) while the rows are the same arrays: ``coord`` and the unit rows
    (``unit``; ``tail``, a slice where they follow the data rows, as in
    :class:`~gtvmodel.terms.composite.CompositeProxBatch`), the parts of the step's tolerance
    ``rtol (|c s| + |c q a| + ||P_r|| ||z||_1)`` (``tol_s``, ``tol_q``, ``tol_p``), the finite
    bounds (``nlo``, ``nhi``), whether any row has ``q > 0`` (``any_q``), and, while ``mu`` is
    the same, ``gamma = 1 / Q_rr`` (``Q_rr = ||P_r||^2 / mu + c q``)."""
    hit: dict[str, Any] | None = cache.get("rows") if cache is not None else None
    if hit is None or not (all(hit[key] is val for key, val in (
            ("P", P), ("cs", cs), ("cq", cq), ("lo", lo), ("hi", hi), ("fixed", fixed),
            ("coord_in", coord))) and hit["rtol"] == rtol):
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
               "ones_d": np.ones(d), "mu": None, "quad": _quad_rows(cq, fixed, crd, d)}
        if cache is not None:
            cache["rows"] = hit
    if hit["mu"] is None or not np.array_equal(hit["mu"], mu):
        hit["gamma"] = 1.0 / np.maximum(hit["pnorm2"] / mu[:, None] + cq, 1e-300)  # 1 / Q_rr
        hit["mu"] = np.array(mu, dtype=float)
    return hit


def _quad_rows(cq: np.ndarray, fixed: np.ndarray, coord: np.ndarray, d: int) -> bool:
    """Whether :func:`~gtvmodel.kernels.nodequad.quad_rows_pass` takes these rows: every data
    row (``coord < 0``) that is not padding has ``q > 0``, every unit row ``q = 0``, and at
    most one unit row per coordinate and node is not padding."""
    live = ~fixed
    if not (np.where(coord < 0, cq > 0, cq == 0) | fixed).all():
        return False
    return all(int(live[:, coord == j].sum(axis=1).max(initial=0)) <= 1 for j in range(d))


def _next_states(c: dict[str, Any], rows: dict[str, np.ndarray], ix: np.ndarray | slice,
                 a: np.ndarray, Za: np.ndarray, free: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The active sets of the nodes ``ix`` after a step of :func:`composite_active_set_prox`
    (rows' duals ``a``, points ``Za``; ``free``: the rows free in it) and the dual gradients
    ``grad_r = c_r (s_r + q_r a_r) - P_r^T z``: :func:`~gtvmodel.kernels.boxqp._box_active_set`
    at the tolerance ``rtol (|c s| + |c q a| + ||P_r|| ||z||_1)`` (constants ``c`` of
    :func:`_row_constants`), fused with the rule that a dual is never held at an infinite
    bound (that row stays free).  From ``COMPILED_MIN_NODES`` nodes on, where numba is
    installed, node by node in :func:`~gtvmodel.kernels.nodeqp.next_states_pass`."""
    if a.shape[0] >= COMPILED_MIN_NODES and _compiled.available():
        return _next_states_compiled(c, rows, ix, a, Za, free)
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


def _next_states_compiled(c: dict[str, Any], rows: dict[str, np.ndarray],
                          ix: np.ndarray | slice, a: np.ndarray, Za: np.ndarray,
                          free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_next_states` by :func:`~gtvmodel.kernels.nodeqp.next_states_pass` (the rows'
    arrays read in place at the positions ``ix``, no gathers)."""
    k = rows["P"].shape[0]
    nodes = np.arange(k)[ix] if isinstance(ix, slice) else np.asarray(ix, dtype=np.int64)
    state = np.empty(a.shape, dtype=np.int8)
    grad = np.empty(a.shape)
    f64 = [np.ascontiguousarray(rows[key], dtype=float) for key in ("P", "cs", "cq", "lo", "hi")]
    compiled_next_states()(*f64, np.ascontiguousarray(rows["fixed"], dtype=bool),
                           *[np.ascontiguousarray(c[key], dtype=float)
                             for key in ("tol_s", "tol_p", "tol_q", "gamma")],
                           np.ascontiguousarray(c["nlo"]), np.ascontiguousarray(c["nhi"]),
                           nodes, np.ascontiguousarray(a, dtype=float),
                           np.ascontiguousarray(Za, dtype=float),
                           np.ascontiguousarray(free, dtype=bool), state, grad)
    return state, grad


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


def kkt_certified(P: np.ndarray, cs: np.ndarray, cq: np.ndarray, lo: np.ndarray,
                  hi: np.ndarray, fixed: np.ndarray, mu: np.ndarray, g: np.ndarray,
                  Z: np.ndarray, a: np.ndarray, rtol: float = KKT_RTOL, *,
                  nu: np.ndarray | None = None, radius: np.ndarray | None = None
                  ) -> np.ndarray:
    """Per node: whether ``(z, a)`` meets the KKT conditions of the problem of
    :func:`composite_active_set_prox` to ``rtol`` relative to the magnitudes of the terms:
    stationarity ``mu z - g + P^T a = 0``, every dual in its interval, and ``grad_r = c_r (s_r
    + q_r a_r) - P_r^T z`` at most 0 where ``a_r > lo_r`` and at least 0 where ``a_r < hi_r``
    (to ``rtol (|c_r s_r| + |c_r q_r a_r| + |P_r|^T |z|) + |P_r|^T |mu z - g + P^T a| / mu``:
    the conditions at the point ``z' = (g - P^T a) / mu`` where stationarity is exact; a
    tolerance relative to ``|P_r|^T (|g| + |P|^T |a|) / mu`` instead had certified a wrong
    answer of an absolute loss at condition ``3e4``, ``mu = 1.3e-3``, where ``P^T a`` cancels
    to ``1e-4`` of its terms); then ``z`` is the exact minimizer up to that residual over the
    modulus ``mu``.  With balls
    ``||z||_2 <= radius_i`` and their multipliers ``nu >= 0``: stationarity with ``mu + nu``,
    ``||z|| <= r (1 + rtol)`` and, where ``nu > 0``, ``||z|| >= r (1 - rtol)``.  From
    ``COMPILED_MIN_NODES`` nodes on, where numba is installed, node by node in
    :func:`~gtvmodel.kernels.nodeqp.kkt_pass` (the same conditions)."""
    if nu is not None:
        mu = mu + nu
    if P.shape[0] >= COMPILED_MIN_NODES and _compiled.available():
        ok = np.empty(P.shape[0], dtype=bool)
        f64 = [np.ascontiguousarray(x, dtype=float) for x in (P, cs, cq, lo, hi)]
        compiled_kkt()(*f64, np.ascontiguousarray(fixed, dtype=bool),
                       np.ascontiguousarray(np.broadcast_to(mu, (P.shape[0],)), dtype=float),
                       *[np.ascontiguousarray(x, dtype=float) for x in (g, Z, a)],
                       float(rtol), ok)
        return _ball_conditions(ok, Z, nu, radius, rtol)
    with np.errstate(over="ignore", invalid="ignore"):
        a = np.where(fixed, 0.0, a)
        absa, absP, muZ = np.abs(a), np.abs(P), mu[:, None] * Z
        stat = np.abs(muZ - g + np.einsum("krd,kr->kd", P, a))
        stat_scale = np.abs(muZ) + np.abs(g) + np.einsum("krd,kr->kd", absP, absa)
        # the rows' conditions hold at z' = z - (mu z - g + P^T a) / mu, where stationarity is
        # exact: |grad_r(z') - grad_r(z)| <= |P_r|^T |stat| / mu, charged in full (not at
        # rtol: where P^T a cancels, stat may be far above z's own rounding)
        shift = np.einsum("krd,kd->kr", absP, stat / mu[:, None])
        zscale = np.einsum("krd,kd->kr", absP, np.abs(Z))
        if cq.any():
            grad = cs + cq * a - np.einsum("krd,kd->kr", P, Z)
            tol = rtol * (np.abs(cs) + cq * absa + zscale) + shift
        else:  # (the same without the zero terms)
            grad = cs - np.einsum("krd,kd->kr", P, Z)
            tol = rtol * (np.abs(cs) + zscale) + shift
        rows_ok = ((a >= lo) & (a <= hi) & ((a <= lo) | (grad <= tol))
                   & ((a >= hi) | (grad >= -tol)))
        rows_ok |= fixed
        # every condition of a node at once: rows, stationarity, finite z and duals
        ok = np.asarray(np.concatenate((rows_ok, stat <= rtol * stat_scale, np.isfinite(Z),
                                        np.isfinite(a)), axis=1).all(axis=1))
    return _ball_conditions(ok, Z, nu, radius, rtol)


def _ball_conditions(ok: np.ndarray, Z: np.ndarray, nu: np.ndarray | None,
                     radius: np.ndarray | None, rtol: float) -> np.ndarray:
    """``ok`` and, with balls ``||z||_2 <= radius_i`` (multipliers ``nu``), the balls'
    conditions of :func:`kkt_certified`."""
    if radius is not None:
        nz = np.linalg.norm(Z, axis=1)
        nu = np.zeros_like(nz) if nu is None else nu
        ok &= (nz <= radius * (1 + rtol)) & ((nu <= 0) | (nz >= radius * (1 - rtol))) \
            & (nu >= 0)
    return ok

def states_at(Z: np.ndarray, P: np.ndarray, cs: np.ndarray, cq: np.ndarray, lo: np.ndarray,
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
