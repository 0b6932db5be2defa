"""The interface :class:`Penalty` of the edge penalties ``phi`` of (16): what every penalty of
:mod:`gtvmodel.terms.penalties` answers (row values, CVXPY expressions, the scaled conjugate
``lambda A phi*(u / (lambda A))`` of (24)/(27), the dual update DU of Algorithm 1 (33)) and its
defaults.  The library penalties and their re-export of :class:`Penalty` (with ``__module__``
fixed to :mod:`gtvmodel.terms.penalties`) are in :mod:`gtvmodel.terms.penalties`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import cvxpy as cp
import numpy as np

from .._cvx import ScaleParameter
from ..errors import PenaltyError, UnsupportedError
from .spec import PENALTIES, TermSpec

__all__ = ["Penalty"]


class Penalty:
    """Base class of edge penalties ``phi: R^d -> R``, convex with ``phi(0) = 0``.

    Examples
    --------
    Every library penalty is a ``Penalty``; its rows ``phi(V_e)`` of edge differences:

    >>> import numpy as np, gtvmodel as gm
    >>> phi = gm.Norm1()
    >>> isinstance(phi, gm.Penalty), phi.rows_value(np.array([[3.0, -4.0]]))
    (True, array([7.]))
    """

    #: True for norms (the dual becomes a capacitated flow problem).
    is_norm: ClassVar[bool] = False
    #: The name of the penalty in problem files and the registry :data:`~.spec.PENALTIES`.
    kind: ClassVar[str] = "penalty"
    #: Arrays of the file spec by name, their shapes in the symbol ``d`` (:mod:`.spec`).
    spec_arrays: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: True when :meth:`dual_update` and the row evaluations :meth:`rows_value`,
    #: :meth:`conjugate_rows` (and, for norms, :meth:`dual_norm` and ``project_dual_ball``) are
    #: written against the array API (:mod:`gtvmodel._xp`): they then run on other array
    #: libraries' tensors too (Algorithm 1's ``device=`` backend and its certificates,
    #: :mod:`gtvmodel.primal_dual.torch_backend`, :mod:`gtvmodel.certificates.device_certificate`).
    array_api: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        PENALTIES.register_subclass(cls, Penalty)

    # ---- file spec (docs/file_format.md, :mod:`gtvmodel.terms.spec`)
    def to_spec(self) -> TermSpec:
        """The penalty's kind, parameters and arrays for a problem file; library penalties
        only (:class:`UnsupportedError` otherwise)."""
        raise UnsupportedError(f"penalty {self!r} cannot be saved (not a library penalty)")

    @classmethod
    def from_spec(cls, spec: TermSpec) -> Penalty:
        """The penalty that :meth:`to_spec` described (header values checked strictly,
        :class:`~gtvmodel.FileFormatError`; arrays by the constructor)."""
        raise UnsupportedError(f"{cls.__name__} has no file spec")

    def rows_expression(self, Z: cp.Expression) -> cp.Expression:
        """``(phi(Z_e))_e`` for an ``(|E|, d)`` CVXPY expression, a length-``|E|`` vector."""
        raise NotImplementedError

    def rows_epigraph(self, Z: cp.Expression) -> tuple[cp.Expression, list[cp.Constraint]]:
        """``(T, constraints)`` with ``T_e >= phi(Z_e)`` representable and tight at the optimum of
        any problem that minimizes a nonnegative combination of ``T``.

        The compilers use this form: it stays vectorized for penalties that CVXPY cannot apply
        row-wise as one atom (``NormP`` with ``p`` other than 1, 2, inf).
        """
        return self.rows_expression(Z), []

    def weighted_expression(self, Z: cp.Expression, weights: Any) -> cp.Expression:
        """``sum_e weights_e phi(Z_e)`` for nonnegative edge weights (e.g. ``A``)."""
        return weights @ self.rows_expression(Z)

    def rows_value(self, V: np.ndarray) -> np.ndarray:
        """``(phi(V_e))_e`` in numpy for an ``(|E|, d)`` array."""
        raise NotImplementedError

    def value(self, v: np.ndarray) -> float:
        """``phi(v)`` for one vector."""
        return float(self.rows_value(np.atleast_2d(np.asarray(v, dtype=float)))[0])

    # ---- Algorithm 1: proximal maps (issue 5)
    def prox_rows(self, V: np.ndarray, t: Any) -> np.ndarray:
        """Row-wise ``prox_{t_e phi}(V_e)`` for ``t`` a scalar or an ``(|E|,)`` array ``>= 0``."""
        raise UnsupportedError(f"{self!r} has no proximal map")

    def dual_update(self, V: np.ndarray, sigma: Any, lamA: Any) -> np.ndarray:
        """The edge dual update DU (33): row-wise ``prox_{sigma_e g_e*}(V_e)``.

        ``g_e = lambda A_e phi`` (``lamA`` holds ``lambda A_e``, shape ``(|E|,)``), ``sigma``
        the dual steps ``sigma_e`` (scalar or ``(|E|,)``, ``> 0``).  The base class uses
        Moreau's identity ``prox_{sigma g*}(v) = v - sigma prox_{g/sigma}(v/sigma)`` with
        :meth:`prox_rows`; penalties with a closed form (docs/conventions.md table) override it.
        """
        V = np.atleast_2d(np.asarray(V, dtype=float))
        s = np.broadcast_to(np.asarray(sigma, dtype=float), (V.shape[0],))
        lamA = np.broadcast_to(np.asarray(lamA, dtype=float), (V.shape[0],))
        return V - s[:, None] * self.prox_rows(V / s[:, None], lamA / s)

    def dual_updater(self, lamA: Any, dim: int) -> Callable[[np.ndarray, Any, np.ndarray],
                                                            np.ndarray]:
        """DU (33) for repeated calls with the same capacities ``lamA`` (``(k,)``, the
        ``lambda A_e`` of ``k`` edges) on ``(k, dim)`` numpy rows: a function ``(V, sigma,
        out)`` that writes :meth:`dual_update` ``(V, sigma, lamA)`` into ``out`` and returns it
        (``V`` may be overwritten; used block by block by
        :class:`~gtvmodel.primal_dual.updates.EdgeUpdates`).  Penalties whose DU has a faster
        form with preallocated outputs override it, with equal results."""
        def update(V: np.ndarray, sigma: Any, out: np.ndarray) -> np.ndarray:
            out[...] = self.dual_update(V, sigma, lamA)
            return out
        return update

    def compiled_dual_row(self, lamA: Any, dim: int) -> Any:
        """DU (33) as a compiled row kernel for the capacities ``lamA`` (``(|E|,)``) on rows of
        ``dim`` entries: the parameters of one of :mod:`gtvmodel._compiled`'s row kernels
        (:data:`~gtvmodel._compiled.ROW_KERNELS`), which compute :meth:`dual_update` row by
        row in the fused edge pass of ``solve_primal_dual(kernel="numba")``; ``None`` (the
        default) when the penalty has none: the numpy path then runs."""
        return None

    # ---- scaled conjugate of the dual flow problem (24)/(27) (issue 3)
    def conjugate_rows(self, U: Any, lamA: Any) -> np.ndarray:
        """Row-wise ``lambda A_e phi*(u_e / (lambda A_e))`` in numpy (``+inf`` outside the
        domain); ``lamA`` holds ``lambda A_e >= 0`` (scalar or ``(|E|,)``).  At ``lambda A_e =
        0`` the term is the indicator of ``u_e = 0`` (the limit)."""
        raise PenaltyError(f"{self!r} has no conjugate")

    def conjugate_expression(self, U: cp.Expression, lamA: Any
                             ) -> tuple[cp.Expression, list[cp.Constraint]]:
        """CVXPY form ``(cost, constraints)`` of ``sum_e lambda A_e phi*(u_e / (lambda A_e))``
        for an ``(|E|, d)`` expression ``U`` (minimize ``cost`` subject to ``constraints``)."""
        raise PenaltyError(f"{self!r} has no conjugate")

    def conjugate_regime(self, lam: float) -> Any:
        """A key that changes exactly when the form of :meth:`conjugate_parametric` changes
        with ``lambda`` (None: one compiled form serves every ``lambda >= 0``)."""
        return None

    def conjugate_parametric(self, U: cp.Expression, weights: np.ndarray, lam: ScaleParameter
                             ) -> tuple[cp.Expression, list[cp.Constraint]]:
        """:meth:`conjugate_expression` at ``lambda A_e`` with ``lambda`` a
        :class:`~gtvmodel._cvx.ScaleParameter` and ``weights`` the ``A_e``: DPP in ``lambda``
        (valid for every ``lambda`` of the same :meth:`conjugate_regime`)."""
        raise PenaltyError(f"{self!r} has no conjugate")

    def flow_scale(self, d: int, w_scale: float) -> float:
        """Typical size of a flow ``u_e / (lambda A_e)`` at weights of size ``w_scale`` in
        ``R^d`` (the initial step ratio of Algorithm 1's residual balancing): the gradient
        scale ``w_scale`` by default."""
        return w_scale

    def l2_equivalence(self, d: int) -> tuple[float, float]:
        """``(kappa, rho)`` of Theorem 2's constants in ``R^d``: ``kappa = max phi(x) /
        ||x||_2`` (the deviation bound (37)) and ``rho = kappa max ||y||_* / ||y||_2`` (the
        curvature term of the budgets); norm penalties only."""
        raise UnsupportedError(f"penalty {self!r} has no norm-equivalence constants "
                               "(Theorem 2 needs a norm penalty)")

    # ---- level sets (certified radii of the certificate)
    def sublevel_radius(self, slack: float, lamA: Any) -> np.ndarray:
        """Per edge an upper bound ``ell_e`` of ``||v||_inf`` over ``{v: lambda A_e phi(v) <=
        slack}`` (``+inf`` where unbounded, e.g. ``lambda A_e = 0``); rounded upwards."""
        c = np.atleast_1d(np.asarray(lamA, dtype=float))
        return np.full(c.shape, np.inf)

    # ---- norms
    def dual_norm(self, U: np.ndarray) -> np.ndarray:
        """Row-wise dual norm ``||U_e||_*`` (norm penalties only)."""
        raise PenaltyError(f"{self!r} is not a norm: it has no dual norm")

    def dual_norm_expression(self, U: cp.Expression) -> cp.Expression:
        """Row-wise dual norm as a CVXPY expression (norm penalties only)."""
        raise PenaltyError(f"{self!r} is not a norm: it has no dual norm")

    # ------------------------------------------------------------ the polish (solve/polish.py)
    def fused_rows(self, Z: np.ndarray, U: np.ndarray, lamA: Any,
                   scale: float) -> np.ndarray | None:
        """Where an answer ``Z = D W`` with flows ``U`` sits at the kink of ``phi`` (the edge
        differences the polish of :func:`gtvmodel.solve.polish.polish` holds at zero): an
        ``(|E|, d)`` boolean mask, or None when the penalty has no polish (the default).
        Complementarity (23)/(27) puts a flow of an edge with ``z_e != 0`` on its capacity
        ``lambda A_e``; an interior-point answer is near both only on a kink, so a (coordinate
        of a) row counts as fused when its difference relative to ``scale`` is below the
        relative slack of its flow, ``|z_e| / scale <= 1 - |u_e|_* / (lambda A_e)``."""
        return None

    def rows_gradient(self, Z: np.ndarray) -> np.ndarray:
        """Row-wise ``grad phi(z_e)`` (``(|E|, d)``) away from the kinks of
        :meth:`fused_rows` (0 on a zero row); :class:`UnsupportedError` without a polish."""
        raise UnsupportedError(f"{self!r} has no polish (no row gradient)")

    def rows_hessian(self, Z: np.ndarray) -> np.ndarray:
        """Row-wise ``hess phi(z_e)`` (``(|E|, d, d)``) away from the kinks of
        :meth:`fused_rows` (0 on a zero row); :class:`UnsupportedError` without a polish."""
        raise UnsupportedError(f"{self!r} has no polish (no row Hessian)")

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
