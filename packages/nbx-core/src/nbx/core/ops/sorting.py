"""Sorting and selection: sort, argsort, topk, kthvalue, median, quantile, the unique_* family.

Order: NaN is the largest value (after +inf), as numpy's ascending sort and torch's descending
one place it; -0.0 and 0.0 are equal. Ties keep their input order when stable=True (the default)
and also in descending sorts; topk and kthvalue break ties by the lower index, so every device
returns the same indices.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import dtypes, layout, reference
from ..dispatch import implementation, register
from ..errors import ArgumentError, ShapeError
from ..tensor import Tensor
from ._common import check_category, oracle_dtype, wrap
from .movement import host
from .reductions_more import ValuesIndices


def _sort_axis(op: str, x: Tensor, axis) -> int:
    check_category(op, x.dtype, "real")
    if x.ndim == 0:
        raise ShapeError(f"{op} of a 0-d tensor")
    return layout.normalize_dim(axis, x.ndim)


def sort(x: Tensor, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """x's values in order along axis (the Array API's sort)."""
    return take_sorted(x, _sort_axis("sort", x, axis), bool(descending))[0]


def argsort(x: Tensor, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """The int64 indices that sort x along axis (stable: ties in input order)."""
    return take_sorted(x, _sort_axis("argsort", x, axis), bool(descending))[1]


def take_sorted(x: Tensor, axis: int, descending: bool) -> tuple[Tensor, Tensor]:
    """(values, indices) of the stable sort along axis; every sorting op of a device rests on it."""
    return implementation("sort", x.device)(x, axis, descending)


def argsort_reference(a: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable ascending or descending argsort with NaN largest; -0.0 equals 0.0."""
    if a.dtype.kind not in "biu":
        a = a.astype(np.float64)  # bfloat16 and float8 sort through their exact float64 values
    a = np.moveaxis(a, axis, -1)
    if descending:  # stable descending: sort the reversed row, reverse, map the positions back
        n = a.shape[-1]
        order = n - 1 - np.argsort(a[..., ::-1], axis=-1, kind="stable")[..., ::-1]
    else:
        order = np.argsort(a, axis=-1, kind="stable")
    return np.moveaxis(order, -1, axis).astype(np.int64)


def _sort_ref(x, axis, descending):
    a = host(x)
    order = argsort_reference(a, axis, descending)
    return np.take_along_axis(a, order, axis=axis), order


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:
    """torch.topk: the k largest (or smallest) along dim with their indices, in order (sorted=False
    returns them in order too); ties go to the lower index."""
    dim = _sort_axis("topk", x, dim)
    k = int(k)
    if not 0 <= k <= x.shape[dim]:
        raise ShapeError(f"topk: k={k} is outside [0, {x.shape[dim]}] for dim {dim}")
    values, indices = implementation("topk", x.device)(x, k, dim, bool(largest))
    return ValuesIndices(values, indices)


def _topk_ref(x, k, dim, largest):
    values, order = _sort_ref(x, dim, largest)
    keep = tuple(slice(0, k) if d == dim else slice(None) for d in range(values.ndim))
    return values[keep], order[keep]


def kthvalue(x: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
    """torch.kthvalue: the k-th smallest (k from 1) along dim and its index."""
    dim = _sort_axis("kthvalue", x, dim)
    if not 1 <= int(k) <= x.shape[dim]:
        raise ShapeError(f"kthvalue: k={k} is outside [1, {x.shape[dim]}]")
    values, indices = topk(x, int(k), dim, largest=False)
    values, indices = values.narrow(dim, int(k) - 1, 1), indices.narrow(dim, int(k) - 1, 1)
    if not keepdim:
        values, indices = values.squeeze(dim), indices.squeeze(dim)
    return ValuesIndices(values, indices)


def median(x: Tensor, dim: int | None = None, keepdim: bool = False):
    """torch.median: the lower median (no averaging); with dim, (values, indices)."""
    if dim is None:
        flat = x.reshape(-1)
        if flat.size == 0:
            raise ShapeError("median of an empty tensor")
        return kthvalue(flat, (flat.size + 1) // 2, 0).values
    d = _sort_axis("median", x, dim)
    return kthvalue(x, (x.shape[d] + 1) // 2, d, keepdim)


def quantile(x: Tensor, q, dim: int | None = None, keepdim: bool = False,
             interpolation: str = "linear") -> Tensor:
    """torch.quantile (numpy's methods of the same names) of a float tensor along dim."""
    check_category("quantile", x.dtype, "real_floating")
    if interpolation not in ("linear", "lower", "higher", "nearest", "midpoint"):
        raise ArgumentError(f"quantile interpolation {interpolation!r} is not one torch names")
    qs = np.asarray(q.numpy() if isinstance(q, Tensor) else q, dtype=np.float64)
    if qs.ndim > 1 or np.any((qs < 0) | (qs > 1)):
        raise ArgumentError("quantile takes q in [0, 1], a scalar or 1-D")
    if dim is None:
        x, dim, keepdim_axes = x.reshape(-1), 0, x.ndim
    else:
        dim, keepdim_axes = layout.normalize_dim(dim, x.ndim), None
    return implementation("quantile", x.device)(x, qs, dim, bool(keepdim), interpolation, keepdim_axes)


def _quantile_ref(x, qs, dim, keepdim, interpolation, keepdim_axes, precision=reference.NATIVE):
    work = oracle_dtype(x.dtype) if precision == reference.FLOAT64 else np.float32 if x.dtype.itemsize < 4 \
        else x.dtype.host
    a = host(x).astype(work)
    out = np.quantile(a, qs, axis=dim, keepdims=keepdim, method=interpolation)
    if keepdim and keepdim_axes is not None:
        out = out.reshape(qs.shape + (1,) * keepdim_axes)
    return out


# ---- unique --------------------------------------------------------------------------------------
class UniqueAll(NamedTuple):
    values: Tensor
    indices: Tensor
    inverse_indices: Tensor
    counts: Tensor


class UniqueCounts(NamedTuple):
    values: Tensor
    counts: Tensor


class UniqueInverse(NamedTuple):
    values: Tensor
    inverse_indices: Tensor


def _unique(x: Tensor):
    return implementation("unique", x.device)(x)


def _unique_ref(x):
    a = host(x)
    values, first, inverse, counts = np.unique(a.reshape(-1), return_index=True, return_inverse=True,
                                               return_counts=True, equal_nan=False)
    return values, first.astype(np.int64), inverse.reshape(a.shape).astype(np.int64), counts.astype(np.int64)


def unique_all(x: Tensor, /) -> UniqueAll:
    """Sorted unique values, the first index of each, the inverse indices (x's shape), the counts;
    every NaN is its own value, as the standard says."""
    return UniqueAll(*_unique(x))


def unique_counts(x: Tensor, /) -> UniqueCounts:
    values, _, _, counts = _unique(x)
    return UniqueCounts(values, counts)


def unique_inverse(x: Tensor, /) -> UniqueInverse:
    values, _, inverse, _ = _unique(x)
    return UniqueInverse(values, inverse)


def unique_values(x: Tensor, /) -> Tensor:
    return _unique(x)[0]


@register("sort", "cpu")
def _sort_cpu(x, axis, descending):
    values, order = _sort_ref(x, axis, descending)
    return wrap(values, x.dtype), wrap(order, dtypes.INDEX)


@register("topk", "cpu")
def _topk_cpu(x, k, dim, largest):
    values, order = _topk_ref(x, k, dim, largest)
    return wrap(values, x.dtype), wrap(order, dtypes.INDEX)


@register("quantile", "cpu")
def _quantile_cpu(x, *args):
    return wrap(_quantile_ref(x, *args), x.dtype)


@register("unique", "cpu")
def _unique_cpu(x):
    values, first, inverse, counts = _unique_ref(x)
    return wrap(values, x.dtype), wrap(first, dtypes.INDEX), wrap(inverse, dtypes.INDEX), wrap(counts, dtypes.INDEX)


for _name, _fn in (("sort", _sort_ref), ("topk", _topk_ref), ("unique", _unique_ref)):
    reference.register(_name, lambda *a, _fn=_fn, precision=reference.NATIVE, **kw: _fn(*a, **kw))
reference.register("quantile", _quantile_ref)

__all__ = ["sort", "argsort", "topk", "kthvalue", "median", "quantile", "unique_all", "unique_counts",
           "unique_inverse", "unique_values", "UniqueAll", "UniqueCounts", "UniqueInverse"]
