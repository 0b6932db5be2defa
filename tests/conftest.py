import contextlib
import os

import matplotlib
import pytest

matplotlib.use("Agg")
os.environ.setdefault("MPLBACKEND", "Agg")


def _hypothesis_without_source_constants() -> None:
    """Make derandomized Hypothesis tests reproducible whatever the package contains.

    Hypothesis (>= 6.131) mixes integer and float literals found in the source of every local
    module imported so far into the values it draws.  The examples of a
    ``derandomize=True`` test then depend on which modules happen to be in ``sys.modules``
    (test order) and change whenever a literal is added anywhere in the package: the
    soundness tests drew ``seed = 3000`` from ``certificates/kinds.py``'s ``DENSE_MAX`` once a
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


@pytest.fixture
def rng():
    import numpy as np

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
