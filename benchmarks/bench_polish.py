"""The polish of ``solve_exact`` (issue 17's accuracy criterion): weights against an oracle
outside CVXPY before and after the polish, and the polish's cost as a fraction of the solve.

For each problem (the SBMs and grids of ``bench_ladder.py``: d = 5, squared loss with 5
samples per node, ``Norm2``): one ``solve_exact(polish=False)`` (the interior-point answer
``W0``, its flows and certificate), then :func:`gtvmodel.solve.polish.polish` on it, timed
alone (``W1``).  Reported: the max weight error of ``W0`` and ``W1`` against
``bench_ladder.newton_oracle`` (Newton's method in numpy/scipy on the smooth objective, valid
where no edge is fused: "fused" otherwise), the certified gaps (34) before/after, the objective
difference ``P(W1) - P(W0)``, the polish's Newton steps and clusters, and its seconds against
the solve's (compile + Clarabel + certificate).  BLAS and Clarabel threads pinned to one.

Run:  python benchmarks/bench_polish.py [--sizes 1000] [--lams 0.01 0.1 1] [--grid 8 12 32]
          [--grid-lams 0.001 0.01]
"""

from __future__ import annotations

import argparse
import time
import warnings

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import numpy as np
from bench_ladder import grid, newton_oracle, sbm

from gtvmodel.solve.polish import polish


def row(name: str, data, lam: float) -> str:  # noqa: ANN001
    """One problem's line."""
    model = data.model(lam=lam)
    sol = model.solve_exact(polish=False)
    solve_s = sum(sol.timings.values())
    t0 = time.perf_counter()
    done = polish(model, sol.weights, sol.flows, sol.certificate, 1e-6)
    polish_s = time.perf_counter() - t0
    info = done.info
    W_star, rmin = newton_oracle(data, lam, model.nodes, sol.weights)
    if W_star is None:
        err0 = err1 = f"fused ({rmin:.0e})"
    else:
        err0 = f"{np.abs(sol.weights - W_star).max():.1e}"
        err1 = f"{np.abs(done.weights - W_star).max():.1e}"
    dobj = info.get("objective_after", np.nan) - info.get("objective_before", np.nan)
    return (f"{name:<14}{lam:>7g}{data.graph.number_of_edges():>7}{err0:>16}{err1:>16}"
            f"{info.get('gap_before', np.nan):>11.1e}{info.get('gap_after', np.nan):>11.1e}"
            f"{dobj:>11.1e}{info.get('newton_iterations', 0):>7}{info.get('clusters', 0):>9}"
            f"{solve_s:>9.2f}{polish_s:>8.2f}{polish_s / solve_s:>8.3f}  {info['status']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000])
    parser.add_argument("--lams", type=float, nargs="*", default=[0.01, 0.1, 1.0])
    parser.add_argument("--grid", type=int, nargs="*", default=[8, 12, 32])
    parser.add_argument("--grid-lams", type=float, nargs="*", default=[0.001, 0.01])
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"threads: {_pin_threads.THREADS}")
    print(f"{'problem':<14}{'lam':>7}{'|E|':>7}{'|W0 - W*|':>16}{'|W1 - W*|':>16}"
          f"{'gap W0':>11}{'gap W1':>11}{'P1 - P0':>11}{'Newton':>7}{'clusters':>9}"
          f"{'solve s':>9}{'polish':>8}{'ratio':>8}")
    problems = [(f"SBM n={n}", sbm(n), lam) for n in args.sizes for lam in args.lams]
    problems += [(f"grid {k}x{k}", grid(k), lam) for k in args.grid for lam in args.grid_lams]
    for name, data, lam in problems:
        print(row(name, data, lam), flush=True)


if __name__ == "__main__":
    main()
