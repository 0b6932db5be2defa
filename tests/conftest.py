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
