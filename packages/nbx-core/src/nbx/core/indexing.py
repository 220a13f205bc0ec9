"""__getitem__ and __setitem__: basic indices make views; integer arrays and masks gather.

Basic indices are ints, slices with any step (negative steps and bounds included), None and
Ellipsis. Integer-array and boolean-mask indices follow numpy's semantics everywhere: on the cpu
through numpy itself, on every other device (interp included, so its tests run the kernels) as
the gather kernels: one array a take along its dim, several (a mask is its nonzero's arrays) one
take of their dims raveled, and assignment an index_copy of the same, written back once every
index is checked; numpy's transposition rule (separated advanced indices put theirs first) kept.
"""
from __future__ import annotations

from math import prod

import numpy as np

from . import deferred_checks, layout
from .errors import CrossDeviceError, IndexingError, NbxError, NotSupportedError
from .tensor import Tensor


def _is_advanced(item) -> bool:
    if isinstance(item, Tensor):
        return not (item.ndim == 0 and item.dtype.is_integer)
    if isinstance(item, np.ndarray):   # a 0-d integer array indexes as an int, as numpy's
        return not (item.ndim == 0 and item.dtype.kind in "iu")
    return isinstance(item, (list, bool, np.bool_))


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
    out = []
    for item in key:
        if isinstance(item, Tensor):
            if item.device != t.device:
                raise CrossDeviceError(f"index on {item.device} for a tensor on {t.device}")
            item = item.numpy()
        out.append(item)
    return tuple(out)


def _merged_dims(t: Tensor, first: int, count: int) -> Tensor | None:
    """t with dims [first, first + count) as one (a view), where their strides allow it; else None."""
    last = first + count
    merged = t.shape[:first] + (prod(t.shape[first:last]),) + t.shape[last:]
    strides = layout.view_strides(t.shape, t.strides, merged)
    return None if strides is None else Tensor._of(t._storage, t.dtype, merged, tuple(strides), t._offset)


class _Advanced:
    """A key with integer arrays or masks, on t's device (numpy's rules): view is t under the key's
    basic entries with each array's dim kept whole (ints stay basic: a 0-d array selects as an int
    does); arrays index the view dims `dims`, in order (a mask of k dims is k arrays, its nonzero; a
    0-d mask a new dim of size 1 indexed by its nonzero); their broadcast shape goes at `at` among
    the view's other dims: the first advanced entry's place when the advanced entries (ints among
    them) are adjacent in the key, else first."""

    def __init__(self, t: Tensor, key: tuple):
        from .ops.creation import asarray
        from .ops.gather import nonzero
        items = []
        for k in key:
            if isinstance(k, list) and np.size(k) == 0:   # numpy reads an empty list as integer indices
                k = np.asarray(k, dtype=np.int64)
            if isinstance(k, (list, np.ndarray, bool, np.bool_)) and _is_advanced(k):   # a 0-d int stays an int
                k = asarray(k, device=t.device)
            if isinstance(k, Tensor) and k.device != t.device:
                raise CrossDeviceError(f"index on {k.device} for a tensor on {t.device}")
            if isinstance(k, Tensor) and _is_advanced(k) and not (k.dtype.is_integer or k.dtype.kind == "bool"):
                raise IndexingError(f"arrays used as indices must be of integer or bool type, not {k.dtype.name}")
            items.append(k)
        if sum(1 for k in items if k is Ellipsis) > 1:
            raise IndexingError("an index may hold at most one Ellipsis")
        consumed = sum(k.ndim if isinstance(k, Tensor) and k.dtype.kind == "bool" else 0 if k is None or k is Ellipsis
                       else 1 for k in items)
        if consumed > t.ndim:
            raise IndexingError(f"too many indices ({consumed}) for a tensor of {t.ndim} dims")
        basic, self.arrays, self.dims, placed = [], [], [], []
        view_dims = 0   # dims the basic key has made so far
        for pos, k in enumerate(items):
            if k is Ellipsis:
                basic += [slice(None)] * (t.ndim - consumed)
                view_dims += t.ndim - consumed
            elif k is None or isinstance(k, slice):
                basic.append(k)
                view_dims += 1
            elif not _is_advanced(k):   # an int: basic, but an advanced entry for the placement rule
                basic.append(k)
                placed.append((pos, view_dims))
            elif k.dtype.kind == "bool":
                placed.append((pos, view_dims))
                if k.ndim == 0:   # x[True] / x[False]: a new dim of 1, all or none of it
                    basic.append(None)
                    self.arrays.append(nonzero(k.reshape(1))[0])
                    self.dims.append(view_dims)
                    view_dims += 1
                    continue
                at = len(basic) - sum(1 for b in basic if b is None)
                if k.shape != t.shape[at:at + k.ndim]:
                    raise IndexingError(f"a boolean index of shape {k.shape} for dims of sizes {t.shape[at:at + k.ndim]}")
                merged = _merged_dims(t, at, k.ndim) if k.ndim > 1 else None
                if merged is not None:   # one array over the dims as one (one take, no ravel of k arrays)
                    consumed -= k.ndim - 1
                    t, k = merged, k.reshape(-1)
                basic += [slice(None)] * k.ndim
                self.arrays += nonzero(k)
                self.dims += range(view_dims, view_dims + k.ndim)
                view_dims += k.ndim
            else:
                placed.append((pos, view_dims))
                basic.append(slice(None))
                self.arrays.append(k)
                self.dims.append(view_dims)
                view_dims += 1
        self.view = basic_view(t, tuple(basic))
        try:
            self.shape = layout.broadcast_shapes(*(a.shape for a in self.arrays))
        except NbxError:
            raise IndexingError("shape mismatch: indexing arrays could not be broadcast together with shapes "
                                + " ".join(str(a.shape) for a in self.arrays)) from None
        positions = [p for p, _ in placed]
        adjacent = positions == list(range(positions[0], positions[-1] + 1))
        self.at = placed[0][1] if adjacent else 0
        self.rest = [d for d in range(self.view.ndim) if d not in self.dims]

    def result_shape(self) -> tuple:
        rest = tuple(self.view.shape[d] for d in self.rest)
        return rest[:self.at] + self.shape + rest[self.at:]

    def flat_index(self, op: str) -> Tensor:
        from .ops.gather import ravel_checked
        return ravel_checked(op, self.arrays, [self.view.shape[d] for d in self.dims], self.shape)

    def leading(self) -> Tensor:
        """The view with the arrays' dims first, in order (a view of t)."""
        return self.view.permute(self.dims + self.rest)


def _move(x: Tensor, start: int, count: int, to: int) -> Tensor:
    """x with its dims [start, start + count) moved to begin at `to` (the others in order)."""
    if start == to:
        return x
    others = [d for d in range(x.ndim) if not start <= d < start + count]
    return x.permute(others[:to] + list(range(start, start + count)) + others[to:])


def _device_take(t: Tensor, key: tuple) -> Tensor:
    from .ops.gather import take
    adv = _Advanced(t, key)
    nb = len(adv.shape)
    if len(adv.arrays) == 1:   # a take along its dim: no copy of the view
        d = adv.dims[0]
        return _move(take(adv.view, adv.arrays[0], axis=d), d, nb, adv.at)
    lead = adv.leading()
    flat = lead.reshape(prod(lead.shape[:len(adv.dims)]), *lead.shape[len(adv.dims):])
    return _move(take(flat, adv.flat_index("getitem"), axis=0), 0, nb, adv.at)


def _device_put(t: Tensor, key: tuple, value) -> None:
    """An index_copy (the last duplicate wins, as numpy's) of the view, written back only once
    every index has been checked (a refused assignment leaves t unchanged)."""
    from .ops.creation import asarray
    from .ops.gather import index_copy
    adv = _Advanced(t, key)
    src = value if isinstance(value, Tensor) else asarray(value, dtype=t.dtype, device=t.device)
    src = src.to(dtype=t.dtype) if src.dtype is not t.dtype else src
    src = src.broadcast_to(adv.result_shape())
    if src.size == 0:
        return
    nb = len(adv.shape)
    if len(adv.arrays) == 1:
        d, view = adv.dims[0], adv.view
        src = _move(src, adv.at, nb, d).contiguous()
        src = src.reshape(*view.shape[:d], prod(adv.shape), *view.shape[d + 1:])
        written = index_copy(view, d, adv.arrays[0].reshape(-1), src)
    else:
        view = adv.leading()
        lead, rest = prod(view.shape[:len(adv.dims)]), view.shape[len(adv.dims):]
        src = _move(src, adv.at, nb, 0).contiguous().reshape(prod(adv.shape), *rest)
        written = index_copy(view.reshape(lead, *rest), 0, adv.flat_index("setitem").reshape(-1), src)
        written = written.reshape(view.shape)
    deferred_checks.check(t.device)  # a sync (none inside a step)
    view._copy_from(written)


def getitem(t: Tensor, key) -> Tensor:
    key = _as_tuple(key)
    if not any(_is_advanced(k) for k in key):
        return basic_view(t, key)
    if t.device.type != "cpu":
        return _device_take(t, key)
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
    if any(_is_advanced(k) for k in key) and t.device.type != "cpu":
        _device_put(t, key, value)
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
