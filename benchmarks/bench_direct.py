"""The direct exact solvers (``solve_direct``, issue 28 item 4) side by side with prox-tv.

Path: the 1-D fused lasso of ``chain_proxtv`` (n nodes, d = 1, ``QuadraticLoss([y_i])``,
``Norm1``, lambda = 4; y = 100 constant segments with levels N(0, 9) plus N(0, 0.25) noise,
seed 0).  prox-tv's ``tv1_1d(y, lambda / 2)`` has the same minimizer (it halves our
objective).  In every repeat, interleaved: prox-tv, the path kernel
(``gtvmodel.kernels.tv.tv_path``: the arrays solve_direct hands it; these two in alternating
order), the tree kernel on the same path, and the whole ``solve_direct`` call (node terms,
forest order, kernel, flows, certificate; the model built once before).  Reported: median
and min-max of each, the median and min-max of the per-repeat ratio kernel / prox-tv and the
ratio of the fastest runs (on a shared machine the medians carry other processes' time),
max |w - w_prox-tv|, the certified relative gap (34).  The path kernel and prox-tv are also
timed in CPU time of the calling thread (``time.thread_time``: without the scheduler's slices
given to other processes) with its per-repeat ratio.

Tree: a random recursive tree on n nodes (node i joins a uniform node < i), A_e ~ U(0.5, 2),
``QuadraticLoss(a_i)`` with a ~ N(0, 1), lambda = 0.5; the whole ``solve_direct`` call.

``--jit``: the first call's compile time, in a fresh process with an empty numba cache
(``NUMBA_CACHE_DIR`` set to a temporary folder), then the same first call with the cache
filled.  The 1-minute load average is printed with each table.

Run:  PYTHONPATH=. python benchmarks/bench_direct.py [--n 100000] [--repeats 15] [--jit]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import numpy as np

import gtvmodel as gm
from gtvmodel.kernels import tv

try:
    import prox_tv
except ImportError:  # the path table then has no prox-tv column
    prox_tv = None


def chain(n: int, lam: float) -> tuple[np.ndarray, gm.GTVModel]:
    """``chain_proxtv``'s data and its model."""
    rng = np.random.default_rng(0)
    seg = np.arange(n) * 100 // n
    y = (3.0 * rng.standard_normal(100))[seg] + 0.5 * rng.standard_normal(n)
    edges = np.stack([np.arange(n - 1), np.arange(1, n)], 1)
    model = gm.GTVModel.from_edges(n, edges, dim=1, penalty=gm.Norm1(), lam=lam)
    model.set_losses({i: gm.QuadraticLoss([v]) for i, v in enumerate(y.tolist())})
    return y, model


def random_tree(n: int) -> gm.GTVModel:
    rng = np.random.default_rng(1)
    parent = (rng.random(n - 1) * np.arange(1, n)).astype(np.int64)
    edges = np.stack([parent, np.arange(1, n)], 1)
    model = gm.GTVModel.from_edges(n, edges, rng.uniform(0.5, 2.0, n - 1), dim=1,
                                   penalty=gm.Norm1(), lam=0.5)
    a = rng.normal(size=n)
    model.set_losses({i: gm.QuadraticLoss([v]) for i, v in enumerate(a.tolist())})
    return model


def stats(ts: list[float], scale: float = 1e3) -> str:
    a = np.asarray(ts) * scale
    return f"{np.median(a):.2f} ({a.min():.2f}-{a.max():.2f})"


def timed(f, *args, **kwargs):  # noqa: ANN001, ANN202
    t0 = time.perf_counter()
    out = f(*args, **kwargs)
    return out, time.perf_counter() - t0


def timed_cpu(f, *args):  # noqa: ANN001, ANN202
    """``(out, wall seconds, this thread's CPU seconds)``: on a shared machine the wall time
    of a 2 ms call is bimodal (about 2 ms, or 10 ms when the scheduler gives the core to
    another process during the call); the thread's CPU time leaves those slices out."""
    c0, t0 = time.thread_time(), time.perf_counter()
    out = f(*args)
    return out, time.perf_counter() - t0, time.thread_time() - c0


def path_table(n: int, lam: float, repeats: int) -> None:
    y, model = chain(n, lam)
    order = np.arange(n)
    parent = order - 1
    t = np.full(n, lam)
    t[0] = 0.0
    q, p, eta = np.ones((n, 1)), y[:, None].copy(), np.zeros(n)
    gm.solve_direct(model)  # compiles (or loads) the kernels, builds the structure
    T: dict[str, list[float]] = {"prox-tv": [], "path kernel": [], "tree kernel": [],
                                 "solve_direct": [], "prox-tv CPU": [], "path kernel CPU": []}
    ratios, cpu_ratios = [], []
    for k in range(repeats):
        for first in ((True, False) if k % 2 else (False, True)):  # alternate who goes first
            if first and prox_tv is not None:
                ref, s, c = timed_cpu(prox_tv.tv1_1d, y, lam / 2)
                T["prox-tv"].append(s)
                T["prox-tv CPU"].append(c)
            elif not first:
                w, s_path, c = timed_cpu(tv.tv_path, order, parent, t, q, p, eta)
                T["path kernel"].append(s_path)
                T["path kernel CPU"].append(c)
        wt, s = timed(tv.tv_tree, order, parent, t, q, p, eta)
        T["tree kernel"].append(s)
        sol, s = timed(gm.solve_direct, model)
        T["solve_direct"].append(s)
        if prox_tv is not None:
            ratios.append(s_path / T["prox-tv"][-1])
            cpu_ratios.append(T["path kernel CPU"][-1] / T["prox-tv CPU"][-1])
    print(f"\npath n={n} d=1 lam={lam}, {repeats} interleaved repeats, ms: median (min-max); "
          f"load {os.getloadavg()[0]:.2f}")
    for k, v in T.items():
        if v:
            print(f"  {k:<16}{stats(v)}")
    parts = {k: round(v * 1e3, 2) for k, v in sol.timings.items()}
    print(f"  solve_direct's last timings (ms): {parts}")
    if ratios:
        print(f"  path kernel / prox-tv per repeat: {stats(ratios, 1.0)}; fastest / fastest: "
              f"{min(T['path kernel']) / min(T['prox-tv']):.2f}; CPU time per repeat: "
              f"{stats(cpu_ratios, 1.0)}")
        print(f"  max|w - w_prox-tv| = {np.abs(w[:, 0] - ref).max():.1e}, "
              f"tree kernel: {np.abs(wt[:, 0] - ref).max():.1e}")
    print(f"  certified relative gap {sol.info['certified_relative_gap']:.1e} "
          f"(gap {sol.certificate.gap:.1e}, P = {sol.objective:.12e})")


def tree_table(n: int, repeats: int) -> None:
    model, s_build = timed(random_tree, n)
    sol, s_first = timed(gm.solve_direct, model)
    ts = [timed(gm.solve_direct, model)[1] for _ in range(repeats)]
    print(f"\nrandom tree n={n} (max degree {int(model.degrees.max())}), d=1: model build "
          f"{s_build:.2f} s, first solve_direct {s_first:.3f} s; later calls "
          f"{stats(ts, 1.0)} s; load {os.getloadavg()[0]:.2f}")
    print(f"  timings (s): { {k: round(v, 3) for k, v in sol.timings.items()} }, certified "
          f"relative gap {sol.info['certified_relative_gap']:.1e}")


_FIRST = """
import time, numpy as np, networkx as nx, gtvmodel as gm
def model(graph, l1):
    m = gm.GTVModel(graph, dim=1, penalty=gm.Norm1(), lam=0.5)
    m.set_losses({i: gm.QuadraticLoss([float(i % 2)], l1=l1) for i in range(len(graph))})
    return m
s = []
for m in (model(nx.path_graph(5), 0.0), model(nx.path_graph(5), 0.1), model(nx.star_graph(4), 0)):
    t0 = time.perf_counter(); gm.solve_direct(m); s.append(round(time.perf_counter() - t0, 2))
print(*s)
"""


def jit_table() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": os.getcwd()}
        runs = [subprocess.run([sys.executable, "-c", _FIRST], env=env, capture_output=True,
                               text=True, check=True).stdout.split() for _ in range(2)]
    print(f"\nfirst solve_direct calls in a fresh process (s; a path without l1 (Condat), with "
          f"l1 (dynamic programming), a star (tree)), load "
          f"{os.getloadavg()[0]:.2f}: empty numba cache {runs[0]}, filled cache {runs[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=lambda s: int(float(s)), default=100_000)
    parser.add_argument("--lam", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--jit", action="store_true")
    args = parser.parse_args()
    print(f"prox-tv: {'installed' if prox_tv is not None else 'missing (pip install prox-tv)'}")
    path_table(args.n, args.lam, args.repeats)
    tree_table(args.n, max(3, args.repeats // 3))
    if args.jit:
        jit_table()


if __name__ == "__main__":
    main()
