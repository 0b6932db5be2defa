"""The numerical kernels (gtvmodel/kernels/: the batched active-set proxes, Newton, the
trust-region ball step) before vs after a change, side by side in one run, through the public
API only: Algorithm 1's node updates PU (32) and the certificate's conjugates are where they
run.

What: on two checkouts of the package (the old one extracted without touching git state,
``git archive <rev> gtvmodel | tar -x -C DIR``, and this checkout), each workload is timed
**alternately** (old, new, old, new, ...) in worker subprocesses with single-threaded BLAS;
the driver prints the medians over rounds of the old and new times and the median (min-max)
over rounds of the per-round ratio new / old.  An SBM graph of ``n`` nodes (two blocks), ``m =
8`` samples of dimension ``d = 4`` per node, ``lam = 0.05``, ``iters`` iterations of Algorithm 1
(``tol = 0``: no early stop; the certificate every 50):

- ``hinge l1 box``: hinge loss with ``l1`` and a Box: ``composite_active_set_prox``;
- ``huber ball``: Huber loss with a Euclidean ball: the trust-region ball step;
- ``squared l1 ball1``: squared loss with ``l1`` and a 1-norm ball;
- ``absolute``: the absolute loss with ``l2``: ``dual_active_set_prox``;
- ``logistic l1 box``: logistic with ``l1`` and a Box: proximal Newton over the composite prox;
- ``logistic``: logistic with ``l2``: ``newton_minimize`` (prox), and the certificate's
  conjugates (``newton_minimize`` on ``-f``);
- ``certify logistic``: one certificate of the last weights (the conjugates by Newton).

``--identity`` instead runs every workload once in each checkout (60 nodes, 80 iterations, a
certificate every 20) and compares the bytes of the iterates ``w``, ``u``, the gaps, the
objective, a certificate of the last weights (gap, flows), the paths taken and the bytes of
the model's problem file: a refactoring that should not change behaviour prints
``identical``.

Usage::

    python benchmarks/bench_kernels.py --old /tmp/gtv_old [--new <checkout>] [--rounds 5]
        [--n 200] [--iters 100] [--repeats 3]
    python benchmarks/bench_kernels.py --old /tmp/gtv_old --identity
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

WORKLOADS = ["hinge l1 box", "huber ball", "squared l1 ball1", "absolute", "logistic l1 box",
             "logistic", "certify logistic"]


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _model(gm, n: int, make_loss, constraint=None):
    """An SBM model of ``n`` nodes whose node ``i`` has the loss ``make_loss(X, y)`` and,
    where given, the constraint ``constraint()``."""
    from gtvmodel import datasets

    half = n // 2
    data = datasets.sbm(sizes=(half, half), p_in=0.1, p_out=0.005, m=8, seed=1)
    rng = np.random.default_rng(2)
    model = gm.GTVModel(data.graph, 4, lam=0.05)
    for v in data.nodes:
        X = rng.standard_normal((8, 4))
        y = np.sign(X @ np.array([1.0, -1.0, 0.5, 0.0]) + 0.3 * rng.standard_normal(8))
        model.set_loss(v, make_loss(X, y))
        if constraint is not None:
            model.add_constraint(v, constraint())
    return model


def _cases(gm) -> dict:
    """Each workload's loss (of ``X``, ``y``) and constraint factory (None: none)."""
    return {
        "hinge l1 box": (lambda X, y: gm.HingeLoss(X, y, l1=0.05), lambda: gm.Box(-0.5, 0.5)),
        "huber ball": (lambda X, y: gm.HuberLoss(X, y, M=0.5), lambda: gm.NormBall(0.4)),
        "squared l1 ball1": (lambda X, y: gm.SquaredLoss(X, y, l1=0.05),
                             lambda: gm.NormBall(0.6, p=1)),
        "absolute": (lambda X, y: gm.AbsoluteLoss(X, y, l2=0.01), None),
        "logistic l1 box": (lambda X, y: gm.LogisticLoss(X, y, l1=0.05),
                            lambda: gm.Box(-0.5, 0.5)),
        "logistic": (lambda X, y: gm.LogisticLoss(X, y, l2=0.01), None),
    }


def _digest(a) -> str:
    return hashlib.sha1(np.ascontiguousarray(np.asarray(a, dtype=float)).tobytes()).hexdigest()


def identity_worker() -> None:
    """Digests of every workload's run (``--identity``)."""
    import gtvmodel as gm

    out: dict[str, object] = {"file": gm.__file__}
    for name, (loss, con) in _cases(gm).items():
        model = _model(gm, 60, loss, con)
        res = model.solve_primal_dual(max_iter=80, tol=0.0, record_every=20)
        cert = model.certify(res.weights)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.npz")
            model.save(path)
            file = hashlib.sha1(Path(path).read_bytes()).hexdigest()
        out[name] = {"w": _digest(res.weights), "u": _digest(res.flows), "gap": repr(res.gap),
                     "objective": repr(res.objective), "certificate gap": repr(cert.gap),
                     "certificate flows": _digest(cert.flows), "paths": res.paths,
                     "problem file": file}
    print(json.dumps(out))


def worker(n: int, repeats: int, iters: int) -> None:
    import gtvmodel as gm

    out: dict[str, object] = {"file": gm.__file__}
    for name, (loss, con) in _cases(gm).items():
        model = _model(gm, n, loss, con)
        res = model.solve_primal_dual(max_iter=iters, tol=0.0)  # (compiles, warms caches)
        out[name] = _best(lambda m=model: m.solve_primal_dual(max_iter=iters, tol=0.0),
                          repeats)
        if name == "logistic":
            W = res.weights
            model.certify(W)
            out["certify logistic"] = _best(lambda m=model, W=W: m.certify(W), repeats)
    print(json.dumps(out))


def run_worker(root: str, n: int, repeats: int, iters: int, identity: bool = False) -> dict:
    env = dict(os.environ, PYTHONSAFEPATH="1", PYTHONPATH=root, OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, __file__, "--worker", "--n", str(n), "--repeats", str(repeats),
           "--iters", str(iters)] + (["--identity"] if identity else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"worker for {root} failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if not str(res["file"]).startswith(str(Path(root).resolve())):
        raise SystemExit(f"worker imported {res['file']}, not the code under {root}")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=False)
    ap.add_argument("--new", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--identity", action="store_true")
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args()
    if args.worker:
        if args.identity:
            identity_worker()
        else:
            worker(args.n, args.repeats, args.iters)
        return
    if not args.old:
        ap.error("--old is required (a directory holding an old gtvmodel package)")
    if args.identity:
        old, new = (run_worker(root, 0, 0, 0, identity=True) for root in (args.old, args.new))
        for w in (key for key in old if key != "file"):
            diff = [key for key in old[w] if old[w][key] != new[w][key]]
            print(f"{w:<18} {'identical' if not diff else 'DIFFERENT: ' + ', '.join(diff)}")
        return
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for r in range(args.rounds):
        for label, root in (("old", args.old), ("new", args.new)):
            runs[label].append(run_worker(root, args.n, args.repeats, args.iters))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"n = {args.n}, {args.iters} iterations, {args.rounds} rounds, best of {args.repeats} "
          "per round, single-threaded BLAS")
    print(f"{'workload':<18} {'old [s]':>9} {'new [s]':>9} {'new/old median (min-max)':>26}")
    for w in WORKLOADS:
        old = np.array([x[w] for x in runs["old"]])
        new = np.array([x[w] for x in runs["new"]])
        ratio = new / old
        print(f"{w:<18} {np.median(old):>9.4f} {np.median(new):>9.4f} "
              f"{np.median(ratio):>10.3f} ({ratio.min():.3f}-{ratio.max():.3f})")


if __name__ == "__main__":
    main()
