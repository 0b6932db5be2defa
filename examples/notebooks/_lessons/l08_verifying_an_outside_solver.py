"""Lesson 8: Verifying an outside solver (SCS through plain CVXPY; paper 001 (16), (24), (34))."""

CELLS = [
    ("md", """
# Lesson 8 — Verifying an outside solver

**Learning goals.** After this lesson you can

1. write GTV minimization yourself in plain CVXPY and solve it with a solver the package does
   not control (SCS, a first-order conic solver with loose default tolerances);
2. certify the outside solver's weights *alone* with `gm.certify(model, W)`, and read the
   verdict: the certified gap, the relative gap, `success_at(tol)`;
3. turn the solver's dual variables into the package's flows `u_e` (getting the sign right
   from the optimality conditions) and certify with them;
4. choose the solver's tolerance from the certificate instead of trusting its status
   `"optimal"`.

**Time.** About 45 minutes in class (three exercises); the notebook runs in about 20 s.
**Prerequisites.** Lessons 3 (flows, the dual problem) and 6 (certifying your own solver);
writing a small CVXPY problem (variables, objective, constraints, `dual_value`).

**Reading.** *Networked Federated Learning* (SarcheshmehPour, Tian, Zhang, Jung, 2022): the
primal problem (16), the dual (24) and the duality gap (34). The package's
`docs/certificates.md` describes the certificate. SCS: O'Donoghue, Chu, Parikh, Boyd,
"Conic optimization via operator splitting and homogeneous self-dual embedding" (2016).
"""),
    ("code", """
import cvxpy as cp
import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
from sklearn.datasets import load_diabetes

import gtvmodel as gm

plt.rcParams["figure.dpi"] = 80
plt.rcParams["font.size"] = 13
"""),
    ("md", """
## 1. The problem, on real data

The ten clinics of lesson 1 (exercise 4): scikit-learn's diabetes dataset, 442 patients split
into ten age groups; each clinic fits a linear model of disease progression on body-mass
index, blood pressure and an intercept, with the squared loss `L_c(w) = (1/m_c)‖y_c − X_c w‖²`.
Neighbouring age groups are joined by an edge (a chain), penalty `λ Σ_e ‖w_{e+} − w_{e−}‖₂`
with `λ = 0.3`. The package's model is the *reference*: it defines the problem whose answer we
want to check.
"""),
    ("code", """
Xd, yd = load_diabetes(return_X_y=True)
age = Xd[:, 0]
clinic = np.searchsorted(np.quantile(age, np.linspace(0.1, 0.9, 9)), age, side="right")
feats = np.column_stack([Xd[:, 2:4] / Xd[:, 2:4].std(axis=0), np.ones(len(yd))])  # bmi, bp, 1
target = (yd - yd.mean()) / yd.std()
local = {c: (feats[clinic == c], target[clinic == c]) for c in range(10)}

model = gm.GTVModel(nx.path_graph(10), dim=3, penalty=gm.Norm2(), lam=0.3)
for c in range(10):
    model.set_loss(c, gm.SquaredLoss(*local[c]))
print(f"{model.num_nodes} clinics, {model.num_edges} edges, patients per clinic:",
      [len(local[c][1]) for c in range(10)])
"""),
    ("md", """
## 2. The same problem in plain CVXPY, solved by SCS

We write the problem ourselves, as a colleague with no knowledge of gtvmodel would. An extra
variable `V` holds the differences across the edges, tied to the weights by the constraint
`V = D W` (`D` the incidence matrix: `(D W)_e = w_{e+} − w_{e−}`). A quick solve: SCS with
the tolerances `eps_abs = eps_rel = 1e-3` (CVXPY's defaults for SCS are tighter), from scratch
(`warm_start=False`). SCS reports `"optimal"`.
"""),
    ("code", """
D = model.empirical_graph.incidence            # sparse |E| x n
A = model.edge_weights                         # A_e, in the package's edge order
W = cp.Variable((model.num_nodes, model.dim))
V = cp.Variable((model.num_edges, model.dim))
fit = sum(cp.sum_squares(local[c][1] - local[c][0] @ W[c]) / len(local[c][1])
          for c in range(10))
link = V == D @ W                              # its dual variable: one row per edge
problem = cp.Problem(cp.Minimize(fit + model.lam * (A @ cp.norm(V, 2, axis=1))), [link])
problem.solve(solver="SCS", eps_abs=1e-3, eps_rel=1e-3, warm_start=False)
W_scs = W.value
print("SCS:", problem.status, "| its objective", problem.value)
print("the package's objective P(W_scs):", model.objective(W_scs))
"""),
    ("md", """
## 3. Certify the weights alone

`gm.certify(model, W)` needs nothing but the weights: it builds flows from them, repairs the
flows to be dual-feasible and returns a gap with the guarantee `P(W) − P* ≤ gap`. Its
`summary()` is the verdict; `success_at(tol)` asks "is the relative gap at most `tol`?".
"""),
    ("code", """
cert_alone = gm.certify(model, W_scs)
print(cert_alone.summary())
print("\\ncertified to a relative accuracy of 1e-6?", cert_alone.success_at(1e-6))
print("certified to a relative accuracy of 1e-3?", cert_alone.success_at(1e-3))
"""),
    ("md", """
SCS said "optimal". The certificate puts a number on it: the objective of SCS's weights is
within `gap` of the true optimum, whatever `P*` is. Read the relative gap against the accuracy
you need: the two verdicts above say whether it is good enough for `1e-3` (a model fit) and
for a strict `1e-6`.

## 4. Certify with SCS's dual variables

SCS also returns dual variables: `link.dual_value`, one row per edge. They are the flows `u_e`
up to a sign convention, which we fix with the node condition of lesson 3: at the optimum
`−(Dᵀu)_i = ∇L_i(ŵ_i)`. Try both signs:
"""),
    ("code", """
grads = model.loss_gradients(W_scs)
for sign in (+1, -1):
    U = sign * link.dual_value
    residual = np.abs(-(D.T @ U) - grads).max()
    cert = gm.certify(model, W_scs, U)
    print(f"u = {sign:+d} · dual: node condition off by {residual:.1e}, certified gap "
          f"{cert.gap:.2e}")
"""),
    ("md", """
One sign meets the node condition to SCS's accuracy and certifies as well as the weights
alone; the other gives a large gap. The large gap is still *true* (a certificate is never
below the real suboptimality) — it is only useless. A wrong convention costs tightness, never
soundness.
"""),
    ("md", """
## 5. Tighter tolerances

`eps_abs` and `eps_rel` set when SCS stops. Each call below starts from scratch
(`warm_start=False`), so every point is what SCS returns at that tolerance:
"""),
    ("code", """
eps_grid = np.array([1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7])
rel_gap = []
for eps in eps_grid:
    problem.solve(solver="SCS", eps_abs=eps, eps_rel=eps, warm_start=False)
    rel_gap.append(gm.certify(model, W.value).relative_gap)
rel_gap = np.array(rel_gap)
fig, ax = plt.subplots(figsize=(7.5, 4.5), layout="constrained")
ax.loglog(eps_grid, rel_gap, "o-", lw=2, ms=8, label="certified relative gap of SCS's W")
ax.axhline(1e-6, color="k", ls="--", lw=1.5, label="required accuracy 1e-6")
ax.invert_xaxis()
ax.set_xlabel("SCS tolerance eps_abs = eps_rel (tighter to the right)")
ax.set_ylabel("certified relative gap")
ax.set_title("What SCS's tolerance buys, certified")
ax.legend(fontsize=12)
ax.grid(alpha=0.3, which="both")
"""),
    ("md", """
The certified accuracy follows the tolerance, not always smoothly (SCS's stopping test is on
its residuals, not on the objective). The certificate tells you which tolerance is enough for
the accuracy you need — on *your* problem, without knowing `P*`.

## Exercises
"""),
    ("exercise", "q1", """
**Exercise 1 — the sign convention.** Store in `U_scs` the flows in the package's convention
(`u_e > 0` flows from `e+` to `e−`) obtained from the dual variables of SCS's quick solve
of section 2. Re-solve first with the quick tolerances of section 2
(`problem.solve(solver="SCS", eps_abs=1e-3, eps_rel=1e-3, warm_start=False)`), since section 5
solved the problem again (the same call gives the same `W_scs`).
"""),
    ("answer", """
U_scs = None  # your code here
""", """
problem.solve(solver="SCS", eps_abs=1e-3, eps_rel=1e-3, warm_start=False)
U_scs = -link.dual_value        # the node condition -(D^T u)_i = grad L_i holds for -dual
"""),
    ("check", """
assert U_scs is not None, "compute U_scs first"
assert np.shape(U_scs) == (model.num_edges, model.dim), "one row per edge"
residual = np.abs(-(D.T @ U_scs) - model.loss_gradients(W_scs)).max()   # same solve
assert residual < 1e-3, f"the node condition is off by {residual:.1e}: check the sign"
print(f"correct: node condition holds to {residual:.1e}")
"""),
    ("hidden", """
exact = gm.solve_exact(model)
assert np.allclose(U_scs, exact.flows, atol=1e-2), "close to the exact optimal flows"
ratio = np.linalg.norm(U_scs, axis=1) / model.capacities
assert ratio.max() <= 1 + 1e-3, "within the capacities λ A_e"
""", 2),
    ("exercise", "q2", """
**Exercise 2 — the tolerance you need.** From the sweep of section 5 (`eps_grid`,
`rel_gap`), find the *largest* tolerance whose weights are certified to a relative gap of at
most `1e-6` and store it in `eps_needed`.
"""),
    ("answer", """
eps_needed = None  # your code here
""", """
eps_needed = float(eps_grid[rel_gap <= 1e-6].max())
"""),
    ("check", """
assert eps_needed is not None, "find eps_needed first"
assert eps_needed in eps_grid, "pick a value of eps_grid"
problem.solve(solver="SCS", eps_abs=eps_needed, eps_rel=eps_needed, warm_start=False)
assert gm.certify(model, W.value).success_at(1e-6), "not certified at this tolerance"
print(f"correct: eps = {eps_needed:g} is enough")
""", 1),
    ("hidden", """
for eps in eps_grid[eps_grid > eps_needed]:
    problem.solve(solver="SCS", eps_abs=eps, eps_rel=eps, warm_start=False)
    assert not gm.certify(model, W.value).success_at(1e-6), f"eps = {eps:g} is enough too"
""", 2),
    ("exercise", "q3", """
**Exercise 3 — open question.** SCS reported `"optimal"` at the tolerance `1e-3`, and its
own residuals were small. What does the certificate add that the solver's status does not?
Think of (a) a solver with a bug in how it scales the problem, (b) a model file that differs
from what the solver was given (say, a different `λ`), (c) a reviewer who does not trust your
code. Answer in a few sentences.
"""),
    ("open", """
*Your answer here.*
""", """
*A model answer.* The status is the solver's own claim, measured in its own (scaled,
reformulated) problem; the certificate is computed independently from the weights and the
problem as *you* defined it, and it is sound: `P(W) − P* ≤ gap` whatever produced `W`.
(a) A scaling bug makes the solver's residuals small in the wrong problem; the certificate, on
the original problem, shows a large gap. (b) If the solver solved the problem with another
`λ`, its weights are not optimal for the reference model and the certificate says so (a large
gap), where the status still says "optimal". (c) A reviewer can rerun `gtvmodel certify` on
the saved problem and weights, with no need to trust — or even run — the solver.
"""),
]
