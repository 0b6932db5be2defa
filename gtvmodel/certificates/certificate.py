"""Certified duality gaps (34) for candidate GTV solutions, with dual-feasibility repair.

For weights ``W`` and edge flows ``U``, weak duality gives ``P(W) >= P* >= D(U')`` for every
dual-feasible ``U'``, so ``gap = P(W) - D(U')`` bounds the suboptimality ``P(W) - P*``.
:func:`certify` computes such a bound cheaply (numpy and sparse linear algebra for the common
losses, one small cached CVXPY problem for the others) and reports how it got there.

**Dual value.**  ``D(U) = -sum_i h_i*(s_i) - sum_e lambda A_e phi*(u_e/(lambda A_e))`` with
``s = -D^T U`` and ``h_i = L_i + eta_i||.||_1 + kappa_i||.||^2 + iota_{C_i}`` (docs/conventions.md).
Every node conjugate is evaluated as an *upper bound* (a feasible point of the infimal
convolution that defines it), so the computed ``D`` never exceeds the true one:

- closed forms for zero, quadratic and squared losses (without ``l1`` or constraints);
- smooth data-fit losses (logistic, Huber; without ``l1`` or constraints): a batched damped
  Newton method on ``sup_w s^T w - h(w)`` warm-started at the candidate weights; the split is
  read off the maximizer (row duals ``v_r = ell'(x_r^T w)``, always in the domain of ``ell*``)
  and evaluated exactly (:func:`~gtvmodel.terms.losses.newton_conjugates`, through the batches'
  :meth:`~gtvmodel.terms.losses.LossBatch.conjugate_group` hooks);
- for the other library nodes (and Newton failures) the infimal-convolution problem of
  :func:`gtvmodel.duality.dual.node_conjugate_parts`, stacked over all of them in one CVXPY problem
  built once per model (DPP) and re-solved; the solver's point is projected into the domains
  and the value recomputed in numpy, so solver inaccuracy cannot make it too small;
- conic nodes (symbolic losses/constraints): a bound from a repaired, checked dual point of
  each node's conic program (:func:`gtvmodel.duality.conic_bounds.conjugate_bound`), its demand
  shift charged like a residual (no solver tolerance is taken on trust).

**Residuals and the radii R_i** (docs/conventions.md).  Where ``s_i`` lies (numerically) just
outside the domain of ``h_i*`` (a zero-loss node needs ``s_i = 0`` exactly, a split computed in
floating point leaves a residual), the part ``rho_i`` outside it is charged
(:func:`~gtvmodel.certificates.value.residual_charge`):

- an entry that is *rounding-level* (within the bound of the rounding error made in computing
  it) is floating-point noise of an exact split: charged to first order at the local
  maximizer, ``max(1, ||w_i||_inf) |rho_ij|``, like the rounding of the sums;
- any larger entry is charged ``R_i |rho_ij|``: exactly the conjugate of
  ``h_i + iota{||w||_inf <= R_i}``, rigorous when some minimizer has ``||w*_i||_inf <= R_i``.
  The radii are *certified* (:func:`~gtvmodel.certificates.radii.certified_radii`) from the
  level set ``P(w*) <= P(W)``: coercive nodes anchor them, edges propagate them; where none
  can be certified the charge is ``+inf`` and the gap says why.  A caller's ``radius=``
  replaces them as a listed assumption.

The charges and the rounding bound of the sums make up :attr:`Certificate.tolerance`, which
is *included* in the gap: ``gap >= P(W) - P*`` without a further tolerance.

**Repair** (:func:`repair_flows`).  Raw flows (e.g. iterates of Algorithm 1) are usually not dual
feasible.  Before the dual value is taken:

1. capacities ``||u_e||_* <= lambda A_e`` (norm penalties) by the row-wise projection
   :meth:`~gtvmodel.terms.penalties.Penalty.project_dual_ball`;
2. subspace conditions -- ``(D^T u)_i = 0`` at zero-loss nodes and ``(D^T u)_i in range(X_i^T)``
   at squared-loss nodes with ``rank X_i < d`` (no regularizers/constraints) -- by the
   minimum-norm correction ``delta = -A^T (A A^T)^+ A u`` of the stacked linear conditions
   ``A u = 0`` (:mod:`~gtvmodel.certificates.subspace`: ``A A^T`` through one cached
   eigen-decomposition when small, through the complement of small ranges, or by conjugate
   gradients applied through node potentials and the Laplacian ``D^T D``, ``A`` and ``A A^T``
   not formed; ``D`` is never formed dense).  Null
   directions come from the singular values of ``X_i``
   (:data:`~gtvmodel.certificates.kinds.NULL_SV_RTOL`).  At ill-conditioned smooth nodes
   (:data:`~gtvmodel.certificates.kinds.STIFF_RTOL`) an *affine variant* also matches the
   demand to the gradient of ``W``, since a mismatch ``delta`` along a direction of curvature
   ``e_j`` costs ``(delta^T v_j)^2 / (4 e_j)``; :func:`certify` evaluates it where those nodes
   carry more than :data:`STIFF_SHARE` of the gap and keeps the smaller gap;
3. steps 1-2 alternate (4 rounds; 16 when a certificate comes close to ``tol``), then the flows are
   scaled by ``theta = min(1, min_e lambda A_e / ||u_e||_*)``: the dual domain is convex and
   contains ``u = 0`` (every library ``L_i*`` is finite at 0), and scaling keeps step 2;
4. bounded conjugate domains (logistic, hinge, absolute, Huber rows, ``l1``) and cones
   (``NonNeg``, half-infinite boxes): if nodes remain outside, (a) at smooth nodes the flows are
   corrected (minimum-norm, sparse) towards demands equal to the gradients at the weights, which lie
   inside the domains; (b) at nodes whose CVXPY split leaves a signed residual ``r_i`` outside the
   domain, the incident flows that push ``s_i`` that way are shrunk coordinate by coordinate so that
   ``s_i`` moves by ``-r_i`` (the neighbours absorb it; up to :data:`SHRINK_ROUNDS` rounds with
   steps 1-3; closed form, so the gap stays a continuous function of the candidate: issue 16); (b')
   the largest ``theta`` with ``theta s_i in dom h_i*`` (one cached LP) is used when ``theta >=
   1/2``; (c) otherwise (0 can be a vertex of a domain, e.g. for logistic rows with separable data)
   the flows are projected onto the dual domain by one convex program as large as the dual problem
   (:func:`project_flows`, only with ``project="auto"``); (d) zero flows (dual feasible for every
   library node). These steps run for nodes outside their domains beyond ``feas_tol``; each is kept
   if it leaves fewer nodes at ``+inf`` or as many and a larger dual value.  Nodes whose bound is
   still ``+inf`` are listed in :attr:`Certificate.dual_infeasible_nodes` and the gap is ``+inf``
   (sound, never optimistic).

**Escalation** (``fallback=True``): a certificate within ``1e3 tol`` of certifying (or
infinite) is tried again with 16 projection rounds, with the given flows at the subgradient of
the edges that are not fused (:func:`subgradient_flows`) and with flows built from the weights; one
whose repair rescaled all flows by ``theta < 0.999`` also with the convex projection of the
given flows; the smallest bound is returned.

**Flows recovered from weights** (``flows=None``, :mod:`~gtvmodel.certificates.recovery`):
the flows minimizing the linearized sum of the edge and node Fenchel-Young gaps at ``W``
subject to the node conditions ``-(D^T u)_i in dh_i(w_i)`` (an LP on HiGHS for the ``l1`` and
``l_inf`` penalties and every norm at ``d = 1``, a conic program on Clarabel for ``Norm2`` and
differentiable penalties): at an optimum they meet every optimality condition, fused edges and
``l_inf`` ties included, without a threshold.  They are certified first; where they do not
certify ``W`` at ``tol`` (or the model is outside :func:`~gtvmodel.certificates.recovery.
recovery_scope`), the flows built as follows are certified too and the smaller gap is kept.

**Flows built from weights** (:func:`flows_from_weights`): start from the edge
optimality condition ``u_e in lambda A_e dphi(v_e)`` (the penalty's dual update applied to
``v_e/eps``), then add the minimum-norm correction that matches the node condition
``-(D^T u)_i = grad h_i(w_i)`` at every node with a gradient (smooth loss, no ``l1``, no
constraints; in a connected component where all nodes have one, the component mean of the
gradients is removed first, since flows can only move demand around) on the edges left free
by the edge condition, alternating with the capacity projection; then repair.

**What a certificate does not say**: it bounds the objective suboptimality, not the distance
of ``W`` to the minimizer (that needs strong convexity); weights that violate a node's
constraints by more than ``feas_tol max(1, ||w_i||_inf)`` or lie outside a symbolic loss's
domain get ``gap = inf`` (with :attr:`Certificate.reason`); floating-point rounding is bounded
by the usual model ``|fl(x op y) - x op y| <= eps |x op y|`` summed over the terms, not by
interval arithmetic; the conic (symbolic) nodes' sublevel radii rest on the solver's reported
accuracy (their conjugates do not).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._solver import check_solver
from .._validate import check_bool, check_option, check_scalar
from ..declaration import ModelDeclaration
from ..errors import UnsupportedError
from ..results import Labels, Result
from ..terms.losses import smooth_gradients
from .dual_side import (
    DualSide,
    domain_repairs,
    dual_reasons,
    evaluate_dual,
    given_flows,
    repaired_flows,
)
from .kinds import EPS, max_rows, node_kinds
from .primal_side import Pairing, Primal, flow_kkt, pairing, primal
from .radii import Radii, candidate_radii, radius_assumption
from .recovery import FULL_SIZE, fused_thresholds, recover_flows, uses_lp
from .repair import (
    project_flows,
)
from .value import checked_flows

__all__ = ["Certificate", "certify"]


@dataclass(kw_only=True)
class Certificate(Result):
    """A certified bound ``gap >= P(W) - P*`` on the suboptimality of ``W``; the shared
    vocabulary (:meth:`weight`, :meth:`flow`, :meth:`to_dict`, ...) is
    :class:`gtvmodel.results.Result`'s.  ``success``: ``W`` is certified at the ``tol`` given to
    :func:`certify` (:meth:`success_at` for another tolerance).  Built by :func:`certify`;
    the constructor stores its fields unchecked.

    Parameters
    ----------
    timings : dict
        Seconds: ``"repair"``, ``"evaluate"`` (the dual evaluation) and ``"total"``.
    labels : Labels
        The model's node labels and edges (:class:`gtvmodel.results.Labels`), for
        :meth:`weight` and :meth:`flow`.
    primal_value : float
        ``P(W)`` (losses, regularizers and GTV term; node constraints are checked separately).
    dual_value : float
        ``D(U')`` at the repaired flows ``U'`` (``-inf`` if no dual-feasible point was found).
    gap : float
        ``max(P(W) - D(U') + rounding + conic tolerances, 0)`` (the residual charges are part
        of ``D(U')``), or ``+inf`` when ``W`` violates node constraints, lies outside a loss's
        domain, or no dual-feasible ``U'`` was found (:attr:`reason`).  Sound:
        ``gap >= P(W) - P*``.
    relative_gap : float
        ``gap / max(1, |P(W)|)``.
    tolerance : float
        The part of ``gap`` that is the certificate's own numerics (already included in
        ``gap``): floating-point rounding of the sums, the residual charges (module docstring)
        and conic solver tolerances.
    feasible : bool
        Node constraints hold within ``feas_tol``, node by node (scaled by
        ``max(1, ||w_i||_inf)``), and ``W`` lies in every loss's domain.
    infeasible_nodes : list
        Labels of the nodes that violate their constraints.
    dual_feasible : bool
        The repaired flows are dual feasible (within ``feas_tol``).
    dual_infeasible_nodes : list
        Labels of nodes whose demand ``s_i`` stays outside the domain of ``h_i*``.
    repaired : bool
        Whether the flows had to be changed; ``repairs`` says what was done.
    repairs : list of str
        What the repair changed, one line each (empty when :attr:`repaired` is False).
    weights : ndarray (n, d)
        The certified candidate ``W`` (as checked, model order).
    flows : ndarray (|E|, d)
        The repaired, dual-feasible flows ``U'`` whose dual value is reported (model order).
    flows_from_weights : bool
        True when the flows were built from ``W`` (``flows=None``).
    kkt : dict
        ``flow_conservation``: ``||D^T u + grad h(w)||_2`` over nodes with a gradient (original
        flows; ``nan`` if none); ``capacity_violation``: ``max_e (||u_e||_* - lambda A_e)_+``
        (original flows, norm penalties); ``complementarity``: the edge Fenchel-Young gaps
        ``sum_e lambda A_e phi(v_e) + lambda A_e phi*(u'_e/(lambda A_e)) - u'_e^T v_e``;
        ``node_gap``: the node Fenchel-Young gaps ``sum_i h_i(w_i) + h_i*(s_i) - s_i^T w_i``
        (``complementarity + node_gap = gap``).
    node_gaps, edge_gaps : ndarray
        The per-node and per-edge Fenchel-Young gaps (where the gap is finite).
    radius : float
        The largest radius ``R_i`` used by a residual charge (0 if none was needed).
    flow_scale : float
        The factor ``theta <= 1`` by which the repair finally rescaled all given (or built)
        flows to meet the capacities (1: no rescaling).
    radii : ndarray (n,)
        The per-node radii ``R_i`` (certified by
        :func:`~gtvmodel.certificates.radii.certified_radii`, or the caller's ``radius``;
        ``inf`` where none could be certified; all NaN when no residual needed a radius, so
        none was computed).
    reason : str
        Why the gap is ``+inf`` (empty when it is finite).
    assumptions : list of str
        What the bound assumes beyond the model (empty for a fully certified bound; a
        caller-supplied ``radius`` is listed here).
    feas_tol : float
        The ``feas_tol`` given to :func:`certify`.
    tol : float
        The ``tol`` given to :func:`certify` (what :attr:`success` asks).

    Attributes
    ----------
    success : bool
        ``W`` is certified at ``tol`` (:meth:`success_at`).
    status : str
        ``"certified"`` when :attr:`success`, ``"not_certified"`` for a finite gap above
        ``tol``, ``"infinite_gap"`` when ``gap = +inf`` (:attr:`reason`).

    Raises
    ------
    TypeError
        A missing or unknown field (the dataclass constructor; :func:`certify` builds it).

    Examples
    --------
    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), dim=1, lam=0.5)
    >>> model.set_loss(0, gm.QuadraticLoss([1.0]))
    >>> model.set_loss(2, gm.QuadraticLoss([-1.0]))
    >>> cert = gm.certify(model, [[0.75], [0.0], [-0.75]])  # the optimum, weights alone
    >>> cert.status, round(cert.primal_value, 6), cert.gap <= 1e-9
    ('certified', 0.875, True)
    >>> cert.flows.ravel()  # the flows recovered from the weights: at the capacity 0.5
    array([0.5, 0.5])
    """

    primal_value: float
    dual_value: float
    gap: float
    relative_gap: float
    tolerance: float
    feasible: bool
    infeasible_nodes: list[Any]
    dual_feasible: bool
    dual_infeasible_nodes: list[Any]
    repaired: bool
    repairs: list[str]
    weights: np.ndarray = field(repr=False)
    flows: np.ndarray = field(repr=False)
    flows_from_weights: bool = False
    kkt: dict[str, float] = field(default_factory=dict)
    node_gaps: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    edge_gaps: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    radius: float = 0.0
    flow_scale: float = 1.0
    radii: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    reason: str = ""
    assumptions: list[str] = field(default_factory=list)
    feas_tol: float = 0.0
    tol: float = 1e-6

    def success_at(self, tol: float | None = None) -> bool:
        """True if ``gap <= tol * max(1, |P(W)|)`` (relative suboptimality at most ``tol``;
        default: the ``tol`` given to :func:`certify`)."""
        tol = self.tol if tol is None else tol
        return bool(np.isfinite(self.gap) and self.relative_gap <= tol)

    @property
    def success(self) -> bool:
        """``W`` is certified at the ``tol`` given to :func:`certify` (:meth:`success_at`)."""
        return self.success_at()

    @property
    def status(self) -> str:
        """``"certified"``, ``"not_certified"`` (finite gap above ``tol``) or
        ``"infinite_gap"``."""
        if not np.isfinite(self.gap):
            return "infinite_gap"
        return "certified" if self.success else "not_certified"

    def summary(self) -> str:
        """A human-readable multi-line report."""
        lines = [
            f"primal value P(W)      {self.primal_value:.12g}",
            f"dual value D(U')       {self.dual_value:.12g}",
            f"gap                    {self.gap:.6g}   (relative {self.relative_gap:.3g}, "
            f"tolerance {self.tolerance:.3g})",
            f"primal feasible        {self.feasible}"
            + ("" if self.feasible else f"  violated at {self.infeasible_nodes[:10]}"),
            f"dual feasible          {self.dual_feasible}"
            + ("" if self.dual_feasible else f"  fails at {self.dual_infeasible_nodes[:10]}"),
            "flows                  "
            + ("built from the weights" if self.flows_from_weights else "given")
            + (f"; repaired: {'; '.join(self.repairs)}" if self.repaired else "; not repaired"),
        ]
        if self.reason:
            lines.append(f"gap is +inf because     {self.reason}")
        for a in self.assumptions:
            lines.append(f"assumes                {a}")
        for k, v in self.kkt.items():
            lines.append(f"kkt {k:<18} {v:.3g}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


# ===================================================================== linear algebra helpers

# ===================================================================== certify
#: The values of :func:`certify`'s ``project`` option.
PROJECT_OPTIONS = ("auto", "never")


def _check_args(tol: Any, feas_tol: Any, radius: Any, project: Any, fallback: Any,
                solver: Any) -> tuple[float, float, float | None]:
    """Validate :func:`certify`'s options (:class:`ParameterError` naming the argument; an
    unknown ``solver`` is a :class:`SolverError`, as in every solve); the candidate arrays are
    checked by :meth:`ModelDeclaration.check_weights` / ``check_flows``."""
    where = "certify"
    check_option(project, "project", PROJECT_OPTIONS, where=where)
    check_bool(fallback, "fallback", where=where)
    if solver is not None:
        check_solver(solver, where)
    tol = check_scalar(tol, "tol", min_val=0.0, include_boundaries="neither", where=where)
    feas_tol = check_scalar(feas_tol, "feas_tol", min_val=0.0, where=where)
    if radius is not None:
        radius = check_scalar(radius, "radius", min_val=0.0, where=where)
    return tol, feas_tol, radius


def certify(model: ModelDeclaration, weights: Any, flows: Any = None, *, tol: float = 1e-6,
            feas_tol: float = 1e-8, radius: float | None = None, solver: str | None = None,
            project: str = "auto", fallback: bool = True, recover: bool = True) -> Certificate:
    """Certify candidate ``weights`` (``(n, d)``) with optional ``flows`` (``(|E|, d)``).

    Returns a :class:`Certificate` whose ``gap >= P(W) - P*`` (module docstring for the
    method, the repair and the limits; ``gap`` includes the certificate's own numerical
    ``tolerance``).

    Parameters
    ----------
    model : ModelDeclaration
        The problem (16) (a :class:`~gtvmodel.model.GTVModel`).
    weights : array_like (n, d)
        The candidate ``W`` in ``model.nodes`` order (``(n,)`` when ``d = 1``).
    flows : array_like (|E|, d), optional
        Edge flows ``u_e`` in ``model.edges`` order (e.g. a solver's duals in the package's
        sign convention, docs/conventions.md); None recovers them from ``W`` (``recover``).
    tol : float, default 1e-6
        Only sets what :attr:`Certificate.success` asks (:meth:`Certificate.success_at` takes
        another): the certified relative gap ``gap / max(1, |P(W)|)`` at most ``tol``.
    feas_tol : float, default 1e-8
        The relative tolerance on node constraints and on dual-domain residuals, node by node
        (scaled by ``max(1, ||w_i||_inf)``, resp. ``max(1, ||s_i||_inf)``).
    radius : float, optional
        By default the radii of the residual charges are *certified* from the level set of
        ``P(W)`` (:func:`~gtvmodel.certificates.radii.certified_radii`); a number replaces them
        by the caller's assumption ``||w*_i||_inf <= radius`` (listed in
        :attr:`Certificate.assumptions`).
    solver : str, optional
        The CVXPY solver of the small conic problems some conjugates and repairs need
        (default Clarabel).
    project : {"auto", "never"}, default "auto"
        ``"auto"`` allows the convex projection :func:`project_flows` when the cheap repairs
        leave nodes outside bounded conjugate domains; ``"never"`` forbids it (zero flows, dual
        feasible for every library node, remain the last resort).
    fallback : bool, default True
        When a certificate does not certify ``W`` at ``tol`` but comes within ``1e3 tol`` of it
        (or is infinite), a finer repair of the given flows (16 projection rounds) and flows
        built from ``W`` are tried too; when the repair had to rescale all flows by ``theta <
        0.999``, also the convex projection of the given flows onto the dual-feasible set
        (``project="auto"``); the smallest (valid) bound is returned (pass False where
        certificates of non-optimal iterates must stay cheap, as Algorithm 1 does).
    recover : bool, default True
        Without flows, first certify the flows recovered from ``W`` through the optimality
        conditions (:func:`~gtvmodel.certificates.recovery.recover_flows`; when they do not
        certify ``W`` at ``tol``, the flows built by :func:`flows_from_weights` too), and with
        given flows that do not certify ``W`` at ``tol`` (and ``fallback``), also the recovered
        ones; the smaller gap is kept.  False: the given (or built) flows only.

    Returns
    -------
    Certificate
        The bound ``gap >= P(W) - P*`` with the dual-feasible flows it was evaluated at, the
        repairs made, the KKT residuals and ``status`` (``"certified"``, ``"not_certified"``,
        ``"infinite_gap"`` with :attr:`Certificate.reason`).

    Raises
    ------
    DataError
        ``weights`` or ``flows`` of the wrong shape or not finite.
    ParameterError
        A bad ``tol``, ``feas_tol``, ``radius``, ``project``, ``fallback`` or ``recover``.
    SolverError
        An unknown ``solver``.

    Examples
    --------
    The model of :func:`~gtvmodel.solve.exact.solve_exact`'s example (``P* = 0.875``):

    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), dim=1, lam=0.5)
    >>> model.set_loss(0, gm.QuadraticLoss([1.0]))
    >>> model.set_loss(2, gm.QuadraticLoss([-1.0]))
    >>> sol = gm.solve_exact(model, certify=False)
    >>> cert = gm.certify(model, sol.weights, sol.flows)
    >>> cert.status, cert.success, cert.gap < 1e-6
    ('certified', True, True)

    Any candidate gets a sound bound ``gap >= P(W) - P*`` (34); without flows they are
    recovered from ``W`` (or built from it) and repaired to a dual-feasible point:

    >>> cert = gm.certify(model, np.zeros((3, 1)))
    >>> cert.status, round(cert.primal_value, 4), round(cert.gap, 4)
    ('not_certified', 2.0, 1.125)
    >>> cert.gap >= cert.primal_value - sol.objective - 1e-9
    True
    """
    tol, feas_tol, radius = _check_args(tol, feas_tol, radius, project, fallback, solver)
    check_bool(recover, "recover", where="certify")
    opts = (tol, feas_tol, radius, solver, project)
    if not recover:
        return _certify_given(model, weights, flows, fallback, opts)
    if flows is None:
        # flows recovered through the optimality conditions first (recovery.py): at (or near)
        # an optimum they certify alone; otherwise the built flows too, the smaller gap kept
        rec = _recovered(model, weights, opts)
        if rec is not None and rec.success_at(tol):
            return rec
        return _smaller(_certify_given(model, weights, None, fallback, opts), rec,
                        "flows recovered from the optimality conditions")
    cert = _certify_given(model, weights, flows, fallback, opts)
    if fallback and cert.feasible and not cert.success_at(tol):
        cert = _smaller(cert, _recovered(model, weights, opts),
                        "flows recovered from the optimality conditions of the weights")
    return cert


def _smaller(cert: Certificate, alt: Certificate | None, what: str) -> Certificate:
    """The certificate with the smaller gap (each is a valid bound); a note in ``repairs``
    when ``alt`` (built from ``what``) replaces ``cert``."""
    if alt is None:
        return cert
    alt.timings["total"] += cert.timings["total"]
    if not alt.gap < cert.gap:
        cert.timings["total"] = alt.timings["total"]
        return cert
    done = f"; repaired: {'; '.join(cert.repairs)}" if cert.repairs else ""
    alt.repairs.append(f"the first flows gave a larger gap ({cert.gap:.3g}{done}): {what} "
                       "were used instead")
    alt.repaired = True
    return alt


#: :func:`certify` stops after the recovery LP when its relative gap is at most this share of
#: ``tol`` (an optimum, up to rounding); otherwise the variant with curvature is tried too.
EXACT_SHARE = 1e-3


def _recovered(model: ModelDeclaration, weights: Any, opts: tuple) -> Certificate | None:
    """The certificate of the flows recovered from the weights through the optimality
    conditions (:func:`~gtvmodel.certificates.recovery.recover_flows`, then the usual repair
    and sound evaluation), over :func:`_recovery_candidates` until one certifies ``W`` at
    :data:`EXACT_SHARE` ``tol``; the smallest gap is kept (each is a valid bound).  None
    where the recovery does not apply."""
    W = model.check_weights(weights)
    if not np.isfinite(W).all():
        return None
    best = None
    for curvature, tau in _recovery_candidates(model, W):
        t0 = time.perf_counter()
        U = recover_flows(model, W, curvature, tau)
        t1 = time.perf_counter()
        if U is None:
            continue
        cert = _certify_once(model, W, U, *opts)
        cert, _ = _stiff_variant(model, cert, U, *opts)
        cert.flows_from_weights = True
        cert.timings["recovery"] = t1 - t0
        cert.timings["total"] += t1 - t0
        best = cert if best is None else _smaller(best, cert, "flows recovered by another "
                                                  "variant of the recovery")
        if best.success_at(EXACT_SHARE * opts[0]):
            break
    return best


def _recovery_candidates(model: ModelDeclaration, W: np.ndarray
                         ) -> list[tuple[bool, float]]:
    """``(curvature, threshold)`` of the recoveries :func:`certify` tries, cheapest first: the
    fused edges of :func:`~gtvmodel.certificates.recovery.fused_thresholds` (the LP or the
    electrical flow), for the polyhedral norms the first of them with curvature, then, up to
    :data:`~gtvmodel.certificates.recovery.FULL_SIZE` flow entries, the threshold-free
    problem (and its curvature variant)."""
    if not model.penalty.is_norm:
        return [(False, np.inf)]
    taus = fused_thresholds(model, W)
    lp = uses_lp(model)
    out = [(False, t) for t in taus] + ([(True, taus[0])] if lp else [])
    if model.num_edges * model.dim <= FULL_SIZE:
        out += [(False, np.inf)] + ([(True, np.inf)] if lp else [])
    return out


def _certify_given(model: ModelDeclaration, weights: Any, flows: Any, fallback: bool,
                   opts: tuple) -> Certificate:
    """:func:`certify` with the given flows (or those built by :func:`flows_from_weights`),
    the stiff variant and the escalation of ``fallback``."""
    tol, feas_tol, radius, solver, project = opts
    cert = _certify_once(model, weights, flows, tol, feas_tol, radius, solver, project)
    cert, affine = _stiff_variant(model, cert, flows, tol, feas_tol, radius, solver, project)
    # more work only where it can matter: an infinite gap, or one within three orders of
    # magnitude of certifying W (good weights, flows that need a finer repair or replacing)
    near = not np.isfinite(cert.gap) or cert.relative_gap <= 1e3 * tol
    # a large final rescaling (theta < 0.999) means the cheap alternating projections did not
    # reach the intersection of the capacities and the subspace conditions: the convex
    # projection onto the dual-feasible set does, whatever the gap
    rescaled = cert.flow_scale < 0.999 and project == "auto" and flows is not None
    if not (fallback and cert.feasible and model.num_edges and (near or rescaled)) \
            or cert.success_at(tol):
        return cert
    tries: list[tuple[Any, int, str]] = []
    if rescaled:
        proj = project_flows(model, flows, solver)
        if proj is not None:
            tries.append((proj, 4, "the convex projection of the given flows onto the "
                                   "dual-feasible set"))
    if near and cert.flow_scale < 1.0:
        tries.append((flows, 16, "a finer repair of the given flows (16 rounds)"))
    if near and flows is not None:
        snapped = subgradient_flows(model, cert.weights, flows)
        if snapped is not None:
            tries.append((snapped, 4, "the given flows with the edges that are not fused "
                                      "moved to lambda A_e grad phi(v_e)"))
        tries.append((None, 4, "flows built from the weights"))
    for trial_flows, rounds, what in tries:
        alt = _certify_once(model, weights, trial_flows, tol, feas_tol, radius, solver, project,
                            rounds, affine)
        alt.timings["total"] += cert.timings["total"]
        if alt.gap < cert.gap:
            alt.repairs.append(f"the first repair gave a larger gap ({cert.gap:.3g}): {what} "
                               "was used instead")
            alt.repaired = True
            cert = alt
        if cert.success_at(tol):
            break
    return cert


def subgradient_flows(model: ModelDeclaration, weights: Any, flows: Any) -> np.ndarray | None:
    """The given flows with every edge that is clearly not fused moved onto the face of its
    dual ball that the edge condition of (16) selects, ``u_e = lambda A_e grad phi(v_e)``
    (:meth:`~gtvmodel.terms.penalties.Norm2.rows_gradient`; ``l1``: coordinate by coordinate),
    the fused ones (and ``l_inf`` rows whose largest two ``|v_ej|`` are within the threshold)
    kept; None for a penalty that is not a norm, or where nothing moves.

    "Clearly not fused": a difference above the first threshold of
    :func:`~gtvmodel.certificates.recovery.fused_thresholds` (the widest gap of the sorted
    differences).  At an optimum the edge condition fixes these flows exactly, while a
    solver's flows meet it only to the solver's feasibility tolerance, which the
    complementarity term ``lambda A_e phi(v_e) - u_e^T v_e`` multiplies by ``||v_e||``: a
    symbolic node at ``w_0 ~ 2e3`` beside edges of capacities 1.3e-8 ... 3.8e-7 lost 1.3e-4 of
    its gap to flows up to 6e-8 below their capacities.  Any flows are certified soundly;
    these are one more candidate (:func:`certify`'s escalation keeps the smaller gap)."""
    pen = model.penalty
    if not pen.is_norm or model.num_edges == 0:
        return None
    W = model.check_weights(weights)
    U = np.array(model.check_flows(flows), dtype=float)
    if not (np.isfinite(W).all() and np.isfinite(U).all()):
        return None
    V = model.empirical_graph.diff(W)
    tau = fused_thresholds(model, W)[0]
    try:
        G = pen.rows_gradient(V)
    except UnsupportedError:  # NormP(p) for p other than 1, 2, inf
        return None
    p = getattr(pen, "p", None)
    if model.dim == 1 or p == 1.0:  # the box ball: coordinate by coordinate
        move = np.abs(V) > tau
    else:
        r = pen.rows_value(V)
        move = r > tau
        if p == np.inf:  # a tie has no gradient: keep those rows
            A = np.sort(np.abs(V), axis=1)
            move &= A[:, -1] - A[:, -2] > tau
        move = np.repeat(move[:, None], model.dim, axis=1)
    if not move.any():
        return None
    cap = np.broadcast_to(model.capacities[:, None], U.shape)
    U[move] = (cap * G)[move]
    return U


#: The share of the gap at the stiff nodes above which :func:`certify` also tries the affine
#: variant of the repair (:data:`~gtvmodel.certificates.kinds.STIFF_RTOL`).
STIFF_SHARE = 0.1


def _stiff_variant(model: ModelDeclaration, cert: Certificate, flows: Any, tol: float,
                   feas_tol: float, radius: float | None, solver: str | None, project: str
                   ) -> tuple[Certificate, bool]:
    """``(certificate, affine)``: where the node gaps of the stiff nodes (ill-conditioned
    directions, :data:`~gtvmodel.certificates.kinds.STIFF_RTOL`) carry more than
    :data:`STIFF_SHARE` of the gap (or it is infinite), the certificate of the affine variant
    of the repair too (their demands matched to the gradients of ``W`` along those directions,
    :func:`~gtvmodel.certificates.kinds.affine_conditions`); the smaller of the two gaps is
    kept (each is an exact evaluation of dual-feasible flows: a valid bound either way)."""
    kinds = node_kinds(model)
    if kinds.stiff.size == 0 or not cert.feasible or model.num_edges == 0 or model.lam == 0:
        return cert, False
    st = model.structure()
    G = smooth_gradients(st.batches, st.l2, cert.weights)
    # the stiff nodes' part of the gap: their node gaps at the final flows, and what the
    # stiff directions cost at the flows before the repair (the cheap repairs may have
    # replaced flows that were far better elsewhere, e.g. by zero flows)
    share = max(np.nan_to_num(cert.node_gaps[kinds.stiff], nan=np.inf).clip(0.0).sum(),
                kinds.stiff_excess(-np.asarray(model.incidence.T @ cert.flows), G),
                0.0 if flows is None else kinds.stiff_excess(
                    -np.asarray(model.incidence.T @ checked_flows(model, flows)), G))
    if np.isfinite(cert.gap) and not share > STIFF_SHARE * cert.gap:
        return cert, False
    alt = _certify_once(model, cert.weights, flows, tol, feas_tol, radius, solver, project,
                        affine=True)
    alt.timings["total"] += cert.timings["total"]
    if alt.gap < cert.gap:
        return alt, True
    cert.timings["total"] = alt.timings["total"]
    return cert, False


def _rounding(model: ModelDeclaration, pr: Primal, dual: DualSide, W: np.ndarray,
              pairing: Pairing) -> float:
    """Bound of the rounding of the gap's sums: ``gamma`` times the sum of the magnitudes of
    every summand of ``P(W)``, ``D(U')`` and the Fenchel-Young pairings ``s^T w``, ``u^T v``."""
    fin = np.isfinite
    dv = dual.dv
    nc, ec = dv["conj_magnitude"] + dv["charge"], dv["edge_conj"]
    nrow = 4 * (model.dim + max_rows(model) + 8)
    return nrow * EPS * ((abs(pr.P) if fin(pr.P) else 0.0)
                         + np.abs(pr.lossv[fin(pr.lossv)]).sum() + np.abs(pr.penv).sum()
                         + np.abs(nc[fin(nc)]).sum() + np.abs(ec[fin(ec)]).sum()
                         + np.abs(dual.S * W).sum() + pairing.magnitude)


def _kkt(kkt: dict[str, float], node_gaps: np.ndarray, edge_gaps: np.ndarray,
         dual_feasible: bool) -> dict[str, float]:
    """:func:`~gtvmodel.certificates.primal_side.flow_kkt`'s residuals and the edge and node
    Fenchel-Young gaps (their sum is the gap)."""
    kkt["complementarity"] = float(edge_gaps.sum()) if dual_feasible else float("inf")
    kkt["node_gap"] = float(node_gaps.sum()) if dual_feasible else float("inf")
    return kkt


def _certify_once(model: ModelDeclaration, weights: Any, flows: Any, tol: float, feas_tol: float,
                  radius: float | None, solver: str | None, project: str,
                  rounds: int = 4, affine: bool = False) -> Certificate:
    """:func:`certify` with the given (or built) flows only; options already validated: the
    gap (34) ``P(W) - D(U') + rounding + conic tolerances`` of the repaired flows ``U'``."""
    t0 = time.perf_counter()
    W = model.check_weights(weights)
    n = model.num_nodes
    U0 = given_flows(model, W, flows)
    kkt = flow_kkt(model, W, U0)
    U, repairs, flow_scale = repaired_flows(model, W, U0, rounds, affine)
    del U0  # (repaired in place: no second |E| x d array)
    t1 = time.perf_counter()
    pr = primal(model, W, U, feas_tol)
    R = Radii(n, (lambda: candidate_radii(model, W, pr.P, pr.viol, radius, solver))
              if pr.feasible else np.inf)
    strict = radius is not None  # an assumed radius: only rounding-sized residuals
    dual = evaluate_dual(model, U, R, solver, W, feas_tol, strict, repairs)
    if dual.outside.size and model.num_edges and model.lam > 0 and pr.feasible:
        dual = domain_repairs(model, W, dual, R, solver, feas_tol, strict, project)
    dv, S, U = dual.dv, dual.S, dual.U
    dual_feasible = dual.bad.size == 0 and bool(np.isfinite(dv["edge_conj"]).all())
    reasons = pr.reasons + dual_reasons(model, dual, R, pr.feasible)
    D = dv["value"] if dual_feasible else -np.inf
    pair = pairing(model, pr, W, U)
    with np.errstate(invalid="ignore"):
        node_gaps = pr.lossv + dv["node_conj"] - (S * W).sum(axis=1)
        edge_gaps = (pr.penv + dv["edge_conj"] - pair.dots if model.num_edges
                     else np.zeros(0))
    fin = np.isfinite
    rounding = _rounding(model, pr, dual, W, pair)
    tolerance = float(rounding + dv["charge"][fin(dv["charge"])].sum() + dv["conic_tol"])
    if pr.feasible and dual_feasible:
        gap = max(pr.P - D + rounding + dv["conic_tol"], 0.0)
    else:
        gap = float("inf")
    t2 = time.perf_counter()
    kkt = _kkt(kkt, node_gaps, edge_gaps, dual_feasible)
    labels = model.nodes
    charged = dv["charge"] > 0
    radii = R.value if R.value is not None else np.full(n, np.nan)  # NaN: never needed
    rel = gap / max(1.0, abs(pr.P)) if np.isfinite(pr.P) else float("inf")
    return Certificate(
        primal_value=float(pr.P), dual_value=float(D), gap=float(gap), relative_gap=float(rel),
        tolerance=tolerance, feasible=pr.feasible,
        infeasible_nodes=[labels[i] for i in pr.bad],
        dual_feasible=dual_feasible, dual_infeasible_nodes=[labels[i] for i in dual.bad],
        repaired=bool(dual.repairs), repairs=dual.repairs, weights=W, flows=U,
        flows_from_weights=flows is None, kkt=kkt, node_gaps=node_gaps, edge_gaps=edge_gaps,
        radius=float(np.nan_to_num(radii[charged], nan=0.0).max(initial=0.0)), radii=radii,
        reason="; ".join(reasons),
        assumptions=radius_assumption(radius), feas_tol=feas_tol, tol=tol,
        flow_scale=flow_scale,
        timings={"repair": t1 - t0, "evaluate": t2 - t1, "total": time.perf_counter() - t0},
        labels=Labels(model.nodes, model.edges),
    )
