from benchmark_utils.stopping import gap_progress
from benchopt import BaseSolver, safe_import_context

with safe_import_context() as import_ctx:
    import numpy as np

    from gtvmodel.baselines import fedavg


class Solver(BaseSolver):
    """FedAvg (McMahan et al. 2017): one shared ``w`` for all nodes.  Its target is the
    consensus problem (``certified_gap_target``), not GTV minimization; ``n_iter`` rounds of
    ``local_steps`` full local gradient steps of size ``1 / beta`` (``beta`` the largest node
    smoothness constant)."""

    name = "FedAvg"
    requirements = ["pip:gtvmodel"]
    sampling_strategy = "iteration"
    stopping_criterion = gap_progress()
    parameters = {"local_steps": [5]}

    def set_objective(self, model, X, y, node_index, loss, **arrays):
        self.model = model
        curv = {"squared": 2.0, "logistic": 0.25, "huber": 2.0}.get(loss, 2.0)
        m = np.bincount(node_index)
        beta = max(curv * np.linalg.eigvalsh(X[node_index == i].T @ X[node_index == i])[-1]
                   / m[i] for i in np.unique(node_index))
        self.step = 1.0 / beta

    def run(self, n_iter):
        self.W = fedavg(self.model, rounds=max(int(n_iter), 1), local_steps=self.local_steps,
                        step=self.step, certify=False).weights

    def get_result(self):
        return dict(W=self.W, target="consensus")
