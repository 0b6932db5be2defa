"""Problem and solution files: a portable, pickle-free format (``docs/file_format.md``).

The codec is in :mod:`gtvmodel._files`; this module is the public interface.

A *problem file* is one NumPy ``.npz`` archive (a zip of ``.npy`` arrays, readable from any
language with an NPY reader) holding a UTF-8 JSON header and the numeric arrays:

=================  ==================  =====================================================
array              shape / dtype       content
=================  ==================  =====================================================
``header``         (k,) uint8          UTF-8 JSON: format name, version, ``n``, ``d``,
                                       ``lam``, penalty, node labels, per-node loss and
                                       constraint descriptions (below)
``edges``          (E, 2) int64        oriented edges ``(e+, e-)`` as node positions
``edge_weights``   (E,) float64        ``A_e > 0``
``X``, ``y``       (M, d), (M,)        stacked samples of the data-fit losses
``row_ptr``        (n + 1,) int64      node ``i`` owns rows ``row_ptr[i]:row_ptr[i+1]``
``centres``        (n, d) float64      ``a_i`` of quadratic losses (zero rows elsewhere)
``box_lo/box_hi``  (B, d) float64      box bounds (``+-inf`` allowed), referenced by row
``penalty_Q``      (d, d) float64      only for ``QuadForm``
=================  ==================  =====================================================

Header JSON: ``{"format": "gtvmodel-problem", "version": 1, "n", "d", "lam",
"penalty": {"kind": "norm2" | "norm1" | "norminf" | "normp" (with "p") | "squarednorm2" |
"quadform" | "nuclear" (with "p", "q")}, "nodes": [labels], "losses": [{"kind": ...,
"l1": .., "l2": .., "M": ..}, ...],
"constraints": [[{"kind": "box", "row": j} | {"kind": "nonneg"} | {"kind": "normball",
"radius": r, "p": p}, ...], ...]}``.  Loss kinds: ``zero``, ``squared``, ``logistic``,
``hinge``, ``absolute``, ``huber`` (``M``), ``quadratic``.  A model of matrix parameters
(``dim=(p, q)``) adds ``"shape": [p, q]`` (``p q = d``; docs/matrix_parameters.md).

Node labels must be JSON strings or integers (not bools, floats or tuples); they are
restored exactly and their order is the node order.  Only library objects can be saved:
symbolic (CVXPY) losses and constraints raise :class:`~gtvmodel.errors.UnsupportedError`.

*Weights* and *flows* files: ``.npz`` (array ``weights`` / ``flows``, or a single array),
``.npy``, or text (``.txt``/``.csv``: one row per node or edge, comma or whitespace
separated).

Reading is strict and bounded (``docs/file_format.md``, "Reading is strict"): the archive is
opened with :mod:`zipfile` directly, only the known members are read (unknown members are never
decompressed), each member's declared size must match exactly the NPY header's shape, which
must match the shape the JSON header (``n``, ``d``), ``row_ptr`` (``M``) and the box
references imply, before any data is inflated; NPY headers are parsed without pickles (plain
number dtypes only); JSON values must have their exact types (JSON integers for integers,
finite JSON numbers for reals, no unknown keys); edges must be oriented, sorted and unique.
The outcome of reading is the identical model or a :class:`~gtvmodel.errors.FileFormatError`
naming the file (and the archive member) -- no other exception escapes.
"""

from __future__ import annotations

import os

from ._files import (
    FORMAT_VERSION,
    load_array,
    load_flows,
    load_weights,
    save_array,
    save_flows,
    save_model,
    save_weights,
)
from .model import GTVModel

__all__ = ["FORMAT_VERSION", "save_model", "load_model", "save_array", "load_array",
           "save_weights", "load_weights", "save_flows", "load_flows"]


def load_model(path: str | os.PathLike) -> GTVModel:
    """Read a problem file written by :func:`save_model` (or by any program following
    ``docs/file_format.md``) into a :class:`~gtvmodel.GTVModel`.

    The outcome is the identical model or a :class:`~gtvmodel.errors.FileFormatError` naming
    the file (and the archive member) at fault; no other exception escapes.

    Examples
    --------
    A round trip through :func:`save_model` (the GTV problem (16): graph, ``A_e``, ``lambda``,
    ``phi``, the losses ``L_i`` and constraints ``C_i``) in a temporary directory:

    >>> import os, tempfile
    >>> import networkx as nx, numpy as np, gtvmodel as gm
    >>> from gtvmodel import io
    >>> model = gm.GTVModel(nx.path_graph(3), dim=2, penalty=gm.Norm1(), lam=0.5)
    >>> model.set_loss(0, gm.SquaredLoss([[1.0, 0.0], [0.0, 1.0]], [1.0, 2.0]))
    >>> model.add_constraint(2, gm.Box(-1.0, 1.0))
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "problem.npz")
    ...     io.save_model(model, path)
    ...     again = io.load_model(path)
    >>> again
    GTVModel(n=3, |E|=2, d=2, penalty=Norm1(), lam=0.5)
    >>> W = np.ones((3, 2))
    >>> again.objective(W) == model.objective(W), again.constraints(2)
    (True, [Box(lo=[-1.0, -1.0], hi=[1.0, 1.0])])
    """
    return GTVModel.load(path)
