"""Automatic conjugation of symbolic node losses (docs/conventions.md, last paragraph).

A node whose loss is an arbitrary DCP expression, or that carries symbolic constraints (a
*conic node*), has no closed-form conjugate.  Its term ``-(L_i + iota_{C_i})^*(s_i)`` of the dual
flow problem (19)/(24) is compiled instead from the conic program CVXPY produces for

    minimize_x  L_i(x) - s^T x   subject to  x in C_i                                  (P_s)

whose optimal value is ``-(L_i + iota_{C_i})^*(s)`` by the definition
``h^*(s) = sup_x s^T x - h(x)``.

**The conic form.**  The separable problem ``min sum_k L_k(x_k) s.t. x_k in C_k`` of the
conic nodes is canonicalized once, jointly, for Clarabel (CVXPY's ``use_quad_obj=False``, so
there is no quadratic objective term), giving in a stacked variable ``x`` of CVXPY's choosing

    minimize  c0^T x + d0   subject to  A x + r = b,   r in K

with ``K = {0}^f x R_+^l x SOC x ... x PSD x ... x K_exp x ... x K_pow x ...`` in Clarabel's row
order.  CVXPY keeps every original variable as a block of columns of ``x`` (``var_id_to_col``),
so the linear terms ``-s_k^T x_k`` of (P_s) are added exactly: only the objective depends on
``s``, ``c(s) = c0 + C s`` with ``C = -E`` (``E`` selects the columns of the ``x_k``), and
``A``, ``b``, ``d0`` do not.  (One joint canonicalization costs about half as much as one per
node; a ``cp.Parameter`` for ``s`` would make CVXPY build a parameter tensor growing with
``k d``, which costs more than it saves.)

**The conic dual.**  The Lagrangian ``c^T x + d + z^T (A x + r - b)`` is bounded below over
``x`` and ``r in K`` iff ``A^T z + c = 0`` and ``z in K^*``, which gives

    maximize_z  d(s) - b^T z   subject to  A^T z + c0 + C s = 0,   z in K^*            (D_s)

Its value is ``-(L_i + iota_{C_i})^*(s)`` whenever (P_s) and (D_s) have no duality gap (e.g.
Slater's condition for ``C_i`` and the domain of ``L_i``); in general it is ``<=`` that value
(weak duality), so the compiled dual flow problem is always a valid lower bound on the primal.
(D_s) is affine in ``s``, so substituting ``s_i = -(D^T u)_i`` for every conic node and
maximizing jointly over ``(u, z_i)`` compiles the dual flow problem for every DCP loss.

**The dual cones** (in the representation Clarabel's data uses):

- zero cone ``{0}``  <->  free;  ``R_+`` and the second-order cone ``||x_1:|| <= x_0`` are
  self-dual;
- PSD cone: Clarabel vectorizes the *upper* triangle column by column with off-diagonal entries
  scaled by ``sqrt(2)`` (``svec``).  ``svec`` is an isometry from symmetric matrices with the trace
  inner product, so the cone is self-dual in that representation: ``z = svec(Z)``, ``Z >= 0``;
- exponential cone ``K_exp = cl{(x, y, z): y e^{x/y} <= z, y > 0}`` (CVXPY's ``ExpCone``):
  ``K_exp^* = {(u, v, w): -u e^{v/u} <= e w, u < 0} U {(0, v, w): v, w >= 0}``
  ``= {(u, v, w): ExpCone(u - v, -u, w)}``;
- 3-d power cone ``x^a y^(1-a) >= |z|`` (``PowCone3D``): dual
  ``(u/a)^a (v/(1-a))^(1-a) >= |w|``, i.e. ``PowCone3D(u/a, v/(1-a), w, a)``;
- n-d power cone ``prod_k x_k^(a_k) >= |z|`` (``PowConeND``, from ``geo_mean(approx=False)``):
  dual ``PowConeND(u/a, w, a)``.

All cone constraints of all conic nodes are stacked and emitted as a handful of vectorized
CVXPY constraints (one per cone family and size); only PSD blocks get one matrix variable each.

:func:`node_conjugate` / :func:`node_conjugate_value` evaluate ``(L_i + iota_{C_i})^*(s)``
numerically from (P_s) itself (a DPP problem built once per node and re-solved), independently
of (D_s); :func:`node_conjugate` also returns the solver's gap tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from .._compat import (
    conic_offset,
    conic_program,
    has_variable_bounds,
    pow_cone_3d,
    variable_column,
)
from .._cvx import dpp_sized
from .._solver import gap_tolerance, run_solver, separable_gap_tolerance
from .._validate import check_int, check_rows, check_vector
from ..declaration import ModelDeclaration
from ..errors import DataError, GTVError, InfeasibleError, SolverError, UnsupportedError

__all__ = [
    "ConicData",
    "ConeRows",
    "cone_rows",
    "conic_nodes",
    "conic_data",
    "node_conic_data",
    "node_dual_terms",
    "conic_dual_terms",
    "node_conjugate",
    "node_conjugate_value",
    "conjugate_values",
    "stacked_conjugates",
    "conic_weights",
    "parameter_key",
]

#: The solver whose conic standard form (row order, cone conventions, PSD svec) is used.
_CANON_SOLVER = "CLARABEL"


@dataclass(frozen=True)
class ConicData:
    """Clarabel-form conic data of (P_S) for ``k`` nodes (one or several, stacked).

    ``minimize (c0 + C vec(S))^T x + d0 + dv^T vec(S)  s.t.  A x + r = b,  r in K`` where
    ``vec(S)`` stacks the nodes' ``s_k`` (row-major, ``k d`` entries) and ``K`` is the product
    of the cones listed in ``zero``, ``nonneg``, ``soc``, ``psd`` (matrix orders), ``exp``
    (count), ``p3d`` (exponents ``a``) and ``pnd`` (exponent vectors), in that row order.
    ``x[x_cols[k]]`` is node ``k``'s ``w``; a row of ``-1`` marks a node whose variable does not
    occur in its loss or constraints (then ``s_k`` must be 0).
    """

    A: sp.csr_matrix
    b: np.ndarray
    c0: np.ndarray
    C: sp.csr_matrix
    d0: float
    dv: np.ndarray
    zero: int
    nonneg: int
    soc: tuple[int, ...]
    psd: tuple[int, ...]
    exp: int
    p3d: tuple[float, ...]
    pnd: tuple[tuple[float, ...], ...]
    #: ``(k, d)``: columns of each node's variable inside the stacked conic variable ``x``.
    x_cols: np.ndarray

    @property
    def num_rows(self) -> int:
        return int(self.A.shape[0])

    @property
    def num_vars(self) -> int:
        return int(self.A.shape[1])


@dataclass
class _NodeProblem:
    """(P_s) for one node, built once: the problem, its parameter ``s`` and its variable."""

    problem: cp.Problem
    s: cp.Parameter
    x: cp.Variable
    radius: cp.Parameter | None = None  # the box ||x||_inf <= R of the radius-restricted form


@dataclass
class _JointProblem:
    """``min sum_k L_k(x_k) s.t. x_k in C_k`` for a tuple of nodes (no ``s``), built once."""

    problem: cp.Problem
    xs: list[cp.Variable]
    data: ConicData | None = None
    key: tuple | None = None


@dataclass
class _StackedProblem:
    """(P_S) of a tuple of nodes: ``min sum_k p_k`` with the node terms ``p_k = L_k(x_k) -
    S_k^T x_k`` s.t. ``x_k in C_k``; the node expressions and constraints built once.  The
    demands ``S`` (``k d`` numbers) are a Parameter of one cached DPP problem (``dpp``: the
    problem and the vector ``parts``) while they fit :func:`~gtvmodel._cvx.dpp_sized`, else
    constants of a problem stated per call (DPP's tensor grows with the square of ``k d``)."""

    xs: list[cp.Variable]
    terms: list[cp.Expression]
    constraints: list[cp.Constraint]
    S: cp.Parameter | None = None
    dpp: tuple[cp.Problem, cp.Expression] | None = None

    def _state(self, S: Any) -> tuple[cp.Problem, cp.Expression]:
        parts = cp.hstack([t - x @ S[k] for k, (t, x) in enumerate(zip(self.terms, self.xs,
                                                                          strict=True))])
        return cp.Problem(cp.Minimize(cp.sum(parts)), self.constraints), parts

    def problem(self, S: np.ndarray) -> tuple[cp.Problem, cp.Expression]:
        """The problem and its vector of node terms at demands ``S`` (``(k, d)``)."""
        if self.dpp is None:
            return self._state(S)
        assert self.S is not None  # built with the DPP problem
        self.S.value = S
        return self.dpp


def conic_nodes(model: ModelDeclaration) -> list[int]:
    """Positions of the conic nodes: a symbolic loss or at least one symbolic constraint."""
    return model.structure().conic.tolist()


def _check_position(model: ModelDeclaration, i: Any) -> int:
    return check_int(i, "node position", min_val=0, max_val=model.num_nodes - 1, error=DataError)


def _node_terms(model: ModelDeclaration, i: int) -> tuple[cp.Variable, cp.Expression,
                                                   list[cp.Constraint]]:
    """The node's variable ``x``, ``L_i(x)`` (regularizers included) and all its constraints."""
    x = model.var(model.nodes[i])
    expr = model.loss_at(i).expression(x)
    cons: list[cp.Constraint] = []
    for c in model.constraints_at(i):
        cons.extend(c.constraints(x))
    return x, expr, cons


def _node_problem(model: ModelDeclaration, i: int, boxed: bool = False) -> _NodeProblem:
    """(P_s) for node position ``i``, cached on the model until it changes structurally.

    DPP in ``s`` (and in the user's Parameters if they enter DPP-compliantly; otherwise CVXPY
    recompiles it on every solve, which is correct but slower).  ``boxed``: with the extra
    constraint ``||x||_inf <= R`` (a Parameter), the conjugate of ``h_i + iota{||x||_inf <= R}``
    that a certificate with a certified radius ``R`` may use (finite for every ``s``)."""
    cache: dict[Any, Any] = model.cache.get_or_build(
        "conic_nodes_boxed" if boxed else "conic_nodes", dict)
    entry = cache.get(i)
    if entry is None:
        x, expr, cons = _node_terms(model, i)
        s = cp.Parameter(model.dim, name=f"s[{model.nodes[i]!r}]", value=np.zeros(model.dim))
        radius = None
        if boxed:
            radius = cp.Parameter(nonneg=True, name=f"R[{model.nodes[i]!r}]", value=1.0)
            cons = [*cons, cp.abs(x) <= radius]
        entry = _NodeProblem(cp.Problem(cp.Minimize(expr - s @ x), cons), s, x, radius)
        cache[i] = entry
    return entry


def _joint_problem(model: ModelDeclaration, nodes: tuple[int, ...]) -> _JointProblem:
    """The separable problem of ``nodes`` without the linear terms, cached per node tuple."""
    cache: dict[Any, Any] = model.cache.get_or_build("conic_joint", dict)
    entry = cache.get(nodes)
    if entry is None:
        xs, terms, cons = [], [], []
        for i in nodes:
            x, expr, c = _node_terms(model, i)
            xs.append(x)
            terms.append(expr)
            cons += c
        objective = cp.sum(cp.hstack(terms)) if len(terms) > 1 else terms[0]
        entry = _JointProblem(cp.Problem(cp.Minimize(objective), cons), xs)
        cache[nodes] = entry
    return entry


def _stacked_problem(model: ModelDeclaration, nodes: tuple[int, ...]) -> _StackedProblem:
    """The stacked (P_S) of ``nodes``, cached per node tuple and model version."""
    cache: dict[Any, Any] = model.cache.get_or_build("conic_stacked", dict)
    entry = cache.get(nodes)
    if entry is None:
        entry = _StackedProblem([], [], [])
        for i in nodes:  # one expression per symbolic node (user-written)
            x, expr, c = _node_terms(model, i)
            entry.xs.append(x)
            entry.terms.append(expr)
            entry.constraints.extend(c)
        if dpp_sized(len(nodes) * model.dim):
            entry.S = cp.Parameter((len(nodes), model.dim), name="S_conic",
                                   value=np.zeros((len(nodes), model.dim)))
            entry.dpp = entry._state(entry.S)
        cache[nodes] = entry
    return entry


def _param_key(problem: cp.Problem) -> tuple:
    """Current values of the CVXPY Parameters of a problem."""
    key = []
    for p in problem.parameters():
        if p.value is None:
            raise DataError(f"CVXPY parameter {p.name()} has no value")
        key.append((p.id, np.asarray(p.value, dtype=float).tobytes()))
    return tuple(sorted(key))


def parameter_key(model: ModelDeclaration, nodes: list[int]) -> tuple:
    """The values of the CVXPY Parameters inside the losses/constraints of ``nodes``.

    :func:`conic_dual_terms` bakes the conic data (which depends on those values) into
    constants; a compiled problem built from it is stale once this key changes.
    """
    nodes_t = tuple(_check_position(model, i) for i in nodes)
    return _param_key(_joint_problem(model, nodes_t).problem)


def conic_data(model: ModelDeclaration, nodes: list[int]) -> ConicData:
    """The Clarabel-form conic data of (P_S) for several nodes at once (cached).

    (P_S) is ``min sum_k L_k(x_k) - S_k^T x_k  s.t.  x_k in C_k``.  The separable problem
    *without* the linear terms is canonicalized once, jointly (no parameter: CVXPY's
    canonicalization of ``k`` small problems in one is about twice as fast as ``k`` separate
    ones, and a parameter tensor for ``S`` would cost more than it saves).  CVXPY keeps every
    original variable as a block of columns of its stacked variable ``x``
    (``var_id_to_col``), so the linear terms are added exactly: ``c(S) = c0 - E vec(S)`` with
    ``E`` the selection of the ``x_k`` columns (``C = -E``, ``dv = 0``).  Cached per node tuple
    and model version, and recomputed when the value of a CVXPY Parameter inside the losses or
    constraints changes.
    """
    nodes_t = tuple(_check_position(model, i) for i in nodes)
    entry = _joint_problem(model, nodes_t)
    key = _param_key(entry.problem)
    if entry.data is not None and entry.key == key:
        return entry.data
    d, k = model.dim, len(nodes_t)
    where = (f"node {model.nodes[nodes_t[0]]!r}" if k == 1 else
             f"nodes {[model.nodes[i] for i in nodes_t[:5]]}{'...' if k > 5 else ''}")
    try:
        data, _, inverse_data = entry.problem.get_problem_data(
            _CANON_SOLVER, solver_opts={"use_quad_obj": False})
    except cp.error.SolverError as exc:
        raise UnsupportedError(
            f"{where}: CVXPY cannot put the loss/constraints in {_CANON_SOLVER}'s conic form: "
            f"{exc}") from None
    if "P" in data:  # pragma: no cover - use_quad_obj=False rules it out
        raise UnsupportedError(f"{where}: conic form has a quadratic objective term")
    if has_variable_bounds(data):  # pragma: no cover - not for Clarabel
        raise UnsupportedError(f"{where}: conic form has variable bounds")
    # the objective c0^T x + d0 with the current Parameter values applied
    c0 = np.asarray(data["c"], dtype=float).ravel()
    d0 = conic_offset(inverse_data)
    nv = int(conic_program(data).x.size)
    if c0.size != nv:  # pragma: no cover - guards against a CVXPY format change
        raise UnsupportedError(f"{where}: unexpected layout of CVXPY's conic objective")
    # Clarabel's form A x + r = b, r in K (CVXPY's own is A_cvx x + b in K, A = -A_cvx)
    A = sp.csr_matrix(data["A"])
    b = np.asarray(data["b"], dtype=float).ravel()
    x_cols = np.full((k, d), -1, dtype=np.int64)
    for j, x in enumerate(entry.xs):
        col = variable_column(data, x)
        if col is not None:
            x_cols[j] = col + np.arange(d)
    present = (x_cols[:, 0] >= 0)
    rows = x_cols[present].ravel()
    cols = (np.flatnonzero(present)[:, None] * d + np.arange(d)[None, :]).ravel()
    C = sp.csr_matrix((-np.ones(rows.size), (rows, cols)), shape=(nv, k * d))
    dims = data["dims"]
    out = ConicData(
        A=A, b=b, c0=c0, C=C, d0=d0, dv=np.zeros(k * d),
        zero=int(dims.zero), nonneg=int(dims.nonneg), soc=tuple(int(m) for m in dims.soc),
        psd=tuple(int(m) for m in dims.psd), exp=int(dims.exp),
        p3d=tuple(float(a) for a in dims.p3d),
        pnd=tuple(tuple(float(a) for a in al) for al in getattr(dims, "pnd", [])),
        x_cols=x_cols,
    )
    nrows = (out.zero + out.nonneg + sum(out.soc) + sum(m * (m + 1) // 2 for m in out.psd)
             + 3 * out.exp + 3 * len(out.p3d) + sum(len(al) + 1 for al in out.pnd))
    if nrows != out.num_rows:  # pragma: no cover - guards against a CVXPY format change
        raise UnsupportedError(
            f"{where}: cone dimensions ({nrows} rows) do not match the conic data "
            f"({out.num_rows} rows); unsupported cone type in {dims}")
    entry.data, entry.key = out, key
    return out


def node_conic_data(model: ModelDeclaration, i: int) -> ConicData:
    """:func:`conic_data` of a single node (cached)."""
    return conic_data(model, [i])


# ---------------------------------------------------------------- the dual cones
def svec_matrix(n: int) -> sp.csr_matrix:
    """``M`` with ``M vec(Z, 'F') = svec(Z)`` in Clarabel's PSD-triangle convention.

    The upper triangle is taken column by column (``(0,0), (0,1), (1,1), (0,2), ...``) and
    off-diagonal entries are scaled by ``sqrt(2)``, so ``svec(X) . svec(Y) = trace(X Y)``.
    """
    rows, cols, vals = [], [], []
    r = 0
    for j in range(n):
        for i in range(j + 1):
            rows.append(r)
            cols.append(j * n + i)  # F-order index of (i, j)
            vals.append(1.0 if i == j else np.sqrt(2.0))
            r += 1
    return sp.csr_matrix((vals, (rows, cols)), shape=(n * (n + 1) // 2, n * n))


@dataclass
class ConeRows:
    """The rows of the stacked conic data, grouped by cone (the zero cone's dual is free and
    has none): nonnegative rows, second-order cones by size (their first rows), PSD blocks
    ``(first row, k)``, exponential triples, 3-d power cones (rows, ``alpha``) and n-d power
    cones by ``alpha`` (their first rows)."""

    nonneg: list[np.ndarray] = field(default_factory=list)
    soc: dict[int, list[int]] = field(default_factory=dict)
    psd: list[tuple[int, int]] = field(default_factory=list)
    exp: list[np.ndarray] = field(default_factory=list)
    p3d_rows: list[np.ndarray] = field(default_factory=list)
    p3d_alpha: list[float] = field(default_factory=list)
    pnd: dict[tuple[float, ...], list[int]] = field(default_factory=dict)


def cone_rows(data: list[tuple[int, ConicData]]) -> ConeRows:
    """The rows of several nodes' conic data (row offsets given), grouped by cone."""
    rows = ConeRows()
    nonneg, soc, psd, exp = rows.nonneg, rows.soc, rows.psd, rows.exp
    p3d_rows, p3d_alpha, pnd = rows.p3d_rows, rows.p3d_alpha, rows.pnd
    for off, D in data:
        r = off + D.zero                      # zero cone: dual is free
        nonneg.append(np.arange(r, r + D.nonneg))
        r += D.nonneg
        for k in D.soc:
            soc.setdefault(k, []).append(r)
            r += k
        for k in D.psd:
            psd.append((r, k))
            r += k * (k + 1) // 2
        exp.append(r + np.arange(3 * D.exp))
        r += 3 * D.exp
        for a in D.p3d:
            p3d_rows.append(np.arange(r, r + 3))
            p3d_alpha.append(a)
            r += 3
        for al in D.pnd:
            pnd.setdefault(al, []).append(r)
            r += len(al) + 1
    return rows


def _dual_cone_constraints(z: cp.Variable, data: list[tuple[int, ConicData]]
                           ) -> list[cp.Constraint]:
    """``z in K^*`` for the stacked rows of several nodes' conic data (row offsets given)."""
    rows = cone_rows(data)
    nonneg, soc, psd, exp = rows.nonneg, rows.soc, rows.psd, rows.exp
    p3d_rows, p3d_alpha, pnd = rows.p3d_rows, rows.p3d_alpha, rows.pnd
    out: list[cp.Constraint] = []
    nn = np.concatenate(nonneg) if nonneg else np.zeros(0, dtype=np.int64)
    if nn.size:
        out.append(z[nn] >= 0)
    for k, starts in soc.items():
        st = np.array(starts)
        if k == 1:
            out.append(z[st] >= 0)
            continue
        tail = (st[:, None] + 1 + np.arange(k - 1)[None, :]).ravel()
        X = cp.reshape(z[tail], (st.size, k - 1), order="C")
        out.append(cp.SOC(z[st], X, axis=1))
    M_cache: dict[int, sp.csr_matrix] = {}
    for r, k in psd:  # one matrix variable per PSD block
        M = M_cache.setdefault(k, svec_matrix(k))
        Zm = cp.Variable((k, k), symmetric=True)
        out += [Zm >> 0, z[r:r + k * (k + 1) // 2] == M @ cp.vec(Zm, order="F")]
    ex = np.concatenate(exp) if exp else np.zeros(0, dtype=np.int64)
    if ex.size:
        u, v, w = z[ex[0::3]], z[ex[1::3]], z[ex[2::3]]
        out.append(cp.ExpCone(u - v, -u, w))
    if p3d_rows:
        R = np.vstack(p3d_rows)
        a = np.array(p3d_alpha)
        out.append(pow_cone_3d(cp.multiply(1.0 / a, z[R[:, 0]]),
                               cp.multiply(1.0 / (1.0 - a), z[R[:, 1]]), z[R[:, 2]], a))
    for al, starts in pnd.items():
        a = np.array(al)
        st = np.array(starts)
        m = a.size
        idx = (st[None, :] + np.arange(m)[:, None])          # (m, cones), column j = cone j
        W = cp.reshape(z[idx.ravel(order="C")], (m, st.size), order="C")
        alpha = np.repeat(a[:, None], st.size, axis=1)
        out.append(cp.PowConeND(cp.multiply(1.0 / alpha, W), z[st + m], alpha, axis=0))
    return out


# ---------------------------------------------------------------- the dual terms
def conic_dual_terms(model: ModelDeclaration, nodes: list[int], S: cp.Expression
                     ) -> tuple[cp.Expression, list[cp.Constraint]]:
    """Stacked (D_s) of several nodes: ``sum_k -(L_k + iota_{C_k})^*(S_k)`` as a maximization.

    ``nodes`` are node positions and ``S`` an affine ``(len(nodes), d)`` CVXPY expression whose
    row ``k`` is ``s`` for ``nodes[k]`` (in the dual flow problem ``S = -(D^T u)[nodes]``).
    Returns ``(concave_expr, constraints)``: new dual-cone variables ``z`` (one stacked vector,
    plus a symmetric matrix per PSD block) such that maximizing ``concave_expr`` subject to
    ``constraints`` over them equals ``sum_k -(L_k + iota_{C_k})^*(S_k)`` (no duality gap in
    (P_s)/(D_s), see the module docstring).  The nodes are canonicalized jointly
    (:func:`conic_data`), so the result is a fixed number of vectorized CVXPY expressions,
    whatever ``len(nodes)``.

    The conic data enters as constants: if the nodes' losses contain CVXPY Parameters, a problem
    built from the result is stale once their values change (see :func:`parameter_key`).

    The *last* returned constraint is the balance ``A^T z + c0 + C s = 0``; after solving, its
    multiplier is (minus) the stacked primal variable ``x`` of (P_s), from which
    :func:`conic_weights` reads the nodes' weights ``w_i``.
    """
    d = model.dim
    nodes = [_check_position(model, i) for i in nodes]
    if S.shape != (len(nodes), d):
        raise DataError(f"S must have shape ({len(nodes)}, {d}) (conic nodes x dim), "
                        f"got {S.shape}")
    if not nodes:
        return cp.Constant(0.0), []
    D = conic_data(model, nodes)
    s_flat = cp.vec(S, order="C")
    concave: cp.Expression = D.d0 + D.dv @ s_flat if D.dv.any() else cp.Constant(D.d0)
    lin: cp.Expression = D.C @ s_flat + D.c0
    cons: list[cp.Constraint] = []
    if D.num_rows:
        z = cp.Variable(D.num_rows, name="z_conic")
        lin = lin + D.A.T @ z
        concave = concave - D.b @ z
        cons += _dual_cone_constraints(z, [(0, D)])
    absent = np.flatnonzero(D.x_cols[:, 0] < 0)
    if absent.size:  # L_k does not depend on x_k: (L_k)^*(s) is finite only at s = 0
        cons.append(S[absent, :] == 0)
    cons.append(lin == 0)
    return concave, cons


def node_dual_terms(model: ModelDeclaration, i: int, s_expr: cp.Expression
                    ) -> tuple[cp.Expression, list[cp.Constraint]]:
    """(D_s) of node position ``i``: maximizing the returned concave expression subject to the
    returned constraints (over the new dual-cone variables) equals
    ``-(L_i + iota_{C_i})^*(s)`` for the affine ``(d,)`` expression ``s_expr``.

    ``L_i`` is the node's loss (library or symbolic, regularizers included) and ``C_i`` all its
    constraints.  For several nodes prefer :func:`conic_dual_terms`, which stacks them.
    """
    d = model.dim
    s_expr = cp.Expression.cast_to_const(s_expr) if not isinstance(s_expr, cp.Expression) \
        else s_expr
    if s_expr.size != d:
        raise DataError(f"s_expr must have shape ({d},), got {s_expr.shape}")
    return conic_dual_terms(model, [i], cp.reshape(s_expr, (1, d), order="C"))


# ---------------------------------------------------------------- numeric conjugates
def node_conjugate(model: ModelDeclaration, i: int, s: Any, solver: str | None = None, *,
                   accept_inaccurate: bool = False, radius: float | None = None,
                   **opts: Any) -> tuple[float, float]:
    """``((L_i + iota_{C_i})^*(s), tolerance)`` for a numpy ``s``, from (P_s):
    ``h^*(s) = -min_x {L_i(x) - s^T x : x in C_i}``.

    Solves (P_s) (built once per node with a ``cp.Parameter`` for ``s``, re-solved for every
    ``s``) with :func:`gtvmodel._solver.run_solver`'s accuracy defaults, fallback ladder and status
    policy.  The value is ``+inf`` (tolerance 0) when (P_s) is unbounded below (``s`` outside the
    domain of the conjugate); :class:`InfeasibleError` is raised if ``C_i`` (with the loss's
    domain) is empty, :class:`SolverError` on failed or (unless ``accept_inaccurate``)
    inaccurate solves.

    ``tolerance`` is the duality-gap tolerance of the run the solver accepted: the value is
    ``-(primal objective)`` at an approximate minimizer, which may exceed the exact minimum by
    up to that gap, so the exact conjugate is at most ``value + tolerance`` *as far as the
    solver's stated accuracy goes*: the feasibility error's share of the objective is not in it
    and grows with the maximizer (``2.069 / w_0`` at ``s = (-1e-10, 0)``: 3.9e-5 against a
    tolerance of 2e-9).  Certificates therefore use
    :func:`gtvmodel.duality.conic_bounds.conjugate_bound`, which rests on no stated accuracy.
    Clarabel: ``tol_gap_abs + tol_gap_rel max(1, |value|)`` of the
    accepted options (its ``reduced_tol_gap_*`` for an accepted inaccurate status); SCS:
    ``eps_abs + eps_rel max(1, |value|)``; other solvers ``1e-6 max(1, |value|)``.  On the
    boundary of the conjugate's domain (an unattained sup) solvers may report inaccuracy.

    ``radius``: a finite ``R`` evaluates ``(h_i + iota{||x||_inf <= R})^*(s)`` instead, which is
    finite for every ``s`` and equals ``h_i^*(s)`` wherever a maximizer has ``||x||_inf <= R``
    (a certificate with a certified radius uses it for demands a hair outside the domain).
    """
    i = _check_position(model, i)
    d = model.dim
    label = model.nodes[i]
    sv = check_vector(s, "s", d, where=f"conjugate of node {label!r}")
    boxed = radius is not None and np.isfinite(radius)
    entry = _node_problem(model, i, boxed)
    entry.s.value = sv
    if boxed:
        assert entry.radius is not None and radius is not None  # a boxed problem has one
        entry.radius.value = float(radius)
    old = entry.x.value
    what = f"conjugate of node {label!r}"
    record: dict[str, Any] = {}
    try:
        try:
            with np.errstate(invalid="ignore"):  # see the NaN note below
                name, _, _ = run_solver(entry.problem, solver, opts, False, accept_inaccurate,
                                        what, record=record)
        except SolverError as exc:
            if exc.status in (cp.UNBOUNDED, cp.UNBOUNDED_INACCURATE):
                return float("inf"), 0.0
            raise
        status = entry.problem.status
        if status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
            raise InfeasibleError(f"{what}: the node's constraints (with its loss's domain) "
                                  "have no feasible point")
        # The objective evaluated at the returned point (CVXPY's ``problem.value``) is NaN when
        # the point is a hair outside an atom's domain (e.g. ``power(x, 1.5)`` at x = -1e-12);
        # the solver's own objective is then used.  Of the two, the smaller minimum (larger
        # conjugate) is returned: the conservative side for a certificate.
        vals = [v for v in (entry.problem.value, getattr(entry.problem.solution, "opt_val", None))
                if v is not None and np.isfinite(v)]
        val = min(vals) if vals else None
    finally:
        entry.x.value = old
    if val is None or not np.isfinite(val):
        raise SolverError(f"{what}: solver returned objective {val!r}", status=status,
                          solver=name)
    tol = cast(float, gap_tolerance(name, record.get("options", {}), status, float(val)))
    return float(-val) + 0.0, tol


def node_conjugate_value(model: ModelDeclaration, i: int, s: Any, solver: str | None = None, *,
                         accept_inaccurate: bool = False, **opts: Any) -> float:
    """``(L_i + iota_{C_i})^*(s)`` for a numpy ``s`` (``+inf`` outside the domain).

    The value of :func:`node_conjugate` (see there for the method, the errors and the accuracy
    tolerance a certificate should add).
    """
    return node_conjugate(model, i, s, solver, accept_inaccurate=accept_inaccurate, **opts)[0]


def conjugate_values(model: ModelDeclaration, nodes: list[int], S: Any, solver: str | None = None,
                     *,
                     accept_inaccurate: bool = False, **opts: Any) -> np.ndarray:
    """``[(L_k + iota_{C_k})^*(S_k)]_k`` for node positions ``nodes`` and an ``(len(nodes), d)``
    numpy array ``S``: :func:`node_conjugate_value` per node (each node's problem is built once
    and re-solved)."""
    S = check_rows(S, "S", len(nodes), model.dim, where="conjugate_values", rows_label="nodes")
    return np.array([
        node_conjugate_value(model, i, S[k], solver, accept_inaccurate=accept_inaccurate, **opts)
        for k, i in enumerate(nodes)
    ])


def stacked_conjugates(model: ModelDeclaration, nodes: list[int] | np.ndarray, S: Any,
                       solver: str | None = None, *, accept_inaccurate: bool = False,
                       **opts: Any) -> tuple[np.ndarray, float] | None:
    """``([(L_k + iota_{C_k})^*(S_k)]_k, tolerance)`` from *one* solve of the stacked (P_S)
    ``min sum_k L_k(x_k) - S_k^T x_k  s.t.  x_k in C_k`` (its expressions built once per
    node tuple; DPP in ``S`` up to :data:`~gtvmodel._cvx.DPP_MAX_ENTRIES` numbers), or None
    when that solve gives no finite value for every node (some ``S_k`` outside its
    conjugate's domain makes it unbounded, an empty ``C_k`` infeasible, a failed or
    inaccurate run, a point a hair outside an atom's domain): then ask :func:`node_conjugate`
    node by node, which tells those cases apart.

    Node ``k``'s value is ``-p_k(x_k)``, its term ``p_k = L_k - S_k^T x`` at the solver's point.
    **Apportioning the tolerance.**  (P_S) is separable, so the run's shortfall
    ``sum_k p_k(x_k) - min sum_k p_k`` is ``sum_k delta_k`` with the node shortfalls
    ``delta_k = p_k(x_k) - min p_k >= 0`` (each ``x_k in C_k``): a bound ``tau`` of the run's
    shortfall bounds every single ``delta_k`` *and* their sum, so ``value_k + tau`` bounds
    each node's conjugate from above and ``sum_k value_k + tau`` their sum (``tau`` is added
    once, not once per node).  ``tau`` is :func:`~gtvmodel._solver.separable_gap_tolerance`
    (never less than node-by-node runs would charge).  Where the solver's own objective is
    below CVXPY's evaluation at the point, the difference is added (the conservative side, as
    :func:`node_conjugate` does).
    Like the node-by-node values, this rests on the solver's reported accuracy (see
    :func:`node_conjugate`; certified bounds: :mod:`gtvmodel.duality.conic_bounds`)."""
    nodes_t = tuple(_check_position(model, i) for i in nodes)
    S = check_rows(S, "S", len(nodes_t), model.dim, where="stacked_conjugates",
                   rows_label="nodes")
    if not nodes_t:
        return np.zeros(0), 0.0
    entry = _stacked_problem(model, nodes_t)
    problem, parts_expr = entry.problem(S)
    old = [x.value for x in entry.xs]  # the nodes' variables are the user's: restore them
    record: dict[str, Any] = {}
    try:
        with np.errstate(invalid="ignore"):
            name, _, _ = run_solver(problem, solver, opts, False, accept_inaccurate,
                                    f"conjugates of {len(nodes_t)} conic node(s)",
                                    record=record)
            status = problem.status
            parts = parts_expr.value if status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) else None
        opt_val = getattr(problem.solution, "opt_val", None)
    except GTVError:
        return None
    finally:
        for x, v in zip(entry.xs, old, strict=True):
            x.value = v
    if parts is None:
        return None
    parts = np.asarray(parts, dtype=float).reshape(len(nodes_t))
    if not np.isfinite(parts).all():
        return None
    total = math.fsum(parts)
    low = min(total, float(opt_val)) if opt_val is not None and np.isfinite(opt_val) else total
    tau = (total - low) + separable_gap_tolerance(name, record.get("options", {}), status, parts)
    return -parts + 0.0, float(tau)


def conic_weights(model: ModelDeclaration, nodes: list[int], constraints: list[cp.Constraint]
                  ) -> np.ndarray | None:
    """Primal weights ``w_k`` of ``nodes`` (``(len(nodes), d)``) from a solved dual problem.

    ``constraints`` is the list :func:`conic_dual_terms` returned for ``nodes`` (its last entry
    is the balance ``A^T z + c(s) = 0``).  (P_s) is the dual of (D_s): the balance multiplier
    ``nu`` is the stacked conic variable up to sign: CVXPY's Lagrangian of
    ``Minimize(-concave + ...)`` adds ``nu^T (lhs - rhs)``, and stationarity in ``z`` reads
    ``A (-nu) + r = b``, ``r in K``, so ``x = -nu``.  CVXPY reports the multipliers of a
    ``Maximize(concave + ...)`` problem as those of the equivalent minimization, so the same
    sign holds there (both tested); ``w_k = x[x_cols]``.  At an optimal pair
    ``w_k`` minimizes ``L_k(x) - s_k^T x`` over ``C_k``, i.e. ``s_k in d(L_k + iota_{C_k})(w_k)``
    (docs/conventions.md (23)).  Returns None if the solver gave no multiplier or a node's loss
    does not involve its variable (its weight is then not determined by its own term).  The weights
    are as accurate as the solve; callers should verify them (``P(w)`` against the dual value).
    """
    nodes = [_check_position(model, i) for i in nodes]
    if not nodes:
        return np.zeros((0, model.dim))
    nu = constraints[-1].dual_value if constraints else None
    if nu is None:
        return None
    x = -np.asarray(nu, dtype=float).ravel()
    D = conic_data(model, nodes)
    if x.size != D.num_vars:
        raise DataError("conic_weights: the constraints do not belong to these nodes")
    if (D.x_cols < 0).any():
        return None
    return x[D.x_cols]
