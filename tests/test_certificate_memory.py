"""The certificate's flow-sized arrays (issue 30 item 3, memory): the given flows checked once
and repaired in place, the edge differences ``V = D W`` formed in blocks of rows, ``D^T`` as
the transposed view of ``D``, the demands ``-D^T u`` and ``|D|^T |u|`` in one compiled pass.

Each is checked against an independent computation: the pairings ``u_e^T v_e`` against
``numpy.einsum`` of the flows with ``W[e+] - W[e-]`` gathered in the test, the blocks' edge
terms bit for bit against one block's (the rounding bound within 1e-15), the products by the
view and the demands' pass bit for bit against scipy's products; the caller's flows are never
changed; the peak memory of a later certificate (``tracemalloc``) stays below 4.2 flow arrays
(5.4 before these changes).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

import gtvmodel as gm
from gtvmodel import _compiled
from gtvmodel.certificates import primal_side
from gtvmodel.certificates.repair import repair
from gtvmodel.certificates.subspace import _transposed
from gtvmodel.certificates.value import demand_rounding, demands


def _instance(n: int = 300, E: int = 1500, d: int = 6, m: int = 3, seed: int = 0,
              penalty: gm.Penalty | None = None):
    """A ``G(n, E)`` random graph with squared losses of ``m < d`` samples per node and the
    iterate of 25 iterations of Algorithm 1 (not optimal: the repair changes the flows)."""
    rng = np.random.default_rng(seed)
    pairs = set()
    while len(pairs) < E:
        i, j = (int(v) for v in rng.integers(0, n, 2))
        if i != j:
            pairs.add((min(i, j), max(i, j)))
    edges = np.array(sorted(pairs))
    X = rng.standard_normal((n, m, d))
    y = np.einsum("nmd,nd->nm", X, rng.standard_normal((n, d))) + 0.1 * rng.standard_normal(
        (n, m))
    model = gm.GTVModel.from_edges(n, edges, dim=d, penalty=penalty or gm.Norm2(), lam=0.1)
    model.set_data(X, y, "squared")
    res = model.solve_primal_dual(max_iter=25, tol=0, record_every=None)
    return model, edges, res.weights, res.flows


@pytest.mark.parametrize("penalty", [gm.Norm2(), gm.NormInf(), gm.SquaredNorm2()])
def test_edge_blocks_keep_the_certificate(monkeypatch, penalty):
    model, edges, W, U = _instance(penalty=penalty)
    one = gm.certify(model, W, U, fallback=False)
    monkeypatch.setattr(primal_side, "EDGE_BLOCK", 7)  # 215 blocks, the last one short
    blocks = gm.certify(model, W, U, fallback=False)
    # the edge terms and pairings row by row bit for bit; the rounding bound's magnitude is
    # a sum of the blocks' sums (another order: within an ulp or two)
    assert blocks.primal_value == one.primal_value
    assert np.array_equal(blocks.edge_gaps, one.edge_gaps)
    assert abs(blocks.tolerance - one.tolerance) <= 1e-15 * one.tolerance
    assert abs(blocks.gap - one.gap) <= 1e-15 * one.gap
    # independent: the pairings of the final flows with W[e+] - W[e-] gathered here
    V = W[edges[:, 0]] - W[edges[:, 1]]
    orient = np.asarray(model.incidence @ W)  # the model's orientation of each edge
    V = np.where(np.all(V == orient, axis=1)[:, None], V, -V)
    assert np.array_equal(V, orient)
    _, pair = primal_side.edge_pass(model, W, one.flows, False)
    np.testing.assert_allclose(pair.dots, np.einsum("ij,ij->i", one.flows, V),
                               rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(pair.magnitude, np.abs(one.flows * V).sum(), rtol=1e-13)


def test_given_flows_are_never_changed_and_repaired_once():
    model, _, W, U = _instance(seed=1)
    kept = U.copy()
    cert = gm.certify(model, W, U, fallback=False)
    assert np.array_equal(U, kept)  # the caller's flows: checked into a copy, never written
    assert cert.repaired and not np.array_equal(cert.flows, U)
    # the repair of the checked copy in place equals the repair of a copy it makes itself
    ref, notes, theta = repair(model, U, 4)
    mine = model.check_flows(U)
    got, notes2, theta2 = repair(model, mine, 4, owned=True)
    assert got is mine and np.array_equal(got, ref) and (notes2, theta2) == (notes, theta)
    assert np.array_equal(U, kept)
    # a Fortran-ordered array given away: the passes' numpy paths, the same flows
    got3, _, _ = repair(model, np.asfortranarray(U), 4, owned=True)
    assert np.array_equal(got3, ref) and np.array_equal(U, kept)
    # a list is checked into a new array
    got4, _, _ = repair(model, U.tolist(), 4, owned=True)
    assert np.array_equal(got4, ref)


def test_certificate_peak_memory_in_flow_arrays():
    model, _, W, U = _instance(n=2000, E=20000, d=10, m=5, seed=4)
    gm.certify(model, W, U, fallback=False)  # the model's caches (classification, solver)
    tracemalloc.start()
    try:
        cert = gm.certify(model, W, U, fallback=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.isfinite(cert.gap)
    # the certificate's own flows, the checked copy repaired in place, the split's node
    # arrays: 3.5 flow arrays measured; 5.4 with a second copy and V whole
    assert peak < 4.2 * U.nbytes


def test_products_by_the_transposed_view_equal_a_csr_copy():
    rng = np.random.default_rng(2)
    n, E = 500, 4000
    h, t = rng.integers(0, n, E), rng.integers(0, n, E)
    D = sp.csr_matrix((np.r_[np.ones(E), -np.ones(E)], (np.r_[np.arange(E), np.arange(E)],
                                                        np.r_[h, t])), shape=(E, n))
    U = rng.standard_normal((E, 7)) * 10.0 ** rng.uniform(-8, 8, (E, 1))
    DT = _transposed(D)
    assert np.shares_memory(DT.data, D.data)  # a view: no 2|E| entries copied
    assert np.array_equal(np.asarray(DT @ U), np.asarray(sp.csr_matrix(D.T) @ U))
    assert np.array_equal(np.asarray(_transposed(D.tocsc()) @ U), np.asarray(DT @ U))


@pytest.mark.skipif(not _compiled.available(), reason="numba not installed")
def test_demands_pass_equals_the_sparse_products_bit_for_bit():
    model, _, _, _ = _instance(n=400, E=3000, d=5, m=2, seed=3)
    rng = np.random.default_rng(5)
    D = model.incidence
    for scale in (1.0, 1e-300, 1e250):
        U = rng.standard_normal((D.shape[0], 5)) * scale * 10.0 ** rng.uniform(-6, 6, (3000, 1))
        U[::7] = 0.0
        U[1::7, 2] = -0.0
        S, rnd = demands(model, U)
        ref_S = np.asarray(-(sp.csc_matrix(D.T) @ U))  # independent: scipy, |D| and |U| formed
        ref_rnd = demand_rounding(model, np.asarray(abs(D).T @ np.abs(U)))
        assert np.array_equal(S, ref_S) and np.array_equal(np.signbit(S), np.signbit(ref_S))
        assert np.array_equal(rnd, ref_rnd)
    # a Fortran-ordered array takes scipy's products: the same values
    S2, rnd2 = demands(model, np.asfortranarray(U))
    assert np.array_equal(S2, S) and np.array_equal(rnd2, rnd)
