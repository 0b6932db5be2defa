"""Federated-learning methods run beside GTV minimization (issue 10), each returning a
:class:`~gtvmodel.baselines.result.BaselineResult` and certified where its target is convex."""

from .fed_ht import fed_ht, fediter_ht
from .fedavg import fedavg, fedprox, fedsgd
from .ifca import ifca
from .result import BaselineResult, RoundHistory

__all__ = ["BaselineResult", "RoundHistory", "fedavg", "fedprox", "fedsgd", "fed_ht",
           "fediter_ht", "ifca"]
