"""What a run of Algorithm 1 returns: the recorded certificates (:class:`History`) and the
result (:class:`PrimalDualResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..results import ColumnTable, Result

__all__ = ["History", "PrimalDualResult"]


@dataclass
class History(ColumnTable):
    """Recorded iterations (one row every ``record_every`` iterations, and the last one;
    ``from_rows``, ``len`` and ``columns()`` from :class:`~gtvmodel.results.ColumnTable`).

    Columns (numpy arrays): ``iteration``, ``primal`` (``P(w)``), ``dual`` (``D(u')`` of the
    repaired flows), ``gap`` (certified, ``>= P(w) - P*``), ``relative_gap``
    (``gap / max(1, |P|)``), ``primal_residual``, ``dual_residual`` (see
    :class:`ResidualBalancing`), ``c`` (the step scale, NaN for explicit steps) and ``time``
    (seconds since the start).
    """

    iteration: np.ndarray
    primal: np.ndarray
    dual: np.ndarray
    gap: np.ndarray
    relative_gap: np.ndarray
    primal_residual: np.ndarray
    dual_residual: np.ndarray
    c: np.ndarray
    time: np.ndarray

    COLUMNS: ClassVar[tuple[str, ...]] = (
        "iteration", "primal", "dual", "gap", "relative_gap", "primal_residual",
        "dual_residual", "c", "time")
    INTEGER_COLUMNS: ClassVar[tuple[str, ...]] = ("iteration",)

    def __str__(self) -> str:
        head = f"{'iter':>7} {'primal':>14} {'dual':>14} {'gap':>10} {'rel.gap':>10} {'c':>9}"
        lines = [head]
        for j in range(len(self)):
            lines.append(f"{self.iteration[j]:7d} {self.primal[j]:14.8g} {self.dual[j]:14.8g} "
                         f"{self.gap[j]:10.3g} {self.relative_gap[j]:10.3g} {self.c[j]:9.3g}")
        return "\n".join(lines)


@dataclass(kw_only=True)
class PrimalDualResult(Result):
    """Result of :func:`solve_primal_dual`; the shared vocabulary (:meth:`weight`,
    :meth:`flow`, :meth:`to_dict`, ...) is :class:`gtvmodel.results.Result`'s.

    The fields are keyword-only, as :func:`solve_primal_dual` fills them; each is also the
    attribute of that name.

    Parameters
    ----------
    timings : dict
        Seconds: ``setup``, ``node_updates``, ``edge_updates``, ``certificate``, ``total``.
    labels : Labels
        The model's node labels and edges (:class:`gtvmodel.results.Labels`), for
        :meth:`weight` and :meth:`flow`.
    weights : ndarray (n, d)
        The last iterate ``w^k`` (node order).
    flows : ndarray (|E|, d)
        The raw iterate ``u^k`` (the certificate's ``flows`` are the repaired, dual feasible
        ones).
    iterations : int
        The number of iterations run.
    status : str
        ``"converged"``: certified relative gap ``<= tol``; ``"max_iter"``; ``"stopped"``:
        the callback returned True.
    history : History
        The certificates recorded along the run (in :meth:`to_dict` only with
        ``arrays=True``).
    certificate : Certificate or None
        The last one (:class:`~gtvmodel.certificates.certificate.Certificate`; None when the
        run did not certify, ``record_every=None``).
    c : float or None
        The final step scale.
    paths : dict
        How many nodes used which PU path.
    kernel : str
        The edge update DU (33) that ran: ``"numpy"`` or ``"numba"``
        (``NumpyBackend(kernel=...)``).
    certificates_on_device : int
        Runs on a device (``TorchBackend``): how many certificates were
        computed there (:mod:`~gtvmodel.certificates.device_certificate`); 0 for the numpy
        path.
    host_reasons : list of str
        Runs on a device: why the other certificates ran on host copies of the iterate;
        empty for the numpy path.

    Attributes
    ----------
    success : bool
        ``status == "converged"``.
    objective : float
        The primal objective ``P(w)`` of the returned weights (the history's last row; NaN
        when nothing was recorded).
    gap : float
        The last certified duality gap (inf when nothing was recorded).

    Raises
    ------
    TypeError
        A required field missing, or an unknown or positional argument (the dataclass
        constructor); the values are stored as given, unchecked.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), 1, penalty=gm.Norm2(), lam=1.0)
    >>> for i, a in enumerate([0.0, 1.0, 5.0]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> res = gm.solve_primal_dual(model, tol=1e-8)
    >>> type(res).__name__, res.status, res.success, res.kernel
    ('PrimalDualResult', 'converged', True, 'numpy')
    >>> res.weights.shape, res.flows.shape, int(res.history.iteration[-1]) == res.iterations
    ((3, 1), (2, 1), True)
    """

    weights: np.ndarray
    flows: np.ndarray
    iterations: int
    status: str
    history: History
    certificate: Any
    c: float | None
    paths: dict[str, int]
    kernel: str = "numpy"
    certificates_on_device: int = 0
    host_reasons: list[str] = field(default_factory=list)

    _BULKY: ClassVar[tuple[str, ...]] = ("history",)

    @property
    def success(self) -> bool:
        """The run converged: its certified relative gap is at most ``tol``."""
        return self.status == "converged"

    @property
    def objective(self) -> float:
        """The primal objective ``P(w)`` of the returned weights."""
        return float(self.history.primal[-1]) if len(self.history) else float("nan")

    @property
    def gap(self) -> float:
        """The last certified duality gap."""
        return float(self.history.gap[-1]) if len(self.history) else float("inf")

