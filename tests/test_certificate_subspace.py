"""Issue 30 item 3: the conjugate gradients of repair step 2 (``m_i < d``) made cheap.

* The compiled normal product (:meth:`SubspaceConditions.normal_kernel`) and the matrix-free
  ``A`` (:func:`condition_operator`) equal the products with ``A`` formed in the test from the
  incidence matrix and the bases (Kronecker and block-diagonal products written here).
* The refinement rounds after the first aim at ``REFINE_AIM ||b||`` (:func:`round_rtol`): the
  same correction as rounds to ``1e-12 ||r||`` each, to rounding, with fewer products; the
  first round of :class:`PotentialSolver` aims at ``FIRST_AIM`` (refine's stop): the same
  correction again, with fewer products than a first round to ``1e-12`` and a second one.
* Certificates through :class:`PotentialSolver` (compiled or not) are no larger than through
  the dense pseudo-inverse and never below the true suboptimality, computed by a plain CVXPY
  formulation of the problem written in this file; and (slow) none is unsound on the
  soundness suite's instances with every step-2 solve forced onto the conjugate gradients.
"""

from __future__ import annotations

import os

import _soundness as S
import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp

import gtvmodel as gm
from gtvmodel import _compiled
from gtvmodel.certificates import subspace as subspace_mod
from gtvmodel.certificates.kinds import node_kinds
from gtvmodel.certificates.repair import CAP_RTOL, alternate_rounds
from gtvmodel.certificates.subspace import (
    CG_RTOL,
    FIRST_AIM,
    REFINE_AIM,
    MinNormSolver,
    PotentialSolver,
    SubspaceConditions,
    condition_operator,
    round_rtol,
)

N, D, LAM = 40, 6, 0.3


def _instance(m_small: int = 3, zero_every: int = 0, seed: int = 0):
    """A random graph of ``N`` nodes (a ring plus chords: connected), squared losses with
    ``m_small < D`` samples at every other node and ``D + 2`` at the rest; with
    ``zero_every``, every ``zero_every``-th node has no data (``N_i = I``)."""
    rng = np.random.default_rng(seed)
    ring = np.stack([np.arange(N), (np.arange(N) + 1) % N], 1)
    a, b = rng.integers(0, N, 3 * N), rng.integers(0, N, 3 * N)
    chords = np.stack([np.minimum(a, b), np.maximum(a, b)], 1)[a != b]
    edges = np.unique(np.vstack([np.sort(ring, 1), chords]), axis=0)
    model = gm.GTVModel.from_edges(N, edges, dim=D, penalty=gm.Norm2(), lam=LAM)
    data = {}
    for i in range(N):
        if zero_every and i % zero_every == 0:
            continue
        m = m_small if i % 2 else D + 2
        X = rng.standard_normal((m, D))
        data[i] = (X, X @ rng.standard_normal(D) + 0.1 * rng.standard_normal(m))
        model.set_loss(i, gm.SquaredLoss(*data[i]))
    return model, edges, data


def _formed_A(model, nodes, bases) -> sp.csr_matrix:
    """``A vec(U) = [N_i^T (D^T U)_i]`` formed: ``blockdiag(N_i^T) (D^T[nodes] kron I_d)``."""
    Dt = sp.csr_matrix(model.incidence).T.tocsr()[nodes]
    return (sp.block_diag([B.T for B in bases]) @ sp.kron(Dt, sp.eye(D))).tocsr()


@pytest.mark.parametrize("zero_every", [0, 5])  # 5: N_i = I at some nodes (mixed widths)
@pytest.mark.parametrize("compiled", [True, False])
def test_products_match_the_formed_matrix(monkeypatch, zero_every, compiled):
    model, _, _ = _instance(zero_every=zero_every)
    k = node_kinds(model)
    assert 0 < k.subspace.size < N
    monkeypatch.setattr(_compiled, "available", lambda: compiled)
    A = _formed_A(model, k.subspace, k.subspace_bases)
    solver = PotentialSolver(model.incidence,
                             SubspaceConditions.build(model, k.subspace, k.subspace_bases))
    rng = np.random.default_rng(1)
    u, z = rng.standard_normal(A.shape[1]), rng.standard_normal(A.shape[0])
    ref_K = A @ (A.T @ z)
    np.testing.assert_allclose(solver.normal(z), ref_K, rtol=0, atol=1e-13 * np.abs(ref_K).max())
    op = condition_operator(model, k.subspace, k.subspace_bases)
    np.testing.assert_allclose(op @ u, A @ u, rtol=0, atol=1e-13 * np.abs(A @ u).max())
    assert op.shape == A.shape


def test_every_node_identity_bases():
    """Zero-loss nodes only (every ``N_i = I``): the kernel's identity path."""
    model, _, _ = _instance(zero_every=1)
    k = node_kinds(model)
    assert k.subspace.size == N
    cond = SubspaceConditions.build(model, k.subspace, k.subspace_bases)
    assert cond.Npad is None
    A = _formed_A(model, k.subspace, k.subspace_bases)
    z = np.random.default_rng(2).standard_normal(A.shape[0])
    L = sp.csr_matrix(model.incidence).T @ sp.csr_matrix(model.incidence)
    ref = A @ (A.T @ z)
    np.testing.assert_allclose(cond.normal_kernel(L.tocsr())(z), ref, rtol=0,
                               atol=1e-13 * np.abs(ref).max())


def test_later_rounds_aim_at_the_rounding(monkeypatch):
    model, _, _ = _instance(zero_every=5)
    k = node_kinds(model)
    A = _formed_A(model, k.subspace, k.subspace_bases)
    b = A @ np.random.default_rng(3).standard_normal(A.shape[1])
    assert round_rtol(1.0, 1.0) == CG_RTOL
    assert round_rtol(1e-12, 1.0) == pytest.approx(REFINE_AIM * 1e12)
    solver = PotentialSolver(model.incidence,
                             SubspaceConditions.build(model, k.subspace, k.subspace_bases))
    calls = [0]
    plain = solver.normal

    def counted(z):
        calls[0] += 1
        return plain(z)

    solver.normal = counted
    delta = solver.solve(b)
    new_calls, calls[0] = calls[0], 0
    monkeypatch.setattr(subspace_mod, "REFINE_AIM", 0.0)  # every round to 1e-12 ||r||
    monkeypatch.setattr(solver, "first_rtol", CG_RTOL)
    old = solver.solve(b)
    assert new_calls < calls[0]
    nb = np.linalg.norm(b)
    assert np.linalg.norm(A @ delta - b) <= 1e-15 * nb
    np.testing.assert_allclose(delta, old, rtol=0, atol=1e-13 * np.abs(old).max())
    # the minimum-norm solution: delta in range(A^T), dense least squares on the formed A
    ref = np.linalg.lstsq(A.toarray(), b, rcond=None)[0]
    np.testing.assert_allclose(delta, ref, rtol=0, atol=1e-10 * np.abs(ref).max())


def _products(solver: PotentialSolver, b: np.ndarray, ref: float = 0.0
              ) -> tuple[np.ndarray, int]:
    """The correction ``solver.solve(b, ref=ref)`` and the products of ``A A^T`` it took."""
    calls = [0]
    plain = solver.normal

    def counted(z):
        calls[0] += 1
        return plain(z)

    solver.normal = counted
    try:
        return solver.solve(b, ref=ref), calls[0]
    finally:
        solver.normal = plain


@pytest.mark.parametrize("zero_every", [0, 5])
def test_first_round_aims_at_the_stop(zero_every):
    """:class:`PotentialSolver`'s first round aims at ``FIRST_AIM`` (refine's stop): the
    same correction as a first round to ``CG_RTOL`` followed by rounds to ``REFINE_AIM
    ||b||``, to rounding, with fewer products; residual within the stop; the minimum-norm
    solution of dense least squares on ``A`` formed in the test."""
    model, _, _ = _instance(zero_every=zero_every, seed=1)
    k = node_kinds(model)
    A = _formed_A(model, k.subspace, k.subspace_bases)
    b = A @ np.random.default_rng(4).standard_normal(A.shape[1])
    solver = PotentialSolver(model.incidence,
                             SubspaceConditions.build(model, k.subspace, k.subspace_bases))
    assert solver.first_rtol == FIRST_AIM and MinNormSolver.first_rtol == CG_RTOL
    assert round_rtol(1.0, 1.0, FIRST_AIM) == FIRST_AIM
    assert round_rtol(2e-15, 1.0, FIRST_AIM) == pytest.approx(REFINE_AIM / 2e-15)
    delta, new = _products(solver, b)
    solver.first_rtol = CG_RTOL  # the previous scheme: 1e-12, then REFINE_AIM ||b||
    old, before = _products(solver, b)
    assert new < before
    nb = np.linalg.norm(b)
    assert np.linalg.norm(A @ delta - b) <= 1e-15 * nb
    np.testing.assert_allclose(delta, old, rtol=0, atol=1e-13 * np.abs(old).max())
    ref = np.linalg.lstsq(A.toarray(), b, rcond=None)[0]
    np.testing.assert_allclose(delta, ref, rtol=0, atol=1e-10 * np.abs(ref).max())


def test_later_corrections_aim_at_the_first_residual():
    """``solve(b, ref=R)`` with ``R > ||b||`` (a later correction of an alternation, ``R`` the
    first one's ``||b||``): ``round_rtol`` relative to ``R``, a residual within ``1e-15 R``,
    fewer products than ``ref = 0`` and the same correction to ``1e-15 R`` (the minimum-norm
    one: dense least squares on ``A`` formed in the test)."""
    model, _, _ = _instance(seed=2)
    k = node_kinds(model)
    A = _formed_A(model, k.subspace, k.subspace_bases)
    b = A @ np.random.default_rng(5).standard_normal(A.shape[1])
    nb = np.linalg.norm(b)
    R = 1e3 * nb
    assert round_rtol(nb, nb, FIRST_AIM, R) == pytest.approx(FIRST_AIM * 1e3)
    assert round_rtol(nb, nb, FIRST_AIM, 0.5 * nb) == FIRST_AIM  # ref below ||b||: unused
    assert round_rtol(1e-3 * nb, nb, FIRST_AIM, R) == pytest.approx(FIRST_AIM * 1e3)
    solver = PotentialSolver(model.incidence,
                             SubspaceConditions.build(model, k.subspace, k.subspace_bases))
    tight, before = _products(solver, b)
    loose, after = _products(solver, b, R)
    assert after < before
    assert np.linalg.norm(A @ loose - b) <= 1e-15 * R
    ref = np.linalg.lstsq(A.toarray(), b, rcond=None)[0]
    for delta in (tight, loose):
        np.testing.assert_allclose(delta, ref, rtol=0, atol=1e-10 * np.abs(ref).max())
    # the difference is the residual's correction: ||A^T (A A^T)^+ r|| <= ||r|| / sigma_min
    sig = np.linalg.svd(A.toarray(), compute_uv=False)
    smin = sig[sig > 1e-10 * sig[0]].min()
    assert np.linalg.norm(loose - tight) <= 2e-15 * R / smin


def _cvxpy_optimum(edges, data) -> float:
    """``min sum_i (1/m_i) ||y_i - X_i w_i||^2 + LAM sum_e ||w_i - w_j||_2`` (plain CVXPY)."""
    W = cp.Variable((N, D))
    fit = [cp.sum_squares(X @ W[i] - y) / len(y) for i, (X, y) in data.items()]
    tv = cp.sum(cp.norm(W[edges[:, 0]] - W[edges[:, 1]], 2, axis=1))
    prob = cp.Problem(cp.Minimize(cp.sum(fit) + LAM * tv))
    for tol in (1e-12, 1e-10, 1e-9):  # tight first
        prob.solve(solver=cp.CLARABEL, tol_gap_abs=tol, tol_gap_rel=tol, tol_feas=10 * tol)
        if prob.status == cp.OPTIMAL:
            break
    assert prob.status == cp.OPTIMAL
    return float(prob.value)


@pytest.mark.parametrize("compiled", [True, False])
def test_certificates_sound_and_no_larger(monkeypatch, compiled):
    model, edges, data = _instance(zero_every=5, seed=4)
    p_star = _cvxpy_optimum(edges, data)
    monkeypatch.setattr(_compiled, "available", lambda: compiled)
    k = node_kinds(model)
    dense = MinNormSolver(_formed_A(model, k.subspace, k.subspace_bases))
    potential = PotentialSolver(model.incidence,
                                SubspaceConditions.build(model, k.subspace, k.subspace_bases))
    calls = [0]
    plain = potential.normal

    def counted(z):
        calls[0] += 1
        return plain(z)

    potential.normal = counted
    sol = model.solve_exact(certify=False)
    rng = np.random.default_rng(5)
    for scale in (0.0, 1e-6, 1e-3, 1e-1):
        W = sol.weights + scale * rng.standard_normal(sol.weights.shape)
        U = sol.flows + scale * rng.standard_normal(sol.flows.shape)
        gaps = {}
        for name, solver in (("dense", dense), ("potential", potential)):
            model.cache.put("cert_subspace", solver)
            cert = model.certify(W, U)
            assert cert.dual_feasible, cert.summary()
            gaps[name] = cert.gap
        true_sub = model.objective(W) - p_star
        tol = 1e-9 * max(1.0, abs(p_star))
        assert gaps["potential"] >= true_sub - tol, (scale, gaps, true_sub)
        assert gaps["potential"] <= gaps["dense"] + tol, (scale, gaps)
    assert calls[0] > 0  # the perturbed flows were corrected through the potentials


def test_widths_without_the_field():
    """Conditions built without ``widths`` (as a caller may): read off ``Npad`` and ``cols``."""
    model, _, _ = _instance(zero_every=5)
    k = node_kinds(model)
    cond = SubspaceConditions.build(model, k.subspace, k.subspace_bases)
    assert cond.cols is not None  # mixed widths
    bare = SubspaceConditions(cond.nodes, cond.Npad, cond.cols, cond.diag, cond.n, cond.d)
    np.testing.assert_array_equal(bare._widths(len(k.subspace)), cond.widths)
    L = (sp.csr_matrix(model.incidence).T @ sp.csr_matrix(model.incidence)).tocsr()
    z = np.random.default_rng(4).standard_normal(cond.num_rows)
    np.testing.assert_array_equal(bare.normal_kernel(L)(z), cond.normal_kernel(L)(z))


@pytest.mark.slow
def test_soundness_instances_through_the_conjugate_gradients(monkeypatch):
    """The soundness suite's instances (``tests/_soundness.py``, its own CVXPY references)
    with step 2 forced onto :class:`PotentialSolver` wherever there are subspace or affine
    conditions (``DENSE_MAX = RANGE_MAX = 0``; the cached gradient solver then runs
    :class:`MinNormSolver`'s conjugate gradients too): no unsound certificate.
    ``GTV_SOUNDNESS_CG_COUNT`` seeds per family (default 5)."""
    monkeypatch.setattr(subspace_mod, "DENSE_MAX", 0)
    monkeypatch.setattr(subspace_mod, "RANGE_MAX", 0)
    built = []
    plain = subspace_mod.subspace_solver

    def counted(model, nodes, bases):
        built.append(plain(model, nodes, bases))
        return built[-1]

    monkeypatch.setattr("gtvmodel.certificates.repair.subspace_solver", counted)
    monkeypatch.setattr("gtvmodel.certificates.kinds.subspace_solver", counted)
    count = int(os.environ.get("GTV_SOUNDNESS_CG_COUNT", "5"))
    bad = []
    for family in ("mixed", "stiff", "zero_reg"):
        for seed in range(count):
            out = S.run_instance(S.random_instance(seed, family), seed,
                                 exact_rtol=S.EXACT_RTOL.get(family, 1e-6))
            bad += [(family, seed, c, n) for c, n in out.failures if S.is_soundness_failure(c)]
    assert not bad, bad
    assert built and all(isinstance(s, PotentialSolver) for s in built)


def test_alternation_evaluates_the_excess_once_per_round():
    """``alternate_rounds`` reuses the excess after a correction as the next round's test
    before its projection: ``rounds + 1`` evaluations when no round ends it (was ``2
    rounds``), 2 when the first does; projections and corrections as before.  Every
    correction but the last round's may stop early (``c``: loose, ``C``: full); a loose one
    after which the capacities hold is finished by a full one."""
    def run(excesses):
        seen, log = iter(excesses), []

        def excess(U):
            log.append("e")
            return next(seen)

        def project(U):
            log.append("p")
            return U + 1

        def correct(U, loose):
            log.append("c" if loose else "C")
            return U * 2, True, loose

        U, did_cap, did_sub = alternate_rounds(0, excess, project, correct, 1.0, 4)
        return U, did_cap, did_sub, "".join(log)

    big = 1.0
    assert run([big] * 5) == (30, True, True, "epcepcepcepCe")
    assert run([big, 0.5 * CAP_RTOL]) == (4, True, True, "epceC")
    assert run([0.0, 0.0]) == (0, False, True, "eceC")
