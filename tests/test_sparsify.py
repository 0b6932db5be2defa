"""Issue 11: the sparsifiers (thesis 002, Section 2.4, and effective-resistance sampling), the
diagnostics (the thesis' constant M) and the certified cost of sparsifying, against
independent formulations written here (numpy pseudo-inverses, a plain CVXPY problem)."""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import GraphError, ParameterError
from gtvmodel.graphs import (
    METHODS,
    effective_resistances,
    graph_diagnostics,
    incidence_constant,
    sparsification_cost,
    sparsify,
)

SIZES = {"budget": 40, "k": 2, "n": 2}
SPANNING = ("chain", "spanning_tree", "mst", "maximum_spanning_tree", "union_of_trees")
CREATES_EDGES = ("chain", "star")


def _graph(seed: int = 3) -> nx.Graph:
    """A weighted graph with two components (30 + 6 nodes) and an isolated node."""
    rng = np.random.default_rng(seed)
    G = nx.disjoint_union(nx.gnp_random_graph(30, 0.3, seed=seed), nx.cycle_graph(6))
    G.add_node("lonely")
    for a, b in G.edges():
        G[a][b]["weight"] = float(rng.uniform(0.5, 2.0))
    return G


def _kw(method):
    arg = METHODS[method]
    return {} if arg is None else {arg: SIZES[arg]}


def _edge_set(H):
    return {frozenset(e) for e in H.edges()}


def _weighted(H):
    return {(frozenset((a, b)), w) for a, b, w in H.edges(data="weight")}


@pytest.mark.parametrize("method", list(METHODS))
def test_every_sparsifier_is_reproducible_labelled_and_of_its_size(method):
    G = _graph()
    H = sparsify(G, method, seed=7, **_kw(method))
    again = sparsify(G, method, seed=7, **_kw(method))
    assert _weighted(H) == _weighted(again)
    assert list(H.nodes) == list(G.nodes)  # labels and order preserved
    assert all(w > 0 and np.isfinite(w) for *_, w in H.edges(data="weight"))
    c = nx.number_connected_components(G)
    n, m = G.number_of_nodes(), H.number_of_edges()
    if method in CREATES_EDGES:  # documented supergraphs of the node set, not subgraphs
        assert m == n - (1 if method == "star" else c)
    else:
        assert _edge_set(H) <= _edge_set(G)
    if method in ("uniform", "uniform_weighted", "union_of_trees"):
        assert m == SIZES["budget"]
    elif method == "effective_resistance":
        assert m <= SIZES["budget"]
    elif method == "kn":
        assert m <= n * SIZES["k"]
    elif method in ("spanning_tree", "mst", "maximum_spanning_tree", "random_walk"):
        assert m <= n - c and nx.is_forest(H)
    if method in SPANNING:  # keep exactly the components of G
        assert [set(x) for x in nx.connected_components(H)] == \
            [set(x) for x in nx.connected_components(G)]
    if method == "star":
        assert nx.is_connected(H)
    if method not in ("mst", "maximum_spanning_tree"):  # deterministic ones aside
        other = sparsify(G, method, seed=8, **_kw(method))
        assert _edge_set(other) != _edge_set(H) or method == "star"


def test_spanning_trees_are_spanning_and_mst_is_minimal():
    G = _graph()
    for method in ("spanning_tree", "mst", "maximum_spanning_tree", "chain"):
        H = sparsify(G, method, seed=1, **_kw(method))
        assert H.number_of_edges() == G.number_of_nodes() - nx.number_connected_components(G)
    total = {m: sparsify(G, m).size("weight") for m in ("mst", "maximum_spanning_tree")}
    assert total["mst"] == pytest.approx(nx.minimum_spanning_tree(G).size("weight"))
    assert total["maximum_spanning_tree"] == pytest.approx(
        nx.maximum_spanning_tree(G).size("weight"))


def test_chain_follows_a_dfs_preorder():
    G = nx.complete_graph(8)
    H = sparsify(G, "chain", seed=2)
    assert nx.is_connected(H) and max(d for _, d in H.degree()) <= 2  # a path
    T = nx.balanced_tree(2, 3)  # on a tree, consecutive DFS nodes are not always adjacent
    P = sparsify(T, "chain", seed=0)
    assert max(d for _, d in P.degree()) <= 2 and _edge_set(P) - _edge_set(T)


def test_spanning_tree_respects_n_children():
    G = nx.complete_graph(20)
    H = sparsify(G, "spanning_tree", n=3, seed=0)
    root = max(H.degree(), key=lambda x: x[1])
    assert nx.is_tree(H) and root[1] <= 4  # at most 3 children plus a parent


def test_star_centre_is_among_the_three_highest_degrees():
    G = nx.star_graph(9)
    G.add_edges_from([(1, 2), (2, 3), (3, 4), (1, 3)])
    nx.set_edge_attributes(G, {e: float(k + 1) for k, e in enumerate(G.edges())}, "weight")
    mean = np.mean([w for *_, w in G.edges(data="weight")])
    deg = dict(G.degree())
    top3 = sorted(deg, key=lambda v: -deg[v])[:3]
    centres = set()
    for seed in range(8):
        H = sparsify(G, "star", seed=seed)
        centre = max(H.degree(), key=lambda x: x[1])[0]
        assert centre in top3 and H.degree(centre) == 9
        centres.add(centre)
        for v in H[centre]:  # G's weight where G has the edge, G's mean weight otherwise
            want = G[centre][v]["weight"] if G.has_edge(centre, v) else mean
            assert H[centre][v]["weight"] == pytest.approx(want)
    assert len(centres) > 1


def test_kn_weights_follow_algorithm_4():
    """A star: the centre (degree 5 > k = 2) draws 2 edges with weight W_u / (2k) each, every
    leaf (degree 1 <= k) keeps its edge at A_e / 2."""
    G = nx.star_graph(5)
    w = {1: 1.0, 2: 2.0, 3: 3.0, 4: 0.5, 5: 1.5}
    for leaf, a in w.items():
        G[0][leaf]["weight"] = a
    Wc = sum(w.values())
    for seed in range(5):
        H = sparsify(G, "kn", k=2, seed=seed)
        extra = []
        for leaf, a in w.items():
            c = (H[0][leaf]["weight"] - a / 2) / (Wc / 4)
            assert c == pytest.approx(round(c)) and round(c) >= 0
            extra.append(round(c))
        assert sum(extra) == 2
    # total weight is kept exactly: every node hands out W_u / 2
    G2 = _graph()
    H2 = sparsify(G2, "kn", k=3, seed=0)
    assert H2.size("weight") == pytest.approx(G2.size("weight"))


def test_kn_keeps_every_edge_when_k_is_large():
    G = _graph()
    H = sparsify(G, "kn", k=100, seed=0)
    assert _edge_set(H) == _edge_set(G)
    for a, b, wt in G.edges(data="weight"):
        assert H[a][b]["weight"] == pytest.approx(wt)


def _pinv_resistances(G):
    L = nx.laplacian_matrix(G, weight="weight").toarray()
    P = np.linalg.pinv(L)
    idx = {v: k for k, v in enumerate(G.nodes)}
    return np.array([P[idx[a], idx[a]] + P[idx[b], idx[b]] - 2 * P[idx[a], idx[b]]
                     for a, b in G.edges()])


def test_effective_resistances_against_a_dense_pseudo_inverse():
    G = _graph()
    R = _pinv_resistances(G)
    assert np.allclose(effective_resistances(G, exact=True), R, rtol=1e-9, atol=1e-12)
    # k projections: each estimate has relative standard deviation <= sqrt(2 / k) = 0.05
    est = effective_resistances(G, projections=800, seed=0)
    assert np.abs(est / R - 1).max() < 0.25
    assert np.abs(est / R - 1).mean() < 0.06
    assert np.allclose(effective_resistances(G, projections=800, seed=0), est)


def test_effective_resistance_sampling_is_unbiased_in_total_weight():
    G = nx.complete_graph(12)
    totals = [sparsify(G, "effective_resistance", budget=30, seed=s).size("weight")
              for s in range(60)]
    assert np.mean(totals) == pytest.approx(G.number_of_edges(), rel=0.1)


def test_sparsify_errors():
    G = _graph()
    with pytest.raises(ParameterError, match="method"):
        sparsify(G, "spectral")
    with pytest.raises(ParameterError, match="needs budget"):
        sparsify(G, "uniform")
    with pytest.raises(ParameterError, match="budget"):
        sparsify(G, "uniform", budget=G.number_of_edges() + 1)
    with pytest.raises(ParameterError, match="budget"):
        sparsify(G, "union_of_trees", budget=3)  # fewer than a spanning forest
    with pytest.raises(ParameterError, match="k"):
        sparsify(G, "kn", k=0)
    with pytest.raises(ParameterError, match="not budget"):
        sparsify(G, "kn", k=2, budget=3)
    G[0][next(iter(G[0]))]["weight"] = -1.0
    with pytest.raises(GraphError, match="weight"):
        sparsify(G, "mst")


# ------------------------------------------------------------------ diagnostics
@pytest.mark.parametrize("n", [6, 7, 10])
def test_incidence_constant_lemmas_2_6_2_and_2_6_3(n):
    chain = np.sqrt(n / 4) if n % 2 == 0 else 0.5 * np.sqrt(n - 1 / n)
    assert incidence_constant(nx.path_graph(n)) == pytest.approx(chain)
    assert incidence_constant(nx.star_graph(n - 1)) == pytest.approx(np.sqrt((n - 1) / n))
    G = nx.gnp_random_graph(n, 0.6, seed=n)
    D = nx.incidence_matrix(G, oriented=True).toarray().T
    direct = np.linalg.norm(np.linalg.pinv(D), axis=0).max()
    assert incidence_constant(G, chunk=2) == pytest.approx(direct)


def test_graph_diagnostics_counts():
    G = _graph()
    H = sparsify(G, "chain", seed=0)
    d = graph_diagnostics(H, G)
    assert d.edges == H.number_of_edges() and d.components == 3
    assert d.edges_kept + d.edges_created == d.edges and d.edges_created > 0
    assert d.M == pytest.approx(incidence_constant(H))
    assert graph_diagnostics(G, max_edges=5).M is None


# ------------------------------------------------------------------ certified cost
def _instance(penalty, seed=0):
    rng = np.random.default_rng(seed)
    G = nx.gnp_random_graph(16, 0.5, seed=seed)
    y = np.where(np.arange(16)[:, None] < 8, 1.0, -1.0) * np.array([1.0, -0.5]) \
        + 0.5 * rng.normal(size=(16, 2))
    model = gm.GTVModel(G, 2, penalty=penalty, lam=0.3)
    for i in G.nodes:
        model.set_loss(i, gm.QuadraticLoss(y[i]))
    model.add_constraint(3, gm.Box(-0.5, 0.5))
    return model, G, y


def _reference(G, y, p, lam):
    """P* of the full problem, written here in plain CVXPY."""
    W = cp.Variable((16, 2))
    D = nx.incidence_matrix(G, oriented=True).toarray().T
    tv = cp.sum(cp.norm(D @ W, p, axis=1))
    prob = cp.Problem(cp.Minimize(cp.sum_squares(W - y) + lam * tv),
                      [W[3] >= -0.5, W[3] <= 0.5])
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    return prob.value, W.value


def _value(G, y, p, lam, W):
    D = nx.incidence_matrix(G, oriented=True).toarray().T
    return float(((W - y) ** 2).sum() + lam * np.linalg.norm(D @ W, p, axis=1).sum())


@pytest.mark.parametrize("penalty,p", [(gm.Norm1(), 1), (gm.Norm2(), 2)])
@pytest.mark.parametrize("method", ["uniform", "kn", "star", "chain", "effective_resistance"])
def test_sparsification_cost_is_a_sound_bound(penalty, p, method):
    model, G, y = _instance(penalty)
    kw = {"budget": 20} if METHODS[method] == "budget" else _kw(method)
    H = sparsify(G, method, seed=1, **kw)
    cost = sparsification_cost(model, H, full_solution=True)
    pstar, wstar = _reference(G, y, p, 0.3)
    true_sub = _value(G, y, p, 0.3, cost.weights) - pstar
    assert cost.success and cost.status == "certified"
    assert cost.gap >= true_sub - 1e-8 * max(1.0, abs(pstar))
    assert cost.full_value == pytest.approx(_value(G, y, p, 0.3, cost.weights), rel=1e-9)
    assert cost.full_objective == pytest.approx(pstar, rel=1e-6)
    assert cost.suboptimality == pytest.approx(true_sub, abs=1e-6 * max(1.0, abs(pstar)))
    assert cost.weight_distance == pytest.approx(np.linalg.norm(cost.weights - wstar),
                                                 abs=1e-4)
    assert cost.edges_sparse == H.number_of_edges() and cost.edges_full == G.number_of_edges()
    assert np.allclose(cost.weight(5), cost.weights[model.index(5)])
    assert cost.to_dict()["result"] == "SparsificationCost"


def test_sparsification_cost_is_zero_when_every_edge_is_kept():
    model, G, y = _instance(gm.Norm2())
    H = sparsify(G, "uniform", budget=G.number_of_edges(), seed=0)
    cost = sparsification_cost(model, H)
    assert cost.gap <= 1e-6 * max(1.0, abs(cost.full_value))
    pstar, _ = _reference(G, y, 2, 0.3)
    assert cost.full_value == pytest.approx(pstar, rel=1e-6)


def test_sparsification_cost_moves_symbolic_terms_and_checks_nodes():
    model, G, y = _instance(gm.Norm2())
    model.set_loss(0, cp.sum_squares(model.var(0) - y[0]))  # symbolic, same function
    model.add_constraint(1, model.var(1)[0] <= 2.0)
    H = sparsify(G, "mst")
    cost = sparsification_cost(model, H)
    assert cost.success and cost.gap >= 0
    J = H.copy()
    J.add_node("stranger")
    with pytest.raises(GraphError, match="stranger"):
        sparsification_cost(model, J)
    J = H.copy()
    J.remove_node(0)
    with pytest.raises(GraphError, match="node 0"):
        sparsification_cost(model, J)


def test_weight_proportional_uniform_prefers_heavy_edges():
    G = nx.cycle_graph(10)
    nx.set_edge_attributes(G, 1.0, "weight")
    G[0][1]["weight"] = 50.0
    picks = [sparsify(G, "uniform_weighted", budget=1, seed=s).has_edge(0, 1)
             for s in range(40)]
    plain = [sparsify(G, "uniform", budget=1, seed=s).has_edge(0, 1) for s in range(40)]
    assert sum(picks) >= 30 and sum(plain) <= 12  # p = 50/59 against 1/10
    H = sparsify(G, "uniform_weighted", budget=10, seed=0)  # without replacement: all edges
    assert _edge_set(H) == _edge_set(G) and H[0][1]["weight"] == 50.0


@pytest.mark.parametrize("penalty", [gm.Norm1(), gm.Norm2()])
def test_carried_flows_bound_the_gap_by_the_omitted_edges(penalty):
    """For a subgraph with unchanged weights the sparse optimal flows are dual feasible on the
    full graph: the certified gap is at most P(W~) - P~* (the omitted edges' share)."""
    model, G, y = _instance(penalty, seed=2)
    for method, kw in [("uniform", {"budget": 25}), ("mst", {})]:
        cost = sparsification_cost(model, sparsify(G, method, seed=0, **kw))
        assert cost.gap <= cost.full_value - cost.sparse_objective + 1e-6 * abs(cost.full_value)


def test_graph_diagnostics_refuses_different_node_sets():
    """A sparsifier keeps every node: ``full`` with other nodes is an error naming a node (as
    :func:`sparsification_cost` refuses a graph without the model's nodes)."""
    with pytest.raises(GraphError, match=r"node 4 is only in G"):
        graph_diagnostics(nx.path_graph(5), nx.path_graph(4))
    with pytest.raises(GraphError, match=r"node 'x' is only in full"):
        graph_diagnostics(nx.path_graph(3), nx.path_graph([0, 1, 2, "x"]))
    with pytest.raises(GraphError, match="full must be a networkx.Graph"):
        graph_diagnostics(nx.path_graph(3), [(0, 1)])
