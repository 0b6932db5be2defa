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
closed form) twice (the scalar ``s`` is eliminated) with one SuperLU factorization of that
weighted Laplacian, grounded at one row per cluster (the fill-reducing order of the first
step reused by the others: 14 ms against 19 ms per factorization on a 1,000-node SBM at
``d = 3``).  When the minimum of the phase-I problem is at least 1 (no strictly feasible
flow) the method returns None as soon as the central path shows it (``s - 2 m / tau >= 1``)
or after :data:`PHASE1_STEPS` steps.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
import scipy.sparse.linalg as spl

__all__ = ["strictly_feasible_flow", "PHASE1_STEPS"]

#: The most Newton steps of :func:`strictly_feasible_flow`.
PHASE1_STEPS = 60
#: Newton steps per barrier round before ``tau`` grows (fewer when the decrement is small).
_INNER = 4
#: The first ``tau`` relative to the barrier's derivative in ``s`` at the start.
_TAU0 = 10.0
#: Backtracking: sufficient decrease and factor.
_ALPHA, _BETA = 0.01, 0.5


def strictly_feasible_flow(A: sp.csr_matrix, b: np.ndarray, cap: np.ndarray, k: int
                           ) -> np.ndarray | None:
    """``x`` with ``A x = b`` (up to rounding, except on one grounded row per connected
    cluster of rows, where the cluster's imbalance ``sum b`` remains) and ``||x_r||_2 < c_r``
    for the rows ``x_r`` (``k`` consecutive entries each, capacities ``cap``), by phase I of
    the barrier method from the capacity-weighted least-norm solution (``C = diag(c_r^2)``,
    the electrical flow); None if none is found.  ``A``: the incidence-like node rows, every
    column with entries ``+-1`` in two rows of one cluster."""
    pattern = abs(A)
    ncomp, lab = csgraph.connected_components(pattern @ pattern.T, directed=False)
    keep = np.setdiff1d(np.arange(A.shape[0]), np.unique(lab, return_index=True)[1])
    A, b = A[keep], b[keep]
    AT = A.T.tocsr()
    C = sp.diags(np.repeat(cap * cap, k), format="csr")
    fac, _ = _factor(A @ C @ AT)
    if fac is None:
        return None
    X = (C @ (AT @ fac.solve(b))).reshape(-1, k)
    if _ratio(X, cap) >= 1.0:
        X = _phase_one(A, AT, b, cap, X)
    return None if X is None or _ratio(X, cap) >= 1.0 else X.ravel()


def _phase_one(A: sp.csr_matrix, AT: sp.csr_matrix, b: np.ndarray, cap: np.ndarray,
               X: np.ndarray) -> np.ndarray | None:
    """The barrier iterations of :func:`strictly_feasible_flow` from ``X`` (rows)."""
    s = 1.05 * _ratio(X, cap) + 1e-3
    c2 = cap * cap
    # tau: _TAU0 times the barrier's pull on s at the start, so that the first steps already
    # lower s (from m / s, the first rounds raised s: 14 steps instead of 10 on a 1,000-node
    # SBM at d = 3)
    tau = _TAU0 * float((2.0 * s * c2 / (s * s * c2 - (X * X).sum(axis=1))).sum())
    perm = None  # the Newton matrices' fill-reducing order, from the first
    for step in range(PHASE1_STEPS):
        g_x, g_s, Hinv, h_xs, h_ss = _derivatives(X, s, cap, tau)
        fac, perm = _factor(A @ Hinv @ AT, perm)
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
    """SuperLU of a symmetric positive definite ``S``, possibly of ``S`` permuted
    symmetrically by ``perm`` (``S[perm][:, perm]``): :meth:`solve` solves with ``S``."""

    def __init__(self, lu: spl.SuperLU, perm: np.ndarray | None) -> None:
        self.lu, self.perm = lu, perm

    def solve(self, b: np.ndarray) -> np.ndarray:
        if self.perm is None:
            return self.lu.solve(b)
        x = np.empty_like(b)
        x[self.perm] = self.lu.solve(b[self.perm])
        return x


def _factor(S: sp.spmatrix, perm: np.ndarray | None = None) -> tuple[_Factor | None,
                                                                      np.ndarray | None]:
    """The factor of the symmetric positive definite ``S`` (a grounded weighted Laplacian)
    and the fill-reducing order it used: SuperLU's minimum degree (``perm`` None), or the
    given ``perm`` of an earlier matrix of the same pattern applied beforehand (the Newton
    matrices of :func:`_phase_one` share one: the ordering, about a quarter of a
    factorization's time, is computed once); ``(None, perm)`` if ``S`` is singular."""
    opts = {"SymmetricMode": True}
    try:
        if perm is None:
            lu = spl.splu(S.tocsc(), permc_spec="MMD_AT_PLUS_A", options=opts)
            return _Factor(lu, None), np.argsort(lu.perm_c)
        lu = spl.splu(sp.csc_matrix(S)[perm][:, perm], permc_spec="NATURAL", options=opts)
        return _Factor(lu, perm), perm
    except RuntimeError:
        return None, perm


def _ratio(X: np.ndarray, cap: np.ndarray) -> float:
    return float(np.max(np.linalg.norm(X, axis=1) / cap, initial=0.0))


def _phi(X: np.ndarray, s: float, cap: np.ndarray, tau: float) -> float:
    """The barrier objective ``tau s - sum log(s^2 c^2 - ||x_r||^2)`` (inf outside)."""
    slack = s * s * cap * cap - (X * X).sum(axis=1)
    if s <= 0 or np.any(slack <= 0):
        return np.inf
    return tau * s - float(np.log(slack).sum())


def _derivatives(X: np.ndarray, s: float, cap: np.ndarray, tau: float
                 ) -> tuple[np.ndarray, float, sp.csr_matrix, np.ndarray, float]:
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
    r = X.shape[0]
    Hinv = sp.bsr_matrix((blocks, np.arange(r), np.arange(r + 1)), shape=(r * k, r * k)).tocsr()
    h_xs = -4.0 * s * c2[:, None] * X / (slack * slack)[:, None]
    h_ss = float((-2.0 * c2 / slack + 4.0 * s * s * c2 * c2 / (slack * slack)).sum())
    return g_x, g_s, Hinv, h_xs, h_ss


def _newton(A: sp.csr_matrix, AT: sp.csr_matrix, fac: _Factor, Hinv: sp.csr_matrix,
            res: np.ndarray, g_x: np.ndarray, g_s: float, h_xs: np.ndarray, h_ss: float
            ) -> tuple[np.ndarray, float]:
    """The Newton step ``(dX, ds)`` with ``A dX = res`` (``res = b - A x``: the step also
    corrects the residual of earlier inexact steps): ``dX = dX0 + ds dX1`` from two solves,
    ``ds`` from the scalar equation."""
    shape = g_x.shape
    g, h = g_x.ravel(), h_xs.ravel()
    nu0 = fac.solve(-res - A @ (Hinv @ g))
    nu1 = fac.solve(-(A @ (Hinv @ h)))
    dx0 = -(Hinv @ (g + AT @ nu0))
    dx1 = -(Hinv @ (h + AT @ nu1))
    ds = -(g_s + h @ dx0) / (h_ss + h @ dx1)
    return (dx0 + ds * dx1).reshape(shape), float(ds)


def _line_search(X: np.ndarray, s: float, dX: np.ndarray, ds: float, cap: np.ndarray,
                 tau: float, g_x: np.ndarray, g_s: float) -> float:
    """Backtracking on :func:`_phi` along ``(dX, ds)`` (0 if no decrease is found)."""
    f0 = _phi(X, s, cap, tau)
    slope = float((g_x * dX).sum() + g_s * ds)
    t = 1.0
    while t > 1e-12:
        if _phi(X + t * dX, s + t * ds, cap, tau) <= f0 + _ALPHA * t * slope:
            return t
        t *= _BETA
    return 0.0
