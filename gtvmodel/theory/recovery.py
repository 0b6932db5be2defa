"""Recovery on an instance (Theorem 2 of paper 001): solve (16) exactly and check clustering
(36), the deviation bound (37) and, exactly, optimality of the lifted cluster-graph solution
(46), (54)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._solver import check_solver
from .._validate import check_option, check_scalar
from ..declaration import ModelDeclaration
from ..errors import PartitionError
from ..results import Labels
from .consensus import min_congestion
from .constants import CONSTANT_FACTORS, check_lam, theorem2_constants
from .cuts import DEFAULT_FLOW_FUNC
from .partition import normalize_partition, require_connected
from .quotient import build_cluster_graph
from .reports import RecoveryReport
from .well_connected import cluster_reports

__all__ = ["verify_recovery"]


def verify_recovery(model: ModelDeclaration, partition: Any, lam: float, *, tol: float = 1e-6,
                    constant: str = "corrected", solver: str | None = None) -> RecoveryReport:
    """Solve (16) exactly at ``lam`` and check Theorem 2's conclusions on this instance.

    Reports whether ``w_hat`` is constant on each cluster (36) (``spread <= tol * scale``,
    ``scale = max(1, max |w_hat|)``), the largest deviation ``||w_hat_i - w_bar_C||_2`` against
    (37), and an exact certificate that the cluster-graph solution ``w_tilde`` (46), lifted by
    (54), is optimal for (16): a flow ``u`` with ``-(D^T u)_i = grad L_i(w_tilde_{C(i)})`` and
    ``||u_e||_* <= lam A_e`` exists.  That is necessary and sufficient: necessary by (28);
    sufficient because ``sum_e u_e^T (D w)_e = -sum_i grad L_i(w_i)^T w_i``, which equals
    ``lam sum_e A_e ||(D w)_e||`` for the lifted cluster-graph optimum, so every edge term of
    ``lam A_e ||(D w)_e|| - u_e^T (D w)_e >= 0`` vanishes and ``u_e in lam A_e d||.||((D w)_e)``.
    Feasibility is decided by the convex program ``min_u max_e ||u_e||_*/(lam A_e)``
    (``congestion``, reported); ``success = congestion <= 1 + tol`` (the relative accuracy of
    the interior-point solve is far below ``tol``).  Unlike the max-flow test of
    :func:`check_well_connected` (sufficient only), this is exact for the instance.
    ``model.lam`` is set to ``lam`` for the solve and restored afterwards.  ``partition`` takes
    any form :func:`~gtvmodel.theory.partition.normalize_partition` reads (list of clusters,
    networkx community output, dict cluster id -> nodes, dict node -> cluster id, label array).

    Parameters
    ----------
    model : ModelDeclaration
        As for :func:`check_well_connected`.
    partition : partition
        The clusters ``C`` (any form
        :func:`~gtvmodel.theory.partition.normalize_partition` reads).
    lam : float
        The ``lambda`` of the solve.
    tol : float, default 1e-6
        Relative tolerance of "constant on a cluster" and of the congestion ``<= 1``.
    constant : {"corrected", "printed"}, default "corrected"
        Which constant of (37) the deviation is compared with (docs/theory.md).
    solver : str or None, default None
        CVXPY solver (None: Clarabel).

    Returns
    -------
    RecoveryReport
        The per-cluster spreads and deviations, the bound (37), the congestion and
        ``success``.

    Raises
    ------
    UnsupportedError
        A loss, node constraint or penalty outside the supported ones (named).
    PartitionError
        ``partition`` is not a partition of the model's nodes.
    SolverError
        The exact solve or the flow program failed.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)  # triangles joined by edge (2, 3)
    >>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> from gtvmodel import theory
    >>> rep = theory.verify_recovery(model, [[0, 1, 2], [3, 4, 5]], lam=1.0)
    >>> rep.clustered, rep.within_bound, rep.success
    (True, True, True)
    >>> rep.cluster_weights.round(3).ravel().tolist()  # w_tilde (46)
    [0.833, -0.833]
    >>> rep.deviation[0] <= rep.bound[0]  # (37)
    True
    >>> rep = theory.verify_recovery(model, [[0, 1, 2], [3, 4, 5]], lam=0.05)
    >>> rep.clustered, rep.success, rep.well_connected[0].success  # below lam_min = 0.6
    (False, False, False)
    """
    lam_v = check_lam(lam, "verify_recovery")
    tol = check_scalar(tol, "tol", min_val=0.0, include_boundaries="neither",
                       where="verify_recovery")
    check_option(constant, "constant", CONSTANT_FACTORS, where="verify_recovery")
    check_solver(solver, "verify_recovery")
    part = normalize_partition(model, partition)
    k_ = theorem2_constants(model, part, solver)
    try:
        require_connected(model, part)
    except PartitionError:
        reports = None
    else:
        reports = cluster_reports(model, part, k_, lam_v, constant, DEFAULT_FLOW_FUNC)
    old = model.lam
    model.lam = lam_v
    try:
        W = model.solve_exact(solver=solver).weights
    finally:
        model.lam = old
    cg = build_cluster_graph(model, part)
    cg.lam = lam_v
    Wc = cg.solve_exact(solver=solver).weights
    lifted = Wc[part.cid]
    congestion = min_congestion(model, model.loss_gradients(lifted), solver,
                                 "verify_recovery") / lam_v
    scale = max(1.0, float(np.abs(W).max()))
    spread, deviation, bound = {}, {}, {}
    for c, mem in enumerate(part.members):
        label = part.labels[c]
        Wm = W[mem]
        spread[label] = float(np.linalg.norm(Wm - Wm.mean(axis=0), axis=1).max())
        deviation[label] = float(np.linalg.norm(Wm - k_.wbar[c], axis=1).max())
        bound[label] = 2.0 * k_.kappa * float(k_.boundary[c]) * lam_v / float(k_.alpha[c])
    return RecoveryReport(
        lam=lam_v,
        weights=W,
        lifted=lifted,
        cluster_weights=Wc,
        wbar=k_.wbar.copy(),
        clustered=max(spread.values()) <= tol * scale,
        spread=spread,
        deviation=deviation,
        bound=bound,
        within_bound=all(deviation[c] <= bound[c] + tol * scale for c in deviation),
        congestion=float(congestion),
        success=bool(congestion <= 1.0 + tol),
        lifted_gap=float(np.linalg.norm(W - lifted, axis=1).max()),
        well_connected=reports,
        tol=float(tol),
        labels=Labels(model.nodes, model.edges),
    )

