"""When GTV minimization recovers clusters: Theorem 2 of paper 001 (Section V, Appendix A).

Given a partition ``P = {C_1, ..., C_k}`` of the nodes, this module computes the constants of
Theorem 2 from the model's own loss objects and penalty, decides Definition 1 (well-connected
clusters, (35), with the factor 2 its proof needs, MATH.md §5) by max-flow / min-cut, finds the
smallest ``lambda`` above which it holds, builds the cluster graph (45)-(46), computes the
consensus threshold ``lambda_crit`` and certifies recovery on a given instance exactly.

Constants (``||.||`` the penalty norm ``phi = ||.||_p``, ``||.||_*`` its dual norm ``||.||_q``):

* ``f_C(v) = sum_{i in C} L_i(v)``, ``w_bar_C = argmin f_C`` (9): closed form when every member
  loss is quadratic (squared, quadratic, zero, with ``l2``), otherwise one CVXPY solve of the
  cluster graph at ``lambda = 0``.
* ``alpha_C = lambda_min(sum_{i in C} H_lo_i)`` and ``beta_i = lambda_max(H_hi_i)`` from the
  losses' global Loewner bounds ``H_lo <= hess L_i(w) <= H_hi``
  (:meth:`~gtvmodel.losses.Loss.hessian_bounds`): Euclidean strong convexity of ``f_C`` (13)
  and Lipschitz constant of ``grad L_i`` (12).  Logistic and Huber losses have ``H_lo = 0``
  (they flatten out), so a cluster of them has a global modulus only through an ``l2=`` term;
  the Hessian at ``w_bar_C`` is *not* a global modulus and is not used.  A cluster with
  ``alpha_C = 0`` raises :class:`~gtvmodel.errors.UnsupportedError`.
* ``delta_i = ||grad L_i(w_bar_C)||_*`` (11), ``|dC| = sum_{i in C, j notin C} A_ij``.
* For ``p != 2`` the proof's two norm changes cost ``kappa_p = max ||x||_p/||x||_2 =
  d^max(0, 1/p - 1/2)`` and ``mu_q = d^max(0, 1/q - 1/2)``; their product is
  ``rho = d^|1/p - 1/2|`` (1 for ``Norm2``, ``sqrt(d)`` for ``Norm1`` and ``NormInf``).

Budgets (Definition 1 corrected; ``c = 2``, or ``c = 1`` with ``constant="printed"``)::

    b_i = sum_{j notin C} A_ij + c rho beta_i |dC| / alpha_C + delta_i / lambda

``C`` is well-connected if some ``i0 in C`` has ``b(A) < cut(A, C \\ A)`` for every nonempty
``A subset C \\ {i0}``.  Deviation bound (37): ``||w_hat_i - w_bar_C||_2 <= 2 kappa_p |dC|
lambda / alpha_C``.  See ``docs/theory.md`` for the derivations and the erratum discussion.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cvxpy as cp
import networkx as nx
import numpy as np
import scipy.sparse as sp
from networkx.algorithms import flow as nxflow
from scipy.sparse.csgraph import connected_components

from ._solver import run_solver
from .declaration import ModelDeclaration
from .errors import ParameterError, PartitionError, SolverError, UnsupportedError
from .terms.constraints import SymbolicConstraint
from .terms.losses import Loss, LossBatch, SquaredLoss, ZeroLoss

__all__ = [
    "ClusterReport",
    "RecoveryReport",
    "check_well_connected",
    "consensus_threshold",
    "cluster_graph",
    "verify_recovery",
]

#: networkx max-flow algorithms accepted by ``flow_func`` (all run on a residual network that
#: is built once per cluster and re-used with updated capacities).
FLOW_FUNCS: dict[str, Callable[..., Any]] = {
    "boykov_kolmogorov": nxflow.boykov_kolmogorov,
    "preflow_push": nxflow.preflow_push,
    "edmonds_karp": nxflow.edmonds_karp,
    "dinitz": nxflow.dinitz,
    "shortest_augmenting_path": nxflow.shortest_augmenting_path,
}

_CONSTANTS = {"corrected": 2.0, "printed": 1.0}

#: Default max-flow algorithm (see :func:`check_well_connected`).
DEFAULT_FLOW_FUNC = "preflow_push"


# =====================================================================  reports
@dataclass
class ClusterReport:
    """Definition 1 / Theorem 2 for one cluster ``C`` (see :func:`check_well_connected`).

    Attributes
    ----------
    cluster : hashable
        The cluster's label (its index for a list partition).
    nodes : list
        The member node labels, in model order.
    holds : bool
        The strict condition (35) (with the budgets below) holds for some ``i0``.
    witness : node label or None
        An ``i0`` for which it holds (None when it fails).
    margin : float
        ``theta* = min_A cut(A, C \\ A) / b(A)`` over nonempty ``A subset C \\ {i0}`` with
        ``b(A) > 0``: for the witness when the condition holds, else the largest ``theta*``
        over all ``i0`` (exact).  Strict iff ``theta* > 1``; ``inf`` when no ``A`` has budget.
    nonstrict : bool
        ``theta* >= 1``: the max-flow from the budgets into ``i0`` saturates every source arc.
    violating_set : list or None
        When the condition fails: a set ``A`` (node labels) with ``b(A) >= cut(A, C \\ A)``
        from a minimum cut for the ``i0`` with the largest margin.
    budgets : dict
        ``node -> b_i`` at ``lam``.
    alpha : float
        ``alpha_C``, Euclidean strong-convexity modulus of ``f_C``.
    beta, delta : dict
        ``node -> beta_i`` (Euclidean Lipschitz constant of ``grad L_i``) and
        ``node -> delta_i = ||grad L_i(w_bar_C)||_*``.
    boundary : float
        ``|dC|``, the weighted boundary.
    bound : float
        (37): ``2 kappa_p |dC| lam / alpha_C`` bounds ``||w_hat_i - w_bar_C||_2``.
    sharp_bound : float
        ``kappa_p |dC| lam / alpha_C``, the bound that strong monotonicity gives (half of (37)).
    lam : float
        The ``lambda`` of the budgets.
    lam_min : float
        ``lambda_min(C)``: the condition holds exactly for ``lam > lam_min`` (``inf``: never).
    wbar : ndarray (d,)
        ``w_bar_C = argmin f_C``.
    constant : str
        ``"corrected"`` (factor 2) or ``"printed"`` (factor 1).
    norm_factor : float
        ``rho = d^|1/p - 1/2|`` of the penalty norm.
    """

    cluster: Hashable
    nodes: list[Hashable]
    holds: bool
    witness: Hashable | None
    margin: float
    nonstrict: bool
    violating_set: list[Hashable] | None
    budgets: dict[Hashable, float]
    alpha: float
    beta: dict[Hashable, float]
    delta: dict[Hashable, float]
    boundary: float
    bound: float
    sharp_bound: float
    lam: float
    lam_min: float
    wbar: np.ndarray = field(repr=False)
    constant: str = "corrected"
    norm_factor: float = 1.0

    def summary(self) -> str:
        """One line: verdict, witness or violating set, margin, lam vs lam_min, bound (37)."""
        if self.holds:
            verdict = f"well-connected (witness {self.witness!r})"
        else:
            viol = self.violating_set or []
            shown = ", ".join(map(repr, viol[:5])) + (", ..." if len(viol) > 5 else "")
            verdict = f"NOT well-connected (violating set {{{shown}}})"
        return (f"cluster {self.cluster!r} ({len(self.nodes)} nodes): {verdict}; "
                f"theta* = {self.margin:.4g}; lam = {self.lam:.4g}, lam_min = "
                f"{self.lam_min:.4g}; |dC| = {self.boundary:.4g}, alpha_C = {self.alpha:.4g}, "
                f"bound (37) = {self.bound:.4g} [{self.constant}]")


@dataclass
class RecoveryReport:
    """What actually happened at ``lam`` (see :func:`verify_recovery`).

    Attributes
    ----------
    lam : float
    weights : ndarray (n, d)
        The exact GTV solution ``w_hat`` (:func:`gtvmodel.exact.solve_exact`).
    lifted : ndarray (n, d)
        The cluster-graph solution ``w_tilde`` (46) lifted to the nodes (54).
    cluster_weights : ndarray (k, d)
        ``w_tilde_c`` in partition order.
    wbar : ndarray (k, d)
        ``w_bar_C`` in partition order.
    clustered : bool
        ``w_hat`` is constant on every cluster: ``spread <= tol * scale``.
    spread : dict
        ``cluster -> max_{i in C} ||w_hat_i - mean_C w_hat||_2``.
    deviation : dict
        ``cluster -> max_{i in C} ||w_hat_i - w_bar_C||_2``.
    bound : dict
        ``cluster -> (37)``, ``2 kappa_p |dC| lam / alpha_C``.
    within_bound : bool
        ``deviation <= bound + tol * scale`` for every cluster.
    congestion : float
        ``min_u max_e ||u_e||_* / (lam A_e)`` subject to ``-(D^T u)_i = grad L_i(lifted_i)``.
    certified : bool
        ``congestion <= 1 + tol``: the lifted solution is optimal for (16) (exact criterion).
    lifted_gap : float
        ``max_i ||w_hat_i - lifted_i||_2``.
    well_connected : list of ClusterReport or None
        :func:`check_well_connected` at ``lam`` (None if a cluster is disconnected, where the
        condition cannot hold).
    tol : float
        The relative tolerance used; ``scale = max(1, max |w_hat|)``.
    """

    lam: float
    weights: np.ndarray = field(repr=False)
    lifted: np.ndarray = field(repr=False)
    cluster_weights: np.ndarray = field(repr=False)
    wbar: np.ndarray = field(repr=False)
    clustered: bool
    spread: dict[Hashable, float]
    deviation: dict[Hashable, float]
    bound: dict[Hashable, float]
    within_bound: bool
    congestion: float
    certified: bool
    lifted_gap: float
    well_connected: list[ClusterReport] | None = field(repr=False)
    tol: float = 1e-6


# =====================================================================  partitions
@dataclass
class _Partition:
    labels: list[Hashable]  # cluster labels, partition order
    members: list[np.ndarray]  # node positions of each cluster (model order)
    cid: np.ndarray  # (n,) cluster index of every node


def _normalize_partition(model: ModelDeclaration, partition: Any) -> _Partition:
    """Validate a partition (list of collections of labels, or dict node -> cluster label)."""
    n = model.num_nodes
    cid = np.full(n, -1, dtype=np.int64)
    labels: list[Hashable] = []
    if isinstance(partition, Mapping):
        index: dict[Hashable, int] = {}
        for node, lab in partition.items():
            i = model.index(node)  # UnknownNodeError names the node
            try:
                c = index.setdefault(lab, len(index))
            except TypeError:
                raise PartitionError(
                    f"node {node!r}: cluster label {lab!r} is not hashable") from None
            if c == len(labels):
                labels.append(lab)
            cid[i] = c
    elif isinstance(partition, (str, bytes)) or not isinstance(partition, Iterable):
        raise PartitionError(
            "partition must be a list of collections of node labels or a dict node -> cluster "
            f"label, got {type(partition).__name__}")
    else:
        for c, cluster in enumerate(partition):
            if isinstance(cluster, (str, bytes)) or not isinstance(cluster, Iterable):
                raise PartitionError(
                    f"cluster {c} must be a collection of node labels, got "
                    f"{type(cluster).__name__} {cluster!r}")
            members = list(cluster)
            if not members:
                raise PartitionError(f"cluster {c} is empty")
            labels.append(c)
            for node in members:
                i = model.index(node)
                if cid[i] >= 0:
                    where = (f"twice in cluster {c}" if cid[i] == c
                             else f"in clusters {int(cid[i])} and {c}")
                    raise PartitionError(
                        f"node {node!r} appears {where}: a partition lists every node once")
                cid[i] = c
    if not labels:
        raise PartitionError("the partition has no clusters")
    missing = np.flatnonzero(cid < 0)
    if missing.size:
        names = ", ".join(repr(model.nodes[i]) for i in missing[:5])
        more = f" and {missing.size - 5} more" if missing.size > 5 else ""
        raise PartitionError(
            f"the partition misses {missing.size} node(s): {names}{more}")
    order = np.argsort(cid, kind="stable")
    counts = np.bincount(cid, minlength=len(labels))
    members = np.split(order, np.cumsum(counts)[:-1])
    return _Partition(labels, members, cid)


def _intra_edges(model: ModelDeclaration, part: _Partition) -> np.ndarray:
    """Boolean mask of the edges inside a cluster."""
    h, t = model.edges[:, 0], model.edges[:, 1]
    return part.cid[h] == part.cid[t]


def _require_connected(model: ModelDeclaration, part: _Partition) -> None:
    """Raise :class:`PartitionError` if a cluster's induced subgraph is disconnected."""
    n = model.num_nodes
    intra = _intra_edges(model, part)
    h, t = model.edges[intra, 0], model.edges[intra, 1]
    adj = sp.coo_matrix((np.ones(h.size), (h, t)), shape=(n, n))
    ncomp, comp = connected_components(adj, directed=False)
    if ncomp == len(part.labels):
        return
    for c, mem in enumerate(part.members):
        comps = np.unique(comp[mem])
        if comps.size > 1:
            a = [model.nodes[i] for i in mem[comp[mem] == comps[0]]][:4]
            b = [model.nodes[i] for i in mem[comp[mem] == comps[1]]][:4]
            raise PartitionError(
                f"cluster {part.labels[c]!r}: its induced subgraph is disconnected "
                f"({comps.size} components, e.g. nodes {a} and {b}); a component A that "
                "misses i0 has cut(A, C \\ A) = 0, so the well-connected condition (35) cannot "
                "hold for any lambda")


# =====================================================================  constants
@dataclass
class _Constants:
    part: _Partition
    alpha: np.ndarray  # (k,)
    beta: np.ndarray  # (n,)
    delta: np.ndarray  # (n,)
    wbar: np.ndarray  # (k, d)
    outside: np.ndarray  # (n,) sum_{j notin C} A_ij
    boundary: np.ndarray  # (k,)
    kappa: float  # max ||x||_p / ||x||_2
    rho: float  # kappa_p * mu_q


def _check_scope(model: ModelDeclaration) -> None:
    """Raise :class:`UnsupportedError` for losses, constraints or penalties Theorem 2 misses."""
    pen = model.penalty
    if not pen.is_norm:
        raise UnsupportedError(
            f"penalty {pen!r} is not a norm: Theorem 2 and the flow capacities "
            "||u_e||_* <= lambda A_e need a norm penalty (Norm2, Norm1, NormInf, NormP)")
    for i, node in enumerate(model.nodes):
        loss = model.loss_at(i)
        if loss.batch_class is None:  # an expression in the node's variable
            raise UnsupportedError(
                f"node {node!r}: a symbolic loss has no gradient or curvature bounds; Theorem 2 "
                "needs a smooth library loss (squared, logistic, Huber, quadratic, zero)")
        if not loss.smooth:
            raise UnsupportedError(
                f"node {node!r}: {loss!r} is not differentiable (non-smooth loss or an l1 "
                "term); Theorem 2 needs losses with Lipschitz gradients")
        if model.constraints_at(i):
            raise UnsupportedError(
                f"node {node!r} has constraints; Theorem 2 covers unconstrained smooth losses")


def _norm_factors(model: ModelDeclaration) -> tuple[float, float]:
    """``kappa_p = max ||x||_p / ||x||_2`` and ``rho = kappa_p * max ||y||_q / ||y||_2``."""
    p = float(model.penalty.p)
    inv_p = 0.0 if math.isinf(p) else 1.0 / p
    d = model.dim
    return d ** max(0.0, inv_p - 0.5), d ** abs(inv_p - 0.5)


def _constants(model: ModelDeclaration, part: _Partition, solver: str | None = None) -> _Constants:
    """alpha_C, beta_i, w_bar_C, delta_i, |dC| of Theorem 2 (vectorized over nodes)."""
    _check_scope(model)
    n, d, k = model.num_nodes, model.dim, len(part.labels)
    # Hessian bounds of the batches (their cached Gram matrices) plus 2 kappa_i I; zero-loss
    # nodes (in no batch) keep 2 kappa_i I
    st = model.structure()
    H_lo = np.broadcast_to(2.0 * st.l2[:, None, None] * np.eye(d), (n, d, d)).copy()
    H_hi = H_lo.copy()
    for b in st.batches:
        lo, hi = b.hessian_bounds()
        H_lo[b.nodes] += lo
        H_hi[b.nodes] += hi
    S_lo = np.zeros((k, d, d))
    S_hi = np.zeros((k, d, d))
    np.add.at(S_lo, part.cid, H_lo)
    np.add.at(S_hi, part.cid, H_hi)
    alpha = np.linalg.eigvalsh(S_lo)[:, 0]
    top = np.linalg.eigvalsh(S_hi)[:, -1]
    for c in range(k):
        if not alpha[c] > 1e-12 * max(1.0, top[c]):
            raise UnsupportedError(
                f"cluster {part.labels[c]!r}: f_C = sum of its losses has no global strong "
                f"convexity modulus (alpha_C = lambda_min(sum H_lo) = {alpha[c]:.3g}); Theorem 2 "
                "needs alpha_C > 0.  Squared losses need sum X^T X / m of full rank; logistic "
                "and Huber losses flatten out and need an l2= term")
    beta = np.maximum(np.linalg.eigvalsh(H_hi)[:, -1], 0.0)
    # w_bar_C: closed form where f_C is quadratic (H_lo == H_hi at every member)
    quad_node = np.all(H_lo == H_hi, axis=(1, 2))
    quad = np.bincount(part.cid, ~quad_node, minlength=k) == 0
    wbar = np.zeros((k, d))
    if quad.any():
        g0 = np.zeros((k, d))
        np.add.at(g0, part.cid, model.loss_gradients(np.zeros((n, d))))
        wbar[quad] = np.linalg.solve(S_lo[quad], -g0[quad][..., None])[..., 0]
    if not quad.all():
        cg = _cluster_graph(model, part)
        cg.lam = 0.0
        wbar[~quad] = cg.solve_exact(solver=solver).weights[~quad]
    grads = model.loss_gradients(wbar[part.cid])
    delta = model.penalty.dual_norm(grads)
    h, t = model.edges[:, 0], model.edges[:, 1]
    inter = part.cid[h] != part.cid[t]
    A = model.edge_weights[inter]
    outside = (np.bincount(h[inter], A, minlength=n) + np.bincount(t[inter], A, minlength=n))
    boundary = np.bincount(part.cid, outside, minlength=k)
    kappa, rho = _norm_factors(model)
    return _Constants(part, alpha, beta, delta, wbar, outside, boundary, kappa, rho)


def _check_lam(lam: Any) -> float:
    try:
        v = float(lam)
    except (TypeError, ValueError):
        raise ParameterError(f"lam must be a real number > 0, got {lam!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise ParameterError(f"lam must be finite and > 0 (the budgets contain delta_i / lam), "
                             f"got {lam!r}")
    return v


def _flow_func(name: str) -> Callable[..., Any]:
    try:
        return FLOW_FUNCS[name]
    except (KeyError, TypeError):
        raise ParameterError(
            f"flow_func must be one of {sorted(FLOW_FUNCS)}, got {name!r}") from None


# =====================================================================  max-flow / min-cut
class _CutNetwork:
    """A residual network on ``k`` nodes plus a source ``s = k`` (and a sink ``t = k + 1``),
    built once and re-solved with new capacities (networkx flow functions reset the flows).

    Undirected edges become two arcs of capacity ``A``; source arcs ``s -> i`` and sink arcs
    ``i -> t`` get their capacities from :meth:`set_source` / :meth:`set_sink`.
    """

    def __init__(self, k: int, heads: np.ndarray, tails: np.ndarray, weights: np.ndarray,
                 flow_func: Callable[..., Any], sink_arcs: bool = False):
        self.k, self.s, self.t = k, k, k + 1
        self.flow_func = flow_func
        self.heads, self.tails, self.weights = heads, tails, weights
        R = nx.DiGraph()
        R.add_nodes_from(range(k + 2))
        hl, tl, wl = heads.tolist(), tails.tolist(), weights.tolist()
        R.add_edges_from((a, b, {"capacity": w}) for a, b, w in zip(hl, tl, wl, strict=True))
        R.add_edges_from((b, a, {"capacity": w}) for a, b, w in zip(hl, tl, wl, strict=True))
        R.add_edges_from((self.s, i, {"capacity": 0.0}) for i in range(k))
        R.add_edges_from((i, self.s, {"capacity": 0.0}) for i in range(k))
        if sink_arcs:
            R.add_edges_from((i, self.t, {"capacity": 0.0}) for i in range(k))
            R.add_edges_from((self.t, i, {"capacity": 0.0}) for i in range(k))
        self.R = R
        self._src = [R.adj[self.s][i] for i in range(k)]
        self._snk = [R.adj[i][self.t] for i in range(k)] if sink_arcs else []
        self._fwd = [R.adj[a][b] for a, b in zip(hl, tl, strict=True)]
        self._bwd = [R.adj[b][a] for a, b in zip(hl, tl, strict=True)]
        self._scale = float(weights.max()) if weights.size else 1.0
        #: weighted degree of every node (``cut({i}, V \\ {i})``)
        self.degree = (np.bincount(heads, weights, minlength=k)
                       + np.bincount(tails, weights, minlength=k))

    def set_source(self, caps: np.ndarray) -> None:
        for e, c in zip(self._src, caps.tolist(), strict=True):
            e["capacity"] = c
        self._scale = max(self._scale, float(np.max(caps, initial=0.0)))

    def set_sink(self, caps: np.ndarray) -> None:
        for e, c in zip(self._snk, caps.tolist(), strict=True):
            e["capacity"] = c
        self._scale = max(self._scale, float(np.max(caps, initial=0.0)))

    def set_edges(self, caps: np.ndarray) -> None:
        for e1, e2, c in zip(self._fwd, self._bwd, caps.tolist(), strict=True):
            e1["capacity"] = c
            e2["capacity"] = c
        self._scale = max(self._scale, float(np.max(caps, initial=0.0)))

    def min_cut(self, sink: int) -> np.ndarray:
        """Source side (without ``s``) of a minimum ``s``-``sink`` cut, as a boolean mask."""
        R = self.R
        R.graph["inf"] = 1e300
        self.flow_func(R, self.s, sink, capacity="capacity", residual=R)
        tol = 1e-12 * self._scale
        adj = R.adj
        seen = [False] * (self.k + 2)
        seen[self.s] = True
        stack = [self.s]
        while stack:
            u = stack.pop()
            for v, e in adj[u].items():
                if not seen[v] and e["capacity"] - e["flow"] > tol:
                    seen[v] = True
                    stack.append(v)
        return np.array(seen[: self.k], dtype=bool)

    def cut(self, mask: np.ndarray) -> float:
        """``cut(A, V \\ A)`` of the (undirected) edges, computed exactly from the set."""
        return float(self.weights[mask[self.heads] != mask[self.tails]].sum())


def _min_ratio(net: _CutNetwork, i0: int, c: np.ndarray,
               q: np.ndarray) -> tuple[float, np.ndarray | None]:
    """``min (cut(A) - c(A)) / q(A)`` over nonempty ``A subset C \\ {i0}`` with ``q(A) > 0``.

    Dinkelbach's parametric iteration: for the current ratio ``mu`` a minimum cut with source
    capacities ``c_i + mu q_i`` into the sink ``i0`` minimizes ``cut(A) - c(A) - mu q(A)``; a
    negative minimum gives a set of smaller ratio, zero proves optimality.  Every ``mu`` is the
    exact ratio of an actual set, so ``mu`` only decreases and the loop is finite.  Requires
    ``cut(A) > c(A)`` for all such ``A`` (the caller checks).  Returns ``(inf, None)`` when
    ``q`` vanishes off ``i0``.
    """
    k = net.k
    off = np.ones(k, dtype=bool)
    off[i0] = False
    q = np.where(off, q, 0.0)
    if not (q > 0).any():
        return math.inf, None
    # start from the better of C \ {i0} and the best singleton
    best = off
    mu = (net.cut(off) - c[off].sum()) / q[off].sum()
    deg = net.degree
    pos = np.flatnonzero(q > 0)
    single = (deg[pos] - c[pos]) / q[pos]
    j = int(np.argmin(single))
    if single[j] < mu:
        mu = float(single[j])
        best = np.zeros(k, dtype=bool)
        best[pos[j]] = True
    while True:
        caps = np.where(off, c + mu * q, 0.0)
        net.set_source(caps)
        A = net.min_cut(i0)
        Q = float(q[A].sum())
        if Q <= 0:
            break
        r = (net.cut(A) - float(c[A].sum())) / Q
        if not r < mu:
            break
        mu, best = r, A
    return float(mu), best


# =====================================================================  Definition 1
def check_well_connected(model: ModelDeclaration, partition: Any, lam: float | None = None, *,
                         constant: str = "corrected", flow_func: str = DEFAULT_FLOW_FUNC,
                         solver: str | None = None) -> list[ClusterReport]:
    """Decide Definition 1 (well-connected clusters, (35) corrected) for every cluster.

    Parameters
    ----------
    model : ModelDeclaration
        Smooth library losses (squared, logistic, Huber, quadratic, zero; ``l2`` allowed), no
        node constraints, a norm penalty (:class:`Norm2`, :class:`Norm1`, :class:`NormInf`,
        :class:`NormP`).  Anything else raises :class:`~gtvmodel.errors.UnsupportedError`
        naming the node or penalty.
    partition : list of collections of node labels, or dict node -> cluster label
        Must list every node exactly once (:class:`~gtvmodel.errors.PartitionError`,
        :class:`~gtvmodel.errors.UnknownNodeError`); every cluster must induce a connected
        subgraph, otherwise the condition cannot hold and :class:`PartitionError` says so.
    lam : float, optional
        ``lambda > 0`` of the budgets (default ``model.lam``).
    constant : {"corrected", "printed"}
        ``"corrected"`` uses ``2 rho beta_i |dC| / alpha_C`` as MATH.md §5 (the proof's (53)
        carried into (59)); ``"printed"`` the printed (35) without the 2, which is also
        sufficient because strong monotonicity halves (53) (``docs/theory.md``).
    flow_func : str
        The networkx max-flow algorithm (a key of :data:`FLOW_FUNCS`).  Default
        ``preflow_push`` (push-relabel with global relabelling): here every node sends its
        budget from the source towards the single sink ``i0``, so augmenting-path methods need
        about one path per node while push-relabel moves all the excess at once; on the
        1,000-node benchmark (``benchmarks/bench_theory.py``) it is 4x faster than
        ``boykov_kolmogorov`` and 7x faster than ``edmonds_karp``.  All give the same result.
    solver : str, optional
        CVXPY solver for ``w_bar_C`` when a cluster's loss is not quadratic.

    Returns
    -------
    list of ClusterReport, in partition order.

    Notes
    -----
    For a candidate ``i0`` the network has a source arc ``s -> i`` of capacity ``b_i`` for
    ``i != i0``, both directions of every intra-cluster edge with capacity ``A_ij``, and sink
    ``i0``; its minimum cut is ``min_A b(C \\ {i0}) - b(A) + cut(A)``, so the max-flow equals
    ``sum b_i`` iff the non-strict condition holds.  ``theta*(i0) = min_A cut(A)/b(A)`` is found
    exactly by Dinkelbach's iteration on parametric min-cuts, and ``lam_min`` the same way:
    with ``b_i = c_i + delta_i/lam`` the condition for ``i0`` holds iff ``lam > max_A
    delta(A)/(cut(A) - c(A))`` (``inf`` if some ``A`` has ``cut(A) <= c(A)``).  The ``i0`` are
    tried in order of decreasing budget, each failure restricting the candidates to its
    minimizing set ``A`` (any ``i0' notin A`` is no better), which keeps the search exact and
    usually ends after one or two ``i0``.
    """
    if constant not in _CONSTANTS:
        raise ParameterError(f"constant must be 'corrected' or 'printed', got {constant!r}")
    lam_v = _check_lam(model.lam if lam is None else lam)
    func = _flow_func(flow_func)
    part = _normalize_partition(model, partition)
    _require_connected(model, part)
    return _reports(model, part, _constants(model, part, solver), lam_v, constant, func)


def _reports(model: ModelDeclaration, part: _Partition, k_: _Constants, lam_v: float, constant: str,
             func: Callable[..., Any]) -> list[ClusterReport]:
    """The per-cluster reports of :func:`check_well_connected` from precomputed constants."""
    factor = _CONSTANTS[constant]
    curv = factor * k_.rho * k_.beta * (k_.boundary / k_.alpha)[part.cid]
    c_all = k_.outside + curv
    b_all = c_all + k_.delta / lam_v
    intra = _intra_edges(model, part)
    nodes = model.nodes
    reports = []
    for c, mem in enumerate(part.members):
        loc = np.full(model.num_nodes, -1, dtype=np.int64)
        loc[mem] = np.arange(mem.size)
        ed = intra & (part.cid[model.edges[:, 0]] == c)
        heads, tails = loc[model.edges[ed, 0]], loc[model.edges[ed, 1]]
        weights = model.edge_weights[ed]
        b, cc, dl = b_all[mem], c_all[mem], k_.delta[mem]
        if mem.size == 1:
            margin, i0, viol, lam_min = math.inf, 0, None, 0.0
        else:
            net = _CutNetwork(mem.size, heads, tails, weights, func)
            margin, i0, viol = _best_margin(net, b)
            lam_min = _lam_min(net, cc, dl)
        holds = margin > 1.0
        names = [nodes[i] for i in mem]
        a = float(k_.alpha[c])
        reports.append(ClusterReport(
            cluster=part.labels[c],
            nodes=names,
            holds=holds,
            witness=names[i0] if holds else None,
            margin=float(margin),
            nonstrict=bool(margin >= 1.0),
            violating_set=None if holds or viol is None else [names[j] for j in
                                                               np.flatnonzero(viol)],
            budgets=dict(zip(names, b.tolist(), strict=True)),
            alpha=a,
            beta=dict(zip(names, k_.beta[mem].tolist(), strict=True)),
            delta=dict(zip(names, dl.tolist(), strict=True)),
            boundary=float(k_.boundary[c]),
            bound=2.0 * k_.kappa * float(k_.boundary[c]) * lam_v / a,
            sharp_bound=k_.kappa * float(k_.boundary[c]) * lam_v / a,
            lam=lam_v,
            lam_min=float(lam_min),
            wbar=k_.wbar[c].copy(),
            constant=constant,
            norm_factor=k_.rho,
        ))
    return reports


def _others_extreme(v: np.ndarray, largest: bool) -> np.ndarray:
    """``out[i] = max_{j != i} v_j`` (or min): the two extreme values, vectorized."""
    if v.size < 2:
        return np.full(v.size, -math.inf if largest else math.inf)
    order = np.argsort(-v if largest else v, kind="stable")
    out = np.full(v.size, v[order[0]])
    out[order[0]] = v[order[1]]
    return out


def _best_margin(net: _CutNetwork, b: np.ndarray) -> tuple[float, int, np.ndarray | None]:
    """``(theta*, i0, A)``: the first ``i0`` with ``theta*(i0) > 1``, else the best one.

    Upper bounds ``theta*(i0) <= min(ratio(C \\ {i0}), min_{j != i0} ratio({j}))`` (cheap, no
    max-flow) order the candidates and stop the search once no candidate can beat the best
    ``theta*`` found; a failed ``i0`` restricts the candidates to its minimizing set ``A``
    (every ``i0' notin A`` has ``theta*(i0') <= ratio(A)``).  Both prunings keep it exact.
    """
    zero = np.zeros(net.k)
    deg = net.degree
    rest = b.sum() - b
    with np.errstate(divide="ignore", invalid="ignore"):
        whole = np.where(rest > 0, deg / rest, math.inf)  # ratio(C \ {i0}); cut = deg(i0)
        single = np.where(b > 0, deg / b, math.inf)
    ub = np.minimum(whole, _others_extreme(single, largest=False))
    cand = np.ones(net.k, dtype=bool)
    best, best_i0, best_set = -math.inf, int(np.argmax(ub)), None
    while cand.any():
        idx = np.flatnonzero(cand)
        i0 = int(idx[np.argmax(ub[idx])])
        if ub[i0] <= best:
            break
        theta, A = _min_ratio(net, i0, zero, b)
        if theta > best:
            best, best_i0, best_set = theta, i0, A
        if theta > 1.0 or A is None:
            break
        cand &= A
    return best, best_i0, best_set


def _lam_min(net: _CutNetwork, c: np.ndarray, delta: np.ndarray) -> float:
    """``min_{i0} max_A delta(A) / (cut(A) - c(A))`` (``inf`` if never).

    Lower bounds from ``A = C \\ {i0}`` and the singletons order and stop the search over
    ``i0``; a computed ``i0`` restricts the candidates to its maximizing set ``A`` (every
    ``i0' notin A`` has ``lam_min(i0') >= lam_min(i0)``).
    """
    zero = np.zeros(net.k)
    deg = net.degree

    def g(dl: np.ndarray, gap: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(gap > 0, np.where(dl > 0, dl / gap, 0.0), math.inf)

    whole = g(delta.sum() - delta, deg - (c.sum() - c))
    lb = np.maximum(whole, _others_extreme(g(delta, deg - c), largest=True))
    cand = np.ones(net.k, dtype=bool)
    best = math.inf
    while cand.any():
        idx = np.flatnonzero(cand)
        i0 = int(idx[np.argmin(lb[idx])])
        if lb[i0] >= best:
            break
        theta_c, A = _min_ratio(net, i0, zero, c)
        if theta_c <= 1.0:
            lam_i0 = math.inf  # cut(A) <= c(A): fails for every lambda
        else:
            mu, A = _min_ratio(net, i0, c, delta)
            lam_i0 = 0.0 if math.isinf(mu) else 1.0 / mu
        best = min(best, lam_i0)
        if best == 0.0 or A is None:
            break
        cand &= A
    return best


# =====================================================================  cluster graph
def cluster_graph(model: ModelDeclaration, partition: Any) -> ModelDeclaration:
    """The cluster graph (45)-(46) as a new model of the same class as ``model``.

    One node per cluster (labelled by the cluster label: its index for a list partition),
    carrying ``f_C = sum_{i in C} L_i``; clusters ``c != c'`` joined by one edge of weight
    ``A~_{cc'} = sum_{i in C, j in C'} A_ij`` (45); same penalty, ``lambda`` and dimension.
    Library node constraints are intersected on the cluster node.

    Summed losses: squared and quadratic members are stacked into one
    :class:`~gtvmodel.losses.SquaredLoss` with rows scaled by ``sqrt(M/m_i)`` (quadratic centres
    become ``d`` rows ``sqrt(M) e_j``), which is exactly ``sum_i L_i``; other library losses
    become one CVXPY expression per cluster and loss class, built by
    :class:`~gtvmodel.losses.LossBatch` from the same row formulas.  Symbolic losses and
    constraints cannot be moved to another variable and raise
    :class:`~gtvmodel.errors.UnsupportedError`.
    """
    return _cluster_graph(model, _normalize_partition(model, partition))


def _cluster_graph(model: ModelDeclaration, part: _Partition) -> ModelDeclaration:
    k, d = len(part.labels), model.dim
    G = nx.Graph()
    G.add_nodes_from(part.labels)
    h, t = model.edges[:, 0], model.edges[:, 1]
    ch, ct = part.cid[h], part.cid[t]
    inter = ch != ct
    if inter.any():
        keys = np.minimum(ch, ct)[inter] * k + np.maximum(ch, ct)[inter]
        uniq, inv = np.unique(keys, return_inverse=True)
        wsum = np.bincount(inv.ravel(), model.edge_weights[inter])
        G.add_edges_from((part.labels[u // k], part.labels[u % k], {"weight": float(w)})
                         for u, w in zip(uniq.tolist(), wsum.tolist(), strict=True))
    cg = type(model)(G, d, penalty=model.penalty, lam=model.lam)
    for c, mem in enumerate(part.members):
        label = part.labels[c]
        cg.set_loss(label, _summed_loss(model, mem, label))
        for i in mem:
            for con in model.constraints_at(i):
                if isinstance(con, SymbolicConstraint):
                    raise UnsupportedError(
                        f"node {model.nodes[i]!r}: a symbolic constraint is stated in the "
                        f"node's own variable and cannot be moved to cluster {label!r}")
                cg.add_constraint(label, con)
    return cg


def _summed_loss(model: ModelDeclaration, mem: np.ndarray, label: Hashable) -> Loss | Callable:
    """``f_C = sum_{i in C} L_i`` as a library loss or a callable building one expression."""
    d = model.dim
    losses = [model.loss_at(i) for i in mem]
    for i, ls in zip(mem, losses, strict=True):
        if ls.batch_class is None:  # an expression in the node's variable
            raise UnsupportedError(
                f"node {model.nodes[i]!r}: a symbolic loss is an expression in the node's own "
                f"variable and cannot be moved to cluster {label!r}")
    l1 = float(sum(ls.l1 for ls in losses))
    l2 = float(sum(ls.l2 for ls in losses))
    if all(not ls.has_data for ls in losses):
        return ZeroLoss(l1=l1, l2=l2)
    rows = [ls.squared_rows(d) for ls in losses if ls.has_data]
    if all(r is not None for r in rows):  # sums of squares: one squared loss ||y - X w||^2 / M
        M = sum(X.shape[0] for X, _, _ in rows)
        Xs = [X * math.sqrt(M / m) for X, _, m in rows]
        ys = [y * math.sqrt(M / m) for _, y, m in rows]
        return SquaredLoss(np.vstack(Xs), np.concatenate(ys), l1=l1, l2=l2)
    by_cls: dict[type, list[Loss]] = {}
    for ls in losses:
        by_cls.setdefault(type(ls), []).append(ls)

    def summed(x: cp.Variable) -> cp.Expression:
        xr = cp.reshape(x, (1, d), order="C")
        terms = [e for cls, ls in by_cls.items()
                 if (e := LossBatch(cls, np.zeros(len(ls), dtype=np.int64), ls, 1, d)
                     .expression(x, xr)) is not None]
        if l1:
            terms.append(l1 * cp.norm1(x))
        if l2:
            terms.append(l2 * cp.sum_squares(x))
        return cp.sum(cp.hstack(terms)) if len(terms) > 1 else terms[0]

    return summed


# =====================================================================  flows
def _min_congestion(model: ModelDeclaration, G: np.ndarray, solver: str | None, what: str) -> float:
    """``min_u max_e ||u_e||_* / A_e`` subject to ``D^T u = -G`` (one vectorized CVXPY problem).

    ``G`` must sum to zero on every connected component (else no flow exists: ``inf``); its
    tiny solver residual is projected away first.
    """
    n, d = G.shape
    E = model.num_edges
    adj = sp.coo_matrix((np.ones(E), (model.edges[:, 0], model.edges[:, 1])), shape=(n, n))
    ncomp, comp = connected_components(adj, directed=False)
    sums = np.zeros((ncomp, d))
    np.add.at(sums, comp, G)
    scale = max(1.0, float(np.abs(G).sum()))
    if np.abs(sums).max() > 1e-6 * scale:
        return math.inf
    G = G - (sums / np.bincount(comp, minlength=ncomp)[:, None])[comp]
    if E == 0:
        return 0.0
    if np.abs(G).max() <= 1e-14 * scale:
        return 0.0
    # scale demands and capacities to unit size (u = g_s u', A = a_s A', t = t' g_s / a_s):
    # interior-point accuracy is relative, tiny gradients otherwise end "inaccurate"
    g_s = float(np.abs(G).max())
    a_s = float(model.edge_weights.max())
    U = cp.Variable((E, d), name="u")
    t = cp.Variable(nonneg=True, name="t")
    cons = [model.incidence.T @ U == -G / g_s,
            *model.penalty.dual_ball_constraints(U, t * (model.edge_weights / a_s))]
    prob = cp.Problem(cp.Minimize(t), cons)
    name, _, _ = run_solver(prob, solver, {}, False, False, what)
    if prob.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):  # pragma: no cover
        raise SolverError(f"{what}: {name} reports the flow problem infeasible although the "
                          "demands balance", status=prob.status, solver=name)
    return float(t.value) * g_s / a_s


def _threshold_flow_1d(model: ModelDeclaration, g: np.ndarray, flow_func: Callable[...,
                       Any]) -> float:
    """``max_S |g(S)| / cut(S)`` for ``d = 1`` by Dinkelbach's iteration on max-flows."""
    n = model.num_nodes
    h, t, A = model.edges[:, 0], model.edges[:, 1], model.edge_weights
    adj = sp.coo_matrix((np.ones(h.size), (h, t)), shape=(n, n))
    ncomp, comp = connected_components(adj, directed=False)
    scale = max(1.0, float(np.abs(g).sum()))
    if np.abs(np.bincount(comp, g, minlength=ncomp)).max() > 1e-6 * scale:
        return math.inf
    if n == 1 or np.abs(g).max() <= 1e-14 * scale:
        return 0.0
    deg = np.bincount(h, A, minlength=n) + np.bincount(t, A, minlength=n)
    net = _CutNetwork(n, h, t, A, flow_func, sink_arcs=True)
    net.set_source(np.maximum(g, 0.0))
    net.set_sink(np.maximum(-g, 0.0))
    lam = float(np.max(np.abs(g) / np.where(deg > 0, deg, np.inf)))
    while True:
        net.set_edges(lam * A)
        S = net.min_cut(net.t)
        cut = net.cut(S)
        gS = float(g[S].sum())
        if not (cut > 0 and gS > lam * cut):
            break
        lam = gS / cut
    return lam


def consensus_threshold(model: ModelDeclaration, *, method: str = "auto", solver: str | None = None,
                        flow_func: str = DEFAULT_FLOW_FUNC) -> float:
    """``lambda_crit``: the constant solution ``w_i = w_bar`` is optimal iff ``lam >= lambda_crit``.

    ``w_bar = argmin sum_i L_i`` (pooled).  By the optimality conditions (28), ``w_i = w_bar``
    is optimal at ``lam`` iff a flow exists with ``(D^T u)_i = -grad L_i(w_bar)`` and
    ``||u_e||_* <= lam A_e``, hence (MATH.md §5)

        lambda_crit = min_u max_e ||u_e||_* / A_e   subject to   D^T u = -grad L(w_bar).

    ``method="flow"`` (default for ``d = 1``): ``max_S |sum_{i in S} L_i'(w_bar)| / cut(S)``,
    exact by Dinkelbach's iteration on networkx max-flows; ``method="convex"`` (default for
    ``d > 1``, any norm penalty): the convex program above, one vectorized CVXPY problem with
    the sparse incidence.  ``inf`` when the graph is disconnected and a component's gradients
    do not balance.  Needs the same losses as :func:`check_well_connected` and a strongly
    convex pooled loss (a unique ``w_bar``).
    """
    if method not in ("auto", "flow", "convex"):
        raise ParameterError(f"method must be 'auto', 'flow' or 'convex', got {method!r}")
    if method == "flow" and model.dim != 1:
        raise ParameterError(f"method='flow' needs d = 1 (the model has d = {model.dim}); "
                             "use method='convex'")
    func = _flow_func(flow_func)
    n = model.num_nodes
    part = _Partition([0], [np.arange(n)], np.zeros(n, dtype=np.int64))
    k_ = _constants(model, part, solver)
    G = model.loss_gradients(np.repeat(k_.wbar, n, axis=0))
    if method == "flow" or (method == "auto" and model.dim == 1):
        return _threshold_flow_1d(model, G[:, 0], func)
    return _min_congestion(model, G, solver, "consensus_threshold")


# =====================================================================  verification
def verify_recovery(model: ModelDeclaration, partition: Any, lam: float, *, tol: float = 1e-6,
                    constant: str = "corrected", solver: str | None = None) -> RecoveryReport:
    """Solve (16) exactly at ``lam`` and check Theorem 2's conclusions on this instance.

    Reports whether ``w_hat`` is constant on each cluster (36) (``spread <= tol * scale``,
    ``scale = max(1, max |w_hat|)``), the largest deviation ``||w_hat_i - w_bar_C||_2`` against
    (37), and an exact certificate that the cluster-graph solution ``w_tilde`` (46), lifted by
    (54), is optimal for (16): a flow ``u`` with ``-(D^T u)_i = grad L_i(w_tilde_{C(i)})`` and
    ``||u_e||_* <= lam A_e`` exists.  That is necessary and sufficient: necessary by (28);
    sufficient because ``sum_e u_e^T (D w)_e = -sum_i grad L_i(w_i)^T w_i``, which equals
    ``lam sum_e A_e ||(D w)_e||`` for the lifted cluster-graph optimum, so every edge term of
    ``lam A_e ||(D w)_e|| - u_e^T (D w)_e >= 0`` vanishes and ``u_e in lam A_e d||.||((D w)_e)``.
    Feasibility is decided by the convex program ``min_u max_e ||u_e||_*/(lam A_e)``
    (``congestion``, reported); ``certified = congestion <= 1 + tol`` (the relative accuracy of
    the interior-point solve is far below ``tol``).  Unlike the max-flow test of
    :func:`check_well_connected` (sufficient only), this is exact for the instance.
    ``model.lam`` is set to ``lam`` for the solve and restored afterwards.
    """
    lam_v = _check_lam(lam)
    if not (math.isfinite(float(tol)) and tol > 0):
        raise ParameterError(f"tol must be finite and > 0, got {tol!r}")
    if constant not in _CONSTANTS:
        raise ParameterError(f"constant must be 'corrected' or 'printed', got {constant!r}")
    part = _normalize_partition(model, partition)
    k_ = _constants(model, part, solver)
    try:
        _require_connected(model, part)
    except PartitionError:
        reports = None
    else:
        reports = _reports(model, part, k_, lam_v, constant, FLOW_FUNCS[DEFAULT_FLOW_FUNC])
    old = model.lam
    model.lam = lam_v
    try:
        W = model.solve_exact(solver=solver).weights
    finally:
        model.lam = old
    cg = _cluster_graph(model, part)
    cg.lam = lam_v
    Wc = cg.solve_exact(solver=solver).weights
    lifted = Wc[part.cid]
    congestion = _min_congestion(model, model.loss_gradients(lifted), solver,
                                 "verify_recovery") / lam_v
    scale = max(1.0, float(np.abs(W).max()))
    spread, deviation, bound = {}, {}, {}
    for c, mem in enumerate(part.members):
        label = part.labels[c]
        Wm = W[mem]
        spread[label] = float(np.linalg.norm(Wm - Wm.mean(axis=0), axis=1).max())
        deviation[label] = float(np.linalg.norm(Wm - k_.wbar[c], axis=1).max())
        bound[label] = 2.0 * k_.kappa * float(k_.boundary[c]) * lam_v / float(k_.alpha[c])
    return RecoveryReport(
        lam=lam_v,
        weights=W,
        lifted=lifted,
        cluster_weights=Wc,
        wbar=k_.wbar.copy(),
        clustered=max(spread.values()) <= tol * scale,
        spread=spread,
        deviation=deviation,
        bound=bound,
        within_bound=all(deviation[c] <= bound[c] + tol * scale for c in deviation),
        congestion=float(congestion),
        certified=bool(congestion <= 1.0 + tol),
        lifted_gap=float(np.linalg.norm(W - lifted, axis=1).max()),
        well_connected=reports,
        tol=float(tol),
    )
