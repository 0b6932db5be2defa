"""Is the minimizer of the GTV problem (16) unique?  The common cases, decided from the model's
structure alone (no solve).

Comparing weights with an exact solution as ground truth is only meaningful when the
minimizer is unique.  :func:`uniqueness` answers ``True``, ``False`` or ``None`` (not
determined) with the reason:

- ``True`` when every node function ``h_i = L_i + eta_i ||.||_1 + kappa_i ||.||^2`` (plus its
  constraints) is strongly convex: the Hessian bound ``H_lo,i + 2 kappa_i I`` of every node is
  positive definite (then ``P`` is strongly convex and its minimizer unique);
- ``False`` when a group of nodes that only interact with each other -- a connected component
  of the graph, or a single node when ``lambda = 0`` -- can all move along a common direction
  ``v`` without changing ``P``: every node of the group has a quadratic loss (squared,
  quadratic or zero: ``H_lo = H_hi``), no ``l1`` term, no constraint and no symbolic term, and
  ``v`` is in the null space of every ``H_i + 2 kappa_i I`` (then ``X_i v = 0`` at every node
  and the penalty only sees differences, so ``w + t v`` on the group is optimal for every
  ``t``).  Typical cases: nodes without data and without ``l2`` in a component without data;
  ``lambda = 0`` with ``m_i < d`` and no regularization;
- ``None`` otherwise (e.g. zero-loss nodes between data nodes with a norm penalty, ties of
  ``l1`` terms, logistic or hinge losses without ``l2``): the exact solution may or may not be
  unique.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..declaration import ModelDeclaration
from ..errors import UnsupportedError

__all__ = ["Uniqueness", "uniqueness"]

#: Eigenvalues below ``SINGULAR * lambda_max`` count as zero (an exact null direction of sums
#: of ``X_i^T X_i / m_i``: rounding leaves ~``eps lambda_max``); above ``DEFINITE *
#: lambda_max`` as positive.  In between the answer is ``None``.  Both are relative to the
#: largest eigenvalue of the same matrix, so the verdict does not change when the data are
#: rescaled (an absolute floor called ``X = 1e-7 I`` flat, issue 28 item 5).
SINGULAR = 1e-12
DEFINITE = 1e-8


@dataclass(frozen=True)
class Uniqueness:
    """The answer of :func:`uniqueness`: ``unique`` (``True``, ``False`` or ``None``: not
    determined) and ``reason``, a sentence naming the nodes concerned."""

    unique: bool | None
    reason: str


def _hessians(model: ModelDeclaration) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(H_lo, exact, known)``: per node the lower Hessian bound of ``h_i`` without its
    constraints (``(n, d, d)``, including ``2 kappa_i I``), whether the Hessian is that bound
    everywhere (a quadratic loss), and whether a bound is known at all (library smooth loss or
    zero loss)."""
    st = model.structure()
    n, d = model.num_nodes, model.dim
    H = np.broadcast_to(2.0 * st.l2[:, None, None] * np.eye(d), (n, d, d)).copy()
    exact = np.ones(n, dtype=bool)
    known = np.ones(n, dtype=bool)
    known[list(st.symbolic)] = False
    for b in st.batches:
        try:
            lo, hi = b.hessian_bounds()
        except UnsupportedError:  # a non-smooth loss (hinge, absolute): no curvature bound
            known[b.nodes] = False
            continue
        H[b.nodes] += lo
        exact[b.nodes] &= np.all(lo == hi, axis=(1, 2))
    return H, exact & known, known


def uniqueness(model: ModelDeclaration) -> Uniqueness:
    """Whether the minimizer of (16) is unique, for the common cases (module docstring).

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), dim=1)
    >>> model.set_loss(0, gm.QuadraticLoss([1.0]))
    >>> model.uniqueness().unique is None  # nodes 1, 2 have no data: not determined
    True
    >>> model.set_loss(1, gm.QuadraticLoss([0.0])); model.set_loss(2, gm.QuadraticLoss([2.0]))
    >>> model.uniqueness().unique  # every loss strongly convex
    True
    >>> free = gm.GTVModel(nx.path_graph(2), dim=1)  # no data at all: any constant is optimal
    >>> free.uniqueness().unique, free.uniqueness().reason[:40]
    (False, 'nodes 0, 1 can move together along a com')
    """
    st = model.structure()
    n = model.num_nodes
    if n == 0:
        return Uniqueness(True, "the model has no nodes")
    H, exact, known = _hessians(model)
    ev = np.linalg.eigvalsh(H)  # ascending, per node
    if known.all() and np.all(ev[:, 0] > DEFINITE * np.maximum(ev[:, -1], np.finfo(float).tiny)):
        return Uniqueness(True, "every node function h_i is strongly convex (positive definite "
                                "Hessian bound), so P is strongly convex")
    if model.lam > 0 and model.num_edges:
        groups, k = st.components, st.component_count
    else:  # lambda = 0 (or no edges): every node is a problem of its own
        groups, k = np.arange(n), n
    free = exact & (st.l1 == 0)
    free[st.constrained] = False
    free[st.conic] = False
    movable = np.bincount(groups, ~free, minlength=k) == 0  # groups of free nodes only
    member = sp.csr_matrix((np.ones(n), (groups, np.arange(n))), shape=(k, n))
    S = np.asarray(member @ H.reshape(n, -1)).reshape((k,) + H.shape[1:])  # sum per group
    evs = np.linalg.eigvalsh(S)
    flat = movable & (evs[:, 0] <= SINGULAR * np.maximum(evs[:, -1], 0.0))
    if flat.any():
        c = int(np.flatnonzero(flat)[0])
        members = [model.nodes[i] for i in np.flatnonzero(groups == c)]
        names = ", ".join(map(repr, members[:10])) + (" ..." if len(members) > 10 else "")
        where = "a connected component" if k < n or model.lam > 0 else "with lambda = 0"
        return Uniqueness(False, f"nodes {names} can move together along a common direction "
                                 f"without changing P ({where} whose losses are flat along it: "
                                 "no data, or fewer independent samples than d, and no "
                                 "regularization or constraint): the minimizer is not unique")
    return Uniqueness(None, "not determined: some node function is not strongly convex, but no "
                            "group of nodes is known to be free to move")
