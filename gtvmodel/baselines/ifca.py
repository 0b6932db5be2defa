"""IFCA, the iterative federated clustering algorithm (Ghosh, Chung, Yin, Ramchandran, "An
Efficient Framework for Clustered Federated Learning", NeurIPS 2020; paper 001 compares
Algorithm 1 with it in Table I).

``k`` cluster models ``theta_1 .. theta_k``.  Each round every node evaluates all ``k`` models on
its local data (an ``(n, k)`` loss matrix ``L_i(theta_j)``, one :meth:`loss_values
<gtvmodel.declaration.ModelDeclaration.loss_values>` call per model), picks
``j_i = argmin_j L_i(theta_j)``, runs ``local_steps`` full gradient steps from
``theta_{j_i}``, and the server averages per model over the nodes that chose it, with weights
``m_i`` (IFCA's model-averaging option).  The objective ``sum_i min_j L_i(theta_j)`` is
non-convex: IFCA is never certified.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .._validate import check_int
from ..declaration import ModelDeclaration
from ..terms.losses import sum_rows_by
from ._common import as_model, require_data
from ._rounds import Record, RoundRecorder, check_rounds, result
from ._sgd import (
    DIVERGED,
    LocalGradients,
    check_gradients,
    check_init,
    check_step,
    finite,
    rng_of,
)
from .result import BaselineResult

__all__ = ["ifca", "loss_matrix"]


def loss_matrix(model: ModelDeclaration, models: np.ndarray) -> np.ndarray:
    """``(L_i(theta_j))_{ij}``, the ``(n, k)`` losses of the ``k`` models ``models`` (``(k,
    d)``) at every node (one vectorized :meth:`loss_values` evaluation per model)."""
    n = model.num_nodes
    with np.errstate(over="ignore", invalid="ignore"):  # an overflowing loss is +inf
        return np.stack([model.loss_values(np.broadcast_to(th, (n, model.dim)))
                         for th in models], axis=1)


def ifca(model: Any, k: int, *, rounds: int, local_steps: int, step: float, restarts: int = 1,
         seed: Any = 0, init: Any = None, record_every: int = 1) -> BaselineResult:
    """IFCA (Ghosh et al. 2020) with ``k`` cluster models (module docstring).

    Parameters
    ----------
    model : GTVModel or NetworkedData
        Every node needs a local dataset and a differentiable loss.
    k : int
        Number of cluster models, ``1 <= k <= n`` (``k = 1``: FedAvg with full participation
        and full local gradients).
    rounds : int
        Communication rounds per restart.
    local_steps : int
        Full local gradient steps ``v <- v - step grad L_i(v)`` per round.
    step : float
        Step size ``> 0``.
    restarts : int
        Independent runs from different starting models; the one with the lowest final
        training loss ``sum_i min_j L_i(theta_j)`` is returned.
    seed : int, None or numpy Generator
        Seed of the starting models.
    init : array (k, d), optional
        Starting models of the first restart.  Otherwise (and for later restarts) the start is
        drawn from the data (this package's choice; Ghosh et al. initialise at random): the
        models ``theta_j`` start at the local models, after ``local_steps`` gradient steps from
        0, of ``k`` distinct nodes drawn at random, so that they lie on the data's scale.
    record_every : int
        Record the history every this many rounds (and round 0 and the last).

    Returns
    -------
    BaselineResult
        ``weights``: row ``i`` is ``theta_{j_i}``, the model node ``i`` picks at the end;
        ``convex=False``, ``target=None``, no certificate (never certified);
        ``info["assignment"]`` the cluster ``j_i`` of every node (model order),
        ``info["models"]`` the ``(k, d)`` models, ``info["restart_losses"]`` the final training
        loss of every restart and ``info["restart"]`` the one returned.  ``history`` (of that
        restart): ``objective`` is ``sum_i min_j L_i(theta_j)``.  ``values_sent`` (that restart):
        per node and round ``k d`` down (all models) and ``d + 1`` up (its model and its cluster
        index).  ``status``: ``"completed"``, or ``"diverged"`` if the returned restart's step
        overflowed (every restart diverged).

    Examples
    --------
    >>> from gtvmodel import baselines, datasets
    >>> data = datasets.sbm(sizes=(5, 5), p_in=0.9, p_out=0.1, m=10, seed=0)
    >>> run = baselines.ifca(data, 2, rounds=30, local_steps=2, step=0.1, restarts=3)
    >>> run.info["assignment"].tolist()  # the two true clusters, up to relabelling
    [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
    >>> float(data.mse(run.weights)) < 1e-6
    True
    """
    t0 = time.perf_counter()
    model = as_model(model, "ifca")
    k = check_int(k, "k", min_val=1, max_val=model.num_nodes, where="ifca")
    sched = check_rounds("ifca", rounds, local_steps=local_steps, record_every=record_every)
    local_steps = sched.local_steps
    step = check_step(step, "ifca")
    restarts = check_int(restarts, "restarts", min_val=1, where="ifca")
    rng = rng_of(seed, "ifca")
    first = None if init is None else check_init(init, (k, model.dim), "ifca")
    require_data(model, "ifca")
    check_gradients(model, "ifca")
    grads = LocalGradients(model, None, "ifca")
    local = _local_models(grads, local_steps, step) if restarts > 1 or first is None else None
    setup = time.perf_counter() - t0
    runs = []
    for r in range(restarts):
        start = first if (r == 0 and first is not None) else _draw_start(rng, local, k)
        runs.append(_one_run(model, grads, start, sched.rounds, local_steps, step,
                             sched.record_every))
    losses = np.array([run[1] for run in runs])
    best = int(np.argmin(np.where(np.isnan(losses), np.inf, losses)))
    models, loss, assign, status, done, record = runs[best]
    info = {"assignment": assign, "models": models, "restart_losses": losses, "restart": best,
            "k": k}
    return result(model, "ifca", models[assign], status, done, record, setup, convex=False,
                  target=None, info=info)


def _local_models(grads: LocalGradients, local_steps: int, step: float) -> np.ndarray:
    """Every node's model after ``local_steps`` local gradient steps from 0, ``(n, d)``."""
    W = np.zeros((grads.n, grads.model.dim))
    sel = np.arange(grads.n)
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(local_steps):
            new = W - step * grads.full(W, sel)
            if not finite(new):
                break
            W = new
    return W


def _draw_start(rng: np.random.Generator, local: np.ndarray, k: int) -> np.ndarray:
    """The local models of ``k`` distinct random nodes (the starting models of a restart)."""
    return local[rng.choice(local.shape[0], size=k, replace=False)].copy()


def _one_run(model: ModelDeclaration, grads: LocalGradients, models: np.ndarray, rounds: int,
             local_steps: int, step: float, record_every: int) -> tuple:
    """One IFCA run from ``models``: ``(models, final loss, assignment, status, rounds run,
    record)``; the recorded state is the ``(n, k)`` loss matrix ``L_i(theta_j)``."""
    k, d = models.shape
    n, m = model.num_nodes, grads.m
    sel = np.arange(n)
    L = loss_matrix(model, models)
    rec = RoundRecorder(_objective, record_every=record_every)
    rec.round(0, 0, L)
    status, done = "completed", rounds
    for t in range(1, rounds + 1):
        assign = np.argmin(L, axis=1)
        V = models[assign]
        with np.errstate(over="ignore", invalid="ignore"):
            for _ in range(local_steps):
                V = V - step * grads.full(V, sel)
                if not finite(V):
                    break
        mass = np.bincount(assign, m, minlength=k)
        new = np.where(mass[:, None] > 0,
                       sum_rows_by(assign, m[:, None] * V, k) / np.maximum(mass, 1e-300)[:, None],
                       models)
        if not finite(new):
            status, done = DIVERGED, t - 1
            break
        models = new
        L = loss_matrix(model, models)
        rec.round(t, n * (k * d + d + 1), L)
    record: Record = rec.finish(done, L)
    loss = _objective(L) if status != DIVERGED else np.nan
    return models, loss, np.argmin(L, axis=1), status, done, record


def _objective(L: np.ndarray) -> float:
    """IFCA's training loss ``sum_i min_j L_i(theta_j)`` from the loss matrix ``L``."""
    return float(L.min(axis=1).sum())
