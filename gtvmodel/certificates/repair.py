"""Dual-feasibility repair of edge flows and flows built from weights (steps 1-4 of
:mod:`gtvmodel.certificates.certificate`)."""


from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import cvxpy as cp
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .. import _compiled, _norms, _xp
from .._cvx import ScaleParameter, dpp_sized
from .._solver import run_solver
from ..declaration import ModelDeclaration
from ..duality.dual import node_conjugate_parts
from ..errors import GTVError, SolverError
from ..terms.losses import smooth_gradients
from .kinds import EPS, affine_conditions, capacities, node_kinds, norm_penalty
from .subspace import MinNormSolver, condition_operator, divergence_rows, subspace_solver

__all__ = ["flows_from_weights", "repair_flows", "repair", "domain_scale", "project_flows",
           "shrink_flows", "capacity_ratio", "scale_flows", "rescale_note", "PROJECT_NOTE",
           "cached_subspace_solver", "subspace_note", "CAP_RTOL", "within_rounding",
           "alternate_rounds", "LOOSE_RTOL"]

#: The repair note of step 1 (the row-wise projection onto the capacities).
PROJECT_NOTE = "projected flows onto the capacities ||u_e||_* <= lambda A_e"

#: The capacity excess ``max_e (||u_e||_* - lambda A_e)_+`` (27) that the repair treats as
#: rounding, relative to ``max(1, max_e |u_e|)`` of the flows before it.
CAP_RTOL = 1e-12

#: The relative residual of the minimum-norm corrections of step 2 before the last of an
#: alternation when they are solved by conjugate gradients (:func:`_alternate`): the next
#: capacity projection moves the flows again, and the next correction removes what this one
#: left together with what the projection broke; only the last correction aims at
#: :meth:`~gtvmodel.certificates.subspace.MinNormSolver.solve`'s ``1e-15`` (issue 30 item 3:
#: about 5 products instead of 18-21 for each intermediate correction).
LOOSE_RTOL = 1e-3


def flows_from_weights(model: ModelDeclaration, weights: Any, rounds: int = 8,
                       start: Any = None) -> np.ndarray:
    """Edge flows built from weights (module docstring), not yet repaired
    (see :func:`repair_flows`).

    1. Edge condition ``u_e in lambda A_e dphi(v_e)``: on edges with ``||v_e|| > 1e-6
       max(1, ||W||_inf)`` (and on every edge of a differentiable penalty) ``u_e`` is the
       penalty's dual update of ``v_e / eps`` for a tiny ``eps``, i.e. ``lambda A_e grad
       phi(v_e)``; the other edges (``w_{e+} = w_{e-}``: flow strictly inside its capacity)
       are *free* and start at 0 (for the ``l1`` penalty, coordinate by coordinate).
    2. Node condition ``-(D^T u)_i = grad h_i(w_i)`` at nodes with a gradient (component
       means removed where every node of a connected component has one): the free edges get
       the minimum-norm least-squares correction (LSQR); if no edge is free, every edge is
       corrected (cached minimum-norm solver).  For norm penalties this alternates with the
       projection onto the capacities (at most ``rounds`` times, until both hold).

    With ``start`` (flows), step 1 is skipped: every edge of ``start`` is corrected (a cheap
    repair of given flows towards the node conditions of the weights).
    """
    W = model.check_weights(weights)
    E, d = model.num_edges, model.dim
    if E == 0:
        return np.zeros((0, d))
    kinds = node_kinds(model)
    scale = max(1.0, float(np.abs(W).max(initial=0.0)))
    if start is not None:
        U, free = model.check_flows(start).copy(), np.zeros((E, d), dtype=bool)
    else:
        U, free = _edge_condition(model, W, scale)
    idx = np.flatnonzero(kinds.gradient)
    if idx.size == 0:
        return U
    target = _gradient_target(model, W, idx)
    A, correct = _flow_corrector(model, idx, free)
    return _match_nodes(model, U.ravel().copy(), target, A, correct, bool(free.any()), rounds,
                        scale).reshape(E, d)


def _edge_condition(model: ModelDeclaration, W: np.ndarray, scale: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Step 1: ``u_e = lambda A_e grad phi(v_e)`` (the penalty's dual update of ``v_e / eps``)
    and the mask of the *free* entries (``w_{e+} = w_{e-}`` within ``1e-6 scale``: the flow
    lies strictly inside its capacity and starts at 0; for the ``l1`` penalty coordinate by
    coordinate, for other norms row by row)."""
    E, d = model.num_edges, model.dim
    pen = model.penalty
    V = model.empirical_graph.diff(W)
    eps = 1e-12 * scale
    try:
        U = pen.dual_update(V / eps, 1.0 / eps, model.capacities)
    except GTVError:
        U = np.zeros((E, d))
    free = np.zeros((E, d), dtype=bool)
    if pen.is_norm:
        small = np.abs(V) <= 1e-6 * scale
        # l1 penalty: separable, each coordinate with v_ej = 0 is free; other norms: rows
        free = small if getattr(pen, "p", None) == 1 else np.repeat(
            small.all(axis=1)[:, None], d, axis=1)
        U[free] = 0.0
    return U, free


def _gradient_target(model: ModelDeclaration, W: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The node condition's right-hand side ``(D^T u)_i = -grad h_i(w_i)`` at the gradient
    nodes ``idx`` (flat); in a connected component where every node has a gradient, flows can
    only move demand around, so only the component-mean-free part is reachable."""
    st = model.structure()
    gradient = node_kinds(model).gradient
    d = model.dim
    target = -smooth_gradients(st.batches, st.l2, W)[idx]
    ncomp, comp = st.component_count, st.components
    allm = np.bincount(comp, weights=(~gradient).astype(float), minlength=ncomp) == 0
    full = allm[comp[idx]]
    if full.any():
        ci = comp[idx][full]
        sums = np.zeros((ncomp, d))
        np.add.at(sums, ci, target[full])
        target[full] -= sums[ci] / np.bincount(ci, minlength=ncomp)[ci][:, None]
    return target.ravel()


def _flow_corrector(model: ModelDeclaration, idx: np.ndarray, free: np.ndarray
                    ) -> tuple[sp.csr_matrix, Any]:
    """``(A, correct)``: the stacked node conditions ``A vec(U) = (D^T U)[idx]`` and a
    least-squares correction ``r -> delta`` with ``A delta ~ r``: on the free entries only
    (LSQR) when there are some, else on every edge (the cached minimum-norm solver; a rough
    solve is enough, soundness does not depend on it, so CG is capped at 200 iterations)."""
    E, d = model.num_edges, model.dim
    if free.any():
        A = divergence_rows(model, idx, None)
        cols = np.flatnonzero(free.ravel())
        Af = A[:, cols]

        def correct(r: np.ndarray) -> np.ndarray:
            out = np.zeros(E * d)
            out[cols] = spla.lsqr(Af, r, atol=1e-14, btol=1e-14,
                                  iter_lim=min(20 * Af.shape[1] + 100, 1000))[0]
            return out

        return A, correct
    solver = model.cache.get_or_build("cert_gradient", lambda: MinNormSolver(
        divergence_rows(model, idx, None), maxiter=200))
    return solver.A, lambda r: solver.solve(r, rounds=1)


def _match_nodes(model: ModelDeclaration, flat: np.ndarray, target: np.ndarray,
                 A: sp.csr_matrix, correct: Any, has_free: bool, rounds: int,
                 scale: float) -> np.ndarray:
    """Step 2: correct the flat flows towards ``A u = target``, alternating with the
    projection onto the capacities ``||u_e||_* <= lambda A_e`` (27) for norm penalties (POCS
    between the two convex sets; at most ``rounds`` times, until both hold)."""
    E, d = model.num_edges, model.dim
    pen = norm_penalty(model)
    cap = capacities(model)
    for _ in range(rounds):
        flat = flat + correct(target - A @ flat)
        if np.abs(target - A @ flat).max(initial=0.0) > 1e-6 * scale and not has_free:
            break  # not converging (large ill-conditioned graph): leave it to the repair
        if cap is None:
            break
        Uc = flat.reshape(E, d)
        if np.max(pen.dual_norm(Uc) - cap, initial=0.0) <= CAP_RTOL * scale:
            break
        flat = pen.project_dual_ball(Uc, cap).ravel()
    return flat


def repair_flows(model: ModelDeclaration, flows: Any, rounds: int = 4) -> tuple[np.ndarray,
                 list[str]]:
    """Make flows dual feasible where it is cheap (module docstring, steps 1-3).

    Returns ``(repaired_flows, repairs)`` where ``repairs`` describes each change made."""
    U, repairs, _ = repair(model, flows, rounds)
    return U, repairs

def repair(model: ModelDeclaration, flows: Any, rounds: int, weights: np.ndarray | None = None,
           owned: bool = False) -> tuple[np.ndarray, list[str], float]:
    """:func:`repair_flows` plus the factor ``theta`` of the final rescaling (1: none).  With
    ``weights`` (checked ``(n, d)``) and stiff nodes (:data:`~gtvmodel.certificates.kinds.
    STIFF_RTOL`), step 2 is the affine variant: the demands also match the gradients of the
    weights along the stiff directions (:func:`~gtvmodel.certificates.kinds.affine_conditions`).
    ``owned``: ``flows`` is an already checked ``(|E|, d)`` float array that the caller gives
    away (:func:`~gtvmodel.certificates.dual_side.given_flows`): repaired in place, not
    copied (the same operations on the same values)."""
    if owned and isinstance(flows, np.ndarray) and flows.dtype == np.float64 \
            and flows.shape == (model.num_edges, model.dim):
        U = flows
    else:
        U = model.check_flows(flows)  # a new array (the repair works on it in place)
        if isinstance(flows, np.ndarray) and np.may_share_memory(U, flows):
            U = U.copy()
    if model.num_edges == 0:
        return U, [], 1.0
    U, repairs, solver, b = _alternate(model, U, rounds, weights)
    settled = 1.0
    if b is not None:
        U, settled = _settle(model, U, solver, b, rounds)
        if settled < 1.0:
            repairs.append(f"scaled all flows by theta = {settled:.12g} to meet the "
                           "capacities, re-matching the stiff demands after each scaling")
    U, theta = _rescale(model, U, repairs)
    return U, repairs, theta * settled


def _settle(model: ModelDeclaration, U: np.ndarray, solver: Any, b: np.ndarray, rounds: int
            ) -> tuple[np.ndarray, float]:
    """The affine variant's step 3: ``(U, theta)``.  A global rescaling by ``theta`` keeps
    the subspace conditions but breaks the affine ones by ``(1 - theta) |b|`` (``A (theta u) =
    theta b``), which the stiff nodes amplify by ``1 / (4 e_j)``.  So alternate (at most
    ``rounds`` times): scale into the capacities (``theta_k``), then correct the affine
    residual (minimum-norm); after a scaling every edge has the slack ``(1 - theta_k) lambda
    A_e``, which the correction, of size ``(1 - theta_k) |b|`` spread over the edges near the
    stiff nodes, usually fits.  ``theta`` is the product of the factors; whatever excess
    remains is left to :func:`_rescale`."""
    E, d = model.num_edges, model.dim
    theta = 1.0
    bmax = float(np.abs(b).max(initial=0.0))
    for _ in range(rounds):  # in place: U is the repair's own array (no |E| x d copies)
        t = capacity_ratio(model, U)
        if t < 1.0:
            t *= 1.0 - 4.0 * EPS
            U = scale_flows(model, U, t, inplace=True)
            theta *= t
        r = solver.A @ U.ravel() - b
        if within_rounding(float(np.abs(r).max(initial=0.0)), max(_abs_max(U), bmax)):
            break
        U -= solver.solve(r).reshape(E, d)
    return U, theta


def _conditions(model: ModelDeclaration, weights: np.ndarray | None
                ) -> tuple[Any, np.ndarray | None, str]:
    """``(solver, b, note)`` of step 2: the subspace conditions ``A u = 0`` (``b`` None), or
    with ``weights`` and stiff nodes the affine ones ``A u = b`` (``solver`` None: none)."""
    kinds = node_kinds(model)
    note = subspace_note(model)
    aff = affine_conditions(model) if weights is not None else None
    if aff is not None:
        st = model.structure()
        G = smooth_gradients(st.batches, st.l2, cast(np.ndarray, weights))
        return aff.solver, aff.target(G), (
            f"minimum-norm flow correction for the subspace conditions at "
            f"{kinds.subspace.size} node(s) and the demands along the stiff directions at "
            f"{kinds.stiff.size} ill-conditioned node(s) set to the gradients at the weights")
    if kinds.subspace.size == 0:
        return None, None, note
    built = model.cache.get("cert_subspace")  # a later certificate: its A checks as cheaply
    return (_LazySubspace(model) if built is None else built), None, note


class _LazySubspace:
    """Step 2's subspace solver built only when a correction is needed: ``A`` is the cheap
    matrix-free ``condition_operator`` of the conditions (the rows of ``divergence_rows``,
    never stored), enough to see that flows already meet them within rounding (flows
    recovered from the weights, :mod:`~gtvmodel.certificates.recovery`, usually do: building
    the solver, e.g. an eigen-decomposition of ``A A^T``, then costs more than the rest of the
    certificate); :meth:`solver` builds (and caches) it.  Once built, later certificates
    take the cached solver directly (its ``A`` is the same operator; building this one again
    cost about an iteration of Algorithm 1 per certificate at 20,000 nodes)."""

    def __init__(self, model: ModelDeclaration):
        kinds = node_kinds(model)
        self.model = model
        assert kinds.subspace_bases is not None  # (nodes on a subspace have bases)
        self.A = condition_operator(model, kinds.subspace, kinds.subspace_bases)

    def solver(self) -> MinNormSolver:
        return cached_subspace_solver(self.model)


def cached_subspace_solver(model: ModelDeclaration) -> MinNormSolver:
    """The solver of step 2's subspace conditions (:func:`~gtvmodel.certificates.kinds.
    subspace_solver`), built once per model (cache slot ``"cert_subspace"``)."""
    kinds = node_kinds(model)
    return model.cache.get_or_build("cert_subspace", lambda: subspace_solver(
        model, kinds.subspace, cast(list, kinds.subspace_bases)))


def subspace_note(model: ModelDeclaration) -> str:
    """The repair note of step 2's correction for the subspace conditions."""
    return (f"minimum-norm flow correction for the subspace conditions at "
            f"{node_kinds(model).subspace.size} node(s) (zero loss: (D^T u)_i = 0; squared "
            "loss with rank X_i < d: (D^T u)_i in range(X_i^T))")


def within_rounding(r_max: float, scale: float) -> bool:
    """Whether a residual of the linear conditions of step 2 (largest entry ``r_max``) is
    rounding of flows and right-hand side of largest entry ``scale``: ``r_max <= 64 eps
    scale`` (nothing to correct)."""
    return bool(r_max <= 64 * EPS * scale)


def alternate_rounds(U: Any, excess: Callable[[Any], float], project: Callable[[Any], Any],
                     correct: Callable[[Any, bool], tuple[Any, bool, bool]], scale: float,
                     rounds: int) -> tuple[Any, bool, bool]:
    """Steps 1-2 alternated, at most ``rounds`` times (the caller's operations on its flows:
    numpy arrays, or device tensors in edge blocks): the projection onto the capacities (27)
    where ``excess(U)`` is above ``CAP_RTOL scale``, then ``correct(U, loose) -> (U, done,
    stopped_early)`` (the minimum-norm correction of the linear conditions; with ``loose``,
    every round but the last, an iterative solver may stop at :data:`LOOSE_RTOL`), until the
    capacities hold.  A loose correction that turns out to be the last (the capacities held
    after it) is finished by a full one.  Returns the flows and whether each step changed
    them.  ``excess`` runs once per round and once before the first (the excess after a
    correction is the next round's before its projection)."""
    did_cap = did_sub = pending = False
    over = excess(U)
    for k in range(rounds):
        if over > CAP_RTOL * scale:
            U = project(U)
            did_cap = True
        U, done, pending = correct(U, k < rounds - 1)
        did_sub |= done
        over = excess(U)
        if over <= CAP_RTOL * scale:
            break
    if pending:  # step 3 scales away the excess the finishing correction leaves, if any
        U, done, _ = correct(U, False)
        did_sub |= done
    return U, did_cap, did_sub


def _alternate(model: ModelDeclaration, U: np.ndarray, rounds: int,
               weights: np.ndarray | None = None
               ) -> tuple[np.ndarray, list[str], Any, np.ndarray | None]:
    """Steps 1-2, alternated (at most ``rounds`` times): the row-wise projection onto the
    capacities ``||u_e||_* <= lambda A_e`` (27) and the minimum-norm correction of the
    subspace conditions ``A u = 0`` (zero-loss nodes, rank-deficient losses), or with
    ``weights`` the affine conditions ``A u = b`` (:func:`_conditions`).  Returns the flows,
    the repair notes, the solver and ``b`` (None: the subspace conditions)."""
    E, d = model.num_edges, model.dim
    cap = capacities(model)
    pen = norm_penalty(model)
    solver, b, note = _conditions(model, weights)
    A = None if solver is None else solver.A
    scale = max(1.0, _abs_max(U))
    bmax = 0.0 if b is None else float(np.abs(b).max(initial=0.0))
    ref = 0.0  # ||r|| of the first correction: the later ones aim at its absolute residual

    ball = _compiled_ball(model, U)

    def cap_excess(U_: np.ndarray) -> float:
        if ball is not None and U_.flags.c_contiguous:
            return float(ball[0].ball_excess_pass(U_, cap))
        return float(np.max(pen.dual_norm(U_) - cap, initial=0.0)) if cap is not None else 0.0

    def project(U_: np.ndarray) -> np.ndarray:
        if ball is None or not U_.flags.c_contiguous:
            return pen.project_dual_ball(U_, cap)
        kern, row, flagged = ball
        nf = int(kern.ball_project_pass(U_, cap, row, flagged))  # in place: U_ is ours
        if nf:  # rows the kernel declines (NaN, inf, near the ends of the range)
            assert cap is not None  # (a compiled ball has capacities)
            fl = flagged[:nf]
            U_[fl] = _norms.project_rows(U_[fl], cap[fl], 2.0)
        return U_

    def residual(U_: np.ndarray) -> np.ndarray:
        r = A @ U_.ravel()
        return r if b is None else r - b

    def correct(U_: np.ndarray, loose: bool) -> tuple[np.ndarray, bool, bool]:
        nonlocal solver, A, ref
        if A is None:
            return U_, False, False
        r = residual(U_)
        if within_rounding(float(np.abs(r).max(initial=0.0)), max(_abs_max(U_), bmax)):
            return U_, False, False
        if isinstance(solver, _LazySubspace):  # a correction is needed: build the solver
            solver = solver.solver()
            A = solver.A
            r = residual(U_)
        # only the conjugate gradients stop early (a factorization costs the same either way)
        loose = loose and solver.eig is None and cap is not None
        # in place: U_ is repair's copy or a projection's output
        if loose:
            solver.subtract_loose(U_, r, LOOSE_RTOL)
        else:
            U_ -= solver.solve(r, ref=ref).reshape(E, d)
        ref = max(ref, float(np.sqrt(np.sum(r * r))))
        return U_, True, loose

    U, did_cap, did_sub = alternate_rounds(U, cap_excess, project, correct, scale, rounds)
    repairs: list[str] = []
    if did_cap:
        repairs.append(PROJECT_NOTE)
    if did_sub:
        repairs.append(note)
    return U, repairs, solver, b


def _compiled_ball(model: ModelDeclaration, U: np.ndarray) -> tuple[Any, Any, np.ndarray] | None:
    """``(kernels, row, flagged)`` of step 1 by compiled passes
    (:func:`gtvmodel._compiled.ball_excess_pass`, :func:`~gtvmodel._compiled.
    ball_project_pass`) for ``Norm2``'s capacities (the penalty's
    :class:`~gtvmodel._compiled.L2BallRow`: the arithmetic and rounding bound of
    :func:`gtvmodel._norms.project_rows`, each row inside its capacity for certain), float64
    flows; None otherwise (numba missing, another penalty: the numpy path).  One pass for
    the excess and one for the projection, in place, instead of the numpy passes and the
    copy of ``project_dual_ball`` (about 9.5 against 2-3 ms at 200,000 edges, ``d = 10``)."""
    cap = capacities(model)
    if cap is None or not _compiled.available() or U.dtype != np.float64 or U.ndim != 2:
        return None
    row = model.penalty.compiled_dual_row(cap, model.dim)
    if not isinstance(row, _compiled.L2BallRow):
        return None
    return _compiled.subspace_kernels(), row, np.empty(U.shape[0], dtype=np.int64)


def _abs_max(U: np.ndarray) -> float:
    """``max |U|`` (0 for an empty array; NaN propagates) without the ``|U|`` copy."""
    return max(float(U.max(initial=0.0)), -float(U.min(initial=0.0)))


def capacity_ratio(model: ModelDeclaration, U: Any, rows: slice = slice(None)) -> float:
    """``min(1, min_e lambda A_e / ||u_e||_*)`` over the rows above their capacities (27) (1
    for a penalty without capacities): the factor of step 3 before its safety margin.  A
    minimum of rows, so a sharded run takes the minimum of its shards' values (and a block of
    rows ``rows`` of the flows ``U``, e.g. device tensors, :mod:`gtvmodel._xp`, the minimum of
    its blocks')."""
    cap = capacities(model)
    if cap is None:
        return 1.0
    xp = _xp.namespace(U)
    cap = _xp.like(cap[rows], U)
    dn = model.penalty.dual_norm(U)
    over = dn > cap
    if not bool(xp.any(over)):
        return 1.0
    return float(xp.min(xp.where(over, cap / xp.where(over, dn, 1.0), 1.0)))


def scale_flows(model: ModelDeclaration, U: Any, theta: float, rows: slice = slice(None),
                inplace: bool = False) -> Any:
    """Step 3 with a given factor ``theta < 1`` (safety margin included): ``theta U``, then
    the rows that rounding leaves an ulp above capacity clipped exactly (row by row, so
    shards, or blocks ``rows`` of device flows, can apply it to their rows).  With
    ``inplace`` (flows the caller owns) ``U`` itself is scaled (the same products)."""
    cap = capacities(model)
    if inplace:
        U *= theta
    else:
        U = theta * U
    if cap is None:
        return U
    cap = _xp.like(cap[rows], U)
    pen = model.penalty
    dn = pen.dual_norm(U)
    bad = dn > cap
    if bool(_xp.namespace(U).any(bad)):
        U[bad] *= (cap[bad] / dn[bad] * (1.0 - 4.0 * EPS))[:, None]
    return U


def _rescale(model: ModelDeclaration, U: np.ndarray, repairs: list[str]
             ) -> tuple[np.ndarray, float]:
    """Step 3: scale all flows by ``theta = min(1, min_e lambda A_e / ||u_e||_*)`` (the dual
    domain is convex and contains 0; scaling keeps the subspace conditions), then clip the
    rows that rounding leaves an ulp above capacity (:func:`capacity_ratio`,
    :func:`scale_flows`)."""
    theta = capacity_ratio(model, U)
    if theta < 1.0:
        theta *= 1.0 - 4.0 * EPS
        U = scale_flows(model, U, theta, inplace=True)  # repair's own copy
        repairs.extend(rescale_note(theta))
    return U, theta


def rescale_note(theta: float) -> list[str]:
    """The repair note of a final rescaling by ``theta`` (none when ``theta`` is within
    rounding of 1: "theta = 1" would claim a change that changed nothing visible)."""
    if f"{theta:.12g}" != "1":
        return [f"scaled all flows by theta = {theta:.12g} to meet the capacities"]
    return []


# ===================================================================== dual value

@dataclass
class _GaugeProblem:
    """The LP of :func:`_gauge_problem`: its variable ``theta`` and the constraints not
    involving the demands built once; the demands ``S`` (``k d`` numbers) are a Parameter of
    one cached DPP problem (``dpp``) while they fit :func:`~gtvmodel._cvx.dpp_sized`, else a
    constant of a problem stated per call (``theta_i s_i`` makes DPP's tensor grow with the
    square of ``k d``)."""

    theta: cp.Variable
    total: cp.Expression
    constraints: list[cp.Constraint]
    dpp: tuple[cp.Problem, cp.Parameter] | None = None

    def _state(self, S: Any) -> cp.Problem:
        k, d = self.total.shape
        scaled = cp.multiply(cp.reshape(self.theta, (k, 1), order="C") @ np.ones((1, d)), S)
        return cp.Problem(cp.Maximize(cp.sum(self.theta)),
                          [*self.constraints, self.total == scaled])

    def problem(self, S: np.ndarray) -> cp.Problem:
        """The LP at demands ``S`` (``(k, d)``)."""
        if self.dpp is None:
            return self._state(S)
        prob, Sp = self.dpp
        Sp.value = S
        return prob


def _gauge_problem(model: ModelDeclaration, nodes: np.ndarray) -> _GaugeProblem:
    """Cached LP: the largest ``theta_i in [0, 1]`` with ``theta_i s_i in dom h_i*``."""
    cached = model.cache.get("cert_gauge")
    if cached is not None:
        return cached

    k, d = len(nodes), model.dim
    theta = cp.Variable(k, name="theta")
    parts = node_conjugate_parts(model, nodes)
    total: cp.Expression = cp.Constant(np.zeros((k, d)))
    cons: list[cp.Constraint] = [theta >= 0, theta <= 1]
    for p in parts:
        total = total + p.contrib
        cons += p.constraints
    cached = _GaugeProblem(theta, total, cons)
    if dpp_sized(k * d):
        S = cp.Parameter((k, d), name="S")
        cached.dpp = (cached._state(S), S)
    model.cache.put("cert_gauge", cached)
    return cached


def domain_scale(model: ModelDeclaration, S: np.ndarray, bad: np.ndarray,
                  solver: str | None = None) -> float:
    """A ``theta in [0, 1]`` with ``theta s_i in dom h_i*`` at the listed nodes (0 if none is
    found).  Closed form for zero losses with ``l1`` (box domain), the cached LP of
    :func:`_gauge_problem` for the other library nodes; other nodes (subspace or conic) cannot
    be fixed by scaling and give 0."""
    kinds = node_kinds(model)
    st = model.structure()
    theta = 1.0
    rest = np.setdiff1d(bad, kinds.general)
    for i in rest:
        if i in kinds.zero and st.l1[i] > 0 and st.l2[i] == 0:
            theta = min(theta, float(st.l1[i] / max(np.abs(S[i]).max(), 1e-300)))
        else:
            return 0.0
    if np.isin(bad, kinds.general).any():
        gauge = _gauge_problem(model, kinds.general)
        prob, th = gauge.problem(S[kinds.general]), gauge.theta
        try:
            run_solver(prob, solver, {}, False, True, "certificate (domain scaling)")
        except SolverError:
            return 0.0
        if prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or th.value is None:
            return 0.0
        theta = min(theta, float(np.clip(th.value, 0.0, 1.0).min()))
    return theta


def shrink_flows(model: ModelDeclaration, U: np.ndarray, resid: np.ndarray,
                 nodes: np.ndarray) -> np.ndarray:
    """Move the demands ``s_i = -(D^T U)_i`` of ``nodes`` by ``-resid_i`` (the signed part of
    ``s_i`` outside ``dom h_i*``) by shrinking flows only: at node ``i`` and coordinate ``j``,
    the incident flows whose contribution ``-D_ei u_ej`` to ``s_ij`` has the sign of
    ``resid_ij`` are scaled by ``max(0, 1 - |resid_ij| / sum of those contributions)`` (an
    edge asked by both ends takes the smaller factor); their neighbours absorb the change.

    A closed form in numpy, so the certificate stays a continuous function of the flows (the
    convex projection :func:`project_flows` depends on its solver's stopping point, ~1e-6
    here).  ``|u_ej|`` only decreases, so absolute (p-norm) capacities stay met."""
    E, d = U.shape
    coo = model.incidence.tocoo()
    inset = np.zeros(model.num_nodes, dtype=bool)
    inset[nodes] = True
    sel = inset[coo.col]
    e, i = coo.row[sel], coo.col[sel]
    contrib = -coo.data[sel, None] * U[e]  # (pairs, d): edge e's part of s_i
    r = resid[i]
    same = contrib * r > 0
    mass = np.zeros((model.num_nodes, d))
    np.add.at(mass, i, np.where(same, np.abs(contrib), 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = np.clip(1.0 - np.abs(resid) / mass, 0.0, 1.0)
    factor = np.ones((E, d))
    np.minimum.at(factor, e, np.where(same, keep[i], 1.0))
    return U * factor


def _projection_problem(model: ModelDeclaration) -> tuple[Any, ...]:
    """Cached constraints of the convex projection of flows onto the dual domain (library
    nodes): ``-(D^T U')_i in dom h_i*`` (the domain constraints of the split variables) and the
    penalty's domain (capacities); returns ``(U', constraints, regime, lambda parameter)``.

    The flows to project enter only the objective, which :func:`project_flows` builds per call
    with the flows as a constant: as a CVXPY ``Parameter`` of ``|E| d`` entries, DPP's
    parameter tensor grows like ``(|E| d)^2`` (5 GiB at ``|E| d = 12,380``, and past 200 GiB at
    001 Table I's ``|E| d = 123,000``), while rebuilding ``||U' - U||^2`` costs a fraction of
    the solve."""
    cached = model.cache.get("cert_projection")
    regime = model.penalty.conjugate_regime(model.lam)
    if cached is not None and cached[2] == regime:  # lambda is a Parameter: set it
        cached[3].set(model.lam)
        return cached

    n, d, E = model.num_nodes, model.dim, model.num_edges
    lib = np.setdiff1d(np.arange(n), model.structure().conic)
    U = cp.Variable((E, d), name="U")
    S = -(model.incidence.T @ U)
    lam = ScaleParameter(model.lam)
    _, cons = model.penalty.conjugate_parametric(U, model.edge_weights, lam)
    parts = node_conjugate_parts(model, lib)
    total: cp.Expression = cp.Constant(np.zeros((lib.size, d)))
    for p in parts:
        total = total + p.contrib
        cons += p.constraints
    cons.append(total == S[lib, :])
    cached = (U, cons, regime, lam)
    model.cache.put("cert_projection", cached)
    return cached


def project_flows(model: ModelDeclaration, flows: Any,
                  solver: str | None = None) -> np.ndarray | None:
    """The Euclidean projection of ``flows`` onto the dual-feasible set of the library nodes
    (one vectorized CVXPY problem, as large as the dual itself: the expensive last resort of
    :func:`certify`).  Returns None if the solve fails."""
    U = model.check_flows(flows)
    if model.num_edges == 0:
        return U
    Uv, cons, _, _ = _projection_problem(model)
    prob = cp.Problem(cp.Minimize(cp.sum_squares(Uv - U)), cons)
    try:
        run_solver(prob, solver, {}, False, True, "certificate (flow projection)")
    except SolverError:
        return None
    if prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or Uv.value is None:
        return None
    return np.asarray(Uv.value, dtype=float)
