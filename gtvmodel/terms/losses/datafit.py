"""Data-fit losses ``L(w) = (1/m) sum_r ell(x_r^T w, y_r)``: :class:`DataFitLoss` composes a
row loss (its ``_ell*`` row formulas, written once in numpy and CVXPY) into a loss.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import cvxpy as cp
import numpy as np

from ... import _xp
from ..._cvx import bounds_constraints
from ..._validate import (
    as_finite_array,
    check_binary_labels,
    check_vector,
)
from ...errors import DataError, UnsupportedError
from ..spec import TermSpec
from .base import Loss


class RowLoss(ABC):
    """The row loss ``ell(t; y, p)`` of a data-fit loss, ``t = x_r^T w``, label ``y_r``, row
    parameter ``p_r`` (Huber's ``M``; None for most): its formulas, each written once, in
    numpy and CVXPY, elementwise over the rows.

    Required (abstract: a row class without one cannot be instantiated): ``ell`` (``_ell``),
    its CVXPY form (``_ell_cvx``), the conjugate ``ell*`` (``_ell_conj``, on its domain
    :meth:`_ell_conj_bounds`) and its CVXPY form (``_ell_conj_cvx``).  Optional: the
    derivatives ``ell'``, ``ell''`` (``_ell_d1``, ``_ell_d2``; differentiable rows), the
    curvature constants, affine minorants and a residual growth bound (certified radii).  A
    :class:`DataFitLoss` names its row as ``row = SquaredRow()``.
    """

    #: sup_t ell''(t) (for smooth row losses); beta = ell_curvature * lambda_max(X^T X) / m.
    ell_curvature: ClassVar[float] = float("inf")
    #: sup_t |ell'''(t)| (inf: ``ell''`` not Lipschitz): bounds the Lipschitz constant of the
    #: Hessians, Newton's quadratic-convergence stop in :func:`newton_minimize`.
    ell_d3_max: ClassVar[float] = float("inf")
    #: inf_t ell''(t) (a global lower bound, 0 for losses that flatten out).
    ell_curvature_min: ClassVar[float] = 0.0
    @staticmethod
    @abstractmethod
    def _ell(t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray: ...

    @staticmethod
    @abstractmethod
    def _ell_cvx(t: cp.Expression, y: np.ndarray, p: Any) -> cp.Expression: ...

    @staticmethod
    def _ell_d1(t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        raise UnsupportedError("row loss is not differentiable")

    @staticmethod
    def _ell_d2(t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        """Second derivative (generalized, for piecewise quadratic rows) of ``ell`` in ``t``."""
        raise UnsupportedError("row loss is not twice differentiable")

    @classmethod
    def _ell_d12(cls, t: np.ndarray, y: np.ndarray, p: Any
                 ) -> tuple[np.ndarray, np.ndarray]:
        """``(ell'(t), ell''(t))`` at once (:meth:`_ell_d1`, :meth:`_ell_d2`; a row loss whose
        two derivatives share their costly part computes it once)."""
        return cls._ell_d1(t, y, p), cls._ell_d2(t, y, p)

    # --- the row conjugate ell*(v) (docs/conventions.md table, unscaled row loss), one place each
    @staticmethod
    @abstractmethod
    def _ell_conj(v: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        """``ell*(v)`` on its domain :meth:`_ell_conj_bounds` (values outside are not used)."""

    @staticmethod
    @abstractmethod
    def _ell_conj_cvx(v: cp.Expression, y: np.ndarray, p: Any
                      ) -> cp.Expression: ...

    @staticmethod
    def _ell_conj_bounds(y: np.ndarray, p: Any) -> tuple[Any, Any]:
        """Interval domain ``lo <= v <= hi`` of ``ell*`` per row (``+-inf``: unbounded)."""
        return -np.inf, np.inf

    @staticmethod
    def _linear_minorants(y: np.ndarray, p: Any
                          ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Row-wise affine minorants ``ell(t, y_r) >= a_r t + b_r``, as ``[(a, b), ...]``;
        with ``sum_r ell <= level`` (every row ``>= 0``) each row gives the half-space
        ``a_r x_r^T w <= level - b_r`` (the level-set polyhedron of the certified radii)."""
        return []

    @staticmethod
    def _residual_norm_bound(level: np.ndarray, p_min: np.ndarray, p_sq: np.ndarray
                             ) -> np.ndarray:
        """A bound on ``||X w - y||_2`` at every ``w`` with ``sum_r ell(x_r^T w, y_r) <=
        level`` (per node; ``p_min``/``p_sq``: the smallest row parameter and the sum of its
        squares); ``inf`` when the row loss does not grow (logistic, hinge)."""
        return np.full(np.shape(level), np.inf)

    @classmethod
    def ell_conjugate_magnitude(cls, v: np.ndarray, y: np.ndarray, p: Any
                                ) -> np.ndarray:
        """A bound of the sum of the absolute summands of ``ell*(v_r)`` per row, for rounding
        bounds: ``|ell*(v)| + |v y| + v^2/4`` covers the two terms of the squared and Huber
        rows (``v y + v^2/4``), which cancel, and the ``+ 1`` the entropy terms of the
        logistic rows (each at most ``log 2`` in absolute value)."""
        conj = cls.ell_conjugate(v, y, p)
        xp = _xp.namespace(v)
        return xp.abs(conj) + xp.abs(v * y) + 0.25 * v**2 + 1.0

    @classmethod
    def ell_conjugate(cls, v: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        """Row conjugates ``ell*(v_r)`` in numpy, ``+inf`` outside the domain.

        The mean loss has ``L*(s) = min { sum_r (1/m) ell*(v_r) : X^T v / m = s }``
        (``mu_r = v_r / m`` in docs/conventions.md's table)."""
        lo, hi = cls._ell_conj_bounds(y, p)
        if _xp.is_numpy(v):
            out = np.asarray(cls._ell_conj(v, y, p), dtype=float)
            return np.where((v < lo) | (v > hi), np.inf, out)
        # tensors (the squared rows' device certificate): _ell_conj written for both
        return _xp.namespace(v).where((v < lo) | (v > hi), np.inf, cls._ell_conj(v, y, p))


class DataFitLoss(Loss):
    """``L(w) = (1/m) sum_r ell(x_r^T w, y_r)`` over the node's samples ``(X, y)``.

    ``X`` is ``(m, d)``; ``y`` is ``(m,)`` or an ``(m, 1)`` column (flattened).

    A data-fit loss is a row loss composed into this class: a subclass names its
    :class:`RowLoss` (``row = SquaredRow()``), its ``kind`` and its
    :class:`~gtvmodel.terms.losses.facts.LossFacts`; the row formulas are reached through
    the class as ``cls._ell``, ``cls._ell_d1``, ... (what the kernels and batches call).
    ``_row_param`` is an optional per-row constant (Huber's ``M``).
    """

    #: The row loss ``ell`` (:class:`RowLoss`): its formulas and constants.
    row: ClassVar[RowLoss]

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__ and not isinstance(getattr(cls, "row", None), RowLoss):
            raise TypeError(f"{cls.__name__}: a data-fit loss names its row loss, "
                            "row = SomeRow() (a RowLoss instance)")
    #: Whether labels must be +-1.
    binary_labels: ClassVar[bool] = False
    spec_arrays = {"X": ("m", "d"), "y": ("m",)}

    def __init__(self, X: Any, y: Any, *, l1: float = 0.0, l2: float = 0.0):
        super().__init__(l1=l1, l2=l2)
        self.X, self.y = self.check_samples(X, y)

    @classmethod
    def check_samples(cls, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(X, y)`` validated as the constructor takes them: ``X`` a finite non-empty ``(m,
        d)`` matrix, ``y`` finite ``(m,)`` or ``(m, 1)`` (flattened), binary labels converted
        to ``-1``/``+1`` (:func:`check_binary_labels`); :class:`DataError` naming the class."""
        owner = cls.__name__
        X = as_finite_array(X, "X", owner=owner)
        if X.ndim == 1:
            raise DataError(
                f"{owner}: X must be a 2-D (m, d) matrix, got a 1-D array of length {X.shape[0]} "
                "(for d = 1 pass X.reshape(-1, 1); for one sample pass X.reshape(1, -1))"
            )
        if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
            raise DataError(f"{owner}: X must be a non-empty (m, d) matrix, got shape {X.shape}")
        y = as_finite_array(y, "y", owner=owner)
        if y.ndim == 0:
            y = y[None]
        if y.ndim == 2 and y.shape[1] == 1:  # a column vector (m, 1), as from X[:, [j]]
            y = y[:, 0]
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise DataError(
                f"{owner}: y must have shape ({X.shape[0]},) or ({X.shape[0]}, 1) to match X of "
                f"shape {X.shape}, got {y.shape}"
            )
        if cls.binary_labels:  # {-1, +1}, {0, 1} or booleans, stored as -1/+1
            y = check_binary_labels(y, "y", where=owner)
        return X, y

    @classmethod
    def from_groups(cls, X: np.ndarray, y: np.ndarray, ms: np.ndarray,
                    **options: Any) -> list[Loss]:
        """One loss per consecutive row group (see :meth:`Loss.from_groups`), validated once:
        the stacked samples by :meth:`check_samples` (binary labels: one label set for all
        rows), the options by one constructor call; every loss then shares that first loss's
        options and holds views ``X[rows]``, ``y[rows]`` of the stack (a subclass deriving
        attributes from its samples in ``__init__`` overrides this)."""
        X, y = cls.check_samples(X, y)
        ends = np.cumsum(ms)
        if ends.size == 0:
            return []
        first = cls._from_samples(X[:ends[0]], y[:ends[0]], options)
        shared = {k: v for k, v in first.__dict__.items() if k not in ("X", "y")}
        out: list[Loss] = [first]
        new = object.__new__
        for m, b in zip(ms[1:].tolist(), ends[1:].tolist(), strict=True):
            loss = new(cls)
            loss.__dict__.update(shared, X=X[b - m:b], y=y[b - m:b])
            out.append(loss)
        return out

    @property
    def m(self) -> int:
        """Number of samples ``m_i``."""
        return int(self.X.shape[0])

    @property
    def dim(self) -> int:
        """``d``, the number of features (columns of ``X``)."""
        return int(self.X.shape[1])

    # --- prediction: y_hat = x^T w (regression), sign(x^T w) in {-1, +1} (binary labels)
    score_metric: ClassVar[str | None] = "mse"

    def samples(self) -> tuple[np.ndarray, np.ndarray]:
        """The node's samples ``(X, y)`` (``y`` as stored: ``-1``/``+1`` for binary labels)."""
        return self.X, self.y

    @property
    def num_features(self) -> int:
        """``p = d``: one weight per feature."""
        return self.dim

    def decision_rows(self, X: np.ndarray, W: np.ndarray) -> np.ndarray:
        """``t_r = x_r^T w_r`` for every row (one ``einsum``)."""
        return np.einsum("rd,rd->r", X, W)

    def predict_rows(self, X: np.ndarray, W: np.ndarray) -> np.ndarray:
        """``x_r^T w_r`` (regression) or, for binary labels, ``+1`` where ``x_r^T w_r >= 0``
        and ``-1`` elsewhere (the stored label convention)."""
        t = self.decision_rows(X, W)
        return np.where(t >= 0.0, 1.0, -1.0) if self.binary_labels else t

    def labels(self, y: Any, name: str = "y") -> np.ndarray:
        """Real targets, or binary labels converted to ``-1``/``+1`` as the constructor does
        (``{0, 1}`` and booleans accepted)."""
        y = check_vector(y, name, where=type(self).__name__)
        return check_binary_labels(y, name, where=type(self).__name__) if self.binary_labels else y

    def _row_param(self) -> np.ndarray | None:
        return None

    # --- the row loss, delegated (the kernels and batches call the class: ``cls._ell_d1``)
    @classmethod
    def _ell(cls, t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return cls.row._ell(t, y, p)

    @classmethod
    def _ell_cvx(cls, t: cp.Expression, y: np.ndarray, p: Any) -> cp.Expression:
        return cls.row._ell_cvx(t, y, p)

    @classmethod
    def _ell_d1(cls, t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return cls.row._ell_d1(t, y, p)

    @classmethod
    def _ell_d2(cls, t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return cls.row._ell_d2(t, y, p)

    @classmethod
    def _ell_d12(cls, t: np.ndarray, y: np.ndarray, p: Any
                 ) -> tuple[np.ndarray, np.ndarray]:
        return cls.row._ell_d12(t, y, p)

    @classmethod
    def _ell_conj(cls, v: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return cls.row._ell_conj(v, y, p)

    @classmethod
    def _ell_conj_cvx(cls, v: cp.Expression, y: np.ndarray, p: Any
                      ) -> cp.Expression:
        return cls.row._ell_conj_cvx(v, y, p)

    @classmethod
    def _ell_conj_bounds(cls, y: np.ndarray, p: Any) -> tuple[Any, Any]:
        return cls.row._ell_conj_bounds(y, p)

    @classmethod
    def _linear_minorants(cls, y: np.ndarray, p: Any
                          ) -> list[tuple[np.ndarray, np.ndarray]]:
        return cls.row._linear_minorants(y, p)

    @classmethod
    def _residual_norm_bound(cls, level: np.ndarray, p_min: np.ndarray, p_sq: np.ndarray
                             ) -> np.ndarray:
        return cls.row._residual_norm_bound(level, p_min, p_sq)

    @classmethod
    def ell_conjugate_magnitude(cls, v: np.ndarray, y: np.ndarray, p: Any
                                ) -> np.ndarray:
        """:meth:`RowLoss.ell_conjugate_magnitude` of :attr:`row`."""
        return cls.row.ell_conjugate_magnitude(v, y, p)

    @classmethod
    def ell_conjugate(cls, v: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        """:meth:`RowLoss.ell_conjugate` of :attr:`row`."""
        return cls.row.ell_conjugate(v, y, p)

    def _base_conjugate_cvx(self, d: int) -> tuple[cp.Expression, cp.Expression,
                                                   list[cp.Constraint]]:
        v = cp.Variable(self.m, name="v_rows")
        c = 1.0 / self.m
        lo, hi = self._ell_conj_bounds(self.y, self._row_param())
        cons = bounds_constraints(v, lo, hi, self.m)
        cost = c * cp.sum(self._ell_conj_cvx(v, self.y, self._row_param()))
        return c * (self.X.T @ v), cost, cons

    # --- the loss built from the rows
    def _base_expression(self, x: cp.Expression) -> cp.Expression:
        return _rows_sum_cvx(type(self), self.X @ x, self.y, np.full(self.m, 1.0 / self.m),
                             self._row_param())

    def _base_value(self, w: np.ndarray) -> float:
        return float(self._ell(self.X @ w, self.y, self._row_param()).mean())

    def _base_gradient(self, w: np.ndarray) -> np.ndarray:
        return self.X.T @ self._ell_d1(self.X @ w, self.y, self._row_param()) / self.m

    def _base_hessian_bounds(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        if not self.base_smooth:
            raise UnsupportedError(f"{type(self).__name__} is not smooth")
        G = self.X.T @ self.X / self.m
        if not np.isfinite(self.row.ell_curvature):  # no upper bound (exponential rows)
            return self.row.ell_curvature_min * G, np.full_like(G, np.inf)
        return self.row.ell_curvature_min * G, self.row.ell_curvature * G

    def to_spec(self) -> TermSpec:
        """``{"kind": kind, "l1": eta, "l2": kappa}`` and the samples ``X`` (``(m, d)``),
        ``y`` (``(m,)``)."""
        return TermSpec(self.kind, self._regularizer_spec(), {"X": self.X, "y": self.y})

    @classmethod
    def from_spec(cls, spec: TermSpec) -> DataFitLoss:
        """``cls(X, y, l1=eta, l2=kappa)`` (``l1``, ``l2`` may be omitted: 0)."""
        spec.check_keys(optional=("l1", "l2"))
        return cls(spec.array("X"), spec.array("y"), **spec.regularizers())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(m={self.m}, d={self.dim}{self._reg_repr()})"


def _rows_sum_cvx(cls: type[DataFitLoss], t: cp.Expression, y: np.ndarray, c: np.ndarray,
                  p: Any) -> cp.Expression:
    """``sum_r c_r ell(t_r, y_r)`` as one vectorized CVXPY expression."""
    return cp.sum(cp.multiply(c, cls._ell_cvx(t, y, p)))
