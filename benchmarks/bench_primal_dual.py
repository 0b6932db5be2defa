"""Benchmarks of Algorithm 1 (``solve_primal_dual``), measured side by side in one run.

(a) paper 001 VI-A SBM (200 nodes, d = 2, squared loss, Norm2): seconds per iteration of the
    package's fast path vs a plain numpy loop of Algorithm 1 written here (target <= 1.2x);
(b) the CVXPY prox path vs the fast path per iteration (target <= 10x) and what dominates it;
(c) rebuilding one CVXPY problem per node per iteration (SnapVX style) vs (b) (a few
    iterations only);
(d) iterations to a certified relative gap of 1e-6: default step rule vs the paper's c = 1 on
    paper 001 VI-A (rho = 1 and 0.6) and paper 000's setting (target >= 10x fewer);
(e) scale: 100,000 nodes, ~1,000,000 edges, d = 10, squared loss, Norm2: seconds per iteration
    and peak memory (target <= 1 s/iteration, <= 4 GiB); the time split of one iteration (node
    updates, D product, dual update, D^T product) of the plain numpy loop, of the block-wise
    edge update before the preallocated ``Norm2`` DU ("before", replayed here) and of the
    package's current one ("now"), interleaved, with their ratios to the plain loop in wall
    and in process CPU time (issue 16 item 5: target >= 2x faster than the plain loop); with
    numba installed also the compiled edge pass (``NumpyBackend(kernel="numba")``,
    serial and on 2 threads) in the same interleaved table, and numba's one-off cost (import,
    compile cold, load from its cache) in fresh processes; skip with ``--skip-scale``;
(f) losses without a closed-form prox (absolute, hinge; l1-regularized, box- or ball-constrained
    squared, Huber, hinge, absolute; logistic with l1 or a box; issue 16 item 3) on (a)'s graph
    and samples: the batched dual active-set prox (proximal Newton for logistic) vs the CVXPY
    path, each per iteration as a ratio to the squared-loss fast path of (a) (target <= 5x);
    ``--only-f`` runs (f) alone, ``--f-cases Logistic`` only the cases naming ``Logistic``;
    ``--f-nodes 10000`` runs the same cases on a larger SBM of two equal clusters with the same
    per-node sample size (m_i = 5), d = 2 and mean degree (~50) (the CVXPY path is timed only
    up to 1,000 nodes); ``--f-degree 10`` sets that mean degree instead.

Run: ``python benchmarks/bench_primal_dual.py [--repeats 5] [--skip-scale]``.  Medians of the
repeats are reported.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import cvxpy as cp
import numpy as np

import gtvmodel as gm
from gtvmodel import _compiled
from gtvmodel.datasets import paper000_sbm, sbm
from gtvmodel.primal_dual.compiled import make_edge_updates
from gtvmodel.primal_dual.prox import CvxpyProxGroup, NodeUpdates
from gtvmodel.primal_dual.steps import ResidualBalancing, residuals, steps_from_scale
from gtvmodel.primal_dual.updates import (
    dual_argument,
    dual_update,
    extrapolate,
    prox_point,
)


# ---------------------------------------------------------------- a plain Algorithm 1
def plain_setup(model: gm.GTVModel, c: float) -> dict:
    """The data of :func:`plain_algorithm1`: steps, ``(I + 2 tau_i Q_i)^-1`` and ``2 tau_i q_i``
    per node (squared losses), capacities, ``D`` and ``D^T``."""
    n, d = model.num_nodes, model.dim
    D = model.incidence
    tau = c / np.maximum(model.degrees, 1)
    Q, b = np.empty((n, d, d)), np.empty((n, d))
    for i in range(n):
        loss = model.loss_at(i)
        Q[i] = loss.X.T @ loss.X / loss.m
        b[i] = 2 * tau[i] * (loss.X.T @ loss.y / loss.m)
    Minv = np.linalg.inv(np.eye(d) + 2 * tau[:, None, None] * Q)
    return {"D": D, "DT": D.T.tocsr(), "tau": tau, "sigma": 0.5 / c, "Minv": Minv, "b": b,
            "lamA": model.lam * model.edge_weights}


def plain_algorithm1(model: gm.GTVModel, c: float, iters: int) -> tuple[np.ndarray, float]:
    """Algorithm 1 for squared losses and Norm2 as one would write it by hand (numpy/scipy):
    precomputed (I + 2 tau Q)^-1 per node, clipping dual update.  Returns (W, s/iteration)."""
    st = plain_setup(model, c)
    D, DT, tau, sigma, Minv, b, lamA = (st[k] for k in ("D", "DT", "tau", "sigma", "Minv", "b",
                                                        "lamA"))
    W = np.zeros((model.num_nodes, model.dim))
    U = np.zeros((model.num_edges, model.dim))
    t0 = time.perf_counter()
    for _ in range(iters):
        V = W - tau[:, None] * (DT @ U)
        Wn = np.einsum("kij,kj->ki", Minv, V + b)
        Un = U + sigma * (2.0 * (D @ Wn) - D @ W)
        nrm = np.sqrt(np.einsum("ij,ij->i", Un, Un))
        Un *= np.minimum(1.0, lamA / np.maximum(nrm, 1e-300))[:, None]
        W, U = Wn, Un
    return W, (time.perf_counter() - t0) / iters


def per_iteration(model: gm.GTVModel, iters: int, cpu: bool = False, **kw
                  ) -> tuple[float, gm.PrimalDualResult]:
    """Seconds per iteration of solve_primal_dual, excluding setup (no certificates);
    ``cpu``: the process's CPU time over the whole call instead (setup included: about 1 ms
    once cached), which the other jobs of a shared machine do not inflate."""
    c0 = time.process_time()
    r = model.solve_primal_dual(max_iter=iters, tol=0, record_every=None, **kw)
    if cpu:
        return (time.process_time() - c0) / iters, r
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
    """Random graph with ~``m_edges`` edges, squared losses with 5 samples per node around two
    centres, ``Norm2``, lambda = 0.1 (built from arrays: ``from_edges`` and ``set_data``)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, n, int(m_edges * 1.02))
    b = rng.integers(0, n, a.size)
    keep = a != b
    pairs = np.unique(np.sort(np.column_stack([a[keep], b[keep]]), axis=1), axis=0)[:m_edges]
    model = gm.GTVModel.from_edges(n, pairs, dim=d, penalty=gm.Norm2(), lam=0.1)
    centres = rng.standard_normal((2, d))
    X = rng.standard_normal((n, 5, d))
    model.set_data(X, np.einsum("nmd,nd->nm", X, centres[np.arange(n) % 2]), "squared")
    return model


# ---------------------------------------------------------------- (a), (e): time split
SPLIT = ("node updates", "D product", "dual update", "D^T product")


def _split_plain(st: dict, W: np.ndarray, U: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
    """One iteration of :func:`plain_algorithm1`, timed by part (``D^T u`` first there)."""
    D, DT, tau, sigma, lamA = st["D"], st["DT"], st["tau"], st["sigma"], st["lamA"]
    t0 = time.perf_counter()
    DTu = DT @ U
    t1 = time.perf_counter()
    Wn = np.einsum("kij,kj->ki", st["Minv"], W - tau[:, None] * DTu + st["b"])
    t2 = time.perf_counter()
    DWn, DW = D @ Wn, D @ W
    t3 = time.perf_counter()
    Un = U + sigma * (2.0 * DWn - DW)
    nrm = np.sqrt(np.einsum("ij,ij->i", Un, Un))
    Un *= np.minimum(1.0, lamA / np.maximum(nrm, 1e-300))[:, None]
    t4 = time.perf_counter()
    return Wn, Un, [t2 - t1, t3 - t2, t4 - t3, t1 - t0]


class _Replay:
    """The package's iteration at fixed steps, timed by part: ``fused=False`` replays the
    block-wise loop as it was before the preallocated dual update (each block's ``Norm2`` DU
    by ``penalty.dual_update``, :func:`~gtvmodel._norms.project_rows` into a new array, then
    copied into the flows), ``fused=True`` the current one
    (:meth:`EdgeUpdates.__call__ <gtvmodel.primal_dual.updates.EdgeUpdates.__call__>`: each
    block's DU by its ``Penalty.dual_updater``, written into the flows), with a timer around
    each block's ``D Y`` and DU.  ``threads > 1``: the package's threaded edge update and
    ``D^T u`` (``NumpyBackend(threads=...)``), timed whole (its ``D Y`` inside "dual
    update"); ``kernel="numba"``: the compiled edge pass
    (:class:`~gtvmodel.primal_dual.compiled.CompiledEdgeUpdates`,
    ``NumpyBackend(kernel="numba")``), timed whole ("dual update": ``D Y``, DU and,
    serially, ``D^T u``, which its "D^T product" then only hands over)."""

    def __init__(self, model: gm.GTVModel, c: float, fused: bool, threads: int = 1,
                 kernel: str = "numpy"):
        self.model, self.fused, self.threads = model, fused, threads
        self.whole = threads > 1 or kernel == "numba"
        self.D = model.incidence
        self.DT = self.D.T.tocsr()
        self.tau, sigma = steps_from_scale(model.degrees, model.num_edges, c)
        self.tau_col, self.sigma, self.sigma_col = self.tau[:, None], sigma, sigma[:, None]
        self.nodes = NodeUpdates(model)
        self.edges, _ = make_edge_updates(self.D, model.penalty, model.capacities, model.dim,
                                          kernel, threads=threads, DT=self.DT)
        n, d, E = model.num_nodes, model.dim, model.num_edges
        self.W, self.U = np.zeros((n, d)), np.zeros((E, d))
        self.DTu = self.DT @ self.U
        self.Y, self.spare = np.empty((n, d)), np.empty((E, d))

    def step(self, k: int) -> list[float]:
        """Iteration ``k``; returns the seconds of the parts :data:`SPLIT`."""
        t0 = time.perf_counter()
        V = prox_point(self.W, self.tau_col, self.DTu)
        Wn = self.nodes(V, self.tau, k, self.W)
        assert np.isfinite(Wn).all()
        t1 = time.perf_counter()
        if self.whole:
            Un = self.edges(extrapolate(Wn, self.W, self.Y), self.U, self.sigma,
                            self.sigma_col, self.spare)
            self.spare = self.U
            t_d, t_du = float("nan"), time.perf_counter() - t1
        else:
            t_d, t_du, Un = self._edges(Wn)
        t3 = time.perf_counter()
        self.DTu = self.edges.node_sums(Un)
        t4 = time.perf_counter()
        self.W, self.U = Wn, Un
        return [t1 - t0, t_d, t_du, t4 - t3]

    def _edges(self, Wn: np.ndarray) -> tuple[float, float, np.ndarray]:
        """The edge update DU (33) block by block, a timer around each block's ``D Y`` and
        DU; returns their sums and ``u^{k+1}``."""
        t = time.perf_counter()
        Y = extrapolate(Wn, self.W, self.Y)
        out, pen, lamA = self.spare, self.model.penalty, self.model.capacities
        sig, U, col = self.sigma, self.U, float(self.sigma[0])  # fixed c: equal steps
        t_d = t_du = 0.0
        for (a, b, Db), update in zip(self.edges.blocks, self.edges.updaters, strict=True):
            DY = Db @ Y
            t2 = time.perf_counter()
            if self.fused:
                update(dual_argument(U[a:b], DY, col), sig[a:b], out[a:b])
            else:
                out[a:b] = dual_update(pen, U[a:b], DY, sig[a:b], col, lamA[a:b])
            t_d, t_du, t = t_d + t2 - t, t_du + time.perf_counter() - t2, time.perf_counter()
        self.spare = self.U
        return t_d, t_du, out


def _round(step: Callable[[], list[float]], iters: int) -> tuple[np.ndarray, float, float]:
    """``iters`` calls of ``step``: the mean seconds of its parts, and the wall and process CPU
    seconds per iteration of the whole round."""
    acc = np.zeros(len(SPLIT))
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(iters):
        acc += step()
    return acc / iters, (time.perf_counter() - w0) / iters, (time.process_time() - c0) / iters


def time_split(model: gm.GTVModel, c: float, R: int, iters: int = 3) -> None:
    """The time split of (a) and (e): the plain loop, the block-wise loop before the
    preallocated dual update and the current one (serial, and on 2 threads), interleaved
    (``R`` rounds of ``iters`` iterations each, after 2 warm-up iterations that build the node
    updates' caches); medians over the rounds of the per-iteration means, of the parts and of
    the wall and the process CPU time (``time.process_time``) of each round; ratios: medians
    of the per-round ratios."""
    st = plain_setup(model, c)
    n, d, E = model.num_nodes, model.dim, model.num_edges
    plain_state = [np.zeros((n, d)), np.zeros((E, d))]

    def plain_step() -> list[float]:
        *plain_state[:], parts = _split_plain(st, *plain_state)
        return parts

    runs = {"before": _Replay(model, c, fused=False), "now": _Replay(model, c, fused=True),
            "now, 2 threads": _Replay(model, c, fused=True, threads=2)}
    if _compiled.available():  # the compiled edge pass (NumpyBackend(kernel="numba"))
        runs |= {"numba": _Replay(model, c, fused=True, kernel="numba"),
                 "numba, 2 threads": _Replay(model, c, fused=True, threads=2,
                                             kernel="numba")}
    for run in runs.values():
        for k in range(2):
            run.step(k)
    steps = {"plain numpy loop": plain_step, **{
        name: (lambda run=run: run.step(run.k)) for name, run in runs.items()}}
    parts: dict[str, list] = {name: [] for name in steps}
    wall: dict[str, list] = {name: [] for name in steps}
    cpu: dict[str, list] = {name: [] for name in steps}
    for run in runs.values():
        run.k = 2
    for _ in range(R):
        for name, step in steps.items():
            p, w, cp_ = _round(step, iters)
            parts[name].append(p)
            wall[name].append(w)
            cpu[name].append(cp_)
            if name in runs:
                runs[name].k += iters
    w_plain, c_plain = np.array(wall["plain numpy loop"]), np.array(cpu["plain numpy loop"])
    print(f"    time split, ms per iteration (medians of {R} interleaved rounds of {iters} "
          "iterations at fixed c; plain / this: median of the per-round ratios of wall and of "
          "process CPU time, > 1: faster than the plain loop)")
    print("    " + f"{'':18}" + "".join(f"{h:>13}" for h in SPLIT)
          + f"{'wall':>9}{'CPU':>9}  plain / this: wall (range), CPU (range)")
    for name in steps:
        med = np.median(np.array(parts[name]), axis=0) * 1e3
        rw, rc = w_plain / np.array(wall[name]), c_plain / np.array(cpu[name])
        print(f"    {name:18}" + "".join(f"{m:13.3f}" for m in med)
              + f"{np.median(wall[name]) * 1e3:9.2f}{np.median(cpu[name]) * 1e3:9.2f}  "
              f"{np.median(rw):.2f}x ({rw.min():.2f}-{rw.max():.2f}), "
              f"{np.median(rc):.2f}x ({rc.min():.2f}-{rc.max():.2f})")
    agree = np.abs(runs["now"].U - runs["before"].U).max()
    same = np.array_equal(runs["now"].U, runs["now, 2 threads"].U)
    U = runs["now"].U
    full = np.mean(np.sqrt(np.einsum("ij,ij->i", U, U)) >= (1 - 1e-9) * model.capacities)
    print(f"    now vs before after {runs['now'].k} iterations: max |u difference| = {agree:.1e};"
          f" 2 threads vs serial bit for bit: {same}; edges at capacity {full:.0%}")
    if "numba" in runs:
        Un = runs["numba"].U
        rel = np.abs(Un - U).max() / max(np.abs(U).max(), 1e-300)
        same_nb = np.array_equal(Un, runs["numba, 2 threads"].U)
        print(f"    numba vs now: max |u difference| / max |u| = {rel:.1e}; numba on 2 threads vs "
              f"serial bit for bit: {same_nb}")
    for run in runs.values():
        run.edges.close()


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
    ap.add_argument("--f-cases", default="", help="(f): only the cases whose name has this")
    ap.add_argument("--f-nodes", type=int, default=200,
                    help="(f): nodes of the SBM (200: paper 001 VI-A's; more: same degree)")
    ap.add_argument("--f-degree", type=float, default=None,
                    help="(f): mean degree of the SBM (default: paper 001 VI-A's, ~50)")
    ap.add_argument("--f-cpu", action="store_true",
                    help="(f): CPU time of the process per iteration, not wall time")
    ap.add_argument("--only-e", action="store_true", help="run (e) alone")
    args = ap.parse_args()
    R = args.repeats
    print(f"measuring {gm.__file__}; load average {os.getloadavg()[0]:.2f} "
          f"{os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    if args.only_f:
        general_losses(R, args.f_cases, args.f_nodes, args.f_degree, args.f_cpu)
        return
    if args.only_e:
        scale(args)
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
    time_split(model, c, R, iters=200)

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
        scale(args)
    general_losses(R)


def scale(args: argparse.Namespace) -> None:
    """(e): one run's per-iteration time and peak memory, then :func:`time_split`."""
    t0 = time.perf_counter()
    big = scale_model(args.scale_nodes, args.scale_edges, 10)
    t_build = time.perf_counter() - t0
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    # the first iteration builds the node updates' caches (eigen-decompositions of the Gram
    # matrices): per iteration = (11 iterations - 1 iteration) / 10; a run before them loads
    # the compiled edge pass of kernel="auto" (numba, once per process) out of both
    big.solve_primal_dual(max_iter=1, tol=0, record_every=None)
    r1 = big.solve_primal_dual(max_iter=1, tol=0, record_every=None)
    tracemalloc.start()
    it_e = 11
    r = big.solve_primal_dual(max_iter=it_e, tol=0, record_every=None)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    t, t1 = r.timings, r1.timings
    node, edge = ((t[k] - t1[k]) / (it_e - 1) for k in ("node_updates", "edge_updates"))
    print(f"(e) scale: n={big.num_nodes}, |E|={big.num_edges}, d=10 (model built in "
          f"{t_build:.1f} s)")
    print(f"    solve_primal_dual (kernel {r.kernel!r}): {node + edge:.3f} s/iteration (node "
          f"updates {node:.3f}, edge updates {edge:.3f}; iterations 2-{it_e}); the first iteration "
          f"{t1['node_updates'] + t1['edge_updates']:.2f} s (node-update caches); setup "
          f"{t['setup']:.2f} s (step scale); no certificates (record_every=None)")
    print(f"    peak memory allocated by the solver (tracemalloc) {peak / 2**30:.2f} GiB; "
          f"process peak RSS {rss:.2f} GiB (before solving {rss_before:.2f} GiB: the model)")
    if args.scale_certify:
        t0 = time.perf_counter()
        cert = big.certify(r.weights, r.flows)
        print(f"    one certificate of the last iterate: {time.perf_counter() - t0:.1f} s "
              f"(relative gap {cert.relative_gap:.2e})")
    time_residuals(big, r)
    if _compiled.available():
        jit_times()
    time_split(big, r.c, args.repeats)


_JIT_PROBE = """
import time
t0 = time.perf_counter()
import numba  # noqa: F401
t1 = time.perf_counter()
import numpy as np
import gtvmodel as gm
from gtvmodel.primal_dual.compiled import make_edge_updates
m = gm.GTVModel.from_edges(4, np.array([[0, 1], [1, 2], [2, 3]]), dim=2, penalty=gm.{pen}(),
                           lam=1.0)
t2 = time.perf_counter()
edges, _ = make_edge_updates(m.incidence, m.penalty, m.capacities, 2, "numba")
s = np.full(3, 0.5)
edges(np.ones((4, 2)), np.ones((3, 2)), s, s[:, None], np.empty((3, 2)))
print(t1 - t0, time.perf_counter() - t2)
"""


def jit_times(pen: str = "Norm2") -> None:
    """(e): the one-off cost of ``kernel="numba"`` in a fresh process: importing numba, then
    compiling (cold: an empty ``NUMBA_CACHE_DIR``) or loading (cached: the same directory
    again) the edge pass for ``pen`` and running it once on a 3-edge graph."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        rows = []
        for label in ("cold", "cached", "cached"):
            out = subprocess.run([sys.executable, "-c", _JIT_PROBE.format(pen=pen)], env=env,
                                 capture_output=True, text=True, check=True).stdout.split()
            rows.append(f"{label} {float(out[1]):.2f} s")
    print(f"    numba's one-off cost for {pen} (fresh processes; numba import "
          f"{float(out[0]):.2f} s, then kernels): " + ", ".join(rows))


def time_residuals(model: gm.GTVModel, r: gm.PrimalDualResult, reps: int = 3) -> None:
    """(e): one evaluation of the residuals (``D (w^k - w^{k+1})`` and the two norms of
    :func:`~gtvmodel.primal_dual.steps.residuals`), which the default step rule needs every
    ``ResidualBalancing.every`` iterations while it adapts (and the history at its rows):
    median wall and CPU seconds of ``reps``, and that cost spread over the rule's period."""
    D, DT = model.incidence, model.incidence.T.tocsr()
    tau, sigma = steps_from_scale(model.degrees, model.num_edges, r.c)
    W, U = r.weights, r.flows
    W1, U1 = W * (1 + 1e-3), U * (1 - 1e-3)
    DTu, DTu1 = DT @ U, DT @ U1
    wall, cpu = [], []
    for _ in range(reps):
        w0, c0 = time.perf_counter(), time.process_time()
        residuals(W, W1, U, U1, D @ (W - W1), DTu, DTu1, tau[:, None], sigma[:, None])
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    every = ResidualBalancing().every
    print(f"    one evaluation of the residuals (D (w^k - w^(k+1)) and the norms): "
          f"{np.median(wall) * 1e3:.1f} ms wall, {np.median(cpu) * 1e3:.1f} ms CPU (median of "
          f"{reps}); every {every} iterations while the default rule adapts: "
          f"{np.median(wall) / every * 1e3:.1f} ms per iteration")


def f_instance(n: int, degree: float | None = None) -> gm.GTVModel:
    """(f)'s squared-loss model: paper 001 VI-A's SBM for ``n = 200``, else two clusters of
    ``n / 2`` with the same mean degree (``p_in = 0.5 * 100 / (n / 2)``), ``m_i`` and ``d``;
    ``degree``: that mean degree instead (``p_in = (degree - 1) / (n / 2)``, one expected
    edge across)."""
    if n == 200 and degree is None:
        return sbm(rho=1.0, seed=0).model(gm.Norm2(), lam=1e-2)
    half = n // 2
    p_in = 50.0 / half if degree is None else (degree - 1.0) / half
    return sbm(sizes=(half, n - half), p_in=p_in, p_out=1.0 / half, rho=1.0,
               seed=0).model(gm.Norm2(), lam=1e-2)


def general_losses(R: int, cases_like: str = "", n: int = 200,
                   degree: float | None = None, cpu: bool = False) -> None:
    """(f): losses without a closed-form prox on paper 001 VI-A's SBM, fixed c = 10: absolute
    and hinge (dual active set), and l1-regularized or box-constrained squared, Huber, hinge and
    absolute losses (the composite active set of gtvmodel.terms.composite), logistic losses with
    l1 or a box (its proximal Newton method); ``cases_like``: only the cases naming it; ``n``
    nodes of mean degree ``degree`` (:func:`f_instance`; the CVXPY path is timed up to 1,000
    nodes only); ``cpu``: the batched paths and the squared path in CPU time
    (:func:`per_iteration`)."""
    sq = f_instance(n, degree)
    c, iters = 10.0, 200 if n <= 1000 else 50
    with_cvxpy = n <= 1000
    print(f"gtvmodel measured: {gm.__file__}")
    print(f"(f) no closed-form prox, 001 VI-A SBM (n={sq.num_nodes}, |E|={sq.num_edges}, "
          f"d={sq.dim}), c = {c:g}; ratios to the squared fast path: the median (min-max) of "
          f"{R} pairs, each row's run and the squared path's run one after the other (in "
          f"turns first){'; CPU time' if cpu else ''}")

    def absolute(ls, **kw):
        return gm.AbsoluteLoss(ls.X, ls.y, **kw)

    def hinge(ls, **kw):
        return gm.HingeLoss(ls.X, np.sign(ls.y), **kw)

    def squared(ls, **kw):
        return gm.SquaredLoss(ls.X, ls.y, **kw)

    def huber(ls, **kw):
        return gm.HuberLoss(ls.X, ls.y, M=0.5, **kw)

    def logistic(ls, **kw):
        return gm.LogisticLoss(ls.X, np.sign(ls.y), **kw)

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
             ("AbsoluteLoss NormBall(1)", absolute, {}, [gm.NormBall(1.0)]),
             ("HuberLoss NormBall(1, p=1)", huber, {}, [gm.NormBall(1.0, p=1)]),
             ("AbsoluteLoss NormBall(1, p=1)", absolute, {}, [gm.NormBall(1.0, p=1)]),
             ("LogisticLoss (Newton)", logistic, {}, []),
             ("LogisticLoss l1=0.05", logistic, {"l1": 0.05}, []),
             ("LogisticLoss Box", logistic, {}, box),
             ("LogisticLoss l1 + Box", logistic, {"l1": 0.05}, box)]
    for name, make, kw, cons in cases:
        if cases_like and cases_like not in name:
            continue
        model = gm.GTVModel(sq.graph, sq.dim, penalty=gm.Norm2(), lam=1e-2)
        model.set_losses({v: make(sq.loss(v), **kw) for v in sq.nodes})
        for v in sq.nodes:
            for con in cons:
                model.add_constraint(v, con)
        fast, new, cvx = [], [], []
        per_iteration(model, 2, step=c)  # (untimed: numba's loops loaded, as the squared path's)
        for rep in range(R):  # the two alternate, in turns first, each ratio from one pair
            if rep % 2:
                t_new, run = per_iteration(model, iters, cpu, step=c)
            fast.append(per_iteration(sq, iters, cpu, step=c)[0])
            if not rep % 2:
                t_new, run = per_iteration(model, iters, cpu, step=c)
            new.append(t_new)
            if not with_cvxpy:
                continue
            t_short = per_iteration(model, 5, step=c, prox="cvxpy")[0] * 5
            t_long = per_iteration(model, 25, step=c, prox="cvxpy")[0] * 25
            cvx.append((t_long - t_short) / 20)
        f, nw = float(np.median(fast)), float(np.median(new))
        ratios = np.array(new) / np.array(fast)  # (pairs measured side by side)
        fellback = run.paths.get("cvxpy fallbacks", 0) / iters
        if not with_cvxpy:
            print(f"    {name:29} batched {nw * 1e3:7.3f} ms/it = {np.median(ratios):5.2f}x "
                  f"({ratios.min():.2f}-{ratios.max():.2f}x)   (squared fast path "
                  f"{f * 1e3:.3f} ms/it, {min(fast) * 1e3:.2f}-{max(fast) * 1e3:.2f}); CVXPY "
                  f"fallbacks per iteration {fellback:.2f}; load {os.getloadavg()[0]:.2f}",
                  flush=True)
            continue
        # one node update of every node at a random point, both paths at full accuracy
        V = np.random.default_rng(0).standard_normal((model.num_nodes, model.dim))
        tau = c / np.maximum(model.degrees, 1)
        updates = NodeUpdates(model)
        batched = updates(V, tau, 10**4, V)
        general = CvxpyProxGroup(model, np.arange(model.num_nodes)).update(V, tau, 10**4, V)
        cv = float(np.median(cvx))
        paths = ", ".join(f"{k} {n}" for k, n in updates.describe().items())
        print(f"    {name:29} batched {nw * 1e3:7.3f} ms/it = {np.median(ratios):5.2f}x "
              f"({ratios.min():.2f}-{ratios.max():.2f}x)   CVXPY path "
              f"{cv * 1e3:7.3f} ms/it = {cv / f:5.1f}x   (squared fast path {f * 1e3:.3f} ms/it)"
              f"; one update, max |batched - CVXPY| = {np.abs(batched - general).max():.1e}"
              f"; paths: {paths}; CVXPY fallbacks per iteration in the run {fellback:.2f}",
              flush=True)


if __name__ == "__main__":
    main()
