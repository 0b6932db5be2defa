"""Independent, hand-written CVXPY formulations used as references by the tests.

Everything here is written per node and per edge from the formulas in MATH.md §2-3 and the
loss docstrings, on purpose *without* using gtvmodel's expressions, so that the vectorized
compilation in ``gtvmodel.duality.compile`` is checked against a formulation that shares no code
with it.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np

import gtvmodel as gm


def loss_expr(loss: gm.Loss, w: cp.Variable) -> cp.Expression:
    """``L(w)`` written by hand from the loss's data (MATH.md §3 table)."""
    if isinstance(loss, gm.SquaredLoss):
        base = cp.sum_squares(loss.y - loss.X @ w) / loss.m
    elif isinstance(loss, gm.LogisticLoss):
        base = cp.sum(cp.logistic(-cp.multiply(loss.y, loss.X @ w))) / loss.m
    elif isinstance(loss, gm.HingeLoss):
        base = cp.sum(cp.pos(1 - cp.multiply(loss.y, loss.X @ w))) / loss.m
    elif isinstance(loss, gm.HuberLoss):
        base = cp.sum(cp.huber(loss.X @ w - loss.y, loss.M)) / loss.m
    elif isinstance(loss, gm.AbsoluteLoss):
        base = cp.norm1(loss.y - loss.X @ w) / loss.m
    elif isinstance(loss, gm.QuadraticLoss):
        base = cp.sum_squares(w - loss.a)
    elif isinstance(loss, gm.ZeroLoss):
        base = cp.Constant(0.0)
    else:  # pragma: no cover - test helper misuse
        raise TypeError(type(loss))
    return base + loss.l1 * cp.norm1(w) + loss.l2 * cp.sum_squares(w)


def penalty_expr(penalty: gm.Penalty, v: cp.Expression) -> cp.Expression:
    """``phi(v)`` written by hand."""
    if isinstance(penalty, gm.NormP):
        return cp.pnorm(v, penalty.p)
    if isinstance(penalty, gm.Norm2):
        return cp.norm(v, 2)
    if isinstance(penalty, gm.Norm1):
        return cp.norm(v, 1)
    if isinstance(penalty, gm.NormInf):
        return cp.norm(v, "inf")
    if isinstance(penalty, gm.SquaredNorm2):
        return 0.5 * cp.sum_squares(v)
    if isinstance(penalty, gm.QuadForm):
        return 0.5 * cp.quad_form(v, penalty.Q)
    raise TypeError(type(penalty))  # pragma: no cover


def constraint_list(c: gm.Constraint, w: cp.Variable) -> list:
    """``w in C`` written by hand."""
    if isinstance(c, gm.Box):
        lo, hi = c.bounds(w.shape[0])
        return [w[j] >= lo[j] for j in range(len(lo)) if np.isfinite(lo[j])] + [
            w[j] <= hi[j] for j in range(len(hi)) if np.isfinite(hi[j])]
    if isinstance(c, gm.NonNeg):
        return [w >= 0]
    if isinstance(c, gm.NormBall):
        return [cp.norm(w, c.p if np.isfinite(c.p) else "inf") <= c.radius]
    raise TypeError(type(c))  # pragma: no cover


def reference_solve(graph, losses: dict, penalty: gm.Penalty, lam: float, dim: int,
                    constraints: dict | None = None, extra=None):
    """Solve (16) with one CVXPY variable per node and one penalty term per edge.

    ``losses``/``constraints`` map node labels to library objects; ``extra(w)`` may return
    additional ``(objective_terms, constraints)`` in the per-node variables ``w[label]``.
    Returns ``(objective, {label: w_i})``.
    """
    w = {v: cp.Variable(dim) for v in graph.nodes}
    terms = [loss_expr(loss, w[v]) for v, loss in losses.items()]
    for a, b, data in graph.edges(data=True):
        terms.append(lam * data.get("weight", 1.0) * penalty_expr(penalty, w[a] - w[b]))
    cons = []
    for v, cs in (constraints or {}).items():
        for c in cs:
            cons += constraint_list(c, w[v])
    if extra is not None:
        t, c = extra(w)
        terms += t
        cons += c
    prob = cp.Problem(cp.Minimize(cp.sum(cp.hstack(terms))), cons)
    for tol in (1e-12, 1e-10, 1e-9):  # tight first; power cones may need a looser level
        try:
            prob.solve(solver="CLARABEL", tol_gap_abs=tol, tol_gap_rel=tol, tol_feas=10 * tol)
        except cp.error.SolverError:
            continue
        if prob.status == cp.OPTIMAL:
            break
    assert prob.status == cp.OPTIMAL, prob.status
    return float(prob.value), {v: np.asarray(w[v].value) for v in graph.nodes}


def flsa_path(a: np.ndarray, lams) -> dict[float, np.ndarray]:
    """Exact 1-D fused lasso  min_w sum_i (w_i - a_i)^2 + lam sum_i |w_i - w_{i+1}|.

    Path algorithm (Friedman et al. 2007, Hoefling 2010): as lam grows, fused groups never
    split, and a group g of size |g| moves with slope dv_g/dlam = -(s_l + s_r)/(2|g|),
    s = sign(v_g - v_neighbour), until two neighbouring groups meet.  Events are exact, so the
    result is exact up to floating-point rounding.
    """
    v = np.asarray(a, dtype=float).copy()
    sizes = np.ones(len(v), dtype=int)
    lam, todo, out = 0.0, sorted(lams), {}
    while todo:
        s = np.zeros(len(v))
        t = np.array([np.inf])
        if len(v) > 1:
            dif = np.sign(v[:-1] - v[1:])
            s[:-1] += dif
            s[1:] -= dif
        slope = -s / (2.0 * sizes)
        if len(v) > 1:
            gap, rate = v[:-1] - v[1:], slope[:-1] - slope[1:]
            with np.errstate(divide="ignore", invalid="ignore"):
                t = np.where(gap * rate < 0, -gap / rate, np.inf)
        tmin = t.min()
        while todo and todo[0] <= lam + tmin:
            L = todo.pop(0)
            out[L] = np.repeat(v + slope * (L - lam), sizes)
        if not todo:
            break
        lam += tmin
        v = v + slope * tmin
        for j in np.flatnonzero(t <= tmin * (1 + 1e-12))[::-1]:
            vm = (v[j] * sizes[j] + v[j + 1] * sizes[j + 1]) / (sizes[j] + sizes[j + 1])
            v = np.concatenate([v[:j], [vm], v[j + 2:]])
            sizes = np.concatenate([sizes[:j], [sizes[j] + sizes[j + 1]], sizes[j + 2:]])
    return out
