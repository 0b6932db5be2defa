"""Small vectorized CVXPY building blocks shared by penalties, constraints and compilers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import cvxpy as cp
import numpy as np

from ._compat import Atom, Pnorm, pow_cone_3d
from ._norms import norm_rows_upper

__all__ = ["ScaleParameter", "DPP_MAX_ENTRIES", "dpp_sized", "pnorm_rows_le", "norm_rows_le",
           "norm_rows_epigraph", "bounds_constraints", "value_of", "outside_domain",
           "stable_value", "checked_value", "checked_residual"]


#: The most numbers a cached problem may take as CVXPY Parameters of per-node data (``k d``
#: demands, ``k`` radii).  CVXPY's DPP compilation densifies a (variables x parameter entries)
#: coefficient block (CVXPY 1.9, quadratic objectives and parameter-times-variable products), so
#: its time and memory grow with the square of the parameter entries: measured on the
#: certificates' node-conjugate problem 11 MiB at 1,000 entries, 43 MiB at 2,000, 1.1 GiB at
#: 10,000 and a 246 GiB allocation at 100,000 (benchmarks/RESULTS.md).  Above this size the data
#: enter as constants of a problem built per call (compiled each time, in time linear in size).
DPP_MAX_ENTRIES = 2_000


def dpp_sized(entries: int) -> bool:
    """Whether ``entries`` Parameter numbers may stay in a cached, compile-once DPP problem
    (at most :data:`DPP_MAX_ENTRIES`); otherwise pass them as constants per call."""
    return entries <= DPP_MAX_ENTRIES


class ScaleParameter:
    """A nonnegative scale such as ``lambda`` as CVXPY Parameters, so that a compiled problem
    stays DPP in it and a new value re-solves without recompiling: :attr:`value` holds
    ``lambda`` (for terms ``lambda * f``) and :attr:`inverse` holds ``1/lambda`` (``0`` at
    ``lambda = 0``; for terms ``f / lambda`` such as the quadratic conjugates ``||u||^2 /
    (2 lambda A_e)``, whose form changes at ``lambda = 0``: see
    :meth:`gtvmodel.terms.penalties.Penalty.conjugate_regime`)."""

    def __init__(self, value: float, name: str = "lambda"):
        self.value = cp.Parameter(nonneg=True, name=name)
        self.inverse = cp.Parameter(nonneg=True, name=f"inv_{name}")
        self.set(value)

    def set(self, value: float) -> None:
        """Set ``lambda`` (and ``1/lambda``)."""
        v = float(value)
        self.value.value = v
        self.inverse.value = 1.0 / v if v > 0 else 0.0

    @property
    def current(self) -> float:
        """The value ``lambda`` last set."""
        return float(self.value.value)


def pnorm_rows_le(Z: cp.Expression, T: Any, p: float) -> list[cp.Constraint]:
    """Vectorized power-cone constraints for ``||Z_k||_p <= T_k`` (``1 < p < inf``).

    ``||z||_p <= t`` iff some ``r >= 0`` has ``sum_j r_j = t`` and
    ``|z_j| <= r_j^(1/p) t^(1-1/p)`` (a 3-d power cone per entry, CVXPY's ``PowCone3D``);
    at ``t = ||z||_p`` take ``r_j = |z_j|^p / t^(p-1)``.  One cone family for all rows
    (:func:`gtvmodel._compat.pow_cone_3d`: a single entry, ``k = d = 1``, as scalars, which
    CVXPY 1.7 needs).  CVXPY 1.9's ``pnorm`` accepts ``axis`` only for ``p = 2``, hence this
    form.  ``T`` may be a constant array or an affine CVXPY expression of shape ``(k,)``.
    """
    Z2 = cp.reshape(Z, (1, Z.shape[0]), order="C") if Z.ndim == 1 else Z
    k, d = Z2.shape
    T = T if isinstance(T, cp.Expression) else cp.Constant(np.broadcast_to(
        np.asarray(T, dtype=float), (k,)).copy())
    T1 = cp.reshape(T, (k,), order="C")
    T2 = cp.reshape(T1, (k, 1), order="C") @ np.ones((1, d))
    R = cp.Variable((k, d), name="pnorm_r")
    return [
        pow_cone_3d(cp.vec(R, order="C"), cp.vec(T2, order="C"), cp.vec(Z2, order="C"),
                    np.full(k * d, 1.0 / p)),
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


def outside_domain(exprs: Any) -> bool:
    """True if the current variable values lie outside the domain of any of ``exprs``.

    CVXPY's numeric ``.value`` of an atom is not trustworthy outside the atom's domain: it can
    be finite and too small (``inv_pos``, ``power(x, -1)``, ``quad_over_lin`` at negative
    arguments), ``-inf`` (``entr``) or NaN (``log``, ``sqrt``).  Each expression's ``domain``
    (the constraints collected from all its atoms) is checked *exactly* (no tolerance): a point
    outside the closed domain of a convex function has value ``+inf`` there.
    """
    for expr in exprs:
        for con in getattr(expr, "domain", []):
            r = con.residual
            if r is None:
                return True
            r = np.asarray(r, dtype=float)
            if not np.isfinite(r).all() or (r > 0).any():
                return True
    return False


def stable_value(expr: cp.Expression) -> Any:
    """``expr.value`` computed as CVXPY does (atom by atom from the leaves), except that convex
    p-norm atoms are evaluated in scaled form, rounded up (:func:`~gtvmodel._norms.
    norm_rows_upper`): CVXPY's ``np.linalg.norm`` underflows for large ``p`` (``pnorm(v, 100)``
    is 0 for entries ~1e-8) and under-reports the objective.  An upper bound of each convex
    atom is an upper bound of every DCP convex expression built from it (DCP composes convex
    atoms only through nondecreasing arguments)."""
    if not isinstance(expr, Atom):
        return expr.value
    if 0 in expr.shape:
        return np.array([])
    vals = []
    for arg in expr.args:
        v = stable_value(arg)
        if v is None and not expr.is_constant():
            return None
        vals.append(v)
    if isinstance(expr, Pnorm) and expr.p >= 1:
        V = np.asarray(vals[0], dtype=float)
        if expr.axis is None:
            out = norm_rows_upper(V.ravel()[None, :], float(expr.p))[0]
            return np.full((1,) * V.ndim, out) if expr.keepdims else out
        Vm = np.moveaxis(V, expr.axis, -1)
        out = norm_rows_upper(Vm.reshape(-1, Vm.shape[-1]), float(expr.p)).reshape(Vm.shape[:-1])
        return np.expand_dims(out, expr.axis) if expr.keepdims else out
    return expr.numeric(vals)


def checked_value(expr: cp.Expression, variable: cp.Variable, w: Any) -> float:
    """The value of the scalar convex ``expr`` at ``variable = w``, ``+inf`` outside its domain.

    Outside the domain (see :func:`outside_domain`) and where CVXPY returns ``None`` or NaN, the
    value is ``+inf``, the convex extended-value convention: never a finite number that could
    under-report an objective."""
    with value_of(variable, w):
        if outside_domain([expr]):
            return float("inf")
        with np.errstate(all="ignore"):
            val = stable_value(expr)
    if val is None:
        return float("inf")
    val = float(np.asarray(val, dtype=float).reshape(()))
    return float("inf") if np.isnan(val) else val


def checked_residual(constraint: cp.Constraint, variable: cp.Variable, w: Any) -> float:
    """Largest violation of ``constraint`` at ``variable = w`` (0 if it holds), ``+inf``
    outside the domain of any of its expressions or where the residual is undefined."""
    with value_of(variable, w):
        if outside_domain(constraint.args):
            return float("inf")
        with np.errstate(all="ignore"):
            if isinstance(constraint, (cp.constraints.Inequality, cp.constraints.Equality)):
                lhs, rhs = (stable_value(a) for a in constraint.args)
                if lhs is None or rhs is None:
                    return float("inf")
                diff = np.asarray(lhs, dtype=float) - np.asarray(rhs, dtype=float)
                r = (np.maximum(diff, 0.0)
                     if isinstance(constraint, cp.constraints.Inequality) else diff)
            else:
                r = constraint.residual
    if r is None:
        return float("inf")
    r = np.abs(np.asarray(r, dtype=float))
    if np.isnan(r).any():
        return float("inf")
    return float(r.max(initial=0.0))
