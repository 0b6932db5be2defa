"""The data-only factors of the data-fit conjugate split are cached (issue 30 item 3).

:func:`~gtvmodel.terms.losses.datafit_conjugate_split` corrects the row duals by a
minimum-norm step through ``(B_k^T B_k)^+``, ``B_k = diag(c) X_k``: a function of the data
alone.  The squared and data-fit batches pass the eigen-decompositions they already cache
(``gram``) instead of forming and pseudo-inverting ``B_k^T B_k`` in every certificate.  Checked
here: the same values as the formed pseudo-inverse (to 1e-12 relative), upper bounds of the
conjugate written independently in CVXPY (the minimum over the row duals), the same gaps with
the cache switched off, and no stale factors after ``set_data``.
"""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
import gtvmodel.terms.losses.batches as batches
from gtvmodel.certificates.kinds import node_kinds
from gtvmodel.terms.losses import LossBatch, SquaredLoss, datafit_conjugate_split

D = 6


def _rows(rng: np.random.Generator, k: int, m: int, ill: bool
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``k`` nodes of ``m`` rows each (columns scaled over 4 decades when ``ill``)."""
    X = rng.standard_normal((k, m, D))
    if ill:
        X *= np.exp(rng.uniform(-4.6, 4.6, (k, 1, D)))
    y = rng.standard_normal((k, m))
    rn = np.repeat(np.arange(k), m)
    return X.reshape(-1, D), y.ravel(), np.full(k * m, 1.0 / m), rn


def _conjugate_cvx(X: np.ndarray, y: np.ndarray, s: np.ndarray) -> float:
    """``h*(s)`` of ``h(w) = (1/m) ||y - X w||^2`` written independently: ``min (1/m) sum_r
    (v_r y_r + v_r^2 / 4)`` over the row duals with ``X^T v / m = s`` (Clarabel, tight)."""
    m = X.shape[0]
    v = cp.Variable(m)
    prob = cp.Problem(cp.Minimize((y @ v + cp.sum_squares(v) / 4) / m), [X.T @ v / m == s])
    prob.solve(solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    assert prob.status == cp.OPTIMAL, prob.status
    return float(prob.value)


@pytest.mark.parametrize("m,ill", [(3, False), (3, True), (9, False), (9, True)])
def test_cached_factors_split_equals_the_formed_pseudo_inverse(m, ill):
    """Demands in ``range(X_k^T)`` read off perturbed maximizers (so the correction runs on
    every node): the split through the cached factors equals the one through the formed
    ``(B^T B)^+`` and bounds the CVXPY conjugate from above, tightly."""
    rng = np.random.default_rng(7 + m + 10 * ill)
    k = 12
    X, y, c, rn = _rows(rng, k, m, ill)
    losses = [SquaredLoss(X[rn == j], y[rn == j]) for j in range(k)]
    batch = LossBatch(SquaredLoss, np.arange(k), losses, k, D).seal()
    data = batch.squared_data()
    gram = (data["e"] / m, data["B"])
    v0 = rng.standard_normal(k * m)
    S = np.zeros((k, D))
    np.add.at(S, rn, (c * v0)[:, None] * X)  # s_k = X_k^T v0_k / m: inside dom h*
    kappa = np.zeros(k)
    W = batches.squared_maximizers(data["e"], data["B"], data["q"], kappa, S)
    W = W + 1e-3 * rng.standard_normal(W.shape)  # a far-off maximizer: the correction runs
    plain = datafit_conjugate_split(SquaredLoss, X, y, None, c, rn, kappa, S, W)
    cached = datafit_conjugate_split(SquaredLoss, X, y, None, c, rn, kappa, S, W, gram=gram)
    scale = np.abs(plain[3]).max()
    np.testing.assert_allclose(cached[0], plain[0], rtol=1e-12, atol=1e-12 * scale)
    np.testing.assert_allclose(cached[1] + cached[2], plain[1] + plain[2], rtol=0,
                               atol=1e-12 * np.abs(S).max())
    for j in range(k):
        ref = _conjugate_cvx(X[rn == j], y[rn == j], S[j])
        # an upper bound of h*(s - rho), rho at rounding level (the caller charges it)
        assert np.abs(cached[1][j]).max() <= 1e-10 * np.abs(S[j]).max()
        assert cached[0][j] >= ref - 1e-7 * (1 + abs(ref))
        assert cached[0][j] <= ref + 1e-6 * (1 + abs(ref))


def _model(seed: int, m: int, loss: str) -> tuple[gm.GTVModel, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = 24
    G = nx.connected_watts_strogatz_graph(n, 4, 0.3, seed=seed)
    X = rng.standard_normal((n, m, D)) * np.exp(rng.uniform(-2, 2, (n, 1, D)))
    y = np.einsum("nmd,nd->nm", X, rng.standard_normal((n, D))) + 0.1 * rng.standard_normal(
        (n, m))
    if loss == "logistic":
        y = np.sign(y)
    model = gm.GTVModel(G, dim=D, penalty=gm.Norm2(), lam=0.2)
    model.set_data(X, y, loss)
    return model, X, y


@pytest.mark.parametrize("loss,m", [("squared", 3), ("squared", 8), ("logistic", 3)])
def test_certificates_equal_without_the_cache(monkeypatch, loss, m):
    """The gaps of candidates (an Algorithm 1 iterate of the squared losses on the same
    samples) with the cached factors and with the pseudo-inverse formed in every call (the
    code before the cache), to 1e-12 relative."""
    model, X, y = _model(3, m, loss)
    ref_model = gm.GTVModel(model.graph, dim=D, penalty=gm.Norm2(), lam=0.2)
    ref_model.set_data(X, y, "squared")
    r = ref_model.solve_primal_dual(max_iter=40, tol=0, record_every=None)
    got = [gm.certify(model, r.weights, U, fallback=False).gap for U in (r.flows, None)]
    split = batches.datafit_conjugate_split
    seen = []

    def uncached(*args, **kwargs):
        seen.append(kwargs.pop("gram", None) is not None or len(args) > 10)
        return split(*args[:10], **kwargs)

    monkeypatch.setattr(batches, "datafit_conjugate_split", uncached)
    ref = [gm.certify(model, r.weights, U, fallback=False).gap for U in (r.flows, None)]
    assert seen and all(seen)  # the cache was in use, and is switched off here
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_set_data_drops_the_cached_factors(monkeypatch):
    """After ``set_data`` with new samples the certificate uses the new data's factors: its
    gap equals a fresh model's bit for bit, and the factors it is handed are those of the new
    Gram matrices (a stale pseudo-inverse would give the old data's)."""
    model, X, y = _model(5, 3, "squared")
    r = model.solve_primal_dual(max_iter=30, tol=0, record_every=None)
    old = gm.certify(model, r.weights, r.flows, fallback=False).gap
    assert node_kinds(model).groups  # the group (and its factors) is cached on the model
    rng = np.random.default_rng(11)
    X2 = X * np.exp(rng.uniform(-1, 1, X.shape[:1] + (1, D)))
    X2[:, :, 0] += 1.0
    model.set_data(X2, y, "squared")
    split = batches.datafit_conjugate_split
    handed = []

    def spy(*args, **kwargs):
        handed.append(args[10])
        return split(*args, **kwargs)

    monkeypatch.setattr(batches, "datafit_conjugate_split", spy)
    new = gm.certify(model, r.weights, r.flows, fallback=False).gap
    monkeypatch.setattr(batches, "datafit_conjugate_split", split)
    fresh = gm.GTVModel(model.graph, dim=D, penalty=gm.Norm2(), lam=0.2)
    fresh.set_data(X2, y, "squared")
    assert new == gm.certify(fresh, r.weights, r.flows, fallback=False).gap
    assert new != old
    e, V = handed[0]
    G = np.einsum("nmi,nmj->nij", X2, X2) / 9.0  # sum_r c_r^2 x_r x_r^T, c_r = 1/3
    np.testing.assert_allclose(np.einsum("kij,kj,klj->kil", V, e, V), G, rtol=0,
                               atol=1e-12 * np.abs(G).max())
