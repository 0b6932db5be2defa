"""Federated-learning methods run beside GTV minimization (issue 10), each returning a
:class:`~gtvmodel.baselines.result.BaselineResult` and certified where its target is convex."""

from .admm import admm
from .central import local, oracle, pooled
from .fedrelax import fedrelax
from .result import BaselineResult, RoundHistory
from .target import TARGETS, certify_target

__all__ = ["BaselineResult", "RoundHistory", "TARGETS", "certify_target", "local", "pooled",
           "oracle", "fedrelax", "admm"]
