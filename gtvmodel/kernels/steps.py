"""The linear-algebra steps of :func:`~gtvmodel.kernels.composite.composite_active_set_prox`
with the rows' active sets fixed (a system of :func:`~gtvmodel.kernels.systems._system_matrices`):

- :func:`_affine_solve`: ``z`` minimizing ``z^T H z / 2 - f^T z`` on the affine set of the
  free linear rows, and those rows' duals;
- :func:`_ball_solve`: the same inside a Euclidean ball ``||z||_2 <= r``, the trust-region
  step (Moré and Sorensen's Newton iteration on the secular equation, in the eigenbasis of
  the curvature on the null space of the free rows);
- :func:`_row_duals`: every row's dual at the step's ``z``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .linalg import _pinv_rows


def _affine_solve(sy: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``z`` minimizing ``z^T H z / 2 - f^T z`` with the fixed coordinates at ``zfix`` and
    ``Pd z = bd`` on the others, and the duals ``ad`` of those rows: with ``H = L L^T``
    (Cholesky, on the free coordinates), ``u = L^T z`` is the projection of ``L^{-1} f`` onto
    ``{(Pd L^{-T}) u = bd}`` by one pseudo-inverse (:func:`_affine_factors`; least squares
    where the rows are inconsistent), and ``ad`` is the solution of ``Pd^T ad = f - H z``
    nearest ``a0``."""
    fac = _affine_factors(sy)
    zfix, on = sy["zfix"], sy["on"]
    fr, Li, li = fac["fr"], fac["Li"], fac["li"]
    if Li is not None:
        u0 = np.einsum("kij,kj->ki", Li, np.where(fr, sy["f"] - np.einsum("kij,kj->ki", sy["H"],
                                                                         zfix), zfix))
    else:  # zfix is 0 on the free coordinates
        u0 = li * np.where(fr, sy["f"], zfix)
    if not sy["F"]:
        return np.where(fr, _back(u0, Li, li), zfix), np.zeros((zfix.shape[0], 0))
    A, Ainv = fac["A"], fac["Ainv"]
    # (A, bd and Ainv are 0 in the unused slots)
    u = u0 + np.einsum("kdf,kf->kd", Ainv, sy["bd"] - np.einsum("kfd,kd->kf", A, u0))
    a0 = sy["a0"]
    ad = a0 + np.einsum("kdf,kd->kf", Ainv, u0 - u - np.einsum("kfd,kf->kd", A, a0))
    return np.where(fr, _back(u, Li, li), zfix), np.where(on, ad, 0.0)


def _rows_back(Pf: np.ndarray, Li: np.ndarray | None, li: np.ndarray | None) -> np.ndarray:
    """``A = Pf L^{-T}`` of :func:`_affine_factors` (``Li = L^{-1}``, or ``L = diag(1 /
    li)``)."""
    if Li is not None:
        return np.einsum("kfj,kij->kfi", Pf, Li)
    assert li is not None
    return Pf * li[:, None, :]


def _back(u: np.ndarray, Li: np.ndarray | None, li: np.ndarray | None) -> np.ndarray:
    """``L^{-T} u`` of :func:`_affine_solve` (``Li = L^{-1}``, or ``L = diag(1 / li)``)."""
    if Li is not None:
        return np.einsum("kji,kj->ki", Li, u)
    assert li is not None
    return li * u


def _affine_factors(sy: dict[str, Any]) -> dict[str, Any]:
    """The factors of :func:`_affine_solve` that depend on the active sets only (computed once
    per system, kept in ``sy["fac"]``): ``fr`` (free coordinates), ``Li = L^{-1}`` of ``Hr = L
    L^T`` (``Hr``: ``H`` on the free coordinates, ``I`` on the others) or, where ``H = mu I``,
    ``li`` (``L = sqrt(mu) I`` there), ``A = Pd L^{-T}`` and its pseudo-inverse ``Ainv``
    (:func:`_pinv_rows`)."""
    fac = sy["fac"].setdefault("affine", {})
    if fac:
        return fac
    H, fx, on, F = sy["H"], sy["fx"], sy["on"], sy["F"]
    d = fx.shape[1]
    fr = ~fx
    Li = li = None
    if sy["any_q"]:
        eye = np.eye(d)
        Li = np.linalg.inv(np.linalg.cholesky(np.where(fr[:, :, None] & fr[:, None, :], H,
                                                       eye)))
    else:
        li = np.where(fr, 1.0 / np.sqrt(H[:, 0, :1]), 1.0)
    fac.update(fr=fr, Li=Li, li=li, A=np.zeros((fr.shape[0], 0, d)),
               Ainv=np.zeros((fr.shape[0], d, 0)))  # (no free linear row: empty)
    if F:
        Pf = np.where(fr[:, None, :], sy["Pd"], 0.0)
        A = _rows_back(Pf, Li, li)
        fac.update(A=A, Ainv=_pinv_rows(A, on))
    return fac


def _ball_solve(sy: dict[str, Any], r: np.ndarray, nu0: np.ndarray, newton_iter: int = 60
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_affine_solve` with the ball ``||z||_2 <= r``: ``z = z0 + y`` with ``z0`` the
    fixed coordinates plus the least-norm solution ``D^+ bd`` of the free linear rows ``D z =
    bd`` on the free coordinates (:func:`_pinv_rows`), and ``y`` in their null space
    (projector ``Pi = I - D^+ D`` there) minimizing ``y^T H y / 2 - b^T y``, ``b = Pi (f - H
    z0)``, over ``||y||^2 <= rho^2 = r^2 - ||z0||^2`` (the three parts are orthogonal): a
    trust-region problem with ``H`` positive definite, exact in the eigenbasis of ``Pi H Pi``
    (``y(nu) = sum_i c_i q_i / (lambda_i + nu)``): ``nu = 0`` where ``y(0)`` is inside, else
    Newton's method on the secular equation ``psi(nu) = 1/||y(nu)|| = 1/rho`` (Moré and
    Sorensen): ``psi`` is concave and increasing, so one step from the last multiplier
    ``nu0`` lands below the root (clipped at ``0``) and the next ones increase to it
    quadratically.  Returns ``(z, ad, nu)``, ``ad`` the solution of ``D^T ad = f - (H + nu I)
    z`` nearest ``a0``."""
    H, fx, zfix, on, F = sy["H"], sy["fx"], sy["zfix"], sy["on"], sy["F"]
    k, d = zfix.shape
    fac = _ball_factors(sy)
    fr, z0, D, Dp, Pi, B, lam, Qv = (fac[key] for key in ("fr", "z0", "D", "Dp", "Pi", "B",
                                                          "lam", "Qv"))
    if not sy["any_q"]:  # H = mu I: y(nu) = b / (mu + nu), nu = ||b|| / rho - mu
        b = fr * (sy["f"] - H[:, 0, :1] * z0)
        for _ in range(2 if F else 0):  # projected onto the null space, twice (rounding)
            b -= fr * np.einsum("kdf,kf->kd", Dp, np.einsum("kfd,kd->kf", D, b))
        c = b
    else:
        if Pi is not None:
            b = (Pi @ (sy["f"] - (H @ z0[:, :, None])[:, :, 0])[:, :, None])[:, :, 0]
        else:  # no fixed coordinate, no linear row: Pi = I
            b = sy["f"]
        c = np.einsum("kdi,kd->ki", Qv, b)
    c2 = c * c
    # rho2 <= 0: the active set's rows leave no point in the ball (it must change)
    rho = np.sqrt(np.maximum(r * r - np.einsum("kd,kd->k", z0, z0), (1e-8 * r) ** 2))
    out = (c2 / (lam * lam)).sum(axis=1) > rho * rho  # ||z(0)|| > r: the ball binds
    nu = np.where(out, nu0, 0.0)
    tol = 4 * np.finfo(float).eps * lam[:, 0]
    for it in range(newton_iter):
        inv = 1.0 / (lam + nu[:, None])
        t = c2 * inv * inv
        n2 = t.sum(axis=1)
        step = (1.0 / rho - 1.0 / np.sqrt(n2)) * n2**1.5 / (t * inv).sum(axis=1)
        new = np.where(out, np.maximum(nu + step, 0.0), 0.0)
        moving = np.abs(new - nu) > tol + 4 * np.finfo(float).eps * nu
        nu = new
        if it and not moving.any():
            break
    y = c / (lam + nu[:, None])
    if Qv is not None:
        y, nu = _refined_ball_point(B, b, lam, Qv, nu, rho, out)
    ny = np.linalg.norm(y, axis=1)
    y *= np.where(out, rho / np.maximum(ny, 1e-300), 1.0)[:, None]  # ||y|| = rho to rounding
    Za = np.where(fx, zfix, z0 + y)
    if not F:
        return Za, np.zeros((k, 0)), nu
    res = fr * (sy["f"] - np.einsum("kij,kj->ki", H, Za) - nu[:, None] * Za)
    a0 = sy["a0"]
    ad = a0
    for _ in range(2):  # the duals nearest a0, refined once
        ad = ad + np.einsum("kdf,kd->kf", Dp, res - np.einsum("kfd,kf->kd", D, ad))
    return Za, np.where(on, ad, 0.0), nu


def _ball_factors(sy: dict[str, Any]) -> dict[str, Any]:
    """The parts of :func:`_ball_solve` that depend on the active sets only (computed once per
    system, kept in ``sy["fac"]``): ``fr``, the free linear rows ``D`` on the free coordinates
    and their pseudo-inverse ``Dp`` (:func:`_pinv_rows`), ``z0`` (fixed coordinates plus ``D^+
    bd``, refined once), and the eigenbasis ``lam``, ``Qv`` of the curvature ``B = Pi H Pi + I -
    Pi`` on the null space (projector ``Pi``; ``lam = mu`` and ``Qv`` None where ``H = mu
    I``)."""
    fac = sy["fac"].setdefault("ball", {})
    if fac:
        return fac
    H, fx, zfix, on, F = sy["H"], sy["fx"], sy["zfix"], sy["on"], sy["F"]
    d = fx.shape[1]
    z0 = zfix.copy()
    fr = (~fx).astype(float)
    Pi = B = Qv = None
    D, Dp = np.zeros((fr.shape[0], 0, d)), np.zeros((fr.shape[0], d, 0))  # no free linear row
    if F:
        D = sy["Pd"] * fr[:, None, :]
        Dp = _pinv_rows(D, on)
        for _ in range(2):  # least-norm solution, refined once (ill-conditioned rows)
            z0 += fr * np.einsum("kdf,kf->kd", Dp, sy["bd"] - np.einsum("kfd,kd->kf", D, z0))
    if not sy["any_q"]:
        lam = H[:, 0, :1] * np.ones((1, d))
    else:
        B = H
        if F or fx.any():
            Pi = fr[:, :, None] * np.eye(d)
            if F:
                Pi -= Dp @ D
                Pi *= fr[:, :, None] * fr[:, None, :]
            B = Pi @ H @ Pi + np.eye(d) - Pi
        lam, Qv = np.linalg.eigh(B)
    fac.update(fr=fr, z0=z0, D=D, Dp=Dp, Pi=Pi, B=B, lam=lam, Qv=Qv)
    return fac


def _refined_ball_point(B: np.ndarray, b: np.ndarray, lam: np.ndarray, Qv: np.ndarray,
                        nu: np.ndarray, rho: np.ndarray, out: np.ndarray, steps: int = 1
                        ) -> tuple[np.ndarray, np.ndarray]:
    """``y = (B + nu I)^{-1} b`` accurate componentwise, with ``nu`` (where ``out``) corrected
    so that ``||y|| = rho``: the eigenbasis ``B ~ Qv diag(lam) Qv^T`` is accurate relative to
    ``||B||`` only, too little for badly scaled data (graded curvatures), so every solve takes
    one step of iterative refinement (residual ``b - (B + nu I) y`` in full), and ``steps``
    Newton steps on the secular equation use the refined ``||y(nu)||``.  Returns ``(y,
    nu)``."""
    y, moved = _refined_solve(B, b, Qv, lam, nu)
    # the secular Newton steps again where the refinement moved a point (graded data)
    for _ in range(steps if out.any() and moved else 0):
        ny = np.linalg.norm(y, axis=1)
        slope = np.einsum("kd,kd->k", y, _eig_solve(Qv, lam, nu, y)) / ny**3
        nu = np.where(out, np.maximum(nu + (1.0 / rho - 1.0 / ny) / slope, 0.0), 0.0)
        y = _refined_solve(B, b, Qv, lam, nu)[0]
    return y, nu


def _eig_solve(Qv: np.ndarray, lam: np.ndarray, nu: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``(B + nu I)^{-1} rhs`` in the eigenbasis ``B ~ Qv diag(lam) Qv^T``."""
    return np.einsum("kdi,ki->kd", Qv, np.einsum("kdi,kd->ki", Qv, rhs) / (lam + nu[:, None]))


def _refined_solve(B: np.ndarray, b: np.ndarray, Qv: np.ndarray, lam: np.ndarray,
                   nu: np.ndarray) -> tuple[np.ndarray, bool]:
    """``(B + nu I)^{-1} b`` by :func:`_eig_solve` and one step of iterative refinement, and
    whether the refinement moved it beyond rounding."""
    y = _eig_solve(Qv, lam, nu, b)
    dy = _eig_solve(Qv, lam, nu, b - np.einsum("kij,kj->ki", B, y) - nu[:, None] * y)
    return y + dy, bool((np.abs(dy) > 1e-15 * np.abs(y).max(axis=1, keepdims=True)).any())


def _row_duals(sy: dict[str, Any], Za: np.ndarray, ad: np.ndarray, nu: np.ndarray | None
               ) -> np.ndarray:
    """Every row's dual at ``z``: held rows their bound, free ``q`` rows ``(P_r^T z - c_r s_r)
    / (c_r q_r)``, free linear data rows ``ad``, and a free unit row owning its coordinate the
    stationarity residual ``f - (H + nu I) z - Pd^T ad`` there."""
    if sy["any_q"]:
        P, cs, wq, freeq = sy["P"], sy["cs"], sy["wq"], sy["freeq"]
        a = np.where(freeq, wq * ((P @ Za[:, :, None])[:, :, 0] - cs), sy["a_fix"])
    else:  # no free q row
        a = sy["a_fix"].copy()
    if sy["F"]:  # the used slots only: a merged system pads ``sel`` with repeated indices
        kk, ff = np.nonzero(sy["on"])
        a[kk, sy["sel"][kk, ff]] = ad[kk, ff]
    fx = sy["fx"]
    if fx.any():
        # (H = mu I where no free q row; ad is 0 in the unused slots)
        res = sy["f"] - (np.einsum("kij,kj->ki", sy["H"], Za) if sy["any_q"]
                         else sy["H"][:, 0, :1] * Za)
        if nu is not None:
            res -= nu[:, None] * Za
        if sy["F"]:
            res -= (sy["Pd"].transpose(0, 2, 1) @ ad[:, :, None])[:, :, 0]
        ki, ji = np.nonzero(fx)
        a[ki, sy["owner"][ki, ji]] = res[ki, ji]
    return a


