"""Algorithm 1 (paper 001) on Dask: every shard's data stay on its worker, only boundary messages
cross (``solve_primal_dual(model, backend=DaskBackend(client=..., shards=...))``).

**Layout** (:mod:`~gtvmodel.primal_dual.sharding`).  The nodes are split into shards with a
small weighted cut; a shard (:class:`Shard`, a Dask actor on one worker) holds its nodes'
losses, data and constraints (a :meth:`~gtvmodel.declaration.ModelDeclaration.restricted`
declaration, sent once), their node-update plan
(:class:`~gtvmodel.primal_dual.prox.NodeUpdates`, built on the worker), the rows ``w_i`` of its
nodes, the flows ``u_e`` of its incident edges and ``(D w)_e`` of the edges it owns (head
``e+`` in the shard).

**One iteration** is two exchanges of boundary rows:

1. PU (32) at the shard's nodes (the flows of the edges owned elsewhere completed ``(D^T
   u^k)_i``); out go the new weights of the nodes other shards need;
2. DU (33) on the owned edges with the new weights of its ghosts; out go the new flows of the
   owned edges whose tail is elsewhere.

With ``routing="workers"`` (the default) each shard pushes its rows to the neighbour shards'
actors itself and waits for theirs (:meth:`~gtvmodel.primal_dual.shards.Shard.steps`); the
driver sends one call per shard for all the iterations up to the next residual evaluation of
the step rule (or the next read of the iterate: certificate, checkpoint, callback), with the
iteration numbers, the step scale ``c`` when it changed and the residual flag, and receives
the shards' residual parts: ``O(shards)`` bytes per call whatever the boundary
(:attr:`DistributedResult.bytes_sent`; the rows between shards are
:attr:`DistributedResult.peer_bytes`).  With ``routing="driver"`` every iteration is two rounds
of calls through the driver, which routes the rows (``O(boundary)`` bytes per iteration).

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
``(k, w^k, u^k, step rule)``.  When a call to a shard fails because its worker is gone (with
worker-to-worker routing: the first failure aborts the other shards' waits for rows), the
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
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .._validate import check_int, check_option, check_scalar
from ..certificates.certificate import certify
from ..certificates.sharded_certificate import (
    combine_parts,
    make_certificate,
    needs_gather,
    repair_plan,
)
from ..declaration import ModelDeclaration
from ..errors import (
    ParameterError,
    UnsupportedError,
    WorkerLostError,
)
from ..results import Labels
from .backends import BACKENDS, Backend
from .distributed_result import Checkpoint, DistributedResult
from .loop import (
    Iterate,
    Options,
    Run,
    RunArguments,
    check_options,
    initial_point,
    progress_bar,
)
from .result import History
from .sharding import ShardLayout, partition_nodes
from .shards import LostWorker, Shard, ShardPool, ShardSpec, is_lost, shard_specs
from .steps import FixedSteps, ResidualBalancing, make_step_rule

__all__ = ["solve_distributed", "DaskBackend", "DistributedResult", "Checkpoint", "Shard",
           "ShardSpec"]

#: Rebuilds of the shards in a row (each after a lost worker) before the run gives up.
MAX_REBUILDS = 5

#: ``feas_tol`` of the run's certificates (:func:`~gtvmodel.certificates.certificate.certify`'s
#: default, as in the serial run).
CERT_FEAS_TOL = 1e-8

#: The values of :func:`solve_distributed`'s ``certificates`` option.
CERTIFICATE_MODES = ("sharded", "gathered")

#: The values of :func:`solve_distributed`'s ``routing`` option: boundary rows from worker to
#: worker, or through the driver.
ROUTING_MODES = ("workers", "driver")

#: Seconds a shard waits for a neighbour's rows beyond ``recover_timeout`` before its step
#: fails as a lost worker (a call to a dead worker may wait ``distributed.comm.timeouts.
#: connect``, 30 s by default).
PEER_WAIT_MARGIN = 90.0


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


class _DaskRun(Run):
    """A run of Algorithm 1 over the shards of a
    :class:`~gtvmodel.primal_dual.shards.ShardPool`: the loop, the certificate schedule, the
    history and the result are :class:`~gtvmodel.primal_dual.loop.Run`'s; an iteration, the
    residuals and the iterate come from the shards."""

    def __init__(self, model: ModelDeclaration, opts: Options,
                 rule: FixedSteps | ResidualBalancing, W: np.ndarray, U: np.ndarray,
                 pool: ShardPool, prox: str, batch_cvxpy: bool, checkpoint_every: int,
                 progress: bool, t_start: float, certificates: str = "sharded",
                 routing: str = "workers"):
        self.model, self.opts, self.rule, self.pool = model, opts, rule, pool
        self.routing = routing
        self._batch: list[Any] | None = None  # worker-to-worker steps queued: [k0, k1, c]
        self._res2: tuple[float, float] = (float("nan"), float("nan"))
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
                        "iterations": 0.0, "certificate": 0.0, "checkpoints": 0.0}
        self.rows: list[tuple] = []
        self.cert = None
        self.bar = progress_bar(opts.max_iter) if progress else None
        self.p_res = self.d_res = float("nan")
        self.cert_durations: list[float] = []
        self.since_cert = 0.0
        self.k = self.done = 0
        self.recoveries = 0
        self.bytes_per_iter: list[int] = []
        self._flows_in: list[np.ndarray] | None = None
        self._pending_c: float | None = None
        self._d2 = 0.0
        self._gathered: tuple[int, Iterate] | None = None
        self.ckpt = Checkpoint(0, W.copy(), U.copy(), copy.deepcopy(rule))
        try:
            self._start_shards(W, U)
            if isinstance(rule, ResidualBalancing):
                self._pending_c = rule.start(model, _FirstUpdate(self))
        except Exception as exc:  # nothing computed yet: the start point is the checkpoint
            if not (isinstance(exc, LostWorker) or is_lost(exc)):
                raise
            raise WorkerLostError(f"solve_primal_dual(backend='dask'): a worker was lost "
                                  f"while the shards were set up ({exc})",
                                  checkpoint=self.ckpt) from exc
        self.ckpt.rule = copy.deepcopy(rule)
        self.timings["setup"] = time.perf_counter() - t_start

    def _start_shards(self, W: np.ndarray, U: np.ndarray) -> None:
        """Build the shards at ``(W, U)`` with the rule's steps; connect them to one another
        for worker-to-worker routing."""
        wait = self.pool.recover_timeout + PEER_WAIT_MARGIN
        self.pool.start(shard_specs(self.model, self.layout, W, U, self.rule, self.prox,
                                    self.batch_cvxpy, wait))
        if self.routing == "workers":
            self.pool.connect()

    # ---------------------------------------------------------------- fault tolerance
    def calls(self, method: str, args: list[tuple]) -> list[Any]:
        """:meth:`~gtvmodel.primal_dual.shards.ShardPool.call`, raising
        :class:`~gtvmodel.primal_dual.shards.LostWorker` when a worker is gone."""
        try:
            return self.pool.call(method, args)
        except Exception as exc:
            if is_lost(exc):
                raise LostWorker(str(exc)) from exc
            raise

    def _guarded(self, action: Callable[[], Any], before: int) -> Any:
        """Run ``action`` (which needs ``before`` iterations done); after a lost worker rebuild
        the shards from the checkpoint, replay to ``before`` and try again."""
        while True:
            try:
                return action()
            except LostWorker as lost:
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
        self._batch = None
        try:
            self._start_shards(ck.weights, ck.flows)
            self.done = ck.iteration
            while self.done < target:
                self._step(self.done)
                self._finish(self.done + 1)
            self._flush()
        except Exception as exc:  # another worker lost while rebuilding or replaying
            if not (isinstance(exc, LostWorker) or is_lost(exc)):
                raise
            self._recover(target, str(exc), attempt + 1)

    # ---------------------------------------------------------------- the iteration
    def iterate(self, k: int) -> None:  # type: ignore[override]  # (the iterate stays there)
        """Iteration ``k``: PU (32) on the shards, the weights of boundary nodes to their
        neighbours' shards, DU (33) on the shards, the flows of boundary edges back."""
        self._guarded(lambda: self._step(k), k)

    def _residual_due(self, k: int) -> tuple[bool, bool]:
        """``(adapt, needed)`` after ``k`` iterations, as in the serial run."""
        rule = self.rule
        adapt = rule.active and k % rule.every == 0
        return adapt, adapt or k % self.opts.record_every == 0 or k == self.opts.max_iter

    def _step(self, k: int) -> None:
        if self.routing == "workers":
            self._queue(k)
            return
        pool, d = self.pool, self.model.dim
        t0 = time.perf_counter()
        sent0 = pool.sent
        flows_in: list[Any] = [None] * len(pool.actors) if self._flows_in is None \
            else self._flows_in
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
        self.timings["iterations"] += t2 - t0
        self.since_cert += t2 - t0
        self.bytes_per_iter.append(pool.sent - sent0)

    def _queue(self, k: int) -> None:
        """Worker to worker: iteration ``k`` joins the queued steps, which the shards run
        (:meth:`_flush`) when the residuals are due after it, or when the iterate is read."""
        if self._batch is None:
            c, self._pending_c = self._pending_c, None
            self._batch = [k, k, c]
        self._batch[1] = k + 1
        self.bytes_per_iter.append(0)
        if self._residual_due(k + 1)[1]:
            self._flush()

    def _flush(self) -> None:
        """Run the queued iterations ``k0 .. k1-1`` on the shards (:meth:`~gtvmodel.
        primal_dual.shards.Shard.steps`, one call each: the boundary rows go from worker to
        worker) with the residuals' parts after the last when due; the call's bytes are
        counted at the last iteration."""
        if self._batch is None:
            return
        k0, k1, c = self._batch
        want = self._residual_due(k1)[1]
        pool, t0, sent0 = self.pool, time.perf_counter(), self.pool.sent
        try:
            parts = pool.call_all("steps", [(k0, k1, c, want) for _ in pool.actors])
        except Exception as exc:
            if is_lost(exc):
                raise LostWorker(str(exc)) from exc
            raise
        self._batch = None
        if want:
            self._res2 = (sum(p[0] for p in parts), sum(p[1] for p in parts))
        elapsed = time.perf_counter() - t0
        self.timings["iterations"] += elapsed
        self.since_cert += elapsed
        self.bytes_per_iter[-1] += pool.sent - sent0

    def advance(self, k: int, new: Any) -> None:
        """After ``k`` iterations: the residuals from the shards' partial sums when the step
        rule or the history needs them, the step rule, and a checkpoint every
        ``checkpoint_every`` iterations."""
        while True:
            try:
                self._finish(k)
                break
            except LostWorker as lost:
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
        if want and self.routing == "workers":  # the shards' parts came with the steps
            d2, p2 = self._res2
            self.p_res, self.d_res = math.sqrt(p2), math.sqrt(d2)
        elif want:
            sent0 = self.pool.sent
            assert self._flows_in is not None  # routed by the edge round of this iteration
            parts = self.calls("receive_flows", [(f, True) for f in self._flows_in])
            self.bytes_per_iter[-1] += self.pool.sent - sent0
            self._flows_in = None
            self.p_res, self.d_res = math.sqrt(sum(parts)), math.sqrt(self._d2)
        self.done = k
        if adapt and self.rule.update(k - 1, self.p_res, self.d_res):
            self._pending_c = self.rule.c

    @property  # (read-only here: the shards hold the iterate)
    def x(self) -> Iterate:  # type: ignore[override]
        """The iterate ``(w^k, u^k)`` gathered from the shards (once per iteration)."""
        if self._gathered is None or self._gathered[0] != self.done:
            W, U = self._guarded(self._gather, self.done)
            self._gathered = (self.done, Iterate(W, U, None))
        return self._gathered[1]

    def _gather(self) -> tuple[np.ndarray, np.ndarray]:
        n, d, E = self.model.num_nodes, self.model.dim, self.model.num_edges
        W, U = np.empty((n, d)), np.empty((E, d))
        self._flush()
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
        self._flush()
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

    def _final_certificate(self, x: Iterate) -> Any:
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
        for part, _, _ in parts:
            for kind, m in part.items():
                paths[kind] = paths.get(kind, 0) + m
        self.timings["shard_compute_max"] = max(busy for _, busy, _ in parts)
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
            certificates_gathered=self.gathered_certs, gather_reasons=list(self.gather_reasons),
            routing=self.routing, peer_bytes=sum(b for _, _, b in parts))


def solve_distributed(model: ModelDeclaration, max_iter: int = 10_000, tol: float = 1e-6,
                      prox: str = "auto", step: Any = None, warm_start: Any = None,
                      callback: Callable[..., Any] | None = None, record_every: int = 50,
                      progress: bool = False, batch_cvxpy: bool = True,
                      certificate_budget: float | None = 0.25, *, client: Any = None,
                      shards: int | np.ndarray | None = None, checkpoint_every: int = 100,
                      recover_timeout: float = 30.0, certificates: str = "sharded",
                      routing: str = "workers") -> DistributedResult:
    """Algorithm 1 (paper 001) on a Dask cluster: PU (32) and DU (33) on shards of the nodes,
    each on one worker, until the certified gap (34) is at most ``tol * max(1, |P(w)|)``;
    the same iterates and stopping rule as :func:`~gtvmodel.primal_dual.algorithm.
    solve_primal_dual` (whose arguments these are; see the module docstring for what travels,
    the certificates and faults).  ``solve_primal_dual(model, backend=DaskBackend(client=...,
    shards=...))`` runs the same.

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
        Seconds to wait for a worker after one was lost (or, at the start, for a first one:
        a cluster still scaling up) before raising :class:`~gtvmodel.errors.WorkerLostError`
        with the last checkpoint.
    certificates : {"sharded", "gathered"}
        ``"sharded"``: each certificate summed from the shards' partial sums, ``O(shards)``
        bytes, gathering the iterate only where the repair needs a global step
        (:mod:`~gtvmodel.certificates.sharded_certificate`); ``"gathered"``: every certificate
        gathers ``(w^k, u^k)`` and runs :func:`~gtvmodel.certificates.certificate.certify` at
        the driver.
    routing : {"workers", "driver"}
        ``"workers"``: the boundary weights and flows go from worker to worker (each shard
        pushes its rows to its neighbours' actors); the driver sends the iteration numbers
        (one call per shard for all iterations between two residual evaluations) and receives
        the residuals' partial sums.  ``"driver"``: every iteration's rows are routed through
        the driver in two rounds of calls.  Both give the same iterates, bitwise.

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
        ``checkpoint_every``, ``recover_timeout``, ``certificates``, ``routing``), or
        ``client`` not a
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
    args = RunArguments(max_iter, tol, prox, step, warm_start, callback, record_every,
                        progress, batch_cvxpy, certificate_budget)
    return DaskBackend(client=client, shards=shards, checkpoint_every=checkpoint_every,
                       recover_timeout=recover_timeout, certificates=certificates,
                       routing=routing).solve(model, args)


@dataclass(frozen=True)
class DaskBackend(Backend):
    """Algorithm 1 on a Dask cluster, each shard of the nodes on one worker (the ``backend=``
    of :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`; the options are
    :func:`solve_distributed`'s).  The options that need the model or the cluster
    (``shards``, ``client``) are checked when the run starts.

    Parameters
    ----------
    client : distributed.Client, optional
        The cluster's client; None starts a ``LocalCluster`` (2 worker processes) for the run.
    shards : int or (n,) array, optional
        The number of shards (default: one per worker) or the shard of every node.
    checkpoint_every : int
        Keep a :class:`Checkpoint` every this many iterations (default 100).
    recover_timeout : float
        Seconds to wait for a worker after one was lost (default 30).
    certificates : {"sharded", "gathered"}
        Certificates summed from per-shard partial sums, or computed at the driver on the
        gathered iterate.
    routing : {"workers", "driver"}
        Boundary weights and flows from worker to worker (default), or through the driver.

    Raises
    ------
    ParameterError
        ``checkpoint_every``, ``recover_timeout``, ``certificates`` or ``routing`` out of range
        (named, here); ``shards`` or ``client`` bad (named, when the run starts).

    Examples
    --------
    >>> import gtvmodel as gm
    >>> gm.DaskBackend(shards=2)
    DaskBackend(client=None, shards=2, checkpoint_every=100, recover_timeout=30.0, \
certificates='sharded', routing='workers')
    """

    name: ClassVar[str] = "dask"
    client: Any = None
    shards: Any = None
    checkpoint_every: int = 100
    recover_timeout: float = 30.0
    certificates: str = "sharded"
    routing: str = "workers"

    def __post_init__(self) -> None:
        where = "DaskBackend"
        object.__setattr__(self, "checkpoint_every", check_int(
            self.checkpoint_every, "checkpoint_every", min_val=1, where=where))
        object.__setattr__(self, "recover_timeout", check_scalar(
            self.recover_timeout, "recover_timeout", min_val=0.0, where=where))
        check_option(self.certificates, "certificates", CERTIFICATE_MODES, where=where)
        check_option(self.routing, "routing", ROUTING_MODES, where=where)

    def solve(self, model: ModelDeclaration, args: RunArguments) -> DistributedResult:
        """:class:`_DaskRun`'s loop over the shards (raises as :func:`solve_distributed`)."""
        t_start = time.perf_counter()
        where = "solve_primal_dual(backend='dask')"
        opts = check_options(args)
        shards = self.shards
        labels = None if shards is None or np.isscalar(shards) else _check_labels(model, shards)
        if labels is None and shards is not None:
            check_int(shards, "shards", min_val=1, max_val=model.num_nodes, where=where)
        rule = make_step_rule(model, args.step)
        W, U = initial_point(model, args.warm_start)
        client, own_cluster = self.client, None
        if client is None:
            client, own_cluster = _local_client()
        try:
            _check_client(client, where)
            if labels is None:
                S = shards if shards is not None else \
                    max(1, len(client.scheduler_info()["workers"]))
                labels = partition_nodes(model, min(int(S), model.num_nodes))
            pool = ShardPool(client, ShardLayout.build(model, labels), [], self.recover_timeout)
            run = _DaskRun(model, opts, rule, W, U, pool, args.prox, args.batch_cvxpy,
                           self.checkpoint_every, args.progress, t_start, self.certificates,
                           self.routing)
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


BACKENDS["dask"] = DaskBackend
