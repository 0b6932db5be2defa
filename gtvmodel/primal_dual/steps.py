"""Step sizes of Algorithm 1 (paper 001): ``T = diag(tau_i)``, ``Sigma = diag(sigma_e)``.

Algorithm 1 converges when ``||Sigma^{1/2} D T^{1/2}||_2 <= 1`` (Pock-Chambolle diagonal
preconditioning).  ``tau_i = c / deg(i)``, ``sigma_e = 1 / (2c)`` satisfies it for every scale
``c > 0`` (the paper has ``c = 1``); the rules here choose ``c``:

* :class:`FixedSteps` -- a fixed ``c`` or explicit ``(tau, sigma)`` arrays, the latter checked by
  :func:`step_norm`;
* :class:`ResidualBalancing` -- the default: the initial scale :func:`initial_scale`, then
  adaptive PDHG residual balancing on the residuals of :func:`residuals`.

:func:`make_step_rule` turns the ``step`` argument of
:func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual` into a rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .. import _xp
from .._validate import check_int, check_scalar, check_vector
from ..declaration import ModelDeclaration
from ..errors import ParameterError

#: What :func:`initial_scale` calls for one node update PU (32) of every node: ``(V, tau, k,
#: W_prev) -> W`` (:class:`~gtvmodel.primal_dual.prox.NodeUpdates`, or the shards' on Dask).
NodeUpdateMap = Callable[[np.ndarray, np.ndarray, int, np.ndarray], np.ndarray]

__all__ = [
    "FixedSteps",
    "ResidualBalancing",
    "step_norm",
    "initial_scale",
    "steps_from_scale",
    "residuals",
    "make_step_rule",
]


def step_norm(model: ModelDeclaration, tau: np.ndarray, sigma: np.ndarray, iters: int = 1000,
              rtol: float = 1e-9, seed: int = 0) -> float:
    """``||Sigma^{1/2} D T^{1/2}||_2`` (Algorithm 1 converges when it is ``<= 1``) by power
    iteration on ``K^T K``, ``K = Sigma^{1/2} D T^{1/2}`` (sparse; ``D`` is never formed
    dense).  Converges from below; stops when the estimate changes by less than ``rtol``
    relatively."""
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
    """Fixed steps ``T = diag(tau)``, ``Sigma = diag(sigma)`` of Algorithm 1 (a fixed scale
    ``c`` gives ``tau_i = c/deg(i)``, ``sigma_e = 1/(2c)``; explicit arrays have ``c`` None)."""

    tau: np.ndarray
    sigma: np.ndarray
    c: float | None = None

    #: Fixed steps never change (the residuals are only computed for the history).
    active = False
    #: (The adaptation period of :class:`ResidualBalancing`; fixed steps never adapt.)
    every: ClassVar[int] = 1

    def update(self, k: int, p_res: float, d_res: float) -> bool:
        """Fixed steps never change (the residuals ``p_k``, ``d_k`` are ignored)."""
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

    Parameters
    ----------
    c0 : float, optional
        The initial scale ``c_0 > 0``; None (default): the estimate ``gain * |w| / |u|``
        above, fixed when the run starts.
    gain : float
        The factor of that estimate (``> 0``, default 0.1).
    alpha0 : float
        The initial relative change ``alpha`` of ``c`` per balancing move (in ``(0, 1)``,
        default 0.1).
    eta : float
        The factor of ``alpha`` after every change (in ``(0, 1)``, default 0.8).
    delta : float
        The imbalance ``p_k / d_k`` (or ``d_k / p_k``) that triggers a move (``> 1``,
        default 1.5).
    every : int
        Evaluate the residuals every this many iterations (``>= 1``, default 10).
    alpha_min : float
        The rule stops once ``alpha < alpha_min`` (default 1e-4).
    far : float
        The imbalance beyond which a far move rescales ``c`` by ``sqrt(p_k / d_k)``
        (``> delta``, default 100).
    far_factor : float
        The clip of a far move's factor to ``[1/far_factor, far_factor]`` (``> 1``,
        default 10).
    max_far_moves : int
        At most this many far moves per run (``>= 0``, default 30).

    Attributes
    ----------
    c : float
        The current scale (NaN until the run starts when ``c0`` is None).
    alpha : float
        The current relative change of a balancing move.
    changes, far_moves : int
        How many balancing and far moves changed ``c`` so far.

    Raises
    ------
    ParameterError
        A parameter outside its range above (named), or ``far <= delta``.

    Examples
    --------
    The rule is ``solve_primal_dual``'s default (``step=None``); a rule with other constants
    is passed as ``step``, and its state after the run says what it did:

    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), 1, penalty=gm.Norm2(), lam=1.0)
    >>> for i, a in enumerate([0.0, 1.0, 5.0]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> rule = gm.ResidualBalancing(every=5)
    >>> res = gm.solve_primal_dual(model, tol=1e-8, step=rule)
    >>> res.status, res.c == rule.c, rule.c > 0
    ('converged', True, True)
    >>> gm.ResidualBalancing(far=1.2)
    Traceback (most recent call last):
    ...
    gtvmodel.errors.ParameterError: ResidualBalancing: need far > delta, got far=1.2, delta=1.5
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
        where = "ResidualBalancing"
        pos: dict[str, Any] = {"min_val": 0.0, "include_boundaries": "neither"}
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

    def start(self, model: ModelDeclaration, updates: NodeUpdateMap) -> float:
        """Fix ``c_0`` (the estimate above unless ``c0`` was given); returns it."""
        if self.c0 is None:
            self.c = initial_scale(model, updates, self.gain)
        return self.c

    @property
    def active(self) -> bool:
        """False once ``alpha < alpha_min`` (``c`` is final)."""
        return self.alpha >= self.alpha_min

    def update(self, k: int, p_res: float, d_res: float) -> bool:
        """Apply the rule to the residuals ``p_k``, ``d_k`` (:func:`residuals`) after iteration
        ``k``; True if ``c`` changed (the new steps are :func:`steps_from_scale` of ``c``)."""
        if (not self.active or (k + 1) % self.every
                or not (np.isfinite(p_res) and np.isfinite(d_res))):  # not due / finished
            return False
        if p_res > self.far * d_res or d_res > self.far * p_res:
            return self._far_move(p_res, d_res)
        if p_res > self.delta * d_res:
            self.c /= 1.0 - self.alpha
        elif d_res > self.delta * p_res:
            self.c *= 1.0 - self.alpha
        else:
            return False
        self.alpha *= self.eta
        self.changes += 1
        return True

    def _far_move(self, p_res: float, d_res: float) -> bool:
        """Far from balance (measured: the residual ratio stays within [0.07, 0.6] on paper
        000/001 instances, at 1e2-1e5 when edge weights span 1e-8..1e8 and ``c_0`` is orders of
        magnitude off): a geometric move towards balance (``p ~ 1/c`` and ``d ~ c``, so the
        ratio moves like ``c^-2``), at most ``far_factor`` per check and at most
        ``max_far_moves`` times in a run; the ``alpha`` schedule is not touched."""
        if self.far_moves >= self.max_far_moves:
            return False
        ratio = p_res / d_res if d_res > 0 else np.inf
        factor = min(np.sqrt(ratio), self.far_factor) if ratio > 1 else \
            max(np.sqrt(ratio), 1.0 / self.far_factor)
        self.c *= float(factor)
        self.far_moves += 1
        self.changes += 1
        return True


def initial_scale(model: ModelDeclaration, updates: NodeUpdateMap, gain: float = 0.1
                  ) -> float:
    """``c_0 = gain |w| / |u|`` of :class:`ResidualBalancing`: ``|w|`` from one node update
    PU (32) from zero with ``tau_i = 1``, ``|u|`` the flow scale ``lambda median(A_e)`` times
    :meth:`~gtvmodel.terms.penalties.Penalty.flow_scale`; 1 without coupling."""
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


def steps_from_scale(deg: np.ndarray, n_edges: int, c: float) -> tuple[np.ndarray, np.ndarray]:
    """The steps of scale ``c``: ``tau_i = c/deg(i)`` (``c`` at isolated nodes, whose update
    ignores it) and ``sigma_e = 1/(2c)``, so that ``tau_i sigma_e`` does not depend on ``c``
    and ``||Sigma^{1/2} D T^{1/2}|| <= 1`` holds for every ``c > 0``."""
    return c / np.maximum(deg, 1), np.full(n_edges, 0.5 / c)


def _norm(A: np.ndarray) -> float:
    """Frobenius norm without BLAS (``np.linalg.norm`` calls a threaded ``dot`` that is
    needlessly slow on small shared machines); any array namespace (:mod:`gtvmodel._xp`)."""
    xp = _xp.namespace(A)
    return float(xp.sqrt(xp.einsum("ij,ij->", A, A)))


def residuals(W: np.ndarray, W_new: np.ndarray, U: np.ndarray, U_new: np.ndarray,
              DdW: np.ndarray, DTu: np.ndarray, DTu_new: np.ndarray,
              tau_col: np.ndarray, sigma_col: np.ndarray) -> tuple[float, float]:
    """The subgradient residuals ``(p_k, d_k)`` of the optimality conditions after iteration
    ``k`` (:class:`ResidualBalancing`; the history's ``primal_residual``, ``dual_residual``):

        p_k = || T^{-1}(w^k - w^{k+1}) - D^T (u^k - u^{k+1}) ||
        d_k = || Sigma^{-1}(u^k - u^{k+1}) - D (w^k - w^{k+1}) ||

    from the iterates, ``DdW = D (w^k - w^{k+1})`` (formed only on the iterations that need
    the residuals), the products ``D^T u`` and the steps as columns."""
    return primal_residual(W, W_new, DTu, DTu_new, tau_col), _norm((U - U_new) / sigma_col
                                                                   - DdW)


def primal_residual(W: np.ndarray, W_new: np.ndarray, DTu: np.ndarray, DTu_new: np.ndarray,
                    tau_col: np.ndarray) -> float:
    """``p_k`` of :func:`residuals` (node rows only)."""
    return _norm((W - W_new) / tau_col - (DTu - DTu_new))


def dual_residual(D: Any, W: np.ndarray, W_new: np.ndarray, U: np.ndarray, U_new: np.ndarray,
                  sigma_col: np.ndarray) -> float:
    """``d_k`` of :func:`residuals` with ``D (w^k - w^{k+1})`` formed here (the edge updates
    fold it into their pass instead, :class:`~gtvmodel.primal_dual.updates.EdgeUpdates`)."""
    return _norm((U - U_new) / sigma_col - D @ (W - W_new))


def make_step_rule(model: ModelDeclaration, step: Any) -> FixedSteps | ResidualBalancing:
    """The step rule for the ``step`` argument of ``solve_primal_dual``: ``None`` gives
    :class:`ResidualBalancing` (default parameters), a rule is used as given, a positive number
    ``c`` gives :class:`FixedSteps` of scale ``c`` (:func:`steps_from_scale`), ``(tau, sigma)``
    arrays (or a dict with those keys) give :class:`FixedSteps` after checking positivity and
    ``||Sigma^{1/2} D T^{1/2}|| <= 1`` (:func:`step_norm`); errors name the node or edge."""
    deg = model.degrees
    E = model.num_edges
    if step is None:
        return ResidualBalancing()
    if isinstance(step, ResidualBalancing):
        return step
    if isinstance(step, (int, float, np.floating, np.integer)) and not isinstance(step, bool):
        c = check_scalar(step, "step (the scale c)", min_val=0.0, include_boundaries="neither",
                         where="solve_primal_dual")
        tau, sigma = steps_from_scale(deg, E, c)
        return FixedSteps(tau, sigma, c)
    if isinstance(step, dict):
        step = (step.get("tau"), step.get("sigma"))
    if isinstance(step, (tuple, list)) and len(step) == 2:
        return _explicit_steps(model, step[0], step[1])
    raise ParameterError("step must be None (adaptive), a positive scale c, a "
                         "ResidualBalancing rule, or (tau, sigma) arrays; got "
                         f"{type(step).__name__}")


def _explicit_steps(model: ModelDeclaration, tau: Any, sigma: Any) -> FixedSteps:
    """Explicit steps ``(tau, sigma)``: positive (``tau`` at coupled nodes), and
    ``||Sigma^{1/2} D T^{1/2}|| <= 1`` by :func:`step_norm`; errors name the node or edge."""
    deg = model.degrees
    tau = check_vector(tau, "step tau", model.num_nodes)
    sigma = check_vector(sigma, "step sigma", model.num_edges)
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
