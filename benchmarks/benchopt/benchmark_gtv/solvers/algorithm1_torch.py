from benchmark_utils.stopping import gap_progress
from benchopt import BaseSolver, safe_import_context

with safe_import_context() as import_ctx:
    import torch  # noqa: F401  (skipped where PyTorch is not installed)

    import gtvmodel as gm


class Solver(BaseSolver):
    """Algorithm 1 on PyTorch tensors (``gm.solve_primal_dual(backend=gm.TorchBackend(...))``),
    ``n_iter`` iterations from zero; CPU here, ``device="cuda"`` on a GPU."""

    name = "Algorithm1-torch"
    requirements = ["pip:gtvmodel", "pip:torch"]
    sampling_strategy = "iteration"
    stopping_criterion = gap_progress()
    parameters = {"device": ["cpu"]}

    def set_objective(self, model, **arrays):
        self.model = model

    def run(self, n_iter):
        res = gm.solve_primal_dual(self.model, max_iter=max(int(n_iter), 1), tol=0.0,
                                   record_every=max(int(n_iter), 1), certificate_budget=None,
                                   backend=gm.TorchBackend(device=self.device))
        self.W, self.U = res.weights, res.flows

    def get_result(self):
        return dict(W=self.W, U=self.U)
