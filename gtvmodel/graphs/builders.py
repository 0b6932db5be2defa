"""Empirical graphs from data: k nearest neighbours, thresholds (43), epsilon balls.

"Networked Federated Learning" builds its empirical graphs from the local datasets: Section
VI-D connects each node to its three nearest nodes with exponential-kernel weights
``A_ij = exp(-dist(i, j))``; Section VI-E thresholds the Gaussian Wasserstein distance (42)
at ``eta`` and weights the kept pairs by ``1/W_ij`` (43).  Every builder here returns a
``networkx.Graph`` on the given node labels with a ``weight`` attribute ``A_e > 0`` on every
edge.

Weights (``weight=``) of a pair at distance ``t``, with ``scale`` ``s > 0``:

* ``"exp"``: ``exp(-t / s)`` (001 VI-D with ``s = 1``);
* ``"gaussian"``: ``exp(-t^2 / (2 s^2))`` (the Gaussian kernel of similarity graphs);
* ``"inverse"``: ``1 / t`` ((43); a zero distance between distinct nodes is a
  :class:`~gtvmodel.errors.DataError`);
* ``"unit"``: ``1``;
* a callable mapping an array of distances to positive finite weights.

``connect=True`` adds, between the connected components of the result, the edges of a
minimum spanning tree of the component graph (the shortest distance between two components,
weighted like every other edge), so the result is connected with as few extra edges as
possible (it compares all ``n^2`` pairs once, so it is meant for moderate ``n``);
``require_connected=True`` (without ``connect``) raises a
:class:`~gtvmodel.errors.GraphError` naming isolated nodes instead of returning a disconnected
graph.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import networkx as nx
import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components, minimum_spanning_tree
from scipy.spatial import cKDTree

from .._validate import as_finite_array, check_bool, check_int, check_option, check_scalar
from ..errors import DataError, GraphError, ParameterError
from .distances import check_distances

__all__ = ["edge_weights", "epsilon_graph", "knn_graph", "threshold_graph"]

WEIGHTS = ("exp", "gaussian", "inverse", "unit")
METRICS = ("euclidean", "precomputed")


def edge_weights(dist: Any, weight: str | Callable[[np.ndarray], Any] = "exp",
                 scale: float = 1.0) -> np.ndarray:
    """Edge weights ``A_e`` of pairs at distances ``dist`` (module docstring: ``"exp"``,
    ``"gaussian"``, ``"inverse"``, ``"unit"`` or a callable).

    Examples
    --------
    >>> import numpy as np
    >>> np.round(edge_weights([0.0, 1.0], "exp"), 4).tolist()
    [1.0, 0.3679]
    >>> edge_weights([2.0, 4.0], "inverse").tolist()
    [0.5, 0.25]
    """
    t = as_finite_array(dist, "dist", ndim=1, owner="edge_weights")
    scale = check_scalar(scale, "scale", min_val=0.0, include_boundaries="neither",
                         where="edge_weights")
    if callable(weight):
        A = np.asarray(weight(t), dtype=float)
        if A.shape != t.shape:
            raise ParameterError(f"edge_weights: the weight callable returned shape {A.shape} "
                                 f"for {t.shape[0]} distances")
    else:
        check_option(weight, "weight", WEIGHTS, where="edge_weights")
        if weight == "inverse" and (t == 0).any():
            raise DataError("edge_weights: weight='inverse' (43) needs positive distances, "
                            "got a zero distance between distinct nodes (use 'exp' or "
                            "'gaussian')")
        A = {"exp": lambda: np.exp(-t / scale),
             "gaussian": lambda: np.exp(-t ** 2 / (2.0 * scale ** 2)),
             "inverse": lambda: 1.0 / np.where(t == 0, 1.0, t),
             "unit": lambda: np.ones_like(t)}[weight]()
    if not (np.isfinite(A) & (A > 0)).all():
        k = int(np.flatnonzero(~(np.isfinite(A) & (A > 0)))[0])
        raise DataError(f"edge_weights: weight {A[k]!r} at distance {t[k]!r} is not positive "
                        "and finite (edge weights A_e must be)")
    return A


def knn_graph(X: Any, k: int, *, metric: str = "euclidean",
              weight: str | Callable[[np.ndarray], Any] = "exp", scale: float = 1.0,
              mutual: bool = False, nodes: Sequence[Hashable] | None = None,
              connect: bool = False, require_connected: bool = False) -> nx.Graph:
    """The k-nearest-neighbour graph of "Networked Federated Learning" VI-D (there ``k = 3``,
    ``weight="exp"``).

    ``X``: ``(n, p)`` points (``metric="euclidean"``: neighbours by
    :class:`scipy.spatial.cKDTree`) or an ``(n, n)`` distance matrix
    (``metric="precomputed"``, e.g. :func:`~gtvmodel.graphs.distances.wasserstein_distances`).
    Each node is joined to its ``k`` nearest other nodes (ties broken by position); the graph
    is symmetrized: ``{i, j}`` is an edge when ``j`` is among ``i``'s neighbours *or* ``i``
    among ``j``'s (``mutual=True``: *and*).  ``1 <= k < n`` (:class:`ParameterError`).
    ``nodes``: the labels (default ``0..n-1``).  ``weight``, ``scale``, ``connect``,
    ``require_connected``: module docstring.

    Examples
    --------
    >>> G = knn_graph([[0.0], [1.0], [3.0], [10.0]], k=1, weight="unit")
    >>> sorted(G.edges())  # 0-1 (mutual), 2 -> 1, 3 -> 2
    [(0, 1), (1, 2), (2, 3)]
    """
    D, pts = _inputs(X, metric, "knn_graph")
    n = D.shape[0] if D is not None else pts.shape[0]
    k = check_int(k, "k", min_val=1, max_val=n - 1, where="knn_graph")
    check_bool(mutual, "mutual", "knn_graph")
    if pts is not None:
        dist, nbr = cKDTree(pts).query(pts, k=k + 1)
        dist, nbr = _drop_self(dist, nbr, k)
    else:
        Doff = D + np.diag(np.full(n, np.inf))
        nbr = np.argsort(Doff, axis=1, kind="stable")[:, :k]
        dist = np.take_along_axis(Doff, nbr, axis=1)
    rows = np.repeat(np.arange(n), k)
    cols, vals = nbr.ravel(), dist.ravel()
    ok = np.isfinite(vals)
    S = coo_matrix((np.ones(ok.sum()), (rows[ok], cols[ok])), shape=(n, n)).tocsr()
    S = S.minimum(S.T) if mutual else S.maximum(S.T)
    i, j = _upper(S)
    t = _pair_distances(D, pts, i, j)
    return _finish(n, nodes, i, j, t, weight, scale, connect, require_connected, D, pts,
                   "knn_graph")


def threshold_graph(dist: Any, eta: float, *, weight: str | Callable[[np.ndarray], Any]
                    = "inverse", scale: float = 1.0, nodes: Sequence[Hashable] | None = None,
                    connect: bool = False, require_connected: bool = False) -> nx.Graph:
    """The thresholded graph (43) of "Networked Federated Learning" VI-E: the pairs with
    ``dist_ij <= eta`` (``eta > 0``), weighted ``A_ij = 1 / dist_ij`` by default.

    ``dist`` is an ``(n, n)`` distance matrix, in the paper the Gaussian Wasserstein distances
    (42) (:func:`~gtvmodel.graphs.distances.wasserstein_distances`).  ``weight``, ``scale``,
    ``nodes``, ``connect``, ``require_connected``: module docstring.

    Examples
    --------
    >>> import numpy as np
    >>> W = np.array([[0.0, 1.0, 5.0], [1.0, 0.0, 2.0], [5.0, 2.0, 0.0]])
    >>> G = threshold_graph(W, eta=2.0, nodes=["a", "b", "c"])
    >>> sorted(G.edges(data="weight"))
    [('a', 'b', 1.0), ('b', 'c', 0.5)]
    """
    return _ball_graph(dist, eta, "precomputed", weight, scale, nodes, connect,
                       require_connected, "threshold_graph", "eta")


def epsilon_graph(X: Any, eps: float, *, metric: str = "euclidean",
                  weight: str | Callable[[np.ndarray], Any] = "gaussian", scale: float = 1.0,
                  nodes: Sequence[Hashable] | None = None, connect: bool = False,
                  require_connected: bool = False) -> nx.Graph:
    """The epsilon-ball graph: pairs at distance ``<= eps`` (``eps > 0``), Gaussian-kernel
    weights by default.  ``X`` as in :func:`knn_graph` (Euclidean pairs found by
    :meth:`scipy.spatial.cKDTree.query_pairs`); :func:`threshold_graph` is this rule on a
    distance matrix with ``1/dist`` weights ((43)).

    Examples
    --------
    >>> G = epsilon_graph([[0.0], [1.0], [1.5], [9.0]], eps=1.0, weight="unit")
    >>> sorted(G.edges()), G.number_of_nodes()
    ([(0, 1), (1, 2)], 4)
    """
    return _ball_graph(X, eps, metric, weight, scale, nodes, connect, require_connected,
                       "epsilon_graph", "eps")


# ---------------------------------------------------------------------------- helpers
def _ball_graph(X: Any, eps: float, metric: str, weight: Any, scale: float,
                nodes: Sequence[Hashable] | None, connect: bool, require_connected: bool,
                where: str, name: str) -> nx.Graph:
    """Pairs at distance ``<= eps`` (the rule of :func:`epsilon_graph` and (43))."""
    eps = check_scalar(eps, name, min_val=0.0, include_boundaries="neither", where=where)
    D, pts = _inputs(X, metric, where)
    n = D.shape[0] if D is not None else pts.shape[0]
    if pts is not None:
        pairs = cKDTree(pts).query_pairs(eps, output_type="ndarray")
        i, j = pairs[:, 0], pairs[:, 1]
    else:
        i, j = np.triu_indices(n, 1)
        keep = D[i, j] <= eps
        i, j = i[keep], j[keep]
    t = _pair_distances(D, pts, i, j)
    return _finish(n, nodes, i, j, t, weight, scale, connect, require_connected, D, pts, where)


def _inputs(X: Any, metric: str, where: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    check_option(metric, "metric", METRICS, where=where)
    if metric == "precomputed":
        return check_distances(X, "dist", where), None
    pts = as_finite_array(X, "X", owner=where)
    if pts.ndim == 1:
        pts = pts[:, None]
    if pts.ndim != 2 or pts.shape[0] < 2:
        raise DataError(f"{where}: X must be (n, p) points with n >= 2, got shape {pts.shape}")
    return None, pts


def _drop_self(dist: np.ndarray, nbr: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Remove each point itself from its ``k + 1`` nearest (duplicates may come first)."""
    n = nbr.shape[0]
    is_self = nbr == np.arange(n)[:, None]
    has = is_self.any(axis=1)
    drop = np.where(has, is_self.argmax(axis=1), k)  # no self found: drop the farthest
    keep = np.ones_like(nbr, dtype=bool)
    keep[np.arange(n), drop] = False
    return dist[keep].reshape(n, k), nbr[keep].reshape(n, k)


def _upper(S: Any) -> tuple[np.ndarray, np.ndarray]:
    S = S.tocoo()
    up = S.row < S.col
    return S.row[up].astype(np.int64), S.col[up].astype(np.int64)


def _pair_distances(D: np.ndarray | None, pts: np.ndarray | None, i: np.ndarray,
                    j: np.ndarray) -> np.ndarray:
    if D is not None:
        return D[i, j]
    return np.sqrt(((pts[i] - pts[j]) ** 2).sum(axis=1))


def _labels(n: int, nodes: Sequence[Hashable] | None, where: str) -> list:
    if nodes is None:
        return list(range(n))
    labels = list(nodes)
    if len(labels) != n:
        raise GraphError(f"{where}: nodes has {len(labels)} labels for {n} points")
    if len(set(labels)) != n:
        raise GraphError(f"{where}: nodes has repeated labels")
    return labels


def _finish(n: int, nodes: Sequence[Hashable] | None, i: np.ndarray, j: np.ndarray,
            t: np.ndarray, weight: Any, scale: float, connect: bool, require_connected: bool,
            D: np.ndarray | None, pts: np.ndarray | None, where: str) -> nx.Graph:
    labels = _labels(n, nodes, where)
    check_bool(connect, "connect", where)
    check_bool(require_connected, "require_connected", where)
    if connect:
        ci, cj = _connecting_edges(n, i, j, D, pts)
        i, j = np.concatenate((i, ci)), np.concatenate((j, cj))
        t = np.concatenate((t, _pair_distances(D, pts, ci, cj)))
    A = edge_weights(t, weight, scale) if len(t) else np.zeros(0)
    G = nx.Graph()
    G.add_nodes_from(labels)
    G.add_weighted_edges_from(zip([labels[a] for a in i.tolist()],
                                  [labels[b] for b in j.tolist()], A.tolist(), strict=True))
    if require_connected and not connect and not nx.is_connected(G):
        isolated = [v for v, deg in G.degree() if deg == 0]
        what = (f"isolated nodes {isolated[:5]!r}" if isolated else
                f"{nx.number_connected_components(G)} components")
        raise GraphError(f"{where}: the graph is not connected ({what}); pass connect=True "
                         "to add minimum-spanning-tree edges between the components")
    return G


def _connecting_edges(n: int, i: np.ndarray, j: np.ndarray, D: np.ndarray | None,
                      pts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The fewest shortest pairs joining the components: a minimum spanning tree of the
    component graph whose edge ``{a, b}`` is the closest pair between components a and b."""
    adj = coo_matrix((np.ones(len(i)), (i, j)), shape=(n, n))
    c, comp = connected_components(adj, directed=False)
    if c == 1:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    full = D if D is not None else np.sqrt(((pts[:, None, :] - pts[None, :, :]) ** 2).sum(-1))
    order = np.argsort(comp, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(comp[order]) != 0])
    block = np.minimum.reduceat(np.minimum.reduceat(full[np.ix_(order, order)], starts,
                                                    axis=0), starts, axis=1)
    np.fill_diagonal(block, np.inf)
    finite = np.isfinite(block)
    tiny = np.finfo(float).tiny  # csgraph reads 0 as 'no edge'
    tree = minimum_spanning_tree(np.where(finite, np.maximum(block, tiny), 0.0)).tocoo()
    ci, cj = [], []
    for a, b in zip(tree.row.tolist(), tree.col.tolist(), strict=True):  # c - 1 joins
        ia, ib = np.flatnonzero(comp == a), np.flatnonzero(comp == b)
        sub = full[np.ix_(ia, ib)]
        r, s = np.unravel_index(int(np.argmin(sub)), sub.shape)
        ci.append(min(ia[r], ib[s]))
        cj.append(max(ia[r], ib[s]))
    if len(ci) != c - 1:
        raise GraphError("connect=True: infinite distances separate the components; they "
                         "cannot be joined")
    return np.array(ci, np.int64), np.array(cj, np.int64)
