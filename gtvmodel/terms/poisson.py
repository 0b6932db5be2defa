"""Poisson regression with the log link, a node loss ``L_i`` of GTV minimization (16).

A node holds samples ``x_r`` with counts ``y_r >= 0``; the model is ``y_r ~ Poisson(exp(x_r^T
w))`` and the loss is its mean negative log-likelihood up to constants, written as the half
Poisson deviance so that every row is ``>= 0`` like every library loss's,

    L(w) = (1/m) sum_r ell(x_r^T w, y_r),   ell(t; y) = exp(t) - y t - (y - y log y),

``min_t ell(t; y) = 0`` at ``t = log y`` (approached as ``t -> -inf`` when ``y = 0``;
``0 log 0 = 0``).  The constant ``y - y log y`` (the minimum of ``exp(t) - y t``) changes no
minimizer; it makes ``L >= 0`` (``lower_bound = 0``) and ``ell*(0) = 0``, the premises of the
certificate's zero-demand rule and of the library's lower bounds.

**Conjugate** (docs/conventions.md's row form, ``c_r = 1/m``): ``ell*(v; y) = (v + y) log(v +
y) - (v + y) + (y - y log y)`` for ``v >= -y``, ``+inf`` below; in CVXPY ``-entr(v + y) - (v +
y)`` plus the constant, on ``v >= -y``.

**Facts** (:class:`~gtvmodel.terms.losses.facts.LossFacts`): differentiable, but its gradient
is not globally Lipschitz (``ell'' = exp(t)`` is unbounded), so it has no smoothness constant
``beta`` and no upper Hessian bound (Theorem 2 refuses it).  It offers no level-set
half-spaces and no residual growth bound: its certified radii are ``inf`` unless a
constraint bounds the node.  Everything specific to this loss lives in this module.
"""

from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np
from scipy.special import xlogy

from ..errors import DataError
from .losses import DataFitLoss, LossFacts, RowLoss

__all__ = ["PoissonLoss"]


def _floor(y: Any) -> Any:
    """``min_t exp(t) - y t = y - y log y`` per row (``0`` at ``y = 0``)."""
    return y - xlogy(y, y)


class PoissonRow(RowLoss):
    """The row loss of :class:`PoissonLoss`: ``ell(t; y) = exp(t) - y t - (y - y log y)``,
    ``ell' = exp(t) - y``, ``ell'' = exp(t)`` (unbounded: no ``ell_curvature``), its conjugate
    ``(v + y) log(v + y) - (v + y) + (y - y log y)`` on ``v >= -y``."""

    @staticmethod
    def _ell(t: Any, y: Any, p: Any) -> Any:
        return np.exp(t) - y * t - _floor(y)

    @staticmethod
    def _ell_cvx(t: Any, y: Any, p: Any) -> Any:
        return cp.exp(t) - cp.multiply(y, t) - _floor(y)

    @staticmethod
    def _ell_d1(t: Any, y: Any, p: Any) -> Any:
        return np.exp(t) - y

    @staticmethod
    def _ell_d2(t: Any, y: Any, p: Any) -> Any:
        return np.exp(t)

    @classmethod
    def _ell_d12(cls, t: Any, y: Any, p: Any) -> tuple[Any, Any]:
        e = np.exp(t)  # one exponential for both derivatives
        return e - y, e

    @staticmethod
    def _ell_conj(v: Any, y: Any, p: Any) -> Any:
        a = np.maximum(v + y, 0.0)  # >= 0 on the domain v >= -y (outside: set to inf)
        return xlogy(a, a) - a + _floor(y)

    @staticmethod
    def _ell_conj_cvx(v: Any, y: Any, p: Any) -> Any:
        a = v + y
        return -cp.entr(a) - a + _floor(y)

    @staticmethod
    def _ell_conj_bounds(y: Any, p: Any) -> tuple[Any, Any]:
        return -y, np.inf

    @classmethod
    def ell_conjugate_magnitude(cls, v: Any, y: Any, p: Any) -> Any:
        """A bound of the absolute summands of ``ell*(v) = a log a - a + y - y log y``, ``a = v
        + y``, and of the rounding of ``a`` carried through ``log a``: ``|a log a| + a + y +
        |y log y| + (|v| + |y|) (2 + |log max(a, eps (|v| + |y|))|)``."""
        a = np.maximum(v + y, 0.0)
        size = np.abs(v) + np.abs(y)
        floor = np.maximum(a, np.finfo(float).eps * size)
        with np.errstate(divide="ignore"):
            slope = np.abs(np.log(np.where(floor > 0, floor, 1.0)))
        return (np.abs(xlogy(a, a)) + a + np.abs(y) + np.abs(xlogy(y, y))
                + size * (2.0 + slope))


class PoissonLoss(DataFitLoss):
    """Poisson loss ``(1/m) sum_r (exp(x_r^T w) - y_r x_r^T w - y_r + y_r log y_r)`` (log
    link, the half Poisson deviance: every row ``>= 0``), counts ``y_r >= 0``.

    Parameters
    ----------
    X : array_like, shape (m, d)
        The node's samples ``x_r^T`` as rows: finite, at least one row.
    y : array_like, shape (m,)
        Nonnegative counts ``y_r`` (any nonnegative reals are accepted).
    l1 : float, default 0.0
        ``eta >= 0``: adds ``eta ||w||_1`` to the loss.
    l2 : float, default 0.0
        ``kappa >= 0``: adds ``kappa ||w||_2^2`` to the loss.

    Raises
    ------
    DataError
        ``X`` is not a finite non-empty ``(m, d)`` matrix, or ``y`` is not finite, not of
        length ``m`` or has a negative entry (named).
    ParameterError
        ``l1`` or ``l2`` negative, infinite or NaN.

    Examples
    --------
    >>> import numpy as np, gtvmodel as gm
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> loss = gm.PoissonLoss(X, [1.0, 3.0])
    >>> round(loss.value([0.0, 0.0]), 4)  # (1/2) (1 - 1 + 1 - 3 + 3 log 3)
    0.6479
    >>> round(loss.value([0.0, np.log(3.0)]), 12)  # the minimum, 0: t_r = log y_r
    0.0
    >>> round(loss.conjugate([0.0, 0.0]), 12)  # -min L
    0.0
    >>> loss.smoothness  # exp is not globally L-smooth
    inf
    """

    kind = "poisson"
    row = PoissonRow()
    #: differentiable, no global Lipschitz gradient; every row >= 0 (lower bound 0)
    class_facts = LossFacts(lipschitz_gradient=False, exact_prox=True)
    score_metric = "mse"

    @classmethod
    def check_samples(cls, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`DataFitLoss.check_samples`, and counts ``y >= 0`` (:class:`DataError`
        naming the first negative one)."""
        X, y = super().check_samples(X, y)
        bad = np.flatnonzero(y < 0)
        if bad.size:
            raise DataError(f"PoissonLoss: y[{bad[0]}] = {y[bad[0]]:g} is negative (counts "
                            "y >= 0)")
        return X, y

    def predict_rows(self, X: np.ndarray, W: np.ndarray) -> np.ndarray:
        """The expected counts ``exp(x_r^T w_r)``."""
        return np.exp(self.decision_rows(X, W))
