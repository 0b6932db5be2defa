"""``solve_exact``: the primal problem (16) solved exactly and certified, by the first route of
an ordered list of strategies (:data:`ROUTES`) that accepts the model: the trivial answer, the
first-order route (Algorithm 1), SCS or Clarabel on one vectorized CVXPY problem (compiled by
:mod:`gtvmodel.solve.compile`), each with its flows (the multipliers of ``Z = D W``) and a
self-certificate (34) of the answer.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import cvxpy as cp
import numpy as np

from .._compat import scs_indirect_supported
from .._solver import DEFAULT_SOLVER_OPTIONS, FALLBACK_SOLVER_OPTIONS, check_solver, run_solver
from .._validate import check_bool, check_option, check_scalar
from ..certificates.certificate import certify as certify_fn
from ..declaration import ModelDeclaration
from ..errors import (
    AccuracyWarning,
    DataError,
    GTVError,
    InfeasibleError,
    ParameterError,
    SolverError,
)
from ..results import Labels, failed_result
from ..solution import Solution
from .compile import (
    PrimalProblem,
    compile_primal,
    data_overflow_message,
    find_infeasible_nodes,
    unbounded_nodes,
)
from .direct import direct_method, solve_direct
from .first_order import (
    FIRST_ORDER_ACCURACY,
    FIRST_ORDER_OPTIONS,
    METHODS,
    choose_route,
    problem_size,
    route_solution,
    solve_first_order,
)
from .polish import polish as polish_fn
from .polish import unsupported_reason

__all__ = ["solve_exact", "Route", "RouteRequest", "ROUTES", "select_routes", "iter_routes",
           "scs_accepts", "SCS_MIN_DEGREE", "SCS_MIN_SIZE", "SCS_INDIRECT_SIZE",
           "DEFAULT_ACCURACY", "SUCCESS_ACCURACY", "SCS_AIM", "RESOLVE_OPTIONS",
           "DEFAULT_SOLVER_OPTIONS", "FALLBACK_SOLVER_OPTIONS"]


#: Options of the re-solve that :func:`solve_exact` runs when its self-certificate misses the
#: requested accuracy (Clarabel only).  Clarabel's static KKT regularization (default ``1e-8``)
#: biases the solution of badly scaled problems (data spanning 1e-3..1e3, weights 1e-6..1e6):
#: the solver reports "optimal" while the objective is ~1e-6 relative off and the certified gap
#: is ~1e-3; with ``1e-10`` the certified gaps of those instances drop to 1e-8..1e-11
#: (``tests/test_robustness.py``).  Not the default, because a smaller regularization makes
#: some well-scaled solves fail (measured: ``1e-12`` reported a bounded problem unbounded).
RESOLVE_OPTIONS: dict[str, dict[str, Any]] = {
    "CLARABEL": {"static_regularization_constant": 1e-10, "max_iter": 1000},
}

#: The certified relative gap (34) that :func:`solve_exact` aims at by default
#: (``accuracy=None``): every route escalates (tighter tolerances, the full ladder) until its
#: certificate meets it or no tighter run is left.
DEFAULT_ACCURACY = 1e-10

#: The certified relative gap a call with the default ``accuracy`` needs for ``success``, the
#: re-solve with :data:`RESOLVE_OPTIONS` and the absence of an :class:`AccuracyWarning` (the
#: default of these before the routes aimed at :data:`DEFAULT_ACCURACY`; problems whose conic
#: solves stall, e.g. logistic losses near a relative gap of 1e-9, are not flagged).  A given
#: ``accuracy`` is both the aim and this threshold.
SUCCESS_ACCURACY = 1e-6


#: SCS's first run where the polish applies (the route then re-runs SCS warm-started at
#: :data:`DEFAULT_SOLVER_OPTIONS`'s 1e-9 if the polished answer misses the accuracy).  SCS's
#: iterates are projections onto the cones, so fused edge differences are exactly 0 long
#: before its residuals are small, and the polish reads the structure from them.  Measured on
#: the SBMs of ``benchmarks/bench_exact_routes.py`` (``Norm2``, load 15-16 on 2 cores): at
#: 1,000 nodes the polish certified 5.5e-13 from SCS at 1e-3 to 1e-6 alike (SCS solver time
#: 0.37 s at 1e-4, 0.94-1.00 s at 1e-5, 1.40-1.60 s at 1e-6, plus 0.7-0.9 s of SCS setup);
#: at 2,000 nodes the polish was rejected from 1e-4 (certified 1.7e-5) and certified 5.7e-13
#: from 1e-5 and 1e-6 (SCS 5.9 s and 7.5 s).  Every SCS run pays its setup again (CVXPY
#: starts SCS afresh, warm start or not), so a missed aim is costly: 1e-5.
SCS_AIM: dict[str, Any] = {"eps_abs": 1e-5, "eps_rel": 1e-5}

#: The problem size ``(n + |E|) d`` (:func:`gtvmodel.solve.first_order.problem_size`) from
#: which the SCS route runs SCS's indirect linear solver (conjugate gradients,
#: ``use_indirect=True``) instead of factorizing its KKT matrix once: the factorization's
#: fill grows fast on SBM-like graphs.  Measured through ``solve_exact(solver="SCS")`` on the
#: SBMs of ``benchmarks/bench_exact_routes.py`` (one run each, load 8-10 on 2 cores): at
#: 2,000 nodes (size 24,500, ``Norm2``) factorized 6.5 s (setup 2.0 s, iterations 3.6 s),
#: indirect 7.9 s (0.1 s, 7.2 s); at 3,500 nodes (43,122) 15.9 s (6.7 s, 7.6 s) against
#: 16.9 s (0.3 s, 14.6 s); at 5,000 nodes (61,456) 63.1 s (23.0 s, 36.6 s) against 28.1 s
#: (0.3 s, 21.4 s), and with ``Norm1`` 33.4 s against 16.4 s.
SCS_INDIRECT_SIZE = 50_000


@dataclass
class RouteRequest:
    """:func:`solve_exact`'s checked arguments, as every :class:`Route` reads them:
    ``accuracy`` is the certified relative gap aimed at, ``required`` the one ``success``
    needs (:data:`SUCCESS_ACCURACY` unless ``accuracy`` was given), ``given`` whether it was;
    ``aimed`` False (``method="interior"``) runs the conic solver's full ladder at once;
    ``handover`` (``method="auto"`` without a named solver) lets a route whose answer is not
    certified to ``required`` hand over to the next one instead of warning."""

    solver: str | None
    accept_inaccurate: bool
    verbose: bool
    certify: bool
    accuracy: float
    required: float
    given: bool
    raise_on_failure: bool
    threshold: int | None
    polish: bool
    opts: dict[str, Any] = field(default_factory=dict)
    aimed: bool = True
    handover: bool = False
    _facts: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def polish_reason(self, model: ModelDeclaration) -> str | None:
        """Why the polish does not apply (:func:`gtvmodel.solve.polish.unsupported_reason`,
        or ``polish=False``/``certify=False``); None if it does.  Computed once per call."""
        if "polish" not in self._facts:
            self._facts["polish"] = (
                "polish=False" if not self.polish else "certify=False" if not self.certify
                else unsupported_reason(model))
        return self._facts["polish"]


@dataclass(frozen=True)
class Route:
    """One strategy of :func:`solve_exact`: ``accepts(model, request)`` says why it applies
    (a reason) or None; ``run(model, request, reason)`` returns the :class:`Solution`, or
    None to decline after all (the next accepting route is tried)."""

    name: str
    accepts: Callable[[ModelDeclaration, RouteRequest], str | None]
    run: Callable[[ModelDeclaration, RouteRequest, str], Solution | None]


def solve_exact(model: ModelDeclaration, solver: str | None = None, *,
                accept_inaccurate: bool = False,
                verbose: bool = False, certify: bool = True, accuracy: float | None = None,
                raise_on_failure: bool = True, method: str = "auto",
                auto_threshold: int | None = None, polish: bool = True,
                **opts: Any) -> Solution:
    """Solve (16) to a certified accuracy; returns weights, flows ``u``, the certificate and
    timings.

    **Routes** (issues 16 and 28; :data:`ROUTES`, :func:`select_routes`).  With
    ``method="auto"`` (default) and no ``solver``, the answer comes from the first of these
    strategies that accepts the model (each says why in ``info["route_reason"]``; a conic
    route that fails hands over to the next accepting one, ``info["route_failures"]``):

    1. ``"zero"`` -- every node loss is stationary at ``w = 0`` (nodes without data) and there
       are no node constraints: ``W = 0`` with zero flows, kept when its certificate (34)
       proves it (then ``P* = 0``; ``Solution.solver`` is ``"ZERO"``).  Interior-point
       solvers fail on such problems when the capacities ``lambda A_e`` are large (measured:
       Clarabel raised on 7 data-less nodes with ``NormP(1.5)`` and ``lambda A_e`` up to
       2.5e10).
    2. ``"direct"`` -- the exact path and tree algorithms of :mod:`gtvmodel.solve.direct`
       (``Norm1`` penalty, diagonal quadratic node terms such as ``QuadraticLoss`` or no
       data, no node constraints, a forest): weights and flows exact up to rounding, kept
       when their certificate meets the accuracy (:func:`gtvmodel.solve.direct.solve_direct`).
    3. ``"first_order"`` -- Algorithm 1 (:mod:`gtvmodel.solve.first_order`) when the problem's
       size ``(n + |E|) d`` exceeds ``auto_threshold`` (default
       :data:`gtvmodel.solve.first_order.AUTO_THRESHOLD`), where the interior-point
       factorization takes minutes and gigabytes.
    4. ``"scs"`` -- SCS (:data:`SCS_AIM` first, then warm-started at 1e-9) where the polish
       applies (library losses with a Hessian, ``Norm2``/``Norm1``/``SquaredNorm2``, no node
       constraints), the graph is not grid-like (mean degree above :data:`SCS_MIN_DEGREE`)
       and not small (``(n + |E|) d >= SCS_MIN_SIZE``): measured faster than Clarabel there
       (see :func:`scs_accepts`); from :data:`SCS_INDIRECT_SIZE` on with SCS's indirect
       linear solver.
    5. ``"clarabel"`` -- Clarabel, aiming at ``accuracy`` (the loosest level of its ladder
       at most ``accuracy``), then at the full ladder (:data:`DEFAULT_SOLVER_OPTIONS`, 1e-13
       first, with :data:`FALLBACK_SOLVER_OPTIONS`) if the certificate misses ``accuracy``.

    ``method="interior"`` takes Clarabel (or ``solver``) alone with its full ladder at once
    (1e-13 first: the reference solve of earlier versions), ``method="first_order"``
    Algorithm 1 alone; a named ``solver`` (``"CLARABEL"``, ``"SCS"``, ``"OSQP"``: quadratic
    programs only) takes that solver's route alone; ``opts`` then override
    :data:`DEFAULT_SOLVER_OPTIONS` (for the first-order route they are Algorithm 1's:
    ``max_iter``, ``warm_start``, ``step``, ...).  Tolerances given in ``opts`` are used as
    given (one run, Clarabel's fallback ladder off).  ``info["route"]`` (``"zero"``, ``"direct"``,
    ``"first_order"``, ``"scs"``, ``"clarabel"``, or the named solver's name in lower case)
    and ``info["route_reason"]`` say which route answered and why; ``info["tolerances"]``
    holds the options of the accepted solver run.

    **Accuracy.**  ``accuracy`` (default :data:`DEFAULT_ACCURACY` = 1e-10; 1e-9 on the
    first-order route, :data:`gtvmodel.solve.first_order.FIRST_ORDER_ACCURACY`) is the
    certified relative gap (34) the routes aim at: a conic route's first run is aimed at it
    (SCS's at :data:`SCS_AIM`, from which the polish starts), and if its certificate misses it
    the route escalates (SCS to 1e-9, Clarabel to its full ladder).  A given ``accuracy`` is
    also what ``success`` needs; with the default, ``success`` needs
    :data:`SUCCESS_ACCURACY` (1e-6), so that problems whose solvers stall above 1e-10
    (logistic losses) are not flagged.

    **Failures.**  An inaccurate solver status raises :class:`~gtvmodel.errors.SolverError`
    unless ``accept_inaccurate=True``; infeasible node constraints raise
    :class:`~gtvmodel.errors.InfeasibleError` naming the nodes; an unbounded problem raises
    :class:`~gtvmodel.errors.SolverError` naming the nodes whose losses are unbounded below.
    With ``raise_on_failure=False`` these outcomes are returned instead, as CVXPY users read
    them: a :class:`~gtvmodel.solution.Solution` whose ``status`` is the failure's
    (``"infeasible"``, ``"unbounded"``, ``"solver_error"``, ...), ``success`` False,
    ``weights``/``flows`` None and ``info["error"]`` the message (bad arguments and bad data
    still raise).

    **Self-certificate.**  A solver's "optimal" is not proof: on badly scaled problems Clarabel
    reported "optimal" with the objective 4e-8 relative above the optimum and a certified gap
    of ~1e-3 (``tests/test_robustness.py``).  With ``certify=True`` (default) the answer is
    certified with :func:`gtvmodel.certificates.certificate.certify` (the solver's flows,
    repaired to a dual-feasible point) and the
    :class:`~gtvmodel.certificates.certificate.Certificate` is ``Solution.certificate``
    (``info["certified_gap"]``, ``info["certified_relative_gap"]``).  If the certified relative
    gap exceeds the required accuracy, Clarabel's answer is re-solved once with
    :data:`RESOLVE_OPTIONS` (the better certified answer is kept), and if it still exceeds it
    while the status is ``"optimal"``, an :class:`~gtvmodel.errors.AccuracyWarning` says to
    what the solution is certified (an accepted ``"optimal_inaccurate"`` status already says
    the answer is inaccurate; ``Solution.success`` is False then too).  ``certify=False``
    skips it (and the polish, and the escalation: one run at the aimed tolerances, or the full
    ladder where nothing else is aimed at).

    **Polish** (issue 17; :mod:`gtvmodel.solve.polish`).  With ``polish=True`` (default) the
    certified conic answer is polished: Newton's method on (16) restricted to its fused
    clusters (and ``l1`` zeros), with flows meeting the node optimality conditions on them;
    the polished point replaces the answer only when its certified gap (34) is at most the
    solver's and its objective is not larger.  It applies to library losses with a Hessian
    (squared, quadratic, logistic, Huber, zero; ``l1``/``l2`` regularizers),
    ``Norm2``/``Norm1``/``SquaredNorm2`` penalties and models without node constraints, and
    is skipped otherwise; ``info["polish"]`` says what happened (``status`` ``"applied"``,
    ``"rejected"`` or ``"skipped"``, ``reason``, ``newton_iterations``,
    ``gap_before``/``gap_after``) and ``timings["polish"]`` what it cost.

    Parameters
    ----------
    model : ModelDeclaration
        The GTV minimization problem (16) (a :class:`~gtvmodel.GTVModel` or any declaration
        of losses ``L_i``, constraints, penalty ``phi``, edge weights ``A_e`` and ``lambda``).
    solver : str, optional
        A CVXPY solver name (``"CLARABEL"``, ``"SCS"``, ``"OSQP"``) to take that solver's
        route alone; None (default): the routes above.
    accept_inaccurate : bool
        Accept an ``"optimal_inaccurate"`` status (``success`` is then False) instead of
        raising :class:`~gtvmodel.errors.SolverError`.
    verbose : bool
        Pass ``verbose=True`` to the solver.
    certify : bool
        Certify the answer (34) and re-solve or escalate when it misses ``accuracy``
        ("Self-certificate" above); False: one run, no certificate, no polish.
    accuracy : float, optional
        The certified relative gap (34) to aim at and to require for ``success`` (> 0);
        None: :data:`DEFAULT_ACCURACY` aimed at, :data:`SUCCESS_ACCURACY` required
        ("Accuracy" above).
    raise_on_failure : bool
        True (default): infeasible, unbounded or failed solves raise; False: they are
        returned as a failed :class:`~gtvmodel.solution.Solution` ("Failures" above).
    method : {"auto", "interior", "first_order"}
        ``"auto"``: the routes above; ``"interior"``: Clarabel (or ``solver``) with its full
        ladder; ``"first_order"``: Algorithm 1 alone.
    auto_threshold : int, optional
        Size ``(n + |E|) d`` above which ``"auto"`` takes the first-order route (``>= 0``;
        None: :data:`gtvmodel.solve.first_order.AUTO_THRESHOLD`).
    polish : bool
        Polish the certified conic answer by Newton's method on its fused clusters
        ("Polish" above).

    Returns
    -------
    Solution
        Weights ``w`` ``(n, d)``, flows ``u`` ``(|E|, d)``, the objective ``P(w)``, the
        :class:`~gtvmodel.certificates.certificate.Certificate` (with ``certify=True``),
        timings and ``info`` (``route``, ``route_reason``, ``tolerances``, ``polish``, ...).
        A conic route's timings: ``compile`` (the CVXPY problem and its canonicalization),
        ``solve`` (the solver's own seconds), ``solver_setup`` (what those leave out: SCS's
        factorization, CVXPY's unpacking of the answer), ``certificate``, ``polish``.

    Raises
    ------
    ParameterError
        A bad option, named (``solver`` not a string, ``accept_inaccurate``, ``verbose``,
        ``certify``, ``raise_on_failure`` or ``polish`` not a bool, ``accuracy`` not
        positive, an unknown ``method``, a negative ``auto_threshold`` once the size rule
        is consulted: ``method="auto"``, no ``solver``).
    SolverError
        ``solver`` not installed; the solver failed, stopped inaccurate (without
        ``accept_inaccurate``) or found the problem unbounded (naming the nodes whose
        losses are unbounded below) -- unless ``raise_on_failure=False``.
    InfeasibleError
        Node constraints without a feasible point (naming the nodes), unless
        ``raise_on_failure=False``.

    Warns
    -----
    AccuracyWarning
        The answer is certified only to a looser accuracy than required, or Clarabel was
        accepted only at its own default tolerances.

    Examples
    --------
    Two nodes with data, ``L_i(w) = ||w - a_i||^2``, joined through a node without data by the
    network Lasso penalty ``phi = ||.||_2`` at ``lambda = 0.5``:

    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), dim=1, lam=0.5)
    >>> model.set_loss(0, gm.QuadraticLoss([1.0]))
    >>> model.set_loss(2, gm.QuadraticLoss([-1.0]))
    >>> sol = gm.solve_exact(model)
    >>> sol.status, sol.success, round(sol.objective, 4)
    ('optimal', True, 0.875)
    >>> np.allclose(sol.weights.ravel(), [0.75, 0.0, -0.75], atol=1e-6)
    True
    >>> sol.info["route"], sol.info["certified_relative_gap"] <= 1e-10
    ('clarabel', True)

    The flows ``u_e`` (the multipliers of ``Z = D W``) sit at the capacity ``lambda A_e = 0.5``,
    and ``-(D^T u)_0 = -0.5 = grad L_0(0.75)`` (optimality (23)); the self-certificate (34)
    proves the answer:

    >>> np.round(sol.flows.ravel(), 4)
    array([0.5, 0.5])
    >>> sol.certificate.success, sol.certificate.gap < 1e-6
    (True, True)
    """
    polish = check_bool(polish, "polish", "solve_exact")
    method = check_option(method, "method", METHODS, where="solve_exact")
    check_bool(raise_on_failure, "raise_on_failure", "solve_exact")
    given = accuracy is not None
    aim = accuracy if given else (FIRST_ORDER_ACCURACY if method == "first_order"
                                  else DEFAULT_ACCURACY)
    aim = _check_args(solver, accept_inaccurate, verbose, certify, aim)
    request = RouteRequest(solver=solver, accept_inaccurate=accept_inaccurate, verbose=verbose,
                           certify=certify, accuracy=aim,
                           required=aim if given else max(aim, SUCCESS_ACCURACY), given=given,
                           raise_on_failure=raise_on_failure, threshold=auto_threshold,
                           polish=polish, opts=dict(opts), aimed=method == "auto",
                           handover=method == "auto" and solver is None)
    failures: list[str] = []
    error: GTVError | None = None
    for route, reason in iter_routes(model, request, method):  # lazily: only what runs
        try:
            sol = route.run(model, request, reason)
        except (InfeasibleError, SolverError) as exc:
            error = exc
            if _hand_over(model, exc):
                failures.append(f"{route.name}: {exc}")
                continue
            break
        if sol is None:  # declined after all
            continue
        if failures:
            sol.info["route_failures"] = failures
        return sol
    assert error is not None  # the last route (Clarabel) never declines
    if raise_on_failure:
        raise error
    return failed_result(Solution, Labels(model.nodes, model.edges), error,
                         check_solver(solver), objective=math.nan, success=False)


def select_routes(model: ModelDeclaration, request: RouteRequest,
                  method: str = "auto") -> list[tuple[Route, str]]:
    """The routes :func:`solve_exact` tries, in order, with the reason each accepts the model
    (its docstring, "Routes"): ``method="first_order"`` Algorithm 1 alone,
    ``method="interior"`` or a named ``solver`` that solver's conic route alone, ``"auto"``
    every route of :data:`ROUTES` that accepts the model.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> from gtvmodel.solve.exact import RouteRequest, select_routes
    >>> model = gm.GTVModel(nx.path_graph(3), dim=1, lam=0.5)
    >>> request = RouteRequest(solver=None, accept_inaccurate=False, verbose=False,
    ...                        certify=True, accuracy=1e-10, required=1e-6, given=False,
    ...                        raise_on_failure=True, threshold=None, polish=True)
    >>> [route.name for route, _ in select_routes(model, request)]  # no data: W = 0
    ['zero', 'clarabel']
    >>> model.set_loss(0, gm.QuadraticLoss([1.0]))
    >>> [route.name for route, _ in select_routes(model, request)]
    ['clarabel']
    """
    return list(iter_routes(model, request, method))


def iter_routes(model: ModelDeclaration, request: RouteRequest,
                method: str = "auto") -> Iterator[tuple[Route, str]]:
    """:func:`select_routes` lazily: a route's ``accepts`` is asked only once the routes
    before it declined or failed."""
    if method == "first_order":
        yield FIRST_ORDER_ROUTE, "method='first_order' requested"
        return
    if request.solver is not None or method == "interior":
        name = check_solver(request.solver, "solve_exact")
        yield _conic_route(name), (f"solver={request.solver!r} requested"
                                   if request.solver is not None
                                   else "method='interior' requested")
        return
    for route in ROUTES:
        reason = route.accepts(model, request)
        if reason is not None:
            yield route, reason


def _hand_over(model: ModelDeclaration, exc: GTVError) -> bool:
    """Whether a failed route hands over to the next one: not when the failure is explained
    by the model (infeasible constraints, losses unbounded below, overflowing data)."""
    if isinstance(exc, (InfeasibleError, DataError)):
        return False
    return not (exc.status in (cp.UNBOUNDED, cp.UNBOUNDED_INACCURATE) and unbounded_nodes(model))


# ------------------------------------------------------------------ route "zero"
def _zero_accepts(model: ModelDeclaration, request: RouteRequest) -> str | None:
    """Every node loss stationary at 0 (its batch gradient is exactly 0 there), no symbolic
    losses, no node constraints, no ``l1`` regularizers (not differentiable at 0)."""
    st = model.structure()
    if st.symbolic or st.constrained.size or st.l1.any():
        return None
    zero = np.zeros((model.num_nodes, model.dim))
    try:
        if any(np.any(b.gradients(zero) != 0.0) for b in st.batches):
            return None
    except (GTVError, ValueError, FloatingPointError):
        return None
    return ("every node loss is stationary at w = 0 and there are no node constraints: "
            "W = 0 with zero flows, if certified")


def _zero_run(model: ModelDeclaration, request: RouteRequest, reason: str) -> Solution | None:
    """``W = 0``, ``U = 0`` with its certificate (34); None (declined) unless it meets the
    accuracy."""
    t0 = time.perf_counter()
    W = np.zeros((model.num_nodes, model.dim))
    U = np.zeros((model.num_edges, model.dim))
    cert = certify_fn(model, W, U, tol=request.accuracy, project="never")
    if not cert.success_at(request.accuracy):
        return None
    info = {"lam": model.lam, "route": "zero", "route_reason": reason, "tolerances": None,
            "certified_gap": cert.gap, "certified_relative_gap": cert.relative_gap,
            "accuracy": request.accuracy,
            "polish": {"status": "skipped", "reason": "the zero route is exact"}}
    return route_solution(model, W, U, float(cert.primal_value), cp.OPTIMAL, True, "ZERO",
                          {"compile": 0.0, "solve": 0.0,
                           "certificate": time.perf_counter() - t0}, info, cert)


# ------------------------------------------------------------------ route "direct"
def _direct_accepts(model: ModelDeclaration, request: RouteRequest) -> str | None:
    """The exact path and tree algorithms of :mod:`gtvmodel.solve.direct` apply
    (:func:`~gtvmodel.solve.direct.direct_method`: ``Norm1``, diagonal quadratic node terms,
    no constraints, a forest) and no solver options were given."""
    if request.opts:
        return None
    method, reason = direct_method(model)
    return None if method is None else f"the direct {method} algorithm is exact: {reason}"


def _direct_run(model: ModelDeclaration, request: RouteRequest, reason: str
                ) -> Solution | None:
    """:func:`~gtvmodel.solve.direct.solve_direct`, certified; None (declined: the next route
    is tried) when its certificate misses the accuracy aimed at."""
    sol = solve_direct(model, certify=True, accuracy=request.accuracy)
    if not sol.certificate.success_at(request.required):
        return None
    sol.info.update(route="direct", route_reason=reason, accuracy=request.accuracy)
    return sol


#: Route 2 of :func:`solve_exact`: the direct solvers (measured: a 100,000-node path in
#: 2.3-10.6 ms of kernel time against prox-tv's 1.6-9.9 ms (fastest runs 1.41x, load 8), and
#: the whole certified call in 0.07-0.33 s, where the conic route took 4.3-7.8 s;
#: ``benchmarks/bench_direct.py``).
DIRECT_ROUTE = Route("direct", _direct_accepts, _direct_run)


# ------------------------------------------------------------------ route "first_order"
def _first_order_accepts(model: ModelDeclaration, request: RouteRequest) -> str | None:
    """The size rule of :func:`gtvmodel.solve.first_order.choose_route` (above the
    threshold), for options Algorithm 1 takes."""
    if set(request.opts) - set(FIRST_ORDER_OPTIONS):
        return None
    route, reason = choose_route(model, "auto", request.threshold)
    return reason if route == "first_order" else None


def _first_order_run(model: ModelDeclaration, request: RouteRequest, reason: str) -> Solution:
    """The first-order route (:func:`gtvmodel.solve.first_order.solve_first_order`): it names
    no solver and always certifies."""
    if request.solver is not None:
        raise ParameterError(f"solve_exact: solver={request.solver!r} is an option of the "
                             f"conic routes, but the first-order route was taken ({reason})")
    return solve_first_order(model, request.accuracy,
                             accept_inaccurate=request.accept_inaccurate,
                             raise_on_failure=request.raise_on_failure, reason=reason,
                             **request.opts)


FIRST_ORDER_ROUTE = Route("first_order", _first_order_accepts, _first_order_run)


# ------------------------------------------------------------------ the conic routes
#: The mean degree ``2 |E| / n`` up to which :func:`scs_accepts` leaves a graph to Clarabel
#: (grids and chains: mean degree <= 4).  Measured through ``solve_exact`` on a 50 x 50 grid
#: (mean degree 3.92, ``Norm2``, the data of ``benchmarks/bench_exact_routes.py``, load 12-16
#: on 2 cores, one run each): SCS took 55.7 s to 1e-6 and the polish was rejected (certified
#: 1.5e-6), Clarabel 13.4 s; on grids SCS needs thousands of iterations.
SCS_MIN_DEGREE = 4.5

#: The problem size ``(n + |E|) d`` (:func:`gtvmodel.solve.first_order.problem_size`) below
#: which :func:`scs_accepts` leaves a model to Clarabel, whose fixed costs are smaller.
#: Measured (``benchmarks/bench_exact_routes.py --routes interior``, load 3.6-3.9, medians of
#: 3): on the 300-node SBM (size 3,668) the SCS route took 0.17-0.18 s and ``method="interior"``
#: (the full Clarabel ladder) 0.12-0.14 s; on the 1,000-node SBM (12,326) 0.92-0.93 s against
#: 2.24-3.47 s.
SCS_MIN_SIZE = 6_000


def scs_accepts(model: ModelDeclaration, request: RouteRequest) -> str | None:
    """SCS's rule: the polish applies (:func:`gtvmodel.solve.polish.unsupported_reason`),
    the graph's mean degree exceeds :data:`SCS_MIN_DEGREE`, the size is at least
    :data:`SCS_MIN_SIZE`, and no solver options are given.

    Measured (``benchmarks/bench_exact_routes.py``, the 2-block SBMs of mean degree about 10,
    d = 2, 3 interleaved repeats, load 8-11 on 2 cores; time to a certified relative gap
    <= 1e-10 against the best of a hand-written vectorized CVXPY problem solved by Clarabel
    and by SCS; ``benchmarks/RESULTS.md``): 0.86x and 0.90x at 1,000 nodes (``Norm2``,
    ``Norm1``), 1.06x and 0.70x at 2,000, 0.60x and 0.37x at 5,000 (with SCS's indirect
    linear solver, :data:`SCS_INDIRECT_SIZE`); earlier, at load 3.6-4.5: 0.89x and 0.95x at
    1,000 nodes, 0.92x and 0.64x at 2,000, against ``method="interior"``'s 2.2x-6.6x of the
    SCS route's time.
    SCS's setup factorizes once and its iterations are cheap, where Clarabel factorizes at
    each of its 8-10 iterations; the polish turns SCS's 1e-5 answer into one certified to
    ~5e-13."""
    if request.opts or problem_size(model) < SCS_MIN_SIZE:
        return None
    degree = 2.0 * model.num_edges / max(model.num_nodes, 1)
    if degree <= SCS_MIN_DEGREE or request.polish_reason(model) is not None:
        return None
    return (f"the polish applies, the mean degree {degree:.3g} > {SCS_MIN_DEGREE} and the "
            f"size (n + |E|) d = {problem_size(model):,} >= {SCS_MIN_SIZE:,}: SCS (then the "
            "polish) measured faster than Clarabel")


def _clarabel_accepts(model: ModelDeclaration, request: RouteRequest) -> str | None:
    """Clarabel takes every model (the last route)."""
    return f"Clarabel, aimed at accuracy {request.accuracy:g}"


def _conic_route(name: str) -> Route:
    """The conic route of one CVXPY solver (``"CLARABEL"``, ``"SCS"``, ...)."""
    def run(model: ModelDeclaration, request: RouteRequest, reason: str) -> Solution:
        return _solve(model, name, request, reason)
    accepts = {"SCS": scs_accepts, "CLARABEL": _clarabel_accepts}.get(
        name, lambda model, request: f"solver {name}")
    return Route(name.lower(), accepts, run)


#: The strategies of ``solve_exact(method="auto")``, in the order they are tried (its
#: docstring, "Routes").
ROUTES: list[Route] = [
    Route("zero", _zero_accepts, _zero_run),
    DIRECT_ROUTE,
    FIRST_ORDER_ROUTE,
    _conic_route("SCS"),
    _conic_route("CLARABEL"),
]


@dataclass(frozen=True)
class _Pass:
    """One solver run of a conic route: ``options`` over the defaults, ``start`` (the ladder's
    first ``tol_gap_rel``, :func:`gtvmodel._solver.run_solver`), ``warm`` (SCS warm start),
    ``aimed`` (a run before the full one: cheap certificate, kept only if it meets the
    accuracy)."""

    options: dict[str, Any]
    start: float | None = None
    warm: bool = False
    aimed: bool = False


def _passes(name: str, model: ModelDeclaration, request: RouteRequest) -> list[_Pass]:
    """The runs of a conic route, aimed first (docstring of :func:`solve_exact`)."""
    opts = request.opts
    chosen = any(set(level) & set(opts) for level in FALLBACK_SOLVER_OPTIONS.get(name, [])) \
        or bool(set(opts) & set(DEFAULT_SOLVER_OPTIONS.get(name, {})) - {"max_iter",
                                                                          "max_iters"})
    polishable = request.polish_reason(model) is None
    full = _Pass(dict(opts))
    if chosen or not request.aimed:
        return [full]
    if name == "SCS":
        if polishable:
            base = dict(opts)
            if "use_indirect" not in opts and problem_size(model) >= SCS_INDIRECT_SIZE \
                    and scs_indirect_supported():
                base["use_indirect"] = True
            return [_Pass({**base, **SCS_AIM}, aimed=True), _Pass(base, warm=True)]
        return [full]
    if name == "CLARABEL":
        levels = [DEFAULT_SOLVER_OPTIONS[name]["tol_gap_rel"]] + [
            level["tol_gap_rel"] for level in FALLBACK_SOLVER_OPTIONS[name]]
        # the loosest level of the ladder at most as loose as the aim.  Not looser where the
        # polish applies: from Clarabel at 1e-8 the polish was rejected on a 50 x 50 grid
        # (certified 2.7e-9 before it) and misread the fused edges of the 1,000-node Norm1
        # SBM from 1e-4 and 1e-5 (certified 1.4e-6): an interior point's slacks are all
        # positive; aiming at 1e-10 costs 1-2 more iterations (1,000-node SBM: 3.7-4.0 s
        # against 3.6 s at 1e-8, load 12)
        start = max((t for t in levels if t <= request.accuracy), default=levels[0])
        if start > levels[0]:
            return [_Pass(dict(opts), start=start, aimed=True), full]
    return [full]


def _solve(model: ModelDeclaration, name: str, request: RouteRequest, reason: str) -> Solution:
    """A conic route: its runs (:func:`_passes`), each certified; an aimed run is kept when its
    certificate (cheap, then polished) meets the accuracy, else the next run goes on (the
    full one: self-certificate with its alternatives and Clarabel's re-solve,
    :func:`_certified`), keeping the better certified answer."""
    fresh = model.cache.get("primal") is None
    compiled = compile_primal(model)
    passes = _passes(name, model, request)
    if not request.certify:  # nothing can judge an aimed run: it is the answer
        passes = [_Pass(passes[0].options, passes[0].start, passes[0].warm)]
    info: dict[str, Any] = {"lam": model.lam, "route": name.lower(), "route_reason": reason,
                            "accuracy": request.accuracy}
    # with the self-certificate an "optimal_inaccurate" answer is let through and kept only if
    # its certificate proves the requested accuracy (below)
    lenient = request.accept_inaccurate or request.certify
    spent = [0.0, 0.0, 0.0, 0.0]  # compile, solve, certificate, solver setup of all runs
    kept: _Answer | None = None  # the best aimed answer
    kept_info: dict[str, Any] = {}
    answer: _Answer | None = None
    degraded: tuple[dict[str, Any], dict[str, Any]] | None = None  # the full run's record
    for run in passes:
        record: dict[str, Any] = {}
        t_run = time.perf_counter()
        try:
            _, comp, solve_time = run_solver(compiled.problem, name, run.options,
                                             request.verbose, lenient, "solve_exact", record,
                                             start=run.start, warm_start=run.warm)
        except SolverError as exc:
            if run.aimed:
                info.setdefault("aimed_failures", []).append(str(exc))
                continue
            if kept is not None and kept.cert.success_at(request.required):
                answer = kept
                info.update(kept_info)
                break
            raise _explain(model, exc) from None
        spent[0] += comp
        spent[1] += solve_time
        # what the solver's own time leaves out: its setup (SCS factorizes the KKT matrix
        # there: 0.7 s of a 1.9 s call on the 1,000-node SBM) and CVXPY's unpacking
        spent[3] += max(time.perf_counter() - t_run - comp - solve_time, 0.0)
        if run.aimed and compiled.problem.status != cp.OPTIMAL:
            continue  # a loose run's infeasible or inaccurate answer: the full run decides
        if not run.aimed:
            _check_feasible(model, compiled, name)
        W, U = _read(model, compiled, name)
        answer = _Answer(W, U, compiled.problem.status, float(compiled.problem.value), None,
                         0.0, 0.0)
        info["tolerances"] = record.get("options")
        if not request.certify:
            degraded = (record, run.options)
            break
        if run.aimed:
            scratch: dict[str, Any] = {"tolerances": record.get("options")}
            t0 = time.perf_counter()
            try:
                # SCS's loose answer is certified by its polish, not by finer repairs of its
                # own flows (fallback): on the 2,000-node SBM (Norm2) the fallback's flows
                # built from the weights took 0.34 s of a 0.41 s certificate, for 7.4e-8
                answer.cert = certify_fn(model, W, U, tol=request.accuracy, project="never",
                                         recover=False, fallback=name != "SCS")
            except GTVError:  # the full run's self-certificate records why
                continue
            finally:
                spent[2] += time.perf_counter() - t0
            if request.polish:
                _polished(model, answer, scratch, request.accuracy)
            if answer.cert.success_at(request.accuracy):
                info.update(scratch)
                info["certified"] = True
                break
            if kept is None or answer.cert.relative_gap < kept.cert.relative_gap:
                kept, kept_info = answer, scratch
            if not _stalled(record, run):
                continue
            # the solver could not reach the aimed level: a tighter run would stall there
            # too, so this answer gets the full certificate instead of another run
            info["stalled"] = True
            kept = None
        degraded = (record, run.options)
        answer = _certified(model, compiled, name, answer, info, run.options,
                            request.verbose, lenient, request.required,
                            bool(record.get("shortcut")))
        spent[0] += answer.compile_time
        spent[1] += answer.solve_time
        if request.polish:
            _polished(model, answer, info, request.accuracy)
        if kept is not None and kept.cert.relative_gap < _relative_gap(answer.cert):
            answer = kept
            info.update(kept_info)
            info["certified"] = kept.cert.success_at(request.required)
        break
    assert answer is not None
    if degraded is not None and not (request.aimed and answer.cert is not None
                                     and answer.cert.success_at(request.accuracy)):
        _warn_default_accuracy(name, *degraded)
    if request.certify and request.handover and name != "CLARABEL" and not (
            answer.cert is not None and answer.cert.success_at(request.required)):
        # Clarabel, the last route, re-solves with RESOLVE_OPTIONS where this one cannot
        raise SolverError(
            f"solve_exact: {name}'s answer is certified only to a relative gap of "
            f"{_relative_gap(answer.cert):.3g} (required {request.required:g})",
            status="not_certified", solver=name)
    if request.certify:
        if answer.cert is not None:
            info["certified_gap"] = answer.cert.gap
            info["certified_relative_gap"] = answer.cert.relative_gap
            if np.isfinite(answer.cert.primal_value):
                # P(W) evaluated in numpy: a loose run's own objective value can be ~eps off
                answer.objective = float(answer.cert.primal_value)
        _check_certified(name, answer, info, request.accept_inaccurate, request.required)
    elif request.polish:
        info["polish"] = {"status": "skipped", "reason": "certify=False"}
    timings = {"compile": (compiled.build_time if fresh else 0.0) + spent[0],
               "solve": spent[1], "solver_setup": spent[3]}
    if request.certify:
        timings["certificate"] = spent[2] + info.pop("certificate_time", 0.0)
    if "time" in info.get("polish", {}):
        timings["polish"] = info["polish"]["time"]
    success = bool(info.pop("certified", answer.status == cp.OPTIMAL))
    return route_solution(model, answer.W, answer.U, answer.objective, answer.status, success,
                          name, timings, info, answer.cert)


def _stalled(record: dict[str, Any], run: _Pass) -> bool:
    """Whether an aimed run was accepted at a looser level of the ladder than it aimed at."""
    used = (record.get("options") or {}).get("tol_gap_rel")
    return run.start is not None and used is not None and used > run.start


def _relative_gap(cert: Any) -> float:
    """A certificate's relative gap (inf without one)."""
    return math.inf if cert is None else float(cert.relative_gap)


@dataclass
class _Answer:
    """The answer kept so far: weights, flows (docs/conventions.md's sign), status, objective of
    (16), its certificate (34) and the summed compile and solver seconds."""

    W: np.ndarray
    U: np.ndarray
    status: str
    objective: float
    cert: Any
    compile_time: float
    solve_time: float


def _check_args(solver: Any, accept_inaccurate: Any, verbose: Any, certify: Any,
                accuracy: Any) -> float:
    """Validate :func:`solve_exact`'s options; returns ``accuracy``."""
    check_solver(solver, "solve_exact")
    for flag, value in (("accept_inaccurate", accept_inaccurate), ("verbose", verbose),
                        ("certify", certify)):
        check_bool(value, flag, "solve_exact")
    return check_scalar(accuracy, "accuracy", min_val=0.0, include_boundaries="neither",
                        where="solve_exact")


def _warn_default_accuracy(name: str, record: dict[str, Any], opts: dict[str, Any]) -> None:
    """:class:`AccuracyWarning` when the solver was accepted only at the last level of its
    fallback ladder (its own default accuracy) without the caller choosing tolerances."""
    levels = FALLBACK_SOLVER_OPTIONS.get(name, [])
    if levels and record.get("options", {}).get("tol_gap_rel") == levels[-1]["tol_gap_rel"] \
            and not any(set(level) & set(opts) for level in levels):
        warnings.warn(
            f"solve_exact: {name} could not reach gtvmodel's reference tolerances and was "
            f"accepted at its own default accuracy {levels[-1]}; the weights may be accurate to "
            "only about 1e-5 (see Solution.info['tolerances'])", AccuracyWarning, stacklevel=5)


def _check_feasible(model: ModelDeclaration, compiled: PrimalProblem, name: str) -> None:
    """:class:`InfeasibleError` naming the nodes whose constraints are infeasible."""
    if compiled.problem.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        bad = find_infeasible_nodes(model)
        where = (f"infeasible constraints at node(s) {', '.join(map(repr, bad))}" if bad
                 else "the constraints have no common feasible point")
        raise InfeasibleError(f"solve_exact: {name} reports the problem infeasible: {where}")


def _certified(model: ModelDeclaration, compiled: PrimalProblem, name: str, answer: _Answer,
               info: dict[str, Any], opts: dict[str, Any], verbose: bool, lenient: bool,
               accuracy: float, shortcut: bool = False) -> _Answer:
    """The self-certificate (34) of the answer; if it misses ``accuracy``, re-solves by the
    plain ladder (with the same options when the answer came by a ``shortcut`` of the ladder,
    then with :data:`RESOLVE_OPTIONS`), keeping the best certified answer.  Fills ``info``
    (``certificate_time``, ``resolved``, ``certified``, ``certified_gap``,
    ``certified_relative_gap``, ``certificate_error``, ``tolerances``)."""
    t0 = time.perf_counter()
    try:
        answer.cert = _self_certificate(certify_fn, model, answer.W, answer.U, accuracy)
    except GTVError as exc:  # e.g. a conjugate the certificate cannot evaluate
        info["certificate_error"] = str(exc)
    info["certificate_time"] = time.perf_counter() - t0
    # re-solves, by the plain ladder (every level a fresh run to its end), until the answer is
    # certified: first with the same options when the answer came by a shortcut of the ladder
    # (a run stopped early at a looser level, issue 17), then with RESOLVE_OPTIONS
    resolve = RESOLVE_OPTIONS.get(name)
    extra = ([dict(opts)] if shortcut else []) + (
        [{**opts, **resolve}] if resolve and not set(resolve) & set(opts) else [])
    for options in extra:
        if answer.cert is None or answer.cert.success_at(accuracy):
            break
        _resolve(model, compiled, name, answer, info, options, verbose, lenient, accuracy)
    info["certified"] = answer.cert is not None and answer.cert.success_at(accuracy)
    if answer.cert is not None:
        info["certified_gap"] = answer.cert.gap
        info["certified_relative_gap"] = answer.cert.relative_gap
    return answer



def _polished(model: ModelDeclaration, answer: _Answer, info: dict[str, Any],
              accuracy: float) -> None:
    """The polish of the certified answer (:func:`gtvmodel.solve.polish.polish`): replaces it
    when certified at least as good; records ``info["polish"]``.  An answer the solver calls
    inaccurate is left as it is (its status, raised or accepted, stays the caller's to see)."""
    if answer.status != cp.OPTIMAL:
        info["polish"] = {"status": "skipped", "reason": f"solver status {answer.status!r}"}
        return
    done = polish_fn(model, answer.W, answer.U, answer.cert, accuracy)
    info["polish"] = done.info
    if done.applied:
        answer.W, answer.U, answer.cert = done.weights, done.flows, done.certificate
        answer.objective = done.info["objective_after"]
        info["certified"] = answer.cert.success_at(accuracy)
        info["certified_gap"] = answer.cert.gap
        info["certified_relative_gap"] = answer.cert.relative_gap


def _resolve(model: ModelDeclaration, compiled: PrimalProblem, name: str, answer: _Answer,
             info: dict[str, Any], options: dict[str, Any], verbose: bool, lenient: bool,
             accuracy: float) -> None:
    """One re-solve by the plain ladder with ``options``; the answer is replaced when the new
    one is certified to a smaller relative gap (34)."""
    record2: dict[str, Any] = {}
    try:
        _, comp2, st2 = run_solver(compiled.problem, name, options, verbose, lenient,
                                   "solve_exact (re-solve)", record2, shortcuts=False)
        info["resolved"] = True
        answer.compile_time += comp2
        answer.solve_time += st2
        if compiled.problem.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
            W2, U2 = _read(model, compiled, name)
            t1 = time.perf_counter()
            cert2 = _self_certificate(certify_fn, model, W2, U2, accuracy)
            info["certificate_time"] += time.perf_counter() - t1
            if cert2.relative_gap < answer.cert.relative_gap:
                answer.W, answer.U, answer.cert = W2, U2, cert2
                answer.status = compiled.problem.status
                answer.objective = float(compiled.problem.value)
                info["tolerances"] = record2.get("options")
    except GTVError:
        info.setdefault("resolved", False)

def _check_certified(name: str, answer: _Answer, info: dict[str, Any],
                     accept_inaccurate: bool, accuracy: float) -> None:
    """An ``optimal_inaccurate`` answer not certified to ``accuracy`` raises (unless
    ``accept_inaccurate``); a claimed ``optimal`` that is not certified warns
    (:class:`AccuracyWarning`)."""
    cert, status = answer.cert, answer.status
    if status == cp.OPTIMAL_INACCURATE and not accept_inaccurate and not info["certified"]:
        what = (f"certified only to a relative gap of {cert.relative_gap:.3g}"
                if cert is not None else "not certified")
        raise SolverError(
            f"solve_exact: {name} stopped with status 'optimal_inaccurate' and the result is "
            f"{what} (requested accuracy {accuracy:g}); pass accept_inaccurate=True to "
            "accept it, or loosen the tolerances", status=status, solver=name)
    # an accepted inaccurate status already says so; a claimed "optimal" must be true
    if not info["certified"] and status == cp.OPTIMAL:
        what = (f"the solution is certified only to a relative gap of "
                f"{cert.relative_gap:.3g}" if cert is not None else
                f"the solution could not be certified ({info['certificate_error']})")
        warnings.warn(
            f"solve_exact: {name} reports {status!r}, but {what} (requested accuracy "
            f"{accuracy:g}; gtvmodel.certify with the solver's flows"
            + (", also after a re-solve with RESOLVE_OPTIONS" if "resolved" in info else "")
            + "): the weights may be that far from optimal (see Solution.certificate)",
            AccuracyWarning, stacklevel=5)


def _self_certificate(certify_fn: Any, model: ModelDeclaration, W: np.ndarray, U: np.ndarray,
                      accuracy: float) -> Any:
    """The certificate of an exact solve (``project="never"``: cheap repairs only); if it
    misses ``accuracy``, also with the convex projection of the flows and with flows
    recovered from the weights (the best one is kept: each is a valid bound).  The recovery
    (:mod:`gtvmodel.certificates.recovery`) runs once, in the last try: ``recover=False``
    before it."""
    cert = certify_fn(model, W, U, tol=accuracy, project="never", recover=False)
    for flows in (U, None):
        if cert.success_at(accuracy):
            break
        alt = certify_fn(model, W, flows, tol=accuracy, recover=flows is None)
        if alt.relative_gap < cert.relative_gap:
            cert = alt
    return cert


def _read(model: ModelDeclaration, compiled: PrimalProblem, name: str) -> tuple[np.ndarray,
          np.ndarray]:
    """Weights and flows (docs/conventions.md's sign) of the last solve, checked finite."""
    status = compiled.problem.status
    if compiled.W.value is None and status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) and all(
            v.id != compiled.W.id for v in compiled.problem.variables()):
        # W appears nowhere (no edges, zero losses only): every W is optimal, take 0
        compiled.W.value = np.zeros(compiled.W.shape)
    if compiled.W.value is None:
        raise SolverError(f"solve_exact: {name} returned no weights (status {status!r})",
                          status=status, solver=name)
    W = np.asarray(compiled.W.value, dtype=float).reshape(model.num_nodes, model.dim)
    if compiled.flow_constraint is not None:
        dual = compiled.flow_constraint.dual_value
        if dual is None:
            raise SolverError(f"solve_exact: {name} returned no dual values for the flows",
                              status=status, solver=name)
        U = -np.asarray(dual, dtype=float).reshape(model.num_edges, model.dim)
    else:
        U = np.zeros((0, model.dim))
    if not (np.isfinite(W).all() and np.isfinite(U).all()):
        msg = data_overflow_message(model, "solve_exact")
        if msg is not None:
            raise DataError(msg)
        bad = np.flatnonzero(~np.isfinite(W).all(axis=1))
        where = (f" (weights of node(s) {', '.join(repr(model.nodes[i]) for i in bad[:10])})"
                 if bad.size else " (flows)")
        raise SolverError(f"solve_exact: {name} returned non-finite values{where}",
                          status=status, solver=name)
    return W, U


def _explain(model: ModelDeclaration, exc: SolverError) -> GTVError:
    """Add what can be determined about the cause to a failed exact solve's error."""
    msg = data_overflow_message(model, "solve_exact")
    if msg is not None:
        return DataError(f"{msg} ({exc})")
    if exc.status in (cp.UNBOUNDED, cp.UNBOUNDED_INACCURATE):
        bad = unbounded_nodes(model)
        if bad:
            return SolverError(
                f"solve_exact: the problem is unbounded: the loss of node(s) "
                f"{', '.join(map(repr, bad[:10]))}{' ...' if len(bad) > 10 else ''} is unbounded "
                "below over the node's constraints", status=exc.status, solver=exc.solver)
    return exc
