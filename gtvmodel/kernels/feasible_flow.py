"""A flow strictly inside its capacities that meets a conservation system exactly: phase I of
a barrier method (Boyd and Vandenberghe, *Convex Optimization*, Section 11.4.1), over arrays.

Given ``A`` (sparse, full row rank: Laplacian rows grounded beforehand), ``b`` and rows ``x_r
in R^k`` with capacities ``c_r > 0``, find ``x`` with ``A x = b`` and ``||x_r||_2 < c_r`` for
every row.  The phase-I problem

    minimize  s   subject to  A x = b,  ||x_r||_2 <= s c_r

starts feasible (``x`` any solution of ``A x = b``, ``s`` above its largest ratio
``||x_r|| / c_r``), and the barrier method follows its central path, ``minimize tau s -
sum_r log(s^2 c_r^2 - ||x_r||^2)`` by Newton steps that keep ``A x = b``, ``tau`` growing ten-fold
per round; it stops at the first iterate with ``s < 1``: a strictly feasible point, which is all
the caller needs (the flow recovery of :mod:`gtvmodel.certificates.recovery`, where the node
conditions of (16) are ``A x = b`` and the dual balls (27) of the fused edges the rows; ``k =
1`` is a box per coordinate, ``k = d`` an ``l2`` ball).  Each Newton step solves ``(A H^-1
A^T) nu = ...`` with ``H`` the block-diagonal Hessian of the barrier in ``x`` (inverted in
closed form) for two right-hand sides (the scalar ``s`` is eliminated) with one sparse
Cholesky factorization of that weighted Laplacian, grounded at one row per cluster:
CHOLMOD's supernodal factorization where cvxopt is installed (:data:`CHOLMOD`, the symbolic
analysis once per phase I; 1.8x less CPU per certificate than SuperLU on a 1,000-node SBM at
``d = 3``), else SuperLU (the fill-reducing order of the first step reused by the others: 14
ms against 19 ms per factorization there).  The matrices are assembled from the Hessian's
blocks by a map computed once (:class:`_Normal`, no sparse matrix products per step; the
electrical flow's matrix has the same pattern and gives the order).  When the minimum of
the phase-I problem is at least 1 (no strictly feasible flow) the method returns None as soon
as the central path shows it (``s - 2 m / tau >= 1``) or after :data:`PHASE1_STEPS` steps.

:func:`strictly_feasible_point` is the same phase I for polyhedral capacities (``x > 0``,
disjoint sums ``A_ub x < b_ub`` and ``A_eq x = b_eq``: the cross-polytopes ``||u_e||_1 <=
lambda A_e`` of the ``l_inf`` penalty as ``u_e = p_e - q_e``, and its ties), whose barrier
Hessian is diagonal plus one rank-one block per row of ``A_ub``; its right-hand side may first
move in the range of a positive semidefinite ``soft`` (:func:`_start`).  Both line searches
start from 0.99 of the step to the boundary (the slacks are linear in the step for polyhedra,
quadratic for the cones), not from 1: 8 instead of 13 Newton steps (``l_inf``) and 7 instead
of 8 (``l2``) on a 1,000-node SBM at ``d = 3``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
import scipy.sparse.linalg as spl

from . import sparse_cholesky
from .sparse_cholesky import SparseCholesky

__all__ = ["strictly_feasible_flow", "strictly_feasible_point", "PHASE1_STEPS"]

#: The most Newton steps of :func:`strictly_feasible_flow`.
PHASE1_STEPS = 60
#: Newton steps per barrier round before ``tau`` grows (fewer when the decrement is small).
_INNER = 4
#: The first ``tau`` relative to the barrier's derivative in ``s`` at the start.
_TAU0 = 10.0
#: Backtracking: sufficient decrease and factor.
_ALPHA, _BETA = 0.01, 0.5
#: The share of the step to the boundary where :func:`_search` starts backtracking.
_TO_BOUNDARY = 0.99


def strictly_feasible_flow(A: sp.csr_matrix, b: np.ndarray, cap: np.ndarray, k: int
                           ) -> np.ndarray | None:
    """``x`` with ``A x = b`` (up to rounding, except on one grounded row per connected
    cluster of rows, where the cluster's imbalance ``sum b`` remains) and ``||x_r||_2 < c_r``
    for the rows ``x_r`` (``k`` consecutive entries each, capacities ``cap``), by phase I of
    the barrier method from the capacity-weighted least-norm solution (``C = diag(c_r^2)``,
    the electrical flow); None if none is found.  ``A``: the incidence-like node rows, every
    column with entries ``+-1`` in two rows of one cluster."""
    A, b = _ground(A, b)
    AT = A.T.tocsr()
    groups = [np.arange(cap.size * k).reshape(-1, k)]
    normal = _Normal(A, groups)  # the start's matrix has the Newton matrices' pattern
    fac = normal.factor(_BlockDiagonal(groups, [(cap * cap)[:, None, None] * np.eye(k)]))
    if fac is None:
        return None
    X = (np.repeat(cap * cap, k) * (AT @ fac.solve(b))).reshape(-1, k)
    if _ratio(X, cap) >= 1.0:
        X = _phase_one(A, AT, b, cap, X, normal)
    return None if X is None or _ratio(X, cap) >= 1.0 else X.ravel()


def _phase_one(A: sp.csr_matrix, AT: sp.csr_matrix, b: np.ndarray, cap: np.ndarray,
               X: np.ndarray, normal: _Normal) -> np.ndarray | None:
    """The barrier iterations of :func:`strictly_feasible_flow` from ``X`` (rows; ``normal``:
    the Newton matrices)."""
    s = 1.05 * _ratio(X, cap) + 1e-3
    c2 = cap * cap
    # tau: _TAU0 times the barrier's pull on s at the start, so that the first steps already
    # lower s (from m / s, the first rounds raised s: 14 steps instead of 10 on a 1,000-node
    # SBM at d = 3)
    tau = _TAU0 * float((2.0 * s * c2 / (s * s * c2 - (X * X).sum(axis=1))).sum())
    for step in range(PHASE1_STEPS):
        g_x, g_s, Hinv, h_xs, h_ss = _derivatives(X, s, cap, tau)
        fac = normal.factor(Hinv)
        if fac is None:
            return None
        dX, ds = _newton(A, AT, fac, Hinv, b - A @ X.ravel(), g_x, g_s, h_xs, h_ss)
        dec = -(g_x * dX).sum() - g_s * ds  # the Newton decrement squared
        t = _line_search(X, s, dX, ds, cap, tau, g_x, g_s)
        if t == 0.0:
            return None
        X, s = X + t * dX, s + t * ds
        if s < 1.0:
            return X
        if dec < 1e-3 or (step + 1) % _INNER == 0:
            if s - 2.0 * X.shape[0] / tau >= 1.0:
                # near the central path s - s* <= m / tau (m barrier terms): the least s is
                # at least 1, no strictly feasible flow (and no iterates at the boundary,
                # where the slacks' squares underflow)
                return None
            tau *= 10.0
    return None


class _Factor:
    """A factorization of a symmetric positive (semi)definite ``S`` (SuperLU, or CHOLMOD's
    :class:`~gtvmodel.kernels.sparse_cholesky.SparseCholesky`: anything with ``solve``),
    possibly of ``S`` permuted symmetrically by ``perm`` (``S[perm][:, perm]``): :meth:`solve`
    solves with ``S``.  With
    ``refine`` (a singular ``S``, factored as ``S + eps diag(S)``): two steps of iterative
    refinement against ``S`` itself (the range of ``S`` solved to rounding; the null
    directions, which the callers' ``A^T`` annihilates, grow harmlessly)."""

    def __init__(self, lu: spl.SuperLU | SparseCholesky, perm: np.ndarray | None,
                 refine: sp.spmatrix | None = None) -> None:
        self.lu, self.perm, self.refine = lu, perm, refine

    def _solve(self, b: np.ndarray) -> np.ndarray:
        if self.perm is None:
            return self.lu.solve(b)
        x = np.empty_like(b)
        x[self.perm] = self.lu.solve(b[self.perm])
        return x

    def solve(self, b: np.ndarray, refine: bool = True) -> np.ndarray:
        """``S^-1 b``; ``refine=False``: the regularized factor's solve alone."""
        x = self._solve(b)
        if refine and self.refine is not None:
            for _ in range(_REFINE):
                x += self._solve(b - self.refine @ x)
        return x


#: The relative diagonal shift of a singular Newton matrix (:func:`_factor` with
#: ``regularize``) and the refinement steps of its solves.
_SHIFT, _REFINE = 1e-10, 2


def _factor(S: sp.spmatrix, regularize: bool = False) -> _Factor | None:
    """The factor of the symmetric positive definite ``S`` (:func:`_cholesky`, else
    :func:`_splu`); None if ``S`` is singular, unless ``regularize``: then ``S + eps
    diag(S)`` is factored, its solves refined against ``S`` (:class:`_Factor`; the tie rows
    of :func:`strictly_feasible_point` can be implied by the node rows, consistently at an
    optimum)."""
    S = sp.csc_matrix(S)
    F = S + _SHIFT * sp.diags(S.diagonal(), format="csc") if regularize else S
    fac = _cholesky(F)
    if fac is None:
        try:
            fac, _ = _splu(F)
        except RuntimeError:
            return None
    if regularize:
        fac.refine = S
    return fac


#: Factor with CHOLMOD (:class:`~gtvmodel.kernels.sparse_cholesky.SparseCholesky`, where cvxopt
#: is installed) rather than SuperLU: 2.7x (``l2``) and 3x (``l_inf``) faster per Newton
#: matrix on a 1,000-node SBM at ``d = 3``; a matrix CHOLMOD finds not positive definite goes
#: to SuperLU.  False: SuperLU alone (the path without cvxopt; the tests run both).
CHOLMOD = sparse_cholesky.available()


def _lower(indptr: np.ndarray, rows: np.ndarray, cols: np.ndarray, m: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The lower triangle of a CSC pattern (``rows``, ``cols`` of its entries, sorted by
    column then row): the entries' positions, its ``indptr`` and row indices."""
    pos = np.flatnonzero(rows >= cols)
    ptr = np.concatenate([[0], np.cumsum(np.bincount(cols[pos], minlength=m))])
    return pos, ptr, rows[pos]


def _cholesky(S: sp.csc_matrix) -> _Factor | None:
    """CHOLMOD's factor of the symmetric positive definite ``S`` (symbolic analysis and one
    numeric factorization); None without cvxopt (:data:`CHOLMOD`), for an empty ``S``, or if
    ``S`` is not numerically positive definite."""
    if not CHOLMOD or S.shape[0] == 0:
        return None
    S = sp.csc_matrix(S, copy=True)
    S.sum_duplicates()  # sorted indices, no duplicates
    cols = np.repeat(np.arange(S.shape[0]), np.diff(S.indptr))
    pos, ptr, rows = _lower(S.indptr, S.indices, cols, S.shape[0])
    try:
        chol = SparseCholesky(ptr, rows, S.shape[0])
    except ValueError:  # CHOLMOD's symbolic analysis failed (e.g. out of memory)
        return None
    return _Factor(chol, None) if chol.factor(S.data[pos]) else None


#: SuperLU's options for the symmetric positive definite matrices here; with
#: ``diag_pivot_thresh = 0`` it keeps the diagonal pivots (a Cholesky factorization in LU
#: form: stable without pivoting; 785k instead of 814k entries in ``L + U`` and 8 % less time
#: on the ``l_inf`` Newton matrices of a 1,000-node SBM at ``d = 3``).
_SUPERLU = {"diag_pivot_thresh": 0.0, "options": {"SymmetricMode": True}}


def _splu(S: sp.csc_matrix, perm: np.ndarray | None = None) -> tuple[_Factor, np.ndarray]:
    """SuperLU of ``S`` in SuperLU's minimum degree order of ``S + S^T`` (``perm`` None), or of
    ``S[perm][:, perm]`` given already in the order ``perm``, and the order."""
    if perm is None:
        lu = spl.splu(S, permc_spec="MMD_AT_PLUS_A", **_SUPERLU)
        return _Factor(lu, None), np.argsort(lu.perm_c)
    return _Factor(spl.splu(S, permc_spec="NATURAL", **_SUPERLU), perm), perm


class _BlockDiagonal:
    """A block-diagonal matrix: dense blocks ``blocks[k][b]`` on the columns ``groups[k][b]``
    (``(nb, size)`` index arrays, each column in one block); ``@`` a vector or the columns of
    an array."""

    def __init__(self, groups: list[np.ndarray], blocks: list[np.ndarray]) -> None:
        self.groups, self.blocks = groups, blocks

    def __matmul__(self, v: np.ndarray) -> np.ndarray:
        out = np.empty_like(v)
        for G, B in zip(self.groups, self.blocks, strict=True):
            # einsum for a vector, matmul for columns (3-4x faster than einsum there)
            out[G] = np.einsum("bij,bj->bi", B, v[G]) if v.ndim == 1 else np.matmul(B, v[G])
        return out


class _Normal:
    """The Newton matrices ``S = A H A^T`` of a phase I, ``H`` block diagonal on fixed column
    groups (:class:`_BlockDiagonal`), assembled without sparse products: the pattern of ``S``
    and the entry each product term ``A_ic H_cc' A_jc'`` adds to are computed once, then
    ``S``'s entries are one weighted ``bincount`` of the blocks' entries per step, directly
    in the fill-reducing order of the first factorization (SuperLU's minimum degree, about a
    quarter of a factorization's time, computed once)."""

    def __init__(self, A: sp.spmatrix, groups: list[np.ndarray]) -> None:
        A = sp.csc_matrix(A)
        A.sort_indices()
        m = A.shape[0]
        cnt = np.diff(A.indptr)
        wid = int(cnt.max(initial=1))
        rows = np.zeros((A.shape[1], wid), dtype=np.int64)
        vals = np.zeros((A.shape[1], wid))
        pos = np.arange(A.nnz) - np.repeat(A.indptr[:-1], cnt)
        col = np.repeat(np.arange(A.shape[1]), cnt)
        rows[col, pos], vals[col, pos] = A.indices, A.data
        keys, coef, src, off = [], [], [], 0
        for G in groups:
            nb, k = G.shape
            w = int(cnt[G].max(initial=1))
            R, V = rows[G][:, :, :w], vals[G][:, :, :w]  # (nb, k, w)
            c = V[:, :, None, :, None] * V[:, None, :, None, :]  # (nb, k, k, w, w)
            i = np.broadcast_to(R[:, :, None, :, None], c.shape)
            j = np.broadcast_to(R[:, None, :, None, :], c.shape)
            e = np.broadcast_to((off + np.arange(nb * k * k).reshape(nb, k, k))[..., None, None],
                                c.shape)
            nz = c != 0
            keys.append(j[nz] * m + i[nz])  # column-major: the CSC order
            coef.append(c[nz])
            src.append(e[nz])
            off += nb * k * k
        self.coef, self.src = np.concatenate(coef), np.concatenate(src)
        pattern, self.slot = np.unique(np.concatenate(keys), return_inverse=True)
        self.rows, cols = pattern % m, pattern // m
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=m))])
        self.diag = np.flatnonzero(self.rows == cols)
        self.m, self.cols = m, cols
        self.order: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self.chol: SparseCholesky | None = None
        self.cholmod_ok = True  # CHOLMOD's symbolic analysis not failed
        self.lower = np.zeros(0, dtype=np.int64)

    def matrix(self, H: _BlockDiagonal) -> sp.csc_matrix:
        """``A H A^T`` (CSC, sorted indices)."""
        flat = np.concatenate([B.ravel() for B in H.blocks])
        data = np.bincount(self.slot, weights=self.coef * flat[self.src],
                           minlength=self.rows.size)
        return sp.csc_matrix((data, self.rows, self.indptr), shape=(self.m, self.m))

    def factor(self, H: _BlockDiagonal, regularize: bool = False) -> _Factor | None:
        """:func:`_factor` of ``A H A^T`` (None if singular), in the order of the first."""
        S = self.matrix(H)
        F = S
        if regularize:
            F = S.copy()
            F.data[self.diag] += _SHIFT * S.data[self.diag]
        fac = self._cholesky(F)
        if fac is not None:
            if regularize:
                fac.refine = S
            return fac
        try:
            if self.order is None:
                fac, perm = _splu(F)
                inv = np.argsort(perm)
                pk = inv[self.cols] * self.m + inv[self.rows]
                sigma = np.argsort(pk)
                pc = pk[sigma] // self.m
                self.order = (perm, sigma, pk[sigma] % self.m,
                              np.concatenate([[0], np.cumsum(np.bincount(pc,
                                                                         minlength=self.m))]))
            else:
                perm, sigma, prow, pptr = self.order
                fac, _ = _splu(sp.csc_matrix((F.data[sigma], prow, pptr),
                                             shape=(self.m, self.m)), perm)
        except RuntimeError:
            return None
        if regularize:
            fac.refine = S
        return fac

    def _cholesky(self, F: sp.csc_matrix) -> _Factor | None:
        """CHOLMOD's factor of ``F`` (on this pattern), the symbolic analysis done at the first
        call; None as :func:`_cholesky` returns it.  The factor is overwritten by the next
        call."""
        if not CHOLMOD or self.m == 0 or not self.cholmod_ok:
            return None
        if self.chol is None:
            self.lower, ptr, rows = _lower(self.indptr, self.rows, self.cols, self.m)
            try:
                self.chol = SparseCholesky(ptr, rows, self.m)
            except ValueError:  # CHOLMOD's symbolic analysis failed: SuperLU from now on
                self.cholmod_ok = False
                return None
        return _Factor(self.chol, None) if self.chol.factor(F.data[self.lower]) else None


def _ratio(X: np.ndarray, cap: np.ndarray) -> float:
    return float(np.max(np.linalg.norm(X, axis=1) / cap, initial=0.0))


def _phi(X: np.ndarray, s: float, cap: np.ndarray, tau: float) -> float:
    """The barrier objective ``tau s - sum log(s^2 c^2 - ||x_r||^2)`` (inf outside)."""
    slack = s * s * cap * cap - (X * X).sum(axis=1)
    if s <= 0 or np.any(slack <= 0):
        return np.inf
    return tau * s - float(np.log(slack).sum())


def _derivatives(X: np.ndarray, s: float, cap: np.ndarray, tau: float
                 ) -> tuple[np.ndarray, float, _BlockDiagonal, np.ndarray, float]:
    """Gradient and Hessian of :func:`_phi`: ``g_x`` (rows), ``g_s``, ``H_xx^-1`` (block
    diagonal, closed form), ``h_xs`` (rows) and ``h_ss``."""
    k = X.shape[1]
    c2 = cap * cap
    q = (X * X).sum(axis=1)
    slack = s * s * c2 - q
    g_x = 2.0 * X / slack[:, None]
    g_s = tau - float((2.0 * s * c2 / slack).sum())
    # H_xx,r = (2 / slack) I + (4 / slack^2) x x^T; inverse (slack / 2)(I - 2 x x^T / (slack + 2 q))
    coef = 2.0 / (slack + 2.0 * q)
    blocks = (slack / 2.0)[:, None, None] * (np.eye(k)[None] - coef[:, None, None]
                                             * X[:, :, None] * X[:, None, :])
    Hinv = _BlockDiagonal([np.arange(X.size).reshape(-1, k)], [blocks])
    h_xs = -4.0 * s * c2[:, None] * X / (slack * slack)[:, None]
    h_ss = float((-2.0 * c2 / slack + 4.0 * s * s * c2 * c2 / (slack * slack)).sum())
    return g_x, g_s, Hinv, h_xs, h_ss


def _newton(A: sp.csr_matrix, AT: sp.csr_matrix, fac: _Factor, Hinv: _BlockDiagonal,
            res: np.ndarray, g_x: np.ndarray, g_s: float, h_xs: np.ndarray, h_ss: float
            ) -> tuple[np.ndarray, float]:
    """The Newton step ``(dX, ds)`` with ``A dX = res`` (``res = b - A x``: the step also
    corrects the residual of earlier inexact steps): ``dX = dX0 + ds dX1`` from two solves,
    ``ds`` from the scalar equation.  A regularized factor's solves are not refined: the
    direction needs no more accuracy than its shift leaves, and the residual it leaves is
    corrected by the next step or by :func:`_conserve` (3 % less CPU time for the ``l_inf``
    phase I of a 1,000-node SBM at ``d = 3``, 16 fewer triangular solves)."""
    shape = g_x.shape
    g, h = g_x.ravel(), h_xs.ravel()
    gh = np.column_stack([g, h])
    rhs = -(A @ (Hinv @ gh))
    rhs[:, 0] -= res
    dx = -(Hinv @ (gh + AT @ fac.solve(rhs, refine=False)))  # both right-hand sides
    dx0, dx1 = dx[:, 0], dx[:, 1]
    # h^T dx by einsum, not BLAS: a threaded ddot (n > 10^4) took 15 ms under load
    hd = np.einsum("i,ij->j", h, dx)
    ds = -(g_s + hd[0]) / (h_ss + hd[1])
    return (dx0 + ds * dx1).reshape(shape), float(ds)


def _reach(X: np.ndarray, s: float, dX: np.ndarray, ds: float, cap: np.ndarray) -> float:
    """The largest step along ``(dX, ds)`` inside the cones ``||x_r|| < s c_r``: the first
    positive root of the slacks ``(s + t ds)^2 c_r^2 - ||x_r + t dx_r||^2`` (quadratics in
    ``t``; inf if none vanishes), and of ``s + t ds``."""
    c2 = cap * cap
    qa = ds * ds * c2 - (dX * dX).sum(axis=1)
    qb = 2.0 * (s * ds * c2 - (X * dX).sum(axis=1))
    qc = s * s * c2 - (X * X).sum(axis=1)
    disc = qb * qb - 4.0 * qa * qc
    with np.errstate(divide="ignore", invalid="ignore"):
        sq = np.sqrt(np.maximum(disc, 0.0))
        # the roots (-qb -+ sq) / (2 qa), in the cancellation-free forms
        r1 = np.where(qb > 0, -(qb + sq) / (2.0 * qa), (2.0 * qc) / (-qb + sq))
        r2 = np.where(qb > 0, (2.0 * qc) / (-(qb + sq)), (-qb + sq) / (2.0 * qa))
    roots = np.concatenate([r1[disc >= 0], r2[disc >= 0]])
    roots = roots[np.isfinite(roots) & (roots > 0)]
    t = float(roots.min(initial=np.inf))
    return min(t, -s / ds) if ds < 0 else t


def _line_search(X: np.ndarray, s: float, dX: np.ndarray, ds: float, cap: np.ndarray,
                 tau: float, g_x: np.ndarray, g_s: float) -> float:
    """Backtracking on :func:`_phi` along ``(dX, ds)`` from ``min(1, 0.99 t_max)`` (``t_max``:
    the step to the boundary, :func:`_reach`; 0 if no decrease is found)."""
    f0 = _phi(X, s, cap, tau)
    slope = float((g_x * dX).sum() + g_s * ds)
    t = min(1.0, _TO_BOUNDARY * _reach(X, s, dX, ds, cap))
    while t > 1e-12:
        if _phi(X + t * dX, s + t * ds, cap, tau) <= f0 + _ALPHA * t * slope:
            return t
        t *= _BETA
    return 0.0


# ===================================================================== polyhedral capacities

def strictly_feasible_point(A: sp.csr_matrix, b: np.ndarray, A_eq: sp.csr_matrix,
                            b_eq: np.ndarray, A_ub: sp.csr_matrix, b_ub: np.ndarray,
                            soft: sp.spmatrix | None = None) -> np.ndarray | None:
    """``x > 0`` with ``A x = b`` (node rows, grounded as in :func:`strictly_feasible_flow`),
    ``A_eq x = b_eq`` and ``A_ub x < b_ub``, every row of ``A_eq`` and ``A_ub`` a sum of its
    own columns (0/1 entries, each column in at most one row of the two; ``b_eq, b_ub >
    0``); None if none is found.  The flow recovery's problem for the cross-polytopes of the
    ``l_inf`` penalty: ``u_e = p_e - q_e`` with ``1^T (p_e + q_e) < lambda A_e`` on the fused
    edges (``A_ub``), ``t_e > 0`` with ``1^T t_e = lambda A_e`` on the ties (``A_eq``).

    Phase I of the barrier method as in :func:`strictly_feasible_flow`, for

        minimize  s  subject to  A x = b,  A_eq x = b_eq,  x_m + (s - 1) beta_m >= 0,
                                 A_ub x <= s b_ub

    (``beta_m``: the right-hand side of the column's row over the row's size): any ``s < 1``
    is a strictly feasible ``x``.  The barrier's Hessian in ``x`` is diagonal plus one
    rank-one block per row of ``A_ub``, inverted in closed form (Sherman-Morrison), so each
    Newton step is again one factorization of a grounded weighted Laplacian-type matrix.

    ``soft`` (positive semidefinite, on the rows of ``A``): the right-hand side ``b`` may move
    in its range, by the least change that makes the whole system consistent (:func:`_start`);
    ``A_eq`` and the directions outside that range are met as given.  The flow recovery's
    smooth nodes: at weights a little off the optimum their gradients ``b`` leave the clusters
    and ties with an imbalance (first order in the weights' error) that no flow carries, a
    change of the demands of second-order cost does."""
    R = sp.vstack([A_ub, A_eq], format="csc")
    rhs = np.concatenate([b_ub, b_eq])
    size = np.asarray(R.sum(axis=1)).ravel()
    owner = np.full(A.shape[1], -1)
    cols = np.flatnonzero(np.diff(R.indptr) > 0)
    owner[cols] = R.indices[R.indptr[cols]]
    beta = np.where(owner >= 0, rhs[np.maximum(owner, 0)] / np.maximum(size[owner], 1.0),
                    float(rhs.max(initial=1.0)))
    start = _start(A, b, A_eq, b_eq, beta * beta, soft)
    if start is None:
        return None
    x, b = start
    A, b = _ground(A, b)
    A = sp.vstack([A, A_eq], format="csr")
    b = np.concatenate([b, b_eq])
    lin = _Linear(sp.csr_matrix(A_ub), np.asarray(b_ub, float), beta)
    return _phase_one_linear(A, A.T.tocsr(), b, lin, x)


#: The weight of a change of demand relative to that of a flow in :func:`_start`, and the
#: extra refinement steps of its solve.
_SOFT, _SOFT_REFINE = 1e-8, 4


def _start(A: sp.csr_matrix, b: np.ndarray, A_eq: sp.csr_matrix, b_eq: np.ndarray,
           c: np.ndarray, B: sp.spmatrix | None) -> tuple[np.ndarray, np.ndarray] | None:
    """``(x, b - delta)``: the weighted least-norm ``x = C M^T y`` (``C = diag(c)``, ``M = [A;
    A_eq]``) of ``A x = b - delta``, ``A_eq x = b_eq``, where ``delta = kappa B y`` (in the
    range of ``B``, positive semidefinite, on the rows of ``A``; None: ``delta = 0``) is the
    least change that makes the system consistent: ``(M C M^T + kappa B') y = (b, b_eq)``
    (``B'`` = ``B`` padded with zeros, ``kappa`` = :data:`_SOFT` ``max diag(M C M^T) / max
    diag(B)``), solved as :func:`_factor` solves a singular system (shifted, refined), so that
    ``delta`` minimizes ``x^T C^-1 x + delta^T B^+ delta / kappa``: the demands move only where
    no flow meets them.  None if the factorization fails."""
    M = sp.vstack([A, A_eq], format="csr")
    MT = M.T.tocsr()
    S = (M @ sp.diags(c) @ MT).tocsr()
    if B is not None and B.diagonal().max(initial=0.0) > 0:
        kappa = _SOFT * float(S.diagonal().max()) / float(B.diagonal().max())
        S = S + kappa * sp.block_diag([B, sp.csr_matrix((A_eq.shape[0],) * 2)], format="csr")
    fac = _factor(S, regularize=True)
    if fac is None:
        return None
    rhs = np.concatenate([b, b_eq])
    y = fac.solve(rhs)
    if B is not None:
        # the soft directions' eigenvalues (kappa B) are close to the shift: refine further
        for _ in range(_SOFT_REFINE):
            y += fac.solve(rhs - S @ y)
    x = c * (MT @ y)
    return x, (b if B is None else A @ x)


def _ground(A: sp.csr_matrix, b: np.ndarray) -> tuple[sp.csr_matrix, np.ndarray]:
    """``A x = b`` without one row per connected cluster of rows (incidence-like rows: each
    cluster's rows sum to 0, so that one is implied up to the cluster's imbalance)."""
    pattern = abs(A)
    _, lab = csgraph.connected_components(pattern @ pattern.T, directed=False)
    keep = np.setdiff1d(np.arange(A.shape[0]), np.unique(lab, return_index=True)[1])
    return A[keep], b[keep]


@dataclass
class _Linear:
    """The inequalities of :func:`strictly_feasible_point`'s phase I: ``g = x + (s - 1) beta >
    0`` and ``h = s b_ub - A_ub x > 0``."""

    A_ub: sp.csr_matrix
    b_ub: np.ndarray
    beta: np.ndarray

    def __post_init__(self) -> None:
        """The blocks of the barrier's Hessian: the columns of the rows of ``A_ub`` (grouped
        by the rows' sizes; ``group_rows`` their rows), then the other columns one by one."""
        A = sp.csr_matrix(self.A_ub)
        A.sort_indices()
        size = np.diff(A.indptr)
        self.groups: list[np.ndarray] = []
        self.group_rows: list[np.ndarray | None] = []
        for k in np.unique(size[size > 0]):
            rows = np.flatnonzero(size == k)
            self.groups.append(A.indices[A.indptr[rows][:, None] + np.arange(k)])
            self.group_rows.append(rows)
        rest = np.setdiff1d(np.arange(A.shape[1]), A.indices)
        self.groups.append(rest[:, None])
        self.group_rows.append(None)

    def slacks(self, x: np.ndarray, s: float) -> tuple[np.ndarray, np.ndarray]:
        return x + (s - 1.0) * self.beta, s * self.b_ub - self.A_ub @ x

    def phi(self, x: np.ndarray, s: float, tau: float) -> float:
        """The barrier objective ``tau s - sum log g - sum log h`` (inf outside)."""
        g, h = self.slacks(x, s)
        if np.any(g <= 0) or np.any(h <= 0):
            return np.inf
        return tau * s - float(np.log(g).sum() + np.log(h).sum())

    def derivatives(self, x: np.ndarray, s: float, tau: float
                    ) -> tuple[np.ndarray, float, _BlockDiagonal, np.ndarray, float]:
        """``g_x``, ``g_s``, ``H_xx^-1`` (``diag(g^2)`` minus one rank-one block per row of
        ``A_ub``), ``h_xs`` and ``h_ss`` of :meth:`phi`."""
        g, h = self.slacks(x, s)
        AT = self.A_ub.T
        g_x = -1.0 / g + AT @ (1.0 / h)
        g_s = tau - float((self.beta / g).sum() + (self.b_ub / h).sum())
        g2 = g * g
        a = 1.0 / (h * h)
        gamma = a / (1.0 + a * (self.A_ub @ g2))
        blocks = []
        for G, rows in zip(self.groups, self.group_rows, strict=True):
            z = g2[G]  # diag(g^2) minus, on a row of A_ub, its Sherman-Morrison term
            blk = np.zeros(G.shape + G.shape[1:])
            idx = np.arange(G.shape[1])
            blk[:, idx, idx] = z
            if rows is not None:
                blk -= gamma[rows][:, None, None] * z[:, :, None] * z[:, None, :]
            blocks.append(blk)
        Hinv = _BlockDiagonal(self.groups, blocks)
        h_xs = self.beta / g2 - AT @ (self.b_ub / (h * h))
        h_ss = float((self.beta ** 2 / g2).sum() + (self.b_ub ** 2 / (h * h)).sum())
        return g_x, g_s, Hinv, h_xs, h_ss


def _phase_one_linear(A: sp.csr_matrix, AT: sp.csr_matrix, b: np.ndarray, lin: _Linear,
                      x: np.ndarray) -> np.ndarray | None:
    """The barrier iterations of :func:`strictly_feasible_point` from ``x``."""
    g0, h0 = lin.slacks(x, 1.0)
    s = 1.0 + max(float(np.max(-g0 / lin.beta, initial=0.0)),
                  float(np.max(-h0 / lin.b_ub, initial=0.0)))
    s = 1.05 * s + 1e-3
    if s < 1.0 + 1e-3 + 1e-12 and np.all(g0 > 0) and np.all(h0 > 0):
        return x
    m = x.size + lin.b_ub.size
    g, h = lin.slacks(x, s)
    tau = _TAU0 * float((lin.beta / g).sum() + (lin.b_ub / h).sum())
    normal = _Normal(A, lin.groups)
    for step in range(PHASE1_STEPS):
        g_x, g_s, Hinv, h_xs, h_ss = lin.derivatives(x, s, tau)
        fac = normal.factor(Hinv, regularize=True)
        if fac is None:
            return None
        dx, ds = _newton(A, AT, fac, Hinv, b - A @ x, g_x[None], g_s, h_xs[None], h_ss)
        dx = dx.ravel()
        dec = -(g_x * dx).sum() - g_s * ds
        t = _search(lin, tau, x, s, dx, ds, float((g_x * dx).sum() + g_s * ds))
        if t == 0.0:
            return None
        x, s = x + t * dx, s + t * ds
        if s < 1.0:
            return _conserve(A, AT, b, fac, Hinv, lin, x, s)
        if dec < 1e-3 or (step + 1) % _INNER == 0:
            if dec < 1e-3 and s - m / tau >= 1.0:
                return None
            tau *= 10.0
    return None


def _conserve(A: sp.csr_matrix, AT: sp.csr_matrix, b: np.ndarray, fac: _Factor,
              Hinv: _BlockDiagonal, lin: _Linear, x: np.ndarray, s: float) -> np.ndarray:
    """``x`` moved onto ``A x = b`` to rounding: the ``H^-1``-weighted least-norm correction
    ``H^-1 A^T (A H^-1 A^T)^-1 (b - A x)`` with the last Newton matrix's factor ``fac``,
    refined (the unrefined steps leave residuals of about ``1e-8``); ``x`` itself if the
    corrected point leaves the strict interior at ``s``."""
    y = fac.solve(b - A @ x)
    xc = x + Hinv @ (AT @ y)
    g, h = lin.slacks(xc, s)
    return xc if np.all(g > 0) and np.all(h > 0) else x


def _search(lin: _Linear, tau: float, x: np.ndarray, s: float, dx: np.ndarray, ds: float,
            slope: float) -> float:
    """Backtracking on :meth:`_Linear.phi` along ``(dx, ds)`` from the step to the boundary
    (the slacks are linear in the step: ``0.99`` of the largest that keeps them positive, if
    below 1), 0 if no decrease is found."""
    f0 = lin.phi(x, s, tau)
    g, h = lin.slacks(x, s)
    dg, dh = dx + ds * lin.beta, ds * lin.b_ub - lin.A_ub @ dx
    with np.errstate(divide="ignore"):
        reach = min(float(np.min(np.where(dg < 0, -g / dg, np.inf), initial=np.inf)),
                    float(np.min(np.where(dh < 0, -h / dh, np.inf), initial=np.inf)))
    t = min(1.0, _TO_BOUNDARY * reach)
    while t > 1e-12:
        if lin.phi(x + t * dx, s + t * ds, tau) <= f0 + _ALPHA * t * slope:
            return t
        t *= _BETA
    return 0.0
