"""Definition 1 of paper 001 (well-connected clusters, (35) with the factor 2 its proof needs,
docs/conventions.md), decided exactly by max-flow / min-cut for every cluster of a partition."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .._solver import check_solver
from .._validate import check_option
from ..declaration import ModelDeclaration
from .constants import CONSTANT_FACTORS, Constants, check_lam, theorem2_constants
from .cuts import CutNetwork, best_lam_min, best_margin, resolve_flow_func
from .partition import Partition, intra_edges, normalize_partition, require_connected
from .reports import ClusterReport

__all__ = ["check_well_connected", "cluster_reports"]


def check_well_connected(model: ModelDeclaration, partition: Any, lam: float | None = None, *,
                         constant: str = "corrected", flow_func: Callable[..., Any] | None = None,
                         solver: str | None = None) -> list[ClusterReport]:
    """Decide Definition 1 (well-connected clusters, (35) corrected) for every cluster.

    Parameters
    ----------
    model : ModelDeclaration
        Smooth library losses (squared, logistic, Huber, quadratic, zero; ``l2`` allowed), no
        node constraints, a norm penalty (:class:`Norm2`, :class:`Norm1`, :class:`NormInf`,
        :class:`NormP`).  Anything else raises :class:`~gtvmodel.errors.UnsupportedError`
        naming the node or penalty.
    partition : list of clusters, dict cluster id -> nodes, dict node -> cluster id, label array
        Any form :func:`~gtvmodel.theory.partition.normalize_partition` reads (also networkx's
        community output, e.g. ``nx.community.louvain_communities(G)``).  Must list every node
        exactly once (:class:`~gtvmodel.errors.PartitionError`,
        :class:`~gtvmodel.errors.UnknownNodeError`); every cluster must induce a connected
        subgraph, otherwise the condition cannot hold and :class:`PartitionError` says so.
    lam : float, optional
        ``lambda > 0`` of the budgets (default ``model.lam``).
    constant : {"corrected", "printed"}
        ``"corrected"`` uses ``2 rho beta_i |dC| / alpha_C`` as docs/conventions.md (the proof's
        (53) carried into (59)); ``"printed"`` the printed (35) without the 2, which is also
        sufficient because strong monotonicity halves (53) (``docs/theory.md``).
    flow_func : callable, optional
        A networkx max-flow function, as networkx's own ``flow_func`` arguments take it
        (:func:`~networkx.algorithms.flow.preflow_push`,
        :func:`~networkx.algorithms.flow.boykov_kolmogorov`,
        :func:`~networkx.algorithms.flow.edmonds_karp`, :func:`~networkx.algorithms.flow.dinitz`,
        :func:`~networkx.algorithms.flow.shortest_augmenting_path`); a string raises
        :class:`~gtvmodel.errors.ParameterError`.  Default (None) as networkx:
        ``preflow_push`` (push-relabel with global relabelling): here every node sends its
        budget from the source towards the single sink ``i0``, so augmenting-path methods need
        about one path per node while push-relabel moves all the excess at once; on the
        1,000-node benchmark (``benchmarks/bench_theory.py``) it is 4x faster than
        ``boykov_kolmogorov`` and 7x faster than ``edmonds_karp``.  All give the same result.
    solver : str, optional
        CVXPY solver for ``w_bar_C`` when a cluster's loss is not quadratic.

    Returns
    -------
    list of ClusterReport, in partition order.

    Notes
    -----
    For a candidate ``i0`` the network has a source arc ``s -> i`` of capacity ``b_i`` for
    ``i != i0``, both directions of every intra-cluster edge with capacity ``A_ij``, and sink
    ``i0``; its minimum cut is ``min_A b(C \\ {i0}) - b(A) + cut(A)``, so the max-flow equals
    ``sum b_i`` iff the non-strict condition holds.  ``theta*(i0) = min_A cut(A)/b(A)`` is found
    exactly by Dinkelbach's iteration on parametric min-cuts, and ``lam_min`` the same way:
    with ``b_i = c_i + delta_i/lam`` the condition for ``i0`` holds iff ``lam > max_A
    delta(A)/(cut(A) - c(A))`` (``inf`` if some ``A`` has ``cut(A) <= c(A)``).  The ``i0`` are
    tried in order of decreasing budget, each failure restricting the candidates to its
    minimizing set ``A`` (any ``i0' notin A`` is no better), which keeps the search exact and
    usually ends after one or two ``i0``.

    Raises
    ------
    UnsupportedError
        A loss, node constraint or penalty outside the supported ones (named).
    PartitionError
        ``partition`` is not a partition of the model's nodes.
    ParameterError
        ``lam`` or ``constant`` out of range.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)  # triangles joined by edge (2, 3)
    >>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> from gtvmodel import theory
    >>> reports = theory.check_well_connected(model, [[0, 1, 2], [3, 4, 5]], lam=1.0)
    >>> [(r.success, r.witness, round(r.lam_min, 6)) for r in reports]
    [(True, 2, 0.6), (True, 3, 0.6)]
    >>> print(reports[0].summary())
    cluster 0 (3 nodes): well-connected (witness 2); theta* = 1.154; lam = 1, lam_min = 0.6; ...
    >>> r = theory.check_well_connected(model, [[0, 1, 2], [3, 4, 5]], lam=0.1)[0]
    >>> r.success, r.violating_set, round(r.margin, 4)  # lam <= lam_min: (35) fails
    (False, [0, 1], 0.375)

    Any networkx max-flow function gives the same reports:

    >>> from networkx.algorithms.flow import edmonds_karp
    >>> part = {0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "b"}
    >>> r = theory.check_well_connected(model, part, lam=1.0, flow_func=edmonds_karp)[1]
    >>> r.cluster, r.success, round(r.margin, 4)
    ('b', True, 1.1538)
    """
    check_option(constant, "constant", CONSTANT_FACTORS, where="check_well_connected")
    check_solver(solver, "check_well_connected")
    lam_v = check_lam(model.lam if lam is None else lam, "check_well_connected")
    func = resolve_flow_func(flow_func)
    part = normalize_partition(model, partition)
    require_connected(model, part)
    return cluster_reports(model, part, theorem2_constants(model, part, solver), lam_v, constant,
                           func)


def cluster_reports(model: ModelDeclaration, part: Partition, k_: Constants, lam_v: float,
                    constant: str, func: Callable[..., Any]) -> list[ClusterReport]:
    """The per-cluster reports of :func:`check_well_connected` from precomputed constants.

    Budgets ``b_i = sum_{j notin C} A_ij + c rho beta_i |dC| / alpha_C + delta_i / lambda``
    (Definition 1 corrected, ``c`` from ``constant``), then per cluster :func:`best_margin`
    (``theta*``), :func:`best_lam_min` and the bounds (37); ``func`` is a networkx max-flow
    function.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)  # triangles joined by edge (2, 3)
    >>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> from networkx.algorithms.flow import preflow_push
    >>> from gtvmodel.theory.constants import theorem2_constants
    >>> from gtvmodel.theory.partition import normalize_partition
    >>> part = normalize_partition(model, [[0, 1, 2], [3, 4, 5]])
    >>> k_ = theorem2_constants(model, part)
    >>> reports = cluster_reports(model, part, k_, 1.0, "corrected", preflow_push)
    >>> [(r.success, round(r.bound, 4)) for r in reports]  # (37): 2 |dC| lam / alpha_C
    [(True, 0.3333), (True, 0.3333)]
    """
    factor = CONSTANT_FACTORS[constant]
    curv = factor * k_.rho * k_.beta * (k_.boundary / k_.alpha)[part.cid]
    c_all = k_.outside + curv
    b_all = c_all + k_.delta / lam_v
    intra = intra_edges(model, part)
    nodes = model.nodes
    reports = []
    for c, mem in enumerate(part.members):
        loc = np.full(model.num_nodes, -1, dtype=np.int64)
        loc[mem] = np.arange(mem.size)
        ed = intra & (part.cid[model.edges[:, 0]] == c)
        heads, tails = loc[model.edges[ed, 0]], loc[model.edges[ed, 1]]
        weights = model.edge_weights[ed]
        b, cc, dl = b_all[mem], c_all[mem], k_.delta[mem]
        if mem.size == 1:
            margin, i0, viol, lam_min = math.inf, 0, None, 0.0
        else:
            net = CutNetwork(mem.size, heads, tails, weights, func)
            margin, i0, viol = best_margin(net, b)
            lam_min = best_lam_min(net, cc, dl)
        holds = margin > 1.0
        names = [nodes[i] for i in mem]
        a = float(k_.alpha[c])
        reports.append(ClusterReport(
            cluster=part.labels[c],
            nodes=names,
            success=holds,
            witness=names[i0] if holds else None,
            margin=float(margin),
            nonstrict=bool(margin >= 1.0),
            violating_set=None if holds or viol is None else [names[j] for j in
                                                               np.flatnonzero(viol)],
            budgets=dict(zip(names, b.tolist(), strict=True)),
            alpha=a,
            beta=dict(zip(names, k_.beta[mem].tolist(), strict=True)),
            delta=dict(zip(names, dl.tolist(), strict=True)),
            boundary=float(k_.boundary[c]),
            bound=2.0 * k_.kappa * float(k_.boundary[c]) * lam_v / a,
            sharp_bound=k_.kappa * float(k_.boundary[c]) * lam_v / a,
            lam=lam_v,
            lam_min=float(lam_min),
            wbar=k_.wbar[c].copy(),
            constant=constant,
            norm_factor=k_.rho,
        ))
    return reports

