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
