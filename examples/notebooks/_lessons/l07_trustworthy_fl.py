"""Lesson 7: Trustworthy FL -- privacy by noise (lecture notes CS-E4740, section 13)."""

CELLS = [
    ("md", """
# Lesson 7 — Trustworthy FL: privacy protection by noise

**Learning goals.** After this lesson you can

1. say where FedRelax leaks information (the local models a device shares with its
   neighbours every round) and two ways to blur it: **perturbed updates** (noise added to every
   shared model, Algorithm 5) and **perturbed features** (noise added to the training data once,
   Algorithm 6);
2. measure what the noise costs: the error of the learnt models against the noise level `σ`,
   over several random seeds, with error bars;
3. measure what it costs *as an optimization problem*: the certified duality gap of the noisy
   result on the problem noise-free FedRelax solves, and check that `σ = 0` gives plain FedRelax
   back exactly.

**Time.** About 50 minutes in class (three exercises); the notebook runs in about 30 s.
**Prerequisites.** Lesson 2 (FedRelax and its target, GTVMin with `½‖·‖²`); Gaussian noise,
mean and standard deviation over repeated runs.

**Reading.** Lecture notes *CS-E4740 Federated Learning* (A. Jung), chapter 13 "Privacy
Protection": 13.1 "Adding Noise" ((61), (62), Algorithm 5 "FedRelax with Perturbed Updates") and
13.2 "Feature Perturbation" ((63)–(65), Algorithm 6 "FedRelax with Perturbed Features");
9.1 "FedRelax" for the algorithm being protected (lesson 2).
"""),
    ("code", """
import matplotlib.pyplot as plt
import numpy as np

import gtvmodel as gm
from gtvmodel import baselines, datasets

plt.rcParams["figure.dpi"] = 80
plt.rcParams["font.size"] = 13
"""),
    ("md", """
## 1. The data and noise-free FedRelax

Two clusters of 10 devices (paper 001's stochastic block model, small), `m = 10` samples per
device with label noise `0.3`, squared loss; validation: 50 fresh samples per device. FedRelax
(notes 9.1, update (54)): every round each device solves

    w_i ← argmin_w  L_i(w) + (λ/2) Σ_j A_ij ‖w − w_j‖²

with its neighbours' current models `w_j`, and sends the new `w_i` to its neighbours. Its limit
is the optimum of GTVMin with the penalty `½‖·‖²` at the same `λ` (lesson 2), the problem
`baselines.fedrelax` certifies on (`target = "gtv-squared"`).
"""),
    ("code", """
data = datasets.sbm(sizes=(10, 10), p_in=0.6, p_out=0.05, m=10, sigma=0.3, seed=3)
val = datasets.linear_data(data.graph, data.true_weights, data.clusters, m=50, sigma=0.3,
                           seed=7)
model = data.model(lam=0.1)


def val_mse(result):
    \"\"\"Mean validation MSE over the devices.\"\"\"
    return float(gm.node_scores(model, result, val).mean())


clean = baselines.fedrelax(model, rounds=300)
print(f"FedRelax: {clean.status} after {clean.rounds} rounds, certified gap {clean.gap:.1e} "
      f"on {clean.target!r}")
print(f"validation MSE {val_mse(clean):.4f}, MSE to w̄ {data.mse(clean.weights):.4f}")
"""),
    ("md", """
## 2. Two ways to add noise (notes 13.1, 13.2)

* **Perturbed updates** (Algorithm 5, `perturb="updates"`): every device adds `σ ε`,
  `ε ~ N(0, I)`, to its new model before sharing it, every round (62). The neighbours — and
  the device's final model (line 8 of Algorithm 5) — only ever see noisy models. The iterates
  never settle, so the method runs a fixed number of rounds.
* **Perturbed features** (Algorithm 6, `perturb="features"`): every device replaces its
  features by `Φ(x) = x + σ ε` once, before training (63)–(64), and runs plain FedRelax on the
  perturbed data. What it shares is exact FedRelax — of a different, noisier problem.

`noise=σ` sets the level, `seed` the random draws. First: `σ = 0` is plain FedRelax, exactly.
"""),
    ("code", """
for perturb in ("updates", "features"):
    zero = baselines.fedrelax(model, rounds=300, noise=0.0, perturb=perturb, seed=0)
    print(f"perturb={perturb!r}, σ = 0: identical to FedRelax?",
          np.array_equal(zero.weights, clean.weights), "| rounds", zero.rounds)
"""),
    ("md", """
## 3. What the noise costs: error against σ

Five seeds per noise level, 50 rounds each. For each run we record the validation MSE and the
certified gap of the returned models on FedRelax's own problem (GTVMin with `½‖·‖²`, `λ = 0.1`):
a guaranteed upper bound on how far the noisy result is from the noise-free optimum in
objective value.
"""),
    ("code", """
sigmas = np.array([0.01, 0.03, 0.1, 0.3, 1.0])
seeds = range(5)
runs = {p: [[baselines.fedrelax(model, rounds=50, noise=s, perturb=p, seed=k) for k in seeds]
            for s in sigmas]
        for p in ("updates", "features")}
err = {p: np.array([[val_mse(r) for r in row] for row in rows]) for p, rows in runs.items()}
gap = {p: np.array([[r.gap for r in row] for row in rows]) for p, rows in runs.items()}
for p in runs:
    print(f"perturbed {p}:")
    for s, e, g in zip(sigmas, err[p], gap[p], strict=True):
        print(f"   σ = {s:4.2f}: validation MSE {e.mean():.4f} ± {e.std():.4f}, "
              f"certified gap {g.mean():.3g}")
"""),
    ("code", """
fig, (left, right) = plt.subplots(1, 2, figsize=(15, 5.5), layout="constrained")
for p, marker in (("updates", "o"), ("features", "s")):
    left.errorbar(sigmas, err[p].mean(1), yerr=err[p].std(1), fmt=marker + "-", lw=2,
                  capsize=5, label=f"perturbed {p}")
    right.errorbar(sigmas, gap[p].mean(1), yerr=gap[p].std(1), fmt=marker + "-", lw=2,
                   capsize=5, label=f"perturbed {p}")
left.axhline(val_mse(clean), color="k", ls="--", label="no noise (σ = 0)")
top = max(gap["updates"][0].mean(), gap["features"][0].mean())
right.plot(sigmas, 10 * top * (sigmas / sigmas[0]) ** 2, color="0.4", ls=(0, (6, 3)), lw=2.5,
           label="reference slope 2 (∝ σ²)")
for ax, ylabel, title in (
        (left, "validation MSE", "Accuracy: validation MSE against σ"),
        (right, "certified gap on GTVMin with ½‖·‖²", "Optimization: certified gap against σ")):
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("noise level σ")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=12)
"""),
    ("md", """
Mean ± standard deviation over 5 seeds. The grey dashed line is a reference of slope 2, drawn
a factor 10 above the data so that it does not hide them: parallel lines mean the same slope.
(The noise-free certified gap, about `1e-12`, is off the right panel's scale.)

* **Accuracy.** Up to `σ ≈ 0.03` neither kind of noise changes the error much; at `σ = 0.3`
  it is more than twice the noise-free error, and at `σ = 1` more than fifteen times: a noise
  vector of norm about `√2 ≈ 1.4` is half the size of the weights (`‖w̄‖ ≈ 2.8`). More privacy
  costs accuracy, as notes 13.1 says: "by increasing the value of σ, we obtain an increased
  protection ... at the cost of deteriorating accuracy".
* **Optimization.** Both certified gaps grow like `σ²` (slope 2 on the log–log plot): the
  objective is smooth, so a perturbation of size `σ` costs about `σ²`. With perturbed updates the
  returned models carry one fresh draw of noise; with perturbed features FedRelax converges,
  but to the optimum of the perturbed problem, which is not the optimum of the real one.
* The gap is a *guarantee* computed without knowing the optimum; it is not the exact cost.
  Exercise 1 measures how loose it is.
"""),
    ("md", """
## Exercises
"""),
    ("exercise", "q1", """
**Exercise 1 — the true cost, and the certificate.** Take the first perturbed-updates run at
`σ = 0.1` (`runs["updates"][2][0]`). Compute its *true* suboptimality on FedRelax's problem,
`excess = P(W) − P*`, where `P` is the objective of GTVMin with `gm.SquaredNorm2()` at
`λ = 0.1` on the same data (`data.model(penalty=..., lam=...)`, its `.objective(W)`) and `P*`
its optimal value (`gm.solve_exact`). Store it in `excess`. The check recomputes `P*` from the
optimality condition as one linear system, and compares with the certified gap.
"""),
    ("answer", """
excess = None  # your code here
""", """
model_sq = data.model(penalty=gm.SquaredNorm2(), lam=0.1)
W_noisy = runs["updates"][2][0].weights
excess = float(model_sq.objective(W_noisy) - gm.solve_exact(model_sq).objective)
"""),
    ("check", """
import networkx as nx

assert excess is not None, "compute excess first"
run = runs["updates"][2][0]
n, d, lam = model.num_nodes, model.dim, 0.1
H, b, c = np.zeros((n * d, n * d)), np.zeros(n * d), 0.0
for i, v in enumerate(data.nodes):             # Σ_i (1/m)‖y_i − X_i w_i‖² = wᵀHw/2 − bᵀw + c
    Xv, yv = data.X[v], data.y[v]
    H[i * d:(i + 1) * d, i * d:(i + 1) * d] = 2 * Xv.T @ Xv / len(yv)
    b[i * d:(i + 1) * d] = 2 * Xv.T @ yv / len(yv)
    c += yv @ yv / len(yv)
Q = H + lam * np.kron(nx.laplacian_matrix(data.graph, nodelist=data.nodes).toarray(), np.eye(d))


def P(w):                                        # GTVMin with (λ/2) Σ_e A_e ‖·‖²
    return 0.5 * w @ Q @ w - b @ w + c


w_star = np.linalg.solve(Q, b)
expected = P(run.weights.ravel()) - P(w_star)
assert np.isclose(excess, expected, rtol=1e-5), f"expected {expected:.6g}"
assert 0 < excess <= run.gap, "the certified gap bounds the true suboptimality"
print(f"correct: true cost {excess:.4g}, certified gap {run.gap:.4g} "
      f"({run.gap / excess:.1f} times the true cost)")
"""),
    ("hidden", """
assert isinstance(excess, float | np.floating), "excess must be one number"
model_h = data.model(penalty=gm.SquaredNorm2(), lam=0.1)
p_star_h = gm.solve_dual(model_h).objective              # P* = D* (strong duality)
expected_h = model_h.objective(runs["updates"][2][0].weights) - p_star_h
assert np.isclose(excess, expected_h, rtol=1e-4)
""", 2),
    ("exercise", "q2", """
**Exercise 2 — a privacy budget.** Suppose the devices accept at most 50 % more validation
error than noise-free FedRelax. From the sweep above (`err["updates"]`, mean over the seeds),
find the largest `σ` in `sigmas` whose mean validation MSE with perturbed updates is at most
`1.5 * val_mse(clean)`. Store it in `sigma_max`.
"""),
    ("answer", """
sigma_max = None  # your code here
""", """
ok = err["updates"].mean(axis=1) <= 1.5 * val_mse(clean)
sigma_max = float(sigmas[ok].max())
"""),
    ("check", """
assert sigma_max is not None, "find sigma_max first"
budget = 1.5 * val_mse(clean)


def mean_err(s):
    return np.mean([val_mse(baselines.fedrelax(model, rounds=50, noise=s, perturb="updates",
                                               seed=k)) for k in seeds])


k = int(np.flatnonzero(np.isclose(sigmas, sigma_max))[0])
assert mean_err(sigma_max) <= budget, "this σ costs more than the budget"
assert k == len(sigmas) - 1 or mean_err(sigmas[k + 1]) > budget, "a larger σ still fits"
print(f"correct: σ up to {sigma_max} keeps the validation MSE below {budget:.4f}")
"""),
    ("hidden", """
assert sigma_max in sigmas, "pick a value of the grid sigmas"
means = err["updates"].mean(axis=1)
assert means[np.flatnonzero(sigmas == sigma_max)[0]] <= 1.5 * val_mse(clean)
larger = sigmas > sigma_max
assert np.all(means[larger] > 1.5 * val_mse(clean)), "a larger σ still fits the budget"
""", 1),
    ("exercise", "q3", """
**Exercise 3 — open question.** Adding noise with a larger `σ` protects more and costs more
accuracy. But *how much* protection does `σ = 0.1` give? Name one way to quantify it (what an
attacker who sees all shared models could learn about a device's data), and say why the
certified gap of section 3 does *not* measure privacy. Answer in a few sentences.
"""),
    ("open", """
*Your answer here.*
""", """
*A model answer.* One way is differential privacy: Gaussian noise of standard deviation `σ`
added to a quantity whose sensitivity to one sample is `Δ` gives (ε, δ)-differential privacy
with `ε ≈ Δ √(2 ln(1.25/δ)) / σ` per release, and the privacy loss adds up over the rounds
(composition), so 50 rounds leak more than one. Another is empirical: run an attack that
reconstructs a device's data (or tells whether a sample was used) from its shared models, and
measure its success against `σ`. The certified gap measures how far the returned models are
from the optimum of FedRelax's problem — an accuracy cost, not what an attacker can infer.
"""),
]
