"""The convex problem a baseline approximates, and the certified gap of its weights on it.

A baseline's *target* is one GTV problem (16) built from the model (the same node losses
``L_i`` and constraints ``C_i``, never a copy of them; :meth:`ModelDeclaration.variant`), so
:func:`gtvmodel.certify` gives a sound bound ``gap >= P_target(W) - P_target*`` (34):

* ``"gtv"`` -- the model's own problem (network-Lasso ADMM);
* ``"local"`` -- the same model at ``lambda = 0``: every node alone (``local``);
* ``"gtv-squared"`` -- the model's graph, losses and ``lambda`` with ``phi = 1/2 ||.||_2^2``
  (:class:`~gtvmodel.terms.penalties.SquaredNorm2`): FedRelax's target.  FedRelax (lecture
  notes (54)) minimizes ``L_i(w) + (lambda/2) sum_j A_ij ||w - w_j||^2`` node by node; its
  fixed point satisfies ``grad L_i(w_i) + lambda sum_j A_ij (w_i - w_j) = 0``, the
  optimality condition of GTVMin with ``lambda sum_e A_e 1/2 ||w_{e+} - w_{e-}||^2``, i.e.
  ``SquaredNorm2`` at the *same* ``lambda`` (docs/conventions.md, errata, 4; with the notes'
  ``||.||^2`` of (51) instead of ``1/2 ||.||^2`` the matching strength would be
  ``lambda / 2``);
* ``"consensus"`` -- the pooled problem ``min_w sum_i L_i(w)`` s.t. ``w in C_i`` for all ``i``
  (one shared ``w``; ``pooled``), or with ``groups`` one shared ``w`` per group (``oracle``).

**Why the consensus certificate is a GTV certificate.**  Let ``P_c(w) = sum_i L_i(w)`` and
``P_lam`` the objective (16) with a norm penalty on a graph ``G`` whose connected components
are the groups.  A constant candidate ``W = 1 w^T`` (per group) has no GTV term, so
``P_lam(W) = P_c(w)``; and every consensus point is feasible for (16), so ``P_lam* <= P_c*``.
Hence ``P_lam(W) - P_lam* >= P_c(w) - P_c*``: the certified gap of ``W`` on (16) bounds the
consensus suboptimality of ``w`` *at every* ``lambda`` (soundness never depends on
``lambda``).  It is also tight once ``lambda >= lambda_crit`` (docs/conventions.md,
:func:`gtvmodel.theory.consensus_threshold`): then the constant solution is optimal for (16)
(optimality condition (28)), so ``P_lam* = P_c*``.  The penalty does not enter ``P_c``; the
certificate uses ``phi = ||.||_2`` (its conjugate is the capacity constraint
``||u_e||_2 <= lambda A_e``, so above ``lambda_crit`` the dual (24) is the consensus dual
``max_{sum_i s_i = 0} -sum_i h_i*(s_i)`` itself).  ``lambda`` is chosen above a bound of
``lambda_crit`` read off the candidate (:func:`consensus_lambda`).  The consensus problem
does not depend on the graph either: where a group is not connected in the model's graph
(a disconnected graph), its pieces are joined by added edges (:func:`consensus_graph`), so
the bound stays tight instead of certifying the per-component problem.
"""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np

from .._validate import check_option
from ..certificates.certificate import Certificate, certify
from ..declaration import ModelDeclaration, components
from ..errors import ParameterError, UnsupportedError
from ..terms.penalties import Norm2, SquaredNorm2

__all__ = ["TARGETS", "target_model", "certify_target", "consensus_graph", "consensus_lambda",
           "TargetCertifier"]

#: The target problems :func:`certify_target` knows (module docstring).
TARGETS = ("gtv", "local", "consensus", "gtv-squared")


def consensus_graph(model: ModelDeclaration, groups: Any = None) -> nx.Graph:
    """The model's graph restricted to edges inside a group (``groups``: ``(n,)`` group index
    per node, default one group), with one added edge (weight 1) between consecutive connected
    pieces of each group, so that every group is exactly one connected component."""
    n = model.num_nodes
    g = np.zeros(n, dtype=np.int64) if groups is None else np.asarray(groups, dtype=np.int64)
    E = model.edges
    keep = g[E[:, 0]] == g[E[:, 1]]
    count, comp = components(n, E[keep])
    first = np.full(count, n, dtype=np.int64)
    np.minimum.at(first, comp, np.arange(n))  # one representative node per piece
    order = np.lexsort((first, g[first]))      # pieces sorted by group
    reps, rep_group = first[order], g[first[order]]
    same = rep_group[1:] == rep_group[:-1]
    bridges = np.column_stack([reps[:-1][same], reps[1:][same]])
    out = nx.Graph(model.graph)
    nodes = model.nodes
    drop = E[~keep]
    out.remove_edges_from((nodes[a], nodes[b]) for a, b in drop)
    attr = model.empirical_graph.weight
    if attr is None:
        out.add_edges_from((nodes[a], nodes[b]) for a, b in bridges)
    else:
        out.add_edges_from((nodes[a], nodes[b], {attr: 1.0}) for a, b in bridges)
    return out


def consensus_lambda(model: ModelDeclaration, weights: np.ndarray) -> float:
    """The ``lambda`` of the consensus certificate (module docstring) for a consensus
    candidate ``weights`` on a ``model`` whose components are the groups.

    ``lambda_crit`` is the least congestion ``max_e ||u_e||_2 / A_e`` of a flow with
    ``(D^T u)_i = -grad L_i(w_bar)`` (28); routing the demands along a spanning tree puts at
    most ``sum_i ||grad L_i||_2`` on any edge, so ``lambda_crit <= sum_i ||grad L_i(w_bar)||_2 /
    min_e A_e``.  At the candidate the gradients are those at ``w`` (close to ``w_bar`` for a
    good candidate), and a factor 4 leaves room for the difference; without gradients
    (non-smooth losses) ``10^6 / min_e A_e``.  Any value is sound; a large one only costs
    tightness below ``lambda_crit``, never soundness."""
    a_min = float(model.edge_weights.min()) if model.num_edges else 1.0
    try:
        grads = model.loss_gradients(weights)
    except UnsupportedError:
        return 1e6 / a_min
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.sqrt((grads**2).sum(axis=1)).sum())
    if not np.isfinite(total):  # gradients overflow far from the optimum: any lambda is sound
        return max(model.lam, 1e6 / a_min)
    return max(model.lam, 4.0 * (total + 1.0) / a_min)


def target_model(model: ModelDeclaration, target: str, groups: Any = None
                 ) -> ModelDeclaration:
    """The GTV problem (16) of ``target`` (module docstring) sharing the model's losses and
    constraints; the model itself for ``"gtv"``.  ``"consensus"`` comes at ``lambda = lam``
    of the model (:class:`TargetCertifier` sets the certificate's ``lambda``)."""
    check_option(target, "target", TARGETS, where="target_model")
    if target == "gtv":
        return model
    if target == "local":
        return model.variant(lam=0.0)
    if target == "gtv-squared":
        return model.variant(penalty=SquaredNorm2())
    return model.variant(penalty=Norm2(), graph=consensus_graph(model, groups))


class TargetCertifier:
    """Certificates of many candidates on one target (built once per run: the target's model
    and its compiled certificate artefacts are reused from round to round).

    ``certify_kwargs`` go to :func:`gtvmodel.certify` (``tol``, ``feas_tol``, ``radius``,
    ...).  For ``"consensus"`` the certificate's ``lambda`` is :func:`consensus_lambda` of the
    first candidate (any ``lambda`` is sound, module docstring).
    """

    def __init__(self, model: ModelDeclaration, target: str, groups: Any = None,
                 **certify_kwargs: Any):
        self.target = target
        self.model = target_model(model, target, groups)
        self.kwargs = certify_kwargs
        self._lam_set = target != "consensus"
        n = model.num_nodes
        self.groups = (np.zeros(n, dtype=np.int64) if groups is None
                       else np.asarray(groups, dtype=np.int64))

    def _check_consensus(self, W: np.ndarray) -> None:
        """A consensus candidate has one ``w`` per group (:class:`ParameterError` naming the
        first node whose row differs from its group's first node)."""
        first = np.full(self.groups.max(initial=0) + 1, W.shape[0], dtype=np.int64)
        np.minimum.at(first, self.groups, np.arange(W.shape[0]))
        off = np.flatnonzero((W != W[first[self.groups]]).any(axis=1))
        if off.size:
            node = self.model.nodes[int(off[0])]
            raise ParameterError(f"certify_target: target 'consensus' needs one shared w per "
                                 f"group; the weights of node {node!r} differ from their "
                                 "group's")

    def __call__(self, weights: Any, flows: Any = None) -> Certificate:
        """The certified gap of ``weights`` (optionally with ``flows`` of the target problem:
        ADMM's edge duals) on the target."""
        W = self.model.check_weights(weights)
        if self.target == "consensus":
            self._check_consensus(W)
        if not self._lam_set:
            self.model.lam = consensus_lambda(self.model, W)
            self._lam_set = True
        return certify(self.model, W, flows, **self.kwargs)

    def objective(self, weights: np.ndarray) -> float:
        """The target's objective ``P_target(W)`` (16) in numpy."""
        return self.model.objective(weights)


def certify_target(model: ModelDeclaration, weights: Any, target: str = "gtv", *,
                   flows: Any = None, groups: Any = None, **certify_kwargs: Any) -> Certificate:
    """Certified gap (34) of ``weights`` on a baseline's target problem (module docstring):
    ``"gtv"``, ``"local"`` (``lambda = 0``), ``"consensus"`` (one shared ``w``; per group
    with ``groups``, an ``(n,)`` group index per node) or ``"gtv-squared"`` (``phi = 1/2
    ||.||_2^2``, FedRelax's target).  A ``"consensus"`` candidate must have equal rows within
    each group (else :class:`~gtvmodel.errors.ParameterError`).  The result's ``gap >=
    P_target(W) - P_target*``; the model is not changed.  ``certify_kwargs`` go to
    :func:`gtvmodel.certify`.

    Examples
    --------
    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> from gtvmodel.baselines import certify_target
    >>> model = gm.GTVModel(nx.path_graph(3), dim=1, lam=0.5)
    >>> for i, a in enumerate([1.0, 0.0, -1.0]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> cert = certify_target(model, np.zeros((3, 1)), "consensus")  # the mean is optimal
    >>> cert.gap < 1e-6
    True
    >>> cert = certify_target(model, [[1.0], [0.0], [-1.0]], "local")  # each node alone
    >>> cert.gap < 1e-6, model.lam
    (True, 0.5)
    """
    return TargetCertifier(model, target, groups, **certify_kwargs)(weights, flows)
