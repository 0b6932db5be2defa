"""Issue 15 items 1-2, what a solution means: non-unique optima are flagged on the result
(``Solution.unique``, decided from the model's structure and checked here against what the
solver does); node variables carry their values and failures can be read as a status, as
CVXPY users expect."""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm


def _squared(rng, m, d, shift=0.0):
    X = rng.normal(size=(m, d))
    return gm.SquaredLoss(X, X @ np.full(d, 1.0 + shift) + 0.1 * rng.normal(size=m))


def test_strongly_convex_nodes_give_a_unique_minimizer():
    rng = np.random.default_rng(0)
    model = gm.GTVModel(nx.cycle_graph(5), dim=2, lam=0.3)
    for i in range(5):
        model.set_loss(i, _squared(rng, 8, 2, shift=i))
    sol = model.solve_exact()
    assert sol.unique is True and "strongly convex" in sol.unique_reason
    # zero-loss nodes with l2 are strongly convex too
    model.set_loss(0, gm.ZeroLoss(l2=0.1))
    assert model.uniqueness().unique is True


def test_a_component_without_data_is_free_to_move():
    """Two components: one with data, one of zero-loss nodes.  Any common shift of the second
    component keeps P: the flag says so and names its nodes, and shifted weights have the same
    objective."""
    rng = np.random.default_rng(1)
    G = nx.disjoint_union(nx.path_graph(3), nx.path_graph(2))  # nodes 3, 4 without data
    model = gm.GTVModel(G, dim=2, lam=0.5)
    for i in range(3):
        model.set_loss(i, _squared(rng, 6, 2))
    sol = model.solve_exact()
    assert sol.unique is False
    assert "nodes 3, 4" in sol.unique_reason
    W = sol.weights.copy()
    W[3:] += np.array([7.0, -3.0])
    assert abs(model.objective(W) - model.objective(sol.weights)) < 1e-12


def test_lambda_zero_with_fewer_samples_than_d_is_not_unique():
    rng = np.random.default_rng(2)
    model = gm.GTVModel(nx.path_graph(2), dim=3, lam=0.0)
    model.set_loss(0, _squared(rng, 2, 3))  # m = 2 < d = 3: a null direction of X
    model.set_loss(1, _squared(rng, 5, 3))
    u = model.uniqueness()
    assert u.unique is False and "nodes 0" in u.reason and "lambda = 0" in u.reason
    # the same nodes coupled to a node with full-rank data: the sum of Hessians is definite
    model.lam = 1.0
    assert model.uniqueness().unique is None


def test_regularizers_constraints_and_nonsmooth_losses_are_not_claimed():
    rng = np.random.default_rng(3)
    G = nx.path_graph(2)
    model = gm.GTVModel(G, dim=2, lam=0.5)  # no data: free to move ...
    assert model.uniqueness().unique is False
    model.add_constraint(0, gm.Box(-1.0, 1.0))  # ... unless a constraint pins it
    assert model.uniqueness().unique is None
    model.clear_constraints(0)
    model.set_loss(0, gm.ZeroLoss(l1=0.1))  # or an l1 term
    assert model.uniqueness().unique is None
    hinge = gm.HingeLoss(rng.normal(size=(4, 2)), np.array([1.0, -1.0, 1.0, -1.0]))
    model.set_loss(0, hinge)
    model.set_loss(1, hinge)
    assert model.uniqueness().unique is None


def test_node_variables_carry_the_solution_like_cvxpy():
    """Issue 15 item 1: after solve_exact, ``model.var(i).value`` is node i's weight, for the
    nodes with symbolic terms and for variables created without them."""

    model = gm.GTVModel(nx.path_graph(3), dim=2, lam=0.4)
    x0 = model.var(0)
    model.set_loss(0, cp.sum_squares(x0 - np.array([1.0, 2.0])))
    model.set_loss(2, gm.QuadraticLoss([-1.0, 0.0]))
    untouched = model.var(2)  # created, but node 2's loss is a library loss
    sol = model.solve_exact()
    np.testing.assert_array_equal(model.var(0).value, sol.weight(0))
    np.testing.assert_array_equal(untouched.value, sol.weight(2))


def test_failures_can_be_read_as_a_status_like_cvxpy():
    """Issue 15 item 1: with ``raise_on_failure=False`` an infeasible or unbounded problem is
    a result with that status (as ``problem.status`` in CVXPY), not an exception; the default
    still raises."""
    model = gm.GTVModel(nx.path_graph(2), dim=1, lam=1.0)
    model.add_constraint(0, gm.Box(1.0, 2.0))
    model.add_constraint(0, gm.NormBall(0.5, p=2))  # no common point
    with pytest.raises(gm.InfeasibleError, match="node"):
        model.solve_exact()
    sol = model.solve_exact(raise_on_failure=False)
    assert sol.status == "infeasible" and not sol.success and sol.weights is None
    assert "node(s) 0" in sol.info["error"]
    with pytest.raises(gm.UnsupportedError, match="no weights"):
        sol.weight(0)
    dual = gm.solve_dual(model, raise_on_failure=False)
    assert dual.status == "infeasible" and not dual.success and dual.flows is None

    free = gm.GTVModel(nx.path_graph(2), dim=1)
    free.set_loss(0, free.var(0)[0])  # linear: unbounded below
    sol = gm.solve_exact(free, raise_on_failure=False)
    assert sol.status.startswith("unbounded") and "unbounded" in sol.info["error"]
    with pytest.raises(gm.ParameterError, match="raise_on_failure"):
        free.solve_exact(raise_on_failure="no")


@pytest.mark.parametrize("penalty", [gm.Norm2(), gm.Norm1()])
def test_uniqueness_verdict_does_not_depend_on_the_data_scale(penalty):
    """Issue 28 item 5: the flatness test is relative to each group's largest eigenvalue, so
    multiplying every X by 1e-7 or 1e7 keeps the verdict (an absolute floor called the
    strictly convex node with X = 1e-7 I flat and the minimizer "not unique")."""
    rng = np.random.default_rng(5)
    X = [np.eye(2), rng.normal(size=(4, 2)), rng.normal(size=(1, 2))]  # node 2: m < d
    y = [rng.normal(size=len(x)) for x in X]

    def verdicts(scale):
        out = []
        for graph, data in ((nx.path_graph(2), [0]),         # data node beside a data-less one
                            (nx.path_graph(3), [0, 1, 2]),   # all strongly convex but node 2
                            (nx.path_graph(2), [2]),         # m < d beside a data-less node
                            (nx.path_graph(1), [0])):        # one strongly convex node
            model = gm.GTVModel(graph, dim=2, penalty=penalty, lam=0.3)
            for node, k in enumerate(data):
                model.set_loss(node, gm.SquaredLoss(scale * X[k], y[k]))
            out.append(model.uniqueness().unique)
        return out

    base = verdicts(1.0)
    assert base == [None, None, False, True]
    assert verdicts(1e-7) == base and verdicts(1e7) == base
