"""``ModelDeclaration.constraint_violations`` (run in every certificate) from the stacked
constraints of ``structure()`` vs the per-node loop over ``Constraint.violation`` it replaced
(issue 9, deliverable 6a).

Model: a path graph with ``n`` nodes, d = 5, every node with a ``Box(-1, 1)``, plus (second
row) a ``NormBall(1, p=2)`` on every other node; weights standard normal.  Times are the best of
``--repeats`` calls (the structure is built once before timing).

Run:  python benchmarks/bench_violations.py [--nodes 20000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import networkx as nx
import numpy as np

import gtvmodel as gm


def per_constraint(model: gm.GTVModel, W: np.ndarray) -> np.ndarray:
    """The loop that ``constraint_violations`` replaced."""
    return np.array([max((c.violation(W[i]) for c in model.constraints(i)), default=0.0)
                     for i in range(model.num_nodes)])


def best_of(f, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n, d = args.nodes, 5
    W = np.random.default_rng(0).normal(size=(n, d))
    for balls in (False, True):
        model = gm.GTVModel(nx.path_graph(n), d)
        for i in range(n):
            model.add_constraint(i, gm.Box(-1.0, 1.0))
            if balls and i % 2 == 0:
                model.add_constraint(i, gm.NormBall(1.0, p=2))
        model.structure()
        assert np.array_equal(model.constraint_violations(W), per_constraint(model, W))
        old = best_of(lambda m=model: per_constraint(m, W), args.repeats)
        new = best_of(lambda m=model: m.constraint_violations(W), args.repeats)
        what = "Box on every node" + (" + NormBall(p=2) on every other" if balls else "")
        print(f"n = {n}, d = {d}, {what}: per-constraint loop {old * 1e3:.1f} ms, stacked "
              f"{new * 1e3:.2f} ms ({old / new:.0f}x); identical values")


if __name__ == "__main__":
    main()
