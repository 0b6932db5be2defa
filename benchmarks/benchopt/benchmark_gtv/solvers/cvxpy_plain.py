from benchmark_utils.stopping import gap_progress
from benchopt import BaseSolver, safe_import_context

with safe_import_context() as import_ctx:
    import cvxpy as cp
    import numpy as np
    import scipy.sparse as sp


class Solver(BaseSolver):
    """Plain CVXPY on the raw arrays (nothing from gtvmodel): one matrix variable ``W``, the
    row losses weighted ``1/m_i``, the penalty on ``D W``; ``n_iter`` is the solver's iteration
    limit (inaccurate answers are taken as they are)."""

    name = "CVXPY"
    requirements = ["pip:cvxpy"]
    sampling_strategy = "iteration"
    stopping_criterion = gap_progress()
    parameters = {"solver": ["CLARABEL", "SCS", "OSQP"]}
    ITER_OPTION = {"CLARABEL": "max_iter", "SCS": "max_iters", "OSQP": "max_iter"}

    def skip(self, X, y, node_index, n_nodes, dim, edges, weights, lam, penalty, loss,
             **rest):
        if loss not in ("squared", "logistic"):
            return True, f"loss {loss!r} not written here"
        if self.solver == "OSQP" and (loss != "squared" or penalty == "norm2"):
            return True, "OSQP solves quadratic programs only"
        return False, None

    def set_objective(self, X, y, node_index, n_nodes, dim, edges, weights, lam, penalty,
                      loss, **rest):
        E = len(edges)
        D = sp.csr_matrix((np.r_[np.ones(E), -np.ones(E)],
                           (np.r_[np.arange(E), np.arange(E)], np.r_[edges[:, 0], edges[:, 1]])),
                          shape=(E, n_nodes))
        c = 1.0 / np.bincount(node_index, minlength=n_nodes)[node_index]
        self.W = cp.Variable((n_nodes, dim))
        t = cp.sum(cp.multiply(X, self.W[node_index]), axis=1)
        fit = (cp.sum(cp.multiply(c, cp.square(t - y))) if loss == "squared"
               else cp.sum(cp.multiply(c, cp.logistic(-cp.multiply(y, t)))))
        Z = D @ self.W
        rows = {"norm2": lambda: cp.norm(Z, 2, axis=1), "norm1": lambda: cp.sum(cp.abs(Z), axis=1),
                "squared": lambda: 0.5 * cp.sum(cp.square(Z), axis=1)}[penalty]()
        self.problem = cp.Problem(cp.Minimize(fit + lam * (weights @ rows)))
        self.shape = (n_nodes, dim)

    def run(self, n_iter):
        opts = {self.ITER_OPTION[self.solver]: max(int(n_iter), 1)}
        try:
            self.problem.solve(solver=self.solver, **opts)
        except cp.error.SolverError:
            pass
        W = self.W.value
        self.result = np.zeros(self.shape) if W is None else W

    def get_result(self):
        return dict(W=self.result)
