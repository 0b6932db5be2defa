"""Algorithm 1 at scale (issue 30): iterates against an independent numpy loop, the set-up
cached across calls when the node-update groups are not whole structure batches, and graphs
without edges on the array backend."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import _compiled
from gtvmodel.primal_dual.compiled import CompiledEdgeUpdates
from gtvmodel.terms.losses import SquaredBatch

KERNELS = ["numpy"] + (["numba"] if _compiled.available() else [])


def _instance(n: int, E: int, d: int, m: int, iso: int, seed: int = 0):
    """``n`` coupled nodes on ``E`` random distinct edges plus ``iso`` isolated nodes, squared
    losses with ``m`` samples per node, ``Norm2``, ``lambda = 0.1``."""
    rng = np.random.default_rng(seed)
    pairs = set()
    while len(pairs) < E:
        a, b = rng.integers(0, n, 2)
        if a != b:
            pairs.add((int(min(a, b)), int(max(a, b))))
    edges = np.array(sorted(pairs))
    rng.shuffle(edges)
    X = rng.standard_normal((n + iso, m, d))
    y = np.einsum("nmd,nd->nm", X, rng.standard_normal((n + iso, d))) \
        + 0.1 * rng.standard_normal((n + iso, m))
    return edges, X, y


def _plain_loop(n_all: int, edges: np.ndarray, X: np.ndarray, y: np.ndarray, lam: float,
                c: float, iters: int) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 written directly: ``tau_i = c/deg(i)``, ``sigma = 1/(2c)``, the squared
    prox by a dense solve per node, the flows projected onto ``||u_e|| <= lam``; isolated
    nodes are left out (the caller compares the coupled nodes)."""
    E, (m, d) = len(edges), X.shape[1:]
    head, tail = edges[:, 0], edges[:, 1]
    deg = np.bincount(edges.ravel(), minlength=n_all)
    tau = c / np.maximum(deg, 1)
    sigma = 0.5 / c
    Q = np.einsum("kri,krj->kij", X, X) / m
    q = np.einsum("kri,kr->ki", X, y) / m
    A = np.eye(d) + 2 * tau[:, None, None] * Q
    W, U = np.zeros((n_all, d)), np.zeros((E, d))
    for _ in range(iters):
        DTu = np.zeros((n_all, d))
        np.add.at(DTu, head, U)
        np.add.at(DTu, tail, -U)
        V = W - tau[:, None] * DTu
        Wn = np.linalg.solve(A, (V + 2 * tau[:, None] * q)[..., None])[..., 0]
        Y = 2 * Wn - W
        arg = U + sigma * (Y[head] - Y[tail])
        nrm = np.linalg.norm(arg, axis=1)
        U = arg * (lam / np.maximum(nrm, lam))[:, None]
        W = Wn
    return W, U


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("d, m, iso", [(10, 5, 3), (4, 8, 2), (6, 3, 0)])
def test_iterates_equal_plain_loop(kernel, d, m, iso):
    """The package's iterates equal an independent numpy loop's to 1e-12 (m < d and m >= d,
    with and without isolated nodes, both edge kernels)."""
    n, E, lam, c, iters = 120, 600, 0.1, 0.7, 40
    edges, X, y = _instance(n, E, d, m, iso)
    model = gm.GTVModel.from_edges(n + iso, edges, dim=d, penalty=gm.Norm2(), lam=lam)
    model.set_data(X, y, "squared")
    res = gm.solve_primal_dual(model, max_iter=iters, tol=0, step=c, record_every=None,
                               kernel=kernel)
    W, U = _plain_loop(n + iso, edges, X, y, lam, c, iters)
    scale = max(1.0, float(np.abs(W).max()))
    assert np.abs(res.weights[:n] - W[:n]).max() <= 1e-12 * scale
    row = {(int(a), int(b)): k for k, (a, b) in enumerate(edges)}  # our rows, by edge
    perm = [row[(min(a, b), max(a, b))] for a, b in model.edges]
    assert np.abs(res.flows - U[perm]).max() <= 1e-12 * max(1.0, lam)


def _count_squared_data(monkeypatch) -> list[int]:
    """Count the eigen-decompositions of the squared batches' Gram matrices."""
    calls = [0]
    original = SquaredBatch._squared_data

    def counted(self):
        calls[0] += 1
        return original(self)
    monkeypatch.setattr(SquaredBatch, "_squared_data", counted)
    return calls


@pytest.mark.parametrize("kind", ["isolated", "constrained", "two classes"])
def test_setup_reused_across_calls(monkeypatch, kind):
    """Groups that are not a whole structure batch (isolated nodes beside the batch, nodes
    with a box, a second loss class) build their factorizations once per model version: a
    second call repeats no eigen-decomposition and gives the same iterates; a change of the
    data builds them again."""
    calls = _count_squared_data(monkeypatch)
    n, E, d, m = 60, 240, 4, 3
    iso = 2 if kind == "isolated" else 0
    edges, X, y = _instance(n, E, d, m, iso, seed=3)
    model = gm.GTVModel.from_edges(n + iso, edges, dim=d, penalty=gm.Norm2(), lam=0.1)
    model.set_data(X, y, "squared")
    if kind == "constrained":
        for i in range(5):
            model.add_constraint(i, gm.Box(-0.1, 0.1))
    elif kind == "two classes":
        for i in range(5):
            model.set_loss(i, gm.QuadraticLoss(np.ones(d)))
    first = gm.solve_primal_dual(model, max_iter=20, tol=0, record_every=None)
    assert calls[0] >= 1
    built = calls[0]
    second = gm.solve_primal_dual(model, max_iter=20, tol=0, record_every=None)
    assert calls[0] == built  # nothing factorized again
    np.testing.assert_array_equal(second.weights, first.weights)
    np.testing.assert_array_equal(second.flows, first.flows)
    model.set_loss(n - 1, gm.SquaredLoss(X[n - 1] * 2.0, y[n - 1]))  # a new model version
    gm.solve_primal_dual(model, max_iter=2, tol=0, record_every=None)
    assert calls[0] > built


def test_isolated_values_cached_and_private():
    """Isolated nodes' ``argmin L_i`` is solved once per model version; a run's weights are
    its own array (writing to them does not change the next run)."""
    edges, X, y = _instance(30, 90, 3, 5, 2, seed=5)
    model = gm.GTVModel.from_edges(32, edges, dim=3, penalty=gm.Norm2(), lam=0.1)
    model.set_data(X, y, "squared")
    first = gm.solve_primal_dual(model, max_iter=5, tol=0, record_every=None)
    expect = np.linalg.lstsq(X[31], y[31], rcond=None)[0]
    np.testing.assert_allclose(first.weights[31], expect, atol=1e-7)
    first.weights[30:] = 7.0
    second = gm.solve_primal_dual(model, max_iter=5, tol=0, record_every=None)
    np.testing.assert_allclose(second.weights[31], expect, atol=1e-7)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_edgeless_graph(backend):
    """A graph without edges: every node solves alone (``argmin L_i``), certified, on the
    numpy path and on the array backend (PyTorch's CPU build)."""
    if backend == "torch":
        pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    model = gm.GTVModel(nx.empty_graph(4), 2, penalty=gm.Norm2(), lam=1.0)
    sols = []
    for i in range(4):
        Xi, yi = rng.standard_normal((5, 2)), rng.standard_normal(5)
        model.set_loss(i, gm.SquaredLoss(Xi, yi))
        sols.append(np.linalg.lstsq(Xi, yi, rcond=None)[0])
    kwargs = {"device": "cpu"} if backend == "torch" else {}
    res = gm.solve_primal_dual(model, max_iter=10, tol=1e-8, **kwargs)
    assert res.status == "converged"
    assert res.flows.shape == (0, 2)
    np.testing.assert_allclose(res.weights, np.array(sols), atol=1e-7)
    assert 0.0 <= res.gap <= 1e-8 * max(1.0, abs(res.objective))


@pytest.mark.skipif(not _compiled.available(), reason="needs numba")
@pytest.mark.parametrize("penalty", [gm.Norm2(), gm.Norm1(), gm.SquaredNorm2()])
def test_pair_pass_equals_csr_pass(penalty):
    """The compiled edge pass on the endpoints (``pair_pass``; ``Norm2``'s edge by edge,
    ``l2_pair_pass``) gives the flows, the sums
    ``D^T u`` and the dual residual of the CSR pass (``edge_pass``) bit for bit, in place
    and not."""
    edges, _, _ = _instance(80, 400, 3, 2, 0, seed=7)
    model = gm.GTVModel.from_edges(80, edges, dim=3, penalty=penalty, lam=0.3)
    D, lamA = model.incidence, model.capacities
    row = penalty.compiled_dual_row(lamA, 3)
    pair = CompiledEdgeUpdates(D, penalty, lamA, 3, row)
    csr = CompiledEdgeUpdates(D, penalty, lamA, 3, row)
    assert pair._pass is (pair.kernels.l2_pair_pass if isinstance(penalty, gm.Norm2)
                          else pair.kernels.pair_pass)
    csr._pass, csr._ends = csr.kernels.edge_pass, csr._csr
    rng = np.random.default_rng(1)
    Y, W, Wn = (rng.standard_normal((80, 3)) for _ in range(3))
    U = 0.2 * rng.standard_normal((len(edges), 3))
    sigma = rng.uniform(0.2, 2.0, len(edges))
    a = pair(Y, U, sigma, sigma[:, None], np.empty_like(U), W, Wn)
    b = csr(Y, U, sigma, sigma[:, None], np.empty_like(U), W, Wn)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(pair.node_sums(a), csr.node_sums(b))
    assert pair.dual_residual == csr.dual_residual
    U1, U2 = U.copy(), U.copy()
    np.testing.assert_array_equal(pair(Y, U1, sigma, sigma[:, None], U1),
                                  csr(Y, U2, sigma, sigma[:, None], U2))
