"""Where Algorithm 1 runs: the ``backend=`` argument of
:func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`.

A backend is an object with the options of its array library or cluster and one method,
:meth:`Backend.solve`, which runs the loop of :mod:`~gtvmodel.primal_dual.loop` (its
:class:`~gtvmodel.primal_dual.loop.Run`, or a subclass of it) on a model with the arguments
every backend takes (:class:`~gtvmodel.primal_dual.loop.RunArguments`):

* :class:`NumpyBackend` (``"numpy"``, the default) -- this process, vectorized with numpy and
  ``scipy.sparse``; options ``threads`` and ``kernel`` (the edge update DU (33));
* :class:`~gtvmodel.primal_dual.torch_backend.TorchBackend` (``"torch"``) -- PyTorch tensors on
  a ``device``, in ``dtype``;
* :class:`~gtvmodel.primal_dual.distributed.DaskBackend` (``"dask"``) -- shards of the nodes on
  the workers of a Dask ``client``.

A name stands for the backend with its default options.  The backends register themselves in
:data:`BACKENDS` by name when the package ``gtvmodel.primal_dual`` is imported; a new backend
is one :class:`Backend` subclass registered there.  :func:`resolve_backend` turns the argument
(and the keywords of the release before, ``threads=``, ``kernel=``, ``device=``, ``dtype=``,
``client=``, ``shards=``, deprecated) into a backend object.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from .._validate import check_int, check_option
from ..declaration import ModelDeclaration
from ..errors import ParameterError
from .compiled import KERNELS
from .loop import Run, RunArguments, check_options
from .prox import NodeUpdates
from .result import PrimalDualResult
from .steps import make_step_rule

__all__ = ["Backend", "NumpyBackend", "BACKENDS", "LEGACY_OPTIONS", "resolve_backend"]


class Backend:
    """Where and how Algorithm 1 runs (the ``backend=`` of
    :func:`~gtvmodel.primal_dual.algorithm.solve_primal_dual`); subclasses are frozen
    dataclasses of their options, checked when they are made."""

    #: The backend's name in :data:`BACKENDS` (``backend="numpy"``, ...).
    name: ClassVar[str] = ""

    def solve(self, model: ModelDeclaration, args: RunArguments) -> PrimalDualResult:
        """Run Algorithm 1 on ``model`` with ``args`` (checked here); returns the result."""
        raise NotImplementedError


#: The backends by name (filled when ``gtvmodel.primal_dual`` is imported).
BACKENDS: dict[str, type[Backend]] = {}


@dataclass(frozen=True)
class NumpyBackend(Backend):
    """Algorithm 1 in this process, vectorized over all nodes and edges (numpy,
    ``scipy.sparse``).

    Parameters
    ----------
    threads : int
        The edge updates DU (33) and the product ``D^T u`` split over this many threads
        (opt-in; default 1): the same iterates bit for bit
        (:class:`~gtvmodel.primal_dual.updates.EdgeUpdates`).  It pays only where a second
        core is idle (benchmarks/RESULTS.md, "Algorithm 1's iteration at scale").
    kernel : {"auto", "numpy", "numba"}
        The edge update DU (33): ``"numpy"`` the blocks of
        :class:`~gtvmodel.primal_dual.updates.EdgeUpdates`; ``"numba"`` one compiled pass per
        iteration (:class:`~gtvmodel.primal_dual.compiled.CompiledEdgeUpdates`, for the
        penalties with a row kernel: ``Norm2``, ``Norm1``, ``SquaredNorm2``; the others keep
        the numpy path), which needs numba (``pip install 'gtvmodel[fast]'``,
        :class:`~gtvmodel.UnsupportedError` without it); ``"auto"`` (default): ``"numba"`` when
        numba is installed and ``|E| d >= 10^6``
        (:data:`~gtvmodel.primal_dual.compiled.AUTO_NUMBA_ENTRIES`), else ``"numpy"``.  The
        same iterates to rounding; the choice is the result's ``kernel``.

    Raises
    ------
    ParameterError
        ``threads`` not an integer ``>= 1`` or ``kernel`` not one of the above (named).

    Examples
    --------
    >>> import gtvmodel as gm
    >>> gm.NumpyBackend(threads=2, kernel="numpy")
    NumpyBackend(threads=2, kernel='numpy')
    """

    name: ClassVar[str] = "numpy"
    threads: int = 1
    kernel: str = "auto"

    def __post_init__(self) -> None:
        object.__setattr__(self, "threads", check_int(self.threads, "threads", min_val=1,
                                                      where="NumpyBackend"))
        check_option(self.kernel, "kernel", KERNELS, where="NumpyBackend")

    def solve(self, model: ModelDeclaration, args: RunArguments) -> PrimalDualResult:
        """The loop of :class:`~gtvmodel.primal_dual.loop.Run` as it is."""
        t_start = time.perf_counter()
        opts = check_options(args)
        rule = make_step_rule(model, args.step)
        updates = NodeUpdates(model, args.prox, args.batch_cvxpy)
        run = Run(model, opts, rule, updates, args.warm_start, args.progress, t_start,
                  threads=self.threads, kernel=self.kernel, reorder=True)
        try:
            status = run.loop()
        finally:
            run.edges.close()
        return run.result(status)


BACKENDS["numpy"] = NumpyBackend

#: The keywords of ``solve_primal_dual`` before the ``backend=`` object (deprecated), with
#: their defaults then (a keyword at its default is ignored) and the backend that owns them.
LEGACY_OPTIONS: dict[str, tuple[Any, str]] = {
    "threads": (1, "numpy"), "kernel": ("auto", "numpy"), "device": (None, "torch"),
    "dtype": (None, "torch"), "client": (None, "dask"), "shards": (None, "dask")}


def resolve_backend(backend: Any, legacy: dict[str, Any], where: str = "solve_primal_dual"
                    ) -> Backend:
    """The backend object of ``backend`` (a :class:`Backend`, or a name of :data:`BACKENDS`
    for its default options), with the deprecated keywords ``legacy`` (those of
    :data:`LEGACY_OPTIONS`) as its options: ``device`` or ``dtype`` with ``backend="numpy"``
    mean ``"torch"`` (as before); a keyword of another backend raises :class:`ParameterError`
    naming it.  Warns ``DeprecationWarning`` when ``legacy`` is not empty."""
    unknown = sorted(set(legacy) - set(LEGACY_OPTIONS))
    if unknown:
        raise ParameterError(f"{where}: unexpected keyword argument(s) {', '.join(unknown)}")
    if legacy:
        many = len(legacy) > 1
        warnings.warn(f"{where}: the keyword{'s' if many else ''} {', '.join(sorted(legacy))} "
                      f"{'are' if many else 'is'} deprecated; pass backend=gm.NumpyBackend("
                      "threads=..., kernel=...), gm.TorchBackend(device=..., dtype=...) or "
                      "gm.DaskBackend(client=..., shards=...)", DeprecationWarning, stacklevel=3)
    given = {k: v for k, v in legacy.items() if v is not LEGACY_OPTIONS[k][0]
             and not (isinstance(v, (int, str)) and v == LEGACY_OPTIONS[k][0])}
    if isinstance(backend, Backend):
        if given:
            raise ParameterError(f"{where}: {', '.join(sorted(given))} given beside the backend "
                                 f"object {backend!r}: pass them to the backend")
        return backend
    if not isinstance(backend, str):
        raise ParameterError(f"{where}: backend must be a name ({', '.join(BACKENDS)}) or a "
                             f"backend object (gm.NumpyBackend(...), ...), got {backend!r}")
    check_option(backend, "backend", tuple(BACKENDS), where=where)
    if backend == "numpy" and ("device" in given or "dtype" in given):
        backend = "torch"
    cls = BACKENDS[backend]
    own = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    for key in given:
        if key not in own:
            owner = LEGACY_OPTIONS[key][1]
            names = " and ".join(k for k, (_, o) in LEGACY_OPTIONS.items() if o == owner)
            raise ParameterError(f"{where}: {names} are options of backend={owner!r}, not of "
                                 f"backend={backend!r} (got {key}={given[key]!r})")
    return cls(**given)
