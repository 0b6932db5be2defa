"""Benchmarks of Algorithm 1 (``solve_primal_dual``), measured side by side in one run.

(a) paper 001 VI-A SBM (200 nodes, d = 2, squared loss, Norm2): seconds per iteration of the
    package's fast path vs a plain numpy loop of Algorithm 1 written here (target <= 1.2x);
(b) the CVXPY prox path vs the fast path per iteration (target <= 10x) and what dominates it;
(c) rebuilding one CVXPY problem per node per iteration (SnapVX style) vs (b) (a few
    iterations only);
(d) iterations to a certified relative gap of 1e-6: default step rule vs the paper's c = 1 on
    paper 001 VI-A (rho = 1 and 0.6) and paper 000's setting (target >= 10x fewer);
(e) scale: 100,000 nodes, ~1,000,000 edges, d = 10, squared loss, Norm2: seconds per iteration
    and peak memory (target <= 1 s/iteration, <= 4 GiB); skip with ``--skip-scale``;
(f) losses without a closed-form prox (absolute, hinge; l1-regularized, box- or ball-constrained
    squared, Huber, hinge, absolute; issue 16 item 3) on (a)'s graph and
    samples: the batched dual active-set prox vs the CVXPY path, each per iteration as a ratio
    to the squared-loss fast path of (a) (target <= 5x); ``--only-f`` runs (f) alone.

Run: ``python benchmarks/bench_primal_dual.py [--repeats 5] [--skip-scale]``.  Medians of the
repeats are reported.
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import cvxpy as cp
import networkx as nx
import numpy as np

import gtvmodel as gm
from gtvmodel.datasets import paper000_sbm, sbm
from gtvmodel.primal_dual.prox import CvxpyProxGroup, NodeUpdates


# ---------------------------------------------------------------- a plain Algorithm 1
def plain_algorithm1(model: gm.GTVModel, c: float, iters: int) -> tuple[np.ndarray, float]:
    """Algorithm 1 for squared losses and Norm2 as one would write it by hand (numpy/scipy):
    precomputed (I + 2 tau Q)^-1 per node, clipping dual update.  Returns (W, s/iteration)."""
    n, d = model.num_nodes, model.dim
    D = model.incidence
    DT = D.T.tocsr()
    deg = np.maximum(model.degrees, 1)
    tau, sigma = c / deg, 0.5 / c
    Minv = np.empty((n, d, d))
    b = np.zeros((n, d))
    for i in range(n):
        loss = model.loss_at(i)
        Q = loss.X.T @ loss.X / loss.m
        q = loss.X.T @ loss.y / loss.m
        Minv[i] = np.linalg.inv(np.eye(d) + 2 * tau[i] * Q)
        b[i] = 2 * tau[i] * q
    lamA = model.lam * model.edge_weights
    W = np.zeros((n, d))
    U = np.zeros((model.num_edges, d))
    t0 = time.perf_counter()
    for _ in range(iters):
        V = W - tau[:, None] * (DT @ U)
        Wn = np.einsum("kij,kj->ki", Minv, V + b)
        Un = U + sigma * (2.0 * (D @ Wn) - D @ W)
        nrm = np.sqrt(np.einsum("ij,ij->i", Un, Un))
        Un *= np.minimum(1.0, lamA / np.maximum(nrm, 1e-300))[:, None]
        W, U = Wn, Un
    return W, (time.perf_counter() - t0) / iters


def per_iteration(model: gm.GTVModel, iters: int, **kw) -> tuple[float, gm.PrimalDualResult]:
    """Seconds per iteration of solve_primal_dual, excluding setup (no certificates)."""
    r = model.solve_primal_dual(max_iter=iters, tol=0, record_every=None, **kw)
    t = r.timings
    return (t["total"] - t["setup"] - t["certificate"]) / iters, r


def snapvx_iteration(model: gm.GTVModel, W: np.ndarray, U: np.ndarray, c: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    """One Algorithm-1 iteration that builds and solves a fresh CVXPY problem per node."""
    deg = np.maximum(model.degrees, 1)
    tau = c / deg
    V = W - tau[:, None] * (model.incidence.T @ U)
    Wn = np.empty_like(W)
    for i in range(model.num_nodes):
        z = cp.Variable(model.dim)
        obj = model.loss_at(i).expression(z) + cp.sum_squares(z - V[i]) / (2 * tau[i])
        cp.Problem(cp.Minimize(obj)).solve(solver="CLARABEL")
        Wn[i] = z.value
    D = model.incidence
    Un = model.penalty.dual_update(U + (0.5 / c) * (2 * (D @ Wn) - D @ W), 0.5 / c,
                                   model.lam * model.edge_weights)
    return Wn, Un


def iterations_to_gap(model: gm.GTVModel, step, max_iter: int, every: int) -> tuple[int, float]:
    r = model.solve_primal_dual(max_iter=max_iter, tol=1e-6, step=step, record_every=every,
                                certificate_budget=None)
    return (r.iterations if r.status == "converged" else -1), r.timings["total"]


# ---------------------------------------------------------------- scale instance
def scale_model(n: int, m_edges: int, d: int, seed: int = 0) -> gm.GTVModel:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, n, int(m_edges * 1.02))
    b = rng.integers(0, n, a.size)
    keep = a != b
    pairs = np.unique(np.sort(np.column_stack([a[keep], b[keep]]), axis=1), axis=0)[:m_edges]
    G = nx.Graph()
    G.add_nodes_from(range(n))
    G.add_edges_from(map(tuple, pairs.tolist()))
    model = gm.GTVModel(G, d, penalty=gm.Norm2(), lam=0.1)
    centres = rng.standard_normal((2, d))
    for i in range(n):
        X = rng.standard_normal((5, d))
        model.set_loss(i, gm.SquaredLoss(X, X @ centres[i % 2]))
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--scale-nodes", type=int, default=100_000)
    ap.add_argument("--scale-edges", type=int, default=1_000_000)
    ap.add_argument("--skip-d", action="store_true", help="skip the slow benchmark (d)")
    ap.add_argument("--scale-certify", action="store_true",
                    help="also time one certificate of the scale instance (slow)")
    ap.add_argument("--only-f", action="store_true", help="run (f) alone")
    args = ap.parse_args()
    R = args.repeats
    if args.only_f:
        general_losses(R)
        return

    # (a) fast path vs plain numpy loop
    data = sbm(rho=1.0, seed=0)
    model = data.model(gm.Norm2(), lam=1e-2)
    c = 10.0
    print(f"(a) paper 001 VI-A SBM: n={model.num_nodes}, |E|={model.num_edges}, d={model.dim}")
    iters = 1000
    fast, plain, dflt = [], [], []
    for _ in range(2 * R):  # interleaved, so machine load affects all three alike
        plain.append(plain_algorithm1(model, c, iters)[1])
        fast.append(per_iteration(model, iters, step=c)[0])
        dflt.append(per_iteration(model, iters)[0])
    Wp, _ = plain_algorithm1(model, c, iters)
    _, rf = per_iteration(model, iters, step=c)
    print(f"    same iterates: max |W_fast - W_plain| = {np.abs(rf.weights - Wp).max():.2e}")
    a_ratio = np.median(np.array(fast) / np.array(plain))
    print(f"    plain numpy loop      {np.median(plain) * 1e3:8.3f} ms/iter")
    print(f"    solve_primal_dual c=10 {np.median(fast) * 1e3:7.3f} ms/iter   ratio {a_ratio:.2f}x")
    print(f"    default (adaptive c)  {np.median(dflt) * 1e3:8.3f} ms/iter   ratio "
          f"{np.median(np.array(dflt) / np.array(plain)):.2f}x   (ratios: medians of the "
          "per-repeat ratios)")

    # (b) CVXPY path vs fast path
    # steady state: the first CVXPY solve also canonicalizes the DPP problem (once per run),
    # so the per-iteration cost is the difference of a long and a short run
    cv = []
    for _ in range(max(1, R // 2)):
        t_short = per_iteration(model, 5, step=c, prox="cvxpy")[0] * 5
        t_long = per_iteration(model, 45, step=c, prox="cvxpy")[0] * 45
        cv.append((t_long - t_short) / 40)
    t_pn, _ = per_iteration(model, 5, step=c, prox="cvxpy", batch_cvxpy=False)
    # what dominates a batched CVXPY node update: Clarabel's own time vs CVXPY's overhead
    grp = CvxpyProxGroup(model, np.arange(model.num_nodes))
    V = np.random.default_rng(0).standard_normal((model.num_nodes, model.dim))
    tau = c / model.degrees
    walls, walls_cvx, solver_cvx = [], [], []
    direct = grp.direct
    for _ in range(10):
        grp.direct = direct  # the default: CVXPY's conic data re-solved by Clarabel directly
        t0 = time.perf_counter()
        grp.update(V, tau, 10**4, V)
        walls.append(time.perf_counter() - t0)
        grp.direct = None  # CVXPY's own re-solve of the DPP problem (Parameters v, tau)
        t0 = time.perf_counter()
        grp.update(V, tau, 10**4, V)
        walls_cvx.append(time.perf_counter() - t0)
        solver_cvx.append(grp.problem.solver_stats.solve_time)
    b_ratio = np.median(cv) / np.median(fast)
    print(f"(b) CVXPY prox path (one problem for all nodes)     {np.median(cv) * 1e3:8.2f} ms/iter"
          f"   ratio to fast path {b_ratio:.1f}x")
    print(f"    per-node DPP problems (200 problems)            {t_pn * 1e3:8.2f} ms/iter"
          f"   ratio {t_pn / np.median(fast):.0f}x")
    print(f"    one batched update, direct Clarabel re-solve: wall {np.median(walls) * 1e3:.2f} ms"
          " (Clarabel's own solve_time is not comparable here: it counts its data update)")
    print(f"    one batched update, CVXPY DPP re-solve:       wall {np.median(walls_cvx) * 1e3:.2f}"
          f" ms, Clarabel solve {np.median(solver_cvx) * 1e3:.2f} ms, CVXPY parameter/solver "
          f"interface {(np.median(walls_cvx) - np.median(solver_cvx)) * 1e3:.2f} ms")

    # (c) SnapVX style: rebuild per node per iteration
    W = np.zeros((model.num_nodes, model.dim))
    U = np.zeros((model.num_edges, model.dim))
    n_snap = 3
    t0 = time.perf_counter()
    for _ in range(n_snap):
        W, U = snapvx_iteration(model, W, U, c)
    t_snap = (time.perf_counter() - t0) / n_snap
    print(f"(c) rebuild one CVXPY problem per node per iteration {t_snap * 1e3:8.1f} ms/iter   "
          f"ratio to (b) {t_snap / np.median(cv):.0f}x, to the fast path "
          f"{t_snap / np.median(fast):.0f}x")

    # (d) iterations to a certified relative gap of 1e-6
    if not args.skip_d:
        print("(d) iterations to certified relative gap 1e-6 (-1: not reached)")
        cases = [("001 VI-A rho=1", sbm(rho=1.0, seed=0).model(gm.Norm2(), lam=1e-2)),
                 ("001 VI-A rho=0.6", sbm(rho=0.6, seed=0).model(gm.Norm2(), lam=1e-2)),
                 ("000 Sec.5", paper000_sbm().model(gm.Norm1(), lam=1e-3))]
        for name, mdl in cases:
            k_def, t_def = iterations_to_gap(mdl, None, 20_000, 10)
            k_one, t_one = iterations_to_gap(mdl, 1.0, 20_000, 50)
            ratio = (k_one / k_def) if k_def > 0 and k_one > 0 else float("nan")
            more = "" if k_one > 0 else " (c = 1 not converged in 20,000)"
            print(f"    {name:18} default {k_def:6d} it ({t_def:6.2f} s)   c=1 {k_one:6d} it "
                  f"({t_one:6.2f} s)   ratio {ratio:.1f}x{more}")

    # (e) scale
    if not args.skip_scale:
        t0 = time.perf_counter()
        big = scale_model(args.scale_nodes, args.scale_edges, 10)
        t_build = time.perf_counter() - t0
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        tracemalloc.start()
        it_e = 5
        r = big.solve_primal_dual(max_iter=it_e, tol=0, record_every=None)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        t = r.timings
        per = (t["total"] - t["setup"] - t["certificate"]) / it_e
        print(f"(e) scale: n={big.num_nodes}, |E|={big.num_edges}, d=10 (model built in "
              f"{t_build:.1f} s)")
        print(f"    {per:.3f} s/iteration (node updates {t['node_updates'] / it_e:.3f}, edge "
              f"updates {t['edge_updates'] / it_e:.3f}); setup {t['setup']:.2f} s (step scale "
              "and fast-path data); no certificates (record_every=None)")
        print(f"    peak memory allocated by the solver (tracemalloc) {peak / 2**30:.2f} GiB; "
              f"process peak RSS {rss:.2f} GiB (before solving {rss_before:.2f} GiB: the "
              "networkx graph and the model)")
        if args.scale_certify:
            t0 = time.perf_counter()
            cert = big.certify(r.weights, r.flows)
            print(f"    one certificate of the last iterate: {time.perf_counter() - t0:.1f} s "
                  f"(relative gap {cert.relative_gap:.2e})")

    general_losses(R)


def general_losses(R: int) -> None:
    """(f): losses without a closed-form prox on paper 001 VI-A's SBM, fixed c = 10: absolute
    and hinge (dual active set), and l1-regularized or box-constrained squared, Huber, hinge and
    absolute losses (the composite active set of gtvmodel.terms.composite)."""
    sq = sbm(rho=1.0, seed=0).model(gm.Norm2(), lam=1e-2)
    c, iters = 10.0, 200
    print(f"(f) no closed-form prox, 001 VI-A SBM (n={sq.num_nodes}, |E|={sq.num_edges}, "
          f"d={sq.dim}), c = {c:g}; ratios to the squared fast path, medians of {R} repeats")

    def absolute(ls, **kw):
        return gm.AbsoluteLoss(ls.X, ls.y, **kw)

    def hinge(ls, **kw):
        return gm.HingeLoss(ls.X, np.sign(ls.y), **kw)

    def squared(ls, **kw):
        return gm.SquaredLoss(ls.X, ls.y, **kw)

    def huber(ls, **kw):
        return gm.HuberLoss(ls.X, ls.y, M=0.5, **kw)

    box = [gm.Box(-1.0, 1.0)]
    cases = [("AbsoluteLoss", absolute, {}, []), ("HingeLoss", hinge, {}, []),
             ("SquaredLoss l1=0.05", squared, {"l1": 0.05}, []),
             ("SquaredLoss l1 + Box", squared, {"l1": 0.05}, box),
             ("HuberLoss Box", huber, {}, box),
             ("HuberLoss NonNeg", huber, {}, [gm.NonNeg()]),
             ("HuberLoss l1=0.05", huber, {"l1": 0.05}, []),
             ("HingeLoss l1=0.05", hinge, {"l1": 0.05}, []),
             ("AbsoluteLoss l1 + Box", absolute, {"l1": 0.05}, box),
             ("HuberLoss NormBall(1)", huber, {}, [gm.NormBall(1.0)]),
             ("AbsoluteLoss NormBall(1)", absolute, {}, [gm.NormBall(1.0)])]
    for name, make, kw, cons in cases:
        model = gm.GTVModel(sq.graph, sq.dim, penalty=gm.Norm2(), lam=1e-2)
        model.set_losses({v: make(sq.loss(v), **kw) for v in sq.nodes})
        for v in sq.nodes:
            for con in cons:
                model.add_constraint(v, con)
        fast, new, cvx = [], [], []
        for _ in range(R):
            fast.append(per_iteration(sq, iters, step=c)[0])
            new.append(per_iteration(model, iters, step=c)[0])
            t_short = per_iteration(model, 5, step=c, prox="cvxpy")[0] * 5
            t_long = per_iteration(model, 25, step=c, prox="cvxpy")[0] * 25
            cvx.append((t_long - t_short) / 20)
        # one node update of every node at a random point, both paths at full accuracy
        V = np.random.default_rng(0).standard_normal((model.num_nodes, model.dim))
        tau = c / np.maximum(model.degrees, 1)
        updates = NodeUpdates(model)
        batched = updates(V, tau, 10**4, V)
        general = CvxpyProxGroup(model, np.arange(model.num_nodes)).update(V, tau, 10**4, V)
        f, nw, cv = (float(np.median(x)) for x in (fast, new, cvx))
        paths = ", ".join(f"{k} {n}" for k, n in updates.describe().items())
        print(f"    {name:24} batched {nw * 1e3:7.3f} ms/it = {nw / f:5.2f}x   CVXPY path "
              f"{cv * 1e3:7.3f} ms/it = {cv / f:5.1f}x   (squared fast path {f * 1e3:.3f} ms/it)"
              f"; one update, max |batched - CVXPY| = {np.abs(batched - general).max():.1e}"
              f"; paths: {paths}")


if __name__ == "__main__":
    main()
