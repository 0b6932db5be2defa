"""A conformance battery for terms: every loss, penalty and constraint through one set of checks.

Like scikit-learn's ``utils.estimator_checks``, this module tests a term by what it promises
(the protocol of :class:`~gtvmodel.terms.losses.Loss`, :class:`~gtvmodel.terms.penalties.Penalty`
and :class:`~gtvmodel.terms.constraints.Constraint`) against references written *here* in plain
CVXPY, never the package's compiler or conjugate code:

* values against the term's CVXPY expression evaluated by CVXPY; gradients and the curvature
  bounds of Theorem 2 by central finite differences (only where the term says it is
  differentiable, :attr:`Loss.smooth`);
* the conjugate (the ``h*`` of (19)/(24), docs/conventions.md) against ``sup_w s^T w - h(w)``
  solved by CVXPY, and the Fenchel--Young inequality ``h(w) + h*(s) >= s^T w`` with equality at
  ``s = (v - prox(v)) / tau`` (a subgradient at the prox point);
* the proximal maps (PU (32), DU (33)) against CVXPY solves of their defining problems;
* the stacked batch hooks (``values``, ``expression``, ``gradients``, ``hessian_bounds``,
  ``conjugate_group``, ``prox``) against the per-node methods, on a few nodes of mixed data
  placed among nodes outside the batch, and ``sublevel_radii`` (the certified radii's input)
  against CVXPY maximizations of ``||w||_inf`` over the sublevel sets;
* the file spec (``to_spec``/``from_spec``) and a problem-file round trip of a small model;
* on a small model (4 nodes, 5 edges): ``solve_exact`` against one CVXPY problem written per
  node and per edge here, certificates (34) sound at perturbed points
  (``certify(model, W).gap >= P(W) - P*``) and tight at the optimum, and a short run of
  Algorithm 1 whose certified gap decreases.

A new term is tested by adding one example factory to the registry (:func:`term_examples`); the
test module ``tests/test_conformance.py`` parametrizes every check over every example.  The
shared machinery (reference solves, comparisons, the engines on one model) is in
:mod:`gtvmodel._testing_core`.

Examples
--------
>>> from gtvmodel.testing import check_penalty
>>> import gtvmodel as gm
>>> check_penalty(gm.Norm2(), checks=["value", "conjugate"])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import cvxpy as cp
import numpy as np

from ._testing_core import (
    LAM,
    REL,
    check_engines,
    close_to,
    fail,
    reference_solve,
    same_spec,
    selected_checks,
    small_graph,
)
from ._testing_core import REFERENCE_OPTIONS as REFERENCE_OPTIONS  # the battery's solver options
from .declaration import ModelDeclaration
from .errors import UnsupportedError
from .model import GTVModel
from .terms.constraints import Box, Constraint, NonNeg, NormBall
from .terms.losses import (
    AbsoluteLoss,
    HingeLoss,
    HuberLoss,
    LogisticLoss,
    Loss,
    LossBatch,
    QuadraticLoss,
    SquaredLoss,
    ZeroLoss,
)
from .terms.matrix import NuclearNorm, multi_output_squared_loss
from .terms.penalties import Norm1, Norm2, NormInf, NormP, Penalty, QuadForm, SquaredNorm2
from .terms.poisson import PoissonLoss
from .terms.softmax import SoftmaxLoss
from .terms.spec import CONSTRAINTS, LOSSES, PENALTIES

__all__ = [
    "TermExample", "term_examples", "parametrize_terms", "check_loss", "check_penalty",
    "check_constraint", "run_check", "library_losses", "LOSS_CHECKS", "PENALTY_CHECKS",
    "CONSTRAINT_CHECKS",
]


# ======================================================================= the registry
@dataclass(frozen=True)
class TermExample:
    """One example of a term: ``build(rng)`` returns a fresh term (losses and constraints with
    data drawn from ``rng``; penalties ignore it) for parameter dimension ``dim``."""

    name: str
    family: str
    build: Callable[[np.random.Generator], Any]
    dim: int

    def __repr__(self) -> str:
        return f"{self.family}:{self.name}"


def library_losses(rng: np.random.Generator, d: int = 3, m: int = 7, **reg: float
                   ) -> dict[str, Loss]:
    """One loss of every library kind (the keys of :data:`gtvmodel.terms.spec.LOSSES`) on
    data drawn from ``rng``: ``m`` samples of ``d`` features (real targets, ``+-1`` labels
    with both signs, ``3`` classes of :class:`SoftmaxLoss` on ``d / 3`` features, or ``2`` on
    ``d / 2`` when ``3`` does not divide ``d``), Poisson counts drawn at ``exp(x_r^T b)`` for
    samples ``0.5 X``, Huber threshold ``M = 0.7``, regularization
    ``reg`` (``l1``, ``l2``) on every loss."""
    X = rng.normal(size=(m, d))
    y = X @ rng.normal(size=d) + 0.5 * rng.normal(size=m)
    lab = np.where(rng.random(m) < 0.5, -1.0, 1.0)
    lab[:2] = [-1.0, 1.0]
    k = 3 if d % 3 == 0 else 2
    if d % k:
        raise ValueError(f"library_losses needs d divisible by 2 or 3 (SoftmaxLoss), got {d}")
    classes = rng.integers(0, k, size=m)
    classes[:k] = np.arange(k)
    out = {"squared": SquaredLoss(X, y, **reg), "logistic": LogisticLoss(X, lab, **reg),
           "hinge": HingeLoss(X, lab, **reg), "huber": HuberLoss(X, y, M=0.7, **reg),
           "absolute": AbsoluteLoss(X, y, **reg), "zero": ZeroLoss(**reg),
           "quadratic": QuadraticLoss(rng.normal(size=d), **reg),
           "softmax": SoftmaxLoss(rng.normal(size=(m, d // k)), classes, k, **reg),
           "poisson": PoissonLoss(0.5 * X, rng.poisson(np.exp(0.5 * X @ rng.normal(size=d))),
                                  **reg)}
    return out


def _library(kind: str, **reg: float) -> Callable[[np.random.Generator], Loss]:
    """Factory of the ``kind`` loss of :func:`library_losses` (``d = 3``, ``m in [4, 8]``)."""
    def build(rng: np.random.Generator) -> Loss:
        return library_losses(rng, 3, int(rng.integers(4, 9)), **reg)[kind]
    return build


def _multi_output(rng: np.random.Generator) -> Loss:
    """A multi-output squared loss of a ``3 x 2`` matrix parameter (``d = 6``) with ``l1`` and
    ``l2``: :func:`~gtvmodel.terms.matrix.multi_output_squared_loss`."""
    m = int(rng.integers(4, 9))
    return multi_output_squared_loss(rng.normal(size=(m, 3)), rng.normal(size=(m, 2)),
                                     l1=0.05, l2=0.1)


def _box_mixed(rng: np.random.Generator) -> Constraint:
    lo = np.array([-0.2, -np.inf, -1.0]) + 0.1 * rng.random(3)
    hi = np.array([0.3, 0.5, np.inf]) + 0.1 * rng.random(3)
    return Box(lo, hi)


_EXAMPLES: tuple[TermExample, ...] = (
    TermExample("squared", "loss", _library("squared"), 3),
    TermExample("squared-l1-l2", "loss", _library("squared", l1=0.05, l2=0.1), 3),
    TermExample("logistic-l2", "loss", _library("logistic", l2=0.05), 3),
    TermExample("logistic-l1-l2", "loss", _library("logistic", l1=0.02, l2=0.05), 3),
    TermExample("hinge-l2", "loss", _library("hinge", l2=0.1), 3),
    TermExample("absolute-l2", "loss", _library("absolute", l2=0.1), 3),
    TermExample("huber", "loss", _library("huber"), 3),
    TermExample("huber-l1", "loss", _library("huber", l1=0.05, l2=0.02), 3),
    TermExample("zero-l2", "loss", _library("zero", l2=0.5), 3),
    TermExample("zero-l1-l2", "loss", _library("zero", l1=0.2, l2=0.3), 3),
    TermExample("quadratic", "loss", _library("quadratic"), 3),
    TermExample("quadratic-l1", "loss", _library("quadratic", l1=0.1), 3),
    TermExample("softmax-l2", "loss", _library("softmax", l2=0.05), 3),
    TermExample("softmax-l1-l2", "loss", _library("softmax", l1=0.02, l2=0.05), 3),
    TermExample("poisson", "loss", _library("poisson"), 3),
    TermExample("poisson-l2", "loss", _library("poisson", l2=0.05), 3),
    TermExample("poisson-l1-l2", "loss", _library("poisson", l1=0.02, l2=0.05), 3),
    TermExample("multioutput-squared", "loss", _multi_output, 6),
    TermExample("norm2", "penalty", lambda rng: Norm2(), 3),
    TermExample("norm1", "penalty", lambda rng: Norm1(), 3),
    TermExample("norminf", "penalty", lambda rng: NormInf(), 3),
    TermExample("normp3", "penalty", lambda rng: NormP(3.0), 3),
    TermExample("squarednorm2", "penalty", lambda rng: SquaredNorm2(), 3),
    TermExample("nuclear", "penalty", lambda rng: NuclearNorm((3, 2)), 6),
    TermExample("quadform", "penalty",
                lambda rng: QuadForm([[2.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 0.7]]), 3),
    TermExample("box", "constraint", lambda rng: Box(-0.3 - 0.1 * rng.random(), 0.4), 3),
    TermExample("box-mixed", "constraint", _box_mixed, 3),
    TermExample("nonneg", "constraint", lambda rng: NonNeg(), 3),
    TermExample("normball2", "constraint", lambda rng: NormBall(0.5 + 0.2 * rng.random()), 3),
    TermExample("normball1", "constraint", lambda rng: NormBall(0.6, p=1), 3),
    TermExample("normballinf", "constraint", lambda rng: NormBall(0.4, p=np.inf), 3),
)


def term_examples(family: str | None = None) -> list[TermExample]:
    """The registry of example factories, optionally of one ``family`` (``"loss"``,
    ``"penalty"`` or ``"constraint"``).  Every library term class has at least one (checked
    by ``tests/test_conformance.py`` against the classes' registries)."""
    if family not in (None, "loss", "penalty", "constraint"):
        raise ValueError(f"family must be 'loss', 'penalty' or 'constraint', got {family!r}")
    return [ex for ex in _EXAMPLES if family is None or ex.family == family]


def parametrize_terms(family: str, checks: bool = True) -> Any:
    """A ``pytest.mark.parametrize`` over the examples of ``family`` (argument ``example``)
    and, with ``checks``, over the battery's checks of that family (argument ``check``)."""
    import pytest  # the test runner is needed only by this helper

    examples = term_examples(family)
    if not checks:
        return pytest.mark.parametrize("example", examples, ids=[ex.name for ex in examples])
    names = list(_CHECKS[family])
    cases = [(ex, c) for ex in examples for c in names]
    return pytest.mark.parametrize("example, check", cases,
                                   ids=[f"{ex.name}-{c}" for ex, c in cases])


# ======================================================================= losses
def _loss_value(loss: Loss, rng: np.random.Generator) -> None:
    d = loss.dim or 3
    x = cp.Variable(d)
    expr = loss.expression(x)
    for w in 1.5 * rng.normal(size=(4, d)):
        x.value = w
        close_to(loss.value(w), expr.value, 1e-9, 1e-12, f"{loss!r}: value vs CVXPY expression")
    _loss_lower_bound(loss, expr)


def _loss_lower_bound(loss: Loss, expr: cp.Expression) -> None:
    """``facts.lower_bound <= min_w h(w)`` (CVXPY), the bound the compiler and the
    certificate rely on."""
    bound = loss.lower_bound
    if not np.isfinite(bound):
        return
    low, _ = reference_solve(expr)
    if bound > low + 1e-7 * max(1.0, abs(low)):
        fail(f"{loss!r}", f"lower_bound {bound} > min_w L(w) = {low}")


def _loss_gradient(loss: Loss, rng: np.random.Generator) -> None:
    d = loss.dim or 3
    if not loss.smooth:
        try:
            loss.gradient(np.zeros(d))
        except UnsupportedError:
            return
        fail(f"{loss!r}", "not smooth but gradient() does not raise UnsupportedError")
    h = 1e-6
    for w in rng.normal(size=(3, d)):
        fd = np.array([(loss.value(w + h * e) - loss.value(w - h * e)) / (2 * h)
                       for e in np.eye(d)])
        close_to(loss.gradient(w), fd, 1e-6, 1e-6, f"{loss!r}: gradient vs finite differences")


def _loss_curvature(loss: Loss, rng: np.random.Generator) -> None:
    """Theorem 2's constants: ``H_lo <= hess L(w) <= H_hi`` (finite differences of the
    gradient), ``beta = lambda_max(H_hi)``, ``alpha <= lambda_min(H_lo)``."""
    d = loss.dim or 3
    if not loss.lipschitz:
        if loss.smoothness != np.inf:
            fail(f"{loss!r}", f"no Lipschitz gradient but smoothness = {loss.smoothness}")
        if loss.smooth:
            _no_hessian_bound(loss, rng, d)
        return
    lo, hi = loss.hessian_bounds(d)
    close_to(loss.smoothness, np.linalg.eigvalsh(hi)[-1], 1e-12, 0.0,
           f"{loss!r}: smoothness vs lambda_max(H_hi)")
    if not loss.strong_convexity <= np.linalg.eigvalsh(lo)[0] + 1e-12:
        fail(f"{loss!r}", f"strong_convexity {loss.strong_convexity} > lambda_min(H_lo)")
    h = 1e-5
    for w in 2 * rng.normal(size=(3, d)):
        H = np.array([(loss.gradient(w + h * e) - loss.gradient(w - h * e)) / (2 * h)
                      for e in np.eye(d)])
        H = 0.5 * (H + H.T)
        for low, high, what in ((lo, H, "H_lo <= hess L"), (H, hi, "hess L <= H_hi")):
            gap = np.linalg.eigvalsh(high - low)[0]
            if gap < -1e-5:
                fail(f"{loss!r}", f"{what} fails at w = {w} (eigenvalue {gap:.3g})")


def _no_hessian_bound(loss: Loss, rng: np.random.Generator, d: int) -> None:
    """A differentiable loss without a global Lipschitz gradient: ``hessian_bounds`` refuses
    (UnsupportedError, never an infinite or NaN bound) and ``alpha <= lambda_min(hess L)``
    (finite differences of the gradient)."""
    try:
        loss.hessian_bounds(d)
    except UnsupportedError:
        pass
    else:
        fail(f"{loss!r}", "no Lipschitz gradient but hessian_bounds() answers")
    h = 1e-6
    for w in rng.normal(size=(3, d)):
        H = np.array([(loss.gradient(w + h * e) - loss.gradient(w - h * e)) / (2 * h)
                      for e in np.eye(d)])
        low = np.linalg.eigvalsh(0.5 * (H + H.T))[0]
        if loss.strong_convexity > low + 1e-5 * max(1.0, abs(low)):
            fail(f"{loss!r}", f"strong_convexity {loss.strong_convexity} > lambda_min(hess L) "
                  f"= {low} at w = {w}")


def _cvx_conjugate(loss: Loss, s: np.ndarray) -> float:
    """``sup_w s^T w - L(w)`` by CVXPY, written here (not the package's conjugate code)."""
    w = cp.Variable(s.size)
    return reference_solve(s @ w - loss.expression(w), maximize=True)[0]


def _cvx_prox(loss: Loss, v: np.ndarray, tau: float) -> np.ndarray:
    z = cp.Variable(v.size)
    reference_solve(loss.expression(z) + cp.sum_squares(z - v) / (2 * tau))
    return z.value


def _loss_conjugate(loss: Loss, rng: np.random.Generator) -> None:
    d = loss.dim or 3
    for s in np.vstack([0.05 * rng.normal(size=(2, d)), 2.0 * rng.normal(size=(1, d))]):
        ref = _cvx_conjugate(loss, s)
        got = loss.conjugate(s)
        close_to(got, ref, REL, 1e-7, f"{loss!r}: conjugate at s={s} vs CVXPY sup_w s.w - L(w)")
        w = rng.normal(size=d)
        if loss.value(w) + got < s @ w - 1e-7 * (1 + abs(s @ w)):
            fail(f"{loss!r}", f"Fenchel-Young violated: L(w) + L*(s) = "
                               f"{loss.value(w) + got} < s.w = {s @ w}")
    # equality at a subgradient: s = (v - prox(v)) / tau is in dL(prox(v))
    for v in rng.normal(size=(2, d)):
        z = _cvx_prox(loss, v, 1.0)
        s = v - z
        close_to(loss.value(z) + loss.conjugate(s), s @ z, REL, 1e-7,
               f"{loss!r}: Fenchel-Young equality at s = v - prox(v)")
    if loss.smooth:
        w = rng.normal(size=d)
        g = loss.gradient(w)
        close_to(loss.conjugate(g), g @ w - loss.value(w), REL, 1e-7,
               f"{loss!r}: Fenchel-Young equality at s = grad L(w)")


def _prox_objective(loss: Loss, v: np.ndarray, tau: float, z: np.ndarray) -> float:
    return loss.value(z) + float((z - v) @ (z - v)) / (2 * tau)


def _loss_prox(loss: Loss, rng: np.random.Generator) -> None:
    d = loss.dim or 3
    for tau in (0.3, 2.0):
        v = 1.5 * rng.normal(size=d)
        z = loss.prox(v, tau)
        ref = _cvx_prox(loss, v, tau)
        fz, fr = _prox_objective(loss, v, tau, z), _prox_objective(loss, v, tau, ref)
        if fz > fr + 1e-8 * max(1.0, abs(fr)):
            fail(f"{loss!r}", f"prox(v, {tau}) is not optimal: objective {fz} > CVXPY {fr}")
        close_to(z, ref, 0.0, 1e-4, f"{loss!r}: prox(v, {tau}) vs CVXPY")


def _regularizer(loss: Loss, w: np.ndarray) -> float:
    return float(loss.l1 * np.abs(w).sum() + loss.l2 * (w @ w))


def _mixed_batch(factory: Callable[[np.random.Generator], Loss], rng: np.random.Generator
                 ) -> tuple[LossBatch, list[Loss], np.ndarray, int]:
    losses = [factory(np.random.default_rng(int(rng.integers(2**31)))) for _ in range(3)]
    pos = np.array([0, 2, 3])
    n = 5
    d = losses[0].dim or 3
    return LossBatch(type(losses[0]), pos, losses, n, d), losses, pos, d


def _batch_radii(batch: LossBatch, losses: list[Loss], pos: np.ndarray, base: np.ndarray,
                 name: str) -> None:
    """The certified radii's input: ``sublevel_radii(level)[k] >= max ||w||_inf`` over
    ``{L_k <= level_k}`` (the unregularized loss; CVXPY maximizes each ``+-w_j``)."""
    level = np.zeros(batch.n)
    level[pos] = base[pos] + 0.5
    radii = batch.sublevel_radii(level)
    for k, ls in enumerate(losses):
        if not np.isfinite(radii[k]):
            continue
        x = cp.Variable(batch.d)
        cons = [ls._base_expression(x) <= level[pos[k]]]
        top = max(reference_solve(sign * x[j], cons, maximize=True)[0]
                  for j in range(batch.d) for sign in (1.0, -1.0))
        if not radii[k] >= top - 1e-7 * (1 + top):
            fail(name, f"sublevel_radii {radii[k]} < max ||w||_inf = {top} on "
                        f"{{L <= {level[pos[k]]}}} at batch position {k} (unsound radius)")


def _batch_conjugates(batch: LossBatch, losses: list[Loss], pos: np.ndarray,
                      rng: np.random.Generator, name: str) -> None:
    """The certificate's numpy conjugates (:meth:`LossBatch.conjugate_group`) against the
    per-node :meth:`Loss.conjugate` at subgradients ``s = v - prox(v)`` (in ``dom h*``):
    upper bounds of ``h*(s - rho)`` (``inf`` where the residual ``rho`` is unknown: the node
    falls back to the certificate's CVXPY path), equal where the group converged with
    ``rho = 0``."""
    group = batch.conjugate_group(np.ones(pos.size, dtype=bool))
    if group is None:
        return
    at = np.searchsorted(pos, group.nodes)
    d = batch.d
    V = 1.5 * rng.normal(size=(at.size, d))
    S = np.array([V[j] - _cvx_prox(losses[k], V[j], 1.0) for j, k in enumerate(at)])
    W0 = rng.normal(size=S.shape)
    val, rho, _, _, _, conv = group.evaluate(S, W0, np.zeros(at.size), np.zeros(at.size))
    known = np.all(np.isfinite(rho), axis=1)
    if np.any(~known & ~(val == np.inf)):
        fail(name, f"conjugate_group gave finite values {val} with unknown residuals {rho}")
    ref = np.array([losses[k].conjugate(S[j] - rho[j]) if known[j] else np.inf
                    for j, k in enumerate(at)])
    if np.any(val < ref - 1e-7 * (1 + np.abs(ref))):
        fail(name, f"conjugate_group values {val} below the conjugates {ref} (unsound)")
    inside = known & np.asarray(conv, dtype=bool) & (
        np.abs(np.where(known[:, None], rho, 0.0)).max(axis=1) <= 1e-9 * (1 + np.abs(S).max()))
    close_to(val[inside], ref[inside], REL, 1e-7,
           f"{name}: conjugate_group vs per-node conjugate (converged nodes)")


def _loss_batch(factory: Callable[[np.random.Generator], Loss], rng: np.random.Generator
                ) -> None:
    batch, losses, pos, d = _mixed_batch(factory, rng)
    name = f"{type(losses[0]).__name__} batch"
    W = rng.normal(size=(batch.n, d))
    base = np.zeros(batch.n)
    base[pos] = [ls.value(W[i]) - _regularizer(ls, W[i]) for i, ls in zip(pos, losses,
                                                                              strict=True)]
    close_to(batch.values(W), base, 1e-10, 1e-12, f"{name}: values vs per-node value")
    Wv = cp.Variable((batch.n, d))
    Wv.value = W
    expr = batch.expression(cp.vec(Wv, order="C"), Wv)
    total = float(base.sum())
    if expr is None:
        if any(not ls.is_zero and ls.has_data for ls in losses) or abs(total) > 1e-12:
            fail(name, f"expression is None (compiled as zero) but the values sum to {total}")
    else:
        close_to(expr.value, total, 1e-9, 1e-12, f"{name}: expression vs summed values")
    if losses[0].base_smooth:  # the unregularized part: central differences of value - reg
        h, G = 1e-6, np.zeros((batch.n, d))
        for k, ls in zip(pos, losses, strict=True):
            G[k] = [((ls.value(W[k] + h * e) - _regularizer(ls, W[k] + h * e))
                     - (ls.value(W[k] - h * e) - _regularizer(ls, W[k] - h * e))) / (2 * h)
                    for e in np.eye(d)]
        close_to(batch.gradients(W), G, 1e-6, 1e-6,
               f"{name}: gradients vs finite differences of the per-node values")
    _batch_conjugates(batch, losses, pos, rng, name)
    _batch_radii(batch, losses, pos, base, name)
    _batch_hessian_bounds(batch, losses, name, d)
    ok = batch.prox_supported()
    if ok.all():
        V, tau = rng.normal(size=(pos.size, d)), np.array([0.3, 1.0, 2.5])
        ref = np.array([_cvx_prox(ls, V[k], tau[k]) for k, ls in enumerate(losses)])
        close_to(batch.prox(V, tau), ref, 0.0, 1e-4, f"{name}: stacked prox vs CVXPY per node")


def _batch_hessian_bounds(batch: LossBatch, losses: list[Loss], name: str, d: int) -> None:
    """The stacked Hessian bounds against the per-node ones; a refusal where the losses have
    no globally Lipschitz gradient."""
    facts = losses[0].facts
    if facts.differentiable and not facts.lipschitz_gradient:
        try:
            batch.hessian_bounds()
        except UnsupportedError:
            return
        fail(name, "no Lipschitz gradient but hessian_bounds() answers")
    if facts.differentiable:
        lo, hi = batch.hessian_bounds()
        for j, ls in enumerate(losses):
            reg = 2.0 * ls.l2 * np.eye(d)
            ref_lo, ref_hi = ls.hessian_bounds(d) if ls.smooth else (lo[j] + reg, hi[j] + reg)
            close_to(lo[j] + reg, ref_lo, 1e-12, 1e-14, f"{name}: hessian_bounds (lower)")
            close_to(hi[j] + reg, ref_hi, 1e-12, 1e-14, f"{name}: hessian_bounds (upper)")


def _loss_spec(loss: Loss, rng: np.random.Generator) -> None:
    if loss.kind not in LOSSES:
        return
    spec = LOSSES.describe(loss)
    back = type(loss).from_spec(spec)
    if type(back) is not type(loss):
        fail(f"{loss!r}", f"from_spec built a {type(back).__name__}")
    for w in rng.normal(size=(3, loss.dim or 3)):
        close_to(back.value(w), loss.value(w), 0.0, 0.0, f"{loss!r}: value after to/from_spec")
    same_spec(back.to_spec(), spec, f"{loss!r}")


def _loss_model(factory: Callable[[np.random.Generator], Loss], rng: np.random.Generator
                ) -> tuple[ModelDeclaration, Callable[[list[cp.Variable]], tuple]]:
    G = small_graph()
    losses = [factory(np.random.default_rng(int(rng.integers(2**31)))) for _ in G.nodes]
    d = losses[0].dim or 3
    model = GTVModel(G, d, penalty=Norm2(), lam=LAM)
    model.set_losses(dict(enumerate(losses)))

    def reference(x: list[cp.Variable]) -> tuple:
        obj = sum(ls.expression(x[i]) for i, ls in enumerate(losses))
        for u, v, a in G.edges(data="weight", default=1.0):
            obj = obj + LAM * a * cp.norm(x[u] - x[v], 2)
        return obj, []
    return model, reference


def _loss_engines(factory: Callable[[np.random.Generator], Loss], rng: np.random.Generator
                  ) -> None:
    model, reference = _loss_model(factory, rng)
    cvxpy_prox = not all(model.loss_at(i).has_exact_prox() for i in range(model.num_nodes))
    check_engines(model, reference, rng, lambda W: W, 8 if cvxpy_prox else 80,
                   f"model of {model.loss_at(0)!r}")


_LOSS_TERM_CHECKS: dict[str, Callable[[Loss, np.random.Generator], None]] = {
    "value": _loss_value, "gradient": _loss_gradient, "curvature": _loss_curvature,
    "conjugate": _loss_conjugate,
    "prox": _loss_prox, "spec": _loss_spec}
_LOSS_FACTORY_CHECKS = {"batch": _loss_batch, "engines": _loss_engines}
#: The checks of :func:`check_loss` by name.
LOSS_CHECKS: tuple[str, ...] = (*_LOSS_TERM_CHECKS, *_LOSS_FACTORY_CHECKS)


def check_loss(loss_factory: Callable[[np.random.Generator], Loss],
               checks: Iterable[str] | None = None, seed: int = 0) -> None:
    """Run the loss battery on losses built by ``loss_factory(rng)``.

    Parameters
    ----------
    loss_factory : callable
        ``rng -> Loss``: a fresh loss with data drawn from the generator (different draws
        give the mixed data of the batch and model checks).
    checks : iterable of str, optional
        A subset of :data:`LOSS_CHECKS` (default: all): ``"value"``, ``"gradient"``,
        ``"curvature"``, ``"conjugate"``, ``"prox"``, ``"spec"``, ``"batch"``, ``"engines"``.
    seed : int
        Seed of the random points.

    Raises
    ------
    AssertionError
        Naming the term, the check and the point where it failed.
    """
    for name in selected_checks(checks, LOSS_CHECKS, "loss"):
        rng = np.random.default_rng(seed)
        if name in _LOSS_TERM_CHECKS:
            _LOSS_TERM_CHECKS[name](loss_factory(rng), rng)
        else:
            _LOSS_FACTORY_CHECKS[name](loss_factory, rng)


# ======================================================================= penalties
def _rows_expr(penalty: Penalty, V: np.ndarray) -> np.ndarray:
    return np.atleast_1d(penalty.rows_expression(cp.Constant(V)).value).astype(float)


def _pen_value(penalty: Penalty, rng: np.random.Generator, d: int) -> None:
    V = rng.normal(size=(5, d))
    V[0] = 0.0
    rows = penalty.rows_value(V)
    close_to(rows, _rows_expr(penalty, V), 1e-9, 1e-12, f"{penalty!r}: rows_value vs CVXPY")
    close_to(rows, [penalty.value(v) for v in V], 1e-12, 0.0, f"{penalty!r}: rows vs value")
    if np.any(rows < 0) or rows[0] != 0:
        fail(f"{penalty!r}", f"phi must be >= 0 with phi(0) = 0, got {rows}")


def _cvx_pen_prox(penalty: Penalty, v: np.ndarray, t: float) -> np.ndarray:
    z = cp.Variable((1, v.size))
    reference_solve(t * cp.sum(penalty.rows_expression(z)) + cp.sum_squares(z[0] - v) / 2)
    return z.value[0]


def _pen_conjugate(penalty: Penalty, rng: np.random.Generator, d: int) -> None:
    lamA = np.array([0.5, 1.3, 0.5, 2.0, 0.0])
    U = np.vstack([0.1 * rng.normal(size=(2, d)), 3.0 * rng.normal(size=(2, d)), np.zeros(d)])
    got = penalty.conjugate_rows(U, lamA)
    for e in range(4):
        v = cp.Variable((1, d))
        ref, _ = reference_solve(U[e] @ v[0] - lamA[e] * cp.sum(penalty.rows_expression(v)),
                            maximize=True)
        close_to(got[e], ref, REL, 1e-7, f"{penalty!r}: conjugate_rows row {e} (lambda A_e = "
                                       f"{lamA[e]}) vs CVXPY sup_v u.v - lambda A_e phi(v)")
        w = rng.normal(size=d)
        if lamA[e] * penalty.value(w) + got[e] < U[e] @ w - 1e-7 * (1 + abs(U[e] @ w)):
            fail(f"{penalty!r}", f"Fenchel-Young violated at row {e}")
    close_to(got[4], 0.0, 0, 1e-12, f"{penalty!r}: conjugate at lambda A_e = 0, u = 0")
    close_to(got, [penalty.conjugate_rows(U[e:e + 1], lamA[e])[0] for e in range(5)], 1e-12,
           0.0, f"{penalty!r}: conjugate_rows stacked vs one row at a time")


def _pen_prox(penalty: Penalty, rng: np.random.Generator, d: int) -> None:
    V = 1.5 * rng.normal(size=(4, d))
    t = np.array([0.2, 1.0, 3.0, 0.7])
    try:
        Z = penalty.prox_rows(V, t)
    except UnsupportedError:
        Z = None
    if Z is not None:
        ref = np.array([_cvx_pen_prox(penalty, V[e], t[e]) for e in range(4)])
        close_to(Z, ref, 0.0, 1e-5, f"{penalty!r}: prox_rows vs CVXPY")
    # DU (33): prox_{sigma g*}(v), g = lamA phi, by Moreau from a CVXPY prox of g / sigma
    sigma, lamA = np.array([0.5, 2.0, 1.0, 0.3]), np.array([0.4, 1.0, 2.0, 0.8])
    du = penalty.dual_update(V, sigma, lamA)
    ref = np.array([V[e] - sigma[e] * _cvx_pen_prox(penalty, V[e] / sigma[e],
                                                    lamA[e] / sigma[e]) for e in range(4)])
    close_to(du, ref, 0.0, 1e-5, f"{penalty!r}: dual_update (DU (33)) vs CVXPY")
    out = np.empty_like(V)
    close_to(penalty.dual_updater(lamA, d)(V.copy(), sigma, out), du, 1e-12, 1e-14,
           f"{penalty!r}: dual_updater vs dual_update")
    conj = penalty.conjugate_rows(du, lamA)
    if not np.all(np.isfinite(conj)):
        fail(f"{penalty!r}", f"dual_update leaves the conjugate's domain: {conj}")


def _pen_spec(penalty: Penalty, rng: np.random.Generator, d: int) -> None:
    spec = PENALTIES.describe(penalty)
    back = type(penalty).from_spec(spec)
    same_spec(back.to_spec(), spec, f"{penalty!r}")
    if back != penalty:
        fail(f"{penalty!r}", f"from_spec(to_spec) gave {back!r}")
    V = rng.normal(size=(3, d))
    close_to(back.rows_value(V), penalty.rows_value(V), 0.0, 0.0, f"{penalty!r}: spec values")


def _squared_nodes(model: ModelDeclaration, rng: np.random.Generator, shift: float = 0.0
                   ) -> list[Loss]:
    losses = []
    for i in range(model.num_nodes):
        base = library_losses(rng, model.dim, 6)["squared"]
        losses.append(SquaredLoss(base.X, base.y + shift * (i - 1.5), l2=0.01))
    model.set_losses(dict(enumerate(losses)))
    return losses


def _pen_engines(penalty: Penalty, rng: np.random.Generator, d: int) -> None:
    G = small_graph()
    model = GTVModel(G, d, penalty=penalty, lam=LAM)
    losses = _squared_nodes(model, rng)

    def reference(x: list[cp.Variable]) -> tuple:
        obj = sum(cp.sum_squares(ls.y - ls.X @ x[i]) / ls.m + ls.l2 * cp.sum_squares(x[i])
                  for i, ls in enumerate(losses))
        Z = cp.vstack([x[u] - x[v] for u, v in G.edges])
        a = np.array([w for _, _, w in G.edges(data="weight", default=1.0)])
        return obj + LAM * (a @ penalty.rows_expression(Z)), []
    check_engines(model, reference, rng, lambda W: W, 80, f"model with {penalty!r}")


_PENALTY_CHECKS = {"value": _pen_value, "conjugate": _pen_conjugate, "prox": _pen_prox,
                   "spec": _pen_spec, "engines": _pen_engines}
#: The checks of :func:`check_penalty` by name.
PENALTY_CHECKS: tuple[str, ...] = tuple(_PENALTY_CHECKS)


def check_penalty(penalty: Penalty, checks: Iterable[str] | None = None, seed: int = 0,
                  dim: int = 3) -> None:
    """Run the penalty battery on ``penalty`` (an edge penalty ``phi`` of (16)).

    Parameters
    ----------
    penalty : Penalty
        The penalty (``dim`` must suit it, e.g. a :class:`QuadForm`'s matrix).
    checks : iterable of str, optional
        A subset of :data:`PENALTY_CHECKS` (default: all): ``"value"``, ``"conjugate"``,
        ``"prox"`` (prox and DU (33)), ``"spec"``, ``"engines"``.
    seed : int
        Seed of the random points.
    dim : int
        The dimension ``d`` of the rows.

    Raises
    ------
    AssertionError
        Naming the penalty, the check and the row where it failed.
    """
    for name in selected_checks(checks, PENALTY_CHECKS, "penalty"):
        _PENALTY_CHECKS[name](penalty, np.random.default_rng(seed), dim)


# ======================================================================= constraints
def _con_project(c: Constraint, rng: np.random.Generator, d: int) -> None:
    for w in 1.5 * rng.normal(size=(4, d)):
        p = c.project(w)
        z = cp.Variable(d)
        reference_solve(cp.sum_squares(z - w), c.constraints(z))
        close_to(p, z.value, 0.0, 1e-6, f"{c!r}: project vs CVXPY")
        if not c.violation(p) <= 1e-9:
            fail(f"{c!r}", f"violation {c.violation(p)} at its own projection {p}")
        outside = np.linalg.norm(w - z.value) > 1e-5
        if outside != (c.violation(w) > 0):
            fail(f"{c!r}", f"violation({w}) = {c.violation(w)} but the distance to C is "
                            f"{np.linalg.norm(w - z.value)}")
        bounds = c.coordinate_bounds(d)
        if bounds is not None:
            close_to(p, np.clip(w, *bounds), 0.0, 1e-12, f"{c!r}: coordinate_bounds vs project")


def _con_support(c: Constraint, rng: np.random.Generator, d: int) -> None:
    for s in rng.normal(size=(4, d)):
        x = cp.Variable(d)
        ref, _ = reference_solve(s @ x, c.constraints(x), maximize=True)
        got = c.support(s)
        close_to(got, ref, REL, 1e-8, f"{c!r}: support({s}) vs CVXPY max s.x over C")
        p = c.project(rng.normal(size=d))
        if s @ p > got + 1e-9 * (1 + abs(got)):
            fail(f"{c!r}", f"s.x = {s @ p} > support(s) = {got} at a point of C")
    r = c.inf_radius(d)
    x = cp.Variable(d)
    sup = max(reference_solve(sign * x[j], c.constraints(x), maximize=True)[0]
              for j in range(d) for sign in (1, -1))
    if not r >= sup - 1e-9:
        fail(f"{c!r}", f"inf_radius {r} < max ||x||_inf over C = {sup}")
    hs = c.halfspaces(d)
    if hs is not None:
        A, b = hs
        for s, beta in zip(np.atleast_2d(A), np.atleast_1d(b), strict=True):
            top, _ = reference_solve(s @ x, c.constraints(x), maximize=True)
            if top > beta + 1e-8 * (1 + abs(beta)):
                fail(f"{c!r}", f"halfspace {s}.x <= {beta} fails on C (max {top})")


def _con_spec(c: Constraint, rng: np.random.Generator, d: int) -> None:
    if c.kind not in CONSTRAINTS:
        return
    spec = CONSTRAINTS.describe(c)
    back = type(c).from_spec(spec)
    same_spec(back.to_spec(), spec, f"{c!r}")
    for w in 2 * rng.normal(size=(3, d)):
        close_to(back.project(w), c.project(w), 0.0, 0.0, f"{c!r}: project after spec")


def _con_engines(c: Constraint, rng: np.random.Generator, d: int) -> None:
    G = small_graph()
    model = GTVModel(G, d, penalty=Norm2(), lam=LAM)
    losses = _squared_nodes(model, rng, shift=1.5)
    on = (0, 2)
    for i in on:
        model.add_constraint(i, c)

    def reference(x: list[cp.Variable]) -> tuple:
        obj = sum(cp.sum_squares(ls.y - ls.X @ x[i]) / ls.m + ls.l2 * cp.sum_squares(x[i])
                  for i, ls in enumerate(losses))
        for u, v, a in G.edges(data="weight", default=1.0):
            obj = obj + LAM * a * cp.norm(x[u] - x[v], 2)
        return obj, [k for i in on for k in c.constraints(x[i])]

    def project(W: np.ndarray) -> np.ndarray:
        W = W.copy()
        W[list(on)] = [c.project(W[i]) for i in on]
        return W
    check_engines(model, reference, rng, project, 80, f"model with {c!r}")


_CONSTRAINT_CHECKS = {"project": _con_project, "support": _con_support, "spec": _con_spec,
                      "engines": _con_engines}
#: The checks of :func:`check_constraint` by name.
CONSTRAINT_CHECKS: tuple[str, ...] = tuple(_CONSTRAINT_CHECKS)


def check_constraint(constraint_factory: Callable[[np.random.Generator], Constraint],
                     checks: Iterable[str] | None = None, seed: int = 0, dim: int = 3) -> None:
    """Run the constraint battery on constraints built by ``constraint_factory(rng)``.

    Parameters
    ----------
    constraint_factory : callable
        ``rng -> Constraint`` (a node constraint ``C_i`` of (16) in ``R^dim``).
    checks : iterable of str, optional
        A subset of :data:`CONSTRAINT_CHECKS` (default: all): ``"project"`` (projection,
        violation, coordinate bounds), ``"support"`` (the conjugate ``sigma_C``, certified
        radii and half-spaces), ``"spec"``, ``"engines"``.
    seed : int
        Seed of the random points.
    dim : int
        The dimension ``d``.

    Raises
    ------
    AssertionError
        Naming the constraint, the check and the point where it failed.
    """
    for name in selected_checks(checks, CONSTRAINT_CHECKS, "constraint"):
        rng = np.random.default_rng(seed)
        _CONSTRAINT_CHECKS[name](constraint_factory(rng), rng, dim)


_CHECKS: dict[str, tuple[str, ...]] = {"loss": LOSS_CHECKS, "penalty": PENALTY_CHECKS,
                                        "constraint": CONSTRAINT_CHECKS}


def run_check(example: TermExample, check: str, seed: int = 0) -> None:
    """Run one named ``check`` of the battery on one registry ``example``."""
    rng = np.random.default_rng(seed)
    if example.family == "loss":
        check_loss(example.build, [check], seed)
    elif example.family == "penalty":
        check_penalty(example.build(rng), [check], seed, example.dim)
    else:
        check_constraint(example.build, [check], seed, example.dim)
