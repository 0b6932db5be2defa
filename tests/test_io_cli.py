"""Problem/solution files and the ``gtvmodel certify`` command (issue 3, item 5)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import datasets
from gtvmodel.io import load_flows, load_weights, save_flows, save_weights

CLI = [sys.executable, "-m", "gtvmodel"]


def rich_model() -> gm.GTVModel:
    """Every library loss, a few constraints, str/int labels, non-unit edge weights."""
    rng = np.random.default_rng(0)
    G = nx.cycle_graph(7)
    G = nx.relabel_nodes(G, {0: "a", 3: "node three"})
    for k, (u, v) in enumerate(G.edges):
        G.edges[u, v]["weight"] = 0.5 + 0.25 * k
    model = gm.GTVModel(G, 2, penalty=gm.QuadForm([[2.0, 0.5], [0.5, 1.0]]), lam=0.4)
    X, y = rng.normal(size=(4, 2)), rng.normal(size=4)
    yb = np.where(y > 0, 1.0, -1.0)
    labels = list(G.nodes)
    model.set_loss(labels[0], gm.SquaredLoss(X, y, l2=0.1))
    model.set_loss(labels[1], gm.LogisticLoss(X, yb, l1=0.05))
    model.set_loss(labels[2], gm.HingeLoss(X, yb))
    model.set_loss(labels[3], gm.HuberLoss(X, y, M=0.3))
    model.set_loss(labels[4], gm.AbsoluteLoss(X, y, l2=0.2))
    model.set_loss(labels[5], gm.QuadraticLoss([1.0, -2.0]))
    model.set_loss(labels[6], gm.ZeroLoss(l2=0.3))
    model.add_constraint(labels[0], gm.Box(-1.0, [1.0, np.inf]))
    model.add_constraint(labels[5], gm.NormBall(1.5, p=np.inf))
    model.add_constraint(labels[5], gm.NonNeg())
    return model


def test_roundtrip_preserves_problem(tmp_path: Path):
    model = rich_model()
    path = tmp_path / "problem.npz"
    model.save(path)
    back = gm.GTVModel.load(path)
    assert back.nodes == model.nodes
    assert np.array_equal(back.edges, model.edges)
    assert np.array_equal(back.edge_weights, model.edge_weights)
    assert back.lam == model.lam and back.penalty == model.penalty
    W = np.random.default_rng(1).uniform(0.1, 0.9, size=(7, 2))
    assert model.objective(W) == back.objective(W)
    assert np.array_equal(model.constraint_violations(W + 5), back.constraint_violations(W + 5))
    s1, s2 = model.solve_exact(), back.solve_exact()
    assert abs(s1.objective - s2.objective) <= 1e-10 * max(1, abs(s1.objective))
    # the archive holds plain arrays only (no pickle): np.load with allow_pickle=False works
    with np.load(path, allow_pickle=False) as z:
        header = json.loads(bytes(z["header"]).decode())
    assert header["version"] == gm.io.FORMAT_VERSION and header["nodes"][0] == "a"


def test_every_penalty_roundtrips(tmp_path: Path):
    for pen in [gm.Norm2(), gm.Norm1(), gm.NormInf(), gm.NormP(3), gm.SquaredNorm2()]:
        model = gm.GTVModel(nx.path_graph(3), 2, penalty=pen, lam=0.1)
        model.save(tmp_path / "p.npz")
        assert gm.GTVModel.load(tmp_path / "p.npz").penalty == pen


def test_symbolic_models_cannot_be_saved(tmp_path: Path):
    model = gm.GTVModel(nx.path_graph(2), 2)
    model.set_loss(0, lambda x: (x[0] - 1) ** 2)
    with pytest.raises(gm.UnsupportedError):
        model.save(tmp_path / "p.npz")
    model2 = gm.GTVModel(nx.Graph([((1, 2), (3, 4))]), 2)
    with pytest.raises(gm.UnsupportedError, match="label"):
        model2.save(tmp_path / "p.npz")


def _corrupt(src: Path, dst: Path, **changes) -> None:
    with np.load(src, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    for k, v in changes.items():
        if v is None:
            arrays.pop(k)
        elif k == "header":
            h = json.loads(bytes(arrays["header"]).decode())
            h.update(v)
            arrays["header"] = np.frombuffer(json.dumps(h).encode(), dtype=np.uint8)
        else:
            arrays[k] = v
    np.savez(dst, **arrays)


def test_bad_problem_files(tmp_path: Path):
    model = rich_model()
    good = tmp_path / "good.npz"
    model.save(good)
    bad = tmp_path / "bad.npz"
    X = np.load(good)["X"]
    cases = [
        ({"X": None}, "missing array 'X'"),
        ({"X": X[:, :1]}, "array 'X' has shape"),
        ({"X": np.where(np.arange(X.size).reshape(X.shape) == 3, np.nan, X)}, "NaN"),
        ({"header": {"version": 99}}, "format version 99"),
        ({"header": {"losses": [{"kind": "cubic"}] * 7}}, "unknown loss type 'cubic'"),
        ({"header": {"penalty": {"kind": "tv3"}}}, "unknown penalty kind"),
        ({"edge_weights": -np.ones(7)}, "weight"),
        ({"edges": np.array([[0, 9]] * 7)}, "outside"),
    ]
    for change, msg in cases:
        _corrupt(good, bad, **change)
        with pytest.raises(gm.FileFormatError, match=msg):
            gm.GTVModel.load(bad)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(gm.FileFormatError, match="not a readable"):
        gm.GTVModel.load(tmp_path / "junk.npz")
    with zipfile.ZipFile(tmp_path / "empty.npz", "w"):
        pass
    with pytest.raises(gm.FileFormatError, match="missing array 'header'"):
        gm.GTVModel.load(tmp_path / "empty.npz")


def test_strict_header_and_edges(tmp_path: Path):
    """Issue 8: no silent coercion of header values, no silent flipping of edges."""
    model = rich_model()
    good = tmp_path / "good.npz"
    model.save(good)
    bad = tmp_path / "bad.npz"
    with np.load(good, allow_pickle=False) as z:
        header = json.loads(bytes(z["header"]).decode())
        edges = z["edges"]
    cons = json.loads(json.dumps(header["constraints"]))
    cons[0][0]["row"] = 0.9
    losses = json.loads(json.dumps(header["losses"]))
    losses[0]["l2"] = "0.1"
    cases = [
        ({"header": {"lam": "0.4"}}, "lam must be a finite JSON number"),
        ({"header": {"lam": -1}}, "lam must be a finite JSON number >= 0"),
        ({"header": {"n": 7.0}}, "n must be an integer"),
        ({"header": {"n": 9.7}}, "n must be an integer"),
        ({"header": {"d": True}}, "d must be an integer"),
        ({"header": {"version": 1.0}}, "format version 1.0"),
        ({"header": {"comment": "hi"}}, "unknown ['comment'] keys"),
        ({"header": {"constraints": cons}}, "row must be an integer"),
        ({"header": {"losses": losses}}, "l2 must be a finite JSON number"),
        ({"edges": edges[:, ::-1].copy()}, "e+ < e- is required"),
        ({"edges": edges[::-1].copy()}, "out of order"),
        ({"edges": np.vstack([edges[:1], edges[:-1]])}, "duplicates"),
        ({"X": np.empty((20, 2), dtype=object)}, "not a plain number type"),
    ]
    for change, msg in cases:
        _corrupt(good, bad, **change)
        with pytest.raises(gm.FileFormatError, match=re.escape(msg)):
            gm.GTVModel.load(bad)


@pytest.mark.parametrize("ext", [".npz", ".npy", ".csv", ".txt"])
def test_weights_and_flows_files(tmp_path: Path, ext: str):
    model = rich_model()
    rng = np.random.default_rng(2)
    W, U = rng.normal(size=(7, 2)), rng.normal(size=(7, 2))
    save_weights(tmp_path / f"w{ext}", W)
    save_flows(tmp_path / f"u{ext}", U)
    assert np.array_equal(load_weights(tmp_path / f"w{ext}", model), W)
    assert np.array_equal(load_flows(tmp_path / f"u{ext}", model), U)
    save_weights(tmp_path / f"bad{ext}", W[:3])
    with pytest.raises(gm.FileFormatError, match="expected \\(7, 2\\)"):
        load_weights(tmp_path / f"bad{ext}", model)
    save_weights(tmp_path / f"nan{ext}", np.where(W > 1, np.nan, W))
    with pytest.raises(gm.FileFormatError, match="NaN"):
        load_weights(tmp_path / f"nan{ext}", model)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """The real command in a subprocess (slow: imports cvxpy; used sparingly)."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


def call_main(capsys, *args: str) -> tuple[int, str, str]:
    """``gtvmodel.cli.main`` in-process: returns (exit code, stdout, stderr)."""
    from gtvmodel.cli import main

    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse errors
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_certify(tmp_path: Path, capsys):
    data = datasets.sbm((6, 6), m=3, rho=0.6, sigma=0.1, seed=3)
    model = data.model(lam=0.1)
    sol = model.solve_exact()
    model.save(tmp_path / "p.npz")
    save_weights(tmp_path / "w.npz", sol.weights)
    save_flows(tmp_path / "u.csv", sol.flows)
    save_weights(tmp_path / "w_bad.npy", sol.weights + 0.5)
    r = run_cli("certify", str(tmp_path / "p.npz"), str(tmp_path / "w.npz"),
                "--flows", str(tmp_path / "u.csv"))
    assert r.returncode == 0, r.stderr
    assert "certified              True" in r.stdout
    code, out, err = call_main(capsys, "certify", str(tmp_path / "p.npz"),
                               str(tmp_path / "w_bad.npy"), "--json")
    assert code == 1, err
    cert = json.loads(out)
    assert cert["success"] is False and cert["gap"] > 1e-3
    # the gap is sound against the exact optimum
    assert cert["gap"] >= model.objective(sol.weights + 0.5) - sol.objective - 1e-9
    code, out, err = call_main(capsys, "certify", str(tmp_path / "p.npz"),
                               str(tmp_path / "w.npz"))  # flows built from the weights
    assert code in (0, 1) and "built from the weights" in out


def test_cli_bad_input_exit_code_2(tmp_path: Path, capsys):
    model = rich_model()
    model.save(tmp_path / "p.npz")
    save_weights(tmp_path / "w.npz", np.zeros((3, 2)))
    (tmp_path / "w.txt").write_text("1, 2\n3, nan\n")
    _corrupt(tmp_path / "p.npz", tmp_path / "v99.npz", header={"version": 99})
    for args, msg in [
        (("certify", str(tmp_path / "missing.npz"), str(tmp_path / "w.npz")), "no such file"),
        (("certify", str(tmp_path / "p.npz"), str(tmp_path / "w.npz")), "expected (7, 2)"),
        (("certify", str(tmp_path / "p.npz"), str(tmp_path / "w.txt")), "NaN"),
        (("certify", str(tmp_path / "w.npz"), str(tmp_path / "w.npz")), "missing array"),
        (("certify", str(tmp_path / "v99.npz"), str(tmp_path / "w.npz")), "version 99"),
        (("certify", str(tmp_path / "p.npz"), str(tmp_path / "w.npz"), "--tol", "-1"), "tol"),
        (("certify", str(tmp_path / "p.npz"), str(tmp_path / "w.npz"), "--radius=nan"),
         "--radius must be finite"),
        (("certify", str(tmp_path / "p.npz"), str(tmp_path / "w.npz"), "--tol", "inf"),
         "--tol must be finite and > 0"),
        (("certify", str(tmp_path / "p.npz"), str(tmp_path / "w.npz"), "--feas-tol", "x"),
         "--feas-tol must be a number"),
        (("certify", str(tmp_path / "p.npz")), "required"),
        (("frobnicate",), "invalid choice"),
    ]:
        code, out, err = call_main(capsys, *args)
        assert code == 2, (args, out, err)
        assert msg in err, (args, err)
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    r = run_cli("certify", str(tmp_path / "p.npz"), str(tmp_path / "w.txt"))
    assert r.returncode == 2 and "NaN" in r.stderr and "Traceback" not in r.stderr
