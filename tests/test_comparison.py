"""compare / Comparison and the plots of issue 10: the exact solver, Algorithm 1 and a
FedAvg-like method written here, every number against a formula or reference written here."""

from __future__ import annotations

import json

import cvxpy as cp
import matplotlib.pyplot as plt
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import datasets
from gtvmodel.results import Labels


def fedavg_like(model, rounds=20, local_steps=2, step=0.05):
    """FedAvg by hand: local gradient steps from the shared model, sample-size weighted mean."""
    n, d = model.num_nodes, model.dim
    m = np.array([model.loss(v).m for v in model.nodes], dtype=float)
    w = np.zeros(d)
    for _ in range(rounds):
        W = np.tile(w, (n, 1))
        for _ in range(local_steps):
            W = W - step * model.loss_gradients(W)
        w = (m[:, None] * W).sum(axis=0) / m.sum()
    return gm.BaselineResult(method="fedavg_like", weights=np.tile(w, (n, 1)),
                             status="completed", rounds=rounds, values_sent=2 * rounds * n * d,
                             labels=Labels(model.nodes, model.edges))


def _optimum(data, lam):
    """P* of the network Lasso with the squared loss (39), by hand."""
    pos = {v: i for i, v in enumerate(data.nodes)}
    W = cp.Variable((len(pos), data.dim))
    fit = sum(cp.sum_squares(data.X[v] @ W[pos[v]] - data.y[v]) / len(data.y[v]) for v in data.X)
    tv = sum(a.get("weight", 1.0) * cp.norm(W[pos[u]] - W[pos[v]], 2)
             for u, v, a in data.graph.edges(data=True))
    prob = cp.Problem(cp.Minimize(fit + lam * tv))
    prob.solve(solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    return prob.value


def _mse(data, W, samples):
    return np.mean([np.mean((samples.X[v] @ W[i] - samples.y[v]) ** 2)
                    for i, v in enumerate(data.nodes)])


@pytest.fixture(scope="module")
def table():
    train = datasets.chain(n=3, eps=0.1, m=5, sigma=0.3, seed=0)
    val = datasets.chain(n=3, eps=0.1, m=10, sigma=0.3, seed=1)
    methods = {"exact": gm.solve_exact,
               "Algorithm 1": lambda m: gm.solve_primal_dual(m, tol=1e-8),
               "fedavg-like": fedavg_like}
    return train, val, gm.compare(methods, train, validation=val)


def test_table_numbers(table):
    train, val, t = table
    assert t.rows == ["exact", "Algorithm 1", "fedavg-like"]
    assert t.columns == ["train", "validation", "true_mse", "rounds", "values_sent", "gap",
                         "target", "time"]
    assert t.metric == "mse"
    model = train.model()
    for r, name in enumerate(t.rows):
        W = t.results[name].weights
        assert t.column("train")[r] == pytest.approx(_mse(train, W, train), rel=1e-12)
        assert t.column("validation")[r] == pytest.approx(_mse(train, W, val), rel=1e-12)
        assert t.column("true_mse")[r] == pytest.approx(
            np.mean(((W - train.true_weights) ** 2).sum(axis=1)), rel=1e-12)
        assert t.column("time")[r] > 0
    exact, pd, fed = (t.results[k] for k in t.rows)
    assert np.isnan(t.column("rounds")[0]) and np.isnan(t.column("values_sent")[0])
    assert t.column("rounds")[1] == pd.iterations
    assert t.column("values_sent")[1] == 2 * model.num_edges * model.dim * pd.iterations
    assert t.column("rounds")[2] == 20 and t.column("values_sent")[2] == fed.values_sent
    assert t.column("gap")[0] == exact.certificate.gap and t.column("gap")[1] == pd.gap
    assert t.column("target") == ["gtv", "gtv", "gtv"]
    # the FedAvg-like weights (one shared model) certified on (16): sound
    p_star = _optimum(train, model.lam)
    assert t.column("gap")[2] >= model.objective(fed.weights) - p_star - 1e-9
    assert t.column("gap")[2] > 1e-3  # one shared model is far from the two-cluster optimum


def test_certify_off_and_non_convex_results(table):
    train, _, _ = table

    def nonconvex(model):
        res = fedavg_like(model, rounds=2)
        res.convex = False
        return res

    t = gm.compare({"exact": gm.solve_exact, "fed": fedavg_like, "ncvx": nonconvex}, train,
                   certify=False)
    gaps = t.column("gap")
    assert gaps[0] > 0 and np.isnan(gaps[1]) and np.isnan(gaps[2])
    assert t.columns == ["train", "true_mse", "rounds", "values_sent", "gap", "target", "time"]
    t2 = gm.compare({"ncvx": nonconvex}, train.model(), metrics=("train",))
    assert np.isnan(t2.column("gap")[0]) and "true_mse" not in t2.columns


def test_text_dict_and_plot(table):
    _, _, t = table
    text = t.to_text()
    lines = text.splitlines()
    assert str(t) == text and len(lines) == 2 + len(t.rows)
    assert len({len(line) for line in lines}) == 1  # aligned
    assert lines[0].startswith("method") and "train mse" in lines[0]
    assert lines[2].split()[0] == "exact" and " - " in lines[2]  # exact has no rounds
    d = t.to_dict()
    assert set(d["rows"]) == set(t.rows) and d["rows"]["fedavg-like"]["rounds"] == 20
    json.dumps(d)
    ax = t.plot()
    assert len(ax.patches) == 3
    notes = [a.get_text() for a in ax.texts]
    assert len(notes) == 3 and all(s.startswith("gap ") for s in notes)
    assert ax.get_ylabel() == "validation mse"
    ax2 = gm.plot.comparison(t, column="true_mse")
    assert ax2.get_ylabel() == "true_mse"
    plt.close("all")


def test_lam_path_plot():
    train = datasets.chain(n=3, eps=0.1, m=5, sigma=0.3, seed=0)
    val = datasets.chain(n=3, eps=0.1, m=10, sigma=0.3, seed=1)
    path = gm.lam_path(train.model(), [50.0, 1.0, 0.1, 0.0], validation=val, threshold=True)
    ax = gm.plot.lam_path(path)
    assert ax.get_xscale() == "log"
    assert len(ax.lines) == 6 * 2 + 1  # one per node and coordinate, the threshold
    assert ax.lines[-1].get_xdata()[0] == pytest.approx(path.threshold)
    right = ax.right.lines
    assert right[-1].get_xdata()[0] == path.selected_lam  # the selected lambda, marked
    ax2 = gm.plot.lam_path(path, show="clusters", validation=False)
    np.testing.assert_array_equal(np.sort(ax2.lines[0].get_ydata()), np.sort(path.clusters))
    with pytest.raises(gm.ParameterError, match="show must be one of"):
        gm.plot.lam_path(path, show="gaps")
    with pytest.raises(gm.DataError, match="needs a LamPath"):
        gm.plot.lam_path(None)
    plt.close("all")


def test_bad_compare_input(table):
    train, val, t = table
    with pytest.raises(gm.ParameterError, match="non-empty mapping"):
        gm.compare({}, train)
    with pytest.raises(gm.ParameterError, match=r"methods\['x'\] is not callable"):
        gm.compare({"x": 3}, train)
    with pytest.raises(gm.ParameterError, match="metrics must be one of"):
        gm.compare({"e": gm.solve_exact}, train, metrics=("test",))
    with pytest.raises(gm.ParameterError, match="metric must be one of"):
        gm.compare({"e": gm.solve_exact}, train, metric="auc")
    with pytest.raises(gm.ParameterError, match="data must be a GTVModel"):
        gm.compare({"e": gm.solve_exact}, [1, 2])
    with pytest.raises(gm.UnknownNodeError, match="'z'"):
        gm.compare({"e": gm.solve_exact}, train, validation={"z": (np.zeros((1, 2)), [0.0])})
    with pytest.raises(gm.DataError, match=r"methods\['bad'\] must have shape"):
        gm.compare({"bad": lambda m: np.zeros((2, 2))}, train)
    with pytest.raises(gm.ParameterError, match="column must be one of"):
        t.column("auc")
