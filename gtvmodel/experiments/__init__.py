"""The papers' experiments, reproduced (issue 12): importable functions and a registry.

``run(NAME, seeds=K, quick=False)`` runs a registered experiment and returns an
:class:`~gtvmodel.experiments.result.ExperimentResult`: the table of the paper's numbers next to
ours (mean ± std over the seeds), the checks of the expected outcomes, the figures (matplotlib
``Figure`` objects) and ``to_dict()``.  The command ``gtvmodel reproduce NAME`` runs the same
functions.  Each experiment is one function ``f(seeds, quick, progress) -> ExperimentResult``
in a module of this package plus one entry of :data:`REGISTRY`.

Examples
--------
>>> from gtvmodel import experiments
>>> experiments.names()
['001-sbm', '001-chain', '001-star', '000-table1', '001-table1', '001-digits', '001-weather']

``experiments.run("001-star", seeds=1, quick=True)`` runs one in about two seconds
(docs/experiments.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .._validate import check_option
from ._common import Progress
from .chain import chain_experiment
from .digits import digits_experiment
from .paper000 import table1_000_experiment
from .result import DPI, Check, ExperimentResult, Row
from .sbm import sbm_experiment
from .star import star_experiment
from .table1 import table1_001_experiment
from .weather import weather_experiment

__all__ = ["REGISTRY", "run", "names", "ExperimentResult", "Row", "Check", "DPI", "Progress",
           "sbm_experiment", "chain_experiment", "star_experiment", "table1_000_experiment",
           "table1_001_experiment", "weather_experiment",
           "digits_experiment"]

#: Registry name -> experiment function ``f(seeds, quick, progress)``.
REGISTRY: dict[str, Callable[..., ExperimentResult]] = {
    "001-sbm": sbm_experiment,
    "001-chain": chain_experiment,
    "001-star": star_experiment,
    "000-table1": table1_000_experiment,
    "001-table1": table1_001_experiment,
    "001-digits": digits_experiment,
    "001-weather": weather_experiment,
}


def names() -> list[str]:
    """The registered experiment names, in registry order."""
    return list(REGISTRY)


def run(name: str, seeds: int | Sequence[int] = 3, quick: bool = False,
        progress: bool | Progress | None = None) -> ExperimentResult:
    """Run the registered experiment ``name`` over ``seeds`` (a count ``K``: seeds
    ``0..K-1``, or the seeds themselves); ``quick`` shrinks the sizes to seconds;
    ``progress`` reports each completed stage (:class:`Progress`: by default a tqdm bar on a
    terminal, one line per stage on stderr otherwise; ``False``: nothing;
    ``Progress(out=DIR)`` also writes the numbers so far to ``DIR/NAME.partial.json``)."""
    check_option(name, "name", REGISTRY, where="experiments.run")
    return REGISTRY[name](seeds=seeds, quick=quick, progress=progress)
