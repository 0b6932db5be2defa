"""The request every route of :func:`~gtvmodel.solve.exact.solve_exact` reads
(:class:`RouteRequest`: its checked arguments) and the strategy a route is (:class:`Route`:
``accepts`` and ``run``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..declaration import ModelDeclaration
from ..errors import ParameterError
from ..solution import Solution
from .polish import unsupported_reason

__all__ = ["RouteRequest", "Route", "check_polish", "POLISH_OPTIONS"]

#: The values of ``solve_exact``'s ``polish``: ``"auto"`` (polish an aimed run's answer only
#: where its own certificate misses the accuracy; always after a full run), ``True`` (always),
#: ``False`` (never).
POLISH_OPTIONS = ("auto", True, False)


def check_polish(value: Any, where: str) -> bool | str:
    """``polish`` checked: a bool (Python or numpy) or ``"auto"``; :class:`ParameterError`
    naming it otherwise."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str) and value == "auto":
        return value
    raise ParameterError(f"{where}: polish must be True, False or 'auto', got {value!r}")


@dataclass
class RouteRequest:
    """:func:`solve_exact`'s checked arguments, as every :class:`Route` reads them:
    ``accuracy`` is the certified relative gap aimed at, ``required`` the one ``success``
    needs (:data:`SUCCESS_ACCURACY` unless ``accuracy`` was given), ``given`` whether it was;
    ``aimed`` False (``method="interior"``) runs the conic solver's full ladder at once;
    ``handover`` (``method="auto"`` without a named solver) lets a route whose answer is not
    certified to ``required`` hand over to the next one instead of warning; ``polish`` is one
    of :data:`POLISH_OPTIONS`."""

    solver: str | None
    accept_inaccurate: bool
    verbose: bool
    certify: bool
    accuracy: float
    required: float
    given: bool
    raise_on_failure: bool
    threshold: int | None
    polish: bool | str
    opts: dict[str, Any] = field(default_factory=dict)
    aimed: bool = True
    handover: bool = False
    _facts: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def polish_reason(self, model: ModelDeclaration) -> str | None:
        """Why the polish does not apply (:func:`gtvmodel.solve.polish.unsupported_reason`,
        or ``polish=False``/``certify=False``); None if it does.  Computed once per call."""
        if "polish" not in self._facts:
            self._facts["polish"] = (
                "polish=False" if self.polish is False else "certify=False" if not self.certify
                else unsupported_reason(model))
        return self._facts["polish"]

    def polish_when_needed(self) -> bool:
        """Whether an aimed run's answer is certified first and polished only where that
        certificate misses ``accuracy`` (``polish="auto"``)."""
        return self.polish == "auto"


@dataclass(frozen=True)
class Route:
    """One strategy of :func:`solve_exact`: ``accepts(model, request)`` says why it applies
    (a reason) or None; ``run(model, request, reason)`` returns the :class:`Solution`, or
    None to decline after all (the next accepting route is tried)."""

    name: str
    accepts: Callable[[ModelDeclaration, RouteRequest], str | None]
    run: Callable[[ModelDeclaration, RouteRequest, str], Solution | None]
