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

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import cvxpy as cp
import numpy as np
import scipy.sparse as sp
from scipy.special import expit

from ._validate import as_finite_array, as_nonneg_scalar
from .errors import DataError, LossError, UnsupportedError

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
]


class Loss(ABC):
    """Base class of node losses ``L_i(w)`` with optional ``l1``/``l2`` regularization.

    Subclasses implement the unregularized part (``_base_*`` methods); the regularizers
    ``eta ||w||_1 + kappa ||w||^2`` are added here once for all losses.
    """

    #: True when the unregularized loss is differentiable with Lipschitz gradient.
    base_smooth: ClassVar[bool] = True
    #: Short name used in files and messages.
    kind: ClassVar[str] = "loss"

    def __init__(self, *, l1: float = 0.0, l2: float = 0.0):
        owner = type(self).__name__
        self.l1 = as_nonneg_scalar(l1, "l1", owner)
        self.l2 = as_nonneg_scalar(l2, "l2", owner)

    # ----------------------------------------------------------- interface
    @property
    def dim(self) -> int | None:
        """The parameter dimension ``d`` this loss requires (None: any)."""
        return None

    @property
    def smooth(self) -> bool:
        """True if ``L`` is differentiable with a Lipschitz gradient (no ``l1`` term)."""
        return self.base_smooth and self.l1 == 0

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

    # ------------------------------------------------------ for subclasses
    @abstractmethod
    def _base_expression(self, x: cp.Expression) -> cp.Expression: ...

    @abstractmethod
    def _base_value(self, w: np.ndarray) -> float: ...

    def _base_gradient(self, w: np.ndarray) -> np.ndarray:
        raise UnsupportedError(f"{type(self).__name__} is not differentiable")

    def _base_hessian_bounds(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        raise UnsupportedError(f"{type(self).__name__} is not smooth")

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

    Subclasses give the row loss once, in numpy (``_ell``), CVXPY (``_ell_cvx``) and, for smooth
    losses, its derivative (``_ell_d1``) and a global bound on its second derivative
    (``ell_curvature``).  ``_row_param`` is an optional per-row constant (Huber's ``M``).
    """

    #: sup_t ell''(t) (for smooth row losses); beta = ell_curvature * lambda_max(X^T X) / m.
    ell_curvature: ClassVar[float] = float("inf")
    #: inf_t ell''(t) (a global lower bound, 0 for losses that flatten out).
    ell_curvature_min: ClassVar[float] = 0.0
    #: Whether labels must be +-1.
    binary_labels: ClassVar[bool] = False

    def __init__(self, X: Any, y: Any, *, l1: float = 0.0, l2: float = 0.0):
        super().__init__(l1=l1, l2=l2)
        owner = type(self).__name__
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
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise DataError(
                f"{owner}: y must have shape ({X.shape[0]},) to match X of shape {X.shape}, "
                f"got {y.shape}"
            )
        if self.binary_labels:
            bad = np.flatnonzero((y != 1.0) & (y != -1.0))
            if bad.size:
                raise DataError(
                    f"{owner}: classification labels must be -1 or +1; "
                    f"y[{bad[0]}] = {y[bad[0]]:g}"
                )
        self.X = X
        self.y = y

    @property
    def m(self) -> int:
        """Number of samples ``m_i``."""
        return int(self.X.shape[0])

    @property
    def dim(self) -> int:
        return int(self.X.shape[1])

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

    def __repr__(self) -> str:
        return f"{type(self).__name__}(m={self.m}, d={self.dim}{self._reg_repr()})"


def _rows_sum_cvx(cls: type[DataFitLoss], t: cp.Expression, y: np.ndarray, c: np.ndarray,
                  p: np.ndarray | None) -> cp.Expression:
    """``sum_r c_r ell(t_r, y_r)`` as one vectorized CVXPY expression."""
    return cp.sum(cp.multiply(c, cls._ell_cvx(t, y, p)))


class SquaredLoss(DataFitLoss):
    """Squared error ``(1/m) ||y - X w||^2`` (row loss ``(t - y)^2``)."""

    kind = "squared"
    ell_curvature = 2.0
    ell_curvature_min = 2.0

    @staticmethod
    def _ell(t, y, p):
        return (t - y) ** 2

    @staticmethod
    def _ell_cvx(t, y, p):
        return cp.square(t - y)

    @staticmethod
    def _ell_d1(t, y, p):
        return 2.0 * (t - y)


class LogisticLoss(DataFitLoss):
    """Logistic loss ``(1/m) sum_r log(1 + exp(-y_r x_r^T w))``, labels ``y_r in {-1, +1}``.

    Its Hessian is ``X^T diag(s(1-s)) X / m <= X^T X / (4m)``; it has no global strong convexity
    (add ``l2=`` for one).
    """

    kind = "logistic"
    binary_labels = True
    ell_curvature = 0.25

    @staticmethod
    def _ell(t, y, p):
        return np.logaddexp(0.0, -y * t)

    @staticmethod
    def _ell_cvx(t, y, p):
        return cp.logistic(cp.multiply(-y, t))

    @staticmethod
    def _ell_d1(t, y, p):
        return -y * expit(-y * t)


class HingeLoss(DataFitLoss):
    """Hinge loss ``(1/m) sum_r max(0, 1 - y_r x_r^T w)``, labels ``y_r in {-1, +1}``.

    Not differentiable: no gradient or smoothness constant.
    """

    kind = "hinge"
    binary_labels = True
    base_smooth = False

    @staticmethod
    def _ell(t, y, p):
        return np.maximum(0.0, 1.0 - y * t)

    @staticmethod
    def _ell_cvx(t, y, p):
        return cp.pos(1.0 - cp.multiply(y, t))


class AbsoluteLoss(DataFitLoss):
    """Absolute error ``(1/m) ||y - X w||_1`` (non-smooth)."""

    kind = "absolute"
    base_smooth = False

    @staticmethod
    def _ell(t, y, p):
        return np.abs(t - y)

    @staticmethod
    def _ell_cvx(t, y, p):
        return cp.abs(t - y)


class HuberLoss(DataFitLoss):
    """Huber loss ``(1/m) sum_r huber(x_r^T w - y_r, M)`` with CVXPY's ``huber``:
    ``r^2`` for ``|r| <= M``, ``2 M |r| - M^2`` beyond.  Smooth with ``ell'' <= 2``.
    """

    kind = "huber"
    ell_curvature = 2.0

    def __init__(self, X: Any, y: Any, M: float = 1.0, *, l1: float = 0.0, l2: float = 0.0):
        super().__init__(X, y, l1=l1, l2=l2)
        self.M = as_nonneg_scalar(M, "M", "HuberLoss", strict=True)

    def _row_param(self) -> np.ndarray:
        return np.full(self.m, self.M)

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

    def __repr__(self) -> str:
        return f"HuberLoss(m={self.m}, d={self.dim}, M={self.M:g}{self._reg_repr()})"


# =====================================================================  other losses
class ZeroLoss(Loss):
    """``L(w) = 0``: a node without local data (only its neighbours and regularizers inform it)."""

    kind = "zero"

    def _base_expression(self, x):
        return cp.Constant(0.0)

    def _base_value(self, w):
        return 0.0

    def _base_gradient(self, w):
        return np.zeros_like(w)

    def _base_hessian_bounds(self, d):
        return np.zeros((d, d)), np.zeros((d, d))

    def __repr__(self) -> str:
        return f"ZeroLoss({self._reg_repr()[2:]})"


class QuadraticLoss(Loss):
    """Convex clustering loss ``L(w) = ||w - a||^2`` (Hessian ``2 I``)."""

    kind = "quadratic"

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

    def __repr__(self) -> str:
        return f"QuadraticLoss(d={self.dim}{self._reg_repr()})"


class SymbolicLoss(Loss):
    """A user-written scalar convex DCP expression in one node's variable.

    Created by :meth:`gtvmodel.GTVModel.set_loss`; ``variable`` is the node's ``cp.Variable``.
    Numeric evaluation assigns ``variable.value`` and reads the expression's value.
    """

    kind = "symbolic"
    base_smooth = False  # unknown: no gradient or constants are claimed

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
        foreign = [v for v in expr.variables() if v.id != variable.id]
        if foreign:
            names = ", ".join(sorted({v.name() for v in foreign}))
            raise LossError(
                f"{where}: loss may only use the node's own variable {variable.name()}, "
                f"but it also uses {names}"
            )
        self.expr = cp.reshape(expr, ()) if expr.shape != () else expr
        self.variable = variable
        self.node = node

    @property
    def dim(self) -> int:
        return int(self.variable.size)

    def expression(self, x: cp.Expression) -> cp.Expression:
        if x is not self.variable:
            raise LossError(
                f"node {self.node!r}: a symbolic loss is an expression in its node's variable "
                "and cannot be re-expressed in another variable"
            )
        return self.expr

    def _base_expression(self, x):  # pragma: no cover - expression() is overridden
        return self.expression(x)

    def _base_value(self, w):
        old = self.variable.value
        self.variable.value = np.asarray(w, dtype=float).reshape(self.variable.shape)
        try:
            val = self.expr.value
        finally:
            self.variable.value = old
        return float(np.inf if val is None else val)

    def __repr__(self) -> str:
        return f"SymbolicLoss({self.expr})"


# =====================================================================  stacked batches
class LossBatch:
    """All library losses of one class, stacked for vectorized evaluation and compilation.

    For data-fit losses the node samples are stacked into a sparse block matrix ``X_blk`` of
    shape ``(M, n*d)`` acting on the C-ordered flat parameter vector, with row weights
    ``c_r = 1/m_i`` and ``row_node[r] = i``.  :class:`QuadraticLoss` nodes stack their centres
    ``a_i``.  ``nodes`` are the positions of the nodes in the batch.
    """

    def __init__(self, cls: type[Loss], nodes: np.ndarray, losses: Sequence[Loss], n: int, d: int):
        self.cls = cls
        self.nodes = np.asarray(nodes, dtype=np.int64)
        self.losses = list(losses)
        self.n, self.d = n, d
        if issubclass(cls, DataFitLoss):
            ms = np.array([ls.m for ls in losses], dtype=np.int64)
            self.row_node = np.repeat(self.nodes, ms)
            Xs = np.vstack([ls.X for ls in losses])
            M = Xs.shape[0]
            rows = np.repeat(np.arange(M), d)
            cols = (self.row_node[:, None] * d + np.arange(d)[None, :]).ravel()
            self.X_blk = sp.csr_matrix((Xs.ravel(), (rows, cols)), shape=(M, n * d))
            self.y = np.concatenate([ls.y for ls in losses])
            self.c = np.repeat(1.0 / ms, ms)
            params = [ls._row_param() for ls in losses]
            self.p = None if params[0] is None else np.concatenate(params)
        elif cls is QuadraticLoss:
            self.a = np.vstack([ls.a for ls in losses])

    @property
    def is_datafit(self) -> bool:
        return issubclass(self.cls, DataFitLoss)

    def expression(self, w_flat: cp.Expression, W: cp.Expression) -> cp.Expression | None:
        """The batch's summed (unregularized) loss as one CVXPY expression."""
        if self.is_datafit:
            return _rows_sum_cvx(self.cls, self.X_blk @ w_flat, self.y, self.c, self.p)
        if self.cls is QuadraticLoss:
            return cp.sum_squares(W[self.nodes, :] - self.a)
        return None  # ZeroLoss

    def values(self, W: np.ndarray) -> np.ndarray:
        """Per-node (unregularized) loss values, an ``(n,)`` array (0 outside the batch)."""
        out = np.zeros(self.n)
        if self.is_datafit:
            t = self.X_blk @ W.ravel()
            out += np.bincount(self.row_node, self.c * self.cls._ell(t, self.y, self.p),
                               minlength=self.n)
        elif self.cls is QuadraticLoss:
            out[self.nodes] = ((W[self.nodes] - self.a) ** 2).sum(axis=1)
        return out

    def gradients(self, W: np.ndarray) -> np.ndarray:
        """Stacked (unregularized) gradients, an ``(n, d)`` array (0 outside the batch)."""
        if self.is_datafit:
            t = self.X_blk @ W.ravel()
            g = self.X_blk.T @ (self.c * self.cls._ell_d1(t, self.y, self.p))
            return g.reshape(self.n, self.d)
        out = np.zeros((self.n, self.d))
        if self.cls is QuadraticLoss:
            out[self.nodes] = 2.0 * (W[self.nodes] - self.a)
        return out
