"""Shared test configuration and fixtures.

The model factories below are shared by the test modules (as session fixtures returning the
factory, so Hypothesis tests can use them too): each draws its data from its own seeded
``numpy.random.Generator`` in node order, so a test gets the same instance wherever it builds
it.
"""

import contextlib
import os
from collections.abc import Callable, Hashable

import matplotlib
import networkx as nx
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import gtvmodel as gm

matplotlib.use("Agg")
os.environ.setdefault("MPLBACKEND", "Agg")


def _hypothesis_without_source_constants() -> None:
    """Make derandomized Hypothesis tests reproducible whatever the package contains.

    Hypothesis (>= 6.131) mixes integer and float literals found in the source of every local
    module imported so far into the values it draws.  The examples of a
    ``derandomize=True`` test then depend on which modules happen to be in ``sys.modules``
    (test order) and change whenever a literal is added anywhere in the package: the
    soundness tests drew ``seed = 3000`` from a module constant (``DENSE_MAX``) once a
    new subpackage was imported.  The seeds of tests/test_soundness.py index instances of an
    adversarial generator, so the package's literals carry no meaning for them.  Hypothesis
    offers no switch for this, so the (private) hook that collects the constants is replaced
    by one returning none; if a Hypothesis release moves the hook, this does nothing.
    """
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:  # pragma: no cover - an older or newer Hypothesis
        return
    if hasattr(providers, "_get_local_constants"):
        empty = Constants()
        providers._get_local_constants = lambda: empty


_hypothesis_without_source_constants()


def _hypothesis_ci_profile() -> None:
    """Under CI (``CI`` set, as ``.ci/run``'s caller does) every Hypothesis test draws the same
    examples on every run (``derandomize=True``, no example database): a red CI then means the
    change broke something, never that a random draw found an old rare case.  Local runs keep
    drawing new examples (how the rare prox cases of tests/test_composite_prox.py were found);
    what they find is fixed and pinned with ``@example``."""
    from hypothesis import settings

    settings.register_profile("ci", derandomize=True, database=None)
    if os.environ.get("CI"):
        settings.load_profile("ci")


_hypothesis_ci_profile()


def pytest_configure(config: pytest.Config) -> None:
    """BLAS and OpenMP run one thread in the test process and in the processes it starts
    (notebook kernels, Dask workers), as torch does in its tests: the matrices are tiny, and
    ``make test`` runs 2 pytest-xdist workers on 2 cores, which BLAS pools of two threads each
    would oversubscribe.  (test_dual.py's d = 100 case under load 13: 3.3 s of CPU with one
    thread, 6.3-14.4 s with two.)"""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    threadpool_limits(1)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def count_problems():
    """A context manager collecting every ``cvxpy.Problem`` constructed inside it (user-level
    problems and CVXPY's own copies during compilation): ``with count_problems() as made:``."""
    import cvxpy as cp

    @contextlib.contextmanager
    def counting():
        made = []
        init = cp.Problem.__init__

        def record(self, *args, **kwargs):
            made.append(self)
            init(self, *args, **kwargs)

        cp.Problem.__init__ = record
        try:
            yield made
        finally:
            cp.Problem.__init__ = init

    return counting


# ---------------------------------------------------------------- shared model factories
def node_loss(kind: str, rng: np.random.Generator, m: int = 4, d: int = 3, **reg) -> gm.Loss:
    """A library loss of ``kind`` on random data: ``X`` ``(m, d)`` standard normal, ``y = e +
    X b`` (``e``, ``b`` standard normal; labels ``sign(y)`` for the classification losses),
    ``a`` standard normal for ``"quadratic"``; ``reg``: its ``l1``/``l2`` weights."""
    X = rng.normal(size=(m, d))
    y = rng.normal(size=m) + X @ rng.normal(size=d)
    yb = np.where(y > 0, 1.0, -1.0)
    return {
        "squared": lambda: gm.SquaredLoss(X, y, **reg),
        "logistic": lambda: gm.LogisticLoss(X, yb, **reg),
        "hinge": lambda: gm.HingeLoss(X, yb, **reg),
        "absolute": lambda: gm.AbsoluteLoss(X, y, **reg),
        "huber": lambda: gm.HuberLoss(X, y, M=0.6, **reg),
        "quadratic": lambda: gm.QuadraticLoss(rng.normal(size=d), **reg),
    }[kind]()


def small_model(kind: str, penalty: gm.Penalty, constraint: gm.Constraint | None = None, *,
                seed: int = 0, n: int = 9, l1: float = 0.0, l2: float = 0.0, lam: float = 0.3,
                zero_every: int = 4, d: int = 3) -> gm.GTVModel:
    """A small connected model: a Watts-Strogatz graph (``n`` nodes, edge weights uniform in
    ``[0.5, 1.5]``), a :func:`node_loss` of ``kind`` at every node except every
    ``zero_every``-th (a zero loss), ``constraint`` at every third node."""
    rng = np.random.default_rng(seed)
    G = nx.connected_watts_strogatz_graph(n, 4, 0.3, seed=seed)
    for a, b in G.edges:
        G.edges[a, b]["weight"] = float(rng.uniform(0.5, 1.5))
    model = gm.GTVModel(G, d, penalty=penalty, lam=lam)
    for i in G.nodes:
        if zero_every and i % zero_every == zero_every - 1:
            model.set_loss(i, gm.ZeroLoss(l1=l1, l2=l2))
        else:
            model.set_loss(i, node_loss(kind, rng, l1=l1, l2=l2, d=d))
        if constraint is not None and i % 3 == 0:
            model.add_constraint(i, constraint)
    return model


Truth = Callable[[int, Hashable], "np.ndarray | list[float]"]


def squared_model(graph: nx.Graph, dim: int, *, m: int, lam: float,
                  penalty: gm.Penalty | None = None, rng: int | np.random.Generator = 0,
                  truth: str | Truth | None = "random", noise: float = 0.0
                  ) -> tuple[gm.GTVModel, dict]:
    """Linear regression at every node of ``graph`` (in its node order): ``SquaredLoss(X_i,
    y_i)`` with ``X_i`` an ``(m, dim)`` standard normal draw and ``y_i = X_i w_i + noise e_i``
    (``e_i`` standard normal, drawn only when ``noise``), where ``w_i`` is a standard normal
    draw (``truth="random"``) or ``truth(k, v)`` for the ``k``-th node ``v``; ``truth=None``:
    ``y_i`` standard normal.  ``rng``: a seed or the generator to continue.  Returns the model
    and ``{v: (X_i, y_i)}``."""
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    model = gm.GTVModel(graph, dim, penalty=penalty, lam=lam)
    data = {}
    for k, v in enumerate(graph.nodes):
        X = rng.standard_normal((m, dim))
        if truth is None:
            y = rng.standard_normal(m)
        else:
            w = rng.standard_normal(dim) if isinstance(truth, str) else np.asarray(truth(k, v))
            y = X @ w
            if noise:
                y = y + noise * rng.standard_normal(m)
        data[v] = (X, y)
        model.set_loss(v, gm.SquaredLoss(X, y))
    return model, data


def fused_lasso_chain(seed: int) -> tuple[np.ndarray, gm.GTVModel]:
    """The 60-node fused-lasso chain: signal ``a`` (6 steps of 10 nodes plus unit noise) and
    the model ``sum_i (w_i - a_i)^2 + lam sum_i |w_i - w_{i+1}|`` (``Norm1``) of
    ``_refs.flsa_path``."""
    rng = np.random.default_rng(seed)
    n = 60
    a = np.repeat(rng.normal(size=6) * 3, 10) + rng.normal(size=n)
    model = gm.GTVModel(nx.path_graph(n), 1, penalty=gm.Norm1())
    for i in range(n):
        model.set_loss(i, gm.QuadraticLoss([a[i]]))
    return a, model


@pytest.fixture(name="node_loss", scope="session")
def _node_loss_factory():
    return node_loss


@pytest.fixture(name="small_model", scope="session")
def _small_model_factory():
    return small_model


@pytest.fixture(name="squared_model", scope="session")
def _squared_model_factory():
    return squared_model


@pytest.fixture(name="fused_lasso_chain", scope="session")
def _fused_lasso_chain_factory():
    return fused_lasso_chain
