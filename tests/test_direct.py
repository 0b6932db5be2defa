"""The direct exact solvers on paths and trees (issue 28 item 4): ``solve_direct`` against an
independent CVXPY formulation written here, exact flows (node and edge conditions), tight
certificates, ``direct_method``'s reasons and bad input.

Every instance is ``sum_i c_i-terms + eta_i ||w_i||_1 + kappa_i ||w_i||^2 + lambda sum_e A_e
||w_{e+} - w_{e-}||_1`` on a forest whose node positions are shuffled (so that no order of the
model is a traversal order of the forest).
"""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel.kernels import tv

#: Clarabel at its tightest: objectives agree with the direct solver to ~1e-10 relative.
TIGHT = {"tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12, "max_iter": 500}


# ---------------------------------------------------------------- instances
def random_forest(rng, n: int, trees: int = 1, path: bool = False) -> np.ndarray:
    """Edges of a forest of ``trees`` random trees (random paths with ``path``) on ``n``
    nodes, with shuffled positions, oriented ``e+ < e-``."""
    parent = np.full(n, -1)
    starts = np.sort(rng.choice(np.arange(1, n), size=trees - 1, replace=False)) if trees > 1 \
        else np.zeros(0, dtype=int)
    first = np.zeros(n, dtype=bool)
    first[0] = True
    first[starts] = True
    for i in range(1, n):
        if not first[i]:
            parent[i] = i - 1 if path else rng.integers(np.flatnonzero(first[: i + 1])[-1], i)
    perm = rng.permutation(n)
    child = np.flatnonzero(parent >= 0)
    e = np.stack([perm[child], perm[parent[child]]], 1)
    return np.sort(e, axis=1)


def build(rng, n, edges, d, lam, *, weights=None, dataless=0.0, l1=0.0, l2=0.0,
          squared=0.0, scale=1.0):
    """A model and its node data: ``QuadraticLoss(a_i)`` at most nodes, a share ``dataless``
    without data (no loss, or ``ZeroLoss`` with the regularizers), a share ``squared`` with
    a ``SquaredLoss`` of diagonal Gram matrix; ``l1``/``l2`` regularizers at random nodes."""
    model = gm.GTVModel.from_edges(n, edges, weights, dim=d, penalty=gm.Norm1(), lam=lam)
    kind = rng.choice(3, size=n, p=[1 - dataless - squared, dataless, squared])
    eta = np.where(rng.random(n) < 0.5, l1 * rng.random(n), 0.0)
    kappa = np.where(rng.random(n) < 0.5, l2 * rng.random(n), 0.0)
    data = {}
    losses = {}
    for i in range(n):
        if kind[i] == 0:
            a = scale * rng.normal(size=d)
            data[i] = ("quadratic", a)
            losses[i] = gm.QuadraticLoss(a, l1=eta[i], l2=kappa[i])
        elif kind[i] == 1:
            data[i] = ("zero", None)
            if eta[i] or kappa[i]:
                losses[i] = gm.ZeroLoss(l1=eta[i], l2=kappa[i])
        else:
            m = d + 1
            X = np.zeros((m, d))
            cols = rng.permutation(d)[: max(1, d - 1)]  # some coordinate may have no data
            X[rng.permutation(m)[: cols.size], cols] = rng.uniform(0.5, 2.0, cols.size)
            y = scale * rng.normal(size=m)
            data[i] = ("squared", (X, y))
            losses[i] = gm.SquaredLoss(X, y, l1=eta[i], l2=kappa[i])
    model.set_losses(losses)
    return model, data, eta, kappa


def reference(model, data, eta, kappa) -> tuple[float, np.ndarray]:
    """``(P*, W*)`` by CVXPY, written from the node data (not from the package's compiler)."""
    n, d = model.num_nodes, model.dim
    W = cp.Variable((n, d))
    terms = []
    quad = [i for i, (k, _) in data.items() if k == "quadratic"]
    if quad:
        terms.append(cp.sum_squares(W[quad, :] - np.array([data[i][1] for i in quad])))
    for i, (k, v) in data.items():
        if k == "squared":
            X, y = v
            terms.append(cp.sum_squares(y - X @ W[i, :]) / X.shape[0])
    terms.append(cp.sum(cp.multiply(eta, cp.sum(cp.abs(W), axis=1))))
    terms.append(cp.sum(cp.multiply(kappa, cp.sum(cp.square(W), axis=1))))
    E = model.edges
    if len(E):
        Z = W[E[:, 0], :] - W[E[:, 1], :]
        terms.append(model.lam * cp.sum(cp.multiply(model.edge_weights,
                                                    cp.sum(cp.abs(Z), axis=1))))
    prob = cp.Problem(cp.Minimize(cp.sum(terms)))
    prob.solve(solver="CLARABEL", **TIGHT)
    assert prob.status == "optimal"
    return prob.value, W.value


def node_intervals(data, eta, kappa, W):
    """``dL_i(w_i)`` coordinate-wise as ``(lo, hi)`` from the node data (the test's own
    formula): the gradient of the smooth part plus ``eta_i d|w_ij|``."""
    n, d = W.shape
    g = 2 * kappa[:, None] * W
    for i, (k, v) in data.items():
        if k == "quadratic":
            g[i] += 2 * (W[i] - v)
        elif k == "squared":
            X, y = v
            g[i] += 2 * X.T @ (X @ W[i] - y) / X.shape[0]
    s = np.sign(W)
    lo = g + eta[:, None] * np.where(s == 0, -1.0, s)
    hi = g + eta[:, None] * np.where(s == 0, 1.0, s)
    return lo, hi


def check_optimality(model, data, eta, kappa, sol, tol=1e-9):
    """The node conditions ``-(D^T u)_i in dL_i(w_i)`` and the edge conditions ``u_e in
    lambda A_e d||.||_1(w_{e+} - w_{e-})`` (docs/conventions.md), to ``tol`` relative."""
    W, U = sol.weights, sol.flows
    scale = max(1.0, np.abs(W).max(), model.lam)
    lo, hi = node_intervals(data, eta, kappa, W)
    s = -(model.incidence.T @ U)
    assert np.all(s >= lo - tol * scale) and np.all(s <= hi + tol * scale)
    if model.num_edges:
        cap = model.capacities[:, None]
        assert np.all(np.abs(U) <= cap * (1 + 1e-15))
        Z = model.incidence @ W
        moving = Z != 0
        assert np.allclose(U[moving], (cap * np.sign(Z))[moving], rtol=0, atol=tol * scale)


def solve_and_check(model, data, eta, kappa, unique=True, method="auto"):
    sol = gm.solve_direct(model, method=method)
    ref_val, ref_W = reference(model, data, eta, kappa)
    val = model.objective(sol.weights)
    assert val <= ref_val + 1e-9 * max(1.0, abs(ref_val))
    assert val >= ref_val - 1e-7 * max(1.0, abs(ref_val))  # Clarabel's own accuracy
    if unique:
        assert np.abs(sol.weights - ref_W).max() <= 1e-6 * max(1.0, np.abs(ref_W).max())
    check_optimality(model, data, eta, kappa, sol)
    assert sol.success and sol.certificate.relative_gap <= 1e-10
    assert sol.info["route"] == "direct"
    # at nodes without data (conjugate finite only at 0) conservation holds to rounding, so
    # the certificate's repair has nothing to correct (gtvmodel.certificates.repair's
    # within_rounding: 64 eps max|u|)
    free = np.array([data[i][0] == "zero" and eta[i] == 0 and kappa[i] == 0
                     for i in range(model.num_nodes)])
    if free.any() and model.num_edges:
        r = model.incidence.T @ sol.flows
        assert np.abs(r[free]).max() <= 64 * np.finfo(float).eps * np.abs(sol.flows).max()
    return sol


# ---------------------------------------------------------------- against CVXPY
@pytest.mark.parametrize("d", [1, 3])
@pytest.mark.parametrize("lam", [0.05, 0.7, 50.0])  # 50: everything fuses
def test_paths_against_cvxpy(d, lam):
    rng = np.random.default_rng(int(10 * lam) + d)
    n = 40
    edges = random_forest(rng, n, path=True)
    model, data, eta, kappa = build(rng, n, edges, d, lam,
                                    weights=rng.uniform(0.2, 3.0, n - 1))
    sol = solve_and_check(model, data, eta, kappa)
    assert sol.info["direct_method"] == "path"
    if lam == 50.0:  # above the fusing point every coordinate is one value
        assert np.ptp(sol.weights, axis=0).max() == 0.0
    tree = gm.solve_direct(model, method="tree")  # the tree algorithm on the same path
    assert np.abs(tree.weights - sol.weights).max() <= 1e-13 * max(1, np.abs(sol.weights).max())


@pytest.mark.parametrize("d", [1, 3])
@pytest.mark.parametrize("lam", [0.05, 0.7, 50.0])
def test_random_trees_against_cvxpy(d, lam):
    rng = np.random.default_rng(100 + int(10 * lam) + d)
    n = 60
    edges = random_forest(rng, n)
    model, data, eta, kappa = build(rng, n, edges, d, lam, weights=rng.uniform(0.2, 3.0, n - 1))
    sol = solve_and_check(model, data, eta, kappa)
    assert sol.info["direct_method"] == "tree"
    if lam == 50.0:
        assert np.ptp(sol.weights, axis=0).max() == 0.0


@pytest.mark.parametrize("seed", range(4))
def test_forests_with_dataless_nodes_and_regularizers(seed):
    """Forests (several trees, isolated nodes), a third of the nodes without data, ``l1``
    and ``l2`` at random nodes, squared losses with diagonal Gram matrices: the minimizer
    need not be unique, so objectives are compared, and the flows must be exact."""
    rng = np.random.default_rng(seed)
    n = 50
    edges = random_forest(rng, n, trees=5, path=seed % 2 == 1)
    model, data, eta, kappa = build(rng, n, edges, 3, rng.uniform(0.1, 2.0),
                                    weights=rng.uniform(0.2, 3.0, len(edges)),
                                    dataless=0.35, squared=0.2, l1=1.0, l2=0.5)
    solve_and_check(model, data, eta, kappa, unique=False)


def test_l1_kinks_hold_values_at_zero():
    """Strong ``l1`` regularizers pin fused groups to 0 exactly; flows stay exact."""
    rng = np.random.default_rng(7)
    n = 30
    edges = random_forest(rng, n)
    model, data, eta, kappa = build(rng, n, edges, 2, 0.3, l1=3.0)
    sol = solve_and_check(model, data, eta, kappa)
    assert np.count_nonzero(sol.weights == 0.0) > 0


def test_scaled_data_and_tiny_lambda():
    """Data at 1e6 and 1e-6, and lambda = 0 (every node on its own)."""
    for scale, lam in ((1e6, 1e5), (1e-6, 1e-7), (1.0, 0.0)):
        rng = np.random.default_rng(3)
        n = 25
        edges = random_forest(rng, n)
        model, data, eta, kappa = build(rng, n, edges, 2, lam, scale=scale)
        sol = gm.solve_direct(model)
        ref_val, ref_W = reference(model, data, eta, kappa)
        # Clarabel's absolute tolerances do not resolve P* ~ 1e-12: one-sided, the
        # certificate proves the other side
        assert model.objective(sol.weights) <= ref_val + 1e-8 * abs(ref_val)
        check_optimality(model, data, eta, kappa, sol)
        assert sol.certificate.relative_gap <= 1e-10


def test_dataless_component_takes_a_minimizer():
    """A tree without any data: every constant is optimal (P = 0); the solver returns one
    (0) with zero flows and a zero gap."""
    model = gm.GTVModel(nx.balanced_tree(2, 3), dim=2, penalty=gm.Norm1(), lam=1.0)
    sol = gm.solve_direct(model)
    assert np.all(sol.weights == 0.0) and np.all(sol.flows == 0.0)
    assert sol.objective == 0.0 and sol.certificate.gap <= 1e-12
    assert sol.unique is False


def test_large_path_matches_a_reference_and_certifies_tightly():
    """1e4 nodes (the brief's fused lasso): the path and tree algorithms agree to 1e-12 and
    the certificate is tight; against prox-tv when installed (next test)."""
    rng = np.random.default_rng(0)
    n = 10_000
    seg = np.arange(n) * 100 // n
    y = (3.0 * rng.standard_normal(100))[seg] + 0.5 * rng.standard_normal(n)
    edges = np.stack([np.arange(n - 1), np.arange(1, n)], 1)
    model = gm.GTVModel.from_edges(n, edges, dim=1, penalty=gm.Norm1(), lam=4.0)
    model.set_losses({i: gm.QuadraticLoss([v]) for i, v in enumerate(y.tolist())})
    sol = gm.solve_direct(model)
    tree = gm.solve_direct(model, method="tree")
    assert np.abs(sol.weights - tree.weights).max() <= 1e-12
    assert sol.certificate.relative_gap <= 1e-12


def test_against_prox_tv():
    prox_tv = pytest.importorskip("prox_tv")
    rng = np.random.default_rng(1)
    n = 5000
    y = np.cumsum(rng.normal(size=n))
    w_e = rng.uniform(0.1, 2.0, n - 1)
    lam = 1.5
    edges = np.stack([np.arange(n - 1), np.arange(1, n)], 1)
    model = gm.GTVModel.from_edges(n, edges, w_e, dim=1, penalty=gm.Norm1(), lam=lam)
    model.set_losses({i: gm.QuadraticLoss([v]) for i, v in enumerate(y.tolist())})
    sol = gm.solve_direct(model)
    # prox-tv solves 1/2 ||w - y||^2 + sum w_e |dw|: half of our objective at lambda/2
    ref = prox_tv.tv1w_1d(y, lam * w_e / 2)
    assert np.abs(sol.weights[:, 0] - ref).max() <= 1e-12 * max(1.0, np.abs(ref).max())


# ---------------------------------------------------------------- applicability and errors
def test_direct_method_names_the_reason():
    model = gm.GTVModel(nx.path_graph(5), dim=2, penalty=gm.Norm1(), lam=0.5)
    model.set_loss(1, gm.QuadraticLoss([1.0, 0.0]))
    assert gm.direct_method(model)[0] == "path"
    assert gm.direct_method(model.variant(graph=nx.star_graph(4)))[0] == "tree"
    method, why = gm.direct_method(model.variant(penalty=gm.Norm2()))
    assert method is None and why.startswith("penalty Norm2 is not separable")
    assert gm.direct_method(model.variant(graph=nx.cycle_graph(5)))[0] == "graph"
    rng = np.random.default_rng(0)
    model.set_loss(3, gm.SquaredLoss(rng.normal(size=(4, 2)), rng.normal(size=4)))
    assert gm.direct_method(model) == (None, "node 3 has a SquaredLoss whose Hessian is not "
                                             "diagonal")
    model.set_loss(3, gm.LogisticLoss(rng.normal(size=(4, 2)), np.array([1, -1, 1, -1])))
    assert gm.direct_method(model)[1].startswith("node 3 has a LogisticLoss (not a diagonal")
    model.set_loss(3, gm.QuadraticLoss([0.0, 0.0]))
    model.add_constraint(2, gm.Box(-1.0, 1.0))
    assert gm.direct_method(model) == (None, "node 2 has a constraint")
    model.clear_constraints(2)
    x = model.var(4)
    model.set_loss(4, cp.sum_squares(x))
    assert gm.direct_method(model) == (None, "node 4 has a symbolic loss")


def test_bad_input_raises_the_packages_errors():
    model = gm.GTVModel(nx.cycle_graph(4), dim=1, penalty=gm.Norm1(), lam=0.5)
    with pytest.raises(gm.UnsupportedError, match="method='tree' needs a forest.*cycle"):
        gm.solve_direct(model, method="tree")
    star = gm.GTVModel(nx.star_graph(3), dim=1, penalty=gm.Norm1(), lam=0.5)
    with pytest.raises(gm.UnsupportedError, match="method='path'.*degree 3"):
        gm.solve_direct(star, method="path")
    with pytest.raises(gm.ParameterError, match="method"):
        gm.solve_direct(star, method="fast")
    with pytest.raises(gm.ParameterError, match="accuracy"):
        gm.solve_direct(star, accuracy=0.0)
    with pytest.raises(gm.ParameterError, match="certify"):
        gm.solve_direct(star, certify="yes")


def test_kernels_on_arrays():
    """The pure kernels: a forest order puts parents first; the flows of a path."""
    edges = np.array([[0, 3], [3, 1], [1, 2], [4, 5]])
    order, parent, pedge, cycle = tv.forest_order(6, edges)
    assert not cycle and sorted(order.tolist()) == list(range(6))
    pos = np.empty(6, dtype=int)
    pos[order] = np.arange(6)
    child = parent >= 0
    assert np.all(pos[parent[child]] < pos[child])
    assert tv.forest_order(3, np.array([[0, 1], [1, 2], [0, 2]]))[3]  # a cycle is reported


@pytest.mark.parametrize("d, q0, lam", [(1, 1.0, 4.0), (2, 0.3, 0.5), (1, 2.0, 0.0)])
def test_uniform_path_kernel_matches_the_general_one(d, q0, lam):
    """One path in natural order with one edge weight and one ``q_j``: the kernel reading
    ``p`` alone (``_condat_uniform``) gives the general Condat kernel's weights bit for bit
    and the dynamic programming's to 1e-12; a path numbered otherwise, or another ``q`` at
    one node, takes the general kernel and still agrees (the uniform kernel reports it)."""
    rng = np.random.default_rng(3)
    n = 2000
    order, parent = np.arange(n), np.arange(n) - 1
    t = np.full(n, lam)
    t[0] = 0.0
    q = np.full((n, d), q0) * ([1.0, 1.5][:d])
    p = q * np.cumsum(rng.normal(size=(n, d)), axis=0)
    eta = np.zeros(n)
    assert tv._condat_uniform(parent, t, q, p, eta)[1]
    x = tv.tv_path(order, parent, t, q, p, eta)
    np.testing.assert_array_equal(x, tv._condat_paths(order, parent, t, q, p))
    dp = tv.tv_path(order, parent, t, q, p, eta, method="dp")
    assert np.abs(x - dp).max() <= 1e-12 * np.abs(x).max()
    # the same path numbered at random; another q at one node
    rev = rng.permutation(n)
    edges = np.stack([np.arange(n - 1), np.arange(1, n)], 1)
    order2, parent2, _, _ = tv.forest_order(n, rev[edges])
    t2 = np.where(parent2 >= 0, lam, 0.0)
    p2 = np.empty_like(p)
    p2[rev] = p
    assert tv._condat_applies(q, eta) and not tv._condat_uniform(parent2, t2, q, p2, eta)[1]
    x2 = tv.tv_path(order2, parent2, t2, q, p2, eta)
    assert np.abs(x2[rev] - x).max() <= 1e-12 * np.abs(x).max()
    q3 = q.copy()
    q3[n // 2] *= 2.0
    assert tv._condat_applies(q3, eta) and not tv._condat_uniform(parent, t, q3, p, eta)[1]
    x3 = tv.tv_path(order, parent, t, q3, p, eta)
    assert np.abs(x3 - tv.tv_path(order, parent, t, q3, p, eta, method="dp")).max() <= (
        1e-12 * np.abs(x3).max())


@pytest.mark.parametrize("seed", range(3))
def test_path_algorithms_agree(seed):
    """Condat's algorithm, the dynamic programming on a deque and the tree algorithm give the
    same weights on forests of paths (node weights q > 0, edge weights, no l1)."""
    rng = np.random.default_rng(seed)
    n = 3000
    edges = random_forest(rng, n, trees=4, path=True)
    order, parent, pedge, _ = tv.forest_order(n, edges)
    w = rng.uniform(0.1, 3.0, len(edges))
    t = np.where(parent >= 0, w[pedge] * [0.1, 1.0, 10.0][seed], 0.0)
    q = rng.uniform(0.1, 2.0, (n, 2))
    p = q * np.cumsum(rng.normal(size=(n, 2)), axis=0)
    eta = np.zeros(n)
    xs = [tv.tv_path(order, parent, t, q, p, eta, method=m) for m in ("condat", "dp")]
    xs.append(tv.tv_tree(order, parent, t, q, p, eta))
    scale = np.abs(xs[0]).max()
    assert np.abs(xs[1] - xs[0]).max() <= 1e-12 * scale
    assert np.abs(xs[2] - xs[0]).max() <= 1e-12 * scale
    # lambda = 0: every node on its own, x = p / q (the dynamic programming's lines are
    # anchored at the last crossing: rounding of order eps |x|)
    for m, tol in (("condat", 0.0), ("dp", 1e-13)):
        x0 = tv.tv_path(order, parent, 0.0 * t, q, p, eta, method=m)
        assert np.abs(x0 - p / q).max() <= tol * scale
