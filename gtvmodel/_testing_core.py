"""The shared machinery of the conformance battery :mod:`gtvmodel.testing`: the tight reference
solves in plain CVXPY (:func:`reference_solve`), the comparisons and failures of the checks, the
small test graph (4 nodes, 5 edges) and the comparison of every engine on one model with its
reference (:func:`check_engines`: ``solve_exact`` against the reference optimum ``P*``,
certificates (34) sound at perturbed points and tight at the optimum, Algorithm 1's certified
gap decreasing, a problem-file round trip).  The per-term checks are in :mod:`gtvmodel.testing`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import cvxpy as cp
import networkx as nx
import numpy as np

from .certificates.certificate import certify
from .declaration import ModelDeclaration
from .io import load_model, save_model
from .primal_dual.algorithm import solve_primal_dual
from .solve.exact import solve_exact
from .terms.spec import CONSTRAINTS, LOSSES, PENALTIES

#: Tight CVXPY options of every reference solve of the battery (Clarabel).
REFERENCE_OPTIONS: dict[str, Any] = {
    "solver": "CLARABEL", "tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10,
    "max_iter": 400}
_LOOSER = {"tol_gap_abs": 1e-8, "tol_gap_rel": 1e-8, "tol_feas": 1e-8}
#: Relative tolerance of objective comparisons with a reference solve.
REL = 1e-6
_UNBOUNDED = (cp.UNBOUNDED, cp.UNBOUNDED_INACCURATE)
LAM = 0.3


def fail(what: str, detail: str) -> None:
    raise AssertionError(f"{what}: {detail}")


def close_to(a: Any, b: Any, rtol: float, atol: float, what: str) -> None:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        fail(what, f"shape {a.shape} != {b.shape}")
    both_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    with np.errstate(invalid="ignore"):
        err = np.where(both_inf, 0.0, np.abs(a - b))
    bound = atol + rtol * np.abs(np.where(both_inf, 0.0, b))
    bad = ~(err <= bound)
    if bad.any():
        k = np.unravel_index(int(np.argmax(np.where(bad, err - bound, -np.inf))), a.shape)
        fail(what, f"{a[k]!r} != {b[k]!r} at {tuple(int(i) for i in k)} (|diff| "
                    f"{err[k]:.3g} > {bound[k]:.3g})")


def reference_solve(objective: cp.Expression, constraints: Sequence[cp.Constraint] = (),
               maximize: bool = False) -> tuple[float, str]:
    """Solve a reference problem tightly; ``(value, status)`` (``+-inf`` if unbounded)."""
    sense = cp.Maximize if maximize else cp.Minimize
    prob = cp.Problem(sense(objective), list(constraints))
    prob.solve(**REFERENCE_OPTIONS)
    if prob.status == cp.OPTIMAL_INACCURATE:  # Clarabel stalled short of 1e-10: ask 1e-8
        prob.solve(**{**REFERENCE_OPTIONS, **_LOOSER})
    if prob.status in _UNBOUNDED:
        return (np.inf if maximize else -np.inf), prob.status
    if prob.status != cp.OPTIMAL:
        fail("reference solve", f"status {prob.status}")
    return float(prob.value), prob.status


def as_rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def small_graph() -> nx.Graph:
    G = nx.path_graph(4)
    G.add_edge(0, 2, weight=0.5)
    return G


def same_spec(got: Any, spec: Any, name: str) -> None:
    """Two :class:`~gtvmodel.terms.spec.TermSpec` agree in kind, parameters and arrays."""
    if (got.kind, dict(got.params)) != (spec.kind, dict(spec.params)):
        fail(name, f"spec {got.kind} {dict(got.params)} after a round trip, was "
                    f"{spec.kind} {dict(spec.params)}")
    for key, arr in spec.arrays.items():
        if key not in got.arrays or not np.array_equal(got.arrays[key], arr):
            fail(name, f"spec array {key!r} changed in a round trip")


def file_terms(model: ModelDeclaration) -> bool:
    """Whether every term of ``model`` is a library term of problem files (registered)."""
    losses = [model.loss_at(i) for i in range(model.num_nodes)]
    cons = [c for i in range(model.num_nodes) for c in model.constraints_at(i)]
    return (all(type(ls) is LOSSES.get(ls.kind) for ls in losses)
            and type(model.penalty) is PENALTIES.get(model.penalty.kind)
            and all(type(c) is CONSTRAINTS.get(c.kind) for c in cons))


def check_engines(model: ModelDeclaration, reference: Callable[[list[cp.Variable]], tuple],
                   rng: np.random.Generator, project: Callable[[np.ndarray], np.ndarray],
                   max_iter: int, name: str) -> None:
    """Exact solve vs the reference, certificates sound and tight, Algorithm 1, file."""
    x = [cp.Variable(model.dim) for _ in range(model.num_nodes)]
    obj, cons = reference(x)
    p_star, _ = reference_solve(obj, cons)
    scale = max(1.0, abs(p_star))
    sol = solve_exact(model)
    close_to(sol.objective, p_star, REL, 1e-9, f"{name}: solve_exact objective vs CVXPY")
    close_to(model.objective(sol.weights), p_star, REL, 1e-9,
           f"{name}: objective at solve_exact's weights vs CVXPY")
    cert = certify(model, sol.weights, sol.flows)
    if not cert.gap <= 1e-5 * scale:
        fail(name, f"certificate at the exact solution is loose: gap {cert.gap} "
                    f"(P* = {p_star})")
    for s in (1e-3, 1e-2, 1e-1):
        W = project(sol.weights + s * rng.normal(size=sol.weights.shape))
        sub = model.objective(W) - p_star
        for flows in (sol.flows, None):
            g = certify(model, W, flows).gap
            if not g >= sub - 1e-7 * scale:
                fail(name, f"unsound certificate at noise {s}: gap {g} < P(W) - P* = {sub}")
            if not np.isfinite(g):
                fail(name, f"infinite certificate at noise {s} (P(W) - P* = {sub})")
    start = project(sol.weights + 0.3 * rng.normal(size=sol.weights.shape))
    res = solve_primal_dual(model, max_iter=max_iter, tol=0.0, record_every=max_iter // 4,
                            certificate_budget=None,
                            warm_start=(start, np.zeros_like(sol.flows)))
    gaps = np.asarray(res.history.gap, dtype=float)
    if not (np.isfinite(gaps[-1]) and (gaps[-1] < gaps[0] or gaps[-1] <= 1e-9 * scale)):
        fail(name, f"Algorithm 1's certified gap did not decrease: {gaps.tolist()}")
    if not gaps[-1] >= model.objective(res.weights) - p_star - 1e-7 * scale:
        fail(name, f"Algorithm 1's certified gap {gaps[-1]} < P(w) - P*")
    if not file_terms(model):
        return
    with tempfile.TemporaryDirectory() as tmp:
        save_model(model, Path(tmp) / "model.npz")
        back = load_model(Path(tmp) / "model.npz")
    for W in rng.normal(size=(2, *sol.weights.shape)):
        W = project(W)
        close_to(back.objective(W), model.objective(W), 1e-13, 0.0,
               f"{name}: objective after a problem-file round trip")


def selected_checks(checks: Iterable[str] | None, known: Sequence[str], family: str) -> list[str]:
    chosen = list(known if checks is None else checks)
    unknown = [c for c in chosen if c not in known]
    if unknown:
        raise ValueError(f"unknown {family} checks {unknown}; known: {list(known)}")
    return chosen
