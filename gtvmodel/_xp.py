"""Array namespaces: one formula for numpy arrays and other array libraries' tensors.

The fast paths of Algorithm 1 -- the closed-form node updates PU (32) of the quadratic, zero
and squared losses and the edge updates DU (33) of every library penalty -- are written once
against the array API (``xp = namespace(V)``, :mod:`array_api_compat`), so that the same code
runs on numpy arrays (the default path, unchanged) and on PyTorch tensors on a CPU or a GPU
(:mod:`gtvmodel.primal_dual.torch_backend`, ``docs/primal_dual.md``).  Constants that a term
holds in numpy (eigenbases, centres, bounds) are moved next to the iterate by :func:`like`
(cached per device and dtype by :func:`cached_like`); a formula that is numpy-only (an
iterative solver written with numpy's grouping primitives) runs on the CPU in float64 on
:func:`to_numpy` copies.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from array_api_compat import array_namespace, is_array_api_obj
from array_api_compat import device as _device

__all__ = ["namespace", "is_numpy", "to_numpy", "like", "cached_like", "rows", "per_row",
           "eps_of", "copy", "segment_sum", "device_of", "csr_tensor"]


def namespace(*arrays: Any) -> Any:
    """The array-API namespace of ``arrays`` (numpy's for numpy arrays and Python numbers)."""
    arrs = [a for a in arrays if is_array_api_obj(a) and not isinstance(a, np.generic)]
    return array_namespace(*arrs) if arrs else array_namespace(np.empty(0))


def is_numpy(x: Any) -> bool:
    """Whether ``x`` is a numpy array, a number or a list (not another library's tensor)."""
    return isinstance(x, np.ndarray | np.generic) or not is_array_api_obj(x)


def to_numpy(x: Any, dtype: Any = float) -> np.ndarray:
    """``x`` as a numpy array of ``dtype`` on the CPU (a copy only where needed)."""
    if is_numpy(x):
        return np.asarray(x, dtype=dtype)
    if hasattr(x, "detach"):  # a torch tensor, possibly on a GPU: an explicit copy to the host
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def like(a: Any, ref: Any) -> Any:
    """The numpy constant ``a`` in ``ref``'s namespace, on its device and (floating ``a``)
    with its dtype; ``a`` itself when ``ref`` is a numpy array."""
    if is_numpy(ref):
        return a
    xp = namespace(ref)
    arr = np.asarray(a)
    dtype = ref.dtype if arr.dtype.kind == "f" else None
    return xp.asarray(arr, dtype=dtype, device=_device(ref))


def cached_like(owner: Any, name: str, a: Any, ref: Any) -> Any:
    """:func:`like`, cached on ``owner`` per name, device and dtype (constants of a term moved
    to a GPU once, not every iteration)."""
    if is_numpy(ref):
        return a
    cache = owner.__dict__.setdefault("_xp_cache", {})
    key = (name, str(_device(ref)), str(ref.dtype))
    out = cache.get(key)
    if out is None:
        out = cache[key] = like(a, ref)
    return out


def rows(V: Any) -> Any:
    """``V`` as a 2-D array of rows: numpy input as a float array (a vector is one row),
    another library's tensor as it is (a vector is one row)."""
    if is_numpy(V):
        return np.atleast_2d(np.asarray(V, dtype=float))
    return V if V.ndim == 2 else namespace(V).reshape(V, (1, -1))


def per_row(x: Any, V: Any) -> Any:
    """A scalar or per-row ``x`` broadcast to one value per row of ``V``, in ``V``'s
    namespace."""
    n = V.shape[0]
    if is_numpy(V) or is_numpy(x):
        return like(np.broadcast_to(np.asarray(x, dtype=float), (n,)), V)
    return namespace(V).broadcast_to(x, (n,))


def eps_of(A: Any) -> float:
    """The machine epsilon of ``A``'s floating dtype (``2^-52`` for float64)."""
    if is_numpy(A):
        return float(np.finfo(np.asarray(A).dtype if np.asarray(A).dtype.kind == "f"
                              else float).eps)
    return float(namespace(A).finfo(A.dtype).eps)


def copy(A: Any) -> Any:
    """A copy of ``A`` (numpy: as float)."""
    if is_numpy(A):
        return np.array(A, dtype=float, copy=True)
    return namespace(A).asarray(A, copy=True)


def segment_sum(owner: Any, A: Any, k: int) -> Any:
    """``out[j] = sum_{r: owner_r = j} A[r]`` (``(k,)`` or ``(k, d)``) for a tensor ``A`` and
    integer ``owner`` beside it: the array API has no scatter-add, so this is PyTorch's
    ``index_add_`` (on a GPU the order of the sums is not fixed; callers' rounding bounds
    hold for any order).  numpy arrays go through
    :func:`gtvmodel.terms.losses.sum_rows_by`."""
    xp = namespace(A)
    out = xp.zeros((k, *tuple(A.shape[1:])), dtype=A.dtype, device=_device(A))
    return out.index_add_(0, owner, A)


def device_of(A: Any) -> Any:
    """The device of ``A`` (``"cpu"`` for numpy arrays), for creating arrays beside it."""
    return _device(A)


def csr_tensor(torch: Any, M: Any, device: Any, dtype: Any) -> Any:
    """The scipy sparse matrix ``M`` as a sparse CSR tensor of ``dtype`` on ``device`` (never
    dense; e.g. the incidence matrix ``D`` and ``D^T``)."""
    M = M.tocsr()
    with warnings.catch_warnings():  # "sparse CSR support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(
            torch.as_tensor(M.indptr.astype(np.int64), device=device),
            torch.as_tensor(M.indices.astype(np.int64), device=device),
            torch.as_tensor(M.data, dtype=dtype, device=device), size=M.shape,
            check_invariants=False)
