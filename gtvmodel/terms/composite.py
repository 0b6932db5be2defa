"""Exact batched node updates PU (32) of piecewise-quadratic data fits with ``l1`` and box
constraints (issue 16 item 3).

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
in :attr:`CompositeProxBatch.fallbacks`).  A Euclidean ball ``||z||_2 <= r_i`` that binds is
met by its multiplier ``nu > 0``: ``z(nu)``, the same problem with ``mu + nu``, has ``||z(nu)||``
decreasing in ``nu``, and a safeguarded secant search finds ``||z(nu)|| = r``
(:meth:`CompositeProxBatch._ball_search`).  This generalizes
:func:`~gtvmodel.terms.losses.dual_active_set_prox` (``q = 0``, no regularizer or constraint
rows) to quadratic row conjugates.
"""

from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np

from .._solver import run_solver
from ..errors import SolverError
from .losses import (
    DataFitBatch,
    Loss,
    _box_active_set,
    _box_qp_projected_gradient,
    _most_violated_change,
)

__all__ = ["CompositeProxBatch", "composite_active_set_prox", "kkt_certified", "KKT_RTOL",
           "BALL_RTOL"]

#: Relative KKT residual below which :func:`composite_active_set_prox` certifies a node's
#: answer exact (stationarity in ``z`` and the sign conditions of every row dual, relative to
#: the magnitudes of the terms they sum); a node above it takes the CVXPY path.
KKT_RTOL = 1e-11


def composite_active_set_prox(P: np.ndarray, cs: np.ndarray, cq: np.ndarray, lo: np.ndarray,
                              hi: np.ndarray, fixed: np.ndarray, mu: np.ndarray, g: np.ndarray,
                              Z0: np.ndarray, *, coord: np.ndarray | None = None,
                              start: tuple[np.ndarray, np.ndarray] | None = None,
                              max_iter: int = 50, rtol: float = 1e-13
                              ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Exact ``argmin_z sum_r c_r ell_r(x_r^T z) + mu_i ||z||^2 / 2 - g_i^T z`` for ``k`` nodes,
    rows with ``ell_r*(a) = s_r a + q_r a^2 / 2`` on ``[lo_r, hi_r]`` (the ``l1`` and box rows
    of the module docstring included).

    The row duals solve ``min_a (1/2) a^T (P P^T / mu + diag(c q)) a - (P g / mu - c s)^T a``
    over the box, with ``P_r = c_r x_r`` and gradient ``grad_r = c_r (s_r + q_r a_r) - P_r^T
    z``.  Primal-dual active-set steps (a semismooth Newton method): a row is held at ``lo``
    (state ``-1``) or ``hi`` (``+1``) or free (``0``) by where its trial point ``a_r - grad_r /
    Q_rr`` lies.  With the held duals fixed, a free row with ``q_r > 0`` has ``a_r = (P_r^T z -
    c_r s_r) / (c_r q_r)`` and adds ``P_r P_r^T / (c_r q_r)`` to the curvature ``H = mu I +
    ...``; a free row with ``q_r = 0`` is the equation ``P_r^T z = c_r s_r``.  So ``z`` is the
    minimizer of ``z^T H z / 2 - f^T z`` on the affine set of the free linear rows: with ``H =
    L L^T`` (Cholesky), ``u = L^T z`` is the projection of ``L^{-1} f`` onto ``{(P_L L^{-T}) u =
    c s_L}`` by one pseudo-inverse (least squares where the rows are inconsistent), and the
    linear rows' duals are the solution of ``P_L^T a_L = f - H z`` nearest the previous ones;
    free unit rows (``coord``) are not in the pseudo-inverse: they fix their coordinates, the
    other coordinates are solved for, and their duals are the stationarity residual there.
    A node stops when its active set repeats; after ``6`` steps only the most violated row of a
    node changes per step; a node still cycling after ``max_iter`` steps restarts once from
    projected gradients (:func:`~gtvmodel.terms.losses._box_qp_projected_gradient`).  Rows are
    padded: ``P`` ``(k, R, d)``, ``cs``/``cq``/``lo``/``hi``/``fixed`` ``(k, R)`` (``fixed``:
    padding, held at ``a = 0``, with ``lo = hi = 0``); ``coord`` ``(R,)`` names the coordinate
    ``j`` of the unit rows ``P_r = e_j`` (``-1`` for the others): where such a row is free,
    ``z_j = s_r`` is set exactly (an ``l1`` zero is ``0.0``, a bound is the bound).  Returns
    ``(Z, certified, (active set, a))``: ``certified`` is the KKT check :func:`kkt_certified`
    at ``KKT_RTOL``.
    """
    k, R, d = P.shape
    pnorm2 = np.einsum("krd,krd->kr", P, P)
    pnorm = np.sqrt(pnorm2)
    gamma = 1.0 / np.maximum(pnorm2 / mu[:, None] + cq, 1e-300)  # 1 / Q_rr
    eye = np.eye(d)
    Z = np.array(Z0, dtype=float)
    unit = np.flatnonzero(coord >= 0) if coord is not None else np.zeros(0, dtype=np.int64)
    data_row = np.ones(R, dtype=bool)
    data_row[unit] = False

    def tolerance(act: np.ndarray, Za: np.ndarray, a: np.ndarray) -> np.ndarray:
        return rtol * (np.abs(cs[act]) + cq[act] * np.abs(a)
                       + pnorm[act] * np.abs(Za).sum(axis=1)[:, None])

    def states(act: np.ndarray, a: np.ndarray, Za: np.ndarray, free: np.ndarray) -> np.ndarray:
        grad = cs[act] + cq[act] * a - np.einsum("krd,kd->kr", P[act], Za)
        new = _box_active_set(a, grad, gamma[act], lo[act], hi[act], fixed[act],
                              tolerance(act, Za, a), free)
        # a dual is never held at an infinite bound (that row stays free)
        return np.where(((new < 0) & np.isinf(lo[act])) | ((new > 0) & np.isinf(hi[act])),
                        0, new).astype(np.int8), grad

    if start is None:
        a_prev = np.where(fixed, 0.0, np.clip(0.0, lo, hi))
        state = states(np.arange(k), a_prev, Z, ~fixed)[0]
    else:
        state, a_prev = start[0].copy(), start[1].copy()

    def solve(act: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``z`` and the row duals ``a`` of the nodes ``act`` for their current active sets:
        free unit rows fix their coordinates (``z_j = s_r``, the first such row of ``j`` takes
        its dual), the other coordinates minimize ``z^T H z / 2 - f^T z`` on the affine set of
        the free linear data rows."""
        st, Pa, csa, cqa = state[act], P[act], cs[act], cq[act]
        n_act = act.size
        free = (st == 0) & ~fixed[act]
        freeq, freel = free & (cqa > 0), free & (cqa == 0)
        a_fix = np.where(st < 0, lo[act], np.where(st > 0, hi[act], 0.0))
        a_fix[free | fixed[act]] = 0.0
        wq = np.where(freeq, 1.0 / np.where(freeq, cqa, 1.0), 0.0)
        f = g[act] - (Pa.transpose(0, 2, 1) @ (a_fix - wq * csa)[:, :, None])[:, :, 0]
        # coordinates fixed by free unit rows (reversed: the first row of a coordinate wins)
        kk, uu = np.nonzero(freel[:, unit])
        kk, rows = kk[::-1], unit[uu[::-1]]
        fx = np.zeros((n_act, d), dtype=bool)
        zfix = np.zeros((n_act, d))
        owner = np.full((n_act, d), -1)
        fx[kk, coord[rows]] = True
        zfix[kk, coord[rows]] = csa[kk, rows]
        owner[kk, coord[rows]] = rows
        fr = ~fx
        H = mu[act, None, None] * eye
        if freeq.any():  # H = mu I + sum_{free q rows} P_r P_r^T / (c_r q_r)
            H = H + np.matmul((Pa * wq[:, :, None]).transpose(0, 2, 1), Pa)
        rhs = np.where(fr, f - (H @ zfix[:, :, None])[:, :, 0], zfix)
        Hr = np.where(fr[:, :, None] & fr[:, None, :], H, eye)  # identity on fixed coordinates
        if freeq.any():  # L^{-1} of Hr = L L^T
            Li = np.linalg.inv(np.linalg.cholesky(Hr))
        else:  # Hr is diagonal
            Li = eye / np.sqrt(np.diagonal(Hr, axis1=1, axis2=2))[:, :, None]
        u0 = (Li @ rhs[:, :, None])[:, :, 0]
        Za_free = None
        datal = freel & data_row
        F = int(datal.sum(axis=1).max(initial=0))
        if F:  # the free linear data rows first (pinv of (F, d) blocks) on free coordinates
            sel = np.argsort(~datal, axis=1, kind="stable")[:, :F]
            on = np.take_along_axis(datal, sel, axis=1)
            Pd = np.where(on[:, :, None], np.take_along_axis(Pa, sel[:, :, None], axis=1), 0.0)
            bd = np.where(on, np.take_along_axis(csa, sel, axis=1)
                          - (Pd @ zfix[:, :, None])[:, :, 0], 0.0)
            A = np.where(fr[:, None, :], Pd, 0.0) @ Li.transpose(0, 2, 1)  # P_D L^{-T}
            Ainv = np.linalg.pinv(A)
            u = u0 + (Ainv @ np.where(on, bd - (A @ u0[:, :, None])[:, :, 0], 0.0)[:, :, None]
                      )[:, :, 0]
            Za_free = (Li.transpose(0, 2, 1) @ u[:, :, None])[:, :, 0]
            a0 = np.where(on, np.take_along_axis(a_prev[act], sel, axis=1), 0.0)
            ad = a0 + ((u0 - u - (A.transpose(0, 2, 1) @ a0[:, :, None])[:, :, 0])[:, None, :]
                       @ Ainv)[:, 0, :]
        else:
            Za_free = (Li.transpose(0, 2, 1) @ u0[:, :, None])[:, :, 0]
        Za = np.where(fr, Za_free, zfix)
        a = np.where(freeq, wq * ((Pa @ Za[:, :, None])[:, :, 0] - csa), a_fix)
        if F:
            np.put_along_axis(a, sel, np.where(on, ad, np.take_along_axis(a, sel, axis=1)),
                              axis=1)
        if kk.size:  # the unit rows' duals: the stationarity residual on their coordinates
            res = f - (H @ Za[:, :, None])[:, :, 0]
            if F:
                res -= (Pd.transpose(0, 2, 1) @ np.where(on, ad, 0.0)[:, :, None])[:, :, 0]
            ki, ji = np.nonzero(fx)
            a[ki, owner[ki, ji]] = res[ki, ji]
        return Za, a

    def run(act: np.ndarray) -> np.ndarray:
        """Active-set steps on the nodes ``act``; returns those whose set has not repeated."""
        for it in range(max_iter):
            st = state[act]
            Za, a = solve(act)
            Z[act], a_prev[act] = Za, a
            new, grad = states(act, a, Za, st == 0)
            if it >= 6:  # a cycle is likely: change one row per node, the most violated
                new = _most_violated_change(st, new, a, grad, gamma[act], lo[act], hi[act],
                                            st == 0)
            same = (new == st).all(axis=1)
            state[act] = new
            act = act[~same]
            if act.size == 0:
                break
        return act

    with np.errstate(over="ignore", invalid="ignore"):
        left = run(np.arange(k))
        if left.size:  # cycling nodes: near the solution by projected gradients, then again
            Q = (np.einsum("krd,kqd->krq", P[left], P[left]) / mu[left, None, None]
                 + cq[left][:, :, None] * np.eye(R))
            b = np.einsum("krd,kd->kr", P[left], g[left]) / mu[left, None] - cs[left]
            a = _box_qp_projected_gradient(Q, b, lo[left], hi[left],
                                           np.clip(a_prev[left], lo[left], hi[left]))
            Za = (g[left] - np.einsum("krd,kr->kd", P[left], a)) / mu[left, None]
            a_prev[left] = a
            state[left] = states(left, a, Za, np.zeros(a.shape, dtype=bool))[0]
            run(left)
    ok = kkt_certified(P, cs, cq, lo, hi, fixed, mu, g, Z, a_prev)
    return Z, ok, (state, a_prev)


def kkt_certified(P: np.ndarray, cs: np.ndarray, cq: np.ndarray, lo: np.ndarray,
                  hi: np.ndarray, fixed: np.ndarray, mu: np.ndarray, g: np.ndarray,
                  Z: np.ndarray, a: np.ndarray, rtol: float = KKT_RTOL) -> np.ndarray:
    """Per node: whether ``(z, a)`` meets the KKT conditions of the problem of
    :func:`composite_active_set_prox` to ``rtol`` relative to the magnitudes of the terms:
    stationarity ``mu z - g + P^T a = 0``, every dual in its interval, and ``grad_r = c_r (s_r
    + q_r a_r) - P_r^T z`` at most 0 where ``a_r > lo_r`` and at least 0 where ``a_r < hi_r``
    (relative to ``|c_r s_r| + |c_r q_r a_r| + |P_r|^T (|mu z| + |g| + |P|^T |a|) / mu``); then
    ``z`` is the exact minimizer up to that residual over the modulus ``mu``."""
    with np.errstate(over="ignore", invalid="ignore"):
        a = np.where(fixed, 0.0, a)
        Pz = np.einsum("krd,kd->kr", P, Z)
        stat = np.abs(mu[:, None] * Z - g + np.einsum("krd,kr->kd", P, a))
        stat_scale = (np.abs(mu[:, None] * Z) + np.abs(g)
                      + np.einsum("krd,kr->kd", np.abs(P), np.abs(a)))
        grad = cs + cq * a - Pz
        # z's own scale is that of the terms it is computed from, (|g| + |P|^T |a|) / mu
        gscale = np.abs(cs) + cq * np.abs(a) + np.einsum("krd,kd->kr", np.abs(P),
                                                         stat_scale / mu[:, None])
        tol = rtol * gscale
        rows_ok = (fixed | ((a >= lo) & (a <= hi) & ((a <= lo) | (grad <= tol))
                            & ((a >= hi) | (grad >= -tol))))
        ok = (rows_ok.all(axis=1) & (stat <= rtol * stat_scale).all(axis=1)
              & np.isfinite(Z).all(axis=1) & np.isfinite(a).all(axis=1))
    return ok


class CompositeProxBatch(DataFitBatch):
    """Piecewise-quadratic data fits (:attr:`~gtvmodel.terms.losses.Loss.piecewise_quadratic`)
    with ``l1``, a coordinate box per node (``box = (lo, hi)``, ``(k, d)`` each, ``+-inf``
    where unbounded; None: no constraint) and a Euclidean ball ``||z||_2 <= radius_i``
    (``inf``: none): PU (32) exactly and vectorized by :func:`composite_active_set_prox`, its
    ``l1`` and box terms as extra rows, the ball by a root search on its multiplier
    (:meth:`_ball_search`).  A node whose answer fails the KKT check takes one CVXPY solve of
    its PU (32) instead (counted in :attr:`fallbacks`)."""

    def __init__(self, cls: type[Loss], nodes: np.ndarray, losses: Any, n: int, d: int,
                 box: tuple[np.ndarray, np.ndarray] | None = None,
                 radius: np.ndarray | None = None):
        super().__init__(cls, nodes, losses, n, d)
        k = self.ms.size
        if box is None:
            box = (np.full((k, d), -np.inf), np.full((k, d), np.inf))
        self.box = (np.broadcast_to(np.asarray(box[0], dtype=float), (k, d)),
                    np.broadcast_to(np.asarray(box[1], dtype=float), (k, d)))
        #: Radii of the nodes' Euclidean balls ``||z||_2 <= r_i`` (``inf``: none).
        self.radius = np.broadcast_to(np.asarray(np.inf if radius is None else radius,
                                                 dtype=float), (k,))
        #: Node updates that failed the KKT check and were solved by CVXPY instead.
        self.fallbacks = 0

    @property
    def kind(self) -> str:
        """``"<loss kind>-active-set"`` (the path's name in ``NodeUpdates.describe()``)."""
        return f"{self.cls.kind}-active-set"

    def prox_supported(self) -> np.ndarray:
        """Every node whose loss is piecewise quadratic (any ``l1``, ``l2``)."""
        return np.array([ls.piecewise_quadratic for ls in self.losses], dtype=bool)

    def _padded(self) -> dict[str, np.ndarray]:
        """The rows of :func:`composite_active_set_prox` padded per node (cached): the data
        rows (``max_i m_i`` slots), then ``d`` ``l1`` rows if any ``eta_i > 0``, ``d`` upper and
        ``d`` lower box rows if any bound is finite."""
        pad = self.__dict__.get("_pad")
        if pad is not None:
            return pad
        k, m, M, d = self.ms.size, self.max_rows(), self.Xs.shape[0], self.d
        slot = np.arange(M) - self.starts[self.local]
        conj = self.cls._ell_conj
        f0, f1, fm = (conj(np.full(M, t), self.y, self.p) for t in (0.0, 1.0, -1.0))
        lo_r, hi_r = (np.broadcast_to(np.asarray(b, dtype=float), (M,))
                      for b in self.cls._ell_conj_bounds(self.y, self.p))
        blocks = [{"P": np.zeros((k, m, d)), "cs": np.zeros((k, m)), "cq": np.zeros((k, m)),
                   "lo": np.zeros((k, m)), "hi": np.zeros((k, m)),
                   "fixed": np.ones((k, m), dtype=bool)}]
        data = blocks[0]
        data["P"][self.local, slot] = self.c[:, None] * self.Xs
        for name, rows in (("cs", self.c * 0.5 * (f1 - fm)), ("cq", self.c * (f1 + fm - 2 * f0)),
                           ("lo", lo_r), ("hi", hi_r)):
            data[name][self.local, slot] = rows
        data["fixed"][self.local, slot] = False
        eta = self.l1[:, None] * np.ones((1, d))
        lo_b, hi_b = self.box
        zero = np.zeros((k, d))
        if (eta > 0).any():  # eta |z_j| = max_{|a| <= eta} a z_j
            blocks.append(_unit_rows(zero, -eta, eta, eta == 0))
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
        self.__dict__["_pad"] = pad
        return pad

    def _prox(self, V, tau, W0):
        """:func:`composite_active_set_prox` on ``L_i(z) + eta_i ||z||_1 + kappa_i ||z||^2 +
        iota_{box_i}(z) + ||z - v_i||^2 / (2 tau_i)``, started from the last call's active set
        (Algorithm 1 changes it little), else from ``W0`` (else ``v_i``) clipped to the box;
        where the minimizer lies outside the node's ball, or the ball bound at the last call,
        :meth:`_ball_search`; nodes failing the KKT check take :meth:`cvxpy_prox`."""
        k = self.ms.size
        mu = 2.0 * self.l2 + 1.0 / tau
        Z = np.clip(V if W0 is None else np.asarray(W0, dtype=float), *self.box)
        g = V / tau[:, None]
        start = self.__dict__.get("_dual_start")
        if start is None or start[0].shape[0] != k:
            start, self.__dict__["_nu"] = None, np.zeros(k)
        hot = np.flatnonzero(self.__dict__["_nu"] > 0)
        cold = np.setdiff1d(np.arange(k), hot)
        ok = np.zeros(k, dtype=bool)
        if hot.size == 0:
            Z, ok, last = composite_active_set_prox(**self._padded(), mu=mu, g=g, Z0=Z,
                                                    start=start)
        else:  # nodes whose ball bound at the last call go straight to its multiplier search
            last = start
            Z[cold], ok[cold] = self._solve(cold, mu[cold], g[cold], Z[cold], last)
        self.__dict__["_dual_start"] = last
        out = cold[ok[cold] & (np.linalg.norm(Z[cold], axis=1) > self.radius[cold])]
        J = np.concatenate([hot, out])
        if J.size:  # the ball binds: its multiplier nu > 0 by a root search
            known = np.concatenate([np.zeros(hot.size, dtype=bool), np.ones(out.size, dtype=bool)])
            Z[J], ok[J] = self._ball_search(J, mu[J], g[J], Z[J], last, known)
        bad = np.flatnonzero(~ok)
        if bad.size:
            self.fallbacks += int(bad.size)
            Z[bad] = np.array([self.cvxpy_prox(int(j), V[j], float(tau[j])) for j in bad])
        return Z

    def _solve(self, J: np.ndarray, mu: np.ndarray, g: np.ndarray, Z0: np.ndarray,
               last: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """:func:`composite_active_set_prox` for the batch positions ``J`` (curvatures ``mu``)
        started from, and writing back, their rows of the active sets ``last``."""
        pad = self._padded()
        state, a_all = last
        Z, ok, (st, at) = composite_active_set_prox(
            **{name: arr[J] for name, arr in pad.items() if name != "coord"},
            coord=pad["coord"], mu=mu, g=g, Z0=Z0, start=(state[J], a_all[J]))
        state[J], a_all[J] = st, at
        return Z, ok

    def _ball_search(self, J: np.ndarray, m0: np.ndarray, g: np.ndarray, Z0: np.ndarray,
                     last: tuple[np.ndarray, np.ndarray], known: np.ndarray,
                     max_iter: int = 60) -> tuple[np.ndarray, np.ndarray]:
        """PU (32) of the nodes ``J`` whose ball ``||z||_2 <= r`` binds (``known``: their
        ``Z0 = z(0)`` lies outside it) or bound at the last call: ``z(nu)``, the composite prox
        with curvature ``mu + nu`` (the ball's multiplier added), with ``nu > 0`` such that
        ``||z(nu)|| = r`` (``||z(nu)||`` decreases in ``nu``), or ``nu = 0`` where ``z(0)`` is
        inside, by a safeguarded secant search (:func:`_ball_step`) vectorized over the nodes,
        started from the last call's multipliers and active sets.  Exact to the KKT check of
        each step and ``| ||z|| - r | <= BALL_RTOL r`` (then ``nu`` is the multiplier: the KKT
        conditions of PU (32) with the ball hold); returns ``(Z, certified)``."""
        r = self.radius[J]
        Z, ok = Z0.copy(), np.zeros(J.size, dtype=bool)
        nz = np.linalg.norm(Z0, axis=1)
        lo, hi = np.zeros(J.size), np.full(J.size, np.inf)
        with np.errstate(divide="ignore"):
            prev = (np.where(known, 0.0, np.nan), np.where(known, 1.0 / nz - 1.0 / r, np.nan))
        # the last call's multipliers start this one (Algorithm 1 changes them little), else
        # the step exact for z(nu) = b / (mu + nu)
        last_nu = self.__dict__["_nu"][J]
        nu = np.where(last_nu > 0, last_nu, np.maximum(m0 * (nz / r - 1.0), 0.0))
        zero_known = known.copy()  # whether z(0) is known to lie outside the ball
        act = np.arange(J.size)
        for _ in range(max_iter):
            Zt, okt = self._solve(J[act], m0[act] + nu[act], g[act], Z[act], last)
            Z[act] = Zt
            nzt = np.linalg.norm(Zt, axis=1)
            hit = okt & ((np.abs(nzt - r[act]) <= BALL_RTOL * r[act])
                         | ((nu[act] == 0) & (nzt <= r[act])))
            ok[act[hit]] = True
            above = nzt > r[act]
            lo[act] = np.where(above, nu[act], lo[act])
            hi[act] = np.where(above, hi[act], nu[act])
            zero_known[act] |= above & (nu[act] == 0)
            step = _ball_step(nu[act], m0[act], nzt, r[act],
                              (prev[0][act], prev[1][act]), lo[act], hi[act],
                              ~zero_known[act])
            prev[0][act], prev[1][act] = nu[act], 1.0 / nzt - 1.0 / r[act]
            self.__dict__["_nu"][J[act]] = np.where(hit, nu[act], 0.0)
            nu[act] = step
            act = act[~hit & okt]
            if act.size == 0:
                break
        return Z, ok

    def cvxpy_prox(self, j: int, v: np.ndarray, tau: float) -> np.ndarray:
        """PU (32) of the batch's node ``j`` by one CVXPY solve (gtvmodel's accuracy defaults):
        its loss expression with the box and ball as constraints, the point projected back
        onto them."""
        loss, (lo, hi) = self.losses[j], (self.box[0][j], self.box[1][j])
        z = cp.Variable(self.d)
        cons = ([z[np.isfinite(lo)] >= lo[np.isfinite(lo)]] if np.isfinite(lo).any() else []) \
            + ([z[np.isfinite(hi)] <= hi[np.isfinite(hi)]] if np.isfinite(hi).any() else []) \
            + ([cp.norm(z, 2) <= self.radius[j]] if np.isfinite(self.radius[j]) else [])
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
        w *= min(1.0, self.radius[j] / max(float(np.linalg.norm(w)), 1e-300))
        return np.clip(w, lo, hi)


#: Relative accuracy of ``||z||_2 = r`` at which :meth:`CompositeProxBatch._ball_search` stops.
BALL_RTOL = 1e-13


def _ball_step(nu, m0, nz, r, prev, lo, hi, try_zero):
    """The next multiplier of the ball's root search on ``psi(nu) = 1/||z(nu)|| - 1/r``
    (increasing): the secant through the previous point where there is one, else the step
    exact when ``z(nu) = b / (mu + nu)`` (``nu' = (mu + nu) ||z|| / r - mu``); kept strictly
    inside the bracket ``(lo, hi)`` (else its midpoint, or ``4 lo + mu`` while ``hi = inf``),
    except that a step to ``nu <= 0`` tries ``nu = 0`` where ``try_zero`` (``z(0)`` not yet
    known to lie outside the ball: the ball may no longer bind)."""
    psi = 1.0 / nz - 1.0 / r
    nu_p, psi_p = prev
    with np.errstate(divide="ignore", invalid="ignore"):
        sec = nu - psi * (nu - nu_p) / (psi - psi_p)
    cand = np.where(np.isfinite(sec) & (psi != psi_p), sec, (m0 + nu) * nz / r - m0)
    inside = (cand > lo) & (cand < hi)
    mid = np.where(np.isfinite(hi), 0.5 * (lo + hi), 4.0 * lo + m0)
    return np.where(inside, cand, np.where(try_zero & (cand <= lo), 0.0, mid))


def _unit_rows(s: np.ndarray, lo: np.ndarray, hi: np.ndarray, fixed: np.ndarray
               ) -> dict[str, np.ndarray]:
    """``d`` rows ``x = e_j`` per node (``c = 1``, ``q = 0``) with conjugate slope ``s``
    and dual interval ``[lo, hi]`` (``(k, d)`` each); ``fixed`` rows are padding."""
    k, d = s.shape
    return {"P": np.broadcast_to(np.eye(d), (k, d, d)) * ~fixed[:, :, None],
            "cs": np.where(fixed, 0.0, s), "cq": np.zeros((k, d)),
            "lo": np.where(fixed, 0.0, lo), "hi": np.where(fixed, 0.0, hi),
            "fixed": fixed.copy()}
