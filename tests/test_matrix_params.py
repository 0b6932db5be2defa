"""Matrix-valued node parameters ``dim=(p, q)`` (docs/matrix_parameters.md): the flat model on
``w_i = vec(W_i)`` (row-major) against an independent CVXPY problem in ``(p, q)`` matrix
variables written here, certificates, Algorithm 1's squared fast path, files and errors."""

from __future__ import annotations

import copy
import json
import os
import pickle
import zipfile

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import io
from gtvmodel.errors import DataError, FileFormatError, LossError, PenaltyError
from gtvmodel.terms.matrix import multi_output_rows, node_shape

P, Q = 3, 2
TIGHT = {"solver": "CLARABEL", "max_iter": 500}


def _data(rng, n=6, m=5, p=P, q=Q):
    """Per node ``X_i`` ``(m, p)`` and ``Y_i = X_i B_c + noise`` of two clusters."""
    X = rng.normal(size=(n, m, p))
    B = rng.normal(size=(2, p, q))
    Y = np.einsum("nmp,npq->nmq", X, B[np.arange(n) % 2]) + 0.3 * rng.normal(size=(n, m, q))
    return X, Y


def _graph(n=6):
    G = nx.cycle_graph(n)
    G.add_edge(0, 3)
    for k, (a, b) in enumerate(G.edges):
        G.edges[a, b]["weight"] = 0.5 + 0.25 * k
    return G


def _reference(G, X, Y, lam, penalty, l2=0.0):
    """The GTV problem (16) in matrix variables, written independently: ``(1/m) ||Y_i - X_i
    W_i||_F^2 + l2 ||W_i||_F^2`` per node, ``lam A_e phi(W_i - W_j)`` per edge with ``phi`` the
    Frobenius, the entrywise l1 or the nuclear norm.  Returns the optimal matrices and their
    objective."""
    nodes = list(G.nodes)
    Wv = {v: cp.Variable((X.shape[2], Y.shape[2])) for v in nodes}
    m = X.shape[1]
    cost = sum(cp.sum_squares(Y[i] - X[i] @ Wv[v]) / m + l2 * cp.sum_squares(Wv[v])
               for i, v in enumerate(nodes))
    for a, b, A in G.edges(data="weight"):
        diff = Wv[a] - Wv[b]
        phi = {"fro": cp.norm, "l1": lambda z, _: cp.sum(cp.abs(z)),
               "nuc": lambda z, _: cp.normNuc(z)}[penalty](diff, "fro")
        cost = cost + lam * A * phi
    prob = cp.Problem(cp.Minimize(cost))
    for tol in (1e-10, 1e-9, 1e-8):  # Clarabel's residuals can stall just above 1e-10
        prob.solve(**{**TIGHT, "tol_gap_abs": tol, "tol_gap_rel": tol, "tol_feas": tol})
        if prob.status == cp.OPTIMAL:
            break
    assert prob.status == cp.OPTIMAL
    W = np.stack([Wv[v].value for v in nodes])
    # the value at the reference's weights, in numpy: an upper bound of the optimum P*
    return W, _objective(G, X, Y, lam, penalty, W, l2)


def _objective(G, X, Y, lam, penalty, Ws, l2=0.0):
    """The objective of ``_reference`` at matrices ``Ws`` (``(n, p, q)``), in numpy."""
    m = X.shape[1]
    val = sum(np.sum((Y[i] - X[i] @ Ws[i]) ** 2) / m + l2 * np.sum(Ws[i] ** 2)
              for i in range(len(Ws)))
    for a, b, A in G.edges(data="weight"):
        d = Ws[a] - Ws[b]
        val += lam * A * {"fro": np.linalg.norm(d), "l1": np.abs(d).sum(),
                          "nuc": np.linalg.norm(d, "nuc")}[penalty]
    return float(val)


PENALTIES = {"fro": gm.Norm2(), "l1": gm.Norm1(), "nuc": gm.NuclearNorm((P, Q))}


@pytest.mark.parametrize("penalty", ["fro", "l1", "nuc"])
def test_solve_exact_and_certificates_match_matrix_reference(penalty):
    rng = np.random.default_rng(3)
    G = _graph()
    X, Y = _data(rng)
    lam = 0.4
    model = gm.GTVModel(G, dim=(P, Q), penalty=PENALTIES[penalty], lam=lam)
    model.set_data(X, Y)
    W_ref, f_ref = _reference(G, X, Y, lam, penalty)
    sol = model.solve_exact()
    assert sol.success
    Ws = model.as_matrices(sol.weights)
    assert Ws.shape == (6, P, Q)
    assert sol.objective == pytest.approx(f_ref, rel=1e-7)
    assert model.objective(sol.weights) == pytest.approx(_objective(G, X, Y, lam, penalty, Ws),
                                                        rel=1e-12)
    np.testing.assert_allclose(Ws, W_ref, atol=1e-5)
    first = model.solve_exact(method="first_order")  # Algorithm 1 in certified stages
    assert first.success and first.objective == pytest.approx(f_ref, rel=1e-7)
    # tight at the optimum, with the solver's flows; weights only (flows recovered by the
    # certificate) for Frobenius and l1 (the recovery does not cover the nuclear norm)
    cert = gm.certify(model, sol.weights, sol.flows)
    assert 0 <= cert.gap <= 1e-7 * max(1.0, abs(f_ref))
    cert = gm.certify(model, sol.weights)
    assert cert.gap >= 0
    if penalty != "nuc":
        assert cert.gap <= 1e-7 * max(1.0, abs(f_ref))
    # sound at perturbed points: gap >= P(W) - P* (f_ref >= P*), with and without flows
    for scale in (1e-4, 1e-2, 0.3):
        Wp = W_ref + scale * rng.normal(size=W_ref.shape)
        sub = _objective(G, X, Y, lam, penalty, Wp) - f_ref
        for flows in (None, sol.flows):
            c = gm.certify(model, Wp, flows)  # (n, p, q) weights: flattened row-major
            assert c.primal_value == pytest.approx(_objective(G, X, Y, lam, penalty, Wp),
                                                   rel=1e-12)
            assert c.gap >= sub - 1e-8
            if penalty != "nuc" or flows is not None:  # and not vacuous
                assert c.gap <= 10 * sub + 1e-3


@pytest.mark.parametrize("penalty", ["fro", "nuc"])
def test_algorithm1_takes_the_squared_fast_path_and_converges(penalty):
    rng = np.random.default_rng(5)
    G = _graph()
    X, Y = _data(rng)
    model = gm.GTVModel(G, dim=(P, Q), penalty=PENALTIES[penalty], lam=0.4)
    model.set_data(X, Y, l2=0.01)
    W_ref, f_ref = _reference(G, X, Y, 0.4, penalty, l2=0.01)
    res = gm.solve_primal_dual(model, max_iter=20_000, tol=1e-8)
    assert res.status == "converged" and res.success
    assert res.paths == {"squared": 6}
    assert res.objective == pytest.approx(f_ref, rel=1e-7)
    assert res.objective - f_ref <= res.gap + 1e-8  # the run's own certificate is sound
    np.testing.assert_allclose(model.as_matrices(res.weights), W_ref, atol=1e-4)


def test_loss_value_gradient_and_scalings_against_formula():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(7, P)), rng.normal(size=(7, Q))
    W = rng.normal(size=(P, Q))
    R = Y - X @ W
    sq = float(np.sum(R ** 2))
    for scaling, s in {"mean": 1 / 7, "sum": 1.0, "half": 0.5, "half_mean": 0.5 / 7}.items():
        loss = gm.multi_output_squared_loss(X, Y, scaling=scaling, l2=0.2, l1=0.1)
        assert isinstance(loss, gm.SquaredLoss) and loss.dim == P * Q
        want = s * sq + 0.2 * np.sum(W ** 2) + 0.1 * np.abs(W).sum()
        assert loss.value(W.reshape(-1)) == pytest.approx(want, rel=1e-13)
        smooth = gm.multi_output_squared_loss(X, Y, scaling=scaling, l2=0.2)
        grad = -2 * s * X.T @ R + 0.4 * W
        np.testing.assert_allclose(smooth.gradient(W.reshape(-1)), grad.reshape(-1), rtol=1e-11)
    A, b = multi_output_rows(X, Y)
    np.testing.assert_array_equal(A, np.kron(X, np.eye(Q)))
    np.testing.assert_array_equal(b, Y.reshape(-1))


def test_set_data_forms_agree_and_spec_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    G = _graph()
    X, Y = _data(rng)
    W = rng.normal(size=(6, P, Q))
    a = gm.GTVModel(G, dim=(P, Q), lam=0.4)
    a.set_data(X, Y)
    b = gm.GTVModel(G, dim=(P, Q), lam=0.4)
    order = rng.permutation(X.shape[0] * X.shape[1])
    b.set_data(X.reshape(-1, P)[order], Y.reshape(-1, Q)[order],
               node_index=np.repeat(np.arange(6), X.shape[1])[order])
    c = gm.GTVModel(G, dim=(P, Q), lam=0.4)
    c.set_data({v: (X[v], Y[v]) for v in range(6)})
    d = gm.GTVModel(G, dim=(P, Q), lam=0.4)
    for v in range(6):
        d.set_loss(v, gm.multi_output_squared_loss(X[v], Y[v]))
    e = gm.GTVModel.from_arrays(G, X, Y, lam=0.4)
    want = a.objective(W)
    for other in (b, c, d, e):
        assert other.shape == (P, Q)
        assert other.objective(W) == pytest.approx(want, rel=1e-13)
    # files keep the shape and the losses
    path = os.fspath(tmp_path / "matrix.npz")
    io.save_model(a, path)
    again = io.load_model(path)
    assert again.shape == (P, Q) and again.dim == P * Q
    assert again.objective(W) == a.objective(W)
    assert repr(again) == repr(a)
    # a vector model's file has no shape field (unchanged format)
    io.save_model(gm.GTVModel(G, dim=6), path)
    assert io.load_model(path).shape == (6,)


def _rewrite_header(path, **fields):
    """The problem file at ``path`` with header fields replaced (None: removed)."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(arrays["header"].tobytes().decode())
    for k, v in fields.items():
        header.pop(k, None) if v is None else header.__setitem__(k, v)
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)


def test_bad_inputs_raise_package_errors(tmp_path):
    G = _graph()
    for dim, word in [((0, 2), "dim[0]"), ((2,), "dim"), ((2, 3, 4), "dim"), ((2, 0), "dim[1]"),
                      ("a", "dim"), ((2.0, 3), "dim[0]")]:
        with pytest.raises(DataError, match=word.replace("[", r"\[")):
            gm.GTVModel(G, dim=dim)
    model = gm.GTVModel(G, dim=(P, Q))
    rng = np.random.default_rng(2)
    X, Y = _data(rng)
    with pytest.raises(DataError, match="q = 2 columns"):
        model.set_data(X, Y[..., :1].repeat(3, axis=2))
    with pytest.raises(DataError, match="p = 3 columns"):
        model.set_data(X[..., :2], Y)
    with pytest.raises(DataError, match="y_i"):
        model.set_data({0: (X[0], Y[0, :, :1].repeat(3, axis=1))})
    with pytest.raises(LossError, match="squared loss"):
        model.set_data(X, Y, "huber")
    with pytest.raises(DataError, match="Y"):
        gm.multi_output_squared_loss(X[0], Y[0, :3])
    with pytest.raises(DataError, match="as_matrices"):
        model.as_matrices(np.zeros((6, 5)))
    with pytest.raises(DataError, match=r"weights must have shape \(6, 6\)"):
        model.objective(np.zeros((6, Q, P)))
    # a file whose shape does not match d
    model.set_data(X, Y)
    path = os.fspath(tmp_path / "bad.npz")
    io.save_model(model, path)
    _rewrite_header(path, shape=[4, 2])
    with pytest.raises(FileFormatError, match="shape"):
        io.load_model(path)
    _rewrite_header(path, shape=[6])
    with pytest.raises(FileFormatError, match="shape"):
        io.load_model(path)
    _rewrite_header(path, shape=[3.0, 2])
    with pytest.raises(FileFormatError, match=r"shape\[0\]"):
        io.load_model(path)
    assert zipfile.is_zipfile(path)


def test_node_shape_and_variants_keep_the_shape():
    assert node_shape(4) == (4,) and node_shape([2, 5]) == (2, 5)
    model = gm.GTVModel(_graph(), dim=(P, Q), lam=0.5)
    assert model.dim == 6 and model.dim_arg == (P, Q)
    assert model.variant(lam=0.1).shape == (P, Q)
    assert gm.GTVModel(_graph(), dim=6).as_matrices(np.zeros((6, 6))).shape == (6, 6)
    edges = np.array([[0, 1], [1, 2]])
    assert gm.GTVModel.from_edges(3, edges, dim=(2, 2)).shape == (2, 2)
    # labels of one column in a mapping keep a vector model (any loss), as before
    data = {0: (np.ones((3, 2)), np.array([[1], [0], [1]])), 1: (np.ones((2, 2)), [[0], [1]])}
    assert gm.GTVModel.from_arrays(nx.path_graph(2), data, loss="logistic").shape == (2,)
    # pickling and copies keep the shape and the nuclear norm
    nuc = gm.GTVModel(_graph(), dim=(P, Q), penalty=gm.NuclearNorm((P, Q)))
    for other in (pickle.loads(pickle.dumps(nuc)), copy.deepcopy(nuc)):
        assert other.shape == (P, Q) and other.penalty == gm.NuclearNorm((P, Q))


def test_nuclear_norm_rows_against_numpy_norms():
    rng = np.random.default_rng(4)
    phi = gm.NuclearNorm((P, Q))
    V = rng.normal(size=(5, P * Q))
    V[0] = 0.0
    M = V.reshape(5, P, Q)
    np.testing.assert_allclose(phi.rows_value(V), np.linalg.norm(M, "nuc", axis=(1, 2)),
                               rtol=1e-13, atol=0)
    np.testing.assert_allclose(phi.dual_norm(V), np.linalg.norm(M, 2, axis=(1, 2)),
                               rtol=1e-13, atol=0)
    r = np.array([1.0, 0.5, 0.1, 10.0, 0.0])
    U = phi.project_dual_ball(V, r)
    assert np.all(phi.conjugate_rows(U, r) == 0.0)     # inside the capacities
    np.testing.assert_array_equal(U[3], V[3])           # a row inside is kept as it is
    assert np.all(U[4] == 0.0)
    # Moreau: prox + projection = identity, and the prox shrinks every singular value by t
    t = 0.3
    Z = phi.prox_rows(V, t)
    s_v = np.linalg.svd(M, compute_uv=False)
    s_z = np.linalg.svd(Z.reshape(5, P, Q), compute_uv=False)
    np.testing.assert_allclose(s_z, np.maximum(s_v - t, 0.0), atol=1e-12)
    assert phi.conjugate_rows(V[1:2] * 0 + np.nan, 1.0)[0] == np.inf
    with pytest.raises(PenaltyError, match="d = 4"):
        gm.GTVModel(_graph(), dim=(2, 2), penalty=phi)
    with pytest.raises(PenaltyError, match="shape"):
        gm.NuclearNorm((0, 2))


def test_nuclear_norm_in_files(tmp_path):
    rng = np.random.default_rng(6)
    X, Y = _data(rng)
    model = gm.GTVModel(_graph(), dim=(P, Q), penalty=gm.NuclearNorm((P, Q)), lam=0.2)
    model.set_data(X, Y)
    path = os.fspath(tmp_path / "nuc.npz")
    io.save_model(model, path)
    again = io.load_model(path)
    assert again.penalty == gm.NuclearNorm((P, Q)) and again.shape == (P, Q)
    W = rng.normal(size=(6, P * Q))
    assert again.objective(W) == model.objective(W)
    _rewrite_header(path, penalty={"kind": "nuclear", "p": 2, "q": 2})
    with pytest.raises(FileFormatError, match="d = 6"):
        io.load_model(path)


@pytest.mark.slow
@pytest.mark.parametrize("penalty", ["fro", "l1", "nuc"])
def test_soundness_sweep(penalty):
    """Random matrix models (shapes, graphs, lambda, l2): every certificate, with the solver's
    flows and from the weights alone, is >= the true suboptimality at points near and far from
    the optimum; with the solver's flows it is tight at the optimum."""
    for seed in range(12):
        rng = np.random.default_rng(100 + seed)
        p, q = [(2, 2), (3, 2), (2, 3), (4, 3)][seed % 4]
        n = 5 + seed % 3
        G = nx.connected_watts_strogatz_graph(n, 2 + 2 * (seed % 2), 0.3, seed=seed)
        for a, b in G.edges:
            G.edges[a, b]["weight"] = 0.5 + rng.random()
        X, Y = _data(rng, n=n, m=4 + seed % 3, p=p, q=q)
        lam, l2 = [0.05, 0.3, 1.0, 3.0][seed % 4], 0.01 * (seed % 2)
        pen = gm.NuclearNorm((p, q)) if penalty == "nuc" else PENALTIES[penalty]
        model = gm.GTVModel(G, dim=(p, q), penalty=pen, lam=lam)
        model.set_data(X, Y, l2=l2)
        W_ref, f_ref = _reference(G, X, Y, lam, penalty, l2)
        sol = model.solve_exact()
        scale = max(1.0, abs(f_ref))
        assert gm.certify(model, sol.weights, sol.flows).gap <= 1e-7 * scale
        for s in (1e-6, 1e-4, 1e-2, 0.3):
            Wp = W_ref + s * rng.normal(size=W_ref.shape)
            sub = _objective(G, X, Y, lam, penalty, Wp, l2) - f_ref
            for flows in (None, sol.flows):
                assert gm.certify(model, Wp, flows).gap >= sub - 1e-9 * scale, (seed, s)


@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (2, 2), (5, 1), (1, 3)])
def test_nuclear_projection_against_constructed_singular_values(shape):
    """Rows built as ``A diag(s) B^T`` from random orthonormal factors: the projection onto the
    spectral ball is ``A diag(min(s, r)) B^T`` (up to the capacity margin), near the ball (the
    Gram route), far outside it (the SVD route) and inside (unchanged)."""
    rng = np.random.default_rng(7)
    p, q = shape
    k, t = 600, min(p, q)
    phi = gm.NuclearNorm(shape)
    r = rng.uniform(0.5, 2.0, size=k)
    A = np.linalg.qr(rng.normal(size=(k, p, p)))[0][:, :, :t]
    B = np.linalg.qr(rng.normal(size=(k, q, q)))[0][:, :, :t]
    s = np.sort(rng.uniform(0.0, 6.0, size=(k, t)), axis=1)[:, ::-1] * r[:, None]
    s[::7] *= 1e6   # far outside: SVD route
    s[::11] *= 0.1  # mostly inside
    M = (A * s[:, None, :]) @ np.swapaxes(B, 1, 2)
    want = (A * np.minimum(s, r[:, None] * (1 - phi.slack))[:, None, :]) @ np.swapaxes(B, 1, 2)
    got = phi.project_dual_ball(M.reshape(k, -1), r)
    np.testing.assert_allclose(got.reshape(k, p, q), want, rtol=0, atol=1e-13 * r.max())
    assert np.all(phi.conjugate_rows(got, r) == 0.0)
    inside = s[:, 0] <= r
    np.testing.assert_array_equal(got[inside], M.reshape(k, -1)[inside])


def test_nuclear_norm_theory_constants() -> None:
    """Theorem 2's constants of the nuclear norm: kappa = max ||X||_* / ||X||_F = sqrt(min(p, q))
    (attained at a partial identity), rho = kappa (the spectral norm is at most Frobenius);
    the theory tools run on nuclear models instead of failing."""
    p, q = 2, 3
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, p, q))
    ratio = np.linalg.svd(X, compute_uv=False).sum(axis=1) / np.linalg.norm(X, axis=(1, 2))
    kappa, rho = gm.NuclearNorm((p, q)).l2_equivalence(p * q)
    assert ratio.max() <= kappa + 1e-12
    eye = np.eye(p, q)
    assert np.isclose(np.linalg.svd(eye, compute_uv=False).sum() / np.linalg.norm(eye), kappa)
    assert rho == kappa
    model = gm.GTVModel(nx.path_graph(4), dim=(p, q), penalty=gm.NuclearNorm((p, q)), lam=0.1)
    for i in range(4):
        model.set_loss(i, gm.multi_output_squared_loss(rng.normal(size=(5, p)),
                                                       rng.normal(size=(5, q))))
    assert np.isfinite(gm.consensus_threshold(model))
    gm.check_well_connected(model, [0, 0, 1, 1])
