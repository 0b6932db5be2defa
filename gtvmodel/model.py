"""``GTVModel``: the user's handle on a GTV problem (16).

    minimize  sum_i L_i(w_i) + lambda sum_e A_e phi(w_{e+} - w_{e-})   s.t.  w_i in C_i     (16)

The declaration and its numpy evaluation live in :class:`~gtvmodel.declaration.ModelDeclaration`;
this class adds thin shortcut methods to the module-level engines (:func:`gtvmodel.solve_exact`,
:func:`gtvmodel.solve_dual`, :func:`gtvmodel.certify`, :func:`gtvmodel.solve_primal_dual`) and to
the problem files of :mod:`gtvmodel.io`.  The engines take a declaration, never this class, so
nothing below this module imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _files
from .certificates.certificate import Certificate, certify
from .declaration import ModelDeclaration
from .duality.dual import DualSolution, solve_dual
from .primal_dual import PrimalDualResult, solve_primal_dual
from .solution import Solution
from .solve.exact import solve_exact
from .solve.uniqueness import Uniqueness, uniqueness

__all__ = ["GTVModel"]


class GTVModel(ModelDeclaration):
    """A GTV minimization problem (16) over a ``networkx.Graph``: the declaration of
    :class:`~gtvmodel.declaration.ModelDeclaration` (same parameters: ``graph``, ``dim``,
    ``penalty`` ``phi``, ``lam`` ``lambda``, ``weight`` the edge attribute of ``A_e``) plus
    shortcut methods to the engines and to problem files.

    Parameters
    ----------
    graph : networkx.Graph
        The empirical graph; the edge attribute named by ``weight`` gives ``A_e`` (default 1).
    dim : int or (int, int)
        Dimension ``d >= 1`` of every local parameter ``w_i``; a pair ``(p, q)``: every
        ``w_i = vec(W_i)`` is a ``p x q`` matrix, vectorized row-major, ``d = p q``
        (docs/matrix_parameters.md).
    penalty : Penalty, default Norm2()
        The GTV penalty ``phi``.
    lam : float, default 1.0
        The GTV regularization strength ``lambda >= 0``.
    weight : hashable or None, default "weight"
        The edge attribute holding ``A_e`` (``None``: every ``A_e = 1``).

    Raises
    ------
    GraphError
        The graph is empty, or an edge weight is negative or not finite.
    DataError
        ``dim`` is not an integer ``>= 1`` or a pair ``(p, q)`` of them.
    PenaltyError
        ``penalty`` is not a :class:`~gtvmodel.terms.penalties.Penalty` or does not fit ``dim``.
    ParameterError
        ``lam`` negative, infinite or NaN.

    Examples
    --------
    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> model = gm.GTVModel(nx.path_graph(3), dim=1, lam=0.5)
    >>> model.set_loss(0, gm.QuadraticLoss([1.0]))
    >>> model.set_loss(2, gm.QuadraticLoss([-1.0]))
    >>> sol = model.solve_exact()
    >>> sol.weights.shape
    (3, 1)
    >>> np.allclose(sol.weight(0), 0.75, atol=1e-6), round(sol.objective, 4)
    (True, 0.875)

    ``lambda`` can change without recompiling anything; above the consensus threshold
    ``lambda_crit`` (docs/conventions.md) every node agrees:

    >>> model.lam = 3.0  # lambda_crit = 2 here
    >>> np.allclose(model.solve_exact().weights, 0.0, atol=1e-6)
    True
    """

    def solve_exact(self, solver: str | None = None, *, accept_inaccurate: bool = False,
                    verbose: bool = False, **opts: Any) -> Solution:
        """Solve (16) exactly as one vectorized CVXPY problem; returns a
        :class:`~gtvmodel.solution.Solution`.  See :func:`gtvmodel.solve_exact`.
        """
        return solve_exact(self, solver=solver, accept_inaccurate=accept_inaccurate,
                           verbose=verbose, **opts)

    def solve_dual(self, solver: str | None = None, *, accept_inaccurate: bool = False,
                   verbose: bool = False, **opts: Any) -> DualSolution:
        """Solve the dual flow problem (24) as one vectorized CVXPY problem; returns a
        :class:`~gtvmodel.duality.dual.DualSolution`.  See :func:`gtvmodel.solve_dual`.

        Examples
        --------
        The flows ``u_e`` maximize ``D(u)``; strong duality (22) gives ``D* = P*``, and the
        weights are recovered from the node optimality conditions (23):

        >>> import networkx as nx, numpy as np, gtvmodel as gm
        >>> model = gm.GTVModel(nx.path_graph(3), dim=1, lam=0.5)
        >>> model.set_loss(0, gm.QuadraticLoss([1.0]))
        >>> model.set_loss(2, gm.QuadraticLoss([-1.0]))
        >>> dual = gm.solve_dual(model)  # the same as model.solve_dual()
        >>> dual.status, dual.success, round(dual.objective, 4)
        ('optimal', True, 0.875)
        >>> np.round(dual.flows.ravel(), 4)  # at the capacities ||u_e||_2 <= lambda A_e
        array([0.5, 0.5])
        >>> np.allclose(dual.weights.ravel(), [0.75, 0.0, -0.75], atol=1e-6)
        True
        """
        return solve_dual(self, solver=solver, accept_inaccurate=accept_inaccurate,
                          verbose=verbose, **opts)

    def certify(self, weights: Any, flows: Any = None, **kwargs: Any) -> Certificate:
        """A certified duality gap (34) for candidate ``weights`` (and optionally ``flows``);
        returns a :class:`~gtvmodel.certificates.certificate.Certificate`.  See
        :func:`gtvmodel.certify` (with examples).
        """
        return certify(self, weights, flows, **kwargs)

    def solve_primal_dual(self, max_iter: int = 10_000, tol: float = 1e-6, prox: str = "auto",
                          step: Any = None, warm_start: Any = None,
                          callback: Callable[..., Any] | None = None, record_every: int = 50,
                          progress: bool = False, **kwargs: Any) -> PrimalDualResult:
        """Run Algorithm 1 (primal-dual message passing) until the certified relative gap is
        ``<= tol``; returns a :class:`~gtvmodel.primal_dual.result.PrimalDualResult`.  See
        :func:`gtvmodel.solve_primal_dual`.
        """
        return solve_primal_dual(self, max_iter=max_iter, tol=tol, prox=prox, step=step,
                                 warm_start=warm_start, callback=callback,
                                 record_every=record_every, progress=progress, **kwargs)

    def uniqueness(self) -> Uniqueness:
        """Whether the minimizer of (16) is unique, for the common cases (``True``, ``False``
        or ``None``: not determined, with the reason); see
        :func:`gtvmodel.solve.uniqueness.uniqueness`.  :attr:`Solution.unique` carries it."""
        return uniqueness(self)

    def save(self, path: Any) -> None:
        """Write the model (library objects only) to a portable ``.npz`` problem file; see
        :mod:`gtvmodel.io` and ``docs/file_format.md``."""
        _files.save_model(self, path)

    @classmethod
    def load(cls, path: Any) -> GTVModel:
        """Read a problem file written by :meth:`save` (:func:`gtvmodel.io.load_model`)."""
        return _files.read_model(path, cls)
