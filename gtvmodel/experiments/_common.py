"""Shared pieces of the experiments: seeds, progress bars, statistics over seeds, running
Algorithm 1 as the papers did, scoring a solution with its certified gap, figure helpers."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from tqdm.std import tqdm  # the text bar (stderr): no notebook widget needed

from .._validate import check_bool, check_int
from ..certificates.certificate import certify
from ..declaration import ModelDeclaration
from ..errors import ParameterError
from ..primal_dual import solve_primal_dual
from ..solve.exact import solve_exact
from .result import Check, Row

__all__ = ["seed_list", "progress_bar", "mean_std", "row", "score", "exact_scored",
           "paper_algorithm1", "gaps_sound", "setting", "new_figure"]


def seed_list(seeds: int | Sequence[int]) -> list[int]:
    """``K`` -> ``[0, ..., K-1]``; a sequence of non-negative integers as given."""
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        return list(range(check_int(seeds, "seeds", min_val=1, where="experiments")))
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
        raise ParameterError(f"experiments: seeds must be a positive count or a non-empty "
                             f"sequence of seeds, got {seeds!r}")
    return [check_int(s, "seeds", min_val=0, where="experiments") for s in seeds]


def progress_bar(items: Iterable[Any], total: int, desc: str, progress: bool | None) -> Any:
    """``tqdm``'s text bar over ``items`` on stderr; ``progress=None`` shows it only when
    stderr is a terminal."""
    show = sys.stderr.isatty() if progress is None else check_bool(progress, "progress")
    return tqdm(items, total=total, desc=desc, disable=not show, leave=False)


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


def exact_scored(model: ModelDeclaration) -> tuple[np.ndarray, dict[str, float]]:
    """The exact solution (ground truth, :func:`~gtvmodel.solve.exact.solve_exact`) and its
    score."""
    sol = solve_exact(model)
    return sol.weights, score(model, sol.weights, sol.flows)


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
