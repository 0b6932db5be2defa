"""Empirical graphs from data, graph sparsifiers, and the certified cost of sparsifying.

* node summaries and distances (:mod:`~gtvmodel.graphs.statistics`,
  :mod:`~gtvmodel.graphs.distances`: Euclidean, the Gaussian Wasserstein distance (42) of
  "Networked Federated Learning", any callable);
* builders (:mod:`~gtvmodel.graphs.builders`): :func:`knn_graph` (001 VI-D),
  :func:`threshold_graph` ((43), 001 VI-E), :func:`epsilon_graph`;
* sparsifiers (:mod:`~gtvmodel.graphs.sparsify`): thesis 002 Section 2.4 and
  effective-resistance sampling, one function :func:`sparsify`;
* diagnostics (:mod:`~gtvmodel.graphs.diagnostics`): edges kept, components, the thesis'
  constant ``M``, and :func:`sparsification_cost`, the sparse solution certified on the full
  problem.

``docs/graphs.md`` walks through all of them.
"""

from .builders import edge_weights, epsilon_graph, knn_graph, threshold_graph
from .diagnostics import (
    GraphDiagnostics,
    SparsificationCost,
    graph_diagnostics,
    incidence_constant,
    sparsification_cost,
)
from .distances import (
    check_distances,
    euclidean_distances,
    pairwise_distances,
    wasserstein_distances,
)
from .sparsify import METHODS, effective_resistances, sparsify
from .statistics import NodeStatistics, node_statistics

__all__ = [
    "NodeStatistics", "node_statistics",
    "check_distances", "euclidean_distances", "pairwise_distances", "wasserstein_distances",
    "edge_weights", "epsilon_graph", "knn_graph", "threshold_graph",
    "METHODS", "effective_resistances", "sparsify",
    "GraphDiagnostics", "SparsificationCost", "graph_diagnostics", "incidence_constant",
    "sparsification_cost",
]
