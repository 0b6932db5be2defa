"""Several learning methods run on one dataset, side by side in one table (issue 10).

:func:`compare` calls each method on the same model and reads every result in the package's
shared vocabulary (:class:`~gtvmodel.Result`): ``weights`` for the scores (:func:`gtvmodel.
node_scores`, mean over the nodes with samples), and what a federated method trades where
the result has it -- communication ``rounds`` and ``values_sent`` (a
:class:`~gtvmodel.BaselineResult`'s own counts; Algorithm 1's iterations are its rounds, each
sending ``2 |E| d`` values: ``w_{e+}``, ``w_{e-}`` across every edge, the flows staying on
the edges; the exact solver is centralized and has none) -- and the certified duality gap
(34) of the result's own certificate (on its ``target`` problem for a baseline), or, with
``certify=True``, :func:`gtvmodel.certify` of its weights on the model's GTV problem (16) for a
result that has none and is not marked non-convex (``convex=False``: never certified).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import baselines, plot
from ._validate import check_bool, check_option
from .baselines._common import as_model
from .certificates.certificate import certify as certify_weights
from .datasets import NetworkedData
from .declaration import ModelDeclaration
from .errors import ParameterError, UnsupportedError
from .primal_dual.algorithm import solve_primal_dual
from .results import brief, jsonable
from .scores import node_samples, weights_of
from .solve.exact import solve_exact
from .theory.constants import node_hessian_bounds

__all__ = ["Comparison", "compare", "METHODS", "named_method", "default_step"]

#: The methods :func:`compare` knows by name (:func:`named_method`): the baselines of
#: :mod:`gtvmodel.baselines`, the exact solver and Algorithm 1.
METHODS: dict[str, Callable[..., Any]] = {
    "local": baselines.local, "pooled": baselines.pooled, "oracle": baselines.oracle,
    "fedavg": baselines.fedavg, "fedsgd": baselines.fedsgd, "fedprox": baselines.fedprox,
    "fedrelax": baselines.fedrelax, "admm": baselines.admm, "ifca": baselines.ifca,
    "fed_ht": baselines.fed_ht, "fediter_ht": baselines.fediter_ht,
    "exact": solve_exact, "primal_dual": solve_primal_dual,
}

#: The gradient methods, which :func:`named_method` gives ``rounds``, ``local_steps`` and
#: ``step`` defaults (:data:`GRADIENT_DEFAULTS`, ``step = 1 / max_i beta_i``).
GRADIENT_METHODS = ("fedavg", "fedsgd", "fedprox", "ifca", "fed_ht", "fediter_ht")

#: Default ``rounds`` and ``local_steps`` of the gradient methods called by name.
GRADIENT_DEFAULTS: dict[str, int] = {"rounds": 100, "local_steps": 1}

#: The option each of these methods needs when called by name (no default): method -> option.
REQUIRED = {"fedprox": "mu", "ifca": "k", "fed_ht": "tau", "fediter_ht": "tau"}

#: column -> (header in the text table, number format)
COLUMNS: dict[str, tuple[str, str]] = {
    "train": ("train", "{:.4g}"),
    "validation": ("validation", "{:.4g}"),
    "true_mse": ("MSE to w_bar", "{:.4g}"),
    "rounds": ("rounds", "{:.0f}"),
    "values_sent": ("values sent", "{:.3g}"),
    "gap": ("certified gap", "{:.2e}"),
    "target": ("gap on", "{}"),
    "time": ("time [s]", "{:.3g}"),
}


@dataclass
class Comparison:
    """The table :func:`compare` returns: one row per method, one column per quantity.

    :func:`compare` builds it; the constructor takes the fields below and checks nothing.
    :meth:`column` reads one column, :meth:`to_text` (``str``) the aligned table,
    :meth:`to_dict` JSON's types and :meth:`plot` a bar chart.

    Parameters
    ----------
    rows : list of str
        The methods' names, in the order given.
    columns : list of str
        Column keys (:data:`COLUMNS`): ``"train"``, ``"validation"`` (mean score over nodes
        with samples, :attr:`metric`), ``"true_mse"`` (MSE (40) to the true weights, when the
        data has them), ``"rounds"``, ``"values_sent"``, ``"gap"`` (certified gap (34), NaN
        where not defined), ``"target"`` (the problem the gap is on: ``"gtv"`` for the
        model's (16), a baseline's ``target``), ``"time"`` (seconds of the method's call).
    values : dict
        ``{column: array or list over rows}`` (NaN where a quantity is not defined).
    metric : str
        The score's name (``"mse"``, ``"accuracy"``, a callable's name, or ``"score"`` when the
        model's losses use different defaults).
    results : dict
        ``{name: result}`` as each method returned it.
    lam : float
        The ``lambda`` of the GTV problem (16) the methods ran on (the one ``"gtv"`` gaps are
        certified on; NaN when not known).
    penalty : str
        That problem's penalty ``phi`` (its repr).

    Raises
    ------
    TypeError
        A required field is missing or an unknown keyword is given (the dataclass
        constructor; no value is validated).

    Examples
    --------
    The local models (``lambda = 0``) beside the exact GTV solution (16) on paper 001 VI-B's
    chain: the local baseline's gap is certified on its own target ``"local"``, the exact
    solution's on ``"gtv"``; the exact solver is centralized (no rounds, ``-`` in the text):

    >>> import gtvmodel as gm
    >>> from gtvmodel import datasets
    >>> data = datasets.chain(n=3, eps=0.1, m=5, sigma=0.1, seed=0)
    >>> table = gm.compare(["local", "exact"], data)
    >>> table.rows, table.metric, table.lam, table.penalty
    (['local', 'exact'], 'mse', 0.01, 'Norm2()')
    >>> table.column("target"), bool((table.column("gap") < 1e-8).all())
    (['local', 'gtv'], True)
    >>> print(table.to_text().splitlines()[0])  # doctest: +NORMALIZE_WHITESPACE
    method (lambda = 0.01, Norm2())  train mse  MSE to w_bar  rounds  values sent
      certified gap  gap on  time [s]
    """

    rows: list[str]
    columns: list[str]
    values: dict[str, Any]
    metric: str
    results: dict[str, Any] = field(default_factory=dict, repr=False)
    lam: float = float("nan")
    penalty: str = ""

    def column(self, key: str) -> Any:
        """One column over the rows (:class:`ParameterError` naming an unknown key)."""
        check_option(key, "column", self.columns, where="Comparison")
        return self.values[key]

    def to_dict(self) -> dict[str, Any]:
        """``{"metric", "columns", "rows": {name: {column: value}}}`` in JSON's types."""
        return {"metric": self.metric, "lam": jsonable(self.lam), "penalty": self.penalty,
                "columns": list(self.columns),
                "rows": {name: {c: jsonable(self.values[c][r]) for c in self.columns}
                         for r, name in enumerate(self.rows)}}

    def to_text(self) -> str:
        """The table as aligned plain text (``-`` where a quantity is not defined); the first
        header names the problem (16) solved, ``method (lambda = ..., penalty)``."""
        problem = "" if np.isnan(self.lam) else f" (lambda = {self.lam:.4g}, {self.penalty})"
        head = ["method" + problem] + [_header(c, self.metric) for c in self.columns]
        body = [[name] + [_cell(c, self.values[c][r]) for c in self.columns]
                for r, name in enumerate(self.rows)]
        widths = [max(len(row[j]) for row in [head, *body]) for j in range(len(head))]
        lines = ["  ".join(cell.ljust(w) if j == 0 else cell.rjust(w)
                           for j, (cell, w) in enumerate(zip(row, widths, strict=True)))
                 for row in [head, *body]]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        """A few lines (as :class:`~gtvmodel.results.Result`'s): the problem, the methods and
        the columns; :meth:`to_text` (``str``) is the table."""
        lines = [f"Comparison(metric={self.metric!r}, lam={brief(self.lam)}, "
                 f"penalty={self.penalty!r}) of {len(self.rows)} methods",
                 f"  rows: {brief(self.rows)}", f"  columns: {brief(self.columns)}"]
        return "\n".join(lines)

    def plot(self, ax: Any = None, column: str | None = None) -> Any:
        """Bar chart of a score column (default: validation if present, else train) with the
        certified gap written on each bar (:func:`gtvmodel.plot.comparison`)."""
        return plot.comparison(self, ax=ax, column=column)


def _header(column: str, metric: str) -> str:
    text = COLUMNS[column][0]
    return f"{text} {metric}" if column in ("train", "validation") else text


def _cell(column: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)) or value == "":
        return "-"
    return COLUMNS[column][1].format(value)


def _communication(model: ModelDeclaration, result: Any) -> tuple[float, float]:
    """``(rounds, values_sent)`` in the shared vocabulary (module docstring); NaN where the
    result has none."""
    rounds = getattr(result, "rounds", None)
    if rounds is not None:
        return float(rounds), float(getattr(result, "values_sent", np.nan))
    iterations = getattr(result, "iterations", None)
    if iterations is not None:  # Algorithm 1: w across every edge, both ways, per iteration
        return float(iterations), float(2 * model.num_edges * model.dim * iterations)
    return np.nan, np.nan


def _gap(model: ModelDeclaration, result: Any, W: np.ndarray, certify: bool
         ) -> tuple[float, str]:
    """The result's own certified gap and its problem, else (``certify``) the certificate of
    its weights on the model's problem (16); never for a result marked non-convex."""
    if not getattr(result, "convex", True):
        return np.nan, ""
    cert = getattr(result, "certificate", None)
    if cert is not None:
        return float(cert.gap), str(getattr(result, "target", None) or "gtv")
    if not certify:
        return np.nan, ""
    return float(certify_weights(model, W).gap), "gtv"


def _metric_name(model: ModelDeclaration, metric: Any) -> str:
    if callable(metric):
        return getattr(metric, "__name__", "score")
    if metric != "auto":
        return str(metric)
    names = {b.cls.score_metric for b in model.structure().batches} - {None}
    return names.pop() if len(names) == 1 else "score"


def default_step(model: ModelDeclaration, name: str) -> float:
    """``1 / max_i beta_i``, the step size of a gradient method called by name (``beta_i``
    (12): the Lipschitz constant of ``grad L_i``, from the losses' Hessian bounds); a step
    safe for local gradient descent at every node."""
    try:
        beta = float(np.linalg.eigvalsh(node_hessian_bounds(model)[1])[:, -1].max())
    except UnsupportedError as exc:
        raise ParameterError(f"compare: method {name!r} needs options[{name!r}]['step'] "
                             f"(no default step: {exc})") from None
    return 1.0 / beta if beta > 0 else 1.0


def named_method(name: str, options: Mapping[str, Any] | None = None, data: Any = None
                 ) -> Callable[[ModelDeclaration], Any]:
    """``model -> result`` for a method known by ``name`` (:data:`METHODS`) with the keyword
    ``options`` of its function.

    Defaults filled in where ``options`` has none: for the gradient methods
    (:data:`GRADIENT_METHODS`) ``rounds=100``, ``local_steps=1`` (not FedSGD's) and
    ``step = 1 / max_i beta_i`` (:func:`default_step`); for ``"oracle"`` the true partition of
    ``data`` when it is a :class:`~gtvmodel.datasets.NetworkedData`.  ``fedprox`` needs
    ``mu``, ``ifca`` ``k``, ``fed_ht``/``fediter_ht`` ``tau`` (and ``oracle`` a ``partition``
    on a model): :class:`ParameterError` naming the option otherwise, and for an unknown
    name, listing the known ones.

    Examples
    --------
    >>> from gtvmodel import datasets
    >>> from gtvmodel.comparison import named_method
    >>> data = datasets.sbm(sizes=(5, 5), p_in=0.9, p_out=0.1, m=10, seed=0)
    >>> run = named_method("ifca", {"k": 2, "restarts": 3})(data.model())
    >>> run.method, run.rounds
    ('ifca', 100)
    """
    check_option(name, "methods", tuple(METHODS), where="compare")
    opts = dict(options or {})
    need = REQUIRED.get(name)
    if need is not None and need not in opts:
        raise ParameterError(f"compare: method {name!r} needs options[{name!r}][{need!r}]")
    if name == "oracle" and "partition" not in opts:
        if not isinstance(data, NetworkedData):
            raise ParameterError("compare: method 'oracle' needs options['oracle']"
                                 "['partition'] (or a NetworkedData with true clusters)")
        opts["partition"] = data.partition()
    fn = METHODS[name]

    def run(model: ModelDeclaration) -> Any:
        kwargs = dict(opts)
        if name in GRADIENT_METHODS:
            for key, value in GRADIENT_DEFAULTS.items():
                if not (name == "fedsgd" and key == "local_steps"):
                    kwargs.setdefault(key, value)
            if "step" not in kwargs:
                kwargs["step"] = default_step(model, name)
        return fn(model, **kwargs)

    run.__name__ = name
    return run


def _methods(methods: Any, options: Any, data: Any) -> dict[str, Callable[..., Any]]:
    """``{row name: model -> result}`` from a mapping of callables or method names, or a
    sequence of method names (their own row names); ``options`` keyed by row name."""
    if isinstance(methods, (str, bytes)) or not isinstance(methods, (Mapping, Sequence)) \
            or not methods:
        raise ParameterError("compare: methods must be a non-empty mapping name -> callable "
                             "or method name, or a sequence of method names")
    pairs = methods.items() if isinstance(methods, Mapping) else [(m, m) for m in methods]
    options = {} if options is None else options
    if not isinstance(options, Mapping):
        raise ParameterError("compare: options must be a mapping method name -> {option: "
                             "value}")
    out: dict[str, Callable[..., Any]] = {}
    for row, fn in pairs:
        if isinstance(fn, str):
            fn = named_method(fn, options.get(row), data)
        elif not callable(fn):
            raise ParameterError(f"compare: methods[{row!r}] is not callable (nor a "
                                 f"method name: {', '.join(METHODS)})")
        elif row in options:
            raise ParameterError(f"compare: options[{row!r}] is given but methods[{row!r}] "
                                 "is a callable (options are for methods given by name)")
        if row in out:
            raise ParameterError(f"compare: method {row!r} is given twice")
        out[row] = fn
    unused = set(options) - set(out)
    if unused:
        raise ParameterError(f"compare: options for {sorted(map(str, unused))} name no "
                             "method of the comparison")
    return out


def compare(methods: Any, data: Any, *, metrics: Sequence[str] = ("train", "validation"),
            validation: Any = None, certify: bool = True, metric: Any = "auto",
            options: Mapping[str, Mapping[str, Any]] | None = None, lam: float | None = None,
            penalty: Any = None) -> Comparison:
    """Run several methods on one dataset and tabulate them (module docstring).

    Parameters
    ----------
    methods : mapping name -> callable or method name, or sequence of method names
        A callable is ``method(model) -> result``: anything with ``weights`` ``(n, d)`` in
        model order (a :class:`~gtvmodel.BaselineResult`, a :class:`~gtvmodel.Solution`, a
        :class:`~gtvmodel.PrimalDualResult`, ...), e.g. ``lambda m: gm.solve_exact(m)`` or
        ``functools.partial(baselines.fedavg, rounds=50)``.  A name is one of
        :data:`METHODS` (``"local"``, ``"pooled"``, ``"oracle"``, ``"fedavg"``, ``"fedsgd"``,
        ``"fedprox"``, ``"fedrelax"``, ``"admm"``, ``"ifca"``, ``"fed_ht"``,
        ``"fediter_ht"``, ``"exact"``, ``"primal_dual"``; :func:`named_method`); in a
        sequence it is also the row's name.
    data : GTVModel or NetworkedData
        The model every method runs on (a dataset's :meth:`~gtvmodel.datasets.NetworkedData.
        model` at ``lam`` and ``penalty``); a dataset also gives the MSE (40) to its true
        weights.
    metrics : sequence of {"train", "validation"}
        The score columns: on the training samples of the model's losses and on
        ``validation`` (left out when ``validation`` is None).
    validation : None, {node: (X, y)} or NetworkedData
        Validation samples (:func:`gtvmodel.node_scores`' ``data``).
    certify : bool
        Certify the weights of results that carry no certificate (module docstring).
    metric : {"auto", "mse", "accuracy"} or callable
        The score (:func:`gtvmodel.node_scores`).
    options : mapping row name -> mapping, optional
        Keyword options of the methods given by name (e.g. ``{"ifca": {"k": 2}}``).
    lam, penalty : optional
        The GTV problem (16) the methods run on: a dataset's model is built at them, a model
        is replaced by its :meth:`~gtvmodel.declaration.ModelDeclaration.variant` with them
        (default: the model's own; ``lambda = 0.01`` and ``Norm2`` for a dataset).  The
        table shows the ``lambda`` and penalty solved (:attr:`Comparison.lam`).

    Returns
    -------
    Comparison
        One row per method (in the order given), the columns :attr:`Comparison.columns`:
        the mean scores, MSE (40) to the true weights for a dataset, communication
        ``rounds`` and ``values_sent``, the certified gap (34) and its problem, and the
        seconds of each method's call; ``results`` holds each method's own result.

    Raises
    ------
    ParameterError
        ``methods`` is empty or not a mapping/sequence, an entry is neither callable nor a
        known method name (listing them), a row name is repeated, a method called by name
        lacks its required option (``mu``, ``k``, ``tau``, an oracle ``partition``) or has
        no default ``step``; ``options`` is not a mapping, names a row that is not a method
        given by name; ``metrics`` or ``metric`` is not one of the options; ``certify`` is
        not a bool; ``data`` is not a model or dataset; ``lam`` is negative or not finite.
    PenaltyError
        ``penalty`` is not a gtvmodel penalty acting on the model's ``R^d``.
    DataError
        Validation samples that do not fit the node's loss, or a method's result without
        ``(n, d)`` weights (naming the row).
    UnknownNodeError
        A node of ``validation`` is not in the graph.

    Examples
    --------
    >>> import gtvmodel as gm
    >>> from gtvmodel import datasets
    >>> data = datasets.chain(n=3, eps=0.1, m=5, sigma=0.1, seed=0)
    >>> table = gm.compare({"exact": gm.solve_exact,
    ...                     "Algorithm 1": lambda m: gm.solve_primal_dual(m, tol=1e-8)},
    ...                    data)
    >>> table.rows
    ['exact', 'Algorithm 1']
    >>> table.columns
    ['train', 'true_mse', 'rounds', 'values_sent', 'gap', 'target', 'time']
    >>> bool(table.column("train")[0] < 0.05), bool(table.column("gap")[1] < 1e-6)
    (True, True)
    >>> data = datasets.sbm(sizes=(5, 5), p_in=0.9, p_out=0.1, m=10, seed=0)
    >>> table = gm.compare(["exact", "fedavg", "ifca"], data, lam=0.1,
    ...                    options={"ifca": {"k": 2}})
    >>> table.rows, table.lam
    (['exact', 'fedavg', 'ifca'], 0.1)
    """
    methods = _methods(methods, options, data)
    metrics = [check_option(m, "metrics", ("train", "validation"), where="compare")
               for m in metrics]
    check_bool(certify, "certify", where="compare")
    model = as_model(data, "compare", lam=lam, penalty=penalty)
    scores = {"train": node_samples(model, None, metric, where="data")}
    if "validation" in metrics and validation is not None:
        scores["validation"] = node_samples(model, validation, metric, where="validation")
    columns = [m for m in ("train", "validation") if m in metrics and m in scores]
    truth = data if isinstance(data, NetworkedData) else None
    columns += (["true_mse"] if truth is not None else []) + [
        "rounds", "values_sent", "gap", "target", "time"]
    values: dict[str, list[Any]] = {c: [] for c in columns}
    results = {}
    for name, fn in methods.items():
        t = time.perf_counter()
        res = fn(model)
        elapsed = time.perf_counter() - t
        W = weights_of(model, res, f"methods[{name!r}]")
        results[name] = res
        row = {k: _mean(s.scores(W), s) for k, s in scores.items()}
        row["true_mse"] = truth.mse(W) if truth is not None else np.nan
        row["rounds"], row["values_sent"] = _communication(model, res)
        row["gap"], row["target"] = _gap(model, res, W, certify)
        row["time"] = elapsed
        for c in columns:
            values[c].append(row[c])
    arrays = {c: (v if c == "target" else np.array(v, dtype=float)) for c, v in values.items()}
    return Comparison(list(methods), columns, arrays, _metric_name(model, metric), results,
                      lam=float(model.lam), penalty=repr(model.penalty))


def _mean(scores: np.ndarray, samples: Any) -> float:
    """Mean over the nodes with samples (NaN when none has)."""
    return float(scores[samples.has_data].mean()) if samples.has_data.any() else np.nan

