"""What every FL baseline returns: :class:`BaselineResult` with its per-round :class:`RoundHistory`.

A baseline is a federated-learning method run beside GTV minimization (issue 10: local,
pooled, oracle, FedSGD, FedAvg, FedProx, FedRelax and its privacy variants, IFCA, ADMM for the
network Lasso, Fed-HT).  Its result speaks the package's shared vocabulary
(:class:`~gtvmodel.results.Result`: ``weights`` ``(n, d)`` in model order, ``weight(node)``,
``status``, ``success``, ``timings``, ``to_dict``) plus what FL methods trade: communication
``rounds`` and ``values_sent`` (floats sent over the network, counted per round for every
message a node or the server sends).

Where the method's target is a convex GTV problem (``target`` names it: ``"gtv"`` for the
model's own problem, ``"local"`` for λ = 0, ``"consensus"`` for one shared model), ``certificate``
holds the package's certified gap of the returned weights on that problem and ``gap`` is its
value; ``convex=False`` (IFCA, Fed-HT) means the method is non-convex and never certified
(``gap`` is NaN, ``certificate`` None).

Where the method holds dual information, ``flows`` are its edge flows ``u`` ``(|E|, d)`` in the
package's convention (docs/conventions.md: model edge order, orientation ``e+ < e-``,
``-(D^T u)_i in dL_i(w_i)``, ``u_e in lambda A_e dphi(w_{e+} - w_{e-})``) *on the method's
target problem*, so that ``certify`` of ``(weights, flows)`` on that problem is the method's own
certificate: ADMM's unscaled duals (target ``"gtv"``: ``gm.certify(model, r.weights,
r.flows)``), FedRelax's ``lambda A_e (w_{e+} - w_{e-})`` (target ``"gtv-squared"``:
``certify_target(model, r.weights, "gtv-squared", flows=r.flows)``); None for every other
method (no duals).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..results import ColumnTable, Result, jsonable

__all__ = ["RoundHistory", "BaselineResult"]


@dataclass
class RoundHistory(ColumnTable):
    """Recorded rounds of a baseline: round 0, every ``record_every`` rounds, every
    ``certify_every`` rounds and the last (:class:`~gtvmodel.baselines._rounds.RoundRecorder`).

    Columns (numpy arrays of equal length): ``round`` (communication round, 0 = the start),
    ``objective`` (the method's target objective at the round's weights: the GTV objective
    for methods with a GTV target, the method's own training loss otherwise), ``gap``
    (certified gap on the target problem, NaN where not computed or not defined),
    ``values_sent`` (cumulative floats sent up to and including the round) and ``time``
    (seconds of the method since the start, the recording's own time excluded).
    """

    round: np.ndarray
    objective: np.ndarray
    gap: np.ndarray
    values_sent: np.ndarray
    time: np.ndarray

    COLUMNS: ClassVar[tuple[str, ...]] = ("round", "objective", "gap", "values_sent", "time")
    INTEGER_COLUMNS: ClassVar[tuple[str, ...]] = ("round", "values_sent")


@dataclass(kw_only=True)
class BaselineResult(Result):
    """The result of one FL baseline run (module docstring).

    The baselines build it; the constructor takes the fields below as keywords and checks
    nothing.  The shared vocabulary (:meth:`weight`, :meth:`to_dict`, ...) is
    :class:`gtvmodel.results.Result`'s.

    Parameters
    ----------
    timings : dict
        Seconds per phase of the run (e.g. ``"setup"``, ``"rounds"``, ``"certificate"``).
    labels : Labels
        The model's node labels and edges (:class:`~gtvmodel.results.Labels`), for
        :meth:`weight`.
    method : str
        The method's name (``"fedavg"``, ``"admm"``, ...).
    weights : ndarray (n, d)
        The local models ``w_i`` in model order (one row per node, also for methods that learn
        one shared model or one model per cluster).
    status : str
        ``"converged"`` (the method's own stopping rule held), ``"max_rounds"``,
        ``"completed"`` for methods that run a fixed number of rounds or solve in closed form,
        or ``"diverged"`` (a local step overflowed: the last finite weights are returned).
    rounds : int
        Communication rounds run.
    values_sent : int
        Floats sent over the network in all rounds together.
    history : RoundHistory or None
        Per-round record (None for one-shot methods).
    convex : bool
        Whether the method solves (or approximates) a convex problem; ``False`` for IFCA and
        Fed-HT, which are never certified.
    target : str or None
        The convex problem the method targets (``"gtv"``, ``"local"``, ``"consensus"``), None
        where it has none.
    certificate : Certificate or None
        The certified gap of :attr:`weights` on :attr:`target` (None where not certified).
    flows : ndarray (|E|, d) or None
        The method's edge flows on :attr:`target` in the package's convention (module
        docstring), None for methods without dual information.
    info : dict
        Method-specific extras (e.g. IFCA's cluster assignment, ADMM's residuals, the support
        found by Fed-HT).

    Attributes
    ----------
    success : bool
        ``status`` is ``"converged"`` or ``"completed"``.
    gap : float
        ``certificate.gap``, the certified gap on :attr:`target`; NaN when not certified.

    Raises
    ------
    TypeError
        A required field is missing or an unknown keyword is given (the dataclass
        constructor; no value is validated).

    Examples
    --------
    ADMM for the network Lasso targets the model's own GTV problem (16); its flows certify
    its weights there:

    >>> import gtvmodel as gm
    >>> from gtvmodel import baselines, datasets
    >>> model = datasets.chain(n=3, eps=0.1, m=5, sigma=0.1, seed=0).model()
    >>> r = baselines.admm(model, rounds=50)
    >>> r.method, r.status, r.success, r.target, r.convex
    ('admm', 'converged', True, 'gtv', True)
    >>> r.weights.shape, r.flows.shape, bool(r.gap < 1e-8)  # (n, d), (|E|, d)
    ((6, 2), (5, 2), True)
    >>> bool(gm.certify(model, r.weights, r.flows).gap == r.gap)
    True
    >>> r.history.columns().keys()
    dict_keys(['round', 'objective', 'gap', 'values_sent', 'time'])
    """

    method: str
    weights: np.ndarray
    status: str
    rounds: int = 0
    values_sent: int = 0
    history: RoundHistory | None = None
    convex: bool = True
    target: str | None = None
    certificate: Any = None
    flows: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)

    _BULKY: ClassVar[tuple[str, ...]] = ("history", "certificate", "info")

    @property
    def success(self) -> bool:
        """The method ended normally (``status`` is ``"converged"`` or ``"completed"``)."""
        return self.status in ("converged", "completed")

    @property
    def gap(self) -> float:
        """The certified gap on :attr:`target` (``certificate.gap``); NaN when not certified."""
        return float("nan") if self.certificate is None else float(self.certificate.gap)

    def to_dict(self, arrays: bool = False) -> dict[str, Any]:
        """The shared summary (:meth:`Result.to_dict`) plus the certified ``gap``."""
        out = super().to_dict(arrays)
        out["gap"] = jsonable(self.gap, False)
        return out

