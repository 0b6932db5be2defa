"""The per-round record of every iterative baseline (FedRelax, ADMM, FedAvg/FedSGD/FedProx,
IFCA, Fed-HT/FedIter-HT): one argument check of the round schedule (:func:`check_rounds`) and
one recorder (:class:`RoundRecorder`).

A row of :class:`~gtvmodel.baselines.result.RoundHistory` is recorded at round 0, every
``record_every`` rounds, every ``certify_every`` rounds (with the certified gap (34) of the
round's iterate on the method's convex target) and at the last round run (with the certificate
of the final weights).  ``values_sent`` is cumulative.  The time of the recording itself --
objectives and certificates -- is the observer's, not the method's: it is excluded from the
``time`` column and from ``timings["rounds"]``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .._validate import check_int
from ..declaration import ModelDeclaration
from ..results import Labels
from .result import BaselineResult, RoundHistory

__all__ = ["Schedule", "check_rounds", "RoundRecorder", "Record", "result"]


class Schedule(NamedTuple):
    """The checked round schedule of an iterative baseline (:func:`check_rounds`)."""

    rounds: int
    record_every: int
    certify_every: int
    local_steps: int


def check_rounds(where: str, rounds: Any, *, record_every: Any = 1, certify_every: Any = 0,
                 local_steps: Any = 1) -> Schedule:
    """``rounds >= 1``, ``record_every >= 1``, ``certify_every >= 0`` (0: only the final
    weights are certified) and ``local_steps >= 1`` as integers (:class:`~gtvmodel.errors.
    ParameterError` naming the argument and ``where``)."""
    return Schedule(check_int(rounds, "rounds", min_val=1, where=where),
                    check_int(record_every, "record_every", min_val=1, where=where),
                    check_int(certify_every, "certify_every", min_val=0, where=where),
                    check_int(local_steps, "local_steps", min_val=1, where=where))


class Record(NamedTuple):
    """What :meth:`RoundRecorder.finish` returns: the certificate of the final weights (None
    without a certifier), the history, the timings and the cumulative values sent."""

    certificate: Any
    history: RoundHistory
    timings: dict[str, float]
    values_sent: int


class RoundRecorder:
    """Rows of :class:`RoundHistory` for one run (module docstring).

    ``objective(state)`` is the method's target objective (or its own training loss) at a
    round's ``state`` -- whatever the method passes to :meth:`round`: its ``(n, d)`` weights,
    ``(weights, flows)``, its global ``w`` -- evaluated only for recorded rows;
    ``certifier(state)`` the certificate of that state on the method's convex target (None:
    never certified).  Call :meth:`round` after every round (round 0 included) and
    :meth:`finish` once at the end.
    """

    def __init__(self, objective: Callable[[Any], float],
                 certifier: Callable[[Any], Any] | None = None, *, record_every: int = 1,
                 certify_every: int = 0):
        self.objective = objective
        self.certifier = certifier
        self.record_every = record_every
        self.certify_every = certify_every if certifier is not None else 0
        self.rows: list[tuple] = []
        self.sent = 0
        self.observer = 0.0
        self.cert_time = 0.0
        self.start = time.perf_counter()
        self.last: tuple[int, Any] | None = None  # (round, certificate) of the last certificate

    def _certify(self, t: int, state: Any) -> Any:
        t0 = time.perf_counter()
        cert = self.certifier(state)
        self.cert_time += time.perf_counter() - t0
        self.last = (t, cert)
        return cert

    def _row(self, t: int, state: Any, elapsed: float, certify: bool) -> None:
        gap = float(self._certify(t, state).gap) if certify else np.nan
        with np.errstate(over="ignore", invalid="ignore"):  # a diverging run's loss is inf
            value = float(self.objective(state))
        self.rows.append((t, value, gap, self.sent, elapsed))

    def round(self, t: int, sent: int, state: Any) -> None:
        """Count ``sent`` values for round ``t`` and record its row when due."""
        t0 = time.perf_counter()
        self.sent += int(sent)
        certify = bool(self.certify_every) and t % self.certify_every == 0
        if certify or t % self.record_every == 0:
            self._row(t, state, t0 - self.start - self.observer, certify)
        self.observer += time.perf_counter() - t0

    def finish(self, t: int, state: Any, certify: bool = True) -> Record:
        """Record the last round ``t`` run (unless recorded already) and, with a certifier and
        ``certify``, certify its ``state`` (reusing round ``t``'s certificate); the last row
        gets the final gap.  Timings: ``rounds`` (the method alone), ``record`` (objectives
        and certificates), ``certificate`` (the certificates alone) and ``total``."""
        t0 = time.perf_counter()
        run_time = t0 - self.start - self.observer
        if not self.rows or self.rows[-1][0] != t:
            self._row(t, state, run_time, False)
        cert = None
        if self.certifier is not None and certify:
            cert = (self.last[1] if self.last is not None and self.last[0] == t
                    else self._certify(t, state))
            self.rows[-1] = (*self.rows[-1][:2], float(cert.gap), *self.rows[-1][3:])
        self.observer += time.perf_counter() - t0
        timings = {"rounds": run_time, "record": self.observer, "certificate": self.cert_time,
                   "total": run_time + self.observer}
        return Record(cert, RoundHistory.from_rows(self.rows), timings, self.sent)


def result(model: ModelDeclaration, method: str, weights: np.ndarray, status: str, rounds: int,
           record: Record, setup: float, **fields: Any) -> BaselineResult:
    """The :class:`BaselineResult` of an iterative baseline's run: its ``record``
    (:meth:`RoundRecorder.finish`) gives the history, the values sent, the certificate and the
    timings (plus ``setup``, the time before round 0, also in ``total``)."""
    timings = {"setup": setup, **record.timings}
    timings["total"] += setup
    return BaselineResult(method=method, weights=weights, status=status, rounds=rounds,
                          values_sent=record.values_sent, history=record.history,
                          certificate=record.certificate, timings=timings,
                          labels=Labels(model.nodes, model.edges), **fields)
