"""The one-shot baselines: ``local`` (each node alone, ``lambda = 0``), ``pooled`` (one model on
all data: the consensus limit of GTV) and ``oracle`` (one pooled model per true cluster).

Paper 001 compares Algorithm 1 with independent local training (Table III, ``lambda = 0``)
and with one pooled model (Table II; paper 000 Table 1); ``oracle`` is the pooled model of each
true cluster, the best a clustered FL method can do when the partition is known.

**Communication.**  ``local`` sends nothing (``rounds = 0``).  ``pooled`` and ``oracle`` run
one round: every node uploads its local dataset once -- the arrays that describe its loss
(``X`` and ``y`` of a data-fit loss, ``a`` of a quadratic loss: what its problem file stores,
:meth:`~gtvmodel.terms.losses.Loss.to_spec`), a symbolic loss counting 0 (``info`` says so) --
and the server sends the ``d`` weights of its model back to every node.
"""

from __future__ import annotations

import time
from typing import Any

import cvxpy as cp
import networkx as nx
import numpy as np
import scipy.sparse as sp

from .._solver import run_solver
from .._validate import check_option
from ..declaration import ModelDeclaration
from ..duality.compile import compile_nodes
from ..errors import DataError, GTVError, InfeasibleError, UnsupportedError
from ..results import Labels
from ..solve.exact import solve_exact
from ..theory.partition import normalize_partition
from ._common import as_model, data_mask
from .result import BaselineResult
from .target import TargetCertifier, target_model

__all__ = ["local", "pooled", "oracle", "solve_groups"]

#: The pooled problem's weighting of the nodes (:func:`pooled`).
WEIGHTINGS = ("nodes", "samples")


def local(data: Any, *, solver: str | None = None, **certify_kwargs: Any) -> BaselineResult:
    """Each node trains alone: ``w_i = argmin L_i(w)`` over ``C_i`` (GTV minimization (16) at
    ``lambda = 0``; paper 001 Table III), solved exactly as one vectorized problem
    (:func:`gtvmodel.solve_exact` of the model at ``lambda = 0``) and certified on the
    ``"local"`` target (its self-certificate; ``certify_kwargs`` then go to
    :func:`gtvmodel.certify` for a certificate with other options).  Sends nothing.  A node
    without data (a zero loss) raises :class:`~gtvmodel.errors.DataError` naming it.

    Examples
    --------
    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> from gtvmodel.baselines import local
    >>> model = gm.GTVModel(nx.path_graph(2), dim=1, lam=5.0)
    >>> model.set_loss(0, gm.QuadraticLoss([1.0]))
    >>> model.set_loss(1, gm.QuadraticLoss([-1.0]))
    >>> res = local(model)
    >>> np.round(res.weights.ravel(), 6).tolist(), res.values_sent, res.gap < 1e-6
    ([1.0, -1.0], 0, True)
    """
    model = as_model(data, "local")
    _require_loss(model)
    t0 = time.perf_counter()
    sol = solve_exact(target_model(model, "local"), solver)
    elapsed = time.perf_counter() - t0
    cert = sol.certificate
    if certify_kwargs or cert is None:
        cert = TargetCertifier(model, "local", **certify_kwargs)(sol.weights)
    return BaselineResult(method="local", weights=sol.weights, status="completed", rounds=0,
                          values_sent=0, target="local", certificate=cert,
                          labels=_labels(model), timings={"solve": elapsed, "total": elapsed},
                          info={"solver": sol.solver})


def _require_loss(model: ModelDeclaration) -> None:
    """:class:`DataError` naming the first node whose loss is zero (no local data: alone, any
    ``w`` would be optimal)."""
    mask = data_mask(model)
    mask[model.structure().symbolic] = True
    if not mask.all():
        node = model.nodes[int(np.flatnonzero(~mask)[0])]
        raise DataError(f"local: node {node!r} has no local data (its loss is "
                        f"{model.loss(node)!r}); each node alone needs a loss of its own")


def solve_groups(model: ModelDeclaration, cid: np.ndarray, k: int, solver: str | None,
                 what: str) -> np.ndarray:
    """``w_c = argmin sum_{i in c} L_i(w)`` s.t. ``w in C_i`` for every group ``c`` (``cid``:
    the group index of each node, ``0..k-1``), as one vectorized CVXPY problem: the nodes'
    losses and constraints in an ``(n, d)`` variable ``W`` (compiled as the exact solver
    compiles them) tied to ``(k, d)`` group weights by ``W = P W_c`` (``P`` the sparse
    membership matrix).  Returns ``(k, d)``."""
    n, d = model.num_nodes, model.dim
    W, loss, cons = compile_nodes(model, np.arange(n))
    Wc = cp.Variable((k, d), name="w_group")
    P = sp.csr_matrix((np.ones(n), (np.arange(n), cid)), shape=(n, k))
    prob = cp.Problem(cp.Minimize(loss), [*cons, W == P @ Wc])
    run_solver(prob, solver, {}, False, False, what)
    if prob.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        raise InfeasibleError(f"{what}: the nodes' constraints have no common point (in some "
                              "group)")
    if Wc.value is None:
        raise UnsupportedError(f"{what}: the pooled problem has no minimizer (status "
                               f"{prob.status!r}: a loss unbounded below?)")
    return np.asarray(Wc.value, dtype=float)


def _labels(model: ModelDeclaration) -> Labels:
    return Labels(model.nodes, model.edges)


def _upload(model: ModelDeclaration) -> tuple[int, list[Any]]:
    """Floats each node uploads (its loss's problem-file arrays) and the nodes not counted."""
    total, skipped = 0, []
    for i, loss in model.declared_losses().items():
        try:
            total += sum(int(np.size(a)) for a in loss.to_spec().arrays.values())
        except GTVError:
            skipped.append(model.nodes[i])
    return total, skipped


def _group_result(model: ModelDeclaration, method: str, cid: np.ndarray, Wc: np.ndarray,
                  elapsed: float, certifier: TargetCertifier | None, info: dict[str, Any]
                  ) -> BaselineResult:
    W = Wc[cid]
    up, skipped = _upload(model)
    if skipped:
        info["not_counted"] = f"symbolic losses at {skipped[:5]} (uploads not counted)"
    t0 = time.perf_counter()
    cert = None if certifier is None else certifier(W)
    t_cert = time.perf_counter() - t0
    return BaselineResult(method=method, weights=W, status="completed", rounds=1,
                          values_sent=up + model.num_nodes * model.dim,
                          target=None if certifier is None else certifier.target,
                          certificate=cert, labels=_labels(model),
                          timings={"solve": elapsed, "certificate": t_cert,
                                   "total": elapsed + t_cert}, info=info)


def pooled(data: Any, weighting: str = "nodes", *, solver: str | None = None,
           **certify_kwargs: Any) -> BaselineResult:
    """One model on all data, on every node (paper 001 Table II; paper 000 Table 1).

    ``weighting="nodes"``: ``w = argmin sum_i L_i(w)`` s.t. ``w in C_i`` for all ``i`` -- the
    consensus limit of GTV minimization (every ``lambda >= lambda_crit``), certified on the
    ``"consensus"`` target (:mod:`gtvmodel.baselines.target`).  ``weighting="samples"``:
    every *sample* counts once, ``w = argmin sum_i (m_i / M) L_i(w)`` (``M = sum_i m_i``;
    for data-fit losses ``(1/m_i) sum_r ell`` this is least squares / logistic regression on
    the stacked samples), for nodes with data-fit losses (others raise
    :class:`UnsupportedError`); certified on ``"consensus"`` only where it is the same problem
    (all ``m_i`` equal: the objective is ``sum_i L_i`` divided by the number of nodes with
    data), else ``certificate=None`` with the reason in ``info["certificate"]``.  Nodes
    without data contribute nothing.  One round: each node uploads its data (module
    docstring).

    Examples
    --------
    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> from gtvmodel.baselines import pooled
    >>> model = gm.GTVModel(nx.path_graph(3), dim=1, lam=0.1)
    >>> for i, a in enumerate([1.0, 2.0, 6.0]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> res = pooled(model)  # argmin sum_i (w - a_i)^2 = mean(a)
    >>> np.round(res.weights.ravel(), 6).tolist(), res.target, res.gap < 1e-6
    ([3.0, 3.0, 3.0], 'consensus', True)
    """
    model = as_model(data, "pooled")
    check_option(weighting, "weighting", WEIGHTINGS, where="pooled")
    n = model.num_nodes
    cid = np.zeros(n, dtype=np.int64)
    t0 = time.perf_counter()
    if weighting == "nodes":
        Wc = solve_groups(model, cid, 1, solver, "pooled")
        certifier = TargetCertifier(model, "consensus", **certify_kwargs)
        return _group_result(model, "pooled", cid, Wc, time.perf_counter() - t0, certifier,
                             {"weighting": weighting})
    Wc, m = _solve_samples(model, solver)
    elapsed = time.perf_counter() - t0
    info: dict[str, Any] = {"weighting": weighting}
    certifier = None
    if np.unique(m[m > 0]).size == 1:
        certifier = TargetCertifier(model, "consensus", **certify_kwargs)
    else:
        info["certificate"] = ("not certified: with unequal sample sizes m_i the stacked-sample "
                               "problem is not the consensus problem sum_i L_i(w)")
    return _group_result(model, "pooled", cid, Wc, elapsed, certifier, info)


def _solve_samples(model: ModelDeclaration, solver: str | None) -> tuple[np.ndarray,
                                                                         np.ndarray]:
    """``argmin sum_i (m_i / M) L_i(w)`` and the sample sizes ``m_i`` (0 for nodes without
    data): the nodes' data-fit losses (one class, equal parameters and regularizers ``eta``,
    ``kappa``; no node constraints) stacked into one loss of that class on all ``M`` samples,
    ``(1/M) sum_r ell + eta ||w||_1 + kappa ||w||^2 = sum_i (m_i / M) L_i(w)``, solved by
    :func:`gtvmodel.solve_exact` on one node."""
    where = "pooled(weighting='samples')"
    if model.structure().constrained.size:
        node = model.nodes[int(model.structure().constrained[0])]
        raise UnsupportedError(f"{where}: node {node!r} has constraints; use weighting='nodes'")
    m = np.zeros(model.num_nodes)
    specs = []
    for i, loss in sorted(model.declared_losses().items()):
        if loss.is_zero:
            continue
        try:
            spec = loss.to_spec()
        except GTVError:
            spec = None
        if spec is None or set(spec.arrays) != {"X", "y"} or (
                specs and (spec.kind, dict(spec.params)) != (specs[0].kind,
                                                               dict(specs[0].params))):
            raise UnsupportedError(f"{where}: node {model.nodes[i]!r} has {loss!r}; stacking "
                                   "the samples needs data-fit losses of one class with equal "
                                   "parameters at every node with data")
        m[i] = spec.arrays["y"].shape[0]
        specs.append(spec)
    if not specs:
        raise DataError(f"{where}: no node has a local dataset")
    stacked = type(model.loss_at(int(np.flatnonzero(m)[0]))).from_spec(specs[0]._replace(
        arrays={"X": np.vstack([s.arrays["X"] for s in specs]),
                "y": np.concatenate([s.arrays["y"] for s in specs])}))
    one = ModelDeclaration(nx.empty_graph(1), model.dim)
    one.set_loss(0, stacked)
    return solve_exact(one, solver).weights, m


def oracle(data: Any, partition: Any, *, solver: str | None = None,
           **certify_kwargs: Any) -> BaselineResult:
    """The pooled model of each true cluster: ``w_i = argmin_w sum_{j in C(i)} L_j(w)`` over
    the ``C_j`` of the cluster (the best a clustered method can do when the partition is
    known).  ``partition``: any form of :func:`gtvmodel.theory.partition.normalize_partition`
    (lists of node labels, a label array in node order, dicts); an unknown, duplicate or
    missing node raises :class:`~gtvmodel.errors.UnknownNodeError` /
    :class:`~gtvmodel.errors.PartitionError` naming it.  Certified on ``"consensus"`` per
    cluster (``groups`` of :func:`~gtvmodel.baselines.target.certify_target`).  One round.

    Examples
    --------
    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> from gtvmodel.baselines import oracle
    >>> model = gm.GTVModel(nx.path_graph(4), dim=1)
    >>> for i, a in enumerate([1.0, 3.0, -1.0, -3.0]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> res = oracle(model, [[0, 1], [2, 3]])
    >>> np.round(res.weights.ravel(), 6).tolist(), res.gap < 1e-6
    ([2.0, 2.0, -2.0, -2.0], True)
    """
    model = as_model(data, "oracle")
    part = normalize_partition(model, partition)
    t0 = time.perf_counter()
    Wc = solve_groups(model, part.cid, len(part.labels), solver, "oracle")
    certifier = TargetCertifier(model, "consensus", part.cid, **certify_kwargs)
    return _group_result(model, "oracle", part.cid, Wc, time.perf_counter() - t0, certifier,
                         {"clusters": part.labels, "cluster_index": part.cid})
