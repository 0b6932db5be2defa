from benchmark_utils.stopping import gap_progress
from benchopt import BaseSolver, safe_import_context

with safe_import_context() as import_ctx:
    import numpy as np
    import scipy.sparse as sp
    from scipy.special import expit


class Solver(BaseSolver):
    """Condat-Vu primal-dual splitting (Condat 2013, Vu 2013) written against the raw arrays
    only (numpy and scipy; nothing from gtvmodel), as any outside solver would be:

        w+ = w - tau (grad f(w) + D^T u),   u+ = proj_{||u_e|| <= lam A_e}(u + sigma D (2 w+ - w))

    for ``phi = ||.||_2`` or ``||.||_1`` (the dual balls of ``||.||_2`` / ``||.||_inf``), with
    ``tau (beta / 2 + sigma ||D||^2) < 1`` (``beta``: the largest node smoothness constant,
    ``||D||^2 <= 2 max degree``).  Returns the flows ``u`` too."""

    name = "Condat-Vu"
    requirements = ["pip:numpy", "pip:scipy"]
    sampling_strategy = "iteration"
    stopping_criterion = gap_progress()

    def skip(self, loss, penalty, **rest):
        if loss not in ("squared", "logistic"):
            return True, f"loss {loss!r} not written here"
        if penalty not in ("norm2", "norm1"):
            return True, f"penalty {penalty!r} not written here"
        return False, None

    def set_objective(self, X, y, node_index, n_nodes, dim, edges, weights, lam, penalty,
                      loss, **rest):
        E = len(edges)
        self.D = sp.csr_matrix((np.r_[np.ones(E), -np.ones(E)],
                                (np.r_[np.arange(E), np.arange(E)],
                                 np.r_[edges[:, 0], edges[:, 1]])), shape=(E, n_nodes))
        self.X, self.y, self.idx, self.loss = X, y, node_index, loss
        self.c = 1.0 / np.bincount(node_index, minlength=n_nodes)[node_index]
        self.cap = lam * weights
        self.penalty, self.shape = penalty, (n_nodes, dim)
        # beta_i = ell'' (X_i^T X_i / m_i) <= ell'' max_r ||x_r||^2 (a cheap bound, vectorized)
        curv = 2.0 if loss == "squared" else 0.25
        gram = np.bincount(node_index, weights=(X ** 2).sum(axis=1) * self.c,
                           minlength=n_nodes)
        beta = curv * gram.max()
        norm_d2 = 2.0 * np.bincount(edges.ravel(), minlength=n_nodes).max()
        self.sigma = 1.0 / np.sqrt(norm_d2) / max(lam * weights.mean(), 1e-12)
        self.tau = 0.99 / (beta / 2.0 + self.sigma * norm_d2)

    def _grad(self, W):
        t = np.einsum("rd,rd->r", self.X, W[self.idx])
        g = 2.0 * (t - self.y) if self.loss == "squared" else -self.y * expit(-self.y * t)
        out = np.zeros(self.shape)
        np.add.at(out, self.idx, (self.c * g)[:, None] * self.X)
        return out

    def _project(self, U):
        if self.penalty == "norm1":
            return np.clip(U, -self.cap[:, None], self.cap[:, None])
        norms = np.linalg.norm(U, axis=1)
        return U * np.minimum(1.0, self.cap / np.maximum(norms, 1e-300))[:, None]

    def run(self, n_iter):
        W = np.zeros(self.shape)
        U = np.zeros((self.D.shape[0], self.shape[1]))
        for _ in range(int(n_iter)):
            W_new = W - self.tau * (self._grad(W) + self.D.T @ U)
            U = self._project(U + self.sigma * (self.D @ (2.0 * W_new - W)))
            W = W_new
        self.W, self.U = W, U

    def get_result(self):
        return dict(W=self.W, U=self.U)
