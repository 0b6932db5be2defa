"""How a term describes itself in a problem file (``docs/file_format.md``).

A library loss ``L_i``, penalty ``phi`` or constraint ``C_i`` of (16) is saved through two hooks
on its class:

* ``term.to_spec() -> TermSpec``: its ``kind``, its header parameters (JSON scalars, e.g.
  Huber's ``M``, a norm exponent ``p``, the regularizer weights ``eta_i = l1``,
  ``kappa_i = l2``) and its numeric arrays by name (e.g. the samples ``X``, ``y``);
* ``cls.from_spec(spec) -> term``: the identical object, every header value checked strictly
  (:meth:`TermSpec.check_keys`, :meth:`TermSpec.real`, :meth:`TermSpec.exponent`) and the
  arrays passed to the class's own constructor, which validates them.

A class states the arrays it takes, with their shapes in the symbols ``m`` (its samples) and
``d`` (the dimension), in ``spec_arrays``: the codec reads them (and only them) with those
shapes checked before any data is inflated.  The codec owns the format's array layout (samples
stacked into ``X``, ``y``, ``row_ptr``; centres into ``centres``; box bounds into rows of
``box_lo``/``box_hi``; penalty arrays as ``penalty_<name>``); the terms own their parameters.

Registries map each family's ``kind`` strings to classes (:data:`LOSSES`, :data:`PENALTIES`,
:data:`CONSTRAINTS`).  The classes fill them themselves: a subclass of ``Loss``, ``Penalty`` or
``Constraint`` that sets ``kind`` in its body and has a ``from_spec`` (its own or a library
parent's) is registered when it is defined (``__init_subclass__``).  Symbolic terms have no
``from_spec`` and are not registered; their ``to_spec`` raises :class:`UnsupportedError`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, NamedTuple

import numpy as np

from ..errors import (
    ConstraintError,
    FileFormatError,
    GTVError,
    LossError,
    PenaltyError,
    UnsupportedError,
)

__all__ = ["TermSpec", "Registry", "ParameterFree", "LOSSES", "PENALTIES", "CONSTRAINTS",
           "json_number", "short_repr", "is_int", "is_real", "header_int", "header_real",
           "header_exponent", "header_keys"]


# ===================================================================== strict header values
def short_repr(v: Any) -> str:
    """``repr`` shortened for messages (labels and header values can be long)."""
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _fail(where: str, msg: str) -> FileFormatError:
    return FileFormatError(f"{where}: {msg}")


def is_int(v: Any) -> bool:
    """A JSON integer (not a bool)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_real(v: Any) -> bool:
    """A JSON number (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def json_number(x: float) -> float | str:
    """JSON-safe number (``inf`` as the string ``"inf"``)."""
    return "inf" if np.isinf(x) else float(x)


def header_int(v: Any, name: str, where: str, lo: int) -> int:
    """Header field ``name``: a JSON integer ``>= lo``."""
    if not is_int(v) or v < lo:
        raise _fail(where, f"header field {name} must be an integer >= {lo} (a JSON integer, "
                    f"not a float, string or bool), got {short_repr(v)}")
    return v


def _real_ok(v: Any, strict: bool) -> bool:
    return is_real(v) and math.isfinite(v) and v >= 0 and not (strict and v == 0)


def header_real(v: Any, name: str, where: str, strict: bool = False) -> float:
    """Header field ``name``: a finite JSON number ``>= 0`` (``> 0`` if ``strict``)."""
    if not _real_ok(v, strict):
        req = "> 0" if strict else ">= 0"
        raise _fail(where, f"header field {name} must be a finite JSON number {req} (not a "
                    f"string or bool), got {short_repr(v)}")
    return float(v)


def header_exponent(v: Any, name: str, where: str) -> float:
    """Header field ``name``: a norm exponent, a JSON number ``>= 1`` or ``"inf"``."""
    if v == "inf" and isinstance(v, str):
        return math.inf
    if not is_real(v) or math.isnan(v) or v < 1:
        raise _fail(where, f"header field {name} must be a JSON number >= 1 or \"inf\", "
                    f"got {short_repr(v)}")
    return float(v)


def header_keys(obj: Any, name: str, where: str, required: Iterable[str],
                optional: Iterable[str] = ()) -> dict:
    """Header field ``name``: a JSON object with all ``required`` keys and no key outside
    ``required | optional``."""
    required, optional = set(required), set(optional)
    if not isinstance(obj, dict):
        raise _fail(where, f"header field {name} must be a JSON object, got {short_repr(obj)}")
    missing = required - obj.keys()
    unknown = obj.keys() - required - optional
    if missing or unknown:
        what = [f"missing {sorted(missing)}"] if missing else []
        what += [f"unknown {sorted(unknown)}"] if unknown else []
        raise _fail(where, f"header field {name}: {' and '.join(what)} keys (allowed: "
                    f"{sorted(required | optional)})")
    return obj


# ===================================================================== the spec
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class TermSpec(NamedTuple):
    """A term's description: ``kind``, header ``params`` (JSON scalars; ``inf`` exponents as
    ``"inf"``) and numeric ``arrays`` by name.

    ``where`` (the file) and ``at`` (the header path, e.g. ``losses[3] (node 'a')``, or any
    object whose ``str`` is that path, built only for a message) name the source in the
    :class:`FileFormatError` of the readers below.  (A named tuple: immutable and cheap, one
    per node is built when a file is written or read.)
    """

    kind: str
    params: Mapping[str, Any] = _EMPTY
    arrays: Mapping[str, np.ndarray] = _EMPTY
    where: str = "term spec"
    at: Any = ""

    def header(self) -> dict[str, Any]:
        """The header object ``{"kind": kind, **params}`` (key order as written)."""
        return {"kind": self.kind, **self.params}

    def _at(self) -> str:
        return str(self.at) or self.kind

    def check_keys(self, required: Iterable[str] = (), optional: Iterable[str] = ()) -> None:
        """Refuse a missing ``required`` parameter and any parameter outside
        ``required | optional`` (:class:`FileFormatError`)."""
        params = self.params
        if all(k in params for k in required) and all(
                k in required or k in optional for k in params):
            return
        header_keys({"kind": self.kind, **params}, self._at(), self.where,
                    {"kind", *required}, optional)

    def real(self, name: str, default: float | None = None, strict: bool = False) -> float:
        """Parameter ``name``: a finite JSON number ``>= 0`` (``> 0`` if ``strict``);
        ``default`` when absent (required when ``default`` is None)."""
        v = self.params.get(name)
        if v is None and default is not None and name not in self.params:
            return default
        if _real_ok(v, strict):  # the message (below) is built only for a refusal
            return float(v)  # type: ignore[arg-type]  # _real_ok: a finite number
        return header_real(v, f"{self._at()}.{name}", self.where, strict)

    def exponent(self, name: str, default: float | None = None) -> float:
        """Parameter ``name``: a norm exponent (JSON number ``>= 1`` or ``"inf"``)."""
        if name not in self.params and default is not None:
            return default
        return header_exponent(self.params.get(name), f"{self._at()}.{name}", self.where)

    def array(self, name: str) -> np.ndarray:
        """Array ``name`` (the codec has checked its shape and finiteness)."""
        if name not in self.arrays:
            raise _fail(self.where, f"{self._at()}: missing array {name!r}")
        return self.arrays[name]

    def regularizers(self) -> dict[str, float]:
        """The loss regularizer weights ``l1 = eta``, ``l2 = kappa`` (absent: 0)."""
        return {"l1": self.real("l1", 0.0), "l2": self.real("l2", 0.0)}


class ParameterFree:
    """Mixin: the spec of a term without parameters or arrays (``Norm2``, ``NonNeg``, ...)."""

    kind: ClassVar[str]

    def to_spec(self) -> TermSpec:
        """``{"kind": kind}``."""
        return TermSpec(self.kind)

    @classmethod
    def from_spec(cls, spec: TermSpec) -> Any:
        """``cls()``; refuses any parameter."""
        spec.check_keys()
        return cls()


# ===================================================================== registries
class Registry:
    """The classes of one term family by ``kind`` (filled by the classes' ``__init_subclass__``).

    ``error`` is the family's exception class, raised when two classes claim one kind.
    """

    def __init__(self, family: str, error: type[GTVError]):
        self.family = family
        self.error = error
        self._classes: dict[str, type] = {}

    def register_subclass(self, cls: Any, base: Any) -> None:
        """Register ``cls`` (a subclass of the family's ``base``) if it sets ``kind`` in its
        body and has a ``from_spec`` other than ``base``'s; a class redefined under the same
        module and name replaces the old one."""
        kind = cls.__dict__.get("kind")
        if kind is None or cls.from_spec.__func__ is base.from_spec.__func__:
            return
        if not isinstance(kind, str) or not kind:
            raise self.error(f"{cls.__name__}: kind must be a non-empty string, got {kind!r}")
        old = self._classes.get(kind)
        if old is not None and (old.__module__, old.__qualname__) != (cls.__module__,
                                                                     cls.__qualname__):
            raise self.error(f"{cls.__name__}: {self.family} kind {kind!r} is already "
                             f"registered to {old.__module__}.{old.__qualname__}")
        self._classes[kind] = cls

    def get(self, kind: Any) -> type | None:
        """The class registered under ``kind`` (None if unknown or not a string)."""
        return self._classes.get(kind) if isinstance(kind, str) else None

    def kinds(self) -> list[str]:
        """The registered kinds, in registration order."""
        return list(self._classes)

    def __contains__(self, kind: Any) -> bool:
        return self.get(kind) is not None

    def describe(self, term: Any) -> TermSpec:
        """``term.to_spec()``, refused (:class:`UnsupportedError`) unless ``from_spec`` of the
        class registered under its kind rebuilds a term of the same class."""
        spec = term.to_spec()
        if self.get(spec.kind) is not type(term):
            raise UnsupportedError(f"{term!r} cannot be saved: {self.family} kind "
                                   f"{spec.kind!r} is not registered to "
                                   f"{type(term).__name__}")
        return spec


#: Loss classes by kind (``squared``, ``logistic``, ...).
LOSSES = Registry("loss", LossError)
#: Penalty classes by kind (``norm2``, ``normp``, ...).
PENALTIES = Registry("penalty", PenaltyError)
#: Constraint classes by kind (``box``, ``nonneg``, ``normball``).
CONSTRAINTS = Registry("constraint", ConstraintError)
