"""Algorithm 1 on PyTorch tensors vs the numpy path (issue 16 item 6), side by side in one run.

Per-iteration seconds of ``solve_primal_dual(model)`` (numpy, scipy.sparse) and
``solve_primal_dual(model, device=DEVICE)`` (torch tensors, sparse CSR incidence) on random
graphs with ``n`` nodes and ``10 n`` edges, ``d = 10``, squared losses (5 samples per node),
``Norm2``, fixed steps ``c = 1``, no certificates (``record_every=None``): the iterations alone.
Repeats are interleaved (numpy, torch, numpy, torch, ...) and medians reported; the first
repeat also checks that the two paths give the same iterate (max relative difference).

``DEVICE`` is ``cuda`` when a GPU is available, else ``cpu`` (PyTorch's CPU build).  The
issue's GPU targets -- 1e7 nodes / 1e8 edges at <= 0.3 s per iteration in float64 on one
H100-class GPU, and >= 50x the numpy path at 1e6 nodes -- are measured with
``--nodes 1000000,10000000`` on such a machine.

Run: ``python benchmarks/bench_torch.py [--nodes 10000,100000] [--iters 20] [--repeats 3]
[--device cuda] [--dtype float32]``.
"""

from __future__ import annotations

import argparse
import time

import _pin_threads  # noqa: F401  (first: pins BLAS/OpenMP threads before numpy/torch load)
import numpy as np

import gtvmodel as gm


def random_model(n: int, edges_per_node: int, d: int, seed: int = 0) -> gm.GTVModel:
    """``n`` nodes, about ``edges_per_node * n`` distinct random edges, squared losses with 5
    samples per node from two centres, ``Norm2``, ``lambda = 0.1`` (built from arrays)."""
    rng = np.random.default_rng(seed)
    m = int(edges_per_node * n * 1.02)
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = a != b
    pairs = np.unique(np.sort(np.column_stack([a[keep], b[keep]]), axis=1), axis=0)
    pairs = pairs[rng.permutation(len(pairs))[:edges_per_node * n]]
    model = gm.GTVModel.from_edges(n, pairs, dim=d, penalty=gm.Norm2(), lam=0.1)
    X = rng.standard_normal((n, 5, d))
    centres = rng.standard_normal((2, d))[np.arange(n) % 2]
    model.set_data(X, np.einsum("kmd,kd->km", X, centres), "squared")
    return model


def per_iteration(model: gm.GTVModel, iters: int, **kw
                  ) -> tuple[tuple[float, float, float], gm.PrimalDualResult]:
    """Seconds per iteration (total, node updates, edge updates) of one run without
    certificates."""
    res = gm.solve_primal_dual(model, max_iter=iters, tol=0.0, record_every=None, step=1.0,
                               **kw)
    t = res.timings
    node, edge = t["node_updates"] / iters, t["edge_updates"] / iters
    return (node + edge, node, edge), res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="10000,100000")
    ap.add_argument("--edges-per-node", type=int, default=10)
    ap.add_argument("--dim", type=int, default=10)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    ap.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    args = ap.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "CPU"
    print(f"torch {torch.__version__}, device {device} ({name}), dtype {args.dtype}, "
          f"torch threads {torch.get_num_threads()}, iterations per run {args.iters}, "
          f"medians of {args.repeats} interleaved repeats")
    print(f"{'n':>9} {'|E|':>10} {'numpy s/it':>11} {'(node+edge)':>15} {'torch s/it':>11} "
          f"{'(node+edge)':>15} {'numpy/torch':>12} {'max rel diff':>13} {'build s':>8}")
    for n in (int(float(s)) for s in args.nodes.split(",")):
        t0 = time.perf_counter()
        model = random_model(n, args.edges_per_node, args.dim)
        model.structure()
        build = time.perf_counter() - t0
        times: dict[str, list[tuple[float, float, float]]] = {"numpy": [], "torch": []}
        diff = float("nan")
        for r in range(args.repeats):
            tn, a = per_iteration(model, args.iters)
            tt, b = per_iteration(model, args.iters, device=device, dtype=args.dtype)
            times["numpy"].append(tn)
            times["torch"].append(tt)
            if r == 0:
                diff = float(np.abs(a.weights - b.weights).max()
                             / max(1.0, np.abs(a.weights).max()))
        mn, mt = (np.median(np.array(times[k]), axis=0) for k in ("numpy", "torch"))
        print(f"{n:>9} {model.num_edges:>10} {mn[0]:>11.4f} {mn[1]:>7.4f}+{mn[2]:<7.4f} "
              f"{mt[0]:>11.4f} {mt[1]:>7.4f}+{mt[2]:<7.4f} {mn[0] / mt[0]:>11.2f}x "
              f"{diff:>13.1e} {build:>8.1f}")


if __name__ == "__main__":
    main()
