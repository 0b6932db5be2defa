"""Node losses ``L_i`` of GTV minimization (16).

Each loss is one object that knows its CVXPY expression, its numeric value, its gradient where
smooth, and its curvature constants (smoothness ``beta_i``, strong convexity ``alpha``).  Data-fit
losses are means over the node's ``m_i`` samples of a separable row loss,
``L(w) = (1/m) sum_r ell(x_r^T w, y_r)``; each row formula is written once (numpy and CVXPY) and
used both for a single node and, stacked into sparse block matrices, for all nodes of one loss
class at once (:class:`LossBatch`).

Every library loss takes optional regularizers ``l1=eta`` (adds ``eta ||w||_1``) and ``l2=kappa``
(adds ``kappa ||w||_2^2``).

Library: :class:`SquaredLoss`, :class:`LogisticLoss` (labels +-1), :class:`HingeLoss` (labels +-1),
:class:`HuberLoss`, :class:`AbsoluteLoss`, :class:`ZeroLoss` (a node without data),
:class:`QuadraticLoss` (convex clustering ``||w - a||^2``).  Arbitrary DCP expressions are wrapped
in :class:`SymbolicLoss` by :meth:`gtvmodel.GTVModel.set_loss`.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar, TypeVar

import cvxpy as cp
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.special import expit, xlogy

from .. import _xp
from .._cvx import bounds_constraints, checked_value
from .._solver import run_solver
from .._validate import (
    as_finite_array,
    check_binary_labels,
    check_option,
    check_own_variable,
    check_scalar,
    check_vector,
)
from ..errors import DataError, LossError, SolverError, UnsupportedError
from ..kernels.boxqp import dual_active_set_prox
from ..kernels.linalg import _grouped_gram
from ..kernels.newton import (
    _newton_predictor,
    _take,
    newton_conjugate_maximizers,
    newton_minimize,
)
from .spec import LOSSES, TermSpec

_EPS = float(np.finfo(float).eps)
_T = TypeVar("_T")

__all__ = [
    "Loss",
    "DataFitLoss",
    "SquaredLoss",
    "LogisticLoss",
    "HingeLoss",
    "HuberLoss",
    "AbsoluteLoss",
    "ZeroLoss",
    "QuadraticLoss",
    "SymbolicLoss",
    "LossBatch",
    "ZeroBatch",
    "QuadraticBatch",
    "SampleBatch",
    "DataFitBatch",
    "SquaredBatch",
    "PiecewiseLinearBatch",
    "dual_active_set_prox",
    "NodePart",
    "ConjugateGroup",
    "smooth_gradients",
]


class Loss(ABC):
    """Base class of node losses ``L_i(w)`` with optional ``l1``/``l2`` regularization.

    Subclasses implement the unregularized part (``_base_*`` methods); the regularizers
    ``eta ||w||_1 + kappa ||w||^2`` are added here once for all losses.

    **File spec** (``docs/file_format.md``, :mod:`gtvmodel.terms.spec`): a library loss sets
    ``kind`` (its unique name in problem files) and implements :meth:`to_spec` (kind, header
    parameters, arrays) and the classmethod :meth:`from_spec` (the identical loss back); it
    lists its arrays in ``spec_arrays`` (``{"X": ("m", "d"), "y": ("m",)}`` for data-fit
    losses, ``{"a": ("d",)}`` for :class:`QuadraticLoss`).  Such a class registers itself in
    :data:`gtvmodel.terms.spec.LOSSES` when it is defined, and is then saved and loaded
    without any change to the codec (:mod:`gtvmodel._files`).  A data-fit loss subclassing
    :class:`DataFitLoss` inherits both hooks and only adds its own parameters (see
    :class:`HuberLoss`).

    Parameters
    ----------
    l1 : float, default 0.0
        ``eta >= 0``: adds ``eta ||w||_1`` to the loss.
    l2 : float, default 0.0
        ``kappa >= 0``: adds ``kappa ||w||_2^2`` to the loss.

    Raises
    ------
    ParameterError
        ``l1`` or ``l2`` negative, infinite or NaN.

    Examples
    --------
    Every library loss is a ``Loss``; the regularizers are added by the base class:

    >>> import gtvmodel as gm
    >>> loss = gm.QuadraticLoss([1.0, 0.0], l1=0.5, l2=1.0)
    >>> isinstance(loss, gm.Loss), loss.value([1.0, 1.0])  # 1 + 0.5 * 2 + 1 * 2
    (True, 4.0)
    """

    #: True when the unregularized loss is differentiable with Lipschitz gradient.
    base_smooth: ClassVar[bool] = True
    #: Short name used in files and messages, and the key of the registry ``LOSSES``.
    kind: ClassVar[str] = "loss"
    #: Arrays of the file spec by name, their shapes in the symbols ``m`` and ``d``.
    spec_arrays: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: A lower bound of ``inf_w L(w)`` (every library loss is ``>= 0``; ``-inf``: unknown).
    lower_bound: ClassVar[float] = 0.0
    #: The :class:`LossBatch` subclass stacking losses of this class (None: not batched, the
    #: loss is an expression in its node's own variable, compiled node by node).
    batch_class: ClassVar[type[LossBatch] | None] = None
    #: Whether the loss carries data (False only for :class:`ZeroLoss`).
    has_data: ClassVar[bool] = True
    #: The node variable a symbolic loss is stated in (None for library losses, which are
    #: functions of ``w_i`` given as an argument).
    variable: cp.Variable | None = None
    #: Whether :meth:`LossBatch.prox` has an exact path for this class (without ``l1`` unless
    #: :attr:`isotropic_prox`).
    exact_prox: ClassVar[bool] = False
    #: Whether the prox is isotropic (coordinate-separable after a scaling): it then accepts
    #: ``l1`` and composes exactly with box and (without ``l1``) norm-ball projections.
    isotropic_prox: ClassVar[bool] = False
    #: Whether the row conjugate is quadratic on an interval, ``ell*(a) = s_r a + q_r a^2 / 2``
    #: on ``[lo_r, hi_r]`` (squared, Huber, hinge, absolute): PU (32) with ``l1`` and box
    #: constraints is then exact by the dual active-set method of
    #: :class:`gtvmodel.terms.composite.CompositeProxBatch`.
    piecewise_quadratic: ClassVar[bool] = False

    def __init__(self, *, l1: float = 0.0, l2: float = 0.0):
        owner = type(self).__name__
        self.l1 = check_scalar(l1, "l1", min_val=0.0, where=owner)
        self.l2 = check_scalar(l2, "l2", min_val=0.0, where=owner)

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        LOSSES.register_subclass(cls, Loss)

    @classmethod
    def from_groups(cls, X: np.ndarray, y: np.ndarray, ms: np.ndarray,
                    **options: Any) -> list[Loss]:
        """One loss per consecutive row group of stacked samples: group ``j`` owns the next
        ``ms[j]`` rows of ``X`` (``(M, d)``) and ``y`` (``(M,)``), and its loss is
        ``cls(X_j, y_j, **options)`` (what :meth:`ModelDeclaration.set_data
        <gtvmodel.declaration.ModelDeclaration.set_data>` builds).  This generic version calls
        the constructor per group; :class:`DataFitLoss` validates the stack once instead."""
        ends = np.cumsum(ms)
        return [cls._from_samples(X[b - m:b], y[b - m:b], options)
                for m, b in zip(ms, ends, strict=True)]

    @classmethod
    def _from_samples(cls, X: np.ndarray, y: np.ndarray, options: dict[str, Any]) -> Loss:
        """``cls(X, y, **options)``; :class:`LossError` if the class takes no such arguments."""
        try:
            return cls(X, y, **options)
        except TypeError as exc:  # a loss class that takes no samples (X, y), a bad option
            raise LossError(f"{cls.__name__} cannot be built from samples (X, y) with options "
                            f"{options!r}: {exc}") from None

    # ----------------------------------------------------------- interface
    @property
    def dim(self) -> int | None:
        """The parameter dimension ``d`` this loss requires (None: any)."""
        return None

    @property
    def smooth(self) -> bool:
        """True if ``L`` is differentiable with a Lipschitz gradient (no ``l1`` term)."""
        return self.base_smooth and self.l1 == 0

    @property
    def is_zero(self) -> bool:
        """True if ``h = L + eta ||.||_1 + kappa ||.||^2`` is identically zero."""
        return False

    def has_exact_prox(self) -> bool:
        """Whether PU (32) of this loss (without constraints) has an exact vectorized path
        (:meth:`LossBatch.prox`)."""
        return self.exact_prox and (self.isotropic_prox or self.l1 == 0)

    def domain_constraints(self) -> list[cp.Constraint]:
        """Constraints of the loss's own domain in its node's variable (library losses: none,
        they are finite everywhere)."""
        return []

    def squared_rows(self, d: int) -> tuple[np.ndarray, np.ndarray, int] | None:
        """``(X, y, m)`` with ``L(w) = ||y - X w||^2 / m`` (unregularized), or None when the
        loss is not of that form (used to sum the losses of a cluster in closed form)."""
        return None

    def expression(self, x: cp.Expression) -> cp.Expression:
        """The CVXPY expression ``L(x)`` in a ``(d,)`` variable ``x``."""
        expr = self._base_expression(x)
        if self.l1:
            expr = expr + self.l1 * cp.norm1(x)
        if self.l2:
            expr = expr + self.l2 * cp.sum_squares(x)
        return expr

    def value(self, w: np.ndarray) -> float:
        """``L(w)`` in numpy."""
        w = np.asarray(w, dtype=float)
        return float(self._base_value(w) + self.l1 * np.abs(w).sum() + self.l2 * (w @ w))

    def gradient(self, w: np.ndarray) -> np.ndarray:
        """``grad L(w)``; :class:`UnsupportedError` if the loss is not differentiable."""
        if not self.smooth:
            raise UnsupportedError(f"{self!r} is not differentiable (no gradient)")
        w = np.asarray(w, dtype=float)
        return self._base_gradient(w) + 2.0 * self.l2 * w

    def hessian_bounds(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Global bounds ``H_lo <= hess L(w) <= H_hi`` (Loewner order) valid for every ``w``.

        Used for the constants of Theorem 2: ``beta = lambda_max(H_hi)`` and the strong
        convexity modulus ``alpha = lambda_min(H_lo)``.  For a non-smooth loss, ``H_hi`` is
        ``inf`` and :class:`UnsupportedError` is raised.
        """
        if not self.smooth:
            raise UnsupportedError(f"{self!r} is not smooth: it has no Hessian bound")
        lo, hi = self._base_hessian_bounds(d)
        reg = 2.0 * self.l2 * np.eye(d)
        return lo + reg, hi + reg

    @property
    def smoothness(self) -> float:
        """``beta``: Lipschitz constant of ``grad L`` (``inf`` if not smooth)."""
        if not self.smooth:
            return float("inf")
        d = self.dim or 1
        return float(np.linalg.eigvalsh(self.hessian_bounds(d)[1])[-1])

    @property
    def strong_convexity(self) -> float:
        """``alpha``: a global strong convexity modulus of ``L`` (0 if none is known)."""
        d = self.dim or 1
        if self.base_smooth:
            lo = self._base_hessian_bounds(d)[0]
            return float(max(np.linalg.eigvalsh(lo)[0], 0.0) + 2.0 * self.l2)
        return 2.0 * self.l2

    # ------------------------------------------------------ conjugate (issue 3)
    def conjugate(self, s: Any) -> float:
        """The convex conjugate ``h*(s) = sup_w s^T w - h(w)`` of ``h = L + eta||.||_1 +
        kappa||.||^2`` (docs/conventions.md tables), ``+inf`` outside its domain.

        The regularizers enter by infimal convolution, ``h* = L* [] iota{||.||_inf <= eta} []
        ||.||^2/(4 kappa)``.  Closed forms (zero, quadratic, squared loss without ``l1``) are
        evaluated directly; otherwise the small convex problem of :meth:`conjugate_expression`
        is solved with CVXPY (Clarabel, gtvmodel's accuracy defaults).  Subspace domains
        (zero loss, rank-deficient squared loss) are tested with relative tolerance
        ``1e-10 max(1, ||s||)``.
        """
        d = self.dim
        s = check_vector(s, "s", d, where=f"{type(self).__name__}.conjugate")
        closed = self._conjugate_closed(s[None, :])
        if closed is not None:
            val, rho = closed[0], closed[1]
            tol = 1e-10 * max(1.0, float(np.abs(s).max(initial=0.0)))
            return float("inf") if np.abs(rho).max(initial=0.0) > tol else float(val[0])
        return _solve_conjugate(self, s)

    def conjugate_expression(self, s: cp.Expression
                             ) -> tuple[cp.Expression, list[cp.Constraint]]:
        """CVXPY form of ``h*(s)`` for an affine ``(d,)`` expression ``s``: minimizing the
        returned convex expression over its new variables subject to the returned constraints
        equals ``h*(s)`` (the infimal convolution of :meth:`conjugate`, written out)."""
        d = int(s.size)
        contrib, cost, cons = self._base_conjugate_cvx(d)
        if self.l1:
            s1 = cp.Variable(d, name="s_l1")
            cons.append(cp.abs(s1) <= self.l1)
            contrib = contrib + s1
        if self.l2:
            s2 = cp.Variable(d, name="s_l2")
            cost = cost + l2_conjugate_cvx(s2, self.l2)
            contrib = contrib + s2
        cons.append(contrib == s)
        return cost, cons

    def _conjugate_closed(self, S: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Closed-form conjugate rows, or None.  Returns ``(values, rho)`` with ``values`` the
        exact ``h*(S_k - rho_k)`` and ``rho_k`` the part of ``S_k`` outside the (subspace)
        domain, zero when ``S_k`` is in the domain."""
        return None

    def _base_conjugate_cvx(self, d: int) -> tuple[cp.Expression, cp.Expression,
                                                   list[cp.Constraint]]:
        """``(contribution, cost, constraints)``: ``L*(s) = min cost s.t. contribution = s``."""
        raise UnsupportedError(f"{type(self).__name__} has no library conjugate")

    # ------------------------------------------------------ proximal map (issue 5)
    def prox(self, v: Any, tau: float) -> np.ndarray:
        """The node update PU (32) without constraints: ``prox_{tau h}(v) = argmin_z h(z) +
        ||z - v||^2 / (2 tau)`` for ``h = L + eta ||.||_1 + kappa ||.||^2``.

        Uses the exact vectorized path of :meth:`LossBatch.prox` when the loss has one, else
        one CVXPY solve (Clarabel with gtvmodel's accuracy defaults).
        """
        owner = f"{type(self).__name__}.prox"
        v = check_vector(v, "v", self.dim, where=owner)
        tau = check_scalar(tau, "tau", min_val=0.0, include_boundaries="neither", where=owner)
        if self.has_exact_prox():
            batch = LossBatch(type(self), np.array([0]), [self], 1, v.shape[0])
            return batch.prox(v[None, :], np.array([tau]))[0]
        return _cvxpy_prox(self, v, tau)

    def _prox_variable(self, d: int) -> cp.Variable:
        """The variable of the CVXPY prox problem (a fresh ``(d,)`` one)."""
        return cp.Variable(d)

    # ------------------------------------------------------ prediction (issue 10)
    #: The default per-node score of predictions (:func:`gtvmodel.scores.node_scores`):
    #: ``"mse"`` for regression losses, ``"accuracy"`` for classifiers; None: the loss does not
    #: predict (it models no samples).
    score_metric: ClassVar[str | None] = None

    def samples(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The node's training samples ``(X, y)`` (labels as stored), None for a loss without
        samples (:class:`ZeroLoss`, :class:`QuadraticLoss`, symbolic losses)."""
        return None

    @property
    def num_features(self) -> int:
        """``p``, the number of features of one sample ``x_r`` (``d`` for the scalar data-fit
        losses, ``d / K`` for :class:`~gtvmodel.SoftmaxLoss`)."""
        raise UnsupportedError(f"{type(self).__name__} models no samples: it cannot predict")

    def decision_rows(self, X: np.ndarray, W: np.ndarray) -> np.ndarray:
        """Linear scores of the samples ``x_r`` (rows of ``X``, ``(N, p)``) each under its own
        weights ``w_r`` (rows of ``W``, ``(N, d)``): one stacked array for the samples of many
        nodes, so that predicting at every node is one vectorized call."""
        raise UnsupportedError(f"{type(self).__name__} models no samples: it cannot predict")

    def predict_rows(self, X: np.ndarray, W: np.ndarray) -> np.ndarray:
        """Predictions ``y_hat_r`` (rows as in :meth:`decision_rows`): the scores themselves
        for regression losses, labels in the loss's convention for classifiers."""
        return self.decision_rows(X, W)

    def proba_rows(self, X: np.ndarray, W: np.ndarray) -> np.ndarray:
        """Class probabilities of the samples (rows as in :meth:`decision_rows`); classifiers
        with a probabilistic model only."""
        raise UnsupportedError(f"{type(self).__name__} has no probabilistic model "
                               "(predict_proba is for LogisticLoss and SoftmaxLoss)")

    def labels(self, y: Any, name: str = "y") -> np.ndarray:
        """Labels ``y`` in the convention :meth:`predict_rows` answers in, so that a score
        compares like with like (real targets for regression losses)."""
        return check_vector(y, name, where=type(self).__name__)

    def check_features(self, X: Any, name: str = "X") -> np.ndarray:
        """``X`` as a finite ``(m, p)`` float matrix of samples (:class:`DataError` naming
        ``name`` and ``p`` otherwise)."""
        X = as_finite_array(X, name, owner=type(self).__name__)
        p = self.num_features
        if X.ndim != 2 or X.shape[1] != p:
            raise DataError(f"{type(self).__name__}: {name} must be an (m, {p}) matrix of "
                            f"samples with p = {p} features, got shape {X.shape}")
        return X

    def _rows_of(self, w: Any, X: Any) -> tuple[np.ndarray, np.ndarray]:
        X = self.check_features(X)
        w = check_vector(w, "w", where=type(self).__name__)
        p_d = self.dim
        if w.shape[0] != p_d:
            raise DataError(f"{type(self).__name__}: w must have shape ({p_d},), got {w.shape}")
        return X, np.broadcast_to(w, (X.shape[0], w.shape[0]))

    def decision_function(self, w: Any, X: Any) -> np.ndarray:
        """Linear scores of new samples ``X`` (``(m, p)``) at weights ``w``: ``X w``, or the
        ``(m, K)`` class scores ``X W`` of :class:`~gtvmodel.SoftmaxLoss`."""
        return self.decision_rows(*self._rows_of(w, X))

    def predict(self, w: Any, X: Any) -> np.ndarray:
        """Predictions for new samples ``X`` (``(m, p)``) at weights ``w``: ``X w`` for
        regression losses, labels in the loss's convention for classifiers (``-1``/``+1`` for
        :class:`LogisticLoss` and :class:`HingeLoss`, the class index for
        :class:`~gtvmodel.SoftmaxLoss`).

        Examples
        --------
        >>> import numpy as np, gtvmodel as gm
        >>> X = np.array([[1.0, 0.0], [0.0, 2.0]])
        >>> gm.SquaredLoss(X, [1.0, 2.0]).predict([0.5, -1.0], X)
        array([ 0.5, -2. ])
        >>> gm.LogisticLoss(X, [1, 0]).predict([0.5, -1.0], X)  # labels as stored: -1/+1
        array([ 1., -1.])
        """
        return self.predict_rows(*self._rows_of(w, X))

    def predict_proba(self, w: Any, X: Any) -> np.ndarray:
        """Probabilities for new samples ``X`` at weights ``w``: ``P(y = +1 | x) =
        sigmoid(x^T w)`` (:class:`LogisticLoss`), the ``(m, K)`` softmax of the class scores
        (:class:`~gtvmodel.SoftmaxLoss`)."""
        return self.proba_rows(*self._rows_of(w, X))

    # ------------------------------------------------------ for subclasses
    @abstractmethod
    def _base_expression(self, x: cp.Expression) -> cp.Expression: ...

    @abstractmethod
    def _base_value(self, w: np.ndarray) -> float: ...

    def _base_gradient(self, w: np.ndarray) -> np.ndarray:
        raise UnsupportedError(f"{type(self).__name__} is not differentiable")

    def _base_hessian_bounds(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        raise UnsupportedError(f"{type(self).__name__} is not smooth")

    # ----------------------------------------------------------- file spec
    def to_spec(self) -> TermSpec:
        """The loss's kind, header parameters (the regularizers ``l1 = eta``, ``l2 = kappa``
        and its own, e.g. Huber's ``M``) and arrays for a problem file; library losses only
        (:class:`UnsupportedError` otherwise)."""
        raise UnsupportedError(f"{self!r} cannot be saved")

    @classmethod
    def from_spec(cls, spec: TermSpec) -> Loss:
        """The loss that :meth:`to_spec` described (header values checked strictly,
        :class:`~gtvmodel.FileFormatError`; arrays by the constructor)."""
        raise UnsupportedError(f"{cls.__name__} has no file spec")

    def _regularizer_spec(self) -> dict[str, float]:
        return {"l1": self.l1, "l2": self.l2}

    def _reg_repr(self) -> str:
        s = ""
        if self.l1:
            s += f", l1={self.l1:g}"
        if self.l2:
            s += f", l2={self.l2:g}"
        return s


# =====================================================================  data-fit losses
class DataFitLoss(Loss):
    """``L(w) = (1/m) sum_r ell(x_r^T w, y_r)`` over the node's samples ``(X, y)``.

    ``X`` is ``(m, d)``; ``y`` is ``(m,)`` or an ``(m, 1)`` column (flattened).

    Subclasses give the row loss once, in numpy (``_ell``), CVXPY (``_ell_cvx``) and, for smooth
    losses, its derivative (``_ell_d1``) and a global bound on its second derivative
    (``ell_curvature``).  ``_row_param`` is an optional per-row constant (Huber's ``M``).
    """

    #: sup_t ell''(t) (for smooth row losses); beta = ell_curvature * lambda_max(X^T X) / m.
    ell_curvature: ClassVar[float] = float("inf")
    #: sup_t |ell'''(t)| (inf: ``ell''`` not Lipschitz): bounds the Lipschitz constant of the
    #: Hessians, Newton's quadratic-convergence stop in :func:`newton_minimize`.
    ell_d3_max: ClassVar[float] = float("inf")
    #: inf_t ell''(t) (a global lower bound, 0 for losses that flatten out).
    ell_curvature_min: ClassVar[float] = 0.0
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

    # --- the row formulas (one place each)
    @staticmethod
    @abstractmethod
    def _ell(t: np.ndarray, y: np.ndarray, p: np.ndarray | None) -> np.ndarray: ...

    @staticmethod
    @abstractmethod
    def _ell_cvx(t: cp.Expression, y: np.ndarray, p: np.ndarray | None) -> cp.Expression: ...

    @staticmethod
    def _ell_d1(t: np.ndarray, y: np.ndarray, p: np.ndarray | None) -> np.ndarray:
        raise UnsupportedError("row loss is not differentiable")

    @staticmethod
    def _ell_d2(t: np.ndarray, y: np.ndarray, p: np.ndarray | None) -> np.ndarray:
        """Second derivative (generalized, for piecewise quadratic rows) of ``ell`` in ``t``."""
        raise UnsupportedError("row loss is not twice differentiable")

    @classmethod
    def _ell_d12(cls, t: np.ndarray, y: np.ndarray, p: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """``(ell'(t), ell''(t))`` at once (:meth:`_ell_d1`, :meth:`_ell_d2`; a row loss whose
        two derivatives share their costly part computes it once)."""
        return cls._ell_d1(t, y, p), cls._ell_d2(t, y, p)

    # --- the row conjugate ell*(v) (docs/conventions.md table, unscaled row loss), one place each
    @staticmethod
    @abstractmethod
    def _ell_conj(v: np.ndarray, y: np.ndarray, p: np.ndarray | None) -> np.ndarray:
        """``ell*(v)`` on its domain :meth:`_ell_conj_bounds` (values outside are not used)."""

    @staticmethod
    @abstractmethod
    def _ell_conj_cvx(v: cp.Expression, y: np.ndarray, p: np.ndarray | None
                      ) -> cp.Expression: ...

    @staticmethod
    def _ell_conj_bounds(y: np.ndarray, p: np.ndarray | None) -> tuple[Any, Any]:
        """Interval domain ``lo <= v <= hi`` of ``ell*`` per row (``+-inf``: unbounded)."""
        return -np.inf, np.inf

    @staticmethod
    def _linear_minorants(y: np.ndarray, p: np.ndarray | None
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
    def ell_conjugate_magnitude(cls, v: np.ndarray, y: np.ndarray, p: np.ndarray | None
                                ) -> np.ndarray:
        """A bound of the sum of the absolute summands of ``ell*(v_r)`` per row, for rounding
        bounds: ``|ell*(v)| + |v y| + v^2/4`` covers the two terms of the squared and Huber
        rows (``v y + v^2/4``), which cancel, and the ``+ 1`` the entropy terms of the
        logistic rows (each at most ``log 2`` in absolute value)."""
        conj = cls.ell_conjugate(v, y, p)
        xp = _xp.namespace(v)
        return xp.abs(conj) + xp.abs(v * y) + 0.25 * v**2 + 1.0

    @classmethod
    def ell_conjugate(cls, v: np.ndarray, y: np.ndarray, p: np.ndarray | None) -> np.ndarray:
        """Row conjugates ``ell*(v_r)`` in numpy, ``+inf`` outside the domain.

        The mean loss has ``L*(s) = min { sum_r (1/m) ell*(v_r) : X^T v / m = s }``
        (``mu_r = v_r / m`` in docs/conventions.md's table)."""
        lo, hi = cls._ell_conj_bounds(y, p)
        if _xp.is_numpy(v):
            out = np.asarray(cls._ell_conj(v, y, p), dtype=float)
            return np.where((v < lo) | (v > hi), np.inf, out)
        # tensors (the squared rows' device certificate): _ell_conj written for both
        return _xp.namespace(v).where((v < lo) | (v > hi), np.inf, cls._ell_conj(v, y, p))

    def _base_conjugate_cvx(self, d):
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
        return self.ell_curvature_min * G, self.ell_curvature * G

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
                  p: np.ndarray | None) -> cp.Expression:
    """``sum_r c_r ell(t_r, y_r)`` as one vectorized CVXPY expression."""
    return cp.sum(cp.multiply(c, cls._ell_cvx(t, y, p)))


class SquaredLoss(DataFitLoss):
    """Squared error ``(1/m) ||y - X w||^2`` (row loss ``(t - y)^2``); ``scaling="sum"``,
    ``"half"``, ``"half_mean"``: ``||y - X w||^2``, ``1/2 ||y - X w||^2``, ``1/(2m) ||y - X
    w||^2`` (an exact rescaling of the samples, ``__init__``; docs/conventions.md).

    Conjugate (without ``l1``): with ``Q = X^T X / m = V diag(e) V^T``, ``q = X^T y / m``,
    ``t = s + 2 q``: ``h*(s) = sum_j (V^T t)_j^2 / (4 (e_j + kappa)) - ||y||^2 / m``, finite
    iff ``s in range(X^T)`` when ``kappa = 0`` (docs/conventions.md).  It is *evaluated* in the
    sample form (``datafit_conjugate_split`` at the maximizer of
    ``squared_maximizers``), never through ``1/e_j``: dropping a tiny ``e_j`` would drop a
    finite term and under-estimate the conjugate (docs/conventions.md).

    Parameters
    ----------
    X : array_like, shape (m, d)
        The node's samples ``x_r^T`` as rows: finite, at least one row.
    y : array_like, shape (m,)
        The targets ``y_r``.
    scaling : {"mean", "sum", "half", "half_mean"}, default "mean"
        The factor ``s(m)`` of ``L(w) = s(m) ||y - X w||^2``: ``1/m``, ``1``, ``1/2``,
        ``1/(2m)`` (``SCALINGS``); applied exactly by storing the samples multiplied by
        ``sqrt(m s(m))`` (``samples()`` returns them as given).
    l1 : float, default 0.0
        ``eta >= 0``: adds ``eta ||w||_1`` to the loss.
    l2 : float, default 0.0
        ``kappa >= 0``: adds ``kappa ||w||_2^2`` to the loss.

    Raises
    ------
    DataError
        ``X`` is not a finite non-empty ``(m, d)`` matrix, or ``y`` is not finite or not of
        length ``m``.
    ParameterError
        ``l1`` or ``l2`` negative, infinite or NaN; ``scaling`` not one of the names above.

    Examples
    --------
    ``L(w)``, ``grad L(w)``, the conjugate ``L*(s)`` (docs/conventions.md) and the node update PU
    (32) ``prox_{tau L}(v)`` at small arrays:

    >>> import numpy as np, gtvmodel as gm
    >>> X = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    >>> loss = gm.SquaredLoss(X, [1.0, 2.0, 3.0])
    >>> round(loss.value([0.0, 0.0]), 4), np.round(loss.gradient([0.0, 0.0]), 4)
    (4.6667, array([-2.6667, -4.6667]))
    >>> round(loss.conjugate([0.0, 0.0]), 4)  # -min_w L(w)
    -0.1481
    >>> np.round(loss.prox([0.0, 0.0], 0.5), 4)
    array([0.641 , 0.7949])
    >>> float(gm.SquaredLoss(X, [1.0, 2.0, 3.0], scaling="sum").value([0.0, 0.0]))  # ||y||^2
    14.0
    """

    kind = "squared"
    ell_curvature = 2.0
    ell_curvature_min = 2.0
    exact_prox = True
    piecewise_quadratic = True
    #: ``scaling`` -> the factor ``s(m)`` of ``L(w) = s ||y - X w||^2`` (docs/conventions.md,
    #: "Conventions users bring"): the mean (default), the sum, half the sum (prox-tv, SnapVX
    #: examples), half the mean (scikit-learn's Lasso and ElasticNet).
    SCALINGS: ClassVar[dict[str, Callable[[int], float]]] = {
        "mean": lambda m: 1.0 / m, "sum": lambda m: 1.0, "half": lambda m: 0.5,
        "half_mean": lambda m: 0.5 / m}

    def __init__(self, X: Any, y: Any, *, scaling: str = "mean", l1: float = 0.0,
                 l2: float = 0.0):
        """``scaling`` other than ``"mean"`` is applied exactly at construction: the samples
        are stored multiplied by ``c = sqrt(m s(m))``, so ``(1/m) ||c y - c X w||^2 = s ||y -
        X w||^2`` and every hook (value, gradient, expression, conjugate, prox, batches,
        certificates) sees that one function.  :meth:`samples` returns the samples as given;
        ``X``/``y`` and a saved file hold the rescaled ones (the file loads as the same
        function, with ``scaling="mean"``)."""
        super().__init__(X, y, l1=l1, l2=l2)
        self.scaling = check_option(scaling, "scaling", self.SCALINGS, where="SquaredLoss")
        if self.scaling != "mean":
            c = float(np.sqrt(self.m * self.SCALINGS[self.scaling](self.m)))
            self.given = (self.X, self.y)
            self.X, self.y = self.X * c, self.y * c

    @classmethod
    def from_groups(cls, X: np.ndarray, y: np.ndarray, ms: np.ndarray,
                    **options: Any) -> list[Loss]:
        """:meth:`DataFitLoss.from_groups`; with a ``scaling`` other than ``"mean"`` one
        constructor call per group (the factor depends on each group's ``m``)."""
        if options.get("scaling", "mean") == "mean":
            return super().from_groups(X, y, ms, **options)
        return Loss.from_groups.__func__(cls, X, y, ms, **options)

    def samples(self) -> tuple[np.ndarray, np.ndarray]:
        """The node's samples ``(X, y)`` as given (before a ``scaling``'s factor)."""
        return self.__dict__.get("given", (self.X, self.y))

    def __repr__(self) -> str:
        scaling = self.__dict__.get("scaling", "mean")
        extra = "" if scaling == "mean" else f", scaling={scaling!r}"
        return f"SquaredLoss(m={self.m}, d={self.dim}{extra}{self._reg_repr()})"

    def squared_rows(self, d):
        """``(X, y, m)``: the loss is ``||y - X w||^2 / m`` itself."""
        return self.X, self.y, self.m

    def eig(self) -> tuple[np.ndarray, np.ndarray]:
        """Eigen-decomposition ``(e, V)`` of ``Q = X^T X / m`` (cached)."""
        cached = self.__dict__.get("_eig")
        if cached is None:
            cached = np.linalg.eigh(self.X.T @ self.X / self.m)
            self.__dict__["_eig"] = cached
        return cached

    def _conjugate_closed(self, S):
        if self.l1:
            return None
        e, V = self.eig()
        k = S.shape[0]
        kappa = np.full(k, self.l2)
        q = self.X.T @ self.y / self.m
        W = squared_maximizers(np.broadcast_to(e, (k, e.size)),
                               np.broadcast_to(V, (k,) + V.shape), np.broadcast_to(q, S.shape),
                               kappa, S)
        rows = np.tile(np.arange(self.m), k)
        rn = np.repeat(np.arange(k), self.m)
        val, rho, rounding, _ = datafit_conjugate_split(
            SquaredLoss, self.X[rows], self.y[rows], None, np.full(rows.size, 1.0 / self.m),
            rn, kappa, S, W)
        return val, rho + rounding

    @staticmethod
    def _residual_norm_bound(level, p_min, p_sq):
        return np.sqrt(np.maximum(level, 0.0))

    @staticmethod
    def _linear_minorants(y, p):
        # (t - y)^2 >= +-2 (t - y) - 1 (tangents at t - y = +-1)
        return [(np.full(y.shape, 2.0), -2.0 * y - 1.0), (np.full(y.shape, -2.0), 2.0 * y - 1.0)]

    @staticmethod
    def _ell(t, y, p):
        return (t - y) ** 2

    @staticmethod
    def _ell_cvx(t, y, p):
        return cp.square(t - y)

    @staticmethod
    def _ell_d1(t, y, p):
        return 2.0 * (t - y)

    @staticmethod
    def _ell_d2(t, y, p):
        return np.full(np.shape(t), 2.0)

    @staticmethod
    def _ell_conj(v, y, p):
        return v * y + 0.25 * v**2

    @staticmethod
    def _ell_conj_cvx(v, y, p):
        return cp.multiply(y, v) + 0.25 * cp.square(v)


class LogisticLoss(DataFitLoss):
    """Logistic loss ``(1/m) sum_r log(1 + exp(-y_r x_r^T w))``, labels ``y_r in {-1, +1}``.

    ``y`` may be given as ``{-1, +1}``, ``{0, 1}`` or booleans (``0``/``False`` become ``-1``),
    converted once at construction and stored (and saved) as ``-1/+1``; a ``-1`` among the
    values means ``{-1, +1}``, other values raise :class:`~gtvmodel.errors.DataError` naming them.

    Its Hessian is ``X^T diag(s(1-s)) X / m <= X^T X / (4m)``; it has no global strong convexity
    (add ``l2=`` for one).

    Parameters
    ----------
    X : array_like, shape (m, d)
        The node's samples ``x_r^T`` as rows: finite, at least one row.
    y : array_like, shape (m,)
        Binary labels ``y_r``: ``-1``/``+1`` (``0``/``1`` and other two-valued labels are
        mapped to ``-1``/``+1``).
    l1 : float, default 0.0
        ``eta >= 0``: adds ``eta ||w||_1`` to the loss.
    l2 : float, default 0.0
        ``kappa >= 0``: adds ``kappa ||w||_2^2`` to the loss.

    Raises
    ------
    DataError
        ``X`` is not a finite non-empty ``(m, d)`` matrix, or ``y`` is not finite or not of
        length ``m`` (or does not hold two label values).
    ParameterError
        ``l1`` or ``l2`` negative, infinite or NaN.

    Examples
    --------
    >>> import numpy as np, gtvmodel as gm
    >>> X = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    >>> loss = gm.LogisticLoss(X, [1.0, -1.0, 1.0])
    >>> round(loss.value([0.0, 0.0]), 4)  # log 2
    0.6931
    >>> round(loss.conjugate([-0.1, 0.1]), 4)  # (1/m) sum_r h*(m y_r mu_r) at X^T mu = s
    -0.4632
    >>> loss.conjugate([1.0, 1.0])  # outside the domain
    inf
    >>> np.round(loss.prox([0.0, 0.0], 0.5), 4)
    array([ 0.1567, -0.0744])
    """

    kind = "logistic"
    binary_labels = True
    ell_curvature = 0.25
    ell_d3_max = 1.0 / (6.0 * np.sqrt(3.0))  # |s (1 - s) (1 - 2 s)| at s = (3 -+ sqrt 3) / 6
    exact_prox = True
    score_metric = "accuracy"

    def proba_rows(self, X: np.ndarray, W: np.ndarray) -> np.ndarray:
        """``P(y_r = +1 | x_r) = sigmoid(x_r^T w_r)``, the model the logistic loss is the
        negative log-likelihood of."""
        return expit(self.decision_rows(X, W))

    @staticmethod
    def _linear_minorants(y, p):
        return [(-y, np.zeros(y.shape))]  # log(1 + exp(-y t)) >= -y t

    @staticmethod
    def _ell(t, y, p):
        return np.logaddexp(0.0, -y * t)

    @staticmethod
    def _ell_cvx(t, y, p):
        return cp.logistic(cp.multiply(-y, t))

    @staticmethod
    def _ell_d1(t, y, p):
        return -y * expit(-y * t)

    @staticmethod
    def _ell_d2(t, y, p):
        s = expit(-y * t)
        return s * (1.0 - s)

    @classmethod
    def _ell_d12(cls, t, y, p):
        s = expit(-y * t)  # ell' = -y s, ell'' = s (1 - s): one sigmoid for both
        return -y * s, s * (1.0 - s)

    # conjugate of softplus(-y t): with b = -y v in [0, 1], b log b + (1 - b) log(1 - b)
    @staticmethod
    def _ell_conj(v, y, p):
        b = np.clip(-y * v, 0.0, 1.0)
        return xlogy(b, b) + xlogy(1.0 - b, 1.0 - b)

    @staticmethod
    def _ell_conj_cvx(v, y, p):
        b = cp.multiply(-y, v)
        return -cp.entr(b) - cp.entr(1.0 - b)

    @staticmethod
    def _ell_conj_bounds(y, p):
        return np.minimum(0.0, -y), np.maximum(0.0, -y)


class HingeLoss(DataFitLoss):
    """Hinge loss ``(1/m) sum_r max(0, 1 - y_r x_r^T w)``, labels ``y_r in {-1, +1}``.

    ``y`` may be given as ``{-1, +1}``, ``{0, 1}`` or booleans (``0``/``False`` become ``-1``),
    converted once at construction and stored (and saved) as ``-1/+1``; a ``-1`` among the
    values means ``{-1, +1}``, other values raise :class:`~gtvmodel.errors.DataError` naming them.

    Not differentiable: no gradient or smoothness constant.

    Parameters
    ----------
    X : array_like, shape (m, d)
        The node's samples ``x_r^T`` as rows: finite, at least one row.
    y : array_like, shape (m,)
        Binary labels ``y_r``: ``-1``/``+1`` (``0``/``1`` and other two-valued labels are
        mapped to ``-1``/``+1``).
    l1 : float, default 0.0
        ``eta >= 0``: adds ``eta ||w||_1`` to the loss.
    l2 : float, default 0.0
        ``kappa >= 0``: adds ``kappa ||w||_2^2`` to the loss.

    Raises
    ------
    DataError
        ``X`` is not a finite non-empty ``(m, d)`` matrix, or ``y`` is not finite or not of
        length ``m`` (or does not hold two label values).
    ParameterError
        ``l1`` or ``l2`` negative, infinite or NaN.

    Examples
    --------
    >>> import numpy as np, gtvmodel as gm
    >>> X = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    >>> loss = gm.HingeLoss(X, [1.0, -1.0, 1.0])
    >>> loss.value([0.0, 0.0]), loss.smooth
    (1.0, False)
    >>> round(loss.conjugate([-0.1, 0.1]), 4)  # sum_r y_r mu_r on m y_r mu_r in [-1, 0]
    -0.2
    >>> np.round(loss.prox([0.0, 0.0], 0.5), 4)
    array([ 0.3333, -0.1667])
    """

    kind = "hinge"
    binary_labels = True
    base_smooth = False
    exact_prox = True
    piecewise_quadratic = True
    score_metric = "accuracy"

    @staticmethod
    def _linear_minorants(y, p):
        return [(-y, np.ones(y.shape))]  # max(0, 1 - y t) >= 1 - y t

    @staticmethod
    def _ell(t, y, p):
        return np.maximum(0.0, 1.0 - y * t)

    @staticmethod
    def _ell_cvx(t, y, p):
        return cp.pos(1.0 - cp.multiply(y, t))

    # conjugate of max(0, 1 - y t): y v on y v in [-1, 0]
    @staticmethod
    def _ell_conj(v, y, p):
        return y * v

    @staticmethod
    def _ell_conj_cvx(v, y, p):
        return cp.multiply(y, v)

    @staticmethod
    def _ell_conj_bounds(y, p):
        return np.minimum(0.0, -y), np.maximum(0.0, -y)


class AbsoluteLoss(DataFitLoss):
    """Absolute error ``(1/m) ||y - X w||_1`` (non-smooth).

    Conjugate (docs/conventions.md): ``L*(s) = min { sum_r mu_r y_r : X^T mu = s, |mu_r| <= 1/m }``.

    Parameters
    ----------
    X : array_like, shape (m, d)
        The node's samples ``x_r^T`` as rows: finite, at least one row.
    y : array_like, shape (m,)
        The targets ``y_r``.
    l1 : float, default 0.0
        ``eta >= 0``: adds ``eta ||w||_1`` to the loss.
    l2 : float, default 0.0
        ``kappa >= 0``: adds ``kappa ||w||_2^2`` to the loss.

    Raises
    ------
    DataError
        ``X`` is not a finite non-empty ``(m, d)`` matrix, or ``y`` is not finite or not of
        length ``m``.
    ParameterError
        ``l1`` or ``l2`` negative, infinite or NaN.

    Examples
    --------
    >>> import numpy as np, gtvmodel as gm
    >>> X = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    >>> loss = gm.AbsoluteLoss(X, [1.0, -1.0, 1.0])
    >>> loss.value([0.0, 0.0])
    1.0
    >>> round(loss.conjugate([-0.1, 0.1]), 4)
    -0.3167
    >>> np.round(loss.prox([0.0, 0.0], 0.5), 4)
    array([ 0.3333, -0.1667])
    """

    kind = "absolute"
    base_smooth = False
    exact_prox = True
    piecewise_quadratic = True

    @staticmethod
    def _residual_norm_bound(level, p_min, p_sq):
        return np.maximum(level, 0.0)  # ||r||_2 <= ||r||_1

    @staticmethod
    def _linear_minorants(y, p):
        return [(np.ones(y.shape), -y), (-np.ones(y.shape), y)]

    @staticmethod
    def _ell(t, y, p):
        return np.abs(t - y)

    @staticmethod
    def _ell_cvx(t, y, p):
        return cp.abs(t - y)

    # conjugate of |t - y|: v y on |v| <= 1
    @staticmethod
    def _ell_conj(v, y, p):
        return v * y

    @staticmethod
    def _ell_conj_cvx(v, y, p):
        return cp.multiply(y, v)

    @staticmethod
    def _ell_conj_bounds(y, p):
        return np.full(y.shape, -1.0), np.full(y.shape, 1.0)


class HuberLoss(DataFitLoss):
    """Huber loss ``(1/m) sum_r huber(x_r^T w - y_r, M)`` with CVXPY's ``huber``:
    ``r^2`` for ``|r| <= M``, ``2 M |r| - M^2`` beyond.  Smooth with ``ell'' <= 2``.

    Parameters
    ----------
    X : array_like, shape (m, d)
        The node's samples ``x_r^T`` as rows: finite, at least one row.
    y : array_like, shape (m,)
        The targets ``y_r``.
    M : float, default 1.0
        The threshold ``M > 0`` between the quadratic and the linear part.
    l1 : float, default 0.0
        ``eta >= 0``: adds ``eta ||w||_1`` to the loss.
    l2 : float, default 0.0
        ``kappa >= 0``: adds ``kappa ||w||_2^2`` to the loss.

    Raises
    ------
    DataError
        ``X`` is not a finite non-empty ``(m, d)`` matrix, or ``y`` is not finite or not of
        length ``m``.
    ParameterError
        ``M`` not positive and finite.
    ParameterError
        ``l1`` or ``l2`` negative, infinite or NaN.

    Examples
    --------
    >>> import numpy as np, gtvmodel as gm
    >>> X = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    >>> loss = gm.HuberLoss(X, [1.0, 2.0, 3.0], M=1.0)
    >>> loss.value([0.0, 0.0])  # (1 + 3 + 5) / 3: two residuals beyond M
    3.0
    >>> round(loss.conjugate([0.0, 0.0]), 4)  # the squared loss's: min_w L(w) has |r| <= M
    -0.1481
    >>> np.round(loss.prox([0.0, 0.0], 0.5), 4)
    array([0.5   , 0.7143])
    """

    kind = "huber"
    ell_curvature = 2.0
    exact_prox = True
    piecewise_quadratic = True

    def __init__(self, X: Any, y: Any, M: float = 1.0, *, l1: float = 0.0, l2: float = 0.0):
        super().__init__(X, y, l1=l1, l2=l2)
        self.M = check_scalar(M, "M", min_val=0.0, include_boundaries="neither", where="HuberLoss")

    def _row_param(self) -> np.ndarray:
        return np.full(self.m, self.M)

    @staticmethod
    def _residual_norm_bound(level, p_min, p_sq):
        # huber(r, M) >= 2 M |r| - M^2 row by row, so 2 min(M) ||r||_1 <= level + sum M^2
        return (np.maximum(level, 0.0) + p_sq) / (2.0 * p_min)

    @staticmethod
    def _linear_minorants(y, p):
        # huber(t - y, M) >= +-2 M (t - y) - M^2
        return [(2.0 * p, -2.0 * p * y - p**2), (-2.0 * p, 2.0 * p * y - p**2)]

    @staticmethod
    def _ell(t, y, p):
        r = np.abs(t - y)
        return np.where(r <= p, r**2, 2.0 * p * r - p**2)

    @staticmethod
    def _ell_cvx(t, y, p):
        # huber(r, M) = M^2 huber(r / M, 1): lets M vary per row in one expression.
        return cp.multiply(p**2, cp.huber(cp.multiply(1.0 / p, t - y), 1.0))

    @staticmethod
    def _ell_d1(t, y, p):
        return 2.0 * np.clip(t - y, -p, p)

    @staticmethod
    def _ell_d2(t, y, p):
        return np.where(np.abs(t - y) <= p, 2.0, 0.0)

    # conjugate of huber(t - y, M): v y + v^2 / 4 on |v| <= 2 M
    @staticmethod
    def _ell_conj(v, y, p):
        return v * y + 0.25 * v**2

    @staticmethod
    def _ell_conj_cvx(v, y, p):
        return cp.multiply(y, v) + 0.25 * cp.square(v)

    @staticmethod
    def _ell_conj_bounds(y, p):
        return -2.0 * p, 2.0 * p

    def to_spec(self) -> TermSpec:
        """The data-fit spec plus the threshold ``M``."""
        spec = super().to_spec()
        return TermSpec(spec.kind, {**spec.params, "M": self.M}, spec.arrays)

    @classmethod
    def from_spec(cls, spec: TermSpec) -> HuberLoss:
        """``HuberLoss(X, y, M, l1=eta, l2=kappa)`` (``M > 0``; omitted: 1)."""
        spec.check_keys(optional=("l1", "l2", "M"))
        return cls(spec.array("X"), spec.array("y"), M=spec.real("M", 1.0, strict=True),
                   **spec.regularizers())

    def __repr__(self) -> str:
        return f"HuberLoss(m={self.m}, d={self.dim}, M={self.M:g}{self._reg_repr()})"


# =====================================================================  other losses
class ZeroLoss(Loss):
    """``L(w) = 0``: a node without local data (only its neighbours and regularizers inform it).

    Its conjugate is ``iota{s = 0}``; with ``l2 = kappa`` it is ``||s||^2 / (4 kappa)``
    (docs/conventions.md).

    Parameters
    ----------
    l1 : float, default 0.0
        ``eta >= 0``: adds ``eta ||w||_1`` to the loss.
    l2 : float, default 0.0
        ``kappa >= 0``: adds ``kappa ||w||_2^2`` to the loss.

    Raises
    ------
    ParameterError
        ``l1`` or ``l2`` negative, infinite or NaN.

    Examples
    --------
    >>> import gtvmodel as gm
    >>> gm.ZeroLoss().conjugate([1.0, 0.0]), gm.ZeroLoss().conjugate([0.0, 0.0])
    (inf, 0.0)
    >>> loss = gm.ZeroLoss(l2=1.0)
    >>> loss.value([1.0, 2.0]), loss.conjugate([2.0, 0.0])
    (5.0, 1.0)
    >>> loss.prox([1.0, 2.0], 0.5)  # v / (1 + 2 tau kappa)
    array([0.5, 1. ])
    """

    kind = "zero"
    exact_prox = True
    isotropic_prox = True
    has_data = False

    @property
    def is_zero(self) -> bool:
        """True unless a regularizer ``eta ||w||_1`` or ``kappa ||w||^2`` is set."""
        return not self.l1 and not self.l2

    def _base_expression(self, x):
        return cp.Constant(0.0)

    def _base_value(self, w):
        return 0.0

    def _base_gradient(self, w):
        return np.zeros_like(w)

    def _base_hessian_bounds(self, d):
        return np.zeros((d, d)), np.zeros((d, d))

    def _conjugate_closed(self, S):
        k = S.shape[0]
        return zero_conjugate_rows(np.full(k, self.l1), np.full(k, self.l2), S)

    def _base_conjugate_cvx(self, d):
        return cp.Constant(np.zeros(d)), cp.Constant(0.0), []

    def to_spec(self) -> TermSpec:
        """``{"kind": "zero", "l1": eta, "l2": kappa}``."""
        return TermSpec(self.kind, self._regularizer_spec())

    @classmethod
    def from_spec(cls, spec: TermSpec) -> ZeroLoss:
        """``ZeroLoss(l1=eta, l2=kappa)``."""
        spec.check_keys(optional=("l1", "l2"))
        return cls(**spec.regularizers())

    def __repr__(self) -> str:
        return f"ZeroLoss({self._reg_repr()[2:]})"


class QuadraticLoss(Loss):
    """Convex clustering loss ``L(w) = ||w - a||^2`` (Hessian ``2 I``).

    Conjugate ``L*(s) = s^T a + ||s||^2 / 4`` (docs/conventions.md); prox ``(v + 2 tau a) / (1 + 2
    tau)``.

    Parameters
    ----------
    a : array_like, shape (d,)
        The centre ``a`` of ``||w - a||_2^2``: finite.
    l1 : float, default 0.0
        ``eta >= 0``: adds ``eta ||w||_1`` to the loss.
    l2 : float, default 0.0
        ``kappa >= 0``: adds ``kappa ||w||_2^2`` to the loss.

    Raises
    ------
    DataError
        ``a`` is not a finite non-empty vector.
    ParameterError
        ``l1`` or ``l2`` negative, infinite or NaN.

    Examples
    --------
    >>> import gtvmodel as gm
    >>> loss = gm.QuadraticLoss([1.0, -1.0])
    >>> loss.value([0.0, 0.0]), loss.conjugate([2.0, 0.0])
    (2.0, 3.0)
    >>> loss.prox([0.0, 0.0], 0.5)
    array([ 0.5, -0.5])
    >>> loss.smoothness, loss.strong_convexity  # beta_i and alpha of Theorem 2
    (2.0, 2.0)
    """

    kind = "quadratic"
    spec_arrays = {"a": ("d",)}
    exact_prox = True
    isotropic_prox = True

    def squared_rows(self, d):
        """``(I, a, 1)``: ``||w - a||^2 = ||a - I w||^2 / 1``."""
        return np.eye(d), self.a, 1

    def __init__(self, a: Any, *, l1: float = 0.0, l2: float = 0.0):
        super().__init__(l1=l1, l2=l2)
        a = as_finite_array(a, "a", owner="QuadraticLoss")
        if a.ndim == 0:
            a = a[None]
        if a.ndim != 1 or a.size == 0:
            raise DataError(f"QuadraticLoss: a must be a non-empty vector, got shape {a.shape}")
        self.a = a

    @property
    def dim(self) -> int:
        """``d``, the length of the centre ``a``."""
        return int(self.a.shape[0])

    def _base_expression(self, x):
        return cp.sum_squares(x - self.a)

    def _base_value(self, w):
        r = w - self.a
        return float(r @ r)

    def _base_gradient(self, w):
        return 2.0 * (w - self.a)

    def _base_hessian_bounds(self, d):
        return 2.0 * np.eye(d), 2.0 * np.eye(d)

    def _conjugate_closed(self, S):
        k = S.shape[0]
        return quadratic_conjugate_rows(np.broadcast_to(self.a, S.shape), np.full(k, self.l1),
                                        np.full(k, self.l2), S)

    def _base_conjugate_cvx(self, d):
        s = cp.Variable(d, name="s_quad")
        return s, quadratic_conjugate_cvx(s, self.a), []

    def to_spec(self) -> TermSpec:
        """``{"kind": "quadratic", "l1": eta, "l2": kappa}`` and the centre ``a`` (``(d,)``)."""
        return TermSpec(self.kind, self._regularizer_spec(), {"a": self.a})

    @classmethod
    def from_spec(cls, spec: TermSpec) -> QuadraticLoss:
        """``QuadraticLoss(a, l1=eta, l2=kappa)``."""
        spec.check_keys(optional=("l1", "l2"))
        return cls(spec.array("a"), **spec.regularizers())

    def __repr__(self) -> str:
        return f"QuadraticLoss(d={self.dim}{self._reg_repr()})"


class SymbolicLoss(Loss):
    """A user-written scalar convex DCP expression in one node's variable.

    Created by :meth:`gtvmodel.GTVModel.set_loss`; ``variable`` is the node's ``cp.Variable``.
    Numeric evaluation assigns ``variable.value`` and reads the expression's value.  Its
    conjugate has no formula: the dual and the certificate derive it from CVXPY's conic form
    (:mod:`gtvmodel.duality.conic`, docs/conventions.md).

    Parameters
    ----------
    expr : cvxpy.Expression
        A scalar convex (DCP) expression ``L_i(w_i)``.
    variable : cvxpy.Variable
        The node's variable ``w_i`` (``model.var(node)``); ``expr`` may involve no other
        variable.
    node : hashable, optional
        The node's label, named in error messages.

    Raises
    ------
    LossError
        ``expr`` is not a CVXPY expression, not scalar, not DCP or not convex, or involves a
        variable other than ``variable``.

    Examples
    --------
    >>> import cvxpy as cp, numpy as np, gtvmodel as gm
    >>> w = cp.Variable(2)
    >>> loss = gm.SymbolicLoss(cp.sum_squares(w - np.array([1.0, -1.0])), w)
    >>> loss.value([0.0, 0.0]), loss.dim
    (2.0, 2)
    >>> np.round(loss.prox([0.0, 0.0], 0.5), 4)  # one CVXPY solve
    array([ 0.5, -0.5])
    """

    kind = "symbolic"
    base_smooth = False  # unknown: no gradient or constants are claimed
    lower_bound = -np.inf  # unknown (the certificate computes -h*(0) by conic duality)

    def __init__(self, expr: cp.Expression, variable: cp.Variable, node: Any = None):
        super().__init__()
        where = f"node {node!r}" if node is not None else "symbolic loss"
        if not isinstance(expr, cp.Expression):
            raise LossError(f"{where}: loss must be a CVXPY expression, got {type(expr).__name__}")
        if expr.size != 1:
            raise LossError(f"{where}: loss must be a scalar expression, got shape {expr.shape}")
        if not expr.is_dcp():
            raise LossError(f"{where}: loss {expr} is not DCP")
        if not expr.is_convex():
            raise LossError(f"{where}: loss {expr} is not convex")
        check_own_variable(expr, variable, node)
        self.expr = cp.reshape(expr, ()) if expr.shape != () else expr
        self.variable = variable
        self.node = node

    @property
    def dim(self) -> int:
        """``d``, the size of the node's variable."""
        return int(self.variable.size)

    def expression(self, x: cp.Expression) -> cp.Expression:
        """The user's expression ``L_i(w_i)`` itself; only in its own node's variable
        (:class:`LossError` for another ``x``)."""
        if x is not self.variable:
            raise LossError(
                f"node {self.node!r}: a symbolic loss is an expression in its node's variable "
                "and cannot be re-expressed in another variable"
            )
        return self.expr

    def _base_expression(self, x):  # pragma: no cover - expression() is overridden
        return self.expression(x)

    def domain_constraints(self) -> list[cp.Constraint]:
        """The expression's CVXPY domain (``expr.domain``): the loss is ``+inf`` outside it
        (docs/conventions.md)."""
        return list(self.expr.domain)

    def _prox_variable(self, d: int) -> cp.Variable:
        return self.variable

    def _base_value(self, w):
        # +inf outside the expression's domain: CVXPY's numeric value is not trustworthy there
        # (finite and too small for inv_pos/power(x, -1)/quad_over_lin, NaN for log)
        return checked_value(self.expr, self.variable, w)

    def to_spec(self) -> TermSpec:
        """Symbolic losses have no file format (:class:`UnsupportedError`)."""
        raise UnsupportedError("symbolic losses cannot be saved")

    def __repr__(self) -> str:
        return f"SymbolicLoss({self.expr})"


# =====================================================================  conjugate formulas
def _soft(S: Any, eta: Any) -> Any:
    """Row-wise soft thresholding ``sign(S) max(|S| - eta, 0)`` (``eta`` per row; any array
    namespace, :mod:`gtvmodel._xp`)."""
    xp = _xp.namespace(S)
    return xp.sign(S) * xp.maximum(xp.abs(S) - eta[:, None], 0.0)


def l2_conjugate_cvx(S: cp.Expression, kappa: Any) -> cp.Expression:
    """``sum_k ||S_k||^2 / (4 kappa_k)``: the conjugate of ``kappa ||.||^2`` on rows of ``S``
    (a ``(d,)`` vector with scalar ``kappa``, or ``(k, d)`` with ``kappa`` of shape ``(k,)``)."""
    kappa = np.asarray(kappa, dtype=float)
    if kappa.ndim == 0:
        return cp.sum_squares(S) / (4.0 * float(kappa))
    return cp.sum_squares(cp.multiply(1.0 / np.sqrt(4.0 * kappa)[:, None], S))


def zero_conjugate_rows(eta: np.ndarray, kappa: np.ndarray, S: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Conjugate of ``eta ||.||_1 + kappa ||.||^2`` (a zero loss with regularizers) on rows.

    ``kappa > 0``: ``||soft(s, eta)||^2 / (4 kappa)`` (finite everywhere).  ``kappa = 0``: the
    indicator of ``||s||_inf <= eta``; ``rho = |soft(s, eta)|`` is the size of the part outside
    the domain, entrywise (nonnegative, like every ``rho`` the certificate charges: a signed
    one would read as "inside" and go uncharged).  Returns ``(values, rho, magnitudes)``:
    ``magnitudes`` bound the sum of the absolute summands (for the rounding bound; here the
    values themselves, a sum of squares)."""
    soft = _soft(S, eta)
    val = np.zeros(S.shape[0])
    rho = np.zeros_like(S)
    pos = kappa > 0
    val[pos] = (soft[pos] ** 2).sum(axis=1) / (4.0 * kappa[pos])
    rho[~pos] = np.abs(soft[~pos])
    return val, rho, val.copy()


def quadratic_conjugate_cvx(S: cp.Expression, a: np.ndarray) -> cp.Expression:
    """``sum_k S_k^T a_k + ||S_k||^2 / 4``: the conjugate of ``||w - a||^2``
    (docs/conventions.md)."""
    return cp.sum(cp.multiply(S, a)) + 0.25 * cp.sum_squares(S)


def quadratic_conjugate_rows(a: np.ndarray, eta: np.ndarray, kappa: np.ndarray, S: np.ndarray
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Conjugate of ``||w - a||^2 + eta ||w||_1 + kappa ||w||^2`` on rows (closed form,
    coordinatewise): ``sum_j soft(t_j, eta)^2 / (4 (1 + kappa)) - a_j^2`` with ``t = s + 2 a``.

    Evaluated without cancellation: where ``|t_j| > eta`` the coordinate's term is
    ``(s_j^2/4 + s_j a_j - eta |t_j|/2 + eta^2/4 - kappa a_j^2) / (1 + kappa)`` (the two
    ``a_j^2`` of the textbook form cancel exactly), else ``-a_j^2``.  (With ``a ~ 1e5`` the
    textbook form loses ``1e-6`` to rounding.)  Returns ``(values, rho, magnitudes)``
    (``rho = 0``; ``magnitudes``: the sums of the absolute summands)."""
    eta = np.asarray(eta, dtype=float)[:, None]
    k1 = (1.0 + np.asarray(kappa, dtype=float))[:, None]
    kap = k1 - 1.0
    t = np.abs(S + 2.0 * a)
    on = t > eta
    terms = (0.25 * S**2, S * a, -0.5 * eta * t, 0.25 * eta**2 + 0.0 * S, -kap * a**2)
    val = np.where(on, sum(terms) / k1, -(a**2)).sum(axis=1)
    mag = np.where(on, sum(np.abs(x) for x in terms) / k1, a**2).sum(axis=1)
    return val, np.zeros_like(S), mag


def squared_maximizers(e: np.ndarray, V: np.ndarray, q: np.ndarray, kappa: np.ndarray,
                       S: np.ndarray, base: np.ndarray | None = None) -> np.ndarray:
    """Maximizers ``w_k`` of ``s_k^T w - (1/m)||y - X w||^2 - kappa ||w||^2`` on rows.

    Stationarity ``(Q + kappa I) w = q + s/2`` (``Q = X^T X / m = V diag(e) V^T``,
    ``q = X^T y / m``), solved through the eigen-decompositions (``(k, d)``/``(k, d, d)``) on
    the numerical range ``e_j + kappa > d eps max_j e_j`` (pseudo-inverse elsewhere).  The
    point only has to be *good*: soundness comes from :func:`datafit_conjugate_split`, which
    evaluates the conjugate exactly at whatever point it is given.  With ``base`` (e.g. the
    candidate weights) the step is taken from there: the components of ``base`` along the
    numerically null directions are kept instead of set to zero.  Any array namespace
    (:mod:`gtvmodel._xp`; ``d >= 1``).
    """
    xp = _xp.namespace(S)
    den = e + kappa[:, None]
    cut = e.shape[1] * _EPS * xp.clip(xp.max(xp.abs(e), axis=1), min=1e-300)
    ok = den > cut[:, None]
    z = xp.einsum("kji,kj->ki", V, q + 0.5 * S)  # V^T (q + s/2)
    if base is None:
        return xp.einsum("kij,kj->ki", V, xp.where(ok, z / xp.where(ok, den, 1.0), 0.0))
    zb = xp.einsum("kji,kj->ki", V, base)  # V^T base
    step = xp.where(ok, (z - den * zb) / xp.where(ok, den, 1.0), 0.0)
    return base + xp.einsum("kij,kj->ki", V, step)


def datafit_conjugate_split(cls: type[DataFitLoss], X: np.ndarray, y: np.ndarray,
                            p: np.ndarray | None, c: np.ndarray, rn: np.ndarray,
                            kappa: np.ndarray, S: np.ndarray, W: np.ndarray,
                            m_max: int | None = None
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Upper bounds of ``h_k*(s_k)``, ``h = (1/m) sum_r ell(x_r^T w) + kappa ||w||^2``, for
    ``k`` smooth data-fit nodes at once, read off (approximate) maximizers ``W``.

    With the row duals ``v_r = ell'(x_r^T w_k)`` (always in the domain of ``ell*``) the
    infimal convolution ``h*(s) = min { sum_r c_r ell*(v_r) + ||s_2||^2/(4 kappa) :
    sum_r c_r v_r x_r + s_2 = s }`` (docs/conventions.md, ``c_r = 1/m``) is evaluated *exactly* at
    the feasible split ``s_2 = s - X^T(c v)`` when ``kappa > 0`` (``s_2 = 0`` otherwise).
    Whatever ``W`` is, the value is an upper bound of the conjugate at ``s - rho``; the
    residual ``rho`` (zero up to rounding when ``kappa > 0``) must be charged by the caller
    (docs/conventions.md: the sample form is sound however ill-conditioned ``X`` is -- no
    eigen-direction is ever declared null).

    Rows are ``X`` (``(M, d)``) with labels ``y``, row parameters ``p``, weights ``c`` and
    owning node ``rn`` in ``0..k-1``.  Returns ``(values, rho, rounding, magnitudes)``:
    ``|rho|`` as computed (0 when ``kappa > 0``) and a bound of the rounding error made in
    computing it, ``gamma (|s| + sum_r c_r |v_r| |x_r|)`` with ``gamma = (m_max + 4) eps``, so
    that the true residual is at most ``rho + rounding`` entrywise; ``magnitudes`` bound the
    sums of the absolute summands of each value (``ell*(v) = v y + v^2/4`` for squared rows
    cancels; the rounding bound of the value is taken relative to these).

    Any array namespace for row losses whose formulas are written for it (squared rows: the
    device certificate, :mod:`gtvmodel.certificates.device_certificate`), with ``m_max``
    (the most rows of a node, for ``gamma``) given where counting them would cost a pass.
    """
    xp = _xp.namespace(S)
    k = S.shape[0]
    t = xp.einsum("rj,rj->r", X, W[rn])
    if m_max is None:
        m_max = int(np.bincount(rn, minlength=k).max(initial=0))
    with np.errstate(over="ignore", invalid="ignore"):
        v = _absorbed_row_duals(cls, X, y, p, c, rn, S, cls._ell_d1(t, y, p), kappa > 0, m_max)
        contrib = sum_rows_by(rn, (c * v)[:, None] * X, k)
        mag = xp.abs(S) + sum_rows_by(rn, xp.abs(c * v)[:, None] * xp.abs(X), k)
        conj = cls.ell_conjugate(v, y, p)
        val = sum_rows_by(rn, c * conj, k)
        vmag = sum_rows_by(rn, c * cls.ell_conjugate_magnitude(v, y, p), k)
    gamma = (m_max + 4) * _EPS
    rho = S - contrib
    pos = kappa > 0
    s2 = rho[pos]
    val[pos] += xp.sum(s2**2, axis=1) / (4.0 * kappa[pos])
    vmag[pos] += xp.sum(s2**2, axis=1) / (4.0 * kappa[pos])
    rho = xp.where(pos[:, None], 0.0, xp.abs(rho))
    rounding = gamma * mag
    bad = ~xp.isfinite(val) | ~xp.all(xp.isfinite(rho + rounding), axis=1)
    val[bad] = np.inf
    return val, rho, rounding, vmag


def _absorbed_row_duals(cls: type[DataFitLoss], X: np.ndarray, y: np.ndarray,
                        p: np.ndarray | None, c: np.ndarray, rn: np.ndarray, S: np.ndarray,
                        v: np.ndarray, skip: np.ndarray, m_max: int) -> np.ndarray:
    """Row duals ``v`` corrected so that ``sum_r c_r v_r x_r`` matches ``s`` better: one
    minimum-norm step ``X^T (c dv) = s - X^T (c v)`` (batched over the nodes), clipped to
    the rows' conjugate domains and kept node by node only where the residual shrinks.  (The
    duals ``ell'(x_r^T w)`` of a far-away maximizer carry the rounding of ``x_r^T w``; any
    ``v`` gives an exact split, so correcting it is free.)  Nodes in ``skip`` (``kappa > 0``:
    their ``s_2`` slot takes the residual exactly) are left alone.  Any array namespace
    (:func:`datafit_conjugate_split`)."""
    xp = _xp.namespace(S)
    k, d = S.shape
    if X.shape[0] == 0 or not bool(xp.all(xp.isfinite(v))):
        return v
    res = S - sum_rows_by(rn, (c * v)[:, None] * X, k)
    res[skip] = 0.0
    gamma = (m_max + 4) * _EPS
    noise = gamma * (xp.abs(S) + sum_rows_by(rn, xp.abs(c * v)[:, None] * xp.abs(X), k))
    need = xp.any(xp.abs(res) > noise, axis=1)
    if not bool(xp.any(need)):
        return v  # rounding-level already: nothing to gain
    res[~need] = 0.0
    # per node the minimum-norm dv with B^T dv = res, B = diag(c) X_k: dv = B (B^T B)^+ res,
    # batched (one d x d pseudo-inverse per node that needs it; no iterations)
    sel = xp.nonzero(need[rn])[0]  # only the rows of the nodes that need it
    B = c[sel, None] * X[sel]
    nodes = xp.nonzero(need)[0]
    local = xp.full((k,), -1, dtype=sel.dtype, device=_xp.device_of(S))
    local[nodes] = xp.arange(nodes.shape[0], dtype=sel.dtype, device=_xp.device_of(S))
    G = _grouped_grams(local[rn[sel]], B, nodes.shape[0])
    z = xp.einsum("kij,kj->ki", _pinv_sym(G), res[nodes])
    dv = xp.zeros_like(v)
    dv[sel] = xp.einsum("rj,rj->r", B, z[local[rn[sel]]])
    lo, hi = cls._ell_conj_bounds(y, p)
    v2 = _clip(v + dv, lo, hi)
    res2 = S - sum_rows_by(rn, (c * v2)[:, None] * X, k)
    res2[skip] = 0.0
    better = (xp.max(xp.abs(res2), axis=1) < xp.max(xp.abs(res), axis=1)) & ~skip
    return xp.where(better[rn], v2, v)


def _pinv_sym(G: Any) -> Any:
    """Pseudo-inverses of the symmetric PSD ``(k, d, d)`` stack ``G`` (relative cut-off
    ``1e-13``): numpy's eigen-decomposition form, another namespace's ``linalg.pinv``."""
    if _xp.is_numpy(G):
        return np.linalg.pinv(G, rcond=1e-13, hermitian=True)
    return _xp.namespace(G).linalg.pinv(G, rtol=1e-13)


def _clip(v: Any, lo: Any, hi: Any) -> Any:
    """``v`` clipped to ``[lo, hi]`` (row bounds, or ``+-inf`` numbers: no clipping)."""
    if _xp.is_numpy(v):
        return np.clip(v, lo, hi)
    if np.isscalar(lo) and np.isscalar(hi) and np.isinf(lo) and np.isinf(hi):
        return v
    xp = _xp.namespace(v)
    return xp.clip(v, min=_xp.like(np.asarray(lo, dtype=float), v),
                   max=_xp.like(np.asarray(hi, dtype=float), v))


def _grouped_grams(owner: np.ndarray, B: np.ndarray, k: int) -> np.ndarray:
    """``G_j = sum_{r: owner_r = j} b_r b_r^T`` (``(k, d, d)``), summed over row chunks so that
    the ``(rows, d, d)`` outer products are never all held at once (issue 16: at 10^5 nodes they
    were the certificate's peak memory).  Any array namespace (:func:`sum_rows_by`)."""
    M, d = B.shape
    xp = _xp.namespace(B)
    G = xp.zeros((k, d * d), dtype=B.dtype, device=_xp.device_of(B))
    step = max(1, (1 << 21) // max(d * d, 1))
    for a in range(0, M, step):
        Bc = B[a:a + step]
        rows = Bc.shape[0]
        G += sum_rows_by(owner[a:a + step], xp.reshape(Bc[:, :, None] * Bc[:, None, :],
                                                       (rows, d * d)), k)
    return xp.reshape(G, (k, d, d))


def sum_rows_by(rn: np.ndarray, A: np.ndarray, k: int) -> np.ndarray:
    """Sum the rows of ``A`` (``(M, d)``) by owner ``rn``: a ``(k, d)`` array, as one sparse
    product ``R A`` with the ``k x M`` owner matrix ``R`` built in CSR form directly (each
    owner's rows in their order, so the sums are those of a sequential ``bincount``, bit for
    bit; 3-8x faster than a ``bincount`` per column at 2e6 rows, d = 10).  A tensor ``A``
    (with ``rn`` beside it; ``(M,)`` too) goes to :func:`gtvmodel._xp.segment_sum`."""
    if not _xp.is_numpy(A):
        return _xp.segment_sum(rn, A, k)
    A = np.asarray(A, dtype=float)
    if A.ndim == 1:
        return sum_rows_by(rn, A[:, None], k)[:, 0]
    M = A.shape[0]
    if M == 0:
        return np.zeros((k, A.shape[1]))
    indptr = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(np.bincount(rn, minlength=k), out=indptr[1:])
    rows = (np.arange(M) if bool(np.all(rn[1:] >= rn[:-1]))
            else np.argsort(rn, kind="stable"))
    return sp.csr_matrix((np.ones(M), rows, indptr), shape=(k, M)) @ A


def _solve_conjugate(loss: Loss, s: np.ndarray) -> float:
    """``h*(s)`` by solving the problem of :meth:`Loss.conjugate_expression` (inf if infeasible)."""
    cost, cons = loss.conjugate_expression(cp.Constant(s))
    prob = cp.Problem(cp.Minimize(cost), cons)
    run_solver(prob, None, {}, False, False, f"conjugate of {loss!r}")
    if prob.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        return float("inf")
    return float(prob.value)


# =====================================================================  prox (issue 5)
def _cvxpy_prox(loss: Loss, v: np.ndarray, tau: float) -> np.ndarray:
    """``prox_{tau h}(v)`` of one loss by one CVXPY solve (the general path of PU (32))."""
    z = loss._prox_variable(v.shape[0])
    prob = cp.Problem(cp.Minimize(loss.expression(z) + cp.sum_squares(z - v) / (2.0 * tau)))
    run_solver(prob, None, {}, False, False, f"prox of {loss!r}")
    if z.value is None:
        raise SolverError(f"prox of {loss!r}: the solver returned no point",
                          status=prob.status, solver="CLARABEL")
    return np.asarray(z.value, dtype=float).reshape(v.shape)


def smooth_gradients(batches: Sequence[LossBatch], l2: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``grad (L_i + kappa_i ||.||^2)(w_i)`` stacked, ``(n, d)``, over the batches of smooth
    losses (rows of non-smooth batches and of ``l1`` terms are left out; the caller uses them
    only where a gradient exists): the one assembly of the per-node gradients."""
    G = 2.0 * np.asarray(l2, dtype=float)[:, None] * W
    for b in batches:
        if b.cls.base_smooth:
            G += b.gradients(W)
    return G


# =====================================================================  dual-problem parts
@dataclass
class NodePart:
    """One stacked group of split variables of the node conjugates (the dual problem (24)).

    ``contrib`` is its ``(k, d)`` contribution to the node-balance rows, ``cost`` its convex
    cost, ``constraints`` its domain, and ``evaluate()`` returns ``(contrib, cost_rows)`` in
    numpy at the current variable values *projected into the domain* (so the cost is finite and
    exact): the ``(k, d)`` contribution and the ``(k,)`` cost of each node row.
    """

    name: str
    contrib: cp.Expression
    cost: cp.Expression
    constraints: list[cp.Constraint]
    evaluate: Callable[[], tuple[np.ndarray, np.ndarray]]
    #: ``absorb(R)`` moves the variable's value so that its contribution grows by as much of
    #: the ``(k, d)`` residual ``R`` as it can while staying in its domain (None: cannot).
    absorb: Callable[[np.ndarray], None] | None = None
    #: ``magnitude()``: ``(contrib_mag (k, d), cost_mag (k,))``, bounds of the sums of the
    #: absolute summands of the numpy contribution and cost at the current value, for the
    #: rounding bound of sums that may cancel (None: the absolute values themselves suffice).
    magnitude: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None


def scatter_rows(row_of: np.ndarray, idx: np.ndarray, k: int) -> sp.csr_matrix:
    """Sparse ``(k, len(idx))`` matrix adding item ``j`` into row ``row_of[idx[j]]``."""
    return sp.csr_matrix((np.ones(len(idx)), (row_of[idx], np.arange(len(idx)))),
                         shape=(k, len(idx)))


@dataclass
class ConjugateGroup:
    """Nodes of one batch whose conjugates ``h_i*(s_i)`` the certificate evaluates in numpy.

    ``evaluate(S, W0, wloc, rnd)`` (rows of the group's nodes: demands, candidate weights,
    local radii, rounding bounds of ``S``) returns ``(values, rho, rounding, magnitudes,
    wloc, converged)``: upper bounds of ``h_i*(s_i - rho_i)``, the residuals ``|rho_i|`` and a
    bound of their rounding, the sums of the absolute summands, the updated local radii and
    the nodes where the bound was obtained.  ``exact``: every node converges (closed forms);
    otherwise the nodes that did not fall back to the certificate's CVXPY path.
    """

    nodes: np.ndarray
    exact: bool
    evaluate: Callable[..., tuple[np.ndarray, ...]]
    #: ``evaluate`` takes tensors of another array library too (``S``, ``W0``, ``wloc`` and
    #: ``rnd`` on one device; its results are then there, but ``converged``): the device
    #: certificate (:mod:`gtvmodel.certificates.device_certificate`) runs it where the demands are.
    array_api: bool = False


# =====================================================================  stacked batches
class LossBatch:
    """All library losses of one class, stacked for vectorized evaluation and compilation.

    ``LossBatch(cls, nodes, losses, n, d)`` builds the batch class the loss class names
    (:attr:`Loss.batch_class`); ``nodes`` are the positions of the nodes in the batch.  The
    hooks below are what the engines call (the exact problem, the dual, the certificate,
    Algorithm 1's prox and theory); a batch overrides those its losses support and inherits the
    neutral answers (no expression, zero values, no growth, no exact prox, no numpy conjugate)
    otherwise.
    """

    #: True when :meth:`_prox` is written against the array API (:mod:`gtvmodel._xp`): the
    #: node update then runs on other array libraries' tensors as they are (Algorithm 1's
    #: ``device=`` backend); otherwise :meth:`prox` computes it in numpy on the CPU.
    array_api: ClassVar[bool] = False

    def __new__(klass, cls: type[Loss] | None = None, *args: Any, **kwargs: Any) -> LossBatch:
        if klass is LossBatch:
            target = getattr(cls, "batch_class", None)
            if target is None:
                raise UnsupportedError(f"{getattr(cls, '__name__', cls)!s} has no vectorized "
                                       "batch (symbolic losses are compiled node by node)")
            return super().__new__(target)
        return super().__new__(klass)

    def __init__(self, cls: type[Loss], nodes: np.ndarray, losses: Sequence[Loss], n: int,
                 d: int):
        self.cls = cls
        self.nodes = np.asarray(nodes, dtype=np.int64)
        self.losses = list(losses)
        self.n, self.d = n, d
        self.l1 = np.array([ls.l1 for ls in self.losses], dtype=float)
        self.l2 = np.array([ls.l2 for ls in self.losses], dtype=float)
        self._shared: dict[str, Any] = {}

    def shared(self, name: str, build: Callable[[], _T]) -> _T:
        """The data-derived artefact ``name`` (a function of the losses alone: Gram matrices,
        their eigen-decompositions), built by ``build()`` once and shared with the batches
        :meth:`share_data` linked to this one."""
        if name not in self._shared:
            self._shared[name] = build()
        return self._shared[name]

    def seal(self) -> LossBatch:
        """Mark the attributes the batch has now (its stacked data, after construction) as its
        data, as opposed to the run state later calls add (prox operators, active sets, device
        copies): :meth:`sibling` copies the former only.  Returns the batch."""
        self._data_fields = frozenset(self.__dict__) | {"_data_fields"}
        return self

    def sibling(self) -> LossBatch:
        """A new batch over the same losses that shares this (sealed, :meth:`seal`) batch's
        stacked arrays and :meth:`shared` artefacts by reference, without its run state:
        Algorithm 1's node-update group of a model's whole structure batch, built without
        stacking the losses again (the arrays are the model structure's, read-only)."""
        fields = self.__dict__.get("_data_fields")
        if fields is None:
            raise UnsupportedError(f"{type(self).__name__}.sibling: the batch is not sealed")
        twin = object.__new__(type(self))
        twin.__dict__.update({k: self.__dict__[k] for k in fields})
        return twin

    def share_data(self, batches: Iterable[LossBatch]) -> None:
        """Share the data-derived artefacts of :meth:`shared` with the batch among ``batches``
        holding the same losses at the same positions (the model's structure batch), so that
        Algorithm 1's prox group and the certificate compute them once per model version (a
        cold certificate after a run repeats no eigen-decomposition; issue 16).  Run state
        (prox operators, active sets) stays with each batch."""
        for b in batches:
            if (type(b) is type(self) and np.array_equal(b.nodes, self.nodes)
                    and all(x is y for x, y in zip(b.losses, self.losses, strict=True))):
                self._shared = b._shared
                return

    @property
    def kind(self) -> str:
        """The loss class's short name."""
        return self.cls.kind

    @property
    def has_data(self) -> bool:
        """Whether the losses carry data (:attr:`Loss.has_data`)."""
        return self.cls.has_data

    # ------------------------------------------------------------ the primal (16)
    def expression(self, w_flat: cp.Expression, W: cp.Expression) -> cp.Expression | None:
        """The batch's summed (unregularized) loss as one CVXPY expression (None: zero)."""
        return None

    def values(self, W: np.ndarray) -> np.ndarray:
        """Per-node (unregularized) loss values, an ``(n,)`` array (0 outside the batch)."""
        return np.zeros(self.n)

    def gradients(self, W: np.ndarray) -> np.ndarray:
        """Stacked (unregularized) gradients, an ``(n, d)`` array (0 outside the batch)."""
        return np.zeros((self.n, self.d))

    def hessian_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Global bounds ``H_lo <= hess L_i <= H_hi`` of the (unregularized) losses, ``(k, d,
        d)`` each in batch order (Theorem 2's ``alpha``/``beta``)."""
        if not self.cls.base_smooth:
            raise UnsupportedError(f"{self.cls.__name__} is not smooth: it has no Hessian bound")
        lo, hi = zip(*(ls._base_hessian_bounds(self.d) for ls in self.losses), strict=True)
        return np.stack(lo), np.stack(hi)

    def max_rows(self) -> int:
        """The largest number of samples of a node (rounding bounds of sums over samples)."""
        return 0

    def hessians(self, W: np.ndarray) -> np.ndarray | None:
        """``hess L_i(w_i)`` (unregularized) of the batch's nodes at ``W`` (``(n, d)``), a
        ``(k, d, d)`` array in batch order (the polish's Newton steps,
        :mod:`gtvmodel.solve.polish`); None where the batch has none (the default)."""
        return None

    # ------------------------------------------------------------ certified radii
    def growth_pieces(self, level: np.ndarray) -> dict[str, np.ndarray] | None:
        """Residual-growth facts on the sublevel sets (data-fit losses); None otherwise."""
        return None

    def level_halfspaces(self, level: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Half-spaces holding on ``{L_i <= level_i}``; None if there are none."""
        return None

    def sublevel_radii(self, level: np.ndarray) -> np.ndarray:
        """Bounds ``r_i >= ||w||_inf`` on ``{L_i <= level_i}`` in batch order (``inf``: the
        loss is not coercive)."""
        return np.full(self.nodes.size, np.inf)

    # ------------------------------------------------------------ node update PU (32)
    def prepare(self, tau: Any) -> None:
        """Compute the one-off data of :meth:`prox` for the steps ``tau`` (``(k,)``, numpy or
        a tensor) now: the mask :meth:`prox_supported` (subclasses add their factorizations),
        so that the first node update of Algorithm 1 costs what every later one does."""
        self.prox_supported()

    def prox_supported(self) -> np.ndarray:
        """Boolean mask of the batch's nodes whose prox :meth:`prox` computes exactly
        (:meth:`Loss.has_exact_prox`)."""
        ok = self.__dict__.get("_prox_ok")
        if ok is None:
            ok = np.array([ls.has_exact_prox() for ls in self.losses], dtype=bool)
            self.__dict__["_prox_ok"] = ok
        return ok

    def prox(self, V: np.ndarray, tau: np.ndarray, W0: np.ndarray | None = None) -> np.ndarray:
        """``prox_{tau_i h_i}(v_i)`` for every node of the batch, ``h_i = L_i + eta_i ||.||_1 +
        kappa_i ||.||^2`` (the node update PU (32) without constraints); ``V`` is ``(k, d)`` in
        batch order, ``tau`` ``(k,)`` positive, ``W0`` an optional start for Newton paths.

        Raises :class:`UnsupportedError` for nodes without an exact path
        (:meth:`prox_supported`).  ``V``, ``tau`` (and ``W0``) may be another array library's
        tensors: batches with :attr:`array_api` compute there, the others in float64 numpy on
        the CPU (the result is moved back beside ``V``).
        """
        ok = self.prox_supported()
        if not ok.all():
            i = int(self.nodes[np.flatnonzero(~ok)[0]])
            raise UnsupportedError(f"node at position {i}: {self.losses[0]!r} has no exact "
                                   "vectorized prox (use the CVXPY path)")
        if _xp.is_numpy(V):
            return self._prox(np.asarray(V, dtype=float), np.asarray(tau, dtype=float), W0)
        if self.array_api:
            return self._prox(V, tau, W0)
        W0n = None if W0 is None else _xp.to_numpy(W0)
        return _xp.like(self._prox(_xp.to_numpy(V), _xp.to_numpy(tau), W0n), V)

    def _on(self, name: str, a: np.ndarray, ref: Any) -> Any:
        """The batch's numpy constant ``a`` beside ``ref`` (:func:`gtvmodel._xp.cached_like`)."""
        return _xp.cached_like(self, name, a, ref)

    def _prox(self, V: np.ndarray, tau: np.ndarray, W0: np.ndarray | None) -> np.ndarray:
        raise UnsupportedError(f"{self.cls.__name__} has no exact vectorized prox")

    # ------------------------------------------------------------ conjugates (dual, certificate)
    def dual_part(self, inset: np.ndarray, row_of: np.ndarray, k: int) -> NodePart | None:
        """The stacked split variables of ``L_i*`` (unregularized) of the batch's nodes with
        ``inset[i]``, row ``row_of[i]`` of a ``(k, d)`` node-balance block (None: no node)."""
        raise UnsupportedError(f"{self.cls.__name__} has no dual-problem part")

    def conjugate_group(self, free: np.ndarray) -> ConjugateGroup | None:
        """The certificate's numpy path for the batch's nodes with ``free`` (no constraint):
        None where the batch has none (the certificate's CVXPY problem of
        :meth:`dual_part` then bounds them)."""
        return None

    def null_space_factors(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(e, V)`` with ``V diag(e) V^T`` proportional to each node's Gram matrix: its
        numerically null directions are subspace conditions of ``dom L_i*`` (repair step 2);
        None when the domain has none this way."""
        return None

    # ------------------------------------------------------------ direct solvers
    def diagonal_quadratic(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(c, b)``, ``(k, d)`` each in batch order, with ``L_i(w) = sum_j (c_ij w_j^2 - 2
        b_ij w_j) + const`` (unregularized; ``c >= 0``, ``b_ij = 0`` where ``c_ij = 0``): the
        node term of the direct solvers of :mod:`gtvmodel.solve.direct`, separable per
        coordinate.  Rows are NaN at nodes whose loss has no such form; None (the default)
        when no loss of the batch has one."""
        return None


class ZeroBatch(LossBatch):
    """Zero losses (with regularizers): only the isotropic prox."""

    array_api = True

    def hessians(self, W):
        """0."""
        return np.zeros((self.nodes.size, self.d, self.d))

    def _prox(self, V, tau, W0):
        s = 1.0 + 2.0 * tau * self._on("l2", self.l2, V)
        return _soft(V / s[:, None], tau * self._on("l1", self.l1, V) / s)


class QuadraticBatch(LossBatch):
    """Convex clustering losses ``||w_i - a_i||^2``, centres stacked as ``a`` (``(k, d)``)."""

    array_api = True

    def __init__(self, cls, nodes, losses, n, d):
        super().__init__(cls, nodes, losses, n, d)
        self.a = np.vstack([ls.a for ls in self.losses])

    def expression(self, w_flat, W):
        """``sum_i ||w_i - a_i||^2`` over the batch's nodes as one CVXPY expression."""
        return cp.sum_squares(W[self.nodes, :] - self.a)

    def values(self, W):
        """``||w_i - a_i||^2`` at the batch's nodes, ``(n,)`` (0 elsewhere)."""
        out = np.zeros(self.n)
        out[self.nodes] = ((W[self.nodes] - self.a) ** 2).sum(axis=1)
        return out

    def gradients(self, W):
        """``2 (w_i - a_i)`` at the batch's nodes, ``(n, d)`` (0 elsewhere)."""
        out = np.zeros((self.n, self.d))
        out[self.nodes] = 2.0 * (W[self.nodes] - self.a)
        return out

    def hessian_bounds(self):
        """``H_lo = H_hi = 2 I`` for every node (``alpha_i = beta_i = 2``)."""
        H = np.broadcast_to(2.0 * np.eye(self.d), (self.nodes.size, self.d, self.d)).copy()
        return H, H.copy()

    def hessians(self, W):
        """``2 I`` for every node."""
        return self.hessian_bounds()[0]

    def sublevel_radii(self, level):
        """``||a||_inf + sqrt(level)`` on ``{||w - a||^2 <= level}``."""
        lv = np.maximum(np.asarray(level, dtype=float)[self.nodes], 0.0)
        return (np.abs(self.a).max(axis=1) + np.sqrt(lv)) * (1.0 + 1e-12)

    def _prox(self, V, tau, W0):
        """``soft((2 tau a + v) / s, tau eta / s)`` with ``s = 1 + 2 tau (1 + kappa)`` (any
        array namespace)."""
        s = 1.0 + 2.0 * tau * self._on("l2", self.l2, V) + 2.0 * tau
        return _soft((V + 2.0 * tau[:, None] * self._on("a", self.a, V)) / s[:, None],
                     tau * self._on("l1", self.l1, V) / s)

    def diagonal_quadratic(self):
        """``c = 1``, ``b = a``: ``||w - a||^2 = sum_j (w_j^2 - 2 a_j w_j) + ||a||^2``."""
        return np.ones_like(self.a), self.a

    def dual_part(self, inset, row_of, k):
        """Split variables ``s_i`` with cost ``L_i*(s_i) = s_i^T a_i + ||s_i||^2 / 4``
        (docs/conventions.md) for the nodes with ``inset``."""
        sel = np.flatnonzero(inset[self.nodes])
        if sel.size == 0:
            return None
        idx, a = self.nodes[sel], self.a[sel]
        V = cp.Variable((len(idx), self.d), name="s_quad")
        P = scatter_rows(row_of, idx, k)

        def ev():
            s = V.value
            return P @ s, P @ ((s * a).sum(axis=1) + 0.25 * (s**2).sum(axis=1))

        def mag():
            s = V.value
            return P @ np.abs(s), P @ (np.abs(s * a).sum(axis=1) + 0.25 * (s**2).sum(axis=1))

        return NodePart("quadratic", P @ V, quadratic_conjugate_cvx(V, a), [], ev, None, mag)

    def conjugate_group(self, free):
        """Closed form :func:`quadratic_conjugate_rows` (any regularizers)."""
        sel = np.flatnonzero(free)
        a, l1, l2 = self.a[sel], self.l1[sel], self.l2[sel]

        def evaluate(S, W0, wloc, rnd):
            val, rho, mag = quadratic_conjugate_rows(a, l1, l2, S)
            return val, rho, np.zeros_like(S), mag, wloc, np.ones(sel.size, dtype=bool)

        return ConjugateGroup(self.nodes[sel], True, evaluate)


class SampleBatch(LossBatch):
    """Losses that are means over their node's ``m_i`` samples, stacked once: samples ``Xs``
    (``(M, p)``, grouped by node: node ``j`` of the batch owns rows ``starts[j]:starts[j] +
    ms[j]``, ``row_node[r]`` is the model position of row ``r``), targets ``y`` and row weights
    ``c_r = 1/m_i``; the Gram matrices ``X_i^T X_i`` are computed once (:meth:`gram`)."""

    def __init__(self, cls, nodes, losses, n, d):
        super().__init__(cls, nodes, losses, n, d)
        self.ms = np.array([ls.m for ls in self.losses], dtype=np.int64)
        self.row_node = np.repeat(self.nodes, self.ms)
        self.Xs = np.vstack([ls.X for ls in self.losses])
        self.y = np.concatenate([ls.y for ls in self.losses])
        self.c = np.repeat(1.0 / self.ms, self.ms)
        self.starts = np.concatenate([[0], np.cumsum(self.ms)[:-1]])

    def max_rows(self):
        """``max_i m_i``."""
        return int(self.ms.max(initial=0))

    def gram(self) -> np.ndarray:
        """``X_i^T X_i`` per node, ``(k, p, p)`` (cached)."""
        return self.shared("gram", lambda: _grouped_gram(self.Xs, np.ones(self.Xs.shape[0]),
                                                         self.starts))


class DataFitBatch(SampleBatch):
    """Data-fit losses ``(1/m_i) sum_r ell(x_r^T w_i, y_r)`` of one class, stacked once.

    The node samples are stacked (``Xs``, ``(M, d)``, grouped by node; ``starts``/``local``
    the groups) and into a sparse block matrix ``X_blk`` of shape ``(M, n*d)`` acting on the
    C-ordered flat parameter vector, with row weights ``c_r = 1/m_i`` and ``row_node[r] = i``.
    The Gram matrices ``X_i^T X_i`` and their eigen-decompositions are computed once
    (:meth:`gram`, :meth:`gram_eigh`).
    """

    def __init__(self, cls, nodes, losses, n, d):
        super().__init__(cls, nodes, losses, n, d)
        self.local = np.repeat(np.arange(self.ms.size), self.ms)
        M = self.Xs.shape[0]
        rows = np.repeat(np.arange(M), d)
        cols = (self.row_node[:, None] * d + np.arange(d)[None, :]).ravel()
        self.X_blk = sp.csr_matrix((self.Xs.ravel(), (rows, cols)), shape=(M, n * d))
        params = [ls._row_param() for ls in self.losses]
        self.p = None if params[0] is None else np.concatenate(params)

    # --- computed once
    def gram_eigh(self) -> tuple[np.ndarray, np.ndarray]:
        """Eigen-decompositions ``(e, V)`` of :meth:`gram` (cached)."""
        return self.shared("gram_eigh", lambda: np.linalg.eigh(self.gram()))

    def sample_svd(self) -> tuple[np.ndarray, np.ndarray]:
        """``(e, V)``: ``V_i diag(e_i) V_i^T = Q_i = X_i^T X_i / m_i`` (``e`` ascending,
        ``(k, d)``; ``V_i`` orthonormal, ``(k, d, d)``), cached, with the small eigenvalues
        resolved: at the nodes where the eigen-decomposition of the formed ``Q_i``
        (:meth:`_gram_factors`, accurate only to about ``eps e_max``: the square of the
        condition number) has ``e_min <= SVD_RTOL e_max``, ``e_ij = sigma_ij^2 / m_i`` and
        the right singular vectors of the samples ``X_i`` themselves (a QR, then the SVD of
        ``R``; batched over the nodes with the same ``m_i``), accurate to about ``eps
        sigma_max``, zeros past ``rank <= m_i``.  Elsewhere every ``e_j`` exceeds ``SVD_RTOL
        e_max`` by far more than the eigen-decomposition's error, which is all
        :mod:`gtvmodel.certificates.kinds` asks (null and ill-conditioned directions)."""
        return self.shared("sample_svd", self._sample_svd)

    #: Nodes whose formed ``Q_i`` has ``e_min <= SVD_RTOL e_max`` get the SVD of their samples.
    SVD_RTOL: ClassVar[float] = 1e-4

    def _gram_factors(self) -> tuple[np.ndarray, np.ndarray]:
        """The eigen-decompositions of ``Q_i = X_i^T X_i / m_i`` already at hand."""
        e, V = self.gram_eigh()
        return e / self.ms[:, None], V

    def _sample_svd(self) -> tuple[np.ndarray, np.ndarray]:
        e, V = self._gram_factors()
        ill = np.flatnonzero(e[:, 0] <= self.SVD_RTOL * e[:, -1])
        if ill.size == 0:
            return e, V
        e, V, d = e.copy(), V.copy(), self.d
        for m in np.unique(self.ms[ill]):
            nodes = ill[self.ms[ill] == m]
            for part in np.array_split(nodes, -(-nodes.size * int(m) * d // 2**22)):
                A = self.Xs[self.starts[part][:, None] + np.arange(m)]  # (kp, m, d)
                if m > d:
                    A = np.linalg.qr(A, mode="r")
                _, sv, Vh = np.linalg.svd(A, full_matrices=True)
                e[part] = 0.0
                e[part, d - sv.shape[1]:] = sv[:, ::-1] ** 2 / m
                V[part] = np.swapaxes(Vh, 1, 2)[:, :, ::-1]
        return e, V

    # --- the primal
    def expression(self, w_flat, W):
        """``sum_i (1/m_i) sum_r ell(x_r^T w_i, y_r)`` as one CVXPY expression in the flat
        variable (the sparse block matrix ``X_blk``)."""
        return _rows_sum_cvx(self.cls, self.X_blk @ w_flat, self.y, self.c, self.p)

    def values(self, W):
        """``L_i(w_i) = (1/m_i) sum_r ell(x_r^T w_i, y_r)``, ``(n,)`` (0 outside the batch)."""
        t = self.X_blk @ W.ravel()
        return np.bincount(self.row_node, self.c * self.cls._ell(t, self.y, self.p),
                           minlength=self.n)

    def gradients(self, W):
        """``grad L_i(w_i) = (1/m_i) sum_r ell'(x_r^T w_i, y_r) x_r``, ``(n, d)`` (0 outside the
        batch)."""
        t = self.X_blk @ W.ravel()
        g = self.X_blk.T @ (self.c * self.cls._ell_d1(t, self.y, self.p))
        return g.reshape(self.n, self.d)

    def hessian_bounds(self):
        """``ell''_min Q_i <= hess L_i <= ell''_max Q_i`` with ``Q_i = X_i^T X_i / m_i``."""
        if not self.cls.base_smooth:
            raise UnsupportedError(f"{self.cls.__name__} is not smooth: it has no Hessian bound")
        Q = self.gram() / self.ms[:, None, None]
        return self.cls.ell_curvature_min * Q, self.cls.ell_curvature * Q

    def hessians(self, W):
        """``(1/m_i) sum_r ell''(x_r^T w_i, y_r) x_r x_r^T`` (the row formula ``_ell_d2``,
        generalized for Huber); None for non-smooth classes."""
        if not self.cls.base_smooth:
            return None
        t = self.X_blk @ np.asarray(W, dtype=float).ravel()
        return _grouped_gram(self.Xs, self.c * self.cls._ell_d2(t, self.y, self.p), self.starts)

    # --- certified radii
    def growth_pieces(self, level):
        """Per node of the batch, ``b`` with ``||X_i w - y_i||_2 <= b_i`` on ``{L_i <=
        level_i}`` (:meth:`DataFitLoss._residual_norm_bound`; ``inf`` for rows that flatten
        out), ``ynorm = ||y_i||_2``, ``gram = X_i^T X_i`` (``(k, d, d)``) and its eigenvalues
        ``eig`` (ascending), each lowered by a bound of the rounding made in forming and
        decomposing it.  ``level`` is an ``(n,)`` array over all nodes."""
        lv = np.maximum(np.asarray(level, dtype=float)[self.nodes], 0.0)
        ms, local = self.ms, self.local
        if self.p is None:
            pmin, psq = np.ones(ms.size), np.zeros(ms.size)
        else:
            pmin, psq = np.minimum.reduceat(self.p, self.starts), np.bincount(local, self.p**2)
        eig, ynorm = self.shared("gram_pieces", self._gram_pieces)
        return {"b": self.cls._residual_norm_bound(ms * lv, pmin, psq), "ynorm": ynorm,
                "gram": self.gram(), "eig": eig}

    def _gram_pieces(self) -> tuple[np.ndarray, np.ndarray]:
        """Eigenvalues of :meth:`gram` lowered by their rounding bound, and ``||y_i||_2``."""
        eig = self.gram_eigh()[0]
        err = 16.0 * (self.d + self.ms) * _EPS * np.abs(eig).max(axis=1)
        return (eig - err[:, None],
                np.sqrt(np.bincount(self.local, self.y**2, minlength=self.ms.size)))

    def level_halfspaces(self, level):
        """From :meth:`DataFitLoss._linear_minorants`, a row at most the node's whole sum
        ``m_i level_i``, as ``(node positions, G (J, d), h (J,))``."""
        mins = self.cls._linear_minorants(self.y, self.p)
        if not mins:
            return None
        ms = np.bincount(self.row_node, minlength=self.n)
        cap = (ms * np.maximum(np.asarray(level, dtype=float), 0.0))[self.row_node]
        G = np.vstack([a[:, None] * self.Xs for a, _ in mins])
        h = np.concatenate([cap - b for _, b in mins])
        return np.tile(self.row_node, len(mins)), G, h

    def sublevel_radii(self, level):
        """``||w||_2 <= (||y||_2 + b) / sqrt(e_min(X^T X))`` since ``||X w||_2 <= ||y||_2 + b``
        (:meth:`growth_pieces`); a numerically singular ``X^T X`` gives ``inf``."""
        g = self.growth_pieces(level)
        emin = g["eig"][:, 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(emin > 0, (g["ynorm"] + g["b"]) / np.sqrt(np.maximum(emin, 1e-300)),
                         np.inf)
        return np.where(np.isnan(r), np.inf, r) * (1.0 + 1e-12)

    # --- node update PU (32)
    def hessian_lipschitz(self) -> np.ndarray | None:
        """``sup |ell'''| sum_r c_r ||x_r||^3`` per node, a Lipschitz constant of ``hess L_i``
        (cached); None where ``ell''`` is not Lipschitz (``ell_d3_max = inf``)."""
        if not np.isfinite(self.cls.ell_d3_max):
            return None
        return self.shared("hessian_lipschitz", lambda: self.cls.ell_d3_max * np.bincount(
            self.local, self.c * np.sqrt(np.einsum("rj,rj->r", self.Xs, self.Xs)) ** 3,
            minlength=self.ms.size))

    def _prox(self, V, tau, W0):
        """Damped Newton (:func:`newton_minimize`) on ``L_i(z) + kappa_i ||z||^2 + ||z -
        v_i||^2 / (2 tau_i)``, vectorized over all nodes; where ``W0`` is the last call's answer
        (Algorithm 1's previous iterate) or absent, started from the first-order predictor
        :func:`_newton_predictor` of the last answer and Hessian."""
        mu = 2.0 * self.l2 + 1.0 / tau
        g = V / tau[:, None]
        Z0 = V.copy() if W0 is None else np.array(W0, dtype=float)
        last = self.__dict__.get("_newton_last")
        if last is not None and last["g"].shape == g.shape and (
                W0 is None or np.array_equal(Z0, last["Z"])):
            Z0 = _newton_predictor(last, mu, g)
        else:
            last = {"H": mu[:, None, None] * np.eye(self.d)}
        Z = newton_minimize(self.cls, self.Xs, self.y, self.p, self.c, self.local, mu, g, Z0,
                            max_iter=60, hess=last["H"], lip=self.hessian_lipschitz())
        self.__dict__["_newton_last"] = {"H": last["H"], "mu": mu, "g": g, "Z": Z.copy()}
        return Z

    # --- conjugates
    def dual_part(self, inset, row_of, k):
        """Stacked row duals ``v``: ``s_i += X_i^T v_i / m_i`` with cost ``sum_r c_r
        ell*(v_r)`` (docs/conventions.md)."""
        rows = np.flatnonzero(inset[self.row_node])
        if rows.size == 0:
            return None
        return _datafit_part(self, rows, row_of, k)

    def _rows_of(self, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of the batch nodes ``sel`` (positions in the batch) and their local owner."""
        local = np.full(self.ms.size, -1, dtype=np.int64)
        local[sel] = np.arange(sel.size)
        rows = np.flatnonzero(local[self.local] >= 0)
        return rows, local[self.local[rows]]

    def conjugate_group(self, free):
        """Smooth rows without ``l1``: batched Newton (:func:`newton_conjugates`) from the
        candidate weights; nodes where it does not converge fall back to the CVXPY path."""
        if not self.cls.base_smooth:
            return None
        sel = np.flatnonzero(free & (self.l1 == 0))
        if sel.size == 0:
            return None
        rows, rn = self._rows_of(sel)
        grp = (self.cls, self.Xs[rows], self.y[rows], _take(self.p, rows), self.c[rows], rn,
               self.l2[sel])

        def evaluate(S, W0, wloc, rnd):
            val, rho, r_rnd, vmag, wmax, conv = newton_conjugates(grp, S, W0)
            wl = np.where(conv, np.maximum(wloc, np.abs(wmax).max(axis=1, initial=0.0)), wloc)
            return val, rho, r_rnd, vmag, wl, conv

        return ConjugateGroup(self.nodes[sel], False, evaluate)

    def null_space_factors(self):
        """The singular factors of the samples ``X_i`` (:meth:`sample_svd`): ``dom L_i*`` lies
        in ``range(X_i^T)``."""
        return self.sample_svd()


class PiecewiseLinearBatch(DataFitBatch):
    """Data-fit losses whose row loss is piecewise linear with a linear conjugate
    ``ell*(a) = s_r a`` on an interval ``[lo_r, hi_r]`` (:class:`HingeLoss`,
    :class:`AbsoluteLoss`): their node update PU (32) is exact and vectorized by the dual
    active-set method :func:`dual_active_set_prox`, instead of the general CVXPY path."""

    def _padded(self) -> dict[str, np.ndarray]:
        """The rows padded to ``max_i m_i`` per node (cached): ``P = c_r x_r``, ``K = P
        P^T``, ``cs = c_r s_r``, ``lo``, ``hi`` and the padding mask ``fixed``."""
        pad = self.__dict__.get("_pad")
        if pad is None:
            k, m, M = self.ms.size, self.max_rows(), self.Xs.shape[0]
            slot = np.arange(M) - self.starts[self.local]
            lo_r, hi_r = self.cls._ell_conj_bounds(self.y, self.p)
            ones = np.ones(M)
            slope = self.cls._ell_conj(ones, self.y, self.p) - self.cls._ell_conj(0 * ones,
                                                                                   self.y, self.p)
            P = np.zeros((k, m, self.d))
            P[self.local, slot] = self.c[:, None] * self.Xs
            pad = {"P": P, "K": np.einsum("krd,kqd->krq", P, P)}
            for name, rows in (("cs", self.c * slope), ("lo", lo_r * ones), ("hi", hi_r * ones)):
                pad[name] = np.zeros((k, m))
                pad[name][self.local, slot] = rows
            pad["fixed"] = np.ones((k, m), dtype=bool)
            pad["fixed"][self.local, slot] = False
            self.__dict__["_pad"] = pad
        return pad

    def _prox(self, V, tau, W0):
        """:func:`dual_active_set_prox` on ``L_i(z) + kappa_i ||z||^2 + ||z - v_i||^2 /
        (2 tau_i)``, started from the active set of ``W0`` (else ``v_i``); a node whose active
        set cycles falls back to its CVXPY prox, polished by the active-set steps started from
        that point (kept unpolished if they cycle again).  The final active set is kept for the next
        call (Algorithm 1's next iteration)."""
        mu = 2.0 * self.l2 + 1.0 / tau
        Z0 = V if W0 is None else np.asarray(W0, dtype=float)
        # the last call's active set starts this one (a guess only: any start is exact)
        start = self.__dict__.get("_dual_start")
        if start is not None and start[0].shape[0] != V.shape[0]:
            start = None
        Z, ok, last = dual_active_set_prox(**self._padded(), mu=mu, g=V / tau[:, None], Z0=Z0,
                                           start=start,
                                           cache=self.__dict__.setdefault("_pinv_cache", {}))
        self.__dict__["_dual_start"] = last
        bad = np.flatnonzero(~ok)
        if bad.size:  # CVXPY's prox, then polished by the active-set steps started there
            Zc = np.array([_cvxpy_prox(self.losses[j], V[j], float(tau[j])) for j in bad])
            pad = {name: arr[bad] for name, arr in self._padded().items()}
            Zp, okp, _ = dual_active_set_prox(**pad, mu=mu[bad], g=V[bad] / tau[bad, None],
                                              Z0=Zc)
            Z[bad] = np.where(okp[:, None], Zp, Zc)
        return Z


class SquaredBatch(DataFitBatch):
    """Squared losses: the closed-form prox (69) and maximizers of the conjugate through the
    cached eigen-decompositions ``Q_i = X_i^T X_i / m_i = B_i diag(e_i) B_i^T``."""

    array_api = True

    def prepare(self, tau):
        """The exact-prox mask and the operator of (69) for ``tau`` (:meth:`squared_data`'s
        eigen-decompositions, computed once per model)."""
        super().prepare(tau)
        self._squared_operator(tau)

    def squared_data(self) -> dict[str, np.ndarray]:
        """``e``, ``B`` (of ``Q_i``) and ``q_i = X_i^T y_i / m_i`` (cached)."""
        return self.shared("squared", self._squared_data)

    def _squared_data(self) -> dict[str, np.ndarray]:
        e, B = np.linalg.eigh(self.gram() / self.ms[:, None, None])
        q = np.add.reduceat(self.Xs * (self.c * self.y)[:, None], self.starts, axis=0)
        return {"e": e, "B": B, "q": q}

    def _gram_factors(self):
        """The cached eigen-decompositions ``(e_i, B_i)`` of ``Q_i`` (:meth:`squared_data`)."""
        data = self.squared_data()
        return data["e"], data["B"]

    def _prox(self, V, tau, W0):
        """(69) with the ``1/m`` (docs/conventions.md erratum 2): ``z = (I (1 + 2 tau kappa) + 2 tau
        Q)^{-1} (v + 2 tau q)`` through the cached eigen-decomposition of ``Q`` (any array
        namespace)."""
        M, b = self._squared_operator(tau)
        return _xp.namespace(V).einsum("kij,kj->ki", M, V + b)

    def diagonal_quadratic(self):
        """Where ``Q_i = X_i^T X_i / m_i`` is diagonal (off-diagonal entries exactly 0):
        ``c_i = diag(Q_i)``, ``b_i = q_i = X_i^T y_i / m_i`` (``(1/m) ||y - X w||^2 = w^T Q w
        - 2 q^T w + ||y||^2 / m``); NaN rows elsewhere."""
        G = self.gram()
        d = G.shape[1]
        c = np.diagonal(G, axis1=1, axis2=2) / self.ms[:, None]
        diagonal = np.count_nonzero(G.reshape(len(G), -1), axis=1) == np.count_nonzero(c, axis=1)
        c[~diagonal] = np.nan
        b = np.full_like(c, np.nan)
        if diagonal.any():
            b[diagonal] = self.squared_data()["q"].reshape(-1, d)[diagonal]
        return c, b

    def _squared_operator(self, tau: Any) -> tuple[Any, Any]:
        """``(I (1 + 2 tau kappa) + 2 tau Q)^{-1} = B diag(1/(1 + 2 tau (kappa + e))) B^T`` and
        ``2 tau q`` per node; rebuilt only when ``tau`` changes (no refactorization), one
        cache per array namespace, device and dtype of ``tau``."""
        xp = _xp.namespace(tau)
        key = "_op" if _xp.is_numpy(tau) else f"_op:{tau.device}:{tau.dtype}"
        cached = self.__dict__.get(key)
        if cached is not None and cached[0].shape == tau.shape and bool(xp.all(cached[0] == tau)):
            return cached[1], cached[2]
        data = self.squared_data()
        e, B = self._on("e", data["e"], tau), self._on("B", data["B"], tau)
        den = 1.0 + 2.0 * tau[:, None] * (self._on("l2", self.l2, tau)[:, None] + e)
        M = xp.matmul(B / den[:, None, :], xp.permute_dims(B, (0, 2, 1)))
        b = 2.0 * tau[:, None] * self._on("q", data["q"], tau)
        self.__dict__[key] = (_xp.copy(tau), M, b)
        return M, b

    def conjugate_group(self, free):
        """Two valid splits (:func:`datafit_conjugate_split` at :func:`squared_maximizers`
        from 0 and from the candidate's weights); per node the smaller bound is kept."""
        sel = np.flatnonzero(free & (self.l1 == 0))
        if sel.size == 0:
            return None
        rows, rn = self._rows_of(sel)
        data = self.squared_data()
        m_max = int(np.bincount(rn, minlength=sel.size).max(initial=0))
        host = {"e": data["e"][sel], "V": data["B"][sel], "q": data["q"][sel],
                "kappa": self.l2[sel], "X": self.Xs[rows], "y": self.y[rows],
                "c": self.c[rows], "rn": rn}
        moved = SimpleNamespace()  # the arrays on a device, once per device and dtype
        # a module-level function (not a closure), so a batch can be pickled and deep-copied
        evaluate = functools.partial(_squared_conjugate_split, host, moved, m_max)
        return ConjugateGroup(self.nodes[sel], True, evaluate, array_api=True)


def _squared_conjugate_split(host: dict, moved: SimpleNamespace, m_max: int, S: Any, W0: Any,
                             wloc: Any, rnd: Any) -> tuple:
    """``ConjugateGroup.evaluate`` of :meth:`SquaredBatch.conjugate_group` (``host``: the
    group's arrays, copied to ``S``'s device once into ``moved``)."""
    a = {k: _xp.cached_like(moved, k, v, S) for k, v in host.items()}
    xp = _xp.namespace(S)
    best = None
    for base in (W0, None):
        if best is not None and bool(xp.all(best[1][1] <= rnd + best[1][2])):
            break  # rounding-level residuals already: the second cannot do better
        Wm = squared_maximizers(a["e"], a["V"], a["q"], a["kappa"], S, base)
        out = datafit_conjugate_split(SquaredLoss, a["X"], a["y"], None, a["c"],
                                      a["rn"], a["kappa"], S, Wm, m_max)
        wl = xp.maximum(wloc, xp.max(xp.abs(Wm), axis=1))
        # choose by the value plus a local-scale residual charge (both are valid)
        total = out[0] + xp.sum(wl[:, None] * (out[1] + out[2]), axis=1)
        if best is None:
            best = (total, out, wl)
        else:
            pick = total < best[0]
            best = (xp.where(pick, total, best[0]),
                    tuple(xp.where(xp.reshape(pick, (-1,) + (1,) * (o.ndim - 1)), o, b_)
                          for o, b_ in zip(out, best[1], strict=True)),
                    xp.where(pick, wl, best[2]))
    val, rho, r_rnd, mag = best[1]
    return val, rho, r_rnd, mag, best[2], np.ones(len(host["q"]), dtype=bool)


def newton_conjugates(group: tuple, S: np.ndarray, W0: np.ndarray, iters: int = 40
                      ) -> tuple[np.ndarray, ...]:
    """Conjugates of smooth data-fit nodes (no ``l1``/constraints) in numpy, all nodes at once.

    The maximizers of ``f(w) = s^T w - L(w) - kappa ||w||^2`` from the candidate weights
    (:func:`~gtvmodel.kernels.newton.newton_conjugate_maximizers`), then the split read off
    them by
    :func:`datafit_conjugate_split` (an exact evaluation at a feasible split, hence an upper
    bound of ``h*(s)`` once the residual bound ``rho`` is charged).  Where ``s`` is outside the
    domain the iteration diverges and ``rho`` stays large: the caller then uses the CVXPY path.
    ``group`` is ``(cls, X, y, p, c, rn, kappa)``.  Returns ``(values, rho, rounding,
    magnitudes, maximizers, converged)``."""
    cls, X, y, p, c, rn, kappa = group
    w = newton_conjugate_maximizers(cls, X, y, p, c, rn, kappa, S, W0, iters)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        val, rho, rnd, vmag = datafit_conjugate_split(cls, X, y, p, c, rn, kappa, S, w)
        t = np.einsum("rj,rj->r", X, w[rn])
        k = S.shape[0]
        gres = np.abs(S - sum_rows_by(rn, (c * cls._ell_d1(t, y, p))[:, None] * X, k)
                      - 2 * kappa[:, None] * w).max(axis=1)
    converged = np.isfinite(val) & (gres <= 1e-10 * np.maximum(1.0, np.abs(S).max(axis=1)))
    return val, rho, rnd, vmag, w, converged


def _datafit_part(b: DataFitBatch, rows: np.ndarray, row_of: np.ndarray, k: int) -> NodePart:
    """Stacked row duals ``v`` of one data-fit batch: ``s_i += X_i^T v_i / m_i``."""
    d = b.d
    Xr = b.X_blk[rows].tocoo()
    node = Xr.col // d
    col = row_of[node] * d + Xr.col % d
    Bt = sp.csr_matrix((Xr.data, (col, Xr.row)), shape=(k * d, rows.size))  # (k d) x M'
    c, y, prm, cls = b.c[rows], b.y[rows], _take(b.p, rows), b.cls
    lo, hi = cls._ell_conj_bounds(y, prm)
    lo = np.broadcast_to(np.asarray(lo, dtype=float), (rows.size,))
    hi = np.broadcast_to(np.asarray(hi, dtype=float), (rows.size,))
    v = cp.Variable(rows.size, name=f"v_{cls.kind}")
    contrib = cp.reshape(Bt @ cp.multiply(c, v), (k, d), order="C")
    cost = c @ cls._ell_conj_cvx(v, y, prm)
    cons = bounds_constraints(v, lo, hi, rows.size)
    owner = row_of[b.row_node[rows]]

    def absorb(Rz):
        """Least-squares row-dual change with ``X_i^T (c dv) = R_i`` on the rows strictly
        inside their domain (rows at a bound, e.g. hinge rows away from the margin, would be
        clipped back), kept in the domain."""
        vv = np.clip(v.value, lo, hi)
        width = np.where(np.isfinite(hi - lo), hi - lo, 1.0)
        # a solver's row dual within 1e-9 of a bound is that bound (e.g. hinge rows off the
        # margin have v = 0 exactly): snap, then correct on the rows strictly inside
        vv = np.where(vv <= lo + 1e-9 * width, lo, np.where(vv >= hi - 1e-9 * width, hi, vv))
        free = np.flatnonzero((vv > lo) & (vv < hi))
        if free.size == 0:
            v.value = vv
            return
        A = (Bt[:, free] @ sp.diags(c[free])).tocsr()
        dv = spla.lsqr(A, Rz.ravel(), atol=1e-16, btol=1e-16, iter_lim=500)[0]
        vv[free] += dv
        v.value = np.clip(vv, lo, hi)

    def ev():
        vv = np.clip(v.value, lo, hi)
        rowcost = np.bincount(owner, c * cls.ell_conjugate(vv, y, prm), minlength=k)
        return (Bt @ (c * vv)).reshape(k, d), rowcost

    def mag():
        vv = np.clip(v.value, lo, hi)
        rowmag = c * cls.ell_conjugate_magnitude(vv, y, prm)
        return ((abs(Bt) @ np.abs(c * vv)).reshape(k, d),
                np.bincount(owner, rowmag, minlength=k))

    return NodePart(cls.kind, contrib, cost, cons, ev, absorb, mag)


# every library loss class names its batch (defined above, after the loss classes)
DataFitLoss.batch_class = DataFitBatch
SquaredLoss.batch_class = SquaredBatch
QuadraticLoss.batch_class = QuadraticBatch
ZeroLoss.batch_class = ZeroBatch
HingeLoss.batch_class = AbsoluteLoss.batch_class = PiecewiseLinearBatch
