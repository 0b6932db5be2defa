"""Partitions ``P = {C_1, ..., C_k}`` of the nodes (Theorem 2 of paper 001): validation into
cluster indices, the intra-cluster edge mask and the connectivity requirement of Definition 1."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..declaration import ModelDeclaration, components
from ..errors import PartitionError

__all__ = ["Partition", "normalize_partition", "intra_edges", "require_connected"]


@dataclass
class Partition:
    """A partition ``P = {C_1, ..., C_k}`` of the nodes (Theorem 2), as indices.

    ``labels``: the cluster labels in partition order; ``members``: the node positions of each
    cluster (model order); ``cid`` ``(n,)``: the cluster index of every node.
    """

    labels: list[Hashable]  # cluster labels, partition order
    members: list[np.ndarray]  # node positions of each cluster (model order)
    cid: np.ndarray  # (n,) cluster index of every node


def normalize_partition(model: ModelDeclaration, partition: Any) -> Partition:
    """Validate a partition ``P = {C_1, ..., C_k}`` of Theorem 2 into cluster indices.

    ``partition`` is a list of collections of node labels (cluster labels ``0..k-1``) or a dict
    ``node -> cluster label``; it must list every node exactly once
    (:class:`~gtvmodel.errors.PartitionError`, :class:`~gtvmodel.errors.UnknownNodeError`).
    Returns the cluster labels in partition order, each cluster's node positions (model order)
    and the cluster index ``C(i)`` of every node.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)  # triangles joined by edge (2, 3)
    >>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> part = normalize_partition(model, {0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "b"})
    >>> part.labels, part.cid.tolist()
    (['a', 'b'], [0, 0, 0, 1, 1, 1])
    >>> normalize_partition(model, [[0, 1, 2], [3, 4]])
    Traceback (most recent call last):
    ...
    gtvmodel.errors.PartitionError: the partition misses 1 node(s): 5
    """
    n = model.num_nodes
    cid = np.full(n, -1, dtype=np.int64)
    labels: list[Hashable] = []
    if isinstance(partition, Mapping):
        index: dict[Hashable, int] = {}
        for node, lab in partition.items():
            i = model.index(node)  # UnknownNodeError names the node
            try:
                c = index.setdefault(lab, len(index))
            except TypeError:
                raise PartitionError(
                    f"node {node!r}: cluster label {lab!r} is not hashable") from None
            if c == len(labels):
                labels.append(lab)
            cid[i] = c
    elif isinstance(partition, (str, bytes)) or not isinstance(partition, Iterable):
        raise PartitionError(
            "partition must be a list of collections of node labels or a dict node -> cluster "
            f"label, got {type(partition).__name__}")
    else:
        for c, cluster in enumerate(partition):
            if isinstance(cluster, (str, bytes)) or not isinstance(cluster, Iterable):
                raise PartitionError(
                    f"cluster {c} must be a collection of node labels, got "
                    f"{type(cluster).__name__} {cluster!r}")
            members = list(cluster)
            if not members:
                raise PartitionError(f"cluster {c} is empty")
            labels.append(c)
            for node in members:
                i = model.index(node)
                if cid[i] >= 0:
                    where = (f"twice in cluster {c}" if cid[i] == c
                             else f"in clusters {int(cid[i])} and {c}")
                    raise PartitionError(
                        f"node {node!r} appears {where}: a partition lists every node once")
                cid[i] = c
    if not labels:
        raise PartitionError("the partition has no clusters")
    missing = np.flatnonzero(cid < 0)
    if missing.size:
        names = ", ".join(repr(model.nodes[i]) for i in missing[:5])
        more = f" and {missing.size - 5} more" if missing.size > 5 else ""
        raise PartitionError(
            f"the partition misses {missing.size} node(s): {names}{more}")
    order = np.argsort(cid, kind="stable")
    counts = np.bincount(cid, minlength=len(labels))
    members = np.split(order, np.cumsum(counts)[:-1])
    return Partition(labels, members, cid)


def intra_edges(model: ModelDeclaration, part: Partition) -> np.ndarray:
    """Boolean mask of the edges ``e = {i, j}`` inside a cluster (``C(i) = C(j)``), model order.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)  # triangles joined by edge (2, 3)
    >>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> model.edges.tolist()
    [[0, 1], [0, 2], [1, 2], [2, 3], [3, 4], [3, 5], [4, 5]]
    >>> intra_edges(model, normalize_partition(model, [[0, 1, 2], [3, 4, 5]])).tolist()
    [True, True, True, False, True, True, True]
    """
    h, t = model.edges[:, 0], model.edges[:, 1]
    return part.cid[h] == part.cid[t]


def require_connected(model: ModelDeclaration, part: Partition) -> None:
    """Raise :class:`PartitionError` if a cluster's induced subgraph is disconnected.

    A component ``A`` of ``C`` that misses ``i0`` has ``cut(A, C \\ A) = 0``, so Definition 1
    ((35)) cannot hold for any ``lambda``.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)  # triangles joined by edge (2, 3)
    >>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> require_connected(model, normalize_partition(model, [[0, 1, 2], [3, 4, 5]]))
    >>> require_connected(model, normalize_partition(model, [[0, 4], [1, 2, 3, 5]]))
    Traceback (most recent call last):
    ...
    gtvmodel.errors.PartitionError: cluster 0: its induced subgraph is disconnected ...
    """
    n = model.num_nodes
    intra = intra_edges(model, part)
    ncomp, comp = components(n, model.edges[intra])
    if ncomp == len(part.labels):
        return
    for c, mem in enumerate(part.members):
        comps = np.unique(comp[mem])
        if comps.size > 1:
            a = [model.nodes[i] for i in mem[comp[mem] == comps[0]]][:4]
            b = [model.nodes[i] for i in mem[comp[mem] == comps[1]]][:4]
            raise PartitionError(
                f"cluster {part.labels[c]!r}: its induced subgraph is disconnected "
                f"({comps.size} components, e.g. nodes {a} and {b}); a component A that "
                "misses i0 has cut(A, C \\ A) = 0, so the well-connected condition (35) cannot "
                "hold for any lambda")

