from benchmark_utils.stopping import gap_progress
from benchopt import BaseSolver, safe_import_context

with safe_import_context() as import_ctx:

    import gtvmodel as gm


class Solver(BaseSolver):
    """Algorithm 1 of paper 001 (primal-dual message passing), ``gm.solve_primal_dual`` on
    numpy arrays; ``n_iter`` iterations from zero, no early stop."""

    name = "Algorithm1"
    requirements = ["pip:gtvmodel"]
    sampling_strategy = "iteration"
    stopping_criterion = gap_progress()
    parameters = {"device": [None]}

    def set_objective(self, model, **arrays):
        self.model = model

    def run(self, n_iter):
        options = {} if self.device is None else {"device": self.device}
        res = gm.solve_primal_dual(self.model, max_iter=max(int(n_iter), 1), tol=0.0,
                                   record_every=max(int(n_iter), 1), certificate_budget=None,
                                   **options)
        self.W, self.U = res.weights, res.flows

    def get_result(self):
        return dict(W=self.W, U=self.U)
