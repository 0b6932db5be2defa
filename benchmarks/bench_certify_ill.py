"""Benchmark: certificate tightness on nearly rank-deficient local data (issue 16, item 4).

A 30-node connected Watts-Strogatz graph, d = 5, squared losses: nodes 0 and 1 have samples
(15 x 5) with singular values log-spaced from 1 down to ``sqrt(ratio)`` (Gram ratio
``e_min/e_max = ratio``, scaled 1x and 2x), every 5th node from 4 on ``m_i = 3 < d``, every 7th
from 6 on no data, the rest 10 x 5 Gaussian samples; noisy labels; ``Norm2``, lambda = 0.3.
Per ratio and seed: ``certify`` of ``solve_exact``'s solution (with its flows) and of Algorithm
1's iterates after ``--iters`` iterations (``fallback=False``, as Algorithm 1 calls it), against
the true suboptimality ``P(W) - P(W_exact)``; the column "stiff share" is the part of the gap
at nodes 0 and 1 (the per-node Fenchel-Young gaps ``cert.node_gaps``).

With ``--baseline DIR`` (``DIR`` holds another checkout's ``gtvmodel``) every row is computed
by that code and by this checkout, alternately, in subprocesses that print the ``gtvmodel``
they imported.

Run: ``PYTHONPATH=. python benchmarks/bench_certify_ill.py [--ratios 1e-9 1e-11 1e-13]
[--seeds 0 1] [--iters 150 400] [--baseline DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import networkx as nx
import numpy as np

import gtvmodel as gm


def ill_samples(rng: np.random.Generator, m: int, d: int, ratio: float) -> np.ndarray:
    """``m x d`` samples with singular values log-spaced from 1 to ``sqrt(ratio)``."""
    U, _ = np.linalg.qr(rng.standard_normal((m, d)))
    V, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (U * np.logspace(0, 0.5 * np.log10(ratio), d)) @ V.T


def build(ratio: float, seed: int, n: int = 30, d: int = 5) -> gm.GTVModel:
    rng = np.random.default_rng(seed)
    model = gm.GTVModel(nx.connected_watts_strogatz_graph(n, 4, 0.3, seed=seed), dim=d,
                        lam=0.3)
    w_true = rng.standard_normal(d)
    for i in range(n):
        if i % 7 == 6:
            continue
        if i < 2:
            X = ill_samples(rng, 3 * d, d, ratio) * (1 + i)
        elif i % 5 == 4:
            X = rng.standard_normal((d - 2, d))
        else:
            X = rng.standard_normal((2 * d, d))
        model.set_loss(i, gm.SquaredLoss(X, X @ w_true + 0.1 * rng.standard_normal(len(X))))
    return model


def child(ratio: float, seed: int, iters: list[int]) -> None:
    warnings.simplefilter("ignore")
    model = build(ratio, seed)
    sol = model.solve_exact(certify=False)
    p_star = float(model.objective(sol.weights))
    rows = []
    for it in [0, *iters]:
        if it == 0:
            W, U, fallback = sol.weights, sol.flows, True
        else:
            res = gm.solve_primal_dual(model, max_iter=it, tol=0.0, record_every=None)
            W, U, fallback = res.weights, res.flows, False
        t0 = time.perf_counter()
        cert = gm.certify(model, W, U, fallback=fallback)
        secs = time.perf_counter() - t0
        share = float(np.clip(cert.node_gaps[:2], 0, None).sum() / cert.gap) if cert.gap else 0.0
        rows.append({"iters": it, "true": float(model.objective(W)) - p_star, "gap": cert.gap,
                     "share": share, "secs": secs})
    print(json.dumps({"gtvmodel": gm.__file__, "rows": rows}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ratios", nargs="+", type=float, default=[1e-9, 1e-11, 1e-13])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--iters", nargs="+", type=int, default=[150, 400])
    ap.add_argument("--baseline", default=None)
    ap.add_argument("--child", nargs=2, type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.iters)
        return
    here = str(Path(__file__).resolve().parents[1])
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("| Gram ratio | seed | code | candidate | P(W) - P* | certified gap | gap / (P - P*) "
          "| stiff share | certify s |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|")
    for ratio in args.ratios:
        for seed in args.seeds:
            for path in ([args.baseline] if args.baseline else []) + [here]:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", str(ratio), str(seed), "--iters",
                     *map(str, args.iters)], capture_output=True, text=True, check=True,
                    env=dict(os.environ, PYTHONPATH=path)).stdout
                r = json.loads(out.strip().splitlines()[-1])
                code = "baseline" if path != here else "this"
                for row in r["rows"]:
                    what = "exact" if row["iters"] == 0 else f"Alg. 1, {row['iters']} it."
                    true = max(row["true"], 0.0)
                    ratio_txt = f"{row['gap'] / true:.3g}" if true > 1e-13 else "-"
                    print(f"| {ratio:g} | {seed} | {code} ({r['gtvmodel']}) | {what} | "
                          f"{row['true']:.2e} | {row['gap']:.2e} | {ratio_txt} | "
                          f"{row['share']:.2f} | {row['secs']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
