"""What pyproject.toml cannot say declaratively (the metadata itself is in pyproject.toml).

1. The teaching notebooks (``examples/notebooks/*.ipynb`` and their ``solutions/``) are shipped
   in the wheel as package data of ``gtvmodel._lessons`` and ``gtvmodel._lessons.solutions``
   (mapped from ``examples/notebooks``; only the notebooks, not the scripts beside them), so
   ``gtvmodel lessons DIR`` writes them out after a plain ``pip install``.
2. The package index page: README.md links the docs by relative paths, which work on a
   repository host and in a checkout but not on an index page (the project has no public URL to
   make them absolute).  The long description is README.md with every relative link turned into
   its text and the path, in code format (``docs/...`` is in the source distribution), and
   relative images dropped; absolute links are kept.
"""

from __future__ import annotations

import re
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
LESSONS = "gtvmodel._lessons"
SOLUTIONS = LESSONS + ".solutions"
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def index_readme(text: str) -> str:
    """README.md for the package index: relative links become ``text (`path`)``, relative
    images are dropped, absolute (``scheme:``) and in-page (``#``) links stay."""

    def repl(m: re.Match[str]) -> str:
        image, label, target = m.groups()
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
            return m.group(0)
        if image:
            return ""
        path = target.split("#", 1)[0]
        plain = label.strip("`")
        return f"{label} (`{path}`)" if plain != path else f"`{path}`"

    return _LINK.sub(repl, text)


class BuildPy(build_py):
    """``build_py`` that ships only the notebooks of ``gtvmodel._lessons`` (its directory,
    ``examples/notebooks``, also holds the scripts that build and run them)."""

    def find_package_modules(self, package, package_dir):
        if package in (LESSONS, SOLUTIONS):
            return []
        return super().find_package_modules(package, package_dir)


if __name__ == "__main__":
    setup(
        packages=find_packages(include=["gtvmodel", "gtvmodel.*"]) + [LESSONS, SOLUTIONS],
        package_dir={LESSONS: "examples/notebooks", SOLUTIONS: "examples/notebooks/solutions"},
        package_data={"gtvmodel": ["py.typed"], LESSONS: ["*.ipynb"], SOLUTIONS: ["*.ipynb"]},
        include_package_data=False,
        long_description=index_readme((HERE / "README.md").read_text(encoding="utf-8")),
        long_description_content_type="text/markdown",
        cmdclass={"build_py": BuildPy},
    )
