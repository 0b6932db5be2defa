from benchmark_utils.stopping import gap_progress
from benchopt import BaseSolver, safe_import_context

with safe_import_context() as import_ctx:
    import numpy as np
    import prox_tv as ptv
    from scipy.special import expit


class Solver(BaseSolver):
    """FISTA (Beck and Teboulle 2009) whose proximal step is prox-tv's exact weighted 1-D total
    variation (``tv1w_1d``, one call per coordinate): for chains whose edges join consecutive
    node positions and ``phi = ||.||_1`` (the TV is then separable by coordinate).  Raw arrays
    only; skipped where prox-tv is not installed or the graph is not such a chain."""

    name = "prox-tv-FISTA"
    requirements = ["pip:prox-tv"]
    sampling_strategy = "iteration"
    stopping_criterion = gap_progress()

    def skip(self, edges, n_nodes, penalty, loss, **rest):
        chain = (len(edges) == n_nodes - 1
                 and np.array_equal(np.sort(edges, axis=1), np.c_[np.arange(n_nodes - 1),
                                                                    np.arange(1, n_nodes)]))
        if not chain or penalty != "norm1":
            return True, "prox-tv needs a chain in node order and phi = ||.||_1"
        if loss not in ("squared", "logistic"):
            return True, f"loss {loss!r} not written here"
        return False, None

    def set_objective(self, X, y, node_index, n_nodes, dim, edges, weights, lam, penalty,
                      loss, **rest):
        self.X, self.y, self.idx, self.loss = X, y, node_index, loss
        self.c = 1.0 / np.bincount(node_index, minlength=n_nodes)[node_index]
        order = np.argsort(np.minimum(edges[:, 0], edges[:, 1]))
        self.tv_weights = lam * weights[order]
        curv = 2.0 if loss == "squared" else 0.25
        gram = np.bincount(node_index, weights=(X ** 2).sum(axis=1) * self.c,
                           minlength=n_nodes)
        self.step = 1.0 / (curv * gram.max())
        self.shape = (n_nodes, dim)

    def _grad(self, W):
        t = np.einsum("rd,rd->r", self.X, W[self.idx])
        g = 2.0 * (t - self.y) if self.loss == "squared" else -self.y * expit(-self.y * t)
        out = np.zeros(self.shape)
        np.add.at(out, self.idx, (self.c * g)[:, None] * self.X)
        return out

    def _prox(self, V):
        w = self.step * self.tv_weights
        return np.column_stack([ptv.tv1w_1d(np.ascontiguousarray(V[:, j]), w)
                                for j in range(V.shape[1])])

    def run(self, n_iter):
        W = Z = np.zeros(self.shape)
        t = 1.0
        for _ in range(int(n_iter)):
            W_new = self._prox(Z - self.step * self._grad(Z))
            t_new = (1.0 + np.sqrt(1.0 + 4.0 * t * t)) / 2.0
            Z = W_new + ((t - 1.0) / t_new) * (W_new - W)
            W, t = W_new, t_new
        self.W = W

    def get_result(self):
        return dict(W=self.W)
