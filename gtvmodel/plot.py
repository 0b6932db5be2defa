"""Plots of solver results (matplotlib, imported lazily)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._validate import check_option
from .errors import DataError

__all__ = ["convergence", "lam_path", "comparison"]


def convergence(result: Any, ax: Any = None, *, relative: bool = False) -> Any:
    """Draw a :class:`~gtvmodel.primal_dual.PrimalDualResult`'s history: the certified duality
    gap (34) on a log scale (left axis) and the primal objective ``P(w)`` (right axis) against
    the iteration.  Returns the left axis (the objective's axis is ``ax.right``).

    ``relative=True`` plots ``gap / max(1, |P|)`` (what ``tol`` is compared with).  Iterations
    whose certificate is infinite (flows not repairable to a dual-feasible point, or weights
    violating constraints) are left out of the gap curve and marked on the axis.
    """
    import matplotlib.pyplot as plt

    hist = getattr(result, "history", None)
    if hist is None or not hasattr(hist, "gap"):
        raise DataError("convergence() needs a result with a history (solve_primal_dual)")
    if len(hist) == 0:
        raise DataError("the result's history is empty: nothing to plot")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    it = np.asarray(hist.iteration)
    gap = np.asarray(hist.relative_gap if relative else hist.gap, dtype=float)
    finite = np.isfinite(gap) & (gap > 0)
    label = "certified relative gap" if relative else "certified gap P(w) - D(u')"
    ax.semilogy(it[finite], gap[finite], "o-", ms=3, color="C0", label=label)
    if (~np.isfinite(gap)).any():
        ax.plot(it[~np.isfinite(gap)], np.full((~np.isfinite(gap)).sum(),
                                               gap[finite].min() if finite.any() else 1.0),
                "x", color="C3", label="no finite certificate")
    ax.set_xlabel("iteration k")
    ax.set_ylabel(label, color="C0")
    right = ax.twinx()
    right.plot(it, hist.primal, "-", color="C1", label="objective P(w)")
    right.set_ylabel("objective P(w)", color="C1")
    handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], loc="upper right")
    status = getattr(result, "status", "")
    ax.set_title(f"Algorithm 1: {getattr(result, 'iterations', len(it))} iterations, {status}")
    ax.right = right
    return ax


def lam_path(path: Any, ax: Any = None, *, show: str = "weights", validation: bool = True,
             ) -> Any:
    """Draw a :class:`~gtvmodel.path.LamPath` against ``lambda`` (log axis): the weights
    ``w_i(lambda)`` (``show="weights"``: one line per node and coordinate) or the number of
    clusters (``show="clusters"``) on the left axis; with ``validation`` and validation scores
    in the path, the mean validation error on a right axis (``ax.right``) with the selected
    ``lambda`` marked; the consensus threshold ``lambda_crit`` as a vertical line when the path
    has it.  ``lambda = 0`` is drawn at the left end of the axis (a log axis has no zero).
    Returns the left axis.
    """
    import matplotlib.pyplot as plt

    check_option(show, "show", ("weights", "clusters"), where="plot.lam_path")
    lams = np.asarray(getattr(path, "lams", None) if path is not None else None, dtype=float)
    if lams.ndim != 1 or lams.size == 0:
        raise DataError("lam_path() needs a LamPath (gtvmodel.lam_path)")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    x = _log_positions(lams)
    order = np.argsort(x)
    if show == "weights":
        W = path.weights.reshape(len(lams), -1)[order]
        ax.plot(x[order], W, "-", lw=0.8, alpha=0.6)
        ax.set_ylabel("w_i(λ) (one line per node, coordinate)")
    else:
        ax.plot(x[order], path.clusters[order], "o-", ms=3, color="C0")
        ax.set_ylabel("number of clusters")
    ax.set_xscale("log")
    ax.set_xlabel("λ" + (" (λ = 0 at the left end)" if (lams == 0).any() else ""))
    if np.isfinite(path.threshold):
        ax.axvline(path.threshold, color="k", ls="--", lw=1,
                   label=f"consensus threshold λ_crit = {path.threshold:.3g}")
    handles = ax.get_legend_handles_labels()[0]
    if validation and path.validation_error is not None:
        right = ax.twinx()
        right.plot(x[order], path.validation_error[order], "s-", ms=3, color="C3",
                   label="mean validation error")
        if path.selected is not None:
            right.plot([x[path.selected]], [path.validation_error[path.selected]], "*",
                       ms=14, color="C3", label=f"selected λ = {path.selected_lam:.3g}")
        right.set_ylabel("mean validation error", color="C3")
        handles += right.get_legend_handles_labels()[0]
        ax.right = right
    if handles:
        ax.legend(handles, [h.get_label() for h in handles], loc="best", fontsize="small")
    ax.set_title(f"λ path ({path.method}, {len(lams)} values)")
    return ax


def _log_positions(lams: np.ndarray) -> np.ndarray:
    """``lambda`` values for a log axis: zeros at a tenth of the smallest positive one."""
    positive = lams[lams > 0]
    zero_at = positive.min() / 10.0 if positive.size else 1.0
    return np.where(lams > 0, lams, zero_at)


def comparison(table: Any, ax: Any = None, *, column: str | None = None) -> Any:
    """Bar chart of a :class:`~gtvmodel.comparison.Comparison`'s score column (default: the
    validation score if the table has one, else the training score), one bar per method, the
    certified gap (34) written on each bar where the method has one.  Returns the axis."""
    import matplotlib.pyplot as plt

    columns = getattr(table, "columns", None)
    if columns is None or not hasattr(table, "rows"):
        raise DataError("comparison() needs a Comparison (gtvmodel.compare)")
    if column is None:
        column = next((c for c in ("validation", "train", "true_mse") if c in columns), None)
        if column is None:
            raise DataError("the comparison has no score column to plot")
    check_option(column, "column", [c for c in columns if c != "target"],
                 where="plot.comparison")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    values = np.asarray(table.values[column], dtype=float)
    gaps = np.asarray(table.values["gap"], dtype=float) if "gap" in columns else None
    pos = np.arange(len(table.rows))
    bars = ax.bar(pos, np.nan_to_num(values), color="C0")
    for k, bar in enumerate(bars):
        text = "gap -" if gaps is None or np.isnan(gaps[k]) else f"gap {gaps[k]:.1e}"
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize="small", xytext=(0, 2),
                    textcoords="offset points")
    ax.set_xticks(pos, table.rows)
    label = table.metric if column in ("train", "validation") else ""
    ax.set_ylabel(f"{column} {label}".strip())
    ax.set_title("methods compared (certified gap (34) on each bar)")
    ax.margins(y=0.15)
    return ax
