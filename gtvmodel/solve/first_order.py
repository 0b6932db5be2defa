"""Ground truth past interior-point scale (issue 16 item 4): the routes of
:func:`gtvmodel.solve_exact` and its first-order route.

``solve_exact(method=...)`` solves (16) by one of two routes:

* ``"interior"`` -- one vectorized conic problem solved by Clarabel (or OSQP/SCS), then
  self-certified (:mod:`gtvmodel.solve.exact`).  Its cost is the sparse factorization of the
  KKT system at every interior-point iteration, whose fill-in grows fast on random graphs:
  measured on the SBM of ``benchmarks/bench_exact_scale.py`` (d = 5, squared loss,
  ``Norm2``, a busy 2-core machine) 20 s at 1,000 nodes, 101 s at 2,000, 26 min and 1.9 GB
  at 5,000 (issue 16 measured 14 s, 49 s, 634 s and 3.9 GB; ``benchmarks/RESULTS.md``).
* ``"first_order"`` -- Algorithm 1 of paper 001 ("Networked Federated Learning": PU (32),
  DU (33); :func:`gtvmodel.solve_primal_dual`, with the package's adaptive step rule, in
  warm-started stages of decreasing tolerance with the step scale rebalanced between them)
  run until the duality gap (34) *certified* by
  :func:`gtvmodel.certify` is at most ``accuracy * max(1, |P(w)|)`` (default ``accuracy =
  1e-9``).  No factorization: memory is linear in ``(n + |E|) d`` and an iteration costs two
  sparse products with the incidence matrix ``D``.  The answer is exactly as good as its
  certificate says (``Solution.certificate.gap >= P(w) - P*``); if the iteration budget ends
  first the route says so and never claims the target.  Measured
  (``benchmarks/bench_exact_scale.py``, loaded 2-core machine): the 20,000-node SBM (102,395
  edges, d = 5) certified to 8.8e-10 in 950 iterations (89 s, 0.36 GB), where Clarabel's fit
  predicts hours.  Its certified gap is almost all edge terms (99.98 %): a primal point
  recovered from the flows (the dual function's minimizer ``argmin_w L_i(w) + <w, (D^T
  u)_i>``) only removes the node terms; measured, its certified relative gap was at best 1.2x
  smaller than the iterate's (a 60-node chain, strongly convex losses) and far larger on the
  SBMs (5,000 nodes: 1e-6..9e-4 against the iterate's 8e-13..6e-9; nearly flat losses turn
  small flow errors into large weight errors), so the iterate is certified as it is.
* ``"auto"`` (the default since issue 28) -- the first accepting strategy of
  :data:`gtvmodel.solve.exact.ROUTES`; the first-order one accepts by :func:`choose_route`'s
  size rule: when the problem's size (:func:`problem_size`, the number of scalar unknowns
  ``(n + |E|) d`` of the conic form) is above :data:`AUTO_THRESHOLD` (below it the conic routes,
  SCS or Clarabel, answer).

This module sits in the engine layer beside :mod:`gtvmodel.primal_dual` (which imports only
:mod:`gtvmodel.duality.compile` from this package), so :mod:`gtvmodel.solve.exact` dispatches to
it without an import cycle.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .._validate import check_int, check_option
from ..certificates.certificate import certify
from ..declaration import ModelDeclaration
from ..errors import GTVError, ParameterError, SolverError
from ..primal_dual.algorithm import solve_primal_dual
from ..primal_dual.steps import ResidualBalancing
from ..results import Labels
from ..solution import Solution
from .polish import polish
from .uniqueness import uniqueness

__all__ = ["METHODS", "AUTO_THRESHOLD", "FIRST_ORDER_ACCURACY", "FIRST_ORDER_MAX_ITER",
           "FIRST_ORDER_OPTIONS", "FIRST_STAGE", "STAGE_FACTOR", "REBALANCE_MAX", "problem_size",
           "choose_route", "solve_first_order", "stage_tolerances", "rebalanced",
           "route_solution", "POLISHED_STAGES", "POLISHED_GATE", "POLISH_NOT_NEEDED",
           "solve_polished_first_order"]

#: The routes of :func:`gtvmodel.solve_exact` (``method``).
METHODS = ("interior", "first_order", "auto")

#: ``method="auto"`` takes the first-order route when :func:`problem_size` exceeds this many
#: scalar unknowns.  Measured (``benchmarks/bench_exact_scale.py``, SBM with mean degree about
#: 10, d = 5, squared loss, ``Norm2``, ``lambda = 0.1``, 2 cores): Clarabel's time grows like
#: ``size^2.7`` (sizes 31k, 62k, 153k scalars: 20 s, 101 s, 1,547 s; peak memory 0.25, 0.49,
#: 1.9 GB), the first-order route's about linearly (0.4 s, 0.8 s, 9.1 s to a certified 1e-9):
#: above about 100,000 scalars (an SBM of about 3,300 nodes) Clarabel takes many minutes and
#: gigabytes.  Below it the interior route is kept: Algorithm 1 is not always faster there
#: (a 100-node SBM at ``lambda = 0.05``: 1.4 s against Clarabel's 0.1 s; a 30 x 30 grid:
#: 11.5 s against 5.2 s), and graphs with little fill-in (grids, chains) stay fast with
#: Clarabel even above it (a 10,000-node grid: 72 s in issue 16); pass ``method`` to choose.
AUTO_THRESHOLD = 100_000

#: Default certified relative gap of the first-order route.
FIRST_ORDER_ACCURACY = 1e-9

#: Default iteration budget of the first-order route.
FIRST_ORDER_MAX_ITER = 200_000

#: The first-order route runs Algorithm 1 in stages aiming at relative gaps ``FIRST_STAGE``,
#: ``FIRST_STAGE / STAGE_FACTOR``, ... down to ``accuracy`` (:func:`stage_tolerances`), and
#: rebalances the step scale between stages by at most ``REBALANCE_MAX`` (:func:`rebalanced`).
FIRST_STAGE = 1e-5
STAGE_FACTOR = 100.0
REBALANCE_MAX = 10.0

#: The options of :func:`gtvmodel.solve_primal_dual` the first-order route passes on (given to
#: :func:`gtvmodel.solve_exact` as keyword options).
FIRST_ORDER_OPTIONS = ("max_iter", "warm_start", "step", "record_every", "certificate_budget",
                       "prox", "progress")

#: The solver name of the first-order route in :attr:`Solution.solver`.
SOLVER_NAME = "ALGORITHM1"


def problem_size(model: ModelDeclaration) -> int:
    """The size estimate of ``method="auto"``: the scalar unknowns ``(n + |E|) d`` of the conic
    form of (16) (the weights ``W`` and the edge differences ``Z = D W``), which sets the
    order of the interior-point KKT system.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> from gtvmodel.solve.first_order import problem_size
    >>> problem_size(gm.GTVModel(nx.path_graph(4), dim=2))  # (4 nodes + 3 edges) * 2
    14
    """
    return (model.num_nodes + model.num_edges) * model.dim


def choose_route(model: ModelDeclaration, method: str = "auto",
                 threshold: int | None = None) -> tuple[str, str]:
    """The size rule between the conic routes and Algorithm 1, and why: ``("interior" |
    "first_order", reason)``.  ``"auto"`` compares :func:`problem_size` with ``threshold``
    (default :data:`AUTO_THRESHOLD`); :func:`gtvmodel.solve_exact`'s first-order strategy
    accepts a model where it says ``"first_order"`` (:data:`gtvmodel.solve.exact.ROUTES`).

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> from gtvmodel.solve.first_order import choose_route
    >>> model = gm.GTVModel(nx.path_graph(4), dim=2)
    >>> choose_route(model)[0], choose_route(model, threshold=10)[0]
    ('interior', 'first_order')
    """
    method = check_option(method, "method", METHODS, where="solve_exact")
    if method != "auto":
        return method, f"method={method!r} requested"
    threshold = AUTO_THRESHOLD if threshold is None else check_int(
        threshold, "auto_threshold", min_val=0, where="solve_exact")
    size = problem_size(model)
    if size > threshold:
        return "first_order", (f"auto: (n + |E|) d = {size:,} scalar unknowns > {threshold:,}: "
                               "an interior-point factorization would be too costly")
    return "interior", f"auto: (n + |E|) d = {size:,} scalar unknowns <= {threshold:,}"


def solve_first_order(model: ModelDeclaration, accuracy: float = FIRST_ORDER_ACCURACY, *,
                      accept_inaccurate: bool = False, raise_on_failure: bool = True,
                      reason: str = "method='first_order' requested",
                      **options: Any) -> Solution:
    """(16) by Algorithm 1 (PU (32), DU (33)) until the certified relative gap (34) is at most
    ``accuracy``; the first-order route of :func:`gtvmodel.solve_exact` (arguments checked
    there).

    Algorithm 1 runs in stages aiming at ``1e-5, 1e-7, ..., accuracy``
    (:func:`stage_tolerances`), each warm-started from the previous one with its step scale
    rebalanced (:func:`rebalanced`; 6-10x fewer iterations than one run to 1e-9 on the SBMs
    measured).  ``options`` are :func:`gtvmodel.solve_primal_dual`'s
    (:data:`FIRST_ORDER_OPTIONS`; ``max_iter``, default :data:`FIRST_ORDER_MAX_ITER`, is the
    budget of all stages; a given ``step`` is used as is, in one stage).

    Certified: status ``"optimal"``, ``success`` True.  Not certified within ``max_iter``:
    :class:`~gtvmodel.errors.SolverError` (status ``"user_limit"``) naming the gap reached,
    unless ``accept_inaccurate`` (a ``Solution`` with status ``"optimal_inaccurate"``) or
    ``raise_on_failure=False`` (status ``"user_limit"``, ``info["error"]``); both keep the
    weights, flows and certificate and have ``success`` False.  ``info``: ``route``
    (``"first_order"``), ``route_reason``, ``iterations``, ``stages`` (``(tol, iterations,
    c)`` per stage), ``certified_gap``, ``certified_relative_gap``, ``accuracy``.
    """
    unknown = sorted(set(options) - set(FIRST_ORDER_OPTIONS))
    if unknown:
        raise ParameterError(
            f"solve_exact: option(s) {', '.join(map(repr, unknown))} are not options of the "
            f"first-order route (method='first_order' takes {', '.join(FIRST_ORDER_OPTIONS)})")
    run, stages = _staged_run(model, accuracy, options)
    cert = run.certificate
    if not cert.success_at(accuracy):
        # the run's certificates skip the convex projection of the flows: try it once
        full = certify(model, run.weights, run.flows, tol=accuracy)
        cert = full if full.relative_gap < cert.relative_gap else cert
    certified = bool(cert.success_at(accuracy))
    info: dict[str, Any] = {
        "lam": model.lam, "route": "first_order", "route_reason": reason,
        "iterations": sum(k for _, k, _ in stages), "stages": stages, "accuracy": accuracy,
        "certified_gap": cert.gap, "certified_relative_gap": cert.relative_gap}
    status = "optimal"
    if not certified:
        message = (f"solve_exact: the first-order route (Algorithm 1) ran {info['iterations']} "
                   f"iterations and is certified only to a relative gap of "
                   f"{cert.relative_gap:.3g} (requested accuracy {accuracy:g}); raise "
                   "max_iter, loosen accuracy, or pass accept_inaccurate=True")
        if not accept_inaccurate and raise_on_failure:
            raise SolverError(message, status="user_limit", solver=SOLVER_NAME)
        status = "optimal_inaccurate" if accept_inaccurate else "user_limit"
        info["error"] = message
    return _solution(model, run, cert, status, certified, info)


#: The iterations of Algorithm 1 in the stages of :func:`solve_polished_first_order`, each
#: warm-started from the last; the first is a probe (its iterate certified, not polished:
#: :data:`POLISHED_GATE`), every later one is followed by the polish.  Measured (the 2-block
#: SBMs of ``benchmarks/bench_exact_routes.py``, mean degree about 10, d = 2, ``Norm2`` and
#: ``Norm1``; 1,000 and 2,000 nodes with data seeds 0-4, 2,000 with seeds 5-9, 5,000 with
#: seeds 0-3; load 4-6 on 2 cores; ``benchmarks/RESULTS.md``): in 34 of the 38 cases the
#: polish of the iterate after 300 iterations was certified to 5e-13..6e-12; in 3 (``Norm2``)
#: the polish was rejected there (the line search's step below ``MIN_STEP``: an edge at the
#: kink read as not fused; certified 2e-8..7e-7) and the answer after 1,000 iterations was
#: certified to 6e-13..8e-11 (polished, or by its own flows where the polish was rejected
#: again); in one (5,000 nodes, ``Norm2``, seed 1) only after 2,000 (certified 4e-7, 2e-9,
#: then 1.5e-12; 4.5 s in all against 8.9-15.4 s for the SCS route).  On the 20 cases at
#: 1,000-2,000 nodes the whole call took 0.12-0.87x (median 0.36x) the SCS route's on the
#: same data, at 5,000 nodes 0.06-0.08x where 300 iterations sufficed.  Where no stage is
#: certified the route declines and the SCS route runs (after 2,000 iterations: about 1-2 s
#: at 2,000 nodes, 4 s at 5,000).
POLISHED_STAGES = (100, 200, 700, 1000)


#: The certified relative gap (34) of Algorithm 1's iterate (its own flows, cheap repairs)
#: above which :func:`solve_polished_first_order` declines at once instead of polishing it
#: or running the next stage.  Measured after 100 iterations (the probe) and after 300: on the
#: 2-block SBMs of ``benchmarks/bench_exact_routes.py`` (1,000 and 2,000 nodes, seeds 0-4,
#: ``Norm2`` and ``Norm1``) 7e-8..3e-5 and 5e-13..7e-7 (5,000 nodes, seeds 0-3, after 300:
#: 2e-12..4e-7); on the weather graphs of paper 001 (203 stations, thresholds 5 and 20: 3,097
#: and 6,437 edges, capacities spread over 160x; ``lambda`` 0.05-2), where 2,000 iterations
#: and their polishes were not certified (1.7e-6 after 3,000 at ``lambda = 0.1``) and a
#: ``lambda`` path took 34.8 s against 17.8 s on the SCS route alone, 7e-4..4e-2 and
#: 2e-4..2e-3; the probe costs 0.09-0.17 s there, the SCS route's solves 1.7-21.5 s.
POLISHED_GATE = 1e-4


def solve_polished_first_order(model: ModelDeclaration, accuracy: float, reason: str,
                               stages: tuple[int, ...] | None = None,
                               when_needed: bool = True) -> Solution | None:
    """(16) by Algorithm 1 (PU (32), DU (33)) then the polish (:mod:`gtvmodel.solve.polish`):
    ``stages[0]`` (default :data:`POLISHED_STAGES`) iterations of
    :func:`gtvmodel.solve_primal_dual` (the adaptive step, no certificates during the run),
    the certificate of the iterate with its own flows (cheap repairs); the iterate is the
    answer when that meets ``accuracy`` (``when_needed``, ``polish="auto"``; otherwise it is
    polished first), the route declines when it is above :data:`POLISHED_GATE`, and else,
    after every stage but the first (a probe), the iterate is polished and the polished
    point kept when certified to ``accuracy``; if not, the next stage runs warm-started from
    the last iterate.  Returns the certified
    :class:`Solution` (``info["route"] == "first_order_polish"``, ``iterations``,
    ``stages``, ``polish``), or None when no stage is certified to ``accuracy`` (the caller's
    next route answers).  Nothing is trusted: the answer is kept only on its certificate
    (34)."""
    warm: Any = None
    never: Any = None  # record_every=None: no certificates during the run (typed int there)
    spent = {"solve": 0.0, "certificate": 0.0, "polish": 0.0}
    done_stages: list[int] = []
    for k, iterations in enumerate(POLISHED_STAGES if stages is None else stages):
        run = solve_primal_dual(model, max_iter=iterations, tol=0.0, record_every=never,
                                warm_start=warm)
        warm = run
        done_stages.append(run.iterations)
        spent["solve"] += run.timings["total"]
        W, U = np.asarray(run.weights), np.asarray(run.flows)
        t0 = time.perf_counter()
        try:
            own = certify(model, W, U, tol=accuracy, project="never", recover=False,
                          fallback=False)
        except GTVError:
            return None
        spent["certificate"] += time.perf_counter() - t0
        if own.relative_gap > POLISHED_GATE:
            return None
        if when_needed and own.success_at(accuracy):
            answer: tuple[np.ndarray, np.ndarray, Any] = (W, U, own)
            polish_info: dict[str, Any] = {"status": "skipped", "reason": POLISH_NOT_NEEDED}
        elif k == 0:
            continue  # the probe: certified, not polished
        else:
            try:
                done = polish(model, W, U, own, accuracy)
            except GTVError:
                continue
            spent["polish"] += done.info.get("time", 0.0)
            answer, polish_info = (done.weights, done.flows, done.certificate), done.info
        cert = answer[2]
        if not cert.success_at(accuracy):
            continue
        info: dict[str, Any] = {
            "lam": model.lam, "route": "first_order_polish", "route_reason": reason,
            "iterations": sum(done_stages), "stages": done_stages, "accuracy": accuracy,
            "polish": polish_info, "certified_gap": cert.gap,
            "certified_relative_gap": cert.relative_gap}
        return route_solution(model, answer[0], answer[1], float(cert.primal_value),
                              "optimal", True, SOLVER_NAME, {"compile": 0.0, **spent}, info,
                              cert)
    return None


#: ``info["polish"]["reason"]`` where :func:`solve_polished_first_order` returned the iterate
#: unpolished (``polish="auto"``): its own flows certify it.
POLISH_NOT_NEEDED = ("polish='auto': Algorithm 1's iterate is certified to the accuracy by its "
                     "own flows")


def stage_tolerances(accuracy: float) -> list[float]:
    """The certified relative gaps the stages of the first-order route aim at: ``accuracy``
    times ``STAGE_FACTOR^j``, from the first such value at most :data:`FIRST_STAGE` down to
    ``accuracy`` (``1e-5, 1e-7, 1e-9`` for the default; one stage when ``accuracy >=
    FIRST_STAGE / STAGE_FACTOR``).

    >>> from gtvmodel.solve.first_order import stage_tolerances
    >>> stage_tolerances(1e-9)
    [1e-05, 1e-07, 1e-09]
    """
    tols = [accuracy]
    while tols[-1] * STAGE_FACTOR <= FIRST_STAGE * (1 + 1e-9):
        tols.append(tols[-1] * STAGE_FACTOR)
    return [float(f"{t:.12g}") for t in reversed(tols)]


def _staged_run(model: ModelDeclaration, accuracy: float,
                options: dict[str, Any]) -> tuple[Any, list[tuple[float, int, float | None]]]:
    """Algorithm 1 in stages (:func:`stage_tolerances`), each warm-started from the last
    iterate of the previous one and started at the step scale ``c`` that balances the
    previous stage's final residuals (:func:`rebalanced`), sharing ``max_iter``.  A given
    ``step`` is kept for one single stage; the stages end once a certificate meets
    ``accuracy``.  Returns the last run and ``(tol, iterations, c)``
    per stage."""
    budget = options.pop("max_iter", FIRST_ORDER_MAX_ITER)
    tols = stage_tolerances(accuracy) if options.get("step") is None else [accuracy]
    stages: list[tuple[float, int, float | None]] = []
    run = None
    for tol in tols:
        run = solve_primal_dual(model, max_iter=budget, tol=tol, **options)
        budget -= run.iterations
        stages.append((tol, run.iterations, run.c))
        if not run.success or budget <= 0 or run.certificate.relative_gap <= accuracy:
            break
        options = {**options, "warm_start": run, "step": ResidualBalancing(c0=rebalanced(run))}
    return run, stages


def rebalanced(run: Any) -> float:
    """The step scale ``c`` that balances the last recorded residuals of a run of Algorithm 1:
    ``p ~ 1/c`` and ``d ~ c`` (:class:`~gtvmodel.primal_dual.steps.ResidualBalancing`), so
    ``c sqrt(p / d)``, the factor clipped to ``[1/REBALANCE_MAX, REBALANCE_MAX]``.

    Measured (``benchmarks/bench_exact_scale.py``'s SBM, 800 nodes, ``lambda = 0.1``): the
    default rule settles at ``c = 2.5`` while the residuals drift apart (``d / p ~ 300`` near
    a relative gap of 1e-9) and needs 3,250 iterations to a certified 1e-9; three stages
    rebalanced between them need 500 (fixed ``c = 0.25``: 700, ``c = 8``: 10,250)."""
    p, d = run.history.primal_residual[-1], run.history.dual_residual[-1]
    if run.c is None or not (np.isfinite(p) and np.isfinite(d) and p > 0 and d > 0):
        return run.c
    return float(run.c * np.clip(np.sqrt(p / d), 1 / REBALANCE_MAX, REBALANCE_MAX))


def _solution(model: ModelDeclaration, run: Any, cert: Any, status: str, certified: bool,
              info: dict[str, Any]) -> Solution:
    """The :class:`Solution` of a first-order run."""
    timings = {"compile": 0.0,
               "solve": run.timings["total"] - run.timings["certificate"],
               "certificate": run.timings["certificate"]}
    return route_solution(model, np.asarray(run.weights), run.flows,
                          float(cert.primal_value), status, certified, SOLVER_NAME, timings,
                          info, cert)


def route_solution(model: ModelDeclaration, W: np.ndarray, U: np.ndarray, objective: float,
                   status: str, success: bool, solver: str, timings: dict[str, float],
                   info: dict[str, Any], cert: Any) -> Solution:
    """The :class:`Solution` of any route of :func:`gtvmodel.solve_exact` (its uniqueness
    report attached; the weights are set on the model)."""
    uniq = uniqueness(model)
    model.set_variable_values(W)
    return Solution(weights=W, flows=U, objective=objective, status=status, success=success,
                    solver=solver, timings=timings, labels=Labels(model.nodes, model.edges),
                    info=info, certificate=cert, unique=uniq.unique,
                    unique_reason=uniq.reason)
