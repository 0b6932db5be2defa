"""The primal problem (16) handed to Clarabel directly, without CVXPY, where its conic form is
known in closed form: the first (aimed) run of :func:`solve_exact`'s Clarabel route
(:mod:`gtvmodel.solve.conic_route`).

Scope (:func:`native_reason`): library losses whose CVXPY form is a quadratic -- squared
losses ``(1/m_i) ||y_i - X_i w_i||^2``, ``QuadraticLoss`` ``||w_i - a_i||^2``, zero losses --
with ``l2`` regularizers ``kappa_i ||w_i||^2`` (no ``l1``), no node constraints, no symbolic
terms, and the penalty ``Norm2`` or ``Norm1`` on at least one edge.  Clarabel solves

    minimize  1/2 x^T P x + q^T x   s.t.  A x + s = b,  s in K

with ``x = (r, t, vec(W))``, the same data CVXPY's canonicalization of the compiled problem
(:func:`gtvmodel.duality.compile.compile_primal`, forms ``"soc"`` and ``"box"``) hands it:

* the squared losses through their residuals ``r = X_blk vec(W) - y`` (zero-cone rows) and
  ``1/2 r^T diag(2 c) r = sum_r c_r r_r^2``; the other quadratic terms by their constant
  Hessians and gradients at 0 (``P_W = blkdiag(hess L_i + 2 kappa_i I)``, ``q_W = grad L(0)``;
  the constants ``L_i(0)`` are left out: the objective is evaluated in numpy);
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
structure, which the certificate needs anyway); Clarabel runs the same 8 iterations on
either (``benchmarks/RESULTS.md``).
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

__all__ = ["native_reason", "native_form", "NativeAnswer", "solve_native", "native_data"]


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
    pass :func:`native_reason`."""
    st = model.structure()
    n, d, m = model.num_nodes, model.dim, model.num_edges
    nd = n * d
    zero = np.zeros((n, d))
    hess = np.zeros((n, d, d))
    grad = np.zeros((n, d))
    rows_of = [b.squared_rows() for b in st.batches]
    squared = [r for r in rows_of if r is not None]
    for b, r in zip(st.batches, rows_of, strict=True):
        if r is None:
            hess[b.nodes] += cast(np.ndarray, b.hessians(zero))  # constant: quadratics
            grad += b.gradients(zero)
    hess[:, np.arange(d), np.arange(d)] += 2.0 * st.l2[:, None]
    form = native_form(model)
    n_edge = m if form == "soc" else m * d
    rows_r = sum(y.size for _, y, _ in squared)
    nv = nd + n_edge + rows_r
    # P: the node blocks (upper triangles) and the residuals' diag(2 c)
    idx = np.arange(nd).reshape(n, d)
    pr = np.repeat(idx, d, axis=1).ravel()
    pc = np.tile(idx, (1, d)).ravel()
    keep = (pr <= pc) & (hess.ravel() != 0.0)
    c = np.ones(rows_r)  # the residuals scaled by sqrt(c_r) (CVXPY's sum_squares form)
    rr = np.arange(nd + n_edge, nv)
    P = sp.csc_matrix((np.concatenate([hess.ravel()[keep], 2.0 * c]),
                       (np.concatenate([pr[keep], rr]), np.concatenate([pc[keep], rr]))),
                      shape=(nv, nv))
    cap = model.capacities
    q = np.concatenate([grad.ravel(), cap if form == "soc" else np.repeat(cap, d),
                        np.zeros(rows_r)])
    # zero-cone rows: X_blk vec(W) - r = y
    blocks: list[sp.coo_matrix] = []
    rhs: list[np.ndarray] = []
    cones: list[Any] = []
    offset = nd + n_edge
    for X_blk, y, c_rows in squared:
        k = y.size
        X = X_blk.tocoo()
        root = np.sqrt(c_rows)
        blocks.append(sp.coo_matrix(
            (np.concatenate([X.data * root[X.row], -np.ones(k)]),
             (np.concatenate([X.row, np.arange(k)]),
              np.concatenate([X.col, offset + np.arange(k)]))), shape=(k, nv)))
        rhs.append(y * root)
        offset += k
    if rows_r:
        cones.append(clarabel.ZeroConeT(rows_r))
    block, edge_cones = _edge_rows(form, st.incidence, d, nv)
    blocks.append(block)
    rhs.append(np.zeros(block.shape[0]))
    cones.extend(edge_cones)
    A = sp.vstack(blocks, format="csc")
    # CVXPY's layout: the columns r, t or T, W (T and W by columns), the rows of T by
    # columns (measured below)
    cols = np.concatenate([np.arange(nd + n_edge, nv),
                           nd + (_by_columns(m, d) if form == "box" else np.arange(m)),
                           _by_columns(n, d)])
    rows = np.arange(A.shape[0])
    if form == "box":
        rows = np.concatenate([np.arange(rows_r), rows_r + _by_columns(m, d),
                               rows_r + m * d + _by_columns(m, d)])
    return _Data(sp.csc_matrix(P[cols][:, cols]), q[cols], sp.csc_matrix(A[rows][:, cols]),
                 np.concatenate(rhs)[rows], cones, rows_r, form, rows_r + n_edge)


def _by_columns(k: int, d: int) -> np.ndarray:
    """The positions in a C-ordered ``(k, d)`` array of its entries in Fortran order."""
    return (np.arange(k)[None, :] * d + np.arange(d)[:, None]).ravel()


def _edge_rows(form: str, D: sp.csr_matrix, d: int, nv: int
               ) -> tuple[sp.coo_matrix, list[Any]]:
    """The rows of ``A`` (``b = 0``) and the cones of the edge terms (module docstring), in
    ``nv`` columns: ``vec(W)`` first, then ``t`` (``"soc"``) or ``T`` (``"box"``)."""
    m, nd = D.shape[0], D.shape[1] * d
    B = sp.kron(D, sp.identity(d, format="csr"), format="coo")  # (D (x) I) vec(W)
    if form == "soc":  # rows e (d + 1): -t_e, then -(D W)_e
        e = np.arange(m)
        rows = np.concatenate([e * (d + 1), (B.row // d) * (d + 1) + 1 + B.row % d])
        cols = np.concatenate([nd + e, B.col])
        return (sp.coo_matrix((np.concatenate([-np.ones(m), -B.data]), (rows, cols)),
                              shape=(m * (d + 1), nv)),
                [clarabel.SecondOrderConeT(d + 1)] * m)
    ks = np.arange(m * d)  # rows D W - T <= 0, then -D W - T <= 0
    rows = np.concatenate([B.row, ks, m * d + B.row, m * d + ks])
    cols = np.concatenate([B.col, nd + ks, B.col, nd + ks])
    vals = np.concatenate([B.data, -np.ones(m * d), -B.data, -np.ones(m * d)])
    return (sp.coo_matrix((vals, (rows, cols)), shape=(2 * m * d, nv)),
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
