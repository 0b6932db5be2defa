"""The certificates' share of a stopping run of Algorithm 1 (``solve_primal_dual(tol=1e-6,
record_every=10)``): the default ``certificate_budget`` (25 %) against a certificate at every
``record_every`` (``certificate_budget=None``), side by side on the same model.

Instance: paper 000's setting (``datasets.paper000_sbm()``, ``Norm1``, lambda = 1e-3; the
share and the cost of a certificate in iterations of docs/primal_dual.md).  The same share on
a ``G(n, m)`` random graph is ``bench_certify_scale.py --stopping N E``.  Reported per run: the
iterations, the number of certificates, their seconds against the run's (``timings``), and the
mean seconds of one iteration and of one certificate.  BLAS and Clarabel
threads pinned to one (``_pin_threads``).

Run:  python benchmarks/bench_certificate_budget.py
"""

from __future__ import annotations

import argparse

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)

import gtvmodel as gm
from gtvmodel.datasets import paper000_sbm


def report(name: str, model: gm.GTVModel) -> None:
    """Both schedules on ``model``, one row each."""
    for budget in (0.25, None):
        res = gm.solve_primal_dual(model, tol=1e-6, record_every=10, certificate_budget=budget)
        t = res.timings
        per_it = (t["node_updates"] + t["edge_updates"]) / max(res.iterations, 1)
        certs = len(res.history)
        per_cert = t["certificate"] / max(certs, 1)
        print(f"{name:<22}{str(budget):>8}{res.status:>11}{res.iterations:>7}{certs:>7}"
              f"{t['certificate']:>9.2f}{t['total']:>9.2f}"
              f"{100 * t['certificate'] / t['total']:>8.0f} %{1e3 * per_it:>10.2f}"
              f"{1e3 * per_cert:>10.1f}", flush=True)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print(f"threads {_pin_threads.THREADS}; tol 1e-6, record_every 10")
    print(f"{'instance':<22}{'budget':>8}{'status':>11}{'iters':>7}{'certs':>7}"
          f"{'cert [s]':>9}{'run [s]':>9}{'share':>10}{'ms/iter':>10}{'ms/cert':>10}")
    report("paper 000 (Norm1)", paper000_sbm().model(gm.Norm1(), lam=1e-3))


if __name__ == "__main__":
    main()
