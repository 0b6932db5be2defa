"""Certified duality gaps (34) for candidate GTV solutions, with dual-feasibility repair.

For weights ``W`` and edge flows ``U``, weak duality gives ``P(W) >= P* >= D(U')`` for every
dual-feasible ``U'``, so ``gap = P(W) - D(U')`` bounds the suboptimality ``P(W) - P*``.
:func:`certify` computes such a bound cheaply (numpy and sparse linear algebra for the common
losses, one small cached CVXPY problem for the others) and reports how it got there.

**Dual value.**  ``D(U) = -sum_i h_i*(s_i) - sum_e lambda A_e phi*(u_e/(lambda A_e))`` with
``s = -D^T U`` and ``h_i = L_i + eta_i||.||_1 + kappa_i||.||^2 + iota_{C_i}`` (MATH.md §3).
Every node conjugate is evaluated as an *upper bound* (a feasible point of the infimal
convolution that defines it), so the computed ``D`` never exceeds the true one:

- closed forms for zero, quadratic and squared losses (without ``l1`` or constraints);
- smooth data-fit losses (logistic, Huber; without ``l1`` or constraints): a batched damped
  Newton method on ``sup_w s^T w - h(w)`` warm-started at the candidate weights; the split is
  read off the maximizer (row duals ``v_r = ell'(x_r^T w)``, always in the domain of ``ell*``)
  and evaluated exactly (:func:`_newton_conjugates`);
- for the other library nodes (and Newton failures) the infimal-convolution problem of
  :func:`gtvmodel.dual.node_conjugate_parts`, stacked over all of them in one CVXPY problem
  built once per model (DPP) and re-solved; the solver's point is projected into the domains
  and the value recomputed in numpy, so solver inaccuracy cannot make it too small;
- conic nodes (symbolic losses/constraints): :func:`gtvmodel.conic.conjugate_values`, plus its
  stated solver tolerance.

**Residuals and the radius R.**  Where ``s_i`` lies (numerically) just outside the domain of
``h_i*`` (a zero-loss node needs ``s_i = 0`` exactly), the part ``rho_i`` outside it is charged
``R ||rho_i||_1``: this is exactly the conjugate of ``h_i + iota{||w||_inf <= R}``, so the bound
is rigorous for the problem with the extra constraint ``||w_i||_inf <= R``, which has the same
optimum whenever ``||w*||_inf <= R`` (default ``R = 10 max(1, ||W||_inf)``).  The total of these
charges is part of the reported :attr:`Certificate.tolerance`; a node with
``||rho_i||_inf > feas_tol`` (relative) is *not* dual feasible and the gap is ``+inf``.

**Repair** (:func:`repair_flows`).  Raw flows (e.g. iterates of Algorithm 1) are usually not dual
feasible.  Before the dual value is taken:

1. capacities ``||u_e||_* <= lambda A_e`` (norm penalties) by the row-wise projection
   :meth:`~gtvmodel.penalties.Penalty.project_dual_ball`;
2. subspace conditions -- ``(D^T u)_i = 0`` at zero-loss nodes and ``(D^T u)_i in range(X_i^T)``
   at squared-loss nodes with ``rank X_i < d`` (no regularizers/constraints) -- by the
   minimum-norm correction ``delta = -A^T (A A^T)^+ A u`` of the stacked linear conditions
   ``A u = 0`` (``A`` sparse; ``A A^T`` through one cached eigen-decomposition when small,
   conjugate gradients otherwise; ``D`` is never formed dense);
3. steps 1-2 alternate a few times (projections onto two convex sets), then the flows are
   scaled by ``theta = min(1, min_e lambda A_e / ||u_e||_*)``: the dual domain is convex and
   contains ``u = 0`` (every library ``L_i*`` is finite at 0), and scaling keeps step 2;
4. bounded conjugate domains (logistic, hinge, absolute, Huber rows, ``l1``) and cones
   (``NonNeg``, half-infinite boxes): if nodes remain outside, (a) at smooth nodes the flows
   are corrected (minimum-norm, sparse) towards demands equal to the gradients at the weights,
   which lie inside the domains; (b) the largest ``theta`` with ``theta s_i in dom h_i*`` (one
   cached LP) is used when ``theta >= 1/2``; (c) otherwise (0 can be a vertex of a domain, e.g.
   for logistic rows with separable data) the flows are projected onto the dual domain by one
   convex program as large as the dual problem (:func:`project_flows`, only with
   ``project="auto"``).  Nodes still outside are listed in
   :attr:`Certificate.dual_infeasible_nodes` and the gap is ``+inf`` (sound, never
   optimistic).

**Flows from weights** (``flows=None``, :func:`flows_from_weights`): start from the edge
optimality condition ``u_e in lambda A_e dphi(v_e)`` (the penalty's dual update applied to
``v_e/eps``), then add the minimum-norm correction that matches the node condition
``-(D^T u)_i = grad h_i(w_i)`` at every node with a gradient (smooth loss, no ``l1``, no
constraints; in a connected component where all nodes have one, the component mean of the
gradients is removed first, since flows can only move demand around) on the edges left free
by the edge condition, alternating with the capacity projection; then repair.

**What a certificate does not say**: it bounds the objective suboptimality, not the distance
of ``W`` to the minimizer (that needs strong convexity); weights that violate node constraints
by more than ``feas_tol`` get ``gap = inf``; and a finite gap with a large
:attr:`Certificate.tolerance` rests on ``||w*||_inf <= R``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import cvxpy as cp
import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
import scipy.sparse.linalg as spla

from .errors import GTVError, ParameterError, SolverError
from .losses import (
    QuadraticLoss,
    SquaredLoss,
    quadratic_conjugate_rows,
    squared_conjugate_rows,
    zero_conjugate_rows,
)

if TYPE_CHECKING:
    from .model import GTVModel

__all__ = ["Certificate", "certify", "repair_flows", "flows_from_weights", "dual_value"]

_EPS = np.finfo(float).eps
#: Largest ``A A^T`` (rows) of the minimum-norm flow correction solved densely.
_DENSE_MAX = 3000


@dataclass
class Certificate:
    """A certified bound ``gap >= P(W) - P*`` on the suboptimality of ``W``.

    Attributes
    ----------
    primal_value : float
        ``P(W)`` (losses, regularizers and GTV term; node constraints are checked separately).
    dual_value : float
        ``D(U')`` at the repaired flows ``U'`` (``-inf`` if no dual-feasible point was found).
    gap : float
        ``max(P(W) - D(U'), 0)``, or ``+inf`` when ``W`` violates node constraints or ``U'`` is
        not dual feasible.  Sound: ``gap >= P(W) - P* - tolerance``.
    relative_gap : float
        ``gap / max(1, |P(W)|)``.
    tolerance : float
        The certificate's own numerical tolerance: floating-point rounding of the sums plus the
        radius charges ``R ||rho_i||_1`` (module docstring) plus conic solver tolerances.
    feasible : bool
        Node constraints hold within ``feas_tol`` (scaled by ``max(1, ||W||_inf)``).
    infeasible_nodes : list
        Labels of the nodes that violate their constraints.
    dual_feasible : bool
        The repaired flows are dual feasible (within ``feas_tol``).
    dual_infeasible_nodes : list
        Labels of nodes whose demand ``s_i`` stays outside the domain of ``h_i*``.
    repaired : bool
        Whether the flows had to be changed; ``repairs`` says what was done.
    repaired_flows : ndarray (|E|, d)
        The dual-feasible flows ``U'`` whose dual value is reported.
    flows_from_weights : bool
        True when the flows were built from ``W`` (``flows=None``).
    kkt : dict
        ``flow_conservation``: ``||D^T u + grad h(w)||_2`` over nodes with a gradient (original
        flows; ``nan`` if none); ``capacity_violation``: ``max_e (||u_e||_* - lambda A_e)_+``
        (original flows, norm penalties); ``complementarity``: the edge Fenchel-Young gaps
        ``sum_e lambda A_e phi(v_e) + lambda A_e phi*(u'_e/(lambda A_e)) - u'_e^T v_e``;
        ``node_gap``: the node Fenchel-Young gaps ``sum_i h_i(w_i) + h_i*(s_i) - s_i^T w_i``
        (``complementarity + node_gap = gap``).
    node_gaps, edge_gaps : ndarray
        The per-node and per-edge Fenchel-Young gaps (where the gap is finite).
    radius : float
        The radius ``R`` of the residual charges.
    times : dict
        Seconds spent in repair and in the dual evaluation.
    """

    primal_value: float
    dual_value: float
    gap: float
    relative_gap: float
    tolerance: float
    feasible: bool
    infeasible_nodes: list[Any]
    dual_feasible: bool
    dual_infeasible_nodes: list[Any]
    repaired: bool
    repairs: list[str]
    repaired_flows: np.ndarray = field(repr=False)
    flows_from_weights: bool = False
    kkt: dict[str, float] = field(default_factory=dict)
    node_gaps: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    edge_gaps: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    radius: float = 0.0
    feas_tol: float = 0.0
    tol: float = 1e-6
    times: dict[str, float] = field(default_factory=dict)

    def certifies(self, tol: float | None = None) -> bool:
        """True if ``gap <= tol * max(1, |P(W)|)`` (relative suboptimality at most ``tol``;
        default: the ``tol`` given to :func:`certify`)."""
        tol = self.tol if tol is None else tol
        return bool(np.isfinite(self.gap) and self.relative_gap <= tol)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no arrays)."""
        def f(x: float) -> float | str:
            x = float(x)
            return x if np.isfinite(x) else ("inf" if x > 0 else "-inf" if x < 0 else "nan")

        return {
            "primal_value": f(self.primal_value), "dual_value": f(self.dual_value),
            "gap": f(self.gap), "relative_gap": f(self.relative_gap),
            "tolerance": f(self.tolerance), "feasible": self.feasible,
            "infeasible_nodes": [_label(v) for v in self.infeasible_nodes],
            "dual_feasible": self.dual_feasible,
            "dual_infeasible_nodes": [_label(v) for v in self.dual_infeasible_nodes],
            "repaired": self.repaired, "repairs": list(self.repairs),
            "flows_from_weights": self.flows_from_weights,
            "kkt": {k: f(v) for k, v in self.kkt.items()},
            "radius": f(self.radius), "feas_tol": f(self.feas_tol), "tol": f(self.tol),
            "certified": self.certifies(),
            "times": {k: float(v) for k, v in self.times.items()},
        }

    def summary(self) -> str:
        """A human-readable multi-line report."""
        lines = [
            f"primal value P(W)      {self.primal_value:.12g}",
            f"dual value D(U')       {self.dual_value:.12g}",
            f"gap                    {self.gap:.6g}   (relative {self.relative_gap:.3g}, "
            f"tolerance {self.tolerance:.3g})",
            f"primal feasible        {self.feasible}"
            + ("" if self.feasible else f"  violated at {self.infeasible_nodes[:10]}"),
            f"dual feasible          {self.dual_feasible}"
            + ("" if self.dual_feasible else f"  fails at {self.dual_infeasible_nodes[:10]}"),
            "flows                  "
            + ("built from the weights" if self.flows_from_weights else "given")
            + (f"; repaired: {'; '.join(self.repairs)}" if self.repaired else "; not repaired"),
        ]
        for k, v in self.kkt.items():
            lines.append(f"kkt {k:<18} {v:.3g}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)


def _label(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool)) or v is None else repr(v)


# ===================================================================== linear algebra helpers
class _MinNormSolver:
    """Minimum-norm solutions ``delta = A^T z`` of ``A delta = b`` (``b`` in ``range(A)``).

    ``A A^T`` (sparse) may be singular (e.g. a component of zero-loss nodes).  With at most
    :data:`_DENSE_MAX` rows its pseudo-inverse is applied through one eigen-decomposition
    (computed once; the solver is cached on the model, so repeated certificates, e.g. every
    ``record_every`` iterations of Algorithm 1, reuse it); larger systems use
    Jacobi-preconditioned conjugate gradients, which converge on consistent singular systems up
    to rounding.  A few refinement rounds follow.  Whatever residual remains is not hidden: the
    dual evaluation charges it (``R ||rho||_1``) or declares the node infeasible.
    """

    def __init__(self, A: sp.csr_matrix, maxiter: int = 3000):
        self.maxiter = maxiter
        self.A = A.tocsr()
        self.AT = self.A.T.tocsr()
        self.K = (self.A @ self.AT).tocsr()
        diag = self.K.diagonal()
        self.M = sp.diags(np.where(diag > 0, 1.0 / np.where(diag > 0, diag, 1.0), 1.0))
        self.eig: tuple[np.ndarray, np.ndarray] | None = None
        if self.K.shape[0] <= _DENSE_MAX:
            ev, V = np.linalg.eigh(self.K.toarray())
            keep = ev > 1e-12 * max(float(ev.max(initial=0.0)), 1e-300)
            self.eig = (ev[keep], V[:, keep])

    def _z(self, r: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
        if self.eig is not None:
            ev, V = self.eig
            return V @ ((V.T @ r) / ev)
        z, _info = spla.cg(self.K, r, rtol=rtol, atol=0.0,
                           maxiter=min(10 * self.K.shape[0] + 100, self.maxiter), M=self.M)
        return z

    def solve(self, b: np.ndarray, rounds: int = 3) -> np.ndarray:
        delta = np.zeros(self.A.shape[1])
        r = b.copy()
        nb = max(float(np.linalg.norm(b)), 1e-300)
        for _ in range(rounds):
            if np.linalg.norm(r) <= 1e-15 * nb:
                break
            delta += self.AT @ self._z(r)
            r = b - self.A @ delta
        return delta


def _divergence_rows(model: GTVModel, nodes: np.ndarray, bases: list[np.ndarray] | None
                     ) -> sp.csr_matrix:
    """Sparse ``A`` with ``A vec(U) = [N_i^T (D^T U)_i]_{i in nodes}`` (``N_i = I`` if
    ``bases`` is None), acting on the C-ordered flat flows."""
    d = model.dim
    Dt = model.incidence.T.tocsr()[nodes]  # (k, E)
    A = sp.kron(Dt, sp.eye(d), format="csr")  # (k d, E d)
    if bases is None:
        return A
    N = sp.block_diag([B.T for B in bases], format="csr")  # (sum r_i, k d)
    return (N @ A).tocsr()


# ===================================================================== node classification
@dataclass
class _NodeKinds:
    """How each node's conjugate is evaluated."""

    zero: np.ndarray  # zero loss, no constraints (closed form with regularizers)
    quad: tuple[np.ndarray, np.ndarray]  # positions, centres (no constraints)
    squared: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    general: np.ndarray  # library nodes solved by the cached CVXPY problem
    conic: np.ndarray
    subspace: np.ndarray  # positions with a subspace domain (repair step 2)
    subspace_bases: list[np.ndarray] | None  # null-space bases N_i (None: all N_i = I)
    gradient: np.ndarray  # boolean mask of nodes with a gradient of h_i
    #: smooth data-fit nodes (no l1, no constraints) of the general set, per loss class:
    #: ``(cls, positions, X rows, y, p, c, local node of each row, kappa)`` (Newton path)
    smooth: list[tuple] = field(default_factory=list)


def _kinds(model: GTVModel) -> _NodeKinds:
    cached = model._cache.get("cert_kinds")
    if cached is not None:
        return cached
    from .dual import conic_positions

    st = model.structure()
    n, d = model.num_nodes, model.dim
    conic = conic_positions(model)
    constrained = np.zeros(n, dtype=bool)
    constrained[[i for i in range(n) if model.constraints_at(i)]] = True
    constrained[conic] = False
    free = ~constrained
    free[conic] = False
    handled = np.zeros(n, dtype=bool)
    handled[conic] = True
    gradient = np.zeros(n, dtype=bool)
    quad_idx, quad_a = np.zeros(0, dtype=np.int64), np.zeros((0, d))
    sq = (np.zeros(0, dtype=np.int64), np.zeros((0, d)), np.zeros((0, d, d)), np.zeros((0, d)),
          np.zeros(0))
    subspace: list[int] = []
    bases: list[np.ndarray] = []
    for b in st.batches:
        sel = free[b.nodes]
        if b.cls is QuadraticLoss:
            quad_idx, quad_a = b.nodes[sel], b.a[sel]
            handled[quad_idx] = True
        elif b.cls is SquaredLoss:
            ok = sel & (st.l1[b.nodes] == 0)
            idx = b.nodes[ok]
            losses = [b.losses[j] for j in np.flatnonzero(ok)]
            if idx.size:
                # Q_i = X_i^T X_i / m_i, q_i, ||y_i||^2 / m_i for all nodes at once from the
                # batch's stacked rows, then one batched eigen-decomposition
                local = np.full(n, -1, dtype=np.int64)
                local[idx] = np.arange(idx.size)
                rows = np.flatnonzero(local[b.row_node] >= 0)
                rn = local[b.row_node[rows]]
                Xd = np.vstack([ls.X for ls in losses])
                cr, yr = b.c[rows], b.y[rows]
                Q = np.zeros((idx.size, d, d))
                np.add.at(Q, rn, (cr[:, None] * Xd)[:, :, None] * Xd[:, None, :])
                e, V = np.linalg.eigh(Q)
                q = np.zeros((idx.size, d))
                np.add.at(q, rn, (cr * yr)[:, None] * Xd)
                yy = np.bincount(rn, cr * yr**2, minlength=idx.size)
                sq = (idx, e, V, q, yy)
                handled[idx] = True
                thr = 1e-10 * np.maximum(e.max(axis=1), 1e-300)
                for j, i in enumerate(idx):
                    if st.l2[i] == 0 and (e[j] <= thr[j]).any():
                        subspace.append(int(i))
                        bases.append(V[j][:, e[j] <= thr[j]])
        if b.cls.base_smooth:
            gradient[b.nodes] = True
    in_batch = np.zeros(n, dtype=bool)
    for b in st.batches:
        in_batch[b.nodes] = True
    zero = np.flatnonzero(free & ~in_batch)
    handled[zero] = True
    gradient[zero] = True
    gradient &= free & (st.l1 == 0)
    # zero-loss nodes without regularizers need (D^T u)_i = 0: subspace {0}
    for i in zero:
        if st.l1[i] == 0 and st.l2[i] == 0:
            subspace.append(int(i))
            bases.append(np.eye(d))
    order = np.argsort(subspace) if subspace else np.zeros(0, dtype=np.int64)
    sub = np.array(subspace, dtype=np.int64)[order]
    sub_bases = [bases[j] for j in order]
    general = np.flatnonzero(~handled)
    smooth = []
    for b in st.batches:
        if not b.is_datafit or not b.cls.base_smooth or b.cls is SquaredLoss:
            continue
        ok = free[b.nodes] & (st.l1[b.nodes] == 0)
        if not ok.any():
            continue
        idx = b.nodes[ok]
        local = np.full(n, -1, dtype=np.int64)
        local[idx] = np.arange(idx.size)
        rows = np.flatnonzero(local[b.row_node] >= 0)
        Xd = np.vstack([b.losses[j].X for j in np.flatnonzero(ok)])
        smooth.append((b.cls, idx, Xd, b.y[rows], None if b.p is None else b.p[rows],
                       b.c[rows], local[b.row_node[rows]], st.l2[idx]))
    kinds = _NodeKinds(zero, (quad_idx, quad_a), sq, general, conic, sub,
                       sub_bases, gradient, smooth)
    model._cache["cert_kinds"] = kinds
    return kinds


# ===================================================================== flows
def _capacities(model: GTVModel) -> np.ndarray | None:
    return model.lam * model.edge_weights if model.penalty.is_norm else None


def flows_from_weights(model: GTVModel, weights: Any, rounds: int = 8,
                       start: Any = None) -> np.ndarray:
    """Edge flows built from weights (module docstring), not yet repaired
    (see :func:`repair_flows`).

    1. Edge condition ``u_e in lambda A_e dphi(v_e)``: on edges with ``||v_e|| > 1e-6
       max(1, ||W||_inf)`` (and on every edge of a differentiable penalty) ``u_e`` is the
       penalty's dual update of ``v_e / eps`` for a tiny ``eps``, i.e. ``lambda A_e grad
       phi(v_e)``; the other edges (``w_{e+} = w_{e-}``: flow strictly inside its capacity)
       are *free* and start at 0 (for the ``l1`` penalty, coordinate by coordinate).
    2. Node condition ``-(D^T u)_i = grad h_i(w_i)`` at nodes with a gradient (component
       means removed where every node of a connected component has one): the free edges get
       the minimum-norm least-squares correction (LSQR); if no edge is free, every edge is
       corrected (cached minimum-norm solver).  For norm penalties this alternates with the
       projection onto the capacities (at most ``rounds`` times, until both hold).

    With ``start`` (flows), step 1 is skipped: every edge of ``start`` is corrected (a cheap
    repair of given flows towards the node conditions of the weights).
    """
    W = model.check_weights(weights)
    E, d = model.num_edges, model.dim
    if E == 0:
        return np.zeros((0, d))
    kinds = _kinds(model)
    st = model.structure()
    pen = model.penalty
    V = model.empirical_graph.diff(W)
    lamA = model.lam * model.edge_weights
    scale = max(1.0, float(np.abs(W).max(initial=0.0)))
    eps = 1e-12 * scale
    free = np.zeros((E, d), dtype=bool)
    if start is not None:
        U = model.check_flows(start).copy()
    else:
        try:
            U = pen.dual_update(V / eps, 1.0 / eps, lamA)
        except GTVError:
            U = np.zeros((E, d))
    if pen.is_norm and start is None:
        small = np.abs(V) <= 1e-6 * scale
        # l1 penalty: separable, each coordinate with v_ej = 0 is free; other norms: rows
        free = small if getattr(pen, "p", None) == 1 else np.repeat(
            small.all(axis=1)[:, None], d, axis=1)
        U[free] = 0.0
    idx = np.flatnonzero(kinds.gradient)
    if idx.size == 0:
        return U
    G = 2.0 * st.l2[:, None] * W
    for b in st.batches:
        if b.cls.base_smooth:
            G += b.gradients(W)
    target = -G[idx]
    # in a connected component where every node is matched, flows can only move demand
    # around: only the component-mean-free part of the gradients is reachable
    ncomp, comp = csgraph.connected_components(model.incidence.T @ model.incidence,
                                               directed=False)
    allm = np.bincount(comp, weights=(~kinds.gradient).astype(float), minlength=ncomp) == 0
    full = allm[comp[idx]]
    if full.any():
        ci = comp[idx][full]
        sums = np.zeros((ncomp, d))
        np.add.at(sums, ci, target[full])
        target[full] -= sums[ci] / np.bincount(ci, minlength=ncomp)[ci][:, None]
    target = target.ravel()
    flat = U.ravel().copy()
    cap = _capacities(model)
    if free.any():  # correct the free edge entries only: least squares (LSQR)
        A = _divergence_rows(model, idx, None)
        cols = np.flatnonzero(free.ravel())
        Af = A[:, cols]

        def correct(r: np.ndarray) -> np.ndarray:
            out = np.zeros(E * d)
            out[cols] = spla.lsqr(Af, r, atol=1e-14, btol=1e-14,
                                  iter_lim=min(20 * Af.shape[1] + 100, 1000))[0]
            return out
    else:  # every edge: the cached minimum-norm solver on the gradient nodes
        solver = model._cache.get("cert_gradient")
        if solver is None:
            # a heuristic starting point: a rough solve is enough (soundness does not depend
            # on it), so CG is capped at 200 iterations on large graphs
            solver = _MinNormSolver(_divergence_rows(model, idx, None), maxiter=200)
            model._cache["cert_gradient"] = solver
        A = solver.A

        def correct(r: np.ndarray) -> np.ndarray:
            return solver.solve(r, rounds=1)
    for _ in range(rounds):
        flat = flat + correct(target - A @ flat)
        if np.abs(target - A @ flat).max(initial=0.0) > 1e-6 * scale and not free.any():
            break  # not converging (large ill-conditioned graph): leave it to the repair
        if cap is None:
            break
        Uc = flat.reshape(E, d)
        if np.max(pen.dual_norm(Uc) - cap, initial=0.0) <= 1e-12 * scale:
            break
        # alternate with the capacity projection (POCS between the two convex sets)
        flat = pen.project_dual_ball(Uc, cap).ravel()
    return flat.reshape(E, d)


def repair_flows(model: GTVModel, flows: Any, rounds: int = 4) -> tuple[np.ndarray, list[str]]:
    """Make flows dual feasible where it is cheap (module docstring, steps 1-3).

    Returns ``(repaired_flows, repairs)`` where ``repairs`` describes each change made."""
    U = model.check_flows(flows).copy()
    E, d = model.num_edges, model.dim
    repairs: list[str] = []
    if E == 0:
        return U, repairs
    kinds = _kinds(model)
    cap = _capacities(model)
    pen = model.penalty
    A = solver = None
    if kinds.subspace.size:
        solver = model._cache.get("cert_subspace")
        if solver is None:
            solver = _MinNormSolver(_divergence_rows(model, kinds.subspace, None if all(
                B.shape[1] == d for B in kinds.subspace_bases) else kinds.subspace_bases))
            model._cache["cert_subspace"] = solver
        A = solver.A
    scale = max(1.0, float(np.abs(U).max(initial=0.0)))

    def cap_excess(U_: np.ndarray) -> float:
        return float(np.max(pen.dual_norm(U_) - cap, initial=0.0)) if cap is not None else 0.0

    def sub_res(U_: np.ndarray) -> float:
        return float(np.abs(A @ U_.ravel()).max(initial=0.0)) if A is not None else 0.0

    did_cap = did_sub = False
    for _ in range(rounds):
        if cap is not None and cap_excess(U) > 1e-12 * scale:
            U = pen.project_dual_ball(U, cap)
            did_cap = True
        if A is not None and sub_res(U) > 1e-13 * scale:
            U = U - solver.solve(A @ U.ravel()).reshape(E, d)
            did_sub = True
        if cap_excess(U) <= 1e-12 * scale:
            break
    if did_cap:
        repairs.append("projected flows onto the capacities ||u_e||_* <= lambda A_e")
    if did_sub:
        repairs.append(f"minimum-norm flow correction for the subspace conditions at "
                       f"{kinds.subspace.size} node(s) (zero loss: (D^T u)_i = 0; squared loss "
                       "with rank X_i < d: (D^T u)_i in range(X_i^T))")
    if cap is not None:
        dn = pen.dual_norm(U)
        over = dn > cap
        if over.any():
            theta = float(np.min(np.where(over, cap / np.where(over, dn, 1.0), 1.0)))
            theta *= 1.0 - 4.0 * _EPS
            U = theta * U
            repairs.append(f"scaled all flows by theta = {theta:.12g} to meet the capacities")
            # rounding can leave the last ulp above capacity: clip those rows exactly
            dn = pen.dual_norm(U)
            bad = dn > cap
            if bad.any():
                U[bad] *= (cap[bad] / dn[bad] * (1.0 - 4.0 * _EPS))[:, None]
    return U, repairs


# ===================================================================== dual value
def _newton_conjugates(group: tuple, S: np.ndarray, W0: np.ndarray, iters: int = 40
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Conjugates of smooth data-fit nodes (no ``l1``/constraints) in numpy, all nodes at once.

    Damped Newton on the concave ``f(w) = s^T w - L(w) - kappa ||w||^2`` from the candidate
    weights, then the split read off the maximizer: row duals ``v_r = ell'(x_r^T w)`` (always in
    the domain of ``ell*``), ``s_l2 = 2 kappa w``.  The value ``sum_r ell*(v_r)/m + ||s_l2||^2 /
    (4 kappa)`` is an exact evaluation at a feasible split, hence an upper bound of ``h*(s)`` once
    the residual ``rho = s - X^T v/m - s_l2`` is charged (absorbed into ``s_l2`` when
    ``kappa > 0``).  Where ``s`` is outside the domain the iteration diverges and ``rho`` stays
    large: the caller then uses the CVXPY path for those nodes.
    Returns ``(values, rho, converged)`` for the group's nodes."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        # huge trial steps (singular Hessians, s outside the domain) are rejected by the line
        # search or end as non-converged: no warnings for them
        return _newton_conjugates_impl(group, S, W0, iters)


def _newton_conjugates_impl(group: tuple, S: np.ndarray, W0: np.ndarray, iters: int
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cls, idx, X, y, p, c, rn, kappa = group
    k, d = idx.size, X.shape[1]
    w = W0.copy()
    cx = c[:, None] * X

    def parts(w_):
        t = np.einsum("rj,rj->r", X, w_[rn])
        return t, cls._ell(t, y, p)

    def f(w_, ell):
        return (S * w_).sum(1) - np.bincount(rn, c * ell, minlength=k) - kappa * (w_**2).sum(1)

    t, ell = parts(w)
    fw = f(w, ell)
    eye = np.eye(d)
    for _ in range(iters):
        d1 = cls._ell_d1(t, y, p)
        grad = S - _rowsum(rn, cx * d1[:, None], k) - 2 * kappa[:, None] * w
        gs = np.abs(grad).max(axis=1)
        if gs.max(initial=0.0) <= 1e-14 * max(1.0, float(np.abs(S).max(initial=0.0))):
            break
        d2 = cls._ell_d2(t, y, p)
        H = np.zeros((k, d, d))
        np.add.at(H, rn, (cx * d2[:, None])[:, :, None] * X[:, None, :])
        H += 2 * kappa[:, None, None] * eye
        H += (1e-12 * np.maximum(np.trace(H, axis1=1, axis2=2), 1e-300))[:, None, None] * eye
        step = np.linalg.solve(H, grad[:, :, None])[:, :, 0]
        alpha = np.ones(k)
        for _ls in range(30):  # backtracking, node by node (f is concave)
            wn = w + alpha[:, None] * step
            tn, elln = parts(wn)
            fn = f(wn, elln)
            bad = ~(fn >= fw - 1e-15 * np.abs(fw))
            if not bad.any():
                break
            alpha[bad] *= 0.5
        ok = fn >= fw - 1e-15 * np.abs(fw)
        w = np.where(ok[:, None], wn, w)
        fw = np.where(ok, fn, fw)
        t, ell = parts(w)
    v = cls._ell_d1(t, y, p)
    contrib = _rowsum(rn, cx * v[:, None], k)
    s2 = 2 * kappa[:, None] * w
    rho = S - contrib - s2
    pos = kappa > 0
    s2[pos] += rho[pos]
    rho[pos] = 0.0
    val = np.bincount(rn, c * cls.ell_conjugate(v, y, p), minlength=k)
    val[pos] += (s2[pos] ** 2).sum(1) / (4 * kappa[pos])
    gres = np.abs(S - contrib - 2 * kappa[:, None] * w).max(axis=1)
    converged = np.isfinite(val) & (gres <= 1e-10 * np.maximum(1.0, np.abs(S).max(axis=1)))
    return val, rho, converged


def _rowsum(rn: np.ndarray, A: np.ndarray, k: int) -> np.ndarray:
    """Sum the rows of ``A`` (``(M, d)``) by node: ``(k, d)``."""
    out = np.zeros((k, A.shape[1]))
    np.add.at(out, rn, A)
    return out


def _general_problem(model: GTVModel, nodes: np.ndarray, key: str = "cert_general"):
    """Cached CVXPY problem: min sum parts cost + R ||rho||_1 s.t. sum contrib + rho = S."""
    cached = model._cache.get(key)
    if cached is not None and np.array_equal(cached[4], nodes):
        return cached
    from .dual import node_conjugate_parts

    k, d = len(nodes), model.dim
    S = cp.Parameter((k, d), name="S")
    R = cp.Parameter(nonneg=True, name="R")
    rho = cp.Variable((k, d), name="rho")
    parts = node_conjugate_parts(model, nodes)
    total: cp.Expression = rho
    costs: list[cp.Expression] = [R * cp.sum(cp.abs(rho))]
    cons: list[cp.Constraint] = []
    for p in parts:
        total = total + p.contrib
        costs.append(p.cost)
        cons += p.constraints
    cons.append(total == S)
    prob = cp.Problem(cp.Minimize(cp.sum(cp.hstack(costs))), cons)
    cached = (prob, S, R, parts, nodes)
    model._cache[key] = cached
    return cached


def _evaluate_parts(parts, k: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    contrib = np.zeros((k, d))
    cost = np.zeros(k)
    for p in parts:
        c_, k_ = p.evaluate()
        contrib += c_
        cost += k_
    return contrib, cost


def _gauge_problem(model: GTVModel, nodes: np.ndarray):
    """Cached LP: the largest ``theta_i in [0, 1]`` with ``theta_i s_i in dom h_i*``."""
    cached = model._cache.get("cert_gauge")
    if cached is not None:
        return cached
    from .dual import node_conjugate_parts

    k, d = len(nodes), model.dim
    S = cp.Parameter((k, d), name="S")
    theta = cp.Variable(k, name="theta")
    parts = node_conjugate_parts(model, nodes)
    total: cp.Expression = cp.Constant(np.zeros((k, d)))
    cons: list[cp.Constraint] = [theta >= 0, theta <= 1]
    for p in parts:
        total = total + p.contrib
        cons += p.constraints
    cons.append(total == cp.multiply(cp.reshape(theta, (k, 1), order="C") @ np.ones((1, d)),
                                     S))
    prob = cp.Problem(cp.Maximize(cp.sum(theta)), cons)
    cached = (prob, S, theta)
    model._cache["cert_gauge"] = cached
    return cached


def _domain_scale(model: GTVModel, S: np.ndarray, bad: np.ndarray,
                  solver: str | None = None) -> float:
    """A ``theta in [0, 1]`` with ``theta s_i in dom h_i*`` at the listed nodes (0 if none is
    found).  Closed form for zero losses with ``l1`` (box domain), the cached LP of
    :func:`_gauge_problem` for the other library nodes; other nodes (subspace or conic) cannot
    be fixed by scaling and give 0."""
    from .exact import run_solver

    kinds = _kinds(model)
    st = model.structure()
    theta = 1.0
    rest = np.setdiff1d(bad, kinds.general)
    for i in rest:
        if i in kinds.zero and st.l1[i] > 0 and st.l2[i] == 0:
            theta = min(theta, float(st.l1[i] / max(np.abs(S[i]).max(), 1e-300)))
        else:
            return 0.0
    if np.isin(bad, kinds.general).any():
        prob, Sp, th = _gauge_problem(model, kinds.general)
        Sp.value = S[kinds.general]
        try:
            run_solver(prob, solver, {}, False, True, "certificate (domain scaling)")
        except SolverError:
            return 0.0
        if prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or th.value is None:
            return 0.0
        theta = min(theta, float(np.clip(th.value, 0.0, 1.0).min()))
    return theta


def _projection_problem(model: GTVModel):
    """Cached convex projection of flows onto the dual domain (library nodes): minimize
    ``||U' - U||^2`` subject to ``-(D^T U')_i in dom h_i*`` (the domain constraints of the
    split variables) and the penalty's domain (capacities)."""
    cached = model._cache.get("cert_projection")
    if cached is not None and cached[3] == model.lam:  # capacities depend on lambda
        return cached
    from .dual import conic_positions, node_conjugate_parts

    n, d, E = model.num_nodes, model.dim, model.num_edges
    lib = np.setdiff1d(np.arange(n), conic_positions(model))
    U0 = cp.Parameter((E, d), name="U0")
    U = cp.Variable((E, d), name="U")
    S = -(model.incidence.T @ U)
    _, cons = model.penalty.conjugate_expression(U, model.lam * model.edge_weights)
    parts = node_conjugate_parts(model, lib)
    total: cp.Expression = cp.Constant(np.zeros((lib.size, d)))
    for p in parts:
        total = total + p.contrib
        cons += p.constraints
    cons.append(total == S[lib, :])
    prob = cp.Problem(cp.Minimize(cp.sum_squares(U - U0)), cons)
    cached = (prob, U0, U, model.lam)
    model._cache["cert_projection"] = cached
    return cached


def project_flows(model: GTVModel, flows: Any, solver: str | None = None) -> np.ndarray | None:
    """The Euclidean projection of ``flows`` onto the dual-feasible set of the library nodes
    (one vectorized CVXPY problem, as large as the dual itself: the expensive last resort of
    :func:`certify`).  Returns None if the solve fails."""
    from .exact import run_solver

    U = model.check_flows(flows)
    if model.num_edges == 0:
        return U
    prob, U0, Uv, _ = _projection_problem(model)
    U0.value = U
    try:
        run_solver(prob, solver, {}, False, True, "certificate (flow projection)")
    except SolverError:
        return None
    if prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or Uv.value is None:
        return None
    return np.asarray(Uv.value, dtype=float)


def dual_value(model: GTVModel, flows: Any, radius: float, solver: str | None = None,
               weights: Any = None) -> dict[str, Any]:
    """Upper bounds ``c_i >= (h_i + iota{||w||_inf <= R})*(s_i)`` for every node and the edge
    conjugates at ``flows`` (no repair).  Returns a dict with ``node_conj`` (n,), ``rho``
    (n, d) (the part of ``s_i`` outside the domain, charged ``R ||rho_i||_1`` inside
    ``node_conj``), ``edge_conj`` (|E|,), ``s`` (n, d), ``conic_tol`` and ``value``.
    ``weights`` (optional) warm-start the Newton path of smooth data-fit nodes."""
    U = model.check_flows(flows)
    n, d = model.num_nodes, model.dim
    kinds = _kinds(model)
    st = model.structure()
    S = -(model.incidence.T @ U) if model.num_edges else np.zeros((n, d))
    S = np.asarray(S).reshape(n, d)
    conj = np.zeros(n)
    rho = np.zeros((n, d))
    if kinds.zero.size:
        z = kinds.zero
        conj[z], rho[z] = zero_conjugate_rows(st.l1[z], st.l2[z], S[z])
    qi, qa = kinds.quad
    if qi.size:
        conj[qi], rho[qi] = quadratic_conjugate_rows(qa, st.l1[qi], st.l2[qi], S[qi])
    si, e, V, q, yy = kinds.squared
    if si.size:
        conj[si], rho[si] = squared_conjugate_rows(e, V, q, yy, st.l2[si], S[si])
    conic_tol = 0.0
    g = kinds.general
    if g.size:
        done = np.zeros(n, dtype=bool)
        W0 = np.zeros((n, d)) if weights is None else np.asarray(weights, dtype=float)
        for grp in kinds.smooth:  # smooth data-fit nodes: batched Newton in numpy
            idx = grp[1]
            val, r, conv = _newton_conjugates(grp, S[idx], W0[idx])
            conj[idx[conv]] = val[conv]
            rho[idx[conv]] = r[conv]
            done[idx[conv]] = True
        g = g[~done[g]]
    if g.size:  # the others (and Newton failures): the cached CVXPY problem of all of them
        gall = kinds.general
        prob, Sp, Rp, parts, _ = _general_problem(model, gall)
        Sp.value = S[gall]
        Rp.value = float(radius)
        ok = True
        try:
            from .exact import run_solver

            run_solver(prob, solver, {}, False, True, "certificate (node conjugates)")
            ok = prob.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE)
        except SolverError:
            ok = False
        if ok:
            kg = gall.size
            contrib, cost = _evaluate_parts(parts, kg, d)
            # polish: let the parts absorb the solver's small residual (least squares, kept
            # in the domains), then re-evaluate; keep whichever bound is smaller
            r0 = S[gall] - contrib
            for p in parts:
                if p.absorb is not None:
                    p.absorb(S[gall] - _evaluate_parts(parts, kg, d)[0])
            contrib2, cost2 = _evaluate_parts(parts, kg, d)
            r2 = S[gall] - contrib2
            b1 = cost + radius * np.abs(r0).sum(axis=1)
            b2 = cost2 + radius * np.abs(r2).sum(axis=1)
            better = b2 <= b1
            sel = np.isin(gall, g)
            conj[gall[sel]] = np.where(better, cost2, cost)[sel]
            rho[gall[sel]] = np.where(better[:, None], r2, r0)[sel]
        else:  # no split available: these nodes are reported dual infeasible (gap = inf)
            conj[g] = np.inf
            rho[g] = S[g]
    c = kinds.conic
    if c.size:
        from . import conic as conic_mod

        vals = np.empty(c.size)
        tols = np.zeros(c.size)
        for j, i in enumerate(c):
            try:
                vals[j], tols[j] = conic_mod.node_conjugate(model, int(i), S[i])
            except GTVError:
                vals[j] = np.inf
        conj[c] = vals
        # a numeric conjugate may fall short by the duality-gap tolerance of the solver run
        # that produced it (run_solver may fall back to looser tolerances): node_conjugate
        # returns that tolerance, add it
        conic_tol = float(tols[np.isfinite(vals)].sum())
    charge = float(radius) * np.abs(rho).sum(axis=1)
    node_conj = conj + charge
    edge_conj = (model.penalty.conjugate_rows(U, model.lam * model.edge_weights)
                 if model.num_edges else np.zeros(0))
    value = -float(node_conj.sum()) - float(edge_conj.sum()) - conic_tol
    return {"node_conj": node_conj, "rho": rho, "charge": charge, "edge_conj": edge_conj,
            "s": S, "conic_tol": conic_tol, "value": value}


# ===================================================================== certify
def certify(model: GTVModel, weights: Any, flows: Any = None, *, tol: float = 1e-6,
            feas_tol: float = 1e-8, radius: float | None = None, solver: str | None = None,
            project: str = "auto") -> Certificate:
    """Certify candidate ``weights`` (``(n, d)``) with optional ``flows`` (``(|E|, d)``).

    Returns a :class:`Certificate` whose ``gap >= P(W) - P* - tolerance`` (module docstring
    for the method, the repair and the limits).  ``tol`` only sets what
    :meth:`Certificate.certifies` is asked by default through the CLI; ``feas_tol`` is the
    relative tolerance on node constraints and on dual-domain residuals; ``radius`` the ``R``
    of the residual charges (default ``10 max(1, ||W||_inf)``).  ``project``: ``"auto"``
    (default) allows the convex projection :func:`project_flows` as the last resort when the
    cheap repairs leave nodes outside bounded conjugate domains, ``"never"`` forbids it (the
    gap is then ``+inf`` there; use it where a certificate must stay cheap).
    """
    t0 = time.perf_counter()
    if project not in ("auto", "never"):
        raise ParameterError(f"certify: project must be 'auto' or 'never', got {project!r}")
    W = model.check_weights(weights)
    n, d = model.num_nodes, model.dim
    wscale = max(1.0, float(np.abs(W).max(initial=0.0)))
    R = float(radius) if radius is not None else 10.0 * wscale
    built = flows is None
    U0 = flows_from_weights(model, W) if built else model.check_flows(flows)
    U, repairs = repair_flows(model, U0)
    t1 = time.perf_counter()
    # primal
    lossv = model.loss_values(W)
    V = model.empirical_graph.diff(W) if model.num_edges else np.zeros((0, d))
    lamA = model.lam * model.edge_weights
    penv = lamA * model.penalty.rows_value(V) if model.num_edges else np.zeros(0)
    P = float(lossv.sum() + penv.sum())
    viol = model.constraint_violations(W)
    bad = np.flatnonzero(viol > feas_tol * wscale)
    feasible = bad.size == 0
    # dual
    dv = dual_value(model, U, R, solver, W)
    S = dv["s"]
    sscale = np.maximum(1.0, np.abs(S).max(axis=1))
    dual_bad = np.flatnonzero(~np.isfinite(dv["node_conj"]) |
                              (np.abs(dv["rho"]).max(axis=1) > feas_tol * sscale))
    if dual_bad.size and model.num_edges:
        # nodes outside bounded conjugate domains: (a) gradient correction, (b) scaling,
        # (c) convex projection (only with project="auto")
        def attempt(trial: np.ndarray | None, note: str) -> None:
            """Keep ``trial`` flows if they leave fewer nodes outside their domains."""
            nonlocal U, dv, S, sscale, dual_bad
            if trial is None:
                return
            dv2 = dual_value(model, trial, R, solver, W)
            S2 = dv2["s"]
            sc2 = np.maximum(1.0, np.abs(S2).max(axis=1))
            bad2 = np.flatnonzero(~np.isfinite(dv2["node_conj"]) |
                                  (np.abs(dv2["rho"]).max(axis=1) > feas_tol * sc2))
            if bad2.size < dual_bad.size:
                U, dv, S, sscale, dual_bad = trial, dv2, S2, sc2, bad2
                repairs.append(note)

        nbad = dual_bad.size
        if _kinds(model).gradient[dual_bad].any():
            # (a) cheap, sparse: smooth nodes outside their domains -- move the flows
            # (minimum-norm) so that their demands become the gradients at W, inside the domains
            attempt(repair_flows(model, flows_from_weights(model, W, start=U))[0],
                    f"corrected the flows towards the gradients at the weights ({nbad} node(s) "
                    "outside their bounded conjugate domains)")
        if dual_bad.size:
            # (b) one LP: scale all flows into the domains (keeps the subspace conditions)
            nbad = dual_bad.size
            theta = _domain_scale(model, S, dual_bad, solver) * (1.0 - 1e-9)
            if theta >= 0.5:
                attempt(theta * U, f"scaled all flows by theta = {theta:.12g} into the bounded "
                        f"conjugate domains of {nbad} node(s)")
        if dual_bad.size and project == "auto":
            # (c) last resort: the convex projection onto the dual domain (0 can be a vertex of
            # a domain, e.g. logistic rows, where scaling towards 0 cannot help)
            nbad = dual_bad.size
            proj = project_flows(model, U, solver)
            attempt(None if proj is None else repair_flows(model, proj)[0],
                    f"projected the flows onto the dual domain ({nbad} node(s) outside their "
                    "bounded conjugate domains; convex projection)")
    edge_ok = bool(np.isfinite(dv["edge_conj"]).all())
    dual_feasible = dual_bad.size == 0 and edge_ok
    D = dv["value"] if dual_feasible else -np.inf
    node_gaps = lossv + dv["node_conj"] - (S * W).sum(axis=1)
    edge_gaps = penv + dv["edge_conj"] - (U * V).sum(axis=1) if model.num_edges else np.zeros(0)
    rounding = 64 * _EPS * (abs(P) + np.abs(lossv).sum() + np.abs(penv).sum()
                            + np.abs(dv["node_conj"][np.isfinite(dv["node_conj"])]).sum()
                            + np.abs(dv["edge_conj"][np.isfinite(dv["edge_conj"])]).sum()
                            + np.abs(S * W).sum() + (np.abs(U * V).sum() if model.num_edges
                                                      else 0.0))
    tolerance = float(rounding + dv["charge"].sum() + dv["conic_tol"])
    if feasible and dual_feasible:
        gap = max(P - D, 0.0)
    else:
        gap = float("inf")
    t2 = time.perf_counter()
    # KKT residuals on the original flows
    kkt: dict[str, float] = {}
    kinds = _kinds(model)
    if kinds.gradient.any():
        st = model.structure()
        G = 2.0 * st.l2[:, None] * W
        for b in st.batches:
            if b.cls.base_smooth:
                G += b.gradients(W)
        div = np.asarray(model.incidence.T @ U0) if model.num_edges else np.zeros((n, d))
        kkt["flow_conservation"] = float(np.linalg.norm((div + G)[kinds.gradient]))
    else:
        kkt["flow_conservation"] = float("nan")
    cap = _capacities(model)
    kkt["capacity_violation"] = (float(np.max(model.penalty.dual_norm(U0) - cap, initial=0.0))
                                 if cap is not None and model.num_edges else 0.0)
    kkt["complementarity"] = float(edge_gaps.sum()) if dual_feasible else float("inf")
    kkt["node_gap"] = float(node_gaps.sum()) if dual_feasible else float("inf")
    labels = model.nodes
    return Certificate(
        primal_value=P, dual_value=float(D), gap=float(gap),
        relative_gap=float(gap / max(1.0, abs(P))), tolerance=tolerance,
        feasible=feasible, infeasible_nodes=[labels[i] for i in bad],
        dual_feasible=dual_feasible, dual_infeasible_nodes=[labels[i] for i in dual_bad],
        repaired=bool(repairs), repairs=repairs, repaired_flows=U,
        flows_from_weights=built, kkt=kkt, node_gaps=node_gaps, edge_gaps=edge_gaps,
        radius=R, feas_tol=feas_tol, tol=tol,
        times={"repair": t1 - t0, "evaluate": t2 - t1, "total": time.perf_counter() - t0},
    )
