"""The empirical graph: node order, edge orientation, weights and the incidence matrix D.

Conventions (docs/conventions.md): node ``i`` is position ``i`` in ``list(G.nodes)``; an undirected
edge ``e = {i, j}`` is oriented head ``e+ = min(i, j)``, tail ``e- = max(i, j)`` (positions);
its weight ``A_e`` is the edge attribute named by ``weight`` (``"weight"`` unless the model
says otherwise, as in networkx; 1 where an edge lacks it, every ``A_e = 1`` for
``weight=None``), a real number (not a string or bool), finite and ``> 0``.  The model
keeps a frozen *snapshot* of the graph taken at construction: changing the user's graph
afterwards does not change the model (build a new model instead), and the snapshot itself
cannot be modified.  The incidence matrix ``D`` (``|E| x n``, scipy.sparse CSR) maps node
parameters to edge
differences, ``(D w)_e = w_{e+} - w_{e-}``; its transpose maps edge flows to net outflows,
``(D^T u)_i = sum_{e: e+=i} u_e - sum_{e: e-=i} u_e``.  ``D`` is never formed dense.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse as sp

from ._validate import PLAIN_REALS, check_int, check_scalar
from .errors import GraphError, UnknownNodeError

__all__ = ["EmpiricalGraph"]


def _node_labels(nodes: int | Iterable[Hashable]) -> list[Hashable]:
    """``list(range(n))`` for an integer ``n >= 1``, else the labels as a list."""
    if isinstance(nodes, (int, np.integer)) and not isinstance(nodes, bool):
        return list(range(check_int(nodes, "nodes", min_val=1, error=GraphError)))
    if isinstance(nodes, (str, bytes)) or not isinstance(nodes, Iterable):
        raise GraphError(f"nodes must be a node count n or a sequence of node labels, got "
                         f"{type(nodes).__name__}")
    labels = list(nodes)
    if not labels:
        raise GraphError("nodes: the graph has no nodes")
    return labels


def _edge_positions(edges: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The two end positions of an integer ``(|E|, 2)`` edge array, each in ``range(n)`` and
    distinct (:class:`GraphError` naming the first bad edge)."""
    E = np.asarray(edges)
    if E.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if E.ndim != 2 or E.shape[1] != 2:
        raise GraphError(f"edges must be an (|E|, 2) array of node positions, got shape "
                         f"{E.shape}")
    if E.dtype == bool or not np.issubdtype(E.dtype, np.integer):
        raise GraphError(f"edges must hold integer node positions, got dtype {E.dtype}")
    E = E.astype(np.int64, copy=False)
    out = np.flatnonzero(((E < 0) | (E >= n)).any(axis=1))
    if out.size:
        e = int(out[0])
        raise GraphError(f"edges[{e}] = ({E[e, 0]}, {E[e, 1]}): a node position is out of "
                         f"range for n = {n}")
    loops = np.flatnonzero(E[:, 0] == E[:, 1])
    if loops.size:
        e = int(loops[0])
        raise GraphError(f"edges[{e}]: self-loop at node position {E[e, 0]}: w_i - w_i = 0 "
                         "carries no information")
    return E[:, 0].copy(), E[:, 1].copy()


def _edge_weights(weights: Any, m: int, nodes: list[Hashable], ia: np.ndarray,
                  ib: np.ndarray) -> np.ndarray:
    """The weights ``A_e`` of an edge array: ``(m,)``, finite and ``> 0`` (all 1 for None);
    :class:`GraphError` naming the first bad edge."""
    if weights is None:
        return np.ones(m)
    try:
        A = np.array(weights, dtype=float)
    except (TypeError, ValueError) as exc:
        raise GraphError(f"weights is not numeric ({exc})") from None
    if A.shape != (m,):
        raise GraphError(f"weights must have shape ({m},) (one A_e per edge), got {A.shape}")
    bad = np.flatnonzero(~(np.isfinite(A) & (A > 0)))
    if bad.size:
        e = int(bad[0])
        raise GraphError(f"weights[{e}] = {A[e]:g} at edge ({nodes[ia[e]]!r}, "
                         f"{nodes[ib[e]]!r}): a weight A_e must be finite and > 0")
    return A



class EmpiricalGraph:
    """An immutable, validated view of a ``networkx.Graph`` in gtvmodel's conventions.

    The view keeps a frozen snapshot of ``graph`` (module docstring): later changes of the
    caller's graph are not seen.  :meth:`from_arrays` builds one from an edge array.

    Parameters
    ----------
    graph : networkx.Graph
        The graph.
    weight : hashable or None, default "weight"
        The edge attribute holding ``A_e``, as networkx functions take it
        (``weight="similarity"``); edges without it have ``A_e = 1``; ``None`` sets every
        ``A_e = 1``.

    Attributes
    ----------
    nodes : list
        Node labels; the order of every ``(n, d)`` result.
    edges : ndarray of shape (|E|, 2)
        Oriented edges as position pairs ``(e+, e-)`` with ``e+ < e-``.
    edge_weights : ndarray of shape (|E|,)
        The weights ``A_e``.
    incidence : scipy.sparse.csr_matrix of shape (|E|, n)
        The incidence matrix ``D``.
    degrees : ndarray of shape (n,)
        Unweighted degrees ``deg(i)`` (number of incident edges), as used by Algorithm 1.
    weight : str or None
        The edge attribute the weights were read from (``None``: all ``A_e = 1``).

    Raises
    ------
    GraphError
        ``graph`` is not a ``networkx.Graph``, is directed, a multigraph or has no nodes, or
        has a self-loop (naming the node); an edge's ``A_e`` is not a real number, finite and
        ``> 0`` (naming the edge and the attribute); ``weight`` is a bool or not hashable.

    Examples
    --------
    Edges are oriented from the earlier to the later node of ``list(G.nodes)`` and sorted:

    >>> import networkx as nx
    >>> from gtvmodel import EmpiricalGraph
    >>> G = nx.Graph()
    >>> G.add_edge("b", "a", similarity=2.0)
    >>> G.add_edge("b", "c")
    >>> g = EmpiricalGraph(G, weight="similarity")
    >>> g.nodes, g.edges.tolist(), g.edge_weights.tolist()  # edge (b, c) lacks it: A_e = 1
    (['b', 'a', 'c'], [[0, 1], [0, 2]], [2.0, 1.0])
    >>> g.incidence.toarray().tolist(), g.degrees.tolist()  # (D w)_e = w_{e+} - w_{e-}
    ([[1.0, -1.0, 0.0], [1.0, 0.0, -1.0]], [2, 1, 1])
    >>> G.add_edge("a", "c")  # the snapshot does not change
    >>> g.num_edges
    2
    """

    def __init__(self, graph: nx.Graph, weight: Hashable | None = "weight"):
        if not isinstance(graph, nx.Graph):
            raise GraphError(f"expected a networkx.Graph, got {type(graph).__name__}")
        if graph.is_directed():
            raise GraphError("the empirical graph must be undirected (got a directed graph)")
        if graph.is_multigraph():
            raise GraphError("multigraphs are not supported: merge parallel edges into one weight")
        if graph.number_of_nodes() == 0:
            raise GraphError("the graph has no nodes")
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, Hashable)):
            raise GraphError("weight must be the name of an edge attribute (e.g. 'weight', "
                             f"'similarity') or None for unit weights, got {weight!r}")
        self.weight = weight
        # a frozen snapshot: later changes of the caller's graph cannot desynchronize the model
        # (edges, weights and D are computed once, here); the snapshot cannot be modified
        self._graph: nx.Graph | None = nx.freeze(graph.copy())
        self.nodes: list[Hashable] = list(graph.nodes)
        self._index = {v: i for i, v in enumerate(self.nodes)}
        m = graph.number_of_edges()
        ends = (list(graph.edges(data=weight, default=1.0)) if weight is not None
                else [(a, b, 1.0) for a, b in graph.edges])
        index = self._index
        ia = np.fromiter((index[a] for a, _, _ in ends), dtype=np.int64, count=m)
        ib = np.fromiter((index[b] for _, b, _ in ends), dtype=np.int64, count=m)
        loops = np.flatnonzero(ia == ib)
        if loops.size:
            raise GraphError(f"self-loop at node {ends[loops[0]][0]!r}: w_i - w_i = 0 carries "
                             "no information")
        self._set_edges(ia, ib, self._weights([w for _, _, w in ends], ends, weight))

    @classmethod
    def from_arrays(cls, nodes: int | Iterable[Hashable], edges: Any,
                    weights: Any = None) -> EmpiricalGraph:
        """The empirical graph of an edge array, without a ``networkx.Graph``.

        ``nodes`` is ``n`` (labels ``0..n-1``) or the node labels in order (distinct);
        ``edges`` an integer ``(|E|, 2)`` array of node *positions* (each undirected edge once,
        in either orientation); ``weights`` the ``(|E|,)`` weights ``A_e`` (default all 1),
        finite and ``> 0``.  Each bad entry raises :class:`GraphError` naming the edge.  The
        ``networkx.Graph`` snapshot (:attr:`graph`, edge attribute ``"weight"``) is built on
        first access only.

        Examples
        --------
        >>> g = EmpiricalGraph.from_arrays(3, [[1, 0], [1, 2]], [2.0, 0.5])
        >>> g.edges.tolist(), g.edge_weights.tolist(), g.degrees.tolist()
        ([[0, 1], [1, 2]], [2.0, 0.5], [1, 2, 1])
        >>> sorted(g.graph.edges(data="weight"))
        [(0, 1, 2.0), (1, 2, 0.5)]
        """
        self = cls.__new__(cls)
        self.weight = "weight"
        self._graph = None
        self.nodes = _node_labels(nodes)
        self._index = {v: i for i, v in enumerate(self.nodes)}
        if len(self._index) != len(self.nodes):
            seen: set[Hashable] = set()
            dup = next(v for v in self.nodes if v in seen or seen.add(v))
            raise GraphError(f"nodes: the label {dup!r} appears twice")
        ia, ib = _edge_positions(edges, len(self.nodes))
        self._set_edges(ia, ib, _edge_weights(weights, ia.size, self.nodes, ia, ib))
        parallel = np.flatnonzero((np.diff(self.edges, axis=0) == 0).all(axis=1))
        if parallel.size:
            a, b = self.edge_label(int(parallel[0]))
            raise GraphError(f"edges: the edge ({a!r}, {b!r}) appears twice; merge parallel "
                             "edges into one weight")
        return self

    def _set_edges(self, ia: np.ndarray, ib: np.ndarray, weights: np.ndarray) -> None:
        """Orient (``e+ < e-``), sort by ``(e+, e-)`` and build ``D`` and the degrees."""
        n, m = len(self.nodes), ia.size
        heads, tails = np.minimum(ia, ib), np.maximum(ia, ib)
        # Sort edges by (head, tail) for a deterministic, label-independent order.
        order = np.lexsort((tails, heads))
        self.edges = np.column_stack([heads[order], tails[order]])
        self.edge_weights = weights[order]
        rows = np.repeat(np.arange(m), 2)
        cols = self.edges.ravel()
        vals = np.tile([1.0, -1.0], m)
        self.incidence = sp.csr_matrix((vals, (rows, cols)), shape=(m, n))
        self.degrees = np.bincount(self.edges.ravel(), minlength=n).astype(np.int64)

    @property
    def graph(self) -> nx.Graph:
        """The frozen ``networkx.Graph`` snapshot (for :meth:`from_arrays`, built from the
        arrays on first access, with the weights as edge attribute ``"weight"``)."""
        if self._graph is None:
            g = nx.Graph()
            g.add_nodes_from(self.nodes)
            labels = np.empty(len(self.nodes), dtype=object)
            labels[:] = self.nodes
            g.add_weighted_edges_from(zip(labels[self.edges[:, 0]], labels[self.edges[:, 1]],
                                          self.edge_weights.tolist(), strict=True))
            self._graph = nx.freeze(g)
        return self._graph

    @staticmethod
    def _weights(raw: list[Any], ends: list[tuple[Any, Any, Any]],
                 attribute: Hashable | None = "weight") -> np.ndarray:
        """The edge weights ``A_e`` as a float array, each a real number, finite and ``> 0``
        (checked for all edges at once; the first bad edge is named by :func:`check_scalar`,
        the message ends with the edge attribute ``attribute`` they were read from)."""
        if all(type(w) in PLAIN_REALS for w in raw):
            with np.errstate(over="ignore"):
                try:
                    A = np.array(raw, dtype=float)
                except OverflowError:  # a Python int beyond double precision
                    A = np.full(len(raw), np.inf)
            if A.size == 0 or (np.isfinite(A).all() and A.min() > 0):
                return A
        for a, b, w in ends:  # the error path only: name the first bad edge
            try:
                check_scalar(w, "weight A_e", min_val=0.0, include_boundaries="neither",
                             where=f"edge ({a!r}, {b!r})", error=GraphError)
            except GraphError as exc:
                raise GraphError(f"{exc} (read from edge attribute {attribute!r})") from None
        return np.array(raw, dtype=float)  # other real types (Fraction, np.float16, ...)

    # ------------------------------------------------------------------ lookup
    @property
    def num_nodes(self) -> int:
        """``n = |V|``, the number of nodes."""
        return len(self.nodes)

    @property
    def num_edges(self) -> int:
        """``|E|``, the number of edges (rows of the incidence matrix ``D``)."""
        return int(self.edges.shape[0])

    def index(self, node: Any) -> int:
        """Position of ``node`` in :attr:`nodes`; :class:`UnknownNodeError` if absent."""
        try:
            return self._index[node]
        except (KeyError, TypeError):
            raise UnknownNodeError(f"node {node!r} is not in the graph") from None

    def indices(self, nodes: Iterable[Any]) -> np.ndarray:
        """Positions of several nodes, as an integer array."""
        return np.array([self.index(v) for v in nodes], dtype=np.int64)

    def row_positions(self, labels: np.ndarray, name: str = "labels") -> np.ndarray:
        """Positions of a 1-D array of node labels (e.g. each sample's node), each distinct
        label looked up once; :class:`UnknownNodeError` naming ``name`` and the first label
        not in the graph."""
        try:
            uniq, inverse = np.unique(labels, return_inverse=True)
        except TypeError:  # labels of mixed types: no order, look each one up
            uniq, inverse = labels, np.arange(len(labels))
        found = np.fromiter((self._index.get(v, -1) for v in uniq.tolist()), dtype=np.int64,
                            count=len(uniq))
        if (found < 0).any():
            bad = uniq.tolist()[int(np.flatnonzero(found < 0)[0])]
            raise UnknownNodeError(f"{name} names node {bad!r}, which is not in the graph")
        return found[inverse.reshape(-1)]

    def edge_label(self, e: int) -> tuple[Any, Any]:
        """The node labels ``(e+, e-)`` of oriented edge ``e``."""
        h, t = self.edges[e]
        return self.nodes[h], self.nodes[t]

    # ------------------------------------------------------------ operators
    def diff(self, w: np.ndarray) -> np.ndarray:
        """``D w``: edge differences ``w_{e+} - w_{e-}`` of an ``(n, d)`` array."""
        return self.incidence @ w

    def divergence(self, u: np.ndarray) -> np.ndarray:
        """``D^T u``: net outflow at every node of an ``(|E|, d)`` flow array."""
        return self.incidence.T @ u

    def laplacian(self) -> sp.csr_matrix:
        """The weighted graph Laplacian ``D^T diag(A) D`` (sparse)."""
        D = self.incidence
        return (D.T @ sp.diags(self.edge_weights) @ D).tocsr()

    def __repr__(self) -> str:
        return f"EmpiricalGraph(n={self.num_nodes}, |E|={self.num_edges})"
