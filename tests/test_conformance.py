"""The conformance battery (gtvmodel.testing) on every library term's example factories.

Each check compares a term with references written in ``gtvmodel.testing`` in plain CVXPY
(values, conjugates, proximal maps, the exact solve of a 4-node model), with finite
differences (gradients), with its own per-node methods (batches) and with itself after a file
round trip; certificates must be sound at perturbed points.  A new term is covered by one
example factory in ``gtvmodel.testing``'s registry.
"""

from __future__ import annotations

import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import testing
from gtvmodel.terms.losses import LossBatch
from gtvmodel.terms.spec import CONSTRAINTS, LOSSES, PENALTIES


@testing.parametrize_terms("loss")
def test_loss(example, check):
    testing.run_check(example, check)


@testing.parametrize_terms("penalty")
def test_penalty(example, check):
    testing.run_check(example, check)


@testing.parametrize_terms("constraint")
def test_constraint(example, check):
    testing.run_check(example, check)


@pytest.mark.parametrize("family, registry", [
    ("loss", LOSSES), ("penalty", PENALTIES), ("constraint", CONSTRAINTS)])
def test_every_library_term_has_an_example(family, registry):
    rng = np.random.default_rng(0)
    covered = {ex.build(rng).kind for ex in testing.term_examples(family)}
    missing = set(registry.kinds()) - covered - {"symbolic"}
    assert not missing, f"{family} kinds without an example factory: {sorted(missing)}"


def test_battery_reports_a_wrong_value():
    """A loss whose numpy value disagrees with its expression fails with a precise message."""

    class Off(gm.QuadraticLoss):
        def _base_value(self, w):
            return super()._base_value(w) + 1e-3

    with pytest.raises(AssertionError, match="value vs CVXPY expression"):
        testing.check_loss(lambda rng: Off(rng.normal(size=3)), ["value"])


def test_battery_reports_a_silent_zero_batch():
    """A batch whose ``values`` default to zeros (the base class's neutral hook) is caught."""

    class NeutralBatch(LossBatch):
        pass

    class Neutral(gm.QuadraticLoss):
        batch_class = NeutralBatch

    with pytest.raises(AssertionError, match="batch"):
        testing.check_loss(lambda rng: Neutral(rng.normal(size=3)), ["batch"])


def test_unknown_check_is_refused():
    with pytest.raises(ValueError, match="unknown loss checks"):
        testing.check_loss(lambda rng: gm.ZeroLoss(l2=1.0), ["nope"])
