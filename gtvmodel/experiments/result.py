"""What every experiment returns: :class:`ExperimentResult` (the paper-vs-ours table, the checks
of the expected outcomes, the figures and the numbers behind them)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..results import Result

__all__ = ["Row", "Check", "ExperimentResult", "DPI"]

#: Resolution of the PNG files :meth:`ExperimentResult.save` writes (dots per inch).
DPI = 150


@dataclass(kw_only=True)
class Row:
    """One line of the paper-vs-ours table: a ``quantity``, the paper's number as printed
    (``paper``; ``"figure only"`` where the paper draws it without printing it), and ours as the
    ``mean`` and standard deviation ``std`` over ``n`` seeds."""

    quantity: str
    paper: str
    mean: float
    std: float
    n: int

    def ours(self) -> str:
        """``mean ± std`` (just the mean over one seed)."""
        if not math.isfinite(self.mean):
            return str(self.mean)
        return f"{self.mean:.3g}" + (f" ± {self.std:.2g}" if self.n > 1 else "")


@dataclass(kw_only=True)
class Check:
    """An expected outcome (issue 12, item 3, or the experiment's own): ``ok`` and the numbers
    that decided it (``detail``)."""

    ok: bool
    detail: str


@dataclass(kw_only=True)
class ExperimentResult(Result):
    """One run of a registered experiment (:func:`gtvmodel.experiments.run`).

    Attributes
    ----------
    name, title : str
        The registry name (``"001-star"``) and the paper's section it reproduces.
    seeds : list of int
        The seeds run (one data draw each); every number is deterministic given them.
    quick : bool
        Shrunk sizes (seconds, for tests) instead of the paper's setting.
    rows : list of Row
        The paper's numbers next to ours (mean ± std over the seeds).
    checks : dict of str -> Check
        The expected outcomes, each ``ok`` with its numbers; ``success`` is all of them.
    figures : dict of str -> matplotlib.figure.Figure
        The figures (not pyplot-managed: nothing to close), saved by :meth:`save`.
    data : dict
        The numbers behind the table and the figures (JSON-serializable).
    departures : list of str
        Where this run departs from the paper, stated plainly.
    """

    name: str
    title: str
    seeds: list[int]
    quick: bool
    rows: list[Row] = field(default_factory=list)
    checks: dict[str, Check] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict, repr=False)
    data: dict[str, Any] = field(default_factory=dict, repr=False)
    departures: list[str] = field(default_factory=list)

    _BULKY: ClassVar[tuple[str, ...]] = ("figures",)

    @property
    def success(self) -> bool:
        """Every check holds."""
        return all(c.ok for c in self.checks.values())

    @property
    def status(self) -> str:
        """``"checks passed"`` or ``"checks failed: NAME, ..."``."""
        failed = [k for k, c in self.checks.items() if not c.ok]
        return "checks passed" if not failed else "checks failed: " + ", ".join(failed)

    def to_dict(self, arrays: bool = False) -> dict[str, Any]:
        """JSON-serializable: everything but the figures, which are listed by name."""
        out = super().to_dict(arrays)
        out["figures"] = sorted(self.figures)
        return out

    def table(self) -> str:
        """The paper-vs-ours table and the checks as plain text."""
        seeds = f"{len(self.seeds)} seed{'s' if len(self.seeds) != 1 else ''}"
        head = f"{self.name}: {self.title} ({seeds}{', quick' if self.quick else ''})"
        w = max([len("quantity")] + [len(r.quantity) for r in self.rows])
        p = max([len("paper")] + [len(r.paper) for r in self.rows])
        lines = [head, f"{'quantity':<{w}}  {'paper':<{p}}  ours (mean ± std)"]
        lines += [f"{r.quantity:<{w}}  {r.paper:<{p}}  {r.ours()}" for r in self.rows]
        lines += [f"[{'ok' if c.ok else 'FAILED'}] {k}: {c.detail}"
                  for k, c in self.checks.items()]
        return "\n".join(lines)

    def save(self, out_dir: str | Path, dpi: int = DPI, write_json: bool = True) -> list[Path]:
        """Write every figure as ``NAME_FIGURE.png`` (``dpi`` dots per inch) and, with
        ``write_json``, :meth:`to_dict` as ``NAME.json`` into ``out_dir`` (created)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for key, fig in self.figures.items():
            path = out / f"{self.name}_{key}.png"
            fig.savefig(path, dpi=dpi)
            paths.append(path)
        if write_json:
            path = out / f"{self.name}.json"
            path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
            paths.append(path)
        return paths
