"""The composite active-set prox's work per call (issue 16 item 3, per-call overhead):
:func:`gtvmodel.terms.composite.composite_active_set_prox` on Algorithm 1's sequence of calls
(one batch, points that move a little) takes one active-set step where the active sets do not
change, its cached systems (merged where a few nodes changed) give the answers of fresh ones,
and every answer equals an independent CVXPY prox written here."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest

import gtvmodel as gm
import gtvmodel.terms.composite as composite_mod
from gtvmodel.terms.composite import CompositeProxBatch

TIGHT = {"solver": "CLARABEL", "tol_gap_abs": 1e-13, "tol_gap_rel": 1e-13, "tol_feas": 1e-13}


def _linear_row_losses(rng, cls, k, d, l1):
    """``k`` hinge or absolute losses (linear row conjugates: free data rows are equations),
    ``m_i`` from 1 to 6 rows in ``d`` dimensions."""
    out = []
    for m in rng.integers(1, 7, k):
        X = rng.standard_normal((m, d))
        y = 2.0 * rng.standard_normal(m)
        out.append(cls(X, np.sign(y) if cls is gm.HingeLoss else y, l1=l1))
    return out


def _independent_prox(ls, v, tau, radius1=np.inf):
    """PU (32) of one node by a tight CVXPY solve written here (row losses by their atoms)."""
    z = cp.Variable(v.size)
    t = ls.X @ z
    rows = cp.pos(1.0 - cp.multiply(ls.y, t)) if isinstance(ls, gm.HingeLoss) else \
        cp.abs(t - ls.y)
    cons = [cp.norm1(z) <= radius1] if np.isfinite(radius1) else []
    cp.Problem(cp.Minimize(cp.sum(rows) / ls.X.shape[0] + ls.l1 * cp.norm1(z)
                           + cp.sum_squares(z - v) / (2 * tau)), cons).solve(**TIGHT)
    return z.value


def _count_steps(monkeypatch):
    """A list that records the nodes of every active-set step (``_active_set_step``)."""
    steps = []
    real = composite_mod._active_set_step

    def counted(state, act, *args):
        steps.append(act.size)
        return real(state, act, *args)

    monkeypatch.setattr(composite_mod, "_active_set_step", counted)
    return steps


@pytest.mark.parametrize("cls", [gm.HingeLoss, gm.AbsoluteLoss])
def test_a_repeated_point_takes_one_step_after_merged_systems(cls, monkeypatch):
    # Algorithm 1's calls: small moves change a few nodes' sets (later steps on those nodes),
    # then the same point again: the next call's cached system (those nodes' systems merged
    # in) reproduces the last answer, so its first step keeps every set and it stops there.
    # Before, a merged node with fewer free linear rows than the cached system had its free
    # row's dual overwritten by the padding of the free-row slots (a duplicate index), so its
    # set changed spuriously and the call took extra steps.
    rng = np.random.default_rng(4)
    k, d = 60, 3
    losses = _linear_row_losses(rng, cls, k, d, 0.05)
    batch = CompositeProxBatch(cls, np.arange(k), losses, k, d)
    tau = rng.uniform(0.2, 2.0, k)
    V = rng.standard_normal((k, d))
    W = batch.prox(V, tau)
    steps = _count_steps(monkeypatch)
    repeats = []
    for _ in range(6):
        V = V + 0.05 * rng.standard_normal(V.shape)
        W = batch.prox(V, tau, W0=W)
        del steps[:]
        again = batch.prox(V, tau, W0=W)
        repeats.append(len(steps))
        np.testing.assert_array_equal(again, W)
        W = again
    assert repeats == [1] * 6, repeats
    assert batch.fallbacks == 0
    fresh = CompositeProxBatch(cls, np.arange(k), losses, k, d).prox(V, tau)
    np.testing.assert_allclose(W, fresh, rtol=0, atol=1e-12)
    for j in range(0, k, 6):
        np.testing.assert_allclose(W[j], _independent_prox(losses[j], V[j], tau[j]),
                                   rtol=0, atol=1e-8)
