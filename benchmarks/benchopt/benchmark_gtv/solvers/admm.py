from benchmark_utils.stopping import gap_progress
from benchopt import BaseSolver, safe_import_context

with safe_import_context() as import_ctx:

    from gtvmodel.baselines import admm


class Solver(BaseSolver):
    """Network-Lasso ADMM (Hallac, Leskovec, Boyd 2015), ``gtvmodel.baselines.admm``, with its
    GTV edge flows; ``n_iter`` rounds."""

    name = "ADMM"
    requirements = ["pip:gtvmodel"]
    sampling_strategy = "iteration"
    stopping_criterion = gap_progress()
    parameters = {"rho": [1.0]}

    def set_objective(self, model, **arrays):
        self.model = model

    def run(self, n_iter):
        res = admm(self.model, rho=self.rho, rounds=max(int(n_iter), 1), abs_tol=0.0,
                   rel_tol=0.0, certify=False)
        self.W, self.U = res.weights, res.info["flows"]

    def get_result(self):
        return dict(W=self.W, U=self.U)
