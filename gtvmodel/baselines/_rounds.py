"""The per-round record of an iterative baseline: objective on its target every round, the
certified gap (34) every ``certify_every`` rounds, values sent and time (the recording's own
time -- objectives and certificates -- excluded: it is the observer's, not the method's)."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from .._validate import check_int
from .result import RoundHistory
from .target import TargetCertifier

__all__ = ["RoundRecorder", "check_rounds"]


def check_rounds(rounds: Any, certify_every: Any, where: str) -> tuple[int, int]:
    """``rounds >= 1`` and ``certify_every >= 0`` (:class:`ParameterError` naming them)."""
    return (check_int(rounds, "rounds", min_val=1, where=where),
            check_int(certify_every, "certify_every", min_val=0, where=where))


class RoundRecorder:
    """Rows of :class:`RoundHistory` for one run: :meth:`record` after every round;
    :meth:`finish` certifies the final weights (always) and builds the history.  The time the
    recording takes (objectives, certificates) is kept apart (``observer``) from the method's."""

    def __init__(self, certifier: TargetCertifier, certify_every: int, values_per_round: int):
        self.certifier = certifier
        self.every = certify_every
        self.per_round = values_per_round
        self.rows: list[tuple] = []
        self.observer = 0.0
        self.cert_time = 0.0
        self.start = time.perf_counter()
        self.last: tuple[int, Any] | None = None  # (round, certificate) of the last certificate

    def _certify(self, k: int, W: np.ndarray, flows: Any) -> Any:
        t0 = time.perf_counter()
        cert = self.certifier(W, flows)
        self.cert_time += time.perf_counter() - t0
        self.last = (k, cert)
        return cert

    def record(self, k: int, W: np.ndarray, flows: Any = None) -> None:
        """The row of round ``k`` (weights ``W``; ``flows``: the method's edge flows on the
        target, if it has them)."""
        t0 = time.perf_counter()
        elapsed = t0 - self.start - self.observer
        gap = math.nan
        if self.every and k % self.every == 0:
            gap = float(self._certify(k, W, flows).gap)
        self.rows.append((k, self.certifier.objective(W), gap, k * self.per_round, elapsed))
        self.observer += time.perf_counter() - t0

    def finish(self, k: int, W: np.ndarray, flows: Any = None) -> tuple[Any, RoundHistory,
                                                                       dict[str, float]]:
        """``(certificate of the final weights, history, timings)``; the final round's row
        gets the final gap.  Timings: ``rounds`` (the method), ``record`` (objectives and
        certificates of the history and the final certificate), ``certificate`` (the
        certificates alone) and ``total``."""
        t0 = time.perf_counter()
        run_time = t0 - self.start - self.observer
        if self.last is not None and self.last[0] == k:
            cert = self.last[1]
        else:
            cert = self._certify(k, W, flows)
            if self.rows and self.rows[-1][0] == k:
                self.rows[-1] = (*self.rows[-1][:2], float(cert.gap), *self.rows[-1][3:])
        self.observer += time.perf_counter() - t0
        timings = {"rounds": run_time, "record": self.observer, "certificate": self.cert_time,
                   "total": run_time + self.observer}
        return cert, RoundHistory.from_rows(self.rows), timings
