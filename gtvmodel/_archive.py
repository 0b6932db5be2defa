"""The strict, bounded reading of the ``.npz`` archives of the problem and solution files
(``docs/file_format.md``): NPY headers parsed without pickles, members' shapes, kinds and
sizes checked before they are inflated, and every low-level failure of a corrupt file turned
into one :class:`~gtvmodel.errors.FileFormatError` naming the file and member.  Private: used
by :mod:`gtvmodel._files`, the codec."""

from __future__ import annotations

import math
import os
import struct
import zipfile
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib import format as npformat

from .errors import FileFormatError
from .terms.spec import is_int, short_repr

__all__ = ["MAX_HEADER_BYTES", "SLACK", "FLOAT_KINDS", "INT_KINDS", "LOW_LEVEL", "fail",
           "error_text", "low", "npy_header", "kind_ok", "shape_check", "one_of",
           "from_bytes", "Archive"]


#: Largest JSON header accepted (bytes of UTF-8 text).
MAX_HEADER_BYTES = 1 << 26
#: Largest ``.npy`` header (the Python-literal dict at the start of a member) accepted.
MAX_NPY_HEADER = 1 << 16
#: Deflate cannot expand data by more than 1032:1; a member declaring more is corrupt.
MAX_DEFLATE_RATIO = 1032
SLACK = 1 << 12
FLOAT_KINDS = "fiu"   # float arrays: any real number type is accepted and converted
INT_KINDS = "iu"
#: Exceptions a corrupt file can raise from zipfile, zlib, numpy's NPY parser, JSON, decoding.
LOW_LEVEL = (OSError, EOFError, ValueError, TypeError, KeyError, IndexError, LookupError,
             ArithmeticError, MemoryError, RecursionError, RuntimeError, SyntaxError,
             NotImplementedError, AttributeError, UnicodeError, zipfile.BadZipFile,
             zlib.error, struct.error)


def fail(where: str, msg: str) -> FileFormatError:
    """The format error ``"{where}: {msg}"`` (``where``: the file, or file and member)."""
    return FileFormatError(f"{where}: {msg}")


def error_text(exc: BaseException) -> str:
    """An exception as one short line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def low(where: str, exc: BaseException) -> FileFormatError:
    """The format error of a low-level failure (one of :data:`LOW_LEVEL`) while reading."""
    return fail(where, f"unreadable ({error_text(exc)})")


def npy_header(fh: Any, where: str) -> tuple[tuple, bool, np.dtype]:
    """Parse an NPY header from ``fh`` (version 1.0 or 2.0, plain numbers, no pickles)."""
    try:
        version = npformat.read_magic(fh)
        if version not in ((1, 0), (2, 0)):
            raise fail(where, f"NPY format version {version} is not supported (1.0 and 2.0 "
                        "are)")
        read = (npformat.read_array_header_1_0 if version == (1, 0)
                else npformat.read_array_header_2_0)
        shape, fortran, dtype = read(fh, max_header_size=MAX_NPY_HEADER)
    except FileFormatError:
        raise
    except Exception as exc:  # noqa: BLE001 - numpy's header parser raises many kinds
        raise fail(where, f"not a valid NPY header ({error_text(exc)})") from None
    if not isinstance(shape, tuple) or any(not is_int(s) or s < 0 for s in shape):
        raise fail(where, f"bad NPY shape {short_repr(shape)}")
    if not isinstance(fortran, bool):
        raise fail(where, f"bad NPY fortran_order {fortran!r}")
    if (dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None
            or dtype.kind not in "biufc" or dtype.itemsize > 8):
        raise fail(where, f"dtype {dtype} is not a plain number type (object arrays, pickles "
                    "and records are refused)")
    return shape, fortran, dtype


def kind_ok(dtype: np.dtype, kinds: str) -> bool:
    """Whether a member's dtype is of the accepted kinds (unsigned: bytes only)."""
    return dtype.kind in kinds and (kinds != "u" or dtype.itemsize == 1)


def shape_check(want: tuple[int | None, ...], kinds: str, limit: int = 0
                 ) -> Callable[[tuple, np.dtype, str], None]:
    """A check of an NPY header: shape ``want`` (``None``: the one free dimension, at most
    ``limit``) and a dtype of one of ``kinds``."""

    def check(shape: tuple, dtype: np.dtype, where: str) -> None:
        ok = len(shape) == len(want) and all(
            s == w if w is not None else s <= limit for s, w in zip(shape, want, strict=True))
        if not ok or not kind_ok(dtype, kinds):
            exp = "(" + ", ".join("k" if w is None else str(w) for w in want)
            exp += ",)" if len(want) == 1 else ")"
            kind = {"u": "uint8", INT_KINDS: "integer"}.get(kinds, "real")
            free = f", k <= {limit}" if None in want else ""
            raise FileFormatError(f"{where} has shape {shape} and dtype {dtype}; expected "
                                  f"shape {exp}{free} ({kind})")

    return check


def one_of(shapes: list[tuple[int, ...]], expected: tuple[int, int] | None
            ) -> Callable[[tuple, np.dtype, str], None]:
    """A check of an NPY header for weights/flows: a real dtype and one of ``shapes`` (any
    vector or matrix when ``shapes`` is empty)."""

    def check(shape: tuple, dtype: np.dtype, where: str) -> None:
        if not kind_ok(dtype, FLOAT_KINDS):
            raise fail(where, f"array has dtype {dtype}, expected real numbers")
        if (shapes and shape not in shapes) or len(shape) > 2:
            raise fail(where, f"shape {shape}, expected {expected or 'a vector or a matrix'}")

    return check


def from_bytes(data: bytes, shape: tuple, fortran: bool, dtype: np.dtype, kinds: str,
               where: str) -> np.ndarray:
    """A member's raw bytes as an array of ``shape`` (C or Fortran order as its header
    says): int64 for integer kinds (values beyond int64 refused), bytes as they are for
    ``"u"``, float64 otherwise."""
    a = np.frombuffer(data, dtype=dtype)
    a = a.reshape(shape[::-1]).T if fortran else a.reshape(shape)
    if kinds == INT_KINDS:
        if dtype.kind == "u" and dtype.itemsize == 8 and a.size and a.max() > np.iinfo(
                np.int64).max:
            raise fail(where, "integer out of the int64 range")
        return a.astype(np.int64)
    if kinds == "u":
        return np.ascontiguousarray(a)
    return a.astype(np.float64)


class Archive:
    """A zip archive read defensively: only named members, each size checked before inflating."""

    def __init__(self, path: str, where: str):
        self.where = where
        if not os.path.exists(path):
            raise fail(where, "no such file")
        try:
            self.disk_size = os.path.getsize(path)
            self.zf = zipfile.ZipFile(path)
            infos = self.zf.infolist()
        except LOW_LEVEL as exc:
            raise fail(where, f"not a readable .npz archive ({error_text(exc)})") from None
        self.infos: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            if info.filename in self.infos:
                self.close()
                raise fail(where, f"member {short_repr(info.filename)} appears twice")
            self.infos[info.filename] = info

    def close(self) -> None:
        """Close the underlying zip file."""
        self.zf.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def has(self, name: str) -> bool:
        """Whether the archive has the member ``name`` (``name.npy``)."""
        return f"{name}.npy" in self.infos

    def read(self, name: str, check: Callable[[tuple, np.dtype, str], None], kinds: str,
             max_bytes: int | None = None) -> np.ndarray:
        """Array ``name`` (member ``name.npy``): sizes checked against the archive, its NPY
        header against ``check``, before any data is inflated."""
        member = f"{name}.npy"
        info = self.infos.get(member)
        if info is None:
            raise fail(self.where, f"missing array {name!r}")
        where = f"{self.where}: member {member!r}"
        if info.flag_bits & 0x1:
            raise fail(where, "encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise fail(where, f"compression method {info.compress_type} is not supported "
                        "(stored and deflated are)")
        size, csize = info.file_size, info.compress_size
        bound = csize if info.compress_type == zipfile.ZIP_STORED else (
            MAX_DEFLATE_RATIO * csize + SLACK)
        if csize > self.disk_size or size > bound:
            raise fail(where, f"declares {size} bytes from {csize} compressed bytes in a "
                        f"{self.disk_size}-byte file (corrupt)")
        if max_bytes is not None and size > max_bytes:
            raise fail(where, f"declares {size} bytes, more than the {max_bytes} allowed")
        try:
            with self.zf.open(info) as fh:
                shape, fortran, dtype = npy_header(fh, where)
                check(shape, dtype, f"{self.where}: array {name!r}")
                nbytes = math.prod(shape) * dtype.itemsize
                if fh.tell() + nbytes != size:
                    raise fail(where, f"{size} bytes do not hold an array of shape {shape} "
                                f"and dtype {dtype}")
                data = fh.read(nbytes)
                if len(data) != nbytes or fh.read(1):
                    raise fail(where, "truncated data")
            return from_bytes(data, shape, fortran, dtype, kinds, where)
        except FileFormatError:
            raise
        except LOW_LEVEL as exc:
            raise low(where, exc) from None

    def array(self, name: str, want: tuple[int | None, ...], kinds: str = FLOAT_KINDS,
              limit: int = 0, max_bytes: int | None = None) -> np.ndarray:
        """The member ``name`` checked for shape ``want`` and ``kinds``
        (:func:`shape_check`), read as :meth:`read` does."""
        return self.read(name, shape_check(want, kinds, limit), kinds, max_bytes)


# ===================================================================== strict header values
