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

import functools
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cvxpy as cp
import numpy as np

from ._cvx import bounds_constraints, norm_rows_le
from .constraints import SymbolicConstraint
from .errors import AccuracyWarning, InfeasibleError, SolverError
from .losses import SymbolicLoss

if TYPE_CHECKING:
    from .model import GTVModel
    from .solution import Solution

__all__ = ["PrimalProblem", "compile_primal", "solve_exact", "DEFAULT_SOLVER_OPTIONS",
           "FALLBACK_SOLVER_OPTIONS", "run_solver"]

#: Accuracy defaults, tighter than the solvers' own so that exact solves are ground truth.
#: Clarabel's own defaults (gap 1e-8) leave weight errors up to 1e-4 on a 60-node fused-lasso
#: chain; a duality-gap tolerance of 1e-13 brings them below 1e-8 (tests/test_exact.py checks
#: 1e-7 against an exact path algorithm).  Interior-point methods cannot always reach that gap
#: on large problems, so Clarabel falls back once to :data:`FALLBACK_SOLVER_OPTIONS`.
DEFAULT_SOLVER_OPTIONS: dict[str, dict[str, Any]] = {
    "CLARABEL": {
        "tol_gap_abs": 1e-13,
        "tol_gap_rel": 1e-13,
        "tol_feas": 1e-9,
        "tol_ktratio": 1e-8,
        "max_iter": 500,
    },
    "OSQP": {
        "eps_abs": 1e-10,
        "eps_rel": 1e-10,
        "max_iter": 400_000,
        "polishing": True,  # OSQP >= 1.0 name of the active-set polish (exact on QPs)
    },
    "SCS": {
        "eps_abs": 1e-9,
        "eps_rel": 1e-9,
        "max_iters": 400_000,
    },
}

#: Successively looser tolerances tried when a solver cannot reach
#: :data:`DEFAULT_SOLVER_OPTIONS` (Clarabel stops with ``InsufficientProgress`` or
#: ``AlmostSolved`` on some problems with ~1000 nodes or with power cones, e.g. ``NormP(3)``).
#: The first two levels are 10-100x tighter than the solver's own defaults; the last resort is
#: Clarabel's own defaults (gap 1e-8, feasibility 1e-8, k/tau 1e-6), which exponential-cone
#: problems (logistic losses) sometimes need: their iterates stall near a relative gap of 1e-9.
#: The level reached is recorded in ``Solution.info["tolerances"]``.  The fallback runs only
#: when the caller passed none of these options.
FALLBACK_SOLVER_OPTIONS: dict[str, list[dict[str, Any]]] = {
    "CLARABEL": [
        {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-9, "tol_ktratio": 1e-8},
        {"tol_gap_abs": 1e-9, "tol_gap_rel": 1e-9, "tol_feas": 1e-8, "tol_ktratio": 1e-7},
        {"tol_gap_abs": 1e-8, "tol_gap_rel": 1e-8, "tol_feas": 1e-8, "tol_ktratio": 1e-6},
    ],
}


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


@functools.lru_cache(maxsize=1)
def _installed_solvers() -> tuple[str, ...]:
    """CVXPY's installed solvers (cached: ``cp.installed_solvers()`` costs milliseconds)."""
    return tuple(cp.installed_solvers())


def run_solver(problem: cp.Problem, solver: str | None, opts: dict[str, Any], verbose: bool,
               accept_inaccurate: bool, what: str,
               record: dict[str, Any] | None = None) -> tuple[str, float, float]:
    """Solve a CVXPY problem with gtvmodel's accuracy defaults and status policy.

    Returns ``(solver_name, cvxpy_compile_seconds, solver_seconds)``.  Raises
    :class:`SolverError` (with the status) on failure or on an inaccurate status unless
    ``accept_inaccurate``.  Infeasibility is returned to the caller as status ``infeasible``.

    The solver runs with :data:`DEFAULT_SOLVER_OPTIONS` updated by ``opts``.  If it cannot
    reach them (a solver failure or an inaccurate/limit status) and the caller overrode none of
    the :data:`FALLBACK_SOLVER_OPTIONS` keys, it is re-run with each fallback level in turn; the
    status policy applies to the last level, and the reported times are the sums of all runs.
    If ``record`` is a dict, ``record["options"]`` receives the options of the accepted run.
    """
    name = (solver or "CLARABEL").upper()
    if name not in _installed_solvers():
        raise SolverError(f"solver {name!r} is not installed (installed: "
                          f"{', '.join(_installed_solvers())})", status=None, solver=name)
    if name == "OSQP" and not problem.is_qp():
        raise SolverError(
            f"{what}: OSQP solves only quadratic programs (squared, quadratic or zero losses, "
            "Box/NonNeg/NormBall(p=1 or inf) constraints, Norm1/NormInf/SquaredNorm2/QuadForm "
            "penalties); this problem has other cones: use CLARABEL or SCS",
            status="rejected", solver=name)
    options = dict(DEFAULT_SOLVER_OPTIONS.get(name, {}))
    options.update(opts)
    levels = FALLBACK_SOLVER_OPTIONS.get(name, [])
    if any(set(level) & set(opts) for level in levels):
        levels = []  # the caller chose the tolerances
    spent = [0.0, 0.0]
    if record is None:
        record = {}
    for level in levels:
        try:
            record["options"] = dict(options)
            comp, solve_time = _attempt(problem, name, options, verbose, False, what)
            return name, comp + spent[0], solve_time + spent[1]
        except SolverError as exc:
            if exc.status in ("rejected", "not_dcp", cp.UNBOUNDED, cp.UNBOUNDED_INACCURATE):
                raise
            comp, solve_time = _stats_times(problem, 0.0)
            spent = [spent[0] + comp, spent[1] + solve_time]
        options.update(level)
    record["options"] = dict(options)
    comp, solve_time = _attempt(problem, name, options, verbose, accept_inaccurate, what)
    return name, comp + spent[0], solve_time + spent[1]


def _stats_times(problem: cp.Problem, wall: float) -> tuple[float, float]:
    """``(cvxpy_compile_seconds, solver_seconds)`` of the last solve of ``problem``."""
    stats = problem.solver_stats
    solve_time = stats.solve_time if stats and stats.solve_time is not None else wall
    comp = getattr(problem, "compilation_time", None) or max(wall - solve_time, 0.0)
    return float(comp), float(solve_time)


def _attempt(problem: cp.Problem, name: str, options: dict[str, Any], verbose: bool,
             accept_inaccurate: bool, what: str) -> tuple[float, float]:
    """One solve with the status policy of :func:`run_solver`."""
    t0 = time.perf_counter()
    try:
        # warm_start=False: cvxpy would otherwise re-use the cached Clarabel solver through
        # update(), which stalls at a worse accuracy than a fresh solve (seen on exp cones).
        with warnings.catch_warnings():
            # the status is checked below; CVXPY's generic warning would only add noise
            warnings.filterwarnings("ignore", message="Solution may be inaccurate")
            problem.solve(solver=name, verbose=verbose, warm_start=False, **options)
    except cp.error.SolverError as exc:
        raise SolverError(f"{what}: solver {name} failed: {exc}", status="solver_error",
                          solver=name) from None
    except cp.error.DCPError as exc:  # pragma: no cover - inputs are validated before
        raise SolverError(f"{what}: problem is not DCP: {exc}", status="not_dcp",
                          solver=name) from None
    except (TypeError, ValueError) as exc:
        # e.g. an unknown solver option, or a conic problem given to a QP solver
        raise SolverError(f"{what}: solver {name} rejected the problem: {exc}",
                          status="rejected", solver=name) from None
    wall = time.perf_counter() - t0
    status = problem.status
    if status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        return 0.0, wall
    if status in (cp.UNBOUNDED, cp.UNBOUNDED_INACCURATE):
        raise SolverError(f"{what}: {name} reports the problem unbounded ({status}); a node "
                          "loss may be unbounded below", status=status, solver=name)
    if status == cp.OPTIMAL_INACCURATE and not accept_inaccurate:
        raise SolverError(
            f"{what}: {name} stopped with status {status!r}; the result is not accurate enough "
            "for a reference solution (pass accept_inaccurate=True to accept it, or loosen the "
            "tolerances)", status=status, solver=name)
    if status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise SolverError(f"{what}: {name} failed with status {status!r}", status=status,
                          solver=name)
    return _stats_times(problem, wall)


def find_infeasible_nodes(model: GTVModel) -> list[Any]:
    """Node labels whose own constraints (with their loss's domain) have no feasible point."""
    bad = []
    for i in sorted(model._constraints):
        # symbolic losses and constraints are stated in the node's own variable
        x = model._vars.get(i) or cp.Variable(model.dim)
        cons: list[cp.Constraint] = []
        for c in model.constraints_at(i):
            cons.extend(c.constraints(x))
        loss = model.loss_at(i)
        if isinstance(loss, SymbolicLoss):
            cons.extend(loss.expr.domain)
        prob = cp.Problem(cp.Minimize(0), cons)
        try:
            prob.solve(solver="CLARABEL")
        except cp.error.SolverError:
            continue
        if prob.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
            bad.append(model.nodes[i])
    return bad


def solve_exact(model: GTVModel, solver: str | None = None, *, accept_inaccurate: bool = False,
                verbose: bool = False, **opts: Any) -> Solution:
    """Solve (16) to high accuracy; returns weights, flows ``u`` and timings.

    ``solver`` is ``"CLARABEL"`` (default), ``"OSQP"`` (quadratic programs only: squared or
    quadratic losses with ``SquaredNorm2``/``QuadForm``/``Norm1``/``NormInf`` penalties) or
    ``"SCS"``; ``opts`` override :data:`DEFAULT_SOLVER_OPTIONS` (Clarabel falls back to
    :data:`FALLBACK_SOLVER_OPTIONS` when it cannot reach them; ``Solution.info["tolerances"]``
    holds the options of the accepted run).  An inaccurate solver status
    raises :class:`~gtvmodel.errors.SolverError` unless ``accept_inaccurate=True``; infeasible
    node constraints raise :class:`~gtvmodel.errors.InfeasibleError` naming the nodes.
    """
    from .solution import Solution

    fresh = "primal" not in model._cache
    compiled = compile_primal(model)
    record: dict[str, Any] = {}
    name, comp, solve_time = run_solver(compiled.problem, solver, opts, verbose,
                                        accept_inaccurate, "solve_exact", record)
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
    W = np.asarray(compiled.W.value, dtype=float).reshape(model.num_nodes, model.dim)
    if compiled.flow_constraint is not None:
        dual = compiled.flow_constraint.dual_value
        if dual is None:
            raise SolverError(f"solve_exact: {name} returned no dual values for the flows",
                              status=compiled.problem.status, solver=name)
        U = -np.asarray(dual, dtype=float).reshape(model.num_edges, model.dim)
    else:
        U = np.zeros((0, model.dim))
    if not (np.isfinite(W).all() and np.isfinite(U).all()):
        raise SolverError(f"solve_exact: {name} returned non-finite values",
                          status=compiled.problem.status, solver=name)
    return Solution(
        weights=W,
        flows=U,
        objective=float(compiled.problem.value),
        status=compiled.problem.status,
        solver=name,
        compile_time=(compiled.build_time if fresh else 0.0) + comp,
        solve_time=solve_time,
        nodes=list(model.nodes),
        info={"lam": model.lam, "tolerances": record.get("options")},
    )
