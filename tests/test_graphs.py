"""Issue 11: node statistics, distances (42) and the graph builders (kNN, threshold (43),
epsilon), on small hand-checkable cases and against direct scipy computations."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gtvmodel import DataError, GraphError, ParameterError
from gtvmodel.graphs import (
    edge_weights,
    epsilon_graph,
    euclidean_distances,
    knn_graph,
    node_statistics,
    pairwise_distances,
    threshold_graph,
    wasserstein_distances,
)


# ------------------------------------------------------------------ statistics
def test_node_statistics_match_numpy_and_add_the_ridge_only_when_m_le_d(rng):
    data = {"a": rng.normal(size=(7, 3)), "b": rng.normal(size=(3, 3)),
            "c": rng.normal(size=(1, 3))}
    s = node_statistics(data, ridge=0.1)
    assert s.nodes == ["a", "b", "c"] and s.sizes.tolist() == [7, 3, 1]
    for k, x in enumerate(data.values()):
        assert np.allclose(s.means[k], x.mean(axis=0))
    assert np.allclose(s.covariances[0], np.cov(data["a"].T))
    assert np.allclose(s.covariances[1], np.cov(data["b"].T) + 0.1 * np.eye(3))
    assert np.allclose(s.covariances[2], 0.1 * np.eye(3))


def test_node_statistics_errors_name_the_node():
    with pytest.raises(DataError, match="node 1"):
        node_statistics([np.ones((2, 2)), np.ones((2, 3))])
    with pytest.raises(DataError, match="node 'x'"):
        node_statistics({"x": [[np.nan, 1.0]]})
    with pytest.raises(DataError, match="ridge"):
        node_statistics([np.ones((2, 2))], ridge=-1.0)


# ------------------------------------------------------------------ distances
def _w2_direct(mu1, S1, mu2, S2):
    r = scipy.linalg.sqrtm(S1)
    cross = scipy.linalg.sqrtm(r @ S2 @ r)
    return float(np.sum((mu1 - mu2) ** 2) + np.trace(S1 + S2 - 2 * np.real(cross)))


def _spd(rng, n, d):
    A = rng.normal(size=(n, d, d))
    return A @ A.transpose(0, 2, 1) + 0.1 * np.eye(d)


def test_wasserstein_42_against_scipy_sqrtm(rng):
    n, d = 6, 3
    mu, S = rng.normal(size=(n, d)), _spd(rng, n, d)
    W = wasserstein_distances(mu, S)
    for i in range(n):
        for j in range(n):
            if i != j:
                assert W[i, j] == pytest.approx(_w2_direct(mu[i], S[i], mu[j], S[j]),
                                                rel=1e-8, abs=1e-10)
    assert np.allclose(W, W.T) and (np.diag(W) == 0).all() and (W >= 0).all()


def test_wasserstein_is_zero_for_identical_gaussians_and_squared(rng):
    mu, S = rng.normal(size=(1, 2)), _spd(rng, 1, 2)
    W = wasserstein_distances(np.repeat(mu, 2, 0), np.repeat(S, 2, 0))
    assert abs(W[0, 1]) < 1e-10
    # equal covariances: W = ||mu1 - mu2||^2, the *squared* distance (MATH.md section 10)
    W = wasserstein_distances([[0.0, 0.0], [3.0, 4.0]], np.repeat(S, 2, 0))
    assert W[0, 1] == pytest.approx(25.0)


@settings(max_examples=25, deadline=None)
@given(hnp.arrays(float, (4, 2), elements=st.floats(-5, 5)),
       hnp.arrays(float, (4, 2, 2), elements=st.floats(-2, 2)))
def test_wasserstein_symmetric_non_negative(mu, A):
    S = A @ A.transpose(0, 2, 1)
    W = wasserstein_distances(mu, S)
    assert np.allclose(W, W.T) and (W >= 0).all() and (np.diag(W) == 0).all()
    # the square root is a metric: triangle inequality
    R = np.sqrt(W)
    assert (R[:, None, :] <= R[:, :, None] + R[None, :, :] + 1e-6).all()


def test_wasserstein_rejects_bad_covariances():
    with pytest.raises(DataError, match=r"covariances\[1\].*semidefinite"):
        wasserstein_distances([[0.0], [1.0]], [[[1.0]], [[-1.0]]])
    with pytest.raises(DataError, match="shape"):
        wasserstein_distances([[0.0], [1.0]], [[[1.0]]])


def test_pairwise_and_euclidean_distances(rng):
    X = rng.normal(size=(5, 3))
    D = pairwise_distances(X, lambda A, B: np.abs(A - B).sum(axis=1))
    assert np.allclose(D, scipy.spatial.distance.cdist(X, X, "cityblock"))
    assert np.allclose(euclidean_distances(X), scipy.spatial.distance.cdist(X, X))
    with pytest.raises(DataError, match="negative"):
        pairwise_distances(X, lambda A, B: -np.ones(len(A)))
    with pytest.raises(DataError, match="NaN"):
        pairwise_distances(X, lambda A, B: np.full(len(A), np.nan))


# ------------------------------------------------------------------ builders
def test_knn_symmetrization_by_hand():
    # points 0, 1, 3, 10 on a line, k = 1: nearest of 0 is 1, of 1 is 0, of 3 is 1, of 10 is 3
    X = [[0.0], [1.0], [3.0], [10.0]]
    G = knn_graph(X, 1, weight="unit")
    assert sorted(G.edges()) == [(0, 1), (1, 2), (2, 3)]
    M = knn_graph(X, 1, weight="unit", mutual=True)  # only 0 <-> 1 is mutual
    assert sorted(M.edges()) == [(0, 1)] and M.number_of_nodes() == 4
    # the same from the distance matrix, with exp weights exp(-dist) (001 VI-D)
    D = np.abs(np.subtract.outer(np.ravel(X), np.ravel(X)))
    P = knn_graph(D, 1, metric="precomputed", nodes=list("abcd"))
    assert sorted(P.edges()) == [("a", "b"), ("b", "c"), ("c", "d")]
    assert P["c"]["d"]["weight"] == pytest.approx(np.exp(-7.0))


@settings(max_examples=20, deadline=None)
@given(hnp.arrays(float, (9, 2), elements=st.floats(-10, 10), unique=True),
       st.integers(1, 8))
def test_knn_from_points_equals_knn_from_distances(X, k):
    D = scipy.spatial.distance.cdist(X, X)
    np.fill_diagonal(D, np.inf)
    ranks = np.sort(D, axis=1)
    if (np.diff(ranks[:, : k + 1], axis=1) == 0).any():  # ties: either neighbour is right
        return
    G = knn_graph(X, k, weight="unit")
    expected = {tuple(sorted((i, int(j)))) for i in range(9)
                for j in np.argsort(D[i])[:k]}
    assert set(map(tuple, map(sorted, G.edges()))) == expected
    assert set(map(tuple, map(sorted, knn_graph(scipy.spatial.distance.cdist(X, X), k,
                                                metric="precomputed").edges()))) == expected


@settings(max_examples=25, deadline=None)
@given(hnp.arrays(float, (6, 6), elements=st.floats(0.01, 10)), st.floats(0.05, 10))
def test_threshold_keeps_exactly_pairs_with_w_le_eta(A, eta):
    W = np.triu(A, 1) + np.triu(A, 1).T
    G = threshold_graph(W, eta)
    kept = {(i, j) for i in range(6) for j in range(i + 1, 6) if W[i, j] <= eta}
    assert {tuple(sorted(e)) for e in G.edges()} == kept
    for i, j in kept:
        assert G[i][j]["weight"] == pytest.approx(1.0 / W[i, j])  # (43)


def test_epsilon_graph_and_weights():
    X = [[0.0], [1.0], [1.5], [9.0]]
    G = epsilon_graph(X, 1.0, scale=2.0)
    assert sorted(G.edges()) == [(0, 1), (1, 2)]
    assert G[0][1]["weight"] == pytest.approx(np.exp(-1.0 / 8.0))  # Gaussian kernel
    assert edge_weights([2.0], lambda t: 1 + t).tolist() == [3.0]
    with pytest.raises(DataError, match="inverse"):
        edge_weights([0.0], "inverse")
    with pytest.raises(ParameterError, match="weight"):
        edge_weights([1.0], "cosine")


def test_connect_adds_the_closest_joining_edges_and_require_connected_raises():
    X = [[0.0], [1.0], [5.0], [6.0], [20.0]]
    with pytest.raises(GraphError, match="isolated nodes \\[4\\]"):
        epsilon_graph(X, 1.5, require_connected=True)
    G = epsilon_graph(X, 1.5, connect=True, weight="unit")
    assert nx.is_connected(G) and G.number_of_edges() == 4
    assert {(1, 2), (3, 4)} <= {tuple(sorted(e)) for e in G.edges()}
    D = scipy.spatial.distance.cdist(X, X)
    H = threshold_graph(D, 1.5, connect=True)
    assert sorted(H.edges()) == sorted(G.edges())
    assert H[1][2]["weight"] == pytest.approx(1.0 / 4.0)


def test_builder_errors_name_the_argument():
    D = np.array([[0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(ParameterError, match="k"):
        knn_graph(D, 2, metric="precomputed")  # k >= n
    with pytest.raises(ParameterError, match="eta"):
        threshold_graph(D, 0.0)
    with pytest.raises(ParameterError, match="eta"):
        threshold_graph(D, -1.0)
    with pytest.raises(DataError, match="negative"):
        threshold_graph(-D, 1.0)
    with pytest.raises(DataError, match="NaN"):
        threshold_graph(np.array([[0.0, np.nan], [np.nan, 0.0]]), 1.0)
    with pytest.raises(DataError, match="symmetric"):
        threshold_graph(np.array([[0.0, 1.0], [2.0, 0.0]]), 1.0)
    with pytest.raises(ParameterError, match="metric"):
        knn_graph(D, 1, metric="cosine")
    with pytest.raises(GraphError, match="labels"):
        knn_graph(D, 1, metric="precomputed", nodes=["a"])
