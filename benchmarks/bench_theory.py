"""Benchmark: ``check_well_connected`` on a 1,000-node cluster with 10,000 intra-cluster edges.

The model: cluster C1 = G(n=1000, m=10000) (unit weights), cluster C2 = 50 nodes, 40 boundary
edges of weight 0.01; squared losses (m_i = 5, d = 2, noise sigma = 0.1).  Timed, median of
repeats, in one run: the whole check (constants + max-flow margin + lambda_min) with three
networkx max-flow algorithms, at a lambda where the condition holds and at one where it fails
(the i0 search then has to prove that no i0 works), with the number of max-flows per check (both
clusters, margin and lambda_min).  Run: ``.venv/bin/python
benchmarks/bench_theory.py [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import networkx as nx
import numpy as np
from networkx.algorithms import flow as nxflow

import gtvmodel as gm
from gtvmodel import theory as th


def build(seed: int = 0) -> tuple[gm.GTVModel, list[list[int]]]:
    rng = np.random.default_rng(seed)
    G = nx.gnm_random_graph(1000, 10_000, seed=seed)
    assert nx.is_connected(G)
    H = nx.gnp_random_graph(50, 0.3, seed=seed + 1)
    G = nx.disjoint_union(G, H)
    nx.set_edge_attributes(G, 1.0, "weight")
    for _ in range(40):
        G.add_edge(int(rng.integers(1000)), int(1000 + rng.integers(50)), weight=0.01)
    model = gm.GTVModel(G, 2)
    truth = np.array([[2.0, 2.0], [-2.0, 2.0]])
    for i in G.nodes:
        X = rng.standard_normal((5, 2))
        model.set_loss(i, gm.SquaredLoss(X, X @ truth[int(i >= 1000)]
                                         + 0.1 * rng.standard_normal(5)))
    return model, [list(range(1000)), list(range(1000, 1050))]


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


class CountFlows:
    """Counts the max-flow calls of the theory module (one per min-cut)."""

    def __init__(self) -> None:
        self.calls = 0
        self._orig = th.cuts.CutNetwork.min_cut
        counter = self

        def min_cut(net, sink):
            counter.calls += 1
            return counter._orig(net, sink)

        th.cuts.CutNetwork.min_cut = min_cut


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    model, part = build()
    n_intra = sum(1 for a, b in model.graph.edges if a < 1000 and b < 1000)
    print(f"cluster C1: 1000 nodes, {n_intra} intra-cluster edges; C2: 50 nodes; "
          f"|E| = {model.num_edges}")
    pk = th.partition.normalize_partition(model, part)
    t_const, k_ = timed(lambda: th.constants.theorem2_constants(model, pk), args.repeats)
    print(f"constants (alpha, beta, w_bar, delta, |dC|): {t_const:.3f} s")
    ref = th.check_well_connected(model, part, 1.0)[0]
    lam_min = ref.lam_min
    print(f"lambda_min(C1) = {lam_min:.6g}, margin at lam=1: {ref.margin:.4f}")
    counter = CountFlows()
    rows = []
    for label, lam in (("holds (lam = 2 lam_min)", 2 * lam_min),
                       ("fails (lam = lam_min / 2)", lam_min / 2)):
        base = None
        for func in (nxflow.preflow_push, nxflow.boykov_kolmogorov, nxflow.edmonds_karp):
            counter.calls = 0
            t, reps = timed(lambda f=func, la=lam: th.check_well_connected(
                model, part, la, flow_func=f), args.repeats)
            r = reps[0]
            base = base or t
            rows.append((label, func.__name__, t, t / base, r.success, r.margin, r.lam_min,
                          counter.calls // args.repeats))
    print(f"\n{'case':28s} {'flow_func':20s} {'median s':>9s} {'ratio':>6s} {'holds':>6s} "
          f"{'margin':>9s} {'lam_min':>10s} {'max-flows':>9s}")
    for label, func, t, ratio, holds, margin, lm, calls in rows:
        print(f"{label:28s} {func:20s} {t:9.3f} {ratio:6.2f} {holds!s:>6s} {margin:9.4f} "
              f"{lm:10.4g} {calls:9d}")
    for block in (rows[:3], rows[3:]):
        assert len({(round(r[5], 9), round(r[6], 9), r[4]) for r in block}) == 1, \
            "flow algorithms disagree"


if __name__ == "__main__":
    main()
