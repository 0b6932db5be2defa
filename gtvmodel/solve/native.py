"""The primal problem (16) handed to Clarabel directly, without CVXPY, where its conic form is
known in closed form: the first (aimed) run of :func:`solve_exact`'s Clarabel route
(:mod:`gtvmodel.solve.conic_route`).

Scope (:func:`native_reason`): library losses whose CVXPY form is a quadratic -- squared
losses ``(1/m_i) ||y_i - X_i w_i||^2``, ``QuadraticLoss`` ``||w_i - a_i||^2``, zero losses --
with ``l2`` regularizers ``kappa_i ||w_i||^2`` (no ``l1``), no node constraints, no symbolic
terms, and the penalty ``Norm2`` or ``Norm1`` on at least one edge.  Clarabel solves

    minimize  1/2 x^T P x + q^T x   s.t.  A x + s = b,  s in K

with ``x = (r, t, vec(W))``, in the layout of the data CVXPY's canonicalization of the
compiled problem (:func:`gtvmodel.duality.compile.compile_primal`, forms ``"soc"`` and
``"box"``) hands it:

* the squared losses through residuals ``r`` (zero-cone rows) and ``1/2 r^T diag(2) r =
  ||r||^2``: ``r = sqrt(c) (X_blk vec(W) - y)`` where a node has at most ``d`` rows, and
  otherwise the ``d`` rows ``R_i w_i - Q_i^T sqrt(c) y_i`` of the QR factorization ``sqrt(c)
  X_i = Q_i R_i``, equal up to a constant (:func:`_residual_rows`: 1,500 residual rows to 600
  on the 300-node SBMs of ``benchmarks/bench_exact_routes.py``, the same iterations, Clarabel
  7-11 % faster; arrays equal to CVXPY's where nothing is compressed); the other quadratic
  terms by their constant Hessians and gradients at 0 (``P_W = blkdiag(hess L_i + 2 kappa_i
  I)``, ``q_W = grad L(0)``; the constants are left out: the objective is evaluated in
  numpy);
* ``Norm2``: one second-order cone ``(t_e, (D W)_e)`` per edge, cost ``lambda A_e t_e``;
  ``Norm1``: ``-T <= D W <= T`` (nonnegative cone), cost ``lambda A_e 1^T T_e``.

The flows (docs/conventions.md's sign) are read from the duals ``z`` of the edge rows
(Clarabel's KKT conditions ``P x + q + A^T z = 0``, ``z in K*``): ``Norm2``: the cone rows of
edge ``e`` are ``s = (t_e, (D W)_e)`` with dual ``(mu_e, nu_e)``, so ``grad L(W) = D^T nu``,
``mu_e = lambda A_e >= ||nu_e||`` and ``U = -nu``; ``Norm1``: the rows ``T - D W >= 0`` and
``T + D W >= 0`` with duals ``a, b >= 0``, ``grad L(W) = -D^T (a - b)``, ``a + b = lambda
A_e``, so ``U = a - b`` -- the optimality conditions (23)/(27).  Nothing here is trusted:
the route certifies the answer (34) like any solver's.

Measured on the 300-node SBM of ``benchmarks/bench_exact_routes.py`` (2 shared cores): CVXPY's
build and canonicalization of the hand-written problem took 17.5 ms of its 67.7 ms solve
(load 4.6, median of 9), ``native_data`` 2.2-6.4 ms (load 7, most of it the model's
structure, which the certificate needs anyway), 1.2-1.9 ms once built in its layout directly
(load 5); Clarabel runs the same 8 iterations on either (``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

import clarabel
import numpy as np
import scipy.sparse as sp

from ..declaration import ModelDeclaration
from ..terms.penalties import Norm1, Norm2

__all__ = ["native_reason", "native_form", "NativeAnswer", "solve_native", "native_data",
           "DIRECT_REFINEMENT"]


def native_reason(model: ModelDeclaration) -> str | None:
    """Why Clarabel cannot be given (16) directly (module docstring's scope); None if it
    can."""
    if not model.num_edges:
        return "no edges"
    if type(model.penalty) not in (Norm2, Norm1):
        return f"the penalty {model.penalty!r} (Norm2 and Norm1 only)"
    st = model.structure()
    if st.symbolic or st.constrained.size:
        return "symbolic terms or node constraints"
    if st.l1.any():
        return "l1 regularizers"
    for b in st.batches:  # quadratics: squared rows, or constant Hessians (LossFacts.quadratic)
        if not all(ls.facts.quadratic for ls in b.losses):
            return f"{b.cls.__name__} is not a quadratic"
    return None


def native_form(model: ModelDeclaration) -> str:
    """``"soc"`` (``Norm2``) or ``"box"`` (``Norm1``): the edge rows of :func:`native_data`,
    named as the CVXPY forms of :func:`gtvmodel.duality.compile.edge_form`."""
    return "soc" if type(model.penalty) is Norm2 else "box"


#: Clarabel's iterative refinement of each KKT solve in the direct run (its defaults:
#: ``reltol`` 1e-13, ``abstol`` 1e-12): first loosened to ``reltol`` 1e-8, ``abstol`` 1e-10,
#: now off (below).  The refinement's extra triangular solves are a large
#: share of an iteration where the factorization has little fill (on the 100 x 100 grid of
#: ``benchmarks/bench_exact_routes.py``, qdldl: 0.58 s of the 2.20 s iterations, the
#: factorizations 1.35 s, load 1.4; with faer, Clarabel's choice for the ``Norm2`` arrays, in
#: two interleaved pairs at load 4.4 the KKT solves took 0.92 -> 0.43 s and 1.11 -> 0.70 s with
#: this setting, the whole Clarabel run 4.04 -> 2.88 s and 4.53 -> 4.13 s, the same 24
#: iterations).  Measured (Clarabel alone, gap 1e-10, interleaved runs, load 4.3-5.7 on 2
#: cores; ratio = the median of the per-run ratios of Clarabel's time, 3 runs each unless
#: said): with qdldl, ``Norm2`` grids 50 x 50 0.80x, 70 x 70 0.83x, 100 x 100 0.82x and 0.84x
#: (two data seeds), ``Norm1`` 70 x 70 0.90x; with the route's linear solvers (faer for
#: ``Norm2``, qdldl for ``Norm1``, :data:`~gtvmodel.solve.conic_route.CLARABEL_METHOD`) a
#: 5,000-node path 0.75x and random tree 0.95x (``Norm2``), connected Watts-Strogatz graphs
#: (mean degree 4) 0.75x (5,000 nodes, ``Norm2``) and 0.91x (3,000 nodes, ``Norm1``, 5 runs),
#: the 2-block SBMs (mean degree about 10, 11 runs) at 300 nodes 0.90x and 0.90x (``Norm1``,
#: two seeds) and 0.96x (``Norm2``), at 600 nodes 0.92x (``Norm1``): each with the same
#: iterations and certified relative gaps
#: within 1.5x (e.g. 2.9e-11 against 2.5e-11 on the grid; equal to two digits on the SBMs).
#: On 24 badly scaled small-world models (mean degree 4; rows scaled by 1e-3..1e3, edge
#: weights by 1e-6..1e6 or 1e-2..1e2) Clarabel's answer missed 1e-10 at the default setting
#: on all 24 and at this one on 23 (6 stopped "AlmostSolved", against 1): the route's full
#: run, with Clarabel's defaults, answers those.
#: Then (2026-11-28, issue 28 item 3) the refinement turned off: Clarabel alone on the direct
#: arrays, CPU seconds, interleaved, load 1.6-2.7: the 300-node SBMs 0.90x (``Norm1``, 50.1 ->
#: 44.9 ms, medians of 15) and 0.90x (``Norm2``, 38.5 -> 34.7 ms), the 50 x 50 grid
#: (``Norm2``) 0.27 -> 0.23 s, 30 x 30 (``Norm1``) 0.07 -> 0.05 s, 100 x 100 2.14 -> 1.96 s:
#: the same iterations (14 against 15 on the 30 x 30 grid), objectives within 3e-15 and
#: certified relative gaps equal to two digits (2.8e-11 against 3.0e-11 on the 100 x 100
#: grid).  On 12 badly scaled small-world models (200 nodes, mean degree 4, rows scaled by
#: 10^U(-3, 3), edge weights 10^U(-2, 2) or 10^U(-6, 6)) neither setting's answer was
#: certified to 1e-10 (AlmostSolved 3 and 5 times; 0.48 s and 0.54 s of Clarabel in all):
#: the route's full run answers those.
DIRECT_REFINEMENT: dict[str, Any] = {"iterative_refinement_enable": False}


@dataclass
class _Data:
    """Clarabel's arrays of (16) (module docstring) and where the flows' duals sit:
    ``edge_rows`` the first row of the edge constraints, ``form`` ``"soc"`` or ``"box"``,
    ``w_col`` the first column of ``vec(W)``."""

    P: sp.csc_matrix
    q: np.ndarray
    A: sp.csc_matrix
    b: np.ndarray
    cones: list[Any]
    edge_rows: int
    form: str
    w_col: int


def native_data(model: ModelDeclaration) -> _Data:
    """The arrays ``(P, q, A, b, K)`` of (16) for Clarabel (module docstring); the model must
    pass :func:`native_reason`.  Built in CVXPY's layout directly (each index mapped to its
    place once, no permutation of the assembled matrices)."""
    st = model.structure()
    n, d, m = model.num_nodes, model.dim, model.num_edges
    nd = n * d
    zero = np.zeros((n, d))
    hess = np.zeros((n, d, d))
    grad = np.zeros((n, d))
    rows_of = [b.squared_rows() for b in st.batches]
    for batch, r in zip(st.batches, rows_of, strict=True):
        if r is None:
            hess[batch.nodes] += cast(np.ndarray, batch.hessians(zero))  # constant: quadratics
            grad += batch.gradients(zero)
    hess[:, np.arange(d), np.arange(d)] += 2.0 * st.l2[:, None]
    node, F, t = _residual_rows([r for r in rows_of if r is not None], n, d)
    form = native_form(model)
    n_edge = m if form == "soc" else m * d
    rows_r = t.size
    nv = nd + n_edge + rows_r
    # CVXPY's layout: the columns r, t or T, W (T and W by columns); the rows r, then the
    # edge rows (those of T by columns)
    col_w = rows_r + n_edge + _fortran_position(n, d)  # the column of vec(W)[k]
    col_t = rows_r + (_fortran_position(m, d) if form == "box" else np.arange(m))
    # P: the node blocks (upper triangles in the new order) and the residuals' diag(2)
    idx = np.arange(nd).reshape(n, d)
    pr = col_w[np.repeat(idx, d, axis=1).ravel()]
    pc = col_w[np.tile(idx, (1, d)).ravel()]
    keep = (pr <= pc) & (hess.ravel() != 0.0)
    rr = np.arange(rows_r)
    P = sp.csc_matrix((np.concatenate([hess.ravel()[keep], np.full(rows_r, 2.0)]),
                       (np.concatenate([pr[keep], rr]), np.concatenate([pc[keep], rr]))),
                      shape=(nv, nv))
    q = np.zeros(nv)
    q[col_w] = grad.ravel()
    q[col_t] = model.capacities if form == "soc" else np.repeat(model.capacities, d)
    # zero-cone rows: F_r w_node(r) - r_r = t_r
    cones: list[Any] = [clarabel.ZeroConeT(rows_r)] if rows_r else []
    fr, fj = np.nonzero(F)
    e_rows, e_cols, e_vals, edge_cones = _edge_rows(form, st.edges, d, nd)
    if form == "box":  # the rows of T by columns, in each half
        e_rows = (e_rows // (m * d)) * (m * d) + _fortran_position(m, d)[e_rows % (m * d)]
    e_cols = np.concatenate([col_w, col_t])[e_cols]
    A = sp.csc_matrix(
        (np.concatenate([F[fr, fj], -np.ones(rows_r), e_vals]),
         (np.concatenate([fr, rr, rows_r + e_rows]),
          np.concatenate([col_w[node[fr] * d + fj], rr, e_cols]))),
        shape=(rows_r + (m * (d + 1) if form == "soc" else 2 * m * d), nv))
    b = np.zeros(A.shape[0])
    b[:rows_r] = t
    cones.extend(edge_cones)
    return _Data(P, q, A, b, cones, rows_r, form, rows_r + n_edge)


def _residual_rows(squared: list[tuple[sp.csr_matrix, np.ndarray, np.ndarray]], n: int,
                   d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The squared rows ``sum_r c_r (x_r^T w_i - y_r)^2`` of the batches (``(X_blk, y, c)``,
    :meth:`LossBatch.squared_rows`) as ``(node, F, t)``: rows ``||F_r w_node(r) - t_r||^2``
    equal to them up to a constant (``F`` ``(k, d)``, scaled by ``sqrt(c_r)``), node by node.
    A node with more than ``d`` rows is compressed to ``d`` by a QR factorization ``sqrt(c)
    X_i = Q_i R_i`` (``F = R_i``, ``t = Q_i^T sqrt(c) y_i``: ``||sqrt(c) (X_i w - y_i)||^2 =
    ||R_i w - t_i||^2 + const``), one batched factorization per row count.  Measured on the
    300-node SBMs of ``benchmarks/bench_exact_routes.py`` (m_i = 5, d = 2; 1,500 residual
    rows to 600): Clarabel 151 -> 141 ms (``Norm1``) and 121 -> 107 ms (``Norm2``), the same
    8 iterations, weights within 1e-11 (medians of 7, load 4.8).  Rows without coefficients
    are constants and left out."""
    if not squared:
        return np.zeros(0, dtype=np.int64), np.zeros((0, d)), np.zeros(0)
    nodes, feats, rhs = [], [], []
    for X_blk, y, c in squared:
        X = X_blk.tocoo()
        root = np.sqrt(c)
        row_node = np.full(y.size, -1, dtype=np.int64)
        row_node[X.row] = X.col // d  # the rows of one node's loss touch its columns only
        Fb = np.zeros((y.size, d))
        np.add.at(Fb, (X.row, X.col % d), X.data * root[X.row])
        live = row_node >= 0
        nodes.append(row_node[live])
        feats.append(Fb[live])
        rhs.append((y * root)[live])
    node, F, t = np.concatenate(nodes), np.concatenate(feats), np.concatenate(rhs)
    order = np.argsort(node, kind="stable")
    node, F, t = node[order], F[order], t[order]
    count = np.bincount(node, minlength=n)
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    out = [(node[np.repeat(count <= d, count)], F[np.repeat(count <= d, count)],
            t[np.repeat(count <= d, count)])]
    for k in np.unique(count[count > d]):  # one batched QR per row count
        who = np.flatnonzero(count == k)
        at = start[who][:, None] + np.arange(k)
        Q, R = np.linalg.qr(F[at])  # (g, k, d), (g, d, d)
        out.append((np.repeat(who, d), R.reshape(-1, d),
                    np.einsum("gkd,gk->gd", Q, t[at]).ravel()))
    return (np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out]),
            np.concatenate([o[2] for o in out]))


def _fortran_position(k: int, d: int) -> np.ndarray:
    """The position in Fortran order of each entry of a C-ordered ``(k, d)`` array (entry
    ``i d + j`` at ``j k + i``)."""
    return (np.arange(k)[:, None] + np.arange(d)[None, :] * k).ravel()


def _edge_rows(form: str, edges: np.ndarray, d: int, nd: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Any]]:
    """The entries ``(rows, cols, vals)`` of ``A``'s edge rows (``b = 0``; module docstring)
    and their cones, the columns of ``vec(W)`` numbered ``0 .. nd - 1``, then those of ``t``
    (``"soc"``) or ``vec(T)`` (``"box"``); ``(D (x) I_d) vec(W)`` from the edges directly
    (``D``: +1 at ``e+``, -1 at ``e-``)."""
    m = edges.shape[0]
    k = np.arange(m * d)  # the entry (e, j) of D W, e d + j
    j = k % d
    cols = np.concatenate([edges[:, 0].repeat(d) * d + j, edges[:, 1].repeat(d) * d + j])
    vals = np.concatenate([np.ones(m * d), -np.ones(m * d)])
    if form == "soc":  # rows e (d + 1): -t_e, then -(D W)_e
        e = np.arange(m)
        return (np.concatenate([e * (d + 1), np.tile((k // d) * (d + 1) + 1 + j, 2)]),
                np.concatenate([nd + e, cols]), np.concatenate([-np.ones(m), -vals]),
                [clarabel.SecondOrderConeT(d + 1)] * m)
    # rows D W - T <= 0, then -D W - T <= 0
    return (np.concatenate([np.tile(k, 2), k, m * d + np.tile(k, 2), m * d + k]),
            np.concatenate([cols, nd + k, cols, nd + k]),
            np.concatenate([vals, -np.ones(m * d), -vals, -np.ones(m * d)]),
            [clarabel.NonnegativeConeT(2 * m * d)])


@dataclass
class NativeAnswer:
    """One direct Clarabel run: ``W`` (``(n, d)``), flows ``U`` (``(|E|, d)``), Clarabel's
    ``status`` (``"Solved"`` on success), ``iterations``, ``solve_time`` (Clarabel's own
    seconds), ``setup_time`` (Clarabel's setup and reading the answer) and ``build_time``
    (the arrays)."""

    W: np.ndarray
    U: np.ndarray
    status: str
    iterations: int
    solve_time: float
    setup_time: float
    build_time: float = 0.0


def solve_native(model: ModelDeclaration, options: dict[str, Any],
                 verbose: bool = False) -> NativeAnswer:
    """Solve (16) by Clarabel with ``options`` (its settings) on :func:`native_data`; the
    weights and flows as read from the solution (module docstring), unchecked."""
    t0 = time.perf_counter()
    data = native_data(model)
    t_built = time.perf_counter()
    settings = clarabel.DefaultSettings()
    settings.verbose = verbose
    for key, value in options.items():
        setattr(settings, key, value)
    solver = clarabel.DefaultSolver(data.P, data.q, data.A, data.b, data.cones, settings)
    t1 = time.perf_counter()
    sol = solver.solve()
    wall = time.perf_counter() - t1
    n, d, m = model.num_nodes, model.dim, model.num_edges
    x, z = np.asarray(sol.x, dtype=float), np.asarray(sol.z, dtype=float)
    W = x[data.w_col:data.w_col + n * d].reshape(d, n).T.copy()
    z = z[data.edge_rows:]
    if data.form == "soc":
        U = -z.reshape(m, d + 1)[:, 1:]
    else:
        U = (z[:m * d] - z[m * d:]).reshape(d, m).T
    solve_time = float(sol.solve_time)
    return NativeAnswer(W, np.ascontiguousarray(U), str(sol.status), int(sol.iterations),
                        solve_time, (t1 - t_built) + max(wall - solve_time, 0.0),
                        t_built - t0)
