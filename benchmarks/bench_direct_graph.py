"""The direct solver on graphs with cycles (``solve_direct``'s ``"graph"`` method: levels by
minimum cuts, issue 28 item 4) side by side with ``solve_exact``'s Clarabel route and the
vectorized CVXPY formulation a user writes (the anchor script ``exact_vectorized.py``:
Clarabel at ``tol_gap_abs = tol_gap_rel = 1e-10``, ``tol_feas = 1e-9``).

Instances: a k x k grid (``grid100``, ``grid300``) with two halves of levels ``+1`` and
``-1`` per coordinate (signs alternating with the coordinate), and a two-block SBM of 10,000
nodes (``sbm10k``: expected degree 10 inside a block, 0.25 across; levels ``+1``/``-1``), with
``QuadraticLoss(a_i)``, ``a_i`` the level plus N(0, 0.5^2) noise, at every node or at 70 % of
them (``--dataless 0.3``: the others have no data), ``Norm1``, ``A_e = 1``, ``lambda = 0.5``,
d = 1 and 3.

Per instance, in every repeat and in rotating order: ``gm.solve_direct(model)`` (the whole
certified call on a built model), ``gm.solve_exact(model, method="interior")`` (the Clarabel
route ``solve_exact`` takes without the direct one up to its size rule; on a built model),
optionally ``gm.solve_exact(model, method="first_order")`` (its route above the size rule,
``(n + |E|) d > 100,000``) and the anchor's
``solve_cvxpy`` (build + CVXPY + Clarabel; ``QuadraticLoss(a)`` is its squared loss with ``X_i =
sqrt(d) I``, ``y_i = sqrt(d) a_i``, zero rows at nodes without data).  Reported: median and
min-max seconds, each run's ratio to the direct method's median, and the certified relative gap
(34) of each answer: the direct one with its own flows, ``solve_exact``'s as it reports it,
the anchor's from its weights alone (``gm.certify(model, W)``, once).  The 1-minute load
average is printed with each row.  The direct method runs ``--repeats`` times, the others
``--conic-repeats`` times (default 1) in the first repeats; ``--conic`` picks them.

``--sweep``: the measurement behind ``solve_exact``'s use of the method (:func:`sweep`);
``--max-flows``: the two maximum flows of the kernel side by side (:func:`max_flows`).

Run:  PYTHONPATH=. python benchmarks/bench_direct_graph.py --anchors PATH/anchors
          [--instances grid100,sbm10k,grid300] [--d 1,3] [--dataless 0,0.3] [--repeats 5]
          [--conic solve_exact,anchor] [--conic-repeats 1]
      PYTHONPATH=. python benchmarks/bench_direct_graph.py --sweep   (or --max-flows)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import numpy as np

import gtvmodel as gm
from gtvmodel.kernels import parametric_tv


def grid(k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(edges, side)``: the k x k grid's edges and each node's half (0 or 1)."""
    idx = np.arange(k * k).reshape(k, k)
    edges = np.concatenate([np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1),
                            np.stack([idx[:-1].ravel(), idx[1:].ravel()], 1)])
    return edges, (np.arange(k * k) % k >= k // 2).astype(int)


def sbm(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(edges, block)``: a two-block SBM, expected degree 10 inside, 0.25 across."""
    half = n // 2
    block = (np.arange(n) >= half).astype(int)
    pairs = []
    for a, b, deg in ((0, 0, 10.0), (1, 1, 10.0), (0, 1, 0.25)):
        cnt = int(rng.poisson(deg * half / (2 if a == b else 1)))
        i = rng.integers(0, half, 2 * cnt) + a * half
        j = rng.integers(0, half, 2 * cnt) + b * half
        e = np.stack([np.minimum(i, j), np.maximum(i, j)], 1)[i != j]
        pairs.append(np.unique(e, axis=0)[:cnt])
    return np.unique(np.concatenate(pairs), axis=0), block


def instance(name: str, d: int, dataless: float, lam: float
             ) -> tuple[gm.GTVModel, np.ndarray, np.ndarray, float]:
    """``(model, edges, a, build seconds)``; ``a`` is NaN at nodes without data."""
    rng = np.random.default_rng([d, int(100 * dataless)])
    edges, side = grid(int(name[4:])) if name.startswith("grid") else sbm(10_000, rng)
    n = side.size
    signs = np.where(np.arange(d) % 2 == 0, 1.0, -1.0)
    a = np.where(side[:, None] == 1, 1.0, -1.0) * signs + 0.5 * rng.standard_normal((n, d))
    a[rng.random(n) < dataless] = np.nan
    t0 = time.perf_counter()
    model = gm.GTVModel.from_edges(n, edges, dim=d, penalty=gm.Norm1(), lam=lam)
    model.set_losses({i: gm.QuadraticLoss(a[i]) for i in np.flatnonzero(~np.isnan(a[:, 0]))})
    return model, edges, a, time.perf_counter() - t0


def anchor_solve(anchor, a: np.ndarray, edges: np.ndarray, lam: float
                 ) -> tuple[np.ndarray, float]:
    n, d = a.shape
    has = ~np.isnan(a[:, 0])
    X = np.zeros((n, d, d))
    X[has] = np.sqrt(d) * np.eye(d)
    y = np.where(has[:, None], np.sqrt(d) * np.nan_to_num(a), 0.0)
    opts = dict(tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-9, max_iter=500)
    W, t, _, status, _ = anchor.solve_cvxpy(X, y, edges, lam, 1, "CLARABEL", opts)
    if status != "optimal":
        print(f"    anchor status {status}")
    return W, t


def stats(ts: list[float]) -> str:
    return f"{np.median(ts):8.3f} ({min(ts):.3f}-{max(ts):.3f})" if ts else "-"


def run(name: str, d: int, dataless: float, args: argparse.Namespace, anchor) -> None:
    model, edges, a, build = instance(name, d, dataless, args.lam)
    n = model.num_nodes
    conic = [c for c in args.conic.split(",") if c in ("solve_exact", "first_order", "anchor")]
    gm.solve_direct(model)  # compiles (or loads) the kernels, builds the structure
    T: dict[str, list[float]] = {"direct": [], "solve_exact": [], "first_order": [],
                                 "anchor": []}
    last: dict[str, object] = {}
    runs = ["direct"] + conic
    for k in range(args.repeats):
        now = runs if k < args.conic_repeats else ["direct"]
        for who in now[k % len(now):] + now[:k % len(now)]:
            t0 = time.perf_counter()
            if who == "direct":
                last[who] = gm.solve_direct(model)
            elif who == "solve_exact":
                last[who] = gm.solve_exact(model, method="interior")
            elif who == "first_order":
                last[who] = gm.solve_exact(model, method="first_order")
            else:
                last[who], t = anchor_solve(anchor, a, edges, args.lam)
                T[who].append(t)
                continue
            T[who].append(time.perf_counter() - t0)
    sol = last["direct"]
    print(f"\n{name} n={n} |E|={len(edges)} d={d} data-less {dataless:.0%} lambda={args.lam}: "
          f"model build {build:.2f} s, fused values per coordinate "
          f"{[len(np.unique(sol.weights[:, j])) for j in range(d)]}; load "
          f"{os.getloadavg()[0]:.2f}")
    print(f"  {'method':<12}{'seconds: median (min-max)':<30}{'/ direct':<22}"
          f"{'certified rel. gap':<20}")
    for who in runs:
        ratios = [t / np.median(T["direct"]) for t in T[who]]
        if who == "direct":
            gap = sol.info["certified_relative_gap"]
        elif who in ("solve_exact", "first_order"):
            gap = last[who].info.get("certified_relative_gap", np.nan)
        else:
            gap = gm.certify(model, last[who]).relative_gap
        r = f"{np.median(ratios):.1f} ({min(ratios):.1f}-{max(ratios):.1f})"
        print(f"  {who:<12}{stats(T[who]):<30}{r:<22}{gap:<20.1e}")
    parts = {k: round(v, 3) for k, v in sol.timings.items()}
    print(f"  direct's timings (s): {parts}; load {os.getloadavg()[0]:.2f}")
    for who in conic:
        W = last[who] if who == "anchor" else last[who].weights
        print(f"  max|W_direct - W_{who}| = {np.abs(sol.weights - W).max():.1e}")


def sweep_graph(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """The edges of a ``kind`` graph on about ``n`` nodes (mean degree about 10; a grid: 4)."""
    if kind == "grid":
        return grid(int(round(np.sqrt(n))))[0]
    if kind == "sbm":
        return sbm(n, rng)[0]
    if kind == "random":  # G(n, M) with M = 5 n
        e = rng.integers(0, n, (12 * n, 2))
        e = np.unique(np.sort(e[e[:, 0] != e[:, 1]], axis=1), axis=0)
        return e[rng.permutation(len(e))[: 5 * n]]
    ring = np.arange(n)  # small world: a ring lattice (5 neighbours each side), 10 % rewired
    e = np.concatenate([np.stack([ring, (ring + s) % n], 1) for s in range(1, 6)])
    move = rng.random(len(e)) < 0.1
    e[move, 1] = rng.integers(0, n, move.sum())
    e = e[e[:, 0] != e[:, 1]]
    return np.unique(np.sort(e, axis=1), axis=0)


def sweep(args: argparse.Namespace) -> None:
    """``--sweep``: the direct method against ``solve_exact``'s Clarabel route on grids, SBMs,
    random and small-world graphs of 300 to 3,000 nodes (grids to 10,000), d = 2, data at
    80 % of the nodes, lambda = 0.05, 0.5, 5 (both on a built model: the fastest of three
    direct runs, one Clarabel run between them)."""
    print(f"sweep: seconds, load {os.getloadavg()[0]:.2f}")
    print(f"{'graph':<8}{'n':>7}{'lambda':>8}{'values':>8}{'direct':>9}{'clarabel':>10}"
          f"{'ratio':>8}{'gap direct':>12}")
    for kind in ("grid", "sbm", "random", "smallworld"):
        for n in (300, 1000, 3000) + ((10000,) if kind == "grid" else ()):
            rng = np.random.default_rng(n)
            edges = sweep_graph(kind, n, rng)
            nn = int(edges.max()) + 1
            a = np.where(np.arange(nn)[:, None] % 7 < 3, 1.0, -1.0) + 0.5 * rng.standard_normal(
                (nn, 2))
            for lam in (0.05, 0.5, 5.0):
                model = gm.GTVModel.from_edges(nn, edges, dim=2, penalty=gm.Norm1(), lam=lam)
                model.set_losses({i: gm.QuadraticLoss(a[i])
                                  for i in np.flatnonzero(rng.random(nn) < 0.8)})
                gm.solve_direct(model)
                td, tc = [], []
                for k in range(3):
                    t0 = time.perf_counter()
                    sol = gm.solve_direct(model)
                    td.append(time.perf_counter() - t0)
                    if k == 1:
                        t0 = time.perf_counter()
                        gm.solve_exact(model, method="interior")
                        tc.append(time.perf_counter() - t0)
                print(f"{kind:<8}{nn:>7}{lam:>8}{len(np.unique(sol.weights[:, 0])):>8}"
                      f"{min(td):>9.3f}{min(tc):>10.3f}{min(tc) / min(td):>8.1f}"
                      f"{sol.info['certified_relative_gap']:>12.1e}  load "
                      f"{os.getloadavg()[0]:.2f}", flush=True)


def max_flows(args: argparse.Namespace) -> None:
    """``--max-flows``: the kernel (one coordinate) with the search trees and with Dinic's
    phases on grids, SBMs, random and small-world graphs, lambda = 0.1, 0.5, 2 (the faster
    of three alternating runs)."""
    rng = np.random.default_rng(0)
    cases = [("grid100", grid(100)[0]), ("grid300", grid(300)[0]), ("sbm10k", sbm(10000, rng)[0]),
             ("sbm3k", sweep_graph("sbm", 3000, rng)),
             ("random3k", sweep_graph("random", 3000, rng)),
             ("random10k", sweep_graph("random", 10000, rng)),
             ("smallw3k", sweep_graph("smallworld", 3000, rng)),
             ("smallw10k", sweep_graph("smallworld", 10000, rng))]
    for name, E in cases:
        n = int(E.max()) + 1
        a = np.where(np.arange(n) % 7 < 3, 1.0, -1.0) + 0.5 * rng.standard_normal(n)
        for lam in (0.1, 0.5, 2.0):
            T: dict[str, list[float]] = {"trees": [], "dinic": []}
            for k in range(3):
                for mf in ("trees", "dinic") if k % 2 == 0 else ("dinic", "trees"):
                    t0 = time.perf_counter()
                    x, _ = parametric_tv.tv_graph(n, E, np.full(len(E), lam), np.ones((n, 1)),
                                                  a[:, None], np.zeros(n), max_flow=mf)
                    T[mf].append(time.perf_counter() - t0)
            tt, td = min(T["trees"]), min(T["dinic"])
            print(f"{name:10s} deg {2 * len(E) / n:5.1f} lam {lam:4} trees {tt:7.3f} dinic "
                  f"{td:7.3f} ratio d/t {td / tt:5.2f} values {len(np.unique(x))} load "
                  f"{os.getloadavg()[0]:.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--instances", default="grid100,sbm10k,grid300")
    ap.add_argument("--d", default="1,3")
    ap.add_argument("--dataless", default="0,0.3")
    ap.add_argument("--lam", type=float, default=0.5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--conic", default="solve_exact,anchor",
                    help="the other methods (comma separated): solve_exact, first_order, "
                    "anchor, or none")
    ap.add_argument("--conic-repeats", type=int, default=1)
    ap.add_argument("--anchors", default=os.path.join("..", "shared", "anchors"),
                    help="the folder of exact_vectorized.py")
    ap.add_argument("--sweep", action="store_true", help=sweep.__doc__.split(":")[0])
    ap.add_argument("--max-flows", action="store_true", help="the two maximum flows")
    args = ap.parse_args()
    if args.sweep:
        sweep(args)
        return
    if args.max_flows:
        max_flows(args)
        return
    spec = importlib.util.spec_from_file_location(
        "exact_vectorized", os.path.join(args.anchors, "exact_vectorized.py"))
    anchor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(anchor)
    for name in args.instances.split(","):
        for d in map(int, args.d.split(",")):
            for dataless in map(float, args.dataless.split(",")):
                run(name, d, dataless, args, anchor)


if __name__ == "__main__":
    main()
