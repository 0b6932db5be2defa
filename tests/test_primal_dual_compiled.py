"""The compiled edge update of Algorithm 1 (``solve_primal_dual(kernel="numba")``, issue 16
item 5): the row kernels against the numpy dual updates (the ``Norm2`` rounding guarantee at
the ball's boundary and at extreme scales), whole runs against the numpy path and against a
plain loop of (32)/(33) written here, and the option's checks.  Tests that run numba skip
without it (``pytest.importorskip``); the others run everywhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import gtvmodel as gm
from gtvmodel import _compiled
from gtvmodel._norms import EPS, norm_rows_upper
from gtvmodel.primal_dual import compiled

PENALTIES = [gm.Norm2(), gm.Norm1(), gm.SquaredNorm2()]


@pytest.fixture
def numba():
    return pytest.importorskip("numba")


def _incidence(n: int, pairs: np.ndarray) -> sp.csr_matrix:
    """``D`` with ``+1`` at the head and ``-1`` at the tail of every edge (built here)."""
    E = len(pairs)
    return sp.csr_matrix((np.tile([1.0, -1.0], E), (np.repeat(np.arange(E), 2),
                                                     np.asarray(pairs).reshape(-1))),
                         shape=(E, n))


def _dual_update_rows(penalty: gm.Norm2, V: np.ndarray, sigma: np.ndarray,
                      caps: np.ndarray, threads: int = 1) -> np.ndarray:
    """The compiled DU (33) of the rows ``V`` (``Y = 0``, so the argument is ``u^k = V``)."""
    E, d = V.shape
    D = _incidence(E + 1, np.column_stack([np.arange(E), np.arange(1, E + 1)]))
    edges, kernel = compiled.make_edge_updates(D, penalty, caps, d, "numba", threads=threads)
    assert kernel == "numba"
    try:
        return edges(np.zeros((E + 1, d)), V, sigma, sigma[:, None], np.empty_like(V))
    finally:
        edges.close()


# ---------------------------------------------------------------- the row kernels
def _ball_rows(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Rows on, just inside and just outside the ball ``||u|| <= r`` (a few ulps either side,
    so that the rounding bound decides), far outside, zero, at scales ``1e-150 ... 1e150``
    (radii at the same scales, and across them), ``d = 7``."""
    rows, radii = [], []
    for scale in (1e-150, 1e-20, 1.0, 1e20, 1e150):
        for factor in (1 - 8 * EPS, 1 - 2 * EPS, 1 - EPS, 1.0, 1 + EPS, 1 + 4 * EPS, 3.0, 0.3):
            v = rng.standard_normal(7)
            r = scale * rng.uniform(0.5, 2.0)
            rows.append(v / np.linalg.norm(v) * r * factor)
            radii.append(r)
        rows.append(np.zeros(7))
        radii.append(scale)
    for r_scale, v_scale in ((1e-150, 1e150), (1e150, 1e-150), (0.0, 1.0), (1e-300, 1.0)):
        rows.append(rng.standard_normal(7) * v_scale)
        radii.append(r_scale)
    return np.array(rows), np.array(radii)


def test_l2_kernel_keeps_the_rounding_guarantee(numba):
    """``Norm2``'s compiled DU: every flow inside its capacity for certain (``norm_rows_upper
    <= lambda A_e``, the bound the certificate relies on), the rows inside for certain
    unchanged, and the numpy path's rows to 1e-14 (rows outside the kernel's proven range
    take the numpy path itself)."""
    rng = np.random.default_rng(0)
    V, r = _ball_rows(rng)
    sigma = rng.uniform(0.1, 2.0, len(V))
    out = _dual_update_rows(gm.Norm2(), V, sigma, r)
    ref = gm.Norm2().dual_update(V, sigma, r)
    assert np.all(norm_rows_upper(out, 2.0) <= r)
    np.testing.assert_allclose(out, ref, rtol=1e-14, atol=0)  # norms summed in another order
    inside = norm_rows_upper(V, 2.0) * (1 + 16 * EPS) <= r
    assert inside.sum() >= 10 and np.array_equal(out[inside], V[inside])
    assert np.array_equal(out[~V.any(axis=1)], V[~V.any(axis=1)])  # zero rows stay zero


def test_l2_kernel_declines_rows_to_the_numpy_path(numba):
    """Rows with NaN, an infinite entry or squares that overflow or underflow are not the
    kernel's: they get exactly what the numpy DU gives them (NaN kept; the scaled norms)."""
    V = np.array([[np.nan, 1.0], [np.inf, 1.0], [1e200, -3e200], [3e-170, 4e-170], [3.0, 4.0]])
    r = np.array([1.0, 1.0, 1e199, 1e-171, 1.0])
    sigma = np.full(5, 0.5)
    out = _dual_update_rows(gm.Norm2(), V, sigma, r)
    ref = gm.Norm2().dual_update(V, sigma, r)
    np.testing.assert_array_equal(out[:4], ref[:4])
    np.testing.assert_allclose(out[4], ref[4], rtol=1e-14)  # the kernel's row
    assert np.all(norm_rows_upper(out[2:], 2.0) <= r[2:])
    np.testing.assert_array_equal(_dual_update_rows(gm.Norm2(), V, sigma, r, threads=2), out)


def test_node_sums_equal_the_sparse_product(numba):
    """``D^T u``: accumulated in the edge pass (serially), by the compiled product over the
    rows of ``D^T`` (on 2 threads, and for flows not from the last pass): scipy's sums."""
    rng = np.random.default_rng(3)
    n, E, d = 40, 150, 3
    pairs = np.column_stack([rng.integers(0, 20, E), rng.integers(20, n, E)])
    D = _incidence(n, pairs)
    caps, sigma = rng.uniform(0.1, 1.0, E), np.full(E, 0.4)
    Y, U = rng.standard_normal((n, d)), rng.standard_normal((E, d))
    for threads in (1, 2):
        edges, _ = compiled.make_edge_updates(D, gm.Norm2(), caps, d, "numba", threads=threads)
        out = edges(Y, U, sigma, sigma[:, None], np.empty((E, d)))
        np.testing.assert_allclose(edges.node_sums(out), D.T @ out, rtol=1e-15, atol=1e-15)
        np.testing.assert_allclose(edges.node_sums(U), D.T @ U, rtol=1e-15, atol=1e-15)
        edges.close()


@pytest.mark.parametrize("penalty", [gm.Norm1(), gm.SquaredNorm2()], ids=repr)
def test_other_kernels_equal_the_numpy_dual_update(numba, penalty):
    """``Norm1`` (clipping) and ``SquaredNorm2`` (scaling): the numpy DU's rows exactly, at
    every scale, zero capacities and rows with NaN included."""
    rng = np.random.default_rng(1)
    V = rng.standard_normal((40, 4)) * np.logspace(-150, 150, 40)[:, None]
    V[3, 1] = np.nan
    r = rng.uniform(0.5, 2.0, 40) * np.logspace(-150, 150, 40)[::-1]
    r[5] = 0.0
    sigma = rng.uniform(0.1, 2.0, 40)
    out = _dual_update_rows(penalty, V, sigma, r)
    np.testing.assert_array_equal(out, penalty.dual_update(V, sigma, r))


# ---------------------------------------------------------------- whole runs
def _plain_loop(model: gm.GTVModel, tau: np.ndarray, sigma: np.ndarray, iters: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 by hand for ``L_i(w) = ||w - a_i||^2`` (PU (32): ``(v + 2 tau a) / (1 + 2
    tau)``) and DU (33) of the model's penalty by its textbook formula."""
    n, d, E = model.num_nodes, model.dim, model.num_edges
    A = np.array([model.loss_at(i).a for i in range(n)]).reshape(n, d)
    D = _incidence(n, model.edges)
    caps = model.lam * model.edge_weights
    W, U = np.zeros((n, d)), np.zeros((E, d))
    for _ in range(iters):
        V = W - tau[:, None] * (D.T @ U)
        W_new = (V + 2 * tau[:, None] * A) / (1 + 2 * tau[:, None])
        Z = U + sigma[:, None] * (D @ (2 * W_new - W))
        if isinstance(model.penalty, gm.SquaredNorm2):
            U = Z * (caps / (caps + sigma))[:, None]
        elif isinstance(model.penalty, gm.Norm1):
            U = np.clip(Z, -caps[:, None], caps[:, None])
        else:
            nrm = np.linalg.norm(Z, axis=1)
            U = Z * np.minimum(1.0, caps / np.maximum(nrm, 1e-300))[:, None]
        W = W_new
    return W, U


def _instance(penalty: object, d: int, seed: int, edges: bool = True
              ) -> tuple[gm.GTVModel, np.ndarray, np.ndarray]:
    """Quadratic losses on a random graph with isolated nodes, weighted edges (some of them
    at capacity after a few iterations, some below), and uneven steps ``sigma_e`` with
    ``tau_i = c / deg(i)`` (the step condition holds: ``sigma_e <= 1 / (2c)``)."""
    rng = np.random.default_rng(seed)
    G = nx.gnm_random_graph(24, 50 if edges else 0, seed=seed)
    G.add_nodes_from(range(24, 27))  # isolated
    for a, b in G.edges:
        G.edges[a, b]["weight"] = float(rng.uniform(0.05, 20.0))
    model = gm.GTVModel(G, d, penalty=penalty, lam=0.3)
    for v in G.nodes:
        model.set_loss(v, gm.QuadraticLoss(rng.standard_normal(d) * 2))
    c = 0.7
    tau = c / np.maximum(model.degrees, 1)
    sigma = rng.uniform(0.3, 1.0, model.num_edges) * 0.5 / c
    return model, tau, sigma


@pytest.mark.parametrize("penalty", PENALTIES, ids=repr)
@pytest.mark.parametrize("d", [1, 3])
def test_iterates_equal_the_numpy_path_and_a_plain_loop(numba, penalty, d):
    """60 iterations with uneven steps: the compiled kernel's iterates equal the numpy path's
    to 1e-12 (relative) and the plain loop's, serially and on 2 threads (the same bit for
    bit); the result says which kernel ran."""
    model, tau, sigma = _instance(penalty, d, seed=d)
    runs = {k: model.solve_primal_dual(max_iter=60, tol=0, record_every=None, step=(tau, sigma),
                                       kernel=k) for k in ("numpy", "numba")}
    assert runs["numba"].kernel == "numba" and runs["numpy"].kernel == "numpy"
    W, U = _plain_loop(model, tau, sigma, 60)
    scale = max(1.0, np.abs(W).max(), np.abs(U).max())
    for r in runs.values():
        assert np.abs(r.weights - W).max() <= 1e-12 * scale
        assert np.abs(r.flows - U).max() <= 1e-12 * scale
    assert np.abs(runs["numba"].flows - runs["numpy"].flows).max() <= 1e-12 * scale
    caps = model.lam * model.edge_weights
    if penalty.is_norm:
        at_cap = np.abs(penalty.dual_norm(U) - caps) <= 1e-9 * caps
        assert 0 < at_cap.sum() < model.num_edges  # edges at and below capacity
    two = model.solve_primal_dual(max_iter=60, tol=0, record_every=None, step=(tau, sigma),
                                  kernel="numba", threads=2)
    assert np.array_equal(two.flows, runs["numba"].flows)
    assert np.array_equal(two.weights, runs["numba"].weights)


def test_no_edges_and_certified_runs(numba):
    """An empty edge set, and a run with certificates and the default step rule: the same
    as the numpy path (the certificate never depends on the kernel)."""
    model, tau, sigma = _instance(gm.Norm2(), 2, seed=5, edges=False)
    a = model.solve_primal_dual(max_iter=10, tol=0, kernel="numba")
    b = model.solve_primal_dual(max_iter=10, tol=0, kernel="numpy")
    assert a.kernel == "numba" and np.array_equal(a.weights, b.weights) and a.flows.shape == (0, 2)
    model, _, _ = _instance(gm.Norm2(), 3, seed=6)
    a = model.solve_primal_dual(tol=1e-8, kernel="numba")
    b = model.solve_primal_dual(tol=1e-8, kernel="numpy")
    assert a.status == b.status == "converged" and a.iterations == b.iterations
    assert abs(a.gap - b.gap) <= 1e-9 * max(1.0, abs(b.objective))


# ---------------------------------------------------------------- the option
def test_auto_keeps_numpy_for_small_problems_and_penalties_without_kernel(monkeypatch):
    """``kernel="auto"`` keeps the numpy path below ``AUTO_NUMBA_ENTRIES`` (and without
    numba); a penalty without a row kernel (``NormInf``) keeps it even when asked."""
    model, _, _ = _instance(gm.Norm2(), 2, seed=7)
    assert model.solve_primal_dual(max_iter=3, tol=0).kernel == "numpy"
    monkeypatch.setattr(compiled, "AUTO_NUMBA_ENTRIES", 1)
    monkeypatch.setattr(_compiled, "available", lambda: False)
    assert model.solve_primal_dual(max_iter=3, tol=0).kernel == "numpy"
    monkeypatch.undo()
    assert gm.NormInf().compiled_dual_row(np.ones(3), 2) is None
    if _compiled.available():
        model, _, _ = _instance(gm.NormInf(), 2, seed=7)
        assert model.solve_primal_dual(max_iter=3, tol=0, kernel="numba").kernel == "numpy"


def test_auto_picks_numba_above_the_threshold(numba, monkeypatch):
    model, _, _ = _instance(gm.Norm2(), 2, seed=8)
    monkeypatch.setattr(compiled, "AUTO_NUMBA_ENTRIES", model.num_edges * 2)
    assert model.solve_primal_dual(max_iter=3, tol=0).kernel == "numba"


def test_kernel_option_is_checked(monkeypatch):
    """A bad ``kernel`` names the argument; ``"numba"`` without numba says how to install it;
    ``kernel`` belongs to the numpy path."""
    model, _, _ = _instance(gm.Norm2(), 2, seed=9)
    with pytest.raises(gm.ParameterError, match="kernel"):
        model.solve_primal_dual(max_iter=2, kernel="fortran")
    with pytest.raises(gm.ParameterError, match="kernel"):
        model.solve_primal_dual(max_iter=2, kernel="numba", backend="dask")
    monkeypatch.setattr(_compiled, "available", lambda: False)
    with pytest.raises(gm.UnsupportedError, match=r"gtvmodel\[fast\]"):
        model.solve_primal_dual(max_iter=2, kernel="numba")


# ---------------------------------------------------------------- numba's cache
class _FakeNumba:
    """A stand-in for numba whose ``njit(cache=True)`` fails as asked."""

    def __init__(self, refuse: bool):
        self.refuse, self.calls = refuse, []

    def njit(self, cache: bool, nogil: bool):
        self.calls.append(cache)
        if cache and self.refuse:
            raise RuntimeError("cannot cache function 'f': no locator available")

        def wrap(func):
            if not cache:
                return func

            def failing(*args):
                raise PermissionError("cache directory not writable")
            return failing
        return wrap


def test_a_cache_that_cannot_be_written_does_not_break_the_kernels():
    """numba refusing ``cache=True`` (no writable directory), or the first call failing to
    write the cache: the function is compiled without the cache and runs."""
    for refuse in (True, False):
        fake = _FakeNumba(refuse)
        f = _compiled.Compiled(fake, lambda x: x + 1)
        assert f(1) == 2 and not f.cached and fake.calls == [True, False]


def test_unwritable_numba_cache_dir_in_a_fresh_process(numba, tmp_path):
    """``NUMBA_CACHE_DIR`` that cannot be a directory (a file): the kernels still compile and
    run (numba falls back to another cache location or none)."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    code = ("import numpy as np, gtvmodel as gm\n"
            "m = gm.GTVModel.from_edges(3, np.array([[0, 1], [1, 2]]), dim=2, lam=1.0)\n"
            "print(m.solve_primal_dual(max_iter=3, tol=0, kernel='numba').kernel)\n")
    env = {"NUMBA_CACHE_DIR": str(blocker / "cache"), "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(Path(gm.__file__).parent.parent)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "numba"
