"""Automatic conjugation (gtvmodel.solve.conic): cost of the conic dual for symbolic models.

For a random geometric graph with n nodes (d = 2), every node's loss is a squared loss on
5 samples.  Three models with the same optimum are built:

- ``library``:  ``SquaredLoss`` objects (closed-form conjugates in ``solve_dual``);
- ``symbolic``: the same losses written as CVXPY expressions (conic nodes, automatic
  conjugation);
- ``mixed``:    half library, half symbolic ``sum(exp)``-regularized losses.

Printed side by side, medians over repeats of process CPU time (the machine is shared; wall
time varies with other users' load), each on a freshly built model (no caches):
solve_exact, solve_dual (compile + solve), the conic-data extraction alone, their ratios,
the joint canonicalization of the conic nodes alone (``conic.conic_data``, what ``solve_dual``
does once per model version) against the node-by-node one it replaced, and the time of one
re-solve of ``node_conjugate_value`` (DPP, built once) against its first call.
Run:  .venv/bin/python benchmarks/bench_conic.py [n ...]
"""

from __future__ import annotations

import statistics
import sys
import time

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import cvxpy as cp
import networkx as nx
import numpy as np

import gtvmodel as gm
from gtvmodel import conic

REPEATS = 3


def build(n: int, kind: str, seed: int = 0) -> gm.GTVModel:
    rng = np.random.default_rng(seed)
    G = nx.random_geometric_graph(n, 2.2 / np.sqrt(n), seed=seed)
    G.add_edges_from((i, i + 1) for i in range(n - 1))  # connected
    model = gm.GTVModel(G, dim=2, penalty=gm.Norm2(), lam=0.1)
    for i in range(n):
        X = rng.normal(size=(5, 2))
        y = X @ rng.normal(size=2) + 0.1 * rng.normal(size=5)
        symbolic = kind == "symbolic" or (kind == "mixed" and i % 2)
        if not symbolic:
            model.set_loss(i, gm.SquaredLoss(X, y))
        elif kind == "symbolic":
            model.set_loss(i, lambda x, X=X, y=y: cp.sum_squares(y - X @ x) / 5)
        else:
            model.set_loss(i, lambda x, X=X, y=y: cp.sum_squares(y - X @ x) / 5
                           + 0.1 * cp.sum(cp.exp(x)))
    return model


def timed(fn) -> tuple[float, object]:
    """CPU seconds of the process (stable on a shared, loaded machine; the solvers here are
    single-threaded) and the result."""
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def run(n: int) -> None:
    rows = {}
    for kind in ("library", "symbolic", "mixed"):
        ex, du, cd, gap = [], [], [], []
        for r in range(REPEATS):
            m = build(n, kind, seed=r)
            t_ex, sol = timed(m.solve_exact)
            m2 = build(n, kind, seed=r)
            t_cd, _ = timed(lambda m2=m2: conic.conic_data(m2, conic.conic_nodes(m2))
                            if conic.conic_nodes(m2) else None)
            m3 = build(n, kind, seed=r)
            t_du, dsol = timed(m3.solve_dual)
            ex.append(t_ex)
            du.append(t_du)
            cd.append(t_cd)
            gap.append(abs(sol.objective - dsol.objective) / max(1.0, abs(sol.objective)))
        rows[kind] = (statistics.median(ex), statistics.median(du), statistics.median(cd),
                      max(gap))
    print(f"\nn = {n} nodes, d = 2, medians of {REPEATS} fresh builds (CPU seconds)")
    print(f"{'model':>9} {'solve_exact':>12} {'solve_dual':>11} {'conic data':>11} "
          f"{'dual/exact':>11} {'max rel |P-D|':>14}")
    for kind, (ex, du, cd, g) in rows.items():
        print(f"{kind:>9} {ex:12.3f} {du:11.3f} {cd:11.3f} {du / ex:11.2f} {g:14.1e}")
    lib_du, sym_du = rows["library"][1], rows["symbolic"][1]
    print(f"automatic conjugation overhead, symbolic / library solve_dual: {sym_du / lib_du:.2f}x")
    # joint vs node-by-node canonicalization of the conic nodes (the latter was used before)
    jt, sep = [], []
    for r in range(REPEATS):
        m = build(n, "symbolic", seed=r)
        jt.append(timed(lambda m=m: conic.conic_data(m, conic.conic_nodes(m)))[0])
        m = build(n, "symbolic", seed=r)
        sep.append(timed(lambda m=m: [conic.conic_data(m, [i]) for i in conic.conic_nodes(m)])[0])
    j, s_ = statistics.median(jt), statistics.median(sep)
    print(f"conic data of {n} symbolic nodes: joint {j:.3f} s, node by node {s_:.3f} s "
          f"(ratio {s_ / j:.2f}x)")
    # node_conjugate_value: first call (build + canonicalize) vs a DPP re-solve
    m = build(n, "symbolic")
    s = np.array([0.1, -0.2])
    t_first, _ = timed(lambda: conic.node_conjugate_value(m, 0, s))
    resolves = [timed(lambda k=k: conic.node_conjugate_value(m, 0, s * (1 + 0.1 * k)))[0]
                for k in range(10)]
    t_re = statistics.median(resolves)
    print(f"node_conjugate_value: first call {1e3 * t_first:.1f} ms, re-solve "
          f"{1e3 * t_re:.1f} ms (ratio {t_first / t_re:.1f}x)")


if __name__ == "__main__":
    sizes = [int(a) for a in sys.argv[1:]] or [100, 400]
    for n in sizes:
        run(n)
