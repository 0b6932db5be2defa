"""The package's layout: no import cycle at all, and no function-local import of the package's
own modules (imports are parsed with :mod:`ast`, as a new contributor would read them)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

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


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """``(imported module, line, at module level)`` for every import of the package's own
    modules; ``from pkg import name`` counts ``pkg.name`` when that is a module."""
    module = _module_name(path)
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            src = _resolve(node, module, path.name == "__init__.py")
            targets = [src] + [f"{src}.{a.name}" for a in node.names]
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
            if not at_top:
                local.append(f"{src}:{line} imports {target}")
            # importing a.b.c runs the packages a and a.b first
            parts = target.split(".")
            for k in range(1, len(parts) + 1):
                dep = ".".join(parts[:k])
                if dep in modules and dep != src and not src.startswith(dep + "."):
                    G.add_edge(src, dep)
    return G, local


def test_no_import_cycle():
    G, _ = _graph()
    cycles = list(nx.simple_cycles(G))
    assert not cycles, f"import cycles: {cycles[:5]}"


def test_no_function_local_imports_of_the_package():
    _, local = _graph()
    assert not local, "function-local imports (hide import cycles): " + "; ".join(local)


def test_the_graph_sees_the_engines():
    """The parser is not vacuous: the façade imports the engines and the engines import the
    declaration (a test of the test)."""
    G, _ = _graph()
    assert G.has_edge("gtvmodel.model", "gtvmodel.solve.exact")
    assert G.has_edge("gtvmodel.solve.exact", "gtvmodel.declaration")
    assert nx.has_path(G, "gtvmodel", "gtvmodel.terms.losses")
    assert G.number_of_nodes() >= 25
