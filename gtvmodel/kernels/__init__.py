"""Compiled kernels over plain arrays (numba), knowing nothing of models or terms.

- :mod:`gtvmodel.kernels.tv`: direct exact solvers of scalar total variation on paths and
  trees, and the exact flows of their solutions (:mod:`gtvmodel.solve.direct`).
"""
