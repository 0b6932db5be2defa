"""The cluster graph (45)-(46) of paper 001, a quotient graph of the partition: one node per
cluster carrying ``f_C = sum_{i in C} L_i``, clusters joined by the summed boundary weights
``A~_{cc'}``."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from typing import Any

import cvxpy as cp
import networkx as nx
import numpy as np

from ..declaration import ModelDeclaration
from ..errors import UnsupportedError
from ..terms.constraints import SymbolicConstraint
from ..terms.losses import Loss, LossBatch, SquaredLoss, ZeroLoss
from .partition import Partition, normalize_partition

__all__ = ["cluster_graph", "build_cluster_graph", "summed_loss"]


def cluster_graph(model: ModelDeclaration, partition: Any) -> ModelDeclaration:
    """The cluster graph (45)-(46) as a new model of the same class as ``model``.

    ``partition`` takes any form :func:`~gtvmodel.theory.partition.normalize_partition` reads
    (list of clusters, networkx community output, dict cluster id -> nodes, dict node -> cluster
    id, label array in node order).
    One node per cluster (labelled by the cluster label: its index for a list partition),
    carrying ``f_C = sum_{i in C} L_i``; clusters ``c != c'`` joined by one edge of weight
    ``A~_{cc'} = sum_{i in C, j in C'} A_ij`` (45); same penalty, ``lambda`` and dimension.
    Library node constraints are intersected on the cluster node.

    Summed losses: squared and quadratic members are stacked into one
    :class:`~gtvmodel.terms.losses.SquaredLoss` with rows scaled by ``sqrt(M/m_i)`` (quadratic
    centres become ``d`` rows ``sqrt(M) e_j``), which is exactly ``sum_i L_i``; other library losses
    become one CVXPY expression per cluster and loss class, built by
    :class:`~gtvmodel.terms.losses.LossBatch` from the same row formulas.  Symbolic losses and
    constraints cannot be moved to another variable and raise
    :class:`~gtvmodel.errors.UnsupportedError`.

    Parameters
    ----------
    model : ModelDeclaration
        Library losses and library node constraints.
    partition : partition
        The clusters ``C`` (any form
        :func:`~gtvmodel.theory.partition.normalize_partition` reads).

    Returns
    -------
    ModelDeclaration
        A model of ``type(model)`` with one node per cluster.

    Raises
    ------
    UnsupportedError
        A symbolic loss or constraint in a cluster.
    PartitionError
        ``partition`` is not a partition of the model's nodes.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)  # triangles joined by edge (2, 3)
    >>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> from gtvmodel import theory
    >>> cg = theory.cluster_graph(model, {0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "b"})
    >>> cg.nodes, cg.edge_weights.tolist()
    (['a', 'b'], [1.0])
    >>> cg.loss_at(0)  # f_a = sum of three quadratics, stacked
    SquaredLoss(m=3, d=1)
    >>> cg.solve_exact().weights.round(3).ravel().tolist()  # w_tilde (46) at lambda = 1
    [0.833, -0.833]
    """
    return build_cluster_graph(model, normalize_partition(model, partition))


def build_cluster_graph(model: ModelDeclaration, part: Partition) -> ModelDeclaration:
    """:func:`cluster_graph` for a validated partition: edge weights ``A~_{cc'}`` (45) summed
    with one :func:`numpy.bincount` over the inter-cluster edges, losses by :func:`summed_loss`.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)  # triangles joined by edge (2, 3)
    >>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> from gtvmodel.theory.partition import normalize_partition
    >>> cg = build_cluster_graph(model, normalize_partition(model, [[0, 1, 2], [3, 4, 5]]))
    >>> cg.num_nodes, cg.num_edges, cg.lam
    (2, 1, 1.0)
    """
    k, d = len(part.labels), model.dim
    G = nx.Graph()
    G.add_nodes_from(part.labels)
    h, t = model.edges[:, 0], model.edges[:, 1]
    ch, ct = part.cid[h], part.cid[t]
    inter = ch != ct
    if inter.any():
        keys = np.minimum(ch, ct)[inter] * k + np.maximum(ch, ct)[inter]
        uniq, inv = np.unique(keys, return_inverse=True)
        wsum = np.bincount(inv.ravel(), model.edge_weights[inter])
        G.add_edges_from((part.labels[u // k], part.labels[u % k], {"weight": float(w)})
                         for u, w in zip(uniq.tolist(), wsum.tolist(), strict=True))
    cg = type(model)(G, d, penalty=model.penalty, lam=model.lam)
    for c, mem in enumerate(part.members):
        label = part.labels[c]
        cg.set_loss(label, summed_loss(model, mem, label))
        for i in mem:
            for con in model.constraints_at(i):
                if isinstance(con, SymbolicConstraint):
                    raise UnsupportedError(
                        f"node {model.nodes[i]!r}: a symbolic constraint is stated in the "
                        f"node's own variable and cannot be moved to cluster {label!r}")
                cg.add_constraint(label, con)
    return cg


def summed_loss(model: ModelDeclaration, mem: np.ndarray, label: Hashable) -> Loss | Callable:
    """``f_C = sum_{i in C} L_i`` (46) as a library loss or a callable building one expression.

    ``mem`` holds the member positions of cluster ``label``.  Squared and quadratic members
    become one :class:`~gtvmodel.terms.losses.SquaredLoss` (rows scaled by ``sqrt(M/m_i)``);
    other losses a callable ``x -> CVXPY expression``.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)  # triangles joined by edge (2, 3)
    >>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> import numpy as np
    >>> f = summed_loss(model, np.array([0, 1, 2]), "a")
    >>> f, (f.X ** 2).round(6).ravel().tolist()  # sqrt(3) rows: (1/3) sum 3 (w - a_i)^2
    (SquaredLoss(m=3, d=1), [3.0, 3.0, 3.0])
    """
    d = model.dim
    losses = [model.loss_at(i) for i in mem]
    for i, ls in zip(mem, losses, strict=True):
        if ls.batch_class is None:  # an expression in the node's variable
            raise UnsupportedError(
                f"node {model.nodes[i]!r}: a symbolic loss is an expression in the node's own "
                f"variable and cannot be moved to cluster {label!r}")
    l1 = float(sum(ls.l1 for ls in losses))
    l2 = float(sum(ls.l2 for ls in losses))
    if all(not ls.has_data for ls in losses):
        return ZeroLoss(l1=l1, l2=l2)
    rows = [ls.squared_rows(d) for ls in losses if ls.has_data]
    if all(r is not None for r in rows):  # sums of squares: one squared loss ||y - X w||^2 / M
        M = sum(X.shape[0] for X, _, _ in rows)
        Xs = [X * math.sqrt(M / m) for X, _, m in rows]
        ys = [y * math.sqrt(M / m) for _, y, m in rows]
        return SquaredLoss(np.vstack(Xs), np.concatenate(ys), l1=l1, l2=l2)
    by_cls: dict[type, list[Loss]] = {}
    for ls in losses:
        by_cls.setdefault(type(ls), []).append(ls)

    def summed(x: cp.Variable) -> cp.Expression:
        xr = cp.reshape(x, (1, d), order="C")
        terms = [e for cls, ls in by_cls.items()
                 if (e := LossBatch(cls, np.zeros(len(ls), dtype=np.int64), ls, 1, d)
                     .expression(x, xr)) is not None]
        if l1:
            terms.append(l1 * cp.norm1(x))
        if l2:
            terms.append(l2 * cp.sum_squares(x))
        return cp.sum(cp.hstack(terms)) if len(terms) > 1 else terms[0]

    return summed

