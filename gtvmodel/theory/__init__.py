"""When GTV minimization recovers clusters: Theorem 2 of paper 001 (Section V, Appendix A).

Given a partition ``P = {C_1, ..., C_k}`` of the nodes, this module computes the constants of
Theorem 2 from the model's own loss objects and penalty, decides Definition 1 (well-connected
clusters, (35), with the factor 2 its proof needs, docs/conventions.md) by max-flow / min-cut,
finds the smallest ``lambda`` above which it holds, builds the cluster graph (45)-(46), computes the
consensus threshold ``lambda_crit`` and certifies recovery on a given instance exactly.

Constants (``||.||`` the penalty norm ``phi = ||.||_p``, ``||.||_*`` its dual norm ``||.||_q``):

* ``f_C(v) = sum_{i in C} L_i(v)``, ``w_bar_C = argmin f_C`` (9): closed form when every member
  loss is quadratic (squared, quadratic, zero, with ``l2``), otherwise one CVXPY solve of the
  cluster graph at ``lambda = 0``.
* ``alpha_C = lambda_min(sum_{i in C} H_lo_i)`` and ``beta_i = lambda_max(H_hi_i)`` from the
  losses' global Loewner bounds ``H_lo <= hess L_i(w) <= H_hi``
  (:meth:`~gtvmodel.terms.losses.Loss.hessian_bounds`): Euclidean strong convexity of ``f_C`` (13)
  and Lipschitz constant of ``grad L_i`` (12).  Logistic and Huber losses have ``H_lo = 0``
  (they flatten out), so a cluster of them has a global modulus only through an ``l2=`` term;
  the Hessian at ``w_bar_C`` is *not* a global modulus and is not used.  A cluster with
  ``alpha_C = 0`` raises :class:`~gtvmodel.errors.UnsupportedError`.
* ``delta_i = ||grad L_i(w_bar_C)||_*`` (11), ``|dC| = sum_{i in C, j notin C} A_ij``.
* For ``p != 2`` the proof's two norm changes cost ``kappa_p = max ||x||_p/||x||_2 =
  d^max(0, 1/p - 1/2)`` and ``mu_q = d^max(0, 1/q - 1/2)``; their product is
  ``rho = d^|1/p - 1/2|`` (1 for ``Norm2``, ``sqrt(d)`` for ``Norm1`` and ``NormInf``).

Budgets (Definition 1 corrected; ``c = 2``, or ``c = 1`` with ``constant="printed"``)::

    b_i = sum_{j notin C} A_ij + c rho beta_i |dC| / alpha_C + delta_i / lambda

``C`` is well-connected if some ``i0 in C`` has ``b(A) < cut(A, C \\ A)`` for every nonempty
``A subset C \\ {i0}``.  Deviation bound (37): ``||w_hat_i - w_bar_C||_2 <= 2 kappa_p |dC|
lambda / alpha_C``.  See ``docs/theory.md`` for the derivations and the erratum discussion.

Modules, one idea each (the public functions take the model and plain arrays or a partition):

- :mod:`~gtvmodel.theory.partition`: partitions, validated into cluster indices;
- :mod:`~gtvmodel.theory.constants`: the Theorem 2 constants above;
- :mod:`~gtvmodel.theory.cuts`: residual networks, parametric min-cuts, the ``i0`` searches;
  ``flow_func`` is a networkx max-flow function, as in networkx;
- :mod:`~gtvmodel.theory.well_connected`: :func:`check_well_connected` (Definition 1);
- :mod:`~gtvmodel.theory.quotient`: :func:`cluster_graph` (45)-(46);
- :mod:`~gtvmodel.theory.consensus`: :func:`consensus_threshold` (``lambda_crit``);
- :mod:`~gtvmodel.theory.recovery`: :func:`verify_recovery`;
- :mod:`~gtvmodel.theory.reports`: :class:`ClusterReport`, :class:`RecoveryReport`.

Examples
--------
>>> import networkx as nx, gtvmodel as gm
>>> from gtvmodel import theory
>>> model = gm.GTVModel(nx.barbell_graph(3, 0), dim=1)  # triangles joined by edge (2, 3)
>>> for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
...     model.set_loss(i, gm.QuadraticLoss([a]))
>>> part = [[0, 1, 2], [3, 4, 5]]
>>> [r.success for r in theory.check_well_connected(model, part, lam=1.0)]
[True, True]
>>> round(theory.consensus_threshold(model), 6)
6.0
>>> theory.verify_recovery(model, part, lam=1.0).success
True
"""

from .consensus import consensus_threshold
from .quotient import cluster_graph
from .recovery import verify_recovery
from .reports import ClusterReport, RecoveryReport
from .well_connected import check_well_connected

__all__ = [
    "ClusterReport",
    "RecoveryReport",
    "check_well_connected",
    "consensus_threshold",
    "cluster_graph",
    "verify_recovery",
]
