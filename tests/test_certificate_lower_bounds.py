"""The certificate asks each loss for its lower bound (``LossFacts.lower_bound``) instead of
assuming every loss is ``>= 0``: the dual value's zero-demand rule (``h_i*(0) <= 0`` where
the demand ``s_i`` is 0) and the radii's lower bounds hold only for nonnegative losses.  A
data-fit loss that can be negative -- the Poisson loss without its deviance shift,
``exp(t) - y t``, whose minimum ``y - y log y`` is negative for ``y > e`` -- must still get a
sound gap; the reference optimum is a plain CVXPY problem written here."""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel.certificates.kinds import loss_lower_bounds
from gtvmodel.terms.losses import LossFacts
from gtvmodel.terms.poisson import PoissonLoss, PoissonRow


class _RawPoissonRow(PoissonRow):
    """``exp(t) - y t`` (no shift): negative where ``y > e`` near ``t = log y``."""

    @staticmethod
    def _ell(t, y, p):
        return np.exp(t) - y * t

    @staticmethod
    def _ell_cvx(t, y, p):
        return cp.exp(t) - cp.multiply(y, t)

    @staticmethod
    def _ell_conj(v, y, p):
        a = np.maximum(v + y, 0.0)
        return np.where(a > 0, a * np.log(np.where(a > 0, a, 1.0)), 0.0) - a

    @staticmethod
    def _ell_conj_cvx(v, y, p):
        a = v + y
        return -cp.entr(a) - a


class _RawPoissonLoss(PoissonLoss):
    """A user's loss class that may be negative and says so (lower bound unknown); no
    ``kind`` of its own, so it stays out of the file registry."""

    row = _RawPoissonRow()
    class_facts = LossFacts(lipschitz_gradient=False, exact_prox=True, lower_bound=-np.inf)


def _model(rng, y_scale):
    G = nx.path_graph(4)
    model = gm.GTVModel(G, dim=2, penalty=gm.Norm2(), lam=0.5)
    data = {}
    for i in G.nodes:
        X = np.column_stack([np.ones(5), 0.3 * rng.standard_normal(5)])  # an intercept
        y = rng.poisson(y_scale, 5).astype(float)
        data[i] = (X, y)
        model.set_loss(i, _RawPoissonLoss(X, y))
    return model, data


def _reference(data, lam):
    W = cp.Variable((4, 2))
    obj = sum(cp.sum(cp.exp(X @ W[i]) - cp.multiply(y, X @ W[i])) / len(y)
              for i, (X, y) in data.items())
    obj = obj + lam * sum(cp.norm(W[i] - W[i + 1], 2) for i in range(3))
    prob = cp.Problem(cp.Minimize(obj))
    prob.solve(solver="CLARABEL", tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    return prob.value


def test_the_facts_lower_bound_reaches_the_certificate():
    model, _ = _model(np.random.default_rng(0), 8.0)
    assert np.all(loss_lower_bounds(model) == -np.inf)
    lib = gm.GTVModel(nx.path_graph(3), dim=2)
    lib.set_data({i: (np.eye(2), np.ones(2)) for i in range(3)}, loss="squared")
    assert np.all(loss_lower_bounds(lib) == 0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_negative_losses_get_sound_gaps_at_zero_demands(seed):
    rng = np.random.default_rng(seed)
    model, data = _model(rng, 8.0)  # y ~ Poisson(8): rows reach exp(t) - y t < 0
    p_star = _reference(data, 0.5)
    assert p_star < 0  # the premise: the loss is negative at the optimum
    W = 0.3 * rng.standard_normal((4, 2))
    for flows in (np.zeros((3, 2)), None):  # zero demands everywhere; weights only
        cert = gm.certify(model, W, flows)
        true = cert.primal_value - p_star
        assert cert.gap >= true - 1e-9 * (1 + abs(p_star)), (cert.gap, true)
