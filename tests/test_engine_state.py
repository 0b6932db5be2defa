"""The engines share one typed model state: the immutable :class:`ModelStructure` and the
named slots of :class:`ModelCache`; no engine reaches into the declaration's private state,
and ``lambda`` is a Parameter (or a rescaling) everywhere, so changing ``model.lam``
recompiles nothing."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel.certificates.repair import project_flows
from gtvmodel.declaration import ModelCache

PKG = Path(__file__).resolve().parent.parent / "gtvmodel"


def _private_accesses(path: Path) -> list[str]:
    """``file:line name._attr`` for every private attribute read on a model (a name ``model``
    or ``....model``) or on a structure (a name bound to ``....structure()`` or the call
    itself)."""
    tree = ast.parse(path.read_text(), str(path))
    structures = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                  and isinstance(node.value, ast.Call)
                  and isinstance(node.value.func, ast.Attribute)
                  and node.value.func.attr == "structure"
                  for t in node.targets if isinstance(t, ast.Name)}

    def is_model(v: ast.expr) -> bool:
        return ((isinstance(v, ast.Name) and (v.id == "model" or v.id in structures))
                or (isinstance(v, ast.Attribute) and v.attr == "model")
                or (isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute)
                    and v.func.attr == "structure"))

    return [f"{path.name}:{node.lineno} .{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr.startswith("_")
            and not node.attr.startswith("__") and is_model(node.value)]


def test_no_module_but_the_declaration_touches_private_model_state():
    found = [hit for f in sorted(PKG.rglob("*.py")) if f.name != "declaration.py"
             for hit in _private_accesses(f)]
    assert not found, "private model state read outside declaration.py: " + "; ".join(found)


def test_the_private_access_check_sees_an_access(tmp_path):
    f = tmp_path / "probe.py"
    f.write_text("def f(model, m):\n    st = m.structure()\n"
                 "    return model._cache, st._x, m.structure()._y, m._fine, self.model._z\n")
    hits = _private_accesses(f)
    assert [h.split(" ")[1] for h in hits] == ["._cache", "._x", "._y", "._z"]


def _model(penalty: gm.Penalty, lam: float) -> gm.GTVModel:
    """Squared and hinge nodes (the hinge nodes need the certificate's CVXPY problems)."""
    rng = np.random.default_rng(3)
    G = nx.cycle_graph(6)
    G.add_edge(0, 3, weight=2.0)
    model = gm.GTVModel(G, dim=2, penalty=penalty, lam=lam)
    for i in G:
        X = rng.normal(size=(6, 2))
        y = np.sign(X @ np.array([1.0, -0.5]) + 0.3 * rng.normal(size=6))
        model.set_loss(i, gm.HingeLoss(X, y, l2=0.1) if i % 2 else gm.SquaredLoss(X, y))
    return model


def _run(model: gm.GTVModel):
    sol = model.solve_exact()
    dual = model.solve_dual()
    cert = model.certify(sol.weights, dual.flows)
    proj = project_flows(model, 3.0 * dual.flows)
    return sol, dual, cert, proj


@pytest.mark.parametrize("penalty", [gm.Norm2(), gm.SquaredNorm2()])
def test_changing_lambda_recompiles_nothing(penalty, count_problems):
    model = _model(penalty, 0.4)
    _run(model)
    slots = ("primal", "dual", "cert_general", "cert_projection")
    before = {s: model.cache.get(s) for s in slots}
    assert all(v is not None for v in before.values())
    builds = model.cache.builds
    structure = model.structure()
    with count_problems() as made:
        model.lam = 1.7
        sol, dual = model.solve_exact(), model.solve_dual()
        cert = model.certify(sol.weights, dual.flows)
    assert made == [] and model.cache.builds == builds
    # project_flows states ||U' - U||^2 per call with the flows as a constant (a Parameter of
    # |E| d entries makes CVXPY's DPP tensor quadratic in |E| d); its constraints, the part
    # that depends on the model and lambda, are the cached ones
    proj = project_flows(model, 3.0 * dual.flows)
    assert all(model.cache.get(s) is before[s] for s in slots)
    assert model.structure() is structure
    # the answers at the new lambda are a fresh model's
    ref_sol, ref_dual, ref_cert, ref_proj = _run(_model(penalty, 1.7))
    rel = 1e-6 * max(1.0, abs(ref_sol.objective))
    assert abs(sol.objective - ref_sol.objective) <= rel
    assert abs(dual.objective - ref_dual.objective) <= rel
    assert abs(cert.dual_value - ref_cert.dual_value) <= rel
    assert abs(cert.primal_value - ref_cert.primal_value) <= rel
    assert np.allclose(proj, ref_proj, rtol=1e-6, atol=1e-6 * np.abs(ref_proj).max())


def test_structure_is_immutable_and_built_once_per_version():
    model = _model(gm.Norm2(), 1.0)
    model.add_constraint(1, gm.Box(-1.0, 1.0))
    st = model.structure()
    assert model.structure() is st
    with pytest.raises(dataclasses.FrozenInstanceError):
        st.l1 = np.ones(6)
    with pytest.raises(ValueError):
        st.l2[0] = 1.0
    with pytest.raises(ValueError):
        st.box[1][0, 0] = 5.0
    with pytest.raises(TypeError):
        st.symbolic.append(0)
    assert st.component_count == 1 and st.components.tolist() == [0] * 6
    A = model.edge_weights
    assert np.allclose(st.weighted_degrees, abs(model.incidence).T @ A)
    model.lam = 3.0
    assert model.structure() is st and np.allclose(model.capacities, 3.0 * A)
    model.add_constraint(2, gm.NonNeg())
    assert model.structure() is not st and model.structure().nonneg.tolist() == [2]


def test_constraints_stack_by_their_own_hook():
    model = gm.GTVModel(nx.path_graph(4), dim=2)
    model.add_constraint(0, gm.NormBall(2.0, p=1))
    model.add_constraint(1, gm.NormBall(3.0))
    model.add_constraint(2, gm.NormBall(4.0, p=1))
    model.add_constraint(3, gm.Box(0.0, [1.0, 2.0]))
    model.add_constraint(3, gm.NonNeg())
    model.add_constraint(2, lambda w: w[0] <= 1)
    st = model.structure()
    assert {p: (i.tolist(), r.tolist()) for p, (i, r) in st.normball.items()} == {
        1.0: ([0, 2], [2.0, 4.0]), 2.0: ([1], [3.0])}
    assert st.box[0].tolist() == [3] and st.box[2].tolist() == [[1.0, 2.0]]
    assert st.nonneg.tolist() == [3] and st.symbolic_constraints == [2]
    assert st.constrained.tolist() == [0, 1, 2, 3] and st.conic.tolist() == [2]


def test_cache_slots_are_named():
    cache = ModelCache()
    with pytest.raises(KeyError, match="unknown model cache slot"):
        cache.get("primall")
    assert cache.get_or_build("cert_lower", lambda: 5) == 5
    assert cache.get_or_build("cert_lower", lambda: 6) == 5 and cache.builds == 1


def test_flow_projection_has_no_flow_sized_parameter():
    """The flows to project enter ``project_flows`` as a constant: a CVXPY Parameter of
    ``|E| d`` entries makes DPP's parameter tensor quadratic in ``|E| d`` (5 GiB at
    ``|E| d = 12,380``); only scalar parameters (lambda) may remain."""
    model = _model(gm.Norm2(), 0.4)
    dual = model.solve_dual()
    proj = project_flows(model, 3.0 * dual.flows)
    assert proj is not None and proj.shape == dual.flows.shape
    cons = model.cache.get("cert_projection")[1]
    params = {p.id: p for c in cons for p in c.parameters()}
    assert params and all(p.size == 1 for p in params.values())
