"""Prediction on the terms and per-node scores (issue 10): every prediction against numpy
formulas written here, every score against a per-node loop written here."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import datasets


def _data(rng, m=6, d=3):
    return rng.standard_normal((m, d)), rng.standard_normal(m)


@pytest.mark.parametrize("cls", [gm.SquaredLoss, gm.AbsoluteLoss, gm.HuberLoss])
def test_regression_losses_predict_x_w(cls, rng):
    X, y = _data(rng)
    w, Xn = rng.standard_normal(3), rng.standard_normal((4, 3))
    loss = cls(X, y)
    assert loss.score_metric == "mse"
    np.testing.assert_allclose(loss.predict(w, Xn), Xn @ w, rtol=0, atol=1e-14)
    np.testing.assert_allclose(loss.decision_function(w, Xn), Xn @ w, rtol=0, atol=1e-14)
    with pytest.raises(gm.UnsupportedError, match="predict_proba"):
        loss.predict_proba(w, Xn)


@pytest.mark.parametrize("cls", [gm.LogisticLoss, gm.HingeLoss])
def test_binary_classifiers_predict_stored_labels(cls, rng):
    X = rng.standard_normal((8, 2))
    y01 = (rng.random(8) > 0.5).astype(float)
    loss = cls(X, y01)  # {0, 1} given, stored as -1/+1
    w = np.array([1.0, -2.0])
    t = X @ w
    expected = np.where(t >= 0, 1.0, -1.0)
    np.testing.assert_array_equal(loss.predict(w, X), expected)
    assert set(np.unique(loss.predict(w, X))) <= {-1.0, 1.0}
    assert loss.score_metric == "accuracy"
    np.testing.assert_array_equal(loss.labels(y01), np.where(y01 == 1, 1.0, -1.0))
    if cls is gm.LogisticLoss:
        np.testing.assert_allclose(loss.predict_proba(w, X), 1 / (1 + np.exp(-t)), rtol=1e-14)


def test_softmax_predicts_argmax_class(rng):
    p, K = 3, 4
    X = rng.standard_normal((10, p))
    loss = gm.SoftmaxLoss(X, rng.integers(0, K, 10), n_classes=K)
    w = rng.standard_normal(p * K)
    S = X @ w.reshape(p, K)
    np.testing.assert_allclose(loss.decision_function(w, X), S, atol=1e-14)
    np.testing.assert_array_equal(loss.predict(w, X), S.argmax(axis=1))
    P = np.exp(S - S.max(axis=1, keepdims=True))
    np.testing.assert_allclose(loss.predict_proba(w, X), P / P.sum(axis=1, keepdims=True),
                               rtol=1e-12)
    assert loss.num_features == p and loss.score_metric == "accuracy"
    with pytest.raises(gm.DataError, match=r"y\[0\] = 4 is not a class label"):
        loss.labels([4, 0])


def test_predict_checks_its_arguments(rng):
    loss = gm.SquaredLoss(*_data(rng))
    with pytest.raises(gm.DataError, match=r"X must be an \(m, 3\) matrix"):
        loss.predict(np.zeros(3), np.zeros((2, 2)))
    with pytest.raises(gm.DataError, match=r"w must have shape \(3,\)"):
        loss.predict(np.zeros(2), np.zeros((2, 3)))
    for other in (gm.ZeroLoss(), gm.QuadraticLoss([1.0, 2.0])):
        assert other.score_metric is None and other.samples() is None
        with pytest.raises(gm.UnsupportedError, match="cannot predict"):
            other.predict(np.zeros(2), np.zeros((1, 2)))


def _mixed_model(rng):
    """Squared losses at 0..3, no data at 4 (ZeroLoss), on a path."""
    model = gm.GTVModel(nx.path_graph(5), dim=2, lam=0.3)
    for i in range(4):
        model.set_loss(i, gm.SquaredLoss(*_data(rng, m=3 + i, d=2)))
    return model


def test_node_scores_on_training_data_match_a_loop(rng):
    model = _mixed_model(rng)
    W = rng.standard_normal((5, 2))
    got = gm.node_scores(model, W)
    for i in range(4):
        X, y = model.loss(i).X, model.loss(i).y
        assert got[i] == pytest.approx(np.mean((X @ W[i] - y) ** 2), rel=1e-13)
    assert np.isnan(got[4])  # no data, documented NaN
    sol = gm.solve_exact(model)
    np.testing.assert_array_equal(gm.node_scores(model, sol), gm.node_scores(model, sol.weights))


def test_node_scores_on_given_data_and_zero_loss_nodes(rng):
    model = _mixed_model(rng)
    W = rng.standard_normal((5, 2))
    val = {4: _data(rng, m=5, d=2), 1: _data(rng, m=2, d=2)}
    got = gm.node_scores(model, W, val)
    for i, (X, y) in val.items():  # node 4 predicts with the model's one class, SquaredLoss
        assert got[i] == pytest.approx(np.mean((X @ W[i] - y) ** 2), rel=1e-13)
    assert np.isnan(got[[0, 2, 3]]).all()
    mae = gm.node_scores(model, W, val, metric=lambda yt, yp: float(np.abs(yt - yp).mean()))
    for i, (X, y) in val.items():
        assert mae[i] == pytest.approx(np.mean(np.abs(X @ W[i] - y)), rel=1e-13)


def test_node_scores_accuracy_of_classifiers(rng):
    model = gm.GTVModel(nx.path_graph(3), dim=2, lam=0.1)
    Xs = [rng.standard_normal((7, 2)) for _ in range(2)]
    model.set_loss(0, gm.LogisticLoss(Xs[0], rng.random(7) > 0.5))
    model.set_loss(1, gm.HingeLoss(Xs[1], np.sign(rng.standard_normal(7))))
    W = rng.standard_normal((3, 2))
    got = gm.node_scores(model, W)
    for i in range(2):
        loss = model.loss(i)
        assert got[i] == pytest.approx(np.mean(np.where(loss.X @ W[i] >= 0, 1, -1) == loss.y))
    # validation labels in {0, 1}: compared in the loss's convention
    Xv = rng.standard_normal((9, 2))
    yv = (Xv @ W[0] > 0).astype(float)
    assert gm.node_scores(model, W, {0: (Xv, yv)})[0] == 1.0
    assert gm.node_scores(model, W, {0: (Xv, 1 - yv)})[0] == 0.0
    mse = gm.node_scores(model, W, {0: (Xv, yv)}, metric="mse")[0]
    assert mse == 0.0
    # node 2 has no data and the model two classifier classes: no loss to predict with
    with pytest.raises(gm.UnsupportedError, match="node 2"):
        gm.node_scores(model, W, {2: (Xv, yv)})


def test_softmax_node_scores(rng):
    model = gm.GTVModel(nx.path_graph(2), dim=6, lam=0.1)
    X = rng.standard_normal((12, 2))
    y = rng.integers(0, 3, 12)
    model.set_loss(0, gm.SoftmaxLoss(X, y, n_classes=3))
    model.set_loss(1, gm.SoftmaxLoss(X[:5], y[:5], n_classes=3))
    W = rng.standard_normal((2, 6))
    got = gm.node_scores(model, W)
    assert got[0] == pytest.approx(np.mean((X @ W[0].reshape(2, 3)).argmax(1) == y))
    assert got[1] == pytest.approx(np.mean((X[:5] @ W[1].reshape(2, 3)).argmax(1) == y[:5]))
    assert gm.predict(model, W, 1, X).tolist() == (X @ W[1].reshape(2, 3)).argmax(1).tolist()
    assert gm.predict(model, W, 1, X, proba=True).shape == (12, 3)


def test_node_scores_of_a_dataset_and_predict(rng):
    train = datasets.chain(n=3, m=4, sigma=0.1, seed=0)
    test = datasets.chain(n=3, m=6, sigma=0.1, seed=1)
    model = train.model(lam=0.05)
    W = gm.solve_exact(model).weights
    got = gm.node_scores(model, W, test)
    for i, v in enumerate(model.nodes):
        assert got[i] == pytest.approx(np.mean((test.X[v] @ W[i] - test.y[v]) ** 2))
        np.testing.assert_allclose(gm.predict(model, W, v, test.X[v]), test.X[v] @ W[i])


def test_bad_scoring_input_names_the_argument_or_node(rng):
    model = _mixed_model(rng)
    W = np.zeros((5, 2))
    with pytest.raises(gm.UnknownNodeError, match="'ghost'"):
        gm.node_scores(model, W, {"ghost": _data(rng, d=2)})
    with pytest.raises(gm.DataError, match=r"data\[1\]: .*X must be an \(m, 2\) matrix"):
        gm.node_scores(model, W, {1: _data(rng, d=3)})
    with pytest.raises(gm.DataError, match=r"data\[1\]: y has 2 labels for 3 samples"):
        gm.node_scores(model, W, {1: (np.zeros((3, 2)), np.zeros(2))})
    with pytest.raises(gm.DataError, match=r"data\[1\] must be a pair"):
        gm.node_scores(model, W, {1: np.zeros((3, 2))})
    with pytest.raises(gm.ParameterError, match="metric must be one of"):
        gm.node_scores(model, W, metric="r2")
    with pytest.raises(gm.ParameterError, match="data must be None, a mapping"):
        gm.node_scores(model, W, [1, 2])
    with pytest.raises(gm.DataError, match=r"result_or_weights must have shape \(5, 2\)"):
        gm.node_scores(model, np.zeros((4, 2)))
    failed = gm.Solution(weights=None, flows=None, objective=np.nan, status="infeasible",
                         success=False, solver="x")
    with pytest.raises(gm.DataError, match="has no weights"):
        gm.predict(model, failed, 0, np.zeros((1, 2)))
    with pytest.raises(gm.UnknownNodeError, match="'nope'"):
        gm.predict(model, W, "nope", np.zeros((1, 2)))
