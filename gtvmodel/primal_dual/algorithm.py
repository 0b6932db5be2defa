"""Algorithm 1 of paper 001: preconditioned primal-dual message passing for GTV minimization.

With ``w^0``, ``u^0`` (zero unless warm-started) every iteration ``k`` runs

    node i:  v_i = w_i^k - tau_i (D^T u^k)_i ,    w_i^{k+1} = PU_i(v_i)                  (32)
    edge e:  u_e^{k+1} = DU_e( u_e^k + sigma_e (2 D w^{k+1} - D w^k)_e )                 (33)

The package's modules follow the algorithm: :mod:`~gtvmodel.primal_dual.prox` evaluates
``PU_i`` (the prox of the node's loss with its constraints) for groups of nodes,
:mod:`~gtvmodel.primal_dual.updates` states (32) and (33) (``DU_e`` is the prox of ``sigma_e
(lambda A_e phi)^*``, :meth:`gtvmodel.terms.penalties.Penalty.dual_update`) and the
message-passing structure (:class:`~gtvmodel.primal_dual.updates.NodeUpdate`,
:class:`~gtvmodel.primal_dual.updates.EdgeUpdate`), :mod:`~gtvmodel.primal_dual.steps` chooses
``T`` and ``Sigma``, :mod:`~gtvmodel.primal_dual.result` holds what a run returns, and this
module runs the loop (:func:`solve_primal_dual`), vectorized over all nodes and edges with
``scipy.sparse``.

**Steps.**  ``tau_i = c / deg(i)``, ``sigma_e = 1 / (2c)`` (Pock-Chambolle diagonal
preconditioning; ``||Sigma^{1/2} D T^{1/2}|| <= 1`` for every ``c > 0``; the paper has
``c = 1``).  The default adapts ``c`` by residual balancing
(:class:`~gtvmodel.primal_dual.steps.ResidualBalancing`).

**Stopping.**  Every ``record_every`` iterations the iterate is certified with
:func:`gtvmodel.certificates.certificate.certify` (the duality gap (34) after repairing the
flows to a dual feasible point).  The run stops with status ``"converged"`` when the certified
gap is at most ``tol * max(1, |P(w)|)`` (``tol`` is relative; ``relative_gap`` in the history).
The status says what was detected: ``"converged"`` only when a certificate met ``tol``
(never with ``tol=0`` or ``record_every=None``); ``"max_iter"`` when the run used its
``max_iter`` iterations without one (also ``max_iter=0``, unless the start point meets
``tol``); ``"stopped"`` when the callback returned True.  The history always ends with a row at
the final iteration (unless ``record_every=None``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validate import check_bool, check_int, check_option, check_scalar
from ..certificates.certificate import certify
from ..declaration import ModelDeclaration
from ..duality.compile import data_overflow_message
from ..errors import DataError, ParameterError, SolverError
from ..results import Labels
from .compiled import KERNELS, make_edge_updates
from .prox import PROX_OPTIONS, NodeUpdates
from .result import History, PrimalDualResult
from .steps import FixedSteps, ResidualBalancing, make_step_rule, primal_residual, steps_from_scale
from .updates import extrapolate, prox_point

__all__ = ["solve_primal_dual", "BACKENDS", "DETECTION_DELAY"]

#: The certificate schedule's bound on detection: a gap below ``tol`` at iteration ``k0`` is
#: certified by iteration ``max((1 + DETECTION_DELAY) k0, k0 + record_every)`` whatever the
#: ``certificate_budget`` (issue 16: the budget alone postponed it 14x on paper 001's Table I).
DETECTION_DELAY = 0.1

#: The other backends of :func:`solve_primal_dual` by name, each a function taking the same
#: arguments plus ``client`` and ``shards``: ``"dask"`` is
#: :func:`gtvmodel.primal_dual.distributed.solve_distributed`; ``"torch"``
#: (:func:`gtvmodel.primal_dual.torch_backend.solve_torch`) takes ``device`` and ``dtype``
#: instead (both registered when the package ``gtvmodel.primal_dual`` is imported).
BACKENDS: dict[str, Callable[..., Any]] = {}


def solve_primal_dual(model: ModelDeclaration, max_iter: int = 10_000, tol: float = 1e-6,
                      prox: str = "auto", step: Any = None, warm_start: Any = None,
                      callback: Callable[..., Any] | None = None, record_every: int = 50,
                      progress: bool = False, batch_cvxpy: bool = True,
                      certificate_budget: float | None = 0.25, backend: str = "numpy",
                      client: Any = None, shards: Any = None, device: Any = None,
                      dtype: Any = None, threads: int = 1, kernel: str = "auto"
                      ) -> PrimalDualResult:
    """Run Algorithm 1 (paper 001) on ``model``: iterations PU (32) and DU (33) until the
    certified duality gap (34) is at most ``tol * max(1, |P(w)|)``; see the module docstring.

    Parameters
    ----------
    model : ModelDeclaration
        The GTV minimization problem (a :class:`~gtvmodel.GTVModel` or any declaration of
        losses ``L_i``, penalty ``phi``, edge weights ``A_e`` and ``lambda``).
    max_iter : int
        Maximum number of iterations.
    tol : float
        Stop when the certified gap (34) is ``<= tol * max(1, |P(w)|)`` (relative); ``0``
        runs ``max_iter`` iterations.
    prox : {"auto", "cvxpy"}
        ``"auto"``: the fastest exact node-update path PU (32) per node
        (:func:`gtvmodel.primal_dual.prox.plan`); ``"cvxpy"``: the general CVXPY path for
        every node.
    step : None, float, ResidualBalancing or (tau, sigma)
        ``None``: adaptive ``c`` (:class:`~gtvmodel.primal_dual.steps.ResidualBalancing`); a
        number: fixed ``c`` (``tau_i = c/deg(i)``, ``sigma_e = 1/(2c)``); ``(tau, sigma)``
        arrays: explicit steps, checked against ``||Sigma^{1/2} D T^{1/2}|| <= 1``
        by power iteration.
    warm_start : None, PrimalDualResult, Solution or (weights, flows)
        Initial ``(w^0, u^0)`` (default zeros).
    callback : callable, optional
        ``callback(k, weights, flows)`` after every iteration ``k`` (1-based); returning True
        stops the run (status ``"stopped"``).
    record_every : int
        Certify and record the history every this many iterations (and at the end);
        ``None``: never certify (only with ``tol=0``; empty history, ``certificate`` None,
        e.g. to time the iterations alone).  A scheduled certificate is postponed (to a later
        multiple of ``record_every``) until the iterations since the previous one took at
        least ``cost / certificate_budget`` seconds, ``cost`` being the cheapest certificate
        so far after the first (default budget 25 %; the first certificate is not budgeted,
        so their share of a run can be larger: 43 % on paper 000's setting, 55 % at 10,000
        nodes / 100,000 edges, docs/primal_dual.md), but never past the iteration after
        which the next multiple would exceed ``1.1`` times the previous certificate's
        (:data:`DETECTION_DELAY`: a gap below ``tol`` at iteration ``k`` is detected by
        ``max(1.1 k, k + record_every)``); ``None``: certify at every ``record_every``.
    progress : bool
        Show a ``tqdm`` progress bar with the current certified gap.
    batch_cvxpy : bool
        One CVXPY problem for all CVXPY-path nodes (default) or one per node.
    certificate_budget : float or None
        See ``record_every``.
    backend : {"numpy", "dask", "torch"}
        ``"numpy"``: this process, vectorized; ``"dask"``: shards of the nodes on the workers
        of a Dask cluster with the same iterates
        (:func:`gtvmodel.primal_dual.distributed.solve_distributed`, ``docs/distributed.md``);
        ``"torch"``: PyTorch tensors on ``device``
        (:func:`gtvmodel.primal_dual.torch_backend.solve_torch`, ``docs/primal_dual.md``).
    client, shards
        The ``distributed.Client`` (None: a ``LocalCluster`` for the run) and the number of
        shards (or the shard of every node) of ``backend="dask"``.
    device, dtype
        The array backend (``backend="torch"``, implied by either): the device of the
        tensors (``"cpu"``, ``"cuda"``, ``"cuda:0"``; default ``"cpu"``) and their precision
        (None: float64; ``"float32"`` opt-in).  None, None (default): the numpy path.
    threads : int
        The numpy path's edge updates DU (33) and the product ``D^T u`` split over this many
        threads (opt-in; default 1): the same iterates bit for bit
        (:class:`~gtvmodel.primal_dual.updates.EdgeUpdates`).  It pays only where a second
        core is idle: at 100,000 nodes / 1,000,000 edges on a shared 2-core machine
        (benchmarks/RESULTS.md, "Algorithm 1's iteration at scale") the gain in wall time
        depended on the load.
    kernel : {"auto", "numpy", "numba"}
        The numpy path's edge update DU (33): ``"numpy"`` the blocks of
        :class:`~gtvmodel.primal_dual.updates.EdgeUpdates`; ``"numba"`` one compiled pass
        per iteration (:class:`~gtvmodel.primal_dual.compiled.CompiledEdgeUpdates`, for the
        penalties with a row kernel: ``Norm2``, ``Norm1``, ``SquaredNorm2``; the others keep
        the numpy path), which needs numba (``pip install 'gtvmodel[fast]'``,
        :class:`~gtvmodel.UnsupportedError` without it); ``"auto"`` (default): ``"numba"``
        when numba is installed and ``|E| d >= 10^6``
        (:data:`~gtvmodel.primal_dual.compiled.AUTO_NUMBA_ENTRIES`), else ``"numpy"``.  The
        same iterates to rounding; the choice is the result's ``kernel``.

    Returns
    -------
    PrimalDualResult
        The last iterate ``(w^k, u^k)``, its certificate, the :class:`History` of the
        certificates (its last row is the final iteration), the status and the timings.
        ``status``: ``"converged"`` only when a certificate met ``tol`` (detected, never
        assumed: not with ``tol=0`` or ``record_every=None``); ``"max_iter"`` when ``max_iter``
        iterations ran without that; ``"stopped"`` when the callback returned True.

    Raises
    ------
    ParameterError
        A bad option, named (``max_iter``, ``tol``, ``prox``, ``step`` — including
        explicit steps that violate ``||Sigma^{1/2} D T^{1/2}|| <= 1`` — ``record_every``,
        ``certificate_budget``, ``backend``, ``threads``, ``kernel``, ``warm_start``), or
        options of one backend given to another (``client``/``shards`` without
        ``backend="dask"``, ``device``/``dtype`` without the array backend, ``threads`` or
        ``kernel`` off the numpy path).
    DataError
        A ``warm_start`` of the wrong shape or not finite, or node data that overflow double
        precision in the node update PU (32).
    UnsupportedError
        ``kernel="numba"`` without numba installed; the other backends raise it for what
        they do not run (see their functions).
    InfeasibleError
        A node's constraints have no feasible point (found by the node update PU (32)).
    SolverError
        A node update PU (32) failed numerically or returned non-finite weights.

    Examples
    --------
    Convex clustering of three scalars on a path (``L_i(w) = (w - a_i)^2``, ``phi = |.|``):
    the two close values fuse, the far one is pulled in by ``lambda / 2 = 0.5``.

    >>> import networkx as nx
    >>> import gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), 1, penalty=gm.Norm2(), lam=1.0)
    >>> for i, a in enumerate([0.0, 1.0, 5.0]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> res = gm.solve_primal_dual(model, tol=1e-8)
    >>> res.status, res.gap <= 1e-8 * max(1.0, abs(res.objective))
    ('converged', True)
    >>> res.weights.round(4).ravel().tolist()
    [0.5, 1.0, 4.5]
    """
    check_option(backend, "backend", ("numpy", *BACKENDS), where="solve_primal_dual")
    threads = check_int(threads, "threads", min_val=1, where="solve_primal_dual")
    if threads != 1 and (backend != "numpy" or device is not None or dtype is not None):
        raise ParameterError("solve_primal_dual: threads is an option of the numpy path "
                             f"(backend='numpy', no device or dtype), got threads={threads}")
    check_option(kernel, "kernel", KERNELS, where="solve_primal_dual")
    if kernel != "auto" and (backend != "numpy" or device is not None or dtype is not None):
        raise ParameterError("solve_primal_dual: kernel is an option of the numpy path "
                             f"(backend='numpy', no device or dtype), got kernel={kernel!r}")
    if backend == "torch" or (backend == "numpy" and (device is not None or dtype is not None)):
        if client is not None or shards is not None:
            raise ParameterError("solve_primal_dual: client and shards are options of "
                                 "backend='dask', not of the array backend (device=...)")
        return BACKENDS["torch"](model, max_iter, tol, prox, step, warm_start, callback,
                                 record_every, progress, batch_cvxpy, certificate_budget,
                                 device="cpu" if device is None else device, dtype=dtype)
    if device is not None or dtype is not None:
        raise ParameterError(f"solve_primal_dual: device and dtype are options of the array "
                             f"backend (backend='torch'), not of backend={backend!r}")
    if backend != "numpy":
        return BACKENDS[backend](model, max_iter, tol, prox, step, warm_start, callback,
                                 record_every, progress, batch_cvxpy, certificate_budget,
                                 client=client, shards=shards)
    if client is not None or shards is not None:
        raise ParameterError("solve_primal_dual: client and shards are options of "
                             "backend='dask'; got them with backend='numpy'")
    t_start = time.perf_counter()
    opts = _check_options(max_iter, tol, prox, record_every, progress, batch_cvxpy,
                          certificate_budget, callback)
    rule = make_step_rule(model, step)
    updates = NodeUpdates(model, prox, batch_cvxpy)
    run = _Run(model, opts, rule, updates, warm_start, progress, t_start, threads=threads,
               kernel=kernel)
    try:
        status = run.loop()
    finally:
        run.edges.close()
    return run.result(status)


@dataclass(frozen=True)
class _Options:
    """The checked options of :func:`solve_primal_dual` (``record_every`` is ``max_iter + 1``
    when the run does not certify)."""

    max_iter: int
    tol: float
    record_every: int
    certifying: bool
    certificate_budget: float | None
    callback: Callable[..., Any] | None


def _check_options(max_iter: Any, tol: Any, prox: Any, record_every: Any, progress: Any,
                   batch_cvxpy: Any, certificate_budget: Any, callback: Any) -> _Options:
    """Check the arguments of :func:`solve_primal_dual` (errors name the argument)."""
    where = "solve_primal_dual"
    tol = check_scalar(tol, "tol", min_val=0.0, where=where)
    max_iter = check_int(max_iter, "max_iter", min_val=0, where=where)
    check_option(prox, "prox", PROX_OPTIONS, where=where)
    check_bool(progress, "progress", where=where)
    check_bool(batch_cvxpy, "batch_cvxpy", where=where)
    if certificate_budget is not None:
        check_scalar(certificate_budget, "certificate_budget", min_val=0.0,
                     include_boundaries="neither", where=where)
    if callback is not None and not callable(callback):
        raise ParameterError(f"{where}: callback must be None or callable, got {callback!r}")
    certifying = record_every is not None
    if not certifying:
        if tol > 0:
            raise ParameterError("record_every=None (no certificates) needs tol=0: without "
                                 "a certificate the run cannot converge")
        record_every = max_iter + 1
    record_every = check_int(record_every, "record_every", min_val=1, where=where)
    return _Options(max_iter, tol, record_every, certifying, certificate_budget, callback)


@dataclass(slots=True)
class _Iterate:
    """``(w^k, u^k)`` with the product ``D^T u^k`` the next iteration reuses."""

    W: np.ndarray
    U: np.ndarray
    DTu: np.ndarray


class _Run:
    """One run of Algorithm 1: the operators ``D``, ``D^T``, the capacities ``lambda A_e``, the
    steps ``T``, ``Sigma`` (with their rule), the iterate, the certificate schedule and the
    history rows, and the timings."""

    def __init__(self, model: ModelDeclaration, opts: _Options,
                 rule: FixedSteps | ResidualBalancing, updates: NodeUpdates, warm_start: Any,
                 progress: bool, t_start: float, threads: int = 1, kernel: str = "auto"):
        self.model, self.opts, self.rule, self.updates = model, opts, rule, updates
        self.t_start = t_start
        self.D = model.incidence
        self.DT = model.cache.get_or_build("pd_incidence_T", lambda: self.D.T.tocsr())
        self.edges, self.kernel = make_edge_updates(self.D, model.penalty, model.capacities,
                                                    model.dim, kernel, threads=threads,
                                                    DT=self.DT)
        self.deg = model.degrees
        if isinstance(rule, ResidualBalancing):
            self._set_steps(*steps_from_scale(self.deg, model.num_edges,
                                              rule.start(model, updates)))
        else:
            self._set_steps(rule.tau, rule.sigma)
        W, U = _initial(model, warm_start)
        self.timings = {"setup": 0.0, "node_updates": 0.0, "edge_updates": 0.0,
                        "certificate": 0.0}
        # D^T u^0: zero without a warm start (no product)
        self.x = _Iterate(W, U, np.zeros_like(W) if warm_start is None else self.DT @ U)
        self.Y = np.empty_like(W)  # 2 w^{k+1} - w^k, rewritten every iteration
        # u^{k-1}'s array, reused for u^{k+1} unless a callback or a certificate saw it
        self._spare: np.ndarray | None = None
        self._seen: np.ndarray | None = None  # the flows last handed to a certificate
        self.rows: list[tuple] = []
        self.cert = None
        self.bar = _progress_bar(opts.max_iter) if progress else None
        self.p_res = self.d_res = float("nan")
        self.cert_durations: list[float] = []
        self.since_cert = 0.0  # seconds spent iterating since the last certificate
        self.k = 0
        updates.prepare(self.tau)  # one-off factorizations: set-up, not iteration 1
        self.timings["setup"] = time.perf_counter() - t_start

    def _set_steps(self, tau: np.ndarray, sigma: np.ndarray) -> None:
        self.tau, self.sigma = tau, sigma
        self.tau_col, self.sigma_col = tau[:, None], sigma[:, None]

    def loop(self) -> str:
        """Iterate until the stopping rule, ``max_iter`` or the callback; returns the status."""
        opts, bar = self.opts, self.bar
        max_iter, callback = opts.max_iter, opts.callback
        status = "max_iter"
        k = 0
        if max_iter == 0 and self.record(0):  # the start point already meets tol
            status = "converged"
        while k < max_iter and status == "max_iter":
            new = self.iterate(k)
            k += 1
            self.advance(k, new)
            if bar is not None:
                bar.update(1)
            if (self.certificate_due(k) or k == max_iter) and self.record(k):
                status = "converged"
                break
            if callback is not None and callback(k, self.x.W, self.x.U):
                status = "stopped"
                if not self.rows or self.rows[-1][0] != k:
                    self.record(k)
                break
        if bar is not None:
            bar.close()
        if opts.certifying and (not self.rows or self.rows[-1][0] != k):
            # the history ends at the final iterate: certify it if the last row is older
            # (status stays as the loop left it: "converged" only when detected there)
            self.record(k)
        self.k = k
        return status

    def iterate(self, k: int) -> _Iterate:
        """Iteration ``k``: PU (32) at every node, then DU (33) on every edge."""
        x = self.x
        t0 = time.perf_counter()
        V = prox_point(x.W, self.tau_col, x.DTu)
        W_new = self.updates(V, self.tau, k, x.W)
        if not np.isfinite(W_new).all():
            _raise_non_finite(self.model, W_new, V, self.tau, k)
        t1 = time.perf_counter()
        # the dual residual of advance(k + 1), when due, in the edge pass (no |E| x d arrays)
        due = self._residuals_due(k + 1)
        # u^{k+1} goes into u^{k-1}'s array (not over u^k: the compiled pass is about 9 %
        # faster with distinct arrays, and the residual's iterations need u^k anyway)
        out, self._spare = self._spare, None
        if out is None:
            out = np.empty_like(x.U)
        U_new = self.edges(extrapolate(W_new, x.W, self.Y), x.U, self.sigma, self.sigma_col,
                           out, *((x.W, W_new) if due else ()))
        DTu_new = self.edges.node_sums(U_new)
        t2 = time.perf_counter()
        timings = self.timings
        timings["edge_updates"] += t2 - t1
        timings["node_updates"] += t1 - t0
        self.since_cert += t2 - t0
        return _Iterate(W_new, U_new, DTu_new)

    def advance(self, k: int, new: _Iterate) -> None:
        """Move to ``new`` after ``k`` iterations: the residuals when the step rule or the
        history needs them, then the step rule (``tau_i sigma_e`` never changes)."""
        rule, x = self.rule, self.x
        adapt = rule.active and k % rule.every == 0
        if self._residuals_due(k):
            self.p_res = primal_residual(x.W, new.W, x.DTu, new.DTu, self.tau_col)
            self.d_res = self.dual_residual(x, new)
        if self.opts.callback is None and x.U is not self._seen:
            self._spare = x.U  # nobody else holds u^{k-1}: its array takes u^{k+1}
        self.x = new
        if adapt and rule.update(k - 1, self.p_res, self.d_res):
            self._set_steps(*steps_from_scale(self.deg, self.model.num_edges, rule.c))

    def dual_residual(self, x: _Iterate, new: _Iterate) -> float:
        """``d_k`` of :func:`~gtvmodel.primal_dual.steps.residuals` from ``x`` to ``new``:
        computed by the edge pass of the iteration (asked for by :meth:`iterate`)."""
        return self.edges.dual_residual

    def _residuals_due(self, k: int) -> bool:
        """Whether :meth:`advance` after ``k`` iterations needs the residuals (the step rule
        adapts, or the history records them); the rule's state does not change between the
        iteration and its :meth:`advance`."""
        rule = self.rule
        return ((rule.active and k % rule.every == 0) or k % self.opts.record_every == 0
                or k == self.opts.max_iter)

    def certificate_due(self, k: int) -> bool:
        """A certificate is scheduled at multiples of ``record_every`` and postponed until the
        iterations since the last one took at least ``cost / certificate_budget`` (``cost``:
        the cheapest certificate after the first, which pays one-time setup), but never past
        :data:`DETECTION_DELAY` of the iterations: it is due at the last multiple of
        ``record_every`` before the next one would exceed ``(1 + DETECTION_DELAY) k_last``
        (``k_last``: the iteration of the previous certificate), so a gap below ``tol`` at
        iteration ``k0`` is certified by ``max((1 + DETECTION_DELAY) k0, k0 + record_every)``."""
        every = self.opts.record_every
        if k % every:
            return False
        budget = self.opts.certificate_budget
        if budget is None:
            return True
        last = self.rows[-1][0] if self.rows else 0
        if k + every > (1.0 + DETECTION_DELAY) * last:
            return True
        est = min(self.cert_durations[1:]) if len(self.cert_durations) > 1 else 0.0
        return budget * self.since_cert >= est

    def record(self, k: int) -> bool:
        """Certify ``(w^k, u^k)`` (the gap (34) after repairing the flows), append a history
        row; True if the stopping rule ``gap <= tol * max(1, |P(w)|)`` holds."""
        if not self.opts.certifying:
            return False
        t0 = time.perf_counter()
        cert = self.cert = self.certificate()
        self.cert_durations.append(time.perf_counter() - t0)
        self.timings["certificate"] += self.cert_durations[-1]
        self.since_cert = 0.0
        c_now = self.rule.c if self.rule.c is not None else float("nan")
        self.rows.append((k, cert.primal_value, cert.dual_value, cert.gap, cert.relative_gap,
                          self.p_res, self.d_res, c_now, time.perf_counter() - self.t_start))
        if self.bar is not None:
            self.bar.set_postfix(gap=f"{cert.gap:.3g}", c=f"{c_now:.3g}")
        tol = self.opts.tol
        return bool(tol > 0 and cert.gap <= tol * max(1.0, abs(cert.primal_value)))

    def certificate(self) -> Any:
        """The certificate of the current iterate (:func:`~gtvmodel.certificates.certificate.
        certify` without the escalation); read for ``primal_value``, ``gap``, ....  The flows'
        array is never reused for a later iterate (the certificate may keep it)."""
        self._seen = self.x.U
        return certify(self.model, self.x.W, self.x.U, fallback=False)

    def result(self, status: str) -> PrimalDualResult:
        """The :class:`PrimalDualResult` of the run (``status`` from :meth:`loop`)."""
        self.timings["total"] = time.perf_counter() - self.t_start
        return PrimalDualResult(
            weights=self.x.W, flows=self.x.U, iterations=self.k, status=status,
            history=History.from_rows(self.rows), certificate=self.cert, timings=self.timings,
            c=self.rule.c, paths=self.updates.describe(), kernel=self.kernel,
            labels=Labels(self.model.nodes, self.model.edges))


def _progress_bar(total: int) -> Any:
    """A ``tqdm`` progress bar (imported only when asked for): ``tqdm.auto``'s widget bar in a
    notebook with ``ipywidgets``, the plain text bar otherwise.  Without ``ipywidgets``,
    ``tqdm.auto`` warns (``TqdmWarning``: "IProgress not found") on import, or its notebook bar
    raises ``ImportError``: both are caught here and the text bar is used, silently."""
    from tqdm import TqdmWarning
    from tqdm.std import tqdm as text_tqdm

    kwargs = {"total": total, "desc": "primal-dual", "unit": "it"}
    try:
        with warnings.catch_warnings():
            # tqdm.autonotebook catches its own warning when it is an error and falls back to
            # the text bar; TqdmExperimentalWarning (a subclass) stays ignored by tqdm.auto
            warnings.simplefilter("error", TqdmWarning)
            from tqdm.auto import tqdm
            return tqdm(**kwargs)
    except (TqdmWarning, ImportError):
        return text_tqdm(**kwargs)


def _raise_non_finite(model: ModelDeclaration, W_new: np.ndarray, V: np.ndarray, tau: np.ndarray,
                      k: int) -> None:
    """A node update returned NaN/inf: name the nodes and, if their data overflow double
    precision, say so (rather than letting the certificate report non-finite weights)."""
    msg = data_overflow_message(model, "solve_primal_dual")
    if msg is not None:
        raise DataError(msg)
    bad = np.flatnonzero(~np.isfinite(W_new).all(axis=1))
    names = ", ".join(repr(model.nodes[i]) for i in bad[:10]) + (" ..." if bad.size > 10 else "")
    with np.errstate(invalid="ignore", over="ignore"):
        vmax = float(np.abs(V[bad]).max(initial=0.0))
    raise SolverError(
        f"solve_primal_dual: the node update PU (32) returned non-finite weights at node(s) "
        f"{names} in iteration {k + 1} (|v| up to {vmax:.3g}, tau from "
        f"{float(tau[bad].min()):.3g} to {float(tau[bad].max()):.3g}): the iterates diverge or "
        "the node's data are too large for double precision", status="non_finite")


def _initial(model: ModelDeclaration, warm_start: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(w^0, u^0)``: zeros, or the checked copies of a warm start (a result with
    ``weights`` and ``flows``, or a pair; flows None: zeros)."""
    n, d, E = model.num_nodes, model.dim, model.num_edges
    if warm_start is None:
        return np.zeros((n, d)), np.zeros((E, d))
    if isinstance(warm_start, (tuple, list)) and len(warm_start) == 2:
        W0, U0 = warm_start
    elif hasattr(warm_start, "weights") and hasattr(warm_start, "flows"):
        W0, U0 = warm_start.weights, warm_start.flows
    else:
        raise ParameterError("warm_start must be None, a result with weights and flows, or a "
                             f"(weights, flows) pair; got {type(warm_start).__name__}")
    W = model.check_weights(W0, "warm_start weights").copy()
    U = (np.zeros((E, d)) if U0 is None else model.check_flows(U0, "warm_start flows").copy())
    return W, U
