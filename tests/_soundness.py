"""Generators and an independent reference for the soundness tests (``test_soundness.py``).

Everything in this module is written from the raw data it generates (``X``, ``y``, ``a``, ``p``,
``Q``, bounds, symbolic terms) and MATH.md §2; it never calls gtvmodel's compiler
(``gtvmodel.solve.exact``), ``model.solve_exact`` or the loss/penalty/constraint ``expression``,
``value`` or ``violation`` methods.  gtvmodel is used only to *build* the model under test
(:func:`build_model`) and to produce candidates (:func:`candidates`).

Pieces:

* :func:`random_instance` -- one small random GTV instance from ``(seed, family)``, as plain data
  (:class:`Instance`).  Families aim at the audit's classes (issue 8) or mix everything.
* :func:`reference` -- ``P*`` by a hand-written CVXPY problem (one variable per node, one term
  per node and per edge), solved twice by Clarabel at tight tolerances (once as written, once with
  the objective rescaled), plus an honest error estimate ``err``.
* :func:`true_objective` -- ``P(W)`` in numpy (``math.fsum``, scaled p-norms, explicit domain
  checks; ``+inf`` outside a symbolic domain) and per-node constraint violations.
* :func:`check_certificate` -- the soundness property; returns the failure classes it finds.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import cvxpy as cp
import networkx as nx
import numpy as np
from scipy.special import xlogy

import gtvmodel as gm
from gtvmodel.errors import GTVError, SolverError

#: ``GTV_SOUNDNESS_OLD=1``: the code under test reports ``gap >= P - P* - tolerance`` (commit
#: 8e50eb6 and before); the property then uses ``gap + tolerance``.
OLD = os.environ.get("GTV_SOUNDNESS_OLD", "") not in ("", "0")

#: Constraint violations up to ``FEAS_TOL * max(1, ||w_i||_inf)`` count as feasible; beyond
#: ``FEAS_GUARD * FEAS_TOL * ...`` the certificate must report ``gap = inf``.  Between the two
#: (a guard band for the different ways of measuring a violation) nothing is required.
FEAS_TOL = 1e-8
FEAS_GUARD = 2.0

#: Reference tolerances: the tight level first, looser ones if Clarabel reports an inaccurate
#: status (the error estimate of :func:`reference` covers either).
CLARABEL_LEVELS = (
    {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10, "tol_ktratio": 1e-8,
     "max_iter": 400},
    {"tol_gap_abs": 1e-9, "tol_gap_rel": 1e-9, "tol_feas": 1e-9, "tol_ktratio": 1e-7,
     "max_iter": 400},
    {"tol_gap_abs": 1e-8, "tol_gap_rel": 1e-8, "tol_feas": 1e-9, "tol_ktratio": 1e-6,
     "max_iter": 400},
)
#: Largest relative constraint violation accepted at the reference point.
REF_FEAS = 1e-9

FAMILIES = ("mixed", "illcond", "extreme_p", "symbolic", "feas_scale", "radius")
#: Families drawn by their own property tests (not by the default ones over :data:`FAMILIES`,
#: whose examples stay as they were): ``"stiff"`` -- ill-conditioned data nodes whose Gram
#: ratios ``e_min/e_max`` span 1e-6 ... 1e-13, beside rank-deficient and data-less nodes.
#: ``"zero_reg"`` -- nodes without data but with ``l1``/``l2`` regularizers (conjugate domain a
#: box ``|s_j| <= eta``, or finite everywhere), whose demands leave the box on both sides.
EXTRA_FAMILIES = ("stiff", "zero_reg")
ALL_FAMILIES = FAMILIES + EXTRA_FAMILIES
#: Relative gap the exact solution must certify to, per family (default 1e-6): the stiff
#: family's certificates are held to 1e-9 (issue 16, item 4: tight on ill-conditioned data).
EXACT_RTOL = {"stiff": 1e-9}

#: Norm exponents.  CVXPY replaces p by a nearby rational (exactly for most of these; 1.0001
#: becomes 1 and 1 + 1/1024 becomes 1024/1023): the reference point is evaluated with the true p,
#: and the error estimate of :func:`reference` absorbs the difference.
P_VALUES = (1.0001, 1.0009765625, 1.001, 1.01, 1.1, 1.5, 3.0, 7.5, 50.0, 100.0, 333.0, 1000.0)

LIB_LOSSES = ("squared", "logistic", "hinge", "absolute", "huber", "quadratic", "zero")
#: Share of the ``"mixed"`` family's library nodes replaced by a Poisson node (counts ``y_r``
#: drawn from ``Poisson(exp(x_r^T w_anchor))``), drawn from a stream of their own so that every
#: other draw of an instance stays as it was.
POISSON_SHARE = 0.2
SYM_ATOMS = ("inv_pos", "pow_m1", "qol", "neglog", "negentr", "exp", "lse", "pnorm")


# --------------------------------------------------------------------------- data


@dataclass
class SymTerm:
    """One term of a symbolic loss: ``atom`` with coefficient ``c`` and parameters."""

    atom: str
    c: float
    j: int = 0
    a: np.ndarray | None = None
    p: float = 2.0
    g: float = 1.0


@dataclass
class ConSpec:
    """A node constraint: ``box`` (lo, hi), ``nonneg``, ``ball`` (r, p) or symbolic
    ``sym_sum`` (sum(x) <= c), ``sym_norm`` (||x - a||_2 <= c), ``sym_lower`` (x[j] >= c)."""

    kind: str
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    r: float = 1.0
    p: float = 2.0
    a: np.ndarray | None = None
    j: int = 0
    c: float = 0.0


@dataclass
class NodeSpec:
    loss: str                      # one of LIB_LOSSES, "poisson" or "sym"
    X: np.ndarray | None = None
    y: np.ndarray | None = None
    a: np.ndarray | None = None
    M: float = 1.0
    l1: float = 0.0
    l2: float = 0.0
    sym: list[SymTerm] = field(default_factory=list)
    cons: list[ConSpec] = field(default_factory=list)


@dataclass
class Instance:
    family: str
    seed: int
    n: int
    d: int
    edges: list[tuple[int, int, float]]
    lam: float
    penalty: tuple                 # ("norm2",), ("norm1",), ("norminf",), ("normp", p),
    nodes: list[NodeSpec]          # ("sq",), ("quad", Q)

    def describe(self) -> str:
        kinds = ",".join(nd.loss + ("+" + "/".join(c.kind for c in nd.cons) if nd.cons else "")
                         for nd in self.nodes)
        pen = "quad" if self.penalty[0] == "quad" else self.penalty
        return (f"family={self.family} seed={self.seed} n={self.n} d={self.d} "
                f"|E|={len(self.edges)} lam={self.lam:.3g} penalty={pen} nodes=[{kinds}]")


# --------------------------------------------------------------------------- generators


def _loguniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))


def _conditioned(rng: np.random.Generator, m: int, d: int, cond: float) -> np.ndarray:
    """``U diag(s) V^T`` with singular values log-spaced from 1 to ``1/cond`` (rank min(m, d))."""
    k = min(m, d)
    U, _ = np.linalg.qr(rng.normal(size=(m, k)))
    V, _ = np.linalg.qr(rng.normal(size=(d, k)))
    s = np.logspace(0, -np.log10(cond), k) if k > 1 else np.ones(1)
    return (U * s) @ V.T


def _labels(rng: np.random.Generator, m: int) -> np.ndarray:
    y = rng.choice([-1.0, 1.0], size=m)
    if m >= 2 and np.all(y == y[0]):
        y[0] = -y[0]
    return y


def _graph(rng: np.random.Generator, n: int, wlo: float = 1e-6, whi: float = 1e6
           ) -> list[tuple[int, int, float]]:
    """Random simple graph on ``0..n-1``: sometimes disconnected, with isolated nodes."""
    kind = rng.integers(4)
    pairs: set[tuple[int, int]] = set()
    if kind == 0:    # path
        pairs = {(i, i + 1) for i in range(n - 1)}
    elif kind == 1:  # random sparse (often disconnected, isolated nodes)
        for i in range(n):
            for j in range(i + 1, n):
                if rng.random() < 1.5 / n:
                    pairs.add((i, j))
    elif kind == 2:  # star on a prefix, rest isolated
        k = int(rng.integers(1, n + 1))
        pairs = {(0, j) for j in range(1, k)}
    else:            # two cliques-ish components
        h = max(1, n // 2)
        for block in (range(h), range(h, n)):
            b = list(block)
            for a_ in range(len(b)):
                for c_ in range(a_ + 1, len(b)):
                    if rng.random() < 0.6:
                        pairs.add((b[a_], b[c_]))
    return [(i, j, _loguniform(rng, wlo, whi)) for i, j in sorted(pairs)]


def _anchor(rng: np.random.Generator, d: int) -> np.ndarray:
    """A strictly positive point every constraint of a node contains (keeps nodes feasible and
    inside every symbolic domain)."""
    return rng.uniform(0.2, 2.0, size=d)


def _constraint(rng: np.random.Generator, d: int, anchor: np.ndarray, kinds: tuple[str, ...]
                ) -> ConSpec:
    kind = str(rng.choice(kinds))
    if kind == "box":
        lo = anchor - rng.uniform(0.05, 3.0, size=d)
        hi = anchor + rng.uniform(0.05, 3.0, size=d)
        lo[rng.random(d) < 0.3] = -np.inf
        hi[rng.random(d) < 0.3] = np.inf
        return ConSpec("box", lo=lo, hi=hi)
    if kind == "nonneg":
        return ConSpec("nonneg")
    if kind == "ball":
        p = float(rng.choice((1.0, 2.0, np.inf) + P_VALUES))
        return ConSpec("ball", r=float(pnorm(anchor, p) * rng.uniform(1.05, 3.0)), p=p)
    if kind == "sym_sum":
        return ConSpec("sym_sum", c=float(anchor.sum() + rng.uniform(0.01, 2.0)))
    if kind == "sym_norm":
        a = anchor + rng.normal(scale=0.5, size=d)
        return ConSpec("sym_norm", a=a, c=float(np.linalg.norm(anchor - a) + rng.uniform(0.05, 2)))
    j = int(rng.integers(d))
    return ConSpec("sym_lower", j=j, c=float(anchor[j] - rng.uniform(0.01, 1.0)))


def _sym_loss(rng: np.random.Generator, d: int, anchor: np.ndarray, atoms: tuple[str, ...]
              ) -> list[SymTerm]:
    terms: list[SymTerm] = []
    for _ in range(int(rng.integers(1, 3))):
        atom = str(rng.choice(atoms))
        c = _loguniform(rng, 0.05, 5.0)
        j = int(rng.integers(d))
        if atom == "exp":
            terms.append(SymTerm("exp", c, j=j, g=_loguniform(rng, 0.1, 5.0)))
        elif atom == "neglog":
            terms.append(SymTerm("neglog", c, j=j, g=_loguniform(rng, 0.1, 5.0)))
        elif atom == "pnorm":
            p = float(rng.choice((1.0, 2.0, np.inf, 1.5, 3.0, 100.0)))
            terms.append(SymTerm("pnorm", c, a=anchor + rng.normal(size=d), p=p))
        elif atom == "lse":
            terms.append(SymTerm("lse", c))
            terms.append(SymTerm("sq", c, a=anchor + rng.normal(size=d)))  # bounded below
        else:
            terms.append(SymTerm(atom, c, j=j))
    if rng.random() < 0.5:
        terms.append(SymTerm("sq", _loguniform(rng, 1e-3, 2.0), a=anchor + rng.normal(size=d)))
    return terms


def _lib_node(rng: np.random.Generator, kind: str, d: int, anchor: np.ndarray,
              cond: float | None = None, scale: float = 1.0) -> NodeSpec:
    if kind == "zero":
        return NodeSpec("zero")
    if kind == "quadratic":
        return NodeSpec("quadratic", a=anchor * scale + rng.normal(size=d),
                        l1=_maybe(rng, 0.3), l2=_maybe(rng, 0.3))
    m = int(rng.integers(1, 7))
    if cond is not None:
        X = _conditioned(rng, m, d, cond) * _loguniform(rng, 0.1, 10.0)
    else:
        X = rng.normal(size=(m, d))
        if rng.random() < 0.2 and m > 1:   # rank-deficient: repeated row
            X[1] = X[0]
    if kind in ("logistic", "hinge"):
        y = _labels(rng, m)
    else:
        y = X @ (anchor * scale) + rng.normal(scale=0.1 * scale if cond is None else 1e-3, size=m)
    l2 = _maybe(rng, 0.3)
    if kind == "logistic" and rng.random() < 0.5:
        l2 = _loguniform(rng, 1e-2, 1.0)   # keep the minimum attained most of the time
    return NodeSpec(kind, X=X, y=y, M=_loguniform(rng, 0.1, 3.0), l1=_maybe(rng, 0.3), l2=l2)


def _poisson_node(rng: np.random.Generator, d: int, anchor: np.ndarray) -> NodeSpec:
    """A Poisson node: ``m`` samples ``x_r`` (scale 0.5), counts ``y_r ~ Poisson(exp(x_r^T
    anchor))`` (zeros included), ``l2 > 0`` on half the nodes (the minimum is not attained when
    every ``y_r = 0``)."""
    m = int(rng.integers(1, 7))
    X = 0.5 * rng.normal(size=(m, d))
    y = rng.poisson(np.exp(X @ anchor)).astype(float)
    l2 = _loguniform(rng, 1e-2, 1.0) if rng.random() < 0.5 else _maybe(rng, 0.3)
    return NodeSpec("poisson", X=X, y=y, l1=_maybe(rng, 0.3), l2=l2)


def _maybe(rng: np.random.Generator, prob: float) -> float:
    return _loguniform(rng, 1e-3, 1.0) if rng.random() < prob else 0.0


def _penalty(rng: np.random.Generator, d: int, kinds: tuple[str, ...]) -> tuple:
    kind = str(rng.choice(kinds))
    if kind == "normp":
        return ("normp", float(rng.choice(P_VALUES)))
    if kind == "quad":
        B = rng.normal(size=(d, d))
        return ("quad", B @ B.T + _loguniform(rng, 1e-3, 1.0) * np.eye(d))
    return (kind,)


ALL_PENALTIES = ("norm2", "norm1", "norminf", "normp", "sq", "quad")


def random_instance(seed: int, family: str = "mixed", poisson: bool = True) -> Instance:
    """One random instance of ``family`` (see :data:`FAMILIES`), deterministic in ``seed``;
    ``poisson=False`` leaves out the Poisson nodes of the ``"mixed"`` family (the instance as
    drawn before they were added: :data:`POISSON_SHARE`)."""
    rng = np.random.default_rng([seed, ALL_FAMILIES.index(family)])
    if family == "stiff":
        return _stiff_instance(rng, seed)
    if family == "zero_reg":
        return _zero_reg_instance(rng, seed)
    d = int(rng.integers(1, 4))
    n = int(rng.integers(1, 9))
    lam = 0.0 if rng.random() < 0.1 else _loguniform(rng, 1e-6, 1e6)
    anchors = [_anchor(rng, d) for _ in range(n)]
    nodes: list[NodeSpec] = []
    penalty = _penalty(rng, d, ALL_PENALTIES)
    edges = _graph(rng, n)

    if family == "mixed":
        side = np.random.default_rng([seed, len(ALL_FAMILIES), 29])  # the Poisson nodes' draws
        for i in range(n):
            if rng.random() < 0.25:
                nd = NodeSpec("sym", sym=_sym_loss(rng, d, anchors[i], SYM_ATOMS))
            else:
                nd = _lib_node(rng, str(rng.choice(LIB_LOSSES)), d, anchors[i])
                if poisson and side.random() < POISSON_SHARE:
                    nd = _poisson_node(side, d, anchors[i])
            if rng.random() < 0.35:
                nd.cons = [_constraint(rng, d, anchors[i], ("box", "nonneg", "ball", "sym_sum",
                                                            "sym_norm", "sym_lower"))
                           for _ in range(int(rng.integers(1, 3)))]
            nodes.append(nd)
    elif family == "illcond":
        d = int(rng.integers(2, 4))
        anchors = [_anchor(rng, d) for _ in range(n)]
        penalty = _penalty(rng, d, ALL_PENALTIES)
        for i in range(n):
            if rng.random() < 0.75:
                nd = _lib_node(rng, "squared", d, anchors[i],
                               cond=_loguniform(rng, 1e6, 1e10))
                nd.X = _conditioned(rng, int(rng.integers(d, d + 4)), d,
                                    _loguniform(rng, 1e6, 1e10)) * _loguniform(rng, 0.1, 10.0)
                nd.y = nd.X @ anchors[i] + rng.normal(scale=1e-3, size=nd.X.shape[0])
                nd.l1 = nd.l2 = 0.0
            else:
                nd = _lib_node(rng, str(rng.choice(("zero", "quadratic", "squared"))), d,
                               anchors[i])
            nodes.append(nd)
    elif family == "extreme_p":
        pext = (1.0001, 1.0009765625, 1.001, 1.01, 100.0, 333.0, 1000.0)
        penalty = ("normp", float(rng.choice(pext)))
        for i in range(n):
            nd = _lib_node(rng, str(rng.choice(LIB_LOSSES)), d, anchors[i])
            if rng.random() < 0.5:
                p = float(rng.choice(pext))
                nd.cons = [ConSpec("ball", r=float(pnorm(anchors[i], p) * rng.uniform(1.05, 2)),
                                   p=p)]
            nodes.append(nd)
    elif family == "symbolic":
        for i in range(n):
            if rng.random() < 0.7:
                nd = NodeSpec("sym", sym=_sym_loss(
                    rng, d, anchors[i], ("inv_pos", "pow_m1", "qol", "neglog", "negentr")))
            else:
                nd = _lib_node(rng, str(rng.choice(LIB_LOSSES)), d, anchors[i])
            if rng.random() < 0.25:
                nd.cons = [_constraint(rng, d, anchors[i], ("sym_sum", "sym_norm", "sym_lower",
                                                            "box"))]
            nodes.append(nd)
    elif family == "feas_scale":
        n = max(n, 2)
        anchors = [_anchor(rng, d) for _ in range(n)]
        edges = [(i, j, A) for i, j, A in _graph(rng, n) if i < n and j < n]
        big = _loguniform(rng, 1e3, 1e7)
        for i in range(n):
            if i == n - 1:
                nd = NodeSpec("quadratic", a=np.full(d, big) * rng.choice([-1.0, 1.0], size=d))
            else:
                nd = _lib_node(rng, str(rng.choice(("quadratic", "squared", "absolute"))), d,
                               anchors[i])
                nd.cons = [_constraint(rng, d, anchors[i], ("box", "nonneg", "ball",
                                                            "sym_lower", "sym_sum"))]
            nodes.append(nd)
        # the big node is isolated or weakly tied to the others
        edges = [(i, j, A) for i, j, A in edges if j != n - 1] + (
            [(0, n - 1, _loguniform(rng, 1e-6, 1e-3))] if rng.random() < 0.5 else [])
    elif family == "radius":
        d = int(rng.integers(2, 4))
        anchors = [_anchor(rng, d) for _ in range(n)]
        penalty = _penalty(rng, d, ("norm2", "norm1", "norminf", "sq"))
        big = _loguniform(rng, 1e3, 1e5)
        for i in range(n):
            r = rng.random()
            if r < 0.4:   # rank-deficient squared loss far from the origin (m < d)
                X = rng.normal(size=(int(rng.integers(1, d)), d))
                nd = NodeSpec("squared", X=X, y=X @ (anchors[i] * big))
            elif r < 0.7:
                nd = NodeSpec("zero")
            else:
                nd = NodeSpec("quadratic", a=anchors[i] * big)
            nodes.append(nd)
    else:  # pragma: no cover
        raise ValueError(family)
    return Instance(family, seed, n, d, edges, lam, penalty, nodes)


def _stiff_node(rng: np.random.Generator, d: int, anchor: np.ndarray) -> NodeSpec:
    """A smooth data node (squared, sometimes logistic) without regularizers whose samples have
    singular values log-spaced from 1 down to ``1e-3 ... 10^-6.5`` (Gram ratios ``1e-6 ...
    1e-13``), scaled by 0.1 ... 10; ``m_i`` from ``d - 1`` (rank-deficient *and*
    ill-conditioned) to ``d + 3``.  Squared labels carry noise, so ``X_i^T y_i`` has a part
    along the weak directions."""
    m = int(rng.integers(max(1, d - 1), d + 4))
    X = _conditioned(rng, m, d, 10.0 ** rng.uniform(3.0, 6.5)) * _loguniform(rng, 0.1, 10.0)
    if rng.random() < 0.2:
        return NodeSpec("logistic", X=X, y=_labels(rng, m))
    return NodeSpec("squared", X=X, y=X @ anchor + rng.normal(scale=1e-2, size=m))


def _stiff_instance(rng: np.random.Generator, seed: int) -> Instance:
    """Family ``"stiff"``: a connected graph (a path plus random chords) of 3-8 nodes,
    d = 2-5, one or two ill-conditioned nodes (:func:`_stiff_node`), the others well-conditioned
    squared losses (sometimes ``m_i < d``), quadratic or zero (no data)."""
    d, n = int(rng.integers(2, 6)), int(rng.integers(3, 9))
    anchors = [_anchor(rng, d) for _ in range(n)]
    pairs = {(i, i + 1) for i in range(n - 1)} | {
        (i, j) for i in range(n) for j in range(i + 2, n) if rng.random() < 0.3}
    edges = [(i, j, _loguniform(rng, 0.1, 10.0)) for i, j in sorted(pairs)]
    stiff = set(rng.choice(n, size=int(rng.integers(1, 3)), replace=False).tolist())
    nodes = []
    for i in range(n):
        if i in stiff:
            nodes.append(_stiff_node(rng, d, anchors[i]))
        elif rng.random() < 0.25:
            nodes.append(NodeSpec("zero"))
        elif rng.random() < 0.2:
            nodes.append(NodeSpec("quadratic", a=anchors[i] + rng.normal(size=d)))
        else:
            X = rng.normal(size=(int(rng.integers(1, d + 4)), d))
            nodes.append(NodeSpec("squared", X=X, y=X @ anchors[i]
                                  + rng.normal(scale=0.1, size=X.shape[0])))
    penalty = _penalty(rng, d, ("norm2", "norm1", "norminf", "sq"))
    return Instance("stiff", seed, n, d, edges, _loguniform(rng, 1e-3, 10.0), penalty, nodes)


def _zero_reg_instance(rng: np.random.Generator, seed: int) -> Instance:
    """Family ``"zero_reg"``: a connected graph (a path plus random chords) of 3-8 nodes, d =
    1-4, half or more of the nodes without data but with an ``l1`` weight ``eta`` (often) and
    an ``l2`` weight (sometimes), 1e-4 ... 10, so that ``h_i* `` is the box ``|s_j| <= eta``
    (``l1`` only: a demand outside it, below ``-eta`` as well as above ``eta``, must be
    charged), a smooth penalty of the excess (both) or ``||s||^2 / (4 l2)`` (``l2`` only);
    the others squared or quadratic losses whose anchors of both signs pull the regularized
    nodes' demands to either side of the box."""
    d, n = int(rng.integers(1, 5)), int(rng.integers(3, 9))
    scale = _loguniform(rng, 1e-2, 1e2)
    anchors = [scale * _anchor(rng, d) * rng.choice((-1.0, 1.0)) for _ in range(n)]
    pairs = {(i, i + 1) for i in range(n - 1)} | {
        (i, j) for i in range(n) for j in range(i + 2, n) if rng.random() < 0.3}
    edges = [(i, j, _loguniform(rng, 0.1, 10.0)) for i, j in sorted(pairs)]
    zero = set(rng.choice(n, size=int(rng.integers((n + 1) // 2, n)), replace=False).tolist())
    nodes = []
    for i in range(n):
        if i in zero:
            l1 = _loguniform(rng, 1e-4, 10.0) if rng.random() < 0.8 else 0.0
            l2 = _loguniform(rng, 1e-4, 10.0) if rng.random() < 0.3 or not l1 else 0.0
            nodes.append(NodeSpec("zero", l1=l1, l2=l2))
        elif rng.random() < 0.3:
            nodes.append(NodeSpec("quadratic", a=anchors[i]))
        else:
            X = rng.normal(size=(int(rng.integers(1, d + 4)), d))
            nodes.append(NodeSpec("squared", X=X, y=X @ anchors[i]
                                  + rng.normal(scale=0.1 * scale, size=X.shape[0])))
    penalty = _penalty(rng, d, ALL_PENALTIES)
    return Instance("zero_reg", seed, n, d, edges, _loguniform(rng, 1e-3, 10.0), penalty, nodes)


# --------------------------------------------------------------------------- numpy evaluation


def pnorm(v: Any, p: float) -> float:
    """``||v||_p`` in the scaled form ``max|v| (sum (|v|/max)^p)^(1/p)`` (no under/overflow)."""
    v = np.abs(np.asarray(v, dtype=float)).ravel()
    mx = float(v.max(initial=0.0))
    if mx == 0.0 or not np.isfinite(mx):
        return mx
    if np.isinf(p):
        return mx
    if p == 1.0:
        return math.fsum(v)
    return mx * math.fsum((v / mx) ** p) ** (1.0 / p)


def _sym_term_value(t: SymTerm, w: np.ndarray, dom_tol: float) -> float:
    """One symbolic term in numpy, ``+inf`` outside its domain.  Closed domains (``x >= 0`` of
    ``-entr``) accept violations up to ``dom_tol`` (evaluated at the clipped point)."""
    x = w[t.j]
    with np.errstate(over="ignore"):
        if t.atom in ("inv_pos", "pow_m1"):
            return t.c / x if x > 0 else math.inf
        if t.atom == "qol":
            return t.c * math.fsum(w * w) / w[0] if w[0] > 0 else math.inf
        if t.atom == "neglog":
            return -t.c * math.log(x) + t.g * x if x > 0 else math.inf
        if t.atom == "negentr":
            if x < -dom_tol:
                return math.inf
            x = max(x, 0.0)
            return t.c * x * math.log(x) if x > 0 else 0.0
        if t.atom == "exp":
            return float(t.c * np.exp(x)) - t.g * x
        if t.atom == "lse":
            mx = float(w.max())
            return t.c * (mx + math.log(math.fsum(np.exp(w - mx))))
        if t.atom == "pnorm":
            return t.c * pnorm(w - t.a, t.p)
        if t.atom == "sq":
            return t.c * math.fsum((w - t.a) ** 2)
    raise ValueError(t.atom)  # pragma: no cover


def node_loss_value(nd: NodeSpec, w: np.ndarray, dom_tol: float = 0.0) -> float:
    """``L_i(w_i)`` with regularizers, in numpy (``+inf`` outside a symbolic domain)."""
    if nd.loss == "sym":
        return math.fsum(_sym_term_value(t, w, dom_tol) for t in nd.sym) \
            if all(np.isfinite(_sym_term_value(t, w, dom_tol)) for t in nd.sym) else math.inf
    if nd.loss == "zero":
        base = 0.0
    elif nd.loss == "quadratic":
        base = math.fsum((w - nd.a) ** 2)
    else:
        X, y = nd.X, nd.y
        m = X.shape[0]
        t = np.array([math.fsum(X[r] * w) for r in range(m)])
        if nd.loss == "squared":
            terms = (y - t) ** 2
        elif nd.loss == "logistic":
            terms = np.logaddexp(0.0, -y * t)
        elif nd.loss == "hinge":
            terms = np.maximum(0.0, 1.0 - y * t)
        elif nd.loss == "absolute":
            terms = np.abs(y - t)
        elif nd.loss == "huber":
            r = np.abs(t - y)
            terms = np.where(r <= nd.M, r * r, 2 * nd.M * r - nd.M ** 2)
        elif nd.loss == "poisson":   # exp(t) - y t - (y - y log y), 0 log 0 = 0
            terms = np.exp(t) - y * t - (y - xlogy(y, y))
        else:  # pragma: no cover
            raise ValueError(nd.loss)
        base = math.fsum(terms) / m
    return base + nd.l1 * math.fsum(np.abs(w)) + nd.l2 * math.fsum(w * w)


def penalty_value(pen: tuple, v: np.ndarray) -> float:
    kind = pen[0]
    if kind == "norm2":
        return pnorm(v, 2.0)
    if kind == "norm1":
        return pnorm(v, 1.0)
    if kind == "norminf":
        return pnorm(v, np.inf)
    if kind == "normp":
        return pnorm(v, pen[1])
    if kind == "sq":
        return 0.5 * math.fsum(v * v)
    if kind == "quad":
        return 0.5 * math.fsum((np.outer(v, v) * pen[1]).ravel())
    raise ValueError(kind)  # pragma: no cover


def constraint_violation(c: ConSpec, w: np.ndarray) -> float:
    """A nonnegative violation of one constraint (0 inside), in numpy."""
    if c.kind == "box":
        return float(max(np.max(c.lo - w, initial=0.0), np.max(w - c.hi, initial=0.0), 0.0))
    if c.kind == "nonneg":
        return float(max(-w.min(), 0.0))
    if c.kind == "ball":
        return max(pnorm(w, c.p) - c.r, 0.0)
    if c.kind == "sym_sum":
        return max(math.fsum(w) - c.c, 0.0)
    if c.kind == "sym_norm":
        return max(pnorm(w - c.a, 2.0) - c.c, 0.0)
    if c.kind == "sym_lower":
        return max(c.c - w[c.j], 0.0)
    raise ValueError(c.kind)  # pragma: no cover


@dataclass
class Evaluation:
    value: float                 # P(W) without constraints (+inf outside symbolic domains)
    violation: np.ndarray        # (n,) max constraint violation / max(1, ||w_i||_inf)
    outside_domain: bool         # some symbolic loss is +inf at its node
    magnitude: float             # sum of |terms| (for rounding slack)


def true_objective(inst: Instance, W: np.ndarray) -> Evaluation:
    """``P(W)`` and per-node relative constraint violations, independently of gtvmodel."""
    W = np.asarray(W, dtype=float)
    terms: list[float] = []
    viol = np.zeros(inst.n)
    outside = False
    for i, nd in enumerate(inst.nodes):
        scale = max(1.0, float(np.abs(W[i]).max(initial=0.0)))
        val = node_loss_value(nd, W[i], dom_tol=FEAS_TOL * scale)
        if not np.isfinite(val):
            outside = True
        terms.append(val)
        if nd.cons:
            viol[i] = max(constraint_violation(c, W[i]) for c in nd.cons) / scale
    if inst.lam > 0:
        for i, j, A in inst.edges:
            terms.append(inst.lam * A * penalty_value(inst.penalty, W[i] - W[j]))
    if outside:
        return Evaluation(math.inf, viol, True, math.inf)
    return Evaluation(math.fsum(terms), viol, False, math.fsum(abs(t) for t in terms))


# --------------------------------------------------------------------------- reference


def _cvx_norm(v: cp.Expression, p: float) -> cp.Expression:
    """``||v||_p`` for the reference, with CVXPY's rational ``p'`` (denominator <= 1024; the
    numpy value of the reference point, evaluated with the true ``p``, absorbs the difference).
    CVXPY turns ``p`` within 1e-3 of 1 into ``p' = 1`` and then rejects its own atom as non-DCP;
    there the reference uses ``p' = 1``."""
    if np.isinf(p):
        return cp.norm(v, "inf")
    if p in (1.0, 2.0):
        return cp.norm(v, p)
    atom = cp.pnorm(v, p)
    if float(atom.p) == 1.0:
        return cp.norm(v, 1)
    return atom


def _cvx_ball(x: cp.Expression, p: float, r: float) -> cp.Constraint:
    """``||x||_p <= r`` as a subset (so the reference point is feasible): with CVXPY's
    ``p'`` > ``p`` the radius shrinks by ``d^(1/p' - 1/p)`` (``||x||_p <= d^(1/p - 1/p')
    ||x||_p'``); with ``p' <= p`` the ``p'`` ball is already inside."""
    if np.isinf(p) or p in (1.0, 2.0):
        return _cvx_norm(x, p) <= r
    atom = cp.pnorm(x, p)
    q = float(atom.p)
    if q == 1.0:
        return cp.norm(x, 1) <= r
    if q > p:
        r = r * float(x.size) ** (1.0 / q - 1.0 / p) * (1 - 1e-12)
    return atom <= r


def _cvx_sym(t: SymTerm, x: cp.Variable) -> cp.Expression:
    if t.atom == "inv_pos":
        return t.c * cp.inv_pos(x[t.j])
    if t.atom == "pow_m1":
        return t.c * cp.power(x[t.j], -1)
    if t.atom == "qol":
        return t.c * cp.quad_over_lin(x, x[0])
    if t.atom == "neglog":
        return -t.c * cp.log(x[t.j]) + t.g * x[t.j]
    if t.atom == "negentr":
        return -t.c * cp.entr(x[t.j])
    if t.atom == "exp":
        return t.c * cp.exp(x[t.j]) - t.g * x[t.j]
    if t.atom == "lse":
        return t.c * cp.log_sum_exp(x)
    if t.atom == "pnorm":
        return t.c * _cvx_norm(x - t.a, t.p)
    if t.atom == "sq":
        return t.c * cp.sum_squares(x - t.a)
    raise ValueError(t.atom)  # pragma: no cover


def _cvx_loss(nd: NodeSpec, x: cp.Variable) -> cp.Expression:
    if nd.loss == "sym":
        return cp.sum(cp.hstack([_cvx_sym(t, x) for t in nd.sym]))
    if nd.loss == "zero":
        base: cp.Expression = cp.Constant(0.0)
    elif nd.loss == "quadratic":
        base = cp.sum_squares(x - nd.a)
    else:
        m = nd.X.shape[0]
        t = nd.X @ x
        if nd.loss == "squared":
            base = cp.sum_squares(nd.y - t) / m
        elif nd.loss == "logistic":
            base = cp.sum(cp.logistic(-cp.multiply(nd.y, t))) / m
        elif nd.loss == "hinge":
            base = cp.sum(cp.pos(1 - cp.multiply(nd.y, t))) / m
        elif nd.loss == "absolute":
            base = cp.norm1(nd.y - t) / m
        elif nd.loss == "huber":
            base = cp.sum(cp.huber(t - nd.y, nd.M)) / m
        elif nd.loss == "poisson":
            base = cp.sum(cp.exp(t) - cp.multiply(nd.y, t) - (nd.y - xlogy(nd.y, nd.y))) / m
        else:  # pragma: no cover
            raise ValueError(nd.loss)
    if nd.l1:
        base = base + nd.l1 * cp.norm1(x)
    if nd.l2:
        base = base + nd.l2 * cp.sum_squares(x)
    return base


def _cvx_cons(c: ConSpec, x: cp.Variable) -> list[cp.Constraint]:
    if c.kind == "box":
        return ([x[j] >= c.lo[j] for j in range(x.size) if np.isfinite(c.lo[j])]
                + [x[j] <= c.hi[j] for j in range(x.size) if np.isfinite(c.hi[j])])
    if c.kind == "nonneg":
        return [x >= 0]
    if c.kind == "ball":
        return [_cvx_ball(x, c.p, c.r)]
    if c.kind == "sym_sum":
        return [cp.sum(x) <= c.c]
    if c.kind == "sym_norm":
        return [cp.norm(x - c.a, 2) <= c.c]
    if c.kind == "sym_lower":
        return [x[c.j] >= c.c]
    raise ValueError(c.kind)  # pragma: no cover


def _cvx_pen(pen: tuple, v: cp.Expression) -> cp.Expression:
    kind = pen[0]
    if kind == "norm2":
        return cp.norm(v, 2)
    if kind == "norm1":
        return cp.norm(v, 1)
    if kind == "norminf":
        return cp.norm(v, "inf")
    if kind == "normp":
        return _cvx_norm(v, pen[1])
    if kind == "sq":
        return 0.5 * cp.sum_squares(v)
    if kind == "quad":
        return 0.5 * cp.quad_form(v, pen[1])
    raise ValueError(kind)  # pragma: no cover


@dataclass
class Reference:
    ok: bool
    value: float = math.nan      # P*_ref
    err: float = math.inf        # honest uncertainty of P*_ref
    weights: np.ndarray | None = None
    reason: str = ""


def _ref_solve(inst: Instance, scale: float, opts: dict[str, float]
               ) -> tuple[str, float, np.ndarray | None]:
    xs = [cp.Variable(inst.d, name=f"ref{i}") for i in range(inst.n)]
    terms: list[cp.Expression] = []
    cons: list[cp.Constraint] = []
    for i, nd in enumerate(inst.nodes):
        if nd.loss != "zero" or nd.l1 or nd.l2:
            terms.append(_cvx_loss(nd, xs[i]))
        for c in nd.cons:
            cons += _cvx_cons(c, xs[i])
    if inst.lam > 0:
        for i, j, A in inst.edges:
            terms.append(inst.lam * A * _cvx_pen(inst.penalty, xs[i] - xs[j]))
    obj = cp.sum(cp.hstack(terms)) if terms else cp.Constant(0.0)
    prob = cp.Problem(cp.Minimize(obj / scale), cons)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prob.solve(solver="CLARABEL", **opts)
    except cp.error.SolverError as exc:
        return f"solver error {exc}", math.nan, None
    # a variable in no term and no constraint (an isolated zero-loss node) is left without a
    # value by CVXPY; every point is optimal for it
    W = np.array([x.value if x.value is not None else np.zeros(inst.d) for x in xs])
    W = W.reshape(inst.n, inst.d)
    val = float(prob.value) * scale if prob.value is not None else math.nan
    return str(prob.status), val, W


def reference(inst: Instance) -> Reference:
    """``P*`` of ``inst`` by the hand-written CVXPY problem and its error estimate.

    Two Clarabel solves at tolerances 1e-10 (1e-9, 1e-8 if Clarabel cannot reach them), of the
    objective as written and divided by ``max(1, |P1|)``, and the numpy value of the reference
    point: ``err`` covers the disagreement of the three plus
    ``1e-8 max(1, |P*|, sum of |terms|)``.  The numpy value of a feasible point is an upper
    bound of ``P*``, which also absorbs CVXPY's rational approximation of ``p``.
    """
    reason = ""
    for opts in CLARABEL_LEVELS:
        st1, p1, W1 = _ref_solve(inst, 1.0, opts)
        if st1 != "optimal" or not np.isfinite(p1):
            reason = f"reference status {st1}"
            continue
        st2, p2, _ = _ref_solve(inst, max(1.0, abs(p1)), opts)
        if st2 != "optimal" or not np.isfinite(p2):
            reason = f"rescaled reference status {st2}"
            continue
        break
    else:
        return Reference(False, reason=reason)
    ev = true_objective(inst, W1)
    if not np.isfinite(ev.value):
        return Reference(False, reason="reference point outside a symbolic domain")
    if ev.violation.max(initial=0.0) > REF_FEAS:
        return Reference(False, reason="reference point infeasible")
    # P*_ref + err >= P(W_ref) >= P*: the check gap >= P(W) - P*_ref - err is implied by
    # soundness whenever W_ref is feasible, however inaccurate the solver was.
    err = abs(p2 - p1) + abs(ev.value - p1) + 1e-8 * max(1.0, abs(p1), ev.magnitude)
    return Reference(True, p1, err, W1)


# --------------------------------------------------------------------------- the model under test


def build_model(inst: Instance) -> gm.GTVModel:
    """The gtvmodel model of ``inst`` (library objects and symbolic expressions on
    ``model.var(i)``, rebuilt from the raw data)."""
    G = nx.Graph()
    G.add_nodes_from(range(inst.n))
    for i, j, A in inst.edges:
        G.add_edge(i, j, weight=A)
    kind = inst.penalty[0]
    pen = {"norm2": gm.Norm2, "norm1": gm.Norm1, "norminf": gm.NormInf,
           "sq": gm.SquaredNorm2}.get(kind)
    penalty = pen() if pen else (gm.NormP(inst.penalty[1]) if kind == "normp"
                                 else gm.QuadForm(inst.penalty[1]))
    model = gm.GTVModel(G, dim=inst.d, penalty=penalty, lam=inst.lam)
    for i, nd in enumerate(inst.nodes):
        reg = {"l1": nd.l1, "l2": nd.l2}
        if nd.loss == "sym":
            model.set_loss(i, _cvx_loss(nd, model.var(i)))
        elif nd.loss == "zero":
            model.set_loss(i, gm.ZeroLoss(**reg))
        elif nd.loss == "quadratic":
            model.set_loss(i, gm.QuadraticLoss(nd.a, **reg))
        elif nd.loss == "huber":
            model.set_loss(i, gm.HuberLoss(nd.X, nd.y, nd.M, **reg))
        elif nd.loss == "poisson":
            model.set_loss(i, gm.PoissonLoss(nd.X, nd.y, **reg))
        else:
            cls = {"squared": gm.SquaredLoss, "logistic": gm.LogisticLoss,
                   "hinge": gm.HingeLoss, "absolute": gm.AbsoluteLoss}[nd.loss]
            model.set_loss(i, cls(nd.X, nd.y, **reg))
        for c in nd.cons:
            if c.kind == "box":
                model.add_constraint(i, gm.Box(c.lo, c.hi))
            elif c.kind == "nonneg":
                model.add_constraint(i, gm.NonNeg())
            elif c.kind == "ball":
                model.add_constraint(i, gm.NormBall(c.r, c.p))
            else:
                for con in _cvx_cons(c, model.var(i)):
                    model.add_constraint(i, con)
    return model


# --------------------------------------------------------------------------- candidates


@dataclass
class Candidate:
    name: str
    weights: np.ndarray
    flows: np.ndarray | None


def _push_outside(inst: Instance, W: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
    """``W`` with one node moved clearly outside a constraint or a symbolic domain."""
    opts: list[tuple[int, Any]] = [(i, c) for i, nd in enumerate(inst.nodes) for c in nd.cons]
    opts += [(i, t) for i, nd in enumerate(inst.nodes) if nd.loss == "sym" for t in nd.sym
             if t.atom in ("inv_pos", "pow_m1", "qol", "neglog", "negentr")]
    if not opts:
        return None
    i, obj = opts[int(rng.integers(len(opts)))]
    W = W.copy()
    amount = float(rng.choice([1e-6, 1e-3, 0.1, 0.9, 10.0]))
    w = W[i]
    if isinstance(obj, SymTerm):
        j = 0 if obj.atom == "qol" else obj.j
        w[j] = -amount
    elif obj.kind == "box":
        j = int(rng.integers(inst.d))
        if np.isfinite(obj.hi[j]):
            w[j] = obj.hi[j] + amount * max(1.0, abs(obj.hi[j]))
        elif np.isfinite(obj.lo[j]):
            w[j] = obj.lo[j] - amount * max(1.0, abs(obj.lo[j]))
        else:
            return None
    elif obj.kind == "nonneg":
        w[int(rng.integers(inst.d))] = -amount
    elif obj.kind == "ball":
        nrm = pnorm(w, obj.p)
        w[:] = (w / nrm if nrm > 0 else np.ones(inst.d) / pnorm(np.ones(inst.d), obj.p)) \
            * obj.r * (1 + amount)
    elif obj.kind == "sym_sum":
        w[:] += (obj.c - math.fsum(w) + amount * max(1.0, abs(obj.c))) / inst.d + 1e-12
    elif obj.kind == "sym_norm":
        v = w - obj.a
        nv = pnorm(v, 2.0)
        v = v / nv if nv > 0 else np.ones(inst.d) / math.sqrt(inst.d)
        w[:] = obj.a + v * obj.c * (1 + amount)
    elif obj.kind == "sym_lower":
        w[obj.j] = obj.c - amount * max(1.0, abs(obj.c))
    return W


def candidates(inst: Instance, model: gm.GTVModel, rng: np.random.Generator,
               exact: Any, pd_iters: tuple[int, ...] = (1, 5, 30),
               stats: dict[str, int] | None = None) -> list[Candidate]:
    """Candidate ``(W, U)`` pairs: exact, exact without flows, perturbed, shrunk, garbage,
    infeasible, early iterates of Algorithm 1 and adversarial flows."""
    n, d, m = inst.n, inst.d, model.num_edges
    out: list[Candidate] = []
    if exact is not None:
        W0, U0 = np.asarray(exact.weights, float), np.asarray(exact.flows, float).reshape(m, d)
        out.append(Candidate("exact", W0, U0))
        out.append(Candidate("exact_noflows", W0, None))
        for eps in (10.0 ** rng.uniform(-8, -1), 10.0 ** rng.uniform(-8, -1)):
            Wp = W0 * (1 + eps * rng.normal(size=W0.shape)) + eps * rng.normal(size=W0.shape)
            Up = U0 * (1 + eps * rng.normal(size=U0.shape)) + eps * rng.normal(size=U0.shape)
            out.append(Candidate(f"perturbed{eps:.0e}", Wp, Up if rng.random() < 0.7 else None))
        t = float(rng.choice([1e-3, 0.05, 0.5]))
        # shrunk weights keep the default radius of residual charges (10 max(1, ||W||_inf)) far
        # below ||W*||; flows with tiny relative noise leave residuals under feas_tol (charged)
        tiny = 10.0 ** rng.uniform(-10, -7)
        out.append(Candidate(f"shrunk{t:g}", W0 * t, U0 * (1 + tiny * rng.normal(size=U0.shape))))
        if m:
            out.append(Candidate("zero_flows", W0, np.zeros((m, d))))
            out.append(Candidate("huge_flows", W0, U0 + 1e8 * rng.normal(size=(m, d))))
            out.append(Candidate("random_flows", W0, rng.normal(size=(m, d))
                                 * _loguniform(rng, 1e-3, 1e3)))
        Wi = _push_outside(inst, W0, rng)
        if Wi is not None:
            out.append(Candidate("infeasible", Wi, U0 if rng.random() < 0.5 else None))
    G = rng.normal(size=(n, d)) * _loguniform(rng, 1e-2, 1e2)
    out.append(Candidate("garbage", G, rng.normal(size=(m, d)) if rng.random() < 0.5 else None))
    for k in pd_iters:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = model.solve_primal_dual(max_iter=k, tol=0.0, record_every=None)
            out.append(Candidate(f"pd{k}", np.asarray(res.weights, float),
                                 np.asarray(res.flows, float).reshape(m, d)))
        except GTVError:
            if stats is not None:
                stats["pd_gtv_error"] = stats.get("pd_gtv_error", 0) + 1
    return out


# --------------------------------------------------------------------------- the property


def check_certificate(inst: Instance, ref: Reference, cand: Candidate, cert: Any,
                      obj_value: float | None, detail: dict[str, str] | None = None
                      ) -> list[str]:
    """Failure classes of one certificate (empty: sound).  ``obj_value`` is
    ``model.objective(W)`` (or None if it raised a GTVError); ``detail`` receives the numbers
    behind each failure."""
    fails: list[str] = []
    detail = {} if detail is None else detail
    ev = true_objective(inst, cand.weights)
    gap = float(cert.gap)
    if math.isnan(gap) or math.isnan(float(cert.primal_value)) \
            or math.isnan(float(cert.relative_gap)):
        fails.append("nan")
    certifies = bool(cert.success)
    if certifies and not math.isfinite(gap):
        fails.append("certifies_unsound")
    infeasible = bool(ev.violation.max(initial=0.0) > FEAS_GUARD * FEAS_TOL)
    # objective must never under-report P(W) (constraints are not part of model.objective)
    if obj_value is not None:
        if ev.outside_domain:
            if not (math.isinf(obj_value) and obj_value > 0):
                fails.append("objective_domain")
        elif math.isnan(obj_value) or obj_value < ev.value - 1e-9 * max(1.0, ev.magnitude):
            fails.append("objective_under")
            detail["objective_under"] = f"objective={obj_value!r} true P(W)={ev.value!r}"
    if ev.outside_domain:
        if not (math.isinf(gap) and gap > 0):
            fails.append("symbolic_domain")
            detail["symbolic_domain"] = f"gap={gap!r} at W outside a symbolic loss domain"
        return fails
    if infeasible:
        if not (math.isinf(gap) and gap > 0):
            fails.append("feasibility")
            detail["feasibility"] = (f"gap={gap!r} with relative violation "
                                     f"{ev.violation.max():.3g} at node "
                                     f"{int(ev.violation.argmax())}")
        elif cert.feasible:
            fails.append("feasibility_flag")
        return fails
    dual = float(cert.dual_value)
    slack = float(cert.tolerance) if OLD else 0.0
    if dual - slack > ref.value + ref.err:
        # weak duality: no dual value may exceed P* (an achieved primal value bounds P*)
        fails.append("dual_above_primal")
        detail["dual_above_primal"] = (f"dual_value={dual!r} tolerance={slack!r} > "
                                       f"P*_ref={ref.value!r} (err_ref={ref.err:.2g})")
    if not np.isfinite(gap):
        return fails
    bound = gap + slack
    need = ev.value - ref.value - ref.err - 1e-12 * ev.magnitude
    if bound < need:
        fails.append("unsound")
        detail["unsound"] = (f"gap={gap!r} tolerance={float(cert.tolerance)!r} < P(W)-P*="
                             f"{ev.value - ref.value!r} (err_ref={ref.err:.2g})")
        if certifies:
            fails.append("certifies_unsound")
    return fails


def classify(inst: Instance, fails: list[str]) -> list[str]:
    """Map failures to the audit's classes (for the counting table)."""
    out = []
    for f in fails:
        if f in ("unsound", "certifies_unsound"):
            # unsound gaps are labelled by the family they came from (the family targets one
            # audit class; the mechanism may differ)
            cls = {"illcond": "1 unsound gap: illcond family",
                   "extreme_p": "2 unsound gap: extreme_p family",
                   "symbolic": "3 unsound gap: symbolic family",
                   "feas_scale": "4 unsound gap: feas_scale family",
                   "radius": "5 unsound gap: radius family"}.get(
                       inst.family, f"unsound gap: {inst.family} family")
            out.append(cls if f == "unsound" else "certifies() on unsound")
        elif f == "symbolic_domain":
            out.append("3 finite gap outside a symbolic domain")
        elif f == "objective_domain":
            out.append("3 objective finite outside a symbolic domain")
        elif f == "feasibility":
            out.append("4 finite gap at an infeasible node")
        elif f == "feasibility_flag":
            out.append("4 infeasible node reported feasible")
        elif f == "dual_above_primal":
            out.append("5 dual value > P* (weak duality)")
        elif f == "objective_under":
            out.append("2 objective under-reported")  # seen at extreme p
        else:
            out.append(f)
    return out


# --------------------------------------------------------------------------- one instance


@dataclass
class Outcome:
    """What one instance produced: certificates checked, failures by class, examples."""

    checked: int = 0
    skipped: str = ""
    failures: list[tuple[str, str]] = field(default_factory=list)   # (class, candidate)
    exact_gaps: list[float] = field(default_factory=list)           # relative gap of exact
    gtv_errors: int = 0
    messages: dict[str, str] = field(default_factory=dict)          # class -> first message

    def fail(self, cls: str, cand: str, exc: BaseException | None = None) -> None:
        self.failures.append((cls, cand))
        if exc is not None:
            self.messages.setdefault(cls, f"{cand}: {exc}"[:300])


def is_soundness_failure(cls: str) -> bool:
    """A failure class about soundness (an unsound gap, NaN, a missed infinite gap, a foreign
    exception), not about tightness of exact solutions ("8", "8n", "8e") or objectives."""
    return not cls.startswith(("8 ", "8n ", "8e ")) and "objective" not in cls


#: Gram matrices with ``e_min/e_max`` below this are numerically singular in double precision.
SINGULAR_RATIO = 1e-14


def numerically_singular(inst: Instance) -> bool:
    """True if some unregularized data node has a numerically singular Gram matrix with full
    column rank in exact arithmetic (``m_i >= d``), the case where tight certificates are out
    of reach of double precision (the minimizer along the near-null direction is not
    resolved)."""
    for nd in inst.nodes:
        if nd.X is None or nd.l2 > 0 or nd.X.shape[0] < nd.X.shape[1]:
            continue
        e = np.linalg.eigvalsh(nd.X.T @ nd.X)
        if e[0] < SINGULAR_RATIO * e[-1]:
            return True
    return False


def run_instance(inst: Instance, seed: int = 0, pd_iters: tuple[int, ...] = (1, 5, 30),
                 exact_rtol: float = 1e-6) -> Outcome:
    """Build, solve (reference and ``solve_exact``), certify every candidate, check."""
    out = Outcome()
    ref = reference(inst)
    if not ref.ok:
        out.skipped = ref.reason
        return out
    rng = np.random.default_rng([seed, 7])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = build_model(inst)
        except GTVError as exc:
            out.skipped = f"model rejected: {exc}"
            return out
        exact = None
        try:
            exact = model.solve_exact()
        except SolverError as exc:  # honest: the status is named, no wrong answer
            out.gtv_errors += 1
            out.fail("8e exact solve failed (SolverError)", "exact", exc)
        except GTVError as exc:
            out.gtv_errors += 1
            out.fail("8 exact solve GTVError", "exact", exc)
        except Exception as exc:  # noqa: BLE001 - any other exception is a bug
            out.fail(f"exception {type(exc).__name__}", "solve_exact", exc)
        stats: dict[str, int] = {}
        try:
            cands = candidates(inst, model, rng, exact, pd_iters, stats)
        except Exception as exc:  # noqa: BLE001
            out.fail(f"exception {type(exc).__name__}", "solve_primal_dual", exc)
            cands = candidates(inst, model, rng, exact, (), stats)
        out.gtv_errors += stats.get("pd_gtv_error", 0)
        for cand in cands:
            try:
                cert = model.certify(cand.weights, cand.flows)
            except GTVError:
                out.gtv_errors += 1
                continue
            except Exception as exc:  # noqa: BLE001 - any other exception is a bug
                out.fail(f"exception {type(exc).__name__}", cand.name, exc)
                continue
            try:
                obj = float(model.objective(cand.weights))
            except GTVError:
                obj = None
            except Exception as exc:  # noqa: BLE001
                out.fail(f"objective exception {type(exc).__name__}", cand.name, exc)
                obj = None
            out.checked += 1
            detail: dict[str, str] = {}
            try:
                raw = check_certificate(inst, ref, cand, cert, obj, detail)
            except Exception as exc:  # noqa: BLE001 - e.g. a Certificate field went missing
                out.fail(f"exception {type(exc).__name__} reading the certificate", cand.name,
                         exc)
                continue
            for f, cls in zip(raw, classify(inst, raw), strict=True):
                out.failures.append((cls, cand.name))
                if f in detail:
                    out.messages.setdefault(cls, f"{cand.name}: {detail[f]}")
            if cand.name == "exact":
                out.exact_gaps.append(float(cert.relative_gap))
                if not float(cert.relative_gap) <= exact_rtol:
                    # a numerically singular Gram matrix (e_min/e_max below double precision's
                    # resolution) leaves a residual no radius can charge below ~rho^2/e_min:
                    # sound but not tight (docs/certificates.md, "Limits"); kept apart
                    cls = ("8 exact not certified" if not numerically_singular(inst) else
                           "8n exact not tight (numerically singular data)")
                    out.fail(cls, cand.name)
                    out.messages.setdefault(
                        cls, f"relative_gap={float(cert.relative_gap)!r} "
                             f"(P*_ref={ref.value!r}, err_ref={ref.err:.2g})")
    return out
