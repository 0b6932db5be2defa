"""Direct exact solvers of scalar total variation on paths and trees (compiled with numba).

The problem, per coordinate ``j`` (one column of the ``(n, d)`` arrays), over a forest given
by a parent array (``parent[c] = -1`` at the roots):

    minimize_x   sum_i h_i(x_i)  +  sum_{c: parent[c] >= 0} t_c |x_c - x_parent[c]|,
    h_i(x) = q_i x^2 - 2 p_i x + eta_i |x|,       q_i >= 0, eta_i >= 0, t_c >= 0,

with ``p_i = 0`` wherever ``q_i = 0`` (then every ``h_i`` is bounded below and so is the sum).
It is (16) of paper 001 with ``phi = ||.||_1`` on a forest when every node term is a diagonal
quadratic plus ``l1``/``l2`` regularizers (``gtvmodel.solve.direct``).

**Method** (Kolmogorov, Pock and Rolinek, *Total variation on a tree*, SIAM J. Imaging Sci.
2016, Sec. 3; on a path it is the dynamic programming of Johnson, *A dynamic programming
algorithm for the fused lasso and L0-segmentation*, 2013).  Leaves first, every node ``c``
holds the derivative ``F_c'`` of its subtree's value function ``F_c(x) = h_c(x) + sum_{c'
child} m_c'(x)`` -- a nondecreasing piecewise-linear function with jumps -- and sends its
parent the message ``m_c(y) = min_x F_c(x) + t_c |x - y|``, whose derivative is ``F_c'``
clipped to ``[-t_c, t_c]``: the breakpoints beyond the points ``x-_c`` (where ``F_c'``
reaches ``-t_c``) and ``x+_c`` (where it reaches ``t_c``) are removed and the function is
constant beyond them.  At a root ``x_r`` is a zero of ``F_r'``; going back down,
``x_c = clip(x_parent, x-_c, x+_c)`` (exact equality on fused edges).

``F'`` is stored as its line left of every breakpoint (slope, value at an anchor), its line
right of them (in mirrored coordinates ``G'(y) = -F'(-y)``, so that one routine clips both
ends), and its breakpoints (position, change of slope, jump).  The ``l1`` kinks of the
``h_i`` all sit at 0 and are kept as one accumulated jump.  On a path the breakpoints form
a sorted deque (new ones only enter at the ends): O(n).  On a tree the children's
breakpoints are merged: two leftist heaps (min and max, lazy deletion), O(n log n).

**Flows** (:func:`tree_flows`).  With ``g_i in dh_i(x_i)`` and the subtree sums ``sigma_c =
sum_{i in subtree(c)} g_i``, optimality is ``sigma_c in t_c d|.|(x_parent - x_c)`` on every
edge and ``sigma_r = 0`` at the roots.  The admissible subtree sums form intervals
``I_c = dh_c(x_c) + sum_{children} J_c'``, ``J_c = {t_c sign(x_parent - x_c)}`` off fused
edges and ``I_c cap [-t_c, t_c]`` on them (leaves first); roots take 0 and every node splits
its target among its own subgradient and its children's intervals (top down).  The weights
carry rounding, so the conditions can miss by it; at a node that is not "stiff" (no ``q >
0``: a data-less node, whose conjugate is finite only at its subgradients) a fused child
whose fused subtree holds a stiff node takes exactly what the others leave, so that its
conservation holds up to one rounding and the mismatch ends at a stiff node (a certificate
then has nothing to correct at data-less nodes).  Every value is exact up to rounding, so the
node and edge conditions hold to rounding.

The functions are pure (arrays in, arrays out) and know nothing of models.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["forest_order", "tv_path", "tv_tree", "tree_flows", "node_subgradients"]

_NB = {"cache": True, "nogil": True}
_STACK = 256  # > the two right spines of leftist heaps of < 2^62 elements


# ---------------------------------------------------------------- the forest
@numba.njit(**_NB)
def _adjacency(n, heads, tails):
    """CSR adjacency ``(ptr, nbr, eid)`` of the undirected graph: node ``i``'s neighbours
    ``nbr[ptr[i]:ptr[i + 1]]`` through the edges ``eid[ptr[i]:ptr[i + 1]]``."""
    ptr = np.zeros(n + 1, dtype=np.int64)
    for e in range(heads.size):
        ptr[heads[e] + 1] += 1
        ptr[tails[e] + 1] += 1
    ptr = np.cumsum(ptr)
    fill = ptr[:-1].copy()
    nbr = np.empty(2 * heads.size, dtype=np.int64)
    eid = np.empty(2 * heads.size, dtype=np.int64)
    for e in range(heads.size):
        h, t = heads[e], tails[e]
        nbr[fill[h]] = t
        eid[fill[h]] = e
        fill[h] += 1
        nbr[fill[t]] = h
        eid[fill[t]] = e
        fill[t] += 1
    return ptr, nbr, eid


@numba.njit(**_NB)
def _forest_order(n, heads, tails):
    indptr, nbr, eid = _adjacency(n, heads, tails)
    degree = indptr[1:] - indptr[:-1]
    order = np.empty(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    pedge = np.full(n, -1, dtype=np.int64)
    seen = np.zeros(n, dtype=np.bool_)
    write = 0
    read = 0
    cycle = False
    for sweep in range(2):  # roots at nodes of degree <= 1 first (path ends), then any
        for s in range(n):
            if seen[s] or (sweep == 0 and degree[s] > 1):
                continue
            seen[s] = True
            order[write] = s
            write += 1
            while read < write:
                v = order[read]
                read += 1
                for k in range(indptr[v], indptr[v + 1]):
                    w = nbr[k]
                    if eid[k] == pedge[v]:
                        continue
                    if seen[w]:
                        cycle = True
                        continue
                    seen[w] = True
                    parent[w] = v
                    pedge[w] = eid[k]
                    order[write] = w
                    write += 1
    return order, parent, pedge, cycle


def forest_order(n: int, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """``(order, parent, parent_edge, cycle)`` of the graph on nodes ``0..n-1`` with the
    ``(|E|, 2)`` ``edges``: a breadth-first order in which every node follows its parent,
    each component rooted at its first node of degree <= 1 (an end of a path), ``parent`` and
    the row of ``edges`` joining a node to its parent (-1 at roots), and whether an edge closed
    a cycle (then the result is a spanning forest, not the graph).  O(n + |E|)."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    return _forest_order(int(n), np.ascontiguousarray(e[:, 0]), np.ascontiguousarray(e[:, 1]))


# ---------------------------------------------------------------- the dynamic programming
# Breakpoints are stored by id in bz (position), bda (change of slope), bdb (jump).  Side 0
# reads them left to right, side 1 right to left in mirrored coordinates (-z, -da, db).
# ``ends`` (int64[2]): on a path the deque's (head, tail) (ids head..tail-1, sorted by z);
# on a tree the roots of the min-heap (side 0) and the max-heap (side 1) of leftist heaps
# whose links are the rows of ``H``: H[s] left child, H[2 + s] right child, H[4 + s] rank,
# H[6] the merge's stack.
#
# The dynamic program runs in one compiled function without numba's reference counting
# (``_RAW``: ``_nrt=False``, so no array is allocated there: ``_tv_forest`` allocates and calls
# it once), its helpers inlined into it at numba's IR level (``_INLINE``).  With reference
# counting every helper call, inlined or not, updates the counts of its array arguments: the
# path algorithm ran 4.8-7.8x slower split that way (benchmarks/RESULTS.md).
_RAW = {**_NB, "_nrt": False}
_INLINE = {**_RAW, "inline": "always"}


@numba.njit(**_NB)
def _heap_merge(s, a, b, bz, H):
    """Merge the leftist heaps of side ``s`` (min of ``z``, side 1: of ``-z``) rooted at
    ``a`` and ``b`` (-1: empty); returns the root."""
    if a < 0:
        return b
    if b < 0:
        return a
    sign = 1.0 if s == 0 else -1.0
    top = 0
    while a >= 0 and b >= 0:
        if sign * bz[b] < sign * bz[a]:
            a, b = b, a
        H[6, top] = a
        top += 1
        a = H[2 + s, a]
    r = a if a >= 0 else b
    while top > 0:
        top -= 1
        u = H[6, top]
        left = H[s, u]
        if left < 0 or H[4 + s, left] < H[4 + s, r]:
            H[s, u] = r
            H[2 + s, u] = left
        else:
            H[2 + s, u] = r
        right = H[2 + s, u]
        H[4 + s, u] = (H[4 + s, right] if right >= 0 else 0) + 1
        r = u
    return r


@numba.njit(**_INLINE)
def _front(s, ends, alive, H, bz, heap):
    """The id of side ``s``'s first breakpoint (-1: none); on a tree the dead tops of its
    heap (popped from the other side) are removed first."""
    i = -1
    if heap:
        i = ends[s]
        while i >= 0 and not alive[i]:
            i = _heap_merge(s, H[s, i], H[2 + s, i], bz, H)
        ends[s] = i
    elif ends[0] < ends[1]:
        i = ends[0] if s == 0 else ends[1] - 1
    return i


@numba.njit(**_INLINE)
def _pop(s, i, ends, alive, H, bz, bda, bdb, heap):
    """Removes side ``s``'s first breakpoint ``i``; returns its change of slope and jump in
    side ``s``'s coordinates."""
    da = bda[i] if s == 0 else -bda[i]
    db = bdb[i]
    if heap:
        alive[i] = False
        ends[s] = _heap_merge(s, H[s, i], H[2 + s, i], bz, H)
    elif s == 0:
        ends[0] += 1
    else:
        ends[1] -= 1
    return da, db


@numba.njit(**_INLINE)
def _clip(s, level, zk, line, crossing, ends, alive, H, bz, bda, bdb, heap):
    """Clips side ``s`` of ``F'`` from below at ``level`` (side 0: ``F' >= -t``, side 1:
    ``-F'(-y) >= -t``): pops the breakpoints (and the accumulated ``l1`` kink ``zk`` at 0)
    before the crossing, writes the side's new line and its crossing point ``crossing[s]``;
    returns ``zk`` and the new first breakpoint ``(push, position, change of slope, jump)``."""
    a, v, z0 = line[s, 0], line[s, 1], line[s, 2]
    last = -np.inf
    push, py, pa, pb = False, 0.0, 0.0, 0.0
    while True:
        i = _front(s, ends, alive, H, bz, heap)
        has = i >= 0
        y = 0.0
        if has:
            y = bz[i] if s == 0 else -bz[i]
        kink = zk > 0.0 and (not has or y > 0.0)
        if kink:
            y = 0.0
            has = True
        fm = v + a * (y - z0) if has else 0.0  # F'(y-)
        if not has or fm >= level:  # the crossing is on the line before y
            if a > 0.0:
                xc = min(max(z0 + (level - v) / a, last), y if has else np.inf)
                push, py, pa, pb = True, xc, a, 0.0
                crossing[s] = xc
                a, v, z0 = 0.0, level, xc
            elif v < level:  # only by rounding (F' -> level at +inf)
                crossing[s] = last
                a, v = 0.0, level
                z0 = last if last > -np.inf else z0
            else:  # F' >= level everywhere: nothing changes
                crossing[s] = -np.inf
            break
        if kink:
            da, db = 0.0, zk
            zk = 0.0
        else:  # pop breakpoint i
            da, db = _pop(s, i, ends, alive, H, bz, bda, bdb, heap)
        fp = fm + db  # F'(y+)
        if fp >= level:  # the crossing is at the jump at y
            push, py, pa, pb = True, y, a + da, fp - level
            crossing[s] = y
            a, v, z0 = 0.0, level, y
            break
        a, v, z0, last = a + da, fp, y, y
    line[s, 0], line[s, 1], line[s, 2] = a, v, z0
    return zk, push, py, pa, pb


@numba.njit(**_INLINE)
def _push(s, py, pa, pb, count, ends, alive, H, bz, bda, bdb, heap):
    """Adds the breakpoint ``(py, pa, pb)`` (side ``s``'s coordinates) as side ``s``'s
    first; returns the next free id on a tree (``count``)."""
    if heap:
        i = count
        count += 1
    elif s == 0:
        ends[0] -= 1
        i = ends[0]
    else:
        i = ends[1]
        ends[1] += 1
    bz[i] = py if s == 0 else -py
    bda[i] = pa if s == 0 else -pa
    bdb[i] = pb
    if heap:
        alive[i] = True
        for side in range(2):
            H[side, i] = H[2 + side, i] = -1
            H[4 + side, i] = 1
            ends[side] = _heap_merge(side, ends[side], i, bz, H)
    return count


@numba.njit(**_INLINE)
def _add_term(line, q, p, eta):
    """Adds ``h_c'(x) = 2 q x - 2 p + eta sign(x)`` to both sides' lines: slope ``2q``, value
    ``-2p - eta`` at 0 (side 0), ``2p - eta`` at 0 (side 1: ``-h_c'(-y)``); the jump ``2 eta``
    at 0 is the caller's."""
    two_q = 2.0 * q
    for s in range(2):
        at0 = (-2.0 if s == 0 else 2.0) * p - eta
        line[s, 1] += at0 + two_q * line[s, 2]
        line[s, 0] += two_q


@numba.njit(**_INLINE)
def _send(c, pc, zk, line, roots, lines, kinks, ends, bz, H):
    """On a tree: the message of node ``c`` (its clipped ``F'``) joins its parent ``pc``'s."""
    for s in range(2):
        roots[pc, s] = _heap_merge(s, roots[pc, s], ends[s], bz, H)
        lines[pc, s, 1] += line[s, 1] + line[s, 0] * (lines[pc, s, 2] - line[s, 2])
        lines[pc, s, 0] += line[s, 0]
    kinks[pc] += zk


@numba.njit(**_RAW)
def _forest_dp(order, parent, t, q, p, eta, heap, x, bounds, bz, bda, bdb, alive, H, ends,
               line, crossing, roots, lines, kinks):
    """The dynamic program of :func:`_tv_forest` into its arrays (``x``: the minimizer)."""
    n, d = q.shape
    for j in range(d):
        count = 0
        zk = 0.0  # the jump of the accumulated l1 kinks at 0
        ends[0] = ends[1] = n + 1
        line[:] = 0.0
        if heap:
            roots[:] = -1
            lines[:] = 0.0
            kinks[:] = 0.0
        for k in range(n - 1, -1, -1):
            c = order[k]
            pc = parent[c]
            if heap:
                ends[0], ends[1] = roots[c, 0], roots[c, 1]
                for s in range(2):  # (no slice copy: it may allocate)
                    for f in range(3):
                        line[s, f] = lines[c, s, f]
                zk = kinks[c]
            _add_term(line, q[c, j], p[c, j], eta[c])
            zk += 2.0 * eta[c]
            level = -(t[c] if pc >= 0 else 0.0)
            for s in range(2):  # clip side s from below at level: F' >= -t, then -F' >= -t
                zk, push, py, pa, pb = _clip(s, level, zk, line, crossing, ends, alive, H, bz,
                                             bda, bdb, heap)
                if push:  # the new first breakpoint of side s
                    count = _push(s, py, pa, pb, count, ends, alive, H, bz, bda, bdb, heap)
            lo = crossing[0]
            hi = max(-crossing[1], lo)
            if pc < 0:  # a root: the zero of F' nearest to 0; the next path starts afresh
                x[c, j] = min(max(0.0, lo), hi) + 0.0  # no -0.0
                ends[0] = ends[1] = n + 1
                line[:] = 0.0
                zk = 0.0
                continue
            bounds[c, 0], bounds[c, 1] = lo, hi
            if heap:  # the message joins the parent's F'
                _send(c, pc, zk, line, roots, lines, kinks, ends, bz, H)
        for k in range(n):
            c = order[k]
            if parent[c] >= 0:
                x[c, j] = min(max(x[parent[c], j], bounds[c, 0]), bounds[c, 1]) + 0.0


@numba.njit(**_NB)
def _tv_forest(order, parent, t, q, p, eta, heap):
    """The minimizer of the module's problem on a forest (``heap``: a tree's leftist heaps,
    else a path's deque): allocates the work arrays and runs :func:`_forest_dp`."""
    n, d = q.shape
    x = np.zeros((n, d))
    bounds = np.empty((n, 2))
    cap = max(2 * n + 4, _STACK)
    bz = np.empty(cap)
    bda = np.empty(cap)
    bdb = np.empty(cap)
    alive = np.zeros(cap if heap else 0, dtype=np.bool_)
    H = np.empty((7, cap if heap else _STACK), dtype=np.int64)
    ends = np.empty(2, dtype=np.int64)
    line = np.zeros((2, 3))  # per side: slope, value, anchor of the line before every breakpoint
    crossing = np.empty(2)
    m = n if heap else 0  # per-node states of the tree (children merged into parents)
    roots = np.empty((m, 2), dtype=np.int64)
    lines = np.empty((m, 2, 3))
    kinks = np.empty(m)
    _forest_dp(order, parent, t, q, p, eta, heap, x, bounds, bz, bda, bdb, alive, H, ends, line,
               crossing, roots, lines, kinks)
    return x


@numba.njit(**_NB)
def _condat_paths(order, parent, t, q, p):
    """Condat's direct algorithm (*A direct algorithm for 1D total variation denoising*,
    IEEE SPL 2013), weighted, on every path of a forest of paths (``order`` from each root
    on; ``q > 0``, no ``l1``): ``argmin sum_k q_k (x_k - p_k / q_k)^2 + sum_k lam_k |x_{k+1}
    - x_k|`` per path and coordinate, ``lam_k = t`` of the edge joining the ``k``-th and the
    next node.  A segment of value ``v`` starting at ``k0`` carries the flow ``u_k =
    u_{k0-1} + sum_{i=k0..k} 2 (p_i - q_i v)``, which must stay in ``[-lam_k, lam_k]`` and
    end at ``u = 0`` at the path's end; ``vmin``, ``vmax`` bound ``v`` and ``umin``,
    ``umax`` are ``u_k`` there.  When no ``v`` is left the segment closes with value
    ``vmin`` at ``kminus`` (the last position where ``u`` met ``+lam`` at ``vmin``; the
    jump goes down) or ``vmax`` at ``kplus``, and the next starts after it with ``u =
    +lam`` or ``-lam`` (the paper's Fig. 1, restarting instead of its special right-end
    steps).  The data are read in place (one output array, as prox-tv)."""
    n, d = q.shape
    x = np.empty((n, d))
    for j in range(d):
        first = 0
        while first < n:
            m = 1
            while first + m < n and parent[order[first + m]] >= 0:
                m += 1
            k0 = 0
            start = 0.0  # u_{k0-1}
            while k0 < m:
                c = order[first + k0]
                cap = t[order[first + k0 + 1]] if k0 < m - 1 else 0.0
                vmin = (p[c, j] + 0.5 * (start - cap)) / q[c, j]
                vmax = (p[c, j] + 0.5 * (start + cap)) / q[c, j]
                wsum = 2.0 * q[c, j]
                umin, umax = cap, -cap
                k = kminus = kplus = k0
                close, value = m - 1, vmin
                while k < m - 1:
                    nxt = k + 1
                    cn = order[first + nxt]
                    bound = t[order[first + nxt + 1]] if nxt < m - 1 else 0.0
                    umin += 2.0 * (p[cn, j] - q[cn, j] * vmin)
                    umax += 2.0 * (p[cn, j] - q[cn, j] * vmax)
                    if umin < -bound:  # below vmin: the segment ends at kminus, going down
                        close, value = kminus, vmin
                        start = t[order[first + kminus + 1]]
                        break
                    if umax > bound:  # above vmax: it ends at kplus, going up
                        close, value = kplus, vmax
                        start = -t[order[first + kplus + 1]]
                        break
                    k = nxt
                    wsum += 2.0 * q[cn, j]
                    if umin >= bound:
                        vmin += (umin - bound) / wsum
                        umin = bound
                        kminus = k
                    if umax <= -bound:
                        vmax += (umax + bound) / wsum
                        umax = -bound
                        kplus = k
                    value = vmin
                for i in range(k0, close + 1):
                    x[order[first + i], j] = value + 0.0  # no -0.0
                k0 = close + 1
            first += m
    return x


@numba.njit(**_NB)
def _condat_uniform(parent, t, q, p, eta):
    """``(x, ok)``: :func:`_condat_paths` on one path in natural order (node ``k`` the
    ``k``-th, ``parent[k] = k - 1``) with the same ``q_j > 0`` at every node, ``eta = 0`` and
    the same edge weight ``lam = t[1]``.  Its loop reads ``p`` alone (prox-tv's working set;
    the general kernel also reads ``order``, ``t`` and ``q``, 4x the memory, which measured
    1.4x slower in its fastest runs and 4x in the median under load); the assumptions are
    verified as ``x`` is written, every array read once (a separate pass over ``parent``,
    ``t``, ``q``, ``eta`` first cost 0.14 ms CPU of 2.3 ms on a 100,000-node path).  ``ok``
    False (at the first node that breaks them): ``x`` is not the answer, the caller takes the
    general kernels."""
    n, d = p.shape
    x = np.empty((n, d))
    lam = t[1] if n > 1 else 0.0
    for j in range(d):
        qj = q[0, j] if n else 1.0
        if not qj > 0.0:
            return x, False
        two_q = 2.0 * qj
        k0 = 0
        start = 0.0  # u_{k0-1}
        while k0 < n:
            cap = lam if k0 < n - 1 else 0.0
            vmin = (p[k0, j] + 0.5 * (start - cap)) / qj
            vmax = (p[k0, j] + 0.5 * (start + cap)) / qj
            wsum = two_q
            umin, umax = cap, -cap
            k = kminus = kplus = k0
            close, value = n - 1, vmin
            while k < n - 1:
                nxt = k + 1
                bound = lam if nxt < n - 1 else 0.0
                pn = p[nxt, j]
                umin += 2.0 * (pn - qj * vmin)
                umax += 2.0 * (pn - qj * vmax)
                if umin < -bound:  # below vmin: the segment ends at kminus, going down
                    close, value = kminus, vmin
                    start = lam
                    break
                if umax > bound:  # above vmax: it ends at kplus, going up
                    close, value = kplus, vmax
                    start = -lam
                    break
                k = nxt
                wsum += two_q
                if umin >= bound:
                    vmin += (umin - bound) / wsum
                    umin = bound
                    kminus = k
                if umax <= -bound:
                    vmax += (umax + bound) / wsum
                    umax = -bound
                    kplus = k
                value = vmin
            ok = True
            for i in range(k0, close + 1):
                x[i, j] = value + 0.0  # no -0.0
                ok &= q[i, j] == qj and eta[i] == 0.0 and parent[i] == i - 1 and (
                    i == 0 or t[i] == lam)
            if not ok:
                return x, False
            k0 = close + 1
    return x, True


@numba.njit(**_NB)
def _condat_applies(q, eta):
    """Whether Condat's algorithm applies: ``q > 0`` and ``eta = 0`` everywhere."""
    n, d = q.shape
    for i in range(n):
        if eta[i] != 0.0:
            return False
        for j in range(d):
            if not q[i, j] > 0.0:
                return False
    return True


def _check(order, parent, t, q, p, eta):
    q = np.ascontiguousarray(q, dtype=float)
    n = q.shape[0]
    p = np.ascontiguousarray(np.broadcast_to(np.asarray(p, dtype=float), q.shape))
    eta = np.ascontiguousarray(np.broadcast_to(np.asarray(eta, dtype=float), (n,)))
    return (np.ascontiguousarray(order, dtype=np.int64),
            np.ascontiguousarray(parent, dtype=np.int64),
            np.ascontiguousarray(np.broadcast_to(np.asarray(t, dtype=float), (n,))), q, p, eta)


def tv_path(order: np.ndarray, parent: np.ndarray, t: np.ndarray, q: np.ndarray,
            p: np.ndarray, eta: np.ndarray, method: str = "auto") -> np.ndarray:
    """The minimizer ``x`` (``(n, d)``) of the module's problem on a forest of paths.

    ``method``: ``"condat"`` (:func:`_condat_paths`, when ``q > 0`` and ``eta = 0``; O(n) in
    practice, O(n^2) at worst; :func:`_condat_uniform` on one path in natural order with one
    edge weight and one ``q_j`` per coordinate), ``"dp"`` (the dynamic programming on a
    deque, O(n), any terms) or ``"auto"`` (Condat's where it applies).

    ``order`` lists every path from its root (``parent = -1``) to its other end, one path
    after the other (:func:`forest_order` on a forest of paths), ``parent[c]`` is the
    node before ``c`` on its path, ``t[c] >= 0`` the weight of the edge ``(c, parent[c])``;
    ``q``, ``p`` are ``(n, d)``, ``eta`` is ``(n,)``.  Where the minimizer is not unique
    (``q = 0`` on a whole fused group) the point nearest to 0 is taken at the roots.

    >>> import numpy as np
    >>> order, parent = np.arange(3), np.array([-1, 0, 1])
    >>> a = np.array([[1.0], [0.0], [3.0]])   # sum (x_i - a_i)^2 + 1 * TV(x)
    >>> tv_path(order, parent, np.full(3, 1.0), np.ones((3, 1)), a, np.zeros(3)).ravel()
    array([0.75, 0.75, 2.5 ])
    """
    args = _check(order, parent, t, q, p, eta)
    if method != "dp":  # measured faster; the uniform kernel verifies its case as it goes
        x, uniform = _condat_uniform(*args[1:])
        if uniform:
            return x
    condat = _condat_applies(args[3], args[5])
    if method == "condat" and not condat:
        raise ValueError("tv_path: Condat's algorithm needs q > 0 and eta = 0")
    if method == "condat" or (method == "auto" and condat):
        return _condat_paths(*args[:5])
    return _tv_forest(*args, False)


def tv_tree(order: np.ndarray, parent: np.ndarray, t: np.ndarray, q: np.ndarray,
            p: np.ndarray, eta: np.ndarray) -> np.ndarray:
    """The minimizer ``x`` (``(n, d)``) of the module's problem on a forest, O(n log n d).

    ``order`` is any order in which every node follows its ``parent`` (-1 at roots;
    :func:`forest_order`), ``t[c] >= 0`` the weight of the edge ``(c, parent[c])``; ``q``,
    ``p`` are ``(n, d)``, ``eta`` is ``(n,)``.  Where the minimizer is not unique the point
    nearest to 0 is taken at the roots.

    >>> import numpy as np
    >>> order, parent = np.arange(4), np.array([-1, 0, 0, 0])  # a star around node 0
    >>> a = np.array([[0.0], [3.0], [3.0], [-3.0]])
    >>> tv_tree(order, parent, np.full(4, 1.0), np.ones((4, 1)), a, np.zeros(4)).ravel()
    array([ 0.5,  2.5,  2.5, -2.5])
    """
    return _tv_forest(*_check(order, parent, t, q, p, eta), True)


@numba.njit(**_NB)
def _subgradients(q, p, eta, x):
    n, d = q.shape
    lo = np.empty((n, d))
    hi = np.empty((n, d))
    for i in range(n):
        for j in range(d):
            g = 2.0 * (q[i, j] * x[i, j] - p[i, j])
            if x[i, j] > 0.0:
                lo[i, j] = hi[i, j] = g + eta[i]
            elif x[i, j] < 0.0:
                lo[i, j] = hi[i, j] = g - eta[i]
            else:
                lo[i, j] = g - eta[i]
                hi[i, j] = g + eta[i]
    return lo, hi


def node_subgradients(q: np.ndarray, p: np.ndarray, eta: np.ndarray,
                      x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)``: the interval ``dh_i(x_ij) = 2 (q_ij x_ij - p_ij) + eta_i d|x_ij|``,
    ``(n, d)`` each."""
    q = np.ascontiguousarray(q, dtype=float)
    return _subgradients(q, np.ascontiguousarray(np.broadcast_to(p, q.shape), dtype=float),
                         np.ascontiguousarray(eta, dtype=float),
                         np.ascontiguousarray(x, dtype=float))


@numba.njit(**_NB)
def _children(order, parent):
    """``(ptr, kids)``: the children of node ``c`` are ``kids[ptr[c]:ptr[c + 1]]``, in
    ``order``."""
    n = order.size
    ptr = np.zeros(n + 1, dtype=np.int64)
    for k in range(n):
        if parent[order[k]] >= 0:
            ptr[parent[order[k]] + 1] += 1
    ptr = np.cumsum(ptr)
    fill = ptr[:-1].copy()
    kids = np.empty(max(ptr[-1], 1), dtype=np.int64)
    for k in range(n):
        c = order[k]
        if parent[c] >= 0:
            kids[fill[parent[c]]] = c
            fill[parent[c]] += 1
    return ptr, kids


@numba.njit(**_NB)
def _tree_flows(order, parent, t, glo, ghi, x, stiff):
    n, d = x.shape
    sigma = np.zeros((n, d))
    acc_lo = np.empty(n)
    acc_hi = np.empty(n)
    jl = np.empty(n)
    jh = np.empty(n)
    target = np.empty(n)
    soft = np.empty(n, dtype=np.bool_)  # a node of the fused subtree below has stiff[i]
    ptr, kids = _children(order, parent)
    for j in range(d):
        acc_lo[:] = glo[:, j]
        acc_hi[:] = ghi[:, j]
        soft[:] = stiff[:, j]
        for k in range(n - 1, -1, -1):  # leaves first: the admissible subtree sums
            c = order[k]
            pc = parent[c]
            if pc < 0:
                continue
            if x[c, j] < x[pc, j]:
                jl[c] = jh[c] = t[c]
            elif x[c, j] > x[pc, j]:
                jl[c] = jh[c] = -t[c]
            else:
                jl[c] = max(acc_lo[c], -t[c])
                jh[c] = min(acc_hi[c], t[c])
                if jl[c] > jh[c]:  # empty only by rounding: the nearer capacity
                    jl[c] = jh[c] = t[c] if acc_lo[c] > t[c] else -t[c]
                soft[pc] |= soft[c]
            acc_lo[pc] += jl[c]
            acc_hi[pc] += jh[c]
        for k in range(n):  # roots first: split each node's target
            c = order[k]
            if parent[c] < 0:
                target[c] = 0.0
            rem = target[c] - acc_lo[c]
            own = min(max(rem, 0.0), ghi[c, j] - glo[c, j])
            rem -= own
            absorber = -1
            for m in range(ptr[c], ptr[c + 1]):
                ch = kids[m]
                take = min(max(rem, 0.0), jh[ch] - jl[ch])
                rem -= take
                target[ch] = jl[ch] + take
                if soft[ch] and x[ch, j] == x[c, j]:
                    absorber = ch
            if not stiff[c, j] and absorber >= 0:
                # what rounding leaves over goes to a fused child whose fused subtree has a
                # stiff node (its subgradient may move by it: its conjugate is finite);
                # exactly what the others leave, so that conservation at c holds up to one
                # rounding
                rest = glo[c, j] + own
                for m in range(ptr[c], ptr[c + 1]):
                    if kids[m] != absorber:
                        rest += target[kids[m]]
                target[absorber] = min(max(target[c] - rest, -t[absorber]), t[absorber])
        for k in range(n):
            c = order[k]
            if parent[c] >= 0:
                sigma[c, j] = target[c]
    return sigma


def tree_flows(order: np.ndarray, parent: np.ndarray, t: np.ndarray, glo: np.ndarray,
               ghi: np.ndarray, x: np.ndarray, stiff: np.ndarray | None = None) -> np.ndarray:
    """``sigma`` (``(n, d)``): for every non-root ``c`` the sum over its subtree of node
    subgradients ``g_i in [glo_i, ghi_i]`` (:func:`node_subgradients` at the minimizer
    ``x``) such that ``sigma_c in t_c d|.|(x_parent - x_c)`` on every edge and the sum is 0
    over every tree (module docstring); 0 at roots.  ``stiff`` (``(n, d)`` booleans, default
    none): nodes whose subgradient may absorb what rounding leaves unbalanced at a node that
    is not stiff (nodes with ``q > 0``, whose conjugates are finite everywhere).

    >>> import numpy as np
    >>> order, parent, t = np.arange(3), np.array([-1, 0, 1]), np.full(3, 1.0)
    >>> x = np.array([[0.75], [0.75], [2.5]])
    >>> lo, hi = node_subgradients(np.ones((3, 1)), np.array([[1.0], [0.0], [3.0]]),
    ...                            np.zeros(3), x)
    >>> tree_flows(order, parent, t, lo, hi, x).ravel()
    array([ 0. ,  0.5, -1. ])
    """
    return _tree_flows(np.ascontiguousarray(order, dtype=np.int64),
                       np.ascontiguousarray(parent, dtype=np.int64),
                       np.ascontiguousarray(t, dtype=float),
                       np.ascontiguousarray(glo, dtype=float),
                       np.ascontiguousarray(ghi, dtype=float),
                       np.ascontiguousarray(x, dtype=float),
                       np.ascontiguousarray(np.broadcast_to(
                           False if stiff is None else stiff, np.shape(x)), dtype=np.bool_))
