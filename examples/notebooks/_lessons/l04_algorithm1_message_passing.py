"""Lesson 4: Algorithm 1 as message passing (paper 001 Section IV)."""

CELLS = [
    ("md", """
# Lesson 4 — Algorithm 1 as message passing

**Learning goals.** After this lesson you can

1. say what *one node* and what *one edge* compute in an iteration of Algorithm 1, and which
   messages they need from their neighbours;
2. write the iteration yourself in a few lines of numpy and check it against
   `gm.solve_primal_dual`;
3. read the convergence of Algorithm 1 through its *certified* duality gap;
4. explain why the step scale `c` matters (`c = 1` against the package's default rule).

**Time.** About 60 minutes in class (three exercises, one of them writing code); the notebook
runs in about 20 s. **Prerequisites.** Lessons 1 and 3 (the flows `u_e`, capacities `λA_e`,
the certified gap); sparse matrix–vector products in numpy/scipy; proximal operators help but
are explained here.

**Reading.** *Networked Federated Learning* (SarcheshmehPour, Tian, Zhang, Jung, 2022),
Section IV "A Primal Dual Method for GTV Minimization", Algorithm 1 with the primal update (32)
and the dual update (33), and the duality gap (34). Lecture notes *CS-E4740 Federated
Learning* (A. Jung), 9.1 "FedRelax" is the same idea for a smooth penalty.
"""),
    ("code", """
import matplotlib.pyplot as plt
import networkx as nx
import numpy as np

import gtvmodel as gm
from gtvmodel import datasets, plot

plt.rcParams["figure.dpi"] = 80
"""),
    ("md", """
## 1. A small network

Two triangles of devices joined by the edge `2 — 3`; device `i` holds one number `a_i` and the
loss `L_i(w) = (w − a_i)²`; the penalty is `λ Σ_e |w_{e+} − w_{e−}|` with `λ = 0.4`.
"""),
    ("code", """
G = nx.Graph([(0, 1), (0, 2), (1, 2), (2, 3), (3, 4), (3, 5), (4, 5)])
a = np.array([1.0, 1.2, 0.8, -1.0, -0.8, -1.2])
model = gm.GTVModel(G, dim=1, penalty=gm.Norm2(), lam=0.4)
for i in model.nodes:
    model.set_loss(i, gm.QuadraticLoss([a[i]]))
exact = gm.solve_exact(model)
print("exact weights:", exact.weights[:, 0].round(4), "| P* =", round(exact.objective, 8))
"""),
    ("md", """
## 2. One iteration, node by node and edge by edge

Algorithm 1 keeps a weight `w_i` at every node and a flow `u_e` on every edge (the dual
variables of lesson 3). With steps `τ_i` (nodes) and `σ_e` (edges), one iteration is

* **node `i`** (primal update (32)): collect the flows on its incident edges, form
  `v_i = w_i − τ_i (Dᵀu)_i` where `(Dᵀu)_i = Σ_{e: i=e+} u_e − Σ_{e: i=e−} u_e`, then train
  locally: `w_i ← argmin_z L_i(z) + (z − v_i)²/(2τ_i)`. For our loss this is
  `(2τ_i a_i + v_i)/(1 + 2τ_i)`.
* **edge `e`** (dual update (33)): read the old and new weights of its two endpoints, form
  `u_e + σ_e (2(w_{e+} − w_{e−})_new − (w_{e+} − w_{e−})_old)` and clip it to the capacity
  `[−λA_e, λA_e]`.

A node needs only its own data and the flows on its edges; an edge needs only its two
endpoints: *message passing*. With the step scale `c = 1` the steps are `τ_i = 1/deg(i)` and
`σ_e = 1/2`. Below, the sparse incidence matrix `D` does "every node at once" and "every
edge at once".
"""),
    ("code", """
D = model.empirical_graph.incidence      # sparse: row e has +1 at e+ and -1 at e-
tau = 1.0 / model.degrees[:, None]       # c = 1
sigma = 0.5
cap = model.capacities[:, None]          # λ A_e


def node_step(W, U):
    V = W - tau * (D.T @ U)              # messages in: the flows on the node's edges
    return (2 * tau * a[:, None] + V) / (1 + 2 * tau)


def edge_step(U, W_new, W_old):
    U_bar = U + sigma * (D @ (2 * W_new - W_old))   # messages in: the two endpoint weights
    return np.clip(U_bar, -cap, cap)


W, U = np.zeros((6, 1)), np.zeros((7, 1))
snapshots = {0: (W, U)}
for k in range(1, 41):
    W_new = node_step(W, U)
    U = edge_step(U, W_new, W)
    W = W_new
    snapshots[k] = (W, U)

for k in (1, 3, 40):
    ref = gm.solve_primal_dual(model, max_iter=k, tol=0, step=1.0, record_every=None)
    same = np.allclose(ref.weights, snapshots[k][0]) and np.allclose(ref.flows, snapshots[k][1])
    print(f"after {k:2d} iterations: same as gm.solve_primal_dual(step=1.0)? {same}")
"""),
    ("md", """
The package runs exactly this iteration (vectorized over all nodes and edges, with a fast exact
node update for every library loss). Here are the messages at a few iterations: node colour is
`w_i`, arrows show the flows `u_e` (direction; width and colour: size). Both colour scales are
the same in all four panels: the flows start at 0 and grow towards the capacity, and the
bridge `2 — 3` fills up first.
"""),
    ("code", """
node_scale = plt.Normalize(-1.2, 1.2)                  # w_i, the same in every panel
flow_scale = plt.Normalize(0.0, model.capacities.max())  # |u_e| from 0 to the capacity λA_e
pos = nx.spring_layout(G, seed=4)
fig, axes = plt.subplots(2, 2, figsize=(12, 9), layout="constrained")
for ax, k in zip(axes.flat, (1, 2, 5, 40), strict=True):
    Wk, Uk = snapshots[k]
    u = Uk[:, 0]
    arrows = [(int(p), int(q)) if f >= 0 else (int(q), int(p))      # along the flow
              for (p, q), f in zip(model.edges, u, strict=True)]
    nx.draw_networkx_edges(nx.DiGraph(arrows), pos, ax=ax, arrowsize=20, node_size=700,
                           width=1 + 6 * np.abs(u) / flow_scale.vmax,
                           edge_color=np.abs(u), edge_cmap=plt.cm.plasma,
                           edge_vmin=flow_scale.vmin, edge_vmax=flow_scale.vmax)
    nx.draw_networkx_nodes(G, pos, ax=ax, node_size=700, node_color=Wk[:, 0],
                           cmap="viridis", vmin=node_scale.vmin, vmax=node_scale.vmax,
                           edgecolors="k")
    nx.draw_networkx_labels(G, pos, ax=ax, font_color="w", font_size=13)
    ax.set_title(f"after iteration {k}", fontsize=15)
    ax.set_axis_off()
bar = fig.colorbar(plt.cm.ScalarMappable(node_scale, "viridis"), ax=axes, shrink=0.6)
bar.set_label("node weight w_i", fontsize=14)
bar = fig.colorbar(plt.cm.ScalarMappable(flow_scale, "plasma"), ax=axes, shrink=0.6)
bar.set_label("flow |u_e| (capacity λA_e = 0.4 at the top)", fontsize=14)
"""),
    ("md", """
## 3. Convergence, certified

`gm.solve_primal_dual` stops when the **certified** duality gap (34) (lesson 3) is below
`tol · max(1, |P(w)|)`: a guarantee that `P(w) − P* ≤ gap`, not a heuristic.
`plot.convergence` draws the gap and the objective along the run.
"""),
    ("code", """
run = gm.solve_primal_dual(model, tol=1e-8, step=1.0, record_every=5, certificate_budget=None)
print(run.status, "after", run.iterations, "iterations; certified gap", f"{run.gap:.2e}")
print("true suboptimality:", f"{model.objective(run.weights) - exact.objective:.2e}")
ax = plot.convergence(run)
"""),
    ("md", """
## 4. The step scale `c`

The steps `τ_i = c/deg(i)`, `σ_e = 1/(2c)` are valid for every `c > 0` (Algorithm 1
converges), but `c` sets the speed: `c` has the units "weight per flow", and `c = 1` is only
good when weights and flows have similar sizes. The package's default rule
(`gm.ResidualBalancing`) picks `c` from the data and adapts it along the run. On paper 001's
stochastic block model (Section VI-A, small: 2 × 20 nodes, 40 % of the nodes without data,
`λ = 0.01`, so the flows are about 100 times smaller than the weights):
"""),
    ("code", """
data = datasets.sbm(sizes=(20, 20), p_in=0.5, p_out=0.05, m=5, rho=0.6, seed=0)
sbm = data.model(lam=0.01)
steps = {"c = 0.1": 0.1, "c = 1": 1.0, "c = 10": 10.0, "default rule": None}
fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
for name, step in steps.items():
    r = gm.solve_primal_dual(sbm, tol=1e-6, step=step, max_iter=3000, record_every=10)
    print(f"{name:>12}: {r.status} after {r.iterations} iterations")
    ax.semilogy(r.history.iteration, r.history.relative_gap, lw=2, label=name)
ax.axhline(1e-6, color="k", ls=":", label="tol")
ax.set_xlabel("iteration", fontsize=14)
ax.set_ylabel("certified relative gap", fontsize=14)
ax.set_title("Step scale c: same algorithm, different speed", fontsize=15)
ax.legend(fontsize=12)
ax.grid(alpha=0.3, which="both")
"""),
    ("md", """
Every run that stops is certified to the same accuracy; only the number of iterations
changes. A too small `c` barely moves the weights, `c = 1` is slow here because the flows are
small; the default rule lands near the best fixed `c` without trying several. It is a
heuristic, not a guarantee: on other instances a hand-picked `c` can beat it.
"""),
    ("md", """
## Exercises
"""),
    ("exercise", "q1", """
**Exercise 1.** Change the penalty to `φ(v) = ½ v²` (`gm.SquaredNorm2()`, the smooth penalty
of FedRelax). Only the edge update changes: it becomes `DU_e(v) = v · λA_e / (λA_e + σ_e)`
(no clipping). Write `edge_step_sq(U, W_new, W_old)` for it. The check runs your
`node_step` and `edge_step_sq` for 10 iterations and compares with the package on the same
graph.
"""),
    ("answer", """
def edge_step_sq(U, W_new, W_old):
    return None  # your code here
""", """
def edge_step_sq(U, W_new, W_old):
    U_bar = U + sigma * (D @ (2 * W_new - W_old))
    return U_bar * cap / (cap + sigma)
"""),
    ("check", """
first = edge_step_sq(np.zeros((7, 1)), np.ones((6, 1)), np.zeros((6, 1)))
assert first is not None, "write edge_step_sq first"
model_sq = gm.GTVModel(G, dim=1, penalty=gm.SquaredNorm2(), lam=0.4)
for i in model_sq.nodes:
    model_sq.set_loss(i, gm.QuadraticLoss([a[i]]))
W, U = np.zeros((6, 1)), np.zeros((7, 1))
for _ in range(10):
    W_new = node_step(W, U)
    U = edge_step_sq(U, W_new, W)
    W = W_new
ref = gm.solve_primal_dual(model_sq, max_iter=10, tol=0, step=1.0, record_every=None)
assert np.allclose(U, ref.flows, atol=1e-12), "flows differ from Algorithm 1"
assert np.allclose(W, ref.weights, atol=1e-12)
print("correct")
"""),
    ("hidden", """
rng_h = np.random.default_rng(5)
U0, W0, W1 = (rng_h.standard_normal(shape) for shape in ((7, 1), (6, 1), (6, 1)))
U_bar = U0 + sigma * (D @ (2 * W1 - W0))
expected = U_bar * cap / (cap + sigma)          # prox of σ·(λA_e ½‖·‖²)* at U_bar
assert np.allclose(edge_step_sq(U0, W1, W0), expected, atol=1e-12)
""", 2),
    ("exercise", "q2", """
**Exercise 2.** Implement the stopping rule yourself: run your `node_step` / `edge_step` loop
(penalty `Norm2`, `model`), certify `(W, U)` with `gm.certify(model, W, U)` every 10
iterations, and stop as soon as `cert.relative_gap <= 1e-6`. Store the weights in `W_stop` and
the number of iterations in `k_stop`.
"""),
    ("answer", """
W_stop, k_stop = None, None  # your code here
""", """
W, U = np.zeros((6, 1)), np.zeros((7, 1))
for k in range(1, 10_001):
    W_new = node_step(W, U)
    U = edge_step(U, W_new, W)
    W = W_new
    if k % 10 == 0 and gm.certify(model, W, U).relative_gap <= 1e-6:
        break
W_stop, k_stop = W, k
"""),
    ("check", """
assert W_stop is not None, "run the loop first"
cert = gm.certify(model, W_stop)
p = model.objective(W_stop)
assert model.objective(W_stop) - exact.objective <= 1e-6 * max(1.0, abs(p)) + 1e-9
assert k_stop % 10 == 0 and k_stop <= 1000, "certify every 10 iterations"
print(f"correct: stopped after {k_stop} iterations, certified gap {cert.gap:.1e}")
"""),
    ("hidden", """
W_h, U_h = np.zeros((6, 1)), np.zeros((7, 1))
k_first = None
for k_h in range(1, 10_001):
    W_new_h = (2 * tau * a[:, None] + W_h - tau * (D.T @ U_h)) / (1 + 2 * tau)
    U_h = np.clip(U_h + sigma * (D @ (2 * W_new_h - W_h)), -cap, cap)
    W_h = W_new_h
    if k_h % 10 == 0 and gm.certify(model, W_h, U_h).relative_gap <= 1e-6:
        k_first = k_h
        break
assert k_stop == k_first, f"the first certified checkpoint is iteration {k_first}"
assert np.allclose(W_stop, W_h, atol=1e-12)
""", 2),
    ("exercise", "q3", """
**Exercise 3 — open question.** The default step rule (`gm.ResidualBalancing`) adapts `c`
along the run. Why can adapting the steps *during* a run be dangerous for a primal-dual method,
and what could a safeguard look like? (Hint: what does the convergence proof of Algorithm 1
assume about `τ_i` and `σ_e`?) Answer in a few sentences.
"""),
    ("open", """
*Your answer here.*
""", """
*A model answer.* The convergence proof (Chambolle–Pock, the basis of Algorithm 1) assumes
fixed steps with `τ_i σ_e` small enough for the graph (here `τ_i = c/deg(i)`,
`σ_e = 1/(2c)`); changing `c` at every iteration can make the iterates cycle or diverge,
because each change restarts the method from a different "metric". Safeguards: change `c`
only finitely often, or less and less often (e.g. only when the primal and dual residuals
differ by a large factor, and with a growing interval between changes), keep `τσ` within the
bound at every change, and — as the package does — judge the result by the certified gap,
which is valid whatever the steps were.
"""),
]
