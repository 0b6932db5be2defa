"""``solve_exact``: the primal problem (16) solved exactly as one vectorized CVXPY problem
(compiled by :mod:`gtvmodel.solve.compile`), with its flows (the multipliers of ``Z = D W``) and
a self-certificate (34) of the answer.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

import cvxpy as cp
import numpy as np

from .._solver import DEFAULT_SOLVER_OPTIONS, FALLBACK_SOLVER_OPTIONS, check_solver, run_solver
from .._validate import check_bool, check_scalar
from ..certificates.certificate import certify as certify_fn
from ..declaration import ModelDeclaration
from ..errors import (
    AccuracyWarning,
    DataError,
    GTVError,
    InfeasibleError,
    ParameterError,
    SolverError,
)
from ..results import Labels, failed_result
from ..solution import Solution
from .compile import (
    PrimalProblem,
    compile_primal,
    data_overflow_message,
    find_infeasible_nodes,
    unbounded_nodes,
)
from .first_order import FIRST_ORDER_ACCURACY, choose_route, solve_first_order
from .polish import polish as polish_fn
from .uniqueness import uniqueness

__all__ = ["solve_exact", "RESOLVE_OPTIONS", "DEFAULT_SOLVER_OPTIONS", "FALLBACK_SOLVER_OPTIONS"]


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


def solve_exact(model: ModelDeclaration, solver: str | None = None, *,
                accept_inaccurate: bool = False,
                verbose: bool = False, certify: bool = True, accuracy: float | None = None,
                raise_on_failure: bool = True, method: str = "interior",
                auto_threshold: int | None = None, polish: bool = True,
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
    losses are unbounded below.  With ``raise_on_failure=False`` these outcomes are returned
    instead, as CVXPY users read them: a :class:`~gtvmodel.solution.Solution` whose ``status``
    is the failure's (``"infeasible"``, ``"unbounded"``, ``"solver_error"``, ...), ``success``
    False, ``weights``/``flows`` None and ``info["error"]`` the message (bad arguments and
    bad data still raise).

    **Self-certificate.**  A solver's "optimal" is not proof: on badly scaled problems Clarabel
    reported "optimal" with the objective 4e-8 relative above the optimum and a certified gap
    of ~1e-3 (``tests/test_robustness.py``).  With ``certify=True``
    (default) the answer is certified with :func:`gtvmodel.certificates.certificate.certify`
    (the solver's flows, repaired to a dual-feasible point) and the
    :class:`~gtvmodel.certificates.certificate.Certificate`
    is ``Solution.certificate`` (``info["certified_gap"]``, ``info["certified_relative_gap"]``).
    If the certified relative gap exceeds ``accuracy`` (default 1e-6), the problem is re-solved
    once with :data:`RESOLVE_OPTIONS` (the better certified answer is kept), and if it still
    exceeds it while the status is ``"optimal"``, an :class:`~gtvmodel.errors.AccuracyWarning`
    says to what the solution is certified (an accepted ``"optimal_inaccurate"`` status already
    says the answer is inaccurate; ``Solution.success`` is False then too).  Measured cost
    (``timings["certificate"]``): 0.3-0.9 % of one ``solve_exact`` warm and 0.8-3.9 % on the
    first call on a model (which builds the repair's caches), on a 200-node SBM with 40 %
    zero-loss nodes (squared and logistic losses) and a 10,000-node ring
    (``python benchmarks/bench_certify.py --repeats 3``, 2026-11-22; 1.1 % cold on paper 001
    Table I's setting, ``benchmarks/bench_certify_scale.py --table1``, 2026-11-23).
    ``certify=False`` skips it.

    **Polish** (issue 17; :mod:`gtvmodel.solve.polish`).  With ``polish=True`` (default) the
    certified interior-point answer is polished: Newton's method on (16) restricted to its
    fused clusters (and ``l1`` zeros), with flows meeting the node optimality conditions on
    them; the polished point replaces the answer only when its certified gap (34) is at most
    the interior-point one's and its objective is not larger.  Interior-point weights are
    accurate only to ~1e-7 in flat directions; polished ones agree with an independent Newton
    oracle to 1e-14-4e-12, at 1-2 % of the solve's time on a 1000-node SBM and 15-23 % on a
    32 x 32 grid (``python benchmarks/bench_polish.py``, 2026-11-23).  It applies to library
    losses with a Hessian (squared, quadratic, logistic, Huber, zero; ``l1``/``l2``
    regularizers), ``Norm2``/``Norm1``/``SquaredNorm2`` penalties and models without node
    constraints, and is skipped otherwise (and with ``certify=False``, since only a
    certificate can accept it, or a status other than ``"optimal"``); ``info["polish"]`` says
    what happened (``status`` ``"applied"``, ``"rejected"`` or
    ``"skipped"``, ``reason``, ``newton_iterations``, ``gap_before``/``gap_after``) and
    ``timings["polish"]`` what it cost.  ``polish=False`` turns it off.

    **Routes** (issue 16; :mod:`gtvmodel.solve.first_order`).  ``method="interior"``
    (default) is the conic solve above.  ``method="first_order"`` runs Algorithm 1 of paper 001
    (PU (32), DU (33), :func:`gtvmodel.solve_primal_dual`) until the certified relative gap
    (34) is at most ``accuracy`` (default 1e-9 for this route, 1e-6 for the interior one);
    ``opts`` are then Algorithm 1's (``max_iter``, ``warm_start``, ``step``, ...), ``solver``
    must be None, ``certify`` does not apply (the route stops on a certificate), and a run
    that ends before its certificate meets ``accuracy`` raises
    :class:`~gtvmodel.errors.SolverError` with the gap reached (or returns it with ``success``
    False under ``accept_inaccurate`` or ``raise_on_failure=False``).  ``method="auto"``
    takes the first-order route when ``(n + |E|) d`` exceeds ``auto_threshold`` (default
    :data:`gtvmodel.solve.first_order.AUTO_THRESHOLD`, where Clarabel's factorization was
    measured to take minutes and gigabytes on random graphs).  ``info["route"]`` and
    ``info["route_reason"]`` say which route ran and why.

    Examples
    --------
    Two nodes with data, ``L_i(w) = ||w - a_i||^2``, joined through a node without data by the
    network Lasso penalty ``phi = ||.||_2`` at ``lambda = 0.5``:

    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), dim=1, lam=0.5)
    >>> model.set_loss(0, gm.QuadraticLoss([1.0]))
    >>> model.set_loss(2, gm.QuadraticLoss([-1.0]))
    >>> sol = gm.solve_exact(model)
    >>> sol.status, sol.success, round(sol.objective, 4)
    ('optimal', True, 0.875)
    >>> np.allclose(sol.weights.ravel(), [0.75, 0.0, -0.75], atol=1e-6)
    True

    The flows ``u_e`` (the multipliers of ``Z = D W``) sit at the capacity ``lambda A_e = 0.5``,
    and ``-(D^T u)_0 = -0.5 = grad L_0(0.75)`` (optimality (23)); the self-certificate (34)
    proves the answer:

    >>> np.round(sol.flows.ravel(), 4)
    array([0.5, 0.5])
    >>> sol.certificate.success, sol.certificate.gap < 1e-6
    (True, True)
    """
    polish = check_bool(polish, "polish", "solve_exact")
    route, reason = choose_route(model, method, auto_threshold)
    if route == "first_order":
        return _first_order(model, solver, accept_inaccurate, verbose, certify, accuracy,
                            raise_on_failure, reason, opts)
    accuracy = _check_args(solver, accept_inaccurate, verbose, certify,
                           1e-6 if accuracy is None else accuracy)
    check_bool(raise_on_failure, "raise_on_failure", "solve_exact")
    try:
        sol = _solve(model, solver, accept_inaccurate, verbose, certify, accuracy, opts,
                     polish)
        sol.info.update(route="interior", route_reason=reason)
        return sol
    except (InfeasibleError, SolverError) as exc:
        if raise_on_failure:
            raise
        return failed_result(Solution, Labels(model.nodes, model.edges), exc,
                             check_solver(solver), objective=math.nan, success=False)


def _solve(model: ModelDeclaration, solver: str | None, accept_inaccurate: bool,
           verbose: bool, certify: bool, accuracy: float, opts: dict[str, Any],
           polish: bool = False) -> Solution:
    """The body of :func:`solve_exact` once its arguments are checked."""
    fresh = model.cache.get("primal") is None
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
    _warn_default_accuracy(name, record, opts)
    _check_feasible(model, compiled, name)
    W, U = _read(model, compiled, name)
    info: dict[str, Any] = {"lam": model.lam, "tolerances": record.get("options")}
    answer = _Answer(W, U, compiled.problem.status, float(compiled.problem.value), None,
                     comp, solve_time)
    if certify:
        answer = _certified(model, compiled, name, answer, info, opts, verbose, lenient,
                            accuracy, bool(record.get("shortcut")))
        if polish:
            _polished(model, answer, info, accuracy)
        _check_certified(name, answer, info, accept_inaccurate, accuracy)
    elif polish:
        info["polish"] = {"status": "skipped", "reason": "certify=False"}
    timings = {"compile": (compiled.build_time if fresh else 0.0) + answer.compile_time,
               "solve": answer.solve_time}
    if "certificate_time" in info:
        timings["certificate"] = info.pop("certificate_time")
    if "time" in info.get("polish", {}):
        timings["polish"] = info["polish"]["time"]
    uniq = uniqueness(model)
    model.set_variable_values(answer.W)
    return Solution(
        weights=answer.W,
        flows=answer.U,
        objective=answer.objective,
        status=answer.status,
        success=bool(info.pop("certified", answer.status == cp.OPTIMAL)),
        solver=name,
        timings=timings,
        labels=Labels(model.nodes, model.edges),
        info=info,
        certificate=answer.cert,
        unique=uniq.unique,
        unique_reason=uniq.reason,
    )


def _first_order(model: ModelDeclaration, solver: str | None, accept_inaccurate: bool,
                 verbose: bool, certify: bool, accuracy: float | None, raise_on_failure: bool,
                 reason: str, opts: dict[str, Any]) -> Solution:
    """The first-order route (:func:`gtvmodel.solve.first_order.solve_first_order`) once
    :func:`solve_exact`'s arguments are checked: it names no solver and always certifies."""
    accuracy = _check_args(solver, accept_inaccurate, verbose, certify,
                           FIRST_ORDER_ACCURACY if accuracy is None else accuracy)
    check_bool(raise_on_failure, "raise_on_failure", "solve_exact")
    if solver is not None:
        raise ParameterError(f"solve_exact: solver={solver!r} is an option of the interior "
                             f"route, but the first-order route was taken ({reason})")
    return solve_first_order(model, accuracy, accept_inaccurate=accept_inaccurate,
                             raise_on_failure=raise_on_failure, reason=reason, **opts)


@dataclass
class _Answer:
    """The answer kept so far: weights, flows (docs/conventions.md's sign), status, objective of
    (16), its certificate (34) and the summed compile and solver seconds."""

    W: np.ndarray
    U: np.ndarray
    status: str
    objective: float
    cert: Any
    compile_time: float
    solve_time: float


def _check_args(solver: Any, accept_inaccurate: Any, verbose: Any, certify: Any,
                accuracy: Any) -> float:
    """Validate :func:`solve_exact`'s options; returns ``accuracy``."""
    check_solver(solver, "solve_exact")
    for flag, value in (("accept_inaccurate", accept_inaccurate), ("verbose", verbose),
                        ("certify", certify)):
        check_bool(value, flag, "solve_exact")
    return check_scalar(accuracy, "accuracy", min_val=0.0, include_boundaries="neither",
                        where="solve_exact")


def _warn_default_accuracy(name: str, record: dict[str, Any], opts: dict[str, Any]) -> None:
    """:class:`AccuracyWarning` when the solver was accepted only at the last level of its
    fallback ladder (its own default accuracy) without the caller choosing tolerances."""
    levels = FALLBACK_SOLVER_OPTIONS.get(name, [])
    if levels and record.get("options", {}).get("tol_gap_rel") == levels[-1]["tol_gap_rel"] \
            and not any(set(level) & set(opts) for level in levels):
        warnings.warn(
            f"solve_exact: {name} could not reach gtvmodel's reference tolerances and was "
            f"accepted at its own default accuracy {levels[-1]}; the weights may be accurate to "
            "only about 1e-5 (see Solution.info['tolerances'])", AccuracyWarning, stacklevel=4)


def _check_feasible(model: ModelDeclaration, compiled: PrimalProblem, name: str) -> None:
    """:class:`InfeasibleError` naming the nodes whose constraints are infeasible."""
    if compiled.problem.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        bad = find_infeasible_nodes(model)
        where = (f"infeasible constraints at node(s) {', '.join(map(repr, bad))}" if bad
                 else "the constraints have no common feasible point")
        raise InfeasibleError(f"solve_exact: {name} reports the problem infeasible: {where}")


def _certified(model: ModelDeclaration, compiled: PrimalProblem, name: str, answer: _Answer,
               info: dict[str, Any], opts: dict[str, Any], verbose: bool, lenient: bool,
               accuracy: float, shortcut: bool = False) -> _Answer:
    """The self-certificate (34) of the answer; if it misses ``accuracy``, re-solves by the
    plain ladder (with the same options when the answer came by a ``shortcut`` of the ladder,
    then with :data:`RESOLVE_OPTIONS`), keeping the best certified answer.  Fills ``info``
    (``certificate_time``, ``resolved``, ``certified``, ``certified_gap``,
    ``certified_relative_gap``, ``certificate_error``, ``tolerances``)."""
    t0 = time.perf_counter()
    try:
        answer.cert = _self_certificate(certify_fn, model, answer.W, answer.U, accuracy)
    except GTVError as exc:  # e.g. a conjugate the certificate cannot evaluate
        info["certificate_error"] = str(exc)
    info["certificate_time"] = time.perf_counter() - t0
    # re-solves, by the plain ladder (every level a fresh run to its end), until the answer is
    # certified: first with the same options when the answer came by a shortcut of the ladder
    # (a run stopped early at a looser level, issue 17), then with RESOLVE_OPTIONS
    resolve = RESOLVE_OPTIONS.get(name)
    extra = ([dict(opts)] if shortcut else []) + (
        [{**opts, **resolve}] if resolve and not set(resolve) & set(opts) else [])
    for options in extra:
        if answer.cert is None or answer.cert.success_at(accuracy):
            break
        _resolve(model, compiled, name, answer, info, options, verbose, lenient, accuracy)
    info["certified"] = answer.cert is not None and answer.cert.success_at(accuracy)
    if answer.cert is not None:
        info["certified_gap"] = answer.cert.gap
        info["certified_relative_gap"] = answer.cert.relative_gap
    return answer



def _polished(model: ModelDeclaration, answer: _Answer, info: dict[str, Any],
              accuracy: float) -> None:
    """The polish of the certified answer (:func:`gtvmodel.solve.polish.polish`): replaces it
    when certified at least as good; records ``info["polish"]``.  An answer the solver calls
    inaccurate is left as it is (its status, raised or accepted, stays the caller's to see)."""
    if answer.status != cp.OPTIMAL:
        info["polish"] = {"status": "skipped", "reason": f"solver status {answer.status!r}"}
        return
    done = polish_fn(model, answer.W, answer.U, answer.cert, accuracy)
    info["polish"] = done.info
    if done.applied:
        answer.W, answer.U, answer.cert = done.weights, done.flows, done.certificate
        answer.objective = done.info["objective_after"]
        info["certified"] = answer.cert.success_at(accuracy)
        info["certified_gap"] = answer.cert.gap
        info["certified_relative_gap"] = answer.cert.relative_gap


def _resolve(model: ModelDeclaration, compiled: PrimalProblem, name: str, answer: _Answer,
             info: dict[str, Any], options: dict[str, Any], verbose: bool, lenient: bool,
             accuracy: float) -> None:
    """One re-solve by the plain ladder with ``options``; the answer is replaced when the new
    one is certified to a smaller relative gap (34)."""
    record2: dict[str, Any] = {}
    try:
        _, comp2, st2 = run_solver(compiled.problem, name, options, verbose, lenient,
                                   "solve_exact (re-solve)", record2, shortcuts=False)
        info["resolved"] = True
        answer.compile_time += comp2
        answer.solve_time += st2
        if compiled.problem.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
            W2, U2 = _read(model, compiled, name)
            t1 = time.perf_counter()
            cert2 = _self_certificate(certify_fn, model, W2, U2, accuracy)
            info["certificate_time"] += time.perf_counter() - t1
            if cert2.relative_gap < answer.cert.relative_gap:
                answer.W, answer.U, answer.cert = W2, U2, cert2
                answer.status = compiled.problem.status
                answer.objective = float(compiled.problem.value)
                info["tolerances"] = record2.get("options")
    except GTVError:
        info.setdefault("resolved", False)

def _check_certified(name: str, answer: _Answer, info: dict[str, Any],
                     accept_inaccurate: bool, accuracy: float) -> None:
    """An ``optimal_inaccurate`` answer not certified to ``accuracy`` raises (unless
    ``accept_inaccurate``); a claimed ``optimal`` that is not certified warns
    (:class:`AccuracyWarning`)."""
    cert, status = answer.cert, answer.status
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
            AccuracyWarning, stacklevel=4)


def _self_certificate(certify_fn: Any, model: ModelDeclaration, W: np.ndarray, U: np.ndarray,
                      accuracy: float) -> Any:
    """The certificate of an exact solve (``project="never"``: cheap repairs only); if it
    misses ``accuracy``, also with the convex projection of the flows and with flows built
    from the weights (the best one is kept: each is a valid bound)."""
    cert = certify_fn(model, W, U, tol=accuracy, project="never")
    for flows in (U, None):
        if cert.success_at(accuracy):
            break
        alt = certify_fn(model, W, flows, tol=accuracy)
        if alt.relative_gap < cert.relative_gap:
            cert = alt
    return cert


def _read(model: ModelDeclaration, compiled: PrimalProblem, name: str) -> tuple[np.ndarray,
          np.ndarray]:
    """Weights and flows (docs/conventions.md's sign) of the last solve, checked finite."""
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


def _explain(model: ModelDeclaration, exc: SolverError) -> GTVError:
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
