"""Local gradient training shared by the federated gradient methods (FedAvg, FedSGD, FedProx,
IFCA, Fed-HT, FedIter-HT): argument checks, client sampling, full and minibatch local gradients
of all training nodes at once (the per-round record is :mod:`._rounds`'s, shared with every
iterative baseline).

Every node's loss is a mean over its own samples, ``L_i(w) = (1/m_i) sum_r ell(x_r^T w, y_r)``
(plus ``kappa_i ||w||^2``).  Full local gradients come from :meth:`ModelDeclaration.loss_gradients
<gtvmodel.declaration.ModelDeclaration.loss_gradients>`; minibatch gradients from the data-fit
batches' stacked samples and the loss class's row derivative ``ell'`` (one stacked ``(k, d)``
step of all training nodes; nodes are never looped over).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .._validate import check_int, check_scalar
from ..declaration import ModelDeclaration
from ..errors import ParameterError, UnsupportedError
from ..terms.losses import sum_rows_by
from ._rounds import RoundRecorder

__all__ = ["DIVERGED", "rng_of", "check_step", "check_init", "sample_sizes", "check_gradients",
           "hard_threshold", "ClientSampler", "LocalGradients", "local_run", "global_rounds",
           "global_objective", "finite"]

#: A local update that produced inf or NaN (too large a step): the run stops, status "diverged".
DIVERGED = "diverged"


def rng_of(seed: Any, method: str) -> np.random.Generator:
    """A numpy generator from ``seed`` (an integer ``>= 0``, None or a ``Generator``)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng(check_int(seed, "seed", min_val=0, where=method))


def check_step(step: Any, method: str) -> float:
    """The step size ``eta > 0`` (finite)."""
    return check_scalar(step, "step", min_val=0.0, include_boundaries="neither", where=method)


def sample_sizes(model: ModelDeclaration) -> np.ndarray:
    """``m_i``, the number of samples of each node's local dataset, ``(n,)`` (0 without one; 1
    for a loss with data but no samples, ``QuadraticLoss`` ``||w - a||^2``: one point ``a``)."""
    m = np.zeros(model.num_nodes)
    for b in model.structure().batches:
        if b.has_data:
            m[b.nodes] = getattr(b, "ms", 1)
    return m


def check_gradients(model: ModelDeclaration, method: str) -> None:
    """Every node loss is differentiable; :class:`UnsupportedError` naming the method and the
    node otherwise (the gradient methods need ``grad L_i``)."""
    try:
        model.loss_gradients(np.zeros((model.num_nodes, model.dim)))
    except UnsupportedError as exc:
        raise UnsupportedError(f"{method}: {exc}; {method} takes gradient steps") from None


def check_init(init: Any, shape: tuple[int, ...], method: str) -> np.ndarray:
    """A finite starting point of the given shape (zeros when ``init`` is None)."""
    if init is None:
        return np.zeros(shape)
    try:
        arr = np.array(init, dtype=float)
    except (TypeError, ValueError):
        raise ParameterError(f"{method}: init must be a numeric array of shape {shape}") from None
    if arr.shape != shape or not np.isfinite(arr).all():
        raise ParameterError(f"{method}: init must be a finite array of shape {shape}, got "
                             f"shape {arr.shape}")
    return arr


def hard_threshold(X: np.ndarray, tau: int) -> np.ndarray:
    """``H_tau`` row-wise (paper 003): keep the ``tau`` entries of largest magnitude of each row
    of the ``(k, d)`` array ``X`` and set the others to 0."""
    if tau >= X.shape[1]:
        return X.copy()
    keep = np.argpartition(-np.abs(X), tau - 1, axis=1)[:, :tau]
    out = np.zeros_like(X)
    np.put_along_axis(out, keep, np.take_along_axis(X, keep, axis=1), axis=1)
    return out


class ClientSampler:
    """The nodes taking part in a round: ``clients`` is a fraction in ``(0, 1]`` of the ``n``
    nodes (``max(1, round(clients n))`` of them) or a count in ``[1, n]``; each round draws that
    many distinct nodes uniformly at random (all nodes, without drawing, when the count is
    ``n``).  Returned positions are sorted."""

    def __init__(self, clients: Any, n: int, method: str):
        if isinstance(clients, (int, np.integer)) and not isinstance(clients, (bool, np.bool_)):
            self.count = check_int(clients, "clients", min_val=1, max_val=n, where=method)
        else:
            frac = check_scalar(clients, "clients", min_val=0.0, max_val=1.0,
                                include_boundaries="right", where=method)
            self.count = max(1, int(round(frac * n)))
        self.n = n

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """The sorted positions of this round's nodes."""
        if self.count == self.n:
            return np.arange(self.n)
        return np.sort(rng.choice(self.n, size=self.count, replace=False))


class LocalGradients:
    """``grad L_i`` of a set of nodes at their own ``(k, d)`` weights, all at once: full local
    gradients (``batch_size=None``, :meth:`ModelDeclaration.loss_gradients`) or minibatch
    gradients ``(1/|I_i|) sum_{r in I_i} ell'(x_r^T w_i, y_r) x_r + 2 kappa_i w_i`` over index
    sets ``I_i`` of each node's samples (the data-fit batches' stacked rows)."""

    def __init__(self, model: ModelDeclaration, batch_size: Any, method: str):
        self.model = model
        self.n = model.num_nodes
        self.m = sample_sizes(model)
        self.batch_size = (None if batch_size is None else
                           check_int(batch_size, "batch_size", min_val=1, where=method))
        if self.batch_size is not None:
            self._stack_rows(method)

    def _stack_rows(self, method: str) -> None:
        """Per node: its batch ``part`` and first row ``row0`` in that batch's stacked samples."""
        st = self.model.structure()
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray | None, Callable]] = []
        self.part = np.full(self.n, -1)
        self.row0 = np.zeros(self.n, dtype=np.int64)
        for b in st.batches:
            if not b.has_data:
                continue
            d1 = getattr(b.cls, "_ell_d1", None)
            if d1 is None:
                node = self.model.nodes[int(b.nodes[0])]
                raise UnsupportedError(
                    f"{method}: node {node!r}: minibatch gradients (batch_size) need a data-fit "
                    f"row loss (1/m) sum_r ell(x_r^T w, y_r); {b.cls.__name__} is not one "
                    "(use batch_size=None: full local gradients)")
            self.part[b.nodes] = len(self.parts)
            self.row0[b.nodes] = b.starts
            self.parts.append((b.Xs, b.y, getattr(b, "p", None), d1))
        self.l2 = np.asarray(st.l2, dtype=float)

    def full(self, V: np.ndarray, sel: np.ndarray) -> np.ndarray:
        """Full local gradients ``grad L_i(v_i)`` of the nodes ``sel`` at the rows of ``V`` (one
        :meth:`loss_gradients` evaluation of all ``n`` nodes, the rows outside ``sel`` at 0 and
        discarded)."""
        if len(sel) == self.n:
            return self.model.loss_gradients(V)
        W = np.zeros((self.n, V.shape[1]))
        W[sel] = V
        return self.model.loss_gradients(W)[sel]

    def permutation(self, rng: np.random.Generator, sel: np.ndarray) -> np.ndarray:
        """A uniformly random order of each node's samples: ``(k, max m_i)`` local row offsets,
        node ``j``'s ``m_j`` offsets first (the rest of its row is padding)."""
        ms = self.m[sel]
        keys = rng.random((len(sel), int(ms.max())))
        keys[np.arange(keys.shape[1])[None, :] >= ms[:, None]] = np.inf
        return np.argsort(keys, axis=1)

    def chunk(self, perm: np.ndarray, sel: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
        """Minibatch ``s`` of the order ``perm``: offsets ``(k, B)`` and their validity (the
        positions ``s B .. (s+1) B - 1`` that fall within each node's ``m_i``)."""
        B = self.batch_size
        cols = s * B + np.arange(B)
        cols = cols[cols < perm.shape[1]]
        return perm[:, cols], cols[None, :] < self.m[sel][:, None]

    def minibatch(self, V: np.ndarray, sel: np.ndarray, offs: np.ndarray, valid: np.ndarray
                  ) -> np.ndarray:
        """Minibatch gradients at the rows of ``V`` over the samples ``offs[valid]`` of each node
        (mean over the node's minibatch; zero data term for a node without one)."""
        k = len(sel)
        count = np.maximum(valid.sum(axis=1), 1)
        G = 2.0 * self.l2[sel][:, None] * V
        owner, col = np.nonzero(valid)
        nodes = sel[owner]
        for j, (Xs, y, p, d1) in enumerate(self.parts):
            here = self.part[nodes] == j
            o = owner[here]
            r = self.row0[nodes[here]] + offs[o, col[here]]
            X = Xs[r]
            g = d1(np.einsum("rd,rd->r", X, V[o]), y[r], None if p is None else p[r])
            G += sum_rows_by(o, (g / count[o])[:, None] * X, k)
        return G

    def schedule(self, rng: np.random.Generator, sel: np.ndarray, epoch: bool
                 ) -> Iterator[tuple[np.ndarray, np.ndarray] | None]:
        """The minibatches of one local epoch (``epoch``: ``ceil(m_i / B)`` steps at node ``i``,
        one pass over a random order of its samples) or of one local step (one uniformly drawn
        minibatch of ``min(B, m_i)`` distinct samples); ``None`` once for a full gradient."""
        if self.batch_size is None:
            yield None
            return
        perm = self.permutation(rng, sel)
        count = -(-perm.shape[1] // self.batch_size) if epoch else 1
        for s in range(count):
            yield self.chunk(perm, sel, s)

    def gradient(self, V: np.ndarray, sel: np.ndarray,
                 batch: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
        """:meth:`full` for ``batch=None``, else :meth:`minibatch` on ``batch``."""
        return self.full(V, sel) if batch is None else self.minibatch(V, sel, *batch)


def local_run(grads: LocalGradients, rng: np.random.Generator, w: np.ndarray, sel: np.ndarray,
              count: int, step: float, *, epoch: bool, mu: float = 0.0,
              local_map: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray | None:
    """The local training of one round at the nodes ``sel``, all at once: from ``v_i = w``,
    ``count`` epochs (``epoch=True``) or steps of
    ``v_i <- map(v_i - eta (g_i(v_i) + mu (v_i - w)))`` with ``g_i`` the full or minibatch
    gradient (:meth:`LocalGradients.schedule`), ``mu`` FedProx's proximal weight and ``map``
    an optional map after each step (``H_tau`` in FedIter-HT).  A node whose epoch has no
    minibatch left keeps its ``v_i``.  Returns the ``(k, d)`` local models, or None if a step
    overflowed (the run diverged)."""
    V = np.tile(w, (len(sel), 1))
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(count):
            for batch in grads.schedule(rng, sel, epoch):
                G = grads.gradient(V, sel, batch)
                if mu:
                    G += mu * (V - w)
                new = V - step * G
                if local_map is not None:
                    new = local_map(new)
                V = new if batch is None else np.where(batch[1].any(axis=1)[:, None], new, V)
                if not finite(V):
                    return None
    return V


def global_rounds(grads: LocalGradients, sampler: ClientSampler, rng: np.random.Generator,
                  w: np.ndarray, rounds: int, rec: RoundRecorder, *,
                  local_steps: int, step: float, epoch: bool, sent_per_node: int,
                  mu: float = 0.0, local_map: Callable[[np.ndarray], np.ndarray] | None = None,
                  server_map: Callable[[np.ndarray], np.ndarray] | None = None
                  ) -> tuple[np.ndarray, str, int, dict[str, Any]]:
    """The rounds of a one-global-model method (FedAvg and its variants, Fed-HT): draw the
    round's nodes ``S_t``, train locally (:func:`local_run`), and set
    ``w <- map(sum_{i in S_t} m_i v_i / sum_{i in S_t} m_i)`` (``server_map``: ``H_tau`` in
    Fed-HT).  Passes every round's ``w`` and ``sent_per_node`` values per drawn node to
    ``rec`` (:meth:`RoundRecorder.round`; the caller finishes it).  Returns ``(w, status,
    rounds run, info)``; a step that overflows stops the run (status ``"diverged"``,
    ``info["diverged_round"]``) with the last finite ``w``."""
    m = grads.m
    rec.round(0, 0, w)
    status, info, done = "completed", {}, rounds
    for t in range(1, rounds + 1):
        sel = sampler.draw(rng)
        V = local_run(grads, rng, w, sel, local_steps, step, epoch=epoch, mu=mu,
                      local_map=local_map)
        new = None if V is None else m[sel] @ V / m[sel].sum()
        if new is not None and server_map is not None:
            new = server_map(new[None, :])[0]
        if new is None or not finite(new):
            status, info["diverged_round"], done = DIVERGED, t, t - 1
            break
        w = new
        rec.round(t, sent_per_node * len(sel), w)
    return w, status, done, info


def global_objective(model: ModelDeclaration) -> Callable[[np.ndarray], float]:
    """``w -> sum_i L_i(w)``, the training loss of one global ``(d,)`` model at every node
    (the consensus objective (57)), in numpy."""
    shape = (model.num_nodes, model.dim)

    def objective(w: np.ndarray) -> float:
        return float(model.loss_values(np.broadcast_to(w, shape)).sum())

    return objective


def finite(X: np.ndarray) -> bool:
    """Whether every entry of ``X`` is finite (a local run that overflowed diverged)."""
    return bool(np.isfinite(X).all())
