"""What every baseline needs from its input: the model (from a model or a networked dataset)
and which nodes carry data."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validate import check_scalar
from ..datasets import NetworkedData
from ..declaration import ModelDeclaration
from ..errors import DataError, ParameterError

__all__ = ["as_model", "data_mask", "require_data"]


def as_model(data: Any, method: str, *, lam: Any = None, penalty: Any = None
             ) -> ModelDeclaration:
    """The GTV model a method runs on, at the ``lam`` and ``penalty`` asked for.

    ``data`` is a model (:class:`~gtvmodel.GTVModel` / :class:`~gtvmodel.ModelDeclaration`),
    returned as it is, or as a :meth:`~gtvmodel.declaration.ModelDeclaration.variant` with
    ``lam`` / ``penalty`` where given (the user's model is never changed); or a
    :class:`~gtvmodel.datasets.NetworkedData`, whose :meth:`~gtvmodel.datasets.NetworkedData.
    model` (squared loss (39) at nodes with data) is built at ``lam`` and ``penalty`` (that
    method's defaults, ``lambda = 0.01`` and ``Norm2``, where not given).  ``lam >= 0`` is
    checked (:class:`ParameterError` naming it and ``method``)."""
    if lam is not None:
        lam = check_scalar(lam, "lam", min_val=0.0, where=method)
    if isinstance(data, ModelDeclaration):
        if lam is None and penalty is None:
            return data
        return data.variant(lam=lam, penalty=penalty)
    if isinstance(data, NetworkedData):
        return data.model(penalty) if lam is None else data.model(penalty, lam)
    raise ParameterError(f"{method}: data must be a GTVModel or a gtvmodel.datasets."
                         f"NetworkedData, got {type(data).__name__}")


def data_mask(model: ModelDeclaration) -> np.ndarray:
    """Boolean ``(n,)`` mask (model order) of the nodes whose loss is a library loss carrying a
    local dataset (the set ``M`` of the papers)."""
    mask = np.zeros(model.num_nodes, dtype=bool)
    for b in model.structure().batches:
        if b.has_data:
            mask[b.nodes] = True
    return mask


def require_data(model: ModelDeclaration, method: str) -> np.ndarray:
    """:func:`data_mask`, raising :class:`DataError` naming the first node without a local
    dataset (methods whose every node trains on its own data need one at each node)."""
    mask = data_mask(model)
    if not mask.all():
        node = model.nodes[int(np.flatnonzero(~mask)[0])]
        raise DataError(f"{method}: node {node!r} has no local dataset (its loss is "
                        f"{model.loss(node)!r}); {method} needs data at every node")
    return mask
