"""Per-node summaries of local datasets: the mean ``mu^(i)`` and covariance ``Sigma^(i)`` that
the Gaussian Wasserstein distance (42) of "Networked Federated Learning" (Section VI-E) compares.

Everything is computed at once on the concatenated samples (segment sums by
:func:`numpy.add.reduceat`), not by a Python loop over nodes.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validate import as_finite_array, check_scalar
from ..errors import DataError

__all__ = ["NodeStatistics", "node_statistics"]


@dataclass(frozen=True)
class NodeStatistics:
    """Mean and covariance of each node's local dataset, in ``nodes`` order.

    Attributes
    ----------
    nodes : list
        Node labels (the keys of the mapping given, or ``0..n-1`` for a sequence).
    means : numpy.ndarray
        ``(n, d)``, row ``i`` is ``mu^(i)``.
    covariances : numpy.ndarray
        ``(n, d, d)``, ``Sigma^(i)`` (sample covariance with ``m_i - 1`` in the denominator,
        plus ``ridge * I`` where ``m_i <= d``).
    sizes : numpy.ndarray
        ``(n,)`` sample counts ``m_i``.
    """

    nodes: list
    means: np.ndarray
    covariances: np.ndarray
    sizes: np.ndarray


def node_statistics(data: Mapping[Hashable, Any] | Sequence[Any], ridge: float = 1e-6
                    ) -> NodeStatistics:
    """Mean ``mu^(i)`` and covariance ``Sigma^(i)`` of every local dataset ``X^(i)`` (rows are
    samples), as used by (42) of "Networked Federated Learning".

    ``data`` maps node labels to ``(m_i, d)`` arrays (or is a sequence of them, labelled
    ``0..n-1``).  The covariance is the unbiased sample covariance (``1/(m_i - 1)``; zero when
    ``m_i = 1``).  With ``m_i <= d`` it is singular, so ``ridge * I`` is added to it there
    (``ridge >= 0``, default ``1e-6``): the Wasserstein distance stays defined and continuous,
    and nodes with enough samples are left exactly as measured.

    Raises :class:`~gtvmodel.errors.DataError` naming the node for an empty dataset, NaN/inf or
    a dimension different from the others.

    Examples
    --------
    >>> import numpy as np
    >>> s = node_statistics({"a": [[0.0, 0.0], [2.0, 2.0]], "b": [[1.0, 3.0]]}, ridge=0.5)
    >>> s.means.tolist(), s.sizes.tolist()
    ([[1.0, 1.0], [1.0, 3.0]], [2, 1])
    >>> s.covariances[0].tolist(), s.covariances[1].tolist()  # m_i <= d: ridge added
    ([[2.5, 2.0], [2.0, 2.5]], [[0.5, 0.0], [0.0, 0.5]])
    """
    ridge = check_scalar(ridge, "ridge", min_val=0.0, where="node_statistics", error=DataError)
    if isinstance(data, Mapping):
        nodes, arrays = list(data.keys()), list(data.values())
    else:
        arrays = list(data)
        nodes = list(range(len(arrays)))
    if not arrays:
        raise DataError("node_statistics: data holds no node")
    X = [_samples(a, node) for node, a in zip(nodes, arrays, strict=True)]
    d = X[0].shape[1]
    for node, x in zip(nodes, X, strict=True):
        if x.shape[1] != d:
            raise DataError(f"node_statistics: node {node!r} has {x.shape[1]} features, "
                            f"node {nodes[0]!r} has {d}")
    sizes = np.array([x.shape[0] for x in X])
    allx = np.concatenate(X)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    means = np.add.reduceat(allx, starts, axis=0) / sizes[:, None]
    centred = allx - np.repeat(means, sizes, axis=0)
    scatter = np.add.reduceat(np.einsum("ri,rj->rij", centred, centred), starts, axis=0)
    covs = scatter / np.maximum(sizes - 1, 1)[:, None, None]
    covs[sizes <= d] += ridge * np.eye(d)
    return NodeStatistics(nodes=nodes, means=means, covariances=covs, sizes=sizes)


def _samples(a: Any, node: Hashable) -> np.ndarray:
    x = as_finite_array(a, "data", owner=f"node_statistics: node {node!r}")
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] == 0:
        raise DataError(f"node_statistics: node {node!r} needs a non-empty (m_i, d) array, "
                        f"got shape {x.shape}")
    return x
