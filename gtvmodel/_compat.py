"""The one place that reads CVXPY's internals (names outside ``cvxpy``'s top-level namespace).

gtvmodel needs a few things that CVXPY has no public API for: its Clarabel interface (subclassed
by :mod:`gtvmodel._solver` to stop Clarabel early and by the prox groups of Algorithm 1 to call
Clarabel on CVXPY's conic data directly), the conic form of a problem beyond what
``Problem.get_problem_data`` documents (the column of each variable in the stacked variable ``x``,
the objective's constant), and two atom classes for ``isinstance`` tests.  Every such use goes
through this module, so a CVXPY release that moves one of them breaks here, in one place, and
``tests/test_packaging.py`` checks each of them against the installed CVXPY at both ends of the
supported range (``ci/min-versions.txt`` pins the lower end; ``make test-min`` runs the suite
there).

The supported range, ``CVXPY_RANGE``, is the one declared in ``pyproject.toml``: the lower end is
the oldest release the suite passes on, the upper end excludes the next minor release, which has
not been tried.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import cvxpy
import cvxpy.settings as cps
import numpy as np
from cvxpy.atoms.atom import Atom as Atom
from cvxpy.atoms.pnorm import Pnorm as Pnorm
from cvxpy.lin_ops import lin_utils
from cvxpy.reductions.solvers.conic_solvers.clarabel_conif import CLARABEL as CLARABEL
from cvxpy.reductions.solvers.conic_solvers.clarabel_conif import (
    dims_to_solver_cones as dims_to_solver_cones,
)

# also re-exported, as CVXPY defines them: Atom, Pnorm (isinstance tests in gtvmodel._cvx),
# CLARABEL (CVXPY's Clarabel interface, subclassed in gtvmodel._solver) and
# dims_to_solver_cones (CVXPY's cone dimensions -> Clarabel's cones)
__all__ = ["CVXPY_RANGE", "cvxpy_version", "scs_indirect_supported", "conic_program",
           "conic_offset", "variable_column", "has_variable_bounds", "pow_cone_3d", "reserve_ids"]

#: ``(lowest supported, first unsupported)`` CVXPY release, as declared in ``pyproject.toml``.
CVXPY_RANGE: tuple[tuple[int, int, int], tuple[int, int, int]] = ((1, 7, 0), (1, 10, 0))


def _release(version: str) -> tuple[int, int, int]:
    """``"1.9.3"``, ``"1.10.0rc1"``, ``"1.7.0.dev0+g1a2b"`` -> ``(1, 9, 3)``, ``(1, 10, 0)``, ..."""
    parts: list[int] = []
    for piece in version.split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        parts.append(int(digits) if digits else 0)
        if len(digits) < len(piece):
            break
    return tuple((parts + [0, 0, 0])[:3])  # type: ignore[return-value]


def cvxpy_version() -> tuple[int, int, int]:
    """The installed CVXPY release as ``(major, minor, micro)``.

    Returns
    -------
    tuple of int
        For example ``(1, 9, 3)``; pre-release and local suffixes are dropped.

    Examples
    --------
    >>> from gtvmodel._compat import CVXPY_RANGE, cvxpy_version
    >>> CVXPY_RANGE[0] <= cvxpy_version() < CVXPY_RANGE[1]
    True
    """
    return _release(cvxpy.__version__)


def conic_program(data: dict[str, Any]) -> Any:
    """CVXPY's parametrized conic program behind ``Problem.get_problem_data``'s ``data``.

    Parameters
    ----------
    data : dict
        The first value returned by ``problem.get_problem_data(solver)`` for a conic solver.

    Returns
    -------
    object
        CVXPY's ``ParamConeProg`` (its stacked variable ``x``, ``var_id_to_col``, ...).
    """
    return data[cps.PARAM_PROB]


def conic_offset(inverse_data: list[Any]) -> float:
    """The constant ``d`` of the objective ``c^T x + d`` of a conic solver's data.

    Parameters
    ----------
    inverse_data : list
        The third value returned by ``problem.get_problem_data(solver)`` for a conic solver
        (the last reduction of the chain is the solver's, which stores the offset).

    Returns
    -------
    float
        ``d``, with the problem's Parameter values applied.
    """
    return float(inverse_data[-1][cps.OFFSET])


def variable_column(data: dict[str, Any], variable: cvxpy.Variable) -> int | None:
    """The first column of ``variable`` in the conic program's stacked variable ``x``.

    Parameters
    ----------
    data : dict
        As for :func:`conic_program`.
    variable : cvxpy.Variable
        A variable of the problem; its entries occupy the columns ``col, ..., col + size - 1``
        in column-major (Fortran) order.

    Returns
    -------
    int or None
        The column, or None where the variable does not appear in the conic program (CVXPY
        drops a variable that no objective or constraint uses).
    """
    col = conic_program(data).var_id_to_col.get(variable.id)
    return None if col is None else int(col)


def has_variable_bounds(data: dict[str, Any]) -> bool:
    """Whether the conic program keeps variable bounds apart from its cone constraints.

    Parameters
    ----------
    data : dict
        As for :func:`conic_program`.

    Returns
    -------
    bool
        True where CVXPY passed bounds ``lb <= x <= ub`` to the solver separately (newer
        releases do so for solvers that take bounds; never for Clarabel).
    """
    prog = conic_program(data)
    return (getattr(prog, "lower_bounds", None) is not None
            or getattr(prog, "upper_bounds", None) is not None)


def pow_cone_3d(x: cvxpy.Expression, y: cvxpy.Expression, z: cvxpy.Expression,
                alpha: np.ndarray) -> cvxpy.Constraint:
    """``cvxpy.PowCone3D(x, y, z, alpha)`` for vectors of any length, one cone per entry.

    CVXPY up to 1.7 (the last release for Python 3.10) rejects vectors of length one together
    with a length-one ``alpha`` (it compares their shapes with ``()``); a single cone is
    therefore given as scalars, which every supported release accepts.

    Parameters
    ----------
    x, y, z : cvxpy.Expression
        Affine vectors of one length ``k >= 1``.
    alpha : numpy.ndarray
        The ``k`` exponents, each in ``(0, 1)``.

    Returns
    -------
    cvxpy.Constraint
        ``x_j^alpha_j y_j^(1 - alpha_j) >= |z_j|``, ``x_j, y_j >= 0`` for every ``j``.
    """
    alpha = np.asarray(alpha, dtype=float).ravel()
    if alpha.size == 1:
        return cvxpy.PowCone3D(x[0], y[0], z[0], float(alpha[0]))
    return cvxpy.PowCone3D(x, y, z, alpha)


def scs_indirect_supported() -> bool:
    """Whether CVXPY passes ``use_indirect`` through to SCS (SCS's indirect linear solver).

    CVXPY 1.7 rejects it ("'use_indirect' is an invalid keyword argument"); 1.9 passes it.
    1.8 was not tested and counts as unsupported (SCS then factorizes, which is correct, only
    slower on large problems).

    Returns
    -------
    bool
        True from CVXPY 1.9 on.

    Examples
    --------
    >>> from gtvmodel._compat import cvxpy_version, scs_indirect_supported
    >>> scs_indirect_supported() == (cvxpy_version() >= (1, 9, 0))
    True
    """
    return cvxpy_version() >= (1, 9, 0)


def reserve_ids(objects: Iterable[Any]) -> int:
    """Make CVXPY's id counter pass every id in the given expression trees.

    CVXPY tells variables, parameters, atoms and constraints apart by integer ids drawn from
    one counter per process (``lin_utils.get_id``); an object that comes back from a pickle keeps
    its id, which a new process would hand out again, so that two different variables of one
    problem would share it.  Called after unpickling a model, with the CVXPY objects it holds.

    Parameters
    ----------
    objects : iterable
        CVXPY expressions and constraints (their arguments are walked too); other items are
        ignored.

    Returns
    -------
    int
        The largest id found (-1 if none).
    """
    top, stack, seen = -1, list(objects), set()
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        oid = getattr(obj, "id", None)
        if isinstance(oid, int):
            top = max(top, oid)
        stack.extend(a for a in getattr(obj, "args", ()) if hasattr(a, "args"))
    counter = lin_utils.ID_COUNTER
    counter.count = max(counter.count, top + 1)
    return top
