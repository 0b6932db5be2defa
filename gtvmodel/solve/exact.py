"""``solve_exact``: the primal problem (16) solved exactly and certified, by the first route of
an ordered list of strategies (:data:`ROUTES`) that accepts the model: the trivial answer, the
first-order route (Algorithm 1), SCS or Clarabel on one vectorized CVXPY problem (compiled by
:mod:`gtvmodel.duality.compile`), each with its flows (the multipliers of ``Z = D W``) and a
self-certificate (34) of the answer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any, cast

import cvxpy as cp
import numpy as np

from .._solver import DEFAULT_SOLVER_OPTIONS, FALLBACK_SOLVER_OPTIONS, check_solver
from .._validate import check_bool, check_option, check_scalar
from ..certificates.certificate import certify as certify_fn
from ..declaration import ModelDeclaration
from ..duality.compile import unbounded_nodes
from ..errors import DataError, GTVError, InfeasibleError, ParameterError, SolverError
from ..results import Labels, failed_result
from ..solution import Solution
from .conic_route import RESOLVE_OPTIONS, SCS_AIM, SCS_INDIRECT_SIZE, solve_conic
from .direct import direct_method, solve_direct
from .first_order import (
    FIRST_ORDER_ACCURACY,
    FIRST_ORDER_OPTIONS,
    METHODS,
    choose_route,
    problem_size,
    route_solution,
    solve_first_order,
    solve_polished_first_order,
)
from .request import Route, RouteRequest, check_polish

__all__ = ["solve_exact", "Route", "RouteRequest", "ROUTES", "select_routes", "iter_routes",
           "scs_accepts", "SCS_MIN_DEGREE", "SCS_MIN_SIZE", "SCS_INDIRECT_SIZE",
           "DEFAULT_ACCURACY", "SUCCESS_ACCURACY", "SCS_AIM", "RESOLVE_OPTIONS",
           "DEFAULT_SOLVER_OPTIONS", "FALLBACK_SOLVER_OPTIONS"]


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


def solve_exact(model: ModelDeclaration, solver: str | None = None, *,
                accept_inaccurate: bool = False,
                verbose: bool = False, certify: bool = True, accuracy: float | None = None,
                raise_on_failure: bool = True, method: str = "auto",
                auto_threshold: int | None = None, polish: bool | str = "auto",
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
    2. ``"direct"`` -- the exact path, tree and graph algorithms of
       :mod:`gtvmodel.solve.direct` (``Norm1`` penalty, diagonal quadratic node terms such as
       ``QuadraticLoss`` or no data, no node constraints, any graph): weights and flows exact
       up to rounding, kept
       when their certificate meets the accuracy (:func:`gtvmodel.solve.direct.solve_direct`).
    3. ``"first_order"`` -- Algorithm 1 (:mod:`gtvmodel.solve.first_order`) when the problem's
       size ``(n + |E|) d`` exceeds ``auto_threshold`` (default
       :data:`gtvmodel.solve.first_order.AUTO_THRESHOLD`), where the interior-point
       factorization takes minutes and gigabytes.
    4. ``"first_order_polish"`` -- Algorithm 1 in stages of
       :data:`gtvmodel.solve.first_order.POLISHED_STAGES` iterations, each iterate polished
       and kept only when certified to ``accuracy``
       (:func:`gtvmodel.solve.first_order.solve_polished_first_order`; ``Solution.solver``
       ``"ALGORITHM1"``), where the SCS route's rule holds (below); it declines to the SCS
       route when no stage is certified.
    5. ``"scs"`` -- SCS (:data:`SCS_AIM` first, then warm-started at 1e-9) where the polish
       applies (library losses with a Hessian, ``Norm2``/``Norm1``/``SquaredNorm2``, no node
       constraints), the graph is not grid-like (mean degree above :data:`SCS_MIN_DEGREE`)
       and not small (``(n + |E|) d >= SCS_MIN_SIZE``): measured faster than Clarabel there
       (see :func:`scs_accepts`); from :data:`SCS_INDIRECT_SIZE` on with SCS's indirect
       linear solver.
    6. ``"clarabel"`` -- Clarabel, aiming at ``accuracy`` (the loosest level of its ladder
       at most ``accuracy``), then at the full ladder (:data:`DEFAULT_SOLVER_OPTIONS`, 1e-13
       first, with :data:`FALLBACK_SOLVER_OPTIONS`) if the certificate misses ``accuracy``.
       Where the model allows (squared, quadratic and zero losses with ``l2`` regularizers,
       ``Norm2`` or ``Norm1``, no node constraints: :mod:`gtvmodel.solve.native`), the
       aimed run hands Clarabel its arrays directly, without CVXPY
       (``info["formulation"] == "direct"``; without iterative refinement,
       :data:`gtvmodel.solve.native.DIRECT_REFINEMENT`); it is certified like any other run.

    ``method="interior"`` takes Clarabel (or ``solver``) alone with its full ladder at once
    (1e-13 first: the reference solve of earlier versions), ``method="first_order"``
    Algorithm 1 alone; a named ``solver`` (``"CLARABEL"``, ``"SCS"``, ``"OSQP"``: quadratic
    programs only) takes that solver's route alone; ``opts`` then override
    :data:`DEFAULT_SOLVER_OPTIONS` (for the first-order route they are Algorithm 1's:
    ``max_iter``, ``warm_start``, ``step``, ...).  Tolerances given in ``opts`` are used as
    given (one run, Clarabel's fallback ladder off).  ``info["route"]`` (``"zero"``, ``"direct"``,
    ``"first_order"``, ``"first_order_polish"``, ``"scs"``, ``"clarabel"``, or the named
    solver's name in lower case)
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

    **Polish** (issue 17; :mod:`gtvmodel.solve.polish`).  The certified conic answer is
    polished: Newton's method on (16) restricted to its fused clusters (and ``l1`` zeros),
    with flows meeting the node optimality conditions on them; the polished point replaces
    the answer only when its certified gap (34) is at most the solver's and its objective is
    not larger (after an aimed run: when it is certified to ``accuracy`` and its objective is
    not larger; the solver's answer is then not certified itself, one certificate fewer).
    With ``polish="auto"`` (default) Clarabel's aimed answer is certified first and polished
    only where its own flows miss ``accuracy`` (``info["polish"]["reason"]`` is
    :data:`gtvmodel.solve.conic_route.CERTIFIED_FIRST` where it was not; SCS's loose answer
    and every full run, e.g. ``method="interior"``, are always polished): the answer is then
    certified to ``accuracy`` as always, but its weights are those of the interior point,
    accurate in flat directions only as far as the certified gap bounds them (on a 80-node
    SBM 1.6e-6 from the polished weights, ``tests/test_routes.py``).  ``polish=True``
    polishes every answer (weights exact in flat directions up to rounding where the polish
    is applied), ``polish=False`` none.  It applies to library losses with a Hessian
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
    polish : bool or "auto"
        Polish the certified conic answer by Newton's method on its fused clusters: ``True``
        always, ``"auto"`` (default) where an aimed Clarabel answer is not certified to
        ``accuracy`` by its own flows, and after SCS and every full run, ``False`` never
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
        ``certify`` or ``raise_on_failure`` not a bool, ``polish`` neither a bool nor
        ``"auto"``, ``accuracy`` not
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
    polish = check_polish(polish, "solve_exact")
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
    return cast(Solution, failed_result(Solution, Labels(model.nodes, model.edges), error,
                                        check_solver(solver), objective=math.nan,
                                        success=False))


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


def _hand_over(model: ModelDeclaration, exc: InfeasibleError | SolverError) -> bool:
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
    """The exact path, tree and graph algorithms of :mod:`gtvmodel.solve.direct` apply
    (:func:`~gtvmodel.solve.direct.direct_method`: ``Norm1``, diagonal quadratic node terms,
    no constraints, any graph) and no solver options were given."""
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


#: Route 2 of :func:`solve_exact`: the direct solvers (measured: a 100,000-node path in a
#: median 2.34 ms of kernel time against prox-tv's 1.84 ms, per-repeat ratio 1.26 in wall and
#: in CPU time (51 alternating calls, load 9), and the whole certified call in 0.07-0.33 s
#: (0.32-0.62 s at load 9), where the conic route took 4.3-7.8 s;
#: ``benchmarks/bench_direct.py``; on graphs with cycles, the levels by minimum cuts:
#: faster than the Clarabel route in all 39 cases of ``benchmarks/bench_direct_graph.py
#: --sweep`` (grids, SBM, random and small-world graphs, 300-10,000 nodes, 8.2-352x), and
#: 3.6x the first-order route on a 10,000-node SBM at d = 3).
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
    d = 2, load 3.7-5.1 on 2 cores, 2026-11-28; time to a certified relative gap <= 1e-10
    against the best of a hand-written vectorized CVXPY problem solved by Clarabel and by
    SCS; ``benchmarks/RESULTS.md``): 0.73x and 0.74x at 1,000 nodes (``Norm2``, ``Norm1``; 5
    interleaved repeats), 0.90x and 0.71x at 2,000, 0.27x and 0.39x at 5,000 (one run each;
    with SCS's indirect linear solver, :data:`SCS_INDIRECT_SIZE`); earlier rounds: 0.65x
    and 0.79x at 1,000 nodes, 0.53x and 0.49x at 2,000, 0.26x and 0.41x at 5,000 (load
    6-11); 0.89x and 0.95x at 1,000 nodes, 0.92x and 0.64x at 2,000, against
    ``method="interior"``'s 2.2x-6.6x of the SCS route's time (load 3.6-4.5); the latest
    (load 4.4-5.6): 0.64x and 0.78x at 1,000 nodes (5 repeats), 0.92x (3 repeats; 1.01x in
    one run) and 0.40x-0.41x at 2,000, 0.22x and 0.57x at 5,000 (one run each).
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


def _polished_first_order_accepts(model: ModelDeclaration, request: RouteRequest
                                  ) -> str | None:
    """The rule of :func:`scs_accepts` (the polish applies, mean degree above
    :data:`SCS_MIN_DEGREE`, size at least :data:`SCS_MIN_SIZE`, no options), with the
    answer certified (``certify=True``): Algorithm 1's iterate is polished and kept only on
    its certificate (:func:`gtvmodel.solve.first_order.solve_polished_first_order`), else
    the SCS route answers.

    Measured (``benchmarks/bench_exact_routes.py``; ``benchmarks/RESULTS.md``): on the
    2-block SBMs (mean degree about 10, d = 2) Algorithm 1's 300 iterations and the polish
    took 0.3-0.8 s at 2,000 nodes, where SCS's factorization alone took 0.7-1.5 s and its
    100-125 iterations to 1e-5 another 1.0-2.7 s; against a hand-written vectorized CVXPY
    solve by Clarabel and by SCS (the best certified to 1e-10), 0.19-0.25x at 1,000 nodes,
    0.06-0.15x at 2,000 (every one of 20 repeats within 0.04-0.74x) and 0.02-0.05x at 5,000
    (load 3.5-7 on 2 cores).  Where Algorithm 1 is slow (paper 001's weather graphs) the
    route declines after its 100-iteration probe
    (:data:`~gtvmodel.solve.first_order.POLISHED_GATE`)."""
    rule = scs_accepts(model, request) if request.certify else None
    if rule is None:
        return None
    return (f"the SCS route's rule holds ({rule}); Algorithm 1, then the polish, measured "
            "faster there; the SCS route if it is not certified")


def _polished_first_order_run(model: ModelDeclaration, request: RouteRequest, reason: str
                              ) -> Solution | None:
    """:func:`~gtvmodel.solve.first_order.solve_polished_first_order`; None (declined: the
    SCS route runs) when no stage is certified to ``accuracy``."""
    return solve_polished_first_order(model, request.accuracy, reason,
                                      when_needed=request.polish_when_needed())


#: Route 4 of :func:`solve_exact` (its docstring): Algorithm 1 then the polish, where the SCS
#: route would run (:func:`_polished_first_order_accepts`).
POLISHED_FIRST_ORDER_ROUTE = Route("first_order_polish", _polished_first_order_accepts,
                                   _polished_first_order_run)


def _clarabel_accepts(model: ModelDeclaration, request: RouteRequest) -> str | None:
    """Clarabel takes every model (the last route)."""
    return f"Clarabel, aimed at accuracy {request.accuracy:g}"


def _conic_route(name: str) -> Route:
    """The conic route of one CVXPY solver (``"CLARABEL"``, ``"SCS"``, ...)."""
    def run(model: ModelDeclaration, request: RouteRequest, reason: str) -> Solution:
        return solve_conic(model, name, request, reason)
    accepts = {"SCS": scs_accepts, "CLARABEL": _clarabel_accepts}.get(
        name, lambda model, request: f"solver {name}")
    return Route(name.lower(), accepts, run)


#: The strategies of ``solve_exact(method="auto")``, in the order they are tried (its
#: docstring, "Routes").
ROUTES: list[Route] = [
    Route("zero", _zero_accepts, _zero_run),
    DIRECT_ROUTE,
    FIRST_ORDER_ROUTE,
    POLISHED_FIRST_ORDER_ROUTE,
    _conic_route("SCS"),
    _conic_route("CLARABEL"),
]


def _check_args(solver: Any, accept_inaccurate: Any, verbose: Any, certify: Any,
                accuracy: Any) -> float:
    """Validate :func:`solve_exact`'s options; returns ``accuracy``."""
    check_solver(solver, "solve_exact")
    for flag, value in (("accept_inaccurate", accept_inaccurate), ("verbose", verbose),
                        ("certify", certify)):
        check_bool(value, flag, "solve_exact")
    return check_scalar(accuracy, "accuracy", min_val=0.0, include_boundaries="neither",
                        where="solve_exact")
