"""Step 2 of the certificate's repair on device flows: the minimum-norm correction of the
subspace conditions (zero-loss nodes, squared losses with ``rank X_i < d``) where the flows
are.

The correction ``delta = A^T z``, ``(A A^T) z = A u`` of
:func:`~gtvmodel.certificates.repair.repair` (the host's
:class:`~gtvmodel.certificates.subspace.PotentialSolver`,
:class:`~gtvmodel.certificates.subspace.MinNormSolver` or
:class:`~gtvmodel.certificates.subspace.RangeSolver`) is ``D Z`` for node potentials ``Z``
(:class:`~gtvmodel.certificates.subspace.SubspaceConditions`), so the ``|E| x d`` work -- the
residual ``A u`` from ``D^T U`` and the update ``U - D Z`` -- runs on the device, and only
``n x d``-sized vectors are solved for.  The solve follows the host solver's kind
(:func:`~gtvmodel.certificates.subspace.solver_kind`):

* ``"cg"`` (large systems): Jacobi-preconditioned conjugate gradients on the device, with
  ``A A^T`` applied through the Laplacian ``L = D^T D`` (a sparse CSR tensor, never ``A`` or
  ``A A^T``), the host's stopping rule (``rtol = 1e-12``) and iteration cap (every refinement
  round to ``1e-12``: the host's later rounds aim at ``REFINE_AIM ||b||`` instead,
  :func:`~gtvmodel.certificates.subspace.round_rtol`, which needs the first right-hand side);
* ``"dense"`` (at most :data:`~gtvmodel.certificates.subspace.DENSE_MAX` rows) and ``"range"``
  (small graphs with small allowed ranges): the host solver's cached factorization on a host
  copy of the residual (``sum_i rank N_i`` numbers), its multipliers or potentials copied
  back.

The same correction as the host's in exact arithmetic (``A^T z`` is unique for every ``z``
solving the consistent system); in floating point, equal up to the solvers' tolerance.
"""

from __future__ import annotations

from typing import Any

from .. import _xp
from ..declaration import ModelDeclaration
from .kinds import node_kinds
from .repair import cached_subspace_solver
from .subspace import (
    CG_RTOL,
    PotentialSolver,
    RangeSolver,
    SubspaceConditions,
    conjugate_gradients,
)

__all__ = ["DeviceSubspace"]


class DeviceSubspace:
    """The subspace conditions of ``model`` beside the device tensor ``ref``, with ``D^T`` as
    a sparse CSR tensor ``DT`` there (module docstring)."""

    def __init__(self, model: ModelDeclaration, torch: Any, DT: Any, ref: Any):
        self.DT = DT
        self.host = host = cached_subspace_solver(model)
        if isinstance(host, PotentialSolver):
            cond = host.conditions
            self.L = _xp.csr_tensor(torch, host.L, _xp.device_of(ref), ref.dtype)
        else:
            kinds = node_kinds(model)
            assert kinds.subspace_bases is not None  # (nodes on a subspace have bases)
            cond = SubspaceConditions.build(model, kinds.subspace, kinds.subspace_bases)
        self.conditions = cond.to(ref)

    def residual(self, U: Any) -> Any:
        """``A vec(U)``: the stacked ``N_i^T (D^T U)_i`` (0 where the conditions hold)."""
        return self.conditions.rows(self.DT @ U)

    def potentials(self, r: Any, rtol: float = CG_RTOL) -> Any:
        """The node potentials ``Z`` (``(n, d)``) of the minimum-norm ``delta = D Z`` with
        ``A delta = r``: conjugate gradients on the device (:class:`~gtvmodel.certificates.
        subspace.PotentialSolver`'s), else the host solver's factorization on a host copy of
        ``r`` (:class:`~gtvmodel.certificates.subspace.RangeSolver`'s potentials, or
        :class:`~gtvmodel.certificates.subspace.MinNormSolver`'s multipliers).  ``rtol``:
        the conjugate gradients' relative residual."""
        cond, host = self.conditions, self.host
        if isinstance(host, PotentialSolver):
            z = conjugate_gradients(lambda p: cond.normal(p, self.L.__matmul__), r, cond.diag,
                                    rtol, host.maxiter)
            return cond.potentials(z)
        rn = _xp.to_numpy(r)
        if isinstance(host, RangeSolver):
            return _xp.like(host.potentials(rn), r)
        return cond.potentials(_xp.like(host.multipliers(rn), r))
