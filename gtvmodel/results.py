"""The shared vocabulary of every result and report (bottom layer: numpy and the errors only).

Every object an engine returns -- :class:`~gtvmodel.solution.Solution`
(:func:`~gtvmodel.solve.exact.solve_exact`), :class:`~gtvmodel.duality.dual.DualSolution`
(:func:`~gtvmodel.duality.dual.solve_dual`), :class:`~gtvmodel.primal_dual.result.PrimalDualResult`
(Algorithm 1), :class:`~gtvmodel.certificates.certificate.Certificate` (:func:`certify`) and
the theory reports :class:`~gtvmodel.theory.ClusterReport` /
:class:`~gtvmodel.theory.RecoveryReport` -- derives from :class:`Result` and so speaks the same
words:

``weights`` ``(n, d)`` / ``flows`` ``(|E|, d)``
    Arrays in model order (rows follow ``model.nodes`` resp. the oriented edges ``(e+, e-)``
    of docs/conventions.md), where the result has them.
:meth:`Result.weight` / :meth:`Result.flow`
    One row by label in O(1) (a label -> position dict built once per result, on the first
    lookup).  ``flow((a, b))`` accepts an edge in either orientation: with ``e = (e+, e-)``
    the model's orientation, ``flow((e+, e-)) = u_e`` and ``flow((e-, e+)) = -u_e``, the flow
    from ``e-`` to ``e+`` (``u_e`` enters ``(D^T u)_{e+}`` with ``+`` and ``(D^T u)_{e-}`` with
    ``-``; reversing the orientation of ``e`` flips the sign of ``(D w)_e`` and of ``u_e``).
``status`` (str), ``success`` (bool)
    What happened, and the one success word (as in ``scipy.optimize.OptimizeResult``).
``timings``
    One mapping of phase -> seconds.
:meth:`Result.to_dict`
    A JSON-serializable summary: the class name (``"result"``), ``status``, ``success``,
    ``timings`` and the result's scalars and small metadata (non-finite floats as the strings
    ``"inf"``, ``"-inf"``, ``"nan"``; labels that JSON cannot hold as their ``repr``).  Arrays
    (and other bulky fields such as a primal-dual ``history``) are included as nested lists
    only with ``arrays=True``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from .errors import GraphError, UnknownNodeError, UnsupportedError

__all__ = ["ColumnTable", "Labels", "Result", "brief", "jsonable", "failed_result"]


class Labels:
    """Node labels and oriented edges of the model a result belongs to.

    ``nodes``: the labels in model order; ``edges``: ``(|E|, 2)`` integer positions
    ``(e+, e-)`` with ``e+ < e-`` (``model.edges``).  Both are kept by reference; the lookup
    dicts are built on the first lookup and reused.
    """

    __slots__ = ("nodes", "edges", "_node_pos", "_edge_pos")

    def __init__(self, nodes: Sequence[Hashable] = (), edges: Any = None) -> None:
        self.nodes = nodes
        self.edges = (np.zeros((0, 2), dtype=np.int64) if edges is None
                      else np.asarray(edges, dtype=np.int64).reshape(-1, 2))
        self._node_pos: dict[Hashable, int] | None = None
        self._edge_pos: dict[int, int] | None = None

    def node(self, node: Hashable) -> int:
        """Position of a node label (:class:`UnknownNodeError` naming it if absent)."""
        if self._node_pos is None:
            self._node_pos = {v: i for i, v in enumerate(self.nodes)}
        try:
            return self._node_pos[node]
        except (KeyError, TypeError):
            raise UnknownNodeError(f"node {node!r} is not in the graph") from None

    def edge(self, edge: Any) -> tuple[int, float]:
        """``(position, sign)`` of an edge given as a pair of node labels in either orientation:
        sign ``+1`` for ``(e+, e-)``, ``-1`` for ``(e-, e+)``.  An endpoint that is not a node
        raises :class:`UnknownNodeError`, a pair that is not an edge :class:`GraphError`."""
        try:
            a, b = edge
        except (TypeError, ValueError):
            raise GraphError(f"edge {edge!r} is not a pair of node labels (a, b)") from None
        i, j = self.node(a), self.node(b)
        n = len(self.nodes)
        if self._edge_pos is None:
            keys = self.edges[:, 0] * n + self.edges[:, 1]
            self._edge_pos = dict(zip(keys.tolist(), range(len(keys)), strict=True))
        key, sign = (i * n + j, 1.0) if i < j else (j * n + i, -1.0)
        e = self._edge_pos.get(key) if i != j else None
        if e is None:
            raise GraphError(f"({a!r}, {b!r}) is not an edge of the graph")
        return e, sign


class ColumnTable:
    """Base of the per-iteration records (:class:`~gtvmodel.primal_dual.result.History`,
    :class:`~gtvmodel.baselines.result.RoundHistory`): a dataclass whose fields are equally long
    numpy columns named in :attr:`COLUMNS`, the ones in :attr:`INTEGER_COLUMNS` integer."""

    COLUMNS: ClassVar[tuple[str, ...]] = ()
    INTEGER_COLUMNS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_rows(cls, rows: list[tuple]) -> Any:
        """The table of the recorded rows (one tuple of :attr:`COLUMNS` per row)."""
        arr = np.array(rows, dtype=float).reshape(-1, len(cls.COLUMNS))
        cols = {name: arr[:, j] for j, name in enumerate(cls.COLUMNS)}
        for name in cls.INTEGER_COLUMNS:
            cols[name] = cols[name].astype(np.int64)
        return cls(**cols)

    def __len__(self) -> int:
        return len(getattr(self, self.COLUMNS[0]))

    def columns(self) -> dict[str, np.ndarray]:
        """The columns as a dict of arrays (e.g. for ``pandas.DataFrame``)."""
        return {name: getattr(self, name) for name in self.COLUMNS}


@dataclasses.dataclass(kw_only=True)
class Result:
    """Base of every result and report (module docstring: the shared vocabulary).

    Subclasses are ``@dataclass(kw_only=True)`` (the base's fields have defaults) that define
    ``status`` and ``success`` (a field or a property) and, where they have them, ``weights``
    ``(n, d)`` and ``flows`` ``(|E|, d)``; the engine that builds one passes
    ``labels=Labels(model.nodes, model.edges)``.

    Parameters
    ----------
    timings : dict
        Seconds per phase (keys listed by each result; empty where nothing was timed).
        Keyword-only, as every field of a result; each is also the attribute of that name.
    labels : Labels
        The model's node labels and edges, for :meth:`weight` and :meth:`flow` (default:
        empty, then those lookups find nothing).

    Raises
    ------
    TypeError
        An unknown or positional argument (the dataclass constructor); the values are stored
        as given, unchecked: the engines build results.

    Examples
    --------
    Results come from the engines; every one answers the same questions by node label and
    edge:

    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(["a", "b", "c"]), dim=1, lam=0.5)
    >>> model.set_loss("a", gm.QuadraticLoss([1.0]))
    >>> model.set_loss("c", gm.QuadraticLoss([-1.0]))
    >>> sol = gm.solve_exact(model)
    >>> isinstance(sol, gm.Result), "solve" in sol.timings
    (True, True)
    >>> round(float(sol.weight("a")[0]), 4), round(float(sol.flow(("a", "b"))[0]), 4)
    (0.75, 0.5)
    """

    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    labels: Labels = dataclasses.field(default_factory=Labels, repr=False, compare=False)

    #: Fields that :meth:`to_dict` leaves out unless ``arrays=True`` (arrays always are).
    _BULKY: ClassVar[tuple[str, ...]] = ()
    #: Properties :meth:`__repr__` shows after the fields, where a subclass has them.
    _REPR_PROPERTIES: ClassVar[tuple[str, ...]] = ("objective", "gap", "relative_gap")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give every subclass :meth:`__repr__` below unless it writes its own: ``@dataclass``
        adds a field-by-field ``__repr__`` only to a class that does not define one, and that
        one prints every array and per-node dict in full (tens of thousands of characters on
        a large graph)."""
        super().__init_subclass__(**kwargs)
        if "__repr__" not in cls.__dict__:
            cls.__repr__ = Result.__repr__  # type: ignore[method-assign]

    def __repr__(self) -> str:
        """A few lines whatever the graph size, as ``scipy.optimize.OptimizeResult`` prints:
        the class, ``status`` and ``success``, the graph's size, then one line per field
        (numbers in full, arrays as their shape, long lists and dicts as their length); the
        data stay attributes.

        Examples
        --------
        >>> import networkx as nx, gtvmodel as gm
        >>> model = gm.GTVModel(nx.path_graph(["a", "b", "c"]), dim=1, lam=0.5)
        >>> model.set_loss("a", gm.QuadraticLoss([1.0]))
        >>> sol = gm.solve_exact(model)
        >>> print(repr(sol).splitlines()[0])
        Solution(status='optimal', success=True) on 3 nodes, 2 edges
        >>> print([line for line in repr(sol).splitlines() if "weights" in line][0])
          weights: array (3, 1) float64
        """
        head = f"{type(self).__name__}(status={self.status!r}, success={bool(self.success)})"
        if len(self.labels.nodes):
            head += f" on {len(self.labels.nodes)} nodes, {len(self.labels.edges)} edges"
        names = [f.name for f in dataclasses.fields(self)
                 if f.repr and f.name not in ("labels", "status", "success")]
        names += [p for p in self._REPR_PROPERTIES  # key numbers that are properties
                  if isinstance(getattr(type(self), p, None), property)]
        return "\n".join([head] + [f"  {name}: {brief(getattr(self, name))}" for name in names])

    # ------------------------------------------------------------------ lookups
    def _array(self, name: str) -> np.ndarray:
        arr = getattr(self, name, None)
        if arr is None:
            raise UnsupportedError(f"{type(self).__name__} has no {name}")
        return arr

    def weight(self, node: Hashable) -> np.ndarray:
        """``w_i`` of a node label (row of :attr:`weights`).

        Examples
        --------
        >>> import networkx as nx, numpy as np, gtvmodel as gm
        >>> model = gm.GTVModel(nx.path_graph(["a", "b", "c"]), dim=1, lam=0.5)
        >>> model.set_loss("a", gm.QuadraticLoss([1.0]))
        >>> model.set_loss("c", gm.QuadraticLoss([-1.0]))
        >>> sol = gm.solve_exact(model)
        >>> np.round(sol.weight("a"), 4), np.round(sol.weight("c"), 4)
        (array([0.75]), array([-0.75]))
        """
        W = self._array("weights")
        return W[self.labels.node(node)]

    def flow(self, edge: Any) -> np.ndarray:
        """``u_e`` of an edge ``(a, b)`` of node labels; ``-u_e`` when given as ``(e-, e+)``
        (module docstring).

        Examples
        --------
        >>> import networkx as nx, numpy as np, gtvmodel as gm
        >>> model = gm.GTVModel(nx.path_graph(["a", "b", "c"]), dim=1, lam=0.5)
        >>> model.set_loss("a", gm.QuadraticLoss([1.0]))
        >>> model.set_loss("c", gm.QuadraticLoss([-1.0]))
        >>> sol = gm.solve_exact(model)
        >>> np.round(sol.flow(("a", "b")), 4), np.round(sol.flow(("b", "a")), 4)
        (array([0.5]), array([-0.5]))
        """
        U = self._array("flows")
        e, sign = self.labels.edge(edge)
        return U[e] if sign > 0 else -U[e]

    def weights_by_node(self) -> dict[Hashable, np.ndarray]:
        """``{node: w_i}`` for all nodes."""
        W = self._array("weights")
        return dict(zip(self.labels.nodes, W, strict=True))

    # ------------------------------------------------------------------ summaries
    def to_dict(self, arrays: bool = False) -> dict[str, Any]:
        """A JSON-serializable summary (module docstring); ``arrays=True`` adds the arrays and
        bulky fields as nested lists.

        Examples
        --------
        >>> import json
        >>> import networkx as nx, numpy as np, gtvmodel as gm
        >>> model = gm.GTVModel(nx.path_graph(["a", "b", "c"]), dim=1, lam=0.5)
        >>> model.set_loss("a", gm.QuadraticLoss([1.0]))
        >>> model.set_loss("c", gm.QuadraticLoss([-1.0]))
        >>> sol = gm.solve_exact(model)
        >>> d = sol.to_dict()
        >>> d["result"], d["status"], d["success"], round(d["objective"], 4)
        ('Solution', 'optimal', True, 0.875)
        >>> "weights" in d, "weights" in sol.to_dict(arrays=True)
        (False, True)
        >>> sol.to_dict(arrays=True)["edges"]
        [['a', 'b'], ['b', 'c']]
        >>> isinstance(json.dumps(d), str)
        True
        """
        out: dict[str, Any] = {"result": type(self).__name__, "status": str(self.status),
                               "success": bool(self.success)}
        for f in dataclasses.fields(self):
            if f.name in ("labels", "status", "success"):
                continue
            value = getattr(self, f.name)
            if not arrays and (f.name in self._BULKY or isinstance(value, np.ndarray)):
                continue
            out[f.name] = jsonable(value, arrays)
        if arrays and self.labels.nodes:
            out["nodes"] = jsonable(list(self.labels.nodes), arrays)
            out["edges"] = [[jsonable(self.labels.nodes[h], arrays),
                             jsonable(self.labels.nodes[t], arrays)]
                            for h, t in self.labels.edges.tolist()]
        return out

    def to_json(self, arrays: bool = False, indent: int | None = 2) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(arrays), indent=indent)


def jsonable(x: Any, arrays: bool = False) -> Any:
    """``x`` in JSON's types: results by :meth:`Result.to_dict`, other dataclasses field by
    field, mappings (keys other than strings as their ``repr``), lists and arrays as
    lists, tuples (node labels) as their ``repr``, non-finite floats as ``"inf"``, ``"-inf"``
    or ``"nan"``, other objects as ``repr``."""
    if isinstance(x, Result):
        return x.to_dict(arrays)
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        return v if math.isfinite(v) else ("nan" if math.isnan(v) else "inf" if v > 0
                                           else "-inf")
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist(), arrays)
    if isinstance(x, Mapping):
        return {_key(k): jsonable(v, arrays) for k, v in x.items()}
    if isinstance(x, tuple):  # a node label such as (row, col): as the label's repr
        return repr(x)
    if isinstance(x, list):
        return [jsonable(v, arrays) for v in x]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: jsonable(getattr(x, f.name), arrays) for f in dataclasses.fields(x)}
    return repr(x)


#: The longest line :func:`brief` writes (characters).
BRIEF_WIDTH = 96


def brief(x: Any, width: int = BRIEF_WIDTH) -> str:
    """``x`` in one short line for :meth:`Result.__repr__`: numbers and strings as they are
    (floats to 6 digits), arrays as ``array (shape) dtype`` (vectors of up to 6 in full), results
    as ``Class(status=...)``, lists and dicts in full when short, else their length and first
    entries; at most ``width`` characters."""
    if isinstance(x, Result):
        text = f"{type(x).__name__}(status={x.status!r})"
    elif isinstance(x, (float, np.floating)):
        text = f"{float(x):.6g}"
    elif isinstance(x, np.ndarray):
        text = (np.array2string(x, precision=4, separator=", ") if x.ndim <= 1 and x.size <= 6
                else f"array {x.shape} {x.dtype}")
    elif isinstance(x, Mapping):
        shown = list(x.items())[:6 if len(x) <= 6 else 4]
        items = [f"{k!r}: {brief(v, width)}" for k, v in shown]
        text = "{" + ", ".join(items + ["..."] * (len(x) > 6)) + "}"
        if len(x) > 6 or len(text) > width:
            text = f"dict of {len(x)}: " + text
    elif isinstance(x, (list, tuple)):
        items = [brief(v, width) for v in x[:6 if len(x) <= 6 else 4]] + ["..."] * (len(x) > 6)
        text = ("[" if isinstance(x, list) else "(") + ", ".join(items) + (
            "]" if isinstance(x, list) else ")")
        if len(x) > 6 or len(text) > width:
            text = f"{type(x).__name__} of {len(x)}: " + text
    else:
        text = repr(x)
    text = " ".join(text.split())  # one line
    return text if len(text) <= width else text[:width - 3] + "..."


def _key(k: Any) -> str:
    """A mapping key as JSON writes it, so that ``to_dict()`` survives a JSON round trip:
    strings as they are, anything else (a node label 3, a cluster label, a tuple) as its
    ``repr``."""
    return k if isinstance(k, str) else repr(k)


def failed_result(cls: type[Result], labels: Labels, exc: Exception, solver: str,
                  **fields: Any) -> Result:
    """The result of a solve that failed, returned instead of raising (the solvers'
    ``raise_on_failure=False``, as CVXPY users read ``problem.status``): ``status`` is the
    failure's (the solver's status, or ``"infeasible"`` for an infeasible problem), no
    ``weights`` or ``flows`` (None: :meth:`Result.weight` raises), ``info["error"]`` the
    message; ``fields`` are the class's other fields (e.g. ``success=False``)."""
    status = getattr(exc, "status", None) or "infeasible"
    return cls(weights=None, flows=None, status=status, solver=solver, timings={},
               labels=labels, info={"error": str(exc)}, **fields)
