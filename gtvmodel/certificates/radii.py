"""Certified radii ``R_i`` (docs/conventions.md): per-node bounds on ``||w*_i||_inf`` from the
level set ``P(w*) <= P(W)``, anchored at coercive nodes and propagated along edges."""


from __future__ import annotations

import math
from typing import Any

import cvxpy as cp
import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
from scipy.optimize import linprog

from .._solver import run_solver, separable_gap_tolerance
from ..declaration import ModelDeclaration, components
from ..duality.conic_bounds import conjugate_bound
from ..errors import GTVError, SolverError
from .kinds import EPS, node_kinds

__all__ = ["Radii", "certified_radii", "candidate_radii", "radius_assumption"]


class Radii:
    """Per-node radii computed on first use: they cost a Dijkstra and possibly LPs, and most
    certificates (rounding-level residuals only) never need them."""

    def __init__(self, n: int, compute: Any):
        self.n, self._compute = n, compute
        self.value: np.ndarray | None = None

    def __call__(self) -> np.ndarray:
        if self.value is None:
            r = self._compute() if callable(self._compute) else self._compute
            self.value = np.broadcast_to(np.asarray(r, dtype=float), (self.n,)).copy()
        return self.value

def _upper_bound_point(model: ModelDeclaration, W: np.ndarray,
                       viol: np.ndarray) -> np.ndarray | None:
    """A point with ``P(point) >= P*`` for the level-set radii: ``W`` itself when every node
    constraint holds exactly, else ``W`` with each violating row (violations of a solver's
    rounding size) projected onto its single library constraint, or moved towards a strictly
    interior point of its constraints (:func:`_interior_point`) until every constraint holds
    *exactly* (convexity: the segment enters the set); None when neither works."""
    bad = np.flatnonzero(viol > 0)
    if bad.size == 0:
        return W
    Wp = W.copy()
    for i in bad:  # only the (few) rows that violate a constraint by rounding
        Wp[i] = _feasible_row(model, int(i), W[i])
        if not np.isfinite(Wp[i]).all():
            return None
    return Wp

def _feasible_row(model: ModelDeclaration, i: int, w: np.ndarray) -> np.ndarray:
    """An exactly feasible point of node ``i``'s constraints near ``w`` (NaN if none found)."""
    cons = model.constraints_at(i)
    rows = np.array(w, dtype=float)[None, :]

    def exact(z: np.ndarray) -> bool:
        return all(c.violation(z) == 0.0 for c in cons)

    if len(cons) == 1:
        try:
            z = np.asarray(cons[0].project(rows[0]), dtype=float)
            if exact(z):
                return z
        except GTVError:
            pass
    inner = _interior_point(model, i)
    if inner is not None:
        for theta in (1e-12, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2, 0.5, 1.0):
            z = rows[0] + theta * (inner - rows[0])
            if exact(z):
                return z
    return np.full(model.dim, np.nan)

def _interior_point(model: ModelDeclaration, i: int) -> np.ndarray | None:
    """A strictly feasible point of node ``i``'s constraints: maximize a common slack ``t <=
    1`` added to every inequality (one small CVXPY problem; None without an interior)."""
    x = model.var(model.nodes[i])
    t = cp.Variable()
    cons: list[cp.Constraint] = [t <= 1.0]
    for c in model.constraints_at(i):
        for con in c.constraints(x):
            if not isinstance(con, cp.constraints.Inequality):
                return None
            lhs, rhs = con.args
            cons.append(lhs + t <= rhs)
    prob = cp.Problem(cp.Maximize(t), cons)
    old = x.value  # the node's variable is the user's: leave its value as it was
    try:
        run_solver(prob, None, {}, False, True, f"certificate (interior point of node {i})")
        ok = t.value is not None and float(t.value) > 0 and x.value is not None
        point = np.asarray(x.value, dtype=float).reshape(model.dim) if ok else None
    except SolverError:
        point = None
    finally:
        x.value = old
    return point

def _loss_lower_bounds(model: ModelDeclaration, solver: str | None
                       ) -> tuple[np.ndarray, float]:
    """``(l, tau)`` with ``sum_{j in J} l_j - tau <= sum_{j in J} inf h_j`` for every set ``J``
    of nodes: ``l_j = min(0, inf L_j)`` from the losses' facts for library losses (0: all are
    ``>= 0``; :func:`~gtvmodel.certificates.kinds.loss_lower_bounds`), and ``-h_j*(0)`` for
    symbolic nodes from a certified bound of their conjugate at ``s = 0``
    (:func:`~gtvmodel.duality.conic_bounds.conjugate_bound`, which rests on no solver tolerance,
    so ``tau = 0``).  Its demand shift is charged to first order at the solver's maximizer,
    ``sum_j (|shift_j| + rounding_j) max(1, |w_j|)`` (no radius exists yet: these bounds make
    the radii); ``l_j = -inf`` where no bound exists.  Cached."""
    cached = model.cache.get("cert_lower")
    if cached is not None:
        return cached
    d = model.dim
    kinds = node_kinds(model)
    low = kinds.loss_lower.copy()
    for i in kinds.conic:
        try:
            bound = conjugate_bound(model, int(i), np.zeros(d))
        except GTVError:
            low[i] = -np.inf
            continue
        if bound.point is None or not np.isfinite(bound.value):
            low[i] = -np.inf
            continue
        scale = np.maximum(1.0, np.abs(bound.point))
        charge = float((np.abs(bound.shift) + bound.shift_rounding) @ scale)
        low[i] = -(bound.value + charge) if np.isfinite(charge) else -np.inf
    low = np.where(np.isnan(low), -np.inf, low)
    model.cache.put("cert_lower", (low, 0.0))
    return low, 0.0

def certified_radii(model: ModelDeclaration, upper: float, solver: str | None = None) -> np.ndarray:
    """Per-node radii ``R_i`` with ``||w*_i||_inf <= R_i`` for some minimizer ``w*``
    (docs/conventions.md: residual charges need them), from the level set ``P(w*) <= upper``
    (``upper >= P*``).

    Every node term is bounded below (:func:`_loss_lower_bounds`, penalties are ``>= 0``), so
    at a minimizer ``h_i(w*_i) <= B_i = upper - sum_{j != i} l_j + tau`` and each edge term
    ``lambda A_e phi(w*_{e+} - w*_{e-}) <= B = upper - sum_j l_j + tau``.  Coercive nodes give
    *anchor* radii (``l2``: ``sqrt(B_i/kappa)``, ``l1``: ``B_i/eta``, quadratic and data-fit
    losses: :meth:`~gtvmodel.terms.losses.LossBatch.sublevel_radii`, bounded constraints), each edge
    a length ``||w_{e+} - w_{e-}||_inf <= ell_e`` (the penalty's ``sublevel_radius``), and
    ``R_i = min_k (r_k + dist(k, i))`` by one multi-source Dijkstra.  A connected component
    in which no node has a loss, regularizer or constraint has ``w* = 0`` among its minimizers
    (its part of the objective is ``>= 0`` and ``0`` at ``w = 0``): ``R_i = 0`` there.  Nodes
    that no anchor reaches get ``inf``.
    """
    n = model.num_nodes
    st = model.structure()
    levels = _levels(model, upper, solver)
    if levels is None:
        return np.full(n, np.inf)
    slack, level = levels
    anchor, active = _node_anchors(model, level)
    lengths = _edge_lengths(model, slack)
    E = model.edges
    fin = np.isfinite(lengths)
    ncomp, comp = ((st.component_count, st.components) if fin.all()
                   else components(n, E[fin]))
    passive = np.bincount(comp, weights=active.astype(float), minlength=ncomp) == 0
    anchor[passive[comp]] = 0.0
    # one centre per component, pooled over the component's data (below)
    centres = np.unique(comp, return_index=True)[1]
    to_centre = _multi_source(n, E[fin], lengths[fin], centres, np.zeros(centres.size))
    symmetric = _symmetric_components(model, level, active, comp, ncomp)
    _pooled_anchors(st, level, comp, ncomp, centres, to_centre, anchor, model.dim, symmetric)
    _polyhedral_anchors(model, level, comp, centres, to_centre, anchor)
    _conic_anchors(model, level, comp, anchor)
    src = np.flatnonzero(np.isfinite(anchor))
    if src.size == 0:
        return np.full(n, np.inf)
    return _multi_source(n, E[fin], lengths[fin], src, anchor[src])


def _levels(model: ModelDeclaration, upper: float, solver: str | None
            ) -> tuple[float, np.ndarray] | None:
    """``(B, [B_i])``: the bound ``B = upper - sum_j l_j + tau`` of every edge term and
    ``B_i = B + l_i`` of node ``i``'s term at a minimizer, inflated by their rounding; None
    when ``upper`` or a lower bound is not finite."""
    low, tau = _loss_lower_bounds(model, solver)
    total = math.fsum(low) if np.isfinite(low).all() else -np.inf
    if not np.isfinite(upper) or not np.isfinite(total):
        return None
    slack = max(upper - total, 0.0) + tau
    slack = slack * (1 + 1e-12) + 8 * EPS * (abs(upper) + np.abs(low).sum())
    return slack, slack + low


def _node_anchors(model: ModelDeclaration, level: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(anchor, active)``: the radii of the coercive nodes' own sublevel sets (``l2``:
    ``sqrt(B_i/kappa)``, ``l1``: ``B_i/eta``, the batches' ``sublevel_radii``, bounded
    constraints; ``inf`` elsewhere) and the mask of nodes with a loss, regularizer or
    constraint."""
    n, d = model.num_nodes, model.dim
    st = model.structure()
    anchor = np.full(n, np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        anchor = np.minimum(anchor, np.where(st.l2 > 0, np.sqrt(level / st.l2), np.inf))
        anchor = np.minimum(anchor, np.where(st.l1 > 0, level / st.l1, np.inf))
    for b in st.batches:
        anchor[b.nodes] = np.minimum(anchor[b.nodes], b.sublevel_radii(level))
    active = np.zeros(n, dtype=bool)
    active[st.l1 > 0] = active[st.l2 > 0] = True
    for b in st.batches:
        if b.has_data:
            active[b.nodes] = True
    active[node_kinds(model).conic] = True
    for i in st.constrained:
        active[i] = True
        anchor[i] = min(anchor[i], min(c.inf_radius(d) for c in model.constraints_at(i)))
    return anchor, active


def _edge_lengths(model: ModelDeclaration, slack: float) -> np.ndarray:
    """``ell_e >= ||w*_{e+} - w*_{e-}||_inf`` from ``lambda A_e phi(v_e) <= B`` (the penalty's
    ``sublevel_radius``; ``inf`` without edges or with ``lambda = 0``)."""
    if model.num_edges == 0 or model.lam == 0:
        return np.full(model.num_edges, np.inf)
    return model.penalty.sublevel_radius(slack, model.capacities)


def _symmetric_components(model: ModelDeclaration, level: np.ndarray, active: np.ndarray,
                          comp: np.ndarray, ncomp: int) -> np.ndarray:
    """Components whose objective is invariant under a common shift in the null space of
    their data: every active node is an unconstrained, unregularized data-fit node with
    growing rows (:func:`_pooled_anchors`)."""
    st = model.structure()
    plain = np.zeros(model.num_nodes, dtype=bool)
    for b in st.batches:
        g = b.growth_pieces(level)
        if g is not None:
            plain[b.nodes[np.isfinite(g["b"])]] = True
    plain &= (st.l1 == 0) & (st.l2 == 0)
    plain[st.constrained] = False
    return np.bincount(comp, weights=(active & ~plain).astype(float), minlength=ncomp) == 0


#: At most this many LPs (2 d per component) for the polyhedral anchors of one certificate.
_MAX_ANCHOR_LPS = 400

def _polyhedral_anchors(model: ModelDeclaration, level: np.ndarray, comp: np.ndarray,
                        centres: np.ndarray, to_centre: np.ndarray, anchor: np.ndarray) -> None:
    """Anchors from the level-set polyhedra, for components still without one (logistic and
    hinge rows are not coercive one by one, but often are together): every row's affine
    minorant gives ``g_j^T w_i <= h_j`` (:meth:`~gtvmodel.terms.losses.LossBatch.level_halfspaces`),
    and so do the node constraints' half-spaces (``Constraint.halfspaces``), hence
    ``g_j^T w_c <= h_j + ||g_j||_1 dist(c, i)`` at the component's centre ``c``; the
    ``2d`` LPs ``max +-w_{c,k}`` over that polyhedron (HiGHS, stacked: :func:`_box_bounds`)
    bound ``||w_c||_inf`` when it is bounded.  The LP optimum is inflated by ``1e-7``
    relative plus ``1e-9`` (the solver's tolerance; the only non-exact step of the radii) and
    an unbounded or failed LP gives no anchor."""
    d = model.dim
    todo = np.flatnonzero(~np.isfinite(anchor[centres]))
    if todo.size == 0 or 2 * d * todo.size > _MAX_ANCHOR_LPS:
        return
    rows = [r for b in model.structure().batches
            if (r := b.level_halfspaces(level)) is not None]
    # the node constraints' own half-spaces (Box, NonNeg: G w_i <= h)
    rows += [(np.full(len(hs[1]), i), *hs) for i in model.structure().constrained
             for c in model.constraints_at(i) if (hs := c.halfspaces(d)) is not None]
    if not rows:
        return
    node = np.concatenate([r[0] for r in rows])
    G = np.vstack([r[1] for r in rows])
    h = np.concatenate([r[2] for r in rows])
    polys = {}
    for ci in todo:
        c = centres[ci]
        sel = np.flatnonzero((comp[node] == comp[c]) & np.isfinite(to_centre[node]))
        if sel.size >= d:
            polys[c] = (G[sel], h[sel] + np.abs(G[sel]).sum(axis=1) * to_centre[node[sel]])
    for c, best in _box_bounds(polys, d).items():
        if np.isfinite(best):
            anchor[c] = min(anchor[c], best * (1 + 1e-7) + 1e-9)


def _box_bounds(polys: dict, d: int) -> dict:
    """``max_k |w_k|`` over each polyhedron ``{w : G w <= h}`` of ``polys`` (key: ``(G,
    h)``), ``inf`` where unbounded or failed: the ``2 d`` LPs ``max +-w_k`` of every
    polyhedron stacked into one block-diagonal LP (its blocks are independent, so its
    solution solves each; one HiGHS call instead of ``2 d`` per polyhedron), then, if the
    stack is not solved (one unbounded polyhedron makes it so), one stacked LP per
    polyhedron."""
    if not polys:
        return {}
    out = _stacked_box_lp(list(polys.values()), d)
    if out is not None:
        return dict(zip(polys, out, strict=True))
    return {c: (_stacked_box_lp([p], d) or [np.inf])[0] for c, p in polys.items()}


def _stacked_box_lp(polys: list, d: int) -> list[float] | None:
    """The block-diagonal LP of :func:`_box_bounds` over ``polys``: per polyhedron its ``2 d``
    copies of ``w``, copy ``k`` maximizing ``+-w_{k mod d}``; None unless HiGHS solves it."""
    blocks = [sp.csr_matrix(G) for G, _ in polys for _ in range(2 * d)]
    b = np.concatenate([h for _, h in polys for _ in range(2 * d)])
    sign = np.concatenate([-np.ones(d), np.ones(d)])
    obj = np.zeros((len(polys), 2 * d, d))
    obj[:, np.arange(2 * d), np.arange(2 * d) % d] = sign
    res = linprog(obj.ravel(), A_ub=sp.block_diag(blocks, format="csr"), b_ub=b,
                  bounds=(None, None), method="highs")
    if res.status != 0 or res.x is None:
        return None
    vals = -(obj * res.x.reshape(obj.shape)).sum(axis=2)  # (polys, 2d): the 2d maxima
    return list(np.maximum(vals.max(axis=1), 0.0))

def _conic_anchors(model: ModelDeclaration, level: np.ndarray, comp: np.ndarray,
                   anchor: np.ndarray) -> None:
    """Anchors at conic (symbolic) nodes, for components still without one: ``||x||_inf`` over
    the node's sublevel set ``{L_i(x) <= B_i, x in C_i}`` by ``2d`` convex programs
    (``max +-x_k``), stacked over the nodes (:func:`_stacked_sublevel_radii`; node by node,
    :func:`_conic_sublevel_radius`, where the stacked ones fail).  The optimum is inflated by
    ``1e-6`` relative plus ``1e-8`` (the solver's tolerance); an unbounded or failed solve gives
    no anchor.  The first node (in model order) of a component with a finite radius anchors it.
    Bounded like the polyhedral anchors (:data:`_MAX_ANCHOR_LPS` node solves per
    certificate)."""
    conic = node_kinds(model).conic
    if conic.size == 0:
        return
    has = np.zeros(comp.max(initial=-1) + 1, dtype=bool)
    np.logical_or.at(has, comp[np.isfinite(anchor)], True)
    todo = conic[~has[comp[conic]] & np.isfinite(level[conic])]
    d = model.dim
    if todo.size == 0 or 2 * d * todo.size > _MAX_ANCHOR_LPS:
        return
    r = _stacked_sublevel_radii(model, todo, level[todo])
    if r is not None:
        fin = np.flatnonzero(np.isfinite(r))
        first = fin[np.unique(comp[todo[fin]], return_index=True)[1]]
        anchor[todo[first]] = np.minimum(anchor[todo[first]], r[first])
        return
    for i in todo:
        if has[comp[i]]:
            continue
        ri = _conic_sublevel_radius(model, int(i), float(level[i]))
        if np.isfinite(ri):
            anchor[i] = min(anchor[i], ri)
            has[comp[i]] = True


def _sublevel_constraints(model: ModelDeclaration, i: int, x: cp.Variable,
                          B: cp.Expression) -> list[cp.Constraint]:
    """The sublevel set ``{L_i(x) <= B, x in C_i}`` of node position ``i``."""
    cons = [model.loss_at(i).expression(x) <= B] if i in model.declared_losses() else []
    for con in model.constraints_at(i):
        cons += con.constraints(x)
    return cons


def _stacked_sublevel_radii(model: ModelDeclaration, nodes: np.ndarray,
                            level: np.ndarray) -> np.ndarray | None:
    """``max ||x_k||_inf`` over ``{L_k(x) <= level_k, x in C_k}`` for every node ``k`` of
    ``nodes`` from ``2d`` solves of one stacked problem ``max sum_k c_k^T x_k`` (directions
    ``c_k = +-e_j``; cached per node tuple with ``B`` and the directions as Parameters), or
    None if a solve is not optimal (then node by node).  The problem is separable, so each
    node's shortfall ``max c_k^T x - c_k^T x_k >= 0`` at the solver's point is at most the
    run's ``tau`` (:func:`~gtvmodel._solver.separable_gap_tolerance`):
    ``c_k^T x_k + tau`` bounds each node's maximum; then inflated like
    :func:`_conic_sublevel_radius`."""
    key = tuple(int(i) for i in nodes)
    cache: dict[Any, Any] = model.cache.get_or_build("cert_conic_sublevel_stacked", dict)
    entry = cache.get(key)
    k, d = len(key), model.dim
    if entry is None:
        B = cp.Parameter(k, name="B_conic")
        c = cp.Parameter((k, d), name="dir_conic")
        xs = [model.var(model.nodes[i]) for i in key]
        cons = [con for j, i in enumerate(key)
                for con in _sublevel_constraints(model, i, xs[j], B[j])]
        parts = cp.hstack([c[j] @ xs[j] for j in range(k)])
        entry = (cp.Problem(cp.Maximize(cp.sum(parts)), cons), B, c, xs, parts)
        cache[key] = entry
    prob, B, c, xs, parts = entry
    B.value = np.asarray(level, dtype=float)
    old = [x.value for x in xs]  # the nodes' variables are the user's: restore them
    best = np.zeros(k)
    try:
        for j in range(2 * d):
            c.value = np.tile(np.where(np.arange(d) == j % d, 1.0 if j < d else -1.0, 0.0),
                              (k, 1))
            record: dict[str, Any] = {}
            try:
                name, _, _ = run_solver(prob, None, {}, False, True,
                                        f"certificate (radii of {k} conic node(s))", record)
            except SolverError:
                return None
            val = None if parts.value is None else np.asarray(parts.value, dtype=float)
            if prob.status != cp.OPTIMAL or val is None or not np.isfinite(val).all():
                return None
            val = val.reshape(k)
            tau = separable_gap_tolerance(name, record.get("options", {}), prob.status, val)
            best = np.maximum(best, val + tau)
    finally:
        for x, v in zip(xs, old, strict=True):
            x.value = v
    return best * (1 + 1e-6) + 1e-8


def _conic_sublevel_radius(model: ModelDeclaration, i: int, level: float) -> float:
    """``max ||x||_inf`` over ``{L_i(x) <= level, x in C_i}`` (module docstring of
    :func:`_conic_anchors`); ``inf`` when unbounded or not solved."""
    cache: dict[Any, Any] = model.cache.get_or_build("cert_conic_sublevel", dict)
    entry = cache.get(i)
    d = model.dim
    if entry is None:
        x = model.var(model.nodes[i])
        B = cp.Parameter(name=f"B[{i}]")
        c = cp.Parameter(d, name=f"dir[{i}]")
        entry = (cp.Problem(cp.Maximize(c @ x), _sublevel_constraints(model, i, x, B)), B, c, x)
        cache[i] = entry
    prob, B, c, x = entry
    B.value = level
    old = x.value
    best = 0.0
    try:
        for k in range(2 * d):
            c.value = np.where(np.arange(d) == k % d, 1.0 if k < d else -1.0, 0.0)
            try:
                run_solver(prob, None, {}, False, True, f"certificate (radius of node {i})")
            except SolverError:
                return float("inf")
            if prob.status != cp.OPTIMAL or prob.value is None or not np.isfinite(prob.value):
                return float("inf")
            best = max(best, float(prob.value))
    finally:
        x.value = old
    return best * (1 + 1e-6) + 1e-8

def _multi_source(n: int, E: np.ndarray, lengths: np.ndarray, src: np.ndarray,
                  offsets: np.ndarray) -> np.ndarray:
    """``min_k (offset_k + dist(src_k, i))`` for every node (one Dijkstra from a super source;
    csgraph drops explicit zeros, hence a floor of 1e-300 on every length), rounded up."""
    tiny = 1e-300
    rows = np.concatenate([E[:, 0], E[:, 1], np.full(src.size, n)])
    cols = np.concatenate([E[:, 1], E[:, 0], src])
    vals = np.concatenate([lengths, lengths, offsets])
    G = sp.csr_matrix((np.maximum(vals, tiny), (rows, cols)), shape=(n + 1, n + 1))
    dist = csgraph.dijkstra(G, directed=True, indices=n)[:n]
    return dist * (1.0 + 1e-12) + 2 * tiny

def _pooled_anchors(st: Any, level: np.ndarray, comp: np.ndarray, ncomp: int,
                    centres: np.ndarray, to_centre: np.ndarray, anchor: np.ndarray,
                    d: int, symmetric: np.ndarray) -> None:
    """Component-level anchors: nodes whose data alone are not coercive (``m_i < d``,
    ill-conditioned ``X_i``) often are together.  With ``w_i = w_c + delta_i``,
    ``||delta_i||_2 <= sqrt(d) dist(c, i)`` from the component's centre ``c``:
    ``||X_i w_c||_2 <= ||y_i|| + b_i + ||X_i||_2 sqrt(d) dist(c, i) = beta_i``, so
    ``w_c^T (sum_i X_i^T X_i) w_c <= sum_i beta_i^2`` bounds ``||w_c||_2`` whenever the pooled
    Gram matrix is (numerically) positive definite.

    A *symmetric* component (every active node an unconstrained, unregularized data-fit node
    with growing rows, the others zero-loss) keeps its objective under a common shift by any
    ``z`` in the null space ``N`` of its pooled Gram matrix, so some minimizer has
    ``w_c`` orthogonal to ``N``, where the Gram matrix is bounded below by its smallest
    *nonzero* eigenvalue.  This is used only when exactly ``d - sum_i m_i`` computed
    eigenvalues are (numerically) zero: then ``N`` is the true null space (its dimension is at
    least that, and the other eigenvalues are bounded away from zero), not a set of merely
    ill-conditioned directions.  Updates ``anchor`` at the centres."""
    gram = np.zeros((ncomp, d, d))
    beta2 = np.zeros(ncomp)
    rows = np.zeros(ncomp)
    for b in st.batches:
        g = b.growth_pieces(level)
        if g is None:
            continue
        ok = np.isfinite(g["b"]) & np.isfinite(to_centre[b.nodes])
        if not ok.any():
            continue
        nodes, cc = b.nodes[ok], comp[b.nodes[ok]]
        xnorm = np.sqrt(np.maximum(g["eig"][ok, -1], 0.0)) * (1.0 + 1e-12)
        beta = g["ynorm"][ok] + g["b"][ok] + xnorm * np.sqrt(d) * to_centre[nodes]
        np.add.at(gram, cc, g["gram"][ok])
        np.add.at(beta2, cc, beta**2)
        np.add.at(rows, cc, np.bincount(b.row_node, minlength=comp.size)[nodes])
    used = np.flatnonzero(beta2 > 0)
    if used.size == 0:
        return
    e = np.linalg.eigvalsh(gram[used])
    err = 16.0 * (d + rows[used]) * EPS * np.abs(e).max(axis=1)  # forming sums + eigh
    emin = e[:, 0] - err
    nzero = (e <= err[:, None]).sum(axis=1)
    exact_null = symmetric[used] & (nzero > 0) & (nzero == d - rows[used])
    if exact_null.any():  # smallest nonzero eigenvalue on the complement of the null space
        j = np.flatnonzero(exact_null)
        emin[j] = e[j, nzero[j]] - err[j]
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(emin > 0, np.sqrt(beta2[used] * (1.0 + 1e-12) / np.maximum(emin, 1e-300)),
                     np.inf)
    c = centres[used]
    anchor[c] = np.minimum(anchor[c], np.where(np.isnan(r), np.inf, r))

def candidate_radii(model: ModelDeclaration, W: np.ndarray, P: float, viol: np.ndarray,
                    radius: float | None,
           solver: str | None) -> np.ndarray:
    """The radii of the residual charges: the caller's, or certified ones (``inf`` where none
    can be certified)."""
    n = model.num_nodes
    if radius is not None:
        return np.full(n, radius)
    Wp = _upper_bound_point(model, W, viol)
    if Wp is None or not np.isfinite(P):
        return np.full(n, np.inf)
    upper = P if Wp is W else float(model.objective(Wp))
    return certified_radii(model, upper, solver)

def radius_assumption(radius: float | None) -> list[str]:
    """What a caller's radius assumes (nothing when the radii are certified)."""
    if radius is None:
        return []
    return [f"||w*_i||_inf <= {radius:g} at every node (radius given by the caller, not "
            "checked)"]
