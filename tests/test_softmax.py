"""SoftmaxLoss (multinomial logistic regression): one module, and every engine through the
loss's hooks alone -- values/gradients, the exact solve, the dual, certificates (sound) and
Algorithm 1's prox, each checked against an independent formulation written here."""

from __future__ import annotations

import ast
from pathlib import Path

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gtv
from gtvmodel.errors import DataError
from gtvmodel.terms.losses import LossBatch

P_FEAT, K = 3, 3
D = P_FEAT * K


def _data(rng, m=7):
    return rng.normal(size=(m, P_FEAT)), rng.integers(0, K, size=m)


def _ref_value(X, y, w):
    """Independent numpy reference: mean over rows of logsumexp(x^T W) - (x^T W)_y."""
    T = X @ w.reshape(P_FEAT, K)
    mx = T.max(axis=1, keepdims=True)
    lse = (mx + np.log(np.exp(T - mx).sum(axis=1, keepdims=True)))[:, 0]
    return float(np.mean(lse - T[np.arange(len(y)), y]))


def _ref_expr(X, y, x):
    """Independent CVXPY formulation: one cp.log_sum_exp per row."""
    Wm = cp.reshape(x, (P_FEAT, K), order="C")
    rows = [cp.log_sum_exp(X[r] @ Wm) - X[r] @ Wm[:, int(y[r])] for r in range(len(y))]
    return cp.sum(cp.hstack(rows)) / len(y)


def _model(rng, lam=0.4, l2=(0.0, 0.05)):
    G = nx.path_graph(4)
    G.add_edge(0, 3, weight=0.5)
    model = gtv.GTVModel(G, D, lam=lam)
    data = {}
    for i in G.nodes:
        X, y = _data(rng)
        kappa = l2[i % len(l2)]
        model.set_loss(i, gtv.SoftmaxLoss(X, y, K, l2=kappa))
        data[i] = (X, y, kappa)
    return model, data


def test_value_gradient_against_references(rng):
    X, y = _data(rng)
    loss = gtv.SoftmaxLoss(X, y, K, l1=0.0, l2=0.1)
    w = rng.normal(size=D)
    assert loss.value(w) == pytest.approx(_ref_value(X, y, w) + 0.1 * w @ w, rel=1e-12)
    # gradient by central finite differences
    g = loss.gradient(w)
    h = 1e-6
    fd = np.array([(loss.value(w + h * e) - loss.value(w - h * e)) / (2 * h) for e in np.eye(D)])
    np.testing.assert_allclose(g, fd, atol=1e-7)
    # the CVXPY expression against the per-row log_sum_exp formulation
    x = cp.Variable(D)
    x.value = w
    assert loss.expression(x).value == pytest.approx(
        _ref_expr(X, y, x).value + 0.1 * w @ w, rel=1e-10)
    # the stacked batch reproduces each loss (values, gradients) at once
    losses = [gtv.SoftmaxLoss(*_data(rng, m), K) for m in (3, 5, 4)]
    batch = LossBatch(type(losses[0]), np.arange(3), losses, 3, D)
    W = rng.normal(size=(3, D))
    np.testing.assert_allclose(batch.values(W), [ls.value(W[i]) for i, ls in enumerate(losses)],
                               rtol=1e-12)
    np.testing.assert_allclose(batch.gradients(W),
                               [ls.gradient(W[i]) for i, ls in enumerate(losses)], atol=1e-12)


def test_curvature_bounds_hold(rng):
    X, y = _data(rng)
    loss = gtv.SoftmaxLoss(X, y, K)
    lo, hi = loss.hessian_bounds(D)
    w = rng.normal(size=D)
    h = 1e-5
    H = np.array([(loss.gradient(w + h * e) - loss.gradient(w - h * e)) / (2 * h)
                  for e in np.eye(D)])
    H = 0.5 * (H + H.T)
    assert np.linalg.eigvalsh(hi - H)[0] >= -1e-6
    assert np.linalg.eigvalsh(H - lo)[0] >= -1e-6
    assert loss.smoothness == pytest.approx(np.linalg.eigvalsh(hi)[-1])
    assert loss.strong_convexity == 0.0


def test_conjugate_matches_direct_maximization(rng):
    X, y = _data(rng)
    loss = gtv.SoftmaxLoss(X, y, K, l2=0.2)
    s = rng.normal(size=D)
    w = cp.Variable(D)
    ref = cp.Problem(cp.Maximize(s @ w - _ref_expr(X, y, w) - 0.2 * cp.sum_squares(w)))
    ref.solve(solver="CLARABEL")
    assert loss.conjugate(s) == pytest.approx(ref.value, rel=1e-6, abs=1e-7)
    # at s = grad L(w0) (no l2), Fenchel-Young holds with equality
    plain = gtv.SoftmaxLoss(X, y, K)
    w0 = rng.normal(size=D)
    g0 = plain.gradient(w0)
    assert plain.conjugate(g0) == pytest.approx(g0 @ w0 - plain.value(w0), rel=1e-6, abs=1e-7)


def test_solve_exact_matches_independent_problem(rng):
    model, data = _model(rng)
    sol = model.solve_exact()
    Wv = cp.Variable((4, D))
    obj = sum(_ref_expr(X, y, Wv[i]) + kappa * cp.sum_squares(Wv[i])
              for i, (X, y, kappa) in data.items())
    for u, v, a in model.graph.edges(data="weight", default=1.0):
        obj = obj + 0.4 * a * cp.norm(Wv[u] - Wv[v], 2)
    ref = cp.Problem(cp.Minimize(obj))
    ref.solve(solver="CLARABEL")
    assert sol.objective == pytest.approx(ref.value, rel=1e-6)
    assert model.objective(sol.weights) == pytest.approx(ref.value, rel=1e-6)


def test_certificates_are_sound(rng):
    model, _ = _model(rng)
    sol = model.solve_exact()
    p_star = sol.objective
    cert = gtv.certify(model, sol.weights, sol.flows)
    assert cert.success_at(1e-6)
    assert cert.gap <= 1e-6 * max(1.0, abs(p_star))
    for scale in (1e-3, 1e-2, 1e-1):
        W = sol.weights + scale * rng.normal(size=sol.weights.shape)
        subopt = model.objective(W) - p_star
        for flows in (sol.flows, None):
            c = gtv.certify(model, W, flows)
            # the reference optimum is itself accurate to ~1e-8: allow that much
            assert c.gap >= subopt - 1e-7 * max(1.0, abs(p_star)), (scale, c.gap, subopt)


def test_solve_dual_matches_primal(rng):
    model, _ = _model(rng)
    primal = model.solve_exact().objective
    dual = gtv.solve_dual(model)
    assert dual.objective == pytest.approx(primal, rel=1e-6)
    assert dual.weights is not None
    assert model.objective(dual.weights) == pytest.approx(primal, rel=1e-6)


def test_prox_and_algorithm1(rng):
    X, y = _data(rng)
    loss = gtv.SoftmaxLoss(X, y, K, l1=0.05)
    v, tau = rng.normal(size=D), 0.7
    z = cp.Variable(D)
    ref = cp.Problem(cp.Minimize(_ref_expr(X, y, z) + 0.05 * cp.norm1(z)
                                 + cp.sum_squares(z - v) / (2 * tau)))
    ref.solve(solver="CLARABEL")
    zp = loss.prox(v, tau)

    def prox_objective(u):
        return loss.value(u) + (u - v) @ (u - v) / (2 * tau)

    # both are interior-point solutions with exponential cones: equal objectives (strongly
    # convex with modulus 1/tau, so points within sqrt(2 tau * 1e-9))
    assert prox_objective(zp) == pytest.approx(prox_objective(z.value), abs=1e-9)
    np.testing.assert_allclose(zp, z.value, atol=1e-4)
    model, _ = _model(rng, l2=(0.05,))
    res = gtv.solve_primal_dual(model, max_iter=3000, tol=1e-5)
    assert res.paths.get("cvxpy", 0) == 4  # the generic CVXPY prox path
    assert res.objective == pytest.approx(model.solve_exact().objective, rel=1e-4)


@pytest.mark.parametrize("y, msg", [
    (np.array([0, 1, 3, 1]), "labels must lie in 0..2"),
    (np.array([0, -1, 2, 1]), "labels must lie in 0..2"),
    (np.array([0, 1.5, 2, 1]), "labels must be integers"),
    (np.array([0, 1, 2]), "y must have shape"),
])
def test_bad_labels_raise(y, msg, rng):
    with pytest.raises(DataError, match=msg):
        gtv.SoftmaxLoss(rng.normal(size=(4, P_FEAT)), y, K)


def test_bad_classes_and_dimension_raise(rng):
    X, y = _data(rng)
    with pytest.raises(DataError, match="n_classes"):
        gtv.SoftmaxLoss(X, y, 1)
    with pytest.raises(DataError, match="X must be a non-empty"):
        gtv.SoftmaxLoss(X[:, 0], y, K)
    model = gtv.GTVModel(nx.path_graph(2), D + 1)
    with pytest.raises(DataError, match=f"has dimension {D} but the model has d = {D + 1}"):
        model.set_loss(0, gtv.SoftmaxLoss(X, y, K))


def test_engines_ask_the_losses_no_type_switches():
    """The engines (exact, dual, conic, certificates, Algorithm 1, theory) call the losses'
    hooks: no ``isinstance(x, SomeLoss)``, ``batch.cls is SomeLoss`` or ``kind ==``/``in`` test
    (which is why SoftmaxLoss needed no change there)."""
    pkg = Path(gtv.__file__).parent
    files = [*sorted((pkg / "solve").glob("*.py")), *sorted((pkg / "certificates").glob("*.py")),
             *sorted((pkg / "duality").glob("*.py")),
             *sorted((pkg / "primal_dual").glob("*.py")), *sorted((pkg / "theory").glob("*.py")),
             pkg / "declaration.py"]
    found = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
                names = [n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)]
                # the base class (is it a gtvmodel loss at all: input checking) is no switch
                if any(n.endswith("Loss") and n != "Loss" for n in names):
                    found.append(f"{f.name}:{node.lineno} isinstance")
            elif isinstance(node, ast.Compare):
                left = node.left
                attr = left.attr if isinstance(left, ast.Attribute) else None
                if attr == "cls" and any(isinstance(o, (ast.Is, ast.IsNot)) for o in node.ops):
                    found.append(f"{f.name}:{node.lineno} cls is")
                if attr == "kind" and any(isinstance(o, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                                          for o in node.ops):
                    found.append(f"{f.name}:{node.lineno} kind test")
    assert not found, found


def test_saved_and_loaded_through_the_problem_file(tmp_path, rng):
    """The problem-file round trip (docs/file_format.md): samples in the data-fit place, ``X``
    padded to ``d = p K`` columns; the identical losses come back (same values and gradients),
    and a file whose padding is not zero or whose ``n_classes`` does not divide ``d`` is
    refused naming the field."""
    G = nx.path_graph(3)
    model = gtv.GTVModel(G, P_FEAT * K, lam=0.3)
    for i in G:
        model.set_loss(i, gtv.SoftmaxLoss(*_data(rng, 4 + i), K, l1=0.01 * i, l2=0.1))
    path = tmp_path / "softmax.npz"
    model.save(path)
    back = gtv.GTVModel.load(path)
    w = rng.normal(size=P_FEAT * K)
    for i in G:
        a, b = model.loss(i), back.loss(i)
        assert type(b) is gtv.SoftmaxLoss and b.n_classes == K and (b.l1, b.l2) == (a.l1, a.l2)
        np.testing.assert_array_equal(b.X, a.X)
        np.testing.assert_array_equal(b.y, a.y)
        assert b.value(w) == a.value(w)
    np.testing.assert_array_equal(back.loss(0).gradient(w), model.loss(0).gradient(w))
    spec = model.loss(0).to_spec()
    bad = spec._replace(arrays={**spec.arrays, "X": spec.arrays["X"] + 1.0})
    with pytest.raises(gtv.FileFormatError, match="must be zero"):
        gtv.SoftmaxLoss.from_spec(bad)
    with pytest.raises(gtv.FileFormatError, match="does not divide"):
        gtv.SoftmaxLoss.from_spec(spec._replace(params={**spec.params, "n_classes": 4}))
    with pytest.raises(gtv.FileFormatError, match="n_classes"):
        gtv.SoftmaxLoss.from_spec(spec._replace(params={**spec.params, "n_classes": 1.5}))
