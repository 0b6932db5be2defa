"""Distances between nodes, from feature summaries or local-dataset statistics.

* :func:`euclidean_distances`: ``||z_i - z_j||_2`` between summaries (rows of ``Z``);
* :func:`wasserstein_distances`: the Gaussian Wasserstein distance (42) of "Networked Federated
  Learning" (Section VI-E) between ``N(mu^(i), Sigma^(i))`` and ``N(mu^(j), Sigma^(j))``.  As
  printed (and here) it is the **squared** 2-Wasserstein distance (``docs/conventions.md``);
  its square root is the metric;
* :func:`pairwise_distances`: any user function, called on batches of row pairs;
* :func:`check_distances`: the validation every graph builder applies to a distance matrix.

All of them work on node pairs in vectorized batches (no double Python loop).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.spatial.distance import cdist

from .._validate import as_finite_array, check_int
from ..errors import DataError

__all__ = ["check_distances", "euclidean_distances", "pairwise_distances",
           "wasserstein_distances"]

#: node pairs per batch of the pairwise computations (bounds the memory of the batches)
PAIR_BATCH = 20_000


def euclidean_distances(Z: Any) -> np.ndarray:
    """``(n, n)`` Euclidean distances ``||z_i - z_j||_2`` between the rows of ``Z`` (``(n, p)``
    feature summaries, e.g. the means of :func:`~gtvmodel.graphs.statistics.node_statistics`).

    Examples
    --------
    >>> euclidean_distances([[0.0, 0.0], [3.0, 4.0]]).tolist()
    [[0.0, 5.0], [5.0, 0.0]]
    """
    Z = _rows(Z, "Z", "euclidean_distances")
    return cdist(Z, Z)


def wasserstein_distances(means: Any, covariances: Any) -> np.ndarray:
    """The Gaussian Wasserstein distances (42) of "Networked Federated Learning":

        W_ij = ||mu_i - mu_j||^2
               + tr(Sigma_i + Sigma_j - 2 (Sigma_i^{1/2} Sigma_j Sigma_i^{1/2})^{1/2}),

    the *squared* 2-Wasserstein distance between ``N(mu_i, Sigma_i)`` and ``N(mu_j, Sigma_j)``
    (Givens and Shortt).  ``means`` is ``(n, d)``, ``covariances`` ``(n, d, d)`` symmetric
    positive semidefinite.  The square roots ``Sigma_i^{1/2}`` come from one batched
    :func:`numpy.linalg.eigh` of the stacked matrices; the trace of the inner square root is
    the sum of the square roots of the eigenvalues of ``Sigma_i^{1/2} Sigma_j Sigma_i^{1/2}``,
    batched over node pairs (:data:`PAIR_BATCH` at a time).  Rounding below zero is clipped;
    the result is symmetric with a zero diagonal.

    Raises :class:`~gtvmodel.errors.DataError` for shapes that do not match, NaN/inf, a
    covariance that is not symmetric or has a negative eigenvalue (naming the node position).

    Examples
    --------
    >>> import numpy as np
    >>> W = wasserstein_distances([[0.0], [1.0]], [[[1.0]], [[4.0]]])
    >>> np.round(W, 12).tolist()  # (0 - 1)^2 + 1 + 4 - 2 * sqrt(4)
    [[0.0, 2.0], [2.0, 0.0]]
    """
    mu = _rows(means, "means", "wasserstein_distances")
    n, d = mu.shape
    S = as_finite_array(covariances, "covariances", ndim=3, owner="wasserstein_distances")
    if S.shape != (n, d, d):
        raise DataError(f"wasserstein_distances: covariances must have shape {(n, d, d)}, "
                        f"got {S.shape}")
    roots = _psd_roots(S)
    traces = np.trace(S, axis1=1, axis2=2)
    out = np.zeros((n, n))
    first, second = np.triu_indices(n, 1)
    for lo in range(0, len(first), PAIR_BATCH):
        i, j = first[lo:lo + PAIR_BATCH], second[lo:lo + PAIR_BATCH]
        inner = roots[i] @ S[j] @ roots[i]
        inner = 0.5 * (inner + inner.transpose(0, 2, 1))
        cross = np.sqrt(np.clip(np.linalg.eigvalsh(inner), 0.0, None)).sum(axis=1)
        w = ((mu[i] - mu[j]) ** 2).sum(axis=1) + traces[i] + traces[j] - 2.0 * cross
        out[i, j] = out[j, i] = np.clip(w, 0.0, None)
    return out


def pairwise_distances(items: Any, metric: Callable[[np.ndarray, np.ndarray], Any]
                       ) -> np.ndarray:
    """``(n, n)`` distances ``metric(a_i, a_j)`` between the rows of ``items`` (``(n, ...)``)
    for a user-given ``metric``.

    ``metric(A, B)`` is called on batches of row pairs: ``A = items[I]``, ``B = items[J]``
    (each ``(len(I), ...)``, ``I < J`` elementwise) and returns the ``len(I)`` distances.  The
    result is symmetric with a zero diagonal and checked by :func:`check_distances`
    (:class:`~gtvmodel.errors.DataError` for a negative or NaN distance, naming the pair).

    Examples
    --------
    >>> import numpy as np
    >>> D = pairwise_distances([[0.0], [1.0], [3.0]], lambda A, B: np.abs(A - B).sum(axis=1))
    >>> D.tolist()
    [[0.0, 1.0, 3.0], [1.0, 0.0, 2.0], [3.0, 2.0, 0.0]]
    """
    if not callable(metric):
        raise DataError(f"pairwise_distances: metric must be callable, got {metric!r}")
    A = np.asarray(items)
    n = check_int(A.shape[0] if A.ndim else 0, "len(items)", min_val=1,
                  where="pairwise_distances", error=DataError)
    out = np.zeros((n, n))
    first, second = np.triu_indices(n, 1)
    for lo in range(0, len(first), PAIR_BATCH):
        i, j = first[lo:lo + PAIR_BATCH], second[lo:lo + PAIR_BATCH]
        vals = np.asarray(metric(A[i], A[j]), dtype=float)
        if vals.shape != i.shape:
            raise DataError(f"pairwise_distances: metric returned shape {vals.shape} for "
                            f"{len(i)} pairs (it must return one distance per pair)")
        out[i, j] = out[j, i] = vals
    return check_distances(out, "metric")


def check_distances(dist: Any, name: str = "dist", where: str = "") -> np.ndarray:
    """``dist`` as a validated ``(n, n)`` float distance matrix: square, symmetric (to
    ``1e-9`` relative), no NaN, non-negative off the diagonal (``+inf`` allowed: "never an
    edge"); the diagonal is ignored (set to 0).  Raises :class:`~gtvmodel.errors.DataError`
    naming ``name`` and the first bad pair."""
    pre = f"{where}: " if where else ""
    D = np.array(dist, dtype=float)
    if D.ndim != 2 or D.shape[0] != D.shape[1] or D.shape[0] == 0:
        raise DataError(f"{pre}{name} must be a square (n, n) matrix, got shape {D.shape}")
    np.fill_diagonal(D, 0.0)
    for bad, what in ((np.isnan(D), "NaN"), (D < 0, "negative")):
        if bad.any():
            i, j = (int(k) for k in np.argwhere(bad)[0])
            raise DataError(f"{pre}{name}[{i}, {j}] is {what} ({D[i, j]!r}); distances must "
                            "be non-negative numbers")
    finite = np.isfinite(D) & np.isfinite(D.T)
    asym = finite & (np.abs(D - D.T) > 1e-9 * np.maximum(np.abs(D), 1.0))
    asym |= np.isfinite(D) != np.isfinite(D.T)
    if asym.any():
        i, j = (int(k) for k in np.argwhere(asym)[0])
        raise DataError(f"{pre}{name} is not symmetric: {name}[{i}, {j}] = {D[i, j]!r} but "
                        f"{name}[{j}, {i}] = {D[j, i]!r}")
    return D


def _rows(Z: Any, name: str, where: str) -> np.ndarray:
    Z = as_finite_array(Z, name, owner=where)
    if Z.ndim == 1:
        Z = Z[:, None]
    if Z.ndim != 2 or Z.shape[0] == 0:
        raise DataError(f"{where}: {name} must be a non-empty (n, p) array, got {Z.shape}")
    return Z


def _psd_roots(S: np.ndarray) -> np.ndarray:
    """Symmetric square roots of stacked PSD matrices ``(n, d, d)`` by one batched eigh."""
    asym = np.abs(S - S.transpose(0, 2, 1)).max(axis=(1, 2)) > 1e-9 * np.maximum(
        np.abs(S).max(axis=(1, 2)), 1.0)
    if asym.any():
        raise DataError(f"wasserstein_distances: covariances[{int(np.flatnonzero(asym)[0])}] "
                        "is not symmetric")
    vals, vecs = np.linalg.eigh(0.5 * (S + S.transpose(0, 2, 1)))
    tol = 1e-10 * np.maximum(np.abs(vals).max(axis=1), 1.0)
    neg = (vals < -tol[:, None]).any(axis=1)
    if neg.any():
        k = int(np.flatnonzero(neg)[0])
        raise DataError(f"wasserstein_distances: covariances[{k}] is not positive "
                        f"semidefinite (eigenvalue {vals[k].min():.3g})")
    return (vecs * np.sqrt(np.clip(vals, 0.0, None))[:, None, :]) @ vecs.transpose(0, 2, 1)
