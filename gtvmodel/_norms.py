"""Norm mathematics in one place: dual exponents and overflow-free row-wise ``p``-norms.

``np.linalg.norm(v, ord=p)`` evaluates ``(sum_j |v_j|^p)^(1/p)`` literally.  For a large ``p``
(or the dual exponent ``q = p / (p - 1)`` of a ``p`` near 1, e.g. ``q = 10001`` for
``p = 1.0001``) the powers underflow to 0 or overflow to inf, and so do squares of entries
beyond ``1e154`` for ``p = 2``.  :func:`norm_rows` scales each row by its largest magnitude
``m`` (docs/conventions.md)::

    ||v||_p = m (sum_j (|v_j| / m)^p)^(1/p),      m = max_j |v_j|,

so every term lies in ``[0, 1]``, the largest is exactly 1 and the sum in ``[1, d]``: nothing
overflows, and the terms that underflow are below ``2^-1022`` of the sum.  The result is
accurate to a few units in the last place for every ``p`` in ``[1, inf]`` and every finite
input.  :func:`norm_rows_upper` adds the proven rounding bound, so it never falls below the
exact norm (for tests that must err towards "infeasible").

**Rounding bound.**  With ``u = 2^-53``: the quotients ``|v_j| / m`` carry a relative error
``<= u``, which ``t -> t^p`` raises to ``(1 + u)^p``; ``pow`` adds ``<= 8u`` (4 ulps, a
generous bound for libm or SIMD ``pow``); a sum of ``d`` nonnegative terms in any order
``<= (d - 1) u``; the ``1/p``-th power takes the ``p``-th root of the accumulated factor
(``(1 + u)^p -> 1 + u``) and adds ``<= 8u``; the product with ``m`` ``<= u``.  Altogether the
computed norm ``c`` satisfies ``|c - ||v||_p| <= (5 + (d + 7) / (2p)) eps ||v||_p``
(``eps = 2u``) up to ``O(eps^2)`` and an absolute ``2^-1075`` in the subnormal range (``p = 1``:
a plain sum, ``(d - 1) u``; ``p = inf``: exact).  :func:`norm_rows_upper` adds
``(8 + ceil((d + 8) / p)) eps`` and one ulp, which covers it.

**Capacity rule** (:func:`within`): a row ``u`` is within a capacity ``c`` when
``norm_rows(u, q) <= c (1 + CAPACITY_SLACK)`` with ``CAPACITY_SLACK = 8 eps``.  A flow computed
*on* the capacity lands a rounding error either side of it and must pass; a flow that passes
exceeds its capacity by at most ``(13 + (d + 7) / (2q)) eps`` relative, which the certificate's
rounding allowance covers (shrinking ``u`` by that factor keeps every subspace condition and
changes the dual value by a relative ``O(eps)``).  Projections (:func:`enforce_ball`) are
stricter: their rows satisfy ``norm_rows_upper(x, q) <= c``, i.e. they are truly inside.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _xp
from .errors import PenaltyError

__all__ = ["dual_exponent", "norm_rows", "norm_rows_upper", "norm", "within", "project_rows",
           "project_norm_ball",
           "enforce_ball", "round_up", "mul_up", "L2BallProjection", "EPS", "CAPACITY_SLACK",
           "UPPER_SLACK"]

EPS: float = float(np.finfo(float).eps)
#: Relative slack of the capacity test ``||u||_q <= c (1 + CAPACITY_SLACK)`` (module docstring).
CAPACITY_SLACK: float = 8.0 * EPS
#: Fixed part of the relative error bound used by :func:`norm_rows_upper` (in units of eps).
UPPER_SLACK: int = 8


def dual_exponent(p: float) -> float:
    """The dual exponent ``q`` with ``1/p + 1/q = 1`` (``p = 1 -> inf``, ``p = inf -> 1``).

    ``p / (p - 1)`` is evaluated as ``1 + 1 / (p - 1)``; ``p - 1`` is exact for ``p`` in
    ``[1, 2]`` (Sterbenz) and the result is correctly rounded to within 1.5 ulps.
    Raises :class:`ValueError` for ``p < 1`` or NaN.
    """
    p = float(p)
    if not p >= 1.0:
        raise ValueError(f"dual_exponent: p must be >= 1, got {p!r}")
    if p == 1.0:
        return float("inf")
    if np.isinf(p):
        return 1.0
    return 1.0 + 1.0 / (p - 1.0)


def _as_rows(V: Any) -> tuple[Any, bool]:
    A = np.asarray(V, dtype=float) if _xp.is_numpy(V) else V
    if A.ndim == 1:
        return A[None, :], True
    if A.ndim != 2:
        raise ValueError(f"norm_rows: expected a (k, d) array or a vector, got shape {A.shape}")
    return A, False


_NARROW = 32  # rows up to this length are reduced column by column (much faster in numpy)


def _row_max(A: np.ndarray) -> np.ndarray:
    """Row maxima of a ``(k, d)`` array, ``d >= 1`` (NaN propagates)."""
    if not _xp.is_numpy(A):
        return _xp.namespace(A).max(A, axis=1)
    if A.shape[1] > _NARROW:
        return A.max(axis=1)
    m = A[:, 0].copy()
    for j in range(1, A.shape[1]):
        np.maximum(m, A[:, j], out=m)
    return m


def _row_sum(A: np.ndarray) -> np.ndarray:
    """Row sums (any summation order is covered by the error bounds of this module)."""
    if not _xp.is_numpy(A):
        return _xp.namespace(A).sum(A, axis=1)
    if A.shape[1] > _NARROW:
        return np.ascontiguousarray(A).sum(axis=1)
    s = A[:, 0].copy()
    for j in range(1, A.shape[1]):
        s += A[:, j]
    return s


def _row_nnz(A: np.ndarray) -> np.ndarray:
    """Number of nonzero entries per row."""
    if not _xp.is_numpy(A):  # (a sum of booleans: torch's count_nonzero along an axis is slow)
        return _xp.namespace(A).sum(A != 0, axis=1)
    if A.shape[1] > _NARROW:
        return np.count_nonzero(A, axis=1)
    c = np.zeros(A.shape[0], dtype=np.int64)
    for j in range(A.shape[1]):
        c += A[:, j] != 0
    return c


def _l2_unscaled_range(A: Any) -> tuple[float, float]:
    """Row maxima in this range need no scaling for ``p = 2``: ``[2^-480, 2^500]`` in float64
    (``2^-(h - 32)``, ``2^(h - 12)`` with ``2^(2h)`` the dtype's overflow threshold)."""
    if _xp.is_numpy(A):
        h = 512
    else:
        h = int(np.log2(float(_xp.namespace(A).finfo(A.dtype).max))) // 2 + 1
    return 2.0 ** -(h - 32), 2.0 ** (h - 12)


def _norm_rows_abs(A: Any, p: float) -> Any:
    """Row-wise ``p``-norms of a nonnegative ``(k, d)`` array (NaN propagates, inf -> inf);
    any array namespace (:mod:`gtvmodel._xp`)."""
    k, d = A.shape
    if d == 0:
        return _xp.like(np.zeros(k), A)
    if np.isinf(p):
        return _row_max(A)
    if p == 1.0:
        # a sum of nonnegative terms: relative error <= (d - 1) u, no scaling needed (an
        # overflow to inf happens only where the exact sum is beyond the float range)
        return _row_sum(A)
    if p == 2.0 and _xp.is_numpy(A):
        return _l2_direct(A)
    return _by_row_max(A, p)


def _l2_direct(A: np.ndarray) -> np.ndarray:
    """Row-wise 2-norms of a numpy ``(k, d)`` array, ``d >= 1`` (signs allowed: only squares
    enter), bit for bit those of :func:`_by_row_max`, in one pass where the rows allow it.

    The plain norms ``c_k`` (:func:`_l2_rows`) come first.  A row with ``2 sqrt(d) lo <= c_k
    <= hi / 2`` (:func:`_l2_unscaled_range`) has its largest magnitude ``m_k`` in ``[lo,
    hi]`` (``m_k <= ||A_k|| <= sqrt(d) m_k``, and ``c_k`` is within a relative ``d eps`` of
    ``||A_k||``; squares that underflow only lower ``c_k``), so :func:`_by_row_max` takes the
    same unscaled sum of squares for it: ``c_k`` is its result.  The other rows (zero rows,
    rows near the ends of the range, NaN and infinite rows) go through :func:`_by_row_max`.
    One pass over ``A`` instead of the ``d`` column passes of the row maxima and the ``abs``
    copy (the capacity checks of the certificate's repair: 9-10 norm evaluations of every
    flow per certificate)."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        nrm = _l2_rows(A)
    lo, hi = _l2_unscaled_range(A)
    good = (nrm >= 2.0 * np.sqrt(A.shape[1]) * lo) & (nrm <= 0.5 * hi)
    if not good.all():
        bad = ~good
        nrm[bad] = _by_row_max(np.abs(A[bad]), 2.0)
    return nrm


def _by_row_max(A: Any, p: float) -> Any:
    """:func:`_norm_rows_abs` for ``1 < p < inf`` through the row maxima ``m`` of the
    nonnegative ``A``: unscaled sums of squares where ``m`` is in the range of
    :func:`_l2_unscaled_range` (``p = 2``), the scaled sums of :func:`_scaled` elsewhere."""
    xp = _xp.namespace(A)
    m = _row_max(A)
    if p == 2.0:
        # fast path: rows whose largest entry is in [2^-480, 2^500] need no scaling (no square
        # overflows; squares that underflow are below 2^-120 of the sum), and the plain sum of
        # squares has the same error bound as the scaled one
        lo, hi = _l2_unscaled_range(A)
        safe = (m >= lo) & (m <= hi)
        if bool(xp.all(safe)):
            return _l2_rows(A)
        if bool(xp.any(safe)):
            out = xp.empty_like(m)
            out[safe] = _l2_rows(A[safe])
            out[~safe] = _scaled(A[~safe], m[~safe], 2.0)
            return out
    return _scaled(A, m, p)


def _l2_rows(A: Any) -> Any:
    """Unscaled row-wise 2-norms: ``sqrt`` of numpy's ``einsum`` sum of squares; for other
    arrays the library's ``vector_norm`` (no ``(k, d)`` temporary on a GPU)."""
    if _xp.is_numpy(A):
        return np.sqrt(np.einsum("ij,ij->i", A, A))
    return _xp.namespace(A).linalg.vector_norm(A, axis=1)


def _scaled(A: Any, m: Any, p: float) -> Any:
    """``m (sum_j (a_j / m)^p)^(1/p)`` row-wise for a nonnegative ``A`` with row maxima
    ``m`` (zero, NaN and infinite rows handled)."""
    xp = _xp.namespace(A)
    pos = m > 0
    with np.errstate(invalid="ignore", divide="ignore", over="ignore", under="ignore"):
        R = A / xp.where(pos, m, 1.0)[:, None]  # entries in [0, 1], the largest exactly 1
        T = R * R if p == 2.0 else xp.pow(R, p)
        s = _row_sum(T)  # in [1, d]
        g = xp.sqrt(s) if p == 2.0 else xp.pow(s, 1.0 / p)
        out = m * g
    out = xp.where(pos, out, m)  # zero rows (and rows with NaN, where m is NaN)
    # rows with an infinite entry: A / m is NaN there
    inf_rows = xp.isinf(m) & (m > 0)
    if bool(xp.any(inf_rows)):
        out[inf_rows] = xp.where(xp.any(xp.isnan(A[inf_rows]), axis=1), np.nan, np.inf)
    return out


def norm_rows(V: Any, p: float) -> np.ndarray:
    """Row-wise ``||V_k||_p`` of a ``(k, d)`` array, ``(k,)``; for a vector a 0-d array.

    Stable for every ``p`` in ``[1, inf]`` and entries anywhere in the float range (module
    docstring): accurate to ``(5 + (d + 7)/(2p))`` eps relative (typically 1-2 ulps).  NaN
    entries give NaN, an infinite entry inf.  Any array namespace (:mod:`gtvmodel._xp`).
    """
    A, vec = _as_rows(V)
    if float(p) == 2.0 and _xp.is_numpy(A) and A.shape[1]:
        out = _l2_direct(A)  # squares: no abs copy
    else:
        out = _norm_rows_abs(_xp.namespace(A).abs(A), float(p))
    return out[0] if vec else out


def norm(v: Any, p: float) -> float:
    """``||v||_p`` of one vector (any shape is flattened) as a float (:func:`norm_rows`)."""
    return float(_norm_rows_abs(np.abs(np.asarray(v, dtype=float)).reshape(1, -1), float(p))[0])


def round_up(x: Any) -> Any:
    """The next float above ``x`` where ``x`` is nonzero and finite (``0``, ``inf``, NaN kept).

    Applied to the rounded result of one operation, it gives an upper bound of the exact one
    (in ``x``'s dtype; any array namespace)."""
    x = np.asarray(x, dtype=float) if _xp.is_numpy(x) else x
    xp = _xp.namespace(x)
    return xp.where((x != 0) & xp.isfinite(x), xp.nextafter(x, xp.full_like(x, np.inf)), x)


def _upper_slack(p: float, d: int) -> int:
    """The relative slack (in eps) that :func:`norm_rows_upper` adds for rows of length d."""
    return UPPER_SLACK + int(np.ceil((d + 8) / p))


def mul_up(a: Any, b: Any) -> np.ndarray:
    """An upper bound of the exact product ``a b`` of nonnegative ``a``, ``b`` (the rounded
    product raised by one ulp; a product of nonzero factors that underflows to 0 becomes the
    smallest subnormal)."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        prod = a * b
    tiny = (prod == 0) & (a != 0) & (b != 0)
    return np.where(tiny, np.nextafter(0.0, 1.0), round_up(prod))


def norm_rows_upper(V: Any, p: float) -> np.ndarray:
    """An upper bound of ``||V_k||_p`` for every row, within ``(12 + (d + 8) / p)`` eps of it.

    Exact for ``p = inf`` and for rows with at most one nonzero entry (``0`` stays ``0``);
    otherwise the computed norm raised by its proven error bound (module docstring).  Use it
    where an under-estimate would be unsound (support functions, projections that must land
    inside a ball).
    """
    A, vec = _as_rows(V)
    p = float(p)
    Aa = _xp.namespace(A).abs(A)
    out = _upper_from(_norm_rows_abs(Aa, p), Aa, p)
    return out[0] if vec else out


def _upper_from(nrm: Any, Aa: Any, p: float) -> Any:
    """:func:`norm_rows_upper` from the computed norms ``nrm`` of the rows of ``Aa >= 0``
    (the bound in units of the dtype's epsilon)."""
    if np.isinf(p):
        return nrm
    K = _upper_slack(p, Aa.shape[1])
    with np.errstate(over="ignore"):
        up = round_up(nrm * (1.0 + K * _xp.eps_of(nrm)))
    # a row with at most one nonzero entry is computed exactly (m * 1^(1/p) = m)
    return _xp.namespace(nrm).where(_row_nnz(Aa) <= 1, nrm, up)


def within(V: Any, caps: Any, q: float) -> np.ndarray:
    """The capacity test: ``norm_rows(V, q) <= caps (1 + CAPACITY_SLACK)`` row-wise.

    ``caps >= 0`` (scalar or ``(k,)``).  A zero capacity admits only the zero row; NaN rows
    fail.  See the module docstring for why the slack is safe.  Any array namespace
    (:mod:`gtvmodel._xp`; ``caps`` a number, a numpy array or a tensor beside ``V``).
    """
    A, vec = _as_rows(V)
    c = _xp.per_row(caps, A)
    if float(q) == 2.0 and _xp.is_numpy(A) and A.shape[1]:
        n = _l2_direct(A)  # squares only: no |V| copy (the flows of every certificate)
    else:
        n = _norm_rows_abs(_xp.namespace(A).abs(A), float(q))
    with np.errstate(over="ignore"):
        ok = n <= c * (1.0 + CAPACITY_SLACK)
    return ok[0] if vec else ok


def enforce_ball(X: Any, radii: Any, p: float) -> Any:
    """Shrink the rows of ``X`` (in place and returned) until ``norm_rows_upper(X_k, p) <=
    r_k``: afterwards each row is inside its ball for certain.

    Meant for the output of a projection, which lies on the sphere up to rounding: a row
    that fails is scaled by ``r / upper`` less a few eps (once is enough in practice; a row
    that still fails after a few rounds, e.g. in the subnormal range, is set to 0).
    """
    p = float(p)
    xp, eps = _xp.namespace(X), _xp.eps_of(X)
    for _ in range(4):
        ub = norm_rows_upper(X, p)
        bad = ~(ub <= radii)
        if not bool(xp.any(bad)):
            return X
        with np.errstate(divide="ignore", invalid="ignore", under="ignore"):
            f = xp.where(ub[bad] > 0, radii[bad] / ub[bad], 0.0) * (1.0 - 4.0 * eps)
        f = xp.where(xp.isfinite(f), f, 0.0)
        X[bad] = X[bad] * f[:, None]
    bad = ~(norm_rows_upper(X, p) <= radii)
    X[bad] = 0.0
    return X


# ============================================================================ projections
def project_rows(U: Any, r: Any, p: float) -> Any:
    """Row-wise Euclidean projection of ``U`` (``(k, d)``) onto ``{||x||_p <= r_k}``.

    ``r`` is a ``(k,)`` array of finite radii ``>= 0`` (checked by the callers).  Scaling
    (``p = 2``), clipping (``p = inf``), sort-based (``p = 1``) or a safeguarded Newton
    iteration on the KKT multiplier (``1 < p < inf``, :func:`_project_lq`).  Every output row
    satisfies ``norm_rows_upper(x, p) <= r`` (:func:`enforce_ball`): it is inside the ball for
    certain, not only up to rounding.  Rows inside by the computed norm are returned
    unchanged, except those within the rounding bound of the sphere: they shrink by a few ulps.
    Rows with NaN are returned as they are, rows with an infinite entry outside the ball as NaN.

    Any array namespace (:mod:`gtvmodel._xp`, e.g. PyTorch tensors for Algorithm 1 on a GPU),
    the rounding bounds in the dtype's epsilon; the iteration of ``1 < p < inf`` is numpy-only
    and runs on the CPU in float64 for other arrays.
    """
    p = float(p)
    if not _xp.is_numpy(U) and not (p in (1.0, 2.0) or np.isinf(p)):
        return _xp.like(project_rows(_xp.to_numpy(U), _xp.to_numpy(r), p), U)
    xp, eps = _xp.namespace(U), _xp.eps_of(U)
    d = U.shape[1]
    if p == 2.0 and d:
        fast = _project_l2_fast(U, r, d)
        if fast is not None:
            return fast
    A = xp.abs(U)
    nrm = _norm_rows_abs(A, p)
    outside = nrm > r  # NaN rows are left alone
    X = _xp.copy(U)
    if np.isinf(p):  # clipping is exact: the max of the output is <= r
        X[outside] = xp.minimum(xp.maximum(U[outside], -r[outside][:, None]),
                                r[outside][:, None])
        return X
    # rows inside by the computed norm but not for certain (within the rounding bound)
    near = ~outside & ~(_upper_from(nrm, A, p) <= r) & ~xp.isnan(nrm)
    if bool(xp.any(outside)):
        finite = xp.all(xp.isfinite(A), axis=1)
        X[outside & ~finite] = np.nan  # no projection of a point at infinity
        sel = outside & finite
        if bool(xp.any(sel)):
            # aim a little inside (by the rounding bound of norm_rows_upper) so that the rows
            # pass enforce_ball below unchanged: a uniform shrink there would perturb the
            # small entries of an l_q projection relative to their KKT conditions
            rs = r[sel] * (1.0 - (_upper_slack(p, d) + 4) * eps)
            if p == 2.0:
                X[sel] = _project_l2(U[sel], rs, nrm[sel])
            elif p == 1.0:
                X[sel] = _project_l1(U[sel], rs)
            else:
                X[sel] = _project_lq(U[sel], rs, p)
        near = near | sel
    if bool(xp.any(near)):
        X[near] = enforce_ball(X[near], r[near], p)
    return X


def project_norm_ball(U: Any, radii: Any, p: float) -> Any:
    """Row-wise Euclidean projection of ``U`` (``(k, d)``) onto ``{||u_e||_p <= r_e}``.

    Scaling (``p = 2``), clipping (``p = inf``), sort-based (``p = 1``) or a safeguarded Newton
    iteration on the KKT multiplier (``1 < p < inf``), all free of overflow and underflow
    (:func:`project_rows`).  Every output row is inside its ball for certain
    (``norm_rows_upper(x, p) <= r_e``, not only up to rounding).  Used for the dual update of
    norm penalties (``_NormPenalty.project_dual_ball`` in :mod:`gtvmodel.terms.penalties`, with
    the dual exponent) and for :class:`~gtvmodel.terms.constraints.NormBall` node constraints.
    Bad arguments raise :class:`~gtvmodel.PenaltyError` naming the edge (row) at fault.
    ``U`` may be another array library's tensor (``radii`` then a number or a tensor beside
    it, :func:`project_rows`).
    """
    U, r = _check_ball_args(U, radii)
    p = float(p)
    if not p >= 1:
        raise PenaltyError(f"project_norm_ball: p must be >= 1, got {p!r}")
    return project_rows(U, r, p)


def _check_ball_args(U: Any, radii: Any) -> tuple[Any, Any]:
    U = np.asarray(U, dtype=float) if _xp.is_numpy(U) else U
    if U.ndim != 2:
        raise PenaltyError(f"project_dual_ball: U must be an (|E|, d) array, got shape "
                           f"{tuple(U.shape)}")
    r = np.asarray(radii, dtype=float) if _xp.is_numpy(radii) else radii
    if r.ndim == 0:
        r = _xp.per_row(r, U)
    elif _xp.is_numpy(r):
        r = _xp.like(r, U)
    if tuple(r.shape) != (U.shape[0],):
        raise PenaltyError(f"project_dual_ball: radii must have shape ({U.shape[0]},), "
                           f"got {tuple(r.shape)}")
    xp = _xp.namespace(r)
    if r.shape[0] and bool(xp.isfinite(xp.sum(r))) and bool(xp.min(r) >= 0):  # hot path of DU
        return U, r
    r = _xp.to_numpy(r)
    bad = np.flatnonzero(~np.isfinite(r) | (r < 0))
    if bad.size:
        raise PenaltyError(f"project_dual_ball: radius of edge {bad[0]} is {r[bad[0]]!r}; "
                           "radii must be finite and >= 0")
    return U, _xp.like(r, U)  # checked on the host: back beside U (e.g. no rows at all)


def _project_l2_fast(U: Any, r: Any, d: int) -> Any:
    """:func:`project_rows` for ``p = 2`` in two passes over ``U`` (the hot path of the dual
    update of ``Norm2``): the row norms, then one scale factor per row, with the output's bound
    derived instead of recomputed.  ``None`` (use the general path) unless every row is zero or
    has its norm in the unscaled range of :func:`_norm_rows_abs` (so every nonzero computed
    norm ``c_k`` is a normal number), and every factor is a normal number.

    Bounds, with ``u = eps / 2`` the unit roundoff and every product rounded to nearest:

    * ``||U_k|| <= c_k (1 + K eps)`` (:func:`norm_rows_upper`'s bound), so the computed
      ``b_k = fl(c_k (1 + (K + 2) eps)) >= c_k (1 + (K + 2) eps)(1 - u) >= ||U_k||``; a row
      with ``b_k <= r_k`` is inside for certain and returned unchanged;
    * any other row is scaled by ``f_k = r_k (1 - (K + 10) eps) / c_k``: each entry of
      ``X_k = fl(f_k U_k)`` is within a relative ``u`` of ``f_k U_k`` (plus an absolute
      ``2^-1075`` where it is subnormal), so ``||X_k|| <= f_k b_k (1 + u) + sqrt(d) 2^-1075``;
      ``fl(fl(f_k b_k) (1 + 3 eps)) + (d + 4) 2^-1074`` exceeds that (the two roundings lose
      at most ``2u`` relative and ``2^-1074`` absolute); for ``r_k >= 2^-900`` the absolute
      term is below ``r_k u``, so ``fl(fl(f_k b_k)(1 + 3 eps)) <= fl(r_k (1 - eps))`` proves
      the row inside; any other row (a radius below ``2^-900``, or a bound above it: none was
      seen, the bound is about ``r_k (1 - 5 eps)``, and the rounding of ``f_k`` is ``<= eps``)
      goes through
      :func:`enforce_ball`.
    """
    xp, eps = _xp.namespace(U), _xp.eps_of(U)
    nrm = _l2_rows(U)  # squares: the signs need no abs
    lo, hi = _l2_unscaled_range(U)
    if not bool(xp.all(nrm <= hi)):  # also False for NaN (and inf) rows
        return None
    small = nrm < lo
    if bool(xp.any(small)) and not bool(xp.all(U[small] == 0)):
        return None  # squares that underflow: the scaled norms of the general path
    K = _upper_slack(2.0, d)
    upper = nrm * (1.0 + (K + 2) * eps)
    shrink = ~(upper <= r)
    if not bool(xp.any(shrink)):
        return _xp.copy(U)  # a new array, as on every other path (callers may write to it)
    with np.errstate(divide="ignore", invalid="ignore", under="ignore", over="ignore"):
        f = xp.where(shrink, r * (1.0 - (K + 10) * eps) / nrm, 1.0)
    tiny = xp.finfo(U.dtype).smallest_normal
    if not bool(xp.all(f >= tiny * 2.0**22)):
        return None
    X = U * f[:, None]
    with np.errstate(over="ignore", under="ignore"):
        bound = (f * upper) * (1.0 + 3 * eps)
        # radii >= 2^-900 (every realistic capacity): the absolute term is below r u and
        # ``bound <= fl(r (1 - eps))`` implies the bound; smaller radii go to enforce_ball
        # (adding the subnormal term itself would make every row's arithmetic subnormal)
        ok = (bound <= r * (1.0 - eps)) & (r >= tiny * 2.0**122)
    bad = shrink & ~ok
    if bool(xp.any(bad)):
        X[bad] = enforce_ball(X[bad], r[bad], 2.0)
    return X


class L2BallProjection:
    """:func:`project_rows` for ``p = 2`` with fixed radii, called again and again (the dual
    update DU (33) of ``Norm2`` on one block of edges in every iteration of Algorithm 1) and
    written into a given output: the same arithmetic as :func:`_project_l2_fast`, so the same
    rows bit for bit and the same rounding bound (every row returned satisfies
    ``norm_rows_upper(x, 2) <= r_k``), with what depends on the radii alone computed once
    (``r_k (1 - (K + 10) eps)``, ``r_k (1 - eps)``, the radii below ``2^-900``), the checks
    as reductions (``max``, ``min``, ``any``) and the row-sized intermediates in buffers
    reused from call to call: about half the passes of :func:`_project_l2_fast` over the
    rows, and the scaled rows written straight into the output (no copy).  Inputs the fast
    path does not take (norms outside its unscaled range, NaN, factors below the normal
    range) go through :func:`project_rows`.  numpy arrays only (float64)."""

    def __init__(self, radii: Any, dim: int):
        radii = np.asarray(radii, dtype=float)
        _, r = _check_ball_args(np.empty((radii.size, 0)), radii.reshape(-1))
        self.r, self.dim = np.ascontiguousarray(r), int(dim)
        K = _upper_slack(2.0, self.dim)
        self.grow = 1.0 + (K + 2) * EPS        # c_k -> the bound b_k of ||U_k||
        # r_k times these: the scale factor's numerator f_k c_k, the bound's limit
        self.scale_factor, self.inside_factor = 1.0 - (K + 10) * EPS, 1.0 - EPS
        with np.errstate(under="ignore"):
            self.r_scale = self.r * self.scale_factor
            self.r_inside = self.r * self.inside_factor
        tiny = np.finfo(float).smallest_normal
        self.f_min = tiny * 2.0**22
        self.r_min = tiny * 2.0**122  # smaller radii: their scaled rows go to enforce_ball
        below = self.r < self.r_min
        self.r_below = below if bool(below.any()) else None
        self.lo, self.hi = _l2_unscaled_range(self.r)
        k = self.r.size
        self._nrm, self._upper, self._f = np.empty(k), np.empty(k), np.empty(k)
        self._shrink, self._bad = np.empty(k, dtype=bool), np.empty(k, dtype=bool)

    def __call__(self, U: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Write ``project_rows(U, r, 2)`` into ``out`` (``U``'s shape; ``U`` is not changed
        unless it is ``out``); returns ``out``."""
        if not self.dim or U.shape != (self.r.size, self.dim):
            if U.shape != (self.r.size, self.dim):
                raise PenaltyError(f"L2BallProjection: U must have shape "
                                   f"{(self.r.size, self.dim)}, got {U.shape}")
            out[...] = project_rows(U, self.r, 2.0)
            return out
        nrm = np.einsum("ij,ij->i", U, U, out=self._nrm)
        np.sqrt(nrm, out=nrm)
        if not self._fast_range(U, nrm):
            out[...] = project_rows(U, self.r, 2.0)
            return out
        upper = np.multiply(nrm, self.grow, out=self._upper)
        shrink = np.greater(upper, self.r, out=self._shrink)  # no NaN here: ~(upper <= r)
        if not shrink.any():
            if out is not U:
                out[...] = U
            return out
        f = self._f
        f.fill(1.0)
        np.divide(self.r_scale, nrm, out=f, where=shrink)
        if not f.min() >= self.f_min:
            out[...] = project_rows(U, self.r, 2.0)
            return out
        np.multiply(U, f[:, None], out=out)
        with np.errstate(over="ignore", under="ignore"):
            bound = np.multiply(f, upper, out=upper)
            bound *= 1.0 + 3 * EPS
        bad = np.greater(bound, self.r_inside, out=self._bad)  # ~(bound <= r (1 - eps))
        if self.r_below is not None:
            bad |= self.r_below
        bad &= shrink
        if bad.any():
            out[bad] = enforce_ball(out[bad], self.r[bad], 2.0)
        return out

    def _fast_range(self, U: np.ndarray, nrm: np.ndarray) -> bool:
        """Every norm finite and at most the unscaled range's top, and below its bottom only
        zero rows (:func:`_project_l2_fast`'s conditions)."""
        if not nrm.max(initial=0.0) <= self.hi:  # also False for NaN
            return False
        if nrm.min(initial=np.inf) >= self.lo:
            return True
        small = nrm < self.lo
        return bool(np.all(U[small] == 0))


def _project_l2(U: Any, r: Any, nrm: Any) -> Any:
    """Rows outside ``{||x||_2 <= r}``: ``r u / ||u||_2`` (``u / ||u||`` first: no overflow
    or premature underflow for any magnitude of ``u`` and ``r``)."""
    return (U / nrm[:, None]) * r[:, None]


def _project_l1(U: Any, r: Any) -> Any:
    """Rows outside ``{||x||_1 <= r}`` (sort-based, Duchi et al. 2008), rows scaled by their
    largest magnitude first (no overflow of the cumulative sums).

    ``x = sign(u) max(|u| - theta, 0)`` with ``theta = (sum_{j <= k} s_j - r) / k``, ``s`` the
    sorted ``|u|`` (descending) and ``k`` the largest index with ``s_k > theta_k``.
    """
    xp = _xp.namespace(U)
    A = xp.abs(U)
    M = _row_max(A)
    B = A / M[:, None]
    rho = r / M
    S = -xp.sort(-B, axis=1)
    cs = xp.cumulative_sum(S, axis=1)
    k = _xp.like(np.arange(1, S.shape[1] + 1), S)
    cond = S * k > cs - rho[:, None]
    # cond holds for a prefix of indices; its length is the support size (>= 1 since r >= 0)
    kk = xp.maximum(xp.sum(cond, axis=1), 1)
    # x = b - theta = (b - cs_k / k) + rho / k: rho is added last, so that a radius far below
    # the rounding of cs_k (r / max|u| < 1e-16) is not lost (k = 1: x_max = rho exactly)
    core = xp.take_along_axis(cs, (kk - 1)[:, None], axis=1)[:, 0] / kk
    with np.errstate(under="ignore"):
        X = xp.maximum((B - core[:, None]) + (rho / kk)[:, None], 0.0)
    return xp.sign(U) * (X * M[:, None])


def _lq_inner(B: np.ndarray, rho: np.ndarray, lam: np.ndarray, q: float
              ) -> tuple[np.ndarray, np.ndarray]:
    """Solve ``rho z + lam z^(q-1) = b`` for ``z in [0, 1]`` entrywise; returns ``(z, y)``
    with ``y = z^(q-1)``.  ``B`` is ``(k, d)`` in ``[0, 1]``, ``rho, lam >= 0`` are ``(k,)``
    with ``rho + lam >= max b`` (so that the root is at most 1).

    The left side is convex in ``z`` for ``q >= 2`` and in ``y`` (``z = y^e``, ``e = 1/(q-1)``)
    for ``q < 2``; Newton on that variable from the smaller of the roots of each term alone
    (an upper bound of the root at which each term is ``<= b``) decreases monotonically to
    the root and cannot overshoot; from such a start the slow phase takes ``O(log q)`` steps
    even for ``q = 1e6`` or ``q - 1 = 1e-6``.  For ``q < 2`` a last Newton step in ``z``
    restores the relative accuracy that ``z = y^e`` loses for a large ``e``.
    """
    r_ = rho[:, None]
    l_ = lam[:, None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        if q >= 2.0:
            z = np.minimum(np.minimum(1.0, B / r_), (B / l_) ** (1.0 / (q - 1.0)))
            z = np.where(np.isfinite(z), z, 0.0)
            act = np.ones(z.shape, dtype=bool)
            for _ in range(200):
                zq2 = z ** (q - 2.0)
                g = r_ * z + l_ * zq2 * z - B
                step = g / (r_ + l_ * (q - 1.0) * zq2)
                act &= (g > 0) & (step > 2.0 * EPS * z)
                if not act.any():
                    break
                z = np.where(act, np.maximum(z - step, 0.0), z)
            return z, z ** (q - 1.0)
        e = 1.0 / (q - 1.0)
        y = np.minimum(np.minimum(1.0, B / l_), (B / r_) ** (q - 1.0))
        y = np.where(np.isfinite(y), y, 0.0)
        act = np.ones(y.shape, dtype=bool)
        for _ in range(200):
            ye1 = y ** (e - 1.0)
            h = r_ * ye1 * y + l_ * y - B
            step = h / (e * r_ * ye1 + l_)
            act &= (h > 0) & (step > 2.0 * EPS * y)
            if not act.any():
                break
            y = np.where(act, np.maximum(y - step, 0.0), y)
        z = y**e
        # one Newton step in z (g is concave in z: the step cannot overshoot the root)
        y = z ** (q - 1.0)
        g = r_ * z + l_ * y - B
        dg = r_ + l_ * (q - 1.0) * np.where(z > 0, y / z, 0.0)
        z_new = np.clip(z - g / dg, 0.0, 1.0)
        z = np.where((z > 0) & np.isfinite(z_new), z_new, z)
        return z, z ** (q - 1.0)


def _project_lq(U: np.ndarray, r: np.ndarray, q: float, max_iter: int = 200) -> np.ndarray:
    """Rows outside ``{||x||_q <= r}`` for ``1 < q < inf`` (finite rows, ``r >= 0``).

    With ``M = max|u|``, ``b = |u| / M`` (in ``[0, 1]``) and ``rho = r / M``, the projection
    is ``x = sign(u) r z`` where ``z in [0, 1]^d`` solves the KKT conditions
    ``rho z_j + lam z_j^(q-1) = b_j`` (``lam = ||b - rho z||_p`` the multiplier, ``p`` dual to
    ``q``) with ``||z||_q = 1``.  Everything stays in ``[0, 1]``: no overflow for any
    magnitudes, exponents ``q`` in ``[1 + 1e-6, 1e6]`` or radii (``rho`` may underflow to 0:
    the limit ``z = (b / lam)^(p-1)`` is then solved).  ``lam`` is bracketed by
    ``[max(0, 1 - rho), ||b||_p]`` and found by Newton's method on
    ``G(lam) = log ||z(lam)||_q`` with bisection whenever a step leaves the bracket, to
    relative accuracy ~eps.  The result is rescaled onto the sphere.
    """
    A = np.abs(U)
    M = _row_max(A)
    B = A / M[:, None]
    with np.errstate(under="ignore"):
        rho = r / M
    lo = np.maximum(0.0, 1.0 - rho)
    hi = np.maximum(_norm_rows_abs(B, dual_exponent(q)), lo)
    lam = lo.copy()
    act = np.flatnonzero(r > 0)
    for _ in range(max_iter):
        if act.size == 0:
            break
        la, rh = lam[act], rho[act]
        z, y = _lq_inner(B[act], rh, la, q)
        with np.errstate(divide="ignore", invalid="ignore"):
            G = np.log(_norm_rows_abs(z, q))
            den = rh[:, None] * z + la[:, None] * (q - 1.0) * y
            dG = -(np.where(den > 0, y * y * z / den, 0.0).sum(axis=1)
                   / (y * z).sum(axis=1))
            newton = la - G / dG
        pos = G > 0
        lo[act] = np.where(pos, la, lo[act])
        hi[act] = np.where(pos, hi[act], la)
        ok = np.isfinite(newton) & (newton > lo[act]) & (newton < hi[act])
        new = np.where(ok, newton, 0.5 * (lo[act] + hi[act]))
        done = ((G == 0) | (np.abs(new - la) <= 2.0 * EPS * la)
                | (hi[act] - lo[act] <= 2.0 * EPS * hi[act]))
        lam[act] = np.where(G == 0, la, new)
        act = act[~done]
    X = np.zeros_like(U)
    pos_r = np.flatnonzero(r > 0)
    if pos_r.size:
        z, _ = _lq_inner(B[pos_r], rho[pos_r], lam[pos_r], q)
        nz = _norm_rows_abs(z, q)
        x = (z / nz[:, None]) * r[pos_r, None]
        # |x_j| <= |u_j| holds for the exact projection; keep it under rounding
        X[pos_r] = np.sign(U[pos_r]) * np.minimum(x, A[pos_r])
    return X
