"""Algorithm 1 of paper 001: preconditioned primal-dual message passing for GTV minimization.

With ``w^0``, ``u^0`` (zero unless warm-started) every iteration ``k`` runs

    node i:  v_i = w_i^k - tau_i (D^T u^k)_i ,    w_i^{k+1} = PU_i(v_i)                  (32)
    edge e:  u_e^{k+1} = DU_e( u_e^k + sigma_e (2 D w^{k+1} - D w^k)_e )                 (33)

The package's modules follow the algorithm: :mod:`~gtvmodel.primal_dual.prox` evaluates
``PU_i`` (the prox of the node's loss with its constraints) for groups of nodes,
:mod:`~gtvmodel.primal_dual.updates` states (32) and (33) (``DU_e`` is the prox of ``sigma_e
(lambda A_e phi)^*``, :meth:`gtvmodel.terms.penalties.Penalty.dual_update`) and the
message-passing structure (:class:`~gtvmodel.primal_dual.updates.NodeUpdate`,
:class:`~gtvmodel.primal_dual.updates.EdgeUpdate`), :mod:`~gtvmodel.primal_dual.steps` chooses
``T`` and ``Sigma``, :mod:`~gtvmodel.primal_dual.result` holds what a run returns,
:mod:`~gtvmodel.primal_dual.loop` runs the loop (vectorized over all nodes and edges with
``scipy.sparse``) and :mod:`~gtvmodel.primal_dual.backends` says where (numpy, torch, Dask);
this module holds the entry point :func:`solve_primal_dual`.

**Steps.**  ``tau_i = c / deg(i)``, ``sigma_e = 1 / (2c)`` (Pock-Chambolle diagonal
preconditioning; ``||Sigma^{1/2} D T^{1/2}|| <= 1`` for every ``c > 0``; the paper has
``c = 1``).  The default adapts ``c`` by residual balancing
(:class:`~gtvmodel.primal_dual.steps.ResidualBalancing`).

**Stopping.**  Every ``record_every`` iterations the iterate is certified with
:func:`gtvmodel.certificates.certificate.certify` (the duality gap (34) after repairing the
flows to a dual feasible point).  The run stops with status ``"converged"`` when the certified
gap is at most ``tol * max(1, |P(w)|)`` (``tol`` is relative; ``relative_gap`` in the history).
The status says what was detected: ``"converged"`` only when a certificate met ``tol``
(never with ``tol=0`` or ``record_every=None``); ``"max_iter"`` when the run used its
``max_iter`` iterations without one (also ``max_iter=0``, unless the start point meets
``tol``); ``"stopped"`` when the callback returned True.  The history always ends with a row at
the final iteration (unless ``record_every=None``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..declaration import ModelDeclaration
from .backends import Backend, resolve_backend
from .loop import DETECTION_DELAY, RunArguments
from .result import PrimalDualResult

__all__ = ["solve_primal_dual", "DETECTION_DELAY", "RUN_OPTIONS"]

#: The keyword options of :func:`solve_primal_dual` beside its named arguments, with their
#: defaults (``**options``; the deprecated backend keywords are
#: :data:`~gtvmodel.primal_dual.backends.LEGACY_OPTIONS`).
RUN_OPTIONS = {"progress": False, "batch_cvxpy": True, "certificate_budget": 0.25}


def solve_primal_dual(model: ModelDeclaration, max_iter: int = 10_000, tol: float = 1e-6,
                      prox: str = "auto", step: Any = None, warm_start: Any = None,
                      callback: Callable[..., Any] | None = None, record_every: int = 50,
                      backend: str | Backend = "numpy", **options: Any) -> PrimalDualResult:
    """Run Algorithm 1 (paper 001) on ``model``: iterations PU (32) and DU (33) until the
    certified duality gap (34) is at most ``tol * max(1, |P(w)|)``; see the module docstring.

    Parameters
    ----------
    model : ModelDeclaration
        The GTV minimization problem (a :class:`~gtvmodel.GTVModel` or any declaration of
        losses ``L_i``, penalty ``phi``, edge weights ``A_e`` and ``lambda``).
    max_iter : int
        Maximum number of iterations.
    tol : float
        Stop when the certified gap (34) is ``<= tol * max(1, |P(w)|)`` (relative); ``0``
        runs ``max_iter`` iterations.
    prox : {"auto", "cvxpy"}
        ``"auto"``: the fastest exact node-update path PU (32) per node
        (:func:`gtvmodel.primal_dual.prox.plan`); ``"cvxpy"``: the general CVXPY path for
        every node.
    step : None, float, ResidualBalancing or (tau, sigma)
        ``None``: adaptive ``c`` (:class:`~gtvmodel.primal_dual.steps.ResidualBalancing`); a
        number: fixed ``c`` (``tau_i = c/deg(i)``, ``sigma_e = 1/(2c)``); ``(tau, sigma)``
        arrays: explicit steps, checked against ``||Sigma^{1/2} D T^{1/2}|| <= 1``
        by power iteration.
    warm_start : None, PrimalDualResult, Solution or (weights, flows)
        Initial ``(w^0, u^0)`` (default zeros).
    callback : callable, optional
        ``callback(k, weights, flows)`` after every iteration ``k`` (1-based); returning True
        stops the run (status ``"stopped"``).
    record_every : int
        Certify and record the history every this many iterations (and at the end);
        ``None``: never certify (only with ``tol=0``; empty history, ``certificate`` None,
        e.g. to time the iterations alone).  A scheduled certificate is postponed (to a later
        multiple of ``record_every``) until the iterations since the previous one took at
        least ``cost / certificate_budget`` seconds, ``cost`` being the cheapest certificate
        so far after the first (default budget 25 %; the first certificate is not budgeted,
        so their share of a run can be larger: 43 % on paper 000's setting, 55 % at 10,000
        nodes / 100,000 edges, docs/primal_dual.md), but never past the iteration after
        which the next multiple would exceed ``1.1`` times the previous certificate's
        (:data:`DETECTION_DELAY`: a gap below ``tol`` at iteration ``k`` is detected by
        ``max(1.1 k, k + record_every)``); ``None``: certify at every ``record_every``.
    backend : str or Backend
        Where the iterations run: a backend object with its options, or its name for the
        defaults (:mod:`~gtvmodel.primal_dual.backends`).  ``"numpy"`` /
        :class:`~gtvmodel.primal_dual.backends.NumpyBackend` ``(threads=1, kernel="auto")``
        (default): this process, vectorized (``threads``: the edge updates split over threads;
        ``kernel``: the compiled numba edge pass); ``"torch"`` /
        :class:`~gtvmodel.primal_dual.torch_backend.TorchBackend` ``(device="cpu",
        dtype=None)``: PyTorch tensors on ``device`` (``docs/primal_dual.md``); ``"dask"`` /
        :class:`~gtvmodel.primal_dual.distributed.DaskBackend` ``(client=None, shards=None,
        ...)``: shards of the nodes on the workers of a Dask cluster with the same iterates
        (``docs/distributed.md``).
    **options
        ``progress`` (bool, default False): show a ``tqdm`` progress bar with the current
        certified gap.  ``batch_cvxpy`` (bool, default True): one CVXPY problem for all
        CVXPY-path nodes, or one per node.  ``certificate_budget`` (float or None, default
        0.25): see ``record_every``.  Deprecated (one release, ``DeprecationWarning``): the
        backend options as keywords, ``threads``, ``kernel`` (numpy), ``device``, ``dtype``
        (torch; either implies it), ``client``, ``shards`` (dask), mapped to the backend
        object (:func:`~gtvmodel.primal_dual.backends.resolve_backend`).

    Returns
    -------
    PrimalDualResult
        The last iterate ``(w^k, u^k)``, its certificate, the :class:`History` of the
        certificates (its last row is the final iteration), the status and the timings.
        ``status``: ``"converged"`` only when a certificate met ``tol`` (detected, never
        assumed: not with ``tol=0`` or ``record_every=None``); ``"max_iter"`` when ``max_iter``
        iterations ran without that; ``"stopped"`` when the callback returned True.

    Raises
    ------
    ParameterError
        A bad option, named (``max_iter``, ``tol``, ``prox``, ``step`` — including
        explicit steps that violate ``||Sigma^{1/2} D T^{1/2}|| <= 1`` — ``record_every``,
        ``certificate_budget``, ``backend``, ``warm_start``, an unknown keyword, the backend's
        options), or deprecated keywords of one backend given to another (``client``/``shards``
        without ``backend="dask"``, ``device``/``dtype`` with it, ``threads`` or ``kernel`` off
        the numpy path) or beside a backend object.
    DataError
        A ``warm_start`` of the wrong shape or not finite, or node data that overflow double
        precision in the node update PU (32).
    UnsupportedError
        ``NumpyBackend(kernel="numba")`` without numba installed; the other backends raise it
        for what they do not run (see their functions).
    InfeasibleError
        A node's constraints have no feasible point (found by the node update PU (32)).
    SolverError
        A node update PU (32) failed numerically or returned non-finite weights.

    Examples
    --------
    Convex clustering of three scalars on a path (``L_i(w) = (w - a_i)^2``, ``phi = |.|``):
    the two close values fuse, the far one is pulled in by ``lambda / 2 = 0.5``.

    >>> import networkx as nx
    >>> import gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), 1, penalty=gm.Norm2(), lam=1.0)
    >>> for i, a in enumerate([0.0, 1.0, 5.0]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> res = gm.solve_primal_dual(model, tol=1e-8)
    >>> res.status, res.gap <= 1e-8 * max(1.0, abs(res.objective))
    ('converged', True)
    >>> res.weights.round(4).ravel().tolist()
    [0.5, 1.0, 4.5]

    The same run with the edge updates on two threads (same iterates, bit for bit):

    >>> two = gm.solve_primal_dual(model, tol=1e-8, backend=gm.NumpyBackend(threads=2))
    >>> bool((two.weights == res.weights).all())
    True
    """
    run_options = {k: options.pop(k, default) for k, default in RUN_OPTIONS.items()}
    engine = resolve_backend(backend, options)
    args = RunArguments(max_iter, tol, prox, step, warm_start, callback, record_every,
                        **run_options)
    return engine.solve(model, args)
