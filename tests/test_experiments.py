"""The papers' experiments (issue 12): every registered experiment runs in quick mode and its
expected outcomes hold; the numbers are checked against independent numpy formulas where one
exists; results serialize, save and are deterministic; the ``gtvmodel reproduce`` command."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest
from matplotlib.figure import Figure
from scipy.linalg import sqrtm

from gtvmodel import cli, datasets, experiments
from gtvmodel.errors import ParameterError
from gtvmodel.experiments import Progress, digits, paper000, star, table1, weather
from gtvmodel.experiments._common import paper_algorithm1, score, stages
from gtvmodel.primal_dual import solve_primal_dual
from gtvmodel.terms.penalties import Norm2

#: The seeds of the quick runs: ``reproduce all --quick`` must pass its checks on every seed
#: the docs mention, not on seed 0 alone.
QUICK_SEEDS = 3


@pytest.fixture(scope="module")
def quick():
    """Every registered experiment in quick mode, seeds 0, 1, 2 (docs/experiments.md gives
    the time)."""
    return {name: experiments.run(name, seeds=QUICK_SEEDS, quick=True, progress=False)
            for name in experiments.names()}


NAMES = ["001-sbm", "001-chain", "001-star", "000-table1", "001-table1", "001-digits",
         "001-weather"]


def test_registry_names(capsys):
    """The registry, and ``reproduce --help``, which names every experiment without importing
    them (``cli.EXPERIMENTS``)."""
    assert experiments.names() == NAMES
    assert list(cli.EXPERIMENTS) == NAMES
    assert cli.main(["reproduce", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert all(name in text for name in NAMES), text


def test_stages_report_lines_and_write_partial_results(tmp_path, capsys):
    """Off a terminal, one line per completed stage on stderr; with ``out``, the runs so far in
    ``NAME.partial.json`` after every stage, so a run stopped by an error (or killed) leaves
    them."""
    def run(k):
        if k == 2:
            raise RuntimeError("stopped")
        return {"seed": k, "mse": 0.5 ** k}

    with pytest.raises(RuntimeError, match="stopped"):
        stages(run, [0, 1, 2], "demo", Progress(out=tmp_path), label=lambda k: f"seed {k}",
               summary=lambda r: f"MSE {r['mse']:g}")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" done in ")[0] for line in lines] == [
        "demo: stage 1/3 (seed 0)", "demo: stage 2/3 (seed 1)"]
    assert lines[1].endswith("s CPU: MSE 0.5")
    saved = json.loads((tmp_path / "demo.partial.json").read_text())
    assert saved["completed"] == 2 and saved["stages"] == 3
    assert saved["runs"] == [{"seed": 0, "mse": 1.0}, {"seed": 1, "mse": 0.5}]
    assert stages(run, [0, 1], "demo", False) == [{"seed": 0, "mse": 1.0},
                                                   {"seed": 1, "mse": 0.5}]
    assert capsys.readouterr().err == ""  # progress=False: silent


def test_stages_in_worker_processes(tmp_path, capsys):
    """``Progress(jobs=2)``: the stages run in two worker processes; the list comes back in
    the items' order whatever order they complete in, one line per stage, the partial file
    in the items' order; an error in a stage is raised here; ``jobs`` is checked."""
    items = [{"seed": k} for k in range(3)]
    run = partial(dict, mse=0.5)  # picklable: run(item) = {**item, "mse": 0.5}
    assert stages(run, items, "demo", Progress(out=tmp_path, jobs=2)) == [
        {"seed": k, "mse": 0.5} for k in range(3)]
    lines = capsys.readouterr().err.splitlines()
    assert sorted(line.split(" (")[0] for line in lines) == [
        f"demo: stage {k}/3" for k in (1, 2, 3)]
    saved = json.loads((tmp_path / "demo.partial.json").read_text())
    assert saved["completed"] == 3 and [r["seed"] for r in saved["runs"]] == [0, 1, 2]
    with pytest.raises(TypeError):
        stages(run, [{"seed": 0}, 5], "demo", Progress(show=False, jobs=2))
    for bad in (0, 1.5, True):
        with pytest.raises(ParameterError, match="jobs"):
            Progress(jobs=bad)


@pytest.mark.parametrize("name", NAMES)
def test_quick_run_meets_its_expected_outcomes(quick, name):
    res = quick[name]
    assert res.checks and res.success, res.table()
    assert res.status == "checks passed" and res.quick
    assert res.seeds == list(range(QUICK_SEEDS))
    assert res.figures and all(isinstance(f, Figure) for f in res.figures.values())
    assert res.rows and all(np.isfinite(r.mean) for r in res.rows)
    assert "certificates_sound" in res.checks or name == "001-star"
    d = json.loads(json.dumps(res.to_dict()))
    assert d["result"] == "ExperimentResult" and d["figures"] == sorted(res.figures)
    assert set(d["checks"]) == set(res.checks)


def test_000_table1_numbers(quick, rng):
    """Issue 12's expected outcome: GTV training and test MSE <= 1e-5, pooled >= 1; the
    training/test split of the MSE against numpy."""
    run = quick["000-table1"].data["runs"][0]
    assert max(run["exact_mse"]) <= 1e-5 and max(run["alg1_adaptive_mse"]) <= 1e-5
    assert min(run["pooled_mse"]) >= 1.0
    data = datasets.paper000_sbm(seed=0)
    W = rng.standard_normal((300, 2))
    err = ((W - data.true_weights) ** 2).sum(axis=1)
    labelled = np.array([v in data.X for v in data.nodes])
    assert labelled.sum() == 30
    train, test = paper000.train_test_mse(data, W)
    assert train == pytest.approx(err[labelled].sum() / 30, rel=1e-12)
    assert test == pytest.approx(err[~labelled].sum() / 270, rel=1e-12)
    # the pooled regression (gtvmodel.baselines.pooled) is numpy's least squares on the stack
    quick_data = datasets.paper000_sbm(seed=0, **paper000.QUICK)
    X = np.vstack([quick_data.X[v] for v in quick_data.X])
    y = np.concatenate([quick_data.y[v] for v in quick_data.X])
    w = np.linalg.lstsq(X, y, rcond=None)[0]
    ref = paper000.train_test_mse(quick_data, np.tile(w, (len(quick_data.nodes), 1)))
    assert run["pooled_mse"] == pytest.approx(ref, rel=1e-6)


def test_001_table1_numbers(quick):
    """Table I's expected outcomes (exact, Algorithm 1, IFCA within the setting's threshold,
    below the paper's 1e-5 here; FedAvg far off) and the
    pooled model's MSE against numpy's least squares on all samples (equal ``m_i``: the
    consensus problem's minimizer)."""
    res = quick["001-table1"]
    run = res.data["runs"][0]
    worst = max(run["exact_mse"], run["alg1_adaptive_mse"], run["ifca_mse"])
    assert worst <= min(table1.mse_threshold(run, QUICK_SEEDS), table1.TARGET)
    assert run["fedavg_mse"] >= run["one_model_floor"] >= 0.5 * table1.QUICK["d"] / 8
    assert run["alg1_c1_best_mse"] == min(run["alg1_c1_sweep_mse"])
    assert run["alg1_c1_best_mse"] <= run["alg1_c1_mse"]
    cfg = table1.QUICK
    data = datasets.table1(sizes=cfg["sizes"], d=cfg["d"], m=cfg["m"], seed=0)
    X = np.vstack([data.X[v] for v in data.nodes])
    y = np.concatenate([data.y[v] for v in data.nodes])
    w = np.linalg.lstsq(X, y, rcond=None)[0]
    ref = ((w - data.true_weights) ** 2).sum(axis=1).mean()
    assert run["pooled_mse"] == pytest.approx(ref, rel=1e-5)
    assert run["fedavg_gap"] >= 0 and run["pooled_gap"] <= 1e-6


def test_001_table1_lambda_sweep_on_one_model():
    """The paper's-steps sweep sets ``model.lam`` in turn on one model (its compiled
    artefacts kept) and restores it: the best lambda's weights and score are those of a
    model built afresh at that lambda (bit for bit), the shared lambda's score is reused."""
    cfg = dict(table1.QUICK, R=40)
    data = datasets.table1(sizes=cfg["sizes"], d=cfg["d"], m=cfg["m"], sigma=cfg["sigma"],
                           seed=0)
    model = data.model(Norm2(), lam=cfg["lam"])
    W_c1, s_c1 = paper_algorithm1(model, cfg["R"], step=1.0, repair_flows=True)
    lam, W, s, mse = table1._paper_steps_best_lam(data, model, cfg, W_c1, s_c1)
    assert model.lam == cfg["lam"] and len(mse) == len(cfg["paper_step_lams"])
    fresh = data.model(Norm2(), lam=lam)
    W_fresh = solve_primal_dual(fresh, max_iter=cfg["R"], tol=0.0, step=1.0,
                                record_every=None).weights if lam != cfg["lam"] else W_c1
    assert np.array_equal(W, W_fresh) and mse[cfg["paper_step_lams"].index(lam)] == data.mse(W)
    assert s == (s_c1 if lam == cfg["lam"] else score(fresh, W_fresh))


def test_001_digits_distances_and_conflict(quick):
    """The graph's distances are the Euclidean distances between the nodes' mean images
    (numpy); the conflicting-labels setting negates the second half's labels; GTV >= 95 %
    in both settings and the pooled model <= 75 % where labels conflict."""
    data = datasets.digits(nodes=8, seed=1)
    means = np.array([data.X[v].mean(axis=0) for v in data.nodes])
    ref = np.sqrt(((means[:, None] - means[None]) ** 2).sum(axis=2))
    assert np.allclose(digits.dataset_distances(data), ref, atol=1e-12)
    conflict = digits.conflicting_labels(data)
    assert conflict.nodes == [0, 1, 2, 3] and conflict.clusters.tolist() == [0, 0, 1, 1]
    assert np.array_equal(conflict.y[3], -data.y[3]) and np.array_equal(conflict.y[0],
                                                                          data.y[0])
    run = quick["001-digits"].data["runs"][0]
    assert run["digits"]["gtv"] >= 0.95 and run["conflict"]["gtv"] >= 0.95
    assert run["conflict"]["pooled"] <= 0.75


def test_001_weather_graph_and_table3(quick):
    """The graph (43) from the Gaussian Wasserstein distance (42), computed directly with
    scipy's matrix square root; the tuned lambda beats lambda = 0 over the 5 splits."""
    data = datasets.weather(stations=8, seed=0)
    mu = [data.X[v].mean(axis=0) for v in data.nodes]
    S = [np.cov(data.X[v].T) for v in data.nodes]

    def w42(i, j):
        r = sqrtm(S[i])
        return float(np.sum((mu[i] - mu[j]) ** 2)
                     + np.trace(S[i] + S[j] - 2 * np.real(sqrtm(r @ S[j] @ r))))

    eta = 5.0
    G = weather.weather_graph(data, eta)
    pairs = {(i, j) for i in range(8) for j in range(i + 1, 8) if w42(i, j) <= eta}
    assert {tuple(sorted(e)) for e in G.edges()} == pairs
    for i, j in pairs:
        assert G.edges[i, j]["weight"] == pytest.approx(1 / w42(i, j), rel=1e-8)
    run = quick["001-weather"].data["runs"][0]
    assert len(run["tuned"]) == 5 and np.mean(run["tuned"]) < np.mean(run["zero"])


def test_star_threshold_against_the_tree_formula(quick):
    """On a tree the flows are unique: ``lambda_crit = max_leaf ||grad L_leaf(w_bar)||_2`` with
    ``w_bar`` the pooled least-squares weights (numpy), and the collapse lambda located from
    Algorithm 1's weights is within the band certified for it (``star.collapse_band``)."""
    run = quick["001-star"].data["runs"][0]
    data = datasets.star(leaves=star.QUICK["leaves"], m=5, d=2, seed=0)
    X = np.vstack([data.X[v] for v in data.nodes])
    y = np.concatenate([data.y[v] for v in data.nodes])
    wbar = np.linalg.lstsq(X, y, rcond=None)[0]
    grads = [2.0 / 5 * data.X[v].T @ (data.X[v] @ wbar - data.y[v]) for v in data.nodes[1:]]
    lam_tree = max(np.linalg.norm(g) for g in grads)
    assert run["lam_crit"] == pytest.approx(lam_tree, rel=1e-5)
    low, high = star.collapse_band(dict(run, lam_crit=lam_tree))
    assert low <= run["lam_collapse"] / lam_tree - 1.0 <= high < 0.01


def test_chain_marks_where_definition_1_stops_holding(quick):
    res = quick["001-chain"]
    for b in res.data["boundaries"]:
        assert 1e-3 < b["eps"] <= 1.0
    runs = res.data["runs"]
    assert all(r["well_connected"] for r in runs if r["eps"] == 1e-3)
    assert not any(r["well_connected"] for r in runs if r["eps"] == 1.0)


def test_results_save_png_and_json(quick, tmp_path):
    paths = quick["001-star"].save(tmp_path, dpi=40)
    assert sorted(p.name for p in paths) == ["001-star.json", "001-star_lambda_sweep.png"]
    assert (tmp_path / "001-star_lambda_sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert "collapse_matches_consensus_threshold" in quick["001-star"].table()


def test_bad_arguments():
    with pytest.raises(ParameterError, match="name"):
        experiments.run("001-nope")
    for bad in (0, -1, "3", [], [1, -2], True):
        with pytest.raises(ParameterError, match="seeds"):
            experiments.run("001-star", seeds=bad, quick=True)
    with pytest.raises(ParameterError, match="progress"):
        experiments.run("001-star", seeds=1, quick=True, progress="yes")


def test_cli_reproduce_writes_png_and_json_deterministically(quick, tmp_path, capsys):
    """``reproduce 001-star --quick --jobs 2 --out tmp --json`` writes the PNG and the JSON,
    and its numbers are those of the same run through the function, one seed after the other
    in this process (deterministic for the seeds, whatever process runs them)."""
    out = tmp_path / "tmp"
    code = cli.main(["reproduce", "001-star", "--quick", "--seeds", str(QUICK_SEEDS), "--jobs",
                     "2", "--out", str(out), "--json"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["name"] == "001-star" and printed["success"] is True
    assert (out / "001-star_lambda_sweep.png").stat().st_size > 1000
    assert json.loads((out / "001-star.json").read_text()) == printed
    assert not (out / "001-star.partial.json").exists()  # removed once complete
    assert printed == json.loads(json.dumps(quick["001-star"].to_dict()))


def test_cli_reproduce_bad_input(capsys):
    assert cli.main(["reproduce", "001-nope", "--quick"]) == 2
    assert "NAME must be one of" in capsys.readouterr().err
    assert cli.main(["reproduce", "001-star", "--seeds", "0"]) == 2
    assert "--seeds must be >= 1" in capsys.readouterr().err
    assert cli.main(["reproduce", "001-star", "--jobs", "0"]) == 2
    assert "--jobs must be >= 1" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_full_run_meets_its_expected_outcomes(name):
    res = experiments.run(name, seeds=2, progress=False)
    assert res.success, res.table()
