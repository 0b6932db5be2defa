"""A feasible flow in undirected box capacities by maximum flow (Dinic's algorithm over
floating-point capacities, compiled with numba).

Given a conservation system ``A x = b`` whose every column ``m`` has one ``+1`` (row
``r+_m``) and one ``-1`` (row ``r-_m``) -- an edge carrying ``x_m`` from ``r-_m`` to
``r+_m`` -- and capacities ``|x_m| <= c_m``, a solution is a flow that meets the net inflows
``b``: the maximum flow from a source joined to every row with ``b_r < 0`` (capacity
``-b_r``) to a sink joined to every row with ``b_r > 0`` (capacity ``b_r``), each column an
undirected edge of capacity ``c_m`` (Ahuja, Magnanti and Orlin, *Network Flows*, 1993,
Sec. 6.2; Dinic's blocking flows, Sec. 7.5).  It is the flow recovery's problem
(:mod:`gtvmodel.certificates.recovery`) for the box dual balls of (27) (the ``l1`` penalty,
every norm at ``d = 1``) with equality node conditions of (16): the fused edges' flows per
coordinate, the demands the smooth gradients minus the flows fixed on the other edges.

Floating-point residuals at most ``eps`` (a ``1e-13`` share of the largest capacity) count
as saturated; the flows stay inside ``[-c_m, c_m]`` exactly (they are ``c_m`` minus a
residual in ``[0, 2 c_m]``, clipped).
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp

__all__ = ["box_feasible_flow", "MAX_FLOW_RTOL"]

#: The share of the demand :func:`box_feasible_flow` may leave unmet (rounding, e.g. the
#: clusters' imbalances ``sum b``) and still return the flow.
MAX_FLOW_RTOL = 1e-9


@numba.njit(cache=True, nogil=True)
def _levels(indptr: np.ndarray, head: np.ndarray, res: np.ndarray, s: int, t: int, eps: float,
            level: np.ndarray, queue: np.ndarray) -> bool:
    """Breadth-first levels from ``s`` over arcs with residual above ``eps``; whether ``t``
    is reached."""
    level[:] = -1
    level[s] = 0
    queue[0] = s
    read, write = 0, 1
    while read < write:
        u = queue[read]
        read += 1
        for a in range(indptr[u], indptr[u + 1]):
            v = head[a]
            if res[a] > eps and level[v] < 0:
                level[v] = level[u] + 1
                queue[write] = v
                write += 1
    return level[t] >= 0


@numba.njit(cache=True, nogil=True)
def _dinic(indptr: np.ndarray, head: np.ndarray, rev: np.ndarray, res: np.ndarray, s: int,
           t: int, eps: float) -> float:
    """The maximum flow from ``s`` to ``t`` (``res``: the arcs' residuals, updated in place;
    ``rev[a]`` the arc opposite to ``a``); returns its value."""
    nv = indptr.size - 1
    level = np.empty(nv, dtype=np.int64)
    queue = np.empty(nv, dtype=np.int64)
    cur = np.empty(nv, dtype=np.int64)
    path = np.empty(nv, dtype=np.int64)
    total = 0.0
    while _levels(indptr, head, res, s, t, eps, level, queue):
        cur[:] = indptr[:-1]
        depth = 0
        u = s
        while True:  # one blocking flow: advance, retreat, augment
            if u == t:
                f = np.inf
                for k in range(depth):
                    f = min(f, res[path[k]])
                for k in range(depth):
                    res[path[k]] -= f
                    res[rev[path[k]]] += f
                total += f
                depth = 0
                u = s
                continue
            a = cur[u]
            while a < indptr[u + 1] and not (res[a] > eps and level[head[a]] == level[u] + 1):
                a += 1
            cur[u] = a
            if a < indptr[u + 1]:
                path[depth] = a
                depth += 1
                u = head[a]
                continue
            level[u] = -1  # a dead end: retreat
            if depth == 0:
                break
            depth -= 1
            u = head[rev[path[depth]]]
            cur[u] += 1
    return total


def box_feasible_flow(A: sp.spmatrix, b: np.ndarray, cap: np.ndarray) -> np.ndarray | None:
    """``x`` with ``A x = b`` and ``|x_m| <= cap_m`` (module docstring), by maximum flow;
    None when ``A`` is not an incidence-like matrix (one ``+1`` and one ``-1`` per column)
    or no such flow meets the demands up to :data:`MAX_FLOW_RTOL` of their total."""
    A = sp.csc_matrix(A)
    nr, k = A.shape
    if k == 0 or not np.array_equal(np.diff(A.indptr), np.full(k, 2)):
        return None
    vals = A.data.reshape(k, 2)
    rows = A.indices.reshape(k, 2)
    if not np.all(np.sort(vals, axis=1) == [-1.0, 1.0]):
        return None
    plus = np.where(vals[:, 0] > 0, rows[:, 0], rows[:, 1])
    minus = np.where(vals[:, 0] > 0, rows[:, 1], rows[:, 0])
    b = np.asarray(b, dtype=float)
    src, snk = np.flatnonzero(b < 0), np.flatnonzero(b > 0)
    s, t = nr, nr + 1
    # arc 2m and 2m + 1 are opposite: the columns both ways at c, then source and sink arcs
    tail = np.concatenate([np.column_stack([minus, plus]).ravel(),
                           np.column_stack([np.full(src.size, s), src]).ravel(),
                           np.column_stack([snk, np.full(snk.size, t)]).ravel()])
    headv = np.concatenate([np.column_stack([plus, minus]).ravel(),
                            np.column_stack([src, np.full(src.size, s)]).ravel(),
                            np.column_stack([np.full(snk.size, t), snk]).ravel()])
    c = np.asarray(cap, dtype=float)
    res0 = np.concatenate([np.repeat(c, 2),
                           np.column_stack([-b[src], np.zeros(src.size)]).ravel(),
                           np.column_stack([b[snk], np.zeros(snk.size)]).ravel()])
    order = np.argsort(tail, kind="stable")
    pos = np.empty_like(order)
    pos[order] = np.arange(order.size)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(tail, minlength=nr + 2))])
    res = res0[order]
    eps = 1e-13 * max(float(np.abs(res0).max(initial=0.0)), 1e-300)
    flow = _dinic(indptr, headv[order], pos[order ^ 1], res, s, t, eps)
    need = float(b[snk].sum())
    if flow < need - MAX_FLOW_RTOL * max(need, float(-b[src].sum()), 1e-300):
        return None
    return np.clip(c - res[pos[2 * np.arange(k)]], -c, c)
