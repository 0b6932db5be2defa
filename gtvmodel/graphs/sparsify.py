"""Graph sparsifiers: thesis 002 ("Distributed Data Learning with Knowledge Transmission
Topology", Chapter 2, Section 2.4) and effective-resistance sampling (Spielman and Srivastava,
"Graph sparsification by effective resistances").

:func:`sparsify` ``(G, method, *, budget/k/n, seed)`` returns a new ``networkx.Graph`` on the
same nodes (labels and order preserved) with a ``weight`` attribute on every edge.  Methods:

========================= ======================================================= ===========
method                    rule (source)                                           size
========================= ======================================================= ===========
``uniform``               ``budget`` edges uniformly without replacement (§2.4.1)  ``budget``
``uniform_weighted``      ``budget`` edges without replacement, probability        ``budget``
                          proportional to ``A_e`` (weighted variant, §2.4.3)
``chain``                 nodes joined in DFS preorder from a random start         ``n - c``
                          (§2.4.1, "Spanning Tree 1"); *creates edges not in G*
``spanning_tree``         BFS growth, each node adopting ``n`` random unvisited    ``n - c``
                          neighbours, backtracking when stuck (§2.4.1)
``mst``                   minimum spanning forest of ``A_e`` (§2.4.1, networkx)    ``n - c``
``maximum_spanning_tree`` maximum spanning forest (the natural tree of a           ``n - c``
                          *similarity* graph: keeps the strongest edges)
``star``                  a random one of the three highest-degree nodes joined    ``n - 1``
                          to all others (§2.4.1); *creates edges not in G*
``kn``                    Algorithm 4, weighted variant: ``k`` edges per node     ``<= n k``
                          sampled ``~ A_e`` with replacement, weight ``W_u/(2k)``
                          each; all edges at weight ``A_e/2`` when ``d_u <= k``
``random_walk``           Algorithm 5: depth-first growth adopting ``n`` random    ``<= n - 1``
                          unvisited neighbours, restart at a random unvisited node
``union_of_trees``        union of random spanning forests until ``budget`` edges  ``budget``
                          (§2.5, "union of trees")
``effective_resistance``  ``budget`` draws with replacement ``p_e ~ A_e R_e``,     ``<= budget``
                          weight ``A_e count_e / (budget p_e)`` (Spielman and
                          Srivastava; ``R_e`` by :func:`effective_resistances`)
========================= ======================================================= ===========

(``n - c``: nodes minus connected components of ``G``, a spanning forest.)  Edges kept from
``G`` keep their weight ``A_e`` except in ``kn`` and ``effective_resistance``, which reweight
them as stated (unbiased: the expected weight of every edge is ``A_e``).  Edges that
``chain`` and ``star`` create (not in ``G``) get, respectively, the weight of the DFS-tree edge
that reached the node and the mean weight of ``G``.

Promises: the spanning methods (``chain``, ``spanning_tree``, ``mst``,
``maximum_spanning_tree``, ``union_of_trees``) keep exactly the components of ``G``;
``star`` is always connected; ``random_walk`` (which restarts without an edge, as the thesis'
prose says), ``uniform*``, ``kn`` and ``effective_resistance`` promise no connectivity.
Everything random draws from ``numpy.random.default_rng(seed)``: the same seed gives the same
graph.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import minimum_spanning_tree

from .._validate import check_int, check_option
from ..errors import ParameterError
from ._laplacian import EdgeArrays, LaplacianSolver, edge_arrays, incidence_columns

__all__ = ["METHODS", "effective_resistances", "sparsify"]

_CHUNK = 32  # columns per block of the projection and exact resistance solves

#: method -> the size argument it needs (None: none)
METHODS: dict[str, str | None] = {
    "uniform": "budget", "uniform_weighted": "budget", "chain": None, "spanning_tree": "n",
    "mst": None, "maximum_spanning_tree": None, "star": None, "kn": "k", "random_walk": "n",
    "union_of_trees": "budget", "effective_resistance": "budget",
}


def sparsify(G: nx.Graph, method: str, *, budget: int | None = None, k: int | None = None,
             n: int | None = None, seed: Any = None, weight: Hashable | None = "weight",
             projections: int | None = None) -> nx.Graph:
    """A sparsified copy of ``G`` by ``method`` (module docstring: the rules, sources, sizes
    and connectivity promises).

    ``budget``: edges (``uniform``, ``uniform_weighted``: ``1 <= budget <= |E|``;
    ``union_of_trees``: ``n - c <= budget <= |E|``) or draws (``effective_resistance``:
    ``budget >= 1``); ``k``: edges sampled per node by ``kn`` (``k >= 1``); ``n``: children
    per node of ``spanning_tree`` and ``random_walk`` (``n >= 1``); ``seed``: anything
    :func:`numpy.random.default_rng` takes; ``weight``: the edge attribute of ``A_e`` (a
    missing one is 1; ``None``: all 1); ``projections``: random projections of
    :func:`effective_resistances`.  The result stores its weights under ``"weight"``.

    Raises :class:`~gtvmodel.errors.ParameterError` for an unknown method or a size argument
    missing or out of range, :class:`~gtvmodel.errors.GraphError` for a graph that is not an
    undirected ``networkx.Graph`` with positive finite weights.

    Examples
    --------
    >>> import networkx as nx
    >>> G = nx.complete_graph(6)
    >>> H = sparsify(G, "uniform", budget=7, seed=0)
    >>> H.number_of_nodes(), H.number_of_edges(), all(G.has_edge(*e) for e in H.edges())
    (6, 7, True)
    >>> T = sparsify(G, "spanning_tree", n=2, seed=0)
    >>> T.number_of_edges(), nx.is_tree(T)
    (5, True)
    """
    check_option(method, "method", tuple(METHODS), where="sparsify")
    E = edge_arrays(G, weight, "sparsify")
    size = _size(method, E, budget=budget, k=k, n=n)
    rng = np.random.default_rng(seed)
    i, j, w = _RULES[method](E, size, rng, projections)
    H = nx.Graph()
    H.add_nodes_from(E.labels)
    L = E.labels
    H.add_weighted_edges_from(zip([L[a] for a in i.tolist()], [L[b] for b in j.tolist()],
                                  np.asarray(w, float).tolist(), strict=True))
    return H


def effective_resistances(G: nx.Graph, *, projections: int | None = None, seed: Any = None,
                          weight: Hashable | None = "weight", exact: bool = False
                          ) -> np.ndarray:
    """Effective resistances ``R_e = (e_i - e_j)^T L^+ (e_i - e_j)`` of the edges of ``G`` (in
    ``G.edges()`` order) for the weighted Laplacian ``L = D^T diag(A) D``.

    Spielman and Srivastava's estimate: ``R_e = ||W^{1/2} D L^+ (e_i - e_j)||^2`` is kept by
    the random projection ``Q W^{1/2} D`` (``Q``: ``k x |E|`` random signs over ``sqrt(k)``):
    the ``k`` rows ``z_t = L^+ (Q W^{1/2} D)_t^T`` come from ``k`` sparse solves (one sparse LU
    of the grounded Laplacian) and ``R_e ~ sum_t (z_{t,i} - z_{t,j})^2``.  Each estimate is
    unbiased with relative standard deviation at most ``sqrt(2/k)``; by Johnson-Lindenstrauss
    all ``|E|`` estimates lie within a factor ``1 +- eps`` with high probability once
    ``k >= 24 ln(n) / eps^2``.  Default ``k = ceil(24 ln n)`` (``eps`` about 1, enough for
    sampling).  ``exact=True`` solves for every edge instead (``|E|`` right-hand sides, chunked;
    moderate graphs).  No dense pseudo-inverse is ever formed.

    Examples
    --------
    >>> import networkx as nx, numpy as np
    >>> R = effective_resistances(nx.cycle_graph(4), exact=True)  # 1 in series with 3: 3/4
    >>> np.round(R, 12).tolist()
    [0.75, 0.75, 0.75, 0.75]
    """
    E = edge_arrays(G, weight, "effective_resistances")
    if exact:
        return _exact_resistances(E)
    return _projected_resistances(E, projections, np.random.default_rng(seed))


# ---------------------------------------------------------------------------- sizes
def _size(method: str, E: EdgeArrays, **given: Any) -> int | None:
    name = METHODS[method]
    for other, value in given.items():
        if other != name and value is not None:
            raise ParameterError(f"sparsify: method {method!r} takes "
                                 f"{name or 'no size argument'}, not {other}")
    if name is None:
        return None
    value = given[name]
    if value is None:
        raise ParameterError(f"sparsify: method {method!r} needs {name}")
    lo, hi = 1, None
    if method in ("uniform", "uniform_weighted"):
        hi = E.m
    elif method == "union_of_trees":
        lo, hi = E.n - LaplacianSolver(E.n, E.i, E.j, E.w).count, E.m
    if hi is not None and lo > hi:
        raise ParameterError(f"sparsify: G has {E.m} edges, {method!r} needs at least {lo}")
    return check_int(value, name, min_val=lo, max_val=hi, where=f"sparsify({method!r})")


# ---------------------------------------------------------------------------- methods
def _uniform(E: EdgeArrays, budget: int, rng: np.random.Generator, _: Any, weighted=False):
    p = E.w / E.w.sum() if weighted else None
    keep = np.sort(rng.choice(E.m, size=budget, replace=False, p=p))
    return E.i[keep], E.j[keep], E.w[keep]


def _uniform_weighted(E: EdgeArrays, budget: int, rng: np.random.Generator, _: Any):
    return _uniform(E, budget, rng, None, weighted=True)


def _chain(E: EdgeArrays, _: Any, rng: np.random.Generator, __: Any):
    """Consecutive nodes of a randomized DFS preorder, per component."""
    A = E.adjacency()
    visited = np.zeros(E.n, dtype=bool)
    out_i, out_j, out_w = [], [], []
    for start in rng.permutation(E.n).tolist():
        if visited[start]:
            continue
        prev = None
        stack = [(start, 0.0)]
        while stack:
            u, wu = stack.pop()
            if visited[u]:
                continue
            visited[u] = True
            if prev is not None:
                out_i.append(prev)
                out_j.append(u)
                out_w.append(wu)
            prev = u
            nbr, ids = _row(A, u)
            fresh = ~visited[nbr]
            perm = rng.permutation(int(fresh.sum()))
            stack.extend(zip(nbr[fresh][perm].tolist(), E.w[ids[fresh][perm]].tolist(),
                             strict=True))
    return np.array(out_i, np.int64), np.array(out_j, np.int64), np.array(out_w)


def _grow(E: EdgeArrays, children: int, rng: np.random.Generator, depth_first: bool):
    """Spanning growth: each node, when processed, adopts ``children`` random unvisited
    neighbours.  Breadth first (``spanning_tree``) backtracks to a visited node with an
    unvisited neighbour when stuck; depth first (``random_walk``) restarts at a random
    unvisited node without an edge (thesis Algorithm 5)."""
    A = E.adjacency()
    visited = np.zeros(E.n, dtype=bool)
    order: list[int] = []  # visit order, for the backtracking scan
    scan = 0
    out: list[int] = []  # edge ids
    for start in rng.permutation(E.n).tolist():
        if visited[start]:
            continue
        visited[start] = True
        order.append(start)
        todo = deque([start])
        while True:
            while todo:
                u = todo.pop() if depth_first else todo.popleft()
                nbr, ids = _row(A, u)
                fresh = np.flatnonzero(~visited[nbr])
                take = rng.choice(fresh, size=min(children, len(fresh)), replace=False)
                visited[nbr[take]] = True
                order.extend(nbr[take].tolist())
                out.extend(ids[take].tolist())
                todo.extend(nbr[take].tolist())
            if depth_first:
                break
            while scan < len(order):  # backtrack: amortized, a visited node never reopens
                nbr, ids = _row(A, order[scan])
                fresh = np.flatnonzero(~visited[nbr])
                if len(fresh):
                    pick = fresh[rng.integers(len(fresh))]
                    visited[nbr[pick]] = True
                    order.append(int(nbr[pick]))
                    out.append(int(ids[pick]))
                    todo.append(int(nbr[pick]))
                    break
                scan += 1
            if not todo:
                break
    e = np.array(out, np.int64)
    return E.i[e], E.j[e], E.w[e]


def _spanning_tree(E: EdgeArrays, children: int, rng: np.random.Generator, _: Any):
    return _grow(E, children, rng, depth_first=False)


def _random_walk(E: EdgeArrays, children: int, rng: np.random.Generator, _: Any):
    return _grow(E, children, rng, depth_first=True)


def _mst(E: EdgeArrays, _: Any, __: Any, ___: Any, maximum: bool = False):
    G = nx.Graph()
    G.add_nodes_from(range(E.n))
    G.add_weighted_edges_from(zip(E.i.tolist(), E.j.tolist(), E.w.tolist(), strict=True))
    tree = (nx.maximum_spanning_tree if maximum else nx.minimum_spanning_tree)(G)
    arr = np.array([(a, b, d["weight"]) for a, b, d in tree.edges(data=True)],
                   dtype=float).reshape(-1, 3)
    return arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 2]


def _max_st(E: EdgeArrays, _: Any, __: Any, ___: Any):
    return _mst(E, None, None, None, maximum=True)


def _star(E: EdgeArrays, _: Any, rng: np.random.Generator, __: Any):
    deg = np.bincount(np.r_[E.i, E.j], minlength=E.n)
    top = np.argsort(-deg, kind="stable")[:3]
    centre = int(rng.choice(top))
    others = np.delete(np.arange(E.n), centre)
    w = np.full(len(others), E.w.mean() if E.m else 1.0)
    A = E.adjacency()
    nbr, ids = _row(A, centre)
    at = np.searchsorted(others, nbr)
    w[at] = E.w[ids]
    return np.full(len(others), centre, np.int64), others, w


def _kn(E: EdgeArrays, k: int, rng: np.random.Generator, _: Any):
    """Algorithm 4 (weighted): every node ``u`` contributes to its edges, summed per edge."""
    A = E.adjacency()
    ids = A.data.astype(np.int64) - 1
    wt = E.w[ids]
    deg = np.diff(A.indptr)
    owner = np.repeat(np.arange(E.n), deg)
    low = deg[owner] <= k
    contrib = np.zeros(E.m)
    contrib += np.bincount(ids[low], weights=wt[low] / 2.0, minlength=E.m)
    high = np.flatnonzero(deg > k)
    if len(high):
        cum = np.cumsum(wt)
        before = np.r_[0.0, cum][A.indptr[high]]
        Wu = cum[A.indptr[high + 1] - 1] - before
        u = np.repeat(np.arange(len(high)), k)
        targets = before[u] + rng.random(len(u)) * Wu[u]
        pos = np.searchsorted(cum, targets, side="right")
        hi_end = A.indptr[high + 1] - 1
        pos = np.clip(pos, A.indptr[high][u], hi_end[u])  # rounding at the segment ends
        contrib += np.bincount(ids[pos], weights=(Wu / (2.0 * k))[u], minlength=E.m)
    keep = np.flatnonzero(contrib > 0)
    return E.i[keep], E.j[keep], contrib[keep]


def _union_of_trees(E: EdgeArrays, budget: int, rng: np.random.Generator, _: Any):
    chosen = np.zeros(E.m, dtype=bool)
    while chosen.sum() < budget:
        keys = 1.0 + rng.random(E.m) + chosen  # prefer edges not yet chosen
        T = minimum_spanning_tree(sp.coo_matrix((keys, (E.i, E.j)), shape=(E.n, E.n))).tocoo()
        order = np.argsort(keys)
        e = order[np.searchsorted(keys[order], T.data)]
        new = e[~chosen[e]]
        room = budget - int(chosen.sum())
        if len(new) > room:
            new = rng.choice(new, size=room, replace=False)
        chosen[new] = True
    keep = np.flatnonzero(chosen)
    return E.i[keep], E.j[keep], E.w[keep]


def _effective_resistance(E: EdgeArrays, budget: int, rng: np.random.Generator,
                          projections: int | None):
    R = _projected_resistances(E, projections, rng)
    p = E.w * R
    p = p / p.sum()
    counts = rng.multinomial(budget, p)
    keep = np.flatnonzero(counts)
    return E.i[keep], E.j[keep], E.w[keep] * counts[keep] / (budget * p[keep])


_RULES = {"uniform": _uniform, "uniform_weighted": _uniform_weighted, "chain": _chain,
          "spanning_tree": _spanning_tree, "mst": _mst, "maximum_spanning_tree": _max_st,
          "star": _star, "kn": _kn, "random_walk": _random_walk,
          "union_of_trees": _union_of_trees, "effective_resistance": _effective_resistance}


# ---------------------------------------------------------------------------- resistances
def _projected_resistances(E: EdgeArrays, projections: int | None,
                           rng: np.random.Generator) -> np.ndarray:
    if projections is None:
        projections = max(1, math.ceil(24 * math.log(max(E.n, 2))))
    k = check_int(projections, "projections", min_val=1, where="effective_resistances")
    solver = LaplacianSolver(E.n, E.i, E.j, E.w)
    e = np.arange(E.m)
    Dt = sp.csr_matrix((np.r_[np.sqrt(E.w), -np.sqrt(E.w)], (np.r_[E.i, E.j], np.r_[e, e])),
                       shape=(E.n, E.m))  # (W^{1/2} D)^T
    R = np.zeros(E.m)
    for lo in range(0, k, _CHUNK):  # a few columns of Q at a time: O(|E| * _CHUNK) memory
        cols = min(_CHUNK, k - lo)
        signs = rng.choice([-1.0, 1.0], size=(E.m, cols)) / math.sqrt(k)
        Z = solver.solve(Dt @ signs)  # rows z_t = L^+ (Q W^{1/2} D)_t^T
        R += ((Z[E.i] - Z[E.j]) ** 2).sum(axis=1)
    return R


def _exact_resistances(E: EdgeArrays, chunk: int = 8 * _CHUNK) -> np.ndarray:
    solver = LaplacianSolver(E.n, E.i, E.j, E.w)
    R = np.zeros(E.m)
    for lo in range(0, E.m, chunk):
        i, j = E.i[lo:lo + chunk], E.j[lo:lo + chunk]
        X = solver.solve(incidence_columns(E.n, i, j))
        cols = np.arange(len(i))
        R[lo:lo + chunk] = X[i, cols] - X[j, cols]
    return R


def _row(A: sp.csr_matrix, u: int) -> tuple[np.ndarray, np.ndarray]:
    """Neighbours of ``u`` and the ids of the edges to them."""
    lo, hi = A.indptr[u], A.indptr[u + 1]
    return A.indices[lo:hi], A.data[lo:hi].astype(np.int64) - 1
