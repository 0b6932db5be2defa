"""Certificates on the device of the array backend (issue 16 item 6,
:mod:`gtvmodel.certificates.device_certificate`), tested on PyTorch's CPU build (and on a GPU with
``GTVMODEL_TEST_DEVICE=cuda``).

The device certificate must be *the* certificate of :func:`gtvmodel.certify` (whose soundness
has its own suites): same gap, values, repairs and repaired flows for every library penalty,
for flows that need the capacity projection and the final scaling, and whatever the size of
the edge blocks; no tensor may pass through numpy behind the backend's back (a GPU tensor
would fail there); where it needs a global step it declines with a reason and the run
certifies host copies.  Converged device runs are checked against an independent CVXPY
problem written here, over adversarial scales (hypothesis)."""

from __future__ import annotations

import os

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import gtvmodel as gm
import gtvmodel.certificates.subspace as subspace
from gtvmodel.certificates.device_certificate import DeviceCertifier, to_host
from gtvmodel.certificates.kinds import node_kinds
from gtvmodel.certificates.sharded_certificate import needs_gather
from gtvmodel.primal_dual.torch_backend import csr_tensor

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny tensors (tests/test_torch_backend.py)
DEVICE = os.environ.get("GTVMODEL_TEST_DEVICE", "cpu")

D = 3
PENALTIES = [gm.Norm2(), gm.Norm1(), gm.NormInf(), gm.NormP(3), gm.NormP(1.5),
             gm.SquaredNorm2(), gm.QuadForm(np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.2],
                                                      [0.0, 0.2, 1.5]]))]


def _model(penalty: gm.Penalty, seed: int = 0, n: int = 30, scale: float = 1.0,
           lam: float = 0.4) -> gm.GTVModel:
    """Full-rank squared losses (6 samples, d = 3), quadratic losses and one isolated node:
    no subspace conditions, so the certificate can run on the device."""
    G = nx.connected_watts_strogatz_graph(n, 4, 0.3, seed=seed)
    G.add_node(n)
    rng = np.random.default_rng(seed)
    model = gm.GTVModel(G, D, penalty=penalty, lam=lam)
    for v in G.nodes:
        if v % 3 == 2:
            model.set_loss(v, gm.QuadraticLoss(scale * rng.normal(size=D)))
        else:
            X = rng.standard_normal((6, D))
            model.set_loss(v, gm.SquaredLoss(X, scale * (X @ rng.normal(size=D))))
    return model


def _tensor(a: np.ndarray, dtype=None):
    return torch.as_tensor(np.ascontiguousarray(a), dtype=dtype or torch.float64, device=DEVICE)


def _csr(M):
    return csr_tensor(torch, M, DEVICE, torch.float64)


def _certifier(model: gm.GTVModel, block_rows: int | None = None) -> DeviceCertifier:
    rows = block_rows if block_rows is not None else model.num_edges
    return DeviceCertifier(model, torch, _csr(model.incidence), _csr(model.incidence.T),
                           max(1, rows) * model.dim * 8)


@pytest.fixture
def no_numpy_conversion(monkeypatch):
    """Any implicit tensor -> numpy conversion raises (on a GPU it would fail); the package
    moves arrays explicitly (``_xp.to_numpy``: ``.cpu().numpy()``)."""

    def refuse(self, *args, **kwargs):
        raise AssertionError("a tensor was converted to numpy implicitly")

    monkeypatch.setattr(torch.Tensor, "__array__", refuse)


def _assert_same(dev: gm.Certificate, host: gm.Certificate) -> None:
    """The device certificate is the host's, up to the order of the sums (relative to the
    largest of the sums)."""
    scale = max(1.0, abs(host.primal_value), abs(host.dual_value))
    assert dev.gap == pytest.approx(host.gap, rel=0, abs=1e-12 * scale)
    assert dev.primal_value == pytest.approx(host.primal_value, rel=1e-13, abs=1e-13)
    assert dev.dual_value == pytest.approx(host.dual_value, rel=1e-13, abs=1e-12 * scale)
    # (a residual within an ulp of its rounding bound may be charged at the local scale on
    # one side and at the certified radius on the other: both valid, ~1e-16 apart)
    assert dev.tolerance == pytest.approx(host.tolerance, rel=1e-9, abs=1e-12 * scale)
    assert dev.repairs == host.repairs and dev.flow_scale == host.flow_scale
    assert (dev.status, dev.feasible, dev.dual_feasible) == (host.status, True, True)
    np.testing.assert_allclose(dev.flows, host.flows, rtol=0, atol=1e-14 * max(
        1.0, float(np.abs(host.flows).max(initial=0.0))))
    np.testing.assert_allclose(dev.node_gaps, host.node_gaps, rtol=1e-9, atol=1e-12 * scale)
    np.testing.assert_allclose(dev.edge_gaps, host.edge_gaps, rtol=1e-9, atol=1e-12 * scale)


@pytest.mark.parametrize("penalty", PENALTIES, ids=repr)
@pytest.mark.parametrize("flow_scale", [0.3, 30.0])
def test_device_certificate_is_the_host_certificate(penalty, flow_scale, no_numpy_conversion):
    """Random candidates: flows 30x too large need the projection onto the capacities (norms)
    and the final scaling; edge blocks of 7 rows (not dividing |E|) give the same gap."""
    model = _model(penalty)
    rng = np.random.default_rng(7)
    W = rng.normal(size=(model.num_nodes, D))
    U = flow_scale * rng.normal(size=(model.num_edges, D))
    host = gm.certify(model, W, U, fallback=False)
    assert model.num_edges % 7
    for rows in (None, 7):
        dev = _certifier(model, rows)(_tensor(W), _tensor(U))
        assert dev is not None, "the device certificate declined"
        with pytest.raises(AssertionError, match="implicitly"):
            np.asarray(dev.flows)  # the repaired flows stay on the device ...
        _assert_same(to_host(dev), host)  # ... until the run's final certificate
    if penalty.is_norm and flow_scale > 1:
        assert any("projected" in r for r in host.repairs)


def test_the_squared_losses_split_runs_on_the_device(monkeypatch):
    """The squared losses' conjugates (work proportional to the samples) are evaluated on the
    demands where they were formed; the host certificate evaluates the same split in numpy."""
    import gtvmodel.terms.losses.batches as losses  # where the split is called

    seen = []
    split = losses.datafit_conjugate_split

    def spy(*args, **kwargs):
        seen.append(type(args[7]))
        return split(*args, **kwargs)

    monkeypatch.setattr(losses, "datafit_conjugate_split", spy)
    model = _model(gm.Norm2(), seed=5)
    rng = np.random.default_rng(2)
    W, U = rng.normal(size=(model.num_nodes, D)), rng.normal(size=(model.num_edges, D))
    dev = _certifier(model)(_tensor(W), _tensor(U))
    assert dev is not None and seen and set(seen) == {torch.Tensor}
    seen.clear()
    host = gm.certify(model, W, U, fallback=False)
    assert seen and set(seen) == {np.ndarray}
    _assert_same(to_host(dev), host)


@pytest.mark.parametrize("penalty", [gm.Norm2(), gm.NormInf(), gm.SquaredNorm2()], ids=repr)
def test_device_run_certifies_on_the_device_and_returns_numpy(penalty):
    model = _model(penalty, seed=2)
    kw = {"max_iter": 90, "tol": 0.0, "record_every": 30, "certificate_budget": None}
    a = gm.solve_primal_dual(model, **kw)
    b = gm.solve_primal_dual(model, device=DEVICE, **kw)
    assert (b.certificates_on_device, b.host_reasons) == (3, [])
    assert (a.certificates_on_device, a.host_reasons) == (0, [])
    cert = b.certificate
    assert isinstance(cert.flows, np.ndarray) and isinstance(cert.edge_gaps, np.ndarray)
    scale = max(1.0, float(np.abs(a.history.primal).max()))
    np.testing.assert_allclose(b.history.gap, a.history.gap, rtol=0, atol=1e-9 * scale)
    _assert_same(cert, gm.certify(model, b.weights, b.flows, fallback=False))


def _zero_node(model: gm.GTVModel) -> gm.GTVModel:
    model.set_loss(0, gm.ZeroLoss())
    return model


def _rank_deficient(model: gm.GTVModel) -> gm.GTVModel:
    X = np.random.default_rng(1).normal(size=(2, D))
    model.set_loss(1, gm.SquaredLoss(X, X @ np.ones(D)))
    return model


def _boxed(model: gm.GTVModel) -> gm.GTVModel:
    model.add_constraint(1, gm.Box(-1e-3, 1e-3))
    return model


def _stiff(model: gm.GTVModel) -> gm.GTVModel:
    """A full-rank node with a Gram ratio of 1e-10 (below STIFF_RTOL, above null): the
    host's affine variant of the repair."""
    X = np.random.default_rng(1).normal(size=(6, D)) * np.array([1.0, 1.0, 1e-5])
    model.set_loss(1, gm.SquaredLoss(X, X @ np.ones(D)))
    return model


@pytest.mark.parametrize("change", [_zero_node, _rank_deficient])
def test_runs_with_subspace_conditions_certify_on_the_device(change):
    model = change(_model(gm.Norm2(), seed=3))
    kw = {"max_iter": 90, "tol": 0.0, "record_every": 30, "certificate_budget": None}
    a = gm.solve_primal_dual(model, **kw)
    b = gm.solve_primal_dual(model, device=DEVICE, **kw)
    assert (b.certificates_on_device, b.host_reasons) == (3, [])
    scale = max(1.0, float(np.abs(a.history.primal).max()))
    np.testing.assert_allclose(b.history.gap, a.history.gap, rtol=0, atol=1e-9 * scale)
    _assert_close(b.certificate, gm.certify(model, b.weights, b.flows, fallback=False))


@pytest.mark.parametrize(("change", "reason"), [
    (_stiff, "ill-conditioned nodes"), (_boxed, "violating node constraints")])
def test_certificates_that_need_a_global_step_run_on_host_copies(change, reason):
    model = change(_model(gm.Norm2(), seed=3))
    rng = np.random.default_rng(0)
    W, U = rng.normal(size=(model.num_nodes, D)), rng.normal(size=(model.num_edges, D))
    certifier = _certifier(model)
    assert certifier(_tensor(W), _tensor(U)) is None and reason in certifier.reason
    res = gm.solve_primal_dual(model, device=DEVICE, max_iter=40, tol=0.0, record_every=20,
                               certificate_budget=None)
    host = gm.certify(model, res.weights, res.flows, fallback=False)
    assert res.certificate.gap == pytest.approx(host.gap, rel=1e-12, abs=1e-12)
    if reason == "ill-conditioned nodes":
        assert res.certificates_on_device == 0 and reason in res.host_reasons[0]


def _assert_close(dev: gm.Certificate, host: gm.Certificate) -> None:
    """With subspace conditions both sides solve for the minimum-norm correction (the same
    factorization on small systems; conjugate gradients to 1e-12 on large ones, on the
    device and in scipy): the same certificate up to the solvers' tolerance."""
    scale = max(1.0, abs(host.primal_value), abs(host.dual_value))
    assert dev.gap == pytest.approx(host.gap, rel=0, abs=1e-11 * scale)
    assert dev.primal_value == pytest.approx(host.primal_value, rel=1e-13, abs=1e-13)
    # the tolerance's residual charges move with the solvers' last digits: a residual near
    # its rounding bound is charged at the local scale on one side and at the certified radius
    # on the other (measured: 5.5e-11 against 9.2e-11, 5.2e-12 against 2.2e-11); both are
    # parts of the gaps compared above, so they agree to the gaps' allowance, not relatively
    assert dev.tolerance == pytest.approx(host.tolerance, rel=0, abs=1e-11 * scale)
    assert dev.repairs == host.repairs
    assert dev.flow_scale == pytest.approx(host.flow_scale, rel=1e-12)
    assert (dev.status, dev.feasible, dev.dual_feasible) == (host.status, True, True)
    np.testing.assert_allclose(dev.flows, host.flows, rtol=0, atol=1e-11 * max(
        1.0, float(np.abs(host.flows).max(initial=0.0))))


def _deficient(n: int, d: int, samples: int, zero: float, seed: int) -> gm.GTVModel:
    """Squared losses with ``samples < d`` (rank-deficient: subspace conditions
    ``(D^T u)_i in range(X_i^T)``) and a share ``zero`` of nodes without data (``(D^T u)_i =
    0``)."""
    rng = np.random.default_rng(seed)
    G = nx.connected_watts_strogatz_graph(n, 6, 0.3, seed=seed)
    model = gm.GTVModel(G, d, penalty=gm.Norm2(), lam=0.4)
    for v in G.nodes:
        if rng.random() >= zero:
            X = rng.standard_normal((samples, d))
            model.set_loss(v, gm.SquaredLoss(X, X @ rng.normal(size=d)))
    return model


# (model, the host solver of the subspace conditions): its pseudo-inverse on a host copy of the
# residual; the complement of small ranges (n <= RANGE_MAX, d = 40, m_i = 4); conjugate
# gradients through node potentials on the device (DENSE_MAX lowered)
SUBSPACE_CASES = {"dense": (lambda: _deficient(40, D, 2, 0.3, 1), 3000, 2000),
                  "range": (lambda: _deficient(100, 40, 4, 0.0, 2), 3000, 2000),
                  "cg": (lambda: _deficient(60, D, 2, 0.3, 3), 10, 10)}


@pytest.mark.parametrize("kind", list(SUBSPACE_CASES))
@pytest.mark.parametrize("flow_scale", [0.3, 30.0])
def test_subspace_conditions_are_corrected_on_the_device(kind, flow_scale, monkeypatch,
                                                         no_numpy_conversion):
    """Zero-loss and rank-deficient nodes: step 2's minimum-norm correction runs where the
    flows are (:mod:`gtvmodel.certificates.device_subspace`), alternating with the projection
    onto the capacities (flows 30x too large), in edge blocks of 7 rows or whole: the
    certificate is the host's."""
    build, dense_max, range_max = SUBSPACE_CASES[kind]
    monkeypatch.setattr(subspace, "DENSE_MAX", dense_max)
    monkeypatch.setattr(subspace, "RANGE_MAX", range_max)
    model = build()
    k = node_kinds(model)
    assert subspace.solver_kind(model, k.subspace, k.subspace_bases) == kind
    rng = np.random.default_rng(4)
    W = rng.normal(size=(model.num_nodes, model.dim))
    U = flow_scale * rng.normal(size=(model.num_edges, model.dim))
    host = gm.certify(model, W, U, fallback=False)
    assert any("subspace conditions" in r for r in host.repairs)
    for rows in (None, 7):
        dev = _certifier(model, rows)(_tensor(W), _tensor(U))
        assert dev is not None, "the device certificate declined"
        _assert_close(to_host(dev), host)


def test_float32_runs_certify_float64_host_copies():
    model = _model(gm.Norm2(), seed=4)
    res = gm.solve_primal_dual(model, device=DEVICE, dtype="float32", max_iter=40, tol=0.0,
                               record_every=20, certificate_budget=None)
    assert res.certificates_on_device == 0 and "float32" in res.host_reasons[0]
    host = gm.certify(model, res.weights, res.flows, fallback=False)
    assert res.certificate.gap == host.gap


def _optimum(model: gm.GTVModel, data: dict, lam: float, penalty: str) -> float:
    """``P*`` of the model of :func:`test_converged_device_runs_are_sound_at_any_scale`,
    written directly in CVXPY (not the package's compiler), solved tightly."""
    n = len(data)
    W = cp.Variable((n, D))
    obj = 0
    for v, (X, y) in data.items():
        if len(y):  # a node without data (the zero loss) adds nothing
            obj += cp.sum_squares(X @ W[v] - y) / len(y)
    p = {"norm2": 2, "norm1": 1}[penalty]
    obj += lam * sum(cp.norm(W[i] - W[j], p) for i, j in model.edges)
    prob = cp.Problem(cp.Minimize(obj))
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    return float(prob.value)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scale=st.sampled_from([1e-4, 1.0, 1e4]), lam_exp=st.integers(-3, 1),
       cond=st.sampled_from([1.0, 100.0]), penalty=st.sampled_from(["norm2", "norm1"]),
       deficient=st.booleans(), seed=st.integers(0, 2**16))
# found by local runs: rounding charges 5.2e-12 against 2.2e-11 (and 1.2e-11 / 8.2e-11, 1.2e-3
# / 8.2e-3 at scale 1e4), gaps within 2e-12 relative (_assert_close)
@example(scale=1.0, lam_exp=0, cond=100.0, penalty="norm2", deficient=True, seed=238)
@example(scale=1e4, lam_exp=-2, cond=100.0, penalty="norm2", deficient=True, seed=238)
def test_converged_device_runs_are_sound_at_any_scale(scale, lam_exp, cond, penalty, deficient,
                                                      seed):
    """Data scaled by 1e-4 ... 1e4, lambda from 1e-3 to 10, badly scaled features (Gram
    ratio 1e-4; below STIFF_RTOL the host's affine repair takes over), with ``deficient`` a
    node without data and one with 2 samples (subspace conditions, corrected on the device):
    the device certificate of Algorithm 1's iterate bounds the suboptimality against an
    independent CVXPY optimum, and equals the host certificate."""
    rng = np.random.default_rng(seed)
    G = nx.path_graph(8)
    lam = 10.0 ** lam_exp * scale**2
    model = gm.GTVModel(G, D, penalty=gm.Norm2() if penalty == "norm2" else gm.Norm1(),
                        lam=lam)
    data = {}
    for v in G.nodes:
        m = 0 if deficient and v == 0 else 2 if deficient and v == 1 else 5
        X = rng.standard_normal((m, D)) * np.array([1.0, 1.0, 1.0 / cond])
        y = scale * (X @ rng.normal(size=D))
        data[v] = (X, y)
        if m:
            model.set_loss(v, gm.SquaredLoss(X, y))
    res = gm.solve_primal_dual(model, device=DEVICE, max_iter=400, tol=1e-7, record_every=50)
    # random rows can make a node ill-conditioned (the host's affine repair), and a residual
    # above its rounding bound needs a certified radius (the host's certificate)
    static = needs_gather(model, subspace=True)
    assert (static in res.host_reasons) if static else res.certificates_on_device >= 1
    declines = {"nodes outside their conjugate domains, residuals whose radius could not be "
                "certified, or weights violating node constraints"}
    assert set(res.host_reasons) - {static} <= declines
    p_star = _optimum(model, data, lam, penalty)
    cert = res.certificate
    # sound: gap >= P(W) - P* (the reference's own accuracy allowed for)
    assert cert.gap >= cert.primal_value - p_star - 1e-9 * max(1.0, abs(p_star))
    host = gm.certify(model, res.weights, res.flows, fallback=False)
    (_assert_close if deficient else _assert_same)(cert, host)
