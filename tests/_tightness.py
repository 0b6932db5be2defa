"""Instances and an independent reference for the tightness suite of certificates built from
weights alone (``test_tightness.py``, ``benchmarks/bench_tightness.py``).

Every instance is plain data (graph edges, node data, penalty name, ``lambda``); the reference
optimum is a hand-written vectorized CVXPY problem (its own incidence matrix built from the edge
list, its own loss and penalty formulas from MATH.md §2-3), solved by Clarabel at tight
tolerances; gtvmodel is used only to *build* the model under test.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cvxpy as cp
import networkx as nx
import numpy as np
import scipy.sparse as sp

import gtvmodel as gm
from gtvmodel.datasets import sbm_graph

GRAPHS = ("path", "tree", "grid", "sbm", "random", "sensor", "community", "smallworld")
PENALTIES = ("norm1", "norm2", "norminf", "sqnorm2")
#: Clarabel at tight tolerances (the reference optimum).
TIGHT = {"tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12, "tol_ktratio": 1e-10,
         "max_iter": 500}


@dataclass
class Case:
    """One instance: ``edges`` (``(|E|, 2)`` positions) with weights ``A``; per node a kind
    (``"quad"``, ``"sq"``, ``"zero"``), data (``a`` rows, or ``X``/``y``), ``l1``/``l2`` and
    optional box bounds; the penalty's name and ``lambda``."""

    name: str
    n: int
    d: int
    edges: np.ndarray
    A: np.ndarray
    kind: list[str]
    a: np.ndarray
    X: dict[int, np.ndarray] = field(default_factory=dict)
    y: dict[int, np.ndarray] = field(default_factory=dict)
    l1: np.ndarray | None = None
    l2: np.ndarray | None = None
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    penalty: str = "norm1"
    lam: float = 1.0


def graph(kind: str, n: int, rng: np.random.Generator) -> nx.Graph:
    """A connected graph of about ``n`` nodes on ``0..n-1`` (pygsp-style Sensor: random
    geometric points joined to their k nearest neighbours; Community: such clusters joined by
    a few random edges)."""
    if kind == "path":
        G = nx.path_graph(n)
    elif kind == "tree":
        # a random recursive tree drawn with numpy (nx.random_labeled_tree needs networkx 3.2)
        G = nx.Graph(list(zip(range(1, n), rng.integers(0, np.arange(1, n)), strict=True)))
    elif kind == "grid":
        k = max(2, int(round(np.sqrt(n))))
        G = nx.convert_node_labels_to_integers(nx.grid_2d_graph(k, k))
    elif kind == "sbm":
        h = n // 2
        G = sbm_graph([h, n - h], [[0.3, 0.02], [0.02, 0.3]],
                      seed=int(rng.integers(1 << 30)))
    elif kind == "random":
        G = nx.gnp_random_graph(n, 4.0 / n, seed=int(rng.integers(1 << 30)))
    elif kind == "smallworld":
        G = nx.connected_watts_strogatz_graph(n, 4, 0.1, seed=int(rng.integers(1 << 30)))
    elif kind == "sensor":
        G = _knn(rng.uniform(size=(n, 2)), 4)
    elif kind == "community":
        c = 3
        centers = rng.uniform(size=(c, 2)) * 4
        pts = centers[rng.integers(c, size=n)] + 0.3 * rng.normal(size=(n, 2))
        G = _knn(pts, 3)
        for _ in range(c):
            i, j = rng.integers(n, size=2)
            if i != j:
                G.add_edge(int(i), int(j))
    else:  # pragma: no cover - helper misuse
        raise ValueError(kind)
    if not nx.is_connected(G):  # join the components by a chain of edges
        comps = [min(c) for c in nx.connected_components(G)]
        G.add_edges_from(zip(comps[:-1], comps[1:], strict=True))
    return nx.convert_node_labels_to_integers(G)


def _knn(pts: np.ndarray, k: int) -> nx.Graph:
    n = len(pts)
    dist = np.linalg.norm(pts[:, None] - pts[None], axis=2)
    np.fill_diagonal(dist, np.inf)
    nbr = np.argsort(dist, axis=1)[:, :k]
    G = nx.Graph()
    G.add_nodes_from(range(n))
    sigma = np.median(dist[np.arange(n)[:, None], nbr])
    for i in range(n):
        for j in nbr[i]:
            G.add_edge(i, int(j), weight=float(np.exp(-(dist[i, j] / sigma) ** 2) + 0.1))
    return G


def random_case(seed: int, *, graph_kind: str | None = None, penalty: str | None = None,
                d: int | None = None, n: int = 40, dataless: float | None = None,
                lam_factor: float | None = None, boxes: bool | None = None,
                fewer_samples: bool | None = None, l1: bool | None = None) -> Case:
    """A random instance (unset options drawn from ``seed``)."""
    rng = np.random.default_rng(seed)
    gk = graph_kind or str(rng.choice(GRAPHS))
    pen = penalty or str(rng.choice(PENALTIES))
    d = d or int(rng.choice([1, 3]))
    frac = float(rng.choice([0.0, 0.2, 0.4, 0.6])) if dataless is None else dataless
    G = graph(gk, n, rng)
    n = G.number_of_nodes()
    edges = np.array([(min(i, j), max(i, j)) for i, j in G.edges()], dtype=np.int64)
    A = np.array([G.edges[i, j].get("weight", 1.0) for i, j in edges])
    order = np.lexsort((edges[:, 1], edges[:, 0]))
    edges, A = edges[order], A[order]
    # two or three clusters of true weights (piecewise constant over the graph)
    labels = (np.arange(n) * int(rng.integers(2, 4))) // n
    centers = rng.normal(scale=2.0, size=(labels.max() + 1, d))
    kind = ["quad"] * n
    few = (rng.random() < 0.3 if fewer_samples is None else fewer_samples) and d > 1
    a = centers[labels] + 0.3 * rng.normal(size=(n, d))
    case = Case(f"{gk}/{pen}/d{d}/z{frac:.1f}", n, d, edges, A, kind, a, penalty=pen)
    for i in range(n):
        if rng.random() < 0.4 or few:
            m = int(rng.integers(1, d)) if few and rng.random() < 0.6 else int(rng.integers(d, 6))
            X = rng.normal(size=(m, d))
            case.kind[i] = "sq"
            case.X[i], case.y[i] = X, X @ a[i] + 0.1 * rng.normal(size=m)
    zero = rng.permutation(n)[:int(round(frac * n))]
    for i in zero:
        case.kind[i] = "zero"
    use_l1 = rng.random() < 0.3 if l1 is None else l1
    if use_l1:
        case.l1 = np.where(rng.random(n) < 0.5, rng.uniform(0.05, 0.5, n), 0.0)
    if rng.random() < 0.2:
        case.l2 = np.where(rng.random(n) < 0.5, rng.uniform(0.05, 0.5, n), 0.0)
    if rng.random() < 0.25 if boxes is None else boxes:
        lo, hi = np.full((n, d), -np.inf), np.full((n, d), np.inf)
        sel = rng.random(n) < 0.4
        # bounds that cut through the data: active at the optimum
        hi[sel] = a[sel] - np.abs(rng.normal(scale=0.5, size=(sel.sum(), d)))
        lo[sel] = hi[sel] - rng.uniform(0.5, 2.0, size=(sel.sum(), d))
        case.lo, case.hi = lo, hi
    if case.penalty == "sqnorm2":
        case.lam = float(np.exp(rng.uniform(np.log(0.01), np.log(3.0))))
    else:
        case.lam = (lam_factor if lam_factor is not None else
                    float(np.exp(rng.uniform(np.log(0.02), np.log(3.0))))) * lam_scale(case)
    case.name += f"/lam{case.lam:.3g}"
    return case


def lam_scale(case: Case) -> float:
    """``lambda_crit`` of :func:`gtvmodel.theory.consensus_threshold` on the case's model at
    ``lambda = 1`` (a crude scale where it is infinite or fails)."""
    model = build_model(case, lam=1.0)
    try:
        lc = float(gm.theory.consensus_threshold(model))
    except gm.GTVError:
        lc = np.inf
    if not np.isfinite(lc) or lc <= 0:
        lc = 1.0
    return lc


def build_model(case: Case, lam: float | None = None) -> gm.GTVModel:
    """The model under test (gtvmodel's classes; the reference does not use it)."""
    G = nx.Graph()
    G.add_nodes_from(range(case.n))
    G.add_weighted_edges_from((int(i), int(j), float(w)) for (i, j), w in zip(case.edges, case.A,
                                                                             strict=True))
    pen = {"norm1": gm.Norm1(), "norm2": gm.Norm2(), "norminf": gm.NormP(np.inf),
           "sqnorm2": gm.SquaredNorm2()}[case.penalty]
    model = gm.GTVModel(G, dim=case.d, penalty=pen, lam=case.lam if lam is None else lam)
    for i in range(case.n):
        reg = {"l1": 0.0 if case.l1 is None else float(case.l1[i]),
               "l2": 0.0 if case.l2 is None else float(case.l2[i])}
        if case.kind[i] == "quad":
            model.set_loss(i, gm.QuadraticLoss(case.a[i], **reg))
        elif case.kind[i] == "sq":
            model.set_loss(i, gm.SquaredLoss(case.X[i], case.y[i], **reg))
        else:
            model.set_loss(i, gm.ZeroLoss(**reg))
        if case.lo is not None and np.isfinite(case.hi[i]).any():
            model.add_constraint(i, gm.Box(case.lo[i], case.hi[i]))
    return model


def reference(case: Case, settings: dict | None = None) -> np.ndarray:
    """The minimizer of (16) by a hand-written CVXPY problem (Clarabel, tight tolerances;
    ``settings``: Clarabel's instead)."""
    n, d = case.n, case.d
    W = cp.Variable((n, d))
    E = len(case.edges)
    Dm = sp.csr_matrix((np.r_[np.ones(E), -np.ones(E)],
                        (np.r_[np.arange(E), np.arange(E)], case.edges.T.ravel())),
                       shape=(E, n))
    terms = []
    quad = [i for i in range(n) if case.kind[i] == "quad"]
    if quad:
        terms.append(cp.sum_squares(W[quad] - case.a[quad]))
    sq = [i for i in range(n) if case.kind[i] == "sq"]
    if sq:
        owner = np.concatenate([[i] * len(case.y[i]) for i in sq])
        Xs = np.vstack([case.X[i] for i in sq])
        ys = np.concatenate([case.y[i] for i in sq])
        inv_m = np.concatenate([[1.0 / len(case.y[i])] * len(case.y[i]) for i in sq])
        fit = cp.sum(cp.multiply(Xs, W[owner]), axis=1) - ys
        terms.append(cp.sum(cp.multiply(inv_m, cp.square(fit))))
    if case.l1 is not None:
        terms.append(cp.sum(case.l1 @ cp.abs(W)))
    if case.l2 is not None:
        terms.append(cp.sum(case.l2 @ cp.square(W)))
    Z = Dm @ W
    if case.penalty == "sqnorm2":
        pen = 0.5 * cp.sum(case.A @ cp.square(Z))
    else:
        p = {"norm1": 1, "norm2": 2, "norminf": "inf"}[case.penalty]
        pen = case.A @ cp.norm(Z, p, axis=1)
    cons = []
    if case.lo is not None:
        lo, hi = case.lo, case.hi
        fin = np.isfinite(hi)
        cons = [W[fin] <= hi[fin], W[fin] >= lo[fin]]
    prob = cp.Problem(cp.Minimize(cp.sum(terms) + case.lam * pen), cons)
    prob.solve(solver=cp.CLARABEL, **(TIGHT if settings is None else settings))
    Wv = np.asarray(W.value, dtype=float)
    if case.lo is not None:  # into the box (the solver's feasibility tolerance)
        Wv = np.clip(Wv, case.lo, case.hi)
    return Wv


def perturbed(case: Case, W: np.ndarray, eps: float, seed: int) -> np.ndarray:
    """``W + eps * noise`` (standard normal entries), clipped into the boxes."""
    Wp = W + eps * np.random.default_rng(seed).normal(size=W.shape)
    if case.lo is not None:
        Wp = np.clip(Wp, case.lo, case.hi)
    return Wp
