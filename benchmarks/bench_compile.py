"""Compile time of gtvmodel's vectorized primal vs the solver's own time, side by side with a
hand-written CVXPY formulation (one expression per node and per edge, what a user writes
without this package).

Problem: an SBM with ~1,000 nodes and ~5,000 edges (two clusters of 500, p_in 0.02,
p_out 0.0005), d = 5, squared loss with m_i = 5 samples and noise 0.1, network Lasso (Norm2),
lambda = 1.  Both formulations are solved by Clarabel with the same options (gtvmodel's first
fallback level, passed explicitly to both, so no fallback runs).  Compile time = building the
CVXPY problem + CVXPY's canonicalization for the solver; solve time = the solver's own time.
Each is the median of ``--repeats`` fresh builds.  Target: gtvmodel compile <= 10% of the solve.

Run:  make bench   (or: python benchmarks/bench_compile.py [--repeats 3])
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import cvxpy as cp
import numpy as np

import gtvmodel as gm
from gtvmodel import datasets
from gtvmodel.solve.exact import DEFAULT_SOLVER_OPTIONS, FALLBACK_SOLVER_OPTIONS

OPTIONS = {**DEFAULT_SOLVER_OPTIONS["CLARABEL"], **FALLBACK_SOLVER_OPTIONS["CLARABEL"][0]}
LAM = 1.0


def make_data(seed: int = 1) -> datasets.NetworkedData:
    return datasets.sbm(sizes=(500, 500), p_in=0.02, p_out=0.0005, m=5,
                        cluster_weights=[[1, 2, 3, 4, 5], [-1, 2, -3, 4, -5]], sigma=0.1,
                        seed=seed)


def run_gtvmodel(data: datasets.NetworkedData) -> dict[str, float]:
    t0 = time.perf_counter()
    model = data.model(penalty=gm.Norm2(), lam=LAM)
    declare = time.perf_counter() - t0
    sol = model.solve_exact(**OPTIONS)
    return {"compile": declare + sol.timings["compile"], "solve": sol.timings["solve"],
            "objective": sol.objective, "W": sol.weights}


def run_handwritten(data: datasets.NetworkedData) -> dict[str, float]:
    """Per-node variables, per-node losses and per-edge norms, summed in Python."""
    warnings.filterwarnings("ignore", message="Objective contains too many subexpressions")
    t0 = time.perf_counter()
    G, d = data.graph, data.dim
    w = {v: cp.Variable(d) for v in G.nodes}
    terms = [cp.sum_squares(data.y[v] - data.X[v] @ w[v]) / len(data.y[v]) for v in data.X]
    terms += [LAM * G.edges[a, b].get("weight", 1.0) * cp.norm(w[a] - w[b], 2)
              for a, b in G.edges]
    prob = cp.Problem(cp.Minimize(cp.sum(terms)))
    build = time.perf_counter() - t0
    prob.solve(solver="CLARABEL", warm_start=False, **OPTIONS)
    assert prob.status == cp.OPTIMAL, prob.status
    W = np.array([w[v].value for v in G.nodes])
    return {"compile": build + prob.compilation_time, "solve": prob.solver_stats.solve_time,
            "objective": float(prob.value), "W": W}


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description="gtvmodel compile time vs solver time")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data = make_data()
    n, E = data.graph.number_of_nodes(), data.graph.number_of_edges()
    print(f"SBM: n = {n}, |E| = {E}, d = {data.dim}, m_i = 5, squared loss, Norm2, "
          f"lambda = {LAM:g}; Clarabel gap {OPTIONS['tol_gap_rel']:g}, feas "
          f"{OPTIONS['tol_feas']:g}; medians of {args.repeats} repeats")
    gtv, hand = [], []
    for _ in range(args.repeats):  # interleaved so both see the same machine load
        gtv.append(run_gtvmodel(data))
        hand.append(run_handwritten(data))
    rows = []
    for name, runs in (("gtvmodel (vectorized)", gtv), ("hand-written per node/edge", hand)):
        c, s = median(runs, "compile"), median(runs, "solve")
        rows.append((name, c, s, c / s))
    print(f"{'formulation':<28}{'compile [s]':>12}{'solve [s]':>11}{'compile/solve':>15}")
    for name, c, s, r in rows:
        print(f"{name:<28}{c:>12.3f}{s:>11.3f}{r:>14.1%}")
    speedup = rows[1][1] / rows[0][1]
    print(f"compile speed-up of gtvmodel over the hand-written formulation: {speedup:.1f}x")
    obj_g, obj_h = gtv[0]["objective"], hand[0]["objective"]
    rel = abs(obj_g - obj_h) / abs(obj_h)
    dw = np.abs(gtv[0]["W"] - hand[0]["W"]).max()
    print(f"objectives: gtvmodel {obj_g:.10e}, hand-written {obj_h:.10e}, relative "
          f"difference {rel:.1e}; max weight difference {dw:.1e}")
    target = rows[0][3] <= 0.10
    print(f"target gtvmodel compile <= 10% of solve: {'met' if target else 'NOT met'} "
          f"({rows[0][3]:.1%})")
    if rel > 1e-6:
        raise SystemExit(f"objectives differ by {rel:.1e} > 1e-6")


if __name__ == "__main__":
    main()
