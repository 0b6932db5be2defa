"""Fed-HT and FedIter-HT: federated hard thresholding for the l0-constrained problem
``min_w sum_i p_i L_i(w)`` subject to ``||w||_0 <= tau`` (Tong et al., "Federated Optimization
of l0-norm Regularized Sparse Learning", 2022, Algorithms 1-2), e.g. sparse linear
(:class:`~gtvmodel.SquaredLoss`) or sparse logistic (:class:`~gtvmodel.LogisticLoss`)
regression.

Each round the sampled nodes run ``K`` local (minibatch) SGD steps from the global ``x_t``, all
at once; the server sets ``x_{t+1} = H_tau(sum_i p_i x_{t,K}^{(i)})`` with ``p_i = m_i / sum m``
over the round's nodes and ``H_tau`` keeping the ``tau`` entries of largest magnitude.
FedIter-HT also applies ``H_tau`` after every local step.  The constraint set is not convex:
neither method is ever certified.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import numpy as np

from .._validate import check_int
from ._common import as_model, require_data
from ._rounds import RoundRecorder, check_rounds, result
from ._sgd import (
    ClientSampler,
    LocalGradients,
    check_gradients,
    check_init,
    check_step,
    global_objective,
    global_rounds,
    hard_threshold,
    rng_of,
)
from .result import BaselineResult

__all__ = ["fed_ht", "fediter_ht"]


def fed_ht(model: Any, tau: int, *, rounds: int, local_steps: int, step: float,
           batch_size: int | None = None, clients: float | int = 1.0, seed: Any = 0,
           init: Any = None, record_every: int = 1) -> BaselineResult:
    """Fed-HT (paper "Federated Optimization of l0-norm Regularized Sparse Learning",
    Algorithm 1): hard thresholding ``H_tau`` at the server only.

    Non-convex (the constraint ``||w||_0 <= tau``): ``convex=False``, never certified.

    Parameters
    ----------
    model : GTVModel or NetworkedData
        Every node needs a local dataset and a differentiable loss (``f_i = L_i``).
    tau : int
        Sparsity level ``1 <= tau <= d``.
    rounds : int
        Communication rounds ``T``.
    local_steps : int
        Local SGD steps ``K`` per round: ``x <- x - step g`` with ``g`` the gradient on a
        minibatch of ``min(batch_size, m_i)`` distinct samples drawn uniformly at each step
        (``batch_size=None``: the full local gradient).
    step : float
        Learning rate ``gamma > 0``.
    batch_size : int or None
        Minibatch size ``b``.
    clients : float or int
        Fraction in ``(0, 1]`` or number of nodes sampled per round (as in
        :func:`~gtvmodel.baselines.fedavg`; the paper uses every node).
    seed : int, None or numpy Generator
        Seed of the client sampling and the minibatches.
    init : array (d,), optional
        ``x_0`` before thresholding (default 0).
    record_every : int
        Record the history every this many rounds (and round 0 and the last).

    Returns
    -------
    BaselineResult
        ``weights``: ``x_T`` at every node; ``convex=False``, ``target=None``, no certificate;
        ``info["support"]`` the indices of the nonzero entries of ``x_T``.
        ``history.objective`` is ``sum_i L_i(x_t)``.  ``values_sent`` per sampled node and
        round: the sparse broadcast ``min(2 tau, d)`` (values and indices) down and the dense
        local model ``d`` up (FedIter-HT: ``min(2 tau, d)`` both ways).  ``status``:
        ``"completed"`` or ``"diverged"`` (a local step overflowed; the last finite ``x`` is
        returned).

    Examples
    --------
    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> from gtvmodel import baselines
    >>> rng = np.random.default_rng(0)
    >>> truth = np.zeros(20); truth[[3, 11]] = [2.0, -1.5]
    >>> model = gm.GTVModel(nx.path_graph(4), dim=20)
    >>> for i in model.nodes:
    ...     X = rng.standard_normal((30, 20))
    ...     model.set_loss(i, gm.SquaredLoss(X, X @ truth))
    >>> run = baselines.fed_ht(model, 2, rounds=40, local_steps=3, step=0.1)
    >>> run.info["support"].tolist(), bool(np.allclose(run.weight(0), truth, atol=1e-6))
    ([3, 11], True)
    """
    return _run(model, "fed_ht", tau, False, rounds=rounds, local_steps=local_steps, step=step,
                batch_size=batch_size, clients=clients, seed=seed, init=init,
                record_every=record_every)


def fediter_ht(model: Any, tau: int, *, rounds: int, local_steps: int, step: float,
               batch_size: int | None = None, clients: float | int = 1.0, seed: Any = 0,
               init: Any = None, record_every: int = 1) -> BaselineResult:
    """FedIter-HT (paper "Federated Optimization of l0-norm Regularized Sparse Learning",
    Algorithm 2): :func:`fed_ht` whose local steps are also hard-thresholded,
    ``x <- H_tau(x - step g)``, so that the local models sent up are ``tau``-sparse too.

    Non-convex: ``convex=False``, never certified.  Parameters and result as :func:`fed_ht`
    (``method="fediter_ht"``)."""
    return _run(model, "fediter_ht", tau, True, rounds=rounds, local_steps=local_steps, step=step,
                batch_size=batch_size, clients=clients, seed=seed, init=init,
                record_every=record_every)


def _run(data: Any, method: str, tau: Any, local_threshold: bool, *, rounds: Any,
         local_steps: Any, step: Any, batch_size: Any, clients: Any, seed: Any, init: Any,
         record_every: Any) -> BaselineResult:
    """The loop of both methods (``local_threshold``: FedIter-HT's ``H_tau`` after every local
    step)."""
    t0 = time.perf_counter()
    model = as_model(data, method)
    d, n = model.dim, model.num_nodes
    tau = check_int(tau, "tau", min_val=1, max_val=d, where=method)
    sched = check_rounds(method, rounds, local_steps=local_steps, record_every=record_every)
    step = check_step(step, method)
    sampler = ClientSampler(clients, n, method)
    rng = rng_of(seed, method)
    H = partial(hard_threshold, tau=tau)
    x = H(check_init(init, (d,), method)[None, :])[0]
    require_data(model, method)
    check_gradients(model, method)
    grads = LocalGradients(model, batch_size, method)
    sparse = min(2 * tau, d)
    rec = RoundRecorder(global_objective(model), record_every=sched.record_every)
    setup = time.perf_counter() - t0
    x, status, done, info = global_rounds(
        grads, sampler, rng, x, sched.rounds, rec, local_steps=sched.local_steps, step=step,
        epoch=False, sent_per_node=sparse + (sparse if local_threshold else d),
        local_map=H if local_threshold else None, server_map=H)
    info.update(support=np.flatnonzero(x), tau=tau, clients_per_round=sampler.count,
                local_steps=sched.local_steps, batch_size=grads.batch_size)
    return result(model, method, np.tile(x, (n, 1)), status, done, rec.finish(done, x), setup,
                  convex=False, target=None, info=info)
