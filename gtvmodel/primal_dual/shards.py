"""The shards of Algorithm 1 on Dask (:mod:`~gtvmodel.primal_dual.distributed`): what a shard's
worker receives once (:class:`ShardSpec`, built by :func:`shard_specs` from the model and the
:class:`~gtvmodel.primal_dual.sharding.ShardLayout`) and the shard itself (:class:`Shard`, a
Dask actor): its nodes' rows ``w_i``, its incident edges' flows ``u_e`` and its half-steps of an
iteration, :meth:`Shard.node_step` (PU (32) at its nodes) and :meth:`Shard.edge_step` (DU (33)
on its owned edges), and its partial sums of a certificate
(:mod:`~gtvmodel.certificates.sharded_certificate`).

Two ways for the boundary rows to travel: routed by the driver (:meth:`Shard.node_step`,
:meth:`Shard.edge_step`, :meth:`Shard.receive_flows`, rows in and out of every call), or from
worker to worker (:meth:`Shard.steps`: each shard pushes its outgoing rows straight to the
neighbour shards' actors, :meth:`Shard.put`, and waits for its incoming ones; the driver sends
only the iteration numbers and receives the residuals' partial sums).  Both run the same
arithmetic on the same rows (:meth:`Shard._node_update`, :meth:`Shard._edge_update`,
:meth:`Shard._install_flows`), so their iterates agree bitwise.
"""

from __future__ import annotations

import asyncio
import pickle
import time
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse as sp

from ..certificates.sharded_certificate import (
    ShardCertificate,
    local_flows,
    shard_parts,
    shard_scan,
)
from ..declaration import ModelDeclaration
from ..errors import DistributedError, GTVError
from ..terms.penalties import Penalty
from .loop import raise_non_finite
from .prox import NodeUpdates
from .sharding import ShardLayout
from .steps import FixedSteps, ResidualBalancing, steps_from_scale
from .updates import EdgeUpdates, extrapolate, prox_point

__all__ = ["ShardSpec", "Shard", "ShardPool", "LostWorker", "is_lost", "shard_specs", "edge_map"]


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
    (``cert_owned``).  For worker-to-worker messages (:meth:`Shard.steps`), per neighbour
    shard ``t``: the positions among the own nodes of the weights it needs (``w_out[t]``), the
    local positions where its weights go (``w_in[t]``), the positions among the owned edges of
    the flows it needs (``u_out[t]``) and the positions among the incident edges where its
    flows go (``u_in[t]``), all in global order; ``wait`` is the longest wait for a
    neighbour's rows (seconds) before the step fails as a lost worker."""

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
    w_out: dict[int, np.ndarray] = field(default_factory=dict)
    w_in: dict[int, np.ndarray] = field(default_factory=dict)
    u_out: dict[int, np.ndarray] = field(default_factory=dict)
    u_in: dict[int, np.ndarray] = field(default_factory=dict)
    wait: float = 300.0


class Shard:
    """One shard's state on its worker (a Dask actor) and its half-steps of an iteration of
    Algorithm 1: PU (32) at its nodes and DU (33) on its owned edges, the boundary rows routed
    by the driver (:meth:`node_step`, :meth:`edge_step`, :meth:`receive_flows`) or exchanged
    with the neighbour shards directly (:meth:`connect`, :meth:`steps`, :meth:`put`)."""

    def __init__(self, blob: ShardSpec | bytes):
        # pickled once by the driver (which counts its size)
        spec: ShardSpec = pickle.loads(blob) if isinstance(blob, bytes) else blob
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
        self.busy = 0.0  # seconds spent computing iterations
        self.peers: list[tuple[str, str]] = []  # (worker address, actor key) of every shard
        self.peer_bytes = 0  # bytes of the rows pushed to other shards
        self._inbox: dict[tuple[str, int], dict[int, np.ndarray]] = {}
        self._waiters: dict[tuple[str, int], asyncio.Future] = {}
        self._aborted: BaseException | None = None

    def set_steps(self, c: float | None, tau: np.ndarray | None = None,
                  sigma: np.ndarray | None = None) -> None:
        """The steps of scale ``c`` (:func:`~gtvmodel.primal_dual.steps.steps_from_scale`) or
        the explicit rows ``tau``, ``sigma``."""
        if c is not None:
            tau, sigma = steps_from_scale(self.spec.deg, self.spec.lamA.size, c)
        elif tau is None or sigma is None:
            raise ValueError("Shard.set_steps: the scale c or both tau and sigma are needed")
        self.tau, self.sigma = tau, sigma
        self.tau_col, self.sigma_col = tau[:, None], sigma[:, None]
        self.tau_loc[:self.spec.n_own] = tau

    # ------------------------------------------------------------ the arithmetic (one copy)
    def _node_update(self, k: int, c: float | None) -> None:
        """PU (32) at the shard's nodes in iteration ``k`` (scale ``c`` first when given)
        into ``W_new``'s own rows."""
        t0 = time.perf_counter()
        if c is not None:
            self.set_steps(c)
        n = self.spec.n_own
        self.V[:n] = prox_point(self.W[:n], self.tau_col, self.DTu)
        W_new = self.updates(self.V, self.tau_loc, k, self.W)[:n]
        if not np.isfinite(W_new).all():
            raise_non_finite(self.spec.model, W_new, self.V[:n], self.tau, k)
        self.W_new[:n] = W_new
        self.busy += time.perf_counter() - t0

    def _edge_update(self, residual: bool) -> tuple[np.ndarray, float | None]:
        """DU (33) on the owned edges (the ghosts' new weights installed in ``W_new``); moves
        to ``w^{k+1}``; returns the owned edges' new flows and (with ``residual``) the shard's
        part of ``d_k^2``."""
        spec, t0 = self.spec, time.perf_counter()
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
        return U_new, d2

    def _install_flows(self, residual: bool) -> float | None:
        """``(D^T u^{k+1})_i`` once the flows of the edges owned elsewhere are in ``U``; with
        ``residual`` the shard's part of ``p_k^2`` (:func:`~gtvmodel.primal_dual.steps.
        residuals`)."""
        t0 = time.perf_counter()
        self.DTu = self.spec.DT_own @ self.U
        p2 = None
        if residual:
            R = (self.W_old - self.W[:self.spec.n_own]) / self.tau_col - (self.DTu_old
                                                                           - self.DTu)
            p2 = float(np.einsum("ij,ij->", R, R))
        self.busy += time.perf_counter() - t0
        return p2

    # ------------------------------------------------------------ routed by the driver
    def receive_flows(self, flows: np.ndarray, residual: bool = False) -> float | None:
        """Install the new flows of the edges owned elsewhere, form ``(D^T u^{k+1})_i``; with
        ``residual`` return the shard's part of ``p_k^2``."""
        self.U[self.spec.recv_in_inc] = flows
        return self._install_flows(residual)

    def node_step(self, k: int, flows: np.ndarray | None, c: float | None) -> np.ndarray:
        """PU (32) at the shard's nodes in iteration ``k`` (after installing ``flows`` and the
        scale ``c`` when given); returns the new weights of the nodes other shards need."""
        if flows is not None:
            self.receive_flows(flows)
        self._node_update(k, c)
        return self.W_new[:self.spec.n_own][self.spec.send_own]

    def edge_step(self, weights: np.ndarray, residual: bool = False
                  ) -> tuple[np.ndarray, float | None]:
        """DU (33) on the owned edges with the new weights of the ghosts; returns the new flows
        of the owned edges other shards need and (with ``residual``) the shard's part of
        ``d_k^2``."""
        self.W_new[self.spec.recv_local] = weights
        U_new, d2 = self._edge_update(residual)
        return U_new[self.spec.send_owned], d2

    # ------------------------------------------------------------ worker to worker
    def connect(self, peers: list[tuple[str, str]]) -> None:
        """The ``(worker address, actor key)`` of every shard's actor (this one's included),
        for :meth:`steps` to push rows to its neighbours."""
        self.peers = [(str(p[0]), str(p[1])) for p in peers]

    async def steps(self, k0: int, k1: int, c: float | None, residual: bool
                    ) -> tuple[float | None, float | None]:
        """Iterations ``k0 .. k1-1`` with the neighbour shards, no driver in between: PU (32),
        the new weights pushed to the shards that need them (:meth:`put`) and theirs awaited,
        DU (33), the new flows pushed and awaited, ``D^T u`` formed.  ``c``: the step scale
        from iteration ``k0`` on (None: unchanged).  Returns the shard's parts ``(d^2, p^2)``
        of the residuals after iteration ``k1 - 1`` (with ``residual``; else Nones).  The
        computing runs on the worker's actor thread, the messages on its event loop."""
        from distributed import get_worker  # optional dependency, present on a Dask worker

        worker = get_worker()
        loop, pool = asyncio.get_running_loop(), worker.executors["actor"]
        spec, d2, p2 = self.spec, None, None
        for k in range(k0, k1):
            want = residual and k == k1 - 1
            await loop.run_in_executor(pool, self._node_update, k, c if k == k0 else None)
            n = spec.n_own
            got = await self._exchange(worker, "w", k, {t: self.W_new[:n][pos]
                                                        for t, pos in spec.w_out.items()})
            for t, rows in got.items():
                self.W_new[spec.w_in[t]] = rows
            U_new, d2 = await loop.run_in_executor(pool, self._edge_update, want)
            got = await self._exchange(worker, "u", k, {t: U_new[pos]
                                                        for t, pos in spec.u_out.items()})
            for t, rows in got.items():
                self.U[spec.u_in[t]] = rows
            p2 = await loop.run_in_executor(pool, self._install_flows, want)
        return d2, p2

    async def put(self, kind: str, k: int, src: int, rows: np.ndarray) -> None:
        """Rows from shard ``src`` for iteration ``k`` (``kind``: ``"w"`` weights, ``"u"``
        flows), called by that shard's :meth:`steps`."""
        box = self._inbox.setdefault((kind, k), {})
        box[src] = rows
        need = self.spec.w_in if kind == "w" else self.spec.u_in
        waiter = self._waiters.get((kind, k))
        if waiter is not None and len(box) == len(need) and not waiter.done():
            waiter.set_result(None)

    async def abort(self, why: str) -> None:
        """Stop waiting for the neighbours (one shard failed): the waiting :meth:`steps`
        raises :class:`~gtvmodel.errors.DistributedError`."""
        self._aborted = DistributedError(f"shard {self.spec.index}: aborted ({why})")
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_exception(self._aborted)

    async def _exchange(self, worker: Any, kind: str, k: int, out: dict[int, np.ndarray]
                        ) -> dict[int, np.ndarray]:
        """Push ``out[t]`` to every neighbour ``t`` and wait for every neighbour's rows of
        iteration ``k`` (a failed push, an abort or ``spec.wait`` seconds without the rows
        raise)."""
        need = self.spec.w_in if kind == "w" else self.spec.u_in
        key = (kind, k)
        waiter = self._waiters[key] = asyncio.get_running_loop().create_future()
        if len(self._inbox.get(key, {})) == len(need):
            waiter.set_result(None)
        if self._aborted is not None:
            raise self._aborted
        tasks = [asyncio.ensure_future(self._push(worker, t, kind, k, rows))
                 for t, rows in out.items()]
        try:
            for task in asyncio.as_completed([*tasks, waiter], timeout=self.spec.wait):
                await task
        except asyncio.TimeoutError as exc:
            raise LostWorker(f"shard {self.spec.index}: no rows from its neighbours in "
                             f"iteration {k} within {self.spec.wait:g} s (worker lost?)"
                             ) from exc
        finally:
            for task in tasks:
                task.cancel()
            del self._waiters[key]
        return self._inbox.pop(key, {})

    async def _push(self, worker: Any, t: int, kind: str, k: int, rows: np.ndarray) -> None:
        """:meth:`put` on shard ``t``'s actor (directly when it is on this worker)."""
        from distributed.protocol import to_serialize  # optional dependency

        address, key = self.peers[t]
        self.peer_bytes += rows.nbytes
        if address == worker.address:
            await worker.state.actors[key].put(kind, k, self.spec.index, rows)
            return
        answer = await worker.rpc(address).actor_execute(
            function="put", actor=key, args=[to_serialize(a) for a in (kind, k,
                                                                        self.spec.index, rows)],
            kwargs={})
        if answer["status"] != "OK":
            raise answer["exception"]

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

    def describe(self) -> tuple[dict[str, int], float, int]:
        """Number of the shard's nodes per node-update path (ghosts left out), the seconds
        it spent computing iterations (:attr:`busy`) and the bytes of the rows it pushed to
        other shards (:attr:`peer_bytes`)."""
        out: dict[str, int] = {}
        n = self.spec.n_own
        for grp in self.updates.groups:
            m = int((np.asarray(grp.nodes) < n).sum())
            if m:
                out[grp.kind] = out.get(grp.kind, 0) + m
        return out, self.busy, self.peer_bytes



def shard_specs(model: ModelDeclaration, layout: ShardLayout, W: np.ndarray, U: np.ndarray,
                rule: FixedSteps | ResidualBalancing, prox: str, batch_cvxpy: bool,
                wait: float = 300.0) -> list[ShardSpec]:
    """The :class:`ShardSpec` of every shard for the iterate ``(W, U)`` and the step rule
    (``wait``: :attr:`ShardSpec.wait`)."""
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
        perm, sign = edge_map(model, sub, inc)
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
            tau=rule.tau[own] if isinstance(rule, FixedSteps) else None,
            sigma=rule.sigma[owned] if isinstance(rule, FixedSteps) else None,
            W0=W[local].copy(), U0=U[inc].copy(), prox=prox, batch_cvxpy=batch_cvxpy,
            cert_perm=perm, cert_sign=sign,
            cert_owned=np.flatnonzero(np.isin(inc[perm], owned)), wait=wait))
    _peer_positions(model, layout, specs)
    return specs


def _peer_positions(model: ModelDeclaration, layout: ShardLayout, specs: list[ShardSpec]
                    ) -> None:
    """Fill every spec's ``w_out``, ``w_in``, ``u_out``, ``u_in`` (per neighbour shard: the
    rows it sends there, where the rows from there go) from its ``recv_local`` and
    ``recv_in_inc`` (a loop over shards, vectorized over nodes and edges)."""
    labels, heads = layout.labels, model.edges[:, 0]
    for s, spec in enumerate(specs):
        src_w = labels[layout.recv_nodes[s]]  # the shard of every ghost whose weight comes in
        src_u = labels[heads[layout.recv_edges[s]]]  # the owner of every edge whose flow does
        for t in np.unique(src_w).tolist():
            sel = src_w == t
            spec.w_in[t] = spec.recv_local[sel]
            specs[t].w_out[s] = np.searchsorted(layout.own[t], layout.recv_nodes[s][sel])
        for t in np.unique(src_u).tolist():
            sel = src_u == t
            spec.u_in[t] = spec.recv_in_inc[sel]
            specs[t].u_out[s] = np.searchsorted(layout.owned[t], layout.recv_edges[s][sel])


def edge_map(model: ModelDeclaration, sub: ModelDeclaration, inc: np.ndarray
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


class LostWorker(Exception):
    """A shard's worker is gone (triggers a recovery of the run)."""


def is_lost(exc: BaseException) -> bool:
    """Did a call fail because its worker is gone (not because of the computation)?"""
    if isinstance(exc, GTVError):
        return False
    text = f"{type(exc).__name__} {exc}".lower()
    return isinstance(exc, (OSError, TimeoutError)) or any(
        w in text for w in ("lost", "killedworker", "commclosed", "cancelled", "closed"))


class ShardPool:
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
        if not workers:  # a cluster still starting, or replacing a worker: wait for one
            try:
                self.client.wait_for_workers(1, timeout=self.recover_timeout)
            except Exception as exc:  # none within recover_timeout
                raise LostWorker("no Dask worker is available") from exc
            workers = sorted(self.client.scheduler_info()["workers"])
        if not workers:  # (a recovery waits for one again: the last may have just left)
            raise LostWorker("no Dask worker is available")
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
            if is_lost(exc):
                raise
            raise DistributedError(
                f"a Dask worker could not build its shard ({type(exc).__name__}: {exc}); do "
                "the workers have gtvmodel and its dependencies installed?") from exc

    def connect(self) -> None:
        """Give every shard the ``(worker address, actor key)`` of every shard's actor, for
        the worker-to-worker steps (:meth:`Shard.steps`); counted in :attr:`setup_bytes`."""
        peers = [(actor._address, actor.key) for actor in self.actors]
        self.setup_bytes += len(self.actors) * len(pickle.dumps(("connect", peers), protocol=5))
        for f in [actor.connect(peers) for actor in self.actors]:
            f.result()

    def call_all(self, method: str, args: list[tuple]) -> list[Any]:
        """:meth:`call` for methods that wait for one another (:meth:`Shard.steps`): the first
        failure aborts the others' waits (:meth:`Shard.abort`) and is raised."""
        self.sent += sum(len(pickle.dumps((method, a), protocol=5)) for a in args)
        futures: list[Any] = []
        for actor, a in zip(self.actors, args, strict=True):
            try:
                futures.append(getattr(actor, method)(*a))
            except Exception as exc:  # (an actor whose worker is known to be gone)
                self._abort(list(range(len(futures))), f"{type(exc).__name__}: {exc}")
                raise
        pending, delay = list(range(len(futures))), 2e-5
        out: list[Any] = [None] * len(futures)
        while pending:
            for s in [s for s in pending if futures[s].done()]:
                pending.remove(s)
                try:
                    out[s] = futures[s].result()
                except Exception as exc:
                    self._abort(pending, f"shard {s} failed: {type(exc).__name__}")
                    raise
            if pending:
                time.sleep(delay)
                delay = min(2 * delay, 1e-3)
        return out

    def _abort(self, shards: list[int], why: str) -> None:
        """Best effort: stop the waits of ``shards`` (their workers may be gone)."""
        for s in shards:
            try:
                self.actors[s].abort(why)
            except Exception:  # a gone worker has nothing left to abort
                pass

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
