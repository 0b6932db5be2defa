"""Node constraints ``w_i in C_i`` of GTV minimization (16).

A constraint is folded into the node loss as the indicator ``iota_C``.  Library constraints
(:class:`Box`, :class:`NonNeg`, :class:`NormBall`) are one object each that knows its CVXPY
constraints, a numeric violation measure, and (for later modules) its support function
``sigma_C(s) = sup_{w in C} s^T w`` and Euclidean projection.  Arbitrary DCP constraints on a
node's variable are wrapped in :class:`SymbolicConstraint`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

import cvxpy as cp
import numpy as np

from .. import _xp
from .._cvx import checked_residual, norm_rows_epigraph, norm_rows_le
from .._norms import dual_exponent, mul_up, norm_rows_upper, project_norm_ball
from .._validate import check_own_variable, check_scalar
from ..errors import ConstraintError, DataError, UnsupportedError
from .spec import CONSTRAINTS, ParameterFree, TermSpec, json_number

__all__ = ["Constraint", "Box", "NonNeg", "NormBall", "SymbolicConstraint"]


class Constraint:
    """Base class of node constraints ``w in C`` (``C`` convex, closed).

    Examples
    --------
    Every library constraint is a ``Constraint``; ``project`` is ``P_C``:

    >>> import gtvmodel as gm
    >>> c = gm.NonNeg()
    >>> isinstance(c, gm.Constraint), c.project([1.0, -2.0])
    (True, array([1., 0.]))
    """

    #: The name of the constraint in problem files and the registry :data:`~.spec.CONSTRAINTS`.
    kind: ClassVar[str] = "constraint"
    #: Arrays of the file spec by name, their shapes in the symbol ``d`` (:mod:`.spec`).
    spec_arrays: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        CONSTRAINTS.register_subclass(cls, Constraint)

    # ---- file spec (docs/file_format.md, :mod:`gtvmodel.terms.spec`)
    def to_spec(self) -> TermSpec:
        """The constraint's kind, parameters and arrays for a problem file; library
        constraints only (:class:`UnsupportedError` otherwise)."""
        raise UnsupportedError(f"constraint {self!r} cannot be saved (symbolic constraints have "
                               "no file format)")

    @classmethod
    def from_spec(cls, spec: TermSpec) -> Constraint:
        """The constraint that :meth:`to_spec` described (header values checked strictly,
        :class:`~gtvmodel.FileFormatError`; arrays by the constructor)."""
        raise UnsupportedError(f"{cls.__name__} has no file spec")

    @property
    def dim(self) -> int | None:
        """Required parameter dimension (None: any)."""
        return None

    def constraints(self, x: cp.Expression) -> list[cp.Constraint]:
        """CVXPY constraints expressing ``x in C`` for a ``(d,)`` variable or ``(k, d)`` stack."""
        raise NotImplementedError

    def violation(self, w: np.ndarray) -> float:
        """A nonnegative measure of how far ``w`` is from satisfying the constraint (0: inside).

        Never NaN: a point with NaN or infinite entries, or outside the domain of an expression
        in the constraint, has violation ``+inf``."""
        raise NotImplementedError

    def inf_radius(self, d: int) -> float:
        """An upper bound of ``||w||_inf`` over ``C`` in ``R^d`` (``inf`` if unbounded or
        unknown, e.g. for symbolic constraints)."""
        return float("inf")

    def halfspaces(self, d: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Linear inequalities ``G w <= h`` implied by ``C`` (``(J, d)``, ``(J,)``), or None.
        Used by the certified radii (the level-set polyhedron of the certificate)."""
        return None

    # ---- stacking: how :meth:`gtvmodel.declaration.ModelDeclaration.structure` groups C_i
    def stack_key(self) -> Hashable:
        """Constraints with equal keys are stacked together by :meth:`stack` (a class, or a
        class with its parameters, e.g. ``(NormBall, p)``)."""
        return type(self)  # type: ignore[return-value]  # classes are hashable

    @classmethod
    def stack(cls, positions: np.ndarray, items: Sequence[Constraint], d: int
              ) -> tuple[str, Any]:
        """``(field, value)`` of :class:`~gtvmodel.declaration.ModelStructure` holding the
        constraints ``items`` of one stack key at node ``positions`` (ascending, repeated when
        a node has several)."""
        raise ConstraintError(f"{cls.__name__} constraints cannot be stacked")

    def coordinate_bounds(self, d: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``(lo, hi)`` if ``C`` is the coordinate box ``lo <= w <= hi`` in ``R^d``, else None
        (a box composes with a coordinate-separable prox by clipping)."""
        return None

    def ball(self) -> tuple[float, float] | None:
        """``(p, radius)`` if ``C`` is the norm ball ``||w||_p <= radius``, else None."""
        return None

    # ---- Euclidean projection (issue 5, node updates of Algorithm 1)
    def project(self, w: Any) -> np.ndarray:
        """Euclidean projection ``P_C(w)`` of a ``(d,)`` vector or each row of a ``(k, d)``
        stack.  Library constraints have closed forms; symbolic ones raise."""
        raise UnsupportedError(f"{self!r} has no library projection")

    # ---- support function (issue 3): the conjugate of the indicator iota_C
    def support(self, s: Any) -> float | np.ndarray:
        """``sigma_C(s) = sup_{w in C} s^T w`` (``+inf`` where unbounded); ``s`` is ``(d,)``
        or a ``(k, d)`` stack (then one value per row)."""
        raise ConstraintError(f"{self!r} has no library support function")

    def support_expression(self, s: cp.Expression) -> tuple[cp.Expression, list[cp.Constraint]]:
        """CVXPY form ``(cost, constraints)`` of ``sum_rows sigma_C(s_k)`` for a ``(d,)`` or
        ``(k, d)`` affine expression."""
        raise ConstraintError(f"{self!r} has no library support function")


class Box(Constraint):
    """``lo <= w <= hi`` entrywise; ``lo``/``hi`` scalars or ``(d,)`` vectors, ``+-inf`` allowed.

    Support function (the conjugate of ``iota_C`` in the dual (24), docs/conventions.md):
    ``sigma_C(s) = sum_j max(s_j lo_j, s_j hi_j)``.

    Parameters
    ----------
    lo, hi : float or array_like, shape (d,)
        Lower and upper bounds (``-inf``/``+inf`` for none), scalars or one per coordinate.

    Raises
    ------
    DataError
        A bound is not numeric, contains NaN, is not a scalar or a vector, ``lo`` is ``+inf``
        or ``hi`` is ``-inf``, or ``lo`` and ``hi`` have different shapes.

    Examples
    --------
    >>> import numpy as np, gtvmodel as gm
    >>> box = gm.Box(-1.0, 1.0)
    >>> box.project([2.0, -0.5])  # P_C(w): clipping
    array([ 1. , -0.5])
    >>> box.support([1.0, -2.0]), box.violation(np.array([2.0, -0.5]))
    (3.0, 1.0)
    """

    kind = "box"
    spec_arrays = {"lo": ("d",), "hi": ("d",)}

    def __init__(self, lo: Any = -np.inf, hi: Any = np.inf):
        try:
            lo_a = np.array(lo, dtype=float)
            hi_a = np.array(hi, dtype=float)
        except (TypeError, ValueError):
            raise DataError(f"Box: bounds must be numeric, got lo={lo!r}, hi={hi!r}") from None
        for name, a in (("lo", lo_a), ("hi", hi_a)):
            if a.ndim > 1:
                raise DataError(f"Box: {name} must be a scalar or a vector, got shape {a.shape}")
            if np.isnan(a).any():
                raise DataError(f"Box: {name} contains NaN")
        if np.isposinf(lo_a).any() or np.isneginf(hi_a).any():
            raise DataError("Box: lo may not be +inf and hi may not be -inf (empty box)")
        if lo_a.ndim == 1 and hi_a.ndim == 1 and lo_a.shape != hi_a.shape:
            raise DataError(f"Box: lo has shape {lo_a.shape} but hi has shape {hi_a.shape}")
        if np.any(lo_a > hi_a):
            raise DataError("Box: lo > hi in some coordinate (the box is empty)")
        self.lo, self.hi = lo_a, hi_a

    @property
    def dim(self) -> int | None:
        """``d`` when a bound is a ``(d,)`` vector, None for scalar bounds (any ``d``)."""
        for a in (self.lo, self.hi):
            if a.ndim == 1:
                return int(a.shape[0])
        return None

    def bounds(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)`` broadcast to ``(d,)``."""
        return np.broadcast_to(self.lo, (d,)).copy(), np.broadcast_to(self.hi, (d,)).copy()

    @classmethod
    def stack(cls, positions: np.ndarray, items: Sequence[Any], d: int
              ) -> tuple[str, Any]:
        """``("box", (positions, lo, hi))`` with the ``(k, d)`` bounds stacked."""
        bounds = [c.bounds(d) for c in items]
        return "box", (positions, np.vstack([b[0] for b in bounds]),
                       np.vstack([b[1] for b in bounds]))

    def coordinate_bounds(self, d: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``(lo, hi)`` broadcast to ``(d,)``: a box is its own coordinate bounds."""
        return self.bounds(d)

    def constraints(self, x: cp.Expression) -> list[cp.Constraint]:
        """``x >= lo`` and ``x <= hi`` on the coordinates with finite bounds."""
        d = x.shape[-1]
        lo, hi = self.bounds(d)
        out = []
        if np.isfinite(lo).any():
            k = np.isfinite(lo)
            out.append((x[..., k] if not k.all() else x) >= lo[k])
        if np.isfinite(hi).any():
            k = np.isfinite(hi)
            out.append((x[..., k] if not k.all() else x) <= hi[k])
        return out

    def violation(self, w: np.ndarray) -> float:
        """``max_j max(lo_j - w_j, w_j - hi_j, 0)``; ``+inf`` for non-finite ``w``.  A
        difference of two distinct floats is never rounded to 0, so any point outside the box
        has a positive violation."""
        w = np.asarray(w, dtype=float)
        if not np.isfinite(w).all():
            return float("inf")
        lo, hi = self.bounds(w.shape[-1])
        with np.errstate(over="ignore", invalid="ignore"):
            v = max(np.max(lo - w, initial=0.0), np.max(w - hi, initial=0.0))
        return float("inf") if np.isnan(v) else float(v)

    def inf_radius(self, d: int) -> float:
        """``max_j max(|lo_j|, |hi_j|)`` (exact; ``inf`` if a bound is infinite)."""
        lo, hi = self.bounds(d)
        return float(np.maximum(np.abs(lo), np.abs(hi)).max(initial=0.0))

    def halfspaces(self, d: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``w_j <= hi_j`` and ``-w_j <= -lo_j`` for the finite bounds."""
        lo, hi = self.bounds(d)
        eye = np.eye(d)
        G = np.vstack([eye[np.isfinite(hi)], -eye[np.isfinite(lo)]])
        h = np.concatenate([hi[np.isfinite(hi)], -lo[np.isfinite(lo)]])
        return (G, h) if h.size else None

    def project(self, w: Any) -> np.ndarray:
        """``P_C(w)``: entrywise clipping to ``[lo, hi]`` (rows of a stack alike)."""
        w = np.asarray(w, dtype=float)
        lo, hi = self.bounds(w.shape[-1])
        return Box.project_rows(w, lo, hi)

    @staticmethod
    def project_rows(W: Any, lo: Any, hi: Any) -> Any:
        """Projection onto ``[lo, hi]`` (entrywise clipping; bounds broadcast to ``W``; any
        array namespace, the bounds beside ``W``)."""
        xp = _xp.namespace(W)
        return xp.minimum(xp.maximum(W, lo), hi)

    def support(self, s: Any) -> float | np.ndarray:
        """``sigma_C(s) = sum_j max(s_j lo_j, s_j hi_j)`` (docs/conventions.md), ``+inf`` where an
        infinite bound meets a coefficient of the wrong sign; one value per row of a ``(k, d)``
        stack."""
        s = np.asarray(s, dtype=float)
        lo, hi = self.bounds(s.shape[-1])
        out = Box.support_rows(np.atleast_2d(s), lo, hi)
        return float(out[0]) if s.ndim == 1 else out

    def support_expression(self, s: cp.Expression) -> tuple[cp.Expression, list[cp.Constraint]]:
        """CVXPY form of ``sum_k sigma_C(s_k)``: ``sum max(s_j lo_j, s_j hi_j)`` over the finite
        bounds, with sign constraints on ``s_j`` where a bound is infinite."""
        lo, hi = self.bounds(s.shape[-1])
        return Box.support_rows_expression(s, lo, hi)

    @staticmethod
    def _support_coeffs(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, ...]:
        """Finite stand-ins ``(lo', hi')`` and the sign conditions of ``sigma_box``: with an
        infinite bound the support is finite only for ``s_j`` of one sign (``hi = +inf`` needs
        ``s_j <= 0``, ``lo = -inf`` needs ``s_j >= 0``, both: ``s_j = 0``)."""
        flo, fhi = np.isfinite(lo), np.isfinite(hi)
        lo_f = np.where(flo, lo, np.where(fhi, hi, 0.0))
        hi_f = np.where(fhi, hi, lo_f)
        return lo_f, hi_f, ~fhi, ~flo  # need_nonpos, need_nonneg

    @staticmethod
    def support_rows(S: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """``sigma_[lo, hi](s) = sum_j max(s_j lo_j, s_j hi_j)`` row-wise (bounds broadcast
        to ``S``; ``+inf`` where an infinite bound meets an entry of the wrong sign)."""
        lo_f, hi_f, nonpos, nonneg = Box._support_coeffs(np.broadcast_to(lo, S.shape),
                                                         np.broadcast_to(hi, S.shape))
        val = np.maximum(S * lo_f, S * hi_f).sum(axis=-1)
        bad = ((nonpos & (S > 0)) | (nonneg & (S < 0))).any(axis=-1)
        return np.where(bad, np.inf, val)

    @staticmethod
    def support_rows_expression(S: cp.Expression, lo: np.ndarray, hi: np.ndarray
                                ) -> tuple[cp.Expression, list[cp.Constraint]]:
        """CVXPY form of :meth:`support_rows` summed over rows."""
        lo_f, hi_f, nonpos, nonneg = Box._support_coeffs(np.broadcast_to(lo, S.shape),
                                                         np.broadcast_to(hi, S.shape))
        cost = cp.sum(cp.maximum(cp.multiply(lo_f, S), cp.multiply(hi_f, S)))
        cons = []
        if nonpos.any():
            cons.append(cp.multiply(nonpos.astype(float), S) <= 0)
        if nonneg.any():
            cons.append(cp.multiply(nonneg.astype(float), S) >= 0)
        return cost, cons

    @staticmethod
    def support_domain_projection(S: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Clip ``S`` into the domain of :meth:`support_rows` (sign conditions)."""
        _, _, nonpos, nonneg = Box._support_coeffs(np.broadcast_to(lo, S.shape),
                                                   np.broadcast_to(hi, S.shape))
        # both bounds infinite: the domain is {0} (an unbounded coordinate)
        return np.where(nonpos & nonneg, 0.0, np.where(
            nonpos, np.minimum(S, 0.0), np.where(nonneg, np.maximum(S, 0.0), S)))

    def to_spec(self) -> TermSpec:
        """``{"kind": "box"}`` and the bounds ``lo``, ``hi`` as given (scalars or ``(d,)``;
        ``+-inf`` allowed); a file stores them broadcast to ``(d,)`` (``spec_arrays``)."""
        return TermSpec(self.kind, {}, {"lo": self.lo, "hi": self.hi})

    @classmethod
    def from_spec(cls, spec: TermSpec) -> Box:
        """``Box(lo, hi)`` (NaN, ``lo = +inf``, ``hi = -inf``, ``lo > hi`` refused)."""
        spec.check_keys()
        return cls(spec.array("lo"), spec.array("hi"))

    def __repr__(self) -> str:
        return f"Box(lo={self.lo.tolist()}, hi={self.hi.tolist()})"


class NonNeg(ParameterFree, Constraint):
    """``w >= 0`` entrywise (file spec ``{"kind": "nonneg"}``).

    Support function ``sigma_C(s) = iota{s <= 0}`` (docs/conventions.md).

    Examples
    --------
    >>> import numpy as np, gtvmodel as gm
    >>> c = gm.NonNeg()
    >>> c.project([2.0, -0.5]), c.violation(np.array([2.0, -0.5]))
    (array([2., 0.]), 0.5)
    >>> c.support([-1.0, -2.0]), c.support([1.0, 0.0])
    (0.0, inf)
    """

    kind = "nonneg"

    @classmethod
    def stack(cls, positions: np.ndarray, items: Sequence[Constraint], d: int
              ) -> tuple[str, Any]:
        """``("nonneg", positions)``."""
        return "nonneg", positions

    def coordinate_bounds(self, d: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``(0, +inf)`` in every coordinate."""
        return np.zeros(d), np.full(d, np.inf)

    def constraints(self, x: cp.Expression) -> list[cp.Constraint]:
        """``x >= 0``."""
        return [x >= 0]

    def violation(self, w: np.ndarray) -> float:
        """``max(-min_j w_j, 0)``; ``+inf`` for non-finite ``w``."""
        w = np.asarray(w, dtype=float)
        if not np.isfinite(w).all():
            return float("inf")
        return float(max(-np.min(w, initial=0.0), 0.0))

    def halfspaces(self, d: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``-w <= 0``."""
        return -np.eye(d), np.zeros(d)

    def project(self, w: Any) -> np.ndarray:
        """``P_C(w) = max(w, 0)`` entrywise."""
        return NonNeg.project_rows(np.asarray(w, dtype=float))

    @staticmethod
    def project_rows(W: np.ndarray) -> np.ndarray:
        """Projection onto the nonnegative orthant: ``max(W, 0)``."""
        return np.maximum(W, 0.0)

    def support(self, s: Any) -> float | np.ndarray:
        """``sigma(s) = 0`` if ``s <= 0`` entrywise, else ``+inf``."""
        s = np.asarray(s, dtype=float)
        out = np.where((s > 0).any(axis=-1), np.inf, 0.0)
        return float(out) if s.ndim == 1 else out

    def support_expression(self, s: cp.Expression) -> tuple[cp.Expression, list[cp.Constraint]]:
        """``sigma_C(s) = 0`` subject to ``s <= 0`` (the cone's polar)."""
        return cp.Constant(0.0), [s <= 0]

    def __repr__(self) -> str:
        return "NonNeg()"


class NormBall(Constraint):
    """``||w||_p <= radius`` for ``p in [1, inf]``; the support function is ``radius ||s||_q``.

    Parameters
    ----------
    radius : float
        The radius ``r >= 0``.
    p : float, default 2
        The norm's exponent ``p >= 1`` (``numpy.inf`` allowed).

    Raises
    ------
    ParameterError
        ``radius`` negative, infinite or NaN.
    DataError
        ``p`` is NaN or below 1.

    Examples
    --------
    >>> import numpy as np, gtvmodel as gm
    >>> ball = gm.NormBall(1.0)  # p = 2
    >>> ball.project([3.0, 4.0])
    array([0.6, 0.8])
    >>> round(ball.support([3.0, 4.0]), 4), round(ball.violation(np.array([3.0, 4.0])), 4)
    (5.0, 4.0)
    >>> l1 = gm.NormBall(2.0, p=1)
    >>> np.round(l1.project([3.0, 4.0]), 4), round(l1.support([3.0, 4.0]), 4)  # 2 ||s||_inf
    (array([0.5, 1.5]), 8.0)
    """

    kind = "normball"

    def __init__(self, radius: float, p: float = 2):
        self.radius = check_scalar(radius, "radius", min_val=0.0, where="NormBall")
        self.p = check_scalar(p, "p", min_val=1.0, finite=False, where="NormBall",
                              error=DataError)

    def stack_key(self) -> Hashable:
        """``(NormBall, p)``: balls of one exponent are stacked together."""
        return (NormBall, self.p)

    @classmethod
    def stack(cls, positions: np.ndarray, items: Sequence[Any], d: int
              ) -> tuple[str, Any]:
        """``("normball", {p: (positions, radii)})`` (one exponent ``p`` per stack key)."""
        return "normball", {items[0].p: (positions, np.array([c.radius for c in items]))}

    def ball(self) -> tuple[float, float] | None:
        """``(p, radius)``."""
        return self.p, self.radius

    def constraints(self, x: cp.Expression) -> list[cp.Constraint]:
        """``||x||_p <= radius`` (row-wise for a ``(k, d)`` stack; power cones for ``p`` other
        than 1, 2, inf, :func:`gtvmodel._cvx.norm_rows_le`)."""
        radii = self.radius if x.ndim == 1 else np.full(x.shape[0], self.radius)
        return norm_rows_le(x, radii, self.p)

    def violation(self, w: np.ndarray) -> float:
        """``max(||w||_p - radius, 0)`` with the stable norm of :mod:`gtvmodel._norms`, taken
        as a proven upper bound (:func:`~gtvmodel._norms.norm_rows_upper`): a point outside
        the ball is never reported inside, whatever ``p`` (``1.0001``, ``1e6``) and the
        magnitudes; a point within a few ulps of the sphere may show a violation of a few ulps
        of the radius.  ``+inf`` for non-finite ``w``."""
        w = np.asarray(w, dtype=float).ravel()
        if not np.isfinite(w).all():
            return float("inf")
        nrm = float(norm_rows_upper(w, self.p))
        return float(max(nrm - self.radius, 0.0))

    def inf_radius(self, d: int) -> float:
        """``||w||_inf <= ||w||_p <= radius``."""
        return float(self.radius)

    def project(self, w: Any) -> np.ndarray:
        """``P_C(w)``: the Euclidean projection onto ``{||w||_p <= radius}``
        (:meth:`project_rows`)."""
        w = np.asarray(w, dtype=float)
        W = np.atleast_2d(w)
        out = NormBall.project_rows(W, np.full(W.shape[0], self.radius), self.p)
        return out[0] if w.ndim == 1 else out

    @staticmethod
    def project_rows(W: np.ndarray, radii: Any, p: float) -> np.ndarray:
        """Row-wise projection onto ``{||w_k||_p <= r_k}``
        (:func:`gtvmodel._norms.project_norm_ball`: closed forms for ``p = 1, 2, inf``,
        a vectorized Newton iteration otherwise)."""
        return project_norm_ball(W, radii, p)

    @property
    def q(self) -> float:
        """The dual exponent, ``1/p + 1/q = 1`` (:func:`gtvmodel._norms.dual_exponent`)."""
        return dual_exponent(self.p)

    def support(self, s: Any) -> float | np.ndarray:
        """``sigma(s) = radius ||s||_q``, as an upper bound that is tight to a few ulps.

        The norm is the stable one of :mod:`gtvmodel._norms` raised by its rounding bound
        (:func:`~gtvmodel._norms.norm_rows_upper`) and the product is rounded up: a conjugate
        that enters a dual value must never be under-estimated (docs/conventions.md)."""
        s = np.asarray(s, dtype=float)
        S = np.atleast_2d(s)
        out = mul_up(self.radius, norm_rows_upper(S, self.q))
        out = np.where(np.isnan(out), np.inf, out)  # NaN entries: no finite bound
        return float(out[0]) if s.ndim == 1 else out

    def support_expression(self, s: cp.Expression) -> tuple[cp.Expression, list[cp.Constraint]]:
        """CVXPY form of ``sum_k radius ||s_k||_q`` (``q`` dual to ``p``)."""
        return NormBall.support_rows_expression(s, self.radius, self.p)

    @staticmethod
    def support_rows_expression(S: cp.Expression, radii: Any, p: float
                                ) -> tuple[cp.Expression, list[cp.Constraint]]:
        """``sum_k r_k ||S_k||_q`` (``q`` dual to ``p``) for ``(k, d)`` or ``(d,)`` ``S``."""
        q = dual_exponent(p)
        if S.ndim == 1:
            return float(radii) * cp.norm(S, "inf" if np.isinf(q) else q), []  # type: ignore[arg-type]
        r = np.broadcast_to(np.asarray(radii, dtype=float), (S.shape[0],))
        T, cons = norm_rows_epigraph(S, q)
        return r @ T, cons

    def to_spec(self) -> TermSpec:
        """``{"kind": "normball", "radius": r, "p": p}`` (``p = inf`` as ``"inf"``)."""
        return TermSpec(self.kind, {"radius": self.radius, "p": json_number(self.p)})

    @classmethod
    def from_spec(cls, spec: TermSpec) -> NormBall:
        """``NormBall(radius, p)``; ``p`` may be omitted (2)."""
        spec.check_keys(required=("radius",), optional=("p",))
        return cls(spec.real("radius"), p=spec.exponent("p", 2.0))

    def __repr__(self) -> str:
        return f"NormBall(radius={self.radius:g}, p={self.p:g})"


class SymbolicConstraint(Constraint):
    """A DCP CVXPY constraint on one node's variable.

    Created by :meth:`gtvmodel.GTVModel.add_constraint`; it has no closed-form projection or
    support function (the dual and the certificate conjugate it through CVXPY's conic form,
    :mod:`gtvmodel.duality.conic`).

    Parameters
    ----------
    constraint : cvxpy.Constraint
        A DCP constraint on ``w_i``.
    variable : cvxpy.Variable
        The node's variable ``w_i`` (``model.var(node)``); the constraint may involve no other
        variable.
    node : hashable, optional
        The node's label, named in error messages.

    Raises
    ------
    ConstraintError
        ``constraint`` is not a CVXPY constraint, not DCP, or does not involve ``variable``
        alone.

    Examples
    --------
    >>> import cvxpy as cp, numpy as np, gtvmodel as gm
    >>> w = cp.Variable(2)
    >>> c = gm.SymbolicConstraint(w[0] + w[1] <= 1, w)
    >>> c.violation(np.array([1.0, 1.0])), c.violation(np.array([0.0, 0.5]))
    (1.0, 0.0)
    """

    kind = "symbolic"

    def __init__(self, constraint: cp.Constraint, variable: cp.Variable, node: Any = None):
        where = f"node {node!r}" if node is not None else "symbolic constraint"
        if not isinstance(constraint, cp.constraints.constraint.Constraint):
            raise ConstraintError(
                f"{where}: expected a CVXPY constraint, got {type(constraint).__name__}"
            )
        if not constraint.is_dcp():
            raise ConstraintError(f"{where}: constraint {constraint} is not DCP")
        check_own_variable(constraint, variable, node)
        if not constraint.variables():
            raise ConstraintError(f"{where}: constraint {constraint} does not involve the node's "
                                  "variable")
        self.constraint = constraint
        self.variable = variable
        self.node = node

    @property
    def dim(self) -> int:
        """``d``, the size of the node's variable."""
        return int(self.variable.size)

    @classmethod
    def stack(cls, positions: np.ndarray, items: Sequence[Constraint], d: int
              ) -> tuple[str, Any]:
        """``("symbolic_constraints", distinct positions)`` (compiled one by one, as given)."""
        return "symbolic_constraints", sorted(set(positions.tolist()))

    def constraints(self, x: cp.Expression) -> list[cp.Constraint]:
        """The user's constraint itself; only in its own node's variable (:class:`ConstraintError`
        for another ``x``)."""
        if x is not self.variable:
            raise ConstraintError(
                f"node {self.node!r}: a symbolic constraint is stated in its node's variable "
                "and cannot be re-expressed in another variable"
            )
        return [self.constraint]

    def violation(self, w: np.ndarray) -> float:
        """The largest residual of the constraint at ``w``; ``+inf`` outside the domain of
        any expression in it (e.g. ``inv_pos(x) <= 3`` at ``x = -0.5``, where CVXPY's own
        residual is 0), for non-finite ``w``, or where the residual is undefined
        (:func:`gtvmodel._cvx.checked_residual`)."""
        w = np.asarray(w, dtype=float)
        if not np.isfinite(w).all():
            return float("inf")
        return checked_residual(self.constraint, self.variable, w)

    def to_spec(self) -> TermSpec:
        """Symbolic constraints have no file format (:class:`UnsupportedError`)."""
        raise UnsupportedError("symbolic constraints cannot be saved (they have no file format)")

    def __repr__(self) -> str:
        return f"SymbolicConstraint({self.constraint})"

