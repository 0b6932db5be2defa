"""Exact batched node updates PU (32) of piecewise-quadratic data fits with ``l1``, box
constraints and a 2-norm or 1-norm ball (issue 16 item 3).

For a data-fit loss whose row conjugate is quadratic on an interval, ``ell*(a) = s_r a + q_r
a^2 / 2`` on ``[lo_r, hi_r]`` (:attr:`~gtvmodel.terms.losses.Loss.piecewise_quadratic`:
squared ``(t - y)^2`` with ``s = y``, ``q = 1/2`` on ``R``; Huber with ``s = y``, ``q = 1/2`` on
``[-2M, 2M]``; hinge and absolute with ``q = 0``), the node update of Algorithm 1 with the
regularizers and a coordinate box ``lo_i <= z <= hi_i`` (``Box``, ``NonNeg``, an ``inf``-norm
``NormBall`` and their intersections),

    PU_i(v) = argmin_z  L_i(z) + eta_i ||z||_1 + kappa_i ||z||^2 + iota_{C_i}(z)
                        + ||z - v||^2 / (2 tau_i),                                      (32)

has the same dual form as the data rows alone once the other terms are written as rows too:
``eta |z_j| = max_{|a| <= eta} a z_j`` (a row ``e_j`` with ``s = q = 0`` on ``[-eta, eta]``),
``iota{z_j <= hi_j} = max_{a >= 0} a z_j - hi_j a`` (``s = hi_j`` on ``[0, inf)``) and
``iota{z_j >= lo_j} = max_{a <= 0} a z_j - lo_j a`` (``s = lo_j`` on ``(-inf, 0]``).  The
minimizer is ``z = (g - sum_r c_r a_r x_r) / mu`` (``mu = 2 kappa + 1/tau``, ``g = v/tau``) with
the row duals ``a`` solving a box-constrained QP, solved for all nodes at once by
:func:`composite_active_set_prox` (finite termination: exact to rounding, every answer checked
against the KKT conditions; a node that fails the check takes one CVXPY solve instead, counted
in :attr:`CompositeProxBatch.fallbacks`, whose answer is then made exact by the active set it
identifies, :meth:`CompositeProxBatch._polished`).  A Euclidean ball ``||z||_2 <= r_i`` enters every
active-set step: with the rows' active sets fixed, ``z`` solves a trust-region problem on the
null space of the free linear rows, exact in the eigenbasis of its curvature, with the ball's
multiplier ``nu >= 0`` by Newton's method on the secular equation ``1/||z(nu)|| = 1/r``
(:func:`~gtvmodel.kernels.steps._ball_solve`).  A 1-norm ball ``||z||_1 <= r_i`` has a
multiplier ``nu1 >= 0`` that widens the ``l1`` rows' intervals to ``[-(eta + nu1), eta +
nu1]``; with the active set fixed ``z`` and ``||z||_1`` are affine in ``nu1``, so two solves
give it exactly (:func:`~gtvmodel.kernels.composite._solve_l1_ball`); where the free rows fix
``z`` outside the ball, ``nu1`` grows until a free row's dual leaves its interval
(:func:`~gtvmodel.kernels.composite._leaving_multiplier`), so the active set changes.  Other
``p``-norm balls stay on the CVXPY path.  Across Algorithm 1's calls the work is mostly fixed
per step (small arrays): a call starts from the last active sets with their cached system and
factorizations, the later steps run on the nodes still changing only, and their systems are
merged into the cached one when the call ends.  This generalizes
:func:`~gtvmodel.kernels.boxqp.dual_active_set_prox` (``q = 0``, no regularizer or constraint
rows) to quadratic row conjugates.

Smooth data fits without such a conjugate (logistic) with ``l1`` and a box take
:class:`SmoothCompositeProxBatch`: proximal Newton, each step's quadratic model of the data rows
(rows ``sqrt(c_r ell''_r) x_r`` with ``q = 1``) solved exactly by
:func:`composite_active_set_prox`, then a line search on the true objective, stopped by the KKT
conditions of the true problem; across Algorithm 1's calls, plain Newton steps on the last active
sets of the ``l1`` and box rows (updated primal-dual style where a step leaves them) certify
almost every node before any such model is built.

The solvers themselves work on arrays and are in :mod:`gtvmodel.kernels.composite` (the
active-set method, the KKT check), :mod:`gtvmodel.kernels.systems` and
:mod:`gtvmodel.kernels.steps` (its systems, affine and trust-region ball steps); this module
builds their rows from the losses and constraints.
"""

from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np

from .._solver import run_solver
from ..errors import SolverError
from ..kernels.composite import KKT_RTOL, composite_active_set_prox, kkt_certified, states_at
from ..kernels.linalg import spd_solve
from .losses import DataFitBatch, Loss

__all__ = ["CompositeProxBatch", "SmoothCompositeProxBatch", "composite_active_set_prox",
           "kkt_certified", "KKT_RTOL"]


class CompositeProxBatch(DataFitBatch):
    """Piecewise-quadratic data fits (:attr:`~gtvmodel.terms.losses.Loss.piecewise_quadratic`)
    with ``l1``, a coordinate box per node (``box = (lo, hi)``, ``(k, d)`` each, ``+-inf``
    where unbounded; None: no constraint) and a Euclidean ball ``||z||_2 <= radius_i``
    (``inf``: none): PU (32) exactly and vectorized by :func:`composite_active_set_prox`, its
    ``l1`` and box terms as extra rows, the ball inside each active-set step (its multiplier
    by Newton's method on the secular equation, :func:`~gtvmodel.kernels.steps._ball_solve`).
    A node whose answer fails the KKT check takes one CVXPY solve of its PU (32) instead
    (counted in :attr:`fallbacks`)."""

    def __init__(self, cls: type[Loss], nodes: np.ndarray, losses: Any, n: int, d: int,
                 box: tuple[np.ndarray, np.ndarray] | None = None,
                 radius: np.ndarray | None = None, radius1: np.ndarray | None = None):
        super().__init__(cls, nodes, losses, n, d)
        k = self.ms.size
        if box is None:
            box = (np.full((k, d), -np.inf), np.full((k, d), np.inf))
        self.box = (np.broadcast_to(np.asarray(box[0], dtype=float), (k, d)),
                    np.broadcast_to(np.asarray(box[1], dtype=float), (k, d)))
        #: Radii of the nodes' Euclidean balls ``||z||_2 <= r_i`` (``inf``: none).
        self.radius = np.broadcast_to(np.asarray(np.inf if radius is None else radius,
                                                 dtype=float), (k,))
        #: Radii of the nodes' 1-norm balls ``||z||_1 <= r_i`` (``inf``: none).
        self.radius1 = np.broadcast_to(np.asarray(np.inf if radius1 is None else radius1,
                                                  dtype=float), (k,))
        self._balls = tuple(r if np.isfinite(r).any() else None
                            for r in (self.radius, self.radius1))
        #: Node updates that failed the KKT check and were solved by CVXPY instead.
        self.fallbacks = 0

    @property
    def kind(self) -> str:
        """``"<loss kind>-active-set"`` (the path's name in ``NodeUpdates.describe()``)."""
        return f"{self.cls.kind}-active-set"

    def prox_supported(self) -> np.ndarray:
        """Every node whose loss is piecewise quadratic (any ``l1``, ``l2``; computed once)."""
        ok = self.__dict__.get("_prox_ok")
        if ok is None:
            ok = self.__dict__["_prox_ok"] = np.array(
                [ls.piecewise_quadratic for ls in self.losses], dtype=bool)
        return ok

    def _padded(self) -> dict[str, Any]:
        """The rows of :func:`composite_active_set_prox` padded per node (cached): the data
        rows (``max_i m_i`` slots), then ``d`` ``l1`` rows if any ``eta_i > 0``, ``d`` upper and
        ``d`` lower box rows if any bound is finite."""
        pad = self.__dict__.get("_pad")
        if pad is not None:
            return pad
        k, m, d = self.ms.size, self.max_rows(), self.d
        blocks = [self._data_block()]
        data = blocks[0]
        eta = self.l1[:, None] * np.ones((1, d))
        lo_b, hi_b = self.box
        zero = np.zeros((k, d))
        ball1 = np.isfinite(self.radius1)[:, None] * np.ones((1, d), dtype=bool)
        if (eta > 0).any() or ball1.any():  # eta |z_j| = max_{|a| <= eta} a z_j (with a
            # 1-norm ball: eta + nu1, nu1 its multiplier)
            blocks.append(_unit_rows(zero, -eta, eta, (eta == 0) & ~ball1))
        l1_block = len(blocks) - 1 if len(blocks) > 1 else None
        if np.isfinite(hi_b).any():  # z_j <= hi_j: a >= 0, s = hi_j
            fin = np.isfinite(hi_b)
            blocks.append(_unit_rows(np.where(fin, hi_b, 0.0), zero, np.where(fin, np.inf, 0.0),
                                     ~fin))
        if np.isfinite(lo_b).any():  # z_j >= lo_j: a <= 0, s = lo_j
            fin = np.isfinite(lo_b)
            blocks.append(_unit_rows(np.where(fin, lo_b, 0.0), np.where(fin, -np.inf, 0.0), zero,
                                     ~fin))
        pad = {name: np.concatenate([b[name] for b in blocks], axis=1) for name in data}
        pad["coord"] = np.concatenate([np.full(m, -1)] + [np.arange(d)] * (len(blocks) - 1))
        pad["l1row"] = np.concatenate([np.full(m if i == 0 else d, i == l1_block and i > 0)
                                       for i in range(len(blocks))])
        self.__dict__["_pad"] = pad
        return pad

    def _slot(self) -> np.ndarray:
        """Each sample row's slot among its node's padded data rows."""
        return np.arange(self.Xs.shape[0]) - self.starts[self.local]

    def _data_block(self) -> dict[str, np.ndarray]:
        """The data rows of :meth:`_padded`, ``max_i m_i`` slots per node: ``P_r = c_r x_r``
        and the row conjugate's ``c s``, ``c q`` (from three of its values) and interval."""
        k, m, M, d = self.ms.size, self.max_rows(), self.Xs.shape[0], self.d
        slot = self._slot()
        conj = self.cls._ell_conj
        f0, f1, fm = (conj(np.full(M, t), self.y, self.p) for t in (0.0, 1.0, -1.0))
        lo_r, hi_r = (np.broadcast_to(np.asarray(b, dtype=float), (M,))
                      for b in self.cls._ell_conj_bounds(self.y, self.p))
        data = {"P": np.zeros((k, m, d)), "cs": np.zeros((k, m)), "cq": np.zeros((k, m)),
                "lo": np.zeros((k, m)), "hi": np.zeros((k, m)),
                "fixed": np.ones((k, m), dtype=bool)}
        data["P"][self.local, slot] = self.c[:, None] * self.Xs
        for name, rows in (("cs", self.c * 0.5 * (f1 - fm)), ("cq", self.c * (f1 + fm - 2 * f0)),
                           ("lo", lo_r), ("hi", hi_r)):
            data[name][self.local, slot] = rows
        data["fixed"][self.local, slot] = False
        return data

    def _prox(self, V: np.ndarray, tau: np.ndarray, W0: np.ndarray | None) -> np.ndarray:
        """:func:`composite_active_set_prox` on ``L_i(z) + eta_i ||z||_1 + kappa_i ||z||^2 +
        iota_{box_i}(z) + iota{||z||_2 <= r_i} + ||z - v_i||^2 / (2 tau_i)``, started from the
        last call's active sets (Algorithm 1 changes them little), else from ``W0`` (else
        ``v_i``) clipped to the box; nodes failing the KKT check take :meth:`cvxpy_prox`."""
        k = self.ms.size
        mu = 2.0 * self.l2 + 1.0 / tau
        start = self.__dict__.get("_dual_start")
        if start is not None and start[0].shape[0] != k:
            start = None
        # the starting point matters only without a last active set (every z is solved for)
        Z = V if start is not None else np.clip(V if W0 is None else np.asarray(W0, dtype=float),
                                                *self.box)
        radius, radius1 = self._balls
        Z, ok, self.__dict__["_dual_start"] = composite_active_set_prox(
            **self._padded(), mu=mu, g=V / tau[:, None], Z0=Z, start=start, radius=radius,
            radius1=radius1, cache=self.__dict__.setdefault("_system_cache", {}))
        bad = np.flatnonzero(~ok)  # type: ignore[operator]  # checked: ok is an array
        if bad.size:
            self.fallbacks += int(bad.size)
            W = np.array([self.cvxpy_prox(int(j), V[j], float(tau[j])) for j in bad])
            Wp, polished = self._polished(bad, W, mu, V, tau)
            keep = self._better_than(bad, Z[bad], W, V[bad], tau[bad])
            Z[bad] = np.where(polished[:, None], Wp,
                              np.where(keep[:, None], Z[bad], W))
        return Z

    def _polished(self, idx: np.ndarray, W: np.ndarray, mu: np.ndarray, V: np.ndarray,
                  tau: np.ndarray) -> tuple[np.ndarray, Any]:
        """The CVXPY answers ``W`` of the nodes ``idx`` made exact: the active sets they
        identify (:func:`states_at`) start :func:`composite_active_set_prox` on those nodes,
        which solves them exactly (and moves on where a row was misidentified); returns the
        answers and where they pass :func:`kkt_certified` (there they replace ``W`` and their
        active sets start the next call).  The active-set steps can cycle on a
        badly conditioned node from far away (Huber with ``l1`` at condition ``1e4``), while
        the solver's point, ``1e-8`` off, lies on the solution's active set."""
        pad = self._padded()
        rows: dict[str, Any] = {key: pad[key][idx]
                                for key in ("P", "cs", "cq", "lo", "hi", "fixed")}
        radius, radius1 = (None if r is None else r[idx] for r in self._balls)
        Zp, ok, new = composite_active_set_prox(
            **rows, coord=pad["coord"], l1row=pad["l1row"], mu=mu[idx],
            g=V[idx] / tau[idx, None], Z0=W, start=states_at(W, **rows), radius=radius,
            radius1=radius1)
        last = self.__dict__.get("_dual_start")
        if last is not None:
            for full, part in zip(last, new, strict=True):
                full[idx[ok]] = part[ok]
        return Zp, ok

    def _better_than(self, idx: np.ndarray, Z: np.ndarray, W: np.ndarray, V: np.ndarray,
                     tau: np.ndarray) -> np.ndarray:
        """Per node ``idx``: whether the active-set answer ``Z`` (which failed the KKT check)
        is feasible and its PU (32) objective ``L_i(z) + ||z - v_i||^2 / (2 tau_i)`` is at most
        that of the CVXPY answer ``W``.  The check's relative residual can exceed
        :data:`KKT_RTOL` at an exact answer where the rows' duals, recomputed from ``z``,
        cancel (ill-conditioned ``X_i``, small ``1 / tau_i``), while the solver's point is only
        as accurate as its tolerances: of two feasible points of a strongly convex problem the
        lower objective is nearer the minimizer's value."""
        lo, hi = self.box[0][idx], self.box[1][idx]
        feasible = ((Z >= lo) & (Z <= hi)).all(axis=1) & np.isfinite(Z).all(axis=1) \
            & (np.linalg.norm(Z, axis=1) <= self.radius[idx]) \
            & (np.abs(Z).sum(axis=1) <= self.radius1[idx])
        with np.errstate(over="ignore", invalid="ignore"):
            return feasible & (self._prox_objective(idx, Z, V, tau)
                               <= self._prox_objective(idx, W, V, tau))

    def _prox_objective(self, idx: np.ndarray, Z: np.ndarray, V: np.ndarray,
                        tau: np.ndarray) -> np.ndarray:
        """PU (32)'s objective ``L_i(z_i) + eta_i ||z_i||_1 + kappa_i ||z_i||^2 + ||z_i -
        v_i||^2 / (2 tau_i)`` at the rows ``Z`` of the batch's nodes ``idx`` (the data fit by
        :meth:`values`, all nodes at once)."""
        full = np.zeros((self.n, self.d))
        full[self.nodes[idx]] = Z
        return (self.values(full)[self.nodes[idx]] + self.l1[idx] * np.abs(Z).sum(axis=1)
                + self.l2[idx] * (Z**2).sum(axis=1)
                + ((Z - V) ** 2).sum(axis=1) / (2.0 * tau))

    def cvxpy_prox(self, j: int, v: np.ndarray, tau: float) -> np.ndarray:
        """PU (32) of the batch's node ``j`` by one CVXPY solve (gtvmodel's accuracy defaults):
        its loss expression with the box and ball as constraints, the point projected back
        onto them."""
        loss, (lo, hi) = self.losses[j], (self.box[0][j], self.box[1][j])
        z = cp.Variable(self.d)
        cons = ([z[np.isfinite(lo)] >= lo[np.isfinite(lo)]] if np.isfinite(lo).any() else []) \
            + ([z[np.isfinite(hi)] <= hi[np.isfinite(hi)]] if np.isfinite(hi).any() else []) \
            + ([cp.norm(z, 2) <= self.radius[j]] if np.isfinite(self.radius[j]) else []) \
            + ([cp.norm(z, 1) <= self.radius1[j]] if np.isfinite(self.radius1[j]) else [])
        prob = cp.Problem(cp.Minimize(loss.expression(z) + cp.sum_squares(z - v) / (2.0 * tau)),
                          cons)
        what = f"prox of {loss!r} with a box"
        run_solver(prob, None, {}, False, False, what)
        if z.value is None:
            raise SolverError(f"{what}: the solver returned no point", status=prob.status,
                              solver="CLARABEL")
        # the solver's point is feasible to its tolerance only; the box and the ball hold the
        # minimizer, so projecting onto them moves the point nearer to it (the ball's
        # projection, a scaling, then the box's again: within the box, and within the ball
        # whenever the box holds 0)
        w = np.clip(np.asarray(z.value, dtype=float), lo, hi)
        w *= min(1.0, self.radius[j] / max(float(np.linalg.norm(w)), 1e-300),
                 self.radius1[j] / max(float(np.abs(w).sum()), 1e-300))
        return np.clip(w, lo, hi)


def _unit_rows(s: np.ndarray, lo: np.ndarray, hi: np.ndarray, fixed: np.ndarray
               ) -> dict[str, np.ndarray]:
    """``d`` rows ``x = e_j`` per node (``c = 1``, ``q = 0``) with conjugate slope ``s``
    and dual interval ``[lo, hi]`` (``(k, d)`` each); ``fixed`` rows are padding."""
    k, d = s.shape
    return {"P": np.broadcast_to(np.eye(d), (k, d, d)) * ~fixed[:, :, None],
            "cs": np.where(fixed, 0.0, s), "cq": np.zeros((k, d)),
            "lo": np.where(fixed, 0.0, lo), "hi": np.where(fixed, 0.0, hi),
            "fixed": fixed.copy()}


class SmoothCompositeProxBatch(CompositeProxBatch):
    """Smooth data fits that are not piecewise quadratic (:class:`LogisticLoss`, any
    :class:`~gtvmodel.terms.losses.DataFitLoss` with the row derivatives ``_ell_d1`` and
    ``_ell_d2``) with ``l1`` and a coordinate box per node: PU (32) exactly and vectorized by
    a proximal Newton method (:meth:`_prox`).  At ``z_k`` the smooth part ``f(z) = sum_r c_r
    ell(x_r^T z) + mu ||z||^2 / 2 - g^T z`` is replaced by its quadratic model (Hessian ``X^T
    diag(c ell'') X + mu I``), which with the ``l1`` and box rows is the problem of
    :func:`composite_active_set_prox` (data rows ``sqrt(c_r ell''_r) x_r`` with ``ell*(a) =
    a^2 / 2``), solved exactly; a backtracking line search on the true objective follows
    (vectorized over nodes).  A node stops when its point meets the KKT conditions of the true
    problem (:func:`kkt_certified`, the data rows' duals ``ell'(x_r^T z)`` held) at
    ``KKT_RTOL``; nodes that do not within ``max_outer`` steps take one CVXPY solve (counted in
    :attr:`fallbacks`).  A warm call first takes up to ``held_steps`` Newton steps on the last
    call's active sets (:meth:`_held_newton`, :meth:`_held_states`), certified the same way."""

    #: Proximal Newton steps before a node takes the CVXPY path.
    max_outer = 40

    #: Newton steps on the last call's active sets (:meth:`_held_newton`), updated after each
    #: (:meth:`_held_states`), before the general steps.
    held_steps = 3

    @staticmethod
    def accepts(loss: Loss) -> bool:
        """Whether this path computes PU (32) of ``loss`` (with ``l1`` and/or a box): a smooth
        data fit with a batched row formula whose conjugate is not piecewise quadratic."""
        batch = loss.batch_class
        return (loss.base_smooth and not loss.piecewise_quadratic and batch is not None
                and issubclass(batch, DataFitBatch))

    @property
    def kind(self) -> str:
        """``"<loss kind>-prox-newton"`` (the path's name in ``NodeUpdates.describe()``)."""
        return f"{self.cls.kind}-prox-newton"

    def prox_supported(self) -> np.ndarray:
        """Every node (:meth:`accepts` chose the class)."""
        return np.ones(self.ms.size, dtype=bool)

    def _data_block(self) -> dict[str, np.ndarray]:
        """Data rows of the quadratic models: ``ell*(a) = a^2 / 2`` (``c q = 1``, ``s = 0``)
        on ``R``; their ``P`` is set at every step (:meth:`_model_rows`)."""
        k, m, d = self.ms.size, self.max_rows(), self.d
        slot = self._slot()
        data = {"P": np.zeros((k, m, d)), "cs": np.zeros((k, m)), "cq": np.zeros((k, m)),
                "lo": np.zeros((k, m)), "hi": np.zeros((k, m)),
                "fixed": np.ones((k, m), dtype=bool)}
        data["cq"][self.local, slot] = 1.0
        data["lo"][self.local, slot] = -np.inf
        data["hi"][self.local, slot] = np.inf
        data["fixed"][self.local, slot] = False
        return data

    def _rows_of(self, nodes: np.ndarray) -> dict[str, Any]:  # type: ignore[override]
        """The sample rows of ``nodes`` (sorted; every node has a row) as compact arrays, in
        the nodes' order: ``Xs``, ``y``, ``p``, ``c``, ``cX = c_r x_r``, ``acX = |c_r x_r|``,
        ``cXX = c_r x_r x_r^T``, each row's position ``loc`` in ``nodes``, the ``reduceat``
        offsets ``offs`` of the nodes' row blocks, and its node and slot in :meth:`_padded`
        (``node``, ``slot``).  All nodes: views of the cached arrays."""
        rp = self._row_products()
        if nodes.size == self.ms.size:
            r: Any = slice(None)
            loc, offs = self.local, self.starts
        else:
            mask = np.zeros(self.ms.size, dtype=bool)
            mask[nodes] = True
            r = np.flatnonzero(mask[self.local])
            loc, offs = self._blocks(self.ms[nodes])
        return {"Xs": self.Xs[r], "y": self.y[r], "p": None if self.p is None else self.p[r],
                "c": self.c[r], "cX": rp["cX"][r], "acX": rp["acX"][r], "cXX": rp["cXX"][r],
                "node": self.local[r], "slot": rp["slot"][r], "loc": loc, "offs": offs,
                "ms": self.ms[nodes]}

    @staticmethod
    def _blocks(ms: Any) -> tuple[np.ndarray, np.ndarray]:
        """Each row's block and the ``reduceat`` offsets of consecutive blocks of ``ms`` rows."""
        return (np.repeat(np.arange(ms.size), ms),
                np.concatenate(([0], np.cumsum(ms)[:-1])).astype(np.int64))

    def _kept_rows(self, rw: dict[str, Any], keep: np.ndarray) -> dict[str, Any]:
        """:meth:`_rows_of` of the nodes ``keep`` (a mask over ``rw``'s nodes), from ``rw``'s
        rows (no gather from the full arrays)."""
        rk = np.flatnonzero(keep[rw["loc"]])  # (np.take: faster than a mask's gather)
        out = {key: (None if val is None else np.take(val, rk, axis=0))
               for key, val in rw.items() if key not in ("loc", "offs", "ms")}
        out["ms"] = rw["ms"][keep]
        out["loc"], out["offs"] = self._blocks(out["ms"])
        return out

    def _at(self, rw: dict[str, Any], Z: np.ndarray) -> np.ndarray:
        """``t_r = x_r^T z_i`` for ``rw``'s rows (``Z``: their nodes' points, compact)."""
        return np.einsum("rd,rd->r", rw["Xs"], np.take(Z, rw["loc"], axis=0))

    def _derivs(self, rw: dict[str, Any], Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``ell'(x_r^T z)``, ``ell''(x_r^T z)`` for ``rw``'s rows (:meth:`_at`)."""
        return self.cls._ell_d12(self._at(rw, Z), rw["y"], rw["p"])

    @staticmethod
    def _sum(rw: dict[str, Any], rows: np.ndarray) -> np.ndarray:
        """``sum_{r in i} rows_r`` per node of ``rw`` (every node has a row)."""
        return np.add.reduceat(rows, rw["offs"], axis=0)

    def _objective(self, rw: dict[str, Any], Z: np.ndarray, mu: np.ndarray, g: np.ndarray,
                   l1: np.ndarray) -> np.ndarray:
        """``F_i(z) = sum_r c_r ell(x_r^T z) + eta_i ||z||_1 + mu_i ||z||^2 / 2 - g_i^T z`` for
        ``rw``'s nodes (compact arrays)."""
        ell = self.cls._ell(self._at(rw, Z), rw["y"], rw["p"])
        return (self._sum(rw, rw["c"] * ell) + l1 * np.abs(Z).sum(axis=1)
                + 0.5 * mu * (Z**2).sum(axis=1) - (g * Z).sum(axis=1))

    def _model_rows(self, rw: dict[str, Any], P: np.ndarray, Z: np.ndarray, g: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """The quadratic model of ``sum_r c_r ell(x_r^T z) - g^T z`` at ``Z`` (``rw``'s nodes,
        compact): writes its data rows ``sqrt(c_r ell''_r) x_r`` into ``P`` and returns ``(g -
        sum_r c_r (ell'_r - ell''_r t_r) x_r, ell'_r)`` (its linear part, the rows' first
        derivatives)."""
        t = self._at(rw, Z)
        d1, d2 = self.cls._ell_d12(t, rw["y"], rw["p"])
        P[rw["loc"], rw["slot"], :] = np.sqrt(rw["c"] * d2)[:, None] * rw["Xs"]
        return g - self._sum(rw, (rw["c"] * (d1 - d2 * t))[:, None] * rw["Xs"]), d1

    def _true_kkt(self, um: dict[str, Any], nodes: np.ndarray | slice, Z: np.ndarray,
                  aU: np.ndarray, G1: np.ndarray, A1: np.ndarray, mu: np.ndarray,
                  g: np.ndarray) -> np.ndarray:
        """:func:`kkt_certified` of PU (32) itself for ``nodes`` (compact arrays) at ``Z``: the
        data rows ``P_r = c_r x_r`` with their duals ``ell'(x_r^T z)`` held (``lo = hi``, so
        only stationarity and finiteness involve them: ``G1 = sum_r ell'_r c_r x_r``, ``A1 =
        sum_r |ell'_r| |c_r x_r|``), the ``l1`` and box rows ``P_u = e_j`` (:meth:`_unit_map`)
        with the duals ``aU``.  The same conditions at the same tolerance as
        :func:`kkt_certified` on :meth:`_padded`'s rows, without the padded arrays:
        stationarity ``|mu z - g + G1 + sum_u a_u e_j| <= rtol (|mu z| + |g| + A1 + sum_u |a_u|
        e_j)`` per coordinate, every unit dual in ``[lo_u, hi_u]`` with ``grad_u = s_u - z_j``
        at most ``tol_u`` where ``a_u > lo_u`` and at least ``-tol_u`` where ``a_u < hi_u``,
        ``tol_u = rtol (|s_u| + scale_j / mu)``, and a finite ``scale`` (finite ``z``, unit
        duals and ``A1``, so the data duals: :func:`kkt_certified`'s finiteness, also failing
        where the sum overflows); padding rows are left out."""
        fixed, s, lo, hi = (um[key][nodes] for key in ("fixed", "s", "lo", "hi"))
        E, coord = um["Ef"], um["coord"]
        with np.errstate(over="ignore", invalid="ignore"):
            a = np.where(fixed, 0.0, aU)
            muZ = mu[:, None] * Z
            stat = np.abs(muZ - g + G1 + a @ E)
            scale = np.abs(muZ) + np.abs(g) + A1 + np.abs(a) @ E
            grad = s - Z[:, coord]
            tol = KKT_RTOL * (np.abs(s) + (scale / mu[:, None])[:, coord])
            rows_ok = ((a >= lo) & (a <= hi) & ((a <= lo) | (grad <= tol))
                       & ((a >= hi) | (grad >= -tol))) | fixed
            # a finite scale: z, the unit duals and A1 finite (overflow of the sum too)
            return (rows_ok.all(axis=1) & (stat <= KKT_RTOL * scale).all(axis=1)
                    & np.isfinite(scale).all(axis=1))

    def _prox(self, V: np.ndarray, tau: np.ndarray, W0: np.ndarray | None) -> np.ndarray:
        """Proximal Newton on ``L_i(z) + eta_i ||z||_1 + kappa_i ||z||^2 + iota_{box_i}(z) +
        ||z - v_i||^2 / (2 tau_i)``, from ``W0`` (else ``v_i``) clipped to the box, the
        quadratic models' active sets warm-started from the last call's.  With a last call,
        its answer moved to first order (:meth:`_predicted`) first takes Newton steps on the
        last active sets (:meth:`_held_newton`); the nodes whose point then meets the true KKT
        conditions (:meth:`_true_kkt`) are done.  The others take the general steps
        (:meth:`_general_steps`): each solves the quadratic model exactly
        (:func:`composite_active_set_prox`), stops the nodes whose answer meets the true KKT
        conditions and moves the others along ``zhat - z`` with Armijo backtracking on the true
        objective; the nodes left take :meth:`cvxpy_prox`."""
        k = self.ms.size
        mu = 2.0 * self.l2 + 1.0 / tau
        g = V / tau[:, None]
        pad = self._padded()
        start = self.__dict__.get("_dual_start")
        if start is not None and start[0].shape[0] != k:
            start = None
        Z = np.clip(self._predicted(mu, g, start, pad) if start is not None else
                    V if W0 is None else np.asarray(W0, dtype=float), *self.box)
        done = np.zeros(k, dtype=bool)
        H = None
        if start is not None:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                H = self._held_newton(Z, mu, g, start, pad, done)
        if not done.all():
            start, H = self._general_steps(Z, mu, g, start, pad, done, H)
        self.__dict__["_dual_start"] = start
        self.__dict__["_last"] = {"mu": mu, "g": g, "Z": Z.copy(), "H": H}
        bad = np.flatnonzero(~done)
        if bad.size:
            self.fallbacks += int(bad.size)
            Z[bad] = np.array([self.cvxpy_prox(int(j), V[j], float(tau[j])) for j in bad])
        return Z

    def _general_steps(self, Z: np.ndarray, mu: np.ndarray, g: np.ndarray,
                       start: tuple[np.ndarray, ...] | None, pad: dict[str, np.ndarray],
                       done: np.ndarray, H: np.ndarray | None
                       ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """:meth:`_prox`'s proximal Newton steps for the nodes ``S`` not ``done`` (``Z`` and
        ``done`` updated in place), on compact arrays of ``S`` and their rows only: returns
        the active sets and duals for the next call's start and the data part of the Hessians
        ``X^T diag(c ell'') X`` (those of ``H`` for the nodes done before, else of each node's
        last quadratic model)."""
        k = self.ms.size
        S = np.flatnonzero(~done)
        sx: np.ndarray | slice = S if S.size < k else slice(None)
        um, rw = self._unit_map(pad), self._rows_of(S)
        rows: dict[str, Any] = {key: pad[key][sx] for key in ("cs", "cq", "lo", "hi", "fixed")}
        P = pad["P"][sx].copy()
        Zc, muc, gc, l1c = Z[S], mu[sx], g[sx], self.l1[sx]
        st: Any = None if start is None else tuple(s[sx] for s in start)  # (copies: S < k)
        n = S.size
        fin = np.zeros(n, dtype=bool)
        act = np.arange(n)
        for _ in range(self.max_outer):
            ix = act if act.size < n else slice(None)
            gt, d1 = self._model_rows(rw, P, Zc, gc)
            # the model's own KKT check is not needed: the true one below certifies
            Zh, _, new = composite_active_set_prox(
                P[ix], **{key: val[ix] for key, val in rows.items()}, mu=muc[ix], g=gt[ix],
                Z0=Zc[ix], coord=pad["coord"], start=None if st is None else
                tuple(s[ix] for s in st), check=False)
            if st is None:
                st = tuple(np.array(s) for s in new)
            else:
                for full, part in zip(st, new, strict=True):
                    full[ix] = part
            Znew = Zc.copy()
            Znew[ix] = Zh
            # the model's error at zhat is O(|zhat - z|^2): after a long step the true
            # KKT check cannot pass (skipping it only defers a node to the next step)
            near = np.abs(Zh - Zc[ix]).max(axis=1) <= 1e-4 * (1.0 + np.abs(Zh).max(axis=1))
            cert = np.zeros(n, dtype=bool)
            if near.any():
                cert[act[near]] = self._certified_at(um, rw, act[near], S, Znew, st[1], muc, gc)
            Zc[cert] = Znew[cert]
            fin |= cert
            act = act[~cert[act]]
            if act.size == 0:
                break
            act = self._line_search(rw, act, Zc, Znew, d1, muc, gc, l1c)
            if act.size == 0:
                break
        Z[S], done[S] = Zc, fin
        if start is None or S.size == k:
            start = st
        else:
            for full, part in zip(start, st, strict=True):
                full[S] = part
        Pm = P[:, pad["coord"] < 0]
        Hm = np.einsum("krd,kre->kde", Pm, Pm)
        if H is None or S.size == k:
            return start, Hm
        H = H.copy()
        H[S] = Hm
        return start, H

    def _certified_at(self, um: dict[str, Any], rw: dict[str, Any], sel: np.ndarray,
                      S: np.ndarray, Z: np.ndarray, a: np.ndarray, mu: np.ndarray,
                      g: np.ndarray) -> np.ndarray:
        """:meth:`_true_kkt` of the compact nodes ``sel`` (positions in ``S``, ``rw``'s nodes)
        at ``Z[sel]`` with the unit rows' duals of ``a[sel]`` (the quadratic model's)."""
        keep = np.zeros(S.size, dtype=bool)
        keep[sel] = True
        sub = rw if keep.all() else self._kept_rows(rw, keep)
        Zs = Z[sel]
        d1 = self.cls._ell_d1(self._at(sub, Zs), sub["y"], sub["p"])
        return self._true_kkt(um, S[sel], Zs, a[sel][:, um["U"]],
                              self._sum(sub, d1[:, None] * sub["cX"]),
                              self._sum(sub, np.abs(d1)[:, None] * sub["acX"]), mu[sel], g[sel])

    def _predicted(self, mu: np.ndarray, g: np.ndarray, start: tuple[np.ndarray, ...],
                   pad: dict[str, np.ndarray]) -> np.ndarray:
        """A start for the call at ``g``: the last call's answer moved to first order, ``dz =
        (H_FF)^{-1} (g - g_last)_F`` on the coordinates ``F`` that no free ``l1`` or bound row
        fixes (last active sets ``start``), ``H = X^T diag(c ell'') X + mu I`` with the last
        call's data part (Algorithm 1's next point is near: the Newton steps from there are
        fewer; the stop is the same)."""
        last = self.__dict__.get("_last")
        if last is None or not np.array_equal(last["mu"], mu) or last["g"].shape != g.shape:
            return last["Z"] if last is not None and last["Z"].shape == g.shape else g / mu[:, None]
        um = self._unit_map(pad)
        fr = ((start[0][:, um["U"]] == 0) & ~um["fixed"]) @ um["Ef"] == 0
        dz = self._reduced_solve(last["H"], mu, fr, g - last["g"])
        return last["Z"] + dz

    def _unit_map(self, pad: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The ``l1`` and box rows of :meth:`_padded` (cached): their indices ``U``, the
        one-hot ``Ef`` ``(|U|, d)`` of their coordinates (float), their ``s`` (``z_j`` where
        such a row is free), dual intervals ``lo``, ``hi`` (and where those are infinite) and
        padding."""
        um = self.__dict__.get("_units")
        if um is None:
            U = np.flatnonzero(pad["coord"] >= 0)
            lo, hi = pad["lo"][:, U], pad["hi"][:, U]
            um = self.__dict__["_units"] = {
                "U": U, "Ef": (pad["coord"][U][:, None] == np.arange(self.d)).astype(float),
                "coord": pad["coord"][U], "s": pad["cs"][:, U], "fixed": pad["fixed"][:, U],
                "lo": lo, "hi": hi, "inf_lo": np.isinf(lo), "inf_hi": np.isinf(hi)}
        return um

    def _row_products(self) -> dict[str, np.ndarray]:
        """``c_r x_r`` ``(M, d)``, ``|c_r x_r|``, ``c_r x_r x_r^T`` ``(M, d, d)`` and each
        sample row's slot in :meth:`_padded` (cached)."""
        rp = self.__dict__.get("_row_products_cache")
        if rp is None:
            cX = self.c[:, None] * self.Xs
            rp = self.__dict__["_row_products_cache"] = {
                "cX": cX, "acX": np.abs(cX), "cXX": cX[:, :, None] * self.Xs[:, None, :],
                "slot": self._slot()}
        return rp

    @staticmethod
    def _reduced_solve(Hd: np.ndarray, mu: np.ndarray, free: np.ndarray, rhs: np.ndarray
                       ) -> np.ndarray:
        """``dz`` with ``(Hd + mu I)_FF dz_F = rhs_F`` and ``dz = 0`` off ``F`` (``free``,
        ``(k, d)``), for every node at once (:func:`spd_solve`)."""
        d = Hd.shape[1]
        H = Hd + mu[:, None, None] * np.eye(d)
        H = np.where(free[:, :, None] & free[:, None, :], H, np.eye(d))
        return spd_solve(H, np.where(free, rhs, 0.0))

    def _held_states(self, Z: np.ndarray, aU: np.ndarray, stU: np.ndarray,
                     pad: dict[str, np.ndarray], nodes: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
        """The ``l1`` and box rows' active sets (``stU``, duals ``aU``: those rows' columns of
        the nodes ``nodes``, compact) after a step of :meth:`_held_newton` that was not
        certified (a primal-dual active-set update): a free row whose dual left its interval
        is held at the bound it passed; any other row is held at the bound the sign of ``z_j
        - s_r`` points to (``z`` past a bound frees that bound's row: ``z_j`` is set there;
        past ``0`` the ``l1`` row's dual changes sign), and free where it is ``0`` or that bound
        is infinite.  Returns ``(states, duals)`` (held duals at their bounds)."""
        um = self._unit_map(pad)
        lo, hi, fixed = um["lo"][nodes], um["hi"][nodes], um["fixed"][nodes]
        free = (stU == 0) & ~fixed
        sU = np.sign(Z[:, um["coord"]] - um["s"][nodes])
        sU = np.where(free, np.where(aU > hi, 1, np.where(aU < lo, -1, 0)), sU)
        sU = np.where(((sU < 0) & um["inf_lo"][nodes]) | ((sU > 0) & um["inf_hi"][nodes]), 0,
                      sU)
        sU = np.where(fixed, -1, sU)
        aU = np.where(fixed, 0.0, np.where(sU < 0, lo, np.where(sU > 0, hi, aU)))
        return sU.astype(stU.dtype), aU

    def _held_sets(self, um: dict[str, Any], nodes: np.ndarray | slice, stU: np.ndarray,
                   aU: np.ndarray) -> dict[str, np.ndarray]:
        """What the held active sets ``stU`` (duals ``aU``) of the ``l1`` and box rows fix for
        ``nodes``: the free rows (``free``), how many fix each coordinate (``nfix``; a free row
        fixes ``z_j = s_r``), the fixed coordinates (``fixc``) and their values (``zfix``), and
        the held rows' duals summed per coordinate (``held``)."""
        free = (stU == 0) & ~um["fixed"][nodes]
        E = um["Ef"]
        nfix = free @ E
        return {"free": free, "nfix": nfix, "fixc": nfix > 0,
                "zfix": np.where(free, um["s"][nodes], 0.0) @ E,
                "held": np.where(free | um["fixed"][nodes], 0.0, aU) @ E}

    def _held_newton(self, Z: np.ndarray, mu: np.ndarray, g: np.ndarray,
                     start: tuple[np.ndarray, ...], pad: dict[str, np.ndarray],
                     done: np.ndarray) -> np.ndarray:
        """Up to ``held_steps`` Newton steps on PU (32) with the ``l1`` and box rows' last
        active sets held (``start``), on compact arrays of the nodes not yet certified: a free
        such row fixes ``z_j = s_r`` (``0`` or the bound, :meth:`_held_sets`), a held one adds
        its dual (``+-eta``, ``0``) to the gradient; on the other coordinates ``F``, ``(H_FF)
        dz_F = -grad_F`` with ``H = X^T diag(c ell'') X + mu I`` at ``z``.  After a step the
        rows' ``ell'`` and ``ell''`` are evaluated once at the new point: the free rows' duals
        are the stationarity residual on their coordinates, the point is certified by the true
        KKT conditions (:meth:`_true_kkt`; a node with two free rows on one coordinate is
        not), and for the nodes left the held sets are updated (:meth:`_held_states`) and the
        next step's gradient and Hessian come from the same evaluation (re-evaluated only at
        the nodes where a newly fixed coordinate moved ``z``).  A wrong active set or an
        unconverged step is only a node left for the general steps.  Certified nodes get
        their ``Z``, ``done`` and ``start`` (states and duals, the data rows' duals
        ``ell'(x_r^T z)``) in place.  Returns ``X^T diag(c ell'') X`` per node at the start of
        its last step (the next call's :meth:`_predicted`)."""
        um = self._unit_map(pad)
        U = um["U"]
        k, d = Z.shape
        H = np.zeros((k, d, d))
        nodes = np.arange(k)
        rw = self._rows_of(nodes)
        stU, aU = start[0][:, U], start[1][:, U]
        Zs, mu_s, g_s = Z, mu, g
        d1: Any = None
        d2: Any = None
        for step in range(self.held_steps):
            ix = nodes if nodes.size < k else slice(None)
            hs = self._held_sets(um, ix, stU, aU)
            Zn = np.where(hs["fixc"], hs["zfix"], Zs)
            if d1 is None:
                d1, d2 = self._derivs(rw, Zn)
            else:  # the last step's evaluation, except where a newly fixed coordinate moved z
                moved = (Zn != Zs).any(axis=1)
                if moved.any():
                    sub = self._kept_rows(rw, moved)
                    rm = moved[rw["loc"]]
                    d1[rm], d2[rm] = self._derivs(sub, Zn[moved])
            Hd = self._sum(rw, d2[:, None, None] * rw["cXX"])
            H[ix] = Hd
            grad = self._sum(rw, d1[:, None] * rw["cX"]) + mu_s[:, None] * Zn - g_s + hs["held"]
            Zs = Zn + self._reduced_solve(Hd, mu_s, ~hs["fixc"], -grad)
            d1, d2 = self._derivs(rw, Zs)
            G1 = self._sum(rw, d1[:, None] * rw["cX"])
            res = g_s - hs["held"] - mu_s[:, None] * Zs - G1
            aU = np.where(hs["free"], res[:, um["coord"]], aU)
            ok = (hs["nfix"] <= 1).all(axis=1) & self._true_kkt(
                um, ix, Zs, aU, G1, self._sum(rw, np.abs(d1)[:, None] * rw["acX"]), mu_s, g_s)
            if ok.any():
                self._write_certified(Z, start, nodes[ok], Zs[ok], stU[ok], aU[ok], rw,
                                      ok, d1, U)
                done[nodes[ok]] = True
            if ok.all() or step == self.held_steps - 1:
                break
            keep = ~ok
            nodes, Zs, stU, aU, mu_s, g_s = (x[keep] for x in (nodes, Zs, stU, aU, mu_s, g_s))
            rk = keep[rw["loc"]]
            d1, d2 = d1[rk], d2[rk]
            rw = self._kept_rows(rw, keep)
            stU, aU = self._held_states(Zs, aU, stU, pad, nodes)
        return H

    @staticmethod
    def _write_certified(Z: np.ndarray, start: tuple[np.ndarray, ...], nodes: np.ndarray,
                         Zc: np.ndarray, stU: np.ndarray, aU: np.ndarray, rw: dict[str, Any],
                         ok: np.ndarray, d1: np.ndarray, U: np.ndarray) -> None:
        """Writes the certified ``nodes``' points ``Zc``, their ``l1``/box rows' states and
        duals and their data rows' duals ``d1`` (the rows of ``rw`` whose node is ``ok``) into
        ``Z`` and ``start`` (in place)."""
        Z[nodes] = Zc
        cols = slice(U[0], U[-1] + 1) if U[-1] - U[0] + 1 == U.size else U  # (usually a tail)
        for full, part in zip(start, (stU, aU), strict=False):
            if isinstance(cols, slice):
                full[nodes, cols] = part
            else:
                full[nodes[:, None], cols] = part
        rm = ok[rw["loc"]]
        start[1][rw["node"][rm], rw["slot"][rm]] = d1[rm]

    def _line_search(self, rw: dict[str, Any], act: np.ndarray, Z: np.ndarray,
                     Znew: np.ndarray, d1: np.ndarray, mu: np.ndarray, g: np.ndarray,
                     l1: np.ndarray) -> np.ndarray:
        """Moves ``Z[act]`` along ``Znew - Z`` (in place; ``rw``'s nodes, compact) by Armijo
        backtracking on the true objective (:meth:`_objective`): the largest ``s = 2^-j`` with
        ``F(z + s dz) <= F(z) + s D / 4 + 1e-13 (1 + |F|)``, ``D = grad f^T dz + eta
        (||zhat||_1 - ||z||_1)``; returns the nodes that moved (a node that cannot is left for
        the CVXPY path)."""
        dz = Znew - Z
        grad = self._sum(rw, (rw["c"] * d1)[:, None] * rw["Xs"]) + mu[:, None] * Z - g
        D = ((grad * dz).sum(axis=1) + l1 * (np.abs(Znew).sum(axis=1) - np.abs(Z).sum(axis=1)))
        F0 = self._objective(rw, Z, mu, g, l1)
        step = np.zeros(Z.shape[0])
        todo = act.copy()
        s = 1.0
        for _ in range(40):
            Ft = self._objective(rw, Z + s * dz, mu, g, l1)
            good = Ft[todo] <= F0[todo] + 0.25 * s * D[todo] + 1e-13 * (1.0 + np.abs(F0[todo]))
            step[todo[good]] = s
            todo = todo[~good]
            if todo.size == 0:
                break
            s *= 0.5
        moved = act[step[act] > 0]
        Z[moved] += step[moved, None] * dz[moved]
        return moved
