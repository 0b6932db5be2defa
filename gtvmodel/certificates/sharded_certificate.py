"""Certificates of a distributed run of Algorithm 1 from per-shard partial sums.

The certified gap (34) of :func:`~gtvmodel.certificates.certificate.certify` is a sum over nodes
and edges once the flows are repaired: ``P(W) = sum_i L_i(w_i) + sum_e lambda A_e phi(v_e)``
and ``D(U') = -sum_i h_i*(s_i) - sum_e lambda A_e phi*(u'_e / (lambda A_e))`` (19) with the
demands ``s_i = -(D^T U')_i`` needing only the flows of the edges at node ``i``.  Each shard
holds those (its incident edges) and evaluates, with the package's own functions on its
restricted declaration (:func:`node_sums`, :func:`edge_sums`:
:func:`~gtvmodel.certificates.value.node_bounds`, ``loss_values``, ``constraint_violations``),
its nodes' terms and its owned edges' terms; the driver adds them.  The repair (steps 1 and 3
of :func:`~gtvmodel.certificates.repair.repair`, :func:`repair_rows`) is row-wise once two
global scalars are known, so every shard repairs its incident rows itself (a boundary edge is
repaired, identically, by both its shards):

* the decision to project onto the capacities (27): ``max_e |u_e|`` and the largest capacity
  excess, before and after the projection -- 4 floats per shard;
* the factor ``theta`` of step 3 (:func:`~gtvmodel.certificates.repair.capacity_ratio`): a
  minimum over edges, one float per shard.

**What a certificate gathers**: two calls per shard (a few hundred pickled bytes each way),
independent of ``n``, ``d`` and the data: ``O(shards)`` bytes, no weights, no flows.

**Where it falls back to the gathered certificate** (``n d + |E| d`` numbers to the driver and
:func:`~gtvmodel.certificates.certificate.certify` there, as before), and says so
(:attr:`~gtvmodel.primal_dual.distributed.DistributedResult.certificates_gathered`): when the
repair needs a global step -- subspace conditions (zero-loss nodes, rank-deficient squared
losses: the minimum-norm correction solves with ``A A^T`` over the whole graph), a second
round of projections, nodes outside their bounded conjugate domains (step 4: gradient
correction, domain scaling LP, convex projection as large as the dual problem), residuals
that need a certified radius (the radii need the global ``P(W)`` and a Dijkstra over the
graph) -- when ``W`` violates a node constraint, or ``lambda = 0``.  Such a certificate is
exactly the serial one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from .. import _xp
from ..declaration import ModelDeclaration
from ..results import Labels
from .certificate import Certificate
from .dual_side import dual_bad
from .kinds import EPS, capacities, max_rows, node_kinds, norm_penalty
from .radii import Radii, candidate_radii
from .repair import (
    CAP_RTOL,
    PROJECT_NOTE,
    capacity_ratio,
    rescale_note,
    scale_flows,
)
from .value import demands, node_bounds

__all__ = ["ShardCertificate", "shard_scan", "shard_parts", "repair_rows", "edge_sums",
           "node_sums", "join_sums", "repair_plan", "combine_parts",
           "needs_gather", "make_certificate", "local_flows"]


@dataclass
class ShardCertificate:
    """A shard's partial sums of a certificate: ``P`` (its nodes' losses and its owned edges'
    GTV terms), ``node_conj`` and ``edge_conj`` (sums of its nodes' conjugate bounds and its
    owned edges' conjugates), ``conic_tol``, ``charge`` (finite residual charges), ``mag``
    (magnitudes of the summands, for the rounding bound), ``bad_primal`` (global positions of
    its nodes violating their constraints or outside a loss's domain), ``outside`` (its nodes
    whose demand lies outside their conjugate domains beyond ``feas_tol``, or at ``+inf``),
    ``edges_finite`` (its owned edges' conjugates are finite)."""

    P: float
    node_conj: float
    edge_conj: float
    conic_tol: float
    charge: float
    mag: float
    bad_primal: np.ndarray
    outside: int
    edges_finite: bool


def local_flows(model: ModelDeclaration, U_inc: np.ndarray, perm: np.ndarray,
                 sign: np.ndarray) -> np.ndarray:
    """The incident flows ``U_inc`` (serial order and orientation) in the order ``perm`` and
    orientation ``sign`` of the shard's declaration's edges."""
    return sign[:, None] * U_inc[perm] if perm.size else np.zeros((0, model.dim))


def shard_scan(model: ModelDeclaration, U: Any, rows: slice = slice(None)
               ) -> tuple[float, float, float, float, float]:
    """A shard's scalars for the global decisions of the repair on its incident flows ``U``
    (local order; or the block ``rows`` of a model's flows, any array namespace,
    :mod:`gtvmodel._xp`): ``max|u|``, the capacity excess before and after the row-wise
    projection, and :func:`~gtvmodel.certificates.repair.capacity_ratio` without and with
    it."""
    cap = capacities(model)
    xp = _xp.namespace(U)
    scale = float(xp.max(xp.abs(U))) if U.shape[0] * U.shape[1] else 0.0
    if cap is None or not U.shape[0]:
        return scale, 0.0, 0.0, 1.0, 1.0
    pen = norm_penalty(model)
    c = _xp.like(cap[rows], U)
    Up = pen.project_dual_ball(U, c)
    exc = max(float(xp.max(pen.dual_norm(U) - c)), 0.0)
    exc_p = max(float(xp.max(pen.dual_norm(Up) - c)), 0.0)
    return (scale, exc, exc_p, capacity_ratio(model, U, rows),
            capacity_ratio(model, Up, rows))


def repair_rows(model: ModelDeclaration, U: Any, project: bool, theta: float,
                rows: slice = slice(None)) -> Any:
    """Steps 1 and 3 of the repair on rows of flows (a shard's incident flows, or the block
    ``rows`` of a model's flows; any array namespace) with the driver's decisions
    (:func:`repair_plan`): the projection onto the capacities (27), then the factor
    ``theta``."""
    if project:
        cap = cast(np.ndarray, capacities(model))  # (a projection: a norm penalty)
        U = norm_penalty(model).project_dual_ball(U, _xp.like(cap[rows], U))
    if theta < 1.0:
        U = scale_flows(model, U, theta, rows)
    return U


def edge_sums(model: ModelDeclaration, U: Any, V: Any, cap: Any) -> tuple[list[float], Any]:
    """The GTV terms of edge rows (any array namespace): repaired flows ``U``, differences
    ``V = w_{e+} - w_{e-}`` and capacities ``lambda A_e`` (``cap``) give ``[P_E, edge_conj,
    mag, finite]`` (the sums of ``lambda A_e phi(v_e)`` and of the edge conjugates, the
    magnitudes of the summands and of ``u_e^T v_e`` for the rounding bound, whether every
    conjugate is finite) and the per-edge Fenchel-Young gaps."""
    xp = _xp.namespace(U)
    penv = cap * model.penalty.rows_value(V)
    ec = model.penalty.conjugate_rows(U, cap)
    UV = U * V
    edge_gaps = penv + ec - xp.sum(UV, axis=1)
    fin = xp.isfinite(ec)
    mag = (float(xp.sum(xp.abs(penv))) + float(xp.sum(xp.abs(xp.where(fin, ec, 0.0))))
           + float(xp.sum(xp.abs(UV))))
    return [float(xp.sum(penv)), float(xp.sum(ec)), mag, float(bool(xp.all(fin)))], edge_gaps


def node_sums(model: ModelDeclaration, n_own: int, W: np.ndarray, S: np.ndarray,
              rnd: np.ndarray, feas_tol: float, near: Any = None, edge_P: float | None = None
              ) -> tuple[dict[str, Any], np.ndarray]:
    """The node terms of a certificate at weights ``W`` and demands ``S`` (with their rounding
    bound ``rnd``, :func:`~gtvmodel.certificates.value.demands`), rows ``< n_own`` counted
    (a shard's ghosts are not its to count): the fields of :class:`ShardCertificate` but the
    edges' (:func:`~gtvmodel.certificates.value.node_bounds`) and the per-node Fenchel-Young
    gaps.  Residuals above rounding need radii: with ``edge_P`` (the sum of the GTV terms:
    the caller sees the whole model, so ``P(W)`` is known) they are certified from it as
    :func:`~gtvmodel.certificates.certificate.certify` does
    (:func:`~gtvmodel.certificates.radii.candidate_radii`, on first use), else such a node
    is ``outside``.  ``near``: the demands and weights as device tensors
    (:func:`~gtvmodel.certificates.value.node_bounds`)."""
    own = slice(0, n_own)
    lossv = model.loss_values(W)[own]
    viol = model.constraint_violations(W)[own]
    wscale = np.maximum(1.0, np.abs(W[own]).max(axis=1, initial=0.0))
    bad_primal = np.flatnonzero(~(viol <= feas_tol * wscale) | ~np.isfinite(lossv))
    radii: Any = np.inf
    if edge_P is not None and bad_primal.size == 0:
        P_W = float(np.sum(lossv)) + edge_P
        radii = Radii(model.num_nodes, lambda: candidate_radii(model, W, P_W, viol, None, None))
    dv = node_bounds(model, S, rnd, radii, None, W, near)
    own_dv = {k: dv[k][own] for k in ("node_conj", "s", "rho")}
    outside = dual_bad(own_dv, feas_tol, True).size
    nc, ch = dv["node_conj"][own], dv["charge"][own]
    fin = np.isfinite
    with np.errstate(invalid="ignore"):
        P = float(np.sum(lossv)) if fin(lossv).all() else np.inf
        SW = dv["s"][own] * W[own]
        node_gaps = lossv + nc - SW.sum(axis=1)
    cm = dv["conj_magnitude"][own] + ch
    mag = float(np.abs(lossv[fin(lossv)]).sum() + np.abs(cm[fin(cm)]).sum() + np.abs(SW).sum())
    return {"P": P, "node_conj": float(nc.sum()), "conic_tol": float(dv["conic_tol"]),
            "charge": float(ch[fin(ch)].sum()), "mag": mag, "bad_primal": bad_primal,
            "outside": int(outside)}, node_gaps


def join_sums(nodes: dict[str, Any], edges: list[float]) -> ShardCertificate:
    """A :class:`ShardCertificate` from :func:`node_sums`' fields and the (added)
    :func:`edge_sums` of the same edges."""
    P_E, edge_conj, mag, finite = edges
    return ShardCertificate(**{**nodes, "P": nodes["P"] + P_E, "mag": nodes["mag"] + mag},
                            edge_conj=edge_conj, edges_finite=bool(finite))


def shard_parts(model: ModelDeclaration, n_own: int, W: np.ndarray, U: np.ndarray,
                owned: np.ndarray, sign: np.ndarray, project: bool, theta: float,
                feas_tol: float) -> tuple[ShardCertificate, np.ndarray, np.ndarray, np.ndarray]:
    """A shard's partial sums at its local weights ``W`` (own rows first, then ghosts) and
    incident flows ``U`` (local order), repaired with the driver's ``project`` and ``theta``;
    also the repaired flows and the Fenchel-Young gaps of its nodes and owned edges (kept on
    the shard).  The node terms are :func:`node_sums` on the shard's declaration; the owned
    edges' terms (:func:`edge_sums`) are taken in the serial orientation (``sign``), since a
    penalty need not be symmetric (the demands do not depend on the orientation)."""
    U = repair_rows(model, U, project, theta)
    S, rnd = demands(model, U)
    nodes, node_gaps = node_sums(model, n_own, W, S, rnd, feas_tol)
    flip = sign[owned, None]
    V = flip * np.asarray(model.incidence[owned] @ W).reshape(-1, model.dim)
    edges, edge_gaps = edge_sums(model, flip * U[owned], V, model.capacities[owned])
    return join_sums(nodes, edges), U, node_gaps, edge_gaps


def needs_gather(model: ModelDeclaration, subspace: bool = False) -> str:
    """Why a certificate of ``model`` cannot be split into shard sums whatever the iterate
    (empty when it can): subspace conditions (unless ``subspace``: the caller holds every
    flow and corrects them itself), ill-conditioned nodes (the affine variant of the repair,
    :data:`~gtvmodel.certificates.kinds.STIFF_RTOL`) or ``lambda = 0``."""
    if model.num_edges and model.lam == 0:
        return "lambda = 0"
    if node_kinds(model).subspace.size and not subspace:
        return "subspace conditions (zero-loss or rank-deficient squared-loss nodes)"
    if node_kinds(model).stiff.size:
        return "ill-conditioned nodes (the affine variant of the repair)"
    return ""


def repair_plan(scans: list[tuple[float, float, float, float, float]]
                ) -> tuple[bool, float, list[str]] | None:
    """The driver's global step of the repair from the shards' :func:`shard_scan` scalars:
    ``(project, theta, repairs)``, or None when one projection does not reach the capacities
    (the serial repair would alternate more rounds: gather)."""
    arr = np.array(scans, dtype=float).reshape(-1, 5)
    scale = max(1.0, float(arr[:, 0].max(initial=0.0)))
    project = bool(arr[:, 1].max(initial=0.0) > CAP_RTOL * scale)
    if project and arr[:, 2].max(initial=0.0) > CAP_RTOL * scale:
        return None
    theta = float(arr[:, 4 if project else 3].min(initial=1.0))
    repairs = [PROJECT_NOTE] if project else []
    if theta < 1.0:
        theta *= 1.0 - 4.0 * EPS
        repairs += rescale_note(theta)
    return project, theta, repairs


def combine_parts(model: ModelDeclaration, parts: list[ShardCertificate], tol: float,
                  feas_tol: float) -> dict[str, float] | None:
    """The certificate's scalars from the shards' partial sums, as
    :func:`~gtvmodel.certificates.certificate.certify` forms them (gap (34) ``P - D +
    rounding + conic tolerances``), or None when a shard needs a global repair step (nodes
    outside their conjugate domains, infeasible weights, infinite edge conjugates)."""
    if any(p.bad_primal.size or p.outside or not p.edges_finite for p in parts):
        return None
    P = float(sum(p.P for p in parts))
    conic_tol = float(sum(p.conic_tol for p in parts))
    D = -float(sum(p.node_conj for p in parts)) - float(sum(p.edge_conj for p in parts)) \
        - conic_tol
    nrow = 4 * (model.dim + max_rows(model) + 8)
    rounding = nrow * EPS * (abs(P) + sum(p.mag for p in parts))
    gap = max(P - D + rounding + conic_tol, 0.0)
    return {"primal_value": P, "dual_value": D, "gap": gap,
            "relative_gap": gap / max(1.0, abs(P)),
            "tolerance": rounding + sum(p.charge for p in parts) + conic_tol}


def make_certificate(model: ModelDeclaration, values: dict[str, Any], repairs: list[str],
                     theta: float, W: np.ndarray, U: np.ndarray, node_gaps: np.ndarray,
                     edge_gaps: np.ndarray, tol: float, feas_tol: float) -> Certificate:
    """The :class:`~gtvmodel.certificates.certificate.Certificate` of a sharded certificate
    (built at the end of a run, when ``W``, the repaired flows ``U`` and the gaps are
    gathered once for the result)."""
    return Certificate(
        **values, feasible=True, infeasible_nodes=[], dual_feasible=True,
        dual_infeasible_nodes=[], repaired=bool(repairs), repairs=list(repairs), weights=W,
        flows=U, kkt={"complementarity": float(edge_gaps.sum()),
                      "node_gap": float(node_gaps.sum())},
        node_gaps=node_gaps, edge_gaps=edge_gaps, flow_scale=theta, feas_tol=feas_tol, tol=tol,
        radii=np.full(model.num_nodes, np.nan),
        labels=Labels(model.nodes, model.edges))


