"""FedAvg, FedSGD and FedProx: one global model trained by local gradient epochs and
sample-size weighted averaging.

The lecture notes CS-E4740 (Algorithms 3-4) obtain FedAvg from GTV minimization in the limit
``lambda -> infinity``: every node keeps the same ``w`` (the consensus problem (57),
``min_w sum_i L_i(w)``).  McMahan et al. ("Communication-Efficient Learning of Deep Networks from
Decentralized Data", 2017) run, each round ``t``, at a sampled set ``S_t`` of nodes, ``E`` local
epochs of (minibatch) gradient steps from the global ``w`` and average the local models with
weights ``m_i / sum_{j in S_t} m_j``; with one full-gradient step (FedSGD) and all nodes this is
gradient descent on the sample-weighted pooled loss ``F(w) = sum_i m_i L_i(w) / sum_i m_i``
(``L_i`` is a mean over the node's ``m_i`` samples).  FedProx (Li et al., "Federated Optimization
in Heterogeneous Networks", 2020) adds ``(mu/2) ||v - w||^2`` to each local objective.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .._validate import check_bool, check_scalar
from ._common import as_model, require_data
from ._rounds import RoundRecorder, check_rounds, result
from ._sgd import (
    DIVERGED,
    ClientSampler,
    LocalGradients,
    check_gradients,
    check_init,
    check_step,
    global_objective,
    global_rounds,
    rng_of,
)
from .result import BaselineResult
from .target import TargetCertifier

__all__ = ["fedavg", "fedsgd", "fedprox"]


def fedavg(model: Any, *, rounds: int, local_steps: int, step: float,
           batch_size: int | None = None, clients: float | int = 1.0, seed: Any = 0,
           mu: float = 0.0, init: Any = None, record_every: int = 1,
           certify: bool = True, certify_every: int = 0) -> BaselineResult:
    """Federated averaging (McMahan et al. 2017; CS-E4740 Algorithms 3-4): one global ``w``.

    Each round ``t`` draws the nodes ``S_t`` (``clients``), which all run, at once (stacked
    ``(k, d)`` arrays), ``local_steps`` epochs ``E`` of gradient steps
    ``v_i <- v_i - step (g_i(v_i) + mu (v_i - w))`` from ``v_i = w``; the server sets
    ``w <- sum_{i in S_t} m_i v_i / sum_{i in S_t} m_i``.  An epoch is one full local gradient
    step (``batch_size=None``) or one pass over a random order of the node's ``m_i`` samples in
    minibatches of ``batch_size`` (``ceil(m_i / B)`` steps, so nodes with more data take more
    steps, as in McMahan et al.).

    Parameters
    ----------
    model : GTVModel or NetworkedData
        Every node needs a local dataset and a differentiable loss (``L_i`` a mean over its
        samples; ``l2`` regularization is included, ``l1`` is not differentiable).
    rounds : int
        Communication rounds ``T``.
    local_steps : int
        Local epochs ``E`` per round.
    step : float
        Step size ``eta > 0``.
    batch_size : int or None
        Minibatch size ``B`` (None: full local gradients).
    clients : float or int
        A fraction in ``(0, 1]`` of the nodes (``max(1, round(clients n))`` sampled uniformly
        without replacement each round) or, as an int, their number.
    seed : int, None or numpy Generator
        Seed of the client sampling and the minibatch orders.
    mu : float
        FedProx's proximal weight ``mu >= 0`` (0: FedAvg).
    init : array (d,), optional
        The starting ``w`` (default 0).
    record_every : int
        Record the history every this many rounds (and round 0 and the last).
    certify : bool
        Certify the final ``w`` on the consensus problem ``min_w sum_i L_i(w)`` (57), the
        convex problem FedAvg approximates (:func:`~gtvmodel.baselines.certify_target`,
        ``"consensus"``); the gap is also the last row of ``history.gap``.
    certify_every : int
        With ``certify``, also certify the global ``w`` every this many rounds (its gap in
        ``history.gap``, NaN elsewhere; 0: only the final ``w``).

    Returns
    -------
    BaselineResult
        ``weights``: ``w`` at every node; ``convex=True``, ``target="consensus"`` and its
        ``certificate`` (None with ``certify=False`` or after divergence).
        ``history.objective`` is the consensus objective ``sum_i L_i(w)`` (the model's own
        losses, each weighted 1: the objective of the consensus problem (57)),
        ``info["sample_weighted_loss"]`` the final ``F(w) = sum_i m_i L_i(w) / sum m`` that
        FedAvg descends (the two have the same minimizer when all ``m_i`` are equal).
        ``values_sent``: ``d`` down and ``d`` up per sampled node and round.  ``status``:
        ``"completed"``, or ``"diverged"`` (a local step overflowed; the last finite ``w`` is
        returned, ``info["diverged_round"]`` names the round).

    Examples
    --------
    >>> import numpy as np
    >>> from gtvmodel import baselines, datasets
    >>> data = datasets.sbm(sizes=(5, 5), p_in=0.9, p_out=0.1, m=10, seed=0)
    >>> run = baselines.fedavg(data, rounds=100, local_steps=2, step=0.1)
    >>> run.status, run.rounds, run.values_sent  # 2 d values per node and round
    ('completed', 100, 4000)
    >>> np.round(run.weight(0), 2)  # one model for both clusters (2, 2) and (-2, 2)
    array([-0.15,  2.09])
    """
    return _run(model, "fedavg", rounds=rounds, local_steps=local_steps, step=step,
                batch_size=batch_size, clients=clients, seed=seed, mu=mu, init=init,
                record_every=record_every, certify=certify, certify_every=certify_every)


def fedsgd(model: Any, *, rounds: int, step: float, clients: float | int = 1.0, seed: Any = 0,
           init: Any = None, record_every: int = 1, certify: bool = True,
           certify_every: int = 0) -> BaselineResult:
    """FedSGD (McMahan et al. 2017): :func:`fedavg` with one full local gradient step per round
    (``E = 1``, ``batch_size=None``): the server's update is
    ``w <- w - step sum_{i in S_t} m_i grad L_i(w) / sum_{i in S_t} m_i``, gradient descent on
    the sample-weighted loss of the sampled nodes.  Parameters and result as :func:`fedavg`
    (``method="fedsgd"``)."""
    return _run(model, "fedsgd", rounds=rounds, local_steps=1, step=step, batch_size=None,
                clients=clients, seed=seed, mu=0.0, init=init, record_every=record_every,
                certify=certify, certify_every=certify_every)


def fedprox(model: Any, mu: float, *, rounds: int, local_steps: int, step: float,
            batch_size: int | None = None, clients: float | int = 1.0, seed: Any = 0,
            init: Any = None, record_every: int = 1, certify: bool = True,
            certify_every: int = 0) -> BaselineResult:
    """FedProx (Li et al. 2020): :func:`fedavg` whose local objective at node ``i`` is
    ``L_i(v) + (mu/2) ||v - w||^2`` (``w`` the round's global model), ``mu > 0``; the local
    epochs are gradient steps on it.  Parameters and result as :func:`fedavg`
    (``method="fedprox"``)."""
    mu = check_scalar(mu, "mu", min_val=0.0, include_boundaries="neither", where="fedprox")
    return _run(model, "fedprox", rounds=rounds, local_steps=local_steps, step=step,
                batch_size=batch_size, clients=clients, seed=seed, mu=mu, init=init,
                record_every=record_every, certify=certify, certify_every=certify_every)


def _run(data: Any, method: str, *, rounds: Any, local_steps: Any, step: Any, batch_size: Any,
         clients: Any, seed: Any, mu: Any, init: Any, record_every: Any, certify: Any,
         certify_every: Any) -> BaselineResult:
    """The FedAvg loop shared by the three methods (arguments of :func:`fedavg`)."""
    t0 = time.perf_counter()
    model = as_model(data, method)
    sched = check_rounds(method, rounds, local_steps=local_steps, record_every=record_every,
                         certify_every=certify_every)
    step = check_step(step, method)
    mu = check_scalar(mu, "mu", min_val=0.0, where=method)
    certify = check_bool(certify, "certify", where=method)
    sampler = ClientSampler(clients, model.num_nodes, method)
    rng = rng_of(seed, method)
    w = check_init(init, (model.dim,), method)
    require_data(model, method)
    check_gradients(model, method)
    grads = LocalGradients(model, batch_size, method)
    m, n = grads.m, model.num_nodes
    objective = global_objective(model)
    target = TargetCertifier(model, "consensus") if certify else None

    def certifier(w: np.ndarray) -> Any:  # the consensus candidate: w at every node
        return target(np.tile(w, (n, 1)))

    rec = RoundRecorder(objective, certifier if certify else None, record_every=sched.record_every,
                        certify_every=sched.certify_every)
    setup = time.perf_counter() - t0
    w, status, done, info = global_rounds(grads, sampler, rng, w, sched.rounds, rec,
                                          local_steps=sched.local_steps, step=step, epoch=True,
                                          sent_per_node=2 * model.dim, mu=mu)
    record = rec.finish(done, w, certify=status != DIVERGED)
    with np.errstate(over="ignore", invalid="ignore"):
        weighted = float(m @ model.loss_values(np.broadcast_to(w, (n, model.dim))) / m.sum())
    info.update(clients_per_round=sampler.count, local_steps=sched.local_steps,
                batch_size=grads.batch_size, mu=mu, sample_weighted_loss=weighted)
    return result(model, method, np.tile(w, (n, 1)), status, done, record, setup, convex=True,
                  target="consensus", info=info)
