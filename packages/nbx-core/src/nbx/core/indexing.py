"""__getitem__ and __setitem__: basic indices make views; integer arrays and masks gather.

Basic indices are ints, slices with any step (negative steps and bounds included), None and
Ellipsis. Integer-array and boolean-mask indices follow numpy's semantics on host memory (cpu,
interp). On other devices one integer array among basic indices is a take along its dim (the
gather kernel, numpy's transposition rule kept), a boolean mask over the leading dims a take at
its True positions, integer arrays over the leading dims one take of them raveled, and
`x[..., index, ...] = v` with one 1-D integer array an index_copy; other keys with arrays (arrays
between slices, masks placed elsewhere, masked assignment) are refused by name there.
"""
from __future__ import annotations

import numpy as np

from . import deferred_checks, layout
from .errors import CrossDeviceError, IndexingError, NotSupportedError
from .tensor import Tensor


def _is_advanced(item) -> bool:
    if isinstance(item, Tensor):
        return not (item.ndim == 0 and item.dtype.is_integer)
    return isinstance(item, (list, np.ndarray, bool, np.bool_))


def _as_tuple(key) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def basic_view(t: Tensor, key: tuple) -> Tensor:
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexingError("an index may hold at most one Ellipsis")
    if consumed > t.ndim:
        raise IndexingError(f"too many indices ({consumed}) for a tensor of {t.ndim} dims")
    shape, strides, offset, dim = [], [], t.storage_offset, 0
    for item in key:
        if item is Ellipsis:
            for _ in range(t.ndim - consumed):
                shape.append(t.shape[dim])
                strides.append(t.strides[dim])
                dim += 1
        elif item is None:
            shape.append(1)
            strides.append(0)
        elif isinstance(item, slice):
            size, stride, start = layout.slice_dim(t.shape[dim], t.strides[dim], item)
            shape.append(size)
            strides.append(stride)
            offset += start
            dim += 1
        elif hasattr(item, "__index__"):
            index, size = item.__index__(), t.shape[dim]
            if not -size <= index < size:
                raise IndexingError(f"index {index} is out of bounds for dim {dim} of size {size}")
            offset += (index % size) * t.strides[dim]
            dim += 1
        else:
            raise IndexingError(f"{type(item).__name__} is not a valid index")
    shape += t.shape[dim:]
    strides += t.strides[dim:]
    # ints throughout (slice_dim's, the tensor's own): the view needs no second validation
    return Tensor._of(t._storage, t.dtype, tuple(shape), tuple(strides), offset)


def _host_key(t: Tensor, key: tuple) -> tuple:
    if t.storage.host is None:
        raise NotSupportedError(
            f"integer-array and boolean-mask indexing on {t.device} needs the gather kernels, "
            f"which are not implemented yet; index on the cpu or use basic indices")
    out = []
    for item in key:
        if isinstance(item, Tensor):
            if item.device != t.device:
                raise CrossDeviceError(f"index on {item.device} for a tensor on {t.device}")
            item = item.numpy()
        out.append(item)
    return tuple(out)


def _leading_mask_take(t: Tensor, key: tuple, mask: Tensor):
    """x[mask] (mask over x's leading dims, the rest whole): a take of the flattened leading dims
    at the mask's True positions; None for a mask placed otherwise."""
    rest = key[1:]
    if key[0] is not mask or mask.ndim == 0 or mask.shape != t.shape[:mask.ndim] or \
            any(not (k is Ellipsis or k == slice(None)) for k in rest):
        return None
    from .ops.gather import nonzero, take
    return take(t.reshape(-1, *t.shape[mask.ndim:]), nonzero(mask.reshape(-1))[0], axis=0)


def _leading_arrays_take(t: Tensor, key: tuple):
    """x[i0, i1, ...] (integer tensors over the leading dims, the rest whole): one take of the
    leading dims flattened, at the broadcast indices raveled; None for a key of another kind."""
    arrays = [k for k in key if isinstance(k, Tensor)]
    n = len(arrays)
    if n < 2 or n > t.ndim or any(not isinstance(k, Tensor) or not k.dtype.is_integer for k in key[:n]) or \
            any(not (k is Ellipsis or k == slice(None)) for k in key[n:]):
        return None
    from . import layout
    from .ops.gather import ravel_checked, take
    shape = layout.broadcast_shapes(*(a.shape for a in arrays))
    return take(t.reshape(-1, *t.shape[n:]), ravel_checked("getitem", arrays, t.shape[:n], shape), axis=0)


def _one_array_take(t: Tensor, key: tuple):
    """x[..., array, ...] with one integer array among basic indices, as a take of the basic view;
    None when the key is of another kind."""
    from .ops.creation import asarray
    arrays = [i for i, k in enumerate(key) if _is_advanced(k)]
    if len(arrays) > 1:
        return _leading_arrays_take(t, key)
    if len(arrays) != 1:
        return None
    where, index = arrays[0], key[arrays[0]]
    if isinstance(index, (list, np.ndarray)):
        index = asarray(index, device=t.device)
    if isinstance(index, Tensor) and index.dtype.kind == "bool":
        return _leading_mask_take(t, key, index)
    if not isinstance(index, Tensor) or not index.dtype.is_integer:
        return None
    view = basic_view(t, key[:where] + (slice(None),) + key[where + 1:])
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    dim = sum(1 if k is None or isinstance(k, slice) else t.ndim - consumed if k is Ellipsis else 0
              for k in key[:where])
    from .ops.gather import take
    out = take(view, index, axis=dim)
    ints = [i for i, k in enumerate(key) if not isinstance(k, slice) and k is not None and k is not Ellipsis]
    if ints != list(range(ints[0], ints[-1] + 1)) and dim:  # separated advanced indices: their dims go first
        moved = list(range(dim, dim + index.ndim))
        out = out.permute(moved + [d for d in range(out.ndim) if d not in moved])
    return out


def _one_array_put(t: Tensor, key: tuple, value) -> bool:
    """x[..., index, ...] = value for one 0-d or 1-D integer index among basic indices with no
    int beside it: an index_copy of the basic view (the last duplicate wins, as numpy's), written
    back only once every index has been checked. False when the key is of another kind."""
    from .ops.creation import asarray
    from .ops.gather import index_copy
    arrays = [i for i, k in enumerate(key) if _is_advanced(k)]
    plain = all(isinstance(k, slice) or k is None or k is Ellipsis for i, k in enumerate(key) if i not in arrays)
    if len(arrays) != 1 or not plain:
        return False
    where, index = arrays[0], key[arrays[0]]
    if isinstance(index, (list, np.ndarray)):
        index = asarray(index, device=t.device)
    if not isinstance(index, Tensor) or not index.dtype.is_integer or index.ndim > 1:
        return False
    view = basic_view(t, key[:where] + (slice(None),) + key[where + 1:])
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    dim = sum(1 if k is None or isinstance(k, slice) else t.ndim - consumed for k in key[:where])
    flat = index.reshape(-1)
    shape = view.shape[:dim] + (flat.shape[0],) + view.shape[dim + 1:]
    src = value if isinstance(value, Tensor) else asarray(value, dtype=t.dtype, device=t.device)
    src = src.to(dtype=t.dtype) if src.dtype is not t.dtype else src
    if index.ndim == 0:
        src = src.unsqueeze(dim) if src.ndim == len(shape) - 1 else src
    written = index_copy(view, dim, flat, src.broadcast_to(shape).contiguous())
    deferred_checks.check(t.device)  # a sync: a refused assignment leaves t unchanged (none inside a step)
    view._copy_from(written)
    return True


def getitem(t: Tensor, key) -> Tensor:
    key = _as_tuple(key)
    if not any(_is_advanced(k) for k in key):
        return basic_view(t, key)
    if t.storage.host is None:
        taken = _one_array_take(t, key)
        if taken is not None:
            return taken
    from .tensor import from_numpy
    try:
        result = t._host_view()[_host_key(t, key)]
    except IndexError as exc:
        raise IndexingError(str(exc)) from None
    return from_numpy(np.array(result, copy=True), t.device)


def setitem(t: Tensor, key, value) -> None:
    from .ops.creation import asarray
    if t.storage.readonly:
        raise NotSupportedError("this tensor's storage is read-only (a memory-mapped file or a read-only array)")
    key = _as_tuple(key)
    if isinstance(value, Tensor) and value.device != t.device:
        raise CrossDeviceError(f"assigning a tensor on {value.device} into a tensor on {t.device}; copy it with .to()")
    if any(_is_advanced(k) for k in key) and t.storage.host is None and _one_array_put(t, key, value):
        return
    if any(_is_advanced(k) for k in key):
        host_key = _host_key(t, key)
        src = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
        try:
            t._host_view()[host_key] = src.astype(t.dtype.host)
        except IndexError as exc:
            raise IndexingError(str(exc)) from None
        return
    target = basic_view(t, key)
    src = value if isinstance(value, Tensor) else asarray(value, dtype=t.dtype, device=t.device)
    if src.dtype is not t.dtype:
        src = src.to(dtype=t.dtype)
    target._copy_from(src.broadcast_to(target.shape))
