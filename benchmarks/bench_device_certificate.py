"""Certificates on the device vs on host copies (issue 16 item 6), side by side in one run.

The model of ``bench_torch.py`` (``n`` nodes, ``10 n`` random edges, ``d = 10``, ``Norm2``,
``lambda = 0.1``) with ``--samples`` samples per squared loss (default 20 >= d: full rank; 5,
``bench_torch.py``'s default, makes every node rank-deficient: subspace conditions, whose
minimum-norm flow correction, conjugate gradients through node potentials, runs on the device
too).  The iterate is that of
``--iters`` iterations of ``solve_primal_dual(model, backend=gm.TorchBackend(DEVICE))``; then,
interleaved
``--repeats`` times, medians reported:

* **host**: what the run did before, :func:`gtvmodel.certify` (``fallback=False``) on float64
  numpy copies of the iterate (the copies included);
* **device**: :class:`gtvmodel.certificates.device_certificate.DeviceCertifier` on the tensors
  (edge half on the device, node half on the host from ``n x d`` arrays; its ``repair`` and
  ``evaluate`` timings are the two halves);

with the relative difference of the two gaps, the seconds per iteration of the device run,
and each certificate's cost in iterations.  ``DEVICE`` is ``cuda`` when a GPU is available,
else ``cpu`` (PyTorch's CPU build: the same code, no GPU speed-up to expect).

Run: ``python benchmarks/bench_device_certificate.py [--nodes 10000,100000] [--iters 20]
[--repeats 3] [--samples 20] [--device cuda]``.
"""

from __future__ import annotations

import argparse
import time

import _pin_threads  # noqa: F401  (first: pins BLAS/OpenMP threads before numpy/torch load)
import numpy as np
from bench_torch import random_model

import gtvmodel as gm
from gtvmodel import _xp
from gtvmodel.certificates.device_certificate import DeviceCertifier
from gtvmodel.primal_dual.torch_backend import EDGE_BLOCK_BYTES, csr_tensor


def _sync(torch, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="10000,100000")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    args = ap.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "CPU"
    print(f"torch {torch.__version__}, device {device} ({name}), torch threads "
          f"{torch.get_num_threads()}, {args.samples} samples per node, d = 10, medians of "
          f"{args.repeats} interleaved repeats")
    print(f"{'n':>8} {'|E|':>9} {'s/it':>8} {'host s':>8} {'device s':>9} "
          f"{'(dev+host half)':>16} {'host/device':>11} {'host its':>9} {'device its':>10} "
          f"{'gap rel diff':>12}")
    for n in (int(float(s)) for s in args.nodes.split(",")):
        model = random_model(n, 10, 10, samples=args.samples)
        res = gm.solve_primal_dual(model, max_iter=args.iters, tol=0.0, record_every=None,
                                   step=1.0, backend=gm.TorchBackend(device))
        per_it = (res.timings["node_updates"] + res.timings["edge_updates"]) / args.iters
        W = torch.as_tensor(res.weights, device=device)
        U = torch.as_tensor(res.flows, device=device)
        cert = DeviceCertifier(
            model, torch, csr_tensor(torch, model.incidence, device, torch.float64),
            csr_tensor(torch, model.incidence.T, device, torch.float64), EDGE_BLOCK_BYTES)
        # untimed warm-up of both (the model's cached node kinds and factorizations, |D^T|)
        gm.certify(model, res.weights, res.flows, fallback=False)
        cert(W, U)
        host_t, dev_t, halves = [], [], []
        gaps = (np.nan, np.nan)
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            c_dev = cert(W, U)
            _sync(torch, device)
            dev_t.append(time.perf_counter() - t0)
            if c_dev is None:
                raise SystemExit(f"the device certificate declined: {cert.reason}")
            halves.append((c_dev.timings["repair"], c_dev.timings["evaluate"]))
            t0 = time.perf_counter()
            c_host = gm.certify(model, _xp.to_numpy(W), _xp.to_numpy(U), fallback=False)
            host_t.append(time.perf_counter() - t0)
            gaps = (c_dev.gap, c_host.gap)
        h, dv = float(np.median(host_t)), float(np.median(dev_t))
        hv = np.median(np.array(halves), axis=0)
        rel = abs(gaps[0] - gaps[1]) / max(1.0, abs(gaps[1]))
        print(f"{n:>8} {model.num_edges:>9} {per_it:>8.4f} {h:>8.3f} {dv:>9.3f} "
              f"{hv[0]:>7.3f}+{hv[1]:<8.3f} {h / dv:>10.2f}x {h / per_it:>9.1f} "
              f"{dv / per_it:>10.1f} {rel:>12.1e}", flush=True)
        del model, res, W, U, cert


if __name__ == "__main__":
    main()
