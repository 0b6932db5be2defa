"""Proximal Newton for a smooth data fit with ``l1`` and coordinate-box rows, all nodes at once
(issue 29 item 1): the node update PU (32) of paper 001,

    PU_i(v) = argmin_z  sum_{r in i} c_r ell(x_r^T z) + eta_i ||z||_1 + kappa_i ||z||^2
                        + iota_{box_i}(z) + ||z - v||^2 / (2 tau_i),                     (32)

written as ``F_i(z) = f_i(z) + eta_i ||z||_1 + iota_{box_i}(z)`` with the smooth part ``f_i(z)
= sum_r c_r ell(x_r^T z) + mu_i ||z||^2 / 2 - g_i^T z`` (``mu = 2 kappa + 1/tau``, ``g = v /
tau``).  At ``z_k`` the smooth part is replaced by its quadratic model (Hessian ``X^T diag(c
ell'') X + mu I``), which with the ``l1`` and box rows is the problem of
:func:`~gtvmodel.kernels.composite.composite_active_set_prox` (data rows ``sqrt(c_r ell''_r)
x_r`` with ``ell*(a) = a^2 / 2``), solved exactly; a backtracking line search on the true
objective follows (:func:`_general_steps`).  A node stops when its point meets the KKT
conditions of (32) itself (:func:`true_kkt`, the data rows' duals ``ell'(x_r^T z)`` held) at
:data:`~gtvmodel.kernels.composite.KKT_RTOL`.  A warm call first takes Newton steps on the last
call's active sets of the ``l1`` and box rows (:func:`_held_newton`, updated primal-dual style
by :func:`_held_states`), certified the same way, from the last answer moved to first order
(:func:`predicted_start`).

The loss enters only through its row functions ``ell``, ``ell'`` and ``(ell', ell'')``
(:class:`RowDerivatives`); the rows come as arrays (:class:`CompositeNewton`: the sample rows,
the padded rows of :func:`~gtvmodel.kernels.composite.composite_active_set_prox` and their
``l1`` and box rows, :func:`unit_rows`).  The caller
(:class:`~gtvmodel.terms.composite.SmoothCompositeProxBatch`) builds them, keeps the state
between calls and solves the nodes left uncertified another way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .composite import KKT_RTOL, composite_active_set_prox
from .linalg import spd_solve
from .newton import RowLoss

__all__ = ["CompositeNewton", "RowDerivatives", "composite_prox_newton", "predicted_start",
           "rows_of", "true_kkt", "certified_at", "unit_rows"]


class RowDerivatives(RowLoss, Protocol):
    """:class:`~gtvmodel.kernels.newton.RowLoss` with ``(ell', ell'')`` in one evaluation."""

    @staticmethod
    def _ell_d12(t: np.ndarray, y: np.ndarray, p: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray]: ...


@dataclass
class CompositeNewton:
    """The arrays of one batch of nodes for :func:`composite_prox_newton`: the row functions
    ``loss``, the sample rows ``data`` (``Xs``, ``y``, ``p``, ``c``, ``cX = c_r x_r``, ``acX =
    |c_r x_r|``, ``cXX = c_r x_r x_r^T``, each row's node ``local`` and slot ``slot`` among its
    node's padded rows, the nodes' row counts ``ms`` and first rows ``starts``; grouped by
    node, every node with a row), the padded rows ``pad`` of
    :func:`~gtvmodel.kernels.composite.composite_active_set_prox` (data rows first, ``coord <
    0``), their ``l1`` and box rows ``units`` (:func:`unit_rows`), the ``l1`` weights ``l1``
    (``eta_i``), the proximal Newton steps before a node is left uncertified (``max_outer``)
    and the Newton steps on the last call's active sets (``held_steps``)."""

    loss: RowDerivatives
    data: dict[str, Any]
    pad: dict[str, np.ndarray]
    units: dict[str, np.ndarray]
    l1: np.ndarray
    max_outer: int = 40
    held_steps: int = 3


def composite_prox_newton(pb: CompositeNewton, Z: np.ndarray, mu: np.ndarray, g: np.ndarray,
                          start: tuple[np.ndarray, ...] | None
                          ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None, np.ndarray | None]:
    """PU (32) of every node of ``pb`` from ``Z`` (in the box; overwritten with the answers)
    with ``mu_i``, ``g_i``: with the last call's active sets and duals ``start`` (the padded
    rows' states and duals, as returned here), up to ``held_steps`` Newton steps on them
    (:func:`_held_newton`), then proximal Newton steps (:func:`_general_steps`) for the nodes
    left.  Returns where the answer meets the true KKT conditions (``done``; elsewhere ``Z``
    is only the last iterate), the active sets and duals for the next call (None: no node
    and no ``start``) and the data part ``X^T diag(c ell'') X`` of the Hessians (for
    :func:`predicted_start`)."""
    done = np.zeros(Z.shape[0], dtype=bool)
    H = None
    if start is not None:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            H = _held_newton(pb, Z, mu, g, start, done)
    if not done.all():
        start, H = _general_steps(pb, Z, mu, g, start, done, H)
    return done, start, H


def predicted_start(pb: CompositeNewton, last: dict[str, Any] | None, mu: np.ndarray,
                    g: np.ndarray, start: tuple[np.ndarray, ...]) -> np.ndarray:
    """A start for the call at ``g``: the last call's answer moved to first order, ``dz =
    (H_FF)^{-1} (g - g_last)_F`` on the coordinates ``F`` that no free ``l1`` or bound row
    fixes (last active sets ``start``), ``H = X^T diag(c ell'') X + mu I`` with the last
    call's data part (``last``: its ``mu``, ``g``, answer ``Z`` and ``H``; Algorithm 1's next
    point is near: the Newton steps from there are fewer; the stop is the same)."""
    if last is None or not np.array_equal(last["mu"], mu) or last["g"].shape != g.shape:
        return last["Z"] if last is not None and last["Z"].shape == g.shape else g / mu[:, None]
    um = pb.units
    fr = ((start[0][:, um["U"]] == 0) & ~um["fixed"]) @ um["Ef"] == 0
    dz = _reduced_solve(last["H"], mu, fr, g - last["g"])
    return last["Z"] + dz


def unit_rows(pad: dict[str, np.ndarray], d: int) -> dict[str, np.ndarray]:
    """The ``l1`` and box rows of the padded rows ``pad`` (``coord >= 0``): their indices
    ``U``, the one-hot ``Ef`` ``(|U|, d)`` of their coordinates (float), their ``s`` (``z_j``
    where such a row is free), dual intervals ``lo``, ``hi`` (and where those are infinite)
    and padding."""
    U = np.flatnonzero(pad["coord"] >= 0)
    lo, hi = pad["lo"][:, U], pad["hi"][:, U]
    return {"U": U, "Ef": (pad["coord"][U][:, None] == np.arange(d)).astype(float),
            "coord": pad["coord"][U], "s": pad["cs"][:, U], "fixed": pad["fixed"][:, U],
            "lo": lo, "hi": hi, "inf_lo": np.isinf(lo), "inf_hi": np.isinf(hi)}


def rows_of(data: dict[str, Any], nodes: np.ndarray) -> dict[str, Any]:
    """The sample rows of ``nodes`` (sorted; every node has a row) as compact arrays, in
    the nodes' order: ``Xs``, ``y``, ``p``, ``c``, ``cX``, ``acX``, ``cXX``, each row's position
    ``loc`` in ``nodes``, the ``reduceat`` offsets ``offs`` of the nodes' row blocks, and its
    node and slot in the padded rows (``node``, ``slot``).  All nodes: views of ``data``."""
    local, ms = data["local"], data["ms"]
    if nodes.size == ms.size:
        r: Any = slice(None)
        loc, offs = local, data["starts"]
    else:
        mask = np.zeros(ms.size, dtype=bool)
        mask[nodes] = True
        r = np.flatnonzero(mask[local])
        loc, offs = _blocks(ms[nodes])
    p = data["p"]
    return {"Xs": data["Xs"][r], "y": data["y"][r], "p": None if p is None else p[r],
            "c": data["c"][r], "cX": data["cX"][r], "acX": data["acX"][r],
            "cXX": data["cXX"][r], "node": local[r], "slot": data["slot"][r], "loc": loc,
            "offs": offs, "ms": ms[nodes]}


def _blocks(ms: Any) -> tuple[np.ndarray, np.ndarray]:
    """Each row's block and the ``reduceat`` offsets of consecutive blocks of ``ms`` rows."""
    return (np.repeat(np.arange(ms.size), ms),
            np.concatenate(([0], np.cumsum(ms)[:-1])).astype(np.int64))


def _kept_rows(rw: dict[str, Any], keep: np.ndarray) -> dict[str, Any]:
    """:func:`rows_of` of the nodes ``keep`` (a mask over ``rw``'s nodes), from ``rw``'s
    rows (no gather from the full arrays)."""
    rk = np.flatnonzero(keep[rw["loc"]])  # (np.take: faster than a mask's gather)
    out = {key: (None if val is None else np.take(val, rk, axis=0))
           for key, val in rw.items() if key not in ("loc", "offs", "ms")}
    out["ms"] = rw["ms"][keep]
    out["loc"], out["offs"] = _blocks(out["ms"])
    return out


def _at(rw: dict[str, Any], Z: np.ndarray) -> np.ndarray:
    """``t_r = x_r^T z_i`` for ``rw``'s rows (``Z``: their nodes' points, compact)."""
    return np.einsum("rd,rd->r", rw["Xs"], np.take(Z, rw["loc"], axis=0))


def _derivs(loss: RowDerivatives, rw: dict[str, Any], Z: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """``ell'(x_r^T z)``, ``ell''(x_r^T z)`` for ``rw``'s rows (:func:`_at`)."""
    return loss._ell_d12(_at(rw, Z), rw["y"], rw["p"])


def _sum(rw: dict[str, Any], rows: np.ndarray) -> np.ndarray:
    """``sum_{r in i} rows_r`` per node of ``rw`` (every node has a row)."""
    return np.add.reduceat(rows, rw["offs"], axis=0)


def _objective(loss: RowDerivatives, rw: dict[str, Any], Z: np.ndarray, mu: np.ndarray,
               g: np.ndarray, l1: np.ndarray) -> np.ndarray:
    """``F_i(z) = sum_r c_r ell(x_r^T z) + eta_i ||z||_1 + mu_i ||z||^2 / 2 - g_i^T z`` for
    ``rw``'s nodes (compact arrays)."""
    ell = loss._ell(_at(rw, Z), rw["y"], rw["p"])
    return (_sum(rw, rw["c"] * ell) + l1 * np.abs(Z).sum(axis=1)
            + 0.5 * mu * (Z**2).sum(axis=1) - (g * Z).sum(axis=1))


def _model_rows(loss: RowDerivatives, rw: dict[str, Any], P: np.ndarray, Z: np.ndarray,
                g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The quadratic model of ``sum_r c_r ell(x_r^T z) - g^T z`` at ``Z`` (``rw``'s nodes,
    compact): writes its data rows ``sqrt(c_r ell''_r) x_r`` into ``P`` and returns ``(g -
    sum_r c_r (ell'_r - ell''_r t_r) x_r, ell'_r)`` (its linear part, the rows' first
    derivatives)."""
    t = _at(rw, Z)
    d1, d2 = loss._ell_d12(t, rw["y"], rw["p"])
    P[rw["loc"], rw["slot"], :] = np.sqrt(rw["c"] * d2)[:, None] * rw["Xs"]
    return g - _sum(rw, (rw["c"] * (d1 - d2 * t))[:, None] * rw["Xs"]), d1


def true_kkt(um: dict[str, Any], nodes: np.ndarray | slice, Z: np.ndarray, aU: np.ndarray,
             G1: np.ndarray, A1: np.ndarray, mu: np.ndarray, g: np.ndarray) -> np.ndarray:
    """:func:`~gtvmodel.kernels.composite.kkt_certified` of PU (32) itself for ``nodes``
    (compact arrays) at ``Z``: the data rows ``P_r = c_r x_r`` with their duals ``ell'(x_r^T
    z)`` held (``lo = hi``, so only stationarity and finiteness involve them: ``G1 = sum_r
    ell'_r c_r x_r``, ``A1 = sum_r |ell'_r| |c_r x_r|``), the ``l1`` and box rows ``P_u =
    e_j`` (``um``, :func:`unit_rows`) with the duals ``aU``.  The same conditions at the same
    tolerance as ``kkt_certified`` on the padded rows, without the padded arrays:
    stationarity ``|mu z - g + G1 + sum_u a_u e_j| <= rtol (|mu z| + |g| + A1 + sum_u |a_u|
    e_j)`` per coordinate, every unit dual in ``[lo_u, hi_u]`` with ``grad_u = s_u - z_j``
    at most ``tol_u`` where ``a_u > lo_u`` and at least ``-tol_u`` where ``a_u < hi_u``,
    ``tol_u = rtol (|s_u| + |z_j|) + stat_j / mu``, and a finite ``scale`` (finite ``z``, unit
    duals and ``A1``, so the data duals: ``kkt_certified``'s finiteness, also failing
    where the sum overflows); padding rows are left out."""
    fixed, s, lo, hi = (um[key][nodes] for key in ("fixed", "s", "lo", "hi"))
    E, coord = um["Ef"], um["coord"]
    with np.errstate(over="ignore", invalid="ignore"):
        a = np.where(fixed, 0.0, aU)
        muZ = mu[:, None] * Z
        stat = np.abs(muZ - g + G1 + a @ E)
        scale = np.abs(muZ) + np.abs(g) + A1 + np.abs(a) @ E
        grad = s - Z[:, coord]
        # (kkt_certified's row tolerance: the conditions at z' = z - stat / mu)
        tol = KKT_RTOL * np.abs(s) + (KKT_RTOL * np.abs(Z) + stat / mu[:, None])[:, coord]
        rows_ok = ((a >= lo) & (a <= hi) & ((a <= lo) | (grad <= tol))
                   & ((a >= hi) | (grad >= -tol))) | fixed
        # a finite scale: z, the unit duals and A1 finite (overflow of the sum too)
        return (rows_ok.all(axis=1) & (stat <= KKT_RTOL * scale).all(axis=1)
                & np.isfinite(scale).all(axis=1))


def certified_at(pb: CompositeNewton, rw: dict[str, Any], sel: np.ndarray, S: np.ndarray,
                 Z: np.ndarray, a: np.ndarray, mu: np.ndarray, g: np.ndarray) -> np.ndarray:
    """:func:`true_kkt` of the compact nodes ``sel`` (positions in ``S``, ``rw``'s nodes)
    at ``Z[sel]`` with the unit rows' duals of ``a[sel]`` (the quadratic model's)."""
    um = pb.units
    keep = np.zeros(S.size, dtype=bool)
    keep[sel] = True
    sub = rw if keep.all() else _kept_rows(rw, keep)
    Zs = Z[sel]
    d1 = pb.loss._ell_d1(_at(sub, Zs), sub["y"], sub["p"])
    return true_kkt(um, S[sel], Zs, a[sel][:, um["U"]], _sum(sub, d1[:, None] * sub["cX"]),
                    _sum(sub, np.abs(d1)[:, None] * sub["acX"]), mu[sel], g[sel])


def _reduced_solve(Hd: np.ndarray, mu: np.ndarray, free: np.ndarray, rhs: np.ndarray
                   ) -> np.ndarray:
    """``dz`` with ``(Hd + mu I)_FF dz_F = rhs_F`` and ``dz = 0`` off ``F`` (``free``,
    ``(k, d)``), for every node at once (:func:`~gtvmodel.kernels.linalg.spd_solve`)."""
    d = Hd.shape[1]
    H = Hd + mu[:, None, None] * np.eye(d)
    H = np.where(free[:, :, None] & free[:, None, :], H, np.eye(d))
    return spd_solve(H, np.where(free, rhs, 0.0))


def _general_steps(pb: CompositeNewton, Z: np.ndarray, mu: np.ndarray, g: np.ndarray,
                   start: tuple[np.ndarray, ...] | None, done: np.ndarray,
                   H: np.ndarray | None) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """Proximal Newton steps for the nodes ``S`` not ``done`` (``Z`` and ``done`` updated in
    place), on compact arrays of ``S`` and their rows only: each step solves the quadratic
    model exactly (:func:`~gtvmodel.kernels.composite.composite_active_set_prox`), stops the
    nodes whose answer meets the true KKT conditions (:func:`certified_at`) and moves the
    others along ``zhat - z`` (:func:`_line_search`).  Returns the active sets and duals for
    the next call's start and the data part of the Hessians ``X^T diag(c ell'') X`` (those of
    ``H`` for the nodes done before, else of each node's last quadratic model)."""
    pad = pb.pad
    k = pb.data["ms"].size
    S = np.flatnonzero(~done)
    sx: np.ndarray | slice = S if S.size < k else slice(None)
    rw = rows_of(pb.data, S)
    rows: dict[str, Any] = {key: pad[key][sx] for key in ("cs", "cq", "lo", "hi", "fixed")}
    P = pad["P"][sx].copy()
    Zc, muc, gc, l1c = Z[S], mu[sx], g[sx], pb.l1[sx]
    st: Any = None if start is None else tuple(s[sx] for s in start)  # (copies: S < k)
    n = S.size
    fin = np.zeros(n, dtype=bool)
    act = np.arange(n)
    for _ in range(pb.max_outer):
        ix = act if act.size < n else slice(None)
        gt, d1 = _model_rows(pb.loss, rw, P, Zc, gc)
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
            cert[act[near]] = certified_at(pb, rw, act[near], S, Znew, st[1], muc, gc)
        Zc[cert] = Znew[cert]
        fin |= cert
        act = act[~cert[act]]
        if act.size == 0:
            break
        act = _line_search(pb.loss, rw, act, Zc, Znew, d1, muc, gc, l1c)
        if act.size == 0:
            break
    Z[S], done[S] = Zc, fin
    return _merged(start, st, S, k), _model_hessians(P, pad["coord"], H, S, k)


def _merged(start: tuple[np.ndarray, ...] | None, st: tuple[np.ndarray, ...], S: np.ndarray,
            k: int) -> tuple[np.ndarray, ...]:
    """The next call's active sets and duals: ``st`` (those of the nodes ``S``) written into
    ``start`` (in place; ``st`` itself where there is no ``start`` or ``S`` is every node)."""
    if start is None or S.size == k:
        return st
    for full, part in zip(start, st, strict=True):
        full[S] = part
    return start


def _model_hessians(P: np.ndarray, coord: np.ndarray, H: np.ndarray | None, S: np.ndarray,
                    k: int) -> np.ndarray:
    """The data part ``X^T diag(c ell'') X = sum_r P_r P_r^T`` of the last quadratic models
    (data rows ``P_r``, ``coord < 0``) of the nodes ``S``, written into a copy of ``H``."""
    Pm = P[:, coord < 0]
    Hm = np.einsum("krd,kre->kde", Pm, Pm)
    if H is None or S.size == k:
        return Hm
    H = H.copy()
    H[S] = Hm
    return H


def _held_states(pb: CompositeNewton, Z: np.ndarray, aU: np.ndarray, stU: np.ndarray,
                 nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``l1`` and box rows' active sets (``stU``, duals ``aU``: those rows' columns of
    the nodes ``nodes``, compact) after a step of :func:`_held_newton` that was not
    certified (a primal-dual active-set update): a free row whose dual left its interval
    is held at the bound it passed; any other row is held at the bound the sign of ``z_j
    - s_r`` points to (``z`` past a bound frees that bound's row: ``z_j`` is set there;
    past ``0`` the ``l1`` row's dual changes sign), and free where it is ``0`` or that bound
    is infinite.  Returns ``(states, duals)`` (held duals at their bounds)."""
    um = pb.units
    lo, hi, fixed = um["lo"][nodes], um["hi"][nodes], um["fixed"][nodes]
    free = (stU == 0) & ~fixed
    sU = np.sign(Z[:, um["coord"]] - um["s"][nodes])
    sU = np.where(free, np.where(aU > hi, 1, np.where(aU < lo, -1, 0)), sU)
    sU = np.where(((sU < 0) & um["inf_lo"][nodes]) | ((sU > 0) & um["inf_hi"][nodes]), 0,
                  sU)
    sU = np.where(fixed, -1, sU)
    aU = np.where(fixed, 0.0, np.where(sU < 0, lo, np.where(sU > 0, hi, aU)))
    return sU.astype(stU.dtype), aU


def _held_sets(um: dict[str, Any], nodes: np.ndarray | slice, stU: np.ndarray,
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


def _held_newton(pb: CompositeNewton, Z: np.ndarray, mu: np.ndarray, g: np.ndarray,
                 start: tuple[np.ndarray, ...], done: np.ndarray) -> np.ndarray:
    """Up to ``held_steps`` Newton steps on PU (32) with the ``l1`` and box rows' last
    active sets held (``start``), on compact arrays of the nodes not yet certified: a free
    such row fixes ``z_j = s_r`` (``0`` or the bound, :func:`_held_sets`), a held one adds
    its dual (``+-eta``, ``0``) to the gradient; on the other coordinates ``F``, ``(H_FF)
    dz_F = -grad_F`` with ``H = X^T diag(c ell'') X + mu I`` at ``z``.  After a step the
    rows' ``ell'`` and ``ell''`` are evaluated once at the new point: the free rows' duals
    are the stationarity residual on their coordinates, the point is certified by the true
    KKT conditions (:func:`true_kkt`; a node with two free rows on one coordinate is
    not), and for the nodes left the held sets are updated (:func:`_held_states`) and the
    next step's gradient and Hessian come from the same evaluation (re-evaluated only at
    the nodes where a newly fixed coordinate moved ``z``).  A wrong active set or an
    unconverged step is only a node left for the general steps.  Certified nodes get
    their ``Z``, ``done`` and ``start`` (states and duals, the data rows' duals
    ``ell'(x_r^T z)``) in place.  Returns ``X^T diag(c ell'') X`` per node at the start of
    its last step (the next call's :func:`predicted_start`)."""
    um, loss = pb.units, pb.loss
    U = um["U"]
    k, d = Z.shape
    H = np.zeros((k, d, d))
    nodes = np.arange(k)
    rw = rows_of(pb.data, nodes)
    stU, aU = start[0][:, U], start[1][:, U]
    Zs, mu_s, g_s = Z, mu, g
    d1: Any = None
    d2: Any = None
    for step in range(pb.held_steps):
        ix = nodes if nodes.size < k else slice(None)
        hs = _held_sets(um, ix, stU, aU)
        Zn = np.where(hs["fixc"], hs["zfix"], Zs)
        if d1 is None:
            d1, d2 = _derivs(loss, rw, Zn)
        else:  # the last step's evaluation, except where a newly fixed coordinate moved z
            moved = (Zn != Zs).any(axis=1)
            if moved.any():
                sub = _kept_rows(rw, moved)
                rm = moved[rw["loc"]]
                d1[rm], d2[rm] = _derivs(loss, sub, Zn[moved])
        Hd = _sum(rw, d2[:, None, None] * rw["cXX"])
        H[ix] = Hd
        grad = _sum(rw, d1[:, None] * rw["cX"]) + mu_s[:, None] * Zn - g_s + hs["held"]
        Zs = Zn + _reduced_solve(Hd, mu_s, ~hs["fixc"], -grad)
        d1, d2 = _derivs(loss, rw, Zs)
        G1 = _sum(rw, d1[:, None] * rw["cX"])
        res = g_s - hs["held"] - mu_s[:, None] * Zs - G1
        aU = np.where(hs["free"], res[:, um["coord"]], aU)
        ok = (hs["nfix"] <= 1).all(axis=1) & true_kkt(
            um, ix, Zs, aU, G1, _sum(rw, np.abs(d1)[:, None] * rw["acX"]), mu_s, g_s)
        if ok.any():
            _write_certified(Z, start, nodes[ok], Zs[ok], stU[ok], aU[ok], rw, ok, d1, U)
            done[nodes[ok]] = True
        if ok.all() or step == pb.held_steps - 1:
            break
        keep = ~ok
        nodes, Zs, stU, aU, mu_s, g_s = (x[keep] for x in (nodes, Zs, stU, aU, mu_s, g_s))
        rk = keep[rw["loc"]]
        d1, d2 = d1[rk], d2[rk]
        rw = _kept_rows(rw, keep)
        stU, aU = _held_states(pb, Zs, aU, stU, nodes)
    return H


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


def _line_search(loss: RowDerivatives, rw: dict[str, Any], act: np.ndarray, Z: np.ndarray,
                 Znew: np.ndarray, d1: np.ndarray, mu: np.ndarray, g: np.ndarray,
                 l1: np.ndarray) -> np.ndarray:
    """Moves ``Z[act]`` along ``Znew - Z`` (in place; ``rw``'s nodes, compact) by Armijo
    backtracking on the true objective (:func:`_objective`): the largest ``s = 2^-j`` with
    ``F(z + s dz) <= F(z) + s D / 4 + 1e-13 (1 + |F|)``, ``D = grad f^T dz + eta
    (||zhat||_1 - ||z||_1)``; returns the nodes that moved (a node that cannot is left
    uncertified)."""
    dz = Znew - Z
    grad = _sum(rw, (rw["c"] * d1)[:, None] * rw["Xs"]) + mu[:, None] * Z - g
    D = ((grad * dz).sum(axis=1) + l1 * (np.abs(Znew).sum(axis=1) - np.abs(Z).sum(axis=1)))
    F0 = _objective(loss, rw, Z, mu, g, l1)
    step = np.zeros(Z.shape[0])
    todo = act.copy()
    s = 1.0
    for _ in range(40):
        Ft = _objective(loss, rw, Z + s * dz, mu, g, l1)
        good = Ft[todo] <= F0[todo] + 0.25 * s * D[todo] + 1e-13 * (1.0 + np.abs(F0[todo]))
        step[todo[good]] = s
        todo = todo[~good]
        if todo.size == 0:
            break
        s *= 0.5
    moved = act[step[act] > 0]
    Z[moved] += step[moved, None] * dz[moved]
    return moved
