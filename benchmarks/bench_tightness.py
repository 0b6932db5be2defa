"""Tightness of certificates from weights alone (``gm.certify(model, W)``, no flows).

The suite: random instances (``tests/_tightness.py``: paths, trees, grids, SBM, random graphs,
small worlds, pygsp-style Sensor and Community graphs; Norm1, Norm2, NormP(inf), SquaredNorm2;
d = 1 and 3; 0-60 % data-less nodes; squared losses with fewer samples than d; l1/l2
regularizers; active boxes; lambda from 0.02 to 3 times the consensus threshold).  Each
instance is solved by an independent hand-written CVXPY problem (Clarabel at 1e-12), then

- at the optimum ``W*``: relative gap <= 1e-8?
- at ``W* + eps noise`` (eps = 1e-6, 1e-4, clipped into the boxes): gap <= 10 (P(W) - P*) +
  the certificate's rounding?
- sound: gap >= P(W) - P* - 1e-10 max(1, |P|) (the reference's accuracy)?

It prints the counts per class (penalty, d) and the worst case of each.  ``--cost`` times
``certify(model, W*)`` against one ``solve_exact`` at 1,000 nodes (interleaved repeats,
medians), and ``--audit`` reruns the outside audit's instances.

    python benchmarks/bench_tightness.py --count 200
    python benchmarks/bench_tightness.py --cost
    python benchmarks/bench_tightness.py --audit
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import networkx as nx
import numpy as np

_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_ROOT), str(_ROOT / "tests")]  # this checkout's gtvmodel, the test helpers
import _tightness as T  # noqa: E402

import gtvmodel as gm  # noqa: E402
from gtvmodel.kernels import feasible_flow  # noqa: E402

OPT_RTOL = 1e-8
NEAR_RATIO = 10.0


def suite(count: int, n: int, start: int) -> None:
    rows: dict[str, list[dict]] = defaultdict(list)
    t0 = time.perf_counter()
    for seed in range(start, start + count):
        case = T.random_case(seed, n=n)
        model = T.build_model(case)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            W = T.reference(case)
        P_ref = model.objective(W)
        slack = 1e-10 * max(1.0, abs(P_ref))
        cert = gm.certify(model, W)
        rec = {"name": case.name, "seed": seed, "opt": cert.relative_gap,
               "opt_ok": cert.relative_gap <= OPT_RTOL,
               "sound": cert.gap >= cert.primal_value - P_ref - slack,
               "time": cert.timings["total"]}
        for eps in (1e-6, 1e-4):
            c = gm.certify(model, T.perturbed(case, W, eps, seed))
            sub = c.primal_value - P_ref
            rec[f"ratio{eps:.0e}"] = c.gap / max(sub, 1e-300)
            rec[f"ok{eps:.0e}"] = c.gap <= NEAR_RATIO * max(sub, 0.0) + c.tolerance + slack
            rec["sound"] &= c.gap >= sub - slack
        cls = f"{case.penalty}/d{case.d}"
        rows[cls].append(rec)
        rows["all"].append(rec)
    print(f"{count} instances of about {n} nodes in {time.perf_counter() - t0:.0f} s "
          f"(load {os.getloadavg()[0]:.1f})")
    print(f"{'class':14s} {'n':>4s} {'opt<=1e-8':>10s} {'near 1e-6':>10s} {'near 1e-4':>10s} "
          f"{'sound':>6s}  worst optimum (rel gap)            worst near (ratio)")
    for cls in sorted(rows):
        rs = rows[cls]
        k = len(rs)
        wo = max(rs, key=lambda r: r["opt"])
        wn = max(rs, key=lambda r: max(r["ratio1e-06"], r["ratio1e-04"]))
        def share(key: str, rs=rs, k=k) -> str:
            m = sum(r[key] for r in rs)
            return f"{m:5d} ({100 * m / k:3.0f}%)"

        print(f"{cls:14s} {k:4d} {share('opt_ok')} {share('ok1e-06')} {share('ok1e-04')}"
              f" {sum(r['sound'] for r in rs):5d}  {wo['opt']:.1e} seed {wo['seed']:<5d}"
              f" {wo['name']:34s} {max(wn['ratio1e-06'], wn['ratio1e-04']):8.2f} seed "
              f"{wn['seed']}")
    times = [r["time"] for r in rows["all"]]
    print(f"certify(model, W*) time: median {statistics.median(times):.3f} s, max "
          f"{max(times):.3f} s")


def cost(n: int, repeats: int) -> None:
    """``certify(model, W*)`` (no flows) against ``solve_exact`` at ``n`` nodes."""
    rng = np.random.default_rng(0)
    for pen, d in (("norm1", 1), ("norm2", 3), ("norminf", 3), ("norm1", 3)):
        h = n // 2
        G = nx.stochastic_block_model([h, n - h], [[10 / n, 0.5 / n], [0.5 / n, 10 / n]],
                                      seed=1)
        model = gm.GTVModel(G, dim=d, penalty={"norm1": gm.Norm1(), "norm2": gm.Norm2(),
                                              "norminf": gm.NormP(np.inf)}[pen], lam=0.3)
        centers = np.array([np.ones(d), -np.ones(d)])
        for i in range(n):
            if rng.random() < 0.5:
                model.set_loss(i, gm.QuadraticLoss(centers[int(i >= h)] + 0.3 * rng.normal(size=d)))
        t_solve, t_cert, gaps = [], [], []
        for _ in range(repeats):
            model.cache.clear()
            t0 = time.perf_counter()
            sol = gm.solve_exact(model)
            t_solve.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            cert = gm.certify(model, sol.weights)
            t_cert.append(time.perf_counter() - t0)
            gaps.append(cert.relative_gap)
        ms, mc = statistics.median(t_solve), statistics.median(t_cert)
        print(f"SBM n={n} |E|={model.num_edges} {pen} d={d}: solve_exact {ms:.2f} s "
              f"[{min(t_solve):.2f}-{max(t_solve):.2f}], certify(W) {mc:.3f} s "
              f"[{min(t_cert):.3f}-{max(t_cert):.3f}] = {100 * mc / ms:.1f} % "
              f"(rel gap {max(gaps):.1e}; load {os.getloadavg()[0]:.1f}; phase I "
              f"{'CHOLMOD' if feasible_flow.CHOLMOD else 'SuperLU'})")


def audit() -> None:
    """The outside audit's instances: Watts-Strogatz 100 nodes, d = 1, lambda = 0.3, all or
    half the nodes data-less (Norm1, Norm2); NormInf d = 3 on a path/tree/small world; a
    point 1e-6 per entry from the optimum."""
    rng = np.random.default_rng(0)
    for pen in ("norm1", "norm2"):
        for frac in (0.0, 0.5):
            worst = 0.0
            for seed in range(5):
                case = T.random_case(seed, graph_kind="smallworld", penalty=pen, d=1, n=100,
                                     dataless=frac, lam_factor=None, boxes=False,
                                     fewer_samples=False, l1=False)
                case.lam = 0.3
                model = T.build_model(case)
                W = T.reference(case)
                worst = max(worst, gm.certify(model, W).relative_gap)
            print(f"WS 100 d=1 {pen} data-less {frac:.0%}: worst relative gap at W* {worst:.1e}")
    for gk in ("path", "tree", "smallworld"):
        case = T.random_case(int(rng.integers(100)), graph_kind=gk, penalty="norminf", d=3,
                             n=40, boxes=False, l1=False)
        model = T.build_model(case)
        W = T.reference(case)
        c = gm.certify(model, W)
        Wp = W + 1e-6 * rng.normal(size=W.shape)
        cp_ = gm.certify(model, Wp)
        sub = cp_.primal_value - model.objective(W)
        print(f"NormInf d=3 {gk}: relative gap at W* {c.relative_gap:.1e}; at W*+1e-6: gap "
              f"{cp_.gap:.2e}, true suboptimality {sub:.2e}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--start", type=int, default=1000)
    ap.add_argument("--cost", action="store_true")
    ap.add_argument("--cost-n", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--audit", action="store_true")
    args = ap.parse_args()
    if args.cost:
        cost(args.cost_n, args.repeats)
    elif args.audit:
        audit()
    else:
        suite(args.count, args.n, args.start)
