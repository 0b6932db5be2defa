"""The result of the exact solver (:func:`gtvmodel.solve.exact.solve_exact`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .results import Result

__all__ = ["Solution"]


@dataclass(kw_only=True)
class Solution(Result):
    """An exact (reference) solution of GTV minimization (16); the shared vocabulary
    (:meth:`weight`, :meth:`flow`, :meth:`to_dict`, ...) is :class:`gtvmodel.results.Result`'s.

    The fields are keyword-only, as :func:`~gtvmodel.solve.exact.solve_exact` fills them;
    each is also the attribute of that name.

    Parameters
    ----------
    timings : dict
        Seconds: ``"compile"`` (building the CVXPY problem and canonicalizing it for the
        solver; no build time when the cached problem is re-solved), ``"solve"`` (the solver's
        own time) and, with the self-certificate, ``"certificate"``.
    labels : Labels
        The model's node labels and edges (:class:`gtvmodel.results.Labels`), for
        :meth:`weight` and :meth:`flow`.
    weights : ndarray (n, d) or None
        ``w_i`` in ``model.nodes`` order (None only for a failed solve returned with
        ``raise_on_failure=False``; then ``status`` says why and ``info["error"]`` how).
    flows : ndarray (|E|, d)
        Edge flows ``u_e`` (the dual variables of ``z = D w``) with docs/conventions.md's sign:
        ``-(D^T u)_i in dL_i(w_i)`` and ``u_e in lambda A_e dphi(w_{e+} - w_{e-})``.
    objective : float
        The primal objective ``P(w)`` as the solver reports it.
    status : str
        CVXPY's status string (``"optimal"`` unless inaccurate results were accepted).
    success : bool
        With the self-certificate (default): the certified relative gap is within the requested
        ``accuracy``; with ``certify=False``: the solver reports ``"optimal"``.
    solver : str
        The solver's name.
    info : dict
        ``"lam"``: the lambda solved for; ``"tolerances"``: the solver options of the accepted
        run (Clarabel may fall back to looser levels, see
        :data:`gtvmodel.solve.exact.FALLBACK_SOLVER_OPTIONS`); with the self-certificate
        (default): ``"certified_gap"``, ``"certified_relative_gap"`` and, when the first answer
        missed the accuracy, ``"resolved"`` (whether the re-solve ran), or
        ``"certificate_error"`` when no certificate could be computed.
    certificate : Certificate or None
        The :class:`gtvmodel.certificates.certificate.Certificate` of the solution (None with
        ``certify=False``): ``certificate.gap >= P(weights) - P*``.
    unique : bool or None
        Whether the minimizer of (16) is unique (:func:`gtvmodel.solve.uniqueness.uniqueness`:
        ``True`` when every node function is strongly convex, ``False`` when a group of nodes
        is free to move along a common direction, ``None`` when not determined).  Only with
        ``unique=True`` are the weights *the* minimizer to compare other solvers' weights with;
        otherwise compare objective values (or certificates).
    unique_reason : str
        Why (names the nodes concerned).

    Raises
    ------
    TypeError
        A required field missing, or an unknown or positional argument (the dataclass
        constructor); the values are stored as given, unchecked.

    Examples
    --------
    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), dim=1, lam=0.5)
    >>> model.set_loss(0, gm.QuadraticLoss([1.0]))
    >>> model.set_loss(2, gm.QuadraticLoss([-1.0]))
    >>> sol = gm.solve_exact(model)
    >>> type(sol).__name__, sol.status, sol.success
    ('Solution', 'optimal', True)
    >>> sol.weights.shape, sol.flows.shape, sol.certificate.gap >= 0
    ((3, 1), (2, 1), True)
    """

    weights: np.ndarray | None
    flows: np.ndarray | None
    objective: float
    status: str
    success: bool
    solver: str
    info: dict[str, Any] = field(repr=False, default_factory=dict)
    certificate: Any = field(repr=False, default=None)
    unique: bool | None = None
    unique_reason: str = ""
