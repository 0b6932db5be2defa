"""Federated-learning methods run beside GTV minimization (issue 10), each returning a
:class:`~gtvmodel.baselines.result.BaselineResult` and certified where its target is convex."""

from .admm import admm
from .central import local, oracle, pooled
from .fed_ht import fed_ht, fediter_ht
from .fedavg import fedavg, fedprox, fedsgd
from .fedrelax import fedrelax
from .ifca import ifca
from .result import BaselineResult, RoundHistory
from .target import TARGETS, certify_target

__all__ = ["BaselineResult", "RoundHistory", "TARGETS", "certify_target", "local", "pooled",
           "oracle", "fedrelax", "admm", "fedavg", "fedprox", "fedsgd", "fed_ht", "fediter_ht",
           "ifca"]
