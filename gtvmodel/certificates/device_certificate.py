"""Certificates of Algorithm 1's iterate where it lies: on the device of the array backend.

The certified gap (34) of :func:`~gtvmodel.certificates.certificate.certify` splits into an edge
half and a node half once the flows are repaired (the decomposition of
:mod:`~gtvmodel.certificates.sharded_certificate`, with the edge rows in blocks for shards):

* **on the device** (``|E| x d`` work, blocks of
  :data:`~gtvmodel.primal_dual.torch_backend.EDGE_BLOCK_BYTES` edge rows so that the temporaries
  stay a block's size): steps 1 and 3 of the repair -- the decisions from every block's
  :func:`~gtvmodel.certificates.sharded_certificate.shard_scan` scalars
  (:func:`~gtvmodel.certificates.sharded_certificate.repair_plan`), then the projection onto the
  capacities (27) and the factor ``theta`` row by row
  (:func:`~gtvmodel.certificates.sharded_certificate.repair_rows`); the differences
  ``v_e = (D w)_e``, the GTV terms ``lambda A_e phi(v_e)``, the edge conjugates, the
  Fenchel-Young pairings ``u_e^T v_e`` and their magnitudes
  (:func:`~gtvmodel.certificates.sharded_certificate.edge_sums`: the penalties' row
  evaluations, written against the array API); the demands ``s = -D^T u'`` and
  ``|D|^T |u'|`` for their rounding bound (sparse CSR products, never dense);
* **with subspace conditions** (zero-loss nodes, squared losses with ``rank X_i < d``), step 2
  of the repair on the device too: the minimum-norm correction ``U - D Z`` through node
  potentials (:class:`~gtvmodel.certificates.device_subspace.DeviceSubspace`: conjugate
  gradients with the Laplacian as a CSR tensor, or the host solver's small factorization on
  a copy of the ``sum_i rank N_i`` residuals), alternated with the projection onto the
  capacities as :func:`~gtvmodel.certificates.repair.repair` does (:meth:`DeviceCertifier.
  _alternate`);
* **the squared losses' conjugates on the device too**: their split (work proportional to the
  samples: :func:`~gtvmodel.terms.losses.squared_maximizers`,
  :func:`~gtvmodel.terms.losses.datafit_conjugate_split` with its batched minimum-norm
  correction of the row duals) is written against the array API
  (:attr:`~gtvmodel.terms.losses.ConjugateGroup.array_api`) and runs on the demands where they
  were formed; its ``n``-sized results move to the host;
* **on the host**, in float64 numpy, from the ``n x d`` arrays ``W``, ``s`` and ``|D|^T |u'|``
  (``3 n d`` numbers moved instead of ``(n + |E|) d``): the loss values, the node constraints,
  the other node conjugates (closed forms of quadratic and zero losses, batched Newton of
  logistic and Huber losses, the cached CVXPY split) and the residual charges
  (:func:`~gtvmodel.certificates.sharded_certificate.node_sums`,
  :func:`~gtvmodel.certificates.value.node_bounds`; residuals above rounding are charged
  with radii certified from ``P(W)`` on first use, as :func:`certify` does), then the gap
  with its rounding bound (:func:`~gtvmodel.certificates.sharded_certificate.combine_parts`).

The result is the certificate that :func:`certify` (``fallback=False``) computes from host
copies of the iterate -- the same repair, terms and rounding bound, so the same gap up to the
order of the sums (``1e-15`` relative measured) -- or ``None`` where that certificate needs a
global step this split does not take; the caller then certifies host copies (and says so):

* ill-conditioned nodes (the affine variant of the repair) or ``lambda = 0`` (decided once
  per model, :func:`~gtvmodel.certificates.sharded_certificate.needs_gather`);
* without subspace conditions, one projection that does not reach the capacities (the
  serial repair alternates more rounds); nodes outside their conjugate domains beyond
  ``feas_tol`` (step 4 of the repair), residuals whose radius could not be certified,
  weights that violate a node's constraints;
* a float32 iterate (the certificate is computed in float64; on the host, from float64 copies);
* a model without edges (nothing to do on the device).

A certificate's ``timings["repair"]`` is the edge half, ``timings["evaluate"]`` the node
half; its ``flows`` and ``edge_gaps`` stay on the device until :func:`to_host` (the run's
final certificate).
"""

from __future__ import annotations

import time
from typing import Any, cast

import numpy as np

from .. import _xp
from ..declaration import ModelDeclaration
from .certificate import Certificate
from .device_subspace import DeviceSubspace
from .kinds import EPS, capacities, node_kinds, norm_penalty
from .repair import (
    LOOSE_RTOL,
    PROJECT_NOTE,
    alternate_rounds,
    capacity_ratio,
    rescale_note,
    scale_flows,
    subspace_note,
    within_rounding,
)
from .sharded_certificate import (
    combine_parts,
    edge_sums,
    join_sums,
    make_certificate,
    needs_gather,
    node_sums,
    repair_plan,
    repair_rows,
    shard_scan,
)
from .subspace import CG_RTOL, PotentialSolver, refine
from .value import demand_rounding

__all__ = ["DeviceCertifier", "to_host"]


class DeviceCertifier:
    """The certificates of one run on the device (module docstring): built with the run's
    model, its incidence matrix ``D`` and ``D^T`` as sparse CSR tensors and the byte size of
    an edge block; :meth:`__call__` certifies an iterate ``(W, U)`` of device tensors, or
    returns None (``reason`` says why) where the host's :func:`certify` must.

    Attributes
    ----------
    reason : str
        Why the last call returned None (empty after a certificate on the device).
    """

    def __init__(self, model: ModelDeclaration, torch: Any, D: Any, DT: Any, block_bytes: int):
        self.model, self.torch = model, torch
        self.D, self.DT, self.block_bytes = D, DT, block_bytes
        self.static_reason = needs_gather(model, subspace=True)
        self.reason = ""
        self._absDT: Any = None
        self.subspace: DeviceSubspace | None = None

    def _blocks(self, U: Any) -> list[slice]:
        """Slices of edge rows, each at most ``block_bytes`` of ``U``'s rows."""
        E = U.shape[0]
        rows = max(1, self.block_bytes // max(1, U.shape[1] * U.element_size()))
        return [slice(a, min(a + rows, E)) for a in range(0, E, rows)] or [slice(0, 0)]

    def _rows_of(self, M: Any, part: slice) -> Any:
        """The rows ``part`` of the CSR tensor ``M`` (views of its index and value arrays)."""
        crow = M.crow_indices()[part.start:part.stop + 1]
        lo, hi = int(crow[0]), int(crow[-1])
        return self.torch.sparse_csr_tensor(crow - lo, M.col_indices()[lo:hi],
                                            M.values()[lo:hi],
                                            size=(part.stop - part.start, M.shape[1]),
                                            check_invariants=False)

    def _abs_div(self, Up: Any, blocks: list[slice]) -> Any:
        """``|D|^T |u'|`` (``(n, d)``), ``|u'|`` formed a block of columns at a time."""
        torch = self.torch
        if self._absDT is None:  # |D^T|: D^T's index arrays with the absolute values
            DT = self.DT
            self._absDT = torch.sparse_csr_tensor(DT.crow_indices(), DT.col_indices(),
                                                  DT.values().abs(), size=DT.shape,
                                                  check_invariants=False)
        d = Up.shape[1]
        cols = max(1, d * (blocks[0].stop - blocks[0].start) // max(1, Up.shape[0]))
        out = torch.empty((self.DT.shape[0], d), dtype=Up.dtype, device=Up.device)
        for j in range(0, d, cols):
            out[:, j:j + cols] = self._absDT @ Up[:, j:j + cols].abs()
        return out

    def _excess(self, U: Any, blocks: list[slice]) -> float:
        """The largest capacity excess ``max_e (||u_e||_* - lambda A_e)_+`` (27), by blocks."""
        cap, pen = capacities(self.model), self.model.penalty
        if cap is None:
            return 0.0
        return max(max(float(self.torch.max(pen.dual_norm(U[b]) - _xp.like(cap[b], U))), 0.0)
                   for b in blocks)

    def _correct(self, U: Any, blocks: list[slice], loose: bool) -> tuple[Any, bool, bool]:
        """Step 2 in place: ``U - D Z``, the minimum-norm correction of the subspace conditions
        (:class:`~gtvmodel.certificates.device_subspace.DeviceSubspace`) with the host
        solver's refinement rounds (:func:`~gtvmodel.certificates.subspace.refine`), or with
        ``loose`` and conjugate gradients one round to the host's
        :data:`~gtvmodel.certificates.repair.LOOSE_RTOL` (the host's schedule,
        :func:`~gtvmodel.certificates.repair.alternate_rounds`); not done when the residual is
        rounding (:func:`~gtvmodel.certificates.repair.within_rounding`)."""
        sub = self.subspace
        assert sub is not None  # (called only with subspace conditions)
        r = sub.residual(U)
        if within_rounding(float(r.abs().max()), float(U.abs().max())):
            return U, False, False

        def step(r_: Any, rtol: float = CG_RTOL) -> None:
            Z = sub.potentials(r_, rtol)
            for b in blocks:
                U[b] -= self._rows_of(self.D, b) @ Z

        if loose and isinstance(sub.host, PotentialSolver):
            step(r, LOOSE_RTOL)
            return U, True, True
        refine(r, step, lambda: sub.residual(U), 3)
        return U, True, False

    def _alternate(self, U: Any, blocks: list[slice]) -> tuple[Any, float, list[str]]:
        """Steps 1-3 of the repair with subspace conditions, as
        :func:`~gtvmodel.certificates.repair.repair` takes them
        (:func:`~gtvmodel.certificates.repair.alternate_rounds`, 4 rounds): the projection onto
        the capacities (27) and the factor ``theta`` by edge blocks, the correction of the
        subspace conditions (:meth:`_correct`) on all flows."""
        model = self.model
        cap = cast(np.ndarray, capacities(model))  # (projected only for a norm penalty)
        pen = norm_penalty(model)

        def project(U_: Any) -> Any:
            for b in blocks:
                U_[b] = pen.project_dual_ball(U_[b], _xp.like(cap[b], U_))
            return U_

        Up, did_cap, did_sub = alternate_rounds(
            U.clone(), lambda U_: self._excess(U_, blocks), project,
            lambda U_, loose: self._correct(U_, blocks, loose), max(1.0, float(U.abs().max())),
            4)
        theta = min(capacity_ratio(model, Up[b], b) for b in blocks)
        repairs = ([PROJECT_NOTE] if did_cap else []) + ([subspace_note(model)] if did_sub
                                                          else [])
        if theta < 1.0:
            theta *= 1.0 - 4.0 * EPS
            for b in blocks:
                Up[b] = scale_flows(model, Up[b], theta, b)
            repairs += rescale_note(theta)
        return Up, theta, repairs

    def _repair(self, U: Any, blocks: list[slice]) -> tuple[Any, float, list[str]] | None:
        """The repaired flows, ``theta`` and the repair notes; None where the host must
        repair (one projection that does not reach the capacities, without subspace
        conditions: the decisions of :func:`~gtvmodel.certificates.sharded_certificate.
        repair_plan`)."""
        if self.subspace is not None:
            return self._alternate(U, blocks)
        plan = repair_plan([shard_scan(self.model, U[b], b) for b in blocks])
        if plan is None:
            return None
        project, theta, repairs = plan
        Up = self.torch.empty_like(U)
        for b in blocks:
            Up[b] = repair_rows(self.model, U[b], project, theta, b)
        return Up, theta, repairs

    def __call__(self, W: Any, U: Any, tol: float = 1e-6, feas_tol: float = 1e-8
                 ) -> Certificate | None:
        """The certificate of the device iterate ``(W, U)`` (float64 tensors), or None."""
        t0 = time.perf_counter()
        model, torch = self.model, self.torch
        self.reason = self.static_reason or ("" if model.num_edges else "no edges")
        if self.reason:
            return None
        if W.dtype != torch.float64:
            self.reason = "a float32 iterate: certified in float64 from host copies"
            return None
        if self.subspace is None and node_kinds(model).subspace.size:
            self.subspace = DeviceSubspace(model, torch, self.DT, U)
        blocks = self._blocks(U)
        repaired = self._repair(U, blocks)
        if repaired is None:
            self.reason = "one projection onto the capacities did not reach them"
            return None
        Up, theta, repairs = repaired
        edge_gaps = torch.empty(U.shape[0], dtype=U.dtype, device=U.device)
        totals = np.zeros(4)
        finite = True
        cap = model.capacities
        for b in blocks:
            sums, edge_gaps[b] = edge_sums(model, Up[b], self._rows_of(self.D, b) @ W,
                                           _xp.like(cap[b], U))
            totals[:3] += sums[:3]
            finite &= bool(sums[3])
        S_t = -(self.DT @ Up)
        S = _xp.to_numpy(S_t)
        rnd = demand_rounding(model, _xp.to_numpy(self._abs_div(Up, blocks)))
        Wn = _xp.to_numpy(W)
        t1 = time.perf_counter()
        nodes, node_gaps = node_sums(model, model.num_nodes, Wn, S, rnd, feas_tol, (S_t, W),
                                     edge_P=float(totals[0]))
        values = combine_parts(model, [join_sums(nodes, [*totals[:3], float(finite)])], tol,
                               feas_tol)
        if values is None:
            self.reason = ("nodes outside their conjugate domains, residuals whose radius "
                           "could not be certified, or weights violating node constraints")
            return None
        cert = make_certificate(model, values, repairs, theta, Wn, Up, node_gaps, edge_gaps,
                                tol, feas_tol)
        t2 = time.perf_counter()
        cert.timings = {"repair": t1 - t0, "evaluate": t2 - t1, "total": t2 - t0}
        return cert


def to_host(cert: Certificate) -> Certificate:
    """``cert`` with its device arrays (repaired flows, edge gaps) as float64 numpy arrays."""
    cert.flows = _xp.to_numpy(cert.flows)
    cert.edge_gaps = _xp.to_numpy(cert.edge_gaps)
    return cert
