"""The library batches: zero, quadratic, sample and data-fit batches (damped Newton prox,
Newton conjugates), the piecewise-linear and squared batches.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, ClassVar

import cvxpy as cp
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ... import _compiled, _xp
from ..._cvx import bounds_constraints
from ...kernels.boxqp import dual_active_set_prox
from ...kernels.linalg import grouped_gram, write_sample_svd
from ...kernels.newton import (
    newton_conjugate_maximizers,
    newton_minimize,
    newton_predictor,
    take_rows,
)
from ...kernels.nodeqp import COMPILED_MIN_NODES, compiled_logistic_newton
from .base import _cvxpy_prox
from .batch import ConjugateGroup, LossBatch, NodePart, _check_lipschitz, scatter_rows
from .conjugates import (
    _soft,
    datafit_conjugate_split,
    quadratic_conjugate_cvx,
    quadratic_conjugate_rows,
    squared_maximizers,
    sum_rows_by,
)
from .datafit import DataFitLoss, _rows_sum_cvx
from .library import AbsoluteLoss, HingeLoss, LogisticLoss, SquaredLoss
from .operators import DenseOperator, SampleOperator, eig_inverse, sample_operator
from .simple import QuadraticLoss, ZeroLoss

_EPS = float(np.finfo(float).eps)


class ZeroBatch(LossBatch):
    """Zero losses (with regularizers): only the isotropic prox.  The loss is identically 0:
    no expression (None; the structure never compiles a zero-loss batch, its nodes carry no
    data), values and gradients 0, no samples."""

    array_api = True

    def expression(self, w_flat: cp.Expression, W: cp.Expression) -> cp.Expression | None:
        """None: ``L_i = 0`` has no term (the regularizers are compiled by the caller)."""
        return None

    def values(self, W: np.ndarray) -> np.ndarray:
        """``L_i = 0``: zeros, ``(n,)``."""
        return np.zeros(self.n)

    def gradients(self, W: np.ndarray) -> np.ndarray:
        """``grad L_i = 0``: zeros, ``(n, d)``."""
        return np.zeros((self.n, self.d))

    def max_rows(self) -> int:
        """0: no samples."""
        return 0

    def hessians(self, W: np.ndarray) -> np.ndarray | None:
        """0."""
        return np.zeros((self.nodes.size, self.d, self.d))

    def _prox(self, V: np.ndarray, tau: np.ndarray, W0: np.ndarray | None) -> np.ndarray:
        s = 1.0 + 2.0 * tau * self._on("l2", self.l2, V)
        return _soft(V / s[:, None], tau * self._on("l1", self.l1, V) / s)


class QuadraticBatch(LossBatch):
    """Convex clustering losses ``||w_i - a_i||^2``, centres stacked as ``a`` (``(k, d)``)."""

    array_api = True

    def __init__(self, cls: Any, nodes: np.ndarray, losses: Sequence[Any], n: int, d: int):
        super().__init__(cls, nodes, losses, n, d)
        self.a = np.vstack([ls.a for ls in self.losses])

    def max_rows(self) -> int:
        """0: no samples."""
        return 0

    def expression(self, w_flat: cp.Expression, W: cp.Expression) -> cp.Expression | None:
        """``sum_i ||w_i - a_i||^2`` over the batch's nodes as one CVXPY expression."""
        return cp.sum_squares(W[self.nodes, :] - self.a)

    def values(self, W: np.ndarray) -> np.ndarray:
        """``||w_i - a_i||^2`` at the batch's nodes, ``(n,)`` (0 elsewhere)."""
        out = np.zeros(self.n)
        out[self.nodes] = ((W[self.nodes] - self.a) ** 2).sum(axis=1)
        return out

    def gradients(self, W: np.ndarray) -> np.ndarray:
        """``2 (w_i - a_i)`` at the batch's nodes, ``(n, d)`` (0 elsewhere)."""
        out = np.zeros((self.n, self.d))
        out[self.nodes] = 2.0 * (W[self.nodes] - self.a)
        return out

    def hessian_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``H_lo = H_hi = 2 I`` for every node (``alpha_i = beta_i = 2``)."""
        H = np.broadcast_to(2.0 * np.eye(self.d), (self.nodes.size, self.d, self.d)).copy()
        return H, H.copy()

    def hessians(self, W: np.ndarray) -> np.ndarray | None:
        """``2 I`` for every node."""
        return self.hessian_bounds()[0]

    def sublevel_radii(self, level: np.ndarray) -> np.ndarray:
        """``||a||_inf + sqrt(level)`` on ``{||w - a||^2 <= level}``."""
        lv = np.maximum(np.asarray(level, dtype=float)[self.nodes], 0.0)
        return (np.abs(self.a).max(axis=1) + np.sqrt(lv)) * (1.0 + 1e-12)

    def _prox(self, V: np.ndarray, tau: np.ndarray, W0: np.ndarray | None) -> np.ndarray:
        """``soft((2 tau a + v) / s, tau eta / s)`` with ``s = 1 + 2 tau (1 + kappa)`` (any
        array namespace)."""
        s = 1.0 + 2.0 * tau * self._on("l2", self.l2, V) + 2.0 * tau
        return _soft((V + 2.0 * tau[:, None] * self._on("a", self.a, V)) / s[:, None],
                     tau * self._on("l1", self.l1, V) / s)

    def diagonal_quadratic(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``c = 1``, ``b = a``: ``||w - a||^2 = sum_j (w_j^2 - 2 a_j w_j) + ||a||^2``."""
        return np.ones_like(self.a), self.a

    def dual_part(self, inset: np.ndarray, row_of: np.ndarray, k: int) -> NodePart | None:
        """Split variables ``s_i`` with cost ``L_i*(s_i) = s_i^T a_i + ||s_i||^2 / 4``
        (docs/conventions.md) for the nodes with ``inset``."""
        sel = np.flatnonzero(inset[self.nodes])
        if sel.size == 0:
            return None
        idx, a = self.nodes[sel], self.a[sel]
        V = cp.Variable((len(idx), self.d), name="s_quad")
        P = scatter_rows(row_of, idx, k)

        def ev() -> tuple[np.ndarray, np.ndarray]:
            s: Any = V.value
            return P @ s, P @ ((s * a).sum(axis=1) + 0.25 * (s**2).sum(axis=1))

        def mag() -> tuple[np.ndarray, np.ndarray]:
            s: Any = V.value
            return P @ np.abs(s), P @ (np.abs(s * a).sum(axis=1) + 0.25 * (s**2).sum(axis=1))

        return NodePart("quadratic", P @ V, quadratic_conjugate_cvx(V, a), [], ev, None, mag)

    def conjugate_group(self, free: np.ndarray) -> ConjugateGroup | None:
        """Closed form :func:`quadratic_conjugate_rows` (any regularizers)."""
        sel = np.flatnonzero(free)
        a, l1, l2 = self.a[sel], self.l1[sel], self.l2[sel]

        def evaluate(S: np.ndarray, W0: np.ndarray, wloc: np.ndarray, rnd: np.ndarray
                     ) -> tuple[np.ndarray, ...]:
            val, rho, mag = quadratic_conjugate_rows(a, l1, l2, S)
            return val, rho, np.zeros_like(S), mag, wloc, np.ones(sel.size, dtype=bool)

        return ConjugateGroup(self.nodes[sel], True, evaluate)


def _stacked(parts: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts)`` (along the first axis), or a read-only view of the array the
    parts are consecutive pieces of: the losses of ``set_data`` are views of one stack (the
    first one a copy of its rows, made by its constructor: equal entries suffice), so the
    samples are not stacked a second time."""
    if len(parts) < 2:
        return np.concatenate(parts)
    last = parts[-1]
    base = last.base
    if not (isinstance(base, np.ndarray) and base.flags.c_contiguous
            and base.dtype == last.dtype):
        return np.concatenate(parts)
    size = last.itemsize
    flat, origin = base.reshape(-1), base.__array_interface__["data"][0]
    end = last.__array_interface__["data"][0] + last.nbytes
    addr = end
    for a in reversed(parts[1:]):  # consecutive views, back to front
        addr -= a.nbytes
        if a.base is not base or not a.flags.c_contiguous or a.dtype != last.dtype or \
                a.__array_interface__["data"][0] != addr:
            return np.concatenate(parts)
    first = parts[0]
    o = (addr - origin) // size - first.size
    if o < 0 or first.shape[1:] != last.shape[1:] or not np.array_equal(
            flat[o:o + first.size], first.reshape(-1)):
        return np.concatenate(parts)
    view = flat[o:(end - origin) // size].reshape((-1, *last.shape[1:]))
    view.flags.writeable = False
    return view


class SampleBatch(LossBatch):
    """Losses that are means over their node's ``m_i`` samples, stacked once: samples ``Xs``
    (``(M, p)``, grouped by node: node ``j`` of the batch owns rows ``starts[j]:starts[j] +
    ms[j]``, ``row_node[r]`` is the model position of row ``r``), targets ``y`` and row weights
    ``c_r = 1/m_i``; the Gram matrices ``X_i^T X_i`` are computed once (:meth:`gram`)."""

    def __init__(self, cls: Any, nodes: np.ndarray, losses: Sequence[Any], n: int, d: int):
        super().__init__(cls, nodes, losses, n, d)
        self.ms = np.array([ls.m for ls in self.losses], dtype=np.int64)
        self.row_node = np.repeat(self.nodes, self.ms)
        self.Xs = _stacked([ls.X for ls in self.losses])
        self.y = _stacked([ls.y for ls in self.losses])
        self.c = np.repeat(1.0 / self.ms, self.ms)
        self.starts = np.concatenate([[0], np.cumsum(self.ms)[:-1]])

    def max_rows(self) -> int:
        """``max_i m_i``."""
        return int(self.ms.max(initial=0))

    def gram(self) -> np.ndarray:
        """``X_i^T X_i`` per node, ``(k, p, p)`` (cached)."""
        return self.shared("gram", lambda: grouped_gram(self.Xs, np.ones(self.Xs.shape[0]),
                                                         self.starts))


class DataFitBatch(SampleBatch):
    """Data-fit losses ``(1/m_i) sum_r ell(x_r^T w_i, y_r)`` of one class, stacked once.

    The node samples are stacked (``Xs``, ``(M, d)``, grouped by node; ``starts``/``local``
    the groups) and into a sparse block matrix ``X_blk`` of shape ``(M, n*d)`` acting on the
    C-ordered flat parameter vector, with row weights ``c_r = 1/m_i`` and ``row_node[r] = i``.
    The Gram matrices ``X_i^T X_i`` and their eigen-decompositions are computed once
    (:meth:`gram`, :meth:`gram_eigh`).
    """

    def __init__(self, cls: Any, nodes: np.ndarray, losses: Sequence[Any], n: int, d: int):
        super().__init__(cls, nodes, losses, n, d)
        self.local = np.repeat(np.arange(self.ms.size), self.ms)
        params = [ls._row_param() for ls in self.losses]
        self.p: Any = None if params[0] is None else np.concatenate(params)

    @property
    def X_blk(self) -> sp.csr_matrix:
        """The samples as the sparse block matrix ``(M, n d)`` acting on the flat parameter
        vector (built on first use and shared, :meth:`shared`: Algorithm 1's compiled node
        pass reads the stacked ``Xs`` and never needs it)."""
        return self.shared("X_blk", self._block_matrix)

    def _block_matrix(self) -> sp.csr_matrix:
        M, d = self.Xs.shape
        indptr = np.arange(0, M * d + 1, d, dtype=np.int64)
        cols = (self.row_node[:, None] * d + np.arange(d)[None, :]).ravel()
        return sp.csr_matrix((self.Xs.ravel(), cols, indptr), shape=(M, self.n * d))

    # --- computed once
    def gram_eigh(self) -> tuple[np.ndarray, np.ndarray]:
        """Eigen-decompositions ``(e, V)`` of :meth:`gram` (cached)."""
        return self.shared("gram_eigh", lambda: np.linalg.eigh(self.gram()))

    def sample_svd(self) -> tuple[np.ndarray, np.ndarray]:
        """``(e, V)``: ``V_i diag(e_i) V_i^T = Q_i = X_i^T X_i / m_i`` (``e`` ascending,
        ``(k, d)``; ``V_i`` orthonormal, ``(k, d, d)``), cached, with the small eigenvalues
        resolved: at the nodes where the eigen-decomposition of the formed ``Q_i``
        (:meth:`_gram_factors`, accurate only to about ``eps e_max``: the square of the
        condition number) has ``e_min <= SVD_RTOL e_max``, ``e_ij = sigma_ij^2 / m_i`` and
        the right singular vectors of the samples ``X_i`` themselves (a QR, then the SVD of
        ``R``; batched over the nodes with the same ``m_i``), accurate to about ``eps
        sigma_max``, zeros past ``rank <= m_i``.  Elsewhere every ``e_j`` exceeds ``SVD_RTOL
        e_max`` by far more than the eigen-decomposition's error, which is all
        :mod:`gtvmodel.certificates.kinds` asks (null and ill-conditioned directions)."""
        return self.shared("sample_svd", self._sample_svd)

    #: Nodes whose formed ``Q_i`` has ``e_min <= SVD_RTOL e_max`` get the SVD of their samples.
    SVD_RTOL: ClassVar[float] = 1e-4

    def _gram_factors(self) -> tuple[np.ndarray, np.ndarray]:
        """The eigen-decompositions of ``Q_i = X_i^T X_i / m_i`` already at hand."""
        e, V = self.gram_eigh()
        return e / self.ms[:, None], V

    def _sample_svd(self) -> tuple[np.ndarray, np.ndarray]:
        e, V = self._gram_factors()
        ill = self._ill_conditioned(e)
        if ill.size == 0:
            return e, V
        V = V.copy()  # (gram_eigh's factors stay those of the formed Q_i; e is new)
        write_sample_svd(self.Xs, self.starts, self.ms, ill, e, V)
        return e, V

    def _ill_conditioned(self, e: np.ndarray) -> np.ndarray:
        """Positions whose eigenvalues ``e`` (ascending, of the formed ``Q_i``) have ``e_min
        <= SVD_RTOL e_max``: the nodes :meth:`sample_svd` resolves by the samples' SVD."""
        return np.flatnonzero(e[:, 0] <= self.SVD_RTOL * e[:, -1])

    # --- the primal
    def expression(self, w_flat: cp.Expression, W: cp.Expression) -> cp.Expression | None:
        """``sum_i (1/m_i) sum_r ell(x_r^T w_i, y_r)`` as one CVXPY expression in the flat
        variable (the sparse block matrix ``X_blk``)."""
        return _rows_sum_cvx(self.cls, self.X_blk @ w_flat, self.y, self.c, self.p)

    def values(self, W: np.ndarray) -> np.ndarray:
        """``L_i(w_i) = (1/m_i) sum_r ell(x_r^T w_i, y_r)``, ``(n,)`` (0 outside the batch)."""
        t = self.X_blk @ W.ravel()
        return np.bincount(self.row_node, self.c * self.cls._ell(t, self.y, self.p),
                           minlength=self.n)

    def gradients(self, W: np.ndarray) -> np.ndarray:
        """``grad L_i(w_i) = (1/m_i) sum_r ell'(x_r^T w_i, y_r) x_r``, ``(n, d)`` (0 outside the
        batch)."""
        t = self.X_blk @ W.ravel()
        g = self.X_blk.T @ (self.c * self.cls._ell_d1(t, self.y, self.p))
        return g.reshape(self.n, self.d)

    def hessian_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``ell''_min Q_i <= hess L_i <= ell''_max Q_i`` with ``Q_i = X_i^T X_i / m_i``
        (:class:`UnsupportedError` without a globally Lipschitz gradient)."""
        _check_lipschitz(self.cls)
        Q = self.gram() / self.ms[:, None, None]
        return self.cls.row.ell_curvature_min * Q, self.cls.row.ell_curvature * Q

    def hessians(self, W: np.ndarray) -> np.ndarray | None:
        """``(1/m_i) sum_r ell''(x_r^T w_i, y_r) x_r x_r^T`` (the row formula ``_ell_d2``,
        generalized for Huber); None for non-smooth classes."""
        if not self.cls.base_smooth:
            return None
        t = self.X_blk @ np.asarray(W, dtype=float).ravel()
        return grouped_gram(self.Xs, self.c * self.cls._ell_d2(t, self.y, self.p), self.starts)

    # --- certified radii
    def growth_pieces(self, level: np.ndarray) -> dict[str, np.ndarray]:
        """Per node of the batch, ``b`` with ``||X_i w - y_i||_2 <= b_i`` on ``{L_i <=
        level_i}`` (:meth:`DataFitLoss._residual_norm_bound`; ``inf`` for rows that flatten
        out), ``ynorm = ||y_i||_2``, ``gram = X_i^T X_i`` (``(k, d, d)``) and its eigenvalues
        ``eig`` (ascending), each lowered by a bound of the rounding made in forming and
        decomposing it.  ``level`` is an ``(n,)`` array over all nodes."""
        lv = np.maximum(np.asarray(level, dtype=float)[self.nodes], 0.0)
        ms, local = self.ms, self.local
        pmin: np.ndarray
        psq: np.ndarray
        if self.p is None:
            pmin, psq = np.ones(ms.size), np.zeros(ms.size)
        else:
            pmin, psq = np.minimum.reduceat(self.p, self.starts), np.bincount(local, self.p**2)
        eig, ynorm = self.shared("gram_pieces", self._gram_pieces)
        return {"b": self.cls._residual_norm_bound(ms * lv, pmin, psq), "ynorm": ynorm,
                "gram": self.gram(), "eig": eig}

    def _gram_pieces(self) -> tuple[np.ndarray, np.ndarray]:
        """Eigenvalues of :meth:`gram` lowered by their rounding bound, and ``||y_i||_2``."""
        eig = self.gram_eigh()[0]
        err = 16.0 * (self.d + self.ms) * _EPS * np.abs(eig).max(axis=1)
        return (eig - err[:, None],
                np.sqrt(np.bincount(self.local, self.y**2, minlength=self.ms.size)))

    def level_halfspaces(self, level: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """From :meth:`DataFitLoss._linear_minorants`, a row at most the node's whole sum
        ``m_i level_i``, as ``(node positions, G (J, d), h (J,))``."""
        mins = self.cls._linear_minorants(self.y, self.p)
        if not mins:
            return None
        ms = np.bincount(self.row_node, minlength=self.n)
        cap = (ms * np.maximum(np.asarray(level, dtype=float), 0.0))[self.row_node]
        G = np.vstack([a[:, None] * self.Xs for a, _ in mins])
        h = np.concatenate([cap - b for _, b in mins])
        return np.tile(self.row_node, len(mins)), G, h

    def sublevel_radii(self, level: np.ndarray) -> np.ndarray:
        """``||w||_2 <= (||y||_2 + b) / sqrt(e_min(X^T X))`` since ``||X w||_2 <= ||y||_2 + b``
        (:meth:`growth_pieces`); a numerically singular ``X^T X`` gives ``inf``."""
        g = self.growth_pieces(level)
        emin = g["eig"][:, 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(emin > 0, (g["ynorm"] + g["b"]) / np.sqrt(np.maximum(emin, 1e-300)),
                         np.inf)
        return np.where(np.isnan(r), np.inf, r) * (1.0 + 1e-12)

    # --- node update PU (32)
    def hessian_lipschitz(self) -> np.ndarray | None:
        """``sup |ell'''| sum_r c_r ||x_r||^3`` per node, a Lipschitz constant of ``hess L_i``
        (cached); None where ``ell''`` is not Lipschitz (``ell_d3_max = inf``)."""
        if not np.isfinite(self.cls.row.ell_d3_max):
            return None
        return self.shared("hessian_lipschitz", lambda: self.cls.row.ell_d3_max * np.bincount(
            self.local, self.c * np.sqrt(np.einsum("rj,rj->r", self.Xs, self.Xs)) ** 3,
            minlength=self.ms.size))

    def _prox(self, V: np.ndarray, tau: np.ndarray, W0: np.ndarray | None) -> np.ndarray:
        """Damped Newton (:func:`newton_minimize`) on ``L_i(z) + kappa_i ||z||^2 + ||z -
        v_i||^2 / (2 tau_i)``, vectorized over all nodes; where ``W0`` is the last call's answer
        (Algorithm 1's previous iterate) or absent, started from the first-order predictor
        :func:`newton_predictor` of the last answer and Hessian."""
        mu = 2.0 * self.l2 + 1.0 / tau
        g = V / tau[:, None]
        Z0 = V.copy() if W0 is None else np.array(W0, dtype=float)
        last: dict[str, Any] = self.__dict__.get("_newton_last") or {}
        predict = bool(last) and last["g"].shape == g.shape and (
            W0 is None or np.array_equal(Z0, last["Z"]))
        if not predict:
            last = {"H": mu[:, None, None] * np.eye(self.d)}
        if self._compiled_newton():  # the same method node by node, compiled
            Z = np.array(last["Z"] if predict else Z0, dtype=float)
            lip = self.hessian_lipschitz()
            compiled_logistic_newton()(
                self.Xs, self.y, self.c, np.append(self.starts, self.Xs.shape[0]), mu, g, Z,
                np.full(Z.shape[0], np.inf) if lip is None else lip, last["H"], 60, predict,
                last.get("mu", mu), last.get("g", g))
        else:
            if predict:
                Z0 = newton_predictor(last, mu, g)
            Z = newton_minimize(self.cls, self.Xs, self.y, self.p, self.c, self.local, mu, g,
                                Z0, max_iter=60, hess=last["H"], lip=self.hessian_lipschitz())
        self.__dict__["_newton_last"] = {"H": last["H"], "mu": mu, "g": g, "Z": Z.copy()}
        return Z

    def logistic_rows(self) -> bool:
        """Whether the rows are the logistic loss's (``ell(t) = log(1 + e^{-y t})``, no
        parameter): the row functions the compiled passes of :mod:`gtvmodel.kernels.nodeqp`
        have built in."""
        return self.cls is LogisticLoss and self.p is None

    def _compiled_newton(self) -> bool:
        """:meth:`_prox` runs :func:`~gtvmodel.kernels.nodeqp.logistic_newton_pass` (logistic
        rows, ``COMPILED_MIN_NODES`` nodes or more, numba installed)."""
        return (self.logistic_rows() and _compiled.available()
                and self.ms.size >= COMPILED_MIN_NODES)

    # --- conjugates
    def dual_part(self, inset: np.ndarray, row_of: np.ndarray, k: int) -> NodePart | None:
        """Stacked row duals ``v``: ``s_i += X_i^T v_i / m_i`` with cost ``sum_r c_r
        ell*(v_r)`` (docs/conventions.md)."""
        rows = np.flatnonzero(inset[self.row_node])
        if rows.size == 0:
            return None
        return _datafit_part(self, rows, row_of, k)

    def _rows_of(self, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of the batch nodes ``sel`` (positions in the batch) and their local owner."""
        local = np.full(self.ms.size, -1, dtype=np.int64)
        local[sel] = np.arange(sel.size)
        rows = np.flatnonzero(local[self.local] >= 0)
        return rows, local[self.local[rows]]

    def _group_rows(self, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any, np.ndarray,
                                                    np.ndarray]:
        """``(X, y, p, c, rn)``: the rows of the batch nodes ``sel`` and their local owner
        (:meth:`_rows_of`); the batch's own stacked arrays (no copies) when ``sel`` is every
        node in order."""
        if sel.size == self.ms.size:  # sel is sorted and unique: every node
            return self.Xs, self.y, self.p, self.c, self.local
        rows, rn = self._rows_of(sel)
        return self.Xs[rows], self.y[rows], take_rows(self.p, rows), self.c[rows], rn

    def conjugate_group(self, free: np.ndarray) -> ConjugateGroup | None:
        """Smooth rows without ``l1``: batched Newton (:func:`newton_conjugates`) from the
        candidate weights; nodes where it does not converge fall back to the CVXPY path."""
        if not self.cls.base_smooth:
            return None
        sel = np.flatnonzero(free & (self.l1 == 0))
        if sel.size == 0:
            return None
        X, y, p, c, rn = self._group_rows(sel)
        grp = (self.cls, X, y, p, c, rn, self.l2[sel])
        e, V = self.gram_eigh()
        whole = sel.size == self.ms.size
        gram = (e[sel] / (self.ms[sel] ** 2)[:, None], V if whole else V[sel])

        def evaluate(S: np.ndarray, W0: np.ndarray, wloc: np.ndarray, rnd: np.ndarray
                     ) -> tuple[np.ndarray, ...]:
            val, rho, r_rnd, vmag, wmax, conv = newton_conjugates(grp, S, W0, gram=gram)
            wl = np.where(conv, np.maximum(wloc, np.abs(wmax).max(axis=1, initial=0.0)), wloc)
            return val, rho, r_rnd, vmag, wl, conv

        return ConjugateGroup(self.nodes[sel], False, evaluate)

    def null_space_factors(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The singular factors of the samples ``X_i`` (:meth:`sample_svd`): ``dom L_i*`` lies
        in ``range(X_i^T)``."""
        return self.sample_svd()


class PiecewiseLinearBatch(DataFitBatch):
    """Data-fit losses whose row loss is piecewise linear with a linear conjugate
    ``ell*(a) = s_r a`` on an interval ``[lo_r, hi_r]`` (:class:`HingeLoss`,
    :class:`AbsoluteLoss`): their node update PU (32) is exact and vectorized by the dual
    active-set method :func:`dual_active_set_prox`, instead of the general CVXPY path."""

    def _padded(self) -> dict[str, Any]:
        """The rows padded to ``max_i m_i`` per node (cached): ``P = c_r x_r``, ``K = P
        P^T``, ``cs = c_r s_r``, ``lo``, ``hi`` and the padding mask ``fixed``."""
        pad = self.__dict__.get("_pad")
        if pad is None:
            k, m, M = self.ms.size, self.max_rows(), self.Xs.shape[0]
            slot = np.arange(M) - self.starts[self.local]
            lo_r, hi_r = self.cls._ell_conj_bounds(self.y, self.p)
            ones = np.ones(M)
            slope = self.cls._ell_conj(ones, self.y, self.p) - self.cls._ell_conj(0 * ones,
                                                                                   self.y, self.p)
            P = np.zeros((k, m, self.d))
            P[self.local, slot] = self.c[:, None] * self.Xs
            pad = {"P": P, "K": np.einsum("krd,kqd->krq", P, P)}
            for name, rows in (("cs", self.c * slope), ("lo", lo_r * ones), ("hi", hi_r * ones)):
                pad[name] = np.zeros((k, m))
                pad[name][self.local, slot] = rows
            pad["fixed"] = np.ones((k, m), dtype=bool)
            pad["fixed"][self.local, slot] = False
            self.__dict__["_pad"] = pad
        return pad

    def _prox(self, V: np.ndarray, tau: np.ndarray, W0: np.ndarray | None) -> np.ndarray:
        """:func:`dual_active_set_prox` on ``L_i(z) + kappa_i ||z||^2 + ||z - v_i||^2 /
        (2 tau_i)``, started from the active set of ``W0`` (else ``v_i``); a node whose active
        set cycles falls back to its CVXPY prox, polished by the active-set steps started from
        that point (kept unpolished if they cycle again).  The final active set is kept for the next
        call (Algorithm 1's next iteration)."""
        mu = 2.0 * self.l2 + 1.0 / tau
        Z0 = V if W0 is None else np.asarray(W0, dtype=float)
        # the last call's active set starts this one (a guess only: any start is exact)
        start = self.__dict__.get("_dual_start")
        if start is not None and start[0].shape[0] != V.shape[0]:
            start = None
        Z, ok, last = dual_active_set_prox(**self._padded(), mu=mu, g=V / tau[:, None], Z0=Z0,
                                           start=start,
                                           cache=self.__dict__.setdefault("_pinv_cache", {}))
        self.__dict__["_dual_start"] = last
        bad = np.flatnonzero(~ok)
        if bad.size:  # CVXPY's prox, then polished by the active-set steps started there
            Zc = np.array([_cvxpy_prox(self.losses[j], V[j], float(tau[j])) for j in bad])
            pad = {name: arr[bad] for name, arr in self._padded().items()}
            Zp, okp, _ = dual_active_set_prox(**pad, mu=mu[bad], g=V[bad] / tau[bad, None],
                                              Z0=Zc)
            Z[bad] = np.where(okp[:, None], Zp, Zc)
        return Z


class SquaredBatch(DataFitBatch):
    """Squared losses: the closed-form prox (69) and maximizers of the conjugate through the
    cached eigen-decompositions ``Q_i = X_i^T X_i / m_i = B_i diag(e_i) B_i^T``."""

    array_api = True

    def prepare(self, tau: Any) -> None:
        """The exact-prox mask and the operator of (69) for ``tau`` (:meth:`squared_data`'s
        eigen-decompositions, computed once per model)."""
        super().prepare(tau)
        self._squared_operator(tau)

    def squared_rows(self) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray] | None:
        """``(X_blk, y, c)``: the rows ``c_r (x_r^T w - y_r)^2`` themselves (where every loss
        states it is quadratic)."""
        if not all(ls.facts.quadratic for ls in self.losses):
            return None
        return self.X_blk, self.y, self.c

    def squared_data(self) -> dict[str, np.ndarray]:
        """``e``, ``B`` (of ``Q_i``) and ``q_i = X_i^T y_i / m_i`` (cached)."""
        return self.shared("squared", self._squared_data)

    def _squared_data(self) -> dict[str, np.ndarray]:
        """One factorization per node: the samples' SVD where ``m_i < d`` (no Gram matrix),
        else the eigen-decomposition of ``Q_i``, overwritten in place by the SVD where
        :meth:`_ill_conditioned`: the factors :meth:`sample_svd` returns, without a copy."""
        k, d = self.ms.size, self.d
        low = self.ms < d
        if low.all():
            e, B = np.zeros((k, d)), np.empty((k, d, d))
            ill = np.arange(k)
        else:
            e, B = np.linalg.eigh(self.gram() / self.ms[:, None, None])
            ill = np.union1d(np.flatnonzero(low), self._ill_conditioned(e))
        if ill.size:
            write_sample_svd(self.Xs, self.starts, self.ms, ill, e, B)
        return {"e": e, "B": B, "q": self.linear_terms()}

    def sample_svd(self) -> tuple[np.ndarray, np.ndarray]:
        """The factors of :meth:`squared_data` (already resolved by the samples' SVD where
        :meth:`DataFitBatch.sample_svd` asks it: the same arrays, no copy)."""
        return self._gram_factors()

    def linear_terms(self) -> np.ndarray:
        """``q_i = X_i^T y_i / m_i`` per node, ``(k, d)`` (cached, :meth:`shared`)."""
        return self.shared("q", lambda: np.add.reduceat(self.Xs * (self.c * self.y)[:, None],
                                                        self.starts, axis=0))

    def _gram_factors(self) -> tuple[np.ndarray, np.ndarray]:
        """The cached eigen-decompositions ``(e_i, B_i)`` of ``Q_i`` (:meth:`squared_data`)."""
        data = self.squared_data()
        return data["e"], data["B"]

    def _prox(self, V: np.ndarray, tau: np.ndarray, W0: np.ndarray | None) -> np.ndarray:
        """(69) with the ``1/m`` (docs/conventions.md erratum 2): ``z = (I (1 + 2 tau kappa) + 2 tau
        Q)^{-1} (v + 2 tau q)`` through the cached eigen-decomposition of ``Q`` (any array
        namespace)."""
        M, b = self._squared_operator(tau)
        return _xp.namespace(V).einsum("kij,kj->ki", M, V + b)

    def affine_operators(self, tau: np.ndarray, keep: bool = True
                         ) -> list[DenseOperator | SampleOperator]:
        """:meth:`prox` ``= M_i (v_i + b_i)`` (69) per node for the steps ``tau`` (numpy,
        ``(k,)``), ``b_i = 2 tau_i q_i``, in its cheapest exact form, for the compiled node
        update (:class:`gtvmodel.primal_dual.compiled.CompiledNodeUpdates`): the nodes with
        ``m_i < d`` by Woodbury's identity from their samples (:class:`SampleOperator`: ``M_i
        = (I - X_i^T K_i X_i) / alpha_i``, ``K_i`` ``m_i x m_i``; no ``d x d`` operator, no
        eigen-decomposition), the others by the ``d x d`` operator of :meth:`_squared_operator`
        (:class:`DenseOperator`).  With ``keep``, kept for the last ``tau`` in :meth:`shared`,
        so a later run with the same steps (a lambda path, a warm restart) builds nothing."""
        tau = np.asarray(tau, dtype=float)
        cached = self._shared.get("affine_operators")
        if cached is not None and np.array_equal(cached[0], tau):
            return cached[1]
        if keep:
            self._shared.pop("affine_operators", None)  # (its memory, before the new one)
        low = self.ms < self.d
        ops: list[DenseOperator | SampleOperator] = []
        if low.any():
            local = np.flatnonzero(low)
            q = self.linear_terms()
            ops.append(sample_operator(self.Xs, self.starts[local], self.ms[local], local,
                                       tau[local], self.l2[local],
                                       q if local.size == q.shape[0] else q[local]))
        if not low.all():
            dense = np.flatnonzero(~low)
            if dense.size == self.ms.size:
                M = self._squared_operator(tau)[0]
            else:  # the factors of these nodes only (all of them if already at hand)
                data = self._shared.get("squared")
                if data is None:
                    md = self.ms[dense]
                    first = np.concatenate([[0], np.cumsum(md)[:-1]])
                    X = self.Xs[np.repeat(self.starts[dense] - first, md) + np.arange(md.sum())]
                    G = grouped_gram(X, np.ones(X.shape[0]), first)
                    e, B = np.linalg.eigh(G / self.ms[dense, None, None])
                else:
                    e, B = data["e"][dense], data["B"][dense]
                M = eig_inverse(e, B, tau[dense], self.l2[dense])
            ops.append(DenseOperator(dense, M, 2.0 * tau[dense, None]
                                     * self.linear_terms()[dense]))
        if keep:
            self._shared["affine_operators"] = (tau.copy(), ops)
        return ops

    def diagonal_quadratic(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Where ``Q_i = X_i^T X_i / m_i`` is diagonal (off-diagonal entries exactly 0):
        ``c_i = diag(Q_i)``, ``b_i = q_i = X_i^T y_i / m_i`` (``(1/m) ||y - X w||^2 = w^T Q w
        - 2 q^T w + ||y||^2 / m``); NaN rows elsewhere."""
        G = self.gram()
        d = G.shape[1]
        c = np.diagonal(G, axis1=1, axis2=2) / self.ms[:, None]
        diagonal = np.count_nonzero(G.reshape(len(G), -1), axis=1) == np.count_nonzero(c, axis=1)
        c[~diagonal] = np.nan
        b = np.full_like(c, np.nan)
        if diagonal.any():
            b[diagonal] = self.squared_data()["q"].reshape(-1, d)[diagonal]
        return c, b

    def _squared_operator(self, tau: Any) -> tuple[Any, Any]:
        """``(I (1 + 2 tau kappa) + 2 tau Q)^{-1} = B diag(1/(1 + 2 tau (kappa + e))) B^T`` and
        ``2 tau q`` per node; rebuilt only when ``tau`` changes (no refactorization), one
        cache per array namespace, device and dtype of ``tau``."""
        xp = _xp.namespace(tau)
        key = "_op" if _xp.is_numpy(tau) else f"_op:{tau.device}:{tau.dtype}"
        cached = self.__dict__.get(key)
        if cached is not None and cached[0].shape == tau.shape and bool(xp.all(cached[0] == tau)):
            return cached[1], cached[2]
        data = self.squared_data()
        e, B = self._on("e", data["e"], tau), self._on("B", data["B"], tau)
        M = eig_inverse(e, B, tau, self._on("l2", self.l2, tau))
        b = 2.0 * tau[:, None] * self._on("q", data["q"], tau)
        self.__dict__[key] = (_xp.copy(tau), M, b)
        return M, b

    def conjugate_group(self, free: np.ndarray) -> ConjugateGroup | None:
        """Two valid splits (:func:`datafit_conjugate_split` at :func:`squared_maximizers`
        from 0 and from the candidate's weights); per node the smaller bound is kept.  The
        row-dual correction reuses the cached ``Q_i = B_i diag(e_i) B_i^T``: the Gram matrix of
        the weighted rows ``x_r / m_i`` is ``Q_i / m_i`` (``e_i / m_i``, ``B_i``), so no
        certificate forms or pseudo-inverts it again."""
        sel = np.flatnonzero(free & (self.l1 == 0))
        if sel.size == 0:
            return None
        X, y, _, c, rn = self._group_rows(sel)
        data = self.squared_data()
        m_max = int(np.bincount(rn, minlength=sel.size).max(initial=0))
        whole = sel.size == self.ms.size  # no copies of the cached factors
        e, V, q = (data["e"], data["B"], data["q"]) if whole else \
            (data["e"][sel], data["B"][sel], data["q"][sel])
        host = {"e": e, "V": V, "q": q, "gram_e": e / self.ms[sel, None],
                "kappa": self.l2[sel], "X": X, "y": y, "c": c, "rn": rn}
        moved = SimpleNamespace()  # the arrays on a device, once per device and dtype
        # a module-level function (not a closure), so a batch can be pickled and deep-copied
        evaluate = functools.partial(_squared_conjugate_split, host, moved, m_max)
        return ConjugateGroup(self.nodes[sel], True, evaluate, array_api=True)


def _squared_conjugate_split(host: dict, moved: SimpleNamespace, m_max: int, S: Any, W0: Any,
                             wloc: Any, rnd: Any) -> tuple:
    """``ConjugateGroup.evaluate`` of :meth:`SquaredBatch.conjugate_group` (``host``: the
    group's arrays, copied to ``S``'s device once into ``moved``)."""
    a = {k: _xp.cached_like(moved, k, v, S) for k, v in host.items()}
    xp = _xp.namespace(S)
    best: Any = None
    for base in (W0, None):
        if best is not None and bool(xp.all(best[1][1] <= rnd + best[1][2])):
            break  # rounding-level residuals already: the second cannot do better
        Wm = squared_maximizers(a["e"], a["V"], a["q"], a["kappa"], S, base)
        out = datafit_conjugate_split(SquaredLoss, a["X"], a["y"], None, a["c"],
                                      a["rn"], a["kappa"], S, Wm, m_max, (a["gram_e"], a["V"]))
        wl = xp.maximum(wloc, xp.max(xp.abs(Wm), axis=1))
        # choose by the value plus a local-scale residual charge (both are valid)
        total = out[0] + xp.sum(wl[:, None] * (out[1] + out[2]), axis=1)
        if best is None:
            best = (total, out, wl)
        else:
            pick = total < best[0]
            best = (xp.where(pick, total, best[0]),
                    tuple(xp.where(xp.reshape(pick, (-1,) + (1,) * (o.ndim - 1)), o, b_)
                          for o, b_ in zip(out, best[1], strict=True)),
                    xp.where(pick, wl, best[2]))
    val, rho, r_rnd, mag = best[1]
    return val, rho, r_rnd, mag, best[2], np.ones(len(host["q"]), dtype=bool)


def newton_conjugates(group: tuple, S: np.ndarray, W0: np.ndarray, iters: int = 40,
                      gram: tuple[np.ndarray, np.ndarray] | None = None
                      ) -> tuple[np.ndarray, ...]:
    """Conjugates of smooth data-fit nodes (no ``l1``/constraints) in numpy, all nodes at once.

    The maximizers of ``f(w) = s^T w - L(w) - kappa ||w||^2`` from the candidate weights
    (:func:`~gtvmodel.kernels.newton.newton_conjugate_maximizers`), then the split read off
    them by
    :func:`datafit_conjugate_split` (an exact evaluation at a feasible split, hence an upper
    bound of ``h*(s)`` once the residual bound ``rho`` is charged).  Where ``s`` is outside the
    domain the iteration diverges and ``rho`` stays large: the caller then uses the CVXPY path.
    ``group`` is ``(cls, X, y, p, c, rn, kappa)``, ``gram`` the cached factors of the
    weighted rows' Gram matrices (:func:`datafit_conjugate_split`).  Returns ``(values, rho,
    rounding, magnitudes, maximizers, converged)``."""
    cls, X, y, p, c, rn, kappa = group
    w = newton_conjugate_maximizers(cls, X, y, p, c, rn, kappa, S, W0, iters)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        val, rho, rnd, vmag = datafit_conjugate_split(cls, X, y, p, c, rn, kappa, S, w,
                                                      gram=gram)
        t = np.einsum("rj,rj->r", X, w[rn])
        k = S.shape[0]
        gres = np.abs(S - sum_rows_by(rn, (c * cls._ell_d1(t, y, p))[:, None] * X, k)
                      - 2 * kappa[:, None] * w).max(axis=1)
    converged = np.isfinite(val) & (gres <= 1e-10 * np.maximum(1.0, np.abs(S).max(axis=1)))
    return val, rho, rnd, vmag, w, converged


def _datafit_part(b: DataFitBatch, rows: np.ndarray, row_of: np.ndarray, k: int) -> NodePart:
    """Stacked row duals ``v`` of one data-fit batch: ``s_i += X_i^T v_i / m_i``."""
    d = b.d
    Xr = b.X_blk[rows].tocoo()
    node = Xr.col // d
    col = row_of[node] * d + Xr.col % d
    Bt = sp.csr_matrix((Xr.data, (col, Xr.row)), shape=(k * d, rows.size))  # (k d) x M'
    c, y, prm, cls = b.c[rows], b.y[rows], take_rows(b.p, rows), b.cls
    lo, hi = cls._ell_conj_bounds(y, prm)
    lo = np.broadcast_to(np.asarray(lo, dtype=float), (rows.size,))
    hi = np.broadcast_to(np.asarray(hi, dtype=float), (rows.size,))
    v = cp.Variable(rows.size, name=f"v_{cls.kind}")
    contrib = cp.reshape(Bt @ cp.multiply(c, v), (k, d), order="C")
    cost = c @ cls._ell_conj_cvx(v, y, prm)
    cons = bounds_constraints(v, lo, hi, rows.size)
    owner = row_of[b.row_node[rows]]

    def absorb(Rz: np.ndarray) -> None:
        """Least-squares row-dual change with ``X_i^T (c dv) = R_i`` on the rows strictly
        inside their domain (rows at a bound, e.g. hinge rows away from the margin, would be
        clipped back), kept in the domain."""
        vv = np.clip(np.asarray(v.value), lo, hi)
        width = np.where(np.isfinite(hi - lo), hi - lo, 1.0)
        # a solver's row dual within 1e-9 of a bound is that bound (e.g. hinge rows off the
        # margin have v = 0 exactly): snap, then correct on the rows strictly inside
        vv = np.where(vv <= lo + 1e-9 * width, lo, np.where(vv >= hi - 1e-9 * width, hi, vv))
        free = np.flatnonzero((vv > lo) & (vv < hi))
        if free.size == 0:
            v.value = vv
            return
        A = (Bt[:, free] @ sp.diags(c[free])).tocsr()
        dv = spla.lsqr(A, Rz.ravel(), atol=1e-16, btol=1e-16, iter_lim=500)[0]
        vv[free] += dv
        v.value = np.clip(vv, lo, hi)

    def ev() -> tuple[np.ndarray, np.ndarray]:
        vv = np.clip(np.asarray(v.value), lo, hi)
        rowcost = np.bincount(owner, c * cls.ell_conjugate(vv, y, prm), minlength=k)
        return (Bt @ (c * vv)).reshape(k, d), rowcost

    def mag() -> tuple[np.ndarray, np.ndarray]:
        vv = np.clip(np.asarray(v.value), lo, hi)
        rowmag = c * cls.ell_conjugate_magnitude(vv, y, prm)
        return ((abs(Bt) @ np.abs(c * vv)).reshape(k, d),
                np.bincount(owner, rowmag, minlength=k))

    return NodePart(cls.kind, contrib, cost, cons, ev, absorb, mag)


# every library loss class names its batch (defined above, after the loss classes)
DataFitLoss.batch_class = DataFitBatch
SquaredLoss.batch_class = SquaredBatch
QuadraticLoss.batch_class = QuadraticBatch
ZeroLoss.batch_class = ZeroBatch
HingeLoss.batch_class = AbsoluteLoss.batch_class = PiecewiseLinearBatch
