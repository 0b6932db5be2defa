"""The convex-target baselines (issue 10): certification on a target, local / pooled / oracle,
FedRelax and its privacy variants, network-Lasso ADMM.

Every reference is an independent CVXPY (or numpy) formulation written here per node and per
edge (losses from ``tests/_refs.py``), never the package's compiler; certificates are checked
against the true suboptimality on those references.
"""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest
from _refs import loss_expr

import gtvmodel as gm
from gtvmodel.baselines import admm, certify_target, fedrelax, local, oracle, pooled

TIGHT = {"solver": "CLARABEL", "tol_gap_abs": 1e-11, "tol_gap_rel": 1e-11, "tol_feas": 1e-11}


def _data_model(n_per=(4, 4), d=2, m=5, lam=0.3, penalty=None, seed=0, m_vary=False,
                extra_isolated=False) -> gm.GTVModel:
    """Two clusters (path inside, one edge between), squared losses, weighted edges."""
    rng = np.random.default_rng(seed)
    G = nx.Graph()
    k = sum(n_per)
    G.add_nodes_from(range(k))
    start = 0
    for size in n_per:
        for i in range(start, start + size - 1):
            G.add_edge(i, i + 1, weight=1.0 + 0.5 * rng.random())
        start += size
    G.add_edge(n_per[0] - 1, n_per[0], weight=0.2)
    if extra_isolated:
        G.add_node(k)
    model = gm.GTVModel(G, dim=d, lam=lam, penalty=penalty)
    truth = [np.ones(d), -np.ones(d)]
    start = 0
    for c, size in enumerate(n_per):
        for i in range(start, start + size):
            mi = m + (i % 3 if m_vary else 0)
            X = rng.normal(size=(mi, d))
            model.set_loss(i, gm.SquaredLoss(X, X @ truth[c] + 0.1 * rng.normal(size=mi)))
        start += size
    if extra_isolated:
        X = rng.normal(size=(m, d))
        model.set_loss(k, gm.SquaredLoss(X, X @ truth[0]))
    return model


def _gtv_reference(model: gm.GTVModel, phi, lam: float | None = None) -> tuple[np.ndarray,
                                                                               float]:
    """Hand-written (16): per-node losses plus per-edge ``lam A_e phi(w_a - w_b)``."""
    lam = model.lam if lam is None else lam
    W = cp.Variable((model.num_nodes, model.dim))
    terms = [loss_expr(model.loss_at(i), W[i]) for i in range(model.num_nodes)]
    for (a, b), A in zip(model.edges, model.edge_weights, strict=True):
        terms.append(lam * A * phi(W[a] - W[b]))
    prob = cp.Problem(cp.Minimize(cp.sum(cp.hstack(terms))))
    prob.solve(**TIGHT)
    return W.value, prob.value


def _pooled_reference(model: gm.GTVModel, nodes) -> tuple[np.ndarray, float]:
    """``min_w sum_{i in nodes} L_i(w)`` by hand."""
    w = cp.Variable(model.dim)
    prob = cp.Problem(cp.Minimize(cp.sum(cp.hstack([loss_expr(model.loss_at(i), w)
                                                     for i in nodes]))))
    prob.solve(**TIGHT)
    return w.value, prob.value


def _pooled_value(model: gm.GTVModel, w: np.ndarray, nodes) -> float:
    return float(sum(model.loss_at(i).value(w) for i in nodes))


# ----------------------------------------------------------------- certify_target
def test_consensus_certificate_is_tight_and_sound():
    model = _data_model()
    w_star, p_star = _pooled_reference(model, range(model.num_nodes))
    n = model.num_nodes
    cert = certify_target(model, np.tile(w_star, (n, 1)), "consensus")
    assert cert.gap <= 1e-6 * max(1.0, abs(p_star))
    for shift in (1e-3, 1e-1, 1.0):
        w = w_star + shift * np.array([1.0, -0.5])
        cert = certify_target(model, np.tile(w, (n, 1)), "consensus")
        true = _pooled_value(model, w, range(n)) - p_star
        assert cert.gap >= true - 1e-9 and cert.gap <= 10 * true + 1e-6


def test_consensus_certificate_on_a_disconnected_graph():
    """Two components: the pieces are joined for the consensus certificate, so the bound is
    the pooled one (tight), not the per-component one."""
    model = _data_model()
    G = nx.Graph(model.graph)
    G.remove_edge(3, 4)
    split = gm.GTVModel(G, dim=2, lam=0.3)
    for i in split.nodes:
        split.set_loss(i, model.loss(i))
    w_star, p_star = _pooled_reference(split, range(8))
    assert certify_target(split, np.tile(w_star, (8, 1)), "consensus").gap <= 1e-6 * p_star
    w = w_star + 0.05
    gap = certify_target(split, np.tile(w, (8, 1)), "consensus").gap
    assert gap >= _pooled_value(split, w, range(8)) - p_star - 1e-9
    assert split.num_edges == 6 and split.lam == 0.3  # the model is unchanged


def test_gtv_squared_and_local_targets_are_sound():
    model = _data_model()
    W_sq, p_sq = _gtv_reference(model, lambda v: 0.5 * cp.sum_squares(v))
    W_loc, p_loc = _gtv_reference(model, lambda v: 0.5 * cp.sum_squares(v), lam=0.0)
    rng = np.random.default_rng(1)
    for scale in (0.0, 1e-3, 0.3):
        P = scale * rng.normal(size=W_sq.shape)
        sq = gm.GTVModel(model.graph, dim=2, lam=model.lam, penalty=gm.SquaredNorm2())
        for i in model.nodes:
            sq.set_loss(i, model.loss(i))
        c = certify_target(model, W_sq + P, "gtv-squared")
        assert c.gap >= sq.objective(W_sq + P) - p_sq - 1e-9
        c = certify_target(model, W_loc + P, "local")
        assert c.gap >= model.loss_values(W_loc + P).sum() - p_loc - 1e-9
        if scale == 0.0:
            assert certify_target(model, W_sq, "gtv-squared").gap <= 1e-6 * p_sq
    assert isinstance(model.penalty, gm.Norm2) and model.lam == 0.3


def test_target_leaves_the_model_and_its_cache_alone():
    model = _data_model()
    sol = gm.solve_exact(model)
    builds = model.cache.builds
    penalty = model.penalty
    for target in ("local", "gtv-squared"):
        certify_target(model, sol.weights, target)
    certify_target(model, np.ones_like(sol.weights), "consensus")
    assert model.penalty is penalty and model.lam == 0.3 and model.cache.builds == builds
    assert certify_target(model, sol.weights, "gtv").gap <= 1e-6 * sol.objective
    with pytest.raises(gm.ParameterError, match="target"):
        certify_target(model, sol.weights, "fedavg")
    # not one shared w: named is the first node whose row differs from node 0's (the polish of
    # solve_exact makes the fused nodes 0-3 exactly equal)
    first = int(np.flatnonzero((sol.weights != sol.weights[0]).any(axis=1))[0])
    with pytest.raises(gm.ParameterError, match=f"node {first}"):
        certify_target(model, sol.weights, "consensus")
    with pytest.raises(gm.GraphError, match="only in"):
        model.variant(graph=nx.path_graph(model.num_nodes + 1))


# ----------------------------------------------------------------- local / pooled / oracle
def test_local_is_each_node_alone():
    model = _data_model()
    res = local(model)
    for i in model.nodes:
        loss = model.loss(i)
        w_ref = np.linalg.lstsq(loss.X, loss.y, rcond=None)[0]
        assert np.allclose(res.weight(i), w_ref, atol=1e-6)
    assert res.target == "local" and res.gap <= 1e-6 and res.values_sent == 0
    assert res.rounds == 0 and res.success


def test_local_needs_data_at_every_node():
    model = _data_model()
    model.set_loss(2, gm.ZeroLoss())
    with pytest.raises(gm.DataError, match="node 2"):
        local(model)


def test_pooled_nodes_and_samples_against_references():
    model = _data_model(m_vary=True)
    res = pooled(model)
    w_ref, _ = _pooled_reference(model, range(model.num_nodes))
    assert np.allclose(res.weights, w_ref, atol=1e-6)
    assert res.target == "consensus" and res.gap <= 1e-6 * max(1, res.certificate.primal_value)
    # samples: least squares on the stacked samples
    Xs = np.vstack([model.loss(i).X for i in model.nodes])
    ys = np.concatenate([model.loss(i).y for i in model.nodes])
    res_s = pooled(model, weighting="samples")
    assert np.allclose(res_s.weights, np.linalg.lstsq(Xs, ys, rcond=None)[0], atol=1e-6)
    assert res_s.certificate is None and "unequal" in res_s.info["certificate"]
    # equal sample sizes: the same problem as the consensus one, certified
    even = _data_model()
    res_e = pooled(even, weighting="samples")
    assert np.allclose(res_e.weights, pooled(even).weights, atol=1e-6)
    assert res_e.target == "consensus" and res_e.gap <= 1e-6
    # one round: every node uploads X and y, the server sends w back
    up = sum(model.loss(i).X.size + model.loss(i).y.size for i in model.nodes)
    assert res.values_sent == up + model.num_nodes * model.dim and res.rounds == 1


def test_pooled_samples_refuses_what_it_cannot_stack():
    model = _data_model()
    model.set_loss(5, gm.QuadraticLoss([1.0, 2.0]))
    with pytest.raises(gm.UnsupportedError, match="node 5"):
        pooled(model, weighting="samples")
    with pytest.raises(gm.ParameterError, match="weighting"):
        pooled(model, weighting="edges")


def test_oracle_pools_each_cluster():
    model = _data_model()
    parts = [[0, 1, 2, 3], [4, 5, 6, 7]]
    res = oracle(model, parts)
    for part in parts:
        w_ref, _ = _pooled_reference(model, part)
        assert np.allclose(res.weights[part], w_ref, atol=1e-6)
    assert res.gap <= 1e-6 * max(1, res.certificate.primal_value)
    assert np.array_equal(oracle(model, [0, 0, 0, 0, 1, 1, 1, 1]).weights, res.weights)
    # the per-cluster certificate is sound at another point
    w_bad = res.weights + 0.1
    true = sum(_pooled_value(model, w_bad[p[0]], p) - _pooled_reference(model, p)[1]
               for p in parts)
    assert certify_target(model, w_bad, "consensus", groups=[0] * 4 + [1] * 4).gap >= true - 1e-9


@pytest.mark.parametrize("partition, error, word", [
    ([[0, 1, 2, 3], [4, 5, 6, 99]], gm.UnknownNodeError, "99"),
    ([[0, 1, 2, 3], [3, 4, 5, 6, 7]], gm.PartitionError, "3"),
    ([[0, 1, 2, 3], [4, 5, 6]], gm.PartitionError, "7"),
])
def test_oracle_partition_errors_name_the_node(partition, error, word):
    with pytest.raises(error, match=word):
        oracle(_data_model(), partition)


# ----------------------------------------------------------------- FedRelax
def test_fedrelax_fixed_point_is_gtv_with_half_squared_norm():
    model = _data_model(extra_isolated=True)
    model.set_loss(2, gm.ZeroLoss())  # a node without data: the neighbour average
    W_ref, p_ref = _gtv_reference(model, lambda v: 0.5 * cp.sum_squares(v))
    res = fedrelax(model, rounds=5000, tol=1e-13, certify_every=25)
    assert res.status == "converged" and res.target == "gtv-squared"
    assert np.allclose(res.weights, W_ref, atol=1e-6)
    assert res.gap <= 1e-6 * p_ref
    h = res.history
    assert np.isfinite(h.gap[::25]).all() and np.isnan(h.gap[1:25]).all()
    ok = np.isfinite(h.gap)
    assert (h.gap[ok] >= h.objective[ok] - p_ref - 1e-9).all()  # sound at every round
    assert res.values_sent == res.rounds * 2 * model.num_edges * model.dim
    assert h.values_sent[-1] == res.values_sent and h.round[-1] == res.rounds


def test_fedrelax_privacy_variants_at_zero_noise_are_plain_fedrelax():
    model = _data_model()
    plain = fedrelax(model, rounds=30, tol=0.0)
    for perturb in ("updates", "features"):
        same = fedrelax(model, rounds=30, tol=0.0, noise=0.0, perturb=perturb, seed=3)
        assert np.array_equal(same.weights, plain.weights)
        noisy = fedrelax(model, rounds=30, tol=0.0, noise=0.1, perturb=perturb, seed=3)
        again = fedrelax(model, rounds=30, tol=0.0, noise=0.1, perturb=perturb, seed=3)
        assert not np.allclose(noisy.weights, plain.weights)
        assert np.array_equal(noisy.weights, again.weights)  # seeded
        assert noisy.gap >= noisy.certificate.primal_value - plain.certificate.primal_value \
            - plain.gap - 1e-9
    assert model.loss(0).X is not None and isinstance(model.penalty, gm.Norm2)


# ----------------------------------------------------------------- ADMM
@pytest.mark.parametrize("penalty, phi", [
    (gm.Norm2(), cp.norm2),
    (gm.Norm1(), cp.norm1),
])
def test_admm_converges_to_the_exact_solution(penalty, phi):
    model = _data_model(lam=0.4, penalty=penalty)
    W_ref, p_ref = _gtv_reference(model, phi)
    res = admm(model, rho=1.0, rounds=5000, abs_tol=1e-10, rel_tol=1e-10, certify_every=50)
    assert res.status == "converged" and res.target == "gtv"
    assert np.allclose(res.weights, W_ref, atol=1e-5)
    h = res.history
    ok = np.isfinite(h.gap)
    assert ok.sum() >= 3
    assert (h.gap[ok] >= h.objective[ok] - p_ref - 1e-9).all()  # never below the truth
    assert res.gap <= 1e-5 * p_ref


def test_admm_flows_satisfy_the_node_optimality_condition():
    """``-(D^T u)_i = grad L_i(w_i)`` with ``u = rho (u^+ - u^-)/2`` (the sign derived in the
    module docstring), and ``||u_e|| <= lambda A_e``."""
    model = _data_model(lam=0.4)
    res = admm(model, rho=2.0, rounds=5000, abs_tol=1e-11, rel_tol=1e-11)
    U = res.info["flows"]
    G = model.loss_gradients(res.weights)
    assert np.allclose(-(model.incidence.T @ U), G, atol=1e-6)
    assert (np.linalg.norm(U, axis=1) <= model.capacities * (1 + 1e-8)).all()


@pytest.mark.parametrize("rho0", [1e-3, 1e3])
def test_admm_residual_balancing_repairs_a_bad_rho(rho0):
    """From a badly scaled ``rho`` the balanced run reaches the independent optimum where the
    fixed one is still far after the same rounds; ``rho`` is fixed after ``balance_rounds``
    and the flows stay those of the unscaled duals (node optimality holds at the end)."""
    model = _data_model(lam=0.05)
    W_ref, p_ref = _gtv_reference(model, cp.norm2)
    fixed = admm(model, rho=rho0, rounds=300, abs_tol=0.0, rel_tol=0.0, balance_rounds=0)
    balanced = admm(model, rho=rho0, rounds=300, abs_tol=0.0, rel_tol=0.0, balance_rounds=100)
    assert fixed.info["rho"] == rho0 and fixed.info["rho_changes"] == 0
    assert balanced.info["rho_changes"] >= 1 and balanced.info["rho"] != rho0
    assert np.abs(balanced.weights - W_ref).max() <= 1e-6
    assert np.abs(fixed.weights - W_ref).max() >= 100 * np.abs(balanced.weights - W_ref).max()
    assert p_ref - 1e-9 <= balanced.certificate.primal_value <= p_ref + balanced.gap + 1e-9
    U = balanced.info["flows"]
    assert np.allclose(-(model.incidence.T @ U), model.loss_gradients(balanced.weights),
                       atol=1e-5)


def test_admm_rho_is_fixed_after_the_balancing_rounds():
    model = _data_model(lam=0.05)
    runs = [admm(model, rho=1e3, rounds=r, abs_tol=0.0, rel_tol=0.0, balance_rounds=3,
                 certify=False) for r in (4, 60)]
    assert runs[0].info["rho"] == runs[1].info["rho"]
    assert runs[1].info["rho_changes"] <= 3


def test_admm_handles_isolated_nodes():
    model = _data_model(extra_isolated=True)
    W_ref, _ = _gtv_reference(model, cp.norm2)
    res = admm(model, rounds=5000, abs_tol=1e-10, rel_tol=1e-10)
    assert np.allclose(res.weights, W_ref, atol=1e-5)


# ----------------------------------------------------------------- bad input
@pytest.mark.parametrize("call, word", [
    (lambda m: fedrelax(m, rounds=0), "rounds"),
    (lambda m: fedrelax(m, noise=-1.0), "noise"),
    (lambda m: fedrelax(m, perturb="labels"), "perturb"),
    (lambda m: fedrelax(m, certify_every=-1), "certify_every"),
    (lambda m: fedrelax(m, tol=-1.0), "tol"),
    (lambda m: admm(m, rho=0.0), "rho"),
    (lambda m: admm(m, rho=-1.0), "rho"),
    (lambda m: admm(m, rounds=0), "rounds"),
    (lambda m: admm(m, abs_tol=-1.0), "abs_tol"),
    (lambda m: admm(m, balance_rounds=-1), "balance_rounds"),
    (lambda m: admm(m, balance_rounds=1.5), "balance_rounds"),
    (lambda m: pooled(m, weighting="x"), "weighting"),
])
def test_bad_arguments_name_themselves(call, word):
    with pytest.raises(gm.ParameterError, match=word):
        call(_data_model())


def test_fedrelax_needs_a_positive_lambda():
    with pytest.raises(gm.ParameterError, match="lam"):
        fedrelax(_data_model(lam=0.0))


def test_fedrelax_and_admm_respect_node_constraints():
    """A box at two nodes: both methods reach the constrained optimum of their targets."""
    model = _data_model(lam=0.4)
    for i in (0, 5):
        model.add_constraint(i, gm.Box(-0.2, 0.2))

    def reference(phi):
        W = cp.Variable((model.num_nodes, model.dim))
        terms = [loss_expr(model.loss_at(i), W[i]) for i in range(model.num_nodes)]
        terms += [model.lam * A * phi(W[a] - W[b])
                  for (a, b), A in zip(model.edges, model.edge_weights, strict=True)]
        cons = [cp.abs(W[i]) <= 0.2 for i in (0, 5)]
        cp.Problem(cp.Minimize(cp.sum(cp.hstack(terms))), cons).solve(**TIGHT)
        return W.value

    res = fedrelax(model, rounds=5000, tol=1e-13)
    assert np.allclose(res.weights, reference(lambda v: 0.5 * cp.sum_squares(v)), atol=1e-6)
    res = admm(model, rounds=5000, abs_tol=1e-10, rel_tol=1e-10)
    assert np.allclose(res.weights, reference(cp.norm2), atol=1e-5)
    assert res.gap <= 1e-5 * max(1.0, res.certificate.primal_value)


def test_baselines_take_a_networked_dataset():
    data = gm.datasets.sbm(sizes=(5, 5), p_in=0.9, p_out=0.1, seed=0)
    res = fedrelax(data, rounds=20)
    assert res.weights.shape == (10, 2) and res.history.round[-1] == res.rounds
    assert oracle(data, data.partition()).gap <= 1e-6
