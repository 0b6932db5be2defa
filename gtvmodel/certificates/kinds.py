"""What the certificate needs to know of every node, computed once per model: the node kinds
(which conjugate path each node takes), the capacities ``lambda A_e``, and the minimum-norm solver
of the stacked linear flow conditions.  See :mod:`gtvmodel.certificates.certificate`."""


from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import numpy as np

from ..declaration import ModelDeclaration
from ..terms.losses import ConjugateGroup, Loss
from .subspace import MinNormSolver, subspace_solver

__all__ = ["EPS", "NULL_SV_RTOL", "STIFF_RTOL", "NodeKinds", "node_kinds", "AffineConditions",
           "affine_conditions", "capacities", "max_rows"]


EPS = np.finfo(float).eps

#: A direction ``v_j`` of a node's samples ``X_i`` with singular value ``sigma_j <=
#: NULL_SV_RTOL max_j sigma_j`` is numerically null: a subspace condition ``dom h_i* in
#: range(X_i^T)`` of the repair (the demand is projected out of it).  Decided from the singular
#: values of ``X_i`` themselves (:meth:`~gtvmodel.terms.losses.DataFitBatch.sample_svd`, a QR
#: and an SVD: accurate to about ``eps sigma_max``), not from the eigenvalues of a formed Gram
#: matrix (accurate only to ``eps e_max``, i.e. ``sqrt(eps) sigma_max`` in singular values):
#: exactly rank-deficient ``X_i`` (``m_i < d``, collinear rows; d up to 100, rows scaled
#: 1e-3..1e3) give ``sigma_j / sigma_max`` about 1e-15 or less, while a merely ill-conditioned
#: node (Gram ratio ``e_j / e_max`` down to 1e-20) is resolved and is *not* null: dropping its
#: direction would cost ``(2 v^T q_i)^2 / (4 e_j)`` of the gap at the optimum itself
#: (``q_i = X_i^T y_i / m_i``; issue 16).
NULL_SV_RTOL = 1e-11

#: A smooth data-fit node (no regularizer or constraint) is *ill-conditioned* when ``Q_i =
#: X_i^T X_i / m_i`` has a direction with ``NULL_SV_RTOL^2 e_max < e_j <= STIFF_RTOL e_max``:
#: a flow error ``delta`` of its demand along ``v_j`` costs ``(delta^T v_j)^2 / (4 e_j)`` of the
#: gap (the node's Fenchel-Young gap of a squared loss is ``(s - g)^T Q^+ (s - g) / 4``, ``g =
#: grad L_i(w_i)``).  All its non-null directions are then *stiff*: the repair's affine variant
#: matches the demand to the candidate's gradient along them, ``V_i^T s_i = V_i^T g_i``
#: (:func:`affine_conditions`; the node's gap then vanishes up to rounding), moving the
#: mismatch to better-conditioned nodes (the weaker directions alone are not enough: with
#: singular values 1 ... 10^-5.5, a direction with ``e_j = 3e-6`` left free still cost 25x the
#: true suboptimality of an Algorithm 1 iterate).
#: :func:`~gtvmodel.certificates.certificate.certify` keeps the better of the two variants
#: (both are exact evaluations of dual-feasible flows, hence valid bounds).
STIFF_RTOL = 1e-6

@dataclass
class AffineConditions:
    """The repair's affine variant (:data:`STIFF_RTOL`): the subspace conditions and, at the
    stiff nodes, ``v_j^T s_i = v_j^T g_i`` along their stiff directions, stacked as ``A u =
    b(G)`` with ``A`` of :func:`subspace_solver` (rows node by node: the null directions, then
    the stiff ones) and its minimum-norm ``solver``.  ``s = -D^T u``, ``G`` the gradients
    ``grad h_i(w_i)`` of the candidate (``(n, d)``)."""

    nodes: np.ndarray
    solver: MinNormSolver
    rows: np.ndarray  # (k_s, c): rows of b of the stiff nodes (padded)
    #: (k_s, d, c): b[rows] = -basis^T g_i; the stiff directions (zero-padded) when the
    #: solver keeps the bases, the projections S_i S_i^T when it states all conditions in
    #: the standard basis
    basis: np.ndarray
    mask: np.ndarray  # (k_s, c)
    stiff: np.ndarray  # (k_s,) positions of the stiff nodes

    def target(self, G: np.ndarray) -> np.ndarray:
        """``b``: 0 on the null rows, ``-v_j^T g_i`` on the stiff ones (``A u`` is
        ``N_i^T (D^T u)_i = -N_i^T s_i``; in the standard basis ``-S_i S_i^T g_i``)."""
        b = np.zeros(self.solver.A.shape[0])
        vals = -np.einsum("kdc,kd->kc", self.basis, G[self.stiff])
        b[self.rows[self.mask]] = vals[self.mask]
        return b


def affine_conditions(model: ModelDeclaration) -> AffineConditions | None:
    """The stacked null and stiff conditions of :func:`node_kinds` (None without stiff
    nodes), cached with their solver (cache slot ``"cert_affine"``)."""
    kinds = node_kinds(model)
    if kinds.stiff.size == 0:
        return None
    return model.cache.get_or_build("cert_affine", lambda: _build_affine(model, kinds))


def _build_affine(model: ModelDeclaration, kinds: NodeKinds) -> AffineConditions:
    d = model.dim
    null = dict(zip(kinds.subspace.tolist(), [] if kinds.subspace_bases is None
                    else kinds.subspace_bases, strict=True))
    stiff = dict(zip(kinds.stiff.tolist(), kinds.stiff_bases, strict=True))
    nodes = np.union1d(kinds.subspace, kinds.stiff).astype(np.int64)
    empty = np.zeros((d, 0))
    bases = [np.hstack([null.get(i, empty), stiff.get(i, empty)]) for i in nodes.tolist()]
    start = np.concatenate([[0], np.cumsum([B.shape[1] for B in bases])[:-1]]).astype(np.int64)
    first = dict(zip(nodes.tolist(), (start + [null.get(i, empty).shape[1]
                                                for i in nodes.tolist()]).tolist(),
                     strict=True))
    basis, _, mask = kinds.stiff_padded()
    if all(B.shape[1] == d for B in bases):
        # every condition spans R^d: the solver states them in the standard basis (the rows
        # (D^T u)_i, :func:`subspace_solver`), so b_i = -S_i S_i^T g_i there (zero along the
        # null directions, the gradient along the stiff ones S_i)
        bases = [np.eye(d)] * nodes.size
        rows = np.searchsorted(nodes, kinds.stiff)[:, None] * d + np.arange(d)
        basis = np.einsum("kdc,kec->kde", basis, basis)
        mask = np.ones((kinds.stiff.size, d), dtype=bool)
    else:
        rows = np.array([first[i] for i in kinds.stiff.tolist()], dtype=np.int64)[:, None] \
            + np.arange(mask.shape[1])
    return AffineConditions(nodes, subspace_solver(model, nodes, bases), rows, basis, mask,
                            kinds.stiff)


# ===================================================================== node classification

# ===================================================================== node classification
@dataclass
class NodeKinds:
    """How each node's conjugate is evaluated."""

    zero: np.ndarray  # zero loss, no constraints (closed form with regularizers)
    #: the batches' numpy conjugate paths (:meth:`~gtvmodel.terms.losses.LossBatch.
    #: conjugate_group`): closed forms (exact) and batched Newton (falls back to ``general``)
    groups: list[ConjugateGroup]
    general: np.ndarray  # library nodes solved by the cached CVXPY problem
    conic: np.ndarray
    subspace: np.ndarray  # positions with a subspace domain (repair step 2)
    #: null-space bases N_i (None: all N_i = I); an ``(s, d, r)`` array (a view of the batch's
    #: factors) where every node is from one batch with the same ``r``
    subspace_bases: list[np.ndarray] | np.ndarray | None
    gradient: np.ndarray  # boolean mask of nodes with a gradient of h_i
    #: positions with stiff directions (:data:`STIFF_RTOL`) and their orthonormal bases
    stiff: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    stiff_bases: list[np.ndarray] = field(default_factory=list)
    #: their Gram eigenvalues ``e_j`` (of ``Q_i = X_i^T X_i / m_i``), one array per node
    stiff_values: list[np.ndarray] = field(default_factory=list)
    #: ``min(0, inf L_i)`` per node from the losses' facts (``Loss.lower_bound``; ``-inf`` at
    #: conic nodes, bounded by conic duality instead): every library loss is ``>= 0`` (0), a
    #: loss class that declares a negative bound keeps it (:func:`loss_lower_bounds`)
    loss_lower: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def stiff_padded(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(basis (k_s, d, c), values (k_s, c), mask (k_s, c))``: the stiff directions and
        their eigenvalues zero-padded to a common width ``c`` (values ``inf`` there)."""
        ks, c = self.stiff.size, max((B.shape[1] for B in self.stiff_bases), default=0)
        d = self.stiff_bases[0].shape[0] if ks else 0
        basis, values = np.zeros((ks, d, c)), np.full((ks, c), np.inf)
        mask = np.arange(c) < np.array([B.shape[1] for B in self.stiff_bases],
                                       dtype=np.int64)[:, None]
        basis.transpose(0, 2, 1)[mask] = np.vstack([B.T for B in self.stiff_bases]) if ks \
            else np.zeros((0, d))
        values[mask] = np.concatenate(self.stiff_values) if ks else np.zeros(0)
        return basis, values, mask

    def stiff_excess(self, S: np.ndarray, G: np.ndarray) -> float:
        """``sum_i sum_j (v_j^T (s_i - g_i))^2 / (4 e_j)`` over the stiff nodes and
        directions: what the mismatch of the demands ``S`` and the gradients ``G``
        (``(n, d)``) along them costs in their node Fenchel-Young gaps (exactly, for squared
        losses)."""
        if self.stiff.size == 0:
            return 0.0
        basis, values, _ = self.stiff_padded()
        proj = np.einsum("kdc,kd->kc", basis, S[self.stiff] - G[self.stiff])
        return float((proj ** 2 / (4.0 * values)).sum())


@dataclass
class _Directions:
    """The subspace (null) and stiff conditions collected batch by batch (positions, bases)."""

    null: list[int] = field(default_factory=list)
    null_bases: list[np.ndarray] = field(default_factory=list)
    stiff: list[int] = field(default_factory=list)
    stiff_bases: list[np.ndarray] = field(default_factory=list)
    stiff_values: list[np.ndarray] = field(default_factory=list)
    #: ``(nodes, V[:, :, :r])`` of each batch whose every node has the same ``r`` leading null
    #: directions (``m_i = m < d``): the bases as one strided view of the batch's factors
    stacks: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    def add(self, nodes: np.ndarray, e: np.ndarray, V: np.ndarray, mask: np.ndarray,
            smooth: bool) -> None:
        """Classify the directions of ``V diag(e) V^T`` (``e`` ascending, squared singular
        values of ``X_i``) of ``nodes[mask]``: numerically null (``e_j <= NULL_SV_RTOL^2
        max_j e_j``, subspace conditions of ``dom h_i*``) and, at smooth ill-conditioned nodes
        (some ``e_j <= STIFF_RTOL max_j e_j`` not null), stiff (every non-null direction).
        Only the (few) nodes with such directions are visited.  Where they are many (at least
        half the batch: ``m_i < d``), the bases are views of ``V``'s columns (``e`` ascending:
        the null directions lead, the stiff ones close), not copies: ``V`` is the batch's
        cached factors (:meth:`~gtvmodel.terms.losses.DataFitBatch.sample_svd`)."""
        emax = np.maximum(e.max(axis=1), 1e-300)[:, None]
        null = (e <= NULL_SV_RTOL ** 2 * emax) & mask[:, None]
        ill = ((e <= STIFF_RTOL * emax) & ~null).any(axis=1) & mask & smooth
        stiff = ~null & ill[:, None]
        self.null_bases.extend(_columns(V, null))
        r = int(null[0].sum()) if null.shape[0] else 0
        if r and (null == (np.arange(null.shape[1]) < r)).all():
            self.stacks.append((nodes, V[:, :, :r]))
        self.null.extend(nodes[null.any(axis=1)].tolist())
        self.stiff_bases.extend(_columns(V, stiff))
        self.stiff.extend(nodes[stiff.any(axis=1)].tolist())
        self.stiff_values.extend(e[j][stiff[j]] for j in np.flatnonzero(stiff.any(axis=1)))


def _columns(V: np.ndarray, keep: np.ndarray) -> list[np.ndarray]:
    """``V[j][:, keep[j]]`` for the rows ``j`` of ``keep`` (``(k, d)``) with any column kept:
    views of ``V`` where ``keep[j]`` is one run of consecutive columns and the rows are at least
    half of ``V``'s (a view of a few rows would hold all of ``V``), copies otherwise."""
    rows = np.flatnonzero(keep.any(axis=1))
    if rows.size == 0:
        return []
    sub = keep[rows]
    first = sub.argmax(axis=1)
    width = sub.sum(axis=1)
    cols = np.arange(keep.shape[1])
    run = ((cols >= first[:, None]) & (cols < (first + width)[:, None]) == sub).all(axis=1)
    if 2 * rows.size < V.shape[0] or not run.all():
        return [V[j][:, keep[j]] for j in rows.tolist()]
    return [V[j, :, a:a + w] for j, a, w in zip(rows.tolist(), first.tolist(), width.tolist(),
                                               strict=True)]


def _sorted(nodes: list[int], *lists: list[np.ndarray]) -> tuple[Any, ...]:
    """``nodes`` sorted (an array) and the ``lists`` in the same order."""
    order = np.argsort(nodes) if nodes else np.zeros(0, dtype=np.int64)
    return (np.array(nodes, dtype=np.int64)[order],
            *([items[j] for j in order] for items in lists))


def node_kinds(model: ModelDeclaration) -> NodeKinds:
    """Classify every node by how its conjugate ``h_i*`` of the dual value (19)/(34) is
    evaluated (:class:`NodeKinds`: zero loss, the loss batches' numpy groups, the cached CVXPY
    problem, conic), with the subspace conditions ``(D^T u)_i in range(X_i^T)`` of the repair;
    computed once per model version (cache slot ``"cert_kinds"``)."""
    cached = model.cache.get("cert_kinds")
    if cached is not None:
        return cached

    st = model.structure()
    n, d = model.num_nodes, model.dim
    conic = st.conic
    constrained = np.zeros(n, dtype=bool)
    constrained[st.constrained] = True
    constrained[conic] = False
    free = ~constrained
    free[conic] = False
    handled = np.zeros(n, dtype=bool)
    handled[conic] = True
    gradient = np.zeros(n, dtype=bool)
    groups: list[ConjugateGroup] = []
    dirs = _Directions()
    in_batch = np.zeros(n, dtype=bool)
    for b in st.batches:
        in_batch[b.nodes] = True
        grp = b.conjugate_group(free[b.nodes])
        if grp is not None:
            groups.append(grp)
            if grp.exact:
                handled[grp.nodes] = True
        if b.cls.base_smooth:
            gradient[b.nodes] = True
        # free, unregularized nodes whose samples are rank deficient: dom h_i* lies in
        # range(X_i^T) (m_i < d, collinear rows), a subspace condition; ill-conditioned
        # directions of smooth ones are stiff
        factors = b.null_space_factors()
        if factors is not None:
            ok = free[b.nodes] & (st.l1[b.nodes] == 0) & (st.l2[b.nodes] == 0)
            dirs.add(b.nodes, *factors, ok, bool(b.cls.base_smooth))
    zero = np.flatnonzero(free & ~in_batch)
    handled[zero] = True
    gradient[zero] = True
    gradient &= free & (st.l1 == 0)
    # zero-loss nodes without regularizers need (D^T u)_i = 0: subspace {0}, basis N_i = I
    # (one read-only identity shared by all of them: 10^7 data-less nodes, not 10^7 copies)
    bare = zero[(st.l1[zero] == 0) & (st.l2[zero] == 0)]
    eye = np.eye(d)
    eye.flags.writeable = False
    dirs.null.extend(bare.tolist())
    dirs.null_bases.extend([eye] * bare.size)
    sub, sub_bases = _sorted(dirs.null, dirs.null_bases)
    if len(dirs.stacks) == 1 and np.array_equal(dirs.stacks[0][0], sub):
        sub_bases = dirs.stacks[0][1]  # (s, d, r): one view, not 10^5 small arrays
    stiff, stiff_bases, stiff_values = _sorted(dirs.stiff, dirs.stiff_bases, dirs.stiff_values)
    general = np.flatnonzero(~handled)
    kinds = NodeKinds(zero, groups, general, conic, sub, sub_bases, gradient, stiff,
                      stiff_bases, stiff_values, loss_lower_bounds(model))
    model.cache.put("cert_kinds", kinds)
    return kinds


def loss_lower_bounds(model: ModelDeclaration) -> np.ndarray:
    """``min(0, l_i)`` per node, ``l_i <= inf L_i`` the loss's declared lower bound
    (:attr:`~gtvmodel.terms.losses.facts.LossFacts.lower_bound`); ``-inf`` at conic nodes.
    The dual value's zero-demand shortcut (``h_i*(0) <= 0``) and the radii's lower bounds
    (:mod:`~gtvmodel.certificates.radii`) hold only where it is 0.  Read once per batch where
    the loss class does not change its facts per instance, else once per loss."""
    st = model.structure()
    low = np.zeros(model.num_nodes)
    for b in st.batches:
        if b.cls.facts is Loss.facts:  # the class's record for every instance
            low[b.nodes] = b.cls.class_facts.lower_bound
        else:
            low[b.nodes] = np.fromiter((loss.lower_bound for loss in b.losses), float,
                                       len(b.losses))
    low[st.conic] = -np.inf
    return np.minimum(np.where(np.isnan(low), -np.inf, low), 0.0)


# ===================================================================== flows
def capacities(model: ModelDeclaration) -> np.ndarray | None:
    """The capacities ``lambda A_e`` of (27) for a norm penalty, else None."""
    return model.capacities if model.penalty.is_norm else None


def max_rows(model: ModelDeclaration) -> int:
    """The largest number of samples of a node (for the rounding bound of the sums)."""
    return max((b.max_rows() for b in model.structure().batches), default=0)


class NormPenalty(Protocol):
    """A norm penalty as the repairs use it (where :func:`capacities` is not None): its dual
    norm ``||u_e||_*`` and the projection onto the dual balls ``||u_e||_* <= r_e`` of (27)."""

    def dual_norm(self, U: Any) -> Any:
        """Row-wise dual norms ``||u_e||_*``."""

    def project_dual_ball(self, U: Any, radii: Any) -> Any:
        """Row-wise projections onto ``||u_e||_* <= r_e``."""


def norm_penalty(model: ModelDeclaration) -> NormPenalty:
    """``model.penalty`` as a :class:`NormPenalty` (the caller has the capacities of (27),
    :func:`capacities`, so the penalty is a norm)."""
    return cast(NormPenalty, model.penalty)
