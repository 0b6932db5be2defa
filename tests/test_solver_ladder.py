"""The stopping rule of ``solve_exact``'s tolerance ladder (issue 17), on iterates recorded from
Clarabel's verbose logs: ``_solver._StallRule`` answers a run whose progress has stalled at the
best looser level its iterates met, and lets transients of badly scaled problems be."""

from __future__ import annotations

import time

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

from gtvmodel import datasets
from gtvmodel._solver import (
    _TERMINAL_GAP_RATE,
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


# bench_ladder.py's 71x71 grid (1 thread), aiming at 1e-13.  lambda = 1: iteration 12 meets
# 1e-10 after the gap fell 28x; its primal residual grew 20x, which, kept up for the 1.4
# iterations the gap needs at its rate to reach 1e-13, passes 1e-9; at 13 it jumps 17,000x and
# Clarabel gives up.  The one-step extrapolation (9.3e-10) still met 1e-10 at 12, so the run went
# on to 13, where no level was met, and the retry re-did 12 iterations (25 against 12).
GRID_71_1 = [
    (9, 1.58e-07, 1.80e-11, 1.54e-11, 2.50e-07),
    (10, 1.12e-08, 1.39e-12, 1.09e-12, 1.71e-08),
    (11, 3.12e-10, 2.34e-12, 3.05e-14, 4.28e-10),
    (12, 1.10e-11, 4.66e-11, 1.08e-15, 1.48e-11),
    (13, 1.39e-13, 7.79e-07, 2.21e-17, 3.89e-13),
]

# The same grid at lambda = 0.1: 22 meets 1e-10 after the gap fell 11x, the residual grew 2.6x
# (2.3 iterations to 1e-13: 1.4e-9); at 23 it jumps 93x (45 iterations against 22).
GRID_71_01 = [
    (18, 7.34e-09, 3.17e-11, 2.93e-12, 1.20e-09),
    (19, 1.92e-09, 4.14e-11, 7.68e-13, 3.15e-10),
    (20, 5.50e-10, 8.67e-11, 2.20e-13, 9.02e-11),
    (21, 3.16e-10, 5.81e-11, 1.26e-13, 5.18e-11),
    (22, 2.77e-11, 1.53e-10, 1.11e-14, 4.54e-12),
    (23, 7.32e-13, 1.43e-08, 2.99e-16, 1.21e-13),
]

# tests/test_robustness.py's badly_scaled(5, 1.0): 27 meets 1e-10 and its primal residual grew
# 2.3x, which kept up until the gap reaches 1e-13 would pass 1e-9 -- but the gap fell only 4.7x
# (steps 0.79): a transient, the iterates go on to 1e-13 at 32.
BADLY_SCALED_5 = [
    (23, 1.68e-08, 2.27e-11, 7.89e-11, 1.61e-10),
    (24, 6.03e-09, 2.54e-11, 2.64e-11, 3.62e-11),
    (25, 5.16e-10, 3.17e-12, 4.73e-12, 3.18e-12),
    (26, 1.15e-10, 4.74e-11, 4.23e-12, 7.23e-13),
    (27, 2.46e-11, 1.07e-10, 4.19e-12, 1.56e-13),
    (28, 1.72e-11, 7.46e-11, 4.20e-12, 1.09e-13),
    (29, 6.80e-12, 2.96e-11, 4.20e-12, 4.34e-14),
    (30, 8.51e-13, 3.83e-12, 4.21e-12, 5.53e-15),
    (31, 1.82e-13, 6.78e-13, 4.21e-12, 1.19e-15),
    (32, 4.38e-14, 2.69e-12, 4.21e-12, 2.90e-16),
]


# bench_ladder.py's SBM with 5,000 nodes at lambda = 0.1 (1 thread), aiming at 1e-13: 13 meets
# 1e-10 after the gap fell 20x, its primal residual grew 1.5x (extrapolated to 3.0e-10 when the
# gap would reach 1e-13: within _AIM_MARGIN of 1e-9); at 14 it jumps 63x and misses 1e-9.
# Without the margin the run ended at 14 for a retry that re-did 13 iterations (27 against 13).
SBM_5000 = [
    (11, 5.754e-09, 1.954e-10, 2.626e-11, 8.102e-09),
    (12, 1.495e-09, 8.232e-11, 6.804e-12, 1.674e-09),
    (13, 7.489e-11, 1.233e-10, 3.398e-13, 7.290e-11),
    (14, 1.420e-11, 7.759e-09, 6.474e-14, 1.232e-11),
]


@pytest.mark.parametrize("trace,cost,stop", [(GRID_71_1, 889.95, 12), (GRID_71_01, 134.26, 22),
                                             (SBM_5000, 802.6, 13)])
def test_a_residual_that_would_miss_the_aim_ends_the_run_at_the_next_level(trace, cost, stop):
    """The 71x71 grids: the iterate meeting 1e-10 in the terminal phase (the gap fell >= 7x)
    whose growing residual would miss 1e-9 by the time the gap reaches 1e-13 is answered at
    1e-10 there, not one iteration later as a failure to be re-run."""
    r = rule()
    assert feed(r, trace, cost) == stop
    assert r.accepted == 0 and r.retry is None


def test_the_one_step_rule_alone_retries_the_71x71_grid():
    """Without the extrapolation to the aimed level (the rule before, and the rule of problems
    below _EXTRAPOLATE_MIN_VARIABLES), the same trace ends one iteration later for a retry:
    what cost the 71x71 grid twice a single solve."""
    base = rule()
    r = _StallRule(base.tols[0], base.tols[1:], extrapolate=False)
    assert feed(r, GRID_71_1, 889.95) == 13
    assert r.accepted is None and r.retry == 0


def test_a_growing_residual_with_a_slow_gap_is_let_run():
    """A residual growing while the gap falls slower than _TERMINAL_GAP_RATE (a badly scaled
    problem's transient) does not end the run: Clarabel reaches the aimed level."""
    r = rule()
    assert feed(r, BADLY_SCALED_5, 390.81) is None
    assert r.accepted is None and r.retry is None
    assert r.best == -1  # the last iterate meets the aimed level (Clarabel's own "Solved")
    assert 1.15e-10 / 2.46e-11 < _TERMINAL_GAP_RATE  # the gap's step into iteration 27

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
    base = rule()
    r = _StallRule(base.tols[0], base.tols[1:], extrapolate=False)
    assert feed(r, met, 1.0) == 3 and r.accepted == 0
    lost = met[:2] + [(3, 1e-11, 5e-9, 1e-12, 1e-11)]
    r = _StallRule(base.tols[0], base.tols[1:], extrapolate=False)
    assert feed(r, lost, 1.0) == 3 and r.accepted is None and r.retry == 0
    # with the extrapolation to the aimed level (problems of _EXTRAPOLATE_MIN_VARIABLES or
    # more), iteration 2 -- the gap fell 20x, the residual doubled: 8.4e-10 when the gap would
    # reach 1e-13, within _AIM_MARGIN of 1e-9 -- is answered at once
    r = rule()
    assert feed(r, lost, 1.0) == 2 and r.accepted == 0


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


@pytest.mark.slow
def test_the_60x60_grid_is_answered_by_one_run_with_the_single_solves_iterations(monkeypatch):
    """A real solve (about 1 min): on the 60x60 grid of benchmarks/bench_ladder.py at lambda = 1
    the first run aiming at 1e-13 is answered at 1e-10 after exactly the interior-point
    iterations of a single run at 1e-10 (before the extrapolation to the aimed level: one more
    iteration, then a second run of 12), with that run's weights."""
    k = 60
    G = nx.convert_node_labels_to_integers(nx.grid_2d_graph(k, k))
    clusters = (np.arange(k * k) % k >= k // 2).astype(int)
    weights = np.array([[1, 2, 3, 4, 5], [-1, 2, -3, 4, -5]], dtype=float)[clusters]
    model = datasets.linear_data(G, weights, clusters, m=5, sigma=0.1, seed=1).model(lam=1.0)
    solves: list[int | None] = []  # per solver run: its iterations (None: it raised)
    solve = cp.Problem.solve

    def counted(self, *args, **kwargs):
        solves.append(None)
        out = solve(self, *args, **kwargs)
        solves[-1] = self.solver_stats.num_iters
        return out

    monkeypatch.setattr(cp.Problem, "solve", counted)
    sol = model.solve_exact(certify=False, max_threads=1)  # one thread: reproducible iterates
    first = FALLBACK_SOLVER_OPTIONS["CLARABEL"][0]
    assert sol.info["tolerances"].items() >= first.items() and sol.success
    single = model.solve_exact(certify=False, max_threads=1, **first)
    assert len(solves) == 2 and solves[0] == solves[1] == 12
    np.testing.assert_array_equal(sol.weights, single.weights)
    assert abs(model.objective(sol.weights) - sol.objective) <= 1e-9 * abs(sol.objective)



def test_the_extrapolation_does_not_end_a_run_for_the_last_resort():
    """A run aiming at 1e-9, whose only looser level is the last resort (Clarabel's own
    defaults): an iterate meeting that level is not ended by the extrapolation, which would
    only end the run for a retry at the last resort.  Here the gap fell 7.1x to 9.9e-9 and the
    primal residual grew 8.3x to 1.15e-9: one more iteration stays below 1e-8, but after the
    1.17 iterations the gap needs to reach 1e-9 the residual would be 1.4e-8."""
    cumulative = [dict(DEFAULT_SOLVER_OPTIONS["CLARABEL"])]
    for level in FALLBACK_SOLVER_OPTIONS["CLARABEL"]:
        cumulative.append({**cumulative[-1], **level})
    r = _StallRule({k: cumulative[2][k] for k in KEYS}, [{k: cumulative[3][k] for k in KEYS}])
    trace = [(1, 7.0e-08, 1.38e-10, 1e-12, 1e-09), (2, 9.9e-09, 1.15e-09, 1e-13, 1e-10)]
    assert feed(r, trace, 1.0) is None and r.best == 0
    now, before = [9.9e-09, 9.9e-09, 1.15e-09, 1e-13], [7.0e-08, 7.0e-08, 1.38e-10, 1e-12]
    assert r._aim_out_of_reach(now, before)  # what a run with a looser level left would stop
