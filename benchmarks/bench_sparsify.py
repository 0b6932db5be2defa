"""Benchmark (issue 11, item 4): sparsifiers of a dense two-cluster DCSBM graph, their solve
time against the full graph and their *certified* cost on the full problem.

The graph: a degree-corrected SBM (thesis 002, Section 2.5.2) with two equal clusters, a
two-point degree mass (a fraction ``rho = 0.1`` of each cluster has degree parameter 0.3, the
rest 1), out-in ratio 0.1 and within-cluster edge probability ``p_in``; unit weights.  The
signal: ``beta_i = (1, -1)`` in cluster 1 and ``(-1, 1)`` in cluster 2, ``y_i = beta_i + eps``
with ``eps ~ N(0, 0.5 I)``, node loss ``||w_i - y_i||^2`` (``QuadraticLoss``).  Two penalties:
the l1 fusion penalty (``Norm1``, the thesis' graph fused lasso) and the l2 network Lasso
(``Norm2``), with the same ``lambda``.  Each sparsifier runs at several edge budgets (those
that keep ``A_e`` also "rescaled": every weight times ``A(G)/A(H)``, the full graph's total
weight, which KN's and effective resistance's reweighting achieve by construction); for each
run, in one process side by side with the full solve: edges kept, the sparse exact solve's time
against the full graph's (compile + solve, both ``solve_exact(certify=False)``), the certified
suboptimality on the full problem (``sparsification_cost``: ``gap >= P(W~) - P*``), the true
one ``P(W~) - P*`` (from the full solve), and the MSE to the truth ``mean ||w_i - beta_i||^2``.
A figure (MSE to the truth against edges kept, one line per method, one panel per penalty) is
written to ``benchmarks/figures/sparsify.png``.

Run: ``.venv/bin/python benchmarks/bench_sparsify.py [--nodes 1000] [--p-in 0.1]
[--lam 0.05] [--seed 0]``.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import matplotlib
import networkx as nx
import numpy as np

import gtvmodel as gm
from gtvmodel import graphs

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FIGURE = Path(__file__).resolve().parent / "figures" / "sparsify.png"
TRUTH = np.array([[1.0, -1.0], [-1.0, 1.0]])


def dcsbm(n: int, p_in: float, ratio: float, rho: float, rng: np.random.Generator
          ) -> tuple[nx.Graph, np.ndarray]:
    """Two-cluster DCSBM: ``P(i, j) = theta_i theta_j eta_{g_i g_j}`` (thesis 002 (2.5.2))."""
    g = (np.arange(n) >= n // 2).astype(int)
    theta = np.where(rng.random(n) < rho, 0.3, 1.0)
    i, j = np.triu_indices(n, 1)
    eta = np.where(g[i] == g[j], p_in, ratio * p_in)
    keep = rng.random(len(i)) < theta[i] * theta[j] * eta
    G = nx.Graph()
    G.add_nodes_from(range(n))
    G.add_edges_from(zip(i[keep].tolist(), j[keep].tolist(), strict=True), weight=1.0)
    return G, g


def model_for(G: nx.Graph, y: np.ndarray, penalty: gm.Penalty, lam: float) -> gm.GTVModel:
    model = gm.GTVModel(G, 2, penalty=penalty, lam=lam)
    for i in G.nodes:
        model.set_loss(i, gm.QuadraticLoss(y[i]))
    return model


def runs(n: int, m: int) -> list[tuple[str, dict, bool]]:
    """(method, size argument, rescaled) triples: budgets of about 1, 2, 4 and 8 edges per
    node; the methods that keep ``A_e`` also run rescaled to the full graph's total weight."""
    out: list[tuple[str, dict, bool]] = []
    for per in (1, 2, 4, 8):
        b = min(per * n, m)
        out += [("uniform", {"budget": b}, False), ("uniform", {"budget": b}, True),
                ("union_of_trees", {"budget": max(b, n - 1)}, False),
                ("effective_resistance", {"budget": b}, False), ("kn", {"k": per}, False)]
    for name, kw in (("chain", {}), ("spanning_tree", {"n": 2}), ("random_walk", {"n": 2}),
                     ("mst", {}), ("star", {})):
        out += [(name, kw, False), (name, kw, True)]
    return out


def rescale(H: nx.Graph, G: nx.Graph) -> nx.Graph:
    """``H`` with every weight times ``A(G) / A(H)`` (total weights): the same amount of
    smoothing as the full graph at the same ``lambda`` (what KN's reweighting does by itself)."""
    factor = G.size("weight") / H.size("weight")
    R = H.copy()
    for _, _, d in R.edges(data=True):
        d["weight"] *= factor
    return R


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--p-in", type=float, default=0.1)
    ap.add_argument("--lam", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    G, g = dcsbm(args.nodes, args.p_in, 0.1, 0.1, rng)
    beta = TRUTH[g]
    y = beta + rng.normal(0.0, np.sqrt(0.5), beta.shape)
    print(f"DCSBM: n = {G.number_of_nodes()}, |E| = {G.number_of_edges()}, lambda = {args.lam}, "
          f"components = {nx.number_connected_components(G)}; {platform.node()}, "
          f"threads {_pin_threads.THREADS}")
    rows = []
    for pen in (gm.Norm1(), gm.Norm2()):
        full = model_for(G, y, pen, args.lam)
        t0 = time.perf_counter()
        ref = gm.solve_exact(full, certify=False)
        t_full = time.perf_counter() - t0
        mse_full = float(((ref.weights - beta) ** 2).sum(axis=1).mean())
        print(f"\n{type(pen).__name__}: full solve {t_full:.2f} s, P* = {ref.objective:.6g}, "
              f"MSE to truth {mse_full:.4f}")
        print(f"{'method':<33}{'size':>10}{'edges':>8}{'kept %':>8}{'t_sparse':>10}"
              f"{'t_full':>8}{'speedup':>9}{'cert. gap':>11}{'P(W~)-P*':>11}{'rel.':>9}"
              f"{'MSE':>8}{'||W~-W*||':>10}")
        for method, kw, scaled in runs(G.number_of_nodes(), G.number_of_edges()):
            H = graphs.sparsify(G, method, seed=args.seed, **kw)
            if scaled:
                H, method = rescale(H, G), method + " (rescaled)"
            cost = graphs.sparsification_cost(full, H)
            # the full solve timed again beside each sparse one (same process, same load)
            t0 = time.perf_counter()
            gm.solve_exact(full, certify=False)
            t_full_now = time.perf_counter() - t0
            sub = cost.full_value - ref.objective
            mse = float(((cost.weights - beta) ** 2).sum(axis=1).mean())
            dist = float(np.linalg.norm(cost.weights - ref.weights))
            size = ",".join(f"{k}={v}" for k, v in kw.items()) or "-"
            print(f"{method:<33}{size:>10}{H.number_of_edges():>8}"
                  f"{100 * H.number_of_edges() / G.number_of_edges():>7.1f}%"
                  f"{cost.time_sparse:>10.2f}{t_full_now:>8.2f}"
                  f"{t_full_now / cost.time_sparse:>8.1f}x{cost.gap:>11.4g}{sub:>11.4g}"
                  f"{cost.relative_gap:>9.2g}{mse:>8.4f}{dist:>10.3f}")
            assert cost.gap >= sub - 1e-6 * max(1.0, abs(ref.objective)), "unsound gap"
            rows.append((type(pen).__name__, method, H.number_of_edges(), mse, cost.gap))
        rows.append((type(pen).__name__, "full graph", G.number_of_edges(), mse_full, 0.0))
    plot(rows, args)


def plot(rows: list[tuple], args: argparse.Namespace) -> None:
    fig, axes = plt.subplots(2, 2, figsize=(14, 8.5), sharex=True)
    methods = sorted({r[1] for r in rows} - {"full graph"})
    base = sorted({m.replace(" (rescaled)", "") for m in methods})  # colour per method,
    colours = dict(zip(base, plt.get_cmap("tab10").colors, strict=False))  # dashed: rescaled
    markers = dict(zip(base, "osD^v<>ph*", strict=False))
    for col, pen in enumerate(("Norm1", "Norm2")):
        for row, (idx, label) in enumerate(((3, "MSE to the truth"),
                                            (4, "certified gap on the full problem"))):
            ax = axes[row, col]
            for method in methods:
                pts = sorted((r[2], r[idx]) for r in rows if r[0] == pen and r[1] == method)
                b = method.replace(" (rescaled)", "")
                scaled = b != method
                ax.plot(*zip(*pts, strict=True), marker=markers[b], label=method,
                        color=colours[b], ls="--" if scaled else "-",
                        mfc="none" if scaled else colours[b])
            if row == 0:
                full = [r for r in rows if r[0] == pen and r[1] == "full graph"][0]
                ax.axhline(full[3], color="k", ls="--", lw=1,
                           label=f"full graph ({full[2]} edges)")
                name = "l1 fusion (Norm1)" if pen == "Norm1" else "l2 network Lasso (Norm2)"
                ax.set_title(f"{name}, n = {args.nodes}, lambda = {args.lam}")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_ylabel(label)
            if row == 1:
                ax.set_xlabel("edges kept")
            ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center right")
    fig.tight_layout(rect=(0, 0, 0.85, 1))
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=110)
    print(f"\nfigure: {FIGURE}")


if __name__ == "__main__":
    main()
