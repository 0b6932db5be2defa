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

__all__ = ["EPS", "DENSE_MAX", "MinNormSolver", "divergence_rows", "NodeKinds", "node_kinds",
           "capacities", "max_rows"]


EPS = np.finfo(float).eps
#: Largest ``A A^T`` (rows) of the minimum-norm flow correction solved densely.

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
            delta += self.AT @ self._z(r)
            r = b - self.A @ delta
        return delta

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
    """Append the numerically null eigen-directions (``e_j <= 1e-10 max_j e_j``) of the Gram
    matrices ``V diag(e) V^T`` of ``nodes[mask]`` as subspace conditions (repair step 2):
    ``dom h_i*`` lies in ``range(X_i^T)``.  Only the (few) rank-deficient nodes are visited."""
    null = (e <= 1e-10 * np.maximum(e.max(axis=1), 1e-300)[:, None]) & mask[:, None]
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
