"""ADMM for the network Lasso (Hallac, Leskovec and Boyd, "Network Lasso: Clustering and
Optimization in Large Graphs", KDD 2015; the method SnapVX runs), vectorized over nodes and
edges, on the model's own problem (16) (target ``"gtv"``).

Every edge ``e = (e+, e-)`` holds two copies ``z_e^+ ~ w_{e+}``, ``z_e^- ~ w_{e-}`` and scaled
duals ``u_e^+``, ``u_e^-``; with ``rho > 0`` one round is

    w_i   <- argmin_{w in C_i} L_i(w) + (rho/2) sum_{e at i} ||w - z_e^i + u_e^i||^2
           = prox_{tau_i (L_i + iota_{C_i})}(mean_{e at i} (z_e^i - u_e^i)),  tau_i = 1/(rho deg_i)
    (z_e^+, z_e^-) <- argmin lambda A_e phi(z^+ - z^-) + (rho/2)(||a_e - z^+||^2 + ||b_e - z^-||^2)
           with a_e = w_{e+} + u_e^+, b_e = w_{e-} + u_e^-: the mean m_e = (a_e + b_e)/2 is kept and
           the difference is prox-ed, z^+ - z^- = prox_{(2 lambda A_e / rho) phi}(a_e - b_e),
           z^+ = m_e + (z^+ - z^-)/2, z^- = m_e - (z^+ - z^-)/2
    u_e^+ <- u_e^+ + w_{e+} - z_e^+,   u_e^- <- u_e^- + w_{e-} - z_e^-.

For ``phi = ||.||_2`` the edge step is Hallac et al.'s closed form: the difference shrinks by
``2 lambda A_e / rho``, i.e. ``z^+ = theta a + (1 - theta) b`` with ``theta = max(1 - lambda A_e
/ (rho ||a - b||), 1/2)``.  Since the step only needs the penalty's proximal map
(:meth:`~gtvmodel.terms.penalties.Penalty.prox_rows`), every library penalty with one works the
same way (``Norm1``: the coordinate-wise soft threshold; ``NormInf``, ``SquaredNorm2``,
``QuadForm``; a penalty without one raises :class:`~gtvmodel.errors.UnsupportedError`).  The
node step is the package's vectorized node update (PU (32) of Algorithm 1,
:class:`~gtvmodel.primal_dual.prox.NodeUpdates`).

**Flows.**  With unscaled duals ``y = rho u`` the Lagrangian's stationarity gives, at every
round after the edge and dual steps, ``y_e^+ = -y_e^-`` and ``y_e^+ in lambda A_e dphi(z_e^+ -
z_e^-)`` exactly, and at the optimum ``0 in dh_i(w_i) + sum_{e+ = i} y_e^+ + sum_{e- = i} y_e^-
= dh_i(w_i) + (D^T y^+)_i``.  In our convention (docs/conventions.md: ``-(D^T u)_i in dh_i(w_i)``,
``u_e in lambda A_e dphi(w_{e+} - w_{e-})``, ``(D w)_e = w_{e+} - w_{e-}``) the GTV flow is
therefore ``u_e = rho u_e^+ = rho (u_e^+ - u_e^-)/2`` (the symmetric form is used); each
certificate is computed with these flows (repaired to dual feasibility by
:func:`gtvmodel.certify`), and they are the result's ``flows``, so that ``gm.certify(model,
res.weights, res.flows)`` is ADMM's own certificate.  Measured (``tests/test_routes.py``): near
convergence the weights alone certify a gap orders of magnitude above the one with the flows
(an outside audit: 0.46 against 1.26e-4).

**Stopping** (Boyd et al., "Distributed Optimization and Statistical Learning via ADMM", §3.3):
with ``B`` the sparse map from node weights to the ``2|E|`` edge copies, primal residual ``r =
B w - z``, dual residual ``s = rho B^T (z^k - z^{k-1})``; stop when ``||r|| <= sqrt(2|E| d)
abs_tol + rel_tol max(||B w||, ||z||)`` and ``||s|| <= sqrt(n d) abs_tol + rel_tol ||rho B^T
u||``.  Communication: every round the two ends of each edge exchange ``w_i + u_e^i`` (``d``
values each way), ``2 |E| d`` values per round.

**Penalty parameter** (Boyd et al. §3.4.1, residual balancing).  ADMM converges for every
``rho > 0`` but its speed depends on ``rho`` relative to the scale of ``lambda A_e`` and of the
losses: on paper 001 Table I's setting (``lambda = 1e-2``) a fixed ``rho = 1`` left the
certified gap at 30 after 500 rounds.  With ``balance_rounds > 0`` (default 1000) ``rho`` starts
at the given value and, during the first ``balance_rounds`` rounds, is multiplied by
``BALANCE_FACTOR`` when ``||r|| > BALANCE_RATIO ||s||`` and divided by it when ``||s|| >
BALANCE_RATIO ||r||``; the scaled duals are rescaled by the inverse factor, so the unscaled
duals ``y = rho u`` (and the flows) are unchanged by a change of ``rho``.  After
``balance_rounds`` rounds ``rho`` is fixed, so the usual convergence proof for a fixed ``rho``
applies to the rest of the run.  ``info["rho"]`` is the final value and ``info["rho_changes"]``
the number of changes; ``balance_rounds=0`` keeps ``rho`` fixed.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validate import check_bool, check_int, check_scalar
from ..primal_dual.prox import NodeUpdates
from ._common import as_model
from ._rounds import RoundRecorder, check_rounds, result
from .result import BaselineResult
from .target import TargetCertifier

__all__ = ["admm", "BALANCE_RATIO", "BALANCE_FACTOR"]

#: Residual balancing (Boyd et al. §3.4.1, their ``mu``): ``rho`` changes when one residual
#: exceeds this multiple of the other.
BALANCE_RATIO = 10.0
#: Residual balancing (Boyd et al. §3.4.1, their ``tau^incr = tau^decr``): the factor applied
#: to ``rho``.
BALANCE_FACTOR = 2.0


def _ends(model: Any) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Sparse ``(|E|, n)`` selectors of the heads ``e+`` and tails ``e-``."""
    E, n = model.num_edges, model.num_nodes
    h, t = model.edges[:, 0], model.edges[:, 1]
    one, rows = np.ones(E), np.arange(E)
    return (sp.csr_matrix((one, (rows, h)), shape=(E, n)),
            sp.csr_matrix((one, (rows, t)), shape=(E, n)))


def _edge_step(penalty: Any, a: np.ndarray, b: np.ndarray, t: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """``(z^+, z^-)`` of the edge step: mean kept, difference ``prox_{t phi}(a - b)``."""
    mean = 0.5 * (a + b)
    half = 0.5 * penalty.prox_rows(a - b, t)
    return mean + half, mean - half


def admm(data: Any, *, rho: float = 1.0, rounds: int = 1000, abs_tol: float = 1e-6,
         rel_tol: float = 1e-5, balance_rounds: int = 1000, record_every: int = 1,
         certify_every: int = 0,
         lam: float | None = None, penalty: Any = None, certify: bool = True,
         **certify_kwargs: Any
         ) -> BaselineResult:
    """Network-Lasso ADMM (module docstring) on the model's problem (16), from zero, for at
    most ``rounds`` rounds; ``status="converged"`` when the residual test of Boyd et al. §3.3
    holds (``abs_tol``, ``rel_tol``), else ``"max_rounds"``.  ``rho`` is the initial penalty
    parameter, balanced against the residuals during the first ``balance_rounds`` rounds
    (module docstring; ``0``: fixed).

    ``lam`` and ``penalty`` (default: the model's; a dataset's model is built with them) set
    the problem solved, also in ``info["lam"]``.  Returns the node copies ``w`` as
    ``weights``; ``flows`` the GTV edge flows ``rho (u^+ - u^-)/2`` (``(|E|, d)``, model edge
    order, docs/conventions.md's sign; also ``info["flows"]``, the same array),
    ``info["primal_residual"]`` and ``info["dual_residual"]``.  Certified
    on ``"gtv"`` with those flows: ``certificate`` for the final round, ``history.gap`` every
    ``certify_every`` rounds (0: only the final round); ``certify_kwargs`` go to
    :func:`gtvmodel.certify`.  The history has a row every ``record_every`` rounds (and at
    round 0, every certified round and the last).  ``certify=False``: no certificate at all
    (``certificate`` None; e.g. where the flow projection of the certificate is too large).
    ``values_sent``: ``2 |E| d`` per round.

    Examples
    --------
    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> from gtvmodel.baselines import admm
    >>> model = gm.GTVModel(nx.path_graph(3), dim=1, lam=0.5)
    >>> model.set_loss(0, gm.QuadraticLoss([1.0]))
    >>> model.set_loss(2, gm.QuadraticLoss([-1.0]))
    >>> res = admm(model, rho=1.0, rounds=2000, abs_tol=1e-10, rel_tol=1e-10)
    >>> res.status, np.round(res.weights.ravel(), 6).tolist(), res.gap < 1e-6
    ('converged', [0.75, 0.0, -0.75], True)
    >>> np.round(res.flows.ravel(), 6).tolist()  # at the capacities lambda A_e
    [0.5, 0.5]
    >>> gm.certify(model, res.weights, res.flows).gap == res.gap  # ADMM's own certificate
    True
    """
    model = as_model(data, "admm", lam=lam, penalty=penalty)
    where = "admm"
    sched = check_rounds(where, rounds, record_every=record_every, certify_every=certify_every)
    certify = check_bool(certify, "certify", where=where)
    rho = check_scalar(rho, "rho", min_val=0.0, include_boundaries="neither", where=where)
    balance_rounds = check_int(balance_rounds, "balance_rounds", min_val=0, where=where)
    abs_tol = check_scalar(abs_tol, "abs_tol", min_val=0.0, where=where)
    rel_tol = check_scalar(rel_tol, "rel_tol", min_val=0.0, where=where)
    t0 = time.perf_counter()
    model.penalty.prox_rows(np.zeros((min(model.num_edges, 1), model.dim)),
                            2.0 * model.capacities[:1] / rho)  # (UnsupportedError without a prox)
    ops = _Operators(model)
    setup = time.perf_counter() - t0
    target = TargetCertifier(model, "gtv", **certify_kwargs)
    recorder = RoundRecorder(lambda s: target.objective(s[0]),
                             (lambda s: target(*s)) if certify else None,
                             record_every=sched.record_every,
                             certify_every=sched.certify_every)  # the state: (weights, flows)
    st = _State(model, rho, ops)
    recorder.round(0, 0, (st.W, st.flows))
    status, k = "max_rounds", 0
    for k in range(1, sched.rounds + 1):
        if 1 < k <= balance_rounds + 1:
            st.rebalance(_balance(st.r_norm, st.s_norm), model, ops)
        st.step(model, ops, k)
        recorder.round(k, 2 * model.num_edges * model.dim, (st.W, st.flows))
        if st.converged(ops, abs_tol, rel_tol):
            status = "converged"
            break
    return result(model, "admm", st.W, status, k, recorder.finish(k, (st.W, st.flows)), setup,
                  target="gtv", flows=st.flows, info={
                      "flows": st.flows, "primal_residual": st.r_norm,
                      "dual_residual": st.s_norm, "rho": st.rho, "rho_changes": st.changes,
                      "lam": model.lam, "node_updates": ops.updates.describe()})


class _Operators:
    """What the rounds share: the edge ends ``h``, ``t``, the transposed end selectors
    ``B_h^T``, ``B_t^T`` (CSR), the linked nodes, ``1/deg`` (0 at isolated nodes, as a
    column) and the node updates (:class:`~gtvmodel.primal_dual.prox.NodeUpdates`)."""

    def __init__(self, model: Any) -> None:
        self.h, self.t = model.edges[:, 0], model.edges[:, 1]
        self.BhT, self.BtT = (B.T.tocsr() for B in _ends(model))
        deg = model.degrees.astype(float)
        self.linked = deg > 0
        self.inv_deg = np.where(self.linked, 1.0 / np.where(self.linked, deg, 1.0),
                                0.0)[:, None]
        self.updates = NodeUpdates(model)

    def gather(self, Eh: np.ndarray, Et: np.ndarray) -> np.ndarray:
        """``B_h^T E_h + B_t^T E_t``: the edge rows summed at their end nodes."""
        return self.BhT @ Eh + self.BtT @ Et


class _State:
    """ADMM's iterate (module docstring): node copies ``W``, edge copies ``Z_h``, ``Z_t``,
    scaled duals ``U_h``, ``U_t``, the GTV flows, ``rho`` with its steps, and the residual
    norms of the last round."""

    def __init__(self, model: Any, rho: float, ops: _Operators) -> None:
        n, d, E = model.num_nodes, model.dim, model.num_edges
        self.W = np.zeros((n, d))
        self.Zh, self.Zt, self.Uh, self.Ut = (np.zeros((E, d)) for _ in range(4))
        self.flows = np.zeros((E, d))
        self.r_norm = self.s_norm = math.inf
        self.changes = 0
        self.eps_abs = (math.sqrt(2 * E * d), math.sqrt(n * d))
        self.rho = rho
        self.tau, self.t_edge = _steps(model, rho, ops.linked, ops.inv_deg)

    def rebalance(self, factor: float, model: Any, ops: _Operators) -> None:
        """Scale ``rho`` by ``factor`` (:func:`_balance`), keeping the unscaled duals
        ``rho u`` (and the flows) unchanged."""
        if factor == 1.0:
            return
        self.rho *= factor
        self.Uh /= factor
        self.Ut /= factor
        self.changes += 1
        self.tau, self.t_edge = _steps(model, self.rho, ops.linked, ops.inv_deg)

    def step(self, model: Any, ops: _Operators, k: int) -> None:
        """One round: the node prox, the edge prox, the dual ascent and the residuals."""
        self.W = ops.updates(ops.gather(self.Zh - self.Uh, self.Zt - self.Ut) * ops.inv_deg,
                             self.tau, k, self.W)
        Wh, Wt = self.W[ops.h], self.W[ops.t]
        Zh_new, Zt_new = _edge_step(model.penalty, Wh + self.Uh, Wt + self.Ut, self.t_edge)
        self.s_norm = self.rho * float(np.linalg.norm(ops.gather(Zh_new - self.Zh,
                                                                 Zt_new - self.Zt)))
        self.Zh, self.Zt = Zh_new, Zt_new
        Rh, Rt = Wh - self.Zh, Wt - self.Zt
        self.Uh += Rh
        self.Ut += Rt
        self.flows = 0.5 * self.rho * (self.Uh - self.Ut)
        self.r_norm = math.hypot(float(np.linalg.norm(Rh)), float(np.linalg.norm(Rt)))

    def converged(self, ops: _Operators, abs_tol: float, rel_tol: float) -> bool:
        """The residual test of Boyd et al. §3.3 on the last round."""
        Wh, Wt = self.W[ops.h], self.W[ops.t]
        eps_pri = self.eps_abs[0] * abs_tol + rel_tol * max(
            math.hypot(np.linalg.norm(Wh), np.linalg.norm(Wt)),
            math.hypot(np.linalg.norm(self.Zh), np.linalg.norm(self.Zt)))
        eps_dual = (self.eps_abs[1] * abs_tol
                    + rel_tol * self.rho * float(np.linalg.norm(ops.gather(self.Uh, self.Ut))))
        return self.r_norm <= eps_pri and self.s_norm <= eps_dual


def _balance(r_norm: float, s_norm: float) -> float:
    """The factor applied to ``rho`` by residual balancing (Boyd et al. §3.4.1) after a round
    with primal residual ``r_norm`` and dual residual ``s_norm``: ``BALANCE_FACTOR`` when the
    primal residual dominates, its inverse when the dual one does, else 1."""
    if r_norm > BALANCE_RATIO * s_norm:
        return BALANCE_FACTOR
    if s_norm > BALANCE_RATIO * r_norm:
        return 1.0 / BALANCE_FACTOR
    return 1.0


def _steps(model: Any, rho: float, linked: np.ndarray, inv_deg: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """The node prox steps ``tau_i = 1/(rho deg_i)`` (1 at isolated nodes, where they are
    unused) and the edge prox steps ``2 lambda A_e / rho`` for penalty parameter ``rho``."""
    return np.where(linked, inv_deg[:, 0] / rho, 1.0), 2.0 * model.capacities / rho
