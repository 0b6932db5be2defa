"""What the certificate needs to know of every node, computed once per model: the node kinds
(which conjugate path each node takes), the capacities ``lambda A_e``, and the minimum-norm solver
of the stacked linear flow conditions.  See :mod:`gtvmodel.certificates.certificate`."""


from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ..declaration import ModelDeclaration
from ..terms.losses import ConjugateGroup

__all__ = ["EPS", "DENSE_MAX", "NULL_RTOL", "MinNormSolver", "RangeSolver", "subspace_solver",
           "divergence_rows", "NodeKinds", "node_kinds", "capacities", "max_rows"]


EPS = np.finfo(float).eps

#: A Gram eigenvalue ``e_j <= NULL_RTOL max_j e_j`` is numerically null: a subspace condition
#: ``dom h_i* in range(X_i^T)`` of the repair.  Exactly rank-deficient ``X_i`` (``m_i < d``,
#: collinear rows; d up to 100, scales 1e-3..1e3) give ``e_j / max e <= 7.6e-16`` from
#: ``eigh``; a merely ill-conditioned node is *not* null, and forcing ``s_i`` into
#: ``range``: it costs the bound ``(s_i^T v)^2 / (4 e_j)`` whatever the flows (issue 16: one
#: node of the 20,000-node SBM of ``benchmarks/bench_exact_scale.py`` with ``e_j / max e =
#: 8.8e-11`` held the certified relative gap at 1.8e-8 under the former ``1e-10``).
NULL_RTOL = 1e-12

#: Largest ``A A^T`` (rows) of the minimum-norm flow correction solved densely.
DENSE_MAX = 3000

# ===================================================================== linear algebra helpers
class MinNormSolver:
    """Minimum-norm solutions ``delta = A^T z`` of ``A delta = b`` (``b`` in ``range(A)``).

    ``A A^T`` (sparse) may be singular (e.g. a component of zero-loss nodes).  With at most
    :data:`DENSE_MAX` rows its pseudo-inverse is applied through one eigen-decomposition
    (computed once; the solver is cached on the model, so repeated certificates, e.g. every
    ``record_every`` iterations of Algorithm 1, reuse it); larger systems use
    Jacobi-preconditioned conjugate gradients, which converge on consistent singular systems up
    to rounding.  A few refinement rounds follow.  Whatever residual remains is not hidden: the
    dual evaluation charges it (``R ||rho||_1``) or declares the node infeasible.
    """

    def __init__(self, A: sp.csr_matrix, maxiter: int = 3000):
        self.maxiter = maxiter
        self.A = A.tocsr()
        self.AT = self.A.T.tocsr()
        self.K = (self.A @ self.AT).tocsr()
        diag = self.K.diagonal()
        self.M = sp.diags(np.where(diag > 0, 1.0 / np.where(diag > 0, diag, 1.0), 1.0))
        self.eig: tuple[np.ndarray, np.ndarray] | None = None
        if self.K.shape[0] <= DENSE_MAX:
            ev, V = np.linalg.eigh(self.K.toarray())
            keep = ev > 1e-12 * max(float(ev.max(initial=0.0)), 1e-300)
            self.eig = (ev[keep], V[:, keep])

    def _z(self, r: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
        if self.eig is not None:
            ev, V = self.eig
            return V @ ((V.T @ r) / ev)
        z, _info = spla.cg(self.K, r, rtol=rtol, atol=0.0,
                           maxiter=min(10 * self.K.shape[0] + 100, self.maxiter), M=self.M)
        return z

    def solve(self, b: np.ndarray, rounds: int = 3) -> np.ndarray:
        """The minimum-norm ``delta`` with ``A delta = b``: ``delta = A^T z``, ``(A A^T) z = b``
        (pseudo-inverse or conjugate gradients), refined for up to ``rounds`` rounds on the
        residual ``b - A delta``; a residual that remains is left for the caller to charge."""
        delta = np.zeros(self.A.shape[1])
        r = b.copy()
        nb = max(float(np.linalg.norm(b)), 1e-300)
        for _ in range(rounds):
            if np.linalg.norm(r) <= 1e-15 * nb:
                break
            delta += self._step(r)
            r = b - self.A @ delta
        return delta

    def _step(self, r: np.ndarray) -> np.ndarray:
        """One minimum-norm correction ``A^T (A A^T)^+ r``."""
        return self.AT @ self._z(r)


class RangeSolver(MinNormSolver):
    """The minimum-norm correction of the subspace conditions ``N_i^T (D^T delta)_i = b_i``
    (repair step 2) through their complement, when the allowed ranges are small (paper 001's
    Table I: ``m_i = 10 < d = 100``, so ``A A^T`` has ``sum_i (d - m_i) = 9,000`` rows but the
    ranges ``range(X_i^T)`` only ``sum_i m_i = 1,000`` dimensions; issue 16).

    The minimizer is ``delta = D P`` with node potentials ``p_i in range(N_i)``; with the
    orthonormal complements ``B_i`` (``B_i = I`` at nodes without a condition, empty where
    ``N_i = I``) and ``t_i = -N_i b_i``, the conditions read ``t + L P = B c`` and
    ``B_i^T p_i = 0`` (``L = D^T D``).  Per connected component, ``P = L^+ (B c - t) + 1
    kappa^T``, and ``(c, kappa)`` solve the symmetric system ``G c + C^T kappa = B^T L^+ t``,
    ``C c = sum_i t_i`` of ``sum_i r_i + d (#components)`` rows, ``G_ij = (L^+)_ij B_i^T B_j``,
    ``C c = sum_i B_i c_i`` per component: one dense eigen-decomposition of that system and the
    dense ``L^+`` (``n`` nodes), computed once and cached with the solver.  ``A`` is applied
    matrix-free (a ``LinearOperator``: ``N_i^T (D^T U)_i``), never formed.  The same ``delta``
    as :class:`MinNormSolver` in exact arithmetic; the refinement rounds of :meth:`solve` and
    the residual charges of the dual value are unchanged."""

    def __init__(self, incidence: sp.spmatrix, nodes: np.ndarray,
                 null_bases: list[np.ndarray], components: np.ndarray):
        self.maxiter = 0
        self.D = sp.csr_matrix(incidence)
        self.DT = self.D.T.tocsr()
        n, d = incidence.shape[1], null_bases[0].shape[0]
        self.nodes = np.asarray(nodes)
        # the bases N_i padded to a common width: (A u)_i = N_i^T (D^T U)_i, matrix-free
        kmax = max(N.shape[1] for N in null_bases)
        self.Npad = np.zeros((len(null_bases), d, kmax))
        self.mask = np.zeros((len(null_bases), kmax), dtype=bool)
        for j, N in enumerate(null_bases):
            self.Npad[j, :, :N.shape[1]] = N
            self.mask[j, :N.shape[1]] = True
        rows = int(self.mask.sum())
        self.A = spla.LinearOperator((rows, self.D.shape[0] * d), matvec=self._apply,
                                     dtype=float)
        self.Lp = np.linalg.pinv((self.DT @ self.D).toarray(), hermitian=True)
        R, owner = _range_rows(n, d, self.nodes, null_bases)
        self.R, self.owner = R, owner
        self.owns = sp.csr_matrix((np.ones(owner.size), (owner, np.arange(owner.size))),
                                  shape=(n, owner.size))
        comp = np.asarray(components)[owner]
        ncomp = int(components.max(initial=-1)) + 1
        C = np.zeros((ncomp * d, R.shape[0]))
        C[(comp[:, None] * d + np.arange(d)).ravel(), np.repeat(np.arange(R.shape[0]), d)] = \
            R.ravel()
        G = (R @ R.T) * self.Lp[np.ix_(owner, owner)]
        K = np.block([[G, C.T], [C, np.zeros((C.shape[0], C.shape[0]))]])
        ev, V = np.linalg.eigh(K)
        keep = np.abs(ev) > 1e-12 * max(float(np.abs(ev).max(initial=0.0)), 1e-300)
        self.eig = (ev[keep], V[:, keep])
        self.C, self.shape, self.components = C, (n, d), np.asarray(components)

    def _apply(self, u: np.ndarray) -> np.ndarray:
        """``A vec(U)``: the stacked ``N_i^T (D^T U)_i`` (never formed as a matrix)."""
        n, d = self.shape
        g = np.asarray(self.DT @ np.asarray(u).reshape(-1, d))[self.nodes]
        return np.einsum("sdk,sd->sk", self.Npad, g)[self.mask]

    def _step(self, r: np.ndarray) -> np.ndarray:
        """``delta = D L^+ (B c - t)`` for the right-hand side ``r`` (stacked ``b_i``)."""
        n, d = self.shape
        t = np.zeros((n, d))
        rp = np.zeros(self.mask.shape)
        rp[self.mask] = r
        t[self.nodes] = -np.einsum("sdk,sk->sd", self.Npad, rp)
        Lt = self.Lp @ t
        sums = np.zeros((self.C.shape[0] // d, d))
        np.add.at(sums, self.components, t)
        rhs = np.concatenate([(self.R * Lt[self.owner]).sum(axis=1), sums.ravel()])
        ev, V = self.eig
        c = (V @ ((V.T @ rhs) / ev))[:self.R.shape[0]]
        Bc = self.owns @ (c[:, None] * self.R)
        return np.asarray(self.D @ (self.Lp @ (Bc - t))).ravel()


def _range_rows(n: int, d: int, nodes: np.ndarray, null_bases: list[np.ndarray]
                ) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``B_i^T`` (orthonormal bases of the allowed ranges, the complements of
    ``range(N_i)``; ``I`` at nodes without a condition) stacked, and their node of each row."""
    rows, owner = [], []
    cond = dict(zip(nodes.tolist(), null_bases, strict=True))
    for i in range(n):
        N = cond.get(i)
        Bt = np.eye(d) if N is None else _complement(N).T
        rows.append(Bt)
        owner.append(np.full(Bt.shape[0], i))
    return np.vstack(rows), np.concatenate(owner)


def _complement(N: np.ndarray) -> np.ndarray:
    """An orthonormal basis of the orthogonal complement of ``range(N)`` (``N`` orthonormal)."""
    d, k = N.shape
    if k == d:
        return np.zeros((d, 0))
    Q, _ = np.linalg.qr(np.hstack([N, np.eye(d)]))
    return Q[:, k:d]


#: Largest number of nodes (dense ``L^+``) and of rows of the complement system for which the
#: subspace conditions use :class:`RangeSolver`.
RANGE_MAX = 2000


def subspace_solver(model: ModelDeclaration, nodes: np.ndarray,
                    bases: list[np.ndarray]) -> MinNormSolver:
    """The solver of repair step 2 for the subspace conditions at ``nodes``: a
    :class:`RangeSolver` where the complement system is smaller than ``A A^T`` and both it and
    the graph fit :data:`RANGE_MAX` (dense; the padded bases at most ``25 RANGE_MAX^2``
    numbers), else :class:`MinNormSolver`."""
    d, n = model.dim, model.num_nodes
    full = all(B.shape[1] == d for B in bases)
    rows = sum(B.shape[1] for B in bases)
    ncomp = model.structure().component_count
    small = d * (n - len(nodes)) + sum(d - B.shape[1] for B in bases) + d * ncomp
    if (rows > DENSE_MAX and n <= RANGE_MAX and small <= min(RANGE_MAX, rows)
            and len(nodes) * d * max(B.shape[1] for B in bases) <= RANGE_MAX ** 2 * 25):
        return RangeSolver(model.incidence, nodes, bases, model.structure().components)
    A = divergence_rows(model, nodes, None if full else bases)
    return MinNormSolver(A)

def divergence_rows(model: ModelDeclaration, nodes: np.ndarray, bases: list[np.ndarray] | None
                     ) -> sp.csr_matrix:
    """Sparse ``A`` with ``A vec(U) = [N_i^T (D^T U)_i]_{i in nodes}`` (``N_i = I`` if
    ``bases`` is None), acting on the C-ordered flat flows."""
    d = model.dim
    Dt = model.incidence.T.tocsr()[nodes]  # (k, E)
    A = sp.kron(Dt, sp.eye(d), format="csr")  # (k d, E d)
    if bases is None:
        return A
    N = sp.block_diag([B.T for B in bases], format="csr")  # (sum r_i, k d)
    return (N @ A).tocsr()


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
    subspace_bases: list[np.ndarray] | None  # null-space bases N_i (None: all N_i = I)
    gradient: np.ndarray  # boolean mask of nodes with a gradient of h_i

def _null_bases(nodes: np.ndarray, e: np.ndarray, V: np.ndarray, mask: np.ndarray,
                subspace: list[int], bases: list[np.ndarray]) -> None:
    """Append the numerically null eigen-directions (``e_j <= NULL_RTOL max_j e_j``) of the Gram
    matrices ``V diag(e) V^T`` of ``nodes[mask]`` as subspace conditions (repair step 2):
    ``dom h_i*`` lies in ``range(X_i^T)``.  Only the (few) rank-deficient nodes are visited."""
    null = (e <= NULL_RTOL * np.maximum(e.max(axis=1), 1e-300)[:, None]) & mask[:, None]
    for j in np.flatnonzero(null.any(axis=1)):
        subspace.append(int(nodes[j]))
        bases.append(V[j][:, null[j]])

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
    subspace: list[int] = []
    bases: list[np.ndarray] = []
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
        # free, unregularized nodes whose Gram matrix is singular: dom h_i* lies in
        # range(X_i^T) (m_i < d, collinear rows), a subspace condition
        factors = b.null_space_factors()
        if factors is not None:
            ok = free[b.nodes] & (st.l1[b.nodes] == 0) & (st.l2[b.nodes] == 0)
            _null_bases(b.nodes, *factors, ok, subspace, bases)
    zero = np.flatnonzero(free & ~in_batch)
    handled[zero] = True
    gradient[zero] = True
    gradient &= free & (st.l1 == 0)
    # zero-loss nodes without regularizers need (D^T u)_i = 0: subspace {0}
    for i in zero:
        if st.l1[i] == 0 and st.l2[i] == 0:
            subspace.append(int(i))
            bases.append(np.eye(d))
    order = np.argsort(subspace) if subspace else np.zeros(0, dtype=np.int64)
    sub = np.array(subspace, dtype=np.int64)[order]
    sub_bases = [bases[j] for j in order]
    general = np.flatnonzero(~handled)
    kinds = NodeKinds(zero, groups, general, conic, sub, sub_bases, gradient)
    model.cache.put("cert_kinds", kinds)
    return kinds


# ===================================================================== flows
def capacities(model: ModelDeclaration) -> np.ndarray | None:
    """The capacities ``lambda A_e`` of (27) for a norm penalty, else None."""
    return model.capacities if model.penalty.is_norm else None


def max_rows(model: ModelDeclaration) -> int:
    """The largest number of samples of a node (for the rounding bound of the sums)."""
    return max((b.max_rows() for b in model.structure().batches), default=0)
