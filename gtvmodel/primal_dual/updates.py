"""The two computations of one iteration of Algorithm 1 (paper 001), as message passing.

    node i:  v_i = w_i^k - tau_i (D^T u^k)_i ,    w_i^{k+1} = PU_i(v_i)                  (32)
    edge e:  u_e^{k+1} = DU_e( u_e^k + sigma_e (2 D w^{k+1} - D w^k)_e )                 (33)

(``2 D w^{k+1} - D w^k = D (2 w^{k+1} - w^k)``: the code forms the node rows ``Y = 2 w^{k+1} -
w^k`` and multiplies once, :func:`extrapolate`).  ``PU_i`` is the prox of the node's loss with
its constraints (:class:`~gtvmodel.primal_dual.prox.NodeUpdates`), ``DU_e`` the prox of
``sigma_e (lambda A_e phi)^*`` (:meth:`~gtvmodel.terms.penalties.Penalty.dual_update`).
:func:`prox_point` and :func:`dual_update` are the formulas, over any stack of rows (all nodes
/ all edges in the vectorized loop of :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`,
one in :class:`NodeUpdate` / :class:`EdgeUpdate`, which state what node ``i`` and edge ``e``
need: node ``i`` only its own loss and the flows on its incident edges, edge ``e`` only the old
and new weights of its two endpoints).  :class:`EdgeUpdates` runs DU on all edges, fused and
block by block (the vectorized loop's edge update).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..declaration import ModelDeclaration
from ..terms.penalties import Penalty
from .prox import NodeUpdates

__all__ = ["prox_point", "extrapolate", "dual_argument", "dual_update", "EdgeUpdates",
           "EDGE_BLOCK_BYTES",
           "NodeUpdate", "EdgeUpdate"]


def prox_point(W: np.ndarray, tau_col: np.ndarray | float, DTu: np.ndarray) -> np.ndarray:
    """The point ``v = w^k - T D^T u^k`` whose prox PU (32) is ``w^{k+1}`` (rows: nodes;
    ``tau_col`` the steps ``tau_i`` as a column, ``DTu`` the rows ``(D^T u^k)_i``)."""
    return W - tau_col * DTu


def extrapolate(W_new: np.ndarray, W: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``Y = 2 w^{k+1} - w^k`` written into ``out`` (node rows): DU (33) needs ``D Y``, one
    product of a node-sized array instead of ``2 D w^{k+1} - D w^k`` on ``|E|`` rows.  In-place
    operators only: numpy arrays and device tensors alike (the torch backend)."""
    out[...] = W_new
    out *= 2.0
    out -= W
    return out


def dual_argument(U: np.ndarray, DY: np.ndarray, sigma_col: Any) -> np.ndarray:
    """The argument ``u_e + sigma_e (D (2 w^{k+1} - w^k))_e`` of DU (33), written over ``DY``
    (the rows ``(D (2 w^{k+1} - w^k))_e``; ``sigma_col`` the steps as a column, or one
    number when they are equal)."""
    DY *= sigma_col
    DY += U
    return DY


def dual_update(penalty: Penalty, U: np.ndarray, DY: np.ndarray, sigma: np.ndarray,
                sigma_col: np.ndarray, lamA: np.ndarray) -> np.ndarray:
    """DU (33) for the rows ``e`` of ``U``: ``DU_e(u_e + sigma_e (D (2 w^{k+1} - w^k))_e)``
    with the capacities ``lamA = lambda A_e``; ``DY`` holds the rows ``(D (2 w^{k+1} -
    w^k))_e`` and is overwritten with the argument of ``DU`` (no other temporary); ``sigma``
    the steps, ``sigma_col`` the same as a column."""
    return penalty.dual_update(dual_argument(U, DY, sigma_col), sigma, lamA)


#: Rows of ``D`` per block of :class:`EdgeUpdates`: blocks of about this many bytes of
#: ``(rows, d)`` float64 keep the dual update's temporaries in a core's cache (measured at
#: 100,000 nodes / 1,000,000 edges, d = 10: the dual update 3-5x faster than on the whole
#: arrays, and 1 MiB the best of 128 KiB-8 MiB; benchmarks/RESULTS.md "Algorithm 1's iteration
#: at scale").
EDGE_BLOCK_BYTES = 2**20


class EdgeUpdates:
    """DU (33) on every edge, fused: ``u^{k+1} = DU(u^k + Sigma D Y)`` with ``Y = 2 w^{k+1} -
    w^k`` (:func:`extrapolate`), computed block by block of rows of ``D`` (CSR blocks sliced
    once) into a given output, so that the only ``(|E|, d)`` array an iteration writes is
    ``u^{k+1}``: ``(D Y)_e``, the argument of ``DU`` and the penalty's temporaries are
    block-sized, and each block's DU (:meth:`~gtvmodel.terms.penalties.Penalty.dual_updater`,
    its capacities' constants computed once) writes its rows of ``u^{k+1}`` directly.  Every
    row is computed by the same operations as on the whole arrays (each row of ``D Y`` sums its
    two entries in CSR order; the penalty's dual update is row-wise), so the flows do not
    depend on the blocks.

    ``threads > 1`` (opt-in) splits the blocks, and the rows of ``D^T`` in
    :meth:`node_sums`, into that many contiguous parts run on a thread pool (numpy and
    scipy's sparse products release the GIL): the same rows by the same operations, so the
    same iterates bit for bit; the pool is shut down by :meth:`close`."""

    def __init__(self, D: sp.csr_matrix, penalty: Penalty, lamA: np.ndarray, dim: int,
                 block_bytes: int | None = None, threads: int = 1,
                 DT: sp.csr_matrix | None = None):
        rows = max(1, (EDGE_BLOCK_BYTES if block_bytes is None else block_bytes)
                   // (8 * max(dim, 1)))
        E = D.shape[0]
        D = D.tocsr()
        self.penalty, self.lamA = penalty, lamA
        self.blocks = [(a, min(a + rows, E), D if rows >= E else D[a:a + rows])
                       for a in range(0, E, rows)]
        # DU of each block with its capacities (Penalty.dual_updater: for Norm2 the
        # projection with the radii's constants computed once, written into the flows)
        self.updaters = [penalty.dual_updater(lamA[a:b], dim) for a, b, _ in self.blocks]
        self.D, self._DT = D, DT  # D^T: given, or formed on first use (node_sums)
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None
        if threads > 1:
            parts = np.array_split(np.arange(len(self.blocks)), threads)
            self._parts = [list(zip([self.blocks[j] for j in p], [self.updaters[j] for j in p],
                                    strict=True)) for p in parts if p.size]
            cuts = np.linspace(0, self.DT.shape[0], threads + 1).astype(int)
            self._node_parts = [(a, b, self.DT[a:b]) for a, b in zip(cuts[:-1], cuts[1:],
                                                                      strict=True) if b > a]
            self._pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="gtv-edges")
        #: The dual residual's norm computed by the last call (None: not asked for).
        self.dual_residual: float | None = None
        self._sigma: np.ndarray | None = None  # the steps last seen, and
        self._uniform: float | None = None     # their common value if they are all equal

    def __call__(self, Y: np.ndarray, U: np.ndarray, sigma: np.ndarray, sigma_col: np.ndarray,
                 out: np.ndarray, W: np.ndarray | None = None,
                 W_new: np.ndarray | None = None) -> np.ndarray:
        """Write ``u^{k+1}`` (33) into ``out`` (``(|E|, d)``, not ``U``) from ``Y = 2 w^{k+1} -
        w^k`` and ``u^k = U`` with the steps ``sigma`` (and as a column ``sigma_col``).  Equal
        steps (the default rule's ``sigma_e = 1/(2c)``) scale by one number: the same products,
        about 2x cheaper than a column broadcast over rows of ``d`` entries.  With ``W = w^k``
        and ``W_new = w^{k+1}``: also the dual residual's norm ``d_k``
        (:func:`~gtvmodel.primal_dual.steps.residuals`), block by block while the block's
        flows are in cache (:attr:`dual_residual`; no ``(|E|, d)`` temporary).  ``out`` may
        be ``U`` (in place) when the residual is not asked for."""
        uniform = self._uniform_step(sigma)
        dW = None if W is None else W - W_new
        if self._pool is None:
            rsq = [self._run(zip(self.blocks, self.updaters, strict=True), Y, U, sigma,
                             sigma_col, uniform, out, dW)]
        else:
            rsq = self._parallel([(self._run, part, Y, U, sigma, sigma_col, uniform, out, dW)
                                  for part in self._parts])
        self.dual_residual = None if dW is None else float(np.sqrt(sum(rsq)))
        return out

    @staticmethod
    def _run(part: Any, Y: np.ndarray, U: np.ndarray, sigma: np.ndarray, sigma_col: np.ndarray,
             uniform: float | None, out: np.ndarray, dW: np.ndarray | None = None) -> float:
        """DU (33) on the blocks ``part`` (pairs of a block and its updater) into ``out``;
        with ``dW = w^k - w^{k+1}`` returns the blocks' sum of squares of the dual residual
        ``(u^k - u^{k+1}) / sigma - D dW`` (the operations of
        :func:`~gtvmodel.primal_dual.steps.residuals`), else 0."""
        rsq = 0.0
        for (a, b, Db), update in part:
            col = sigma_col[a:b] if uniform is None else uniform
            update(dual_argument(U[a:b], Db @ Y, col), sigma[a:b], out[a:b])
            if dW is not None:
                R = (U[a:b] - out[a:b]) / sigma_col[a:b]
                R -= Db @ dW
                rsq += float(np.einsum("ij,ij->", R, R))
        return rsq

    @property
    def DT(self) -> sp.csr_matrix:
        """``D^T`` as CSR (the one given to the constructor, else formed once here)."""
        if self._DT is None:
            self._DT = self.D.T.tocsr()
        return self._DT

    def node_sums(self, U: np.ndarray) -> np.ndarray:
        """``D^T U`` (the rows ``(D^T u)_i`` of PU (32)): one sparse product, or with
        ``threads > 1`` one per contiguous range of nodes, on the pool."""
        if self._pool is None:
            return self.DT @ U
        out = np.empty((self.DT.shape[0], U.shape[1]))

        def rows(a: int, b: int, DTp: sp.csr_matrix) -> None:
            out[a:b] = DTp @ U
        self._parallel([(rows, a, b, DTp) for a, b, DTp in self._node_parts])
        return out

    def _parallel(self, calls: list[tuple]) -> list:
        """Run the calls ``(f, *args)``: the first in this thread, the others on the pool
        (their exceptions re-raised here); returns their results."""
        assert self._pool is not None
        if not calls:  # no edges (or no nodes): nothing to run
            return []
        futures = [self._pool.submit(*call) for call in calls[1:]]
        try:
            first = calls[0][0](*calls[0][1:])
        finally:
            rest = [f.result() for f in futures]
        return [first, *rest]

    def close(self) -> None:
        """Shut the thread pool down (no-op without one)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def _uniform_step(self, sigma: np.ndarray) -> float | None:
        """The common value of the steps ``sigma`` if they are all equal (checked once per
        steps array: the step rule replaces the array when it changes them)."""
        if sigma is not self._sigma:
            self._sigma = sigma
            same = sigma.size > 0 and bool(np.all(sigma == sigma[0]))
            self._uniform = float(sigma[0]) if same else None
        return self._uniform


@dataclass
class NodeUpdate:
    """The computation of node ``i`` in one iteration: from its own weight ``w_i``, the flows
    ``u_e`` on its incident edges (with orientation signs ``+1`` if ``i = e+``, ``-1`` if ``i =
    e-``, so ``(D^T u)_i = sum_e sign_e u_e``) and its step ``tau_i``, the new weight
    ``PU_i(w_i - tau_i (D^T u)_i)`` (32)."""

    updates: NodeUpdates
    i: int

    def __call__(self, w_i: np.ndarray, flows: np.ndarray, signs: np.ndarray, tau_i: float,
                 k: int = 0) -> np.ndarray:
        """``w_i^{k+1}`` (32) at iteration ``k`` (the CVXPY path's tolerance depends on it)."""
        v = prox_point(w_i, tau_i, (signs[:, None] * flows).sum(axis=0))
        return self.updates.node(self.i, v, tau_i, k, w_i)


@dataclass
class EdgeUpdate:
    """The computation of edge ``e = (e+, e-)``: from its flow ``u_e``, the old and new weights
    of its two endpoints and ``sigma_e``, the new flow
    ``DU_e(u_e + sigma_e (2 (w+_new - w-_new) - (w+_old - w-_old)))`` (33)."""

    model: ModelDeclaration
    e: int

    def __call__(self, u_e: np.ndarray, head_new: np.ndarray, tail_new: np.ndarray,
                 head_old: np.ndarray, tail_old: np.ndarray, sigma_e: float) -> np.ndarray:
        """``u_e^{k+1}`` (33)."""
        sigma = np.array([sigma_e])
        lam_a = np.array([self.model.lam * self.model.edge_weights[self.e]])  # its capacity
        dy = (2.0 * head_new - head_old) - (2.0 * tail_new - tail_old)  # (D (2w+ - w))_e
        return dual_update(self.model.penalty, u_e[None], dy[None], sigma, sigma[:, None],
                           lam_a)[0]
