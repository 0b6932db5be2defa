"""Algorithm 1 of paper 001: preconditioned primal-dual message passing for GTV minimization.

With ``w^0``, ``u^0`` (zero unless warm-started) every iteration ``k`` runs

    node i:  v_i = w_i^k - tau_i (D^T u^k)_i ,    w_i^{k+1} = PU_i(v_i)                  (32)
    edge e:  u_e^{k+1} = DU_e( u_e^k + sigma_e (2 D w^{k+1} - D w^k)_e )                 (33)

``PU_i`` is the prox of the node's loss with its constraints (:mod:`gtvmodel.prox`), ``DU_e``
the prox of ``sigma_e (lambda A_e phi)^*`` (:meth:`gtvmodel.penalties.Penalty.dual_update`).
Node ``i`` needs only its own loss and the flows on its incident edges; edge ``e`` only the old
and new weights of its two endpoints (:class:`NodeUpdate` / :class:`EdgeUpdate` state this
message-passing structure; :func:`solve_primal_dual` executes it vectorized over all nodes and
edges with ``scipy.sparse``).

**Steps.**  ``tau_i = c / deg(i)``, ``sigma_e = 1 / (2c)`` (Pock-Chambolle diagonal
preconditioning; ``||Sigma^{1/2} D T^{1/2}|| <= 1`` for every ``c > 0``; the paper has
``c = 1``).  The default adapts ``c`` by residual balancing (:class:`ResidualBalancing`).

**Stopping.**  Every ``record_every`` iterations the iterate is certified with
:func:`gtvmodel.certificate.certify` (the duality gap (34) after repairing the flows to a dual
feasible point).  The run stops with status ``"converged"`` when the certified gap is at most
``tol * max(1, |P(w)|)`` (``tol`` is relative; ``relative_gap`` in the history).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .._validate import check_bool, check_int, check_option, check_scalar, check_vector
from ..certificates.certificate import certify
from ..declaration import ModelDeclaration
from ..errors import DataError, ParameterError, SolverError
from ..results import Labels, Result
from ..solve.compile import data_overflow_message
from .prox import PROX_OPTIONS, NodeUpdates

__all__ = [
    "ResidualBalancing",
    "FixedSteps",
    "step_norm",
    "NodeUpdate",
    "EdgeUpdate",
    "History",
    "PrimalDualResult",
    "solve_primal_dual",
]


# =====================================================================  steps
def step_norm(model: ModelDeclaration, tau: np.ndarray, sigma: np.ndarray, iters: int = 1000,
              rtol: float = 1e-9, seed: int = 0) -> float:
    """``||Sigma^{1/2} D T^{1/2}||_2`` by power iteration on ``K^T K`` (sparse; ``D`` is never
    formed dense).  Converges from below; stops when the estimate changes by less than
    ``rtol`` relatively."""
    D = model.incidence
    if D.shape[0] == 0:
        return 0.0
    st, ss = np.sqrt(tau), np.sqrt(sigma)
    x = np.random.default_rng(seed).standard_normal(D.shape[1])
    x /= np.linalg.norm(x)
    est = 0.0
    for _ in range(iters):
        y = ss * (D @ (st * x))
        x_new = st * (D.T @ (ss * y))
        nrm = np.linalg.norm(x_new)
        if nrm == 0.0:
            return 0.0
        new_est = float(np.sqrt(nrm))
        x = x_new / nrm
        if abs(new_est - est) <= rtol * new_est:
            return new_est
        est = new_est
    return est


@dataclass
class FixedSteps:
    """Fixed steps: ``tau``, ``sigma`` arrays (a fixed ``c`` gives ``c/deg``, ``1/(2c)``)."""

    tau: np.ndarray
    sigma: np.ndarray
    c: float | None = None

    #: Fixed steps never change (the residuals are only computed for the history).
    active = False

    def update(self, k: int, p_res: float, d_res: float) -> bool:
        """Fixed steps never change."""
        return False


@dataclass
class ResidualBalancing:
    """The default step rule: a data-driven initial scale ``c_0``, then residual balancing.

    **Initial scale.**  ``tau_i = c/deg(i)`` turns flows (units of ``u``) into weight changes, so
    ``c`` has the units weight/flow.  ``c_0 = gain * |w| / |u|`` with

    * ``|w|`` the root-mean-square norm of the nonzero rows of ``PU(0)`` with ``tau_i = 1``
      (one node update from zero: the scale the local data pull the weights to; 1 if all are 0);
    * ``|u|`` the scale of the optimal flows: ``lambda * median(A_e)`` times the Euclidean radius
      of the dual-norm unit ball for a norm penalty (capacities (27)), and
      ``lambda * median(A_e) * |w| * ||Q||`` for ``SquaredNorm2`` (``Q = I``) or ``QuadForm``;
    * ``gain = 0.1`` (measured: on paper 000's setting and paper 001 VI-A the fixed ``c`` that
      reaches a relative suboptimality of 1e-6 fastest lies in ``[0.05, 0.15] |w|/|u|``).

    With ``lambda = 0`` (no coupling) ``c_0 = 1``.  A given ``c0`` overrides the estimate.

    **Balancing** (adaptive PDHG, Goldstein, Li, Yuan, Esser, Baraniuk, "Adaptive primal-dual
    splitting methods", 2013/2015).  After iteration ``k`` the primal and dual residuals (the
    subgradient residuals of the optimality conditions)

        p_k = || T^{-1}(w^k - w^{k+1}) - D^T (u^k - u^{k+1}) ||
        d_k = || Sigma^{-1}(u^k - u^{k+1}) - D (w^k - w^{k+1}) ||

    are compared: if ``p_k > delta * d_k`` the primal side lags and ``c`` is multiplied by
    ``1/(1 - alpha)``; if ``d_k > delta * p_k`` by ``(1 - alpha)``.  Every change multiplies
    ``alpha`` by ``eta < 1``, so ``sum_k |log c_{k+1} - log c_k| <= sum_j -log(1 - alpha_0
    eta^j) < inf`` (about ``0.53`` for the defaults: ``c`` stays within a factor 1.7 of
    ``c_0``): ``c`` changes summably and stays bounded, the safeguard under which adaptive PDHG
    keeps converging.  ``tau_i sigma_e`` does not depend on ``c``, so the step condition
    ``||Sigma^{1/2} D T^{1/2}|| <= 1`` holds throughout.  Once ``alpha < alpha_min`` the rule
    stops (``c`` changes finitely often: at most ``log(alpha_min/alpha_0)/log(eta)`` ~ 31 times
    with the defaults).  The residuals are evaluated every ``every`` iterations (they cost
    about as much as an iteration's vector operations).

    **Far from balance** (``p_k > far * d_k`` or ``d_k > far * p_k``, default ``far = 100``):
    ``c_0`` is then orders of magnitude off -- e.g. edge weights spanning ``1e-8..1e8`` make
    ``median(A_e)`` a poor flow scale, and the bounded factor-1.7 schedule above cannot
    recover: Algorithm 1 stalled for 5,000 iterations at a certified relative gap ~1 on such
    graphs.  Since ``p ~ 1/c`` and ``d ~ c``, ``c`` is multiplied by ``sqrt(p_k/d_k)``, clipped
    to ``[1/far_factor, far_factor]`` (default 10), without touching ``alpha``; at most
    ``max_far_moves`` (30) such moves per run.  Measured: the residual ratio stays within
    ``[0.07, 0.6]`` on paper 000's and paper 001's settings (the far moves never trigger there;
    benchmark (d) is unchanged) and at ``1e2..1e5`` on the stalled instances, which now reach a
    certified relative gap of 1e-4 in a few hundred iterations.  ``c`` still changes finitely
    often (at most 31 + 30 times), by a bounded total factor (``|log c_end - log c_0| <=
    0.53 + 30 log 10``), so the safeguard of adaptive PDHG holds and ``tau_i sigma_e`` (hence
    the step condition) never changes.
    """

    c0: float | None = None
    gain: float = 0.1
    alpha0: float = 0.1
    eta: float = 0.8
    delta: float = 1.5
    every: int = 10
    alpha_min: float = 1e-4
    far: float = 100.0
    far_factor: float = 10.0
    max_far_moves: int = 30
    c: float = field(init=False)
    alpha: float = field(init=False)
    changes: int = field(init=False, default=0)
    far_moves: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        where, pos = "ResidualBalancing", {"min_val": 0.0, "include_boundaries": "neither"}
        if self.c0 is not None:
            check_scalar(self.c0, "c0", **pos, where=where)
        check_scalar(self.gain, "gain", **pos, where=where)
        for name in ("alpha0", "eta"):
            check_scalar(getattr(self, name), name, min_val=0.0, max_val=1.0,
                         include_boundaries="neither", where=where)
        check_scalar(self.delta, "delta", min_val=1.0, include_boundaries="neither", where=where)
        check_int(self.every, "every", min_val=1, where=where)
        check_scalar(self.far_factor, "far_factor", min_val=1.0, include_boundaries="neither",
                     where=where)
        check_int(self.max_far_moves, "max_far_moves", min_val=0, where=where)
        if not self.far > self.delta:
            raise ParameterError(f"ResidualBalancing: need far > delta, got far={self.far}, "
                                 f"delta={self.delta}")
        self.c = float("nan") if self.c0 is None else float(self.c0)
        self.alpha = float(self.alpha0)

    def start(self, model: ModelDeclaration, updates: NodeUpdates) -> float:
        """Fix ``c_0`` (the estimate above unless ``c0`` was given); returns it."""
        if self.c0 is None:
            self.c = initial_scale(model, updates, self.gain)
        return self.c

    @property
    def active(self) -> bool:
        """False once ``alpha < alpha_min`` (``c`` is final)."""
        return self.alpha >= self.alpha_min

    def update(self, k: int, p_res: float, d_res: float) -> bool:
        """Apply the rule after iteration ``k``; True if ``c`` changed."""
        if (not self.active or (k + 1) % self.every
                or not (np.isfinite(p_res) and np.isfinite(d_res))):  # not due / finished
            return False
        if p_res > self.far * d_res or d_res > self.far * p_res:
            # far from balance (measured: the residual ratio stays within [0.07, 0.6] on
            # paper 000/001 instances, at 1e2-1e5 when edge weights span 1e-8..1e8 and c_0
            # is orders of magnitude off): a geometric move towards balance (p ~ 1/c and
            # d ~ c, so the ratio moves like c^-2), at most far_factor per check and at most
            # max_far_moves times in a run; the alpha schedule below is not touched
            if self.far_moves >= self.max_far_moves:
                return False
            ratio = p_res / d_res if d_res > 0 else np.inf
            factor = min(np.sqrt(ratio), self.far_factor) if ratio > 1 else \
                max(np.sqrt(ratio), 1.0 / self.far_factor)
            self.c *= float(factor)
            self.far_moves += 1
            self.changes += 1
            return True
        if p_res > self.delta * d_res:
            self.c /= 1.0 - self.alpha
        elif d_res > self.delta * p_res:
            self.c *= 1.0 - self.alpha
        else:
            return False
        self.alpha *= self.eta
        self.changes += 1
        return True


def initial_scale(model: ModelDeclaration, updates: NodeUpdates, gain: float = 0.1) -> float:
    """``c_0 = gain |w| / |u|`` of :class:`ResidualBalancing`."""
    n, d = model.num_nodes, model.dim
    if model.lam == 0 or model.num_edges == 0:
        return 1.0
    W1 = updates(np.zeros((n, d)), np.ones(n), 0, np.zeros((n, d)))
    norms = np.linalg.norm(W1, axis=1)
    nz = norms > 1e-12 * max(1.0, float(norms.max(initial=0.0)))
    w_scale = float(np.sqrt(np.mean(norms[nz] ** 2))) if nz.any() else 1.0
    # flows u_e of size lambda A_e times the penalty's flow scale (Penalty.flow_scale)
    u_scale = model.lam * float(np.median(model.edge_weights)) * model.penalty.flow_scale(
        d, w_scale)
    if not (u_scale > 0 and np.isfinite(u_scale)):
        return 1.0
    return float(gain * w_scale / u_scale)


def _norm(A: np.ndarray) -> float:
    """Frobenius norm without BLAS (``np.linalg.norm`` calls a threaded ``dot`` that is
    needlessly slow on small shared machines)."""
    return float(np.sqrt(np.einsum("ij,ij->", A, A)))


def _steps_from_c(deg: np.ndarray, n_edges: int, c: float) -> tuple[np.ndarray, np.ndarray]:
    """``tau_i = c/deg(i)`` (``c`` at isolated nodes, whose update ignores it), ``sigma_e =
    1/(2c)``."""
    return c / np.maximum(deg, 1), np.full(n_edges, 0.5 / c)


def _make_rule(model: ModelDeclaration, step: Any) -> FixedSteps | ResidualBalancing:
    deg = model.degrees
    E = model.num_edges
    if step is None:
        return ResidualBalancing()
    if isinstance(step, ResidualBalancing):
        return step
    if isinstance(step, (int, float, np.floating, np.integer)) and not isinstance(step, bool):
        c = check_scalar(step, "step (the scale c)", min_val=0.0, include_boundaries="neither",
                         where="solve_primal_dual")
        tau, sigma = _steps_from_c(deg, E, c)
        return FixedSteps(tau, sigma, c)
    if isinstance(step, dict):
        step = (step.get("tau"), step.get("sigma"))
    if isinstance(step, (tuple, list)) and len(step) == 2:
        tau = check_vector(step[0], "step tau", model.num_nodes)
        sigma = check_vector(step[1], "step sigma", E)
        bad = np.flatnonzero((tau <= 0) & (deg > 0))
        if bad.size:
            raise ParameterError(f"step tau at node {model.nodes[bad[0]]!r} is {tau[bad[0]]!r}; "
                                 "primal steps must be > 0")
        bad = np.flatnonzero(sigma <= 0)
        if bad.size:
            raise ParameterError(f"step sigma at edge {model.empirical_graph.edge_label(bad[0])}"
                                 f" is {sigma[bad[0]]!r}; dual steps must be > 0")
        tau = np.where(deg > 0, tau, 1.0)  # isolated nodes: not coupled, tau unused
        nrm = step_norm(model, tau, sigma)
        if nrm > 1.0 + 1e-9:
            raise ParameterError(
                f"steps violate the convergence condition ||Sigma^(1/2) D T^(1/2)|| <= 1 of "
                f"Algorithm 1: the norm is {nrm:.6g} (power iteration). Scale tau or sigma "
                "down, e.g. tau_i = c/deg(i), sigma_e = 1/(2c)")
        return FixedSteps(tau, sigma, None)
    raise ParameterError("step must be None (adaptive), a positive scale c, a "
                         "ResidualBalancing rule, or (tau, sigma) arrays; got "
                         f"{type(step).__name__}")


# =====================================================================  message passing
@dataclass
class NodeUpdate:
    """The computation of node ``i`` in one iteration: from its own weight, the flows on its
    incident edges (with orientation signs ``+1`` if ``i = e+``, ``-1`` if ``i = e-``) and its
    step ``tau_i``, the new weight ``PU_i(w_i - tau_i sum_e sign_e u_e)`` (32)."""

    updates: NodeUpdates
    i: int

    def __call__(self, w_i: np.ndarray, flows: np.ndarray, signs: np.ndarray, tau_i: float,
                 k: int = 0) -> np.ndarray:
        v = w_i - tau_i * (signs[:, None] * flows).sum(axis=0)
        return self.updates.node(self.i, v, tau_i, k, w_i)


@dataclass
class EdgeUpdate:
    """The computation of edge ``e = (e+, e-)``: from its flow, the old and new weights of its
    two endpoints and ``sigma_e``, the new flow
    ``DU_e(u_e + sigma_e (2 (w+_new - w-_new) - (w+_old - w-_old)))`` (33)."""

    model: Any
    e: int

    def __call__(self, u_e: np.ndarray, head_new: np.ndarray, tail_new: np.ndarray,
                 head_old: np.ndarray, tail_old: np.ndarray, sigma_e: float) -> np.ndarray:
        lam_a = self.model.lam * self.model.edge_weights[self.e]  # one edge of capacities
        u_bar = u_e + sigma_e * (2.0 * (head_new - tail_new) - (head_old - tail_old))
        return self.model.penalty.dual_update(u_bar[None], np.array([sigma_e]),
                                              np.array([lam_a]))[0]


# =====================================================================  results
@dataclass
class History:
    """Recorded iterations (one row every ``record_every`` iterations, and the last one).

    Columns (numpy arrays): ``iteration``, ``primal`` (``P(w)``), ``dual`` (``D(u')`` of the
    repaired flows), ``gap`` (certified, ``>= P(w) - P*``), ``relative_gap``
    (``gap / max(1, |P|)``), ``primal_residual``, ``dual_residual`` (see
    :class:`ResidualBalancing`), ``c`` (the step scale, NaN for explicit steps) and ``time``
    (seconds since the start).
    """

    iteration: np.ndarray
    primal: np.ndarray
    dual: np.ndarray
    gap: np.ndarray
    relative_gap: np.ndarray
    primal_residual: np.ndarray
    dual_residual: np.ndarray
    c: np.ndarray
    time: np.ndarray

    COLUMNS = ("iteration", "primal", "dual", "gap", "relative_gap", "primal_residual",
               "dual_residual", "c", "time")

    @classmethod
    def from_rows(cls, rows: list[tuple]) -> History:
        arr = np.array(rows, dtype=float).reshape(-1, len(cls.COLUMNS))
        cols = {name: arr[:, j] for j, name in enumerate(cls.COLUMNS)}
        cols["iteration"] = cols["iteration"].astype(np.int64)
        return cls(**cols)

    def __len__(self) -> int:
        return len(self.iteration)

    def columns(self) -> dict[str, np.ndarray]:
        """The columns as a dict of arrays (e.g. for ``pandas.DataFrame``)."""
        return {name: getattr(self, name) for name in self.COLUMNS}

    def __str__(self) -> str:
        head = f"{'iter':>7} {'primal':>14} {'dual':>14} {'gap':>10} {'rel.gap':>10} {'c':>9}"
        lines = [head]
        for j in range(len(self)):
            lines.append(f"{self.iteration[j]:7d} {self.primal[j]:14.8g} {self.dual[j]:14.8g} "
                         f"{self.gap[j]:10.3g} {self.relative_gap[j]:10.3g} {self.c[j]:9.3g}")
        return "\n".join(lines)


@dataclass(kw_only=True)
class PrimalDualResult(Result):
    """Result of :func:`solve_primal_dual`; the shared vocabulary (:meth:`weight`,
    :meth:`flow`, :meth:`to_dict`, ...) is :class:`gtvmodel.results.Result`'s.

    ``weights`` ``(n, d)`` (node order), ``flows`` ``(|E|, d)`` (the raw iterate ``u^k``),
    ``iterations``, ``status`` (``"converged"``: certified relative gap ``<= tol``;
    ``"max_iter"``; ``"stopped"``: the callback returned True), ``success`` (``status ==
    "converged"``), ``history`` (:class:`History`; in :meth:`to_dict` only with
    ``arrays=True``), ``certificate`` (the last one; its ``flows`` are the repaired, dual
    feasible ones), ``timings`` (seconds: ``setup``, ``node_updates``, ``edge_updates``,
    ``certificate``, ``total``), ``c`` (final step scale) and ``paths`` (how many nodes used
    which PU path).
    """

    weights: np.ndarray
    flows: np.ndarray
    iterations: int
    status: str
    history: History
    certificate: Any
    c: float | None
    paths: dict[str, int]

    _BULKY: ClassVar[tuple[str, ...]] = ("history",)

    @property
    def success(self) -> bool:
        """The run converged: its certified relative gap is at most ``tol``."""
        return self.status == "converged"

    @property
    def objective(self) -> float:
        """The primal objective ``P(w)`` of the returned weights."""
        return float(self.history.primal[-1]) if len(self.history) else float("nan")

    @property
    def gap(self) -> float:
        """The last certified duality gap."""
        return float(self.history.gap[-1]) if len(self.history) else float("inf")


# =====================================================================  the solver
def _certify(model: ModelDeclaration, W: np.ndarray, U: np.ndarray) -> Any:
    return certify(model, W, U, fallback=False)


def solve_primal_dual(model: ModelDeclaration, max_iter: int = 10_000, tol: float = 1e-6,
                      prox: str = "auto", step: Any = None, warm_start: Any = None,
                      callback: Callable[..., Any] | None = None, record_every: int = 50,
                      progress: bool = False, batch_cvxpy: bool = True,
                      certificate_budget: float | None = 0.25) -> PrimalDualResult:
    """Run Algorithm 1 (paper 001) on ``model``; see the module docstring.

    Parameters
    ----------
    max_iter : int
        Maximum number of iterations.
    tol : float
        Stop when the certified gap (34) is ``<= tol * max(1, |P(w)|)`` (relative); ``0``
        runs ``max_iter`` iterations.
    prox : {"auto", "cvxpy"}
        ``"auto"``: the fastest exact node-update path per node (:func:`gtvmodel.prox.plan`);
        ``"cvxpy"``: the general CVXPY path for every node.
    step : None, float, ResidualBalancing or (tau, sigma)
        ``None``: adaptive ``c`` (:class:`ResidualBalancing`); a number: fixed ``c``
        (``tau_i = c/deg(i)``, ``sigma_e = 1/(2c)``); ``(tau, sigma)`` arrays: explicit steps,
        checked against ``||Sigma^{1/2} D T^{1/2}|| <= 1`` by power iteration.
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
        so their share of a run can be larger: 22 % on paper 000's setting, 44 % at 10,000
        nodes / 100,000 edges, docs/primal_dual.md); ``None``: certify at every
        ``record_every``.
    progress : bool
        Show a ``tqdm`` progress bar with the current certified gap.
    batch_cvxpy : bool
        One CVXPY problem for all CVXPY-path nodes (default) or one per node.
    certificate_budget : float or None
        See ``record_every``.
    """
    t_start = time.perf_counter()
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
    E = model.num_edges
    D = model.incidence
    DT = D.T.tocsr()
    lamA = model.capacities
    penalty = model.penalty
    rule = _make_rule(model, step)
    deg = model.degrees
    updates = NodeUpdates(model, prox, batch_cvxpy)
    if isinstance(rule, ResidualBalancing):
        tau, sigma = _steps_from_c(deg, E, rule.start(model, updates))
    else:
        tau, sigma = rule.tau, rule.sigma
    W, U = _initial(model, warm_start)
    timings = {"setup": 0.0, "node_updates": 0.0, "edge_updates": 0.0, "certificate": 0.0}
    DW = D @ W
    DTu = DT @ U
    rows: list[tuple] = []
    cert = None
    status = "max_iter"
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=max_iter, desc="primal-dual", unit="it")
    p_res = d_res = float("nan")
    timings["setup"] = time.perf_counter() - t_start

    cert_durations: list[float] = []
    since_cert = 0.0  # seconds spent iterating since the last certificate

    def record(k: int) -> bool:
        nonlocal cert, since_cert
        if not certifying:
            return False
        t0 = time.perf_counter()
        cert = _certify(model, W, U)
        cert_durations.append(time.perf_counter() - t0)
        timings["certificate"] += cert_durations[-1]
        since_cert = 0.0
        c_now = rule.c if rule.c is not None else float("nan")
        rows.append((k, cert.primal_value, cert.dual_value, cert.gap, cert.relative_gap,
                     p_res, d_res, c_now, time.perf_counter() - t_start))
        if bar is not None:
            bar.set_postfix(gap=f"{cert.gap:.3g}", c=f"{c_now:.3g}")
        return bool(tol > 0 and cert.gap <= tol * max(1.0, abs(cert.primal_value)))

    tau_col, sigma_col = tau[:, None], sigma[:, None]
    k = 0
    done = max_iter == 0 and record(0)
    while k < max_iter and not done:
        t0 = time.perf_counter()
        V = W - tau_col * DTu
        W_new = updates(V, tau, k, W)
        if not np.isfinite(W_new).all():
            _raise_non_finite(model, W_new, V, tau, k)
        t1 = time.perf_counter()
        DW_new = D @ W_new
        U_bar = np.multiply(DW_new, 2.0)  # u + sigma (2 D w^{k+1} - D w^k), one temporary
        U_bar -= DW
        U_bar *= sigma_col
        U_bar += U
        U_new = penalty.dual_update(U_bar, sigma, lamA)
        del U_bar
        DTu_new = DT @ U_new
        t2 = time.perf_counter()
        timings["edge_updates"] += t2 - t1
        timings["node_updates"] += t1 - t0
        since_cert += t2 - t0
        k += 1
        adapt = rule.active and k % rule.every == 0
        if adapt or k % record_every == 0 or k == max_iter:
            # subgradient residuals of the optimality conditions (ResidualBalancing, history)
            p_res = _norm((W - W_new) / tau_col - (DTu - DTu_new))
            d_res = _norm((U - U_new) / sigma_col - (DW - DW_new))
        W, U, DW, DTu = W_new, U_new, DW_new, DTu_new
        if adapt and rule.update(k - 1, p_res, d_res):
            tau, sigma = _steps_from_c(deg, E, rule.c)
            tau_col, sigma_col = tau[:, None], sigma[:, None]
        if bar is not None:
            bar.update(1)
        # certificate cost estimate: the cheapest one after the first (which pays one-time
        # setup); a scheduled certificate waits until the iterations since the last one took
        # at least cost / budget
        est = min(cert_durations[1:]) if len(cert_durations) > 1 else 0.0
        due = k % record_every == 0 and (certificate_budget is None
                                         or certificate_budget * since_cert >= est)
        if due or k == max_iter:
            if record(k):
                status = "converged"
                break
        if callback is not None and callback(k, W, U):
            status = "stopped"
            if not rows or rows[-1][0] != k:
                record(k)
            break
    if bar is not None:
        bar.close()
    if not rows and certifying:
        record(k)
    timings["total"] = time.perf_counter() - t_start
    return PrimalDualResult(
        weights=W, flows=U, iterations=k, status=status, history=History.from_rows(rows),
        certificate=cert, timings=timings, c=rule.c, paths=updates.describe(),
        labels=Labels(model.nodes, model.edges))


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
