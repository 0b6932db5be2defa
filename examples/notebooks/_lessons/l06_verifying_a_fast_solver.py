"""Lesson 6: Verifying a fast solver (paper 001 (34); the gtvmodel certify command)."""

CELLS = [
    ("md", """
# Lesson 6 — Verifying a fast solver

**Learning goals.** After this lesson you can

1. write a federated solver of your own in a few lines (gradient descent on GTV minimization
   with the smooth penalty `½‖w_i − w_j‖²`, the penalty of FedRelax);
2. certify *any* answer, from any solver, with `gm.certify`: a number `gap` with the guarantee
   `P(w) − P* ≤ gap`, computed without knowing `P*`;
3. watch the certified gap track the true suboptimality as your solver runs;
4. check an answer from the command line with `gtvmodel certify`, for solvers written in any
   language.

**Time.** About 45 minutes in class (three exercises); the notebook runs in about 20 s.
**Prerequisites.** Lessons 1 and 3 (the certified gap); gradient descent and its step size
`1/β`; a terminal (exit codes).

**Reading.** *Networked Federated Learning* (SarcheshmehPour, Tian, Zhang, Jung, 2022): the
primal problem (16), the dual (24) and the duality gap (34) of Section IV. Lecture notes
*CS-E4740 Federated Learning* (A. Jung), 5.1 "Gradient Descent" and 9.1 "FedRelax". The
package's `docs/certificates.md` and `docs/file_format.md` describe the certificate and the
file format.
"""),
    ("code", """
import subprocess
import sys

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np

import gtvmodel as gm
import gtvmodel.cli
from gtvmodel import datasets

plt.rcParams["figure.dpi"] = 80
"""),
    ("md", """
## 1. The problem

Paper 001's stochastic block model (Section VI-A, small): two clusters of 10 nodes, 5 noisy
samples per node, squared loss `L_i(w) = (1/m_i)‖y_i − X_i w‖²`. The penalty is the smooth
`λ Σ_e A_e ½‖w_{e+} − w_{e−}‖²` (`gm.SquaredNorm2()`), so the whole objective is smooth and
gradient descent applies. For reference we also solve it exactly (only possible because it is
small).
"""),
    ("code", """
data = datasets.sbm(sizes=(10, 10), p_in=0.6, p_out=0.05, m=5, sigma=0.1, seed=3)
model = data.model(penalty=gm.SquaredNorm2(), lam=5.0)
p_star = gm.solve_exact(model).objective
print(f"n = {model.num_nodes}, |E| = {model.num_edges}, P* = {p_star:.10f}")
"""),
    ("md", """
## 2. Gradient descent in a few lines

The gradient of `P(W) = Σ_i L_i(w_i) + (λ/2) Σ_e A_e ‖w_{e+} − w_{e−}‖²` is
`∇L_i(w_i) + λ (L_G W)_i`, with `L_G` the weighted graph Laplacian (networkx builds it). A
safe step is `1/β`, with `β` a Lipschitz constant of the gradient: the largest local curvature
`2 λ_max(X_iᵀX_i/m_i)` plus `λ λ_max(L_G)`. Every node computes its own gradient from its data
and its neighbours' weights: this is a federated algorithm.
"""),
    ("code", """
lap = nx.laplacian_matrix(model.graph, nodelist=model.nodes, weight="weight")
beta = (max(2 * np.linalg.eigvalsh(data.X[i].T @ data.X[i] / len(data.X[i]))[-1]
            for i in data.X)
        + model.lam * np.linalg.eigvalsh(lap.toarray())[-1])


def grad(W):
    return model.loss_gradients(W) + model.lam * (lap @ W)


W = np.zeros((model.num_nodes, model.dim))
log = []
for k in range(1, 301):
    W = W - grad(W) / beta
    if k in (1, 3, 10, 30, 100, 200, 300):
        cert = gm.certify(model, W)              # weights only: certify builds the flows
        log.append((k, model.objective(W) - p_star, cert.gap))
        print(f"step {k:3d}: true P(W) - P* = {log[-1][1]:.3e}   certified gap = {cert.gap:.3e}")
W_gd = W
"""),
    ("md", """
## 3. The certificate tracks the truth

`gm.certify(model, W)` builds flows `u` from the weights, repairs them to be dual-feasible and
returns `gap = P(W) − D(u)`. Weak duality gives `D(u) ≤ P*`, hence `gap ≥ P(W) − P*`: the
certificate can be loose, but it can never claim more accuracy than the answer has. On the
left, the two on a log scale; on the right, their ratio, never below 1 (sound), and how far
above 1 it is (how loose).
"""),
    ("code", """
k, true_gap, cert_gap = map(np.array, zip(*log, strict=True))
assert np.all(cert_gap >= true_gap - 1e-9)      # soundness, on every checkpoint
fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5), layout="constrained")
left.loglog(k, cert_gap, "o-", lw=2, label="certified gap (gm.certify)")
left.loglog(k, true_gap, "s--", lw=2, label="true suboptimality P(W) − P*")
left.set_ylabel("gap", fontsize=14)
left.set_title("Certifying your own gradient descent", fontsize=15)
left.legend(fontsize=12)
right.semilogx(k, cert_gap / true_gap, "o-", lw=2, color="C2")
right.axhline(1.0, color="k", ls="--", lw=1.5, label="1: the certificate is exact")
right.set_ylim(0, 1.1 * (cert_gap / true_gap).max())
right.set_ylabel("certified gap / true suboptimality", fontsize=14)
right.set_title("How loose the certificate is", fontsize=15)
right.legend(fontsize=12, loc="lower right")
for ax in (left, right):
    ax.set_xlabel("gradient steps", fontsize=14)
    ax.tick_params(labelsize=12)
    ax.grid(alpha=0.3, which="both")
"""),
    ("md", """
## 4. From the command line

A solver written in C, Julia or Rust can be checked the same way: save the problem once
(`model.save`), write the weights as `.npy`, `.npz` or `.csv`, and run
`gtvmodel certify PROBLEM WEIGHTS --tol T`. The exit code is `0` when the gap is at most
`T · max(1, |P(W)|)`, `1` when it is not, `2` for bad input. (In a terminal you type
`gtvmodel certify problem.npz w_gd.csv --tol 1e-6`; here we call it through Python.)
"""),
    ("code", """
model.save("problem.npz")
gm.io.save_weights("w_gd.csv", W_gd)
out = subprocess.run([sys.executable, "-m", "gtvmodel", "certify", "problem.npz", "w_gd.csv",
                      "--tol", "1e-6"], capture_output=True, text=True)
print(out.stdout)
print("exit code:", out.returncode)
"""),
    ("md", """
## Exercises
"""),
    ("exercise", "q1", """
**Exercise 1.** Make your solver faster: Nesterov's accelerated gradient descent
(`V = W + (k − 1)/(k + 2) · (W − W_prev)`, then `W_new = V − grad(V)/β`). Run it from zero,
certify every 10 steps with `gm.certify(model, W)`, and stop as soon as
`cert.relative_gap <= 1e-6`. Store the weights in `W_acc` and the number of steps in `k_acc`.
"""),
    ("answer", """
W_acc, k_acc = None, None  # your code here
""", """
W = W_prev = np.zeros((model.num_nodes, model.dim))
for k in range(1, 5001):
    V = W + (k - 1) / (k + 2) * (W - W_prev)
    W_prev, W = W, V - grad(V) / beta
    if k % 10 == 0 and gm.certify(model, W).relative_gap <= 1e-6:
        break
W_acc, k_acc = W, k
"""),
    ("check", """
assert W_acc is not None, "run your accelerated solver first"
cert = gm.certify(model, W_acc)
assert cert.relative_gap <= 1e-6, "not certified to 1e-6"
assert model.objective(W_acc) - p_star <= cert.gap + 1e-9          # and truly that accurate
assert k_acc % 10 == 0 and k_acc < 200, "should need fewer than 200 steps"
print(f"correct: certified after {k_acc} accelerated steps")
"""),
    ("hidden", """
W_h = W_prev_h = np.zeros((model.num_nodes, model.dim))
k_first = None
for k_h in range(1, 5001):
    V_h = W_h + (k_h - 1) / (k_h + 2) * (W_h - W_prev_h)
    W_prev_h, W_h = W_h, V_h - grad(V_h) / beta
    if k_h % 10 == 0 and gm.certify(model, W_h).relative_gap <= 1e-6:
        k_first = k_h
        break
assert k_acc == k_first, f"Nesterov's method is first certified at step {k_first}"
""", 2),
    ("exercise", "q2", """
**Exercise 2.** Certify the weights after only 10 plain gradient steps from the command line
at `--tol 1e-6` (as in section 4; recompute the weights) and store the exit code in
`exit_code_early`. *Tip:* `gtvmodel.cli.main(["certify", ...])` is the command's own entry
point (it returns the exit code); calling it saves starting a new Python process.
"""),
    ("answer", """
exit_code_early = None  # your code here
""", """
W10 = np.zeros((model.num_nodes, model.dim))
for _ in range(10):
    W10 = W10 - grad(W10) / beta
gm.io.save_weights("w10.csv", W10)
exit_code_early = gtvmodel.cli.main(["certify", "problem.npz", "w10.csv", "--tol", "1e-6"])
"""),
    ("check", """
assert exit_code_early is not None, "run the command first"
W10_ref = np.zeros((model.num_nodes, model.dim))
for _ in range(10):
    W10_ref = W10_ref - grad(W10_ref) / beta
assert not gm.certify(model, W10_ref).success_at(1e-6)      # 10 steps are not enough
assert exit_code_early == 1, "the command's verdict 'not certified' is exit code 1"
print("correct")
"""),
    ("hidden", """
assert isinstance(exit_code_early, int | np.integer), "an exit code is an integer"
assert exit_code_early not in (0, 2), "0 is 'certified', 2 is 'bad input'"
""", 1),
    ("exercise", "q3", """
**Exercise 3 — open question.** The certificate needed no knowledge of `P*`. A colleague
proposes to stop gradient descent instead when `‖W_k − W_{k−1}‖` is below `10⁻⁶`. Give a
reason why this stopping rule can stop far from the optimum, and say what the certificate
guarantees that it does not. Answer in a few sentences.
"""),
    ("open", """
*Your answer here.*
""", """
*A model answer.* A small step only says that the method moves slowly: with a small step size
`1/β` on an ill-conditioned problem (a weak edge, a flat loss) gradient descent creeps along a
valley while still far from the optimum, so `‖W_k − W_{k−1}‖` is tiny but `P(W_k) − P*` is
large; how large cannot be read from the step. The certified gap is a bound on exactly that
difference, `P(W) − P* ≤ gap`, valid for any `W` from any method, so stopping at
`gap ≤ tol·max(1, |P(W)|)` guarantees the accuracy asked for.
"""),
]
