"""Matrix-valued node parameters ``W_i in R^{p x q}`` (``GTVModel(G, dim=(p, q))``).

A matrix model is the vector model (16) on ``w_i = vec(W_i) in R^d``, ``d = p q``, with the
row-major vectorization of numpy's ``reshape``: ``vec(W)[a q + b] = W[a, b]``.  Every engine
works on the flat ``(n, d)`` arrays unchanged; the penalties act on the flat difference
``vec(W_i - W_j)``, so :class:`~gtvmodel.terms.penalties.Norm2` is the Frobenius norm
``||W_i - W_j||_F`` and :class:`~gtvmodel.terms.penalties.Norm1` the entrywise ``l1`` norm.

The nuclear norm ``||W_i - W_j||_*`` (sum of singular values) is :class:`NuclearNorm`, a norm
penalty whose flow capacities (27) are spectral-norm balls.

The multi-output squared loss ``L_i(W) = (1/m) ||Y - X W||_F^2`` (``X`` ``m x p``, ``Y``
``m x q``) is an ordinary :class:`~gtvmodel.terms.losses.SquaredLoss`: with the row-major
``vec``, ``vec(X W) = (X kron I_q) vec(W)`` and ``vec(Y)`` stacks the rows of ``Y``, so
``||Y - X W||_F^2 = ||vec(Y) - (X kron I_q) w||^2`` over ``m q`` rows; the factor ``sqrt(q)``
on both turns the ``SquaredLoss`` mean over ``m q`` rows into the mean over the ``m``
samples (docs/matrix_parameters.md).  Every engine (Algorithm 1's exact squared node update
included) then sees a ``SquaredLoss``.
"""

from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np

from .._cvx import ScaleParameter
from .._validate import as_finite_array, check_int, check_option
from ..errors import DataError, PenaltyError
from .losses import Loss, SquaredLoss
from .penalties import Penalty, _sublevel
from .spec import TermSpec, header_int

__all__ = ["node_shape", "multi_output_rows", "multi_output_squared_loss", "NuclearNorm"]

_EPS = float(np.finfo(float).eps)


def node_shape(dim: Any) -> tuple[int, ...]:
    """The shape of one node parameter from a model's ``dim``: ``(d,)`` for an integer
    ``d >= 1``, ``(p, q)`` for a pair of integers ``>= 1`` (a matrix ``W_i``).

    Raises
    ------
    DataError
        ``dim`` is neither an integer ``>= 1`` nor a pair ``(p, q)`` of them.

    Examples
    --------
    >>> from gtvmodel.terms.matrix import node_shape
    >>> node_shape(3), node_shape((10, 2))
    ((3,), (10, 2))
    """
    if isinstance(dim, (tuple, list)):
        if len(dim) != 2:
            raise DataError(f"dim must be an integer d >= 1 or a pair (p, q) of integers >= 1 "
                            f"(a matrix parameter), got {tuple(dim)!r}")
        return (check_int(dim[0], "dim[0] (p)", min_val=1, error=DataError),
                check_int(dim[1], "dim[1] (q)", min_val=1, error=DataError))
    return (check_int(dim, "dim", min_val=1, error=DataError),)


def multi_output_rows(X: Any, Y: Any) -> tuple[np.ndarray, np.ndarray]:
    """The flat rows of ``||Y - X W||_F^2``: ``(X kron I_q, vec(Y))`` (``(m q, p q)`` and
    ``(m q,)``, row ``r q + k`` is output ``k`` of sample ``r``), so that
    ``||Y - X W||_F^2 = ||vec(Y) - (X kron I_q) vec(W)||^2`` with the row-major ``vec``.

    ``X`` is ``(m, p)`` and ``Y`` ``(m, q)``, finite (:class:`DataError` naming the argument).

    Examples
    --------
    >>> import numpy as np
    >>> from gtvmodel.terms.matrix import multi_output_rows
    >>> X = np.array([[1.0, 2.0]]); Y = np.array([[3.0, 4.0, 5.0]])
    >>> A, b = multi_output_rows(X, Y)
    >>> A.shape, b.tolist()
    ((3, 6), [3.0, 4.0, 5.0])
    >>> W = np.arange(6.0).reshape(2, 3)
    >>> bool(np.allclose(A @ W.reshape(-1), (X @ W).reshape(-1)))
    True
    """
    X = as_finite_array(X, "X")
    Y = as_finite_array(Y, "Y")
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0]:
        raise DataError(f"multi-output samples: X must be (m, p) and Y (m, q) with the same m, "
                        f"got X {X.shape} and Y {Y.shape}")
    m, p = X.shape
    q = Y.shape[1]
    A = (X[:, None, :, None] * np.eye(q)[None, :, None, :]).reshape(m * q, p * q)
    return A, Y.reshape(-1)


def multi_output_groups(X: np.ndarray, Y: np.ndarray, ms: np.ndarray, *,
                        scaling: str = "mean", **options: Any) -> list[Loss]:
    """One multi-output squared loss per group of consecutive samples (``ms`` samples each;
    ``X`` ``(M, p)``, ``Y`` ``(M, q)``), built as :class:`SquaredLoss` in one vectorized call
    (:meth:`SquaredLoss.from_groups`): the rows of :func:`multi_output_rows` scaled by
    ``sqrt(m q s(m))`` per group, so that the ``SquaredLoss`` mean over ``m q`` rows is
    ``s(m) ||Y - X W||_F^2`` (``s`` of :attr:`SquaredLoss.SCALINGS`).  ``options``: ``l1``,
    ``l2`` of :class:`SquaredLoss`."""
    scaling = check_option(scaling, "scaling", SquaredLoss.SCALINGS,
                           where="multi-output squared loss")
    A, b = multi_output_rows(X, Y)
    ms = np.asarray(ms, dtype=np.int64)
    q = Y.shape[1]
    s = SquaredLoss.SCALINGS[scaling]
    c = np.sqrt(np.array([m * q * s(m) for m in ms.tolist()], dtype=float))
    rows = np.repeat(c, ms * q)
    return SquaredLoss.from_groups(A * rows[:, None], b * rows, ms * q, **options)


def multi_output_squared_loss(X: Any, Y: Any, *, scaling: str = "mean", l1: float = 0.0,
                              l2: float = 0.0) -> SquaredLoss:
    """The multi-output squared loss ``L(W) = (1/m) ||Y - X W||_F^2`` of a matrix parameter
    ``W in R^{p x q}`` as a :class:`~gtvmodel.terms.losses.SquaredLoss` on ``w = vec(W)``
    (row-major, ``d = p q``): the design ``X kron I_q`` and target ``vec(Y)``
    (:func:`multi_output_rows`), rescaled exactly so that the value is the mean over the ``m``
    samples (not over the ``m q`` flat rows).

    Parameters
    ----------
    X : array_like, shape (m, p)
        The node's inputs as rows; finite, at least one row.
    Y : array_like, shape (m, q)
        The node's outputs as rows.
    scaling : {"mean", "sum", "half", "half_mean"}, default "mean"
        The factor ``s(m)`` of ``L(W) = s(m) ||Y - X W||_F^2``: ``1/m``, ``1``, ``1/2``,
        ``1/(2m)``, as for :class:`SquaredLoss`.
    l1 : float, default 0.0
        ``eta >= 0``: adds ``eta sum_ab |W_ab|``.
    l2 : float, default 0.0
        ``kappa >= 0``: adds ``kappa ||W||_F^2``.

    Returns
    -------
    SquaredLoss
        The loss on ``R^{p q}`` (its ``m`` is the number of flat rows ``m q``; a problem file
        stores the flat, rescaled rows and loads as the same function).

    Raises
    ------
    DataError
        ``X`` or ``Y`` not finite, not 2-D, or with different numbers of rows.
    ParameterError
        ``scaling``, ``l1`` or ``l2`` invalid.

    Examples
    --------
    >>> import numpy as np, gtvmodel as gm
    >>> X = np.array([[1.0, 0.0], [1.0, 1.0]]); Y = np.array([[1.0, 2.0, 3.0], [0.0, 1.0, 1.0]])
    >>> loss = gm.multi_output_squared_loss(X, Y)
    >>> W = np.ones((2, 3))
    >>> round(loss.value(W.reshape(-1)), 12), round(float(np.sum((Y - X @ W) ** 2)) / 2, 12)
    (5.5, 5.5)
    >>> loss  # an ordinary SquaredLoss on m q = 6 flat rows of d = p q = 6 entries
    SquaredLoss(m=6, d=6)
    """
    X = as_finite_array(X, "X")
    Y = as_finite_array(Y, "Y")
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0] or X.shape[0] == 0:
        raise DataError(f"multi_output_squared_loss: X must be (m, p) and Y (m, q) with the "
                        f"same m >= 1, got X {X.shape} and Y {Y.shape}")
    out = multi_output_groups(X, Y, np.array([X.shape[0]]), scaling=scaling, l1=l1, l2=l2)
    first: SquaredLoss = out[0]  # type: ignore[assignment]  # SquaredLoss.from_groups's
    return first



class NuclearNorm(Penalty):
    """The nuclear norm ``phi(v) = ||V||_* = sum_k s_k(V)`` of ``V = vec^{-1}(v)``, a ``p x q``
    matrix (row-major): the GTV penalty of matrix parameters that favours low-rank differences
    ``W_i - W_j``.

    A norm: the dual flow problem (27) has the capacities ``||U_e||_2 <= lambda A_e``
    (spectral norm, the largest singular value) of the flow matrices.  Every row operation is
    one batched SVD of the ``(|E|, p, q)`` stack: the value (sum of singular values), the dual
    norm (the largest), the projection onto the spectral ball (singular values clipped: the
    DU (33) of Algorithm 1), the prox (singular-value soft-thresholding, by Moreau).  The
    projection sorts the rows by their Frobenius norm first: rows surely inside are kept,
    rows within ``4 r`` of the ball are clipped through the eigenpairs of their small Gram
    matrix (half the cost of an SVD, accurate to ``O(eps r)`` there), the others take the
    SVD.  The
    CVXPY forms (``normNuc``, ``sigma_max``: semidefinite cones) are one atom per edge: there
    is no row-wise matrix atom, so the exact problem has one semidefinite cone per edge.

    Capacities are tested like those of the other norms (:func:`gtvmodel._norms.within`): a
    flow passes when its computed largest singular value is at most ``lambda A_e (1 + 4 (p +
    q) eps)``; LAPACK's SVD is backward stable (the computed values are those of a matrix
    within ``c (p + q) eps ||U_e||_2``), so a passing flow is within a few hundred ``eps`` of
    its capacity, inside the certificate's rounding allowance, and the projection clips to
    ``lambda A_e (1 - 4 (p + q) eps)`` so that its flows pass.

    Parameters
    ----------
    shape : (int, int)
        ``(p, q)``, the shape of the node parameters (``d = p q``; the model's ``dim``).

    Raises
    ------
    PenaltyError
        ``shape`` is not a pair of integers ``>= 1``; on a model, ``p q != d``.

    Examples
    --------
    >>> import numpy as np, gtvmodel as gm
    >>> phi = gm.NuclearNorm((2, 2))
    >>> V = np.array([[3.0, 0.0, 0.0, -4.0], [1.0, 1.0, 1.0, 1.0]])   # diag(3, -4), ones
    >>> phi.rows_value(V), phi.dual_norm(V)
    (array([7., 2.]), array([4., 2.]))
    >>> phi.project_dual_ball(V[:1], 1.0).round(12)   # singular values clipped to 1
    array([[ 1.,  0.,  0., -1.]])
    """

    is_norm = True
    kind = "nuclear"

    def l2_equivalence(self, d: int) -> tuple[float, float]:
        # ||X||_* <= sqrt(r) ||X||_F with r = min(p, q), and ||Y||_2 <= ||Y||_F
        k = float(np.sqrt(min(self.shape)))
        return k, k

    def __init__(self, shape: Any):
        try:
            shape = node_shape(tuple(shape) if isinstance(shape, (tuple, list)) else shape)
        except DataError as exc:
            raise PenaltyError(f"NuclearNorm: shape must be (p, q), integers >= 1 ({exc})") \
                from None
        if len(shape) != 2:
            raise PenaltyError(f"NuclearNorm: shape must be a pair (p, q), got {shape!r}")
        self.shape = shape
        p, q = shape
        #: relative slack of the capacity test, ``4 (p + q) eps`` (class docstring)
        self.slack = 4.0 * (p + q) * _EPS

    # ---- numpy rows
    def _mats(self, V: Any) -> np.ndarray:
        V = np.atleast_2d(np.asarray(V, dtype=float))
        return V.reshape(V.shape[0], *self.shape)

    def _singular(self, V: Any) -> np.ndarray:
        """The singular values of every row's matrix, ``(|E|, min(p, q))``, descending; a row
        with NaN or inf gives NaN values."""
        M = self._mats(V)
        ok = np.isfinite(M).all(axis=(1, 2))
        out = np.full((M.shape[0], min(self.shape)), np.nan)
        if ok.any():
            out[ok] = np.linalg.svd(M[ok], compute_uv=False)
        return out

    def rows_value(self, V: np.ndarray) -> np.ndarray:
        """Row-wise ``||V_e||_*``, the sum of the singular values (one batched SVD)."""
        return self._singular(V).sum(axis=1)

    def dual_norm(self, U: np.ndarray) -> np.ndarray:
        """Row-wise spectral norm ``||U_e||_2``, the largest singular value."""
        return self._singular(U)[:, 0]

    def conjugate_rows(self, U: Any, lamA: Any) -> np.ndarray:
        """Capacity indicator (27): ``0`` if ``||U_e||_2 <= lambda A_e (1 + 4 (p + q) eps)``,
        else ``+inf`` (NaN flows fail; at ``lambda A_e = 0`` only the zero flow passes)."""
        dn = self.dual_norm(U)
        c = np.broadcast_to(np.asarray(lamA, dtype=float), dn.shape)
        return np.where(dn <= c * (1.0 + self.slack), 0.0, np.inf)

    def project_dual_ball(self, U: Any, radii: Any) -> np.ndarray:
        """Row-wise Euclidean (Frobenius) projection onto ``{||U_e||_2 <= r_e}``: the singular
        values clipped at ``r_e (1 - 4 (p + q) eps)``; rows already inside are returned as
        they are.  ``radii`` ``>= 0`` (scalar or ``(|E|,)``)."""
        U = np.array(np.atleast_2d(np.asarray(U, dtype=float)))
        r = np.broadcast_to(np.asarray(radii, dtype=float), (U.shape[0],))
        if not (r >= 0).all():
            e = int(np.flatnonzero(~(r >= 0))[0])
            raise PenaltyError(f"NuclearNorm: radius of edge row {e} must be >= 0, got {r[e]}")
        out = self._mats(U)
        # sorting by the Frobenius norm, ||U||_2 <= ||U||_F <= sqrt(t) ||U||_2 (t = min(p, q)):
        # rows surely inside (kept), surely far outside (SVD), the others (Gram eigenpairs)
        up = 1.0 + (self.shape[0] * self.shape[1] + 2) * _EPS  # rounds the norm upwards
        with np.errstate(over="ignore", invalid="ignore"):
            fro = np.sqrt(np.einsum("kab,kab->k", out, out)) * up
        finite = np.isfinite(out).all(axis=(1, 2))
        out[~finite] = np.nan  # NaN/inf rows stay NaN
        far = finite & ~(fro <= 4.0 * np.sqrt(min(self.shape)) * r)  # (overflowed norms too)
        mid = np.flatnonzero(finite & ~far & ~(fro <= r))
        if mid.size:
            lam, vecs = self._gram_eigh(out[mid])
            rm = r[mid]
            over = ~(lam[:, -1] <= rm * rm)  # ||U_e||_2^2 = the Gram's largest eigenvalue
            near = over & (lam[:, -1] <= 16.0 * rm * rm)
            if near.any():
                out[mid[near]] = self._clip_gram(out[mid[near]], lam[near], vecs[near],
                                                 rm[near] * (1.0 - self.slack))
            far[mid[over & ~near]] = True
        if far.any():
            ef = np.flatnonzero(far)
            A, sv, B = np.linalg.svd(out[ef], full_matrices=False)
            sv = np.minimum(sv, (r[ef] * (1.0 - self.slack))[:, None])
            out[ef] = (A * sv[:, None, :]) @ B
        return out.reshape(U.shape)

    def _gram_eigh(self, M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Eigenvalues (ascending, the squared singular values) and eigenvectors of the
        smaller Gram matrix of every ``p x q`` matrix: ``M^T M`` if ``p >= q``, else
        ``M M^T``."""
        G = np.einsum("kab,kac->kbc", M, M) if self.shape[0] >= self.shape[1] else \
            np.einsum("kba,kca->kbc", M, M)
        return np.linalg.eigh(G)

    def _clip_gram(self, M: np.ndarray, lam: np.ndarray, vecs: np.ndarray,
                   r: np.ndarray) -> np.ndarray:
        """``M`` with its singular values clipped at ``r``, from the Gram eigenpairs of
        :meth:`_gram_eigh`: ``M B diag(f) B^T`` (``B`` the right singular vectors, ``p >= q``)
        or ``A diag(f) A^T M`` (``A`` the left ones), ``f = min(1, r / s)``.  Used for rows
        with ``||M||_2 <= 4 r``: then every error is a few ``eps r`` (the eigenvalues' absolute
        error ``eps ||M||_2^2`` is at most ``16 eps r^2``, so the ``f`` of clipped values are
        accurate to ``O(eps)``, and the products carry errors ``eps ||M||_2 <= 4 eps r``);
        rows further out take the SVD."""
        sv = np.sqrt(np.maximum(lam, 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            f = np.where(sv > r[:, None], r[:, None] / sv, 1.0)
        if self.shape[0] >= self.shape[1]:
            return ((M @ vecs) * f[:, None, :]) @ np.swapaxes(vecs, 1, 2)
        return (vecs * f[:, None, :]) @ (np.swapaxes(vecs, 1, 2) @ M)

    def prox_rows(self, V: np.ndarray, t: Any) -> np.ndarray:
        """``prox_{t ||.||_*}(v) = v - P_{||.||_2 <= t}(v)`` (Moreau): singular-value
        soft-thresholding."""
        V = np.atleast_2d(np.asarray(V, dtype=float))
        return V - self.project_dual_ball(V, np.broadcast_to(np.asarray(t, float), (len(V),)))

    def dual_update(self, V: np.ndarray, sigma: Any, lamA: Any) -> np.ndarray:
        """DU (33): the projection onto the spectral ball of radius ``lambda A_e``
        (independent of ``sigma``), as for every norm."""
        return self.project_dual_ball(V, lamA)

    def sublevel_radius(self, slack: float, lamA: Any) -> np.ndarray:
        """``||v||_inf <= ||V||_2 <= ||V||_* <= slack / (lambda A_e)``, rounded up."""
        return _sublevel(slack, lamA, 1.0, square=False)

    def flow_scale(self, d: int, w_scale: float) -> float:
        """The Frobenius radius of the unit spectral ball, ``sqrt(min(p, q))``."""
        return float(np.sqrt(min(self.shape)))

    # ---- CVXPY: one atom per edge (no row-wise matrix atom)
    def _rows_atom(self, Z: Any, atom: Any) -> cp.Expression:
        Z = Z if isinstance(Z, cp.Expression) else cp.Constant(np.asarray(Z, dtype=float))
        if Z.shape[0] == 0:
            return cp.Constant(np.zeros(0))
        return cp.hstack([atom(cp.reshape(Z[e], self.shape, order="C"))
                          for e in range(Z.shape[0])])

    def rows_expression(self, Z: cp.Expression) -> cp.Expression:
        """``(||Z_e||_*)_e``: one ``normNuc`` per row (a semidefinite cone each)."""
        return self._rows_atom(Z, cp.normNuc)

    def dual_norm_expression(self, U: cp.Expression) -> cp.Expression:
        """``(||U_e||_2)_e``: one ``sigma_max`` per row."""
        return self._rows_atom(U, cp.sigma_max)

    def dual_ball_constraints(self, U: cp.Expression, radii: Any) -> list[cp.Constraint]:
        """The capacities ``||U_e||_2 <= radii_e`` (27) (``radii`` may be affine)."""
        return [self.dual_norm_expression(U) <= radii]

    def conjugate_expression(self, U: cp.Expression, lamA: Any
                             ) -> tuple[cp.Expression, list[cp.Constraint]]:
        """The capacities (27): cost ``0`` subject to ``||U_e||_2 <= lambda A_e``."""
        c = np.broadcast_to(np.asarray(lamA, dtype=float), (U.shape[0],))
        return cp.Constant(0.0), self.dual_ball_constraints(U, c)

    def conjugate_parametric(self, U: cp.Expression, weights: np.ndarray, lam: ScaleParameter
                             ) -> tuple[cp.Expression, list[cp.Constraint]]:
        """The capacities ``||U_e||_2 <= lambda A_e`` with ``lambda`` a Parameter."""
        return cp.Constant(0.0), self.dual_ball_constraints(U, lam.value * np.asarray(
            weights, dtype=float))

    # ---- model and file spec
    def check_dim(self, d: int) -> None:
        """``p q`` must be the model's ``d``."""
        if self.shape[0] * self.shape[1] != d:
            raise PenaltyError(f"NuclearNorm{self.shape}: p q = {self.shape[0] * self.shape[1]} "
                               f"but the model has d = {d}")

    def to_spec(self) -> TermSpec:
        """``{"kind": "nuclear", "p": p, "q": q}``."""
        return TermSpec(self.kind, {"p": self.shape[0], "q": self.shape[1]})

    @classmethod
    def from_spec(cls, spec: TermSpec) -> NuclearNorm:
        """``NuclearNorm((p, q))``; ``p``, ``q`` JSON integers ``>= 1``."""
        spec.check_keys(required=("p", "q"))
        at = spec.at or spec.kind
        return cls(tuple(header_int(spec.params[k], f"{at}.{k}", spec.where, 1)
                         for k in ("p", "q")))

    def _key(self) -> tuple:
        return self.shape

    def __repr__(self) -> str:
        return f"NuclearNorm({self.shape})"
