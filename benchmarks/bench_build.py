"""Model construction at scale (issue 16 item 1), measured side by side in one run.

100,000 nodes, 1,000,000 edges, m_i = 5 samples per node, d = 10, squared loss:

* before: a ``networkx.Graph`` (``add_edges_from``), ``GTVModel(G, d)`` and one
  ``set_loss(i, SquaredLoss(X_i, y_i))`` per node;
* ``from_arrays`` on the same ``networkx.Graph`` (one ``set_data`` call for the losses);
* after: ``GTVModel.from_edges(n, edges)`` (no ``networkx.Graph``) and one ``set_data`` call
  (target <= 2 s).

Also timed: the first ``structure()`` (the stacked batches every engine reads; the same work
for every construction) and the lazily built ``model.graph`` snapshot of a ``from_edges``
model.  Medians of the repeats, the repeats interleaved; the heap is collected between
constructions.

Run: ``python benchmarks/bench_build.py [--repeats 3] [--nodes 100000] [--edges 1000000]``.
"""

from __future__ import annotations

import argparse
import gc
import time

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import networkx as nx
import numpy as np

import gtvmodel as gm


def instance(n: int, m_edges: int, d: int, m: int, seed: int = 0):
    """Random edges (distinct, no loops) and stacked samples ``(X, y, node_index)``."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, n, int(m_edges * 1.05))
    b = rng.integers(0, n, a.size)
    keep = a != b
    pairs = np.unique(np.sort(np.column_stack([a[keep], b[keep]]), axis=1), axis=0)[:m_edges]
    X = rng.standard_normal((n * m, d))
    centres = rng.standard_normal((2, d))
    owner = np.repeat(np.arange(n), m)
    y = np.einsum("rd,rd->r", X, centres[owner % 2])
    return pairs, X, y, owner


def nx_graph(n: int, pairs: np.ndarray) -> nx.Graph:
    G = nx.Graph()
    G.add_nodes_from(range(n))
    G.add_edges_from(map(tuple, pairs.tolist()))
    return G


def before(n, d, m, pairs, X, y, owner):
    G = nx_graph(n, pairs)
    model = gm.GTVModel(G, d, lam=0.1)
    for i in range(n):
        model.set_loss(i, gm.SquaredLoss(X[m * i:m * (i + 1)], y[m * i:m * (i + 1)]))
    return model


def arrays_on_nx(n, d, m, pairs, X, y, owner):
    return gm.GTVModel.from_arrays(nx_graph(n, pairs), X, y, "squared", node_index=owner,
                                   lam=0.1)


def after(n, d, m, pairs, X, y, owner):
    model = gm.GTVModel.from_edges(n, pairs, dim=d, lam=0.1)
    model.set_data(X, y, "squared", node_index=owner)
    return model


def timed(f, *args):
    t0 = time.perf_counter()
    out = f(*args)
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--edges", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=10)
    ap.add_argument("--samples", type=int, default=5)
    args = ap.parse_args()
    n, d, m = args.nodes, args.dim, args.samples
    data = instance(n, args.edges, d, m)
    after(20, d, m, data[0][:5] % 20, data[1][:100], data[2][:100], data[3][:100] % 20)  # warm
    print(f"n={n}, |E|={len(data[0])}, m_i={m}, d={d}; threads {_pin_threads.THREADS}")
    t_b, t_x, t_a, t_st, t_g = [], [], [], [], []
    W = np.random.default_rng(1).standard_normal((n, d))
    for _ in range(args.repeats):
        # each construction starts from a collected heap (a live networkx graph of 1e6 edges
        # makes every cyclic-GC pass of the next construction slow)
        t, ref = timed(before, n, d, m, *data)
        t_b.append(t)
        p_ref = ref.objective(W)
        del ref
        gc.collect()
        t, other = timed(arrays_on_nx, n, d, m, *data)
        t_x.append(t)
        del other
        gc.collect()
        t, model = timed(after, n, d, m, *data)
        t_a.append(t)
        t, _ = timed(model.structure)
        t_st.append(t)
        t, _ = timed(getattr, model, "graph")  # the lazily built snapshot
        t_g.append(t)
        assert abs(model.objective(W) - p_ref) <= 1e-10 * abs(p_ref)
        del model
        gc.collect()
    med = {k: float(np.median(v)) for k, v in
           {"before": t_b, "nx": t_x, "after": t_a, "st": t_st, "g": t_g}.items()}
    print(f"before: networkx graph + GTVModel + {n} set_loss   {med['before']:7.2f} s")
    print(f"from_arrays on the networkx graph               {med['nx']:7.2f} s   "
          f"{med['before'] / med['nx']:.1f}x faster")
    print(f"after: from_edges + set_data                     {med['after']:7.2f} s   "
          f"{med['before'] / med['after']:.1f}x faster (target <= 2 s)")
    print(f"first structure() (stacked batches, any build)  {med['st']:7.2f} s")
    print(f"model.graph built lazily (from_edges models)     {med['g']:7.2f} s")


if __name__ == "__main__":
    main()
