"""Compiled (numba) row kernels of the edge dual update DU (33), and the fused edge pass.

Optional: numba is imported only by :func:`kernels` (``pip install 'gtvmodel[fast]'``), so
``import gtvmodel`` never pays for it.  A penalty offers its DU row formula through
:meth:`gtvmodel.terms.penalties.Penalty.compiled_dual_row`, which returns the *parameters* of
one of the row kernels below as a named tuple (:class:`L2BallRow`, :class:`ClipRow`,
:class:`ScaleRow`); the fused edge pass :func:`edge_pass` is compiled once per parameter
type, the row kernel resolved at compile time by that type (numba's ``overload``, registry
:data:`ROW_KERNELS`): no function pointer, so ``cache=True`` keeps the machine code across
processes (a driver taking the kernel as a function object is compiled anew in every
process: numba's cache keys it by the object's identity).

Every row kernel gets the rows ``e0 <= e < e1`` of ``X`` (the arguments ``u_e + sigma_e (D
(2 w^{k+1} - w^k))_e`` of DU, written into the output rows), the steps ``sigma`` and its
parameters; it overwrites each row with ``DU_e`` of it, or leaves it unchanged and flags it
when the row needs the numpy path (NaN, norms outside the range where the rounding bound is
proven, radii in the subnormal range): the caller then runs the penalty's own
:meth:`~gtvmodel.terms.penalties.Penalty.dual_update` on those rows.  So the guarantees of
the numpy path (a ``Norm2`` flow is inside its capacity for certain, :class:`L2BallRow`) hold
for every row whichever path computed it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ._norms import L2BallProjection

__all__ = ["available", "kernels", "Kernels", "Compiled", "L2BallRow", "ClipRow", "ScaleRow",
           "ROW_KERNELS", "BLOCK_ROWS", "l2_ball_row", "edge_pass", "pair_pass", "node_pass",
           "affine_node_pass", "gather_rows", "l2_pair_pass", "unpermute_rows",
           "sample_node_pass",
           "potentials_pass", "rows_pass", "SubspaceKernels", "subspace_kernels", "dot_pass",
           "cg_update_pass", "cg_direction_pass", "subtract_rows_pass", "ball_excess_pass",
           "demands_pass",
           "ball_project_pass"]


def available() -> bool:
    """numba is importable (the optional extra ``gtvmodel[fast]``)."""
    return importlib.util.find_spec("numba") is not None


class L2BallRow(NamedTuple):
    """Parameters of :func:`_l2_ball_rows`, the projection onto ``{||x||_2 <= r_e}`` (DU of
    ``Norm2``): the radii and the constants of :class:`gtvmodel._norms.L2BallProjection`
    (:func:`l2_ball_row`; its per-edge arrays ``r_e`` times a constant are formed in the
    kernel, the same products: fewer arrays to read)."""

    r: np.ndarray         # radii r_e = lambda A_e
    scale_factor: float   # 1 - (K + 10) eps: r_e times it is the scale factor's numerator
    inside_factor: float  # 1 - eps: the scaled row's bound must not exceed r_e times it
    r_min: float          # smaller radii: their scaled rows take the numpy path
    grow: float           # 1 + (K + 2) eps: the computed norm -> an upper bound of the norm
    tight: float          # 1 + 3 eps: the rounding of the scaled row's bound
    f_min: float          # scale factors below this take the numpy path
    lo: float             # norms in [lo, hi] need no scaling (the unscaled range)
    hi: float


class ClipRow(NamedTuple):
    """Parameters of :func:`_clip_row`, the projection onto ``{||x||_inf <= r_e}`` (DU of
    ``Norm1``: clipping each entry to ``[-r_e, r_e]``, exact)."""

    r: np.ndarray


class ScaleRow(NamedTuple):
    """Parameters of :func:`_scale_row`, ``x lambda A_e / (lambda A_e + sigma_e)`` (DU of
    ``SquaredNorm2``; 0 at ``lambda A_e = 0``, ``x`` at ``lambda A_e = inf``)."""

    lamA: np.ndarray


def l2_ball_row(projection: L2BallProjection) -> L2BallRow:
    """The :class:`L2BallRow` of a :class:`~gtvmodel._norms.L2BallProjection` (its radii and
    constants, computed there: one place for the bound)."""
    eps = float(np.finfo(float).eps)
    return L2BallRow(projection.r, projection.scale_factor, projection.inside_factor,
                     projection.r_min, projection.grow, 1.0 + 3 * eps, projection.f_min,
                     float(projection.lo), float(projection.hi))


def _l2_factor(s, r, hi, lo, grow, scale_factor, f_min, tight, inside_factor, r_min):
    """DU of ``Norm2`` for one row from its sum of squares ``s`` (any summation order), radius
    ``r`` and the constants of :class:`L2BallRow` (as scalars: a call with the named tuple
    itself counts its array's references on every row, about 20 % of the pass): the
    arithmetic of
    :class:`~gtvmodel._norms.L2BallProjection` (and :func:`~gtvmodel._norms._project_l2_fast`,
    whose docstring proves the bound), the one place of it for :func:`_l2_ball_rows` and
    :func:`l2_pair_pass` (unannotated: numba's ``register_jitable``, :func:`kernels`).  ``c =
    fl(sqrt(s))`` (``||x|| <= c (1 + K eps)``); a row with ``c (1 + (K + 2) eps) <= r`` is
    inside for certain: 1.0 (keep it); any other is scaled by ``f = r (1 - (K + 10) eps) / c``
    (returned, ``0 < f < 1``) once ``fl(fl(f b)(1 + 3 eps)) <= fl(r (1 - eps))`` proves the
    scaled row inside (``b`` the bound of ``||x||``).  0.0: a norm below ``lo`` (inside if the
    row is zero, else squares that underflow: the caller checks the entries); -1.0: the numpy
    path's rows (NaN or infinite rows, norms above ``hi``, factors below ``f_min``, radii below
    ``2^-900``)."""
    nrm = np.sqrt(s)
    if not nrm <= hi:  # NaN, inf and squares near overflow
        return -1.0
    if nrm < lo:
        return 0.0
    upper = nrm * grow
    if upper <= r:
        return 1.0
    f = (r * scale_factor) / nrm
    if f >= f_min and (f * upper) * tight <= r * inside_factor and r >= r_min:
        return f
    return -1.0


def _l2_ball_rows(X, e0, e1, sigma, params, flagged, nf):  # unannotated: numba's overload
    """DU of ``Norm2`` on the rows ``e0 <= e < e1`` (:func:`_l2_factor` of each, radius
    ``r_e``); the rows it declines are flagged (numpy path)."""
    d = X.shape[1]
    p = params
    hi, lo, grow, sf, fm = p.hi, p.lo, p.grow, p.scale_factor, p.f_min
    tight, inside, r_min = p.tight, p.inside_factor, p.r_min
    for e in range(e0, e1):
        s = 0.0
        for j in range(d):
            s += X[e, j] * X[e, j]
        f = _l2_factor(s, p.r[e], hi, lo, grow, sf, fm, tight, inside, r_min)
        ok = f > 0.0
        if f == 0.0:  # the zero row is inside
            ok = True
            for j in range(d):
                ok = ok and X[e, j] == 0.0
        elif ok and f != 1.0:
            for j in range(d):
                X[e, j] *= f
        if not ok:
            flagged[nf] = e
            nf += 1
    return nf


def _clip_rows(X, e0, e1, sigma, params, flagged, nf):  # unannotated: numba's overload
    """DU of ``Norm1`` on the rows ``e0 <= e < e1``: each entry clipped to ``[-r_e, r_e]``
    (exact, as :func:`~gtvmodel._norms.project_rows` for ``q = inf``); rows with NaN are
    flagged (the numpy path leaves them as they are)."""
    d = X.shape[1]
    for e in range(e0, e1):
        ok = True
        for j in range(d):
            ok = ok and X[e, j] == X[e, j]
        if not ok:
            flagged[nf] = e
            nf += 1
            continue
        r = params.r[e]
        for j in range(d):
            if X[e, j] > r:
                X[e, j] = r
            elif X[e, j] < -r:
                X[e, j] = -r
    return nf


def _scale_rows(X, e0, e1, sigma, params, flagged, nf):  # unannotated: numba's overload
    """DU of ``SquaredNorm2`` on the rows ``e0 <= e < e1``: ``x lambda A_e / (lambda A_e +
    sigma_e)`` (the arithmetic of :meth:`~gtvmodel.terms.penalties.SquaredNorm2.
    dual_update`); none flagged."""
    for e in range(e0, e1):
        la = params.lamA[e]
        if la <= 0.0:
            f = 0.0
        elif np.isinf(la):
            f = 1.0
        else:
            f = la / (la + sigma[e])
        for j in range(X.shape[1]):
            X[e, j] = X[e, j] * f
    return nf


#: The row kernels by the type of their parameters (:meth:`Penalty.compiled_dual_row
#: <gtvmodel.terms.penalties.Penalty.compiled_dual_row>` returns an instance of one of them).
ROW_KERNELS: dict[type, Callable[..., int]] = {
    L2BallRow: _l2_ball_rows, ClipRow: _clip_rows, ScaleRow: _scale_rows}


def _dual_rows(X: np.ndarray, e0: int, e1: int, sigma: np.ndarray, params: Any,
               flagged: np.ndarray, nf: int) -> int:
    """The row kernel of ``params``' type on the rows ``e0 <= e < e1`` of ``X`` (resolved,
    and inlined, when numba compiles :func:`edge_pass`): ``nf`` plus the number of rows
    flagged (their indices appended to ``flagged`` from position ``nf``)."""
    return ROW_KERNELS[type(params)](X, e0, e1, sigma, params, flagged, nf)


#: Rows per block of :func:`edge_pass`: the arguments of a block are formed, then its row
#: kernel runs on them while they are in the core's cache (one call per block: a call per
#: row, with its parameters, cost about as much as the row's arithmetic).
BLOCK_ROWS = 256


def edge_pass(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, Y: np.ndarray,
              U: np.ndarray, sigma: np.ndarray, out: np.ndarray, params: Any, e0: int, e1: int,
              DTu: np.ndarray, scatter: bool, flagged: np.ndarray, dW: np.ndarray,
              residual: bool) -> tuple[int, float]:
    """DU (33) on the edges ``e0 <= e < e1`` in one pass, :data:`BLOCK_ROWS` edges at a time:
    ``(D Y)_e`` from the rows of ``Y = 2 w^{k+1} - w^k`` of the edge's endpoints (``D``'s CSR
    arrays, the entries in CSR order, as scipy's product), the argument ``u_e + sigma_e (D
    Y)_e`` (the operations of :func:`~gtvmodel.primal_dual.updates.dual_argument`) written
    into ``out[e]``, then the row kernel of ``params`` on the block.  With ``scatter``:
    ``DTu`` is zeroed and receives ``D^T u^{k+1}``, each edge's row added to its endpoints'
    rows in edge order (the order of the product with ``D^T``'s CSR rows).  ``out`` may be
    ``U`` (DU in place: each row is read before it is written).  The rows the
    kernel declines go to ``flagged``, left holding the argument (and added to ``DTu`` as
    such: the caller recomputes it when there are any).  With ``residual``: the sum of squares
    of the dual residual ``(u^k - u^{k+1}) / sigma - D (w^k - w^{k+1})``
    (:func:`gtvmodel.primal_dual.steps.residuals`, the same operations per entry; ``dW =
    w^k - w^{k+1}``), read while the block is in cache, over the rows not flagged: those
    then hold ``u^k`` again, not the argument (the caller computes their DU and residual);
    else 0.  Returns ``(number of flagged rows, sum of squares)``."""
    d = U.shape[1]
    nf = 0
    rsq = 0.0
    if scatter:
        DTu[:, :] = 0.0
    # with the residual: the block's u^k rows (``out`` may be ``U``: DU in place) and its rows
    # of D dW, read in the same sweep as the rows of Y
    old = np.empty((BLOCK_ROWS if residual else 0, d))
    ddw = np.empty((BLOCK_ROWS if residual else 0, d))
    for b0 in range(e0, e1, BLOCK_ROWS):
        b1 = min(b0 + BLOCK_ROWS, e1)
        for e in range(b0, b1):
            k0, k1 = indptr[e], indptr[e + 1]
            s = sigma[e]
            if residual:
                for j in range(d):
                    old[e - b0, j] = U[e, j]
                    ddw[e - b0, j] = 0.0
                for k in range(k0, k1):
                    c, a = indices[k], data[k]
                    for j in range(d):
                        ddw[e - b0, j] += a * dW[c, j]
            if k1 - k0 == 2:  # an edge (two endpoints): its rows of Y read once, vectorized
                c0, c1, a0, a1 = indices[k0], indices[k0 + 1], data[k0], data[k0 + 1]
                for j in range(d):
                    out[e, j] = s * ((0.0 + a0 * Y[c0, j]) + a1 * Y[c1, j]) + U[e, j]
            else:
                for j in range(d):
                    out[e, j] = 0.0
                for k in range(k0, k1):
                    c, a = indices[k], data[k]
                    for j in range(d):
                        out[e, j] += a * Y[c, j]
                for j in range(d):
                    out[e, j] = s * out[e, j] + U[e, j]
        nf0 = nf
        nf = _dual_rows(out, b0, b1, sigma, params, flagged, nf)
        if residual:
            q = nf0  # the block's flagged rows (ascending) are left out
            for e in range(b0, b1):
                if q < nf and flagged[q] == e:  # u^k back (out may be U): the caller's row
                    for j in range(d):
                        out[e, j] = old[e - b0, j]
                    q += 1
                    continue
                s = sigma[e]
                for j in range(d):
                    r = (old[e - b0, j] - out[e, j]) / s - ddw[e - b0, j]
                    rsq += r * r
        if scatter:
            for e in range(b0, b1):
                for k in range(indptr[e], indptr[e + 1]):
                    c, a = indices[k], data[k]
                    for j in range(d):
                        DTu[c, j] += a * out[e, j]
    return nf, rsq


def pair_pass(heads: np.ndarray, tails: np.ndarray, Y: np.ndarray, U: np.ndarray,
              sigma: np.ndarray, out: np.ndarray, params: Any, e0: int, e1: int,
              DTu: np.ndarray, scatter: bool, flagged: np.ndarray, dW: np.ndarray,
              residual: bool) -> tuple[int, float]:
    """:func:`edge_pass` for an incidence matrix whose every row is ``+1`` at ``heads[e]``
    and ``-1`` at ``tails[e]`` (every unweighted ``D``: the weights are in the capacities):
    the endpoints read from two arrays instead of the CSR arrays.  The same operations as
    :func:`edge_pass` on such rows (``0.0 + 1.0 y = 0.0 + y``, ``x + (-1.0) y = x - y``
    exactly), so the same flows and sums bit for bit; the same arguments but ``D``'s CSR
    arrays, the same returns."""
    d = U.shape[1]
    nf = 0
    rsq = 0.0
    if scatter:
        DTu[:, :] = 0.0
    old = np.empty((BLOCK_ROWS if residual else 0, d))
    for b0 in range(e0, e1, BLOCK_ROWS):
        b1 = min(b0 + BLOCK_ROWS, e1)
        if residual:
            for e in range(b0, b1):
                for j in range(d):
                    old[e - b0, j] = U[e, j]
        for e in range(b0, b1):
            h, t = heads[e], tails[e]
            s = sigma[e]
            for j in range(d):
                out[e, j] = s * ((0.0 + Y[h, j]) - Y[t, j]) + U[e, j]
        nf0 = nf
        nf = _dual_rows(out, b0, b1, sigma, params, flagged, nf)
        if residual:
            q = nf0  # the block's flagged rows (ascending) are left out
            for e in range(b0, b1):
                if q < nf and flagged[q] == e:  # u^k back (out may be U): the caller's row
                    for j in range(d):
                        out[e, j] = old[e - b0, j]
                    q += 1
                    continue
                h, t = heads[e], tails[e]
                s = sigma[e]
                for j in range(d):
                    r = (old[e - b0, j] - out[e, j]) / s - ((0.0 + dW[h, j]) - dW[t, j])
                    rsq += r * r
        if scatter:
            for e in range(b0, b1):
                h, t = heads[e], tails[e]
                for j in range(d):
                    DTu[h, j] += out[e, j]
                for j in range(d):
                    DTu[t, j] -= out[e, j]
    return nf, rsq


def l2_pair_pass(heads: np.ndarray, tails: np.ndarray, Y: np.ndarray, U: np.ndarray,
                 sigma: np.ndarray, out: np.ndarray, params: Any, e0: int, e1: int,
                 DTu: np.ndarray, scatter: bool, flagged: np.ndarray, dW: np.ndarray,
                 residual: bool) -> tuple[int, float]:
    """:func:`pair_pass` for ``Norm2`` (``params`` an :class:`L2BallRow`) edge by edge: the
    argument, the projection, the residual and the scatter of one edge while its row is in
    registers, about 20-35 % less CPU than :func:`pair_pass`'s blocks when the endpoints' rows
    are in cache (benchmarks/RESULTS.md, issue 30; a call per row to a row kernel costs about
    as much as the row, so the projection, :func:`_l2_factor`, is called here as in
    :func:`_l2_ball_rows`).  The same arguments and returns as :func:`pair_pass` and the same
    flows and sums bit for bit (declined rows hold the argument, or ``u^k`` again with
    ``residual``; ``tests/test_primal_dual_fused.py`` checks it)."""
    p = params
    d = U.shape[1]
    nf = 0
    rsq = 0.0
    if scatter:
        DTu[:, :] = 0.0
    old = np.empty(d)
    x = np.empty(d)  # the row in registers, written once
    hi, lo, grow, sf, fm = p.hi, p.lo, p.grow, p.scale_factor, p.f_min
    tight, inside, r_min = p.tight, p.inside_factor, p.r_min
    for e in range(e0, e1):
        h, t = heads[e], tails[e]
        s = sigma[e]
        if residual:
            for j in range(d):
                old[j] = U[e, j]
        for j in range(d):
            x[j] = s * ((0.0 + Y[h, j]) - Y[t, j]) + U[e, j]
        sq = 0.0  # DU of Norm2 (as _l2_ball_rows)
        for j in range(d):
            sq += x[j] * x[j]
        f = _l2_factor(sq, p.r[e], hi, lo, grow, sf, fm, tight, inside, r_min)
        ok = f > 0.0
        if f == 0.0:  # the zero row is inside
            ok = True
            for j in range(d):
                ok = ok and x[j] == 0.0
        elif ok and f != 1.0:
            for j in range(d):
                x[j] *= f
        if not ok:
            flagged[nf] = e
            nf += 1
            if residual:  # u^k back (out may be U): the caller's row
                for j in range(d):
                    x[j] = old[j]
        elif residual:
            for j in range(d):
                rr = (old[j] - x[j]) / s - ((0.0 + dW[h, j]) - dW[t, j])
                rsq += rr * rr
        for j in range(d):
            out[e, j] = x[j]
        if scatter:
            for j in range(d):
                DTu[h, j] += x[j]
            for j in range(d):
                DTu[t, j] -= x[j]
    return nf, rsq


def node_pass(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, U: np.ndarray,
              out: np.ndarray, i0: int, i1: int) -> None:
    """Rows ``i0 <= i < i1`` of ``D^T U`` into ``out`` from ``D^T``'s CSR arrays (the
    entries in CSR order, as scipy's product)."""
    d = U.shape[1]
    for i in range(i0, i1):
        for j in range(d):
            out[i, j] = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            c, a = indices[k], data[k]
            for j in range(d):
                out[i, j] += a * U[c, j]


def affine_node_pass(rows: np.ndarray, W: np.ndarray, DTu: np.ndarray, tau: np.ndarray,
                     M: np.ndarray, b: np.ndarray, W_new: np.ndarray, Y: np.ndarray) -> int:
    """PU (32) of the nodes ``rows`` whose node update is affine, ``w_i^{k+1} = M_a (v_i +
    b_a)`` (``a`` the node's position in ``rows``; the squared loss's (69), ``M_a = (I (1 +
    2 tau_i kappa_i) + 2 tau_i Q_i)^{-1}``, ``b_a = 2 tau_i q_i``), in one pass over the
    nodes: ``v_i = w_i^k - tau_i (D^T u^k)_i`` (:func:`~gtvmodel.primal_dual.updates.
    prox_point`), ``w_i^{k+1}`` into ``W_new[i]`` and ``Y_i = 2 w_i^{k+1} - w_i^k``
    (:func:`~gtvmodel.primal_dual.updates.extrapolate`, the argument of DU (33)) into
    ``Y[i]``: the same operations per entry (the sum over ``j`` of ``M_a[k, j] (v + b)_j`` in
    order ``j = 0, 1, ...``).  Returns the number of rows with a non-finite ``w_i^{k+1}``."""
    d = W.shape[1]
    u = np.empty(d)
    bad = 0
    for a in range(rows.shape[0]):
        i = rows[a]
        t = tau[i]
        for j in range(d):
            u[j] = (W[i, j] - t * DTu[i, j]) + b[a, j]
        ok = True
        for k in range(d):
            z = 0.0
            for j in range(d):
                z += M[a, k, j] * u[j]
            W_new[i, k] = z
            Y[i, k] = 2.0 * z - W[i, k]
            ok = ok and np.isfinite(z)
        if not ok:
            bad += 1
    return bad


def sample_node_pass(rows: np.ndarray, W: np.ndarray, DTu: np.ndarray, tau: np.ndarray,
                     X: np.ndarray, starts: np.ndarray, ms: np.ndarray, K: np.ndarray,
                     koff: np.ndarray, inv_alpha: np.ndarray, q: np.ndarray, W_new: np.ndarray,
                     Y: np.ndarray) -> int:
    """:func:`affine_node_pass` for nodes with fewer samples than dimensions (``m_a < d``),
    the operator from the samples by Woodbury's identity: ``w_i^{k+1} = (u - X_a^T (K_a (X_a
    u))) / alpha_a`` with ``u = v_i + b_a``, ``b_a = 2 tau_i q_a`` formed here as
    :func:`affine_node_pass`'s caller forms it (:class:`~gtvmodel.terms.losses.batches.
    SampleOperator`: node ``a``'s samples ``X[starts[a]:starts[a] + ms[a]]``, ``K_a`` at
    ``K[koff[a]:]`` row-major, ``inv_alpha[a] = 1/alpha_a``): ``2 m d + m^2`` multiply-adds
    and ``m (d + m)`` numbers read per node, where the ``d x d`` operator takes ``d^2`` of
    each.  The same ``v``, ``w^{k+1}`` and ``Y`` arithmetic around it; returns the number of
    rows with a non-finite ``w_i^{k+1}``."""
    d = W.shape[1]
    u = np.empty(d)
    p = np.empty(d)  # X_a u (m_a < d entries)
    g = np.empty(d)  # K_a X_a u
    bad = 0
    for a in range(rows.shape[0]):
        i = rows[a]
        t = tau[i]
        t2 = 2.0 * t
        for j in range(d):
            u[j] = (W[i, j] - t * DTu[i, j]) + t2 * q[a, j]
        s0, m, o = starts[a], ms[a], koff[a]
        for r in range(m):
            acc = 0.0
            for j in range(d):
                acc += X[s0 + r, j] * u[j]
            p[r] = acc
        for r in range(m):
            acc = 0.0
            for c in range(m):
                acc += K[o + r * m + c] * p[c]
            g[r] = acc
        ia = inv_alpha[a]
        ok = True
        for j in range(d):
            acc = u[j]
            for r in range(m):
                acc -= X[s0 + r, j] * g[r]
            z = acc * ia
            W_new[i, j] = z
            Y[i, j] = 2.0 * z - W[i, j]
            ok = ok and np.isfinite(z)
        if not ok:
            bad += 1
    return bad


def gather_rows(index: np.ndarray, U: np.ndarray, out: np.ndarray) -> None:
    """``out[a] = U[index[a]]`` for every row ``a`` (the flows of the compiled edge pass back
    in the model's edge order, written in order: numpy's fancy indexing copies row by row
    several times slower, and scattered writes into a new array pay a page per row)."""
    d = U.shape[1]
    for a in range(out.shape[0]):
        i = index[a]
        for j in range(d):
            out[a, j] = U[i, j]


def unpermute_rows(index: np.ndarray, U: np.ndarray, done: np.ndarray) -> None:
    """``U[a] = U_old[index[a]]`` for every row ``a``, in place (:func:`gather_rows` without a
    second array), cycle by cycle; ``done`` (``U``'s rows, all False) marks the rows
    written."""
    d = U.shape[1]
    t = np.empty(d)
    for i in range(U.shape[0]):
        if done[i]:
            continue
        for j in range(d):
            t[j] = U[i, j]
        a = i
        while True:
            done[a] = True
            k = index[a]
            if k == i:
                for j in range(d):
                    U[a, j] = t[j]
                break
            for j in range(d):
                U[a, j] = U[k, j]
            a = k


class Compiled:
    """``func`` compiled by numba (``nogil``, so threads run it in parallel) with
    ``cache=True``: the machine code is kept in ``__pycache__`` (or ``NUMBA_CACHE_DIR``,
    numba's user cache) and loaded by later processes.  Where caching fails (no writable
    cache directory: numba refuses ``cache=True``; a cache write that fails at the first
    call: ``OSError``, the kernels themselves do no I/O) it is compiled per process instead
    (``cached`` False)."""

    def __init__(self, numba: Any, func: Callable[..., Any]):
        self._numba, self._func = numba, func
        try:
            self._f = numba.njit(cache=True, nogil=True)(func)
            self.cached = True
        except RuntimeError:  # "cannot cache function ...: no locator available"
            self._uncache()

    def _uncache(self) -> None:
        self._f = self._numba.njit(cache=False, nogil=True)(self._func)
        self.cached = False

    def __call__(self, *args: Any) -> Any:
        """``func(*args)``, compiled (on the first call for the arguments' types)."""
        try:
            return self._f(*args)
        except OSError:
            if not self.cached:
                raise
            self._uncache()
            return self._f(*args)


class Kernels(NamedTuple):
    """The compiled :func:`edge_pass`, :func:`pair_pass`, :func:`node_pass`,
    :func:`affine_node_pass`, :func:`gather_rows`, :func:`l2_pair_pass`,
    :func:`unpermute_rows` and :func:`sample_node_pass` (:func:`kernels`)."""

    edge_pass: Compiled
    node_pass: Compiled
    pair_pass: Compiled
    affine_node_pass: Compiled
    gather_rows: Compiled
    l2_pair_pass: Compiled
    unpermute_rows: Compiled
    sample_node_pass: Compiled


@functools.cache
def kernels() -> Kernels:
    """numba's compiled :func:`edge_pass` and :func:`node_pass` (:class:`Compiled`), built on
    the first call (the row kernels of :data:`ROW_KERNELS` registered as the implementations
    of :func:`_dual_rows`); ``ImportError`` without numba."""
    numba = importlib.import_module("numba")
    extending = importlib.import_module("numba.extending")
    # the one row projection of Norm2, compiled into both of its callers
    extending.register_jitable(inline="always")(_l2_factor)

    @extending.overload(_dual_rows)
    def _typed_rows(X, e0, e1, sigma, params, flagged, nf):  # the kernels' unannotated names
        return ROW_KERNELS.get(getattr(params, "instance_class", None))

    return Kernels(Compiled(numba, edge_pass), Compiled(numba, node_pass),
                   Compiled(numba, pair_pass), Compiled(numba, affine_node_pass),
                   Compiled(numba, gather_rows), Compiled(numba, l2_pair_pass),
                   Compiled(numba, unpermute_rows), Compiled(numba, sample_node_pass))



def potentials_pass(nodes: np.ndarray, NT: np.ndarray, offsets: np.ndarray, z: np.ndarray,
                    Z: np.ndarray) -> None:
    """The node potentials ``Z_i = N_i z_i`` of the subspace conditions of repair step 2
    (:meth:`gtvmodel.certificates.subspace.SubspaceConditions.potentials`) written into the
    rows ``nodes`` of ``Z`` (``(n, d)``; the other rows are not touched).  ``nodes``
    (``(s,)``) are the conditioned nodes, ``NT`` (``(s, k, d)``) their bases transposed and
    padded with zero rows (``NT[a, c] = N_a[:, c]``: each column contiguous, so the inner loop
    is an ``axpy`` over ``d``), ``offsets`` (``(s + 1,)``) the first entry of each node's block
    of ``z``.  Each ``Z_ij`` sums over the columns ``c`` in order."""
    d = Z.shape[1]
    for a in range(nodes.shape[0]):
        i, o, w = nodes[a], offsets[a], offsets[a + 1] - offsets[a]
        for j in range(d):
            Z[i, j] = 0.0
        for c in range(w):
            zc = z[o + c]
            for j in range(d):
                Z[i, j] += zc * NT[a, c, j]


def rows_pass(NT: np.ndarray, offsets: np.ndarray, G: np.ndarray, out: np.ndarray) -> None:
    """The stacked ``N_a^T G_a`` (:meth:`gtvmodel.certificates.subspace.SubspaceConditions.
    rows`, ``G`` (``(s, d)``) the rows of ``D^T U`` or ``L Z`` at the conditioned nodes) into
    ``out``, node ``a``'s block from ``offsets[a]`` (the arguments of
    :func:`potentials_pass`: a contiguous dot product over ``d`` per entry)."""
    d = G.shape[1]
    for a in range(G.shape[0]):
        o, w = offsets[a], offsets[a + 1] - offsets[a]
        for c in range(w):
            acc = 0.0
            for j in range(d):
                acc += NT[a, c, j] * G[a, j]
            out[o + c] = acc


def dot_pass(a: np.ndarray, b: np.ndarray) -> float:
    """``sum_i a_i b_i`` of two vectors, in index order (no BLAS call: no BLAS threads)."""
    acc = 0.0
    for i in range(a.shape[0]):
        acc += a[i] * b[i]
    return acc


def cg_update_pass(z: np.ndarray, r: np.ndarray, p: np.ndarray, Kp: np.ndarray, alpha: float,
                   minv: np.ndarray) -> tuple[float, float]:
    """One update of the conjugate gradients of repair step 2
    (:func:`gtvmodel.certificates.subspace.conjugate_gradients`), in place: ``z += alpha p``,
    ``r -= alpha K p``; returns ``(||r||^2, r^T M^-1 r)`` of the new residual (``M^-1 =
    minv``, the Jacobi preconditioner).  One pass instead of six numpy ones."""
    rr = 0.0
    ry = 0.0
    for i in range(z.shape[0]):
        z[i] += alpha * p[i]
        ri = r[i] - alpha * Kp[i]
        r[i] = ri
        rr += ri * ri
        ry += ri * (minv[i] * ri)
    return rr, ry


def cg_direction_pass(p: np.ndarray, r: np.ndarray, minv: np.ndarray, beta: float) -> None:
    """The next search direction of the conjugate gradients, in place: ``p = M^-1 r + beta
    p``."""
    for i in range(p.shape[0]):
        p[i] = minv[i] * r[i] + beta * p[i]


def subtract_rows_pass(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
                       Z: np.ndarray, U: np.ndarray) -> None:
    """``U -= D Z`` in place for a CSR matrix ``D`` (``indptr``, ``indices``, ``data``; the
    incidence: a correction ``delta = D Z`` of the flows of repair step 2 from its node
    potentials ``Z``): each row's ``(D Z)_e`` summed in the order of its entries from 0, as
    scipy's sparse product does, then subtracted (bit for bit ``U - D @ Z``, without the
    ``|E| x d`` product)."""
    d = U.shape[1]
    acc = np.empty(d)
    for e in range(U.shape[0]):
        for j in range(d):
            acc[j] = 0.0
        for q in range(indptr[e], indptr[e + 1]):
            c, v = indices[q], data[q]
            for j in range(d):
                acc[j] += v * Z[c, j]
        for j in range(d):
            U[e, j] -= acc[j]


def demands_pass(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, U: np.ndarray,
                 S: np.ndarray, A: np.ndarray) -> None:
    """``S += D^T U`` and ``A += |D|^T |U|`` (``S``, ``A`` ``(n, d)``, zeros on entry) for the
    CSR incidence ``D`` (``indptr``, ``indices``, ``data``) in one pass over the flows: the
    demands of the dual value and the sums their rounding bound is taken from
    (:func:`gtvmodel.certificates.value.demands`), each node's sums over its edges in
    increasing edge order, as scipy's product by the transposed (CSC) ``D`` takes them (bit
    for bit ``D.T @ U`` and ``abs(D).T @ abs(U)``, without ``|U|`` or ``|D|``)."""
    d = U.shape[1]
    for e in range(U.shape[0]):
        for q in range(indptr[e], indptr[e + 1]):
            i, v = indices[q], data[q]
            av = abs(v)
            for j in range(d):
                u = U[e, j]
                S[i, j] += v * u
                A[i, j] += av * abs(u)


def ball_excess_pass(U: np.ndarray, r: np.ndarray) -> float:
    """``max(0, max_e (sqrt(sum_j U_ej^2) - r_e))``, the sums of squares in index order: the
    capacity excess of the ``Norm2`` flows of the certificate's repair
    (:func:`gtvmodel.certificates.repair.alternate_rounds`) in one pass (NaN if a row's is
    NaN; ``inf`` where squares overflow)."""
    d = U.shape[1]
    best = 0.0
    for e in range(U.shape[0]):
        s = 0.0
        for j in range(d):
            s += U[e, j] * U[e, j]
        v = np.sqrt(s) - r[e]
        if not v <= best:
            if v != v:
                return v
            best = v
    return best


def ball_project_pass(U: np.ndarray, sigma: np.ndarray, params: Any, flagged: np.ndarray
                      ) -> int:
    """The row kernel of ``params`` (:data:`ROW_KERNELS`; :class:`L2BallRow`: the projection
    onto the ``Norm2`` capacities, :func:`_l2_ball_rows`) on every row of ``U``, in place:
    the number of rows flagged for the numpy path (their indices in ``flagged``).  The
    projection of step 1 of the certificate's repair without the numpy passes and the copy
    of :func:`~gtvmodel._norms.project_rows` (the same arithmetic, the sums of squares in
    index order)."""
    return _dual_rows(U, 0, U.shape[0], sigma, params, flagged, 0)


class SubspaceKernels(NamedTuple):
    """The compiled :func:`potentials_pass`, :func:`rows_pass`, :func:`dot_pass`,
    :func:`cg_update_pass`, :func:`cg_direction_pass`, :func:`subtract_rows_pass`,
    :func:`ball_excess_pass`, :func:`ball_project_pass` and :func:`demands_pass`
    (:func:`subspace_kernels`)."""

    potentials_pass: Compiled
    rows_pass: Compiled
    dot_pass: Compiled
    cg_update_pass: Compiled
    cg_direction_pass: Compiled
    subtract_rows_pass: Compiled
    ball_excess_pass: Compiled
    ball_project_pass: Compiled
    demands_pass: Compiled


@functools.cache
def subspace_kernels() -> SubspaceKernels:
    """numba's compiled passes of repair steps 1-2 (:class:`SubspaceKernels`,
    :class:`Compiled`), built on the first call; ``ImportError`` without numba."""
    numba = importlib.import_module("numba")
    kernels()  # registers the row kernels that ball_project_pass calls
    return SubspaceKernels(*(Compiled(numba, f) for f in (
        potentials_pass, rows_pass, dot_pass, cg_update_pass, cg_direction_pass,
        subtract_rows_pass, ball_excess_pass, ball_project_pass, demands_pass)))
