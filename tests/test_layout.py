"""The package's layout: no import cycle at all, and no function-local import of the package's
own modules (imports are parsed with :mod:`ast`, as a new contributor would read them)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

import gtvmodel

PKG = Path(__file__).resolve().parent.parent / "gtvmodel"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


#: The deferred imports of the package: the command line imports the engines only in the
#: command that needs them, so that ``--help`` and ``--version`` start in milliseconds
#: (``certify`` imports the file functions, ``reproduce`` the experiments and matplotlib).
DEFERRED = {("gtvmodel.cli", "gtvmodel.io"), ("gtvmodel.cli", "gtvmodel.experiments")}


def _lazy_exports(tree: ast.Module) -> list[tuple[str, int]]:
    """The modules named in a package's ``_EXPORTS`` table (names loaded on first use, PEP
    562): they are its imports as much as import statements are."""
    out = []
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == "_EXPORTS" \
                and isinstance(node.value, ast.Dict):
            out += [(v.value, node.lineno) for v in node.value.values
                    if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return out


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """``(imported module, line, at module level)`` for every import of the package's own
    modules; ``from pkg import name`` counts ``pkg.name`` when that is a module, and
    ``import_module("gtvmodel....")`` with a literal name counts as an import where it stands
    (so that no import hides from this test)."""
    module = _module_name(path)
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in tree.body}
    top |= {id(n) for stmt in tree.body for n in ast.walk(stmt)
            if isinstance(n, ast.Call) and not isinstance(stmt, (ast.FunctionDef, ast.ClassDef))}
    out = [(t, line, True) for t, line in _lazy_exports(tree)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            src = _resolve(node, module, path.name == "__init__.py")
            targets = [src] + [f"{src}.{a.name}" for a in node.names]
        elif (isinstance(node, ast.Call) and node.args
              and getattr(node.func, "id", getattr(node.func, "attr", None)) == "import_module"
              and isinstance(node.args[0], ast.Constant)):
            targets = [str(node.args[0].value)]
        else:
            continue
        for t in targets:
            if t == "gtvmodel" or t.startswith("gtvmodel."):
                out.append((t, node.lineno, id(node) in top))
    return out


def _graph() -> tuple[nx.DiGraph, list[str]]:
    files = sorted(PKG.rglob("*.py"))
    modules = {_module_name(f) for f in files}
    G = nx.DiGraph()
    local = []
    for f in files:
        src = _module_name(f)
        G.add_node(src)
        for target, line, at_top in _imports(f):
            if target not in modules:
                continue
            if not at_top and (src, target) not in DEFERRED:
                local.append(f"{src}:{line} imports {target}")
            # importing a.b.c runs the packages a and a.b first
            parts = target.split(".")
            for k in range(1, len(parts) + 1):
                dep = ".".join(parts[:k])
                if dep in modules and dep != src and not src.startswith(dep + "."):
                    G.add_edge(src, dep)
    return G, local


@pytest.fixture(scope="module")
def layout() -> tuple[nx.DiGraph, list[str]]:
    """The import graph and the function-local imports, parsed once for the three tests that
    read them (the parse of every module is most of their time)."""
    return _graph()


def test_no_import_cycle(layout):
    G, _ = layout
    cycles = list(nx.simple_cycles(G))
    assert not cycles, f"import cycles: {cycles[:5]}"


def test_no_function_local_imports_of_the_package(layout):
    _, local = layout
    assert not local, "function-local imports (hide import cycles): " + "; ".join(local)


def test_the_graph_sees_the_engines(layout):
    """The parser is not vacuous: the façade imports the engines and the engines import the
    declaration (a test of the test)."""
    G, _ = layout
    assert G.has_edge("gtvmodel.model", "gtvmodel.solve.exact")
    assert G.has_edge("gtvmodel.solve.exact", "gtvmodel.declaration")
    assert nx.has_path(G, "gtvmodel", "gtvmodel.terms.losses")
    assert G.number_of_nodes() >= 25


def test_the_command_line_starts_without_the_engines():
    """``import gtvmodel`` loads its names on first use: the command line's ``--help`` and
    ``--version`` import neither CVXPY nor SciPy nor matplotlib (issue 15: start fast)."""
    code = ("import sys, gtvmodel.cli; "
            "print(sorted(m for m in ('cvxpy', 'scipy', 'matplotlib', 'networkx') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=PKG.parent)
    assert out.stdout.strip() == "[]", out.stdout
    assert gtvmodel.GTVModel.__module__ == "gtvmodel.model"  # loaded on first use
    assert "GTVModel" in dir(gtvmodel) and gtvmodel.theory.__name__ == "gtvmodel.theory"


#: The layers that the kernels (numerical solvers over arrays and callables, issue 29 item 1)
#: must not import, directly or through another module: the terms call the kernels, never
#: the other way round.
KERNELS_BELOW = ("gtvmodel.terms", "gtvmodel.duality", "gtvmodel.solve", "gtvmodel.certificates",
                 "gtvmodel.primal_dual")


def test_the_kernels_import_no_terms_or_engines(layout):
    G, _ = layout
    kernels = [m for m in G if m.startswith("gtvmodel.kernels.")]
    assert {"gtvmodel.kernels.composite", "gtvmodel.kernels.newton",
            "gtvmodel.kernels.boxqp"} <= set(kernels)
    reached = set().union(*(nx.descendants(G, m) for m in kernels))
    bad = sorted(m for m in reached if m.startswith(tuple(p + "." for p in KERNELS_BELOW))
                 or m in KERNELS_BELOW)
    assert not bad, f"gtvmodel.kernels imports {bad}"
    # (a test of the test: the terms do import the kernels)
    assert G.has_edge("gtvmodel.terms.composite", "gtvmodel.kernels.composite")


#: The package order (issue 29 item 4), lowest layer first.  A unit is a subpackage of
#: ``gtvmodel`` or one of its top-level modules (``""``: ``gtvmodel/__init__.py``); a unit
#: imports only units of its own layer or of lower ones, and every unit has a layer (a new
#: package says where it stands).  The formulations (``duality``) lie below both engines that
#: use them; every certificate (host, sharded, device) is in ``certificates``, below Algorithm 1
#: (``primal_dual``), which certifies its iterates; ``solve`` (``solve_exact`` and its routes,
#: the first-order route through Algorithm 1 among them) is the top engine.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("shared", frozenset({"errors", "_validate", "_norms", "_cvx", "_solver", "_compat", "_xp",
                          "_compiled", "results", "solution"})),
    ("kernels", frozenset({"kernels"})),
    ("terms", frozenset({"terms"})),
    ("declaration", frozenset({"graph", "declaration", "_structure", "_samples", "_files",
                               "_archive"})),
    ("duality", frozenset({"duality"})),
    ("certificates", frozenset({"certificates"})),
    ("primal_dual", frozenset({"primal_dual"})),
    ("solve", frozenset({"solve"})),
    ("theory", frozenset({"theory"})),
    ("facade", frozenset({"", "model", "io", "cli", "__main__", "datasets", "plot", "baselines",
                          "graphs", "path", "scores", "comparison", "experiments", "flower",
                          "sklearn", "testing", "_testing_core"})),
)

#: Private names one unit may import from another: none (the helpers of ``kernels/`` that the
#: terms call -- ``grouped_gram``, ``newton_predictor``, ``take_rows``, ``states_at``,
#: ``spd_solve`` -- are public; issue 29 items 1-2).
PRIVATE_ALLOWED: frozenset[tuple[str, str, str]] = frozenset()


#: The engine packages, whose modules talk to one another through public names only (issue 29
#: item 5: the backends of Algorithm 1 through a public internal interface).
ENGINES = ("duality", "certificates", "primal_dual", "solve")

#: Private names one engine module may import from another: none since the backends of
#: Algorithm 1 use the public interface of ``primal_dual/loop.py`` (issue 29 item 5).
ENGINE_PRIVATE_ALLOWED: frozenset[tuple[str, str, str]] = frozenset()


def _unit(module: str) -> str:
    """The unit of a module: ``gtvmodel.solve.exact`` -> ``solve``, ``gtvmodel.model`` ->
    ``model``, ``gtvmodel`` -> ``""``."""
    parts = module.split(".")[1:]
    return parts[0] if parts else ""


def _package_graph(G: nx.DiGraph) -> nx.DiGraph:
    """The module graph contracted to units; each edge keeps one module-level import behind it
    (``via``) for the messages."""
    P = nx.DiGraph()
    P.add_nodes_from(_unit(m) for m in G)
    for a, b in G.edges:
        if _unit(a) != _unit(b):
            P.add_edge(_unit(a), _unit(b), via=f"{a} -> {b}")
    return P


def test_no_package_level_cycle(layout):
    """Modules without a cycle can still make packages that import each other (``solve ->
    certificates -> solve`` before issue 29); the contracted graph has none either."""
    P = _package_graph(layout[0])
    cycles = list(nx.simple_cycles(P))
    shown = []
    for c in cycles[:5]:
        via = [P.edges[a, b]["via"] for a, b in zip(c, c[1:] + c[:1], strict=True)]
        shown.append(" -> ".join(c + [c[0]]) + " (" + ", ".join(via) + ")")
    assert not cycles, "package-level cycles: " + "; ".join(shown)


def test_packages_import_only_their_layer_or_lower(layout):
    P = _package_graph(layout[0])
    rank = {u: k for k, (_, units) in enumerate(LAYERS) for u in units}
    assert sum(len(units) for _, units in LAYERS) == len(rank), "a unit in two layers"
    missing = sorted(u for u in P if u not in rank)
    assert not missing, f"units without a layer in LAYERS: {missing}"
    up = [f"{P.edges[a, b]['via']} ({LAYERS[rank[a]][0]} imports {LAYERS[rank[b]][0]})"
          for a, b in P.edges if rank[b] > rank[a]]
    assert not up, "imports up the package order: " + "; ".join(sorted(up))
    # (a test of the test: the order is read from real imports)
    assert P.has_edge("solve", "primal_dual") and P.has_edge("primal_dual", "certificates")
    assert P.has_edge("certificates", "duality")


def _private_imports() -> set[tuple[str, str, str]]:
    """``(importer, module, name)`` for every ``from module import _name`` of the package
    from another module, where ``_name`` is not a module (private shared modules such as
    ``gtvmodel._xp`` are the package's own kernels) nor a dunder."""
    modules = {_module_name(f) for f in PKG.rglob("*.py")}
    out = set()
    for path in sorted(PKG.rglob("*.py")):
        src = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            target = _resolve(node, src, path.name == "__init__.py")
            if not target.startswith("gtvmodel") or target == src:
                continue
            out |= {(src, target, a.name) for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                    and f"{target}.{a.name}" not in modules}
    return out


@pytest.fixture(scope="module")
def private_imports() -> set[tuple[str, str, str]]:
    return _private_imports()


def test_no_private_import_across_packages(private_imports):
    found = {(a, m, n) for a, m, n in private_imports if _unit(a) != _unit(m)}
    new = sorted(found - PRIVATE_ALLOWED)
    assert not new, "private names imported across packages: " + "; ".join(
        f"{a} imports {m}.{n}" for a, m, n in new)
    gone = sorted(PRIVATE_ALLOWED - found)
    assert not gone, f"PRIVATE_ALLOWED lists imports that are gone, remove them: {gone}"


def test_engine_modules_import_no_private_name(private_imports):
    found = {(a, m, n) for a, m, n in private_imports if _unit(a) in ENGINES}
    new = sorted(found - ENGINE_PRIVATE_ALLOWED)
    assert not new, "private names imported between engine modules: " + "; ".join(
        f"{a} imports {m}.{n}" for a, m, n in new)
    gone = sorted(ENGINE_PRIVATE_ALLOWED - found)
    assert not gone, f"ENGINE_PRIVATE_ALLOWED lists imports that are gone, remove them: {gone}"


def _code_lines(src: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of code of a function (its nested functions included): no blank, comment-only
    or docstring line."""
    body = node.body
    doc = range(0)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        doc = range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1)
    return sum(1 for i in range(node.lineno, (node.end_lineno or node.lineno) + 1)
               if i not in doc and src[i - 1].strip() and not src[i - 1].strip().startswith("#"))


#: Functions exempt from the 60-line limit, each with its measured reason: none since
#: ``kernels/tv.py``'s ``_tv_forest`` runs its helpers inlined without reference counting
#: (benchmarks/RESULTS.md, "The last two items of issue 29").
FUNCTION_EXEMPT: set[tuple[str, str]] = set()

#: The units of the package, each checked alone (a package's modules, or the top level).
SIZED = ["", "kernels", "terms", "terms/losses", "duality", "certificates", "primal_dual",
         "solve", "theory", "graphs", "baselines", "experiments"]


@pytest.mark.parametrize("package", SIZED)
def test_short_functions_and_modules(package):
    """Issue 29 item 8 on the whole package: at most 60 lines of code per function (but
    :data:`FUNCTION_EXEMPT`) and 800 lines per module."""
    long = []
    for path in sorted((PKG / package).glob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        src = path.read_text().splitlines()
        if len(src) > 800:
            long.append(f"{rel}: {len(src)} lines")
        for node in ast.walk(ast.parse("\n".join(src))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and _code_lines(src, node) > 60 and (rel, node.name) not in FUNCTION_EXEMPT:
                long.append(f"{rel}:{node.lineno} {node.name}: "
                            f"{_code_lines(src, node)} lines of code")
    assert not long, "; ".join(long)


def test_every_package_is_sized():
    """A new subpackage gets the size check too."""
    found = {p.parent.relative_to(PKG).as_posix() for p in PKG.rglob("__init__.py")}
    assert {("" if f == "." else f) for f in found} <= set(SIZED)
