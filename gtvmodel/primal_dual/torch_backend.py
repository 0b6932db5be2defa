"""Algorithm 1 (paper 001) on PyTorch tensors: ``solve_primal_dual(model,
backend=gm.TorchBackend(device="cuda"))``.

The same iteration as the numpy loop of :mod:`~gtvmodel.primal_dual.loop` -- PU (32) at
every node, DU (33) on every edge -- with the iterate ``(w^k, u^k)``, the products ``D w``,
``D^T u``, the steps and the capacities held as tensors on ``device`` (``"cpu"``, ``"cuda"``,
``"cuda:0"``, ...), the incidence matrix ``D`` and ``D^T`` as sparse CSR tensors (never dense).
The formulas are the package's own, written once against the array API
(:mod:`gtvmodel._xp`): the node updates are the node groups' (:mod:`.prox`; the closed forms
of the squared, quadratic and zero losses, with their box and norm-ball constraints, run on the
device; losses whose prox iterates in numpy -- logistic, Huber, hinge, absolute, softmax --
are computed in float64 numpy on the CPU and moved back), the edge updates are the penalties'
:meth:`~gtvmodel.terms.penalties.Penalty.dual_update` (every library penalty; ``NormP`` with
``p`` outside ``{1, 2, inf}`` projects in numpy on the CPU).  The run itself -- the step rule
(residual balancing), the certificate schedule, the history, the status and the result -- is
:class:`~gtvmodel.primal_dual.loop.Run`'s.

**Certificates** are computed where the iterate is
(:class:`~gtvmodel.certificates.device_certificate.DeviceCertifier`): the edge half -- the repair
of the flows, the GTV terms, the edge conjugates and the demands ``-D^T u'`` -- and the squared
losses' conjugates on the device, the rest of the node half (loss values, other node
conjugates, charges) in float64 numpy from ``n x d`` arrays: the same
certificate as the numpy path's :func:`~gtvmodel.certificates.certificate.certify` (with
subspace conditions, the minimum-norm flow correction runs on the device too,
:mod:`~gtvmodel.certificates.device_subspace`).  Where that certificate needs another global
step (the affine repair at ill-conditioned nodes, step 4 of the repair, radii that cannot be
certified, ...) or the iterate is float32, :func:`certify` runs on float64 numpy copies of
the iterate instead;
:attr:`~gtvmodel.primal_dual.result.PrimalDualResult.certificates_on_device` and
``host_reasons`` say how many certificates ran on the device and why the others did not.

**Precision.**  ``dtype="float64"`` (default) gives the numpy path's iterates to about
``1e-12`` relative (sums in another order); ``dtype="float32"`` halves memory and traffic, its
iterates agree with float64 to about ``1e-6`` relative to the largest weight and the certified
relative gap stalls at float32's accuracy (``1e-6`` to ``1e-8`` measured, docs/primal_dual.md):
ask float32 for ``tol >= 1e-5`` (the certificate itself is computed in float64 from the
float32 iterate, so it stays sound).

**Not supported** (raising :class:`~gtvmodel.errors.UnsupportedError` before any iteration):
nodes on the general CVXPY path (symbolic losses or constraints, data fits with ``l1`` or
constraints; ``prox="cvxpy"``) and penalties whose dual update is numpy-only (user-defined
penalties without :attr:`~gtvmodel.terms.penalties.Penalty.array_api`).  PyTorch is imported
only when this backend runs (``pip install 'gtvmodel[gpu]'``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .. import _xp
from .._xp import csr_tensor
from ..certificates.certificate import certify
from ..certificates.device_certificate import DeviceCertifier, to_host
from ..declaration import ModelDeclaration
from ..errors import ParameterError, UnsupportedError
from .backends import BACKENDS, Backend
from .loop import Iterate, Options, Run, RunArguments, check_options, raise_non_finite
from .prox import NodeUpdates
from .result import PrimalDualResult
from .steps import FixedSteps, ResidualBalancing, dual_residual, make_step_rule
from .updates import dual_argument, extrapolate, prox_point

__all__ = ["solve_torch", "TorchBackend", "DTYPES", "csr_tensor"]

#: The ``dtype`` values of the backend by name (``None`` is float64).
DTYPES = ("float64", "float32")

#: Bytes of edge rows per block of the dual update DU (33) on the device: its temporaries
#: (absolute values, scaled rows, ...) then take a block's size each instead of ``|E| x d``
#: (at 1e8 edges, d = 10, float64: 1 GiB against 8 GB per temporary).
EDGE_BLOCK_BYTES = 1 << 30


def solve_torch(model: ModelDeclaration, max_iter: int = 10_000, tol: float = 1e-6,
                prox: str = "auto", step: Any = None, warm_start: Any = None,
                callback: Callable[..., Any] | None = None, record_every: int = 50,
                progress: bool = False, batch_cvxpy: bool = True,
                certificate_budget: float | None = 0.25, *, device: Any = "cpu",
                dtype: Any = None) -> PrimalDualResult:
    """Algorithm 1 (paper 001) on PyTorch tensors on ``device``: PU (32) and DU (33) until the
    certified gap (34) is at most ``tol * max(1, |P(w)|)``, the same iterates, steps, history
    and status as :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual` (whose arguments
    these are; ``solve_primal_dual(model, backend=TorchBackend(device=..., dtype=...))`` runs
    the same; see the module
    docstring for what runs on the device).

    Parameters
    ----------
    model : ModelDeclaration
        The GTV minimization problem; its penalty's dual update and every node's update PU
        (32) must have a tensor form (library losses on the fast paths, no symbolic losses
        or constraints).
    max_iter, tol, prox, step, warm_start, record_every, progress, batch_cvxpy
        As :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`'s.
    callback : callable, optional
        As :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`'s, called with the
        device tensors ``(k, weights, flows)``.
    certificate_budget : float or None
        As :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`'s.
    device : str or torch.device
        ``"cpu"``, ``"cuda"``, ``"cuda:0"``, ... (a CUDA device must be available).
    dtype : None, "float64", "float32", torch.float64 or torch.float32
        The iterate's precision (None: float64); float32 is opt-in (module docstring).

    Returns
    -------
    PrimalDualResult
        As the numpy path's, with numpy (float64) weights and flows; ``callback(k, weights,
        flows)`` receives the device tensors.

    Raises
    ------
    UnsupportedError
        PyTorch is not installed; the penalty has a numpy-only dual update; or nodes need the
        general CVXPY node update (named), which has no tensor form.
    ParameterError
        ``device`` not a torch device, a CUDA device without CUDA or beyond the device count,
        a ``dtype`` other than those above, or a bad option of
        :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual` (named).
    DataError
        A ``warm_start`` of the wrong shape or not finite.

    Examples
    --------
    The numpy path's example on CPU tensors (PyTorch is an optional dependency:
    ``pip install 'gtvmodel[torch]'``):

    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), 1, penalty=gm.Norm2(), lam=1.0)
    >>> for i, a in enumerate([0.0, 1.0, 5.0]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> res = gm.solve_torch(model, tol=1e-8, device="cpu")  # doctest: +SKIP
    >>> res.status, np.round(res.weights.ravel(), 4).tolist()  # doctest: +SKIP
    ('converged', [0.5, 1.0, 4.5])
    """
    args = RunArguments(max_iter, tol, prox, step, warm_start, callback, record_every,
                        progress, batch_cvxpy, certificate_budget)
    return TorchBackend(device=device, dtype=dtype).solve(model, args)


@dataclass(frozen=True)
class TorchBackend(Backend):
    """Algorithm 1 on PyTorch tensors (the ``backend=`` of
    :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`; see the module docstring).

    Parameters
    ----------
    device : str or torch.device
        ``"cpu"`` (default), ``"cuda"``, ``"cuda:0"``, ... (checked when the run starts:
        PyTorch is imported only then).
    dtype : None, "float64", "float32", torch.float64 or torch.float32
        The iterate's precision (None: float64); float32 is opt-in (module docstring).

    Raises
    ------
    ParameterError
        ``device`` not a torch device (or CUDA asked without a GPU) or ``dtype`` not one of
        the above, named, when the run starts.
    UnsupportedError
        PyTorch is not installed (when the run starts).

    Examples
    --------
    >>> import gtvmodel as gm
    >>> gm.TorchBackend(device="cuda", dtype="float32")
    TorchBackend(device='cuda', dtype='float32')
    """

    name: ClassVar[str] = "torch"
    device: Any = "cpu"
    dtype: Any = None

    def solve(self, model: ModelDeclaration, args: RunArguments) -> PrimalDualResult:
        """:class:`_TorchRun`'s loop on ``device`` (raises as :func:`solve_torch`)."""
        t_start = time.perf_counter()
        torch = _import_torch()
        dev, dt = _check_device(torch, self.device), _check_dtype(torch, self.dtype)
        opts = check_options(args)
        _check_penalty(model)
        rule = make_step_rule(model, args.step)
        updates = NodeUpdates(model, args.prox, args.batch_cvxpy)
        _check_groups(model, updates)
        run = _TorchRun(model, opts, rule, updates, args.warm_start, args.progress, t_start,
                        torch, dev, dt)
        status = run.loop()
        return run.result(status)


def _import_torch() -> Any:
    """PyTorch, or :class:`UnsupportedError` saying how to install it."""
    try:
        import torch
    except ImportError as exc:
        raise UnsupportedError("solve_primal_dual(backend='torch'): the array backend needs "
                               "PyTorch: pip install 'gtvmodel[gpu]'") from exc
    return torch


def _check_device(torch: Any, device: Any) -> Any:
    """``device`` as a ``torch.device`` (errors name the argument; a CUDA device must exist)."""
    where = "solve_primal_dual"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ParameterError(f"{where}: device must name a torch device such as 'cpu' or "
                             f"'cuda:0', got {device!r}") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ParameterError(f"{where}: device={device!r} but CUDA is not available (no GPU "
                                 "or a CPU-only build of PyTorch); use device='cpu'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ParameterError(f"{where}: device={device!r} but only "
                                 f"{torch.cuda.device_count()} CUDA device(s) exist")
    elif dev.type != "cpu":
        raise ParameterError(f"{where}: device must be 'cpu' or a CUDA device, got {device!r}")
    return dev


def _check_dtype(torch: Any, dtype: Any) -> Any:
    """``dtype`` as ``torch.float64`` (None, "float64") or ``torch.float32``."""
    table = {None: torch.float64, "float64": torch.float64, "float32": torch.float32,
             torch.float64: torch.float64, torch.float32: torch.float32}
    try:
        return table[dtype]
    except (KeyError, TypeError):
        raise ParameterError(f"solve_primal_dual: dtype must be one of None, {DTYPES} or the "
                             f"torch dtypes of these names, got {dtype!r}") from None


def _check_penalty(model: ModelDeclaration) -> None:
    """The penalty's dual update DU (33) must be written against the array API."""
    if not model.penalty.array_api:
        raise UnsupportedError(f"solve_primal_dual(backend='torch'): the penalty "
                               f"{model.penalty!r} has a numpy-only dual update "
                               "(Penalty.array_api is False); use the numpy path "
                               "(backend='numpy')")


def _check_groups(model: ModelDeclaration, updates: NodeUpdates) -> None:
    """Every node's update PU (32) must accept tensors: names the nodes on the CVXPY path."""
    for grp in updates.groups:
        if not grp.array_api:
            names = [model.nodes[int(i)] for i in grp.nodes[:5]]
            more = " ..." if grp.nodes.size > 5 else ""
            raise UnsupportedError(
                f"solve_primal_dual(backend='torch'): node(s) {', '.join(map(repr, names))}{more} "
                f"need the general CVXPY node update ({grp.kind!r} path: symbolic losses or "
                "constraints, data fits with l1 or constraints, or prox='cvxpy'), which has no "
                "tensor form; use the numpy path (backend='numpy')")


class _DeviceUpdates:
    """The node updates PU (32) of :class:`~gtvmodel.primal_dual.prox.NodeUpdates`' groups on
    device tensors: each group's rows gathered by a device index, its update scattered back."""

    def __init__(self, updates: NodeUpdates, torch: Any, device: Any):
        self.updates = updates
        self.torch = torch
        n = updates.model.num_nodes
        whole = (len(updates.groups) == 1
                 and np.array_equal(updates.groups[0].nodes, np.arange(n)))
        # (copies: a group's positions are read-only arrays shared with the model's cache)
        self.rows = None if whole else [torch.tensor(g.nodes, device=device)
                                        for g in updates.groups]

    def __call__(self, V: Any, tau: Any, k: int, W_prev: Any) -> Any:
        """``W_new = PU(V)`` (32) for all nodes (rows of the device tensor ``V``)."""
        groups = self.updates.groups
        if self.rows is None:
            return groups[0].update(V, tau, k, W_prev)
        W = self.torch.empty_like(V)
        for grp, rows in zip(groups, self.rows, strict=True):
            W[rows] = grp.update(V[rows], tau[rows], k, W_prev[rows])
        return W

    def describe(self) -> dict[str, int]:
        """Number of nodes per path (:meth:`NodeUpdates.describe`)."""
        return self.updates.describe()


class _TorchRun(Run):
    """A run of Algorithm 1 on device tensors: the loop, the step rule, the certificate
    schedule, the history and the result are :class:`~gtvmodel.primal_dual.loop.Run`'s;
    the iteration runs on the device, the certificates on float64 numpy copies."""

    def __init__(self, model: ModelDeclaration, opts: Options,
                 rule: FixedSteps | ResidualBalancing, updates: NodeUpdates, warm_start: Any,
                 progress: bool, t_start: float, torch: Any, device: Any, dtype: Any):
        self.torch, self.device, self.dtype = torch, device, dtype
        super().__init__(model, opts, rule, updates, warm_start, progress, t_start)
        self.D = self._csr(model.incidence)
        self.DT = self._csr(self.DT)
        self.penalty, self.lamA = model.penalty, self._tensor(model.capacities)
        x = self.x
        self.x = Iterate(*(self._tensor(a) for a in (x.W, x.U, x.DTu)))
        self.Y = torch.empty_like(self.x.W)
        self.updates = _DeviceUpdates(updates, torch, device)
        self.certifier = DeviceCertifier(model, torch, self.D, self.DT, EDGE_BLOCK_BYTES)
        self.on_device = 0
        self.host_reasons: list[str] = []
        self.timings["setup"] = time.perf_counter() - t_start

    def _tensor(self, a: np.ndarray) -> Any:
        return self.torch.as_tensor(np.ascontiguousarray(a), dtype=self.dtype, device=self.device)

    def _csr(self, M: Any) -> Any:
        """A scipy sparse matrix as a sparse CSR tensor on the device (never dense)."""
        return csr_tensor(self.torch, M, self.device, self.dtype)

    def _set_steps(self, tau: np.ndarray, sigma: np.ndarray) -> None:
        """The steps ``tau_i``, ``sigma_e`` (numpy, from the step rule) as device tensors."""
        tau_t, sigma_t = self._tensor(tau), self._tensor(sigma)
        self.tau, self.sigma = tau_t, sigma_t
        self.tau_col, self.sigma_col = tau_t[:, None], sigma_t[:, None]

    def iterate(self, k: int) -> Iterate:
        """Iteration ``k`` on the device: PU (32) at every node, then DU (33) on every edge by
        the numpy loop's formulas (:func:`~gtvmodel.primal_dual.updates.extrapolate`,
        :func:`~gtvmodel.primal_dual.updates.dual_argument`) on whole tensors (a GPU wants them
        whole), DU itself in blocks of :data:`EDGE_BLOCK_BYTES` (:meth:`_dual_update`)."""
        torch, x = self.torch, self.x
        t0 = time.perf_counter()
        V = prox_point(x.W, self.tau_col, x.DTu)
        W_new = self.updates(V, self.tau, k, x.W)
        if not bool(torch.isfinite(W_new).all()):
            raise_non_finite(self.model, _xp.to_numpy(W_new), _xp.to_numpy(V),
                              _xp.to_numpy(self.tau), k)
        t1 = time.perf_counter()
        DY = self.D @ extrapolate(W_new, x.W, self.Y)
        U_new = self._dual_update(dual_argument(x.U, DY, self.sigma_col))
        DTu_new = self.DT @ U_new
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        t2 = time.perf_counter()
        self.timings["edge_updates"] += t2 - t1
        self.timings["node_updates"] += t1 - t0
        self.since_cert += t2 - t0
        return Iterate(W_new, U_new, DTu_new)

    def dual_residual(self, x: Iterate, new: Iterate) -> float:
        """``d_k`` from the device tensors (:func:`~gtvmodel.primal_dual.steps.dual_residual`:
        the iteration keeps ``u^k``)."""
        return dual_residual(self.D, x.W, new.W, x.U, new.U, self.sigma_col)

    def _dual_update(self, V: Any) -> Any:
        """DU (33) of every edge row of ``V`` (the argument ``u_e + sigma_e (D Y)_e``, a fresh
        tensor that no one else holds), written over ``V`` block by block
        (:data:`EDGE_BLOCK_BYTES`): the penalty's
        :meth:`~gtvmodel.terms.penalties.Penalty.dual_update`, row for row."""
        rows = max(1, EDGE_BLOCK_BYTES // max(1, V.shape[1] * V.element_size()))
        if V.shape[0] <= rows:
            return self.penalty.dual_update(V, self.sigma, self.lamA)
        for a in range(0, V.shape[0], rows):
            part = slice(a, a + rows)
            V[part] = self.penalty.dual_update(V[part], self.sigma[part], self.lamA[part])
        return V

    def certificate(self) -> Any:
        """The certificate of the current iterate on the device (:class:`DeviceCertifier`),
        or :func:`~gtvmodel.certificates.certificate.certify` on its float64 numpy copy where
        that one needs a global step (the reason is kept)."""
        x = self.x
        cert = self.certifier(x.W, x.U)
        if cert is not None:
            self.on_device += 1
            return cert
        if self.certifier.reason not in self.host_reasons:
            self.host_reasons.append(self.certifier.reason)
        return certify(self.model, _xp.to_numpy(x.W), _xp.to_numpy(x.U), fallback=False)

    def result(self, status: str) -> PrimalDualResult:
        """The :class:`PrimalDualResult` with the iterate and the last certificate's arrays
        as float64 numpy arrays."""
        x = self.x
        self.x = Iterate(_xp.to_numpy(x.W), _xp.to_numpy(x.U), None)
        if self.cert is not None:
            self.cert = to_host(self.cert)
        res = super().result(status)
        res.certificates_on_device, res.host_reasons = self.on_device, list(self.host_reasons)
        return res


BACKENDS["torch"] = TorchBackend
