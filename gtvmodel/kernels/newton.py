"""Damped Newton's method for smooth data fits, all nodes at once (issue 5): the node update
PU (32) of paper 001 for a smooth data-fit loss (:func:`newton_minimize`) and, on ``-f``, the
maximizers of the certificate's conjugates ``h*(s)`` (:func:`newton_conjugate_maximizers`),
with its Armijo line search and the first-order start of Algorithm 1's next call
(:func:`newton_predictor`).

The loss enters only through its row functions ``ell(t, y, p)``, ``ell'`` and ``ell''``
(:class:`RowLoss`, e.g. a :class:`~gtvmodel.terms.losses.DataFitLoss` subclass).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .linalg import grouped_gram


class RowLoss(Protocol):
    """The row functions of a data-fit loss ``sum_r c_r ell(x_r^T z, y_r, p_r)`` that
    :func:`newton_minimize` calls (the static methods of
    :class:`~gtvmodel.terms.losses.DataFitLoss`): ``ell`` and its first and second
    derivatives in ``t``, elementwise over the rows."""

    @staticmethod
    def _ell(t: np.ndarray, y: np.ndarray, p: np.ndarray | None) -> np.ndarray: ...

    @staticmethod
    def _ell_d1(t: np.ndarray, y: np.ndarray, p: np.ndarray | None) -> np.ndarray: ...

    @staticmethod
    def _ell_d2(t: np.ndarray, y: np.ndarray, p: np.ndarray | None) -> np.ndarray: ...


def take_rows(p: np.ndarray | None, rows: Any) -> np.ndarray | None:
    return None if p is None else p[rows]


def _row_starts(local: np.ndarray) -> np.ndarray:
    """Start of each run of equal owners in ``local`` (rows grouped by node)."""
    return np.concatenate([[0], np.flatnonzero(np.diff(local)) + 1]) if local.size else local


def newton_minimize(cls: RowLoss, Xs: np.ndarray, y: np.ndarray, p: np.ndarray | None,
                    c: np.ndarray, local: np.ndarray, mu: np.ndarray, g: np.ndarray,
                    Z0: np.ndarray, *, max_iter: int, ridge: float = 0.0,
                    gtol: float | None = None, hess: np.ndarray | None = None,
                    lip: np.ndarray | None = None) -> np.ndarray:
    """Damped Newton on ``F_i(z) = sum_{r in i} c_r ell(x_r^T z, y_r) + mu_i ||z||^2 / 2 -
    g_i^T z`` for ``k`` nodes at once (rows grouped by owner ``local``, every node with at least
    one row), the one Newton solver of the package:

    * the node update PU (32) of a smooth data-fit loss, ``prox_{tau h}(v)``:
      ``mu = 2 kappa + 1/tau``, ``g = v / tau`` (strongly convex, modulus ``>= 1/tau``);
    * the maximizer of ``s^T w - L(w) - kappa ||w||^2`` for the conjugate ``h*(s)`` of the
      certificate: ``mu = 2 kappa``, ``g = s`` (``ridge`` regularizes singular Hessians).

    Hessians come from the row formula ``_ell_d2`` (generalized for Huber).  Armijo backtracking
    per node on the node's own rows (a step that does not decrease ``F`` after 40 halvings is
    rejected); a node stops when its Newton step is below ``1e-15 (1 + ||z||)``, its decrement
    vanishes, or (with ``gtol``) its gradient is at most ``gtol``.  A node whose gradient
    already bounds that step (``||grad|| <= mu 1e-15 (1 + ||z||_inf)``; the Hessian is at least
    ``mu I``) stops before its Hessian is formed.  ``hess`` (``(k, d, d)``), where given,
    receives each node's last Hessian of ``F`` formed here (a start for the next call,
    :meth:`~gtvmodel.terms.losses.DataFitBatch._prox`).  ``lip`` (``(k,)``, without
    ``ridge``), where given, bounds
    the Lipschitz constants of the Hessians of ``F_i``: a node also stops after a full step
    from ``z`` when Newton's quadratic convergence bounds the new error below the stop,
    ``lip ||z - z*||^2 / (2 mu) <= 1e-15 (1 + ||z+||_inf)`` with ``||z - z*|| <= ||grad
    F(z)|| / mu`` (``F`` is ``mu``-strongly convex; the Hessian is at least ``mu I``), without
    another gradient.
    """
    k, d = Z0.shape
    Z = np.array(Z0, dtype=float)
    part = (Xs, local, y, p, c, _row_starts(local))  # the rows of the active nodes
    t = np.einsum("rj,rj->r", Xs, Z[local])  # x_r^T z at their rows, carried along
    F = np.full(k, np.nan)  # F_i(z_i) where known (a line search needs it)
    active = np.arange(k)
    diag = np.arange(d)
    for _ in range(max_iter):
        Xa, la, ya, pa, ca, sa = part
        za, mua = Z[active], mu[active]
        G = (np.add.reduceat(Xa * (ca * cls._ell_d1(t, ya, pa))[:, None], sa, axis=0)
             + mua[:, None] * za - g[active])
        gnorm = np.sqrt(np.einsum("kj,kj->k", G, G))
        done = gnorm <= mua * 1e-15 * (1.0 + np.abs(za).max(axis=1))
        if gtol is not None:  # converged nodes leave before their Hessian is formed
            done |= np.abs(G).max(axis=1) <= gtol
        if done.all():
            break
        H = grouped_gram(Xa, ca * cls._ell_d2(t, ya, pa), sa)
        H[:, diag, diag] += mua[:, None]
        if ridge:
            tr = np.maximum(np.trace(H, axis1=1, axis2=2), 1e-300)
            H[:, diag, diag] += ridge * tr[:, None]
        if hess is not None:
            hess[active] = H
        step = np.linalg.solve(H, G[:, :, None])[:, :, 0]
        step[done] = 0.0  # (their rows stay in this iteration's arrays: no new gather)
        sure = done.copy()
        if lip is not None:  # F(z - s) <= F(z) - dec/2 + lip ||s||^3 / 6, dec >= mu ||s||^2
            sure |= np.sqrt(np.einsum("kj,kj->k", step, step)) * lip[active] <= 1.5 * mua
        tstep, bad, tiny = _newton_line_search(cls, part, t, za, step, G, mua, g[active],
                                               F, active, ~sure)
        ok = ~bad & ~done
        move = np.where(ok, tstep, 0.0)[:, None] * step  # the step taken
        Z[active] = za - move
        small = np.abs(move).max(axis=1) <= 1e-15 * (1.0 + np.abs(za).max(axis=1))
        small |= tiny | bad | done
        if lip is not None:  # the error after a full step: lip ||z - z*||^2 / (2 mu)
            small |= ok & (tstep == 1.0) & (0.5 * lip[active] / mua * (gnorm / mua)**2
                                            <= 1e-15 * (1.0 + np.abs(Z[active]).max(axis=1)))
        if small.all():
            break
        if small.any():
            part, t = _keep_nodes(part, t, ~small)
            active, move = active[~small], move[~small]
        t = t - np.einsum("rj,rj->r", part[0], move[part[1]])
    return Z


def newton_conjugate_maximizers(cls: RowLoss, X: np.ndarray, y: np.ndarray,
                                p: np.ndarray | None, c: np.ndarray, rn: np.ndarray,
                                kappa: np.ndarray, S: np.ndarray, W0: np.ndarray,
                                iters: int = 40) -> np.ndarray:
    """The maximizers of ``f_i(w) = s_i^T w - L_i(w) - kappa_i ||w||^2`` (``L_i(w) = sum_{r in
    i} c_r ell(x_r^T w)``, rows grouped by owner ``rn``) that attain the conjugate ``h_i*(s_i)``
    of the certificate (34), all nodes at once from ``W0`` (the candidate weights):
    :func:`newton_minimize` on ``-f`` (``mu = 2 kappa``, ``g = s``), with the ridge ``1e-12``
    for singular Hessians and the gradient stop ``1e-14 max(1, max |s|)``.  Where ``s_i`` is
    outside the domain of ``h_i*`` the iteration diverges (huge trial steps are rejected by the
    line search or end unconverged, without warnings); the caller checks convergence."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        gtol = 1e-14 * max(1.0, float(np.abs(S).max(initial=0.0)))
        return newton_minimize(cls, X, y, p, c, rn, 2.0 * kappa, S, W0, max_iter=iters,
                               ridge=1e-12, gtol=gtol)


def _newton_line_search(cls: RowLoss, part: tuple, t: np.ndarray, za: np.ndarray,
                        step: np.ndarray, G: np.ndarray, mu: np.ndarray, g: np.ndarray,
                        F: np.ndarray, active: np.ndarray, need: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Armijo backtracking of :func:`newton_minimize` for the nodes ``need`` (the others take
    the full step): the largest ``s = 2^-j`` with ``F(z - s step) <= F(z) - s dec / 4 + 1e-13 (1
    + |F(z)|)``, ``dec = grad^T step``.  ``F`` (all nodes; NaN where unknown) is read at
    ``active`` and updated there.  Returns ``(s, rejected after 40 halvings, dec negligible)``
    per active node."""
    n = za.shape[0]
    tstep, bad, tiny = np.ones(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    if not need.any():
        F[active] = np.nan  # moved without an evaluation
        return tstep, bad, tiny
    Fa = F[active]
    if np.isnan(Fa[need]).any():
        Fa = _newton_value(cls, part, t, za, mu, g)
    dec = np.einsum("kj,kj->k", G, step)  # Newton decrement^2 >= 0
    ts = np.einsum("rj,rj->r", part[0], step[part[1]])  # x_r^T step: no gather per trial
    for _ in range(40):
        Ft = _newton_value(cls, part, t - tstep[part[1]] * ts, za - tstep[:, None] * step, mu, g)
        bad = need & ~(Ft <= Fa - 0.25 * tstep * dec + 1e-13 * (1.0 + np.abs(Fa)))
        if not bad.any():
            break
        tstep[bad] *= 0.5
    F[active] = np.where(need & ~bad, Ft, np.where(need, Fa, np.nan))
    return tstep, bad, need & (dec <= 1e-30 * (1.0 + np.abs(Fa)))


def _keep_nodes(part: tuple, t: np.ndarray, keep: np.ndarray) -> tuple[tuple, np.ndarray]:
    """The rows ``(X, owner, y, p, c, starts)`` and ``t`` of the nodes ``keep`` (a mask over
    the owners of ``part``), owners renumbered ``0..keep.sum() - 1``."""
    Xa, la, ya, pa, ca, _ = part
    rows = keep[la]
    renum = np.cumsum(keep) - 1
    lk = renum[la[rows]]
    return (Xa[rows], lk, ya[rows], take_rows(pa, rows), ca[rows], _row_starts(lk)), t[rows]


def newton_predictor(last: dict[str, np.ndarray], mu: np.ndarray, g: np.ndarray
                      ) -> np.ndarray:
    """The minimizer of :func:`newton_minimize`'s ``F_i`` for new ``(mu, g)`` to first order
    from the last call's ``(mu', g')``, answer ``z'`` and Hessian ``H'`` of ``F_i``: the
    gradient of the new ``F_i`` at ``z'`` is ``(mu - mu') z' - (g - g')`` (``z'`` is
    stationary for the old one), its Hessian ``H' + (mu - mu') I``; one Newton step from
    ``z'``.  Algorithm 1's prox centres move little between iterations, so this start saves
    Newton steps; the stop (and so the answer's accuracy) is the same from any start."""
    Z, dmu = last["Z"], mu - last["mu"]
    grad = dmu[:, None] * Z - (g - last["g"])
    H = last["H"] + dmu[:, None, None] * np.eye(Z.shape[1])
    return Z - np.linalg.solve(H, grad[:, :, None])[:, :, 0]


def _newton_value(cls: RowLoss, part: tuple, t: np.ndarray, Z: np.ndarray,
                  mu: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``F_i(z_i)`` of :func:`newton_minimize` for the nodes of ``part`` (their rows ``(X, owner,
    y, p, c, starts)``, owners numbered ``0..len(Z) - 1``) from ``t_r = x_r^T z_i``."""
    _, la, ya, pa, ca, _ = part
    return (np.bincount(la, ca * cls._ell(t, ya, pa), minlength=Z.shape[0])
            + 0.5 * mu * (Z**2).sum(axis=1) - (g * Z).sum(axis=1))

