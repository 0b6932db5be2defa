"""Algorithm 1's pluggable parts (issue 29 items 3 and 5): the node-update strategies tried in a
fixed order by ``plan``, and the one ``backend=`` argument of ``solve_primal_dual`` (a name or
a backend object; the keywords of the release before deprecated, mapped to the object)."""

from __future__ import annotations

import importlib.util
import inspect
import warnings

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel.errors import ParameterError
from gtvmodel.primal_dual import strategies
from gtvmodel.primal_dual.backends import BACKENDS, resolve_backend
from gtvmodel.primal_dual.prox import NodeUpdates, plan

HAS_TORCH = importlib.util.find_spec("torch") is not None


def _mixed(seed: int = 0) -> gm.GTVModel:
    """12 nodes on a ring, d = 2: every library loss with and without regularizers and
    constraints (one node per case)."""
    rng = np.random.default_rng(seed)
    model = gm.GTVModel(nx.cycle_graph(12), 2, penalty=gm.Norm2(), lam=0.4)
    X = [rng.normal(size=(6, 2)) for _ in range(12)]
    y = [x @ rng.normal(size=2) for x in X]
    sign = [np.sign(v + 0.1) for v in y]
    cases = [
        (gm.SquaredLoss(X[0], y[0]), []),
        (gm.SquaredLoss(X[1], y[1], l1=0.1), []),
        (gm.LogisticLoss(X[2], sign[2]), []),
        (gm.LogisticLoss(X[3], sign[3], l1=0.1), [gm.Box(-1, 1)]),
        (gm.HingeLoss(X[4], sign[4]), [gm.Box(-0.5, 0.5)]),
        (gm.HuberLoss(X[5], y[5]), [gm.NormBall(1.0)]),
        (gm.AbsoluteLoss(X[6], y[6]), []),
        (gm.QuadraticLoss([1.0, -1.0]), [gm.NormBall(0.5)]),
        (gm.QuadraticLoss([0.5, 0.5], l1=0.2), [gm.Box(0, 1)]),
        (gm.ZeroLoss(), [gm.NormBall(0.3, p=1)]),
        (gm.LogisticLoss(X[10], sign[10]), [gm.NormBall(1.0)]),
        (gm.SoftmaxLoss(X[11][:, :1], (X[11][:, 0] > 0).astype(int), n_classes=2), []),
    ]
    for i, (loss, cons) in enumerate(cases):
        model.set_loss(i, loss)
        for c in cons:
            model.add_constraint(i, c)
    return model


# The strategy each node of _mixed must get, written from the documented order (IsotropicProx,
# ExactProx, CompositeProx, SmoothCompositeProx, else the CVXPY path: None).
EXPECTED = ["exact", "composite", "exact", "smooth-composite", "composite", "composite", "exact",
            "isotropic", "isotropic", "isotropic", None, None]


def test_strategies_are_tried_in_the_documented_order():
    model = _mixed()
    assert [type(s) for s in strategies.STRATEGIES] == [
        strategies.IsotropicProx, strategies.ExactProx, strategies.CompositeProx,
        strategies.SmoothCompositeProx]
    got = []
    for i in range(model.num_nodes):
        key = strategies.strategy_key(model.loss_at(i), model.constraints_at(i), model.dim)
        got.append(None if key is None else key[1].name)
    assert got == EXPECTED
    groups = plan(model)
    assert sorted(np.concatenate([g.nodes for g in groups]).tolist()) == list(range(12))
    assert [g.nodes.tolist() for g in groups if g.kind == "cvxpy"] == [[10, 11]]


def test_a_new_strategy_is_one_class_in_the_list(monkeypatch):
    """A strategy inserted first takes the nodes it accepts (here: squared losses without
    regularizers or constraints, with the exact prox of ExactProx under another name); the
    other nodes keep their groups and the iterates are those of the default plan."""

    class SquaredFirst(strategies.ExactProx):
        name = "squared-first"

        def accepts(self, loss, cons, d):
            return "none" if isinstance(loss, gm.SquaredLoss) and not loss.l1 and not cons \
                else None

    reference = gm.solve_primal_dual(_mixed(), max_iter=30, tol=0, record_every=None)
    first = SquaredFirst()
    monkeypatch.setattr(strategies, "STRATEGIES", (first, *strategies.STRATEGIES))
    model = _mixed()
    keys = [strategies.strategy_key(model.loss_at(i), model.constraints_at(i), model.dim)
            for i in range(model.num_nodes)]
    assert keys[0][1] is first and all(k is None or k[1] is not first for k in keys[1:])
    res = gm.solve_primal_dual(model, max_iter=30, tol=0, record_every=None)
    np.testing.assert_array_equal(res.weights, reference.weights)
    np.testing.assert_array_equal(res.flows, reference.flows)


def _plain_loss(loss, z):
    """The library loss written here in plain CVXPY (rows averaged, ``l1``/``l2`` added)."""
    if isinstance(loss, gm.QuadraticLoss):
        base = cp.sum_squares(z - loss.a)
    elif isinstance(loss, gm.ZeroLoss):
        base = 0 * cp.sum(z)
    else:
        t, y = loss.X @ z, loss.y
        rows = {gm.SquaredLoss: lambda: cp.square(t - y),
                gm.LogisticLoss: lambda: cp.logistic(cp.multiply(-y, t)),
                gm.HingeLoss: lambda: cp.pos(1 - cp.multiply(y, t)),
                gm.AbsoluteLoss: lambda: cp.abs(t - y),
                gm.HuberLoss: lambda: cp.huber(t - y, 1.0)}[type(loss)]()
        base = cp.sum(rows) / len(y)
    return base + loss.l1 * cp.norm1(z) + loss.l2 * cp.sum_squares(z)


def _plain_constraint(c, z):
    """A library constraint written here in plain CVXPY."""
    if isinstance(c, gm.NormBall):
        return [cp.norm(z, c.p) <= c.radius]
    return [z >= c.lo, z <= c.hi]


def test_node_updates_of_the_strategies_match_an_independent_prox():
    """PU (32) of every strategy's group against a plain CVXPY prox written here."""
    model = _mixed(3)
    updates = NodeUpdates(model)
    rng = np.random.default_rng(5)
    V = rng.normal(size=(12, 2))
    tau = np.full(12, 0.7)
    W = updates(V, tau, 10_000, np.zeros((12, 2)))
    for i in range(10):  # the nodes of the strategies (not the CVXPY path)
        z = cp.Variable(2)
        loss = model.loss_at(i)
        z.value = rng.normal(size=2)
        assert abs(_plain_loss(loss, z).value - loss.value(z.value)) <= 1e-12
        cons = [e for c in model.constraints_at(i) for e in _plain_constraint(c, z)]
        obj = _plain_loss(loss, z) + cp.sum_squares(z - V[i]) / (2 * tau[i])
        cp.Problem(cp.Minimize(obj), cons).solve(solver="CLARABEL", tol_gap_abs=1e-12,
                                                 tol_gap_rel=1e-12, tol_feas=1e-12)
        np.testing.assert_allclose(W[i], z.value, atol=2e-6, err_msg=f"node {i}")


def test_backend_by_name_or_object_gives_the_same_iterates():
    model = _mixed(1)
    kw = {"max_iter": 40, "tol": 0.0, "record_every": 20, "certificate_budget": None}
    by_name = gm.solve_primal_dual(model, **kw, backend="numpy")
    by_object = gm.solve_primal_dual(model, **kw,
                                     backend=gm.NumpyBackend(threads=2, kernel="numpy"))
    np.testing.assert_array_equal(by_name.weights, by_object.weights)
    np.testing.assert_array_equal(by_name.flows, by_object.flows)
    assert by_object.kernel == "numpy"
    with pytest.warns(DeprecationWarning, match="threads"):
        old = gm.solve_primal_dual(model, **kw, threads=2)
    np.testing.assert_array_equal(old.weights, by_name.weights)


def test_solve_primal_dual_has_at_most_ten_parameters():
    params = inspect.signature(gm.solve_primal_dual).parameters
    assert len(params) <= 10
    assert "backend" in params and {"threads", "device", "client"}.isdisjoint(params)
    assert set(BACKENDS) >= {"numpy", "torch", "dask"}


def test_deprecated_keywords_map_to_the_backend_object():
    with pytest.warns(DeprecationWarning):
        assert resolve_backend("numpy", {"threads": 2}) == gm.NumpyBackend(threads=2)
    with pytest.warns(DeprecationWarning):
        assert resolve_backend("numpy", {"device": "cpu"}) == gm.TorchBackend(device="cpu")
    with pytest.warns(DeprecationWarning):
        got = resolve_backend("dask", {"shards": 3, "kernel": "auto"})  # a default: ignored
    assert got == gm.DaskBackend(shards=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_backend("torch", {}) == gm.TorchBackend()


def test_bad_backend_arguments_raise_naming_them():
    model = _mixed()
    with pytest.raises(ParameterError, match="threads"):
        gm.NumpyBackend(threads=0)
    with pytest.raises(ParameterError, match="kernel"):
        gm.NumpyBackend(kernel="fortran")
    with pytest.raises(ParameterError, match="checkpoint_every"):
        gm.DaskBackend(checkpoint_every=0)
    with pytest.raises(ParameterError, match="certificates"):
        gm.DaskBackend(certificates="driver")
    with pytest.raises(ParameterError, match="backend"):
        gm.solve_primal_dual(model, backend="spark")
    with pytest.raises(ParameterError, match="backend"):
        gm.solve_primal_dual(model, backend=3)
    with pytest.raises(ParameterError, match="unexpected keyword.*thread"):
        gm.solve_primal_dual(model, thread=2)
    with pytest.warns(DeprecationWarning), pytest.raises(ParameterError, match="kernel"):
        gm.solve_primal_dual(model, backend=gm.NumpyBackend(), kernel="numba")
    with pytest.warns(DeprecationWarning), \
            pytest.raises(ParameterError, match="client and shards.*backend='dask'"):
        gm.solve_primal_dual(model, shards=2)


@pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")
def test_torch_backend_on_a_graph_without_edges():
    """Each node solves alone (issue 30 item 6): the torch CPU backend gives the numpy path's
    weights, the nodes' own minimizers."""
    G = nx.empty_graph(4)
    model = gm.GTVModel(G, 2, penalty=gm.Norm2(), lam=1.0)
    rng = np.random.default_rng(2)
    for i in range(4):
        X = rng.normal(size=(5, 2))
        model.set_loss(i, gm.SquaredLoss(X, X @ np.array([1.0, float(i)])))
    on_numpy = gm.solve_primal_dual(model, max_iter=5, tol=0)
    on_torch = gm.solve_primal_dual(model, max_iter=5, tol=0,
                                    backend=gm.TorchBackend(device="cpu"))
    assert on_torch.flows.shape == (0, 2)
    np.testing.assert_allclose(on_torch.weights, on_numpy.weights, atol=1e-12)
    for i in range(4):
        loss = model.loss_at(i)
        sol = np.linalg.lstsq(loss.X, loss.y, rcond=None)[0]
        np.testing.assert_allclose(on_torch.weights[i], sol, atol=1e-8)
