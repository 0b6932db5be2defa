"""One result vocabulary (gtvmodel/results.py): every result and report of real solves on a small
labelled model answers ``weights``/``flows`` in model order, ``weight(node)``/``flow(edge)`` by
label (reversed edges with the opposite sign), ``status``, ``success``, ``timings`` and
``to_dict()`` in the same way."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json

import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel.cli import main
from gtvmodel.comparison import Comparison
from gtvmodel.datasets import chain
from gtvmodel.results import BRIEF_WIDTH, Labels, brief

COMMON_KEYS = {"result", "status", "success", "timings"}


@pytest.fixture(scope="module")
def labelled():
    """Five labelled nodes (strings, an int, a tuple), d = 2, edges declared against the
    model's orientation (the model orients by node position)."""
    G = nx.Graph()
    G.add_edge(("t", 1), "a", weight=2.0)      # model order puts ("t", 1) first
    G.add_edge("a", 7, weight=0.5)
    G.add_edge(7, "b")
    G.add_edge("b", ("t", 1))
    G.add_node("lonely")
    model = gm.GTVModel(G, dim=2, lam=0.4)
    rng = np.random.default_rng(3)
    for v in model.nodes:
        model.set_loss(v, gm.SquaredLoss(rng.standard_normal((4, 2)), rng.standard_normal(4)))
    return model


@pytest.fixture(scope="module")
def results(labelled):
    model = labelled
    sol = gm.solve_exact(model)
    dual = gm.solve_dual(model)
    run = gm.solve_primal_dual(model, tol=1e-7, max_iter=20_000)
    cert = gm.certify(model, run.weights, run.flows)
    return {"Solution": sol, "DualSolution": dual, "PrimalDualResult": run, "Certificate": cert}


@pytest.fixture(scope="module")
def reports():
    data = chain(n=3, eps=0.05, m=5, sigma=0.1, seed=2)
    model, part = data.model(), data.partition()
    clusters = gm.check_well_connected(model, part, lam=1.0)
    rec = gm.verify_recovery(model, part, lam=1.0)
    return model, clusters, rec


def test_every_result_derives_from_the_base(results, reports):
    _, clusters, rec = reports
    for r in [*results.values(), *clusters, rec]:
        assert isinstance(r, gm.Result)
        assert isinstance(r.status, str) and isinstance(r.success, bool)
    assert set(results) == {type(r).__name__ for r in results.values()}


def test_weight_and_flow_lookups_agree_with_the_rows(labelled, results):
    model = labelled
    for name, r in results.items():
        assert r.weights.shape == (model.num_nodes, model.dim), name
        assert r.flows.shape == (model.num_edges, model.dim), name
        for i, v in enumerate(model.nodes):
            np.testing.assert_array_equal(r.weight(v), r.weights[i])
        for e, (h, t) in enumerate(model.edges):
            head, tail = model.nodes[h], model.nodes[t]
            np.testing.assert_array_equal(r.flow((head, tail)), r.flows[e])
            # the reverse orientation is the flow from e- to e+: -u_e
            np.testing.assert_array_equal(r.flow((tail, head)), -r.flows[e])
        by_node = r.weights_by_node()
        assert list(by_node) == model.nodes
        assert all(np.array_equal(by_node[v], r.weight(v)) for v in model.nodes)
    sol = results["Solution"]
    assert {k: v.tolist() for k, v in model.weights_by_node(sol.weights).items()} == \
        {k: v.tolist() for k, v in sol.weights_by_node().items()}
    # a Certificate's weights are the candidate it certified, its flows the repaired ones
    cert, run = results["Certificate"], results["PrimalDualResult"]
    np.testing.assert_array_equal(cert.weights, run.weights)


def test_reversed_edge_sign_follows_the_node_condition(labelled, results):
    """``flow((a, b))`` is the flow from ``a`` to ``b`` either way: the net outflow of a node is
    the sum of ``flow((node, nbr))`` over its neighbours, which must be ``-grad L_i(w_i)`` at
    the exact solution (MATH.md's sign)."""
    model, sol = labelled, results["Solution"]
    grad = model.loss_gradients(sol.weights)
    for v in model.nodes:
        out = sum((sol.flow((v, nb)) for nb in model.graph.neighbors(v)), np.zeros(model.dim))
        np.testing.assert_allclose(out, -grad[model.index(v)], atol=1e-6)


def test_unknown_labels_raise_errors_naming_them(results, reports):
    for r in results.values():
        with pytest.raises(gm.UnknownNodeError, match="'nowhere'"):
            r.weight("nowhere")
        with pytest.raises(gm.UnknownNodeError, match="'nowhere'"):
            r.flow(("a", "nowhere"))
        with pytest.raises(gm.GraphError, match=r"\('a', 'b'\) is not an edge"):
            r.flow(("a", "b"))                     # both nodes exist, no edge
        with pytest.raises(gm.GraphError, match="not an edge"):
            r.flow(("a", "a"))
        with pytest.raises(gm.GraphError, match="not a pair"):
            r.flow("a")
        with pytest.raises(gm.UnknownNodeError):
            r.weight([1, 2])                       # unhashable: not a label
    _, clusters, rec = reports
    with pytest.raises(gm.UnsupportedError, match="RecoveryReport has no flows"):
        rec.flow((0, 1))
    with pytest.raises(gm.UnsupportedError, match="ClusterReport has no weights"):
        clusters[0].weight(0)


def test_lookup_dicts_are_built_once(results):
    sol = results["Solution"]
    sol.weight("a")
    sol.flow(("a", 7))
    node_pos, edge_pos = sol.labels._node_pos, sol.labels._edge_pos
    sol.weight("b")
    sol.flow((7, "a"))
    assert sol.labels._node_pos is node_pos and sol.labels._edge_pos is edge_pos


def test_labels_on_their_own():
    lab = Labels(["x", "y", "z"], np.array([[0, 2], [1, 2]]))
    assert lab.node("z") == 2
    assert lab.edge(("x", "z")) == (0, 1.0) and lab.edge(("z", "y")) == (1, -1.0)
    with pytest.raises(gm.GraphError):
        lab.edge(("x", "y"))


def test_to_dict_is_json_and_shares_its_keys(results, reports):
    _, clusters, rec = reports
    family = [*results.values(), clusters[0], rec]
    for r in family:
        d = r.to_dict()
        assert COMMON_KEYS <= set(d), type(r).__name__
        assert d["result"] == type(r).__name__
        assert d["status"] == r.status and d["success"] is r.success
        assert json.loads(json.dumps(d)) == d     # a faithful JSON round trip
        # no arrays in the summary
        assert "weights" not in d and "flows" not in d
        assert json.loads(r.to_json()) == d
        full = json.loads(json.dumps(r.to_dict(arrays=True)))
        for name in ("weights", "flows"):
            arr = getattr(r, name, None)
            if arr is not None:
                np.testing.assert_array_equal(np.array(full[name]), arr)
    run = results["PrimalDualResult"]
    assert "history" not in run.to_dict()
    hist = run.to_dict(arrays=True)["history"]
    assert hist["iteration"] == run.history.iteration.tolist()
    assert run.to_dict()["certificate"] == run.certificate.to_dict()
    assert rec.to_dict()["well_connected"][0] == clusters[0].to_dict()
    # labels that JSON cannot hold (a tuple) are written as their repr
    full = results["Solution"].to_dict(arrays=True)
    assert "('t', 1)" in full["nodes"] and len(full["edges"]) == results["Solution"].flows.shape[0]


def test_certificate_to_dict_is_what_the_cli_prints(tmp_path):
    """``gtvmodel certify --json`` prints ``Certificate.to_dict()``."""
    model = gm.GTVModel(nx.path_graph(["p", "q", "r"]), dim=1, lam=0.5)
    model.set_loss("p", gm.QuadraticLoss([1.0]))
    model.set_loss("r", gm.QuadraticLoss([-1.0]))
    sol = model.solve_exact()
    path = tmp_path / "p.npz"
    model.save(path)
    np.save(tmp_path / "w.npy", sol.weights)
    cert = model.certify(sol.weights)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["certify", str(path), str(tmp_path / "w.npy"), "--json"])
    printed = json.loads(buf.getvalue())
    assert code == 0 and cert.success
    assert set(printed) == set(cert.to_dict())
    assert printed["success"] is True and printed["result"] == "Certificate"
    assert printed["gap"] == pytest.approx(cert.gap, abs=1e-12)


def test_timings_are_one_mapping_of_seconds(results, reports):
    expected = {
        "Solution": {"compile", "solve", "solver_setup", "certificate", "polish"},
        "DualSolution": {"compile", "solve"},
        "PrimalDualResult": {"setup", "node_updates", "edge_updates", "certificate", "total"},
        "Certificate": {"repair", "evaluate", "total"},
    }
    for name, r in results.items():
        keys = expected[name]
        if name == "Solution" and "time" not in r.info["polish"]:
            keys = keys - {"polish"}  # polish="auto" skipped it: the answer certified first
        assert set(r.timings) == keys, name
        assert all(isinstance(t, float) and t >= 0 for t in r.timings.values()), name
    _, clusters, rec = reports
    assert clusters[0].timings == {} and rec.timings == {}


def test_success_is_the_old_criterion(labelled, results, reports):
    sol, dual = results["Solution"], results["DualSolution"]
    run, cert = results["PrimalDualResult"], results["Certificate"]
    # Solution: the self-certificate proves the requested accuracy (default 1e-6)
    assert sol.success == (sol.certificate.relative_gap <= 1e-6) and sol.success
    assert "certified" not in sol.info and "certificate_time" not in sol.info
    fast = gm.solve_exact(labelled, certify=False)
    assert fast.success == (fast.status == "optimal") and "certificate" not in fast.timings
    assert dual.success == (dual.status == "optimal") and dual.success
    assert run.success == (run.status == "converged") and run.success
    assert cert.success == (np.isfinite(cert.gap) and cert.relative_gap <= cert.tol)
    assert cert.success_at(1e-30) is False and cert.success_at(1.0) is True
    assert cert.status == ("certified" if cert.success else "not_certified")
    bad = gm.certify(labelled, run.weights + 1.0, tol=1e-6)
    assert not bad.success and bad.status == "not_certified"
    _, clusters, rec = reports
    for c in clusters:
        assert c.success == (c.margin > 1.0)
        assert c.status == ("well_connected" if c.success else "not_well_connected")
    assert rec.success == (rec.congestion <= 1.0 + rec.tol)
    assert rec.status == ("recovered" if rec.success else "not_recovered")


# ------------------------------------------------------------------ short reprs
@pytest.fixture(scope="module")
def big():
    """A 10,000-node chain with two clusters (squared losses, two samples per node) and the
    results of its engines that are cheap at this size; the theory reports are small ones
    with their per-node fields replaced by 10,000 entries."""
    n, rng = 10_000, np.random.default_rng(0)
    model = gm.GTVModel(nx.path_graph(n), dim=2, lam=0.1)
    W = np.where(np.arange(n)[:, None] < n // 2, 1.0, -1.0) * np.ones((1, 2))
    X = rng.standard_normal((n, 2, 2))
    model.set_data(X, np.einsum("nmd,nd->nm", X, W))
    run = gm.solve_primal_dual(model, max_iter=2, tol=0.0)
    path = gm.lam_path(model, [1.0, 0.1], method="primal_dual", max_iter=2, tol=0.0)
    small = chain(n=3, eps=0.05, m=5, sigma=0.1, seed=2)
    report = gm.check_well_connected(small.model(), small.partition(), lam=1.0)[0]
    nodes = list(range(n))
    per_node = dict.fromkeys(nodes, 1.0)
    report = dataclasses.replace(report, nodes=nodes, violating_set=nodes, budgets=per_node,
                                 beta=per_node, delta=per_node)
    rec = gm.verify_recovery(small.model(), small.partition(), lam=1.0)
    rec = dataclasses.replace(rec, weights=W, lifted=W, spread=per_node, deviation=per_node,
                              bound=per_node, well_connected=[report, report])
    return {"PrimalDualResult": run, "Certificate": run.certificate, "LamPath": path,
            "ClusterReport": report, "RecoveryReport": rec}


def test_reprs_are_a_few_lines_on_10000_nodes(big):
    """``repr`` (and ``str`` where not overridden) is a few short lines whatever the graph
    size, as scipy's ``OptimizeResult``: status, key numbers, sizes; the data stay
    attributes."""
    for name, res in big.items():
        text = repr(res)
        lines = text.splitlines()
        assert lines[0].startswith(f"{name}(status={res.status!r}, success="), lines[0]
        assert len(text) <= 3000 and len(lines) <= 30, (name, len(text), len(lines))
        assert max(map(len, lines)) <= 120, name
    run = big["PrimalDualResult"]
    assert "on 10000 nodes, 9999 edges" in repr(run).splitlines()[0]
    assert "  weights: array (10000, 2) float64" in repr(run).splitlines()
    assert "  iterations: 2" in repr(run).splitlines()
    assert "nodes: list of 10000: [0, 1, 2, 3, ...]" in repr(big["ClusterReport"])
    assert len(str(big["ClusterReport"])) <= 3000
    assert big["ClusterReport"].budgets[9999] == 1.0  # the data stay attributes
    assert len(repr([big["ClusterReport"]] * 2)) <= 6000


def test_brief_formats_one_short_line():
    assert brief(0.1 + 0.2) == "0.3" and brief(np.float32(2.5)) == "2.5"
    assert brief(np.arange(3.0)) == "[0., 1., 2.]"
    assert brief(np.zeros((7, 2))) == "array (7, 2) float64"
    assert brief(list(range(100))) == "list of 100: [0, 1, 2, 3, ...]"
    assert brief({"a": 1.0, "b": 2}) == "{'a': 1, 'b': 2}"
    assert len(brief("x" * 500)) == BRIEF_WIDTH and brief("x" * 500).endswith("...")


def test_comparison_repr_names_the_problem_and_sizes():
    table = Comparison(rows=["exact", "pooled"], columns=["train", "gap"],
                       values={"train": np.array([0.1, 0.2]), "gap": np.array([0.0, 1e-9])},
                       metric="mse", lam=0.1, penalty="Norm2()")
    assert repr(table).splitlines() == [
        "Comparison(metric='mse', lam=0.1, penalty='Norm2()') of 2 methods",
        "  rows: ['exact', 'pooled']", "  columns: ['train', 'gap']"]
    assert str(table) == table.to_text()
