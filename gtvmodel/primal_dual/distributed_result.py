"""The records of Algorithm 1 on Dask (:mod:`gtvmodel.primal_dual.distributed`): the restart
point of a run (:class:`Checkpoint`) and its result (:class:`DistributedResult`, a
:class:`~gtvmodel.primal_dual.result.PrimalDualResult` with the partition, the bytes moved and
the recoveries).  Both keep :mod:`~gtvmodel.primal_dual.distributed` as their module (pickles
and the documentation name them there)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .result import PrimalDualResult

__all__ = ["Checkpoint", "DistributedResult"]


@dataclass
class Checkpoint:
    """A restart point of a distributed run: after ``iteration`` iterations the iterate
    ``(weights, flows)`` (``(n, d)``, ``(|E|, d)``) and the step ``rule`` (its state:
    ``c``, ``alpha``, ...).  ``warm_start=checkpoint`` with ``step=checkpoint.rule`` resumes.

    A distributed run keeps one every ``checkpoint_every`` iterations to rebuild lost shards
    from; :class:`~gtvmodel.errors.WorkerLostError` carries the last one as ``.checkpoint``.

    Parameters
    ----------
    iteration : int
        The number of iterations the iterate is after.
    weights : ndarray (n, d)
        ``w^k`` in ``model.nodes`` order.
    flows : ndarray (|E|, d)
        ``u^k`` in ``model.edges`` order.
    rule : step rule
        A copy of the step rule in its state after iteration ``iteration`` (a
        :class:`~gtvmodel.primal_dual.steps.ResidualBalancing` or fixed steps).
    p_res, d_res : float
        The last primal and dual residuals ``p_k``, ``d_k`` the rule balanced (NaN before
        the first evaluation).

    Raises
    ------
    TypeError
        A required field missing or an unknown argument (the dataclass constructor); the
        values are stored as given, unchecked (``solve_primal_dual`` checks a warm start's
        shapes).

    Examples
    --------
    A run stopped after 20 iterations resumes from its checkpoint and converges:

    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), 1, penalty=gm.Norm2(), lam=1.0)
    >>> for i, a in enumerate([0.0, 1.0, 5.0]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> rule = gm.ResidualBalancing()
    >>> first = gm.solve_primal_dual(model, max_iter=20, tol=0.0, step=rule)
    >>> ck = gm.Checkpoint(first.iterations, first.weights, first.flows, rule)
    >>> res = gm.solve_primal_dual(model, tol=1e-8, warm_start=ck, step=ck.rule)
    >>> res.status, np.round(res.weights.ravel(), 4).tolist()
    ('converged', [0.5, 1.0, 4.5])
    """

    iteration: int
    weights: np.ndarray
    flows: np.ndarray
    rule: Any
    p_res: float = float("nan")
    d_res: float = float("nan")


@dataclass(kw_only=True)
class DistributedResult(PrimalDualResult):
    """Result of Algorithm 1 on Dask (:func:`solve_distributed`): a
    :class:`~gtvmodel.primal_dual.result.PrimalDualResult` with the partition (``shard_of``:
    the shard of every node, ``cut_edges``, ``cut_weight``), the boundary sizes
    (``boundary_nodes``, ``boundary_edges``), the driver's pickled bytes sent per iteration
    (``bytes_sent``, one entry per iteration run, replays included) and at setup
    (``setup_bytes``: the shards' data), and ``recoveries`` (worker losses survived).
    ``timings``: ``node_updates`` and ``edge_updates`` are the wall times of the two rounds
    (computation, messages and routing), ``shard_compute_max`` the computing time of the
    busiest shard (since its last rebuild), ``checkpoints`` the gathers for checkpoints.
    ``certificate_bytes``: the pickled bytes each certificate moved between the driver and the
    shards (sent and received), ``certificates_gathered``: how many of them gathered the
    iterate and ran :func:`~gtvmodel.certificates.certificate.certify` at the driver (the
    others were summed from the shards' partial sums, :mod:`~gtvmodel.certificates.
    sharded_certificate`), ``gather_reasons``: why (each reason once); ``routing`` and
    ``peer_bytes`` (the bytes of the boundary rows the shards pushed to one another, since
    their last rebuild; 0 when routed by the driver).  ``timings["iterations"]``: the wall
    time of the iterations (with ``routing="workers"`` the two exchanges are not timed
    apart: ``node_updates`` and ``edge_updates`` stay 0).

    The fields are keyword-only, as :func:`solve_distributed` fills them; each is also the
    attribute of that name.

    Parameters
    ----------
    timings, labels, weights, flows, iterations, status, history, certificate, c, paths
        As :class:`~gtvmodel.primal_dual.result.PrimalDualResult`'s (``timings`` adds
        ``shard_compute_max`` and ``checkpoints``, above).
    kernel, certificates_on_device, host_reasons
        As :class:`~gtvmodel.primal_dual.result.PrimalDualResult`'s (``"numpy"``, 0 and
        empty: the shards run the numpy updates).
    shard_of : ndarray (n,) of int
        The shard of every node.
    cut_edges : int
        The number of edges between shards.
    cut_weight : float
        The sum of their weights ``A_e``.
    boundary_nodes, boundary_edges : int
        How many nodes and edges have rows that cross shards.
    bytes_sent : ndarray of int
        The driver's pickled bytes sent per iteration (replays included; with
        ``routing="workers"`` a call covering several iterations is counted at its last).
    setup_bytes : int
        The pickled bytes of the shards' data sent at setup (and at rebuilds).
    recoveries : int
        Worker losses survived.
    workers : list of str
        The address of the worker of every shard.
    certificate_bytes : ndarray of int
        The pickled bytes each certificate moved between the driver and the shards.
    certificates_gathered : int
        How many certificates gathered the iterate to the driver.
    gather_reasons : list of str
        Why they did (each reason once).
    routing : {"workers", "driver"}
        How the boundary rows travelled (:func:`solve_distributed`'s option).
    peer_bytes : int
        The bytes of the rows the shards pushed to one another (``routing="workers"``).

    Raises
    ------
    TypeError
        A required field missing, or an unknown or positional argument (the dataclass
        constructor); the values are stored as given, unchecked.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> from distributed import Client
    >>> model = gm.GTVModel(nx.path_graph(4), 1, penalty=gm.Norm2(), lam=1.0)
    >>> for i, a in enumerate([0.0, 1.0, 5.0, 5.5]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> with Client(processes=False, n_workers=1, dashboard_address=None) as client:
    ...     res = gm.solve_primal_dual(model, tol=1e-8,
    ...                                backend=gm.DaskBackend(client, shards=[0, 0, 1, 1]))
    >>> type(res).__name__, res.status, res.shard_of.tolist(), res.cut_edges
    ('DistributedResult', 'converged', [0, 0, 1, 1], 1)
    >>> len(res.bytes_sent) == res.iterations, res.recoveries
    (True, 0)
    """

    shard_of: np.ndarray
    cut_edges: int
    cut_weight: float
    boundary_nodes: int
    boundary_edges: int
    bytes_sent: np.ndarray
    setup_bytes: int
    recoveries: int = 0
    workers: list[str] = field(default_factory=list)
    certificate_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    certificates_gathered: int = 0
    gather_reasons: list[str] = field(default_factory=list)
    routing: str = "workers"
    peer_bytes: int = 0


for _cls in (Checkpoint, DistributedResult):
    _cls.__module__ = "gtvmodel.primal_dual.distributed"
