"""Compiled kernels and numerical solvers over plain arrays and callables, knowing nothing of
models or terms (the terms call them; tests/test_layout.py checks that no module here imports
the terms, the solvers, the certificates or Algorithm 1).

- :mod:`gtvmodel.kernels.tv`: direct exact solvers of scalar total variation on paths and
  trees, and the exact flows of their solutions (:mod:`gtvmodel.solve.direct`).
- :mod:`gtvmodel.kernels.parametric_tv`: the same on any graph, by levels with minimum cuts
  (Hochbaum; Chambolle and Darbon), with the fused sets' exact flows.
- :mod:`gtvmodel.kernels.bk_max_flow`: maximum flow by Boykov and Kolmogorov's search trees
  (its minimum cuts).
- :mod:`gtvmodel.kernels.composite`: the batched active-set prox of piecewise-quadratic row
  conjugates with ``l1``, boxes and balls, and its KKT check; its systems
  (:mod:`gtvmodel.kernels.systems`) and steps (:mod:`gtvmodel.kernels.steps`: affine and
  trust-region ball steps);
- :mod:`gtvmodel.kernels.boxqp`: the active-set box QP of linear row conjugates (hinge,
  absolute) and the active-set rule the composite prox shares;
- :mod:`gtvmodel.kernels.nodeqp`: the same box QP node by node in numba (optional);
- :mod:`gtvmodel.kernels.newton`: damped Newton for smooth data fits (prox and conjugate);
- :mod:`gtvmodel.kernels.composite_newton`: proximal Newton for smooth data fits with ``l1``
  and boxes (each step's quadratic model by the composite prox);
- :mod:`gtvmodel.kernels.linalg`: stacked pseudo-inverses, SPD solves and Gram matrices.
- :mod:`gtvmodel.kernels.sparse_cholesky`: CHOLMOD's supernodal sparse Cholesky through cvxopt
  (optional), for the Newton steps of :mod:`gtvmodel.kernels.feasible_flow`.
"""
