"""Cost of ``solve_exact()``'s tolerance ladder (issue 17), against one solve at the level it
accepts.

For each problem, interleaved in every repeat: (1) the default ``solve_exact()`` (one Clarabel
run aiming at 1e-13 that may stop at an iterate meeting the first fallback level, 1e-10, once
its residuals stall); (2) the ladder as it was before issue 17, replayed: a plain run at each
level in turn (1e-13, then 1e-10, ...) until one succeeds; (3) a single run at the level (1)
accepted, with its options passed explicitly.  Times are Clarabel's own solve times (the CVXPY
problem is compiled before timing; ``certify=False``); BLAS threads and Clarabel's own (faer,
rayon) threads pinned to one (``_pin_threads``).  Reported: medians, and the max weight
difference between (1) and (3).

Problems: SBM with two clusters (d = 5, squared loss with 5 samples per node, noise 0.1,
``Norm2``; the benchmark problem of bench_compile.py for n = 1000) at lambda 0.01, 0.1, 1, and
a 2-D grid with two halves of different weights.

Run:  python benchmarks/bench_ladder.py [--sizes 1000] [--grid 30] [--lams 0.01 0.1 1]
          [--grid-lams 0.1 1] [--repeats 2]

Issue 17's growth table: ``--sizes 1000 --grid 32 --repeats 2`` and ``--sizes 2000 5000
--grid 71 100 --repeats 1`` (the 5000-node SBM takes about 10 min per solve on a 2-core
machine).
"""

from __future__ import annotations

import argparse
import statistics
import warnings

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import networkx as nx
import numpy as np

import gtvmodel as gm
from gtvmodel import datasets
from gtvmodel.solve.compile import compile_primal
from gtvmodel.solve.exact import DEFAULT_SOLVER_OPTIONS, FALLBACK_SOLVER_OPTIONS

LEVELS = [dict(DEFAULT_SOLVER_OPTIONS["CLARABEL"])]
for _level in FALLBACK_SOLVER_OPTIONS["CLARABEL"]:
    LEVELS.append({**LEVELS[-1], **_level})
WEIGHTS = [[1, 2, 3, 4, 5], [-1, 2, -3, 4, -5]]


def sbm(n: int) -> datasets.NetworkedData:
    return datasets.sbm(sizes=(n // 2, n // 2), p_in=0.02 * 1000 / n, p_out=0.0005 * 1000 / n,
                        m=5, cluster_weights=WEIGHTS, sigma=0.1, seed=1)


def grid(k: int) -> datasets.NetworkedData:
    G = nx.convert_node_labels_to_integers(nx.grid_2d_graph(k, k))
    clusters = (np.arange(k * k) % k >= k // 2).astype(int)
    return datasets.linear_data(G, np.array(WEIGHTS, dtype=float)[clusters], clusters, m=5,
                                sigma=0.1,
                                seed=1)


def solver_time(model: gm.GTVModel) -> float:
    stats = model.cache.get("primal").problem.solver_stats
    return float(stats.solve_time) if stats and stats.solve_time is not None else 0.0


def old_ladder(model: gm.GTVModel) -> float:
    """The pre-issue-17 ladder: a fresh plain run per level until one succeeds."""
    spent = 0.0
    for level in LEVELS:
        try:
            sol = model.solve_exact(certify=False, **level)
            return spent + sol.timings["solve"]
        except gm.SolverError:
            spent += solver_time(model)
    raise RuntimeError("no level succeeded")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000])
    parser.add_argument("--grid", type=int, nargs="*", default=[30])
    parser.add_argument("--lams", type=float, nargs="*", default=[0.01, 0.1, 1.0],
                        help="lambda of the SBMs")
    parser.add_argument("--grid-lams", type=float, nargs="*", default=[0.1, 1.0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    problems = [(f"SBM n={n}", sbm, n, lam) for n in args.sizes for lam in args.lams]
    problems += [(f"grid {k}x{k}", grid, k, lam) for k in args.grid for lam in args.grid_lams]
    print(f"threads: {_pin_threads.THREADS}; medians of {args.repeats} interleaved repeats; "
          "Clarabel solve seconds")
    print(f"{'problem':<16}{'lam':>6}{'|E|':>7}{'accepted':>10}{'default':>9}{'single':>9}"
          f"{'old':>9}{'default/single':>16}{'old/single':>12}{'max dW':>10}")
    for name, make, size, lam in problems:
        data = make(size)
        model = data.model(lam=lam)
        compile_primal(model)
        new, single, old = [], [], []
        for _ in range(args.repeats):
            sol = model.solve_exact(certify=False)
            new.append(sol.timings["solve"])
            accepted = sol.info["tolerances"]
            ref = model.solve_exact(certify=False, **accepted)
            single.append(ref.timings["solve"])
            old.append(old_ladder(model))
        dw = float(np.abs(sol.weights - ref.weights).max())
        n_, s_, o_ = (statistics.median(x) for x in (new, single, old))
        print(f"{name:<16}{lam:>6g}{data.graph.number_of_edges():>7}"
              f"{accepted['tol_gap_rel']:>10.0e}{n_:>9.2f}{s_:>9.2f}{o_:>9.2f}"
              f"{n_ / s_:>16.2f}{o_ / s_:>12.2f}{dw:>10.1e}", flush=True)


if __name__ == "__main__":
    main()
