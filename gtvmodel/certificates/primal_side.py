"""The primal side of the certificate (34) (:func:`~gtvmodel.certificates.certificate.certify`):
``P(W)`` (16) with the node constraints checked node by node, the pairings ``u_e^T v_e`` of the
flows with the edge differences ``V = D W`` (formed in blocks of rows, never whole: the
certificate's peak memory, issue 30 item 3) and the KKT residuals of the given flows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..declaration import ModelDeclaration
from ..terms.losses import smooth_gradients
from .kinds import capacities, node_kinds

__all__ = ["Primal", "Pairing", "EDGE_BLOCK", "edge_pass", "primal", "pairing", "flow_kkt"]


@dataclass
class Primal:
    """``P(W)`` (16) and its pieces: the node loss values ``L_i(w_i)`` (``+inf`` outside a
    symbolic loss's domain), the edge terms ``lambda A_e phi(v_e)`` of the edge differences
    ``v_e = w_{e+} - w_{e-}``, the constraint violations and the nodes failing ``feas_tol``;
    and the pairings ``u_e^T v_e`` with the flows ``U`` (:func:`edge_pass`)."""

    lossv: np.ndarray
    penv: np.ndarray
    P: float
    viol: np.ndarray
    bad: np.ndarray
    reasons: list[str]
    pairing: Pairing

    @property
    def feasible(self) -> bool:
        """Whether every node meets its constraints within ``feas_tol`` (no ``bad`` node)."""
        return self.bad.size == 0


@dataclass
class Pairing:
    """``u_e^T v_e`` per edge (``dots``) and ``sum_e sum_j |u_ej v_ej|`` (``magnitude``, for
    the rounding bound) of the flows ``U`` and the edge differences ``V = D W``."""

    U: np.ndarray
    dots: np.ndarray
    magnitude: float


#: Rows of the edge differences ``V = D W`` formed at a time by :func:`edge_pass` (``V`` is
#: never formed whole: an ``|E| x d`` array less at the certificate's peak, issue 30 item 3).
EDGE_BLOCK = 1 << 15


def edge_pass(model: ModelDeclaration, W: np.ndarray, U: np.ndarray, penv: bool
               ) -> tuple[np.ndarray | None, Pairing]:
    """``(penv, pairing)``: the edge terms ``lambda A_e phi(v_e)`` (only with ``penv``) and the
    pairings of ``U`` with ``V = D W``, in blocks of :data:`EDGE_BLOCK` rows of ``D``: each row
    the same sums as from the whole ``V`` (scipy's CSR product row by row), the magnitude a
    sum of the blocks' sums."""
    E, d = model.num_edges, model.dim
    pv = np.empty(E) if penv else None
    dots = np.empty(E)
    mag = 0.0
    D, cap, pen = model.incidence, model.capacities, model.penalty
    for a in range(0, E, EDGE_BLOCK):
        b = min(a + EDGE_BLOCK, E)
        V = np.asarray(D[a:b] @ W).reshape(b - a, d)
        if pv is not None:
            pv[a:b] = cap[a:b] * pen.rows_value(V)
        t = U[a:b] * V
        dots[a:b] = t.sum(axis=1)
        mag += float(np.abs(t, out=t).sum())
    return pv, Pairing(U, dots, mag)


def primal(model: ModelDeclaration, W: np.ndarray, U: np.ndarray, feas_tol: float) -> Primal:
    """``P(W)`` (``+inf`` outside a symbolic loss's domain), the node constraints checked
    node by node: ``viol_i <= feas_tol max(1, ||w_i||_inf)``, and the pairings with the flows
    ``U`` (in the same pass over the edge differences)."""
    lossv = model.loss_values(W)
    penv, pair = edge_pass(model, W, U, True)
    assert penv is not None
    with np.errstate(invalid="ignore"):
        # pairwise sums: their error (log2 N eps sum|x|) is inside the rounding bound
        P = float(np.sum(lossv) + np.sum(penv)) if np.isfinite(lossv).all() else np.inf
    viol = model.constraint_violations(W)
    wscale = np.maximum(1.0, np.abs(W).max(axis=1, initial=0.0))
    bad = np.flatnonzero(~(viol <= feas_tol * wscale) | ~np.isfinite(lossv))
    reasons: list[str] = []
    if bad.size:
        outside = np.flatnonzero(~np.isfinite(lossv))
        if outside.size:
            reasons.append(f"W is outside the domain of the loss at {outside.size} node(s) "
                           f"(first {model.nodes[outside[0]]!r}): P(W) = +inf")
        if (viol > feas_tol * wscale).any() or np.isnan(viol).any():
            k = int(np.flatnonzero(~(viol <= feas_tol * wscale))[0])
            reasons.append(f"W violates the constraints of node {model.nodes[k]!r} by "
                           f"{viol[k]:.3g} (> feas_tol max(1, ||w_i||_inf))")
    return Primal(lossv, penv, P, viol, bad, reasons, pair)


def pairing(model: ModelDeclaration, pr: Primal, W: np.ndarray, U: np.ndarray) -> Pairing:
    """The pairings of the final flows ``U``: :func:`primal`'s where the dual side kept its
    flows (the common case), else one more pass over the edge differences."""
    if U is pr.pairing.U:
        return pr.pairing
    return edge_pass(model, W, U, False)[1]


def flow_kkt(model: ModelDeclaration, W: np.ndarray, U0: np.ndarray) -> dict[str, float]:
    """The KKT residuals of the original flows ``U0`` (taken before the repair changes them
    in place): flow conservation ``||D^T u + grad h(w)||`` over nodes with a gradient and the
    capacity violation ``max_e (||u_e||_* - lambda A_e)_+`` (27)."""
    n, d = model.num_nodes, model.dim
    kkt: dict[str, float] = {}
    kinds = node_kinds(model)
    if kinds.gradient.any():
        st = model.structure()
        G = smooth_gradients(st.batches, st.l2, W)
        div = np.asarray(model.incidence.T @ U0) if model.num_edges else np.zeros((n, d))
        kkt["flow_conservation"] = float(np.linalg.norm((div + G)[kinds.gradient]))
    else:
        kkt["flow_conservation"] = float("nan")
    cap = capacities(model)
    kkt["capacity_violation"] = (float(np.max(model.penalty.dual_norm(U0) - cap, initial=0.0))
                                 if cap is not None and model.num_edges else 0.0)
    return kkt
