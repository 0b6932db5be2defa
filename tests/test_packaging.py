"""Packaging: declared dependency ranges, the CVXPY compatibility layer, the package's public
surface, the files a distribution must carry, the index page and the ``lessons`` command.

The CVXPY checks run against the installed CVXPY: ``make test`` covers the newest supported
release, ``make test-min`` (ci/min-versions.txt) the oldest, so each accessor of
``gtvmodel._compat`` is exercised at both ends of the declared range.  Building the wheel and
installing it outside the repository is CI's step (``.ci/run``), not a unit test.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import clarabel
import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp

import gtvmodel
from gtvmodel import _compat, _solver
from gtvmodel.cli import main

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
RUNTIME = ["cvxpy", "clarabel", "numpy", "scipy", "networkx", "matplotlib", "tqdm",
           "scikit-learn", "array-api-compat", "numba"]

needs_sources = pytest.mark.skipif(not PYPROJECT.exists(), reason="not a source tree")


def _dependencies() -> dict[str, str]:
    """``name -> specifier`` of pyproject's runtime dependencies (extras dropped).  Read with a
    regular expression: ``tomllib`` is Python >= 3.11."""
    text = PYPROJECT.read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
    out = {}
    for item in re.findall(r'"([^"]+)"', block):
        m = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?(.*)", item)
        out[m.group(1).lower()] = m.group(3)
    return out


def _release(spec: str, op: str) -> tuple[int, ...] | None:
    m = re.search(re.escape(op) + r"\s*([0-9][0-9.]*)", spec)
    return None if m is None else tuple(int(x) for x in m.group(1).split("."))


def _pad(v: tuple[int, ...]) -> tuple[int, int, int]:
    return tuple((list(v) + [0, 0, 0])[:3])  # type: ignore[return-value]


# ================================================================ dependency ranges
@needs_sources
def test_declared_floors_are_the_pinned_minimum_versions():
    """pyproject's floors and ci/min-versions.txt (what `make test-min` installs) agree."""
    deps = _dependencies()
    assert sorted(deps) == sorted(RUNTIME)
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([0-9.]+)\s*$",
                           (ROOT / "ci" / "min-versions.txt").read_text(encoding="utf-8"),
                           re.M))
    assert sorted(pins) == sorted(RUNTIME)
    for name in RUNTIME:
        floor = _release(deps[name], ">=")
        assert floor is not None, f"{name} has no floor"
        pinned = tuple(int(x) for x in pins[name].split("."))
        assert _pad(floor) == _pad(pinned), (name, floor, pinned)


@needs_sources
def test_cvxpy_range_is_declared_and_installed():
    spec = _dependencies()["cvxpy"]
    assert _pad(_release(spec, ">=")) == _compat.CVXPY_RANGE[0]
    assert _pad(_release(spec, "<")) == _compat.CVXPY_RANGE[1]
    lo, hi = _compat.CVXPY_RANGE
    assert lo <= _compat.cvxpy_version() < hi, cp.__version__


def test_version_parsing():
    assert _compat._release("1.9.3") == (1, 9, 3)
    assert _compat._release("1.10.0rc1") == (1, 10, 0)
    assert _compat._release("1.7") == (1, 7, 0)
    assert _compat._release("2.0.0.dev0+g1a2b") == (2, 0, 0)


# ================================================================ the CVXPY internals
def test_conic_offset_and_columns_match_an_independent_evaluation():
    """``c^T x + d`` of the conic data at the solver's point is the problem's optimal value,
    and the variable's columns hold its value (CVXPY's own answer is the reference)."""
    x = cp.Variable(3)
    y = cp.Variable(2)
    p = cp.Parameter(nonneg=True, value=2.5)
    obj = cp.sum_squares(x - np.array([1.0, -2.0, 0.5])) + p * cp.norm1(y) + 7.25
    prob = cp.Problem(cp.Minimize(obj), [cp.sum(x) + y[0] <= 1.0, y >= -1.0])
    data, _, inverse = prob.get_problem_data(cp.CLARABEL, solver_opts={"use_quad_obj": False})
    assert not _compat.has_variable_bounds(data)
    c = np.asarray(data["c"], dtype=float)
    d = _compat.conic_offset(inverse)
    nv = int(_compat.conic_program(data).x.size)
    assert c.size == nv
    # Clarabel itself on the data, as CVXPY would hand it over (A x + s = b, s in K)
    solver = clarabel.DefaultSolver(sp.csc_matrix((nv, nv)), c, sp.csc_matrix(data["A"]),
                                    np.asarray(data["b"], dtype=float),
                                    _compat.dims_to_solver_cones(data["dims"]),
                                    clarabel.DefaultSettings())
    sol = solver.solve()
    z = np.asarray(sol.x)
    ref = prob.solve(solver=cp.CLARABEL)
    np.testing.assert_allclose(c @ z + d, ref, rtol=1e-6)
    cx, cy = _compat.variable_column(data, x), _compat.variable_column(data, y)
    np.testing.assert_allclose(z[cx:cx + 3], x.value, atol=1e-5)
    np.testing.assert_allclose(z[cy:cy + 2], y.value, atol=1e-5)
    unused = cp.Variable(2)
    assert _compat.variable_column(data, unused) is None


@pytest.mark.parametrize("k", [1, 3])
def test_pow_cone_3d_any_length(k):
    """``x^a y^(1-a) >= |z|`` for k cones: maximize sum z with x = y = 1 gives sum z = k."""
    x, y, z = cp.Variable(k), cp.Variable(k), cp.Variable(k)
    alpha = np.linspace(0.3, 0.7, k)
    prob = cp.Problem(cp.Maximize(cp.sum(z)),
                      [_compat.pow_cone_3d(x, y, z, alpha), x == 1.0, y == 1.0])
    assert np.isclose(prob.solve(solver=cp.CLARABEL), k, rtol=1e-7)


@pytest.mark.parametrize("k, d", [(1, 1), (1, 3), (3, 1), (2, 3)])
def test_pnorm_rows_le_any_shape(k, d):
    """``||Z_k||_3 <= t_k`` row-wise through power cones, a single entry (``k = d = 1``, which
    CVXPY 1.7 rejected as a vector cone) included: maximizing ``sum Z`` gives Hölder's bound
    ``sum_k t_k d^(1 - 1/3)``."""
    from gtvmodel._cvx import pnorm_rows_le

    Z, t = cp.Variable((k, d)), np.arange(1.0, k + 1.0)
    prob = cp.Problem(cp.Maximize(cp.sum(Z)), pnorm_rows_le(Z, t, 3.0))
    assert np.isclose(prob.solve(solver=cp.CLARABEL), t.sum() * d ** (2 / 3), rtol=1e-7)


def test_clarabel_interface_is_subclassable():
    assert issubclass(_solver._RungClarabel, _compat.CLARABEL)
    assert {"Solved", "AlmostSolved"} <= set(_compat.CLARABEL.STATUS_MAP)
    assert callable(_compat.CLARABEL.parse_solver_opts)
    assert isinstance(cp.pnorm(cp.Variable(2), 3), _compat.Pnorm)
    assert isinstance(cp.pnorm(cp.Variable(2), 3), _compat.Atom)


def test_reserve_ids_moves_the_counter():
    w = cp.Variable(2)
    expr = cp.sum_squares(w - 1.0) + cp.norm1(w)
    top = _compat.reserve_ids([expr, w >= 0, "not cvxpy"])
    assert top >= w.id
    assert cp.Variable().id > top


# ================================================================ the public surface
def test_dir_shows_public_names_only():
    names = set(dir(gtvmodel))
    public = set(gtvmodel.__all__) | gtvmodel._SUBMODULES
    extra = {n for n in names - public if not (n.startswith("__") and n.endswith("__"))}
    assert not extra, f"dir(gtvmodel) shows non-public names: {sorted(extra)}"
    assert set(gtvmodel.__all__) <= names and "__version__" in names


def test_typed_marker_is_package_data():
    assert (Path(gtvmodel.__file__).parent / "py.typed").is_file()


# ================================================================ distribution files
@needs_sources
def test_license_and_metadata():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "gtvmodel developers" in text
    meta = PYPROJECT.read_text(encoding="utf-8")
    for field in ('license = "MIT"', 'license-files = ["LICENSE"]', "authors = ", "keywords = ",
                  "classifiers = ", '"Typing :: Typed"'):
        assert field in meta, field
    for py in ("3.10", "3.11", "3.12", "3.13"):
        assert f'"Programming Language :: Python :: {py}"' in meta
    assert re.search(r"^torch = \[", meta, re.M) and re.search(r"^docs = \[", meta, re.M)


@needs_sources
def test_sdist_manifest_carries_what_the_tests_and_docs_need():
    manifest = (ROOT / "MANIFEST.in").read_text(encoding="utf-8")
    for d in ("tests", "docs", "examples", "ci", ".ci", "benchmarks"):
        assert re.search(rf"^graft {re.escape(d)}$", manifest, re.M), d
    for needed in ("tests/conftest.py", "tests/_refs.py", "tests/_soundness.py", "docs/conf.py",
                   "examples/demo_sbm.py", "ci/min-versions.txt"):
        assert (ROOT / needed).is_file(), needed


@needs_sources
def test_index_readme_has_no_relative_links():
    spec = importlib.util.spec_from_file_location("_setup", ROOT / "setup.py")
    setup_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup_mod)  # setup() itself runs only as __main__
    out = setup_mod.index_readme((ROOT / "README.md").read_text(encoding="utf-8"))
    links = re.findall(r"\]\(([^)\s]+)\)", out)
    relative = [t for t in links if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|#", t)]
    assert not relative, relative
    assert "`docs/getting_started.md`" in out
    assert setup_mod.index_readme("[a](http://x.y/z) ![i](docs/f.png) [b](#c) [`d.md`](d.md)") \
        == "[a](http://x.y/z)  [b](#c) `d.md`"


# ================================================================ gtvmodel lessons
def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "gtvmodel", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def test_lessons_writes_the_notebooks(tmp_path):
    assert main(["lessons", str(tmp_path / "L")]) == 0
    written = sorted(p.relative_to(tmp_path / "L").as_posix()
                     for p in (tmp_path / "L").rglob("*.ipynb"))
    assert len(written) >= 14 and "solutions/01_gtvmin_in_ten_minutes.ipynb" in written
    nb = json.loads((tmp_path / "L" / "01_gtvmin_in_ten_minutes.ipynb").read_text())
    assert nb["cells"]
    assert main(["lessons", str(tmp_path / "L")]) == 2  # the files exist, no --force
    assert main(["lessons", str(tmp_path / "L"), "--force"]) == 0


def test_lessons_refusal_is_one_line(tmp_path):
    (tmp_path / "01_gtvmin_in_ten_minutes.ipynb").write_text("{}")
    out = _cli("lessons", str(tmp_path), cwd=ROOT)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "--force" in out.stderr


# ================================================================ numpydoc sections
_SECTION = re.compile(r"^(Parameters|Returns|Yields|Raises|Examples)\n-{3,}\n"
                      r"(.*?)(?=^\S[^\n]*\n-{3,}\n|\Z)", re.S | re.M)

#: Public names whose docstrings do not have the numpydoc sections yet (they live in modules
#: other work owns).  This list only shrinks: a name fixed is removed, a new name never added.
SECTIONS_TODO: frozenset[str] = frozenset()


def _sections(obj) -> dict[str, str]:
    doc = inspect.getdoc(obj) or ""
    return {m.group(1): m.group(2) for m in _SECTION.finditer(doc)}


def _missing_sections(obj) -> list[str]:
    """What the numpydoc docstring of a public function or class lacks: ``Parameters`` naming
    every argument of the signature (``name : type``), ``Returns`` (functions), ``Raises``
    (where there are arguments to reject) and ``Examples``."""
    secs = _sections(obj)
    params = [p for p in inspect.signature(obj).parameters.values()
              if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    out = []
    if params:
        # unindented lines ``name : type`` or ``a, b : type`` name the parameters
        names = {n.strip() for line in secs.get("Parameters", "").splitlines()
                 if line and not line[0].isspace() for n in line.split(" :")[0].split(",")}
        out += [f"Parameters: {p.name}" for p in params if p.name not in names]
        if "Raises" not in secs:
            out.append("Raises")
    if inspect.isfunction(obj) and "Returns" not in secs and "Yields" not in secs:
        out.append("Returns")
    if "Examples" not in secs:
        out.append("Examples")
    return out


def _documented_names() -> list[str]:
    out = []
    for name in gtvmodel.__all__:
        obj = getattr(gtvmodel, name)
        if inspect.ismodule(obj) or (isinstance(obj, type) and issubclass(obj, BaseException)):
            continue  # a module's docstring is prose; exceptions are documented by their use
        out.append(name)
    return out


def test_public_names_have_numpydoc_sections():
    bad = {name: _missing_sections(getattr(gtvmodel, name)) for name in _documented_names()
           if name not in SECTIONS_TODO}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, "numpydoc sections missing:\n" + "\n".join(f"  {k}: {v}"
                                                               for k, v in bad.items())


def test_sections_todo_only_shrinks():
    stale = sorted(n for n in SECTIONS_TODO
                   if n in gtvmodel.__all__ and not _missing_sections(getattr(gtvmodel, n)))
    assert not stale, f"complete now, remove from SECTIONS_TODO: {stale}"
    assert SECTIONS_TODO <= set(gtvmodel.__all__)
