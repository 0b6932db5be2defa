"""Ground truth past interior-point scale (issue 16 item 4): ``solve_exact(method="interior")``
(Clarabel, the default tolerance ladder, self-certified) against
``solve_exact(method="first_order")`` (Algorithm 1 until the certified relative gap (34) is
<= 1e-9) on the SBM of bench_ladder.py (two clusters, mean degree about 10, d = 5, squared loss
with 5 samples per node, noise 0.1, ``Norm2``).

Every (route, size) runs in a fresh subprocess, one after the other, so that its peak memory
(``ru_maxrss``) is its own; times are wall seconds of ``solve_exact`` (model build excluded).
Reported per size: time, peak memory, status, certified relative gap, iterations, and, where
both routes ran, the ratios and the max weight difference.  Sizes given with ``--first-order``
only run the first-order route; Clarabel's time and memory there are extrapolated from a
power-law fit ``a * size^b`` of the interior runs (size = ``(n + |E|) d``, the
``method="auto"`` size estimate).

``--baseline DIR`` also runs the first-order route of another checkout (``DIR`` holds its
``gtvmodel``, e.g. ``git archive <commit> gtvmodel | tar -x -C DIR``) at every size, right
before this checkout's, with ``--baseline-max-iter`` iterations at most (a baseline that
cannot certify would otherwise run to ``--max-iter``); the table then gives the baseline /
this checkout time ratio.  Every worker prints the ``gtvmodel`` it imported.

Run:  PYTHONPATH=. python benchmarks/bench_exact_scale.py [--sizes 1000 2000 5000]
          [--first-order 20000] [--lam 0.1] [--max-iter 200000]
          [--baseline DIR --baseline-max-iter 5000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import numpy as np

import gtvmodel as gm
from gtvmodel import datasets

WEIGHTS = [[1, 2, 3, 4, 5], [-1, 2, -3, 4, -5]]
OUT = Path(__file__).resolve().parent.parent / "out" / "bench_exact_scale"


def sbm(n: int) -> datasets.NetworkedData:
    """bench_ladder.py's SBM with ``n`` nodes (mean degree about 10.25)."""
    return datasets.sbm(sizes=(n // 2, n // 2), p_in=0.02 * 1000 / n, p_out=0.0005 * 1000 / n,
                        m=5, cluster_weights=WEIGHTS, sigma=0.1, seed=1)


def worker(route: str, n: int, lam: float, max_iter: int) -> None:
    """One solve in this process; prints one JSON line and saves the weights."""
    model = sbm(n).model(lam=lam)
    opts = {"max_iter": max_iter} if route == "first_order" else {}
    t0 = time.perf_counter()
    sol = gm.solve_exact(model, method=route, accept_inaccurate=True, **opts)
    seconds = time.perf_counter() - t0
    OUT.mkdir(parents=True, exist_ok=True)
    np.save(OUT / f"W_{os.environ.get('GTV_BENCH_TAG', route)}_{n}.npy", sol.weights)
    print(json.dumps({
        "route": sol.info["route"], "n": n, "edges": model.num_edges, "lam": lam,
        "size": (model.num_nodes + model.num_edges) * model.dim, "seconds": seconds,
        "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "status": sol.status, "rel_gap": sol.info["certified_relative_gap"],
        "iterations": sol.info.get("iterations"), "solver": sol.solver,
        "gtvmodel": gm.__file__}), flush=True)


def run(route: str, n: int, lam: float, max_iter: int, root: str | None = None) -> dict:
    """:func:`worker` in a fresh subprocess, importing the ``gtvmodel`` of ``root`` when
    given (a baseline checkout; its weights are saved as ``route`` ``"baseline"``)."""
    cmd = [sys.executable, __file__, "--worker", route, "--n", str(n), "--lam", str(lam),
           "--max-iter", str(max_iter)]
    env = dict(os.environ)
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
        env["GTV_BENCH_TAG"] = "baseline"
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def fit(rows: list[dict], key: str) -> tuple[float, float]:
    """``(a, b)`` of ``key ~ a * size^b`` by least squares in log-log."""
    x = np.log([r["size"] for r in rows])
    y = np.log([r[key] for r in rows])
    b, loga = np.polyfit(x, y, 1)
    return float(np.exp(loga)), float(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 2000, 5000])
    parser.add_argument("--first-order", type=int, nargs="*", default=[20000])
    parser.add_argument("--lam", type=float, default=0.1)
    parser.add_argument("--max-iter", type=int, default=200_000)
    parser.add_argument("--baseline", help="a checkout whose first-order route runs beside")
    parser.add_argument("--baseline-max-iter", type=int, default=5000)
    parser.add_argument("--worker", choices=["interior", "first_order"])
    parser.add_argument("--n", type=int)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.n, args.lam, args.max_iter)
        return
    print(f"bench_exact_scale: lambda = {args.lam}, threads {_pin_threads.THREADS}, "
          f"gtvmodel {gm.__file__}, baseline {args.baseline}", flush=True)
    interior, imported = [], set()
    print("| n | \\|E\\| | (n+\\|E\\|) d | route | seconds | peak GB | status | certified rel. gap "
          "| iterations | interior / first-order time | memory ratio | max \\|W diff\\| |")
    print("|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|", flush=True)
    for n in args.sizes + args.first_order:
        routes = ["interior", "first_order"] if n in args.sizes else ["first_order"]
        rows = {}
        if args.baseline:
            rows["baseline"] = run("first_order", n, args.lam, args.baseline_max_iter,
                                   args.baseline)
        rows.update({r: run(r, n, args.lam, args.max_iter) for r in routes})
        imported |= {f"{r}: {row['gtvmodel']}" for r, row in rows.items()}
        if "interior" in rows:
            interior.append(rows["interior"])
        for r, row in rows.items():
            extra = ["", "", ""]
            if r == "first_order" and "baseline" in rows:
                a = rows["baseline"]
                extra[0] = f"baseline / this: {a['seconds'] / row['seconds']:.2f}x"
            if r == "first_order" and "interior" in rows:
                a, b = rows["interior"], row
                diff = np.abs(np.load(OUT / f"W_interior_{n}.npy")
                              - np.load(OUT / f"W_first_order_{n}.npy")).max()
                extra = [f"**{a['seconds'] / b['seconds']:.2f}x**",
                         f"{a['peak_gb'] / b['peak_gb']:.1f}x", f"{diff:.1e}"]
            name = "first_order (baseline)" if r == "baseline" else r
            print(f"| {n} | {row['edges']} | {row['size']} | {name} | {row['seconds']:.1f} | "
                  f"{row['peak_gb']:.2f} | {row['status']} | {row['rel_gap']:.1e} | "
                  f"{row['iterations'] or ''} | " + " | ".join(extra) + " |", flush=True)
        if "interior" not in rows and len(interior) >= 2:
            (at, bt), (am, bm) = fit(interior, "seconds"), fit(interior, "peak_gb")
            size = rows["first_order"]["size"]
            print(f"| {n} | | {size} | interior (not run: extrapolated from a * size^b, "
                  f"b = {bt:.2f} for time, {bm:.2f} for memory) | {at * size ** bt:.0f} | "
                  f"{am * size ** bm:.1f} | | | | | | |", flush=True)
    print("\nworkers imported " + "; ".join(sorted(imported)), flush=True)


if __name__ == "__main__":
    main()
