"""The cost of one certificate of an Algorithm 1 iterate in iterations of Algorithm 1, for
``m_i < d`` (every node rank-deficient: the subspace conditions of repair step 2, solved by
conjugate gradients through node potentials) and ``m_i >= d`` (none), and the peak memory of
the certificate against the solver's (issue 30 item 3).

The iteration is the wall time of its node and edge updates (``timings``); "in CPU time"
divides the certificate's ``time.process_time`` by the CPU time of the 10-iteration call
times the updates' share of that call's wall time (the call's set-up is not an iteration's).

Instance: ``bench_pd_loop.random_instance`` (a ``G(n, E)`` random graph, ``d = 10``, squared
losses with ``m`` samples, ``Norm2``, ``lambda = 0.1``); the iterate after 30 iterations of the
default step rule.  Per repeat, interleaved: 10 iterations of Algorithm 1 (its node and edge
updates, ``timings``) and one ``gm.certify(model, W, U, fallback=False)`` of the iterate; the
first certificate (which builds the node classification and the step-2 solver, cached on the
model) is reported apart.  Per ``m``: the median ratio certificate / iteration (min-max over
the repeats), the step-2 conjugate gradients (solves, products of ``A A^T``, seconds), and
``ru_maxrss`` (the process's peak) after the solver's 30 iterations and after the
certificates: one ``m`` per process for the memory of that instance alone, one certificate
alive at a time (``--hold``: also the first certificate, the previous repeat's certificate and
this repeat's solver result, the accounting of the runs before 2026-11-28 07:00 UTC).  BLAS
threads pinned to one (``_pin_threads``).

With ``--grid K`` the graph is the ``K x K`` grid instead (degree 4: a worse-conditioned
Laplacian).

Run:  python benchmarks/bench_certificate_cg.py --n 20000 --E 200000 --ms 5
      python benchmarks/bench_certificate_cg.py --n 20000 --E 200000 --ms 12
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import numpy as np
from bench_pd_loop import random_instance

import gtvmodel as gm
from gtvmodel.certificates import subspace


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Counted:
    """Wraps :func:`gtvmodel.certificates.subspace.conjugate_gradients`: solves, products of
    ``A A^T`` and seconds of the step-2 conjugate gradients."""

    def __init__(self) -> None:
        self.plain = subspace.conjugate_gradients
        self.reset()

    def reset(self) -> None:
        self.solves = self.products = 0
        self.seconds = 0.0

    def __call__(self, apply, b, diag, rtol, maxiter):
        def counted(p):
            self.products += 1
            return apply(p)

        t = time.perf_counter()
        z = self.plain(counted, b, diag, rtol, maxiter)
        self.seconds += time.perf_counter() - t
        self.solves += 1
        return z


def grid_instance(k: int, d: int, m: int, seed: int = 0):
    """The ``k x k`` grid graph (degree 4 inside) with :func:`random_instance`'s data."""
    idx = np.arange(k * k).reshape(k, k)
    edges = np.vstack([np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1),
                       np.stack([idx[:-1].ravel(), idx[1:].ravel()], 1)])
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((k * k, m, d))
    y = np.einsum("nmd,nd->nm", X, rng.standard_normal((k * k, d))) \
        + 0.1 * rng.standard_normal((k * k, m))
    return edges, X, y


def measure(a: argparse.Namespace, m: int) -> None:
    """One row: the certificate's cost for ``m`` samples per node."""
    if a.grid:
        a.n, (edges, X, y) = a.grid ** 2, grid_instance(a.grid, a.d, m)
        a.E = len(edges)
    else:
        edges, X, y = random_instance(a.n, a.E, a.d, m)
    model = gm.GTVModel.from_edges(a.n, edges, dim=a.d, penalty=gm.Norm2(), lam=a.lam)
    model.set_data(X, y, "squared")
    del X, y
    res = model.solve_primal_dual(max_iter=30, tol=0, record_every=None)
    W, U = res.weights, res.flows
    rss_solver = _rss_mib()
    cg = _Counted()
    subspace.conjugate_gradients = cg
    t = time.perf_counter()
    cert = gm.certify(model, W, U, fallback=False)
    first = time.perf_counter() - t
    first_cg = (cg.solves, cg.products, cg.seconds)
    gap, rel = cert.gap, cert.relative_gap
    if not a.hold:  # one certificate alive at a time (a user's run keeps the latest)
        del cert
    its, certs, cgs, cpu = [], [], [], []
    run = prev = None  # with --hold: this repeat's solver result, the previous certificate
    for _ in range(a.reps):
        c0 = time.process_time()
        r = model.solve_primal_dual(max_iter=10, tol=0, record_every=None)
        c1 = time.process_time()
        its.append((r.timings["node_updates"] + r.timings["edge_updates"]) / 10)
        r_tim = dict(r.timings)
        run = r if a.hold else None
        del r
        cg.reset()
        t = time.perf_counter()
        c = gm.certify(model, W, U, fallback=False)
        certs.append(time.perf_counter() - t)
        # the iteration's CPU time: the call's, times the share of the node and edge updates
        # in its wall time (the call's set-up, 0.04-0.08 s at 20,000 nodes, is not an
        # iteration's: counted in, it made an iteration look 1.8x as long)
        share = (r_tim["node_updates"] + r_tim["edge_updates"]) / r_tim["total"]
        cpu.append((time.process_time() - c1) / ((c1 - c0) * share / 10))
        cgs.append(cg.seconds)
        assert c.gap == gap or abs(c.gap - gap) <= 1e-12 * abs(gap)
        prev = c if a.hold else None
        del c
    del run, prev
    subspace.conjugate_gradients = cg.plain
    ratios = [c / i for c, i in zip(certs, its, strict=True)]
    it = statistics.median(its)
    print(f"m={m:<3} d={a.d} n={a.n} E={a.E}: iteration {1e3 * it:.1f} ms; certificate "
          f"{statistics.median(certs):.3f} s = {statistics.median(ratios):.1f} iterations "
          f"({min(ratios):.1f}-{max(ratios):.1f}), in CPU time {statistics.median(cpu):.1f} "
          f"({min(cpu):.1f}-{max(cpu):.1f}); first {first:.3f} s = {first / it:.1f}; CG "
          f"{cg.solves} solves, {cg.products} products, {statistics.median(cgs):.3f} s "
          f"(first: {first_cg[0]}, {first_cg[1]}, {first_cg[2]:.3f} s); gap {gap!r} "
          f"(relative {rel:.2e}); peak RSS solver {rss_solver:.0f} MiB, with "
          f"certificates {_rss_mib():.0f} MiB ({_rss_mib() / rss_solver:.2f}x); load "
          f"{os.getloadavg()[0]:.2f}; {gm.__file__}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for k, v in dict(n=20_000, E=200_000, d=10, reps=5, grid=0).items():
        ap.add_argument(f"--{k}", type=lambda s: int(float(s)), default=v)
    ap.add_argument("--ms", default="5,12", help="comma-separated samples per node")
    ap.add_argument("--lam", type=float, default=0.1)
    ap.add_argument("--hold", action="store_true",
                    help="keep the first certificate and the previous repeat's solver result "
                         "and certificate alive (the memory accounting before 2026-11-28 "
                         "07:00 UTC)")
    a = ap.parse_args()
    print(f"threads {_pin_threads.THREADS}", flush=True)
    for m in (int(v) for v in a.ms.split(",")):
        measure(a, m)


if __name__ == "__main__":
    main()
