"""Shared linear algebra of the graph tools: a graph as edge arrays, its weighted Laplacian,
and solves ``x = L^+ b`` by a sparse LU of the grounded Laplacian (never a dense inverse)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import splu

from ..errors import GraphError

__all__ = ["EdgeArrays", "LaplacianSolver", "edge_arrays"]


@dataclass(frozen=True)
class EdgeArrays:
    """A ``networkx.Graph`` as arrays: node ``labels`` (graph order), edge endpoints ``i``,
    ``j`` (positions, in ``G.edges()`` order) and weights ``w`` (``A_e``)."""

    labels: list
    i: np.ndarray
    j: np.ndarray
    w: np.ndarray

    @property
    def n(self) -> int:
        """Number of nodes."""
        return len(self.labels)

    @property
    def m(self) -> int:
        """Number of edges."""
        return len(self.i)

    def adjacency(self) -> sp.csr_matrix:
        """Symmetric CSR adjacency whose data are the edge ids ``e + 1`` (both directions)."""
        ids = np.arange(1, self.m + 1, dtype=float)
        A = sp.coo_matrix((np.r_[ids, ids], (np.r_[self.i, self.j], np.r_[self.j, self.i])),
                          shape=(self.n, self.n)).tocsr()
        A.sort_indices()
        return A


def edge_arrays(G: nx.Graph, weight: Hashable | None = "weight", where: str = "") -> EdgeArrays:
    """:class:`EdgeArrays` of ``G`` (``weight=None``: every ``A_e = 1``; a missing attribute
    is 1).  :class:`~gtvmodel.errors.GraphError` for a directed or multi graph, self-loops or
    weights that are not positive and finite."""
    pre = f"{where}: " if where else ""
    if not isinstance(G, nx.Graph) or G.is_directed() or G.is_multigraph():
        raise GraphError(f"{pre}G must be an undirected networkx.Graph, got {type(G).__name__}")
    if G.number_of_nodes() == 0:
        raise GraphError(f"{pre}G has no node")
    labels = list(G.nodes())
    pos = {v: k for k, v in enumerate(labels)}
    rows = [(pos[a], pos[b], 1.0 if weight is None else d.get(weight, 1.0))
            for a, b, d in G.edges(data=True)]
    arr = np.array(rows, dtype=float).reshape(-1, 3)
    i, j, w = arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 2]
    if (i == j).any():
        raise GraphError(f"{pre}G has a self-loop at node {labels[int(i[i == j][0])]!r}")
    bad = ~(np.isfinite(w) & (w > 0))
    if bad.any():
        e = int(np.flatnonzero(bad)[0])
        raise GraphError(f"{pre}edge ({labels[i[e]]!r}, {labels[j[e]]!r}) has weight {w[e]!r}; "
                         "edge weights must be positive and finite")
    return EdgeArrays(labels, i, j, w)


class LaplacianSolver:
    """``x = L^+ b`` for the weighted Laplacian ``L = D^T diag(w) D`` of ``n`` nodes and edges
    ``(i, j, w)``, for right-hand sides summing to zero on every connected component.

    One node per component is grounded (its row and column removed); the rest is factorized
    once by :func:`scipy.sparse.linalg.splu`.  The grounded solution solves ``L x = b``; the
    component means are then removed, which gives ``L^+ b``."""

    def __init__(self, n: int, i: np.ndarray, j: np.ndarray, w: np.ndarray):
        W = sp.coo_matrix((np.r_[w, w], (np.r_[i, j], np.r_[j, i])), shape=(n, n)).tocsr()
        L = (sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W).tocsc()
        self.count, self.comp = connected_components(W, directed=False)
        _, roots = np.unique(self.comp, return_index=True)
        self.keep = np.ones(n, dtype=bool)
        self.keep[roots] = False
        sizes = np.bincount(self.comp, minlength=self.count)
        # (count x n) averaging operator over the components
        self.average = sp.csr_matrix((1.0 / sizes[self.comp], (self.comp, np.arange(n))),
                                     shape=(self.count, n))
        self.lu = splu(L[self.keep][:, self.keep].tocsc()) if self.keep.any() else None

    def solve(self, B: np.ndarray) -> np.ndarray:
        """``L^+ B`` for an ``(n, k)`` right-hand side whose columns sum to zero on every
        component."""
        X = np.zeros_like(B, dtype=float)
        if self.lu is not None:
            X[self.keep] = self.lu.solve(np.ascontiguousarray(B[self.keep], dtype=float))
        return X - (self.average @ X)[self.comp]


def incidence_columns(n: int, i: np.ndarray, j: np.ndarray, scale: np.ndarray | None = None
                      ) -> np.ndarray:
    """Dense ``(n, len(i))`` block of ``D^T`` (column ``e``: ``+1`` at ``i_e``, ``-1`` at
    ``j_e``, times ``scale_e``) for a chunk of edges."""
    s = np.ones(len(i)) if scale is None else scale
    B = np.zeros((n, len(i)))
    cols = np.arange(len(i))
    B[i, cols] = s
    B[j, cols] = -s
    return B
