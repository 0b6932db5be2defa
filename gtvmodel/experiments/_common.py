"""Shared pieces of the experiments: seeds, progress bars, statistics over seeds, running
Algorithm 1 as the papers did, scoring a solution with its certified gap, figure helpers."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from tqdm.std import tqdm  # the text bar (stderr): no notebook widget needed

from .._validate import check_bool, check_int
from ..certificates.certificate import certify
from ..certificates.kinds import EPS, max_rows
from ..declaration import ModelDeclaration
from ..errors import ParameterError
from ..primal_dual import solve_primal_dual
from ..results import jsonable
from ..solve.exact import solve_exact
from ..theory import verify_recovery
from ..theory.constants import node_hessian_bounds
from .result import Check, Row

__all__ = ["seed_list", "Progress", "stages", "mean_std", "row", "score", "scored",
           "exact_scored", "exact_check", "sum_rounding", "paper_algorithm1", "gaps_sound",
           "one_model_floor", "mse_rounding", "objective_rounding", "chi2_mixture_quantile",
           "recovery_radii", "rms", "certified_distance", "mse_bound", "recovery_check",
           "setting", "new_figure"]


def seed_list(seeds: int | Sequence[int]) -> list[int]:
    """``K`` -> ``[0, ..., K-1]``; a sequence of non-negative integers as given."""
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        return list(range(check_int(seeds, "seeds", min_val=1, where="experiments")))
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
        raise ParameterError(f"experiments: seeds must be a positive count or a non-empty "
                             f"sequence of seeds, got {seeds!r}")
    return [check_int(s, "seeds", min_val=0, where="experiments") for s in seeds]


@dataclass(frozen=True)
class Progress:
    """How an experiment runs and reports its stages (:func:`stages`).

    ``show``: ``None`` (default) a tqdm bar on a terminal and otherwise one line per stage on
    stderr (a piped or logged run shows where it is), ``True`` the same, ``False`` nothing.
    ``out``: a folder to write ``NAME.partial.json`` into after every stage (the runs
    completed so far, so a stopped run leaves its numbers); ``None``: none.
    ``jobs``: how many stages run at once, each in its own process (``1``, the default: one
    after the other in this process).  The stages are independent and deterministic, so the
    results are the same for every ``jobs``; only the order of the progress lines changes.
    """

    show: bool | None = None
    out: Path | None = None
    jobs: int = 1

    def __post_init__(self) -> None:
        check_int(self.jobs, "jobs", min_val=1, where="experiments")

    @classmethod
    def of(cls, progress: Any) -> Progress:
        """``progress`` as given to an experiment: a :class:`Progress`, or ``show``."""
        if isinstance(progress, Progress):
            return progress
        return cls(None if progress is None else check_bool(progress, "progress"))


def stages(run: Callable[[Any], dict[str, Any]], items: Sequence[Any], name: str,
           progress: Any, label: Callable[[Any], str] = str,
           summary: Callable[[dict[str, Any]], str] | None = None) -> list[dict[str, Any]]:
    """``[run(item) for item in items]``, reporting each stage as it completes
    (:class:`Progress`): a tqdm bar on a terminal, else one line per stage on stderr
    (``name: stage k/K (label) done in W s wall, C s CPU`` and ``summary(result)``), and the
    results so far (in ``items`` order) as ``NAME.partial.json`` in ``progress.out``.  With
    ``progress.jobs > 1`` the stages run in that many worker processes (``run`` must then be
    picklable: a module-level function or a :func:`functools.partial` of one); the list
    returned is in ``items`` order either way."""
    prog = Progress.of(progress)
    bar = prog.show is not False and sys.stderr.isatty()
    lines = prog.show is not False and not bar
    items = list(items)
    done: dict[int, dict[str, Any]] = {}
    t_start = time.perf_counter()
    with tqdm(total=len(items), desc=name, disable=not bar, leave=False) as pbar:
        for k, (result, wall, cpu) in _completed(run, items, prog.jobs):
            done[k] = result
            pbar.update(1)
            if lines:
                extra = f": {summary(result)}" if summary is not None else ""
                print(f"{name}: stage {len(done)}/{len(items)} ({label(items[k])}) done in "
                      f"{wall:.1f} s wall, {cpu:.1f} s CPU{extra}", file=sys.stderr, flush=True)
            if prog.out is not None:
                _write_partial(prog.out, name, [done[j] for j in sorted(done)], len(items),
                               time.perf_counter() - t_start)
    return [done[k] for k in range(len(items))]


def _timed(run: Callable[[Any], dict[str, Any]], item: Any
           ) -> tuple[dict[str, Any], float, float]:
    """``run(item)`` with the wall and CPU seconds it took (in the process that ran it)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = run(item)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def _completed(run: Callable[[Any], dict[str, Any]], items: list[Any], jobs: int
               ) -> Iterator[tuple[int, tuple[dict[str, Any], float, float]]]:
    """``(k, _timed(run, items[k]))`` as the stages complete: in order in this process for
    ``jobs = 1`` (or one item), else from ``jobs`` worker processes (started by ``spawn``, so
    no thread or lock state of this process is copied into them); an error in a stage
    cancels the stages not yet started and is raised here."""
    if jobs == 1 or len(items) <= 1:
        for k, item in enumerate(items):
            yield k, _timed(run, item)
        return
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(items)),
                               mp_context=get_context("spawn"))
    try:
        futures = {pool.submit(_timed, run, item): k for k, item in enumerate(items)}
        for future in as_completed(futures):
            yield futures[future], future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _write_partial(out: Path, name: str, done: list[dict[str, Any]], total: int,
                   elapsed: float) -> None:
    """``NAME.partial.json``: the stages completed so far (replaced atomically)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.partial.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"name": name, "completed": len(done), "stages": total,
                               "seconds": elapsed, "runs": jsonable(done)}, indent=1) + "\n",
                   encoding="utf-8")
    tmp.replace(path)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and (population) standard deviation over seeds, as the paper's error bars."""
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std())


def row(quantity: str, paper: str, values: Sequence[float]) -> Row:
    """A table row of ``values`` over the seeds."""
    mean, std = mean_std(values)
    return Row(quantity=quantity, paper=paper, mean=mean, std=std, n=len(values))


def score(model: ModelDeclaration, weights: np.ndarray, flows: Any = None) -> dict[str, float]:
    """The objective (16) of ``weights``, their certified gap (34)
    (:func:`~gtvmodel.certificates.certificate.certify`, which repairs the flows) and the
    rounding bound of that objective (:func:`objective_rounding`)."""
    cert = certify(model, weights, flows)
    return scored(model, cert.primal_value, cert.gap)


def scored(model: ModelDeclaration, objective: float, gap: float) -> dict[str, float]:
    """A score: ``objective`` (16), certified ``gap`` (34) and the ``rounding`` bound of the
    objective (:func:`objective_rounding`), which :func:`gaps_sound` allows for."""
    return {"objective": float(objective), "gap": float(gap),
            "rounding": objective_rounding(model, objective)}


def objective_rounding(model: ModelDeclaration, objective: float) -> float:
    """The floating-point error bound of an objective (16) ``P(W)`` evaluated in float64, by
    the convention of the certificate's own rounding bound
    (:mod:`gtvmodel.certificates.certificate`): ``4 (d + r + 8) eps`` times the magnitudes of
    the summands, ``|P| + sum_i |L_i(w_i)| + sum_e lambda A_e phi(w_i - w_j)``, for ``d``
    weights and ``r`` data rows per node (the longest chain of operations behind one
    summand: a row's ``d``-term product, a node's ``r`` rows, a few more).  The experiments'
    objectives are sums of non-negative terms (squared and logistic losses, norms), whose
    magnitudes sum to ``|P|``: the bound is ``8 (d + r + 8) eps |P|``.  (An objective that is
    a sum of tiny squared residuals of large labels loses more relative accuracy to the
    cancellation in ``X w - y``; ``tests/test_experiment_thresholds.py`` measures the float
    error of the settings' objectives against 60-digit arithmetic.)"""
    return float(8 * (model.dim + max_rows(model) + 8) * EPS * abs(float(objective)))


def exact_scored(model: ModelDeclaration, method: str = "interior",
                 accuracy: float | None = None) -> tuple[np.ndarray, dict[str, float]]:
    """The exact solution (ground truth, :func:`~gtvmodel.solve.exact.solve_exact` by
    ``method``: ``"first_order"`` runs Algorithm 1 to a certified relative gap of 1e-9) and
    its score, with its certified relative gap ``gap / max(1, |P(W)|)`` and the relative gap
    the solve was asked for (``accuracy``, passed to ``solve_exact``; None: its default aim,
    ``solve_exact``'s ``info["accuracy"]`` where a route records it)."""
    sol = solve_exact(model, method=method, accuracy=accuracy)
    cert = sol.certificate  # the solve's self-certificate: certify(model, W, U)
    out = (score(model, sol.weights, sol.flows) if cert is None else
           scored(model, cert.primal_value, cert.gap))
    asked = accuracy if accuracy is not None else sol.info.get("accuracy", float("nan"))
    out["relative_gap"] = out["gap"] / max(1.0, abs(out["objective"]))
    out["accuracy"] = float(asked)
    return sol.weights, out


def exact_check(scores: Sequence[dict[str, float]]) -> Check:
    """Every exact solution (:func:`exact_scored`) certified to the relative gap its solve was
    asked for: ``relative_gap <= accuracy`` (the threshold is the request, not a literal)."""
    if not scores:
        return Check(ok=False, detail="no exact solution to check")
    ratio = [s["relative_gap"] / s["accuracy"] if s["accuracy"] > 0 else np.inf
             for s in scores]
    k = int(np.argmax(ratio))
    return Check(ok=bool(ratio[k] <= 1.0), detail=f"{len(scores)} exact solutions, largest "
                 f"certified relative gap / requested accuracy {ratio[k]:.3g} (relative gap "
                 f"{scores[k]['relative_gap']:.3g} <= asked {scores[k]['accuracy']:g})")


def sum_rounding(terms: int) -> float:
    """``gamma_k = k u / (1 - k u)`` for ``k`` floating-point operations in sequence (``u``
    the unit roundoff of float64; Higham, *Accuracy and Stability of Numerical Algorithms*,
    Lemma 3.1): the relative error a sum of ``k`` non-negative terms computed in order can
    carry.  The rounding allowance of checks that compare two such sums."""
    ku = terms * np.finfo(float).eps / 2.0
    return float(ku / (1.0 - ku))


def paper_algorithm1(model: ModelDeclaration, iterations: int, step: float | None = 1.0,
                     callback: Callable[..., Any] | None = None, repair_flows: bool = False
                     ) -> tuple[np.ndarray, dict[str, float]]:
    """Algorithm 1 as the papers ran it: a fixed number ``R`` of iterations (``tol = 0``) with
    the paper's steps ``tau_i = 1/deg(i)``, ``sigma_e = 1/2`` (``step = 1.0``; ``None``: the
    package's adaptive steps), certified once at the end; the weights and their score.
    ``callback(k, weights, flows)`` runs after every iteration (it must return None).
    ``repair_flows``: certify from the weights alone (:func:`certify` builds the flows)
    instead of projecting Algorithm 1's last flows (that projection is one CVXPY problem in
    ``|E| d`` variables: too large for 001 Table I's 1275 edges in ``d = 100``).  The run
    itself certifies nothing (``record_every=None``: its iterates are the same, and the score
    certifies the last one)."""
    res = solve_primal_dual(model, max_iter=iterations, tol=0.0, step=step,
                            record_every=None, callback=callback)
    return res.weights, score(model, res.weights, None if repair_flows else res.flows)


def gaps_sound(pairs: Sequence[tuple[dict[str, float], dict[str, float]]]) -> Check:
    """Each certified gap bounds the true suboptimality: for ``(candidate, exact)`` scores
    (:func:`scored`), ``gap(W) >= P(W) - P(W_exact)``, a lower bound of ``P(W) - P*`` since
    ``P* <= P(W_exact)``, up to the rounding of the two objectives (each score's
    ``rounding``, :func:`objective_rounding`) and of this comparison's two subtractions
    (``eps (gap + |P(W)| + |P(W_exact)|)``): no fixed allowance.  A gap below that margin
    would be unsound."""
    if not pairs:
        return Check(ok=False, detail="no scored solution to check")
    slack, allowed = [], []
    for c, e in pairs:
        allow = (c["rounding"] + e["rounding"]
                 + EPS * (abs(c["gap"]) + abs(c["objective"]) + abs(e["objective"])))
        slack.append(c["gap"] - (c["objective"] - e["objective"]) + allow)
        allowed.append(allow)
    k = int(np.argmin(slack))
    return Check(ok=bool(slack[k] >= 0.0), detail=f"{len(slack)} scored solutions, the "
                 f"smallest gap - (P(W) - P(W_exact)) + rounding margin is {slack[k]:.3g} "
                 f"(its rounding allowance {allowed[k]:.2g}, relative "
                 f"{allowed[k] / max(abs(pairs[k][1]['objective']), 1e-300):.2g})")


def chi2_mixture_quantile(weights: np.ndarray, false_rate: float) -> float:
    """An upper ``1 - false_rate`` quantile of ``Z = sum_k a_k xi_k^2`` (``a_k >= 0``,
    ``xi_k`` i.i.d. standard normal): ``sum a + 2 ||a||_2 sqrt(x) + 2 max(a) x`` with
    ``x = ln(1 / false_rate)``, by B. Laurent and P. Massart, *Adaptive estimation of a
    quadratic functional by model selection*, Ann. Statist. 28 (2000), Lemma 1:
    ``P(Z - sum a >= 2 ||a||_2 sqrt(x) + 2 max(a) x) <= exp(-x)``.  ``Z`` is the squared norm
    of a centred Gaussian vector whose covariance has the eigenvalues ``a``."""
    a = np.asarray(weights, dtype=float)
    if a.size and a.min() < 0.0 or not 0.0 < false_rate < 1.0:
        raise ParameterError(f"chi2_mixture_quantile: need weights >= 0 and 0 < false_rate "
                             f"< 1, got min weight {a.min(initial=0.0):g}, false_rate "
                             f"{false_rate!r}")
    x = float(np.log(1.0 / false_rate))
    return float(a.sum() + 2.0 * np.linalg.norm(a) * np.sqrt(x) + 2.0 * a.max(initial=0.0) * x)


def one_model_floor(true_weights: np.ndarray) -> float:
    """The least MSE (40) one model for all the given nodes can have:
    ``min_v (1/n) sum_i ||v - w_bar_i||^2 = (1/n) sum_i ||w_bar_i - mean_j w_bar_j||^2`` (the
    mean minimizes it); ``16 p (1 - p)`` for two clusters ``w_bar = (2, 2), (-2, 2)`` in
    proportions ``p, 1 - p``."""
    W = np.asarray(true_weights, dtype=float)
    return float(((W - W.mean(axis=0)) ** 2).sum(axis=1).mean())


def mse_rounding(nodes: int, dim: int) -> float:
    """The relative rounding of an MSE (40) or a one-model floor over ``nodes`` nodes in
    ``dim`` dimensions (:func:`sum_rounding` of the
    ``nodes + dim + 2`` operations behind each: a difference, ``dim`` squares summed, ``nodes``
    terms summed, one division; the floor's mean enters only to second order, its first-order
    error summing to zero)."""
    return sum_rounding(nodes + dim + 2)


def recovery_radii(data: Any, model: ModelDeclaration) -> dict[str, Any]:
    """Theorem 2 of paper 001 on a noiseless instance, as a radius about every node's true
    weights.

    :func:`~gtvmodel.theory.verify_recovery` decides exactly whether the cluster-graph solution
    ``w_tilde`` (46), lifted to the nodes (54), is optimal for (16) at ``model.lam``
    (``recovered``: its flow congestion is at most 1).  The cluster-graph optimum satisfies
    ``||w_tilde_C - w_bar_C||_2 <= kappa_p |dC| lambda / alpha_C`` (half of (37), by strong
    monotonicity: ``ClusterReport.sharp_bound``, docs/theory.md) whether or not Definition 1
    holds.  With noiseless labels (``sigma = 0``, the setting of the checks that
    call this) the cluster minimizer (9) is the cluster's true weight, so on a recovered
    instance node ``i`` of cluster ``C`` lies within ``radius_i = kappa_p |dC| lambda /
    alpha_C`` of its true weights; ``inf`` where recovery is not certified.  ``mu``: the
    smallest ``lambda_min(H_lo_i)`` over the nodes with data, the Euclidean strong-convexity
    modulus of their losses (:func:`mse_bound`)."""
    rep = verify_recovery(model, data.partition(), model.lam)
    radius = np.full(len(data.clusters), np.inf)
    if rep.success:  # half of (37) = sharp_bound; rep.bound in partition order = cluster id
        radius = 0.5 * np.array(list(rep.bound.values()))[data.clusters]
    H_lo, _ = node_hessian_bounds(model)
    mu = np.linalg.eigvalsh(H_lo[data.has_data])[:, 0]
    return {"recovered": bool(rep.success), "congestion": float(rep.congestion),
            "radius": radius, "mu": float(mu.min()) if mu.size else 0.0}


def rms(values: np.ndarray) -> float:
    """Root mean square ``sqrt(mean_i v_i^2)``, the scale of an MSE (40)."""
    return float(np.sqrt(np.mean(np.square(values))))


def certified_distance(gap: float, mu: float) -> float:
    """``sqrt(2 G / mu)``: how far from the optimum ``W*`` any node's weights ``w_i`` of a
    candidate with certified gap ``G`` (34) can be where the node's loss is ``mu``-strongly
    convex (``G >= P(W) - P* >= (mu / 2) ||w_i - w*_i||^2``); ``inf`` for ``mu <= 0``."""
    if mu <= 0.0:
        return float("inf")
    return float(np.sqrt(2.0 * max(gap, 0.0) / mu))


def mse_bound(rms_radius: float, mu: float, gap: float) -> float:
    """The largest MSE (40) over a set of nodes that a candidate ``W`` with certified gap
    ``G`` (34) can have on a recovered instance (:func:`recovery_radii`):
    ``(rms_radius + sqrt(2 G / mu))^2``.

    By the triangle inequality for the root mean square, ``RMS(W - W_bar) <= RMS(W* - W_bar)
    + max_i ||w_i - w*_i||_2``, where ``W*`` is the recovered optimum (within ``radius_i`` of
    ``w_bar_i``, so ``RMS(W* - W_bar) <= rms_radius``) and ``||w_i - w*_i||_2^2 <= 2 G / mu``
    at every node with data: ``G >= P(W) - P* >= (mu / 2) sum_{i in M} ||w_i - w*_i||^2`` by
    the strong convexity of their losses and the convexity of the rest (which also makes
    ``w*`` unique on them).  A node without data has no such modulus (its weights need not be
    unique at the optimum): there the bound allows the same deviation as a node with data,
    an expectation rather than a theorem.  NaN (no bound) where recovery is not certified
    (``rms_radius = inf``) or ``mu = 0``."""
    if not np.isfinite(rms_radius) or mu <= 0.0:
        return float("nan")
    return float((rms_radius + certified_distance(gap, mu)) ** 2)


def recovery_check(items: Sequence[tuple[str, float, float]], what: str) -> Check:
    """``mse <= bound`` (:func:`mse_bound`) for every ``(label, mse, bound)``; a NaN bound
    (recovery not certified, or no strong convexity) fails.  ``what`` opens the detail."""
    ratios = [np.inf if np.isnan(b) or np.isnan(m) else m / b if b > 0 else
              (0.0 if m <= 0 else np.inf) for _, m, b in items]
    if not ratios:
        return Check(ok=False, detail="no solution to check")
    k = int(np.argmax(ratios))
    label, mse, bound = items[k]
    return Check(ok=bool(ratios[k] <= 1.0), detail=f"{what}: {len(items)} MSEs, largest MSE / "
                 f"bound {ratios[k]:.3g} ({label}: MSE {mse:.3g} <= (RMS radius + sqrt(2 "
                 f"gap / mu))^2 = {bound:.3g}"
                 + ("; NaN: recovery not certified)" if np.isnan(bound) else ")"))


def setting(cfg: dict[str, Any]) -> dict[str, Any]:
    """An experiment's configuration for its JSON: tuples (sweeps) as lists of plain numbers."""
    def plain(v: Any) -> Any:
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        return float(v) if isinstance(v, np.floating) else v

    return {k: plain(v) for k, v in cfg.items()}


def new_figure(ncols: int = 1, width: float = 5.2, height: float = 4.0) -> tuple[Figure, Any]:
    """A matplotlib Figure (not managed by pyplot, so nothing to close) with ``ncols`` axes."""
    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, axes
