"""Benchmark: certificates at scale and the stopping rule's detection delay (issue 16, item 2).

Targets: one certificate of a 100,000-node / 1,000,000-edge iterate (squared loss, ``Norm2``,
d = 10) in at most the time of 20 iterations and at most 1.5x the solver's peak memory; on paper
001's Table I setting (100 nodes, d = 100, m_i = 10 < d) at most 5 % of one ``solve_exact``;
a gap below ``tol`` detected by 1.1x the iteration where it happened.

* ``--table1``: ``solve_exact`` once, then the cold certificate of its solution (building the
  subspace solver) and of a perturbed point with the old global minimum-norm solver
  (``MinNormSolver``: conjugate gradients on ``sum_i (d - m_i) = 9,000`` rows) and the new
  complement solver (``RangeSolver``, ``sum_i m_i = 1,000`` rows), side by side; then
  ``solve_primal_dual(tol=1e-6)`` with the default budget against the iteration at which a
  certificate every ``record_every`` first met ``tol``.
* ``--large N E``: a ``G(n, m)`` random graph, ``m_i = 20`` rows per node; in a subprocess (so
  the peak RSS is the run's own): 20 iterations of Algorithm 1 (``record_every=None``), then a
  cold and a warm ``certify`` of the iterate; peak RSS after the solver and after the
  certificates.

  With ``--baseline DIR`` (``DIR`` holds another checkout's ``gtvmodel``, e.g. ``git archive
  <commit> gtvmodel | tar -x -C DIR``) the child runs alternately on that code and on this
  checkout, ``--repeats`` times each (rows interleaved, each naming the ``gtvmodel`` it
  measured); ``--ill K`` makes ``K`` nodes ill-conditioned (singular values 1 ... 10^-5.5, Gram
  ratio 1e-11: the certificate's affine repair variant, issue 16 item 4).

* ``--stopping N E``: the same random graph, ``solve_primal_dual(tol=1e-6)`` with a
  certificate every ``record_every = 10`` iterations (no budget) against the default budget.

Usage: ``python benchmarks/bench_certify_scale.py [--table1] [--large 20000 200000]
[--stopping 2000 20000]``
(``--large 100000 1000000`` is the issue's size).
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
import networkx as nx
import numpy as np

import gtvmodel as gm
from gtvmodel import datasets
from gtvmodel.certificates.kinds import node_kinds
from gtvmodel.certificates.subspace import MinNormSolver, divergence_rows


def table1_model(seed: int = 0) -> gm.GTVModel:
    rng = np.random.default_rng(seed)
    data = datasets.sbm((50, 50), p_in=0.5, p_out=1e-2, m=10,
                        cluster_weights=rng.integers(0, 2, size=(2, 100)).astype(float),
                        sigma=1e-3, seed=seed)
    return data.model(lam=1e-2)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def old_solver(model: gm.GTVModel) -> MinNormSolver:
    k = node_kinds(model)
    return MinNormSolver(divergence_rows(model, k.subspace, k.subspace_bases))


def table1() -> list[str]:
    model = table1_model()
    t_solve, sol = timed(lambda: model.solve_exact(certify=False))
    rng = np.random.default_rng(1)
    W, U = sol.weights, sol.flows
    Up = U + 1e-4 * rng.standard_normal(U.shape)
    rows = [f"| Table I | solve_exact | {t_solve:.2f} | 100 % | |"]
    for name in ("old (MinNormSolver, CG)", "new (RangeSolver)"):
        model.cache.clear()
        if name.startswith("old"):
            t_build, solver = timed(lambda: old_solver(model))
            model.cache.put("cert_subspace", solver)
        else:
            t_build = 0.0
        t_cold, c_cold = timed(lambda: model.certify(W, U))
        t_pert, c_pert = timed(lambda: model.certify(W, Up))
        for what, t, c in ((f"{name}: certify exact W, U (cold)", t_cold + t_build, c_cold),
                           (f"{name}: certify exact W, perturbed U", t_pert, c_pert)):
            rows.append(f"| Table I | {what} | {t:.2f} | {100 * t / t_solve:.1f} % | "
                        f"{c.gap:.3e} |")
        print("\n".join(rows[-2:]), flush=True)
    # stopping: the reference certifies every record_every (no budget)
    model.cache.clear()
    tol = 1e-6
    ref = gm.solve_primal_dual(model, tol=tol, record_every=10, certificate_budget=None)
    model.cache.clear()
    t_run, res = timed(lambda: gm.solve_primal_dual(model, tol=tol, record_every=10))
    rows.append(f"| Table I | solve_primal_dual(tol=1e-6): first certified below tol (every 10) "
                f"{ref.iterations}, detected (default budget) {res.iterations} "
                f"({res.iterations / ref.iterations:.2f}x), status {res.status}, "
                f"{len(res.history)} certificates, {res.timings['certificate']:.1f} of "
                f"{t_run:.1f} s | {t_run:.2f} | | {res.gap:.3e} |")
    print(rows[-1], flush=True)
    return rows


def peak_rss_mib() -> float:
    """This process's peak resident memory (``VmHWM``: unlike ``ru_maxrss``, not inherited
    from the parent across ``exec``), in MiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def random_model(n: int, E: int, d: int = 10, ill: int = 0) -> gm.GTVModel:
    """The ``G(n, m)`` model; its first ``ill`` nodes get samples with singular values
    1 ... 10^-5.5 (Gram ratio 1e-11)."""
    rng = np.random.default_rng(0)
    G = nx.gnm_random_graph(n, E, seed=0)
    model = gm.GTVModel(G, d, penalty=gm.Norm2(), lam=1e-2)
    weak = np.logspace(0, -5.5, d)
    for v in range(n):
        X = rng.standard_normal((20, d))
        if v < ill:
            Q, _ = np.linalg.qr(X)
            X = (Q * weak) @ np.linalg.qr(rng.standard_normal((d, d)))[0]
        model.set_loss(v, gm.SquaredLoss(X, X @ np.ones(d) + 0.1 * rng.standard_normal(20)))
    model.structure()
    return model


def stopping(n: int, E: int, tol: float = 1e-6) -> list[str]:
    """Detection on the random graph: a certificate every 10 iterations (no budget) against
    the default budget."""
    model = random_model(n, E)
    ref = gm.solve_primal_dual(model, tol=tol, record_every=10, certificate_budget=None)
    t_run, res = timed(lambda: gm.solve_primal_dual(model, tol=tol, record_every=10))
    row = (f"| {n}/{E} | solve_primal_dual(tol={tol:g}): first certified below tol (every 10) "
           f"{ref.iterations} ({ref.status}), detected (default budget) {res.iterations} "
           f"({res.iterations / max(ref.iterations, 1):.2f}x), status {res.status}, "
           f"{len(res.history)} certificates taking {res.timings['certificate']:.1f} of "
           f"{t_run:.1f} s |")
    print(row, flush=True)
    return [row]


def large_child(n: int, E: int, ill: int) -> None:
    model = random_model(n, E, ill=ill)
    t_it, res = timed(lambda: gm.solve_primal_dual(model, max_iter=20, tol=0,
                                                   record_every=None))
    rss_solver = peak_rss_mib()
    t_cold, c = timed(lambda: model.certify(res.weights, res.flows))
    t_warm, c = timed(lambda: model.certify(res.weights, res.flows))
    rss_cert = peak_rss_mib()
    per_it = (res.timings["node_updates"] + res.timings["edge_updates"]) / 20
    print(json.dumps({"n": n, "E": E, "per_iteration": per_it, "iterations20": t_it,
                      "cold": t_cold, "warm": t_warm, "rss_solver": rss_solver,
                      "rss_cert": rss_cert, "gap": c.relative_gap,
                      "gtvmodel": gm.__file__, "repairs": c.repairs}))


def large(n: int, E: int, baseline: str | None = None, repeats: int = 1, ill: int = 0
          ) -> list[str]:
    rows = []
    here = str(Path(__file__).resolve().parents[1])
    for _ in range(repeats):
        for path in ([baseline] if baseline else []) + [here]:
            env = dict(os.environ, PYTHONPATH=path)
            out = subprocess.run([sys.executable, __file__, "--child", str(n), str(E),
                                  str(ill)], capture_output=True, text=True, check=True,
                                 env=env).stdout
            r = json.loads(out.strip().splitlines()[-1])
            it = r["per_iteration"]
            load = os.getloadavg()[0]
            rows.append(f"| {n}/{E} (ill {ill}) | {r['gtvmodel']} | load {load:.1f} | one "
                        f"iteration {it:.3f} s; certify cold {r['cold']:.2f} s "
                        f"({r['cold'] / it:.1f} iterations), warm {r['warm']:.2f} s "
                        f"({r['warm'] / it:.1f} iterations); peak RSS solver "
                        f"{r['rss_solver']:.0f} MiB, with certificates {r['rss_cert']:.0f} MiB "
                        f"({r['rss_cert'] / r['rss_solver']:.2f}x); gap {r['gap']:.3g}; "
                        f"{len(r['repairs'])} repairs"
                        f"{' (affine variant)' if any('stiff' in x for x in r['repairs']) else ''}"
                        " |")
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table1", action="store_true")
    ap.add_argument("--large", nargs=2, type=int, metavar=("N", "E"))
    ap.add_argument("--stopping", nargs=2, type=int, metavar=("N", "E"))
    ap.add_argument("--baseline", default=None)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--ill", type=int, default=0)
    ap.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        large_child(*args.child)
        return
    rows = []
    if args.table1:
        rows += table1()
    if args.large:
        rows += large(*args.large, args.baseline, args.repeats, args.ill)
    if args.stopping:
        rows += stopping(*args.stopping)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
