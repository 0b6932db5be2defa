"""Exact solvers: the primal problem (16) compiled to one vectorized CVXPY problem
(:mod:`~gtvmodel.solve.compile`, :mod:`~gtvmodel.solve.exact`), the dual flow problem (24)
(:mod:`~gtvmodel.solve.dual`) and the automatic conjugation of symbolic nodes
(:mod:`~gtvmodel.solve.conic`).  The public entry points are :func:`gtvmodel.solve_exact` and
:func:`gtvmodel.solve_dual`; this package imports nothing itself, so its modules can depend on
one another without an import cycle.
"""
