"""Indexing by tensors: take, take_along_axis, gather, index_select, embedding, scatter and the
index_* updates, masked ops, nonzero/argwhere, searchsorted/bucketize.

Indices are integer tensors; a negative index counts from the end, as numpy's (torch refuses
them in gather/scatter: a superset), and one outside [-size, size) is refused by name
(IndexingError) before anything is written. Scatters are out-of-place and deterministic: with
duplicate indices the last one in row-major order of the index wins (reduce=None), and reductions
fold the updates in that order.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes, layout
from ..dispatch import implementation
from ..errors import ArgumentError, DTypeError, IndexingError, ShapeError
from ..promotion import check_scalar
from ..tensor import Tensor
from ._common import SCALARS, common_device, compute_dtype, oracle_dtype
from .movement import check_index_dtype, host, register_exact, wrapped_indices

SCATTER_REDUCE = {None: None, "sum": "sum", "add": "sum", "prod": "prod", "multiply": "prod",
                  "mean": "mean", "amax": "amax", "amin": "amin"}


def wrap_checked(op: str, index: Tensor, size: int) -> Tensor:
    """index (on any device) as int64 in [0, size), negatives from the end; one outside
    [-size, size) is refused (IndexingError) after a check on the device and one readback."""
    from . import elementwise as ew
    from .reductions import all as all_of
    index = index.to(dtype=dtypes.INDEX)
    if index.size and not all_of(ew.logical_and(index >= -size, index < size)).item():
        raise IndexingError(f"{op}: an index is out of range for a dim of size {size}")
    return ew.where(index < 0, index + size, index)


def ravel_checked(op: str, arrays, sizes, shape) -> Tensor:
    """The flat index (int64, broadcast to shape) of integer arrays over dims of those sizes, each
    wrapped from the end. On cpu each is checked at once (wrap_checked); on other devices, where a
    check would be a readback (and none is possible inside a captured step), an entry with a bad
    index becomes -prod(sizes) - 1, which the take or scatter kernel using the flat index masks
    and raises at the next synchronization (nbx.core.deferred_checks)."""
    from math import prod

    from . import elementwise as ew
    from .. import deferred_checks
    deferring = deferred_checks.deferring() or any(a.device.type != "cpu" for a in arrays)
    if deferring and len(arrays) == 1:  # the kernel wraps a negative index and flags a bad one itself
        return arrays[0].broadcast_to(shape)
    flat = bad = None
    for a, size in zip(arrays, sizes):
        if deferring:
            a = a.to(dtype=dtypes.INDEX)
            bad_here = ew.logical_or(a < -size, a >= size)
            bad = bad_here if bad is None else ew.logical_or(bad, bad_here)
            a = ew.where(a < 0, a + size, a)
        else:
            a = wrap_checked(op, a, size)
        a = a.broadcast_to(shape)
        flat = a if flat is None else ew.add(ew.multiply(flat, size), a)
    return flat if bad is None else ew.where(bad.broadcast_to(shape), -prod(sizes) - 1, flat)


# ---- take / index_select / embedding -------------------------------------------------------------
def take(x: Tensor, indices: Tensor, /, *, axis: int | None = None) -> Tensor:
    """x's slices at indices along axis (None: the flattened x): shape
    x.shape[:axis] + indices.shape + x.shape[axis + 1:]."""
    check_index_dtype("take", indices)
    common_device(x, indices)
    if axis is None:
        x, axis = x.reshape(-1), 0
    if x.ndim == 0:
        raise ShapeError("take from a 0-d tensor")
    return implementation("take", x.device)(x, indices, layout.normalize_dim(axis, x.ndim))


def _take_ref(x, indices, axis):
    a = host(x)
    return np.take(a, wrapped_indices("take", host(indices), a.shape[axis]), axis=axis)


def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:
    """torch.index_select: take with a 1-D (or 0-d) index."""
    if isinstance(index, Tensor) and index.ndim > 1:
        raise ShapeError(f"index_select takes a 1-D index, got {index.ndim}-D")
    return take(input, index.reshape(-1) if isinstance(index, Tensor) else index, axis=dim)


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """torch.nn.functional.embedding: the rows of the 2-D weight at the ids in input (any shape).
    padding_idx only marks a row for training, as in torch: its row is returned as stored."""
    if weight.ndim != 2:
        raise ShapeError(f"embedding's weight is 2-D (num_embeddings, dim), got {weight.shape}")
    if padding_idx is not None and not -weight.shape[0] <= padding_idx < weight.shape[0]:
        raise IndexingError(f"padding_idx {padding_idx} is outside the {weight.shape[0]} embeddings")
    return take(weight, input, axis=0)


# ---- take_along_axis / gather --------------------------------------------------------------------
def take_along_axis(x: Tensor, indices: Tensor, /, *, axis: int = -1) -> Tensor:
    """out[..., j, ...] = x[..., indices[..., j, ...], ...] along axis; indices has x's rank and
    broadcasts against x in every other dim."""
    check_index_dtype("take_along_axis", indices)
    common_device(x, indices)
    if indices.ndim != x.ndim:
        raise ShapeError(f"take_along_axis needs indices of x's rank {x.ndim}, got {indices.ndim}")
    axis = layout.normalize_dim(axis, x.ndim)
    x_shape = tuple(1 if d == axis else s for d, s in enumerate(x.shape))
    i_shape = tuple(1 if d == axis else s for d, s in enumerate(indices.shape))
    shape = layout.broadcast_shapes(x_shape, i_shape)
    x = x.broadcast_to(tuple(x.shape[d] if d == axis else s for d, s in enumerate(shape)))
    indices = indices.broadcast_to(tuple(indices.shape[d] if d == axis else s for d, s in enumerate(shape)))
    return implementation("take_along_axis", x.device)(x, indices, axis)


def _take_along_ref(x, indices, axis):
    a = host(x)
    return np.take_along_axis(a, wrapped_indices("take_along_axis", host(indices), a.shape[axis]), axis=axis)


def _within(op: str, x: Tensor, index: Tensor, dim: int) -> Tensor:
    """x narrowed to index's sizes in every dim but dim (torch's rule: index may be smaller there)."""
    if index.ndim != x.ndim:
        raise ShapeError(f"{op} needs an index of the input's rank {x.ndim}, got {index.ndim}")
    for d in range(x.ndim):
        if d != dim and index.shape[d] > x.shape[d]:
            raise ShapeError(f"{op}: index shape {index.shape} exceeds {x.shape} in dim {d}")
    return x[tuple(slice(None) if d == dim else slice(0, index.shape[d]) for d in range(x.ndim))]


def gather(input: Tensor, dim: int, index: Tensor) -> Tensor:
    """torch.gather: out[i][j] = input[index[i][j]][j] for dim=0 (take_along_axis, no broadcast)."""
    check_index_dtype("gather", index)
    dim = layout.normalize_dim(dim, input.ndim)
    return take_along_axis(_within("gather", input, index, dim), index, axis=dim)


# ---- scatter and the index_* updates -------------------------------------------------------------
def _source(op: str, x: Tensor, src, shape) -> Tensor:
    from .creation import asarray
    if isinstance(src, SCALARS):
        check_scalar(src, x.dtype)
        return asarray(src, dtype=x.dtype, device=x.device).broadcast_to(shape)
    if not isinstance(src, Tensor):
        raise DTypeError(f"{op} takes a tensor or a Python scalar as its source")
    common_device(x, src)
    if src.dtype is not x.dtype:
        raise DTypeError(f"{op}: source of {src.dtype.name} into a {x.dtype.name} tensor")
    return src


def scatter(input: Tensor, dim: int, index: Tensor, src, reduce: str | None = None,
            include_self: bool = True) -> Tensor:
    """torch.scatter / scatter_reduce, out of place: a copy of input with out[index[i][j]][j]
    (dim=0) set from src[i][j], or reduced with it (sum/add, prod/multiply, mean, amax, amin);
    include_self=False leaves input's values out of the reduction at the indexed places."""
    if reduce not in SCATTER_REDUCE:
        raise ArgumentError(f"scatter reduce {reduce!r} is none of {sorted(k for k in SCATTER_REDUCE if k)}")
    check_index_dtype("scatter", index)
    common_device(input, index)
    dim = layout.normalize_dim(dim, input.ndim)
    _within("scatter", input, index, dim)  # the shape checks of gather's rule
    src = _source("scatter", input, src, index.shape)
    if any(i > s for i, s in zip(index.shape, src.shape)) or src.ndim != index.ndim:
        raise ShapeError(f"scatter: index shape {index.shape} exceeds the source's {src.shape}")
    if reduce == "mean" and input.dtype.kind in ("bool",):
        raise DTypeError("scatter mean of a bool tensor")
    src = src[tuple(slice(0, s) for s in index.shape)]
    return implementation("scatter", input.device)(input, dim, index, src, SCATTER_REDUCE[reduce], bool(include_self))


def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """torch.scatter_add, out of place: scatter with reduce="sum"."""
    return scatter(input, dim, index, src, reduce="sum")


def scatter_reduce(input: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,
                   include_self: bool = True) -> Tensor:
    """torch.scatter_reduce, out of place: reduce is one of torch's sum, prod, mean, amax, amin."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise ArgumentError(f"scatter_reduce reduce {reduce!r} is none of torch's sum, prod, mean, amax, amin")
    return scatter(input, dim, index, src, reduce=reduce, include_self=include_self)


def _scatter_ref(x, dim, index, src, reduce, include_self, precision="native"):
    a = host(x)
    exact = reduce in (None, "amax", "amin") or a.dtype.kind in "biu"
    work = a.dtype if exact else (oracle_dtype(x.dtype) if precision == "float64" else compute_dtype(x.dtype))
    out = a.astype(work, copy=True)
    idx = wrapped_indices("scatter", host(index), a.shape[dim])
    values = host(src).astype(work, copy=False)
    grid = list(np.indices(idx.shape, sparse=True))
    grid[dim] = idx
    where = tuple(np.broadcast_to(g, idx.shape).reshape(-1) for g in grid)
    flat_values = values.reshape(-1)
    if reduce is None:
        out[where] = flat_values  # numpy's fancy assignment: the last duplicate wins
        return out
    if not include_self:
        identity = {"sum": 0, "mean": 0, "prod": 1}
        if reduce in identity:
            out[where] = identity[reduce]
        else:  # amax/amin: the first update of each place replaces the input's value
            first = np.unique(np.ravel_multi_index(where, a.shape), return_index=True)[1]
            out[tuple(w[first] for w in where)] = flat_values[first]
    ufunc = {"sum": np.add, "mean": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}[reduce]
    with np.errstate(all="ignore"):
        ufunc.at(out, where, flat_values)
        if reduce == "mean":
            count = np.zeros(a.shape, np.int64)
            np.add.at(count, where, 1)
            count += 1 if include_self else 0
            touched = np.zeros(a.shape, bool)
            touched[where] = True
            denom = np.where(touched, np.maximum(count, 1), 1)
            out = out / denom if x.dtype.kind == "float" else out // denom  # (bfloat16's numpy kind is "V")
    return out


def _index_update(op: str, x: Tensor, dim: int, index: Tensor, source, reduce) -> Tensor:
    """index_add / index_copy as a scatter: index (1-D) names positions along dim of x."""
    check_index_dtype(op, index)
    if index.ndim > 1:
        raise ShapeError(f"{op} takes a 1-D index, got {index.ndim}-D")
    dim = layout.normalize_dim(dim, x.ndim)
    index = index.reshape(-1)
    want = tuple(index.shape[0] if d == dim else s for d, s in enumerate(x.shape))
    source = _source(op, x, source, want)
    if source.shape != want:
        raise ShapeError(f"{op}: source of shape {source.shape} for {want}")
    view = [1] * x.ndim
    view[dim] = index.shape[0]
    full = index.reshape(view).broadcast_to(want)
    return scatter(x, dim, full, source, reduce=reduce)


def index_add(x: Tensor, dim: int, index: Tensor, source, alpha=1) -> Tensor:
    """torch.index_add, out of place: x with alpha * source's slices added at index along dim."""
    if alpha != 1:
        source = source * alpha
    return _index_update("index_add", x, dim, index, source, "sum")


def index_copy(x: Tensor, dim: int, index: Tensor, source) -> Tensor:
    """torch.index_copy, out of place: x with source's slices written at index along dim."""
    return _index_update("index_copy", x, dim, index, source, None)


def index_put(x: Tensor, indices, values, accumulate: bool = False) -> Tensor:
    """torch.index_put, out of place: x[indices] = values (or +=, duplicates summed) with numpy's
    advanced-indexing rules for the tuple of index tensors."""
    indices = tuple(indices)
    for i in indices:
        if not isinstance(i, Tensor) or not (i.dtype.is_integer or i.dtype is dtypes.bool_):
            raise DTypeError("index_put takes a tuple of integer or bool tensors")
    common_device(x, *indices)
    values = _source("index_put", x, values, ())
    return implementation("index_put", x.device)(x, indices, values, bool(accumulate))


def _index_put_ref(x, indices, values, accumulate):
    out = host(x).copy()
    key = tuple(host(i) for i in indices)
    try:
        if accumulate:
            np.add.at(out, key, host(values).astype(out.dtype))
        else:
            out[key] = host(values).astype(out.dtype)
    except IndexError as exc:
        raise IndexingError(f"index_put: {exc}") from None
    except ValueError as exc:
        raise ShapeError(f"index_put: {exc}") from None
    return out


# ---- masks ---------------------------------------------------------------------------------------
def _mask(op: str, x: Tensor, mask: Tensor) -> Tensor:
    if not isinstance(mask, Tensor) or mask.dtype is not dtypes.bool_:
        raise DTypeError(f"{op} takes a bool tensor as its mask")
    common_device(x, mask)
    layout.broadcast_shapes(x.shape, mask.shape)
    return mask


def masked_select(x: Tensor, mask: Tensor) -> Tensor:
    """The elements of x (broadcast with mask) where mask is True, as a 1-D tensor."""
    mask = _mask("masked_select", x, mask)
    shape = layout.broadcast_shapes(x.shape, mask.shape)
    return implementation("masked_select", x.device)(x.broadcast_to(shape), mask.broadcast_to(shape))


def _masked_select_ref(x, mask):
    return host(x)[host(mask)]


def masked_scatter(x: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """x with its masked places (row-major order) filled from source's leading elements."""
    mask = _mask("masked_scatter", x, mask)
    source = _source("masked_scatter", x, source, ())
    if layout.broadcast_shapes(x.shape, mask.shape) != x.shape:
        raise ShapeError(f"masked_scatter: mask {mask.shape} does not broadcast to {x.shape}")
    return implementation("masked_scatter", x.device)(x, mask.broadcast_to(x.shape), source)


def _masked_scatter_ref(x, mask, source):
    out, m = host(x).copy(), host(mask)
    count = int(m.sum())
    if count > source.size:
        raise ShapeError(f"masked_scatter: {count} masked places, the source has {source.size} elements")
    out[m] = host(source).reshape(-1)[:count]
    return out


def nonzero(x: Tensor, /) -> tuple[Tensor, ...]:
    """The indices of x's non-zero elements, one 1-D int64 tensor per dim (row-major order)."""
    if x.ndim == 0:
        raise ShapeError("nonzero of a 0-d tensor (the Array API refuses it)")
    found = argwhere(x)
    return tuple(found[:, d] for d in range(x.ndim))


def argwhere(x: Tensor, /) -> Tensor:
    """[count, ndim] int64 indices of x's non-zero elements, row-major."""
    return implementation("argwhere", x.device)(x)


def _argwhere_ref(x):
    return np.argwhere(host(x)).astype(np.int64).reshape(-1, x.ndim)


# ---- searchsorted / bucketize --------------------------------------------------------------------
def searchsorted(x1: Tensor, x2: Tensor, /, *, side: str = "left", sorter: Tensor | None = None) -> Tensor:
    """Where x2's values go in the sorted last dim of x1 (a 1-D x1, or rows matching x2's leading
    dims as torch's): side='left' the first such place, 'right' the last. sorter, when given,
    is argsort(x1) along the last dim; one that does not sort x1 is refused."""
    if side not in ("left", "right"):
        raise ArgumentError(f"searchsorted side {side!r} is neither 'left' nor 'right'")
    if not isinstance(x1, Tensor) or not isinstance(x2, Tensor):
        raise DTypeError("searchsorted takes two tensors")
    common_device(x1, x2, *( [sorter] if sorter is not None else []))
    if x1.ndim == 0:
        raise ShapeError("searchsorted needs a sorted sequence of at least 1 dim")
    if x1.ndim > 1 and x1.shape[:-1] != x2.shape[:-1]:
        raise ShapeError(f"searchsorted: rows {x1.shape[:-1]} do not match the values' {x2.shape[:-1]}")
    if sorter is not None:
        check_index_dtype("searchsorted", sorter)
        if sorter.shape != x1.shape:
            raise ShapeError(f"searchsorted: sorter {sorter.shape} for a sequence of {x1.shape}")
        x1 = take_along_axis(x1, sorter, axis=-1)
    from ..promotion import result_type
    dtype = result_type(x1, x2)
    x1, x2 = x1.to(dtype=dtype), x2.to(dtype=dtype)
    return implementation("searchsorted", x1.device)(x1, x2, side)


def _searchsorted_ref(x1, x2, side):
    a, v = host(x1), host(x2)
    if a.shape[-1] > 1:
        ordered = a[..., :-1] <= a[..., 1:]
        nan_tail = np.isnan(a[..., 1:]) if a.dtype.kind == "f" else False
        if not np.all(ordered | nan_tail):
            raise ArgumentError("searchsorted: the sequence (through its sorter) is not sorted ascending")
    if a.ndim == 1:
        return np.searchsorted(a, v, side=side).astype(np.int64)
    rows_a, rows_v = a.reshape(-1, a.shape[-1]), v.reshape(-1, v.shape[-1] if v.ndim else 1)
    out = np.stack([np.searchsorted(r, w, side=side) for r, w in zip(rows_a, rows_v)]) if rows_a.size else \
        np.zeros(rows_v.shape, np.int64)
    return out.reshape(v.shape).astype(np.int64)


def bucketize(input: Tensor, boundaries: Tensor, *, right: bool = False) -> Tensor:
    """torch.bucketize: the bucket of each value among the sorted 1-D boundaries."""
    if boundaries.ndim != 1:
        raise ShapeError("bucketize takes 1-D boundaries")
    return searchsorted(boundaries, input, side="right" if right else "left")


register_exact("take", _take_ref)
register_exact("take_along_axis", _take_along_ref)
register_exact("index_put", _index_put_ref)
register_exact("masked_select", _masked_select_ref)
register_exact("masked_scatter", _masked_scatter_ref)
register_exact("argwhere", _argwhere_ref, out_dtypes=lambda x: dtypes.INDEX)
register_exact("searchsorted", _searchsorted_ref, out_dtypes=lambda x1, x2, side: dtypes.INDEX)


def _register_scatter():
    from .. import reference
    from ..dispatch import register
    from ._common import wrap
    reference.register("scatter", _scatter_ref)
    register("scatter", "cpu")(lambda x, *args: wrap(_scatter_ref(x, *args), x.dtype))


_register_scatter()

__all__ = ["take", "index_select", "embedding", "take_along_axis", "gather", "scatter", "scatter_add",
           "scatter_reduce", "index_add", "index_copy",
           "index_put", "masked_select", "masked_scatter", "nonzero", "argwhere", "searchsorted",
           "bucketize", "SCATTER_REDUCE", "wrap_checked", "ravel_checked"]
