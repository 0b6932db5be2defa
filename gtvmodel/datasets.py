"""Networked datasets of the papers' experiments (paper 001 Section VI, paper 000 Sec. 5).

Each generator returns a :class:`NetworkedData`: a graph, local datasets ``(X_i, y_i)`` for the
nodes that have data, the true piecewise-constant weights ``w_bar_i`` and the true cluster of
each node, and (where the paper has them) per-node validation sets ``X_val``/``y_val``.
:meth:`NetworkedData.model` turns it into a :class:`~gtvmodel.GTVModel` with the squared loss
(39) (zero loss where a node has no data) or the logistic loss, :meth:`NetworkedData.mse`
evaluates (40), :meth:`NetworkedData.validation_error` (44) and :meth:`NetworkedData.split`
draws a random train/validation split of every local dataset.  All generators are seeded and
sample with numpy's :class:`~numpy.random.Generator` only (vectorized; no networkx or Python
``random`` generators), so a seed gives the same dataset whatever the networkx version
(``tests/test_datasets.py`` pins a SHA-256 of each dataset).

=================  ==========================================================================
generator          paper setting
=================  ==========================================================================
:func:`sbm`        001 VI-A (Figs. 2-3): SBM, the knobs ``rho``, ``sigma``, ``p_out``
:func:`table1`     001 Table I: SBM 50 + 50, ``d = 100``, ``w_bar_C`` in ``{0, 1}^d``
:func:`chain`      001 VI-B (Figs. 4-5): chain of ``2n`` nodes, boundary weight ``eps``
:func:`star`       001 VI-C (Fig. 7): star with 49 leaves, ``w_bar_i ~ N(0, I)``
:func:`digits`     001 VI-D stand-in: scikit-learn's 8x8 digits, 40 nodes, binary logistic
:func:`weather`    001 VI-E stand-in: synthetic stations, (min today, max yesterday) -> max
:func:`paper000_sbm`  000 Sec. 5 (Table 1): SBM 150 + 150, 30 labelled nodes
=================  ==========================================================================

:func:`digits` and :func:`weather` return their nodes without edges: the paper builds those
graphs from the local datasets (nearest neighbours, the Gaussian Wasserstein distance (42)
thresholded at ``eta`` (43)), which is the graph builders' job, not the data's.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace

import networkx as nx
import numpy as np

from ._validate import as_finite_array, check_int, check_option, check_scalar
from .errors import DataError, ParameterError
from .model import GTVModel
from .terms.losses import LogisticLoss, SquaredLoss
from .terms.penalties import Norm2, Penalty

__all__ = [
    "NetworkedData",
    "linear_data",
    "sbm",
    "sbm_graph",
    "chain",
    "star",
    "table1",
    "digits",
    "weather",
    "paper000_sbm",
]

#: The node losses a dataset may name (``NetworkedData.loss``): the squared loss (39) of the
#: regression experiments and the logistic loss of the classification stand-in (001 VI-D).
LOSSES = {"squared": SquaredLoss, "logistic": LogisticLoss}
Seed = int | np.random.Generator | None


@dataclass
class NetworkedData:
    """A networked dataset.

    ``X``/``y`` map node labels with (training) data to ``(m_i, d)`` features and ``(m_i,)``
    labels; ``true_weights`` is ``(n, d)`` in ``list(graph.nodes)`` order (NaN where there is no
    ground truth: real data); ``clusters`` the true cluster index of each node (same order).
    ``X_val``/``y_val`` hold each node's validation set where the paper has one (001 VI-D,
    VI-E; empty otherwise; :meth:`split` draws one).  ``loss`` names the node loss of
    :meth:`model`: ``"squared"`` (39) or ``"logistic"`` (labels in ``{-1, +1}``).
    """

    graph: nx.Graph
    X: dict[Hashable, np.ndarray]
    y: dict[Hashable, np.ndarray]
    true_weights: np.ndarray
    clusters: np.ndarray
    info: dict = field(default_factory=dict)
    X_val: dict[Hashable, np.ndarray] = field(default_factory=dict)
    y_val: dict[Hashable, np.ndarray] = field(default_factory=dict)
    loss: str = "squared"

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
        """GTV model with the dataset's loss (``loss``: the squared loss (39) or the logistic
        loss) on the training data of the nodes with data and zero loss elsewhere."""
        cls = LOSSES[check_option(self.loss, "loss", LOSSES, error=DataError)]
        model = GTVModel(self.graph, self.dim, penalty=Norm2() if penalty is None else penalty,
                         lam=lam)
        for v, Xv in self.X.items():
            model.set_loss(v, cls(Xv, self.y[v]))
        return model

    def squared_errors(self, weights: np.ndarray) -> np.ndarray:
        """``||w_i - w_bar_i||_2^2`` of every node (node order), the terms of (40)."""
        W = np.asarray(weights, dtype=float).reshape(self.true_weights.shape)
        return ((W - self.true_weights) ** 2).sum(axis=1)

    def mse(self, weights: np.ndarray, nodes: str = "all") -> float:
        """MSE (40): ``(1/|V|) sum_i ||w_i - w_bar_i||^2``.

        ``nodes="unlabelled"`` sums only over nodes without data, still dividing by ``|V|``
        (paper 000's (24)).
        """
        err = self.squared_errors(weights)
        if check_option(nodes, "nodes", ("all", "unlabelled"), error=DataError) == "unlabelled":
            err = err[~self.has_data]
        return float(err.sum() / len(self.true_weights))

    def split(self, val_fraction: float = 0.2, seed: Seed = 0) -> NetworkedData:
        """A copy whose every local dataset is split at random into a training part (``X``,
        ``y``) and a validation part (``X_val``, ``y_val``) of ``round(val_fraction m_i)``
        samples (at least one, and at least one left for training).

        001 VI-D splits 400/100 (``val_fraction = 0.2``); 001 VI-E splits with
        ``m_val/m_train ~ 0.3`` (``val_fraction = 0.3/1.3``) and averages over 5 random
        splits (seeds ``0..4``).
        """
        frac = check_scalar(val_fraction, "val_fraction", min_val=0.0, max_val=1.0,
                            include_boundaries="neither", where="split", error=DataError)
        rng = np.random.default_rng(seed)
        X, y, X_val, y_val = {}, {}, {}, {}
        for v, Xv in self.X.items():  # one permutation per node (Generator.permutation)
            m = len(Xv)
            k = min(max(int(round(frac * m)), 1), m - 1) if m > 1 else 0
            perm = rng.permutation(m)
            X[v], y[v] = Xv[perm[k:]], self.y[v][perm[k:]]
            X_val[v], y_val[v] = Xv[perm[:k]], self.y[v][perm[:k]]
        info = dict(self.info, val_fraction=frac)
        return replace(self, X=X, y=y, X_val=X_val, y_val=y_val, info=info)

    def validation_error(self, weights: np.ndarray) -> float:
        """The validation error (44) of 001 VI-E: ``(1/|V'|) sum_i (1/|X_val_i|) sum
        (x^T w_i - y)^2`` over the nodes ``V'`` with a validation set."""
        W = self._weights(weights)
        rows = [np.mean((self.X_val[v] @ W[i] - self.y_val[v]) ** 2)
                for i, v in enumerate(self.nodes) if len(self.X_val.get(v, ())) > 0]
        return float(np.mean(rows)) if rows else math.nan

    def accuracy(self, weights: np.ndarray, part: str = "validation") -> float:
        """001 VI-D's ``ACC``: the fraction of all samples of the ``"validation"`` (or
        ``"train"``) sets classified correctly by ``sign(x^T w_i)`` (labels in ``{-1, +1}``,
        or ``{0, 1}`` read as ``{-1, +1}``)."""
        hits = self.correct(weights, part)
        return float(hits.mean()) if hits.size else math.nan

    def correct(self, weights: np.ndarray, part: str = "validation") -> np.ndarray:
        """Which samples of the ``"validation"`` (or ``"train"``) sets ``sign(x^T w_i)``
        classifies correctly, node after node (booleans; :meth:`accuracy` is their mean)."""
        Xs, ys = {"validation": (self.X_val, self.y_val), "train": (self.X, self.y)}[
            check_option(part, "part", ("validation", "train"), error=DataError)]
        W = self._weights(weights)
        hits = [(np.where(Xs[v] @ W[i] > 0, 1.0, -1.0) == np.where(ys[v] > 0, 1.0, -1.0))
                for i, v in enumerate(self.nodes) if len(Xs.get(v, ())) > 0]
        return np.concatenate(hits) if hits else np.zeros(0, dtype=bool)

    def _weights(self, weights: np.ndarray) -> np.ndarray:
        """``weights`` as an ``(n, d)`` float array (:class:`DataError` on another shape)."""
        W = np.asarray(weights, dtype=float)
        if W.shape != self.true_weights.shape:
            raise DataError(f"weights has shape {W.shape}, expected {self.true_weights.shape}")
        return W


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
    # one draw, row r = node r's m x d features then its m noise terms: the stream of drawing
    # them node by node (numpy fills arrays variate by variate), in one vectorized call
    draws = rng.standard_normal((k, m * d + m))
    Xs = draws[:, :m * d].reshape(k, m, d)
    ys = (Xs @ W[with_data][:, :, None])[:, :, 0] + sigma * draws[:, m * d:]
    keys = [nodes[i] for i in with_data]
    X, y = dict(zip(keys, Xs, strict=True)), dict(zip(keys, ys, strict=True))
    return NetworkedData(graph, X, y, W, np.asarray(clusters),
                         info={"m": m, "sigma": sigma, "rho": rho})


def _check_rho(rho: float, where: str) -> float:
    """``rho`` (the fraction of nodes with data) in ``(0, 1]``."""
    return check_scalar(rho, "rho", min_val=0.0, max_val=1.0, include_boundaries="right",
                        where=where, error=DataError)


def _check_sizes(sizes: Sequence[int], where: str) -> list[int]:
    """Cluster sizes: a non-empty sequence of positive integers."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence) or not sizes:
        raise DataError(f"{where}: sizes must be a non-empty sequence of cluster sizes, "
                        f"got {sizes!r}")
    return [check_int(k, "sizes", min_val=1, where=where, error=DataError) for k in sizes]


def _check_probability(p: float, name: str, where: str) -> float:
    return check_scalar(p, name, min_val=0.0, max_val=1.0, where=where, error=ParameterError)


def _triangle_pairs(index: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs ``(i, j)``, ``i < j < size``, at positions ``index`` of the row-major list of
    the strict upper triangle (row ``i`` starts at ``S(i) = i (2 size - i - 1) / 2``)."""
    index = np.asarray(index, dtype=np.int64)
    b = 2 * size - 1
    i = np.floor((b - np.sqrt(np.maximum(b * b - 8.0 * index, 0.0))) / 2).astype(np.int64)
    i = np.clip(i, 0, max(size - 2, 0))

    def start(r):
        return r * (2 * size - r - 1) // 2

    i += start(i + 1) <= index  # one integer correction each way absorbs the float rounding
    i -= start(i) > index
    return i, index - start(i) + i + 1


def sbm_graph(sizes: Sequence[int], probs: np.ndarray, seed: Seed = 0) -> nx.Graph:
    """A stochastic block model: nodes ``0..n-1`` in blocks of ``sizes`` (in order), each pair
    of nodes of blocks ``a``, ``b`` joined independently with probability ``probs[a, b]``.

    Sampled with numpy's :class:`~numpy.random.Generator` only (not
    :func:`networkx.stochastic_block_model`, whose draws change with the networkx version): for
    each block pair, the number of edges ``~ Binomial(#pairs, p)`` and then that many distinct
    pairs uniformly, which is the same distribution as independent coin flips, in
    ``O(k^2 + |E|)`` draws.  Edges are added in sorted order.

    Examples
    --------
    >>> from gtvmodel import datasets
    >>> G = datasets.sbm_graph((3, 3), [[1.0, 0.0], [0.0, 1.0]], seed=0)
    >>> sorted(G.edges)
    [(0, 1), (0, 2), (1, 2), (3, 4), (3, 5), (4, 5)]
    """
    sizes = _check_sizes(sizes, "sbm_graph")
    k = len(sizes)
    P = as_finite_array(probs, "probs", ndim=2)
    if P.shape != (k, k) or not np.allclose(P, P.T) or (P < 0).any() or (P > 1).any():
        raise ParameterError(f"sbm_graph: probs must be a symmetric {k} x {k} matrix of "
                             f"probabilities in [0, 1], got shape {P.shape}")
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    parts = []
    for a in range(k):  # block pairs (k^2 of them), each sampled in one vectorized draw
        for b in range(a, k):
            pairs = sizes[a] * (sizes[a] - 1) // 2 if a == b else sizes[a] * sizes[b]
            count = int(rng.binomial(pairs, P[a, b])) if pairs else 0
            idx = np.sort(rng.choice(pairs, size=count, replace=False)) if count else \
                np.zeros(0, dtype=np.int64)
            i, j = _triangle_pairs(idx, sizes[a]) if a == b else np.divmod(idx, sizes[b])
            parts.append(np.column_stack([i + offsets[a], j + offsets[b]]))
    G = nx.Graph()
    G.add_nodes_from(range(int(offsets[-1])))
    G.add_edges_from(np.concatenate(parts).tolist())
    return G


def sbm(sizes: Sequence[int] = (100, 100), p_in: float = 0.5, p_out: float = 1e-2, m: int = 5,
        cluster_weights: Sequence[Sequence[float]] = ((2.0, 2.0), (-2.0, 2.0)),
        sigma: float = 0.0, rho: float = 1.0,
        seed: Seed = 0) -> NetworkedData:
    """Paper 001 VI-A: a stochastic block model with one true weight vector per cluster.

    The graph is drawn by :func:`sbm_graph` (unit weights ``A_e = 1``);
    labels follow the noisy linear model (38) with noise ``sigma``; a uniformly random fraction
    ``rho`` in ``(0, 1]`` of the nodes holds data (the set ``M`` of (39)).  Defaults are the
    VI-A setting (clusters 100 + 100, ``p_in = 0.5``, ``m_i = 5``, ``d = 2``, ``w_bar = (2, 2)``
    and ``(-2, 2)``); Fig. 2 sweeps ``rho`` at ``sigma = 0``, Fig. 3 ``p_out`` at
    ``rho = 0.6``.

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
    sizes = _check_sizes(sizes, "sbm")
    p_in, p_out = _check_probability(p_in, "p_in", "sbm"), _check_probability(p_out, "p_out", "sbm")
    rho = _check_rho(rho, "sbm")
    rng = np.random.default_rng(seed)
    k = len(sizes)
    cw = as_finite_array(cluster_weights, "cluster_weights", ndim=2)
    if cw.shape[0] != k:
        raise DataError(f"{k} clusters but {cw.shape[0]} cluster weight vectors")
    probs = np.where(np.eye(k, dtype=bool), p_in, p_out)
    G = sbm_graph(sizes, probs, seed=rng)
    clusters = np.repeat(np.arange(k), sizes)
    data = linear_data(G, cw[clusters], clusters, m, sigma, rho, seed=rng)
    data.info.update(p_in=p_in, p_out=p_out, sizes=tuple(sizes))
    return data


def table1(sizes: Sequence[int] = (50, 50), p_in: float = 0.5, p_out: float = 1e-2, m: int = 10,
           d: int = 100, sigma: float = 1e-3, rho: float = 1.0, seed: Seed = 0) -> NetworkedData:
    """Paper 001 VI-A.2, Table I (high-dimensional linear regression): the SBM of :func:`sbm`
    with clusters 50 + 50, ``p_in = 0.5``, ``p_out = 1e-2``, ``m_i = 10`` samples of
    dimension ``d = 100`` (so ``m_i < d``: no node can learn alone), noise ``sigma = 1e-3`` in
    (38), and one true weight vector per cluster ``w_bar_C in {0, 1}^d`` with i.i.d.
    Bernoulli(1/2) entries (drawn first from ``seed``).

    Examples
    --------
    >>> from gtvmodel import datasets
    >>> data = datasets.table1(sizes=(4, 4), d=6, seed=0)
    >>> data.dim, sorted(set(data.true_weights.ravel().tolist())) == [0.0, 1.0]
    (6, True)
    >>> data.X[0].shape
    (10, 6)
    """
    d = check_int(d, "d", min_val=1, where="table1", error=DataError)
    sizes = _check_sizes(sizes, "table1")
    rng = np.random.default_rng(seed)
    cw = rng.integers(0, 2, size=(len(sizes), d)).astype(float)
    data = sbm(sizes, p_in, p_out, m, cw, sigma, rho, seed=rng)
    data.info.update(d=d)
    return data


def chain(n: int = 10, eps: float = 0.1, m: int = 5,
          cluster_weights: Sequence[Sequence[float]] = ((2.0, 2.0), (-2.0, 2.0)),
          sigma: float = 0.0, rho: float = 1.0, seed: Seed = 0) -> NetworkedData:
    """Paper 001 VI-B: a chain of ``2n`` nodes, clusters ``{0..n-1}`` and ``{n..2n-1}``, weight 1
    inside the clusters and ``eps >= 0`` on the one boundary edge ``(n-1, n)``.

    Labels follow (38) with noise ``sigma``; as in the paper, ``ceil(rho |V|)`` uniformly random
    nodes hold data (Fig. 4 sweeps ``rho`` at ``sigma = 0``, Fig. 5 ``sigma`` at
    ``rho = 0.6``).

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
    n = check_int(n, "n", min_val=1, where="chain", error=DataError)
    eps = check_scalar(eps, "eps", min_val=0.0, where="chain", error=ParameterError)
    rho = _check_rho(rho, "chain")
    G = nx.path_graph(2 * n)
    for a, b in G.edges:
        G.edges[a, b]["weight"] = eps if (a, b) == (n - 1, n) else 1.0
    clusters = np.repeat([0, 1], n)
    cw = as_finite_array(cluster_weights, "cluster_weights", ndim=2)
    if cw.shape[0] != 2:
        raise DataError(f"chain: 2 clusters but {cw.shape[0]} cluster weight vectors")
    n_data = min(2 * n, math.ceil(rho * 2 * n - 1e-9))  # ceil, robust to 0.6 * 20 = 12.000...2
    data = linear_data(G, cw[clusters], clusters, m, sigma, rho, n_data=n_data, seed=seed)
    data.info.update(eps=eps)
    return data


def star(leaves: int = 49, m: int = 5, d: int = 2, sigma: float = 0.0,
         seed: Seed = 0) -> NetworkedData:
    """Paper 001 VI-C: a star (centre 0 + ``leaves`` leaves, ``A = 1``), ``w_bar_i ~ N(0, I)``
    i.i.d. per node (every node its own cluster), ``m_i = 5`` samples per node from (38).

    Examples
    --------
    >>> from gtvmodel import datasets
    >>> data = datasets.star(leaves=4, seed=0)
    >>> sorted(data.graph.degree)[:2], data.true_weights.shape
    ([(0, 4), (1, 1)], (5, 2))
    """
    leaves = check_int(leaves, "leaves", min_val=1, where="star", error=DataError)
    d = check_int(d, "d", min_val=1, where="star", error=DataError)
    rng = np.random.default_rng(seed)
    G = nx.star_graph(leaves)
    n = leaves + 1
    W = rng.standard_normal((n, d))
    return linear_data(G, W, np.arange(n), m, sigma, 1.0, seed=rng)


#: The digit pairs of the two clusters of 001 VI-D.
DIGIT_CLUSTERS = ((0, 1), (2, 3))


def digits(nodes: int = 40, val_fraction: float = 0.2, seed: Seed = 0) -> NetworkedData:
    """Paper 001 VI-D, **convex stand-in**: scikit-learn's bundled 8x8 handwritten digits
    (:func:`sklearn.datasets.load_digits`, offline) instead of MNIST, and a linear binary
    logistic model at each node instead of the paper's two-layer network (41) (non-convex).

    ``nodes`` (even) nodes in two clusters of ``nodes/2``: the images of digits 0 and 1 are
    dealt at random to the nodes of cluster 0, those of 2 and 3 to cluster 1 (about 18 images
    per node at 40 nodes: the library has about 180 images per digit).  Each node classifies
    its own pair: label ``+1`` for the larger digit of the pair (1 or 3), ``-1`` for the smaller
    (:class:`~gtvmodel.LogisticLoss`'s ``{-1, +1}`` convention); features are the 64 pixel
    intensities scaled to ``[0, 1]`` and a constant 1 (``d = 65``, the last entry the bias).
    Every local dataset is split into training and validation parts (``val_fraction``, the
    paper's 400/100 is ``0.2``).  There is no true weight vector (``true_weights`` is NaN);
    ``info["digits"]`` holds each node's training digits.  The graph has the nodes and no
    edges (the paper joins each node to its 3 nearest nodes, ``A = exp(-dist)``).

    Note: on these 64 pixels one linear classifier also separates ``{0, 2}`` from ``{1, 3}``
    well (scikit-learn's ``LogisticRegression(C=10)`` on the pooled training data: 99 %
    validation accuracy at ``seed=0``), so the paper's pooled-vs-networked gap (Table II: 64 %
    vs 97 %, a network with four outputs) is not expected with linear models on this data.
    """
    nodes = check_int(nodes, "nodes", min_val=2, where="digits", error=DataError)
    if nodes % 2:
        raise DataError(f"digits: nodes must be even (two clusters of nodes/2), got {nodes}")
    from sklearn.datasets import load_digits  # third-party, loaded only by this generator

    rng = np.random.default_rng(seed)
    lib = load_digits()
    features = np.hstack([lib.data / 16.0, np.ones((len(lib.data), 1))])
    half = nodes // 2
    X, y, digit = {}, {}, {}
    for c, pair in enumerate(DIGIT_CLUSTERS):
        idx = rng.permutation(np.flatnonzero(np.isin(lib.target, pair)))
        for j, part in enumerate(np.array_split(idx, half)):
            v = c * half + j
            X[v], digit[v] = features[part], lib.target[part]
            y[v] = np.where(lib.target[part] == pair[1], 1.0, -1.0)
    G = nx.empty_graph(nodes)
    clusters = np.repeat([0, 1], half)
    data = NetworkedData(G, X, y, np.full((nodes, features.shape[1]), np.nan), clusters,
                         info={"pairs": DIGIT_CLUSTERS}, loss="logistic")
    data = data.split(val_fraction, seed=rng)
    data.info["digits"] = digit
    return data


#: Default per-region true weights ``w_bar_r`` of :func:`weather` (today's maximum from
#: today's minimum and yesterday's maximum), south to north.
WEATHER_WEIGHTS = ((0.6, 0.5), (0.9, 0.2), (0.3, 0.8), (1.0, 0.05))
#: Mean temperature (deg C) of the regions, south to north (a Finnish late winter).
WEATHER_CLIMATE = (1.0, -3.0, -7.0, -11.0)


def weather(stations: int = 203, days: int = 28,
            cluster_weights: Sequence[Sequence[float]] = WEATHER_WEIGHTS,
            sigma: float = 1.0, seed: Seed = 0) -> NetworkedData:
    """Paper 001 VI-E, **synthetic stand-in** for the FMI weather data (not fetchable offline).

    ``stations`` stations (203 in the paper) in ``k = len(cluster_weights)`` climate regions
    (sizes as equal as possible, region ``r`` south of ``r + 1``), ``days`` data points per
    station (``m_i = 28``).  Region ``r`` has a mean temperature ``mu_r``
    (:data:`WEATHER_CLIMATE`, continued 4 deg C colder per further region), a daily range of
    ``5 + r`` deg C and true weights ``w_bar_r`` (:data:`WEATHER_WEIGHTS`); station ``s`` sits at
    ``(lat, lon)`` drawn around its region's centre (``info["coords"]``) with its own mean
    ``mu_s = mu_r + N(0, 1)``.  Day ``t = 1..days`` at station ``s``:

        z_t = 0.7 z_{t-1} + N(0, 2^2)           (the region's weather anomaly, shared)
        min_t = mu_s - range_r + z_t + N(0, 1)
        max_t = w_bar_r^T (min_t, max_{t-1}) + sigma eps_t                    (38)

    with ``max_0 = mu_s + N(0, 3^2)``.  The data point of day ``t`` is ``x = (min_t, max_{t-1})``,
    ``y = max_t``: the paper's features and label, and a linear model (38) per region, so the
    regions are the true clusters.  No validation split is drawn here: the paper averages over
    5 random splits with ``m_val/m_train ~ 0.3``; use ``data.split(0.3 / 1.3, seed=k)`` for
    ``k = 0..4``.  The graph has the stations and no edges (the paper thresholds the Gaussian
    Wasserstein distance (42) at ``eta`` (43)).

    Examples
    --------
    >>> from gtvmodel import datasets
    >>> data = datasets.weather(stations=8, seed=0)
    >>> data.X[0].shape, data.clusters.tolist()
    ((28, 2), [0, 0, 1, 1, 2, 2, 3, 3])
    >>> split = data.split(0.3 / 1.3, seed=0)
    >>> len(split.X[0]), len(split.X_val[0])
    (22, 6)
    """
    cw = as_finite_array(cluster_weights, "cluster_weights", ndim=2)
    if cw.shape[1] != 2:
        raise DataError(f"weather: cluster_weights must have 2 columns (min today, max "
                        f"yesterday), got {cw.shape[1]}")
    k = cw.shape[0]
    stations = check_int(stations, "stations", min_val=k, where="weather", error=DataError)
    days = check_int(days, "days", min_val=1, where="weather", error=DataError)
    sigma = check_scalar(sigma, "sigma", min_val=0.0, where="weather", error=DataError)
    rng = np.random.default_rng(seed)
    clusters = np.repeat(np.arange(k), [len(a) for a in np.array_split(np.arange(stations), k)])
    climate = np.array([WEATHER_CLIMATE[r] if r < len(WEATHER_CLIMATE)
                        else WEATHER_CLIMATE[-1] - 4.0 * (r - len(WEATHER_CLIMATE) + 1)
                        for r in range(k)])
    mu = climate[clusters] + rng.standard_normal(stations)
    centres = np.column_stack([60.5 + 9.0 * np.arange(k) / max(k - 1, 1), np.full(k, 25.5)])
    coords = centres[clusters] + rng.normal(0.0, [0.6, 1.5], size=(stations, 2))
    anomaly = np.zeros((k, days + 1))
    for t in range(1, days + 1):
        anomaly[:, t] = 0.7 * anomaly[:, t - 1] + 2.0 * rng.standard_normal(k)
    tmin = (mu - (5.0 + clusters))[:, None] + anomaly[clusters, 1:] \
        + rng.standard_normal((stations, days))
    tmax = np.empty((stations, days + 1))
    tmax[:, 0] = mu + 3.0 * rng.standard_normal(stations)
    for t in range(1, days + 1):
        tmax[:, t] = (cw[clusters, 0] * tmin[:, t - 1] + cw[clusters, 1] * tmax[:, t - 1]
                      + sigma * rng.standard_normal(stations))
    X = {s: np.column_stack([tmin[s], tmax[s, :-1]]) for s in range(stations)}
    y = {s: tmax[s, 1:].copy() for s in range(stations)}
    info = {"coords": coords, "climate": climate, "sigma": sigma, "days": days}
    return NetworkedData(nx.empty_graph(stations), X, y, cw[clusters], clusters, info=info)


def paper000_sbm(seed: Seed = 0, p_out: float = 1e-3, *, sizes: Sequence[int] = (150, 150),
                 n_data: int = 30) -> NetworkedData:
    """Paper 000 Sec. 5: SBM 150 + 150, ``p_in = 0.5``, ``p_out = 1e-3``, ``m_i = 5``, ``d = 2``,
    noiseless, 30 randomly chosen nodes with data (use ``Norm1`` and ``lam = 1e-3``);
    ``sizes`` and ``n_data`` shrink it (quick runs).

    Its Table 1 scores the weights learnt on the 30 labelled nodes (training MSE) and on the
    270 others (test MSE, (24)), each averaged over its own nodes."""
    p_out = _check_probability(p_out, "p_out", "paper000_sbm")
    sizes = _check_sizes(sizes, "paper000_sbm")
    n_data = check_int(n_data, "n_data", min_val=1, max_val=sum(sizes), where="paper000_sbm",
                       error=DataError)
    rng = np.random.default_rng(seed)
    probs = np.where(np.eye(len(sizes), dtype=bool), 0.5, p_out)
    G = sbm_graph(sizes, probs, seed=rng)
    clusters = np.repeat(np.arange(len(sizes)), sizes)
    W = np.array([[2.0, 2.0], [-2.0, 2.0]])[clusters % 2]
    data = linear_data(G, W, clusters, 5, 0.0, n_data=n_data, seed=rng)
    data.info.update(p_in=0.5, p_out=p_out, sizes=tuple(sizes))
    return data
