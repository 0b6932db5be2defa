"""The dual side of the certificate (34) (:func:`~gtvmodel.certificates.certificate.certify`):
the flows ``U'`` (given, or built from the weights), their repair into the dual domain (steps
1-3 of :func:`~gtvmodel.certificates.repair.repair`, then step 4 for nodes outside bounded
conjugate domains: :func:`domain_repairs`), the dual value ``D(U')`` (19) of
:func:`~gtvmodel.certificates.value.dual_value` and why the flows are not dual feasible."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..declaration import ModelDeclaration
from .kinds import node_kinds
from .radii import Radii
from .repair import (
    domain_scale,
    flows_from_weights,
    project_flows,
    repair,
    repair_flows,
    shrink_flows,
)
from .value import dual_value

__all__ = ["DualSide", "dual_bad", "given_flows", "repaired_flows", "evaluate_dual",
           "domain_repairs", "shrink_repairs", "dual_reasons", "SHRINK_ROUNDS"]


def dual_bad(dv: dict[str, Any], feas_tol: float, strict: bool) -> np.ndarray:
    """Nodes whose conjugate bound (residual charge included) is ``+inf``; with a caller's
    (unchecked) radius also those whose residual exceeds ``feas_tol max(1, ||s_i||_inf)``, so
    that such a bound never leans on the assumption beyond rounding."""
    bad = ~np.isfinite(dv["node_conj"])
    if strict:
        sscale = np.maximum(1.0, np.abs(dv["s"]).max(axis=1))
        bad |= np.abs(dv["rho"]).max(axis=1) > feas_tol * sscale
    return np.flatnonzero(bad)


@dataclass
class DualSide:
    """The dual side: the (repaired) flows ``U'``, their evaluation :func:`dual_value`, the
    nodes whose bound is ``+inf`` (``bad``) or outside their domains beyond ``feas_tol``
    (``outside``) and the repairs made."""

    U: np.ndarray
    dv: dict[str, Any]
    bad: np.ndarray
    outside: np.ndarray
    repairs: list[str]

    @property
    def S(self) -> np.ndarray:
        """The demands ``s_i = -(D^T u')_i`` (``(n, d)``) of the repaired flows."""
        return self.dv["s"]


def given_flows(model: ModelDeclaration, W: np.ndarray, flows: Any) -> np.ndarray:
    """``U0``: the given flows checked (a new array, the caller's to change), or those built
    from ``W`` (:func:`flows_from_weights`); zeros when ``flows`` is None and ``lambda = 0``
    (the only dual-feasible flows)."""
    if model.lam == 0 and model.num_edges and flows is None:
        return np.zeros((model.num_edges, model.dim))
    if flows is not None:
        return model.check_flows(flows)
    U0 = flows_from_weights(model, W)
    return U0 if bool(np.isfinite(U0).all()) else model.check_flows(U0)  # (names the edge)


def repaired_flows(model: ModelDeclaration, W: np.ndarray, U0: np.ndarray, rounds: int,
                   affine: bool = False) -> tuple[np.ndarray, list[str], float]:
    """``(U, repairs, theta)``: the repair of the flows ``U0`` of :func:`given_flows`
    (:func:`repair`, steps 1-3; ``affine``: its affine variant at the stiff nodes, matching
    the gradients of ``W``), made *in place* where it can (``U0`` is the caller's array: no
    second ``|E| x d`` copy, the certificate's peak memory, issue 30 item 3).  ``lambda =
    0``: the edge conjugates are the indicator of ``u = 0``, so the only dual-feasible flows
    are 0."""
    if model.lam == 0 and model.num_edges:
        repairs = (["lambda = 0: flows set to 0 (the only dual-feasible flows)"]
                   if np.any(U0) else [])
        return np.zeros_like(U0), repairs, 1.0
    return repair(model, U0, rounds, W if affine else None, owned=True)


def evaluate_dual(model: ModelDeclaration, U: np.ndarray, R: Radii, solver: str | None,
                   W: np.ndarray, feas_tol: float, strict: bool, repairs: list[str]) -> DualSide:
    """The dual value ``D(U)`` (19) of repaired flows and the nodes it fails at."""
    dv = dual_value(model, U, R, solver, W)
    return DualSide(U, dv, dual_bad(dv, feas_tol, strict), dual_bad(dv, feas_tol, True),
                 repairs)


def domain_repairs(model: ModelDeclaration, W: np.ndarray, dual: DualSide, R: Radii,
                    solver: str | None, feas_tol: float, strict: bool, project: str) -> DualSide:
    """Step 4 of the repair, for nodes outside bounded conjugate domains beyond ``feas_tol``
    (even where a certified radius makes the charge finite: repaired flows usually give a much
    smaller bound): (a) gradient correction, (b) shrinking the flows at those nodes
    (:func:`shrink_repairs`), (b') scaling, (c) convex projection (only with
    ``project="auto"``), (d) zero flows.  Each trial is kept if it leaves fewer nodes at
    ``+inf``, or as many and a larger dual value (each is a valid bound)."""

    def attempt(dual: DualSide, trial: np.ndarray | None, note: str) -> DualSide:
        if trial is None:
            return dual
        dv2 = dual_value(model, trial, R, solver, W)
        bad2 = dual_bad(dv2, feas_tol, strict)
        if (bad2.size, -dv2["value"]) < (dual.bad.size, -dual.dv["value"]):
            dual.repairs.append(note)
            return DualSide(trial, dv2, bad2, dual_bad(dv2, feas_tol, True), dual.repairs)
        return dual

    nbad = dual.outside.size
    if node_kinds(model).gradient[dual.outside].any():
        # (a) cheap, sparse: smooth nodes outside their domains -- move the flows
        # (minimum-norm) so that their demands become the gradients at W, inside the domains
        dual = attempt(dual, repair_flows(model, flows_from_weights(model, W, start=dual.U))[0],
                       f"corrected the flows towards the gradients at the weights ({nbad} "
                       "node(s) outside their bounded conjugate domains)")
    if dual.outside.size:
        # (b) local, in closed form: shrink the flows that push the demands out of their
        # domains (the signed residual of the split), their neighbours absorbing the change
        dual = shrink_repairs(model, dual, attempt)
    if dual.outside.size:
        # (b') one LP: scale all flows into the domains (keeps the subspace conditions)
        nbad = dual.outside.size
        theta = domain_scale(model, dual.S, dual.outside, solver) * (1.0 - 1e-9)
        if theta >= 0.5:
            dual = attempt(dual, theta * dual.U, f"scaled all flows by theta = {theta:.12g} "
                           f"into the bounded conjugate domains of {nbad} node(s)")
    if dual.outside.size and project == "auto":
        # (c) last resort: the convex projection onto the dual domain (0 can be a vertex of
        # a domain, e.g. logistic rows, where scaling towards 0 cannot help)
        nbad = dual.outside.size
        proj = project_flows(model, dual.U, solver)
        dual = attempt(dual, None if proj is None else repair_flows(model, proj)[0],
                       f"projected the flows onto the dual domain ({nbad} node(s) outside "
                       "their bounded conjugate domains; convex projection)")
    if dual.outside.size:
        # (d) u = 0: every library conjugate is finite at 0 (and a conic one wherever its
        # loss is bounded below): a valid, if loose, dual point, kept only if it does
        # better; exact when the optimal flows vanish and the given ones are rounding
        # noise (a hinge node off its margin)
        nbad = dual.outside.size
        dual = attempt(dual, np.zeros_like(dual.U), f"set the flows to zero ({nbad} node(s) "
                       "still outside their conjugate domains)")
    return dual


#: Rounds of :func:`shrink_repairs` (shrink, then the cheap repair of steps 1-3).
SHRINK_ROUNDS = 6


def shrink_repairs(model: ModelDeclaration, dual: DualSide, attempt: Any) -> DualSide:
    """Step 4 (b) of the repair: up to :data:`SHRINK_ROUNDS` rounds of
    :func:`~gtvmodel.certificates.repair.shrink_flows` at the nodes outside their domains
    (with a signed residual) followed by :func:`repair_flows`, each kept only while it
    improves (:func:`domain_repairs`' ``attempt``); deterministic, so the convex projection
    (c), whose answer carries its solver's tolerance into the gap, is needed only where it
    fails."""
    nbad, noted = dual.outside.size, len(dual.repairs)
    for _ in range(SHRINK_ROUNDS):
        out = dual.outside
        if not out.size or not np.any(dual.dv["resid"][out]):
            break
        before = dual
        dual = attempt(dual, repair_flows(model, shrink_flows(model, dual.U, dual.dv["resid"],
                                                              out))[0], "shrink")
        if dual is before:
            break
    if len(dual.repairs) > noted:
        del dual.repairs[noted:]
        dual.repairs.append(f"shrank the flows pushing {nbad} node(s) out of their bounded "
                            "conjugate domains (their neighbours absorb the change)")
    return dual


def dual_reasons(model: ModelDeclaration, dual: DualSide, R: Radii, feasible: bool) -> list[str]:
    """Why the repaired flows are not dual feasible (empty when they are)."""
    reasons: list[str] = []
    if dual.bad.size:
        k = int(dual.bad[0])
        uncharged = np.isinf(R()[dual.bad]) & np.isfinite(dual.S[dual.bad]).all(axis=1)
        why = ("its residual needs a radius that could not be certified (pass radius= to "
               "assume one)" if uncharged.any() and feasible else
               "its demand -(D^T u)_i stays outside the domain of h_i*")
        reasons.append(f"the flows are not dual feasible at {dual.bad.size} node(s) (first "
                       f"{model.nodes[k]!r}): {why}")
    if not np.isfinite(dual.dv["edge_conj"]).all():
        reasons.append("the flows exceed the edge capacities (edge conjugate +inf)")
    return reasons
