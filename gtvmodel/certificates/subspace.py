"""The linear conditions of repair step 2 and their minimum-norm solvers.

Step 2 of the repair (:func:`~gtvmodel.certificates.repair.repair`) corrects the flows by the
minimum-norm ``delta`` with ``A delta = A u``, where ``A vec(U) = [N_i^T (D^T U)_i]`` stacks the
subspace conditions of the nodes ``i`` whose conjugate domain lies in a subspace (zero-loss
nodes: ``N_i = I``, ``(D^T u)_i = 0``; squared losses with ``rank X_i < d``: ``N_i`` spans the
null directions of ``X_i``; the affine variant adds the stiff directions).  That ``delta`` is
``A^T z`` with ``(A A^T) z = A u``.  Three solvers (:func:`solver_kind`):

* :class:`MinNormSolver` with the pseudo-inverse of ``A A^T`` (at most :data:`DENSE_MAX` rows);
* :class:`RangeSolver`, through the complement of small allowed ranges (paper 001's Table I);
* :class:`PotentialSolver`, conjugate gradients on ``A A^T`` applied through *node potentials*
  (larger systems): ``A^T z = D Z`` with ``Z_i = N_i z_i`` at the conditioned nodes and ``Z_j =
  0`` elsewhere, so ``A A^T z = [N_i^T (L Z)_i]`` with the graph Laplacian ``L = D^T D`` -- an
  ``n x d`` sparse product per application; ``A`` and ``A A^T`` (``sum_i deg(i) d rank N_i``
  and about ``rank N_i^2`` entries per edge) are never formed.  The diagonal of ``A A^T`` is
  ``deg(i)`` on every row of node ``i`` (``N_i`` orthonormal, ``D`` with entries ``+-1``): the
  Jacobi preconditioner.

:class:`SubspaceConditions` (the products ``A``, ``A^T``, ``A A^T`` through potentials) and
:func:`conjugate_gradients` are written against the array API (:mod:`gtvmodel._xp`), so that the
certificate of a device iterate corrects its flows where they are
(:mod:`gtvmodel.certificates.device_subspace`); the host runs the same iteration with its
vector updates and dot products in compiled passes where numba is available
(:func:`_host_conjugate_gradients`; no BLAS call either way, whose threads spin on a shared
machine), with ``A A^T`` by compiled node passes and scipy's Laplacian product
(:meth:`SubspaceConditions.normal_kernel`), and ``A u`` and the potentials of a correction
by the same node passes (:meth:`SubspaceConditions.host_operator`,
:meth:`~SubspaceConditions.host_potentials`).  ``A`` itself is never formed on the host either
(:func:`condition_operator`; :func:`divergence_rows` forms it for small systems and tests).

Cost (issue 30 item 3): a correction is :func:`refine`'s rounds, each a solve from zero on the
residual of the previous one (``b`` first); the first to :data:`FIRST_AIM` (refine's stop, so
usually the only round), the later ones only to :data:`REFINE_AIM` ``||b||``
(:func:`round_rtol`).  The repair's corrections before the last of its alternation with the
capacity projection are one round to :data:`~gtvmodel.certificates.repair.LOOSE_RTOL` only
(``solve(b, rtol=...)``: about 5 products; the next correction takes over what they
leave).  On a ``G(n, E)`` graph of mean degree 20 the Jacobi-preconditioned system needs
23-25 products per ``1e-15`` (about 0.23 per product: a condition number near 2.6).  Block
Jacobi on the node blocks is the same preconditioner: the block of node ``i`` is ``N_i^T
L_ii N_i = deg(i) I`` (``N_i`` orthonormal); benchmarks/bench_certificate_cg.py measures a
certificate in iterations.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .. import _compiled, _xp
from ..declaration import ModelDeclaration

__all__ = ["DENSE_MAX", "RANGE_MAX", "CG_RTOL", "CG_MAXITER", "MinNormSolver", "RangeSolver",
           "PotentialSolver", "SubspaceConditions", "conjugate_gradients", "refine", "solver_kind",
           "subspace_solver", "divergence_rows", "condition_operator", "round_rtol",
           "REFINE_AIM", "FIRST_AIM"]

#: Relative residual at which the conjugate gradients of step 2 stop (the first round of
#: :class:`MinNormSolver`'s formed ``A A^T``; :class:`PotentialSolver` aims at
#: :data:`FIRST_AIM`).
CG_RTOL = 1e-12

#: The relative residual that the first round of :class:`PotentialSolver` aims at:
#: :func:`refine`'s ``1e-15`` stop itself, so one round usually ends the correction (4-5 more
#: products than :data:`CG_RTOL` instead of a second round of 9-10 after a restart from zero,
#: and one residual evaluation and one ``D Z`` product fewer; benchmarks/RESULTS.md).
FIRST_AIM = 1e-15

#: Cap on the conjugate-gradient iterations of step 2 (at most ``10 rows + 100``).
CG_MAXITER = 3000

#: The residual ``||A delta - b||`` that the conjugate gradients of a refinement round after
#: the first aim at, relative to ``||b||`` (:func:`round_rtol`): three orders below the
#: ``1e-15`` at which :func:`refine` stops, so the rounds still end at the rounding of ``A
#: delta``.
REFINE_AIM = 1e-18

#: Largest ``A A^T`` (rows) of the minimum-norm flow correction solved densely (one
#: eigen-decomposition, cubic in the rows: the first certificate of a 1,000-node SBM model
#: with d = 3 took 2.3-2.6 s with 3,000 here, 0.97-1.05 s with 1,000, the same gap).
DENSE_MAX = 1000

class MinNormSolver:
    """Minimum-norm solutions ``delta = A^T z`` of ``A delta = b`` (``b`` in ``range(A)``).

    ``A A^T`` (sparse) may be singular (e.g. a component of zero-loss nodes).  With at most
    :data:`DENSE_MAX` rows its pseudo-inverse is applied through one eigen-decomposition
    (computed once; the solver is cached on the model, so repeated certificates, e.g. every
    ``record_every`` iterations of Algorithm 1, reuse it); larger systems use
    Jacobi-preconditioned conjugate gradients (:func:`conjugate_gradients`), which converge on
    consistent singular systems up to rounding.  A few refinement rounds follow.  Whatever
    residual remains is not hidden: the dual evaluation charges it (``R ||rho||_1``) or
    declares the node infeasible.
    """

    #: The relative tolerance of the first refinement round (:func:`round_rtol`).
    first_rtol: float = CG_RTOL

    def __init__(self, A: sp.csr_matrix, maxiter: int = CG_MAXITER):
        self.maxiter = min(10 * A.shape[0] + 100, maxiter)
        self.A = A.tocsr()
        self.AT = self.A.T.tocsr()
        self.K = (self.A @ self.AT).tocsr()
        self.diag = self.K.diagonal()
        self.eig: tuple[np.ndarray, np.ndarray] | None = None
        if self.K.shape[0] <= DENSE_MAX:
            ev, V = np.linalg.eigh(self.K.toarray())
            keep = ev > 1e-12 * max(float(ev.max(initial=0.0)), 1e-300)
            self.eig = (ev[keep], V[:, keep])

    def multipliers(self, r: np.ndarray, rtol: float = CG_RTOL) -> np.ndarray:
        """``z`` with ``(A A^T) z = r`` (pseudo-inverse, or conjugate gradients to ``rtol``):
        the correction is ``A^T z``."""
        if self.eig is not None:
            ev, V = self.eig
            return V @ ((V.T @ r) / ev)
        return conjugate_gradients(self.K.__matmul__, r, self.diag, rtol, self.maxiter)

    def solve(self, b: np.ndarray, rounds: int = 3, ref: float = 0.0,
              rtol: float | None = None) -> np.ndarray:
        """The minimum-norm ``delta`` with ``A delta = b``: ``delta = A^T z``, ``(A A^T) z = b``
        (pseudo-inverse or conjugate gradients), refined for up to ``rounds`` rounds on the
        residual ``b - A delta`` until it is within ``1e-15 max(||b||, ref)`` (:func:`refine`;
        ``ref``: the right-hand side of the first correction of an alternation, so that its
        later, smaller corrections aim at the same absolute residual); a residual that
        remains is left for the caller to charge.  With ``rtol``: one round only, the
        conjugate gradients stopped at ``rtol ||b||`` (an intermediate correction of the
        repair's alternation, whose next correction takes over what it leaves,
        :data:`~gtvmodel.certificates.repair.LOOSE_RTOL`)."""
        if rtol is not None:
            return self._step(b, rtol)
        nb = _norm(b)
        acc: list[np.ndarray] = []  # the sum of the rounds' corrections (no zeros to add to)

        def step(r: np.ndarray) -> None:
            dz = self._step(r, round_rtol(_norm(r), nb, self.first_rtol, ref))
            if acc:
                acc[0] += dz
            else:
                acc.append(dz)

        refine(b, step, lambda: b - self.A @ acc[0], rounds, ref)
        return acc[0] if acc else np.zeros(self.A.shape[1])

    def _step(self, r: np.ndarray, rtol: float = CG_RTOL) -> np.ndarray:
        """One minimum-norm correction ``A^T (A A^T)^+ r`` (conjugate gradients to ``rtol``)."""
        return self.AT @ self.multipliers(r, rtol)

    def subtract_loose(self, U: np.ndarray, b: np.ndarray, rtol: float) -> None:
        """``U -= delta`` in place (``U`` the ``(|E|, d)`` flows) for :meth:`solve`'s
        one-round correction ``delta`` of ``A delta = b`` to ``rtol``."""
        U -= self._step(b, rtol).reshape(U.shape)


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

    def _step(self, r: np.ndarray, rtol: float = CG_RTOL) -> np.ndarray:
        """``delta = D L^+ (B c - t)`` for the right-hand side ``r`` (stacked ``b_i``; direct:
        ``rtol`` unused)."""
        return np.asarray(self.D @ self.potentials(r)).ravel()

    def potentials(self, r: np.ndarray) -> np.ndarray:
        """The node potentials ``P = L^+ (B c - t)`` (``(n, d)``) of the correction ``delta =
        D P`` for the right-hand side ``r`` (stacked ``b_i``; class docstring)."""
        n, d = self.shape
        t = np.zeros((n, d))
        rp = np.zeros(self.mask.shape)
        rp[self.mask] = r
        t[self.nodes] = -np.einsum("sdk,sk->sd", self.Npad, rp)
        Lt = self.Lp @ t
        sums = np.zeros((self.C.shape[0] // d, d))
        np.add.at(sums, self.components, t)
        rhs = np.concatenate([(self.R * Lt[self.owner]).sum(axis=1), sums.ravel()])
        assert self.eig is not None  # (always factorized in __init__)
        ev, V = self.eig
        c = (V @ ((V.T @ rhs) / ev))[:self.R.shape[0]]
        Bc = self.owns @ (c[:, None] * self.R)
        return self.Lp @ (Bc - t)


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


def solver_kind(model: ModelDeclaration, nodes: np.ndarray, bases: list[np.ndarray]) -> str:
    """Which solver :func:`subspace_solver` builds for the subspace conditions at ``nodes``:
    ``"range"`` (:class:`RangeSolver`) where the complement system is smaller than ``A A^T``
    and both it and the graph fit :data:`RANGE_MAX` (dense; the padded bases at most ``25
    RANGE_MAX^2`` numbers), else ``"dense"`` (:class:`MinNormSolver`'s pseudo-inverse) up
    to :data:`DENSE_MAX` rows, ``"cg"`` (:class:`PotentialSolver`) above."""
    d, n = model.dim, model.num_nodes
    rows = sum(B.shape[1] for B in bases)
    ncomp = model.structure().component_count
    small = d * (n - len(nodes)) + sum(d - B.shape[1] for B in bases) + d * ncomp
    if (rows > DENSE_MAX and n <= RANGE_MAX and small <= min(RANGE_MAX, rows)
            and len(nodes) * d * max(B.shape[1] for B in bases) <= RANGE_MAX ** 2 * 25):
        return "range"
    return "dense" if rows <= DENSE_MAX else "cg"


def subspace_solver(model: ModelDeclaration, nodes: np.ndarray,
                    bases: list[np.ndarray]) -> MinNormSolver:
    """The solver of repair step 2 for the subspace conditions at ``nodes``
    (:func:`solver_kind`)."""
    kind = solver_kind(model, nodes, bases)
    if kind == "range":
        return RangeSolver(model.incidence, nodes, bases, model.structure().components)
    if kind == "cg":
        return PotentialSolver(model.incidence, SubspaceConditions.build(model, nodes, bases))
    full = all(B.shape[1] == model.dim for B in bases)
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


def condition_operator(model: ModelDeclaration, nodes: np.ndarray,
                       bases: list[np.ndarray] | np.ndarray) -> spla.LinearOperator:
    """:func:`divergence_rows`' ``A`` (the same rows in the same order) as a matrix-free
    ``LinearOperator`` (:meth:`SubspaceConditions.operator`): ``sum_i deg(i) d rank N_i``
    entries never stored (1.2 GB at 10^5 nodes, 10^6 edges, ``d = 10``, ``rank N_i = 5``)."""
    return SubspaceConditions.build(model, nodes, bases).operator(model.incidence)


@dataclass
class SubspaceConditions:
    """The stacked conditions ``A vec(U) = [N_i^T (D^T U)_i]`` at ``nodes`` (module
    docstring), rows node by node in the order of ``nodes`` and, within a node, of the
    columns of ``N_i`` (the row order of :func:`divergence_rows`).

    Attributes
    ----------
    nodes : array (s,) or None
        The conditioned nodes (positions); None when every node is.
    Npad : array (s, d, k) or None
        The bases ``N_i`` padded with zero columns to a common width ``k``; None where every
        ``N_i = I`` (zero-loss nodes only).
    cols : array or None
        The positions of the real columns of ``Npad`` in its flattened ``(s, k)`` products
        (an index, not a boolean mask: a gather, cheaper on tensors); None when every basis
        has ``k`` columns.
    diag : array (rows,)
        The diagonal of ``A A^T``: ``deg(i)`` on each row of node ``i``.
    n, d : int
        Nodes and dimension of the model.
    widths : array (s,) or None
        ``rank N_i`` per conditioned node (host numpy; None: every ``N_i = I``).
    """

    nodes: Any
    Npad: Any
    cols: Any
    diag: Any
    n: int
    d: int
    widths: Any = None

    @classmethod
    def build(cls, model: ModelDeclaration, nodes: np.ndarray,
              bases: list[np.ndarray] | np.ndarray) -> SubspaceConditions:
        """The conditions at ``nodes`` (sorted positions) with orthonormal bases ``bases``
        (``N_i``, ``(d, k_i)``), as numpy arrays."""
        n, d = model.num_nodes, model.dim
        widths = np.array([B.shape[1] for B in bases], dtype=np.int64)
        diag = np.repeat(model.degrees[nodes].astype(float), widths)
        at = None if len(nodes) == n else np.asarray(nodes, dtype=np.int64)
        if (widths == d).all():
            return cls(at, None, None, diag, n, d)
        kmax = int(widths.max(initial=0))
        if (widths == kmax).all():  # one width (e.g. every m_i < d equal): one stack
            return cls(at, bases if isinstance(bases, np.ndarray) else np.stack(bases), None,
                       diag, n, d, widths)
        Npad = np.zeros((len(bases), d, kmax))
        for j, B in enumerate(bases):  # the bases as the node classification stores them
            Npad[j, :, :B.shape[1]] = B
        mask = np.arange(kmax)[None, :] < widths[:, None]
        return cls(at, Npad, np.flatnonzero(mask.ravel()), diag, n, d, widths)

    @property
    def num_rows(self) -> int:
        """Rows of ``A``: ``sum_i rank N_i``."""
        return int(self.diag.shape[0])

    def to(self, ref: Any) -> SubspaceConditions:
        """The same conditions with arrays beside ``ref`` (its namespace and device)."""
        def move(a: Any) -> Any:
            return None if a is None else _xp.like(a, ref)

        return replace(self, nodes=move(self.nodes), Npad=move(self.Npad), cols=move(self.cols),
                       diag=move(self.diag))

    def rows(self, G: Any) -> Any:
        """``A vec(U)`` from ``G = D^T U`` (``(n, d)``): the stacked ``N_i^T G_i``."""
        xp = _xp.namespace(G)
        g = G if self.nodes is None else xp.take(G, self.nodes, axis=0)
        if self.Npad is None:
            return xp.reshape(g, (-1,))
        r = xp.reshape((g[:, None, :] @ self.Npad)[:, 0, :], (-1,))
        return r if self.cols is None else xp.take(r, self.cols, axis=0)

    def potentials(self, z: Any) -> Any:
        """The node potentials ``Z`` (``(n, d)``) with ``A^T z = D Z``: ``Z_i = N_i z_i`` at
        the conditioned nodes, 0 elsewhere."""
        xp = _xp.namespace(z)
        if self.Npad is None:
            P = xp.reshape(z, (-1, self.d))
        else:
            s, _, k = self.Npad.shape
            if self.cols is not None:
                zp = xp.zeros((s * k,), dtype=z.dtype, device=_xp.device_of(z))
                zp[self.cols] = z
                z = zp
            P = (self.Npad @ xp.reshape(z, (s, k, 1)))[:, :, 0]
        if self.nodes is None:
            return P
        Z = xp.zeros((self.n, self.d), dtype=z.dtype, device=_xp.device_of(z))
        Z[self.nodes] = P
        return Z

    def normal(self, z: Any, laplacian: Callable[[Any], Any]) -> Any:
        """``A A^T z = [N_i^T (L Z)_i]`` through the Laplacian product ``laplacian(Z) = L Z``
        (``L = D^T D``)."""
        return self.rows(laplacian(self.potentials(z)))

    def operator(self, incidence: sp.spmatrix) -> spla.LinearOperator:
        """``A`` (host numpy) as a ``LinearOperator`` on the C-ordered flat flows: ``A
        vec(U) = rows(D^T U)``, never formed (``sum_i deg(i) d rank N_i`` entries).  ``D^T U``
        by the transposed view of ``D`` (:func:`_transposed`)."""
        DT = _transposed(incidence)
        return spla.LinearOperator(
            (self.num_rows, incidence.shape[0] * self.d), dtype=float,
            matvec=lambda u: self.rows(np.asarray(DT @ np.reshape(u, (-1, self.d)))))

    def _widths(self, s: int) -> np.ndarray:
        """``rank N_i`` per conditioned node (``s`` of them), from :attr:`widths` or, where
        it is not set, from ``Npad`` and ``cols``."""
        if self.widths is not None:
            return np.asarray(self.widths, dtype=np.int64)
        if self.Npad is None:
            return np.full(s, self.d, dtype=np.int64)
        k = self.Npad.shape[2]
        if self.cols is None:
            return np.full(s, k, dtype=np.int64)
        return np.bincount(_xp.to_numpy(self.cols, np.int64) // k, minlength=s)

    @functools.cached_property
    def host_layout(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(nodes, offsets, NT)`` of the compiled node passes (host numpy,
        :func:`gtvmodel._compiled.potentials_pass`): the conditioned nodes, the first row of
        each node's block and the bases transposed, ``(s, k, d)`` (None: every ``N_i =
        I``); formed once (``NT`` is as large as the bases: 40 MB at 10^5 nodes, ``d = 10``,
        ``rank N_i = 5``)."""
        nodes = (np.arange(self.n, dtype=np.int64) if self.nodes is None
                 else np.asarray(self.nodes, dtype=np.int64))
        widths = self._widths(nodes.size)
        offsets = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
        NT = None if self.Npad is None else np.ascontiguousarray(
            np.asarray(self.Npad).transpose(0, 2, 1))  # (s, k, d): the kernels' layout
        return nodes, offsets, NT

    def host_potentials(self) -> Callable[[np.ndarray], np.ndarray]:
        """``z -> Z`` (:meth:`potentials`, host numpy) by the compiled node pass."""
        kern = _compiled.subspace_kernels()
        nodes, offsets, NT = self.host_layout

        def potentials(z: np.ndarray) -> np.ndarray:
            z = np.ascontiguousarray(z, dtype=float)
            if NT is None:
                return self.potentials(z)
            # every row written by the pass where every node is conditioned
            Z = (np.empty if self.nodes is None else np.zeros)((self.n, self.d))
            kern.potentials_pass(nodes, NT, offsets, z, Z)
            return Z

        return potentials

    def host_rows(self) -> Callable[[np.ndarray], np.ndarray]:
        """``G -> A vec(U)`` from ``G = D^T U`` (:meth:`rows`, host numpy) by the compiled
        node pass (the same sums in the order of :meth:`normal_kernel`'s rows)."""
        kern = _compiled.subspace_kernels()
        nodes, offsets, NT = self.host_layout

        def rows(G: np.ndarray) -> np.ndarray:
            if NT is None:
                return self.rows(G)
            g = G if self.nodes is None else G[nodes]
            out = np.empty(self.num_rows)
            kern.rows_pass(NT, offsets, np.ascontiguousarray(g, dtype=float), out)
            return out

        return rows

    def host_operator(self, incidence: sp.spmatrix) -> spla.LinearOperator:
        """:meth:`operator` with the rows by the compiled node pass (:meth:`host_rows`)."""
        DT = _transposed(incidence)
        rows = self.host_rows()
        return spla.LinearOperator(
            (self.num_rows, incidence.shape[0] * self.d), dtype=float,
            matvec=lambda u: rows(np.asarray(DT @ np.reshape(u, (-1, self.d)))))

    def normal_kernel(self, laplacian: sp.csr_matrix) -> Callable[[np.ndarray], np.ndarray]:
        """``z -> A A^T z`` (host numpy) as :meth:`normal` computes it, the potentials and
        the rows by the compiled node passes (:meth:`host_potentials`, :meth:`host_rows`: no
        batched ``(1, d) x (d, k)`` products), ``L Z`` by scipy's sparse product on the
        conditioned rows of ``laplacian`` (``L = D^T D``; faster than a compiled loop over its
        rows on the benchmark's graphs: 2.1 against 2.3-3.0 ms at 20,000 nodes and 200,000
        edges, ``d = 10``)."""
        Lc = laplacian.tocsr() if self.nodes is None else laplacian.tocsr()[
            np.asarray(self.nodes, dtype=np.int64)]
        potentials = self.host_potentials()
        kern = _compiled.subspace_kernels()
        _, offsets, NT = self.host_layout

        def apply(z: np.ndarray) -> np.ndarray:
            Z = potentials(z)  # per call: a cached solver may be shared
            if NT is None:  # N_i = I: the potentials are z itself
                return np.asarray(Lc @ Z).ravel()
            out = np.empty(self.num_rows)
            kern.rows_pass(NT, offsets, np.asarray(Lc @ Z), out)
            return out

        return apply


def _transposed(incidence: sp.spmatrix) -> sp.spmatrix:
    """``D^T`` for the products ``D^T U``: the transposed view of a CSR ``D`` (CSC, sharing
    its arrays) rather than a CSR copy (``2 |E|`` entries: 24 MB at 10^6 edges, kept by the
    cached solver; issue 30 item 3).  The same sums bit for bit (each node's entries in
    increasing edge order either way) and faster (3.6 against 4.7 ms at 200,000 edges, ``d =
    10``: scipy's column product against the row product)."""
    D = incidence if incidence.format == "csr" else sp.csr_matrix(incidence)
    return D.T


def _norm(x: Any) -> float:
    """``||x||_2`` of a vector of any array namespace, as a sum of squares (no BLAS call: a
    BLAS ``dot`` runs on all of its threads, which spin on a shared machine)."""
    xp = _xp.namespace(x)
    return float(xp.sum(x * x)) ** 0.5


def round_rtol(r_norm: float, b_norm: float, first: float = CG_RTOL, ref: float = 0.0
               ) -> float:
    """The relative tolerance of the conjugate gradients of a refinement round of ``A delta =
    b`` on the residual ``r`` (norms ``r_norm``, ``b_norm``): ``first`` in the first round
    (``r = b``; :data:`CG_RTOL`, or :data:`FIRST_AIM` for :class:`PotentialSolver`); in a
    later one, the one that aims at :data:`REFINE_AIM` ``||b||`` (``rtol = REFINE_AIM ||b|| /
    ||r||``, never below ``first``).  After a first round to ``1e-12`` that is about ``1e-6``:
    half the iterations of another solve to ``1e-12 ||r||`` (``1e-24 ||b||``, far below the
    rounding of ``A delta``), the same flows to rounding (identical gaps on the benchmark,
    benchmarks/RESULTS.md); after one to :data:`FIRST_AIM` that misses the stop, about
    ``1e-3``.  With ``ref > ||b||`` both aims are relative to ``ref`` instead (the same
    absolute residual for every correction of an alternation, :meth:`MinNormSolver.solve`):
    ``first ref / ||b||`` and ``REFINE_AIM ref / ||r||``."""
    if r_norm <= 0.0 or b_norm <= 0.0:
        return first
    scale = max(b_norm, ref)
    return max(first * scale / b_norm, REFINE_AIM * scale / r_norm)


def refine(b: Any, step: Callable[[Any], None], residual: Callable[[], Any], rounds: int,
           ref: float = 0.0) -> None:
    """The refinement rounds of the minimum-norm correction (any array namespace): up to
    ``rounds`` times, ``step(r)`` (apply the correction of the residual ``r``, starting from
    ``b``), then ``r = residual()``, until ``||r|| <= 1e-15 max(||b||, ref)``; what remains
    is left for the certificate to charge."""
    xp = _xp.namespace(b)
    nb = max(float(xp.linalg.vector_norm(b)), ref, 1e-300)
    r = b
    for _ in range(rounds):
        if float(xp.linalg.vector_norm(r)) <= 1e-15 * nb:
            break
        step(r)
        r = residual()


def conjugate_gradients(apply: Callable[[Any], Any], b: Any, diag: Any, rtol: float,
                        maxiter: int) -> Any:
    """Jacobi-preconditioned conjugate gradients for ``K z = b`` (``K = apply``, symmetric
    positive semi-definite, ``b`` in its range; ``diag`` the diagonal of ``K``, zeros read as
    1) from ``z = 0``, stopped when ``||b - K z|| <= rtol ||b||`` or after ``maxiter``
    iterations.  On a consistent singular system the iterates stay in the range of ``K``
    up to rounding, so ``A^T z`` is the minimum-norm correction; what remains of the residual
    is charged by the certificate, never hidden.  Host numpy vectors go through the compiled
    passes of :func:`_host_conjugate_gradients` where numba is available."""
    if _xp.is_numpy(b) and _compiled.available():
        return _host_conjugate_gradients(apply, b, diag, rtol, maxiter)
    xp = _xp.namespace(b)
    minv = xp.where(diag > 0, 1.0 / xp.where(diag > 0, diag, 1.0), 1.0)
    z = xp.zeros_like(b)
    nb = _norm(b)
    if nb == 0.0:
        return z
    r = _xp.copy(b)
    y = minv * r
    p = _xp.copy(y)
    ry = float(xp.sum(r * y))
    for _ in range(maxiter):
        Kp = apply(p)
        pKp = float(xp.sum(p * Kp))
        if not pKp > 0.0:  # p in the null space of K (rounding): nothing left to gain
            break
        alpha = ry / pKp
        z = z + alpha * p
        r = r - alpha * Kp
        if _norm(r) <= rtol * nb:
            break
        y = minv * r
        ry_new = float(xp.sum(r * y))
        p = y + (ry_new / ry) * p
        ry = ry_new
    return z


def _host_conjugate_gradients(apply: Callable[[np.ndarray], np.ndarray], b: np.ndarray,
                              diag: np.ndarray, rtol: float, maxiter: int) -> np.ndarray:
    """:func:`conjugate_gradients` on host numpy vectors with the vector updates of an
    iteration in two compiled passes (:func:`gtvmodel._compiled.cg_update_pass`,
    :func:`~gtvmodel._compiled.cg_direction_pass`) and the dot products in index order
    (:func:`~gtvmodel._compiled.dot_pass`) instead of about ten numpy passes and
    temporaries: the same iteration, the sums in another order."""
    kern = _compiled.subspace_kernels()
    diag = np.asarray(diag, dtype=float)
    minv = np.where(diag > 0, 1.0 / np.where(diag > 0, diag, 1.0), 1.0)
    b = np.ascontiguousarray(b, dtype=float)
    z = np.zeros_like(b)
    nb = _norm(b)
    if nb == 0.0:
        return z
    r = b.copy()
    p = minv * r
    ry = float(kern.dot_pass(r, p))
    for _ in range(maxiter):
        Kp = np.ascontiguousarray(apply(p), dtype=float)
        pKp = float(kern.dot_pass(p, Kp))
        if not pKp > 0.0:  # p in the null space of K (rounding): nothing left to gain
            break
        rr, ry_new = kern.cg_update_pass(z, r, p, Kp, ry / pKp, minv)
        if float(rr) ** 0.5 <= rtol * nb:
            break
        kern.cg_direction_pass(p, r, minv, float(ry_new) / ry)
        ry = float(ry_new)
    return z


class PotentialSolver(MinNormSolver):
    """:class:`MinNormSolver`'s conjugate gradients (Jacobi-preconditioned, the first round to
    :data:`FIRST_AIM`, at most ``min(10 rows + 100, CG_MAXITER)`` iterations) with ``A``,
    ``A^T`` and ``A A^T`` applied through node potentials (:class:`SubspaceConditions`,
    module docstring): the same correction, without forming ``A`` (``|E| d`` columns) or ``A
    A^T``.  ``A A^T`` is
    :meth:`SubspaceConditions.normal_kernel` (compiled node passes around scipy's Laplacian
    product) where numba is available, else :meth:`SubspaceConditions.normal`; the iterations
    are :func:`conjugate_gradients` (no BLAS call, so no BLAS threads)."""

    first_rtol = FIRST_AIM

    def __init__(self, incidence: sp.spmatrix, conditions: SubspaceConditions,
                 maxiter: int = CG_MAXITER):
        self.conditions = cond = conditions
        self.D = sp.csr_matrix(incidence)
        self.L = (self.D.T @ self.D).tocsr()
        rows = cond.num_rows
        fast = _compiled.available()
        self.A = cond.host_operator(self.D) if fast else cond.operator(self.D)
        self.normal: Callable[[np.ndarray], np.ndarray] = (
            cond.normal_kernel(self.L) if fast
            else lambda z: cond.normal(z, self.L.__matmul__))
        self.potentials: Callable[[np.ndarray], np.ndarray] = (
            cond.host_potentials() if fast else cond.potentials)
        self.K = spla.LinearOperator((rows, rows), dtype=float,
                                     matvec=lambda z: self.normal(np.ravel(z)))
        self.maxiter = min(10 * rows + 100, maxiter)
        self.eig = None

    def multipliers(self, r: np.ndarray, rtol: float = CG_RTOL) -> np.ndarray:
        """``z`` with ``(A A^T) z = r`` by :func:`conjugate_gradients` to ``rtol``."""
        return conjugate_gradients(self.normal, r, self.conditions.diag, rtol, self.maxiter)

    def _step(self, r: np.ndarray, rtol: float = CG_RTOL) -> np.ndarray:
        """``delta = D Z``, ``Z`` the potentials of the multipliers of ``r`` (to ``rtol``)."""
        return np.asarray(self.D @ self.potentials(self.multipliers(r, rtol))).ravel()

    def subtract_loose(self, U: np.ndarray, b: np.ndarray, rtol: float) -> None:
        """:meth:`MinNormSolver.subtract_loose` with ``U -= D Z`` in one compiled pass over
        the edges where numba is available (:func:`gtvmodel._compiled.subtract_rows_pass`:
        bit for bit ``U - D @ Z``, without the ``|E| x d`` correction)."""
        if not (_compiled.available() and U.flags.c_contiguous and U.dtype == np.float64):
            return super().subtract_loose(U, b, rtol)
        Z = np.ascontiguousarray(self.potentials(self.multipliers(b, rtol)), dtype=float)
        D = self.D  # its entries in the order scipy's product takes them
        _compiled.subspace_kernels().subtract_rows_pass(D.indptr, D.indices, D.data, Z, U)
