"""Compilation of the primal problem (16) to one vectorized CVXPY problem, and the diagnostics
that name the nodes responsible when a solve fails (infeasible or unbounded nodes, overflowing
data).

The whole model becomes one problem in a matrix variable ``W`` (``n x d``, row ``i`` is ``w_i``)
and the edge differences ``Z`` (``|E| x d``) tied by the equality constraint ``Z = D W``:

    minimize  sum_batches loss(X_blk vec(W)) + sum_i (eta_i ||w_i||_1 + kappa_i ||w_i||^2)
              + sum_symbolic L_i(x_i) + lambda * sum_e A_e phi(Z_e)
    s.t.      Z = D W,   library constraints on W (stacked),   x_i = w_i and C_i (symbolic)

Library losses of one class are stacked into a sparse block matrix (no per-node expressions);
symbolic losses and constraints are added as given, in their node's own variable ``x_i``, tied
to row ``i`` of ``W``.  ``lambda`` is a CVXPY Parameter, so changing ``model.lam`` re-solves
without recompiling (DPP).

The multiplier ``nu`` of ``Z = D W`` gives the edge flows: CVXPY's Lagrangian adds
``nu^T (Z - D W)``, so stationarity in ``Z`` reads ``-nu in lambda A dphi(Z)`` and in ``W``
``D^T nu in dL(W)``; hence ``u = -nu`` satisfies the optimality conditions (23)/(25),
``-(D^T u)_i in dL_i(w_i)`` and ``u_e in lambda A_e dphi(w_{e+} - w_{e-})``.

``Norm2`` and ``Norm1`` models without node constraints leave ``Z`` out
(:func:`edge_form`): the penalty is stated on ``D W`` directly and the flows are read from
the multipliers of its cones (:meth:`PrimalProblem.flows`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

import cvxpy as cp
import numpy as np

from .._cvx import bounds_constraints, norm_rows_le
from ..declaration import ModelDeclaration, ModelStructure
from ..errors import UnsupportedError
from ..terms.constraints import SymbolicConstraint
from ..terms.penalties import Norm1, Norm2

__all__ = ["PrimalProblem", "compile_primal", "compile_nodes", "find_infeasible_nodes",
           "unbounded_nodes", "data_overflow_message"]

@dataclass
class PrimalProblem:
    """A compiled primal problem: the CVXPY problem and its handles (``Z`` None in the forms
    without it; ``flow_constraint`` the first of ``flow_constraints``, whose duals give the
    flows: :meth:`flows`; ``form`` from :func:`edge_form`)."""

    problem: cp.Problem
    W: cp.Variable
    Z: cp.Variable | None
    flow_constraint: cp.Constraint | None
    lam: cp.Parameter
    build_time: float
    form: str = "difference"
    flow_constraints: tuple[cp.Constraint, ...] = ()

    def flows(self) -> np.ndarray | None:
        """The flows ``U`` (``(|E|, d)``, docs/conventions.md's sign) read from the duals of
        the last solve (None where the solver returned none).  ``"difference"``: ``U = -nu``
        with ``nu`` the multiplier of ``Z = D W`` (module docstring); ``"soc"``: the cones
        ``||(D W)_e||_2 <= t_e`` with duals ``(mu_e, nu_e)``, the Lagrangian ``... - mu^T t -
        sum_e nu_e^T (D W)_e`` gives ``D^T nu in dL(W)`` and ``mu_e = lambda A_e >= ||nu_e||``,
        so ``U = -nu``; ``"box"``: ``D W <= T`` and ``-T <= D W`` with multipliers ``a, b >=
        0``: ``a + b = lambda A_e`` per coordinate and ``-(D^T (a - b)) in dL(W)``, so ``U =
        a - b``."""
        duals = [c.dual_value for c in self.flow_constraints]
        if any(v is None for v in duals):
            return None
        if self.form == "soc":
            U = -np.asarray(duals[0][1], dtype=float)
        elif self.form == "box":
            U = np.asarray(duals[0], dtype=float) - np.asarray(duals[1], dtype=float)
        else:
            U = -np.asarray(duals[0], dtype=float)
        return U


def compile_primal(model: ModelDeclaration) -> PrimalProblem:
    """Build the vectorized CVXPY problem of (16) (cached on the model until it changes;
    ``lambda`` is a Parameter, set here to ``model.lam``)."""
    cached = model.cache.get("primal")
    if cached is not None:
        cached.lam.value = model.lam
        return cached
    t0 = time.perf_counter()
    st = model.structure()
    W = cp.Variable((model.num_nodes, model.dim), name="W")
    lam = cp.Parameter(nonneg=True, name="lambda", value=model.lam)
    terms, cons = _node_terms(model, st, W)
    Z = flow = None
    form = "none"
    if model.num_edges:
        form = edge_form(model, st)
        if form == "difference":
            Z = cp.Variable((model.num_edges, model.dim), name="Z")
            flow = Z == st.incidence @ W
            flows: tuple[cp.Constraint, ...] = (flow,)
            rows, pen_cons = model.penalty.rows_epigraph(Z)
            cons.extend([flow, *pen_cons])
            terms.append(lam * (st.edge_weights @ rows))
        else:
            flows, rows = _cone_rows(form, st.incidence @ W, model.num_edges, model.dim)
            cons.extend(flows)
            terms.append(lam * (st.edge_weights @ rows))
            flow = flows[0]
    compiled = PrimalProblem(cp.Problem(cp.Minimize(_total(terms)), cons), W, Z, flow, lam,
                             time.perf_counter() - t0, form,
                             flows if model.num_edges else ())
    model.cache.put("primal", compiled)
    return compiled


def edge_form(model: ModelDeclaration, st: ModelStructure) -> str:
    """How (16)'s penalty enters the compiled problem: ``"soc"`` (:class:`Norm2`: one second
    order cone ``||(D W)_e||_2 <= t_e`` per edge) or ``"box"`` (:class:`Norm1`: ``-T <= D W <=
    T``), without the edge differences ``Z`` as variables, for models without node
    constraints; ``"difference"`` (``Z = D W`` and the penalty's epigraph in ``Z``) otherwise.
    The forms without ``Z`` give Clarabel ``|E| d`` fewer variables and rows: at 300 nodes
    (``benchmarks/bench_exact_routes.py``) its solve took 0.23-0.25 s against 0.32-0.34 s
    (``Norm2``, ``benchmarks/RESULTS.md``)."""
    if st.constrained.size:
        return "difference"
    kind = type(model.penalty)
    return "soc" if kind is Norm2 else "box" if kind is Norm1 else "difference"


def _cone_rows(form: str, DW: cp.Expression, m: int, d: int
               ) -> tuple[tuple[cp.Constraint, ...], cp.Expression]:
    """The constraints carrying the flows and the rows ``t_e >= phi((D W)_e)`` of a form
    without ``Z`` (:func:`edge_form`)."""
    if form == "soc":
        t = cp.Variable(m, name="t")
        return (cp.SOC(t, DW, axis=1),), t
    T = cp.Variable((m, d), name="T")
    return (DW <= T, -T <= DW), cp.sum(T, axis=1)


def compile_nodes(model: ModelDeclaration, nodes: np.ndarray) -> tuple[cp.Variable,
                  cp.Expression, list[cp.Constraint]]:
    """``(W, sum_k L_{i_k}(w_k), constraints)``: the losses and constraints of the given node
    positions alone (no edges), in a ``(g, d)`` variable ``W`` whose row ``k`` is node
    ``nodes[k]`` (from :meth:`ModelDeclaration.node_structure`; not cached)."""
    st = model.node_structure(nodes)
    W = cp.Variable((len(nodes), model.dim), name="W")
    terms, cons = _node_terms(model, st, W, np.asarray(nodes, dtype=np.int64))
    return W, _total(terms), cons


def _total(terms: list[cp.Expression]) -> cp.Expression:
    return cp.sum(cp.hstack(terms)) if len(terms) > 1 else (
        terms[0] if terms else cp.Constant(0.0))


def _node_terms(model: ModelDeclaration, st: ModelStructure, W: cp.Variable,
                positions: np.ndarray | None = None
                ) -> tuple[list[cp.Expression], list[cp.Constraint]]:
    """The loss terms and node constraints of a structure in the matrix variable ``W``:
    stacked library losses, regularizers and constraints, and symbolic terms in their node's
    own variable ``x_i`` tied to its row (``positions[k]``: the model position of row ``k``;
    default the identity)."""
    d = model.dim
    w_flat = cp.vec(W, order="C")
    terms: list[cp.Expression] = []
    cons: list[cp.Constraint] = []
    for batch in st.batches:
        expr = batch.expression(w_flat, W)
        if expr is None:  # a batch of the structure always has a term (its nodes carry data)
            raise UnsupportedError(f"the {batch.kind} batch (nodes {batch.nodes[:5].tolist()}"
                                   f"...) returned no CVXPY expression")
        terms.append(expr)
    if st.l1.any():
        idx = np.flatnonzero(st.l1)
        terms.append(st.l1[idx] @ cp.sum(cp.abs(W[idx, :]), axis=1))
    if st.l2.any():
        idx = np.flatnonzero(st.l2)
        terms.append(cp.sum_squares(cp.multiply(np.sqrt(st.l2[idx])[:, None], W[idx, :])))
    tied: set[int] = set()

    def at(k: int) -> int:
        return k if positions is None else int(positions[k])

    def tie(k: int) -> None:
        if k not in tied:
            tied.add(k)
            cons.append(cast(cp.Variable, model.variable_if_any(at(k))) == W[k, :])

    for k in st.symbolic:
        loss = model.loss_at(at(k))
        terms.append(loss.expression(cast(cp.Variable, loss.variable)))
        tie(k)
    for k in st.symbolic_constraints:
        for c in model.constraints_at(at(k)):
            if isinstance(c, SymbolicConstraint):
                cons.extend(c.constraints(c.variable))
        tie(k)
    # library constraints, stacked
    if st.box is not None:
        idx, lo, hi = st.box
        flat = (idx[:, None] * d + np.arange(d)[None, :]).ravel()
        cons.extend(bounds_constraints(w_flat[flat], lo.ravel(), hi.ravel(), flat.size))
    if st.nonneg.size:
        cons.append(W[st.nonneg, :] >= 0)
    for p, (idx, radii) in st.normball.items():
        cons.extend(norm_rows_le(W[idx, :], radii, p))
    return terms, cons


def find_infeasible_nodes(model: ModelDeclaration, nodes: Any = None) -> list[Any]:
    """Node labels whose own constraints (with their loss's domain) have no feasible point.

    ``nodes``: positions to check (default: every node with constraints).  Each node's
    feasibility problem has no objective (only its constraints), so it is far better
    conditioned than the problem whose solver reported infeasibility."""
    bad = []
    todo = (model.structure().constrained.tolist() if nodes is None
            else sorted(int(i) for i in nodes))
    for i in todo:
        loss = model.loss_at(i)
        if not model.constraints_at(i) and not loss.domain_constraints():
            continue
        # symbolic losses and constraints are stated in the node's own variable
        x = model.variable_if_any(i) or cp.Variable(model.dim)
        cons: list[cp.Constraint] = []
        for c in model.constraints_at(i):
            cons.extend(c.constraints(x))
        cons.extend(loss.domain_constraints())
        if _ends_in(cp.Problem(cp.Minimize(0), cons), (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE)):
            bad.append(model.nodes[i])
    return bad


def _ends_in(prob: cp.Problem, statuses: tuple[str, ...]) -> bool:
    """Whether a plain Clarabel solve of a small diagnostic problem ends in ``statuses``
    (a solver failure counts as no)."""
    try:
        prob.solve(solver="CLARABEL")
    except cp.error.SolverError:
        return False
    return prob.status in statuses


def _data_overflow_nodes(model: ModelDeclaration) -> list[tuple[Any, float]]:
    """``(label, max |data|)`` of the nodes whose loss data overflow double precision in the
    products the solvers form (``X^T X``, ``X^T y``, ``||a||^2``)."""
    out = []
    with np.errstate(over="ignore", invalid="ignore"):
        for i, loss in model.declared_losses().items():
            arrays = [np.asarray(getattr(loss, k), dtype=float) for k in ("X", "y", "a")
                      if isinstance(getattr(loss, k, None), np.ndarray)]
            if not arrays:
                continue
            big = max(float(np.abs(a).max(initial=0.0)) for a in arrays)
            X = getattr(loss, "X", None)
            prods = [big * big * max(1, arrays[0].size)]
            if isinstance(X, np.ndarray) and X.ndim == 2:
                prods.append(float(np.abs(X.T @ X).max(initial=0.0)))
            if not all(np.isfinite(prods)):
                out.append((model.nodes[i], big))
    return out


def data_overflow_message(model: ModelDeclaration, where: str) -> str | None:
    """A message naming the nodes whose data overflow (None if none do)."""
    bad = _data_overflow_nodes(model)
    if not bad:
        return None
    names = ", ".join(f"{v!r} (entries up to {b:.3g})" for v, b in bad[:10])
    return (f"{where}: the data of node(s) {names}{' ...' if len(bad) > 10 else ''} overflow "
            "double precision (X^T X or ||y||^2 is not finite): rescale the data")


def unbounded_nodes(model: ModelDeclaration) -> list[Any]:
    """Labels of the nodes whose own loss is unbounded below over their constraints.

    ``P`` is bounded below whenever every ``L_i`` is (the penalty is nonnegative), so when a
    solver reports ``P`` unbounded these nodes are the ones responsible."""
    bad = []
    for i in range(model.num_nodes):
        if np.isfinite(model.loss_at(i).lower_bound):
            continue  # a known lower bound (every library loss is >= 0)
        _, loss, cons = compile_nodes(model, np.array([i]))
        if _ends_in(cp.Problem(cp.Minimize(loss), cons), (cp.UNBOUNDED, cp.UNBOUNDED_INACCURATE)):
            bad.append(model.nodes[i])
    return bad
