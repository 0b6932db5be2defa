from benchopt import BaseSolver, safe_import_context

with safe_import_context() as import_ctx:
    import gtvmodel as gm


class Solver(BaseSolver):
    """``gm.solve_exact``: the compiled conic problem (Clarabel) and its flows, certified and
    re-solved until the certified relative gap is ``<= accuracy``; one run."""

    name = "solve_exact"
    requirements = ["pip:gtvmodel"]
    sampling_strategy = "run_once"

    def set_objective(self, model, **arrays):
        self.model = model

    def run(self, _):
        res = gm.solve_exact(self.model)
        self.W, self.U = res.weights, res.flows

    def get_result(self):
        return dict(W=self.W, U=self.U)
