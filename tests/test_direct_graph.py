"""The direct exact solver on graphs with cycles (``solve_direct(method="graph")``: levels by
minimum cuts, ``gtvmodel.kernels.parametric_tv``; issue 28 item 4) against an independent
CVXPY formulation written in the tests (``test_direct.reference``, Clarabel at 1e-12), on
cycles, grids, SBMs, random and disconnected graphs, with nodes without data, ``l1``/``l2``
regularizers, ties, tiny and large ``lambda`` and badly scaled data.

Clarabel's weights are accurate to about 1e-7 only, so the weights are checked to 1e-9 against
the test's own closed form on the reference's fused sets (every fused set of a minimizer takes
the soft-thresholded mean of its node terms and boundary slopes), and the flows by the node
and edge conditions (``test_direct.check_optimality``).
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import csgraph
from test_direct import build, check_optimality, reference

import gtvmodel as gm
from gtvmodel.kernels.bk_max_flow import bk_max_flow
from gtvmodel.kernels.parametric_tv import choose_max_flow, tv_graph


# ---------------------------------------------------------------- graphs
def shuffled(rng, G: nx.Graph) -> tuple[int, np.ndarray]:
    """``(n, edges)`` of ``G`` with shuffled node positions, oriented ``e+ < e-``."""
    G = nx.convert_node_labels_to_integers(G)
    perm = rng.permutation(G.number_of_nodes())
    e = perm[np.array(list(G.edges), dtype=int).reshape(-1, 2)]
    return G.number_of_nodes(), np.unique(np.sort(e, axis=1), axis=0)


def graph(kind: str, rng) -> tuple[int, np.ndarray]:
    if kind == "cycle":
        return shuffled(rng, nx.cycle_graph(40))
    if kind == "grid":
        return shuffled(rng, nx.grid_2d_graph(7, 8))
    if kind == "sbm":
        return shuffled(rng, nx.stochastic_block_model([20, 20, 15], [[0.3, 0.02, 0.02],
                                                                      [0.02, 0.3, 0.02],
                                                                      [0.02, 0.02, 0.3]],
                                                        seed=int(rng.integers(1 << 30))))
    if kind == "random":
        return shuffled(rng, nx.gnm_random_graph(50, 120, seed=int(rng.integers(1 << 30))))
    # disconnected: a cycle, a grid with a chord, a tree and isolated nodes
    G = nx.disjoint_union_all([nx.cycle_graph(9), nx.grid_2d_graph(4, 4),
                               nx.balanced_tree(2, 3), nx.empty_graph(4)])
    return shuffled(rng, G)


def node_terms(data, eta, kappa, n, d):
    """``(q, p)``: the node terms ``q x^2 - 2 p x`` per coordinate, from the node data."""
    q = np.repeat(kappa[:, None], d, axis=1).astype(float)
    p = np.zeros((n, d))
    for i, (k, v) in data.items():
        if k == "quadratic":
            q[i] += 1.0
            p[i] += v
        elif k == "squared":
            X, y = v
            q[i] += (X * X).sum(0) / X.shape[0]
            p[i] += X.T @ y / X.shape[0]
    return q, p


def exact_on_partition(model, data, eta, kappa, W_ref, tol=1e-6):
    """The minimizer on the reference's fused sets, in closed form (the test's own formula):
    per coordinate, the edges whose ends differ by at most ``tol`` (relative) in ``W_ref``
    join fused sets ``C``; each takes ``argmin_t Q t^2 - R t + H |t|``, ``Q = sum q``, ``R =
    sum (2 p_i - sum_{e at i, not fused} lambda A_e sign(w_i - w_k))``, ``H = sum eta``.  NaN
    on sets without data (``Q = 0``: not unique)."""
    n, d = model.num_nodes, model.dim
    q, p = node_terms(data, eta, kappa, n, d)
    E, c = model.edges, model.capacities
    out = np.full((n, d), np.nan)
    scale = max(1.0, np.abs(W_ref).max())
    for j in range(d):
        z = W_ref[E[:, 0], j] - W_ref[E[:, 1], j]
        fused = np.abs(z) <= tol * scale
        adj = sp.csr_matrix((np.ones(fused.sum()), (E[fused, 0], E[fused, 1])), shape=(n, n))
        _, lab = csgraph.connected_components(adj, directed=False)
        slope = np.zeros(n)  # d/dx_i of the edges that are not fused
        np.add.at(slope, E[~fused, 0], c[~fused] * np.sign(z[~fused]))
        np.add.at(slope, E[~fused, 1], -c[~fused] * np.sign(z[~fused]))
        Q = np.bincount(lab, q[:, j])
        R = np.bincount(lab, 2 * p[:, j] - slope)
        H = np.bincount(lab, eta, minlength=lab.max() + 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(Q > 0, np.sign(R) * np.maximum(np.abs(R) - H, 0.0) / (2 * Q), np.nan)
        out[:, j] = t[lab]
    return out


def solve_and_compare(model, data, eta, kappa, exact_weights=True):
    """``solve_direct(method="graph")`` against the CVXPY reference: objective to 1e-9, the
    weights to 1e-9 of the closed form on the reference's fused sets (where unique), the
    node and edge conditions to 1e-9, the certified relative gap at most 1e-10."""
    sol = gm.solve_direct(model, method="graph")
    ref_val, ref_W = reference(model, data, eta, kappa)
    val = model.objective(sol.weights)
    scale = max(1.0, abs(ref_val))
    assert val <= ref_val + 1e-9 * scale
    assert val >= ref_val - 1e-7 * scale  # Clarabel's own accuracy
    check_optimality(model, data, eta, kappa, sol)
    assert sol.success and sol.certificate.relative_gap <= 1e-10
    assert sol.info["direct_method"] == "graph" and sol.info["route"] == "direct"
    if exact_weights:
        ex = exact_on_partition(model, data, eta, kappa, ref_W)
        ok = ~np.isnan(ex)
        assert ok.mean() > 0.3
        wscale = max(1.0, np.abs(ex[ok]).max())
        assert np.abs(sol.weights[ok] - ex[ok]).max() <= 1e-9 * wscale
    return sol


# ---------------------------------------------------------------- against CVXPY
KINDS = ["cycle", "grid", "sbm", "random", "disconnected"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("d", [1, 3])
@pytest.mark.parametrize("lam", [1e-4, 0.4, 40.0])  # no fusion / some / one value
def test_graphs_against_cvxpy(kind, d, lam):
    rng = np.random.default_rng([KINDS.index(kind), d, int(1000 * lam)])
    n, edges = graph(kind, rng)
    model, data, eta, kappa = build(rng, n, edges, d, lam,
                                    weights=rng.uniform(0.2, 3.0, len(edges)), squared=0.2)
    assert gm.direct_method(model)[0] == "graph"
    sol = solve_and_compare(model, data, eta, kappa)
    comp = model.structure().components
    if lam == 40.0:  # above the fusing point every component takes one value
        for c in np.unique(comp):
            assert np.ptp(sol.weights[comp == c], axis=0).max() == 0.0
    if lam == 1e-4:  # no fusion: a node moves at most sum_e c_e / (2 q_i) from p_i / q_i
        q, p = node_terms(data, eta, kappa, n, d)
        with np.errstate(divide="ignore", invalid="ignore"):
            reach = model.structure().weighted_degrees[:, None] * lam / (2 * q)
            apart = np.abs(np.diff((p / q)[model.edges], axis=1)[:, 0]) > reach[
                model.edges].sum(1)
        assert apart.sum() > 0.9 * np.all(q[model.edges] > 0, axis=1).sum()
        assert np.count_nonzero((model.incidence @ sol.weights)[apart] == 0.0) == 0


@pytest.mark.parametrize("dataless", [0.3, 0.6])
@pytest.mark.parametrize("kind", ["grid", "sbm", "random"])
def test_dataless_nodes_and_regularizers(kind, dataless):
    """Nodes without data (30 %, 60 %), ``l1`` and ``l2`` at random nodes: the minimizer need
    not be unique where a fused set has no data; elsewhere the weights are exact, and the
    flows conserve at the nodes without data (their conjugates are finite only there)."""
    rng = np.random.default_rng(int(100 * dataless) + len(kind))
    n, edges = graph(kind, rng)
    model, data, eta, kappa = build(rng, n, edges, 3, rng.uniform(0.1, 1.0),
                                    weights=rng.uniform(0.2, 3.0, len(edges)),
                                    dataless=dataless, squared=0.1, l1=1.0, l2=0.5)
    sol = solve_and_compare(model, data, eta, kappa)
    free = np.array([data[i][0] == "zero" and eta[i] == 0 and kappa[i] == 0
                     for i in range(n)])
    r = model.incidence.T @ sol.flows
    assert np.abs(r[free]).max() <= 64 * np.finfo(float).eps * np.abs(sol.flows).max()


def test_l1_pins_fused_sets_at_zero():
    rng = np.random.default_rng(7)
    n, edges = graph("grid", rng)
    model, data, eta, kappa = build(rng, n, edges, 2, 0.3, l1=3.0)
    sol = solve_and_compare(model, data, eta, kappa)
    assert np.count_nonzero(sol.weights == 0.0) > 0


def test_ties_and_equal_data():
    """Every node with the same data: one value, the data, zero flows; two random halves of a
    grid with data +1 and -1 (many equal values): optimal, and every fused set at the closed
    form of its terms to 1e-12."""
    model = gm.GTVModel(nx.grid_2d_graph(6, 6), dim=2, penalty=gm.Norm1(), lam=0.3)
    model.set_losses({v: gm.QuadraticLoss([1.5, -2.0]) for v in model.nodes})
    sol = gm.solve_direct(model)
    assert sol.info["direct_method"] == "graph"
    assert np.all(sol.weights == [1.5, -2.0]) and np.all(sol.flows == 0.0)
    assert sol.certificate.gap <= 1e-12
    rng = np.random.default_rng(2)
    n, edges = graph("grid", rng)
    left = rng.permutation(n)[: n // 2]
    a = np.ones((n, 1))
    a[left] = -1.0
    model = gm.GTVModel.from_edges(n, edges, dim=1, penalty=gm.Norm1(), lam=0.05)
    model.set_losses({i: gm.QuadraticLoss(a[i]) for i in range(n)})
    data = {i: ("quadratic", a[i]) for i in range(n)}
    sol = solve_and_compare(model, data, np.zeros(n), np.zeros(n), exact_weights=False)
    ex = exact_on_partition(model, data, np.zeros(n), np.zeros(n), sol.weights)
    assert np.abs(sol.weights - ex).max() <= 1e-12


@pytest.mark.parametrize("scale, lam", [(1e6, 2e5), (1e-6, 2e-7)])
def test_badly_scaled_data(scale, lam):
    rng = np.random.default_rng(3)
    n, edges = graph("sbm", rng)
    model, data, eta, kappa = build(rng, n, edges, 2, lam, scale=scale, dataless=0.2)
    sol = gm.solve_direct(model, method="graph")
    ref_val, _ = reference(model, data, eta, kappa)
    # Clarabel's absolute tolerances do not resolve P* ~ 1e-12: one-sided, the certificate
    # and the optimality conditions prove the other side
    assert model.objective(sol.weights) <= ref_val + 1e-9 * abs(ref_val)
    check_optimality(model, data, eta, kappa, sol)
    assert sol.certificate.relative_gap <= 1e-10


def test_data_spanning_twelve_orders_of_magnitude():
    """Node data from 1e-6 to 1e6 in one problem (random signs) on a random graph."""
    rng = np.random.default_rng(4)
    n, edges = graph("random", rng)
    a = rng.choice([-1.0, 1.0], size=(n, 2)) * 10.0 ** rng.uniform(-6, 6, size=(n, 2))
    model = gm.GTVModel.from_edges(n, edges, dim=2, penalty=gm.Norm1(), lam=1e-3)
    model.set_losses({i: gm.QuadraticLoss(a[i]) for i in range(n)})
    data = {i: ("quadratic", a[i]) for i in range(n)}
    zeros = np.zeros(n)
    sol = gm.solve_direct(model)
    ref_val, _ = reference(model, data, zeros, zeros)
    assert model.objective(sol.weights) <= ref_val + 1e-9 * abs(ref_val)
    check_optimality(model, data, zeros, zeros, sol, tol=1e-12)
    assert sol.certificate.relative_gap <= 1e-10


def test_forests_agree_with_the_tree_algorithms():
    """On a path and a tree (``method="graph"`` takes any graph) the minimum cuts give the
    path and tree algorithms' weights to 1e-12 and certify as tightly."""
    rng = np.random.default_rng(5)
    for G in (nx.path_graph(60),  # a random tree (networkx 3.0 has no random_labeled_tree)
              nx.from_prufer_sequence(list(np.random.default_rng(5).integers(0, 80, 78)))):
        n, edges = shuffled(rng, G)
        model, data, eta, kappa = build(rng, n, edges, 2, 0.5, l1=0.5)  # unique
        auto = gm.solve_direct(model)
        sol = gm.solve_direct(model, method="graph")
        assert auto.info["direct_method"] in ("path", "tree")
        assert sol.info["direct_method"] == "graph"
        assert np.abs(sol.weights - auto.weights).max() <= 1e-12 * max(
            1.0, np.abs(auto.weights).max())
        assert sol.certificate.relative_gap <= 1e-12


def test_a_graph_without_data_and_the_empty_graph():
    """A grid whose nodes all lack data: every constant is optimal, 0 is returned with zero
    flows; nodes without edges take their own minimizers."""
    model = gm.GTVModel(nx.grid_2d_graph(4, 4), dim=2, penalty=gm.Norm1(), lam=1.0)
    sol = gm.solve_direct(model)
    assert sol.info["direct_method"] == "graph"
    assert np.all(sol.weights == 0.0) and np.all(sol.flows == 0.0)
    assert sol.objective == 0.0 and sol.certificate.gap <= 1e-12
    x, u = tv_graph(3, np.zeros((0, 2)), np.zeros(0), np.ones((3, 1)),
                    np.array([[1.0], [-2.0], [0.5]]), np.array([0.0, 1.0, 2.0]))
    assert x.ravel().tolist() == [1.0, -1.5, 0.0] and u.shape == (0, 1)


def test_solve_exact_takes_the_direct_route_on_cycles():
    rng = np.random.default_rng(6)
    n, edges = graph("sbm", rng)
    model, data, eta, kappa = build(rng, n, edges, 2, 0.3, dataless=0.3)
    sol = gm.solve_exact(model)
    assert sol.info["route"] == "direct" and sol.info["direct_method"] == "graph"
    assert "levels by minimum cuts" in sol.info["route_reason"]
    ref_val, _ = reference(model, data, eta, kappa)
    assert abs(sol.objective - ref_val) <= 1e-8 * max(1.0, abs(ref_val))
    assert sol.info["certified_relative_gap"] <= 1e-10


# ---------------------------------------------------------------- small random graphs
@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 9), st.floats(0.0, 1.0),
       st.sampled_from([1e-3, 0.3, 3.0]))
def test_random_small_graphs_satisfy_the_optimality_conditions(seed, n, density, lam):
    """Any small graph and node terms (``q = 0`` at random nodes, ``l1`` kinks, ties from
    rounded data): ``x`` and ``u`` satisfy ``-(D^T u)_i in dh_i(x_i)`` and ``u_e in c_e
    d|.|(x_{e+} - x_{e-})`` (written here), which proves ``x`` optimal."""
    rng = np.random.default_rng(seed)
    pairs = np.array([(i, j) for i in range(n) for j in range(i + 1, n)])
    edges = pairs[rng.random(len(pairs)) < density].reshape(-1, 2)
    cap = lam * rng.uniform(0.2, 2.0, len(edges))
    q = rng.uniform(0.5, 2.0, (n, 2)) * (rng.random((n, 1)) < 0.6)
    p = np.round(rng.normal(size=(n, 2)), 1) * (q > 0)
    eta = np.where(rng.random(n) < 0.4, rng.uniform(0, 1, n), 0.0)
    x, u = tv_graph(n, edges, cap, q, p, eta)
    D = np.zeros((len(edges), n))
    D[np.arange(len(edges)), edges[:, 0]] = 1.0
    D[np.arange(len(edges)), edges[:, 1]] = -1.0
    s = -(D.T @ u) - 2 * (q * x - p)  # must lie in eta d|x|
    sg = np.sign(x)
    tol = 1e-12 * max(1.0, np.abs(p).max(), cap.max(initial=0.0))
    lo = np.where(sg == 0, -1.0, sg) * eta[:, None]
    hi = np.where(sg == 0, 1.0, sg) * eta[:, None]
    assert np.all(s >= lo - tol) and np.all(s <= hi + tol)
    assert np.all(np.abs(u) <= cap[:, None])
    z = D @ x
    assert np.all(np.abs(u - cap[:, None] * np.sign(z))[z != 0] <= tol)


# ---------------------------------------------------------------- applicability and errors
def test_direct_method_and_bad_methods():
    model = gm.GTVModel(nx.cycle_graph(5), dim=2, penalty=gm.Norm1(), lam=0.5)
    model.set_loss(1, gm.QuadraticLoss([1.0, 0.0]))
    method, why = gm.direct_method(model)
    assert method == "graph" and why == (
        "Norm1 penalty, diagonal quadratic node terms; the graph has a cycle (5 edges; a "
        "forest on 5 nodes with 1 components has 4): levels by minimum cuts")
    assert gm.direct_method(model.variant(penalty=gm.Norm2()))[0] is None
    with pytest.raises(gm.UnsupportedError, match="method='tree' needs a forest.*cycle"):
        gm.solve_direct(model, method="tree")
    with pytest.raises(gm.UnsupportedError, match="method='path' needs a forest of paths"):
        gm.solve_direct(model, method="path")
    with pytest.raises(gm.ParameterError, match="method"):
        gm.solve_direct(model, method="maxflow")
    with pytest.raises(gm.UnsupportedError, match="not separable"):
        gm.solve_direct(model.variant(penalty=gm.Norm2()), method="graph")


# ---------------------------------------------------------------- the maximum flow
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 30), st.floats(0.05, 0.6))
def test_search_tree_max_flow_matches_scipy(seed, n, density):
    """Boykov-Kolmogorov's maximum flow (``bk_max_flow``) on random undirected networks with
    integer capacities: its value is scipy's ``maximum_flow``, its flows conserve and meet the
    capacities, and its source side is a cut of that value."""
    rng = np.random.default_rng(seed)
    pairs = np.array([(i, j) for i in range(n) for j in range(i + 1, n)])
    e = pairs[rng.random(len(pairs)) < density].reshape(-1, 2)
    c = rng.integers(1, 10, len(e)).astype(float)
    s, t = 0, n - 1
    tail = np.concatenate([e[:, 0], e[:, 1]])
    head = np.concatenate([e[:, 1], e[:, 0]])
    cap = np.concatenate([c, c])  # arc k and k + |E| are opposite
    order = np.argsort(tail, kind="stable")
    pos = np.empty_like(order)
    pos[order] = np.arange(order.size)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(tail, minlength=n))])
    opp = np.concatenate([np.arange(len(e)) + len(e), np.arange(len(e))])
    res = cap[order].copy()
    value, side = bk_max_flow(indptr, head[order], pos[opp[order]], res, s, t)
    ref = csgraph.maximum_flow(sp.csr_matrix((np.concatenate([c, c]).astype(np.int32),
                                              (tail, head)), shape=(n, n)), s, t).flow_value
    assert value == ref
    f = cap - res[pos]  # net flow along each arc
    net = np.bincount(tail, f, minlength=n)
    assert np.allclose(net[1:-1], 0.0) and net[s] == value and np.all(res >= 0)
    assert side[s] and not side[t]
    cut = side[tail] & ~side[head]
    assert cap[cut].sum() == value


@pytest.mark.parametrize("kind", ["grid", "sbm", "random"])
def test_both_maximum_flows_give_the_same_minimizer(kind):
    """The search trees and Dinic's phases (``max_flow``; ``"auto"`` takes the trees on
    graphs of mean degree at most 4) give the same weights to 1e-12 and exact flows."""
    rng = np.random.default_rng(9)
    n, edges = graph(kind, rng)
    q = np.ones((n, 2))
    p = rng.normal(size=(n, 2))
    cap = rng.uniform(0.1, 1.0, len(edges))
    x1, u1 = tv_graph(n, edges, cap, q, p, np.zeros(n), max_flow="trees")
    x2, u2 = tv_graph(n, edges, cap, q, p, np.zeros(n), max_flow="dinic")
    assert np.abs(x1 - x2).max() <= 1e-12 * max(1.0, np.abs(x1).max())
    assert choose_max_flow(n, len(edges)) == (kind == "grid")
    for u in (u1, u2):
        D = sp.csr_matrix((np.tile([1.0, -1.0], len(edges)),
                           (np.repeat(np.arange(len(edges)), 2), edges.ravel())))
        assert np.abs(-(D.T @ u) - 2 * (q * x1 - p)).max() <= 1e-12
