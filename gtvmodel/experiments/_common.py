"""Shared pieces of the experiments: seeds, progress bars, statistics over seeds, running
Algorithm 1 as the papers did, scoring a solution with its certified gap, figure helpers."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from tqdm.std import tqdm  # the text bar (stderr): no notebook widget needed

from .._validate import check_bool, check_int
from ..certificates.certificate import certify
from ..declaration import ModelDeclaration
from ..errors import ParameterError
from ..primal_dual import solve_primal_dual
from ..results import jsonable
from ..solve.exact import solve_exact
from .result import Check, Row

__all__ = ["seed_list", "Progress", "stages", "mean_std", "row", "score", "exact_scored",
           "paper_algorithm1", "gaps_sound", "setting", "new_figure"]


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
    """How an experiment reports its stages (:func:`stages`).

    ``show``: ``None`` (default) a tqdm bar on a terminal and otherwise one line per stage on
    stderr (a piped or logged run shows where it is), ``True`` the same, ``False`` nothing.
    ``out``: a folder to write ``NAME.partial.json`` into after every stage (the runs
    completed so far, so a stopped run leaves its numbers); ``None``: none.
    """

    show: bool | None = None
    out: Path | None = None

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
    results so far as ``NAME.partial.json`` in ``progress.out``."""
    prog = Progress.of(progress)
    bar = prog.show is not False and sys.stderr.isatty()
    lines = prog.show is not False and not bar
    done: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for k, item in enumerate(tqdm(items, total=len(items), desc=name, disable=not bar,
                                  leave=False)):
        wall, cpu = time.perf_counter(), time.process_time()
        done.append(run(item))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if lines:
            extra = f": {summary(done[-1])}" if summary is not None else ""
            print(f"{name}: stage {k + 1}/{len(items)} ({label(item)}) done in {wall:.1f} s "
                  f"wall, {cpu:.1f} s CPU{extra}", file=sys.stderr, flush=True)
        if prog.out is not None:
            _write_partial(prog.out, name, done, len(items), time.perf_counter() - t_start)
    return done


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
    """The objective (16) of ``weights`` and their certified gap (34)
    (:func:`~gtvmodel.certificates.certificate.certify`, which repairs the flows)."""
    cert = certify(model, weights, flows)
    return {"objective": float(cert.primal_value), "gap": float(cert.gap)}


def exact_scored(model: ModelDeclaration, method: str = "interior"
                 ) -> tuple[np.ndarray, dict[str, float]]:
    """The exact solution (ground truth, :func:`~gtvmodel.solve.exact.solve_exact` by
    ``method``: ``"first_order"`` runs Algorithm 1 to a certified relative gap of 1e-9) and
    its score."""
    sol = solve_exact(model, method=method)
    cert = sol.certificate  # the solve's self-certificate: certify(model, W, U)
    if cert is None:
        return sol.weights, score(model, sol.weights, sol.flows)
    return sol.weights, {"objective": float(cert.primal_value), "gap": float(cert.gap)}


def paper_algorithm1(model: ModelDeclaration, iterations: int, step: float | None = 1.0,
                     callback: Callable[..., Any] | None = None, repair_flows: bool = False
                     ) -> tuple[np.ndarray, dict[str, float]]:
    """Algorithm 1 as the papers ran it: a fixed number ``R`` of iterations (``tol = 0``) with
    the paper's steps ``tau_i = 1/deg(i)``, ``sigma_e = 1/2`` (``step = 1.0``; ``None``: the
    package's adaptive steps), certified once at the end; the weights and their score.
    ``callback(k, weights, flows)`` runs after every iteration (it must return None).
    ``repair_flows``: certify from the weights alone (:func:`certify` builds the flows)
    instead of projecting Algorithm 1's last flows (that projection is one CVXPY problem in
    ``|E| d`` variables: too large for 001 Table I's 1275 edges in ``d = 100``)."""
    res = solve_primal_dual(model, max_iter=iterations, tol=0.0, step=step,
                            record_every=iterations, callback=callback)
    return res.weights, score(model, res.weights, None if repair_flows else res.flows)


def gaps_sound(pairs: Sequence[tuple[dict[str, float], dict[str, float]]], rel: float = 1e-7
               ) -> Check:
    """Each certified gap bounds the true suboptimality: for ``(candidate, exact)`` scores,
    ``gap(W) >= P(W) - P(W_exact)``, a lower bound of ``P(W) - P*`` since ``P* <= P(W_exact)``
    (up to ``rel * max(1, |P|)`` rounding)."""
    slack = [c["gap"] - (c["objective"] - e["objective"])
             + rel * max(1.0, abs(e["objective"])) for c, e in pairs]
    worst = min(slack) if slack else 0.0
    return Check(ok=worst >= 0.0, detail=f"{len(slack)} scored solutions, the smallest "
                 f"gap - (P(W) - P*) margin is {worst:.3g}")


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
