"""The declarative model: graph views in MATH.md's conventions, declaration API, numerics."""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import gtvmodel as gm


@pytest.fixture
def labelled():
    G = nx.Graph()
    G.add_nodes_from(["z", 3, ("t", 1), "a"])  # node order is insertion order
    G.add_edge("a", "z", weight=2.0)  # positions (3, 0): head 0, tail 3
    G.add_edge(3, ("t", 1))
    G.add_edge("z", 3, weight=0.5)
    return G


def test_node_order_orientation_weights_incidence(labelled):
    m = gm.GTVModel(labelled, 2, lam=0.5)
    assert m.nodes == ["z", 3, ("t", 1), "a"]
    assert [m.index(v) for v in m.nodes] == [0, 1, 2, 3]
    # e+ < e- (positions), sorted by (head, tail)
    np.testing.assert_array_equal(m.edges, [[0, 1], [0, 3], [1, 2]])
    np.testing.assert_allclose(m.edge_weights, [0.5, 2.0, 1.0])
    D = m.incidence
    assert sp.issparse(D) and D.shape == (3, 4) and D.nnz == 6
    np.testing.assert_array_equal(D.toarray(), [[1, -1, 0, 0], [1, 0, 0, -1], [0, 1, -1, 0]])
    np.testing.assert_array_equal(m.degrees, [2, 2, 1, 1])
    W = np.arange(8.0).reshape(4, 2)
    eg = m.empirical_graph
    np.testing.assert_allclose(eg.diff(W), W[m.edges[:, 0]] - W[m.edges[:, 1]])
    U = np.ones((3, 2))
    # (D^T u)_i = sum_{e+ = i} u_e - sum_{e- = i} u_e
    np.testing.assert_allclose(eg.divergence(U), [[2, 2], [0, 0], [-1, -1], [-1, -1]])
    L = nx.laplacian_matrix(labelled, nodelist=m.nodes, weight="weight").toarray()
    np.testing.assert_allclose(eg.laplacian().toarray(), L)
    assert eg.edge_label(1) == ("z", "a")


def test_var_and_default_zero_loss(labelled):
    m = gm.GTVModel(labelled, 3)
    x = m.var("a")
    assert isinstance(x, cp.Variable) and x.shape == (3,)
    assert m.var("a") is x
    assert isinstance(m.loss("z"), gm.ZeroLoss)
    assert m.lam == 1.0 and isinstance(m.penalty, gm.Norm2)


def test_three_forms_of_set_loss(labelled):
    m = gm.GTVModel(labelled, 2)
    m.set_loss("z", gm.QuadraticLoss([1.0, 2.0]))
    m.set_loss(3, cp.sum_squares(m.var(3)))
    m.set_loss("a", lambda x: cp.norm1(x - 1))
    assert isinstance(m.loss(3), gm.SymbolicLoss) and isinstance(m.loss("a"), gm.SymbolicLoss)
    W = np.array([[1.0, 2.0], [3.0, 4.0], [0.0, 0.0], [2.0, -1.0]])
    np.testing.assert_allclose(m.loss_values(W), [0.0, 25.0, 0.0, 1.0 + 2.0])
    st = m.structure()
    assert st.symbolic == [1, 3] and len(st.batches) == 1
    assert m.has_symbolic
    m.set_loss(3, gm.ZeroLoss())  # replacing a loss updates the structure
    assert m.structure().symbolic == [3]


def test_add_and_clear_constraints(labelled):
    m = gm.GTVModel(labelled, 2)
    m.add_constraint("z", gm.Box(0.0, 1.0))
    m.add_constraint("z", m.var("z")[0] <= 0.5)
    m.add_constraint("a", lambda x: [x >= -1, cp.sum(x) <= 1])
    assert len(m.constraints("z")) == 2 and len(m.constraints("a")) == 2
    viol = m.constraint_violations(np.array([[0.8, 0.2], [9, 9], [9, 9], [3.0, -2.0]]))
    np.testing.assert_allclose(viol, [0.3, 0.0, 0.0, 1.0])
    m.clear_constraints("z")
    assert m.constraints("z") == []


def test_objective_and_penalty_value(labelled):
    rng = np.random.default_rng(0)
    m = gm.GTVModel(labelled, 2, penalty=gm.Norm1(), lam=0.7)
    X, y = rng.normal(size=(4, 2)), rng.normal(size=4)
    m.set_loss(3, gm.SquaredLoss(X, y, l1=0.1, l2=0.2))
    W = rng.normal(size=(4, 2))
    tv = sum(d.get("weight", 1.0) * np.abs(W[m.index(a)] - W[m.index(b)]).sum()
             for a, b, d in labelled.edges(data=True))
    loss = ((y - X @ W[1]) ** 2).mean() + 0.1 * np.abs(W[1]).sum() + 0.2 * W[1] @ W[1]
    assert m.penalty_value(W) == pytest.approx(0.7 * tv, rel=1e-12)
    assert m.objective(W) == pytest.approx(loss + 0.7 * tv, rel=1e-12)
    # the solver's objective at its solution is the numpy objective
    sol = m.solve_exact()
    assert m.objective(sol.weights) == pytest.approx(sol.objective, rel=1e-8)
    d = m.weights_by_node(sol.weights)
    assert set(d) == set(m.nodes)
    np.testing.assert_allclose(d[("t", 1)], sol.weight(("t", 1)))
    assert sol.weights_by_node().keys() == d.keys()


def test_d1_weights_accept_flat_arrays():
    m = gm.GTVModel(nx.path_graph(3), 1, lam=0.0)
    m.set_loss(0, gm.QuadraticLoss([1.0]))
    assert m.objective(np.array([1.0, 0.0, 5.0])) == pytest.approx(0.0)


def test_penalty_and_lam_are_settable():
    m = gm.GTVModel(nx.path_graph(3), 1, lam=1.0)
    m.set_loss(0, gm.QuadraticLoss([1.0]))
    m.set_loss(2, gm.QuadraticLoss([-1.0]))
    s1 = m.solve_exact()
    m.penalty = gm.SquaredNorm2()
    m.lam = 0.5
    s2 = m.solve_exact()
    # closed form (2 I_data + lam L) w = 2 a on the path with data at the ends
    L = nx.laplacian_matrix(nx.path_graph(3)).toarray()
    A = np.diag([2.0, 0.0, 2.0]) + 0.5 * L
    np.testing.assert_allclose(s2.weights.ravel(), np.linalg.solve(A, [2.0, 0.0, -2.0]),
                               atol=1e-8)
    np.testing.assert_allclose(s1.weights.ravel(), [0.5, 0.0, -0.5], atol=1e-8)


def test_repr_mentions_sizes():
    m = gm.GTVModel(nx.path_graph(4), 2, lam=0.25)
    assert "n=4" in repr(m) and "|E|=3" in repr(m) and "lam=0.25" in repr(m)
    assert "m=2" in repr(gm.SquaredLoss(np.ones((2, 2)), np.ones(2), l1=0.5))


def test_datasets_sbm_model_and_mse():
    from gtvmodel import datasets

    data = datasets.sbm(sizes=(10, 10), p_in=0.6, p_out=0.05, seed=1)
    model = data.model(lam=0.01)
    assert model.num_nodes == 20 and model.dim == 2
    assert data.mse(data.true_weights) == 0.0
    sol = model.solve_exact()
    assert data.mse(sol.weights) < 1e-3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_constraint_violations_match_each_constraint(seed):
    """The stacked per-node violations equal ``max(c.violation(w_i))`` over the node's
    constraints: every constraint type, several on one node, infinite bounds, points inside
    and outside."""
    rng = np.random.default_rng(seed)
    n, d = 40, 3
    m = gm.GTVModel(nx.path_graph(n), d)
    for i in range(n):
        for _ in range(rng.integers(0, 4)):
            kind = rng.integers(0, 5)
            if kind == 0:
                lo = rng.normal(size=d) - 1.0
                hi = lo + rng.uniform(0.0, 2.0, size=d)
                lo[rng.random(d) < 0.3] = -np.inf
                hi[rng.random(d) < 0.3] = np.inf
                m.add_constraint(i, gm.Box(lo, hi))
            elif kind == 1:
                m.add_constraint(i, gm.NonNeg())
            elif kind == 2:
                p = [1.0, 1.5, 2.0, 3.0, np.inf][rng.integers(0, 5)]
                m.add_constraint(i, gm.NormBall(float(rng.uniform(0.1, 2.0)), p=p))
            elif kind == 3:
                m.add_constraint(i, m.var(i)[0] <= float(rng.normal()))
            else:
                m.add_constraint(i, lambda x: [cp.sum(x) >= -1.0, cp.norm(x, 2) <= 2.0])
    assert m.structure().box is not None and m.structure().normball
    for scale in (0.1, 1.0, 10.0):
        W = scale * rng.normal(size=(n, d))
        expected = np.array([max((c.violation(W[i]) for c in m.constraints(i)), default=0.0)
                             for i in range(n)])
        assert (expected > 0).any()
        np.testing.assert_array_equal(m.constraint_violations(W), expected)
