"""Lesson 2: FL flavours as GTVMin (lecture notes CS-E4740, sections 8-9)."""

CELLS = [
    ("md", """
# Lesson 2 — FL flavours as GTVMin

**Learning goals.** After this lesson you can

1. obtain the main flavours of federated learning — *local training*, *personalized FL*,
   *clustered FL* and *centralized FL* — as GTV minimization (GTVMin) with one knob, `λ`;
2. name the problem an FL algorithm solves or approximates: FedAvg the centralized
   (consensus) problem, FedRelax GTVMin with the smooth penalty `½‖·‖²`, IFCA a non-convex
   clustered problem;
3. compare several methods on one dataset in one table (`gm.compare`): error, communication,
   and a *certified gap* wherever the target problem is convex — and say what each gap
   certifies.

**Time.** About 60 minutes in class (four exercises); the notebook runs in about half a
minute. **Prerequisites.** Lesson 1 (GTVMin, `λ`, `gm.solve_exact`); gradient descent; the
idea of a validation set.

**Reading.** Lecture notes *CS-E4740 Federated Learning* (A. Jung), chapter 8 "FL Main
Flavours as GTVMin" (8.1 Centralized FL, 8.2 Decentralized FL, 8.3 Clustered FL, 8.6
Personalized FL) and chapter 9 "Some FL Algorithms" (9.1 FedRelax, 9.2 FedSGD, 9.3 FedAvg);
*Networked Federated Learning* (SarcheshmehPour, Tian, Zhang, Jung, 2022), Tables I–III, which
compare GTVMin with IFCA, pooled and local training.
"""),
    ("code", """
import matplotlib.pyplot as plt
import numpy as np

import gtvmodel as gm
from gtvmodel import baselines, datasets, plot

plt.rcParams["figure.dpi"] = 80
plt.rcParams["font.size"] = 13
"""),
    ("md", """
## 1. One dataset

Paper 001's stochastic block model (Section VI-A, small): two clusters of 10 devices, 5 noisy
samples each (`σ = 0.5`), squared loss `L_i(w) = (1/m_i)‖y_i − X_i w‖²`; the devices of
cluster 0 share `w̄ = (2, 2)`, those of cluster 1 share `w̄ = (−2, 2)`. Edges are dense inside a
cluster and rare between clusters. A second draw of 50 samples per device, from the same
`w̄_i`, is the validation set.
"""),
    ("code", """
data = datasets.sbm(sizes=(10, 10), p_in=0.6, p_out=0.05, m=5, sigma=0.5, seed=3)
val = datasets.linear_data(data.graph, data.true_weights, data.clusters, m=50, sigma=0.5,
                           seed=7)
model = data.model(lam=1.0)  # squared loss at every node, penalty λ Σ_e A_e ‖w_e+ − w_e−‖₂
print(data.graph, "| edges between the clusters:",
      sum(data.clusters[a] != data.clusters[b] for a, b in data.graph.edges))
"""),
    ("md", """
## 2. The flavours are values of λ (notes chapter 8)

GTVMin `min Σ_i L_i(w_i) + λ Σ_e A_e ‖w_{e+} − w_{e−}‖₂` covers them all:

| flavour | notes | GTVMin | package |
|---|---|---|---|
| local training | — | `λ = 0`: every device alone | `baselines.local` |
| personalized FL | 8.6 | `λ` small: models trained mainly on own data | `gm.solve_exact` |
| clustered FL | 8.3 | `λ` moderate: one model per cluster of the graph | `gm.solve_exact` |
| centralized FL | 8.1, 8.2 | `λ` so large that all models agree | `baselines.pooled` |

`gm.lam_path` solves GTVMin along a grid of `λ` (one compiled problem, re-solved), counts the
clusters of each solution (pieces of the graph on which the weights agree) and scores every
solution on the validation set. `threshold=True` adds the consensus threshold `λ_crit`: above
it the solution is one model for everybody.
"""),
    ("code", """
lams = np.concatenate([np.geomspace(30, 0.01, 16), [0.0]])
path = gm.lam_path(model, lams, validation=val, threshold=True)
fig, ax = plt.subplots(figsize=(9, 5), layout="constrained")
plot.lam_path(path, ax, show="clusters")
ax.set_title("GTVMin along λ: clusters of the solution and validation error")
ax.right.set_yscale("log")
handles = ax.get_legend_handles_labels()[0] + ax.right.get_legend_handles_labels()[0]
ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3,
          fontsize=12)
for lam, name in [(0.02, "personalized"), (1.0, "clustered"), (15, "centralized")]:
    ax.annotate(name, (lam, 12), ha="center", fontsize=13, color="0.3")
"""),
    ("md", """
Reading from the left: at `λ = 0` every device has its own model (20 clusters); a small `λ`
keeps nearly every model personal; for `λ` between about 0.4 and 6 the solution has exactly the
two true clusters; above `λ_crit` all devices share one model. The validation error is high at
both ends — too little data per model on the left, one model for two different clusters on the
right. Its minimum (the star) lies where the personal models are merging into the clusters.
Four snapshots:
"""),
    ("code", """
flavours = {"local training (λ = 0)": 0.0, "personalized (λ = 0.02)": 0.02,
            "clustered (λ = 1)": 1.0, "centralized (λ = 15)": 15.0}
fig, axes = plt.subplots(1, 4, figsize=(20, 5), sharex=True, sharey=True,
                         layout="constrained")
for ax, (name, lam) in zip(axes, flavours.items(), strict=True):
    W = path.weights[int(np.argmin(np.abs(path.lams - lam)))]
    plot.weights_scatter(W, true_weights=data.true_weights, clusters=data.clusters, ax=ax,
                         title=name)
"""),
    ("md", """
## 3. FL algorithms and the problems they solve (notes chapter 9)

An FL *algorithm* is an iterative method that passes messages over a network; each one
solves, or approximates, one of the problems above:

* **FedAvg** (notes 9.3, Algorithms 3–4; McMahan et al.): a server keeps one model; each round
  the devices take a few local gradient steps from it and the server averages. Target: the
  **consensus problem** `min_w Σ_i L_i(w)` — centralized FL. With several local steps it stops
  near, not at, the optimum (client drift).
* **FedRelax** (notes 9.1, update (54)): every device minimizes its loss plus
  `(λ/2) Σ_j A_ij ‖w − w_j‖²` with its neighbours' models fixed. Its fixed point is the optimum
  of **GTVMin with the smooth penalty `½‖·‖²`** at the same `λ` — not the `‖·‖₂` GTVMin above:
  a quadratic penalty pulls models together but never makes them exactly equal.
* **IFCA** (Ghosh et al. 2020; paper 001 Table I): `k` cluster models, each device joins the
  model that fits it best. Clustered FL, but the problem `Σ_i min_j L_i(θ_j)` is **not
  convex**: no certificate exists, and a bad start can end in a bad local minimum.

The reference points: `local` (λ = 0), `pooled` (the consensus optimum), GTVMin at `λ = 1`
solved exactly, and the `oracle` that is told the true clusters (not available in practice).

`gm.compare` runs them all on one model and tabulates the training and validation MSE, the
communication (rounds and values sent) and the certified duality gap (34) **on each method's
own target problem** (column *gap on*). A gap is a guarantee `P_target(w) − P_target* ≤ gap`.
"""),
    ("code", """
methods = {
    "local": baselines.local,
    "pooled": baselines.pooled,
    "GTVMin": gm.solve_exact,
    "FedRelax": lambda m: baselines.fedrelax(m, rounds=300),
    "FedAvg": lambda m: baselines.fedavg(m, rounds=100, local_steps=5, step=0.05),
    "IFCA": lambda m: baselines.ifca(m, 2, rounds=30, local_steps=2, step=0.1, restarts=3,
                                     seed=1),
    "oracle": lambda m: baselines.oracle(m, data.partition()),
}
model.lam = 1.0
table = gm.compare(methods, model, validation=val)
print(table)
mse = {name: data.mse(res.weights) for name, res in table.results.items()}
print("\\nMSE to the true w̄:", {k: round(v, 4) for k, v in mse.items()})
"""),
    ("code", """
val_mse = np.asarray(table.column("validation"), dtype=float)
gaps = np.asarray(table.column("gap"), dtype=float)
targets = table.column("target")
rows = np.arange(len(table.rows))[::-1]                # first method on top
fig, ax = plt.subplots(figsize=(11, 5), layout="constrained")
ax.hlines(rows, val_mse.min() / 1.5, val_mse, color="0.85", lw=1)
ax.plot(val_mse, rows, "o", ms=11, color="C0")
for r, v, g, t in zip(rows, val_mse, gaps, targets, strict=True):
    note = f"gap {g:.1e} on {t}" if np.isfinite(g) else "no certificate: not convex"
    ax.annotate(note, (v, r), xytext=(12, 0), textcoords="offset points", va="center",
                fontsize=12, color="0.25")
ax.set_yticks(rows, table.rows, fontsize=13)
ax.set_xscale("log")
ax.set_xlim(val_mse.min() / 1.5, val_mse.max() * 10)
ax.set_xlabel("validation MSE (log scale; left is better)")
ax.set_title("Seven methods on one dataset, with each one's certified gap")
ax.grid(alpha=0.3, axis="x", which="both")
"""),
    ("md", """
What each certified gap says:

* **local** — on the λ = 0 problem (every device alone): exact.
* **pooled** and **oracle** — on the consensus problem (one model; for the oracle one model
  per true cluster): exact.
* **GTVMin** — on the model's own problem (16) at `λ = 1`: exact.
* **FedRelax** — on GTVMin with `½‖·‖²` at `λ = 1` ("gtv-squared"): it converged, the gap is
  tiny. It is *not* a statement about the `‖·‖₂` problem that the GTVMin row solves — and the
  two problems have different answers: FedRelax's error is *worse* than local training here.
  The quadratic penalty grows with the square of the difference across the 5 edges between
  the clusters (`‖w̄_0 − w̄_1‖ = 4`), so it drags the two clusters towards each other, while the
  `‖·‖₂` penalty pays only linearly and lets the clusters stay apart. A small optimization gap
  is not a small error: the gap certifies the solver, not the choice of the problem.
* **FedAvg** — on the consensus problem: the gap is clearly positive, so 100 rounds of 5 local
  steps did not reach the pooled optimum. The certificate says so without knowing the optimum.
* **IFCA** — no gap: its problem is not convex. Here it found the two clusters and is as good
  as the oracle; the table alone cannot guarantee that.

Centralized FL (pooled, FedAvg) is far off: one model cannot fit two clusters. Clustered FL
(GTVMin, IFCA, oracle) wins; GTVMin gets there from the graph, without being told `k` or the
clusters.
"""),
    ("md", """
## Exercises
"""),
    ("exercise", "q1", """
**Exercise 1 — what FedAvg's gap certifies.** FedAvg's target is the consensus problem
`min_w Σ_i L_i(w)`. Compute its *true* suboptimality yourself: `true_gap = Σ_i L_i(w_avg) −
min_w Σ_i L_i(w)`, where `w_avg` is FedAvg's common model (`table.results["FedAvg"].weight(0)`).
Every node has `m = 5` samples, so the minimizer is the least-squares fit of all samples pooled
(`data.X[v]`, `data.y[v]` for `v in data.nodes`); `model.loss_values(W)` gives the `L_i(w_i)` of
an `(n, d)` array. Store the number in `true_gap`.
"""),
    ("answer", """
true_gap = None  # your code here
""", """
w_avg = table.results["FedAvg"].weight(0)
X_all = np.vstack([data.X[v] for v in data.nodes])
y_all = np.concatenate([data.y[v] for v in data.nodes])
w_pool = np.linalg.lstsq(X_all, y_all, rcond=None)[0]
n = model.num_nodes
true_gap = float(model.loss_values(np.tile(w_avg, (n, 1))).sum()
                 - model.loss_values(np.tile(w_pool, (n, 1))).sum())
"""),
    ("check", """
assert true_gap is not None, "compute true_gap first"
fedavg_run = table.results["FedAvg"]
X_c = np.vstack([data.X[v] for v in data.nodes])
y_c = np.concatenate([data.y[v] for v in data.nodes])
w_c = np.linalg.solve(X_c.T @ X_c, X_c.T @ y_c)                 # normal equations


def consensus(w):
    return sum(np.mean((data.y[v] - data.X[v] @ w) ** 2) for v in data.nodes)


expected = consensus(fedavg_run.weight(0)) - consensus(w_c)
assert np.isclose(true_gap, expected, rtol=1e-6), f"expected {expected:.6g}"
assert 0 <= true_gap <= fedavg_run.gap, "a certificate is never smaller than the true gap"
print(f"correct: true gap {true_gap:.4g} <= certified gap {fedavg_run.gap:.4g}")
"""),
    ("hidden", """
assert isinstance(true_gap, float | np.floating), "true_gap must be one number"
w_fedavg = table.results["FedAvg"].weights
assert np.ptp(w_fedavg, axis=0).max() < 1e-12          # FedAvg: one common model
pooled_value = table.results["pooled"]
P = model.loss_values(w_fedavg).sum() - model.loss_values(pooled_value.weights).sum()
assert np.isclose(true_gap, P, rtol=1e-5), "P(w_avg) - P(w_pooled) on the consensus problem"
""", 2),
    ("exercise", "q2", """
**Exercise 2 — FedRelax's target.** Build the GTVMin problem that FedRelax solves: the same
data (`data.model(...)`), penalty `gm.SquaredNorm2()` (`½‖·‖²`) and `λ = 1`; solve it exactly
and store its weights in `W_sq`. The check compares them with FedRelax's weights and with the
optimality condition `∇L_i(w_i) + λ Σ_j A_ij (w_i − w_j) = 0` solved as one linear system.
"""),
    ("answer", """
W_sq = None  # your code here
""", """
model_sq = data.model(penalty=gm.SquaredNorm2(), lam=1.0)
W_sq = gm.solve_exact(model_sq).weights
"""),
    ("check", """
import networkx as nx

assert W_sq is not None, "compute W_sq first"
n, d = model.num_nodes, model.dim
H = np.zeros((n * d, n * d))                    # Hessian of Σ_i L_i: block diagonal
b = np.zeros(n * d)
for i, v in enumerate(data.nodes):
    Xv, yv = data.X[v], data.y[v]
    H[i * d:(i + 1) * d, i * d:(i + 1) * d] = 2 * Xv.T @ Xv / len(yv)
    b[i * d:(i + 1) * d] = 2 * Xv.T @ yv / len(yv)
L_G = nx.laplacian_matrix(data.graph, nodelist=data.nodes).toarray()
W_lin = np.linalg.solve(H + 1.0 * np.kron(L_G, np.eye(d)), b).reshape(n, d)
assert np.allclose(W_sq, W_lin, atol=1e-5), "not the optimum of GTVMin with ½‖·‖² at λ = 1"
assert np.allclose(table.results["FedRelax"].weights, W_lin, atol=1e-4)
print("correct: FedRelax converged to GTVMin with ½‖·‖²; max |W_sq − W_lin| =",
      f"{np.abs(W_sq - W_lin).max():.1e}")
"""),
    ("hidden", """
import networkx as nx

W_sq_arr = np.asarray(W_sq, dtype=float)
assert W_sq_arr.shape == (model.num_nodes, model.dim)
model_check = data.model(penalty=gm.SquaredNorm2(), lam=1.0)
G_sq = model_check.loss_gradients(W_sq_arr) + 1.0 * (
    nx.laplacian_matrix(data.graph, nodelist=data.nodes) @ W_sq_arr)
assert np.abs(G_sq).max() < 1e-5, "the gradient of GTVMin with ½‖·‖² must vanish"
""", 2),
    ("exercise", "q3", """
**Exercise 3 — choosing λ.** Among the grid `path.lams` of section 2, find the `λ` whose
GTVMin solution has *exactly two* clusters (`path.clusters`) and the lowest mean validation
error (`path.validation_error`). Store it in `lam_clustered`.
"""),
    ("answer", """
lam_clustered = None  # your code here
""", """
two = path.clusters == 2
lam_clustered = float(path.lams[two][np.argmin(path.validation_error[two])])
"""),
    ("check", """
assert lam_clustered is not None, "find lam_clustered first"
k = int(np.flatnonzero(path.lams == lam_clustered)[0])
sol = gm.solve_exact(data.model(lam=lam_clustered))
err = np.mean([np.mean((val.y[v] - val.X[v] @ sol.weight(v)) ** 2) for v in data.nodes])
assert np.isclose(err, path.validation_error[k], rtol=1e-4), "validation error mismatch"
W = sol.weights
split = np.linalg.norm(W[data.clusters == 0].mean(0) - W[data.clusters == 1].mean(0))
assert path.clusters[k] == 2 and split > 1, "this λ does not give the two clusters"
others = [e for c, e in zip(path.clusters, path.validation_error, strict=True) if c == 2]
assert path.validation_error[k] <= min(others), "another two-cluster λ validates better"
print(f"correct: λ = {lam_clustered:.3g}, validation MSE {err:.4f}")
"""),
    ("hidden", """
assert lam_clustered in path.lams, "pick a value of the grid path.lams"
two = np.flatnonzero(path.clusters == 2)
assert lam_clustered == path.lams[two[np.argmin(path.validation_error[two])]]
""", 1),
    ("exercise", "q4", """
**Exercise 4 — open question.** IFCA matched the oracle on this dataset, with `k = 2` given
and three restarts. Design a small experiment that shows how much of that is luck: what would
you vary (the seed, the number of restarts, `k`, the distance between the clusters), what
would you measure, and what would convince you that GTVMin is the safer choice — or not?
Write your plan in the cell below (a few sentences); run it if you have time.
"""),
    ("open", """
*Your answer here.*
""", """
*A model answer.* Run IFCA over many seeds (say 50) with `restarts=1` and with `restarts=3`,
and record the validation MSE of each run and whether it found the true clusters (compare
its cluster assignment with `data.clusters`). A histogram shows whether bad local minima
occur and how often restarts avoid them. Then move the clusters closer (`w̄` nearer to each
other) and give IFCA a wrong `k` (3): GTVMin needs neither `k` nor a start, and its
certified gap says it solved its (convex) problem. GTVMin is the safer choice when IFCA's
failures are frequent or costly; IFCA can be better when the graph is poor (many edges
between clusters) but `k` is known.
"""),
]
