"""The two computations of one iteration of Algorithm 1 (paper 001), as message passing.

    node i:  v_i = w_i^k - tau_i (D^T u^k)_i ,    w_i^{k+1} = PU_i(v_i)                  (32)
    edge e:  u_e^{k+1} = DU_e( u_e^k + sigma_e (2 D w^{k+1} - D w^k)_e )                 (33)

``PU_i`` is the prox of the node's loss with its constraints
(:class:`~gtvmodel.primal_dual.prox.NodeUpdates`), ``DU_e`` the prox of ``sigma_e (lambda A_e
phi)^*`` (:meth:`~gtvmodel.terms.penalties.Penalty.dual_update`).  :func:`prox_point` and
:func:`dual_update` are the formulas, over any stack of rows (all nodes / all edges in the
vectorized loop of :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`, one in
:class:`NodeUpdate` / :class:`EdgeUpdate`, which state what node ``i`` and edge ``e`` need:
node ``i`` only its own loss and the flows on its incident edges, edge ``e`` only the old and
new weights of its two endpoints).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..declaration import ModelDeclaration
from ..terms.penalties import Penalty
from .prox import NodeUpdates

__all__ = ["prox_point", "dual_update", "NodeUpdate", "EdgeUpdate"]


def prox_point(W: np.ndarray, tau_col: np.ndarray, DTu: np.ndarray) -> np.ndarray:
    """The point ``v = w^k - T D^T u^k`` whose prox PU (32) is ``w^{k+1}`` (rows: nodes;
    ``tau_col`` the steps ``tau_i`` as a column, ``DTu`` the rows ``(D^T u^k)_i``)."""
    return W - tau_col * DTu


def dual_update(penalty: Penalty, U: np.ndarray, DW_new: np.ndarray, DW: np.ndarray,
                sigma: np.ndarray, sigma_col: np.ndarray, lamA: np.ndarray) -> np.ndarray:
    """DU (33) for the rows ``e`` of ``U``: ``DU_e(u_e + sigma_e (2 (D w^{k+1})_e - (D
    w^k)_e))`` with the capacities ``lamA = lambda A_e``; ``sigma`` the steps, ``sigma_col``
    the same as a column.  The argument of ``DU`` is built in one temporary."""
    U_bar = np.multiply(DW_new, 2.0)
    U_bar -= DW
    U_bar *= sigma_col
    U_bar += U
    return penalty.dual_update(U_bar, sigma, lamA)


@dataclass
class NodeUpdate:
    """The computation of node ``i`` in one iteration: from its own weight ``w_i``, the flows
    ``u_e`` on its incident edges (with orientation signs ``+1`` if ``i = e+``, ``-1`` if ``i =
    e-``, so ``(D^T u)_i = sum_e sign_e u_e``) and its step ``tau_i``, the new weight
    ``PU_i(w_i - tau_i (D^T u)_i)`` (32)."""

    updates: NodeUpdates
    i: int

    def __call__(self, w_i: np.ndarray, flows: np.ndarray, signs: np.ndarray, tau_i: float,
                 k: int = 0) -> np.ndarray:
        """``w_i^{k+1}`` (32) at iteration ``k`` (the CVXPY path's tolerance depends on it)."""
        v = prox_point(w_i, tau_i, (signs[:, None] * flows).sum(axis=0))
        return self.updates.node(self.i, v, tau_i, k, w_i)


@dataclass
class EdgeUpdate:
    """The computation of edge ``e = (e+, e-)``: from its flow ``u_e``, the old and new weights
    of its two endpoints and ``sigma_e``, the new flow
    ``DU_e(u_e + sigma_e (2 (w+_new - w-_new) - (w+_old - w-_old)))`` (33)."""

    model: ModelDeclaration
    e: int

    def __call__(self, u_e: np.ndarray, head_new: np.ndarray, tail_new: np.ndarray,
                 head_old: np.ndarray, tail_old: np.ndarray, sigma_e: float) -> np.ndarray:
        """``u_e^{k+1}`` (33)."""
        sigma = np.array([sigma_e])
        lam_a = np.array([self.model.lam * self.model.edge_weights[self.e]])  # its capacity
        return dual_update(self.model.penalty, u_e[None], (head_new - tail_new)[None],
                           (head_old - tail_old)[None], sigma, sigma[:, None], lam_a)[0]
