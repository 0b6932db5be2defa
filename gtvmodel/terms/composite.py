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
:mod:`gtvmodel.kernels.steps` (its systems, affine and trust-region ball steps) and
:mod:`gtvmodel.kernels.composite_newton` (the proximal Newton method); this module builds their
rows from the losses and constraints.
"""

from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np

from .. import _compiled
from .._solver import run_solver
from ..errors import SolverError
from ..kernels import composite as composite_kernels
from ..kernels.composite import KKT_RTOL, composite_active_set_prox, kkt_certified, states_at
from ..kernels.composite_newton import (
    CompositeNewton,
    composite_prox_newton,
    predicted_start,
    unit_rows,
)
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

    #: The largest dimension ``d`` at which a 1-norm ball of linear data rows enters the rows
    #: as its ``2^d`` halfspaces (:meth:`_ball1_as_halfspaces`; read once, by :meth:`_padded`).
    halfspace_max_d = 2

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
        rows (``max_i m_i`` slots), then ``d`` ``l1`` rows if any ``eta_i > 0`` or a 1-norm
        ball (its multiplier widens their intervals), ``d`` upper and ``d`` lower box rows if
        any bound is finite; for linear data rows (:meth:`_ball1_as_halfspaces`) a 1-norm ball
        is instead its ``2^d`` rows ``sigma^T z <= r_i``."""
        pad = self.__dict__.get("_pad")
        if pad is not None:
            return pad
        k, m, d = self.ms.size, self.max_rows(), self.d
        data = self._data_block()
        blocks, coords, l1rows = [data], [np.full(m, -1)], [np.zeros(m, dtype=bool)]
        eta = self.l1[:, None] * np.ones((1, d))
        lo_b, hi_b = self.box
        zero = np.zeros((k, d))
        halfspaces = self._ball1_as_halfspaces(data)
        ball1 = np.isfinite(self.radius1)[:, None] * np.ones((1, d), dtype=bool) \
            & (not halfspaces)
        if (eta > 0).any() or ball1.any():  # eta |z_j| = max_{|a| <= eta} a z_j (with a
            # 1-norm ball: eta + nu1, nu1 its multiplier)
            blocks.append(_unit_rows(zero, -eta, eta, (eta == 0) & ~ball1))
            coords.append(np.arange(d))
            l1rows.append(np.ones(d, dtype=bool))
        if np.isfinite(hi_b).any():  # z_j <= hi_j: a >= 0, s = hi_j
            fin = np.isfinite(hi_b)
            blocks.append(_unit_rows(np.where(fin, hi_b, 0.0), zero, np.where(fin, np.inf, 0.0),
                                     ~fin))
            coords.append(np.arange(d))
            l1rows.append(np.zeros(d, dtype=bool))
        if np.isfinite(lo_b).any():  # z_j >= lo_j: a <= 0, s = lo_j
            fin = np.isfinite(lo_b)
            blocks.append(_unit_rows(np.where(fin, lo_b, 0.0), np.where(fin, -np.inf, 0.0), zero,
                                     ~fin))
            coords.append(np.arange(d))
            l1rows.append(np.zeros(d, dtype=bool))
        if halfspaces:  # ||z||_1 <= r: the rows sigma^T z <= r, a >= 0, s = r
            blocks.append(_halfspace_rows(self.radius1, d))
            coords.append(np.full(2**d, -1))
            l1rows.append(np.zeros(2**d, dtype=bool))
        pad = {name: np.concatenate([b[name] for b in blocks], axis=1) for name in data}
        pad["coord"] = np.concatenate(coords)
        pad["l1row"] = np.concatenate(l1rows)
        self.__dict__["_pad"] = pad
        self.__dict__["_balls"] = (self._balls[0], None if halfspaces else self._balls[1])
        self.__dict__["_halfspaces"] = halfspaces
        return pad

    def _exact_vertices(self, Z: np.ndarray, state: np.ndarray, fixed: np.ndarray,
                        idx: np.ndarray | slice = slice(None)) -> None:
        """With the 1-norm balls as halfspace rows (:meth:`_ball1_as_halfspaces`), in place on
        the answers ``Z`` of the nodes ``idx``: ``z_j = 0.0`` exactly where two free rows
        ``sigma^T z = r`` differ in coordinate ``j`` alone (their difference is ``2 sigma_j
        z_j = 0``; the pseudo-inverse's answer is ``0`` to rounding), as free ``l1`` rows set
        their coordinates, and ``z`` scaled into its ball where ``||z||_1`` exceeds ``r`` (by
        the KKT check's tolerance at most, ``1e-11`` relative: the rows' equations hold to
        it, not to rounding) (``state``, ``fixed``: the rows' final active sets and
        padding)."""
        if not self.__dict__.get("_halfspaces"):
            return
        d, rows = self.d, np.arange(2**self.d)
        # each node's free rows as the bits of one code; per coordinate, the codes that hold
        # a pair of free rows differing in it alone
        code = ((state[:, -2**d:] == 0) & ~fixed[:, -2**d:]) @ (1 << rows)
        codes = np.arange(2 ** 2**d)
        for j in range(d):
            pair = (((codes[:, None] >> rows) & (codes[:, None] >> (rows ^ (1 << j)))) & 1
                    ).any(axis=1)
            Z[pair[code], j] = 0.0
        n1, r1 = np.abs(Z).sum(axis=1), self.radius1[idx]
        out = np.flatnonzero(n1 > r1)
        if out.size:
            Z[out] *= (r1[out] / n1[out])[:, None]

    def _ball1_as_halfspaces(self, data: dict[str, np.ndarray]) -> bool:
        """Whether the nodes' 1-norm balls enter :meth:`_padded` as ``2^d`` linear rows
        ``sigma^T z <= r_i`` (``sigma`` in ``{-1, 1}^d``; the same feasible set, so the same
        minimizer) instead of the ``l1`` rows' widened intervals: where there is a ball,
        every data row is linear (``q = 0``: hinge, absolute), no node has ``l1`` or a
        finite bound, ``d <= halfspace_max_d`` and the steps are compiled (numba, and
        ``COMPILED_MIN_NODES`` nodes or more).  Then every row is linear and the steps are
        those of :func:`~gtvmodel.kernels.nodebox.box_dual_pass` node by node, where the
        multiplier's numpy steps took about four steps per call of Algorithm 1.  Measured on
        300 random 4-node batches of hinge and absolute rows (d 1-3, condition to 1e5,
        ``tau`` 1e-4..1e4): node updates left to CVXPY, multiplier 211 of 1,200, halfspaces
        compiled 53, halfspaces by the numpy steps 249 (so not there).  Up to ``d = 2``
        only: there each vertex of the ball is where two independent rows meet; in ``d =
        3`` four rows meet at a vertex (dependent equations, the duals not unique), and a
        40-node hinge batch at condition 1e2 left 5 of 160 node updates to CVXPY against
        the multiplier's 2.  (With ``l1`` or bounds, a vertex on an axis makes three rows'
        equations dependent in ``d = 2``: the active sets then failed the KKT check on
        hundreds of node updates of a 200-node run, where the multiplier's steps had
        none.)"""
        return bool(np.isfinite(self.radius1).any() and self.d <= self.halfspace_max_d
                    and not data["cq"][~data["fixed"]].any() and not (self.l1 > 0).any()
                    and not any(np.isfinite(b).any() for b in self.box)
                    and self.ms.size >= composite_kernels.COMPILED_MIN_NODES
                    and _compiled.available())

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
        pad = self._padded()
        radius, radius1 = self._balls  # (after _padded: the 1-norm balls may be its rows)
        Z, ok, self.__dict__["_dual_start"] = composite_active_set_prox(
            **pad, mu=mu, g=V / tau[:, None], Z0=Z, start=start, radius=radius,
            radius1=radius1, cache=self.__dict__.setdefault("_system_cache", {}))
        self._exact_vertices(Z, self.__dict__["_dual_start"][0], pad["fixed"])
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
        self._exact_vertices(Zp, new[0], rows["fixed"], idx)
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


def _halfspace_rows(radius1: np.ndarray, d: int) -> dict[str, np.ndarray]:
    """The ``2^d`` rows ``sigma^T z <= r_i`` (``sigma`` in ``{-1, 1}^d``; ``c = 1``, ``q =
    0``, ``s = r_i``, dual interval ``[0, inf)``) of the 1-norm balls ``||z||_1 <= r_i``
    (``radius1`` ``(k,)``; padding where infinite)."""
    k = radius1.shape[0]
    signs = 1.0 - 2.0 * ((np.arange(2**d)[:, None] >> np.arange(d)) & 1)  # (2^d, d)
    fixed = np.broadcast_to(~np.isfinite(radius1)[:, None], (k, 2**d)).copy()
    r = np.where(fixed, 0.0, radius1[:, None])
    return {"P": signs[None, :, :] * ~fixed[:, :, None], "cs": r, "cq": np.zeros((k, 2**d)),
            "lo": np.zeros((k, 2**d)), "hi": np.where(fixed, 0.0, np.inf), "fixed": fixed}


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
    a proximal Newton method (:meth:`_prox`, the solver
    :func:`~gtvmodel.kernels.composite_newton.composite_prox_newton`).  At ``z_k`` the smooth
    part ``f(z) = sum_r c_r ell(x_r^T z) + mu ||z||^2 / 2 - g^T z`` is replaced by its
    quadratic model (Hessian ``X^T diag(c ell'') X + mu I``), which with the ``l1`` and box
    rows is the problem of :func:`composite_active_set_prox` (data rows ``sqrt(c_r ell''_r)
    x_r`` with ``ell*(a) = a^2 / 2``), solved exactly; a backtracking line search on the true
    objective follows (vectorized over nodes).  A node stops when its point meets the KKT
    conditions of the true problem (:func:`kkt_certified`, the data rows' duals ``ell'(x_r^T
    z)`` held) at ``KKT_RTOL``; nodes that do not within ``max_outer`` steps take one CVXPY
    solve (counted in :attr:`fallbacks`).  A warm call first takes up to ``held_steps``
    Newton steps on the last call's active sets, certified the same way.  This class builds
    the rows (:meth:`_data_block`, :meth:`_row_data`) and keeps the state between calls."""

    #: Proximal Newton steps before a node takes the CVXPY path.
    max_outer = 40

    #: Newton steps on the last call's active sets, updated after each, before the general
    #: steps.
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
        on ``R``; the kernel sets their ``P`` at every step."""
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

    def _newton(self) -> CompositeNewton:
        """The arrays of :func:`~gtvmodel.kernels.composite_newton.composite_prox_newton` for
        this batch (the rows cached; ``max_outer`` and ``held_steps`` read at each call)."""
        pad = self._padded()
        um = self.__dict__.get("_units")
        if um is None:
            um = self.__dict__["_units"] = unit_rows(pad, self.d)
        return CompositeNewton(self.cls, self._row_data(), pad, um, self.l1,
                               max_outer=self.max_outer, held_steps=self.held_steps)

    def _row_data(self) -> dict[str, Any]:
        """The sample rows of :class:`~gtvmodel.kernels.composite_newton.CompositeNewton`
        (cached): ``Xs``, ``y``, ``p``, ``c``, ``c_r x_r`` ``(M, d)``, ``|c_r x_r|``, ``c_r x_r
        x_r^T`` ``(M, d, d)``, each row's node and slot in :meth:`_padded`, the nodes' row
        counts and first rows."""
        rp = self.__dict__.get("_row_products_cache")
        if rp is None:
            cX = self.c[:, None] * self.Xs
            rp = self.__dict__["_row_products_cache"] = {
                "Xs": self.Xs, "y": self.y, "p": self.p, "c": self.c, "cX": cX,
                "acX": np.abs(cX), "cXX": cX[:, :, None] * self.Xs[:, None, :],
                "slot": self._slot(), "local": self.local, "starts": self.starts, "ms": self.ms}
        return rp

    def _prox(self, V: np.ndarray, tau: np.ndarray, W0: np.ndarray | None) -> np.ndarray:
        """Proximal Newton on ``L_i(z) + eta_i ||z||_1 + kappa_i ||z||^2 + iota_{box_i}(z) +
        ||z - v_i||^2 / (2 tau_i)``
        (:func:`~gtvmodel.kernels.composite_newton.composite_prox_newton`), from ``W0`` (else
        ``v_i``) clipped to the box, the quadratic models' active sets warm-started from the
        last call's; with a last call, from its answer moved to first order
        (:func:`~gtvmodel.kernels.composite_newton.predicted_start`).  The nodes whose point
        does not meet the true KKT conditions take :meth:`cvxpy_prox`."""
        k = self.ms.size
        mu = 2.0 * self.l2 + 1.0 / tau
        g = V / tau[:, None]
        pb = self._newton()
        start = self.__dict__.get("_dual_start")
        if start is not None and start[0].shape[0] != k:
            start = None
        Z = np.clip(predicted_start(pb, self.__dict__.get("_last"), mu, g, start)
                    if start is not None else
                    V if W0 is None else np.asarray(W0, dtype=float), *self.box)
        done, start, H = composite_prox_newton(pb, Z, mu, g, start)
        self.__dict__["_dual_start"] = start
        self.__dict__["_last"] = {"mu": mu, "g": g, "Z": Z.copy(), "H": H}
        bad = np.flatnonzero(~done)
        if bad.size:
            self.fallbacks += int(bad.size)
            Z[bad] = np.array([self.cvxpy_prox(int(j), V[j], float(tau[j])) for j in bad])
        return Z
