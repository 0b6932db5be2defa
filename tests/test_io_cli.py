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


def _path_model() -> tuple[gm.GTVModel, gm.Solution]:
    """Three scalars on a labelled path, every edge at its capacity at the optimum."""
    model = gm.GTVModel(nx.relabel_nodes(nx.path_graph(3), {0: "a", 1: "b", 2: "c"}), 2,
                        penalty=gm.Norm2(), lam=1.0)
    for label, a in zip("abc", [0.0, 1.0, 5.0], strict=True):
        model.set_loss(label, gm.QuadraticLoss([a, -a]))
    return model, model.solve_exact()


def test_cli_text_files_from_other_tools(tmp_path: Path, capsys):
    """Issue 15.8: CSV written by pandas/R/spreadsheets (header row, index column of 0..n-1
    or node labels) certify as they are; what cannot be guessed is named by a clear error."""
    model, sol = _path_model()
    model.save(tmp_path / "p.npz")
    W, U = sol.weights, sol.flows
    rows = [",".join(repr(float(x)) for x in w) for w in W]
    files = {
        "header.csv": "w0,w1\n" + "\n".join(rows),
        "pandas.csv": ",w0,w1\n" + "\n".join(f"{i},{r}" for i, r in enumerate(rows)),
        "labels.csv": "node,w0,w1\n" + "\n".join(f'"{n}",{r}'
                                                 for n, r in zip("abc", rows, strict=True)),
        "bare_labels.csv": "\n".join(f"{n},{r}" for n, r in zip("abc", rows,
                                                                    strict=True)),
        "ids.txt": "\n".join(f"{10 + i} " + r.replace(",", " ") for i, r in enumerate(rows)),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text + "\n")
    (tmp_path / "u.csv").write_text(
        "edge,u0,u1\n" + "\n".join(f"{e}," + ",".join(repr(float(x)) for x in u)
                                  for e, u in enumerate(U)) + "\n")
    p = str(tmp_path / "p.npz")
    for name in ("header.csv", "pandas.csv", "labels.csv", "bare_labels.csv"):
        code, out, err = call_main(capsys, "certify", p, str(tmp_path / name),
                                   "--flows", str(tmp_path / "u.csv"))
        assert code == 0 and "certified              True" in out, (name, out, err)
    # an index that is neither 0..n-1 nor the labels: named by the error, then by the flag
    code, out, err = call_main(capsys, "certify", p, str(tmp_path / "ids.txt"))
    assert code == 2 and "shape (3, 3), expected (3, 2)" in err and "--index-col" in err
    code, out, err = call_main(capsys, "certify", p, str(tmp_path / "ids.txt"), "--index-col")
    assert code == 0, err
    assert np.array_equal(load_weights(tmp_path / "ids.txt", model, index_col=True), W)
    with pytest.raises(gm.FileFormatError, match="not numeric.*--skip-header"):
        load_weights(tmp_path / "header.csv", model, skip_header=False)
    with pytest.raises(gm.ParameterError, match="skip_header"):
        load_weights(tmp_path / "header.csv", model, skip_header="yes")


def test_cli_reports_a_flow_sign_flip_and_no_empty_repair(tmp_path: Path, capsys):
    """Issue 15.8: flows with the other sign convention fail with a note saying so (text and
    --json); flows at their capacities up to rounding are not "scaled by theta = 1"."""
    model, sol = _path_model()
    model.save(tmp_path / "p.npz")
    save_weights(tmp_path / "w.npy", sol.weights)
    save_flows(tmp_path / "neg.npy", -sol.flows)
    dn = model.penalty.dual_norm(sol.flows)
    save_flows(tmp_path / "tight.npy", sol.flows / dn[:, None] * model.capacities[:, None]
               * (1 + 1e-14))  # an ulp above capacity, as another solver may write them
    args = ("certify", str(tmp_path / "p.npz"), str(tmp_path / "w.npy"), "--flows")
    code, out, err = call_main(capsys, *args, str(tmp_path / "neg.npy"))
    assert code == 1 and "probable flow sign flip: the negated flows certify" in out, out
    code, out, err = call_main(capsys, *args, str(tmp_path / "neg.npy"), "--json")
    assert code == 1 and json.loads(out)["probable_flow_sign_flip"] is True
    code, out, err = call_main(capsys, *args, str(tmp_path / "tight.npy"), "--json")
    assert code == 0 and json.loads(out)["probable_flow_sign_flip"] is False
    code, out, err = call_main(capsys, *args, str(tmp_path / "tight.npy"))
    assert code == 0 and "theta = 1 " not in out and "sign flip" not in out, out


def test_cli_help_version_and_start_up(capsys):
    """Issue 15.8: --help lists every exit code (0-3), --version answers without touching
    matplotlib."""
    for args in (("--help",), ("certify", "--help")):
        code, out, err = call_main(capsys, *args)
        assert code == 0
        for line in ("0  certified", "1  not certified", "2  bad input",
                     "3  a numerical failure"):
            assert line in out, (args, out)
    code, out, err = call_main(capsys, "--version")
    assert code == 0 and out.strip() == f"gtvmodel {gm.__version__}"
    probe = ("import sys; from gtvmodel.cli import main; code = main(['--version']); "
             "print(code, 'matplotlib' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       timeout=300, cwd=Path(gm.__file__).parents[1])
    assert r.stdout.split()[-2:] == ["0", "False"], (r.stdout, r.stderr)
