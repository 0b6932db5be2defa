"""The request every route of :func:`~gtvmodel.solve.exact.solve_exact` reads
(:class:`RouteRequest`: its checked arguments) and the strategy a route is (:class:`Route`:
``accepts`` and ``run``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..declaration import ModelDeclaration
from ..solution import Solution
from .polish import unsupported_reason

__all__ = ["RouteRequest", "Route"]


@dataclass
class RouteRequest:
    """:func:`solve_exact`'s checked arguments, as every :class:`Route` reads them:
    ``accuracy`` is the certified relative gap aimed at, ``required`` the one ``success``
    needs (:data:`SUCCESS_ACCURACY` unless ``accuracy`` was given), ``given`` whether it was;
    ``aimed`` False (``method="interior"``) runs the conic solver's full ladder at once;
    ``handover`` (``method="auto"`` without a named solver) lets a route whose answer is not
    certified to ``required`` hand over to the next one instead of warning."""

    solver: str | None
    accept_inaccurate: bool
    verbose: bool
    certify: bool
    accuracy: float
    required: float
    given: bool
    raise_on_failure: bool
    threshold: int | None
    polish: bool
    opts: dict[str, Any] = field(default_factory=dict)
    aimed: bool = True
    handover: bool = False
    _facts: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def polish_reason(self, model: ModelDeclaration) -> str | None:
        """Why the polish does not apply (:func:`gtvmodel.solve.polish.unsupported_reason`,
        or ``polish=False``/``certify=False``); None if it does.  Computed once per call."""
        if "polish" not in self._facts:
            self._facts["polish"] = (
                "polish=False" if not self.polish else "certify=False" if not self.certify
                else unsupported_reason(model))
        return self._facts["polish"]


@dataclass(frozen=True)
class Route:
    """One strategy of :func:`solve_exact`: ``accepts(model, request)`` says why it applies
    (a reason) or None; ``run(model, request, reason)`` returns the :class:`Solution`, or
    None to decline after all (the next accepting route is tried)."""

    name: str
    accepts: Callable[[ModelDeclaration, RouteRequest], str | None]
    run: Callable[[ModelDeclaration, RouteRequest, str], Solution | None]
