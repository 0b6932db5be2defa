"""Synthetic networked datasets of the papers' experiments (paper 001 Section VI, paper 000 Sec. 5).

Each generator returns a :class:`NetworkedData`: a graph, local datasets ``(X_i, y_i)`` for the
nodes that have data, the true piecewise-constant weights ``w_bar_i`` and the true cluster of
each node.  :meth:`NetworkedData.model` turns it into a :class:`~gtvmodel.GTVModel` with the
squared loss (39) (zero loss where a node has no data) and :meth:`NetworkedData.mse` evaluates
(40).  All generators are seeded.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from ._validate import as_finite_array, check_int, check_option, check_scalar
from .errors import DataError
from .model import GTVModel
from .terms.losses import SquaredLoss
from .terms.penalties import Norm2, Penalty

__all__ = [
    "NetworkedData",
    "linear_data",
    "sbm",
    "chain",
    "star",
    "paper000_sbm",
]


@dataclass
class NetworkedData:
    """A networked regression dataset.

    ``X``/``y`` map node labels with data to ``(m_i, d)`` features and ``(m_i,)`` labels;
    ``true_weights`` is ``(n, d)`` in ``list(graph.nodes)`` order; ``clusters`` the true cluster
    index of each node (same order).
    """

    graph: nx.Graph
    X: dict[Hashable, np.ndarray]
    y: dict[Hashable, np.ndarray]
    true_weights: np.ndarray
    clusters: np.ndarray
    info: dict = field(default_factory=dict)

    @property
    def nodes(self) -> list[Hashable]:
        """The node labels in model order (``list(graph.nodes)``)."""
        return list(self.graph.nodes)

    @property
    def dim(self) -> int:
        """``d``, the dimension of every ``w_i``."""
        return int(self.true_weights.shape[1])

    @property
    def has_data(self) -> np.ndarray:
        """Boolean mask (node order) of nodes with a local dataset (the set ``M``)."""
        return np.array([v in self.X for v in self.nodes])

    def partition(self) -> list[list[Hashable]]:
        """The true clusters as lists of node labels."""
        nodes = self.nodes
        return [[nodes[i] for i in np.flatnonzero(self.clusters == c)]
                for c in np.unique(self.clusters)]

    def model(self, penalty: Penalty | None = None, lam: float = 1e-2) -> GTVModel:
        """GTV model with the squared loss (39) at nodes with data and zero loss elsewhere."""
        model = GTVModel(self.graph, self.dim, penalty=Norm2() if penalty is None else penalty,
                         lam=lam)
        for v, Xv in self.X.items():
            model.set_loss(v, SquaredLoss(Xv, self.y[v]))
        return model

    def mse(self, weights: np.ndarray, nodes: str = "all") -> float:
        """MSE (40): ``(1/|V|) sum_i ||w_i - w_bar_i||^2``.

        ``nodes="unlabelled"`` sums only over nodes without data, still dividing by ``|V|``
        (paper 000's (24)).
        """
        W = np.asarray(weights, dtype=float).reshape(self.true_weights.shape)
        err = ((W - self.true_weights) ** 2).sum(axis=1)
        if check_option(nodes, "nodes", ("all", "unlabelled"), error=DataError) == "unlabelled":
            err = err[~self.has_data]
        return float(err.sum() / len(self.true_weights))


def linear_data(graph: nx.Graph, true_weights: np.ndarray, clusters: np.ndarray, m: int,
                sigma: float = 0.0, rho: float = 1.0, *, n_data: int | None = None,
                seed: int | np.random.Generator | None = 0) -> NetworkedData:
    """Local datasets from the noisy linear model (38): ``y = X w_bar_i + sigma eps``.

    Features are i.i.d. standard normal; a uniformly random subset ``M`` of the nodes, of size
    ``round(rho n)`` (or ``n_data``), holds data.
    """
    rng = np.random.default_rng(seed)
    nodes = list(graph.nodes)
    W = as_finite_array(true_weights, "true_weights", ndim=2)
    if W.shape[0] != len(nodes):
        raise DataError(f"true_weights has {W.shape[0]} rows for {len(nodes)} nodes")
    m = check_int(m, "m (samples per node)", min_val=1, where="linear_data", error=DataError)
    rho = check_scalar(rho, "rho", min_val=0.0, max_val=1.0, where="linear_data", error=DataError)
    sigma = check_scalar(sigma, "sigma", min_val=0.0, where="linear_data", error=DataError)
    k = int(round(rho * len(nodes))) if n_data is None else int(n_data)
    with_data = np.sort(rng.choice(len(nodes), size=k, replace=False))
    d = W.shape[1]
    X, y = {}, {}
    for i in with_data:
        Xi = rng.standard_normal((m, d))
        X[nodes[i]] = Xi
        y[nodes[i]] = Xi @ W[i] + sigma * rng.standard_normal(m)
    return NetworkedData(graph, X, y, W, np.asarray(clusters),
                         info={"m": m, "sigma": sigma, "rho": rho})


def sbm(sizes: Sequence[int] = (100, 100), p_in: float = 0.5, p_out: float = 1e-2, m: int = 5,
        cluster_weights: Sequence[Sequence[float]] = ((2.0, 2.0), (-2.0, 2.0)),
        sigma: float = 0.0, rho: float = 1.0,
        seed: int | None = 0) -> NetworkedData:
    """Paper 001 VI-A: a stochastic block model with one true weight vector per cluster.

    The graph is drawn with :func:`networkx.stochastic_block_model` (unit weights); defaults
    are the VI-A setting (clusters 100 + 100, ``p_in = 0.5``, ``m_i = 5``, ``d = 2``,
    ``w_bar = (2, 2)`` and ``(-2, 2)``).

    Examples
    --------
    A small SBM (two clusters of 5), its GTV model with the squared loss (39) and the MSE (40)
    of the exact solution:

    >>> from gtvmodel import datasets
    >>> data = datasets.sbm(sizes=(5, 5), p_in=0.9, p_out=0.1, seed=0)
    >>> data.graph.number_of_nodes(), data.dim, data.clusters.tolist()
    (10, 2, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    >>> data.true_weights[[0, 5]].tolist()  # w_bar of the two clusters
    [[2.0, 2.0], [-2.0, 2.0]]
    >>> sol = data.model(lam=0.1).solve_exact()
    >>> data.mse(sol.weights) < 1e-2
    True
    """
    rng = np.random.default_rng(seed)
    k = len(sizes)
    cw = as_finite_array(cluster_weights, "cluster_weights", ndim=2)
    if cw.shape[0] != k:
        raise DataError(f"{k} clusters but {cw.shape[0]} cluster weight vectors")
    probs = [[p_in if a == b else p_out for b in range(k)] for a in range(k)]
    G = nx.stochastic_block_model(list(sizes), probs, seed=int(rng.integers(2**31)))
    clusters = np.repeat(np.arange(k), sizes)
    data = linear_data(G, cw[clusters], clusters, m, sigma, rho, seed=rng)
    data.info.update(p_in=p_in, p_out=p_out, sizes=tuple(sizes))
    return data


def chain(n: int = 10, eps: float = 0.1, m: int = 5,
          cluster_weights: Sequence[Sequence[float]] = ((2.0, 2.0), (-2.0, 2.0)),
          sigma: float = 0.0, rho: float = 1.0, seed: int | None = 0) -> NetworkedData:
    """Paper 001 VI-B: a chain of ``2n`` nodes, clusters ``{0..n-1}`` and ``{n..2n-1}``, weight 1
    inside the clusters and ``eps`` on the one boundary edge.

    Examples
    --------
    >>> import numpy as np
    >>> from gtvmodel import datasets
    >>> data = datasets.chain(n=3, eps=0.1, seed=0)
    >>> data.partition(), data.graph.edges[2, 3]["weight"]
    ([[0, 1, 2], [3, 4, 5]], 0.1)
    >>> sol = data.model(lam=0.05).solve_exact()
    >>> np.round(sol.weights, 2)  # piecewise constant: the two clusters are recovered
    array([[ 2.,  2.],
           [ 2.,  2.],
           [ 2.,  2.],
           [-2.,  2.],
           [-2.,  2.],
           [-2.,  2.]])
    >>> data.mse(sol.weights) < 1e-4
    True
    """
    G = nx.path_graph(2 * n)
    for a, b in G.edges:
        G.edges[a, b]["weight"] = eps if (a, b) == (n - 1, n) else 1.0
    clusters = np.repeat([0, 1], n)
    cw = as_finite_array(cluster_weights, "cluster_weights", ndim=2)
    data = linear_data(G, cw[clusters], clusters, m, sigma, rho, seed=seed)
    data.info.update(eps=eps)
    return data


def star(leaves: int = 49, m: int = 5, d: int = 2, sigma: float = 0.0,
         seed: int | None = 0) -> NetworkedData:
    """Paper 001 VI-C: a star (centre 0 + ``leaves`` leaves, ``A = 1``), ``w_bar_i ~ N(0, I)``
    i.i.d. per node (every node its own cluster)."""
    rng = np.random.default_rng(seed)
    G = nx.star_graph(leaves)
    n = leaves + 1
    W = rng.standard_normal((n, d))
    return linear_data(G, W, np.arange(n), m, sigma, 1.0, seed=rng)


def paper000_sbm(seed: int | None = 0, p_out: float = 1e-3) -> NetworkedData:
    """Paper 000 Sec. 5: SBM 150 + 150, ``p_in = 0.5``, ``p_out = 1e-3``, ``m_i = 5``, ``d = 2``,
    noiseless, 30 randomly chosen nodes with data (use ``Norm1`` and ``lam = 1e-3``)."""
    rng = np.random.default_rng(seed)
    sizes = (150, 150)
    probs = [[0.5, p_out], [p_out, 0.5]]
    G = nx.stochastic_block_model(list(sizes), probs, seed=int(rng.integers(2**31)))
    clusters = np.repeat([0, 1], sizes)
    W = np.array([[2.0, 2.0], [-2.0, 2.0]])[clusters]
    data = linear_data(G, W, clusters, 5, 0.0, n_data=30, seed=rng)
    data.info.update(p_in=0.5, p_out=p_out, sizes=sizes)
    return data
