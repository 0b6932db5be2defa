"""Exact compilation of the primal problem (16) to one vectorized CVXPY problem.

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
``D^T nu in dL(W)``; hence ``u = -nu`` satisfies MATH.md's optimality conditions (23)/(25),
``-(D^T u)_i in dL_i(w_i)`` and ``u_e in lambda A_e dphi(w_{e+} - w_{e-})``.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cvxpy as cp
import networkx as nx
import numpy as np

from ._cvx import bounds_constraints, norm_rows_le
from ._solver import DEFAULT_SOLVER_OPTIONS, FALLBACK_SOLVER_OPTIONS, run_solver
from ._validate import as_nonneg_scalar
from .constraints import SymbolicConstraint
from .errors import AccuracyWarning, DataError, GTVError, InfeasibleError, SolverError
from .losses import SymbolicLoss, ZeroLoss

if TYPE_CHECKING:
    from .model import GTVModel
    from .solution import Solution

__all__ = ["PrimalProblem", "compile_primal", "solve_exact", "DEFAULT_SOLVER_OPTIONS",
           "FALLBACK_SOLVER_OPTIONS", "RESOLVE_OPTIONS", "run_solver", "find_infeasible_nodes",
           "unbounded_nodes", "data_overflow_message"]

@dataclass
class PrimalProblem:
    """A compiled primal problem: the CVXPY problem and its handles."""

    problem: cp.Problem
    W: cp.Variable
    Z: cp.Variable | None
    flow_constraint: cp.Constraint | None
    lam: cp.Parameter
    build_time: float


def compile_primal(model: GTVModel) -> PrimalProblem:
    """Build the vectorized CVXPY problem of (16) (cached on the model until it changes)."""
    cached = model._cache.get("primal")
    if cached is not None:
        cached.lam.value = model.lam
        return cached
    t0 = time.perf_counter()
    n, d = model.num_nodes, model.dim
    st = model.structure()
    W = cp.Variable((n, d), name="W")
    lam = cp.Parameter(nonneg=True, name="lambda", value=model.lam)
    w_flat = cp.vec(W, order="C")
    terms: list[cp.Expression] = []
    cons: list[cp.Constraint] = []
    for batch in st.batches:
        expr = batch.expression(w_flat, W)
        if expr is not None:
            terms.append(expr)
    if st.l1.any():
        idx = np.flatnonzero(st.l1)
        terms.append(st.l1[idx] @ cp.sum(cp.abs(W[idx, :]), axis=1))
    if st.l2.any():
        idx = np.flatnonzero(st.l2)
        terms.append(cp.sum_squares(cp.multiply(np.sqrt(st.l2[idx])[:, None], W[idx, :])))
    tied: set[int] = set()

    def tie(i: int) -> None:
        if i not in tied:
            tied.add(i)
            cons.append(model._vars[i] == W[i, :])

    for i in st.symbolic:
        loss = model.loss_at(i)
        terms.append(loss.expression(loss.variable))
        tie(i)
    for i in st.symbolic_constraints:
        for c in model.constraints_at(i):
            if isinstance(c, SymbolicConstraint):
                cons.extend(c.constraints(c.variable))
        tie(i)
    # library constraints, stacked
    if st.box is not None:
        idx, lo, hi = st.box
        flat = (idx[:, None] * d + np.arange(d)[None, :]).ravel()
        cons.extend(bounds_constraints(w_flat[flat], lo.ravel(), hi.ravel(), flat.size))
    if st.nonneg.size:
        cons.append(W[st.nonneg, :] >= 0)
    for p, (idx, radii) in st.normball.items():
        cons.extend(norm_rows_le(W[idx, :], radii, p))
    Z = flow = None
    if model.num_edges:
        Z = cp.Variable((model.num_edges, d), name="Z")
        flow = Z == model.incidence @ W
        cons.append(flow)
        rows, pen_cons = model.penalty.rows_epigraph(Z)
        cons.extend(pen_cons)
        terms.append(lam * (model.edge_weights @ rows))
    objective = cp.sum(cp.hstack(terms)) if len(terms) > 1 else (
        terms[0] if terms else cp.Constant(0.0))
    problem = cp.Problem(cp.Minimize(objective), cons)
    compiled = PrimalProblem(problem, W, Z, flow, lam, time.perf_counter() - t0)
    model._cache["primal"] = compiled
    return compiled


def submodel(model: GTVModel, nodes: np.ndarray) -> GTVModel:
    """An edgeless model on the given nodes (relabelled ``0..g-1``) with their losses,
    constraints and (for symbolic ones) their own CVXPY variables."""
    from .model import GTVModel

    G = nx.empty_graph(len(nodes))
    sub = GTVModel(G, model.dim, penalty=model.penalty, lam=0.0)
    for j, i in enumerate(nodes):
        i = int(i)
        if i in model._vars:
            sub._vars[j] = model._vars[i]
        loss = model.loss_at(i)
        if not (isinstance(loss, ZeroLoss) and not loss.l1 and not loss.l2):
            sub.set_loss(j, loss)
        for c in model.constraints_at(i):
            sub.add_constraint(j, c)
    return sub


def find_infeasible_nodes(model: GTVModel, nodes: Any = None) -> list[Any]:
    """Node labels whose own constraints (with their loss's domain) have no feasible point.

    ``nodes``: positions to check (default: every node with constraints).  Each node's
    feasibility problem has no objective (only its constraints), so it is far better
    conditioned than the problem whose solver reported infeasibility."""
    bad = []
    todo = sorted(model._constraints) if nodes is None else sorted(int(i) for i in nodes)
    for i in todo:
        if not model.constraints_at(i) and not isinstance(model.loss_at(i), SymbolicLoss):
            continue
        # symbolic losses and constraints are stated in the node's own variable
        x = model._vars.get(i) or cp.Variable(model.dim)
        cons: list[cp.Constraint] = []
        for c in model.constraints_at(i):
            cons.extend(c.constraints(x))
        loss = model.loss_at(i)
        if isinstance(loss, SymbolicLoss):
            cons.extend(loss.expr.domain)
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


#: Options of the re-solve that :func:`solve_exact` runs when its self-certificate misses the
#: requested accuracy (Clarabel only).  Clarabel's static KKT regularization (default ``1e-8``)
#: biases the solution of badly scaled problems (data spanning 1e-3..1e3, weights 1e-6..1e6):
#: the solver reports "optimal" while the objective is ~1e-6 relative off and the certified gap
#: is ~1e-3; with ``1e-10`` the certified gaps of those instances drop to 1e-8..1e-11
#: (``tests/test_robustness.py``).  Not the default, because a smaller regularization makes
#: some well-scaled solves fail (measured: ``1e-12`` reported a bounded problem unbounded).
RESOLVE_OPTIONS: dict[str, dict[str, Any]] = {
    "CLARABEL": {"static_regularization_constant": 1e-10, "max_iter": 1000},
}


def _data_overflow_nodes(model: GTVModel) -> list[tuple[Any, float]]:
    """``(label, max |data|)`` of the nodes whose loss data overflow double precision in the
    products the solvers form (``X^T X``, ``X^T y``, ``||a||^2``)."""
    out = []
    with np.errstate(over="ignore", invalid="ignore"):
        for i, loss in model._losses.items():
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


def data_overflow_message(model: GTVModel, where: str) -> str | None:
    """A message naming the nodes whose data overflow (None if none do)."""
    bad = _data_overflow_nodes(model)
    if not bad:
        return None
    names = ", ".join(f"{v!r} (entries up to {b:.3g})" for v, b in bad[:10])
    return (f"{where}: the data of node(s) {names}{' ...' if len(bad) > 10 else ''} overflow "
            "double precision (X^T X or ||y||^2 is not finite): rescale the data")


def unbounded_nodes(model: GTVModel) -> list[Any]:
    """Labels of the nodes whose own loss is unbounded below over their constraints.

    ``P`` is bounded below whenever every ``L_i`` is (the penalty is nonnegative), so when a
    solver reports ``P`` unbounded these nodes are the ones responsible."""
    bad = []
    for i in range(model.num_nodes):
        if np.isfinite(model.loss_at(i).lower_bound):
            continue  # a known lower bound (every library loss is >= 0)
        prob = compile_primal(submodel(model, np.array([i]))).problem
        if _ends_in(prob, (cp.UNBOUNDED, cp.UNBOUNDED_INACCURATE)):
            bad.append(model.nodes[i])
    return bad


def solve_exact(model: GTVModel, solver: str | None = None, *, accept_inaccurate: bool = False,
                verbose: bool = False, certify: bool = True, accuracy: float = 1e-6,
                **opts: Any) -> Solution:
    """Solve (16) to high accuracy; returns weights, flows ``u`` and timings.

    ``solver`` is ``"CLARABEL"`` (default), ``"OSQP"`` (quadratic programs only: squared or
    quadratic losses with ``SquaredNorm2``/``QuadForm``/``Norm1``/``NormInf`` penalties) or
    ``"SCS"``; ``opts`` override :data:`DEFAULT_SOLVER_OPTIONS` (Clarabel falls back to
    :data:`FALLBACK_SOLVER_OPTIONS` when it cannot reach them; ``Solution.info["tolerances"]``
    holds the options of the accepted run).  An inaccurate solver status
    raises :class:`~gtvmodel.errors.SolverError` unless ``accept_inaccurate=True``; infeasible
    node constraints raise :class:`~gtvmodel.errors.InfeasibleError` naming the nodes; an
    unbounded problem raises :class:`~gtvmodel.errors.SolverError` naming the nodes whose
    losses are unbounded below.

    **Self-certificate.**  A solver's "optimal" is not proof: on badly scaled problems Clarabel
    reported "optimal" with the objective 4e-8 relative above the optimum and a certified gap
    of ~1e-3 (``tests/test_robustness.py``).  With ``certify=True``
    (default) the answer is certified with :func:`gtvmodel.certificate.certify` (the solver's
    flows, repaired to a dual-feasible point) and the :class:`~gtvmodel.certificate.Certificate`
    is ``Solution.certificate`` (``info["certified_gap"]``, ``info["certified_relative_gap"]``).
    If the certified relative gap exceeds ``accuracy`` (default 1e-6), the problem is re-solved
    once with :data:`RESOLVE_OPTIONS` (the better certified answer is kept), and if it still
    exceeds it while the status is ``"optimal"``, an :class:`~gtvmodel.errors.AccuracyWarning`
    says to what the solution is certified (an accepted ``"optimal_inaccurate"`` status already
    says the answer is inaccurate; ``info["certified"]`` is False then too).  Measured cost
    (``info["certificate_time"]``; the first certificate of a model pays the flow repair's
    one-time set-up): 0.1-2 % of the solver time with squared losses only (200-1000 nodes),
    5-13 % with many zero-loss nodes (paper 001 VI-A with rho = 0.6, paper 000's setting),
    single-threaded BLAS; with multithreaded OpenBLAS on a busy 2-core machine the set-up's
    eigendecomposition right after a Clarabel solve was up to 50x slower (then 1-2x the solve
    time).  ``certify=False`` skips it.
    """
    from .certificate import certify as certify_fn
    from .solution import Solution

    fresh = "primal" not in model._cache
    compiled = compile_primal(model)
    record: dict[str, Any] = {}
    # with the self-certificate an "optimal_inaccurate" answer is let through and kept only if
    # its certificate proves the requested accuracy (below)
    lenient = accept_inaccurate or certify
    try:
        name, comp, solve_time = run_solver(compiled.problem, solver, opts, verbose,
                                            lenient, "solve_exact", record)
    except SolverError as exc:
        raise _explain(model, exc) from None
    levels = FALLBACK_SOLVER_OPTIONS.get(name, [])
    if levels and record.get("options", {}).get("tol_gap_rel") == levels[-1]["tol_gap_rel"] \
            and not any(set(level) & set(opts) for level in levels):
        warnings.warn(
            f"solve_exact: {name} could not reach gtvmodel's reference tolerances and was "
            f"accepted at its own default accuracy {levels[-1]}; the weights may be accurate to "
            "only about 1e-5 (see Solution.info['tolerances'])", AccuracyWarning, stacklevel=3)
    if compiled.problem.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        bad = find_infeasible_nodes(model)
        where = (f"infeasible constraints at node(s) {', '.join(map(repr, bad))}" if bad
                 else "the constraints have no common feasible point")
        raise InfeasibleError(f"solve_exact: {name} reports the problem infeasible: {where}")
    W, U = _read(model, compiled, name)
    info: dict[str, Any] = {"lam": model.lam, "tolerances": record.get("options")}
    status, objective = compiled.problem.status, float(compiled.problem.value)
    cert = None
    if certify:
        accuracy = as_nonneg_scalar(accuracy, "accuracy", "solve_exact", strict=True)
        t0 = time.perf_counter()
        try:
            cert = _self_certificate(certify_fn, model, W, U, accuracy)
        except GTVError as exc:  # e.g. a conjugate the certificate cannot evaluate
            info["certificate_error"] = str(exc)
        info["certificate_time"] = time.perf_counter() - t0
        resolve = RESOLVE_OPTIONS.get(name)
        if (resolve and cert is not None and not cert.certifies(accuracy)
                and not set(resolve) & set(opts)):
            record2: dict[str, Any] = {}
            try:
                _, comp2, st2 = run_solver(compiled.problem, name, {**opts, **resolve},
                                           verbose, lenient, "solve_exact (re-solve)",
                                           record2)
                info["resolved"] = True
                comp, solve_time = comp + comp2, solve_time + st2
                if compiled.problem.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
                    W2, U2 = _read(model, compiled, name)
                    t1 = time.perf_counter()
                    cert2 = _self_certificate(certify_fn, model, W2, U2, accuracy)
                    info["certificate_time"] += time.perf_counter() - t1
                    if cert2.relative_gap < cert.relative_gap:
                        W, U, cert = W2, U2, cert2
                        status = compiled.problem.status
                        objective = float(compiled.problem.value)
                        info["tolerances"] = record2.get("options")
            except GTVError:
                info["resolved"] = False
        info["certified"] = cert is not None and cert.certifies(accuracy)
        if cert is not None:
            info["certified_gap"] = cert.gap
            info["certified_relative_gap"] = cert.relative_gap
        if status == cp.OPTIMAL_INACCURATE and not accept_inaccurate and not info["certified"]:
            what = (f"certified only to a relative gap of {cert.relative_gap:.3g}"
                    if cert is not None else "not certified")
            raise SolverError(
                f"solve_exact: {name} stopped with status 'optimal_inaccurate' and the result is "
                f"{what} (requested accuracy {accuracy:g}); pass accept_inaccurate=True to "
                "accept it, or loosen the tolerances", status=status, solver=name)
        # an accepted inaccurate status already says so; a claimed "optimal" must be true
        if not info["certified"] and status == cp.OPTIMAL:
            what = (f"the solution is certified only to a relative gap of "
                    f"{cert.relative_gap:.3g}" if cert is not None else
                    f"the solution could not be certified ({info['certificate_error']})")
            warnings.warn(
                f"solve_exact: {name} reports {status!r}, but {what} (requested accuracy "
                f"{accuracy:g}; gtvmodel.certify with the solver's flows"
                + (", also after a re-solve with RESOLVE_OPTIONS" if "resolved" in info else "")
                + "): the weights may be that far from optimal (see Solution.certificate)",
                AccuracyWarning, stacklevel=3)
    return Solution(
        weights=W,
        flows=U,
        objective=objective,
        status=status,
        solver=name,
        compile_time=(compiled.build_time if fresh else 0.0) + comp,
        solve_time=solve_time,
        nodes=list(model.nodes),
        info=info,
        certificate=cert,
    )


def _self_certificate(certify_fn: Any, model: GTVModel, W: np.ndarray, U: np.ndarray,
                      accuracy: float) -> Any:
    """The certificate of an exact solve (``project="never"``: cheap repairs only); if it
    misses ``accuracy``, also with the convex projection of the flows and with flows built
    from the weights (the best one is kept: each is a valid bound)."""
    cert = certify_fn(model, W, U, tol=accuracy, project="never")
    for flows in (U, None):
        if cert.certifies(accuracy):
            break
        alt = certify_fn(model, W, flows, tol=accuracy)
        if alt.relative_gap < cert.relative_gap:
            cert = alt
    return cert


def _read(model: GTVModel, compiled: PrimalProblem, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Weights and flows (MATH.md's sign) of the last solve, checked finite."""
    status = compiled.problem.status
    if compiled.W.value is None and status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) and all(
            v.id != compiled.W.id for v in compiled.problem.variables()):
        # W appears nowhere (no edges, zero losses only): every W is optimal, take 0
        compiled.W.value = np.zeros(compiled.W.shape)
    if compiled.W.value is None:
        raise SolverError(f"solve_exact: {name} returned no weights (status {status!r})",
                          status=status, solver=name)
    W = np.asarray(compiled.W.value, dtype=float).reshape(model.num_nodes, model.dim)
    if compiled.flow_constraint is not None:
        dual = compiled.flow_constraint.dual_value
        if dual is None:
            raise SolverError(f"solve_exact: {name} returned no dual values for the flows",
                              status=status, solver=name)
        U = -np.asarray(dual, dtype=float).reshape(model.num_edges, model.dim)
    else:
        U = np.zeros((0, model.dim))
    if not (np.isfinite(W).all() and np.isfinite(U).all()):
        msg = data_overflow_message(model, "solve_exact")
        if msg is not None:
            raise DataError(msg)
        bad = np.flatnonzero(~np.isfinite(W).all(axis=1))
        where = (f" (weights of node(s) {', '.join(repr(model.nodes[i]) for i in bad[:10])})"
                 if bad.size else " (flows)")
        raise SolverError(f"solve_exact: {name} returned non-finite values{where}",
                          status=status, solver=name)
    return W, U


def _explain(model: GTVModel, exc: SolverError) -> GTVError:
    """Add what can be determined about the cause to a failed exact solve's error."""
    msg = data_overflow_message(model, "solve_exact")
    if msg is not None:
        return DataError(f"{msg} ({exc})")
    if exc.status in (cp.UNBOUNDED, cp.UNBOUNDED_INACCURATE):
        bad = unbounded_nodes(model)
        if bad:
            return SolverError(
                f"solve_exact: the problem is unbounded: the loss of node(s) "
                f"{', '.join(map(repr, bad[:10]))}{' ...' if len(bad) > 10 else ''} is unbounded "
                "below over the node's constraints", status=exc.status, solver=exc.solver)
    return exc
