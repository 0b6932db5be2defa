from benchmark_utils.stopping import gap_progress
from benchopt import BaseSolver, safe_import_context

with safe_import_context() as import_ctx:

    from gtvmodel.baselines import fedrelax


class Solver(BaseSolver):
    """FedRelax (CS-E4740 lecture notes (54)); its own target is GTV minimization with
    ``phi = 1/2 ||.||_2^2`` (``certified_gap_target``); ``n_iter`` rounds."""

    name = "FedRelax"
    requirements = ["pip:gtvmodel"]
    sampling_strategy = "iteration"
    stopping_criterion = gap_progress()

    def set_objective(self, model, **arrays):
        self.model = model

    def run(self, n_iter):
        self.W = fedrelax(self.model, rounds=max(int(n_iter), 1), tol=0.0).weights

    def get_result(self):
        return dict(W=self.W, target="gtv-squared")
