"""The tree/path dynamic program ``gtvmodel.kernels.tv._tv_forest`` of two checkouts side by
side in one process (issue 29 item 8: the kernel split into inlined helpers must keep its
speed and its bits).

Both checkouts' ``gtvmodel/kernels/tv.py`` are loaded as standalone modules (the old one
extracted without touching git state, ``git archive <rev> gtvmodel | tar -x -C DIR``) and
called on the same arrays, in alternating order per repeat, each call timed in CPU time of
the process (``time.process_time``: the scheduler's slices given to other processes left
out).  Cases, ``n`` nodes, ``d = 1`` (the data of benchmarks/bench_direct.py's tables):

- ``path dp``: the chain of ``bench_direct.chain`` (100 segments plus noise, ``lambda = 4``),
  the path algorithm (deque of breakpoints; Condat's algorithm would otherwise take it);
- ``path heap``: the same path by the tree algorithm (leftist heaps);
- ``random tree``: the random recursive tree of ``bench_direct.random_tree`` (``A_e ~ U(0.5,
  2)``, ``lambda = 0.5``, ``a ~ N(0, 1)``) with ``eta = 0.1``.

Printed per case: the medians of both, the per-repeat ratio new / old (median, min-max),
whether the outputs are bitwise identical, and the 1-minute load average.

Run:  python benchmarks/bench_tv_forest.py --old DIR [--new DIR] [--n 100000] [--repeats 21]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import numpy as np


def load(root: str, name: str):  # noqa: ANN201
    """``<root>/gtvmodel/kernels/tv.py`` as the module ``name`` (it imports numba, numpy)."""
    spec = importlib.util.spec_from_file_location(name, Path(root) / "gtvmodel/kernels/tv.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # (numba's cache rebuilds the functions' environment by name)
    spec.loader.exec_module(mod)
    return mod


def cases(n: int) -> dict[str, tuple]:
    """Each case's arguments of ``_tv_forest`` (``order, parent, t, q, p, eta, heap``)."""
    rng = np.random.default_rng(0)
    seg = np.arange(n) * 100 // n
    y = (3.0 * rng.standard_normal(100))[seg] + 0.5 * rng.standard_normal(n)
    order, parent = np.arange(n, dtype=np.int64), np.arange(-1, n - 1, dtype=np.int64)
    t = np.full(n, 4.0)
    t[0] = 0.0
    path = (order, parent, t, np.ones((n, 1)), y[:, None].copy(), np.zeros(n))
    rng = np.random.default_rng(1)
    par = (rng.random(n - 1) * np.arange(1, n)).astype(np.int64)
    A = rng.uniform(0.5, 2.0, n - 1)
    a = rng.normal(size=n)
    tparent = np.concatenate([[-1], par])  # node i > 0 joins par[i - 1] < i: order = 0..n-1
    tt = np.concatenate([[0.0], 0.5 * A])
    tree = (order, tparent, tt, np.ones((n, 1)), a[:, None].copy(), np.full(n, 0.1))
    return {"path dp": path + (False,), "path heap": path + (True,),
            "random tree": tree + (True,)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--repeats", type=int, default=21)
    args = ap.parse_args()
    old, new = load(args.old, "tv_old"), load(args.new, "tv_new")
    print(f"n = {args.n}, {args.repeats} interleaved repeats, CPU ms; load "
          f"{os.getloadavg()[0]:.2f}")
    for name, a in cases(args.n).items():
        xo, xn = old._tv_forest(*a), new._tv_forest(*a)  # (compiles or loads the cache)
        same = xo.shape == xn.shape and xo.tobytes() == xn.tobytes()
        T: dict[str, list[float]] = {"old": [], "new": []}
        for r in range(args.repeats):
            for key in (("old", "new") if r % 2 == 0 else ("new", "old")):
                f = old._tv_forest if key == "old" else new._tv_forest
                c0 = time.process_time()
                f(*a)
                T[key].append(time.process_time() - c0)
        o, w = np.asarray(T["old"]) * 1e3, np.asarray(T["new"]) * 1e3
        r = w / o
        print(f"  {name:<12} old {np.median(o):7.2f}  new {np.median(w):7.2f}  new/old "
              f"{np.median(r):.3f} ({r.min():.3f}-{r.max():.3f})  bitwise identical: {same}")
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
