"""The :class:`Loss` base of node losses ``L_i`` (16): value, gradient, CVXPY expression,
conjugate, prox, prediction and file spec, with the per-instance facts of
:class:`~gtvmodel.terms.losses.facts.LossFacts`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import cvxpy as cp
import numpy as np

from ..._solver import run_solver
from ..._validate import (
    as_finite_array,
    check_scalar,
    check_vector,
)
from ...errors import DataError, LossError, SolverError, UnsupportedError
from ..spec import LOSSES, TermSpec
from .batch import LossBatch
from .conjugates import l2_conjugate_cvx
from .facts import FACT_ALIASES, LossFacts, fact


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

    #: The facts of the class's losses (:class:`~gtvmodel.terms.losses.facts.LossFacts`); an
    #: instance whose facts depend on its data overrides :attr:`facts`.
    class_facts: ClassVar[LossFacts] = LossFacts()
    #: Short name used in files and messages, and the key of the registry ``LOSSES``.
    kind: ClassVar[str] = "loss"
    #: Arrays of the file spec by name, their shapes in the symbols ``m`` and ``d``.
    spec_arrays: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: The :class:`LossBatch` subclass stacking losses of this class (None: not batched, the
    #: loss is an expression in its node's own variable, compiled node by node).
    batch_class: ClassVar[type[LossBatch] | None] = None
    #: The node variable a symbolic loss is stated in (None for library losses, which are
    #: functions of ``w_i`` given as an argument).
    variable: cp.Variable | None = None
    #: The facts by their historical names, read-only (:class:`LossFacts`): the class's on the
    #: class (``batch.cls.base_smooth``), the instance's on an instance.  ``base_smooth`` is
    #: ``differentiable`` (a global Lipschitz gradient is ``facts.lipschitz_gradient``).
    base_smooth = fact("differentiable")
    lower_bound = fact("lower_bound")
    has_data = fact("has_data")
    exact_prox = fact("exact_prox")
    isotropic_prox = fact("isotropic_prox")
    piecewise_quadratic = fact("piecewise_quadratic")

    def __init__(self, *, l1: float = 0.0, l2: float = 0.0):
        owner = type(self).__name__
        self.l1 = check_scalar(l1, "l1", min_val=0.0, where=owner)
        self.l2 = check_scalar(l2, "l2", min_val=0.0, where=owner)

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        for name in FACT_ALIASES:
            if name in cls.__dict__ and not isinstance(cls.__dict__[name], fact):
                raise TypeError(f"{cls.__name__}.{name}: a fact of the loss, set it in "
                                f"class_facts = LossFacts(...) (LossFacts.{FACT_ALIASES[name]})")
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
            return cls(X, y, **options)  # type: ignore[call-arg, arg-type]  # a subclass's
        except TypeError as exc:  # a loss class that takes no samples (X, y), a bad option
            raise LossError(f"{cls.__name__} cannot be built from samples (X, y) with options "
                            f"{options!r}: {exc}") from None

    # ----------------------------------------------------------- interface
    @property
    def facts(self) -> LossFacts:
        """This loss's :class:`~gtvmodel.terms.losses.facts.LossFacts` (the class's record
        unless the loss's data change it)."""
        return self.class_facts

    @property
    def dim(self) -> int | None:
        """The parameter dimension ``d`` this loss requires (None: any)."""
        return None

    @property
    def smooth(self) -> bool:
        """True if ``L`` is differentiable (no ``l1`` term): :meth:`gradient` answers.  Its
        gradient is moreover globally Lipschitz (finite :attr:`smoothness`, Hessian bounds)
        where ``facts.lipschitz_gradient`` says so."""
        return self.facts.differentiable and self.l1 == 0

    @property
    def lipschitz(self) -> bool:
        """True if ``L`` is :attr:`smooth` with a globally Lipschitz gradient (Theorem 2's
        ``beta < inf``)."""
        return self.smooth and self.facts.lipschitz_gradient

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
        if not self.lipschitz:
            raise UnsupportedError(f"{self!r} has no globally Lipschitz gradient: it has no "
                                   "upper Hessian bound")
        lo, hi = self._base_hessian_bounds(d)
        reg = 2.0 * self.l2 * np.eye(d)
        return lo + reg, hi + reg

    @property
    def smoothness(self) -> float:
        """``beta``: Lipschitz constant of ``grad L`` (``inf`` if not smooth or not globally
        Lipschitz)."""
        if not self.lipschitz:
            return float("inf")
        d = self.dim or 1
        return float(np.linalg.eigvalsh(self.hessian_bounds(d)[1])[-1])

    @property
    def strong_convexity(self) -> float:
        """``alpha``: a global strong convexity modulus of ``L`` (0 if none is known)."""
        d = self.dim or 1
        if self.facts.differentiable:
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

    def _conjugate_closed(self, S: np.ndarray) -> tuple[np.ndarray, ...] | None:
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
            batch = LossBatch(type(self), np.array([0]), [self], 1,  # type: ignore[abstract]
                              v.shape[0])
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


def _solve_conjugate(loss: Loss, s: np.ndarray) -> float:
    """``h*(s)`` by solving the problem of :meth:`Loss.conjugate_expression` (inf if infeasible)."""
    cost, cons = loss.conjugate_expression(cp.Constant(s))
    prob = cp.Problem(cp.Minimize(cost), cons)
    run_solver(prob, None, {}, False, False, f"conjugate of {loss!r}")
    if prob.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        return float("inf")
    return float(prob.value)


def _cvxpy_prox(loss: Loss, v: np.ndarray, tau: float) -> np.ndarray:
    """``prox_{tau h}(v)`` of one loss by one CVXPY solve (the general path of PU (32))."""
    z = loss._prox_variable(v.shape[0])
    prob = cp.Problem(cp.Minimize(loss.expression(z) + cp.sum_squares(z - v) / (2.0 * tau)))
    run_solver(prob, None, {}, False, False, f"prox of {loss!r}")
    if z.value is None:
        raise SolverError(f"prox of {loss!r}: the solver returned no point",
                          status=prob.status, solver="CLARABEL")
    return np.asarray(z.value, dtype=float).reshape(v.shape)
