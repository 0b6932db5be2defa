"""Batched dense linear algebra of the solvers: small blocks, one per node, stacked.

- :func:`_pinv_rows`: pseudo-inverses of stacked row blocks (QR where the rows are
  independent, SVD otherwise), the free rows' solves of the active-set steps;
- :func:`spd_solve`: stacked symmetric positive definite solves (Cholesky written out for
  ``d <= 4``), the Newton steps of the smooth composite prox;
- :func:`grouped_gram`: ``G_i = sum_r w_r x_r x_r^T`` over consecutive row groups, the
  Hessians of :func:`~gtvmodel.kernels.newton.newton_minimize`.
"""

from __future__ import annotations

import numpy as np


def _pinv_rows(A: np.ndarray, on: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """``pinv(A_i)``, ``(k, d, F)``, of ``k`` blocks ``A_i`` ``(F, d)`` whose rows ``on`` come
    first (the others are zero padding): ``Q R^{-T}`` from the QR factorization ``A_i^T = Q R``
    of the first ``min(F, d)`` rows (a unit diagonal in ``R``'s padding) where the rows are
    independent (``|R_jj| > rtol max |R_jj|``), else by SVD (``numpy.linalg.pinv``: more rows
    than ``d``, or dependent rows; also every block where at most 8 have two rows or more,
    whose one SVD call costs less than the QR path's steps); ``0`` where no row is on, ``a /
    ||a||^2`` for one row ``a``."""
    k, F, d = A.shape
    Fq = min(F, d)
    out = np.zeros((k, d, F))
    nf = on.sum(axis=1)
    one = np.flatnonzero(nf == 1)  # one row a (the first): pinv = a / ||a||^2
    if one.size:
        a = A[one, 0]
        n2 = np.einsum("kd,kd->k", a, a)
        out[one, :, 0] = a / np.where(n2 > 0, n2, np.inf)[:, None]
    some = np.flatnonzero(nf > 1)
    if some.size == 0:
        return out
    if some.size <= 8:  # a few blocks (later active-set steps): one SVD call costs less
        out[some] = np.linalg.pinv(A[some])
        return out
    onq = on[some, :Fq]
    Q, Rm = np.linalg.qr(A[some, :Fq].transpose(0, 2, 1))
    diag = np.abs(np.diagonal(Rm, axis1=1, axis2=2))
    big = np.where(onq, diag, 0.0).max(axis=1, initial=0.0)
    good = (~onq | (diag > rtol * big[:, None])).all(axis=1) & (nf[some] <= Fq)
    Rp = np.where(good[:, None, None], Rm, np.eye(Fq)) + np.eye(Fq) * (~onq)[:, :, None]
    out[some, :, :Fq] = (Q @ np.linalg.inv(Rp).transpose(0, 2, 1)) * onq[:, None, :]
    bad = some[~good]
    if bad.size:
        out[bad] = np.linalg.pinv(A[bad])
    return out


def spd_solve(H: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``x_i = H_i^{-1} b_i`` for ``k`` symmetric positive definite ``H_i`` ``(d, d)``: for ``d
    <= 4`` by a Cholesky factorization ``H = L L^T`` written out over the ``d^2 / 2`` entries
    (each a vector over the nodes: no per-node LAPACK call, several times faster there), else
    ``numpy.linalg.solve``.  A matrix that is not positive definite gives ``nan`` (the callers
    certify every answer)."""
    k, d = b.shape
    if d > 4:
        return np.linalg.solve(H, b[:, :, None])[:, :, 0]
    L: list[list[np.ndarray]] = [[] for _ in range(d)]  # L[j][i], i <= j
    with np.errstate(invalid="ignore", divide="ignore"):
        for j in range(d):
            for i in range(j + 1):
                v = H[:, j, i] - sum((L[j][q] * L[i][q] for q in range(i)), np.zeros(k))
                L[j].append(np.sqrt(v) if i == j else v / L[i][i])
        y: list[np.ndarray] = []
        for j in range(d):  # L y = b
            y.append((b[:, j] - sum((L[j][q] * y[q] for q in range(j)), np.zeros(k))) / L[j][j])
        x: list[np.ndarray] = [np.zeros(k)] * d
        for j in reversed(range(d)):  # L^T x = y
            x[j] = (y[j] - sum((L[q][j] * x[q] for q in range(j + 1, d)), np.zeros(k))) / L[j][j]
    return np.stack(x, axis=1)


def grouped_gram(Xs: np.ndarray, weights: np.ndarray, starts: np.ndarray,
                  chunk_rows: int = 1 << 16) -> np.ndarray:
    """``G_i = sum_{r in node i} weights_r x_r x_r^T`` for consecutive row groups starting at
    ``starts``; an ``(k, d, d)`` array, computed in chunks of nodes to bound memory."""
    k, d = len(starts), Xs.shape[1]
    out = np.empty((k, d, d))
    ends = np.append(starts[1:], Xs.shape[0])
    i = 0
    while i < k:
        # the nodes i..j-1 whose rows end within chunk_rows of the chunk start (at least one)
        j = int(np.searchsorted(ends, starts[i] + chunk_rows, side="right"))
        j = min(max(j, i + 1), k)
        r0, r1 = starts[i], ends[j - 1]
        R = Xs[r0:r1]
        out[i:j] = np.add.reduceat((R * weights[r0:r1, None])[:, :, None] * R[:, None, :],
                                   starts[i:j] - r0, axis=0)
        i = j
    return out



def write_sample_svd(Xs: np.ndarray, starts: np.ndarray, ms: np.ndarray, nodes: np.ndarray,
                     e: np.ndarray, V: np.ndarray) -> None:
    """Write the factors of ``Q_i = X_i^T X_i / m_i`` from the SVD of the samples ``X_i`` (rows
    ``starts[i]:starts[i] + ms[i]`` of ``Xs``, ``(M, d)``) into ``e[i]`` (``(k, d)``) and
    ``V[i]`` (``(k, d, d)``) in place, at the positions ``nodes``: ``e_ij = sigma_ij^2 / m_i``
    ascending (zeros past ``rank <= m_i``), ``V_i`` the right singular vectors in the same
    order; accurate to about ``eps sigma_max`` where the eigen-decomposition of the formed
    ``Q_i`` is accurate to ``eps sigma_max^2`` only.  A QR first where ``m_i > d``; batched over
    the nodes with the same ``m_i``, in pieces of about 2^22 sample entries."""
    d = Xs.shape[1]
    for m in np.unique(ms[nodes]):
        same = nodes[ms[nodes] == m]
        for part in np.array_split(same, -(-same.size * int(m) * d // 2**22)):
            A = Xs[starts[part][:, None] + np.arange(m)]  # (kp, m, d)
            if m > d:
                A = np.linalg.qr(A, mode="r")
            _, sv, Vh = np.linalg.svd(A, full_matrices=True)
            e[part] = 0.0
            e[part, d - sv.shape[1]:] = sv[:, ::-1] ** 2 / m
            V[part] = np.swapaxes(Vh, 1, 2)[:, :, ::-1]
