"""Plots of solver results (matplotlib, imported lazily)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import DataError

__all__ = ["convergence"]


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
