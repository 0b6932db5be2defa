"""Tests of gtvmodel.theory: Theorem 2 of paper 001 (well-connected clusters, lambda_crit).

Every max-flow result is compared with a brute-force enumeration of subsets, the constants with
independent formulas from the data, the consensus threshold with exact solves on both sides,
and the cluster graph with the full model's objective.
"""

from __future__ import annotations

import math

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from networkx.algorithms import flow as nxflow

import gtvmodel as gm
from gtvmodel import theory as th
from gtvmodel.datasets import chain, sbm, star
from gtvmodel.errors import (
    ParameterError,
    PartitionError,
    UnknownNodeError,
    UnsupportedError,
)
from gtvmodel.theory.consensus import _balanced_congestion, min_congestion

REL = 1e-9  # the max-flow quantities are exact up to rounding


# ---------------------------------------------------------------------------- brute force
def _subsets(k: int, i0: int) -> np.ndarray:
    """All nonempty subsets of {0..k-1} without i0, as rows of a boolean matrix."""
    codes = np.arange(1, 2**k)
    M = ((codes[:, None] >> np.arange(k)[None, :]) & 1).astype(bool)
    return M[~M[:, i0]]


def _cut(mask, heads, tails, w):
    return float(w[mask[heads] != mask[tails]].sum())


def _cuts(M, heads, tails, w):
    return (M[:, heads] != M[:, tails]).astype(float) @ w


def brute_theta(k, heads, tails, w, b, i0):
    """min over nonempty A subset C minus i0 with b(A) > 0 of cut(A) / b(A)."""
    M = _subsets(k, i0)
    bA = M.astype(float) @ b
    pos = bA > 0
    return float((_cuts(M, heads, tails, w)[pos] / bA[pos]).min()) if pos.any() else math.inf


def brute_lam_min(k, heads, tails, w, c, delta, i0):
    """max over A of delta(A) / (cut(A) - c(A)) (inf if some cut(A) <= c(A))."""
    M = _subsets(k, i0).astype(float)
    gap = _cuts(M.astype(bool), heads, tails, w) - M @ c
    if (gap <= 0).any():
        return math.inf
    return float(max(0.0, (M @ delta / gap).max()))


def _rel_eq(a, b, rel=REL):
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def _local(model, nodes):
    """Local intra-cluster edge arrays of a cluster given by node labels."""
    pos = {model.index(v): j for j, v in enumerate(nodes)}
    heads, tails, w = [], [], []
    for (a, b), A in zip(model.edges, model.edge_weights, strict=True):
        if a in pos and b in pos:
            heads.append(pos[a])
            tails.append(pos[b])
            w.append(A)
    return np.array(heads, dtype=int), np.array(tails, dtype=int), np.array(w, dtype=float)


# ---------------------------------------------------------------------------- instances
def random_two_cluster_model(seed: int, k: int = 8, d: int = 2, sigma: float = 0.3,
                             p: float = 0.5):
    """A random connected weighted cluster of k nodes plus a 3-node cluster, squared losses."""
    rng = np.random.default_rng(seed)
    G = nx.gnp_random_graph(k, p, seed=int(rng.integers(2**31)))
    for j in range(k - 1):  # a spanning path keeps the cluster connected
        G.add_edge(j, j + 1)
    G.add_edges_from([(k, k + 1), (k + 1, k + 2)])
    for a, b in G.edges:
        G.edges[a, b]["weight"] = float(rng.uniform(0.2, 2.0))
    for _ in range(3):  # boundary edges
        a, b = int(rng.integers(k)), int(k + rng.integers(3))
        G.add_edge(a, b, weight=float(rng.uniform(0.01, 0.3)))
    model = gm.GTVModel(G, d, lam=1.0)
    truth = {0: rng.standard_normal(d), 1: rng.standard_normal(d)}
    data = {}
    for i in G.nodes:
        m = int(rng.integers(1, 4))
        X = rng.standard_normal((m, d))
        y = X @ truth[int(i >= k)] + sigma * rng.standard_normal(m)
        model.set_loss(i, gm.SquaredLoss(X, y))
        data[i] = (X, y)
    return model, [list(range(k)), [k, k + 1, k + 2]], data


def independent_budgets(model, clusters, data, lam, factor=2.0):
    """b_i for squared losses and Norm2 from the data, without the library's loss methods."""
    nodes = model.nodes
    cl = {v: c for c, C in enumerate(clusters) for v in C}
    out = {}
    for C in clusters:
        S = sum(data[v][0].T @ data[v][0] / len(data[v][1]) for v in C)
        r = sum(data[v][0].T @ data[v][1] / len(data[v][1]) for v in C)
        wbar = np.linalg.solve(S, r)
        alpha = 2.0 * np.linalg.eigvalsh(S)[0]
        o = {v: sum(A for u, A in ((u, model.graph.edges[v, u].get("weight", 1.0))
                                   for u in model.graph.neighbors(v)) if cl[u] != cl[v])
             for v in C}
        boundary = sum(o.values())
        for v in C:
            X, y = data[v]
            m = len(y)
            beta = 2.0 * np.linalg.eigvalsh(X.T @ X / m)[-1]
            delta = np.linalg.norm(2.0 / m * X.T @ (X @ wbar - y))
            out[v] = (o[v] + factor * beta * boundary / alpha, delta, alpha, wbar, boundary)
    assert set(out) == set(nodes)
    return out


# ---------------------------------------------------------------------------- max-flow vs brute
@pytest.mark.parametrize("seed", range(10))
def test_check_matches_bruteforce_random_clusters(seed):
    rng = np.random.default_rng(100 + seed)
    k = int(rng.integers(4, 11))
    model, clusters, data = random_two_cluster_model(seed, k=k, sigma=float(rng.uniform(0, 0.5)))
    ind = independent_budgets(model, clusters, data, 1.0)
    reports0 = th.check_well_connected(model, clusters, 1.0)
    # lambdas on both sides of lam_min of the big cluster
    lm = reports0[0].lam_min
    lams = [0.3, 1.0, 5.0] if not np.isfinite(lm) or lm == 0 else [0.5 * lm, 0.999 * lm,
                                                                    1.001 * lm, 3 * lm]
    for lam in lams:
        reports = th.check_well_connected(model, clusters, lam)
        for C, rep in zip(clusters, reports, strict=True):
            assert rep.nodes == C
            c = np.array([ind[v][0] for v in C])
            delta = np.array([ind[v][1] for v in C])
            b = c + delta / lam
            assert np.allclose([rep.budgets[v] for v in C], b, rtol=1e-8, atol=1e-12)
            assert rep.alpha == pytest.approx(ind[C[0]][2], rel=1e-10)
            assert np.allclose(rep.wbar, ind[C[0]][3], rtol=1e-9, atol=1e-12)
            assert rep.boundary == pytest.approx(ind[C[0]][4], rel=1e-12)
            assert rep.bound == pytest.approx(2 * rep.boundary * lam / rep.alpha, rel=1e-12)
            # brute force with the report's own budgets (the flow part is what is under test)
            b = np.array([rep.budgets[v] for v in C])
            c = b - np.array([rep.delta[v] for v in C]) / lam
            dl = np.array([rep.delta[v] for v in C])
            heads, tails, w = _local(model, C)
            thetas = [brute_theta(len(C), heads, tails, w, b, i0) for i0 in range(len(C))]
            holds = max(thetas) > 1
            assert rep.success == holds
            if holds:
                i0 = C.index(rep.witness)
                assert thetas[i0] > 1
                assert _rel_eq(rep.margin, thetas[i0])
                assert rep.violating_set is None
            else:
                assert rep.witness is None
                assert _rel_eq(rep.margin, max(thetas))
                A = np.isin(C, rep.violating_set)
                assert b[A].sum() >= _cut(A, heads, tails, w) * (1 - 1e-12)
            assert rep.nonstrict == (max(thetas) >= 1) or _rel_eq(max(thetas), 1.0)
            lam_bf = min(brute_lam_min(len(C), heads, tails, w, c, dl, i0)
                         for i0 in range(len(C)))
            assert _rel_eq(rep.lam_min, lam_bf, 1e-7)
            # the condition holds exactly above lam_min
            if np.isfinite(lam_bf) and lam_bf > 0:
                assert (lam > lam_bf) == rep.success or abs(lam / lam_bf - 1) < 1e-6


@pytest.mark.parametrize("seed", range(12))
def test_flow_search_exact_on_integer_instances(seed):
    """Integer weights and budgets: exact ties theta* = 1 (non-strict but not strict)."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(3, 13))
    G = nx.gnp_random_graph(k, 0.4, seed=seed)
    G.add_edges_from((j, j + 1) for j in range(k - 1))
    heads = np.array([min(e) for e in G.edges])
    tails = np.array([max(e) for e in G.edges])
    w = rng.integers(1, 3, size=heads.size).astype(float)
    b = rng.integers(0, 3, size=k).astype(float)
    c = rng.integers(0, 2, size=k).astype(float)
    delta = rng.integers(0, 3, size=k).astype(float)
    thetas = [brute_theta(k, heads, tails, w, b, i0) for i0 in range(k)]
    lam_bf = min(brute_lam_min(k, heads, tails, w, c, delta, i0) for i0 in range(k))
    for func in (nxflow.boykov_kolmogorov, nxflow.preflow_push, nxflow.edmonds_karp):
        net = th.cuts.CutNetwork(k, heads, tails, w, func)
        margin, i0, A = th.cuts.best_margin(net, b)
        if margin > 1:
            assert _rel_eq(margin, thetas[i0]) and thetas[i0] > 1
        else:
            assert max(thetas) <= 1
            assert _rel_eq(margin, max(thetas))
            assert b[A].sum() >= _cut(A, heads, tails, w)
        assert _rel_eq(th.cuts.best_lam_min(net, c, delta), lam_bf)
    # the non-strict condition is a max-flow saturating the source arcs (networkx directly)
    H = nx.DiGraph()
    for a, bb, ww in zip(heads, tails, w, strict=True):
        H.add_edge(int(a), int(bb), capacity=ww)
        H.add_edge(int(bb), int(a), capacity=ww)
    for j in range(k):
        J = H.copy()
        J.add_edges_from(("s", i, {"capacity": b[i]}) for i in range(k) if i != j)
        total = b.sum() - b[j]
        value = nx.maximum_flow_value(J, "s", j) if total > 0 else 0.0
        assert (abs(value - total) < 1e-9) == (thetas[j] >= 1)


def test_exact_tie_is_not_strict():
    """A star cluster whose leaves' budgets equal their edge weights: theta* = 1 exactly."""
    G = nx.star_graph(4)
    net = th.cuts.CutNetwork(5, np.zeros(4, dtype=int), np.arange(1, 5), np.array([1.0, 2, 1, 3]),
                         nxflow.boykov_kolmogorov)
    b = np.array([0.0, 1.0, 2.0, 1.0, 3.0])
    margin, i0, A = th.cuts.best_margin(net, b)
    assert margin == 1.0 and i0 == 0 and A.sum() >= 1
    margin2, _, _ = th.cuts.best_margin(net, b * 0.999)
    assert margin2 > 1.0
    assert G.number_of_nodes() == 5


# ---------------------------------------------------------------------------- flow_func
FLOW_FUNCS = [nxflow.preflow_push, nxflow.boykov_kolmogorov, nxflow.edmonds_karp,
              nxflow.dinitz, nxflow.shortest_augmenting_path]


def _report_key(rep):
    """Everything a ClusterReport says, rounded where it is a max-flow quantity."""
    return (rep.cluster, rep.nodes, rep.success, rep.witness, round(rep.margin, 9),
            rep.nonstrict, rep.violating_set, round(rep.lam_min, 9),
            {v: round(b, 12) for v, b in rep.budgets.items()}, rep.bound)


@pytest.mark.parametrize("seed", range(4))
def test_flow_funcs_give_the_same_reports(seed):
    """Any networkx max-flow function (a callable, as in networkx) gives the same reports,
    on both sides of lam_min (holds with a witness; fails with a violating set)."""
    model, clusters, _ = random_two_cluster_model(seed, k=9)
    lm = th.check_well_connected(model, clusters, 1.0)[0].lam_min
    lams = [1.0] if not np.isfinite(lm) or lm == 0 else [0.5 * lm, 2.0 * lm]
    seen = set()
    for lam in lams:
        ref = th.check_well_connected(model, clusters, lam)  # default: preflow_push
        assert [_report_key(r) for r in th.check_well_connected(
            model, clusters, lam, flow_func=None)] == [_report_key(r) for r in ref]
        for func in FLOW_FUNCS:
            reports = th.check_well_connected(model, clusters, lam, flow_func=func)
            assert [_report_key(r) for r in reports] == [_report_key(r) for r in ref]
        seen.add(ref[0].success)
    assert seen == ({True, False} if len(lams) == 2 else {ref[0].success})


def test_flow_func_is_passed_to_networkx():
    """The callable given is the one that runs (networkx's signature), for both entry points."""
    calls = []

    def counting(G, s, t, **kw):
        calls.append((s, t))
        return nxflow.edmonds_karp(G, s, t, **kw)

    model, clusters, _ = random_two_cluster_model(0, k=6)
    ref = th.check_well_connected(model, clusters, 1.0, flow_func=nxflow.edmonds_karp)
    assert [_report_key(r) for r in th.check_well_connected(
        model, clusters, 1.0, flow_func=counting)] == [_report_key(r) for r in ref]
    assert calls
    calls.clear()
    G = nx.path_graph(5)
    m1 = gm.GTVModel(G, 1)
    for i in G.nodes:
        m1.set_loss(i, gm.QuadraticLoss([float(i)]))
    lam = th.consensus_threshold(m1, method="flow", flow_func=counting)
    assert calls
    assert lam == pytest.approx(th.consensus_threshold(m1, method="flow"), rel=1e-12)
    assert lam == pytest.approx(th.consensus_threshold(m1, method="convex"), rel=1e-6)


@pytest.mark.parametrize("bad, hint", [
    ("edmonds_karp", "pass networkx.algorithms.flow.edmonds_karp itself"),
    ("preflow_push", "pass networkx.algorithms.flow.preflow_push itself"),
    ("magic", "one of networkx.algorithms.flow.preflow_push"),
    (3, "one of networkx.algorithms.flow.preflow_push"),
])
def test_flow_func_string_or_other_raises(bad, hint):
    model, clusters, _ = random_two_cluster_model(1, k=4)
    with pytest.raises(ParameterError, match="flow_func must be a networkx max-flow function"):
        th.check_well_connected(model, clusters, 1.0, flow_func=bad)
    with pytest.raises(ParameterError, match=hint):
        th.check_well_connected(model, clusters, 1.0, flow_func=bad)
    with pytest.raises(ParameterError, match="flow_func"):
        th.consensus_threshold(model, flow_func=bad)


# ---------------------------------------------------------------------------- Theorem 2
def _hold_everywhere(model, part, lam, constant="corrected"):
    return all(r.success for r in th.check_well_connected(model, part, lam, constant=constant))


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["chain", "sbm"]), seed=st.integers(0, 10_000),
       eps=st.floats(1e-3, 0.2), sigma=st.sampled_from([0.0, 0.01, 0.1, 0.5]),
       over=st.floats(1.001, 20.0), penalty=st.sampled_from(["l2", "l1", "linf"]),
       constant=st.sampled_from(["corrected", "printed"]))
def test_well_connected_implies_recovery(kind, seed, eps, sigma, over, penalty, constant):
    """Whenever every cluster is well-connected, the exact solution is clustered, within (37)
    (even within the sharp bound), and the lifted cluster-graph solution is certified."""
    pen = {"l2": gm.Norm2(), "l1": gm.Norm1(), "linf": gm.NormInf()}[penalty]
    if kind == "chain":
        data = chain(n=int(3 + seed % 5), eps=eps, m=5, sigma=sigma, seed=seed)
    else:
        data = sbm(sizes=(6 + seed % 4, 5 + seed % 3), p_in=0.8, p_out=0.05, m=5, sigma=sigma,
                   seed=seed)
        for a, b in data.graph.edges:
            same = data.clusters[a] == data.clusters[b]
            data.graph.edges[a, b]["weight"] = 1.0 if same else eps
    part = data.partition()
    model = data.model(penalty=pen)
    try:
        reports = th.check_well_connected(model, part, 1.0, constant=constant)
    except PartitionError:  # a disconnected SBM cluster
        assume(False)
    lam_min = max(r.lam_min for r in reports)
    assume(np.isfinite(lam_min))
    lam = max(lam_min * over, 1e-3)
    assert _hold_everywhere(model, part, lam, constant)
    rec = th.verify_recovery(model, part, lam, constant=constant)
    assert rec.clustered, rec.spread
    assert rec.within_bound, (rec.deviation, rec.bound)
    assert rec.success, rec.congestion
    for r in rec.well_connected:
        assert r.success
        assert rec.deviation[r.cluster] <= r.sharp_bound + 1e-6 * max(1, np.abs(rec.weights).max())
    assert rec.lifted_gap <= 1e-6 * max(1.0, np.abs(rec.weights).max())


@pytest.mark.slow
@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["chain", "sbm"]), seed=st.integers(0, 10_000),
       eps=st.floats(1e-3, 0.2), sigma=st.sampled_from([0.0, 0.01, 0.1, 0.5]),
       over=st.floats(1.001, 20.0), penalty=st.sampled_from(["l2", "l1", "linf"]),
       constant=st.sampled_from(["corrected", "printed"]))
def test_well_connected_implies_recovery_many(kind, seed, eps, sigma, over, penalty, constant):
    """The property above over many more instances (slow)."""
    test_well_connected_implies_recovery.hypothesis.inner_test(
        kind, seed, eps, sigma, over, penalty, constant)


def test_printed_condition_is_sufficient_too():
    """Between lam_min(printed) and lam_min(corrected) only the printed (35) holds; recovery
    still happens and the deviation obeys the sharp bound |dC| lam / alpha_C (docs/theory.md:
    strong monotonicity makes the printed constant valid)."""
    found = 0
    for seed in range(40):
        data = chain(n=4, eps=0.3, m=3, sigma=0.3, seed=seed)
        model, part = data.model(), data.partition()
        cor = th.check_well_connected(model, part, 1.0)
        pri = th.check_well_connected(model, part, 1.0, constant="printed")
        lo = max(r.lam_min for r in pri)
        hi = max(r.lam_min for r in cor)
        if not (np.isfinite(lo) and lo < hi):
            continue
        lam = lo * 1.01 if not np.isfinite(hi) else math.sqrt(lo * hi) if lo > 0 else hi / 2
        printed = th.check_well_connected(model, part, lam, constant="printed")
        if not all(r.success for r in printed):
            continue
        if all(r.success for r in th.check_well_connected(model, part, lam)):
            continue
        rec = th.verify_recovery(model, part, lam, constant="printed")
        assert rec.clustered and rec.success and rec.within_bound
        for r in rec.well_connected:
            assert rec.deviation[r.cluster] <= r.sharp_bound + 1e-7
        found += 1
        if found == 3:
            break
    assert found == 3


def test_chain_paper_setting():
    """Paper 001 VI-B: chain of 2n = 20 nodes, boundary eps = 1e-2, noisy data."""
    data = chain(n=10, eps=1e-2, m=5, sigma=0.1, seed=3)
    model = data.model()
    part = data.partition()
    reps = th.check_well_connected(model, part, 1.0)
    lam_min = max(r.lam_min for r in reps)
    assert 0 < lam_min < np.inf
    assert reps[0].summary().startswith("cluster 0 (10 nodes): ")
    lam = 1.5 * lam_min
    rec = th.verify_recovery(model, part, lam)
    assert all(r.success for r in rec.well_connected)
    assert rec.clustered and rec.within_bound and rec.success
    below = th.check_well_connected(model, part, 0.9 * lam_min)
    assert not all(r.success for r in below)


def test_sbm_paper_setting_small():
    """SBM of paper 001 VI-A at a smaller size (30 + 30, p_in = 0.5, m_i = 5, d = 2, w_bar (2,2)
    and (-2,2), unit weights) with a sparse boundary (p_out = 0.002, as paper 000's 1e-3)."""
    for seed in (0, 3, 4):
        data = sbm(sizes=(30, 30), p_in=0.5, p_out=0.002, m=5, sigma=0.01, seed=seed)
        model, part = data.model(), data.partition()
        reps = th.check_well_connected(model, part, 1.0)
        assert all(r.boundary > 0 for r in reps)
        for r in reps:
            assert np.allclose(r.wbar, [2, 2], atol=0.02) or np.allclose(r.wbar, [-2, 2],
                                                                           atol=0.02)
        lam = 1.5 * max(r.lam_min for r in reps)
        rec = th.verify_recovery(model, part, lam)
        assert all(r.success for r in rec.well_connected)
        assert rec.clustered and rec.within_bound and rec.success


def test_condition_is_not_necessary_sbm():
    """Five boundary edges: the condition never holds (lam_min = inf: the cluster's budget
    cannot fit through one witness), yet the exact solution is clustered and certified."""
    data = sbm(sizes=(30, 30), p_in=0.5, p_out=0.002, m=5, sigma=0.01, seed=2)
    model, part = data.model(), data.partition()
    reps = th.check_well_connected(model, part, 0.1)
    assert all(r.lam_min == math.inf and not r.success for r in reps)
    assert all(r.violating_set for r in reps)
    assert "NOT well-connected (violating set {" in reps[0].summary()
    rec = th.verify_recovery(model, part, 0.1)
    assert rec.clustered and rec.success and rec.within_bound


def test_verify_recovery_disconnected_cluster():
    """A disconnected cluster: no well-connectedness report, but the exact check still runs."""
    data = chain(n=3, eps=0.1, m=5, sigma=0.0, seed=0)
    model = data.model()
    rec = th.verify_recovery(model, [[0, 2], [1, 3, 4, 5]], 0.5)
    assert rec.well_connected is None
    assert not rec.clustered and not rec.success
    assert rec.congestion > 1


def test_two_cliques_rank_one_losses():
    """Two 5-cliques joined by one edge of weight 0.05, d = 2, m_i = 1: no single loss is
    strongly convex, the cluster sums are."""
    rng = np.random.default_rng(7)
    G = nx.disjoint_union(nx.complete_graph(5), nx.complete_graph(5))
    G.add_edge(4, 5, weight=0.05)
    model = gm.GTVModel(G, 2)
    truth = [np.array([1.0, 1.0]), np.array([-1.0, 1.0])]
    for i in G.nodes:
        x = rng.standard_normal((1, 2))
        model.set_loss(i, gm.SquaredLoss(x, x @ truth[i // 5] + 0.05 * rng.standard_normal(1)))
        assert model.loss(i).strong_convexity == pytest.approx(0.0, abs=1e-12)
    part = [range(5), range(5, 10)]
    reps = th.check_well_connected(model, part, 1.0)
    for r in reps:
        assert r.alpha > 0
        assert all(r.beta[v] > 0 for v in r.nodes)
    lam_min = max(r.lam_min for r in reps)
    assert 0 < lam_min < np.inf
    lam = 1.2 * lam_min
    rec = th.verify_recovery(model, part, lam)
    assert all(r.success for r in rec.well_connected)
    assert rec.clustered and rec.within_bound and rec.success
    assert not np.allclose(rec.cluster_weights[0], rec.cluster_weights[1])


def test_norm_factor_and_dual_norm():
    data = chain(n=4, eps=0.05, m=5, sigma=0.1, seed=2)
    part = data.partition()
    r2 = th.check_well_connected(data.model(penalty=gm.Norm2()), part, 1.0)[0]
    r1 = th.check_well_connected(data.model(penalty=gm.Norm1()), part, 1.0)[0]
    ri = th.check_well_connected(data.model(penalty=gm.NormInf()), part, 1.0)[0]
    assert r2.norm_factor == 1.0
    assert r1.norm_factor == pytest.approx(math.sqrt(2)) == ri.norm_factor
    model = data.model()
    g = model.loss_gradients(np.tile(r2.wbar, (model.num_nodes, 1)))[0]
    assert r2.delta[0] == pytest.approx(np.linalg.norm(g, 2), rel=1e-12)
    assert r1.delta[0] == pytest.approx(np.linalg.norm(g, np.inf), rel=1e-12)
    assert ri.delta[0] == pytest.approx(np.linalg.norm(g, 1), rel=1e-12)
    assert r1.bound == pytest.approx(math.sqrt(2) * r2.bound)
    assert ri.bound == pytest.approx(r2.bound)


def test_printed_constant_halves_curvature_term():
    data = chain(n=5, eps=0.05, m=5, sigma=0.2, seed=4)
    model, part = data.model(), data.partition()
    cor = th.check_well_connected(model, part, 0.5)
    pri = th.check_well_connected(model, part, 0.5, constant="printed")
    for rc, rp in zip(cor, pri, strict=True):
        for v in rc.nodes:
            o = 0.05 if v in (4, 5) else 0.0
            curv_c = rc.budgets[v] - o - rc.delta[v] / 0.5
            curv_p = rp.budgets[v] - o - rp.delta[v] / 0.5
            assert curv_c == pytest.approx(2 * curv_p, rel=1e-10)
        assert rp.lam_min <= rc.lam_min
        assert rp.margin >= rc.margin or rc.success


def test_logistic_needs_l2_and_wbar_is_exact():
    from scipy.optimize import minimize

    rng = np.random.default_rng(0)
    G = nx.path_graph(6)
    G.edges[2, 3]["weight"] = 0.01
    model = gm.GTVModel(G, 2)
    Xs, ys = {}, {}
    for i in G.nodes:
        X = rng.standard_normal((8, 2))
        y = np.sign(X @ ([1.0, -1.0] if i < 3 else [-1.0, 1.0]) + 0.5 * rng.standard_normal(8))
        y[y == 0] = 1
        Xs[i], ys[i] = X, y
        model.set_loss(i, gm.LogisticLoss(X, y))
    part = [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(UnsupportedError, match="cluster 0.*l2"):
        th.check_well_connected(model, part, 0.1)
    for i in G.nodes:
        model.set_loss(i, gm.LogisticLoss(Xs[i], ys[i], l2=0.05))
    reps = th.check_well_connected(model, part, 0.1)

    def f(w, C):
        return sum(np.logaddexp(0, -ys[i] * (Xs[i] @ w)).mean() + 0.05 * w @ w for i in C)

    for r, C in zip(reps, part, strict=True):
        assert r.alpha == pytest.approx(2 * 0.05 * 3)
        ref = minimize(f, np.zeros(2), args=(C,), method="BFGS", options={"gtol": 1e-12})
        assert np.allclose(r.wbar, ref.x, atol=1e-6)
    lam = 1.5 * max(r.lam_min for r in reps)
    rec = th.verify_recovery(model, part, lam)
    assert all(r.success for r in rec.well_connected)
    assert rec.clustered and rec.within_bound and rec.success


def test_huber_constants():
    rng = np.random.default_rng(1)
    G = nx.path_graph(4)
    model = gm.GTVModel(G, 2)
    for i in G.nodes:
        X = rng.standard_normal((6, 2))
        model.set_loss(i, gm.HuberLoss(X, X @ [1.0, 2.0] + rng.standard_normal(6), M=0.5,
                                       l2=0.1))
    rep = th.check_well_connected(model, [list(G.nodes)], 1.0)[0]
    for i in G.nodes:
        X = model.loss(i).X
        assert rep.beta[i] == pytest.approx(2 * np.linalg.eigvalsh(X.T @ X / 6)[-1] + 0.2)
    assert rep.alpha == pytest.approx(4 * 0.2)
    g = model.loss_gradients(np.tile(rep.wbar, (4, 1)))
    assert np.abs(g.sum(axis=0)).max() < 1e-6  # w_bar is the minimizer of the summed loss
    assert rep.success and rep.boundary == 0.0


# ---------------------------------------------------------------------------- lambda_crit
def test_consensus_threshold_star_paper():
    """Paper 001 VI-C: star, centre + 49 leaves, m_i = 5, d = 2."""
    data = star(leaves=49, m=5, d=2, seed=0)
    model = data.model()
    lc = th.consensus_threshold(model)
    assert 0 < lc < np.inf
    pooled = th.check_well_connected(model, [list(model.nodes)], 1.0)[0].wbar
    model.lam = 0.98 * lc
    W = model.solve_exact().weights
    assert np.abs(W - W.mean(axis=0)).max() > 1e-3
    model.lam = 1.02 * lc
    W = model.solve_exact().weights
    assert np.abs(W - pooled).max() < 1e-6


@pytest.mark.parametrize("penalty", [gm.Norm1(), gm.NormInf(), gm.NormP(3)])
def test_consensus_threshold_other_norms(penalty):
    data = star(leaves=12, m=5, d=3, seed=2)
    model = data.model(penalty=penalty)
    lc = th.consensus_threshold(model)
    model.lam = 0.97 * lc
    W = model.solve_exact().weights
    assert np.abs(W - W.mean(axis=0)).max() > 1e-4
    model.lam = 1.03 * lc
    W = model.solve_exact().weights
    assert np.abs(W - W.mean(axis=0)).max() < 1e-6


@pytest.mark.parametrize("seed", range(4))
def test_consensus_threshold_1d_flow_equals_convex(seed):
    rng = np.random.default_rng(seed)
    G = nx.connected_watts_strogatz_graph(15, 4, 0.3, seed=seed)
    for a, b in G.edges:
        G.edges[a, b]["weight"] = float(rng.uniform(0.1, 2.0))
    model = gm.GTVModel(G, 1)
    for i in G.nodes:
        X = rng.standard_normal((3, 1))
        model.set_loss(i, gm.SquaredLoss(X, X[:, 0] * rng.normal() + 0.1 * rng.normal(size=3)))
    lf = th.consensus_threshold(model, method="flow")
    lcx = th.consensus_threshold(model, method="convex")
    assert lf == pytest.approx(lcx, rel=1e-6)
    for f, equal in ((0.99, False), (1.01, True)):
        model.lam = f * lf
        W = model.solve_exact().weights
        assert (np.ptp(W) < 1e-6) == equal


def test_consensus_threshold_disconnected_is_inf():
    G = nx.Graph([(0, 1), (2, 3)])
    model = gm.GTVModel(G, 1)
    for i, a in enumerate([0.0, 1.0, 5.0, 6.0]):
        model.set_loss(i, gm.QuadraticLoss([a]))
    assert th.consensus_threshold(model) == math.inf
    assert th.consensus_threshold(model, method="convex") == math.inf


# ---------------------------------------------------------------------------- cluster graph
def test_cluster_graph_objective_and_weights():
    rng = np.random.default_rng(5)
    G = nx.gnp_random_graph(9, 0.5, seed=5)
    for a, b in G.edges:
        G.edges[a, b]["weight"] = float(rng.uniform(0.1, 1.0))
    model = gm.GTVModel(G, 2, lam=0.3)
    for i in range(4):
        X = rng.standard_normal((int(rng.integers(1, 5)), 2))
        model.set_loss(i, gm.SquaredLoss(X, rng.standard_normal(X.shape[0]), l2=0.1 * i))
    model.set_loss(4, gm.QuadraticLoss(rng.standard_normal(2), l1=0.2))
    model.set_loss(5, gm.QuadraticLoss(rng.standard_normal(2)))
    X = rng.standard_normal((4, 2))
    model.set_loss(6, gm.LogisticLoss(X, np.array([1.0, -1, 1, 1])))
    model.set_loss(7, gm.HuberLoss(X, rng.standard_normal(4), M=0.3))
    part = {0: "a", 1: "a", 4: "a", 8: "a", 2: "b", 3: "b", 5: "b", 6: "c", 7: "c"}
    cg = th.cluster_graph(model, part)
    assert cg.nodes == ["a", "b", "c"]
    assert isinstance(cg.loss("a"), gm.SquaredLoss)
    assert isinstance(cg.loss("b"), gm.SquaredLoss)
    assert isinstance(cg.loss("c"), gm.SymbolicLoss)
    cid = {"a": 0, "b": 1, "c": 2}
    want = {}
    for a, b, dd in G.edges(data=True):
        ca, cb = part[a], part[b]
        if ca != cb:
            key = tuple(sorted((cid[ca], cid[cb])))
            want[key] = want.get(key, 0.0) + dd["weight"]
    got = {tuple(sorted((cid[a], cid[b]))): dd["weight"] for a, b, dd in cg.graph.edges(data=True)}
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-12)
    for _ in range(3):
        Wc = rng.standard_normal((3, 2))
        lifted = Wc[[cid[part[v]] for v in model.nodes]]
        vals = [cg.loss(c).value(Wc[j]) for j, c in enumerate(cg.nodes)]
        ref = model.loss_values(lifted)
        for j, c in enumerate(cg.nodes):
            members = [model.index(v) for v in model.nodes if part[v] == c]
            assert vals[j] == pytest.approx(ref[members].sum(), rel=1e-10)
        assert cg.penalty_value(Wc) == pytest.approx(model.penalty_value(lifted), rel=1e-12)
    # the cluster-graph solution is the full model's optimum restricted to constant clusters
    sol = cg.solve_exact()
    assert sol.objective == pytest.approx(model.objective(sol.weights[[cid[part[v]]
                                                                       for v in model.nodes]]),
                                           rel=1e-6)


def test_cluster_graph_list_partition_labels_and_constraints():
    G = nx.path_graph(4)
    model = gm.GTVModel(G, 1)
    model.add_constraint(0, gm.Box(-1.0, 1.0))
    cg = th.cluster_graph(model, [[0, 1], [2, 3]])
    assert cg.nodes == [0, 1]
    assert cg.graph.edges[0, 1]["weight"] == 1.0
    assert len(cg.constraints(0)) == 1
    model.add_constraint(2, lambda w: w >= 0)
    with pytest.raises(UnsupportedError, match="node 2"):
        th.cluster_graph(model, [[0, 1], [2, 3]])


# ---------------------------------------------------------------------------- bad input
@pytest.fixture
def small():
    data = chain(n=3, eps=0.1, m=5, sigma=0.1, seed=0)
    return data.model()


@pytest.mark.parametrize("partition, exc, msg", [
    ([[0, 1, 2], [3, 4]], PartitionError, "misses 1 node.*5"),
    ([[0, 1, 2], [2, 3, 4, 5]], PartitionError, "node 2 appears in clusters 0 and 1"),
    ([[0, 1, 1, 2], [3, 4, 5]], PartitionError, "node 1 appears twice"),
    ([[0, 1, 2], [], [3, 4, 5]], PartitionError, "cluster 1 is empty"),
    ([[0, 1, 2], [3, 4, 5, 99]], UnknownNodeError, "node 99"),
    ({0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 77: "b"}, UnknownNodeError, "node 77"),
    ([[0, 2], [1, 3, 4, 5]], PartitionError, "cluster 0.*disconnected.*cannot hold"),
    ("012345", PartitionError, "partition must be"),
    ([[0, 1, 2], 3], PartitionError, "cluster 1 must be a collection"),
    ([], PartitionError, "no clusters"),
])
def test_bad_partitions(small, partition, exc, msg):
    with pytest.raises(exc, match=msg):
        th.check_well_connected(small, partition, 0.5)


@pytest.mark.parametrize("lam", [0, -1.0, float("nan"), float("inf"), "x"])
def test_bad_lambda(small, lam):
    part = [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ParameterError, match="lam"):
        th.check_well_connected(small, part, lam)
    with pytest.raises(ParameterError, match="lam"):
        th.verify_recovery(small, part, lam)


def test_lambda_default_is_model_lam(small):
    part = [[0, 1, 2], [3, 4, 5]]
    small.lam = 0.7
    assert th.check_well_connected(small, part)[0].lam == 0.7
    small.lam = 0.0
    with pytest.raises(ParameterError):
        th.check_well_connected(small, part)


def test_bad_options(small):
    part = [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ParameterError, match="constant"):
        th.check_well_connected(small, part, 1.0, constant="paper")
    with pytest.raises(ParameterError, match="flow_func"):
        th.check_well_connected(small, part, 1.0, flow_func="magic")
    with pytest.raises(ParameterError, match="method"):
        th.consensus_threshold(small, method="lp")
    with pytest.raises(ParameterError, match="d = 1"):
        th.consensus_threshold(small, method="flow")


def test_uncovered_losses_and_penalties(small):
    part = [[0, 1, 2], [3, 4, 5]]
    small.penalty = gm.SquaredNorm2()
    with pytest.raises(UnsupportedError, match="SquaredNorm2.*not a norm"):
        th.check_well_connected(small, part, 1.0)
    small.penalty = gm.Norm2()
    X = np.ones((2, 2))
    small.set_loss(4, gm.HingeLoss(X, [1.0, -1.0]))
    with pytest.raises(UnsupportedError, match="node 4.*not differentiable"):
        th.check_well_connected(small, part, 1.0)
    small.set_loss(4, gm.SquaredLoss(X, [1.0, 1.0], l1=0.1))
    with pytest.raises(UnsupportedError, match="node 4"):
        th.consensus_threshold(small)
    small.set_loss(4, lambda w: (w[0] - 1) ** 2 + w[1] ** 2)
    with pytest.raises(UnsupportedError, match="node 4.*symbolic"):
        th.verify_recovery(small, part, 1.0)
    small.set_loss(4, gm.SquaredLoss(X, [1.0, 1.0]))
    small.add_constraint(1, gm.NonNeg())
    with pytest.raises(UnsupportedError, match="node 1 has constraints"):
        th.check_well_connected(small, part, 1.0)


def test_cluster_without_strong_convexity_is_named():
    G = nx.path_graph(4)
    model = gm.GTVModel(G, 2)
    for i in G.nodes:
        model.set_loss(i, gm.SquaredLoss([[1.0, 0.0]], [1.0]))  # all rows parallel
    model.set_loss(1, gm.SquaredLoss([[0.0, 1.0]], [1.0]))  # ... except in cluster A
    with pytest.raises(UnsupportedError, match="cluster 'B'.*alpha_C"):
        th.check_well_connected(model, {0: "A", 1: "A", 2: "B", 3: "B"}, 1.0)


@pytest.mark.parametrize("d", [1, 3])
def test_min_congestion_on_a_forest_is_the_tree_flow(d):
    """On a forest the flows are fixed by the demands: on two paths (weights 1 and 1e-3, the
    chain that made Clarabel fail) the congestion is ``max_j ||u_j||_2 / A_j`` with ``u_j =
    -sum_{i <= j} G_i`` along each path (written here), and a cycle edge sends the graph back
    to the conic problem, which agrees with a CVXPY problem written here."""
    rng = np.random.default_rng(d)
    G = nx.Graph()
    weights = [1.0, 1.0, 1e-3, 1.0, 1.0]
    for j, w in enumerate(weights):  # path 0-1-2-3-4-5
        G.add_edge(j, j + 1, weight=w)
    G.add_edge(6, 7, weight=0.5)  # a second component
    model = gm.GTVModel(G, d, penalty=gm.Norm2())
    D = rng.normal(size=(8, d))
    D[:6] -= D[:6].mean(axis=0)
    D[6:] -= D[6:].mean(axis=0)
    u = -np.cumsum(D[:5], axis=0)
    want = max(max(np.linalg.norm(u[j]) / weights[j] for j in range(5)),
               np.linalg.norm(D[6]) / 0.5)
    assert min_congestion(model, D, None, "test") == pytest.approx(want, rel=1e-12)
    G.add_edge(0, 5, weight=2.0)  # a cycle: the conic problem
    model = gm.GTVModel(G, d, penalty=gm.Norm2())
    U = cp.Variable((model.num_edges, d))
    t = cp.Variable()
    A = model.edge_weights
    cons = [model.incidence.T @ U == -D] + [cp.norm(U[e]) <= t * A[e] for e in range(len(A))]
    cp.Problem(cp.Minimize(t), cons).solve(solver="CLARABEL", tol_gap_abs=1e-12,
                                            tol_gap_rel=1e-12)
    assert min_congestion(model, D, None, "test") == pytest.approx(t.value, rel=1e-7)


def test_inaccurate_congestion_is_that_of_a_balanced_flow():
    """Where the solver ends "inaccurate" (the degenerate optimum 1 of verify_recovery), the
    congestion is that of its flows made to meet the balance exactly: an upper bound of the
    minimum (here 6: six units over the bridge of two triangles), near it for near-optimal
    flows, whatever the rounding left in the balance."""
    model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)
    G = np.array([[2.0], [2.0], [2.0], [-2.0], [-2.0], [-2.0]])
    D = model.incidence
    U = cp.Variable((model.num_edges, 1))
    cp.Problem(cp.Minimize(cp.max(cp.abs(U))), [D.T @ U == -G]).solve(solver="CLARABEL")
    rng = np.random.default_rng(0)
    for noise in (0.0, 1e-6, 1e-3):
        noisy = U.value + noise * rng.standard_normal(U.shape)
        c = _balanced_congestion(model, G, noisy, "test", "CLARABEL", "inaccurate")
        assert 6.0 - 1e-9 <= c <= 6.0 + 10 * noise + 1e-7, (noise, c)
