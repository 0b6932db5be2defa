"""Partitions ``P = {C_1, ..., C_k}`` of the nodes (Theorem 2 of paper 001): validation into
cluster indices, the intra-cluster edge mask and the connectivity requirement of Definition 1."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..declaration import ModelDeclaration, components
from ..errors import PartitionError, UnknownNodeError

__all__ = ["FORMS", "Partition", "normalize_partition", "intra_edges", "require_connected"]


@dataclass
class Partition:
    """A partition ``P = {C_1, ..., C_k}`` of the nodes (Theorem 2), as indices.

    ``labels``: the cluster labels in partition order; ``members``: the node positions of each
    cluster (model order); ``cid`` ``(n,)``: the cluster index of every node.
    """

    labels: list[Hashable]  # cluster labels, partition order
    members: list[np.ndarray]  # node positions of each cluster (model order)
    cid: np.ndarray  # (n,) cluster index of every node


#: The partition forms :func:`normalize_partition` recognizes, as its messages name them.
FORMS = {
    "clusters": "a list of clusters (collections of nodes)",
    "cluster_dict": "a dict cluster id -> nodes",
    "node_dict": "a dict node -> cluster id",
    "labels": "a label array in node order",
}


_LABEL_TYPES = frozenset({int, float, str, bool, np.int64, np.int32, np.str_, np.float64})


def _is_cluster(model: ModelDeclaration, item: Any) -> bool:
    """Whether ``item`` reads as a collection of nodes: a non-string iterable that is not itself
    a node of the graph (so tuple node labels, as in ``grid_2d_graph``, stay labels)."""
    if type(item) in _LABEL_TYPES or isinstance(item, (str, bytes)) or not isinstance(
            item, Iterable):
        return False
    if isinstance(item, np.ndarray) and item.ndim == 0:
        return False
    return item not in model.graph  # networkx answers False for unhashable items


def normalize_partition(model: ModelDeclaration, partition: Any) -> Partition:
    """Validate a partition ``P = {C_1, ..., C_k}`` of Theorem 2 into cluster indices.

    ``partition`` may take any of the forms people hold:

    * a **list of clusters**, each a collection of node labels (cluster ids ``0..k-1``), also a
      tuple or a generator of sets, as networkx's community functions return them
      (``nx.community.louvain_communities(G)``, ``greedy_modularity_communities``);
    * a **dict cluster id -> nodes** (``{"a": [0, 1, 2], "b": {3, 4, 5}}``);
    * a **dict node -> cluster id** (``{0: "a", 1: "a", ...}``);
    * a **label array in node order** (length ``n``, entry ``i`` the cluster id of
      ``model.nodes[i]``; any hashable ids; a numpy array or a list, e.g. scikit-learn's
      ``labels_``).

    The rule that tells them apart: an item of a list (a value of a dict) that is a collection
    (any non-string iterable: list, tuple, set, range, array, ...) and not itself a node of the
    graph makes the list a list of clusters (the dict a dict cluster id -> nodes); a list (dict)
    without such items is a label array (a dict node -> cluster id).  A 1-D numpy array is
    always a label array.  Cluster ids are kept in order of first appearance.

    Every node must be in exactly one cluster: a missing node, a node in two clusters, an
    empty cluster, a label array of the wrong length raise
    :class:`~gtvmodel.errors.PartitionError`, a label that is not a node
    :class:`~gtvmodel.errors.UnknownNodeError`; each message starts with the form recognized.
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
    >>> normalize_partition(model, ["a", "a", "a", "b", "b", "b"]).cid.tolist()
    [0, 0, 0, 1, 1, 1]
    >>> normalize_partition(model, {"a": [0, 1, 2], "b": {3, 4, 5}}).labels
    ['a', 'b']
    >>> normalize_partition(model, [[0, 1, 2], [3, 4]])
    Traceback (most recent call last):
    ...
    gtvmodel.errors.PartitionError: partition (a list of clusters ...): it misses 1 node(s): 5
    """
    if isinstance(partition, Mapping):
        values = list(partition.values())
        if any(_is_cluster(model, v) for v in values):
            return _from_clusters(model, list(partition.items()), FORMS["cluster_dict"])
        return _from_node_dict(model, partition)
    if isinstance(partition, (str, bytes)) or not isinstance(partition, Iterable):
        raise PartitionError(
            "partition must be a list of clusters (collections of nodes, as networkx's "
            "community functions return), a dict cluster id -> nodes, a dict node -> cluster id "
            f"or a label array in node order, got {type(partition).__name__}")
    if isinstance(partition, np.ndarray) and partition.ndim == 1:
        return _from_label_array(model, partition)
    items = list(partition)  # also a generator, e.g. nx.community.label_propagation_communities
    if not items:
        raise PartitionError("the partition has no clusters")
    if any(_is_cluster(model, v) for v in items):
        return _from_clusters(model, list(enumerate(items)), FORMS["clusters"])
    return _from_label_array(model, items)


def _finish(model: ModelDeclaration, form: str, labels: list[Hashable],
            cid: np.ndarray) -> Partition:
    """The :class:`Partition` from every node's cluster index ``cid`` (``-1``: missing)."""
    if not labels:
        raise PartitionError("the partition has no clusters")
    missing = np.flatnonzero(cid < 0)
    if missing.size:
        names = ", ".join(repr(model.nodes[i]) for i in missing[:5])
        more = f" and {missing.size - 5} more" if missing.size > 5 else ""
        raise PartitionError(
            f"partition ({form}): it misses {missing.size} node(s): {names}{more}")
    order = np.argsort(cid, kind="stable")
    counts = np.bincount(cid, minlength=len(labels))
    members = np.split(order, np.cumsum(counts)[:-1])
    return Partition(labels, members, cid)


def _indices(model: ModelDeclaration, nodes: Iterable[Any], form: str, where: str) -> np.ndarray:
    """Node positions; :class:`UnknownNodeError` naming the form and ``where``."""
    try:
        return model.empirical_graph.indices(nodes)
    except UnknownNodeError as exc:
        raise UnknownNodeError(f"{exc} (partition read as {form}, {where})") from None


def _from_clusters(model: ModelDeclaration, clusters: list[tuple[Hashable, Any]],
                   form: str) -> Partition:
    """A list of clusters or a dict cluster id -> nodes: ``(cluster id, nodes)`` pairs."""
    labels: list[Hashable] = []
    parts: list[np.ndarray] = []
    for lab, cluster in clusters:
        if not _is_cluster(model, cluster):
            raise PartitionError(
                f"partition ({form}): cluster {lab!r} must be a collection of node labels, got "
                f"{type(cluster).__name__} {cluster!r}")
        idx = _indices(model, cluster, form, f"cluster {lab!r}")
        if not idx.size:
            raise PartitionError(f"partition ({form}): cluster {lab!r} is empty")
        labels.append(lab)
        parts.append(idx)
    idx = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    cl = np.repeat(np.arange(len(parts)), [p.size for p in parts])
    _, first = np.unique(idx, return_index=True)
    if first.size < idx.size:  # a node listed twice: name the first repeat
        seen = np.zeros(idx.size, dtype=bool)
        seen[first] = True
        p = int(np.flatnonzero(~seen)[0])
        q = int(np.flatnonzero(idx == idx[p])[0])
        a, b = labels[cl[q]], labels[cl[p]]
        where = f"twice in cluster {a!r}" if cl[q] == cl[p] else f"in clusters {a!r} and {b!r}"
        raise PartitionError(
            f"partition ({form}): node {model.nodes[idx[p]]!r} appears {where}: a partition "
            "lists every node once")
    cid = np.full(model.num_nodes, -1, dtype=np.int64)
    cid[idx] = cl
    return _finish(model, form, labels, cid)


def _from_node_dict(model: ModelDeclaration, partition: Mapping[Any, Any]) -> Partition:
    """A dict node -> cluster id."""
    form = FORMS["node_dict"]
    idx = _indices(model, partition.keys(), form, "a key")
    ids = list(partition.values())
    cid = np.full(model.num_nodes, -1, dtype=np.int64)
    labels, codes = _codes(ids, form, lambda r: model.nodes[idx[r]])
    cid[idx] = codes
    return _finish(model, form, labels, cid)


def _from_label_array(model: ModelDeclaration, ids: Any) -> Partition:
    """A label array in node order (a 1-D numpy array or a list of hashable cluster ids)."""
    form = FORMS["labels"]
    n = model.num_nodes
    if len(ids) != n:
        raise PartitionError(
            f"partition ({form}): it has {len(ids)} entries for the {n} nodes (entry i is the "
            "cluster id of model.nodes[i]; a list of clusters needs collections of nodes as "
            "items)")
    if isinstance(ids, np.ndarray) and not ids.dtype.hasobject:  # vectorized
        uniq, first, inv = np.unique(ids, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(order.size, dtype=np.int64)
        rank[order] = np.arange(order.size)
        return _finish(model, form, uniq[order].tolist(), rank[inv.ravel()])
    labels, codes = _codes(list(ids), form, lambda r: model.nodes[r])
    return _finish(model, form, labels, codes)


def _codes(ids: list[Any], form: str, nodes: Any) -> tuple[list[Hashable], np.ndarray]:
    """Cluster ids to indices ``0..k-1`` in order of first appearance; ``nodes(r)`` names the
    node of entry ``r`` (only on error)."""
    index: dict[Hashable, int] = {}
    try:
        codes = np.fromiter((index.setdefault(lab, len(index)) for lab in ids), dtype=np.int64,
                            count=len(ids))
    except TypeError:
        r = next(r for r, lab in enumerate(ids) if not _hashable(lab))
        raise PartitionError(
            f"partition ({form}): node {nodes(r)!r}: cluster id {ids[r]!r} is not "
            "hashable") from None
    labels = [lab.item() if isinstance(lab, np.generic) else lab for lab in index]
    return labels, codes


def _hashable(x: Any) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


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

