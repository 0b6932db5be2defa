"""The declaration of a GTV problem: graph, node losses, node constraints, penalty and lambda.

    minimize  sum_i L_i(w_i) + lambda sum_e A_e phi(w_{e+} - w_{e-})   s.t.  w_i in C_i     (16)

:class:`ModelDeclaration` only *describes* the problem and evaluates it in numpy; the engines
(:mod:`gtvmodel.solve`, :mod:`gtvmodel.certificates`, :mod:`gtvmodel.primal_dual`,
:mod:`gtvmodel.theory`) take a declaration, and :class:`gtvmodel.model.GTVModel` adds their
shortcut methods on top (so no engine imports the class that calls it).  Every result is an
``(n, d)`` array in :attr:`ModelDeclaration.nodes` order.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import cvxpy as cp
import networkx as nx
import numpy as np

from ._norms import norm_rows_upper
from ._validate import as_finite_array, as_nonneg_scalar
from .errors import ConstraintError, DataError, LossError, PenaltyError, UnsupportedError
from .graph import EmpiricalGraph
from .terms.constraints import Box, Constraint, NonNeg, NormBall, SymbolicConstraint
from .terms.losses import Loss, LossBatch, SymbolicLoss, ZeroLoss
from .terms.penalties import Norm2, Penalty

__all__ = ["ModelDeclaration", "ModelStructure"]

_ZERO = ZeroLoss()


@dataclass
class ModelStructure:
    """The model's nodes grouped for vectorized compilation and evaluation.

    ``batches`` holds one :class:`LossBatch` per library loss class; ``symbolic`` the positions
    of nodes with a :class:`SymbolicLoss`; ``l1``/``l2`` the per-node regularization weights
    ``eta_i``/``kappa_i``; ``box``, ``nonneg`` and ``normball`` the library constraints stacked
    (``box``: positions and ``(k, d)`` bounds; ``normball``: ``{p: (positions, radii)}``);
    ``symbolic_constraints`` the positions of nodes with symbolic constraints.
    """

    batches: list[LossBatch]
    symbolic: list[int]
    l1: np.ndarray
    l2: np.ndarray
    box: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    nonneg: np.ndarray
    normball: dict[float, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    symbolic_constraints: list[int] = field(default_factory=list)


class ModelDeclaration:
    """A GTV minimization problem (16) over a ``networkx.Graph``: the declaration and its numpy
    evaluation (:class:`gtvmodel.GTVModel` adds the solver shortcuts).

    Parameters
    ----------
    graph : networkx.Graph
        The empirical graph; edge attribute ``weight`` gives ``A_e`` (default 1).
    dim : int
        Dimension ``d`` of every local parameter ``w_i``.
    penalty : Penalty, default :class:`~gtvmodel.penalties.Norm2`
        The GTV penalty ``phi``.
    lam : float, default 1.0
        The GTV regularization strength ``lambda >= 0``.
    """

    def __init__(self, graph: nx.Graph, dim: int, penalty: Penalty | None = None,
                 lam: float = 1.0):
        self._eg = EmpiricalGraph(graph)
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise DataError(f"dim must be a positive integer, got {dim!r}")
        self.dim = int(dim)
        self._losses: dict[int, Loss] = {}
        self._constraints: dict[int, list[Constraint]] = {}
        self._vars: dict[int, cp.Variable] = {}
        self._version = 0
        self._cache: dict[str, Any] = {}
        self.penalty = Norm2() if penalty is None else penalty
        self.lam = lam

    # ------------------------------------------------------------ graph views
    @property
    def graph(self) -> nx.Graph:
        """A frozen snapshot (copy) of the ``networkx.Graph`` the model was built on.

        The copy is taken when the model is constructed: later changes of the original graph
        are not seen by the model (build a new model for a new graph), and the snapshot
        itself is read-only (``networkx`` raises on any attempt to modify it)."""
        return self._eg.graph

    @property
    def empirical_graph(self) -> EmpiricalGraph:
        """The validated graph with incidence matrix and orientation."""
        return self._eg

    @property
    def nodes(self) -> list[Hashable]:
        """Node labels; the order of every result."""
        return self._eg.nodes

    @property
    def edges(self) -> np.ndarray:
        """Oriented edges ``(e+, e-)`` as position pairs, shape ``(|E|, 2)``."""
        return self._eg.edges

    @property
    def edge_weights(self) -> np.ndarray:
        """Edge weights ``A_e``, shape ``(|E|,)``."""
        return self._eg.edge_weights

    @property
    def incidence(self):
        """Sparse incidence matrix ``D`` (``|E| x n``), ``(D w)_e = w_{e+} - w_{e-}``."""
        return self._eg.incidence

    @property
    def degrees(self) -> np.ndarray:
        """Unweighted degrees ``deg(i)``."""
        return self._eg.degrees

    @property
    def num_nodes(self) -> int:
        return self._eg.num_nodes

    @property
    def num_edges(self) -> int:
        return self._eg.num_edges

    def index(self, node: Hashable) -> int:
        """Position of a node label in :attr:`nodes`."""
        return self._eg.index(node)

    # ------------------------------------------------------------ parameters
    @property
    def penalty(self) -> Penalty:
        """The edge penalty ``phi``."""
        return self._penalty

    @penalty.setter
    def penalty(self, value: Penalty) -> None:
        if not isinstance(value, Penalty):
            raise PenaltyError(f"penalty must be a gtvmodel Penalty, got {type(value).__name__}")
        value.check_dim(self.dim)
        self._penalty = value
        self._touch()

    @property
    def lam(self) -> float:
        """The GTV regularization strength ``lambda``."""
        return self._lam

    @lam.setter
    def lam(self, value: float) -> None:
        self._lam = as_nonneg_scalar(value, "lam")
        # lambda enters compiled problems as a CVXPY Parameter: no recompilation needed.

    # ------------------------------------------------------------ declaration
    def var(self, node: Hashable) -> cp.Variable:
        """The node's CVXPY variable ``w_i`` of shape ``(dim,)`` for symbolic losses/constraints."""
        i = self.index(node)
        v = self._vars.get(i)
        if v is None:
            v = cp.Variable(self.dim, name=f"w[{node!r}]")
            self._vars[i] = v
        return v

    def set_loss(self, node: Hashable, loss: Loss | cp.Expression | Callable) -> None:
        """Set the node loss ``L_i``.

        ``loss`` is a library :class:`~gtvmodel.losses.Loss`, a scalar convex CVXPY expression
        in ``model.var(node)``, or a callable taking a CVXPY variable and returning one.
        """
        i = self.index(node)
        if isinstance(loss, Loss):
            if isinstance(loss, SymbolicLoss) and loss.variable is not self.var(node):
                raise LossError(f"node {node!r}: symbolic loss is stated in another variable")
            if loss.dim is not None and loss.dim != self.dim:
                raise DataError(
                    f"node {node!r}: {loss!r} has dimension {loss.dim} but the model has "
                    f"d = {self.dim}"
                )
        elif isinstance(loss, cp.Expression):
            loss = SymbolicLoss(loss, self.var(node), node)
        elif callable(loss):
            try:
                expr = loss(self.var(node))
            except Exception as exc:  # the user's callable failed: say where
                raise LossError(f"node {node!r}: the loss callable raised {exc!r}") from exc
            if not isinstance(expr, cp.Expression):
                raise LossError(
                    f"node {node!r}: the loss callable must return a CVXPY expression, "
                    f"got {type(expr).__name__}"
                )
            loss = SymbolicLoss(expr, self.var(node), node)
        else:
            raise LossError(
                f"node {node!r}: a loss must be a gtvmodel Loss, a CVXPY expression or a "
                f"callable, got {type(loss).__name__}"
            )
        self._losses[i] = loss
        self._touch()

    def loss(self, node: Hashable) -> Loss:
        """The node's loss (:class:`ZeroLoss` if none was set)."""
        return self._losses.get(self.index(node), _ZERO)

    def loss_at(self, i: int) -> Loss:
        """The loss of the node at position ``i``."""
        return self._losses.get(i, _ZERO)

    def add_constraint(self, node: Hashable,
                       constraint: Constraint | cp.Constraint | Callable) -> None:
        """Add a node constraint ``w_i in C_i``.

        ``constraint`` is a library :class:`~gtvmodel.constraints.Constraint` (``Box``,
        ``NonNeg``, ``NormBall``), a DCP CVXPY constraint on ``model.var(node)``, or a callable
        taking the variable and returning a constraint or a list of them.
        """
        i = self.index(node)
        new: list[Constraint]
        if isinstance(constraint, Constraint):
            if constraint.dim is not None and constraint.dim != self.dim:
                raise DataError(
                    f"node {node!r}: {constraint!r} has dimension {constraint.dim} but the "
                    f"model has d = {self.dim}"
                )
            new = [constraint]
        elif isinstance(constraint, cp.constraints.constraint.Constraint):
            new = [SymbolicConstraint(constraint, self.var(node), node)]
        elif callable(constraint):
            try:
                out = constraint(self.var(node))
            except Exception as exc:
                raise ConstraintError(
                    f"node {node!r}: the constraint callable raised {exc!r}"
                ) from exc
            items = out if isinstance(out, (list, tuple)) else [out]
            new = [SymbolicConstraint(c, self.var(node), node) for c in items]
        else:
            raise ConstraintError(
                f"node {node!r}: a constraint must be a gtvmodel Constraint, a CVXPY constraint "
                f"or a callable, got {type(constraint).__name__}"
            )
        self._constraints.setdefault(i, []).extend(new)
        self._touch()

    def constraints(self, node: Hashable) -> list[Constraint]:
        """The node's constraints (a copy of the list)."""
        return list(self._constraints.get(self.index(node), []))

    def constraints_at(self, i: int) -> list[Constraint]:
        """The constraints of the node at position ``i``."""
        return self._constraints.get(i, [])

    def clear_constraints(self, node: Hashable) -> None:
        """Remove every constraint of a node."""
        self._constraints.pop(self.index(node), None)
        self._touch()

    @property
    def has_symbolic(self) -> bool:
        """True if any node has a symbolic loss or constraint."""
        st = self.structure()
        return bool(st.symbolic or st.symbolic_constraints)

    # ------------------------------------------------------------ structure
    def _touch(self) -> None:
        self._version += 1
        self._cache.clear()

    def structure(self) -> ModelStructure:
        """Nodes grouped by loss class and constraint type (cached until the model changes)."""
        st = self._cache.get("structure")
        if st is not None:
            return st
        n, d = self.num_nodes, self.dim
        groups: dict[type, list[int]] = {}
        symbolic: list[int] = []
        l1 = np.zeros(n)
        l2 = np.zeros(n)
        for i, loss in sorted(self._losses.items()):
            if isinstance(loss, SymbolicLoss):
                symbolic.append(i)
                continue
            l1[i], l2[i] = loss.l1, loss.l2
            if not isinstance(loss, ZeroLoss):
                groups.setdefault(type(loss), []).append(i)
        batches = [
            LossBatch(cls, np.array(idx), [self._losses[i] for i in idx], n, d)
            for cls, idx in groups.items()
        ]
        box_idx, box_lo, box_hi, nonneg = [], [], [], []
        balls: dict[float, tuple[list[int], list[float]]] = {}
        sym_c: list[int] = []
        for i, cons in sorted(self._constraints.items()):
            for c in cons:
                if isinstance(c, Box):
                    lo, hi = c.bounds(d)
                    box_idx.append(i)
                    box_lo.append(lo)
                    box_hi.append(hi)
                elif isinstance(c, NonNeg):
                    nonneg.append(i)
                elif isinstance(c, NormBall):
                    idx, rad = balls.setdefault(c.p, ([], []))
                    idx.append(i)
                    rad.append(c.radius)
                elif isinstance(c, SymbolicConstraint):
                    if not sym_c or sym_c[-1] != i:
                        sym_c.append(i)
                else:  # pragma: no cover - all library constraints are handled above
                    raise ConstraintError(f"unsupported constraint type {type(c).__name__}")
        box = None
        if box_idx:
            box = (np.array(box_idx), np.vstack(box_lo), np.vstack(box_hi))
        st = ModelStructure(
            batches=batches,
            symbolic=symbolic,
            l1=l1,
            l2=l2,
            box=box,
            nonneg=np.array(nonneg, dtype=np.int64),
            normball={p: (np.array(ix), np.array(r)) for p, (ix, r) in balls.items()},
            symbolic_constraints=sym_c,
        )
        self._cache["structure"] = st
        return st

    # ------------------------------------------------------------ numerics
    def check_weights(self, weights: Any, name: str = "weights") -> np.ndarray:
        """Validate an ``(n, d)`` weight array (``(n,)`` is accepted when ``d = 1``)."""
        W = as_finite_array(weights, name)
        n, d = self.num_nodes, self.dim
        if W.ndim == 1 and d == 1 and W.shape[0] == n:
            W = W[:, None]
        if W.shape != (n, d):
            raise DataError(f"{name} must have shape ({n}, {d}) (nodes x dim), got {W.shape}")
        return W

    def check_flows(self, flows: Any, name: str = "flows") -> np.ndarray:
        """Validate an ``(|E|, d)`` flow array."""
        U = as_finite_array(flows, name)
        E, d = self.num_edges, self.dim
        if U.ndim == 1 and d == 1 and U.shape[0] == E:
            U = U[:, None]
        if U.shape != (E, d):
            raise DataError(f"{name} must have shape ({E}, {d}) (edges x dim), got {U.shape}")
        return U

    def loss_values(self, weights: Any) -> np.ndarray:
        """``(L_i(w_i))_i`` in numpy, an ``(n,)`` array (vectorized over library losses)."""
        W = self.check_weights(weights)
        st = self.structure()
        # the regularizers only where their coefficient is positive (an overflowing ||w||^2
        # times a zero coefficient would be NaN); an overflow is +inf, never NaN
        with np.errstate(over="ignore"):
            vals = (np.where(st.l1 > 0, np.abs(W).sum(axis=1) * st.l1, 0.0)
                    + np.where(st.l2 > 0, (W**2).sum(axis=1) * st.l2, 0.0))
        for b in st.batches:
            vals += b.values(W)
        for i in st.symbolic:
            vals[i] = self._losses[i].value(W[i])
        return vals

    def loss_gradients(self, weights: Any) -> np.ndarray:
        """``(grad L_i(w_i))_i``, an ``(n, d)`` array; raises for non-smooth losses."""
        W = self.check_weights(weights)
        st = self.structure()
        for i, loss in self._losses.items():
            if not loss.smooth:
                raise UnsupportedError(
                    f"node {self.nodes[i]!r}: {loss!r} is not differentiable (no gradient)"
                )
        G = 2.0 * st.l2[:, None] * W
        for b in st.batches:
            G += b.gradients(W)
        return G

    def penalty_value(self, weights: Any) -> float:
        """The GTV term ``lambda sum_e A_e phi(w_{e+} - w_{e-})``."""
        W = self.check_weights(weights)
        if self.num_edges == 0:
            return 0.0
        return float(self.lam * self.edge_weights @ self.penalty.rows_value(self._eg.diff(W)))

    def objective(self, weights: Any) -> float:
        """The primal objective ``P(w)`` of (16) in numpy (losses plus GTV term).

        Node constraints are not included; check them with :meth:`constraint_violations`.
        """
        return float(self.loss_values(weights).sum() + self.penalty_value(weights))

    def constraint_violations(self, weights: Any) -> np.ndarray:
        """Per-node largest violation of its constraints ``w_i in C_i`` of (16) (0 where all
        hold, or where node ``i`` has none), ``(n,)``.

        The same values as ``max(c.violation(w_i) for c in C_i)`` of each
        :class:`~gtvmodel.constraints.Constraint`, computed from the stacked constraints of
        :meth:`structure`: ``Box``: ``max_j max(lo_j - w_ij, w_ij - hi_j, 0)`` (``+inf`` where an
        infinite bound meets an infinite weight); ``NonNeg``: ``max(-min_j w_ij, 0)``;
        ``NormBall``: ``max(||w_i||_p - r_i, 0)`` with the proven upper bound of the norm
        (:func:`~gtvmodel._norms.norm_rows_upper`); symbolic constraints (user CVXPY
        expressions) are evaluated node by node.
        """
        W = self.check_weights(weights)
        st = self.structure()
        out = np.zeros(self.num_nodes)
        with np.errstate(over="ignore", invalid="ignore"):
            if st.box is not None:
                pos, lo, hi = st.box
                Wb = W[pos]
                v = np.maximum(np.max(lo - Wb, axis=1, initial=0.0),
                               np.max(Wb - hi, axis=1, initial=0.0))
                np.maximum.at(out, pos, np.where(np.isnan(v), np.inf, v))
            if st.nonneg.size:
                v = np.maximum(-np.min(W[st.nonneg], axis=1, initial=0.0), 0.0)
                np.maximum.at(out, st.nonneg, v)
            for p, (pos, radii) in st.normball.items():
                v = np.maximum(norm_rows_upper(W[pos], p) - radii, 0.0)
                np.maximum.at(out, pos, v)
        for i in st.symbolic_constraints:
            out[i] = max(out[i], *(c.violation(W[i]) for c in self._constraints[i]
                                   if isinstance(c, SymbolicConstraint)))
        return out

    def as_dict(self, weights: Any) -> dict[Hashable, np.ndarray]:
        """``{node: w_i}`` from an ``(n, d)`` array."""
        W = self.check_weights(weights)
        return {v: W[i] for i, v in enumerate(self.nodes)}

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(n={self.num_nodes}, |E|={self.num_edges}, d={self.dim}, "
                f"penalty={self.penalty!r}, lam={self.lam:g})")

