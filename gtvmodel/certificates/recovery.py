"""Dual flows recovered from weights alone, through the optimality conditions of (16).

At a minimizer ``W*`` of (16) the optimal flows ``U*`` of the dual (19)/(24)/(27) satisfy

- the edge condition ``u_e in lambda A_e dphi(v_e)``, ``v_e = w_{e+} - w_{e-}``
  (docs/conventions.md), and
- the node condition ``s_i = -(D^T u)_i in dh_i(w_i)``, ``h_i = L_i + eta_i ||.||_1 +
  kappa_i ||.||^2 + iota_{C_i}``.

The duality gap of any dual-feasible ``U`` at ``W`` is the sum of the Fenchel-Young gaps
``FY_e = lambda A_e phi(v_e) - u_e^T v_e`` (capacities ``||u_e||_* <= lambda A_e`` (27) met)
and ``FY_i = h_i(w_i) + h_i*(s_i) - s_i^T w_i``.  :func:`recover_flows` chooses ``U`` by the
*linearized* problem

    minimize   sum_e (lambda A_e phi(v_e) - u_e^T v_e) + sum_ij (eta_i |w_ij| - tau_ij w_ij)
               + sum_ij nu+_ij (hi_ij - w_ij) + nu-_ij (w_ij - lo_ij) + M sum |sigma_ij|
    subject to s_i = grad f_i(w_i) + tau_i + nu+_i - nu-_i + sigma_i   (every node),
               ||u_e||_* <= lambda A_e, |tau_ij| <= eta_i, nu+-_ij >= 0,

with ``f_i = L_i + kappa_i ||.||^2`` the smooth part (0 at data-less nodes) and ``lo, hi``
the coordinate bounds of a box constraint (``nu+-`` only where they are finite).  Each term
of the objective is a Fenchel-Young gap, or an upper bound of one (``h_i*`` is at most the
infimal convolution of its parts' conjugates), so the objective bounds the gap of ``U`` from
above, and at an exact minimizer its optimal value is 0 (``U*`` is feasible with ``sigma = 0``):
the recovered flows then satisfy every optimality condition, on fused edges, on ties of the
``l_inf`` norm and on ``l1`` zeros and active bounds alike, *without a threshold* deciding
which edges are fused -- the objective makes that choice (a flow on an edge with a
rounding-level ``v_e`` costs nothing; one on a genuine difference pays its gap).  The slack
``sigma`` (weight ``M = 10 (1 + ||W||_inf)``, above what moving demand along any path can save:
the edge terms telescope to ``(w_a - w_b)^T delta``) keeps the problem feasible away from the
optimum.

The problem is an LP for the polyhedral dual balls (the ``l1`` penalty's box
``||u_e||_inf <= lambda A_e``, the ``l_inf`` penalty's cross-polytope ``||u_e||_1 <= lambda
A_e``, every norm at ``d = 1``), solved by HiGHS (:func:`scipy.optimize.linprog`, sparse
matrices, for boxes: a vertex, conservation exact up to the rounding of its basis solves) or,
for cross-polytopes, by Clarabel (1.9-2.3x faster than HiGHS's interior point with crossover
on a 1,000-node SBM at d = 3, where the ties of the ``l_inf`` norm make the LP large), and a
second-order cone program for ``Norm2`` at ``d > 1``, solved by Clarabel
called directly with sparse matrices.  Differentiable penalties (``SquaredNorm2``) take ``u_e
= lambda A_e grad phi(v_e)`` plus the correction of least ``sum_e ||delta_e||^2 / (2 lambda
A_e)`` (their edge gap) that meets the node conditions, a QP on Clarabel.

**Smaller problems.**  With a ``threshold`` (:func:`fused_thresholds`: the widest gap of at
least two decades in the distribution of the differences, else ``1e-8 max(1, ||W||_inf)``),
only the edges (``l1``: coordinates) whose difference is below it stay free; the others are
held on the face of their ball that the difference selects (``lambda A_e sign(v_ej)``,
``lambda A_e v_e / ||v_e||_2``, or for ``l_inf`` the ties ``|v_ej| >= ||v_e||_inf - tau`` as
variables ``t_ej >= 0`` summing to ``lambda A_e``).  With equality node conditions a flow
of the fused edges that balances the nodes is sought first (:func:`_interior`): for ``Norm2``
strictly inside the fused rows' balls, by phase I of a barrier method from the electrical
flow; for the cross-polytopes of ``l_inf``, strictly inside them with the ties' ``t_e > 0``
summing to ``lambda A_e`` (the ties within :func:`tie_tolerance`), by the same phase I for
polyhedra (one grounded Laplacian-type factorization per Newton step, 8 steps on a 1,000-node
SBM at ``d = 3``), after the smooth nodes' demands moved by the least change along their
curvature that makes the clusters and ties consistent (``soft``; the gap of any flow meeting
the node conditions depends on the demands alone, ``sum_e u_e^T v_e = -sum_i s_i^T w_i``, so
phase I's choice among them costs nothing: such a flow certifies an interior-point optimum
to its accuracy, 6.5e-12 on that SBM);
for the box balls (``l1``, every norm at ``d = 1``) by a compiled maximum flow
(:mod:`gtvmodel.kernels.max_flow`: 11 ms against HiGHS's 39 ms at ``d = 1``, 28 ms against
110 ms at ``d = 3`` on a 1,000-node SBM).  The LP
and the conic problem keep only the node rows that hold a free flow (:func:`_active_rows`):
the size of the fused clusters, not of the graph.
:func:`~gtvmodel.certificates.certificate.certify` tries these first and the threshold-free
problem only up to :data:`FULL_SIZE` flow entries: a threshold only decides which problem is
solved, and every answer is evaluated soundly.

Away from the optimum the exact gradients over-constrain the flows (the optimal demands are
the gradients at ``W*``, not at ``W``): with ``curvature`` the demand of a smooth node may
leave its gradient along the curvature of ``f_i``, ``s_i - grad f_i(w_i) = H_i z_i`` at the cost
``z_i^T H_i z_i / 2``, the second-order term of its Fenchel-Young gap (always so in the conic
and QP forms; the LP's variant is a QP on Clarabel).

The recovery applies to nodes whose subdifferential it can describe: zero losses and smooth
library losses, with ``l1``/``l2`` regularizers and box (``Box``, ``NonNeg``) constraints;
other models get no recovered flows (:func:`recovery_scope` says why).

Nothing here needs to be exact for soundness: :func:`~gtvmodel.certificates.certificate.certify`
repairs the recovered flows and evaluates them by the unchanged sound dual evaluation, and
keeps the smallest of its candidates' gaps.

The module also holds the cluster linear algebra shared with the polish of
:func:`~gtvmodel.solve.exact.solve_exact` (:func:`fused_components`, :func:`cluster_sums`,
:func:`balance_flows`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import clarabel
import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
import scipy.sparse.linalg as spl
from scipy.optimize import linprog

from ..declaration import ModelDeclaration
from ..errors import UnsupportedError
from ..kernels.feasible_flow import strictly_feasible_flow, strictly_feasible_point
from ..kernels.max_flow import box_feasible_flow
from ..terms.losses import smooth_gradients
from .kinds import node_kinds
from .subspace import divergence_rows

__all__ = ["recover_flows", "uses_lp", "fused_thresholds", "recovery_scope", "NodeConditions",
           "node_conditions", "fused_components", "cluster_sums", "balance_flows",
           "SLACK_WEIGHT", "LP_TOL", "TIME_LIMIT", "FULL_SIZE", "FUSED_RTOL"]

#: The slack weight ``M = SLACK_WEIGHT (1 + ||W||_inf)`` of the node conditions.
SLACK_WEIGHT = 10.0
#: Primal and dual feasibility tolerances given to HiGHS and Clarabel (absolute, on data
#: scaled to ``max(1, ||W||_inf)``).
LP_TOL = 1e-10
#: Seconds a recovery problem may take (HiGHS's and Clarabel's time limits): a stalled solve
#: returns no flows and the certificate goes on with its other candidates (HiGHS's interior
#: point ran for over ten minutes on an ill-conditioned soundness instance, illcond seed 9).
TIME_LIMIT = 60.0



# ===================================================================== node conditions

@dataclass
class NodeConditions:
    """The node condition ``s_i in grad f_i(w_i) + eta_i d||.||_1(w_i) + N_{C_i}(w_i)`` in
    the form of the recovery problem (module docstring): ``G`` the smooth gradients ``grad
    f_i(w_i)`` (``(n, d)``), ``eta`` the ``l1`` weights (``(n,)``), ``lo``/``hi`` the
    coordinate bounds (``(n, d)``, infinite where there are none)."""

    G: np.ndarray
    eta: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


def recovery_scope(model: ModelDeclaration) -> str | None:
    """Why :func:`recover_flows` does not apply to ``model`` (None: it does)."""
    st = model.structure()
    if model.num_edges == 0 or model.lam <= 0:
        return "no edge carries a flow (no edges, or lambda = 0)"
    if st.conic.size:
        return "symbolic losses or constraints"
    if any(pos.size for pos, _ in st.normball.values()):
        return "norm-ball constraints"
    for b in st.batches:
        if not b.cls.base_smooth:
            return f"the non-smooth loss {b.cls.__name__}"
    pen = model.penalty
    if pen.is_norm:
        q = getattr(pen, "q", None)
        if model.dim > 1 and q not in (1.0, 2.0, np.inf):
            return f"the penalty {pen!r} (recovery covers l1, l2 and l_inf norms)"
        return None
    try:
        pen.rows_gradient(np.zeros((1, model.dim)))
    except UnsupportedError:
        return f"the penalty {pen!r} has no row gradient"
    return None


def node_conditions(model: ModelDeclaration, W: np.ndarray) -> NodeConditions:
    """The node conditions of :func:`recover_flows` at ``W`` (in :func:`recovery_scope`)."""
    st = model.structure()
    n, d = W.shape
    lo, hi = np.full((n, d), -np.inf), np.full((n, d), np.inf)
    if st.box is not None:
        pos, blo, bhi = st.box
        lo[pos] = np.maximum(lo[pos], blo)
        hi[pos] = np.minimum(hi[pos], bhi)
    if st.nonneg.size:
        lo[st.nonneg] = np.maximum(lo[st.nonneg], 0.0)
    return NodeConditions(smooth_gradients(st.batches, st.l2, W), np.asarray(st.l1, float),
                          lo, hi)


# ===================================================================== the recovery problem

@dataclass
class _Columns:
    """Columns of the recovery problem besides the flows: the node-row matrix block, the
    objective, and the bounds (``lb``, ``ub``)."""

    A: sp.csr_matrix
    c: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    #: the quadratic cost of the columns (None: linear only)
    P: sp.spmatrix | None = None


def _node_columns(cond: NodeConditions, W: np.ndarray, M: float) -> _Columns:
    """The columns ``tau`` (``l1``), ``nu+``/``nu-`` (finite bounds) and the slacks
    ``sigma+``/``sigma-`` of the node rows ``-(D^T u)_ij - tau - nu+ + nu- - sigma+ + sigma-
    = g_ij`` (module docstring), as one sparse block with its costs and bounds."""
    n, d = W.shape
    eta = np.repeat(cond.eta, d)
    w = W.ravel()
    lo, hi = cond.lo.ravel(), cond.hi.ravel()
    rows_t = np.flatnonzero(eta > 0)
    rows_u = np.flatnonzero(np.isfinite(hi))
    rows_l = np.flatnonzero(np.isfinite(lo))
    rows_s = np.arange(n * d)
    rows = np.concatenate([rows_t, rows_u, rows_l, rows_s, rows_s])
    sign = np.concatenate([-np.ones(rows_t.size), -np.ones(rows_u.size), np.ones(rows_l.size),
                           -np.ones(n * d), np.ones(n * d)])
    c = np.concatenate([-w[rows_t], np.maximum(hi[rows_u] - w[rows_u], 0.0),
                        np.maximum(w[rows_l] - lo[rows_l], 0.0), np.full(2 * n * d, M)])
    lb = np.concatenate([-eta[rows_t], np.zeros(rows.size - rows_t.size)])
    ub = np.concatenate([eta[rows_t], np.full(rows.size - rows_t.size, np.inf)])
    A = sp.csr_matrix((sign, (rows, np.arange(rows.size))), shape=(n * d, rows.size))
    return _Columns(A, c, lb, ub)


def _with_curvature(model: ModelDeclaration, nodes: _Columns, W: np.ndarray) -> _Columns:
    """``nodes`` plus columns ``z_i`` that let the demand leave the gradient along the
    curvature of the smooth part, ``s_i - grad f_i(w_i) = H_i z_i`` at the cost ``z_i^T H_i
    z_i / 2`` (``H_i`` the Hessian of ``f_i`` at ``w_i``: the second-order term of the node's
    Fenchel-Young gap ``(s_i - g_i)^T H_i^+ (s_i - g_i) / 2``, exact for quadratic and squared
    losses; a singular ``H_i`` keeps ``s_i - g_i`` in its range, as the conjugate's domain
    asks).  Nodes whose batch has no Hessian get none."""
    n, d = W.shape
    B = _curvature_matrix(model, W)
    k = nodes.c.size
    Pn = sp.block_diag([sp.csr_matrix((k, k)) if nodes.P is None else nodes.P, B],
                       format="csr")
    return _Columns(sp.hstack([nodes.A, -B], format="csr"),
                    np.concatenate([nodes.c, np.zeros(n * d)]),
                    np.concatenate([nodes.lb, np.full(n * d, -np.inf)]),
                    np.concatenate([nodes.ub, np.full(n * d, np.inf)]), Pn)


def _curvature_matrix(model: ModelDeclaration, W: np.ndarray) -> sp.csr_matrix:
    """The block diagonal of the Hessians ``H_i`` of the smooth parts ``f_i`` at ``w_i``
    (``(n d, n d)``; zero blocks where a batch has none, and at data-less nodes)."""
    st = model.structure()
    n, d = W.shape
    H = np.zeros((n, d, d))
    for b in st.batches:
        Hb = b.hessians(W)
        if Hb is not None:
            H[b.nodes] += Hb
    H[:, np.arange(d), np.arange(d)] += 2.0 * st.l2[:, None]
    return sp.bsr_matrix((H, np.arange(n), np.arange(n + 1)), shape=(n * d, n * d)).tocsr()


def _flow_block(model: ModelDeclaration) -> sp.csr_matrix:
    """``vec(U) -> vec(-D^T U)`` (``(n d, |E| d)``, row-major vectorization)."""
    return sp.kron(-model.incidence.T, sp.identity(model.dim), format="csr")


@dataclass
class _Flows:
    """The flows of a recovery problem as ``vec(U) = u0 + T x`` in free variables ``x`` with
    bounds ``lb <= x <= ub``, cost ``cost^T x``, and the linear constraints ``A_ub x <= b_ub``,
    ``A_eq x = b_eq`` (their dual balls and edge faces); ``cones``: Clarabel's second-order
    cones ``(lambda A_e, u_e)`` of the free ``Norm2`` rows (``(A, b, cones)``, or None)."""

    u0: np.ndarray
    T: sp.csr_matrix
    lb: np.ndarray
    ub: np.ndarray
    cost: np.ndarray
    A_ub: sp.csr_matrix
    b_ub: np.ndarray
    A_eq: sp.csr_matrix
    b_eq: np.ndarray
    soc: tuple | None = None


def _dual_ball(model: ModelDeclaration) -> str:
    """The shape of the dual ball ``||u_e||_* <= lambda A_e``: ``"box"`` (the ``l1``
    penalty, and every norm at ``d = 1``), ``"cross"`` (``l_inf``: the ``l1`` ball) or
    ``"l2"``."""
    q = getattr(model.penalty, "q", None)
    if model.dim == 1 or q == np.inf:
        return "box"
    return "cross" if q == 1.0 else "l2"


def _select(rows: np.ndarray, m: int, values: np.ndarray | None = None) -> sp.csr_matrix:
    """``(m, rows.size)`` with ``values`` (default 1) at ``(rows[k], k)``."""
    vals = np.ones(rows.size) if values is None else values
    return sp.csr_matrix((vals, (rows, np.arange(rows.size))), shape=(m, rows.size))


def _flows(model: ModelDeclaration, V: np.ndarray, tau: float) -> _Flows:
    """The edge condition ``u_e in lambda A_e dphi(v_e)`` with the edges (``l1``: the
    coordinates) whose difference is at most ``tau`` *free* in their dual ball (``tau = inf``:
    every edge, the threshold-free problem of the module docstring) and the others on the face
    of the ball that ``v_e`` selects: ``lambda A_e sign(v_ej)`` (``l1``, ``d = 1``), ``lambda A_e
    v_e / ||v_e||_2`` (``Norm2``), ``conv{lambda A_e sign(v_ej) e_j}`` over the coordinates
    within ``tau`` of ``||v_e||_inf`` (``l_inf``: a tie of several is a set of variables
    ``t >= 0`` with ``sum_j t_ej = lambda A_e``)."""
    E, d = V.shape
    cap = model.capacities
    capf = np.repeat(cap, d)
    v = V.ravel()
    ball = _dual_ball(model)
    if ball == "box":
        free = np.abs(v) <= tau
        u0 = np.where(free, 0.0, capf * np.sign(v))
        cols = np.flatnonzero(free)
        return _Flows(u0, _select(cols, E * d), -capf[cols], capf[cols], -v[cols],
                      sp.csr_matrix((0, cols.size)), np.zeros(0),
                      sp.csr_matrix((0, cols.size)), np.zeros(0))
    r = model.penalty.rows_value(V)
    fused = r <= tau
    if ball == "l2":
        u0 = np.where(fused[:, None], 0.0, cap[:, None] * V / np.where(fused, 1.0, r)[:, None])
        rows = np.flatnonzero(fused)
        k = rows.size
        cols = (rows[:, None] * d + np.arange(d)).ravel()
        crow = (np.arange(k)[:, None] * (d + 1) + 1 + np.arange(d)).ravel()
        Ac = sp.csr_matrix((-np.ones(k * d), (crow, np.arange(k * d))), shape=(k * (d + 1), k * d))
        bc = np.zeros(k * (d + 1))
        bc[np.arange(k) * (d + 1)] = cap[rows]
        none = sp.csr_matrix((0, k * d))
        return _Flows(u0.ravel(), _select(cols, E * d), np.full(k * d, -np.inf),
                      np.full(k * d, np.inf), -v[cols], none, np.zeros(0), none, np.zeros(0),
                        (Ac, bc, [clarabel.SecondOrderConeT(d + 1)] * k))
    # l_inf: fused rows as u = p - q in the cross-polytope; ties on the others
    A = np.abs(V)
    tie = (A >= (r - tie_tolerance(A, r, tau))[:, None]) & ~fused[:, None]
    single = tie.sum(axis=1) == 1
    u0 = np.where(tie & single[:, None], cap[:, None] * np.sign(V), 0.0).ravel()
    frows = np.flatnonzero(fused)
    fcols = (frows[:, None] * d + np.arange(d)).ravel()
    tmask = tie & ~single[:, None]
    tcols = np.flatnonzero(tmask.ravel())
    ncols = 2 * fcols.size + tcols.size
    T = sp.hstack([_select(fcols, E * d), _select(fcols, E * d, -np.ones(fcols.size)),
                   _select(tcols, E * d, np.sign(v[tcols]))], format="csr")
    ub_rows = sp.hstack([sp.kron(sp.identity(frows.size), np.ones((1, d))),
                         sp.kron(sp.identity(frows.size), np.ones((1, d))),
                         sp.csr_matrix((frows.size, tcols.size))], format="csr")
    trows = np.flatnonzero(tmask.any(axis=1))
    owner = np.searchsorted(trows, tcols // d)
    eq_rows = sp.hstack([sp.csr_matrix((trows.size, 2 * fcols.size)),
                         sp.csr_matrix((np.ones(tcols.size), (owner, np.arange(tcols.size))),
                                       shape=(trows.size, tcols.size))], format="csr")
    cost = np.concatenate([-v[fcols], v[fcols], -np.abs(v[tcols])])
    return _Flows(u0, T, np.zeros(ncols), np.full(ncols, np.inf), cost, ub_rows, cap[frows],
                  eq_rows, cap[trows])


def tie_tolerance(A: np.ndarray, r: np.ndarray, tau: float) -> float:
    """The tolerance below which a coordinate of a non-fused ``l_inf`` row counts as tied
    with the row's largest: the geometric middle of the widest gap (at least a decade) in
    the sorted slacks ``||v_e||_inf - |v_ej|`` between ``tau`` and ``1e-2 max(1, ||v||)``, else
    ``tau``.  An interior-point optimum breaks the ties of ``W*`` far more than it separates
    fused weights (1,000-node SBM, ``d = 3``: fused differences up to 5e-9, tied slacks up to
    1.7e-6, the first genuine slack 1.3e-4): a tie taken for a single coordinate holds a flow
    on the wrong face, the node conditions then have no solution."""
    keep = r > tau
    S = (r[keep, None] - A[keep]).ravel()
    top = 1e-2 * max(1.0, float(r.max(initial=0.0)))
    x = np.sort(S[(S > tau) & (S < top)])
    if not (0 < tau < top) or not x.size:
        return tau
    pts = np.concatenate([[tau], x, [top]])
    ratio = pts[1:] / pts[:-1]
    k = int(np.argmax(ratio))
    return float(np.sqrt(pts[k] * pts[k + 1])) if ratio[k] >= 10.0 else tau


def _active_rows(model: ModelDeclaration, fl: _Flows, cond: NodeConditions, nodes: _Columns
                 ) -> tuple[sp.csr_matrix, np.ndarray, _Columns]:
    """The node rows of the recovery problem that hold a free flow variable, ``(K T, g -
    K u0, nodes)`` restricted to them (``K`` = :func:`_flow_block`): the other rows only
    involve their own node columns (slacks, multipliers), which solve them whatever the flows,
    so they and the columns left without a row are dropped (those columns fixed at 0, inside
    their bounds): a problem the size of the fused clusters, not of the graph."""
    K = _flow_block(model)
    KT = (K @ fl.T).tocsr()
    rows = np.flatnonzero(np.diff(KT.indptr) > 0)
    g = (cond.G.ravel() - K @ fl.u0)[rows]
    A = nodes.A.tocsr()[rows].tocsc()
    cols = np.flatnonzero(np.diff(A.indptr) > 0)
    P = None if nodes.P is None else sp.csr_matrix(nodes.P)[cols][:, cols]
    return KT[rows], g, _Columns(A[:, cols].tocsr(), nodes.c[cols], nodes.lb[cols],
                                 nodes.ub[cols], P)


def _solve_lp(model: ModelDeclaration, fl: _Flows, cond: NodeConditions, nodes: _Columns
              ) -> np.ndarray | None:
    """The recovery LP (polyhedral balls), by HiGHS: ``vec(U)``, or None if it fails."""
    if fl.T.shape[1] == 0:  # no free flow: the faces alone
        return fl.u0.copy()
    KT, g, nodes = _active_rows(model, fl, cond, nodes)
    k = fl.T.shape[1]
    A_eq = sp.vstack([sp.hstack([KT, nodes.A]),
                      sp.hstack([fl.A_eq, sp.csr_matrix((fl.A_eq.shape[0], nodes.c.size))])],
                     format="csr")
    b_eq = np.concatenate([g, fl.b_eq])
    A_ub = b_ub = None
    if fl.A_ub.shape[0]:
        A_ub = sp.hstack([fl.A_ub, sp.csr_matrix((fl.A_ub.shape[0], nodes.c.size))],
                         format="csr")
        b_ub = fl.b_ub
    res = linprog(np.concatenate([fl.cost, nodes.c]), A_ub=A_ub, b_ub=b_ub, A_eq=A_eq,
                  b_eq=b_eq, bounds=np.column_stack([np.concatenate([fl.lb, nodes.lb]),
                                                     np.concatenate([fl.ub, nodes.ub])]),
                  method="highs",
                  options={"primal_feasibility_tolerance": LP_TOL,
                           "dual_feasibility_tolerance": LP_TOL,
                           "time_limit": TIME_LIMIT})
    if res.status != 0 or res.x is None:
        return None
    return fl.u0 + fl.T @ res.x[:k]


def _solve_clarabel(model: ModelDeclaration, fl: _Flows, cond: NodeConditions,
                    nodes: _Columns, P: sp.spmatrix | None = None) -> np.ndarray | None:
    """The recovery problem by Clarabel (sparse matrices): the flows' bounds, linear
    constraints and cones of ``fl``, a quadratic cost ``P`` of ``x`` (None: 0), and the node
    columns with their bounds and curvature; ``vec(U)``, or None if it fails."""
    if fl.T.shape[1] == 0:  # no free flow: the faces alone
        return fl.u0.copy()
    KT, g, nodes = _active_rows(model, fl, cond, nodes)
    k = fl.T.shape[1]
    nx_ = k + nodes.c.size
    lb, ub = np.concatenate([fl.lb, nodes.lb]), np.concatenate([fl.ub, nodes.ub])
    il, iu = np.flatnonzero(np.isfinite(lb)), np.flatnonzero(np.isfinite(ub))
    pad = sp.csr_matrix((fl.A_ub.shape[0], nodes.c.size))
    padq = sp.csr_matrix((fl.A_eq.shape[0], nodes.c.size))
    blocks = [sp.hstack([KT, nodes.A]), sp.hstack([fl.A_eq, padq]),
              -_select(il, nx_).T, _select(iu, nx_).T, sp.hstack([fl.A_ub, pad])]
    rhs = [g, fl.b_eq, -lb[il], ub[iu], fl.b_ub]
    cones = [clarabel.ZeroConeT(KT.shape[0] + fl.A_eq.shape[0]),
             clarabel.NonnegativeConeT(il.size + iu.size + fl.A_ub.shape[0])]
    if fl.soc is not None and fl.soc[0].shape[0]:
        blocks.append(sp.hstack([fl.soc[0], sp.csr_matrix((fl.soc[0].shape[0],
                                                           nodes.c.size))]))
        rhs.append(fl.soc[1])
        cones += fl.soc[2]
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = LP_TOL
    settings.tol_feas = LP_TOL
    settings.tol_ktratio = 1e-8
    settings.time_limit = TIME_LIMIT
    Pk = sp.csr_matrix((k, k)) if P is None else P
    Pn = sp.csr_matrix((nodes.c.size, nodes.c.size)) if nodes.P is None else nodes.P
    Pf = sp.block_diag([Pk, Pn], format="csc")
    solver = clarabel.DefaultSolver(sp.triu(Pf, format="csc"), np.concatenate([fl.cost, nodes.c]),
                                    sp.vstack(blocks, format="csc"), np.concatenate(rhs),
                                    cones, settings)
    sol = solver.solve()
    if str(sol.status) not in ("Solved", "AlmostSolved"):
        return None
    return fl.u0 + fl.T @ np.asarray(sol.x[:k])


def _interior(model: ModelDeclaration, W: np.ndarray, fl: _Flows, cond: NodeConditions
              ) -> np.ndarray | None:
    """Equality node conditions (no ``l1`` weights, no bounds): flows of the fused edges in
    their dual balls that balance the nodes, ``-(D^T u)_i = grad f_i(w_i)``.  ``Norm2`` at
    ``d > 1``: strictly inside, by phase I of a barrier method from the electrical flow
    (:func:`~gtvmodel.kernels.feasible_flow.strictly_feasible_flow`: 7 Newton steps,
    one sparse factorization each, 2.9x faster than the conic problem on a 1,000-node SBM);
    box balls (``l1``, every norm at ``d = 1``): a maximum flow
    (:func:`~gtvmodel.kernels.max_flow.box_feasible_flow`, on the node rows that hold a free
    flow); the cross-polytopes of ``l_inf`` (fused rows ``u_e = p_e - q_e``, ``1^T (p_e +
    q_e) < lambda A_e``) with their ties (``t_e > 0``, ``1^T t_e = lambda A_e``): strictly
    inside, by phase I for polyhedra
    (:func:`~gtvmodel.kernels.feasible_flow.strictly_feasible_point`), the demands of the
    smooth nodes free to move along their curvature (``soft``: the clusters' and ties'
    imbalance, first order in the weights' error).  At an optimum any such flow certifies
    ``W``: the gap depends on the demands alone.  None when no such flow
    is found (the caller solves the LP or the conic problem)."""
    ball = _dual_ball(model)
    if (cond.eta > 0).any() or np.isfinite(cond.lo).any() or np.isfinite(cond.hi).any():
        return None
    if fl.T.shape[1] == 0:
        return fl.u0.copy()
    K = _flow_block(model)
    KT, b = (K @ fl.T).tocsr(), cond.G.ravel() - K @ fl.u0
    rows = np.flatnonzero(np.diff(KT.indptr) > 0)
    if ball == "box":
        x = box_feasible_flow(KT[rows], b[rows], fl.ub)
    elif ball == "cross":
        # the smooth nodes' demands may move along their curvature (second-order cost)
        B = _curvature_matrix(model, W)[rows][:, rows]
        x = strictly_feasible_point(KT[rows], b[rows], fl.A_eq, fl.b_eq, fl.A_ub, fl.b_ub, B)
    else:
        d = model.dim
        assert fl.soc is not None  # the l2 balls of the fused edges
        x = strictly_feasible_flow(KT, b, fl.soc[1][::d + 1], d)
        if x is not None:
            return _settle_dataless(model, fl.u0 + fl.T @ x)
    return None if x is None else fl.u0 + fl.T @ x


#: Edges whose flow is within this share of its capacity count as saturated in
#: :func:`_settle_dataless` (an edge that is not fused holds ``lambda A_e v_e / ||v_e||``).
SATURATED_RTOL = 1e-9
#: Rounds of :func:`_settle_dataless` (tangential correction, saturated flows back onto their
#: spheres): the second leaves the capacities exceeded by the square of the first's excess.
SETTLE_ROUNDS = 2


def _settle_dataless(model: ModelDeclaration, u: np.ndarray) -> np.ndarray:
    """``u`` (``Norm2`` flows, ``(|E| d,)``) with the imbalance left on the subspace conditions
    (:mod:`~gtvmodel.certificates.subspace`: ``N_i^T (D^T u)_i = 0`` at data-less nodes and
    along the null directions of rank-deficient data) moved to directions with curvature.
    Phase I leaves each fused cluster's imbalance (first order in the weights' error: a cut
    edge with ``||v_e|| ~ 5e-4`` turns a weights' error of 1e-8 into a direction error of 2e-5)
    on one grounded row; where that row is conditioned, the repair's minimum-norm correction
    moves saturated flows along their normals, so the capacities are met only after scaling all
    flows by ``1 - 7e-8`` (a relative gap of 2e-6 on a 200-node SBM, and the threshold-free
    conic variant, 160 ms, to certify).  Here the correction is the electrical flow with
    conductances ``lambda A_e P_e``, ``P_e`` the projection onto the tangent space of a
    saturated edge's ball (the identity elsewhere), against the conditions' rows ``A``
    (:func:`~gtvmodel.certificates.subspace.divergence_rows`): ``(A C A^T) psi = -A u``,
    ``Delta = C A^T psi``.  A tangential change raises a saturated norm only to second order
    (``||u_e + t_e|| = sqrt(c_e^2 + ||t_e||^2)``), and the directions with curvature absorb
    their demands' change at second order too; the flows are then moved back onto the spheres
    they left (by that second order) and settled once more with the same factor
    (:data:`SETTLE_ROUNDS`).  ``u`` unchanged where the conditions already hold to rounding or
    ``A C A^T`` is singular (a conditioned component without curvature: its imbalance is the
    weights' own error)."""
    kinds = node_kinds(model)
    if not kinds.subspace.size:
        return u
    E, d = model.num_edges, model.dim
    bases = kinds.subspace_bases
    A = divergence_rows(model, kinds.subspace, None if bases is None else list(bases))
    scale = max(1.0, float(np.abs(u).max(initial=0.0)))
    if np.abs(A @ u).max(initial=0.0) <= 64 * np.finfo(float).eps * scale:
        return u
    cap = model.capacities
    U = u.reshape(E, d)
    norm = np.linalg.norm(U, axis=1)
    sat = norm >= (1.0 - SATURATED_RTOL) * cap
    N = np.zeros((E, d))
    N[sat] = U[sat] / norm[sat, None]
    blocks = cap[:, None, None] * (np.eye(d)[None] - N[:, :, None] * N[:, None, :])
    C = sp.bsr_matrix((blocks, np.arange(E), np.arange(E + 1)), shape=(E * d, E * d)).tocsr()
    try:
        lu = spl.splu((A @ C @ A.T).tocsc())
    except RuntimeError:  # singular: a conditioned component without curvature
        return u
    for _ in range(SETTLE_ROUNDS):
        psi = lu.solve(-(A @ u))
        if not np.isfinite(psi).all():
            return u
        u = u + C @ (A.T @ psi)
        # back onto the spheres: what the tangential step left outside (second order) becomes
        # an imbalance of that order, which the next round settles
        U = u.reshape(E, d)
        out = np.linalg.norm(U, axis=1) / cap
        U[out > 1.0] /= out[out > 1.0, None]
    return u


def _solve_smooth(model: ModelDeclaration, V: np.ndarray, cond: NodeConditions,
                  nodes: _Columns) -> np.ndarray | None:
    """Differentiable penalties: ``u = lambda A_e grad phi(v_e) + delta`` with the correction
    ``delta`` of least ``sum_e ||delta_e||^2 / (2 lambda A_e)`` (the edge Fenchel-Young gap of
    ``SquaredNorm2``, its second-order term for others) meeting the node conditions (a QP,
    Clarabel); the gradient flows alone where they already do or the solver fails."""
    E, d = V.shape
    cap = model.capacities
    u0 = (cap[:, None] * model.penalty.rows_gradient(V)).ravel()
    if not np.abs(cond.G.ravel() - _flow_block(model) @ u0).max(initial=0.0) > 0:
        return u0
    none = sp.csr_matrix((0, E * d))
    fl = _Flows(u0, sp.identity(E * d, format="csr"), np.full(E * d, -np.inf),
                np.full(E * d, np.inf), np.zeros(E * d), none, np.zeros(0), none, np.zeros(0))
    u = _solve_clarabel(model, fl, cond, nodes, sp.diags(np.repeat(1.0 / cap, d)))
    return u0 if u is None else u


#: The largest ``|E| d`` for which :func:`~gtvmodel.certificates.certificate.certify` also
#: solves the threshold-free problem (every edge free in its ball) when the problems with
#: fused edges detected by thresholds (:func:`fused_thresholds`) do not certify ``W``.
FULL_SIZE = 4000
#: The default threshold of :func:`fused_thresholds`, relative to ``max(1, ||W||_inf)``.
FUSED_RTOL = 1e-8


def fused_thresholds(model: ModelDeclaration, weights: np.ndarray) -> list[float]:
    """Thresholds ``tau`` on the edge differences (``l1``: coordinates; other norms: rows)
    below which edges count as fused: the widest gap (at least two decades) in the sorted
    differences between ``1e-14`` and ``1e-2`` times ``max(1, ||W||_inf)`` (rounding-level
    differences below it, genuine ones above: its geometric middle), then
    :data:`FUSED_RTOL` ``max(1, ||W||_inf)``; duplicates (the same fused set) dropped."""
    W = np.asarray(weights, dtype=float)
    scale = max(1.0, float(np.abs(W).max(initial=0.0)))
    V = model.empirical_graph.diff(W)
    pen = model.penalty
    r = np.abs(V).ravel() if _dual_ball(model) == "box" or not pen.is_norm \
        else pen.rows_value(V)
    x = np.sort(r[(r > 1e-14 * scale) & (r < 1e-2 * scale)])
    taus = []
    if x.size:
        pts = np.concatenate([[1e-14 * scale], x, [1e-2 * scale]])
        ratio = pts[1:] / pts[:-1]
        k = int(np.argmax(ratio))
        if ratio[k] >= 100.0:
            taus.append(float(np.sqrt(pts[k] * pts[k + 1])))
    taus.append(FUSED_RTOL * scale)
    out: list[float] = []
    seen: set[int] = set()
    for t in taus:
        key = int((r <= t).sum())
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def uses_lp(model: ModelDeclaration) -> bool:
    """Whether :func:`recover_flows` without ``curvature`` solves an LP (a norm penalty with a
    polyhedral dual ball), so that the ``curvature`` variant is a different problem."""
    return model.penalty.is_norm and _dual_ball(model) != "l2"


def recover_flows(model: ModelDeclaration, weights: np.ndarray, curvature: bool = False,
                  threshold: float = np.inf) -> np.ndarray | None:
    """Flows ``U`` (``(|E|, d)``) recovered from the weights ``W`` (checked ``(n, d)``) by the
    optimality conditions (module docstring): at an exact minimizer they satisfy the edge
    and node conditions of (16) exactly (up to the solver's rounding), elsewhere they
    minimize the linearized gap.

    ``threshold``: edges (``l1``: coordinates) with differences above it are held on the face
    of their dual ball that the difference selects, only the others are free (a smaller
    problem; :func:`fused_thresholds`); ``inf`` (default): every edge is free, no threshold.
    With a finite threshold and equality node conditions, a balancing flow on the fused
    edges is tried first (:func:`_interior`).  ``curvature``:
    the demands of the smooth nodes may also leave their gradients along the curvature of
    the loss, at the second-order cost of their Fenchel-Young gaps (:func:`_with_curvature`;
    Clarabel: better away from the optimum, where the exact gradients over-constrain the
    flows); always so for ``Norm2`` and differentiable penalties.  None when the model is outside
    :func:`recovery_scope` or the solver fails (the caller keeps its other flows)."""
    if recovery_scope(model) is not None:
        return None
    W = np.asarray(weights, dtype=float)
    E, d = model.num_edges, model.dim
    V = model.empirical_graph.diff(W)
    M = SLACK_WEIGHT * (1.0 + float(np.abs(W).max(initial=0.0)))
    cond = node_conditions(model, W)
    nodes = _node_columns(cond, W, M)
    if not model.penalty.is_norm:
        u = _solve_smooth(model, V, cond, _with_curvature(model, nodes, W))
        return None if u is None else u.reshape(E, d)
    fl = _flows(model, V, threshold)
    ball = _dual_ball(model)
    u = None
    if np.isfinite(threshold) and not curvature:
        u = _interior(model, W, fl, cond)
    if u is None and (ball == "l2" or curvature):
        u = _solve_clarabel(model, fl, cond, _with_curvature(model, nodes, W))
    elif u is None and ball == "cross":
        u = _solve_clarabel(model, fl, cond, nodes)
    elif u is None:
        u = _solve_lp(model, fl, cond, nodes)
    return None if u is None else u.reshape(E, d)


# ===================================================================== clusters (shared)

def fused_components(edges: np.ndarray, fused: np.ndarray, n: int
                     ) -> Iterator[tuple[int, np.ndarray]]:
    """``(count, labels)`` of the graph of the fused edges (``edges`` ``(|E|, 2)``, ``fused``
    an ``(|E|, d)`` mask), per coordinate (computed once per distinct column of ``fused``)."""
    seen: dict[bytes, tuple[int, np.ndarray]] = {}
    for j in range(fused.shape[1]):
        key = np.packbits(fused[:, j]).tobytes()
        if key not in seen:
            e = edges[fused[:, j]]
            adj = sp.csr_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(n, n))
            seen[key] = csgraph.connected_components(adj, directed=False)
        yield seen[key]


def cluster_sums(labels: np.ndarray, A: np.ndarray, K: int) -> np.ndarray:
    """``sum_{(i, j): labels_ij = c} A_ij`` for every cluster coordinate ``c``."""
    return np.bincount(labels.ravel(), weights=A.ravel(), minlength=K)


#: Conjugate-gradient iterations :func:`balance_flows` tries before the sparse LU, and the
#: relative residual they must reach.
BALANCE_CG_ITERS, BALANCE_CG_RTOL = 150, 1e-14


def balance_flows(DF: sp.csr_matrix, c: np.ndarray, labels: np.ndarray,
                  R: np.ndarray) -> np.ndarray:
    """``U = C D_F X`` with ``D_F^T C D_F X = R`` (``(n, k)``, one column per coordinate): the
    minimum of ``sum_e ||u_e||^2 / c_e`` subject to ``D_F^T U = R`` (a capacity-weighted
    electrical flow on the fused edges ``D_F``, per cluster of ``labels``; ``R`` must sum to 0
    on every cluster, up to rounding).  Jacobi-preconditioned conjugate gradients on the
    Laplacian first (:func:`_laplacian_cg`: the clusters of random graphs are expanders, well
    conditioned, where a factorization fills in), the sparse LU of the Laplacian grounded at one
    node per cluster where they do not converge in :data:`BALANCE_CG_ITERS` iterations (grids,
    paths: ill conditioned, little fill-in)."""
    n = DF.shape[1]
    L = (DF.T @ sp.diags(c) @ DF).tocsr()
    X = _laplacian_cg(L, R, labels)
    if X is None:
        roots = np.unique(labels, return_index=True)[1]
        keep = np.setdiff1d(np.arange(n), roots)
        X = np.zeros(R.shape)
        if keep.size:
            lu = spl.splu(sp.csc_matrix(L[keep][:, keep]), permc_spec="MMD_AT_PLUS_A",
                          options={"SymmetricMode": True})
            X[keep] = lu.solve(np.ascontiguousarray(R[keep]))
    return c[:, None] * (DF @ X)


def _laplacian_cg(L: sp.csr_matrix, R: np.ndarray, labels: np.ndarray) -> np.ndarray | None:
    """``X`` with ``L X = R - mean`` (each column's per-cluster mean removed: the part of
    ``R`` that no flow can carry, rounding when ``R`` sums to 0 on the clusters) by
    Jacobi-preconditioned conjugate gradients, all columns at once, on the nodes with fused
    edges; None unless every column reaches :data:`BALANCE_CG_RTOL` within
    :data:`BALANCE_CG_ITERS` iterations."""
    diag = L.diagonal()
    act = np.flatnonzero(diag > 0)
    X = np.zeros(R.shape)
    if act.size == 0:
        return X
    La, lab = L[act][:, act], labels[act]
    K = int(lab.max()) + 1
    size = np.bincount(lab, minlength=K)[:, None]
    B = R[act] - (np.stack([np.bincount(lab, weights=col, minlength=K)
                            for col in R[act].T], axis=1) / np.maximum(size, 1))[lab]
    inv = 1.0 / diag[act][:, None]
    Y = np.zeros(B.shape)
    res = B.copy()
    Z = inv * res
    P = Z.copy()
    rz = (res * Z).sum(axis=0)
    norm0 = np.linalg.norm(B, axis=0)
    stop = BALANCE_CG_RTOL * norm0
    for it in range(BALANCE_CG_ITERS):
        rn = np.linalg.norm(res, axis=0)
        if np.all(rn <= stop):
            X[act] = Y
            return X
        if it == 20 and _cg_too_slow(rn, norm0, it):
            return None
        LP = La @ P
        pLp = (P * LP).sum(axis=0)
        alpha = np.divide(rz, pLp, out=np.zeros_like(rz), where=pLp > 0)
        Y += alpha * P
        res -= alpha * LP
        Z = inv * res
        rz_new = (res * Z).sum(axis=0)
        P = Z + np.divide(rz_new, rz, out=np.zeros_like(rz), where=rz > 0) * P
        rz = rz_new
    return None


def _cg_too_slow(rn: np.ndarray, norm0: np.ndarray, it: int) -> bool:
    """Whether the mean rate of the first ``it`` iterations needs more than
    :data:`BALANCE_CG_ITERS` in all to reach :data:`BALANCE_CG_RTOL` (ill-conditioned
    Laplacians, e.g. grids: the LU is then the faster)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = (rn / norm0) ** (1.0 / it)
        need = np.where(rate < 1.0, np.log(BALANCE_CG_RTOL) / np.log(rate), np.inf)
    return bool(np.any(need[norm0 > 0] > BALANCE_CG_ITERS))
