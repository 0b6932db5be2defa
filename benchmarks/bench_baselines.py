"""Benchmark: the FL baselines beside GTV minimization on paper 001 Table I's setting (issue 10).

Paper 001 Table I: SBM with clusters 50 + 50, ``p_in = 0.5``, ``p_out = 1e-2``, ``m_i = 10``
samples of ``d = 100`` features at every node, labels (38) with ``sigma = 1e-3``, true cluster
weights in ``{0, 1}^d`` with i.i.d. Bernoulli(1/2) entries; GTV with ``phi = ||.||_2`` at
``lambda = 1e-2`` (001 VI).  The instance is built with ``datasets.sbm`` (the cluster weights
drawn here; there is no ``datasets.table1``).  Every method runs, side by side in one run
(BLAS pinned to one thread), for the same number ``R`` of communication rounds (Algorithm 1:
``R`` iterations); one-shot methods (local, pooled, oracle, exact) once.  Printed per method:
MSE (40) to the true weights, the certified gap of its own target where defined (baselines:
their ``target``; Algorithm 1 and exact: the GTV problem (16); ADMM's weights without its
flows, whose certificate falls back to a flow projection too large for this machine), values
sent, and the time per
round of the method itself (recording and certificates excluded) over the time of one
Algorithm 1 iteration (its node and edge updates).

Run: ``.venv/bin/python benchmarks/bench_baselines.py [--rounds 100 500] [--seed 0]``.
"""

from __future__ import annotations

import argparse
import time

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import numpy as np

import gtvmodel as gm
from gtvmodel import baselines, datasets
from gtvmodel.baselines import certify_target
from gtvmodel.comparison import default_step

LAM = 1e-2


def table1(seed: int) -> datasets.NetworkedData:
    """Paper 001 Table I's instance (module docstring)."""
    rng = np.random.default_rng(seed)
    cluster_weights = rng.integers(0, 2, size=(2, 100)).astype(float)
    return datasets.sbm(sizes=(50, 50), p_in=0.5, p_out=1e-2, m=10,
                        cluster_weights=cluster_weights, sigma=1e-3, seed=seed)


def iterative(model: gm.GTVModel, data: datasets.NetworkedData, R: int,
              only: list[str] | None = None) -> dict:
    """``name -> (result, method seconds per round)`` of the methods run for ``R`` rounds
    (with ``only``: those whose name contains one of its strings, and Algorithm 1)."""
    step = default_step(model, "bench")
    grad = dict(rounds=R, local_steps=5, step=step)
    runs = {
        "fedavg (E=5)": lambda: baselines.fedavg(model, **grad),
        "fedprox (E=5, mu=1)": lambda: baselines.fedprox(model, 1.0, **grad),
        "fedrelax": lambda: baselines.fedrelax(model, rounds=R, tol=0.0),
        "ifca (k=2, E=5)": lambda: baselines.ifca(model, 2, restarts=1, **grad),
        "admm (rho=1 fixed)": lambda: baselines.admm(model, rounds=R, abs_tol=0.0, rel_tol=0.0,
                                                     balance_rounds=0, certify=False),
        "admm (balanced)": lambda: baselines.admm(model, rounds=R, abs_tol=0.0, rel_tol=0.0,
                                                  certify=False),
    }
    if only:
        runs = {k: v for k, v in runs.items() if any(o in k for o in only)}
    out = {}
    for name, run in runs.items():
        res = run()
        out[name] = (res, res.timings["rounds"] / max(res.rounds, 1))
    pd = gm.solve_primal_dual(model, max_iter=R, tol=1e-15, record_every=R,
                              certificate_budget=None)
    t = pd.timings
    out["Algorithm 1"] = (pd, (t["node_updates"] + t["edge_updates"]) / pd.iterations)
    return out


def one_shot(model: gm.GTVModel, data: datasets.NetworkedData, exact_only: bool = False
             ) -> dict:
    """``name -> (result, seconds)`` of the one-shot methods (only ``exact`` if asked)."""
    out = {}
    runs = {"local": lambda: baselines.local(model),
            "pooled": lambda: baselines.pooled(model),
            "oracle": lambda: baselines.oracle(model, data.partition()),
            "exact": lambda: gm.solve_exact(model)}
    if exact_only:
        runs = {"exact": runs["exact"]}
    for name, run in runs.items():
        t = time.perf_counter()
        res = run()
        out[name] = (res, time.perf_counter() - t)
    return out


def gap(model: gm.GTVModel, res) -> tuple[float, str]:
    """The certified gap of the result's own certificate and the problem it is on."""
    if not getattr(res, "convex", True):
        return np.nan, "-"
    cert = getattr(res, "certificate", None)
    if cert is None and getattr(res, "method", None) == "admm":
        try:  # ADMM's flows far from feasible send certify to the flow projection: too large
            return float(certify_target(model, res.weights, "gtv").gap), "gtv (no flows)"
        except MemoryError:
            return np.nan, "out of memory"
    if cert is None:
        return np.nan, "-"
    return float(cert.gap), str(getattr(res, "target", None) or "gtv")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, nargs="+", default=[100, 500])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="+", default=None,
                    help="run only the iterative methods whose name contains one of these")
    ap.add_argument("--no-one-shot", action="store_true",
                    help="skip local/pooled/oracle (exact is still solved for P*)")
    args = ap.parse_args()
    data = table1(args.seed)
    model = data.model(lam=LAM)
    print(f"001 Table I: SBM 50+50, |E| = {model.num_edges}, d = 100, m_i = 10, sigma = 1e-3, "
          f"lambda = {LAM}, Norm2; threads {_pin_threads.THREADS}; seed {args.seed}")
    shots = one_shot(model, data, exact_only=args.no_one_shot)
    p_star = shots["exact"][0].objective
    print(f"exact optimum P* = {p_star:.6g}")
    print(f"{'method':22s} {'MSE':>10s} {'gap':>10s} {'on':>12s} {'seconds':>9s}")
    for name, (res, sec) in shots.items():
        g, on = gap(model, res)
        print(f"{name:22s} {data.mse(res.weights):10.3g} {g:10.3g} {on:>12s} {sec:9.3f}")
    for R in args.rounds:
        runs = iterative(model, data, R, args.only)
        base = runs["Algorithm 1"][1]
        print(f"\nR = {R} rounds; one Algorithm 1 iteration: {base * 1e3:.3f} ms")
        print(f"{'method':22s} {'MSE':>10s} {'gap':>10s} {'on':>12s} {'values sent':>12s} "
              f"{'ms/round':>9s} {'x Alg.1':>8s}")
        for name, (res, per) in runs.items():
            g, on = gap(model, res)
            sent = getattr(res, "values_sent", 2 * model.num_edges * model.dim * R)
            print(f"{name:22s} {data.mse(res.weights):10.3g} {g:10.3g} {on:>12s} "
                  f"{sent:12.3g} {per * 1e3:9.3f} {per / base:8.2f}")


if __name__ == "__main__":
    main()
