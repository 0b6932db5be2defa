"""The primal-dual pair as CVXPY problems, below every engine that uses it:

- :mod:`~gtvmodel.duality.compile`: the primal problem (16) as one vectorized CVXPY problem
  (``compile_primal``, ``compile_nodes`` for node subsets) and the diagnostics naming
  infeasible or unbounded nodes;
- :mod:`~gtvmodel.duality.dual`: the dual flow problem (19)/(24)/(27), :func:`gtvmodel.solve_dual`
  and :class:`~gtvmodel.duality.dual.DualSolution`; the node parts come from the batches'
  ``dual_part``;
- :mod:`~gtvmodel.duality.conic`: the automatic conjugation of symbolic nodes from CVXPY's conic
  form (also ``gm.conic``).

The certificates (:mod:`gtvmodel.certificates`), Algorithm 1 (:mod:`gtvmodel.primal_dual`) and
``solve_exact`` (:mod:`gtvmodel.solve`) import this package; it imports none of them.  Like
:mod:`gtvmodel.solve`, this package imports nothing itself.
"""
