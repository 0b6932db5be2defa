"""Benchmark: λ paths (issue 10) -- what compiling once and warm starting save.

Paper 001 VI-A's SBM (clusters 50 + 50, p_in = 0.5, p_out = 0.01, m_i = 5, d = 2, noise
sigma = 0.5), 10 log-spaced lambda in [1e-3, 1] (decreasing and increasing).  Side by side in
one run, repeats alternating, medians:

* ``method="exact"``: ``lam_path`` on one model (compiled at the first lambda, re-solved after)
  vs a fresh model per lambda (compiled every time);
* ``method="primal_dual"``: ``lam_path`` warm-started from the previous (w, u) vs cold starts
  (iterations to a certified relative gap of 1e-6, certificates every 10 iterations, not
  budgeted by time so that the counts are deterministic, and time).

``--chain`` instead: iteration counts only (deterministic), warm vs cold, on paper 001 VI-B's
chain of docs/lam_path.md and tests/test_path.py (2 x 4 nodes, ``datasets.chain(n=4, eps=0.1,
m=5, sigma=0.5, seed=0)``, 8 lambda in [0.05, 5], relative gap 1e-8, certificates every 5
iterations, not budgeted).

Run: ``.venv/bin/python benchmarks/bench_lam_path.py [--repeats 3] [--chain]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import numpy as np

import gtvmodel as gm
from gtvmodel import datasets

LAMS = np.geomspace(1.0, 1e-3, 10)
PD = {"tol": 1e-6, "record_every": 10, "certificate_budget": None, "max_iter": 20_000}


def exact_fresh(data: datasets.NetworkedData, lams: np.ndarray) -> float:
    t = time.perf_counter()
    for lam in lams:
        gm.solve_exact(data.model(lam=float(lam)))
    return time.perf_counter() - t


def exact_path(data: datasets.NetworkedData, lams: np.ndarray) -> float:
    t = time.perf_counter()
    gm.lam_path(data.model(), lams)
    return time.perf_counter() - t


def pd_path(data: datasets.NetworkedData, lams: np.ndarray, warm: bool) -> tuple[float, int]:
    t = time.perf_counter()
    path = gm.lam_path(data.model(), lams, method="primal_dual", warm_start=warm, **PD)
    assert path.success
    return time.perf_counter() - t, int(path.iterations.sum())


def chain_counts() -> None:
    """Iterations warm vs cold on the chain of docs/lam_path.md, both orders."""
    data = datasets.chain(n=4, eps=0.1, m=5, sigma=0.5, seed=0)
    opts = {"tol": 1e-8, "record_every": 5, "certificate_budget": None, "max_iter": 20_000}
    lams = np.geomspace(5, 0.05, 8)
    for order, grid in (("decreasing", lams), ("increasing", lams[::-1])):
        its = {}
        for warm in (True, False):
            path = gm.lam_path(data.model(), grid, method="primal_dual", warm_start=warm, **opts)
            assert path.success
            its[warm] = int(path.iterations.sum())
        print(f"chain 2 x 4, {order}: warm {its[True]} iterations, cold {its[False]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chain", action="store_true", help="iteration counts on the chain only")
    args = ap.parse_args()
    if args.chain:
        chain_counts()
        return
    data = datasets.sbm(sizes=(50, 50), p_in=0.5, p_out=0.01, m=5, sigma=0.5, seed=0)
    print(f"SBM 50+50, |E| = {data.graph.number_of_edges()}, d = 2, 10 lambda in [1e-3, 1]; "
          f"threads {_pin_threads.THREADS}; median of {args.repeats}")
    fresh, once = [], []
    for _ in range(args.repeats):
        fresh.append(exact_fresh(data, LAMS))
        once.append(exact_path(data, LAMS))
    f, o = statistics.median(fresh), statistics.median(once)
    print(f"exact: fresh model per lambda {f:.3f} s, lam_path (compiled once) {o:.3f} s, "
          f"ratio fresh / path {f / o:.2f}x")
    for order, lams in (("decreasing", LAMS), ("increasing", LAMS[::-1])):
        warm, cold = [], []
        for _ in range(args.repeats):
            warm.append(pd_path(data, lams, True))
            cold.append(pd_path(data, lams, False))
        tw, iw = statistics.median(t for t, _ in warm), warm[0][1]
        tc, ic = statistics.median(t for t, _ in cold), cold[0][1]
        print(f"Algorithm 1, {order}: warm {iw} iterations {tw:.3f} s, cold {ic} iterations "
              f"{tc:.3f} s; iterations cold / warm {ic / iw:.2f}x, time cold / warm "
              f"{tc / tw:.2f}x")


if __name__ == "__main__":
    main()
