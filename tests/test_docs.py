"""Every ```python block of the README and of every page in docs/ runs as written.

Blocks of one file run in order in one namespace (later blocks may use earlier names), in a
temporary working directory.
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md"] + sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", PAGES)
def test_code_blocks_run(page, tmp_path, monkeypatch):
    path = ROOT / page
    assert path.exists(), f"{page} is missing"
    blocks = python_blocks(path)
    if page == "README.md":
        assert blocks, "the README must contain a runnable example"
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for k, code in enumerate(blocks):
        try:
            exec(compile(code, f"{page}[block {k}]", "exec"), namespace)
        except Exception as exc:  # pragma: no cover - the failure message is the point
            pytest.fail(f"{page}, python block {k} failed: {exc!r}\n---\n{code}")


def test_docs_index_lists_existing_pages():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).exists(), f"README links to a missing page {link}"


OUTSIDE = ("MATH.md", "papers/", "../shared")


@pytest.mark.parametrize("page", PAGES)
def test_docs_are_self_contained(page):
    """A reader of the repository alone can follow every page: no page cites the project's
    working files outside it (the conventions, conjugates and errata live in
    docs/conventions.md, the papers are cited by title, authors and year)."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    found = [f"{page}:{k}: {line.strip()}" for k, line in enumerate(lines, 1)
             if any(name in line for name in OUTSIDE)]
    assert not found, "pages cite files outside the repository:\n" + "\n".join(found)


def test_conventions_page_cites_the_papers_by_title():
    text = (ROOT / "docs" / "conventions.md").read_text(encoding="utf-8")
    for title in ("Networked Federated Learning", "Federated Learning from Big Data over Networks",
                  "CS-E4740 Federated Learning", "Distributed Data Learning with Knowledge"):
        assert title in text, f"docs/conventions.md does not cite {title!r}"


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    heads = re.findall(r"^#+ (.+)$", BLOCK.sub("", path.read_text(encoding="utf-8")), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("page", PAGES)
def test_links_between_pages_resolve(page):
    path = ROOT / page
    text = BLOCK.sub("", path.read_text(encoding="utf-8"))
    for target, anchor in re.findall(r"\]\(((?:docs/)?[\w]+\.md)(?:#([\w-]+))?\)", text):
        linked = path.parent / target
        assert linked.exists(), f"{page} links to a missing page {target}"
        if anchor:
            assert anchor in _anchors(linked), \
                f"{page} links to a missing section {target}#{anchor}"
