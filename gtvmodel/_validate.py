"""Shared input validation helpers (internal).

Every public function of gtvmodel validates its arguments with these helpers, so that one rule
is written once: a scalar with bounds (:func:`check_scalar`, :func:`check_int`), an option
string (:func:`check_option`), a finite array (:func:`as_finite_array`) or vector
(:func:`check_vector`), a stacked per-node or
per-edge array ``(rows, d)`` (:func:`check_rows`, accepting ``(rows,)`` when ``d = 1``) and a
symbolic loss or constraint stated in its node's own variable ``w_i``
(:func:`check_own_variable`).  Messages name the function (``where``), the argument, the
requirement and the value; the exception class is the one each call site documents
(:class:`ParameterError` for options and scalar parameters, :class:`DataError` for data).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import ConstraintError, DataError, GTVError, LossError, ParameterError

if TYPE_CHECKING:  # annotations only: the command line's --help must not load CVXPY
    import cvxpy as cp

_BOUNDARIES = ("both", "left", "right", "neither")
#: Types converted by ``float()`` exactly and without ABC checks (bool excluded).
PLAIN_REALS = frozenset({float, int, np.float64, np.float32, np.int64, np.int32})


def _prefix(where: str | None) -> str:
    return f"{where}: " if where else ""



def _as_float(x: Any) -> float:
    try:
        return float(x)
    except OverflowError:  # an integer beyond double precision: not finite
        return math.inf if x > 0 else -math.inf


def check_scalar(x: Any, name: str, *, target_type: type = float, min_val: float | None = None,
                 max_val: float | None = None, include_boundaries: str = "both",
                 finite: bool = True, where: str | None = None,
                 error: type[GTVError] = ParameterError) -> Any:
    """A real scalar ``x`` checked against its bounds, returned as ``target_type``.

    ``target_type=float`` accepts Python and numpy reals (and 0-d real arrays);
    ``target_type=int`` accepts Python and numpy integers only.  Bools, strings, complex
    numbers and ``None`` are rejected for both.  ``min_val``/``max_val`` bound ``x``;
    ``include_boundaries`` says which bounds are attained (``"both"``, ``"left"``: only
    ``min_val``, ``"right"``: only ``max_val``, ``"neither"``).  ``finite`` rejects
    ``+-inf``; NaN is always rejected.  Raises ``error`` (default :class:`ParameterError`)
    with a message ``"{where}: {name} must be ..., got {x!r}"``.
    """
    if include_boundaries not in _BOUNDARIES:
        raise ValueError(f"include_boundaries must be one of {_BOUNDARIES}")
    pre = _prefix(where)
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x[()]
    v: Any
    if target_type is not int and type(x) in PLAIN_REALS:  # the common case, no ABC checks
        v = _as_float(x)
    elif target_type is int:
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
            raise error(f"{pre}{name} must be an integer, got {x!r}")
        v = int(x)
    else:
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
            raise error(f"{pre}{name} must be a real number, got {x!r}")
        v = _as_float(x)
    lo_in = include_boundaries in ("both", "left")
    hi_in = include_boundaries in ("both", "right")
    ok = not (isinstance(v, float) and (math.isnan(v) or (finite and math.isinf(v))))
    if min_val is not None:
        ok = ok and (v >= min_val if lo_in else v > min_val)
    if max_val is not None:
        ok = ok and (v <= max_val if hi_in else v < max_val)
    if not ok:
        if min_val is not None and max_val is not None:
            req = (f"in {'[' if lo_in else '('}{min_val:g}, {max_val:g}{']' if hi_in else ')'}")
        elif min_val is not None:
            req = f"{'>=' if lo_in else '>'} {min_val:g}"
        elif max_val is not None:
            req = f"{'<=' if hi_in else '<'} {max_val:g}"
        else:
            req = ""
        req = " and ".join(r for r in ("finite" if finite else "", req) if r) or "a number"
        kind = "an integer " if target_type is int else ""
        raise error(f"{pre}{name} must be {kind}{req}, got {x!r}")
    return v


def check_int(x: Any, name: str, *, min_val: int | None = None, max_val: int | None = None,
              where: str | None = None, error: type[GTVError] = ParameterError) -> int:
    """An integer ``x`` (Python or numpy, never a bool) in ``[min_val, max_val]``."""
    return check_scalar(x, name, target_type=int, min_val=min_val, max_val=max_val,
                        where=where, error=error)


def check_option(value: Any, name: str, options: Collection[Any], where: str | None = None,
                 error: type[GTVError] = ParameterError) -> Any:
    """``value`` if it is one of ``options``; ``error`` listing the options otherwise."""
    try:
        ok = value in options
    except TypeError:  # an unhashable value tested against a dict or set
        ok = False
    if not ok or isinstance(value, (bool, np.bool_)):
        listed = ", ".join(repr(o) for o in options)
        raise error(f"{_prefix(where)}{name} must be one of {listed}, got {value!r}")
    return value


def check_bool(value: Any, name: str, where: str | None = None) -> bool:
    """A Python or numpy bool; :class:`ParameterError` otherwise."""
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"{_prefix(where)}{name} must be True or False, got {value!r}")
    return bool(value)


def as_finite_array(value: Any, name: str, ndim: int | None = None, owner: str = "") -> np.ndarray:
    """Convert ``value`` to a float array, rejecting NaN/inf and a wrong number of dimensions."""
    prefix = _prefix(owner)
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


def check_vector(value: Any, name: str, size: int | None = None,
                 where: str | None = None) -> np.ndarray:
    """A finite float vector of shape ``(size,)`` (any length when ``size`` is None), e.g. a
    dual vector ``s_i`` or per-node steps ``tau``; :class:`DataError` naming ``name``."""
    v = as_finite_array(value, name, ndim=1, owner=where or "")
    if size is not None and v.shape != (size,):
        raise DataError(f"{_prefix(where)}{name} must have shape ({size},), got {v.shape}")
    return v


def check_binary_labels(y: np.ndarray, name: str = "y", where: str | None = None) -> np.ndarray:
    """Binary classification labels as ``-1.0``/``+1.0``, converted once.

    Accepted label sets: ``{-1, +1}``, ``{0, 1}`` (``0 -> -1``) and booleans (``False -> -1``;
    a float array of booleans is the ``{0, 1}`` set).  The rule is decided by the values present:
    a ``-1`` among them means ``{-1, +1}`` (a ``0`` is then an error), otherwise ``{0, 1}``
    (a single class is fine: all ``1`` are ``+1``, all ``0`` are ``-1``).  Any other value raises
    :class:`DataError` naming the first offending entry and the values found.

    Examples
    --------
    >>> check_binary_labels(np.array([0.0, 1.0, 1.0])).tolist()
    [-1.0, 1.0, 1.0]
    >>> check_binary_labels(np.array([0.0, 1.0, 2.0]), where="HingeLoss")
    Traceback (most recent call last):
    ...
    gtvmodel.errors.DataError: HingeLoss: classification labels must be -1 or +1; y[2] = 2: ...
    """
    y = np.asarray(y, dtype=float)
    negative = bool((y == -1.0).any())
    ok = (y == 1.0) | (y == (-1.0 if negative else 0.0))
    if not ok.all():
        k = int(np.flatnonzero(~ok)[0])
        found = ", ".join(f"{v:g}" for v in np.unique(y)[:8])
        more = ", ..." if np.unique(y).size > 8 else ""
        raise DataError(
            f"{_prefix(where)}classification labels must be -1 or +1; {name}[{k}] = {y[k]:g}: "
            f"{name} holds the values {{{found}{more}}}, not one of the accepted label sets "
            "{-1, +1}, {0, 1} (0 becomes -1) or booleans")
    return np.where(y == 1.0, 1.0, -1.0)


def check_rows(array: Any, name: str, rows: int, d: int, where: str | None = None,
               rows_label: str = "rows") -> np.ndarray:
    """A finite float array of shape ``(rows, d)``: one row per node (``W``, ``(n, d)``) or per
    edge (``u``, ``(|E|, d)``); ``(rows,)`` is accepted when ``d = 1``.  :class:`DataError`
    naming ``name`` and the expected shape otherwise."""
    A = as_finite_array(array, name, owner=where or "")
    if A.ndim == 1 and d == 1 and A.shape[0] == rows:
        A = A[:, None]
    if A.shape != (rows, d):
        raise DataError(f"{_prefix(where)}{name} must have shape ({rows}, {d}) ({rows_label} x "
                        f"dim), got {A.shape}")
    return A


def check_own_variable(item: cp.Expression | cp.Constraint, variable: cp.Variable,
                       node: Any = None) -> None:
    """A symbolic loss ``L_i`` (a CVXPY expression) or constraint (``w_i in C_i``) must be
    stated in the node's own variable ``w_i`` only; :class:`LossError`, resp.
    :class:`ConstraintError`, naming the node and the foreign variables otherwise."""
    import cvxpy  # loaded already (item is a CVXPY object); not at the top, see above

    is_con = isinstance(item, cvxpy.constraints.constraint.Constraint)
    error, what = (ConstraintError, "constraint") if is_con else (LossError, "loss")
    foreign = [v for v in item.variables() if v.id != variable.id]
    if foreign:
        where = f"node {node!r}" if node is not None else f"symbolic {what}"
        names = ", ".join(sorted({v.name() for v in foreign}))
        raise error(f"{where}: {what} may only use the node's own variable {variable.name()}, "
                    f"but it also uses {names}")
