"""The dual value ``D(U)`` (19) evaluated as a rigorous lower bound: node conjugates as upper
bounds (closed forms, batched Newton, one stacked CVXPY problem, conic nodes) and the charges of
residuals outside their domains."""


from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np

from .._solver import run_solver
from ..declaration import CacheSlot, ModelDeclaration
from ..errors import GTVError, SolverError
from ..solve import conic as conic_mod
from ..solve.dual import node_conjugate_parts
from ..terms.losses import (
    zero_conjugate_rows,
)
from .kinds import EPS, max_rows, node_kinds
from .radii import Radii

__all__ = ["residual_charge", "dual_value"]


# ===================================================================== dual value
def _part_magnitude(part: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(contrib_mag, cost_mag)`` of a node part (its own bound, else the absolute values)."""
    if part.magnitude is not None:
        return part.magnitude()
    contrib, cost = part.evaluate()
    return np.abs(contrib), np.abs(cost)

def residual_charge(radii: Any, rho: np.ndarray, rnd: np.ndarray, wloc: np.ndarray
            ) -> np.ndarray:
    """Residual charges per node (MATH.md §8), entry by entry of ``|rho_i|`` plus its rounding
    bound ``rnd_i``:

    - a *rounding-level* entry (``|rho_ij| <= rnd_ij``: the computed residual is within the
      error of computing it, so the split may be exact) is floating-point noise, charged to
      first order at the local maximizer, ``min(R_i, wloc_i) (|rho_ij| + rnd_ij)`` with
      ``wloc_i = max(1, ||w_i||_inf, ||w_max,i||_inf)`` (like the rounding of the sums);
    - any larger entry is charged ``R_i (|rho_ij| + rnd_ij)``: exactly the conjugate of
      ``h_i + iota{||w||_inf <= R_i}``, rigorous for a certified radius (``+inf`` when none
      could be certified).

    ``radii`` is a :class:`Radii` (asked only when a larger entry needs it) or an array.
    """
    tot = rho + rnd
    small = rho <= rnd
    if small.all():  # rounding-level only: the local charge, no radius needed
        return np.where(tot > 0, wloc[:, None] * tot, 0.0).sum(axis=1)
    R = (radii() if callable(radii) else np.asarray(radii, dtype=float))[:, None]
    with np.errstate(invalid="ignore"):
        per = np.where(small, np.minimum(R, wloc[:, None]) * tot, R * tot)
    return np.where(tot > 0, per, 0.0).sum(axis=1)

def _general_problem(model: ModelDeclaration, nodes: np.ndarray,
                     key: CacheSlot = "cert_general"):
    """Cached CVXPY problem: min sum parts cost + sum_i R_i ||rho_i||_1 s.t. sum contrib + rho
    = S (per-node radii ``R_i``)."""
    cached = model.cache.get(key)
    if cached is not None and np.array_equal(cached[4], nodes):
        return cached

    k, d = len(nodes), model.dim
    S = cp.Parameter((k, d), name="S")
    R = cp.Parameter(k, nonneg=True, name="R")
    rho = cp.Variable((k, d), name="rho")
    parts = node_conjugate_parts(model, nodes)
    total: cp.Expression = rho
    costs: list[cp.Expression] = [R @ cp.sum(cp.abs(rho), axis=1)]
    cons: list[cp.Constraint] = []
    for p in parts:
        total = total + p.contrib
        costs.append(p.cost)
        cons += p.constraints
    cons.append(total == S)
    prob = cp.Problem(cp.Minimize(cp.sum(cp.hstack(costs))), cons)
    cached = (prob, S, R, parts, nodes)
    model.cache.put(key, cached)
    return cached

def _evaluate_parts(parts, k: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    contrib = np.zeros((k, d))
    cost = np.zeros(k)
    for p in parts:
        c_, k_ = p.evaluate()
        contrib += c_
        cost += k_
    return contrib, cost

def dual_value(model: ModelDeclaration, flows: Any, radius: Any, solver: str | None = None,
               weights: Any = None) -> dict[str, Any]:
    """Upper bounds ``c_i >= (h_i + iota{||w||_inf <= R_i})*(s_i)`` for every node and the
    edge conjugates at ``flows`` (no repair); ``radius`` is a scalar or per-node ``(n,)``
    (``inf`` allowed: a residual there makes the bound ``+inf``).  Returns a dict with
    ``node_conj`` (n,), ``rho`` (n, d) (a bound of the part of ``s_i`` outside the domain,
    charged inside ``node_conj`` by :func:`charge`), ``charge`` (n,), ``edge_conj`` (|E|,),
    ``s`` (n, d), ``conic_tol`` and ``value``.  ``weights`` (optional) warm-start the Newton
    path of smooth data-fit nodes and set the local radii of rounding-level residuals."""
    U = model.check_flows(flows)
    n, d = model.num_nodes, model.dim
    radii = radius if isinstance(radius, Radii) else Radii(n, radius)
    kinds = node_kinds(model)
    st = model.structure()
    S = -(model.incidence.T @ U) if model.num_edges else np.zeros((n, d))
    S = np.asarray(S).reshape(n, d)
    conj = np.zeros(n)
    cmag = np.zeros(n)  # sums of the absolute summands of each conjugate (rounding bound)
    rho = np.zeros((n, d))  # |computed residual|
    rnd = np.zeros((n, d))  # bound of the rounding error in computing it
    W0 = np.zeros((n, d)) if weights is None else np.asarray(weights, dtype=float)
    wloc = np.maximum(1.0, np.abs(W0).max(axis=1, initial=0.0))  # local radii
    if model.num_edges:  # rounding of s = -D^T u: deg_i eps sum_{e at i} |u_e|
        absdiv = np.asarray(abs(model.incidence).T @ np.abs(U)).reshape(n, d)
        rnd += (model.degrees + 2)[:, None] * EPS * absdiv
    if kinds.zero.size:
        z = kinds.zero
        conj[z], rho[z], cmag[z] = zero_conjugate_rows(st.l1[z], st.l2[z], S[z])
    conic_tol = 0.0
    done = np.zeros(n, dtype=bool)
    for grp in kinds.groups:  # the batches' numpy paths (closed forms, batched Newton)
        idx = grp.nodes
        val, r, r_rnd, vmag, wl, conv = grp.evaluate(S[idx], W0[idx], wloc[idx], rnd[idx])
        ic = idx[conv]
        conj[ic], rho[ic], cmag[ic] = val[conv], r[conv], vmag[conv]
        rnd[ic] += r_rnd[conv]
        wloc[idx] = wl
        done[ic] = True
    g = kinds.general
    g = g[~done[g]]
    if g.size:  # the others (and Newton failures): the cached CVXPY problem of all of them
        gall = kinds.general
        prob, Sp, Rp, parts, _ = _general_problem(model, gall)
        Sp.value = S[gall]
        # the solver only needs finite weights for the charges; the evaluation below uses R
        # (any weight above the local scale drives the residual to ~0; a huge one ruins the
        # solver's scaling)
        Rp.value = 100.0 * wloc[gall]
        ok = True
        try:
            run_solver(prob, solver, {}, False, True, "certificate (node conjugates)")
            ok = prob.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE)
        except SolverError:
            ok = False
        if ok:
            kg = gall.size
            contrib, cost = _evaluate_parts(parts, kg, d)
            # polish: let the parts absorb the solver's small residual (least squares, kept
            # in the domains), then re-evaluate; keep whichever bound is smaller
            r0 = S[gall] - contrib
            for _ in range(3):
                for p in parts:
                    if p.absorb is not None:
                        p.absorb(S[gall] - _evaluate_parts(parts, kg, d)[0])
            contrib2, cost2 = _evaluate_parts(parts, kg, d)
            r2 = S[gall] - contrib2
            # rounding of the parts' sums: gamma (|s| + sum of the summands' magnitudes)
            mags = [_part_magnitude(p) for p in parts]
            mag = np.abs(S[gall]) + sum(m[0] for m in mags)
            rnd[gall] += (max_rows(model) + len(parts) + 4) * EPS * mag
            cost_mag = sum(m[1] for m in mags)
            # choose by the value plus a local-scale charge (both splits are valid)
            b1 = cost + (wloc[gall, None] * (np.abs(r0) + rnd[gall])).sum(axis=1)
            b2 = cost2 + (wloc[gall, None] * (np.abs(r2) + rnd[gall])).sum(axis=1)
            better = b2 <= b1
            sel = np.isin(gall, g)
            conj[gall[sel]] = np.where(better, cost2, cost)[sel]
            cmag[gall[sel]] = cost_mag[sel] + np.abs(cost)[sel]
            rho[gall[sel]] = np.abs(np.where(better[:, None], r2, r0)[sel])
        else:  # no split available: these nodes are reported dual infeasible (gap = inf)
            conj[g] = np.inf
            rho[g] = np.abs(S[g])
    c = kinds.conic
    if c.size:
        vals = np.empty(c.size)
        tols = np.zeros(c.size)
        for j, i in enumerate(c):
            try:
                vals[j], tols[j] = conic_mod.node_conjugate(model, int(i), S[i])
            except GTVError:
                vals[j] = np.inf
            if not np.isfinite(vals[j]) and np.isfinite(radii()[i]):
                # a demand (a hair) outside the conjugate's domain: with a certified radius the
                # conjugate of h_i + iota{||x||_inf <= R_i} is exact for the problem (finite)
                try:
                    vals[j], tols[j] = conic_mod.node_conjugate(model, int(i), S[i],
                                                                radius=float(radii()[i]))
                except GTVError:
                    vals[j] = np.inf
        conj[c] = vals
        cmag[c] = np.abs(vals)
        # a numeric conjugate may fall short by the duality-gap tolerance of the solver run
        # that produced it (run_solver may fall back to looser tolerances): node_conjugate
        # returns that tolerance, add it
        conic_tol = float(tols[np.isfinite(vals)].sum())
    charge = residual_charge(radii, rho, rnd, wloc)
    node_conj = conj + charge
    # a library node with exactly zero demand also has the all-zero split (every library row
    # conjugate, regularizer conjugate and support function is 0 at 0; all library losses are
    # >= 0): the bound h_i*(0) <= 0 without residual, kept where it is smaller
    zero = (S == 0).all(axis=1) & ~(node_conj <= 0)
    zero[kinds.conic] = False
    node_conj[zero], charge[zero], cmag[zero], rho[zero] = 0.0, 0.0, 0.0, 0.0
    edge_conj = (model.penalty.conjugate_rows(U, model.capacities)
                 if model.num_edges else np.zeros(0))
    value = -float(node_conj.sum()) - float(edge_conj.sum()) - conic_tol
    return {"node_conj": node_conj, "rho": rho, "charge": charge, "edge_conj": edge_conj,
            "conj_magnitude": cmag,
            "s": S, "conic_tol": conic_tol, "value": value}


# ===================================================================== certify
