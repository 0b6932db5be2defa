"""Lesson 3: Duality, flows on the network (lecture notes 7.3, paper 001 III-B and IV)."""

CELLS = [
    ("md", """
# Lesson 3 — Duality: flows on the network

**Learning goals.** After this lesson you can

1. state the dual of GTV minimization as a problem of *flows* `u_e` on the edges, with one
   capacity `λ A_e` per edge;
2. read the optimality conditions as a flow network: every node's demand `∇L_i(ŵ_i)` is met
   by the net flow into it, and edges at capacity are where the learnt weights differ;
3. check strong duality (`P* = D*`) numerically with `gm.solve_exact` and `gm.solve_dual`;
4. use a *certified duality gap* (`gm.certify`) to bound how far a stopped solver is from
   optimal — without knowing the optimum.

**Time.** About 50 minutes in class (four exercises); the notebook runs in about 15 s.
**Prerequisites.** Lesson 1; convex conjugates and Lagrange duality at the level of a first
course in convex optimization (weak duality, `P* ≥ D*`).

**Reading.** Lecture notes *CS-E4740 Federated Learning* (A. Jung), 7.3 "The Dual Problem"
and 7.4.3 "Network Flow Optimization"; *Networked Federated Learning* (SarcheshmehPour, Tian,
Zhang, Jung, 2022), Section III-B "The Dual Problem" (equations (19), (24), (27)) and the
duality gap (34) of Section IV.
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
## 1. A small network: two groups and a bridge

Two groups of four devices (complete graphs) are joined by one *bridge* edge `3 — 4`. Each
device holds one number `a_i` and the loss `L_i(w) = (w − a_i)²` (*convex clustering*, notes
7.4.2): the first group measured values near `+1`, the second near `−1`.
"""),
    ("code", """
G = nx.barbell_graph(4, 0)                 # cliques {0..3} and {4..7}, bridge 3 - 4
rng = np.random.default_rng(0)
a = np.r_[1.0 + 0.2 * rng.standard_normal(4), -1.0 + 0.2 * rng.standard_normal(4)]
model = gm.GTVModel(G, dim=1, penalty=gm.Norm2(), lam=0.3)
for i in model.nodes:
    model.set_loss(i, gm.QuadraticLoss([a[i]]))
print("a =", a.round(3))
print("edges (e+, e-):", model.edges.tolist())
"""),
    ("md", """
## 2. The dual problem (paper 001 (24), (27))

Write `D` for the incidence matrix (`(D w)_e = w_{e+} − w_{e−}`). For a norm penalty the dual
of GTV minimization is a **flow problem**: find edge flows `u_e` that

    maximize   D(u) = − Σ_i L_i*( −(Dᵀu)_i )      subject to   ‖u_e‖_* ≤ λ A_e  for every edge,

where `L_i*` is the convex conjugate of the loss and `(Dᵀu)_i` is the net flow *out of* node
`i` (a flow `u_e > 0` runs from `e+` to `e−`). For `L_i(w) = (w − a_i)²`, `L_i*(s) = s a_i +
s²/4`. Every feasible `u` gives a **lower bound** `D(u) ≤ P*` (weak duality); at the optimum
they are equal (strong duality).

`gm.solve_exact` solves the primal problem (16) and returns optimal flows as well;
`gm.solve_dual` solves the dual problem on its own.
"""),
    ("code", """
primal = gm.solve_exact(model)
dual = gm.solve_dual(model)
print(f"P* = {primal.objective:.10f}")
print(f"D* = {dual.objective:.10f}")
print(f"P* - D* = {primal.objective - dual.objective:.2e}   (strong duality)")
print("weights w_i:", primal.weights[:, 0].round(4))
print("flows   u_e:", dual.flows[:, 0].round(4))
"""),
    ("md", """
## 3. Flows as messages

The optimality conditions say

* **node condition**: `−(Dᵀu)_i = ∇L_i(ŵ_i)` — the net flow *into* node `i` equals the pull of
  its own data (its "demand");
* **edge condition**: `|u_e| ≤ λ A_e`, with equality (the edge is *saturated*) wherever
  `ŵ_{e+} ≠ ŵ_{e−}`.

So inside a group, the flows move "opinion" between devices until they agree; the bridge can
carry at most `λ A_e`, and when it is full the two groups keep different models.
"""),
    ("code", """
D = model.empirical_graph.incidence        # sparse |E| x n, never dense
u, W = dual.flows, primal.weights
print("node condition, max error:", np.abs(-(D.T @ u) - model.loss_gradients(W)).max())
print("capacities λ A_e:", model.capacities.round(3))
print("|u_e| / (λ A_e): ", (np.abs(u[:, 0]) / model.capacities).round(3))

ax = plot.graph(model, node_color=W, edge_values=u, arrows=True, with_labels=True, seed=2,
                node_label="learnt w_i", edge_label="|u_e| (flow on edge e)",
                title="Optimal flows: arrows point along u_e")
"""),
    ("md", """
The bridge `3 — 4` carries the largest flow, exactly its capacity `λ A_e = 0.3`: it is the
only saturated edge, and the only edge across which the learnt weights differ. Inside each
clique the weights are equal and the flows are below capacity.

## 4. Certificates for a stopped solver

Any pair `(w, u)` gives an upper bound on the suboptimality: `P(w) − P* ≤ P(w) − D(u')`,
where `u'` is `u` repaired to be dual-feasible. `gm.certify(model, w, u)` computes this
**certified gap** (34) rigorously. We stop Algorithm 1 (lesson 4) after a few iterations and
compare the certificate with the true suboptimality `P(w) − P*`, which we know here because
the problem is small.
"""),
    ("code", """
p_star = primal.objective
rows = []
for k in [1, 2, 5, 10, 20, 50, 100]:
    run = gm.solve_primal_dual(model, max_iter=k, tol=0, record_every=None)
    cert = gm.certify(model, run.weights, run.flows)
    rows.append((k, model.objective(run.weights) - p_star, cert.gap))
    print(f"{k:4d} iterations: true P(w) - P* = {rows[-1][1]:.3e}   certified gap = {cert.gap:.3e}")

k, true_gap, cert_gap = map(np.array, zip(*rows, strict=True))
fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5), layout="constrained")
left.loglog(k, cert_gap, "o-", lw=2, label="certified gap P(w) − D(u')")
left.loglog(k, true_gap, "s--", lw=2, label="true suboptimality P(w) − P*")
left.set_ylabel("gap", fontsize=14)
left.set_title("Both fall together ...", fontsize=15)
left.legend(fontsize=12)
assert np.all(cert_gap >= true_gap), "a certificate is never below the true gap"
excess = (cert_gap - true_gap) / true_gap              # 0.01 = the certificate is 1 % larger
right.loglog(k, excess, "o-", lw=2, color="C2")
right.set_ylabel("(certified − true) / true", fontsize=14)
right.set_title("... the certificate is larger by this fraction", fontsize=15)
for ax in (left, right):
    ax.set_xlabel("iterations of Algorithm 1", fontsize=14)
    ax.tick_params(labelsize=12)
    ax.grid(alpha=0.3, which="both")
"""),
    ("md", """
On the left the two curves lie on top of each other. The right panel shows by how much the
certificate exceeds the true suboptimality, as a fraction of it: always positive (the
certificate is sound, never below the truth) and a few percent at most (it is tight).

In practice you do not know `P*`: the certificate is what tells you when to stop (lesson 4
uses exactly this as Algorithm 1's stopping rule, lesson 6 certifies a solver you write
yourself).

## Exercises
"""),
    ("exercise", "q1", """
**Exercise 1.** Evaluate the dual objective `D(u) = − Σ_i L_i*(−(Dᵀu)_i)` yourself for the
flows `u = dual.flows`, with `L_i*(s) = s a_i + s²/4`. Store the number in `dual_value`.
"""),
    ("answer", """
dual_value = None  # your code here
""", """
s = -(D.T @ dual.flows)[:, 0]            # s_i = -(D^T u)_i, the argument of L_i*
dual_value = float(-np.sum(s * a + s**2 / 4))  # - sum_i L_i*(-(D^T u)_i)
"""),
    ("check", """
assert dual_value is not None, "compute dual_value first"
assert abs(dual_value - dual.objective) <= 1e-6 * max(1.0, abs(dual.objective)), \\
    f"expected {dual.objective}"
print("correct:", dual_value)
"""),
    ("hidden", """
assert isinstance(dual_value, float | np.floating), "dual_value must be one number"
s_i = model.loss_gradients(primal.weights)[:, 0]      # at the optimum s_i = ∇L_i(ŵ_i)
assert np.isclose(dual_value, -np.sum(s_i * a + s_i**2 / 4), rtol=1e-5)
assert dual_value <= primal.objective + 1e-7          # weak duality
""", 2),
    ("exercise", "q2", """
**Exercise 2.** Which edges are saturated (`|u_e| ≥ λ A_e (1 − 10⁻⁶)`) in the optimal flows
`dual.flows`? Store them as a list of node-label pairs `(e+, e−)` in `saturated`. (The check
compares with the edges across which the learnt weights differ.)
"""),
    ("answer", """
saturated = None  # your code here
""", """
full = np.abs(dual.flows[:, 0]) >= model.capacities * (1 - 1e-6)
saturated = [tuple(int(v) for v in model.edges[e]) for e in np.flatnonzero(full)]
"""),
    ("check", """
assert saturated is not None, "compute saturated first"
differ = [(int(p), int(q)) for p, q in model.edges
          if abs(primal.weights[p, 0] - primal.weights[q, 0]) > 1e-6]
assert sorted(map(tuple, saturated)) == differ, f"expected {differ}"
print("correct:", saturated)
"""),
    ("hidden", """
assert all(len(e) == 2 for e in saturated), "a list of (e+, e-) pairs"
assert sorted(map(tuple, saturated)) == [(3, 4)], "only the bridge is saturated"
""", 1),
    ("exercise", "q3", """
**Exercise 3.** Raise `λ` until the bridge is no longer saturated. Then all devices agree on
one model. Find the smallest capacity `λ` (to 3 digits, `lam_merge`) at which this happens.
*Hint:* once merged, the common weight is the mean of `a`, and the bridge must carry the
demand of one whole group: `|u_bridge| = |Σ_{i in group 1} ∇L_i(mean(a))|`.
"""),
    ("answer", """
lam_merge = None  # your code here
""", """
w_common = a.mean()
lam_merge = abs(np.sum(2 * (w_common - a[:4])))   # demand of group {0..3}, bridge A_e = 1
"""),
    ("check", """
assert lam_merge is not None, "compute lam_merge first"
lam_crit = gm.consensus_threshold(model)
assert abs(lam_merge - lam_crit) <= 1e-3 * lam_crit, f"expected about {lam_crit:.4f}"
model.lam = 1.01 * lam_merge
assert np.ptp(gm.solve_exact(model).weights) < 1e-6      # all agree just above it
model.lam = 0.3
print("correct:", round(lam_merge, 4))
"""),
    ("hidden", """
lam_before = model.lam
model.lam = 0.99 * float(lam_merge)
assert np.ptp(gm.solve_exact(model).weights) > 1e-6, "just below lam_merge they still differ"
model.lam = lam_before
""", 1),
    ("exercise", "q4", """
**Exercise 4 — open question.** The flows `u_e` are *messages* between devices. What does a
flow reveal about the two devices' data (think of the node condition
`−(Dᵀu)_i = ∇L_i(ŵ_i)`)? Would you be comfortable if the flows of a medical network were
published? Answer in a few sentences.
"""),
    ("open", """
*Your answer here.*
""", """
*A model answer.* A node's net flow equals the gradient of its own loss at the learnt
weights, `∇L_i(ŵ_i) = 2(ŵ_i − a_i)` here: knowing `ŵ_i` and the flows on the edges of node
`i` reveals `a_i`, the node's data. With local datasets of several samples the gradient
reveals a summary of them (for the squared loss, a combination of `X_iᵀX_i` and `X_iᵀy_i`).
Publishing flows is therefore a privacy leak; lesson 7 shows how noise blurs such messages.
"""),
]
