"""Algorithm 1's iteration against the best plain numpy loop (issue 30 item 1), side by side.

The plain loop is Algorithm 1 as a user writes it in numpy/scipy for squared losses and
``Norm2`` at fixed steps (``tau_i = c/deg(i)``, ``sigma = 1/(2c)``): the node operator
``(I + 2 tau_i Q_i)^-1`` cached per node (``d^2`` flops per node), one product ``T D^T u``
(``D^T`` pre-scaled by ``tau``), one product ``sigma D (2 w^{k+1} - w^k)`` (``D`` pre-scaled by
``sigma``), the flows updated and projected in place.  Both run in one process, in alternating
rounds (round 0 a warm-up, not counted), on one thread; each round reports seconds per
iteration as wall time and as process CPU time (less sensitive to other processes on a shared
machine), the package's "loop" time being ``total - setup - certificate`` of its timings (the
residual evaluation of the last iteration included).  ``--memory plain|package`` instead runs
one of them alone (five iterations after the set-up) and prints the process's peak RSS.

    PYTHONPATH=. python benchmarks/bench_pd_loop.py --n 100000 --E 1000000 --rounds 7
    PYTHONPATH=. python benchmarks/bench_pd_loop.py --n 100000 --E 1000000 --memory plain
    PYTHONPATH=. python benchmarks/bench_pd_loop.py --n 100000 --E 1000000 --setup-calls 3
    PYTHONPATH=. python benchmarks/bench_pd_loop.py --n 20000 --E 200000 --certificate-cost 5,12
"""

import argparse
import os
import resource
import time

import _pin_threads  # noqa: F401  (one BLAS/OpenMP thread, before numpy)
import numpy as np
import scipy.sparse as sp

import gtvmodel as gm


def random_instance(n: int, E: int, d: int, m: int, seed: int = 0):
    """``E`` distinct random edges ``i < j`` of ``n`` nodes (in random order) and squared-loss
    data ``X`` (``(n, m, d)``), ``y = X w + 0.1 noise``."""
    rng = np.random.default_rng(seed)
    k = int(E * 1.2) + 100
    a, b = rng.integers(0, n, k), rng.integers(0, n, k)
    a, b = a[a != b], b[a != b]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    _, idx = np.unique(lo.astype(np.int64) * n + hi, return_index=True)
    idx = np.sort(idx)[:E]
    rng.shuffle(idx)
    edges = np.stack([lo[idx], hi[idx]], 1)
    X = rng.standard_normal((n, m, d))
    y = np.einsum("nmd,nd->nm", X, rng.standard_normal((n, d))) \
        + 0.1 * rng.standard_normal((n, m))
    return edges, X, y


class PlainLoop:
    """The plain loop of the module docstring (isolated nodes are not handled: none here)."""

    def __init__(self, n: int, edges: np.ndarray, X: np.ndarray, y: np.ndarray, lam: float,
                 c: float):
        E, (m, d) = len(edges), X.shape[1:]
        D = sp.csr_matrix((np.tile([1.0, -1.0], E), (np.repeat(np.arange(E), 2),
                                                      edges.ravel())), shape=(E, n))
        deg = np.bincount(edges.ravel(), minlength=n)
        tau = c / np.maximum(deg, 1)
        self.Ds = (0.5 / c) * D
        self.DTt = (sp.diags(tau) @ D.T).tocsr()
        Q = np.einsum("kri,krj->kij", X, X) / m
        b = 2 * tau[:, None] * np.einsum("kri,kr->ki", X, y) / m
        self.M = np.linalg.inv(np.eye(d) + 2 * tau[:, None, None] * Q)
        self.b = np.einsum("kij,kj->ki", self.M, b)
        self.lam, self.shape = lam, (n, E, d)

    def run(self, iters: int) -> tuple[np.ndarray, np.ndarray]:
        n, E, d = self.shape
        W, Wn, V = np.zeros((n, d)), np.empty((n, d)), np.empty((n, d))
        U, nrm = np.zeros((E, d)), np.empty(E)
        for _ in range(iters):
            np.subtract(W, self.DTt @ U, out=V)
            np.einsum("kij,kj->ki", self.M, V, out=Wn)
            Wn += self.b
            np.multiply(Wn, 2.0, out=V)
            V -= W
            U += self.Ds @ V
            np.sqrt(np.einsum("ij,ij->i", U, U, out=nrm), out=nrm)
            np.divide(self.lam, np.maximum(nrm, self.lam, out=nrm), out=nrm)
            U *= nrm[:, None]
            W, Wn = Wn, W
        return W, U


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for k, v in dict(n=100_000, E=1_000_000, d=10, m=5, iters=5, rounds=5).items():
        ap.add_argument(f"--{k}", type=lambda s: int(float(s)), default=v)
    ap.add_argument("--lam", type=float, default=0.1)
    ap.add_argument("--c", type=float, default=1.0)
    ap.add_argument("--memory", choices=("plain", "package"), default=None)
    ap.add_argument("--setup-calls", type=int, default=0,
                    help="instead: this many calls with --isolated extra isolated nodes, "
                         "each call's set-up (cached factorizations reused)")
    ap.add_argument("--isolated", type=int, default=2)
    ap.add_argument("--certificate-cost", default="",
                    help="instead: comma-separated m values; one certificate of a 30-iteration "
                         "iterate, in iterations, for each")
    a = ap.parse_args()
    if a.setup_calls:
        setup_calls(a)
        return
    if a.certificate_cost:
        certificate_cost(a, [int(v) for v in a.certificate_cost.split(",")])
        return
    print(f"measuring {gm.__file__}; n={a.n} |E|={a.E} d={a.d} m={a.m} iters/round={a.iters} "
          f"rounds={a.rounds}; load {os.getloadavg()[0]:.2f}", flush=True)
    edges, X, y = random_instance(a.n, a.E, a.d, a.m)
    if a.memory != "package":
        t = time.perf_counter()
        plain = PlainLoop(a.n, edges, X, y, a.lam, a.c)
        print(f"plain set-up {time.perf_counter() - t:.2f} s", flush=True)
    if a.memory != "plain":
        t = time.perf_counter()
        model = gm.GTVModel.from_edges(a.n, edges, dim=a.d, penalty=gm.Norm2(), lam=a.lam)
        model.set_data(X, y, "squared")
        print(f"model build {time.perf_counter() - t:.2f} s", flush=True)
    del X, y
    if a.memory is not None:
        if a.memory == "plain":
            plain.run(a.iters)
        else:
            model.solve_primal_dual(max_iter=a.iters, tol=0, step=a.c, record_every=None)
        print(f"{a.memory} alone: peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
        return
    rows = []
    for r in range(a.rounds + 1):
        w0, c0 = time.perf_counter(), time.process_time()
        W, _ = plain.run(a.iters)
        pw, pc = (time.perf_counter() - w0) / a.iters, (time.process_time() - c0) / a.iters
        c0 = time.process_time()
        res = model.solve_primal_dual(max_iter=a.iters, tol=0, step=a.c, record_every=None)
        tm = res.timings
        cpu_total = time.process_time() - c0
        loop = (tm["total"] - tm["setup"] - tm["certificate"]) / a.iters
        # the package's CPU time of the loop: its share of the call's CPU time by wall time
        gc = cpu_total * (tm["total"] - tm["setup"]) / tm["total"] / a.iters
        dw = np.abs(res.weights - W).max()
        node, edge = (tm[k] / a.iters * 1e3 for k in ("node_updates", "edge_updates"))
        print(f"round {r}: plain {pw * 1e3:.0f} ms/it (CPU {pc * 1e3:.0f}) | package loop "
              f"{loop * 1e3:.0f} ms/it (CPU ~{gc * 1e3:.0f}), node {node:.0f}, edge "
              f"{edge:.0f}, set-up {tm['setup']:.2f} s, kernel {res.kernel} | max|dW| "
              f"{dw:.1e} | load {os.getloadavg()[0]:.2f}", flush=True)
        if r:
            rows.append((pw / loop, pc / gc))
    s = np.array(rows)
    print(f"SUMMARY plain/package per iteration (speed-up of the package): wall "
          f"{np.median(s[:, 0]):.2f}x ({s[:, 0].min():.2f}-{s[:, 0].max():.2f}), CPU "
          f"{np.median(s[:, 1]):.2f}x ({s[:, 1].min():.2f}-{s[:, 1].max():.2f}) over "
          f"{len(s)} rounds")


def setup_calls(a: argparse.Namespace) -> None:
    """Each call's set-up on a model with ``a.isolated`` isolated nodes beside the coupled
    ones (the node-update group is then not the whole structure batch)."""
    edges, X, y = random_instance(a.n, a.E, a.d, a.m)
    Xi, yi = random_instance(a.isolated + 2, 1, a.d, a.m, seed=1)[1:]
    model = gm.GTVModel.from_edges(a.n + a.isolated, edges, dim=a.d, penalty=gm.Norm2(),
                                   lam=a.lam)
    model.set_data(np.concatenate([X, Xi[:a.isolated]]), np.concatenate([y, yi[:a.isolated]]),
                   "squared")
    print(f"model with {a.isolated} isolated nodes; load {os.getloadavg()[0]:.2f}", flush=True)
    first = None
    for call in range(a.setup_calls):
        t = time.perf_counter()
        r = model.solve_primal_dual(max_iter=2, tol=0, step=a.c, record_every=None)
        setup = r.timings["setup"]
        first = setup if first is None else first
        print(f"call {call + 1}: set-up {setup:.2f} s ({setup / first:.1%} of the first), "
              f"wall {time.perf_counter() - t:.2f} s, paths {r.paths}; load "
              f"{os.getloadavg()[0]:.2f}", flush=True)


def certificate_cost(a: argparse.Namespace, ms: list[int]) -> None:
    """One certificate (``gm.certify(..., fallback=False)``, three repeats) of the iterate after
    30 iterations of the default step rule, in seconds and in iterations of the same run, for
    each number of samples ``m`` (``m < d``: the subspace conditions of repair step 2)."""
    for m in ms:
        edges, X, y = random_instance(a.n, a.E, a.d, m)
        model = gm.GTVModel.from_edges(a.n, edges, dim=a.d, penalty=gm.Norm2(), lam=a.lam)
        model.set_data(X, y, "squared")
        model.solve_primal_dual(max_iter=30, tol=0, record_every=None)
        r = model.solve_primal_dual(max_iter=30, tol=0, record_every=None)
        it = (r.timings["node_updates"] + r.timings["edge_updates"]) / 30
        cs = []
        for _ in range(3):
            t = time.perf_counter()
            cert = gm.certify(model, r.weights, r.flows, fallback=False)
            cs.append(time.perf_counter() - t)
        print(f"m={m} d={a.d}: iteration {it * 1e3:.0f} ms; certificate "
              + "/".join(f"{c:.2f}" for c in cs) + " s = "
              + "/".join(f"{c / it:.0f}" for c in cs) + f" iterations (first/second/third); "
              f"relative gap {cert.relative_gap:.2e}; load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
