"""The polish of :func:`gtvmodel.solve.exact.solve_exact` (issue 17): an exact Newton solve of
(16) restricted to the structure of the interior-point answer, kept only when the certificate
(34) proves it at least as good.

An interior-point answer is accurate in the objective but not in flat directions: on a 1000-node
SBM its weights were 2.1e-7 from a Newton oracle while its objective was 1.8e-10 above the
optimum (``benchmarks/RESULTS.md``).  As OSQP polishes on its active set, :func:`polish`

1. reads the structure of the answer ``W`` with flows ``U``: the edge differences at the kink of
   ``phi`` (:meth:`Penalty.fused_rows <gtvmodel.terms.penalties.Penalty.fused_rows>`: a
   difference ``z_e = w_{e+} - w_{e-}``, relative to ``max(1, ||W||_inf)``, below the relative
   slack of its flow to the capacity ``lambda A_e``; optimality (23)/(27) leaves slack only on
   fused edges), contracted per coordinate into clusters
   (:func:`scipy.sparse.csgraph.connected_components`), and the cluster coordinates held at 0
   by an ``l1`` regularizer ``eta_i ||w_i||_1``;
2. minimizes (16) over weights constant on every cluster, ``W = P v``, where it is smooth, by
   Newton's method with a backtracking line search (the sparse Hessian ``P^T (blkdiag(hess
   L_i + 2 kappa_i I) + (D (x) I)^T blkdiag(lambda A_e hess phi(z_e)) (D (x) I)) P``, from
   the batches' :meth:`LossBatch.hessians <gtvmodel.terms.losses.LossBatch.hessians>` and the
   penalty's :meth:`rows_hessian <gtvmodel.terms.penalties.Penalty.rows_hessian>`; each step
   by Jacobi-preconditioned conjugate gradients to a relative residual of 1e-12, or a sparse LU
   where the system is small or CG needs more than :data:`CG_ITERATIONS` iterations: on the
   1000-node SBM (5000 unknowns) CG took 86 iterations and 0.06 s where the LU took 1.7-4.6 s;
   on a 32 x 32 grid (5120) CG took 855 iterations and 0.24 s, the LU 0.05 s);
3. builds flows satisfying the node optimality conditions (23): ``u_e = lambda A_e grad
   phi(z_e)`` on the other edges, and on the fused ones (and the edges inside a cluster: on
   the 5,000-node SBM of ``benchmarks/bench_exact_routes.py`` two edges inside clusters, read
   as not fused from SCS's 1e-5 answer, got ``u_e = 0``, the flows exceeded their capacities
   by 47 % and the certificate's recovery from the weights took 43-76 s) the interior-point
   flows corrected by
   the capacity-weighted minimum-norm solution of the balance ``D_F^T u_F = -(grad h(W) +
   D_N^T u_N)`` (one grounded Laplacian solve per cluster pattern; on an ``l1`` zero the
   cluster's residual is shared in proportion to ``eta_i``): the interior-point flows keep
   their slack to the capacities, which the minimum-norm flows alone need not have (on a
   cluster with cycles they exceeded them by 14 % on an 8 x 8 grid);
4. certifies the polished point with :func:`~gtvmodel.certificates.certificate.certify` and
   keeps it only if its certified gap is at most the interior-point answer's and its objective
   (16) is not above it (up to the rounding of its evaluation, ``8 eps |P|``); where the
   caller passes the answer's certificate as a function (the aimed runs of
   :mod:`gtvmodel.solve.conic_route`), a polished point certified to the accuracy with an
   objective not above the answer's is kept without computing it.

Scope: library losses whose batches have a Hessian (squared, quadratic, logistic, Huber, zero;
with ``l1``/``l2`` regularizers), penalties with a polish (:class:`~gtvmodel.terms.penalties.
Norm2`, :class:`~gtvmodel.terms.penalties.Norm1`, :class:`~gtvmodel.terms.penalties.
NormInf` (whole rows fused; a tie on a row left free stalls Newton and the polish is
rejected), :class:`~gtvmodel.terms.penalties.SquaredNorm2`), no node constraints, positive
capacities; anything else is skipped with the reason recorded (``Solution.info["polish"]``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spl

from ..certificates.certificate import Certificate, certify
from ..certificates.recovery import balance_flows, cluster_sums, fused_components
from ..declaration import ModelDeclaration, ModelStructure
from ..errors import GTVError
from ..terms.losses import smooth_gradients

__all__ = ["polish", "Polished", "ZERO_TOL", "MAX_NEWTON", "MIN_STEP", "DIRECT_SIZE",
           "CG_ITERATIONS", "CAPACITY_ROUNDS", "CAPACITY_EXCESS"]

#: A cluster coordinate with an ``l1`` regularizer is held at 0 when its mean is at most
#: ``ZERO_TOL max(1, ||W||_inf)``.
ZERO_TOL = 1e-7
#: The most Newton steps of one polish.
MAX_NEWTON = 50
#: The shortest Newton step the line search may take before the polish gives up (rejected:
#: the restricted problem is not smooth near the start, i.e. an edge at the kink of ``phi``
#: was read as not fused).  From a structure read correctly every step was a full one
#: (``t = 1``: every polish of ``tests/test_polish.py``, ``tests/test_exact.py``,
#: ``tests/test_routes.py`` and of the 300- to 2,000-node SBMs and 20 x 20 to 40 x 40 grids
#: of ``benchmarks/bench_exact_routes.py``); on the 100 x 100 grid, whose Clarabel answer
#: leaves fused and unfused edge differences in one continuum (1.77e-6 and 1.77e-6), the steps
#: were 2^-5 to 2^-27 and the 50 steps took 6.0 s before the polish was rejected.
MIN_STEP = 0.125
#: Newton systems up to this size are solved by a sparse LU, larger ones by CG first.
DIRECT_SIZE = 500
#: CG iterations after which a Newton step (and the polish's later ones) uses the sparse LU.
CG_ITERATIONS = 200

_EPS = np.finfo(float).eps


@dataclass
class Polished:
    """What :func:`polish` did: ``weights``, ``flows`` and ``certificate`` of the answer to keep
    (the polished point when ``applied``, else the ones passed in) and ``info`` (``status``
    ``"applied"``, ``"rejected"`` or ``"skipped"``, ``reason``, ``newton_iterations``,
    ``clusters``, ``fused_edges``, ``gap_before``/``gap_after`` (certified gaps (34)),
    ``objective_before``/``objective_after`` and ``time`` in seconds)."""

    weights: np.ndarray
    flows: np.ndarray
    certificate: Any
    applied: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Structure:
    """The structure of an answer: ``fused`` (``(|E|, d)``) the edge coordinates held at the
    kink, ``labels`` (``(n, d)``) the cluster of every node per coordinate, ``zero``
    (``(n, d)``) the coordinates held at 0 by ``l1``, ``P`` the ``(n d, K)`` expansion ``W = P
    v`` of the ``K`` free cluster coordinates."""

    fused: np.ndarray
    labels: np.ndarray
    zero: np.ndarray
    P: sp.csr_matrix


def polish(model: ModelDeclaration, W: np.ndarray, U: np.ndarray,
           cert: Certificate | Callable[[], Certificate] | None, accuracy: float) -> Polished:
    """Polish the interior-point answer ``W`` (``(n, d)``) with flows ``U`` (``(|E|, d)``) and
    certificate ``cert`` of (16) (module docstring); the result says whether the polished
    point replaces it (``applied``) and why (``info``).

    ``cert`` may also be a function computing the answer's certificate: it is then called
    only where the polished point is not kept at once, i.e. where the polished point's
    certificate misses ``accuracy``, its objective is larger, or the polish fails (then the
    usual comparison decides, and ``Polished.certificate`` is the answer's own where it is
    kept).  A polished point kept without that call is certified to ``accuracy`` with an
    objective (16) not above the answer's (``info["gap_before"]`` is then None).  The
    seconds of that call are not part of ``info["time"]``."""
    t0 = time.perf_counter()
    spent = [0.0]

    def own() -> Certificate:
        if not callable(cert):
            return cast(Certificate, cert)
        t1 = time.perf_counter()
        try:
            return cert()
        finally:
            spent[0] += time.perf_counter() - t1

    reason = unsupported_reason(model) or (
        "the interior-point answer has no certificate" if cert is None else None)
    if reason is not None:
        kept = Polished(W, U, own() if callable(cert) else cert)
        kept.info = {"status": "skipped", "reason": reason}
        return kept
    st = model.structure()
    structure = find_structure(model, st, W, U)
    try:
        W1, iters = newton(model, st, structure, W)
        U1 = polished_flows(model, st, structure, W1, U)
        cert1 = _certificate(model, W1, U1, accuracy)
    except (GTVError, RuntimeError, ValueError, FloatingPointError) as exc:
        kept = Polished(W, U, own())
        kept.info = {"status": "rejected", "reason": f"the polish failed: {exc}",
                     "time": time.perf_counter() - t0 - spent[0]}
        return kept
    obj0, obj1 = model.objective(W), model.objective(W1)
    lower = obj1 <= obj0 + 8.0 * _EPS * abs(obj0)
    info: dict[str, Any] = {"newton_iterations": iters, "clusters": int(structure.P.shape[1]),
                            "fused_edges": int(structure.fused.any(axis=1).sum()),
                            "gap_before": None, "gap_after": float(cert1.gap),
                            "objective_before": obj0, "objective_after": obj1}
    if callable(cert) and lower and cert1.success_at(accuracy):
        kept = Polished(W1, U1, cert1, True, info)
        info.update(status="applied", reason="certified to the accuracy, objective not larger")
    else:
        cert0 = own()
        kept = Polished(W, U, cert0, False, info)
        info["gap_before"] = float(cert0.gap)
        if not cert1.gap <= cert0.gap:
            info.update(status="rejected", reason="its certified gap is larger")
        elif not lower:
            info.update(status="rejected", reason="its objective is larger")
        else:
            kept = Polished(W1, U1, cert1, True, info)
            info.update(status="applied", reason="certified at least as good")
    info["time"] = time.perf_counter() - t0 - spent[0]
    return kept


def _certificate(model: ModelDeclaration, W: np.ndarray, U: np.ndarray,
                 accuracy: float) -> Certificate:
    """The certificate (34) of the polished point: its own flows first, and only where they
    miss ``accuracy`` also the flows recovered from ``W`` (the smaller bound; on a 21-node
    SBM from SCS the polished flows certified 4.7e-3 and the recovered ones 2.5e-12, while
    on the 100 x 100 grid the recovery cost 4.6 s)."""
    cert = certify(model, W, U, tol=accuracy, project="never", recover=False)
    if cert.success_at(accuracy):
        return cert
    return certify(model, W, U, tol=accuracy, project="never")


def unsupported_reason(model: ModelDeclaration) -> str | None:
    """Why :func:`polish` does not apply to ``model`` (None: it does)."""
    st = model.structure()
    if st.symbolic:
        return "symbolic losses"
    if st.constrained.size:
        return "node constraints"
    if model.num_edges and np.min(model.capacities) <= 0:
        return "a zero capacity lambda A_e"
    probe = np.zeros((max(model.num_edges, 1), model.dim))
    if model.penalty.fused_rows(probe, probe, 1.0, 1.0) is None:
        return f"the penalty {model.penalty!r} has no polish"
    for b in st.batches:
        if b.hessians(np.zeros((model.num_nodes, model.dim))) is None:
            return f"{b.cls.__name__} has no Hessian"
    return None


def find_structure(model: ModelDeclaration, st: ModelStructure, W: np.ndarray,
                   U: np.ndarray) -> _Structure:
    """The fused edge coordinates of the answer, its clusters per coordinate and its ``l1``
    zeros, as the expansion ``W = P v``."""
    n, d = W.shape
    scale = max(1.0, float(np.abs(W).max(initial=0.0)))
    Z = st.incidence @ W
    fused = (np.asarray(model.penalty.fused_rows(Z, U, model.capacities, scale), dtype=bool)
             if model.num_edges else np.zeros((0, d), dtype=bool))
    labels = np.empty((n, d), dtype=np.int64)
    K = 0
    for j, (count, lab) in enumerate(fused_components(st.edges, fused, n)):
        labels[:, j] = lab + K  # cluster numbers distinct across coordinates
        K += int(count)
    means = cluster_sums(labels, W, K) / np.maximum(cluster_sums(labels, np.ones_like(W), K),
                                                     1.0)
    eta = cluster_sums(labels, np.repeat(st.l1[:, None], d, axis=1), K)
    zero_c = (eta > 0) & (np.abs(means) <= ZERO_TOL * scale)
    zero = zero_c[labels]
    free_c = np.flatnonzero(~zero_c)
    col = np.full(K, -1)
    col[free_c] = np.arange(free_c.size)
    rows = np.flatnonzero(~zero.ravel())
    P = sp.csr_matrix((np.ones(rows.size), (rows, col[labels.ravel()[rows]])),
                      shape=(n * d, free_c.size))
    return _Structure(fused, labels, zero, P)


def gradient(model: ModelDeclaration, st: ModelStructure, W: np.ndarray) -> np.ndarray:
    """The gradient of (16) at ``W`` where it is smooth, ``(n, d)``: losses and ``l2``
    (:func:`~gtvmodel.terms.losses.smooth_gradients`), ``eta_i sign(w_i)``, and the GTV term
    ``D^T (lambda A_e grad phi(z_e))_e`` (0 on zero rows)."""
    G = smooth_gradients(st.batches, st.l2, W) + st.l1[:, None] * np.sign(W)
    if model.num_edges:
        Z = st.incidence @ W
        G += st.incidence.T @ (model.capacities[:, None] * model.penalty.rows_gradient(Z))
    return G


def hessian(model: ModelDeclaration, st: ModelStructure, W: np.ndarray,
            P: sp.csr_matrix, BP: sp.csr_matrix | None = None) -> sp.csr_matrix:
    """``P^T hess P`` of (16) at ``W`` on the free cluster coordinates (module docstring);
    ``BP`` is ``(D (x) I) P`` (:func:`edge_expansion`, computed here if not given)."""
    n, d = W.shape
    Hn = np.zeros((n, d, d))
    for b in st.batches:
        Hn[b.nodes] += cast(np.ndarray, b.hessians(W))  # every batch has them (the polish applies)
    Hn[:, np.arange(d), np.arange(d)] += 2.0 * st.l2[:, None]
    H = P.T @ _block_diag(Hn) @ P
    if model.num_edges:
        He = model.capacities[:, None, None] * model.penalty.rows_hessian(st.incidence @ W)
        if He.any():  # 0 for piecewise-linear penalties (Norm1)
            BP = edge_expansion(st, P, d) if BP is None else BP
            H = H + BP.T @ _block_diag(He) @ BP
    return sp.csc_matrix(H)


def edge_expansion(st: ModelStructure, P: sp.csr_matrix, d: int) -> sp.csr_matrix:
    """``(D (x) I_d) P``: the edge differences of the cluster coordinates (the same at every
    Newton step, so :func:`newton` builds it once).  ``D (x) I_d`` is built from the edges
    directly: ``sp.kron`` took 10 ms of a 130 ms polish at 300 nodes (cProfile, load 9)."""
    m = st.edges.shape[0]
    rows = np.repeat(np.arange(m * d), 2)
    j = np.tile(np.arange(d), m)
    cols = np.stack([st.edges[:, 0].repeat(d) * d + j, st.edges[:, 1].repeat(d) * d + j],
                    axis=1).ravel()
    Dk = sp.csr_matrix((np.tile([1.0, -1.0], m * d), (rows, cols)),
                       shape=(m * d, st.incidence.shape[1] * d))
    return Dk @ P


def _block_diag(B: np.ndarray) -> sp.bsr_matrix:
    """The block-diagonal sparse matrix of a ``(k, d, d)`` stack."""
    k, d = B.shape[0], B.shape[1]
    return sp.bsr_matrix((B, np.arange(k), np.arange(k + 1)), shape=(k * d, k * d))


def newton(model: ModelDeclaration, st: ModelStructure, structure: _Structure,
           W: np.ndarray) -> tuple[np.ndarray, int]:
    """Newton's method with Armijo backtracking on (16) over ``W = P v`` from the cluster means
    of ``W``; returns the weights and the number of steps.  A tiny multiple of the Hessian's
    largest diagonal entry (``1e-14``) is added where a cluster is flat (zero losses joined
    only through piecewise-linear edges), so every step is defined.  Raises
    :class:`RuntimeError` (the polish is rejected) when the line search needs a step shorter
    than :data:`MIN_STEP`."""
    P = structure.P
    n, d = W.shape
    counts = np.asarray(P.sum(axis=0)).ravel()
    v = (P.T @ W.ravel()) / np.maximum(counts, 1.0)
    f = model.objective((P @ v).reshape(n, d))
    iters, direct = 0, P.shape[1] <= DIRECT_SIZE
    BP = None  # built at the first Hessian that needs it
    while iters < MAX_NEWTON:
        iters += 1
        Wv = (P @ v).reshape(n, d)
        g = P.T @ gradient(model, st, Wv).ravel()
        if not np.abs(g).max(initial=0.0) > 0:
            break
        H = hessian(model, st, Wv, P, BP)
        shift = 1e-14 * max(1.0, float(np.abs(H.diagonal()).max(initial=0.0)))
        s, direct = newton_step(H + shift * sp.identity(H.shape[0], format="csc"), g, direct)
        slope = float(g @ s)
        t = 1.0
        while t > 1e-12:
            f_t = model.objective((P @ (v + t * s)).reshape(n, d))
            if f_t <= f + 1e-4 * t * slope + 4.0 * _EPS * abs(f):
                break
            t *= 0.5
        else:
            break
        if t < MIN_STEP:
            raise RuntimeError(f"Newton's line search took a step of {t:.3g} < {MIN_STEP} "
                               f"(step {iters}): the restricted problem is not smooth near "
                               "the start (an edge at the kink of phi read as not fused)")
        v, f = v + t * s, f_t
        if np.abs(t * s).max() <= 1e-15 * (1.0 + np.abs(v).max()) or -slope <= _EPS * abs(f):
            break
    return (P @ v).reshape(n, d), iters


def newton_step(H: sp.csc_matrix, g: np.ndarray, direct: bool) -> tuple[np.ndarray, bool]:
    """``-H^{-1} g`` for a positive definite ``H``, and whether the next step should go direct:
    conjugate gradients with the Jacobi preconditioner (relative residual ``1e-12``), or a
    sparse LU (symmetric ordering) when ``direct`` or CG does not converge in
    :data:`CG_ITERATIONS` iterations."""
    if not direct:
        diag = H.diagonal()
        pre = spl.LinearOperator(H.shape, matvec=lambda x: x / diag, dtype=float)
        s, fail = spl.cg(H, -g, M=pre, rtol=1e-12, atol=0.0, maxiter=CG_ITERATIONS)
        if fail == 0:
            return s, False
    lu = spl.splu(H, permc_spec="MMD_AT_PLUS_A", options={"SymmetricMode": True})
    return lu.solve(-g), True


def polished_flows(model: ModelDeclaration, st: ModelStructure, structure: _Structure,
                   W: np.ndarray, U0: np.ndarray) -> np.ndarray:
    """Flows meeting the node optimality conditions (23) at the polished ``W``: ``u_e =
    lambda A_e grad phi(z_e)`` off the fused coordinates, and on them the flows ``U0`` plus
    the capacity-weighted minimum-norm correction of the node balance (module docstring,
    step 3)."""
    n, d = W.shape
    if not model.num_edges:
        return np.zeros((0, d))
    cap = model.capacities
    U = cap[:, None] * model.penalty.rows_gradient(st.incidence @ W)
    # an edge inside a cluster (both ends in it, not read as fused) carries a free flow too
    inside = structure.labels[st.edges[:, 0]] == structure.labels[st.edges[:, 1]]
    structure = replace(structure, fused=structure.fused | inside)
    U[structure.fused] = U0[structure.fused]
    G = smooth_gradients(st.batches, st.l2, W) + st.l1[:, None] * np.sign(W)
    patterns: dict[bytes, list[int]] = {}  # coordinates with the same fused edges: one solve
    for j in range(d):
        patterns.setdefault(np.packbits(structure.fused[:, j]).tobytes(), []).append(j)
    _balance(model, st, structure, G, U, patterns)
    return _within_capacities(model, st, structure, G, U, patterns)


#: The most rounds of :func:`_within_capacities`.
CAPACITY_ROUNDS = 20

#: The relative excess ``max_e ||u_e||_* / (lambda A_e) - 1`` of the fused flows at which
#: :func:`_within_capacities` stops: what is left is scaled into the balls by the
#: certificate's repair (a sound bound either way; the polished point is kept only on its
#: certificate).  Measured on the 2-block SBMs of ``benchmarks/bench_exact_routes.py``
#: (1,000 and 2,000 nodes, ``Norm2`` and ``Norm1``, seeds 0-4, polishing Algorithm 1's
#: iterate, load 4): the rounds shrink the excess by 0.2-0.6x each (2,000-node ``Norm2``:
#: 3.2e-6, 7.3e-7, ..., 1.4e-11 after 20 rounds of about 20 ms); stopping at 1e-10, 1e-9,
#: 1e-8 or 1e-6 left every certified relative gap equal to two digits (5.2e-13..1.4e-12) and
#: took the polish from 0.1-0.5 s to 0.03-0.24 s.
CAPACITY_EXCESS = 1e-6


def _balance(model: ModelDeclaration, st: ModelStructure, structure: _Structure,
             G: np.ndarray, U: np.ndarray, patterns: dict[bytes, list[int]]) -> None:
    """``U`` on the fused coordinates corrected in place by the capacity-weighted
    minimum-norm flow of the node residual ``-(G + D^T U)`` (``G`` the smooth gradients and
    ``l1`` signs at the polished point; module docstring, step 3)."""
    cap = model.capacities
    R = -(G + st.incidence.T @ U)
    R -= _l1_share(st, structure, R)
    for js in patterns.values():
        F = np.flatnonzero(structure.fused[:, js[0]])
        if F.size:
            U[np.ix_(F, np.asarray(js))] += balance_flows(st.incidence[F], cap[F],
                                               structure.labels[:, js[0]], R[:, js])


def _within_capacities(model: ModelDeclaration, st: ModelStructure, structure: _Structure,
                       G: np.ndarray, U: np.ndarray, patterns: dict[bytes, list[int]]
                       ) -> np.ndarray:
    """Balanced flows ``U`` brought within the capacities ``||u_e||_* <= lambda A_e`` by
    alternating projections: the fused coordinates projected onto the balls
    (:meth:`Penalty.project_dual_ball`), then balanced again (:func:`_balance`), for at most
    :data:`CAPACITY_ROUNDS` rounds, until the excess is at most :data:`CAPACITY_EXCESS` or
    until a round removes less than 0.1 % of it;
    returns the balanced flows of least excess.  On the 5,000-node SBM (``Norm2``) of
    ``benchmarks/bench_exact_routes.py``, from SCS's 1e-5 answer, the balanced flows
    exceeded their capacities by 3.6e-8 (relative) and one round brought them within
    (certified 5.5e-13 with its own flows)."""
    cap = model.capacities
    rows = structure.fused.any(axis=1)
    project = getattr(model.penalty, "project_dual_ball", None)
    if project is None:  # no capacities (SquaredNorm2)
        return U

    def excess(V: np.ndarray) -> float:
        return float(np.max(model.penalty.dual_norm(V[rows]) / cap[rows] - 1.0, initial=0.0))

    best, best_excess = U, excess(U)
    V = U
    for _ in range(CAPACITY_ROUNDS):
        if best_excess <= CAPACITY_EXCESS:
            break
        V = V.copy()
        V[structure.fused] = project(V, cap)[structure.fused]
        _balance(model, st, structure, G, V, patterns)
        e = excess(V)
        if not e < (1.0 - 1e-3) * best_excess:  # stalled: no flows within reach
            break
        best, best_excess = V, e
    return best


def _l1_share(st: ModelStructure, structure: _Structure, R: np.ndarray) -> np.ndarray:
    """``eta_i s_ij`` on the ``l1`` zeros: the cluster's residual shared in proportion to
    ``eta_i`` (so that what is left sums to 0 on every cluster); 0 elsewhere."""
    K = int(structure.labels.max(initial=-1)) + 1
    eta = np.repeat(st.l1[:, None], R.shape[1], axis=1) * structure.zero
    total = cluster_sums(structure.labels, R * structure.zero, K)
    share = cluster_sums(structure.labels, eta, K)
    frac = np.divide(total, share, out=np.zeros(K), where=share > 0)
    return eta * frac[structure.labels]
