"""The theory reports: :class:`ClusterReport` (Definition 1 / Theorem 2 for one cluster, from
:func:`~gtvmodel.theory.check_well_connected`) and :class:`RecoveryReport` (Theorem 2's
conclusions (36)-(37) checked on an instance, from :func:`~gtvmodel.theory.verify_recovery`)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..results import Result

__all__ = ["ClusterReport", "RecoveryReport"]


@dataclass(kw_only=True)
class ClusterReport(Result):
    """Definition 1 / Theorem 2 for one cluster ``C`` (see :func:`check_well_connected`); the
    shared vocabulary (:meth:`to_dict`, ...) is :class:`gtvmodel.results.Result`'s (a report
    has no ``weights`` or ``flows``; ``timings`` is empty).  The engine builds it; the
    constructor takes the fields below as keywords and checks nothing.

    Parameters
    ----------
    timings : dict
        Seconds per phase (:class:`~gtvmodel.results.Result`); empty for a report.
    labels : Labels
        The model's node labels and edges (:class:`~gtvmodel.results.Labels`).
    cluster : hashable
        The cluster's label (its index for a list partition).
    nodes : list
        The member node labels, in model order.
    success : bool
        The strict condition (35) (with the budgets below) holds for some ``i0``.
    witness : node label or None
        An ``i0`` for which it holds (None when it fails).
    margin : float
        ``theta* = min_A cut(A, C \\ A) / b(A)`` over nonempty ``A subset C \\ {i0}`` with
        ``b(A) > 0``: for the witness when the condition holds, else the largest ``theta*``
        over all ``i0`` (exact).  Strict iff ``theta* > 1``; ``inf`` when no ``A`` has budget.
    nonstrict : bool
        ``theta* >= 1``: the max-flow from the budgets into ``i0`` saturates every source arc.
    violating_set : list or None
        When the condition fails: a set ``A`` (node labels) with ``b(A) >= cut(A, C \\ A)``
        from a minimum cut for the ``i0`` with the largest margin.
    budgets : dict
        ``node -> b_i`` at ``lam`` (``budgets``, ``beta`` and ``delta`` appear in
        :meth:`to_dict` only with ``arrays=True``).
    alpha : float
        ``alpha_C``, Euclidean strong-convexity modulus of ``f_C``.
    beta, delta : dict
        ``node -> beta_i`` (Euclidean Lipschitz constant of ``grad L_i``) and
        ``node -> delta_i = ||grad L_i(w_bar_C)||_*``.
    boundary : float
        ``|dC|``, the weighted boundary.
    bound : float
        (37): ``2 kappa_p |dC| lam / alpha_C`` bounds ``||w_hat_i - w_bar_C||_2``.
    sharp_bound : float
        ``kappa_p |dC| lam / alpha_C``, the bound that strong monotonicity gives (half of (37)).
    lam : float
        The ``lambda`` of the budgets.
    lam_min : float
        ``lambda_min(C)``: the condition holds exactly for ``lam > lam_min`` (``inf``: never).
    wbar : ndarray (d,)
        ``w_bar_C = argmin f_C``.
    constant : str
        ``"corrected"`` (factor 2) or ``"printed"`` (factor 1).
    norm_factor : float
        ``rho = d^|1/p - 1/2|`` of the penalty norm.

    Attributes
    ----------
    status : str
        ``"well_connected"`` (:attr:`success`) or ``"not_well_connected"``.

    Raises
    ------
    TypeError
        A required field is missing or an unknown keyword is given (the dataclass
        constructor; no value is validated).

    Examples
    --------
    Two triangles joined by the edge ``(2, 3)``, quadratic losses ``(w - a_i)^2`` near
    ``+1`` and ``-1``: cluster ``{0, 1, 2}`` is well-connected at ``lambda = 1``
    (``lambda_min(C) = 0.6``), with the bound (37) on ``||w_hat_i - w_bar_C||_2``:

    >>> import networkx as nx, gtvmodel as gm
    >>> from gtvmodel import theory
    >>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)
    >>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> r = theory.check_well_connected(model, [[0, 1, 2], [3, 4, 5]], lam=1.0)[0]
    >>> r.cluster, r.nodes, r.status, r.witness, round(r.lam_min, 6)
    (0, [0, 1, 2], 'well_connected', 2, 0.6)
    >>> round(r.margin, 4), r.alpha, r.boundary, round(r.bound, 4)  # theta*, alpha_C, |dC|, (37)
    (1.1538, 6.0, 1.0, 0.3333)
    """

    cluster: Hashable
    nodes: list[Hashable]
    success: bool
    witness: Hashable | None
    margin: float
    nonstrict: bool
    violating_set: list[Hashable] | None
    budgets: dict[Hashable, float]
    alpha: float
    beta: dict[Hashable, float]
    delta: dict[Hashable, float]
    boundary: float
    bound: float
    sharp_bound: float
    lam: float
    lam_min: float
    wbar: np.ndarray = field(repr=False)
    constant: str = "corrected"
    norm_factor: float = 1.0

    _BULKY: ClassVar[tuple[str, ...]] = ("budgets", "beta", "delta")

    @property
    def status(self) -> str:
        """``"well_connected"`` (:attr:`success`) or ``"not_well_connected"``."""
        return "well_connected" if self.success else "not_well_connected"

    def summary(self) -> str:
        """One line: verdict, witness or violating set, margin, lam vs lam_min, bound (37)."""
        if self.success:
            verdict = f"well-connected (witness {self.witness!r})"
        else:
            viol = self.violating_set or []
            shown = ", ".join(map(repr, viol[:5])) + (", ..." if len(viol) > 5 else "")
            verdict = f"NOT well-connected (violating set {{{shown}}})"
        return (f"cluster {self.cluster!r} ({len(self.nodes)} nodes): {verdict}; "
                f"theta* = {self.margin:.4g}; lam = {self.lam:.4g}, lam_min = "
                f"{self.lam_min:.4g}; |dC| = {self.boundary:.4g}, alpha_C = {self.alpha:.4g}, "
                f"bound (37) = {self.bound:.4g} [{self.constant}]")


@dataclass(kw_only=True)
class RecoveryReport(Result):
    """What actually happened at ``lam`` (see :func:`verify_recovery`); the shared vocabulary
    (:meth:`weight`, :meth:`to_dict`, ...) is :class:`gtvmodel.results.Result`'s (no
    ``flows``; ``timings`` is empty).  The engine builds it; the constructor takes the fields
    below as keywords and checks nothing.

    Parameters
    ----------
    timings : dict
        Seconds per phase (:class:`~gtvmodel.results.Result`); empty for a report.
    labels : Labels
        The model's node labels and edges (:class:`~gtvmodel.results.Labels`), for
        :meth:`weight`.
    lam : float
        The ``lambda`` of (16) the instance was solved and checked at.
    weights : ndarray (n, d)
        The exact GTV solution ``w_hat`` (:func:`gtvmodel.solve.exact.solve_exact`).
    lifted : ndarray (n, d)
        The cluster-graph solution ``w_tilde`` (46) lifted to the nodes (54).
    cluster_weights : ndarray (k, d)
        ``w_tilde_c`` in partition order.
    wbar : ndarray (k, d)
        ``w_bar_C`` in partition order.
    clustered : bool
        ``w_hat`` is constant on every cluster: ``spread <= tol * scale``.
    spread : dict
        ``cluster -> max_{i in C} ||w_hat_i - mean_C w_hat||_2``.
    deviation : dict
        ``cluster -> max_{i in C} ||w_hat_i - w_bar_C||_2``.
    bound : dict
        ``cluster -> (37)``, ``2 kappa_p |dC| lam / alpha_C``.
    within_bound : bool
        ``deviation <= bound + tol * scale`` for every cluster.
    congestion : float
        ``min_u max_e ||u_e||_* / (lam A_e)`` subject to ``-(D^T u)_i = grad L_i(lifted_i)``.
    success : bool
        ``congestion <= 1 + tol``: the lifted solution is optimal for (16) (exact criterion).
    lifted_gap : float
        ``max_i ||w_hat_i - lifted_i||_2``.
    well_connected : list of ClusterReport or None
        :func:`check_well_connected` at ``lam`` (None if a cluster is disconnected, where the
        condition cannot hold).
    tol : float
        The relative tolerance used; ``scale = max(1, max |w_hat|)``.

    Attributes
    ----------
    status : str
        ``"recovered"`` (:attr:`success`) or ``"not_recovered"``.

    Raises
    ------
    TypeError
        A required field is missing or an unknown keyword is given (the dataclass
        constructor; no value is validated).

    Examples
    --------
    Two triangles joined by the edge ``(2, 3)``, quadratic losses ``(w - a_i)^2`` near
    ``+1`` and ``-1``: at ``lambda = 1`` the exact solution is constant on each triangle and
    the lifted cluster-graph solution (54) is optimal (congestion ``<= 1``):

    >>> import networkx as nx, gtvmodel as gm
    >>> from gtvmodel import theory
    >>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)
    >>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> rep = theory.verify_recovery(model, [[0, 1, 2], [3, 4, 5]], lam=1.0)
    >>> rep.status, rep.clustered, rep.within_bound, bool(rep.congestion <= 1 + rep.tol)
    ('recovered', True, True, True)
    >>> rep.weight(0).round(3).tolist(), round(rep.deviation[0], 4), round(rep.bound[0], 4)
    ([0.833], 0.1667, 0.3333)
    """

    lam: float
    weights: np.ndarray = field(repr=False)
    lifted: np.ndarray = field(repr=False)
    cluster_weights: np.ndarray = field(repr=False)
    wbar: np.ndarray = field(repr=False)
    clustered: bool
    spread: dict[Hashable, float]
    deviation: dict[Hashable, float]
    bound: dict[Hashable, float]
    within_bound: bool
    congestion: float
    success: bool
    lifted_gap: float
    well_connected: list[ClusterReport] | None = field(repr=False)
    tol: float = 1e-6

    @property
    def status(self) -> str:
        """``"recovered"`` (:attr:`success`) or ``"not_recovered"``."""
        return "recovered" if self.success else "not_recovered"

