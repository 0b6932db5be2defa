"""The host passes of the certificate for ``m_i < d`` (issue 30 item 3): one-pass row 2-norms,
the compiled conjugate-gradient updates and node passes, the conjugate split's row ranges and
the dual value's flows taken without a copy.

Each is checked against an independent computation: the norms bit for bit against the scaled
path they replace and within a few ulps of ``math.hypot``; the conjugate gradients against
the minimum-norm solution by ``numpy.linalg.lstsq``; the node passes against the formed ``A``;
the row ranges bit for bit against one range.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

import gtvmodel as gm
import gtvmodel.terms.losses.conjugates as conj
from gtvmodel import _compiled, _norms
from gtvmodel.certificates import subspace
from gtvmodel.certificates.kinds import node_kinds
from gtvmodel.certificates.subspace import SubspaceConditions
from gtvmodel.certificates.value import checked_flows
from gtvmodel.errors import DataError

needs_numba = pytest.mark.skipif(not _compiled.available(), reason="numba not installed")


def _rows_across_the_range(rng: np.random.Generator) -> np.ndarray:
    """Rows of every magnitude (subnormal to near overflow), zero rows, rows near the ends
    of the unscaled range, a NaN and an infinite row, mixed signs."""
    lo, hi = _norms._l2_unscaled_range(np.zeros(1))
    k, d = 400, 7
    A = rng.standard_normal((k, d)) * 10.0 ** rng.uniform(-320, 307, (k, 1))
    A[::9] = 0.0
    A[1::9, 1:] = 0.0
    for j, s in enumerate((lo, 2 * lo, 2 * np.sqrt(d) * lo, 3 * np.sqrt(d) * lo, hi / 2,
                           hi / 3, hi, 1e-300, 1e-310)):
        A[2 + 9 * j] = s * rng.uniform(0.5, 1.0, d)
    A[5, 3] = np.nan
    A[6, 2] = -np.inf
    return A


def test_one_pass_l2_norms_equal_the_scaled_path_bit_for_bit():
    rng = np.random.default_rng(0)
    for _ in range(5):
        A = _rows_across_the_range(rng)
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            ref = _norms._by_row_max(np.abs(A), 2.0)  # the row maxima first, as before
        got = _norms.norm_rows(A, 2.0)
        assert np.array_equal(got, ref, equal_nan=True)
        assert np.array_equal(_norms.norm_rows_upper(A, 2.0),
                              _norms._upper_from(ref, np.abs(A), 2.0), equal_nan=True)
        fin = np.isfinite(A).all(axis=1)
        hyp = np.array([math.hypot(*row) for row in A[fin]])  # independent, overflow-free
        np.testing.assert_allclose(got[fin], hyp, rtol=8 * np.finfo(float).eps, atol=1e-320)
        assert np.isnan(got[5]) and got[6] == np.inf
    assert float(_norms.norm_rows(np.array([3.0, -4.0]), 2.0)) == 5.0  # a vector


def _singular_system(rng: np.random.Generator, n: int = 60, rank: int = 45
                     ) -> tuple[np.ndarray, np.ndarray]:
    """A consistent singular PSD system ``K z = b`` with an uneven diagonal."""
    B = rng.standard_normal((n, rank)) * rng.uniform(0.5, 3.0, (n, 1))
    K = B @ B.T
    return K, K @ rng.standard_normal(n)


@needs_numba
@pytest.mark.parametrize("jacobi", [False, True])
def test_compiled_conjugate_gradients_solve_as_the_array_path(monkeypatch, jacobi):
    """Without a preconditioner (unit diagonal) both paths give the minimum-norm solution of
    the consistent singular system (the iterates stay in ``range(K)``); with the Jacobi
    preconditioner a solution of it, the same one on both paths."""
    rng = np.random.default_rng(1)
    K, b = _singular_system(rng)
    diag = np.diag(K).copy() if jacobi else np.ones(K.shape[0])
    host = subspace.conjugate_gradients(K.__matmul__, b, diag, 1e-14, 500)
    assert not subspace.conjugate_gradients(K.__matmul__, 0 * b, diag, 1e-14, 500).any()
    monkeypatch.setattr(subspace._compiled, "available", lambda: False)
    plain = subspace.conjugate_gradients(K.__matmul__, b, diag, 1e-14, 500)
    zmin = np.linalg.lstsq(K, b, rcond=1e-12)[0]  # the minimum-norm solution
    for z in (host, plain):
        assert np.linalg.norm(K @ z - b) <= 1e-12 * np.linalg.norm(b)
        if not jacobi:
            np.testing.assert_allclose(z, zmin, rtol=0, atol=1e-9 * np.abs(zmin).max())
    np.testing.assert_allclose(host, plain, rtol=0, atol=1e-9 * np.abs(plain).max())


def _model(seed: int = 3, n: int = 40, d: int = 6) -> gm.GTVModel:
    """A ring with chords; squared losses with 3 < d samples at every other node, none at
    every fifth (``N_i = I``: mixed widths), ``d + 2`` elsewhere."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, n, 3 * n), rng.integers(0, n, 3 * n)
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n], 1)
    edges = np.unique(np.vstack([np.sort(ring, 1),
                                 np.stack([np.minimum(a, b), np.maximum(a, b)], 1)[a != b]]),
                      axis=0)
    model = gm.GTVModel.from_edges(n, edges, dim=d, penalty=gm.Norm2(), lam=0.3)
    for i in range(n):
        if i % 5:
            X = rng.standard_normal((3 if i % 2 else d + 2, d))
            model.set_loss(i, gm.SquaredLoss(X, X @ rng.standard_normal(d)))
    return model


@needs_numba
def test_host_node_passes_match_the_formed_matrix():
    model = _model()
    k = node_kinds(model)
    d = model.dim
    cond = SubspaceConditions.build(model, k.subspace, k.subspace_bases)
    assert cond.cols is not None  # mixed widths
    Dt = sp.csr_matrix(model.incidence).T.tocsr()[k.subspace]
    A = (sp.block_diag([B.T for B in k.subspace_bases]) @ sp.kron(Dt, sp.eye(d))).tocsr()
    rng = np.random.default_rng(4)
    u, z = rng.standard_normal(A.shape[1]), rng.standard_normal(A.shape[0])
    Au = A @ u
    np.testing.assert_allclose(cond.host_operator(model.incidence) @ u, Au, rtol=0,
                               atol=1e-13 * np.abs(Au).max())
    DZ = np.asarray(sp.csr_matrix(model.incidence) @ cond.host_potentials()(z)).ravel()
    ATz = A.T @ z
    np.testing.assert_allclose(DZ, ATz, rtol=0, atol=1e-13 * np.abs(ATz).max())
    assert cond.host_layout is cond.host_layout  # formed once


@needs_numba
def test_loose_correction_in_place_equals_the_formed_one():
    """``subtract_loose`` (``U -= D Z`` in one compiled pass) equals ``U - D @ Z`` of the same
    correction bit for bit, and the correction moves ``A u`` towards ``b``."""
    model = _model()
    k = node_kinds(model)
    solver = subspace.PotentialSolver(model.incidence, SubspaceConditions.build(
        model, k.subspace, k.subspace_bases))
    rng = np.random.default_rng(7)
    U = rng.standard_normal((model.num_edges, model.dim))
    b = solver.A @ U.ravel()
    ref = U - solver.solve(b, rtol=1e-3).reshape(U.shape)
    got = U.copy()
    solver.subtract_loose(got, b, 1e-3)
    assert np.array_equal(got, ref)
    assert np.linalg.norm(solver.A @ got.ravel()) <= 1e-3 * np.linalg.norm(b)
    dense = subspace.MinNormSolver(sp.csr_matrix(solver.A @ np.eye(solver.A.shape[1])))
    via = U.copy()
    dense.subtract_loose(via, b, 1e-3)  # the generic form: U -= solve(b, rtol)
    assert np.linalg.norm(dense.A @ via.ravel()) <= 1e-9 * np.linalg.norm(b)


def test_row_ranges_keep_the_sums_bit_for_bit(monkeypatch):
    rng = np.random.default_rng(5)
    counts = rng.integers(0, 9, 50)  # owners with 0..8 rows
    rn = np.repeat(np.arange(50), counts)
    X = rng.standard_normal((rn.size, 4)) * 10.0 ** rng.uniform(-3, 3, (rn.size, 1))
    W = rng.standard_normal((50, 4))
    a = rng.standard_normal(rn.size)
    whole = (conj._abs_rows_sum(rn, a, X, 50), conj._row_dots(X, W, rn))
    monkeypatch.setattr(conj, "CHUNK_ENTRIES", 12)  # 3 rows per range
    ranges = conj.row_chunks(rn, 4)
    assert len(ranges) > 10 and ranges[0].start == 0 and ranges[-1].stop == rn.size
    for r0, r1 in zip(ranges[:-1], ranges[1:], strict=True):
        assert r0.stop == r1.start and rn[r0.stop - 1] != rn[r1.start]  # owners not split
    assert np.array_equal(conj._abs_rows_sum(rn, a, X, 50), whole[0])
    assert np.array_equal(conj._row_dots(X, W, rn), whole[1])
    ref = np.zeros((50, 4))
    np.add.at(ref, rn, np.abs(a)[:, None] * np.abs(X))
    np.testing.assert_allclose(whole[0], ref, rtol=1e-14)
    np.testing.assert_allclose(whole[1], np.sum(X * W[rn], axis=1), rtol=1e-12, atol=1e-12)
    assert conj.row_chunks(rn[::-1].copy(), 4) == [slice(0, rn.size)]  # unsorted: one range


def test_dual_value_readschecked_flows_without_a_copy():
    model = _model()
    U = np.random.default_rng(6).standard_normal((model.num_edges, model.dim))
    assert checked_flows(model, U) is U
    copied = checked_flows(model, U.astype(np.float32))
    assert copied.dtype == np.float64 and copied is not U
    U[3, 1] = np.nan
    with pytest.raises(DataError):
        checked_flows(model, U)


@needs_numba
def test_compiled_capacity_passes_match_the_numpy_projection():
    """Step 1 of the repair by the compiled passes: the excess and the projection of
    ``Norm2`` flows against the numpy path (``project_dual_ball``, the overflow-safe norms),
    rows of every magnitude, each projected row inside its capacity for certain."""
    from gtvmodel.certificates import repair

    rng = np.random.default_rng(3)
    E, d = 600, 6
    A = _rows_across_the_range(rng)[:, :d]
    A = A[np.isfinite(A).all(axis=1)]  # the repair's flows are checked finite
    U = np.vstack([A, rng.standard_normal((E - A.shape[0], d))])
    cap = rng.uniform(0.0, 2.0, E)
    cap[::17] = 0.0
    cap[1::23] = 1e-310  # radii below the kernel's range: the numpy path
    pen = gm.Norm2()
    row = pen.compiled_dual_row(cap, d)
    kern = _compiled.subspace_kernels()
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        want_excess = float(np.max(pen.dual_norm(U) - cap, initial=0.0))
        got_excess = float(kern.ball_excess_pass(np.ascontiguousarray(U), cap))
        assert got_excess == np.inf and want_excess > 1e300  # squares overflow: inf
        M = np.ascontiguousarray(U[A.shape[0]:])  # rows of moderate size: the same excess
        assert float(kern.ball_excess_pass(M, cap[A.shape[0]:])) == pytest.approx(
            float(np.max(pen.dual_norm(M) - cap[A.shape[0]:], initial=0.0)),
            rel=4 * np.finfo(float).eps)
        want = pen.project_dual_ball(U, cap)
        X = U.copy()
        flagged = np.empty(E, dtype=np.int64)
        nf = int(kern.ball_project_pass(X, cap, row, flagged))
        fl = flagged[:nf]
        X[fl] = _norms.project_rows(X[fl], cap[fl], 2.0)
    assert nf > 0  # the tiny radii and the extreme rows went to the numpy path
    assert (_norms.norm_rows_upper(X, 2.0) <= cap).all()  # inside for certain
    # the same projection up to the margins of the two paths (the general path aims at
    # ``r (1 - (K + 4) eps)``, the fast one at ``r (1 - (K + 10) eps)``)
    np.testing.assert_allclose(X, want, rtol=64 * np.finfo(float).eps, atol=1e-320)
    # the repair's own step 1 on a small model: the compiled and the numpy path agree
    edges = np.array([(i, (i + 1) % 30) for i in range(30)] + [(i, (i + 7) % 30)
                                                                for i in range(30)])
    model = gm.GTVModel.from_edges(30, edges, dim=d, penalty=gm.Norm2(), lam=0.3)
    model.set_data(rng.standard_normal((30, 2, d)), rng.standard_normal((30, 2)), "squared")
    F = rng.standard_normal((len(edges), d))
    got, notes, theta = repair.repair(model, F, 4)
    real = repair._compiled_ball
    try:
        repair._compiled_ball = lambda *a: None
        ref, ref_notes, ref_theta = repair.repair(model, F, 4)
    finally:
        repair._compiled_ball = real
    assert notes == ref_notes and repair.PROJECT_NOTE in notes
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    assert theta == pytest.approx(ref_theta, rel=1e-12)


def test_capacity_test_without_the_abs_copy_and_scaling_in_place():
    """``within`` for ``q = 2`` takes the one-pass norms of the signed rows (the same norms
    as of ``|V|``), and ``scale_flows(..., inplace=True)`` gives the rows of the copying
    form bit for bit, in the array it was given."""
    from gtvmodel.certificates import repair

    rng = np.random.default_rng(8)
    A = _rows_across_the_range(rng)
    caps = np.abs(rng.standard_normal(A.shape[0])) * 10.0 ** rng.uniform(-300, 300, A.shape[0])
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        ref = _norms._norm_rows_abs(np.abs(A), 2.0) <= caps * (1.0 + _norms.CAPACITY_SLACK)
        assert np.array_equal(_norms.within(A, caps, 2.0), ref)
    edges = np.array([(i, (i + 1) % 12) for i in range(12)])
    model = gm.GTVModel.from_edges(12, edges, dim=3, penalty=gm.Norm2(), lam=0.2)
    U = rng.standard_normal((12, 3))
    want = repair.scale_flows(model, U, 0.05)
    V = U.copy()
    got = repair.scale_flows(model, V, 0.05, inplace=True)
    assert got is V and np.array_equal(got, want)
