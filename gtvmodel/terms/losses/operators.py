"""The squared losses' node operator of Algorithm 1 in its cheapest exact forms: the prox (69)
``w_i = M_i (v_i + 2 tau_i q_i)``, ``M_i = (alpha_i I + beta_i X_i^T X_i)^{-1}`` with ``alpha_i =
1 + 2 tau_i kappa_i`` and ``beta_i = 2 tau_i / m_i``, as ``d x d`` matrices
(:class:`DenseOperator`, from the eigen-decompositions of ``Q_i``) or, where ``m_i < d``, from
the samples by Woodbury's identity (:class:`SampleOperator`):

    M_i = (I - X_i^T K_i X_i) / alpha_i,   K_i = (alpha_i / beta_i I + X_i X_i^T)^{-1}  (m_i x m_i),

``2 m d + m^2`` multiply-adds and ``m (d + m)`` numbers per node where the ``d x d`` matrix
takes ``d^2`` of each, and no ``d x d`` factorization at all (:meth:`~gtvmodel.terms.losses.
batches.SquaredBatch.affine_operators` chooses; :mod:`gtvmodel._compiled` applies them).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ... import _xp

__all__ = ["DenseOperator", "SampleOperator", "eig_inverse", "sample_operator", "CHUNK_NODES"]

#: Nodes per chunk of :func:`sample_operator` (bounds its temporaries).
CHUNK_NODES = 1 << 15


class DenseOperator(NamedTuple):
    """The node operator of (69) of the batch's nodes ``local`` as ``d x d`` matrices:
    ``w_a = M_a (v_a + b_a)``."""

    local: np.ndarray  # positions in the batch
    M: np.ndarray      # (k, d, d)
    b: np.ndarray      # (k, d): 2 tau q


class SampleOperator(NamedTuple):
    """The node operator of (69) of the batch's nodes ``local`` (``m_a < d``) from their
    samples (module docstring): ``w_a = (u - X_a^T K_a X_a u) / alpha_a``, ``u = v_a + 2 tau_a
    q_a``.  ``X`` is the batch's stacked samples (not a copy): node ``a``'s rows
    ``starts[a]:starts[a] + ms[a]``; ``K`` holds ``K_a`` row-major from ``koff[a]``."""

    local: np.ndarray      # positions in the batch
    X: np.ndarray          # (M, d): the stacked samples
    starts: np.ndarray     # (k,) first row of each node in X (32-bit where it fits)
    ms: np.ndarray         # (k,)
    K: np.ndarray          # (sum m_a^2,)
    koff: np.ndarray       # (k + 1,)
    inv_alpha: np.ndarray  # (k,): 1 / alpha
    q: np.ndarray          # (k, d): X^T y / m (b = 2 tau q is formed in the pass)


def eig_inverse(e: Any, B: Any, tau: Any, l2: Any) -> Any:
    """``(I (1 + 2 tau kappa) + 2 tau Q)^{-1} = B diag(1/(1 + 2 tau (kappa + e))) B^T`` per
    node from ``Q = B diag(e) B^T`` (any array namespace)."""
    xp = _xp.namespace(B)
    den = 1.0 + 2.0 * tau[:, None] * (l2[:, None] + e)
    return xp.matmul(B / den[:, None, :], xp.permute_dims(B, (0, 2, 1)))


def sample_operator(Xs: np.ndarray, starts: np.ndarray, ms: np.ndarray, local: np.ndarray,
                    tau: np.ndarray, l2: np.ndarray, q: np.ndarray) -> SampleOperator:
    """:class:`SampleOperator` of the nodes ``local`` of a batch with stacked samples ``Xs``
    (their first rows ``starts``, counts ``ms < d``, steps ``tau``, ``kappa = l2``, ``q``):
    ``K_a`` by batched inverses of the ``m x m`` matrices ``alpha/beta I + X_a X_a^T``, per
    value of ``m``, in chunks of :data:`CHUNK_NODES` nodes."""
    koff = np.zeros(local.size + 1, dtype=np.int64)
    np.cumsum(ms * ms, out=koff[1:])
    K = np.empty(int(koff[-1]))
    alpha = 1.0 + 2.0 * tau * l2
    shift = alpha * ms / (2.0 * tau)  # alpha / beta
    for m in np.unique(ms).tolist():
        sel = np.flatnonzero(ms == m)
        for c0 in range(0, sel.size, CHUNK_NODES):
            part = sel[c0:c0 + CHUNK_NODES]
            X = Xs[starts[part][:, None] + np.arange(m)]  # (p, m, d)
            A = np.matmul(X, np.swapaxes(X, 1, 2))
            A[:, np.arange(m), np.arange(m)] += shift[part, None]
            K[koff[part][:, None] + np.arange(m * m)] = np.linalg.inv(A).reshape(-1, m * m)
    it = np.int32 if Xs.shape[0] < 2**31 else np.int64
    return SampleOperator(local, Xs, starts.astype(it), ms.astype(it), K, koff, 1.0 / alpha, q)
