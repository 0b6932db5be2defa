"""Result objects returned by the solvers."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import UnknownNodeError

__all__ = ["Solution"]


@dataclass
class Solution:
    """An exact (reference) solution of GTV minimization (16).

    Attributes
    ----------
    weights : ndarray (n, d)
        ``w_i`` in ``model.nodes`` order.
    flows : ndarray (|E|, d)
        Edge flows ``u_e`` (the dual variables of ``z = D w``) with MATH.md's sign:
        ``-(D^T u)_i in dL_i(w_i)`` and ``u_e in lambda A_e dphi(w_{e+} - w_{e-})``.
    objective : float
        The primal objective ``P(w)`` as the solver reports it.
    status : str
        CVXPY's status string (``"optimal"`` unless inaccurate results were accepted).
    solver : str
        The solver's name.
    compile_time : float
        Seconds spent building the CVXPY problem and canonicalizing it for the solver.
    solve_time : float
        Seconds the solver itself reports.
    nodes : list
        Node labels, for :meth:`weight`.
    info : dict
        ``"lam"``: the lambda solved for; ``"tolerances"``: the solver options of the accepted
        run (Clarabel may fall back to looser levels, see
        :data:`gtvmodel.exact.FALLBACK_SOLVER_OPTIONS`); with the self-certificate (default):
        ``"certified_gap"``, ``"certified_relative_gap"``, ``"certified"`` (relative gap within
        the requested accuracy), ``"certificate_time"`` (seconds) and, when the first answer
        missed the accuracy, ``"resolved"`` (whether the re-solve ran).
    certificate : Certificate or None
        The :class:`gtvmodel.certificate.Certificate` of the solution (None with
        ``certify=False``): ``certificate.gap >= P(weights) - P*``.
    """

    weights: np.ndarray
    flows: np.ndarray
    objective: float
    status: str
    solver: str
    compile_time: float
    solve_time: float
    nodes: list[Hashable] = field(repr=False, default_factory=list)
    info: dict[str, Any] = field(repr=False, default_factory=dict)
    certificate: Any = field(repr=False, default=None)

    def weight(self, node: Hashable) -> np.ndarray:
        """The weight vector ``w_i`` of a node label."""
        try:
            i = self._index()[node]
        except (KeyError, TypeError):
            raise UnknownNodeError(f"node {node!r} is not in the graph") from None
        return self.weights[i]

    def weights_by_node(self) -> dict[Hashable, np.ndarray]:
        """``{node: w_i}`` for all nodes."""
        return {v: self.weights[i] for i, v in enumerate(self.nodes)}

    def _index(self) -> dict[Hashable, int]:
        idx = self.__dict__.get("_idx")
        if idx is None:
            idx = {v: i for i, v in enumerate(self.nodes)}
            self.__dict__["_idx"] = idx
        return idx
