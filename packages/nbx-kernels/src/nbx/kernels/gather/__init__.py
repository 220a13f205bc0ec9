"""take / embedding / index_select, take_along_axis / gather, and scatter on Triton kernels.

A gather moves bits: x is read as the unsigned integer of its itemsize (any dtype of the table,
bool, float8 and complex64 included; complex128 as two uint64 words), so one compiled kernel
serves every dtype of a size. Bounds are checked on the device: a flag the kernel raises for an
index outside [-n, n) is read back after the launch (4 bytes and a stream synchronization) and
turned into IndexingError; the kernel never dereferences such an index. Scatters are out of place
into a fresh copy, so a refused call leaves nothing changed.
"""
from __future__ import annotations

from math import prod

import triton

from nbx.core import dtypes
from nbx.core.dtypes import DType
from nbx.core.errors import DTypeError, IndexingError, NotSupportedError
from nbx.core.tensor import Tensor, empty

from .. import launch
from ..cost import LAUNCH, Buffer, Cost, declares
from ..registry import implements
from ..types import compute_type, tl_type
from .kernel import COMBINERS, scatter_rows_kernel, take_along_kernel, take_rows_kernel

_BITS = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def as_bits(x: Tensor) -> tuple[Tensor, int]:
    """A contiguous x viewed as unsigned words of its itemsize (complex128: two uint64 words an
    element, a trailing dim of 2), and how many words an element takes."""
    words = 2 if x.dtype.itemsize == 16 else 1
    word = _BITS[x.dtype.itemsize // words]
    shape = x.shape + ((2,) if words == 2 else ())
    return Tensor(x.storage, word, shape, None, x.storage_offset * words), words


def new_flag(device) -> Tensor:
    from nbx.core.ops.creation import zeros
    return zeros(1, dtype=dtypes.int32, device=device)


def raise_if_flagged(op: str, flag: Tensor, size: int) -> None:
    if flag.numpy()[0]:
        raise IndexingError(f"{op}: an index is out of range for a dim of size {size}")


@implements("take")
def take(x: Tensor, indices: Tensor, axis: int) -> Tensor:
    tiles = launch.tiles("gather", x.device)
    bits, words = as_bits(x.contiguous())
    outer, n, inner = prod(x.shape[:axis]), x.shape[axis], prod(x.shape[axis + 1:]) * words
    idx = indices.contiguous()
    m = idx.size
    out = empty(x.shape[:axis] + indices.shape + x.shape[axis + 1:], x.dtype, x.device)
    if out.size == 0:
        return out
    flag = new_flag(x.device)
    grid = (outer * m, triton.cdiv(inner, tiles["block"]))
    launch.run(take_rows_kernel, grid, x.device, bits, idx, as_bits(out)[0], flag, n, m, inner,
               BLOCK=tiles["block"], num_warps=tiles["num_warps"])
    raise_if_flagged("take", flag, n)
    return out


def _last(t: Tensor, axis: int) -> Tensor:
    order = [d for d in range(t.ndim) if d != axis] + [axis]
    return t.permute(order).contiguous()


def _back(t: Tensor, axis: int) -> Tensor:
    order = list(range(t.ndim - 1))
    order.insert(axis, t.ndim - 1)
    return t.permute(order).contiguous()


@implements("take_along_axis")
def take_along_axis(x: Tensor, indices: Tensor, axis: int) -> Tensor:
    if x.dtype.itemsize == 16:
        raise NotSupportedError("take_along_axis of complex128 has no kernel yet (its elements are two words)")
    tiles = launch.tiles("gather", x.device)
    rows_x, idx = _last(x, axis), _last(indices, axis)
    n, m = x.shape[axis], indices.shape[axis]
    out = empty(idx.shape, x.dtype, x.device)
    if out.size == 0:
        return _back(out, axis)
    flag = new_flag(x.device)
    grid = (out.size // m, triton.cdiv(m, tiles["block"]))
    launch.run(take_along_kernel, grid, x.device, as_bits(rows_x)[0], idx, as_bits(out)[0], flag, n, m,
               BLOCK=tiles["block"], num_warps=tiles["num_warps"])
    raise_if_flagged("take_along_axis", flag, n)
    return _back(out, axis)


def _identity(reduce: str, dtype: DType):
    if reduce == "sum" or reduce == "mean":
        return 0
    if reduce == "prod":
        return 1
    high = reduce == "amin"
    if dtype.kind == "float":
        return float("inf") if high else float("-inf")
    info = dtypes.iinfo(dtype) if dtype.kind != "bool" else None
    if info is None:
        return int(high)
    return info.max if high else info.min


@implements("scatter")
def scatter(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce, include_self: bool) -> Tensor:
    if x.dtype.is_complex:
        raise DTypeError("scatter of complex tensors has no kernel (Triton has no complex type)")
    tiles = launch.tiles("gather", x.device)
    out = x.clone()
    region = out[tuple(slice(None) if d == dim else slice(0, s) for d, s in enumerate(index.shape))]
    rows = _last(region, dim)
    idx, updates = _last(index, dim), _last(src, dim)
    n, k = x.shape[dim], index.shape[dim]
    if rows.size == 0 or k == 0:
        return out
    block = max(16, min(64, tiles["block"] // 16))
    counts = empty(rows.shape, dtypes.int32, x.device) if reduce == "mean" else None
    flag = new_flag(x.device)
    work = x.dtype if reduce is None else dtypes.float32 if x.dtype.kind == "float" and x.dtype.itemsize < 4 \
        else dtypes.int32 if x.dtype is dtypes.bool_ else x.dtype
    combine = COMBINERS["sum" if reduce == "mean" else reduce] if reduce else COMBINERS["sum"]
    grid = (rows.size // n, triton.cdiv(n, block))
    launch.run(scatter_rows_kernel, grid, x.device, rows, idx, updates, counts, flag, n, k,
               BLOCK_P=block, BLOCK_J=block, REDUCE=0 if reduce is None else 1, INCLUDE_SELF=include_self,
               IDENTITY=_identity(reduce or "sum", work), COMBINE=combine,
               COMPUTE=tl_type(work) if reduce is None else compute_type(work), num_warps=tiles["num_warps"])
    raise_if_flagged("scatter", flag, n)
    if reduce == "mean":
        from nbx.core.ops.elementwise import where
        denom = (counts + int(include_self)).to(dtype=x.dtype)
        divided = rows / denom if x.dtype.kind == "float" else rows // denom
        rows = where(counts > 0, divided.to(dtype=x.dtype), rows)
    region._copy_from(_back(rows, dim))
    return out


def _gather_cost(out_bytes: int, read: int, notes=()) -> Cost:
    return Cost(buffers=(Buffer("out", out_bytes), Buffer("flag", 4, LAUNCH)), bytes_moved=read + out_bytes,
                notes=tuple(notes))


@declares("take")
def _take_cost(x: Tensor, indices: Tensor, axis: int = 0) -> Cost:
    row = x.nbytes // max(x.shape[axis], 1)
    out = row * indices.size
    copy = () if x.is_contiguous() else ("a non-contiguous x is copied first",)
    return _gather_cost(out, out + indices.nbytes, copy)


@declares("take_along_axis")
def _take_along_cost(x: Tensor, indices: Tensor, axis: int = -1) -> Cost:
    out = indices.size * x.dtype.itemsize
    return _gather_cost(out, out + indices.nbytes, ("x and indices are made axis-last contiguous first",))


@declares("scatter")
def _scatter_cost(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce=None, include_self=True) -> Cost:
    return Cost(buffers=(Buffer("out", x.nbytes), Buffer("flag", 4, LAUNCH)),
                bytes_moved=2 * x.nbytes + index.nbytes + index.size * x.dtype.itemsize, launches=4,
                notes=("the clone, the axis-last region copies in and out, the scatter",))


__all__ = ["take", "take_along_axis", "scatter", "as_bits"]
