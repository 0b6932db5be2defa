"""Max-flow / min-cut machinery of Definition 1 (paper 001, (35)), on networkx flow functions.

A :class:`CutNetwork` is a residual network built once per cluster and re-solved with new
capacities; :func:`min_ratio` is Dinkelbach's parametric iteration ``min_A (cut(A) - c(A)) /
q(A)`` on its minimum cuts; :func:`best_margin` and :func:`best_lam_min` search the anchor
``i0`` exactly for ``theta*`` and ``lambda_min(C)``.  The max-flow algorithm is a networkx
flow function (``flow_func``), as in :func:`networkx.algorithms.flow.maximum_flow`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import networkx as nx
import numpy as np
from networkx.algorithms import flow as nxflow

from ..errors import ParameterError

__all__ = ["DEFAULT_FLOW_FUNC", "resolve_flow_func", "CutNetwork", "min_ratio", "others_extreme",
           "best_margin", "best_lam_min"]

#: Default max-flow algorithm, as networkx's own default (:func:`networkx.maximum_flow`):
#: push-relabel with global relabelling (see :func:`~gtvmodel.theory.check_well_connected`).
DEFAULT_FLOW_FUNC: Callable[..., Any] = nxflow.preflow_push

# networkx's max-flow algorithms, named in the error for a string ``flow_func``
_NETWORKX_FLOW_FUNCS = {f.__name__: f for f in (
    nxflow.preflow_push, nxflow.boykov_kolmogorov, nxflow.edmonds_karp, nxflow.dinitz,
    nxflow.shortest_augmenting_path)}


def resolve_flow_func(flow_func: Callable[..., Any] | None) -> Callable[..., Any]:
    """The max-flow function to run: ``flow_func``, or :data:`DEFAULT_FLOW_FUNC` for None.

    ``flow_func`` is a networkx flow function (``flow_func(G, s, t, capacity=..., residual=R)``
    returning the residual network with ``"flow"`` arcs), as networkx's ``flow_func``
    arguments take it; a string or other non-callable raises
    :class:`~gtvmodel.errors.ParameterError` naming the function to pass.

    Examples
    --------
    >>> from networkx.algorithms.flow import edmonds_karp
    >>> resolve_flow_func(None).__name__
    'preflow_push'
    >>> resolve_flow_func(edmonds_karp) is edmonds_karp
    True
    >>> resolve_flow_func("edmonds_karp")
    Traceback (most recent call last):
    ...
    gtvmodel.errors.ParameterError: flow_func must be a networkx max-flow function, ...
    """
    if flow_func is None:
        return DEFAULT_FLOW_FUNC
    if callable(flow_func):
        return flow_func
    if isinstance(flow_func, str) and flow_func in _NETWORKX_FLOW_FUNCS:
        hint = f"pass networkx.algorithms.flow.{flow_func} itself, not its name"
    else:
        hint = ("pass one of networkx.algorithms.flow."
                + ", networkx.algorithms.flow.".join(_NETWORKX_FLOW_FUNCS) + " (or None)")
    raise ParameterError(
        f"flow_func must be a networkx max-flow function, got {flow_func!r}: {hint}")


class CutNetwork:
    """A residual network on ``k`` nodes plus a source ``s = k`` (and a sink ``t = k + 1``),
    built once and re-solved with new capacities (networkx flow functions reset the flows).

    Undirected edges become two arcs of capacity ``A``; source arcs ``s -> i`` and sink arcs
    ``i -> t`` get their capacities from :meth:`set_source` / :meth:`set_sink`.  ``heads``,
    ``tails``, ``weights``: the (cluster-local) edges ``e = {i, j}`` and their ``A_ij``;
    ``flow_func``: a networkx max-flow function.

    Examples
    --------
    >>> import numpy as np
    >>> from networkx.algorithms.flow import preflow_push
    >>> net = CutNetwork(3, np.array([0, 1, 0]), np.array([1, 2, 2]),  # triangle, A_02 = 2
    ...                  np.array([1.0, 1.0, 2.0]), preflow_push)
    >>> net.degree.tolist()  # weighted degrees cut({i}, C \\ {i})
    [3.0, 2.0, 3.0]
    >>> net.set_source(np.array([0.0, 5.0, 0.0]))  # b_1 = 5 into the sink i0 = 2
    >>> A = net.min_cut(2)
    >>> A.tolist(), net.cut(A)
    ([False, True, False], 2.0)
    """

    def __init__(self, k: int, heads: np.ndarray, tails: np.ndarray, weights: np.ndarray,
                 flow_func: Callable[..., Any], sink_arcs: bool = False):
        self.k, self.s, self.t = k, k, k + 1
        self.flow_func = flow_func
        self.heads, self.tails, self.weights = heads, tails, weights
        R = nx.DiGraph()
        R.add_nodes_from(range(k + 2))
        hl, tl, wl = heads.tolist(), tails.tolist(), weights.tolist()
        R.add_edges_from((a, b, {"capacity": w}) for a, b, w in zip(hl, tl, wl, strict=True))
        R.add_edges_from((b, a, {"capacity": w}) for a, b, w in zip(hl, tl, wl, strict=True))
        R.add_edges_from((self.s, i, {"capacity": 0.0}) for i in range(k))
        R.add_edges_from((i, self.s, {"capacity": 0.0}) for i in range(k))
        if sink_arcs:
            R.add_edges_from((i, self.t, {"capacity": 0.0}) for i in range(k))
            R.add_edges_from((self.t, i, {"capacity": 0.0}) for i in range(k))
        self.R = R
        self._src = [R.adj[self.s][i] for i in range(k)]
        self._snk = [R.adj[i][self.t] for i in range(k)] if sink_arcs else []
        self._fwd = [R.adj[a][b] for a, b in zip(hl, tl, strict=True)]
        self._bwd = [R.adj[b][a] for a, b in zip(hl, tl, strict=True)]
        self._scale = float(weights.max()) if weights.size else 1.0
        #: weighted degree of every node (``cut({i}, V \\ {i})``)
        self.degree = (np.bincount(heads, weights, minlength=k)
                       + np.bincount(tails, weights, minlength=k))

    def set_source(self, caps: np.ndarray) -> None:
        """Capacities of the source arcs ``s -> i`` (the budgets ``b_i`` or ``c_i + mu q_i``)."""
        for e, c in zip(self._src, caps.tolist(), strict=True):
            e["capacity"] = c
        self._scale = max(self._scale, float(np.max(caps, initial=0.0)))

    def set_sink(self, caps: np.ndarray) -> None:
        """Capacities of the sink arcs ``i -> t`` (only with ``sink_arcs=True``)."""
        for e, c in zip(self._snk, caps.tolist(), strict=True):
            e["capacity"] = c
        self._scale = max(self._scale, float(np.max(caps, initial=0.0)))

    def set_edges(self, caps: np.ndarray) -> None:
        """Capacities of both arcs of every edge (``A_ij``, or ``lambda A_ij``)."""
        for e1, e2, c in zip(self._fwd, self._bwd, caps.tolist(), strict=True):
            e1["capacity"] = c
            e2["capacity"] = c
        self._scale = max(self._scale, float(np.max(caps, initial=0.0)))

    def min_cut(self, sink: int) -> np.ndarray:
        """Source side (without ``s``) of a minimum ``s``-``sink`` cut, as a boolean mask."""
        R = self.R
        R.graph["inf"] = 1e300
        self.flow_func(R, self.s, sink, capacity="capacity", residual=R)
        tol = 1e-12 * self._scale
        adj = R.adj
        seen = [False] * (self.k + 2)
        seen[self.s] = True
        stack = [self.s]
        while stack:
            u = stack.pop()
            for v, e in adj[u].items():
                if not seen[v] and e["capacity"] - e["flow"] > tol:
                    seen[v] = True
                    stack.append(v)
        return np.array(seen[: self.k], dtype=bool)

    def cut(self, mask: np.ndarray) -> float:
        """``cut(A, V \\ A)`` of the (undirected) edges, computed exactly from the set."""
        return float(self.weights[mask[self.heads] != mask[self.tails]].sum())


def min_ratio(net: CutNetwork, i0: int, c: np.ndarray,
               q: np.ndarray) -> tuple[float, np.ndarray | None]:
    """``min (cut(A) - c(A)) / q(A)`` over nonempty ``A subset C \\ {i0}`` with ``q(A) > 0``.

    Dinkelbach's parametric iteration: for the current ratio ``mu`` a minimum cut with source
    capacities ``c_i + mu q_i`` into the sink ``i0`` minimizes ``cut(A) - c(A) - mu q(A)``; a
    negative minimum gives a set of smaller ratio, zero proves optimality.  Every ``mu`` is the
    exact ratio of an actual set, so ``mu`` only decreases and the loop is finite.  Requires
    ``cut(A) > c(A)`` for all such ``A`` (the caller checks).  Returns ``(inf, None)`` when
    ``q`` vanishes off ``i0``.  With ``c = 0``, ``q = b`` it is ``theta*(i0)`` of Definition 1
    ((35)); with ``q = delta`` it is ``1 / lambda_min(i0)``.

    Examples
    --------
    >>> import numpy as np
    >>> from networkx.algorithms.flow import preflow_push
    >>> net = CutNetwork(3, np.array([0, 1, 0]), np.array([1, 2, 2]),  # triangle, A_02 = 2
    ...                  np.array([1.0, 1.0, 2.0]), preflow_push)
    >>> theta, A = min_ratio(net, 2, np.zeros(3), np.array([0.5, 0.5, 0.5]))
    >>> theta, A.tolist()  # A = {0, 1}: cut 3 / budget 1
    (3.0, [True, True, False])
    """
    k = net.k
    off = np.ones(k, dtype=bool)
    off[i0] = False
    q = np.where(off, q, 0.0)
    if not (q > 0).any():
        return math.inf, None
    # start from the better of C \ {i0} and the best singleton
    best = off
    mu = (net.cut(off) - c[off].sum()) / q[off].sum()
    deg = net.degree
    pos = np.flatnonzero(q > 0)
    single = (deg[pos] - c[pos]) / q[pos]
    j = int(np.argmin(single))
    if single[j] < mu:
        mu = float(single[j])
        best = np.zeros(k, dtype=bool)
        best[pos[j]] = True
    while True:
        caps = np.where(off, c + mu * q, 0.0)
        net.set_source(caps)
        A = net.min_cut(i0)
        Q = float(q[A].sum())
        if Q <= 0:
            break
        r = (net.cut(A) - float(c[A].sum())) / Q
        if not r < mu:
            break
        mu, best = r, A
    return float(mu), best



def others_extreme(v: np.ndarray, largest: bool) -> np.ndarray:
    """``out[i] = max_{j != i} v_j`` (or min): the two extreme values, vectorized.

    Examples
    --------
    >>> import numpy as np
    >>> others_extreme(np.array([3.0, 1.0, 2.0]), largest=True).tolist()
    [2.0, 3.0, 3.0]
    >>> others_extreme(np.array([3.0, 1.0, 2.0]), largest=False).tolist()
    [1.0, 2.0, 1.0]
    """
    if v.size < 2:
        return np.full(v.size, -math.inf if largest else math.inf)
    order = np.argsort(-v if largest else v, kind="stable")
    out = np.full(v.size, v[order[0]])
    out[order[0]] = v[order[1]]
    return out


def best_margin(net: CutNetwork, b: np.ndarray) -> tuple[float, int, np.ndarray | None]:
    """``(theta*, i0, A)``: the first ``i0`` with ``theta*(i0) > 1``, else the best one.

    Upper bounds ``theta*(i0) <= min(ratio(C \\ {i0}), min_{j != i0} ratio({j}))`` (cheap, no
    max-flow) order the candidates and stop the search once no candidate can beat the best
    ``theta*`` found; a failed ``i0`` restricts the candidates to its minimizing set ``A``
    (every ``i0' notin A`` has ``theta*(i0') <= ratio(A)``).  Both prunings keep it exact.
    ``b`` holds the budgets ``b_i`` of Definition 1; the condition (35) holds iff
    ``theta* > 1``.

    Examples
    --------
    >>> import numpy as np
    >>> from networkx.algorithms.flow import preflow_push
    >>> net = CutNetwork(3, np.array([0, 1, 0]), np.array([1, 2, 2]),  # triangle, A_02 = 2
    ...                  np.array([1.0, 1.0, 2.0]), preflow_push)
    >>> theta, i0, A = best_margin(net, np.array([0.5, 0.5, 0.5]))
    >>> theta, i0, A.tolist()  # anchor i0 = 0: the set A = {1, 2} has cut 3, budget 1
    (3.0, 0, [False, True, True])
    """
    zero = np.zeros(net.k)
    deg = net.degree
    rest = b.sum() - b
    with np.errstate(divide="ignore", invalid="ignore"):
        whole = np.where(rest > 0, deg / rest, math.inf)  # ratio(C \ {i0}); cut = deg(i0)
        single = np.where(b > 0, deg / b, math.inf)
    ub = np.minimum(whole, others_extreme(single, largest=False))
    cand = np.ones(net.k, dtype=bool)
    best, best_i0, best_set = -math.inf, int(np.argmax(ub)), None
    while cand.any():
        idx = np.flatnonzero(cand)
        i0 = int(idx[np.argmax(ub[idx])])
        if ub[i0] <= best:
            break
        theta, A = min_ratio(net, i0, zero, b)
        if theta > best:
            best, best_i0, best_set = theta, i0, A
        if theta > 1.0 or A is None:
            break
        cand &= A
    return best, best_i0, best_set


def best_lam_min(net: CutNetwork, c: np.ndarray, delta: np.ndarray) -> float:
    """``min_{i0} max_A delta(A) / (cut(A) - c(A))`` (``inf`` if never).

    Lower bounds from ``A = C \\ {i0}`` and the singletons order and stop the search over
    ``i0``; a computed ``i0`` restricts the candidates to its maximizing set ``A`` (every
    ``i0' notin A`` has ``lam_min(i0') >= lam_min(i0)``).  With budgets ``b_i = c_i + delta_i /
    lambda`` this is ``lambda_min(C)``: (35) holds exactly for ``lambda > lambda_min(C)``.

    Examples
    --------
    >>> import numpy as np
    >>> from networkx.algorithms.flow import preflow_push
    >>> net = CutNetwork(3, np.array([0, 1, 0]), np.array([1, 2, 2]),  # triangle, A_02 = 2
    ...                  np.array([1.0, 1.0, 2.0]), preflow_push)
    >>> round(best_lam_min(net, np.zeros(3), np.array([0.5, 0.5, 0.5])), 6)
    0.333333
    """
    zero = np.zeros(net.k)
    deg = net.degree

    def g(dl: np.ndarray, gap: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(gap > 0, np.where(dl > 0, dl / gap, 0.0), math.inf)

    whole = g(delta.sum() - delta, deg - (c.sum() - c))
    lb = np.maximum(whole, others_extreme(g(delta, deg - c), largest=True))
    cand = np.ones(net.k, dtype=bool)
    best = math.inf
    while cand.any():
        idx = np.flatnonzero(cand)
        i0 = int(idx[np.argmin(lb[idx])])
        if lb[i0] >= best:
            break
        theta_c, A = min_ratio(net, i0, zero, c)
        if theta_c <= 1.0:
            lam_i0 = math.inf  # cut(A) <= c(A): fails for every lambda
        else:
            mu, A = min_ratio(net, i0, c, delta)
            lam_i0 = 0.0 if math.isinf(mu) else 1.0 / mu
        best = min(best, lam_i0)
        if best == 0.0 or A is None:
            break
        cand &= A
    return best

