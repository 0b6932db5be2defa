"""Algorithm 1's vectorized iteration (issue 16 item 5: the edge update fused, block by block,
into reused arrays) against a plain loop of (32)/(33) written here with numpy and scipy."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import gtvmodel as gm
from gtvmodel.primal_dual import updates

C, ITERS = 0.8, 60


def _model(seed: int = 0) -> gm.GTVModel:
    """Squared losses (m = 5 >= d = 3) on a random graph of 30 nodes, Norm2, weighted edges."""
    rng = np.random.default_rng(seed)
    G = nx.gnm_random_graph(30, 90, seed=seed)
    for a, b in G.edges:
        G.edges[a, b]["weight"] = float(rng.uniform(0.2, 2.0))
    model = gm.GTVModel(G, 3, penalty=gm.Norm2(), lam=0.4)
    for v in G.nodes:
        X = rng.standard_normal((5, 3))
        model.set_loss(v, gm.SquaredLoss(X, X @ rng.standard_normal(3)))
    return model


def _plain_loop(model: gm.GTVModel, iters: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Algorithm 1 by hand: ``tau_i = c/deg(i)``, ``sigma = 1/(2c)``; PU (32) of ``(1/m)||X w -
    y||^2`` by a linear solve, DU (33) of ``Norm2`` the projection onto ``||u_e|| <= lambda
    A_e``.  Returns the iterates ``(w^k, u^k)``, ``k = 0..iters``."""
    n, d, E = model.num_nodes, model.dim, model.num_edges
    heads, tails = model.edges[:, 0], model.edges[:, 1]
    rows = np.repeat(np.arange(E), 2)
    D = sp.csr_matrix((np.tile([1.0, -1.0], E), (rows, np.column_stack([heads, tails]).ravel())),
                      shape=(E, n))
    deg = np.bincount(np.concatenate([heads, tails]), minlength=n)
    tau, sigma = C / np.maximum(deg, 1), 0.5 / C
    caps = model.lam * model.edge_weights
    W, U = np.zeros((n, d)), np.zeros((E, d))
    out = [(W, U)]
    for _ in range(iters):
        V = W - tau[:, None] * (D.T @ U)
        W_new = np.empty_like(W)
        for i in range(n):
            loss = model.loss_at(i)
            A = np.eye(d) + 2 * tau[i] / loss.m * loss.X.T @ loss.X
            W_new[i] = np.linalg.solve(A, V[i] + 2 * tau[i] / loss.m * loss.X.T @ loss.y)
        Z = U + sigma * (2 * (D @ W_new) - D @ W)
        nrm = np.linalg.norm(Z, axis=1)
        U = Z * np.minimum(1.0, caps / np.maximum(nrm, 1e-300))[:, None]
        W = W_new
        out.append((W, U))
    return out


@pytest.fixture(scope="module")
def model_and_plain():
    model = _model()
    return model, _plain_loop(model, ITERS)


@pytest.mark.parametrize("block_bytes", [None, 8 * 3 * 7])  # whole / blocks of 7 edges
def test_iterates_and_residuals_equal_a_plain_loop(model_and_plain, monkeypatch, block_bytes):
    model, plain = model_and_plain
    if block_bytes is not None:
        monkeypatch.setattr(updates, "EDGE_BLOCK_BYTES", block_bytes)
    res = model.solve_primal_dual(max_iter=ITERS, tol=0, step=C, record_every=ITERS)
    W, U = plain[-1]
    np.testing.assert_allclose(res.weights, W, rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.flows, U, rtol=0, atol=1e-12)
    # the residuals of the step rule / history (steps.residuals) from the last two iterates
    (W0, U0), (W1, U1) = plain[-2], plain[-1]
    tau = C / np.maximum(model.degrees, 1)[:, None]
    D = model.incidence
    p = np.linalg.norm((W0 - W1) / tau - D.T @ (U0 - U1))
    d = np.linalg.norm((U0 - U1) * 2 * C - D @ (W0 - W1))
    assert res.history.primal_residual[-1] == pytest.approx(p, rel=1e-9)
    assert res.history.dual_residual[-1] == pytest.approx(d, rel=1e-9)


def test_blocks_do_not_change_the_flows(model_and_plain, monkeypatch):
    """The flows of a block-by-block edge update equal those of one block bitwise."""
    model, _ = model_and_plain
    whole = model.solve_primal_dual(max_iter=25, tol=0, record_every=None)
    assert len(updates.EdgeUpdates(model.incidence, model.penalty, model.capacities,
                                   model.dim).blocks) == 1
    monkeypatch.setattr(updates, "EDGE_BLOCK_BYTES", 8 * 3 * 4)
    assert len(updates.EdgeUpdates(model.incidence, model.penalty, model.capacities,
                                   model.dim).blocks) == -(-model.num_edges // 4)
    blocked = model.solve_primal_dual(max_iter=25, tol=0, record_every=None)
    np.testing.assert_array_equal(blocked.flows, whole.flows)
    np.testing.assert_array_equal(blocked.weights, whole.weights)


def test_arrays_handed_out_are_never_overwritten(model_and_plain):
    """The flows' arrays are reused between iterations only when nobody saw them: what a
    callback received and what a certificate read keep their values."""
    model, plain = model_and_plain
    seen = []

    def keep(k, W, U):
        seen.append((U, U.copy()))

    model.solve_primal_dual(max_iter=12, tol=0, step=C, callback=keep, record_every=None)
    assert len({id(U) for U, _ in seen}) == 12
    for U, copy in seen:
        np.testing.assert_array_equal(U, copy)
    certified = []
    original = gm.primal_dual.loop.Run.certificate

    def spy(run):
        certified.append((run.x.U, run.x.U.copy()))
        return original(run)

    mp = pytest.MonkeyPatch()
    mp.setattr(gm.primal_dual.loop.Run, "certificate", spy)
    try:
        res = model.solve_primal_dual(max_iter=ITERS, tol=0, step=C, record_every=3,
                                      certificate_budget=None)
    finally:
        mp.undo()
    assert len(certified) == ITERS // 3
    for U, copy in certified:
        np.testing.assert_array_equal(U, copy)
    np.testing.assert_allclose(res.flows, plain[-1][1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("penalty", [gm.Norm2(), gm.Norm1(), gm.SquaredNorm2(), gm.NormP(3.0)])
@pytest.mark.parametrize("uniform", [True, False])
def test_edge_updates_equal_the_whole_array_dual_update(penalty, uniform):
    """``EdgeUpdates`` (block by block, each block's DU by ``Penalty.dual_updater`` written
    into the flows: for ``Norm2`` the preallocated projection; serial and on 2 threads) gives
    the flows of the penalty's ``dual_update`` on the whole arrays, and ``D^T u``, bit for bit,
    with equal and with per-edge steps."""
    rng = np.random.default_rng(1)
    model = _model(2)
    model.penalty = penalty
    E, d = model.num_edges, model.dim
    Y = rng.standard_normal((model.num_nodes, d))
    U = rng.standard_normal((E, d)) * 0.3
    sigma = np.full(E, 0.7) if uniform else rng.uniform(0.2, 1.0, E)
    want = updates.dual_update(penalty, U, model.incidence @ Y, sigma, sigma[:, None],
                               model.capacities)
    for block_bytes, threads in ((None, 1), (8 * 3 * 5, 1), (8 * 3 * 5, 2)):
        edges = updates.EdgeUpdates(model.incidence, penalty, model.capacities, d, block_bytes,
                                    threads=threads)
        out = np.full((E, d), np.nan)
        got = edges(Y, U, sigma, sigma[:, None], out)
        assert got is out
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(edges.node_sums(got), model.incidence.T @ want)
        edges.close()


def test_threads_give_the_same_iterates(model_and_plain, monkeypatch):
    """``threads=2`` and ``3`` (the blocks and the rows of ``D^T`` on a pool) give the serial
    run's iterates bit for bit, with blocks of 4 edges and the default rule's step changes;
    the pool is shut down after the run; ``threads`` is checked and belongs to the numpy
    path."""
    model, _ = model_and_plain
    monkeypatch.setattr(updates, "EDGE_BLOCK_BYTES", 8 * 3 * 4)
    serial = model.solve_primal_dual(max_iter=40, tol=0, record_every=20)
    closed = []
    original = updates.EdgeUpdates.close

    def spy(self):
        closed.append(self._pool is not None)
        original(self)

    monkeypatch.setattr(updates.EdgeUpdates, "close", spy)
    for threads in (2, 3):
        res = model.solve_primal_dual(max_iter=40, tol=0, record_every=20, threads=threads)
        np.testing.assert_array_equal(res.weights, serial.weights)
        np.testing.assert_array_equal(res.flows, serial.flows)
        np.testing.assert_array_equal(res.history.gap, serial.history.gap)
    assert closed == [True, True]
    with pytest.raises(gm.ParameterError, match="threads"):
        model.solve_primal_dual(max_iter=2, threads=0)
    with pytest.raises(gm.ParameterError, match="threads"):
        model.solve_primal_dual(max_iter=2, threads=2, backend="dask")


def test_threads_without_edges():
    """``threads=2`` on a graph without edges (no blocks to split) gives the serial run."""
    G = nx.empty_graph(3)
    model = gm.GTVModel(G, 2, penalty=gm.Norm2(), lam=1.0)
    for v in G.nodes:
        model.set_loss(v, gm.QuadraticLoss([1.0, float(v)]))
    res = model.solve_primal_dual(max_iter=5, tol=0, threads=2)
    np.testing.assert_array_equal(res.weights, [[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])
    assert res.flows.shape == (0, 2)
