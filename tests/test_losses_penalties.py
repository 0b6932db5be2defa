"""Numeric values, gradients and curvature constants of the library losses and penalties.

Each loss's numpy value is checked against its own CVXPY expression evaluated at the same point,
its gradient against central finite differences, and its smoothness/strong-convexity constants
against finite-difference Hessians (relative 1e-6 on values, 1e-5 on gradients).
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gtvmodel as gm
from gtvmodel.terms.losses import LossBatch
from gtvmodel.testing import library_losses

D = 3


def all_losses(rng: np.random.Generator, reg: dict) -> list[gm.Loss]:
    """One loss of every library kind (gtvmodel.testing's registry), in ``IDS`` order."""
    return list(library_losses(rng, D, 7, **reg).values())


REGS = [{}, {"l1": 0.3}, {"l2": 0.4}, {"l1": 0.1, "l2": 0.2}]
IDS = list(library_losses(np.random.default_rng(0), D, 7))
_PROBE = dict(zip(IDS, all_losses(np.random.default_rng(0), {}), strict=True))
#: The kinds by the losses' own facts: differentiable, not, and with data (batched);
#: differentiable with a globally Lipschitz gradient (finite constants of Theorem 2).
SMOOTH = [k for k, ls in _PROBE.items() if ls.base_smooth]
LIPSCHITZ = [k for k, ls in _PROBE.items() if ls.lipschitz]
NONSMOOTH = [k for k, ls in _PROBE.items() if not ls.base_smooth]
WITH_DATA = [k for k, ls in _PROBE.items() if ls.has_data]


def cvx_value(loss: gm.Loss, w: np.ndarray) -> float:
    x = cp.Variable(D)
    x.value = w
    return float(loss.expression(x).value)


def num_grad(f, w, h=1e-6):
    g = np.zeros_like(w)
    for j in range(len(w)):
        e = np.zeros_like(w)
        e[j] = h
        g[j] = (f(w + e) - f(w - e)) / (2 * h)
    return g


@pytest.mark.parametrize("reg", REGS, ids=["plain", "l1", "l2", "l1l2"])
@pytest.mark.parametrize("k", range(len(IDS)), ids=IDS)
def test_value_matches_cvxpy_expression(k, reg):
    rng = np.random.default_rng(k)
    loss = all_losses(rng, reg)[k]
    for _ in range(5):
        w = 2 * rng.normal(size=D)
        assert loss.value(w) == pytest.approx(cvx_value(loss, w), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("reg", [{}, {"l2": 0.4}], ids=["plain", "l2"])
@pytest.mark.parametrize("k", [IDS.index(k) for k in SMOOTH], ids=SMOOTH)
def test_gradient_matches_finite_differences(k, reg):
    rng = np.random.default_rng(10 + k)
    loss = all_losses(rng, reg)[k]
    assert loss.smooth
    for _ in range(5):
        w = 2 * rng.normal(size=D)
        np.testing.assert_allclose(loss.gradient(w), num_grad(loss.value, w), rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize("k", [IDS.index(k) for k in NONSMOOTH], ids=NONSMOOTH)
def test_nonsmooth_losses_have_no_gradient(k):
    loss = all_losses(np.random.default_rng(0), {})[k]
    assert not loss.smooth and loss.smoothness == float("inf")
    with pytest.raises(gm.UnsupportedError):
        loss.gradient(np.zeros(D))
    smooth_with_l1 = gm.SquaredLoss(np.eye(D), np.ones(D), l1=0.1)
    assert not smooth_with_l1.smooth
    with pytest.raises(gm.UnsupportedError):
        smooth_with_l1.gradient(np.zeros(D))


@pytest.mark.parametrize("reg", [{}, {"l2": 0.4}], ids=["plain", "l2"])
@pytest.mark.parametrize("k", [IDS.index(k) for k in LIPSCHITZ], ids=LIPSCHITZ)
def test_constants_bound_the_hessian(k, reg):
    """alpha I <= H_lo <= hess L(w) <= H_hi <= beta I at random points (finite differences),
    with equality where the Hessian is constant."""
    rng = np.random.default_rng(20 + k)
    loss = all_losses(rng, reg)[k]
    lo, hi = loss.hessian_bounds(D)
    beta, alpha = loss.smoothness, loss.strong_convexity
    assert beta == pytest.approx(np.linalg.eigvalsh(hi)[-1], rel=1e-12)
    assert alpha <= np.linalg.eigvalsh(lo)[0] + 1e-12
    for _ in range(5):
        w = 2 * rng.normal(size=D)
        H = np.column_stack([num_grad(lambda v, j=j: loss.gradient(v)[j], w, 1e-5)
                             for j in range(D)])
        H = 0.5 * (H + H.T)
        assert np.linalg.eigvalsh(hi - H)[0] >= -1e-5
        assert np.linalg.eigvalsh(H - lo)[0] >= -1e-5
        assert np.linalg.eigvalsh(H)[-1] <= beta + 1e-5
        assert np.linalg.eigvalsh(H)[0] >= alpha - 1e-5
    kappa = reg.get("l2", 0.0)
    X = getattr(loss, "X", None)
    if IDS[k] == "squared":  # constant Hessian 2 X^T X / m + 2 kappa I
        H = 2 * X.T @ X / X.shape[0] + 2 * kappa * np.eye(D)
        assert beta == pytest.approx(np.linalg.eigvalsh(H)[-1], rel=1e-10)
        assert alpha == pytest.approx(np.linalg.eigvalsh(H)[0], rel=1e-10)
    if IDS[k] == "logistic":  # beta = lambda_max(X^T X) / (4 m) (+ 2 kappa); alpha = 2 kappa
        assert beta == pytest.approx(np.linalg.eigvalsh(X.T @ X)[-1] / (4 * X.shape[0])
                                     + 2 * kappa, rel=1e-10)
        assert alpha == pytest.approx(2 * kappa)
    if IDS[k] == "quadratic":
        assert beta == pytest.approx(2 + 2 * kappa) and alpha == pytest.approx(2 + 2 * kappa)


def test_huber_matches_cvxpy_huber_with_M():
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(9, D)), rng.normal(size=9)
    loss = gm.HuberLoss(X, y, M=0.3)
    x = cp.Variable(D)
    for _ in range(3):
        w = rng.normal(size=D)
        x.value = w
        assert loss.value(w) == pytest.approx(float(cp.sum(cp.huber(X @ x - y, 0.3)).value) / 9,
                                              rel=1e-12)


@pytest.mark.parametrize("k", [IDS.index(k) for k in WITH_DATA], ids=WITH_DATA)
def test_batch_values_and_gradients_match_single_losses(k):
    """LossBatch (the vectorized path) reuses the row formulas: same numbers as each loss."""
    rng = np.random.default_rng(30 + k)
    n = 5
    nodes = np.array([0, 2, 3])
    losses = [all_losses(np.random.default_rng(40 + i), {})[k] for i in range(3)]
    batch = LossBatch(type(losses[0]), nodes, losses, n, D)
    W = rng.normal(size=(n, D))
    vals = batch.values(W)
    for pos, loss in zip(nodes, losses, strict=True):
        assert vals[pos] == pytest.approx(loss._base_value(W[pos]), rel=1e-12)
    assert np.all(vals[[1, 4]] == 0)
    if losses[0].base_smooth:
        G = batch.gradients(W)
        for pos, loss in zip(nodes, losses, strict=True):
            np.testing.assert_allclose(G[pos], loss._base_gradient(W[pos]), rtol=1e-12)


@settings(deadline=None, max_examples=25)
@given(
    w=st.lists(st.floats(-50, 50), min_size=D, max_size=D),
    k=st.integers(0, len(IDS) - 1),
    l1=st.sampled_from([0.0, 0.5]),
    l2=st.sampled_from([0.0, 0.25]),
)
def test_value_property_against_cvxpy(w, k, l1, l2):
    """Property: value == CVXPY value, including extreme margins (logistic overflow)."""
    loss = all_losses(np.random.default_rng(k), {"l1": l1, "l2": l2})[k]
    w = np.array(w)
    assert loss.value(w) == pytest.approx(cvx_value(loss, w), rel=1e-9, abs=1e-9)


PENALTIES = [gm.Norm2(), gm.Norm1(), gm.NormInf(), gm.NormP(3), gm.NormP(1.5),
             gm.SquaredNorm2(), gm.QuadForm([[2.0, 0.3, 0.0], [0.3, 1.0, 0.1], [0.0, 0.1, 3.0]])]


@pytest.mark.parametrize("pen", PENALTIES, ids=repr)
def test_penalty_rows_value_matches_expression(pen):
    rng = np.random.default_rng(5)
    V = rng.normal(size=(6, D))
    Z = cp.Variable((6, D))
    Z.value = V
    np.testing.assert_allclose(pen.rows_value(V), pen.rows_expression(Z).value, rtol=1e-9)
    weights = rng.uniform(0.5, 2.0, size=6)
    assert float(pen.weighted_expression(Z, weights).value) == pytest.approx(
        weights @ pen.rows_value(V), rel=1e-9)
    assert pen.value(V[0]) == pytest.approx(pen.rows_value(V)[0], rel=1e-12)
    assert pen.value(np.zeros(D)) == 0.0


@pytest.mark.parametrize("pen", [p for p in PENALTIES if p.is_norm], ids=repr)
def test_dual_norm_is_the_dual(pen):
    """||u||_* = max_{||v|| <= 1} u^T v: Hoelder holds and the dual-norm expression agrees."""
    rng = np.random.default_rng(6)
    U, V = rng.normal(size=(50, D)), rng.normal(size=(50, D))
    assert np.all((U * V).sum(axis=1) <= pen.dual_norm(U) * pen.rows_value(V) + 1e-12)
    Uc = cp.Variable((50, D))
    Uc.value = U
    np.testing.assert_allclose(pen.dual_norm_expression(Uc).value, pen.dual_norm(U), rtol=1e-9)


def test_penalty_equality_and_hash():
    assert gm.NormP(3) == gm.NormP(3.0) and gm.NormP(3) != gm.NormP(4)
    assert hash(gm.Norm2()) == hash(gm.Norm2())
    assert gm.QuadForm(np.eye(2)) == gm.QuadForm(np.eye(2))


def test_constraint_violation_measures():
    w = np.array([-0.5, 2.0])
    assert gm.Box(-1, 1).violation(w) == pytest.approx(1.0)
    assert gm.NonNeg().violation(w) == pytest.approx(0.5)
    assert gm.NormBall(1.0, p=1).violation(w) == pytest.approx(1.5)
    assert gm.NormBall(3.0).violation(w) == 0.0
