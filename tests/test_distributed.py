"""Algorithm 1 on Dask (issue 14): the same iterates as the serial solver, boundary-sized
messages, faults, bad input.  One 2-worker ``LocalCluster`` (worker processes) per module."""

from __future__ import annotations

import os
import threading
import time

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel.errors import (
    DistributedError,
    GTVError,
    ParameterError,
    PartitionError,
    WorkerLostError,
)
from gtvmodel.primal_dual.sharding import ShardLayout, cut_of, partition_nodes

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster():
    cl = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0")
    yield cl
    cl.close()


@pytest.fixture(scope="module")
def client(cluster):
    c = distributed.Client(cluster)
    yield c
    c.close()


def _graph(n: int, seed: int) -> nx.Graph:
    rng = np.random.default_rng(seed)
    G = nx.connected_watts_strogatz_graph(n, 4, 0.2, seed=seed)
    for a, b in G.edges:
        G[a][b]["weight"] = float(rng.uniform(0.5, 2.0))
    return G


def _model(kind: str, n: int = 30, m: int = 5, seed: int = 0, isolated: bool = True
           ) -> gm.GTVModel:
    """Two clusters of local linear models (true weights ``a`` on the first half, ``b`` on the
    second) with losses of ``kind``; an isolated node when ``isolated``."""
    rng = np.random.default_rng(seed)
    G = _graph(n, seed)
    if isolated:
        G.add_node(n)
    model = gm.GTVModel(G, 2, lam=0.3)
    a, b = np.array([1.0, -1.0]), np.array([-1.0, 2.0])
    for i in G.nodes:
        X = rng.standard_normal((m, 2))
        w = a if i < n // 2 else b
        if kind == "squared":
            model.set_loss(i, gm.SquaredLoss(X, X @ w + 0.1 * rng.standard_normal(m)))
        elif kind == "logistic":
            model.set_loss(i, gm.LogisticLoss(X, (X @ w > 0).astype(float)))
        elif kind == "constrained":
            model.set_loss(i, gm.SquaredLoss(X, X @ w))
            if i % 3 == 0:
                model.add_constraint(i, gm.Box(-0.5, 0.5))
            elif i % 3 == 1:
                model.add_constraint(i, gm.NormBall(1.0))
        elif kind == "symbolic":
            if i % 4 == 0:
                model.set_loss(i, cp.sum_squares(model.var(i) - w) + 0.1 * cp.norm1(model.var(i)))
            elif i % 4 == 1:
                model.set_loss(i, gm.HingeLoss(X, np.sign(X @ w)))
            else:
                model.set_loss(i, gm.SquaredLoss(X, X @ w))
            if i % 5 == 0:
                model.add_constraint(i, model.var(i) >= -1.0)
    return model


# ------------------------------------------------------------------------------- sharding
def test_partition_finds_the_bridge_and_is_balanced():
    G = nx.barbell_graph(10, 0)  # two 10-cliques joined by one edge
    model = gm.GTVModel(G, 1)
    labels = partition_nodes(model, 2)
    assert np.bincount(labels).tolist() == [10, 10]
    assert cut_of(model, labels) == (1, 1.0)


def test_partition_refines_the_breadth_first_split():
    G = nx.grid_2d_graph(12, 12)
    model = gm.GTVModel(G, 1)
    kl = partition_nodes(model, 4)
    bfs = partition_nodes(model, 4, kl_passes=0)
    assert sorted(np.bincount(kl).tolist()) == [36, 36, 36, 36]
    assert cut_of(model, kl)[0] <= cut_of(model, bfs)[0]
    assert cut_of(model, kl)[0] <= 36  # a 12x12 grid into 4 quarters cuts 24 edges


def test_layout_boundary_bookkeeping():
    model = _model("squared", n=20)
    labels = partition_nodes(model, 3)
    lay = ShardLayout.build(model, labels)
    E = model.edges
    cross = labels[E[:, 0]] != labels[E[:, 1]]
    assert lay.cut_edges == int(cross.sum())
    assert np.array_equal(lay.boundary_edges, np.flatnonzero(cross))
    # every edge is owned once, every incident edge of a shard touches it
    owned = np.concatenate(lay.owned)
    assert np.array_equal(np.sort(owned), np.arange(model.num_edges))
    for s in range(3):
        assert np.all((labels[E[lay.incident[s], 0]] == s) | (labels[E[lay.incident[s], 1]] == s))
    with pytest.raises(PartitionError):
        ShardLayout.build(model, np.full(model.num_nodes, 1))  # shard 0 empty


# ------------------------------------------------------------------------ same iterates
def _assert_same(a, b, tol=1e-12):
    assert a.iterations == b.iterations
    assert np.abs(a.weights - b.weights).max() <= tol
    assert np.abs(a.flows - b.flows).max() <= tol
    assert a.c == pytest.approx(b.c, rel=1e-12) if a.c is not None else b.c is None


@pytest.mark.parametrize("kind", ["squared", "logistic", "constrained", "symbolic"])
def test_same_iterates_as_the_serial_solver(client, kind):
    model = _model(kind)
    kw = {"max_iter": 40, "tol": 0.0, "record_every": 20, "batch_cvxpy": False}
    a = gm.solve_primal_dual(model, **kw)
    b = gm.solve_primal_dual(model, **kw, backend="dask", client=client, shards=3)
    _assert_same(a, b)
    assert isinstance(b, gm.DistributedResult) and b.recoveries == 0
    assert b.paths == a.paths
    # the certificates are summed from the shards (one CVXPY split per shard for the
    # constrained nodes): equal to rounding relative to |P(w)| (measured 5.7e-14 at P = 27)
    np.testing.assert_allclose(b.history.gap, a.history.gap, rtol=1e-12,
                               atol=1e-14 * max(1.0, abs(a.objective)))
    np.testing.assert_allclose(b.history.primal_residual, a.history.primal_residual,
                               rtol=1e-12)


@pytest.mark.parametrize("step", [0.7, "explicit"])
def test_same_iterates_with_fixed_and_explicit_steps(client, step):
    model = _model("squared", isolated=False)
    if step == "explicit":
        step = (0.5 / np.maximum(model.degrees, 1), np.full(model.num_edges, 1.0))
    kw = {"max_iter": 30, "tol": 0.0, "record_every": 30, "step": step}
    a = gm.solve_primal_dual(model, **kw)
    b = gm.solve_primal_dual(model, **kw, backend="dask", client=client, shards=2)
    _assert_same(a, b)


def test_grouped_cvxpy_path_agrees_to_the_solver_tolerance(client):
    """With ``batch_cvxpy=True`` each shard solves its own CVXPY problem instead of one for all
    CVXPY-path nodes: the iterates agree to the inexactness schedule, not bitwise."""
    model = _model("symbolic")
    kw = {"max_iter": 40, "tol": 0.0, "record_every": 40}
    a = gm.solve_primal_dual(model, **kw)
    b = gm.solve_primal_dual(model, **kw, backend="dask", client=client, shards=2)
    # measured: 5e-6 on the weights, 3e-5 on the flows after 40 iterations
    assert np.abs(a.weights - b.weights).max() <= 1e-3
    assert np.abs(a.flows - b.flows).max() <= 1e-3


def test_converges_to_an_independent_cvxpy_solution(client):
    model = _model("squared", n=16, isolated=False)
    res = gm.solve_primal_dual(model, tol=1e-7, record_every=20, backend="dask",
                               client=client, shards=2)
    assert res.status == "converged" and res.gap <= 1e-7 * max(1.0, abs(res.objective))
    # the problem (16) written directly in CVXPY
    n, d = model.num_nodes, 2
    W = cp.Variable((n, d))
    rng = np.random.default_rng(0)
    G = _graph(16, 0)
    a, b = np.array([1.0, -1.0]), np.array([-1.0, 2.0])
    loss = 0
    for i in range(n):
        X = rng.standard_normal((5, 2))
        y = X @ (a if i < 8 else b) + 0.1 * rng.standard_normal(5)
        loss = loss + cp.sum_squares(X @ W[i] - y) / 5
    tv = sum(G[i][j]["weight"] * cp.norm(W[i] - W[j], 2) for i, j in G.edges)
    prob = cp.Problem(cp.Minimize(loss + 0.3 * tv))
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    assert res.objective - prob.value <= 1e-6 * max(1.0, abs(prob.value))
    assert res.objective >= prob.value - 1e-7
    np.testing.assert_allclose(res.weights, W.value, atol=2e-3)


def test_explicit_shard_labels_and_stopping_like_the_serial_run(client):
    model = _model("squared", isolated=False)
    labels = np.arange(model.num_nodes) % 2  # a bad cut on purpose: still the same run
    a = gm.solve_primal_dual(model, tol=1e-5, record_every=10, certificate_budget=None)
    b = gm.solve_primal_dual(model, tol=1e-5, record_every=10, certificate_budget=None,
                             backend="dask", client=client, shards=labels)
    assert a.status == b.status == "converged"
    _assert_same(a, b)
    assert np.array_equal(b.shard_of, labels)


def test_a_callback_stops_the_run_as_in_the_serial_run(client):
    model = _model("squared", n=12, isolated=False)
    seen = []

    def stop_at_3(k, W, U):
        seen.append((k, W.copy()))
        return k == 3

    a = gm.solve_primal_dual(model, tol=0.0, callback=stop_at_3)
    serial_seen, seen[:] = list(seen), []
    b = gm.solve_primal_dual(model, tol=0.0, callback=stop_at_3, backend="dask",
                             client=client, shards=3)
    assert a.status == b.status == "stopped" and b.iterations == 3
    _assert_same(a, b)
    assert [k for k, _ in seen] == [1, 2, 3]
    for (_, Wa), (_, Wb) in zip(serial_seen, seen, strict=True):
        np.testing.assert_array_equal(Wa, Wb)  # the callback sees the gathered iterate


# --------------------------------------------------------------------- data stays put
def test_driver_sends_boundary_sized_messages(client):
    """The driver's bytes per iteration depend on the boundary, not on the data: 100x the
    data rows per node leave them unchanged, and they are a few boundary rows' worth."""
    small, big = _model("squared", m=4), _model("squared", m=400)
    kw = {"max_iter": 12, "tol": 0.0, "record_every": 12, "backend": "dask",
          "client": client, "shards": 2}
    rs, rb = gm.solve_primal_dual(small, **kw), gm.solve_primal_dual(big, **kw)
    assert rb.setup_bytes > 10 * rs.setup_bytes  # the data went once, at setup
    assert np.array_equal(rs.bytes_sent, rb.bytes_sent)  # same graph: same messages
    d = small.dim
    boundary_bytes = 8 * d * (rs.boundary_nodes + rs.boundary_edges)
    per_iter = rs.bytes_sent.max()
    assert per_iter <= 2 * boundary_bytes + 4000  # rows plus pickling overhead per call
    assert per_iter < rb.setup_bytes / 100


# ------------------------------------------------------------------------------ faults
def _kill(cluster, client, which):
    """Kill the worker processes at the given addresses (their nannies do not start new ones)
    and wait until the scheduler has removed them (a call to a dead worker the scheduler still
    lists waits for ``distributed.comm.timeouts.connect``, 30 s)."""
    from distributed.core import Status

    for nanny in cluster.workers.values():
        if nanny.worker_address in which:
            nanny.status = Status.closing_gracefully  # the nanny closes instead of restarting
    try:
        client.run(os._exit, 1, workers=list(which))
    except Exception:  # the killed workers cannot answer
        pass
    deadline = time.monotonic() + 30
    while set(client.scheduler_info()["workers"]) & set(which) and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.parametrize(("vanishing", "routing"), [
    (False, "workers"), (True, "workers"),
    pytest.param(False, "driver", marks=pytest.mark.slow)],
    ids=["rebuilt", "rebuild-finds-none", "rebuilt-driver-routed"])
def test_a_killed_worker_is_replaced_and_the_run_finishes_the_same(vanishing, routing,
                                                                    monkeypatch):
    """With ``vanishing``, the first rebuild's worker list comes back empty (the scheduler had
    just dropped the last worker; seen once in CI on a loaded machine): the rebuild waits for
    a worker and goes on instead of failing (one recovery, as without).  Both routings
    recover."""
    model = _model("logistic", n=24)
    kw = {"max_iter": 30, "tol": 0.0, "record_every": 15}
    ref = gm.solve_primal_dual(model, **kw)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cl, distributed.Client(cl) as c:
        killed = []
        first = sorted(c.scheduler_info()["workers"])
        real_info = c.scheduler_info

        def empty_once(*args, **kwargs):
            monkeypatch.setattr(c, "scheduler_info", real_info)
            return {**real_info(*args, **kwargs), "workers": {}}

        def kill_at_12(k, W, U):
            if k == 12 and not killed:
                killed.append(first[0])
                _kill(cl, c, killed)
                if vanishing:
                    monkeypatch.setattr(c, "scheduler_info", empty_once)

        res = gm.solve_distributed(model, **kw, callback=kill_at_12, client=c, shards=2,
                                   checkpoint_every=5, routing=routing)
    assert res.recoveries == 1
    # both shards rebuilt on the one worker left (first[1], or its nanny's restart if the
    # scheduler dropped it under load), never on the killed one
    assert len(set(res.workers)) == 1 and first[0] not in res.workers
    assert res.status == ref.status == "max_iter"
    _assert_same(ref, res)
    np.testing.assert_allclose(res.history.gap, ref.history.gap, rtol=1e-12)


def test_no_worker_left_raises_with_the_last_checkpoint():
    model = _model("squared", n=12)
    kw = {"tol": 0.0, "step": 0.5}  # fixed steps: a resumed run is the uninterrupted one
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cl, distributed.Client(cl) as c:
        def kill_all(k, W, U):
            if k == 7:
                _kill(cl, c, set(c.scheduler_info()["workers"]))

        with pytest.raises(WorkerLostError) as info:
            gm.solve_distributed(model, max_iter=20, **kw, callback=kill_all, client=c,
                                 shards=2, checkpoint_every=5, recover_timeout=1.0)
    ck = info.value.checkpoint
    assert isinstance(ck, gm.Checkpoint) and ck.iteration == 5
    ref = gm.solve_primal_dual(model, max_iter=5, **kw, record_every=5)
    np.testing.assert_array_equal(ck.weights, ref.weights)
    np.testing.assert_array_equal(ck.flows, ref.flows)
    # nothing is lost: resuming from the checkpoint finishes the uninterrupted run
    full = gm.solve_primal_dual(model, max_iter=20, **kw, record_every=20)
    rest = gm.solve_primal_dual(model, max_iter=15, **kw, record_every=15,
                                warm_start=(ck.weights, ck.flows))
    np.testing.assert_allclose(rest.weights, full.weights, atol=1e-12)
    np.testing.assert_allclose(rest.flows, full.flows, atol=1e-12)


def test_a_cluster_still_starting_is_waited_for():
    """No worker yet when the run starts (a cluster scaling up, or a worker being replaced
    under load): the set-up waits up to ``recover_timeout`` for one, as a recovery does,
    instead of failing at once; with none in time it raises with the start as checkpoint."""
    model = _model("squared", n=12)
    kw = {"tol": 0.0, "step": 0.5, "max_iter": 10, "record_every": 10}
    with distributed.LocalCluster(n_workers=0, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cl, distributed.Client(cl) as c:
        with pytest.raises(WorkerLostError) as info:
            gm.solve_distributed(model, client=c, shards=2, recover_timeout=0.5, **kw)
        assert info.value.checkpoint.iteration == 0
        later = threading.Timer(1.0, cl.scale, args=(1,))
        later.start()
        try:
            res = gm.solve_distributed(model, client=c, shards=2, recover_timeout=120.0, **kw)
        finally:
            later.join()
    _assert_same(gm.solve_primal_dual(model, **kw), res)


# ---------------------------------------------------------------------------- bad input
def test_bad_input_raises_the_packages_errors(client):
    model = _model("squared", n=10)
    n = model.num_nodes
    for shards in (0, n + 1):
        with pytest.raises(ParameterError, match="shards"):
            gm.solve_primal_dual(model, backend="dask", client=client, shards=shards)
    with pytest.raises(ParameterError, match="shards"):
        gm.solve_primal_dual(model, backend="dask", client=client, shards=np.zeros(3, int))
    with pytest.raises(ParameterError, match="backend"):
        gm.solve_primal_dual(model, backend="spark")
    with pytest.raises(ParameterError, match="client"):
        gm.solve_primal_dual(model, client=client)  # numpy backend
    with pytest.raises(ParameterError, match="client"):
        gm.solve_primal_dual(model, backend="dask", client="tcp://nowhere:1")
    with pytest.raises(ParameterError, match="checkpoint_every"):
        gm.solve_distributed(model, client=client, checkpoint_every=0)
    with pytest.raises(ParameterError, match="certificates"):
        gm.solve_distributed(model, client=client, certificates="driver")
    closed = distributed.Client(client.cluster)  # a second client of the same cluster
    closed.close()
    with pytest.raises(ParameterError, match="client is 'closed'"):
        gm.solve_primal_dual(model, backend="dask", client=closed)
    assert issubclass(DistributedError, GTVError) and issubclass(WorkerLostError,
                                                                  DistributedError)


def test_a_worker_failure_in_the_computation_is_not_a_lost_worker(client):
    """A node update failing on a worker raises the package's error as in the serial run."""
    model = _model("squared", n=10, isolated=False)
    model.add_constraint(3, gm.Box(1.0, 2.0))
    model.add_constraint(3, model.var(3) <= 0.0)  # infeasible: the CVXPY path says so
    with pytest.raises(GTVError) as serial:
        gm.solve_primal_dual(model, max_iter=3, tol=0.0, record_every=None)
    t0 = time.perf_counter()
    with pytest.raises(type(serial.value)):
        gm.solve_primal_dual(model, max_iter=3, tol=0.0, record_every=None, backend="dask",
                             client=client, shards=2)
    assert time.perf_counter() - t0 < 30


# -------------------------------------------------------- certificates from shard sums
def _cert_case(kind: str, n: int = 20, seed: int = 3) -> tuple[gm.GTVModel, float]:
    """A model with ``kind`` losses (and an isolated node) and its optimal value from the
    problem (16) written directly in CVXPY, solved tightly."""
    rng = np.random.default_rng(seed)
    G = _graph(n, seed)
    G.add_node(n)  # isolated
    model = gm.GTVModel(G, 2, lam=0.3)
    W = cp.Variable((n + 1, 2))
    obj, cons = 0, []
    for i in G.nodes:
        X = rng.standard_normal((5, 2))
        w = np.array([1.0, -1.0]) if i < n // 2 else np.array([-1.0, 2.0])
        if kind == "logistic":
            y = np.where(X @ w + 0.5 * rng.standard_normal(5) > 0, 1.0, -1.0)
            model.set_loss(i, gm.LogisticLoss(X, y))
            obj = obj + cp.sum(cp.logistic(-cp.multiply(y, X @ W[i]))) / 5
        else:
            y = X @ w + 0.1 * rng.standard_normal(5)
            model.set_loss(i, gm.SquaredLoss(X, y))
            obj = obj + cp.sum_squares(X @ W[i] - y) / 5
        if kind == "constrained" and i % 3 == 0:
            model.add_constraint(i, gm.Box(-0.5, 0.5))
            cons += [W[i] >= -0.5, W[i] <= 0.5]
        elif kind == "constrained" and i % 3 == 1:
            model.add_constraint(i, gm.NormBall(1.0))
            cons.append(cp.norm(W[i], 2) <= 1.0)
    tv = sum(G[i][j]["weight"] * cp.norm(W[i] - W[j], 2) for i, j in G.edges)
    prob = cp.Problem(cp.Minimize(obj + 0.3 * tv), cons)
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    return model, float(prob.value)


@pytest.mark.parametrize("kind", ["squared", "logistic", "constrained"])
def test_sharded_certificate_equals_the_gathered_one_and_is_sound(client, kind):
    model, p_star = _cert_case(kind)
    res = gm.solve_distributed(
        model, max_iter=40, tol=0.0, record_every=20, certificate_budget=None, client=client,
        shards=3)
    assert res.certificates_gathered == 0 and res.gather_reasons == []
    cert = res.certificate
    ref = gm.certify(model, res.weights, res.flows, fallback=False)  # what the driver ran
    scale = max(1.0, abs(ref.primal_value))
    assert abs(cert.primal_value - ref.primal_value) <= 1e-12 * scale
    assert abs(cert.dual_value - ref.dual_value) <= 1e-9 * scale  # a CVXPY split per shard
    assert abs(cert.gap - ref.gap) <= 1e-9 * scale
    np.testing.assert_allclose(cert.flows, ref.flows, rtol=0, atol=1e-13)
    np.testing.assert_allclose(cert.node_gaps, ref.node_gaps, rtol=0, atol=1e-9)
    np.testing.assert_allclose(cert.edge_gaps, ref.edge_gaps, rtol=0, atol=1e-12)
    assert cert.flow_scale == ref.flow_scale and cert.repairs == ref.repairs
    # sound: the gap bounds the true suboptimality (independent CVXPY optimum)
    assert cert.primal_value - p_star > 1e-6  # not converged: a meaningful check
    assert cert.gap >= cert.primal_value - p_star - 1e-8
    assert res.history.gap[0] >= res.history.primal[0] - p_star - 1e-8


def test_sharded_certificates_stop_at_the_serial_iteration(client):
    model, _ = _cert_case("logistic")
    kw = {"tol": 1e-4, "record_every": 10, "certificate_budget": None}
    a = gm.solve_primal_dual(model, **kw)
    b = gm.solve_primal_dual(model, **kw, backend="dask", client=client, shards=2)
    assert a.status == b.status == "converged"
    assert a.iterations == b.iterations and b.certificates_gathered == 0
    np.testing.assert_allclose(b.history.gap, a.history.gap, rtol=1e-9, atol=1e-12)


def test_a_global_repair_step_gathers_and_says_so(client):
    model, _ = _cert_case("squared", n=10)
    model.set_loss(2, gm.ZeroLoss())  # a zero-loss node: (D^T u)_2 = 0, a global correction
    res = gm.solve_distributed(
        model, max_iter=20, tol=0.0, record_every=10, certificate_budget=None, client=client,
        shards=2)
    assert res.certificates_gathered == 2 and "subspace" in res.gather_reasons[0]
    ref = gm.certify(model, res.weights, res.flows, fallback=False)
    assert res.certificate.gap == ref.gap


def test_sharded_certificates_gather_shard_sized_messages(client):
    """Bytes per certificate: O(shards), not O(n d) -- 4x the nodes leave them about
    unchanged, while the gathered certificate's grow with n d + |E| d."""
    run = gm.solve_distributed
    kw = {"max_iter": 10, "tol": 0.0, "record_every": 10, "certificate_budget": None,
          "client": client, "shards": 2}
    sizes = {}
    for n in (20, 80):
        model, _ = _cert_case("squared", n=n) if n == 20 else (_model("squared", n=n), None)
        sharded = run(model, **kw)
        gathered = run(model, **kw, certificates="gathered")
        assert gathered.certificates_gathered == 1 and sharded.certificates_gathered == 0
        assert sharded.certificate.gap == pytest.approx(gathered.certificate.gap, rel=1e-9)
        sizes[n] = (int(sharded.certificate_bytes[0]), int(gathered.certificate_bytes[0]),
                    8 * model.dim * (model.num_nodes + model.num_edges))
    for shard_b, gather_b, iterate_b in sizes.values():
        assert gather_b >= iterate_b and shard_b < 2000
    assert sizes[80][0] <= sizes[20][0] + 64  # independent of n
    assert sizes[80][1] >= 3 * sizes[20][1]


def test_sharded_certificate_with_a_shard_without_edges(client):
    G = nx.Graph()
    G.add_nodes_from(range(4))
    G.add_edge(0, 1)
    model = gm.GTVModel(G, 2, lam=0.3)
    for i in range(4):
        model.set_loss(i, gm.SquaredLoss(np.eye(2), np.full(2, float(i))))
    res = gm.solve_distributed(model, max_iter=10, tol=0.0, record_every=5,
                               certificate_budget=None, client=client,
                               shards=np.array([0, 0, 1, 1]))  # shard 1: isolated nodes
    ref = gm.certify(model, res.weights, res.flows, fallback=False)
    assert res.certificates_gathered == 0
    assert res.certificate.gap == pytest.approx(ref.gap, rel=1e-12, abs=1e-15)
    W = cp.Variable((4, 2))  # (16) directly: (1/2)||w_i - i||^2 + 0.3 ||w_0 - w_1||
    p = cp.Problem(cp.Minimize(sum(cp.sum_squares(W[i] - i) / 2 for i in range(4))
                               + 0.3 * cp.norm(W[0] - W[1], 2)))
    p.solve(solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    assert res.certificate.gap >= res.certificate.primal_value - p.value - 1e-9


# ------------------------------------------------------ worker-to-worker routing (item 7)
@pytest.mark.parametrize("kind", ["squared", "constrained"])
def test_worker_routing_gives_the_driver_routed_iterates_bitwise(client, kind):
    """4 shards on 2 workers (pushes within a worker and across): the iterates, the step
    scale and the history of ``routing="workers"`` (the default) are those of
    ``routing="driver"`` bit for bit, and the serial ones to 1e-12; the residual balancing
    adapts ``c`` on the way (40 iterations, every 10)."""
    model = _model(kind)
    kw = {"max_iter": 40, "tol": 0.0, "record_every": 20, "batch_cvxpy": False}
    serial = gm.solve_primal_dual(model, **kw)
    runs = {r: gm.solve_primal_dual(model, **kw, backend=gm.DaskBackend(client, shards=4,
                                                                           routing=r))
            for r in ("workers", "driver")}
    w2w, routed = runs["workers"], runs["driver"]
    assert w2w.routing == "workers" and routed.routing == "driver"
    np.testing.assert_array_equal(w2w.weights, routed.weights)
    np.testing.assert_array_equal(w2w.flows, routed.flows)
    assert w2w.c == routed.c != 1.0
    np.testing.assert_array_equal(w2w.history.primal_residual, routed.history.primal_residual)
    np.testing.assert_array_equal(w2w.history.gap, routed.history.gap)
    _assert_same(serial, w2w)


def test_worker_routing_sends_only_scalars_through_the_driver(client):
    """The driver's bytes do not grow with the boundary (4x the nodes, 10x the dimension):
    a few scalars per shard and residual evaluation; the rows between shards are exactly the
    boundary rows each shard needs, every iteration."""
    kw = {"max_iter": 20, "tol": 0.0, "record_every": 10, "client": client, "shards": 3}
    small = _model("squared", n=20, isolated=False)
    big = gm.GTVModel(_graph(80, 1), 20, lam=0.3)
    rng = np.random.default_rng(1)
    for i in big.nodes:
        X = rng.standard_normal((5, 20))
        big.set_loss(i, gm.SquaredLoss(X, X @ np.ones(20)))
    res = {name: gm.solve_distributed(m, **kw) for name, m in (("small", small), ("big", big))}
    for name, model in (("small", small), ("big", big)):
        r = res[name]
        lay = ShardLayout.build(model, r.shard_of)
        rows = sum(a.size + b.size for a, b in zip(lay.recv_nodes, lay.recv_edges, strict=True))
        assert r.peer_bytes == r.iterations * 8 * model.dim * rows > 0
        calls = np.count_nonzero(r.bytes_sent)  # one call per shard per residual evaluation
        assert calls == 2 and r.bytes_sent.sum() <= calls * 3 * 200  # 3 shards, < 200 B each
    np.testing.assert_array_equal(res["small"].bytes_sent, res["big"].bytes_sent)
    routed = gm.solve_distributed(big, **kw, routing="driver")
    assert routed.bytes_sent.sum() > 50 * res["big"].bytes_sent.sum()


def test_a_failing_shard_stops_its_neighbours_waits(client):
    """A node update failing inside the worker-to-worker steps (fixed steps: no initial
    scale computed before) raises the package's error at once; the neighbours, waiting for
    its rows, are aborted, and the cluster runs the next solve."""
    model = _model("squared", n=10, isolated=False)
    model.add_constraint(3, gm.Box(1.0, 2.0))
    model.add_constraint(3, model.var(3) <= 0.0)  # infeasible: the CVXPY path says so
    kw = {"max_iter": 3, "tol": 0.0, "record_every": None, "step": 0.5}
    with pytest.raises(GTVError) as serial:
        gm.solve_primal_dual(model, **kw)
    t0 = time.perf_counter()
    with pytest.raises(type(serial.value)):
        gm.solve_distributed(model, **kw, client=client, shards=2)
    assert time.perf_counter() - t0 < 30
    ok = _model("squared", n=10, isolated=False)
    assert gm.solve_distributed(ok, **kw, client=client, shards=2).iterations == 3


def test_routing_is_checked():
    with pytest.raises(ParameterError, match="routing"):
        gm.DaskBackend(routing="scheduler")
