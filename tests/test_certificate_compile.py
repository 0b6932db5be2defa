"""Certificates at scale (issue 16 item 2): the certificate problems hold no CVXPY Parameter
of per-node size above :data:`gtvmodel._cvx.DPP_MAX_ENTRIES` (DPP's tensor grows with its
square: benchmarks/RESULTS.md), keep compile-once below it, and a cold certificate after a run
repeats none of the run's eigen-decompositions."""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import _cvx
from gtvmodel.certificates.repair import domain_scale, project_flows
from gtvmodel.certificates.value import dual_value
from gtvmodel.duality.conic import stacked_conjugates

D = 3


def _general_model(n: int = 8) -> gm.GTVModel:
    """Squared losses with boxes (the certificate's CVXPY node-conjugate path)."""
    rng = np.random.default_rng(0)
    model = gm.GTVModel(nx.cycle_graph(n), D, penalty=gm.Norm2(), lam=0.3)
    for v in range(n):
        X = rng.standard_normal((4, D))
        model.set_loss(v, gm.SquaredLoss(X, X @ np.ones(D) + rng.standard_normal(4)))
        model.add_constraint(v, gm.Box(-0.8, 0.8))
    return model


def _conic_model(n: int = 6) -> tuple[gm.GTVModel, np.ndarray]:
    rng = np.random.default_rng(1)
    A = rng.standard_normal((n, D))
    model = gm.GTVModel(nx.path_graph(n), D, lam=0.5)
    for v in range(n):
        model.set_loss(v, cp.sum_squares(model.var(v) - A[v]))
    return model, A


def _parameter_sizes(problems: list[cp.Problem]) -> set[int]:
    return {p.size for prob in problems for p in prob.parameters()}


def _demands(n: int, seed: int) -> np.ndarray:
    return 0.5 * np.random.default_rng(seed).standard_normal((n, D))


@pytest.mark.parametrize("limit", [0, None])
def test_stacked_conic_conjugates_against_closed_form(limit, monkeypatch, count_problems):
    """``(||x - a||^2)^*(s) = s^T a + ||s||^2 / 4``, through the per-call problem (``limit``
    0: no Parameter) and the cached DPP one (default: built once, re-solved)."""
    if limit is not None:
        monkeypatch.setattr(_cvx, "DPP_MAX_ENTRIES", limit)
    model, A = _conic_model()
    nodes = list(range(model.num_nodes))
    for seed in (2, 3):
        S = _demands(len(nodes), seed)
        with count_problems() as made:
            vals, tau = stacked_conjugates(model, nodes, S)
        ref = (S * A).sum(axis=1) + (S * S).sum(axis=1) / 4
        assert np.allclose(vals, ref, rtol=1e-7, atol=1e-7) and 0 <= tau < 1e-5
        if limit is not None:
            assert made and _parameter_sizes(made) == set()
        elif seed == 3:
            assert made == []  # compile-once below the limit
    sizes = {p.size for p in model.cache.get("conic_stacked")[tuple(nodes)].constraints
             for p in p.parameters()}
    assert sizes == set()


def _certificate_pieces(model: gm.GTVModel) -> tuple[dict, float]:
    sol = model.solve_exact()
    U = sol.flows + 0.05 * np.random.default_rng(4).standard_normal(sol.flows.shape)
    U = project_flows(model, U)
    out = dual_value(model, U, np.full(model.num_nodes, np.inf), weights=sol.weights)
    theta = domain_scale(model, -(model.incidence.T @ U), np.arange(model.num_nodes))
    return out, theta


def test_general_and_gauge_problems_without_parameters_agree(monkeypatch, count_problems):
    """Above the limit the node-conjugate problem and the domain-scaling LP state the demands
    and radii as constants per call: no Parameter but lambda's, the same bounds as the cached
    DPP problems, and the certificate stays above the true suboptimality."""
    ref, theta_ref = _certificate_pieces(_general_model())
    monkeypatch.setattr(_cvx, "DPP_MAX_ENTRIES", 0)
    model = _general_model()
    with count_problems() as made:
        out, theta = _certificate_pieces(model)
    assert _parameter_sizes(made) <= {1}
    assert model.cache.get("cert_general").dpp is None and model.cache.get("cert_gauge").dpp is None
    assert np.isfinite(ref["value"]) and theta_ref == pytest.approx(1.0)
    assert out["value"] == pytest.approx(ref["value"], rel=1e-6, abs=1e-8)
    assert theta == pytest.approx(theta_ref, abs=1e-9)
    # the certificate: gap >= P(W) - P* with P* from an independent CVXPY problem
    W = model.solve_exact().weights + 0.01
    cert = model.certify(W)
    st = model.structure()
    w = cp.Variable((model.num_nodes, D))
    Dm = model.incidence
    cost = sum(cp.sum_squares(ls.X @ w[i] - ls.y) / ls.X.shape[0]
               for i, ls in enumerate(model.loss_at(i) for i in range(model.num_nodes)))
    tv = model.lam * cp.sum(cp.multiply(model.edge_weights, cp.norm(Dm @ w, 2, axis=1)))
    ref_prob = cp.Problem(cp.Minimize(cost + tv), [w <= 0.8, w >= -0.8])
    ref_prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    assert st.box is not None and cert.gap >= model.objective(W) - ref_prob.value - 1e-9


def test_cached_problems_stay_within_the_parameter_limit():
    """Below the limit the cached problems keep their (k, d) Parameters, never more than
    ``DPP_MAX_ENTRIES`` numbers of them."""
    model = _general_model()
    _certificate_pieces(model)
    for slot in ("cert_general", "cert_gauge"):
        entry = model.cache.get(slot)
        assert entry.dpp is not None
        assert sum(p.size for p in entry.dpp[0].parameters()) <= _cvx.DPP_MAX_ENTRIES + 2


def test_cold_certificate_after_a_run_repeats_no_eigendecomposition(monkeypatch):
    """Algorithm 1's squared-loss prox and the certificate share the batch's Gram matrices and
    eigen-decompositions (one per model version)."""
    rng = np.random.default_rng(5)
    n = 12
    model = gm.GTVModel(nx.cycle_graph(n), D, lam=0.2)
    for v in range(n):
        X = rng.standard_normal((5, D))
        model.set_loss(v, gm.SquaredLoss(X, X @ np.ones(D)))
    res = gm.solve_primal_dual(model, max_iter=30, tol=0, record_every=None)
    calls = []
    eigh = np.linalg.eigh

    def counting(a, *args, **kwargs):
        calls.append(np.shape(a))
        return eigh(a, *args, **kwargs)

    monkeypatch.setattr(np.linalg, "eigh", counting)
    cert = model.certify(res.weights, res.flows)
    assert not [s for s in calls if len(s) == 3 and s[0] == n]
    monkeypatch.setattr(np.linalg, "eigh", eigh)
    fresh = gm.GTVModel(nx.cycle_graph(n), D, lam=0.2)
    fresh.set_losses({v: model.loss_at(v) for v in range(n)})
    ref = fresh.certify(res.weights, res.flows)
    assert cert.gap == pytest.approx(ref.gap, rel=1e-12, abs=1e-15)
