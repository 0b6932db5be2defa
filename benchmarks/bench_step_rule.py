"""Iterations of Algorithm 1 to a certified relative gap of 1e-6: the default step rule
(``ResidualBalancing``) against the paper's fixed ``c = 1`` on paper 001 VI-A's SBM (all nodes
labelled, rho = 1), over several seeds, with a certificate every ``--every`` iterations for
*both* rules (``certificate_budget=None``), so that neither rule's count is rounded up more
than the other's (bench_primal_dual.py (d) certifies ``c = 1`` only every 50 iterations).

The figure of docs/primal_dual.md ("5.7-6.5x fewer iterations", issue 17's re-measurement of the
earlier "7-11x").  BLAS and Clarabel threads pinned to one (``_pin_threads``).

``--paper000``: also how far residual balancing moves ``c`` from its estimate ``c_0`` on paper
000's setting (``datasets.paper000_sbm()``, ``Norm1``, lambda = 1e-3): ``c_0`` (after one
iteration) and ``c`` at the end (docs/primal_dual.md's "lowers c by ~1.7x from c_0").

Run:  python benchmarks/bench_step_rule.py [--seeds 0 1 2] [--every 10] [--rho 1.0] [--paper000]
"""

from __future__ import annotations

import argparse
import statistics

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
from bench_primal_dual import iterations_to_gap

import gtvmodel as gm
from gtvmodel.datasets import paper000_sbm, sbm


def paper000_c() -> None:
    """``c_0`` and the final ``c`` of the default rule on paper 000's setting."""
    model = paper000_sbm().model(gm.Norm1(), lam=1e-3)
    res = model.solve_primal_dual(tol=1e-6, record_every=10, certificate_budget=None,
                                  max_iter=20_000)
    first = model.solve_primal_dual(max_iter=1, tol=0, record_every=1)  # c_0: no update yet
    c0, c = float(first.history.c[-1]), float(res.history.c[-1])
    print(f"paper 000 (Norm1, lambda 1e-3): {res.status} at {res.iterations}; c_0 = {c0:.4g}, "
          f"c at the end {c:.4g} (c_0 / c = {c0 / c:.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--rho", type=float, default=1.0)
    ap.add_argument("--paper000", action="store_true")
    args = ap.parse_args()
    print(f"001 VI-A SBM, rho = {args.rho}, lambda = 1e-2, Norm2; certificates every "
          f"{args.every} iterations for both rules; threads {_pin_threads.THREADS}")
    print(f"{'seed':>5}{'default':>10}{'c = 1':>10}{'ratio':>8}")
    ratios = []
    for seed in args.seeds:
        model = sbm(rho=args.rho, seed=seed).model(gm.Norm2(), lam=1e-2)
        k_def, _ = iterations_to_gap(model, None, 20_000, args.every)
        k_one, _ = iterations_to_gap(model, 1.0, 20_000, args.every)
        ratio = k_one / k_def if k_def > 0 and k_one > 0 else float("nan")
        ratios.append(ratio)
        print(f"{seed:>5}{k_def:>10}{k_one:>10}{ratio:>7.1f}x", flush=True)
    if ratios:
        print(f"ratio range {min(ratios):.1f}-{max(ratios):.1f}x, median "
              f"{statistics.median(ratios):.1f}x")
    if args.paper000:
        paper000_c()


if __name__ == "__main__":
    main()
