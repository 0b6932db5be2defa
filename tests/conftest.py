import os

import matplotlib
import pytest

matplotlib.use("Agg")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(12345)
