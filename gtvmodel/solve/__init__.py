"""``solve_exact`` and its routes: the conic solves of the primal problem (16)
(:mod:`~gtvmodel.solve.exact`, on the compiled problem of :mod:`~gtvmodel.duality.compile`), the
direct solvers (:mod:`~gtvmodel.solve.direct`), the first-order route through Algorithm 1
(:mod:`~gtvmodel.solve.first_order`), the polish (:mod:`~gtvmodel.solve.polish`) and the
uniqueness test (:mod:`~gtvmodel.solve.uniqueness`).  The top engine: it imports the
formulations (:mod:`gtvmodel.duality`), the certificates and Algorithm 1, none of which imports
it.  The public entry point is :func:`gtvmodel.solve_exact`; this package imports nothing itself,
so its modules can depend on one another without an import cycle.
"""
