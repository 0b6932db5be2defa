"""Direct exact solvers of (16) on paths, trees and general graphs (issue 28 item 4).

With the penalty ``phi = ||.||_1`` (anisotropic TV, :class:`~gtvmodel.terms.penalties.Norm1`)
and node terms that separate per coordinate, (16) splits into ``d`` scalar problems

    minimize_x  sum_i (q_ij x_i^2 - 2 p_ij x_i + eta_i |x_i|) + sum_e lambda A_e |x_{e+} - x_{e-}|

(``q_ij = c_ij + kappa_i``, ``p_ij = b_ij``: the loss's diagonal-quadratic description
:meth:`~gtvmodel.terms.losses.LossBatch.diagonal_quadratic` -- ``||w - a||^2``, a squared
loss with a diagonal Gram matrix, 0 at nodes without data -- plus the ``l2``/``l1``
regularizers ``kappa_i ||w||^2``, ``eta_i ||w||_1``).  On a forest each is solved exactly by
dynamic programming (:mod:`gtvmodel.kernels.tv`: Johnson's O(n) algorithm on paths,
Kolmogorov-Pock-Rolinek's message passing on trees, O(n log n)), and the flows are exact too:
on a tree the node conditions (23) determine them, ``u_e`` being, up to the sign of
docs/conventions.md, the sum of the node subgradients over the subtree that ``e`` cuts off.
On a graph with cycles each is solved exactly by divide and conquer over levels with minimum
cuts (:mod:`gtvmodel.kernels.parametric_tv`: Hochbaum 2001, Chambolle and Darbon 2009), whose
last maximum flow on every fused set gives its exact flows.

:func:`direct_method` says which algorithm applies and why (or why none does);
:func:`solve_direct` solves and certifies the answer with
:func:`gtvmodel.certificates.certificate.certify` like every other solver.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validate import check_bool, check_option, check_scalar
from ..certificates.certificate import certify as certify_fn
from ..declaration import ModelDeclaration
from ..errors import UnsupportedError
from ..kernels import parametric_tv, tv
from ..results import Labels
from ..solution import Solution
from .uniqueness import uniqueness

__all__ = ["direct_method", "solve_direct", "DIRECT_METHODS", "DIRECT_ACCURACY"]

#: The algorithms of :func:`solve_direct`, by the graphs they need.
DIRECT_METHODS = ("path", "tree", "graph")
#: The certified relative gap (34) at which :attr:`Solution.success` holds by default.
DIRECT_ACCURACY = 1e-9


@dataclass(frozen=True)
class _ScalarTerms:
    """The node terms ``q_ij x^2 - 2 p_ij x + eta_i |x|`` of the scalar problems."""

    q: np.ndarray    # (n, d), >= 0
    p: np.ndarray    # (n, d), 0 where q = 0
    eta: np.ndarray  # (n,)


def _name(model: ModelDeclaration, i: int) -> str:
    return repr(model.nodes[int(i)])


def _scalar_terms(model: ModelDeclaration) -> _ScalarTerms | str:
    """The scalar node terms, or why the nodes do not separate per coordinate."""
    st = model.structure()
    if st.symbolic:
        return f"node {_name(model, st.symbolic[0])} has a symbolic loss"
    if st.constrained.size:
        return f"node {_name(model, st.constrained[0])} has a constraint"
    n, d = model.num_nodes, model.dim
    c = np.zeros((n, d))
    b = np.zeros((n, d))
    for batch in st.batches:
        desc = batch.diagonal_quadratic()
        if desc is None:
            return (f"node {_name(model, batch.nodes[0])} has a {batch.cls.__name__} (not a "
                    "diagonal quadratic sum_j c_j w_j^2 - 2 b_j w_j)")
        bad = np.flatnonzero(np.isnan(desc[0]).any(axis=1))
        if bad.size:
            return (f"node {_name(model, batch.nodes[bad[0]])} has a {batch.cls.__name__} "
                    "whose Hessian is not diagonal")
        c[batch.nodes], b[batch.nodes] = desc
    return _ScalarTerms(c + st.l2[:, None], b, np.asarray(st.l1, dtype=float))


def _penalty_reason(model: ModelDeclaration) -> str | None:
    """Why the penalty does not separate per coordinate (None: it is ``||.||_1``)."""
    pen = model.penalty
    if pen.is_norm and getattr(pen, "p", None) == 1.0:
        return None
    return (f"penalty {type(pen).__name__} is not separable per coordinate (the direct "
            "solvers need Norm1)")


def _graph_method(model: ModelDeclaration) -> tuple[str, str]:
    """``"path"`` on a forest of paths, ``"tree"`` on another forest, else ``"graph"``; the
    reason."""
    st = model.structure()
    n, m, k = model.num_nodes, model.num_edges, st.component_count
    if m != n - k:
        return "graph", (f"the graph has a cycle ({m} edges; a forest on {n} nodes with {k} "
                         f"components has {n - k}): levels by minimum cuts")
    if m and int(st.degrees.max()) > 2:
        i = int(np.argmax(st.degrees))
        return "tree", (f"the graph is a forest but not of paths (node {_name(model, i)} has "
                        f"degree {int(st.degrees[i])})")
    return "path", "the graph is a forest of paths"


def direct_method(model: ModelDeclaration) -> tuple[str | None, str]:
    """The direct algorithm that solves ``model`` exactly -- ``"path"``, ``"tree"``,
    ``"graph"`` or None -- and the reason, naming the penalty or node property that rules it
    out, or the graph property that chose the algorithm.

    Applicable: the penalty ``Norm1``, every node loss a diagonal quadratic
    (:meth:`~gtvmodel.terms.losses.LossBatch.diagonal_quadratic`: ``QuadraticLoss``, a
    ``SquaredLoss`` whose Gram matrix ``X^T X`` is diagonal, no loss or ``ZeroLoss``) with
    any ``l1``/``l2`` regularizers and no node constraints; ``"path"`` on a forest whose
    every node has at most two edges, ``"tree"`` on another forest, ``"graph"`` (levels by
    minimum cuts, :mod:`gtvmodel.kernels.parametric_tv`) on a graph with a cycle.

    Parameters
    ----------
    model : ModelDeclaration
        The declared problem (16) (a :class:`~gtvmodel.model.GTVModel`).

    Returns
    -------
    method : str or None
        ``"path"``, ``"tree"``, ``"graph"``, or None when no direct algorithm applies.
    reason : str
        Why (the penalty, node or graph property that rules it out, or what makes it apply).

    Raises
    ------
    GTVError
        Only for a model that cannot be evaluated at all (a bad declaration); a model the
        direct algorithms do not solve gives ``(None, reason)``, not an error.

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(4), dim=2, penalty=gm.Norm1(), lam=0.5)
    >>> model.set_loss(0, gm.QuadraticLoss([1.0, 2.0], l1=0.1))
    >>> gm.direct_method(model)
    ('path', 'Norm1 penalty, diagonal quadratic node terms; the graph is a forest of paths')
    >>> gm.direct_method(model.variant(graph=nx.star_graph(3)))[0]
    'tree'
    >>> gm.direct_method(model.variant(graph=nx.cycle_graph(4)))[0]
    'graph'
    >>> gm.direct_method(model.variant(penalty=gm.Norm2()))
    (None, 'penalty Norm2 is not separable per coordinate (the direct solvers need Norm1)')
    """
    method, reason, _ = _plan(model)
    return method, reason


def _plan(model: ModelDeclaration) -> tuple[str | None, str, _ScalarTerms | None]:
    """:func:`direct_method`'s answer and the scalar node terms (None if not applicable)."""
    reason = _penalty_reason(model)
    terms = None
    if reason is None:
        found = _scalar_terms(model)
        terms, reason = (None, found) if isinstance(found, str) else (found, None)
    if reason is not None:
        return None, reason, None
    method, why = _graph_method(model)
    return method, f"Norm1 penalty, diagonal quadratic node terms; {why}", terms


def solve_direct(model: ModelDeclaration, *, method: str = "auto", certify: bool = True,
                 accuracy: float = DIRECT_ACCURACY) -> Solution:
    """Solve (16) exactly by the direct algorithm of :func:`direct_method`; returns weights,
    exact flows and their certificate.

    ``method``: ``"auto"`` (the algorithm :func:`direct_method` names), ``"tree"`` (the tree
    algorithm on any forest, paths included), ``"path"`` (a forest of paths only) or
    ``"graph"`` (levels by minimum cuts, :mod:`gtvmodel.kernels.parametric_tv`, on any
    graph, forests included).
    Raises :class:`~gtvmodel.errors.UnsupportedError` with the reason when the model is not
    one the direct algorithms solve.

    The weights are the minimizer up to rounding (where it is not unique, e.g. at nodes
    without data, ``l1`` or ``l2``, one of the minimizers: a tree whose nodes all lack data
    takes 0); the flows satisfy the node conditions (23) ``-(D^T u)_i in dL_i(w_i)`` and the edge
    conditions ``u_e in lambda A_e d||.||_1(w_{e+} - w_{e-})`` up to rounding.  With
    ``certify=True`` (default) the answer is certified with
    :func:`gtvmodel.certificates.certificate.certify` (``Solution.certificate``,
    ``info["certified_gap"]``, ``info["certified_relative_gap"]``) and
    :attr:`Solution.success` says whether the certified relative gap (34) is at most
    ``accuracy``; ``certify=False`` skips it (``success`` is then True).
    ``info["route"] = "direct"``, ``info["direct_method"]`` the algorithm and
    ``info["route_reason"]`` why; ``timings``: ``"setup"`` (node terms and the forest's
    order), ``"kernel"`` (the weights; with ``"graph"`` the flows too), ``"flows"`` and
    ``"certificate"``.

    Parameters
    ----------
    model : ModelDeclaration
        The declared problem (16) (a :class:`~gtvmodel.model.GTVModel`).
    method : {"auto", "path", "tree", "graph"}, default "auto"
        The algorithm: the one :func:`direct_method` names, the tree dynamic programming on
        any forest, the path algorithm (a forest of paths only), or the minimum cuts on any
        graph.
    certify : bool, default True
        Certify the answer (34) with :func:`~gtvmodel.certificates.certificate.certify`.
    accuracy : float, default 1e-9
        The certified relative gap at or below which :attr:`Solution.success` is True.

    Returns
    -------
    Solution
        ``weights`` ``(n, d)``, exact ``flows`` ``(|E|, d)``, ``objective``, ``certificate``,
        ``info`` and ``timings`` as above.

    Raises
    ------
    UnsupportedError
        The model is not one the direct algorithms solve (the message gives the reason).
    ParameterError
        A bad ``method``, ``certify`` or ``accuracy``.

    Examples
    --------
    Three nodes on a path with ``L_i(w) = ||w - a_i||^2``, ``a = (1, 0, -1)``, ``Norm1`` at
    ``lambda = 0.5`` (``P* = 0.875``); both flows sit at the capacity ``lambda A_e = 0.5``:

    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), dim=1, penalty=gm.Norm1(), lam=0.5)
    >>> model.set_losses({i: gm.QuadraticLoss([a]) for i, a in enumerate([1.0, 0.0, -1.0])})
    >>> sol = gm.solve_direct(model)
    >>> sol.weights.ravel(), sol.flows.ravel(), sol.objective
    (array([ 0.75,  0.  , -0.75]), array([0.5, 0.5]), 0.875)
    >>> sol.info["direct_method"], sol.certificate.gap <= 1e-12
    ('path', True)
    """
    t0 = time.perf_counter()
    method = check_option(method, "method", ("auto",) + DIRECT_METHODS, "solve_direct")
    certify = check_bool(certify, "certify", "solve_direct")
    accuracy = check_scalar(accuracy, "accuracy", min_val=0.0, include_boundaries="neither",
                            where="solve_direct")
    chosen, reason, terms = _plan(model)
    if chosen is None or terms is None:
        raise UnsupportedError(f"solve_direct: no direct algorithm applies: {reason}")
    if method == "path" and chosen != "path":
        raise UnsupportedError(f"solve_direct: method='path' needs a forest of paths, but {reason}")
    if method == "tree" and chosen == "graph":
        raise UnsupportedError(f"solve_direct: method='tree' needs a forest, but {reason}")
    if method in ("tree", "graph"):
        chosen = method
    st = model.structure()
    timings: dict[str, float] = {}
    if chosen == "graph":
        timings["setup"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        W, U = parametric_tv.tv_graph(model.num_nodes, st.edges, model.capacities, terms.q,
                                      terms.p, terms.eta, st.components)
        timings["kernel"] = time.perf_counter() - t1
        timings["flows"] = 0.0
    else:
        W, U = _forest_solve(model, terms, chosen, timings, t0)
    info: dict[str, Any] = {"route": "direct", "direct_method": chosen, "route_reason": reason,
                            "lam": model.lam}
    cert = None
    success = True
    if certify:
        t1 = time.perf_counter()
        cert = certify_fn(model, W, U, tol=accuracy)
        timings["certificate"] = time.perf_counter() - t1
        success = cert.success_at(accuracy)
        info.update(certified_gap=cert.gap, certified_relative_gap=cert.relative_gap)
    uniq = uniqueness(model)
    model.set_variable_values(W)
    return Solution(weights=W, flows=U, objective=model.objective(W), status="optimal",
                    success=success, solver="direct", timings=timings,
                    labels=Labels(model.nodes, model.edges), info=info, certificate=cert,
                    unique=uniq.unique, unique_reason=uniq.reason)


def _forest_solve(model: ModelDeclaration, terms: _ScalarTerms, chosen: str,
                  timings: dict[str, float], t0: float) -> tuple[np.ndarray, np.ndarray]:
    """``(W, U)`` by the path or tree kernel (:mod:`gtvmodel.kernels.tv`) on the forest's
    order, and their flows; fills ``timings`` ("setup", "kernel", "flows")."""
    order, parent, pedge, _ = tv.forest_order(model.num_nodes, model.structure().edges)
    child = np.flatnonzero(parent >= 0)
    t = np.zeros(model.num_nodes)
    t[child] = model.capacities[pedge[child]]
    timings["setup"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    kernel = tv.tv_path if chosen == "path" else tv.tv_tree
    W = kernel(order, parent, t, terms.q, terms.p, terms.eta)
    timings["kernel"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    U = _flows(model, terms, order, parent, pedge, t, W)
    timings["flows"] = time.perf_counter() - t1
    return W, U


def _flows(model: ModelDeclaration, terms: _ScalarTerms, order: np.ndarray,
           parent: np.ndarray, pedge: np.ndarray, t: np.ndarray, W: np.ndarray) -> np.ndarray:
    """The exact flows at the minimizer ``W`` (:func:`gtvmodel.kernels.tv.tree_flows`):
    the subtree sum ``sigma_c`` of node subgradients below the edge ``e`` joining ``c`` to
    its parent is ``-(D^T u)`` summed over the subtree, that is ``-u_e`` when ``c`` is the
    head ``e+`` (docs/conventions.md) and ``u_e`` when it is the tail."""
    lo, hi = tv.node_subgradients(terms.q, terms.p, terms.eta, W)
    sigma = tv.tree_flows(order, parent, t, lo, hi, W, terms.q > 0)
    child = np.flatnonzero(parent >= 0)
    U = np.zeros((model.num_edges, model.dim))
    sign = np.where(child < parent[child], -1.0, 1.0)
    U[pedge[child]] = sign[:, None] * sigma[child]
    return U
