"""The systems of :func:`~gtvmodel.kernels.composite.composite_active_set_prox`: for fixed
active sets of the rows, the parts that do not depend on ``g`` (:func:`_system_matrices`:
held duals, curvature ``H``, coordinates fixed by free unit rows, free linear data rows),
cached across Algorithm 1's calls with their factorizations, updated where a few nodes change
their sets (:func:`_updated_system`) and merged back when a call ends (:func:`_merge_later`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .steps import _affine_factors, _ball_factors


def _with_rhs(sy: dict[str, Any], g: np.ndarray, a_prev: np.ndarray) -> dict[str, Any]:
    """The system ``sy`` of :func:`_system_matrices` (not changed; its factorizations,
    ``sy["fac"]``, are shared) with the right side ``f = g - P^T (a_fix - c s / (c q))`` of
    ``z^T H z / 2 - f^T z`` and the free linear data rows' previous duals ``a0`` (from
    ``a_prev``)."""
    a0 = (np.where(sy["on"], a_prev[np.arange(g.shape[0])[:, None], sy["sel"]], 0.0) if sy["F"]
          else np.zeros((g.shape[0], 0)))
    return dict(sy, f=g - sy["fP"], a0=a0)


def _system_matrices(rows: dict[str, np.ndarray], st: np.ndarray, act: np.ndarray | slice,
                     mu: np.ndarray, F_min: int = 0) -> dict[str, Any]:
    """The parts of the active sets' system that do not depend on ``g`` (cached across calls
    while the active sets and ``mu`` stay, :func:`composite_active_set_prox`): the held duals
    ``a_fix``, the curvature ``H = mu I + sum_{free q rows} P_r P_r^T / (c_r q_r)``, ``fP =
    P^T (a_fix - c s / (c q))``, the coordinates ``fx`` fixed to ``zfix`` by free unit rows
    (the first row of a coordinate, ``owner``, takes its dual) and the free linear data rows
    ``Pd z = bd`` (gathered into ``F`` slots ``sel``, ``on`` where used; at least ``F_min``
    slots, at most one per data row); ``fac`` holds the factorizations of
    :func:`_affine_solve` / :func:`_ball_solve` once computed."""
    P, cs, fixed, lo, hi = (rows[key][act] for key in ("P", "cs", "fixed", "lo", "hi"))
    n_act, R, d = P.shape
    coord, unit, tail = rows["coord"], rows["unit"], rows["tail"]
    free = (st == 0) & ~fixed
    a_fix = np.where(st < 0, lo, np.where(st > 0, hi, 0.0))  # (free rows: 0)
    a_fix[fixed] = 0.0
    if rows.get("any_q", True):
        cq = rows["cq"][act]
        freeq, freel = free & (cq > 0), free & (cq == 0)
        wq = np.where(freeq, 1.0 / np.where(freeq, cq, 1.0), 0.0)
        fP = np.einsum("krd,kr->kd", P, a_fix - wq * cs)
    else:  # no row with q > 0 (rows["any_q"] False)
        freeq, freel, wq = np.zeros_like(free), free, np.zeros(st.shape)
        fP = np.einsum("krd,kr->kd", P, a_fix)
    # coordinates fixed by free unit rows (reversed: the first row of a coordinate wins)
    fx = np.zeros((n_act, d), dtype=bool)
    zfix = np.zeros((n_act, d))
    owner = np.full((n_act, d), -1)
    if unit.size:
        kk, uu = np.nonzero(freel[:, tail])
        kk, urows = kk[::-1], unit[uu[::-1]]
        cj = coord[urows]
        fx[kk, cj] = True
        zfix[kk, cj] = cs[kk, urows]
        owner[kk, cj] = urows
    H = mu[:, None, None] * np.eye(d)
    any_q = bool(freeq.any())
    if any_q:
        H = H + np.einsum("krd,kre->kde", P * wq[:, :, None], P)
    datal = freel
    if isinstance(tail, slice):  # the data rows come first: a view
        datal = freel[:, :tail.start]
    elif unit.size:
        datal = freel.copy()
        datal[:, unit] = False
    F = min(max(int(datal.sum(axis=1).max(initial=0)), F_min), datal.shape[1])
    if F:
        sel = np.argsort(~datal, axis=1, kind="stable")[:, :F]
        node = np.arange(n_act)[:, None]  # (with sel: fancy indexing, row by row)
        on = datal[node, sel]
        Pd = np.where(on[:, :, None], P[node, sel], 0.0)
        bd = np.where(on, cs[node, sel] - np.einsum("kfd,kd->kf", Pd, zfix), 0.0)
    else:
        sel, on = np.zeros((n_act, 0), dtype=np.int64), np.zeros((n_act, 0), dtype=bool)
        Pd, bd = np.zeros((n_act, 0, d)), np.zeros((n_act, 0))
    return {"P": P, "cs": cs, "freeq": freeq, "wq": wq, "a_fix": a_fix, "fP": fP, "fx": fx,
            "zfix": zfix, "owner": owner, "H": H, "F": F, "sel": sel, "on": on, "Pd": Pd,
            "bd": bd, "any_q": any_q, "fac": {}}


def _updated_system(sy: dict[str, Any], sub: dict[str, Any], chg: np.ndarray
                    ) -> dict[str, Any] | None:
    """The system ``sy`` of every node (:func:`_system_matrices`, with the factorizations it
    has) with the nodes ``chg`` replaced by their system ``sub`` (the free rows' slots padded
    to ``sy``'s ``F``; the same factorizations computed for ``sub`` first); None where they do
    not fit (more free rows, other kinds of factors, a ball split into parts)."""
    for name, factors in (("affine", _affine_factors), ("ball", _ball_factors)):
        if name in sy["fac"]:
            factors(sub)
    return _merged(sy, sub, chg, sy["P"].shape[0])


def _merged(full: dict[str, Any], sub: dict[str, Any], chg: np.ndarray, k: int
            ) -> dict[str, Any] | None:
    """``full`` (``k`` nodes) with the rows ``chg`` of its per-node arrays from ``sub``
    (zero-padded where ``sub``'s free-row axes are shorter: no row there), recursively; None
    where they do not fit."""
    out: dict[Any, Any] = {}
    for key, val in full.items():
        new = sub.get(key)
        if isinstance(val, dict):
            val = _merged(val, new, chg, k) if isinstance(new, dict) and set(new) == set(val) \
                else None
        elif isinstance(val, np.ndarray) and val.ndim and val.shape[0] == k:
            val = _merged_rows(val, new, chg)
        elif key == "F":
            val = val if new <= val else None
        elif val is not None or new is not None:
            val = val if isinstance(val, (bool, np.bool_)) and val == new else None
        else:
            out[key] = None
            continue
        if val is None:
            return None
        out[key] = val
    return out


def _merged_rows(val: np.ndarray, new: Any, chg: np.ndarray) -> np.ndarray | None:
    """A copy of ``val`` with the rows ``chg`` set to ``new`` zero-padded to its shape (None
    where ``new`` does not fit)."""
    if not isinstance(new, np.ndarray) or new.ndim != val.ndim \
            or any(b > a for a, b in zip(val.shape[1:], new.shape[1:], strict=True)):
        return None
    val = val.copy()
    if new.shape[1:] != val.shape[1:]:
        val[chg] = 0
    val[(chg,) + tuple(slice(0, b) for b in new.shape[1:])] = new
    return val


def _merge_later(cache: dict, later: list, k: int) -> None:
    """Merges the systems that the later active-set steps of a call of
    :func:`composite_active_set_prox` built for a few nodes (``later``: ``(kind, nodes,
    active sets, system)``, in order) into the call's cached system of every node (in place,
    :func:`_merge_into`), so that the next call starts from the final active sets without
    rebuilding them: a node's last system is that of its final active set.  A system that
    does not fit (other kinds of factors, a ball split into parts) drops the cached one."""
    for kind, nodes, st, sy in later:
        hit = cache.get(kind)
        if hit is None:
            continue
        if _merge_into(hit[2], sy, nodes, k):
            hit[0][nodes] = st
        else:
            del cache[kind]


def _merge_into(full: dict[str, Any], sub: dict[str, Any], nodes: np.ndarray, k: int,
                seen: set[int] | None = None) -> bool:
    """Writes the system ``sub`` of the nodes ``nodes`` (:func:`_system_matrices`, with its
    factorizations) into the rows ``nodes`` of ``full``'s per-node arrays (``k`` rows), in
    place and recursively; a free-row axis shorter in ``sub`` is zero-padded (no row there),
    a longer one grows ``full``'s (zero-padded for the other nodes).  ``P`` and ``cs`` (the
    rows themselves) are the same in both.  Returns False where they do not fit (a factor
    ``full`` has and ``sub`` has not, a per-node array of another length, another
    ``any_q``); ``full`` is then inconsistent and must be dropped.  ``seen``: the arrays
    written so far (one array under two names, as ``B`` and ``H`` in :func:`_ball_factors`,
    is copied before its second write)."""
    seen = set() if seen is None else seen
    n = nodes.size
    # the rows themselves, and (no free q row in either: the same as before) H = mu I
    skip = _SAME_ROWS if full.get("any_q") is not False or sub.get("any_q") is not False \
        else _SAME_ROWS_NO_Q
    for key, val in list(full.items()):
        if key in skip:
            continue
        new = sub.get(key)
        if type(val) is np.ndarray:
            if not (type(new) is np.ndarray and new.shape[0] == n and val.shape[0] == k
                    and val.ndim == new.ndim > 0):
                return False
            if id(val) in seen:
                full[key] = val = val.copy()
            if new.shape[1:] == val.shape[1:]:
                val[nodes] = new
            else:
                full[key] = val = _padded_rows(val, new, nodes)
            seen.add(id(val))
        elif type(val) is dict:
            if type(new) is not dict or not _merge_into(val, new, nodes, k, seen):
                return False
        elif key == "F":
            full[key] = max(val, new)
        elif not (val is None and new is None) and not (
                isinstance(val, (bool, np.bool_)) and val == new):
            return False
    return True


#: Keys of a system (:func:`_system_matrices`) that :func:`_merge_into` leaves: the rows
#: themselves, and where no node has a free ``q`` row, also ``H = mu I`` and the ``q`` rows'
#: masks and weights (all ``False``/``0``).
_SAME_ROWS = frozenset(("P", "cs"))
_SAME_ROWS_NO_Q = frozenset(("P", "cs", "freeq", "wq", "H"))


def _padded_rows(val: np.ndarray, new: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """``val`` with its rows ``nodes`` set to ``new`` where their trailing axes (free-row
    slots) differ: ``new`` zero-padded where shorter; ``val`` grown (zero-padded for the other
    rows, a new array) where ``new`` is longer."""
    shape = tuple(max(a, b) for a, b in zip(val.shape, new.shape, strict=True))
    if shape[1:] != val.shape[1:]:
        grown = np.zeros((val.shape[0],) + shape[1:], dtype=val.dtype)
        grown[tuple(slice(0, a) for a in val.shape)] = val
        val = grown
    val[nodes] = 0
    val[(nodes,) + tuple(slice(0, b) for b in new.shape[1:])] = new
    return val


