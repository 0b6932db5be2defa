"""The structure the engines share about one version of a :class:`~gtvmodel.declaration.
ModelDeclaration` (its nodes' terms stacked by class, its graph's arrays) and the cache of
compiled artefacts of that version.  Private: the public names are re-exported by
:mod:`gtvmodel.declaration`."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, TypeVar

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from .errors import ConstraintError
from .terms.constraints import Constraint
from .terms.losses import Loss, LossBatch

__all__ = ["ModelStructure", "ModelCache", "CacheSlot", "components", "stack_nodes",
           "graph_fields", "frozen_array"]

_T = TypeVar("_T")


class _FrozenList(list):
    """A list of node positions that cannot be changed (it compares equal to a plain list)."""

    def _frozen(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("ModelStructure is immutable")

    append = extend = insert = pop = remove = clear = sort = reverse = _frozen
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _frozen

    def __reduce__(self) -> tuple[type, tuple[list[int]]]:
        return _FrozenList, (list(self),)


def frozen_array(a: Any, dtype: Any = None) -> np.ndarray:
    """A read-only copy of ``a`` (the arrays of :class:`ModelStructure`)."""
    out = np.array(a, dtype=dtype)
    out.setflags(write=False)
    return out


def components(n: int, edges: np.ndarray) -> tuple[int, np.ndarray]:
    """``(count, label per node)`` of the connected components of the undirected graph on
    ``n`` nodes with the given ``(k, 2)`` position pairs (scipy's ``csgraph``)."""
    adj = sp.csr_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n))
    count, labels = csgraph.connected_components(adj, directed=False)
    return int(count), labels


@dataclass(frozen=True, eq=False)
class ModelStructure:
    """What the engines share about one version of the model: its nodes grouped for
    vectorized compilation and evaluation, and its graph (immutable; arrays read-only).

    Nodes: ``batches`` holds one :class:`LossBatch` per library loss class; ``symbolic`` the
    positions of nodes with a :class:`SymbolicLoss`; ``l1``/``l2`` the per-node
    regularization weights ``eta_i``/``kappa_i``; ``box``, ``nonneg`` and ``normball`` the
    library constraints stacked by their classes (:meth:`Constraint.stack`; ``box``:
    positions and ``(k, d)`` bounds; ``normball``: ``{p: (positions, radii)}``);
    ``symbolic_constraints`` the positions of nodes with symbolic constraints; ``constrained``
    the positions with any constraint; ``conic`` the conic nodes (a symbolic loss or a symbolic
    constraint), sorted.

    Graph (16): ``edges`` the oriented ``(e+, e-)`` pairs, ``incidence`` the sparse ``D``,
    ``edge_weights`` the ``A_e``, ``degrees`` ``deg(i)``, ``weighted_degrees`` ``sum_{e at
    i} A_e`` and ``components``/``component_count`` the connected components.  ``lambda`` is
    not part of the structure (it changes without recompiling anything): the capacities
    ``lambda A_e`` are :attr:`ModelDeclaration.capacities`.

    :meth:`ModelDeclaration.structure` builds it (once per version of the model); the
    constructor takes the fields below and checks nothing.

    Parameters
    ----------
    batches : tuple of LossBatch
        One :class:`~gtvmodel.terms.losses.LossBatch` per library loss class, holding its
        nodes' positions and stacked data.
    symbolic : list of int
        Positions of the nodes with a :class:`SymbolicLoss`.
    l1, l2 : ndarray (n,)
        The per-node regularization weights ``eta_i`` (of ``||w_i||_1``) and ``kappa_i``
        (of ``||w_i||_2^2``).
    box : (ndarray (k,), ndarray (k, d), ndarray (k, d)) or None
        The box constraints stacked: positions, lower and upper bounds (None: no box).
    nonneg : ndarray (k,)
        Positions of the nodes constrained to ``w_i >= 0``.
    normball : mapping float -> (ndarray (k,), ndarray (k,))
        ``{p: (positions, radii)}`` of the norm-ball constraints ``||w_i||_p <= r_i``.
    symbolic_constraints : list of int
        Positions of the nodes with symbolic (CVXPY) constraints.
    constrained : ndarray (k,)
        Positions of the nodes with any constraint.
    conic : ndarray (k,)
        The conic nodes (a symbolic loss or a symbolic constraint), sorted.
    edges : ndarray (|E|, 2)
        The oriented edges ``(e+, e-)``, ``e+ < e-``, as position pairs.
    incidence : scipy.sparse.csr_matrix (|E|, n)
        The incidence matrix ``D``, ``(D w)_e = w_{e+} - w_{e-}``.
    edge_weights : ndarray (|E|,)
        The edge weights ``A_e``.
    degrees : ndarray (n,)
        ``deg(i)``, the number of edges at node ``i`` (Algorithm 1's steps).
    weighted_degrees : ndarray (n,)
        ``sum_{e at i} A_e``.
    component_count : int
        The number of connected components of the graph.
    components : ndarray (n,)
        The component label of each node (0 .. ``component_count - 1``).

    Attributes
    ----------
    num_nodes : int
        ``n``, the number of nodes the structure was built for.

    Raises
    ------
    TypeError
        A field is missing or an unknown keyword is given (the dataclass constructor; no
        value is validated).
    dataclasses.FrozenInstanceError
        On an attempt to assign a field (the structure is immutable).

    Examples
    --------
    Two quadratic losses and a box constraint on a path of three nodes (node 2 has no loss):

    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), dim=1)
    >>> model.set_loss(0, gm.QuadraticLoss([1.0], l2=0.5))
    >>> model.set_loss(1, gm.QuadraticLoss([2.0]))
    >>> model.add_constraint(2, gm.Box(0.0, 1.0))
    >>> s = model.structure()
    >>> [(type(b).__name__, b.nodes.tolist()) for b in s.batches], s.l2.tolist()
    ([('QuadraticBatch', [0, 1])], [0.5, 0.0, 0.0])
    >>> s.box[0].tolist(), s.constrained.tolist(), s.conic.tolist()
    ([2], [2], [])
    >>> s.edges.tolist(), s.incidence.toarray().tolist()
    ([[0, 1], [1, 2]], [[1.0, -1.0, 0.0], [0.0, 1.0, -1.0]])
    >>> s.degrees.tolist(), s.component_count, s.num_nodes
    ([1, 2, 1], 1, 3)
    """

    batches: tuple[LossBatch, ...]
    symbolic: list[int]
    l1: np.ndarray
    l2: np.ndarray
    box: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    nonneg: np.ndarray
    normball: Mapping[float, tuple[np.ndarray, np.ndarray]]
    symbolic_constraints: list[int]
    constrained: np.ndarray
    conic: np.ndarray
    edges: np.ndarray
    incidence: sp.csr_matrix
    edge_weights: np.ndarray
    degrees: np.ndarray
    weighted_degrees: np.ndarray
    component_count: int
    components: np.ndarray

    @property
    def num_nodes(self) -> int:
        """``n``, the number of nodes the structure was built for."""
        return int(self.l1.shape[0])


#: The named slots of :class:`ModelCache` (compiled artefacts of one model version).
CacheSlot = Literal[
    "primal",               # duality.compile.PrimalProblem
    "dual",                 # duality.dual.DualProblem
    "conic_nodes",          # duality.conic: {position: node problem}
    "conic_nodes_boxed",    # duality.conic: {position: radius-restricted node problem}
    "conic_joint",          # duality.conic: {node tuple: joint problem}
    "conic_stacked",        # duality.conic: {node tuple: stacked (P_S) with a Parameter S}
    "conic_bounds",         # duality.conic_bounds: {(position, boxed): dual balance}
    "cert_kinds",           # certificates.kinds.NodeKinds
    "cert_gradient",        # certificates.repair: minimum-norm solver on gradient nodes
    "cert_subspace",        # certificates.repair: minimum-norm solver on subspace nodes
    "cert_affine",          # certificates.kinds: AffineConditions (subspace + stiff nodes)
    "cert_gauge",           # certificates.repair: domain-scaling LP
    "cert_projection",      # certificates.repair: flow projection problem
    "cert_general",         # certificates.value: node-conjugate problem
    "cert_lower",           # certificates.radii: loss lower bounds
    "cert_conic_sublevel",  # certificates.radii: {position: sublevel-radius problem}
    "cert_conic_sublevel_stacked",  # certificates.radii: {node tuple: stacked sublevel problem}
    "pd_plan",              # primal_dual.prox: {prox option: node partition of plan()}
    "pd_groups",            # primal_dual.prox: {(loss class, constraint kind): group template}
    "pd_incidence_T",       # primal_dual.loop: D^T as CSR
    "pd_edge_order",        # primal_dual.compiled: the compiled edge pass's order, endpoints
]
SLOTS = frozenset(CacheSlot.__args__)


class ModelCache:
    """The compiled artefacts of one model version, in named slots (:data:`CacheSlot`),
    cleared whenever the declaration changes (never when ``lambda`` changes: every engine
    keeps ``lambda`` out of its compiled data)."""

    def __init__(self) -> None:
        self._slots: dict[str, Any] = {}
        #: how many artefacts were built since the model was created (tests count recompiles)
        self.builds = 0

    @staticmethod
    def _check(slot: str) -> None:
        if slot not in SLOTS:
            raise KeyError(f"unknown model cache slot {slot!r}")

    def get(self, slot: CacheSlot) -> Any:
        """The slot's artefact, or None if it was not built for this version."""
        self._check(slot)
        return self._slots.get(slot)

    def get_or_build(self, slot: CacheSlot, build: Callable[[], _T]) -> _T:
        """The slot's artefact, built by ``build()`` if absent."""
        self._check(slot)
        if slot not in self._slots:
            self.put(slot, build())
        return self._slots[slot]

    def put(self, slot: CacheSlot, value: Any) -> None:
        """Store (or replace) the slot's artefact."""
        self._check(slot)
        self._slots[slot] = value
        self.builds += 1

    def clear(self) -> None:
        """Drop every artefact (the declaration changed; :attr:`builds` keeps counting)."""
        self._slots.clear()


def stack_nodes(n: int, d: int, losses: Mapping[int, Loss],
                 constraints: Mapping[int, list[Constraint]]) -> dict[str, Any]:
    """The node fields of :class:`ModelStructure` for positions ``0..n-1``."""
    groups: dict[type, list[int]] = {}
    symbolic: list[int] = []
    l1 = np.zeros(n)
    l2 = np.zeros(n)
    for i, loss in sorted(losses.items()):
        if loss.batch_class is None:  # an expression in the node's own variable
            symbolic.append(i)
            continue
        l1[i], l2[i] = loss.l1, loss.l2
        if loss.has_data:
            groups.setdefault(type(loss), []).append(i)
    batches = [
        LossBatch(cls, np.array(idx), [losses[i] for i in idx], n, d).seal()
        for cls, idx in groups.items()
    ]
    stacks: dict[Hashable, tuple[list[int], list[Constraint]]] = {}
    for i, cons in sorted(constraints.items()):
        for c in cons:
            pos, items = stacks.setdefault(c.stack_key(), ([], []))
            pos.append(i)
            items.append(c)
    fields: dict[str, Any] = {"box": None, "nonneg": np.zeros(0, dtype=np.int64),
                              "normball": {}, "symbolic_constraints": []}
    for pos, items in stacks.values():
        name, value = type(items[0]).stack(np.array(pos, dtype=np.int64), items, d)
        if name not in fields:  # pragma: no cover - every library constraint names a field
            raise ConstraintError(f"{type(items[0]).__name__}.stack names no structure field "
                                  f"({name!r})")
        fields[name] = {**fields[name], **value} if isinstance(value, Mapping) else value
    if fields["box"] is not None:
        fields["box"] = tuple(frozen_array(a) for a in fields["box"])
    for arrays in fields["normball"].values():
        for a in arrays:
            a.setflags(write=False)
    conic = sorted(set(symbolic) | set(fields["symbolic_constraints"]))
    return dict(
        batches=tuple(batches), symbolic=_FrozenList(symbolic), l1=frozen_array(l1),
        l2=frozen_array(l2), box=fields["box"],
        nonneg=frozen_array(fields["nonneg"], np.int64),
        normball=MappingProxyType(fields["normball"]),
        symbolic_constraints=_FrozenList(fields["symbolic_constraints"]),
        constrained=frozen_array(sorted(i for i, c in constraints.items() if c), np.int64),
        conic=frozen_array(conic, np.int64),
    )


def graph_fields(n: int, edges: np.ndarray, incidence: sp.csr_matrix, weights: np.ndarray,
                  degrees: np.ndarray) -> dict[str, Any]:
    """The graph fields of :class:`ModelStructure` (``degrees``: :attr:`EmpiricalGraph.degrees
    <gtvmodel.graph.EmpiricalGraph>`)."""
    count, labels = components(n, edges)
    wdeg = (np.bincount(edges[:, 0], weights, minlength=n)
            + np.bincount(edges[:, 1], weights, minlength=n))
    return dict(edges=frozen_array(edges), incidence=incidence,
                edge_weights=frozen_array(weights, float),
                degrees=frozen_array(degrees, np.int64),
                weighted_degrees=frozen_array(wdeg, float), component_count=count,
                components=frozen_array(labels))
