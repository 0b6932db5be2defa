"""The composite active-set prox's work per call (issue 16 item 3, per-call overhead):
:func:`gtvmodel.kernels.composite.composite_active_set_prox` on Algorithm 1's sequence of calls
(one batch, points that move a little) takes one active-set step where the active sets do not
change, its cached systems (merged where a few nodes changed, the row duals of a merged node
included) give the answers of fresh ones, every answer equals an independent CVXPY prox
written here, and the small-batch pseudo-inverse equals numpy's."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest

import gtvmodel as gm
import gtvmodel.kernels.composite as kernel_mod
import gtvmodel.kernels.linalg as linalg_mod
import gtvmodel.kernels.steps as steps_mod
import gtvmodel.kernels.systems as systems_mod
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


def _independent_prox(ls, v, tau, lo=-np.inf, hi=np.inf, radius=np.inf, radius1=np.inf):
    """PU (32) of one node by a tight CVXPY solve written here (row losses by their atoms),
    over ``lo <= z <= hi``, ``||z||_2 <= radius``, ``||z||_1 <= radius1``."""
    z = cp.Variable(v.size)
    t = ls.X @ z
    rows = cp.pos(1.0 - cp.multiply(ls.y, t)) if isinstance(ls, gm.HingeLoss) else \
        cp.abs(t - ls.y)
    cons = [z >= lo, z <= hi]
    cons += [cp.norm(z, 2) <= radius] if np.isfinite(radius) else []
    cons += [cp.norm1(z) <= radius1] if np.isfinite(radius1) else []
    cp.Problem(cp.Minimize(cp.sum(rows) / ls.X.shape[0] + ls.l1 * cp.norm1(z)
                           + cp.sum_squares(z - v) / (2 * tau)), cons).solve(**TIGHT)
    return z.value


def _assert_prox(ls, v, tau, w, lo, hi, radius, radius1):
    """``w`` is feasible and equals the independent prox to 1e-8, or the reference is the
    inexact one (Clarabel "inaccurate" on a binding ball): made feasible (scaled into the
    balls, towards 0, then clipped to the box, which holds 0 here), its prox objective
    exceeds ``w``'s by at least the quadratic growth ``(1 / (2 tau)) ||w - ref||^2``."""
    assert np.all(w >= lo) and np.all(w <= hi)
    assert np.linalg.norm(w) <= radius * (1 + 1e-12) and np.abs(w).sum() <= radius1 * (1 + 1e-12)
    ref = _independent_prox(ls, v, tau, lo, hi, radius, radius1)
    ref = np.clip(ref * min(1.0, radius / np.linalg.norm(ref), radius1 / np.abs(ref).sum()),
                  lo, hi)
    if np.abs(w - ref).max() <= 1e-8:
        return

    def f(z):
        t = ls.X @ z
        rows = np.maximum(0.0, 1.0 - ls.y * t) if isinstance(ls, gm.HingeLoss) else \
            np.abs(t - ls.y)
        return rows.mean() + ls.l1 * np.abs(z).sum() + ((z - v) ** 2).sum() / (2 * tau)

    growth = ((w - ref) ** 2).sum() / (2 * tau)
    assert f(ref) - f(w) >= growth * (1 - 1e-6) - 1e-13 * (1 + abs(f(w)))


def _count_steps(monkeypatch):
    """A list that records the nodes of every active-set step (``_active_set_step``)."""
    steps = []
    real = kernel_mod._active_set_step

    def counted(state, act, *args):
        steps.append(act.size)
        return real(state, act, *args)

    monkeypatch.setattr(kernel_mod, "_active_set_step", counted)
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
        _assert_prox(losses[j], V[j], tau[j], W[j], -np.inf, np.inf, np.inf, np.inf)


@pytest.mark.parametrize("case", ["absolute-ball2", "hinge-l1-ball1", "absolute-l1-box",
                                  "hinge-start-F0"])
def test_later_steps_merged_in_place_equal_fresh_batches(case, monkeypatch):
    # the systems of the later steps are written into the cached one (growing its free-row
    # slots where a node gets more free linear rows than any before, e.g. from none at all
    # in "hinge-start-F0"); every call then equals a fresh batch's (no cache) and the last the
    # independent CVXPY prox
    rng = np.random.default_rng(11)
    k, d = 40, 3
    cls = gm.HingeLoss if case.startswith("hinge") else gm.AbsoluteLoss
    losses = _linear_row_losses(rng, cls, k, d, 0.0 if case == "absolute-ball2" else 0.05)
    inf = np.full((k, d), np.inf)
    kw = {"absolute-ball2": {"radius": np.full(k, 0.6)},
          "hinge-l1-ball1": {"radius1": np.full(k, 0.8)},
          "absolute-l1-box": {"box": (np.full((k, d), -0.3), np.full((k, d), 0.4))},
          "hinge-start-F0": {}}[case]

    def make():
        return CompositeProxBatch(cls, np.arange(k), losses, k, d, **kw)

    merges = []
    real = systems_mod._merge_into
    monkeypatch.setattr(systems_mod, "_merge_into",
                        lambda *a: merges.append(real(*a)) or merges[-1])
    batch, tau = make(), rng.uniform(0.2, 2.0, k)
    # far from the data (every hinge row held, no free linear row), then towards it
    V = 20.0 * rng.standard_normal((k, d)) if case == "hinge-start-F0" else \
        rng.standard_normal((k, d))
    W = batch.prox(V, tau)
    for _ in range(8):
        V = (0.3 if case == "hinge-start-F0" else 1.0) * V + 0.05 * rng.standard_normal(V.shape)
        W = batch.prox(V, tau, W0=W)
        np.testing.assert_allclose(W, make().prox(V, tau), rtol=0, atol=1e-12)
    assert batch.fallbacks == 0
    assert any(merges), merges
    lo, hi = kw.get("box", (-inf, inf))
    radius, radius1 = (kw.get(key, np.full(k, np.inf)) for key in ("radius", "radius1"))
    for j in range(0, k, 8):
        _assert_prox(losses[j], V[j], tau[j], W[j], lo[j], hi[j], radius[j], radius1[j])


@pytest.mark.parametrize("k", [3, 40])
def test_pinv_rows_few_and_many_blocks_equal_numpy_pinv(k):
    # a few blocks with two rows or more (a later step's nodes): one SVD call; many: QR where
    # the rows are independent, SVD where not (dependent rows, more rows than d); padding 0
    rng = np.random.default_rng(k)
    F, d = 4, 3
    A = rng.standard_normal((k, F, d)) * np.logspace(0, 3, d)
    on = np.arange(F)[None, :] < rng.integers(0, F + 1, k)[:, None]
    A[0, 1], on[0, :2] = 3.0 * A[0, 0], True  # dependent rows
    A *= on[:, :, None]
    ref = np.linalg.pinv(A)
    np.testing.assert_allclose(linalg_mod._pinv_rows(A, on), ref, rtol=1e-9,
                               atol=1e-12 * np.abs(ref).max())


def test_row_duals_of_a_merged_system_equal_a_fresh_ones():
    # a node merged into a system with more free-row slots than it uses (_updated_system pads
    # its slots, sel repeats an index): its free rows' duals land in their rows, as in the
    # node's own fresh system (before, the padding's write of the old value won)
    rng = np.random.default_rng(2)
    k, d = 3, 2
    losses = _linear_row_losses(rng, gm.HingeLoss, k, d, 0.05)
    for ls in losses:  # three rows each
        ls.X, ls.y = rng.standard_normal((3, d)), np.sign(rng.standard_normal(3))
    batch = CompositeProxBatch(gm.HingeLoss, np.arange(k), losses, k, d)
    pad, mu = batch._padded(), np.full(k, 2.0)
    c = kernel_mod._row_constants(*(pad[key] for key in ("P", "cs", "cq", "lo", "hi", "fixed",
                                                          "coord")), mu, 1e-13, None)
    rows = dict({key: pad[key] for key in ("P", "cs", "cq", "lo", "hi", "fixed")},
                coord=c["coord"], unit=c["unit"], tail=c["tail"])
    R = pad["P"].shape[1]
    before = np.where(pad["fixed"], -1, 1).astype(np.int8)  # every row held ...
    before[0, :2] = 0  # ... but node 0's data rows 0 and 1 (two free-row slots)
    st = before.copy()
    st[1, 0] = 0  # then node 1's data row 0 is free too (one slot)
    full = systems_mod._system_matrices(rows, before, slice(None), mu)
    sub = systems_mod._system_matrices(rows, st[1:2], np.arange(1, 2), mu[1:2])
    merged = systems_mod._updated_system(full, sub, np.arange(1, 2))
    fresh = systems_mod._system_matrices(rows, st, slice(None), mu)
    assert merged is not None and merged["F"] == fresh["F"] == 2
    assert merged["sel"][1, 1] == merged["sel"][1, 0] == 0  # the repeated index
    g, a_prev = rng.standard_normal((k, d)), np.zeros((k, R))
    Za = rng.standard_normal((k, d))
    ad = np.where(fresh["on"], rng.standard_normal((k, 2)), 0.0)
    for sy in (merged, fresh):
        steps_mod._affine_factors(sy)
    a_merged, a_fresh = (steps_mod._row_duals(systems_mod._with_rhs(sy, g, a_prev), Za,
                                              ad, None) for sy in (merged, fresh))
    assert a_merged[1, 0] == ad[1, 0]
    np.testing.assert_array_equal(a_merged, a_fresh)
