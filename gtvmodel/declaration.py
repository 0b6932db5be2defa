"""The declaration of a GTV problem: graph, node losses, node constraints, penalty and lambda.

    minimize  sum_i L_i(w_i) + lambda sum_e A_e phi(w_{e+} - w_{e-})   s.t.  w_i in C_i     (16)

:class:`ModelDeclaration` only *describes* the problem and evaluates it in numpy; the engines
(:mod:`gtvmodel.solve`, :mod:`gtvmodel.certificates`, :mod:`gtvmodel.primal_dual`,
:mod:`gtvmodel.theory`) take a declaration, and :class:`gtvmodel.model.GTVModel` adds their
shortcut methods on top (so no engine imports the class that calls it).  Every result is an
``(n, d)`` array in :attr:`ModelDeclaration.nodes` order.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable, Hashable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import cvxpy as cp
import networkx as nx
import numpy as np
import scipy.sparse as sp

from ._compat import reserve_ids
from ._norms import norm_rows_upper
from ._samples import data_dim, loss_class, stacked_samples
from ._structure import (
    CacheSlot,
    ModelCache,
    ModelStructure,
    components,
    graph_fields,
    stack_nodes,
)
from ._validate import as_finite_array, check_rows, check_scalar
from .errors import (
    ConstraintError,
    DataError,
    GraphError,
    LossError,
    PenaltyError,
    UnsupportedError,
)
from .graph import EmpiricalGraph
from .terms.constraints import Constraint, SymbolicConstraint
from .terms.losses import Loss, SquaredLoss, SymbolicLoss, ZeroLoss
from .terms.matrix import multi_output_groups, node_shape
from .terms.penalties import Norm2, Penalty

__all__ = ["ModelDeclaration", "ModelStructure", "ModelCache", "CacheSlot", "components"]

_ZERO = ZeroLoss()
_D = TypeVar("_D", bound="ModelDeclaration")


class ModelDeclaration:
    """A GTV minimization problem (16) over a ``networkx.Graph``: the declaration and its numpy
    evaluation (:class:`gtvmodel.GTVModel` adds the solver shortcuts).

    Parameters
    ----------
    graph : networkx.Graph
        The empirical graph; the edge attribute named by ``weight`` gives ``A_e`` (default 1).
    dim : int or (int, int)
        Dimension ``d`` of every local parameter ``w_i``; a pair ``(p, q)`` makes every
        ``w_i = vec(W_i)`` a ``p x q`` matrix, vectorized row-major (``d = p q``, numpy's
        ``reshape``; docs/matrix_parameters.md).
    penalty : Penalty, default :class:`~gtvmodel.terms.penalties.Norm2`
        The GTV penalty ``phi``.
    lam : float, default 1.0
        The GTV regularization strength ``lambda >= 0``.
    weight : str or None, default "weight"
        The edge attribute holding ``A_e``, as networkx functions take it
        (``weight="similarity"``); an edge without it has ``A_e = 1``; ``None``: every
        ``A_e = 1``.  The model stores the ``A_e`` themselves (files keep them).

    Raises
    ------
    GraphError
        ``graph`` is not an undirected simple ``networkx.Graph`` with at least one node, has a
        self-loop, or an edge whose ``A_e`` is not a real number, finite and ``> 0`` (naming
        the edge and the attribute); ``weight`` is not a hashable attribute name or None.
    DataError
        ``dim`` is not an integer ``>= 1`` or a pair ``(p, q)`` of them.
    PenaltyError
        ``penalty`` is not a gtvmodel :class:`~gtvmodel.terms.penalties.Penalty` or cannot act
        on ``R^dim`` (e.g. a ``QuadForm`` whose ``Q`` is not ``(dim, dim)``).
    ParameterError
        ``lam`` is negative, infinite or NaN.

    Examples
    --------
    A path of three nodes, the edge ``(1, 2)`` twice as heavy; no losses set yet:

    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> G = nx.path_graph(3)
    >>> G.edges[1, 2]["weight"] = 2.0
    >>> model = gm.ModelDeclaration(G, dim=2, lam=0.5)
    >>> model.num_nodes, model.num_edges, model.penalty
    (3, 2, Norm2())
    >>> model.edge_weights.tolist(), model.capacities.tolist()  # A_e and lambda A_e
    ([1.0, 2.0], [0.5, 1.0])
    >>> W = np.array([[0.0, 0.0], [3.0, 4.0], [3.0, 4.0]])
    >>> model.penalty_value(W)  # lambda sum_e A_e ||w_{e+} - w_{e-}||_2 = 0.5 * 5
    2.5
    """

    def __init__(self, graph: nx.Graph, dim: int | tuple[int, int],
                 penalty: Penalty | None = None,
                 lam: float = 1.0, weight: Hashable | None = "weight"):
        self._declare(EmpiricalGraph(graph, weight=weight), dim, penalty, lam)

    def _declare(self, eg: EmpiricalGraph, dim: int | tuple[int, int], penalty: Penalty | None,
                 lam: float) -> None:
        self._eg = eg
        #: The shape of one node parameter: ``(d,)``, or ``(p, q)`` for a matrix model
        #: (``w_i = vec(W_i)`` row-major, :mod:`gtvmodel.terms.matrix`).
        self.shape = node_shape(dim)
        self.dim = math.prod(self.shape)
        self._losses: dict[int, Loss] = {}
        self._constraints: dict[int, list[Constraint]] = {}
        self._vars: dict[int, cp.Variable] = {}
        self._version = 0
        self._cache = ModelCache()
        self._structure: ModelStructure | None = None
        self.penalty = Norm2() if penalty is None else penalty
        self.lam = lam

    @classmethod
    def from_edges(cls: type[_D], nodes: int | Iterable[Hashable], edges: Any,
                   weights: Any = None, *, dim: int | tuple[int, int],
                   penalty: Penalty | None = None,
                   lam: float = 1.0) -> _D:
        """A model (16) on the graph of an edge array, without a ``networkx.Graph``.

        ``nodes``: ``n`` (labels ``0..n-1``) or the node labels in order; ``edges``: an integer
        ``(|E|, 2)`` array of node *positions*, each undirected edge once; ``weights``: the
        ``A_e`` (default 1).  See :meth:`EmpiricalGraph.from_arrays
        <gtvmodel.graph.EmpiricalGraph.from_arrays>` (validation; :attr:`graph` is built from the
        arrays on first access).  Then add data with :meth:`set_data` or :meth:`set_losses`.

        Examples
        --------
        >>> import numpy as np, gtvmodel as gm
        >>> model = gm.GTVModel.from_edges(3, np.array([[0, 1], [1, 2]]), [1.0, 2.0], dim=1)
        >>> model.num_nodes, model.num_edges, model.edge_weights.tolist()
        (3, 2, [1.0, 2.0])
        """
        out = cls.__new__(cls)
        out._declare(EmpiricalGraph.from_arrays(nodes, edges, weights), dim, penalty, lam)
        return out

    @classmethod
    def from_arrays(cls: type[_D], graph: nx.Graph, X: Any, y: Any = None,
                    loss: str | type[Loss] = "squared", *, node_index: Any = None,
                    penalty: Penalty | None = None, lam: float = 1.0,
                    weight: Hashable | None = "weight", **loss_options: Any) -> _D:
        """A model (16) on ``graph`` with one data-fit loss per node, built from stacked
        arrays in one call: ``cls(graph, d, penalty, lam, weight)`` then :meth:`set_data`
        (``X``, ``y``, ``loss``, ``node_index``, ``loss_options``: see there; ``d`` is the
        number of columns of ``X``, or ``dim=(p, q)`` for a ``y`` array with an output axis
        of ``q``: multi-output samples).

        Examples
        --------
        >>> import networkx as nx, numpy as np, gtvmodel as gm
        >>> X = np.array([[1.0], [2.0], [1.0]]); y = np.array([1.0, 2.0, -1.0])
        >>> model = gm.GTVModel.from_arrays(nx.path_graph(2), X, y, "squared",
        ...                                 node_index=[0, 0, 1], lam=0.5)
        >>> model.loss(0), model.loss(1)
        (SquaredLoss(m=2, d=1), SquaredLoss(m=1, d=1))
        """
        out = cls(graph, data_dim(X, y), penalty=penalty, lam=lam, weight=weight)
        out.set_data(X, y, loss, node_index=node_index, **loss_options)
        return out

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
    def dim_arg(self) -> int | tuple[int, int]:
        """The ``dim`` this model was declared with: ``d``, or ``(p, q)`` for a matrix model
        (what a new model of the same shape takes)."""
        return self.shape[0] if len(self.shape) == 1 else self.shape  # type: ignore[return-value]

    def as_matrices(self, array: Any) -> np.ndarray:
        """Rows of ``d`` entries (weights ``(n, d)``, flows ``(|E|, d)``, one row ``(d,)``)
        as node parameters of :attr:`shape`: ``(k, p, q)`` (``(p, q)`` for one row) for a
        matrix model, the row-major inverse of ``vec`` (numpy's ``reshape``); a vector
        model's rows are returned as they are.

        Raises
        ------
        DataError
            ``array`` is not finite or its last axis is not ``d``.

        Examples
        --------
        >>> import networkx as nx, numpy as np, gtvmodel as gm
        >>> model = gm.GTVModel(nx.path_graph(2), dim=(2, 3))
        >>> model.dim, model.shape
        (6, (2, 3))
        >>> model.as_matrices(np.arange(12.0).reshape(2, 6))[1]
        array([[ 6.,  7.,  8.],
               [ 9., 10., 11.]])
        """
        A = as_finite_array(array, "array")
        if A.ndim not in (1, 2) or A.shape[-1] != self.dim:
            raise DataError(f"as_matrices: array must have shape (k, {self.dim}) or "
                            f"({self.dim},) (rows of d = {self.dim} entries), got {A.shape}")
        return A.reshape(*A.shape[:-1], *self.shape)

    @property
    def num_nodes(self) -> int:
        """``n = |V|``, the number of nodes of the empirical graph."""
        return self._eg.num_nodes

    @property
    def num_edges(self) -> int:
        """``|E|``, the number of edges (rows of the incidence matrix ``D``)."""
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
        self._lam = check_scalar(value, "lam", min_val=0.0)
        # lambda enters every compiled problem as a CVXPY Parameter (or a rescaling of numpy
        # data): nothing is recompiled when it changes.

    @property
    def capacities(self) -> np.ndarray:
        """The edge capacities ``lambda A_e`` (the scale of the edge terms of (16) and of
        the flows ``||u_e||_* <= lambda A_e`` of (27)), shape ``(|E|,)``."""
        return self._lam * self.edge_weights

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
        """Set the node loss ``L_i`` of (16) (replacing the previous one).

        ``loss`` is a library :class:`~gtvmodel.terms.losses.Loss`, a scalar convex CVXPY
        expression in ``model.var(node)``, or a callable taking a CVXPY variable and returning
        one (both become a :class:`~gtvmodel.terms.losses.SymbolicLoss`).

        Examples
        --------
        >>> import cvxpy as cp, networkx as nx, numpy as np, gtvmodel as gm
        >>> model = gm.GTVModel(nx.path_graph(3), dim=2, lam=0.5)
        >>> model.set_loss(0, gm.SquaredLoss([[1.0, 0.0], [0.0, 1.0]], [1.0, 2.0]))
        >>> model.set_loss(1, cp.sum_squares(model.var(1) - np.array([1.0, 1.0])))
        >>> model.set_loss(2, lambda w: cp.norm1(w - 1.0))
        >>> model.loss(0), type(model.loss(1)).__name__, type(model.loss(2)).__name__
        (SquaredLoss(m=2, d=2), 'SymbolicLoss', 'SymbolicLoss')
        """
        self._losses[self.index(node)] = self._as_loss(node, loss)
        self._touch()

    def _as_loss(self, node: Hashable, loss: Loss | cp.Expression | Callable) -> Loss:
        """The :class:`Loss` that :meth:`set_loss` stores for ``loss`` at ``node``."""
        if isinstance(loss, Loss):
            if loss.variable is not None and loss.variable is not self.var(node):
                raise LossError(f"node {node!r}: symbolic loss is stated in another variable")
            if loss.dim is not None and loss.dim != self.dim:
                raise DataError(
                    f"node {node!r}: {loss!r} has dimension {loss.dim} but the model has "
                    f"d = {self.dim}"
                )
            return loss
        if isinstance(loss, cp.Expression):
            return SymbolicLoss(loss, self.var(node), node)
        if callable(loss):
            try:
                expr = loss(self.var(node))
            except Exception as exc:  # the user's callable failed: say where
                raise LossError(f"node {node!r}: the loss callable raised {exc!r}") from exc
            if not isinstance(expr, cp.Expression):
                raise LossError(
                    f"node {node!r}: the loss callable must return a CVXPY expression, "
                    f"got {type(expr).__name__}"
                )
            return SymbolicLoss(expr, self.var(node), node)
        raise LossError(
            f"node {node!r}: a loss must be a gtvmodel Loss, a CVXPY expression or a "
            f"callable, got {type(loss).__name__}"
        )

    def set_losses(self, losses: Mapping[Hashable, Loss | cp.Expression | Callable]) -> None:
        """Set many node losses at once: ``{node: loss}``, each as :meth:`set_loss` takes it.

        Every entry is checked before any is stored (an unknown node or a bad loss raises
        naming the node and leaves the model unchanged), and the model's compiled artefacts
        are dropped once, not once per node.

        Examples
        --------
        >>> import networkx as nx, gtvmodel as gm
        >>> model = gm.GTVModel(nx.path_graph(3), dim=1)
        >>> model.set_losses({0: gm.QuadraticLoss([1.0]), 2: gm.QuadraticLoss([-1.0])})
        >>> model.loss(0), model.loss(1)
        (QuadraticLoss(d=1), ZeroLoss())
        """
        if not isinstance(losses, Mapping):
            raise LossError(f"losses must be a mapping {{node: loss}}, got "
                            f"{type(losses).__name__}")
        index, new = self.index, {}
        for node, loss in losses.items():
            new[index(node)] = self._as_loss(node, loss)
        self._losses.update(new)
        self._touch()

    def set_data(self, X: Any, y: Any = None, loss: str | type[Loss] = "squared", *,
                 node_index: Any = None, **loss_options: Any) -> None:
        """Set one data-fit loss ``L_i(w) = (1/m_i) sum_r ell(x_r^T w, y_r)`` per node from
        stacked samples, in one call (ragged ``m_i``; nodes without rows keep their loss).

        ``X`` is either

        * an ``(M, d)`` array of all samples with ``y`` ``(M,)`` and ``node_index`` ``(M,)``
          naming each row's node (rows in any order; a node's rows keep their order);
        * an ``(n, m, d)`` array with ``y`` ``(n, m)``: ``m`` samples per node in
          :attr:`nodes` order (no ``node_index``);
        * a mapping ``{node: (X_i, y_i)}`` (``y`` and ``node_index`` not given).

        ``loss`` is a loss kind (``"squared"``, ``"logistic"``, ``"hinge"``, ``"absolute"``,
        ``"huber"``, ..., the registry :data:`gtvmodel.terms.spec.LOSSES`) or a
        :class:`~gtvmodel.terms.losses.Loss` class taking ``(X_i, y_i, **loss_options)``
        (e.g. ``M=`` for Huber, ``l1=``/``l2=``).  The samples are validated once over the
        whole stack (:meth:`DataFitLoss.check_samples
        <gtvmodel.terms.losses.DataFitLoss.check_samples>`, binary labels as one label set),
        then stored like :meth:`set_losses`.  Unknown nodes raise :class:`UnknownNodeError`,
        mismatched lengths and NaN/inf data :class:`DataError`, naming the argument.

        A matrix model (``dim=(p, q)``) also takes multi-output samples: ``X`` with ``p``
        columns and ``y`` with a last axis of ``q`` (``(M, q)``, ``(n, m, q)``, or ``Y_i``
        ``(m_i, q)`` in a mapping); each node then gets the squared loss ``s(m_i) ||Y_i - X_i
        W_i||_F^2`` (:func:`~gtvmodel.terms.matrix.multi_output_squared_loss`, ``loss`` must
        be ``"squared"``, its options ``scaling``, ``l1``, ``l2``).

        Examples
        --------
        >>> import networkx as nx, numpy as np, gtvmodel as gm
        >>> model = gm.GTVModel(nx.path_graph(3), dim=2)
        >>> X = np.arange(12.0).reshape(6, 2); y = np.array([1, 0, 1, 1, 0, 0])
        >>> model.set_data(X, y, "logistic", node_index=[0, 0, 2, 2, 2, 0], l2=0.1)
        >>> model.loss(0), model.loss(1), model.loss(2)
        (LogisticLoss(m=3, d=2, l2=0.1), ZeroLoss(), LogisticLoss(m=3, d=2, l2=0.1))
        >>> model.loss(0).y.tolist()  # rows 0, 1, 5 in order; {0, 1} labels stored as -1/+1
        [1.0, -1.0, -1.0]
        """
        cls = loss_class(loss)
        Xs, ys, pos = stacked_samples(self, X, y, node_index)
        order = np.argsort(pos, kind="stable")
        counts = np.bincount(pos, minlength=self.num_nodes)
        owners = np.flatnonzero(counts)
        if ys.ndim == 2:  # multi-output samples of a matrix model (docs/matrix_parameters.md)
            if not issubclass(cls, SquaredLoss):
                raise LossError(f"set_data: multi-output samples (y of shape (M, q)) take the "
                                f"squared loss, got {cls.__name__}")
            made = multi_output_groups(Xs[order], ys[order], counts[owners], **loss_options)
        else:
            made = cls.from_groups(Xs[order], ys[order], counts[owners], **loss_options)
        self._losses.update(zip(owners.tolist(), made, strict=True))
        self._touch()

    def loss(self, node: Hashable) -> Loss:
        """The node's loss (:class:`ZeroLoss` if none was set)."""
        return self._losses.get(self.index(node), _ZERO)

    def loss_at(self, i: int) -> Loss:
        """The loss of the node at position ``i``."""
        return self._losses.get(i, _ZERO)

    def add_constraint(self, node: Hashable,
                       constraint: Constraint | cp.Constraint | Callable) -> None:
        """Add a node constraint ``w_i in C_i`` of (16) (a node may have several).

        ``constraint`` is a library :class:`~gtvmodel.terms.constraints.Constraint` (``Box``,
        ``NonNeg``, ``NormBall``), a DCP CVXPY constraint on ``model.var(node)``, or a callable
        taking the variable and returning a constraint or a list of them (each becomes a
        :class:`~gtvmodel.terms.constraints.SymbolicConstraint`).

        Examples
        --------
        >>> import cvxpy as cp, networkx as nx, numpy as np, gtvmodel as gm
        >>> model = gm.GTVModel(nx.path_graph(3), dim=2)
        >>> model.add_constraint(0, gm.Box(0.0, 1.0))
        >>> model.add_constraint(1, model.var(1)[0] >= 2.0)
        >>> model.add_constraint(2, lambda w: [w >= 0, cp.sum(w) <= 1])
        >>> model.constraints(0), len(model.constraints(2))
        ([Box(lo=0.0, hi=1.0)], 2)
        >>> model.constraint_violations(np.ones((3, 2)))  # largest violation per node
        array([0., 1., 1.])
        """
        i = self.index(node)
        new: list[Constraint]
        if isinstance(constraint, Constraint):
            if isinstance(constraint, SymbolicConstraint) and constraint.variable is not \
                    self.var(node):
                raise ConstraintError(
                    f"node {node!r}: symbolic constraint is stated in another variable")
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

    def set_variable_values(self, weights: Any) -> None:
        """Give every node variable created by :meth:`var` its row of ``weights`` as its
        CVXPY ``value`` (what CVXPY users read after a solve: ``model.var(i).value``).  The
        exact solver calls it with its answer."""
        W = self.check_weights(weights)
        for i, v in self._vars.items():
            v.value = W[i].copy()

    def variable_if_any(self, i: int) -> cp.Variable | None:
        """The CVXPY variable of the node at position ``i`` if :meth:`var` created one (the
        variable its symbolic loss and constraints are stated in), else None."""
        return self._vars.get(i)

    def declared_losses(self) -> Mapping[int, Loss]:
        """``{position: loss}`` of the nodes whose loss was set (a read-only view)."""
        return MappingProxyType(self._losses)

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
        self._structure = None

    @property
    def cache(self) -> ModelCache:
        """The compiled artefacts of this version of the model (:class:`ModelCache`)."""
        return self._cache

    def __getstate__(self) -> dict[str, Any]:
        """Pickling and ``copy.deepcopy`` keep the declaration and drop what is rebuilt on
        first use: the :class:`ModelStructure` and the :class:`ModelCache` of compiled
        artefacts (CVXPY problems, solver handles, closures), so a copy answers as the
        original does after its own recompilation."""
        state = self.__dict__.copy()
        state["_cache"] = ModelCache()
        state["_structure"] = None
        return state

    def __deepcopy__(self, memo: dict[int, Any]) -> ModelDeclaration:
        """``copy.deepcopy`` goes through :mod:`pickle`: CVXPY's own deep copy gives the copied
        variables new ids but keeps the canonical forms cached on the expressions of a solved
        model, which name the old ones (its next solve would fail inside CVXPY).  The copy's
        symbolic terms keep the original's ids; the two models never share a problem."""
        return pickle.loads(pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL))

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore a pickled declaration; CVXPY's id counter is moved past the ids of the
        restored symbolic terms (:func:`gtvmodel._compat.reserve_ids`), so no variable built
        afterwards in this process shares an id with one of them."""
        self.__dict__.update(state)
        self.__dict__.setdefault("shape", (self.dim,))  # pickled before matrix parameters
        reserve_ids([*self._vars.values(),
                     *(loss.expr for loss in self._losses.values()
                       if loss.variable is not None),  # symbolic losses (Loss.variable)
                     *(c.constraint for cs in self._constraints.values() for c in cs
                       if isinstance(c, SymbolicConstraint))])

    def structure(self) -> ModelStructure:
        """The model's :class:`ModelStructure` (built once per version of the model)."""
        if self._structure is None:
            eg = self._eg
            self._structure = ModelStructure(
                **stack_nodes(self.num_nodes, self.dim, self._losses, self._constraints),
                **graph_fields(self.num_nodes, eg.edges, eg.incidence, eg.edge_weights,
                                eg.degrees))
        return self._structure

    def node_structure(self, nodes: Iterable[int]) -> ModelStructure:
        """The :class:`ModelStructure` of the edgeless problem of the given positions alone,
        relabelled ``0..g-1`` in the given order (their losses and constraints; symbolic ones
        keep their node's variable, :meth:`variable_if_any`)."""
        idx = [int(i) for i in nodes]
        g = len(idx)
        losses = {j: self._losses[i] for j, i in enumerate(idx) if i in self._losses}
        cons = {j: self._constraints[i] for j, i in enumerate(idx) if self._constraints.get(i)}
        no_edges = np.zeros((0, 2), dtype=np.int64)
        return ModelStructure(**stack_nodes(g, self.dim, losses, cons),
                              **graph_fields(g, no_edges, sp.csr_matrix((0, g)), np.zeros(0),
                                              np.zeros(g)))

    def restricted(self, graph: nx.Graph, carry: Iterable[Hashable]) -> ModelDeclaration:
        """A declaration over ``graph`` (its nodes are labels of this model) with this model's
        penalty, ``lambda``, edge-weight attribute, and the losses, constraints and node
        variables of the nodes ``carry`` (the same objects: symbolic ones keep their variables);
        the other nodes of ``graph`` have none.  A shard of a distributed run
        (:mod:`gtvmodel.primal_dual.distributed`) is such a declaration: its own nodes carried,
        its neighbours in other shards present only for their edges (degrees)."""
        out = ModelDeclaration(graph, self.dim_arg, self.penalty, self.lam,
                               weight=self._eg.weight)
        for label in carry:
            i, j = self.index(label), out.index(label)
            if i in self._losses:
                out._losses[j] = self._losses[i]
            if self._constraints.get(i):
                out._constraints[j] = list(self._constraints[i])
            if i in self._vars:
                out._vars[j] = self._vars[i]
        return out

    def variant(self, *, penalty: Penalty | None = None, lam: float | None = None,
                graph: nx.Graph | None = None, weight: Hashable | None = None
                ) -> ModelDeclaration:
        """The same problem (16) with another ``penalty``, ``lam`` or ``graph`` (default: this
        model's): a new model of this class with the same node losses ``L_i`` and constraints
        ``C_i`` (the same objects; symbolic ones keep their node variables, which the two models
        share), so nothing is copied and this model is left unchanged.

        ``graph`` must have exactly this model's nodes (in any order: the variant keeps this
        model's node order, so weight arrays stay interchangeable); its edge weights ``A_e`` are
        read from the attribute ``weight`` (default: the attribute this model reads).  Used for
        the baselines' target problems and for the sparsified graphs of
        :func:`gtvmodel.graphs.sparsification_cost`.

        Examples
        --------
        >>> import networkx as nx, gtvmodel as gm
        >>> model = gm.GTVModel(nx.complete_graph(4), dim=1, lam=0.5)
        >>> model.set_loss(0, gm.QuadraticLoss([1.0]))
        >>> tree = model.variant(graph=nx.path_graph([3, 2, 1, 0]))
        >>> tree.nodes, tree.num_edges, tree.lam, tree.loss(0)
        ([0, 1, 2, 3], 3, 0.5, QuadraticLoss(d=1))
        """
        g = self.graph if graph is None else self._in_model_order(graph)
        out = type(self)(g, self.dim_arg, self.penalty if penalty is None else penalty,
                         self.lam if lam is None else lam,
                         weight=self._eg.weight if weight is None else weight)
        out._losses = dict(self._losses)
        out._constraints = {i: list(c) for i, c in self._constraints.items()}
        out._vars = dict(self._vars)
        return out

    def _in_model_order(self, graph: nx.Graph) -> nx.Graph:
        """``graph`` with its nodes in this model's order (:class:`GraphError` naming a node
        that only one of the two has)."""
        if not isinstance(graph, nx.Graph):
            raise GraphError(f"variant: graph must be a networkx.Graph, got "
                             f"{type(graph).__name__}")
        if list(graph.nodes) == self.nodes:
            return graph
        odd = set(self.nodes).symmetric_difference(graph.nodes)
        if odd:
            node = next(iter(odd))
            side = "the graph" if node in graph else "the model"
            raise GraphError(f"variant: node {node!r} is only in {side}; the graph must have "
                             "exactly the model's nodes")
        ordered = type(graph)()
        ordered.add_nodes_from(self.nodes)
        ordered.add_edges_from(graph.edges(data=True))
        return ordered

    # ------------------------------------------------------------ numerics
    def check_weights(self, weights: Any, name: str = "weights") -> np.ndarray:
        """Validate an ``(n, d)`` weight array (``(n,)`` is accepted when ``d = 1``, ``(n, p,
        q)`` for a matrix model, flattened row-major)."""
        return check_rows(self._flat(weights, self.num_nodes), name, self.num_nodes, self.dim,
                          rows_label="nodes")

    def check_flows(self, flows: Any, name: str = "flows") -> np.ndarray:
        """Validate an ``(|E|, d)`` flow array (``(|E|,)`` is accepted when ``d = 1``,
        ``(|E|, p, q)`` for a matrix model, flattened row-major)."""
        return check_rows(self._flat(flows, self.num_edges), name, self.num_edges, self.dim,
                          rows_label="edges")

    def _flat(self, array: Any, rows: int) -> Any:
        """``array`` as ``(rows, d)`` if it is ``(rows, p, q)`` of a matrix model (the
        row-major ``vec`` of each matrix), otherwise as given."""
        if len(self.shape) == 2 and getattr(array, "shape", None) == (rows, *self.shape):
            return np.reshape(array, (rows, self.dim))
        return array

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
        return float(self.capacities @ self.penalty.rows_value(self._eg.diff(W)))

    def objective(self, weights: Any) -> float:
        """The primal objective ``P(w) = sum_i L_i(w_i) + lambda sum_e A_e phi(w_{e+} - w_{e-})``
        of (16) in numpy (losses plus GTV term), for ``(n, d)`` weights in model order.

        Node constraints are not included; check them with :meth:`constraint_violations`.

        Examples
        --------
        >>> import networkx as nx, numpy as np, gtvmodel as gm
        >>> model = gm.GTVModel(nx.path_graph(3), dim=1, lam=0.5)
        >>> model.set_loss(0, gm.QuadraticLoss([1.0]))
        >>> model.set_loss(2, gm.QuadraticLoss([-1.0]))
        >>> model.objective(np.zeros((3, 1)))  # L_0(0) + L_2(0)
        2.0
        >>> W = np.array([[0.75], [0.0], [-0.75]])  # the GTV solution
        >>> model.loss_values(W), model.penalty_value(W), model.objective(W)
        (array([0.0625, 0.    , 0.0625]), 0.75, 0.875)
        """
        return float(self.loss_values(weights).sum() + self.penalty_value(weights))

    def constraint_violations(self, weights: Any) -> np.ndarray:
        """Per-node largest violation of its constraints ``w_i in C_i`` of (16) (0 where all
        hold, or where node ``i`` has none), ``(n,)``.

        The same values as ``max(c.violation(w_i) for c in C_i)`` of each
        :class:`~gtvmodel.terms.constraints.Constraint`, computed from the stacked constraints of
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
        for i in st.symbolic_constraints:  # user CVXPY constraints: node by node (all of the
            out[i] = max(c.violation(W[i]) for c in self._constraints[i])  # node's, no switch)
        return out

    def weights_by_node(self, weights: Any) -> dict[Hashable, np.ndarray]:
        """``{node: w_i}`` from an ``(n, d)`` array (what a result's ``weights_by_node()``
        gives for its own weights)."""
        W = self.check_weights(weights)
        return {v: W[i] for i, v in enumerate(self.nodes)}

    def __repr__(self) -> str:
        shape = f", shape={self.shape}" if len(self.shape) == 2 else ""
        return (f"{type(self).__name__}(n={self.num_nodes}, |E|={self.num_edges}, d={self.dim}"
                f"{shape}, penalty={self.penalty!r}, lam={self.lam:g})")

