"""Cost of ``solve_exact()``'s tolerance ladder (issue 17), against one solve at the level it
accepts.

For each problem, interleaved in every repeat: (1) the default ``solve_exact()`` (one Clarabel
run aiming at 1e-13 that may stop at an iterate meeting a looser level once its residuals
stall, ``_solver._StallRule``); (2) the ladder as it was before issue 17, replayed: a plain run
at each level in turn (1e-13, then 1e-10, ...) until one succeeds; (3) a single run at the
level (1) accepted, with its options passed explicitly.  Also Clarabel's interior-point
iterations of (1)/(3)/(2) (last repeat; deterministic, unlike times on a busy machine).  Times
are Clarabel's own solve times (the CVXPY problem is compiled before timing;
``certify=False``); BLAS threads and Clarabel's own (faer, rayon) threads pinned to one
(``_pin_threads``).  Reported: medians, and the max weight
difference between (1) and (3).

Problems: SBM with two clusters (d = 5, squared loss with 5 samples per node, noise 0.1,
``Norm2``; the benchmark problem of bench_compile.py for n = 1000) at lambda 0.01, 0.1, 1, and
a 2-D grid with two halves of different weights.

Run:  python benchmarks/bench_ladder.py [--sizes 1000] [--grid 30] [--lams 0.01 0.1 1]
          [--grid-lams 0.1 1] [--repeats 2] [--oracle]
(prefix ``PYTHONPATH=.`` to measure this tree's package rather than the installed checkout's;
the header prints the one measured)

``--oracle``: the default's weights against :func:`newton_oracle` (Newton's method in numpy on
the smooth objective, where no edge is fused).

``--skip-old``: default and single only (the old ladder is the slowest column).

Issue 17's growth table: ``--sizes 1000 --grid 32 --repeats 2`` and ``--sizes 2000 5000
--grid 71 100 --repeats 1`` (the 5000-node SBM takes about 10 min per solve on a 2-core
machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import warnings

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import networkx as nx
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import gtvmodel as gm
from gtvmodel import _solver, datasets
from gtvmodel.duality.compile import compile_primal
from gtvmodel.solve.exact import DEFAULT_SOLVER_OPTIONS, FALLBACK_SOLVER_OPTIONS

LEVELS = [dict(DEFAULT_SOLVER_OPTIONS["CLARABEL"])]
for _level in FALLBACK_SOLVER_OPTIONS["CLARABEL"]:
    LEVELS.append({**LEVELS[-1], **_level})
WEIGHTS = [[1, 2, 3, 4, 5], [-1, 2, -3, 4, -5]]


def sbm(n: int) -> datasets.NetworkedData:
    return datasets.sbm(sizes=(n // 2, n // 2), p_in=0.02 * 1000 / n, p_out=0.0005 * 1000 / n,
                        m=5, cluster_weights=WEIGHTS, sigma=0.1, seed=1)


def grid(k: int) -> datasets.NetworkedData:
    G = nx.convert_node_labels_to_integers(nx.grid_2d_graph(k, k))
    clusters = (np.arange(k * k) % k >= k // 2).astype(int)
    return datasets.linear_data(G, np.array(WEIGHTS, dtype=float)[clusters], clusters, m=5,
                                sigma=0.1,
                                seed=1)


ITERATIONS = [0]  # interior-point iterations of every Clarabel run since the last reset


def _counting(solve_via_data):  # noqa: ANN001, ANN202
    def wrapped(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        out = solve_via_data(self, *args, **kwargs)
        ITERATIONS[0] += int(out.iterations)
        return out
    return wrapped


# count the iterations of the plain Clarabel runs and of the ladder's first runs
_solver.CLARABEL.solve_via_data = _counting(_solver.CLARABEL.solve_via_data)
_solver._RungClarabel.solve_via_data = _counting(_solver._RungClarabel.solve_via_data)


def iterations(fn, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
    """``fn(*args, **kwargs)`` and the Clarabel iterations it took."""
    ITERATIONS[0] = 0
    out = fn(*args, **kwargs)
    return out, ITERATIONS[0]


def solver_time(model: gm.GTVModel) -> float:
    stats = model.cache.get("primal").problem.solver_stats
    return float(stats.solve_time) if stats and stats.solve_time is not None else 0.0


def old_ladder(model: gm.GTVModel) -> float:
    """The pre-issue-17 ladder: a fresh plain run per level until one succeeds."""
    spent = 0.0
    for level in LEVELS:
        try:
            sol = model.solve_exact(certify=False, **level)
            return spent + sol.timings["solve"]
        except gm.SolverError:
            spent += solver_time(model)
    raise RuntimeError("no level succeeded")


def newton_oracle(data: datasets.NetworkedData, lam: float, nodes: list, W0: np.ndarray
                  ) -> tuple[np.ndarray | None, float]:
    """An oracle independent of CVXPY and of the package: Newton's method (numpy/scipy, sparse
    Hessian, backtracking) on ``sum_i (1/m_i)||y_i - X_i w_i||^2 + lam sum_e A_e ||w_a - w_b||``
    from ``W0`` (rows in ``nodes`` order).  The objective is smooth where no edge is fused;
    returns ``(W*, min_e ||w_a - w_b||)``, ``W*`` None where an edge is fused (below 1e-6) or
    the gradient does not reach 1e-9."""
    idx = {v: i for i, v in enumerate(nodes)}
    n, d = W0.shape
    a = np.array([idx[u] for u, _ in data.graph.edges])
    b = np.array([idx[v] for _, v in data.graph.edges])
    A = np.array([data.graph.edges[e].get("weight", 1.0) for e in data.graph.edges]) * lam
    E = len(a)
    D = sp.csr_array((np.r_[np.ones(E), -np.ones(E)], (np.r_[np.arange(E), np.arange(E)],
                                                        np.r_[a, b])), shape=(E, n))
    Dk = sp.kron(D, sp.eye(d)).tocsr()
    Q, q = np.zeros((n, d, d)), np.zeros((n, d))
    for v, X in data.X.items():
        Q[idx[v]], q[idx[v]] = X.T @ X / len(X), X.T @ data.y[v] / len(X)
    HL = sp.block_diag(list(2 * Q), format="csr")

    def value(W: np.ndarray) -> float:
        return float(np.einsum("nij,ni,nj->", Q, W, W) - 2 * (q * W).sum()
                     + (A * np.linalg.norm(W[a] - W[b], axis=1)).sum())

    W = W0.copy()
    for _ in range(30):
        Z = W[a] - W[b]
        r = np.linalg.norm(Z, axis=1)
        if r.min() < 1e-6:
            return None, float(r.min())
        U = Z / r[:, None]
        g = 2 * np.einsum("nij,nj->ni", Q, W) - 2 * q + D.T @ (A[:, None] * U)
        if np.abs(g).max() < 1e-12:
            break
        He = (A / r)[:, None, None] * (np.eye(d)[None] - U[:, :, None] * U[:, None, :])
        H = (HL + Dk.T @ sp.block_diag(list(He), format="csr") @ Dk).tocsc()
        step = spl.spsolve(H, -g.ravel()).reshape(n, d)
        t, f0 = 1.0, value(W)
        while value(W + t * step) > f0 + 1e-13 * abs(f0) and t > 1e-8:  # rounding let be
            t /= 2
        W = W + t * step
    Z = W[a] - W[b]
    r = np.linalg.norm(Z, axis=1)
    g = 2 * np.einsum("nij,nj->ni", Q, W) - 2 * q + D.T @ (A[:, None] * Z / r[:, None])
    return (W if np.abs(g).max() < 1e-9 else None), float(r.min())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000])
    parser.add_argument("--grid", type=int, nargs="*", default=[30])
    parser.add_argument("--lams", type=float, nargs="*", default=[0.01, 0.1, 1.0],
                        help="lambda of the SBMs")
    parser.add_argument("--grid-lams", type=float, nargs="*", default=[0.1, 1.0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-old", action="store_true",
                        help="do not replay the pre-issue-17 ladder (its column reads nan)")
    parser.add_argument("--oracle", action="store_true",
                        help="also the default's max weight error against newton_oracle")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    problems = [(f"SBM n={n}", sbm, n, lam) for n in args.sizes for lam in args.lams]
    problems += [(f"grid {k}x{k}", grid, k, lam) for k in args.grid for lam in args.grid_lams]
    print(f"threads: {_pin_threads.THREADS}; medians of {args.repeats} interleaved repeats; "
          "Clarabel solve seconds")
    # the package measured: a script runs with benchmarks/ first on sys.path, so without
    # PYTHONPATH it is the installed (editable) checkout's, not necessarily this tree's
    print(f"gtvmodel: {os.path.dirname(gm.__file__)}")
    print(f"{'problem':<16}{'lam':>6}{'|E|':>7}{'accepted':>10}{'default':>9}{'single':>9}"
          f"{'old':>9}{'default/single':>16}{'old/single':>12}{'max dW':>10}"
          f"{'iterations':>14}")
    for name, make, size, lam in problems:
        data = make(size)
        model = data.model(lam=lam)
        compile_primal(model)
        new, single, old = [], [], []
        for _ in range(args.repeats):
            sol, it_new = iterations(model.solve_exact, certify=False)
            new.append(sol.timings["solve"])
            accepted = sol.info["tolerances"]
            ref, it_single = iterations(model.solve_exact, certify=False, **accepted)
            single.append(ref.timings["solve"])
            t_old, it_old = iterations(old_ladder, model) if not args.skip_old \
                else (float("nan"), "-")
            old.append(t_old)
        dw = float(np.abs(sol.weights - ref.weights).max())
        n_, s_, o_ = (statistics.median(x) for x in (new, single, old))
        extra = ""
        if args.oracle:
            W_star, gap_min = newton_oracle(data, lam, model.nodes, sol.weights)
            extra = (f"   oracle: max |W - W*| {np.abs(sol.weights - W_star).max():.1e}"
                     if W_star is not None else f"   oracle: none (min ||w_a - w_b|| "
                                                f"{gap_min:.0e})")
        print(f"{name:<16}{lam:>6g}{data.graph.number_of_edges():>7}"
              f"{accepted['tol_gap_rel']:>10.0e}{n_:>9.2f}{s_:>9.2f}{o_:>9.2f}"
              f"{n_ / s_:>16.2f}{o_ / s_:>12.2f}{dw:>10.1e}"
              f"{f'{it_new}/{it_single}/{it_old}':>14}{extra}", flush=True)


if __name__ == "__main__":
    main()
