"""Multinomial logistic (softmax) regression, a node loss ``L_i`` of GTV minimization (16).

A node holds samples ``x_r in R^p`` with class labels ``y_r in {0, ..., K-1}``; its parameter
``w in R^{p K}`` is the C-ordered flattening of a ``(p, K)`` matrix ``W`` and

    L(w) = (1/m) sum_r [ logsumexp(W^T x_r) - (W^T x_r)_{y_r} ]  (+ eta ||w||_1 + kappa ||w||^2).

**Conjugate.**  The row loss ``f(z) = logsumexp(z) - z_y`` on ``z in R^K`` has ``f*(v) =
lse*(v + e_y)`` with ``lse*(p) = sum_k p_k log p_k`` on the probability simplex (``+inf`` off
it).  The mean over rows ``z_r = W^T x_r`` gives (infimal convolution over the rows, as for the
scalar data-fit losses of docs/conventions.md, ``c_r = 1/m``)

    L*(S) = min { sum_r c_r sum_k P_rk log P_rk :  P >= 0,  P 1 = 1,  X^T (P - Y) c = S },

with ``Y`` the one-hot labels and ``S`` the ``(p, K)`` reshaped dual vector: one probability row
``P_r`` per sample, shifted by its label.  :class:`SoftmaxBatch` stacks these simplices for all
nodes of a batch (the dual problem (24) and the certificate's CVXPY path, which evaluates the
negative entropies exactly at a point of the simplices, hence an upper bound of ``L*``).

Curvature: the Hessian of ``logsumexp`` is ``diag(p) - p p^T <= I / 2``, so ``0 <= hess L <=
(X^T X / m) (x) I_K / 2`` (the smoothness constant ``beta`` of Theorem 2).  The prox (PU (32))
takes the generic CVXPY path.  Everything specific to this loss lives in this module.
"""

from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.special import logsumexp, softmax, xlogy

from .._validate import as_finite_array, check_vector
from ..errors import DataError, FileFormatError, UnsupportedError
from .losses import Loss, NodePart, SampleBatch
from .spec import TermSpec, header_int

__all__ = ["SoftmaxLoss", "SoftmaxBatch"]

_EPS = float(np.finfo(float).eps)


def _one_hot(y: np.ndarray, K: int) -> np.ndarray:
    Y = np.zeros((y.size, K))
    Y[np.arange(y.size), y] = 1.0
    return Y


class SoftmaxLoss(Loss):
    """Multinomial logistic loss ``(1/m) sum_r [logsumexp(x_r^T W) - x_r^T W[:, y_r]]``.

    Parameters
    ----------
    X : array (m, p)
        The node's samples.
    y : array (m,)
        Integer class labels in ``0 .. n_classes - 1``.
    n_classes : int
        ``K >= 2``; the parameter dimension is ``d = p K`` (``w`` is ``W`` flattened in C order).
    l1, l2 : float
        Optional regularizers ``eta ||w||_1`` and ``kappa ||w||^2``.

    Raises
    ------
    DataError
        ``n_classes`` is not an integer ``>= 2``; ``X`` is not a finite non-empty ``(m, p)``
        matrix; ``y`` is not finite, not of length ``m``, or holds a label that is not an
        integer in ``0 .. n_classes - 1`` (the message names the first bad entry).
    ParameterError
        ``l1`` or ``l2`` negative, infinite or NaN.

    Examples
    --------
    >>> import numpy as np, gtvmodel as gm
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> loss = gm.SoftmaxLoss(X, [0, 1, 2], n_classes=3)
    >>> loss.dim, round(loss.value(np.zeros(6)), 4)  # d = p K; L(0) = log K
    (6, 1.0986)
    >>> np.round(loss.gradient(np.zeros(6)).reshape(2, 3), 4)  # (1/m) X^T (softmax - Y)
    array([[-0.1111,  0.2222, -0.1111],
           [ 0.2222, -0.1111, -0.1111]])
    >>> np.round(loss.prox(np.zeros(6), 1.0).reshape(2, 3), 3)  # PU (32), one CVXPY solve
    array([[ 0.109, -0.192,  0.083],
           [-0.192,  0.109,  0.083]])
    """

    kind = "softmax"

    def __init__(self, X: Any, y: Any, n_classes: int, *, l1: float = 0.0, l2: float = 0.0):
        super().__init__(l1=l1, l2=l2)
        owner = "SoftmaxLoss"
        if (isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer))
                or n_classes < 2):
            raise DataError(f"{owner}: n_classes must be an integer >= 2, got {n_classes!r}")
        X = as_finite_array(X, "X", owner=owner)
        if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
            raise DataError(f"{owner}: X must be a non-empty (m, p) matrix, got shape {X.shape}")
        y = as_finite_array(y, "y", owner=owner)
        if y.ndim == 0:
            y = y[None]
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise DataError(f"{owner}: y must have shape ({X.shape[0]},) to match X of shape "
                            f"{X.shape}, got {y.shape}")
        frac = np.flatnonzero(y != np.round(y))
        if frac.size:
            raise DataError(f"{owner}: labels must be integers; y[{frac[0]}] = {y[frac[0]]:g}")
        out = np.flatnonzero((y < 0) | (y >= n_classes))
        if out.size:
            raise DataError(f"{owner}: labels must lie in 0..{n_classes - 1} "
                            f"(n_classes = {n_classes}); y[{out[0]}] = {y[out[0]]:g}")
        self.X = X
        self.y = y.astype(np.int64)
        self.n_classes = int(n_classes)

    # --- file spec (docs/file_format.md): the data-fit place, X padded to d = p K columns
    #: Samples stored as a data-fit loss's: ``X`` with ``d`` columns, ``y`` the class labels.
    spec_arrays = {"X": ("m", "d"), "y": ("m",)}

    def to_spec(self) -> TermSpec:
        """``kind``, ``n_classes`` and the regularizers; arrays in the format's samples place:
        ``X`` as the ``(m, d)`` block ``[X, 0]`` (its ``p = d / K`` feature columns, then
        zeros: the format's rows have ``d`` columns) and ``y`` the labels as numbers."""
        pad = np.zeros((self.m, self.dim - self.X.shape[1]))
        return TermSpec(self.kind, {"n_classes": self.n_classes, **self._regularizer_spec()},
                        {"X": np.hstack([self.X, pad]), "y": self.y.astype(float)})

    @classmethod
    def from_spec(cls, spec: TermSpec) -> SoftmaxLoss:
        """The loss :meth:`to_spec` wrote: ``n_classes`` an integer ``>= 2`` dividing ``d``,
        the columns after the first ``p = d / K`` of ``X`` zero (:class:`FileFormatError`
        naming the field otherwise)."""
        spec.check_keys(required=("n_classes",), optional=("l1", "l2"))
        at = str(spec.at) or spec.kind
        K = header_int(spec.params["n_classes"], f"{at}.n_classes", spec.where, 2)
        X = spec.array("X")
        if X.shape[1] % K:
            raise FileFormatError(f"{spec.where}: {at}: n_classes = {K} does not divide "
                                  f"d = {X.shape[1]}")
        p = X.shape[1] // K
        if np.any(X[:, p:]):
            raise FileFormatError(f"{spec.where}: {at}: columns {p}..{X.shape[1] - 1} of X "
                                  f"must be zero (a softmax loss has p = d / K = {p} features)")
        return cls(X[:, :p], spec.array("y"), K, **spec.regularizers())

    @property
    def m(self) -> int:
        """Number of samples ``m_i``."""
        return int(self.X.shape[0])

    @property
    def dim(self) -> int:
        """``d = p K``."""
        return int(self.X.shape[1] * self.n_classes)

    def _scores(self, w: np.ndarray) -> np.ndarray:
        return self.X @ w.reshape(self.X.shape[1], self.n_classes)

    # --- prediction: class scores x^T W, the argmax class, softmax probabilities
    score_metric = "accuracy"

    def samples(self) -> tuple[np.ndarray, np.ndarray]:
        """The node's samples ``(X, y)`` (integer class labels)."""
        return self.X, self.y

    @property
    def num_features(self) -> int:
        """``p`` (``d = p K``)."""
        return int(self.X.shape[1])

    def decision_rows(self, X: np.ndarray, W: np.ndarray) -> np.ndarray:
        """The ``(N, K)`` class scores ``x_r^T W_r`` (``W_r``: row ``w_r`` reshaped to
        ``(p, K)`` in C order), one ``einsum`` over all rows."""
        return np.einsum("rp,rpk->rk", X, W.reshape(W.shape[0], X.shape[1], self.n_classes))

    def predict_rows(self, X: np.ndarray, W: np.ndarray) -> np.ndarray:
        """The class of largest score (``argmax_k (x_r^T W_r)_k``; the first on ties)."""
        return np.argmax(self.decision_rows(X, W), axis=1)

    def proba_rows(self, X: np.ndarray, W: np.ndarray) -> np.ndarray:
        """The ``(N, K)`` softmax of the class scores (the model's class probabilities)."""
        return softmax(self.decision_rows(X, W), axis=1)

    def labels(self, y: Any, name: str = "y") -> np.ndarray:
        """Integer class labels in ``0 .. K-1`` (:class:`DataError` naming the first other)."""
        y = check_vector(y, name, where="SoftmaxLoss")
        bad = np.flatnonzero((y != np.round(y)) | (y < 0) | (y >= self.n_classes))
        if bad.size:
            raise DataError(f"SoftmaxLoss: {name}[{bad[0]}] = {y[bad[0]]:g} is not a class "
                            f"label in 0..{self.n_classes - 1}")
        return y.astype(np.int64)

    def _base_expression(self, x: cp.Expression) -> cp.Expression:
        T = self.X @ cp.reshape(x, (self.X.shape[1], self.n_classes), order="C")
        Y = _one_hot(self.y, self.n_classes)
        return (cp.sum(cp.log_sum_exp(T, axis=1)) - cp.sum(cp.multiply(Y, T))) / self.m

    def _base_value(self, w: np.ndarray) -> float:
        T = self._scores(w)
        return float((logsumexp(T, axis=1) - T[np.arange(self.m), self.y]).mean())

    def _base_gradient(self, w: np.ndarray) -> np.ndarray:
        T = self._scores(w)
        R = softmax(T, axis=1) - _one_hot(self.y, self.n_classes)
        return (self.X.T @ R / self.m).ravel()

    def _base_hessian_bounds(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        Q = self.X.T @ self.X / self.m
        return np.zeros((d, d)), 0.5 * np.kron(Q, np.eye(self.n_classes))

    def _base_conjugate_cvx(self, d: int) -> tuple[cp.Expression, cp.Expression,
                                                   list[cp.Constraint]]:
        P = cp.Variable((self.m, self.n_classes), name="p_softmax", nonneg=True)
        Y = _one_hot(self.y, self.n_classes)
        contrib = cp.vec(self.X.T @ (P - Y), order="C") / self.m
        return contrib, cp.sum(-cp.entr(P)) / self.m, [cp.sum(P, axis=1) == 1]

    def __repr__(self) -> str:
        return (f"SoftmaxLoss(m={self.m}, p={self.X.shape[1]}, K={self.n_classes}"
                f"{self._reg_repr()})")


class SoftmaxBatch(SampleBatch):
    """Softmax losses of one batch, stacked once: samples ``Xs`` (``(M, p)``), labels, row
    weights ``c_r = 1/m_i``, the sparse score map ``X_k`` (``(M K, n d)``: ``t = X_k w`` is the
    C-ordered ``(M, K)`` score matrix) and the Gram matrices ``X_i^T X_i`` (cached)."""

    def __init__(self, cls: Any, nodes: np.ndarray, losses: Any, n: int, d: int):
        super().__init__(cls, nodes, losses, n, d)
        K = self.K = self.losses[0].n_classes
        other = [j for j, ls in enumerate(self.losses) if ls.n_classes != K]
        if other:
            raise UnsupportedError(
                f"node at position {int(self.nodes[other[0]])}: softmax losses with different "
                f"class counts in one model ({self.losses[other[0]].n_classes} and {K}) are not "
                "supported")
        self.Y = _one_hot(self.y, K)
        M, p = self.Xs.shape
        # score (r, a) = sum_j X_rj w[node_r * d + j K + a]
        r, j, a = np.meshgrid(np.arange(M), np.arange(p), np.arange(K), indexing="ij")
        self.X_k = sp.csr_matrix(
            (self.Xs[r, j].ravel(), ((r * K + a).ravel(), (self.row_node[r] * d + j * K + a)
                                     .ravel())), shape=(M * K, n * d))

    def _scores(self, W: np.ndarray) -> np.ndarray:
        return (self.X_k @ W.ravel()).reshape(-1, self.K)

    def expression(self, w_flat: cp.Expression, W: cp.Expression) -> cp.Expression | None:
        """``sum_i (1/m_i) sum_r [logsumexp(x_r^T W_i) - x_r^T W_i[:, y_r]]`` as one CVXPY
        expression in the flat variable."""
        T = cp.reshape(self.X_k @ w_flat, (self.Xs.shape[0], self.K), order="C")
        return (self.c @ cp.log_sum_exp(T, axis=1)
                - cp.sum(cp.multiply(self.c[:, None] * self.Y, T)))

    def values(self, W: np.ndarray) -> np.ndarray:
        """``L_i(w_i)`` at the batch's nodes, ``(n,)`` (0 elsewhere)."""
        T = self._scores(W)
        rows = logsumexp(T, axis=1) - T[np.arange(T.shape[0]), self.y]
        return np.bincount(self.row_node, self.c * rows, minlength=self.n)

    def gradients(self, W: np.ndarray) -> np.ndarray:
        """``grad L_i(w_i) = (1/m_i) sum_r x_r (softmax(x_r^T W_i) - e_{y_r})^T`` flattened,
        ``(n, d)`` (0 outside the batch)."""
        R = self.c[:, None] * (softmax(self._scores(W), axis=1) - self.Y)
        return (self.X_k.T @ R.ravel()).reshape(self.n, self.d)

    def hessian_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``0 <= hess L_i <= (X_i^T X_i / m_i) (x) I_K / 2``."""
        Q = self.gram() / self.ms[:, None, None]
        k, K = Q.shape[0], self.K
        hi = 0.5 * np.einsum("ijl,ab->ijalb", Q, np.eye(K)).reshape(k, self.d, self.d)
        return np.zeros_like(hi), hi

    def dual_part(self, inset: np.ndarray, row_of: np.ndarray, k: int) -> NodePart | None:
        """Probability rows ``P_r`` on simplices: ``s_i += vec(X_i^T (P_i - Y_i)) / m_i`` with
        cost ``sum_r c_r sum_a P_ra log P_ra`` (module docstring)."""
        rows = np.flatnonzero(inset[self.row_node])
        if rows.size == 0:
            return None
        K, d = self.K, self.d
        # Bt maps vec_C(P - Y) (rows x K) into the (k d) node-balance entries, weights c
        sub = self.X_k[(rows[:, None] * K + np.arange(K)).ravel()].tocoo()
        col = row_of[sub.col // d] * d + sub.col % d
        Bt = sp.csr_matrix((sub.data * np.repeat(self.c[rows], K)[sub.row], (col, sub.row)),
                           shape=(k * d, rows.size * K))
        Y, c = self.Y[rows], self.c[rows]
        owner = row_of[self.row_node[rows]]
        P = cp.Variable((rows.size, K), name="p_softmax", nonneg=True)
        contrib = cp.reshape(Bt @ (cp.vec(P, order="C") - Y.ravel()), (k, d), order="C")
        cost = cp.sum(cp.multiply(c[:, None], -cp.entr(P)))
        cons = [cp.sum(P, axis=1) == 1]

        def point() -> np.ndarray:
            """The variable's value projected onto the simplices (clip, renormalize)."""
            Pv = np.clip(np.asarray(P.value, dtype=float), 0.0, None)
            tot = Pv.sum(axis=1, keepdims=True)
            return np.where(tot > 0, Pv / np.where(tot > 0, tot, 1.0), Y)

        def ev() -> tuple[np.ndarray, np.ndarray]:
            Pv = point()
            return ((Bt @ (Pv - Y).ravel()).reshape(k, d),
                    np.bincount(owner, c * xlogy(Pv, Pv).sum(axis=1), minlength=k))

        def mag() -> tuple[np.ndarray, np.ndarray]:
            # |P - Y| plus the simplex defect of the rounded rows: the exact simplex point
            # differs from Pv by |1 - sum_a Pv_ra| <= |computed defect| + K eps in one entry,
            # which changes the contribution by c_r |x_r| times that and the entropy by at most
            # (1 + log K) times that (the entry of the largest probability, >= 1/K); both are
            # covered in units of eps (the caller multiplies by a multiple of eps)
            Pv = point()
            defect = (np.abs(1.0 - Pv.sum(axis=1)) / _EPS + K)[:, None]
            cm = abs(Bt) @ (np.abs(Pv - Y) + defect).ravel()
            cost_rows = c * (np.abs(xlogy(Pv, Pv)).sum(axis=1)
                             + (1.0 + np.log(K)) * defect[:, 0])
            return cm.reshape(k, d), np.bincount(owner, cost_rows, minlength=k)

        def absorb(Rz: np.ndarray) -> None:
            """Least-squares change of ``P`` along directions keeping every row sum, with
            contribution ``R``; kept only on rows that stay nonnegative."""
            Pv = point()
            nz = rows.size * K

            def centred(z: np.ndarray) -> np.ndarray:
                Z = z.reshape(rows.size, K)
                return (Z - Z.mean(axis=1, keepdims=True)).ravel()

            A = spla.LinearOperator((k * d, nz), matvec=lambda z: Bt @ centred(z),
                                    rmatvec=lambda r: centred(Bt.T @ r), dtype=float)
            dz = centred(spla.lsqr(A, Rz.ravel(), atol=1e-16, btol=1e-16, iter_lim=500)[0])
            new = Pv + dz.reshape(rows.size, K)
            P.value = np.where((new >= 0).all(axis=1, keepdims=True), new, Pv)

        return NodePart("softmax", contrib, cost, cons, ev, absorb, mag)


SoftmaxLoss.batch_class = SoftmaxBatch
