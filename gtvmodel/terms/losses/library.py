"""The library data-fit losses: squared, logistic, hinge, absolute and Huber rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import cvxpy as cp
import numpy as np
from scipy.special import expit, xlogy

from ..._validate import (
    check_option,
    check_scalar,
)
from ..spec import TermSpec
from .base import Loss
from .conjugates import datafit_conjugate_split, squared_maximizers
from .datafit import DataFitLoss, RowLoss
from .facts import LossFacts


class SquaredRow(RowLoss):
    """The row loss of :class:`SquaredLoss`: ``ell(t; y) = (t - y)^2``, its conjugate ``v y +
    v^2 / 4``."""

    ell_curvature = 2.0
    ell_curvature_min = 2.0

    @staticmethod
    def _residual_norm_bound(level: np.ndarray, p_min: np.ndarray, p_sq: np.ndarray
                             ) -> np.ndarray:
        return np.sqrt(np.maximum(level, 0.0))

    @staticmethod
    def _linear_minorants(y: np.ndarray, p: Any) -> list[tuple[np.ndarray, np.ndarray]]:
        # (t - y)^2 >= +-2 (t - y) - 1 (tangents at t - y = +-1)
        return [(np.full(y.shape, 2.0), -2.0 * y - 1.0), (np.full(y.shape, -2.0), 2.0 * y - 1.0)]

    @staticmethod
    def _ell(t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return (t - y) ** 2

    @staticmethod
    def _ell_cvx(t: cp.Expression, y: np.ndarray, p: Any) -> cp.Expression:
        return cp.square(t - y)

    @staticmethod
    def _ell_d1(t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return 2.0 * (t - y)

    @staticmethod
    def _ell_d2(t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return np.full(np.shape(t), 2.0)

    @staticmethod
    def _ell_conj(v: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return v * y + 0.25 * v**2

    @staticmethod
    def _ell_conj_cvx(v: cp.Expression, y: np.ndarray, p: Any
                      ) -> cp.Expression:
        return cp.multiply(y, v) + 0.25 * cp.square(v)


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
    row = SquaredRow()
    class_facts = LossFacts(exact_prox=True, piecewise_quadratic=True, quadratic=True)
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
        return Loss.from_groups.__func__(cls, X, y, ms, **options)  # type: ignore[attr-defined]

    def samples(self) -> tuple[np.ndarray, np.ndarray]:
        """The node's samples ``(X, y)`` as given (before a ``scaling``'s factor)."""
        return self.__dict__.get("given", (self.X, self.y))

    def __repr__(self) -> str:
        scaling = self.__dict__.get("scaling", "mean")
        extra = "" if scaling == "mean" else f", scaling={scaling!r}"
        return f"SquaredLoss(m={self.m}, d={self.dim}{extra}{self._reg_repr()})"

    def squared_rows(self, d: int) -> tuple[np.ndarray, np.ndarray, int] | None:
        """``(X, y, m)``: the loss is ``||y - X w||^2 / m`` itself."""
        return self.X, self.y, self.m

    def eig(self) -> tuple[np.ndarray, np.ndarray]:
        """Eigen-decomposition ``(e, V)`` of ``Q = X^T X / m`` (cached)."""
        cached = self.__dict__.get("_eig")
        if cached is None:
            cached = np.linalg.eigh(self.X.T @ self.X / self.m)
            self.__dict__["_eig"] = cached
        return cached

    def _conjugate_closed(self, S: np.ndarray) -> tuple[np.ndarray, ...] | None:
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


class LogisticRow(RowLoss):
    """The row loss of :class:`LogisticLoss`: ``ell(t; y) = log(1 + exp(-y t))`` (labels
    ``+-1``), its conjugate the binary negative entropy of ``b = -y v`` on ``[0, 1]``."""

    ell_curvature = 0.25
    ell_d3_max = 1.0 / (6.0 * np.sqrt(3.0))  # |s (1 - s) (1 - 2 s)| at s = (3 -+ sqrt 3) / 6

    @staticmethod
    def _linear_minorants(y: np.ndarray, p: Any
                          ) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(-y, np.zeros(y.shape))]  # log(1 + exp(-y t)) >= -y t

    @staticmethod
    def _ell(t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return np.logaddexp(0.0, -y * t)

    @staticmethod
    def _ell_cvx(t: cp.Expression, y: np.ndarray, p: Any) -> cp.Expression:
        return cp.logistic(cp.multiply(-y, t))

    @staticmethod
    def _ell_d1(t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return -y * expit(-y * t)

    @staticmethod
    def _ell_d2(t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        s = expit(-y * t)
        return s * (1.0 - s)

    @classmethod
    def _ell_d12(cls, t: np.ndarray, y: np.ndarray, p: Any
                 ) -> tuple[np.ndarray, np.ndarray]:
        s = expit(-y * t)  # ell' = -y s, ell'' = s (1 - s): one sigmoid for both
        return -y * s, s * (1.0 - s)

    # conjugate of softplus(-y t): with b = -y v in [0, 1], b log b + (1 - b) log(1 - b)
    @staticmethod
    def _ell_conj(v: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        b = np.clip(-y * v, 0.0, 1.0)
        return xlogy(b, b) + xlogy(1.0 - b, 1.0 - b)

    @staticmethod
    def _ell_conj_cvx(v: cp.Expression, y: np.ndarray, p: Any
                      ) -> cp.Expression:
        b = cp.multiply(-y, v)
        return -cp.entr(b) - cp.entr(1.0 - b)

    @staticmethod
    def _ell_conj_bounds(y: np.ndarray, p: Any) -> tuple[Any, Any]:
        return np.minimum(0.0, -y), np.maximum(0.0, -y)


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
    row = LogisticRow()
    binary_labels = True
    class_facts = LossFacts(exact_prox=True)
    score_metric = "accuracy"

    def proba_rows(self, X: np.ndarray, W: np.ndarray) -> np.ndarray:
        """``P(y_r = +1 | x_r) = sigmoid(x_r^T w_r)``, the model the logistic loss is the
        negative log-likelihood of."""
        return expit(self.decision_rows(X, W))


class HingeRow(RowLoss):
    """The row loss of :class:`HingeLoss`: ``ell(t; y) = max(0, 1 - y t)`` (labels ``+-1``),
    its conjugate ``v y`` on ``-y v in [0, 1]``."""

    @staticmethod
    def _linear_minorants(y: np.ndarray, p: Any
                          ) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(-y, np.ones(y.shape))]  # max(0, 1 - y t) >= 1 - y t

    @staticmethod
    def _ell(t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return np.maximum(0.0, 1.0 - y * t)

    @staticmethod
    def _ell_cvx(t: cp.Expression, y: np.ndarray, p: Any) -> cp.Expression:
        return cp.pos(1.0 - cp.multiply(y, t))

    # conjugate of max(0, 1 - y t): y v on y v in [-1, 0]
    @staticmethod
    def _ell_conj(v: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return y * v

    @staticmethod
    def _ell_conj_cvx(v: cp.Expression, y: np.ndarray, p: Any
                      ) -> cp.Expression:
        return cp.multiply(y, v)

    @staticmethod
    def _ell_conj_bounds(y: np.ndarray, p: Any) -> tuple[Any, Any]:
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
    row = HingeRow()
    binary_labels = True
    class_facts = LossFacts(differentiable=False, lipschitz_gradient=False, exact_prox=True,
                            piecewise_quadratic=True)
    score_metric = "accuracy"


class AbsoluteRow(RowLoss):
    """The row loss of :class:`AbsoluteLoss`: ``ell(t; y) = |t - y|``, its conjugate ``v y``
    on ``|v| <= 1``."""

    @staticmethod
    def _residual_norm_bound(level: np.ndarray, p_min: np.ndarray, p_sq: np.ndarray
                             ) -> np.ndarray:
        return np.maximum(level, 0.0)  # ||r||_2 <= ||r||_1

    @staticmethod
    def _linear_minorants(y: np.ndarray, p: Any
                          ) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(np.ones(y.shape), -y), (-np.ones(y.shape), y)]

    @staticmethod
    def _ell(t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return np.abs(t - y)

    @staticmethod
    def _ell_cvx(t: cp.Expression, y: np.ndarray, p: Any) -> cp.Expression:
        return cp.abs(t - y)

    # conjugate of |t - y|: v y on |v| <= 1
    @staticmethod
    def _ell_conj(v: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return v * y

    @staticmethod
    def _ell_conj_cvx(v: cp.Expression, y: np.ndarray, p: Any
                      ) -> cp.Expression:
        return cp.multiply(y, v)

    @staticmethod
    def _ell_conj_bounds(y: np.ndarray, p: Any) -> tuple[Any, Any]:
        return np.full(y.shape, -1.0), np.full(y.shape, 1.0)


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
    row = AbsoluteRow()
    class_facts = LossFacts(differentiable=False, lipschitz_gradient=False, exact_prox=True,
                            piecewise_quadratic=True)


class HuberRow(RowLoss):
    """The row loss of :class:`HuberLoss`: ``ell(t; y, M) = huber(t - y, M)`` (the row
    parameter ``p = M``), its conjugate ``v y + v^2 / 4`` on ``|v| <= 2 M``."""

    ell_curvature = 2.0

    @staticmethod
    def _residual_norm_bound(level: np.ndarray, p_min: np.ndarray, p_sq: np.ndarray
                             ) -> np.ndarray:
        # huber(r, M) >= 2 M |r| - M^2 row by row, so 2 min(M) ||r||_1 <= level + sum M^2
        return (np.maximum(level, 0.0) + p_sq) / (2.0 * p_min)

    @staticmethod
    def _linear_minorants(y: np.ndarray, p: Any) -> list[tuple[np.ndarray, np.ndarray]]:
        # huber(t - y, M) >= +-2 M (t - y) - M^2
        return [(2.0 * p, -2.0 * p * y - p**2), (-2.0 * p, 2.0 * p * y - p**2)]

    @staticmethod
    def _ell(t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        r = np.abs(t - y)
        return np.where(r <= p, r**2, 2.0 * p * r - p**2)

    @staticmethod
    def _ell_cvx(t: cp.Expression, y: np.ndarray, p: Any) -> cp.Expression:
        # huber(r, M) = M^2 huber(r / M, 1): lets M vary per row in one expression.
        return cp.multiply(p**2, cp.huber(cp.multiply(1.0 / p, t - y), 1.0))  # type: ignore[arg-type]

    @staticmethod
    def _ell_d1(t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return 2.0 * np.clip(t - y, -p, p)

    @staticmethod
    def _ell_d2(t: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return np.where(np.abs(t - y) <= p, 2.0, 0.0)

    # conjugate of huber(t - y, M): v y + v^2 / 4 on |v| <= 2 M
    @staticmethod
    def _ell_conj(v: np.ndarray, y: np.ndarray, p: Any) -> np.ndarray:
        return v * y + 0.25 * v**2

    @staticmethod
    def _ell_conj_cvx(v: cp.Expression, y: np.ndarray, p: Any
                      ) -> cp.Expression:
        return cp.multiply(y, v) + 0.25 * cp.square(v)

    @staticmethod
    def _ell_conj_bounds(y: np.ndarray, p: Any) -> tuple[Any, Any]:
        return -2.0 * p, 2.0 * p


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
    row = HuberRow()
    class_facts = LossFacts(exact_prox=True, piecewise_quadratic=True)

    def __init__(self, X: Any, y: Any, M: float = 1.0, *, l1: float = 0.0, l2: float = 0.0):
        super().__init__(X, y, l1=l1, l2=l2)
        self.M = check_scalar(M, "M", min_val=0.0, include_boundaries="neither", where="HuberLoss")

    def _row_param(self) -> np.ndarray:
        return np.full(self.m, self.M)

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
