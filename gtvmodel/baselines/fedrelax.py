"""FedRelax (lecture notes, Algorithm 1 with the update (54)) and its privacy-protecting
variants (lecture notes Algorithms 5 and 6).

Every round, all nodes at once (Jacobi), node ``i`` minimizes GTVMin in its own variable with
its neighbours' current weights fixed:

    w_i <- argmin_{w in C_i}  L_i(w) + (lambda/2) sum_{j in N(i)} A_ij ||w - w_j||^2      (54)
         = prox_{tau_i (L_i + iota_{C_i})}(v_i),   v_i = sum_j A_ij w_j / d_i,
           tau_i = 1 / (lambda d_i),   d_i = sum_j A_ij,

since ``(lambda/2) sum_j A_ij ||w - w_j||^2 = (lambda d_i / 2) ||w - v_i||^2 + const``.  The
prox is the node update of Algorithm 1 of paper 001 (PU (32)), evaluated for all nodes by the
package's vectorized node updates (:class:`~gtvmodel.primal_dual.prox.NodeUpdates`: exact batch
proxes of library losses, one CVXPY problem for the rest); a node without data (zero loss)
takes the weighted neighbour average, an isolated node ``argmin_{C_i} L_i``.  A fixed point
satisfies ``grad L_i(w_i) + lambda sum_j A_ij (w_i - w_j) = 0``: the optimality condition of
GTVMin with ``phi = 1/2 ||.||_2^2`` (:class:`~gtvmodel.terms.penalties.SquaredNorm2`) at the
same ``lambda`` (docs/conventions.md, errata, 4), the target ``"gtv-squared"`` on which every
result is certified (:mod:`gtvmodel.baselines.target`).

Privacy variants (lecture notes Section 13): ``perturb="updates"`` (Algorithm 5, (61)-(62)) adds
``sigma eps``, ``eps ~ N(0, I)``, to every node's new weights before it shares them (the
returned weights are the last perturbed ones, as line 8 of Algorithm 5 says);
``perturb="features"`` (Algorithm 6, (64)-(65)) trains on the perturbed features ``Phi(x) = x +
sigma eps`` (one draw per sample, before the first round) of every node whose loss has samples
``X``.  ``sigma`` is ``noise``; with ``noise=0`` both are plain FedRelax exactly.

Communication: every round each node sends its ``d`` weights to each neighbour, ``2 |E| d``
values per round.

**Flows.**  (54) is a primal method, but its target has a smooth penalty, so the flows that
its weights determine, ``u_e = lambda A_e grad phi(w_{e+} - w_{e-}) = lambda A_e (w_{e+} -
w_{e-})`` (docs/conventions.md's orientation and sign), meet the target's edge condition exactly
and its node condition ``-(D^T u)_i = grad L_i(w_i)`` at a fixed point of (54).  They are the
result's ``flows`` (:func:`target_flows`); ``certify_target(model, res.weights,
"gtv-squared", flows=res.flows)`` certifies with them.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validate import check_option, check_scalar
from ..declaration import ModelDeclaration
from ..errors import ParameterError
from ..primal_dual.prox import NodeUpdates
from ._common import as_model
from ._rounds import RoundRecorder, Schedule, check_rounds, result
from .result import BaselineResult
from .target import TargetCertifier

__all__ = ["fedrelax", "PERTURB_OPTIONS", "adjacency", "perturbed_features",
           "target_flows"]

#: The privacy variants of :func:`fedrelax`.
PERTURB_OPTIONS = ("none", "updates", "features")


def adjacency(model: ModelDeclaration) -> sp.csr_matrix:
    """The symmetric sparse weighted adjacency ``(A_ij)`` of the empirical graph (``n x n``)."""
    st = model.structure()
    h, t, a = st.edges[:, 0], st.edges[:, 1], st.edge_weights
    n = model.num_nodes
    return sp.csr_matrix((np.concatenate([a, a]), (np.concatenate([h, t]),
                                                   np.concatenate([t, h]))), shape=(n, n))


def target_flows(model: ModelDeclaration, weights: np.ndarray) -> np.ndarray:
    """The flows ``u_e = lambda A_e grad phi(w_{e+} - w_{e-})`` (``(|E|, d)``, model edge order)
    that ``weights`` determine on a model with a differentiable penalty (module docstring,
    "Flows"; for FedRelax's target ``phi = 1/2 ||.||_2^2``: ``lambda A_e (w_{e+} - w_{e-})``)."""
    st = model.structure()
    return model.capacities[:, None] * model.penalty.rows_gradient(st.incidence @ weights)


def perturbed_features(model: ModelDeclaration, noise: float, rng: np.random.Generator
                       ) -> ModelDeclaration:
    """The model whose nodes with samples train on ``Phi(x) = x + noise * eps`` (lecture notes
    (63)-(64), one standard normal draw per feature of every sample): a
    :meth:`~gtvmodel.declaration.ModelDeclaration.variant` with those losses rebuilt from
    their file description (:meth:`~gtvmodel.terms.losses.Loss.to_spec`) with perturbed
    ``X``; every other node keeps its loss."""
    out = model.variant()
    for i, loss in sorted(model.declared_losses().items()):
        if loss.variable is not None:
            continue  # symbolic: no samples
        spec = loss.to_spec()
        X = spec.arrays.get("X")
        if X is None:
            continue
        arrays = {**spec.arrays, "X": X + noise * rng.standard_normal(X.shape)}
        out.set_loss(model.nodes[i], type(loss).from_spec(spec._replace(arrays=arrays)))
    return out


def _check(model: ModelDeclaration, rounds: Any, tol: Any, noise: Any, perturb: Any,
           record_every: Any, certify_every: Any) -> tuple[Schedule, float, float]:
    where = "fedrelax"
    sched = check_rounds(where, rounds, record_every=record_every, certify_every=certify_every)
    tol = check_scalar(tol, "tol", min_val=0.0, where=where)
    noise = check_scalar(noise, "noise", min_val=0.0, where=where)
    check_option(perturb, "perturb", PERTURB_OPTIONS, where=where)
    if model.lam <= 0:
        raise ParameterError("fedrelax: the model's lam must be > 0 (at lam = 0 every node is "
                             "alone: use gtvmodel.baselines.local)")
    return sched, tol, noise


def fedrelax(data: Any, *, rounds: int = 200, tol: float = 1e-8, noise: float = 0.0,
             perturb: str = "none", seed: Any = None, record_every: int = 1,
             certify_every: int = 0, lam: float | None = None,
             **certify_kwargs: Any) -> BaselineResult:
    """FedRelax (lecture notes (54), module docstring) on the model's graph, losses and ``lambda``,
    from ``w_i = 0``, for at most ``rounds`` rounds.

    Stops (``status="converged"``) when a round changes the weights by
    ``||W^{k+1} - W^k||_F <= tol max(1, ||W^{k+1}||_F)`` (never with ``perturb="updates"`` and
    ``noise > 0``, whose iterates keep moving), else ``status="max_rounds"``.  ``noise``
    (``sigma >= 0``) and ``perturb`` (``"none"``, ``"updates"``: lecture notes Algorithm 5,
    ``"features"``: Algorithm 6) select the privacy variant, ``seed`` its random numbers.
    ``lam`` (default: the model's; a dataset's model is built at it) is the ``lambda`` of (54)
    and of the target, also in ``info["lam"]``.
    The result is certified on ``"gtv-squared"`` (GTVMin with ``phi = 1/2 ||.||_2^2``, same
    ``lambda``): ``certificate`` for the final weights, and ``history.gap`` every
    ``certify_every`` rounds (0: only the final weights); ``certify_kwargs`` go to
    :func:`gtvmodel.certify`.  The history has a row every ``record_every`` rounds (and at
    round 0, every certified round and the last).  ``values_sent``: ``2 |E| d`` per round.
    ``flows``: the target's flows of the final weights (:func:`target_flows`).

    Examples
    --------
    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> from gtvmodel.baselines import fedrelax
    >>> model = gm.GTVModel(nx.path_graph(3), dim=1, lam=1.0)
    >>> for i, a in enumerate([1.0, 0.0, -1.0]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> res = fedrelax(model, rounds=500, tol=1e-12)
    >>> res.status, res.target, res.gap < 1e-8  # the optimum of GTVMin with 1/2 ||.||^2
    ('converged', 'gtv-squared', True)
    >>> np.round(res.weights.ravel(), 6).tolist()  # 2 (w_0 - 1) + (w_0 - w_1) = 0, ...
    [0.666667, 0.0, -0.666667]
    >>> np.round(res.flows.ravel(), 6).tolist()  # lambda A_e (w_{e+} - w_{e-})
    [0.666667, 0.666667]
    """
    model = as_model(data, "fedrelax", lam=lam)
    sched, tol, noise = _check(model, rounds, tol, noise, perturb, record_every, certify_every)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    train = perturbed_features(model, noise, rng) if perturb == "features" and noise > 0 \
        else model
    updates = NodeUpdates(train)
    n, d = model.num_nodes, model.dim
    wdeg = model.structure().weighted_degrees
    linked = wdeg > 0
    inv_deg = np.where(linked, 1.0 / np.where(linked, wdeg, 1.0), 0.0)[:, None]
    tau = np.where(linked, inv_deg[:, 0] / model.lam, 1.0)  # isolated nodes: unused
    adj = adjacency(model)
    noisy = perturb == "updates" and noise > 0
    setup = time.perf_counter() - t0
    target = TargetCertifier(model, "gtv-squared", **certify_kwargs)
    recorder = RoundRecorder(target.objective, target, record_every=sched.record_every,
                             certify_every=sched.certify_every)
    sent = 2 * model.num_edges * d
    W = np.zeros((n, d))
    recorder.round(0, 0, W)
    status, k = "max_rounds", 0
    for k in range(1, sched.rounds + 1):
        W_new = updates((adj @ W) * inv_deg, tau, k, W)  # (54) at every node at once
        if noisy:
            W_new += noise * rng.standard_normal(W_new.shape)  # (62)
        change = float(np.linalg.norm(W_new - W))
        W = W_new
        recorder.round(k, sent, W)
        if not noisy and change <= tol * max(1.0, float(np.linalg.norm(W))):
            status = "converged"
            break
    return result(model, "fedrelax", W, status, k, recorder.finish(k, W), setup,
                  target="gtv-squared", flows=target_flows(target.model, W),
                  info={"lam": model.lam, "perturb": perturb, "noise": noise,
                        "node_updates": updates.describe()})
