"""Edge penalties ``phi`` of the GTV term ``lambda sum_e A_e phi(w_{e+} - w_{e-})`` in (16).

Every penalty acts row-wise on an ``(|E|, d)`` array of edge differences ``V = D W`` and is one
object that knows its CVXPY expression (:meth:`Penalty.rows_expression`), its numeric value
(:meth:`Penalty.rows_value`), the scaled conjugate ``lambda A phi*(u / (lambda A))`` of the dual
flow problem (24)/(27) (:meth:`Penalty.conjugate_rows`), and the edge dual update
``DU(v) = prox_{sigma g_e*}(v)`` of Algorithm 1 (33) (:meth:`Penalty.dual_update`).

Norm penalties (``is_norm``) turn the dual into a flow problem with capacities
``||u_e||_* <= lambda A_e`` (27); their dual norm is :meth:`Penalty.dual_norm`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import cvxpy as cp
import numpy as np

from ._validate import as_finite_array
from .errors import PenaltyError

__all__ = ["Penalty", "Norm2", "Norm1", "NormInf", "NormP", "SquaredNorm2", "QuadForm"]


def _col(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=float).reshape(-1, 1)


class Penalty:
    """Base class of edge penalties ``phi: R^d -> R``, convex with ``phi(0) = 0``."""

    #: True for norms (the dual becomes a capacitated flow problem).
    is_norm: ClassVar[bool] = False
    kind: ClassVar[str] = "penalty"

    def rows_expression(self, Z: cp.Expression) -> cp.Expression:
        """``(phi(Z_e))_e`` for an ``(|E|, d)`` CVXPY expression, a length-``|E|`` vector."""
        raise NotImplementedError

    def weighted_expression(self, Z: cp.Expression, weights: Any) -> cp.Expression:
        """``sum_e weights_e phi(Z_e)`` for nonnegative edge weights (e.g. ``A``)."""
        return weights @ self.rows_expression(Z)

    def rows_value(self, V: np.ndarray) -> np.ndarray:
        """``(phi(V_e))_e`` in numpy for an ``(|E|, d)`` array."""
        raise NotImplementedError

    def value(self, v: np.ndarray) -> float:
        """``phi(v)`` for one vector."""
        return float(self.rows_value(np.atleast_2d(np.asarray(v, dtype=float)))[0])

    # ---- norms
    def dual_norm(self, U: np.ndarray) -> np.ndarray:
        """Row-wise dual norm ``||U_e||_*`` (norm penalties only)."""
        raise PenaltyError(f"{self!r} is not a norm: it has no dual norm")

    def dual_norm_expression(self, U: cp.Expression) -> cp.Expression:
        """Row-wise dual norm as a CVXPY expression (norm penalties only)."""
        raise PenaltyError(f"{self!r} is not a norm: it has no dual norm")

    def check_dim(self, d: int) -> None:
        """Raise :class:`PenaltyError` if the penalty cannot act on ``R^d``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def _key(self) -> tuple:
        return ()


class _NormPenalty(Penalty):
    """``phi = ||.||_p`` with dual norm ``||.||_q``, ``1/p + 1/q = 1``."""

    is_norm = True
    p: float = 2.0

    @property
    def q(self) -> float:
        p = self.p
        if p == 1:
            return np.inf
        if np.isinf(p):
            return 1.0
        return p / (p - 1.0)

    def rows_expression(self, Z):
        return cp.norm(Z, self.p, axis=1)

    def rows_value(self, V):
        return np.linalg.norm(np.atleast_2d(V), ord=self.p, axis=1)

    def dual_norm(self, U):
        return np.linalg.norm(np.atleast_2d(U), ord=self.q, axis=1)

    def dual_norm_expression(self, U):
        return cp.norm(U, self.q, axis=1)


class Norm2(_NormPenalty):
    """``phi(v) = ||v||_2``: network Lasso; capacities ``||u_e||_2 <= lambda A_e``."""

    kind = "norm2"
    p = 2.0


class Norm1(_NormPenalty):
    """``phi(v) = ||v||_1``: anisotropic TV; capacities ``||u_e||_inf <= lambda A_e``."""

    kind = "norm1"
    p = 1.0


class NormInf(_NormPenalty):
    """``phi(v) = ||v||_inf``; capacities ``||u_e||_1 <= lambda A_e``."""

    kind = "norminf"
    p = np.inf

    def rows_expression(self, Z):
        return cp.norm(Z, "inf", axis=1)


class NormP(_NormPenalty):
    """``phi(v) = ||v||_p`` for ``1 <= p <= inf``; capacities ``||u_e||_q <= lambda A_e``."""

    kind = "normp"

    def __init__(self, p: float):
        try:
            pf = float(p)
        except (TypeError, ValueError):
            raise PenaltyError(f"NormP: p must be a number >= 1, got {p!r}") from None
        if np.isnan(pf) or pf < 1:
            raise PenaltyError(f"NormP: p must be >= 1 (a norm), got {p!r}")
        self.p = pf

    def rows_expression(self, Z):
        if np.isinf(self.p):
            return cp.norm(Z, "inf", axis=1)
        if self.p in (1.0, 2.0):
            return cp.norm(Z, self.p, axis=1)
        return cp.pnorm(Z, self.p, axis=1)

    def dual_norm_expression(self, U):
        q = self.q
        if np.isinf(q):
            return cp.norm(U, "inf", axis=1)
        if q in (1.0, 2.0):
            return cp.norm(U, q, axis=1)
        return cp.pnorm(U, q, axis=1)

    def _key(self):
        return (self.p,)

    def __repr__(self) -> str:
        return f"NormP({self.p:g})"


class SquaredNorm2(Penalty):
    """``phi(v) = 1/2 ||v||_2^2`` (MOCHA).

    Scaled conjugate: ``lambda A phi*(u/(lambda A)) = ||u||^2 / (2 lambda A)``.
    """

    kind = "squarednorm2"

    def rows_expression(self, Z):
        return 0.5 * cp.sum(cp.square(Z), axis=1)

    def rows_value(self, V):
        V = np.atleast_2d(V)
        return 0.5 * (V**2).sum(axis=1)


class QuadForm(Penalty):
    """``phi(v) = 1/2 v^T Q v`` with ``Q`` symmetric positive definite.

    The CVXPY form uses the Cholesky factor ``Q = L L^T``: ``v^T Q v = ||L^T v||^2``.
    """

    kind = "quadform"

    def __init__(self, Q: Any):
        Q = as_finite_array(Q, "Q", ndim=2, owner="QuadForm")
        if Q.shape[0] != Q.shape[1] or Q.shape[0] == 0:
            raise PenaltyError(f"QuadForm: Q must be a non-empty square matrix, got {Q.shape}")
        if not np.allclose(Q, Q.T, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(Q).max())):
            raise PenaltyError("QuadForm: Q must be symmetric")
        Q = 0.5 * (Q + Q.T)
        try:
            self.chol = np.linalg.cholesky(Q)
        except np.linalg.LinAlgError:
            raise PenaltyError("QuadForm: Q must be positive definite (Cholesky failed)") from None
        eig = np.linalg.eigvalsh(Q)
        if eig[0] <= 1e-12 * eig[-1]:
            raise PenaltyError(f"QuadForm: Q is numerically singular (eigenvalues {eig[0]:.3g} .. "
                               f"{eig[-1]:.3g}); it must be positive definite")
        self.Q = Q

    def check_dim(self, d: int) -> None:
        if self.Q.shape[0] != d:
            raise PenaltyError(f"QuadForm: Q has shape {self.Q.shape} but the model has d = {d}")

    def rows_expression(self, Z):
        return 0.5 * cp.sum(cp.square(Z @ self.chol), axis=1)

    def rows_value(self, V):
        V = np.atleast_2d(V)
        return 0.5 * np.einsum("ij,jk,ik->i", V, self.Q, V)

    def _key(self):
        return (self.Q.tobytes(),)

    def __repr__(self) -> str:
        return f"QuadForm(d={self.Q.shape[0]})"
