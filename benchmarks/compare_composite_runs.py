"""Algorithm 1's iterates on the composite node updates, two checkouts compared bit for bit
(issue 29 item 1: the proximal Newton of ``SmoothCompositeProxBatch`` moved into
``gtvmodel/kernels/composite_newton.py`` with behaviour unchanged).

Each checkout runs, in its own subprocess (``PYTHONSAFEPATH=1 PYTHONPATH=<checkout>``,
single-threaded BLAS), ``iters`` iterations of Algorithm 1 (``tol = 0``, a certificate every
50) on an SBM graph of 40 nodes, 8 samples per node, on the workloads below, and saves the
weights, flows, gaps and objective values; the driver prints each workload's node-update
paths and the largest absolute difference of every array (0.0 and identical bytes: the
change kept every bit).

- logistic with ``l1``, a box, both, ``l1`` with ``NonNeg`` (the proximal Newton path),
  and ``l1`` with a Euclidean ball (the CVXPY path);
- softmax with ``l1`` and with ``l1`` and a box (``d = 6``: 2 features, 3 classes);
- Huber with ``l1`` and a box, and with a Euclidean ball (the active-set path).

Run:  python benchmarks/compare_composite_runs.py --old DIR [--new DIR] [--iters 300]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def _cases(gm) -> dict:  # noqa: ANN001
    """Each workload's loss of ``(X, y)``, constraint factory (None: none), softmax or not."""
    return {
        "logistic l1": (lambda X, y: gm.LogisticLoss(X, y, l1=0.05), None, False),
        "logistic box": (lambda X, y: gm.LogisticLoss(X, y, l2=0.01),
                         lambda: gm.Box(-0.3, 0.4), False),
        "logistic l1 box": (lambda X, y: gm.LogisticLoss(X, y, l1=0.05, l2=0.01),
                            lambda: gm.Box(-0.5, 0.5), False),
        "logistic l1 nonneg": (lambda X, y: gm.LogisticLoss(X, y, l1=0.02), gm.NonNeg, False),
        "logistic l1 ball": (lambda X, y: gm.LogisticLoss(X, y, l1=0.05),
                             lambda: gm.NormBall(0.4), False),
        "softmax l1": (lambda X, y: gm.SoftmaxLoss(X, y, n_classes=3, l1=0.05), None, True),
        "softmax l1 box": (lambda X, y: gm.SoftmaxLoss(X, y, n_classes=3, l1=0.05),
                           lambda: gm.Box(-0.3, 0.3), True),
        "huber l1 box": (lambda X, y: gm.HuberLoss(X, y, M=0.5, l1=0.05),
                         lambda: gm.Box(-0.5, 0.5), False),
        "huber ball": (lambda X, y: gm.HuberLoss(X, y, M=0.5), lambda: gm.NormBall(0.4),
                       False),
    }


def _model(gm, make_loss, constraint, softmax: bool, n: int = 40, d: int = 4):  # noqa: ANN001, ANN202
    from gtvmodel import datasets

    data = datasets.sbm(sizes=(n // 2, n // 2), p_in=0.15, p_out=0.01, m=8, seed=1)
    rng = np.random.default_rng(2)
    p = 2 if softmax else d
    model = gm.GTVModel(data.graph, 3 * p if softmax else d, lam=0.05)
    for v in data.nodes:
        X = rng.standard_normal((8, p)) * np.logspace(0, 0.5, p)
        if softmax:
            y = rng.integers(0, 3, 8)
        else:
            y = np.sign(X @ np.linspace(1, -1, p) + 0.3 * rng.standard_normal(8))
            y[y == 0] = 1.0
        model.set_loss(v, make_loss(X, y))
        if constraint is not None:
            model.add_constraint(v, constraint())
    return model


def worker(out: str, iters: int) -> None:
    import gtvmodel as gm

    arrays, paths = {}, {"file": gm.__file__}
    for name, (loss, con, softmax) in _cases(gm).items():
        res = _model(gm, loss, con, softmax).solve_primal_dual(max_iter=iters, tol=0.0,
                                                                record_every=50)
        for key, val in (("w", res.weights), ("u", res.flows), ("gap", res.gap),
                         ("objective", res.objective)):
            arrays[f"{name}/{key}"] = np.asarray(val, dtype=float)
        paths[name] = res.paths
    np.savez(out, **arrays)
    print(json.dumps(paths))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old")
    ap.add_argument("--new", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--worker")
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.iters)
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for side, root in (("old", args.old), ("new", args.new)):
            out = os.path.join(tmp, f"{side}.npz")
            env = dict(os.environ, PYTHONSAFEPATH="1", PYTHONPATH=root, OPENBLAS_NUM_THREADS="1")
            info = json.loads(subprocess.run(
                [sys.executable, __file__, "--worker", out, "--iters", str(args.iters)],
                env=env, cwd=tmp, capture_output=True, text=True, check=True).stdout)
            print(f"{side}: {info.pop('file')}")
            runs[side] = (dict(np.load(out)), info)
    (old, paths), (new, _) = runs["old"], runs["new"]
    worst = 0.0
    for name in paths:
        keys = [k for k in old if k.startswith(name + "/")]
        diff = max(float(np.max(np.abs(old[k] - new[k]), initial=0.0)) for k in keys)
        same = all(old[k].tobytes() == new[k].tobytes() for k in keys)
        worst = max(worst, diff)
        print(f"{name:<20} {str(paths[name]):<50} max |difference| {diff:.1e}  "
              f"identical bytes: {same}")
    print(f"{len(old)} arrays, {args.iters} iterations: max |difference| = {worst}")


if __name__ == "__main__":
    main()
