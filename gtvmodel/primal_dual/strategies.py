"""Node-update strategies: which exact vectorized method computes PU (32) for which nodes.

:func:`~gtvmodel.primal_dual.prox.plan` asks the strategies of :data:`STRATEGIES`, in this
order, whether they take a node (:meth:`NodeUpdateStrategy.accepts`, from the node's loss, its
library constraints and the dimension): :class:`IsotropicProx`, :class:`ExactProx`,
:class:`CompositeProx`, :class:`SmoothCompositeProx`.  The first that accepts owns the node;
the nodes of one loss class one strategy accepted with the same constraint kind form one
:class:`BatchProxGroup` (its template built once per model version by
:meth:`NodeUpdateStrategy.template`); a node none accepts takes the general CVXPY path
(:class:`~gtvmodel.primal_dual.prox.CvxpyProxGroup`).  A new node update is one
:class:`NodeUpdateStrategy` subclass inserted in :data:`STRATEGIES` (the order is part of the
contract: an earlier strategy wins).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _compiled, _xp
from ..declaration import ModelDeclaration
from ..kernels.composite import KKT_RTOL
from ..kernels.nodeqp import COMPILED_MIN_NODES, compiled_logistic_composite
from ..terms.composite import CompositeProxBatch, SmoothCompositeProxBatch
from ..terms.constraints import Box, NormBall
from ..terms.losses import LossBatch

__all__ = ["NodeGroup", "BatchProxGroup", "NodeUpdateStrategy", "IsotropicProx", "ExactProx",
           "CompositeProx", "SmoothCompositeProx", "CompiledSmoothCompositeBatch", "STRATEGIES",
           "strategy_key", "box_ball"]


class NodeGroup:
    """A set of nodes (positions ``nodes``) whose PU (32) is evaluated together."""

    nodes: np.ndarray
    #: Short description for reports ("squared", "cvxpy", "isolated", ...).
    kind: str = "group"
    #: True when :meth:`update` accepts other array libraries' tensors (Algorithm 1's
    #: ``device=`` backend, :mod:`~gtvmodel.primal_dual.torch_backend`); the CVXPY path does
    #: not.
    array_api: bool = False

    @property
    def fallbacks(self) -> int:
        """Node updates solved by CVXPY because the group's exact path could not certify
        them (none by default)."""
        return 0

    def update(self, V: np.ndarray, tau: np.ndarray, k: int, W_prev: np.ndarray) -> np.ndarray:
        """PU for the group's nodes: ``V``, ``tau`` and ``W_prev`` are the group's rows
        (``(g, d)``, ``(g,)``, ``(g, d)``); returns ``(g, d)``."""
        raise NotImplementedError

    def prepare(self, tau: Any) -> None:
        """Compute the group's one-off data for :meth:`update` with the steps ``tau`` (the
        group's rows, numpy or a tensor) now (none by default), so that the first node update
        costs what every later one does."""


@dataclass
class BatchProxGroup(NodeGroup):
    """Library-loss nodes of one class: exact vectorized prox, then exact projections.

    ``box`` (``(lo, hi)``, ``(g, d)`` each, ``+-inf`` where unbounded) and ``ball``
    (``(p, radii)``) are the stacked library constraints; the planner only puts a node here
    when prox-then-project is exactly PU (32) for it.
    """

    batch: LossBatch
    box: tuple[np.ndarray, np.ndarray] | None = None
    ball: tuple[float, np.ndarray] | None = None
    #: Builds the batch of the group's positions ``j`` (a slice;
    #: :meth:`~gtvmodel.primal_dual.prox.NodeUpdates.node`); None: the batch's loss class with
    #: its losses there.
    subset: Any = field(default=None, repr=False)
    array_api: bool = True

    def __post_init__(self) -> None:
        self.nodes = self.batch.nodes
        self.kind = self.batch.kind

    def prepare(self, tau: Any) -> None:
        """The batch's one-off data for its prox
        (:meth:`~gtvmodel.terms.losses.LossBatch.prepare`)."""
        self.batch.prepare(tau)

    @property
    def fallbacks(self) -> int:
        """Node updates the batch could not certify exact and solved by CVXPY instead."""
        return int(getattr(self.batch, "fallbacks", 0))

    def single(self, j: int, n: int, d: int) -> BatchProxGroup:
        """The group of its node at position ``j`` alone (``n`` nodes, dimension ``d``)."""
        part = slice(j, j + 1)
        batch = (self.subset(part) if self.subset is not None else
                 LossBatch(self.batch.cls, self.nodes[part], self.batch.losses[part], n,  # type: ignore[abstract]
                           d))
        return BatchProxGroup(
            batch, None if self.box is None else (self.box[0][part], self.box[1][part]),
            None if self.ball is None else (self.ball[0], self.ball[1][part]))

    def update(self, V: np.ndarray, tau: np.ndarray, k: int, W_prev: np.ndarray) -> np.ndarray:
        """PU (32) of the group's nodes: the loss class's exact prox (warm-started at
        ``W_prev`` where it iterates), then the exact projections onto the box / ball (any
        array namespace: the bounds and radii are moved beside ``V`` once)."""
        Z = self.batch.prox(V, tau, W0=W_prev)
        if self.box is not None:
            Z = Box.project_rows(Z, *(_xp.cached_like(self, name, b, Z)
                                      for name, b in zip(("lo", "hi"), self.box, strict=True)))
        if self.ball is not None:
            p, radii = self.ball
            Z = NormBall.project_rows(Z, _xp.cached_like(self, "radii", radii, Z), p)
        return Z


class NodeUpdateStrategy:
    """One exact vectorized way to compute PU (32) for the nodes of one loss class.

    :func:`~gtvmodel.primal_dual.prox.plan` asks the strategies of :data:`STRATEGIES`, in
    their order, whether they take a node (:meth:`accepts`); the first that does owns it, and
    the nodes of one loss class a
    strategy took with the same constraint kind form one :class:`BatchProxGroup`
    (:meth:`template`).  A node no strategy takes goes to the general CVXPY path
    (:class:`~gtvmodel.primal_dual.prox.CvxpyProxGroup`, the fallback after the list).  A new
    node update is one subclass added to :data:`STRATEGIES`.
    """

    #: The strategy's name (part of the group key of :func:`~gtvmodel.primal_dual.prox.plan`).
    name: str = "strategy"

    def accepts(self, loss: Any, cons: list, d: int) -> Hashable | None:
        """The constraint kind (hashable; the nodes of one loss class and kind form a group)
        if this strategy computes PU (32) exactly for a node with ``loss`` and the library
        constraints ``cons`` in dimension ``d``, else None."""
        raise NotImplementedError

    def template(self, model: ModelDeclaration, cls: type, ckind: Any, idx: np.ndarray
                 ) -> BatchProxGroup:
        """The group of the nodes at positions ``idx`` (loss class ``cls``, constraint kind
        ``ckind`` of :meth:`accepts`) with its batch sealed
        (:meth:`~gtvmodel.terms.losses.LossBatch.seal`): its losses stacked, their boxes or
        ball radii too; never run itself (each run takes a sibling of its batch)."""
        raise NotImplementedError


class IsotropicProx(NodeUpdateStrategy):
    """Quadratic and zero losses (:attr:`~gtvmodel.terms.losses.Loss.isotropic_prox`): the
    closed-form prox with any regularizers, then the exact projection onto ``Box``/``NonNeg``
    constraints (kind ``"box"``) or onto one ``NormBall`` without ``l1`` (kind ``("ball",
    p)``; an ``inf``-norm ball with ``l1`` is a box), or no constraints (``"none"``)
    (:func:`_isotropic_constraints`)."""

    name = "isotropic"

    def accepts(self, loss: Any, cons: list, d: int) -> Hashable | None:
        if not (loss.isotropic_prox and loss.has_exact_prox()):
            return None
        comp = _isotropic_constraints(cons, d)
        if comp is not None and comp[0] == "ball" and loss.l1:
            # with l1 only a box composes: an inf-norm ball is one
            comp = ("box", None) if comp[1][0] == np.inf else None
        if comp is None:
            return None
        return comp[0] if comp[0] != "ball" else ("ball", comp[1][0])

    def template(self, model: ModelDeclaration, cls: type, ckind: Any, idx: np.ndarray
                 ) -> BatchProxGroup:
        return _stacked_template(model, cls, ckind, idx)


class ExactProx(NodeUpdateStrategy):
    """Library losses with an exact vectorized prox (:meth:`~gtvmodel.terms.losses.Loss.
    has_exact_prox`: squared, logistic and Huber losses by closed form or damped Newton, hinge
    and absolute losses by the dual active-set method) without ``l1`` and without
    constraints (kind ``"none"``)."""

    name = "exact"

    def accepts(self, loss: Any, cons: list, d: int) -> Hashable | None:
        return "none" if loss.has_exact_prox() and not loss.isotropic_prox and not cons \
            else None

    def template(self, model: ModelDeclaration, cls: type, ckind: Any, idx: np.ndarray
                 ) -> BatchProxGroup:
        return _stacked_template(model, cls, ckind, idx)


class CompositeProx(NodeUpdateStrategy):
    """Piecewise-quadratic data fits (squared, Huber, hinge, absolute) with ``l1`` and/or
    constraints that make a coordinate box (``Box``, ``NonNeg``, an ``inf``-norm ``NormBall``,
    intersections), possibly with 2-norm or 1-norm balls (:func:`box_ball`): ``l1``, the box
    and the ball inside the prox (:class:`~gtvmodel.terms.composite.CompositeProxBatch`; kind
    ``"composite"``)."""

    name = "composite"
    kind = "composite"
    batch_class: type = CompositeProxBatch

    def accepts(self, loss: Any, cons: list, d: int) -> Hashable | None:
        if loss.isotropic_prox and loss.has_exact_prox():
            return None  # IsotropicProx's: its constraints do not compose
        comp = box_ball(cons, d)
        return self.kind if comp is not None and self.takes(loss, comp) else None

    def takes(self, loss: Any, comp: tuple) -> bool:
        """Whether the batch class computes PU (32) of ``loss`` with the box and balls
        ``comp`` of :func:`box_ball`."""
        return bool(loss.piecewise_quadratic)

    def template(self, model: ModelDeclaration, cls: type, ckind: Any, idx: np.ndarray
                 ) -> BatchProxGroup:
        n, d = model.num_nodes, model.dim
        losses = [model.loss_at(i) for i in idx.tolist()]
        parts = _box_balls(model, idx)
        lo, hi = np.vstack([b[0] for b in parts]), np.vstack([b[1] for b in parts])
        radius, radius1 = (np.array([b[j] for b in parts]) for j in (2, 3))
        kind = self.batch_class

        def subset(part: slice) -> Any:
            return kind(cls, idx[part], losses[part], n, d, box=(lo[part], hi[part]),
                        radius=radius[part], radius1=radius1[part])

        batch = subset(slice(None))
        batch.prox_supported()
        return BatchProxGroup(batch.seal(), subset=subset)


class CompiledSmoothCompositeBatch(SmoothCompositeProxBatch):
    """:class:`~gtvmodel.terms.composite.SmoothCompositeProxBatch` whose logistic nodes (from
    ``COMPILED_MIN_NODES`` nodes on, numba installed) take the compiled projected Newton
    method :func:`~gtvmodel.kernels.nodeqp.logistic_composite_pass` node by node: every
    answer certified by the true KKT conditions at ``KKT_RTOL`` (as the proximal Newton
    method's), a node that is not takes one CVXPY solve (counted in :attr:`fallbacks`).  A
    call whose ``W0`` is the last answer starts from it moved to first order (the last
    Hessians)."""

    def _prox(self, V: np.ndarray, tau: np.ndarray, W0: np.ndarray | None) -> np.ndarray:
        k = self.ms.size
        if not (self.logistic_rows() and k >= COMPILED_MIN_NODES and _compiled.available()):
            return super()._prox(V, tau, W0)
        mu = np.ascontiguousarray(2.0 * self.l2 + 1.0 / tau, dtype=float)
        g = np.ascontiguousarray(V / tau[:, None], dtype=float)
        lo, hi = (np.ascontiguousarray(b, dtype=float) for b in self.box)
        last: dict[str, Any] = self.__dict__.get("_compiled_last") or {}
        # the last answer moved to first order starts the call where W0 is that answer
        predict = bool(last) and last["g"].shape == g.shape and (
            W0 is None or np.array_equal(W0, last["Z"]))
        Z = np.array(last["Z"] if predict else np.clip(V if W0 is None else W0, lo, hi),
                     dtype=float)
        H = last["H"] if predict else np.zeros((k, self.d, self.d))
        ok = np.zeros(k, dtype=bool)
        compiled_logistic_composite()(
            self.Xs, self.y, self.c, np.append(self.starts, self.Xs.shape[0]), mu, g,
            np.ascontiguousarray(np.broadcast_to(self.l1, (k,)), dtype=float), lo, hi, Z,
            np.ascontiguousarray(self.hessian_lipschitz(), dtype=float), 60, KKT_RTOL, ok, H,
            predict, last["mu"] if predict else mu, last["g"] if predict else g)
        self.__dict__["_compiled_last"] = {"mu": mu, "g": g, "Z": Z.copy(), "H": H}
        bad = np.flatnonzero(~ok)
        if bad.size:
            self.fallbacks += int(bad.size)
            Z[bad] = np.array([self.cvxpy_prox(int(j), V[j], float(tau[j])) for j in bad])
        return Z


class SmoothCompositeProx(CompositeProx):
    """Smooth data fits that are not piecewise quadratic (logistic) with ``l1`` and/or a
    coordinate box, no ball: the proximal Newton method of
    :class:`~gtvmodel.terms.composite.SmoothCompositeProxBatch` (kind
    ``"smooth-composite"``)."""

    name = "smooth-composite"
    kind = "smooth-composite"
    batch_class = CompiledSmoothCompositeBatch

    def takes(self, loss: Any, comp: tuple) -> bool:
        return bool(np.isinf(comp[2:]).all() and SmoothCompositeProxBatch.accepts(loss))


#: The node-update strategies in the order :func:`~gtvmodel.primal_dual.prox.plan` tries them
#: (the first that accepts a node owns it; nodes none accepts take the CVXPY path).
STRATEGIES: tuple[NodeUpdateStrategy, ...] = (IsotropicProx(), ExactProx(), CompositeProx(),
                                               SmoothCompositeProx())


def _isotropic_constraints(cons: list, d: int) -> tuple[str, Any] | None:
    """How library constraints compose with an isotropic (quadratic/zero loss) prox.

    The isotropic prox objective is ``s ||z - b||^2 + eta ||z||_1`` (coordinate-separable): its
    minimizer over a box is the clipped unconstrained minimizer, coordinate by coordinate, and
    without ``l1`` its minimizer over any norm ball is the Euclidean projection of ``b``.
    Returns ``("box", (lo, hi))``, ``("ball", (p, radius))``, ``("none", None)`` or None (no
    exact composition); the constraints say what they are
    (:meth:`~gtvmodel.terms.constraints.Constraint.coordinate_bounds`,
    :meth:`~gtvmodel.terms.constraints.Constraint.ball`).
    """
    if not cons:
        return "none", None
    bounds = [c.coordinate_bounds(d) for c in cons]
    if all(b is not None for b in bounds):
        lo, hi = np.full(d, -np.inf), np.full(d, np.inf)
        for clo, chi in bounds:
            lo, hi = np.maximum(lo, clo), np.minimum(hi, chi)
        if np.any(lo > hi):
            return None  # empty intersection: let the CVXPY path report infeasibility
        return "box", (lo, hi)
    if len(cons) == 1 and (ball := cons[0].ball()) is not None:
        return "ball", ball
    return None


def strategy_key(loss: Any, cons: list, d: int) -> tuple | None:
    """The group key of a node with ``loss`` and constraints ``cons``: ``(loss class, strategy,
    constraint kind)`` of the first strategy of :data:`STRATEGIES` that accepts it; None if
    none does (then the CVXPY path)."""
    for strategy in STRATEGIES:
        ckind = strategy.accepts(loss, cons, d)
        if ckind is not None:
            return (type(loss), strategy, ckind)
    return None


def box_ball(cons: list, d: int) -> tuple[np.ndarray, np.ndarray, float, float] | None:
    """``(lo, hi, radius, radius1)`` when the library constraints ``cons`` are a coordinate box
    (``Box``, ``NonNeg``, ``inf``-norm balls; ``+-inf`` where unbounded) intersected with
    Euclidean balls ``||w||_2 <= radius`` or with 1-norm balls ``||w||_1 <= radius1`` (the
    smallest; ``inf``: none), else None (both kinds of ball, other norm balls, symbolic
    constraints, an empty box)."""
    lo, hi, radius, radius1 = np.full(d, -np.inf), np.full(d, np.inf), np.inf, np.inf
    for c in cons:
        bounds, ball = c.coordinate_bounds(d), c.ball()
        if bounds is None and ball is not None and ball[0] == np.inf:
            bounds = (np.full(d, -ball[1]), np.full(d, ball[1]))
        if bounds is not None:
            lo, hi = np.maximum(lo, bounds[0]), np.minimum(hi, bounds[1])
        elif ball is not None and ball[0] == 2:
            radius = min(radius, float(ball[1]))
        elif ball is not None and ball[0] == 1:
            radius1 = min(radius1, float(ball[1]))
        else:
            return None
    if np.any(lo > hi) or (np.isfinite(radius) and np.isfinite(radius1)):
        return None
    return lo, hi, radius, radius1


def _box_balls(model: ModelDeclaration, idx: np.ndarray
               ) -> list[tuple[np.ndarray, np.ndarray, float, float]]:
    """:func:`box_ball` of the nodes ``idx``, which a strategy accepted as boxes and balls."""
    parts = [box_ball(model.constraints_at(i), model.dim) for i in idx.tolist()]
    return [p for p in parts if p is not None]


def _stacked_template(model: ModelDeclaration, cls: type, ckind: Any, idx: np.ndarray
                      ) -> BatchProxGroup:
    """The template of :class:`IsotropicProx` and :class:`ExactProx`: the loss class's batch
    (the structure's own where it holds exactly these nodes without constraints), then the
    stacked box (kind ``"box"``) or ball radii (kind ``("ball", p)``)."""
    n, d = model.num_nodes, model.dim
    if ckind == "none":
        whole = _whole_batch(model, idx)
        if whole is not None:  # every node of the structure batch: no new stacking
            twin = whole.sibling()
            twin.prox_supported()  # a data-derived mask: kept by the template's siblings
            return BatchProxGroup(twin.seal())
    losses = [model.loss_at(i) for i in idx.tolist()]
    batch = LossBatch(cls, idx, losses, n, d)  # type: ignore[abstract]  # the factory (__new__)
    batch.share_data(model.structure().batches)  # Gram matrices etc. once per model version
    batch.prox_supported()
    batch.seal()
    box = ball = None
    if ckind == "box":
        lohi = _box_balls(model, idx)
        box = (np.vstack([lh[0] for lh in lohi]), np.vstack([lh[1] for lh in lohi]))
    elif isinstance(ckind, tuple):
        balls = [model.constraints_at(i)[0].ball() for i in idx.tolist()]
        ball = (ckind[1], np.array([b[1] for b in balls if b is not None]))
    return BatchProxGroup(batch, box, ball)


def _whole_batch(model: ModelDeclaration, nodes: np.ndarray) -> LossBatch | None:
    """The model structure's batch that holds exactly the nodes ``nodes`` (in this order),
    else None (the structure's batches partition the nodes with data by loss class, so it is
    the batch of their class)."""
    for b in model.structure().batches:
        if np.array_equal(b.nodes, nodes):
            return b
    return None
