"""Certified upper bounds of a conic node's conjugate from a dual point (docs/certificates.md).

A conic node's (P_s) in Clarabel's form (:class:`~gtvmodel.duality.conic.ConicData`) is

    minimize  c(s)^T x + d0   subject to  A x + r = b,  r in K,     c(s) = c0 - E s

(``E`` selects the columns of the node's variable ``w``).  **Weak duality** gives, for every
``z in K^*`` with ``A^T z + c(s) = 0``, ``min (P_s) >= d0 - b^T z``, i.e.

    h^*(s) <= b^T z - d0,            h = L_i + iota_{C_i}.

This holds for *any* such ``z``, whatever the solver reported; so the bound rests only on two
checks made here, not on the solver's stated accuracy: ``z`` lies in ``K^*`` (checked cone by
cone) and the residual ``rho = A^T z + c(s)`` vanishes.  A solver's ``z`` satisfies the balance
only to its feasibility tolerance, and the share of the objective that this error carries,
``rho^T x*``, grows with the maximizer ``x*`` (``2.069 / w_0`` at ``s = (-1e-10, 0)`` has its
supremum at ``w_0 ~ 1.4e5``; Clarabel's conjugate there is 3.9e-5 low while its gap tolerance is
2e-9).  So ``z`` is repaired first: a few rounds of the minimum-norm correction of the balance
(``A^T delta = -rho``) followed by a move into ``K^*``, until the residual is at rounding level.

What remains on the columns of ``w`` is absorbed into the demand: ``z`` is exactly feasible for
``s' = s + E^T rho``, and for the conjugate of ``h + iota{||w||_inf <= R}`` (which is what a
certificate with a certified radius ``R`` uses)

    (h + iota{||w||_inf <= R})^*(s) <= h^*(s') + R ||s - s'||_1,

the *shift* ``s' - s`` is returned beside the bound and charged like any residual outside a
conjugate's domain (:func:`gtvmodel.certificates.value.residual_charge`).  The residual left
on the auxiliary columns (epigraph variables and the like) is charged to first order at the
solver's primal point, ``sum_j (|rho_j| + err_j) max(1, |x_j|)`` (``rho`` accumulated in
extended precision, ``err`` its error bound: :meth:`_Balance.error`; added to the value, and
named in ``reason`` where an entry is above rounding, e.g. a cone block held on its boundary,
an exponential cone of ``-log`` at the optimum): that part, and only that part, rests on the
solver's point, as rounding-level residuals do, and only while it is at most
:data:`_AUX_CHARGE_RTOL` of the value (else ``+inf``).  ``z in K^*`` is checked with a margin
for the rounding of the checks themselves (:func:`_soc_margin`).

A solve that Clarabel does not call "Solved", or whose bound lies above its own primal value
(:data:`_LOOSE_RTOL`), is repeated with the columns of (P_s) scaled by the last answer's
``|x|`` (``x = diag(|x|) y``: the balance and ``z`` are unchanged, so the checks above apply
as they are), then with its second-order cone blocks boosted (:func:`_soc_boosts`); the
bound with the smaller value at no larger shift is kept.  A far maximizer
beside a small epigraph variable is badly scaled for the interior-point method.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import clarabel
import numpy as np
import scipy.sparse as sp
from scipy.linalg import null_space

from .._solver import DEFAULT_SOLVER_OPTIONS, FALLBACK_SOLVER_OPTIONS
from ..declaration import ModelDeclaration
from ..errors import InfeasibleError
from .conic import ConeRows, ConicData, cone_rows, node_conic_data

__all__ = ["ConjugateBound", "conjugate_bound"]

_EPS = float(np.finfo(float).eps)
#: The unit roundoff of the residual's accumulation (``numpy.longdouble``: 2^-63 on x86's
#: extended precision, the same as ``float`` where ``long double`` is ``double``).
_EPS_LONG = float(np.finfo(np.longdouble).eps)
#: Rounds of (minimum-norm balance correction, move into ``K^*``) tried on the solver's ``z``.
_REPAIR_ROUNDS = 8
#: Rounds of the fallback candidates (minimum-norm, into ``K^*``, null-space moves).
_FALLBACK_ROUNDS = 3
#: A residual entry within this many ulps of the sums that form it counts as rounding.
_ROUNDING_ULPS = 64.0
_UNBOUNDED = ("DualInfeasible", "AlmostDualInfeasible")
_ANSWERED = ("Solved", "AlmostSolved")
#: Largest first-order charge of an auxiliary residual, relative to ``max(1, |value|)``: a
#: larger one means the solver's point is too far from an optimum to charge at (the slow
#: soundness sweep's feas_scale seed 39: Clarabel stopped with InsufficientProgress, and a
#: charge of 1.5e6 at its point fell 3.6e5 short); the bound is then ``+inf``.
_AUX_CHARGE_RTOL = 1e-6
_INFEASIBLE = ("PrimalInfeasible", "AlmostPrimalInfeasible")


@dataclass(frozen=True)
class ConjugateBound:
    """``h^*(s + shift) <= value`` for a conic node ``h = L_i + iota_{C_i}`` at demand ``s``,
    so ``(h + iota{||w||_inf <= R})^*(s) <= value + R ||shift||_1``.

    ``value`` is ``+inf`` where no bound could be certified (``reason`` says why: the problem is
    unbounded, i.e. ``s`` is outside the conjugate's domain, or the dual point could not be
    repaired); ``shift_rounding`` bounds the rounding error of computing ``shift`` (an entry
    within it may be pure rounding); ``magnitude`` bounds the sum of the absolute summands of
    ``value`` (for the certificate's rounding bound); ``status`` is Clarabel's; ``point`` the
    solver's maximizer ``w`` (for first-order charges where no radius exists)."""

    value: float
    shift: np.ndarray
    shift_rounding: np.ndarray
    magnitude: float
    status: str
    reason: str = ""
    #: the solver's maximizer ``w`` of (P_s) (its primal point; NaN where none)
    point: np.ndarray | None = None


def _cones(D: ConicData, box: int) -> list[Any]:
    """Clarabel's cone list for ``D`` plus ``box`` trailing nonnegative rows."""
    cones: list[Any] = []
    if D.zero:
        cones.append(clarabel.ZeroConeT(D.zero))
    if D.nonneg:
        cones.append(clarabel.NonnegativeConeT(D.nonneg))
    cones += [clarabel.SecondOrderConeT(k) for k in D.soc]
    cones += [clarabel.PSDTriangleConeT(k) for k in D.psd]
    cones += [clarabel.ExponentialConeT() for _ in range(D.exp)]
    cones += [clarabel.PowerConeT(a) for a in D.p3d]
    cones += [clarabel.GenPowerConeT(list(al), 1) for al in D.pnd]
    if box:
        cones.append(clarabel.NonnegativeConeT(box))
    return cones


def _svec_to_mat(v: np.ndarray, k: int) -> np.ndarray:
    """The symmetric matrix of Clarabel's ``svec`` (upper triangle by columns, off-diagonal
    entries scaled by ``sqrt(2)``)."""
    M = np.zeros((k, k))
    iu = np.triu_indices(k)
    order = np.lexsort((iu[0], iu[1]))  # column by column
    r, c = iu[0][order], iu[1][order]
    M[r, c] = v
    M[c, r] = v
    off = r != c
    M[r[off], c[off]] /= np.sqrt(2.0)
    M[c[off], r[off]] /= np.sqrt(2.0)
    return M


def _mat_to_svec(M: np.ndarray) -> np.ndarray:
    k = M.shape[0]
    iu = np.triu_indices(k)
    order = np.lexsort((iu[0], iu[1]))
    r, c = iu[0][order], iu[1][order]
    return np.where(r == c, 1.0, np.sqrt(2.0)) * M[r, c]


def _into_dual_cone(D: ConicData, z: np.ndarray, box: int,
                    rows: ConeRows | None = None) -> np.ndarray:
    """A point of ``K^*`` near ``z`` (the Euclidean projection for the nonnegative, second-order
    and PSD cones; for the exponential and power cones a move along one coordinate), so that
    :func:`_in_dual_cone` accepts it."""
    z = z.copy()
    rows = rows or cone_rows([(0, D)])
    nn = np.concatenate([*rows.nonneg, np.arange(D.num_rows, D.num_rows + box)])
    z[nn] = np.maximum(z[nn], 0.0)
    for k, starts in rows.soc.items():
        for r in starts:
            t, x = z[r], z[r + 1:r + k]
            nx = float(np.linalg.norm(x))
            if nx <= -t:
                z[r:r + k] = 0.0
                continue
            if nx > t:
                a = 0.5 * (t + nx)
                z[r], z[r + 1:r + k] = a, (a / nx) * x
            z[r] = max(z[r], _soc_margin(k) * float(np.linalg.norm(z[r + 1:r + k])))
    for r, k in rows.psd:
        n = k * (k + 1) // 2
        lam, V = np.linalg.eigh(_svec_to_mat(z[r:r + n], k))
        z[r:r + n] = _mat_to_svec((V * np.maximum(lam, 0.0)) @ V.T)
    ex = np.concatenate(rows.exp) if rows.exp else np.zeros(0, dtype=np.int64)
    for j in range(0, ex.size, 3):  # (u, v, w): -u e^{v/u} <= e w with u < 0
        u, v, w = z[ex[j]], z[ex[j + 1]], z[ex[j + 2]]
        if u >= 0.0:
            z[ex[j]], z[ex[j + 1]], z[ex[j + 2]] = 0.0, max(v, 0.0), max(w, 0.0)
        else:
            z[ex[j + 2]] = max(w, float(-u * np.exp(v / u - 1.0)) * (1.0 + 4 * _EPS))
    for rr, a in zip(rows.p3d_rows, rows.p3d_alpha, strict=True):
        u, v = max(z[rr[0]], 0.0), max(z[rr[1]], 0.0)
        geo = (u / a) ** a * (v / (1.0 - a)) ** (1.0 - a)
        z[rr[0]], z[rr[1]] = u, v
        z[rr[2]] = np.sign(z[rr[2]]) * min(abs(z[rr[2]]), geo * (1.0 - 4 * _EPS))
    for al, starts in rows.pnd.items():
        a = np.array(al)
        for r in starts:
            u = np.maximum(z[r:r + a.size], 0.0)
            geo = float(np.prod((u / a) ** a))
            z[r:r + a.size] = u
            z[r + a.size] = np.sign(z[r + a.size]) * min(abs(z[r + a.size]), geo * (1 - 4 * _EPS))
    return z


def _soc_margin(k: int) -> float:
    """``1 + (k + 2) eps``: a second-order cone block ``(t, x)`` of order ``k`` counts as inside
    when ``t >= margin * fl(||x||)``, which bounds the norm's rounding (at most ``(k / 2 + 1)
    eps`` relative), so the block is inside in exact arithmetic.  Without the margin a block
    ``eps ||x||`` outside passes, and against a slack ``r`` of a far maximizer (``|z| ~ 1e5``,
    ``|r| ~ 1e7``) it costs ``z^T r ~ -eps |z| |r|``: 2e-4 per block, more than the bound's
    rounding."""
    return 1.0 + (k + 2) * _EPS


def _in_dual_cone(D: ConicData, z: np.ndarray, box: int,
                  rows: ConeRows | None = None) -> bool:
    """``z in K^*`` (dual cones as in :mod:`gtvmodel.duality.conic`), checked entry by entry."""
    if not np.isfinite(z).all():
        return False
    rows = rows or cone_rows([(0, D)])
    nn = np.concatenate([*rows.nonneg, np.arange(D.num_rows, D.num_rows + box)])
    if (z[nn] < 0).any():
        return False
    for k, starts in rows.soc.items():
        if any(z[r] < _soc_margin(k) * np.linalg.norm(z[r + 1:r + k]) for r in starts):
            return False
    for r, k in rows.psd:
        if np.linalg.eigvalsh(_svec_to_mat(z[r:r + k * (k + 1) // 2], k)).min() < 0:
            return False
    ex = np.concatenate(rows.exp) if rows.exp else np.zeros(0, dtype=np.int64)
    u, v, w = z[ex[0::3]], z[ex[1::3]], z[ex[2::3]]
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        inner = (u < 0) & (-u * np.exp(v / u - 1.0) <= w)
    if not (inner | ((u == 0) & (v >= 0) & (w >= 0))).all():
        return False
    for rr, a in zip(rows.p3d_rows, rows.p3d_alpha, strict=True):
        u, v = z[rr[0]], z[rr[1]]
        if min(u, v) < 0 or (u / a) ** a * (v / (1.0 - a)) ** (1.0 - a) < abs(z[rr[2]]):
            return False
    for al, starts in rows.pnd.items():
        av = np.array(al)
        if any((z[r:r + av.size] < 0).any() or np.prod((z[r:r + av.size] / av) ** av)
               < abs(z[r + av.size]) for r in starts):
            return False
    return True


def _row_weights(D: ConicData, z: np.ndarray, box: int,
                 rows: ConeRows | None = None) -> np.ndarray:
    """Per-row weights of the margin-weighted balance correction, the squares of how far each
    row of ``z`` may move and stay in ``K^*`` (free rows ``1 + max|z|``; a nonnegative row its
    value; a cone block its distance from the boundary, 0 on it, so active rows stay put): the
    correction ``delta = -W A (A^T W A)^+ rho`` then minimizes ``||W^{-1/2} delta||``, a step
    inside the barrier's Dikin ellipsoid when that norm is below 1."""
    w = np.zeros(z.size)
    rows = rows or cone_rows([(0, D)])
    w[:D.zero] = 1.0 + float(np.abs(z).max(initial=0.0))
    nn = np.concatenate([*rows.nonneg, np.arange(D.num_rows, D.num_rows + box)])
    w[nn] = np.maximum(z[nn], 0.0)
    for k, starts in rows.soc.items():
        for r in starts:
            w[r:r + k] = max(z[r] - float(np.linalg.norm(z[r + 1:r + k])), 0.0)
    for r, k in rows.psd:
        n = k * (k + 1) // 2
        w[r:r + n] = max(float(np.linalg.eigvalsh(_svec_to_mat(z[r:r + n], k)).min()), 0.0)
    ex = np.concatenate(rows.exp) if rows.exp else np.zeros(0, dtype=np.int64)
    for j in range(0, ex.size, 3):
        u, v, t = z[ex[j]], z[ex[j + 1]], z[ex[j + 2]]
        if u < 0 and t > 0:
            slack = min(max(1.0 - float(-u * np.exp(v / u - 1.0)) / t, 0.0), 1.0)
            w[ex[j:j + 3]] = slack * (abs(u) + abs(v) + t)
    blocks = [(rr, np.array([a, 1.0 - a])) for rr, a in zip(rows.p3d_rows, rows.p3d_alpha,
                                                             strict=True)]
    blocks += [(np.arange(r, r + len(al) + 1), np.array(al)) for al, st in rows.pnd.items()
               for r in st]
    for rr, a in blocks:
        u = z[rr[:-1]]
        if (u > 0).all():
            geo = float(np.prod((u / a) ** a))
            w[rr] = min(max(1.0 - abs(z[rr[-1]]) / geo, 0.0), 1.0) * float(np.abs(z[rr]).sum())
    return np.nan_to_num(w * w, nan=0.0, posinf=0.0)


class _Balance:
    """The balance ``A^T z + c = 0`` of (D_s) for one node (with or without the box rows):
    ``A``, the pseudo-inverse of ``A^T`` (the minimum-norm correction), a basis of its null
    space, and the ``w`` columns; independent of ``s`` and built once per conic data.  The
    demand's ``c`` and the right-hand side ``b`` are set on a shallow copy per call
    (:func:`conjugate_bound`)."""

    def __init__(self, D: ConicData, boxed: bool):
        cols = D.x_cols[0]
        A = D.A
        self.box = 2 * cols.size if boxed else 0
        if self.box:
            E = sp.csr_matrix((np.ones(cols.size), (np.arange(cols.size), cols)),
                              shape=(cols.size, D.num_vars))
            A = sp.vstack([A, E, -E]).tocsr()
        self.D, self.A, self.absA = D, A, abs(A)
        self.rows = cone_rows([(0, D)])
        AT = A.T.toarray()
        self.AT_long = A.T.tocsr().astype(np.longdouble)
        # products and sums of a column's entries, each rounded once in extended precision
        self.ulps = max(_ROUNDING_ULPS, 2.0 * (float(np.diff(A.tocsc().indptr).max(initial=0)) + 2))
        self.AT_pinv = np.linalg.pinv(AT) if A.shape[0] else None
        self.null = null_space(AT) if A.shape[0] else np.zeros((0, 0))
        self.aux = np.ones(A.shape[1], dtype=bool)
        self.aux[cols[cols >= 0]] = False
        self.c, self.b = D.c0, D.b

    def residual(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rho, rounding level)`` at the current ``c``: an entry within the level (64 ulps
        of the sums that form it in double precision) counts as rounding.  ``rho`` itself is
        accumulated in ``numpy.longdouble`` and its error bounded by :meth:`error`."""
        rho_long = self.AT_long @ z.astype(np.longdouble) + self.c.astype(np.longdouble)
        rnd = _ROUNDING_ULPS * _EPS * (self.absA.T @ np.abs(z) + np.abs(self.c))
        return rho_long.astype(float), rnd

    def error(self, z: np.ndarray, rho: np.ndarray) -> np.ndarray:
        """A bound of ``|rho - (A^T z + c)|`` for :meth:`residual`'s ``rho``: each product and
        sum of a column rounded once in extended precision (:data:`_EPS_LONG`), then once to
        double.  A dual point with large entries (a boosted solve's, :func:`_soc_boosts`)
        leaves a real residual below the rounding level, and a far maximizer multiplies it
        (:meth:`_charges`)."""
        return (self.ulps * _EPS_LONG * (self.absA.T @ np.abs(z) + np.abs(self.c))
                + _EPS * np.abs(rho))

    def _charges(self, z: np.ndarray, x: np.ndarray) -> tuple[float, tuple[bool, float], bool]:
        """``(auxiliary charge, score, rounding level everywhere)`` of a candidate ``z`` (``inf``
        outside ``K^*``): the auxiliary residual charged to first order at the solver's point
        ``x``, ``sum (|rho_j| + err_j) max(1, |x_j|)`` (:meth:`error`) -- entries at rounding
        level too (a far maximizer's epigraph variable ``x_j ~ 4e7`` times a residual of
        ``1e-10``, left by a dual point with entries ``~3e6``, was 0.02 of a bound that fell
        short by as much); the score ranks a ``w`` residual above rounding last (the caller
        charges it at a radius), then adds the bound's value and that residual at ``x``."""
        if not _in_dual_cone(self.D, z, self.box, self.rows):
            return np.inf, (True, np.inf), False
        rho, rnd = self.residual(z)
        big = np.abs(rho) > rnd
        scale = np.maximum(1.0, np.abs(x))
        aux = float(((np.abs(rho) + self.error(z, rho)) * scale)[self.aux].sum())
        score = float(self.b @ z) + aux + float((np.abs(rho) * scale)[~self.aux].sum())
        return aux, (bool(big[~self.aux].any()), score), not big.any()

    def repaired(self, z: np.ndarray, x: np.ndarray) -> tuple[np.ndarray | None, float]:
        """``(z', auxiliary charge)``: a point of ``K^*`` near the solver's ``z`` and the charge
        of its auxiliary residual (:meth:`_charges`), or ``(None, inf)``.  First margin-weighted
        corrections of the balance (:func:`_row_weights`: near the solver's point, so the bound
        stays as tight as the solve), each also moved into ``K^*`` (a step can leave it by a few
        ulps at a boundary optimum); the first at rounding level everywhere is returned.  Then
        rounds of the minimum-norm correction, a move into ``K^*``, and (since the move can undo
        the correction) the move's component in the null space of ``A^T``, which leaves the
        balance unchanged, doubled until the point is inside, or the null-space component of
        the point removed.  Of all candidates, the one with the smallest score is returned."""
        best, best_score, best_aux = None, (True, np.inf), np.inf

        def consider(cand: np.ndarray) -> bool:
            nonlocal best, best_score, best_aux
            aux, score, exact = self._charges(cand, x)
            if score < best_score:
                best, best_score, best_aux = cand, score, aux
            return exact

        zw = z
        for _ in range(_REPAIR_ROUNDS):
            zw = self._weighted(zw)
            for cand in (zw, _into_dual_cone(self.D, zw, self.box, self.rows)):
                if consider(cand):
                    return cand, self._charges(cand, x)[0]
            zw = cand
        for _ in range(_FALLBACK_ROUNDS if self.AT_pinv is not None else 0):
            cands = self._candidates(z)
            for cand in cands:
                consider(cand)
            z = cands[1]
        return best, best_aux

    def _weighted(self, z: np.ndarray) -> np.ndarray:
        """The margin-weighted correction ``z - W A (A^T W A)^+ rho`` (:func:`_row_weights`),
        as ``W^{1/2}`` times the minimum-norm solution of ``(W^{1/2} A)^T y = rho`` (better
        conditioned than the normal equations)."""
        with np.errstate(all="ignore"):
            sw = np.sqrt(_row_weights(self.D, z, self.box, self.rows))
            B = self.A.multiply(sw[:, None]).T.toarray()  # (W^{1/2} A)^T
            rho = self.residual(z)[0]
        if not (np.isfinite(B).all() and np.isfinite(rho).all()):
            return z  # LAPACK's least squares may not return on non-finite input
        return z - sw * np.linalg.lstsq(B, rho, rcond=None)[0]

    def _candidates(self, z: np.ndarray) -> list[np.ndarray]:
        """The minimum-norm correction of ``z``, it moved into ``K^*``, that point's null-space
        component of the move doubled, the null-space component of the point removed."""
        assert self.AT_pinv is not None  # only called with rows
        rho = self.residual(z)[0]
        if np.isfinite(rho).all():
            z = z - self.AT_pinv @ rho
        inside = _into_dual_cone(self.D, z, self.box, self.rows)
        cands = [z, inside]
        if self.null.shape[1]:
            g = self.null @ (self.null.T @ (inside - z))
            cands += [z + 2.0 ** k * g for k in range(0, 40, 2)] if np.any(g) else []
            cands.append(z - self.null @ (self.null.T @ z))
        return cands


def _balance(model: ModelDeclaration, i: int, boxed: bool) -> _Balance:
    """The node's :class:`_Balance`, cached with its conic data (rebuilt when that changes)."""
    D = node_conic_data(model, i)
    cache: dict[Any, _Balance] = model.cache.get_or_build("conic_bounds", dict)
    bal = cache.get((i, boxed))
    if bal is None or bal.D is not D:
        bal = cache[(i, boxed)] = _Balance(D, boxed)
    return bal


def _solve(bal: _Balance, b: np.ndarray, cols: np.ndarray | None = None,
           rows: sp.csr_matrix | None = None) -> tuple[str, np.ndarray | None, np.ndarray]:
    """Clarabel on (P_s): ``(status, z, x)``, with the package's accuracy defaults and, where
    Clarabel stops without an (almost) optimal answer, its looser levels
    (:data:`~gtvmodel._solver.FALLBACK_SOLVER_OPTIONS`) in turn.  ``cols``: positive column
    scales ``x = diag(cols) y`` (the problem solved in ``y``; ``z`` and the balance
    ``A^T z + c = 0`` are unchanged by the substitution, so the bound needs no conversion).
    ``rows``: a symmetric automorphism ``T`` of ``K`` (:func:`_soc_boosts`); the problem is
    solved with the rows ``T A``, ``T b`` (the same ``K``), and its dual point ``z'`` is
    returned as ``z = T z'``, in ``K^*`` with ``A^T z = (T A)^T z'`` and ``b^T z = (T b)^T z'``
    up to rounding: a dual point of the original (P_s), repaired and checked as every other
    (the bound does not rest on ``T`` being exact)."""
    n = bal.D.num_vars
    cols = np.ones(n) if cols is None else cols
    if rows is not None:
        b = rows @ b
    levels = [DEFAULT_SOLVER_OPTIONS["CLARABEL"], *FALLBACK_SOLVER_OPTIONS["CLARABEL"]]
    # the objective scaled to unit size (its dual point scales back): large demands stall
    # Clarabel otherwise (feas_scale seed 39, |s| ~ 6e3)
    c = cols * bal.c
    scale = max(1.0, float(np.abs(c).max(initial=0.0)))
    A = ((bal.A if rows is None else rows @ bal.A) @ sp.diags(cols)).tocsc()
    for level in levels:
        settings = clarabel.DefaultSettings()
        settings.verbose = False
        for key, val in {**DEFAULT_SOLVER_OPTIONS["CLARABEL"], **level}.items():
            setattr(settings, key, val)
        solver = clarabel.DefaultSolver(sp.csc_matrix((n, n)), c / scale, A, b,
                                        _cones(bal.D, bal.box), settings)
        sol = solver.solve()
        if str(sol.status) in (*_ANSWERED, *_UNBOUNDED, *_INFEASIBLE):
            break
    z, x = scale * np.asarray(sol.z, dtype=float), cols * np.asarray(sol.x, dtype=float)
    ok = z.size == b.size and np.isfinite(z).all()
    if ok and rows is not None:
        z = rows @ z
    return str(sol.status), (z if ok else None), (x if x.size == n else np.full(n, np.inf))


#: A bound farther than this (relative to ``max(1, |value|)``) above the solver's own primal
#: value ``-(c^T x + d0)`` is loose; so is every bound from a solve that Clarabel did not call
#: "Solved" (a badly scaled maximizer: ``2.069 / w_0`` at ``w_0 ~ 2e3`` with its epigraph
#: variable ``~5e-4``; Clarabel stops "AlmostSolved" 4e-6 above the conjugate at a point that
#: is infeasible by 4e-3, so its primal value agrees with the loose bound).  (P_s) is then
#: solved again with its columns scaled by ``|x|``.
_LOOSE_RTOL = 1e-9
#: Re-solves with the columns scaled by the last solve's ``|x|``.
_RESCALE_ROUNDS = 2


def _column_scales(x: np.ndarray) -> np.ndarray | None:
    """``|x|`` with zeros (and anything below ``1e-8 max(1, ||x||_inf)``) raised to that
    floor, or None where ``x`` is not finite."""
    if not np.isfinite(x).all():
        return None
    ax = np.abs(x)
    return np.maximum(ax, 1e-8 * max(1.0, float(ax.max(initial=0.0))))


def conjugate_bound(model: ModelDeclaration, i: int, s: Any,
                    radius: float | None = None) -> ConjugateBound:
    """A certified bound ``h^*(s + shift) <= value`` for the conic node at position ``i``
    (module docstring), from Clarabel's dual point of (P_s), repaired and checked here.

    ``radius``: solve (P_s) with the box ``||w||_inf <= radius`` instead, whose conjugate is
    finite for every ``s`` (for a demand a hair outside the conjugate's domain; the bound is then
    on that boxed conjugate, which a certificate with certified radius ``radius`` may use).
    Raises :class:`InfeasibleError` when the node's constraints (with its loss's domain) are
    empty."""
    s = np.asarray(s, dtype=float).reshape(model.dim)
    boxed = radius is not None and (node_conic_data(model, i).x_cols[0] >= 0).all()
    # a shallow copy: the cached matrices shared, the demand's c and b this call's own (two
    # certificates of one model in two threads must not see each other's)
    bal = copy.copy(_balance(model, i, boxed))
    D = bal.D
    absent = D.x_cols[0] < 0  # w does not occur: a demand on it is outside the domain
    bal.c = D.c0 + D.C @ np.where(absent, 0.0, s)
    bal.b = np.concatenate([D.b, np.full(bal.box, float(radius or 0.0))])
    status, z, x = _solve(bal, bal.b)
    if status in _INFEASIBLE:
        raise InfeasibleError(f"conjugate of node {model.nodes[i]!r}: the node's constraints "
                              "(with its loss's domain) have no feasible point")
    best = _bound(model, bal, s, absent, status, z, x)
    for round_ in range(_RESCALE_ROUNDS + _BOOST_ROUNDS):
        if np.isfinite(best.value) and not _loose(bal, best, x):
            break
        if round_ < _RESCALE_ROUNDS:
            cols, rows = _column_scales(x), None
        else:
            cols, rows = None, _soc_boosts(bal, x)
        if cols is None and rows is None:
            break
        status, z, x = _solve(bal, bal.b, cols, rows)
        if status in _INFEASIBLE:
            break
        alt = _bound(model, bal, s, absent, status, z, x)
        if _better(alt, best):
            best = alt
    return best


#: Re-solves with the second-order cone blocks boosted (:func:`_soc_boosts`) after the column
#: rescales, each from the last solve's point.
_BOOST_ROUNDS = 2
#: A boosted block's slack shrinks by ``r_0 ** -_BOOST_POWER``.  On the test's far epigraphs
#: (``tests/test_conic_bounds.py``, demands 1e2 ... 3e4) 0.5 solved every demand, 0.4 up to
#: 7e3, 0.3 and less up to 1e2-1e3.
_BOOST_POWER = 0.5


def _soc_boosts(bal: _Balance, x: np.ndarray) -> sp.csr_matrix | None:
    """Row transform for a far maximizer: the identity except on each second-order cone block
    whose slack ``r = b - A x = (r_0, rbar)`` at the last solve's ``x`` is large (``r_0 > 1``,
    ``rbar != 0``), where it is the Lorentz boost ``B`` along ``u = rbar / ||rbar||`` with
    rapidity ``-beta``, ``beta = ln(r_0) / 2`` (:data:`_BOOST_POWER`):

        B (v_0, vbar) = (ch v_0 - sh u^T vbar,  vbar + ((ch - 1) u^T vbar - sh v_0) u),

    ``ch = cosh beta``, ``sh = sinh beta``.  ``B`` is symmetric and maps the second-order cone
    onto itself (a Lorentz transformation), so ``T K = K = K^*`` and :func:`_solve`'s ``rows``
    apply.  It shrinks a slack near the cone's boundary ray ``(1, u)`` by ``e^{-beta}`` and
    grows the complementary dual ray ``(1, -u)`` by ``e^{beta}``: the epigraph of a squared
    residual ``t >= r^2 / 4`` at ``|r| ~ 4e3`` (``t ~ 5e6``, the slow soundness sweep's
    feas_scale seed 39) is held as ``(1 + t, t - 1, r)``, nearly on that ray, and Clarabel
    stops there with ``InsufficientProgress`` unboosted; boosted, it solves.  None where no
    block qualifies or ``x`` is not finite."""
    D = bal.D
    if not D.soc or not np.isfinite(x).all():
        return None
    r = bal.b - bal.A @ x
    m = r.size
    ri, ci, vals = [np.arange(m)], [np.arange(m)], [np.ones(m)]
    keep = np.ones(m, dtype=bool)
    start = D.zero + D.nonneg
    for k in D.soc:
        blk = np.arange(start, start + k)
        start += k
        r0, rbar = r[blk[0]], r[blk[1:]]
        nb = float(np.linalg.norm(rbar))
        if not (np.isfinite(r0) and r0 > 1.0 and nb > 0.0):
            continue
        beta = -_BOOST_POWER * np.log(r0)
        ch, sh, u = np.cosh(beta), np.sinh(beta), rbar / nb
        Bk = np.eye(k)
        Bk[0, 0], Bk[0, 1:], Bk[1:, 0] = ch, sh * u, sh * u
        Bk[1:, 1:] += (ch - 1.0) * np.outer(u, u)
        keep[blk] = False
        rr, cc = np.meshgrid(blk, blk, indexing="ij")
        ri.append(rr.ravel())
        ci.append(cc.ravel())
        vals.append(Bk.ravel())
    if keep.all():
        return None
    ri[0], ci[0], vals[0] = ri[0][keep], ci[0][keep], vals[0][keep]
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(ri), np.concatenate(ci))),
                         shape=(m, m))


def _loose(bal: _Balance, bound: ConjugateBound, x: np.ndarray) -> bool:
    """Whether ``bound`` may be loose (:data:`_LOOSE_RTOL`): a solve Clarabel did not call
    "Solved", or a bound above the solver's primal value ``-(c^T x + d0)`` (an estimate: ``x``
    is feasible only to the solver's tolerance)."""
    if bound.status != "Solved":
        return True
    primal = -(float(bal.c @ x) + bal.D.d0)
    return bool(bound.value - primal > _LOOSE_RTOL * max(1.0, abs(bound.value)))


def _better(alt: ConjugateBound, best: ConjugateBound) -> bool:
    """Whether ``alt`` replaces ``best``: a finite value where ``best`` has none, or a smaller
    value at a demand shift no larger (beyond rounding) in any coordinate, so that it is
    smaller at every radius's charge too."""
    if not np.isfinite(best.value):
        return bool(np.isfinite(alt.value))
    over = np.abs(alt.shift) > np.maximum(np.abs(best.shift), best.shift_rounding) + \
        alt.shift_rounding
    return bool(alt.value < best.value and not over.any())


def _bound(model: ModelDeclaration, bal: _Balance, s: np.ndarray, absent: np.ndarray,
           status: str, z: np.ndarray | None, x: np.ndarray) -> ConjugateBound:
    """The :class:`ConjugateBound` of one solve's dual point ``z`` (repaired and checked,
    module docstring), or an infinite one saying why."""
    D, b = bal.D, bal.b
    zero = np.zeros(model.dim)
    if z is None or status in _UNBOUNDED:
        why = "s is outside the conjugate's domain" if status in _UNBOUNDED else "no dual point"
        return ConjugateBound(np.inf, zero, zero, np.inf, status, f"{why} (Clarabel: {status})")
    z, aux_charge = bal.repaired(z, x)
    if z is None or not np.isfinite(aux_charge):
        return ConjugateBound(np.inf, zero, zero, np.inf, status,
                              f"the dual point could not be moved into K* (Clarabel: {status})")
    if aux_charge > _AUX_CHARGE_RTOL * max(1.0, abs(float(b @ z) - D.d0)):
        return ConjugateBound(np.inf, zero, zero, np.inf, status,
                              f"the auxiliary residual's charge {aux_charge:.2e} at the solver's "
                              f"point is too large to rest on it (Clarabel: {status})")
    rho, rnd = bal.residual(z)
    above = bool((np.abs(rho) > rnd)[bal.aux].any())
    reason = (f"auxiliary residual above rounding, charged {aux_charge:.2e} at the solver's "
              f"point (Clarabel: {status})" if above else "")
    shift, shift_rnd = np.where(absent, -s, 0.0), np.zeros(model.dim)
    cols = D.x_cols[0][~absent]
    shift[~absent], shift_rnd[~absent] = rho[cols], rnd[cols]
    value = float(b @ z) - D.d0 + aux_charge
    magnitude = float(np.abs(b) @ np.abs(z)) + abs(D.d0) + aux_charge
    point = np.full(model.dim, np.nan)
    point[~absent] = x[cols]
    return ConjugateBound(value + 0.0, shift, shift_rnd, magnitude, status, reason, point)
