"""Paper 001 VI-D (Table II), convex stand-in: scikit-learn's 8x8 digits at 40 nodes in two
clusters ({0, 1} and {2, 3}), a binary logistic model per node, the graph from the nodes' data
(3 nearest nodes, ``A = exp(-dist)``), ``lambda`` chosen on validation accuracy; GTV against
one pooled model.  A second setting, where the two clusters hold the *same* digits with
*opposite* label meanings, is the one in which one pooled model must fail (docs/experiments.md).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
from scipy.stats import binom

from .. import baselines, datasets, graphs
from ..model import GTVModel
from ..path import lam_path
from ..terms.losses import LogisticLoss
from ..terms.penalties import Norm2
from ._common import (
    gaps_sound,
    new_figure,
    paper_algorithm1,
    row,
    scored,
    seed_list,
    setting,
    stages,
)
from .result import Check, ExperimentResult

__all__ = ["digits_experiment", "dataset_distances", "conflicting_labels", "sign_test",
           "SIGNIFICANCE", "BASELINES"]

#: Table II of the paper (validation accuracy): Algorithm 1 and the aggregated network.
PAPER = {"gtv": "97%", "pooled": "64%"}
#: ``l2`` weight of every node's logistic loss: the local datasets are linearly separable, so
#: without it the logistic loss has no minimizer.
L2 = 1e-3
K_NEAREST = 3
#: The significance level of the accuracy comparisons (:func:`sign_test`): the largest chance
#: that GTV passes ``conflict_gtv_beats_pooled`` when it is no better than the pooled model.
#: A convention (the usual 5 %), not a property of the setting; with the setting's number of
#: validation samples it decides how large a difference in accuracy counts.
SIGNIFICANCE = 0.05
#: The baselines GTV is compared with, sample by sample on the validation sets.
BASELINES = ("pooled", "local")
FULL = {"nodes": 40, "lams": (1e-3, 1e-2, 1e-1, 1.0, 10.0), "R": 50, "lam_paper": 1e-2}
#: ``quick``: the 40-node dataset, 8 nodes of each cluster kept (about 14 images each): with
#: 4 the conflicting-labels setting has 16 validation samples, too few for McNemar's test to
#: tell GTV from the pooled model at :data:`SIGNIFICANCE` (3 differing samples: p = 1/8).
QUICK = {"nodes": 40, "keep": 8, "lams": (1e-2, 1.0), "R": 20, "lam_paper": 1e-2}


def dataset_distances(data: datasets.NetworkedData, labelled: bool = False) -> np.ndarray:
    """``(n, n)`` distances between the nodes' training sets: the Euclidean distance between
    the mean feature vectors ``(1/m_i) sum_r x_r`` (``labelled=False``) or between the
    label-weighted means ``(1/m_i) sum_r y_r x_r`` (``labelled=True``, ``y_r in {-1, +1}``:
    the direction each node's labels point in), by
    :func:`~gtvmodel.graphs.node_statistics` and :func:`~gtvmodel.graphs.euclidean_distances`."""
    X = ({v: data.y[v][:, None] * data.X[v] for v in data.nodes} if labelled
         else {v: data.X[v] for v in data.nodes})
    return graphs.euclidean_distances(graphs.node_statistics(X).means)


def conflicting_labels(data: datasets.NetworkedData) -> datasets.NetworkedData:
    """The nodes of cluster 0 (digits 0 and 1) of :func:`gtvmodel.datasets.digits`, split in two
    clusters of equal size whose labels mean the opposite: ``+1`` is digit 1 in the first and
    digit 0 in the second (labels and validation labels negated there)."""
    keep = [v for v, c in zip(data.nodes, data.clusters, strict=True) if c == 0]
    half = len(keep) // 2
    sign = {v: (1.0 if k < half else -1.0) for k, v in enumerate(keep[:2 * half])}
    sub = _subset(data, list(sign))
    return replace(sub, y={v: s * sub.y[v] for v, s in sign.items()},
                   y_val={v: s * sub.y_val[v] for v, s in sign.items()},
                   clusters=np.repeat([0, 1], half))


def _subset(data: datasets.NetworkedData, nodes: list[Hashable]) -> datasets.NetworkedData:
    """``data`` restricted to ``nodes`` (their datasets, clusters and edgeless graph)."""
    pos = [data.nodes.index(v) for v in nodes]
    return replace(data, graph=data.graph.subgraph(nodes).copy(),
                   X={v: data.X[v] for v in nodes}, y={v: data.y[v] for v in nodes},
                   X_val={v: data.X_val[v] for v in nodes},
                   y_val={v: data.y_val[v] for v in nodes},
                   true_weights=data.true_weights[pos], clusters=data.clusters[pos])


def _model(data: datasets.NetworkedData, dist: np.ndarray) -> GTVModel:
    """The GTV model on the 3-nearest-node graph of ``dist`` (``A = exp(-dist)``, 001 VI-D),
    a logistic loss with ``l2 = L2`` at every node."""
    G = graphs.knn_graph(dist, K_NEAREST, metric="precomputed", weight="exp",
                         nodes=data.nodes)
    model = GTVModel(G, data.dim, penalty=Norm2(), lam=1.0)
    for v in data.nodes:
        model.set_loss(v, LogisticLoss(data.X[v], data.y[v], l2=L2))
    return model


def _inside(model: GTVModel, data: datasets.NetworkedData) -> float:
    """Fraction of the graph's edges inside a true cluster."""
    c = dict(zip(data.nodes, data.clusters, strict=True))
    return float(np.mean([c[u] == c[v] for u, v in model.graph.edges()]))


def _setting(data: datasets.NetworkedData, labelled: bool, cfg: dict[str, Any]
             ) -> dict[str, Any]:
    """One setting scored: GTV at the ``lambda`` of best validation accuracy (exact), Algorithm
    1 as the paper ran it (``R = 50``, ``lambda = 1e-2``), one pooled model, each node alone."""
    model = _model(data, dataset_distances(data, labelled))
    val: dict[Hashable, Any] = {v: (data.X_val[v], data.y_val[v]) for v in data.nodes}
    path = lam_path(model, list(cfg["lams"]), validation=val, metric="accuracy")
    W = path.selected_weights
    model.lam = cfg["lam_paper"]
    W_a1, s_a1 = paper_algorithm1(model, cfg["R"], step=1.0)
    at = list(cfg["lams"]).index(cfg["lam_paper"])
    s_ex = scored(model, path.objective[at], path.gap[at])
    pooled = baselines.pooled(model)
    local = baselines.local(model)
    hits = data.correct(W)
    # (GTV right and the baseline wrong, GTV wrong and the baseline right): McNemar's counts
    versus = {}
    for key, base in (("pooled", pooled), ("local", local)):
        other = data.correct(base.weights)
        versus[key] = [int(np.sum(hits & ~other)), int(np.sum(~hits & other))]
    return {"versus": versus, "lam": float(path.selected_lam), "inside": _inside(model, data),
            "edges": model.num_edges, "gtv": data.accuracy(W),
            "gtv_train": data.accuracy(W, "train"), "gtv_gap": float(path.gap[path.selected]),
            "alg1": data.accuracy(W_a1), "alg1_score": s_a1, "exact_at_paper_lam": s_ex,
            "pooled": data.accuracy(pooled.weights), "pooled_gap": float(pooled.gap),
            "local": data.accuracy(local.weights),
            "validation_samples": int(sum(len(y) for y in data.y_val.values())),
            "path_accuracy": (1.0 - path.validation_error).tolist()}


def _run(seed: int, cfg: dict[str, Any]) -> dict[str, Any]:
    data = datasets.digits(nodes=cfg["nodes"], seed=seed)
    if "keep" in cfg:
        half = cfg["nodes"] // 2
        data = _subset(data, [c * half + j for c in (0, 1) for j in range(cfg["keep"])])
    conflict = conflicting_labels(data)
    feature_graph = _model(conflict, dataset_distances(conflict))
    return {"seed": seed, "digits": _setting(data, False, cfg),
            "conflict": _setting(conflict, True, cfg),
            "conflict_feature_graph_inside": _inside(feature_graph, conflict)}


def digits_experiment(seeds: Sequence[int] | int = 3, quick: bool = False,
                      progress: Any = None) -> ExperimentResult:
    """Paper 001 VI-D (Table II), convex stand-in (:func:`gtvmodel.datasets.digits`: 40 nodes,
    clusters {0, 1} and {2, 3}, ``d = 65``, labels ``+1`` for the larger digit of the pair).
    The graph joins each node to its 3 nearest nodes by the Euclidean distance between the
    nodes' mean training images, ``A = exp(-dist)``; each node a logistic model (``l2 =
    1e-3``); ``lambda`` chosen on validation accuracy along a path of exact solutions;
    Algorithm 1 as the paper ran it (``R = 50``, ``lambda = 1e-2``); one pooled model
    (:func:`gtvmodel.baselines.pooled`) and each node alone for reference.  The same on
    :func:`conflicting_labels` (the graph from label-weighted means), where one pooled model
    cannot fit.  Expected, on the validation samples, paired (:func:`sign_test`, level
    :data:`SIGNIFICANCE`): GTV more accurate than the pooled model where the labels conflict
    (Bonferroni over the ``lambda`` path, chosen on the same samples), and in both settings
    neither baseline (:data:`BASELINES`) significantly more accurate than GTV; the pooled model
    <= 75 % where the labels conflict (on the paper's setting it reaches about 99 %: the issue's
    "pooled <= 75 %" does not hold with linear models, docs/experiments.md).  ``quick``: 8
    nodes of each cluster."""
    seeds = seed_list(seeds)
    cfg = QUICK if quick else FULL
    runs = stages(partial(_run, cfg=cfg), seeds, "001-digits", progress,
                  label=lambda s: f"seed {s}")
    result = ExperimentResult(
        name="001-digits", title="paper 001 VI-D, Table II (digits, convex stand-in)",
        seeds=seeds, quick=quick, data={"setting": setting(cfg), "l2": L2,
                                        "significance": SIGNIFICANCE, "runs": runs},
        departures=[
            "scikit-learn's 8x8 digits (about 14 training images per node) instead of MNIST "
            "(500 per node), and a linear logistic model per node (l2 = 1e-3) instead of the "
            "two-layer network (41).",
            "The graph's distance is the Euclidean distance between the nodes' mean training "
            "images (the paper: a distance between t-SNE scatter plots, not specified).",
            "The pooled model is one binary logistic model on all nodes' data with the nodes' "
            "own labels (the paper: a network with four outputs).  It reaches about 99 %: the "
            "two clusters' images differ, so one linear model tells the pairs apart.  The "
            "'conflicting labels' setting (same digits, opposite label meanings) is added as "
            "the case where pooling must fail."] + (
                [f"quick: {cfg['keep']} nodes of each cluster of the 40-node dataset."]
                if quick else []))
    for key, title in (("digits", "Table II setting"), ("conflict", "conflicting labels")):
        rs = [r[key] for r in runs]
        gtv = PAPER["gtv"] if key == "digits" else ""
        result.rows += [
            row(f"{title}: selected lambda", "1e-2", [x["lam"] for x in rs]),
            row(f"{title}: GTV validation accuracy", gtv, [x["gtv"] for x in rs]),
            row(f"{title}: GTV training accuracy", "99%" if key == "digits" else "",
                [x["gtv_train"] for x in rs]),
            row(f"{title}: Algorithm 1 (R = {cfg['R']}, lambda = 1e-2) validation accuracy", gtv,
                [x["alg1"] for x in rs]),
            row(f"{title}: pooled model validation accuracy",
                PAPER["pooled"] if key == "digits" else "", [x["pooled"] for x in rs]),
            row(f"{title}: each node alone, validation accuracy", "", [x["local"] for x in rs]),
            row(f"{title}: certified gap, GTV at selected lambda", "",
                [x["gtv_gap"] for x in rs]),
            row(f"{title}: certified gap, Algorithm 1", "", [x["alg1_score"]["gap"] for x in rs]),
            row(f"{title}: certified gap, pooled (consensus problem)", "",
                [x["pooled_gap"] for x in rs]),
            row(f"{title}: fraction of edges inside a cluster", "", [x["inside"] for x in rs])]
    result.rows.append(row("conflicting labels, graph from mean images: edges inside", "",
                           [r["conflict_feature_graph_inside"] for r in runs]))
    _checks(result, runs, cfg)
    result.figures = {"accuracy": _figure(runs, cfg)}
    return result


def pooled_bound(samples: int) -> float:
    """The largest validation accuracy a model at chance shows on ``samples`` samples with
    3 standard deviations to spare, ``1/2 + 3 / (2 sqrt(N))``, and at least the issue's
    75 %."""
    return max(0.75, 0.5 + 1.5 / math.sqrt(samples))


def sign_test(wins: int, losses: int) -> float:
    """The exact one-sided p-value of McNemar's test on paired validation samples: the chance
    of at least ``wins`` samples that one model classifies right and the other wrong, out of
    the ``wins + losses`` samples where they differ, when neither is better (each such
    sample equally likely to go either way): ``P(Binomial(wins + losses, 1/2) >= wins)``
    (1 when they never differ)."""
    n = wins + losses
    return float(binom.sf(wins - 1, n, 0.5)) if n > 0 else 1.0


def _checks(result: ExperimentResult, runs: list[dict[str, Any]], cfg: dict[str, Any]) -> None:
    # lambda is chosen on the same validation samples: Bonferroni over the path's lambdas
    # makes "GTV better" a test at SIGNIFICANCE whichever lambda is chosen
    level = SIGNIFICANCE / len(cfg["lams"])
    p = [sign_test(*r["conflict"]["versus"]["pooled"]) for r in runs]
    k = int(np.argmax(p))
    result.checks["conflict_gtv_beats_pooled"] = Check(
        ok=p[k] <= level, detail=f"conflicting labels: GTV more accurate than the pooled model "
        f"on every seed by McNemar's exact test, p <= {SIGNIFICANCE:g} / {len(cfg['lams'])} "
        f"lambdas = {level:.3g}; largest p = {p[k]:.2g} (seed {runs[k]['seed']}: GTV right "
        f"where the pooled model is wrong on {runs[k]['conflict']['versus']['pooled'][0]} "
        f"samples, the reverse on {runs[k]['conflict']['versus']['pooled'][1]})")
    for key in ("digits", "conflict"):
        # no baseline significantly better than GTV (the paper's claim: GTV's 97 %)
        tests = [(sign_test(*r[key]["versus"][b][::-1]), b, r) for r in runs for b in BASELINES]
        q, b, r = min(tests, key=lambda t: t[0])
        result.checks[f"{key}_gtv_not_worse_than_baselines"] = Check(
            ok=q > SIGNIFICANCE, detail=f"GTV validation accuracy ({key}): neither the pooled "
            f"model nor each node alone more accurate by McNemar's exact test at "
            f"{SIGNIFICANCE:g} on any seed; smallest p = {q:.2g} ({b}, seed {r['seed']}: "
            f"accuracy {r[key][b]:.3f} against GTV's {r[key]['gtv']:.3f} on "
            f"{r[key]['validation_samples']} samples)")
    # one model for opposite labels is at chance: accuracy 1/2 with binomial sd 1/(2 sqrt(N))
    # on N validation samples; the bound is 3 sd above chance, at least the 75 %
    excess = [r["conflict"]["pooled"] - pooled_bound(r["conflict"]["validation_samples"])
              for r in runs]
    worst = int(np.argmax(excess))
    r = runs[worst]["conflict"]
    result.checks["conflict_pooled_accuracy_below_75"] = Check(
        ok=excess[worst] <= 0.0, detail=f"pooled model with conflicting labels: validation "
        f"accuracy at most max(0.75, 1/2 + 3 / (2 sqrt(N))) on every seed; closest: "
        f"{r['pooled']:.3f} <= {pooled_bound(r['validation_samples']):.3f} "
        f"(N = {r['validation_samples']} samples)")
    result.checks["certificates_sound"] = gaps_sound(
        [(r[k]["alg1_score"], r[k]["exact_at_paper_lam"]) for r in runs
         for k in ("digits", "conflict")])


def _figure(runs: list[dict[str, Any]], cfg: dict[str, Any]) -> Any:
    """Table II analogue: validation accuracy of GTV, Algorithm 1, the pooled model and each
    node alone in both settings (mean ± std over the seeds), with the paper's values."""
    fig, (ax,) = new_figure(width=6.6, height=4.0)
    methods = (("gtv", "GTV, tuned $\\lambda$"), ("alg1", f"Algorithm 1, $R$ = {cfg['R']}"),
               ("pooled", "one pooled model"), ("local", "each node alone"))
    x = np.arange(2)
    for k, (key, label) in enumerate(methods):
        vals = np.array([[r[s][key] for r in runs] for s in ("digits", "conflict")])
        ax.bar(x + (k - 1.5) * 0.2, 100 * vals.mean(axis=1), 0.2, yerr=100 * vals.std(axis=1),
               color=f"C{k}", label=label)
    ax.scatter([-0.3, 0.1], [97, 64], marker="*", s=120, color="k", zorder=3,
               label="paper 001 Table II (GTV, aggregated)")
    ax.set_xticks(x, ["Table II setting\n(clusters {0,1}, {2,3})",
                      "conflicting labels\n(same digits, opposite meaning)"])
    ax.set_ylabel("validation accuracy ACC$^{(val)}$ (%)")
    ax.set_ylim(0, 105)
    n = 2 * cfg.get("keep", cfg["nodes"] // 2)
    ax.set_title(f"8x8 digits: {n} nodes (conflicting labels: {n // 2}), 3 nearest nodes, "
                 r"$A = \exp(-\mathrm{dist})$", fontsize=10)
    ax.legend(fontsize=7, loc="lower left")
    ax.grid(alpha=0.3, axis="y")
    return fig
