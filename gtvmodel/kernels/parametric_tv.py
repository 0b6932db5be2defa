"""Exact scalar total variation on any graph by divide and conquer over levels with minimum
cuts (compiled with numba).

The problem, per coordinate ``j`` (one column of the ``(n, d)`` arrays), on a graph with edges
``(e+, e-)`` and weights ``c_e = lambda A_e >= 0``:

    minimize_x   sum_i h_i(x_i)  +  sum_e c_e |x_{e+} - x_{e-}|,
    h_i(x) = q_i x^2 - 2 p_i x + eta_i |x|,       q_i >= 0, eta_i >= 0,

with ``p_i = 0`` wherever ``q_i = 0`` (nodes without data).  It is (16) of paper 001 with
``phi = ||.||_1`` when every node term is a diagonal quadratic plus ``l1``/``l2``
regularizers (:mod:`gtvmodel.solve.direct`); cycles are allowed (on forests the dynamic
programming of :mod:`gtvmodel.kernels.tv` is faster).

**Levels by minimum cuts** (D. S. Hochbaum, *An efficient algorithm for image segmentation,
Markov random fields and related problems*, J. ACM 48(4), 2001; A. Chambolle and J. Darbon,
*On total variation minimization and surface evolution using parametric maximum flows*,
IJCV 84, 2009; the decomposition algorithm of F. Bach, *Learning with submodular functions*,
2013, Sec. 9.1).  For a level ``t`` and subgradients ``g_i in dh_i(t)``, every minimizer
``A`` of the cut function ``E_t(A) = sum_{i in A} g_i + sum_{e cut by A} c_e`` admits an
optimal ``x`` with ``x_A >= t >= x_{V \\ A}`` (the coarea formula and the submodularity of the
cut).  The algorithm works on node sets ``S`` whose values are known to lie in ``[lo, hi]``;
every edge from ``S`` to a set decided above (below) ``S`` enters ``h_i`` as the linear term
``-c_e x_i`` (``+c_e x_i``): the *boundary slope* ``b_i``.  For ``S``:

1. ``t*`` minimizes ``sum_{i in S} h_i(t) + b_i t`` (``S`` held constant: ``Q t^2 - R t + H |t|``
   with ``Q = sum q``, ``R = sum (2 p - b)``, ``H = sum eta``; in closed form), the point of
   its minimizers in ``[lo, hi]`` nearest to 0 (nodes without data make it an interval);
2. ``g_i = 2 q_i t* - 2 p_i + b_i + eta_i s_i`` with ``s_i = sign(t*)``, or at ``t* = 0`` one
   ``s in [-1, 1]`` for all nodes that makes ``sum g_i = 0`` (``0 in`` the subdifferential of
   the sum at its minimizer, so such a choice exists);
3. one maximum flow (:func:`choose_max_flow`: Boykov and Kolmogorov's search trees,
   :mod:`gtvmodel.kernels.bk_max_flow`, on grid-like graphs, Dinic's phases,
   :mod:`gtvmodel.kernels.max_flow`, on denser ones) from a source joined to every node
   with ``g_i < 0`` (capacity ``-g_i``) to a sink joined to every node with ``g_i > 0``
   (capacity ``g_i``), each edge inside ``S`` an undirected arc of capacity ``c_e``: the
   nodes reachable from the source in the residual graph form the minimal minimizer ``A`` of
   ``E_{t*}``;
4. ``A`` empty or all of ``S`` (``E(S) = sum g = 0 = E(empty)``: both minimize, so ``x = t*``
   on ``S`` is optimal): ``S`` is one fused set at ``t*``; otherwise ``A`` goes to ``[t*, hi]``,
   ``S \\ A`` to ``[lo, t*]``, the cut edges become boundary slopes.

Each split is nontrivial, so at most ``n - 1`` splits; the work is one maximum flow per set
(the sets of one depth partition the graph: the depth is about ``log`` of the number of
distinct values when the levels split the sets evenly, ``n`` at worst).  The recursion is an
explicit stack; each set's network is built as a CSR subgraph of its nodes.

**Flows.**  When a set ends fused, its last maximum flow saturates every source and sink arc
(``E(empty)`` is minimal), so the net flow out of each node along the edges inside ``S`` is
``-g_i``: with the cut edges at ``u_e = +-c_e`` (the sign of the edge's decided order; they
are the boundary slopes) the node conditions ``-(D^T u)_i = h_i'(x_i)`` hold at every node and
``|u_e| <= c_e`` on every edge, up to the maximum flow's rounding.

The functions are pure (arrays in, arrays out) and know nothing of models.
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from .bk_max_flow import _bk
from .max_flow import _dinic, _levels
from .tv import _adjacency

__all__ = ["tv_graph", "choose_max_flow", "MEAN_DEGREE_TREES"]

_NB = {"cache": True, "nogil": True}
#: Residuals at most this share of a set's largest node capacity count as saturated.
_EPS = 1e-13


@numba.njit(**_NB)
def _level(Q, R, H, lo, hi):
    """The minimizer of ``Q t^2 - R t + H |t|`` over ``[lo, hi]`` nearest to 0 (the nearer end
    of ``[lo, hi]`` when rounding leaves the minimizers outside it)."""
    if Q > 0.0:
        if R > H:
            a = b = (R - H) / (2.0 * Q)
        elif R < -H:
            a = b = (R + H) / (2.0 * Q)
        else:
            a = b = 0.0
    elif R > H:
        a = b = np.inf
    elif R < -H:
        a = b = -np.inf
    elif H == 0.0:
        a, b = -np.inf, np.inf
    elif R == H:
        a, b = 0.0, np.inf
    elif R == -H:
        a, b = -np.inf, 0.0
    else:
        a = b = 0.0
    left, right = max(a, lo), min(b, hi)
    if left <= right:
        t = min(max(0.0, left), right)
    elif b < lo:
        t = lo
    else:
        t = hi
    if not np.isfinite(t):  # an unbounded set (no boundary: B = 0) whose sum is flat
        t = min(max(0.0, lo), hi)
    return t


@numba.njit(**_NB)
def _settle(S, q, ni, pos, indptr, hd, rev, res, src, snk):
    """Move what the maximum flow of a fused set left undelivered at nodes without data
    (``q = 0``: their conjugates are finite only at their subgradients) to nodes with data,
    whose subgradients may absorb it: first the supply left at the former (sinks: every node
    with data, unbounded), then the demand left at them (sources: every node with data)."""
    stiff = False
    loose = False
    for k in range(S.size):
        sa, ta = pos[2 * (ni + 2 * k)], pos[2 * (ni + 2 * k + 1)]
        if q[S[k]] > 0.0:
            stiff = True
        elif res[sa] > 0.0 or res[ta] > 0.0:
            loose = True
    if not (stiff and loose):
        return
    for phase in range(2):
        for k in range(S.size):
            sa, ta = pos[2 * (ni + 2 * k)], pos[2 * (ni + 2 * k + 1)]
            if q[S[k]] > 0.0:
                res[sa] = np.inf if phase == 1 else 0.0
                res[ta] = np.inf if phase == 0 else 0.0
            elif phase == 1:
                res[sa] = 0.0
        _dinic(indptr, hd, rev, res, src, snk, 0.0)


@numba.njit(**_NB)
def _subgradients(S, t, q, p, eta, b, g):
    """``g_i in dh_i(t) + b_i`` for ``i in S``, summing to 0 where the ``l1`` kink at
    ``t = 0`` allows (one share ``s in [-1, 1]`` of every ``eta_i``); returns ``max |g_i|``."""
    base = 0.0
    H = 0.0
    for i in S:
        g[i] = 2.0 * (q[i] * t - p[i]) + b[i]
        if t > 0.0:
            g[i] += eta[i]
        elif t < 0.0:
            g[i] -= eta[i]
        base += g[i]
        H += eta[i]
    theta = min(max(-base / H, -1.0), 1.0) if t == 0.0 and H > 0.0 else 0.0
    gmax = 0.0
    for i in S:
        g[i] += theta * eta[i]
        gmax = max(gmax, abs(g[i]))
    return gmax


@numba.njit(**_NB)
def _workspace(n, m):
    """The arrays every set's network is built in (sliced to its size): the arcs' ``(tail,
    head, pos, hd, rev)`` and ``(res0, res)``, ``2 (m + 2 n)`` each; ``edge_of`` (``m``);
    ``(indptr, fill)`` per node of the network, ``level`` twice that; ``buf`` per node."""
    na, nv = 2 * (m + 2 * n), n + 2
    ints = (np.empty(na, dtype=np.int64), np.empty(na, dtype=np.int64),
            np.empty(na, dtype=np.int64), np.empty(na, dtype=np.int64),
            np.empty(na, dtype=np.int64), np.empty(max(m, 1), dtype=np.int64),
            np.empty(nv + 1, dtype=np.int64), np.empty(nv + 1, dtype=np.int64),
            np.empty(2 * nv, dtype=np.int64), np.empty(n, dtype=np.int64))
    return ints, (np.empty(na), np.empty(na))


@numba.njit(**_NB)
def _arcs(S, heads, ptr, nbr, eid, cap, label, loc, g, ws):
    """The network of ``S`` (nodes ``0..ns-1`` in ``S``'s order, source ``ns``, sink ``ns +
    1``) as arc pairs ``2a, 2a + 1`` (opposite arcs) in ``ws``'s ``tail``, ``head``,
    ``res0``: first the edges inside ``S`` (``c_e`` both ways; ``edge_of[a]``: the edge),
    then per node its source pair (``-g_i`` if positive) and its sink pair (``g_i`` if
    positive).  Returns the number of inner edges ``ni``.  (Starting from the flows of the
    set's parent instead, a warm start, made the maximum flows 2-6x slower on grids.)"""
    (tail, head, _, _, _, edge_of, _, _, _, _), (res0, _) = ws
    ns = S.size
    a2 = 0
    for li in range(ns):
        i = S[li]
        for a in range(ptr[i], ptr[i + 1]):
            j = nbr[a]
            if label[j] == label[i] and heads[eid[a]] == i:
                tail[2 * a2], head[2 * a2] = li, loc[j]
                tail[2 * a2 + 1], head[2 * a2 + 1] = loc[j], li
                res0[2 * a2] = res0[2 * a2 + 1] = cap[eid[a]]
                edge_of[a2] = eid[a]
                a2 += 1
    for li in range(ns):
        sa, ta = 2 * (a2 + 2 * li), 2 * (a2 + 2 * li + 1)
        tail[sa], head[sa], tail[sa + 1], head[sa + 1] = ns, li, li, ns
        tail[ta], head[ta], tail[ta + 1], head[ta + 1] = li, ns + 1, ns + 1, li
        res0[sa] = max(-g[S[li]], 0.0)
        res0[ta] = max(g[S[li]], 0.0)
        res0[sa + 1] = res0[ta + 1] = 0.0
    return a2


@numba.njit(**_NB)
def _csr(nv, na, ws):
    """The ``na`` arcs sorted by tail for :func:`~gtvmodel.kernels.max_flow._dinic`: fills
    ``ws``'s ``indptr``, ``hd``, ``rev``, ``res`` and ``pos`` (arc ``a`` at ``pos[a]``)."""
    (tail, head, pos, hd, rev, _, indptr, fill, _, _), (res0, res) = ws
    indptr[: nv + 1] = 0
    for a in range(na):
        indptr[tail[a] + 1] += 1
    for v in range(nv):
        indptr[v + 1] += indptr[v]
    fill[:nv] = indptr[:nv]
    for a in range(na):
        pos[a] = fill[tail[a]]
        fill[tail[a]] += 1
    for a in range(na):
        hd[pos[a]] = head[a]
        rev[pos[a]] = pos[a ^ 1]
        res[pos[a]] = res0[a]


@numba.njit(**_NB)
def _cut(S, heads, ptr, nbr, eid, cap, label, loc, q, g, gmax, u, ws, trees):
    """One maximum flow on ``S`` (:func:`~gtvmodel.kernels.bk_max_flow._bk`): the number of
    nodes reachable from the source in the residual graph (the minimal minimizer of
    ``E_t``; ``ws``'s ``level == 1``), or 0 when none or all are, after writing the fused
    set's exact flows into ``u``."""
    (_, _, pos, hd, rev, edge_of, indptr, _, level, _), (_, res) = ws
    ns = S.size
    ni = _arcs(S, heads, ptr, nbr, eid, cap, label, loc, g, ws)
    nv, na = ns + 2, 2 * (ni + 2 * ns)
    _csr(nv, na, ws)
    ip, h, rv, rs = indptr[: nv + 1], hd[:na], rev[:na], res[:na]
    eps = _EPS * max(gmax, 1e-300)
    if trees:
        _bk(ip, h, rv, rs, ns, ns + 1, eps, level[:nv])
    else:
        _dinic(ip, h, rv, rs, ns, ns + 1, eps)
        _levels(ip, h, rs, ns, ns + 1, eps, level[:nv], level[nv: 2 * nv])
        for k in range(nv):
            level[k] = 1 if level[k] >= 0 else 0
    nup = 0
    for k in range(ns):
        if level[k] == 1:
            nup += 1
    fused = nup == 0 or nup == ns
    if not fused:
        return nup
    _settle(S, q, ni, pos, ip, h, rv, rs, ns, ns + 1)
    for a in range(ni):
        e = edge_of[a]
        f = cap[e] - res[pos[2 * a]]  # the net flow from the head e+ to e-
        u[e] = min(max(f, -cap[e]), cap[e])
    return 0


@numba.njit(**_NB)
def _split(S, nup, heads, ptr, nbr, eid, cap, label, lab_up, b, u, ws):
    """Reorder ``S`` in place (the ``nup`` nodes with ``level == 1`` in ``ws`` first), label
    the two parts, and turn the edges between them into boundary slopes ``b`` and flows at
    capacity (from ``e+``)."""
    (_, _, _, _, _, _, _, _, level, buf), _ = ws
    ns = S.size
    w_up, w_down = 0, nup
    for k in range(ns):
        if level[k] == 1:
            buf[w_up] = S[k]
            w_up += 1
        else:
            buf[w_down] = S[k]
            w_down += 1
    for k in range(ns):
        S[k] = buf[k]
        label[S[k]] = lab_up if k < nup else lab_up + 1
    for k in range(nup):
        i = S[k]
        for a in range(ptr[i], ptr[i + 1]):
            j = nbr[a]
            if label[j] == lab_up + 1:
                e = eid[a]
                b[i] += cap[e]
                b[j] -= cap[e]
                u[e] = cap[e] if heads[e] == i else -cap[e]


@numba.njit(**_NB)
def _tv_graph_column(n, heads, ptr, nbr, eid, cap, q, p, eta, comp, ncomp, x, u, trees):
    """One coordinate: fills ``x`` (``(n,)``) and ``u`` (``(|E|,)``, head to tail)."""
    perm = np.argsort(comp, kind="mergesort")
    label = comp.copy()
    b = np.zeros(n)
    g = np.empty(n)
    loc = np.empty(n, dtype=np.int64)
    ws = _workspace(n, heads.size)
    # the stack of sets perm[start:end] with their values in [lo, hi]: the components first
    bounds = np.empty((n + ncomp, 2), dtype=np.int64)
    levels = np.empty((n + ncomp, 2))
    cuts = np.flatnonzero(np.diff(comp[perm]) != 0) + 1
    starts = np.concatenate((np.zeros(1, dtype=np.int64), cuts))
    ends = np.concatenate((cuts, np.full(1, n, dtype=np.int64)))
    top = starts.size if n else 0
    bounds[:top, 0], bounds[:top, 1] = starts[:top], ends[:top]
    levels[:top, 0], levels[:top, 1] = -np.inf, np.inf
    next_label = ncomp
    while top > 0:
        top -= 1
        s0, s1, lo, hi = bounds[top, 0], bounds[top, 1], levels[top, 0], levels[top, 1]
        S = perm[s0:s1]
        Q, R, H = 0.0, 0.0, 0.0
        for i in S:
            Q += q[i]
            R += 2.0 * p[i] - b[i]
            H += eta[i]
        t = _level(Q, R, H, lo, hi)
        nup = 0
        if S.size > 1:
            gmax = _subgradients(S, t, q, p, eta, b, g)
            for k in range(S.size):
                loc[S[k]] = k
            nup = _cut(S, heads, ptr, nbr, eid, cap, label, loc, q, g, gmax, u, ws, trees)
        if nup == 0:  # one fused set at t
            for i in S:
                x[i] = t
            continue
        _split(S, nup, heads, ptr, nbr, eid, cap, label, next_label, b, u, ws)
        next_label += 2
        bounds[top, 0], bounds[top, 1], levels[top, 0], levels[top, 1] = s0 + nup, s1, lo, t
        bounds[top + 1, 0], bounds[top + 1, 1] = s0, s0 + nup
        levels[top + 1, 0], levels[top + 1, 1] = t, hi
        top += 2


@numba.njit(**_NB)
def _tv_graph(n, heads, tails, cap, q, p, eta, comp, ncomp, trees):
    d = q.shape[1]
    ptr, nbr, eid = _adjacency(n, heads, tails)
    x = np.empty((n, d))
    u = np.zeros((heads.size, d))
    for j in range(d):
        xj = np.empty(n)
        uj = np.zeros(heads.size)
        _tv_graph_column(n, heads, ptr, nbr, eid, cap, np.ascontiguousarray(q[:, j]),
                         np.ascontiguousarray(p[:, j]), eta, comp, ncomp, xj, uj, trees)
        x[:, j] = xj
        u[:, j] = uj
    return x, u


def tv_graph(n: int, edges: np.ndarray, cap: np.ndarray, q: np.ndarray, p: np.ndarray,
             eta: np.ndarray, components: np.ndarray | None = None, max_flow: str = "auto"
             ) -> tuple[np.ndarray, np.ndarray]:
    """``(x, u)``: the minimizer (``(n, d)``) of the module's problem on the graph with the
    ``(|E|, 2)`` ``edges`` ``(e+, e-)`` and weights ``cap`` (``c_e``), and exact flows
    (``(|E|, d)``, from ``e+`` to ``e-``) with ``-(D^T u)_i in dh_i(x_i)`` and
    ``u_e in c_e d|.|(x_{e+} - x_{e-})``.

    ``q``, ``p`` are ``(n, d)`` (``q >= 0``, ``p = 0`` where ``q = 0``), ``eta`` is ``(n,)``;
    ``components``: the connected component of every node (computed when None; each
    component is solved on its own).  Where the minimizer is not unique (``q = 0`` on a whole
    fused set) the value of the set is the one nearest to 0 in its interval.  ``max_flow``:
    ``"trees"`` (Boykov-Kolmogorov, :mod:`gtvmodel.kernels.bk_max_flow`), ``"dinic"``
    (:func:`gtvmodel.kernels.max_flow._dinic`) or ``"auto"`` (:func:`choose_max_flow`).

    >>> import numpy as np
    >>> edges = np.array([[0, 1], [1, 2], [0, 2]])          # a triangle
    >>> a = np.array([[3.0], [0.0], [-3.0]])                # sum (x_i - a_i)^2 + TV(x)
    >>> x, u = tv_graph(3, edges, np.ones(3), np.ones((3, 1)), a, np.zeros(3))
    >>> x.ravel(), u.ravel()
    (array([ 2.,  0., -2.]), array([1., 1., 1.]))
    """
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    q = np.ascontiguousarray(q, dtype=float)
    n = int(n)
    p = np.ascontiguousarray(np.broadcast_to(np.asarray(p, dtype=float), q.shape))
    eta = np.ascontiguousarray(np.broadcast_to(np.asarray(eta, dtype=float), (n,)))
    cap = np.ascontiguousarray(np.broadcast_to(np.asarray(cap, dtype=float), (e.shape[0],)))
    if components is None:
        adj = sp.csr_matrix((np.ones(e.shape[0]), (e[:, 0], e[:, 1])), shape=(n, n))
        ncomp, components = csgraph.connected_components(adj, directed=False)
    comp = np.ascontiguousarray(components, dtype=np.int64)
    ncomp = int(comp.max(initial=-1)) + 1
    trees = choose_max_flow(n, e.shape[0]) if max_flow == "auto" else max_flow == "trees"
    return _tv_graph(n, np.ascontiguousarray(e[:, 0]), np.ascontiguousarray(e[:, 1]), cap, q,
                     p, eta, comp, ncomp, trees)


def choose_max_flow(n: int, m: int) -> bool:
    """Whether the search trees (True) or Dinic's phases (False) run the maximum flows of a
    graph with ``n`` nodes and ``m`` edges: the trees on sparse graphs (mean degree ``2 m /
    n`` at most 4: grids, where flows travel far), Dinic's phases on denser ones (SBMs,
    random and small-world graphs, where paths are short)."""
    return 2 * m <= MEAN_DEGREE_TREES * max(n, 1)


#: The mean degree up to which :func:`choose_max_flow` takes the search trees.
MEAN_DEGREE_TREES = 4.0

