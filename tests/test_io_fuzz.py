"""File fuzzing (issue 8, classes 6-CLI and 7).

Every outcome of reading a problem, weights or flows file is either the identical model/array
(a round trip) or a :class:`~gtvmodel.errors.FileFormatError` -- never another exception, never
a silently different model, never an unbounded inflation of an archive member.  The command
line turns every bad file and every bad argument into exit code 2 and exactly one stderr line.

The seeded loops count outcomes by class so that a failure message says how many inputs escaped
and as what; the ``slow`` variants run many more inputs.
"""

from __future__ import annotations

import io
import json
import math
import struct
import subprocess
import sys
import tempfile
import time
import tracemalloc
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gtvmodel as gm
from gtvmodel.errors import FileFormatError
from gtvmodel.io import load_flows, load_model, load_weights, save_flows, save_weights

HYP = settings(deadline=None, max_examples=200, derandomize=True,
               suppress_health_check=[HealthCheck.function_scoped_fixture,
                                      HealthCheck.too_slow])


# ============================================================================ models
def model_rich() -> gm.GTVModel:
    """Every library loss, box (with +-inf), nonneg, normball, QuadForm, str/int labels, an
    isolated node."""
    rng = np.random.default_rng(0)
    G = nx.cycle_graph(7)
    G = nx.relabel_nodes(G, {0: "a", 3: "node three"})
    G.add_node("isolated")
    for k, (u, v) in enumerate(G.edges):
        G.edges[u, v]["weight"] = 0.5 + 0.25 * k
    model = gm.GTVModel(G, 2, penalty=gm.QuadForm([[2.0, 0.5], [0.5, 1.0]]), lam=0.4)
    X, y = rng.normal(size=(4, 2)), rng.normal(size=4)
    yb = np.where(y > 0, 1.0, -1.0)
    lab = list(G.nodes)
    model.set_loss(lab[0], gm.SquaredLoss(X, y, l2=0.1))
    model.set_loss(lab[1], gm.LogisticLoss(X[:3], yb[:3], l1=0.05))
    model.set_loss(lab[2], gm.HingeLoss(X, yb))
    model.set_loss(lab[3], gm.HuberLoss(X[:2], y[:2], M=0.3))
    model.set_loss(lab[4], gm.AbsoluteLoss(X, y, l2=0.2))
    model.set_loss(lab[5], gm.QuadraticLoss([1.0, -2.0]))
    model.set_loss(lab[6], gm.ZeroLoss(l2=0.3))
    model.add_constraint(lab[0], gm.Box(-1.0, [1.0, np.inf]))
    model.add_constraint(lab[2], gm.Box([-np.inf, -3.0], 2.0))
    model.add_constraint(lab[5], gm.NormBall(1.5, p=np.inf))
    model.add_constraint(lab[5], gm.NonNeg())
    model.add_constraint(lab[7], gm.NormBall(2.0))
    return model


def model_normp() -> gm.GTVModel:
    """d = 1, NormP(3), lam = 0, string labels only, classification losses."""
    G = nx.relabel_nodes(nx.path_graph(4), {i: f"n{i}" for i in range(4)})
    model = gm.GTVModel(G, 1, penalty=gm.NormP(3), lam=0.0)
    X = np.array([[1.0], [-2.0], [0.5]])
    yb = np.array([1.0, -1.0, 1.0])
    model.set_loss("n0", gm.HingeLoss(X, yb, l2=0.5))
    model.set_loss("n1", gm.LogisticLoss(X, yb))
    model.set_loss("n3", gm.QuadraticLoss([0.25]))
    model.add_constraint("n1", gm.Box(-np.inf, [0.5]))
    model.add_constraint("n3", gm.NormBall(0.0, p=1))
    return model


def model_small(penalty: gm.penalties.Penalty) -> gm.GTVModel:
    """A star with int labels (d = 3), squared and huber losses."""
    rng = np.random.default_rng(1)
    model = gm.GTVModel(nx.star_graph(3), 3, penalty=penalty, lam=2.5)
    model.set_loss(0, gm.SquaredLoss(rng.normal(size=(5, 3)), rng.normal(size=5)))
    model.set_loss(2, gm.HuberLoss(rng.normal(size=(2, 3)), rng.normal(size=2), M=2.0,
                                   l1=0.1))
    model.add_constraint(1, gm.NonNeg())
    return model


MODELS: dict[str, Callable[[], gm.GTVModel]] = {
    "rich": model_rich,
    "normp": model_normp,
    "norminf": lambda: model_small(gm.NormP(np.inf)),
    "squared": lambda: model_small(gm.SquaredNorm2()),
    "norm1": lambda: model_small(gm.Norm1()),
    "norm2": lambda: model_small(gm.Norm2()),
}


def _same_array(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a, b)


def same_model(a: gm.GTVModel, b: gm.GTVModel) -> bool:
    """Identical problems: labels (and their types), edges, weights, lam, penalty, every loss's
    kind, data and regularizers, every constraint."""
    if a.nodes != b.nodes or [type(v) for v in a.nodes] != [type(v) for v in b.nodes]:
        return False
    if a.dim != b.dim or not _same_array(a.edges, b.edges):
        return False
    if not _same_array(a.edge_weights, b.edge_weights) or a.lam != b.lam:
        return False
    if a.penalty != b.penalty:
        return False
    d = a.dim
    for i in range(a.num_nodes):
        la, lb = a.loss_at(i), b.loss_at(i)
        if type(la) is not type(lb) or (la.l1, la.l2) != (lb.l1, lb.l2):
            return False
        for attr in ("X", "y", "a", "M"):
            if hasattr(la, attr) and not _same_array(getattr(la, attr), getattr(lb, attr)):
                return False
        ca, cb = a.constraints_at(i), b.constraints_at(i)
        if len(ca) != len(cb):
            return False
        for x, y in zip(ca, cb, strict=True):
            if type(x) is not type(y):
                return False
            if isinstance(x, gm.Box) and not all(
                    _same_array(p, q) for p, q in zip(x.bounds(d), y.bounds(d), strict=True)):
                return False
            if isinstance(x, gm.NormBall) and (x.radius, x.p) != (y.radius, y.p):
                return False
    return True


_SAVED: dict[str, tuple[gm.GTVModel, bytes]] = {}


def saved_models() -> dict[str, tuple[gm.GTVModel, bytes]]:
    """Each model and the bytes of its problem file (built once)."""
    if not _SAVED:
        for name, make in MODELS.items():
            model = make()
            with tempfile.TemporaryDirectory() as tmp:
                model.save(Path(tmp) / "p.npz")
                _SAVED[name] = (model, (Path(tmp) / "p.npz").read_bytes())
    return _SAVED


@pytest.fixture(scope="module")
def saved() -> dict[str, tuple[gm.GTVModel, bytes]]:
    return saved_models()


def test_models_roundtrip(saved, tmp_path: Path):
    for name, (model, data) in saved.items():
        (tmp_path / "p.npz").write_bytes(data)
        assert same_model(load_model(tmp_path / "p.npz"), model), name


# ============================================================================ outcomes
def outcome(read: Callable[[], Any], same: Callable[[Any], bool]) -> str:
    """``same`` (identical result), ``error`` (FileFormatError), ``different`` (a readable but
    different result) or ``escape:<ExceptionType>``."""
    try:
        got = read()
    except FileFormatError:
        return "error"
    except (KeyboardInterrupt, SystemExit):  # pragma: no cover
        raise
    except BaseException as exc:  # noqa: BLE001 - counting is the point
        return f"escape:{type(exc).__name__}"
    return "same" if same(got) else "different"


def model_outcome(path: Path, model: gm.GTVModel) -> str:
    return outcome(lambda: load_model(path), lambda m: same_model(m, model))


def bad(counts: Counter, allowed: tuple[str, ...] = ("same", "error")) -> dict[str, int]:
    return {k: v for k, v in counts.items() if k not in allowed}


def flip_bits(data: bytes, rng: np.random.Generator, nbits: int) -> bytes:
    buf = bytearray(data)
    for pos in rng.integers(0, 8 * len(buf), size=nbits):
        buf[pos // 8] ^= 1 << (pos % 8)
    return bytes(buf)


def bitflip_counts(saved, tmp_path: Path, trials: int, seed: int) -> Counter:
    rng = np.random.default_rng(seed)
    counts: Counter = Counter()
    names = list(saved)
    path = tmp_path / "flipped.npz"
    for t in range(trials):
        model, data = saved[names[t % len(names)]]
        path.write_bytes(flip_bits(data, rng, int(rng.integers(1, 4))))
        counts[model_outcome(path, model)] += 1
    return counts


def truncation_counts(saved, tmp_path: Path, trials: int, seed: int) -> Counter:
    rng = np.random.default_rng(seed)
    counts: Counter = Counter()
    path = tmp_path / "truncated.npz"
    for model, data in saved.values():
        for k in rng.integers(0, len(data), size=trials // len(saved)):
            path.write_bytes(data[:k])
            counts[model_outcome(path, model)] += 1
    return counts


def test_bit_flips(saved, tmp_path: Path):
    counts = bitflip_counts(saved, tmp_path, 200, seed=0)
    assert not bad(counts), f"bit flips: {dict(counts)}"


def test_truncation(saved, tmp_path: Path):
    counts = truncation_counts(saved, tmp_path, 100, seed=1)
    # a truncated archive cannot be read as the same model (the central directory is at the end)
    assert not bad(counts, ("error",)), f"truncation: {dict(counts)}"


@pytest.mark.slow
def test_bit_flips_many(saved, tmp_path: Path):
    counts = bitflip_counts(saved, tmp_path, 20000, seed=10)
    assert not bad(counts), f"bit flips: {dict(counts)}"
    counts = truncation_counts(saved, tmp_path, 2000, seed=11)
    assert not bad(counts, ("error",)), f"truncation: {dict(counts)}"


@HYP
@given(data=st.data())
def test_bit_flips_hypothesis(tmp_path: Path, data):
    name = data.draw(st.sampled_from(sorted(MODELS)))
    model, raw = saved_models()[name]
    positions = data.draw(st.lists(st.integers(0, 8 * len(raw) - 1), min_size=1, max_size=4))
    buf = bytearray(raw)
    for pos in positions:
        buf[pos // 8] ^= 1 << (pos % 8)
    path = tmp_path / "h.npz"
    path.write_bytes(bytes(buf))
    assert model_outcome(path, model) in ("same", "error")


# ============================================================================ rewriting
def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {info.filename: zf.read(info) for info in zf.infolist()}


def write_zip(path: Path, content: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, blob in content.items():
            zf.writestr(name, blob)


def npy(a: Any, **kw: Any) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, **kw)
    return buf.getvalue()


def npy_raw(header: str, payload: bytes = b"") -> bytes:
    """An NPY 1.0 member with a hand-written header dict (any shape/dtype claims)."""
    text = header.encode("latin1")
    pad = 64 - (10 + len(text) + 1) % 64
    text = text + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + payload


def read_npy(blob: bytes) -> np.ndarray:
    return np.load(io.BytesIO(blob), allow_pickle=False)


def header_of(content: dict[str, bytes]) -> dict:
    return json.loads(bytes(read_npy(content["header.npy"])).decode())


def with_header(content: dict[str, bytes], header: dict | str) -> dict[str, bytes]:
    text = header if isinstance(header, str) else json.dumps(header)
    return {**content, "header.npy": npy(np.frombuffer(text.encode(), dtype=np.uint8))}


def set_path(obj: Any, path: tuple, value: Any) -> Any:
    obj = json.loads(json.dumps(obj))
    target = obj
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return obj


_DELETE = object()
NAN, INF = float("nan"), float("inf")

# (model, JSON path in the header, new value); each must be refused with FileFormatError
HEADER_MUTATIONS: list[tuple[str, tuple, Any]] = [
    ("rich", ("lam",), "0.4"), ("rich", ("lam",), True), ("rich", ("lam",), NAN),
    ("rich", ("lam",), INF), ("rich", ("lam",), -0.4), ("rich", ("lam",), None),
    ("rich", ("lam",), [0.4]), ("rich", ("lam",), _DELETE),
    ("rich", ("n",), 8.0), ("rich", ("n",), 8.7), ("rich", ("n",), "8"), ("rich", ("n",), True),
    ("rich", ("n",), 10**12), ("rich", ("n",), 0), ("rich", ("n",), -8), ("rich", ("n",), 9),
    ("rich", ("d",), 2.0), ("rich", ("d",), "2"), ("rich", ("d",), True), ("rich", ("d",), 10**12),
    ("rich", ("d",), 1), ("rich", ("version",), 1.0), ("rich", ("version",), True),
    ("rich", ("version",), "1"), ("rich", ("format",), "gtvmodel-solution"),
    ("rich", ("extra",), 1), ("rich", ("penalty", "extra"), 1),
    ("rich", ("losses", 0, "l2"), "0.1"), ("rich", ("losses", 0, "l2"), NAN),
    ("rich", ("losses", 0, "l2"), -0.1), ("rich", ("losses", 0, "l2"), True),
    ("rich", ("losses", 0, "extra"), 0), ("rich", ("losses", 0, "kind"), 1),
    ("rich", ("losses", 3, "M"), "0.3"), ("rich", ("losses", 3, "M"), NAN),
    ("rich", ("losses", 3, "M"), 0), ("rich", ("losses", 3, "M"), INF),
    ("rich", ("losses", 5), "quadratic"), ("rich", ("losses", 0, "kind"), "zero"),
    ("rich", ("losses", 6, "kind"), "squared"), ("rich", ("constraints", 0, 0, "row"), 0.9),
    ("rich", ("constraints", 0, 0, "row"), 0.0), ("rich", ("constraints", 0, 0, "row"), "0"),
    ("rich", ("constraints", 0, 0, "row"), True), ("rich", ("constraints", 0, 0, "row"), -1),
    ("rich", ("constraints", 0, 0, "row"), 2), ("rich", ("constraints", 0, 0, "row"), _DELETE),
    ("rich", ("constraints", 0, 0, "extra"), 1), ("rich", ("constraints", 0), {"kind": "box"}),
    ("rich", ("constraints", 5, 0, "radius"), "1.5"),
    ("rich", ("constraints", 5, 0, "radius"), NAN), ("rich", ("constraints", 5, 0, "radius"), -1),
    ("rich", ("constraints", 5, 0, "radius"), INF), ("rich", ("constraints", 5, 0, "p"), 0.5),
    ("rich", ("constraints", 5, 0, "p"), "3"), ("rich", ("constraints", 5, 0, "p"), True),
    ("rich", ("constraints", 5, 0, "p"), NAN), ("rich", ("nodes", 1), 1.0),
    ("rich", ("nodes", 1), True), ("rich", ("nodes", 1), None), ("rich", ("nodes", 1), "a"),
    ("rich", ("nodes", 1), [1]), ("rich", ("nodes",), "abcdefgh"),
    ("rich", ("penalty", "kind"), "norm3"), ("rich", ("penalty",), "quadform"),
    ("normp", ("penalty", "p"), "3"), ("normp", ("penalty", "p"), 0.5),
    ("normp", ("penalty", "p"), True), ("normp", ("penalty", "p"), NAN),
    ("normp", ("penalty", "p"), _DELETE), ("normp", ("lam",), -0.0 - 1e-300),
]


def test_header_mutations_are_refused(saved, tmp_path: Path):
    escaped = []
    for name, path_, value in HEADER_MUTATIONS:
        model, data = saved[name]
        content = members(data)
        header = set_path(header_of(content), path_, value)
        write_zip(tmp_path / "m.npz", with_header(content, header))
        got = model_outcome(tmp_path / "m.npz", model)
        if got != "error":
            escaped.append((path_, value, got))
    assert not escaped, f"{len(escaped)}/{len(HEADER_MUTATIONS)} header mutations: {escaped}"


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into a JSON document (containers and leaves, not the root)."""
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for k, v in enumerate(obj):
            out += _paths(v, (*prefix, k))
    return out


def _norm_inf(obj: Any) -> Any:
    """Comparable form: ``"inf"`` and ``Infinity`` are the same norm exponent; bools are not
    numbers (``True == 1`` in Python)."""
    if isinstance(obj, dict):
        return {k: _norm_inf(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_norm_inf(v) for v in obj]
    if isinstance(obj, bool):
        return ("bool", obj)
    return "inf" if isinstance(obj, float) and obj == INF else obj


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 12) | st.integers() |
    st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.5, 1.0, 2.0, 9.0, 9.7])
    | st.text(max_size=5) | st.sampled_from(["0", "1", "0.5", "inf", "nan", "box", "zero",
                                             "squared", "norm2", "normp", "quadform"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["kind", "row", "p", "radius", "l1", "l2", "M", "x"]), inner,
        max_size=3),
    max_leaves=6)


@HYP
@given(data=st.data())
def test_header_value_mutations_hypothesis(tmp_path: Path, data):
    """Any JSON value anywhere in the header: the file is refused, or it reads as exactly the
    model the mutated header describes (saving that model gives the mutated header back: no
    value was coerced, dropped or defaulted)."""
    name = data.draw(st.sampled_from(["rich", "normp", "norminf"]))
    model, raw = saved_models()[name]
    content = members(raw)
    header = header_of(content)
    path_ = data.draw(st.sampled_from(_paths(header)))
    value = data.draw(JSON_VALUES)
    mutated = set_path(header, path_, value)
    write_zip(tmp_path / "m.npz", with_header(content, mutated))
    try:
        back = load_model(tmp_path / "m.npz")
    except FileFormatError:
        return
    back.save(tmp_path / "again.npz")
    again = header_of(members((tmp_path / "again.npz").read_bytes()))
    assert _norm_inf(again) == _norm_inf(mutated), (path_, value)


@pytest.mark.slow
def test_header_value_mutations_many(tmp_path_factory):
    run = settings(HYP, max_examples=3000)(given(data=st.data())(
        test_header_value_mutations_hypothesis.hypothesis.inner_test))
    run(tmp_path=tmp_path_factory.mktemp("many"))


def test_header_text_mutations(saved, tmp_path: Path):
    """Raw JSON edits: duplicate keys, NaN literals, not an object, not UTF-8, deep nesting."""
    model, data = saved["rich"]
    content = members(data)
    text = json.dumps(header_of(content))
    assert '"lam": 0.4' in text
    variants = [
        text.replace('"lam": 0.4', '"lam": 0.4, "lam": 0.5'),
        text.replace('"lam": 0.4', '"lam": NaN'),
        text.replace('"lam": 0.4', '"lam": Infinity'),
        text.replace('"lam": 0.4', '"lam": 4e400'),
        text.replace('"n": 8', '"n": 8e0'),
        text.replace('"p": "inf"', '"p": -Infinity'),
        text.replace('"p": "inf"', '"p": NaN'),
        text[:-1], "[]", "null", "", "[" * 100_000 + "]" * 100_000,
    ]
    escaped = []
    for v in variants:
        write_zip(tmp_path / "m.npz", with_header(content, v))
        got = model_outcome(tmp_path / "m.npz", model)
        if got != "error":
            escaped.append((v[:60], got))
    for blob in [b"\xff\xfe{", npy(np.frombuffer(text.encode(), np.uint8).astype(np.int64)),
                 npy(np.frombuffer(text.encode(), np.uint8).reshape(1, -1))]:
        c = {**content, "header.npy": blob if blob.startswith(b"\x93NUMPY") else
             npy(np.frombuffer(blob, np.uint8))}
        write_zip(tmp_path / "m.npz", c)
        got = model_outcome(tmp_path / "m.npz", model)
        if got != "error":
            escaped.append((blob[:20], got))
    assert not escaped, escaped


def test_header_compatibility(saved, tmp_path: Path):
    """``Infinity`` (written by earlier versions for NormP(inf)) still reads as ``"inf"``."""
    model, data = saved["norminf"]
    content = members(data)
    text = json.dumps(header_of(content))
    assert '"p": "inf"' in text
    write_zip(tmp_path / "m.npz", with_header(content, text.replace('"p": "inf"',
                                                                    '"p": Infinity')))
    assert model_outcome(tmp_path / "m.npz", model) == "same"


def test_duplicate_members_are_refused(saved, tmp_path: Path):
    model, data = saved["rich"]
    content = members(data)
    with zipfile.ZipFile(tmp_path / "dup.npz", "w") as zf:
        for name, blob in content.items():
            zf.writestr(name, blob)
        with pytest.warns(UserWarning, match="Duplicate"):
            zf.writestr("X.npy", npy(np.zeros((0, 2))))
    assert model_outcome(tmp_path / "dup.npz", model) == "error"


def _array_mutations(content: dict[str, bytes]) -> list[tuple[str, dict[str, bytes | None]]]:
    edges = read_npy(content["edges.npy"])
    rp = read_npy(content["row_ptr.npy"])
    X = read_npy(content["X.npy"])
    w = read_npy(content["edge_weights.npy"])
    lo = read_npy(content["box_lo.npy"])
    Q = read_npy(content["penalty_Q.npy"])
    obj = np.empty(X.shape, dtype=object)
    obj[...] = 1.0
    dup = edges.copy()
    dup[1] = dup[0]
    loop = edges.copy()
    loop[0] = [0, 0]
    one_flipped = edges.copy()
    one_flipped[0] = one_flipped[0, ::-1]
    return [
        ("edges flipped", {"edges.npy": npy(edges[:, ::-1].copy())}),
        ("one edge flipped", {"edges.npy": npy(one_flipped)}),
        ("edges unsorted", {"edges.npy": npy(edges[::-1].copy())}),
        ("duplicate edge", {"edges.npy": npy(dup)}),
        ("self-loop", {"edges.npy": npy(loop)}),
        ("edge out of range", {"edges.npy": npy(np.where(edges == edges.max(), 99, edges))}),
        ("negative edge", {"edges.npy": npy(np.where(edges == 0, -1, edges))}),
        ("float edges", {"edges.npy": npy(edges.astype(float))}),
        ("edges 3 columns", {"edges.npy": npy(np.hstack([edges, edges[:, :1]]))}),
        ("edges 1-D", {"edges.npy": npy(edges.ravel())}),
        ("bool edges", {"edges.npy": npy(edges.astype(bool))}),
        ("weights zero", {"edge_weights.npy": npy(np.where(w == w[0], 0.0, w))}),
        ("weights nan", {"edge_weights.npy": npy(np.where(w == w[0], np.nan, w))}),
        ("weights inf", {"edge_weights.npy": npy(np.where(w == w[0], np.inf, w))}),
        ("weights short", {"edge_weights.npy": npy(w[:-1])}),
        ("weights complex", {"edge_weights.npy": npy(w.astype(complex))}),
        ("row_ptr start", {"row_ptr.npy": npy(rp + 1)}),
        ("row_ptr decreasing", {"row_ptr.npy": npy(rp[::-1].copy())}),
        ("row_ptr end", {"row_ptr.npy": npy(np.append(rp[:-1], rp[-1] - 1))}),
        # node 5 (quadratic loss) would own a row of X
        ("row_ptr moved", {"row_ptr.npy": npy(rp - (np.arange(rp.size) == 5))}),
        ("row_ptr float", {"row_ptr.npy": npy(rp.astype(float))}),
        ("X nan", {"X.npy": npy(np.where(X == X[0, 0], np.nan, X))}),
        ("X inf", {"X.npy": npy(np.where(X == X[0, 0], np.inf, X))}),
        ("X extra row", {"X.npy": npy(np.vstack([X, X[:1]]))}),
        ("X string", {"X.npy": npy(X.astype(str))}),
        ("X pickled objects", {"X.npy": npy(obj, allow_pickle=True)}),
        ("X structured", {"X.npy": npy(np.zeros(X.shape[0], dtype=[("a", "f8"), ("b", "f8")]))}),
        ("X subarray dtype", {"X.npy": npy_raw(
            f"{{'descr': ('<f8', (2,)), 'fortran_order': False, 'shape': ({X.shape[0]},), }}",
            X.astype("<f8").tobytes())}),
        ("X huge shape", {"X.npy": npy_raw(
            "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000, 2), }",
            X.tobytes())}),
        ("X overflowing shape", {"X.npy": npy_raw(
            "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, "
            "4611686018427387904), }", X.tobytes())}),
        ("X negative shape", {"X.npy": npy_raw(
            "{'descr': '<f8', 'fortran_order': False, 'shape': (-1, 2), }", X.tobytes())}),
        ("X truncated data", {"X.npy": npy(X)[:-8]}),
        ("X trailing data", {"X.npy": npy(X) + b"\0" * 8}),
        ("X bad header", {"X.npy": npy_raw("{'descr': '<f8', 'shape': (3, 2)}", b"")}),
        ("X bad header text", {"X.npy": npy_raw("__import__('os')", b"")}),
        ("X bad magic", {"X.npy": b"\x93NUMPY\x09\x00" + npy(X)[8:]}),
        ("X empty member", {"X.npy": b""}),
        ("X missing", {"X.npy": None}),
        ("header missing", {"header.npy": None}),
        ("box_lo nan", {"box_lo.npy": npy(np.where(lo == lo[0, 0], np.nan, lo))}),
        ("box_lo +inf", {"box_lo.npy": npy(np.where(lo == lo[0, 0], np.inf, lo))}),
        ("box extra rows", {"box_lo.npy": npy(np.vstack([lo] * 3)),
                            "box_hi.npy": npy(np.vstack([read_npy(content["box_hi.npy"])] * 3))}),
        ("Q asymmetric", {"penalty_Q.npy": npy(Q + np.array([[0, 1.0], [0, 0]]))}),
        ("Q wrong shape", {"penalty_Q.npy": npy(np.eye(3))}),
        ("Q nan", {"penalty_Q.npy": npy(np.full((2, 2), np.nan))}),
        ("centres inf", {"centres.npy": npy(np.full((8, 2), np.inf))}),
        ("y wrong length", {"y.npy": npy(np.zeros(3))}),
        ("y labels not +-1", {"y.npy": npy(np.full(read_npy(content["y.npy"]).shape, 0.5))}),
        ("member in a folder", {"X.npy": None, "sub/X.npy": content["X.npy"]}),
    ]


def test_array_mutations_are_refused(saved, tmp_path: Path):
    model, data = saved["rich"]
    content = members(data)
    escaped = []
    cases = _array_mutations(content)
    for label, change in cases:
        c = dict(content)
        for k, v in change.items():
            if v is None:
                c.pop(k)
            else:
                c[k] = v
        write_zip(tmp_path / "m.npz", c)
        got = model_outcome(tmp_path / "m.npz", model)
        if got != "error":
            escaped.append((label, got))
    assert not escaped, f"{len(escaped)}/{len(cases)} array mutations: {escaped}"


def test_other_valid_encodings_are_read_identically(saved, tmp_path: Path):
    """Other writers: big-endian and Fortran-order arrays, stored (uncompressed) members,
    extra unknown members.  All give the identical model."""
    model, data = saved["rich"]
    content = members(data)
    X = read_npy(content["X.npy"])
    variants = {
        "fortran": {**content, "X.npy": npy(np.asfortranarray(X))},
        "big-endian": {**content, "X.npy": npy(X.astype(">f8")),
                       "row_ptr.npy": npy(read_npy(content["row_ptr.npy"]).astype(">i8"))},
        "int32 edges": {**content, "edges.npy": npy(read_npy(content["edges.npy"])
                                                  .astype(np.int32))},
        "unknown member": {**content, "notes.npy": npy(np.arange(3)), "README": b"hello"},
    }
    for label, c in variants.items():
        write_zip(tmp_path / "v.npz", c)
        assert model_outcome(tmp_path / "v.npz", model) == "same", label
    with zipfile.ZipFile(tmp_path / "stored.npz", "w", zipfile.ZIP_STORED) as zf:
        for name, blob in content.items():
            zf.writestr(name, blob)
    assert model_outcome(tmp_path / "stored.npz", model) == "same"


# ============================================================================ zip bombs
BOMB_MB = 200


def _add_bomb(path: Path, name: str, prefix: bytes = b"", mb: int = BOMB_MB) -> None:
    """Append a member ``name`` inflating to ``mb`` MB (about 1 kB per MB on disk)."""
    chunk = bytes(1 << 20)
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as zf:
        with zf.open(name, "w", force_zip64=True) as fh:
            fh.write(prefix)
            for _ in range(mb):
                fh.write(chunk)


@pytest.fixture
def opened_members(monkeypatch) -> list[str]:
    """Names of every zip member opened for reading (any ZipFile, any reader)."""
    names: list[str] = []
    original = zipfile.ZipFile.open

    def spy(self, name, mode="r", *args, **kwargs):
        if mode == "r":
            names.append(name.filename if isinstance(name, zipfile.ZipInfo) else name)
        return original(self, name, mode, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    return names


def _bounded(fn: Callable[[], Any], mb: float = 30.0) -> tuple[str, float, float]:
    """Run ``fn``; return its outcome class, the seconds and the peak traced MB."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        fn()
        res = "ok"
    except FileFormatError:
        res = "error"
    except BaseException as exc:  # noqa: BLE001
        res = f"escape:{type(exc).__name__}"
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return res, time.perf_counter() - t0, peak / 2**20


def test_unknown_member_bomb_is_never_inflated(saved, tmp_path: Path, opened_members):
    model, data = saved["rich"]
    path = tmp_path / "bomb.npz"
    path.write_bytes(data)
    _add_bomb(path, "bomb.npy")
    assert path.stat().st_size < 2 * len(data) + 2**20
    res, _, peak = _bounded(lambda: load_model(path))
    assert res == "ok" and peak < 30, (res, peak)
    assert same_model(load_model(path), model)
    assert "bomb.npy" not in opened_members and "bomb" not in opened_members


def test_known_member_bombs_are_refused_before_inflating(saved, tmp_path: Path, opened_members):
    model, data = saved["rich"]
    content = members(data)
    header = npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': (4194304, 2), }")
    for name, prefix in [("header.npy", b""), ("X.npy", header), ("edges.npy", b""),
                         ("box_lo.npy", b"")]:
        c = {k: v for k, v in content.items() if k != name}
        write_zip(tmp_path / "bomb.npz", c)
        _add_bomb(tmp_path / "bomb.npz", name, prefix, mb=64)
        opened_members.clear()
        res, secs, peak = _bounded(lambda: load_model(tmp_path / "bomb.npz"))
        assert res == "error", (name, res)
        assert peak < 30 and secs < 5, (name, peak, secs)


def test_bomb_in_weights_archive(tmp_path: Path, opened_members):
    model = model_small(gm.Norm2())
    W = np.arange(12.0).reshape(4, 3)
    save_weights(tmp_path / "w.npz", W)
    _add_bomb(tmp_path / "w.npz", "junk.npy")
    res, _, peak = _bounded(lambda: load_weights(tmp_path / "w.npz", model))
    assert res == "ok" and peak < 30, (res, peak)
    assert "junk.npy" not in opened_members
    # the named member itself declaring a huge shape
    write_zip(tmp_path / "w2.npz", {})
    _add_bomb(tmp_path / "w2.npz", "weights.npy",
              npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': (26214400,), }"))
    res, secs, peak = _bounded(lambda: load_weights(tmp_path / "w2.npz", model))
    assert res == "error" and peak < 30 and secs < 5, (res, peak, secs)


# ============================================================================ weights / flows
def _array_outcome(path: Path, model: gm.GTVModel, ref: np.ndarray, flows: bool) -> str:
    load = load_flows if flows else load_weights

    def check(a: np.ndarray) -> bool:
        assert a.shape == ref.shape and a.dtype == float and np.isfinite(a).all()
        return np.array_equal(a, ref)

    try:
        return outcome(lambda: load(path, model), check)
    except AssertionError:
        return "invalid array accepted"


@pytest.mark.parametrize("ext", [".npz", ".npy", ".csv"])
def test_weights_files_fuzz(tmp_path: Path, ext: str):
    model = model_rich()
    rng = np.random.default_rng(5)
    W = rng.normal(size=(model.num_nodes, 2))
    U = rng.normal(size=(model.num_edges, 2))
    save_weights(tmp_path / f"w{ext}", W)
    save_flows(tmp_path / f"u{ext}", U)
    counts: Counter = Counter()
    for fname, ref, flows in [(f"w{ext}", W, False), (f"u{ext}", U, True)]:
        raw = (tmp_path / fname).read_bytes()
        path = tmp_path / f"x{ext}"
        for t in range(60):
            if t % 3 == 0:
                path.write_bytes(raw[: int(rng.integers(0, len(raw)))])
            else:
                path.write_bytes(flip_bits(raw, rng, int(rng.integers(1, 4))))
            counts[_array_outcome(path, model, ref, flows)] += 1
    # only the zip archive has a checksum: flips in .npy data or in text digits can give a
    # different (valid, finite, correctly shaped) array
    allowed = ("same", "error") if ext == ".npz" else ("same", "error", "different")
    assert not bad(counts, allowed), f"{ext}: {dict(counts)}"


def test_weights_files_bad_content(tmp_path: Path):
    model = model_rich()
    n = model.num_nodes
    W = np.ones((n, 2))
    obj = np.empty((n, 2), dtype=object)
    obj[...] = 1.0
    cases: dict[str, bytes] = {
        "pickle.npy": npy(obj, allow_pickle=True),
        "huge.npy": npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': "
                            "(1000000000000, 2), }", W.tobytes()),
        "overflow.npy": npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': "
                                "(4611686018427387904, 4611686018427387904), }"),
        "string.npy": npy(W.astype(str)),
        "complex.npy": npy(W.astype(complex)),
        "bool.npy": npy(W.astype(bool)),
        "structured.npy": npy(np.zeros(n, dtype=[("a", "f8"), ("b", "f8")])),
        "short.npy": npy(W)[:-3],
        "long.npy": npy(W) + b"\0" * 16,
        "inf.npy": npy(np.full((n, 2), np.inf)),
        "3d.npy": npy(W[None]),
        "empty.npy": b"",
        "text.npy": b"1,2\n3,4\n",
        "pickle.npz": b"",
        "two.npz": b"",
        "ragged.csv": b"1,2\n3\n" * 4,
        "binary.csv": bytes(range(256)),
        "words.txt": b"one two\nthree four\n",
        "empty.csv": b"",
        "inf.csv": b"inf,1\n" * n,
        "hex.csv": b"0x1,2\n" * n,
        "comma-decimal.csv": b"1;2\n" * n,
    }
    write_zip(tmp_path / "pickle.npz", {"weights.npy": cases["pickle.npy"]})
    write_zip(tmp_path / "two.npz", {"a.npy": npy(W), "b.npy": npy(W)})
    escaped = []
    for name, blob in cases.items():
        path = tmp_path / name
        if blob or not name.endswith(".npz"):
            path.write_bytes(blob)
        got = _array_outcome(path, model, W, False)
        if got != "error":
            escaped.append((name, got))
    got = _array_outcome(tmp_path, model, W, False)  # a directory
    if got != "error":
        escaped.append(("directory", got))
    assert not escaped, escaped


def test_weights_d1_vector_and_no_edges(tmp_path: Path):
    """The accepted shortcuts keep working: an (n,) vector for d = 1; an empty flows file."""
    model = model_normp()
    w = np.arange(4.0)
    for ext in (".npz", ".npy", ".csv"):
        save_weights(tmp_path / f"w{ext}", w)
        assert np.array_equal(load_weights(tmp_path / f"w{ext}", model), w[:, None])
    lone = gm.GTVModel(nx.empty_graph(2), 2)
    for ext in (".npz", ".npy"):
        save_flows(tmp_path / f"u{ext}", np.zeros((0, 2)))
        assert load_flows(tmp_path / f"u{ext}", lone).shape == (0, 2)


# ============================================================================ CLI
def call_main(capsys, *args: str) -> tuple[int, str, str]:
    from gtvmodel.cli import main

    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory, saved) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli")
    model, data = saved["rich"]
    (root / "p.npz").write_bytes(data)
    (root / "trunc.npz").write_bytes(data[: len(data) // 2])
    content = members(data)
    write_zip(root / "flipped_edges.npz",
              {**content, "edges.npy": npy(read_npy(content["edges.npy"])[:, ::-1].copy())})
    write_zip(root / "lam_string.npz",
              with_header(content, set_path(header_of(content), ("lam",), "0.4")))
    W = np.full((model.num_nodes, 2), 0.1)
    save_weights(root / "w.npz", W)
    obj = np.empty((model.num_nodes, 2), dtype=object)
    obj[...] = 1.0
    (root / "pickle.npy").write_bytes(npy(obj, allow_pickle=True))
    (root / "garbage.csv").write_bytes(bytes(range(256)))
    (root / "bits.npz").write_bytes(flip_bits((root / "w.npz").read_bytes(),
                                              np.random.default_rng(0), 40))
    return {p.stem: p for p in root.iterdir()}


BAD_ARGS = [
    ["--radius", "nan"], ["--radius", "inf"], ["--radius", "-1"], ["--tol", "0"],
    ["--radius", "abc"], ["--tol", "nan"], ["--tol", "-1"], ["--tol", "inf"], ["--tol", ""],
    ["--feas-tol", "nan"], ["--feas-tol", "-1e-3"], ["--feas-tol", "inf"], ["--bogus"],
    ["--tol"],
]


def test_cli_bad_arguments_exit_2_one_line(cli_files, capsys):
    p, w = str(cli_files["p"]), str(cli_files["w"])
    failures = []
    for extra in [*BAD_ARGS, ["--flows", str(cli_files["p"].parent / "missing.csv")]]:
        code, out, err = call_main(capsys, "certify", p, w, *extra)
        if code != 2 or len(err.splitlines()) != 1 or "Traceback" in err:
            failures.append((extra, code, err))
    for args in [[], ["certify"], ["certify", p], ["frobnicate"], ["certify", p, w, w]]:
        code, out, err = call_main(capsys, *args)
        if code != 2 or len(err.splitlines()) != 1 or "Traceback" in err:
            failures.append((args, code, err))
    assert not failures, failures


def test_cli_bad_files_exit_2_one_line(cli_files, capsys):
    p, w = str(cli_files["p"]), str(cli_files["w"])
    failures = []
    for args in [
        [str(cli_files["trunc"]), w], [str(cli_files["flipped_edges"]), w],
        [str(cli_files["lam_string"]), w], [p, str(cli_files["pickle"])],
        [p, str(cli_files["garbage"])], [p, str(cli_files["bits"])], [w, w],
        [str(cli_files["p"].parent), w], [p, w, "--flows", str(cli_files["pickle"])],
        [p, w, "--flows", w],
    ]:
        code, out, err = call_main(capsys, "certify", *args)
        if code != 2 or len(err.splitlines()) != 1 or "Traceback" in err:
            failures.append((args, code, err))
    assert not failures, failures


def test_cli_good_run_still_exits_0_or_1(cli_files, capsys):
    code, out, err = call_main(capsys, "certify", str(cli_files["p"]), str(cli_files["w"]),
                               "--radius", "5", "--tol", "1e-3", "--feas-tol", "0")
    assert code in (0, 1) and err == "", (code, err)


def test_cli_radius_nan_in_a_real_process(cli_files):
    r = subprocess.run([sys.executable, "-m", "gtvmodel", "certify", str(cli_files["p"]),
                        str(cli_files["w"]), "--radius=nan"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "radius" in r.stderr and math.isnan(float("nan"))
