"""The dual value ``D(U)`` (19) evaluated as a rigorous lower bound: node conjugates as upper
bounds (closed forms, batched Newton, one stacked CVXPY problem, conic nodes) and the charges of
residuals outside their domains."""


from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import cvxpy as cp
import numpy as np

from .. import _compiled, _xp
from .._cvx import dpp_sized
from .._solver import run_solver
from ..declaration import CacheSlot, ModelDeclaration
from ..duality.conic_bounds import ConjugateBound, conjugate_bound
from ..duality.dual import node_conjugate_parts
from ..errors import GTVError, SolverError
from ..terms.losses import (
    zero_conjugate_rows,
)
from .kinds import EPS, NodeKinds, max_rows, node_kinds
from .radii import Radii

__all__ = ["residual_charge", "dual_value", "node_bounds", "demands", "checked_flows",
           "demand_rounding"]


# ===================================================================== dual value
def _part_magnitude(part: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(contrib_mag, cost_mag)`` of a node part (its own bound, else the absolute values)."""
    if part.magnitude is not None:
        return part.magnitude()
    contrib, cost = part.evaluate()
    return np.abs(contrib), np.abs(cost)

def residual_charge(radii: Any, rho: np.ndarray, rnd: np.ndarray, wloc: np.ndarray
            ) -> np.ndarray:
    """Residual charges per node (docs/conventions.md), entry by entry of ``|rho_i|`` plus its
    rounding bound ``rnd_i``:

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

@dataclass
class _GeneralProblem:
    """The node-conjugate problem of :func:`_general_problem`: ``min sum parts cost + sum_i R_i
    ||rho_i||_1`` s.t. ``sum contrib + rho = S``; its variables and constraints built once.
    The demands ``S`` (``k d`` numbers) and radii ``R`` (``k``) are Parameters of one cached
    DPP problem (``dpp``) while they fit :func:`~gtvmodel._cvx.dpp_sized`, else constants of
    a problem stated per call (DPP's tensor grows with the square of their size)."""

    nodes: np.ndarray
    parts: list[Any]
    rho: cp.Variable
    total: cp.Expression
    costs: list[cp.Expression]
    constraints: list[cp.Constraint]
    dpp: tuple[cp.Problem, cp.Parameter, cp.Parameter] | None = None

    def _state(self, S: Any, R: Any) -> cp.Problem:
        costs = [R @ cp.sum(cp.abs(self.rho), axis=1), *self.costs]
        return cp.Problem(cp.Minimize(cp.sum(cp.hstack(costs))),
                          [*self.constraints, self.total == S])

    def problem(self, S: np.ndarray, R: np.ndarray) -> cp.Problem:
        """The problem at demands ``S`` (``(k, d)``) and radii ``R`` (``(k,)``)."""
        if self.dpp is None:
            return self._state(S, R)
        prob, Sp, Rp = self.dpp
        Sp.value, Rp.value = S, R
        return prob


def _general_problem(model: ModelDeclaration, nodes: np.ndarray,
                     key: CacheSlot = "cert_general") -> _GeneralProblem:
    """Cached :class:`_GeneralProblem` of the library nodes ``nodes`` (per-node radii
    ``R_i``)."""
    cached = model.cache.get(key)
    if cached is not None and np.array_equal(cached.nodes, nodes):
        return cached

    k, d = len(nodes), model.dim
    rho = cp.Variable((k, d), name="rho")
    parts = node_conjugate_parts(model, nodes)
    total: cp.Expression = rho
    costs: list[cp.Expression] = []
    cons: list[cp.Constraint] = []
    for p in parts:
        total = total + p.contrib
        costs.append(p.cost)
        cons += p.constraints
    cached = _GeneralProblem(nodes, parts, rho, total, costs, cons)
    if dpp_sized(k * d + k):
        S = cp.Parameter((k, d), name="S")
        R = cp.Parameter(k, nonneg=True, name="R")
        cached.dpp = (cached._state(S, R), S, R)
    model.cache.put(key, cached)
    return cached


def _evaluate_parts(parts: list[Any], k: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    contrib = np.zeros((k, d))
    cost = np.zeros(k)
    for p in parts:
        c_, k_ = p.evaluate()
        contrib += c_
        cost += k_
    return contrib, cost

@dataclass
class _NodeBounds:
    """The per-node pieces of ``D(U)`` (19) filled path by path: ``conj`` (upper bounds of the
    node conjugates before the residual charges), ``cmag`` (sums of the absolute summands of
    each, for the rounding bound), ``rho`` (``|computed residual|`` outside the domain),
    ``resid`` (that residual with its sign where the CVXPY split computed it, 0 elsewhere: the
    direction of the certificate's local domain repair), ``rnd`` (bound of the rounding error
    in computing it), ``W0`` (the candidate weights or 0)
    and ``wloc`` (the local radii ``max(1, ||w_i||_inf, ...)``)."""

    conj: np.ndarray
    cmag: np.ndarray
    rho: np.ndarray
    resid: np.ndarray
    rnd: np.ndarray
    W0: np.ndarray
    wloc: np.ndarray

    @classmethod
    def start(cls, n: int, d: int, weights: Any) -> _NodeBounds:
        W0 = np.zeros((n, d)) if weights is None else np.asarray(weights, dtype=float)
        return cls(conj=np.zeros(n), cmag=np.zeros(n), rho=np.zeros((n, d)),
                   resid=np.zeros((n, d)), rnd=np.zeros((n, d)), W0=W0,
                   wloc=np.maximum(1.0, np.abs(W0).max(axis=1, initial=0.0)))


def demands(model: ModelDeclaration, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(S, rnd)``: the node demands ``s = -D^T u`` of (19), an ``(n, d)`` array, and the
    bound of their rounding ``(deg_i + 2) eps sum_{e at i} |u_e|`` (entrywise)."""
    n, d = model.num_nodes, model.dim
    if not model.num_edges:
        return np.zeros((n, d)), np.zeros((n, d))
    D = model.incidence
    if (_compiled.available() and D.format == "csr" and isinstance(U, np.ndarray)
            and U.dtype == np.float64 and U.flags.c_contiguous and U.shape == (D.shape[0], d)):
        # one compiled pass, the same sums (no |U| and |D| copies: 80 + 24 MB at 10^6 edges)
        S, absdiv = np.zeros((n, d)), np.zeros((n, d))
        _compiled.subspace_kernels().demands_pass(D.indptr, D.indices, D.data, U, S, absdiv)
        return np.negative(S, out=S), demand_rounding(model, absdiv)
    S = np.asarray(-(D.T @ U)).reshape(n, d)
    return S, demand_rounding(model, np.asarray(abs(D).T @ np.abs(U)).reshape(n, d))


def demand_rounding(model: ModelDeclaration, absdiv: np.ndarray) -> np.ndarray:
    """The bound ``(deg_i + 2) eps sum_{e at i} |u_e|`` of the rounding of ``s = -D^T u``
    from ``absdiv = |D|^T |u|`` (``(n, d)``)."""
    return (model.degrees + 2)[:, None] * EPS * absdiv


def _batch_bounds(kinds: NodeKinds, S: np.ndarray, nb: _NodeBounds, near: Any = None
                  ) -> np.ndarray:
    """The batches' numpy paths (closed forms, batched Newton; the loss hooks'
    :class:`~gtvmodel.terms.losses.ConjugateGroup`): fill ``nb`` where they converged and
    return the mask of those nodes.  ``near``: the demands and weights as tensors where the
    demands were formed; the groups written for them evaluate there (:func:`node_bounds`)."""
    done = np.zeros(nb.conj.size, dtype=bool)
    for grp in kinds.groups:
        idx = grp.nodes
        if near is not None and grp.array_api:
            S_t, W_t = near
            it = _xp.like(idx, S_t)
            *out, conv = grp.evaluate(S_t[it], W_t[it], _xp.like(nb.wloc[idx], S_t),
                                      _xp.like(nb.rnd[idx], S_t))
            val, r, r_rnd, vmag, wl = (_xp.to_numpy(o) for o in out)
        else:
            val, r, r_rnd, vmag, wl, conv = grp.evaluate(S[idx], nb.W0[idx], nb.wloc[idx],
                                                         nb.rnd[idx])
        ic = idx[conv]
        nb.conj[ic], nb.rho[ic], nb.cmag[ic] = val[conv], r[conv], vmag[conv]
        nb.rnd[ic] += r_rnd[conv]
        nb.wloc[idx] = wl
        done[ic] = True
    return done


def _general_bounds(model: ModelDeclaration, kinds: NodeKinds, S: np.ndarray,
                    nb: _NodeBounds, todo: np.ndarray, solver: str | None) -> None:
    """The other library nodes (and Newton failures ``todo``): the infimal-convolution split of
    :func:`gtvmodel.duality.dual.node_conjugate_parts` for all of ``kinds.general`` in one cached
    CVXPY problem, its point evaluated in numpy (:func:`_read_split`); without a solution the
    ``todo`` nodes are reported dual infeasible (bound ``+inf``)."""
    gall = kinds.general
    general = _general_problem(model, gall)
    parts = general.parts
    # the solver only needs finite weights for the charges; the evaluation below uses R
    # (any weight above the local scale drives the residual to ~0; a huge one ruins the
    # solver's scaling)
    prob = general.problem(S[gall], 100.0 * nb.wloc[gall])
    ok = False
    # the default solver, then (when the caller named none) SCS: any solver's point is only a
    # split to evaluate exactly (Clarabel fails on some extreme p-norm balls, e.g. p = 1.0001
    # and 333 on neighbouring nodes, where SCS solves)
    for name in (solver,) if solver is not None else (None, "SCS"):
        try:
            run_solver(prob, name, {}, False, True, "certificate (node conjugates)")
            ok = prob.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE)
        except SolverError:
            ok = False
        if ok:
            break
    if ok:
        _read_split(model, parts, gall, S[gall], nb, np.isin(gall, todo))
    else:  # no split available: these nodes are reported dual infeasible (gap = inf)
        nb.conj[todo] = np.inf
        nb.rho[todo] = np.abs(S[todo])


def _read_split(model: ModelDeclaration, parts: list[Any], gall: np.ndarray, Sg: np.ndarray,
                nb: _NodeBounds, sel: np.ndarray) -> None:
    """The conjugate bounds of the solved split at the nodes ``gall[sel]``: the parts'
    values at the solver's point (projected into their domains by ``evaluate``), and after a
    polish that lets the parts absorb the solver's small residual (least squares, kept in the
    domains); whichever of the two bounds is smaller (both splits are valid), with the
    rounding of the parts' sums ``gamma (|s| + sum of the summands' magnitudes)``."""
    kg, d = gall.size, model.dim
    contrib, cost = _evaluate_parts(parts, kg, d)
    r0 = Sg - contrib
    for _ in range(3):
        for p in parts:
            if p.absorb is not None:
                p.absorb(Sg - _evaluate_parts(parts, kg, d)[0])
    contrib2, cost2 = _evaluate_parts(parts, kg, d)
    r2 = Sg - contrib2
    mags = [_part_magnitude(p) for p in parts]
    mag = np.abs(Sg) + sum(m[0] for m in mags)
    nb.rnd[gall] += (max_rows(model) + len(parts) + 4) * EPS * mag
    cost_mag = cast(np.ndarray, sum(m[1] for m in mags))
    # choose by the value plus a local-scale charge (both splits are valid)
    b1 = cost + (nb.wloc[gall, None] * (np.abs(r0) + nb.rnd[gall])).sum(axis=1)
    b2 = cost2 + (nb.wloc[gall, None] * (np.abs(r2) + nb.rnd[gall])).sum(axis=1)
    better = b2 <= b1
    nb.conj[gall[sel]] = np.where(better, cost2, cost)[sel]
    nb.cmag[gall[sel]] = cost_mag[sel] + np.abs(cost)[sel]
    nb.resid[gall[sel]] = np.where(better[:, None], r2, r0)[sel]
    nb.rho[gall[sel]] = np.abs(nb.resid[gall[sel]])


def _conic_bounds(model: ModelDeclaration, c: np.ndarray, S: np.ndarray, radii: Radii,
                  nb: _NodeBounds) -> float:
    """Conic (symbolic) nodes ``c``: certified bounds of their conjugates into ``nb``
    (:func:`~gtvmodel.duality.conic_bounds.conjugate_bound`: ``h_i^*(s_i + shift_i) <= value_i``
    from a repaired, checked dual point of (P_s)); the shift is charged like a residual outside
    the domain (``R_i |shift_i|``, or to first order where it is rounding,
    :func:`residual_charge`).  A demand (a hair) outside a conjugate's domain gives ``+inf``;
    with a certified radius ``R_i`` the bound of ``(h_i + iota{||x||_inf <= R_i})^*`` is used
    instead.  Returns 0.0: nothing is left to subtract from the dual value (the bounds rest on
    no solver tolerance)."""
    for i in c:
        i = int(i)
        try:
            bound = conjugate_bound(model, i, S[i])
            if not np.isfinite(bound.value) and np.isfinite(radii()[i]):
                bound = conjugate_bound(model, i, S[i], radius=float(radii()[i]))
        except GTVError:  # empty constraints: no finite bound
            nb.conj[i] = nb.cmag[i] = np.inf
            continue
        nb.conj[i], nb.cmag[i] = bound.value, bound.magnitude
        nb.rho[i] = np.abs(bound.shift)
        nb.rnd[i] += bound.shift_rounding
        if _negligible_shift(bound):  # charged to first order, like a rounding residual
            nb.rnd[i] += nb.rho[i]
    return 0.0


#: A conic node's demand shift whose first-order effect at the solver's maximizer,
#: ``sum_j |shift_j| max(1, |w_j|)``, is at most this fraction of ``max(1, |value|)`` is
#: charged like a rounding-level residual (to first order at the candidate, item 5 of
#: docs/certificates.md) instead of at the radius: the solver's flows leave residuals of 1e-14
#: on a node's free coordinates (a zero loss with one linear constraint), which need no radius.
_SHIFT_RTOL = 1e-12


def _negligible_shift(bound: ConjugateBound) -> bool:
    """Whether a conic node's demand shift is below :data:`_SHIFT_RTOL` in its first-order
    effect ``sum_j |shift_j| max(1, |w_j|)`` at the solver's maximizer ``w``."""
    if bound.point is None or not np.isfinite(bound.value):
        return False
    effect = float(np.abs(bound.shift) @ np.maximum(1.0, np.abs(bound.point)))
    return effect <= _SHIFT_RTOL * max(1.0, abs(bound.value))


def _zero_demand(kinds: NodeKinds, S: np.ndarray, node_conj: np.ndarray) -> np.ndarray:
    """Library nodes with exactly zero demand where the all-zero split is the better bound:
    every library row conjugate, regularizer conjugate and support function is 0 at 0 and the
    node's loss is ``>= 0`` (its facts' lower bound, :attr:`NodeKinds.loss_lower`), so
    ``h_i*(0) = -inf h_i <= 0`` without residual."""
    zero = (S == 0).all(axis=1) & ~(node_conj <= 0) & (kinds.loss_lower >= 0)
    zero[kinds.conic] = False
    return zero


def dual_value(model: ModelDeclaration, flows: Any, radius: Any, solver: str | None = None,
               weights: Any = None) -> dict[str, Any]:
    """Upper bounds ``c_i >= (h_i + iota{||w||_inf <= R_i})*(s_i)`` for every node and the
    edge conjugates at ``flows`` (no repair); ``radius`` is a scalar or per-node ``(n,)``
    (``inf`` allowed: a residual there makes the bound ``+inf``).  Returns
    :func:`node_bounds`' dict at the demands ``s = -D^T u`` (with their rounding bound) and
    ``edge_conj`` (|E|,) and ``value``.  ``weights`` (optional) warm-start the Newton path of
    smooth data-fit nodes and set the local radii of rounding-level residuals."""
    U = checked_flows(model, flows)
    S, rnd = demands(model, U)
    out = node_bounds(model, S, rnd, radius, solver, weights)
    edge_conj = (model.penalty.conjugate_rows(U, model.capacities)
                 if model.num_edges else np.zeros(0))
    out["edge_conj"] = edge_conj
    out["value"] = -float(out["node_conj"].sum()) - float(edge_conj.sum()) - out["conic_tol"]
    return out


def checked_flows(model: ModelDeclaration, flows: Any) -> np.ndarray:
    """``flows`` itself where it is already a finite float ``(|E|, d)`` array (no copy of
    the flows: the certificate's peak memory, issue 30 item 3), else
    :meth:`~gtvmodel.declaration.ModelDeclaration.check_flows`' checked copy."""
    shape = (model.num_edges, model.dim)
    if (isinstance(flows, np.ndarray) and flows.dtype == np.float64 and flows.shape == shape
            and bool(np.isfinite(flows).all())):
        return flows
    return model.check_flows(flows)


def node_bounds(model: ModelDeclaration, S: np.ndarray, rnd: np.ndarray, radius: Any,
                solver: str | None = None, weights: Any = None, near: Any = None
                ) -> dict[str, Any]:
    """The node half of :func:`dual_value` at given demands ``S = -D^T u`` (``(n, d)``) with a
    bound ``rnd`` of their rounding (``(deg_i + 2) eps sum_{e at i} |u_e|``, entrywise, or 0
    where they are exact): ``node_conj`` (n,), ``rho`` (n, d) (a bound of the part of ``s_i``
    outside the domain, charged inside ``node_conj`` by :func:`residual_charge`), ``resid``
    (n, d) (that part with its sign at the nodes of the CVXPY split, 0 elsewhere), ``charge``
    (n,), ``conj_magnitude`` (n,), ``s`` and ``conic_tol``.  Separate so that the demands can
    be formed where the flows are (device tensors,
    :mod:`gtvmodel.certificates.device_certificate`): ``near = (S_t, W_t)``, the demands and
    the weights as tensors there, lets the conjugate groups written for them
    (:attr:`~gtvmodel.terms.losses.ConjugateGroup.array_api`: the squared losses' split,
    proportional to the samples) evaluate on the device; the rest runs on ``S`` in numpy."""
    n, d = model.num_nodes, model.dim
    radii = radius if isinstance(radius, Radii) else Radii(n, radius)
    kinds = node_kinds(model)
    st = model.structure()
    nb = _NodeBounds.start(n, d, weights)
    nb.rnd += rnd
    if kinds.zero.size:
        z = kinds.zero
        nb.conj[z], nb.rho[z], nb.cmag[z] = zero_conjugate_rows(st.l1[z], st.l2[z], S[z])
    done = _batch_bounds(kinds, S, nb, near)
    g = kinds.general
    g = g[~done[g]]
    if g.size:  # the others (and Newton failures): the cached CVXPY problem of all of them
        _general_bounds(model, kinds, S, nb, g, solver)
    conic_tol = _conic_bounds(model, kinds.conic, S, radii, nb) if kinds.conic.size else 0.0
    charge = residual_charge(radii, nb.rho, nb.rnd, nb.wloc)
    node_conj = nb.conj + charge
    zero = _zero_demand(kinds, S, node_conj)
    node_conj[zero], charge[zero], nb.cmag[zero], nb.rho[zero] = 0.0, 0.0, 0.0, 0.0
    nb.resid[zero] = 0.0
    return {"node_conj": node_conj, "rho": nb.rho, "resid": nb.resid, "charge": charge,
            "conj_magnitude": nb.cmag, "s": S, "conic_tol": conic_tol}


# ===================================================================== certify
