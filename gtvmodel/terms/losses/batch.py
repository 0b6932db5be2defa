"""The batch core: :class:`LossBatch` (the stacked losses of one class, its required hooks
abstract), the optional capabilities as protocols, and the dual problem's :class:`NodePart`
and the certificate's :class:`ConjugateGroup`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from ... import _xp
from ...errors import UnsupportedError

_T = TypeVar("_T")



def smooth_gradients(batches: Sequence[LossBatch], l2: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``grad (L_i + kappa_i ||.||^2)(w_i)`` stacked, ``(n, d)``, over the batches of smooth
    losses (rows of non-smooth batches and of ``l1`` terms are left out; the caller uses them
    only where a gradient exists): the one assembly of the per-node gradients."""
    G = 2.0 * np.asarray(l2, dtype=float)[:, None] * W
    for b in batches:
        if b.cls.base_smooth:
            G += b.gradients(W)
    return G


def _check_lipschitz(cls: Any) -> None:
    """:class:`UnsupportedError` unless the loss class's facts promise a globally Lipschitz
    gradient (the condition of every Hessian upper bound)."""
    facts = cls.class_facts
    if not facts.differentiable:
        raise UnsupportedError(f"{cls.__name__} is not smooth: it has no Hessian bound")
    if not facts.lipschitz_gradient:
        raise UnsupportedError(f"{cls.__name__} has no globally Lipschitz gradient: it has no "
                               "upper Hessian bound")


@dataclass
class NodePart:
    """One stacked group of split variables of the node conjugates (the dual problem (24)).

    ``contrib`` is its ``(k, d)`` contribution to the node-balance rows, ``cost`` its convex
    cost, ``constraints`` its domain, and ``evaluate()`` returns ``(contrib, cost_rows)`` in
    numpy at the current variable values *projected into the domain* (so the cost is finite and
    exact): the ``(k, d)`` contribution and the ``(k,)`` cost of each node row.
    """

    name: str
    contrib: cp.Expression
    cost: cp.Expression
    constraints: list[cp.Constraint]
    evaluate: Callable[[], tuple[np.ndarray, np.ndarray]]
    #: ``absorb(R)`` moves the variable's value so that its contribution grows by as much of
    #: the ``(k, d)`` residual ``R`` as it can while staying in its domain (None: cannot).
    absorb: Callable[[np.ndarray], None] | None = None
    #: ``magnitude()``: ``(contrib_mag (k, d), cost_mag (k,))``, bounds of the sums of the
    #: absolute summands of the numpy contribution and cost at the current value, for the
    #: rounding bound of sums that may cancel (None: the absolute values themselves suffice).
    magnitude: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None


def scatter_rows(row_of: np.ndarray, idx: np.ndarray, k: int) -> sp.csr_matrix:
    """Sparse ``(k, len(idx))`` matrix adding item ``j`` into row ``row_of[idx[j]]``."""
    return sp.csr_matrix((np.ones(len(idx)), (row_of[idx], np.arange(len(idx)))),
                         shape=(k, len(idx)))


@dataclass
class ConjugateGroup:
    """Nodes of one batch whose conjugates ``h_i*(s_i)`` the certificate evaluates in numpy.

    ``evaluate(S, W0, wloc, rnd)`` (rows of the group's nodes: demands, candidate weights,
    local radii, rounding bounds of ``S``) returns ``(values, rho, rounding, magnitudes,
    wloc, converged)``: upper bounds of ``h_i*(s_i - rho_i)``, the residuals ``|rho_i|`` and a
    bound of their rounding, the sums of the absolute summands, the updated local radii and
    the nodes where the bound was obtained.  ``exact``: every node converges (closed forms);
    otherwise the nodes that did not fall back to the certificate's CVXPY path.
    """

    nodes: np.ndarray
    exact: bool
    evaluate: Callable[..., tuple[np.ndarray, ...]]
    #: ``evaluate`` takes tensors of another array library too (``S``, ``W0``, ``wloc`` and
    #: ``rnd`` on one device; its results are then there, but ``converged``): the device
    #: certificate (:mod:`gtvmodel.certificates.device_certificate`) runs it where the demands are.
    array_api: bool = False


class LossBatch(ABC):
    """All library losses of one class, stacked for vectorized evaluation and compilation.

    ``LossBatch(cls, nodes, losses, n, d)`` builds the batch class the loss class names
    (:attr:`Loss.batch_class`); ``nodes`` are the positions of the nodes in the batch.  The
    hooks below are what the engines call (the exact problem, the dual, the certificate,
    Algorithm 1's prox and theory).

    **Required** (abstract: a batch class that forgets one cannot be constructed):
    :meth:`expression`, :meth:`values`, :meth:`gradients`, :meth:`max_rows`.

    **Optional capabilities** (the protocols :class:`ExactProx`, :class:`ConjugateGroups`,
    :class:`SublevelRadii`, :class:`Hessians`, :class:`NullSpace`,
    :class:`DiagonalQuadratic`; :func:`supports` tells whether a batch class implements one):
    the defaults here answer "absent" in a form no engine can mistake for a number -- None
    (no conjugate group, no Hessians, no null space, no diagonal form, no half-spaces),
    ``inf`` radii (not coercive), :class:`UnsupportedError` (no exact prox, no dual part, no
    Hessian bound).
    """

    #: True when :meth:`_prox` is written against the array API (:mod:`gtvmodel._xp`): the
    #: node update then runs on other array libraries' tensors as they are (Algorithm 1's
    #: ``device=`` backend); otherwise :meth:`prox` computes it in numpy on the CPU.
    array_api: ClassVar[bool] = False

    def __new__(klass, cls: Any = None, *args: Any, **kwargs: Any) -> LossBatch:
        if klass is LossBatch:
            target = getattr(cls, "batch_class", None)
            if target is None:
                raise UnsupportedError(f"{getattr(cls, '__name__', cls)!s} has no vectorized "
                                       "batch (symbolic losses are compiled node by node)")
            return super().__new__(target)
        return super().__new__(klass)

    def __init__(self, cls: Any, nodes: np.ndarray, losses: Sequence[Any], n: int,
                 d: int):
        self.cls = cls
        self.nodes = np.asarray(nodes, dtype=np.int64)
        self.losses = list(losses)
        self.n, self.d = n, d
        self.l1 = np.array([ls.l1 for ls in self.losses], dtype=float)
        self.l2 = np.array([ls.l2 for ls in self.losses], dtype=float)
        self._shared: dict[str, Any] = {}

    def shared(self, name: str, build: Callable[[], _T]) -> _T:
        """The data-derived artefact ``name`` (a function of the losses alone: Gram matrices,
        their eigen-decompositions), built by ``build()`` once and shared with the batches
        :meth:`share_data` linked to this one."""
        if name not in self._shared:
            self._shared[name] = build()
        return self._shared[name]

    def seal(self) -> LossBatch:
        """Mark the attributes the batch has now (its stacked data, after construction) as its
        data, as opposed to the run state later calls add (prox operators, active sets, device
        copies): :meth:`sibling` copies the former only.  Returns the batch."""
        self._data_fields = frozenset(self.__dict__) | {"_data_fields"}
        return self

    def sibling(self) -> LossBatch:
        """A new batch over the same losses that shares this (sealed, :meth:`seal`) batch's
        stacked arrays and :meth:`shared` artefacts by reference, without its run state:
        Algorithm 1's node-update group of a model's whole structure batch, built without
        stacking the losses again (the arrays are the model structure's, read-only)."""
        fields = self.__dict__.get("_data_fields")
        if fields is None:
            raise UnsupportedError(f"{type(self).__name__}.sibling: the batch is not sealed")
        twin = object.__new__(type(self))
        twin.__dict__.update({k: self.__dict__[k] for k in fields})
        return twin

    def share_data(self, batches: Iterable[LossBatch]) -> None:
        """Share the data-derived artefacts of :meth:`shared` with the batch among ``batches``
        holding the same losses at the same positions (the model's structure batch), so that
        Algorithm 1's prox group and the certificate compute them once per model version (a
        cold certificate after a run repeats no eigen-decomposition; issue 16).  Run state
        (prox operators, active sets) stays with each batch."""
        for b in batches:
            if (type(b) is type(self) and np.array_equal(b.nodes, self.nodes)
                    and all(x is y for x, y in zip(b.losses, self.losses, strict=True))):
                self._shared = b._shared
                return

    @property
    def kind(self) -> str:
        """The loss class's short name."""
        return self.cls.kind

    @property
    def has_data(self) -> bool:
        """Whether the losses carry data (:attr:`Loss.has_data`)."""
        return self.cls.has_data

    # ------------------------------------------------------------ the primal (16)
    @abstractmethod
    def expression(self, w_flat: cp.Expression, W: cp.Expression) -> cp.Expression | None:
        """The batch's summed (unregularized) loss as one CVXPY expression in the flat variable
        ``w_flat`` or the ``(n, d)`` matrix variable ``W`` (None only for a batch whose losses
        are identically zero, :class:`~gtvmodel.terms.losses.batches.ZeroBatch`, never
        compiled: its nodes carry no data)."""

    @abstractmethod
    def values(self, W: np.ndarray) -> np.ndarray:
        """Per-node (unregularized) loss values, an ``(n,)`` array (0 outside the batch)."""

    @abstractmethod
    def gradients(self, W: np.ndarray) -> np.ndarray:
        """Stacked (unregularized) gradients, an ``(n, d)`` array (0 outside the batch);
        :class:`UnsupportedError` for non-differentiable losses."""

    @abstractmethod
    def max_rows(self) -> int:
        """The largest number of samples of a node (rounding bounds of sums over samples; 0
        for losses without samples)."""

    def hessian_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Global bounds ``H_lo <= hess L_i <= H_hi`` of the (unregularized) losses, ``(k, d,
        d)`` each in batch order (Theorem 2's ``alpha``/``beta``); :class:`UnsupportedError`
        unless the losses have globally Lipschitz gradients
        (:attr:`LossFacts.lipschitz_gradient <gtvmodel.terms.losses.facts.LossFacts>`)."""
        _check_lipschitz(self.cls)
        lo, hi = zip(*(ls._base_hessian_bounds(self.d) for ls in self.losses), strict=True)
        return np.stack(lo), np.stack(hi)

    def hessians(self, W: np.ndarray) -> np.ndarray | None:
        """``hess L_i(w_i)`` (unregularized) of the batch's nodes at ``W`` (``(n, d)``), a
        ``(k, d, d)`` array in batch order (the polish's Newton steps,
        :mod:`gtvmodel.solve.polish`); None where the batch has none (the default)."""
        return None

    # ------------------------------------------------------------ certified radii
    def growth_pieces(self, level: np.ndarray) -> dict[str, np.ndarray] | None:
        """Residual-growth facts on the sublevel sets (data-fit losses); None otherwise."""
        return None

    def level_halfspaces(self, level: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Half-spaces holding on ``{L_i <= level_i}``; None if there are none."""
        return None

    def sublevel_radii(self, level: np.ndarray) -> np.ndarray:
        """Bounds ``r_i >= ||w||_inf`` on ``{L_i <= level_i}`` in batch order (``inf``: the
        loss is not coercive)."""
        return np.full(self.nodes.size, np.inf)

    # ------------------------------------------------------------ node update PU (32)
    def prepare(self, tau: Any) -> None:
        """Compute the one-off data of :meth:`prox` for the steps ``tau`` (``(k,)``, numpy or
        a tensor) now: the mask :meth:`prox_supported` (subclasses add their factorizations),
        so that the first node update of Algorithm 1 costs what every later one does."""
        self.prox_supported()

    def prox_supported(self) -> np.ndarray:
        """Boolean mask of the batch's nodes whose prox :meth:`prox` computes exactly
        (:meth:`Loss.has_exact_prox`)."""
        ok = self.__dict__.get("_prox_ok")
        if ok is None:
            ok = np.array([ls.has_exact_prox() for ls in self.losses], dtype=bool)
            self.__dict__["_prox_ok"] = ok
        return ok

    def prox(self, V: np.ndarray, tau: np.ndarray, W0: np.ndarray | None = None) -> np.ndarray:
        """``prox_{tau_i h_i}(v_i)`` for every node of the batch, ``h_i = L_i + eta_i ||.||_1 +
        kappa_i ||.||^2`` (the node update PU (32) without constraints); ``V`` is ``(k, d)`` in
        batch order, ``tau`` ``(k,)`` positive, ``W0`` an optional start for Newton paths.

        Raises :class:`UnsupportedError` for nodes without an exact path
        (:meth:`prox_supported`).  ``V``, ``tau`` (and ``W0``) may be another array library's
        tensors: batches with :attr:`array_api` compute there, the others in float64 numpy on
        the CPU (the result is moved back beside ``V``).
        """
        ok = self.prox_supported()
        if not ok.all():
            i = int(self.nodes[np.flatnonzero(~ok)[0]])
            raise UnsupportedError(f"node at position {i}: {self.losses[0]!r} has no exact "
                                   "vectorized prox (use the CVXPY path)")
        if _xp.is_numpy(V):
            return self._prox(np.asarray(V, dtype=float), np.asarray(tau, dtype=float), W0)
        if self.array_api:
            return self._prox(V, tau, W0)
        W0n = None if W0 is None else _xp.to_numpy(W0)
        return _xp.like(self._prox(_xp.to_numpy(V), _xp.to_numpy(tau), W0n), V)

    def _on(self, name: str, a: np.ndarray, ref: Any) -> Any:
        """The batch's numpy constant ``a`` beside ``ref`` (:func:`gtvmodel._xp.cached_like`)."""
        return _xp.cached_like(self, name, a, ref)

    def _prox(self, V: np.ndarray, tau: np.ndarray, W0: np.ndarray | None) -> np.ndarray:
        raise UnsupportedError(f"{self.cls.__name__} has no exact vectorized prox")

    # ------------------------------------------------------------ conjugates (dual, certificate)
    def dual_part(self, inset: np.ndarray, row_of: np.ndarray, k: int) -> NodePart | None:
        """The stacked split variables of ``L_i*`` (unregularized) of the batch's nodes with
        ``inset[i]``, row ``row_of[i]`` of a ``(k, d)`` node-balance block (None: no node)."""
        raise UnsupportedError(f"{self.cls.__name__} has no dual-problem part")

    def conjugate_group(self, free: np.ndarray) -> ConjugateGroup | None:
        """The certificate's numpy path for the batch's nodes with ``free`` (no constraint):
        None where the batch has none (the certificate's CVXPY problem of
        :meth:`dual_part` then bounds them)."""
        return None

    def null_space_factors(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(e, V)`` with ``V diag(e) V^T`` proportional to each node's Gram matrix: its
        numerically null directions are subspace conditions of ``dom L_i*`` (repair step 2);
        None when the domain has none this way."""
        return None

    # ------------------------------------------------------------ exact solvers
    def squared_rows(self) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray] | None:
        """``(X_blk, y, c)`` with ``sum_{i in batch} L_i(w_i) = sum_r c_r ((X_blk vec(W))_r -
        y_r)^2`` (``X_blk`` acting on the model's node-major ``vec(W)``; unregularized): the
        residual rows of the native exact route (:mod:`gtvmodel.solve.native`); None (the
        default) when the batch's losses are not stated so."""
        return None

    # ------------------------------------------------------------ direct solvers
    def diagonal_quadratic(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(c, b)``, ``(k, d)`` each in batch order, with ``L_i(w) = sum_j (c_ij w_j^2 - 2
        b_ij w_j) + const`` (unregularized; ``c >= 0``, ``b_ij = 0`` where ``c_ij = 0``): the
        node term of the direct solvers of :mod:`gtvmodel.solve.direct`, separable per
        coordinate.  Rows are NaN at nodes whose loss has no such form; None (the default)
        when no loss of the batch has one."""
        return None


# =====================================================================  optional capabilities
@runtime_checkable
class ExactProx(Protocol):
    """The exact vectorized node update PU (32) (:meth:`LossBatch.prox`)."""

    def _prox(self, V: np.ndarray, tau: np.ndarray, W0: np.ndarray | None) -> np.ndarray:
        """PU (32) of every node of the batch, exact."""


@runtime_checkable
class ConjugateGroups(Protocol):
    """The certificate's numpy conjugates (:meth:`LossBatch.conjugate_group`) and the dual
    problem's split variables (:meth:`LossBatch.dual_part`)."""

    def conjugate_group(self, free: np.ndarray) -> ConjugateGroup | None:
        """The numpy conjugates of the ``free`` nodes."""

    def dual_part(self, inset: np.ndarray, row_of: np.ndarray, k: int) -> NodePart | None:
        """The split variables of ``L_i*`` of the nodes ``inset``."""


@runtime_checkable
class SublevelRadii(Protocol):
    """Bounds of the sublevel sets (the certified radii): :meth:`LossBatch.sublevel_radii`."""

    def sublevel_radii(self, level: np.ndarray) -> np.ndarray:
        """Bounds of ``||w||_inf`` on ``{L_i <= level_i}``."""


@runtime_checkable
class Hessians(Protocol):
    """Hessians at a point (:meth:`LossBatch.hessians`, the polish's Newton steps)."""

    def hessians(self, W: np.ndarray) -> np.ndarray | None:
        """``hess L_i(w_i)`` of the batch's nodes."""


@runtime_checkable
class NullSpace(Protocol):
    """Subspace conditions of ``dom L_i*`` (:meth:`LossBatch.null_space_factors`)."""

    def null_space_factors(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(e, V)`` whose null directions bound ``dom L_i*``."""


@runtime_checkable
class DiagonalQuadratic(Protocol):
    """Coordinate-separable quadratic node terms (:meth:`LossBatch.diagonal_quadratic`)."""

    def diagonal_quadratic(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(c, b)`` of ``L_i(w) = sum_j c_ij w_j^2 - 2 b_ij w_j + const``."""


#: The optional capabilities of a batch, by name.
CAPABILITIES: dict[str, type] = {
    "exact_prox": ExactProx, "conjugate_groups": ConjugateGroups,
    "sublevel_radii": SublevelRadii, "hessians": Hessians, "null_space": NullSpace,
    "diagonal_quadratic": DiagonalQuadratic}


def supports(batch: LossBatch | type[LossBatch], capability: type) -> bool:
    """Whether ``batch`` (a batch or batch class) implements the optional ``capability`` (one
    of :data:`CAPABILITIES`) itself: some method of the protocol is overridden below
    :class:`LossBatch`, whose defaults only answer "absent" (None, ``inf`` radii, an error).

    >>> from gtvmodel.terms.losses import QuadraticBatch, ZeroBatch
    >>> supports(QuadraticBatch, DiagonalQuadratic), supports(ZeroBatch, DiagonalQuadratic)
    (True, False)
    """
    cls = batch if isinstance(batch, type) else type(batch)
    names = [n for n in vars(capability) if not n.startswith("__") and n != "_is_protocol"
             and callable(getattr(capability, n, None))]
    return any(getattr(cls, n, None) is not getattr(LossBatch, n, None) for n in names)

