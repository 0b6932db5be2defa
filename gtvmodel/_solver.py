"""The numerical solver policy shared by every CVXPY solve in gtvmodel.

:func:`run_solver` solves a CVXPY problem with gtvmodel's accuracy defaults
(:data:`DEFAULT_SOLVER_OPTIONS`), its tolerance fallback ladder
(:data:`FALLBACK_SOLVER_OPTIONS`) and its status policy (inaccurate statuses raise
:class:`~gtvmodel.errors.SolverError` unless accepted, unbounded raises, infeasible is returned
to the caller).  This module imports only cvxpy, numpy, :mod:`gtvmodel._compat` (CVXPY's Clarabel
interface) and :mod:`gtvmodel.errors`, so every other
module can import it at top level without an import cycle.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from typing import Any

import clarabel
import cvxpy as cp
import cvxpy.settings as cps
import numpy as np
import scipy.sparse as sp

from ._compat import CLARABEL, dims_to_solver_cones
from .errors import ParameterError, SolverError

__all__ = ["DEFAULT_SOLVER_OPTIONS", "FALLBACK_SOLVER_OPTIONS", "check_solver", "run_solver",
           "gap_tolerance", "separable_gap_tolerance"]

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
#: when the caller passed none of these options.  An attempt does not pay twice (issue 17):
#: while Clarabel aims at one level, an iterate that already meets a looser level ends the
#: attempt as soon as further progress stalls (:class:`_RungClarabel`, :class:`_StallRule`), so
#: a problem that cannot reach the tighter level is answered at the looser one by the same
#: solver run.
FALLBACK_SOLVER_OPTIONS: dict[str, list[dict[str, Any]]] = {
    "CLARABEL": [
        {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-9, "tol_ktratio": 1e-8},
        {"tol_gap_abs": 1e-9, "tol_gap_rel": 1e-9, "tol_feas": 1e-8, "tol_ktratio": 1e-7},
        {"tol_gap_abs": 1e-8, "tol_gap_rel": 1e-8, "tol_feas": 1e-8, "tol_ktratio": 1e-6},
    ],
}



#: The duality gap's reduction in one interior-point iteration from which :class:`_StallRule`
#: extrapolates a growing residual to the aimed level (``_aim_out_of_reach``), measured on the
#: first runs aiming at 1e-13 (issue 17; iterates recorded through Clarabel's callback).  At the
#: iterates meeting 1e-10 whose residuals then grew without recovering, the gap had just fallen
#: 11.0-28.3x where the one-step extrapolation missed the stall (grid 71x71 at lambda 0.1 and 1,
#: SBM n = 2000 at lambda 0.1) and 5.2-27.6x where it caught it (grids 32x32 and 100x100, SBMs
#: n = 1000 and 2000); at the 161 such iterates of ``tests/test_robustness.py``'s 240 badly
#: scaled instances that go on to 1e-13 (transients) it had fallen at most 4.7x.  7 is about
#: the geometric middle of 4.7 and 11.
_TERMINAL_GAP_RATE = 7.0

#: The number of conic variables from which :class:`_RungClarabel` lets :class:`_StallRule`
#: extrapolate to the aimed level.  The extrapolation saves a second run where it is right and
#: costs accuracy (an answer at 1e-10 where the run would have gone on to 1e-13) where it is
#: wrong; only on large problems is a run worth that risk.  It was right at every iterate where
#: it fired on the 53 recorded first runs of grids (16x16 to 100x100, from 5,440 variables) and
#: SBMs (300 to 2,000 nodes), but wrong on two small problems of the test suite: a
#: certificate test's (``test_certificate_fields_and_json``: the gap fell 8.5x, the primal
#: residual grew 4.5x to 5.8e-11, then Clarabel solved it at 1e-13) and a shard's of
#: ``tests/test_distributed.py`` ("constrained": the residual grew from 5.6e-14 to 6.0e-12).
_EXTRAPOLATE_MIN_VARIABLES = 10_000


#: How far below the aimed ``tol_feas`` the extrapolated residual of
#: :meth:`_StallRule._aim_out_of_reach` must stay for the run to go on.  The growth of the
#: residuals in the terminal phase is not geometric: the SBM with 5,000 nodes at lambda = 0.1
#: (``benchmarks/bench_ladder.py``) met 1e-10 at iteration 13 after the gap fell 20x with the
#: primal residual grown 1.5x (extrapolated to 3.0e-10 when the gap would reach 1e-13), and
#: then jumped 63x to 7.8e-9: the retry re-did the 13 iterations (27 against 13).  Replayed on
#: the 54 recorded first runs of grids (16x16 to 100x100) and SBMs (300 to 5,000 nodes), a
#: margin of 10 changes only runs that never reach 1e-13 (Clarabel ends them
#: ``AlmostSolved``): 6 that paid a second run are answered at 1e-10 one iteration earlier, one
#: accepted at 1e-10 one iteration earlier; no run that reaches 1e-13 is stopped.
_AIM_MARGIN = 10.0


class _StallRule:
    """The stopping rule of :class:`_RungClarabel`, fed one interior-point iterate at a time
    (its duality gaps, residuals and ``ktratio``); calling it says whether to stop there.

    ``aim`` is the level the run aims at and ``levels`` the looser ones, tightest first (dicts
    of ``tol_gap_abs``, ``tol_gap_rel``, ``tol_feas``).  An iterate *meets* a level as
    Clarabel's own ``Solved`` test would: ``gap_abs < tol_gap_abs`` or
    ``gap_rel < tol_gap_rel``, both residuals ``< tol_feas`` and ``ktratio <= 1``.  The run
    has *stalled* at an iterate when a residual grew since the previous one so fast that the
    next iterate, extrapolated at the last iteration's rates (ratios of the gaps and of the
    residuals), would no longer meet this iterate's level -- or, at an iterate meeting the next
    level (not the last resort) in the terminal phase (the gap fell at least
    :data:`_TERMINAL_GAP_RATE` times in the last iteration), when a residual growing at its
    last rate would come within :data:`_AIM_MARGIN` of the aimed ``tol_feas`` by the time the
    gaps, at their last rates, meet the aimed level (:meth:`_aim_out_of_reach`).  On the SBMs
    and grids that cannot reach 1e-13 the residuals grow 3-100x per iteration once the gap is
    below ~1e-11, until Clarabel reports ``InsufficientProgress`` or ``AlmostSolved`` a few
    iterations later; where one more iteration still met the next level but the following
    jumped far beyond it (the 71x71 grids of ``benchmarks/bench_ladder.py``: 20x then 17,000x;
    its 5,000-node SBM: 1.5x then 63x), only the extrapolation to the aimed level stops at the
    last iterate meeting it.

    At a stall, with ``best`` the tightest looser level any iterate met so far:

    * the iterate meets ``best`` and ``best`` is not the last resort: the run stops there,
      answered at that level (``accepted``: its index in ``levels``).  A level beyond the
      next is accepted only at the second stalled iterate in a row meeting it: on badly
      scaled problems a single residual jump is often a transient after which the iterates
      reach the aimed level (``tests/test_robustness.py``'s instances, seeds 23, 38 and 39 of
      ``badly_scaled`` at lambda = 0.01);
    * an earlier iterate met the next level and this one does not: the run stops as a failure
      with ``retry`` 0 (the ladder's next run, aiming there, usually follows the same
      iterates and ends at that iterate);
    * otherwise the run goes on (retrying at a level beyond the next lost accuracy on the
      badly scaled instances, whose runs at looser levels follow other iterates).

    The aimed level is left to Clarabel's own test.  ``best`` is None or the index in
    ``levels`` of the tightest level met (read after the run).  With ``extrapolate=False``
    (what :class:`_RungClarabel` passes below :data:`_EXTRAPOLATE_MIN_VARIABLES`) a run
    stalls only by the one-step extrapolation."""

    def __init__(self, aim: dict[str, float], levels: list[dict[str, float]],
                 extrapolate: bool = True) -> None:
        self.tols = [aim, *levels]
        self.extrapolate = extrapolate  # whether _aim_out_of_reach may end the run
        self.accepted: int | None = None
        self.retry: int | None = None
        self._best = len(self.tols)  # index in tols of the tightest level met so far
        self._previous: list[float] = []
        self._stalls = 0  # stalled iterations in a row meeting the tightest level met

    @property
    def best(self) -> int | None:
        """Index in ``levels`` of the tightest looser level any iterate met (None: none)."""
        return self._best - 1 if self._best < len(self.tols) else None

    def level_of(self, gap_abs: float, gap_rel: float, res: list[float],
                 ktratio: float) -> int | None:
        """The tightest level met (0: the aimed one, ``k``: ``levels[k - 1]``), or None."""
        return next((k for k, tol in enumerate(self.tols)
                     if (gap_abs < tol["tol_gap_abs"] or gap_rel < tol["tol_gap_rel"])
                     and max(res) < tol["tol_feas"] and ktratio <= 1.0), None)

    def __call__(self, gap_abs: float, gap_rel: float, res_primal: float, res_dual: float,
                 ktratio: float) -> bool:
        now = [gap_abs, gap_rel, res_primal, res_dual]
        before, self._previous = self._previous, now
        met = self.level_of(gap_abs, gap_rel, now[2:], ktratio)
        if met is not None:
            self._best = min(self._best, met)
        if not self._stalled(now, before, met, ktratio):
            self._stalls = 0
            return False
        self._stalls = self._stalls + 1 if met == self._best else 0
        last = len(self.tols) - 1
        if met == self._best < last and (met == 1 or self._stalls > 1):
            self.accepted = met - 1
        elif self._best == 1:
            self.retry = 0
        else:
            return False
        return True

    def _stalled(self, now: list[float], before: list[float], met: int | None,
                 ktratio: float) -> bool:
        """Whether a residual grew since ``before`` so fast that the extrapolated next
        iterate would miss the level ``met`` (the aimed level is never a stall)."""
        if not before or met == 0 or max(now[2] / max(before[2], 1e-300),
                                         now[3] / max(before[3], 1e-300)) <= 1.0:
            return False
        nxt = [x * x / max(x0, 1e-300) for x, x0 in zip(now, before, strict=True)]
        predicted = self.level_of(nxt[0], nxt[1], nxt[2:], ktratio)
        if predicted is None or (met is not None and predicted > met):
            return True
        # only where the next level is not the last resort: a stall there ends the run for a
        # retry at the last resort instead of answering it
        return (self.extrapolate and met == 1 < len(self.tols) - 1
                and self._aim_out_of_reach(now, before))

    def _aim_out_of_reach(self, now: list[float], before: list[float]) -> bool:
        """Whether the aimed level is out of reach of an iterate in the terminal phase: a gap
        that fell at least :data:`_TERMINAL_GAP_RATE` times in the last iteration needs
        ``log(gap / tol) / log(gap_before / gap)`` more iterations at that rate to meet the
        aimed ``tol_gap_*``, and a residual that grew, growing at its last rate for as many
        iterations, would then come within :data:`_AIM_MARGIN` of the aimed ``tol_feas``."""
        aim = self.tols[0]
        steps = min((max(math.log(gap / tol), 0.0) / math.log(gap0 / gap)
                     for gap, gap0, tol in ((now[0], before[0], aim["tol_gap_abs"]),
                                            (now[1], before[1], aim["tol_gap_rel"]))
                     if 0.0 < gap and gap0 >= _TERMINAL_GAP_RATE * gap), default=None)
        return steps is not None and any(
            math.log(r) + steps * math.log(r / r0) >= math.log(aim["tol_feas"] / _AIM_MARGIN)
            for r, r0 in zip(now[2:], before[2:], strict=True) if r > r0 > 0.0)


class _RungClarabel(CLARABEL):
    """Clarabel aiming at one tolerance level, stopped early by :class:`_StallRule` at an
    iterate that meets a looser level once progress towards the aimed one has stalled.

    The looser levels are given, tightest first, as the solver option ``"accept"`` (a list of
    dicts of ``tol_gap_abs``, ``tol_gap_rel``, ``tol_feas``).  A run the rule answers at a
    looser level is reported as ``optimal`` and ``accepted`` is that level's index; a run that
    meets the aimed level ends as Clarabel's plain ``Solved`` (``accepted`` is None).  A run
    the rule ends to be retried at the next level is a solver failure with ``retry`` 0
    (:func:`run_solver` checks the answer, see there).  After any run, ``best`` is the index
    of the tightest looser level an iterate met (None if none).  One instance is shared (cvxpy
    caches the solving chain per solver object).
    """

    def __init__(self) -> None:
        super().__init__()
        self.accepted: int | None = None
        self.retry: int | None = None
        self.best: int | None = None

    def name(self) -> str:
        return "GTVMODEL_CLARABEL_RUNG"

    def solve_via_data(self, data: dict, warm_start: bool, verbose: bool, solver_opts: dict,
                       solver_cache: dict | None = None) -> Any:
        opts = dict(solver_opts)
        levels = opts.pop("accept")
        defaults = clarabel.DefaultSettings()
        rule = _StallRule({k: opts.get(k, getattr(defaults, k)) for k in levels[0]}, levels,
                          data[cps.A].shape[1] >= _EXTRAPOLATE_MIN_VARIABLES)
        P = data[cps.P] if cps.P in data else sp.csc_array((data[cps.C].size,) * 2)
        solver = clarabel.DefaultSolver(sp.triu(P).tocsc(), data[cps.C], data[cps.A],
                                        data[cps.B],
                                        dims_to_solver_cones(data[CLARABEL.DIMS]),
                                        self.parse_solver_opts(verbose, opts))
        self.accepted = self.retry = self.best = None

        def stop_here(info: Any) -> bool:
            stop = rule(info.gap_abs, info.gap_rel, info.res_primal, info.res_dual,
                        info.ktratio)
            if stop:
                self.accepted, self.retry = rule.accepted, rule.retry
                self.STATUS_MAP = {**CLARABEL.STATUS_MAP, "CallbackTerminated": (
                    cps.OPTIMAL if rule.accepted is not None else cps.SOLVER_ERROR)}
            return stop

        solver.set_termination_callback(stop_here)
        try:
            return solver.solve()
        finally:
            self.best = rule.best


_RUNG_CLARABEL = _RungClarabel()


@functools.lru_cache(maxsize=1)
def _installed_solvers() -> tuple[str, ...]:
    """CVXPY's installed solvers (cached: ``cp.installed_solvers()`` costs milliseconds)."""
    return tuple(cp.installed_solvers())


def check_solver(solver: Any, where: str | None = None) -> str:
    """The upper-cased name of ``solver`` (``None``: ``"CLARABEL"``), an installed CVXPY solver
    (``cp.installed_solvers()``): :class:`ParameterError` if it is not a string,
    :class:`SolverError` (status ``None``) if it is not installed."""
    pre = f"{where}: " if where else ""
    if solver is not None and not isinstance(solver, str):
        raise ParameterError(f"{pre}solver must be None or a CVXPY solver name, got {solver!r}")
    name = (solver or "CLARABEL").upper()
    if name not in _installed_solvers():
        raise SolverError(f"{pre}solver {name!r} is not installed (installed: "
                          f"{', '.join(_installed_solvers())})", status=None, solver=name)
    return name


def _is_qp(problem: cp.Problem) -> bool:
    """Whether OSQP can take ``problem``: a QP objective and only linear constraints (cvxpy
    1.7's ``is_qp`` also says yes beside explicit ``cp.SOC`` constraints, the edge cones of
    the compiled problem without ``Z = D W``)."""
    linear = (cp.constraints.Equality, cp.constraints.Zero, cp.constraints.Inequality,
              cp.constraints.NonNeg, cp.constraints.NonPos)
    return problem.is_qp() and all(isinstance(c, linear) for c in problem.constraints)


def run_solver(problem: cp.Problem, solver: str | None, opts: dict[str, Any], verbose: bool,
               accept_inaccurate: bool, what: str,
               record: dict[str, Any] | None = None, *,
               shortcuts: bool = True, start: float | None = None,
               warm_start: bool = False) -> tuple[str, float, float]:
    """Solve a CVXPY problem with gtvmodel's accuracy defaults and status policy.

    Returns ``(solver_name, cvxpy_compile_seconds, solver_seconds)``.  Raises
    :class:`SolverError` (with the status) on failure or on an inaccurate status unless
    ``accept_inaccurate``.  Infeasibility is returned to the caller as status ``infeasible``.

    The solver runs with :data:`DEFAULT_SOLVER_OPTIONS` updated by ``opts``.  If it cannot
    reach them (a solver failure or an inaccurate/limit status) and the caller overrode none of
    the :data:`FALLBACK_SOLVER_OPTIONS` keys, it is re-run with each fallback level in turn; the
    status policy applies to the last level, and the reported times are the sums of all runs.
    If ``record`` is a dict, ``record["options"]`` receives the options of the accepted run
    and ``record["shortcut"]`` whether the answer came by a shortcut.  ``shortcuts=False`` runs
    the plain ladder (every level a fresh run to its end, no early stop at a looser level):
    what a caller uses when an answer of the shortcuts was not accurate enough.

    ``start`` (a ``tol_gap_rel``) starts the ladder at its loosest level whose ``tol_gap_rel``
    is at most ``start`` (at its last level if none is), skipping the tighter ones: what
    :func:`gtvmodel.solve_exact` aims at first (``start`` is ignored where the solver has no
    ladder or the caller chose the tolerances).  ``warm_start=True`` lets CVXPY start the
    solver from the problem's previous solution (SCS only; Clarabel always starts afresh,
    see :func:`_attempt`).
    """
    name = check_solver(solver)
    if name == "OSQP" and not _is_qp(problem):
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
    if record is None:
        record = {}
    cumulative = [dict(options)]  # the levels as the ladder applies them, tightest first
    for level in levels:
        cumulative.append({**cumulative[-1], **level})
    if start is not None and levels:
        aimed = [k for k, c in enumerate(cumulative) if c["tol_gap_rel"] <= start]
        cumulative = cumulative[aimed[-1] if aimed else -1:]
    if warm_start and name == "SCS":
        cumulative = [{**c, "warm_start": True} for c in cumulative]
    try:
        comp, solve_time, shortcut = _ladder(problem, name, cumulative, verbose,
                                             accept_inaccurate, what, record, shortcuts)
    except SolverError as exc:
        if not getattr(exc, "shortcut", False):
            raise
        comp, solve_time, shortcut = exc.spent[0], exc.spent[1], True
        problem_status = None
    else:
        problem_status = problem.status
    record["shortcut"] = shortcut
    if shortcut and problem_status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        # The shortcuts (ending a stalled run to retry at the next level, skipping levels no
        # iterate met) assume the runs at looser levels follow the same iterates.  They do not
        # always: on soundness seed 99 'radius' the looser runs called a feasible problem
        # infeasible where a run let go on solves it.  Any answer but optimal after a shortcut
        # is therefore checked by the plain ladder (every level a fresh run, to its end).
        c2, s2, _ = _ladder(problem, name, cumulative, verbose, accept_inaccurate, what,
                            record, False)
        comp, solve_time = comp + c2, solve_time + s2
    return name, comp, solve_time


def _ladder(problem: cp.Problem, name: str, cumulative: list[dict[str, Any]], verbose: bool,
            accept_inaccurate: bool, what: str, record: dict[str, Any], early: bool
            ) -> tuple[float, float, bool]:
    """The fallback ladder over ``cumulative`` (the options of each level, tightest first):
    ``(compile seconds, solver seconds, whether a shortcut was taken)``.  With ``early``,
    Clarabel runs with the looser levels as :class:`_RungClarabel`'s ``accept`` (a stalled run
    is answered at, or retried from, the next level) and a failed run goes on at the tightest
    level any of its iterates met; without, every level is a fresh run to its end.  A
    :class:`SolverError` of the last level is raised with ``shortcut`` and ``spent`` set."""
    spent = [0.0, 0.0]
    shortcut = False
    k, last = 0, len(cumulative) - 1
    while k < last:
        try:
            record["options"] = dict(cumulative[k])
            comp, solve_time = _attempt(problem, name, cumulative[k], verbose, False, what,
                                        cumulative[k + 1:] if early else None)
            if _RUNG_CLARABEL.accepted is not None:  # answered at a looser level, same run
                record["options"] = dict(cumulative[k + 1 + _RUNG_CLARABEL.accepted])
                shortcut = True
            return comp + spent[0], solve_time + spent[1], shortcut
        except SolverError as exc:
            if exc.status in ("rejected", "not_dcp", cp.UNBOUNDED, cp.UNBOUNDED_INACCURATE):
                raise
            comp, solve_time = getattr(exc, "times", None) or _stats_times(problem, 0.0)
            spent = [spent[0] + comp, spent[1] + solve_time]
        step = 1
        if early:
            # a failed run that met a looser level at some iterate goes on at that level (the
            # levels in between were met by none of its iterates)
            jump = _RUNG_CLARABEL.retry if _RUNG_CLARABEL.retry is not None \
                else _RUNG_CLARABEL.best
            shortcut = shortcut or _RUNG_CLARABEL.retry is not None or bool(jump)
            step += jump or 0
        k = min(k + step, last)
    record["options"] = dict(cumulative[last])
    try:
        comp, solve_time = _attempt(problem, name, cumulative[last], verbose,
                                    accept_inaccurate, what)
    except SolverError as exc:
        exc.shortcut, exc.spent = shortcut, spent  # type: ignore[attr-defined]
        raise
    return comp + spent[0], solve_time + spent[1], shortcut


def _stats_times(problem: cp.Problem, wall: float) -> tuple[float, float]:
    """``(cvxpy_compile_seconds, solver_seconds)`` of the last solve of ``problem``."""
    stats = problem.solver_stats
    solve_time = stats.solve_time if stats and stats.solve_time is not None else wall
    comp = getattr(problem, "compilation_time", None) or max(wall - solve_time, 0.0)
    return float(comp), float(solve_time)


def _attempt(problem: cp.Problem, name: str, options: dict[str, Any], verbose: bool,
             accept_inaccurate: bool, what: str,
             looser: list[dict[str, Any]] | None = None) -> tuple[float, float]:
    """One solve with the status policy of :func:`run_solver`; with ``looser`` levels
    (Clarabel only), an iterate meeting one of them ends the run once progress stalls
    (:class:`_RungClarabel`)."""
    _RUNG_CLARABEL.accepted = _RUNG_CLARABEL.retry = _RUNG_CLARABEL.best = None
    solver: Any = name
    if looser and name == "CLARABEL":
        solver = _RUNG_CLARABEL
        options = {**options, "accept": [{k: level[k] for k in
                                          ("tol_gap_abs", "tol_gap_rel", "tol_feas")}
                                         for level in looser]}
    options = dict(options)
    warm = bool(options.pop("warm_start", False))
    t0 = time.perf_counter()
    try:
        # warm_start=False (unless asked, for SCS): cvxpy would otherwise re-use the cached
        # Clarabel solver through update(), which stalls at a worse accuracy than a fresh
        # solve (seen on exp cones).
        with warnings.catch_warnings():
            # the status is checked below; CVXPY's generic warning would only add noise
            warnings.filterwarnings("ignore", message="Solution may be inaccurate")
            problem.solve(solver=solver, verbose=verbose, warm_start=warm, **options)
    except cp.error.SolverError as exc:
        err = SolverError(f"{what}: solver {name} failed: {exc}", status="solver_error",
                          solver=name)
        # cvxpy keeps the previous solve's solver_stats when it raises: the wall time is this
        # run's (a run ended by _StallRule for a retry raises here)
        err.times = (0.0, time.perf_counter() - t0)  # type: ignore[attr-defined]
        raise err from None
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


def gap_tolerance(name: str, options: dict[str, Any], status: str,
                  value: float | np.ndarray) -> float | np.ndarray:
    """The duality-gap tolerance a solver run with ``options`` guarantees at ``value`` (a
    number, or an array of values: then entry by entry).

    ``options`` are those of the accepted run (``record["options"]`` of :func:`run_solver`):
    Clarabel ``tol_gap_abs + tol_gap_rel max(1, |value|)`` (its ``reduced_tol_gap_*`` for an
    accepted ``optimal_inaccurate`` status), SCS ``eps_abs + eps_rel max(1, |value|)``, other
    solvers ``1e-6 max(1, |value|)``.  The numeric conjugates of symbolic nodes add it to their
    values (:mod:`gtvmodel.duality.conic`)."""
    scale = np.maximum(1.0, np.abs(value))
    if name == "CLARABEL":
        if status == cp.OPTIMAL_INACCURATE:
            a = options.get("reduced_tol_gap_abs", 5e-5)
            r = options.get("reduced_tol_gap_rel", 5e-5)
        else:
            a = options.get("tol_gap_abs", 1e-8)
            r = options.get("tol_gap_rel", 1e-8)
        out = a + r * scale
    elif name == "SCS":
        out = options.get("eps_abs", 1e-4) + options.get("eps_rel", 1e-4) * scale
    else:
        out = 1e-6 * scale
    return float(out) if np.ndim(out) == 0 else np.asarray(out, dtype=float)


def separable_gap_tolerance(name: str, options: dict[str, Any], status: str,
                            parts: np.ndarray) -> float:
    """A bound ``tau`` of the shortfall of one run on a *separable* problem (a sum of
    independent node terms ``parts``, their values at the solver's point): it bounds every
    node's shortfall and their sum.

    The run's own :func:`gap_tolerance` at the total is not taken alone: the point is feasible
    only to the solver's feasibility tolerance, and a stacked run of 6 symbolic nodes reported
    at gap ``1e-13`` was measured with node terms up to ``3.8e-10`` beyond the node-by-node
    optima (soundness suite, seed 962032, family ``symbolic``).  ``tau`` is the larger of it
    and the sum over the nodes of the gap tolerance, at each node's own value, of the next
    looser level of the solver's ladder (:data:`FALLBACK_SOLVER_OPTIONS`; the loosest level
    when the run reached that one or the solver has no ladder): a node is charged as if its
    own run had reached one level less than the stacked run did."""
    looser = options
    for level in FALLBACK_SOLVER_OPTIONS.get(name, []):
        looser = {**options, **level}
        if level.get("tol_gap_rel", 0.0) > options.get("tol_gap_rel", np.inf):
            break
    per_node = float(np.sum(gap_tolerance(name, looser, status, parts)))
    return max(float(gap_tolerance(name, options, status, float(np.sum(parts)))), per_node)
