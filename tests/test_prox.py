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
