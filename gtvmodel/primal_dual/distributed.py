"""Algorithm 1 (paper 001) on Dask: every shard's data stay on its worker, only boundary messages
cross (``solve_primal_dual(model, backend="dask", client=..., shards=...)``).

**Layout** (:mod:`~gtvmodel.primal_dual.sharding`).  The nodes are split into shards with a
small weighted cut; a shard (:class:`Shard`, a Dask actor on one worker) holds its nodes'
losses, data and constraints (a :meth:`~gtvmodel.declaration.ModelDeclaration.restricted`
declaration, sent once), their node-update plan
(:class:`~gtvmodel.primal_dual.prox.NodeUpdates`, built on the worker), the rows ``w_i`` of its
nodes, the flows ``u_e`` of its incident edges and ``(D w)_e`` of the edges it owns (head
``e+`` in the shard).

**One iteration** is two rounds of messages routed by the driver:

1. ``node_step``: the incoming flows of the edges owned elsewhere complete ``(D^T u^k)_i``, then
   PU (32) at the shard's nodes; out go the new weights of the nodes other shards need;
2. ``edge_step``: with the new weights of its ghosts, DU (33) on the owned edges; out go the
   new flows of the owned edges whose tail is elsewhere.

The driver sends per iteration ``O(boundary)`` bytes: the boundary rows, the iteration number,
the step scale ``c`` when it changed and a flag asking for residuals (measured per iteration in
:attr:`DistributedResult.bytes_sent`).

**Same iterates as the serial solver.**  Each shard's sparse products are the rows (columns
restricted, order kept) of the serial ``D`` and ``D^T``, so ``(D^T u)_i`` is summed in the same
order; the node updates are row-wise; the steps come from the same ``c`` by the same formula.
Weights and flows agree bitwise with :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`
when the node-update groups act row by row (library losses; CVXPY-path nodes with
``batch_cvxpy=False``, one problem per node as on a device).  Two sums are reduced in another
order: the residuals ``p_k``, ``d_k`` of the step rule (sums of per-shard sums of squares:
relative differences ~1e-16, which change ``c`` only if a ratio lies within that of the rule's
thresholds) -- and, with ``batch_cvxpy=True``, one CVXPY problem per shard replaces the single
problem of all CVXPY-path nodes, so those nodes agree to the solver tolerance ``eps_k`` of the
inexactness schedule, not bitwise.

**Certificates** (:mod:`~gtvmodel.certificates.sharded_certificate`) are summed from the
shards' partial sums: two calls per shard (the scalars of the repair's global step, then the
shard's primal terms, node conjugate terms, owned edges' conjugates and violation checks),
``O(shards)`` bytes per certificate whatever ``n`` and ``d``; the driver adds them as
:func:`~gtvmodel.certificates.certificate.certify` does.  Where the repair needs a global
step (subspace conditions, nodes outside bounded conjugate domains, residuals needing certified
radii, infeasible weights) the iterate ``(w^k, u^k)`` is gathered (``n d + |E| d`` numbers) and
``certify`` runs at the driver, as every certificate did with ``certificates="gathered"``;
:attr:`DistributedResult.certificates_gathered` and ``gather_reasons`` say when and why.  The
final certificate's repaired flows and gaps are gathered once, for the result.  A ``callback``
(it sees the gathered iterate, every iteration) and the checkpoints gather ``(w, u)``.

**Faults.**  Every ``checkpoint_every`` iterations the driver keeps a :class:`Checkpoint`
``(k, w^k, u^k, step rule)``.  When a call to a shard fails because its worker is gone, the
shards are rebuilt on the workers left (their data sent again), restored to the checkpoint and
the iterations since replayed, so the run finishes with the iterates of an uninterrupted run.
With no worker left (none within ``recover_timeout`` seconds) :class:`WorkerLostError` carries
the last checkpoint.
"""

from __future__ import annotations

import copy
import math
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse as sp

from .._validate import check_int, check_option, check_scalar
from ..certificates.certificate import certify
from ..certificates.sharded_certificate import (
    ShardCertificate,
    combine_parts,
    local_flows,
    make_certificate,
    needs_gather,
    repair_plan,
    shard_parts,
    shard_scan,
)
from ..declaration import ModelDeclaration
from ..errors import (
    DistributedError,
    GTVError,
    ParameterError,
    UnsupportedError,
    WorkerLostError,
)
from ..results import Labels
from ..terms.penalties import Penalty
from .algorithm import (
    BACKENDS,
    _check_options,
    _initial,
    _Iterate,
    _Options,
    _progress_bar,
    _raise_non_finite,
    _Run,
)
from .prox import NodeUpdates
from .result import History, PrimalDualResult
from .sharding import ShardLayout, partition_nodes
from .steps import FixedSteps, ResidualBalancing, make_step_rule, steps_from_scale
from .updates import EdgeUpdates, extrapolate, prox_point

__all__ = ["solve_distributed", "DistributedResult", "Checkpoint", "Shard", "ShardSpec"]

#: Rebuilds of the shards in a row (each after a lost worker) before the run gives up.
MAX_REBUILDS = 5

#: ``feas_tol`` of the run's certificates (:func:`~gtvmodel.certificates.certificate.certify`'s
#: default, as in the serial run).
CERT_FEAS_TOL = 1e-8

#: The values of :func:`solve_distributed`'s ``certificates`` option.
CERTIFICATE_MODES = ("sharded", "gathered")


@dataclass
class ShardSpec:
    """What a shard's worker receives once: the shard's declaration (``model``: its nodes
    first, then its ghosts), the local rows ``D_own`` of ``D`` (owned edges x local nodes) and
    ``DT_own`` of ``D^T`` (own nodes x incident edges, in the serial order), the positions of
    the owned and incoming edges among the incident ones, of the ghosts whose weights come in,
    of the rows that go out, the capacities ``lambda A_e`` of the owned edges, the degrees of
    the own nodes, the steps (``c``, or explicit ``tau``/``sigma`` rows), the start
    ``(w^0, u^0)`` rows, and for the certificates the incident edges in the order of the
    declaration's edges (``cert_perm``, positions among the incident ones), their orientation
    there (``cert_sign``, +1 or -1) and the positions of the owned edges in that order
    (``cert_owned``)."""

    index: int
    model: ModelDeclaration
    n_own: int
    D_own: sp.csr_matrix
    DT_own: sp.csr_matrix
    owned_in_inc: np.ndarray
    recv_in_inc: np.ndarray
    recv_local: np.ndarray
    send_own: np.ndarray
    send_owned: np.ndarray
    lamA: np.ndarray
    deg: np.ndarray
    c: float | None
    tau: np.ndarray | None
    sigma: np.ndarray | None
    W0: np.ndarray
    U0: np.ndarray
    prox: str
    batch_cvxpy: bool
    cert_perm: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    cert_sign: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cert_owned: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


class Shard:
    """One shard's state on its worker (a Dask actor) and its half-steps of an iteration of
    Algorithm 1: :meth:`node_step` (PU (32) at its nodes) and :meth:`edge_step` (DU (33) on
    its owned edges)."""

    def __init__(self, spec: ShardSpec | bytes):
        if isinstance(spec, bytes):  # pickled once by the driver (which counts its size)
            spec = pickle.loads(spec)
        self.spec = spec
        self.updates = NodeUpdates(spec.model, spec.prox, spec.batch_cvxpy)
        self.penalty: Penalty = spec.model.penalty
        n, L = spec.n_own, spec.W0.shape[0]
        self.W = spec.W0.copy()  # w^k at the local rows (own, then ghosts)
        self.U = spec.U0.copy()  # u^k at the incident edges
        self.edges = EdgeUpdates(spec.D_own, self.penalty, spec.lamA, spec.W0.shape[1])
        self.DTu = spec.DT_own @ self.U
        self.V = np.zeros_like(self.W)  # ghost rows stay 0 (zero-loss ghosts: cheap prox)
        self.tau_loc = np.ones(L)
        self.W_new = self.W.copy()
        self.W_old = self.W[:n].copy()
        self.DTu_old = self.DTu
        self.set_steps(spec.c, spec.tau, spec.sigma)
        self.busy = 0.0  # seconds spent in node_step, edge_step, receive_flows

    def set_steps(self, c: float | None, tau: np.ndarray | None = None,
                  sigma: np.ndarray | None = None) -> None:
        """The steps of scale ``c`` (:func:`~gtvmodel.primal_dual.steps.steps_from_scale`) or
        the explicit rows ``tau``, ``sigma``."""
        if c is not None:
            tau, sigma = steps_from_scale(self.spec.deg, self.spec.lamA.size, c)
        self.tau, self.sigma = tau, sigma
        self.tau_col, self.sigma_col = tau[:, None], sigma[:, None]
        self.tau_loc[:self.spec.n_own] = tau

    def receive_flows(self, flows: np.ndarray, residual: bool = False) -> float | None:
        """Install the new flows of the edges owned elsewhere, form ``(D^T u^{k+1})_i``; with
        ``residual`` return the shard's part of ``p_k^2`` (:func:`~gtvmodel.primal_dual.steps.
        residuals`)."""
        t0 = time.perf_counter()
        self.U[self.spec.recv_in_inc] = flows
        self.DTu = self.spec.DT_own @ self.U
        p2 = None
        if residual:
            R = (self.W_old - self.W[:self.spec.n_own]) / self.tau_col - (self.DTu_old
                                                                           - self.DTu)
            p2 = float(np.einsum("ij,ij->", R, R))
        self.busy += time.perf_counter() - t0
        return p2

    def node_step(self, k: int, flows: np.ndarray | None, c: float | None) -> np.ndarray:
        """PU (32) at the shard's nodes in iteration ``k`` (after installing ``flows`` and the
        scale ``c`` when given); returns the new weights of the nodes other shards need."""
        if flows is not None:
            self.receive_flows(flows)
        t0 = time.perf_counter()
        if c is not None:
            self.set_steps(c)
        n = self.spec.n_own
        self.V[:n] = prox_point(self.W[:n], self.tau_col, self.DTu)
        W_new = self.updates(self.V, self.tau_loc, k, self.W)[:n]
        if not np.isfinite(W_new).all():
            _raise_non_finite(self.spec.model, W_new, self.V[:n], self.tau, k)
        self.W_new[:n] = W_new
        self.busy += time.perf_counter() - t0
        return W_new[self.spec.send_own]

    def edge_step(self, weights: np.ndarray, residual: bool = False
                  ) -> tuple[np.ndarray, float | None]:
        """DU (33) on the owned edges with the new weights of the ghosts; returns the new flows
        of the owned edges other shards need and (with ``residual``) the shard's part of
        ``d_k^2``."""
        spec, t0 = self.spec, time.perf_counter()
        self.W_new[spec.recv_local] = weights
        U_old = self.U[spec.owned_in_inc]
        U_new = self.edges(extrapolate(self.W_new, self.W, np.empty_like(self.W)), U_old,
                           self.sigma, self.sigma_col, np.empty_like(U_old))
        d2 = None
        if residual:
            R = (U_old - U_new) / self.sigma_col - spec.D_own @ (self.W - self.W_new)
            d2 = float(np.einsum("ij,ij->", R, R))
        self.U[spec.owned_in_inc] = U_new
        self.W_old, self.DTu_old = self.W[:spec.n_own], self.DTu
        self.W, self.W_new = self.W_new, self.W.copy()
        self.busy += time.perf_counter() - t0
        return U_new[spec.send_owned], d2

    def first_update(self) -> np.ndarray:
        """PU (32) from zero with ``tau_i = 1`` at the shard's nodes (the initial scale of
        :class:`~gtvmodel.primal_dual.steps.ResidualBalancing`)."""
        L = self.W.shape[0]
        Z = np.zeros_like(self.W)
        return self.updates(Z, np.ones(L), 0, Z)[:self.spec.n_own]

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """The shard's rows of ``(w^k, u^k)``: its nodes' weights, its owned edges' flows."""
        return self.W[:self.spec.n_own].copy(), self.U[self.spec.owned_in_inc].copy()

    def _cert_flows(self) -> np.ndarray:
        spec = self.spec
        return local_flows(spec.model, self.U, spec.cert_perm, spec.cert_sign)

    def cert_scan(self) -> tuple[float, float, float, float, float]:
        """The shard's scalars for the global step of the repair
        (:func:`~gtvmodel.certificates.sharded_certificate.shard_scan`)."""
        return shard_scan(self.spec.model, self._cert_flows())

    def cert_parts(self, project: bool, theta: float, feas_tol: float) -> ShardCertificate:
        """The shard's partial sums of the certificate of ``(w^k, u^k)`` (:func:`~gtvmodel.
        certificates.sharded_certificate.shard_parts`); the repaired flows and Fenchel-Young
        gaps stay here until :meth:`cert_state`."""
        spec = self.spec
        part, U, ng, eg = shard_parts(spec.model, spec.n_own, self.W, self._cert_flows(),
                                      spec.cert_owned, spec.cert_sign, project, theta,
                                      feas_tol)
        self.cert = (U, ng, eg)
        return part

    def cert_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The last :meth:`cert_parts`' repaired flows of the owned edges (serial order and
        orientation), node gaps and owned edges' gaps; None if there was none."""
        if getattr(self, "cert", None) is None:
            return None
        spec = self.spec
        U, ng, eg = self.cert
        loc = spec.cert_owned
        order = np.argsort(spec.cert_perm[loc])  # the owned edges in serial order
        return (spec.cert_sign[loc][order, None] * U[loc][order], ng, eg[order])

    def describe(self) -> tuple[dict[str, int], float]:
        """Number of the shard's nodes per node-update path (ghosts left out) and the seconds
        it spent computing iterations (:attr:`busy`)."""
        out: dict[str, int] = {}
        n = self.spec.n_own
        for grp in self.updates.groups:
            m = int((np.asarray(grp.nodes) < n).sum())
            if m:
                out[grp.kind] = out.get(grp.kind, 0) + m
        return out, self.busy


@dataclass
class Checkpoint:
    """A restart point of a distributed run: after ``iteration`` iterations the iterate
    ``(weights, flows)`` (``(n, d)``, ``(|E|, d)``) and the step ``rule`` (its state:
    ``c``, ``alpha``, ...).  ``warm_start=checkpoint`` with ``step=checkpoint.rule`` resumes.

    A distributed run keeps one every ``checkpoint_every`` iterations to rebuild lost shards
    from; :class:`~gtvmodel.errors.WorkerLostError` carries the last one as ``.checkpoint``.

    Parameters
    ----------
    iteration : int
        The number of iterations the iterate is after.
    weights : ndarray (n, d)
        ``w^k`` in ``model.nodes`` order.
    flows : ndarray (|E|, d)
        ``u^k`` in ``model.edges`` order.
    rule : step rule
        A copy of the step rule in its state after iteration ``iteration`` (a
        :class:`~gtvmodel.primal_dual.steps.ResidualBalancing` or fixed steps).
    p_res, d_res : float
        The last primal and dual residuals ``p_k``, ``d_k`` the rule balanced (NaN before
        the first evaluation).

    Raises
    ------
    TypeError
        A required field missing or an unknown argument (the dataclass constructor); the
        values are stored as given, unchecked (``solve_primal_dual`` checks a warm start's
        shapes).

    Examples
    --------
    A run stopped after 20 iterations resumes from its checkpoint and converges:

    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), 1, penalty=gm.Norm2(), lam=1.0)
    >>> for i, a in enumerate([0.0, 1.0, 5.0]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> rule = gm.ResidualBalancing()
    >>> first = gm.solve_primal_dual(model, max_iter=20, tol=0.0, step=rule)
    >>> ck = gm.Checkpoint(first.iterations, first.weights, first.flows, rule)
    >>> res = gm.solve_primal_dual(model, tol=1e-8, warm_start=ck, step=ck.rule)
    >>> res.status, np.round(res.weights.ravel(), 4).tolist()
    ('converged', [0.5, 1.0, 4.5])
    """

    iteration: int
    weights: np.ndarray
    flows: np.ndarray
    rule: Any
    p_res: float = float("nan")
    d_res: float = float("nan")


@dataclass(kw_only=True)
class DistributedResult(PrimalDualResult):
    """Result of Algorithm 1 on Dask (:func:`solve_distributed`): a
    :class:`~gtvmodel.primal_dual.result.PrimalDualResult` with the partition (``shard_of``:
    the shard of every node, ``cut_edges``, ``cut_weight``), the boundary sizes
    (``boundary_nodes``, ``boundary_edges``), the driver's pickled bytes sent per iteration
    (``bytes_sent``, one entry per iteration run, replays included) and at setup
    (``setup_bytes``: the shards' data), and ``recoveries`` (worker losses survived).
    ``timings``: ``node_updates`` and ``edge_updates`` are the wall times of the two rounds
    (computation, messages and routing), ``shard_compute_max`` the computing time of the
    busiest shard (since its last rebuild), ``checkpoints`` the gathers for checkpoints.
    ``certificate_bytes``: the pickled bytes each certificate moved between the driver and the
    shards (sent and received), ``certificates_gathered``: how many of them gathered the
    iterate and ran :func:`~gtvmodel.certificates.certificate.certify` at the driver (the
    others were summed from the shards' partial sums, :mod:`~gtvmodel.certificates.
    sharded_certificate`), ``gather_reasons``: why (each reason once).

    The fields are keyword-only, as :func:`solve_distributed` fills them; each is also the
    attribute of that name.

    Parameters
    ----------
    timings, labels, weights, flows, iterations, status, history, certificate, c, paths
        As :class:`~gtvmodel.primal_dual.result.PrimalDualResult`'s (``timings`` adds
        ``shard_compute_max`` and ``checkpoints``, above).
    kernel, certificates_on_device, host_reasons
        As :class:`~gtvmodel.primal_dual.result.PrimalDualResult`'s (``"numpy"``, 0 and
        empty: the shards run the numpy updates).
    shard_of : ndarray (n,) of int
        The shard of every node.
    cut_edges : int
        The number of edges between shards.
    cut_weight : float
        The sum of their weights ``A_e``.
    boundary_nodes, boundary_edges : int
        How many nodes and edges have rows that cross shards.
    bytes_sent : ndarray of int
        The driver's pickled bytes sent per iteration (replays included).
    setup_bytes : int
        The pickled bytes of the shards' data sent at setup (and at rebuilds).
    recoveries : int
        Worker losses survived.
    workers : list of str
        The address of the worker of every shard.
    certificate_bytes : ndarray of int
        The pickled bytes each certificate moved between the driver and the shards.
    certificates_gathered : int
        How many certificates gathered the iterate to the driver.
    gather_reasons : list of str
        Why they did (each reason once).

    Raises
    ------
    TypeError
        A required field missing, or an unknown or positional argument (the dataclass
        constructor); the values are stored as given, unchecked.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> from distributed import Client
    >>> model = gm.GTVModel(nx.path_graph(4), 1, penalty=gm.Norm2(), lam=1.0)
    >>> for i, a in enumerate([0.0, 1.0, 5.0, 5.5]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> with Client(processes=False, n_workers=1, dashboard_address=None) as client:
    ...     res = gm.solve_primal_dual(model, tol=1e-8, backend="dask", client=client,
    ...                                shards=[0, 0, 1, 1])
    >>> type(res).__name__, res.status, res.shard_of.tolist(), res.cut_edges
    ('DistributedResult', 'converged', [0, 0, 1, 1], 1)
    >>> len(res.bytes_sent) == res.iterations, res.recoveries
    (True, 0)
    """

    shard_of: np.ndarray
    cut_edges: int
    cut_weight: float
    boundary_nodes: int
    boundary_edges: int
    bytes_sent: np.ndarray
    setup_bytes: int
    recoveries: int = 0
    workers: list[str] = field(default_factory=list)
    certificate_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    certificates_gathered: int = 0
    gather_reasons: list[str] = field(default_factory=list)


@dataclass
class _Sharded:
    """A certificate summed from the shards: its scalars (``primal_value``, ``gap``, ... as
    :func:`~gtvmodel.certificates.sharded_certificate.combine_parts` gives them), the repair
    plan and the iteration; the :class:`~gtvmodel.certificates.certificate.Certificate` is built
    from it once, for the result."""

    values: dict[str, float]
    project: bool
    theta: float
    repairs: list[str]
    iteration: int

    def __getattr__(self, name: str) -> float:
        values = self.__dict__.get("values", {})
        if name in values:
            return values[name]
        raise AttributeError(name)


def _is_lost(exc: BaseException) -> bool:
    """Did a call fail because its worker is gone (not because of the computation)?"""
    if isinstance(exc, GTVError):
        return False
    text = f"{type(exc).__name__} {exc}".lower()
    return isinstance(exc, (OSError, TimeoutError)) or any(
        w in text for w in ("lost", "killedworker", "commclosed", "cancelled", "closed"))


class _Pool:
    """The shards' actors and the driver's routing of boundary rows between them (the driver
    holds, per shard, where its outgoing rows go in the boundary buffers and where its
    incoming rows come from)."""

    def __init__(self, client: Any, layout: ShardLayout, specs: list[ShardSpec],
                 recover_timeout: float):
        self.client, self.layout, self.specs = client, layout, specs
        self.recover_timeout = recover_timeout
        bn, be = layout.boundary_nodes, layout.boundary_edges
        self.node_out = [np.searchsorted(bn, s) for s in layout.send_nodes]
        self.node_in = [np.searchsorted(bn, r) for r in layout.recv_nodes]
        self.edge_out = [np.searchsorted(be, s) for s in layout.send_edges]
        self.edge_in = [np.searchsorted(be, r) for r in layout.recv_edges]
        self.sent = 0
        self.setup_bytes = 0
        self.actors: list[Any] = []
        self.workers: list[str] = []

    def start(self, specs: list[ShardSpec]) -> None:
        """Create one actor per shard, round-robin over the workers (sorted addresses): each
        receives its :class:`ShardSpec` once."""
        workers = sorted(self.client.scheduler_info()["workers"])
        if not workers:  # (a recovery waits for one again: the last may have just left)
            raise _Lost("no Dask worker is available")
        self.specs = specs
        self.workers = [workers[s % len(workers)] for s in range(len(specs))]
        blobs = [pickle.dumps(spec, protocol=5) for spec in specs]
        self.setup_bytes += sum(len(b) for b in blobs)
        futures = [self.client.submit(Shard, blob, actor=True, workers=[w],
                                      allow_other_workers=True, pure=False)
                   for blob, w in zip(blobs, self.workers, strict=True)]
        try:
            self.actors = [f.result(timeout=self.recover_timeout + 60) for f in futures]
        except Exception as exc:
            if _is_lost(exc):
                raise
            raise DistributedError(
                f"a Dask worker could not build its shard ({type(exc).__name__}: {exc}); do "
                "the workers have gtvmodel and its dependencies installed?") from exc

    def call(self, method: str, args: list[tuple]) -> list[Any]:
        """``method(*args[s])`` on every shard at once; the pickled size of the arguments is
        added to :attr:`sent`."""
        self.sent += sum(len(pickle.dumps((method, a), protocol=5)) for a in args)
        futures = [getattr(actor, method)(*a) for actor, a in zip(self.actors, args, strict=True)]
        return [f.result() for f in futures]

    def route(self, out: list[np.ndarray], where_out: list[np.ndarray],
              where_in: list[np.ndarray], size: int, d: int) -> list[np.ndarray]:
        """The rows each shard receives, from the rows each shard sent (one buffer of the
        boundary's size)."""
        buf = np.empty((size, d))
        for rows, pos in zip(out, where_out, strict=True):
            buf[pos] = rows
        return [buf[pos] for pos in where_in]


def _specs(model: ModelDeclaration, layout: ShardLayout, W: np.ndarray, U: np.ndarray,
           rule: FixedSteps | ResidualBalancing, prox: str, batch_cvxpy: bool
           ) -> list[ShardSpec]:
    """The :class:`ShardSpec` of every shard for the iterate ``(W, U)`` and the step rule."""
    D = model.incidence
    DT = D.T.tocsr()
    c = rule.c if isinstance(rule, ResidualBalancing) else None
    lamA, deg = model.capacities, model.degrees
    labels = model.nodes
    attr = model.empirical_graph.weight or "weight"
    specs = []
    for s in range(layout.num_shards):
        own, ghosts = layout.own[s], layout.ghosts[s]
        inc, owned = layout.incident[s], layout.owned[s]
        local = np.concatenate([own, ghosts])
        G = nx.Graph()
        G.add_nodes_from(labels[i] for i in local)
        E = model.edges[inc]
        G.add_weighted_edges_from(
            ((labels[a], labels[b], w) for (a, b), w in
             zip(E.tolist(), model.edge_weights[inc].tolist(), strict=True)), weight=attr)
        sub = model.restricted(G, (labels[i] for i in own))
        perm, sign = _edge_map(model, sub, inc)
        pos_local = {int(v): j for j, v in enumerate(local)}
        specs.append(ShardSpec(
            index=s, model=sub, n_own=own.size,
            D_own=D[owned][:, local].tocsr(), DT_own=DT[own][:, inc].tocsr(),
            owned_in_inc=np.searchsorted(inc, owned),
            recv_in_inc=np.searchsorted(inc, layout.recv_edges[s]),
            recv_local=np.array([pos_local[int(v)] for v in layout.recv_nodes[s]],
                                dtype=np.int64),
            send_own=np.searchsorted(own, layout.send_nodes[s]),
            send_owned=np.searchsorted(owned, layout.send_edges[s]),
            lamA=lamA[owned], deg=deg[own], c=c,
            tau=None if c is not None else rule.tau[own],
            sigma=None if c is not None else rule.sigma[owned],
            W0=W[local].copy(), U0=U[inc].copy(), prox=prox, batch_cvxpy=batch_cvxpy,
            cert_perm=perm, cert_sign=sign,
            cert_owned=np.flatnonzero(np.isin(inc[perm], owned))))
    return specs


def _edge_map(model: ModelDeclaration, sub: ModelDeclaration, inc: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """For each edge of the shard's declaration ``sub``: its position among the incident edges
    ``inc`` (global positions) and its orientation relative to the serial one (+1 or -1)."""
    n = model.num_nodes
    gpos = np.array([model.index(v) for v in sub.nodes], dtype=np.int64)
    heads, tails = model.edges[inc, 0], model.edges[inc, 1]
    keys = np.minimum(heads, tails) * n + np.maximum(heads, tails)
    order = np.argsort(keys)
    a, b = gpos[sub.edges[:, 0]], gpos[sub.edges[:, 1]]
    perm = order[np.searchsorted(keys[order], np.minimum(a, b) * n + np.maximum(a, b))]
    sign = np.where(heads[perm] == a, 1.0, -1.0)
    return perm.astype(np.int64), sign


class _FirstUpdate:
    """``updates(0, 1, 0, 0)`` for :func:`~gtvmodel.primal_dual.steps.initial_scale`, evaluated
    by the shards and assembled in node order."""

    def __init__(self, run: _DaskRun):
        self.run = run

    def __call__(self, V: np.ndarray, tau: np.ndarray, k: int, W_prev: np.ndarray
                 ) -> np.ndarray:
        parts = self.run.calls("first_update", [() for _ in self.run.pool.actors])
        W1 = np.empty_like(V)
        for own, rows in zip(self.run.layout.own, parts, strict=True):
            W1[own] = rows
        return W1


class _DaskRun(_Run):
    """A run of Algorithm 1 over the shards of :class:`_Pool`: the loop, the certificate
    schedule, the history and the result are :class:`~gtvmodel.primal_dual.algorithm._Run`'s;
    an iteration, the residuals and the iterate come from the shards."""

    def __init__(self, model: ModelDeclaration, opts: _Options,
                 rule: FixedSteps | ResidualBalancing, W: np.ndarray, U: np.ndarray,
                 pool: _Pool, prox: str, batch_cvxpy: bool, checkpoint_every: int,
                 progress: bool, t_start: float, certificates: str = "sharded"):
        self.model, self.opts, self.rule, self.pool = model, opts, rule, pool
        self.cert_mode = certificates
        self.cert_bytes: list[int] = []
        self.gathered_certs = 0
        self.gather_reasons: list[str] = []
        self._gather_bytes = 0
        self.layout = pool.layout
        self.prox, self.batch_cvxpy = prox, batch_cvxpy
        self.checkpoint_every = checkpoint_every
        self.t_start = t_start
        self.timings = {"setup": 0.0, "node_updates": 0.0, "edge_updates": 0.0,
                        "certificate": 0.0, "checkpoints": 0.0}
        self.rows: list[tuple] = []
        self.cert = None
        self.bar = _progress_bar(opts.max_iter) if progress else None
        self.p_res = self.d_res = float("nan")
        self.cert_durations: list[float] = []
        self.since_cert = 0.0
        self.k = self.done = 0
        self.recoveries = 0
        self.bytes_per_iter: list[int] = []
        self._flows_in: list[np.ndarray] | None = None
        self._pending_c: float | None = None
        self._d2 = 0.0
        self._gathered: tuple[int, _Iterate] | None = None
        self.ckpt = Checkpoint(0, W.copy(), U.copy(), copy.deepcopy(rule))
        try:
            pool.start(_specs(model, self.layout, W, U, rule, prox, batch_cvxpy))
            if isinstance(rule, ResidualBalancing):
                self._pending_c = rule.start(model, _FirstUpdate(self))
        except Exception as exc:  # nothing computed yet: the start point is the checkpoint
            if not (isinstance(exc, _Lost) or _is_lost(exc)):
                raise
            raise WorkerLostError(f"solve_primal_dual(backend='dask'): a worker was lost "
                                  f"while the shards were set up ({exc})",
                                  checkpoint=self.ckpt) from exc
        self.ckpt.rule = copy.deepcopy(rule)
        self.timings["setup"] = time.perf_counter() - t_start

    # ---------------------------------------------------------------- fault tolerance
    def calls(self, method: str, args: list[tuple]) -> list[Any]:
        """:meth:`_Pool.call`, raising :class:`_Lost` when a worker is gone."""
        try:
            return self.pool.call(method, args)
        except Exception as exc:
            if _is_lost(exc):
                raise _Lost(str(exc)) from exc
            raise

    def _guarded(self, action: Callable[[], Any], before: int) -> Any:
        """Run ``action`` (which needs ``before`` iterations done); after a lost worker rebuild
        the shards from the checkpoint, replay to ``before`` and try again."""
        while True:
            try:
                return action()
            except _Lost as lost:
                self._recover(before, str(lost))

    def _recover(self, target: int, why: str, attempt: int = 0) -> None:
        """Rebuild the shards on the workers left from the last checkpoint, then replay the
        iterations up to ``target`` (no certificates, no callbacks: they happened already)."""
        client, ck = self.pool.client, self.ckpt
        self.recoveries += 1
        try:
            if attempt >= MAX_REBUILDS:
                raise TimeoutError(f"{MAX_REBUILDS} rebuilds in a row failed")
            client.wait_for_workers(1, timeout=self.pool.recover_timeout)
        except Exception as exc:  # no worker came back in time
            raise WorkerLostError(
                f"solve_primal_dual(backend='dask'): every worker is gone ({why}); the last "
                f"checkpoint (iteration {ck.iteration}) is attached as .checkpoint",
                checkpoint=ck) from exc
        self.rule = copy.deepcopy(ck.rule)
        self.p_res, self.d_res = ck.p_res, ck.d_res
        self._flows_in, self._pending_c, self._gathered = None, None, None
        try:
            self.pool.start(_specs(self.model, self.layout, ck.weights, ck.flows, self.rule,
                                   self.prox, self.batch_cvxpy))
            self.done = ck.iteration
            while self.done < target:
                self._step(self.done)
                self._finish(self.done + 1)
        except Exception as exc:  # another worker lost while rebuilding or replaying
            if not (isinstance(exc, _Lost) or _is_lost(exc)):
                raise
            self._recover(target, str(exc), attempt + 1)

    # ---------------------------------------------------------------- the iteration
    def iterate(self, k: int) -> None:
        """Iteration ``k``: PU (32) on the shards, the weights of boundary nodes to their
        neighbours' shards, DU (33) on the shards, the flows of boundary edges back."""
        self._guarded(lambda: self._step(k), k)

    def _residual_due(self, k: int) -> tuple[bool, bool]:
        """``(adapt, needed)`` after ``k`` iterations, as in the serial run."""
        rule = self.rule
        adapt = rule.active and k % rule.every == 0
        return adapt, adapt or k % self.opts.record_every == 0 or k == self.opts.max_iter

    def _step(self, k: int) -> None:
        pool, d = self.pool, self.model.dim
        t0 = time.perf_counter()
        sent0 = pool.sent
        flows_in = self._flows_in or [None] * len(pool.actors)
        c, self._pending_c = self._pending_c, None
        out = self.calls("node_step", [(k, f, c) for f in flows_in])
        w_in = pool.route(out, pool.node_out, pool.node_in, self.layout.boundary_nodes.size, d)
        t1 = time.perf_counter()
        want = self._residual_due(k + 1)[1]
        res = self.calls("edge_step", [(w, want) for w in w_in])
        self._flows_in = pool.route([r[0] for r in res], pool.edge_out, pool.edge_in,
                                    self.layout.boundary_edges.size, d)
        self._d2 = sum(r[1] for r in res) if want else float("nan")
        t2 = time.perf_counter()
        self.timings["node_updates"] += t1 - t0
        self.timings["edge_updates"] += t2 - t1
        self.since_cert += t2 - t0
        self.bytes_per_iter.append(pool.sent - sent0)

    def advance(self, k: int, new: Any) -> None:
        """After ``k`` iterations: the residuals from the shards' partial sums when the step
        rule or the history needs them, the step rule, and a checkpoint every
        ``checkpoint_every`` iterations."""
        while True:
            try:
                self._finish(k)
                break
            except _Lost as lost:
                self._recover(k - 1, str(lost))
                self._guarded(lambda: self._step(k - 1), k - 1)
        if k % self.checkpoint_every == 0:
            t0 = time.perf_counter()
            x = self.x
            self.ckpt = Checkpoint(k, x.W, x.U, copy.deepcopy(self.rule), self.p_res,
                                   self.d_res)
            self.timings["checkpoints"] += time.perf_counter() - t0

    def _finish(self, k: int) -> None:
        adapt, want = self._residual_due(k)
        if want:
            sent0 = self.pool.sent
            p2 = self.calls("receive_flows", [(f, True) for f in self._flows_in])
            self.bytes_per_iter[-1] += self.pool.sent - sent0
            self._flows_in = None
            self.p_res, self.d_res = math.sqrt(sum(p2)), math.sqrt(self._d2)
        self.done = k
        if adapt and self.rule.update(k - 1, self.p_res, self.d_res):
            self._pending_c = self.rule.c

    @property
    def x(self) -> _Iterate:
        """The iterate ``(w^k, u^k)`` gathered from the shards (once per iteration)."""
        if self._gathered is None or self._gathered[0] != self.done:
            W, U = self._guarded(self._gather, self.done)
            self._gathered = (self.done, _Iterate(W, U, None))
        return self._gathered[1]

    def _gather(self) -> tuple[np.ndarray, np.ndarray]:
        n, d, E = self.model.num_nodes, self.model.dim, self.model.num_edges
        W, U = np.empty((n, d)), np.empty((E, d))
        parts = self.calls("state", [() for _ in self.pool.actors])
        self._gather_bytes = len(pickle.dumps(parts, protocol=5))
        for s, (Ws, Us) in enumerate(parts):
            W[self.layout.own[s]] = Ws
            U[self.layout.owned[s]] = Us
        return W, U

    # ---------------------------------------------------------------- certificates
    def certificate(self) -> Any:
        """The certificate of ``(w^k, u^k)``: summed from the shards' partial sums
        (:mod:`~gtvmodel.certificates.sharded_certificate`), or -- where a repair needs a global
        step, or with ``certificates="gathered"`` -- gathered and certified at the driver."""
        why = self._why_gather()
        if not why:
            sent0 = self.pool.sent
            out = self._guarded(self._sharded, self.done)
            cert, received = out
            self.cert_bytes.append(self.pool.sent - sent0 + received)
            if not isinstance(cert, str):
                return cert
            why = cert
        return self._gathered_certificate(why)

    def _why_gather(self) -> str:
        if self.cert_mode == "gathered":
            return 'certificates="gathered"'
        if self._flows_in is not None:  # a certificate between the two rounds (a callback)
            return "the flows of boundary edges were not installed yet"
        return needs_gather(self.model)

    def _gathered_certificate(self, why: str) -> Any:
        self.gathered_certs += 1
        if why not in self.gather_reasons:
            self.gather_reasons.append(why)
        sent0 = self.pool.sent
        fresh = self._gathered is None or self._gathered[0] != self.done
        x = self.x
        self.cert_bytes.append(self.pool.sent - sent0 + (self._gather_bytes if fresh else 0))
        return certify(self.model, x.W, x.U, fallback=False)

    def _sharded(self) -> tuple[_Sharded | str, int]:
        """Two rounds of calls: the shards' scalars for the repair's global step, then their
        partial sums; ``(certificate or the reason to gather, bytes received)``."""
        actors = self.pool.actors
        scans = self.calls("cert_scan", [() for _ in actors])
        received = len(pickle.dumps(scans, protocol=5))
        plan = repair_plan(scans)
        if plan is None:
            return "one projection onto the capacities did not reach them", received
        project, theta, repairs = plan
        feas_tol = CERT_FEAS_TOL
        parts = self.calls("cert_parts", [(project, theta, feas_tol) for _ in actors])
        received += len(pickle.dumps(parts, protocol=5))
        values = combine_parts(self.model, parts, self.opts.tol, feas_tol)
        if values is None:
            return ("a node is outside its conjugate domain or violates its constraints "
                    "(the repair's domain steps are global)"), received
        return _Sharded(values, project, theta, repairs, self.done), received

    def _final_certificate(self, x: _Iterate) -> Any:
        """The :class:`~gtvmodel.certificates.certificate.Certificate` of the last sharded
        certificate: its repaired flows and Fenchel-Young gaps gathered once."""
        cert = self.cert
        if not isinstance(cert, _Sharded):
            return cert
        lay, n, E = self.layout, self.model.num_nodes, self.model.num_edges
        states = self.calls("cert_state", [() for _ in self.pool.actors])
        if any(st is None for st in states):  # shards rebuilt since: evaluate again
            self.calls("cert_parts", [(cert.project, cert.theta, CERT_FEAS_TOL)
                                      for _ in self.pool.actors])
            states = self.calls("cert_state", [() for _ in self.pool.actors])
        U, ng, eg = np.empty((E, self.model.dim)), np.empty(n), np.empty(E)
        for s, (Us, ngs, egs) in enumerate(states):
            U[lay.owned[s]], ng[lay.own[s]], eg[lay.owned[s]] = Us, ngs, egs
        return make_certificate(self.model, cert.values, cert.repairs, cert.theta, x.W, U, ng,
                                eg, self.opts.tol, CERT_FEAS_TOL)

    def result(self, status: str) -> DistributedResult:
        """The :class:`DistributedResult` of the run."""
        self.timings["total"] = time.perf_counter() - self.t_start
        x = self.x
        self.cert = self._guarded(lambda: self._final_certificate(x), self.done)
        paths: dict[str, int] = {}
        parts = self._guarded(lambda: self.calls("describe", [() for _ in self.pool.actors]),
                              self.done)
        for part, _ in parts:
            for kind, m in part.items():
                paths[kind] = paths.get(kind, 0) + m
        self.timings["shard_compute_max"] = max(busy for _, busy in parts)
        lay = self.layout
        return DistributedResult(
            weights=x.W, flows=x.U, iterations=self.k, status=status,
            history=History.from_rows(self.rows), certificate=self.cert, timings=self.timings,
            c=self.rule.c, paths=paths, labels=Labels(self.model.nodes, self.model.edges),
            shard_of=lay.labels, cut_edges=lay.cut_edges, cut_weight=lay.cut_weight,
            boundary_nodes=int(lay.boundary_nodes.size),
            boundary_edges=int(lay.boundary_edges.size),
            bytes_sent=np.array(self.bytes_per_iter, dtype=np.int64),
            setup_bytes=self.pool.setup_bytes, recoveries=self.recoveries,
            workers=list(self.pool.workers),
            certificate_bytes=np.array(self.cert_bytes, dtype=np.int64),
            certificates_gathered=self.gathered_certs, gather_reasons=list(self.gather_reasons))


class _Lost(Exception):
    """A shard's worker is gone (internal: triggers a recovery)."""


def solve_distributed(model: ModelDeclaration, max_iter: int = 10_000, tol: float = 1e-6,
                      prox: str = "auto", step: Any = None, warm_start: Any = None,
                      callback: Callable[..., Any] | None = None, record_every: int = 50,
                      progress: bool = False, batch_cvxpy: bool = True,
                      certificate_budget: float | None = 0.25, *, client: Any = None,
                      shards: int | np.ndarray | None = None, checkpoint_every: int = 100,
                      recover_timeout: float = 30.0, certificates: str = "sharded"
                      ) -> DistributedResult:
    """Algorithm 1 (paper 001) on a Dask cluster: PU (32) and DU (33) on shards of the nodes,
    each on one worker, until the certified gap (34) is at most ``tol * max(1, |P(w)|)``;
    the same iterates and stopping rule as :func:`~gtvmodel.primal_dual.algorithm.
    solve_primal_dual` (whose arguments these are; see the module docstring for what travels,
    the certificates and faults).  ``solve_primal_dual(model, backend="dask", client=...,
    shards=...)`` calls it.

    Parameters
    ----------
    model : ModelDeclaration
        The GTV minimization problem.
    max_iter, tol, prox, step, warm_start, record_every, progress, batch_cvxpy
        As :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`'s.
    callback : callable, optional
        As :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`'s, called at the driver
        with the gathered iterate (module docstring).
    certificate_budget : float or None
        As :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`'s.
    client : distributed.Client, optional
        The cluster's client; None starts a ``LocalCluster`` (2 worker processes, one thread
        each) for the run and closes it afterwards.
    shards : int or (n,) array, optional
        The number of shards (``1 <= shards <= n``; default: one per worker), partitioned by
        :func:`~gtvmodel.primal_dual.sharding.partition_nodes`; or the shard of every node.
    checkpoint_every : int
        Keep a :class:`Checkpoint` every this many iterations (a gather of ``(w, u)``).
    recover_timeout : float
        Seconds to wait for a worker after one was lost before raising
        :class:`~gtvmodel.errors.WorkerLostError` with the last checkpoint.
    certificates : {"sharded", "gathered"}
        ``"sharded"``: each certificate summed from the shards' partial sums, ``O(shards)``
        bytes, gathering the iterate only where the repair needs a global step
        (:mod:`~gtvmodel.certificates.sharded_certificate`); ``"gathered"``: every certificate
        gathers ``(w^k, u^k)`` and runs :func:`~gtvmodel.certificates.certificate.certify` at
        the driver.

    Returns
    -------
    DistributedResult
        The :class:`~gtvmodel.primal_dual.result.PrimalDualResult` of the run with the
        partition, the bytes moved and the recoveries.

    Raises
    ------
    ParameterError
        A bad option, named (as :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`'s;
        ``shards`` out of ``1..n`` or not an integer array of shape ``(n,)``,
        ``checkpoint_every``, ``recover_timeout``, ``certificates``), or ``client`` not a
        running ``distributed.Client``.
    PartitionError
        An explicit shard array with a negative label or an empty shard.
    UnsupportedError
        ``client=None`` without ``dask.distributed`` installed.
    DistributedError
        A worker could not build its shard (e.g. gtvmodel missing on the worker).
    WorkerLostError
        Every worker is gone for ``recover_timeout`` seconds (or the rebuilds kept failing);
        ``.checkpoint`` holds the last :class:`Checkpoint`.
    InfeasibleError, SolverError
        From the node updates PU (32), as in the numpy path.

    Examples
    --------
    Four scalars on a path in two shards of an in-process cluster: the same iterates as the
    numpy path.

    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> from distributed import Client
    >>> from gtvmodel.primal_dual.distributed import solve_distributed
    >>> model = gm.GTVModel(nx.path_graph(4), 1, penalty=gm.Norm2(), lam=1.0)
    >>> for i, a in enumerate([0.0, 1.0, 5.0, 5.5]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> with Client(processes=False, n_workers=1, dashboard_address=None) as client:
    ...     res = solve_distributed(model, tol=1e-8, client=client, shards=2)
    >>> res.status, np.round(res.weights.ravel(), 4).tolist()
    ('converged', [0.5, 1.0, 5.0, 5.0])
    >>> ref = gm.solve_primal_dual(model, tol=1e-8)
    >>> res.iterations == ref.iterations, np.allclose(res.weights, ref.weights)
    (True, True)
    """
    t_start = time.perf_counter()
    where = "solve_primal_dual(backend='dask')"
    opts = _check_options(max_iter, tol, prox, record_every, progress, batch_cvxpy,
                          certificate_budget, callback)
    checkpoint_every = check_int(checkpoint_every, "checkpoint_every", min_val=1, where=where)
    recover_timeout = check_scalar(recover_timeout, "recover_timeout", min_val=0.0,
                                   where=where)
    check_option(certificates, "certificates", CERTIFICATE_MODES, where=where)
    labels = None if shards is None or np.isscalar(shards) else _check_labels(model, shards)
    if labels is None and shards is not None:
        check_int(shards, "shards", min_val=1, max_val=model.num_nodes, where=where)
    rule = make_step_rule(model, step)
    W, U = _initial(model, warm_start)
    own_cluster = None
    if client is None:
        client, own_cluster = _local_client()
    try:
        _check_client(client, where)
        if labels is None:
            S = shards if shards is not None else max(1, len(client.scheduler_info()["workers"]))
            labels = partition_nodes(model, min(int(S), model.num_nodes))
        pool = _Pool(client, ShardLayout.build(model, labels), [], recover_timeout)
        run = _DaskRun(model, opts, rule, W, U, pool, prox, batch_cvxpy, checkpoint_every,
                       progress, t_start, certificates)
        status = run.loop()
        return run.result(status)
    finally:
        if own_cluster is not None:
            client.close()
            own_cluster.close()


def _check_labels(model: ModelDeclaration, shards: Any) -> np.ndarray:
    """An explicit shard of every node: integers ``0..S-1``, every shard non-empty."""
    arr = np.asarray(shards)
    if arr.shape != (model.num_nodes,) or not np.issubdtype(arr.dtype, np.integer):
        raise ParameterError(f"shards must be a number of shards or an integer array of shape "
                             f"({model.num_nodes},) (the shard of every node), got shape "
                             f"{arr.shape} and dtype {arr.dtype}")
    return arr.astype(np.int64)


def _local_client() -> tuple[Any, Any]:
    """A client of a fresh ``LocalCluster`` (2 worker processes, one thread each)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:
        raise UnsupportedError("backend='dask' needs dask.distributed: pip install "
                               "'gtvmodel[dask]'") from exc

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    return Client(cluster), cluster


def _check_client(client: Any, where: str) -> None:
    """The client must be a running ``distributed.Client`` (errors name the argument)."""
    status = getattr(client, "status", None)
    if not hasattr(client, "submit") or status is None:
        raise ParameterError(f"{where}: client must be a distributed.Client, got "
                             f"{type(client).__name__}")
    if status != "running":
        raise ParameterError(f"{where}: client is {status!r}, not running (a closed client "
                             "cannot run shards)")


BACKENDS["dask"] = solve_distributed
