"""Execute every teaching notebook (student and solution versions) with nbclient.

``python examples/notebooks/_run.py [OUTDIR]`` (what ``make notebooks`` runs when Jupyter is
not installed) executes each ``.ipynb`` of ``examples/notebooks/`` and
``examples/notebooks/solutions/`` in a ``python3`` kernel, top to bottom, and writes the
executed copy, outputs and figures included, to ``OUTDIR`` (default ``out/notebooks/``;
``solutions/`` below it for the solutions).  It prints the wall-clock time of each notebook
(kernel start-up included; the times listed in ``docs/teaching.md``).  Exercise check cells
tagged ``raises-exception`` may fail in the student versions (their answers are
placeholders); any other error stops with a non-zero exit code.  The kernels' messages are
encrypted (CurveZMQ) where pyzmq and jupyter_client support it (:func:`kernel_config`), so
that no kernel warns that it "is running over TCP without encryption".
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import zmq
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from traitlets.config import Config

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def kernel_config() -> Config:
    """The configuration of the kernel managers: ``transport_encryption = "auto"`` (CurveZMQ
    keys provisioned for kernels whose specification supports them, as ipykernel's does) where
    jupyter_client has that option and pyzmq was built with CurveZMQ; otherwise the defaults,
    and the kernels warn about plain TCP as before."""
    if "transport_encryption" in KernelManager.class_trait_names() and zmq.has("curve"):
        return Config({"KernelManager": {"transport_encryption": "auto"}})
    return Config()


def run(path: Path, outdir: Path) -> float:
    """Execute one notebook in a temporary working directory, save it with its outputs under
    ``outdir`` and return the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        NotebookClient(nb, timeout=600, kernel_name="python3", config=kernel_config(),
                       resources={"metadata": {"path": tmp}}).execute()
    seconds = time.perf_counter() - start
    target = outdir / path.relative_to(HERE)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)
    return seconds


def main(argv: list[str]) -> int:
    """Run all notebooks; 1 if one of them fails."""
    outdir = Path(argv[0]) if argv else ROOT / "out" / "notebooks"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    paths = sorted(HERE.glob("*.ipynb")) + sorted((HERE / "solutions").glob("*.ipynb"))
    total, failed = 0.0, []
    for path in paths:
        name = path.relative_to(HERE)
        try:
            seconds = run(path, outdir)
        except CellExecutionError as exc:
            print(f"{name}: FAILED\n{str(exc)[-2000:]}", file=sys.stderr)
            failed.append(name)
            continue
        total += seconds
        print(f"{str(name):<48} {seconds:6.1f} s")
    print(f"{'total':<48} {total:6.1f} s; executed notebooks in {outdir}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
