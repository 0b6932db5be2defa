"""The thresholds of the ``reproduce`` checks come from each experiment's setting (issue 33):
every derivation is checked against an independent computation (brute force, plain CVXPY
written here), and a broken variant of each experiment (shuffled labels, a wrong threshold, a
solution that ignores the graph) fails its check."""

from __future__ import annotations

import copy
import itertools
import math
from decimal import Decimal, getcontext
from fractions import Fraction

import cvxpy as cp
import numpy as np
import pytest
from scipy.stats import binomtest, chi2, spearmanr

from gtvmodel import datasets
from gtvmodel.errors import ParameterError
from gtvmodel.experiments import (
    ExperimentResult,
    chain,
    digits,
    paper000,
    sbm,
    star,
    table1,
)
from gtvmodel.experiments._common import (
    chi2_mixture_quantile,
    exact_check,
    gaps_sound,
    mse_bound,
    mse_rounding,
    objective_rounding,
    one_model_floor,
    recovery_check,
    recovery_radii,
    rms,
    sum_rounding,
)
from gtvmodel.terms.penalties import Norm2


def _gtv_cvxpy(data: datasets.NetworkedData, lam: float) -> np.ndarray:
    """Network Lasso (16) with the squared loss (39), written directly in CVXPY."""
    nodes = data.nodes
    W = cp.Variable((len(nodes), data.dim))
    loss = sum(cp.sum_squares(data.X[v] @ W[i] - data.y[v]) / len(data.y[v])
               for i, v in enumerate(nodes) if v in data.X)
    idx = {v: i for i, v in enumerate(nodes)}
    tv = sum(a.get("weight", 1.0) * cp.norm(W[idx[u]] - W[idx[v]], 2)
             for u, v, a in data.graph.edges(data=True))
    cp.Problem(cp.Minimize(loss + lam * tv)).solve(solver="CLARABEL", tol_gap_abs=1e-12,
                                                    tol_gap_rel=1e-12, tol_feas=1e-12)
    return W.value


def _shuffled(make):
    """A dataset generator whose labels are moved to other nodes (features kept): the labels
    no longer follow the clusters."""
    def shuffled(*args, **kwargs):
        data = make(*args, **kwargs)
        keys = list(data.y)
        perm = np.random.default_rng(7).permutation(len(keys))
        data.y = {k: data.y[keys[p]] for k, p in zip(keys, perm, strict=True)}
        return data
    return shuffled


# ------------------------------------------------------------------ 001-chain: the rank test

def test_spearman_tail_is_the_exact_permutation_distribution():
    """The dynamic program's p-values are the fractions of all ``n!`` orders (brute force),
    and the rank correlation is scipy's (with ties)."""
    for n in range(3, 9):
        perms = np.array(list(itertools.permutations(range(n))))
        corrs = 1 - 6 * ((perms - np.arange(n)) ** 2).sum(axis=1) / (n * (n * n - 1))
        assert chain.rank_correlation(np.arange(n), perms[-2]) == pytest.approx(corrs[-2])
        for c in np.unique(corrs.round(12)):
            assert chain.spearman_tail(n, c) == pytest.approx(np.mean(corrs >= c - 1e-12),
                                                             abs=1e-12)
    x, y = [1e-3, 1e-2, 0.1, 0.5, 1.0], [3.0, 1.0, 1.0, 5.0, 4.0]
    assert chain.rank_correlation(x, y) == pytest.approx(spearmanr(x, y)[0], rel=1e-12)
    assert chain.rank_correlation(x, [2.0] * 5) == 0.0
    # the settings: 13 eps and 4 curves (full), 5 eps and 2 curves (quick)
    assert chain.rank_threshold(13, 0.05 / 4) == pytest.approx(1 - 6 * 134 / (13 * 168))
    assert chain.spearman_tail(13, chain.rank_threshold(13, 0.05 / 4)) <= 0.05 / 4
    assert chain.rank_threshold(5, 0.05 / 2) == 1.0
    assert chain.spearman_tail(5, 1.0) == pytest.approx(1 / 120)


def test_chain_rank_check_fails_without_a_trend():
    """The quick run's curves pass; the same curves with ``eps`` out of order, and the MSE of
    each node alone (``lambda = 0``: it ignores the graph, so it does not depend on ``eps``),
    fail."""
    res = chain.chain_experiment(seeds=1, quick=True, progress=False)
    assert res.checks["mse_rises_with_eps"].ok, res.table()
    eps = chain.QUICK["eps"]
    curves = []
    for _, rho, sig in chain.QUICK["curves"]:
        curve = [r["mse_exact"] for e in eps for r in res.data["runs"]
                 if (r["rho"], r["sigma"], r["eps"]) == (rho, sig, e)]
        curves.append((f"rho={rho:g}", eps, curve))
    assert chain.rises_check(curves).ok
    swapped = [(n, e, [m[0], m[2], m[1], m[4], m[3]]) for n, e, m in curves]
    assert not chain.rises_check(swapped).ok
    alone = []
    for e in eps:
        data = datasets.chain(n=chain.QUICK["n"], eps=e, m=5, seed=0)
        W = np.array([np.linalg.lstsq(data.X[v], data.y[v], rcond=None)[0]
                      for v in data.nodes])
        alone.append(data.mse(W))
    check = chain.rises_check([("each node alone", eps, alone)])
    assert not check.ok and "= 1," in check.detail


# --------------------------------------------------------------- 001-star: the certified band

def test_star_routing_constant_bounds_the_spread_below_the_threshold():
    """Below ``lambda_crit`` (tree formula, numpy) the exact spread (CVXPY written here) is at
    least ``(lambda_crit - lambda) / K`` (:func:`star.routing_constant`), and above it zero."""
    data = datasets.star(leaves=star.QUICK["leaves"], m=5, d=2, seed=0)
    X = np.vstack([data.X[v] for v in data.nodes])
    y = np.concatenate([data.y[v] for v in data.nodes])
    wbar = np.linalg.lstsq(X, y, rcond=None)[0]
    crit = max(np.linalg.norm(2.0 / 5 * data.X[v].T @ (data.X[v] @ wbar - data.y[v]))
               for v in data.nodes[1:])
    K, mu = star.routing_constant(data.model(Norm2(), lam=1.0))
    Xs = [data.X[v] for v in data.nodes]
    H = np.array([2.0 / 5 * Xv.T @ Xv for Xv in Xs])
    assert mu == pytest.approx(np.linalg.eigvalsh(H)[:, 0].min(), rel=1e-10)
    for f in (0.3, 0.9, 0.99):
        s = star.spread(_gtv_cvxpy(data, f * crit))
        assert s >= (1 - f) * crit / K
    assert star.spread(_gtv_cvxpy(data, 1.01 * crit)) <= 1e-6


def test_star_check_fails_for_a_threshold_off_by_two_percent():
    """A ``lambda_crit`` 2 % off either way (which the former 5 % tolerance let through)
    falls outside the certified band."""
    res = star.star_experiment(seeds=1, quick=True, progress=False)
    assert res.success, res.table()
    run = res.data["runs"][0]
    low, high = star.collapse_band(run)
    assert -0.01 < low <= 0.0 < high < 0.01  # quick: 8 bisections of a factor 3.2
    for factor in (1.02, 0.98):
        wrong = dict(run, lam_crit=factor * run["lam_crit"],
                     relative_difference=run["lam_collapse"] / (factor * run["lam_crit"]) - 1)
        assert abs(wrong["relative_difference"]) <= 0.05
        assert not star.collapse_check([wrong]).ok


# ------------------------------------------------------------ 001-sbm and 000-table1: Theorem 2

def test_recovery_radius_bounds_the_independent_solution_tightly():
    """On noiseless SBMs with data everywhere, the solution of a CVXPY problem written here
    has MSE (40) at most the RMS radius squared, and not far below (tight: at least a tenth
    of it); where the lifted cluster-graph solution is not optimal there is no bound and the
    check fails."""
    data = datasets.sbm(sizes=(12, 12), p_in=0.5, p_out=0.1, m=5, sigma=0.0, rho=1.0, seed=1)
    rec = recovery_radii(data, data.model(Norm2(), lam=0.05))
    assert not rec["recovered"] and np.isnan(mse_bound(rms(rec["radius"]), rec["mu"], 0.0))
    assert not recovery_check([("exact", 1e-9, np.nan)], "not recovered").ok
    for seed, p_out in ((0, 0.05), (2, 0.2)):
        data = datasets.sbm(sizes=(12, 12), p_in=0.5, p_out=p_out, m=5, sigma=0.0, rho=1.0,
                            seed=seed)
        model = data.model(Norm2(), lam=0.05)
        rec = recovery_radii(data, model)
        assert rec["recovered"]
        mse = data.mse(_gtv_cvxpy(data, 0.05))
        bound = mse_bound(rms(rec["radius"]), rec["mu"], 0.0)
        assert 0.1 * bound <= mse <= bound * (1 + 1e-6)


def test_sbm_check_fails_on_shuffled_labels_and_a_wrong_solution(monkeypatch):
    """(The quick run passes: tests/test_experiments.py.)"""
    with monkeypatch.context() as m:
        m.setattr(sbm.datasets, "sbm", _shuffled(datasets.sbm))
        bad = sbm.sbm_experiment(seeds=1, quick=True, progress=False)
    assert not bad.checks["noiseless_full_data_recovery"].ok
    # Algorithm 1 returning weights 1e-2 off the exact ones while claiming their gap
    real = sbm.paper_algorithm1

    def wrong(model, iterations):
        W, _ = real(model, iterations)
        W_ex, s_ex = sbm.exact_scored(model)
        return W_ex + 1e-2, s_ex

    monkeypatch.setattr(sbm, "paper_algorithm1", wrong)
    bad = sbm.sbm_experiment(seeds=1, quick=True, progress=False)
    assert not bad.checks["noiseless_full_data_recovery"].ok


def test_000_checks_fail_on_shuffled_labels_and_a_per_node_pooled_model(monkeypatch):
    """(The quick run passes: tests/test_experiments.py.)"""
    with monkeypatch.context() as m:
        m.setattr(paper000.datasets, "paper000_sbm", _shuffled(datasets.paper000_sbm))
        bad = paper000.table1_000_experiment(seeds=1, quick=True, progress=False)
    assert not bad.checks["exact_mse_within_recovery_bound"].ok
    assert not bad.checks["alg1_adaptive_mse_within_recovery_bound"].ok
    # a "pooled" model with a model per node is below the one-model floor
    monkeypatch.setattr(paper000, "_pooled", lambda data: data.true_weights + 1e-3)
    bad = paper000.table1_000_experiment(seeds=1, quick=True, progress=False)
    assert not bad.checks["pooled_mse_above_one_model_floor"].ok
    assert bad.checks["exact_mse_within_recovery_bound"].ok
    floors = bad.data["runs"][0]["one_model_floor"]
    assert 3.0 < min(floors) <= max(floors) <= 4.0  # 16 p (1 - p), p near 1/2


# ------------------------------------------- round 2: conventions named, rounding, sign test

def test_exact_check_holds_each_solve_to_the_accuracy_it_was_asked():
    """``exact_scored`` records the accuracy passed to ``solve_exact`` and the certified
    relative gap; the check fails for a solve that misses its request (a tighter accuracy
    than the one it met)."""
    data = datasets.sbm(sizes=(8, 8), p_in=0.5, p_out=0.1, m=5, sigma=0.1, rho=1.0, seed=0)
    model = data.model(Norm2(), lam=0.05)
    W, s = sbm.exact_scored(model, accuracy=sbm.EXACT_ACCURACY)
    assert s["accuracy"] == sbm.EXACT_ACCURACY
    assert s["relative_gap"] == pytest.approx(s["gap"] / max(1.0, abs(s["objective"])))
    assert exact_check([s]).ok
    assert not exact_check([dict(s, accuracy=s["relative_gap"] / 2)]).ok
    assert not exact_check([]).ok
    # the independent problem's optimum (CVXPY written here, objective in numpy) lies
    # within the certified gap below the exact objective: P(W) - gap <= P* <= P(W_ref)
    W_ref = _gtv_cvxpy(data, 0.05)
    idx = {v: i for i, v in enumerate(data.nodes)}
    P_ref = sum(np.sum((data.X[v] @ W_ref[idx[v]] - data.y[v]) ** 2) / len(data.y[v])
                for v in data.nodes if v in data.X)
    P_ref += 0.05 * sum(a.get("weight", 1.0) * np.linalg.norm(W_ref[idx[u]] - W_ref[idx[v]])
                        for u, v, a in data.graph.edges(data=True))
    assert s["objective"] - s["gap"] <= P_ref * (1 + 1e-12)
    assert s["objective"] == pytest.approx(P_ref, rel=1e-8)


def test_mse_rounding_bounds_the_float_error_of_mses_and_floors():
    """The float64 MSE (40) and one-model floor against exact rational arithmetic on the
    same float inputs: the error is within ``mse_rounding`` (relative) for the settings'
    sizes, and a model at the mean sits on the floor up to that allowance (so a fixed 1e-9
    was needed only for its order of magnitude)."""
    rng = np.random.default_rng(3)
    for n, d in ((30, 2), (270, 2), (100, 100)):
        Wbar = rng.normal(size=(n, d)) * 2.0
        v = Wbar.mean(axis=0)
        floor = one_model_floor(Wbar)
        mse = float(((v - Wbar) ** 2).sum(axis=1).mean())
        Fv = [Fraction(x) for x in v]
        exact_mse = sum(sum((Fv[k] - Fraction(w[k])) ** 2 for k in range(d))
                        for w in Wbar) / n
        Fm = [sum(Fraction(w[k]) for w in Wbar) / n for k in range(d)]
        exact_floor = sum(sum((Fm[k] - Fraction(w[k])) ** 2 for k in range(d))
                          for w in Wbar) / n
        tol = mse_rounding(n, d)
        assert 0 < tol < 1e-12
        assert abs(Fraction(mse) - exact_mse) <= tol * exact_mse
        assert abs(Fraction(floor) - exact_floor) <= tol * exact_floor
        assert mse - floor + tol * (mse + floor) >= 0.0
    assert sum_rounding(35) == pytest.approx(35 * 2.0 ** -53, rel=1e-12)


def test_pooled_checks_use_the_rounding_allowance():
    """A one-model MSE below the floor by more than the allowance fails the 000 pooled check;
    by less (rounding) it passes."""
    floor, tol = 4.0, mse_rounding(30, 2)
    base = {"recovery": {"recovered": True, "rms_radius": [1e-3, 1e-3], "mu": 1.0},
            "exact": {"gap": 0.0}, "alg1_adaptive": {"gap": 0.0}, "seed": 0,
            "exact_mse": [1e-6, 1e-6], "alg1_adaptive_mse": [1e-6, 1e-6],
            "one_model_floor": [floor, floor], "one_model_rounding": [tol, tol]}
    ok = dict(base, pooled_mse=[floor * (1 - tol), floor])
    assert paper000.pooled_check([ok]).ok
    bad = dict(base, pooled_mse=[floor * (1 - 3 * tol), floor])
    assert not paper000.pooled_check([bad]).ok


def test_sign_test_is_the_exact_binomial_tail_and_decides_the_digits_checks():
    """McNemar's exact one-sided p-value against the binomial sum written here and scipy's
    ``binomtest``; the digits checks on constructed counts: 3 differing samples cannot show
    GTV better at 5 % over 2 lambdas (p = 1/8), 13 can; a baseline better than GTV on 10
    samples fails the 'not worse' check."""
    for wins, losses in ((0, 0), (3, 0), (5, 2), (13, 0), (4, 9)):
        n = wins + losses
        ref = sum(math.comb(n, k) for k in range(wins, n + 1)) / 2 ** n if n else 1.0
        assert digits.sign_test(wins, losses) == pytest.approx(ref, rel=1e-12)
        if n:
            assert digits.sign_test(wins, losses) == pytest.approx(
                binomtest(wins, n, 0.5, alternative="greater").pvalue, rel=1e-9)

    def run(seed, conflict_pooled, digits_local=(0, 0), gtv=1.0):
        setting = {"gtv": gtv, "pooled": 0.5, "local": 0.97, "validation_samples": 32,
                   "alg1_score": {"objective": 1.0, "gap": 0.1, "rounding": 0.0},
                   "exact_at_paper_lam": {"objective": 1.0, "gap": 0.0, "rounding": 0.0}}
        return {"seed": seed,
                "digits": dict(setting, pooled=0.98,
                               versus={"pooled": [1, 0], "local": list(digits_local)}),
                "conflict": dict(setting, versus={"pooled": list(conflict_pooled),
                                                  "local": [0, 0]})}

    cfg = {"lams": (1e-2, 1.0)}

    def checks(runs):
        res = ExperimentResult(name="t", title="t", seeds=[0], quick=True)
        digits._checks(res, runs, cfg)
        return res.checks

    assert all(c.ok for c in checks([run(0, (13, 0)), run(1, (17, 1))]).values())
    weak = checks([run(0, (13, 0)), run(1, (3, 0))])
    assert not weak["conflict_gtv_beats_pooled"].ok
    assert "p = 0.12" in weak["conflict_gtv_beats_pooled"].detail
    worse = checks([run(0, (13, 0), digits_local=(0, 10))])
    assert not worse["digits_gtv_not_worse_than_baselines"].ok
    assert worse["conflict_gtv_not_worse_than_baselines"].ok


def test_digits_counts_match_the_accuracies():
    """The paired counts of one scored setting (4 nodes per cluster, one lambda) agree with
    the accuracies: ``acc(GTV) - acc(other) = (wins - losses) / N`` for both baselines, and
    with the per-sample hits computed here with numpy."""
    data = datasets.digits(nodes=40, seed=1)
    data = digits._subset(data, [0, 1, 2, 3, 20, 21, 22, 23])
    s = digits._setting(data, False, {"lams": (1.0,), "lam_paper": 1.0, "R": 5})
    N = sum(len(y) for y in data.y_val.values())
    assert s["validation_samples"] == N
    for base in digits.BASELINES:
        wins, losses = s["versus"][base]
        assert s["gtv"] - s[base] == pytest.approx((wins - losses) / N, abs=1e-12)
    W = np.random.default_rng(0).normal(size=data.true_weights.shape)
    hits = np.concatenate([(data.X_val[v] @ w > 0) == (data.y_val[v] > 0)
                           for v, w in zip(data.nodes, W, strict=True)])
    assert data.correct(W).tolist() == hits.tolist()
    assert data.accuracy(W) == pytest.approx(hits.mean(), abs=1e-15)


def test_chain_significance_level_is_a_parameter():
    """``false_pass`` reaches the rank test: at 1 % over 2 curves even a monotone 5-point
    curve (p = 1/120 > 0.005) cannot pass; a level outside (0, 1) is refused."""
    curves = [("up", (1e-3, 1e-2, 0.1, 0.5, 1.0), [1.0, 2.0, 3.0, 4.0, 5.0])] * 2
    assert chain.rises_check(curves).ok
    check = chain.rises_check(curves, false_pass=0.01)
    assert not check.ok and "significance level 0.01" in check.detail
    with pytest.raises(ParameterError, match="false_pass"):
        chain.chain_experiment(seeds=1, quick=True, progress=False, false_pass=1.5)


def test_star_one_point_decision_follows_the_certificate():
    """Every point of a quick sweep at or above ``lambda_crit`` (tree formula, numpy) is
    decided 'one point' by its certified tolerance ``2 sqrt(2 G / mu)``, and every point whose
    spread the routing constant keeps above that tolerance, ``(lambda_crit - lambda) / K >
    2 tol``, is not."""
    res = star.star_experiment(seeds=[2], quick=True, progress=False)
    run = res.data["runs"][0]
    data = datasets.star(leaves=star.QUICK["leaves"], m=5, d=2, seed=2)
    X = np.vstack([data.X[v] for v in data.nodes])
    y = np.concatenate([data.y[v] for v in data.nodes])
    wbar = np.linalg.lstsq(X, y, rcond=None)[0]
    crit = max(np.linalg.norm(2.0 / 5 * data.X[v].T @ (data.X[v] @ wbar - data.y[v]))
               for v in data.nodes[1:])
    assert run["lam_crit"] == pytest.approx(crit, rel=1e-6)
    decided = 0
    for p in run["sweep"]:
        assert p["tolerance"] == pytest.approx(
            2 * np.sqrt(2 * max(p["gap"], 0.0) / run["mu"]), rel=1e-12)
        if p["lam"] >= crit:
            assert p["collapsed"], p
            decided += 1
        elif (crit - p["lam"]) / run["routing"] > 2 * p["tolerance"]:
            assert not p["collapsed"], p
            decided += 1
    assert decided >= len(run["sweep"]) - 2


# ------------------------------------------ 001-table1: Theorem 2 with the oracle's noise

def test_oracle_error_quantile_covers_the_noise_and_is_tight():
    """The oracle's error spectrum against numpy least squares on the stacked rows of each
    cluster over 2,000 noise draws (the mean squared error within 5 %), the Laurent-Massart
    quantile at 5 % exceeded at most 5 % of the time and within twice the empirical 95 %
    quantile, and at equal weights between scipy's chi-square quantile and 1.6 times it."""
    cfg = table1.QUICK
    data = datasets.table1(sizes=cfg["sizes"], d=cfg["d"], m=cfg["m"], sigma=cfg["sigma"],
                           seed=1)
    spectrum = table1.oracle_error_spectrum(data)
    rng = np.random.default_rng(0)
    for c in range(2):
        X = np.vstack([data.X[v] for v in np.asarray(data.nodes)[data.clusters == c]])
        eps = cfg["sigma"] * rng.standard_normal((X.shape[0], 2000))
        err2 = (np.linalg.lstsq(X, eps, rcond=None)[0] ** 2).sum(axis=0)
        assert spectrum[c].sum() == pytest.approx(err2.mean(), rel=0.05)
        q2 = chi2_mixture_quantile(spectrum[c], 0.05)
        assert np.mean(err2 > q2) <= 0.05
        assert q2 <= 2.0 * np.quantile(err2, 0.95)
    for k, rate in ((20, 0.05), (100, 1e-3)):
        q = chi2_mixture_quantile(np.ones(k), rate)
        assert chi2.ppf(1 - rate, k) <= q <= 1.6 * chi2.ppf(1 - rate, k)
    with pytest.raises(ParameterError, match="false_rate"):
        chi2_mixture_quantile(np.ones(3), 1.5)


def test_table1_optimum_within_the_realized_bound():
    """On the quick instances with boundary edges, the GTV optimum (CVXPY written here) is
    the lifted cluster-graph solution and its MSE is within the realized bound
    ``(1/n) sum_C |C| (||w_hat_C - w_bar_C|| + r_C)^2`` (a theorem there), which is within
    the check's threshold; the bound is loose by the radius (Theorem 2 aligns every
    boundary gradient against the error)."""
    cfg = table1.QUICK
    for seed in (1, 2):
        data = datasets.table1(sizes=cfg["sizes"], d=cfg["d"], m=cfg["m"],
                               sigma=cfg["sigma"], seed=seed)
        model = data.model(Norm2(), lam=cfg["lam"])
        run = {"recovery": table1.recovery_terms(data, model, cfg["lam"])}
        W = _gtv_cvxpy(data, cfg["lam"])
        lifted = table1.cluster_graph_solution(model, data)
        assert np.abs(W - lifted).max() <= 1e-6
        bound = table1.optimum_bound(run)
        assert data.mse(W) <= bound <= table1.mse_threshold(run, seeds=3)
        assert data.mse(W) >= 0.1 * bound


def test_table1_checks_fail_for_early_stopped_alg1_and_a_wrong_lambda(monkeypatch):
    """(The quick run passes: tests/test_experiments.py.)  Algorithm 1 with adaptive steps
    stopped after 10 iterations, and an exact solution at 10 times the setting's
    ``lambda``, fail their MSE checks; IFCA, untouched, passes."""
    real_alg1, real_exact = table1.paper_algorithm1, table1.exact_scored

    def early(model, iterations, step=1.0, **kwargs):
        return real_alg1(model, 10 if step is None else iterations, step=step, **kwargs)

    def wrong_lam(model, **kwargs):
        wrong = copy.deepcopy(model)
        wrong.lam = 10.0 * model.lam
        return real_exact(wrong, **kwargs)

    monkeypatch.setattr(table1, "paper_algorithm1", early)
    monkeypatch.setattr(table1, "exact_scored", wrong_lam)
    monkeypatch.setitem(table1.QUICK, "paper_step_lams", (table1.QUICK["lam"],))  # not checked
    bad = table1.table1_001_experiment(seeds=[2], quick=True, progress=False)
    assert not bad.checks["alg1_adaptive_mse_within_recovery_bound"].ok
    assert not bad.checks["exact_mse_within_recovery_bound"].ok
    assert bad.checks["ifca_mse_within_recovery_bound"].ok


# ------------------------------------------------- certificates_sound: the rounding allowance

def _objective_decimal(data: datasets.NetworkedData, W: np.ndarray, lam: float) -> Decimal:
    """Network Lasso (16) with the squared loss (39) in 60-digit decimal arithmetic on the
    same float inputs."""
    D = Decimal
    idx = {v: i for i, v in enumerate(data.nodes)}
    total = D(0)
    for v in data.nodes:
        X, y, w = data.X[v], data.y[v], W[idx[v]]
        res = [sum(D(float(a)) * D(float(b)) for a, b in zip(row, w, strict=True))
               - D(float(t)) for row, t in zip(X, y, strict=True)]
        total += sum(r * r for r in res) / len(y)
    for u, v in data.graph.edges:
        total += D(lam) * sum((D(float(a)) - D(float(b))) ** 2
                              for a, b in zip(W[idx[u]], W[idx[v]], strict=True)).sqrt()
    return total


def test_objective_rounding_bounds_the_float_error_and_decides_soundness():
    """The float64 objective of the exact solution (the certificate's) is within
    ``objective_rounding`` of the 60-digit value on quick 001-table1 instances (seed 0 has
    no boundary edge: an objective of noise-sized residuals, the hardest case); a gap that
    falls short of ``P(W) - P(W_exact)`` by twice the allowance fails ``gaps_sound``, by
    half of it passes."""
    getcontext().prec = 60
    cfg = table1.QUICK
    for seed in (0, 2):
        data = datasets.table1(sizes=cfg["sizes"], d=cfg["d"], m=cfg["m"],
                               sigma=cfg["sigma"], seed=seed)
        model = data.model(Norm2(), lam=cfg["lam"])
        W, s = table1.exact_scored(model)
        err = abs(Decimal(s["objective"]) - _objective_decimal(data, W, cfg["lam"]))
        assert s["rounding"] == objective_rounding(model, s["objective"])
        assert float(err) <= s["rounding"] <= 1e-12 * s["objective"]
    cand = {"objective": 1.0 + 1e-6, "rounding": 1e-15}
    exact = {"objective": 1.0, "gap": 0.0, "rounding": 1e-15}
    allow = 2e-15 + np.finfo(float).eps * (2.0 + 1e-6 + 1e-6)
    assert gaps_sound([(dict(cand, gap=1e-6 - 0.5 * allow), exact)]).ok
    assert not gaps_sound([(dict(cand, gap=1e-6 - 2.0 * allow), exact)]).ok
    assert not gaps_sound([]).ok
