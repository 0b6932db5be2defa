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
matrices; a vertex: conservation exact up to the rounding of its basis solves), and a
second-order cone program for ``Norm2`` at ``d > 1``, solved by Clarabel called directly with
sparse matrices.  Differentiable penalties (``SquaredNorm2``) take ``u_e = lambda A_e grad
phi(v_e)`` plus the correction of least ``sum_e ||delta_e||^2 / (2 lambda A_e)`` (their edge
gap) that meets the node conditions, a QP on Clarabel.

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
from ..terms.losses import smooth_gradients

__all__ = ["recover_flows", "uses_lp", "recovery_scope", "NodeConditions", "node_conditions",
           "fused_components", "cluster_sums", "balance_flows", "SLACK_WEIGHT", "LP_TOL"]

#: The slack weight ``M = SLACK_WEIGHT (1 + ||W||_inf)`` of the node conditions.
SLACK_WEIGHT = 10.0
#: Primal and dual feasibility tolerances given to HiGHS and Clarabel (absolute, on data
#: scaled to ``max(1, ||W||_inf)``).
LP_TOL = 1e-10


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
    st = model.structure()
    n, d = W.shape
    H = np.zeros((n, d, d))
    for b in st.batches:
        Hb = b.hessians(W)
        if Hb is not None:
            H[b.nodes] += Hb
    H[:, np.arange(d), np.arange(d)] += 2.0 * st.l2[:, None]
    B = sp.bsr_matrix((H, np.arange(n), np.arange(n + 1)), shape=(n * d, n * d)).tocsr()
    k = nodes.c.size
    Pn = sp.block_diag([sp.csr_matrix((k, k)) if nodes.P is None else nodes.P, B],
                       format="csr")
    return _Columns(sp.hstack([nodes.A, -B], format="csr"),
                    np.concatenate([nodes.c, np.zeros(n * d)]),
                    np.concatenate([nodes.lb, np.full(n * d, -np.inf)]),
                    np.concatenate([nodes.ub, np.full(n * d, np.inf)]), Pn)


def _flow_block(model: ModelDeclaration) -> sp.csr_matrix:
    """``vec(U) -> vec(-D^T U)`` (``(n d, |E| d)``, row-major vectorization)."""
    return sp.kron(-model.incidence.T, sp.identity(model.dim), format="csr")


def _solve_lp(model: ModelDeclaration, V: np.ndarray, cond: NodeConditions, W: np.ndarray,
              M: float) -> np.ndarray | None:
    """The recovery LP for polyhedral dual balls: ``||u_e||_inf <= lambda A_e`` (the ``l1``
    penalty, and every norm at ``d = 1``), or ``||u_e||_1 <= lambda A_e`` (``l_inf``), with
    ``u = p - q``, ``p, q >= 0``, ``sum_j p_ej + q_ej <= lambda A_e``.  None if HiGHS fails."""
    E, d = V.shape
    cap = model.capacities
    nodes = _node_columns(cond, W, M)
    K = _flow_block(model)
    v = V.ravel()
    box = _dual_ball(model) == "box"
    if box:
        capf = np.repeat(cap, d)
        A_eq = sp.hstack([K, nodes.A], format="csr")
        cost = np.concatenate([-v, nodes.c])
        lb, ub = np.concatenate([-capf, nodes.lb]), np.concatenate([capf, nodes.ub])
        A_ub = b_ub = None
    else:
        A_eq = sp.hstack([K, -K, nodes.A], format="csr")
        cost = np.concatenate([-v, v, nodes.c])
        lb = np.concatenate([np.zeros(2 * E * d), nodes.lb])
        ub = np.concatenate([np.full(2 * E * d, np.inf), nodes.ub])
        ones = sp.kron(sp.identity(E), np.ones((1, d)), format="csr")
        A_ub = sp.hstack([ones, ones, sp.csr_matrix((E, nodes.c.size))], format="csr")
        b_ub = cap
    res = linprog(cost, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=cond.G.ravel(),
                  bounds=np.column_stack([lb, ub]), method="highs",
                  options={"primal_feasibility_tolerance": LP_TOL,
                           "dual_feasibility_tolerance": LP_TOL})
    if res.status != 0 or res.x is None:
        return None
    x = res.x
    u = x[:E * d] if box else x[:E * d] - x[E * d:2 * E * d]
    return u.reshape(E, d)


def _clarabel(P: sp.spmatrix, q: np.ndarray, K: sp.csr_matrix, rhs: np.ndarray,
              nodes: _Columns, cone: tuple[sp.spmatrix, np.ndarray, list] | None
              ) -> np.ndarray | None:
    """Clarabel on ``min x^T P x / 2 + q^T x`` over ``x = (flows, node columns)`` subject to
    the node rows ``[K, A_nodes] x = rhs``, the node columns' bounds and the edge cones
    ``cone = (A_c, b_c, cones)`` (``b_c - A_c x`` in the cones); the flow part of ``x``, or
    None if it fails."""
    nf = K.shape[1]
    nx_ = nf + nodes.c.size
    fin_lb, fin_ub = np.flatnonzero(np.isfinite(nodes.lb)), np.flatnonzero(np.isfinite(nodes.ub))
    Ab = sp.vstack([
        sp.csr_matrix((-np.ones(fin_lb.size), (np.arange(fin_lb.size), nf + fin_lb)),
                      shape=(fin_lb.size, nx_)),
        sp.csr_matrix((np.ones(fin_ub.size), (np.arange(fin_ub.size), nf + fin_ub)),
                      shape=(fin_ub.size, nx_))])
    bb = np.concatenate([-nodes.lb[fin_lb], nodes.ub[fin_ub]])
    blocks, rhs_all = [sp.hstack([K, nodes.A]), Ab], [rhs, bb]
    cones = [clarabel.ZeroConeT(K.shape[0]), clarabel.NonnegativeConeT(bb.size)]
    if cone is not None:
        blocks.append(sp.hstack([cone[0], sp.csr_matrix((cone[0].shape[0], nodes.c.size))]))
        rhs_all.append(cone[1])
        cones += cone[2]
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = LP_TOL
    settings.tol_feas = LP_TOL
    settings.tol_ktratio = 1e-8
    Pn = sp.csr_matrix((nodes.c.size, nodes.c.size)) if nodes.P is None else nodes.P
    Pf = sp.block_diag([P, Pn], format="csc")
    solver = clarabel.DefaultSolver(sp.triu(Pf, format="csc"), np.concatenate([q, nodes.c]),
                                    sp.vstack(blocks, format="csc"), np.concatenate(rhs_all),
                                    cones, settings)
    sol = solver.solve()
    if str(sol.status) not in ("Solved", "AlmostSolved"):
        return None
    return np.asarray(sol.x[:nf])


def _dual_ball(model: ModelDeclaration) -> str:
    """The shape of the dual ball ``||u_e||_* <= lambda A_e``: ``"box"`` (the ``l1``
    penalty, and every norm at ``d = 1``), ``"cross"`` (``l_inf``: the ``l1`` ball) or
    ``"l2"``."""
    q = getattr(model.penalty, "q", None)
    if model.dim == 1 or q == np.inf:
        return "box"
    return "cross" if q == 1.0 else "l2"


def _solve_conic(model: ModelDeclaration, V: np.ndarray, cond: NodeConditions, W: np.ndarray,
                 M: float) -> np.ndarray | None:
    """The recovery problem for norm penalties with the curvature columns of the smooth nodes
    (:func:`_with_curvature`), by Clarabel with sparse matrices: the dual balls as one
    second-order cone ``(lambda A_e, u_e)`` per edge (``Norm2``), or linear inequalities
    (``l1``: the box; ``l_inf``: ``u = p - q``, ``p, q >= 0``, ``sum_j p_ej + q_ej <= lambda
    A_e``).  None if it fails."""
    E, d = V.shape
    cap = model.capacities
    K = _flow_block(model)
    ball = _dual_ball(model)
    if ball == "l2":
        rows = (np.arange(E)[:, None] * (d + 1) + 1 + np.arange(d)).ravel()
        Ac = sp.csr_matrix((-np.ones(E * d), (rows, np.arange(E * d))),
                           shape=(E * (d + 1), E * d))
        bc = np.zeros(E * (d + 1))
        bc[np.arange(E) * (d + 1)] = cap
        cone = (Ac, bc, [clarabel.SecondOrderConeT(d + 1)] * E)
        q = -V.ravel()
    elif ball == "box":
        capf = np.repeat(cap, d)
        eye = sp.identity(E * d, format="csr")
        cone = (sp.vstack([eye, -eye]), np.concatenate([capf, capf]),
                [clarabel.NonnegativeConeT(2 * E * d)])
        q = -V.ravel()
    else:
        ones = sp.kron(sp.identity(E), np.ones((1, d)), format="csr")
        cone = (sp.vstack([-sp.identity(2 * E * d), sp.hstack([ones, ones])]),
                np.concatenate([np.zeros(2 * E * d), cap]),
                [clarabel.NonnegativeConeT(2 * E * d + E)])
        K = sp.hstack([K, -K], format="csr")
        q = np.concatenate([-V.ravel(), V.ravel()])
    x = _clarabel(sp.csr_matrix((q.size, q.size)), q, K, cond.G.ravel(),
                  _with_curvature(model, _node_columns(cond, W, M), W), cone)
    if x is None:
        return None
    u = x[:E * d] if ball != "cross" else x[:E * d] - x[E * d:]
    return u.reshape(E, d)


def _solve_smooth(model: ModelDeclaration, V: np.ndarray, cond: NodeConditions,
                  W: np.ndarray, M: float) -> np.ndarray | None:
    """Differentiable penalties: ``u = lambda A_e grad phi(v_e) + delta`` with the correction
    ``delta`` of least ``sum_e ||delta_e||^2 / (2 lambda A_e)`` (the edge Fenchel-Young gap of
    ``SquaredNorm2``, its second-order term for others) meeting the node conditions (a QP,
    Clarabel); the gradient flows alone where it fails."""
    E, d = V.shape
    cap = model.capacities
    U0 = cap[:, None] * model.penalty.rows_gradient(V)
    K = _flow_block(model)
    rhs = cond.G.ravel() - K @ U0.ravel()
    if not np.abs(rhs).max(initial=0.0) > 0:
        return U0
    delta = _clarabel(sp.diags(np.repeat(1.0 / cap, d)), np.zeros(E * d), K, rhs,
                      _with_curvature(model, _node_columns(cond, W, M), W), None)
    return U0 if delta is None else U0 + delta.reshape(E, d)


def uses_lp(model: ModelDeclaration) -> bool:
    """Whether :func:`recover_flows` without ``curvature`` solves the LP (a norm penalty
    with a polyhedral dual ball), so that the ``curvature`` variant is a different problem."""
    return model.penalty.is_norm and _dual_ball(model) != "l2"


def recover_flows(model: ModelDeclaration, weights: np.ndarray, curvature: bool = False
                  ) -> np.ndarray | None:
    """Flows ``U`` (``(|E|, d)``) recovered from the weights ``W`` (checked ``(n, d)``) by the
    optimality conditions (module docstring): at an exact minimizer they satisfy the edge
    and node conditions of (16) exactly (up to the solver's rounding), elsewhere they
    minimize the linearized gap.  ``curvature``: the demands of the smooth nodes may also
    leave their gradients along the curvature of the loss, at the second-order cost of their
    Fenchel-Young gaps (:func:`_with_curvature`; a QP/SOCP on Clarabel: better away from the
    optimum, where the exact gradients over-constrain the flows); always so for ``Norm2`` at
    ``d > 1`` and differentiable penalties.  None when the model is outside
    :func:`recovery_scope` or the solver fails (the caller keeps its other flows)."""
    if recovery_scope(model) is not None:
        return None
    W = np.asarray(weights, dtype=float)
    V = model.empirical_graph.diff(W)
    M = SLACK_WEIGHT * (1.0 + float(np.abs(W).max(initial=0.0)))
    cond = node_conditions(model, W)
    if not model.penalty.is_norm:
        return _solve_smooth(model, V, cond, W, M)
    if curvature or _dual_ball(model) == "l2":
        return _solve_conic(model, V, cond, W, M)
    return _solve_lp(model, V, cond, W, M)


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


def balance_flows(DF: sp.csr_matrix, c: np.ndarray, labels: np.ndarray,
                  R: np.ndarray) -> np.ndarray:
    """``U = C D_F X`` with ``D_F^T C D_F X = R`` (``(n, k)``, one column per coordinate): the
    minimum of ``sum_e ||u_e||^2 / c_e`` subject to ``D_F^T U = R`` (a capacity-weighted
    electrical flow on the fused edges ``D_F``); the Laplacian is grounded at one node per
    cluster (``labels``; ``R`` must sum to 0 on every cluster)."""
    n = DF.shape[1]
    L = (DF.T @ sp.diags(c) @ DF).tocsr()
    roots = np.unique(labels, return_index=True)[1]
    keep = np.setdiff1d(np.arange(n), roots)
    X = np.zeros(R.shape)
    if keep.size:
        lu = spl.splu(sp.csc_matrix(L[keep][:, keep]), permc_spec="MMD_AT_PLUS_A",
                      options={"SymmetricMode": True})
        X[keep] = lu.solve(np.ascontiguousarray(R[keep]))
    return c[:, None] * (DF @ X)
