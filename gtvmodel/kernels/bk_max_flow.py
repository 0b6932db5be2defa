"""Maximum flow by search trees (Boykov and Kolmogorov, *An experimental comparison of
min-cut/max-flow algorithms for energy minimization in vision*, IEEE TPAMI 26(9), 2004),
compiled with numba, over the CSR residual arrays of :mod:`gtvmodel.kernels.max_flow`
(``indptr``, ``head``, ``rev``: the opposite arc, ``res``: the residuals, updated in place).

Two trees grow from the source and from the sink along arcs with residual above ``eps``
(FIFO of active nodes); where they touch, the path through the touching arc is augmented by
its bottleneck, the nodes below the arcs it saturated become orphans, and each orphan is
adopted by a neighbour of its tree whose own path still reaches the tree's root (checked by
walking up, with time stamps and distances to the root as in the paper), or is freed and
its children become orphans in turn.  Unlike Dinic's phases (:func:`~gtvmodel.kernels.
max_flow._dinic`), the trees are kept between augmentations: on the grid-like networks of
:mod:`gtvmodel.kernels.parametric_tv`, with demands spread over many nodes far apart, the
searches do not start over.  At the end the source tree is the set of nodes reachable from
the source in the residual graph (no arc with residual leaves it): the minimal source side of
a minimum cut.

The functions are pure (arrays in, arrays out) and know nothing of models.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["bk_max_flow"]

_NB = {"cache": True, "nogil": True}
_ROOT = -2  # the parent of a terminal
_NONE = -1  # the parent of an orphan or a free node


@numba.njit(**_NB)
def _parent_node(v, tree, parent, hd, rev):
    """The node above ``v``: the tail of its parent arc in the source tree (arcs point
    down), the head in the sink tree (arcs point up)."""
    a = parent[v]
    return hd[rev[a]] if tree[v] == 1 else hd[a]


@numba.njit(**_NB)
def _grow(indptr, hd, rev, res, eps, st):
    """Grow the trees from the active nodes until they touch: the arc from the source tree to
    the sink tree, or -1 when no active node is left (the flow is maximal)."""
    tree, parent, dist, ts, queue, active, _, qh = st
    nv = tree.size
    while qh[0] != qh[1]:
        p = queue[qh[0]]
        if tree[p] != 0:
            for a in range(indptr[p], indptr[p + 1]):
                q = hd[a]
                arc = a if tree[p] == 1 else rev[a]  # the arc from the source side
                if res[arc] <= eps or tree[q] == tree[p]:
                    continue
                if tree[q] != 0:
                    return arc
                tree[q], parent[q] = tree[p], arc
                dist[q], ts[q] = dist[p] + 1, ts[p]
                if not active[q]:
                    active[q] = True
                    queue[qh[1]] = q
                    qh[1] = (qh[1] + 1) % (nv + 1)
        active[p] = False
        qh[0] = (qh[0] + 1) % (nv + 1)
    return -1


@numba.njit(**_NB)
def _augment(arc, hd, rev, res, eps, st):
    """Push the bottleneck of the path through ``arc`` (source tree to sink tree); the nodes
    below saturated arcs become orphans.  Returns the amount pushed."""
    tree, parent, _, _, _, _, orphans, qh = st
    f = res[arc]
    for side in range(2):  # the bottleneck: up the source tree, then up the sink tree
        v = hd[rev[arc]] if side == 0 else hd[arc]
        while parent[v] != _ROOT:
            f = min(f, res[parent[v]])
            v = _parent_node(v, tree, parent, hd, rev)
    res[arc] -= f
    res[rev[arc]] += f
    for side in range(2):
        v = hd[rev[arc]] if side == 0 else hd[arc]
        while parent[v] != _ROOT:
            a = parent[v]
            up = _parent_node(v, tree, parent, hd, rev)
            res[a] -= f
            res[rev[a]] += f
            if res[a] <= eps:
                parent[v] = _NONE
                orphans[qh[2]] = v
                qh[2] += 1
            v = up
    return f


@numba.njit(**_NB)
def _origin(q, tree, parent, dist, ts, time, hd, rev):
    """The distance from ``q`` to its tree's root if its path reaches the root (no orphan on
    the way), else -1; on success the path's nodes get the stamp ``time`` and distances."""
    d = 0
    u = q
    while True:
        if ts[u] == time:
            d += dist[u]
            break
        if parent[u] == _ROOT:
            break
        if parent[u] == _NONE:
            return -1
        u = _parent_node(u, tree, parent, hd, rev)
        d += 1
    u, dd = q, d
    while ts[u] != time:
        ts[u], dist[u] = time, dd
        dd -= 1
        if parent[u] == _ROOT:
            break
        u = _parent_node(u, tree, parent, hd, rev)
    return d


@numba.njit(**_NB)
def _adopt(indptr, hd, rev, res, eps, time, st):
    """Give every orphan a parent in its tree whose path reaches the root (the nearest), or
    free it: its neighbours in the tree become active, its children orphans."""
    tree, parent, dist, ts, queue, active, orphans, qh = st
    nv = tree.size
    while qh[2] > 0:
        qh[2] -= 1
        v = orphans[qh[2]]
        best, bestd = -1, np.iinfo(np.int64).max
        for a in range(indptr[v], indptr[v + 1]):
            q = hd[a]
            arc = rev[a] if tree[v] == 1 else a  # from q down to v, or from v up to q
            if tree[q] != tree[v] or res[arc] <= eps:
                continue
            d = _origin(q, tree, parent, dist, ts, time, hd, rev)
            if 0 <= d < bestd:
                best, bestd = arc, d
        if best >= 0:
            parent[v], ts[v], dist[v] = best, time, bestd + 1
            continue
        for a in range(indptr[v], indptr[v + 1]):
            q = hd[a]
            if tree[q] != tree[v]:
                continue
            arc = rev[a] if tree[v] == 1 else a
            if res[arc] > eps and not active[q]:
                active[q] = True
                queue[qh[1]] = q
                qh[1] = (qh[1] + 1) % (nv + 1)
            if parent[q] >= 0 and _parent_node(q, tree, parent, hd, rev) == v:
                parent[q] = _NONE
                orphans[qh[2]] = q
                qh[2] += 1
        tree[v] = 0


@numba.njit(**_NB)
def _bk(indptr, hd, rev, res, s, t, eps, tree):
    nv = indptr.size - 1
    tree[:] = 0
    parent = np.full(nv, _NONE, dtype=np.int64)
    dist = np.zeros(nv, dtype=np.int64)
    ts = np.zeros(nv, dtype=np.int64)
    queue = np.empty(nv + 1, dtype=np.int64)
    active = np.zeros(nv, dtype=np.bool_)
    orphans = np.empty(nv, dtype=np.int64)
    qh = np.zeros(3, dtype=np.int64)  # queue head, queue tail, orphan count
    st = (tree, parent, dist, ts, queue, active, orphans, qh)
    tree[s], tree[t] = 1, 2
    parent[s] = parent[t] = _ROOT
    queue[0], queue[1] = s, t
    active[s] = active[t] = True
    qh[1] = 2
    total = 0.0
    time = 0
    while True:
        arc = _grow(indptr, hd, rev, res, eps, st)
        if arc < 0:
            return total
        time += 1
        ts[s] = ts[t] = time
        total += _augment(arc, hd, rev, res, eps, st)
        _adopt(indptr, hd, rev, res, eps, time, st)


def bk_max_flow(indptr: np.ndarray, head: np.ndarray, rev: np.ndarray, res: np.ndarray,
                s: int, t: int, eps: float = 0.0) -> tuple[float, np.ndarray]:
    """``(value, source_side)``: a maximum flow from ``s`` to ``t`` over the CSR arcs
    (``head``, ``rev[a]`` the arc opposite to ``a``, ``res`` the residuals, updated in place;
    residuals at most ``eps`` count as saturated) and the nodes reachable from ``s`` in the
    final residual graph (booleans).

    >>> import numpy as np
    >>> # s=0 -> 1 (cap 2) -> t=2 (cap 1), and the opposite arcs at 0
    >>> indptr = np.array([0, 1, 3, 4]); head = np.array([1, 0, 2, 1])
    >>> rev = np.array([1, 0, 3, 2]); res = np.array([2.0, 0.0, 1.0, 0.0])
    >>> value, side = bk_max_flow(indptr, head, rev, res, 0, 2)
    >>> float(value), side.tolist(), res.tolist()
    (1.0, [True, True, False], [1.0, 1.0, 0.0, 1.0])
    """
    tree = np.zeros(indptr.size - 1, dtype=np.int64)
    value = _bk(np.asarray(indptr, dtype=np.int64), np.asarray(head, dtype=np.int64),
                np.asarray(rev, dtype=np.int64), res, int(s), int(t), float(eps), tree)
    return value, tree == 1
