"""Small vectorized CVXPY building blocks shared by penalties, constraints and compilers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import cvxpy as cp
import numpy as np

__all__ = ["pnorm_rows_le", "norm_rows_le", "norm_rows_epigraph", "bounds_constraints",
           "value_of"]


def pnorm_rows_le(Z: cp.Expression, T: Any, p: float) -> list[cp.Constraint]:
    """Vectorized power-cone constraints for ``||Z_k||_p <= T_k`` (``1 < p < inf``).

    ``||z||_p <= t`` iff some ``r >= 0`` has ``sum_j r_j = t`` and
    ``|z_j| <= r_j^(1/p) t^(1-1/p)`` (a 3-d power cone per entry, CVXPY's ``PowCone3D``);
    at ``t = ||z||_p`` take ``r_j = |z_j|^p / t^(p-1)``.  One cone family for all rows.
    CVXPY 1.9's ``pnorm`` accepts ``axis`` only for ``p = 2``, hence this form.
    ``T`` may be a constant array or an affine CVXPY expression of shape ``(k,)``.
    """
    Z2 = cp.reshape(Z, (1, Z.shape[0]), order="C") if Z.ndim == 1 else Z
    k, d = Z2.shape
    T = T if isinstance(T, cp.Expression) else cp.Constant(np.broadcast_to(
        np.asarray(T, dtype=float), (k,)).copy())
    T1 = cp.reshape(T, (k,), order="C")
    T2 = cp.reshape(T1, (k, 1), order="C") @ np.ones((1, d))
    R = cp.Variable((k, d), name="pnorm_r")
    return [
        cp.constraints.PowCone3D(cp.vec(R, order="C"), cp.vec(T2, order="C"),
                                 cp.vec(Z2, order="C"), 1.0 / p),
        cp.sum(R, axis=1) == T1,
    ]


def _is_atomic(p: float) -> bool:
    return bool(np.isinf(p) or p in (1.0, 2.0))


def norm_rows_le(Z: cp.Expression, radii: Any, p: float) -> list[cp.Constraint]:
    """``||Z_k||_p <= radii_k`` for every row (``Z`` of shape ``(k, d)`` or ``(d,)``)."""
    if _is_atomic(p):
        pp = "inf" if np.isinf(p) else p
        if Z.ndim == 1:
            return [cp.norm(Z, pp) <= radii]
        return [cp.norm(Z, pp, axis=1) <= radii]
    return pnorm_rows_le(Z, radii, p)


def norm_rows_epigraph(Z: cp.Expression, p: float) -> tuple[cp.Expression, list[cp.Constraint]]:
    """``(T, constraints)`` with ``T_k >= ||Z_k||_p``, tight when ``T`` is minimized with
    nonnegative weights; a plain row-wise norm (no constraints) for ``p`` in 1, 2, inf."""
    if _is_atomic(p):
        pp = "inf" if np.isinf(p) else p
        if Z.ndim == 1:
            return cp.reshape(cp.norm(Z, pp), (1,), order="C"), []
        return cp.norm(Z, pp, axis=1), []
    T = cp.Variable(Z.shape[0] if Z.ndim == 2 else 1, name="pnorm_t")
    return T, pnorm_rows_le(Z, T, p)


def bounds_constraints(v: cp.Expression, lo: Any, hi: Any, size: int) -> list[cp.Constraint]:
    """``lo <= v <= hi`` on the finite entries (``lo``/``hi`` scalars or arrays)."""
    lo = np.broadcast_to(np.asarray(lo, dtype=float), (size,))
    hi = np.broadcast_to(np.asarray(hi, dtype=float), (size,))
    cons = []
    for bound, sign in ((lo, 1.0), (hi, -1.0)):
        keep = np.isfinite(bound)
        if keep.all():
            cons.append(sign * v >= sign * bound)
        elif keep.any():
            cons.append(sign * v[np.flatnonzero(keep)] >= sign * bound[keep])
    return cons


@contextmanager
def value_of(variable: cp.Variable, w: Any) -> Iterator[None]:
    """Temporarily set ``variable.value = w`` (to evaluate a symbolic expression in numpy)."""
    old = variable.value
    variable.value = np.asarray(w, dtype=float).reshape(variable.shape)
    try:
        yield
    finally:
        variable.value = old
