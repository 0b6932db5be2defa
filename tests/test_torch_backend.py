"""Algorithm 1 on PyTorch tensors (``solve_primal_dual(..., device=...)``, issue 16 item 6),
tested on PyTorch's CPU build: the iterates equal the numpy path's to 1e-10 in float64 for
every fast node path and every library penalty, the run (status, history, steps) is the same,
float32 stays within its documented accuracy, the generic kernels agree with numpy on edge
cases, and unsupported combinations raise before iterating.  The converged run is checked
against an independent CVXPY problem written here."""

from __future__ import annotations

import os
import sys

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel.errors import ParameterError, UnsupportedError
from gtvmodel.primal_dual import torch_backend

torch = pytest.importorskip("torch")
# one intra-op thread: the tensors here are tiny, and a multi-threaded sparse product spins
# for milliseconds on a shared 2-core machine (16 ms against 5 us per product measured)
torch.set_num_threads(1)
#: where the backend runs: PyTorch's CPU build here and in CI; on a machine with a GPU,
#: ``GTVMODEL_TEST_DEVICE=cuda pytest tests/test_torch_backend.py`` runs the same tests there
DEVICE = os.environ.get("GTVMODEL_TEST_DEVICE", "cpu")

D = 3
PENALTIES = [gm.Norm2(), gm.Norm1(), gm.NormInf(), gm.NormP(3), gm.NormP(1.5),
             gm.SquaredNorm2(), gm.QuadForm(np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.2],
                                                      [0.0, 0.2, 1.5]]))]


def _graph(n: int = 24, seed: int = 0) -> nx.Graph:
    G = nx.connected_watts_strogatz_graph(n, 4, 0.3, seed=seed)
    G.add_node(n)  # one isolated node
    return G


def _mixed_model(penalty: gm.Penalty, seed: int = 1) -> gm.GTVModel:
    """Squared, quadratic (with l1, a box, a norm ball), zero (no data), logistic, Huber and
    hinge nodes (the last three computed in numpy on the CPU): several node groups with
    interleaved rows, an isolated node."""
    G = _graph(seed=seed)
    rng = np.random.default_rng(seed)
    model = gm.GTVModel(G, D, penalty=penalty, lam=0.4)
    for v in G.nodes:
        X = rng.standard_normal((5, D))
        kind = v % 4
        y = X @ [1.0, -2.0, 0.5] + 0.1 * rng.normal(size=5)
        if kind == 0:
            model.set_loss(v, gm.SquaredLoss(X, y) if v % 8 else gm.HuberLoss(X, y, 0.5))
        elif kind == 1:
            model.set_loss(v, gm.QuadraticLoss(rng.normal(size=D) * 2, l1=0.1 * (v % 3)))
        elif kind == 2:
            labels = np.where(X[:, 0] > 0, 1.0, -1.0)
            model.set_loss(v, gm.LogisticLoss(X, labels, l2=0.05) if v % 8 == 2
                           else gm.HingeLoss(X, labels, l2=0.1))
        # kind == 3: zero loss (a node without data)
    model.add_constraint(1, gm.Box(-0.5, 0.5))
    model.add_constraint(9, gm.NormBall(0.8, p=2))
    model.add_constraint(7, gm.Box(lo=0.0))
    return model


def _runs(model, **kw):
    """The numpy run and the torch run (float64, on ``DEVICE``) with the same arguments."""
    kw = {"max_iter": 60, "tol": 0.0, "record_every": 30, "certificate_budget": None, **kw}
    return gm.solve_primal_dual(model, **kw), gm.solve_primal_dual(model, device=DEVICE, **kw)


def _close(a: np.ndarray, b: np.ndarray, tol: float) -> bool:
    return bool(np.abs(a - b).max(initial=0.0) <= tol * max(1.0, np.abs(a).max(initial=0.0)))


@pytest.mark.parametrize("penalty", PENALTIES, ids=repr)
def test_iterates_equal_the_numpy_path_for_every_penalty_and_node_path(penalty):
    model = _mixed_model(penalty)
    a, b = _runs(model)
    assert a.paths == b.paths and {"squared", "quadratic", "logistic", "zero", "huber",
                                   "hinge", "isolated"} <= set(b.paths)
    assert b.weights.dtype == np.float64 and isinstance(b.flows, np.ndarray)
    assert _close(a.weights, b.weights, 1e-10) and _close(a.flows, b.flows, 1e-10)
    assert (a.status, a.iterations, a.c) == (b.status, b.iterations, pytest.approx(b.c))
    ha, hb = a.history, b.history
    np.testing.assert_array_equal(ha.iteration, hb.iteration)
    for col in ("primal", "primal_residual", "dual_residual", "c"):
        np.testing.assert_allclose(getattr(hb, col), getattr(ha, col), rtol=1e-8, atol=1e-10)
    # the dual value of a certificate comes from CVXPY solves (the logistic nodes'
    # conjugates) at their solver accuracy: inputs equal to 1e-15 agree to about 1e-7
    scale = max(1.0, float(np.abs(ha.primal).max()))
    for col in ("dual", "gap"):
        np.testing.assert_allclose(getattr(hb, col), getattr(ha, col), rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("penalty", [gm.Norm2(), gm.NormInf(), gm.SquaredNorm2()], ids=repr)
def test_dual_update_in_blocks_equals_the_whole(penalty, monkeypatch):
    """DU (33) on the device runs in blocks of EDGE_BLOCK_BYTES (1 GiB: memory at 1e8 edges);
    blocks of 7 rows (not dividing |E|) give the same iterates as one block."""
    model = _mixed_model(penalty, seed=4)
    kw = {"max_iter": 40, "tol": 0.0, "record_every": 20, "certificate_budget": None,
          "device": DEVICE}
    whole = gm.solve_primal_dual(model, **kw)
    monkeypatch.setattr(torch_backend, "EDGE_BLOCK_BYTES", 7 * D * 8)
    assert model.num_edges % 7
    blocks = gm.solve_primal_dual(model, **kw)
    np.testing.assert_array_equal(blocks.weights, whole.weights)
    np.testing.assert_array_equal(blocks.flows, whole.flows)


def test_fixed_steps_warm_start_and_convergence_status():
    model = _mixed_model(gm.Norm2(), seed=3)
    a, b = _runs(model, step=0.7, max_iter=3000, tol=1e-4, record_every=40)
    assert a.status == b.status == "converged" and a.iterations == b.iterations
    assert _close(a.weights, b.weights, 1e-10)
    a2, b2 = _runs(model, warm_start=a, max_iter=20)
    assert _close(a2.weights, b2.weights, 1e-10) and _close(a2.flows, b2.flows, 1e-10)


def test_converged_run_matches_an_independent_cvxpy_problem():
    G = nx.cycle_graph(12)
    rng = np.random.default_rng(5)
    lam = 0.6
    model = gm.GTVModel(G, D, penalty=gm.Norm2(), lam=lam)
    data = {}
    for v in G.nodes:
        X = rng.standard_normal((6, D))
        y = X @ ([1.0, 0.0, -1.0] if v < 6 else [-1.0, 2.0, 0.0]) + 0.05 * rng.normal(size=6)
        data[v] = (X, y)
        model.set_loss(v, gm.SquaredLoss(X, y))
    res = gm.solve_primal_dual(model, device=DEVICE, tol=1e-9, max_iter=20_000)
    assert res.status == "converged"
    W = cp.Variable((12, D))
    obj = sum(cp.sum_squares(X @ W[v] - y) / len(y) for v, (X, y) in data.items())
    obj += lam * sum(cp.norm(W[i] - W[j], 2) for i, j in G.edges)
    prob = cp.Problem(cp.Minimize(obj))
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    assert res.objective == pytest.approx(prob.value, rel=1e-7, abs=1e-9)
    assert res.gap >= res.objective - prob.value - 1e-9  # the certificate is sound
    np.testing.assert_allclose(res.weights, W.value, atol=1e-4)


def test_float32_is_within_its_documented_accuracy():
    model = _mixed_model(gm.Norm2(), seed=2)
    a = gm.solve_primal_dual(model, max_iter=100, tol=0.0, record_every=50,
                             certificate_budget=None, step=1.0)
    for dtype in ("float32", torch.float32):
        b = gm.solve_primal_dual(model, device=DEVICE, dtype=dtype, max_iter=100, tol=0.0,
                                 record_every=50, certificate_budget=None, step=1.0)
        assert b.weights.dtype == np.float64
        # docs/primal_dual.md: float32 iterates agree to about 1e-6 (5e-7 to 6e-7 measured)
        assert _close(a.weights, b.weights, 1e-5) and _close(a.flows, b.flows, 1e-5)
        # the certificate is computed in float64 from the float32 iterate: a valid bound
        cert = gm.certify(model, b.weights, b.flows, fallback=False)
        assert b.gap == pytest.approx(cert.gap, rel=1e-9, abs=1e-12)
        assert b.gap >= a.gap - 1e-3 * max(1.0, abs(a.objective))


def test_callback_gets_device_tensors_and_can_stop():
    model = _mixed_model(gm.SquaredNorm2())
    seen = []

    def cb(k, W, U):
        seen.append((k, type(W), W.dtype, tuple(U.shape)))
        return k == 7

    res = gm.solve_primal_dual(model, device=DEVICE, dtype="float32", callback=cb, tol=0.0,
                               max_iter=50)
    assert res.status == "stopped" and res.iterations == 7
    assert seen[-1] == (7, torch.Tensor, torch.float32, (model.num_edges, D))
    assert res.history.iteration[-1] == 7


@pytest.mark.parametrize("penalty", PENALTIES, ids=repr)
def test_dual_updates_on_tensors_equal_numpy_on_edge_cases(penalty):
    rng = np.random.default_rng(9)
    V = np.vstack([rng.normal(size=(40, D)) * 10.0 ** rng.integers(-3, 4, size=(40, 1)),
                   np.zeros((1, D)), [[1e200, -1e200, 3.0]], [[2.0, 2.0, -2.0]],
                   [[1e-250, 0.0, 0.0]]])
    lamA = np.abs(rng.normal(size=V.shape[0])) * 3
    lamA[:3] = 0.0
    sigma = np.abs(rng.normal(size=V.shape[0])) + 0.1
    ref = penalty.dual_update(V, sigma, lamA)
    for dtype in (torch.float64,):
        out = penalty.dual_update(torch.as_tensor(V, dtype=dtype, device=DEVICE),
                                  torch.as_tensor(sigma, device=DEVICE),
                                  torch.as_tensor(lamA, device=DEVICE))
        assert isinstance(out, torch.Tensor) and out.device.type == torch.device(DEVICE).type
        out = out.cpu()
        err = np.abs(out.numpy() - ref) / np.maximum(1.0, np.abs(ref))
        assert err.max() <= 1e-12
        if penalty.is_norm:  # inside the capacity for certain, as the numpy projection
            assert (gm._norms.norm_rows_upper(out.numpy(), penalty.q) <= lamA).all()


def test_constraint_projections_and_soft_threshold_on_tensors():
    rng = np.random.default_rng(11)
    Z = rng.normal(size=(30, D)) * 3
    lo, hi = np.full((30, D), -0.5), np.full((30, D), 1.0)
    Zt = torch.as_tensor(Z, device=DEVICE)
    np.testing.assert_array_equal(gm.Box.project_rows(Zt, torch.as_tensor(lo, device=DEVICE),
                                                      torch.as_tensor(hi, device=DEVICE))
                                  .cpu().numpy(), gm.Box.project_rows(Z, lo, hi))
    radii = np.abs(rng.normal(size=30))
    radii_t = torch.as_tensor(radii, device=DEVICE)
    for p in (1.0, 2.0, np.inf, 3.0):
        np.testing.assert_allclose(gm.NormBall.project_rows(Zt, radii_t, p).cpu().numpy(),
                                   gm.NormBall.project_rows(Z, radii, p), rtol=1e-13, atol=1e-15)


def test_unsupported_combinations_raise_before_iterating():
    G = nx.path_graph(4)
    model = gm.GTVModel(G, D, penalty=gm.Norm2(), lam=0.5)
    for v in G.nodes:
        model.set_loss(v, gm.QuadraticLoss(np.ones(D) * v))
    model.set_loss(2, lambda w: cp.sum_squares(w) + cp.norm1(w))  # symbolic: CVXPY path
    with pytest.raises(UnsupportedError, match="node.*2.*CVXPY"):
        gm.solve_primal_dual(model, device=DEVICE, max_iter=5)
    model.set_loss(2, gm.QuadraticLoss(np.zeros(D)))
    with pytest.raises(UnsupportedError, match="CVXPY"):
        gm.solve_primal_dual(model, device=DEVICE, prox="cvxpy", max_iter=5)

    class Halved(gm.Penalty):  # a user penalty with a numpy-only (Moreau) dual update
        def rows_value(self, V):
            return 0.5 * np.abs(V).sum(axis=1)

        def prox_rows(self, V, t):
            t = np.broadcast_to(np.asarray(t, float), (len(V),))[:, None] * 0.5
            return np.sign(V) * np.maximum(np.abs(V) - t, 0.0)

    with pytest.raises(UnsupportedError, match="Halved.*numpy-only"):
        gm.solve_primal_dual(gm.GTVModel(G, D, penalty=Halved(), lam=0.5), device=DEVICE)


def test_bad_device_and_dtype_raise_naming_the_argument():
    model = _mixed_model(gm.Norm2())
    if not torch.cuda.is_available():
        with pytest.raises(ParameterError, match="device='cuda'.*CUDA is not available"):
            gm.solve_primal_dual(model, device="cuda", max_iter=2)
        with pytest.raises(ParameterError, match="CUDA is not available"):
            gm.solve_primal_dual(model, device="cuda:0", max_iter=2)
    with pytest.raises(ParameterError, match="device"):
        gm.solve_primal_dual(model, device="tpu-ish", max_iter=2)
    with pytest.raises(ParameterError, match="dtype"):
        gm.solve_primal_dual(model, device=DEVICE, dtype="float16", max_iter=2)
    with pytest.raises(ParameterError, match="client and shards"):
        gm.solve_primal_dual(model, device=DEVICE, shards=2, max_iter=2)
    with pytest.raises(ParameterError, match="device and dtype"):
        gm.solve_primal_dual(model, backend="dask", dtype="float32", max_iter=2)
    res = gm.solve_primal_dual(model, backend="torch", max_iter=3, tol=0.0)  # device "cpu"
    assert res.iterations == 3


def test_without_pytorch_the_backend_says_how_to_install_it(monkeypatch):
    model = _mixed_model(gm.Norm2())
    monkeypatch.setitem(sys.modules, "torch", None)  # "import torch" fails
    with pytest.raises(UnsupportedError, match=r"gtvmodel\[gpu\]"):
        gm.solve_primal_dual(model, device=DEVICE, max_iter=2)
    assert gm.solve_primal_dual(model, max_iter=2, tol=0.0).iterations == 2  # numpy path
