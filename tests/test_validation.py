"""Argument validation of every public entry point (issue 9 deliverable 5): a bad value (bool
for an int, NaN, inf, out of range, unknown option, wrong shape) raises the package's own
exception naming the argument; numpy scalar types are accepted where Python numbers are."""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import datasets
from gtvmodel import theory as th
from gtvmodel._validate import check_int, check_option, check_rows, check_scalar
from gtvmodel.duality import conic
from gtvmodel.errors import (
    ConstraintError,
    DataError,
    LossError,
    ParameterError,
    PenaltyError,
    SolverError,
)
from gtvmodel.primal_dual import prox as prox_mod

NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module")
def path4() -> gm.GTVModel:
    """Squared losses on a path of 4 nodes, d = 1; clusters {0, 1} and {2, 3}."""
    rng = np.random.default_rng(0)
    model = gm.GTVModel(nx.path_graph(4), 1, lam=0.1)
    for i in range(4):
        X = rng.standard_normal((3, 1))
        model.set_loss(i, gm.SquaredLoss(X, X[:, 0] * (1.0 if i < 2 else -1.0)))
    return model


def _raises(exc: type[Exception], word: str, fn, *args, **kwargs) -> None:
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert word in str(info.value), f"{word!r} not named in: {info.value}"


# ----------------------------------------------------------------- the helpers themselves
@pytest.mark.parametrize("x, kwargs, ok", [
    (0.0, {"min_val": 0.0}, True),
    (0.0, {"min_val": 0.0, "include_boundaries": "neither"}, False),
    (0.0, {"min_val": 0.0, "include_boundaries": "right"}, False),
    (1.0, {"min_val": 0.0, "max_val": 1.0, "include_boundaries": "right"}, True),
    (1.0, {"min_val": 0.0, "max_val": 1.0, "include_boundaries": "left"}, False),
    (INF, {"min_val": 1.0, "finite": False}, True),
    (INF, {"min_val": 1.0}, False),
    (NAN, {"finite": False}, False),
    (np.float32(0.5), {"max_val": 1.0}, True),
    (np.int64(3), {}, True),
    (np.array(2.0), {}, True),
    (True, {}, False),
    ("1.0", {}, False),
    (1 + 0j, {}, False),
    (None, {}, False),
])
def test_check_scalar_semantics(x, kwargs, ok):
    if ok:
        v = check_scalar(x, "x", where="f", **kwargs)
        assert isinstance(v, float)
    else:
        _raises(ParameterError, "f: x must be", check_scalar, x, "x", where="f", **kwargs)


def test_check_int_option_rows():
    assert check_int(np.int32(4), "k", min_val=1) == 4
    for bad in (True, np.bool_(True), 2.0, "2", 0):
        _raises(ParameterError, "k must be an integer", check_int, bad, "k", min_val=1)
    _raises(DataError, "k must be", check_int, -1, "k", min_val=0, error=DataError)
    assert check_option("b", "opt", ("a", "b")) == "b"
    _raises(ParameterError, "opt must be one of 'a', 'b', got 'c'", check_option, "c", "opt",
            ("a", "b"))
    _raises(ParameterError, "opt", check_option, ["a"], "opt", {"a": 1})
    assert check_rows([1.0, 2.0], "w", 2, 1).shape == (2, 1)
    _raises(DataError, "w must have shape (2, 2)", check_rows, [1.0, 2.0], "w", 2, 2)
    _raises(DataError, "w contains NaN", check_rows, [[1.0], [NAN]], "w", 2, 1)


# ----------------------------------------------------------------- model declaration
@pytest.mark.parametrize("kwargs, exc, word", [
    ({"dim": True}, DataError, "dim"),
    ({"dim": 0}, DataError, "dim"),
    ({"dim": 1.5}, DataError, "dim"),
    ({"dim": "2"}, DataError, "dim"),
    ({"dim": 1, "lam": -1.0}, ParameterError, "lam"),
    ({"dim": 1, "lam": NAN}, ParameterError, "lam"),
    ({"dim": 1, "lam": INF}, ParameterError, "lam"),
    ({"dim": 1, "lam": True}, ParameterError, "lam"),
    ({"dim": 1, "lam": "0.1"}, ParameterError, "lam"),
])
def test_model_rejects(kwargs, exc, word):
    _raises(exc, word, gm.GTVModel, nx.path_graph(3), **kwargs)


def test_model_accepts_numpy_scalars():
    model = gm.GTVModel(nx.path_graph(3), np.int64(2), lam=np.float32(0.5))
    assert model.dim == 2 and type(model.dim) is int and model.lam == 0.5
    model.lam = np.int32(0)
    assert model.lam == 0.0


def test_symbolic_terms_in_own_variable():
    model = gm.GTVModel(nx.path_graph(2), 2)
    x0, x1 = model.var(0), model.var(1)
    _raises(LossError, "own variable", model.set_loss, 0, cp.sum_squares(x0 - x1))
    _raises(LossError, "own variable", gm.SymbolicLoss, cp.sum_squares(x1), x0, 0)
    _raises(ConstraintError, "own variable", model.add_constraint, 0, x0 <= x1)
    _raises(ConstraintError, "own variable", gm.SymbolicConstraint, x1 >= 0, x0, 0)
    _raises(LossError, "another variable", model.set_loss, 0,
            gm.SymbolicLoss(cp.sum_squares(x1), x1, 1))
    _raises(ConstraintError, "another variable", model.add_constraint, 0,
            gm.SymbolicConstraint(x1 >= 0, x1, 1))


@pytest.mark.parametrize("make, exc, word", [
    (lambda: gm.SquaredLoss(np.ones((2, 1)), np.ones(2), l1=-1.0), ParameterError, "l1"),
    (lambda: gm.SquaredLoss(np.ones((2, 1)), np.ones(2), l2=NAN), ParameterError, "l2"),
    (lambda: gm.HuberLoss(np.ones((2, 1)), np.ones(2), M=0.0), ParameterError, "M"),
    (lambda: gm.HuberLoss(np.ones((2, 1)), np.ones(2), M=True), ParameterError, "M"),
    (lambda: gm.NormBall(-1.0), ParameterError, "radius"),
    (lambda: gm.NormBall(INF), ParameterError, "radius"),
    (lambda: gm.NormBall(1.0, p=0.5), DataError, "p must be >= 1"),
    (lambda: gm.NormBall(1.0, p=NAN), DataError, "p must be >= 1"),
    (lambda: gm.NormBall(1.0, p="2"), DataError, "p must be a real number"),
    (lambda: gm.NormP(True), PenaltyError, "p must be a real number"),
    (lambda: gm.NormP(0.9), PenaltyError, "p must be >= 1"),
])
def test_term_constructors_reject(make, exc, word):
    _raises(exc, word, make)


def test_term_constructors_accept_numpy_scalars():
    assert gm.NormBall(np.float32(2.0), p=np.int64(1)).p == 1.0
    assert gm.NormP(np.inf).p == np.inf
    assert gm.HuberLoss(np.ones((2, 1)), np.ones(2), M=np.int32(2)).M == 2.0


@pytest.mark.parametrize("call, exc, word", [
    (lambda L: L.conjugate([1.0, 2.0]), DataError, "s must have shape (1,)"),
    (lambda L: L.conjugate([NAN]), DataError, "s contains NaN"),
    (lambda L: L.prox([[1.0]], 1.0), DataError, "v must be 1-dimensional"),
    (lambda L: L.prox([1.0, 2.0], 1.0), DataError, "v must have shape (1,)"),
    (lambda L: L.prox([1.0], 0.0), ParameterError, "tau must be finite and > 0"),
    (lambda L: L.prox([1.0], NAN), ParameterError, "tau"),
])
def test_loss_methods_reject(call, exc, word):
    _raises(exc, word, call, gm.SquaredLoss(np.ones((2, 1)), np.ones(2)))


# ----------------------------------------------------------------- certify
@pytest.mark.parametrize("kwargs, exc, word", [
    ({"tol": 0.0}, ParameterError, "tol"),
    ({"tol": -1e-6}, ParameterError, "tol"),
    ({"tol": NAN}, ParameterError, "tol"),
    ({"tol": INF}, ParameterError, "tol"),
    ({"tol": True}, ParameterError, "tol"),
    ({"tol": "1e-6"}, ParameterError, "tol"),
    ({"feas_tol": -1.0}, ParameterError, "feas_tol"),
    ({"feas_tol": NAN}, ParameterError, "feas_tol"),
    ({"feas_tol": INF}, ParameterError, "feas_tol"),
    ({"radius": -1.0}, ParameterError, "radius"),
    ({"radius": NAN}, ParameterError, "radius"),
    ({"radius": INF}, ParameterError, "radius"),
    ({"radius": True}, ParameterError, "radius"),
    ({"radius": [1.0, 1.0, 1.0, 1.0]}, ParameterError, "radius"),
    ({"project": "always"}, ParameterError, "project"),
    ({"project": None}, ParameterError, "project"),
    ({"fallback": 1}, ParameterError, "fallback"),
    ({"fallback": "no"}, ParameterError, "fallback"),
    ({"solver": 3}, ParameterError, "solver"),
    ({"solver": "NOSUCH"}, SolverError, "NOSUCH"),
    ({"weights": np.zeros((3, 1))}, DataError, "weights must have shape (4, 1)"),
    ({"weights": [0.0, NAN, 0.0, 0.0]}, DataError, "weights contains NaN"),
    ({"flows": np.zeros((3, 2))}, DataError, "flows must have shape (3, 1)"),
    ({"flows": [INF, 0.0, 0.0]}, DataError, "flows contains NaN or inf"),
])
@pytest.mark.parametrize("entry", ["function", "method"])
def test_certify_rejects(path4, entry, kwargs, exc, word):
    kw = dict(kwargs)
    W = kw.pop("weights", np.zeros(4))
    U = kw.pop("flows", None)
    fn = gm.certify if entry == "function" else (lambda m, *a, **k: m.certify(*a, **k))
    _raises(exc, word, fn, path4, W, U, **kw)


def test_certify_accepts_numpy_scalars(path4):
    cert = gm.certify(path4, np.zeros(4), np.zeros(3), tol=np.float32(1e-6),
                      feas_tol=np.float64(0.0), radius=np.int64(10), fallback=np.bool_(False),
                      solver="clarabel")
    assert np.isfinite(cert.gap) and cert.gap >= 0


# ----------------------------------------------------------------- exact and dual solves
@pytest.mark.parametrize("kwargs, exc, word", [
    ({"accuracy": 0.0}, ParameterError, "accuracy"),
    ({"accuracy": -1.0}, ParameterError, "accuracy"),
    ({"accuracy": NAN}, ParameterError, "accuracy"),
    ({"accuracy": INF}, ParameterError, "accuracy"),
    ({"accuracy": True}, ParameterError, "accuracy"),
    ({"certify": "yes"}, ParameterError, "certify"),
    ({"certify": 1}, ParameterError, "certify"),
    ({"verbose": None}, ParameterError, "verbose"),
    ({"accept_inaccurate": 0}, ParameterError, "accept_inaccurate"),
    ({"solver": 3}, ParameterError, "solver"),
    ({"solver": "NOSUCH"}, SolverError, "NOSUCH"),
])
def test_solve_exact_rejects(path4, kwargs, exc, word):
    _raises(exc, word, gm.solve_exact, path4, **kwargs)
    _raises(exc, word, path4.solve_exact, **kwargs)


@pytest.mark.parametrize("kwargs, exc, word", [
    ({"verbose": "no"}, ParameterError, "verbose"),
    ({"accept_inaccurate": None}, ParameterError, "accept_inaccurate"),
    ({"solver": 1.0}, ParameterError, "solver"),
    ({"solver": "NOSUCH"}, SolverError, "NOSUCH"),
])
def test_solve_dual_rejects(path4, kwargs, exc, word):
    _raises(exc, word, gm.solve_dual, path4, **kwargs)
    _raises(exc, word, path4.solve_dual, **kwargs)


def test_solves_accept_numpy_scalars(path4):
    sol = gm.solve_exact(path4, accuracy=np.float32(1e-5), certify=np.bool_(True))
    assert sol.weights.shape == (4, 1)
    assert gm.solve_dual(path4, verbose=np.bool_(False)).flows.shape == (3, 1)


# ----------------------------------------------------------------- Algorithm 1
@pytest.mark.parametrize("kwargs, exc, word", [
    ({"max_iter": True}, ParameterError, "max_iter"),
    ({"max_iter": -1}, ParameterError, "max_iter"),
    ({"max_iter": 2.0}, ParameterError, "max_iter"),
    ({"max_iter": NAN}, ParameterError, "max_iter"),
    ({"tol": -1.0}, ParameterError, "tol"),
    ({"tol": NAN}, ParameterError, "tol"),
    ({"tol": INF}, ParameterError, "tol"),
    ({"tol": False}, ParameterError, "tol"),
    ({"record_every": 0}, ParameterError, "record_every"),
    ({"record_every": True}, ParameterError, "record_every"),
    ({"record_every": 5.0}, ParameterError, "record_every"),
    ({"prox": "fast"}, ParameterError, "prox"),
    ({"prox": None}, ParameterError, "prox"),
    ({"step": -1.0}, ParameterError, "step"),
    ({"step": NAN}, ParameterError, "step"),
    ({"step": True}, ParameterError, "step"),
    ({"step": (np.ones(3), np.ones(3))}, DataError, "step tau must have shape (4,)"),
    ({"step": (np.ones(4), np.ones(2))}, DataError, "step sigma must have shape (3,)"),
    ({"step": (np.ones(4), np.full(3, NAN))}, DataError, "step sigma contains NaN"),
    ({"progress": "yes"}, ParameterError, "progress"),
    ({"batch_cvxpy": 1}, ParameterError, "batch_cvxpy"),
    ({"certificate_budget": 0.0}, ParameterError, "certificate_budget"),
    ({"certificate_budget": NAN}, ParameterError, "certificate_budget"),
    ({"callback": 3}, ParameterError, "callback"),
    ({"warm_start": (np.zeros(3), None)}, DataError, "warm_start weights"),
    ({"warm_start": (np.zeros(4), np.zeros(4))}, DataError, "warm_start flows"),
    ({"warm_start": 3}, ParameterError, "warm_start"),
])
def test_solve_primal_dual_rejects(path4, kwargs, exc, word):
    kw = {"max_iter": 2, **kwargs}
    _raises(exc, word, gm.solve_primal_dual, path4, **kw)
    _raises(exc, word, path4.solve_primal_dual, **kw)


def test_solve_primal_dual_accepts_numpy_scalars(path4):
    res = gm.solve_primal_dual(path4, max_iter=np.int64(3), tol=np.float32(0.0),
                               record_every=np.int32(1), step=np.float64(1.0),
                               progress=np.bool_(False))
    assert res.iterations == 3


@pytest.mark.parametrize("kwargs, word", [
    ({"c0": -1.0}, "c0"), ({"c0": NAN}, "c0"), ({"gain": 0.0}, "gain"),
    ({"alpha0": 1.5}, "alpha0"), ({"alpha0": 0.0}, "alpha0"), ({"eta": 1.0}, "eta"),
    ({"delta": 1.0}, "delta"), ({"every": 0}, "every"), ({"every": 2.5}, "every"),
    ({"every": True}, "every"), ({"far_factor": 1.0}, "far_factor"),
    ({"max_far_moves": -1}, "max_far_moves"), ({"far": 1.2}, "far"),
])
def test_residual_balancing_rejects(kwargs, word):
    _raises(ParameterError, word, gm.ResidualBalancing, **kwargs)


def test_prox_plan_rejects_unknown_path(path4):
    _raises(ParameterError, "prox must be one of 'auto', 'cvxpy'", prox_mod.plan, path4, "fast")


# ----------------------------------------------------------------- conic node problems
@pytest.mark.parametrize("i", [True, -1, 4, 1.0, "0", None])
def test_conic_node_position_rejected(path4, i):
    _raises(DataError, "node position", conic.node_conjugate_value, path4, i, [0.0])


@pytest.mark.parametrize("S, word", [
    (np.zeros((2, 2)), "S must have shape (2, 1)"),
    ([[0.0], [NAN]], "S contains NaN"),
])
def test_conic_conjugate_values_rejects(path4, S, word):
    _raises(DataError, word, conic.conjugate_values, path4, [0, 1], S)


# ----------------------------------------------------------------- theory
PART = [[0, 1], [2, 3]]


@pytest.mark.parametrize("call, word", [
    (lambda m: th.check_well_connected(m, PART, 1.0, constant="paper"), "constant"),
    (lambda m: th.check_well_connected(m, PART, 1.0, flow_func="magic"), "flow_func"),
    (lambda m: th.check_well_connected(m, PART, 1.0, flow_func=["x"]), "flow_func"),
    (lambda m: th.check_well_connected(m, PART, True), "lam"),
    (lambda m: th.check_well_connected(m, PART, -0.5), "lam"),
    (lambda m: th.consensus_threshold(m, method="lp"), "method"),
    (lambda m: th.consensus_threshold(m, flow_func=42), "flow_func"),
    (lambda m: th.verify_recovery(m, PART, 1.0, tol=0.0), "tol"),
    (lambda m: th.verify_recovery(m, PART, 1.0, tol=NAN), "tol"),
    (lambda m: th.verify_recovery(m, PART, 1.0, constant=2.0), "constant"),
    (lambda m: th.verify_recovery(m, PART, INF), "lam"),
    (lambda m: th.check_well_connected(m, PART, 1.0, solver=2), "solver"),
    (lambda m: th.consensus_threshold(m, solver=b"CLARABEL"), "solver"),
    (lambda m: th.verify_recovery(m, PART, 1.0, solver=["CLARABEL"]), "solver"),
])
def test_theory_rejects(path4, call, word):
    _raises(ParameterError, word, call, path4)


# ----------------------------------------------------------------- datasets
@pytest.mark.parametrize("kwargs, word", [
    ({"m": 0}, "m (samples per node)"), ({"m": 2.5}, "m (samples per node)"),
    ({"m": True}, "m (samples per node)"), ({"rho": 1.5}, "rho"), ({"rho": NAN}, "rho"),
    ({"sigma": -1.0}, "sigma"), ({"sigma": INF}, "sigma"),
])
def test_linear_data_rejects(kwargs, word):
    G = nx.path_graph(4)
    kw = {"m": 3, **kwargs}
    _raises(DataError, word, datasets.linear_data, G, np.ones((4, 2)), np.zeros(4), **kw)


def test_dataset_mse_rejects_unknown_nodes():
    data = datasets.linear_data(nx.path_graph(4), np.ones((4, 2)), np.zeros(4), np.int64(3),
                                rho=np.float64(0.5))
    assert data.mse(np.ones((4, 2))) == 0.0
    _raises(DataError, "nodes must be one of 'all', 'unlabelled'", data.mse, np.ones((4, 2)),
            "some")


def test_edge_weights_checked_at_once_and_named_when_bad():
    """The edge weights are validated as one array; a bad one (a Python int beyond double
    precision, a bool, a string, NaN, a negative number) is named with its edge."""
    G = nx.path_graph(3)
    G[1][2]["weight"] = np.float32(2.0)
    assert gm.GTVModel(G, 1).edge_weights.tolist() == [1.0, 2.0]
    for bad, words in ((10**400, "finite and > 0"), (True, "a real number"),
                       ("2", "a real number"), (float("nan"), "finite and > 0"),
                       (-1.0, "finite and > 0")):
        G[0][1]["weight"] = bad
        with pytest.raises(gm.GraphError, match=r"edge \(0, 1\): weight A_e must be " + words):
            gm.GTVModel(G, 1)
