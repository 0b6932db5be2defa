"""Node updates PU (32) of Algorithm 1, grouped for vectorized execution.

The primal update of node ``i`` is the proximal map of its loss with its constraints,

    PU_i(v) = argmin_z  L_i(z) + eta_i ||z||_1 + kappa_i ||z||^2 + iota_{C_i}(z)
                        + ||z - v||^2 / (2 tau_i),                                    (32)

a function of the node's own loss, constraints and step ``tau_i`` only.  For speed the nodes
are partitioned into :class:`NodeGroup` objects that evaluate PU for many nodes at once:

* :class:`BatchProxGroup` -- nodes of one library loss class with an exact vectorized prox
  (:meth:`gtvmodel.terms.losses.LossBatch.prox`), composed with the exact projection onto their
  library constraints where the composition is exact, or, for data fits with ``l1`` or box
  constraints, with the regularizer and the box inside the prox
  (:class:`gtvmodel.terms.composite.CompositeProxBatch`); which nodes a batch takes is decided
  by the node-update strategies (:class:`NodeUpdateStrategy`, tried in the order of
  :data:`STRATEGIES` by :func:`plan`);
* :class:`CvxpyProxGroup` -- the general path: one DPP-parametrized CVXPY problem (built once;
  Parameters ``a_i = 1/(2 tau_i)`` and ``b_i = v_i / tau_i``, since
  ``||z - v||^2/(2 tau) = a ||z||^2 - b^T z + const``) over a group of nodes, compiled with
  :func:`gtvmodel.duality.compile.compile_nodes` from the group's node structure so that library
  losses are stacked exactly as in the exact solver, and symbolic losses/constraints are used
  as given.
  The prox problems of different nodes are independent, so one solve of the group problem is
  one PU per node; ``batch=False`` gives one problem per node instead (what a node would run
  on its own device);
* :class:`IsolatedGroup` -- nodes without edges (``deg = 0``) are uncoupled: their weights are
  ``argmin L_i`` over ``C_i`` (docs/conventions.md), computed once.

**Inexactness schedule of the CVXPY path** (docs/conventions.md: errors must be summable).
Iteration ``k`` solves with Clarabel tolerances ``eps_k = max(eps_min, eps_0 / (k + 1)^2.5)``
(``tol_gap_abs = tol_gap_rel = eps_k``, ``tol_feas = eps_k / 10``, ``tol_ktratio =
min(1e-6, eps_k)``) with ``eps_0 = 1e-4``, ``eps_min = 1e-13``.  The prox objective is
``1/tau_i``-strongly convex, so an objective error ``eps`` moves the point by at most
``sqrt(2 tau_i eps)``, which is ``O(k^-1.25)``: summable.  From ``k ~ 4000`` on the floor
``eps_min`` is reached and the updates are exact to solver precision (measured: the CVXPY path
agrees with the exact fast paths to 1e-8, exponential-cone (logistic) problems included; the
solver's own "almost solved" status is accepted, never an infeasible or failed one).
Clarabel has no warm start, so each solve starts cold; the problem itself is canonicalized
only once.  With Clarabel (the default) the group's problem is canonicalized by CVXPY once
*without* the prox terms and re-solved by Clarabel directly (:class:`_DirectClarabel`): the
prox terms only change the diagonal of ``P`` and the linear term ``q`` at the node variables'
columns, so each iteration is one Clarabel data update and solve, without CVXPY's per-solve
parameter application (measured: about 6x less wall time per update on paper 001 VI-A).  Groups
whose losses contain CVXPY Parameters keep CVXPY's own DPP re-solve.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import cvxpy as cp
import numpy as np

from .. import _xp
from .._solver import run_solver
from .._validate import check_option
from ..declaration import ModelDeclaration
from ..duality.compile import compile_nodes, find_infeasible_nodes
from ..errors import InfeasibleError, SolverError
from .strategies import (
    STRATEGIES,
    BatchProxGroup,
    CompositeProx,
    ExactProx,
    IsotropicProx,
    NodeGroup,
    NodeUpdateStrategy,
    SmoothCompositeProx,
    strategy_key,
)

#: The node-update paths :func:`plan` (and ``solve_primal_dual(prox=)``) accept.
PROX_OPTIONS = ("auto", "cvxpy")

__all__ = [
    "NodeGroup",
    "BatchProxGroup",
    "CvxpyProxGroup",
    "IsolatedGroup",
    "NodeUpdates",
    "NodeUpdateStrategy",
    "IsotropicProx",
    "ExactProx",
    "CompositeProx",
    "SmoothCompositeProx",
    "STRATEGIES",
    "plan",
    "cvxpy_tolerance",
]

#: Inexactness schedule of the CVXPY path: eps_k = max(EPS_MIN, EPS_0 / (k + 1)**EPS_POWER).
EPS_0, EPS_MIN, EPS_POWER = 1e-4, 1e-13, 2.5


def cvxpy_tolerance(k: int) -> float:
    """Solver tolerance ``eps_k`` of the CVXPY path at iteration ``k`` (summable errors)."""
    return max(EPS_MIN, EPS_0 / (k + 1.0) ** EPS_POWER)


class CvxpyProxGroup(NodeGroup):
    """The general path of PU (32): one parametrized CVXPY problem for the group's nodes.

    Built once; every call only sets the Parameters ``a = 1/(2 tau)`` and ``b = v / tau`` and
    re-solves with the tolerance :func:`cvxpy_tolerance` of the iteration (DPP: no
    re-canonicalization).  ``prox=False`` builds ``argmin L_i`` over ``C_i`` instead (for
    isolated nodes).
    """

    kind = "cvxpy"

    def __init__(self, model: ModelDeclaration, nodes: np.ndarray, prox: bool = True,
                 solver: str = "CLARABEL"):
        self.nodes = np.asarray(nodes, dtype=np.int64)
        self.model = model
        self.labels = [model.nodes[int(i)] for i in self.nodes]
        self._singles: list[CvxpyProxGroup] | None = None
        self.solver = solver
        t0 = time.perf_counter()
        self.W, loss, constraints = compile_nodes(model, self.nodes)
        g, d = len(self.nodes), model.dim
        objective = loss
        if prox:
            self.a: Any = cp.Parameter(g, nonneg=True, name="inv_2tau")
            self.b: Any = cp.Parameter((g, d), name="v_over_tau")
            objective = (objective
                         + cp.sum(cp.multiply(self.a, cp.sum(cp.square(self.W), axis=1)))
                         - cp.sum(cp.multiply(self.b, self.W)))
        else:
            self.a = self.b = None
            # keep W in the problem even where no loss or constraint mentions it (its value
            # is then whatever the solver returns, e.g. 0 for an isolated zero-loss node)
            objective = objective + cp.sum(cp.multiply(0.0, self.W))
        self.problem = cp.Problem(cp.Minimize(objective), constraints)
        self.solves = 0
        self.solve_time = 0.0
        self.direct: _DirectClarabel | None = None
        if prox and solver == "CLARABEL":
            base = cp.Problem(cp.Minimize(loss + cp.sum(cp.multiply(0.0, self.W))),
                              constraints)
            self.direct = _DirectClarabel.build(base, self.W)
        self.build_time = time.perf_counter() - t0

    def _solve(self, eps: float | None) -> np.ndarray:
        """One solve of the group's problem (``eps=None``: gtvmodel's reference tolerances
        with their fallback ladder, :func:`gtvmodel._solver.run_solver`)."""
        opts = ({"tol_gap_abs": eps, "tol_gap_rel": eps, "tol_feas": eps / 10.0,
                 "tol_ktratio": min(1e-6, eps)}
                if self.solver == "CLARABEL" and eps is not None else {})
        what = self._what()
        t0 = time.perf_counter()
        try:
            run_solver(self.problem, self.solver, opts, False, True, what)
        finally:
            self.solve_time += time.perf_counter() - t0
            self.solves += 1
        status = self.problem.status
        if status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
            # a solver's infeasibility claim on a badly scaled problem can be spurious: only a
            # feasibility problem over the constraints alone may name nodes as infeasible
            self._raise_infeasible_or(SolverError(
                f"{what}: {self.solver} reports {status!r}, but the node constraints are "
                "feasible (a numerical failure on a badly scaled problem)", status=status,
                solver=self.solver))
        if self.W.value is None or not np.isfinite(self.W.value).all():
            raise SolverError(f"{what}: the solver returned no finite point",
                              status=status, solver=self.solver)
        return np.asarray(self.W.value, dtype=float)

    def _raise_infeasible_or(self, exc: SolverError) -> None:
        """Raise :class:`InfeasibleError` naming the group's nodes whose constraints (with
        their losses' domains) really have no feasible point, else ``exc``."""
        bad = find_infeasible_nodes(self.model, self.nodes)
        if bad:
            raise InfeasibleError(
                f"{self._what()}: the constraints of node(s) {', '.join(map(repr, bad))} have "
                "no feasible point") from None
        raise exc

    def update(self, V: np.ndarray, tau: np.ndarray, k: int, W_prev: np.ndarray) -> np.ndarray:
        """PU (32) of the group's nodes with the tolerance ``eps_k`` of iteration ``k``
        (:func:`cvxpy_tolerance`): Clarabel re-solved directly where it can be, else CVXPY's
        DPP re-solve with ``a = 1/(2 tau)``, ``b = v / tau``; node by node if that fails."""
        if self.direct is not None:
            t0 = time.perf_counter()
            try:
                W = self.direct.prox(V, tau, cvxpy_tolerance(k), self._what())
            except SolverError as exc:
                W = self._per_node(V, tau, k, W_prev, exc)
            finally:
                self.solve_time += time.perf_counter() - t0
                self.solves += 1
            return W
        self.a.value = 0.5 / tau
        self.b.value = V / tau[:, None]
        try:
            return self._solve(cvxpy_tolerance(k))
        except SolverError as exc:
            return self._per_node(V, tau, k, W_prev, exc)

    def _per_node(self, V: np.ndarray, tau: np.ndarray, k: int, W_prev: np.ndarray,
                  exc: SolverError) -> np.ndarray:
        """Fallback when the group's solve fails: every node's PU on its own (each problem
        then has one node's scale only); a node that still fails is named in the error, and
        called infeasible only if its constraints are."""
        if len(self.nodes) == 1:
            self._raise_infeasible_or(exc)
        if self._singles is None:
            self._singles = [CvxpyProxGroup(self.model, self.nodes[j:j + 1],
                                            solver=self.solver)
                             for j in range(len(self.nodes))]
        W = np.empty_like(V)
        for j, single in enumerate(self._singles):
            W[j:j + 1] = single.update(V[j:j + 1], tau[j:j + 1], k, W_prev[j:j + 1])
        return W

    def _what(self) -> str:
        return (f"node update PU (32) at node(s) {', '.join(map(repr, self.labels[:5]))}"
                + (" ..." if len(self.labels) > 5 else ""))


class _DirectClarabel:
    """The CVXPY path's prox problems re-solved by Clarabel directly on CVXPY's conic data.

    CVXPY canonicalizes the group's problem ``min sum_i L_i(z_i) s.t. z_i in C_i`` once
    (``min 1/2 x^T P x + q^T x  s.t.  A x + r = b, r in K``, Clarabel's form); the node
    variables are a block of ``x`` (``var_id_to_col``, column-major), so the prox terms
    ``||z_i - v_i||^2 / (2 tau_i) = 1/2 z_i^T (I / tau_i) z_i - (v_i / tau_i)^T z_i + const``
    only add ``1/tau_i`` to the diagonal of ``P`` and ``-v_i/tau_i`` to ``q`` at those columns.
    Each iteration updates ``q`` (and ``P`` when the steps change) in one Clarabel solver object
    and re-solves: the same problem CVXPY would solve, without CVXPY's per-solve parameter
    application and solver set-up (about 70 % of a CVXPY re-solve at this size).  Used when the
    group problem has no CVXPY Parameters of the user's (their values would be baked in).
    """

    def __init__(self, P0: Any, q0: np.ndarray, A: Any, b: np.ndarray, cones: Any,
                 cols: np.ndarray):
        self.P0, self.q0, self.A, self.b, self.cones, self.cols = P0, q0, A, b, cones, cols
        self.solver: Any = None
        self.tau: np.ndarray | None = None
        self._P0full = None

    @classmethod
    def build(cls, problem: cp.Problem, W: cp.Variable) -> _DirectClarabel | None:
        import scipy.sparse as sp

        if problem.parameters():
            return None
        try:
            from cvxpy.reductions.solvers.conic_solvers.clarabel_conif import (
                dims_to_solver_cones,
            )

            data, _, _ = problem.get_problem_data(cp.CLARABEL)
            col = data["param_prob"].var_id_to_col[W.id]
        except Exception:  # an unexpected CVXPY layout: keep the CVXPY path
            return None
        nv = int(np.asarray(data["c"]).size)
        P0 = sp.csc_matrix(data["P"]) if "P" in data else sp.csc_matrix((nv, nv))
        g, d = W.shape
        cols = int(col) + np.arange(g)[:, None] + g * np.arange(d)[None, :]  # column-major
        return cls(sp.triu(P0).tocsc(), np.asarray(data["c"], dtype=float).ravel(),
                   sp.csc_matrix(data["A"]), np.asarray(data["b"], dtype=float).ravel(),
                   dims_to_solver_cones(data["dims"]), cols)

    def _settings(self, eps: float) -> Any:
        import clarabel

        settings = clarabel.DefaultSettings()
        settings.verbose = False
        settings.presolve_enable = False  # keeps data updates allowed
        settings.tol_gap_abs = settings.tol_gap_rel = eps
        settings.tol_feas = eps / 10.0
        settings.tol_ktratio = min(1e-6, eps)
        return settings

    def prox(self, V: np.ndarray, tau: np.ndarray, eps: float, what: str) -> np.ndarray:
        """PU (32) for the group; raises :class:`SolverError` with Clarabel's status when
        neither the incremental solve nor the rescaled re-solve (:meth:`_robust`) succeeds.

        Infeasibility is never concluded here: a strongly convex prox problem over feasible
        constraints can still be reported (almost) primal or dual infeasible when its data
        span many orders of magnitude (``v / tau ~ 1e18``), so the status is raised as
        ``SolverError(status=...)`` and :class:`CvxpyProxGroup` decides, by a separate
        feasibility problem over the nodes' constraints alone, whether they are infeasible.
        """
        import clarabel
        import scipy.sparse as sp

        settings = self._settings(eps)
        q = self.q0.copy()
        np.subtract.at(q, self.cols.ravel(), (V / tau[:, None]).ravel())
        P = None
        if self.tau is None or not np.array_equal(tau, self.tau):
            diag = np.zeros(self.q0.size)
            diag[self.cols.ravel()] = np.repeat(1.0 / tau, self.cols.shape[1])
            P = (self.P0 + sp.diags(diag, format="csc")).tocsc()
            P.sort_indices()
            self.tau = tau.copy()
        if self.solver is None:
            self.solver = clarabel.DefaultSolver(P, q, self.A, self.b, self.cones, settings)
        elif P is not None:
            self.solver.update(P=P, q=q, settings=settings)
        else:
            self.solver.update(q=q, settings=settings)
        sol = self.solver.solve()
        status = str(sol.status)
        if status in ("Solved", "AlmostSolved"):
            W = np.asarray(sol.x, dtype=float)[self.cols]
            if np.isfinite(W).all():
                return W
            status = "non-finite point"
        W, status2 = self._robust(V, tau, eps)
        if W is not None:
            return W
        raise SolverError(f"{what}: Clarabel stopped with status {status!r} (and {status2!r} "
                          "on the re-solve shifted to v and scaled by tau); the prox problem "
                          "is numerically too hard at this step size / scale",
                          status=status2, solver="CLARABEL")

    def _robust(self, V: np.ndarray, tau: np.ndarray, eps: float
                ) -> tuple[np.ndarray | None, str]:
        """A fresh solve of PU (32) in the shifted variable ``y = z - v`` with the objective
        multiplied by ``tau`` (Clarabel's conic data, so no re-canonicalization):
        ``min tau L(v + y) + ||y||^2 / 2`` -- the prox term then has unit curvature and no
        linear term of size ``|v| / tau``, which is what makes the incremental solve fail on
        badly scaled instances.  Returns ``(W, status)``, ``W`` None on failure."""
        import clarabel
        import scipy.sparse as sp

        P0full = self._P0full
        if P0full is None:
            P0full = self._P0full = (self.P0 + sp.triu(self.P0, 1).T).tocsr()
        x_s = np.zeros(self.q0.size)
        x_s[self.cols.ravel()] = V.ravel()
        # scale the objective by tau per node on its own columns is not separable in P0's
        # auxiliary columns, so use one factor: the median step (exact minimizer unchanged)
        gamma = float(np.median(tau))
        q = gamma * (self.q0 + P0full @ x_s)
        diag = np.zeros(self.q0.size)
        diag[self.cols.ravel()] = np.repeat(gamma / tau, self.cols.shape[1])
        P = (gamma * self.P0 + sp.diags(diag, format="csc")).tocsc()
        P.sort_indices()
        b = self.b - self.A @ x_s
        settings = self._settings(eps)
        status = "unsolved"
        ladder = sorted({eps, max(eps, 1e-8), max(eps, 1e-6)})
        for tol in ladder:
            settings.tol_gap_abs = settings.tol_gap_rel = tol
            settings.tol_feas = tol / 10.0
            sol = clarabel.DefaultSolver(P, q, self.A, b, self.cones, settings).solve()
            status = str(sol.status)
            if status in ("Solved", "AlmostSolved"):
                W = V + np.asarray(sol.x, dtype=float)[self.cols]
                if np.isfinite(W).all():
                    return W, status
                status = "non-finite point"
        return None, status


@dataclass
class IsolatedGroup(NodeGroup):
    """Nodes with ``deg(i) = 0``: ``w_i = argmin_{C_i} L_i``, solved once (docs/conventions.md).

    If the minimum is not attained (e.g. a loss unbounded below) the solver's status is raised
    as :class:`SolverError` naming the nodes.  A minimizer that is not unique (e.g. a zero loss)
    is whichever one the solver returns.
    """

    model: Any
    nodes: np.ndarray
    values: np.ndarray | None = field(default=None, repr=False)
    kind: str = "isolated"
    array_api: bool = True

    def update(self, V: Any, tau: Any, k: int, W_prev: Any) -> np.ndarray:
        """``argmin_{C_i} L_i`` for the group's nodes (``V``, ``tau`` are ignored: the nodes are
        not coupled), solved on the first call (in numpy; moved beside a tensor ``V``)."""
        if self.values is None:
            # once per model version (model cache slot "pd_groups"), not once per run
            done = self.model.cache.get_or_build("pd_groups", dict)
            key = ("isolated", self.nodes.tobytes())
            if key not in done:
                group = CvxpyProxGroup(self.model, self.nodes, prox=False)
                # the reference tolerances with the fallback ladder (a fixed 1e-13 failed on
                # badly scaled isolated nodes instead of falling back)
                done[key] = group._solve(None)
                done[key].setflags(write=False)
            self.values = done[key]
        if V is None or _xp.is_numpy(V):
            return self.values.copy()  # the model's cached array stays unseen by the run
        return _xp.cached_like(self, "values", np.array(self.values), V)  # (writable)


def plan(model: ModelDeclaration, prox: str = "auto", batch_cvxpy: bool = True) -> list[NodeGroup]:
    """Partition the nodes into node-update groups.

    ``prox="auto"``: every node with edges goes to the first strategy of :data:`STRATEGIES`
    that accepts it, in this order: :class:`IsotropicProx` (quadratic and zero losses with a
    box, one ball or no constraints), :class:`ExactProx` (squared, logistic, Huber, hinge and
    absolute losses without ``l1`` or constraints), :class:`CompositeProx` (piecewise-quadratic
    data fits with ``l1``, a box and/or a 2- or 1-norm ball) and :class:`SmoothCompositeProx`
    (logistic losses with ``l1`` and/or a box); the nodes of one loss class one strategy
    accepted with the same constraint kind form one :class:`BatchProxGroup`.  Everything else
    (symbolic losses or constraints, softmax losses, logistic losses with a ball, data fits
    with a ``p``-norm ball, ``p`` not 1, 2 or inf) goes to the CVXPY path, as every node with
    edges does with ``prox="cvxpy"``.  Nodes with ``deg = 0`` form an :class:`IsolatedGroup`.
    ``batch_cvxpy=False`` builds one CVXPY problem per node.
    """
    check_option(prox, "prox", PROX_OPTIONS, where="plan")
    isolated, fast, general = _partition(model, prox)
    groups: list[NodeGroup] = []
    if isolated.size:
        groups.append(IsolatedGroup(model, isolated))
    groups.extend(_batch_group(model, key, idx) for key, idx in fast.items())
    if general.size:
        if batch_cvxpy:
            groups.append(CvxpyProxGroup(model, general))
        else:
            groups.extend(CvxpyProxGroup(model, general[j:j + 1]) for j in range(general.size))
    return groups


def _partition(model: ModelDeclaration, prox: str
               ) -> tuple[np.ndarray, dict[tuple, np.ndarray], np.ndarray]:
    """The node positions of :func:`plan`'s groups: ``(isolated, {(loss class, strategy,
    constraint kind): positions}, general)``, computed once per version of the model and
    ``prox`` (model cache slot ``"pd_plan"``: a lambda path re-plans nothing; the groups
    themselves, with their run state, are built anew for every run)."""
    plans = model.cache.get_or_build("pd_plan", dict)
    if prox not in plans:
        d = model.dim
        deg = model.degrees
        fast: dict[tuple, list[int]] = {}
        general: list[int] = []
        for i in np.flatnonzero(deg > 0).tolist():
            key = strategy_key(model.loss_at(i), model.constraints_at(i), d) \
                if prox == "auto" else None
            if key is None:
                general.append(i)
            else:
                fast.setdefault(key, []).append(i)
        part = (np.flatnonzero(deg == 0),
                {key: np.array(idx, dtype=np.int64) for key, idx in fast.items()},
                np.array(general, dtype=np.int64))
        for a in (part[0], *part[1].values(), part[2]):
            a.setflags(write=False)  # shared by every run of this model version
        plans[prox] = part
    return plans[prox]


def _batch_group(model: ModelDeclaration, key: tuple, idx: np.ndarray) -> BatchProxGroup:
    """The fast-path group of the nodes ``idx`` (``key``: loss class, strategy and constraint
    kind of :func:`~gtvmodel.primal_dual.strategies.strategy_key`): a new group (its own run
    state) over the group template of this model version, built once by the strategy's
    :meth:`~NodeUpdateStrategy.template` (model cache slot ``"pd_groups"``): the stacked
    losses and their data-derived factorizations
    (:meth:`~gtvmodel.terms.losses.LossBatch.shared`: Gram matrices, eigen-decompositions)
    are computed once per model version even when the group is not a whole structure batch
    (isolated nodes, nodes with constraints or of other loss classes beside it)."""
    templates: dict[tuple, tuple[np.ndarray, BatchProxGroup]] = \
        model.cache.get_or_build("pd_groups", dict)
    entry = templates.get(key)
    if entry is None or not (entry[0] is idx or np.array_equal(entry[0], idx)):
        cls, strategy, ckind = key
        entry = templates[key] = (idx, strategy.template(model, cls, ckind, idx))
    tmpl = entry[1]
    return BatchProxGroup(tmpl.batch.sibling(), tmpl.box, tmpl.ball, subset=tmpl.subset)


class NodeUpdates:
    """All node updates PU (32) of one iteration: ``W_new = PU(V)`` for every node.

    Vectorized execution over the groups of :func:`plan`; :meth:`node` evaluates one node's
    update on its own (the message-passing view: node ``i`` needs only ``v_i`` and ``tau_i``).
    """

    def __init__(self, model: ModelDeclaration, prox: str = "auto", batch_cvxpy: bool = True):
        t0 = time.perf_counter()
        self.model = model
        self.groups = plan(model, prox, batch_cvxpy)
        self._single: dict[int, CvxpyProxGroup] = {}
        self._group_of = np.empty(model.num_nodes, dtype=np.int64)
        self._pos_in = np.empty(model.num_nodes, dtype=np.int64)
        # rows of each group: a slice when its nodes are consecutive (no gather/scatter copies)
        self._rows: list[Any] = []
        for g, grp in enumerate(self.groups):
            self._group_of[grp.nodes] = g
            self._pos_in[grp.nodes] = np.arange(len(grp.nodes))
            nodes = grp.nodes
            contiguous = nodes.size and np.array_equal(nodes, np.arange(nodes[0],
                                                                        nodes[0] + nodes.size))
            # (a writable copy of the index: PyTorch warns on indexing with a read-only array)
            self._rows.append(slice(int(nodes[0]), int(nodes[0]) + nodes.size) if contiguous
                              else np.array(nodes))
        self.build_time = time.perf_counter() - t0

    def __call__(self, V: np.ndarray, tau: np.ndarray, k: int, W_prev: np.ndarray
                 ) -> np.ndarray:
        """``W_new = PU(V)`` (32) for all nodes (rows), steps ``tau``, iteration ``k`` (the
        CVXPY path's tolerance), previous weights ``W_prev`` (warm starts of Newton paths)."""
        if len(self.groups) == 1 and isinstance(self._rows[0], slice) \
                and self._rows[0] == slice(0, V.shape[0]):
            return self.groups[0].update(V, tau, k, W_prev)
        W = np.empty_like(V)
        for grp, rows in zip(self.groups, self._rows, strict=True):
            W[rows] = grp.update(V[rows], tau[rows], k, W_prev[rows])
        return W

    def prepare(self, tau: Any) -> None:
        """Every group's one-off data (factorizations, operators) for the steps ``tau``
        (``(n,)``, numpy or a tensor; :meth:`NodeGroup.prepare`): called by the run's set-up,
        so that iteration 1 costs what every later one does."""
        for grp, rows in zip(self.groups, self._rows, strict=True):
            grp.prepare(tau[rows])

    def node(self, i: int, v: np.ndarray, tau_i: float, k: int, w_prev: np.ndarray
             ) -> np.ndarray:
        """PU (32) of the single node at position ``i``."""
        grp = self.groups[self._group_of[i]]
        if isinstance(grp, IsolatedGroup):
            return grp.update(None, None, k, None)[self._pos_in[i]]
        if isinstance(grp, BatchProxGroup):
            alone = grp.single(int(self._pos_in[i]), self.model.num_nodes, self.model.dim)
            return alone.update(v[None], np.array([tau_i]), k, w_prev[None])[0]
        single = self._single.get(i)
        if single is None:  # the node's own DPP problem, built once
            single = self._single[i] = CvxpyProxGroup(self.model, np.array([i]))
        return single.update(v[None], np.array([tau_i]), k, w_prev[None])[0]

    def describe(self) -> dict[str, int]:
        """Number of nodes per path, e.g. ``{"squared": 30, "zero": 270}``; where a batched
        path could not certify an update exact and solved it by CVXPY instead, the number of
        such node updates so far under ``"cvxpy fallbacks"``."""
        out: dict[str, int] = {}
        fallbacks = 0
        for grp in self.groups:
            out[grp.kind] = out.get(grp.kind, 0) + len(grp.nodes)
            fallbacks += grp.fallbacks
        if fallbacks:
            out["cvxpy fallbacks"] = fallbacks
        return out
