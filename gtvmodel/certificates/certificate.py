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

**Residuals and the radii R_i** (MATH.md §8).  Where ``s_i`` lies (numerically) just outside
the domain of ``h_i*`` (a zero-loss node needs ``s_i = 0`` exactly, a split computed in floating
point leaves a residual), the part ``rho_i`` outside it is charged (:func:`_charge`):

- an entry that is *rounding-level* (within the bound of the rounding error made in computing
  it) is floating-point noise of an exact split: charged to first order at the local
  maximizer, ``max(1, ||w_i||_inf) |rho_ij|``, like the rounding of the sums;
- any larger entry is charged ``R_i |rho_ij|``: exactly the conjugate of
  ``h_i + iota{||w||_inf <= R_i}``, rigorous when some minimizer has ``||w*_i||_inf <= R_i``.
  The radii are *certified* (:func:`certified_radii`) from the level set ``P(w*) <= P(W)``:
  coercive nodes anchor them, edges propagate them; where none can be certified the charge
  is ``+inf`` and the gap says why.  A caller's ``radius=`` replaces them as a listed
  assumption.

The charges and the rounding bound of the sums make up :attr:`Certificate.tolerance`, which
is *included* in the gap: ``gap >= P(W) - P*`` without a further tolerance.

**Repair** (:func:`repair_flows`).  Raw flows (e.g. iterates of Algorithm 1) are usually not dual
feasible.  Before the dual value is taken:

1. capacities ``||u_e||_* <= lambda A_e`` (norm penalties) by the row-wise projection
   :meth:`~gtvmodel.penalties.Penalty.project_dual_ball`;
2. subspace conditions -- ``(D^T u)_i = 0`` at zero-loss nodes and ``(D^T u)_i in range(X_i^T)``
   at squared-loss nodes with ``rank X_i < d`` (no regularizers/constraints) -- by the
   minimum-norm correction ``delta = -A^T (A A^T)^+ A u`` of the stacked linear conditions
   ``A u = 0`` (``A`` sparse; ``A A^T`` through one cached eigen-decomposition when small,
   conjugate gradients otherwise; ``D`` is never formed dense);
3. steps 1-2 alternate (4 rounds; 16 when a certificate comes close to ``tol``), then the flows are
   scaled by ``theta = min(1, min_e lambda A_e / ||u_e||_*)``: the dual domain is convex and
   contains ``u = 0`` (every library ``L_i*`` is finite at 0), and scaling keeps step 2;
4. bounded conjugate domains (logistic, hinge, absolute, Huber rows, ``l1``) and cones
   (``NonNeg``, half-infinite boxes): if nodes remain outside, (a) at smooth nodes the flows
   are corrected (minimum-norm, sparse) towards demands equal to the gradients at the weights,
   which lie inside the domains; (b) the largest ``theta`` with ``theta s_i in dom h_i*`` (one
   cached LP) is used when ``theta >= 1/2``; (c) otherwise (0 can be a vertex of a domain, e.g.
   for logistic rows with separable data) the flows are projected onto the dual domain by one
   convex program as large as the dual problem (:func:`project_flows`, only with
   ``project="auto"``); (d) zero flows (dual feasible for every library node).  These steps
   run for nodes outside their domains beyond ``feas_tol``; each is kept if it leaves fewer
   nodes at ``+inf`` or as many and a larger dual value.  Nodes whose bound is still ``+inf``
   are listed in :attr:`Certificate.dual_infeasible_nodes` and the gap is ``+inf`` (sound,
   never optimistic).

**Escalation** (``fallback=True``): a certificate within ``1e3 tol`` of certifying (or
infinite) is tried again with 16 projection rounds and with flows built from the weights; one
whose repair rescaled all flows by ``theta < 0.999`` also with the convex projection of the
given flows; the smallest bound is returned.

**Flows from weights** (``flows=None``, :func:`flows_from_weights`): start from the edge
optimality condition ``u_e in lambda A_e dphi(v_e)`` (the penalty's dual update applied to
``v_e/eps``), then add the minimum-norm correction that matches the node condition
``-(D^T u)_i = grad h_i(w_i)`` at every node with a gradient (smooth loss, no ``l1``, no
constraints; in a connected component where all nodes have one, the component mean of the
gradients is removed first, since flows can only move demand around) on the edges left free
by the edge condition, alternating with the capacity projection; then repair.

**What a certificate does not say**: it bounds the objective suboptimality, not the distance
of ``W`` to the minimizer (that needs strong convexity); weights that violate a node's
constraints by more than ``feas_tol max(1, ||w_i||_inf)`` or lie outside a symbolic loss's
domain get ``gap = inf`` (with :attr:`Certificate.reason`); floating-point rounding is bounded
by the usual model ``|fl(x op y) - x op y| <= eps |x op y|`` summed over the terms, not by
interval arithmetic; conic (symbolic) conjugates rest on the solver's reported accuracy.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import cvxpy as cp
import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
import scipy.sparse.linalg as spla

from .._solver import run_solver
from .._validate import as_nonneg_scalar
from ..declaration import ModelDeclaration
from ..errors import GTVError, ParameterError, SolverError
from ..solve import conic as conic_mod
from ..solve.dual import conic_positions, node_conjugate_parts
from ..terms.losses import (
    QuadraticLoss,
    SquaredLoss,
    datafit_conjugate_split,
    quadratic_conjugate_rows,
    squared_maximizers,
    sum_rows_by,
    zero_conjugate_rows,
)

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
        ``max(P(W) - D(U') + rounding + conic tolerances, 0)`` (the residual charges are part
        of ``D(U')``), or ``+inf`` when ``W`` violates node constraints, lies outside a loss's
        domain, or no dual-feasible ``U'`` was found (:attr:`reason`).  Sound:
        ``gap >= P(W) - P*``.
    relative_gap : float
        ``gap / max(1, |P(W)|)``.
    tolerance : float
        The part of ``gap`` that is the certificate's own numerics (already included in
        ``gap``): floating-point rounding of the sums, the residual charges (module docstring)
        and conic solver tolerances.
    feasible : bool
        Node constraints hold within ``feas_tol``, node by node (scaled by
        ``max(1, ||w_i||_inf)``), and ``W`` lies in every loss's domain.
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
        The largest radius ``R_i`` used by a residual charge (0 if none was needed).
    flow_scale : float
        The factor ``theta <= 1`` by which the repair finally rescaled all given (or built)
        flows to meet the capacities (1: no rescaling).
    radii : ndarray (n,)
        The per-node radii ``R_i`` (certified by :func:`certified_radii`, or the caller's
        ``radius``; ``inf`` where none could be certified; all NaN when no residual needed a
        radius, so none was computed).
    reason : str
        Why the gap is ``+inf`` (empty when it is finite).
    assumptions : list of str
        What the bound assumes beyond the model (empty for a fully certified bound; a
        caller-supplied ``radius`` is listed here).
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
    flow_scale: float = 1.0
    radii: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    reason: str = ""
    assumptions: list[str] = field(default_factory=list)
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
            "radius": f(self.radius), "flow_scale": f(self.flow_scale),
            "feas_tol": f(self.feas_tol), "tol": f(self.tol),
            "reason": self.reason, "assumptions": list(self.assumptions),
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
        if self.reason:
            lines.append(f"gap is +inf because     {self.reason}")
        for a in self.assumptions:
            lines.append(f"assumes                {a}")
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


def _divergence_rows(model: ModelDeclaration, nodes: np.ndarray, bases: list[np.ndarray] | None
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
    #: squared-loss nodes without l1/constraints: a smooth group (below) plus ``(e, V, q)``
    squared: tuple | None
    general: np.ndarray  # library nodes solved by the cached CVXPY problem
    conic: np.ndarray
    subspace: np.ndarray  # positions with a subspace domain (repair step 2)
    subspace_bases: list[np.ndarray] | None  # null-space bases N_i (None: all N_i = I)
    gradient: np.ndarray  # boolean mask of nodes with a gradient of h_i
    #: smooth data-fit nodes (no l1, no constraints) of the general set, per loss class:
    #: ``(cls, positions, X rows, y, p, c, local node of each row, kappa)`` (Newton path)
    smooth: list[tuple] = field(default_factory=list)


def _null_bases(nodes: np.ndarray, e: np.ndarray, V: np.ndarray, mask: np.ndarray,
                subspace: list[int], bases: list[np.ndarray]) -> None:
    """Append the numerically null eigen-directions (``e_j <= 1e-10 max_j e_j``) of the Gram
    matrices ``V diag(e) V^T`` of ``nodes[mask]`` as subspace conditions (repair step 2):
    ``dom h_i*`` lies in ``range(X_i^T)``.  Only the (few) rank-deficient nodes are visited."""
    null = (e <= 1e-10 * np.maximum(e.max(axis=1), 1e-300)[:, None]) & mask[:, None]
    for j in np.flatnonzero(null.any(axis=1)):
        subspace.append(int(nodes[j]))
        bases.append(V[j][:, null[j]])


def _kinds(model: ModelDeclaration) -> _NodeKinds:
    cached = model._cache.get("cert_kinds")
    if cached is not None:
        return cached

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
    sq: tuple | None = None
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
                # Q_i = X_i^T X_i / m_i = V_i diag(e_i) V_i^T and q_i from the batch's cached
                # prox data (for the maximizers only: the conjugate itself is evaluated in the
                # sample form, MATH.md §8)
                data = b._prox_data()
                e, V, q = data["e"][ok], data["B"][ok], data["q"][ok]
                local = np.full(n, -1, dtype=np.int64)
                local[idx] = np.arange(idx.size)
                rows = np.flatnonzero(local[b.row_node] >= 0)
                rn = local[b.row_node[rows]]
                Xd = np.vstack([ls.X for ls in losses])
                sq = (SquaredLoss, idx, Xd, b.y[rows], None, b.c[rows], rn, st.l2[idx], e, V, q)
                handled[idx] = True
                _null_bases(idx, e, V, st.l2[idx] == 0, subspace, bases)
        if b.cls.base_smooth:
            gradient[b.nodes] = True
    in_batch = np.zeros(n, dtype=bool)
    for b in st.batches:
        in_batch[b.nodes] = True
    zero = np.flatnonzero(free & ~in_batch)
    handled[zero] = True
    gradient[zero] = True
    gradient &= free & (st.l1 == 0)
    # every other free, unregularized data-fit node: dom h_i* lies in range(X_i^T), so a
    # rank-deficient X_i (m_i < d, collinear rows) gives a subspace condition too
    for b in st.batches:
        if b.is_datafit and b.cls is not SquaredLoss:
            ok = free[b.nodes] & (st.l1[b.nodes] == 0) & (st.l2[b.nodes] == 0)
            e_all, V_all = np.linalg.eigh(b.growth_pieces(np.zeros(n))["gram"])
            _null_bases(b.nodes, e_all, V_all, ok, subspace, bases)
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
def _capacities(model: ModelDeclaration) -> np.ndarray | None:
    return model.lam * model.edge_weights if model.penalty.is_norm else None


def flows_from_weights(model: ModelDeclaration, weights: Any, rounds: int = 8,
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


def repair_flows(model: ModelDeclaration, flows: Any, rounds: int = 4) -> tuple[np.ndarray,
                 list[str]]:
    """Make flows dual feasible where it is cheap (module docstring, steps 1-3).

    Returns ``(repaired_flows, repairs)`` where ``repairs`` describes each change made."""
    U, repairs, _ = _repair(model, flows, rounds)
    return U, repairs


def _repair(model: ModelDeclaration, flows: Any, rounds: int) -> tuple[np.ndarray, list[str],
            float]:
    """:func:`repair_flows` plus the factor ``theta`` of the final rescaling (1: none)."""
    U = model.check_flows(flows).copy()
    E, d = model.num_edges, model.dim
    repairs: list[str] = []
    theta = 1.0
    if E == 0:
        return U, repairs, theta
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
        if A is not None and sub_res(U) > 64 * _EPS * np.abs(U).max(initial=0.0):  # > rounding
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
    return U, repairs, theta


# ===================================================================== dual value
def _newton_conjugates(group: tuple, S: np.ndarray, W0: np.ndarray, iters: int = 40
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Conjugates of smooth data-fit nodes (no ``l1``/constraints) in numpy, all nodes at once.

    Damped Newton on the concave ``f(w) = s^T w - L(w) - kappa ||w||^2`` from the candidate
    weights, then the split read off the maximizer by
    :func:`~gtvmodel.losses.datafit_conjugate_split` (an exact evaluation at a feasible split,
    hence an upper bound of ``h*(s)`` once the residual bound ``rho`` is charged).  Where
    ``s`` is outside the domain the iteration diverges and ``rho`` stays
    large: the caller then uses the CVXPY path for those nodes.
    Returns ``(values, rho, rounding, magnitudes, maximizers, converged)`` for the group's
    nodes."""
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
        grad = S - sum_rows_by(rn, cx * d1[:, None], k) - 2 * kappa[:, None] * w
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
    val, rho, rnd, vmag = datafit_conjugate_split(cls, X, y, p, c, rn, kappa, S, w)
    gres = np.abs(S - sum_rows_by(rn, cx * cls._ell_d1(t, y, p)[:, None], k)
                  - 2 * kappa[:, None] * w).max(axis=1)
    converged = np.isfinite(val) & (gres <= 1e-10 * np.maximum(1.0, np.abs(S).max(axis=1)))
    return val, rho, rnd, vmag, w, converged


def _part_magnitude(part: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(contrib_mag, cost_mag)`` of a node part (its own bound, else the absolute values)."""
    if part.magnitude is not None:
        return part.magnitude()
    contrib, cost = part.evaluate()
    return np.abs(contrib), np.abs(cost)


class _Radii:
    """Per-node radii computed on first use: they cost a Dijkstra and possibly LPs, and most
    certificates (rounding-level residuals only) never need them."""

    def __init__(self, n: int, compute: Any):
        self.n, self._compute, self.value = n, compute, None

    def __call__(self) -> np.ndarray:
        if self.value is None:
            r = self._compute() if callable(self._compute) else self._compute
            self.value = np.broadcast_to(np.asarray(r, dtype=float), (self.n,)).copy()
        return self.value


def _charge(radii: Any, rho: np.ndarray, rnd: np.ndarray, wloc: np.ndarray
            ) -> np.ndarray:
    """Residual charges per node (MATH.md §8), entry by entry of ``|rho_i|`` plus its rounding
    bound ``rnd_i``:

    - a *rounding-level* entry (``|rho_ij| <= rnd_ij``: the computed residual is within the
      error of computing it, so the split may be exact) is floating-point noise, charged to
      first order at the local maximizer, ``min(R_i, wloc_i) (|rho_ij| + rnd_ij)`` with
      ``wloc_i = max(1, ||w_i||_inf, ||w_max,i||_inf)`` (like the rounding of the sums);
    - any larger entry is charged ``R_i (|rho_ij| + rnd_ij)``: exactly the conjugate of
      ``h_i + iota{||w||_inf <= R_i}``, rigorous for a certified radius (``+inf`` when none
      could be certified).

    ``radii`` is a :class:`_Radii` (asked only when a larger entry needs it) or an array.
    """
    tot = rho + rnd
    small = rho <= rnd
    if small.all():  # rounding-level only: the local charge, no radius needed
        return np.where(tot > 0, wloc[:, None] * tot, 0.0).sum(axis=1)
    R = (radii() if callable(radii) else np.asarray(radii, dtype=float))[:, None]
    with np.errstate(invalid="ignore"):
        per = np.where(small, np.minimum(R, wloc[:, None]) * tot, R * tot)
    return np.where(tot > 0, per, 0.0).sum(axis=1)


def _general_problem(model: ModelDeclaration, nodes: np.ndarray, key: str = "cert_general"):
    """Cached CVXPY problem: min sum parts cost + sum_i R_i ||rho_i||_1 s.t. sum contrib + rho
    = S (per-node radii ``R_i``)."""
    cached = model._cache.get(key)
    if cached is not None and np.array_equal(cached[4], nodes):
        return cached

    k, d = len(nodes), model.dim
    S = cp.Parameter((k, d), name="S")
    R = cp.Parameter(k, nonneg=True, name="R")
    rho = cp.Variable((k, d), name="rho")
    parts = node_conjugate_parts(model, nodes)
    total: cp.Expression = rho
    costs: list[cp.Expression] = [R @ cp.sum(cp.abs(rho), axis=1)]
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


def _gauge_problem(model: ModelDeclaration, nodes: np.ndarray):
    """Cached LP: the largest ``theta_i in [0, 1]`` with ``theta_i s_i in dom h_i*``."""
    cached = model._cache.get("cert_gauge")
    if cached is not None:
        return cached

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


def _domain_scale(model: ModelDeclaration, S: np.ndarray, bad: np.ndarray,
                  solver: str | None = None) -> float:
    """A ``theta in [0, 1]`` with ``theta s_i in dom h_i*`` at the listed nodes (0 if none is
    found).  Closed form for zero losses with ``l1`` (box domain), the cached LP of
    :func:`_gauge_problem` for the other library nodes; other nodes (subspace or conic) cannot
    be fixed by scaling and give 0."""
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


def _projection_problem(model: ModelDeclaration):
    """Cached convex projection of flows onto the dual domain (library nodes): minimize
    ``||U' - U||^2`` subject to ``-(D^T U')_i in dom h_i*`` (the domain constraints of the
    split variables) and the penalty's domain (capacities)."""
    cached = model._cache.get("cert_projection")
    if cached is not None and cached[3] == model.lam:  # capacities depend on lambda
        return cached

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


def project_flows(model: ModelDeclaration, flows: Any,
                  solver: str | None = None) -> np.ndarray | None:
    """The Euclidean projection of ``flows`` onto the dual-feasible set of the library nodes
    (one vectorized CVXPY problem, as large as the dual itself: the expensive last resort of
    :func:`certify`).  Returns None if the solve fails."""
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


def dual_value(model: ModelDeclaration, flows: Any, radius: Any, solver: str | None = None,
               weights: Any = None) -> dict[str, Any]:
    """Upper bounds ``c_i >= (h_i + iota{||w||_inf <= R_i})*(s_i)`` for every node and the
    edge conjugates at ``flows`` (no repair); ``radius`` is a scalar or per-node ``(n,)``
    (``inf`` allowed: a residual there makes the bound ``+inf``).  Returns a dict with
    ``node_conj`` (n,), ``rho`` (n, d) (a bound of the part of ``s_i`` outside the domain,
    charged inside ``node_conj`` by :func:`_charge`), ``charge`` (n,), ``edge_conj`` (|E|,),
    ``s`` (n, d), ``conic_tol`` and ``value``.  ``weights`` (optional) warm-start the Newton
    path of smooth data-fit nodes and set the local radii of rounding-level residuals."""
    U = model.check_flows(flows)
    n, d = model.num_nodes, model.dim
    radii = radius if isinstance(radius, _Radii) else _Radii(n, radius)
    kinds = _kinds(model)
    st = model.structure()
    S = -(model.incidence.T @ U) if model.num_edges else np.zeros((n, d))
    S = np.asarray(S).reshape(n, d)
    conj = np.zeros(n)
    cmag = np.zeros(n)  # sums of the absolute summands of each conjugate (rounding bound)
    rho = np.zeros((n, d))  # |computed residual|
    rnd = np.zeros((n, d))  # bound of the rounding error in computing it
    W0 = np.zeros((n, d)) if weights is None else np.asarray(weights, dtype=float)
    wloc = np.maximum(1.0, np.abs(W0).max(axis=1, initial=0.0))  # local radii
    if model.num_edges:  # rounding of s = -D^T u: deg_i eps sum_{e at i} |u_e|
        absdiv = np.asarray(abs(model.incidence).T @ np.abs(U)).reshape(n, d)
        rnd += (model.degrees + 2)[:, None] * _EPS * absdiv
    if kinds.zero.size:
        z = kinds.zero
        conj[z], rho[z], cmag[z] = zero_conjugate_rows(st.l1[z], st.l2[z], S[z])
    qi, qa = kinds.quad
    if qi.size:
        conj[qi], rho[qi], cmag[qi] = quadratic_conjugate_rows(qa, st.l1[qi], st.l2[qi], S[qi])
    if kinds.squared is not None:
        grp, (e, V, q) = kinds.squared[:8], kinds.squared[8:]
        si = grp[1]
        # two valid splits: at the maximizer from 0 (pseudo-inverse) and from the candidate's
        # weights (keeps their components along numerically null directions, where the flows
        # of a near-optimal candidate match them); per node the smaller bound is kept
        best = None
        for base in (W0[si], None):
            if best is not None and (best[1][1] <= rnd[si] + best[1][2]).all():
                break  # rounding-level residuals already: the second split cannot do better
            Wm = squared_maximizers(e, V, q, grp[7], S[si], base)
            out = datafit_conjugate_split(*grp[:1], *grp[2:], S[si], Wm)
            wl = np.maximum(wloc[si], np.abs(Wm).max(axis=1, initial=0.0))
            # choose by the value plus a local-scale residual charge (both splits are valid)
            total = out[0] + (wl[:, None] * (out[1] + out[2])).sum(axis=1)
            if best is None:
                best = (total, out, wl)
            else:
                pick = total < best[0]
                best = (np.where(pick, total, best[0]),
                        tuple(np.where(pick.reshape((-1,) + (1,) * (a.ndim - 1)), a, b_)
                              for a, b_ in zip(out, best[1], strict=True)),
                        np.where(pick, wl, best[2]))
        (conj[si], rho[si], r_si, cmag[si]), wloc[si] = best[1], best[2]
        rnd[si] += r_si
    conic_tol = 0.0
    g = kinds.general
    if g.size:
        done = np.zeros(n, dtype=bool)
        for grp in kinds.smooth:  # smooth data-fit nodes: batched Newton in numpy
            idx = grp[1]
            val, r, r_rnd, vmag, wmax, conv = _newton_conjugates(grp, S[idx], W0[idx])
            ic = idx[conv]
            conj[ic], rho[ic], cmag[ic] = val[conv], r[conv], vmag[conv]
            rnd[ic] += r_rnd[conv]
            wloc[ic] = np.maximum(wloc[ic], np.abs(wmax[conv]).max(axis=1, initial=0.0))
            done[ic] = True
        g = g[~done[g]]
    if g.size:  # the others (and Newton failures): the cached CVXPY problem of all of them
        gall = kinds.general
        prob, Sp, Rp, parts, _ = _general_problem(model, gall)
        Sp.value = S[gall]
        # the solver only needs finite weights for the charges; the evaluation below uses R
        # (any weight above the local scale drives the residual to ~0; a huge one ruins the
        # solver's scaling)
        Rp.value = 100.0 * wloc[gall]
        ok = True
        try:
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
            for _ in range(3):
                for p in parts:
                    if p.absorb is not None:
                        p.absorb(S[gall] - _evaluate_parts(parts, kg, d)[0])
            contrib2, cost2 = _evaluate_parts(parts, kg, d)
            r2 = S[gall] - contrib2
            # rounding of the parts' sums: gamma (|s| + sum of the summands' magnitudes)
            mags = [_part_magnitude(p) for p in parts]
            mag = np.abs(S[gall]) + sum(m[0] for m in mags)
            rnd[gall] += (_max_rows(model) + len(parts) + 4) * _EPS * mag
            cost_mag = sum(m[1] for m in mags)
            # choose by the value plus a local-scale charge (both splits are valid)
            b1 = cost + (wloc[gall, None] * (np.abs(r0) + rnd[gall])).sum(axis=1)
            b2 = cost2 + (wloc[gall, None] * (np.abs(r2) + rnd[gall])).sum(axis=1)
            better = b2 <= b1
            sel = np.isin(gall, g)
            conj[gall[sel]] = np.where(better, cost2, cost)[sel]
            cmag[gall[sel]] = cost_mag[sel] + np.abs(cost)[sel]
            rho[gall[sel]] = np.abs(np.where(better[:, None], r2, r0)[sel])
        else:  # no split available: these nodes are reported dual infeasible (gap = inf)
            conj[g] = np.inf
            rho[g] = np.abs(S[g])
    c = kinds.conic
    if c.size:
        vals = np.empty(c.size)
        tols = np.zeros(c.size)
        for j, i in enumerate(c):
            try:
                vals[j], tols[j] = conic_mod.node_conjugate(model, int(i), S[i])
            except GTVError:
                vals[j] = np.inf
            if not np.isfinite(vals[j]) and np.isfinite(radii()[i]):
                # a demand (a hair) outside the conjugate's domain: with a certified radius the
                # conjugate of h_i + iota{||x||_inf <= R_i} is exact for the problem (finite)
                try:
                    vals[j], tols[j] = conic_mod.node_conjugate(model, int(i), S[i],
                                                                radius=float(radii()[i]))
                except GTVError:
                    vals[j] = np.inf
        conj[c] = vals
        cmag[c] = np.abs(vals)
        # a numeric conjugate may fall short by the duality-gap tolerance of the solver run
        # that produced it (run_solver may fall back to looser tolerances): node_conjugate
        # returns that tolerance, add it
        conic_tol = float(tols[np.isfinite(vals)].sum())
    charge = _charge(radii, rho, rnd, wloc)
    node_conj = conj + charge
    # a library node with exactly zero demand also has the all-zero split (every library row
    # conjugate, regularizer conjugate and support function is 0 at 0; all library losses are
    # >= 0): the bound h_i*(0) <= 0 without residual, kept where it is smaller
    zero = (S == 0).all(axis=1) & ~(node_conj <= 0)
    zero[kinds.conic] = False
    node_conj[zero], charge[zero], cmag[zero], rho[zero] = 0.0, 0.0, 0.0, 0.0
    edge_conj = (model.penalty.conjugate_rows(U, model.lam * model.edge_weights)
                 if model.num_edges else np.zeros(0))
    value = -float(node_conj.sum()) - float(edge_conj.sum()) - conic_tol
    return {"node_conj": node_conj, "rho": rho, "charge": charge, "edge_conj": edge_conj,
            "conj_magnitude": cmag,
            "s": S, "conic_tol": conic_tol, "value": value}


# ===================================================================== certify
def _check_args(tol: Any, feas_tol: Any, radius: Any, project: Any) -> tuple[float, float,
                                                                              float | None]:
    """Validate :func:`certify`'s options (:class:`ParameterError` naming the argument)."""
    if project not in ("auto", "never"):
        raise ParameterError(f"certify: project must be 'auto' or 'never', got {project!r}")
    tol = as_nonneg_scalar(tol, "tol", "certify", strict=True)
    feas_tol = as_nonneg_scalar(feas_tol, "feas_tol", "certify")
    if radius is not None:
        radius = as_nonneg_scalar(radius, "radius", "certify")
    return tol, feas_tol, radius


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


def _loss_lower_bounds(model: ModelDeclaration, solver: str | None) -> np.ndarray:
    """``l_i <= inf h_i`` per node: 0 for library losses (all are ``>= 0``), ``-h_i*(0)`` by
    conic duality for symbolic nodes (cached; ``-inf`` when that fails)."""
    cached = model._cache.get("cert_lower")
    if cached is not None:
        return cached
    n, d = model.num_nodes, model.dim
    low = np.zeros(n)
    conic = _kinds(model).conic
    if conic.size:
        for i in conic:
            try:
                val, tol = conic_mod.node_conjugate(model, int(i), np.zeros(d))
                low[i] = -(val + tol)
            except GTVError:
                low[i] = -np.inf
    low = np.where(np.isnan(low), -np.inf, low)
    model._cache["cert_lower"] = low
    return low


def certified_radii(model: ModelDeclaration, upper: float, solver: str | None = None) -> np.ndarray:
    """Per-node radii ``R_i`` with ``||w*_i||_inf <= R_i`` for some minimizer ``w*`` (MATH.md
    §8: residual charges need them), from the level set ``P(w*) <= upper`` (``upper >= P*``).

    Every node term is bounded below (:func:`_loss_lower_bounds`, penalties are ``>= 0``), so
    at a minimizer ``h_i(w*_i) <= B_i = upper - sum_{j != i} l_j`` and each edge term
    ``lambda A_e phi(w*_{e+} - w*_{e-}) <= B = upper - sum_j l_j``.  Coercive nodes give
    *anchor* radii (``l2``: ``sqrt(B_i/kappa)``, ``l1``: ``B_i/eta``, quadratic and data-fit
    losses: :meth:`~gtvmodel.losses.LossBatch.sublevel_radii`, bounded constraints), each edge
    a length ``||w_{e+} - w_{e-}||_inf <= ell_e`` (the penalty's ``sublevel_radius``), and
    ``R_i = min_k (r_k + dist(k, i))`` by one multi-source Dijkstra.  A connected component
    in which no node has a loss, regularizer or constraint has ``w* = 0`` among its minimizers
    (its part of the objective is ``>= 0`` and ``0`` at ``w = 0``): ``R_i = 0`` there.  Nodes
    that no anchor reaches get ``inf``.
    """
    n, d = model.num_nodes, model.dim
    st = model.structure()
    low = _loss_lower_bounds(model, solver)
    total = math.fsum(low) if np.isfinite(low).all() else -np.inf
    if not np.isfinite(upper) or not np.isfinite(total):
        return np.full(n, np.inf)
    slack = max(upper - total, 0.0)
    slack = slack * (1 + 1e-12) + 8 * _EPS * (abs(upper) + np.abs(low).sum())
    level = slack + low  # B_i
    anchor = np.full(n, np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        anchor = np.minimum(anchor, np.where(st.l2 > 0, np.sqrt(level / st.l2), np.inf))
        anchor = np.minimum(anchor, np.where(st.l1 > 0, level / st.l1, np.inf))
    for b in st.batches:
        anchor[b.nodes] = np.minimum(anchor[b.nodes], b.sublevel_radii(level))
    active = np.zeros(n, dtype=bool)  # nodes with a loss, regularizer or constraint
    active[st.l1 > 0] = active[st.l2 > 0] = True
    for b in st.batches:
        if b.is_datafit or b.cls is QuadraticLoss:
            active[b.nodes] = True
    active[_kinds(model).conic] = True
    for i, cons in model._constraints.items():
        if cons:
            active[i] = True
            anchor[i] = min(anchor[i], min(c.inf_radius(d) for c in cons))
    if model.num_edges == 0 or model.lam == 0:
        lengths = np.full(model.num_edges, np.inf)
    else:
        lengths = model.penalty.sublevel_radius(slack, model.lam * model.edge_weights)
    E = model.edges
    fin = np.isfinite(lengths)
    ncomp, comp = csgraph.connected_components(
        sp.csr_matrix((np.ones(fin.sum()), (E[fin, 0], E[fin, 1])), shape=(n, n)),
        directed=False)
    passive = np.bincount(comp, weights=active.astype(float), minlength=ncomp) == 0
    anchor[passive[comp]] = 0.0
    # one centre per component, pooled over the component's data (below)
    centres = np.unique(comp, return_index=True)[1]
    to_centre = _multi_source(n, E[fin], lengths[fin], centres, np.zeros(centres.size))
    # components whose objective is invariant under a common shift in the null space of their
    # data: every active node is an unconstrained, unregularized data-fit node with growing rows
    plain = np.zeros(n, dtype=bool)
    for b in st.batches:
        g = b.growth_pieces(level)
        if g is not None:
            plain[b.nodes[np.isfinite(g["b"])]] = True
    plain &= (st.l1 == 0) & (st.l2 == 0)
    for i, cons in model._constraints.items():
        if cons:
            plain[i] = False
    symmetric = np.bincount(comp, weights=(active & ~plain).astype(float), minlength=ncomp) == 0
    _pooled_anchors(st, level, comp, ncomp, centres, to_centre, anchor, d, symmetric)
    _polyhedral_anchors(model, level, comp, centres, to_centre, anchor)
    _conic_anchors(model, level, comp, anchor)
    src = np.flatnonzero(np.isfinite(anchor))
    if src.size == 0:
        return np.full(n, np.inf)
    return _multi_source(n, E[fin], lengths[fin], src, anchor[src])


#: At most this many LPs (2 d per component) for the polyhedral anchors of one certificate.
_MAX_ANCHOR_LPS = 400


def _polyhedral_anchors(model: ModelDeclaration, level: np.ndarray, comp: np.ndarray,
                        centres: np.ndarray, to_centre: np.ndarray, anchor: np.ndarray) -> None:
    """Anchors from the level-set polyhedra, for components still without one (logistic and
    hinge rows are not coercive one by one, but often are together): every row's affine
    minorant gives ``g_j^T w_i <= h_j`` (:meth:`~gtvmodel.losses.LossBatch.level_halfspaces`),
    and so do the node constraints' half-spaces (``Constraint.halfspaces``), hence
    ``g_j^T w_c <= h_j + ||g_j||_1 dist(c, i)`` at the component's centre ``c``; the
    ``2d`` LPs ``max +-w_{c,k}`` over that polyhedron (HiGHS) bound ``||w_c||_inf`` when it is
    bounded.  The LP optimum is inflated by ``1e-7`` relative plus ``1e-9`` (the solver's
    tolerance; the only non-exact step of the radii) and an unbounded or failed LP gives no
    anchor."""
    from scipy.optimize import linprog

    d = model.dim
    todo = np.flatnonzero(~np.isfinite(anchor[centres]))
    if todo.size == 0 or 2 * d * todo.size > _MAX_ANCHOR_LPS:
        return
    rows = [b.level_halfspaces(level) for b in model.structure().batches]
    rows = [r for r in rows if r is not None]
    # the node constraints' own half-spaces (Box, NonNeg: G w_i <= h)
    rows += [(np.full(len(hs[1]), i), *hs) for i, cons in model._constraints.items()
             for c in cons if (hs := c.halfspaces(d)) is not None]
    if not rows:
        return
    node = np.concatenate([r[0] for r in rows])
    G = np.vstack([r[1] for r in rows])
    h = np.concatenate([r[2] for r in rows])
    for ci in todo:
        c = centres[ci]
        sel = np.flatnonzero((comp[node] == comp[c]) & np.isfinite(to_centre[node]))
        if sel.size < d:
            continue
        Gs = G[sel]
        hs = h[sel] + np.abs(Gs).sum(axis=1) * to_centre[node[sel]]
        best = 0.0
        for k in range(2 * d):
            obj = np.zeros(d)
            obj[k % d] = -1.0 if k < d else 1.0
            res = linprog(obj, A_ub=Gs, b_ub=hs, bounds=(None, None), method="highs")
            if res.status != 0:
                best = np.inf
                break
            best = max(best, -res.fun)
        if np.isfinite(best):
            anchor[c] = min(anchor[c], best * (1 + 1e-7) + 1e-9)


def _conic_anchors(model: ModelDeclaration, level: np.ndarray, comp: np.ndarray,
                   anchor: np.ndarray) -> None:
    """Anchors at conic (symbolic) nodes, for components still without one: ``||x||_inf`` over
    the node's sublevel set ``{L_i(x) <= B_i, x in C_i}`` by ``2d`` small convex programs
    (``max +-x_k``; one cached DPP problem per node with ``B_i`` and the direction as
    Parameters).  The optimum is inflated by ``1e-6`` relative plus ``1e-8`` (the solver's
    tolerance); an unbounded or failed solve gives no anchor.  Bounded like the polyhedral
    anchors (:data:`_MAX_ANCHOR_LPS` solves per certificate)."""
    conic = _kinds(model).conic
    if conic.size == 0:
        return
    has = np.zeros(comp.max(initial=-1) + 1, dtype=bool)
    np.logical_or.at(has, comp[np.isfinite(anchor)], True)
    todo = conic[~has[comp[conic]] & np.isfinite(level[conic])]
    d = model.dim
    if todo.size == 0 or 2 * d * todo.size > _MAX_ANCHOR_LPS:
        return
    for i in todo:
        if has[comp[i]]:
            continue
        r = _conic_sublevel_radius(model, int(i), float(level[i]))
        if np.isfinite(r):
            anchor[i] = min(anchor[i], r)
            has[comp[i]] = True


def _conic_sublevel_radius(model: ModelDeclaration, i: int, level: float) -> float:
    """``max ||x||_inf`` over ``{L_i(x) <= level, x in C_i}`` (module docstring of
    :func:`_conic_anchors`); ``inf`` when unbounded or not solved."""
    cache = model._cache.setdefault("cert_conic_sublevel", {})
    entry = cache.get(i)
    d = model.dim
    if entry is None:
        x = model.var(model.nodes[i])
        B = cp.Parameter(name=f"B[{i}]")
        c = cp.Parameter(d, name=f"dir[{i}]")
        cons = [model.loss_at(i).expression(x) <= B] if i in model._losses else []
        for con in model.constraints_at(i):
            cons += con.constraints(x)
        entry = (cp.Problem(cp.Maximize(c @ x), cons), B, c, x)
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
    err = 16.0 * (d + rows[used]) * _EPS * np.abs(e).max(axis=1)  # forming sums + eigh
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


def _radii(model: ModelDeclaration, W: np.ndarray, P: float, viol: np.ndarray, radius: float | None,
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


def _radius_assumption(radius: float | None) -> list[str]:
    """What a caller's radius assumes (nothing when the radii are certified)."""
    if radius is None:
        return []
    return [f"||w*_i||_inf <= {radius:g} at every node (radius given by the caller, not "
            "checked)"]


def _dual_bad(dv: dict[str, Any], feas_tol: float, strict: bool) -> np.ndarray:
    """Nodes whose conjugate bound (residual charge included) is ``+inf``; with a caller's
    (unchecked) radius also those whose residual exceeds ``feas_tol max(1, ||s_i||_inf)``, so
    that such a bound never leans on the assumption beyond rounding."""
    bad = ~np.isfinite(dv["node_conj"])
    if strict:
        sscale = np.maximum(1.0, np.abs(dv["s"]).max(axis=1))
        bad |= np.abs(dv["rho"]).max(axis=1) > feas_tol * sscale
    return np.flatnonzero(bad)


def certify(model: ModelDeclaration, weights: Any, flows: Any = None, *, tol: float = 1e-6,
            feas_tol: float = 1e-8, radius: float | None = None, solver: str | None = None,
            project: str = "auto", fallback: bool = True) -> Certificate:
    """Certify candidate ``weights`` (``(n, d)``) with optional ``flows`` (``(|E|, d)``).

    Returns a :class:`Certificate` whose ``gap >= P(W) - P*`` (module docstring for the
    method, the repair and the limits; ``gap`` includes the certificate's own numerical
    ``tolerance``).  ``tol`` only sets what :meth:`Certificate.certifies` is asked by default;
    ``feas_tol`` is the relative tolerance on node constraints and on dual-domain residuals,
    node by node (scaled by ``max(1, ||w_i||_inf)``, resp. ``max(1, ||s_i||_inf)``);
    ``radius``: by default the radii of the residual charges are *certified* from the level
    set of ``P(W)`` (:func:`certified_radii`); a number replaces them by the caller's
    assumption ``||w*_i||_inf <= radius`` (listed in :attr:`Certificate.assumptions`).
    ``project``: ``"auto"`` (default) allows the convex projection :func:`project_flows` when
    the cheap repairs leave nodes outside bounded conjugate domains, ``"never"`` forbids it
    (zero flows, dual feasible for every library node, remain the last resort).
    ``fallback``: when a certificate does not certify ``W`` at ``tol`` but comes within
    ``1e3 tol`` of it (or is infinite), a finer repair of the given flows (16 projection
    rounds) and flows built from ``W`` are tried too; when the repair had to rescale all flows
    by ``theta < 0.999``, also the convex projection of the given flows onto the dual-feasible
    set (``project="auto"``); the smallest (valid) bound is returned (pass False where
    certificates of non-optimal iterates must stay cheap, as Algorithm 1 does).
    """
    tol, feas_tol, radius = _check_args(tol, feas_tol, radius, project)
    cert = _certify_once(model, weights, flows, tol, feas_tol, radius, solver, project)
    # more work only where it can matter: an infinite gap, or one within three orders of
    # magnitude of certifying W (good weights, flows that need a finer repair or replacing)
    near = not np.isfinite(cert.gap) or cert.relative_gap <= 1e3 * tol
    # a large final rescaling (theta < 0.999) means the cheap alternating projections did not
    # reach the intersection of the capacities and the subspace conditions: the convex
    # projection onto the dual-feasible set does, whatever the gap
    rescaled = cert.flow_scale < 0.999 and project == "auto" and flows is not None
    if not (fallback and cert.feasible and model.num_edges and (near or rescaled)) \
            or cert.certifies(tol):
        return cert
    tries: list[tuple[Any, int, str]] = []
    if rescaled:
        proj = project_flows(model, flows, solver)
        if proj is not None:
            tries.append((proj, 4, "the convex projection of the given flows onto the "
                                   "dual-feasible set"))
    if near and cert.flow_scale < 1.0:
        tries.append((flows, 16, "a finer repair of the given flows (16 rounds)"))
    if near and flows is not None:
        tries.append((None, 4, "flows built from the weights"))
    for trial_flows, rounds, what in tries:
        alt = _certify_once(model, weights, trial_flows, tol, feas_tol, radius, solver, project,
                            rounds)
        alt.times["total"] += cert.times["total"]
        if alt.gap < cert.gap:
            alt.repairs.append(f"the first repair gave a larger gap ({cert.gap:.3g}): {what} "
                               "was used instead")
            alt.repaired = True
            cert = alt
        if cert.certifies(tol):
            break
    return cert


def _certify_once(model: ModelDeclaration, weights: Any, flows: Any, tol: float, feas_tol: float,
                  radius: float | None, solver: str | None, project: str,
                  rounds: int = 4) -> Certificate:
    """:func:`certify` with the given (or built) flows only; options already validated."""
    t0 = time.perf_counter()
    W = model.check_weights(weights)
    n, d = model.num_nodes, model.dim
    built = flows is None
    if model.lam == 0 and model.num_edges:
        # lambda = 0: the edge conjugates are the indicator of u = 0, so the only dual
        # feasible flows are zero
        U0 = np.zeros((model.num_edges, d)) if built else model.check_flows(flows)
        U, repairs = np.zeros_like(U0), (["lambda = 0: flows set to 0 (the only dual-feasible "
                                          "flows)"] if np.any(U0) else [])
        flow_scale = 1.0
    else:
        U0 = flows_from_weights(model, W) if built else model.check_flows(flows)
        U, repairs, flow_scale = _repair(model, U0, rounds)
    t1 = time.perf_counter()
    # primal: +inf outside a symbolic loss's domain; constraints node by node
    lossv = model.loss_values(W)
    V = model.empirical_graph.diff(W) if model.num_edges else np.zeros((0, d))
    lamA = model.lam * model.edge_weights
    penv = lamA * model.penalty.rows_value(V) if model.num_edges else np.zeros(0)
    with np.errstate(invalid="ignore"):
        # pairwise sums: their error (log2 N eps sum|x|) is inside the rounding bound below
        P = float(np.sum(lossv) + np.sum(penv)) if np.isfinite(lossv).all() else np.inf
    viol = model.constraint_violations(W)
    wscale = np.maximum(1.0, np.abs(W).max(axis=1, initial=0.0))
    bad = np.flatnonzero(~(viol <= feas_tol * wscale) | ~np.isfinite(lossv))
    feasible = bad.size == 0
    reasons: list[str] = []
    if bad.size:
        outside = np.flatnonzero(~np.isfinite(lossv))
        if outside.size:
            reasons.append(f"W is outside the domain of the loss at {outside.size} node(s) "
                           f"(first {model.nodes[outside[0]]!r}): P(W) = +inf")
        if (viol > feas_tol * wscale).any() or np.isnan(viol).any():
            k = int(np.flatnonzero(~(viol <= feas_tol * wscale))[0])
            reasons.append(f"W violates the constraints of node {model.nodes[k]!r} by "
                           f"{viol[k]:.3g} (> feas_tol max(1, ||w_i||_inf))")
    assumptions = _radius_assumption(radius)
    R = _Radii(n, (lambda: _radii(model, W, P, viol, radius, solver)) if feasible else np.inf)
    # dual
    strict = radius is not None  # an assumed radius: only rounding-sized residuals
    dv = dual_value(model, U, R, solver, W)
    S = dv["s"]
    dual_bad = _dual_bad(dv, feas_tol, strict)
    # the repairs run where a node is outside its domain beyond feas_tol (even where a certified
    # radius makes the charge finite: repaired flows usually give a much smaller bound)
    outside = _dual_bad(dv, feas_tol, True)
    if outside.size and model.num_edges and model.lam > 0 and feasible:
        # nodes outside bounded conjugate domains: (a) gradient correction, (b) scaling,
        # (c) convex projection (only with project="auto"), (d) zero flows
        def attempt(trial: np.ndarray | None, note: str) -> None:
            """Keep ``trial`` flows if they leave fewer nodes at +inf, or as many and give a
            larger dual value (each is a valid bound)."""
            nonlocal U, dv, S, dual_bad, outside
            if trial is None:
                return
            dv2 = dual_value(model, trial, R, solver, W)
            bad2 = _dual_bad(dv2, feas_tol, strict)
            if (bad2.size, -dv2["value"]) < (dual_bad.size, -dv["value"]):
                U, dv, S, dual_bad = trial, dv2, dv2["s"], bad2
                outside = _dual_bad(dv2, feas_tol, True)
                repairs.append(note)

        dual_bad_before = outside

        nbad = outside.size
        if _kinds(model).gradient[dual_bad_before].any():
            # (a) cheap, sparse: smooth nodes outside their domains -- move the flows
            # (minimum-norm) so that their demands become the gradients at W, inside the domains
            attempt(repair_flows(model, flows_from_weights(model, W, start=U))[0],
                    f"corrected the flows towards the gradients at the weights ({nbad} node(s) "
                    "outside their bounded conjugate domains)")
        if outside.size:
            # (b) one LP: scale all flows into the domains (keeps the subspace conditions)
            nbad = outside.size
            theta = _domain_scale(model, S, outside, solver) * (1.0 - 1e-9)
            if theta >= 0.5:
                attempt(theta * U, f"scaled all flows by theta = {theta:.12g} into the bounded "
                        f"conjugate domains of {nbad} node(s)")
        if outside.size and project == "auto":
            # (c) last resort: the convex projection onto the dual domain (0 can be a vertex of
            # a domain, e.g. logistic rows, where scaling towards 0 cannot help)
            nbad = outside.size
            proj = project_flows(model, U, solver)
            attempt(None if proj is None else repair_flows(model, proj)[0],
                    f"projected the flows onto the dual domain ({nbad} node(s) outside their "
                    "bounded conjugate domains; convex projection)")
        if outside.size:
            # (d) u = 0: every library conjugate is finite at 0 (and a conic one wherever its
            # loss is bounded below): a valid, if loose, dual point, kept only if it does
            # better; exact when the optimal flows vanish and the given ones are rounding
            # noise (a hinge node off its margin)
            nbad = outside.size
            attempt(np.zeros_like(U), f"set the flows to zero ({nbad} node(s) still outside "
                    "their conjugate domains)")
    edge_ok = bool(np.isfinite(dv["edge_conj"]).all())
    dual_feasible = dual_bad.size == 0 and edge_ok
    if dual_bad.size:
        k = int(dual_bad[0])
        uncharged = np.isinf(R()[dual_bad]) & np.isfinite(S[dual_bad]).all(axis=1)
        why = ("its residual needs a radius that could not be certified (pass radius= to "
               "assume one)" if uncharged.any() and feasible else
               "its demand -(D^T u)_i stays outside the domain of h_i*")
        reasons.append(f"the flows are not dual feasible at {dual_bad.size} node(s) (first "
                       f"{model.nodes[k]!r}): {why}")
    if not edge_ok:
        reasons.append("the flows exceed the edge capacities (edge conjugate +inf)")
    D = dv["value"] if dual_feasible else -np.inf
    with np.errstate(invalid="ignore"):
        node_gaps = lossv + dv["node_conj"] - (S * W).sum(axis=1)
        edge_gaps = (penv + dv["edge_conj"] - (U * V).sum(axis=1) if model.num_edges
                     else np.zeros(0))
    fin = np.isfinite
    nc, ec = dv["conj_magnitude"] + dv["charge"], dv["edge_conj"]
    nrow = 4 * (d + _max_rows(model) + 8)
    rounding = nrow * _EPS * ((abs(P) if fin(P) else 0.0) + np.abs(lossv[fin(lossv)]).sum()
                              + np.abs(penv).sum() + np.abs(nc[fin(nc)]).sum()
                              + np.abs(ec[fin(ec)]).sum() + np.abs(S * W).sum()
                              + (np.abs(U * V).sum() if model.num_edges else 0.0))
    tolerance = float(rounding + dv["charge"][fin(dv["charge"])].sum() + dv["conic_tol"])
    if feasible and dual_feasible:
        gap = max(P - D + rounding + dv["conic_tol"], 0.0)
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
    charged = dv["charge"] > 0
    radii = R.value if R.value is not None else np.full(n, np.nan)  # NaN: never needed
    rel = gap / max(1.0, abs(P)) if np.isfinite(P) else float("inf")
    return Certificate(
        primal_value=float(P), dual_value=float(D), gap=float(gap), relative_gap=float(rel),
        tolerance=tolerance, feasible=feasible, infeasible_nodes=[labels[i] for i in bad],
        dual_feasible=dual_feasible, dual_infeasible_nodes=[labels[i] for i in dual_bad],
        repaired=bool(repairs), repairs=repairs, repaired_flows=U,
        flows_from_weights=built, kkt=kkt, node_gaps=node_gaps, edge_gaps=edge_gaps,
        radius=float(np.nan_to_num(radii[charged], nan=0.0).max(initial=0.0)), radii=radii,
        reason="; ".join(reasons),
        assumptions=assumptions, feas_tol=feas_tol, tol=tol, flow_scale=flow_scale,
        times={"repair": t1 - t0, "evaluate": t2 - t1, "total": time.perf_counter() - t0},
    )


def _max_rows(model: ModelDeclaration) -> int:
    """The largest number of samples of a node (for the rounding bound of the sums)."""
    ms = [len(b.row_node) and int(np.bincount(b.row_node).max()) for b in
          model.structure().batches if b.is_datafit]
    return max(ms, default=0)
