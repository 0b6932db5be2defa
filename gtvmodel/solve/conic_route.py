"""The conic routes of :func:`~gtvmodel.solve.exact.solve_exact`: the primal problem (16),
compiled once (:mod:`gtvmodel.duality.compile`), solved by SCS or Clarabel in runs aimed at a
certified accuracy (:func:`_passes`), its flows read from the multipliers of ``Z = D W``
(docs/conventions.md's sign), each answer certified (34) (:mod:`gtvmodel.certificates`),
re-solved with :data:`RESOLVE_OPTIONS` where the certificate misses the accuracy, and polished
(:mod:`gtvmodel.solve.polish`).  The choice among the routes is
:data:`gtvmodel.solve.exact.ROUTES`.  Clarabel's aimed run skips CVXPY where the model has
the closed-form arrays of :mod:`gtvmodel.solve.native`; the CVXPY problem is then compiled
only if a later run needs it.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import cvxpy as cp
import numpy as np

from .._compat import scs_indirect_supported
from .._solver import DEFAULT_SOLVER_OPTIONS, FALLBACK_SOLVER_OPTIONS, run_solver
from ..certificates.certificate import certify as certify_fn
from ..declaration import ModelDeclaration
from ..duality.compile import (
    PrimalProblem,
    compile_primal,
    data_overflow_message,
    find_infeasible_nodes,
    unbounded_nodes,
)
from ..errors import AccuracyWarning, DataError, GTVError, InfeasibleError, SolverError
from ..solution import Solution
from .first_order import problem_size, route_solution
from .native import DIRECT_REFINEMENT, native_form, native_reason, solve_native
from .polish import polish as polish_fn
from .request import RouteRequest

__all__ = ["solve_conic", "RESOLVE_OPTIONS", "SCS_AIM", "SCS_INDIRECT_SIZE",
           "CLARABEL_METHOD", "CERTIFIED_FIRST"]


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

#: SCS's first run where the polish applies (the route then re-runs SCS warm-started at
#: :data:`DEFAULT_SOLVER_OPTIONS`'s 1e-9 if the polished answer misses the accuracy).  SCS's
#: iterates are projections onto the cones, so fused edge differences are exactly 0 long
#: before its residuals are small, and the polish reads the structure from them.  Measured on
#: the SBMs of ``benchmarks/bench_exact_routes.py`` (``Norm2``, load 15-16 on 2 cores): at
#: 1,000 nodes the polish certified 5.5e-13 from SCS at 1e-3 to 1e-6 alike (SCS solver time
#: 0.37 s at 1e-4, 0.94-1.00 s at 1e-5, 1.40-1.60 s at 1e-6, plus 0.7-0.9 s of SCS setup);
#: at 2,000 nodes the polish was rejected from 1e-4 (certified 1.7e-5) and certified 5.7e-13
#: from 1e-5 and 1e-6 (SCS 5.9 s and 7.5 s).  Every SCS run pays its setup again (CVXPY
#: starts SCS afresh, warm start or not), so a missed aim is costly: 1e-5.
SCS_AIM: dict[str, Any] = {"eps_abs": 1e-5, "eps_rel": 1e-5}

#: The problem size ``(n + |E|) d`` (:func:`gtvmodel.solve.first_order.problem_size`) from
#: which the SCS route runs SCS's indirect linear solver (conjugate gradients,
#: ``use_indirect=True``) instead of factorizing its KKT matrix once: the factorization's
#: fill grows fast on SBM-like graphs.  Measured through ``solve_exact(solver="SCS")`` on the
#: SBMs of ``benchmarks/bench_exact_routes.py`` (one run each, load 8-10 on 2 cores): at
#: 2,000 nodes (size 24,500, ``Norm2``) factorized 6.5 s (setup 2.0 s, iterations 3.6 s),
#: indirect 7.9 s (0.1 s, 7.2 s); at 3,500 nodes (43,122) 15.9 s (6.7 s, 7.6 s) against
#: 16.9 s (0.3 s, 14.6 s); at 5,000 nodes (61,456) 63.1 s (23.0 s, 36.6 s) against 28.1 s
#: (0.3 s, 21.4 s), and with ``Norm1`` 33.4 s against 16.4 s.
SCS_INDIRECT_SIZE = 50_000


@dataclass(frozen=True)
class _Pass:
    """One solver run of a conic route: ``options`` over the defaults, ``start`` (the ladder's
    first ``tol_gap_rel``, :func:`gtvmodel._solver.run_solver`), ``warm`` (SCS warm start),
    ``aimed`` (a run before the full one: cheap certificate, kept only if it meets the
    accuracy), ``native`` (Clarabel on the arrays of :mod:`gtvmodel.solve.native`, without
    CVXPY)."""

    options: dict[str, Any]
    start: float | None = None
    warm: bool = False
    aimed: bool = False
    native: bool = False


def _passes(name: str, model: ModelDeclaration, request: RouteRequest) -> list[_Pass]:
    """The runs of a conic route, aimed first (docstring of :func:`solve_exact`)."""
    opts = request.opts
    chosen = any(set(level) & set(opts) for level in FALLBACK_SOLVER_OPTIONS.get(name, [])) \
        or bool(set(opts) & set(DEFAULT_SOLVER_OPTIONS.get(name, {})) - {"max_iter",
                                                                          "max_iters"})
    polishable = request.polish_reason(model) is None
    full = _Pass(dict(opts))
    if chosen or not request.aimed:
        return [full]
    if name == "SCS":
        if polishable:
            base = dict(opts)
            if "use_indirect" not in opts and problem_size(model) >= SCS_INDIRECT_SIZE \
                    and scs_indirect_supported():
                base["use_indirect"] = True
            return [_Pass({**base, **SCS_AIM}, aimed=True), _Pass(base, warm=True)]
        return [full]
    if name == "CLARABEL":
        levels = [DEFAULT_SOLVER_OPTIONS[name]["tol_gap_rel"]] + [
            level["tol_gap_rel"] for level in FALLBACK_SOLVER_OPTIONS[name]]
        # the loosest level of the ladder at most as loose as the aim.  Not looser where the
        # polish applies: from Clarabel at 1e-8 the polish was rejected on a 50 x 50 grid
        # (certified 2.7e-9 before it) and misread the fused edges of the 1,000-node Norm1
        # SBM from 1e-4 and 1e-5 (certified 1.4e-6): an interior point's slacks are all
        # positive; aiming at 1e-10 costs 1-2 more iterations (1,000-node SBM: 3.7-4.0 s
        # against 3.6 s at 1e-8, load 12)
        start = max((t for t in levels if t <= request.accuracy), default=levels[0])
        if start > levels[0]:
            native = not opts and request.certify and native_reason(model) is None
            return [_Pass(dict(opts), start=start, aimed=True, native=native), full]
    return [full]


def _aimed_options(name: str, start: float) -> dict[str, Any]:
    """The options of the ladder's level that :func:`gtvmodel._solver.run_solver` starts at
    for ``start`` (its loosest level whose ``tol_gap_rel`` is at most ``start``)."""
    options = dict(DEFAULT_SOLVER_OPTIONS[name])
    for level in FALLBACK_SOLVER_OPTIONS[name]:
        if level["tol_gap_rel"] > start:
            break
        options.update(level)
    return options


@dataclass
class _Progress:
    """The state of a conic route across its runs: ``info`` (the solution's), ``lenient``
    (an ``optimal_inaccurate`` answer is let through, kept only if certified), ``spent``
    (compile, solve, certificate, solver setup seconds of all runs), ``kept`` the best aimed
    answer (``kept_info`` its records), ``answer`` the latest, ``degraded`` the full run's
    ``(record, options)``."""

    info: dict[str, Any]
    lenient: bool
    spent: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])
    kept: _Answer | None = None
    kept_info: dict[str, Any] = field(default_factory=dict)
    answer: _Answer | None = None
    degraded: tuple[dict[str, Any], dict[str, Any]] | None = None


def solve_conic(model: ModelDeclaration, name: str, request: RouteRequest, reason: str
                ) -> Solution:
    """A conic route: its runs (:func:`_passes`), each certified; an aimed run is kept when its
    certificate (cheap, then polished) meets the accuracy, else the next run goes on (the
    full one: self-certificate with its alternatives and Clarabel's re-solve,
    :func:`_certified`), keeping the better certified answer."""
    compiled = _Lazy(model)
    passes = _passes(name, model, request)
    if not request.certify:  # nothing can judge an aimed run: it is the answer
        passes = [_Pass(passes[0].options, passes[0].start, passes[0].warm)]
    # with the self-certificate an "optimal_inaccurate" answer is let through and kept only if
    # its certificate proves the requested accuracy (below)
    state = _Progress({"lam": model.lam, "route": name.lower(), "route_reason": reason,
                       "accuracy": request.accuracy},
                      lenient=request.accept_inaccurate or request.certify)
    for run in passes:
        if _run_pass(model, compiled, name, request, run, state):
            break
    answer, info = state.answer, state.info
    assert answer is not None
    if state.degraded is not None and not (request.aimed and answer.cert is not None
                                           and answer.cert.success_at(request.accuracy)):
        _warn_default_accuracy(name, *state.degraded)
    if request.certify and request.handover and name != "CLARABEL" and not (
            answer.cert is not None and answer.cert.success_at(request.required)):
        # Clarabel, the last route, re-solves with RESOLVE_OPTIONS where this one cannot
        raise SolverError(
            f"solve_exact: {name}'s answer is certified only to a relative gap of "
            f"{_relative_gap(answer.cert):.3g} (required {request.required:g})",
            status="not_certified", solver=name)
    if request.certify:
        if answer.cert is not None:
            info["certified_gap"] = answer.cert.gap
            info["certified_relative_gap"] = answer.cert.relative_gap
            if np.isfinite(answer.cert.primal_value):
                # P(W) evaluated in numpy: a loose run's own objective value can be ~eps off
                answer.objective = float(answer.cert.primal_value)
        _check_certified(name, answer, info, request.accept_inaccurate, request.required)
    elif request.polish:
        info["polish"] = {"status": "skipped", "reason": "certify=False"}
    return _route_answer(model, compiled, name, request, state)


class _Lazy:
    """The compiled CVXPY problem of a route (:func:`compile_primal`), built at the first
    call: a route whose direct run (:data:`_Pass.native`) is certified never builds it.
    ``fresh``: it was not cached on the model before."""

    def __init__(self, model: ModelDeclaration) -> None:
        self.model = model
        self.fresh = model.cache.get("primal") is None
        self.problem: PrimalProblem | None = None

    def __call__(self) -> PrimalProblem:
        if self.problem is None:
            self.problem = compile_primal(self.model)
        return self.problem

    def build_time(self) -> float:
        """The seconds of building the CVXPY expressions in this route (0 if cached)."""
        return self.problem.build_time if self.fresh and self.problem is not None else 0.0


def _native_pass(model: ModelDeclaration, name: str, request: RouteRequest, run: _Pass,
                 state: _Progress) -> bool:
    """The aimed run by Clarabel on the arrays of :mod:`gtvmodel.solve.native` (no CVXPY; with
    no iterative refinement, :data:`~gtvmodel.solve.native.DIRECT_REFINEMENT`),
    certified and polished like an aimed run through CVXPY
    (:func:`_aimed_pass`); False (the full run through CVXPY goes on) when Clarabel does not
    report it solved or its certificate misses the accuracy."""
    assert run.start is not None
    options = {**_aimed_options(name, run.start), **DIRECT_REFINEMENT}
    method = CLARABEL_METHOD.get(native_form(model))
    if method is not None:
        options["direct_solve_method"] = method
    try:
        ans = solve_native(model, options, request.verbose)
    except (ValueError, RuntimeError, ArithmeticError) as exc:
        state.info.setdefault("aimed_failures", []).append(f"Clarabel (direct): {exc}")
        return False
    state.spent[0] += ans.build_time
    state.spent[1] += ans.solve_time
    state.spent[3] += ans.setup_time
    if ans.status != "Solved" or not (np.isfinite(ans.W).all() and np.isfinite(ans.U).all()):
        state.info.setdefault("aimed_failures", []).append(
            f"Clarabel (direct): status {ans.status!r}")
        return False
    state.answer = _Answer(ans.W, ans.U, cp.OPTIMAL, math.nan, None, 0.0, 0.0)
    record = {"options": options}
    state.info["tolerances"] = options
    state.info["formulation"] = "direct"
    done = _aimed_pass(model, name, request, run, record, state)
    if done:
        return True
    state.info.pop("formulation", None)
    return False


def _run_pass(model: ModelDeclaration, lazy: _Lazy, name: str,
              request: RouteRequest, run: _Pass, state: _Progress) -> bool:
    """One run of a conic route, read and certified into ``state``; True when the route ends
    with it (its answer, or the kept one, is final), False to go on to the next run."""
    if run.native:
        return _native_pass(model, name, request, run, state)
    compiled = lazy()
    record: dict[str, Any] = {}
    t_run = time.perf_counter()
    try:
        _, comp, solve_time = run_solver(compiled.problem, name,
                                         _form_options(compiled, name, run.options),
                                         request.verbose, state.lenient, "solve_exact", record,
                                         start=run.start, warm_start=run.warm)
    except SolverError as exc:
        return _failed_pass(model, request, run, state, exc)
    state.spent[0] += comp
    state.spent[1] += solve_time
    # what the solver's own time leaves out: its setup (SCS factorizes the KKT matrix
    # there: 0.7 s of a 1.9 s call on the 1,000-node SBM) and CVXPY's unpacking
    state.spent[3] += max(time.perf_counter() - t_run - comp - solve_time, 0.0)
    if run.aimed and compiled.problem.status != cp.OPTIMAL:
        return False  # a loose run's infeasible or inaccurate answer: the full run decides
    if not run.aimed:
        _check_feasible(model, compiled, name)
    W, U = _read(model, compiled, name)
    state.answer = _Answer(W, U, compiled.problem.status, float(compiled.problem.value), None,
                           0.0, 0.0)
    state.info["tolerances"] = record.get("options")
    if not request.certify:
        state.degraded = (record, run.options)
        return True
    if run.aimed:
        done = _aimed_pass(model, name, request, run, record, state)
        if done is not None:
            return done
    state.degraded = (record, run.options)
    _full_pass(model, compiled, name, request, run, record, state)
    return True


def _failed_pass(model: ModelDeclaration, request: RouteRequest, run: _Pass, state: _Progress,
                 exc: SolverError) -> bool:
    """A run the solver failed: an aimed one is recorded and skipped (False); a full one ends
    the route with the kept aimed answer if that is certified to ``required`` (True), else
    raises (:func:`_explain`)."""
    if run.aimed:
        state.info.setdefault("aimed_failures", []).append(str(exc))
        return False
    if state.kept is not None and state.kept.cert.success_at(request.required):
        state.answer = state.kept
        state.info.update(state.kept_info)
        return True
    raise _explain(model, exc) from None


#: ``info["polish"]["reason"]`` where ``polish="auto"`` skipped the polish: Clarabel's aimed
#: answer was certified to the accuracy by its own flows.  Measured on the 300-node SBMs of
#: ``benchmarks/bench_exact_routes.py`` (``benchmarks/RESULTS.md``): the polish took about
#: 10 % of the call there and the answers were certified to 9.2e-12 (``Norm1``) and 5.0e-12
#: (``Norm2``) without it.  SCS's loose aimed answer is polished first (it never meets the
#: accuracy itself), and so is every full run's.
CERTIFIED_FIRST = ("polish='auto': the solver's answer is certified to the accuracy by its "
                   "own flows")


def _aimed_pass(model: ModelDeclaration, name: str, request: RouteRequest, run: _Pass,
                record: dict[str, Any], state: _Progress) -> bool | None:
    """The cheap certificate (then the polish) of an aimed run's answer: True when it meets
    the accuracy (the route ends), False to go on to the next run (the answer is kept if it
    is the best so far), None when the solver stalled (the answer gets the full certificate
    at once: a tighter run would stall there too)."""
    answer = state.answer
    assert answer is not None
    scratch: dict[str, Any] = {"tolerances": record.get("options")}

    def own() -> Any:
        # SCS's loose answer is certified by its polish, not by finer repairs of its
        # own flows (fallback): on the 2,000-node SBM (Norm2) the fallback's flows
        # built from the weights took 0.34 s of a 0.41 s certificate, for 7.4e-8
        t0 = time.perf_counter()
        try:
            return certify_fn(model, answer.W, answer.U, tol=request.accuracy,
                              project="never", recover=False, fallback=name != "SCS")
        finally:
            state.spent[2] += time.perf_counter() - t0

    try:
        polishable = answer.status == cp.OPTIMAL and request.polish_reason(model) is None
        if polishable and request.polish_when_needed() and run.start is not None:
            # Clarabel aimed at the accuracy (polish="auto"): its answer's own certificate
            # first, the polish only where that misses the accuracy (CERTIFIED_FIRST)
            answer.cert = own()
            if answer.cert.success_at(request.accuracy):
                scratch["polish"] = {"status": "skipped", "reason": CERTIFIED_FIRST}
            else:
                _polished(model, answer, scratch, request.accuracy)
        elif polishable:
            # the answer's own certificate only where the polished point is not kept
            # at once (polish's docstring): one certificate fewer per call
            _polished(model, answer, scratch, request.accuracy, own)
        else:
            answer.cert = own()
            if request.polish:
                _polished(model, answer, scratch, request.accuracy)
    except GTVError:  # the full run's self-certificate records why
        return False
    if answer.cert.success_at(request.accuracy):
        state.info.update(scratch)
        state.info["certified"] = True
        return True
    if state.kept is None or answer.cert.relative_gap < state.kept.cert.relative_gap:
        state.kept, state.kept_info = answer, scratch
    if not _stalled(record, run):
        return False
    state.info["stalled"] = True
    state.kept = None
    return None


def _full_pass(model: ModelDeclaration, compiled: PrimalProblem, name: str,
               request: RouteRequest, run: _Pass, record: dict[str, Any],
               state: _Progress) -> None:
    """The full run's answer: its self-certificate and re-solves (:func:`_certified`), its
    polish; the kept aimed answer replaces it when certified to a smaller relative gap."""
    assert state.answer is not None
    answer = _certified(model, compiled, name, state.answer, state.info, run.options,
                        request.verbose, state.lenient, request.required,
                        bool(record.get("shortcut")))
    state.answer = answer
    state.spent[0] += answer.compile_time
    state.spent[1] += answer.solve_time
    if request.polish:
        _polished(model, answer, state.info, request.accuracy)
    if state.kept is not None and state.kept.cert.relative_gap < _relative_gap(answer.cert):
        state.answer = state.kept
        state.info.update(state.kept_info)
        state.info["certified"] = state.kept.cert.success_at(request.required)


def _route_answer(model: ModelDeclaration, compiled: _Lazy, name: str,
                  request: RouteRequest, state: _Progress) -> Solution:
    """The route's :class:`~gtvmodel.solution.Solution` with its timings (compile, solve,
    solver setup, certificate, polish) and ``success``."""
    answer, info, spent = state.answer, state.info, state.spent
    assert answer is not None
    timings = {"compile": compiled.build_time() + spent[0],
               "solve": spent[1], "solver_setup": spent[3]}
    if request.certify:
        timings["certificate"] = spent[2] + info.pop("certificate_time", 0.0)
    if "time" in info.get("polish", {}):
        timings["polish"] = info["polish"]["time"]
    success = bool(info.pop("certified", answer.status == cp.OPTIMAL))
    return route_solution(model, answer.W, answer.U, answer.objective, answer.status, success,
                          name, timings, info, answer.cert)


#: Clarabel's linear solver for the compiled forms where its default (``"auto"``, which picked
#: faer) was measured slower: the ``"box"`` form of ``Norm1``
#: (:func:`gtvmodel.duality.compile.edge_form`).  On the 300-node ``Norm1`` SBM of
#: ``benchmarks/bench_exact_routes.py`` (8 iterations either way, 3 interleaved runs, load 8)
#: qdldl took 0.38 s against 1.00 s for ``"auto"`` and 1.10 s for faer; on the ``"soc"`` form
#: of ``Norm2`` the three took 0.28-0.31 s (300 nodes) and 12.1-13.5 s (100 x 100 grid).
CLARABEL_METHOD = {"box": "qdldl"}


def _form_options(compiled: PrimalProblem, name: str, options: dict[str, Any]
                  ) -> dict[str, Any]:
    """``options`` with :data:`CLARABEL_METHOD`'s linear solver for the compiled form (unless
    the caller chose one)."""
    method = CLARABEL_METHOD.get(compiled.form)
    if name != "CLARABEL" or method is None or "direct_solve_method" in options:
        return options
    return {**options, "direct_solve_method": method}


def _stalled(record: dict[str, Any], run: _Pass) -> bool:
    """Whether an aimed run was accepted at a looser level of the ladder than it aimed at."""
    used = (record.get("options") or {}).get("tol_gap_rel")
    return run.start is not None and used is not None and used > run.start


def _relative_gap(cert: Any) -> float:
    """A certificate's relative gap (inf without one)."""
    return math.inf if cert is None else float(cert.relative_gap)


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


def _warn_default_accuracy(name: str, record: dict[str, Any], opts: dict[str, Any]) -> None:
    """:class:`AccuracyWarning` when the solver was accepted only at the last level of its
    fallback ladder (its own default accuracy) without the caller choosing tolerances."""
    levels = FALLBACK_SOLVER_OPTIONS.get(name, [])
    if levels and record.get("options", {}).get("tol_gap_rel") == levels[-1]["tol_gap_rel"] \
            and not any(set(level) & set(opts) for level in levels):
        warnings.warn(
            f"solve_exact: {name} could not reach gtvmodel's reference tolerances and was "
            f"accepted at its own default accuracy {levels[-1]}; the weights may be accurate to "
            "only about 1e-5 (see Solution.info['tolerances'])", AccuracyWarning, stacklevel=5)


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
              accuracy: float, own: Any = None) -> None:
    """The polish of the certified answer (:func:`gtvmodel.solve.polish.polish`): replaces it
    when certified at least as good; records ``info["polish"]``.  An answer the solver calls
    inaccurate is left as it is (its status, raised or accepted, stays the caller's to see).
    ``own``: the function computing the answer's certificate, called by the polish only where
    needed (then ``answer.cert`` is set from the polish's result)."""
    if answer.status != cp.OPTIMAL:
        info["polish"] = {"status": "skipped", "reason": f"solver status {answer.status!r}"}
        if own is not None:
            answer.cert = own()
        return
    done = polish_fn(model, answer.W, answer.U, answer.cert if own is None else own,
                     accuracy)
    info["polish"] = done.info
    if own is not None:
        answer.cert = done.certificate
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
        _, comp2, st2 = run_solver(compiled.problem, name,
                                   _form_options(compiled, name, options), verbose, lenient,
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
            AccuracyWarning, stacklevel=5)


def _self_certificate(certify_fn: Any, model: ModelDeclaration, W: np.ndarray, U: np.ndarray,
                      accuracy: float) -> Any:
    """The certificate of an exact solve (``project="never"``: cheap repairs only); if it
    misses ``accuracy``, also with the convex projection of the flows and with flows
    recovered from the weights (the best one is kept: each is a valid bound).  The recovery
    (:mod:`gtvmodel.certificates.recovery`) runs once, in the last try: ``recover=False``
    before it."""
    cert = certify_fn(model, W, U, tol=accuracy, project="never", recover=False)
    for flows in (U, None):
        if cert.success_at(accuracy):
            break
        alt = certify_fn(model, W, flows, tol=accuracy, recover=flows is None)
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
        flows = compiled.flows()
        if flows is None:
            raise SolverError(f"solve_exact: {name} returned no dual values for the flows",
                              status=status, solver=name)
        U = flows.reshape(model.num_edges, model.dim)
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
