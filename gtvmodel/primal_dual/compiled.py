"""The edge update DU (33) of Algorithm 1 as one compiled pass per iteration (numba), and the
choice between it and the numpy blocks (``NumpyBackend(kernel=...)``).

:class:`CompiledEdgeUpdates` has the interface of
:class:`~gtvmodel.primal_dual.updates.EdgeUpdates` (``__call__``, :meth:`node_sums`,
:meth:`close`): one pass over the edges reads ``u_e^k`` and the rows of ``Y = 2 w^{k+1} - w^k``
of the edge's endpoints, forms the argument of DU, applies the penalty's row kernel
(:meth:`~gtvmodel.terms.penalties.Penalty.compiled_dual_row`, :mod:`gtvmodel._compiled`),
writes ``u_e^{k+1}`` and adds it into the endpoints' rows of ``D^T u^{k+1}``: one pass where
numpy makes about six over ``(|E|, d)`` arrays.  Rows a kernel declines (NaN, norms outside
its proven range) take the penalty's numpy :meth:`~gtvmodel.terms.penalties.Penalty.
dual_update`, so every flow is what the numpy path guarantees (a ``Norm2`` flow inside its
capacity for certain).  The iterates agree with the numpy path's to rounding (the same
operations in the same order but for the order of the sum of squares in a norm).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import scipy.sparse as sp

from .. import _compiled
from .._validate import check_option
from ..errors import UnsupportedError
from ..terms.losses.operators import SampleOperator
from ..terms.penalties import Penalty
from .prox import NodeUpdates
from .strategies import BatchProxGroup
from .updates import EdgeUpdates, dual_argument, extrapolate, prox_point

__all__ = ["CompiledEdgeUpdates", "CompiledNodeUpdates", "KERNELS", "AUTO_NUMBA_ENTRIES",
           "TAIL_BLOCK_BYTES", "LARGE_NODE_BYTES", "LARGE_TAIL_BLOCK_BYTES", "edge_order",
           "make_edge_updates"]

#: The options of ``NumpyBackend(kernel=...)``.
KERNELS = ("auto", "numpy", "numba")

#: ``kernel="auto"`` compiles the edge update when ``|E| d`` is at least this (and numba is
#: installed and the penalty has a row kernel): there it saves about 2.6 ms per iteration,
#: which repays numba's import and the kernels' load from its cache (about 0.7 s) within a few
#: hundred iterations, a first compile on the machine (1-2 s) within about a thousand; below
#: it the gain is too small (benchmarks/RESULTS.md, "Algorithm 1's compiled edge update").
AUTO_NUMBA_ENTRIES = 1_000_000

#: With ``reorder``, :class:`CompiledEdgeUpdates` keeps the flows in its own edge order: by
#: blocks of tails (``e-``) whose rows of ``Y`` and ``D^T u`` (``2 d`` floats each) take about
#: this many bytes, by head inside a block, so that the random reads and writes of one block
#: stay in a core's cache (benchmarks/RESULTS.md, issue 30: the edge pass 40-45 % less CPU at
#: 10^5 nodes / 10^6 edges, d = 10, than in the model's order, sorted by head).
TAIL_BLOCK_BYTES = 2**19

#: Where the rows of ``Y`` and ``D^T u`` of all nodes (``16 d n`` bytes) exceed this, the
#: blocks take :data:`LARGE_TAIL_BLOCK_BYTES` instead: the heads, swept once per block, then
#: dominate (the ``Norm2`` pass alone, CPU, 2-core machine: 10^6 nodes / 10^7 edges 1.21 s
#: with 512 KiB blocks, 0.77-0.79 s with 4-16 MiB; 5 * 10^5 / 5 * 10^6 0.52 s against 0.37 s;
#: at 10^5 and 2 * 10^5 nodes 512 KiB stays the best: benchmarks/RESULTS.md, issue 30).
LARGE_NODE_BYTES = 2**25
LARGE_TAIL_BLOCK_BYTES = 2**22


class CompiledEdgeUpdates:
    """DU (33) on every edge in one compiled pass (module docstring), with ``D^T u^{k+1}``
    accumulated in the same pass; ``threads > 1``: contiguous ranges of edges, then of the
    rows of ``D^T``, on a thread pool (the kernels release the GIL; no shared writes, so the
    same iterates bit for bit as serially).  ``row`` is the penalty's
    :meth:`~gtvmodel.terms.penalties.Penalty.compiled_dual_row` for ``lamA``.

    ``reorder`` (for an incidence matrix of ``+1``/``-1`` pairs): the flows ``U`` and ``out``
    of every call are in the order :attr:`perm` (:func:`edge_order`; row ``a`` is the
    model's edge ``perm[a]``: :meth:`model_order` gives the model's rows), the caller
    converting at its boundaries (the steps ``sigma`` stay in the model's order);
    :attr:`perm` None: the model's order.  ``cache`` (a model's cache) keeps the order and
    the endpoints in that order per model version (slot ``"pd_edge_order"``)."""

    def __init__(self, D: sp.csr_matrix, penalty: Penalty, lamA: np.ndarray, dim: int,
                 row: tuple, threads: int = 1,
                 DT: sp.csr_matrix | Callable[[], sp.csr_matrix] | None = None,
                 reorder: bool = False, cache: Any = None):
        self.kernels = _compiled.kernels()
        D = D.tocsr()
        self.penalty, self.lamA, self.row = penalty, lamA, row
        self.D = D
        self._csr = (D.indptr, D.indices, np.ascontiguousarray(D.data, dtype=float))
        # rows (+1 at e+, -1 at e-): the one-sweep pass on the endpoints (the same flows)
        pairs = bool(D.shape[0]) and bool(np.all(np.diff(D.indptr) == 2)) and bool(
            np.all(D.data[0::2] == 1.0)) and bool(np.all(D.data[1::2] == -1.0))
        self._ends: tuple[np.ndarray, ...]
        #: The edge order of the flows (None: the model's).
        self.perm: np.ndarray | None = None
        self._inv: np.ndarray | None = None  # its inverse
        if pairs:
            def build() -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray,
                                 np.ndarray]:
                heads, tails = D.indices[0::2], D.indices[1::2]
                # (32-bit indices where they fit: less to read per edge)
                it = np.int32 if max(D.shape) < 2**31 else np.int64
                perm = edge_order(heads, tails, D.shape[1], dim) if reorder else None
                inv = None
                if perm is not None:
                    perm = perm.astype(it)
                    inv = np.empty_like(perm)
                    inv[perm] = np.arange(perm.size, dtype=it)
                    heads, tails = heads[perm], tails[perm]
                return (perm, inv, np.ascontiguousarray(heads, dtype=it),
                        np.ascontiguousarray(tails, dtype=it))
            self.perm, self._inv, *ends = (build() if cache is None or not reorder else
                                           cache.get_or_build("pd_edge_order", build))
            if self.perm is not None and not _constant(lamA):  # (a constant: the same row)
                self.row = penalty.compiled_dual_row(lamA[self.perm], dim)
            # Norm2: the pass edge by edge (the projection written into it)
            self._pass = (self.kernels.l2_pair_pass if isinstance(self.row, _compiled.L2BallRow)
                          else self.kernels.pair_pass)
            self._ends = tuple(ends)
        else:
            self._pass, self._ends = self.kernels.edge_pass, self._csr
        self._DT = DT  # D^T, or what builds it (only flagged rows, threads and flows not
        # from the last pass need it: formed on first use)
        self._csr_T_arrays: tuple[np.ndarray, ...] | None = None
        self._sigma: tuple[Any, np.ndarray] = (None, np.empty(0))
        E, n = D.shape
        # the rows a kernel declines (32-bit where the edges' count fits)
        self._fdt = np.int32 if E < 2**31 else np.int64
        self._flagged = np.empty(E, dtype=self._fdt)
        # D^T u^{k+1} alternates between two arrays: the caller keeps D^T u^k one iteration
        self._sums = [np.empty((n, dim)), np.empty((n, dim))]
        self._fresh: tuple[np.ndarray, np.ndarray] | None = None  # (u^{k+1}, its D^T u)
        self.threads = threads
        #: The dual residual's norm computed by the last call (None: not asked for).
        self.dual_residual: float | None = None
        self._pool: ThreadPoolExecutor | None = None
        if threads > 1:
            self._edge_cuts = _cuts(E, threads)
            self._node_cuts = _cuts(n, threads)
            self._pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="gtv-numba")

    def __call__(self, Y: np.ndarray, U: np.ndarray, sigma: np.ndarray, sigma_col: np.ndarray,
                 out: np.ndarray, W: np.ndarray | None = None,
                 W_new: np.ndarray | None = None) -> np.ndarray:
        """Write ``u^{k+1}`` (33) into ``out`` (``(|E|, d)``: ``U`` itself, in place, or
        another array) from ``Y = 2 w^{k+1} - w^k``, ``u^k = U`` and the steps ``sigma``
        (``sigma_col`` unused: the interface of :class:`~gtvmodel.primal_dual.updates.
        EdgeUpdates`); with ``W = w^k`` and ``W_new = w^{k+1}`` also the dual residual's norm
        in the same pass (:attr:`dual_residual`), in place or not."""
        Y = np.ascontiguousarray(Y)
        if sigma is not self._sigma[0]:  # the steps in the flows' order (once per array)
            self._sigma = (sigma, np.ascontiguousarray(
                sigma if self.perm is None or _constant(sigma) else sigma[self.perm],
                dtype=float))
        sigma = self._sigma[1]
        sums = self._sums[1] if self._fresh is not None and \
            self._fresh[1] is self._sums[0] else self._sums[0]
        edge_pass = self._pass
        want = W is not None and W_new is not None
        # (a node-sized array: fewer rows to gather)
        dW = W - W_new if W is not None and W_new is not None else Y
        if self._pool is None:
            nf, rsq = edge_pass(*self._ends, Y, U, sigma, out, self.row, 0, out.shape[0], sums,
                                True, self._flagged, dW, want)
            flagged = self._flagged[:nf]
        else:
            parts = [(a, b, np.empty(b - a, dtype=self._fdt)) for a, b in self._edge_cuts]
            got = self._parallel(
                lambda a, b, fl: edge_pass(*self._ends, Y, U, sigma, out, self.row, a, b, sums,
                                           False, fl, dW, want), parts)
            flagged = np.concatenate([fl[:c] for (_, _, fl), (c, _) in zip(parts, got,
                                                                           strict=True)] or
                                     [np.empty(0, dtype=self._fdt)])
            rsq = sum(r for _, r in got)
        if flagged.size:  # rows the kernel declines: the penalty's numpy DU on the argument
            model = flagged if self.perm is None else self.perm[flagged]  # the model's edges
            s_f, lam_f = sigma[flagged], self.lamA[model]
            if want:  # the kernel left u^k there (out may be U): argument and residual here
                old, Df = out[flagged], self.D[model]
                new = self.penalty.dual_update(dual_argument(old, Df @ Y, s_f[:, None]),
                                               s_f, lam_f)
                R = (out[flagged] - new) / s_f[:, None]
                R -= Df @ dW
                rsq += float(np.einsum("ij,ij->", R, R))
                out[flagged] = new
            else:
                out[flagged] = self.penalty.dual_update(out[flagged], s_f, lam_f)
        self.dual_residual = float(np.sqrt(rsq)) if want else None
        if self._pool is not None or flagged.size:
            self._node_sums(out, sums)
        self._fresh = (out, sums)
        return out

    def model_order(self, U: np.ndarray, in_place: bool = False) -> np.ndarray:
        """The flows ``U`` (in :attr:`perm`'s order) in the model's edge order: a new array,
        or ``U`` itself rearranged with ``in_place`` (no second ``(|E|, d)`` array: the end
        of a run); ``U`` itself without :attr:`perm`."""
        if self.perm is None:
            return U
        if in_place and U.flags.c_contiguous:
            self.kernels.unpermute_rows(self._inv, U, np.zeros(U.shape[0], dtype=bool))
            return U
        out = np.empty_like(U)
        self.kernels.gather_rows(self._inv, np.ascontiguousarray(U), out)
        return out

    def node_sums(self, U: np.ndarray) -> np.ndarray:
        """``D^T U`` (the rows ``(D^T u)_i`` of PU (32)): the sums of the last edge pass when
        ``U`` is its output, else computed by the compiled product."""
        if self._fresh is not None and U is self._fresh[0]:
            return self._fresh[1]
        out = np.empty((self.DT.shape[0], U.shape[1]))
        self._node_sums(np.ascontiguousarray(U), out)
        return out

    @property
    def DT(self) -> sp.csr_matrix:
        """``D^T`` as CSR (formed on first use)."""
        if not isinstance(self._DT, sp.spmatrix | sp.sparray):
            self._DT = self.D.T.tocsr() if self._DT is None else self._DT()
        return self._DT

    @property
    def _csr_T(self) -> tuple[np.ndarray, ...]:
        """``D^T``'s CSR arrays with its columns in the flows' order (formed on first use:
        only flagged rows, threads or flows not from the last pass need it)."""
        if self._csr_T_arrays is None:
            DTo = self.DT if self.perm is None else self.DT[:, self.perm].tocsr()
            self._csr_T_arrays = (DTo.indptr, DTo.indices,
                                  np.ascontiguousarray(DTo.data, dtype=float))
        return self._csr_T_arrays

    def _node_sums(self, U: np.ndarray, out: np.ndarray) -> None:
        node_pass = self.kernels.node_pass
        if self._pool is None:
            node_pass(*self._csr_T, U, out, 0, out.shape[0])
        else:
            self._parallel(lambda a, b: node_pass(*self._csr_T, U, out, a, b), self._node_cuts)

    def _parallel(self, f: Callable[..., Any], args: list[tuple]) -> list:
        """``f(*a)`` for every ``a`` in ``args``: the first here, the others on the pool."""
        assert self._pool is not None
        futures = [self._pool.submit(f, *a) for a in args[1:]]
        results = [f(*args[0])] if args else []
        return results + [fu.result() for fu in futures]

    def close(self) -> None:
        """Shut the thread pool down (no-op without one)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


class CompiledNodeUpdates:
    """PU (32) for every node with ``v = w^k - T D^T u^k`` and ``Y = 2 w^{k+1} - w^k`` in the
    same pass: the groups whose node update is affine (squared losses without constraints:
    ``w_i^{k+1} = M_i (v_i + b_i)``, :meth:`~gtvmodel.terms.losses.batches.SquaredBatch.
    affine_operators`) by the compiled :func:`~gtvmodel._compiled.sample_node_pass` (nodes
    with ``m_i < d``: ``M_i`` from the samples by Woodbury's identity) and
    :func:`~gtvmodel._compiled.affine_node_pass` (the others: ``M_i`` a ``d x d`` matrix),
    one read of ``w^k``, ``D^T u^k`` and the operator, no ``(n, d)`` temporaries; the other
    groups by their own update (:class:`~gtvmodel.primal_dual.prox.NodeUpdates`) on their
    rows.  The same ``v``, ``b`` and ``Y`` operations per entry as :func:`~gtvmodel.
    primal_dual.updates.prox_point`, the batch's prox and :func:`~gtvmodel.primal_dual.
    updates.extrapolate`; ``M_i u`` to rounding (another order of the operations).
    :meth:`make` returns None where no group is affine."""

    def __init__(self, updates: NodeUpdates, affine: list[tuple[np.ndarray, Any]],
                 other: list[tuple[np.ndarray, Any]]):
        self.kernels = _compiled.kernels()
        self.updates, self.affine, self.other = updates, affine, other
        self._tau: np.ndarray | None = None
        self._ops: list[tuple[np.ndarray, Any]] = []  # (model rows, operator)

    @classmethod
    def make(cls, updates: NodeUpdates) -> CompiledNodeUpdates | None:
        """The compiled node updates of ``updates``' groups, or None (no affine group)."""
        affine, other = [], []
        for grp in updates.groups:
            rows = np.ascontiguousarray(grp.nodes, dtype=np.int64)
            if isinstance(grp, BatchProxGroup) and grp.box is None and grp.ball is None \
                    and hasattr(grp.batch, "affine_operators") \
                    and grp.batch.prox_supported().all():
                affine.append((rows, grp.batch))
            else:
                other.append((rows, grp))
        return cls(updates, affine, other) if affine else None

    def prepare(self, tau: np.ndarray) -> None:
        """The one-off data for the steps ``tau`` (``(n,)``): the affine groups' operators,
        the other groups' own :meth:`~gtvmodel.primal_dual.strategies.NodeGroup.prepare`
        (in place of :meth:`~gtvmodel.primal_dual.prox.NodeUpdates.prepare`, which would
        also build the ``d x d`` operators of the numpy path)."""
        self._operators(tau)
        for rows, grp in self.other:
            grp.prepare(tau[rows])

    def _operators(self, tau: np.ndarray, keep: bool = True) -> list[tuple[np.ndarray, Any]]:
        """The affine groups' operators for ``tau`` with their model rows (kept by the
        batches for the last ``tau`` with ``keep``)."""
        if tau is not self._tau or not keep:
            ops = [(np.ascontiguousarray(rows[op.local]), op) for rows, batch in self.affine
                   for op in batch.affine_operators(tau[rows], keep=keep)]
            if not keep:
                return ops
            self._ops, self._tau = ops, tau
        return self._ops

    def __call__(self, W: np.ndarray, DTu: np.ndarray, tau: np.ndarray, tau_col: np.ndarray,
                 k: int, W_new: np.ndarray, Y: np.ndarray) -> int:
        """``w^{k+1}`` (32) into ``W_new`` and ``2 w^{k+1} - w^k`` into ``Y`` from ``w^k = W``,
        ``D^T u^k = DTu`` and the steps ``tau`` (``tau_col`` the same as a column) at
        iteration ``k``; returns the number of nodes with a non-finite ``w^{k+1}``."""
        bad = self._affine(self._operators(tau), W, DTu, tau, W_new, Y)
        for rows, grp in self.other:
            V = prox_point(W[rows], tau_col[rows], DTu[rows])
            Z = grp.update(V, tau[rows], k, W[rows])
            W_new[rows] = Z
            Y[rows] = extrapolate(Z, W[rows], np.empty_like(Z))
            bad += int(np.count_nonzero(~np.isfinite(Z).all(axis=1)))
        return bad

    def _affine(self, ops: list[tuple[np.ndarray, Any]], W: np.ndarray, DTu: np.ndarray,
                tau: np.ndarray, W_new: np.ndarray, Y: np.ndarray) -> int:
        """The affine groups' rows of :meth:`__call__` (the compiled passes of ``ops``)."""
        bad = 0
        kern = self.kernels
        for rows, op in ops:
            if isinstance(op, SampleOperator):
                bad += kern.sample_node_pass(rows, W, DTu, tau, op.X, op.starts, op.ms, op.K,
                                             op.koff, op.inv_alpha, op.q, W_new, Y)
            else:
                bad += kern.affine_node_pass(rows, W, DTu, tau, op.M, op.b, W_new, Y)
        return bad

    def apply(self, V: np.ndarray, tau: np.ndarray, k: int, W_prev: np.ndarray) -> np.ndarray:
        """``PU(V)`` (32) for all nodes, the call of :class:`~gtvmodel.primal_dual.prox.
        NodeUpdates` (for the step rule's start, :func:`~gtvmodel.primal_dual.steps.
        initial_scale`): the affine groups by the compiled passes with ``w^k = V`` and ``D^T
        u^k = 0`` (``v = V`` exactly), the others by their own update."""
        V = np.ascontiguousarray(V, dtype=float)
        tau = np.asarray(tau, dtype=float)
        W_new = np.empty_like(V)
        # (operators not kept: these steps are not the run's)
        self._affine(self._operators(tau, keep=False), V, np.zeros_like(V), tau, W_new,
                     np.empty_like(V))
        for rows, grp in self.other:
            W_new[rows] = grp.update(V[rows], tau[rows], k, W_prev[rows])
        return W_new


def edge_order(heads: np.ndarray, tails: np.ndarray, n: int, dim: int) -> np.ndarray | None:
    """The edges ``(heads[e], tails[e])`` by blocks of tails of :data:`TAIL_BLOCK_BYTES`
    (``TAIL_BLOCK_BYTES // (16 dim)`` nodes; :data:`LARGE_TAIL_BLOCK_BYTES` where ``16 dim
    n`` exceeds :data:`LARGE_NODE_BYTES`), inside a block by head, then tail: the order
    :class:`CompiledEdgeUpdates` keeps the flows in with ``reorder``; None where all ``n``
    nodes are one block (the model's order, sorted by head, is then as good)."""
    row = 16 * max(dim, 1)
    size = TAIL_BLOCK_BYTES if row * n <= LARGE_NODE_BYTES else max(TAIL_BLOCK_BYTES,
                                                                    LARGE_TAIL_BLOCK_BYTES)
    block = max(1, size // row)
    if n <= block:
        return None
    return np.lexsort((tails, heads, tails // block))


def _constant(a: np.ndarray) -> bool:
    """Every entry of ``a`` is the same number (so ``a[perm]`` equals ``a``: no copy)."""
    return bool(a.size == 0 or a.min() == a.max())


def _cuts(size: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering ``range(size)`` (empty ones dropped)."""
    c = np.linspace(0, size, parts + 1).astype(int)
    return [(int(a), int(b)) for a, b in zip(c[:-1], c[1:], strict=True) if b > a]


def make_edge_updates(D: sp.csr_matrix, penalty: Penalty, lamA: np.ndarray, dim: int,
                      kernel: str = "auto", threads: int = 1,
                      DT: sp.csr_matrix | Callable[[], sp.csr_matrix] | None = None,
                      reorder: bool = False, cache: Any = None
                      ) -> tuple[EdgeUpdates | CompiledEdgeUpdates, str]:
    """The edge update of ``NumpyBackend(kernel=...)`` and the kernel chosen, ``"numba"``
    (:class:`CompiledEdgeUpdates`) or ``"numpy"`` (the blocks of
    :class:`~gtvmodel.primal_dual.updates.EdgeUpdates`).  ``"numba"`` when asked
    (:class:`~gtvmodel.UnsupportedError` saying how to install numba if it is missing) and
    the penalty has a row kernel (:meth:`~gtvmodel.terms.penalties.Penalty.
    compiled_dual_row`; else the numpy path); ``"auto"``: the same when numba is installed
    and ``|E| d >=`` :data:`AUTO_NUMBA_ENTRIES`, else the numpy path.  ``reorder``: the
    compiled pass in its own edge order (:class:`CompiledEdgeUpdates`; the caller converts
    the flows), kept in the model's ``cache``.  ``DT``: ``D^T`` as CSR, or a function
    returning it (called when needed: the compiled pass on pairs needs it only for declined
    rows, threads or flows not its own)."""
    check_option(kernel, "kernel", KERNELS, where="solve_primal_dual")
    if kernel == "numba" and not _compiled.available():
        raise UnsupportedError("solve_primal_dual: kernel='numba' needs numba: pip install "
                               "'gtvmodel[fast]' (or pip install numba)")
    want = kernel == "numba" or (kernel == "auto" and D.shape[0] * dim >= AUTO_NUMBA_ENTRIES
                                 and _compiled.available())
    row = penalty.compiled_dual_row(lamA, dim) if want else None
    if row is not None:
        return CompiledEdgeUpdates(D, penalty, lamA, dim, row, threads=threads, DT=DT,
                                   reorder=reorder, cache=cache), "numba"
    return EdgeUpdates(D, penalty, lamA, dim, threads=threads,
                       DT=DT() if callable(DT) else DT), "numpy"
