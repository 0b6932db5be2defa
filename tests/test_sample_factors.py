"""The cached node factors of the squared-loss batch (issue 30 item 3, memory): one
factorization per node (the samples' SVD where ``m_i < d`` or ``Q_i`` is ill-conditioned, the
eigen-decomposition of the formed ``Q_i`` elsewhere), shared without copies by the prox, the
conjugate split and the node classification; the null-space bases as views of it."""

from __future__ import annotations

import numpy as np

import gtvmodel as gm
from gtvmodel.certificates.kinds import node_kinds


def _model(ms: list[int], d: int = 6, seed: int = 0, ill: bool = False) -> gm.GTVModel:
    rng = np.random.default_rng(seed)
    n = len(ms)
    edges = [(i, (i + 1) % n) for i in range(n)]
    model = gm.GTVModel.from_edges(n, np.array(edges), dim=d, penalty=gm.Norm2(), lam=0.5)
    for i, m in enumerate(ms):
        X = rng.standard_normal((m, d)) * 10.0 ** rng.uniform(-2, 2)
        if ill and i % 2 and m >= d:
            X[:, -1] = X[:, 0] * (1 + 1e-9)  # Gram ratio about 1e-19: resolved by the SVD
        model.set_loss(i, gm.SquaredLoss(X, rng.standard_normal(m)))
    return model


def _samples(model: gm.GTVModel, j: int) -> np.ndarray:
    (b,) = model.structure().batches
    return b.Xs[b.starts[j]:b.starts[j] + b.ms[j]]


def test_rank_deficient_nodes_take_the_samples_svd_alone():
    model = _model([2, 3, 5, 4, 1, 3])
    (b,) = model.structure().batches
    e, V = b.sample_svd()
    data = b.squared_data()
    assert e is data["e"] and V is data["B"]  # the same arrays: no copy
    assert "gram" not in b._shared  # every m_i < d: no Gram matrix formed
    for j in range(b.ms.size):
        X = _samples(model, j)
        m = X.shape[0]
        _, sv, Vh = np.linalg.svd(X, full_matrices=True)  # numpy's SVD of the samples
        assert np.array_equal(e[j, :6 - m], np.zeros(6 - m))
        assert np.array_equal(e[j, 6 - m:], sv[::-1] ** 2 / m)
        assert np.array_equal(V[j], Vh.T[:, ::-1])
        Q = X.T @ X / m
        assert np.allclose(V[j] @ np.diag(e[j]) @ V[j].T, Q, rtol=0, atol=1e-14 * e[j, -1])


def test_well_conditioned_nodes_keep_the_eigen_decomposition():
    model = _model([8, 2, 9, 12, 4, 7, 10, 11], ill=True)
    (b,) = model.structure().batches
    e, V = b.sample_svd()
    G = np.stack([_samples(model, j).T @ _samples(model, j) for j in range(b.ms.size)])
    ee, VV = np.linalg.eigh(b.gram() / b.ms[:, None, None])
    ill = (b.ms < 6) | (np.arange(b.ms.size) % 2 == 1)
    assert np.array_equal(e[~ill], ee[~ill]) and np.array_equal(V[~ill], VV[~ill])
    for j in np.flatnonzero(ill):
        X = _samples(model, j)
        m = X.shape[0]
        R = np.linalg.qr(X, mode="r") if m > 6 else X
        _, sv, Vh = np.linalg.svd(R, full_matrices=True)
        assert np.array_equal(e[j, 6 - sv.size:], sv[::-1] ** 2 / m)
        assert np.array_equal(V[j], Vh.T[:, ::-1])
        assert np.allclose(V[j] @ np.diag(e[j]) @ V[j].T, G[j] / m, rtol=0,
                           atol=1e-13 * e[j, -1])
    # the split is the one the old copy-and-resolve path made: only the ill nodes resolved
    assert np.all(ee[~ill, 0] > b.SVD_RTOL * ee[~ill, -1])
    assert np.all(e[ill, 0] <= 1e-15 * e[ill, -1])


def test_null_space_bases_are_views_of_the_factors():
    model = _model([3, 2, 4, 3, 5, 1])  # widths differ: a list of views
    (b,) = model.structure().batches
    e, V = b.sample_svd()
    kinds = node_kinds(model)
    assert kinds.subspace.tolist() == list(range(6))
    for j, N in enumerate(kinds.subspace_bases):
        r = 6 - b.ms[j]
        assert N.shape == (6, r) and np.shares_memory(N, V)
        assert np.array_equal(N, V[j][:, :r])
        assert np.abs(_samples(model, j) @ N).max() <= 1e-13 * np.abs(_samples(model, j)).max()


def test_conjugate_group_reads_the_stacked_rows_without_copies():
    model = _model([3, 2, 4])
    (b,) = model.structure().batches
    grp = b.conjugate_group(np.ones(3, dtype=bool))
    host = grp.evaluate.args[0]
    assert host["X"] is b.Xs and host["y"] is b.y and host["c"] is b.c
    assert np.array_equal(host["rn"], np.repeat(np.arange(3), b.ms))
    part = b.conjugate_group(np.array([True, False, True]))
    rows = np.r_[0:3, 5:9]
    assert np.array_equal(part.evaluate.args[0]["X"], b.Xs[rows])


def test_one_width_bases_are_one_strided_view():
    model = _model([3] * 6)
    (b,) = model.structure().batches
    V = b.sample_svd()[1]
    N = node_kinds(model).subspace_bases
    assert isinstance(N, np.ndarray) and N.shape == (6, 6, 3) and np.shares_memory(N, V)
    assert np.array_equal(N, V[:, :, :3])
