"""The papers' dataset generators (issue 12): shapes, seeds, clusters and true weights as
documented, labels from the documented models (checked with numpy least squares), splits,
metrics against direct formulas, and bad arguments raising the package's errors."""

from __future__ import annotations

import hashlib
import math

import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import datasets
from gtvmodel.errors import DataError, ParameterError


def _same(a: datasets.NetworkedData, b: datasets.NetworkedData) -> bool:
    return (sorted(a.graph.edges) == sorted(b.graph.edges) and a.X.keys() == b.X.keys()
            and all(np.array_equal(a.X[v], b.X[v]) and np.array_equal(a.y[v], b.y[v])
                    for v in a.X)
            and np.array_equal(a.true_weights, b.true_weights, equal_nan=True))


GENERATORS = {
    "sbm": lambda seed: datasets.sbm((6, 6), rho=0.5, sigma=0.1, seed=seed),
    "table1": lambda seed: datasets.table1((5, 5), d=8, seed=seed),
    "chain": lambda seed: datasets.chain(n=4, rho=0.6, sigma=0.1, seed=seed),
    "star": lambda seed: datasets.star(leaves=6, seed=seed),
    "digits": lambda seed: datasets.digits(seed=seed),
    "weather": lambda seed: datasets.weather(stations=12, seed=seed),
}


@pytest.mark.parametrize("name", GENERATORS)
def test_generators_are_seeded(name):
    make = GENERATORS[name]
    assert _same(make(3), make(3))
    assert not _same(make(3), make(4))


def test_table1_is_paper001_table_I():
    data = datasets.table1(seed=0)
    assert data.graph.number_of_nodes() == 100 and data.dim == 100
    assert data.clusters.tolist() == [0] * 50 + [1] * 50
    assert all(data.X[v].shape == (10, 100) for v in data.nodes) and data.has_data.all()
    W = data.true_weights
    assert set(np.unique(W)) == {0.0, 1.0}  # {0, 1}^d, Bernoulli(1/2): about half ones
    assert (W[:50] == W[0]).all() and (W[50:] == W[50]).all() and not (W[0] == W[50]).all()
    assert 0.3 < W[[0, 50]].mean() < 0.7
    resid = np.concatenate([data.y[v] - data.X[v] @ W[i] for i, v in enumerate(data.nodes)])
    assert 0.5e-3 < resid.std() < 1.5e-3  # sigma = 1e-3 in (38)
    assert data.info["p_in"] == 0.5 and data.info["p_out"] == 1e-2


def test_sbm_knobs_rho_sigma_p_out():
    data = datasets.sbm((20, 20), p_in=0.5, p_out=0.0, rho=0.6, sigma=0.5, seed=1)
    assert data.has_data.sum() == 24
    assert nx.number_connected_components(data.graph) >= 2  # p_out = 0: no cross edges
    resid = np.concatenate([data.y[v] - data.X[v] @ data.true_weights[i]
                            for i, v in enumerate(data.nodes) if v in data.X])
    assert 0.35 < resid.std() < 0.65


def test_chain_uses_ceil_of_rho_as_the_paper():
    assert datasets.chain(n=10, rho=0.6).has_data.sum() == 12  # 0.6 * 20 = 12.000...2
    assert datasets.chain(n=10, rho=0.51).has_data.sum() == 11
    data = datasets.chain(n=4, eps=0.2)
    assert [data.graph.edges[e]["weight"] for e in data.graph.edges] == [1, 1, 1, 0.2, 1, 1, 1]


def test_star_is_paper001_VI_C():
    data = datasets.star(seed=2)
    assert data.graph.number_of_nodes() == 50 and data.graph.degree[0] == 49
    assert data.clusters.tolist() == list(range(50))
    assert len(np.unique(data.true_weights, axis=0)) == 50
    assert all(data.X[v].shape == (5, 2) for v in data.nodes)


def test_digits_convex_stand_in():
    data = datasets.digits(seed=0)
    assert data.graph.number_of_nodes() == 40 and data.graph.number_of_edges() == 0
    assert data.dim == 65 and data.loss == "logistic" and np.isnan(data.true_weights).all()
    assert data.clusters.tolist() == [0] * 20 + [1] * 20
    for v in data.nodes:
        pair = datasets.DIGIT_CLUSTERS[data.clusters[v]]
        assert set(np.unique(data.info["digits"][v])) <= set(pair)
        assert set(np.unique(np.concatenate([data.y[v], data.y_val[v]]))) <= {-1.0, 1.0}
        assert len(data.X_val[v]) >= 1 and len(data.X[v]) >= 1
        assert np.all(data.X[v][:, -1] == 1.0) and data.X[v][:, :-1].max() <= 1.0
    # every image is used once: about 180 per digit, 4 digits
    total = sum(len(data.X[v]) + len(data.X_val[v]) for v in data.nodes)
    assert 700 <= total <= 730
    model = data.model(lam=0.1)
    assert isinstance(model.loss(0), gm.LogisticLoss)


def test_weather_generator_follows_its_documented_model():
    data = datasets.weather(seed=0)
    assert data.graph.number_of_nodes() == 203 and data.graph.number_of_edges() == 0
    assert np.bincount(data.clusters).tolist() == [51, 51, 51, 50]
    assert data.info["coords"].shape == (203, 2)
    for s in (0, 100, 202):
        assert data.X[s].shape == (28, 2) and data.y[s].shape == (28,)
        # feature 2 of day t is yesterday's maximum: the label of day t - 1
        np.testing.assert_array_equal(data.X[s][1:, 1], data.y[s][:-1])
    for r, w in enumerate(datasets.WEATHER_WEIGHTS):
        nodes = np.flatnonzero(data.clusters == r)
        X = np.vstack([data.X[v] for v in nodes])
        y = np.concatenate([data.y[v] for v in nodes])
        np.testing.assert_allclose(np.linalg.lstsq(X, y, rcond=None)[0], w, atol=0.05)
    assert (data.true_weights == np.array(datasets.WEATHER_WEIGHTS)[data.clusters]).all()


def test_split_partitions_each_local_dataset():
    data = datasets.weather(stations=8, seed=1)
    splits = [data.split(0.3 / 1.3, seed=k) for k in range(5)]
    for sp in splits:
        for v in data.nodes:
            assert len(sp.X[v]) == 22 and len(sp.X_val[v]) == 6
            rows = np.vstack([sp.X[v], sp.X_val[v]])
            order = np.lexsort(rows.T)
            np.testing.assert_array_equal(rows[order], data.X[v][np.lexsort(data.X[v].T)])
    assert not np.array_equal(splits[0].X_val[0], splits[1].X_val[0])


def test_validation_error_and_accuracy_against_direct_formulas(rng):
    data = datasets.weather(stations=6, seed=2).split(0.25, seed=0)
    W = rng.standard_normal((6, 2))
    direct = np.mean([np.mean((data.X_val[v] @ W[v] - data.y_val[v]) ** 2) for v in range(6)])
    assert math.isclose(data.validation_error(W), direct, rel_tol=1e-12)
    dig = datasets.digits(nodes=4, seed=1)
    W = rng.standard_normal((4, 65))
    correct = sum(int(np.sum(np.sign(dig.X_val[v] @ W[v]) == dig.y_val[v])) for v in range(4))
    assert math.isclose(dig.accuracy(W), correct / sum(len(dig.y_val[v]) for v in range(4)))
    with pytest.raises(DataError, match="shape"):
        data.validation_error(np.zeros((5, 2)))
    with pytest.raises(DataError, match="part"):
        dig.accuracy(W, part="test")


@pytest.mark.parametrize("call, error, word", [
    (lambda: datasets.sbm(rho=0.0), DataError, "rho"),
    (lambda: datasets.sbm(rho=1.5), DataError, "rho"),
    (lambda: datasets.chain(rho=-0.1), DataError, "rho"),
    (lambda: datasets.table1(rho=0.0), DataError, "rho"),
    (lambda: datasets.sbm(sizes=(10, -3)), DataError, "sizes"),
    (lambda: datasets.sbm(sizes=()), DataError, "sizes"),
    (lambda: datasets.table1(d=0), DataError, "d"),
    (lambda: datasets.chain(n=-1), DataError, "n"),
    (lambda: datasets.star(leaves=-2), DataError, "leaves"),
    (lambda: datasets.weather(stations=-5), DataError, "stations"),
    (lambda: datasets.weather(days=0), DataError, "days"),
    (lambda: datasets.digits(nodes=7), DataError, "even"),
    (lambda: datasets.sbm(sigma=-1.0), DataError, "sigma"),
    (lambda: datasets.chain(sigma=-1.0), DataError, "sigma"),
    (lambda: datasets.weather(sigma=-0.5), DataError, "sigma"),
    (lambda: datasets.sbm(p_out=1.5), ParameterError, "p_out"),
    (lambda: datasets.paper000_sbm(p_out=-1.0), ParameterError, "p_out"),
    (lambda: datasets.chain(eps=-0.1), ParameterError, "eps"),
    (lambda: datasets.star(leaves=3).split(0.0), DataError, "val_fraction"),
])
def test_bad_arguments_raise_the_packages_errors(call, error, word):
    with pytest.raises(error, match=word):
        call()


def _fingerprint(data: datasets.NetworkedData) -> str:
    """SHA-256 of a dataset: its sorted edge list with weights, node order, clusters, true
    weights and every local (and validation) dataset, floats rounded to 8 decimals (so the
    last bits of a BLAS product do not matter; ``+ 0.0`` folds ``-0.0`` into ``0.0``)."""
    h = hashlib.sha256()

    def put(array) -> None:
        a = np.asarray(array)
        a = np.round(a.astype(float), 8) + 0.0 if a.dtype.kind == "f" else a.astype(np.int64)
        h.update(str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())

    put(np.array(data.nodes, dtype=np.int64))
    edges = sorted((min(a, b), max(a, b), float(w)) for a, b, w in
                   data.graph.edges(data="weight", default=1.0))
    put(np.array([e[:2] for e in edges], dtype=np.int64).reshape(-1, 2))
    put(np.array([e[2] for e in edges], dtype=float))
    put(data.clusters)
    put(np.nan_to_num(data.true_weights, nan=-1.0))
    for part in (data.X, data.y, data.X_val, data.y_val):
        put(np.array(sorted(part), dtype=np.int64))
        for v in sorted(part):
            put(part[v])
    return h.hexdigest()[:16]


#: Pinned fingerprints: a seeded dataset is the same dataset with any networkx (the SBMs of
#: networkx 3.7 differ from 3.6's) and on any platform.  A change here changes every number
#: the papers' experiments print: update them with it (docs/*.md, experiment thresholds).
PINNED = {
    "sbm": (lambda: datasets.sbm(seed=1), "7d7970d9828d2419"),
    "sbm_quick": (lambda: datasets.sbm((6, 6), rho=0.5, sigma=0.1, seed=3), "10d3441a605b5451"),
    "table1": (lambda: datasets.table1(seed=0), "320098bf438ea985"),
    "chain": (lambda: datasets.chain(n=10, rho=0.6, sigma=0.1, seed=2), "b280c0cbb9a47f6d"),
    "star": (lambda: datasets.star(seed=0), "622a448f9e4cd888"),
    "digits": (lambda: datasets.digits(seed=0), "d00b02003aeb4bd6"),
    "weather": (lambda: datasets.weather(seed=0).split(0.3 / 1.3, seed=1), "5fdb40e477a8a678"),
    "paper000": (lambda: datasets.paper000_sbm(seed=0), "99bfa467d325e0b0"),
}


@pytest.mark.parametrize("name", PINNED)
def test_datasets_are_pinned(name):
    make, digest = PINNED[name]
    assert _fingerprint(make()) == digest


def test_sbm_graph_samples_the_block_model():
    """Edge counts of every block pair within 4 standard deviations of ``p * #pairs``; no
    self-loops or duplicates; the blocks' order; ``p = 0`` and ``p = 1`` exactly."""
    sizes, P = (40, 30, 20), np.array([[0.5, 0.05, 0.0], [0.05, 0.3, 0.1], [0.0, 0.1, 1.0]])
    G = datasets.sbm_graph(sizes, P, seed=0)
    edges = np.array(sorted(G.edges))
    assert (edges[:, 0] < edges[:, 1]).all() and len(np.unique(edges, axis=0)) == len(edges)
    block = np.repeat(np.arange(3), sizes)
    count = np.zeros((3, 3))
    np.add.at(count, (block[edges[:, 0]], block[edges[:, 1]]), 1)
    for a in range(3):
        for b in range(a, 3):
            pairs = sizes[a] * (sizes[a] - 1) / 2 if a == b else sizes[a] * sizes[b]
            mean, sd = P[a, b] * pairs, math.sqrt(pairs * P[a, b] * (1 - P[a, b]))
            assert abs(count[a, b] - mean) <= 4 * sd, (a, b)
    with pytest.raises(ParameterError, match="probs"):
        datasets.sbm_graph((3, 3), [[0.5, 0.1], [0.2, 0.5]])
