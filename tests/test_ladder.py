"""The stopping rule of ``solve_exact``'s tolerance ladder (issue 17), on iterates recorded from
Clarabel's verbose logs: ``_solver._StallRule`` answers a run whose progress has stalled at the
best looser level its iterates met, and lets transients of badly scaled problems be."""

from __future__ import annotations

import time

import cvxpy as cp
import pytest

from gtvmodel._solver import (
    DEFAULT_SOLVER_OPTIONS,
    FALLBACK_SOLVER_OPTIONS,
    _StallRule,
    run_solver,
)

KEYS = ("tol_gap_abs", "tol_gap_rel", "tol_feas")


def rule() -> _StallRule:
    """The rule of the ladder's first run: aiming at the defaults (1e-13), the fallback levels
    (1e-10, 1e-9, 1e-8) as looser levels, as ``run_solver`` passes them."""
    cumulative = [dict(DEFAULT_SOLVER_OPTIONS["CLARABEL"])]
    for level in FALLBACK_SOLVER_OPTIONS["CLARABEL"]:
        cumulative.append({**cumulative[-1], **level})
    return _StallRule({k: cumulative[0][k] for k in KEYS},
                      [{k: c[k] for k in KEYS} for c in cumulative[1:]])


def feed(r: _StallRule, trace: list[tuple], cost: float) -> int | None:
    """Feed ``(iteration, gap_rel, res_primal, res_dual, ktratio)`` rows (``gap_abs`` is
    ``gap_rel * cost``); the iteration the rule stops at, or None."""
    for it, gap, pres, dres, kt in trace:
        if r(gap * cost, gap, pres, dres, kt):
            return it
    return None


# SBM n = 1000, lambda = 0.01 (bench_ladder.py's problem, 2 faer threads), aiming at 1e-13: no
# iterate meets 1e-10 (iteration 12 misses its gap, 13 its feasibility); 12-14 meet 1e-9, the
# primal residual grows from 13 on, and Clarabel ends "AlmostSolved" at 15.
SBM_001 = [
    (9, 1.17e-07, 4.24e-09, 6.17e-11, 8.27e-07),
    (10, 1.15e-08, 4.06e-10, 5.91e-12, 7.12e-08),
    (11, 1.43e-09, 5.10e-11, 7.18e-13, 7.72e-09),
    (12, 1.37e-10, 9.18e-11, 6.77e-14, 7.19e-10),
    (13, 2.62e-11, 1.04e-09, 1.29e-14, 1.29e-10),
    (14, 1.39e-12, 4.26e-09, 6.65e-16, 6.45e-12),
    (15, 2.35e-13, 5.08e-07, 1.10e-16, 1.05e-12),
]

# tests/test_robustness.py's badly_scaled(39, 0.01): iteration 22 meets 1e-9, the primal
# residual jumps 280x at 23, and the iterates recover: Clarabel solves it at 1e-13 at 28.
BADLY_SCALED_39 = [
    (20, 2.20e-09, 5.54e-12, 2.05e-08, 9.54e-09),
    (21, 5.18e-10, 1.14e-12, 5.81e-09, 2.25e-09),
    (22, 1.17e-10, 4.18e-12, 1.48e-09, 5.12e-10),
    (23, 2.47e-11, 1.18e-09, 6.12e-10, 1.08e-10),
    (24, 5.45e-12, 2.62e-10, 5.40e-10, 2.40e-11),
    (25, 1.22e-12, 2.52e-10, 5.32e-10, 5.39e-12),
    (26, 2.84e-13, 2.87e-10, 5.32e-10, 1.26e-12),
    (27, 1.51e-13, 3.62e-10, 5.32e-10, 6.74e-13),
]


def test_a_level_beyond_the_next_is_accepted_after_two_stalls():
    """The run that used to go on until Clarabel gave up (then a second run at 1e-9: 1.7-2.3x a
    single solve) is answered at 1e-9 at its second stalled iteration."""
    r = rule()
    assert feed(r, SBM_001, 20.58) == 14
    assert r.accepted == 1 and r.retry is None  # levels[1]: gap 1e-9
    assert r.level_of(1.39e-12 * 20.58, 1.39e-12, [4.26e-09, 6.65e-16], 6.45e-12) == 2


def test_a_single_residual_jump_is_a_transient():
    """A badly scaled problem whose primal residual jumps once and recovers is let run on to
    the aimed level."""
    r = rule()
    assert feed(r, BADLY_SCALED_39, 1.8831e6) is None
    assert r.accepted is None and r.retry is None
    assert r.best == 0  # 24-27 meet 1e-10 after the transient


def test_the_next_level_is_accepted_at_the_first_stall():
    """The rule as before for the next level (1e-10): accepted at the first stalled iterate
    meeting it; an iterate that no longer meets it ends the run for a retry there."""
    met = [(1, 1e-9, 1e-10, 1e-12, 1e-9), (2, 5e-11, 2e-10, 1e-12, 1e-10),
           (3, 1e-11, 9e-10, 1e-12, 1e-11)]
    r = rule()
    assert feed(r, met, 1.0) == 3 and r.accepted == 0
    lost = met[:2] + [(3, 1e-11, 5e-9, 1e-12, 1e-11)]
    r = rule()
    assert feed(r, lost, 1.0) == 3 and r.accepted is None and r.retry == 0


@pytest.mark.parametrize("trace", [BADLY_SCALED_39[:3], SBM_001[:4]])
def test_no_stop_while_residuals_shrink(trace):
    r = rule()
    assert feed(r, trace, 1.0) is None and r.accepted is None


def test_a_failed_run_counts_its_own_time(monkeypatch):
    """cvxpy keeps the previous solve's ``solver_stats`` when a solver fails (as a run ended by
    the rule for a retry does): the ladder charges that run its wall time, not stale stats."""
    x = cp.Variable(2)
    problem = cp.Problem(cp.Minimize(cp.sum_squares(x - 1)))
    problem.solve(solver="CLARABEL")  # stale stats to be ignored
    solve = cp.Problem.solve
    calls = []

    def first_fails(self, *args, **kwargs):
        calls.append(kwargs.get("tol_gap_rel"))
        if len(calls) == 1:
            time.sleep(0.3)
            raise cp.error.SolverError("stopped")
        return solve(self, *args, **kwargs)

    monkeypatch.setattr(cp.Problem, "solve", first_fails)
    record: dict = {}
    _, _, seconds = run_solver(problem, None, {}, False, False, "test", record)
    assert len(calls) == 2 and calls[1] == FALLBACK_SOLVER_OPTIONS["CLARABEL"][0]["tol_gap_rel"]
    assert seconds >= 0.3
