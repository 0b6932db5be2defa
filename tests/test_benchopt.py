"""The benchopt benchmark ``benchmarks/benchopt/benchmark_gtv``: the raw-array problem handed
to every solver is the model's problem (checked here without benchopt), and a small
configuration runs offline through benchopt's command line (slow; skipped without benchopt)
with every certified gap at least the suboptimality measured against the exact optimum."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import datasets

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "benchopt"
sys.path[:0] = [str(BENCH / "benchmark_gtv"), str(BENCH)]

from benchmark_utils import node_graph, problem_arrays  # noqa: E402


def _raw_objective(a: dict, W: np.ndarray, lam: float, loss: str) -> float:
    """``sum_i (1/m_i) sum_r ell(x_r^T w_i, y_r) + lam sum_e A_e ||w_e+ - w_e-||_2`` from the
    raw arrays alone, as an outside solver reads them."""
    t = np.einsum("rd,rd->r", a["X"], W[a["node_index"]])
    rows = (t - a["y"]) ** 2 if loss == "squared" else np.logaddexp(0.0, -a["y"] * t)
    m = np.bincount(a["node_index"], minlength=a["n_nodes"])
    fit = (rows / m[a["node_index"]]).sum()
    diff = W[a["edges"][:, 0]] - W[a["edges"][:, 1]]
    return float(fit + lam * a["weights"] @ np.linalg.norm(diff, axis=1))


@pytest.mark.parametrize("name", ["sbm", "digits"])
def test_problem_arrays_are_the_models_problem(name):
    data = (datasets.sbm(sizes=(5, 5), m=4, sigma=0.5, seed=1) if name == "sbm"
            else node_graph(datasets.digits(nodes=6, seed=0)))
    model = gm.GTVModel(data.graph, data.dim, lam=0.3)
    model.set_data({v: (X, data.y[v]) for v, X in data.X.items()}, loss=data.loss)
    a = problem_arrays(model)
    assert a["X"].shape == (sum(len(y) for y in data.y.values()), data.dim)
    W = np.random.default_rng(0).normal(size=(model.num_nodes, model.dim))
    assert _raw_objective(a, W, 0.3, data.loss) == pytest.approx(model.objective(W), rel=1e-12)
    if name == "digits":  # the 3-NN graph of the nodes' mean data, made connected
        assert nx.is_connected(data.graph)


@pytest.mark.slow
def test_small_benchmark_runs_offline(tmp_path):
    pytest.importorskip("benchopt")
    pd = pytest.importorskip("pandas")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = tmp_path / "small.parquet"
    subprocess.run([sys.executable, "-m", "benchopt", "run", "benchmark_gtv", "--config",
                    "benchmark_gtv/config_small.yml", "--no-plot", "--no-html", "--output",
                    str(out.with_suffix(""))], cwd=BENCH, env=env, check=True, timeout=600,
                   capture_output=True)
    df = pd.read_parquet(out)
    plot = __import__("plot_results").plot  # needs pandas, imported past the skip
    solvers = set(df["solver_name"].str.split("[").str[0])
    assert {"Algorithm1", "ADMM", "FedRelax", "FedAvg", "solve_exact", "CVXPY",
            "Condat-Vu"} <= solvers
    gap, sub = df["objective_certified_gap"], df["objective_subopt_exact"]
    value = df["objective_value"]
    # soundness: gap >= P(W) - P* >= P(W) - P(W_exact) = subopt_exact, for every iterate
    assert (gap >= sub - 1e-9 * value.abs().clip(lower=1.0)).all()
    exact = df[df["solver_name"] == "solve_exact"]
    assert (exact["objective_certified_gap"] <= 1e-6 * exact["objective_value"].abs()).all()
    assert df["objective_certified_gap_target"].notna().any()  # FedAvg / FedRelax targets
    png = plot(df, tmp_path / "gap.png")
    assert png.stat().st_size > 10_000
