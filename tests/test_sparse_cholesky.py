"""CHOLMOD's supernodal Cholesky through cvxopt (gtvmodel/kernels/sparse_cholesky.py): one
symbolic analysis per pattern, numeric factorizations of new values, checked against SciPy's
direct solves; skipped without cvxopt (the optional extra ``gtvmodel[fast]``)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spl

from gtvmodel.kernels import sparse_cholesky
from gtvmodel.kernels.sparse_cholesky import SparseCholesky

pytestmark = pytest.mark.skipif(not sparse_cholesky.available(), reason="cvxopt not installed")


def _spd(seed: int, n: int) -> sp.csc_matrix:
    """A sparse symmetric positive definite matrix: a random graph's Laplacian plus a
    positive diagonal."""
    G = nx.gnp_random_graph(n, 6 / n, seed=seed)
    rng = np.random.default_rng(seed)
    for a, b in G.edges:
        G[a][b]["weight"] = rng.uniform(0.1, 10.0)
    L = sp.csc_matrix(nx.laplacian_matrix(G, weight="weight").astype(float))
    return sp.csc_matrix(L + sp.diags(rng.uniform(1e-3, 1.0, n)))


@pytest.mark.parametrize("seed", range(3))
def test_sparse_cholesky_solves_each_new_matrix_on_its_pattern(seed: int) -> None:
    """One symbolic analysis, then numeric factorizations of new values on the pattern:
    each solve (a vector, two columns) agrees with SciPy's direct solve of the same matrix."""
    S = _spd(seed, 120)
    L = sp.tril(S, format="csc")
    L.sort_indices()
    chol = SparseCholesky(L.indptr, L.indices, S.shape[0])
    rng = np.random.default_rng(seed)
    for _ in range(3):
        Lv = L.copy()
        Lv.data = L.data * rng.uniform(0.5, 2.0, L.nnz)  # diagonally dominant: still SPD
        Lv.data[Lv.indices == np.repeat(np.arange(S.shape[0]), np.diff(Lv.indptr))] *= 4.0
        Sv = sp.csc_matrix(Lv + sp.tril(Lv, -1).T)
        assert chol.factor(Lv.data)
        b = rng.normal(size=(S.shape[0], 2))
        ref = spl.spsolve(Sv, b)
        np.testing.assert_allclose(chol.solve(b), ref, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(chol.solve(b[:, 0]), ref[:, 0], rtol=1e-10, atol=1e-12)


def test_sparse_cholesky_rejects_indefinite_matrices_and_unsorted_patterns() -> None:
    """``factor`` says False for a matrix that is not positive definite (the callers then
    use SuperLU), and a pattern whose rows are not sorted within a column is refused."""
    S = _spd(0, 50)
    L = sp.tril(S, format="csc")
    L.sort_indices()
    chol = SparseCholesky(L.indptr, L.indices, S.shape[0])
    assert not chol.factor(-L.data)
    assert chol.factor(L.data)
    rows = L.indices.copy()
    c = int(np.argmax(np.diff(L.indptr)))
    rows[L.indptr[c]:L.indptr[c + 1]] = rows[L.indptr[c]:L.indptr[c + 1]][::-1]
    with pytest.raises(ValueError, match="sorted"):
        SparseCholesky(L.indptr, rows, S.shape[0])


def test_index_arrays_from_a_list_where_the_buffer_is_refused() -> None:
    """A cvxopt build whose integer matrices refuse an ``int64`` buffer gets the indices from a
    list (the fallback of ``_index``), with the same entries."""
    cvx = sparse_cholesky._cvxopt()

    class Refusing:
        @staticmethod
        def matrix(x, tc=None):
            if isinstance(x, np.ndarray):
                raise TypeError("buffer format not supported")
            return cvx.matrix(x, tc=tc)

    a = np.array([3, 0, 7, 2], dtype=np.int64)
    m = sparse_cholesky._index(Refusing, a)
    assert m.typecode == "i"
    assert list(m) == a.tolist()
