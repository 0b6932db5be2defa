"""Issue 16, item 2: certificates at scale and the stopping rule's detection delay.

* The complement solver of the subspace conditions (:class:`RangeSolver`, ``m_i < d``) gives the
  same minimum-norm flow correction as the global one (:class:`MinNormSolver`), and its
  certificates are no larger than the old path's and never below the true suboptimality,
  computed by an independent per-node CVXPY formulation (``tests/_refs.py``).
* The certificate schedule certifies a gap below ``tol`` by ``1.1 k`` when it first happens at
  iteration ``k``, whatever the ``certificate_budget``; ``"converged"`` only when detected.
"""

from __future__ import annotations

import numpy as np
import pytest
from _refs import reference_solve

import gtvmodel as gm
from gtvmodel import datasets
from gtvmodel.certificates import subspace as subspace_mod
from gtvmodel.certificates.kinds import node_kinds
from gtvmodel.certificates.subspace import (
    MinNormSolver,
    PotentialSolver,
    RangeSolver,
    SubspaceConditions,
    divergence_rows,
    subspace_solver,
)
from gtvmodel.primal_dual.algorithm import DETECTION_DELAY


def _m_less_than_d(d: int = 30, sizes=(4, 4), rho: float = 1.0, seed: int = 6):
    rng = np.random.default_rng(seed)
    data = datasets.sbm(sizes, p_in=0.6, p_out=0.1, m=10,
                        cluster_weights=rng.integers(0, 2, size=(2, d)).astype(float),
                        sigma=0.1, rho=rho, seed=seed)
    return data, data.model(lam=0.1)


def _stacked_conditions(model):
    k = node_kinds(model)
    full = all(B.shape[1] == model.dim for B in k.subspace_bases)
    A = divergence_rows(model, k.subspace, None if full else k.subspace_bases)
    return k, A


def _range_solver(model, k):
    return RangeSolver(model.incidence, k.subspace, k.subspace_bases,
                       model.structure().components)


def _potential_solver(model, k):
    return PotentialSolver(model.incidence,
                           SubspaceConditions.build(model, k.subspace, k.subspace_bases))


@pytest.mark.parametrize("rho", [1.0, 0.6])  # 0.6: zero-loss nodes (N_i = I) and others mixed
@pytest.mark.parametrize("build", [_range_solver, _potential_solver], ids=["range", "potential"])
def test_solvers_give_the_minimum_norm_correction(rho, build):
    """The complement solver and the conjugate gradients through node potentials (neither
    forms ``A``) apply the stacked conditions ``A`` and give the minimum-norm correction, as a
    dense least-squares solve of the formed ``A``."""
    _, model = _m_less_than_d(rho=rho)
    k, A = _stacked_conditions(model)
    new = build(model, k)
    u = np.random.default_rng(2).standard_normal(A.shape[1])
    np.testing.assert_allclose(new.A @ u, A @ u, atol=1e-12 * np.abs(A @ u).max())
    rng = np.random.default_rng(0)
    b = A @ rng.standard_normal(A.shape[1])
    ref = np.linalg.lstsq(A.toarray(), b, rcond=None)[0]  # dense minimum-norm solution
    delta = new.solve(b)
    assert np.abs(A @ delta - b).max() <= 1e-12 * max(1.0, np.abs(b).max())
    np.testing.assert_allclose(delta, ref, atol=1e-10 * np.abs(ref).max())


def test_subspace_solver_picks_the_complement_when_smaller(monkeypatch):
    _, model = _m_less_than_d()
    k, _ = _stacked_conditions(model)
    assert type(subspace_solver(model, k.subspace, k.subspace_bases)) is MinNormSolver
    monkeypatch.setattr(subspace_mod, "DENSE_MAX", 10)  # 8 (30 - 10) = 160 rows > 10
    assert isinstance(subspace_solver(model, k.subspace, k.subspace_bases), RangeSolver)
    monkeypatch.setattr(subspace_mod, "RANGE_MAX", 10)  # complement system 8 * 10 + 30 > 10
    assert type(subspace_solver(model, k.subspace, k.subspace_bases)) is PotentialSolver


def _certify_with(model, solver, W, U):
    model.cache.put("cert_subspace", solver)
    return model.certify(W, U)


@pytest.mark.parametrize("rho", [1.0, 0.6])
def test_range_certificates_no_larger_and_sound(monkeypatch, rho):
    data, model = _m_less_than_d(rho=rho, seed=3)
    losses = {v: gm.SquaredLoss(X, data.y[v]) for v, X in data.X.items()}
    p_ref, _ = reference_solve(data.graph, losses, model.penalty, model.lam, model.dim)
    sol = model.solve_exact(certify=False)
    k, A = _stacked_conditions(model)
    old = MinNormSolver(A)
    monkeypatch.setattr(subspace_mod, "DENSE_MAX", 10)
    new = subspace_solver(model, k.subspace, k.subspace_bases)
    assert isinstance(new, RangeSolver)
    rng = np.random.default_rng(1)
    for scale in (1e-6, 1e-3, 1e-1):
        W = sol.weights + scale * rng.standard_normal(sol.weights.shape)
        U = sol.flows + scale * rng.standard_normal(sol.flows.shape)
        c_old, c_new = _certify_with(model, old, W, U), _certify_with(model, new, W, U)
        true_sub = model.objective(W) - p_ref
        assert c_new.dual_feasible, c_new.summary()
        assert c_new.gap >= true_sub - 1e-9 * max(1.0, abs(p_ref)), (c_new.gap, true_sub)
        assert c_new.gap <= c_old.gap + 1e-9 * max(1.0, abs(p_ref)), (c_new.gap, c_old.gap)


# --------------------------------------------------------------------- the stopping rule

def _first_crossing(model, tol: float, max_iter: int) -> int:
    """The iteration at which the certified gap first meets ``tol``: certify every iteration."""
    ref = gm.solve_primal_dual(model, max_iter=max_iter, tol=tol, record_every=1,
                               certificate_budget=None)
    assert ref.status == "converged"
    return ref.iterations


@pytest.fixture(scope="module")
def sbm_model():
    return datasets.sbm((8, 8), p_in=0.6, p_out=0.05, m=5, sigma=0.1, seed=2).model(lam=0.05)


def test_stopping_detects_within_ten_percent(sbm_model):
    tol = 1e-6
    k0 = _first_crossing(sbm_model, tol, 5000)
    assert k0 >= 100  # a run long enough for the 10 % to mean something
    # a budget so small that, without the bound on the delay, no certificate after the
    # first would be affordable: the schedule alone must detect the crossing
    res = gm.solve_primal_dual(sbm_model, max_iter=5000, tol=tol, record_every=1,
                               certificate_budget=1e-12)
    assert res.status == "converged"
    assert k0 <= res.iterations <= (1 + DETECTION_DELAY) * k0 + 1, (k0, res.iterations)
    assert res.certificate.success_at(tol)
    # geometric spacing: ~10 certificates up to iteration 10, then one per factor 1.1
    assert len(res.history) <= 12 + np.log(res.iterations) / np.log(1 + DETECTION_DELAY)


def test_max_iter_before_the_crossing_is_not_converged(sbm_model):
    tol = 1e-6
    k0 = _first_crossing(sbm_model, tol, 5000)
    res = gm.solve_primal_dual(sbm_model, max_iter=k0 - 1, tol=tol, record_every=1,
                               certificate_budget=1e-12)
    assert res.status == "max_iter"
    assert not res.certificate.success_at(tol)
    assert res.history.iteration[-1] == k0 - 1
