"""Adversarial soundness tests of certified duality gaps (issue 8).

The promise under test (docs/certificates.md): ``model.certify(W, U)`` returns a gap with
``gap >= P(W) - P*`` for *every* candidate, or ``gap = inf``.  Instances and the reference
``P*`` come from ``tests/_soundness.py``, which shares no code with gtvmodel's compiler or its
loss/penalty/constraint expressions.  Failure classes are kept apart so a regression names what
broke:

* ``test_certificates_are_sound`` -- unsound gaps, NaN, infinite-gap requirements (constraint
  violations beyond ``1e-8 max(1, ||w_i||_inf)`` per node, points outside a symbolic domain),
  exceptions that are not ``GTVError``;
* ``test_objective_is_not_under_reported`` -- ``model.objective(W) >= P(W)`` up to rounding, and
  ``+inf`` outside symbolic domains;
* ``test_exact_solutions_certify`` -- ``solve_exact``'s own ``(W, U)`` certify to 1e-6 (audit
  class 8), on instances whose reference solved; instances with a numerically singular Gram
  matrix (``e_min/e_max < 1e-14`` at an unregularized node with ``m_i >= d``) are counted
  apart ("8n"): their certificates are sound but cannot be tight in double precision; a
  ``SolverError`` of ``solve_exact`` (an honest failure that names the status, "8e") is counted
  apart too and asserted only on the fixed known instances;
* ``test_stiff_nodes_sound_and_tight`` -- the family ``"stiff"`` (ill-conditioned data nodes,
  Gram ratios 1e-6 ... 1e-13; drawn by this test only, so the examples of the tests above stay
  as they were): sound, and exact solutions certified to 1e-9 (issue 16 item 4);
* ``test_regularized_zero_loss_nodes_sound`` -- the family ``"zero_reg"`` (nodes without data
  but with ``l1``/``l2`` weights, demands on both sides of their boxes; drawn by this test
  only): sound, exact solutions certified.

Environment switches:

* ``GTV_SOUNDNESS_OLD=1``: the code under test reports ``gap >= P - P* - tolerance`` (commit
  8e50eb6); the property then uses ``gap + tolerance``.  To test an extracted old tree:
  ``git archive 8e50eb6 gtvmodel | tar -x -C /tmp/gtv_old`` and
  ``PYTHONSAFEPATH=1 PYTHONPATH=/tmp/gtv_old GTV_SOUNDNESS_OLD=1 python -m pytest
  tests/test_soundness.py -p no:cacheprovider`` (``PYTHONSAFEPATH`` keeps ``python -m`` from
  putting this checkout first on ``sys.path``; ``test_which_gtvmodel`` checks it).
* ``GTV_SOUNDNESS_COUNT=N``: ``test_count_failures`` runs ``N`` seeded instances per family and
  prints a table of failures by class instead of stopping at the first (use ``-s``).

Reproduce a falsifying example ``(seed, family)`` with
``_soundness.run_instance(_soundness.random_instance(seed, family), seed).failures``.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path

import _soundness as S
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import gtvmodel

# The seed determines the whole instance, so shrinking it only finds unrelated instances:
# no shrink phase (a failure reports the first falsifying (seed, family) as generated).
# The default suite draws 20 examples of the three property tests below, 3 of the stiff and
# 4 of the zero_reg family (issue 29 item 9: about 1 s an instance, a quarter of the default
# suite's time at the former 50, 6 and 8); their ``_full`` twins (-m slow) draw the former
# counts, the same examples first (one function, so one derandomized sequence), and the slow
# sweep (800 instances, 8,758 certificates in 697 s on 2 shared cores, 2026-11-27) is the full
# check.  200 examples here took over 15 minutes before the recovery's time limit and the
# stacked anchor LPs (certificates/recovery.py, radii.py).
DEFAULT = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                   phases=[Phase.explicit, Phase.generate],
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FULL = settings(DEFAULT, max_examples=50)

SEEDS = st.integers(min_value=0, max_value=2**31 - 1)
FAMILY = st.sampled_from(S.FAMILIES)


@functools.lru_cache(maxsize=4096)
def _outcome(seed: int, family: str, poisson: bool = True) -> S.Outcome:
    """One instance's outcome, shared by the tests below (same examples, one solve)."""
    return S.run_instance(S.random_instance(seed, family, poisson), seed)


_is_soundness = S.is_soundness_failure


def _report(seed: int, family: str, out: S.Outcome, keep: Callable[[str], bool],
            poisson: bool = True) -> list[tuple[str, str]]:
    bad = [(c, n) for c, n in out.failures if keep(c)]
    if bad:
        print(S.random_instance(seed, family, poisson).describe(), bad,
              {c: m for c, m in out.messages.items() if keep(c)})
    return bad


def _make(keep: Callable[[str], bool], cfg: settings) -> Callable[..., None]:
    # One body for all property tests: Hypothesis derandomizes by the function's source, so
    # every test built here draws the same examples and _outcome's cache solves each once.
    @cfg
    @given(seed=SEEDS, family=FAMILY)
    def body(seed: int, family: str) -> None:
        out = _outcome(seed, family)
        bad = _report(seed, family, out, keep)
        msgs = {c: m for c, m in out.messages.items() if keep(c)}
        assert not bad, f"seed={seed} family={family!r}: {bad} {msgs}"

    return body


def _objective_class(cls: str) -> bool:
    return "objective" in cls


def _exact_class(cls: str) -> bool:
    return cls.startswith("8 ")


test_certificates_are_sound = _make(_is_soundness, DEFAULT)
test_objective_is_not_under_reported = _make(_objective_class, DEFAULT)
test_exact_solutions_certify = _make(_exact_class, DEFAULT)
test_certificates_are_sound_full = pytest.mark.slow(_make(_is_soundness, FULL))
test_objective_is_not_under_reported_full = pytest.mark.slow(_make(_objective_class, FULL))
test_exact_solutions_certify_full = pytest.mark.slow(_make(_exact_class, FULL))


def _full(test: Callable[..., None], examples: int) -> Callable[..., None]:
    """The slow twin of a ``@given(seed=SEEDS)`` test: the same function (so the same
    derandomized examples first), ``examples`` of them."""
    inner = test.hypothesis.inner_test  # type: ignore[attr-defined]
    return pytest.mark.slow(settings(DEFAULT, max_examples=examples)(given(seed=SEEDS)(inner)))


def _not_singular(cls: str) -> bool:
    return not cls.startswith("8n ")



#: Instances on which commit 8e50eb6 failed (first example of each audit class in the counting
#: run, 100 instances per family): a fixed regression set beside the random examples, drawn
#: as they were found (without the later Poisson nodes of the mixed family).
KNOWN = [(12, "illcond"), (1, "extreme_p"), (4, "illcond"), (6, "mixed"), (16, "mixed"),
         (0, "feas_scale"), (86, "mixed"), (14, "radius"), (37, "mixed"),
         (43, "mixed"), (33, "illcond"), (0, "mixed"),
         # the exact solution certified only to relative gap 1 until the boosted conic
         # re-solve (duality/conic_bounds.py, _soc_boosts): a far maximizer's epigraphs
         (39, "feas_scale")]


@pytest.mark.parametrize(("seed", "family"), KNOWN)
def test_known_counterexamples(seed: int, family: str) -> None:
    out = _outcome(seed, family, poisson=False)
    bad = _report(seed, family, out, _not_singular, poisson=False)  # "8e" stays asserted
    assert not bad, f"seed={seed} family={family!r}: {bad} {out.messages}"


def test_symbolic_conjugate_far_from_the_origin_is_sound() -> None:
    """Found by the slow sweep on 2026-11-28 (mixed seed 70, the draw with Poisson nodes): the
    certificate of Algorithm 1's 30th iterate has a dual value 4.6e-8 above the objective of a
    feasible point (the exact solution's), so it is unsound by at least that much.  The cause
    is node 0, the symbolic loss ``2.069 / w_0``: at its demand ``s ~ (-4.7e-7, 0)`` the
    supremum of ``s^T w - h(w)`` lies at ``w_0 ~ 2,100``; Clarabel reports "optimal" and the
    conjugate -0.0019681857 with a duality-gap tolerance of 2e-9, while SCS at 1e-12 gives
    -0.0019681186: 6.7e-8 higher.  ``duality.conic.node_conjugate`` added only the gap
    tolerance, not the feasibility error's share of the objective at so large a point.  The
    certificate now bounds conic conjugates from a repaired, checked dual point
    (:mod:`gtvmodel.duality.conic_bounds`)."""
    out = _outcome(70, "mixed", poisson=True)
    bad = _report(70, "mixed", out, _is_soundness, poisson=True)
    assert not bad, f"seed=70 family='mixed': {bad} {out.messages}"


@settings(DEFAULT, max_examples=3)
@given(seed=SEEDS)
def test_stiff_nodes_sound_and_tight(seed: int) -> None:
    """Family ``"stiff"`` (ill-conditioned data nodes, Gram ratios 1e-6 ... 1e-13, beside
    rank-deficient and data-less nodes): every certificate sound, and the exact solution
    certified to a relative gap of 1e-9 (the code before this family certified 3 of its first
    15 instances only to 3.9e-7 ... 2.1e-5)."""
    out = S.run_instance(S.random_instance(seed, "stiff"), seed, exact_rtol=S.EXACT_RTOL["stiff"])
    assert not out.skipped, out.skipped
    assert out.checked >= 10 and out.exact_gaps, out
    bad = _report(seed, "stiff", out, lambda c: True)
    assert not bad, f"seed={seed}: {bad} {out.messages}"


@settings(DEFAULT, max_examples=4)
@given(seed=SEEDS)
def test_regularized_zero_loss_nodes_sound(seed: int) -> None:
    """Family ``"zero_reg"`` (nodes without data but with ``l1``/``l2`` weights, demands on
    both sides of the box ``|s_j| <= eta``; a demand below ``-eta`` once went uncharged and a
    certificate reported ``D > P``): every certificate sound, the exact solution certified."""
    out = S.run_instance(S.random_instance(seed, "zero_reg"), seed)
    assert not out.skipped, out.skipped
    assert out.checked >= 10 and out.exact_gaps, out
    bad = _report(seed, "zero_reg", out, lambda c: True)
    assert not bad, f"seed={seed}: {bad} {out.messages}"


test_stiff_nodes_sound_and_tight_full = _full(test_stiff_nodes_sound_and_tight, 6)
test_regularized_zero_loss_nodes_sound_full = _full(test_regularized_zero_loss_nodes_sound, 8)


def test_which_gtvmodel() -> None:
    """Says which gtvmodel is under test (``-s``).  With ``GTV_SOUNDNESS_OLD=1`` it must not be
    this checkout: ``python -m pytest`` puts the working directory first on ``sys.path``, so
    run ``PYTHONSAFEPATH=1 PYTHONPATH=/tmp/gtv_old GTV_SOUNDNESS_OLD=1 python -m pytest ...``."""
    print(f"\ngtvmodel under test: {gtvmodel.__file__} (GTV_SOUNDNESS_OLD={int(S.OLD)})")
    here = Path(__file__).resolve().parents[1]
    inside = Path(gtvmodel.__file__).resolve().is_relative_to(here)
    if S.OLD:
        assert not inside, (
            "GTV_SOUNDNESS_OLD=1 but gtvmodel resolves to this checkout; set PYTHONSAFEPATH=1")
    else:
        assert inside, f"the suite tests {gtvmodel.__file__}, not this checkout's package"


def _loop(n: int) -> tuple[int, int, int, dict[str, list[tuple[int, str, str]]], float]:
    """``n`` seeded instances per family: (instances, skipped, certificates checked,
    failures by class with their (seed, family, candidate), seconds)."""
    t0 = time.perf_counter()
    checked = skipped = 0
    fails: dict[str, list[tuple[int, str, str]]] = {}
    for family in S.ALL_FAMILIES:
        for seed in range(n):
            out = S.run_instance(S.random_instance(seed, family), seed,
                                 exact_rtol=S.EXACT_RTOL.get(family, 1e-6))
            checked += out.checked
            skipped += bool(out.skipped)
            for cls, cand in out.failures:
                fails.setdefault(cls, []).append((seed, family, cand))
    return n * len(S.ALL_FAMILIES), skipped, checked, fails, time.perf_counter() - t0


def _table(fails: dict[str, list[tuple[int, str, str]]]) -> str:
    lines = [f"{'class':42s} {'failures':>8s} {'instances':>9s}  first (seed, family, candidate)"]
    for cls, rows in sorted(fails.items()):
        inst = len({(a, b) for a, b, _ in rows})
        lines.append(f"{cls:42s} {len(rows):8d} {inst:9d}  {rows[0]}")
    return "\n".join(lines)


@pytest.mark.slow
def test_soundness_many_instances() -> None:
    """Slow run: 100 seeded instances per family (600 instances, > 5,000 certificates)."""
    total, skipped, checked, fails, secs = _loop(100)
    print(f"\nsoundness (slow): gtvmodel from {gtvmodel.__file__}; {total} instances, "
          f"{skipped} skipped (reference not optimal), {checked} certificates checked, "
          f"{secs:.0f} s\n{_table(fails)}")
    assert checked >= 5000
    sound = {c: r for c, r in fails.items() if _is_soundness(c)}
    assert not sound, _table(sound)
    # numerically singular data ("8n") and honest solver failures of solve_exact ("8e": a
    # SolverError naming the status, never a silent wrong answer) are reported, not asserted;
    # exact solutions that miss 1e-6 (sound but loose, "8") must stay rare: at most 1 % of the
    # solved instances (the code before issue 8: 46 of 540, 8.5 %; after: 3-5 of 540)
    rest = {c: r for c, r in fails.items() if not c.startswith(("8n ", "8e ", "8 exact not"))}
    assert not rest, _table(rest)
    loose = len(fails.get("8 exact not certified", []))
    assert loose <= 0.01 * (total - skipped), _table(fails)


@pytest.mark.skipif(not os.environ.get("GTV_SOUNDNESS_COUNT"),
                    reason="counting mode: set GTV_SOUNDNESS_COUNT=N (instances per family)")
def test_count_failures() -> None:
    """Counting mode: N seeded instances per family, a table of failures by class."""
    n = int(os.environ["GTV_SOUNDNESS_COUNT"])
    total, skipped, checked, fails, secs = _loop(n)
    print(f"\ngtvmodel: {gtvmodel.__file__}  OLD={S.OLD}\n{total} instances, {skipped} skipped, "
          f"{checked} certificates checked, {secs:.0f} s\n{_table(fails)}")
    # a counting tool (it reports failures rather than stopping at one), but it must have run
    assert total == n * len(S.ALL_FAMILIES) and checked > 0
