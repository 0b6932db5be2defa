"""The constants of Theorem 2 of paper 001 (Section V, Appendix A), vectorized over nodes.

``alpha_C`` (13), ``beta_i`` (12), ``w_bar_C = argmin f_C`` (9), ``delta_i`` (11), ``|dC|`` and
the norm factors ``kappa_p``, ``rho`` of a non-Euclidean penalty (docs/conventions.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validate import check_scalar
from ..declaration import ModelDeclaration
from ..errors import UnsupportedError
from .partition import Partition
from .quotient import build_cluster_graph

__all__ = ["CONSTANT_FACTORS", "Constants", "check_scope", "norm_factors", "node_hessian_bounds",
           "theorem2_constants", "check_lam"]

#: The factor ``c`` of the curvature term ``c rho beta_i |dC| / alpha_C`` in the budgets:
#: 2 as docs/conventions.md corrects Definition 1, 1 as printed in (35).
CONSTANT_FACTORS = {"corrected": 2.0, "printed": 1.0}


@dataclass
class Constants:
    """The constants of Theorem 2 for one partition (docs/conventions.md).

    ``alpha`` ``(k,)``: strong-convexity moduli ``alpha_C`` of ``f_C`` (13); ``beta`` ``(n,)``:
    Lipschitz constants ``beta_i`` of ``grad L_i`` (12); ``delta`` ``(n,)``:
    ``delta_i = ||grad L_i(w_bar_C)||_*`` (11); ``wbar`` ``(k, d)``: the cluster minimizers
    ``w_bar_C = argmin f_C`` (9); ``outside`` ``(n,)``: ``sum_{j notin C} A_ij``; ``boundary``
    ``(k,)``: ``|dC|``; ``kappa``, ``rho``: the norm factors of :func:`norm_factors`.
    """

    part: Partition
    alpha: np.ndarray  # (k,)
    beta: np.ndarray  # (n,)
    delta: np.ndarray  # (n,)
    wbar: np.ndarray  # (k, d)
    outside: np.ndarray  # (n,) sum_{j notin C} A_ij
    boundary: np.ndarray  # (k,)
    kappa: float  # max ||x||_p / ||x||_2
    rho: float  # kappa_p * mu_q


def check_scope(model: ModelDeclaration) -> None:
    """Raise :class:`UnsupportedError` for losses, constraints or penalties Theorem 2 misses.

    Theorem 2 needs a norm penalty ``phi`` (the capacities ``||u_e||_* <= lambda A_e``), smooth
    library losses (``beta_i`` (12) and ``alpha_C`` (13) from their Hessian bounds) and no node
    constraints; the error names the node or the penalty.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> check_scope(gm.GTVModel(nx.path_graph(2), dim=1))
    >>> check_scope(gm.GTVModel(nx.path_graph(2), dim=1, penalty=gm.SquaredNorm2()))
    Traceback (most recent call last):
    ...
    gtvmodel.errors.UnsupportedError: penalty SquaredNorm2() is not a norm: ...
    """
    pen = model.penalty
    if not pen.is_norm:
        raise UnsupportedError(
            f"penalty {pen!r} is not a norm: Theorem 2 and the flow capacities "
            "||u_e||_* <= lambda A_e need a norm penalty (Norm2, Norm1, NormInf, NormP)")
    for i, node in enumerate(model.nodes):
        loss = model.loss_at(i)
        if loss.batch_class is None:  # an expression in the node's variable
            raise UnsupportedError(
                f"node {node!r}: a symbolic loss has no gradient or curvature bounds; Theorem 2 "
                "needs a smooth library loss (squared, logistic, Huber, quadratic, zero)")
        if not loss.smooth:
            raise UnsupportedError(
                f"node {node!r}: {loss!r} is not differentiable (non-smooth loss or an l1 "
                "term); Theorem 2 needs losses with Lipschitz gradients")
        if model.constraints_at(i):
            raise UnsupportedError(
                f"node {node!r} has constraints; Theorem 2 covers unconstrained smooth losses")


def norm_factors(model: ModelDeclaration) -> tuple[float, float]:
    """``kappa_p = max ||x||_p / ||x||_2`` and ``rho = kappa_p * max ||y||_q / ||y||_2``.

    For the penalty ``phi = ||.||_p`` in dimension ``d``: ``kappa_p = d^max(0, 1/p - 1/2)``
    (deviation bound (37)) and ``rho = d^|1/p - 1/2|`` (the curvature term of the budgets);
    both are 1 for :class:`~gtvmodel.terms.penalties.Norm2` (docs/conventions.md), and
    ``sqrt(min(p, q))`` for the nuclear norm of ``p x q`` matrices (the penalty's
    ``l2_equivalence``).

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> norm_factors(gm.GTVModel(nx.path_graph(2), dim=4))
    (1.0, 1.0)
    >>> norm_factors(gm.GTVModel(nx.path_graph(2), dim=4, penalty=gm.Norm1()))
    (2.0, 2.0)
    """
    return model.penalty.l2_equivalence(model.dim)


def node_hessian_bounds(model: ModelDeclaration) -> tuple[np.ndarray, np.ndarray]:
    """``(H_lo, H_hi)``, ``(n, d, d)`` global bounds ``H_lo_i <= hess L_i(w) <= H_hi_i`` of
    every node's loss: the batches' Hessian bounds (their cached Gram matrices) plus
    ``2 kappa_i I``; zero-loss nodes (in no batch) keep ``2 kappa_i I``.  ``beta_i`` (12) is
    ``lambda_max(H_hi_i)``.  Needs smooth library losses (:func:`check_scope`)."""
    n, d = model.num_nodes, model.dim
    st = model.structure()
    H_lo = np.broadcast_to(2.0 * st.l2[:, None, None] * np.eye(d), (n, d, d)).copy()
    H_hi = H_lo.copy()
    for b in st.batches:
        lo, hi = b.hessian_bounds()
        H_lo[b.nodes] += lo
        H_hi[b.nodes] += hi
    return H_lo, H_hi


def theorem2_constants(model: ModelDeclaration, part: Partition,
                       solver: str | None = None) -> Constants:
    """alpha_C, beta_i, w_bar_C, delta_i, |dC| of Theorem 2 (vectorized over nodes).

    ``alpha_C = lambda_min(sum_{i in C} H_lo_i)`` (13), ``beta_i = lambda_max(H_hi_i)`` (12),
    ``w_bar_C = argmin f_C`` (9) (closed form when ``f_C`` is quadratic, else one solve of the
    cluster graph at ``lambda = 0``), ``delta_i = ||grad L_i(w_bar_C)||_*`` (11), the outside
    weights ``sum_{j notin C} A_ij`` and ``|dC|``, and the norm factors of
    :func:`norm_factors`.  Raises :class:`~gtvmodel.errors.UnsupportedError` out of scope
    (:func:`check_scope`) or when ``alpha_C = 0``.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)  # triangles joined by edge (2, 3)
    >>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> from gtvmodel.theory.partition import normalize_partition
    >>> k_ = theorem2_constants(model, normalize_partition(model, [[0, 1, 2], [3, 4, 5]]))
    >>> k_.alpha.tolist(), k_.wbar.ravel().tolist(), k_.boundary.tolist()
    ([6.0, 6.0], [1.0, -1.0], [1.0, 1.0])
    >>> k_.beta.tolist(), k_.delta.round(3).tolist()
    ([2.0, 2.0, 2.0, 2.0, 2.0, 2.0], [0.0, 0.4, 0.4, 0.0, 0.2, 0.2])
    """
    check_scope(model)
    n, d, k = model.num_nodes, model.dim, len(part.labels)
    H_lo, H_hi = node_hessian_bounds(model)
    S_lo = np.zeros((k, d, d))
    S_hi = np.zeros((k, d, d))
    np.add.at(S_lo, part.cid, H_lo)
    np.add.at(S_hi, part.cid, H_hi)
    alpha = np.linalg.eigvalsh(S_lo)[:, 0]
    top = np.linalg.eigvalsh(S_hi)[:, -1]
    for c in range(k):
        if not alpha[c] > 1e-12 * max(1.0, top[c]):
            raise UnsupportedError(
                f"cluster {part.labels[c]!r}: f_C = sum of its losses has no global strong "
                f"convexity modulus (alpha_C = lambda_min(sum H_lo) = {alpha[c]:.3g}); Theorem 2 "
                "needs alpha_C > 0.  Squared losses need sum X^T X / m of full rank; logistic "
                "and Huber losses flatten out and need an l2= term")
    beta = np.maximum(np.linalg.eigvalsh(H_hi)[:, -1], 0.0)
    # w_bar_C: closed form where f_C is quadratic (H_lo == H_hi at every member)
    quad_node = np.all(H_lo == H_hi, axis=(1, 2))
    quad = np.bincount(part.cid, ~quad_node, minlength=k) == 0
    wbar = np.zeros((k, d))
    if quad.any():
        g0 = np.zeros((k, d))
        np.add.at(g0, part.cid, model.loss_gradients(np.zeros((n, d))))
        wbar[quad] = np.linalg.solve(S_lo[quad], -g0[quad][..., None])[..., 0]
    if not quad.all():
        cg = build_cluster_graph(model, part)
        cg.lam = 0.0
        wbar[~quad] = cg.solve_exact(solver=solver).weights[~quad]
    grads = model.loss_gradients(wbar[part.cid])
    delta = model.penalty.dual_norm(grads)
    h, t = model.edges[:, 0], model.edges[:, 1]
    inter = part.cid[h] != part.cid[t]
    A = model.edge_weights[inter]
    outside = (np.bincount(h[inter], A, minlength=n) + np.bincount(t[inter], A, minlength=n))
    boundary = np.bincount(part.cid, outside, minlength=k)
    kappa, rho = norm_factors(model)
    return Constants(part, alpha, beta, delta, wbar, outside, boundary, kappa, rho)


def check_lam(lam: Any, where: str) -> float:
    """``lambda`` as a float, finite and ``> 0`` (the budgets contain ``delta_i / lambda``).

    Examples
    --------
    >>> check_lam(0.5, "check_well_connected")
    0.5
    >>> check_lam(0, "check_well_connected")
    Traceback (most recent call last):
    ...
    gtvmodel.errors.ParameterError: check_well_connected: lam must be ... > 0...
    """
    return check_scalar(lam, "lam", min_val=0.0, include_boundaries="neither", where=where)

