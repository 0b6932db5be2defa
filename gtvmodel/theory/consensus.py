"""The consensus threshold ``lambda_crit`` (docs/conventions.md): the smallest ``lambda`` at which
the pooled minimizer on every node is optimal for (16), and the minimum-congestion flow problem
behind it (optimality condition (28))."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import cvxpy as cp
import numpy as np
import scipy.sparse.linalg as spla

from .._solver import check_solver, run_solver
from .._validate import check_option
from ..certificates.recovery import balance_flows
from ..declaration import ModelDeclaration
from ..errors import ParameterError, PenaltyError, SolverError
from .constants import theorem2_constants
from .cuts import CutNetwork, resolve_flow_func
from .partition import Partition

__all__ = ["consensus_threshold", "min_congestion", "threshold_flow_1d"]


def min_congestion(model: ModelDeclaration, G: np.ndarray, solver: str | None, what: str) -> float:
    """``min_u max_e ||u_e||_* / A_e`` subject to ``D^T u = -G`` (one vectorized CVXPY problem).

    ``G`` must sum to zero on every connected component (else no flow exists: ``inf``); its
    tiny solver residual is projected away first.  ``what`` names the caller in solver errors.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)  # triangles joined by edge (2, 3)
    >>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> import numpy as np
    >>> G = np.array([[2.0], [2.0], [2.0], [-2.0], [-2.0], [-2.0]])  # 6 units over edge (2, 3)
    >>> round(min_congestion(model, G, None, "example"), 4)
    6.0
    >>> min_congestion(model, G + 1.0, None, "example")  # demands do not balance
    inf
    """
    n, d = G.shape
    E = model.num_edges
    st = model.structure()
    ncomp, comp = st.component_count, st.components
    sums = np.zeros((ncomp, d))
    np.add.at(sums, comp, G)
    scale = max(1.0, float(np.abs(G).sum()))
    if np.abs(sums).max() > 1e-6 * scale:
        return math.inf
    G = G - (sums / np.bincount(comp, minlength=ncomp)[:, None])[comp]
    if E == 0:
        return 0.0
    if np.abs(G).max() <= 1e-14 * scale:
        return 0.0
    # scale demands and capacities to unit size (u = g_s u', A = a_s A', t = t' g_s / a_s):
    # interior-point accuracy is relative, tiny gradients otherwise end "inaccurate"
    g_s = float(np.abs(G).max())
    a_s = float(model.edge_weights.max())
    # one node balance per component is implied by the others (the demands balance): dropped,
    # so the equality constraints have full row rank (redundant rows made Clarabel fail on a
    # chain with edge weights 1 and 1e-3, tests/test_theory.py)
    keep = np.ones(n, dtype=bool)
    keep[np.unique(comp, return_index=True)[1]] = False
    DTk = model.incidence.T.tocsr()[keep]
    if E == n - ncomp:
        tree = _forest_congestion(model, DTk, G[keep])
        if tree is not None:
            return tree
    U = cp.Variable((E, d), name="u")
    t = cp.Variable(nonneg=True, name="t")
    cons = [DTk @ U == -G[keep] / g_s,
            *model.penalty.dual_ball_constraints(U, t * (model.edge_weights / a_s))]
    prob = cp.Problem(cp.Minimize(t), cons)
    name, _, _ = run_solver(prob, solver, {}, False, True, what)
    if prob.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):  # pragma: no cover
        raise SolverError(f"{what}: {name} reports the flow problem infeasible although the "
                          "demands balance", status=prob.status, solver=name)
    if prob.status == cp.OPTIMAL:
        return float(t.value) * g_s / a_s
    return _balanced_congestion(model, G / g_s, U.value, what, name, prob.status) * g_s


def _balanced_congestion(model: ModelDeclaration, G: np.ndarray, U: Any, what: str, name: str,
                         status: str) -> float:
    """The congestion ``max_e ||u_e||_* / A_e`` of an inaccurate solver's flows ``U`` made to
    meet the balance ``D^T u = -G`` exactly: ``U`` plus the electrical flow of the residual
    (:func:`~gtvmodel.certificates.recovery.balance_flows`, per connected component).  A
    feasible flow's congestion bounds the minimum from above, so ``congestion <= 1 + tol``
    stays a proof where the solver ends "inaccurate" at the degenerate optimum 1 of
    :func:`verify_recovery` (its lifted optimum puts every boundary edge at capacity)."""
    if U is None:
        raise SolverError(f"{what}: {name} stopped with status {status!r} and no flows",
                          status=status, solver=name)
    D = model.incidence.tocsr()
    U = np.asarray(U, dtype=float)
    U = U + balance_flows(D, np.ones(D.shape[0]), model.structure().components,
                          -G - D.T @ U)
    return float(np.max(model.penalty.dual_norm(U) / model.edge_weights))


def _forest_congestion(model: ModelDeclaration, DTk: Any, Gk: np.ndarray) -> float | None:
    """On a forest (``|E| = n - components``) the flows are fixed by the demands: the reduced
    balance ``DTk u = -Gk`` (one node per component dropped) is square and nonsingular (a
    tree's incidence matrix is unimodular), so the congestion is ``max_e ||u_e||_* / A_e`` of
    its solution, without an optimization.  None when the penalty has no dual norm (the
    caller's conic problem decides)."""
    U = spla.spsolve(DTk.tocsc(), -Gk)
    U = np.asarray(U, dtype=float).reshape(DTk.shape[1], Gk.shape[1])
    try:
        norms = model.penalty.dual_norm(U)
    except PenaltyError:
        return None
    return float(np.max(norms / model.edge_weights))


def threshold_flow_1d(model: ModelDeclaration, g: np.ndarray, flow_func: Callable[...,
                       Any]) -> float:
    """``max_S |g(S)| / cut(S)`` for ``d = 1`` by Dinkelbach's iteration on max-flows.

    The exact ``lambda_crit`` of :func:`consensus_threshold` for scalar parameters: the
    minimum congestion of the demands ``g_i = L_i'(w_bar)`` (28) equals the largest ratio of
    a set's net demand to its cut (max-flow min-cut).  ``flow_func`` is a networkx max-flow
    function; ``inf`` when a component's demands do not balance.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)  # triangles joined by edge (2, 3)
    >>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> import numpy as np
    >>> from networkx.algorithms.flow import preflow_push
    >>> threshold_flow_1d(model, np.array([2.0, 2.0, 2.0, -2.0, -2.0, -2.0]), preflow_push)
    6.0
    """
    n = model.num_nodes
    st = model.structure()
    h, t, A = st.edges[:, 0], st.edges[:, 1], st.edge_weights
    ncomp, comp = st.component_count, st.components
    scale = max(1.0, float(np.abs(g).sum()))
    if np.abs(np.bincount(comp, g, minlength=ncomp)).max() > 1e-6 * scale:
        return math.inf
    if n == 1 or np.abs(g).max() <= 1e-14 * scale:
        return 0.0
    deg = st.weighted_degrees
    net = CutNetwork(n, h, t, A, flow_func, sink_arcs=True)
    net.set_source(np.maximum(g, 0.0))
    net.set_sink(np.maximum(-g, 0.0))
    lam = float(np.max(np.abs(g) / np.where(deg > 0, deg, np.inf)))
    while True:
        net.set_edges(lam * A)
        S = net.min_cut(net.t)
        cut = net.cut(S)
        gS = float(g[S].sum())
        if not (cut > 0 and gS > lam * cut):
            break
        lam = gS / cut
    return lam


def consensus_threshold(model: ModelDeclaration, *, method: str = "auto", solver: str | None = None,
                        flow_func: Callable[..., Any] | None = None) -> float:
    """``lambda_crit``: the constant solution ``w_i = w_bar`` is optimal iff ``lam >= lambda_crit``.

    ``w_bar = argmin sum_i L_i`` (pooled).  By the optimality conditions (28), ``w_i = w_bar``
    is optimal at ``lam`` iff a flow exists with ``(D^T u)_i = -grad L_i(w_bar)`` and
    ``||u_e||_* <= lam A_e``, hence (docs/conventions.md)

        lambda_crit = min_u max_e ||u_e||_* / A_e   subject to   D^T u = -grad L(w_bar).

    ``method="flow"`` (default for ``d = 1``): ``max_S |sum_{i in S} L_i'(w_bar)| / cut(S)``,
    exact by Dinkelbach's iteration on networkx max-flows; ``method="convex"`` (default for
    ``d > 1``, any norm penalty): the convex program above, one vectorized CVXPY problem with
    the sparse incidence.  ``inf`` when the graph is disconnected and a component's gradients
    do not balance.  Needs the same losses as :func:`check_well_connected` and a strongly
    convex pooled loss (a unique ``w_bar``).  ``flow_func`` is a networkx max-flow function
    for ``method="flow"`` (default None: ``preflow_push``, see :func:`check_well_connected`).

    Parameters
    ----------
    model : ModelDeclaration
        Smooth library losses without node constraints (as for
        :func:`check_well_connected`), a norm penalty, a strongly convex pooled loss.
    method : {"auto", "flow", "convex"}, default "auto"
        ``"flow"`` (``d = 1`` only): Dinkelbach's iteration on max-flows; ``"convex"``: the
        convex program above; ``"auto"``: ``"flow"`` for ``d = 1``, ``"convex"`` otherwise.
    solver : str or None, default None
        CVXPY solver of ``method="convex"`` (None: Clarabel).
    flow_func : callable or None, default None
        networkx max-flow function of ``method="flow"``.

    Returns
    -------
    float
        ``lambda_crit >= 0`` (``inf`` if no finite ``lambda`` makes the consensus optimal).

    Raises
    ------
    UnsupportedError
        A loss, node constraint or penalty outside the supported ones (named).
    ParameterError
        An unknown ``method``, or ``"flow"`` with ``d > 1``.
    SolverError
        The convex program could not be solved accurately.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)  # triangles joined by edge (2, 3)
    >>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
    ...     model.set_loss(i, gm.QuadraticLoss([a]))
    >>> from gtvmodel import theory
    >>> round(theory.consensus_threshold(model), 6)  # 6 units of gradient over one edge
    6.0
    >>> round(theory.consensus_threshold(model, method="convex"), 4)
    6.0
    """
    check_option(method, "method", ("auto", "flow", "convex"), where="consensus_threshold")
    check_solver(solver, "consensus_threshold")
    if method == "flow" and model.dim != 1:
        raise ParameterError(f"method='flow' needs d = 1 (the model has d = {model.dim}); "
                             "use method='convex'")
    func = resolve_flow_func(flow_func)
    n = model.num_nodes
    part = Partition([0], [np.arange(n)], np.zeros(n, dtype=np.int64))
    k_ = theorem2_constants(model, part, solver)
    G = model.loss_gradients(np.repeat(k_.wbar, n, axis=0))
    if method == "flow" or (method == "auto" and model.dim == 1):
        return threshold_flow_1d(model, G[:, 0], func)
    return min_congestion(model, G, solver, "consensus_threshold")

