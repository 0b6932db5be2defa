"""Lesson 5: When does it work? (paper 001 Sections V, VI-B, VI-C; lecture notes 11)."""

CELLS = [
    ("md", """
# Lesson 5 — When does it work?

**Learning goals.** After this lesson you can

1. state when GTV minimization recovers the true clusters: *well-connected* clusters
   (Definition 1), tested by a max-flow computation, and the smallest `λ` that makes them so;
2. compare Theorem 2's error bound (37) with the error actually measured;
3. find the *consensus threshold* above which all nodes learn the same model (the star graph
   of paper 001, Fig. 7);
4. see on a chain with a weak boundary edge where recovery breaks as the boundary gets stronger.

**Time.** About 50 minutes in class (three exercises); the notebook runs in about 20 s.
**Prerequisites.** Lessons 1 and 3 (capacities `λA_e`, the consensus threshold); max-flow /
min-cut from an algorithms course; strong convexity.

**Reading.** *Networked Federated Learning* (SarcheshmehPour, Tian, Zhang, Jung, 2022),
Section V "When Does It Work?" (Definition 1, Theorem 2, the bound (37)), Section VI-B "Chain
Graph" and VI-C "Star Graph" (Fig. 7). Lecture notes *CS-E4740 Federated Learning* (A. Jung),
chapter 11 "When Does It Work?". The package's `docs/theory.md` explains the corrected
constant of Definition 1 used here.
"""),
    ("code", """
import matplotlib.pyplot as plt
import numpy as np

import gtvmodel as gm
from gtvmodel import datasets, plot

plt.rcParams["figure.dpi"] = 80
"""),
    ("md", """
## 1. A chain with a weak boundary edge (paper 001 VI-B)

Ten nodes on a path; nodes `0–4` share the true weights `w̄ = (2, 2)`, nodes `5–9` share
`(−2, 2)`. Edges inside the clusters have weight 1, the boundary edge `4 — 5` has weight
`ε = 0.05`. Every node has 5 noisy samples of a linear model (squared loss).
"""),
    ("code", """
chain = datasets.chain(n=5, eps=0.05, m=5, sigma=0.1, seed=0)
model, part = chain.model(), chain.partition()
print("clusters:", part)
ax = plot.graph(model, node_color=chain.clusters, edge_values=model.edge_weights,
                edge_label="edge weight A_e", with_labels=True, seed=1,
                title="Chain: clusters and the weak boundary edge")
"""),
    ("md", """
## 2. Well-connected clusters and λ_min (Definition 1, Theorem 2)

A cluster `C` is *well-connected* when the demands of its nodes (how far each node's own
optimum is from the cluster's, plus what leaks over the boundary) can be routed inside `C` to
one node without exceeding the edge capacities `λ A_e`: a **max-flow** question, which
`gm.check_well_connected` answers. If every cluster is well-connected, Theorem 2 says the
solution is constant on each cluster and `‖ŵ_i − w̄_C‖ ≤ 2 |∂C| λ / α_C` (37), with `|∂C|` the
boundary weight and `α_C` the strong convexity of the cluster's pooled loss. The reports also
give `λ_min`, the smallest `λ` for which the cluster is well-connected.
"""),
    ("code", """
for report in gm.check_well_connected(model, part, lam=1.0):
    print(report.summary())
lam_min = max(r.lam_min for r in gm.check_well_connected(model, part))
print(f"\\nboth clusters are well-connected for λ ≥ {lam_min:.4f}")
"""),
    ("md", """
## 3. The bound (37) against the measured error

`gm.verify_recovery` solves the problem exactly at one `λ` and reports what happened: whether
the solution is clustered, the measured deviation `max_{i∈C} ‖ŵ_i − w̄_C‖` and the bound (37).
We sweep `λ`:
"""),
    ("code", """
lams = np.logspace(-2, 0.5, 8)
reports = [gm.verify_recovery(model, part, lam=lam) for lam in lams]
for lam, r in zip(lams, reports, strict=True):
    print(f"λ = {lam:7.4f}: {r.status:>13}, clustered {r.clustered!s:>5}, within bound (37) "
          f"{r.within_bound!s:>5}, MSE {chain.mse(r.weights):.2e}")
ax = plot.recovery(reports, title="Theorem 2: bound (37) vs measured error")
ax.axvline(lam_min, color="k", ls=":", lw=2, label="λ_min (well-connected)")
ax.legend(fontsize=11, loc="lower right")
"""),
    ("md", """
Below `λ_min` (dotted line) the theorem makes no promise and indeed the solution is not
clustered: the measured deviation is far above the bound. Above `λ_min` every node's error is
below the bound (37), which grows linearly in `λ`: a larger `λ` makes the clusters stick
together but also pulls them towards each other over the boundary edge.

## 4. Where recovery breaks: a stronger boundary

Theorem 2's condition depends on the boundary weight `ε`. As `ε` grows, `λ_min` grows and the
consensus threshold `λ_crit` (all nodes agree above it; section 5) falls; when
`λ_min ≥ λ_crit` there is no `λ` left that separates the clusters.
"""),
    ("code", """
fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
grid = np.logspace(-2, 2, 9)
for eps in (0.01, 0.1, 0.5, 1.0):
    c = datasets.chain(n=5, eps=eps, m=5, sigma=0.1, seed=0)
    m = c.model()
    lmin = max(r.lam_min for r in gm.check_well_connected(m, c.partition()))
    lcrit = gm.consensus_threshold(m)
    errors = []
    for lam in grid:
        m.lam = lam
        errors.append(c.mse(gm.solve_exact(m).weights))
    print(f"ε = {eps:4}: λ_min = {lmin:.3g}, λ_crit = {lcrit:.3g}")
    ax.loglog(grid, errors, "o-", lw=2, label=f"ε = {eps}")
ax.set_xlabel("λ", fontsize=14)
ax.set_ylabel("MSE (1/n) Σ ‖ŵ_i − w̄_i‖²", fontsize=14)
ax.set_title("Chain: a stronger boundary edge breaks recovery", fontsize=15)
ax.legend(fontsize=12)
ax.grid(alpha=0.3, which="both")
"""),
    ("md", """
With a weak boundary (`ε = 0.01`) there is a wide range of `λ` with a small error; with
`ε = 1` (the boundary is as strong as the edges inside the clusters) the clusters are never
well-connected (`λ_min = ∞`), and the error only goes from "noisy local fits" to "one wrong
global model".

## 5. The consensus threshold on a star (paper 001 VI-C, Fig. 7)

A star: a centre and 9 leaves, every node with its own random `w̄_i` (no clusters at all).
`gm.consensus_threshold(model)` computes `λ_crit`: for `λ ≥ λ_crit` the solution is the same
at every node. The scatter plots show the learnt `ŵ_i` below, near and above it.
"""),
    ("code", """
star = datasets.star(leaves=9, m=5, seed=0)
smodel = star.model()
lam_crit = gm.consensus_threshold(smodel)
print(f"λ_crit = {lam_crit:.4f}")
fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharex=True, sharey=True, layout="constrained")
for ax, f in zip(axes, (0.05, 0.5, 1.05), strict=True):
    smodel.lam = f * lam_crit
    plot.weights_scatter(gm.solve_exact(smodel).weights, ax=ax,
                         title=f"λ = {f}·λ_crit = {f * lam_crit:.3g}")
"""),
    ("md", """
## Exercises
"""),
    ("exercise", "q1", """
**Exercise 1.** Compute the bound (37) for cluster 0 of the chain at `λ = 1` yourself:
`2 |∂C| λ / α_C`, where `|∂C| = 0.05` is the boundary weight and, for the squared loss,
`α_C = 2 λ_min(Σ_{i∈C} X_iᵀX_i / m_i)` (smallest eigenvalue; `chain.X[i]` holds node `i`'s
features). Store it in `bound0`.
"""),
    ("answer", """
bound0 = None  # your code here
""", """
Q = sum(chain.X[i].T @ chain.X[i] / len(chain.X[i]) for i in part[0])
alpha = 2 * np.linalg.eigvalsh(Q)[0]
bound0 = 2 * 0.05 * 1.0 / alpha
"""),
    ("check", """
assert bound0 is not None, "compute bound0 first"
ref = gm.check_well_connected(model, part, lam=1.0)[0].bound
assert np.isclose(bound0, ref, rtol=1e-8), f"expected {ref}"
print("correct:", bound0)
"""),
    ("hidden", """
assert isinstance(bound0, float | np.floating), "bound0 must be one number"
Q_h = np.zeros((2, 2))
for i in part[0]:
    Q_h += chain.X[i].T @ chain.X[i] / chain.X[i].shape[0]
assert np.isclose(bound0, 0.1 / (2 * np.linalg.eigvalsh(Q_h).min()), rtol=1e-8)
""", 2),
    ("exercise", "q2", """
**Exercise 2.** Derive the consensus threshold of the star yourself. At consensus every node
has the weights `w̄ = argmin_w Σ_i L_i(w)` (all data pooled). The edge to leaf `j` is the
leaf's only edge, so it must carry the leaf's whole demand `∇L_j(w̄)`; its capacity is `λ`
(`A_e = 1`, `Norm2`, dual norm = Euclidean). Compute `λ_crit = max_j ‖∇L_j(w̄)‖₂` over the
leaves and store it in `lam_star`. *Hints:* `star.X`, `star.y` hold the local data (all
nodes have data); `smodel.loss_gradients(W)` gives all gradients for `(n, d)` weights `W`.
"""),
    ("answer", """
lam_star = None  # your code here
""", """
X_all = np.vstack([star.X[i] / np.sqrt(len(star.X[i])) for i in smodel.nodes])
y_all = np.concatenate([star.y[i] / np.sqrt(len(star.X[i])) for i in smodel.nodes])
w_pool = np.linalg.lstsq(X_all, y_all, rcond=None)[0]     # argmin sum_i (1/m_i)||y_i - X_i w||^2
grads = smodel.loss_gradients(np.tile(w_pool, (smodel.num_nodes, 1)))
lam_star = float(np.linalg.norm(grads[1:], axis=1).max())  # node 0 is the centre
"""),
    ("check", """
assert lam_star is not None, "compute lam_star first"
assert np.isclose(lam_star, lam_crit, rtol=1e-6), f"expected {lam_crit}"
print("correct:", lam_star)
"""),
    ("hidden", """
lam_before = smodel.lam
smodel.lam = 1.001 * float(lam_star)
W_above = gm.solve_exact(smodel).weights
smodel.lam = 0.99 * float(lam_star)
W_below = gm.solve_exact(smodel).weights
smodel.lam = lam_before
assert np.ptp(W_above, axis=0).max() < 1e-5, "just above lam_star all nodes agree"
assert np.ptp(W_below, axis=0).max() > 1e-5, "just below lam_star they do not"
""", 2),
    ("exercise", "q3", """
**Exercise 3 — open question.** Theorem 2 needs the true clusters and `w̄_C` to state its
condition, which a practitioner never has. What *can* you check on your own data to gain
confidence that the clusters GTVMin returns are real (think of the boundary weights, of
`λ_min` computed for the *returned* clusters, of held-out data)? Answer in a few sentences.
"""),
    ("open", """
*Your answer here.*
""", """
*A model answer.* Take the clusters of the solution as a hypothesis: compute their boundary
weights and `λ_min` with `gm.check_well_connected(model, found_partition)` using the pooled
fit of each found cluster in place of `w̄_C`; if the chosen `λ` is well above `λ_min` and
below the consensus threshold, the clustering is self-consistent. Check stability: the same
clusters over a range of `λ` (the plateau of `gm.lam_path`), over bootstrap resamples of the
local data and with a few edges dropped. Finally, validation error on held-out samples must
be lower than for local training and for one global model.
"""),
]
