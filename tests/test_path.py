"""λ paths (issue 10): every λ against an independent CVXPY problem written here, compiled
once, warm starts measured, the selection on data whose answer is known, bad input."""

from __future__ import annotations

import json

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import datasets, theory


def _reference(data: datasets.NetworkedData, lam: float) -> np.ndarray:
    """Network Lasso (16) with the squared loss (39), per node and per edge, by hand."""
    nodes = data.nodes
    W = cp.Variable((len(nodes), data.dim))
    fit = sum(cp.sum_squares(data.X[v] @ W[i] - data.y[v]) / data.X[v].shape[0]
              for i, v in enumerate(nodes) if v in data.X)
    pos = {v: i for i, v in enumerate(nodes)}
    tv = sum(a.get("weight", 1.0) * cp.norm(W[pos[u]] - W[pos[v]], 2)
             for u, v, a in data.graph.edges(data=True))
    cp.Problem(cp.Minimize(fit + lam * tv)).solve(solver="CLARABEL", tol_gap_abs=1e-12,
                                                  tol_gap_rel=1e-12, tol_feas=1e-12)
    return W.value


@pytest.fixture(scope="module")
def chain():
    return (datasets.chain(n=4, eps=0.1, m=5, sigma=0.5, seed=0),
            datasets.chain(n=4, eps=0.1, m=20, sigma=0.5, seed=1))


LAMS = [5.0, 1.0, 0.2, 0.0]


def test_exact_path_matches_independent_solves(chain):
    train, _ = chain
    model = train.model(lam=0.77)
    path = gm.lam_path(model, LAMS)
    assert model.lam == 0.77 and path.success and path.method == "exact"
    assert path.weights.shape == (4, 8, 2) and path.iterations is None
    for k, lam in enumerate(LAMS):
        ref = _reference(train, lam)
        np.testing.assert_allclose(path.weights[k], ref, atol=1e-6)
        model.lam = lam
        assert path.objective[k] == pytest.approx(model.objective(ref), rel=1e-8)
        assert 0 <= path.gap[k] <= 1e-6 * max(1.0, abs(path.objective[k]))
        assert path.gap[k] >= path.objective[k] - model.objective(ref) - 1e-12


def test_primal_dual_path_matches_independent_solves(chain):
    train, _ = chain
    model = train.model()
    path = gm.lam_path(model, LAMS, method="primal_dual", tol=1e-10, max_iter=20_000)
    assert path.success and path.iterations.shape == (4,)
    for k, lam in enumerate(LAMS):
        np.testing.assert_allclose(path.weights[k], _reference(train, lam), atol=1e-5)
        model.lam = lam
        assert path.gap[k] >= path.objective[k] - model.objective(_reference(train, lam))


def test_ten_lambda_path_compiles_once(chain, count_problems):
    train, _ = chain
    with count_problems() as made:
        gm.solve_exact(train.model())  # a fresh model: what one solve (and its certificate) builds
    one = len(made)
    model = train.model()
    with count_problems() as made:
        path = gm.lam_path(model, np.geomspace(10, 0.01, 10))
    assert len(path.lams) == 10 and path.success
    assert len(made) == one  # the nine further lambdas re-solve the same problems


@pytest.mark.parametrize("order", ["decreasing", "increasing"])
def test_warm_starts_reduce_algorithm1_iterations(chain, order):
    train, _ = chain
    lams = np.geomspace(5, 0.05, 8)
    lams = lams if order == "decreasing" else lams[::-1]
    # certificates at every 5th iteration, not budgeted by time: deterministic counts
    opts = {"tol": 1e-8, "record_every": 5, "certificate_budget": None, "max_iter": 20_000}
    warm = gm.lam_path(train.model(), lams, method="primal_dual", **opts)
    cold = gm.lam_path(train.model(), lams, method="primal_dual", warm_start=False, **opts)
    assert warm.success and cold.success
    # measured: 740 warm vs 850 cold iterations (decreasing), 655 vs 850 (increasing)
    assert warm.iterations.sum() < 0.9 * cold.iterations.sum()
    # both certified: their objectives differ by at most the two certified gaps
    assert (np.abs(warm.objective - cold.objective) <= warm.gap + cold.gap).all()


def test_selection_on_two_clusters(chain):
    train, val = chain
    model = train.model()
    thr = theory.consensus_threshold(model)
    lams = np.concatenate([[thr], np.geomspace(thr / 2, 1e-3, 14), [0.0]])
    path = gm.lam_path(model, lams, validation=val, threshold=True)
    assert path.threshold == pytest.approx(thr, rel=1e-9)
    assert 0 < path.selected_lam < thr
    err = path.validation_error
    assert err[path.selected] < err[0] and err[path.selected] < err[-1]
    assert path.clusters[0] == 1 and path.clusters[-1] == 8  # consensus ... local models
    assert path.clusters[path.selected] == 2  # the true partition
    np.testing.assert_array_equal(path.selected_weights, path.weights[path.selected])
    np.testing.assert_allclose(path.validation[path.selected],
                               gm.node_scores(model, path.selected_weights, val))
    assert train.mse(path.selected_weights) < min(train.mse(path.weights[0]),
                                                  train.mse(path.weights[-1]))


def test_selection_ties_go_to_the_larger_lambda():
    model = gm.GTVModel(nx.path_graph(2), dim=1, lam=1.0)
    X = np.array([[1.0], [2.0]])
    model.set_loss(0, gm.LogisticLoss(X, [1, 1]))
    model.set_loss(1, gm.LogisticLoss(X, [1, 1]))
    path = gm.lam_path(model, [0.1, 1.0, 0.5], validation={0: (X, [1, 1])})
    assert path.validation_error.tolist() == [0.0, 0.0, 0.0]  # accuracy 1 everywhere
    assert path.selected_lam == 1.0 and path.selected == 1


def test_path_vocabulary(chain):
    train, val = chain
    path = gm.lam_path(train.model(), [1.0, 0.1], validation=val)
    assert path.weight(3).shape == (2, 2)
    np.testing.assert_array_equal(path.weight(3), path.weights[:, 3])
    d = path.to_dict()
    assert d["result"] == "LamPath" and d["selected_lam"] in (0.1, 1.0)
    json.dumps(path.to_dict(arrays=True))
    assert np.isnan(gm.lam_path(train.model(), [1.0], certify=False).gap[0])
    no_val = gm.lam_path(train.model(), [1.0])
    assert no_val.selected is None and np.isnan(no_val.selected_lam)
    with pytest.raises(gm.ParameterError, match="no selected lambda"):
        no_val.selected_weights  # noqa: B018


def test_lambda_is_restored_when_a_solve_raises(chain):
    train, _ = chain
    model = train.model(lam=0.3)
    with pytest.raises(gm.ParameterError, match="max_iter"):
        gm.lam_path(model, [2.0, 1.0], method="primal_dual", max_iter=-1)
    assert model.lam == 0.3


@pytest.mark.parametrize("lams, match", [
    ([], "non-empty"), ([1.0, -0.5], r"lams\[1\] must be"), ([np.nan], r"lams\[0\] must be"),
    ([[1.0, 2.0]], "1-D"), ("abc", "sequence of numbers"),
])
def test_bad_lambdas(chain, lams, match):
    with pytest.raises(gm.ParameterError, match=match):
        gm.lam_path(chain[0].model(), lams)


def test_bad_path_arguments(chain, rng):
    model = chain[0].model()
    with pytest.raises(gm.ParameterError, match="method must be one of"):
        gm.lam_path(model, [1.0], method="admm")
    with pytest.raises(gm.UnknownNodeError, match="99"):
        gm.lam_path(model, [1.0], validation={99: (np.zeros((2, 2)), np.zeros(2))})
    with pytest.raises(gm.DataError, match=r"validation\[0\]: .*\(m, 2\)"):
        gm.lam_path(model, [1.0], validation={0: (np.zeros((2, 3)), np.zeros(2))})
    with pytest.raises(gm.ParameterError, match="metric must be one of"):
        gm.lam_path(model, [1.0], validation=chain[1], metric="auc")
    with pytest.raises(gm.ParameterError, match="threshold must be True or False"):
        gm.lam_path(model, [1.0], threshold="yes")


def test_lam_path_refuses_an_unknown_metric_without_validation_data():
    """``metric`` is checked whether or not validation data are given (as :func:`compare`)."""
    data = datasets.chain(n=2, seed=0)
    with pytest.raises(gm.ParameterError, match="lam_path: metric must be one of"):
        gm.lam_path(data.model(), [1.0, 0.1], metric="bogus")
    assert gm.lam_path(data.model(), [1.0], metric="mse").metric == "mse"
