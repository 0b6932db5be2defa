"""Algorithm 1's compiled node pass and in-place edge pass (issue 30 item 1): with
``kernel="numba"`` the squared-loss nodes take PU (32) and ``Y = 2 w^{k+1} - w^k`` in one
compiled pass (:class:`gtvmodel.primal_dual.compiled.CompiledNodeUpdates`) and the flows are
updated in place.  Whole runs against a plain loop of (32)/(33) written here (squared losses
with ``m_i < d`` and ``m_i >= d``, quadratic losses beside them, isolated nodes), against the
numpy path (step rule, residuals, certificates), arrays handed to a callback never written
afterwards, and rows the edge kernel declines.  Skipped without numba."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import gtvmodel as gm
from gtvmodel.primal_dual import compiled
from gtvmodel.primal_dual.compiled import CompiledNodeUpdates, edge_order
from gtvmodel.primal_dual.prox import NodeUpdates

pytest.importorskip("numba")

NUMBA = gm.NumpyBackend(kernel="numba")


@pytest.fixture(params=["model order", "tail blocks", "large blocks"])
def blocks(request, monkeypatch):
    """The compiled pass's own edge order: trivial at these sizes (one block of tails), or
    with blocks of 3 nodes (``TAIL_BLOCK_BYTES`` made small), so the flows are reordered; or
    the large graphs' blocks (every graph counted large), of 6 nodes."""
    if request.param != "model order":
        monkeypatch.setattr(compiled, "TAIL_BLOCK_BYTES", 3 * 16 * 4)
    if request.param == "large blocks":
        monkeypatch.setattr(compiled, "LARGE_NODE_BYTES", 0)
        monkeypatch.setattr(compiled, "LARGE_TAIL_BLOCK_BYTES", 6 * 16 * 4)
    return request.param


def _model(seed: int, d: int = 4, weights: tuple[float, float] = (0.2, 3.0)
           ) -> tuple[gm.GTVModel, dict]:
    """Squared losses (``m_i`` from 2 to 6 around ``d = 4``) on a random graph, quadratic
    losses at every fifth node, three isolated nodes (squared with ``m_i > d``: a unique
    ``argmin``), ``Norm2``, weighted edges."""
    rng = np.random.default_rng(seed)
    G = nx.gnm_random_graph(30, 80, seed=seed)
    G.add_nodes_from(range(30, 33))
    for a, b in G.edges:
        G.edges[a, b]["weight"] = float(rng.uniform(*weights))
    model = gm.GTVModel(G, d, penalty=gm.Norm2(), lam=0.4)
    data = {}
    for v in G.nodes:
        if v % 5 == 0 and v < 30:
            a = rng.standard_normal(d)
            model.set_loss(v, gm.QuadraticLoss(a))
            data[v] = ("quadratic", a)
        else:
            m = 6 if v >= 30 else int(rng.integers(2, 7))
            X, y = rng.standard_normal((m, d)), rng.standard_normal(m)
            model.set_loss(v, gm.SquaredLoss(X, y))
            data[v] = ("squared", X, y)
    return model, data


def _plain_loop(model: gm.GTVModel, data: dict, tau: np.ndarray, sigma: np.ndarray,
                iters: int) -> tuple[np.ndarray, np.ndarray]:
    """(32)/(33) by hand: ``(1/m)||y - X w||^2``: ``w = (I + 2 tau Q)^{-1} (v + 2 tau q)``,
    ``Q = X^T X / m``, ``q = X^T y / m``; ``||w - a||^2``: ``(v + 2 tau a) / (1 + 2 tau)``;
    isolated nodes ``argmin L_i`` (least squares); DU of ``Norm2`` the projection."""
    n, d, E = model.num_nodes, model.dim, model.num_edges
    pairs = np.asarray(model.edges)
    D = sp.csr_matrix((np.tile([1.0, -1.0], E), (np.repeat(np.arange(E), 2), pairs.ravel())),
                      shape=(E, n))
    caps = model.lam * model.edge_weights
    deg = np.asarray(abs(D).sum(axis=0)).ravel()
    W, U = np.zeros((n, d)), np.zeros((E, d))
    for _ in range(iters):
        V = W - tau[:, None] * (D.T @ U)
        W_new = np.empty_like(W)
        for i, node in enumerate(model.nodes):
            kind, *arr = data[node]
            if kind == "quadratic":
                W_new[i] = (V[i] + 2 * tau[i] * arr[0]) / (1 + 2 * tau[i])
            elif deg[i] == 0:
                W_new[i] = np.linalg.lstsq(arr[0], arr[1], rcond=None)[0]
            else:
                X, y = arr
                m = len(y)
                W_new[i] = np.linalg.solve(np.eye(d) + 2 * tau[i] * X.T @ X / m,
                                           V[i] + 2 * tau[i] * X.T @ y / m)
        Z = U + sigma[:, None] * (D @ (2 * W_new - W))
        nrm = np.linalg.norm(Z, axis=1)
        U = Z * np.minimum(1.0, caps / np.maximum(nrm, 1e-300))[:, None]
        W = W_new
    return W, U


def test_iterates_equal_a_plain_loop(blocks):
    """50 iterations, uneven steps: the compiled node pass (squared nodes), the quadratic and
    isolated groups beside it and the in-place edge pass give the plain loop's iterates to
    1e-12, and the numpy path's."""
    model, data = _model(0)
    rng = np.random.default_rng(1)
    c = 0.8
    tau = c / np.maximum(model.degrees, 1)
    sigma = rng.uniform(0.3, 1.0, model.num_edges) * 0.5 / c
    fast = gm.solve_primal_dual(model, max_iter=50, tol=0, record_every=None,
                                step=(tau, sigma), backend=NUMBA)
    slow = gm.solve_primal_dual(model, max_iter=50, tol=0, record_every=None,
                                step=(tau, sigma), backend=gm.NumpyBackend(kernel="numpy"))
    assert fast.kernel == "numba" and fast.paths["squared"] == 24
    W, U = _plain_loop(model, data, tau, sigma, 50)
    scale = max(1.0, np.abs(W).max(), np.abs(U).max())
    for r in (fast, slow):
        assert np.abs(r.weights - W).max() <= 1e-12 * scale
        assert np.abs(r.flows - U).max() <= 1e-12 * scale
    nrm = np.linalg.norm(U, axis=1)
    caps = model.lam * model.edge_weights
    assert 0 < np.sum(nrm >= caps * (1 - 1e-9)) < model.num_edges  # edges at and below capacity


def test_step_rule_residuals_and_certificates_equal_the_numpy_path(blocks):
    """The default step rule (residual balancing) with certificates every 10 iterations: the
    same history (residuals folded into the passes, step scales, gaps) and iterates as the
    numpy path; the final certificate is that of the returned iterate."""
    model, _ = _model(2)
    runs = {k: gm.solve_primal_dual(model, max_iter=60, tol=0, record_every=10,
                                    backend=gm.NumpyBackend(kernel=k))
            for k in ("numpy", "numba")}
    a, b = runs["numpy"], runs["numba"]
    for col in ("primal_residual", "dual_residual", "gap", "c"):
        np.testing.assert_allclose(getattr(b.history, col), getattr(a.history, col),
                                   rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(b.weights, a.weights, rtol=0, atol=1e-12)
    np.testing.assert_allclose(b.flows, a.flows, rtol=0, atol=1e-12)
    again = gm.certify(model, b.weights, b.flows, fallback=False)
    assert again.gap == pytest.approx(b.certificate.gap, rel=1e-9, abs=1e-12)


def test_arrays_handed_to_a_callback_are_never_written_again(blocks):
    """A callback keeps every ``(w^k, u^k)`` it was given: none changes afterwards."""
    model, _ = _model(3)
    seen, copies = [], []

    def keep(k, W, U):
        seen.append((W, U))
        copies.append((W.copy(), U.copy()))

    r = gm.solve_primal_dual(model, max_iter=12, tol=0, record_every=None, callback=keep,
                             backend=NUMBA)
    assert len(seen) == 12 and r.kernel == "numba"
    for (W, U), (Wc, Uc) in zip(seen, copies, strict=True):
        assert np.array_equal(W, Wc) and np.array_equal(U, Uc)
    assert np.array_equal(r.weights, copies[-1][0]) and np.array_equal(r.flows, copies[-1][1])


def test_declined_rows_keep_the_dual_residual_in_place(blocks):
    """Capacities below the kernel's proven range (``lambda A_e < 2^-900``) take the numpy
    DU; with the flows updated in place their dual-residual rows come from the argument of DU:
    the same residuals and iterates as the numpy path."""
    model, _ = _model(4, weights=(1e-290, 1e-288))
    runs = {k: gm.solve_primal_dual(model, max_iter=30, tol=0, record_every=5, step=1.0,
                                    backend=gm.NumpyBackend(kernel=k))
            for k in ("numpy", "numba")}
    a, b = runs["numpy"], runs["numba"]
    assert np.all(a.history.dual_residual > 0)
    np.testing.assert_allclose(b.history.dual_residual, a.history.dual_residual, rtol=1e-9)
    np.testing.assert_allclose(b.weights, a.weights, rtol=0, atol=1e-12)
    np.testing.assert_allclose(b.flows, a.flows, rtol=0, atol=1e-300)


def test_compiled_node_updates_count_non_finite_rows():
    """The compiled node pass reports nodes whose ``w^{k+1}`` is not finite (the run then
    raises naming them); only groups with an affine update are compiled."""
    model, _ = _model(5)
    updates = NodeUpdates(model)
    nodes = CompiledNodeUpdates.make(updates)
    assert nodes is not None and len(nodes.affine) == 1 and len(nodes.other) == 2
    n, d = model.num_nodes, model.dim
    tau = 0.5 / np.maximum(model.degrees, 1)
    updates.prepare(tau)
    W, DTu = np.zeros((n, d)), np.zeros((n, d))
    i = int(nodes.affine[0][0][3])
    W[i, 1] = np.nan
    W_new, Y = np.empty((n, d)), np.empty((n, d))
    assert nodes(W, DTu, tau, tau[:, None], 0, W_new, Y) == 1
    assert not np.isfinite(W_new[i]).all() and np.isfinite(np.delete(W_new, i, 0)).all()
    np.testing.assert_array_equal(Y[np.arange(n) != i], 2 * W_new[np.arange(n) != i])


def test_tail_blocks_and_warm_starts(blocks):
    """The order of :func:`edge_order` (blocks of tails, heads inside) is a permutation;
    20 + 20 iterations from a warm start (model-order flows in, model-order flows out)
    equal 40 at once, and the kernel's order changes nothing in the result's flows."""
    model, _ = _model(6)
    pairs = np.asarray(model.incidence.indices).reshape(-1, 2)
    order = edge_order(pairs[:, 0], pairs[:, 1], model.num_nodes, model.dim)
    assert (order is None) == (blocks == "model order")  # one block of tails: no reordering
    if order is not None:
        assert np.array_equal(np.sort(order), np.arange(model.num_edges))
        size = 6 if blocks == "large blocks" else 3
        tails = pairs[order, 1] // size
        assert np.all(np.diff(tails) >= 0) and np.any(np.diff(pairs[order, 1] // 3) < 0) \
            == (size == 6)
        assert not np.array_equal(order, np.arange(model.num_edges))
    run = {"step": 0.9, "tol": 0, "record_every": None, "backend": NUMBA}
    first = gm.solve_primal_dual(model, max_iter=20, **run)
    second = gm.solve_primal_dual(model, max_iter=20, warm_start=first, **run)
    once = gm.solve_primal_dual(model, max_iter=40, **run)
    ref = gm.solve_primal_dual(model, max_iter=40, step=0.9, tol=0, record_every=None,
                               backend=gm.NumpyBackend(kernel="numpy"))
    for r in (second, once):
        np.testing.assert_allclose(r.weights, ref.weights, rtol=0, atol=1e-12)
        np.testing.assert_allclose(r.flows, ref.flows, rtol=0, atol=1e-12)


@pytest.mark.parametrize("residual", [False, True])
def test_norm2_pass_edge_by_edge_equals_the_block_pass(residual):
    """``l2_pair_pass`` (``Norm2`` edge by edge, the projection written into it) gives
    ``pair_pass``'s flows, sums, declined rows and residual bit for bit: rows on, just inside
    and just outside the ball at scales 1e-150 ... 1e150, zero rows, NaN and overflowing
    rows, radii below the kernel's range; in place (``out`` is ``U``)."""
    from gtvmodel import _compiled
    from gtvmodel._norms import EPS

    rng = np.random.default_rng(7)
    rows, radii = [], []
    for scale in (1e-150, 1e-20, 1.0, 1e20, 1e150):
        for factor in (1 - 8 * EPS, 1 - EPS, 1.0, 1 + EPS, 1 + 4 * EPS, 3.0, 0.3):
            v = rng.standard_normal(5)
            r = scale * rng.uniform(0.5, 2.0)
            rows.append(v / np.linalg.norm(v) * r * factor)
            radii.append(r)
    rows += [np.zeros(5), np.full(5, np.nan), np.full(5, 1e200), rng.standard_normal(5)]
    radii += [1.0, 1.0, 1.0, 1e-300]
    U0, r = np.array(rows), np.array(radii)
    E, n, d = len(U0), 12, 5
    heads = rng.integers(0, n // 2, E).astype(np.int32)
    tails = rng.integers(n // 2, n, E).astype(np.int32)
    Y, dW = 1e-3 * rng.standard_normal((n, d)), rng.standard_normal((n, d))
    sigma = rng.uniform(0.1, 1.0, E)
    params = gm.Norm2().compiled_dual_row(r, d)
    kern = _compiled.kernels()
    got = []
    for kernel in (kern.pair_pass, kern.l2_pair_pass):
        U, DTu, fl = U0.copy(), np.empty((n, d)), np.empty(E, dtype=np.int64)
        nf, rsq = kernel(heads, tails, Y, U, sigma, U, params, 0, E, DTu, True, fl, dW,
                         residual)
        got.append((U, DTu, fl[:nf], rsq))
    (U1, S1, f1, r1), (U2, S2, f2, r2) = got
    assert f1.size >= 3 and np.array_equal(f1, f2)
    assert np.array_equal(U1, U2, equal_nan=True) and np.array_equal(S1, S2, equal_nan=True)
    assert r1 == r2 or (np.isnan(r1) and np.isnan(r2))


def test_rows_back_in_the_model_order():
    """``gather_rows`` and the in-place ``unpermute_rows`` give ``U[index]`` for a random
    permutation (long and short cycles, fixed points)."""
    from gtvmodel import _compiled

    rng = np.random.default_rng(8)
    kern = _compiled.kernels()
    for E in (1, 2, 57):
        U = rng.standard_normal((E, 3))
        index = rng.permutation(E).astype(np.int32)
        out = np.empty_like(U)
        kern.gather_rows(index, U, out)
        np.testing.assert_array_equal(out, U[index])
        V = U.copy()
        kern.unpermute_rows(index, V, np.zeros(E, dtype=bool))
        np.testing.assert_array_equal(V, U[index])


def _uniform_model(seed: int, m: int, d: int = 6, l2: float = 0.0, isolated: bool = True
                   ) -> tuple[gm.GTVModel, dict]:
    """``set_data`` squared losses with ``m`` samples at every node, ``l2`` (``kappa``), with
    ``isolated`` two isolated nodes (``m > d`` there: a unique ``argmin``), ``Norm2``."""
    rng = np.random.default_rng(seed)
    n = 40
    G = nx.gnm_random_graph(n, 120, seed=seed)
    nx.add_path(G, range(n))  # (no isolated node with m < d: its argmin is not unique)
    G.add_nodes_from(range(n, n + 2 * isolated))
    model = gm.GTVModel(G, d, penalty=gm.Norm2(), lam=0.3)
    X, y = rng.standard_normal((n, m, d)), rng.standard_normal((n, m))
    model.set_data(X.reshape(-1, d), y.reshape(-1), "squared", l2=l2,
                   node_index=np.repeat(np.arange(n), m))
    data = {v: ("squared", X[v], y[v], l2) for v in range(n)}
    for v in range(n, n + 2 * isolated):
        Xi, yi = rng.standard_normal((d + 2, d)), rng.standard_normal(d + 2)
        model.set_loss(v, gm.SquaredLoss(Xi, yi, l2=l2))
        data[v] = ("squared", Xi, yi, l2)
    return model, data


@pytest.mark.parametrize("m, l2", [(3, 0.0), (3, 0.7), (1, 0.0), (9, 0.2)])
def test_sample_operator_iterates_equal_a_plain_loop(m, l2):
    """Every node ``m_i < d`` (the operator from the samples by Woodbury's identity, also
    ``m = 1``) or ``m_i > d`` (the ``d x d`` operator), with ``kappa``: 40 iterations at
    uneven steps equal a plain loop of (32)/(33) written here to 1e-12; the ``m < d`` run
    computes no Gram matrix or eigen-decomposition, and a second call with the same steps
    reuses the operator (no set-up of it)."""
    model, data = _uniform_model(10 + m, m, l2=l2)
    n, d, E = model.num_nodes, model.dim, model.num_edges
    rng = np.random.default_rng(2)
    tau = 0.7 / np.maximum(model.degrees, 1) * rng.uniform(0.5, 1.0, n)
    sigma = rng.uniform(0.3, 1.0, E) * 0.5 / 0.7
    r = gm.solve_primal_dual(model, max_iter=40, tol=0, record_every=None, step=(tau, sigma),
                             backend=NUMBA)
    pairs = np.asarray(model.edges)
    D = sp.csr_matrix((np.tile([1.0, -1.0], E), (np.repeat(np.arange(E), 2), pairs.ravel())),
                      shape=(E, n))
    caps = model.lam * model.edge_weights
    W, U = np.zeros((n, d)), np.zeros((E, d))
    for _ in range(40):
        V = W - tau[:, None] * (D.T @ U)
        W_new = np.empty_like(W)
        for i in range(n):
            _, X, y, kap = data[i]
            if model.degrees[i] == 0:
                W_new[i] = np.linalg.solve(X.T @ X / len(y) + kap * np.eye(d), X.T @ y / len(y))
            else:
                W_new[i] = np.linalg.solve((1 + 2 * tau[i] * kap) * np.eye(d)
                                           + 2 * tau[i] * X.T @ X / len(y),
                                           V[i] + 2 * tau[i] * X.T @ y / len(y))
        Z = U + sigma[:, None] * (D @ (2 * W_new - W))
        U = Z * np.minimum(1.0, caps / np.maximum(np.linalg.norm(Z, axis=1), 1e-300))[:, None]
        W = W_new
    scale = max(1.0, np.abs(W).max(), np.abs(U).max())
    assert np.abs(r.weights - W).max() <= 1e-12 * scale
    assert np.abs(r.flows - U).max() <= 1e-12 * scale
    batch = next(g for g in NodeUpdates(model).groups if g.kind == "squared").batch
    if m < d:  # neither Q_i nor its eigen-decomposition: the samples and K_i only
        assert not {"gram", "squared", "gram_eigh"} & set(batch._shared)
        ops = batch._shared["affine_operators"][1]
        assert [type(op).__name__ for op in ops] == ["SampleOperator"]
        assert ops[0].X is batch.Xs and ops[0].K.size == ops[0].local.size * m * m
    again = gm.solve_primal_dual(model, max_iter=40, tol=0, record_every=None,
                                 step=(tau, sigma), backend=NUMBA)
    assert batch._shared["affine_operators"][1] is ops if m < d else True
    np.testing.assert_array_equal(again.weights, r.weights)


def test_set_data_samples_stacked_once():
    """The squared batch's stacked samples are a read-only view of ``set_data``'s stack (no
    second copy), equal to the losses' own; separately given losses are stacked."""
    model, data = _uniform_model(30, 3, isolated=False)
    batch = next(b for b in model.structure().batches if b.kind == "squared")
    X = np.concatenate([data[v][1] for v in range(model.num_nodes)])
    np.testing.assert_array_equal(batch.Xs, X)
    assert not batch.Xs.flags.owndata and not batch.Xs.flags.writeable
    np.testing.assert_array_equal(batch.y, np.concatenate([data[v][2] for v in
                                                           range(model.num_nodes)]))
    n, d = model.num_nodes, model.dim  # X_blk: row r holds x_r in the columns of its node
    cols = batch.row_node[:, None] * d + np.arange(d)
    ref = sp.csr_matrix((X.ravel(), (np.repeat(np.arange(len(X)), d), cols.ravel())),
                        shape=(len(X), n * d))
    assert (batch.X_blk != ref).nnz == 0
    model.set_loss(3, gm.SquaredLoss(data[3][1].copy(), data[3][2].copy()))  # not a view
    model.set_loss(7, gm.SquaredLoss(data[8][1], data[8][2]))  # a view, out of order
    X[3 * 3:4 * 3], X[7 * 3:8 * 3] = data[3][1], data[8][1]
    again = next(b for b in model.structure().batches if b.kind == "squared")
    assert again.Xs.flags.owndata  # stacked anew
    np.testing.assert_array_equal(again.Xs, X)


def test_a_run_leaves_no_reference_cycle():
    """Nothing of a finished run is kept alive by a reference cycle (which only the cyclic
    collector frees, late: at 10^5 nodes each call's arrays accumulated, 137 MiB per call):
    with the collector off during a run, a collection afterwards finds no run object."""
    import gc

    from gtvmodel.primal_dual.compiled import CompiledEdgeUpdates
    from gtvmodel.primal_dual.loop import Run

    model, _ = _model(7)
    gm.solve_primal_dual(model, max_iter=3, tol=0, record_every=None, backend=NUMBA)
    gc.collect()
    gc.disable()
    try:
        gm.solve_primal_dual(model, max_iter=3, tol=0, record_every=None, backend=NUMBA)
        gm.solve_primal_dual(model, max_iter=3, tol=0, record_every=2, backend=NUMBA)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        kept = [o for o in gc.garbage if isinstance(o, (Run, CompiledEdgeUpdates,
                                                         CompiledNodeUpdates))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert kept == []
