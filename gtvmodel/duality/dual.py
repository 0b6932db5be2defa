"""The dual flow problem (19)/(24)/(27) of GTV minimization, compiled to one CVXPY problem.

    maximize over edge flows U (|E| x d):
        - sum_i h_i*( s_i )  -  sum_e lambda A_e phi*( u_e / (lambda A_e) ),   s = -D^T U   (24)

with ``h_i = L_i + eta_i ||.||_1 + kappa_i ||.||^2 + iota_{C_i}`` the node's loss, regularizers
and constraints (docs/conventions.md).  Every ``h_i*`` is an infimal convolution, written out with
split variables so that the whole problem stays one vectorized convex program:

    s_i = X_i^T (v_i / m_i)  [data-fit rows]  +  s_quad,i  [QuadraticLoss]
          + s_l1,i  [||s_l1||_inf <= eta_i]  +  s_l2,i  [cost ||s_l2||^2 / (4 kappa_i)]
          + sum_{C in C_i} s_C,i  [cost sigma_C(s_C)]

Each group of variables is stacked over all nodes of one kind (one matrix variable per loss
class, regularizer or constraint type) and scattered into the node-balance rows by a sparse
matrix; there are no per-node or per-edge Python loops for library nodes.  The row
conjugates ``ell*`` come from the loss classes
(:meth:`~gtvmodel.terms.losses.DataFitLoss.ell_conjugate`), the support functions from the
constraints, the penalty term from
:meth:`~gtvmodel.terms.penalties.Penalty.conjugate_expression` (capacities
``||u_e||_* <= lambda A_e`` for norms (27)).

**Conic nodes** (a symbolic loss or symbolic constraints: ``model.structure().symbolic`` and
``.symbolic_constraints``) are compiled by :func:`gtvmodel.duality.conic.conic_dual_terms`, the
agreed interface: for node positions ``nodes`` and an affine ``(len(nodes), d)`` expression ``S`` it
returns ``(concave_expr, constraints)`` whose maximization over its own new variables equals
``sum_k -(L_k + iota_{C_k})*(S_k)`` (the node's whole term: loss, regularizers and all its
constraints).  Numeric values come from :func:`gtvmodel.duality.conic.conjugate_values`.

**Weights.**  The multiplier of the node-balance constraint ``sum(parts) = s`` is the primal
weight vector (the dual of the dual is the primal).  :func:`solve_dual` returns it as
``weights`` only when it verifies: every node constraint holds within ``1e-7`` and ``P(w)``
equals the dual objective within relative ``1e-6``.  Otherwise (a non-unique or ill-conditioned
primal) ``weights`` is None.  Conic nodes' weights are the multipliers of their conic duals'
balance constraints (:func:`gtvmodel.duality.conic.conic_weights`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, cast

import cvxpy as cp
import numpy as np

from .._cvx import ScaleParameter
from .._norms import dual_exponent, mul_up, norm_rows_upper
from .._solver import check_solver, run_solver
from .._validate import check_bool
from ..declaration import ModelDeclaration
from ..errors import InfeasibleError, SolverError
from ..results import Labels, Result, failed_result
from ..terms.constraints import Box, NormBall
from ..terms.losses import NodePart, l2_conjugate_cvx, scatter_rows
from . import conic as conic_mod
from .compile import find_infeasible_nodes
from .conic import conic_weights, parameter_key

__all__ = ["DualSolution", "DualProblem", "NodePart", "node_conjugate_parts",
           "compile_dual", "solve_dual"]


@dataclass(kw_only=True)
class DualSolution(Result):
    """A solution of the dual flow problem (24); the shared vocabulary (:meth:`flow`,
    :meth:`weight`, :meth:`to_dict`, ...) is :class:`gtvmodel.results.Result`'s.

    The fields are keyword-only, as :func:`solve_dual` fills them; each is also the
    attribute of that name.

    Parameters
    ----------
    timings : dict
        Seconds: ``"compile"`` (building/canonicalizing; no build time when the cached problem
        is re-solved) and ``"solve"`` (inside the solver).
    labels : Labels
        The model's node labels and edges (:class:`gtvmodel.results.Labels`), for
        :meth:`flow` and :meth:`weight`.
    flows : ndarray (|E|, d) or None
        Edge flows ``u_e`` in ``model.edges`` order (docs/conventions.md's sign convention, the
        same as :attr:`gtvmodel.solution.Solution.flows`); None for a failed solve returned
        with ``raise_on_failure=False``.
    objective : float
        The dual value ``D(u)`` as the solver reports it.
    status, solver : str
        CVXPY's status string and the solver's name.
    weights : ndarray (n, d) or None
        Primal weights recovered from the multipliers of the node-balance constraints, only when
        they verify (feasible, ``P(w)`` equal to the dual value within relative 1e-6); else None
        (then :meth:`weight` raises :class:`~gtvmodel.errors.UnsupportedError`).
    info : dict
        ``"lam"``: the lambda solved for; ``"error"``: the message of a failed solve returned
        with ``raise_on_failure=False``.

    Attributes
    ----------
    success : bool
        The solver reports ``"optimal"`` (an accepted inaccurate answer is not a success).

    Raises
    ------
    TypeError
        A required field missing, or an unknown or positional argument (the dataclass
        constructor); the values are stored as given, unchecked.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(2), dim=1, lam=0.5)
    >>> model.set_loss(0, gm.QuadraticLoss([1.0]))
    >>> dual = gm.solve_dual(model)
    >>> type(dual).__name__, dual.status, dual.success, dual.flows.shape
    ('DualSolution', 'optimal', True, (1, 1))
    """

    flows: np.ndarray | None
    objective: float
    status: str
    solver: str
    weights: np.ndarray | None = None
    info: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def success(self) -> bool:
        """The solver reports ``"optimal"``."""
        return self.status == cp.OPTIMAL




def node_conjugate_parts(model: ModelDeclaration, nodes: np.ndarray) -> list[NodePart]:
    """The split variables of ``sum_{i in nodes} h_i*(s_i)`` for library nodes, vectorized.

    ``h_i* = L_i* [] (eta_i ||.||_1)* [] (kappa_i ||.||^2)* [] sigma_{C_i}`` (infimal
    convolution, docs/conventions.md): one part per loss class (:meth:`LossBatch.dual_part`), then
    the regularizers (the box ``||s||_inf <= eta_i``, the cost ``||s||^2 / (4 kappa_i)``) and the
    support functions ``sigma_C`` of the constraints (box, nonnegativity, norm balls).  Row
    ``k`` of every contribution belongs to ``nodes[k]``.  Minimizing the summed costs subject
    to the constraints and ``sum(contrib) = S`` equals ``sum_k h_{nodes[k]}*(S_k)`` (24).
    ``nodes`` must not contain conic nodes.
    """
    st = model.structure()
    nodes = np.asarray(nodes, dtype=np.int64)
    k = len(nodes)
    row_of = np.full(model.num_nodes, -1, dtype=np.int64)
    row_of[nodes] = np.arange(k)
    inset = row_of >= 0
    d = model.dim
    parts = [b.dual_part(inset, row_of, k) for b in st.batches]
    parts += [_l1_part(nodes[st.l1[nodes] > 0], st.l1, row_of, k, d),
              _l2_part(nodes[st.l2[nodes] > 0], st.l2, row_of, k, d),
              _box_part(st.box, inset, row_of, k, d),
              _nonneg_part(st.nonneg[inset[st.nonneg]] if st.nonneg.size else st.nonneg,
                           row_of, k, d)]
    parts += [_normball_part(p, bidx, radii, inset, row_of, k, d)
              for p, (bidx, radii) in st.normball.items()]
    return [part for part in parts if part is not None]


def _l1_part(idx: np.ndarray, l1: np.ndarray, row_of: np.ndarray, k: int, d: int
             ) -> NodePart | None:
    """``(eta_i ||.||_1)*``: zero cost on ``||s_l1,i||_inf <= eta_i`` (nodes ``idx``)."""
    if not idx.size:
        return None
    eta = l1[idx][:, None]
    V = cp.Variable((len(idx), d), name="s_l1")
    P = scatter_rows(row_of, idx, k)

    def ev_l1(V: Any = V, P: Any = P, eta: np.ndarray = eta
              ) -> tuple[np.ndarray, np.ndarray]:
        return P @ np.clip(V.value, -eta, eta), np.zeros(k)

    return NodePart("l1", P @ V, cp.Constant(0.0), [cp.abs(V) <= eta], ev_l1)


def _l2_part(idx: np.ndarray, l2: np.ndarray, row_of: np.ndarray, k: int, d: int
             ) -> NodePart | None:
    """``(kappa_i ||.||^2)*(s) = ||s||^2 / (4 kappa_i)`` (nodes ``idx``); finite everywhere,
    so it absorbs any residual of the balance."""
    if not idx.size:
        return None
    kap = l2[idx]
    V = cp.Variable((len(idx), d), name="s_l2")
    P = scatter_rows(row_of, idx, k)

    def ev_l2(V: Any = V, P: Any = P, kap: np.ndarray = kap
              ) -> tuple[np.ndarray, np.ndarray]:
        s = V.value
        return P @ s, P @ ((s**2).sum(axis=1) / (4.0 * kap))

    # finite everywhere: absorbs the whole residual
    def ab_l2(Rz: np.ndarray, V: Any = V, P: Any = P) -> None:
        V.value = V.value + P.T @ Rz

    return NodePart("l2", P @ V, l2_conjugate_cvx(V, kap), [], ev_l2, ab_l2)


def _box_part(box: Any, inset: np.ndarray, row_of: np.ndarray, k: int, d: int
              ) -> NodePart | None:
    """The support function of the boxes ``[lo, hi]`` of the nodes in the set."""
    if box is None:
        return None
    bidx, blo, bhi = box
    sel = np.flatnonzero(inset[bidx])
    if not sel.size:
        return None
    lo, hi = blo[sel], bhi[sel]
    V = cp.Variable((sel.size, d), name="s_box")
    P = scatter_rows(row_of, bidx[sel], k)
    cost, cons = Box.support_rows_expression(V, lo, hi)

    def ev_box(V: Any = V, P: Any = P, lo: np.ndarray = lo, hi: np.ndarray = hi
               ) -> tuple[np.ndarray, np.ndarray]:
        s = Box.support_domain_projection(V.value, lo, hi)
        return P @ s, P @ Box.support_rows(s, lo, hi)

    def mag_box(V: Any = V, P: Any = P, lo: np.ndarray = lo, hi: np.ndarray = hi
                ) -> tuple[np.ndarray, np.ndarray]:
        s = Box.support_domain_projection(V.value, lo, hi)
        # the support's terms case by case (s_j > 0 only where hi_j is finite, s_j < 0
        # only where lo_j is: never inf * 0)
        with np.errstate(invalid="ignore"):
            terms = np.where(s > 0, s * hi, np.where(s < 0, s * lo, 0.0))
        return P @ np.abs(s), P @ np.abs(terms).sum(axis=1)

    return NodePart("box", P @ V, cost, cons, ev_box, None, mag_box)


def _nonneg_part(idx: np.ndarray, row_of: np.ndarray, k: int, d: int) -> NodePart | None:
    """The support function of ``w >= 0``: zero cost on ``s <= 0`` (nodes ``idx``)."""
    if not idx.size:
        return None
    V = cp.Variable((len(idx), d), name="s_nonneg")
    P = scatter_rows(row_of, idx, k)

    def ev_nn(V: Any = V, P: Any = P) -> tuple[np.ndarray, np.ndarray]:
        return P @ np.minimum(V.value, 0.0), np.zeros(k)

    return NodePart("nonneg", P @ V, cp.Constant(0.0), [V <= 0], ev_nn)


def _normball_part(p: float, bidx: np.ndarray, radii: np.ndarray, inset: np.ndarray,
                   row_of: np.ndarray, k: int, d: int) -> NodePart | None:
    """The support function ``r ||s||_q`` of the ``l_p`` balls of radius ``r`` of the nodes in
    the set (``1/p + 1/q = 1``)."""
    sel = np.flatnonzero(inset[bidx])
    if sel.size == 0:
        return None
    r = radii[sel]
    V = cp.Variable((sel.size, d), name="s_ball")
    P = scatter_rows(row_of, bidx[sel], k)
    cost, cons = NormBall.support_rows_expression(V, r, p)
    q = dual_exponent(p)

    def ev_ball(V: Any = V, P: Any = P, r: np.ndarray = r, q: float = q
                ) -> tuple[np.ndarray, np.ndarray]:
        # an upper bound of r ||s||_q in scaled form: exact enough for every q, never low
        s = V.value
        return P @ s, P @ mul_up(r, norm_rows_upper(s, q))

    return NodePart(f"normball{p:g}", P @ V, cost, cons, ev_ball)


@dataclass
class DualProblem:
    """The compiled dual flow problem and its handles."""

    problem: cp.Problem
    U: cp.Variable | None
    balance: cp.Constraint | None
    library: np.ndarray
    conic: np.ndarray
    #: ``lambda`` as a Parameter (set by :func:`compile_dual`): a new ``model.lam`` re-solves
    #: without recompiling (within one :meth:`~gtvmodel.terms.penalties.Penalty.conjugate_regime`).
    lam: ScaleParameter
    build_time: float
    #: The constraints of :func:`gtvmodel.duality.conic.conic_dual_terms` (their last entry's
    #: multiplier gives the conic nodes' weights, :func:`gtvmodel.duality.conic.conic_weights`).
    conic_constraints: list[cp.Constraint] = field(default_factory=list)
    #: Values of CVXPY Parameters inside conic nodes (:func:`gtvmodel.duality.conic.parameter_key`):
    #: their conic data is baked in as constants, so a change recompiles.
    conic_key: tuple = ()
    #: the penalty's conjugate regime at the ``lambda`` it was built for
    regime: Any = None


def compile_dual(model: ModelDeclaration) -> DualProblem:
    """Build the dual flow problem (24) as one vectorized CVXPY problem (cached on the model
    until it changes; ``lambda`` is a Parameter, set here to ``model.lam``)."""
    cached = model.cache.get("dual")
    regime = model.penalty.conjugate_regime(model.lam)
    if cached is not None and cached.regime == regime and (
            not cached.conic.size or cached.conic_key == _conic_key(model, cached.conic)):
        cached.lam.set(model.lam)
        return cached
    t0 = time.perf_counter()
    n, d, E = model.num_nodes, model.dim, model.num_edges
    lam = ScaleParameter(model.lam)
    conic = model.structure().conic
    library = np.setdiff1d(np.arange(n), conic)
    cons: list[cp.Constraint] = []
    costs: list[cp.Expression] = []
    if E:
        U = cp.Variable((E, d), name="U")
        S = -(model.incidence.T @ U)
        pen_cost, pen_cons = model.penalty.conjugate_parametric(U, model.edge_weights, lam)
        costs.append(pen_cost)
        cons += pen_cons
    else:
        U = None
        S = cp.Constant(np.zeros((n, d)))
    balance = None
    if library.size:
        parts = node_conjugate_parts(model, library)
        total: cp.Expression = cp.Constant(np.zeros((library.size, d)))
        for part in parts:
            total = total + part.contrib
            costs.append(part.cost)
            cons += part.constraints
        balance = total == S[library, :]
        cons.append(balance)
    if conic.size:
        # ---- conic nodes: compiled by gtvmodel.duality.conic, see the module docstring
        concave, ccons = conic_mod.conic_dual_terms(model, conic.tolist(), S[conic, :])
        costs.append(-concave)
        cons += ccons
    objective = cp.sum(cp.hstack(costs)) if len(costs) > 1 else (
        costs[0] if costs else cp.Constant(0.0))
    problem = cp.Problem(cp.Minimize(objective), cons)
    compiled = DualProblem(problem, U, balance, library, conic, lam,
                           time.perf_counter() - t0,
                           conic_constraints=ccons if conic.size else [],
                           conic_key=_conic_key(model, conic) if conic.size else (),
                           regime=regime)
    model.cache.put("dual", compiled)
    return compiled


def _conic_key(model: ModelDeclaration, conic: np.ndarray) -> tuple:
    return parameter_key(model, conic.tolist())


def solve_dual(model: ModelDeclaration, solver: str | None = None, *,
               accept_inaccurate: bool = False,
               verbose: bool = False, raise_on_failure: bool = True,
               **opts: Any) -> DualSolution:
    """Solve the dual flow problem (24) to high accuracy; see the module docstring.

    The solver policy is :func:`gtvmodel._solver.run_solver`'s (Clarabel by default, tight
    tolerances, :class:`~gtvmodel.errors.SolverError` on failure or inaccuracy unless
    ``accept_inaccurate``).  A dual that is unbounded above means an infeasible primal:
    :class:`~gtvmodel.errors.InfeasibleError`.  With ``raise_on_failure=False`` such outcomes
    are returned as a :class:`DualSolution` whose ``status`` is the failure's, with no flows
    and ``info["error"]`` the message (as :func:`gtvmodel.solve_exact` does).

    Parameters
    ----------
    model : ModelDeclaration
        The GTV minimization problem whose dual (24) is solved (a
        :class:`~gtvmodel.GTVModel` or any declaration of losses, penalty and ``lambda``).
    solver : str, optional
        A CVXPY solver name; None (default): Clarabel.
    accept_inaccurate : bool
        Accept an ``"optimal_inaccurate"`` status (``success`` is then False) instead of
        raising :class:`~gtvmodel.errors.SolverError`.
    verbose : bool
        Pass ``verbose=True`` to the solver.
    raise_on_failure : bool
        True (default): infeasible or failed solves raise; False: they are returned as a
        failed :class:`DualSolution`.

    Returns
    -------
    DualSolution
        The flows ``u`` ``(|E|, d)``, the dual value ``D(u)``, the status, the timings and
        the primal weights recovered from the multipliers where they verify (else None).

    Raises
    ------
    ParameterError
        ``solver`` not None or a string; ``accept_inaccurate``, ``verbose`` or
        ``raise_on_failure`` not a bool.
    SolverError
        ``solver`` not installed; the solver failed, stopped inaccurate (without
        ``accept_inaccurate``), reported the dual infeasible (the primal unbounded below) or
        returned non-finite flows -- unless ``raise_on_failure=False``.
    InfeasibleError
        The dual is unbounded above, so the primal is infeasible (naming the nodes with
        infeasible constraints), unless ``raise_on_failure=False``.

    Examples
    --------
    The dual of two nodes with data ``L_i(w) = (w - a_i)^2`` joined through a node without
    data at ``lambda = 0.5``: strong duality, ``D(u*) = P(w*)``, and the flows at the
    capacity ``lambda A_e``:

    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), dim=1, lam=0.5)
    >>> model.set_loss(0, gm.QuadraticLoss([1.0]))
    >>> model.set_loss(2, gm.QuadraticLoss([-1.0]))
    >>> dual = gm.solve_dual(model)
    >>> dual.success, round(dual.objective, 6)
    (True, 0.875)
    >>> np.round(dual.flows.ravel(), 4)
    array([0.5, 0.5])
    >>> np.allclose(dual.weights.ravel(), [0.75, 0.0, -0.75], atol=1e-6)
    True
    """
    name = check_solver(solver, "solve_dual")
    check_bool(accept_inaccurate, "accept_inaccurate", "solve_dual")
    check_bool(verbose, "verbose", "solve_dual")
    check_bool(raise_on_failure, "raise_on_failure", "solve_dual")
    try:
        return _solve_dual(model, solver, accept_inaccurate, verbose, opts)
    except (InfeasibleError, SolverError) as exc:
        if raise_on_failure:
            raise
        return cast(DualSolution, failed_result(DualSolution, Labels(model.nodes, model.edges),
                                                exc, name, objective=math.nan))


def _solve_dual(model: ModelDeclaration, solver: str | None, accept_inaccurate: bool,
                verbose: bool, opts: dict[str, Any]) -> DualSolution:
    """The body of :func:`solve_dual` once its arguments are checked."""
    before = model.cache.get("dual")
    compiled = compile_dual(model)
    fresh = compiled is not before
    try:
        name, comp, solve_time = run_solver(compiled.problem, solver, opts, verbose,
                                            accept_inaccurate, "solve_dual")
    except SolverError as exc:
        if exc.status in (cp.UNBOUNDED, cp.UNBOUNDED_INACCURATE):
            bad = find_infeasible_nodes(model)
            raise InfeasibleError(
                "solve_dual: the dual is unbounded, so the primal is infeasible"
                + (f": infeasible constraints at node(s) {', '.join(map(repr, bad))}"
                   if bad else "")) from None
        raise
    status = compiled.problem.status
    if status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        raise SolverError(f"solve_dual: {name} reports the dual infeasible; the primal is "
                          "unbounded below or has no dual attainment", status=status,
                          solver=name)
    E, d = model.num_edges, model.dim
    U = (np.asarray(compiled.U.value, dtype=float).reshape(E, d) if compiled.U is not None
         else np.zeros((0, d)))
    if not np.isfinite(U).all():
        raise SolverError(f"solve_dual: {name} returned non-finite flows", status=status,
                          solver=name)
    value = -float(compiled.problem.value)
    weights = _recover_weights(model, compiled, value)
    return DualSolution(
        flows=U, objective=value, status=status, solver=name,
        timings={"compile": (compiled.build_time if fresh else 0.0) + comp, "solve": solve_time},
        weights=weights, labels=Labels(model.nodes, model.edges), info={"lam": model.lam},
    )


def _recover_weights(model: ModelDeclaration, compiled: DualProblem, value: float
                     ) -> np.ndarray | None:
    """Weights from the node-balance multipliers, returned only if they verify."""
    W = np.zeros((model.num_nodes, model.dim))
    if compiled.library.size:
        mult = compiled.balance.dual_value if compiled.balance is not None else None
        if mult is None:
            return None
        # Lagrangian of min sum cost s.t. sum(parts) - S = 0: stationarity in the split
        # variables gives -mult in d(cost), i.e. w = -mult (checked numerically in tests).
        W[compiled.library] = -np.asarray(mult, dtype=float).reshape(-1, model.dim)
    if compiled.conic.size:
        Wc = conic_weights(model, compiled.conic.tolist(), compiled.conic_constraints)
        if Wc is None:
            return None
        W[compiled.conic] = Wc
    if not np.isfinite(W).all():
        return None
    with np.errstate(invalid="ignore", divide="ignore"):  # symbolic losses outside domains
        vals = model.loss_values(W)
    if not np.isfinite(vals).all():
        return None
    viol = model.constraint_violations(W)
    if viol.max(initial=0.0) > 1e-7 * max(1.0, float(np.abs(W).max())):
        return None
    P = model.objective(W)
    if abs(P - value) > 1e-6 * max(1.0, abs(value)):
        return None
    return W
