"""Every engine before vs after a refactoring, side by side in one run (issue 9: "no benchmark
gets slower by more than its noise").

What: the same workloads, through the public API only, on two checkouts of the package -- the
old one extracted without touching git state (``git archive <rev> gtvmodel | tar -x -C DIR``)
and this checkout -- timed **alternately** (old, new, old, new, ...) in worker subprocesses with
single-threaded BLAS, so that the machine's noise hits both alike.  Per workload the driver
prints the medians over rounds of the old and new times and the median over rounds of the
per-round ratio new / old.

Workloads (paper 001 VI-A SBM with squared losses unless stated; ``n`` nodes):

- ``build+compile``: declare the model and run its first ``solve_exact`` with Clarabel limited
  to one iteration (the compilation dominates; both versions run the same single iteration);
- ``solve_exact``: a full exact solve without the self-certificate, warm (compiled) model;
- ``certify exact``: the certificate of the exact weights and flows, warm;
- ``certify perturbed``: weights + 1e-3 N(0, 1), no flows (flows built from the weights), warm;
- ``solve_dual``: the dual flow problem, warm;
- ``primal_dual x200``: 200 iterations of Algorithm 1 (``tol=0`` so that it never stops early);
- ``well_connected``: Theorem 2's max-flow check on paper 001 VI-B's chain;
- ``violations 20k box``: ``constraint_violations`` of a 20,000-node model with Box constraints;
- ``save+load``: one problem-file round trip.

Usage::

    python benchmarks/compare_versions.py --old /tmp/gtv_old [--new <checkout>] [--rounds 5]
        [--n 400]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

WORKLOADS = ["build+compile", "solve_exact", "certify exact", "certify perturbed",
             "solve_dual", "primal_dual x200", "well_connected", "violations 20k box",
             "save+load"]


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def worker(n: int, repeats: int) -> None:
    import networkx as nx

    import gtvmodel as gm
    from gtvmodel import datasets, theory

    out: dict[str, object] = {"file": gm.__file__}
    half = n // 2

    def build():
        return datasets.sbm(sizes=(half, half), p_in=0.1, p_out=0.005, m=5, seed=1).model(
            lam=0.05)

    def build_compile():
        model = build()
        try:  # one Clarabel iteration: the status is 'user_limit', an error for both versions
            model.solve_exact(certify=False, max_iter=1, accept_inaccurate=True)
        except gm.GTVError:
            pass

    out["build+compile"] = _best(build_compile, repeats)
    model = build()
    sol = model.solve_exact(certify=False)
    out["solve_exact"] = _best(lambda: model.solve_exact(certify=False), repeats)
    model.certify(sol.weights, sol.flows)
    out["certify exact"] = _best(lambda: model.certify(sol.weights, sol.flows), repeats)
    Wp = sol.weights + 1e-3 * np.random.default_rng(0).normal(size=sol.weights.shape)
    model.certify(Wp)
    out["certify perturbed"] = _best(lambda: model.certify(Wp), repeats)
    model.solve_dual()
    out["solve_dual"] = _best(lambda: model.solve_dual(), repeats)
    out["primal_dual x200"] = _best(
        lambda: model.solve_primal_dual(max_iter=200, tol=0.0, record_every=50), repeats)
    chain = datasets.chain(n=50, eps=0.01, sigma=0.1)
    cmodel = chain.model(lam=1.0)
    part = chain.partition()
    list(theory.check_well_connected(cmodel, part))
    out["well_connected"] = _best(lambda: list(theory.check_well_connected(cmodel, part)),
                                  repeats)
    big = gm.GTVModel(nx.empty_graph(20_000), dim=3)
    for i in range(20_000):
        big.add_constraint(i, gm.Box(-1.0, 1.0))
    Wb = np.random.default_rng(1).normal(size=(20_000, 3))
    big.constraint_violations(Wb)
    out["violations 20k box"] = _best(lambda: big.constraint_violations(Wb), repeats)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.npz")

        def roundtrip():
            model.save(path)
            type(model).load(path)

        out["save+load"] = _best(roundtrip, repeats)
    print(json.dumps(out))


def run_worker(root: str, n: int, repeats: int) -> dict:
    env = dict(os.environ, PYTHONSAFEPATH="1", PYTHONPATH=root, OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, __file__, "--worker", "--n", str(n), "--repeats", str(repeats)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"worker for {root} failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if not str(res["file"]).startswith(str(Path(root).resolve())):
        raise SystemExit(f"worker imported {res['file']}, not the code under {root}")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=False)
    ap.add_argument("--new", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args()
    if args.worker:
        worker(args.n, args.repeats)
        return
    if not args.old:
        ap.error("--old is required (a directory holding an old gtvmodel package)")
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for r in range(args.rounds):
        for label, root in (("old", args.old), ("new", args.new)):
            runs[label].append(run_worker(root, args.n, args.repeats))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"n = {args.n}, {args.rounds} rounds, best of {args.repeats} per round, "
          "single-threaded BLAS")
    print(f"{'workload':<22} {'old [s]':>10} {'new [s]':>10} {'new/old':>8}")
    for w in WORKLOADS:
        old = np.array([x[w] for x in runs["old"]])
        new = np.array([x[w] for x in runs["new"]])
        print(f"{w:<22} {np.median(old):>10.4f} {np.median(new):>10.4f} "
              f"{np.median(new / old):>8.2f}")


if __name__ == "__main__":
    main()
