"""Algorithm 1 on PyTorch tensors vs the numpy path (issue 16 item 6), side by side in one run.

Per-iteration seconds of ``solve_primal_dual(model)`` (numpy, scipy.sparse) and
``solve_primal_dual(model, backend=gm.TorchBackend(DEVICE))`` (torch tensors, sparse CSR
incidence) on random graphs with ``n`` nodes and ``10 n`` edges, ``d = 10``, squared losses
(5 samples per node),
``Norm2``, fixed steps ``c = 1``, no certificates (``record_every=None``): the iterations alone.
Both paths first run a few iterations on a small model, untimed (CUDA's libraries, numba's
kernel cache); the node factorizations and operators of a run are computed in its set-up
(``timings["setup"]``, not timed here).  Repeats are interleaved (torch, numpy, torch, numpy,
...) and medians reported; the first repeat also checks that the two paths give the same
iterate (max relative difference).

``DEVICE`` is ``cuda`` when a GPU is available, else ``cpu`` (PyTorch's CPU build).  The
issue's GPU targets -- 1e7 nodes / 1e8 edges at <= 0.3 s per iteration in float64 on one
H100-class GPU, and >= 50x the numpy path at 1e6 nodes -- are measured with
``--nodes 1000000,10000000`` on such a machine.

Above ``--numpy-max`` nodes (default 2,000,000) the numpy path is not run (at 1e7 nodes one
numpy iteration takes tens of seconds): those rows time the device alone.  On a CUDA device the
table also gives the peak GPU memory of the run (``torch.cuda.max_memory_allocated``).

``--loss zero`` gives the nodes no data (the zero loss): the model then builds in a fraction of
the time, and the iteration is the edge updates plus a trivial node update.

Run: ``python benchmarks/bench_torch.py [--nodes 10000,100000] [--iters 20] [--repeats 3]
[--device cuda] [--dtype float32] [--numpy-max 2000000] [--loss zero]``.
"""

from __future__ import annotations

import argparse
import time

import _pin_threads  # noqa: F401  (first: pins BLAS/OpenMP threads before numpy/torch load)
import numpy as np

import gtvmodel as gm


def random_model(n: int, edges_per_node: int, d: int, seed: int = 0, loss: str = "squared",
                 samples: int = 5) -> gm.GTVModel:
    """``n`` nodes, about ``edges_per_node * n`` distinct random edges, ``Norm2``, ``lambda =
    0.1`` (built from arrays); ``loss="squared"``: squared losses with ``samples`` samples per
    node from two centres; ``loss="zero"``: nodes without data (the zero loss)."""
    rng = np.random.default_rng(seed)
    m = int(edges_per_node * n * 1.02)
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = a != b
    lo, hi = np.minimum(a[keep], b[keep]), np.maximum(a[keep], b[keep])
    key = np.sort(lo * np.int64(n) + hi)  # distinct pairs (1-D keys: fast at 1e8 edges)
    key = key[np.concatenate([[True], key[1:] != key[:-1]])]
    key = key[rng.permutation(len(key))[:edges_per_node * n]]
    pairs = np.column_stack([key // n, key % n])
    model = gm.GTVModel.from_edges(n, pairs, dim=d, penalty=gm.Norm2(), lam=0.1)
    if loss == "zero":
        return model
    X = rng.standard_normal((n, samples, d))
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
    ap.add_argument("--loss", default="squared", choices=("squared", "zero"),
                    help="the nodes' losses (zero: nodes without data)")
    ap.add_argument("--numpy-max", type=float, default=2e6,
                    help="largest n at which the numpy path runs too")
    args = ap.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "CPU"
    print(f"torch {torch.__version__}, device {device} ({name}), dtype {args.dtype}, "
          f"torch threads {torch.get_num_threads()}, {args.loss} losses, iterations per run "
          f"{args.iters}, "
          f"medians of {args.repeats} interleaved repeats")
    cuda = device.startswith("cuda")
    print(f"{'n':>9} {'|E|':>10} {'numpy s/it':>11} {'(node+edge)':>15} {'torch s/it':>11} "
          f"{'(node+edge)':>15} {'numpy/torch':>12} {'max rel diff':>13} {'build s':>8} "
          f"{'GPU peak GiB':>12}")
    small = random_model(1000, args.edges_per_node, args.dim, seed=1)
    per_iteration(small, 3, backend=gm.TorchBackend(device, args.dtype))  # warm-up, untimed
    per_iteration(small, 3)
    for n in (int(float(s)) for s in args.nodes.split(",")):
        t0 = time.perf_counter()
        model = random_model(n, args.edges_per_node, args.dim, loss=args.loss)
        model.structure()
        build = time.perf_counter() - t0
        with_numpy = n <= args.numpy_max
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        times: dict[str, list[tuple[float, float, float]]] = {"numpy": [], "torch": []}
        diff = float("nan")
        for r in range(args.repeats):
            tt, b = per_iteration(model, args.iters,
                                  backend=gm.TorchBackend(device, args.dtype))
            times["torch"].append(tt)
            if with_numpy:
                tn, a = per_iteration(model, args.iters)
                times["numpy"].append(tn)
                if r == 0:
                    diff = float(np.abs(a.weights - b.weights).max()
                                 / max(1.0, np.abs(a.weights).max()))
                del a
            del b
        mt = np.median(np.array(times["torch"]), axis=0)
        mn = np.median(np.array(times["numpy"]), axis=0) if with_numpy else np.full(3, np.nan)
        peak = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else float("nan")
        print(f"{n:>9} {model.num_edges:>10} {mn[0]:>11.4f} {mn[1]:>7.4f}+{mn[2]:<7.4f} "
              f"{mt[0]:>11.4f} {mt[1]:>7.4f}+{mt[2]:<7.4f} {mn[0] / mt[0]:>11.2f}x "
              f"{diff:>13.1e} {build:>8.1f} {peak:>12.2f}", flush=True)
        del model

if __name__ == "__main__":
    main()
