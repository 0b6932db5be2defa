"""Batch construction (issue 16 item 1): ``GTVModel.from_arrays``/``set_data``,
``set_losses`` and ``GTVModel.from_edges`` against models built node by node with ``set_loss``
on a ``networkx.Graph``; bad input raises the package's own errors naming the argument."""

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel.errors import DataError, GraphError, LossError, UnknownNodeError


def _ragged(seed=0, n=6, d=3):
    rng = np.random.default_rng(seed)
    ms = rng.integers(1, 5, n)
    ms[2] = 0  # a node without data keeps ZeroLoss
    owner = np.repeat(np.arange(n), ms)
    perm = rng.permutation(owner.size)  # rows in any order
    X = rng.standard_normal((owner.size, d))
    y = rng.standard_normal(owner.size)
    return X[perm], y[perm], owner[perm]


def _by_set_loss(G, X, y, owner, cls, d, **opts):
    model = gm.GTVModel(G, d, lam=0.3)
    for i in np.unique(owner):
        rows = owner == i  # boolean selection keeps the rows' order
        model.set_loss(int(i), cls(X[rows], y[rows], **opts))
    return model


@pytest.mark.parametrize("kind, cls, opts", [
    ("squared", gm.SquaredLoss, {}),
    ("logistic", gm.LogisticLoss, {"l2": 0.1}),
    ("huber", gm.HuberLoss, {"M": 0.5}),
    ("absolute", gm.AbsoluteLoss, {"l1": 0.05}),
])
def test_from_arrays_matches_set_loss(kind, cls, opts):
    X, y, owner = _ragged()
    if kind == "logistic":
        y = (y > 0).astype(float)
    G = nx.cycle_graph(6)
    ref = _by_set_loss(G, X, y, owner, cls, 3, **opts)
    fast = gm.GTVModel.from_arrays(G, X, y, kind, node_index=owner, lam=0.3, **opts)
    assert [repr(fast.loss(i)) for i in G] == [repr(ref.loss(i)) for i in G]
    for i in G:
        if ref.loss(i).has_data:
            np.testing.assert_array_equal(fast.loss(i).X, ref.loss(i).X)
            np.testing.assert_array_equal(fast.loss(i).y, ref.loss(i).y)
    W = np.random.default_rng(1).standard_normal((6, 3))
    assert fast.objective(W) == pytest.approx(ref.objective(W), rel=1e-14)
    np.testing.assert_allclose(fast.loss_values(W), ref.loss_values(W), rtol=1e-14)
    if ref.loss(0).smooth:
        np.testing.assert_allclose(fast.loss_gradients(W), ref.loss_gradients(W), rtol=1e-13)


def test_from_arrays_solve_exact_against_independent_cvxpy():
    X, y, owner = _ragged(seed=3)
    G = nx.path_graph(6)
    model = gm.GTVModel.from_arrays(G, X, y, gm.SquaredLoss, node_index=owner, lam=0.4)
    ref = _by_set_loss(G, X, y, owner, gm.SquaredLoss, 3)
    ref.lam = 0.4
    # independent formulation (plain CVXPY, written here)
    W = cp.Variable((6, 3))
    terms = [cp.sum_squares(X[owner == i] @ W[i] - y[owner == i]) / np.sum(owner == i)
             for i in np.unique(owner)]
    terms += [0.4 * cp.norm2(W[a] - W[b]) for a, b in G.edges]
    prob = cp.Problem(cp.Minimize(cp.sum(terms)))
    prob.solve(solver="CLARABEL", tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    sol = model.solve_exact()
    assert sol.objective == pytest.approx(prob.value, rel=1e-6)
    assert ref.solve_exact().objective == pytest.approx(prob.value, rel=1e-6)


def test_three_input_forms_agree():
    rng = np.random.default_rng(2)
    n, m, d = 4, 3, 2
    X3 = rng.standard_normal((n, m, d))
    y3 = rng.standard_normal((n, m))
    G = nx.path_graph(n)
    a = gm.GTVModel.from_arrays(G, X3, y3)
    b = gm.GTVModel.from_arrays(G, X3.reshape(-1, d), y3.ravel(),
                                node_index=np.repeat(np.arange(n), m))
    c = gm.GTVModel.from_arrays(G, {i: (X3[i], y3[i]) for i in range(n)})
    W = rng.standard_normal((n, d))
    assert a.objective(W) == b.objective(W) == c.objective(W)


def test_string_labels_and_binary_label_conversion():
    G = nx.Graph([("a", "b"), ("b", "c")])
    X = np.eye(2)[[0, 1, 0, 1]]
    model = gm.GTVModel(G, 2)
    model.set_data(X, [0, 1, 1, 0], "hinge", node_index=["c", "a", "c", "a"])
    assert model.loss("c").y.tolist() == [-1.0, 1.0]
    assert model.loss("a").y.tolist() == [1.0, -1.0]
    assert model.loss("b").is_zero


def test_node_index_of_tuples_and_mixed_labels():
    G = nx.Graph([(("a", 1), 2), (2, "b")])
    model = gm.GTVModel(G, 1)
    model.set_data(np.ones((4, 1)), [1.0, 2.0, 3.0, 4.0], node_index=[("a", 1), 2, "b", 2])
    assert model.loss(2).y.tolist() == [2.0, 4.0] and model.loss(("a", 1)).m == 1
    with pytest.raises(UnknownNodeError, match="'2'"):
        model.set_data(np.ones((1, 1)), [1.0], node_index=["2"])


def test_set_losses_validates_before_storing():
    G = nx.path_graph(3)
    model = gm.GTVModel(G, 1)
    model.set_losses({0: gm.QuadraticLoss([1.0]), 1: lambda w: cp.abs(w[0])})
    assert type(model.loss(1)).__name__ == "SymbolicLoss"
    builds = model.cache.builds
    with pytest.raises(UnknownNodeError, match="7"):
        model.set_losses({2: gm.QuadraticLoss([2.0]), 7: gm.QuadraticLoss([1.0])})
    with pytest.raises(DataError, match="node 2"):
        model.set_losses({2: gm.QuadraticLoss([1.0, 2.0])})
    with pytest.raises(LossError, match="mapping"):
        model.set_losses([gm.QuadraticLoss([1.0])])
    assert model.loss(2).is_zero and model.cache.builds == builds


@pytest.mark.parametrize("kwargs, error, match", [
    ({"node_index": [0, 0, 9]}, UnknownNodeError, "node_index names node 9"),
    ({"node_index": [0, 1]}, DataError, "node_index must have shape"),
    ({"node_index": None}, DataError, "node_index"),
    ({"node_index": [0, 1, 1], "y": [1.0, 2.0]}, DataError, "y must have shape"),
    ({"node_index": [0, 1, 1], "y": [1.0, np.nan, 2.0]}, DataError, "y contains NaN"),
    ({"node_index": [0, 1, 1], "X": [[1.0, np.inf]] * 3}, DataError, "X contains NaN"),
    ({"node_index": [0, 1, 1], "X": np.ones((3, 3))}, DataError, "3 columns"),
    ({"node_index": [0, 1, 1], "loss": "nope"}, LossError, "loss must be one of"),
    ({"node_index": [0, 1, 1], "loss": "quadratic"}, LossError, "QuadraticLoss"),
    ({"node_index": [0, 1, 1], "loss": "huber", "M": -1.0}, gm.GTVError, "M"),
    ({"node_index": [0, 1, 1], "loss": "squared", "M": 1.0}, LossError, "SquaredLoss cannot"),
])
def test_set_data_errors(kwargs, error, match):
    args = {"X": np.ones((3, 2)), "y": [1.0, 2.0, 3.0], "loss": "squared"} | kwargs
    model = gm.GTVModel(nx.path_graph(2), 2)
    with pytest.raises(error, match=match):
        model.set_data(args.pop("X"), args.pop("y"), args.pop("loss"), **args)


def test_set_data_mapping_errors():
    model = gm.GTVModel(nx.path_graph(2), 2)
    with pytest.raises(DataError, match="node 1"):
        model.set_data({0: (np.ones((2, 2)), np.ones(2)), 1: (np.ones((2, 3)), np.ones(2))})
    with pytest.raises(UnknownNodeError, match="'x'"):
        model.set_data({"x": (np.ones((2, 2)), np.ones(2))})
    with pytest.raises(DataError, match="neither y"):
        model.set_data({0: (np.ones((2, 2)), np.ones(2))}, np.ones(2))


def test_from_edges_matches_networkx_graph():
    rng = np.random.default_rng(4)
    G = nx.gnm_random_graph(30, 80, seed=4)
    for e in G.edges:
        G.edges[e]["weight"] = float(rng.uniform(0.5, 2.0))
    pairs = np.array([(b, a) if k % 2 else (a, b) for k, (a, b) in enumerate(G.edges)])
    w = np.array([G.edges[e]["weight"] for e in G.edges])
    ref = gm.GTVModel(G, 2)
    fast = gm.GTVModel.from_edges(30, pairs, w, dim=2)
    np.testing.assert_array_equal(fast.edges, ref.edges)
    np.testing.assert_array_equal(fast.edge_weights, ref.edge_weights)
    assert (fast.incidence != ref.incidence).nnz == 0
    np.testing.assert_array_equal(fast.degrees, ref.degrees)
    assert nx.utils.graphs_equal(fast.graph, ref.graph) and nx.is_frozen(fast.graph)
    labelled = gm.GTVModel.from_edges(list("abc"), [[0, 1]], dim=1)
    assert labelled.nodes == ["a", "b", "c"] and labelled.empirical_graph.edge_label(0) == ("a",
                                                                                           "b")


@pytest.mark.parametrize("nodes, edges, weights, match", [
    (3, [[0, 3]], None, r"edges\[0\] = \(0, 3\).*out of range"),
    (3, [[0, -1]], None, "out of range"),
    (3, [[1, 1]], None, "self-loop"),
    (3, [[0, 1], [1, 0]], None, r"\(0, 1\) appears twice"),
    (3, [[0, 1], [1, 2]], [1.0, -2.0], r"weights\[1\] = -2 at edge \(1, 2\)"),
    (3, [[0, 1]], [np.nan], r"weights\[0\]"),
    (3, [[0, 1]], [1.0, 2.0], "weights must have shape"),
    (3, [[0.0, 1.0]], None, "integer"),
    (3, [0, 1], None, "shape"),
    (["a", "a"], [[0, 1]], None, "'a' appears twice"),
    (0, [], None, "nodes"),
])
def test_from_edges_errors(nodes, edges, weights, match):
    with pytest.raises(GraphError, match=match):
        gm.GTVModel.from_edges(nodes, edges, weights, dim=1)


def test_from_edges_model_runs_engines():
    X, y, owner = _ragged(seed=5)
    model = gm.GTVModel.from_edges(6, [[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]], dim=3, lam=0.2)
    model.set_data(X, y, node_index=owner)
    ref = _by_set_loss(nx.path_graph(6), X, y, owner, gm.SquaredLoss, 3)
    ref.lam = 0.2
    sol = model.solve_exact()
    np.testing.assert_allclose(sol.weights, ref.solve_exact().weights, atol=1e-6)
    assert model.certify(sol.weights).gap <= 1e-6
