"""Losses without samples: :class:`ZeroLoss`, :class:`QuadraticLoss` and the
:class:`SymbolicLoss` wrapper of CVXPY expressions.
"""

from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np

from ..._cvx import checked_value
from ..._validate import (
    as_finite_array,
    check_own_variable,
)
from ...errors import DataError, LossError, UnsupportedError
from ..spec import TermSpec
from .base import Loss
from .conjugates import quadratic_conjugate_cvx, quadratic_conjugate_rows, zero_conjugate_rows
from .facts import LossFacts


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
    class_facts = LossFacts(exact_prox=True, isotropic_prox=True, has_data=False,
                            quadratic=True)

    @property
    def is_zero(self) -> bool:
        """True unless a regularizer ``eta ||w||_1`` or ``kappa ||w||^2`` is set."""
        return not self.l1 and not self.l2

    def _base_expression(self, x: cp.Expression) -> cp.Expression:
        return cp.Constant(0.0)

    def _base_value(self, w: np.ndarray) -> float:
        return 0.0

    def _base_gradient(self, w: np.ndarray) -> np.ndarray:
        return np.zeros_like(w)

    def _base_hessian_bounds(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros((d, d)), np.zeros((d, d))

    def _conjugate_closed(self, S: np.ndarray) -> tuple[np.ndarray, ...] | None:
        k = S.shape[0]
        return zero_conjugate_rows(np.full(k, self.l1), np.full(k, self.l2), S)

    def _base_conjugate_cvx(self, d: int) -> tuple[cp.Expression, cp.Expression,
                                                   list[cp.Constraint]]:
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
    class_facts = LossFacts(exact_prox=True, isotropic_prox=True, quadratic=True)

    def squared_rows(self, d: int) -> tuple[np.ndarray, np.ndarray, int] | None:
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

    def _base_expression(self, x: cp.Expression) -> cp.Expression:
        return cp.sum_squares(x - self.a)

    def _base_value(self, w: np.ndarray) -> float:
        r = w - self.a
        return float(r @ r)

    def _base_gradient(self, w: np.ndarray) -> np.ndarray:
        return 2.0 * (w - self.a)

    def _base_hessian_bounds(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        return 2.0 * np.eye(d), 2.0 * np.eye(d)

    def _conjugate_closed(self, S: np.ndarray) -> tuple[np.ndarray, ...] | None:
        k = S.shape[0]
        return quadratic_conjugate_rows(np.broadcast_to(self.a, S.shape), np.full(k, self.l1),
                                        np.full(k, self.l2), S)

    def _base_conjugate_cvx(self, d: int) -> tuple[cp.Expression, cp.Expression,
                                                   list[cp.Constraint]]:
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
    variable: cp.Variable
    #: unknown: no gradient or constants are claimed; no lower bound (the certificate
    #: computes -h*(0) by conic duality)
    class_facts = LossFacts(differentiable=False, lipschitz_gradient=False, lower_bound=-np.inf)

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

    def _base_expression(self, x: cp.Expression) -> cp.Expression:  # pragma: no cover
        return self.expression(x)

    def domain_constraints(self) -> list[cp.Constraint]:
        """The expression's CVXPY domain (``expr.domain``): the loss is ``+inf`` outside it
        (docs/conventions.md)."""
        return list(self.expr.domain)

    def _prox_variable(self, d: int) -> cp.Variable:
        return self.variable

    def _base_value(self, w: np.ndarray) -> float:
        # +inf outside the expression's domain: CVXPY's numeric value is not trustworthy there
        # (finite and too small for inv_pos/power(x, -1)/quad_over_lin, NaN for log)
        return checked_value(self.expr, self.variable, w)

    def to_spec(self) -> TermSpec:
        """Symbolic losses have no file format (:class:`UnsupportedError`)."""
        raise UnsupportedError("symbolic losses cannot be saved")

    def __repr__(self) -> str:
        return f"SymbolicLoss({self.expr})"
