"""Lesson 1: GTVMin in ten minutes (lecture notes CS-E4740, sections 6-7)."""

CELLS = [
    ("md", """
# Lesson 1 — GTVMin in ten minutes

**Learning goals.** After this lesson you can

1. build an *empirical graph* from local datasets (nodes = devices, edges = similar data);
2. attach a local linear model and its loss `L_i` to every node;
3. write down the generalized total variation (GTV) penalty and evaluate it;
4. explain what the regularization strength `λ` does — from local training (`λ = 0`) to one
   global model (large `λ`) — and solve GTV minimization (GTVMin) exactly with
   `gm.solve_exact`.

**Time.** About 45 minutes in class (reading and four exercises); the notebook runs in under
half a minute. **Prerequisites.** Python and numpy (arrays, broadcasting), linear
least squares, the Euclidean norm; no earlier lesson.

**Reading.** Lecture notes *CS-E4740 Federated Learning* (A. Jung), chapter 6 "Networked Data
and Models" (6.1 The Empirical Graph, 6.2 Networked Models, 6.3 Clustering Assumption) and
chapter 7 "Generalized Total Variation Minimization" (7.1 Generalized Total Variation, 7.2 The
Primal Problem). The same problem is (16) of *Networked Federated Learning* (SarcheshmehPour,
Tian, Zhang, Jung, 2022):

    minimize over w_1, ..., w_n   Σ_i L_i(w_i)  +  λ Σ_{edges {i,j}} A_ij ‖w_i − w_j‖
"""),
    ("code", """
import matplotlib.pyplot as plt
import networkx as nx
import numpy as np

import gtvmodel as gm
from gtvmodel import plot

plt.rcParams["figure.dpi"] = 80
"""),
    ("md", """
## 1. Local datasets

Twenty devices each hold `m = 4` labelled samples `(x, y)` with `x ∈ R²`. The labels follow a
linear model `y = x^T w̄_i + noise`, and the devices come in two groups (clusters): the first
ten share `w̄ = (2, 2)`, the last ten share `w̄ = (−2, 2)`. **Nobody tells the devices which
group they are in.** With four noisy samples each, a device learning alone gets only a rough
estimate.
"""),
    ("code", """
rng = np.random.default_rng(0)
n, m, d = 20, 4, 2
clusters = np.repeat([0, 1], n // 2)                    # the hidden truth
w_bar = np.array([[2.0, 2.0], [-2.0, 2.0]])[clusters]   # true weights, one row per node
X = rng.standard_normal((n, m, d))                      # X[i]: the m feature vectors of node i
y = np.einsum("imd,id->im", X, w_bar) + 0.7 * rng.standard_normal((n, m))

# local training: each node's own least-squares fit (one batched solve for all nodes)
w_local = np.linalg.solve(X.transpose(0, 2, 1) @ X, (X.transpose(0, 2, 1) @ y[..., None]))[..., 0]
print("mean squared error of purely local models:",
      np.mean(np.sum((w_local - w_bar) ** 2, axis=1)).round(3))
"""),
    ("md", """
## 2. An empirical graph from data (notes 6.1)

The empirical graph connects devices whose data look statistically similar. A simple recipe:
connect every node to the 3 nodes whose local estimates `ŵ_i` are closest to its own, with
edge weight `A_ij = exp(−‖ŵ_i − ŵ_j‖² / 8)` (closer estimates, stronger edge). Devices also
talk to one randomly chosen other device (say, a neighbour in the building), with the same
similarity weight, so the graph is connected. The graph is a plain `networkx.Graph`; the
weights live in the edge attribute `"weight"`.
"""),
    ("code", """
dist = np.linalg.norm(w_local[:, None, :] - w_local[None, :, :], axis=2)
G = nx.Graph()
G.add_nodes_from(range(n))
for i in range(n):
    partners = list(np.argsort(dist[i])[1:4]) + [rng.choice(np.delete(np.arange(n), i))]
    for j in partners:                                  # 3 nearest other nodes + 1 random
        G.add_edge(i, int(j), weight=float(np.exp(-dist[i, j] ** 2 / 8)))
print(G, "| connected:", nx.is_connected(G))

A = gm.EmpiricalGraph(G).edge_weights        # the weights A_e in the package's edge order
ax = plot.graph(G, node_color=clusters, edge_values=A, edge_label="edge weight A_ij",
                title="Empirical graph (colour: hidden cluster)")
"""),
    ("md", """
The edges are coloured and drawn thicker where `A_ij` is large. The strong edges join nodes of
the same (hidden) cluster, the few edges between the clusters are weak: this is the
**clustering assumption** of notes 6.3.

`gm.EmpiricalGraph(G)` is the package's view of the graph: node order, edges oriented as
`(e+, e−)` with `e+` before `e−`, weights `A_e`. Arrays of edge values (weights, later flows)
are always in this edge order.

## 3. Networked models and the GTV penalty (notes 6.2, 7.1)

Every node gets a local linear model with weights `w_i` and the squared-error loss
`L_i(w) = (1/m) ‖y_i − X_i w‖²`. The **GTV penalty** measures how much the weights vary along
the edges: `λ Σ_e A_e ‖w_{e+} − w_{e−}‖₂` (the `Norm2` penalty, "network Lasso").
"""),
    ("code", """
model = gm.GTVModel(G, dim=d, penalty=gm.Norm2(), lam=0.0)
for i in range(n):
    model.set_loss(i, gm.SquaredLoss(X[i], y[i]))

print("edges (e+, e-) in model order:", model.edges[:4].tolist(), "...")
print("edge weights A_e:", model.edge_weights[:4].round(3), "...")
model.lam = 1.0
print("GTV of the local models   :", round(model.penalty_value(w_local), 3))
print("GTV of the true weights   :", round(model.penalty_value(w_bar), 3))
"""),
    ("md", """
The true weights have a much smaller GTV than the noisy local estimates: they only vary across
the few edges between the clusters. GTVMin looks for weights that fit the local data *and*
have small GTV.

## 4. Solving GTVMin exactly (notes 7.2)

`gm.solve_exact(model)` (or `model.solve_exact()`) compiles the whole problem into one convex
program and solves it with tight tolerances. At `λ = 0` the edges do not matter, and GTVMin
is local training:
"""),
    ("code", """
model.lam = 0.0
sol = gm.solve_exact(model)
print(sol.status, "| objective", round(sol.objective, 6))
print("equals the local least-squares fits:", np.allclose(sol.weights, w_local, atol=1e-5))
"""),
    ("md", """
## 5. What λ does

`λ` is a CVXPY parameter inside the model: changing `model.lam` and solving again does not
rebuild the problem. We sweep `λ` over a grid and record the error `(1/n) Σ_i ‖ŵ_i − w̄_i‖²`
and the spread of the weights (how far the nodes are from agreeing on one model).
"""),
    ("code", """
lams = np.logspace(-2, 2, 13)
mse, spread, solutions = [], [], []
for lam in lams:
    model.lam = lam
    W = gm.solve_exact(model).weights
    solutions.append(W)
    mse.append(np.mean(np.sum((W - w_bar) ** 2, axis=1)))
    spread.append(np.max(np.linalg.norm(W - W.mean(axis=0), axis=1)))

fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5), layout="constrained")
left.loglog(lams, mse, "o-", lw=2, color="C0")
left.axhline(np.mean(np.sum((w_local - w_bar) ** 2, axis=1)), color="k", ls="--", lw=1.5,
             label="local training (λ = 0)")
left.set_ylabel("error (1/n) Σ ‖ŵ_i − w̄_i‖²", fontsize=14)
left.set_title("Error of the learnt weights", fontsize=15)
left.legend(fontsize=12)
right.semilogx(lams, spread, "s-", lw=2, color="C1")
right.set_ylim(bottom=0)
right.set_ylabel("spread max_i ‖ŵ_i − mean‖", fontsize=14)
right.set_title("Spread: 0 means one global model", fontsize=15)
for ax in (left, right):
    ax.set_xlabel("λ", fontsize=14)
    ax.tick_params(labelsize=12)
    ax.grid(alpha=0.3, which="both")
"""),
    ("md", """
Left, the error on a log scale; right, the spread on a linear scale, so that "exactly one
model" (spread 0) shows as 0.

* **Small λ**: every node keeps its noisy local fit (high error, large spread).
* **Medium λ**: nodes of one cluster pool their data and agree; the two clusters stay apart
  — the error drops well below that of local training. This is *clustered FL*.
* **Large λ**: all nodes agree on one model (spread ≈ 0): *centralized FL*, which is wrong
  for both clusters here.

The scatter plots show the learnt `ŵ_i` (dots) and the true cluster weights (crosses):
"""),
    ("code", """
picks = [0, 6, 12]
fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharex=True, sharey=True,
                         layout="constrained")
for ax, k in zip(axes, picks, strict=True):
    plot.weights_scatter(solutions[k], true_weights=w_bar, clusters=clusters, ax=ax,
                         title=f"λ = {lams[k]:.3g}")
"""),
    ("md", """
## Exercises
"""),
    ("exercise", "q1", """
**Exercise 1.** Compute the *total variation* `Σ_e A_e ‖w_{e+} − w_{e−}‖₂` of the local
fits `w_local` yourself with numpy, from `model.edges` (pairs of node positions) and
`model.edge_weights`. Store it in `tv`.
"""),
    ("answer", """
tv = None  # your code here
""", """
e_plus, e_minus = model.edges[:, 0], model.edges[:, 1]
tv = float(model.edge_weights @ np.linalg.norm(w_local[e_plus] - w_local[e_minus], axis=1))
"""),
    ("check", """
model.lam = 1.0
assert tv is not None, "compute tv first"
assert np.isclose(tv, model.penalty_value(w_local), rtol=1e-10), "not the GTV of w_local at λ = 1"
print("correct:", tv)
"""),
    ("hidden", """
assert isinstance(tv, float | np.floating), "tv must be one number"
by_hand = sum(G[i][j]["weight"] * np.linalg.norm(w_local[i] - w_local[j]) for i, j in G.edges)
assert np.isclose(tv, by_hand, rtol=1e-10)
""", 2),
    ("exercise", "q2", """
**Exercise 2.** From the sweep above, find the smallest `λ` in `lams` at which all nodes
agree, i.e. `spread < 1e-3`. Store it in `lam_consensus`. (The check compares it with the exact
consensus threshold `gm.consensus_threshold(model)` of the theory lesson.)
"""),
    ("answer", """
lam_consensus = None  # your code here
""", """
lam_consensus = float(lams[np.argmax(np.array(spread) < 1e-3)])
"""),
    ("check", """
assert lam_consensus is not None, "find lam_consensus first"
lam_crit = gm.consensus_threshold(model)
k = int(np.flatnonzero(lams == lam_consensus)[0])
assert lam_consensus >= lam_crit * (1 - 1e-6), "at this λ the nodes do not all agree yet"
assert k == 0 or lams[k - 1] < lam_crit, "a smaller λ of the grid already gives consensus"
print(f"correct: {lam_consensus:.4g} (threshold {lam_crit:.4g})")
"""),
    ("hidden", """
assert lam_consensus in lams, "pick a value of the grid lams"
model.lam = float(lam_consensus)
W_check = gm.solve_exact(model).weights
assert np.max(np.linalg.norm(W_check - W_check.mean(axis=0), axis=1)) < 1e-3
""", 1),
    ("exercise", "q3", """
**Exercise 3.** Centralized FL (notes 8.1) trains one model on all data pooled. Use GTVMin
with a large `λ` to compute it, and store the common weight vector (shape `(2,)`) in
`w_global`. The check compares it with the least-squares fit of all 80 samples pooled.
"""),
    ("answer", """
w_global = None  # your code here
""", """
model.lam = 100.0
w_global = gm.solve_exact(model).weights.mean(axis=0)
"""),
    ("check", """
X_all, y_all = X.reshape(-1, d), y.reshape(-1)
w_pooled = np.linalg.lstsq(X_all, y_all, rcond=None)[0]
assert w_global is not None and np.shape(w_global) == (2,), "w_global must be a vector of 2"
assert np.allclose(w_global, w_pooled, atol=1e-5), f"expected {w_pooled}"
print("correct:", np.round(w_global, 4))
"""),
    ("hidden", """
X_all, y_all = X.reshape(-1, d), y.reshape(-1)
residual = X_all.T @ (X_all @ np.asarray(w_global, dtype=float) - y_all)   # normal equations
assert np.linalg.norm(residual) <= 1e-4 * np.linalg.norm(X_all.T @ y_all)
""", 1),
    ("md", """
### Real data: ten clinics

scikit-learn ships the *diabetes* dataset (`load_diabetes`, offline): 442 patients, ten
standardized measurements, and a measure of disease progression one year later. Think of ten
clinics, each treating one age group (deciles of age), each fitting its own linear model of
progression on body-mass index and blood pressure (and an intercept). Neighbouring age groups
should have similar models: the empirical graph is the chain of age groups. Each clinic keeps
half of its patients for validation.
"""),
    ("code", """
from sklearn.datasets import load_diabetes

Xd, yd = load_diabetes(return_X_y=True)
age = Xd[:, 0]
clinic = np.searchsorted(np.quantile(age, np.linspace(0.1, 0.9, 9)), age, side="right")
feats = np.column_stack([Xd[:, 2:4] / Xd[:, 2:4].std(axis=0), np.ones(len(yd))])  # bmi, bp, 1
target = (yd - yd.mean()) / yd.std()
split = np.random.default_rng(1).random(len(yd)) < 0.5          # True: training half
train = {c: (feats[(clinic == c) & split], target[(clinic == c) & split]) for c in range(10)}
valid = {c: (feats[(clinic == c) & ~split], target[(clinic == c) & ~split]) for c in range(10)}
clinics = gm.GTVModel(nx.path_graph(10), dim=3, penalty=gm.Norm2(), lam=0.0)
for c in range(10):
    clinics.set_loss(c, gm.SquaredLoss(*train[c]))
print("patients per clinic (train, validation):",
      [(len(train[c][1]), len(valid[c][1])) for c in range(10)])
lams_real = np.array([0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0])
"""),
    ("exercise", "q4", """
**Exercise 4 — real data.** For every `λ` in `lams_real`, solve GTVMin on the clinics
(`clinics.lam = ...`, `gm.solve_exact`) and compute the *validation error*: the mean over the
ten clinics of each clinic's mean squared error `mean((y − X w_c)²)` on its validation half
(`valid[c]` holds `(X, y)`). Store the eight errors as an array `val_real` and the `λ` with the
smallest one in `lam_real`. Is sharing between neighbouring age groups worth it here?
"""),
    ("answer", """
val_real, lam_real = None, None  # your code here
""", """
val_real = []
for lam in lams_real:
    clinics.lam = lam
    W = gm.solve_exact(clinics).weights
    val_real.append(np.mean([np.mean((valid[c][1] - valid[c][0] @ W[c]) ** 2)
                             for c in range(10)]))
val_real = np.array(val_real)
lam_real = float(lams_real[np.argmin(val_real)])
"""),
    ("check", """
assert val_real is not None and lam_real is not None, "compute val_real and lam_real first"
assert np.shape(val_real) == (len(lams_real),), "one validation error per λ of lams_real"
assert lam_real == lams_real[int(np.argmin(val_real))], "lam_real must minimize val_real"
local_fits = [np.linalg.lstsq(*train[c], rcond=None)[0] for c in range(10)]   # λ = 0
local_err = np.mean([np.mean((valid[c][1] - valid[c][0] @ local_fits[c]) ** 2)
                     for c in range(10)])
assert np.isclose(val_real[0], local_err, rtol=1e-5), f"at λ = 0 expected {local_err:.5f}"
print(f"correct: best λ = {lam_real}, validation MSE {min(val_real):.4f} "
      f"(local training: {val_real[0]:.4f})")
""", 2),
    ("hidden", """
for k in (3, len(lams_real) - 1):
    clinics.lam = float(lams_real[k])
    W = gm.solve_exact(clinics).weights
    err_k = np.mean([np.mean((valid[c][1] - valid[c][0] @ W[c]) ** 2) for c in range(10)])
    assert np.isclose(val_real[k], err_k, rtol=1e-4), f"validation error at λ = {lams_real[k]}"
assert np.all(np.isfinite(val_real)) and np.all(np.asarray(val_real) > 0)
""", 2),
]
