"""Benchmark: CVXPY compile cost of the certificate problems with per-node data as a DPP
Parameter against constants stated per call (issue 16 item 2).

The three problems: the node-conjugate problem of ``certificates.value`` (demands ``S``,
``(k, d)``, and radii ``R``, ``(k,)``; squared losses with boxes), the domain-scaling LP of
``certificates.repair`` (``theta_i s_i``) and the stacked conic conjugates of
``duality.conic`` (symbolic ``||x - a_k||^2``).  Each size runs in a child process (its own
peak RSS, an address-space limit of ``--limit-gib`` so a runaway DPP tensor fails fast instead
of swapping): the first ``get_problem_data`` (compile) time and peak-RSS growth, then a second
call at new demands (re-applying the DPP tensor, or compiling again).  ``param`` forces the
cached DPP form (``DPP_MAX_ENTRIES`` huge), ``const`` the per-call form (0).

Usage: ``python benchmarks/bench_certify_compile.py [--kd 1000 10000 100000] [--d 10]``
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import cvxpy as cp
import networkx as nx
import numpy as np

import gtvmodel as gm
from gtvmodel import _cvx
from gtvmodel.certificates.repair import _gauge_problem
from gtvmodel.certificates.value import _general_problem
from gtvmodel.duality.conic import _stacked_problem

PROBLEMS = ("value", "gauge", "conic")


def peak_rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def model_of(k: int, d: int, symbolic: bool) -> gm.GTVModel:
    rng = np.random.default_rng(0)
    model = gm.GTVModel(nx.path_graph(k), d, penalty=gm.Norm2(), lam=1e-2)
    for v in range(k):
        if symbolic:
            model.set_loss(v, cp.sum_squares(model.var(v) - rng.standard_normal(d)))
        else:
            X = rng.standard_normal((5, d))
            model.set_loss(v, gm.SquaredLoss(X, X @ np.ones(d)))
            model.add_constraint(v, gm.Box(-3.0, 3.0))
    model.structure()
    return model


def problem_at(what: str, model: gm.GTVModel, S: np.ndarray) -> cp.Problem:
    k = S.shape[0]
    nodes = np.arange(k)
    if what == "value":
        return _general_problem(model, nodes).problem(S, np.ones(k))
    if what == "gauge":
        return _gauge_problem(model, nodes).problem(S)
    return _stacked_problem(model, tuple(range(k))).problem(S)[0]


def child(what: str, variant: str, k: int, d: int) -> None:
    _cvx.DPP_MAX_ENTRIES = 10**12 if variant == "param" else 0
    model = model_of(k, d, what == "conic")
    S = 0.01 * np.random.default_rng(1).standard_normal((k, d))
    base = peak_rss_mib()
    t0 = time.perf_counter()
    problem_at(what, model, S).get_problem_data(cp.CLARABEL)
    first = time.perf_counter() - t0
    grow = peak_rss_mib() - base
    t0 = time.perf_counter()
    problem_at(what, model, 1.1 * S).get_problem_data(cp.CLARABEL)
    print(json.dumps({"first": first, "second": time.perf_counter() - t0, "mib": grow}))


def run(what: str, variant: str, k: int, d: int, limit_gib: float, timeout: float) -> str:
    def limit() -> None:
        cap = int(limit_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    try:
        out = subprocess.run([sys.executable, __file__, "--child", what, variant, str(k),
                              str(d)], capture_output=True, text=True, timeout=timeout,
                             preexec_fn=limit)
    except subprocess.TimeoutExpired:
        return f"over {timeout:.0f} s"
    if out.returncode:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return "failed: " + last.split(":", 1)[-1].strip()[:70]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return f"{r['first']:.2f} s, +{r['mib']:.0f} MiB; next call {r['second']:.3f} s"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kd", nargs="+", type=int, default=[1000, 10000, 100000])
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--limit-gib", type=float, default=8.0)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        what, variant, k, d = args.child
        child(what, variant, int(k), int(d))
        return
    print("| problem | k d | Parameter (compile once) | constant (per call) |")
    print("|---|---:|---|---|")
    for what in PROBLEMS:
        for kd in args.kd:
            k = kd // args.d
            cells = [run(what, v, k, args.d, args.limit_gib, args.timeout)
                     for v in ("param", "const")]
            print(f"| {what} | {kd:,} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
