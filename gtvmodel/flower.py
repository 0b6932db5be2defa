"""Certified server-side evaluation for Flower (flwr) federated learning on gtvmodel's datasets.

A Flower server that trains one global linear model ``w`` (FedAvg, FedProx, ...) can report,
each round, how far ``w`` is from optimal on two convex targets of the same networked data:

``"consensus"``
    ``min_w sum_i L_i(w)``: the problem FedAvg-type methods solve (one shared model);
``"gtv"``
    GTV minimization (16) of paper 001 ("Networked Federated Learning", SarcheshmehPour,
    Tian, Zhang, Jung, 2022), ``min_W sum_i L_i(w_i) + lam sum_e A_e phi(w_i - w_j)``, at the
    candidate ``w_i = w`` for every node.

Both numbers are certified duality gaps (34) (:func:`gtvmodel.baselines.certify_target`):
upper bounds on the suboptimality of the global model on that target, computed from the
weights alone, whatever produced them.  As the rounds go on, the consensus gap falls towards 0
while the GTV gap stays at the price of one shared model on clustered data.

This module does not import flwr: :class:`CertifiedEvaluator` is a plain callable with the
signature of the ``evaluate_fn`` of Flower's strategies, ``(server_round, parameters,
config) -> (loss, metrics)`` with ``parameters`` the list of numpy arrays of the global
model (``flwr.common.parameters_to_ndarrays``); for Flower's message API
(``flwr.serverapp.strategy``, ``(server_round, arrays) -> MetricRecord``) wrap
:meth:`CertifiedEvaluator.metrics` as ``MetricRecord(ev.metrics(rnd,
arrays.to_numpy_ndarrays()))``.  A Flower App using it is in ``examples/flower_app/`` and
``docs/flower.md`` walks through it; install Flower with ``pip install 'gtvmodel[flower]'``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._validate import check_option
from .baselines.central import pooled
from .baselines.target import certify_target
from .datasets import NetworkedData
from .declaration import ModelDeclaration
from .errors import DataError
from .solve.exact import solve_exact

__all__ = ["CertifiedEvaluator", "global_weights"]

TARGETS = ("gtv", "consensus")


def global_weights(parameters: Sequence[Any], n: int, d: int) -> np.ndarray:
    """The ``(n, d)`` candidate ``w_i = w`` of a global model given as Flower's list of arrays
    (concatenated and flattened: ``d`` numbers in all, e.g. ``[w]`` or ``[coef, intercept]``
    when the dataset's features end with the constant feature)."""
    arrays = [np.asarray(a, dtype=float).ravel() for a in parameters]
    w = np.concatenate(arrays) if arrays else np.zeros(0)
    if w.size != d:
        raise DataError(f"CertifiedEvaluator: the global model has {w.size} numbers, the "
                        f"model's w_i has d = {d}")
    if not np.all(np.isfinite(w)):
        raise DataError("CertifiedEvaluator: the global model has NaN or inf entries")
    return np.broadcast_to(w, (n, d)).copy()


@dataclass
class CertifiedEvaluator:
    """Flower ``evaluate_fn``: certified gaps of the global model on the GTV and consensus
    targets of a networked dataset, one row of ``history`` per call.

    Each call returns ``(loss, metrics)``: ``loss`` is ``sum_i L_i(w)`` (the consensus
    objective), ``metrics`` has ``gap_<target>`` (certified), ``objective_<target>`` and,
    where the dataset has true weights, ``mse`` (40).

    Parameters
    ----------
    model : GTVModel or NetworkedData
        The GTV problem (16) (a dataset: its ``NetworkedData.model``
        at ``lam``).
    lam : float or None
        ``lambda`` for a dataset (default 1e-2, the dataset's); ignored for a model.
    targets : sequence of {"gtv", "consensus"}
        The targets certified each round.
    reference : bool
        Also solve each target exactly once (``solve_exact``) and report the true
        suboptimality ``subopt_<target>`` beside the certified gap (small problems).
    history : list of dict
        The rows of ``metrics`` (``round``, ``loss``, ``objective_<target>``,
        ``gap_<target>``, ...), one appended per call; default a new empty list.

    Raises
    ------
    DataError
        ``model`` is neither a :class:`~gtvmodel.GTVModel` (a ``ModelDeclaration``) nor a
        ``gtvmodel.datasets.NetworkedData``; in a call, the global model's arrays hold
        other than ``d`` numbers in all, or NaN or inf entries.
    ParameterError
        An entry of ``targets`` is not ``"gtv"`` or ``"consensus"``.

    Examples
    --------
    Two nodes with the means 1 and 3 (squared loss, ``d = 1``): the global model ``w = 2``
    is optimal for the consensus target, not for GTV at ``lambda = 0.1``; each certified
    gap is at least the true suboptimality:

    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> from gtvmodel.flower import CertifiedEvaluator
    >>> model = gm.GTVModel(nx.path_graph(2), 1, lam=0.1)
    >>> model.set_data(np.ones((4, 1)), np.array([1.0, 1.0, 3.0, 3.0]), "squared",
    ...                node_index=[0, 0, 1, 1])
    >>> ev = CertifiedEvaluator(model, reference=True)
    >>> loss, metrics = ev(1, [np.array([2.0])])  # Flower's evaluate_fn call
    >>> loss, {k: round(v, 3) for k, v in sorted(metrics.items())}
    ... # doctest: +NORMALIZE_WHITESPACE
    (2.0, {'gap_consensus': 0.0, 'gap_gtv': 1.805, 'objective_consensus': 2.0,
           'objective_gtv': 2.0, 'subopt_consensus': 0.0, 'subopt_gtv': 1.805})
    >>> len(ev.history)
    1
    """

    model: Any
    lam: float | None = None
    targets: Sequence[str] = TARGETS
    reference: bool = False
    history: list[dict[str, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.data = self.model if isinstance(self.model, NetworkedData) else None
        if self.data is not None:
            self.model = self.data.model(lam=1e-2 if self.lam is None else self.lam)
        if not isinstance(self.model, ModelDeclaration):
            raise DataError(f"CertifiedEvaluator: model must be a GTVModel or a NetworkedData, "
                            f"got {type(self.model).__name__}")
        self.targets = tuple(check_option(t, "targets", TARGETS, where="CertifiedEvaluator")
                             for t in self.targets)
        self._optimum = {t: self._solve(t) for t in self.targets} if self.reference else {}

    def _solve(self, target: str) -> float:
        """The optimal value of ``target`` (an exact solve, for ``reference=True``)."""
        if target == "gtv":
            return float(self.model.objective(solve_exact(self.model).weights))
        W = pooled(self.model, weighting="nodes").weights
        return float(self.model.loss_values(W).sum())

    def metrics(self, server_round: int, parameters: Sequence[Any]) -> dict[str, float]:
        """The round's metrics (see the class docstring), also appended to :attr:`history`."""
        W = global_weights(parameters, self.model.num_nodes, self.model.dim)
        losses = float(self.model.loss_values(W).sum())
        row: dict[str, float] = {"round": float(server_round), "loss": losses}
        for t in self.targets:
            value = losses + (self.model.penalty_value(W) if t == "gtv" else 0.0)
            row[f"objective_{t}"] = float(value)
            row[f"gap_{t}"] = float(certify_target(self.model, W, t).gap)
            if t in self._optimum:
                row[f"subopt_{t}"] = float(value - self._optimum[t])
        if self.data is not None and np.isfinite(self.data.true_weights).all():
            row["mse"] = self.data.mse(W)
        self.history.append(row)
        return row

    def __call__(self, server_round: int, parameters: Sequence[Any],
                 config: dict[str, Any] | None = None) -> tuple[float, dict[str, float]]:
        """Flower's ``evaluate_fn(server_round, parameters, config) -> (loss, metrics)``."""
        row = self.metrics(server_round, parameters)
        return row["loss"], {k: v for k, v in row.items() if k not in ("loss", "round")}
