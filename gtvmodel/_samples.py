"""The samples of :meth:`~gtvmodel.declaration.ModelDeclaration.set_data` and
:meth:`~gtvmodel.declaration.ModelDeclaration.from_arrays`: the three input forms (stacked
rows with a node index, an ``(n, m, d)`` array, a mapping ``{node: (X_i, y_i)}``) read into
one ``(X, y, positions)`` stack, checked against the model's nodes and dimension, naming
the argument.  ``model`` is the :class:`~gtvmodel.declaration.ModelDeclaration` (its public
``num_nodes``, ``shape``, ``dim``, ``index`` and ``empirical_graph``).  Private."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from ._validate import as_finite_array, check_option
from .errors import DataError, LossError
from .terms.losses import Loss
from .terms.spec import LOSSES

__all__ = ["loss_class", "data_dim", "stacked_samples", "row_positions", "mapping_samples"]


def loss_class(loss: str | type[Loss]) -> type[Loss]:
    """The loss class named by a kind string (the registry ``LOSSES``) or given itself."""
    if isinstance(loss, type) and issubclass(loss, Loss):
        return loss
    check_option(loss, "loss", LOSSES.kinds(), error=LossError)
    return LOSSES.get(loss)


def data_dim(X: Any, y: Any = None) -> int | tuple[int, int]:
    """``d``: the last axis of ``X`` or of the first node's ``X_i`` of a mapping; ``(p, q)``
    for multi-output samples (``y`` with an output axis of ``q > 1`` beyond ``X``'s sample
    axes, or a mapping's first ``Y_i`` of shape ``(m_i, q)``)."""
    first, out = X, y
    if isinstance(X, Mapping):
        item = next(iter(X.values()), None)
        pair = isinstance(item, (tuple, list)) and len(item) == 2
        first, out = (item[0], item[1]) if pair else (item, None)
        out_ndim = 2
    else:
        out_ndim = len(np.shape(X))
    shape = np.shape(first) if first is not None else ()
    if len(shape) < 2:
        raise DataError(f"X: cannot read the dimension d from samples of shape {shape} (need "
                        "(M, d), (n, m, d) or a mapping {node: (X_i, y_i)})")
    yshape = np.shape(out) if isinstance(out, np.ndarray) else ()
    if len(yshape) == out_ndim and yshape and yshape[-1] != 1:  # (m, 1) labels: one output
        return int(shape[-1]), int(yshape[-1])
    return int(shape[-1])


def stacked_samples(model: Any, X: Any, y: Any, node_index: Any
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(X (M, d), y (M,), positions (M,))`` of the three input forms of
    :meth:`~gtvmodel.declaration.ModelDeclaration.set_data`, checked against the model's
    nodes and ``d``."""
    if isinstance(X, Mapping):
        if y is not None or node_index is not None:
            raise DataError("set_data: with a mapping {node: (X_i, y_i)} give neither y nor "
                            "node_index")
        X, y, pos = mapping_samples(model, X)
    else:
        X = as_finite_array(X, "X")
        y = as_finite_array(y, "y") if y is not None else None
        if y is None:
            raise DataError("set_data: y is required with an array X")
        if X.ndim == 3:
            if node_index is not None:
                raise DataError("set_data: an (n, m, d) array X takes no node_index")
            if X.shape[0] != model.num_nodes or y.shape[:2] != X.shape[:2]:
                raise DataError(f"set_data: X of shape (n, m, d) needs n = "
                                f"{model.num_nodes} and y of shape (n, m) = {X.shape[:2]}, "
                                f"got X {X.shape}, y {y.shape}")
            pos = np.repeat(np.arange(model.num_nodes), X.shape[1])
            X, y = X.reshape(-1, X.shape[2]), y.reshape(-1, *y.shape[2:])
        else:
            if X.ndim != 2:
                raise DataError(f"set_data: X must be (M, d) or (n, m, d), got shape "
                                f"{X.shape}")
            if node_index is None:
                raise DataError("set_data: node_index (the node of each row of X) is "
                                "required with an (M, d) array X")
            pos = row_positions(model, node_index, X.shape[0])
    if y.ndim == 2 and len(model.shape) == 2:  # multi-output rows of a matrix model
        p, q = model.shape
        if X.shape[-1] != p or y.shape != (X.shape[0], q):
            raise DataError(f"set_data: a matrix model (dim=({p}, {q})) takes multi-output "
                            f"samples X with p = {p} columns and y (Y) with q = {q} "
                            f"columns, got X {X.shape} and y {y.shape}")
        return X, y, pos
    if X.shape[-1] != model.dim:
        raise DataError(f"set_data: X has {X.shape[-1]} columns but the model has "
                        f"d = {model.dim}")
    if y.shape[0] != X.shape[0] or y.ndim != 1:
        raise DataError(f"set_data: y must have shape ({X.shape[0]},) to match X of shape "
                        f"{X.shape}, got {y.shape}")
    return X, y, pos

def row_positions(model: Any, node_index: Any, rows: int) -> np.ndarray:
    """The position of each row's node label (``UnknownNodeError`` naming the first label
    not in the graph); labels are looked up once per distinct label."""
    if isinstance(node_index, np.ndarray):
        labels = node_index
    else:  # any labels (tuples, mixed types) as objects, never coerced to strings
        items = list(node_index)
        labels = np.empty(len(items), dtype=object)
        labels[:] = items
    if labels.ndim != 1 or labels.shape[0] != rows:
        raise DataError(f"set_data: node_index must have shape ({rows},) (one node per row "
                        f"of X), got {labels.shape}")
    return model.empirical_graph.row_positions(labels, "set_data: node_index")

def mapping_samples(model: Any, data: Mapping[Hashable, Any]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stack ``{node: (X_i, y_i)}`` (each checked for shape, naming the node)."""
    Xs, ys, pos = [], [], []
    for node, item in data.items():
        i = model.index(node)
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise DataError(f"set_data: node {node!r}: expected a pair (X_i, y_i), got "
                            f"{type(item).__name__}")
        Xi, yi = np.asarray(item[0]), np.asarray(item[1])
        multi = len(model.shape) == 2 and yi.ndim == 2  # multi-output (X_i, Y_i)
        cols, ys_i = (model.shape[0], model.shape[1:]) if multi else (model.dim, ())
        if Xi.ndim != 2 or Xi.shape[1] != cols or yi.shape[:1] != Xi.shape[:1] or \
                (multi and yi.shape[1:] != ys_i):
            want = f"(m_i, {ys_i[0]})" if multi else "(m_i,)"
            raise DataError(f"set_data: node {node!r}: X_i must be (m_i, {cols}) and y_i "
                            f"{want}, got {Xi.shape} and {yi.shape}")
        Xs.append(Xi)
        ys.append(yi if multi else yi.reshape(-1))
        pos.append(np.full(Xi.shape[0], i, dtype=np.int64))
    if not Xs:
        raise DataError("set_data: the mapping {node: (X_i, y_i)} is empty")
    if len({yi.ndim for yi in ys}) > 1:
        raise DataError("set_data: the mapping {node: (X_i, y_i)} mixes single-output y_i "
                        "(m_i,) and multi-output Y_i (m_i, q)")
    return (as_finite_array(np.concatenate(Xs), "X"), as_finite_array(np.concatenate(ys), "y"),
            np.concatenate(pos))
