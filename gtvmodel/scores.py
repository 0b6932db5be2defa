"""Prediction and per-node scores of fitted weights ``w_i`` (issue 10).

Every data-fit loss knows how to predict from its node's weights (the terms' hooks
``predict_rows``, ``labels``, ``score_metric``: ``X w`` for regression losses, labels ``-1``/``+1``
for :class:`~gtvmodel.LogisticLoss` and :class:`~gtvmodel.HingeLoss`, the class index for
:class:`~gtvmodel.SoftmaxLoss`); this module applies them to a result's ``(n, d)`` weights:
:func:`predict` at one node, :func:`node_scores` at every node (the mean squared error of the
predictions, or their accuracy), vectorized over the nodes of each loss class (the samples of
all nodes stacked, each row with its node's weights).

**Which loss predicts at a node.**  The node's own loss when it models samples; at a node
without one (a :class:`~gtvmodel.ZeroLoss` node of a networked dataset, paper 000's unlabelled
nodes) the model's data-fit loss class when the model has exactly one (otherwise
:class:`~gtvmodel.errors.UnsupportedError` names the node).

**Why functions, not ``Result.predict``.**  A result knows its node labels but not its model, and
the layering keeps :mod:`gtvmodel.results` below the terms that predict; giving every result a
reference to its model would keep models (and their compiled problems) alive with every result
and make the results' ``to_dict`` depend on model state.  ``predict(model, result, node, X)``
takes both explicitly; any object with ``weights`` (every :class:`~gtvmodel.Result` that has
them) or an ``(n, d)`` array will do.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._validate import check_bool, check_option
from .datasets import NetworkedData
from .declaration import ModelDeclaration
from .errors import DataError, ParameterError, UnsupportedError
from .terms.losses import Loss

__all__ = ["predict", "node_scores", "weights_of", "NodeSamples", "node_samples"]

#: metric name -> whether a higher value is better
METRICS: dict[str, bool] = {"mse": False, "accuracy": True}


def weights_of(model: ModelDeclaration, result_or_weights: Any,
               name: str = "result_or_weights") -> np.ndarray:
    """The ``(n, d)`` weights of a result (its ``weights``) or of an array, checked against
    ``model`` (:class:`DataError` naming ``name`` for a result without weights or a wrong
    shape)."""
    W = getattr(result_or_weights, "weights", result_or_weights)
    if W is None:
        raise DataError(f"{name}: the result has no weights (status "
                        f"{getattr(result_or_weights, 'status', None)!r})")
    return model.check_weights(W, name)


def _predictors(model: ModelDeclaration) -> tuple[list[Loss], np.ndarray]:
    """One representative loss per predicting loss class and, per node, the index of the one
    predicting there (``-1``: none).  Losses of one class predict alike (the hooks read only
    ``d`` and, for softmax, ``K``, shared within a batch), so one instance speaks for its
    class."""
    reps: list[Loss] = []
    which = np.full(model.num_nodes, -1, dtype=np.int64)
    for b in model.structure().batches:
        if b.cls.score_metric is not None:
            which[b.nodes] = len(reps)
            reps.append(b.losses[0])
    if len(reps) == 1:  # nodes without data predict with the model's one data-fit class
        which[:] = 0
    return reps, which


def _predictor(model: ModelDeclaration, reps: list[Loss], which: np.ndarray, i: int,
               where: str) -> Loss:
    if which[i] < 0:
        raise UnsupportedError(
            f"{where}: node {model.nodes[i]!r} has no loss that predicts (its loss is "
            f"{model.loss_at(i)!r}) and the model has {len(reps)} data-fit loss classes, not "
            "one to predict with")
    return reps[int(which[i])]


def predict(model: ModelDeclaration, result_or_weights: Any, node: Hashable, X: Any, *,
            proba: bool = False) -> np.ndarray:
    """Predictions of node ``node``'s weights ``w_i`` for new samples ``X`` (``(m, p)``).

    ``X w_i`` for regression losses, labels for classifiers (``-1``/``+1``, the class index for
    softmax); ``proba=True``: probabilities (``P(y = +1 | x)`` for the logistic loss, ``(m, K)``
    for softmax).  ``result_or_weights``: a result with ``weights`` or an ``(n, d)`` array.

    Parameters
    ----------
    model : GTVModel
        The model the weights belong to; node ``node``'s loss decides how it predicts.
    result_or_weights : Result or array (n, d)
        A result with ``weights`` or the weights themselves.
    node : hashable
        The node's label.
    X : array_like, shape (m, p)
        The samples (``p = d``; softmax: ``d = p K``).
    proba : bool, default False
        Probabilities instead of labels (classifiers only).

    Returns
    -------
    numpy.ndarray
        ``(m,)`` predictions, or ``(m, K)`` softmax probabilities.

    Raises
    ------
    UnknownNodeError
        ``node`` is not a node of the model.
    DataError
        ``X`` or the weights have the wrong shape or are not finite.
    UnsupportedError
        The node's loss does not predict (a symbolic or zero loss) and the model has not
        exactly one data-fit loss class to predict with.
    ParameterError
        ``proba`` is not a bool.

    Examples
    --------
    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(2), dim=1, lam=0.0)
    >>> model.set_loss(0, gm.SquaredLoss([[1.0], [2.0]], [2.0, 4.0]))
    >>> sol = gm.solve_exact(model)  # w_0 = 2; node 1 has no data: w_1 is arbitrary
    >>> np.round(gm.predict(model, sol, 0, [[3.0]]), 6)
    array([6.])
    """
    W = weights_of(model, result_or_weights)
    check_bool(proba, "proba", where="predict")
    i = model.index(node)
    reps, which = _predictors(model)
    loss = _predictor(model, reps, which, i, "predict")
    return loss.predict_proba(W[i], X) if proba else loss.predict(W[i], X)


@dataclass
class NodeSamples:
    """Samples ``(X_i, y_i)`` of some nodes, validated once and grouped by the loss class that
    predicts at them (:func:`node_samples`), scored at any weights by :meth:`scores`.

    ``groups``: per predicting class ``(loss, X, y, row_node)`` with the samples of its nodes
    stacked (``row_node``: the node position of each row); ``items``: ``(i, X_i, y_i)`` per
    node (for callable metrics); ``has_data``: ``(n,)`` mask; ``metric``: the metric asked for;
    ``higher_better``: ``(n,)`` whether a higher score is better at each node.
    """

    n: int
    groups: list[tuple[Loss, np.ndarray, np.ndarray, np.ndarray, str]]
    items: list[tuple[int, Loss, np.ndarray, np.ndarray]]
    has_data: np.ndarray
    metric: Any
    higher_better: np.ndarray

    def scores(self, W: np.ndarray) -> np.ndarray:
        """Per-node scores ``(n,)`` at weights ``W`` (NaN at nodes without samples)."""
        out = np.full(self.n, np.nan)
        if callable(self.metric):
            for i, loss, X, y in self.items:  # a user's function: one call per node
                pred = loss.predict_rows(X, np.broadcast_to(W[i], (X.shape[0], W.shape[1])))
                out[i] = float(self.metric(y, pred))
            return out
        total = np.zeros(self.n)
        count = np.zeros(self.n)
        for loss, X, y, row_node, name in self.groups:
            pred = loss.predict_rows(X, W[row_node])
            per_row = (pred == y).astype(float) if name == "accuracy" else (pred - y) ** 2
            total += np.bincount(row_node, weights=per_row, minlength=self.n)
            count += np.bincount(row_node, minlength=self.n)
        has = count > 0
        out[has] = total[has] / count[has]
        return out

    def as_errors(self, scores: np.ndarray) -> np.ndarray:
        """Per-node errors (lower is better) of :meth:`scores` (any leading axes): the score,
        or ``1 - score`` where a higher score is better (accuracy); a callable metric's value
        is taken as an error."""
        return np.where(self.higher_better, 1.0 - scores, scores)


def _pairs(model: ModelDeclaration, data: Any, where: str) -> list[tuple[int, Any, Any]]:
    """``(i, X, y)`` for the given samples (None: the model's own training samples)."""
    if data is None:
        out = []
        for b in model.structure().batches:
            if b.cls.score_metric is not None:
                out += [(int(i), *loss.samples()) for i, loss in zip(b.nodes, b.losses,
                                                                    strict=True)]
        return out
    if isinstance(data, NetworkedData):
        data = {v: (X, data.y[v]) for v, X in data.X.items()}
    if not isinstance(data, Mapping):
        raise ParameterError(f"{where} must be None, a mapping {{node: (X, y)}} or a "
                             f"gtvmodel.datasets.NetworkedData, got {type(data).__name__}")
    out = []
    for node, pair in data.items():
        i = model.index(node)  # UnknownNodeError naming it
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise DataError(f"{where}[{node!r}] must be a pair (X, y), got "
                            f"{type(pair).__name__}")
        out.append((i, *pair))
    return out


def node_samples(model: ModelDeclaration, data: Any = None, metric: Any = "auto",
                 where: str = "data") -> NodeSamples:
    """Validate samples once (:func:`node_scores`'s ``data`` and ``metric``) for scoring at many
    weights (a λ path): features against the predicting loss (:class:`DataError` naming the
    node), labels in its convention, the metric by name."""
    if not callable(metric):
        check_option(metric, "metric", ("auto", *METRICS), where=where)
    reps, which = _predictors(model)
    n = model.num_nodes
    items, names = [], np.full(n, "", dtype=object)
    for i, X, y in _pairs(model, data, where):
        loss = _predictor(model, reps, which, i, where)
        label = f"{where}[{model.nodes[i]!r}]"
        Xc = _features(loss, X, label)
        yc = loss.labels(y, f"{label} y")
        if yc.shape[0] != Xc.shape[0]:
            raise DataError(f"{label}: y has {yc.shape[0]} labels for {Xc.shape[0]} samples")
        items.append((i, loss, Xc, yc))
        names[i] = loss.score_metric if metric == "auto" else metric
    groups = []
    for r, loss in enumerate(reps):
        mine = [it for it in items if which[it[0]] == r]
        for name in {names[it[0]] for it in mine}:
            sel = [it for it in mine if names[it[0]] == name]
            row_node = np.concatenate([np.full(it[2].shape[0], it[0]) for it in sel])
            groups.append((loss, np.vstack([it[2] for it in sel]),
                           np.concatenate([it[3] for it in sel]), row_node, name))
    has = np.zeros(n, dtype=bool)
    has[[it[0] for it in items]] = True
    higher = np.array([not callable(metric) and METRICS.get(nm, False) for nm in names])
    return NodeSamples(n, groups, items, has, metric, higher)


def _features(loss: Loss, X: Any, label: str) -> np.ndarray:
    try:
        return loss.check_features(X, "X")
    except DataError as exc:
        raise DataError(f"{label}: {exc}") from None


def node_scores(model: ModelDeclaration, result_or_weights: Any, data: Any = None,
                metric: str | Callable[[np.ndarray, np.ndarray], float] = "auto") -> np.ndarray:
    """Per-node scores ``(n,)`` (model order) of the weights' predictions on samples.

    Parameters
    ----------
    model : GTVModel
        The model the weights belong to; its losses decide how each node predicts (module
        docstring).
    result_or_weights : Result or array (n, d)
        A result with ``weights`` (any solver's or baseline's) or the weights themselves.
    data : None, mapping or NetworkedData
        ``None``: the training samples of the model's own data-fit losses; ``{node: (X, y)}``:
        samples per node (e.g. a validation split); a
        :class:`~gtvmodel.datasets.NetworkedData`: its ``X``/``y``.  Nodes without samples get
        NaN (e.g. the zero-loss nodes of a dataset, or nodes missing from ``data``).
    metric : {"auto", "mse", "accuracy"} or callable
        ``"auto"``: each loss's default (``"mse"`` for regression losses, ``"accuracy"`` for
        classifiers); ``"mse"``: mean of ``(y_hat_r - y_r)^2``; ``"accuracy"``: fraction of
        ``y_hat_r == y_r`` (labels compared in the loss's convention, so ``{0, 1}`` labels of
        a logistic node are fine); a callable ``metric(y_true, y_pred) -> float`` is called
        once per node with data.

    Returns
    -------
    numpy.ndarray
        ``(n,)`` scores in model node order, NaN at nodes without samples.

    Raises
    ------
    DataError
        Weights or samples of the wrong shape, not finite, or for unknown nodes.
    ParameterError
        An unknown ``metric``.

    Examples
    --------
    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(2), dim=1, lam=0.0)
    >>> model.set_loss(0, gm.SquaredLoss([[1.0], [2.0]], [2.0, 4.0]))
    >>> W = np.array([[1.0], [0.0]])
    >>> gm.node_scores(model, W)  # (1 - 2)^2 and (2 - 4)^2 at node 0, no data at node 1
    array([2.5, nan])
    >>> gm.node_scores(model, W, {1: ([[1.0]], [0.5])})  # node 1 predicts with SquaredLoss
    array([ nan, 0.25])
    """
    W = weights_of(model, result_or_weights)
    return node_samples(model, data, metric).scores(W)
