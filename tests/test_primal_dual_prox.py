"""Proximal building blocks of Algorithm 1: dual-ball projections, edge dual updates DU (33),
node prox PU (32) fast paths vs the general CVXPY path."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gtvmodel as gm
from gtvmodel.errors import PenaltyError

TIGHT = {"solver": "CLARABEL", "tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12}

NORMS = [gm.Norm2(), gm.Norm1(), gm.NormInf(), gm.NormP(3), gm.NormP(1.5), gm.NormP(1.25),
         gm.NormP(4)]


def _cvx_project(U: np.ndarray, r: np.ndarray, q: float) -> np.ndarray:
    """Independent reference: the projection as one CVXPY problem per row."""
    X = cp.Variable(U.shape)
    qq = "inf" if np.isinf(q) else q
    cons = [cp.norm(X[e], qq) <= r[e] for e in range(U.shape[0])]
    cp.Problem(cp.Minimize(cp.sum_squares(X - U)), cons).solve(**TIGHT)
    return X.value


@pytest.mark.parametrize("pen", NORMS, ids=repr)
def test_project_dual_ball_matches_cvxpy(pen, rng):
    U = 3.0 * rng.standard_normal((25, 4))
    U[0] = 0.0
    U[1, :2] = 0.0
    r = rng.uniform(0.0, 3.0, 25)
    r[2] = 0.0
    r[3] = 1e3
    P = pen.project_dual_ball(U, r)
    assert P.shape == U.shape
    assert np.all(pen.dual_norm(P) <= r * (1 + 1e-14) + 1e-15)
    np.testing.assert_allclose(P[3], U[3], rtol=0, atol=0)  # inside: unchanged
    np.testing.assert_array_equal(P[2], 0.0)  # radius 0
    np.testing.assert_allclose(P, _cvx_project(U, r, pen.q), rtol=0, atol=5e-8)


@pytest.mark.parametrize("p", [1.2, 1.5, 3.0, 7.0])
def test_lq_projection_kkt_to_machine_precision(p, rng):
    """The l_q projection solves its KKT system a - x = mu q x^(q-1) to ~1e-12."""
    pen = gm.NormP(p)
    q = pen.q
    U = 3.0 * rng.standard_normal((200, 5))
    r = rng.uniform(0.1, 2.0, 200)
    P = pen.project_dual_ball(U, r)
    out = pen.dual_norm(U) > r
    assert out.sum() > 100
    np.testing.assert_allclose(pen.dual_norm(P)[out], r[out], rtol=1e-13)
    A, X = np.abs(U[out]), np.abs(P[out])
    assert np.all(np.sign(P[out]) * np.sign(U[out]) >= 0)
    big = X > 1e-3 * X.max(axis=1, keepdims=True)
    mu = (A - X) / (q * X ** (q - 1))
    mu_row = np.array([m[b].mean() for m, b in zip(mu, big, strict=True)])
    dev = np.abs(np.where(big, mu - mu_row[:, None], 0.0)).max()
    assert dev <= 1e-10 * mu_row.max()


@settings(deadline=None, max_examples=40)
@given(st.integers(1, 6), st.floats(0.0, 5.0), st.integers(0, 2**31 - 1),
       st.sampled_from([1.0, 1.3, 2.0, 2.5, np.inf]))
def test_projection_is_firmly_a_projection(d, radius, seed, p):
    """Idempotent, feasible, and <u - P(u), z - P(u)> <= 0 for feasible z (variational ineq.)."""
    rng = np.random.default_rng(seed)
    pen = gm.NormP(p)
    U = 4.0 * rng.standard_normal((6, d))
    r = np.full(6, radius)
    P = pen.project_dual_ball(U, r)
    tol = 1e-10 * (1 + radius)
    assert np.all(pen.dual_norm(P) <= radius + tol)
    np.testing.assert_allclose(pen.project_dual_ball(P, r), P, atol=tol)
    Z = pen.project_dual_ball(4.0 * rng.standard_normal((6, d)), r)
    assert np.all(np.einsum("ij,ij->i", U - P, Z - P) <= 1e-8 * (1 + np.abs(U).max() ** 2))


def test_project_dual_ball_bad_input():
    with pytest.raises(PenaltyError, match="edge 1"):
        gm.Norm2().project_dual_ball(np.ones((2, 2)), [1.0, -1.0])
    with pytest.raises(PenaltyError, match="shape"):
        gm.Norm1().project_dual_ball(np.ones((2, 2)), [1.0, 1.0, 1.0])
    with pytest.raises(PenaltyError, match="radius"):
        gm.NormP(3).project_dual_ball(np.ones((1, 2)), [np.nan])


# ---------------------------------------------------------------- edge dual updates DU (33)
DU_PENALTIES = [gm.Norm2(), gm.Norm1(), gm.NormInf(), gm.NormP(3), gm.NormP(1.5),
                gm.SquaredNorm2(), gm.QuadForm([[2.0, 0.5, 0.0], [0.5, 1.0, 0.2],
                                                [0.0, 0.2, 0.7]])]


@pytest.mark.parametrize("pen", DU_PENALTIES, ids=repr)
def test_dual_update_is_prox_of_conjugate(pen, rng):
    """DU(v) = argmin_z (lambda A phi)^*(z) + ||z - v||^2 / (2 sigma), the conjugate taken from
    the penalty's own CVXPY conjugate expression (an independent formulation)."""
    E, d = 12, 3
    V = 2.0 * rng.standard_normal((E, d))
    sigma = rng.uniform(0.1, 2.0, E)
    lamA = rng.uniform(0.05, 1.5, E)
    lamA[0] = 0.0
    got = pen.dual_update(V, sigma, lamA)
    Z = cp.Variable((E, d))
    cost, cons = pen.conjugate_expression(Z, lamA)
    fit = cp.sum(cp.multiply(1.0 / (2.0 * sigma), cp.sum(cp.square(Z - V), axis=1)))
    cp.Problem(cp.Minimize(cost + fit), cons).solve(**TIGHT)
    np.testing.assert_allclose(got, Z.value, rtol=0, atol=1e-7)
    np.testing.assert_array_equal(got[0], 0.0)


@pytest.mark.parametrize("pen", DU_PENALTIES, ids=repr)
def test_moreau_identity_base_path_agrees_with_closed_forms(pen, rng):
    """The generic Moreau path of Penalty.dual_update (via prox_rows) equals each closed form."""
    V = 2.0 * rng.standard_normal((20, 3))
    sigma = rng.uniform(0.1, 2.0, 20)
    lamA = rng.uniform(0.05, 1.5, 20)
    generic = gm.Penalty.dual_update(pen, V, sigma, lamA)
    np.testing.assert_allclose(pen.dual_update(V, sigma, lamA), generic, atol=1e-10)


# ---------------------------------------------------------------- node updates PU (32)
def _prox_model(kind: str, rng) -> gm.GTVModel:
    """A 6-node cycle whose nodes all use one fast path, with varied data/regularizers."""
    import networkx as nx

    d = 3
    model = gm.GTVModel(nx.cycle_graph(6), d, lam=0.1)
    for i in range(6):
        X = rng.standard_normal((2 + i, d))  # m < d at some nodes
        y = np.where(rng.standard_normal(2 + i) > 0, 1.0, -1.0)
        if kind == "squared":
            loss = gm.SquaredLoss(X, 3 * y, l2=0.1 * (i % 2))
        elif kind == "logistic":
            loss = gm.LogisticLoss(4 * X, y, l2=0.1 * (i % 2))
        elif kind == "huber":
            loss = gm.HuberLoss(X, 5 * y, M=0.3 + i / 10, l2=0.1 * (i % 2))
        elif kind == "quadratic":
            loss = gm.QuadraticLoss(3 * rng.standard_normal(d), l1=0.3 * (i % 3), l2=0.2 * (i % 2))
        else:
            loss = gm.ZeroLoss(l1=0.3 * (i % 3), l2=0.2 * (i % 2))
        model.set_loss(i, loss)
        if kind in ("quadratic", "zero"):
            if i == 1:
                model.add_constraint(i, gm.Box(-0.5, [1.0, 2.0, 0.2]))
            elif i == 2:
                model.add_constraint(i, gm.NonNeg())
                model.add_constraint(i, gm.Box(hi=0.8))
            elif i == 3 and not loss.l1:
                model.add_constraint(i, gm.NormBall(0.9, p=2))
            elif i == 5 and not loss.l1:
                model.add_constraint(i, gm.NormBall(0.7, p=3))
    return model


@pytest.mark.parametrize("kind", ["squared", "logistic", "huber", "quadratic", "zero"])
def test_fast_prox_matches_cvxpy_prox(kind, rng):
    """prox="auto" (exact vectorized paths) and prox="cvxpy" (per-group DPP problem at its
    tightest tolerance) agree to 1e-8 on single node updates."""
    from gtvmodel.primal_dual.prox import NodeUpdates

    model = _prox_model(kind, rng)
    fast, slow = NodeUpdates(model, "auto"), NodeUpdates(model, "cvxpy")
    assert fast.describe() == {kind: 6}
    assert slow.describe() == {"cvxpy": 6}
    for scale, taus in ((1.0, (0.01, 0.3, 5.0)), (4.0, (1.0,))):
        for t in taus:
            V = scale * rng.standard_normal((6, 3))
            tau = t * rng.uniform(0.5, 2.0, 6)
            a = fast(V, tau, 10**6, V)
            b = slow(V, tau, 10**6, V)
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-8 * max(1.0, np.abs(b).max()))
            for i in range(6):  # the single-node view gives the same point
                np.testing.assert_allclose(fast.node(i, V[i], tau[i], 0, V[i]), a[i],
                                           rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["logistic", "huber"])
def test_newton_prox_is_stationary_to_machine_precision(kind, rng):
    """The vectorized Newton prox satisfies grad L(z) + 2 kappa z + (z - v)/tau = 0 to ~1e-12."""
    model = _prox_model(kind, rng)
    from gtvmodel.terms.losses import LossBatch

    losses = [model.loss_at(i) for i in range(6)]
    batch = LossBatch(type(losses[0]), np.arange(6), losses, 6, 3)
    V = 5.0 * rng.standard_normal((6, 3))
    tau = np.array([1e-3, 0.1, 1.0, 10.0, 100.0, 1e3])
    Z = batch.prox(V, tau)
    for i, loss in enumerate(losses):
        g = loss.gradient(Z[i]) + (Z[i] - V[i]) / tau[i]
        assert np.abs(g).max() <= 1e-11 * max(1.0, np.abs(V[i]).max() / tau[i])


@pytest.mark.parametrize("kind", ["logistic", "huber"])
def test_newton_prox_warm_started_by_the_last_hessian_equals_cold_calls(kind, rng):
    """Algorithm 1's repeated calls start Newton from the last prox point moved to first order
    (the last Hessian, corrected for a change of the steps); nearby points, a far jump, the
    same point again and new steps: every answer equals a fresh batch's and is stationary."""
    model = _prox_model(kind, rng)
    from gtvmodel.terms.losses import LossBatch

    losses = [model.loss_at(i) for i in range(6)]

    def make():
        return LossBatch(type(losses[0]), np.arange(6), losses, 6, 3)

    batch, tau = make(), np.array([1e-2, 0.1, 1.0, 10.0, 100.0, 0.5])
    V = 2.0 * rng.standard_normal((6, 3))
    Z = batch.prox(V, tau)
    for move, factor in ((0.01, 1.0), (0.01, 1.0), (30.0, 1.0), (0.0, 1.0), (0.1, 1.0),
                         (0.05, 2.0), (0.02, 0.3)):
        V, tau = V + move * rng.standard_normal(V.shape), tau * factor
        Z = batch.prox(V, tau, W0=Z)
        np.testing.assert_allclose(Z, make().prox(V, tau), rtol=0, atol=1e-12)
        for i, loss in enumerate(losses):
            g = loss.gradient(Z[i]) + (Z[i] - V[i]) / tau[i]
            assert np.abs(g).max() <= 1e-11 * max(1.0, np.abs(V[i]).max() / tau[i])


def test_loss_prox_single_node_and_errors(rng):
    X = rng.standard_normal((4, 2))
    loss = gm.SquaredLoss(X, X @ [1.0, 2.0], l2=0.3)
    v = np.array([0.5, -1.0])
    Q, q = X.T @ X / 4, X.T @ (X @ [1.0, 2.0]) / 4
    expected = np.linalg.solve((1 + 2 * 0.7 * 0.3) * np.eye(2) + 2 * 0.7 * Q, v + 2 * 0.7 * q)
    np.testing.assert_allclose(loss.prox(v, 0.7), expected, atol=1e-13)  # (69) with the 1/m
    hinge = gm.HingeLoss(X, [1.0, -1.0, 1.0, 1.0])
    z = hinge.prox(v, 0.5)  # the batched dual active-set path (PiecewiseLinearBatch)
    obj = lambda w: hinge.value(w) + ((w - v) ** 2).sum() / 1.0  # noqa: E731
    for _ in range(20):
        assert obj(z) <= obj(z + 1e-3 * rng.standard_normal(2)) + 1e-9
    with pytest.raises(gm.ParameterError):
        loss.prox(v, 0.0)
    with pytest.raises(gm.DataError):
        loss.prox(np.ones(3), 1.0)


def test_constraint_projections(rng):
    W = 3.0 * rng.standard_normal((5, 3))
    np.testing.assert_array_equal(gm.Box(-1, [0, 1, 2]).project(W),
                                  np.clip(W, -1, [0, 1, 2]))
    np.testing.assert_array_equal(gm.NonNeg().project(W[0]), np.maximum(W[0], 0))
    P = gm.NormBall(1.5, p=2).project(W)
    np.testing.assert_allclose(np.linalg.norm(P, axis=1),
                               np.minimum(np.linalg.norm(W, axis=1), 1.5))
    np.testing.assert_allclose(gm.NormBall(2.0, p=1).project(W),
                               gm.NormInf().project_dual_ball(W, np.full(5, 2.0)))
    x = cp.Variable(3)
    sym = gm.SymbolicConstraint(x >= 0, x)
    with pytest.raises(gm.UnsupportedError):
        sym.project(W[0])


@pytest.mark.parametrize("chunk", [1, 2, 5, 17, 10**6])
def test_grouped_gram_chunks(chunk, rng):
    """The batched per-node Gram matrices (squared-loss Q_i, Newton Hessians) are exact for
    every chunking of the stacked rows."""
    from gtvmodel.terms.losses import grouped_gram

    ms = rng.integers(1, 7, 40)
    starts = np.concatenate([[0], np.cumsum(ms)[:-1]])
    X = rng.standard_normal((ms.sum(), 3))
    w = rng.uniform(size=ms.sum())
    ref = np.array([(X[s:s + m] * w[s:s + m, None]).T @ X[s:s + m]
                    for s, m in zip(starts, ms, strict=True)])
    np.testing.assert_allclose(grouped_gram(X, w, starts, chunk_rows=chunk), ref, atol=1e-13)
