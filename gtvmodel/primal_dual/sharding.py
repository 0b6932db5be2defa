"""Shards of a distributed run of Algorithm 1 (paper 001): which node lives where, who owns which
edge, and what crosses between shards.

Algorithm 1 is message passing: node ``i``'s update PU (32) needs its own loss and the flows
``u_e`` on its edges, edge ``e``'s update DU (33) the old and new weights of its endpoints
``e+``, ``e-``.  With the nodes split into shards, a shard holds its nodes (their losses and
constraints) and **owns** the edges whose head ``e+`` it holds; per iteration it needs

* the new weights ``w_{e-}^{k+1}`` of the tails of its owned edges held elsewhere (its *ghosts*),
* the new flows ``u_e^{k+1}`` of the edges at its nodes owned elsewhere,

so what crosses is proportional to the weighted cut of the partition.  :func:`partition_nodes`
minimizes that cut by recursive Kernighan-Lin bisection (``networkx``) of a breadth-first
split, weighted by ``A_e``; :class:`ShardLayout` is the index bookkeeping of a partition.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from .._validate import check_int
from ..declaration import ModelDeclaration
from ..errors import PartitionError

__all__ = ["partition_nodes", "ShardLayout", "cut_of"]


def partition_nodes(model: ModelDeclaration, shards: int, kl_passes: int = 10,
                    seed: int = 0) -> np.ndarray:
    """The shard of every node position (``(n,)`` integers ``0..shards-1``, every shard
    non-empty, sizes within one of ``n / shards``) with a small weighted cut ``sum_{e cut}
    A_e``: recursive bisection, each split a breadth-first half (contiguous regions) refined by
    ``networkx.community.kernighan_lin_bisection`` (``kl_passes`` passes, weights ``A_e``;
    Kernighan-Lin swaps pairs, so the sizes stay those of the split)."""
    n = model.num_nodes
    shards = check_int(shards, "shards", min_val=1, max_val=n, where="partition_nodes")
    check_int(kl_passes, "kl_passes", min_val=0, where="partition_nodes")
    G = nx.Graph()
    G.add_nodes_from(range(n))
    E = model.edges
    G.add_weighted_edges_from(zip(E[:, 0].tolist(), E[:, 1].tolist(),
                                  model.edge_weights.tolist(), strict=True))
    labels = np.empty(n, dtype=np.int64)
    _bisect(G, list(range(n)), shards, 0, labels, kl_passes, seed)
    return labels


def _bisect(G: nx.Graph, nodes: list[int], k: int, first: int, labels: np.ndarray,
            kl_passes: int, seed: int) -> None:
    """Label ``nodes`` with the shards ``first .. first+k-1`` by recursive bisection."""
    if k == 1:
        labels[nodes] = first
        return
    k1 = k // 2
    n1 = int(round(len(nodes) * k1 / k))
    sub = G.subgraph(nodes)
    order = _bfs_order(sub)
    a, b = order[:n1], order[n1:]
    if kl_passes and sub.number_of_edges():
        a, b = nx.community.kernighan_lin_bisection(sub, partition=(set(a), set(b)),
                                                    max_iter=kl_passes, weight="weight",
                                                    seed=seed)
        a, b = sorted(a), sorted(b)
    _bisect(G, list(a), k1, first, labels, kl_passes, seed)
    _bisect(G, list(b), k - k1, first + k1, labels, kl_passes, seed)


def _bfs_order(G: nx.Graph) -> list[int]:
    """The nodes of ``G`` in breadth-first order, component after component (each from its
    smallest node), so that a prefix is a connected-ish region."""
    seen: set[int] = set()
    order: list[int] = []
    for s in sorted(G.nodes):
        if s in seen:
            continue
        comp = [s] + [v for _, v in nx.bfs_edges(G, s)]
        seen.update(comp)
        order.extend(comp)
    return order


def cut_of(model: ModelDeclaration, labels: np.ndarray) -> tuple[int, float]:
    """``(number of cut edges, weighted cut sum_{e cut} A_e)`` of the shard labels."""
    E = model.edges
    cut = labels[E[:, 0]] != labels[E[:, 1]]
    return int(cut.sum()), float(model.edge_weights[cut].sum())


@dataclass(frozen=True)
class ShardLayout:
    """Where everything of a partition lives (global positions, sorted, per shard ``s``).

    ``own[s]``: its nodes; ``owned[s]``: its edges (head ``e+`` in ``s``); ``incident[s]``: the
    edges at its nodes; ``ghosts[s]``: the other endpoints of ``incident[s]`` held elsewhere;
    ``recv_nodes[s]``: the ghosts whose new weights it needs (tails of its owned edges held
    elsewhere); ``send_nodes[s]``: its nodes that other shards need; ``recv_edges[s]``: the
    edges at its nodes owned elsewhere (their flows come in); ``send_edges[s]``: its owned
    edges with the tail elsewhere.  ``boundary_nodes``, ``boundary_edges``: the unions (what
    crosses per iteration); ``cut_edges``, ``cut_weight``: the cut.
    """

    labels: np.ndarray
    own: list[np.ndarray]
    owned: list[np.ndarray]
    incident: list[np.ndarray]
    ghosts: list[np.ndarray]
    recv_nodes: list[np.ndarray]
    send_nodes: list[np.ndarray]
    recv_edges: list[np.ndarray]
    send_edges: list[np.ndarray]
    boundary_nodes: np.ndarray
    boundary_edges: np.ndarray
    cut_edges: int
    cut_weight: float

    @classmethod
    def build(cls, model: ModelDeclaration, labels: np.ndarray) -> ShardLayout:
        """The layout of the shard ``labels`` (``(n,)``, shards ``0..S-1`` all non-empty)."""
        labels = np.asarray(labels, dtype=np.int64)
        S = int(labels.max()) + 1
        counts = np.bincount(labels, minlength=S)
        if labels.shape != (model.num_nodes,) or labels.min() < 0 or (counts == 0).any():
            raise PartitionError("shard labels must give every node a shard 0..S-1, each "
                                 "shard non-empty")
        heads, tails = model.edges[:, 0], model.edges[:, 1]
        lh, lt = labels[heads], labels[tails]
        cross = lh != lt
        fields: dict[str, list[np.ndarray]] = {k: [] for k in (
            "own", "owned", "incident", "ghosts", "recv_nodes", "send_nodes", "recv_edges",
            "send_edges")}
        for s in range(S):  # a loop over shards, vectorized over nodes and edges
            at_h, at_t = lh == s, lt == s
            inc = np.flatnonzero(at_h | at_t)
            ends = np.concatenate([heads[inc], tails[inc]])
            fields["own"].append(np.flatnonzero(labels == s))
            fields["owned"].append(np.flatnonzero(at_h))
            fields["incident"].append(inc)
            fields["ghosts"].append(np.unique(ends[labels[ends] != s]))
            fields["recv_nodes"].append(np.unique(tails[at_h & cross]))
            fields["send_nodes"].append(np.unique(tails[at_t & cross]))
            fields["recv_edges"].append(np.flatnonzero(at_t & cross))
            fields["send_edges"].append(np.flatnonzero(at_h & cross))
        n_cut, w_cut = cut_of(model, labels)
        return cls(labels=labels, boundary_nodes=np.unique(tails[cross]),
                   boundary_edges=np.flatnonzero(cross), cut_edges=n_cut, cut_weight=w_cut,
                   **fields)

    @property
    def num_shards(self) -> int:
        """The number of shards ``S``."""
        return len(self.own)
