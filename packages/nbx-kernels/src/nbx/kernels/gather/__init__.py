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

from .. import launch, plans
from ..cost import Cost, declares
from ..plans import Launch, LaunchPlan, Slot
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


def _take_plan(shape, dtype: DType, index_shape, axis: int, device) -> LaunchPlan:
    tiles = launch.tiles("gather", device)
    words = 2 if dtype.itemsize == 16 else 1
    outer, n, inner = prod(shape[:axis]), shape[axis], prod(shape[axis + 1:]) * words
    m = prod(index_shape)
    out_shape = shape[:axis] + tuple(index_shape) + shape[axis + 1:]
    grid = (outer * m, triton.cdiv(inner, tiles["block"]))
    launches = () if prod(out_shape) == 0 else (Launch(
        take_rows_kernel, grid, (Slot("x"), Slot("idx"), Slot("out_bits"), Slot("flag"), n, m, inner),
        dict(BLOCK=tiles["block"], num_warps=tiles["num_warps"])),)
    return LaunchPlan(device, launches, outputs=(plans.output("out", out_shape, dtype),),
                      workspace=(plans.workspace("flag", (1,), dtypes.int32),), copies=("x", "idx"))


def _plan_of_take(x: Tensor, indices: Tensor, axis: int) -> LaunchPlan:
    return plans.cached("take", (x.shape, x.dtype, indices.shape, axis, x.device),
                        lambda: _take_plan(x.shape, x.dtype, indices.shape, axis, x.device))


@implements("take")
def take(x: Tensor, indices: Tensor, axis: int) -> Tensor:
    plan = _plan_of_take(x, indices, axis)
    out = empty(plan.outputs[0].shape, x.dtype, x.device)
    if not plan.launches:
        return out
    flag = new_flag(x.device)
    plans.execute(plan, {"x": as_bits(x.contiguous())[0], "idx": indices, "out": out, "out_bits": as_bits(out)[0],
                         "flag": flag})
    raise_if_flagged("take", flag, x.shape[axis])
    return out


def _last(t: Tensor, axis: int) -> Tensor:
    order = [d for d in range(t.ndim) if d != axis] + [axis]
    return t.permute(order).contiguous()


def _back(t: Tensor, axis: int) -> Tensor:
    order = list(range(t.ndim - 1))
    order.insert(axis, t.ndim - 1)
    return t.permute(order).contiguous()


def _take_along_plan(rows_shape, index_shape, device) -> LaunchPlan:
    tiles = launch.tiles("gather", device)
    n, m = rows_shape[-1], index_shape[-1]
    launches = () if prod(index_shape) == 0 else (Launch(
        take_along_kernel, (prod(index_shape) // m, triton.cdiv(m, tiles["block"])),
        (Slot("x"), Slot("idx"), Slot("out_bits"), Slot("flag"), n, m),
        dict(BLOCK=tiles["block"], num_warps=tiles["num_warps"])),)
    return LaunchPlan(device, launches, workspace=(plans.workspace("flag", (1,), dtypes.int32),))


@implements("take_along_axis")
def take_along_axis(x: Tensor, indices: Tensor, axis: int) -> Tensor:
    if x.dtype.itemsize == 16:
        raise NotSupportedError("take_along_axis of complex128 has no kernel yet (its elements are two words)")
    rows_x, idx = _last(x, axis), _last(indices, axis)
    out = empty(idx.shape, x.dtype, x.device)
    plan = plans.cached("take_along_axis", (rows_x.shape, idx.shape, x.device),
                        lambda: _take_along_plan(rows_x.shape, idx.shape, x.device))
    if plan.launches:
        flag = new_flag(x.device)
        plans.execute(plan, {"x": as_bits(rows_x)[0], "idx": idx, "out_bits": as_bits(out)[0], "flag": flag})
        raise_if_flagged("take_along_axis", flag, x.shape[axis])
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


def _scatter_plan(rows_shape, dtype: DType, k: int, reduce, include_self: bool, device) -> LaunchPlan:
    tiles = launch.tiles("gather", device)
    n = rows_shape[-1]
    block = max(16, min(64, tiles["block"] // 16))
    work = dtype if reduce is None else dtypes.float32 if dtype.kind == "float" and dtype.itemsize < 4 \
        else dtypes.int32 if dtype is dtypes.bool_ else dtype
    combine = COMBINERS["sum" if reduce in (None, "mean") else reduce]
    grid = (prod(rows_shape) // n, triton.cdiv(n, block))
    return LaunchPlan(device, (Launch(
        scatter_rows_kernel, grid, (Slot("rows"), Slot("idx"), Slot("src"), Slot("counts"), Slot("flag"), n, k),
        dict(BLOCK_P=block, BLOCK_J=block, REDUCE=0 if reduce is None else 1, INCLUDE_SELF=include_self,
             IDENTITY=_identity(reduce or "sum", work), COMBINE=combine,
             COMPUTE=tl_type(work) if reduce is None else compute_type(work), num_warps=tiles["num_warps"])),),
        workspace=(plans.workspace("flag", (1,), dtypes.int32),), copies=("idx", "src"))


@implements("scatter")
def scatter(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce, include_self: bool) -> Tensor:
    if x.dtype.is_complex:
        raise DTypeError("scatter of complex tensors has no kernel (Triton has no complex type)")
    out = x.clone()
    region = out[tuple(slice(None) if d == dim else slice(0, s) for d, s in enumerate(index.shape))]
    rows = _last(region, dim)
    idx, updates = _last(index, dim), _last(src, dim)
    n, k = x.shape[dim], index.shape[dim]
    if rows.size == 0 or k == 0:
        return out
    plan = plans.cached("scatter", (rows.shape, x.dtype, k, reduce, include_self, x.device),
                        lambda: _scatter_plan(rows.shape, x.dtype, k, reduce, include_self, x.device))
    counts = empty(rows.shape, dtypes.int32, x.device) if reduce == "mean" else None
    flag = new_flag(x.device)
    plans.execute(plan, {"rows": rows, "idx": idx, "src": updates, "counts": counts, "flag": flag})
    raise_if_flagged("scatter", flag, n)
    if reduce == "mean":
        from nbx.core.ops.elementwise import where
        denom = (counts + int(include_self)).to(dtype=x.dtype)
        divided = rows / denom if x.dtype.kind == "float" else rows // denom
        rows = where(counts > 0, divided.to(dtype=x.dtype), rows)
    region._copy_from(_back(rows, dim))
    return out


def _plan_cost(plan: LaunchPlan, read: int, notes=()) -> Cost:
    written = sum(b.nbytes for b in plan.outputs)
    return Cost(buffers=plan.buffers(), bytes_moved=read + written, launches=len(plan.launches), notes=tuple(notes))


@declares("take")
def _take_cost(x: Tensor, indices: Tensor, axis: int = 0) -> Cost:
    plan = _plan_of_take(x, indices, axis)
    copy = () if x.is_contiguous() else ("a non-contiguous x is copied first",)
    return _plan_cost(plan, plan.outputs[0].nbytes + indices.nbytes, copy)


@declares("take_along_axis")
def _take_along_cost(x: Tensor, indices: Tensor, axis: int = -1) -> Cost:
    out = indices.size * x.dtype.itemsize
    return Cost(buffers=(plans.output("out", indices.shape, x.dtype).buffer(),
                         plans.workspace("flag", (1,), dtypes.int32).buffer()),
                bytes_moved=2 * out + indices.nbytes, notes=("x and indices are made axis-last contiguous first",))


@declares("scatter")
def _scatter_cost(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce=None, include_self=True) -> Cost:
    return Cost(buffers=(plans.output("out", x.shape, x.dtype).buffer(),
                         plans.workspace("flag", (1,), dtypes.int32).buffer()),
                bytes_moved=2 * x.nbytes + index.nbytes + index.size * x.dtype.itemsize, launches=4,
                notes=("the clone, the axis-last region copies in and out, the scatter",))


__all__ = ["take", "take_along_axis", "scatter", "as_bits"]
