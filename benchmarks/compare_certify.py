"""Certificate time before vs after the soundness fixes of issue 8, side by side in one run.

What: issue 8 asks that a re-run of ``benchmarks/bench_certify.py`` show that the fixes did not
make certificates more than **1.5x slower** (target: new / old <= 1.5 per case).  The machine is
shared and noisy, so the old code (commit 8e50eb6, extracted without touching git state:
``git -C . archive 8e50eb6 gtvmodel | tar -x -C /tmp/gtv_old``) and the new code (this
checkout) are timed **alternately in one run**, and the ratios are taken per round.

How: for each instance of ``bench_certify.py`` (the ``demo`` SBM with squared and with
logistic losses; the ``large`` ring lattice) and each certificate case ((a) exact weights +
flows, (b) perturbed weights + flows, (c) perturbed weights only), the driver starts worker
subprocesses alternately (old, new, old, new, ... for ``--rounds`` rounds).  A worker is this
script with ``--worker``, run with ``PYTHONSAFEPATH=1 PYTHONPATH=<code root>`` and
single-threaded BLAS (``OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=MKL_NUM_THREADS=1``); it reports
``gtvmodel.__file__`` to prove which code it imported.  It builds the instance
deterministically (same seeds as ``bench_certify.py``), solves it exactly once (with
``certify=False`` where ``solve_exact`` has that keyword, so the new code's self-certificate
does not warm the certificate caches), builds the perturbation like ``bench_certify.py``
(``default_rng(0)``: weights + 1e-3 N(0, 1), flows x (1 + 1e-2 N(0, 1))), then times
``model.certify`` once cold (first certificate on the model: builds the cached
eigen-decompositions etc.) and ``--repeats`` times warm, and prints one JSON line.  The driver
prints, per instance and case, the medians over rounds of the old and new times and the median
over rounds of the per-round ratio new / old (warm and cold).

Usage::

    python benchmarks/compare_certify.py [--rounds 3] [--repeats 5] [--skip-large]
        [--large-n 10000] [--old /tmp/gtv_old] [--new <checkout>] [--only INSTANCE ...]
        [--cases a b c] [--no-fallback]

``--no-fallback`` is a diagnostic: it passes ``fallback=False`` to the new ``certify`` (the
old one has no such keyword), which isolates the cost of the new retry with flows built from
the weights when the given flows do not certify.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import numpy as np

CASES = {
    "a": "exact W, U",
    "b": "perturbed W, U",
    "c": "perturbed W, no flows",
}
INSTANCES = {
    "demo-squared": "demo SBM squared (n=200)",
    "demo-logistic": "demo SBM logistic (n=200)",
    "large": "ring {n}/{m} squared",
}


# ----------------------------------------------------------------------------- worker
def build(instance: str, large_n: int):
    """The instances of ``bench_certify.py``, built from the imported ``gtvmodel``."""
    import gtvmodel as gm
    from gtvmodel import datasets

    if instance == "large":
        import networkx as nx

        G = nx.watts_strogatz_graph(large_n, 10, 0.0, seed=0)
        clusters = (np.arange(large_n) >= large_n // 2).astype(int)
        W = np.array([[2.0, 2.0], [-2.0, 2.0]])[clusters]
        data = datasets.linear_data(G, W, clusters, m=5, sigma=0.1, rho=0.6, seed=0)
        return data.model(lam=1e-2)
    data = datasets.sbm(rho=0.6, sigma=0.1, seed=0)
    if instance == "demo-squared":
        return data.model(lam=1e-2)
    model = gm.GTVModel(data.graph, data.dim, lam=1e-2)
    for v, X in data.X.items():
        model.set_loss(v, gm.LogisticLoss(X, np.where(data.y[v] > 0, 1.0, -1.0)))
    return model


def worker(args: argparse.Namespace) -> None:
    import importlib

    import gtvmodel

    # the public functions, in either layout (gtvmodel.solve_exact since issue 9)
    solve_exact = getattr(gtvmodel, "solve_exact", None) or importlib.import_module(
        "gtvmodel.exact").solve_exact
    model = build(args.instance, args.large_n)
    has_kw = "certify" in inspect.signature(solve_exact).parameters
    t0 = time.perf_counter()
    sol = solve_exact(model, certify=False) if has_kw else solve_exact(model)
    t_solve = time.perf_counter() - t0
    W, U = sol.weights, sol.flows
    rng = np.random.default_rng(0)
    Wp = W + 1e-3 * rng.standard_normal(W.shape)
    Up = U * (1 + 1e-2 * rng.standard_normal(U.shape))
    kw = {}
    if args.no_fallback and "fallback" in inspect.signature(gtvmodel.certify).parameters:
        kw["fallback"] = False
    call = {"a": lambda: model.certify(W, U, **kw), "b": lambda: model.certify(Wp, Up, **kw),
            "c": lambda: model.certify(Wp, **kw)}[args.case]
    t0 = time.perf_counter()
    cert = call()
    t_cold = time.perf_counter() - t0
    warm = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        cert = call()
        warm.append(time.perf_counter() - t0)
    print(json.dumps({
        "file": gtvmodel.__file__, "solve_certify_kw": has_kw, "certify_kwargs": kw,
        "n": model.num_nodes, "m": model.num_edges, "solve": t_solve, "cold": t_cold,
        "warm": float(np.median(warm)), "warm_all": warm, "relative_gap": float(cert.relative_gap),
        "repaired": bool(cert.repaired), "timings": {  # `times` before issue 9
            k: float(v) for k, v in getattr(cert, "timings", getattr(cert, "times", {})).items()},
        "flows_fallback": any("flows built from the weights were used" in str(r)
                              for r in getattr(cert, "repairs", []) or []),
    }))


# ----------------------------------------------------------------------------- driver
def run_worker(root: str, instance: str, case: str, args: argparse.Namespace) -> dict:
    env = dict(os.environ, PYTHONSAFEPATH="1",
               PYTHONPATH=os.pathsep.join([root, str(Path(__file__).resolve().parent)]),
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--instance", instance,
           "--case", case, "--repeats", str(args.repeats), "--large-n", str(args.large_n)]
    if args.no_fallback:
        cmd.append("--no-fallback")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {root} {instance} {case} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = str(Path(root).resolve() / "gtvmodel" / "__init__.py")
    if str(Path(out["file"]).resolve()) != expected:
        raise RuntimeError(f"worker imported {out['file']}, expected {expected}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="old/new alternations per case")
    ap.add_argument("--repeats", type=int, default=5, help="warm certificates per worker")
    ap.add_argument("--skip-large", action="store_true")
    ap.add_argument("--large-n", type=int, default=10_000, help="nodes of the ring lattice")
    ap.add_argument("--old", default="/tmp/gtv_old", help="root holding the old gtvmodel/")
    ap.add_argument("--new", default=str(Path(__file__).resolve().parents[1]),
                    help="root holding the new gtvmodel/")
    ap.add_argument("--only", nargs="*", choices=list(INSTANCES), help="instances to run")
    ap.add_argument("--cases", nargs="*", choices=list(CASES), help="cases to run (a, b, c)")
    ap.add_argument("--no-fallback", action="store_true",
                    help="diagnostic: certify(..., fallback=False) where the code has that "
                         "keyword (the new code's retry with flows built from the weights)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--instance", choices=list(INSTANCES), help=argparse.SUPPRESS)
    ap.add_argument("--case", choices=list(CASES), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    instances = args.only or [i for i in INSTANCES if not (args.skip_large and i == "large")]
    t_start = time.perf_counter()
    rows = []
    for inst in instances:
        for case in args.cases or CASES:
            res: dict[str, list[dict]] = {"old": [], "new": []}
            for r in range(args.rounds):
                for ver in ("old", "new"):
                    out = run_worker(getattr(args, ver), inst, case, args)
                    res[ver].append(out)
                    print(f"  {inst} ({case}) round {r + 1} {ver}: cold {out['cold']:.4f} s, "
                          f"warm {out['warm']:.4f} s, solve {out['solve']:.2f} s, rel. gap "
                          f"{out['relative_gap']:.2e}, flows fallback used "
                          f"{out['flows_fallback']} [{out['file']}]", flush=True)
            name = INSTANCES[inst].format(n=res["new"][0]["n"], m=res["new"][0]["m"])
            med = {v: {k: float(np.median([o[k] for o in res[v]])) for k in ("cold", "warm")}
                   for v in res}
            pairs = list(zip(res["old"], res["new"], strict=True))
            ratio = {k: float(np.median([n[k] / o[k] for o, n in pairs])) for k in ("cold", "warm")}
            gaps = {v: float(np.median([o["relative_gap"] for o in res[v]])) for v in res}
            rows.append(f"| {name} | ({case}) {CASES[case]} | {med['old']['warm']:.4f} | "
                        f"{med['new']['warm']:.4f} | **{ratio['warm']:.2f}** | "
                        f"{med['old']['cold']:.4f} | {med['new']['cold']:.4f} | "
                        f"{ratio['cold']:.2f} | {gaps['old']:.2e} | {gaps['new']:.2e} |")
            print(rows[-1], flush=True)
    print()
    print(f"rounds {args.rounds}, warm repeats {args.repeats}, total "
          f"{time.perf_counter() - t_start:.0f} s")
    print("| instance | case | old warm [s] | new warm [s] | new/old warm | old cold [s] | "
          "new cold [s] | new/old cold | old rel. gap | new rel. gap |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
