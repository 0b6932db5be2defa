"""Paper 001 VI-A.2, Table I: high-dimensional linear regression (``m_i = 10 < d = 100``) on an
SBM of 50 + 50 nodes; Algorithm 1 against IFCA (``k = 2``) and FedAvg, with the exact solution,
one pooled model and the cluster oracle for reference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import baselines, datasets
from ..terms.penalties import Norm2
from ._common import (
    exact_scored,
    gaps_sound,
    new_figure,
    paper_algorithm1,
    progress_bar,
    row,
    seed_list,
    setting,
)
from .result import Check, ExperimentResult

__all__ = ["table1_001_experiment"]

#: The paper's Table I (MSE (40)).
PAPER = {"alg1_c1": "8.74e-07", "ifca": "8.04e-07", "fedavg": "117.09"}
TARGET = 1e-5
#: FedAvg's expected MSE at ``d = 100`` is at least this (scaled by ``d / 100`` in quick mode).
FEDAVG_BOUND = 10.0
FULL = {"sizes": (50, 50), "d": 100, "m": 10, "lam": 3e-3, "R": 1000, "rounds": 1000,
        "local_steps": 5, "step": 0.02, "restarts": 3}
QUICK = {"sizes": (8, 8), "d": 20, "m": 10, "lam": 1e-2, "R": 300, "rounds": 100,
         "local_steps": 5, "step": 0.02, "restarts": 3}
LABELS = {"exact": "GTV exact solution", "alg1_c1": "Algorithm 1, R iterations, c = 1",
          "alg1_adaptive": "Algorithm 1, R iterations, adaptive steps",
          "ifca": "IFCA, k = 2", "fedavg": "FedAvg", "pooled": "one pooled model",
          "oracle": "oracle (pooled per true cluster)"}

#: Tick labels of the figure.
SHORT = {"exact": "exact", "alg1_c1": "Alg. 1\nc = 1", "alg1_adaptive": "Alg. 1\nadaptive",
         "ifca": "IFCA\nk = 2", "fedavg": "FedAvg", "pooled": "pooled", "oracle": "oracle"}


def _run(seed: int, cfg: dict[str, Any]) -> dict[str, Any]:
    data = datasets.table1(sizes=cfg["sizes"], d=cfg["d"], m=cfg["m"], seed=seed)
    model = data.model(Norm2(), lam=cfg["lam"])
    fl = {"rounds": cfg["rounds"], "local_steps": cfg["local_steps"], "step": cfg["step"],
          "seed": seed}
    W_ex, s_ex = exact_scored(model)
    W_c1, s_c1 = paper_algorithm1(model, cfg["R"], step=1.0, repair_flows=True)
    W_ad, s_ad = paper_algorithm1(model, cfg["R"], step=None, repair_flows=True)
    ifca = baselines.ifca(model, 2, restarts=cfg["restarts"], **fl)
    fedavg = baselines.fedavg(model, **fl)
    pooled = baselines.pooled(model)
    oracle = baselines.oracle(model, data.partition())
    out: dict[str, Any] = {"seed": seed, "exact": s_ex, "alg1_c1": s_c1, "alg1_adaptive": s_ad}
    for key, W in (("exact", W_ex), ("alg1_c1", W_c1), ("alg1_adaptive", W_ad),
                   ("ifca", ifca.weights), ("fedavg", fedavg.weights),
                   ("pooled", pooled.weights), ("oracle", oracle.weights)):
        out[f"{key}_mse"] = data.mse(W)
    for key, res in (("fedavg", fedavg), ("pooled", pooled), ("oracle", oracle)):
        out[f"{key}_gap"] = float(res.gap)
    out["ifca_assignment"] = np.asarray(ifca.info["assignment"]).tolist()
    return out


def table1_001_experiment(seeds: Sequence[int] | int = 3, quick: bool = False,
                          progress: bool | None = None) -> ExperimentResult:
    """Paper 001 Table I: SBM 50 + 50, ``p_in = 0.5``, ``p_out = 1e-2``, ``m_i = 10``,
    ``d = 100``, ``sigma = 1e-3``, ``w_bar_C in {0, 1}^d`` (:func:`gtvmodel.datasets.table1`),
    network Lasso with ``lambda = 3e-3`` (the paper does not state it; at VI-A's ``1e-2`` the
    exact optimum's MSE, 1.5e-5, is above the expected 1e-5: docs/experiments.md).  Scored
    by MSE (40): the exact solution, Algorithm 1 for ``R = 1000`` iterations with the paper's
    steps (``c = 1``) and with the package's adaptive steps, IFCA with ``k = 2``, FedAvg, the
    pooled model and the cluster oracle; each certified where its target is convex (FedAvg and
    pooled on the consensus problem (57), the oracle per cluster).  Expected (issue 12): exact
    and Algorithm 1 MSE <= 1e-5, IFCA <= 1e-5, FedAvg >= 10.  ``quick``: 10 + 10 nodes,
    ``d = 20``."""
    seeds = seed_list(seeds)
    cfg = QUICK if quick else FULL
    runs = [_run(s, cfg) for s in progress_bar(seeds, len(seeds), "001-table1", progress)]
    result = ExperimentResult(
        name="001-table1", title="paper 001 VI-A.2, Table I (high-dimensional regression)",
        seeds=seeds, quick=quick, data={"setting": setting(cfg), "runs": runs},
        departures=[
            "lambda = 3e-3 (1e-2 in quick mode): Table I does not state lambda; at VI-A's "
            "1e-2 the exact optimum's MSE is 1.5e-5, a bias of the estimator that shrinks "
            "about as lambda^2 (docs/experiments.md).",
            "IFCA and FedAvg: full local gradients, 5 local steps of size 0.02 per round, 1000 "
            "rounds (100 in quick mode; the paper gives no settings); IFCA keeps the best of 3 "
            "starts.",
            "Algorithm 1 is also run with the package's adaptive steps next to the paper's "
            "c = 1; the exact solution, the pooled model and the oracle are added."])
    for key, name in LABELS.items():
        result.rows.append(row(f"{name}: MSE", PAPER.get(key, ""),
                               [r[f"{key}_mse"] for r in runs]))
        gap = key if key in ("exact", "alg1_c1", "alg1_adaptive") else None
        values = ([r[gap]["gap"] for r in runs] if gap else
                  [r[f"{key}_gap"] for r in runs] if f"{key}_gap" in runs[0] else None)
        if values is not None:
            target = " (consensus problem)" if key in ("fedavg", "pooled") else ""
            result.rows.append(row(f"{name}: certified gap{target}", "", values))
    _checks(result, runs)
    result.figures = {"mse": _figure(runs, cfg)}
    return result


def _checks(result: ExperimentResult, runs: list[dict[str, Any]]) -> None:
    for key in ("exact", "alg1_adaptive", "ifca"):
        worst = max(r[f"{key}_mse"] for r in runs)
        result.checks[f"{key}_mse_below_1e-5"] = Check(
            ok=worst <= TARGET, detail=f"{LABELS[key]}: largest MSE {worst:.3g} <= {TARGET:g}")
    # one model for two clusters: MSE ~ ||w_1 - w_2||^2 / 4 ~ d / 8 (12.5 at d = 100)
    least = min(r["fedavg_mse"] for r in runs)
    bound = FEDAVG_BOUND * result.data["setting"]["d"] / 100
    result.checks["fedavg_mse_above_10"] = Check(
        ok=least >= bound, detail=f"FedAvg (one model for two clusters): smallest MSE "
        f"{least:.3g} >= {bound:g} (10 d / 100)")
    result.checks["certificates_sound"] = gaps_sound(
        [(r[k], r["exact"]) for r in runs for k in ("alg1_c1", "alg1_adaptive")])


def _figure(runs: list[dict[str, Any]], cfg: dict[str, Any]) -> Any:
    """Table I as a bar chart: MSE (40) of every method, mean and std over the seeds, with the
    paper's values."""
    fig, (ax,) = new_figure(width=7.2, height=4.2)
    keys = list(LABELS)
    vals = np.array([[max(r[f"{k}_mse"], 1e-16) for r in runs] for k in keys])
    x = np.arange(len(keys))
    ax.bar(x, vals.mean(axis=1), yerr=vals.std(axis=1), color=[f"C{k}" for k in x],
           alpha=0.8, label="ours (mean ± std)")
    px = [k for k, key in enumerate(keys) if key in PAPER]
    ax.scatter(px, [float(PAPER[keys[k]]) for k in px], marker="*", s=120, color="k",
               zorder=3, label="paper 001, Table I")
    ax.axhline(TARGET, color="0.5", ls=":", lw=1, label="1e-5")
    ax.set_yscale("log")
    ax.set_xticks(x, [SHORT[k] for k in keys], fontsize=8)
    ax.set_ylabel(r"MSE (40) $\frac{1}{|V|}\sum_i \|\hat w^{(i)} - \bar w^{(i)}\|_2^2$")
    sizes = "+".join(str(k) for k in cfg["sizes"])
    ax.set_title(rf"paper 001 Table I: SBM {sizes}, $d$ = {cfg['d']}, $m_i$ = {cfg['m']}, "
                 rf"$\lambda$ = {cfg['lam']:g}, $R$ = {cfg['R']}", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    return fig
