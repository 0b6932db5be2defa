"""Matrix parameters ``dim=(p, q)``: the cost of the nuclear norm against the Frobenius norm
(``Norm2`` on the flat difference), side by side on one model of multi-output squared losses.

Two measurements, each in alternating rounds (round 0 a warm-up, not counted), medians and
min-max of the rest:

* Algorithm 1 at a fixed number of iterations (``tol=0``, no certificates): seconds per
  iteration; its edge update DU (33) is a row-wise rescaling for ``Norm2`` and a batched SVD
  (``(|E|, p, q)``) with singular values clipped for ``NuclearNorm``;
* ``solve_exact`` on a smaller graph: SOC cones per edge for ``Norm2``, semidefinite cones
  (``normNuc``, one per edge) for ``NuclearNorm``.

    PYTHONPATH=. python benchmarks/bench_matrix_params.py --n 2000 --E 8000 --p 4 --q 3
"""

import argparse
import time

import _pin_threads  # noqa: F401  (one BLAS/OpenMP thread, before numpy)
import networkx as nx
import numpy as np

import gtvmodel as gm


def instance(n: int, E: int, p: int, q: int, m: int, seed: int = 0) -> tuple:
    """A random graph with ``E`` edges and ``n`` nodes, multi-output samples of 4 clusters."""
    rng = np.random.default_rng(seed)
    G = nx.gnm_random_graph(n, E, seed=seed)
    B = rng.normal(size=(4, p, q))
    X = rng.normal(size=(n, m, p))
    Y = np.einsum("nmp,npq->nmq", X, B[np.arange(n) % 4]) + 0.1 * rng.normal(size=(n, m, q))
    return G, X, Y


def models(G, X, Y, lam: float) -> dict:
    p, q = X.shape[2], Y.shape[2]
    out = {}
    for name, pen in (("Norm2 (Frobenius)", gm.Norm2()), ("NuclearNorm", gm.NuclearNorm((p, q)))):
        model = gm.GTVModel(G, dim=(p, q), penalty=pen, lam=lam)
        model.set_data(X, Y)
        out[name] = model
    return out


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def rounds(jobs: dict, count: int) -> dict:
    """Alternating rounds of every job; round 0 is a warm-up."""
    times: dict = {k: [] for k in jobs}
    for r in range(count + 1):
        for name, job in jobs.items():
            t = timed(job)
            if r:
                times[name].append(t)
    return times


def report(title: str, times: dict, per: float = 1.0, unit: str = "s") -> None:
    base = None
    print(title)
    for name, ts in times.items():
        ts = np.asarray(ts) / per
        med = float(np.median(ts))
        base = med if base is None else base
        print(f"  {name:20s} {med:.4g} {unit} [{ts.min():.4g}-{ts.max():.4g}]  "
              f"ratio {med / base:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--E", type=int, default=8000)
    ap.add_argument("--p", type=int, default=4)
    ap.add_argument("--q", type=int, default=3)
    ap.add_argument("--m", type=int, default=8)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--exact-n", type=int, default=60)
    ap.add_argument("--exact-E", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lam", type=float, default=0.05)
    args = ap.parse_args()
    print(f"threads: {_pin_threads.THREADS}")

    G, X, Y = instance(args.n, args.E, args.p, args.q, args.m)
    ms = models(G, X, Y, lam=args.lam)
    jobs = {name: (lambda md=md: gm.solve_primal_dual(
        md, max_iter=args.iters, tol=0.0, record_every=None, certificate_budget=None))
        for name, md in ms.items()}
    report(f"Algorithm 1, n = {args.n}, |E| = {args.E}, shape ({args.p}, {args.q}), "
           f"lambda = {args.lam}, {args.iters} iterations: seconds per iteration",
           rounds(jobs, args.rounds), per=args.iters)

    G, X, Y = instance(args.exact_n, args.exact_E, args.p, args.q, args.m, seed=1)
    ms = models(G, X, Y, lam=args.lam)
    for md in ms.values():
        md.solve_exact()  # the compiled problems cached: rounds time the solves
    jobs = {name: (lambda md=md: md.solve_exact()) for name, md in ms.items()}
    report(f"solve_exact, n = {args.exact_n}, |E| = {args.exact_E}, shape ({args.p}, "
           f"{args.q}), lambda = {args.lam}: seconds", rounds(jobs, args.rounds))


if __name__ == "__main__":
    main()
