"""Edge penalties ``phi`` of the GTV term ``lambda sum_e A_e phi(w_{e+} - w_{e-})`` in (16).

Every penalty acts row-wise on an ``(|E|, d)`` array of edge differences ``V = D W`` and is one
object that knows its CVXPY expression (:meth:`Penalty.rows_expression`), its numeric value
(:meth:`Penalty.rows_value`), the scaled conjugate ``lambda A phi*(u / (lambda A))`` of the dual
flow problem (24)/(27) (:meth:`Penalty.conjugate_rows`), and the edge dual update
``DU(v) = prox_{sigma g_e*}(v)`` of Algorithm 1 (33) (:meth:`Penalty.dual_update`).

Norm penalties (``is_norm``) turn the dual into a flow problem with capacities
``||u_e||_* <= lambda A_e`` (27); their dual norm is :meth:`Penalty.dual_norm`.

The interface :class:`Penalty` and its defaults are written in :mod:`.penalty_base` and
re-exported here with ``__module__`` set to this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cvxpy as cp
import numpy as np

from .. import _compiled, _norms, _xp
from .._cvx import ScaleParameter, norm_rows_epigraph, norm_rows_le
from .._norms import dual_exponent, norm_rows, project_norm_ball, within
from .._validate import as_finite_array, check_scalar
from ..errors import PenaltyError
from .penalty_base import Penalty
from .spec import ParameterFree, TermSpec, json_number

# the interface lives in penalty_base; it keeps its public home here (docs, pickles)
Penalty.__module__ = __name__

__all__ = ["Penalty", "Norm2", "Norm1", "NormInf", "NormP", "SquaredNorm2", "QuadForm"]


def _col(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=float).reshape(-1, 1)


class _NormPenalty(ParameterFree, Penalty):
    """``phi = ||.||_p`` with dual norm ``||.||_q``, ``1/p + 1/q = 1``.

    :class:`Norm2`, :class:`Norm1` and :class:`NormInf` have no parameters: their file spec
    is ``{"kind": kind}`` (:class:`~gtvmodel.terms.spec.ParameterFree`)."""

    is_norm = True
    array_api = True
    p: float = 2.0

    @property
    def q(self) -> float:
        """The dual exponent, ``1/p + 1/q = 1`` (:func:`gtvmodel._norms.dual_exponent`)."""
        return dual_exponent(self.p)

    def l2_equivalence(self, d: int) -> tuple[float, float]:
        # ||x||_p <= d^max(0, 1/p - 1/2) ||x||_2, and kappa max ||y||_q / ||y||_2 = d^|1/p - 1/2|
        inv_p = 0.0 if np.isinf(self.p) else 1.0 / float(self.p)
        return d ** max(0.0, inv_p - 0.5), d ** abs(inv_p - 0.5)

    def rows_expression(self, Z: cp.Expression) -> cp.Expression:
        """``(||Z_e||_p)_e``, one vectorized CVXPY ``norm`` atom along the rows."""
        return cp.norm(Z, self.p, axis=1)  # type: ignore[arg-type]  # CVXPY takes a float p

    def rows_value(self, V: np.ndarray) -> np.ndarray:
        """Row-wise ``||V_e||_p``, overflow-free and accurate to a few ulps for every ``p``
        (:func:`gtvmodel._norms.norm_rows`).  Any array namespace."""
        return norm_rows(_xp.rows(V), self.p)

    def dual_norm(self, U: np.ndarray) -> np.ndarray:
        """Row-wise ``||U_e||_q``, overflow-free and accurate to a few ulps for every ``q``
        (:func:`gtvmodel._norms.norm_rows`; ``q`` is 10001 for ``p = 1.0001``).  Any array
        namespace."""
        return norm_rows(_xp.rows(U), self.q)

    def dual_norm_expression(self, U: cp.Expression) -> cp.Expression:
        """``(||U_e||_q)_e`` (``1/p + 1/q = 1``) as one vectorized CVXPY atom."""
        return cp.norm(U, self.q, axis=1)  # type: ignore[arg-type]  # CVXPY takes a float p

    def conjugate_rows(self, U: Any, lamA: Any) -> np.ndarray:
        """Capacity indicator (27): ``0`` if ``||u_e||_* <= lambda A_e``, else ``+inf``.

        The test is :func:`gtvmodel._norms.within`: the stable dual norm against the capacity
        with a relative slack of 8 eps (a flow computed *on* the capacity may land a rounding
        error above it; a flow that passes is at most ``(13 + (d + 7)/(2q))`` eps above its
        capacity, which the certificate's rounding allowance covers).  NaN flows fail; at
        ``lambda A_e = 0`` only the zero flow passes.  Any array namespace."""
        U = _xp.rows(U)
        return _xp.namespace(U).where(within(U, _xp.per_row(lamA, U), self.q), 0.0, np.inf)

    def sublevel_radius(self, slack: float, lamA: Any) -> np.ndarray:
        """``||v||_inf <= ||v||_p <= slack / (lambda A_e)``, rounded up (``inf`` at
        ``lambda A_e = 0``)."""
        return _sublevel(slack, lamA, 1.0, square=False)

    def dual_ball_constraints(self, U: cp.Expression, radii: Any) -> list[cp.Constraint]:
        """Vectorized CVXPY constraints ``||U_e||_* <= radii_e`` (the capacities of (27));
        ``radii`` may be an affine CVXPY expression."""
        return [self.dual_norm_expression(U) <= radii]

    def conjugate_expression(self, U: cp.Expression, lamA: Any
                             ) -> tuple[cp.Expression, list[cp.Constraint]]:
        """The capacities (27) as CVXPY constraints: ``sum_e lambda A_e phi*(u_e / (lambda A_e))``
        is ``0`` subject to ``||u_e||_q <= lambda A_e`` (``lamA`` the ``lambda A_e``)."""
        c = np.broadcast_to(np.asarray(lamA, dtype=float), (U.shape[0],))
        return cp.Constant(0.0), self.dual_ball_constraints(U, c)

    def conjugate_parametric(self, U: cp.Expression, weights: np.ndarray, lam: ScaleParameter
                             ) -> tuple[cp.Expression, list[cp.Constraint]]:
        """The capacities ``||u_e||_* <= lambda A_e`` with ``lambda`` a Parameter."""
        return cp.Constant(0.0), self.dual_ball_constraints(U, lam.value * np.asarray(
            weights, dtype=float))

    def flow_scale(self, d: int, w_scale: float) -> float:
        """``||1||_q``-type radius of the dual ball in ``R^d`` (``u_e / (lambda A_e)`` lies in
        the unit ball of ``||.||_*``): ``sqrt(d)`` for ``q = inf``, ``d^(1/2 - 1/q)``."""
        q = self.q
        return float(np.sqrt(d) if np.isinf(q) else d ** max(0.0, 0.5 - 1.0 / q))

    def project_dual_ball(self, U: np.ndarray, radii: Any) -> np.ndarray:
        """Row-wise Euclidean projection of ``U`` (``(|E|, d)``) onto ``{||u_e||_q <= r_e}``.

        ``q`` is the dual exponent: scaling for ``q = 2`` (:class:`Norm2`), entrywise clipping
        for ``q = inf`` (:class:`Norm1`), the sort-based ``l1``-ball projection for ``q = 1``
        (:class:`NormInf`), and a safeguarded Newton iteration on the KKT multiplier otherwise
        (:class:`NormP`, any ``q`` in ``[1 + 1e-6, 1e6]``).  ``radii`` (``(|E|,)`` or a scalar)
        ``>= 0``.  The rows returned are within capacity for certain: the certificate repairs
        flows with this projection (:func:`gtvmodel._norms.project_norm_ball`).
        """
        return project_norm_ball(U, radii, self.q)

    def prox_rows(self, V: np.ndarray, t: Any) -> np.ndarray:
        """``prox_{t ||.||}(v) = v - P_{||.||_* <= t}(v)`` (Moreau)."""
        V = np.atleast_2d(np.asarray(V, dtype=float))
        return V - self.project_dual_ball(V, np.broadcast_to(np.asarray(t, float), (len(V),)))

    def dual_update(self, V: np.ndarray, sigma: Any, lamA: Any) -> np.ndarray:
        """DU (33) for a norm: ``lambda A_e phi*(u / (lambda A_e))`` is the indicator of the
        dual-norm ball of radius ``lambda A_e`` (27), so DU is the projection onto it
        (independent of ``sigma``).  Any array namespace (``V`` a numpy array or a tensor,
        ``lamA`` a number or an array beside it)."""
        V = _xp.rows(V)
        return self.project_dual_ball(V, _xp.per_row(lamA, V))

    def dual_updater(self, lamA: Any, dim: int) -> Callable[[np.ndarray, Any, np.ndarray],
                                                            np.ndarray]:
        """DU (33) with fixed capacities into a given output: for ``q = 2`` (``Norm2``) the
        projection :class:`gtvmodel._norms.L2BallProjection` (the same rows as
        :meth:`dual_update`, bit for bit, in fewer passes and without a copy)."""
        own = type(self).dual_update is _NormPenalty.dual_update and \
            type(self).project_dual_ball is _NormPenalty.project_dual_ball
        if self.q != 2.0 or not own:  # a subclass with its own DU keeps it
            return super().dual_updater(lamA, dim)
        project = _norms.L2BallProjection(lamA, dim)
        return lambda V, sigma, out: project(V, out)

    def compiled_dual_row(self, lamA: Any, dim: int) -> Any:
        """The projection onto the dual-norm ball as a compiled row kernel: ``q = 2``
        (``Norm2``) :class:`~gtvmodel._compiled.L2BallRow` (the rounding bound of
        :class:`~gtvmodel._norms.L2BallProjection`: every flow inside its capacity for
        certain), ``q = inf`` (``Norm1``) :class:`~gtvmodel._compiled.ClipRow`; None for the
        other ``q``, for a subclass with its own DU, and for radii that are not finite and
        ``>= 0`` (the numpy path names the edge)."""
        own = type(self).dual_update is _NormPenalty.dual_update and \
            type(self).project_dual_ball is _NormPenalty.project_dual_ball
        r = np.ascontiguousarray(np.asarray(lamA, dtype=float).reshape(-1))
        if not own or not (np.isfinite(r).all() and (r >= 0).all()):
            return None
        if self.q == 2.0:
            return _compiled.l2_ball_row(_norms.L2BallProjection(r, dim))
        return _compiled.ClipRow(r) if np.isinf(self.q) else None


class Norm2(_NormPenalty):
    """``phi(v) = ||v||_2``: network Lasso; capacities ``||u_e||_2 <= lambda A_e``.

    Examples
    --------
    Rows ``phi(V_e)``, the scaled conjugate ``lambda A_e phi*(u_e / (lambda A_e))`` of the dual
    (24)/(27) and the edge update DU (33) with ``sigma_e = 1/2`` at ``lambda A_e = 2``:

    >>> import numpy as np, gtvmodel as gm
    >>> V = np.array([[3.0, -4.0], [0.5, 0.0]])
    >>> phi = gm.Norm2()
    >>> phi.rows_value(V), phi.dual_norm(V)
    (array([5. , 0.5]), array([5. , 0.5]))
    >>> phi.conjugate_rows(V, 2.0)  # the indicator of the capacity ||u_e||_2 <= 2
    array([inf,  0.])
    >>> np.round(phi.dual_update(V, 0.5, 2.0), 4)  # v min(1, lambda A_e / ||v||_2)
    array([[ 1.2, -1.6],
           [ 0.5,  0. ]])
    """

    kind = "norm2"
    p = 2.0

    def fused_rows(self, Z: np.ndarray, U: np.ndarray, lamA: Any,
                   scale: float) -> np.ndarray | None:
        """Whole rows: ``||z_e||_2 / scale <= 1 - ||u_e||_2 / (lambda A_e)``."""
        Z, U = np.atleast_2d(Z), np.atleast_2d(U)
        row = self.rows_value(Z) / scale <= 1.0 - self.dual_norm(U) / lamA
        return np.repeat(row[:, None], Z.shape[1], axis=1)

    def rows_gradient(self, Z: np.ndarray) -> np.ndarray:
        """``z_e / ||z_e||_2`` (0 on a zero row)."""
        Z = np.atleast_2d(np.asarray(Z, dtype=float))
        r = self.rows_value(Z)
        return Z / np.where(r > 0, r, 1.0)[:, None]

    def rows_hessian(self, Z: np.ndarray) -> np.ndarray:
        """``(I - z_e z_e^T / ||z_e||^2) / ||z_e||_2`` (0 on a zero row)."""
        Z = np.atleast_2d(np.asarray(Z, dtype=float))
        r = self.rows_value(Z)
        N = self.rows_gradient(Z)
        H = np.eye(Z.shape[1])[None] - N[:, :, None] * N[:, None, :]
        return np.where(r > 0, 1.0 / np.where(r > 0, r, 1.0), 0.0)[:, None, None] * H


class Norm1(_NormPenalty):
    """``phi(v) = ||v||_1``: anisotropic TV; capacities ``||u_e||_inf <= lambda A_e``.

    Examples
    --------
    Rows ``phi(V_e)``, the scaled conjugate ``lambda A_e phi*(u_e / (lambda A_e))`` of the dual
    (24)/(27) and the edge update DU (33) with ``sigma_e = 1/2`` at ``lambda A_e = 2``:

    >>> import numpy as np, gtvmodel as gm
    >>> V = np.array([[3.0, -4.0], [0.5, 0.0]])
    >>> phi = gm.Norm1()
    >>> phi.rows_value(V), phi.dual_norm(V)
    (array([7. , 0.5]), array([4. , 0.5]))
    >>> phi.conjugate_rows(V, 2.0)  # the indicator of ||u_e||_inf <= 2
    array([inf,  0.])
    >>> np.round(phi.dual_update(V, 0.5, 2.0), 4)  # clip each entry to [-2, 2]
    array([[ 2. , -2. ],
           [ 0.5,  0. ]])
    """

    kind = "norm1"
    p = 1.0

    def fused_rows(self, Z: np.ndarray, U: np.ndarray, lamA: Any,
                   scale: float) -> np.ndarray | None:
        """Coordinate-wise: ``|z_ej| / scale <= 1 - |u_ej| / (lambda A_e)``."""
        Z, U = np.atleast_2d(Z), np.atleast_2d(U)
        cap = np.broadcast_to(np.asarray(lamA, dtype=float), (Z.shape[0],))[:, None]
        return np.abs(Z) / scale <= 1.0 - np.abs(U) / cap

    def rows_gradient(self, Z: np.ndarray) -> np.ndarray:
        """``sign(z_e)`` coordinate-wise."""
        return np.sign(np.atleast_2d(np.asarray(Z, dtype=float)))

    def rows_hessian(self, Z: np.ndarray) -> np.ndarray:
        """0: ``phi`` is piecewise linear."""
        Z = np.atleast_2d(Z)
        return np.zeros((Z.shape[0], Z.shape[1], Z.shape[1]))


class NormInf(_NormPenalty):
    """``phi(v) = ||v||_inf``; capacities ``||u_e||_1 <= lambda A_e``.

    Examples
    --------
    Rows ``phi(V_e)``, the scaled conjugate ``lambda A_e phi*(u_e / (lambda A_e))`` of the dual
    (24)/(27) and the edge update DU (33) with ``sigma_e = 1/2`` at ``lambda A_e = 2``:

    >>> import numpy as np, gtvmodel as gm
    >>> V = np.array([[3.0, -4.0], [0.5, 0.0]])
    >>> phi = gm.NormInf()
    >>> phi.rows_value(V), phi.dual_norm(V)
    (array([4. , 0.5]), array([7. , 0.5]))
    >>> phi.conjugate_rows(V, 2.0)  # the indicator of ||u_e||_1 <= 2
    array([inf,  0.])
    >>> np.round(phi.dual_update(V, 0.5, 2.0), 4)  # projection onto the l1 ball of radius 2
    array([[ 0.5, -1.5],
           [ 0.5,  0. ]])
    """

    kind = "norminf"
    p = np.inf

    def fused_rows(self, Z: np.ndarray, U: np.ndarray, lamA: Any,
                   scale: float) -> np.ndarray | None:
        """Whole rows: ``||z_e||_inf / scale <= 1 - ||u_e||_1 / (lambda A_e)``."""
        Z, U = np.atleast_2d(Z), np.atleast_2d(U)
        cap = np.broadcast_to(np.asarray(lamA, dtype=float), (Z.shape[0],))
        row = self.rows_value(Z) / scale <= 1.0 - self.dual_norm(U) / cap
        return np.repeat(row[:, None], Z.shape[1], axis=1)

    def rows_gradient(self, Z: np.ndarray) -> np.ndarray:
        """``sign(z_ej) e_j`` at the largest ``|z_ej|`` (the first of ties, where ``phi`` has
        no gradient: the polish's Newton steps then stall and the polished point is rejected
        by its certificate); 0 on a zero row."""
        Z = np.atleast_2d(np.asarray(Z, dtype=float))
        G = np.zeros_like(Z)
        if Z.size:
            j = np.argmax(np.abs(Z), axis=1)
            r = np.arange(Z.shape[0])
            G[r, j] = np.sign(Z[r, j])
        return G

    rows_hessian = Norm1.rows_hessian  # 0: phi is piecewise linear too

    def rows_expression(self, Z: cp.Expression) -> cp.Expression:
        """``(||Z_e||_inf)_e`` as one vectorized CVXPY atom."""
        return cp.norm(Z, "inf", axis=1)


def _rows_pnorm(Z: cp.Expression, p: float) -> cp.Expression:
    """Row-wise ``||Z_e||_p`` for ``p`` other than 1, 2, inf, as an expression.

    CVXPY (1.9) supports ``axis`` in ``pnorm`` only for ``p = 2`` ("The axis parameter is only
    supported for p=2"), so this builds one ``pnorm`` atom per row.  It serves evaluation and
    small problems; the compilers use the vectorized :func:`gtvmodel._cvx.pnorm_rows_le` through
    :meth:`NormP.rows_epigraph` and :meth:`NormP.dual_ball_constraints`.
    """
    if Z.ndim == 1:
        return cp.pnorm(Z, p)  # type: ignore[arg-type]  # CVXPY takes a float p
    return cp.hstack([cp.pnorm(Z[e, :], p)  # type: ignore[arg-type]
                      for e in range(Z.shape[0])])


class NormP(_NormPenalty):
    """``phi(v) = ||v||_p`` for ``1 <= p <= inf``; capacities ``||u_e||_q <= lambda A_e``.

    Parameters
    ----------
    p : float
        The exponent ``p >= 1`` (``numpy.inf`` allowed); ``q = p / (p - 1)`` is the dual one.

    Raises
    ------
    PenaltyError
        ``p`` is NaN or below 1.

    Examples
    --------
    Rows ``phi(V_e)``, the scaled conjugate ``lambda A_e phi*(u_e / (lambda A_e))`` of the dual
    (24)/(27) and the edge update DU (33) with ``sigma_e = 1/2`` at ``lambda A_e = 2``:

    >>> import numpy as np, gtvmodel as gm
    >>> V = np.array([[3.0, -4.0], [0.5, 0.0]])
    >>> phi = gm.NormP(3)
    >>> phi.q  # the dual exponent, 1/p + 1/q = 1
    1.5
    >>> np.round(phi.rows_value(V), 3), np.round(phi.dual_norm(V), 3)
    (array([4.498, 0.5  ]), array([5.584, 0.5  ]))
    >>> phi.conjugate_rows(V, 2.0)  # the indicator of ||u_e||_q <= 2
    array([inf,  0.])
    >>> np.round(phi.dual_update(V, 0.5, 2.0), 3)  # projection onto the l_q ball of radius 2
    array([[ 0.985, -1.507],
           [ 0.5  ,  0.   ]])
    """

    kind = "normp"

    def __init__(self, p: float):
        self.p = check_scalar(p, "p", min_val=1.0, finite=False, where="NormP",
                              error=PenaltyError)

    def rows_expression(self, Z: cp.Expression) -> cp.Expression:
        """``(||Z_e||_p)_e``: one vectorized atom for ``p`` in ``{1, 2, inf}``, else one ``pnorm``
        per row (evaluation and small problems; compilers use :meth:`rows_epigraph`)."""
        if np.isinf(self.p):
            return cp.norm(Z, "inf", axis=1)
        if self.p in (1.0, 2.0):
            return cp.norm(Z, self.p, axis=1)  # type: ignore[arg-type]  # a float p
        return _rows_pnorm(Z, self.p)

    def dual_norm_expression(self, U: cp.Expression) -> cp.Expression:
        """``(||U_e||_q)_e``: one vectorized atom for ``q`` in ``{1, 2, inf}``, else one ``pnorm``
        per row (compilers use :meth:`dual_ball_constraints`)."""
        q = self.q
        if np.isinf(q):
            return cp.norm(U, "inf", axis=1)
        if q in (1.0, 2.0):
            return cp.norm(U, q, axis=1)  # type: ignore[arg-type]  # a float q
        return _rows_pnorm(U, q)

    def rows_epigraph(self, Z: cp.Expression) -> tuple[cp.Expression, list[cp.Constraint]]:
        """``(T, constraints)`` with ``T_e >= ||Z_e||_p``: a row-wise atom for ``p`` in
        ``{1, 2, inf}``, else one family of power cones
        (:func:`gtvmodel._cvx.norm_rows_epigraph`)."""
        return norm_rows_epigraph(Z, self.p)

    def dual_ball_constraints(self, U: cp.Expression, radii: Any) -> list[cp.Constraint]:
        """The capacities ``||U_e||_q <= radii_e`` (27): a row-wise atom for ``q`` in
        ``{1, 2, inf}``, else one family of power cones (:func:`gtvmodel._cvx.norm_rows_le`)."""
        return norm_rows_le(U, radii, self.q)

    def to_spec(self) -> TermSpec:
        """``{"kind": "normp", "p": p}`` (``p = inf`` as ``"inf"``)."""
        return TermSpec(self.kind, {"p": json_number(self.p)})

    @classmethod
    def from_spec(cls, spec: TermSpec) -> NormP:
        """``NormP(p)``; ``p`` a JSON number ``>= 1`` or ``"inf"``."""
        spec.check_keys(required=("p",))
        return cls(spec.exponent("p"))

    def _key(self) -> tuple:
        return (self.p,)

    def __repr__(self) -> str:
        return f"NormP({self.p:g})"


class SquaredNorm2(ParameterFree, Penalty):
    """``phi(v) = 1/2 ||v||_2^2`` (MOCHA).

    Scaled conjugate: ``lambda A phi*(u/(lambda A)) = ||u||^2 / (2 lambda A)``.

    Examples
    --------
    Rows ``phi(V_e)``, the scaled conjugate ``lambda A_e phi*(u_e / (lambda A_e))`` of the dual
    (24)/(27) and the edge update DU (33) with ``sigma_e = 1/2`` at ``lambda A_e = 2``:

    >>> import numpy as np, gtvmodel as gm
    >>> V = np.array([[3.0, -4.0], [0.5, 0.0]])
    >>> phi = gm.SquaredNorm2()
    >>> phi.rows_value(V), phi.conjugate_rows(V, 2.0)  # ||u_e||^2 / (2 lambda A_e)
    (array([12.5  ,  0.125]), array([6.25  , 0.0625]))
    >>> np.round(phi.dual_update(V, 0.5, 2.0), 4)  # v / (1 + sigma / (lambda A_e))
    array([[ 2.4, -3.2],
           [ 0.4,  0. ]])
    """

    kind = "squarednorm2"
    array_api = True

    def fused_rows(self, Z: np.ndarray, U: np.ndarray, lamA: Any,
                   scale: float) -> np.ndarray | None:
        """None fused: ``phi`` is smooth."""
        return np.zeros(np.atleast_2d(Z).shape, dtype=bool)

    def rows_gradient(self, Z: np.ndarray) -> np.ndarray:
        """``z_e``."""
        return np.array(np.atleast_2d(Z), dtype=float)

    def rows_hessian(self, Z: np.ndarray) -> np.ndarray:
        """``I`` on every row."""
        Z = np.atleast_2d(Z)
        return np.broadcast_to(np.eye(Z.shape[1]), (Z.shape[0], Z.shape[1], Z.shape[1])).copy()

    def rows_expression(self, Z: cp.Expression) -> cp.Expression:
        """``(1/2 ||Z_e||_2^2)_e`` as a CVXPY expression."""
        return 0.5 * cp.sum(cp.square(Z), axis=1)

    def rows_value(self, V: np.ndarray) -> np.ndarray:
        """``(1/2 ||V_e||_2^2)_e`` (any array namespace)."""
        V = _xp.rows(V)
        return 0.5 * _xp.namespace(V).sum(V * V, axis=1)

    def conjugate_rows(self, U: Any, lamA: Any) -> np.ndarray:
        """``||u_e||^2 / (2 lambda A_e)`` (any array namespace)."""
        return _quad_conj_rows(_xp.rows(U), lamA)

    def conjugate_expression(self, U: cp.Expression, lamA: Any
                             ) -> tuple[cp.Expression, list[cp.Constraint]]:
        """CVXPY form of ``sum_e ||u_e||^2 / (2 lambda A_e)`` (rows with ``lambda A_e = 0``: the
        constraint ``u_e = 0``)."""
        return _quad_conj_expression(U, lamA)

    def conjugate_regime(self, lam: float) -> Any:
        """``lambda > 0``: the compiled form divides by ``lambda``; ``lambda = 0`` pins every flow
        to zero instead."""
        return lam > 0

    def conjugate_parametric(self, U: cp.Expression, weights: np.ndarray, lam: ScaleParameter
                             ) -> tuple[cp.Expression, list[cp.Constraint]]:
        """``(1/lambda) sum_e ||u_e||^2 / (2 A_e)`` with ``1/lambda`` a Parameter (DPP; the
        ``lambda = 0`` regime gives ``u_e = 0``)."""
        return _quad_conj_parametric(U, weights, lam)

    def sublevel_radius(self, slack: float, lamA: Any) -> np.ndarray:
        """``||v||_inf <= ||v||_2 <= sqrt(2 slack / (lambda A_e))``, rounded up."""
        return _sublevel(slack, lamA, 1.0, square=True)

    def prox_rows(self, V: np.ndarray, t: Any) -> np.ndarray:
        """``prox_{t phi}(v) = v / (1 + t)``."""
        V = np.atleast_2d(np.asarray(V, dtype=float))
        t = np.broadcast_to(np.asarray(t, dtype=float), (len(V),))
        return V / (1.0 + t)[:, None]

    def dual_update(self, V: np.ndarray, sigma: Any, lamA: Any) -> np.ndarray:
        """DU (33): ``v / (1 + sigma/(lambda A)) = v lambda A / (lambda A + sigma)``
        (docs/conventions.md; ``0`` when ``lambda A = 0``).  Any array namespace."""
        V = _xp.rows(V)
        xp = _xp.namespace(V)
        s, la = _xp.per_row(sigma, V), _xp.per_row(lamA, V)
        with np.errstate(divide="ignore", invalid="ignore"):
            f = la / (la + s)
        # limits: lambda A = 0 -> 0 (prox of the indicator of {0}); lambda A = inf -> 1
        f = xp.where(la <= 0, 0.0, xp.where(xp.isinf(la), 1.0, f))
        return V * f[:, None]

    def compiled_dual_row(self, lamA: Any, dim: int) -> Any:
        """DU (33) as the compiled row kernel :class:`~gtvmodel._compiled.ScaleRow` (None for a
        subclass with its own DU)."""
        if type(self).dual_update is not SquaredNorm2.dual_update:
            return None
        return _compiled.ScaleRow(np.ascontiguousarray(np.asarray(lamA, dtype=float)
                                                       .reshape(-1)))


class QuadForm(Penalty):
    """``phi(v) = 1/2 v^T Q v`` with ``Q`` symmetric positive definite.

    The CVXPY form uses the Cholesky factor ``Q = L L^T``: ``v^T Q v = ||L^T v||^2``.
    Scaled conjugate ``u^T Q^{-1} u / (2 lambda A)``; DU (33) is
    ``(I + (sigma / (lambda A)) Q^{-1})^{-1} v`` (docs/conventions.md).

    Parameters
    ----------
    Q : array_like, shape (d, d)
        A symmetric positive definite matrix ``Q``.

    Raises
    ------
    PenaltyError
        ``Q`` is not square, not symmetric, or not (numerically) positive definite.

    Examples
    --------
    Rows ``phi(V_e)``, the scaled conjugate ``lambda A_e phi*(u_e / (lambda A_e))`` of the dual
    (24)/(27) and the edge update DU (33) with ``sigma_e = 1/2`` at ``lambda A_e = 2``:

    >>> import numpy as np, gtvmodel as gm
    >>> V = np.array([[3.0, -4.0], [0.5, 0.0]])
    >>> phi = gm.QuadForm(np.diag([2.0, 1.0]))
    >>> phi.rows_value(V), np.round(phi.conjugate_rows(V, 2.0), 3)
    (array([17.  ,  0.25]), array([5.125, 0.031]))
    >>> np.round(phi.dual_update(V, 0.5, 2.0), 4)
    array([[ 2.6667, -3.2   ],
           [ 0.4444,  0.    ]])
    """

    kind = "quadform"
    spec_arrays = {"Q": ("d", "d")}
    array_api = True

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
        """Raise :class:`PenaltyError` unless ``Q`` is ``(d, d)``."""
        if self.Q.shape[0] != d:
            raise PenaltyError(f"QuadForm: Q has shape {self.Q.shape} but the model has d = {d}")

    def rows_expression(self, Z: cp.Expression) -> cp.Expression:
        """``(1/2 ||L^T Z_e||^2)_e = (1/2 Z_e^T Q Z_e)_e``, ``Q = L L^T`` (Cholesky)."""
        return 0.5 * cp.sum(cp.square(Z @ self.chol), axis=1)

    def rows_value(self, V: np.ndarray) -> np.ndarray:
        """``(1/2 V_e^T Q V_e)_e`` (any array namespace)."""
        V = _xp.rows(V)
        if _xp.is_numpy(V):
            return 0.5 * np.einsum("ij,jk,ik->i", V, self.Q, V)
        return 0.5 * _xp.namespace(V).sum((V @ _xp.cached_like(self, "Q", self.Q, V)) * V,
                                          axis=1)

    def _whiten(self, U: Any) -> Any:
        """Rows ``L^{-1} u_e`` (``Q = L L^T``), so that ``u^T Q^{-1} u = ||L^{-1} u||^2``."""
        inv_t = self.__dict__.get("_chol_inv_t")
        if inv_t is None:
            inv_t = np.linalg.inv(self.chol).T
            self.__dict__["_chol_inv_t"] = inv_t
        if isinstance(U, cp.Expression) or _xp.is_numpy(U):
            return U @ inv_t
        return U @ _xp.cached_like(self, "chol_inv_t", inv_t, U)

    def conjugate_rows(self, U: Any, lamA: Any) -> np.ndarray:
        """``u_e^T Q^{-1} u_e / (2 lambda A_e)`` (any array namespace)."""
        return _quad_conj_rows(self._whiten(_xp.rows(U)), lamA)

    def conjugate_expression(self, U: cp.Expression, lamA: Any
                             ) -> tuple[cp.Expression, list[cp.Constraint]]:
        """CVXPY form of ``sum_e u_e^T Q^{-1} u_e / (2 lambda A_e)`` through the whitened rows
        ``L^{-1} u_e`` (rows with ``lambda A_e = 0``: ``u_e = 0``)."""
        return _quad_conj_expression(self._whiten(U), lamA)

    def conjugate_regime(self, lam: float) -> Any:
        """``lambda > 0``: the compiled form divides by ``lambda``; ``lambda = 0`` pins every flow
        to zero instead."""
        return lam > 0

    def conjugate_parametric(self, U: cp.Expression, weights: np.ndarray, lam: ScaleParameter
                             ) -> tuple[cp.Expression, list[cp.Constraint]]:
        """``(1/lambda) sum_e u_e^T Q^{-1} u_e / (2 A_e)`` with ``1/lambda`` a Parameter (DPP; the
        ``lambda = 0`` regime gives ``u_e = 0``)."""
        return _quad_conj_parametric(self._whiten(U), weights, lam)

    def flow_scale(self, d: int, w_scale: float) -> float:
        """``w_scale`` times the largest eigenvalue of ``Q`` (the gradient ``Q v``)."""
        return w_scale * float(np.linalg.eigvalsh(self.Q)[-1])

    def _eig(self) -> tuple[np.ndarray, np.ndarray]:
        eig = self.__dict__.get("_eigh")
        if eig is None:
            eig = np.linalg.eigh(self.Q)
            self.__dict__["_eigh"] = eig
        return eig

    def sublevel_radius(self, slack: float, lamA: Any) -> np.ndarray:
        """``||v||_inf <= ||v||_2 <= sqrt(2 slack / (lambda A_e q_min))`` with ``q_min`` a lower
        bound of the smallest eigenvalue of ``Q`` (the computed one less its rounding bound
        ``d eps ||Q||``), rounded up; ``inf`` if that bound is not positive."""
        ev = self._eig()[0]
        qmin = float(ev[0]) - 4.0 * len(ev) * _norms.EPS * float(np.abs(ev).max())
        if not qmin > 0:
            c = np.atleast_1d(np.asarray(lamA, dtype=float))
            return np.full(c.shape, np.inf)
        return _sublevel(slack, lamA, qmin, square=True)

    def prox_rows(self, V: np.ndarray, t: Any) -> np.ndarray:
        """``prox_{t phi}(v) = (I + t Q)^{-1} v`` in the eigenbasis of ``Q``."""
        V = np.atleast_2d(np.asarray(V, dtype=float))
        t = np.broadcast_to(np.asarray(t, dtype=float), (len(V),))
        ev, B = self._eig()
        return ((V @ B) / (1.0 + t[:, None] * ev[None, :])) @ B.T

    def dual_update(self, V: np.ndarray, sigma: Any, lamA: Any) -> np.ndarray:
        """DU (33): ``(I + (sigma/(lambda A)) Q^{-1})^{-1} v`` (docs/conventions.md), i.e. the
        factor ``lambda A q_k / (lambda A q_k + sigma)`` on the eigenvector of eigenvalue
        ``q_k``.  Any array namespace (the eigenbasis moved beside ``V`` once)."""
        V = _xp.rows(V)
        xp = _xp.namespace(V)
        s, la = _xp.per_row(sigma, V)[:, None], _xp.per_row(lamA, V)[:, None]
        ev, B = self._eig()
        ev, B = _xp.cached_like(self, "ev", ev, V), _xp.cached_like(self, "B", B, V)
        with np.errstate(divide="ignore", invalid="ignore"):
            f = la * ev[None, :] / (la * ev[None, :] + s)
        # limits: lambda A = 0 -> 0 (prox of the indicator of {0}); lambda A = inf -> 1
        f = xp.where(la <= 0, 0.0, xp.where(xp.isinf(la), 1.0, f))
        return ((V @ B) * f) @ B.T

    def to_spec(self) -> TermSpec:
        """``{"kind": "quadform"}`` and the array ``Q`` (``(d, d)``)."""
        return TermSpec(self.kind, {}, {"Q": self.Q})

    @classmethod
    def from_spec(cls, spec: TermSpec) -> QuadForm:
        """``QuadForm(Q)`` (symmetric positive definite, checked by the constructor)."""
        spec.check_keys()
        return cls(spec.array("Q"))

    def _key(self) -> tuple:
        return (self.Q.tobytes(),)

    def __repr__(self) -> str:
        return f"QuadForm(d={self.Q.shape[0]})"


def _sublevel(slack: float, lamA: Any, k: float, square: bool) -> np.ndarray:
    """Upper bounds of ``slack / (k c)`` (``square``: of ``sqrt(2 slack / (k c))``) for
    ``c = lamA`` row-wise, each operation rounded up; ``inf`` where ``c = 0``."""
    c = np.atleast_1d(np.asarray(lamA, dtype=float))
    b = max(float(slack), 0.0)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        den = c * k
        den = np.where(den > 0, np.nextafter(den, 0.0), 0.0)  # lower bound of k c
        t = _norms.round_up(np.where(den > 0, b / np.where(den > 0, den, 1.0), np.inf))
        if square:
            t = _norms.round_up(np.sqrt(_norms.round_up(2.0 * t)))
    return np.where(np.isnan(t), np.inf, t)


def _quad_conj_rows(Uw: np.ndarray, lamA: Any) -> np.ndarray:
    """``||Uw_e||^2 / (2 c_e)`` row-wise; at ``c_e = 0`` the indicator of ``Uw_e = 0`` (``0``
    where the row is exactly zero, ``+inf`` otherwise), never NaN.

    Evaluated as ``n (n / (2 c))`` with the stable norm ``n = ||Uw_e||_2``: no underflow of
    ``||u||^2`` (``u = 1e-200`` is not "zero") and no overflow before the result itself
    overflows.  NaN rows give ``+inf`` (no finite upper bound).  Any array namespace."""
    xp = _xp.namespace(Uw)
    c = _xp.per_row(lamA, Uw)
    n = norm_rows(Uw, 2.0)
    pos = c > 0
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        val = n * (n / (2.0 * xp.where(pos, c, 1.0)))
    out = xp.where(pos, val, xp.where(n == 0.0, 0.0, np.inf))
    return xp.where(xp.isnan(out), np.inf, out)


def _quad_conj_expression(Uw: cp.Expression, lamA: Any
                          ) -> tuple[cp.Expression, list[cp.Constraint]]:
    """CVXPY form of :func:`_quad_conj_rows` summed over rows."""
    c = np.broadcast_to(np.asarray(lamA, dtype=float), (Uw.shape[0],))
    pos = np.flatnonzero(c > 0)
    zero = np.flatnonzero(c <= 0)
    cost: cp.Expression = cp.Constant(0.0)
    cons: list[cp.Constraint] = []
    if pos.size:
        cost = cp.sum_squares(cp.multiply(1.0 / np.sqrt(2.0 * c[pos])[:, None], Uw[pos, :]))
    if zero.size:
        cons.append(Uw[zero, :] == 0)
    return cost, cons


def _quad_conj_parametric(Uw: cp.Expression, weights: Any, lam: ScaleParameter
                          ) -> tuple[cp.Expression, list[cp.Constraint]]:
    """:func:`_quad_conj_expression` at ``c = lambda A`` with ``1/lambda`` a Parameter (the
    form for ``lambda > 0``; at ``lambda = 0`` every row is the indicator of ``Uw_e = 0``)."""
    A = np.asarray(weights, dtype=float)
    if lam.current <= 0:
        return _quad_conj_expression(Uw, np.zeros_like(A))
    cost, cons = _quad_conj_expression(Uw, A)
    return lam.inverse * cost, cons
