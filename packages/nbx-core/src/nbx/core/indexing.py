"""__getitem__ and __setitem__: basic indices make views; integer arrays and masks gather.

Basic indices are ints, slices with any step (negative steps and bounds included), None and
Ellipsis. Integer-array and boolean-mask indices run on the CPU (numpy's semantics); on other
devices they need the gather kernels and are refused by name until those exist.
"""
from __future__ import annotations

import numpy as np

from . import layout
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
    return t._view(shape, strides, offset)


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


def getitem(t: Tensor, key) -> Tensor:
    key = _as_tuple(key)
    if not any(_is_advanced(k) for k in key):
        return basic_view(t, key)
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
