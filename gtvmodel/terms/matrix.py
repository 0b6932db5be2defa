"""Matrix-valued node parameters ``W_i in R^{p x q}`` (``GTVModel(G, dim=(p, q))``).

A matrix model is the vector model (16) on ``w_i = vec(W_i) in R^d``, ``d = p q``, with the
row-major vectorization of numpy's ``reshape``: ``vec(W)[a q + b] = W[a, b]``.  Every engine
works on the flat ``(n, d)`` arrays unchanged; the penalties act on the flat difference
``vec(W_i - W_j)``, so :class:`~gtvmodel.terms.penalties.Norm2` is the Frobenius norm
``||W_i - W_j||_F`` and :class:`~gtvmodel.terms.penalties.Norm1` the entrywise ``l1`` norm.

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

import numpy as np

from .._validate import as_finite_array, check_int, check_option
from ..errors import DataError
from .losses import Loss, SquaredLoss

__all__ = ["node_shape", "multi_output_rows", "multi_output_squared_loss"]


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
    return out[0]

