"""Problem and solution files: a portable, pickle-free format (``docs/file_format.md``).

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
"quadform"}, "nodes": [labels], "losses": [{"kind": ..., "l1": .., "l2": .., "M": ..}, ...],
"constraints": [[{"kind": "box", "row": j} | {"kind": "nonneg"} | {"kind": "normball",
"radius": r, "p": p}, ...], ...]}``.  Loss kinds: ``zero``, ``squared``, ``logistic``,
``hinge``, ``absolute``, ``huber`` (``M``), ``quadratic``.

Node labels must be JSON strings or integers (not bools, floats or tuples); they are
restored exactly and their order is the node order.  Only library objects can be saved:
symbolic (CVXPY) losses and constraints raise :class:`~gtvmodel.errors.UnsupportedError`.

*Weights* and *flows* files: ``.npz`` (array ``weights`` / ``flows``, or a single array),
``.npy``, or text (``.txt``/``.csv``: one row per node or edge, comma or whitespace
separated).  Every read error is a :class:`~gtvmodel.errors.FileFormatError` naming the file.
"""

from __future__ import annotations

import json
import os
import zipfile
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np

from .constraints import Box, NonNeg, NormBall
from .errors import FileFormatError, GTVError, UnsupportedError
from .losses import (
    AbsoluteLoss,
    DataFitLoss,
    HingeLoss,
    HuberLoss,
    LogisticLoss,
    QuadraticLoss,
    SquaredLoss,
    SymbolicLoss,
    ZeroLoss,
)
from .penalties import Norm1, Norm2, NormInf, NormP, QuadForm, SquaredNorm2

if TYPE_CHECKING:
    from .model import GTVModel

__all__ = ["FORMAT_VERSION", "save_model", "load_model", "save_array", "load_array",
           "save_weights", "load_weights", "save_flows", "load_flows"]

#: Version of the problem-file format written by :func:`save_model`.
FORMAT_VERSION = 1
_FORMAT = "gtvmodel-problem"
_DATAFIT = {c.kind: c for c in (SquaredLoss, LogisticLoss, HingeLoss, AbsoluteLoss, HuberLoss)}
_PENALTIES = {"norm2": Norm2, "norm1": Norm1, "norminf": NormInf, "squarednorm2": SquaredNorm2}


# ===================================================================== problem files
def save_model(model: GTVModel, path: str | os.PathLike) -> None:
    """Write ``model`` (library losses, constraints and penalty only) to ``path`` (``.npz``)."""
    n, d = model.num_nodes, model.dim
    labels = []
    for v in model.nodes:
        if isinstance(v, bool) or not isinstance(v, (str, int, np.integer)):
            raise UnsupportedError(f"node label {v!r}: only str and int labels can be saved")
        labels.append(v if isinstance(v, str) else int(v))
    pen = model.penalty
    arrays: dict[str, np.ndarray] = {}
    if isinstance(pen, NormP):
        pdesc: dict[str, Any] = {"kind": "normp", "p": float(pen.p)}
    elif isinstance(pen, QuadForm):
        pdesc = {"kind": "quadform"}
        arrays["penalty_Q"] = pen.Q
    elif pen.kind in _PENALTIES and type(pen) is _PENALTIES[pen.kind]:
        pdesc = {"kind": pen.kind}
    else:
        raise UnsupportedError(f"penalty {pen!r} cannot be saved (not a library penalty)")
    losses, Xs, ys = [], [], []
    row_ptr = np.zeros(n + 1, dtype=np.int64)
    centres = np.zeros((n, d))
    for i in range(n):
        loss = model.loss_at(i)
        if isinstance(loss, SymbolicLoss):
            raise UnsupportedError(f"node {model.nodes[i]!r}: symbolic losses cannot be saved")
        desc: dict[str, Any] = {"kind": loss.kind, "l1": loss.l1, "l2": loss.l2}
        m = 0
        if isinstance(loss, DataFitLoss):
            Xs.append(loss.X)
            ys.append(loss.y)
            m = loss.m
            if isinstance(loss, HuberLoss):
                desc["M"] = loss.M
        elif isinstance(loss, QuadraticLoss):
            centres[i] = loss.a
        elif not isinstance(loss, ZeroLoss):
            raise UnsupportedError(f"node {model.nodes[i]!r}: {loss!r} cannot be saved")
        row_ptr[i + 1] = row_ptr[i] + m
        losses.append(desc)
    cons_desc, box_lo, box_hi = [], [], []
    for i in range(n):
        items = []
        for c in model.constraints_at(i):
            if isinstance(c, Box):
                lo, hi = c.bounds(d)
                items.append({"kind": "box", "row": len(box_lo)})
                box_lo.append(lo)
                box_hi.append(hi)
            elif isinstance(c, NonNeg):
                items.append({"kind": "nonneg"})
            elif isinstance(c, NormBall):
                items.append({"kind": "normball", "radius": c.radius, "p": _num(c.p)})
            else:
                raise UnsupportedError(f"node {model.nodes[i]!r}: constraint {c!r} cannot be "
                                       "saved (symbolic constraints have no file format)")
        cons_desc.append(items)
    header = {"format": _FORMAT, "version": FORMAT_VERSION, "n": n, "d": d,
              "lam": model.lam, "penalty": pdesc, "nodes": labels, "losses": losses,
              "constraints": cons_desc}
    arrays.update(
        header=np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8),
        edges=model.edges.astype(np.int64), edge_weights=model.edge_weights.astype(float),
        X=np.vstack(Xs) if Xs else np.zeros((0, d)),
        y=np.concatenate(ys) if ys else np.zeros(0), row_ptr=row_ptr, centres=centres,
        box_lo=np.array(box_lo).reshape(-1, d), box_hi=np.array(box_hi).reshape(-1, d),
    )
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)


def _num(x: float) -> float | str:
    """JSON-safe number (``inf`` as the string ``"inf"``)."""
    return "inf" if np.isinf(x) else float(x)


def _open_npz(path: str | os.PathLike, what: str) -> dict[str, np.ndarray]:
    if not os.path.exists(path):
        raise FileFormatError(f"{what} {os.fspath(path)!r}: no such file")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise FileFormatError(f"{what} {os.fspath(path)!r}: not a readable .npz archive "
                              f"({exc})") from None


def load_model(path: str | os.PathLike) -> GTVModel:
    """Read a problem file written by :func:`save_model` (or by any program following
    ``docs/file_format.md``).  Raises :class:`FileFormatError` naming what is wrong."""
    from .model import GTVModel

    where = f"problem file {os.fspath(path)!r}"
    z = _open_npz(path, "problem file")

    def arr(name: str) -> np.ndarray:
        if name not in z:
            raise FileFormatError(f"{where}: missing array {name!r}")
        return z[name]

    try:
        header = json.loads(bytes(arr("header").astype(np.uint8)).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, TypeError, ValueError) as exc:
        raise FileFormatError(f"{where}: the header is not UTF-8 JSON ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise FileFormatError(f"{where}: not a gtvmodel problem file (format "
                              f"{header.get('format') if isinstance(header, dict) else None!r})")
    version = header.get("version")
    if version != FORMAT_VERSION:
        raise FileFormatError(f"{where}: format version {version!r} is not supported "
                              f"(this gtvmodel reads version {FORMAT_VERSION})")
    try:
        n, d = int(header["n"]), int(header["d"])
        lam = float(header["lam"])
        labels = list(header["nodes"])
        losses = list(header["losses"])
        cons = list(header["constraints"])
        pdesc = dict(header["penalty"])
    except (KeyError, TypeError, ValueError) as exc:
        raise FileFormatError(f"{where}: incomplete header ({exc!r})") from None
    if n < 1 or d < 1 or len(labels) != n or len(losses) != n or len(cons) != n:
        raise FileFormatError(f"{where}: header lists {len(labels)} labels, {len(losses)} "
                              f"losses, {len(cons)} constraint lists for n = {n} (d = {d})")
    for v in labels:
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise FileFormatError(f"{where}: node label {v!r} is not a string or an integer")
    if len(set(labels)) != n:
        raise FileFormatError(f"{where}: node labels are not unique")

    def check(name: str, shape: tuple, kind: str = "f") -> np.ndarray:
        a = arr(name)
        if a.shape != shape or (kind == "f" and a.dtype.kind not in "fi") or (
                kind == "i" and a.dtype.kind not in "iu"):
            want = "float" if kind == "f" else "integer"
            raise FileFormatError(f"{where}: array {name!r} has shape {a.shape} and dtype "
                                  f"{a.dtype}; expected shape {shape} ({want})")
        if kind == "f" and name not in ("box_lo", "box_hi") and not np.isfinite(a).all():
            bad = tuple(int(k) for k in np.argwhere(~np.isfinite(a))[0])
            raise FileFormatError(f"{where}: array {name!r} contains NaN or inf (first at "
                                  f"index {bad})")
        if kind == "f" and np.isnan(a).any():
            raise FileFormatError(f"{where}: array {name!r} contains NaN")
        return a.astype(np.int64 if kind == "i" else float)

    edges = arr("edges")
    E = edges.shape[0] if edges.ndim == 2 else -1
    edges = check("edges", (max(E, 0), 2), "i")
    weights = check("edge_weights", (E,))
    row_ptr = check("row_ptr", (n + 1,), "i")
    M = int(row_ptr[-1])
    if row_ptr[0] != 0 or (np.diff(row_ptr) < 0).any():
        raise FileFormatError(f"{where}: row_ptr must start at 0 and be nondecreasing")
    X = check("X", (M, d))
    y = check("y", (M,))
    centres = check("centres", (n, d))
    nb = arr("box_lo").shape[0] if arr("box_lo").ndim == 2 else -1
    box_lo, box_hi = check("box_lo", (max(nb, 0), d)), check("box_hi", (max(nb, 0), d))
    if E and (edges.min() < 0 or edges.max() >= n):
        raise FileFormatError(f"{where}: edges refer to node positions outside 0..{n - 1}")
    G = nx.Graph()
    G.add_nodes_from(labels)
    for k, (a, b) in enumerate(edges):
        if G.has_edge(labels[a], labels[b]) or a == b:
            raise FileFormatError(f"{where}: edge {k} ({labels[a]!r}, {labels[b]!r}) is a "
                                  "duplicate or a self-loop")
        G.add_edge(labels[a], labels[b], weight=float(weights[k]))
    try:
        kind = pdesc.get("kind")
        if kind == "normp":
            pen = NormP(float(pdesc["p"]))
        elif kind == "quadform":
            pen = QuadForm(check("penalty_Q", (d, d)))
        elif kind in _PENALTIES:
            pen = _PENALTIES[kind]()
        else:
            raise FileFormatError(f"{where}: unknown penalty kind {kind!r}")
        model = GTVModel(G, d, penalty=pen, lam=lam)
        for i, desc in enumerate(losses):
            model.set_loss(labels[i], _loss_from(desc, i, X[row_ptr[i]:row_ptr[i + 1]],
                                                 y[row_ptr[i]:row_ptr[i + 1]], centres[i],
                                                 where, labels))
        for i, items in enumerate(cons):
            for c in items:
                model.add_constraint(labels[i], _constraint_from(c, box_lo, box_hi, where,
                                                                 labels[i]))
    except FileFormatError:
        raise
    except (GTVError, KeyError, TypeError, ValueError) as exc:
        raise FileFormatError(f"{where}: invalid content: {exc}") from None
    return model


def _loss_from(desc: dict, i: int, X: np.ndarray, y: np.ndarray, a: np.ndarray, where: str,
               labels: list) -> Any:
    if not isinstance(desc, dict):
        raise FileFormatError(f"{where}: loss of node {labels[i]!r} is not an object")
    kind = desc.get("kind")
    if kind not in _DATAFIT and kind not in ("zero", "quadratic"):
        raise FileFormatError(f"{where}: node {labels[i]!r} has unknown loss type {kind!r} "
                              f"(known: zero, quadratic, {', '.join(_DATAFIT)})")
    reg = {"l1": float(desc.get("l1", 0.0)), "l2": float(desc.get("l2", 0.0))}
    if kind in _DATAFIT:
        if X.shape[0] == 0:
            raise FileFormatError(f"{where}: node {labels[i]!r} has a {kind} loss but no rows "
                                  "in X (row_ptr)")
        if kind == "huber":
            return HuberLoss(X, y, float(desc.get("M", 1.0)), **reg)
        return _DATAFIT[kind](X, y, **reg)
    if X.shape[0]:
        raise FileFormatError(f"{where}: node {labels[i]!r} has a {kind!r} loss but owns "
                              f"{X.shape[0]} rows of X")
    if kind == "zero":
        return ZeroLoss(**reg)
    return QuadraticLoss(a, **reg)


def _constraint_from(c: dict, box_lo: np.ndarray, box_hi: np.ndarray, where: str,
                     label: Any) -> Any:
    kind = c.get("kind") if isinstance(c, dict) else None
    if kind == "box":
        j = int(c["row"])
        if not 0 <= j < box_lo.shape[0]:
            raise FileFormatError(f"{where}: node {label!r}: box row {j} is out of range")
        return Box(box_lo[j], box_hi[j])
    if kind == "nonneg":
        return NonNeg()
    if kind == "normball":
        return NormBall(float(c["radius"]), p=float(c.get("p", 2.0)))
    raise FileFormatError(f"{where}: node {label!r} has unknown constraint type {kind!r} "
                          "(known: box, nonneg, normball)")


# ===================================================================== weights / flows
def save_array(path: str | os.PathLike, array: Any, name: str) -> None:
    """Save one array: ``.npz`` (under ``name``), ``.npy``, or text (``.txt``/``.csv``)."""
    a = np.asarray(array, dtype=float)
    p = os.fspath(path)
    if p.endswith(".npz"):
        with open(p, "wb") as fh:
            np.savez(fh, **{name: a})
    elif p.endswith(".npy"):
        with open(p, "wb") as fh:
            np.save(fh, a, allow_pickle=False)
    else:
        np.savetxt(p, np.atleast_2d(a) if a.ndim else a[None], delimiter=",", fmt="%.17g")


def load_array(path: str | os.PathLike, name: str) -> np.ndarray:
    """Read an array written by :func:`save_array` or another program (see module doc)."""
    p = os.fspath(path)
    what = f"{name} file {p!r}"
    if not os.path.exists(p):
        raise FileFormatError(f"{what}: no such file")
    if p.endswith(".npz"):
        z = _open_npz(p, f"{name} file")
        if name in z:
            a = z[name]
        elif len(z) == 1:
            a = next(iter(z.values()))
        else:
            raise FileFormatError(f"{what}: missing array {name!r} (found {sorted(z)})")
    elif p.endswith(".npy"):
        try:
            a = np.load(p, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise FileFormatError(f"{what}: not a readable .npy file ({exc})") from None
    else:
        try:
            with open(p) as fh:
                text = fh.read()
            a = np.loadtxt(text.splitlines(), delimiter="," if "," in text else None, ndmin=2)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise FileFormatError(f"{what}: not a numeric text table ({exc})") from None
    if a.dtype.kind not in "fiu":
        raise FileFormatError(f"{what}: array has dtype {a.dtype}, expected numbers")
    a = a.astype(float)
    if not np.isfinite(a).all():
        bad = tuple(int(k) for k in np.argwhere(~np.isfinite(a))[0])
        raise FileFormatError(f"{what}: contains NaN or inf (first at index {bad})")
    return a


def _shaped(a: np.ndarray, rows: int, d: int, what: str, rowname: str) -> np.ndarray:
    if a.ndim == 1 and d == 1 and a.shape[0] == rows:
        a = a[:, None]
    if rows == 0 and a.size == 0:
        return np.zeros((0, d))
    if a.shape != (rows, d):
        raise FileFormatError(f"{what}: shape {a.shape}, expected ({rows}, {d}) "
                              f"({rowname} x dim)")
    return a


def save_weights(path: str | os.PathLike, weights: Any) -> None:
    """Save an ``(n, d)`` weight array (see :func:`save_array`)."""
    save_array(path, weights, "weights")


def load_weights(path: str | os.PathLike, model: GTVModel) -> np.ndarray:
    """Read weights for ``model``, checking the shape ``(n, d)``."""
    return _shaped(load_array(path, "weights"), model.num_nodes, model.dim,
                   f"weights file {os.fspath(path)!r}", "nodes")


def save_flows(path: str | os.PathLike, flows: Any) -> None:
    """Save an ``(|E|, d)`` flow array (see :func:`save_array`)."""
    save_array(path, flows, "flows")


def load_flows(path: str | os.PathLike, model: GTVModel) -> np.ndarray:
    """Read flows for ``model``, checking the shape ``(|E|, d)`` (edge order: ``model.edges``)."""
    return _shaped(load_array(path, "flows"), model.num_edges, model.dim,
                   f"flows file {os.fspath(path)!r}", "edges")
