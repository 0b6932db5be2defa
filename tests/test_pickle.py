"""Models, results and certificates survive ``pickle`` and ``copy.deepcopy`` (joblib, Dask and
scikit-learn's ``clone`` need both).

A copy of a model keeps its declaration and drops its compiled artefacts (``ModelCache``, the
``ModelStructure``), which it rebuilds on first use; solving and certifying the copy must give
the numbers the original gives.  The original's answers are the reference: both are computed in
this process from the same data, so the tolerances are at rounding level (relative 1e-10 on
objectives and gaps, absolute 1e-8 on weights and flows).  A model restored in a NEW process
must not hand out CVXPY ids that its symbolic terms already use (checked in a subprocess).
"""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from pathlib import Path

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm

ROOT = Path(__file__).resolve().parents[1]


def roundtrip(obj, how):
    return pickle.loads(pickle.dumps(obj)) if how == "pickle" else copy.deepcopy(obj)


def mixed_model() -> gm.GTVModel:
    """Library losses of three batches, a symbolic loss, a symbolic and a library constraint."""
    rng = np.random.default_rng(3)
    model = gm.GTVModel(nx.cycle_graph(6), dim=2, lam=0.4)
    for i in range(3):
        model.set_loss(i, gm.SquaredLoss(rng.normal(size=(4, 2)), rng.normal(size=4)))
    model.set_loss(3, gm.LogisticLoss(rng.normal(size=(5, 2)), [1, -1, 1, 1, -1]))
    model.set_loss(4, lambda w: cp.sum_squares(w - np.array([1.0, -0.5])) + cp.norm1(w))
    model.set_loss(5, gm.SquaredLoss(rng.normal(size=(3, 2)), rng.normal(size=3), l2=0.1))
    model.add_constraint(4, lambda w: [cp.sum(w) <= 0.5])
    model.add_constraint(1, gm.Box(-0.3, 0.3))
    return model


@pytest.fixture(scope="module")
def solved():
    model = mixed_model()
    sol = model.solve_exact()
    cert = gm.certify(model, sol.weights)
    return model, sol, cert


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_solved_model_copy_solves_and_certifies_alike(solved, how):
    model, sol, cert = solved
    assert model.cache.builds > 0
    twin = roundtrip(model, how)
    assert twin.cache.builds == 0 and twin.cache.get("primal") is None  # dropped
    assert twin.nodes == model.nodes and twin.lam == model.lam and twin.dim == model.dim
    sol2 = twin.solve_exact()
    assert twin.cache.builds > 0  # rebuilt on demand
    assert sol2.status == sol.status
    np.testing.assert_allclose(sol2.objective, sol.objective, rtol=1e-10)
    np.testing.assert_allclose(sol2.weights, sol.weights, atol=1e-8)
    cert2 = gm.certify(twin, sol.weights)
    np.testing.assert_allclose(cert2.gap, cert.gap, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(cert2.primal_value, cert.primal_value, rtol=1e-12)
    np.testing.assert_allclose(cert2.dual_value, cert.dual_value, rtol=1e-10)
    # the copy's symbolic loss is stated in the copy's own node variable
    assert twin.loss(4).variable is twin.var(4)
    assert twin.var(4) is not model.var(4)


def test_unsolved_model_copies_and_stays_independent():
    model = mixed_model()
    for how in ("pickle", "deepcopy"):
        twin = roundtrip(model, how)
        twin.set_loss(0, gm.SquaredLoss(np.eye(2), [5.0, 5.0]))
        twin.lam = 2.0
        assert model.lam == 0.4 and model.loss(0) is not twin.loss(0)
        np.testing.assert_allclose(roundtrip(model, how).solve_exact().objective,
                                   model.solve_exact().objective, rtol=1e-10)


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_results_and_certificates_round_trip(solved, how):
    model, sol, cert = solved
    pd = model.solve_primal_dual(max_iter=300)
    dual = model.solve_dual()
    for res in (sol, cert, pd, dual):
        back = roundtrip(res, how)
        assert type(back) is type(res)
        np.testing.assert_array_equal(back.weights, res.weights)
        if res.flows is not None:
            np.testing.assert_array_equal(back.flows, res.flows)
        assert back.to_json() == res.to_json()
    back = roundtrip(cert, how)
    assert back.gap == cert.gap and back.feasible == cert.feasible
    assert back.weight(model.nodes[2]).tolist() == cert.weight(model.nodes[2]).tolist()


def test_certificate_of_a_restored_model_certifies_a_restored_result(solved):
    model, sol, cert = solved
    twin, sol_back = pickle.loads(pickle.dumps((model, sol)))
    cert2 = gm.certify(twin, sol_back.weights, sol_back.flows)
    cert1 = gm.certify(model, sol.weights, sol.flows)
    np.testing.assert_allclose(cert2.gap, cert1.gap, rtol=1e-10, atol=1e-14)
    assert cert2.gap >= 0.0


CHILD = r"""
import pickle, sys
import cvxpy as cp
model = pickle.loads(sys.stdin.buffer.read())
old = max(v.id for v in (model.var(4), model.loss(4).variable))
fresh = cp.Variable(2)
print(fresh.id > old, model.solve_exact().objective)
"""


def test_restored_model_in_a_new_process_gets_fresh_cvxpy_ids(solved):
    model, sol, _ = solved
    for _ in range(50):  # make sure the parent's ids are well past a fresh process's counter
        cp.Variable()
    out = subprocess.run([sys.executable, "-c", CHILD], input=pickle.dumps(model),
                         capture_output=True, cwd=ROOT, timeout=300, check=True)
    fresh_above, objective = out.stdout.decode().split()
    assert fresh_above == "True"
    np.testing.assert_allclose(float(objective), sol.objective, rtol=1e-10)
