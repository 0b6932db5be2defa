"""Plots of solver results (matplotlib, imported lazily)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._validate import as_finite_array, check_bool, check_int, check_option
from .declaration import ModelDeclaration
from .errors import DataError, GraphError
from .graph import EmpiricalGraph

__all__ = ["convergence", "lam_path", "comparison", "graph", "weights_scatter", "recovery"]


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


# ---------------------------------------------------------------- teaching plots (issue 13)
#: Font sizes readable at projector size (titles, axis labels, ticks, legends).
_FONT = {"title": 15, "label": 14, "tick": 12, "legend": 12}


def _axes(ax: Any, figsize: tuple[float, float]) -> Any:
    """``ax``, or the axes of a new figure of ``figsize``."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def _style(ax: Any, title: str | None = None) -> None:
    """Projector-size fonts on ``ax``'s labels, ticks and title."""
    ax.xaxis.label.set_size(_FONT["label"])
    ax.yaxis.label.set_size(_FONT["label"])
    ax.tick_params(which="both", labelsize=_FONT["tick"])
    if title is not None:
        ax.set_title(title, fontsize=_FONT["title"])


def _empirical_graph(model_or_graph: Any) -> tuple[Any, list, np.ndarray]:
    """The networkx graph, its node order and its oriented edges ``(e+, e-)`` (model order)."""
    if isinstance(model_or_graph, ModelDeclaration):
        return model_or_graph.graph, model_or_graph.nodes, model_or_graph.edges
    if hasattr(model_or_graph, "nodes") and hasattr(model_or_graph, "edges"):
        eg = EmpiricalGraph(model_or_graph)
        return model_or_graph, eg.nodes, eg.edges
    raise GraphError("model_or_graph must be a GTVModel or a networkx.Graph, "
                     f"got {type(model_or_graph).__name__}")


def _column(values: Any, name: str, rows: int, coordinate: int) -> np.ndarray:
    """``values`` as one number per row: a ``(rows,)`` array, or column ``coordinate`` of a
    ``(rows, d)`` array (weights ``w_i`` or flows ``u_e``)."""
    arr = as_finite_array(values, name)
    if arr.ndim == 2 and arr.shape[0] == rows:
        coordinate = check_int(coordinate, "coordinate", min_val=0, max_val=arr.shape[1] - 1,
                               where=name, error=DataError)
        return arr[:, coordinate]
    if arr.shape != (rows,):
        raise DataError(f"{name} must have shape ({rows},) or ({rows}, d), got {arr.shape}")
    return arr


def _is_labels(values: Any) -> bool:
    """Integer (or bool) 1-D labels such as cluster indices, rather than real values."""
    arr = np.asarray(values)
    return arr.ndim == 1 and arr.dtype.kind in "iub"


def _draw_nodes(ax: Any, G: Any, pos: dict, nodes: list, node_color: Any, coordinate: int,
                node_label: str, node_size: float, vrange: tuple | None) -> None:
    """Nodes uniform, by cluster (categorical colours and a legend) or by a value (colorbar)."""
    import matplotlib.pyplot as plt
    import networkx as nx

    n = len(nodes)
    if node_color is None:
        nx.draw_networkx_nodes(G, pos, nodelist=nodes, node_color="C0", node_size=node_size,
                               ax=ax)
    elif _is_labels(node_color):
        labels = np.asarray(node_color)
        if labels.shape != (n,):
            raise DataError(f"node_color (cluster labels) must have shape ({n},), "
                            f"got {labels.shape}")
        for k, c in enumerate(np.unique(labels)):
            sel = [nodes[i] for i in np.flatnonzero(labels == c)]
            nx.draw_networkx_nodes(G, pos, nodelist=sel, node_color=f"C{k % 10}",
                                   node_size=node_size, ax=ax, label=f"{node_label} {c}")
        ax.legend(fontsize=_FONT["legend"], loc="upper left", bbox_to_anchor=(1.0, 1.0),
                  markerscale=0.7, frameon=False)
    else:
        vals = _column(node_color, "node_color", n, coordinate)
        lo, hi = (None, None) if vrange is None else vrange
        coll = nx.draw_networkx_nodes(G, pos, nodelist=nodes, node_color=vals, vmin=lo, vmax=hi,
                                      cmap="viridis", node_size=node_size, ax=ax,
                                      edgecolors="k", linewidths=0.5)
        bar = plt.colorbar(coll, ax=ax, fraction=0.046, pad=0.02)
        bar.set_label(node_label, fontsize=_FONT["label"])
        bar.ax.tick_params(labelsize=_FONT["tick"])


def _draw_edges(ax: Any, G: Any, pos: dict, nodes: list, E: np.ndarray, edge_values: Any,
                coordinate: int, arrows: bool, edge_label: str, node_size: float) -> None:
    """Edges thin and grey, or by a value: width and colour by ``|value|`` (colorbar) and,
    with ``arrows``, an arrow in the direction of a flow (``u_e > 0``: ``e+ -> e-``)."""
    import matplotlib.pyplot as plt
    import networkx as nx

    pairs = [(nodes[a], nodes[b]) for a, b in E]
    if edge_values is None:
        nx.draw_networkx_edges(G, pos, edgelist=pairs, ax=ax, edge_color="0.6", width=1.0,
                               node_size=node_size)
        return
    vals = _column(edge_values, "edge_values", len(E), coordinate)
    mag = np.abs(vals)
    top = mag.max() if mag.size and mag.max() > 0 else 1.0
    widths = 0.8 + 5.0 * mag / top
    if arrows:  # orient each drawn edge along its flow: the flow from a to b is flow((a, b))
        pairs = [(h, t) if v >= 0 else (t, h) for (h, t), v in zip(pairs, vals, strict=True)]
        D = nx.DiGraph()
        D.add_nodes_from(G.nodes)
        D.add_edges_from(pairs)
        G = D
    coll = nx.draw_networkx_edges(G, pos, edgelist=pairs, ax=ax, width=widths, edge_color=mag,
                                  edge_cmap=plt.get_cmap("plasma"), edge_vmin=0.0,
                                  edge_vmax=top, arrows=arrows, node_size=node_size,
                                  **({"arrowsize": 18} if arrows else {}))
    mappable = plt.cm.ScalarMappable(cmap="plasma", norm=plt.Normalize(0.0, top))
    bar = plt.colorbar(mappable, ax=ax, orientation="horizontal", fraction=0.05, pad=0.03,
                       shrink=0.8)
    bar.set_label(edge_label, fontsize=_FONT["label"])
    bar.ax.tick_params(labelsize=_FONT["tick"])
    ax.edge_collection = coll


def graph(model_or_graph: Any, *, node_color: Any = None, edge_values: Any = None,
          coordinate: int = 0, arrows: bool = False, seed: int = 0, pos: dict | None = None,
          node_label: str | None = None, edge_label: str | None = None,
          node_range: tuple[float, float] | None = None, with_labels: bool = False,
          title: str | None = None, ax: Any = None) -> Any:
    """Draw the empirical graph ``G = (V, E, A)`` (paper 001 Section II; lecture notes
    "Networked Data and Models", 6.1) with networkx, nodes and edges coloured by what a lesson
    shows.  Returns the Axes (``ax.pos`` holds the node positions, to reuse in the next
    drawing).

    ``node_color``: ``None`` (one colour); integer labels ``(n,)`` (clusters: categorical
    colours and a legend); real values ``(n,)`` or weights ``(n, d)`` (column ``coordinate``,
    e.g. ``w_i[0]``: a colour scale with a colorbar, over ``node_range = (lo, hi)`` if given,
    to compare drawings).  ``edge_values``: ``None`` (grey), or one
    value per edge in model order (``model.edges``: weights ``A_e``, flows ``u_e`` as ``(|E|,)``
    or ``(|E|, d)``, column ``coordinate``), drawn with width and colour growing with the
    magnitude and a colorbar; ``arrows=True`` points each edge in the direction of its flow in
    the package's sign convention (``u_e > 0`` flows from ``e+`` to ``e-``; docs/conventions.md,
    "Flow sign").  The layout is ``networkx.spring_layout`` with ``seed`` unless ``pos`` is
    given.  Errors name the argument (:class:`~gtvmodel.errors.DataError`,
    :class:`~gtvmodel.errors.GraphError`).
    """
    import networkx as nx
    from matplotlib import patheffects

    G, nodes, E = _empirical_graph(model_or_graph)
    arrows = check_bool(arrows, "arrows", where="graph")
    seed = check_int(seed, "seed", min_val=0, where="graph", error=DataError)
    if arrows and edge_values is None:
        raise DataError("graph: arrows=True needs edge_values (the flows whose direction to draw)")
    ax = _axes(ax, (7.0, 5.5))
    if pos is None:
        pos = nx.spring_layout(G, seed=seed)
    elif set(pos) != set(nodes):
        raise DataError("graph: pos must give a position for every node (and only those)")
    size = 300.0 if len(nodes) <= 30 else 120.0
    default_node = "cluster" if _is_labels(node_color) else f"w_i[{coordinate}]"
    _draw_edges(ax, G, pos, nodes, E, edge_values, coordinate, arrows,
                edge_label or f"|edge value [{coordinate}]|", size)
    _draw_nodes(ax, G, pos, nodes, node_color, coordinate, node_label or default_node, size,
                node_range)
    if with_labels:  # white on a dark outline: readable on every node colour
        texts = nx.draw_networkx_labels(G, pos, ax=ax, font_size=_FONT["tick"], font_color="w")
        for text in texts.values():
            text.set_path_effects([patheffects.withStroke(linewidth=3, foreground="k")])
    ax.set_axis_off()
    _style(ax, title)
    ax.pos = pos
    return ax


def weights_scatter(weights: Any, *, true_weights: Any = None, clusters: Any = None,
                    dims: tuple[int, int] = (0, 1), title: str | None = None,
                    ax: Any = None) -> Any:
    """Scatter the learnt local parameters ``w_i`` (rows of an ``(n, d)`` array) in two of
    their coordinates ``dims``, coloured by ``clusters`` (integer labels ``(n,)``), with the
    true parameters ``w_bar`` (``true_weights``, ``(n, d)`` or one row per cluster) marked as
    large crosses: paper 001 Fig. 7's picture.  Returns the Axes."""
    W = as_finite_array(weights, "weights", ndim=2)
    n, d = W.shape
    if len(dims) != 2:
        raise DataError(f"dims must name two coordinates, got {dims!r}")
    a, b = (check_int(k, "dims", min_val=0, max_val=d - 1, where="weights_scatter",
                      error=DataError) for k in dims)
    labels = np.zeros(n, dtype=int) if clusters is None else np.asarray(clusters)
    if labels.shape != (n,) or not _is_labels(labels):
        raise DataError(f"clusters must be integer labels of shape ({n},), got "
                        f"{np.asarray(clusters).dtype} {np.asarray(clusters).shape}")
    ax = _axes(ax, (6.0, 5.0))
    for k, c in enumerate(np.unique(labels)):
        sel = labels == c
        ax.scatter(W[sel, a], W[sel, b], s=50, color=f"C{k % 10}", alpha=0.7,
                   label="learnt w_i" if clusters is None else f"learnt w_i, cluster {c}")
    if true_weights is not None:
        T = as_finite_array(true_weights, "true_weights", ndim=2)
        if T.shape[1] != d:
            raise DataError(f"true_weights must have d = {d} columns, got {T.shape[1]}")
        centres = np.unique(T, axis=0)
        ax.scatter(centres[:, a], centres[:, b], s=260, marker="X", color="k",
                   edgecolors="w", linewidths=1.5, label="true w_bar", zorder=3)
    ax.set_xlabel(f"w_i[{a}]")
    ax.set_ylabel(f"w_i[{b}]")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=_FONT["legend"], loc="best")
    _style(ax, title)
    return ax


def _recovery_values(report_or_values: Any, measured: Any, lam: Any) -> tuple:
    """``(x, bound, measured, per_lambda)``: columns per cluster, rows per bar or per ``lam``."""
    reports = report_or_values if isinstance(report_or_values, (list, tuple)) else None
    if reports is not None and reports and all(hasattr(r, "deviation") for r in reports):
        bound = np.array([[r.bound[c] for c in r.bound] for r in reports], dtype=float)
        meas = np.array([[r.deviation[c] for c in r.bound] for r in reports], dtype=float)
        return np.array([r.lam for r in reports], dtype=float), bound, meas, True
    if hasattr(report_or_values, "deviation") and hasattr(report_or_values, "bound"):
        r = report_or_values
        bound = np.array([r.bound[c] for c in r.bound], dtype=float)[None]
        meas = np.array([r.deviation[c] for c in r.bound], dtype=float)[None]
        return None, bound, meas, False
    if measured is None:
        raise DataError("recovery: measured errors are needed with bound values "
                        "(or pass a RecoveryReport / a list of them)")
    bound = np.asarray(report_or_values, dtype=float)
    meas = as_finite_array(measured, "measured")
    if bound.shape != meas.shape or bound.ndim not in (1, 2):
        raise DataError(f"recovery: bound {bound.shape} and measured {meas.shape} must have "
                        "the same shape, (k,) or (len(lam), k)")
    if np.isnan(bound).any() or (meas < 0).any():
        raise DataError("recovery: bound must not be NaN and measured must be >= 0")
    if lam is None:
        return None, bound.reshape(1, -1), meas.reshape(1, -1), False
    x = as_finite_array(lam, "lam", ndim=1)
    bound, meas = bound.reshape(len(x), -1), meas.reshape(len(x), -1)
    return x, bound, meas, True


def recovery(report_or_values: Any, measured: Any = None, *, lam: Any = None,
             title: str | None = None, ax: Any = None) -> Any:
    """Theorem 2's error bound (37), ``||w_hat_i - w_bar_C|| <= 2|dC| lam / alpha_C``, against the
    measured error ``max_{i in C} ||w_hat_i - w_bar_C||`` (paper 001 Section V).

    ``report_or_values``: a :class:`~gtvmodel.theory.RecoveryReport` (one pair of bars per
    cluster), a list of them over a sweep of ``lam`` (one pair of curves per cluster against
    ``lam``, log-log), or bound values (``(k,)`` bars, or ``(len(lam), k)`` curves with ``lam``)
    with ``measured`` of the same shape.  An infinite bound (``alpha_C = 0``) is left out.
    Returns the Axes."""
    x, bound, meas, sweep = _recovery_values(report_or_values, measured, lam)
    ax = _axes(ax, (6.4, 4.6))
    k = bound.shape[1]
    if sweep:
        for c in range(k):
            ok = np.isfinite(bound[:, c]) & (bound[:, c] > 0)
            ax.plot(x[ok], bound[ok, c], "--", color=f"C{c}", lw=2,
                    label=f"bound (37), cluster {c}")
            ax.plot(x, np.maximum(meas[:, c], 1e-16), "o-", color=f"C{c}", lw=2,
                    label=f"measured, cluster {c}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("lambda")
    else:
        pos = np.arange(k)
        ok = np.isfinite(bound[0])
        ax.bar(pos[ok] - 0.2, bound[0, ok], width=0.4, color="C0", label="bound (37)")
        ax.bar(pos + 0.2, meas[0], width=0.4, color="C1", label="measured")
        ax.set_xticks(pos, [f"cluster {c}" for c in range(k)])
    ax.set_ylabel("max_i ||w_hat_i - w_bar_C||")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=_FONT["legend"], loc="best")
    _style(ax, title)
    return ax
