"""Automatic conjugation (gtvmodel.duality.conic): cost of the conic dual for symbolic models.

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

``--certify N`` (issue 9, deliverable 6b) instead times ``certify`` on the ``symbolic`` model
with ``N`` nodes: the conic conjugates, loss lower bounds and sublevel radii of the conic nodes
solved *stacked* (one CVXPY problem per quantity) against *node by node* (the stacked solves
disabled, so every quantity takes the per-node fallback, i.e. the code before the change),
alternately on fresh models in one run, counting the ``run_solver`` calls of one certificate.
Cases: (a) the exact weights and flows, (b) the exact weights with flows x (1 + 1e-2 N(0, 1)),
(c) weights + 1e-3 N(0, 1) without flows (flows built from the weights, radii certified).
Run:  .venv/bin/python benchmarks/bench_conic.py [n ...]  |  [--certify 200]
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
from gtvmodel.certificates import radii as radii_mod
from gtvmodel.certificates import repair as repair_mod
from gtvmodel.certificates import value as value_mod

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


#: The modules whose ``run_solver`` a certificate calls (counted by :func:`counting`).
_SOLVER_USERS = (conic, radii_mod, repair_mod, value_mod)


class counting:
    """Count the ``run_solver`` calls inside the block; ``stacked=False`` disables the stacked
    conic solves (every quantity takes its node-by-node fallback: the code before 6b)."""

    def __init__(self, stacked: bool):
        self.stacked, self.calls, self.saved = stacked, 0, []

    def __enter__(self) -> counting:
        for mod in _SOLVER_USERS:
            orig = mod.run_solver
            self.saved.append((mod, "run_solver", orig))

            def wrapped(*a, _orig=orig, **k):
                self.calls += 1
                return _orig(*a, **k)

            mod.run_solver = wrapped
        if not self.stacked:
            for mod, name in ((conic, "stacked_conjugates"),
                              (radii_mod, "_stacked_sublevel_radii")):
                self.saved.append((mod, name, getattr(mod, name)))
                setattr(mod, name, lambda *a, **k: None)
        return self

    def __exit__(self, *exc) -> None:
        for mod, name, orig in reversed(self.saved):
            setattr(mod, name, orig)


def run_certify(n: int) -> None:
    """Stacked vs node-by-node conic certificate quantities, alternately (module docstring)."""
    cases = {}
    for r in range(REPEATS):
        for stacked in (False, True):
            rng = np.random.default_rng(r)  # the same perturbations for both
            m = build(n, "symbolic", seed=r)
            sol = m.solve_exact(certify=False)
            W, U = np.asarray(sol.weights), np.asarray(sol.flows)
            inputs = {"a": (W, U), "b": (W, U * (1 + 1e-2 * rng.normal(size=U.shape))),
                      "c": (W + 1e-3 * rng.normal(size=W.shape), None)}
            for case, (Wc, Uc) in inputs.items():
                with counting(stacked) as cnt:
                    t0 = time.process_time()
                    cert = m.certify(Wc, Uc)
                    cold = time.process_time() - t0
                    t0 = time.process_time()
                    m.certify(Wc, Uc)
                    warm = time.process_time() - t0
                cases.setdefault((case, stacked), []).append(
                    (cold, warm, cnt.calls, cert.gap, cert.relative_gap))
    print(f"\ncertify on the symbolic model, n = {n} conic nodes, d = 2 (CPU seconds, medians of "
          f"{REPEATS} fresh models; calls: run_solver calls of the cold + warm certificates)")
    print(f"{'case':>4} {'per-node cold':>13} {'stacked cold':>12} {'ratio':>6} "
          f"{'per-node warm':>13} {'stacked warm':>12} {'ratio':>6} {'calls':>11} "
          f"{'rel. gap per-node / stacked':>28}")
    for case in "abc":
        old, new = cases[(case, False)], cases[(case, True)]
        med = [statistics.median(x[j] for x in rows) for rows in (old, new) for j in (0, 1)]
        calls = f"{old[0][2]} / {new[0][2]}"
        gaps = f"{max(x[4] for x in old):.2e} / {max(x[4] for x in new):.2e}"
        print(f"{case:>4} {med[0]:13.3f} {med[2]:12.3f} {med[0] / med[2]:5.1f}x "
              f"{med[1]:13.3f} {med[3]:12.3f} {med[1] / med[3]:5.1f}x {calls:>11} {gaps:>28}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--certify"]:
        for n in [int(a) for a in sys.argv[2:]] or [200]:
            run_certify(n)
    else:
        for n in [int(a) for a in sys.argv[1:]] or [100, 400]:
            run(n)
