"""FedAvg, FedSGD, FedProx, IFCA, Fed-HT and FedIter-HT (issue 10, deliverable 1) against
independent numpy formulations written here: gradient descent on the stacked data, per-node
loops of the local updates, least squares on the true support."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import expit

import gtvmodel as gm
from gtvmodel import baselines, datasets
from gtvmodel.baselines._sgd import ClientSampler, LocalGradients, hard_threshold
from gtvmodel.baselines.ifca import loss_matrix

SIZES = (4, 7, 3, 9, 5)


def _regression(rng, sizes=SIZES, d=3, loss="squared", truth=None):
    """A path graph whose node ``i`` holds ``sizes[i]`` samples (unequal ``m_i``)."""
    model = gm.GTVModel(nx.path_graph(len(sizes)), dim=d, lam=0.1)
    data = []
    for i, m in enumerate(sizes):
        X = rng.standard_normal((m, d))
        w = rng.standard_normal(d) if truth is None else truth
        if loss == "squared":
            y = X @ w + 0.1 * rng.standard_normal(m)
            model.set_loss(i, gm.SquaredLoss(X, y))
        else:
            y = np.where(X @ w + 0.5 * rng.standard_normal(m) > 0, 1.0, -1.0)
            model.set_loss(i, gm.LogisticLoss(X, y))
        data.append((X, y))
    return model, data


def _row_derivative(loss, t, y):
    return 2.0 * (t - y) if loss == "squared" else -y * expit(-y * t)


def _node_gradient(loss, X, y, w):
    """``grad L_i(w) = (1/m_i) sum_r ell'(x_r^T w, y_r) x_r``, written out."""
    return X.T @ _row_derivative(loss, X @ w, y) / len(y)


# ----------------------------------------------------------------------------- FedAvg family
@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_fedavg_one_step_is_gradient_descent_on_the_sample_weighted_pooled_loss(rng, loss):
    model, data = _regression(rng, loss=loss)
    X = np.vstack([Xi for Xi, _ in data])
    y = np.concatenate([yi for _, yi in data])
    eta, rounds = 0.3, 12
    w = np.zeros(3)
    for _ in range(rounds):  # F(w) = (1/M) sum over all rows: sum_i m_i L_i(w) / sum_i m_i
        w = w - eta * X.T @ _row_derivative(loss, X @ w, y) / len(y)
    run = baselines.fedavg(model, rounds=rounds, local_steps=1, step=eta)
    np.testing.assert_allclose(run.weights, np.tile(w, (5, 1)), rtol=0, atol=1e-10)
    sgd = baselines.fedsgd(model, rounds=rounds, step=eta)
    np.testing.assert_allclose(sgd.weights, run.weights, rtol=0, atol=1e-14)
    assert (run.method, sgd.method) == ("fedavg", "fedsgd")
    # the recorded objective is the consensus objective sum_i L_i(w) (each node weighted 1)
    ell = (X @ w - y) ** 2 if loss == "squared" else np.logaddexp(0, -y * (X @ w))
    owner = np.repeat(np.arange(5), SIZES)
    consensus = (np.bincount(owner, ell) / np.array(SIZES)).sum()
    assert run.history.objective[-1] == pytest.approx(consensus, rel=1e-12)
    assert run.info["sample_weighted_loss"] == pytest.approx(ell.mean(), rel=1e-12)
    assert run.values_sent == 2 * 3 * 5 * rounds
    assert list(run.history.values_sent) == [2 * 3 * 5 * t for t in range(rounds + 1)]
    assert run.history.round.tolist() == list(range(rounds + 1))
    assert run.convex and run.target == "consensus" and run.success
    assert run.status == "completed"
    # the certificate on the consensus problem min_w sum_i L_i(w), against its optimum found
    # independently (scipy on the stacked rows, each row weighted 1/m_i)
    c = 1.0 / np.repeat(SIZES, SIZES)

    def pooled(v):
        t = X @ v
        if loss == "squared":
            return (c * (t - y) ** 2).sum(), X.T @ (c * 2.0 * (t - y))
        return (c * np.logaddexp(0, -y * t)).sum(), X.T @ (c * -y * expit(-y * t))

    opt = minimize(pooled, np.zeros(3), jac=True, method="BFGS", options={"gtol": 1e-12})
    true_gap = consensus - opt.fun
    assert run.gap >= true_gap - 1e-9 and run.gap == run.history.gap[-1]
    assert np.isfinite(run.gap)
    json.dumps(run.to_dict())
    off = baselines.fedavg(model, rounds=rounds, local_steps=1, step=eta, certify=False)
    assert off.certificate is None and np.isnan(off.gap)


def test_fedprox_local_epochs_match_a_per_node_loop(rng):
    """E = 3 local gradient steps on L_i(v) + (mu/2)||v - w||^2, averaged with m_i."""
    model, data = _regression(rng)
    eta, mu, E, rounds = 0.1, 0.7, 3, 6
    m = np.array(SIZES, dtype=float)
    w = np.zeros(3)
    for _ in range(rounds):
        local = []
        for X, y in data:
            v = w.copy()
            for _ in range(E):
                v = v - eta * (_node_gradient("squared", X, y, v) + mu * (v - w))
            local.append(v)
        w = m @ np.array(local) / m.sum()
    run = baselines.fedprox(model, mu, rounds=rounds, local_steps=E, step=eta)
    np.testing.assert_allclose(run.weight(2), w, rtol=0, atol=1e-12)
    assert run.method == "fedprox" and run.info["mu"] == mu


def test_fedprox_with_vanishing_mu_is_fedavg(rng):
    model, _ = _regression(rng)
    kw = dict(rounds=8, local_steps=2, step=0.05, batch_size=3, clients=0.6, seed=7)
    avg = baselines.fedavg(model, **kw)
    prox = baselines.fedprox(model, 1e-13, **kw)
    np.testing.assert_allclose(prox.weights, avg.weights, rtol=0, atol=1e-10)


def test_client_sampling_is_reproducible_from_the_seed(rng):
    model, _ = _regression(rng)
    kw = dict(rounds=10, local_steps=2, step=0.05, batch_size=2, clients=0.4)
    a = baselines.fedavg(model, seed=3, **kw)
    b = baselines.fedavg(model, seed=3, **kw)
    c = baselines.fedavg(model, seed=4, **kw)
    np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_array_equal(a.history.objective, b.history.objective)
    assert not np.allclose(a.weights, c.weights)
    assert a.info["clients_per_round"] == 2 and a.values_sent == 2 * 3 * 2 * 10
    gen = baselines.fedavg(model, seed=np.random.default_rng(3), **kw)
    np.testing.assert_array_equal(gen.weights, a.weights)
    # an int is a count of nodes: clients=2 draws the same sets as clients=0.4 (2 of 5)
    np.testing.assert_array_equal(baselines.fedavg(model, seed=3, **{**kw, "clients": 2})
                                  .weights, a.weights)


def test_fedavg_with_client_sampling_matches_a_per_node_loop(rng):
    """k of n nodes per round, drawn as documented (uniform, without replacement), E = 2 full
    local gradient steps, the average weighted by m_i over the drawn nodes only."""
    model, data = _regression(rng)
    m = np.array(SIZES, dtype=float)
    draws = np.random.default_rng(11)
    w = np.zeros(3)
    for _ in range(5):
        sel = np.sort(draws.choice(5, size=3, replace=False))
        local = []
        for i in sel:
            v = w.copy()
            for _ in range(2):
                v = v - 0.1 * _node_gradient("squared", *data[i], v)
            local.append(v)
        w = m[sel] @ np.array(local) / m[sel].sum()
    run = baselines.fedavg(model, rounds=5, local_steps=2, step=0.1, clients=3, seed=11)
    np.testing.assert_allclose(run.weight(0), w, rtol=0, atol=1e-12)


def test_full_minibatches_equal_full_gradients(rng):
    """A minibatch of at least m_i samples is the node's whole dataset: one step per epoch."""
    model, _ = _regression(rng, loss="logistic")
    kw = dict(rounds=6, local_steps=3, step=0.2, seed=1)
    full = baselines.fedavg(model, **kw)
    mini = baselines.fedavg(model, batch_size=max(SIZES), **kw)
    np.testing.assert_allclose(mini.weights, full.weights, rtol=0, atol=1e-12)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_minibatch_gradients_against_a_per_node_formula(rng, loss):
    model, data = _regression(rng, loss=loss)
    model.set_loss(1, gm.SquaredLoss(data[1][0], data[1][1], l2=0.3) if loss == "squared"
                   else gm.LogisticLoss(data[1][0], data[1][1], l2=0.3))
    grads = LocalGradients(model, 3, "test")
    sel = np.array([0, 1, 3])
    V = rng.standard_normal((3, 3))
    perm = grads.permutation(np.random.default_rng(0), sel)
    for s in range(3):  # node 0 has 4 samples: batches of 3, 1, then none
        offs, valid = grads.chunk(perm, sel, s)
        G = grads.minibatch(V, sel, offs, valid)
        for j, i in enumerate(sel):
            rows = offs[j][valid[j]]
            X, y = data[i][0][rows], data[i][1][rows]
            expect = (_node_gradient(loss, X, y, V[j]) if len(rows) else np.zeros(3))
            expect = expect + (0.6 * V[j] if i == 1 else 0.0)
            np.testing.assert_allclose(G[j], expect, rtol=1e-12, atol=1e-14)
    # one epoch visits every sample of every node exactly once
    seen = np.concatenate([grads.chunk(perm, sel, s)[0][0][grads.chunk(perm, sel, s)[1][0]]
                           for s in range(3)])
    assert sorted(seen.tolist()) == [0, 1, 2, 3]


def test_fedavg_from_networked_data_and_divergence():
    data = datasets.sbm(sizes=(4, 4), p_in=0.9, p_out=0.2, m=6, seed=2)
    run = baselines.fedavg(data, rounds=3, local_steps=1, step=0.1, record_every=2)
    assert run.history.round.tolist() == [0, 2, 3]
    bad = baselines.fedavg(data, rounds=20, local_steps=1, step=1e200)
    assert bad.status == "diverged" and not bad.success
    assert np.isfinite(bad.weights).all() and bad.rounds == bad.info["diverged_round"] - 1


# ----------------------------------------------------------------------------- IFCA
def test_ifca_recovers_two_well_separated_clusters():
    data = datasets.sbm(sizes=(10, 10), p_in=0.8, p_out=0.05, m=8, sigma=0.01, seed=4)
    run = baselines.ifca(data, 2, rounds=40, local_steps=2, step=0.1, restarts=3, seed=1)
    assign = run.info["assignment"]
    truth = data.clusters
    assert (np.array_equal(assign, truth) or np.array_equal(assign, 1 - truth))
    np.testing.assert_allclose(run.weights, data.true_weights, atol=2e-2)
    assert not run.convex and run.certificate is None and run.target is None
    assert np.isnan(run.gap)
    losses = run.info["restart_losses"]
    assert run.info["restart"] == int(np.argmin(losses)) and len(losses) == 3
    assert run.history.objective[-1] == pytest.approx(losses.min(), rel=1e-12)
    n, k, d = 20, 2, 2
    assert run.values_sent == run.rounds * n * (k * d + d + 1)


def test_ifca_rounds_against_a_per_node_loop(rng):
    """Each node picks argmin_j L_i(theta_j), E gradient steps from it, m_i-weighted averages per
    cluster; an unchosen model stays where it is."""
    model, data = _regression(rng)
    m = np.array(SIZES, dtype=float)
    thetas = rng.standard_normal((3, 3))
    expect = thetas.copy()
    for _ in range(4):
        L = np.array([[np.mean((X @ th - y) ** 2) for th in expect] for X, y in data])
        pick = L.argmin(axis=1)
        new = expect.copy()
        for j in range(3):
            mine = np.flatnonzero(pick == j)
            if len(mine):
                local = []
                for i in mine:
                    v = expect[j].copy()
                    for _ in range(2):
                        v = v - 0.05 * _node_gradient("squared", *data[i], v)
                    local.append(v)
                new[j] = m[mine] @ np.array(local) / m[mine].sum()
        expect = new
    run = baselines.ifca(model, 3, rounds=4, local_steps=2, step=0.05, init=thetas)
    np.testing.assert_allclose(run.info["models"], expect, rtol=0, atol=1e-12)
    L = np.array([[np.mean((X @ th - y) ** 2) for th in expect] for X, y in data])
    np.testing.assert_allclose(loss_matrix(model, expect), L, rtol=1e-12)
    np.testing.assert_array_equal(run.info["assignment"], L.argmin(axis=1))
    np.testing.assert_array_equal(run.weights, run.info["models"][L.argmin(axis=1)])


# ----------------------------------------------------------------------------- Fed-HT
def _sparse_instance(rng, loss, d=50, tau=5, nodes=5, m=60):
    truth = np.zeros(d)
    support = np.sort(rng.choice(d, size=tau, replace=False))
    truth[support] = rng.choice([-1.0, 1.0], tau) * rng.uniform(1.0, 2.0, tau)
    if loss == "logistic":
        truth *= 3.0
    model, data = _regression(rng, sizes=(m,) * nodes, d=d, loss=loss, truth=truth)
    X = np.vstack([Xi for Xi, _ in data])
    y = np.concatenate([yi for _, yi in data])
    return model, truth, support, X, y


@pytest.mark.parametrize("method", [baselines.fed_ht, baselines.fediter_ht])
def test_fed_ht_recovers_a_sparse_linear_model(rng, method):
    model, truth, support, X, y = _sparse_instance(rng, "squared")
    run = method(model, 5, rounds=60, local_steps=3, step=0.1, batch_size=20, seed=0)
    assert run.info["support"].tolist() == support.tolist()
    # the weights: the noisy data's least squares on the true support, written out
    ls = np.linalg.lstsq(X[:, support], y, rcond=None)[0]
    np.testing.assert_allclose(run.weight(0)[support], truth[support], atol=0.05)
    np.testing.assert_allclose(run.weight(0)[support], ls, atol=0.05)
    assert not run.convex and run.certificate is None and np.isnan(run.gap)
    per_node = 10 + (10 if method is baselines.fediter_ht else 50)
    assert run.values_sent == 60 * 5 * per_node


def test_fed_ht_full_gradients_converge_to_least_squares_on_the_support(rng):
    model, truth, support, X, y = _sparse_instance(rng, "squared")
    run = baselines.fed_ht(model, 5, rounds=80, local_steps=1, step=0.2)
    ls = np.linalg.lstsq(X[:, support], y, rcond=None)[0]  # equal m_i: F = pooled mean
    np.testing.assert_allclose(run.weight(3)[support], ls, atol=1e-8)
    assert np.count_nonzero(run.weight(3)) == 5


@pytest.mark.parametrize("method", [baselines.fed_ht, baselines.fediter_ht])
def test_fed_ht_recovers_the_support_of_a_logistic_model(rng, method):
    model, truth, support, _, _ = _sparse_instance(rng, "logistic", d=20, tau=3, m=100)
    run = method(model, 3, rounds=60, local_steps=3, step=0.5, batch_size=25, clients=0.8,
                 seed=2)
    assert run.info["support"].tolist() == support.tolist()
    assert np.all(np.sign(run.weight(0)[support]) == np.sign(truth[support]))


def test_hard_threshold_keeps_the_tau_largest_magnitudes(rng):
    X = rng.standard_normal((6, 9))
    for tau in (1, 4, 9):
        H = hard_threshold(X, tau)
        for row, h in zip(X, H, strict=True):
            keep = np.argsort(-np.abs(row))[:tau]  # distinct magnitudes: no ties
            expect = np.zeros(9)
            expect[keep] = row[keep]
            np.testing.assert_array_equal(h, expect)


def test_client_counts_from_fractions():
    assert [ClientSampler(c, 5, "t").count for c in (0.01, 0.3, 0.5, 1.0, 1, 4)] == \
        [1, 2, 2, 5, 1, 4]
    draws = ClientSampler(0.4, 10, "t")
    sel = draws.draw(np.random.default_rng(0))
    assert len(set(sel.tolist())) == 4 and list(sel) == sorted(sel)


def test_ifca_restarts_from_init_and_from_drawn_nodes_and_divergence():
    data = datasets.sbm(sizes=(6, 6), p_in=0.8, p_out=0.1, m=6, seed=3)
    init = np.array([[2.0, 2.0], [-2.0, 2.0]])
    run = baselines.ifca(data, 2, rounds=5, local_steps=1, step=0.1, init=init, restarts=2)
    assert len(run.info["restart_losses"]) == 2
    assert np.array_equal(run.info["assignment"], data.clusters) and run.status == "completed"
    bad = baselines.ifca(data, 2, rounds=5, local_steps=1, step=1e200)
    assert bad.status == "diverged" and np.isfinite(bad.weights).all()


# ----------------------------------------------------------------------------- bad input
def _bad_cases(model):
    common = dict(rounds=2, local_steps=1, step=0.1)
    return [
        (lambda: baselines.ifca(model, 0, **common), gm.ParameterError, "ifca: k must"),
        (lambda: baselines.ifca(model, 6, **common), gm.ParameterError, "k must"),
        (lambda: baselines.ifca(model, 2, restarts=0, **common), gm.ParameterError, "restarts"),
        (lambda: baselines.fedavg(model, rounds=2, local_steps=1, step=-1.0),
         gm.ParameterError, "fedavg: step must"),
        (lambda: baselines.fedavg(model, rounds=2, local_steps=1, step=0.0),
         gm.ParameterError, "step must"),
        (lambda: baselines.fedsgd(model, rounds=2, step=float("inf")), gm.ParameterError,
         "fedsgd: step"),
        (lambda: baselines.fed_ht(model, 4, **common), gm.ParameterError, "fed_ht: tau must"),
        (lambda: baselines.fediter_ht(model, 0, **common), gm.ParameterError,
         "fediter_ht: tau must"),
        (lambda: baselines.fedavg(model, clients=0.0, **common), gm.ParameterError, "clients"),
        (lambda: baselines.fedavg(model, clients=1.5, **common), gm.ParameterError, "clients"),
        (lambda: baselines.fedavg(model, clients=0, **common), gm.ParameterError, "clients"),
        (lambda: baselines.fedavg(model, clients=6, **common), gm.ParameterError, "clients"),
        (lambda: baselines.fedavg(model, clients=True, **common), gm.ParameterError,
         "clients"),
        (lambda: baselines.fedavg(model, rounds=2, local_steps=0, step=0.1), gm.ParameterError,
         "local_steps"),
        (lambda: baselines.ifca(model, 2, rounds=2, local_steps=0, step=0.1),
         gm.ParameterError, "ifca: local_steps"),
        (lambda: baselines.fed_ht(model, 2, rounds=0, local_steps=1, step=0.1),
         gm.ParameterError, "rounds"),
        (lambda: baselines.fedavg(model, batch_size=0, **common), gm.ParameterError,
         "batch_size"),
        (lambda: baselines.fedavg(model, seed=-1, **common), gm.ParameterError, "seed"),
        (lambda: baselines.fedavg(model, init=np.zeros(4), **common), gm.ParameterError,
         "init"),
        (lambda: baselines.ifca(model, 2, init=np.zeros(3), **common), gm.ParameterError,
         "init"),
        (lambda: baselines.fedprox(model, 0.0, **common), gm.ParameterError, "fedprox: mu"),
        (lambda: baselines.fedavg(model, mu=-1.0, **common), gm.ParameterError, "mu"),
        (lambda: baselines.fedavg(model, record_every=0, **common), gm.ParameterError,
         "record_every"),
        (lambda: baselines.fedavg("data", **common), gm.ParameterError, "fedavg: data"),
    ]


def test_bad_arguments_raise_the_packages_errors_naming_them(rng):
    model, _ = _regression(rng)
    for call, error, text in _bad_cases(model):
        with pytest.raises(error, match=text):
            call()


@pytest.mark.parametrize("method", ["fedavg", "fedsgd", "fedprox", "ifca", "fed_ht",
                                    "fediter_ht"])
def test_nodes_without_data_or_gradients_are_named(rng, method):
    def call(model, **extra):
        kw = dict(rounds=2, step=0.1, **extra)
        if method != "fedsgd":
            kw["local_steps"] = 1
        args = {"ifca": (2,), "fed_ht": (2,), "fediter_ht": (2,), "fedprox": (0.5,)}
        return getattr(baselines, method)(model, *args.get(method, ()), **kw)

    model, data = _regression(rng)
    model.set_loss(3, gm.ZeroLoss())
    with pytest.raises(gm.DataError, match=f"{method}: node 3 has no local dataset"):
        call(model)
    model.set_loss(3, gm.HingeLoss(data[3][0], np.sign(data[3][1])))
    with pytest.raises(gm.UnsupportedError, match=f"{method}: node 3: .* not differentiable"):
        call(model)
    model.set_loss(3, gm.SquaredLoss(*data[3], l1=0.1))
    with pytest.raises(gm.UnsupportedError, match=f"{method}: node 3: .* not differentiable"):
        call(model)


def test_minibatches_need_a_row_loss():
    model = gm.GTVModel(nx.path_graph(2), dim=4)
    X = np.arange(6.0).reshape(3, 2)
    for i in model.nodes:
        model.set_loss(i, gm.SoftmaxLoss(X, [0, 1, 0], 2))
    run = baselines.fedavg(model, rounds=3, local_steps=1, step=0.1)  # full gradients: fine
    assert run.success
    with pytest.raises(gm.UnsupportedError, match="fedavg: node 0: minibatch gradients"):
        baselines.fedavg(model, rounds=3, local_steps=1, step=0.1, batch_size=2)
