"""Flower adapter (gtvmodel.flower): the certified gaps of a global model on the GTV and
consensus targets against exact optima computed here, Flower's ``evaluate_fn`` signatures, and
the Flower App of ``examples/flower_app`` through Flower's message API (skipped without flwr;
the whole simulation also needs Ray and is marked slow)."""

from __future__ import annotations

import sys
from pathlib import Path

import cvxpy as cp
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import datasets
from gtvmodel.flower import CertifiedEvaluator, global_weights

APP = Path(__file__).resolve().parents[1] / "examples" / "flower_app"


def _data():
    return datasets.sbm(sizes=(4, 4), p_in=0.8, p_out=0.2, m=20, sigma=0.5, seed=0)


def _optima(data, lam):
    """Consensus and GTV optimal values, written from scratch in CVXPY."""
    nodes = data.nodes
    w = cp.Variable(data.dim)
    W = cp.Variable((len(nodes), data.dim))
    fits = [cp.sum_squares(data.y[v] - data.X[v] @ w) / len(data.y[v]) for v in nodes]
    node_fits = [cp.sum_squares(data.y[v] - data.X[v] @ W[k]) / len(data.y[v])
                 for k, v in enumerate(nodes)]
    pos = {v: k for k, v in enumerate(nodes)}
    tv = sum(cp.norm(W[pos[a]] - W[pos[b]], 2) for a, b in data.graph.edges)
    opts = dict(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    consensus = cp.Problem(cp.Minimize(cp.sum(fits)))
    consensus.solve(**opts)
    gtv = cp.Problem(cp.Minimize(cp.sum(node_fits) + lam * tv))
    gtv.solve(**opts)
    return consensus.value, gtv.value, w.value


def test_certified_gaps_bound_the_suboptimality():
    data = _data()
    ev = CertifiedEvaluator(data, lam=0.05)
    P_cons, P_gtv, w_star = _optima(data, 0.05)
    rng = np.random.default_rng(0)
    for w in [np.zeros(2), rng.normal(size=2), w_star + 1e-3]:
        loss, metrics = ev(3, [w], {})
        W = np.tile(w, (8, 1))
        assert loss == pytest.approx(ev.model.loss_values(W).sum(), rel=1e-12)
        assert metrics["gap_consensus"] >= loss - P_cons - 1e-9
        assert metrics["gap_gtv"] >= metrics["objective_gtv"] - P_gtv - 1e-9
        assert metrics["mse"] == pytest.approx(data.mse(W))
    _, at_opt = ev(4, [w_star])
    assert at_opt["gap_consensus"] <= 1e-6  # tight at the consensus optimum
    assert at_opt["gap_gtv"] >= at_opt["objective_gtv"] - P_gtv - 1e-9 > 1.0  # clustered data
    assert [row["round"] for row in ev.history] == [3, 3, 3, 4]


def test_reference_columns_and_inputs():
    data = _data()
    ev = CertifiedEvaluator(data, lam=0.05, reference=True, targets=["consensus"])
    P_cons, _, _ = _optima(data, 0.05)
    row = ev.metrics(1, [np.zeros(1), np.ones(1)])  # [coef, intercept]-style lists concatenate
    assert row["subopt_consensus"] == pytest.approx(row["loss"] - P_cons, rel=1e-6, abs=1e-7)
    assert row["gap_consensus"] >= row["subopt_consensus"] - 1e-9
    assert "gap_gtv" not in row
    with pytest.raises(gm.DataError, match="d = 2"):
        ev.metrics(2, [np.zeros(3)])
    with pytest.raises(gm.DataError, match="NaN"):
        global_weights([np.array([np.nan, 0.0])], 8, 2)
    with pytest.raises(gm.ParameterError, match="targets"):
        CertifiedEvaluator(data, targets=["fedavg"])
    model = data.model(lam=0.05)
    assert CertifiedEvaluator(model).model is model


@pytest.fixture()
def flower_app():
    pytest.importorskip("flwr")
    sys.path.insert(0, str(APP))
    yield
    sys.path.remove(str(APP))
    for name in [m for m in sys.modules if m.startswith("gtv_flower")]:
        del sys.modules[name]


def test_flower_client_and_evaluate_fn_through_the_message_api(flower_app, monkeypatch):
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
    from flwr.supercore.task_identity import TaskIdentity
    from gtv_flower.client_app import train
    from gtv_flower.server_app import certified_evaluate_fn
    from gtv_flower.task import load_data, local_train, node_data

    run_config = {"dataset-seed": 0, "local-epochs": 5, "lr": 0.1, "proximal-mu": 0.0}
    context = Context(run_id=1, node_id=7, node_config={"partition-id": 2},
                      state=RecordDict(), run_config=run_config)
    for key, value in (("_run_id", 1), ("_node_id", 7), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, key, value)  # what a SuperNode sets per task
    w = np.array([0.5, -0.5])
    msg = Message(RecordDict({"arrays": ArrayRecord([w]), "config": ConfigRecord({})}),
                  dst_node_id=7, message_type="train")
    reply = train(msg, context)  # the registered handler, as the ClientApp calls it
    v = reply.content["arrays"].to_numpy_ndarrays()[0]
    X, y = node_data(load_data(0), 2)
    assert np.allclose(v, local_train(w, X, y, 5, 0.1)[0])
    assert reply.content["metrics"]["num-examples"] == 20

    evaluate = certified_evaluate_fn(CertifiedEvaluator(load_data(0), lam=0.05))
    record = evaluate(1, ArrayRecord([v]))
    assert record["gap_gtv"] >= record["gap_consensus"] > 0


@pytest.mark.slow
def test_flower_simulation_runs_offline(flower_app, capsys):
    pytest.importorskip("ray")
    from flwr.simulation import run_simulation
    from gtv_flower.client_app import app as client_app
    from gtv_flower.server_app import app as server_app

    run_simulation(server_app, client_app, num_supernodes=8,
                   backend_config={"client_resources": {"num_cpus": 1}})
    out = capsys.readouterr().out
    assert "gap consensus" in out
