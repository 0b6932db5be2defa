"""Helpers shared by the benchmark's datasets, objective and solvers.

``problem_arrays`` turns a gtvmodel model into the raw arrays every solver receives (so that
a solver written outside gtvmodel needs nothing from it); ``node_graph`` joins nodes that hold
local datasets by a k-nearest-neighbour graph of their data (paper 001 VI-D builds its graphs
from the local datasets in the same way).
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import pdist

from gtvmodel.graphs import knn_graph


def problem_arrays(model):
    """``dict`` of raw arrays describing GTV minimization (16) of ``model``.

    ``X`` ``(M, p)``, ``y`` ``(M,)``: all samples stacked; ``node_index`` ``(M,)``: each row's
    node position ``0..n-1``; ``edges`` ``(E, 2)``: node positions ``(e+, e-)``; ``weights``
    ``(E,)``: ``A_e``.  The node loss is ``L_i(w) = (1/m_i) sum_r ell(x_r^T w, y_r)`` (zero at
    nodes without rows) and the objective ``sum_i L_i(w_i) + lam sum_e A_e phi(w_e+ - w_e-)``.
    """
    rows, ys, idx = [], [], []
    for i in range(model.num_nodes):
        loss = model.loss_at(i)
        if loss.has_data:
            X, y = loss.samples()
            rows.append(X)
            ys.append(y)
            idx.append(np.full(len(y), i))
    return dict(X=np.vstack(rows), y=np.concatenate(ys), node_index=np.concatenate(idx),
                n_nodes=model.num_nodes, dim=model.dim, edges=np.asarray(model.edges),
                weights=np.asarray(model.edge_weights, dtype=float))


def node_graph(data, k=3):
    """``data`` with its graph replaced by the k-NN graph of the nodes' mean feature vectors
    and mean labels (``A_e = exp(-distance / median distance)``, connected)."""
    nodes = data.nodes
    points = np.array([np.append(data.X[v].mean(axis=0), data.y[v].mean()) for v in nodes])
    data.graph = knn_graph(points, k, nodes=nodes, connect=True,
                           scale=float(np.median(pdist(points))))
    return data
