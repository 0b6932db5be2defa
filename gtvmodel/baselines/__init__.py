"""Federated-learning methods run beside GTV minimization (issue 10), each returning a
:class:`~gtvmodel.baselines.result.BaselineResult` and certified where its target is convex."""

from .result import BaselineResult, RoundHistory

__all__ = ["BaselineResult", "RoundHistory"]
