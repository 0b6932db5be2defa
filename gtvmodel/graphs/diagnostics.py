"""What a sparsifier kept and what it cost.

* :func:`graph_diagnostics`: edges kept (and created), connected components (the nullity of
  the Laplacian and of the incidence matrix ``D``), and the constant ``M`` of thesis 002;
* :func:`incidence_constant`: ``M``, the largest column norm of the incidence pseudo-inverse
  ``D^+`` ("Distributed Data Learning with Knowledge Transmission Topology", Section 2.6, the
  error bound ``O_p(M sqrt(log r) ||D beta_0||_1)`` and Lemmas 2.6.2-2.6.3: ``M -> 1`` for a
  star, ``M = sqrt(n/4)`` for a chain of even length);
* :func:`sparsification_cost`: solve the model on a sparsified graph, then **certify that
  solution on the full graph's problem** (:func:`gtvmodel.certify`, flows repaired): a sound
  bound on the accuracy the sparsification gave away.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import scipy.sparse as sp

from .._validate import check_bool, check_int
from ..certificates.certificate import Certificate, certify
from ..declaration import ModelDeclaration
from ..errors import GraphError, ParameterError
from ..results import Labels, Result
from ..solve.exact import solve_exact
from ._laplacian import LaplacianSolver, edge_arrays, incidence_columns

__all__ = ["GraphDiagnostics", "SparsificationCost", "graph_diagnostics", "incidence_constant",
           "sparsification_cost"]


@dataclass(frozen=True)
class GraphDiagnostics:
    """Size and shape of a (sparsified) graph; see :func:`graph_diagnostics`.

    Attributes
    ----------
    nodes, edges : int
        ``|V|`` and ``|E|``.
    components : int
        Connected components ``c`` (the nullity of the Laplacian and of ``D``).
    edges_kept : int or None
        Edges also in the full graph (None without ``full``).
    edges_created : int or None
        Edges not in the full graph (``chain``, ``star``).
    fraction_kept : float or None
        ``edges / |E_full|``.
    M : float or None
        :func:`incidence_constant` (None when not computed).
    """

    nodes: int
    edges: int
    components: int
    edges_kept: int | None = None
    edges_created: int | None = None
    fraction_kept: float | None = None
    M: float | None = None


def graph_diagnostics(G: nx.Graph, full: nx.Graph | None = None, *,
                      constant: bool = True, max_edges: int = 20_000) -> GraphDiagnostics:
    """:class:`GraphDiagnostics` of ``G``, compared with the ``full`` graph it sparsifies when
    given; ``constant``: also the thesis' ``M`` (:func:`incidence_constant`, left out (None)
    when ``G`` has more than ``max_edges`` edges).

    Examples
    --------
    >>> import networkx as nx
    >>> d = graph_diagnostics(nx.path_graph(4), nx.complete_graph(4))
    >>> d.edges, d.components, d.edges_kept, d.fraction_kept, round(d.M, 12)  # sqrt(4/4)
    (3, 1, 3, 0.5, 1.0)
    """
    check_bool(constant, "constant", "graph_diagnostics")
    max_edges = check_int(max_edges, "max_edges", min_val=0, where="graph_diagnostics")
    E = edge_arrays(G, None, "graph_diagnostics")
    c = LaplacianSolver(E.n, E.i, E.j, E.w).count
    kept = created = frac = None
    if full is not None:
        _check_same_nodes(G, full)
        F = edge_arrays(full, None, "graph_diagnostics(full)")
        kept = sum(1 for a, b in G.edges() if full.has_edge(a, b))
        created, frac = E.m - kept, E.m / max(F.m, 1)
    M = incidence_constant(G) if constant and E.m <= max_edges else None
    return GraphDiagnostics(nodes=E.n, edges=E.m, components=c, edges_kept=kept,
                            edges_created=created, fraction_kept=frac, M=M)


def _check_same_nodes(G: nx.Graph, full: nx.Graph) -> None:
    """A sparsifier keeps the full graph's nodes: :class:`GraphError` naming a node that only
    one of ``G`` and ``full`` has (as :func:`sparsification_cost` does for its model)."""
    if not isinstance(full, nx.Graph):
        raise GraphError(f"graph_diagnostics: full must be a networkx.Graph, got "
                         f"{type(full).__name__}")
    if G.number_of_nodes() == full.number_of_nodes() and all(v in full for v in G):
        return
    node = next(iter(set(G.nodes).symmetric_difference(full.nodes)))
    side = "G" if node in G else "full"
    raise GraphError(f"graph_diagnostics: node {node!r} is only in {side}; G and full must "
                     "have the same nodes (a sparsifier keeps every node)")


def incidence_constant(G: nx.Graph, chunk: int = 256) -> float:
    """The constant ``M = max_e ||D^+ [:, e]||_2`` of thesis 002 (Section 2.6): the largest
    column norm of the pseudo-inverse of the (unweighted, as in the thesis) incidence matrix
    ``D`` (``|E| x n``).  Since ``D^+ = L^+ D^T`` with ``L = D^T D``, column ``e`` is
    ``L^+ (e_i - e_j)``: one sparse solve per edge (grounded Laplacian, chunks of ``chunk``
    right-hand sides), so it is meant for moderate graphs.  0 for a graph without edges.

    Examples
    --------
    >>> import networkx as nx, numpy as np
    >>> bool(np.isclose(incidence_constant(nx.path_graph(6)), np.sqrt(6 / 4)))  # Lemma 2.6.3
    True
    >>> bool(np.isclose(incidence_constant(nx.star_graph(9)), np.sqrt(9 / 10)))  # Lemma 2.6.2
    True
    """
    chunk = check_int(chunk, "chunk", min_val=1, where="incidence_constant")
    E = edge_arrays(G, None, "incidence_constant")
    solver = LaplacianSolver(E.n, E.i, E.j, E.w)
    best = 0.0
    for lo in range(0, E.m, chunk):
        X = solver.solve(incidence_columns(E.n, E.i[lo:lo + chunk], E.j[lo:lo + chunk]))
        best = max(best, float(np.sqrt((X ** 2).sum(axis=0)).max()))
    return best


@dataclass(kw_only=True)
class SparsificationCost(Result):
    """The certified cost of solving (16) on a sparsified graph; see
    :func:`sparsification_cost`.  The shared vocabulary (:meth:`weight`, :meth:`to_dict`, ...)
    is :class:`gtvmodel.results.Result`'s, with the full model's labels.

    Attributes
    ----------
    weights : ndarray (n, d)
        The sparse solution ``W~`` in the *full* model's node order.
    status : str
        ``"certified"`` when the certificate on the full problem is finite, else the
        certificate's status (``"infinite_gap"``).
    gap : float
        Certified suboptimality on the full problem: ``gap >= P(W~) - P*`` (34).
    relative_gap : float
        ``gap / max(1, |P(W~)|)``.
    full_value : float
        ``P(W~)``: the full problem's objective at the sparse solution.
    sparse_objective : float
        The sparse problem's optimal value.
    edges_full, edges_sparse : int
        ``|E|`` of the two graphs.
    time_sparse : float
        Seconds of the sparse exact solve (compile and solve).
    time_full : float or None
        Seconds of the full exact solve (``full_solution=True``), measured the same way.
    speedup : float or None
        ``time_full / time_sparse``.
    full_objective : float or None
        ``P*`` as the full exact solve reports it.
    suboptimality : float or None
        ``P(W~) - P*`` from the full exact solve (``<= gap`` up to that solve's accuracy).
    weight_distance : float or None
        ``||W~ - W*||_F`` to the full solution ``W*``.
    certificate : Certificate
        The certificate on the full model (its flows are the repaired dual point).
    timings : dict
        ``"sparse_solve"``, ``"certify"`` and, with ``full_solution``, ``"full_solve"``.
    """

    weights: np.ndarray
    status: str
    gap: float
    relative_gap: float
    full_value: float
    sparse_objective: float
    edges_full: int
    edges_sparse: int
    time_sparse: float
    time_full: float | None = None
    speedup: float | None = None
    full_objective: float | None = None
    suboptimality: float | None = None
    weight_distance: float | None = None
    certificate: Certificate | None = field(default=None, repr=False)
    _BULKY = ("certificate",)

    @property
    def success(self) -> bool:
        """True when the gap on the full problem is finite (a certified cost)."""
        return bool(np.isfinite(self.gap))


def sparsification_cost(model: ModelDeclaration, sparse_graph: nx.Graph, *,
                        weight: Hashable | None = "weight", full_solution: bool = False,
                        solver: str | None = None, tol: float = 1e-6) -> SparsificationCost:
    """Solve ``model`` (16) on ``sparse_graph`` and certify that solution on the full model.

    The sparse model is ``model.variant(graph=sparse_graph, weight=weight)``: the same losses
    ``L_i``, constraints ``C_i``, penalty ``phi`` and ``lambda``, the sparse graph's edges and
    weights ``A_e`` (it must have exactly the model's nodes; it may have edges the full graph
    lacks).
    Its exact solution ``W~`` (:func:`gtvmodel.solve_exact`) is certified on the full problem
    by :func:`gtvmodel.certify`, twice, keeping the smaller gap (both are sound): with flows
    built from ``W~``, and with the sparse solution's flows carried to the full graph's edges
    (zero on edges the sparse graph lacks; flows on created edges dropped), each repaired to a
    dual-feasible point.  For a subgraph with unchanged weights the carried flows are already
    dual feasible and optimal for the sparse problem, so the gap is at most
    ``P(W~) - P~*``, the omitted edges' share ``lambda sum_{e not kept} A_e phi(w~_{e+} -
    w~_{e-})`` (plus tolerances).  ``gap >= P(W~) - P*`` is the certified suboptimality on the
    full problem, whatever the sparsifier.  ``full_solution=True`` also solves the full model
    exactly (the same way, timed side by side) for the speed-up, ``P(W~) - P*`` and
    ``||W~ - W*||_F``.  ``tol`` is the certificate's tolerance (:func:`gtvmodel.certify`).

    Examples
    --------
    >>> import networkx as nx, gtvmodel as gm
    >>> G = nx.complete_graph(6)
    >>> model = gm.GTVModel(G, dim=1, lam=0.1)
    >>> for i in G:
    ...     model.set_loss(i, gm.QuadraticLoss([float(i % 2)]))
    >>> cost = sparsification_cost(model, G)  # every edge kept: nothing given away
    >>> cost.success, cost.gap < 1e-6
    (True, True)
    """
    check_bool(full_solution, "full_solution", "sparsification_cost")
    if not isinstance(model, ModelDeclaration):
        raise ParameterError("sparsification_cost: model must be a GTVModel, got "
                             f"{type(model).__name__}")
    sparse = model.variant(graph=sparse_graph, weight=weight)
    t0 = time.perf_counter()
    sol = solve_exact(sparse, solver, certify=False)
    t_sparse = time.perf_counter() - t0
    order = np.array([sparse.index(v) for v in model.nodes])
    W = sol.weights[order]
    t0 = time.perf_counter()
    cert = certify(model, W, None, tol=tol, solver=solver)
    if model.num_edges and sparse.num_edges:
        alt = certify(model, W, _mapped_flows(model, sparse, sol.flows), tol=tol, solver=solver)
        cert = alt if alt.gap < cert.gap else cert
    t_cert = time.perf_counter() - t0
    out = SparsificationCost(
        weights=W, status="certified" if np.isfinite(cert.gap) else str(cert.status),
        gap=float(cert.gap), relative_gap=float(cert.relative_gap),
        full_value=float(cert.primal_value), sparse_objective=float(sol.objective),
        edges_full=model.num_edges, edges_sparse=sparse.num_edges, time_sparse=t_sparse,
        certificate=cert, labels=Labels(model.nodes, model.edges),
        timings={"sparse_solve": t_sparse, "certify": t_cert})
    if full_solution:
        t0 = time.perf_counter()
        full = solve_exact(model, solver, certify=False)
        out.time_full = out.timings["full_solve"] = time.perf_counter() - t0
        out.speedup = out.time_full / max(t_sparse, 1e-12)
        out.full_objective = float(full.objective)
        out.suboptimality = out.full_value - out.full_objective
        out.weight_distance = float(np.linalg.norm(W - full.weights))
    return out


def _mapped_flows(model: ModelDeclaration, sparse: ModelDeclaration, flows: np.ndarray
                  ) -> np.ndarray:
    """The sparse model's flows on the full model's edges (signs follow each model's
    orientation ``e+ < e-``), zero on the full edges the sparse graph lacks."""
    n = model.num_nodes
    h, t = model.edges[:, 0], model.edges[:, 1]
    ids = np.arange(1, model.num_edges + 1, dtype=float)
    F = sp.csr_matrix((np.r_[ids, -ids], (np.r_[h, t], np.r_[t, h])), shape=(n, n))
    pos = np.array([model.index(v) for v in sparse.nodes])
    a, b = pos[sparse.edges[:, 0]], pos[sparse.edges[:, 1]]
    signed = np.asarray(F[a, b]).ravel()
    hit = signed != 0
    U = np.zeros((model.num_edges, model.dim))
    U[np.abs(signed[hit]).astype(np.int64) - 1] = np.sign(signed[hit])[:, None] * flows[hit]
    return U
