"""Paper 001 VI-A.2, Table I: high-dimensional linear regression (``m_i = 10 < d = 100``) on an
SBM of 50 + 50 nodes; Algorithm 1 against IFCA (``k = 2``) and FedAvg, with the exact solution,
one pooled model and the cluster oracle for reference."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from .. import baselines, datasets
from ..primal_dual import solve_primal_dual
from ..terms.penalties import Norm2
from ..theory import check_well_connected, cluster_graph
from ._common import (
    chi2_mixture_quantile,
    exact_scored,
    gaps_sound,
    mse_rounding,
    new_figure,
    one_model_floor,
    paper_algorithm1,
    row,
    score,
    seed_list,
    setting,
    stages,
)
from .result import Check, ExperimentResult

__all__ = ["table1_001_experiment"]

#: The paper's Table I (MSE (40)).
PAPER = {"alg1_c1": "8.74e-07", "ifca": "8.04e-07", "fedavg": "117.09"}
#: The paper's level ("MSE below 1e-5"), drawn for reference; the checks use
#: :func:`mse_threshold`.
TARGET = 1e-5
#: The level of the MSE checks (:func:`mse_threshold`): the probability, over the label noise
#: (38), that the recovered GTV optimum's MSE exceeds its threshold on some seed, split
#: evenly over the clusters of every seed (Bonferroni).
FALSE_FAIL = 1e-2
#: The lambdas at which Algorithm 1 with the paper's steps (c = 1) is also run: its MSE (40)
#: after R iterations is reported at the best of them (per seed) next to the shared lambda.
PAPER_STEP_LAMS = (3e-3, 1e-2, 3e-2, 0.05, 0.1)
FULL = {"sizes": (50, 50), "d": 100, "m": 10, "sigma": 1e-3, "lam": 3e-3, "R": 1000,
        "rounds": 1000, "local_steps": 5, "step": 0.02, "restarts": 3,
        "paper_step_lams": PAPER_STEP_LAMS}
QUICK = {"sizes": (12, 12), "d": 20, "m": 10, "sigma": 1e-3, "lam": 1e-2, "R": 300,
         "rounds": 1000, "local_steps": 5, "step": 0.02, "restarts": 3,
         "paper_step_lams": PAPER_STEP_LAMS}
LABELS = {"exact": "GTV exact solution", "alg1_c1": "Algorithm 1, R iterations, c = 1",
          "alg1_c1_best": "Algorithm 1, R iterations, c = 1, at its best lambda",
          "alg1_adaptive": "Algorithm 1, R iterations, adaptive steps",
          "ifca": "IFCA, k = 2", "fedavg": "FedAvg", "pooled": "one pooled model",
          "oracle": "oracle (pooled per true cluster)"}

#: Tick labels of the figure.
SHORT = {"exact": "exact", "alg1_c1": "Alg. 1\nc = 1", "alg1_c1_best": "Alg. 1\nc = 1\nbest λ",
         "alg1_adaptive": "Alg. 1\nadaptive",
         "ifca": "IFCA\nk = 2", "fedavg": "FedAvg", "pooled": "pooled", "oracle": "oracle"}


def _run(seed: int, cfg: dict[str, Any]) -> dict[str, Any]:
    data = datasets.table1(sizes=cfg["sizes"], d=cfg["d"], m=cfg["m"], sigma=cfg["sigma"],
                           seed=seed)
    model = data.model(Norm2(), lam=cfg["lam"])
    fl = {"rounds": cfg["rounds"], "local_steps": cfg["local_steps"], "step": cfg["step"],
          "seed": seed, "record_every": cfg["rounds"]}
    W_ex, s_ex = exact_scored(model, method="first_order")
    W_c1, s_c1 = paper_algorithm1(model, cfg["R"], step=1.0, repair_flows=True)
    W_ad, s_ad = paper_algorithm1(model, cfg["R"], step=None, repair_flows=True)
    best_lam, W_best, s_best, sweep = _paper_steps_best_lam(data, model, cfg, W_c1, s_c1)
    ifca = baselines.ifca(model, 2, restarts=cfg["restarts"], **fl)
    fedavg = baselines.fedavg(model, **fl)
    pooled = baselines.pooled(model)
    oracle = baselines.oracle(model, data.partition())
    out: dict[str, Any] = {"seed": seed, "exact": s_ex, "alg1_c1": s_c1, "alg1_adaptive": s_ad,
                           "alg1_c1_best": s_best, "alg1_c1_best_lam": best_lam,
                           "alg1_c1_sweep_mse": sweep}
    for key, W in (("exact", W_ex), ("alg1_c1", W_c1), ("alg1_c1_best", W_best),
                   ("alg1_adaptive", W_ad), ("ifca", ifca.weights), ("fedavg", fedavg.weights),
                   ("pooled", pooled.weights), ("oracle", oracle.weights)):
        out[f"{key}_mse"] = data.mse(W)
    out["recovery"] = recovery_terms(data, model, cfg["lam"])
    out["lifted_mse"] = data.mse(cluster_graph_solution(model, data))
    out["one_model_floor"] = one_model_floor(data.true_weights)
    out["one_model_rounding"] = mse_rounding(model.num_nodes, model.dim)
    for key, res in (("fedavg", fedavg), ("pooled", pooled), ("oracle", oracle)):
        out[f"{key}_gap"] = float(res.gap)
    out["ifca_assignment"] = np.asarray(ifca.info["assignment"]).tolist()
    return out


def _paper_steps_best_lam(data: datasets.NetworkedData, model: Any, cfg: dict[str, Any],
                          W_shared: np.ndarray, s_shared: dict[str, float]
                          ) -> tuple[float, np.ndarray, dict, list[float]]:
    """Algorithm 1 with the paper's steps (``c = 1``, ``R`` iterations) at every ``lambda`` of
    ``cfg["paper_step_lams"]`` (``W_shared``, ``s_shared``: its weights and score at the
    shared ``lambda``, ``model.lam``, already run); the ``lambda`` of least MSE (40) to the
    true weights, its weights and their score on the model at that ``lambda`` (certified only
    there), and the MSE at every ``lambda``.  The runs set ``model.lam`` in turn (restored on
    return): a model keeps its compiled artefacts when only ``lambda`` changes (prox
    factorizations, the certificate's flow-repair solver), so they are built once."""
    lams, shared = list(cfg["paper_step_lams"]), model.lam
    weights = []
    try:
        for lam in lams:
            if lam == shared:
                weights.append(W_shared)
                continue
            model.lam = lam
            weights.append(solve_primal_dual(model, max_iter=cfg["R"], tol=0.0, step=1.0,
                                             record_every=None).weights)  # scored if best
        mse = [data.mse(W) for W in weights]
        k = int(np.argmin(mse))
        model.lam = lams[k]
        best = s_shared if lams[k] == shared else score(model, weights[k])
    finally:
        model.lam = shared
    return lams[k], weights[k], best, mse


def _quick_note(cfg: dict[str, Any], quick: bool) -> list[str]:
    """The departure of quick mode: its ``R`` is too small for the paper's steps."""
    return [f"quick: SBM {'+'.join(map(str, cfg['sizes']))}, d = {cfg['d']}, lambda = "
            f"{cfg['lam']:g}, R = {cfg['R']} iterations (the paper: 1000): Algorithm 1 with "
            "the paper's steps is far from converged at this R (see its certified gap); "
            "compare the exact solution and the adaptive steps."] if quick else []


def _summary(run: dict[str, Any]) -> str:
    """A stage's line: the MSE (40) of every method."""
    return ", ".join(f"{SHORT[k].replace(chr(10), ' ')} {run[k + '_mse']:.3g}" for k in LABELS)


def table1_001_experiment(seeds: Sequence[int] | int = 3, quick: bool = False,
                          progress: Any = None) -> ExperimentResult:
    """Paper 001 Table I: SBM 50 + 50, ``p_in = 0.5``, ``p_out = 1e-2``, ``m_i = 10``,
    ``d = 100``, ``sigma = 1e-3``, ``w_bar_C in {0, 1}^d`` (:func:`gtvmodel.datasets.table1`),
    network Lasso with ``lambda = 3e-3`` (the paper does not state it; at VI-A's ``1e-2`` the
    exact optimum's MSE, 1.5e-5, is above the expected 1e-5: docs/experiments.md).  Scored
    by MSE (40): the exact solution, Algorithm 1 for ``R = 1000`` iterations with the paper's
    steps (``c = 1``) and with the package's adaptive steps, IFCA with ``k = 2``, FedAvg, the
    pooled model and the cluster oracle; each certified where its target is convex (FedAvg and
    pooled on the consensus problem (57), the oracle per cluster).  Expected (issue 12): exact
    and Algorithm 1 MSE within Theorem 2's bound for the setting (:func:`mse_threshold`; the
    paper: 1e-5), IFCA too, FedAvg no better than one model can be (about ``d / 8``).
    ``quick``: 12 + 12 nodes (at 8 + 8 a node is often isolated, and with ``m_i < d`` it
    cannot learn), ``d = 20``, ``R = 300``."""
    seeds = seed_list(seeds)
    cfg = QUICK if quick else FULL
    runs = stages(partial(_run, cfg=cfg), seeds, "001-table1", progress,
                  label=lambda s: f"seed {s}", summary=_summary)
    result = ExperimentResult(
        name="001-table1", title="paper 001 VI-A.2, Table I (high-dimensional regression)",
        seeds=seeds, quick=quick, data={"setting": setting(cfg), "runs": runs},
        departures=[
            "lambda = 3e-3 (1e-2 in quick mode): Table I does not state lambda; at VI-A's "
            "1e-2 the exact optimum's MSE is 1.5e-5, a bias of the estimator that shrinks "
            "about as lambda^2 (docs/experiments.md).",
            "IFCA and FedAvg: full local gradients, 5 local steps of size 0.02 per round, 1000 "
            "rounds (the paper gives no settings); IFCA keeps the best of 3 starts.",
            "Algorithm 1 with the paper's steps (c = 1) is run at the shared lambda and at "
            f"lambda in {list(cfg['paper_step_lams'])}, reported at the lambda of least MSE "
            "to the true weights per seed (an oracle choice, the most favourable to those "
            "steps; its certified gap is on the model at that lambda).",
            "Algorithm 1 is also run with the package's adaptive steps; the exact solution, "
            "the pooled model and the oracle are added.  The exact solution is "
            "solve_exact(method='first_order'): Algorithm 1 in stages to a certified relative "
            "gap of 1e-9 (the interior-point solve of the |E| d = 1.3e5 cone variables gives "
            "the same MSE in 10 times the CPU time)."] + _quick_note(cfg, quick))
    for key, name in LABELS.items():
        result.rows.append(row(f"{name}: MSE", PAPER.get(key, ""),
                               [r[f"{key}_mse"] for r in runs]))
        if key == "alg1_c1_best":
            result.rows.append(row(f"{name}: that lambda", "",
                                   [r["alg1_c1_best_lam"] for r in runs]))
        gap = key if key in ("exact", "alg1_c1", "alg1_c1_best", "alg1_adaptive") else None
        values = ([r[gap]["gap"] for r in runs] if gap else
                  [r[f"{key}_gap"] for r in runs] if f"{key}_gap" in runs[0] else None)
        if values is not None:
            target = " (consensus problem)" if key in ("fedavg", "pooled") else ""
            result.rows.append(row(f"{name}: certified gap{target}", "", values))
    _checks(result, runs)
    result.figures = {"mse": _figure(runs, cfg)}
    return result


def oracle_error_spectrum(data: datasets.NetworkedData) -> np.ndarray:
    """``(k, d)``: per cluster ``C``, the eigenvalues of the covariance of
    ``w_hat_C - w_bar_C``, the error of the cluster minimizer (9) of the squared losses (39)
    under the label noise (38) (the oracle's error).  With ``S_C = sum_{i in C} X_i^T X_i /
    m_i`` and ``M_C = sum_{i in C} X_i^T X_i / m_i^2``: ``w_hat_C - w_bar_C = S_C^{-1}
    sum_i X_i^T eps_i / m_i``, of covariance ``sigma^2 S_C^{-1} M_C S_C^{-1}`` (``S_C`` is
    ``alpha_C``'s matrix up to the factor 2: invertible when the cluster's pooled rows span
    ``R^d``, ``m |C| >= d``)."""
    at = np.flatnonzero(data.has_data)
    with_data = [data.nodes[i] for i in at]
    cid = np.asarray(data.clusters)[at]
    rows = np.vstack([data.X[v] for v in with_data])
    m = np.concatenate([np.full(len(data.y[v]), float(len(data.y[v]))) for v in with_data])
    row_cid = np.repeat(cid, [len(data.y[v]) for v in with_data])
    sigma2 = float(data.info["sigma"]) ** 2
    out = np.zeros((int(np.max(data.clusters)) + 1, data.dim))
    for c in range(out.shape[0]):  # a loop over the clusters (2), not the nodes
        R = rows[row_cid == c]
        S = R.T @ (R / m[row_cid == c, None])
        M = R.T @ (R / m[row_cid == c, None] ** 2)
        Sinv_M = np.linalg.solve(S, M)
        cov = np.linalg.solve(S, Sinv_M.T)
        out[c] = np.clip(np.linalg.eigvalsh(sigma2 * 0.5 * (cov + cov.T)), 0.0, None)
    return out


def recovery_terms(data: datasets.NetworkedData, model: Any, lam: float
                   ) -> dict[str, list[float]]:
    """What :func:`mse_threshold` needs of one seed, per cluster ``C``: its size, Theorem 2's
    radius ``kappa_p |dC| lambda / alpha_C`` at the setting's ``lam`` (half of (37),
    :attr:`~gtvmodel.theory.ClusterReport.sharp_bound`), the oracle error's covariance
    spectrum (:func:`oracle_error_spectrum`) and the oracle's realized error
    ``||w_hat_C - w_bar_C||_2`` (for the realized bound, :func:`optimum_bound`)."""
    reports = check_well_connected(model, data.partition(), lam)
    truth = np.array([data.true_weights[np.asarray(data.clusters) == c][0]
                      for c in range(len(reports))])
    return {"sizes": np.bincount(data.clusters).tolist(),
            "radius": [r.sharp_bound for r in reports],
            "spectrum": oracle_error_spectrum(data).tolist(),
            "oracle_error": np.linalg.norm(np.array([r.wbar for r in reports]) - truth,
                                           axis=1).tolist()}


def cluster_graph_solution(model: Any, data: datasets.NetworkedData) -> np.ndarray:
    """The cluster-graph solution ``w_tilde`` (46), lifted to the nodes (54): the GTV
    optimum wherever recovery holds (Theorem 2)."""
    cg = cluster_graph(model, data.partition())
    return cg.solve_exact().weights[np.asarray(data.clusters)]


def _bound(rec: dict[str, Any], errors: np.ndarray) -> float:
    """``(1/n) sum_C |C| (e_C + r_C)^2``: the MSE (40) bound of the recovered optimum when
    every cluster's oracle error is at most ``e_C`` (triangle inequality per node)."""
    sizes, radius = np.asarray(rec["sizes"], float), np.asarray(rec["radius"], float)
    return float((sizes * (errors + radius) ** 2).sum() / sizes.sum())


def mse_threshold(run: dict[str, Any], seeds: int, false_fail: float = FALSE_FAIL) -> float:
    """The MSE (40) that the GTV solutions and IFCA must reach on one seed: the bound that
    Theorem 2 gives the recovered GTV optimum, ``(1/n) sum_C |C| (q_C + r_C)^2``.

    Where recovery holds (the optimum is the lifted cluster-graph solution ``w_tilde``,
    Theorem 2), every node of ``C`` satisfies ``||w_i - w_bar_C|| <= ||w_hat_C - w_bar_C|| +
    r_C``: the oracle's error (the cluster minimizer (9)) plus ``r_C = kappa_p |dC| lambda /
    alpha_C``, the distance of ``w_tilde_C`` from ``w_hat_C`` by strong monotonicity (half of
    (37)).  The oracle's error is Gaussian (:func:`oracle_error_spectrum`), so its squared norm
    is below ``q_C^2`` (:func:`~gtvmodel.experiments._common.chi2_mixture_quantile`) except
    with probability ``false_fail / (k seeds)``: the threshold fails the optimum with
    probability at most ``false_fail`` over all the seeds' noise.  Every number comes from
    the setting (``lambda``, ``sigma``, the graph, the design); the quantile's margin over the
    realized error (:func:`optimum_bound`) is what Algorithm 1 and IFCA have for their own
    optimization error (their certified gaps give no distance with ``m_i < d``).  Not checked
    on the instance: that recovery holds (``theory.verify_recovery`` decides it exactly and
    takes over 10 minutes at ``d = 100``); the lifted solution's MSE is recorded next to the
    exact one's (``lifted_mse``) and matched it on every seed we ran."""
    rec = run["recovery"]
    rate = false_fail / (len(rec["sizes"]) * seeds)
    q = np.sqrt([chi2_mixture_quantile(a, rate) for a in rec["spectrum"]])
    return _bound(rec, q)


def optimum_bound(run: dict[str, Any]) -> float:
    """The realized bound ``(1/n) sum_C |C| (||w_hat_C - w_bar_C|| + r_C)^2`` of
    :func:`mse_threshold`: a theorem for the lifted cluster-graph solution (its ``lifted_mse``
    is at most this), and for the GTV optimum where recovery holds."""
    rec = run["recovery"]
    return _bound(rec, np.asarray(rec["oracle_error"], float))


def _checks(result: ExperimentResult, runs: list[dict[str, Any]]) -> None:
    seeds = len(runs)
    limits = [mse_threshold(r, seeds) for r in runs]
    lifted = max(r["lifted_mse"] / optimum_bound(r) for r in runs)
    for key in ("exact", "alg1_adaptive", "ifca"):
        ratio = [r[f"{key}_mse"] / t for r, t in zip(runs, limits, strict=True)]
        k = int(np.argmax(ratio))
        result.checks[f"{key}_mse_within_recovery_bound"] = Check(
            ok=bool(ratio[k] <= 1.0), detail=f"{LABELS[key]}: largest MSE / threshold "
            f"{ratio[k]:.3g} (seed {runs[k]['seed']}: MSE {runs[k][f'{key}_mse']:.3g} <= "
            f"(1/n) sum_C |C| (q_C + r_C)^2 = {limits[k]:.3g}: Theorem 2's radius r_C = "
            f"kappa |dC| lambda / alpha_C about the oracle, whose error q_C is the "
            f"{1 - FALSE_FAIL:g} quantile over {seeds} seed(s); the paper's level is "
            f"{TARGET:g}; the lifted cluster-graph solution's MSE / its realized bound "
            f"(1/n) sum_C |C| (||w_hat_C - w_bar_C|| + r_C)^2: largest {lifted:.3g})")
    # one model for all nodes: MSE >= (1/n) sum_i ||w_bar_i - mean||^2, about d / 8
    # (up to the rounding of the two sums, mse_rounding relative to each)
    least = min(r["fedavg_mse"] - r["one_model_floor"] + r["one_model_rounding"]
                * (r["fedavg_mse"] + r["one_model_floor"]) for r in runs)
    floors = ", ".join(f"{r['one_model_floor']:.3g}" for r in runs)
    result.checks["fedavg_mse_above_one_model_floor"] = Check(
        ok=least >= 0.0, detail=f"FedAvg (one model for two clusters): MSE at least the "
        f"best single model's (1/n) sum_i ||w_bar_i - mean||^2 ({floors}; about d/8) on every "
        f"seed, up to the rounding allowance (relative {runs[0]['one_model_rounding']:.2g}); "
        f"smallest excess {least:.3g}")
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
