"""λ paths of GTV minimization (16) and the choice of λ by validation error (paper 001 VI-E).

:func:`lam_path` solves (16) for a sequence of ``lambda`` values on one model, with warm starts:

``method="exact"``
    :func:`~gtvmodel.solve_exact`; ``lambda`` enters the compiled CVXPY problem as a Parameter
    (``gtvmodel._cvx.ScaleParameter``), so the problem is compiled at the first ``lambda`` and
    only re-solved afterwards (the solver itself, Clarabel, starts cold each time).
``method="primal_dual"``
    Algorithm 1 (:func:`~gtvmodel.solve_primal_dual`), each run warm-started from the previous
    run's weights and flows ``(w, u)``.

The ``lambda`` are solved in the order given.  Algorithm 1's warm starts save iterations in
either order, since neighbouring ``lambda`` have nearby solutions; what matters is a fine grid.
Measured (iterations to a certified relative gap of 1e-8 over 8 log-spaced ``lambda`` in
``[0.05, 5]``, certificates every 5 iterations): paper 001 VI-B's chain (2 x 4 nodes) 740 warm
vs 850 cold decreasing, 655 vs 850 increasing; an SBM of 20 + 20 nodes 2340 vs 3190 decreasing,
2225 vs 3190 increasing -- increasing was slightly ahead on both, against the Lasso habit of
starting at the consensus end (which remains the natural order when the path is cut short).
The exact solver gains nothing from the order (it is compiled once; Clarabel starts cold).

Per ``lambda`` the path records the weights, the objective ``P(w)`` (16), the solution's own
certified gap (34), the number of clusters found and, with validation samples, per-node
validation scores; the selected ``lambda`` minimizes the mean validation error over the nodes
with validation samples (ties: the larger ``lambda``, the simpler model).  Optionally the
consensus threshold ``lambda_crit`` (:func:`gtvmodel.theory.consensus_threshold`), above which
the constant solution is optimal, is computed once.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from ._validate import check_bool, check_option, check_scalar
from .declaration import ModelDeclaration
from .errors import DataError, ParameterError
from .primal_dual import solve_primal_dual
from .results import Labels, Result
from .scores import METRICS, NodeSamples, node_samples
from .solve.exact import solve_exact
from .theory import consensus_threshold

__all__ = ["LamPath", "lam_path", "count_clusters"]


@dataclass(kw_only=True)
class LamPath(Result):
    """The result of :func:`lam_path`: one row per ``lambda``, in the order solved.

    :func:`lam_path` builds it; the constructor takes the fields below as keywords and checks
    nothing.  The shared vocabulary (:meth:`to_dict`, ...) is
    :class:`gtvmodel.results.Result`'s, with :meth:`weight` giving a node's path.

    Parameters
    ----------
    timings : dict
        Seconds: ``solve`` (all solves), ``validation``, ``threshold``, ``total``.
    labels : Labels
        The model's node labels and edges (:class:`~gtvmodel.results.Labels`), for
        :meth:`weight`.
    lams : ndarray (L,)
        The ``lambda`` values, as given.
    weights : ndarray (L, n, d)
        ``w_i`` per ``lambda`` (model order); :meth:`weight` gives one node's ``(L, d)`` path.
    objective : ndarray (L,)
        ``P(w)`` of (16) at each ``lambda`` (:meth:`~gtvmodel.GTVModel.objective`).
    gap : ndarray (L,)
        The solution's own certified duality gap (34) (NaN for ``method="exact"`` with
        ``certify=False``).
    clusters : ndarray (L,)
        Number of clusters: connected components of the graph after removing every edge whose
        weights differ by more than ``cluster_tol * max(1, max |w|)`` (Euclidean norm), i.e. the
        pieces of the piecewise-constant solution (:func:`count_clusters`).
    iterations : ndarray (L,) or None
        Algorithm 1's iterations per ``lambda`` (None for ``method="exact"``).
    validation : ndarray (L, n) or None
        Per-node validation scores (:func:`gtvmodel.node_scores`; NaN at nodes without
        validation samples).
    validation_error : ndarray (L,) or None
        Mean validation error over the nodes with validation samples (the score for MSE, ``1 -
        accuracy`` for accuracy, a callable metric's value); with MSE the validation error
        (44) of paper 001 over those nodes.
    selected : int or None
        Index of the selected ``lambda`` (lowest ``validation_error``, ties: the larger
        ``lambda``); None without validation samples.
    selected_lam : float
        ``lams[selected]`` (NaN without validation samples).
    threshold : float
        :func:`gtvmodel.theory.consensus_threshold` of the model (NaN unless ``threshold=True``).
    method : str
        ``"exact"`` or ``"primal_dual"``.
    metric : {"auto", "mse", "accuracy"} or callable
        The validation score :func:`lam_path` was given (``metric``).
    results : list
        The per-``lambda`` results (:class:`~gtvmodel.Solution` or
        :class:`~gtvmodel.PrimalDualResult`).
    status : str
        ``"completed"`` when every solve succeeded, ``"not_all_successful"`` otherwise.

    Attributes
    ----------
    success : bool
        ``status == "completed"``: every solve on the path succeeded.
    selected_weights : ndarray (n, d)
        ``weights[selected]`` (:class:`ParameterError` without validation samples).

    Raises
    ------
    TypeError
        A required field is missing or an unknown keyword is given (the dataclass
        constructor; no value is validated).

    Examples
    --------
    Algorithm 1 along two ``lambda`` on paper 001 VI-B's chain (2 x 4 nodes), each run
    warm-started from the previous one; no validation samples, so nothing is selected:

    >>> import numpy as np, gtvmodel as gm
    >>> from gtvmodel import datasets
    >>> model = datasets.chain(n=4, eps=0.1, m=5, sigma=0.5, seed=0).model()
    >>> path = gm.lam_path(model, [2.0, 0.5], method="primal_dual", tol=1e-6)
    >>> path.status, path.method, path.lams.tolist(), path.clusters.tolist()
    ('completed', 'primal_dual', [2.0, 0.5], [2, 5])
    >>> path.weights.shape, path.iterations.shape  # (L, n, d), one count per lambda
    ((2, 8, 2), (2,))
    >>> bool((path.gap <= 1e-6 * np.maximum(1, np.abs(path.objective))).all())  # (34)
    True
    >>> path.selected, path.weight(0).shape  # node 0's path w_0(lambda): (L, d)
    (None, (2, 2))
    """

    lams: np.ndarray
    weights: np.ndarray
    objective: np.ndarray
    gap: np.ndarray
    clusters: np.ndarray
    iterations: np.ndarray | None = None
    validation: np.ndarray | None = None
    validation_error: np.ndarray | None = None
    selected: int | None = None
    selected_lam: float = float("nan")
    threshold: float = float("nan")
    method: str = "exact"
    metric: Any = "auto"
    results: list[Any] = field(default_factory=list, repr=False)
    status: str = "completed"

    _BULKY: ClassVar[tuple[str, ...]] = ("results",)

    @property
    def success(self) -> bool:
        """Every solve on the path succeeded (its own ``success``)."""
        return self.status == "completed"

    def weight(self, node: Hashable) -> np.ndarray:
        """The ``(L, d)`` path ``w_i(lambda)`` of one node label."""
        return self.weights[:, self.labels.node(node), :]

    @property
    def selected_weights(self) -> np.ndarray:
        """The ``(n, d)`` weights at the selected ``lambda`` (:class:`ParameterError` without
        validation samples)."""
        if self.selected is None:
            raise ParameterError("the path has no selected lambda: pass validation samples")
        return self.weights[self.selected]


def count_clusters(model: ModelDeclaration, W: np.ndarray, tol: float = 1e-3) -> int:
    """Number of pieces of ``W``: connected components of the graph restricted to the edges
    with ``||w_{e+} - w_{e-}||_2 <= tol * max(1, max |W|)`` (one sparse matrix, no loop)."""
    n = model.num_nodes
    E = model.edges
    scale = tol * max(1.0, float(np.abs(W).max()) if W.size else 1.0)
    keep = np.linalg.norm(W[E[:, 0]] - W[E[:, 1]], axis=1) <= scale
    A = sp.coo_matrix((np.ones(int(keep.sum())), (E[keep, 0], E[keep, 1])), shape=(n, n))
    return int(connected_components(A, directed=False)[0])


def _check_lams(lams: Any) -> np.ndarray:
    try:
        arr = np.asarray(lams, dtype=float)
    except (TypeError, ValueError):
        raise ParameterError(f"lam_path: lams must be a sequence of numbers, got {lams!r}"
                             ) from None
    if arr.ndim != 1 or arr.size == 0:
        raise ParameterError(f"lam_path: lams must be a non-empty 1-D sequence of lambda >= 0, "
                             f"got shape {arr.shape}")
    for k, v in enumerate(arr):
        check_scalar(float(v), f"lams[{k}]", min_val=0.0, where="lam_path")
    return arr


def _select(lams: np.ndarray, err: np.ndarray) -> int | None:
    """The index of the lowest error; ties (within 1e-12 relative) go to the larger lambda."""
    if not np.isfinite(err).any():
        return None
    best = np.nanmin(err)
    ties = np.flatnonzero(err <= best + 1e-12 * max(1.0, abs(best)))
    return int(ties[np.argmax(lams[ties])])


def _solve(model: ModelDeclaration, method: str, certify: bool, previous: Any,
           warm_start: bool, options: dict[str, Any]) -> tuple[Any, float, int]:
    """One solve at the model's current lambda: the result, its certified gap, iterations."""
    if method == "exact":
        res = solve_exact(model, certify=certify, **options)
        gap = float("nan") if res.certificate is None else float(res.certificate.gap)
        return res, gap, 0
    res = solve_primal_dual(model, warm_start=previous if warm_start else None, **options)
    return res, res.gap, res.iterations


def lam_path(model: ModelDeclaration, lams: Sequence[float], *, method: str = "exact",
             validation: Any = None, metric: Any = "auto", certify: bool = True,
             threshold: bool = False, warm_start: bool = True, cluster_tol: float = 1e-3,
             **solver_options: Any) -> LamPath:
    """Solve GTV minimization (16) along a sequence of ``lambda`` and select one by validation
    error (module docstring; paper 001 VI-E).

    Parameters
    ----------
    model : GTVModel
        The model; its ``lam`` is restored afterwards (also when a solve raises).
    lams : sequence of float
        ``lambda >= 0`` values, solved in this order (either order: module docstring).
    method : {"exact", "primal_dual"}
        :func:`~gtvmodel.solve_exact` (compiled once, ``lambda`` a Parameter) or Algorithm 1
        (:func:`~gtvmodel.solve_primal_dual`, warm-started from the previous ``(w, u)``).
    validation : None, {node: (X, y)} or NetworkedData
        Validation samples (:func:`gtvmodel.node_scores`' ``data``); enables the selection.
    metric : {"auto", "mse", "accuracy"} or callable
        The validation score (:func:`gtvmodel.node_scores`); a callable is an error (lower is
        better).
    certify : bool
        ``method="exact"``: the self-certificate of each solve (``gap``); Algorithm 1 always
        certifies (its stopping rule).
    threshold : bool
        Also compute :func:`gtvmodel.theory.consensus_threshold` (once).
    warm_start : bool
        ``method="primal_dual"``: start each run at the previous run's ``(w, u)`` (False: at
        zero, e.g. to measure the saving).
    cluster_tol : float
        Relative tolerance of :func:`count_clusters`.
    **solver_options
        Passed to the solver at every ``lambda`` (e.g. ``tol``, ``max_iter`` for Algorithm 1).

    Returns
    -------
    LamPath
        One row per ``lambda`` in the order given: weights, objective ``P(w)`` (16),
        certified gap (34), cluster count and, with ``validation``, per-node scores, the
        mean validation error and the selected ``lambda``; its ``status`` is
        ``"not_all_successful"`` when a solve did not succeed.

    Raises
    ------
    ParameterError
        ``lams`` is not a non-empty 1-D sequence of finite ``lambda >= 0`` (naming the first
        bad entry); ``method`` or ``metric`` is not one of the options; ``certify``,
        ``threshold`` or ``warm_start`` is not a bool; ``cluster_tol`` is negative or not
        finite; ``validation`` is not a mapping or dataset; the solver rejects a value of
        ``solver_options`` (e.g. a negative ``tol`` for Algorithm 1).
    DataError
        Validation samples that do not fit the node's loss (features, labels; naming the
        node), or a solve that returned no weights.
    UnknownNodeError
        A node of ``validation`` is not in the graph.
    SolverError, InfeasibleError
        From :func:`~gtvmodel.solve_exact` when a solve fails, the solver named is not
        installed or Clarabel rejects a setting in ``solver_options`` (``model.lam`` is
        restored).
    TypeError
        ``method="primal_dual"`` with a keyword :func:`~gtvmodel.solve_primal_dual` does
        not take.

    Examples
    --------
    Two clusters on a chain (paper 001 VI-B), validated on fresh samples of the same nodes:

    >>> import numpy as np, gtvmodel as gm
    >>> from gtvmodel import datasets
    >>> train = datasets.chain(n=4, eps=0.1, m=5, sigma=0.5, seed=0)
    >>> val = datasets.chain(n=4, eps=0.1, m=20, sigma=0.5, seed=1)
    >>> path = gm.lam_path(train.model(), [200.0, 3.0, 0.5, 0.0], validation=val,
    ...                    threshold=True)
    >>> path.weights.shape, path.clusters.tolist()  # consensus, two clusters, ..., local
    ((4, 8, 2), [1, 2, 5, 8])
    >>> round(path.threshold, 2), path.selected_lam  # lambda_crit; lowest validation MSE
    (143.67, 3.0)
    >>> np.round(path.weight(0)[path.selected], 1)  # w_bar = (2, 2) on the first cluster
    array([2.1, 1.9])
    """
    t0 = time.perf_counter()
    arr = _check_lams(lams)
    check_option(method, "method", ("exact", "primal_dual"), where="lam_path")
    for flag, name in ((certify, "certify"), (threshold, "threshold"),
                       (warm_start, "warm_start")):
        check_bool(flag, name, where="lam_path")
    cluster_tol = check_scalar(cluster_tol, "cluster_tol", min_val=0.0, where="lam_path")
    if not callable(metric):  # also without validation data: a typo is not silently kept
        check_option(metric, "metric", ("auto", *METRICS), where="lam_path")
    samples = (None if validation is None
               else node_samples(model, validation, metric, where="validation"))
    timings: dict[str, float] = {}
    thr = float("nan")
    if threshold:
        t = time.perf_counter()
        thr = float(consensus_threshold(model))
        timings["threshold"] = time.perf_counter() - t
    results, gaps, iters, objective = _run(model, arr, method, certify, warm_start,
                                           solver_options)
    timings["solve"] = sum(float(r.timings.get("total", sum(r.timings.values())))
                           for r in results)
    W = np.stack([r.weights for r in results])
    out = LamPath(
        lams=arr, weights=W,
        objective=np.array(objective),
        gap=np.array(gaps), clusters=np.array([count_clusters(model, w, cluster_tol) for w in W]),
        iterations=None if method == "exact" else np.array(iters, dtype=np.int64),
        threshold=thr, method=method, metric=metric, results=results,
        status="completed" if all(r.success for r in results) else "not_all_successful",
        labels=Labels(model.nodes, model.edges), timings=timings)
    if samples is not None:
        _validate_path(out, samples)
    timings["total"] = time.perf_counter() - t0
    return out


def _run(model: ModelDeclaration, lams: np.ndarray, method: str, certify: bool,
         warm_start: bool, options: dict[str, Any]
         ) -> tuple[list[Any], list[float], list[int], list[float]]:
    """The solves along the path (result, certified gap, iterations and ``P(w)`` per lambda);
    the model's lambda is restored even when a solve raises."""
    lam0 = model.lam
    results, gaps, iters, objective = [], [], [], []
    previous = None
    try:
        for lam in lams:
            model.lam = float(lam)
            res, gap, it = _solve(model, method, certify, previous, warm_start, options)
            results.append(res)
            gaps.append(gap)
            iters.append(it)
            objective.append(model.objective(_weights(res, float(lam))))
            previous = res
    finally:
        model.lam = lam0
    return results, gaps, iters, objective


def _weights(result: Any, lam: float) -> np.ndarray:
    if result.weights is None:  # a failed exact solve returned with raise_on_failure=False
        raise DataError(f"lam_path: the solve at lambda = {lam:g} returned no weights "
                        f"(status {result.status!r})")
    return np.asarray(result.weights, dtype=float)


def _validate_path(path: LamPath, samples: NodeSamples) -> None:
    """Per-node validation scores, mean errors and the selected lambda, filled in."""
    t = time.perf_counter()
    path.validation = np.stack([samples.scores(w) for w in path.weights])
    errors = samples.as_errors(path.validation)
    has = samples.has_data
    path.validation_error = (errors[:, has].mean(axis=1) if has.any()
                             else np.full(len(path.lams), np.nan))
    path.selected = _select(path.lams, path.validation_error)
    if path.selected is not None:
        path.selected_lam = float(path.lams[path.selected])
    path.timings["validation"] = time.perf_counter() - t
