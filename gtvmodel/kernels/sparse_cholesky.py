"""A supernodal sparse Cholesky factorization of symmetric positive definite matrices with a
fixed pattern: CHOLMOD (Chen, Davis, Hager and Rajamanickam, *ACM Trans. Math. Softw.* 35(3),
2008) as cvxopt ships it (``cvxopt.cholmod``, with its own BLAS; the optional extra
``gtvmodel[fast]``).

The symbolic analysis (CHOLMOD's approximate minimum degree order, the supernodes) is done
once per pattern; each :meth:`SparseCholesky.factor` is a numeric factorization of new values
on that pattern.  Its supernodes run the dense columns of ``L`` through BLAS-3: on the Newton
matrices of the flow recovery's phase I (:mod:`gtvmodel.kernels.feasible_flow`, a 1,000-node
SBM at ``d = 3``) about 3x faster than SciPy's SuperLU in the same order (``benchmarks/
RESULTS.md``, eighth round of the weights-only certificate).  CHOLMOD's simplicial mode (a
column at a time, what a build without BLAS runs) is slower than SuperLU on the same matrices.
Without cvxopt, :func:`available` is False and the callers use SuperLU.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["available", "SparseCholesky"]


def available() -> bool:
    """cvxopt (with CHOLMOD) is importable."""
    return importlib.util.find_spec("cvxopt") is not None


def _cvxopt() -> ModuleType:
    """The ``cvxopt`` module with its ``cholmod`` submodule loaded (imported on first use:
    the package imports without it)."""
    cvx = importlib.import_module("cvxopt")
    importlib.import_module("cvxopt.cholmod")
    return cvx


class SparseCholesky:
    """``P S P^T = L L^T`` for symmetric positive definite ``S`` (``n x n``) on one pattern,
    given by its lower triangle in CSC form (``indptr``, row ``indices`` sorted within each
    column, diagonal included): the symbolic analysis at construction (supernodal, CHOLMOD's
    order ``P``), a numeric factorization per :meth:`factor`.  :meth:`solve` solves with the
    last factorization (one factor at a time: each :meth:`factor` overwrites it).  Raises
    ``ValueError`` if the pattern is not sorted or CHOLMOD's symbolic analysis fails."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, n: int) -> None:
        cvx = _cvxopt()
        self._cvx, self._chol = cvx, cvx.cholmod
        self.n = n
        cols = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        self._A = cvx.spmatrix(cvx.matrix(np.ones(cols.size)),
                               _index(cvx, np.asarray(indices, dtype=np.int64)),
                               _index(cvx, cols), (n, n))
        # cvxopt stores the entries in column-major order, rows sorted: ours, if sorted
        if not np.array_equal(np.asarray(self._A.CCS[1]).ravel(), indices):
            raise ValueError("SparseCholesky: the row indices must be sorted within each "
                             "column, without duplicates")
        with _supernodal(self._chol):
            self._F = self._chol.symbolic(self._A)

    def factor(self, values: np.ndarray) -> bool:
        """Factor the matrix with the lower triangle's entries ``values`` (in the pattern's
        order); False if it is not (numerically) positive definite."""
        self._A.V = self._cvx.matrix(np.asarray(values, dtype=np.float64))
        try:
            self._chol.numeric(self._A, self._F)
        except ArithmeticError:
            return False
        return True

    def solve(self, b: np.ndarray) -> np.ndarray:
        """``S^-1 b`` for a vector or the columns of an ``(n, k)`` array."""
        X = self._cvx.matrix(np.asarray(b, dtype=np.float64))
        self._chol.solve(self._F, X)
        out = np.asarray(X)
        return out.ravel() if b.ndim == 1 else out


def _index(cvx: ModuleType, a: np.ndarray) -> Any:
    """An integer ``cvxopt.matrix`` of the ``int64`` array ``a``: through the buffer protocol,
    else (a build whose integers do not accept it) from a list (6 ms per 50,000 entries)."""
    try:
        return cvx.matrix(a)
    except (TypeError, ValueError, NotImplementedError):
        return cvx.matrix(a.tolist(), tc="i")


class _supernodal:
    """CHOLMOD's supernodal mode (``options['supernodal'] = 2``) for the duration of a
    symbolic analysis; the caller's option restored after."""

    def __init__(self, chol: Any) -> None:
        self.chol = chol

    def __enter__(self) -> None:
        self.old = self.chol.options.get("supernodal")
        self.chol.options["supernodal"] = 2

    def __exit__(self, *exc: object) -> None:
        if self.old is None:
            self.chol.options.pop("supernodal", None)
        else:
            self.chol.options["supernodal"] = self.old
