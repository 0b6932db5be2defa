"""Shared input validation helpers (internal)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import DataError, ParameterError


def as_finite_array(value: Any, name: str, ndim: int | None = None, owner: str = "") -> np.ndarray:
    """Convert ``value`` to a float array, rejecting NaN/inf and a wrong number of dimensions."""
    prefix = f"{owner}: " if owner else ""
    try:
        arr = np.array(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{prefix}{name} is not numeric ({exc})") from None
    if ndim is not None and arr.ndim != ndim:
        raise DataError(f"{prefix}{name} must be {ndim}-dimensional, got shape {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        where = tuple(int(k) for k in np.argwhere(bad)[0])
        raise DataError(f"{prefix}{name} contains NaN or inf (first at index {where})")
    return arr


def as_nonneg_scalar(value: Any, name: str, owner: str = "", strict: bool = False) -> float:
    """A finite scalar ``>= 0`` (``> 0`` when ``strict``); :class:`ParameterError` otherwise."""
    prefix = f"{owner}: " if owner else ""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{prefix}{name} must be a real number, got {value!r}") from None
    if not np.isfinite(v) or v < 0 or (strict and v == 0):
        req = "> 0" if strict else ">= 0"
        raise ParameterError(f"{prefix}{name} must be finite and {req}, got {value!r}")
    return v


def as_norm_exponent(value: Any, owner: str, error: type[Exception] = DataError) -> float:
    """A norm exponent ``p`` in ``[1, inf]`` (``inf`` allowed) as a float; ``error`` otherwise.

    Only real numbers are accepted (Python or numpy ints and floats, 0-d arrays of them):
    strings such as ``"2"``, bools, complex numbers, ``None``, sequences, NaN and ``p < 1`` are
    rejected with a message naming ``owner``.
    """
    bad_type = isinstance(value, (bool, np.bool_, str, bytes)) or not isinstance(
        value, (int, float, np.integer, np.floating, np.ndarray))
    if isinstance(value, np.ndarray):
        bad_type = value.ndim != 0 or value.dtype.kind not in "iuf"
    if bad_type:
        raise error(f"{owner}: p must be a real number >= 1 (a norm exponent), got {value!r}")
    p = float(value)
    if np.isnan(p) or p < 1:
        raise error(f"{owner}: p must be >= 1 (a norm), got {value!r}")
    return p
