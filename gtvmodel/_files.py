"""The codec of the portable, pickle-free problem and solution files (``docs/file_format.md``).

The public functions are in :mod:`gtvmodel.io` (which documents the format); this module holds
the reading and writing so that :class:`gtvmodel.GTVModel` can save and load itself without an
import cycle: it constructs models through the class it is given.

It has no per-type code: every term describes itself (``to_spec``/``from_spec``) and the
registries of :mod:`gtvmodel.terms.spec` map header kinds to classes.  The codec owns the
format's array layout (samples stacked with ``row_ptr``, ``centres``, box rows, ``penalty_*``
members) and the strict reading of the header; the archive is read by :mod:`gtvmodel._archive`.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable
from typing import Any

import networkx as nx
import numpy as np

from ._archive import (
    FLOAT_KINDS,
    INT_KINDS,
    LOW_LEVEL,
    MAX_HEADER_BYTES,
    SLACK,
    Archive,
    error_text,
    fail,
    from_bytes,
    npy_header,
    one_of,
)
from ._validate import check_bool
from .declaration import ModelDeclaration
from .errors import FileFormatError, GTVError, UnsupportedError
from .terms.spec import (
    CONSTRAINTS,
    LOSSES,
    PENALTIES,
    Registry,
    TermSpec,
    header_int,
    header_keys,
    header_real,
    is_int,
    short_repr,
)

__all__ = ["FORMAT_VERSION", "save_model", "read_model", "save_array", "load_array",
           "save_weights", "load_weights", "save_flows", "load_flows"]

#: Version of the problem-file format written by :func:`save_model`.
FORMAT_VERSION = 1
_FORMAT = "gtvmodel-problem"
#: The format's places for term arrays: a loss's samples (stacked into ``X``, ``y`` with
#: ``row_ptr``) or centre (a row of ``centres``); a constraint's bounds (a row of ``box_lo``,
#: ``box_hi``, referenced by the header field ``row``).  Penalty arrays are ``penalty_<name>``.
_SAMPLES = {"X": ("m", "d"), "y": ("m",)}
_CENTRE = {"a": ("d",)}
_BOUNDS = {"lo": ("d",), "hi": ("d",)}
_LOSS_PLACES = ({}, _SAMPLES, _CENTRE)
_CONSTRAINT_PLACES = ({}, _BOUNDS)


def _describe(registry: Registry, term: Any, node: Any, places: tuple[dict, ...] | None,
              checked: set[type]) -> TermSpec:
    """``term.to_spec()`` (:meth:`Registry.describe`), its arrays checked against the class's
    ``spec_arrays`` and the format's places for them (``None``: any arrays of shape ``d``);
    errors name ``node`` (``None`` for the penalty).  The class's registration, place and
    array names are checked on its first term (``checked`` holds the classes done)."""
    cls = type(term)
    if cls in checked:
        return term.to_spec()
    try:
        spec = registry.describe(term)
        _place(cls, places, UnsupportedError)
    except UnsupportedError as exc:
        raise _unsupported(node, exc) from None
    if spec.arrays.keys() != cls.spec_arrays.keys():
        raise _unsupported(node, f"{term!r}: to_spec gave the arrays {sorted(spec.arrays)}, "
                           f"spec_arrays declares {sorted(cls.spec_arrays)}")
    checked.add(cls)
    return spec


def _unsupported(node: Any, msg: Any) -> UnsupportedError:
    return UnsupportedError(msg if node is None else f"node {node!r}: {msg}")


def _place(cls: type, places: tuple[dict, ...] | None, error: Callable[[str], Exception]
           ) -> dict:
    """The place of format version 1 (one of ``places``) for the class's ``spec_arrays``
    (``places`` None: any arrays of shape ``d``, returned as declared)."""
    declared = cls.spec_arrays
    if places is None:
        if all(all(s == "d" for s in shape) for shape in declared.values()):
            return declared
    else:
        for place in places:
            if declared == place:
                return place
    raise error(f"{cls.__name__} (kind {cls.kind!r}) declares the arrays {declared}, which "
                f"format version {FORMAT_VERSION} has no place for")


def _fit(a: Any, shape: tuple[str, ...], d: int) -> np.ndarray:
    """A term's array as float64 of its declared shape in ``d`` (scalars broadcast, e.g. the
    bounds of ``Box(0, 1)``)."""
    return np.broadcast_to(np.asarray(a, dtype=float), tuple(d for _ in shape)).copy()


# ===================================================================== problem files
def save_model(model: ModelDeclaration, path: str | os.PathLike) -> None:
    """Write ``model`` (library losses, constraints and penalty only) to ``path`` (``.npz``):
    the JSON header (sizes, ``lambda``, node labels, every term's kind and parameters) and the
    arrays of the format (``docs/file_format.md``); an unsupported term or label raises
    :class:`UnsupportedError` naming the node."""
    d = model.dim
    labels = _saved_labels(model)
    checked: set[type] = set()
    pen = model.penalty
    pspec = _describe(PENALTIES, pen, None, None, checked)
    arrays = {f"penalty_{k}": _fit(a, type(pen).spec_arrays[k], d)
              for k, a in pspec.arrays.items()}
    losses, loss_arrays = _saved_losses(model, checked)
    cons_desc, box_lo, box_hi = _saved_constraints(model, checked)
    header = {"format": _FORMAT, "version": FORMAT_VERSION, "n": model.num_nodes, "d": d,
              "lam": model.lam, "penalty": pspec.header(), "nodes": labels, "losses": losses,
              "constraints": cons_desc}
    if len(model.shape) == 2:  # a matrix model (dim=(p, q)): the shape of w_i = vec(W_i)
        header["shape"] = list(model.shape)
    arrays.update(
        header=np.frombuffer(json.dumps(header, allow_nan=False).encode("utf-8"),
                             dtype=np.uint8),
        edges=model.edges.astype(np.int64), edge_weights=model.edge_weights.astype(float),
        **loss_arrays, box_lo=box_lo, box_hi=box_hi,
    )
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)


def _saved_labels(model: ModelDeclaration) -> list:
    """The node labels as JSON values (only str and int labels can be saved)."""
    labels = []
    for v in model.nodes:
        if isinstance(v, bool) or not isinstance(v, (str, int, np.integer)):
            raise UnsupportedError(f"node label {v!r}: only str and int labels can be saved")
        labels.append(v if isinstance(v, str) else int(v))
    return labels


def _saved_losses(model: ModelDeclaration, checked: set[type]
                  ) -> tuple[list[dict], dict[str, np.ndarray]]:
    """The header entries of the losses and their arrays: samples stacked into ``X``, ``y``
    with ``row_ptr``, centres as rows of ``centres``."""
    n, d = model.num_nodes, model.dim
    losses, Xs, ys = [], [], []
    row_ptr = np.zeros(n + 1, dtype=np.int64)
    centres = np.zeros((n, d))
    for i in range(n):
        spec = _describe(LOSSES, model.loss_at(i), model.nodes[i], _LOSS_PLACES, checked)
        m = 0
        if "X" in spec.arrays:
            Xs.append(spec.arrays["X"])
            ys.append(spec.arrays["y"])
            m = ys[-1].shape[0]
        elif "a" in spec.arrays:
            centres[i] = spec.arrays["a"]
        row_ptr[i + 1] = row_ptr[i] + m
        losses.append(spec.header())
    arrays = {"X": np.vstack(Xs) if Xs else np.zeros((0, d)),
              "y": np.concatenate(ys) if ys else np.zeros(0),
              "row_ptr": row_ptr, "centres": centres}
    return losses, arrays


def _saved_constraints(model: ModelDeclaration, checked: set[type]
                       ) -> tuple[list[list[dict]], np.ndarray, np.ndarray]:
    """The header entries of every node's constraints and the box rows ``box_lo``,
    ``box_hi`` (a constraint with bounds refers to its row by the field ``row``)."""
    d = model.dim
    cons_desc, box_lo, box_hi = [], [], []
    for i in range(model.num_nodes):
        items = []
        for c in model.constraints_at(i):
            spec = _describe(CONSTRAINTS, c, model.nodes[i], _CONSTRAINT_PLACES, checked)
            desc = spec.header()
            if spec.arrays:
                desc["row"] = len(box_lo)
                box_lo.append(_fit(spec.arrays["lo"], ("d",), d))
                box_hi.append(_fit(spec.arrays["hi"], ("d",), d))
            items.append(desc)
        cons_desc.append(items)
    return cons_desc, np.array(box_lo).reshape(-1, d), np.array(box_hi).reshape(-1, d)


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {short_repr(k)}")
        out[k] = v
    return out


def _json_constant(name: str) -> float:
    if name == "Infinity":  # written by gtvmodel < 0.x for NormP(inf); accepted, "inf" preferred
        return math.inf
    raise ValueError(f"{name} is not allowed in the header")


def _parse_header(z: Archive) -> dict:
    where = z.where
    raw = z.array("header", (None,), "u", limit=MAX_HEADER_BYTES,
                  max_bytes=MAX_HEADER_BYTES + SLACK)
    try:
        header = json.loads(raw.tobytes().decode("utf-8"), object_pairs_hook=_json_pairs,
                            parse_constant=_json_constant)
    except LOW_LEVEL as exc:
        raise fail(where, f"the header is not UTF-8 JSON ({error_text(exc)})") from None
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise fail(where, "not a gtvmodel problem file (format "
                    f"{short_repr(header.get('format') if isinstance(header, dict) else None)})")
    version = header.get("version")
    if not is_int(version) or version != FORMAT_VERSION:
        raise fail(where, f"format version {short_repr(version)} is not supported (this "
                    f"gtvmodel reads version {FORMAT_VERSION})")
    return header_keys(header, "(top level)", where, {"format", "version", "n", "d", "lam",
                                                  "penalty", "nodes", "losses", "constraints"},
                       {"shape"})


# ===================================================================== problem files
def read_model(path: str | os.PathLike, cls: type[ModelDeclaration]) -> Any:
    """Read a problem file written by :func:`save_model` (or by any program following
    ``docs/file_format.md``) into a new ``cls`` (a :class:`ModelDeclaration` subclass).

    The outcome is the identical model or a :class:`FileFormatError` naming the file (and the
    archive member) at fault; no other exception escapes.  Only the known members are read,
    each member's declared size is checked against the size the header implies before it is
    inflated, and the header's values are checked strictly (JSON integers where integers are
    due, finite JSON numbers, no unknown keys).
    """
    p = os.fspath(path)
    where = f"problem file {p!r}"
    try:
        with Archive(p, where) as z:
            return _load_model(z, where, cls)
    except FileFormatError:
        raise
    except (GTVError, *LOW_LEVEL) as exc:  # a constructor's refusal, or a defect found late
        raise fail(where, f"invalid content ({error_text(exc)})") from None


def _load_model(z: Archive, where: str, cls: type[ModelDeclaration]) -> Any:
    """The model of an open archive: the header (sizes, labels, the terms' kinds and the
    places of their arrays), then the arrays, each with a shape fixed by the header (and
    ``row_ptr`` / ``edges``) before its data are read, then the model through ``cls``."""
    header = _parse_header(z)
    n = header_int(header["n"], "n", where, 1)
    d = header_int(header["d"], "d", where, 1)
    dim = _header_shape(header, d, where)
    lam = header_real(header["lam"], "lam", where)
    labels = _header_labels(header, n, where)
    # terms: kinds (the registries), places of their arrays; parameters are checked by the
    # classes' from_spec once the arrays are read
    pen_cls, pen_params = _lookup(PENALTIES, header["penalty"], where, None)
    _place(pen_cls, None, lambda msg: fail(where, msg))
    loss_terms = _header_losses(header["losses"], labels, where)
    cons_terms = _header_constraints(header["constraints"], labels, where)
    n_box = sum(row is not None for items in cons_terms for _, _, row, _ in items)
    row_ptr, X, y, centres = _read_samples(z, loss_terms, labels, d, where)
    edges, weights = _read_edges(z, n, where)
    box_lo, box_hi = _read_boxes(z, n_box, d, where)
    pen_arrays = {name: _read_finite(z, f"penalty_{name}", (d,) * len(shape), where)
                  for name, shape in pen_cls.spec_arrays.items()}
    pen = pen_cls.from_spec(TermSpec(pen_cls.kind, pen_params, pen_arrays, where=where,
                                     at="penalty"))
    # the model
    G = nx.Graph()
    G.add_nodes_from(labels)
    G.add_edges_from((labels[a], labels[b], {"weight": w})
                     for (a, b), w in zip(edges.tolist(), weights.tolist(), strict=True))
    model = cls(G, dim, penalty=pen, lam=lam)
    if not np.array_equal(model.edges, edges):  # pragma: no cover - guaranteed by the checks
        raise fail(where, "edge order differs from the model's")
    _set_losses(model, loss_terms, labels, row_ptr, X, y, centres, where)
    _add_constraints(model, cons_terms, labels, box_lo, box_hi, where)
    return model


def _header_shape(header: dict, d: int, where: str) -> int | tuple[int, int]:
    """The model's ``dim``: ``d``, or the optional header field ``shape`` ``[p, q]`` of a
    matrix model (JSON integers ``>= 1`` with ``p q = d``)."""
    if "shape" not in header:
        return d
    shape = header["shape"]
    if not isinstance(shape, list) or len(shape) != 2:
        raise fail(where, f"header field shape must be a list [p, q] of two integers, got "
                    f"{short_repr(shape)}")
    p, q = (header_int(v, f"shape[{k}]", where, 1) for k, v in enumerate(shape))
    if p * q != d:
        raise fail(where, f"header field shape {[p, q]} does not match d = {d} (p q must be d)")
    return (p, q)


def _header_labels(header: dict, n: int, where: str) -> list:
    """The node labels of the header (unique str or int), after checking that ``nodes``,
    ``losses`` and ``constraints`` are lists of ``n`` entries."""
    labels = header["nodes"]
    for name in ("nodes", "losses", "constraints"):
        v = header[name]
        if not isinstance(v, list) or len(v) != n:
            got = f"{len(v)} entries" if isinstance(v, list) else repr(v)[:50]
            raise fail(where, f"header field {name} must be a list of n = {n} entries, got "
                        f"{got}")
    for v in labels:
        if not (is_int(v) or isinstance(v, str)):
            raise fail(where, f"node label {short_repr(v)} is not a string or an integer")
    if len(set(labels)) != n:
        raise fail(where, "node labels are not unique")
    return labels


def _header_losses(losses: list, labels: list, where: str) -> list[tuple[type, dict, dict]]:
    """``(class, parameters, place of its arrays)`` of every node's loss (the place is found
    once per class)."""
    loss_terms: list[tuple[type, dict, dict]] = []
    loss_places: dict[type, dict] = {}
    for i, desc in enumerate(losses):
        lcls, params = _lookup(LOSSES, desc, where, labels[i])
        place = loss_places.get(lcls)
        if place is None:
            place = loss_places[lcls] = _place(lcls, _LOSS_PLACES, lambda msg: fail(where, msg))
        loss_terms.append((lcls, params, place))
    return loss_terms


def _header_constraints(cons: list, labels: list, where: str
                        ) -> list[list[tuple[type, dict, int | None, str]]]:
    """Per node, ``(class, parameters, box row or None, position text)`` of its constraints
    (a class with bounds must have exactly the header fields ``kind`` and ``row``)."""
    cons_terms: list[list[tuple[type, dict, int | None, str]]] = []
    for i, items in enumerate(cons):
        if not isinstance(items, list):
            raise fail(where, f"constraints[{i}] (node {short_repr(labels[i])}) must be a list")
        node_items = []
        for j, c in enumerate(items):
            at = f"constraints[{i}][{j}] (node {short_repr(labels[i])})"
            ccls, params = _lookup(CONSTRAINTS, c, where, labels[i])
            row = None
            if _place(ccls, _CONSTRAINT_PLACES, lambda msg: fail(where, msg)):  # bounds
                header_keys(c, at, where, {"kind", "row"}, c.keys())
                row = header_int(params.pop("row"), f"{at}.row", where, 0)
            node_items.append((ccls, params, row, at))
        cons_terms.append(node_items)
    return cons_terms


def _read_finite(z: Archive, name: str, want: tuple[int | None, ...], where: str
                 ) -> np.ndarray:
    """A float member of shape ``want`` whose entries must all be finite."""
    a = z.array(name, want, FLOAT_KINDS)
    _finite(a, name, where)
    return a


def _read_samples(z: Archive, loss_terms: list[tuple[type, dict, dict]], labels: list,
                  d: int, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``row_ptr``, the stacked samples ``X``, ``y`` and the ``centres``; data-fit losses (the
    place ``_SAMPLES``) own rows of ``X``, other losses none."""
    n = len(labels)
    is_fit = np.fromiter((place is _SAMPLES for _, _, place in loss_terms), dtype=bool, count=n)
    row_ptr = z.array("row_ptr", (n + 1,), INT_KINDS)
    if row_ptr[0] != 0 or (np.diff(row_ptr) < 0).any():
        raise fail(where, "row_ptr must start at 0 and be nondecreasing")
    M = int(row_ptr[-1])
    counts = np.diff(row_ptr)
    bad = np.flatnonzero((counts > 0) != is_fit)
    if bad.size:
        i = int(bad[0])
        raise fail(where, f"node {short_repr(labels[i])} has a {loss_terms[i][0].kind!r} loss "
                    f"but owns {int(counts[i])} rows of X (row_ptr); data-fit losses (samples "
                    "X, y) need rows, other losses none")
    X = z.array("X", (M, d), FLOAT_KINDS)
    y = z.array("y", (M,), FLOAT_KINDS)
    centres = z.array("centres", (n, d), FLOAT_KINDS)
    for name, a in (("X", X), ("y", y), ("centres", centres)):
        _finite(a, name, where)
    return row_ptr, X, y, centres


def _read_edges(z: Archive, n: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """``edges`` (oriented ``e+ < e-``, sorted, without repeats, within ``0..n-1``) and their
    positive finite ``edge_weights``."""
    edges = z.array("edges", (None, 2), INT_KINDS, limit=n * (n - 1) // 2)
    E = edges.shape[0]
    weights = _read_finite(z, "edge_weights", (E,), where)
    if E:
        head, tail = edges[:, 0], edges[:, 1]
        if head.min() < 0 or tail.max() >= n:
            raise fail(where, f"edges refer to node positions outside 0..{n - 1}")
        k = np.flatnonzero(head >= tail)
        if k.size:
            raise fail(where, f"edge {int(k[0])} {tuple(edges[k[0]].tolist())} is a self-loop "
                        "or not oriented (e+ < e- is required)")
        key = head * n + tail
        k = np.flatnonzero(np.diff(key) <= 0)
        if k.size:
            raise fail(where, f"edges {int(k[0])} and {int(k[0]) + 1} are duplicates or out of "
                        "order (edges must be sorted by (e+, e-), without repeats)")
        k = np.flatnonzero(weights <= 0)
        if k.size:
            raise fail(where, f"edge weight {int(k[0])} is {weights[k[0]]!r}; edge weights "
                        "must be > 0")
    return edges, weights


def _read_boxes(z: Archive, n_box: int, d: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """The box rows ``box_lo``, ``box_hi`` (at most ``n_box``; no NaN, none empty)."""
    box_lo = z.array("box_lo", (None, d), FLOAT_KINDS, limit=n_box)
    box_hi = z.array("box_hi", (box_lo.shape[0], d), FLOAT_KINDS)
    if np.isnan(box_lo).any() or np.isnan(box_hi).any():
        raise fail(where, "box_lo/box_hi contain NaN")
    if np.isposinf(box_lo).any() or np.isneginf(box_hi).any() or (box_lo > box_hi).any():
        raise fail(where, "box_lo/box_hi describe an empty box (lo = +inf, hi = -inf or "
                    "lo > hi)")
    return box_lo, box_hi


def _set_losses(model: ModelDeclaration, loss_terms: list[tuple[type, dict, dict]],
                labels: list, row_ptr: np.ndarray, X: np.ndarray, y: np.ndarray,
                centres: np.ndarray, where: str) -> None:
    """Every node's loss from its class's ``from_spec`` with its arrays from their place."""
    for i, (lcls, params, place) in enumerate(loss_terms):
        if place is _SAMPLES:
            r0, r1 = int(row_ptr[i]), int(row_ptr[i + 1])
            arrays = {"X": X[r0:r1], "y": y[r0:r1]}
        else:
            arrays = {"a": centres[i]} if place is _CENTRE else {}
        spec = TermSpec(lcls.kind, params, arrays, where=where,
                        at=f"losses[{i}] (node {short_repr(labels[i])})")
        model.set_loss(labels[i], lcls.from_spec(spec))


def _add_constraints(model: ModelDeclaration,
                     cons_terms: list[list[tuple[type, dict, int | None, str]]], labels: list,
                     box_lo: np.ndarray, box_hi: np.ndarray, where: str) -> None:
    """Every node's constraints from their classes' ``from_spec`` (bounds from box rows)."""
    for i, items in enumerate(cons_terms):
        for ccls, params, row, at in items:
            arrays = {}
            if row is not None:
                if row >= box_lo.shape[0]:
                    raise fail(where, f"node {short_repr(labels[i])}: box row {row} is out of "
                                f"range (box_lo has {box_lo.shape[0]} rows)")
                arrays = {"lo": box_lo[row], "hi": box_hi[row]}
            spec = TermSpec(ccls.kind, params, arrays, where=where, at=at)
            model.add_constraint(labels[i], ccls.from_spec(spec))


def _lookup(registry: Registry, desc: Any, where: str, node: Any) -> tuple[type, dict]:
    """The class registered under ``desc["kind"]`` and the other fields of ``desc`` (the
    term of ``node``, None for the penalty)."""
    kind = desc.get("kind") if isinstance(desc, dict) else None
    cls = registry.get(kind)
    if cls is None:
        what = (f"unknown {registry.family} kind" if node is None else
                f"node {short_repr(node)} has unknown {registry.family} type")
        raise fail(where, f"{what} {short_repr(kind)} (known: {', '.join(registry.kinds())})")
    params = desc.copy()
    del params["kind"]
    return cls, params


def _finite(a: np.ndarray, name: str, where: str) -> None:
    bad = ~np.isfinite(a)
    if bad.any():
        idx = tuple(int(k) for k in np.argwhere(bad)[0])
        raise fail(where, f"array {name!r} contains NaN or inf (first at index {idx})")


# ===================================================================== weights / flows
def save_array(path: str | os.PathLike, array: Any, name: str) -> None:
    """Save one array: ``.npz`` (under ``name``), ``.npy``, or text (``.txt``/``.csv``; a
    vector is written as one column)."""
    a = np.asarray(array, dtype=float)
    p = os.fspath(path)
    if p.endswith(".npz"):
        with open(p, "wb") as fh:
            np.savez(fh, **{name: a})
    elif p.endswith(".npy"):
        with open(p, "wb") as fh:
            np.save(fh, a, allow_pickle=False)
    else:
        np.savetxt(p, a.reshape(-1, 1) if a.ndim < 2 else a, delimiter=",", fmt="%.17g")


def _allowed_shapes(shape: tuple[int, int] | None) -> list[tuple[int, ...]]:
    if shape is None:
        return []
    rows, d = shape
    out: list[tuple[int, ...]] = [(rows, d)]
    if d == 1:
        out.append((rows,))
    if rows == 0:
        out.append((0,))
    return out


def _read_npy_file(p: str, what: str, shape: tuple[int, int] | None) -> np.ndarray:
    size = os.path.getsize(p)
    with open(p, "rb") as fh:
        got, fortran, dtype = npy_header(fh, what)
        one_of(_allowed_shapes(shape), shape)(got, dtype, what)
        nbytes = math.prod(got) * dtype.itemsize
        if fh.tell() + nbytes != size:
            raise fail(what, f"{size} bytes do not hold an array of shape {got} and dtype "
                        f"{dtype} (truncated or trailing data)")
        data = fh.read(nbytes)
    if len(data) != nbytes:  # pragma: no cover - the file changed while being read
        raise fail(what, "truncated data")
    return from_bytes(data, got, fortran, dtype, FLOAT_KINDS, what)


def _read_npz_file(p: str, what: str, name: str, shape: tuple[int, int] | None
                   ) -> np.ndarray:
    with Archive(p, what) as z:
        if z.has(name):
            key = name
        elif len(z.infos) == 1 and next(iter(z.infos)).endswith(".npy"):
            key = next(iter(z.infos))[:-4]
        else:
            raise fail(what, f"missing array {name!r} (found {short_repr(sorted(z.infos))})")
        return z.read(key, one_of(_allowed_shapes(shape), shape), FLOAT_KINDS)


def _fields(line: str, delim: str | None) -> list[str]:
    """The fields of one text row (comment stripped, quotes and spaces around fields removed)."""
    return [f.strip().strip('"').strip("'").strip()
            for f in line.split("#", 1)[0].strip().split(delim)]


def _is_number(field: str) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return True


def _index_column(first: np.ndarray, labels: list | None) -> bool:
    """The first column (as text) is ``0..rows-1`` or the labels ``labels`` in order."""
    rows = first.shape[0]
    try:
        if np.array_equal(first.astype(float), np.arange(rows)):
            return True
    except ValueError:
        pass
    return labels is not None and len(labels) == rows and bool(
        np.all(first == np.array([str(x) for x in labels], dtype=str)))


def _read_text_file(p: str, what: str, shape: tuple[int, int] | None,
                    skip_header: bool | None = None, index_col: bool | None = None,
                    labels: list | None = None) -> np.ndarray:
    limit = None if shape is None else (1 << 20) + 256 * shape[0] * max(shape[1], 1)
    with open(p, "rb") as fh:
        raw = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(raw) > limit:
        raise fail(what, f"more than {limit} bytes, far more than a {shape} table of numbers "
                    "needs")
    text = raw.decode("utf-8")
    lines = [ln for ln in text.splitlines() if ln.split("#", 1)[0].strip()]
    delim = "," if "," in text else None
    if lines:
        head = _fields(lines[0], delim)
        # numeric, or a data row whose first field is the first label (an index column)
        numeric = all(_is_number(f) for f in head[1:]) and (
            _is_number(head[0]) or (bool(labels) and index_col is not False
                                    and head[0] == str(labels[0])))
        if skip_header is None:
            skip_header = not numeric
        elif not skip_header and not numeric:
            raise fail(what, f"the first row {short_repr(head)} is not numeric (a header "
                        "row? skip_header=True, --skip-header)")
        if skip_header:
            lines = lines[1:]
    if not lines:
        if shape is not None and shape[0] == 0:
            return np.zeros((0, shape[1]))
        raise fail(what, "no numbers in the file")
    ncols = len(_fields(lines[0], delim))
    if index_col is None:  # auto: one extra column holding 0..rows-1 or the labels
        index_col = (shape is not None and ncols == shape[1] + 1 and len(lines) == shape[0]
                     and _index_column(np.loadtxt(lines, delimiter=delim, usecols=0, ndmin=1,
                                                  dtype=str, quotechar='"'), labels))
    if index_col and ncols < 2:
        raise fail(what, f"index_col: {ncols} column(s), no data column after the index")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = np.loadtxt(lines, delimiter=delim, ndmin=2, dtype=float,
                       usecols=range(1, ncols) if index_col else None)
    if shape is not None and shape[1] == 1 and a.shape == (1, shape[0]):
        a = a.T  # d = 1 written as a single row (as gtvmodel's save_array did before)
    if shape is not None and a.shape != shape and a.ndim == 2:
        rows, d = shape
        hint = ("" if a.shape != (rows, d + 1) or index_col else
                "; one extra column: if the first is an index (not 0..rows-1 or the labels), "
                "index_col=True, --index-col")
        hint += ("" if a.shape != (rows + 1, d) else
                 "; one extra row: if the first is a header, skip_header=True, --skip-header")
        if hint:
            raise fail(what, f"shape {a.shape}, expected {shape}{hint}")
    return a


def load_array(path: str | os.PathLike, name: str,
               shape: tuple[int, int] | None = None, *, skip_header: bool | None = None,
               index_col: bool | None = None, labels: list | None = None) -> np.ndarray:
    """Read a float array written by :func:`save_array` or another program (module doc).

    ``shape``, if given, is the expected ``(rows, d)``: NPY shapes are checked before any data
    is read, and text files far larger than such a table are refused unread.  The result is
    finite.  Every failure is a :class:`FileFormatError` naming the file.

    Text files (``.csv``, ``.txt``) from other tools may start with a header row and an index
    column.  ``skip_header``: ``None`` (auto) drops a first row that is not numeric, ``True``
    always drops the first row, ``False`` never (a non-numeric first row is an error).
    ``index_col``: ``None`` (auto) drops a first column when the file has one column more than
    ``shape`` and that column is ``0..rows-1`` or ``labels`` (e.g. the node labels) in order;
    ``True`` always drops the first column, ``False`` never.
    """
    for flag, value in (("skip_header", skip_header), ("index_col", index_col)):
        if value is not None:
            check_bool(value, flag, where="load_array")
    p = os.fspath(path)
    what = f"{name} file {p!r}"
    if not os.path.exists(p):
        raise FileFormatError(f"{what}: no such file")
    try:
        if p.endswith(".npz"):
            a = _read_npz_file(p, what, name, shape)
        elif p.endswith(".npy"):
            a = _read_npy_file(p, what, shape)
        else:
            a = _read_text_file(p, what, shape, skip_header, index_col, labels)
    except FileFormatError:
        raise
    except (*LOW_LEVEL, Warning) as exc:
        kind = {".npz": "a readable .npz archive", ".npy": "a readable .npy file"}.get(
            os.path.splitext(p)[1], "a numeric text table")
        raise fail(what, f"not {kind} ({error_text(exc)})") from None
    _finite(a, "(data)", what)
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
    """Save the weights ``w`` (``(n, d)``, row ``i`` is ``w_i`` in node order; see
    :func:`save_array`)."""
    save_array(path, weights, "weights")


def load_weights(path: str | os.PathLike, model: ModelDeclaration, *,
                 skip_header: bool | None = None, index_col: bool | None = None) -> np.ndarray:
    """Read weights ``w`` for ``model``, checking the shape ``(n, d)`` and finiteness (text
    files: a header row and an index column of ``0..n-1`` or the node labels are recognized,
    :func:`load_array`)."""
    shape = (model.num_nodes, model.dim)
    a = load_array(path, "weights", shape, skip_header=skip_header, index_col=index_col,
                   labels=list(model.nodes))
    return _shaped(a, *shape,
                   f"weights file {os.fspath(path)!r}", "nodes")


def save_flows(path: str | os.PathLike, flows: Any) -> None:
    """Save the edge flows ``u`` of the dual (24) (``(|E|, d)``, row ``e`` is ``u_e`` in the
    edge order ``model.edges``; see :func:`save_array`)."""
    save_array(path, flows, "flows")


def load_flows(path: str | os.PathLike, model: ModelDeclaration, *,
               skip_header: bool | None = None, index_col: bool | None = None) -> np.ndarray:
    """Read edge flows ``u`` for ``model``, checking the shape ``(|E|, d)`` (edge order:
    ``model.edges``) and finiteness (text files: a header row and an index column of
    ``0..|E|-1`` are recognized, :func:`load_array`)."""
    shape = (model.num_edges, model.dim)
    a = load_array(path, "flows", shape, skip_header=skip_header, index_col=index_col)
    return _shaped(a, *shape,
                   f"flows file {os.fspath(path)!r}", "edges")
