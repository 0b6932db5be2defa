"""GTV minimization (16) of "Networked Federated Learning" (SarcheshmehPour, Tian, Zhang, Jung,
2022): ``min_w sum_i L_i(w_i) + lam sum_e A_e phi(w_e+ - w_e-)``, with a solver-independent
certified duality gap (34) reported for every iterate."""

from benchopt import BaseObjective, safe_import_context

with safe_import_context() as import_ctx:
    import numpy as np
    from benchmark_utils import problem_arrays

    import gtvmodel as gm
    from gtvmodel.baselines import certify_target
    from gtvmodel.sklearn import lam_scale

PENALTIES = {"norm2": "Norm2", "norm1": "Norm1", "squared": "SquaredNorm2"}


class Objective(BaseObjective):
    name = "GTV minimization"
    url = "https://arxiv.org/abs/2105.12769"
    requirements = ["pip:gtvmodel"]
    min_benchopt_version = "1.5"

    # lam_ratio: lambda as a fraction of the consensus threshold lambda_crit (above it, one
    # shared w is optimal); penalty: phi; loss: "auto" = the dataset's (squared or logistic),
    # "huber": the Huber loss on a regression dataset.
    parameters = {
        "lam_ratio": [0.1],
        "penalty": ["norm2"],
        "loss": ["auto"],
    }

    def skip(self, data):
        if self.loss == "huber" and data.loss != "squared":
            return True, "the Huber loss needs a regression dataset"
        return False, None

    def set_data(self, data):
        self.data = data
        loss = data.loss if self.loss == "auto" else self.loss
        penalty = getattr(gm, PENALTIES[self.penalty])()
        model = gm.GTVModel(data.graph, data.dim, penalty=penalty, lam=1.0)
        model.set_data({v: (X, data.y[v]) for v, X in data.X.items()}, loss=loss)
        self.lam_crit = lam_scale(model)
        model.lam = self.lam_ratio * self.lam_crit
        self.model, self.loss_kind = model, loss
        # the reference optimum P* (subopt_exact), solved tightly once per setting
        ref = gm.solve_exact(model, accuracy=1e-9, accept_inaccurate=True)
        self.W_star = ref.weights
        self.P_star = model.objective(ref.weights)
        self.ref_gap = float(ref.certificate.gap)  # P(W_exact) - P* <= ref_gap

    def evaluate_result(self, W, U=None, target=None):
        W = np.asarray(W, dtype=float).reshape(self.model.num_nodes, self.model.dim)
        value = self.model.objective(W)
        cert = gm.certify(self.model, W, U)
        out = dict(
            value=value,
            certified_gap=float(cert.gap),
            subopt_exact=value - self.P_star,  # P(W) - P(W_exact) <= P(W) - P*
            reference_gap=self.ref_gap,
            dist_exact=float(np.linalg.norm(W - self.W_star)),
        )
        if U is not None:
            out["certified_gap_weights_only"] = float(gm.certify(self.model, W).gap)
        if target is not None:
            out["certified_gap_target"] = float(certify_target(self.model, W, target).gap)
        if np.isfinite(self.data.true_weights).all():
            out["mse"] = self.data.mse(W)
        if self.data.X_val:
            val = {v: (X, self.data.y_val[v]) for v, X in self.data.X_val.items()}
            if self.loss_kind == "logistic":
                err = 1.0 - gm.node_scores(self.model, W, val, "accuracy")
            else:
                err = gm.node_scores(self.model, W, val, "mse")
            out["validation_error"] = float(np.nanmean(err))
        return out

    def get_one_result(self):
        return dict(W=np.zeros((self.model.num_nodes, self.model.dim)))

    def get_objective(self):
        arrays = problem_arrays(self.model)
        return dict(**arrays, lam=float(self.model.lam), penalty=self.penalty,
                    loss=self.loss_kind, model=self.model)
