"""File specs carried by the terms (``to_spec``/``from_spec``) and the kind registries: a new
term class registers itself and is saved and loaded without any change to the codec."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel.terms.spec import CONSTRAINTS, LOSSES, PENALTIES, TermSpec
from gtvmodel.testing import library_losses, term_examples


# ---------------------------------------------------------------- a new penalty, defined here
class WeightedNorm1(gm.Penalty):
    """``phi(v) = sum_j c_j |v_j|`` with weights ``c_j > 0`` (a weighted anisotropic TV)."""

    kind = "test_weighted_norm1"
    spec_arrays = {"c": ("d",)}

    def __init__(self, c: Any):
        self.c = np.asarray(c, dtype=float)
        if self.c.ndim != 1 or not (self.c > 0).all():
            raise gm.PenaltyError(f"WeightedNorm1: c must be a positive vector, got {c!r}")

    def rows_expression(self, Z):
        return cp.abs(Z) @ self.c

    def rows_value(self, V):
        return np.abs(np.atleast_2d(V)) @ self.c

    def conjugate_rows(self, U, lamA):
        """The indicator of ``|u_j| <= lambda A_e c_j`` (the dual-norm ball)."""
        U = np.atleast_2d(np.asarray(U, dtype=float))
        caps = np.broadcast_to(np.asarray(lamA, dtype=float), (U.shape[0],))[:, None] * self.c
        return np.where((np.abs(U) <= caps).all(axis=1), 0.0, np.inf)

    def conjugate_expression(self, U, lamA):
        caps = np.broadcast_to(np.asarray(lamA, dtype=float), (U.shape[0],))[:, None] * self.c
        return cp.Constant(0.0), [cp.abs(U) <= caps]

    def to_spec(self) -> TermSpec:
        return TermSpec(self.kind, {}, {"c": self.c})

    @classmethod
    def from_spec(cls, spec: TermSpec) -> WeightedNorm1:
        spec.check_keys()
        return cls(spec.array("c"))

    def _key(self):
        return (self.c.tobytes(),)


# ---------------------------------------------------------------- a new constraint, defined here
class Slab(gm.Constraint):
    """``|w_0| <= width`` (a parameter, no arrays).  Saved and loaded here; the engines' stacked
    constraint arrays (``declaration.structure``) know the library constraints only."""

    kind = "test_slab"

    def __init__(self, width: float):
        self.width = float(width)

    def constraints(self, x):
        return [cp.abs(x[..., 0]) <= self.width]

    def violation(self, w):
        return float(max(abs(np.asarray(w, dtype=float)[0]) - self.width, 0.0))

    def to_spec(self) -> TermSpec:
        return TermSpec(self.kind, {"width": self.width})

    @classmethod
    def from_spec(cls, spec: TermSpec) -> Slab:
        spec.check_keys(required=("width",))
        return cls(spec.real("width"))


def test_new_terms_register_themselves():
    assert PENALTIES.get("test_weighted_norm1") is WeightedNorm1
    assert CONSTRAINTS.get("test_slab") is Slab
    # library kinds, and the symbolic terms (no from_spec) are not registered
    assert LOSSES.kinds()[:5] == ["squared", "logistic", "hinge", "absolute", "huber"]
    assert {"zero", "quadratic"} <= set(LOSSES.kinds()) and "symbolic" not in LOSSES
    assert "symbolic" not in CONSTRAINTS and "box" in CONSTRAINTS
    assert set(PENALTIES.kinds()) >= {"norm2", "norm1", "norminf", "normp", "squarednorm2",
                                      "quadform"}


def test_new_terms_roundtrip_through_files_and_solve_the_same(tmp_path: Path, squared_model):
    model, _ = squared_model(nx.cycle_graph(6), 2, m=4, lam=0.3, penalty=WeightedNorm1([1.0, 3.0]),
                             rng=5, truth=None)
    model.add_constraint(2, gm.Box(-0.25, 0.25))
    path = tmp_path / "new.npz"
    model.save(path)
    with zipfile.ZipFile(path) as z:
        assert "penalty_c.npy" in z.namelist()
    with np.load(path, allow_pickle=False) as z:
        header = json.loads(bytes(z["header"]).decode())
        assert np.array_equal(z["penalty_c"], [1.0, 3.0])
    assert header["penalty"] == {"kind": "test_weighted_norm1"}
    back = gm.GTVModel.load(path)
    assert back.penalty == model.penalty and type(back.penalty) is WeightedNorm1
    s1, s2 = model.solve_exact(), back.solve_exact()
    np.testing.assert_array_equal(s1.weights, s2.weights)
    assert s1.status == s2.status and np.abs(s1.weights[2]).max() <= 0.25 + 1e-6
    # the new constraint: its parameter in the header, the identical constraint back
    model.add_constraint(4, Slab(0.5))
    model.save(path)
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(bytes(arrays["header"]).decode())
    assert header["constraints"][4] == [{"kind": "test_slab", "width": 0.5}]
    (slab,) = gm.GTVModel.load(path).constraints_at(4)
    assert type(slab) is Slab and slab.width == 0.5
    # the term's own validation surfaces as a FileFormatError naming the file and the field
    header["constraints"][4][0]["width"] = "wide"
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(gm.FileFormatError, match=r"bad.npz.*constraints\[4\]\[0\].*width"):
        gm.GTVModel.load(tmp_path / "bad.npz")
    header["constraints"][4][0]["width"] = 0.5
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    arrays["penalty_c"] = np.array([1.0, -3.0])
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(gm.FileFormatError, match="positive vector"):
        gm.GTVModel.load(tmp_path / "bad.npz")


def _library_terms() -> list[Any]:
    rng = np.random.default_rng(1)
    # every file-registered loss of gtvmodel.testing's registry, plain and regularized
    losses = [ls for reg in ({}, {"l1": 0.2, "l2": 0.1})
              for ls in library_losses(rng, 2, 3, **reg).values() if ls.kind in LOSSES]
    return [*losses, gm.HuberLoss(rng.normal(size=(3, 2)), [1.0, -1.0, 1.0], M=0.4, l2=0.3),
            gm.ZeroLoss(l1=0.5), gm.QuadraticLoss([1.0, -1.0], l2=0.2),
            *[ex.build(rng) for ex in term_examples() if ex.family != "loss"],
            gm.Norm2(), gm.Norm1(), gm.NormInf(), gm.NormP(3), gm.NormP(np.inf),
            gm.SquaredNorm2(), gm.QuadForm([[2.0, 0.5], [0.5, 1.0]]),
            gm.Box([0.0, -np.inf], [1.0, 2.0]), gm.NonNeg(), gm.NormBall(1.5, p=np.inf)]


@pytest.mark.parametrize("term", _library_terms(), ids=repr)
def test_library_terms_rebuild_from_their_spec(term):
    spec = term.to_spec()
    assert json.loads(json.dumps(spec.header(), allow_nan=False)) == spec.header()
    assert set(spec.arrays) == set(type(term).spec_arrays)
    back = type(term).from_spec(spec)
    assert type(back) is type(term) and _same_spec(back, spec)


def _same_spec(term: Any, spec: TermSpec) -> bool:
    got = term.to_spec()
    return (got.kind, dict(got.params)) == (spec.kind, dict(spec.params)) and all(
        np.array_equal(got.arrays[k], spec.arrays[k]) for k in spec.arrays)


def test_from_spec_is_strict():
    with pytest.raises(gm.FileFormatError, match=r"huber.M must be a finite JSON number > 0"):
        gm.HuberLoss.from_spec(TermSpec("huber", {"M": 0}, {"X": np.ones((1, 1)),
                                                            "y": np.ones(1)}))
    with pytest.raises(gm.FileFormatError, match=r"unknown \['x'\] keys"):
        gm.ZeroLoss.from_spec(TermSpec("zero", {"x": 1}))
    with pytest.raises(gm.FileFormatError, match=r"missing \['p'\] keys"):
        gm.NormP.from_spec(TermSpec("normp", {}))
    with pytest.raises(gm.FileFormatError, match=r"p must be a JSON number >= 1"):
        gm.NormBall.from_spec(TermSpec("normball", {"radius": 1.0, "p": True}))
    with pytest.raises(gm.DataError, match="lo > hi"):
        gm.Box.from_spec(TermSpec("box", {}, {"lo": np.ones(2), "hi": np.zeros(2)}))


def test_unregistered_terms_cannot_be_saved(tmp_path: Path):
    class MySquared(gm.SquaredLoss):  # inherits kind "squared", registered to SquaredLoss
        pass

    model = gm.GTVModel(nx.path_graph(2), 1)
    model.set_loss(0, MySquared(np.ones((2, 1)), np.ones(2)))
    with pytest.raises(gm.UnsupportedError, match=r"node 0: .*not registered to MySquared"):
        model.save(tmp_path / "p.npz")
    model.set_loss(0, lambda x: cp.sum_squares(x))
    with pytest.raises(gm.UnsupportedError, match="node 0: symbolic losses cannot be saved"):
        model.save(tmp_path / "p.npz")


def test_a_kind_belongs_to_one_class():
    with pytest.raises(gm.PenaltyError, match="'norm2' is already registered"):
        type("Impostor", (gm.Penalty,), {"kind": "norm2", "from_spec": classmethod(
            lambda cls, spec: cls())})
    assert PENALTIES.get("norm2") is gm.Norm2
