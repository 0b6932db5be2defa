"""The terms of the GTV problem (16): node losses ``L_i`` (:mod:`~gtvmodel.terms.losses`), edge
penalties ``phi`` (:mod:`~gtvmodel.terms.penalties`) and node constraints ``C_i``
(:mod:`~gtvmodel.terms.constraints`).  Each term is one object holding its CVXPY expression,
numeric value, constants, conjugate, prox and dual part; the engines ask the objects.
"""
