"""The loop of Algorithm 1 (paper 001) that every backend runs: the public internal interface
between :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`'s backends
(:mod:`~gtvmodel.primal_dual.backends`) and the iteration.

* :class:`RunArguments` -- the arguments every backend takes (``max_iter``, ``tol``, ``prox``,
  ``step``, ``warm_start``, ``callback``, ``record_every``, ``progress``, ``batch_cvxpy``,
  ``certificate_budget``), as given; :func:`check_options` checks them into :class:`Options`;
* :class:`Run` -- one run: the steps and their rule, the iterate :class:`Iterate` ``(w^k, u^k,
  D^T u^k)``, the certificate schedule (:data:`DETECTION_DELAY`), the history rows, the
  timings and the result.  The numpy backend runs it as it is; the torch backend
  (:mod:`~gtvmodel.primal_dual.torch_backend`) and the Dask backend
  (:mod:`~gtvmodel.primal_dual.distributed`) subclass it, overriding the iteration
  (:meth:`Run.iterate`), the residual, the certificate and the result;
* :func:`initial_point`, :func:`progress_bar` and :func:`raise_non_finite` -- the start point
  ``(w^0, u^0)``, the progress bar and the error of a non-finite node update, shared by the
  backends.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .._validate import check_bool, check_int, check_option, check_scalar
from ..certificates.certificate import certify
from ..declaration import ModelDeclaration
from ..duality.compile import data_overflow_message
from ..errors import DataError, ParameterError, SolverError
from ..results import Labels
from .compiled import CompiledNodeUpdates, make_edge_updates
from .prox import PROX_OPTIONS, NodeUpdates
from .result import History, PrimalDualResult
from .steps import FixedSteps, ResidualBalancing, primal_residual, steps_from_scale
from .updates import extrapolate, prox_point

__all__ = ["DETECTION_DELAY", "RunArguments", "Options", "check_options", "Iterate", "Run",
           "NodeUpdateMaps", "initial_point", "progress_bar", "raise_non_finite", "incidence_T"]

#: The certificate schedule's bound on detection: a gap below ``tol`` at iteration ``k0`` is
#: certified by iteration ``max((1 + DETECTION_DELAY) k0, k0 + record_every)`` whatever the
#: ``certificate_budget`` (issue 16: the budget alone postponed it 14x on paper 001's Table I).
DETECTION_DELAY = 0.1


@dataclass(frozen=True)
class RunArguments:
    """The arguments of :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual` that every
    backend takes, as given (unchecked: :func:`check_options` checks them, each backend where
    it runs); their meaning is ``solve_primal_dual``'s."""

    max_iter: Any = 10_000
    tol: Any = 1e-6
    prox: Any = "auto"
    step: Any = None
    warm_start: Any = None
    callback: Any = None
    record_every: Any = 50
    progress: Any = False
    batch_cvxpy: Any = True
    certificate_budget: Any = 0.25

    def as_kwargs(self) -> dict[str, Any]:
        """The arguments by name (for the backends' ``solve_*`` functions)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class Options:
    """The checked options of a run (:func:`check_options`; ``record_every`` is ``max_iter + 1``
    when the run does not certify)."""

    max_iter: int
    tol: float
    record_every: int
    certifying: bool
    certificate_budget: float | None
    callback: Callable[..., Any] | None


def check_options(args: RunArguments) -> Options:
    """Check the arguments every backend takes (errors name the argument, as
    :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`'s)."""
    where = "solve_primal_dual"
    max_iter, tol, record_every = args.max_iter, args.tol, args.record_every
    certificate_budget, callback = args.certificate_budget, args.callback
    tol = check_scalar(tol, "tol", min_val=0.0, where=where)
    max_iter = check_int(max_iter, "max_iter", min_val=0, where=where)
    check_option(args.prox, "prox", PROX_OPTIONS, where=where)
    check_bool(args.progress, "progress", where=where)
    check_bool(args.batch_cvxpy, "batch_cvxpy", where=where)
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
    return Options(max_iter, tol, record_every, certifying, certificate_budget, callback)


@dataclass(slots=True)
class Iterate:
    """``(w^k, u^k)`` with the product ``D^T u^k`` the next iteration reuses (arrays of the
    backend's library: numpy, or torch tensors; ``DTu`` None where the backend keeps it
    elsewhere, e.g. on the shards)."""

    W: Any
    U: Any
    DTu: Any


class NodeUpdateMaps(Protocol):
    """The node updates PU (32) a :class:`Run` calls (:class:`~gtvmodel.primal_dual.prox.
    NodeUpdates`, or a backend's wrapper of it)."""

    def __call__(self, V: Any, tau: Any, k: int, W_prev: Any) -> Any:
        """``W_new = PU(V)`` (32) for all nodes."""

    def describe(self) -> dict[str, int]:
        """Number of nodes per path."""


class Run:
    """One run of Algorithm 1: the operators ``D``, ``D^T``, the capacities ``lambda A_e``, the
    steps ``T``, ``Sigma`` (with their rule), the iterate, the certificate schedule and the
    history rows, and the timings."""

    #: The compiled edge pass's edge order of ``u^k`` (None: the model's; a subclass that
    #: keeps its own iterate leaves it None, :meth:`flows` is then the identity).
    perm: np.ndarray | None = None

    def __init__(self, model: ModelDeclaration, opts: Options,
                 rule: FixedSteps | ResidualBalancing, updates: NodeUpdates, warm_start: Any,
                 progress: bool, t_start: float, threads: int = 1, kernel: str = "auto",
                 reorder: bool = False):
        self.model, self.opts, self.rule = model, opts, rule
        self.updates: NodeUpdateMaps = updates
        self.t_start = t_start
        self.D = model.incidence
        self._DT: Any = None  # D^T as CSR (built on first use: the compiled pass needs none)
        # reorder: the compiled edge pass keeps u^k in its own edge order (perm; the flows
        # handed out, to a callback, a certificate or the result, are in the model's)
        self.edges, self.kernel = make_edge_updates(self.D, model.penalty, model.capacities,
                                                    model.dim, kernel, threads=threads,
                                                    DT=functools.partial(incidence_T, model),
                                                    reorder=reorder,
                                                    cache=model.cache)
        self.perm = getattr(self.edges, "perm", None)
        self.deg = model.degrees
        # the compiled node updates (kernel "numba", an affine group), made before the steps:
        # the step rule's start and the set-up then build their operators, not the numpy
        # path's d x d ones (a subclass with its own iteration keeps its own node updates)
        self._nodes: CompiledNodeUpdates | None | bool = False
        nodes = self.compiled_nodes() if type(self).iterate is Run.iterate else None
        if isinstance(rule, ResidualBalancing):
            self._set_steps(*steps_from_scale(self.deg, model.num_edges, rule.start(
                model, updates if nodes is None else nodes.apply)))
        else:
            self._set_steps(rule.tau, rule.sigma)
        W, U = initial_point(model, warm_start)
        self.timings = {"setup": 0.0, "node_updates": 0.0, "edge_updates": 0.0,
                        "certificate": 0.0}
        # D^T u^0: zero without a warm start (no product)
        self.x = Iterate(W, U if warm_start is None or self.perm is None else U[self.perm],
                         np.zeros_like(W) if warm_start is None else self.DT @ U)
        self.Y = np.empty_like(W)  # 2 w^{k+1} - w^k, rewritten every iteration
        # u^{k-1}'s array, reused for u^{k+1} unless a callback or a certificate saw it
        self._spare: np.ndarray | None = None
        self._seen: np.ndarray | None = None  # the flows last handed to a certificate
        # the same for the weights with the compiled node pass (it writes w^{k+1} into w^{k-1}'s
        # array)
        self._spare_w: np.ndarray | None = None
        self._seen_w: np.ndarray | None = None
        self.rows: list[tuple] = []
        self.cert = None
        self.bar = progress_bar(opts.max_iter) if progress else None
        self.p_res = self.d_res = float("nan")
        self.cert_durations: list[float] = []
        self.since_cert = 0.0  # seconds spent iterating since the last certificate
        self.k = 0
        # one-off factorizations: set-up, not iteration 1
        (updates if nodes is None else nodes).prepare(self.tau)
        self.timings["setup"] = time.perf_counter() - t_start

    @property
    def DT(self) -> Any:
        """``D^T`` (CSR, kept in the model's cache, slot ``"pd_incidence_T"``), built on first
        use (a subclass may replace it by its own array)."""
        if self._DT is None:
            self._DT = incidence_T(self.model)
        return self._DT

    @DT.setter
    def DT(self, value: Any) -> None:
        self._DT = value

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
            if callback is not None and callback(k, self.x.W, self.flows(self.x.U)):
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

    def iterate(self, k: int) -> Iterate:
        """Iteration ``k``: PU (32) at every node, then DU (33) on every edge."""
        x = self.x
        t0 = time.perf_counter()
        nodes = self.compiled_nodes()
        if nodes is not None:  # PU (32) and Y = 2 w^{k+1} - w^k in one compiled pass
            W_new, self._spare_w = self._spare_w, None
            if W_new is None:
                W_new = np.empty_like(x.W)
            if nodes(x.W, x.DTu, self.tau, self.tau_col, k, W_new, self.Y):
                raise_non_finite(self.model, W_new, prox_point(x.W, self.tau_col, x.DTu),
                                 self.tau, k)
            Y = self.Y
        else:
            V = prox_point(x.W, self.tau_col, x.DTu)
            W_new = self.updates(V, self.tau, k, x.W)
            if not np.isfinite(W_new).all():
                raise_non_finite(self.model, W_new, V, self.tau, k)
            Y = None
        t1 = time.perf_counter()
        # the dual residual of advance(k + 1), when due, in the edge pass (no |E| x d arrays)
        due = self._residuals_due(k + 1)
        # the compiled pass writes u^{k+1} over u^k where nobody else holds it (one (|E|, d)
        # array: less memory and traffic); the numpy blocks into u^{k-1}'s array
        out, self._spare = self._spare, None
        if self.kernel == "numba" and self.opts.callback is None and x.U is not self._seen:
            out = x.U
        elif out is None:
            out = np.empty_like(x.U)
        if Y is None:
            Y = extrapolate(W_new, x.W, self.Y)
        U_new = self.edges(Y, x.U, self.sigma, self.sigma_col, out,
                           *((x.W, W_new) if due else ()))
        DTu_new = self.edges.node_sums(U_new)
        t2 = time.perf_counter()
        timings = self.timings
        timings["edge_updates"] += t2 - t1
        timings["node_updates"] += t1 - t0
        self.since_cert += t2 - t0
        return Iterate(W_new, U_new, DTu_new)

    def compiled_nodes(self) -> CompiledNodeUpdates | None:
        """The compiled node updates (:class:`~gtvmodel.primal_dual.compiled.
        CompiledNodeUpdates`) where the edge update is compiled (``kernel="numba"``) and a
        group of nodes has an affine update; else None (the groups' own updates)."""
        if self._nodes is False:
            self._nodes = (CompiledNodeUpdates.make(self.updates)
                           if self.kernel == "numba" and isinstance(self.updates, NodeUpdates)
                           else None)
        return self._nodes  # type: ignore[return-value]

    def advance(self, k: int, new: Iterate) -> None:
        """Move to ``new`` after ``k`` iterations: the residuals when the step rule or the
        history needs them, then the step rule (``tau_i sigma_e`` never changes)."""
        rule, x = self.rule, self.x
        adapt = rule.active and k % rule.every == 0
        if self._residuals_due(k):
            self.p_res = primal_residual(x.W, new.W, x.DTu, new.DTu, self.tau_col)
            self.d_res = self.dual_residual(x, new)
        if self.opts.callback is None and x.U is not self._seen and x.U is not new.U:
            self._spare = x.U  # nobody else holds u^{k-1}: its array takes u^{k+1}
        if self.opts.callback is None and x.W is not self._seen_w and x.W is not new.W \
                and self._nodes:
            self._spare_w = x.W  # the same for w^{k-1} (the compiled node pass only)
        self.x = new
        if adapt and isinstance(rule, ResidualBalancing) \
                and rule.update(k - 1, self.p_res, self.d_res):
            self._set_steps(*steps_from_scale(self.deg, self.model.num_edges, rule.c))

    def dual_residual(self, x: Iterate, new: Iterate) -> float:
        """``d_k`` of :func:`~gtvmodel.primal_dual.steps.residuals` from ``x`` to ``new``:
        computed by the edge pass of the iteration (asked for by :meth:`iterate`)."""
        d = self.edges.dual_residual
        return float("nan") if d is None else d

    def _residuals_due(self, k: int) -> bool:
        """Whether :meth:`advance` after ``k`` iterations needs the residuals (the step rule
        adapts, or the history records them: not at the last iteration of a run without
        certificates, which has no history); the rule's state does not change between the
        iteration and its :meth:`advance`."""
        rule, opts = self.rule, self.opts
        return ((rule.active and k % rule.every == 0) or k % opts.record_every == 0
                or (k == opts.max_iter and opts.certifying))

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
        # (with perm the certificate gets a copy: u^k's array may take u^{k+1})
        self._seen, self._seen_w = (self.x.U if self.perm is None else None), self.x.W
        return certify(self.model, self.x.W, self.flows(self.x.U), fallback=False)

    def flows(self, U: Any) -> Any:
        """The flows ``U`` of the iterate in the model's edge order (a copy where the
        compiled edge pass keeps its own order, :attr:`perm`)."""
        return U if self.perm is None else self.edges.model_order(U)  # type: ignore[union-attr]

    def result(self, status: str) -> PrimalDualResult:
        """The :class:`PrimalDualResult` of the run (``status`` from :meth:`loop`)."""
        # the flows in the model's edge order, in place (the run is over; nobody else holds
        # them: a certificate or a callback got copies), counted in the total
        flows = self.x.U if self.perm is None else \
            self.edges.model_order(self.x.U, in_place=True)  # type: ignore[union-attr]
        self.timings["total"] = time.perf_counter() - self.t_start
        return PrimalDualResult(
            weights=self.x.W, flows=flows, iterations=self.k, status=status,
            history=History.from_rows(self.rows), certificate=self.cert, timings=self.timings,
            c=self.rule.c, paths=self.updates.describe(), kernel=self.kernel,
            labels=Labels(self.model.nodes, self.model.edges))


def incidence_T(model: ModelDeclaration) -> Any:
    """``D^T`` as CSR, kept in the model's cache (slot ``"pd_incidence_T"``; a function of the
    model alone, so that what holds it refers to no run: no reference cycle keeps a run's
    arrays alive after it)."""
    return model.cache.get_or_build("pd_incidence_T", lambda: model.incidence.T.tocsr())


def progress_bar(total: int) -> Any:
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


def raise_non_finite(model: ModelDeclaration, W_new: np.ndarray, V: np.ndarray, tau: np.ndarray,
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


def initial_point(model: ModelDeclaration, warm_start: Any) -> tuple[np.ndarray, np.ndarray]:
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
