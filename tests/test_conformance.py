"""The conformance battery (gtvmodel.testing) on every library term's example factories.

Each check compares a term with references written in ``gtvmodel.testing`` in plain CVXPY
(values, conjugates, proximal maps, the exact solve of a 4-node model), with finite
differences (gradients), with its own per-node methods (batches) and with itself after a file
round trip; certificates must be sound at perturbed points.  A new term is covered by one
example factory in ``gtvmodel.testing``'s registry.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import testing
from gtvmodel.terms.losses import LossBatch, QuadraticBatch
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


@pytest.mark.parametrize("family, base", [
    ("loss", gm.Loss), ("penalty", gm.Penalty), ("constraint", gm.Constraint)])
def test_every_library_term_has_an_example(family, base):
    """Every exported concrete term class (symbolic terms aside) and every registered kind
    has an example factory in the registry."""
    rng = np.random.default_rng(0)
    covered = {type(ex.build(rng)) for ex in testing.term_examples(family)}
    exported = {obj for name in gm.__all__ if isinstance(obj := getattr(gm, name), type)
                and issubclass(obj, base) and not inspect.isabstract(obj)
                and not name.startswith("Symbolic") and obj is not base}
    registry = {"loss": LOSSES, "penalty": PENALTIES, "constraint": CONSTRAINTS}[family]
    # the library's kinds (other test modules register their own test terms in the same
    # registries)
    exported |= {cls for kind in registry.kinds()
                 if (cls := registry.get(kind)).__module__.startswith("gtvmodel.")}
    missing = exported - covered
    assert not missing, f"{family} classes without an example factory: {missing}"


def test_battery_reports_a_wrong_value():
    """A loss whose numpy value disagrees with its expression fails with a precise message."""

    class Off(gm.QuadraticLoss):
        def _base_value(self, w):
            return super()._base_value(w) + 1e-3

    with pytest.raises(AssertionError, match="value vs CVXPY expression"):
        testing.check_loss(lambda rng: Off(rng.normal(size=3)), ["value"])


def test_a_batch_that_forgets_a_required_hook_fails_at_construction():
    """The required hooks are abstract: no neutral default (``values`` of zeros) exists."""

    class NeutralBatch(LossBatch):
        pass

    class Neutral(gm.QuadraticLoss):
        batch_class = NeutralBatch

    with pytest.raises(TypeError, match="abstract.*expression.*gradients.*max_rows.*values"):
        LossBatch(Neutral, np.array([0]), [Neutral(np.zeros(3))], 1, 3)


def test_battery_reports_a_batch_of_wrong_values():
    """A batch whose ``values`` answer zeros for a nonzero loss is caught by the battery."""

    class ZeroValues(QuadraticBatch):
        def values(self, W):
            return np.zeros(self.n)

    class Neutral(gm.QuadraticLoss):
        batch_class = ZeroValues

    with pytest.raises(AssertionError, match="batch"):
        testing.check_loss(lambda rng: Neutral(rng.normal(size=3)), ["batch"])


def test_unknown_check_is_refused():
    with pytest.raises(ValueError, match="unknown loss checks"):
        testing.check_loss(lambda rng: gm.ZeroLoss(l2=1.0), ["nope"])


def test_library_losses_cover_every_kind():
    losses = testing.library_losses(np.random.default_rng(0), d=2, m=5, l2=0.1)
    assert set(LOSSES.kinds()) <= set(losses)
    assert all(ls.kind == kind and ls.l2 == 0.1 for kind, ls in losses.items())


class _SteepGradient(gm.QuadraticLoss):
    def _base_gradient(self, w):
        return 1.01 * super()._base_gradient(w)


class _LowConjugate(gm.QuadraticLoss):
    def conjugate(self, s):
        return super().conjugate(s) - 0.01


class _ShortRadiiBatch(QuadraticBatch):
    def sublevel_radii(self, level):
        return 0.5 * super().sublevel_radii(level)


class _ShortRadii(gm.QuadraticLoss):
    batch_class = _ShortRadiiBatch


class _LazyDualUpdate(gm.Norm2):
    def dual_update(self, V, sigma, lamA):
        return np.asarray(V, dtype=float)


class _HalfSupport(gm.Box):
    def support(self, s):
        return 0.5 * super().support(s)


@pytest.mark.parametrize("run, message", [
    (lambda: testing.check_loss(lambda rng: _SteepGradient(rng.normal(size=3)), ["gradient"]),
     "gradient vs finite differences"),
    (lambda: testing.check_loss(lambda rng: _LowConjugate(rng.normal(size=3)), ["conjugate"]),
     "conjugate at s="),
    (lambda: testing.check_loss(lambda rng: _ShortRadii(rng.normal(size=3)), ["batch"]),
     "unsound radius"),
    (lambda: testing.check_penalty(_LazyDualUpdate(), ["prox"]), r"dual_update \(DU \(33\)\)"),
    (lambda: testing.check_constraint(lambda rng: _HalfSupport(-1.0, 0.5), ["support"]),
     "support"),
], ids=["gradient", "conjugate", "radii", "dual-update", "support"])
def test_battery_catches_broken_hooks(run, message):
    """Each family of checks fails, with its message, on a term with one broken hook."""
    with pytest.raises(AssertionError, match=message):
        run()


@testing.parametrize_terms("penalty", checks=False)
def test_check_penalty_whole_battery_entry_point(example):
    """The public one-call form (all named checks of a family but the model ones)."""
    testing.check_penalty(example.build(np.random.default_rng(1)), ["value", "spec"], seed=1,
                          dim=example.dim)
