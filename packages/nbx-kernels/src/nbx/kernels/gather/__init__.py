"""take / embedding / index_select, take_along_axis / gather, and scatter on Triton kernels.

A gather moves bits: x is read as the unsigned integer of its itemsize (any dtype of the table,
bool, float8 and complex64 included; complex128 as two uint64 words), so one compiled kernel
serves every dtype of a size. Bounds are checked on the device without a host synchronization:
a kernel masks an index outside [-n, n) and raises the device's pending record, which the host
reads at its next synchronization (nbx.core.deferred_checks: an IndexingError then, as a GPU's
asynchronous errors surface). Scatters are out of place into a fresh copy. A sum or mean scatter
(scatter_add, index_add, index_put(accumulate=True)) is one atomic add an update; the others
(last wins, prod, amax, amin) fold each place's updates in order (deterministic, no atomics).
"""
from __future__ import annotations

from math import prod

import triton

from nbx.core import deferred_checks, dtypes
from nbx.core.deferred_checks import OP_CODES, TAG_SHIFT
from nbx.core.dtypes import DType
from nbx.core.errors import DTypeError, NotSupportedError
from nbx.core.ops.creation import asarray
from nbx.core.tensor import Tensor, empty

from .. import launch, plans
from ..cost import Cost, declares
from ..plans import Launch, LaunchPlan, Slot
from ..registry import implements
from ..types import compute_type, tl_type
from .kernel import (COMBINE_CODES, compact_kernel, scatter_add_kernel, scatter_rows_kernel, searchsorted_kernel,
                     take_along_kernel, take_rows_kernel)
from .tuning import TAKE, take_setting

_BITS = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
TAGS = {op: code << TAG_SHIFT for op, code in OP_CODES.items()}  # what each op's kernel writes in the record


def word_of(dtype) -> DType:
    """The unsigned word a copy moves for elements of dtype: of its itemsize (complex128: uint64, two
    an element). The copies' launch keys hold it as their dtype."""
    return _BITS[min(dtype.itemsize, 8)]


def as_bits(x: Tensor) -> tuple[Tensor, int]:
    """x (any layout) viewed as unsigned words of its itemsize (complex128: two uint64 words an
    element, a trailing dim of 2), and how many words an element takes (x's layout is valid
    already: no new validation)."""
    words = 2 if x.dtype.itemsize == 16 else 1
    word = _BITS[x.dtype.itemsize // words]   # word_of(x.dtype), inline: a call more on every take (test_launch_direct)
    if words == 1:
        return Tensor._of(x.storage, word, x.shape, x.strides, x.storage_offset), 1
    return Tensor._of(x.storage, word, x.shape + (2,), tuple(2 * s for s in x.strides) + (1,),
                      x.storage_offset * 2), 2


def row_tile(inner: int, per_program: int) -> tuple[int, int]:
    """(ROWS, COLS) of a program taking per_program elements of rows `inner` wide: one row's run of
    columns (a power of two) or several short rows."""
    cols = min(triton.next_power_of_2(max(inner, 1)), triton.next_power_of_2(max(per_program, 1)))
    return max(1, per_program // cols), cols


def _take_plan(shape, strides, dtype: DType, index_shape, index_dense: bool, axis: int, device,
               setting=None) -> LaunchPlan:
    words = 2 if dtype.itemsize == 16 else 1
    outer, n, inner = prod(shape[:axis]), shape[axis], prod(shape[axis + 1:]) * words
    m = prod(index_shape)
    out_shape = shape[:axis] + tuple(index_shape) + shape[axis + 1:]
    if setting is not None:
        tiles = setting
    elif prod(out_shape):  # the served tile of this launch's key (certified, a neighbour's, or the device file's)
        tiles = take_setting(device, inner * (dtype.itemsize // words), outer * m)
    else:
        tiles = launch.tiles("gather", device)  # nothing launches
    rows_per, cols = row_tile(inner, tiles["row_bytes"] // (dtype.itemsize // words))  # row_bytes a program
    grid = (triton.cdiv(outer * m, rows_per), triton.cdiv(inner, cols))
    launches = () if prod(out_shape) == 0 else (Launch(
        take_rows_kernel, grid, (Slot("x"), Slot("idx"), Slot("out"), Slot("flag"), n, m, outer * m, inner),
        dict(ROWS=rows_per, COLS=cols, TAG=TAGS["take"], num_warps=tiles["num_warps"])),)
    from nbx.core import layout
    dense_x = layout.is_contiguous(shape, strides)
    copies = (() if dense_x else ("x",)) + (() if index_dense else ("idx",))
    # the runtime allocates the output as words (no per-call validation); take views it as dtype
    bits = plans.output("out", out_shape + ((2,) if words == 2 else ()), _BITS[dtype.itemsize // words])
    return LaunchPlan(device, launches, outputs=(bits,), copies=copies,
                      detail=(rows_per, cols, out_shape, layout.contiguous_strides(out_shape)))


def _plan_of_take(x: Tensor, indices: Tensor, axis: int, setting=None) -> LaunchPlan:
    """One cache lookup a call: the signature holds the layouts, so the plan knows what is dense."""
    signature = (x.shape, x.strides, x.dtype, indices.shape, indices.strides, axis, x.device,
                 plans.setting_key(setting))
    return plans.cached("take", signature, lambda: _take_plan(x.shape, x.strides, x.dtype, indices.shape,
                                                             indices.is_contiguous(), axis, x.device, setting))


def launch_take(x: Tensor, indices: Tensor, axis: int, setting=None, out: Tensor | None = None) -> Tensor:
    """take's launch; `setting` (the certifier's) overrides the served tile, `out` (a dense tensor of
    the result's shape and x's dtype) receives it."""
    plan = _plan_of_take(x, indices, axis, setting)
    flag = deferred_checks.flag_for(x.device, "take", x.shape[axis]) if plan.launches else None
    words = plans.execute(plan, {"x": as_bits(x)[0], "idx": indices, "flag": flag,
                                 "out": None if out is None else as_bits(out)[0]})["out"]
    _, _, shape, strides = plan.detail
    return Tensor._of(words.storage, x.dtype, shape, strides)


@implements("take")
def take(x: Tensor, indices: Tensor, axis: int) -> Tensor:
    return launch_take(x, indices, axis)


def axis_last(t: Tensor, axis: int) -> Tensor:
    order = [d for d in range(t.ndim) if d != axis] + [axis]
    return t.permute(order).contiguous()


def axis_back(t: Tensor, axis: int) -> Tensor:
    order = list(range(t.ndim - 1))
    order.insert(axis, t.ndim - 1)
    return t.permute(order).contiguous()


def _take_along_plan(rows_shape, index_shape, device) -> LaunchPlan:
    tiles = launch.tiles("gather", device)
    n, m = rows_shape[-1], index_shape[-1]
    launches = () if prod(index_shape) == 0 else (Launch(
        take_along_kernel, (prod(index_shape) // m, triton.cdiv(m, tiles["block"])),
        (Slot("x"), Slot("idx"), Slot("out_bits"), Slot("flag"), n, m),
        dict(BLOCK=tiles["block"], TAG=TAGS["take_along_axis"], num_warps=tiles["num_warps"])),)
    return LaunchPlan(device, launches)


@implements("take_along_axis")
def take_along_axis(x: Tensor, indices: Tensor, axis: int) -> Tensor:
    if x.dtype.itemsize == 16:
        raise NotSupportedError("take_along_axis of complex128 has no kernel yet (its elements are two words)")
    rows_x, idx = axis_last(x, axis), axis_last(indices, axis)
    out = empty(idx.shape, x.dtype, x.device)
    # a plan per word size: its launch compiles per word type (the runner keys repeats on it too)
    plan = plans.cached("take_along_axis", (rows_x.shape, x.dtype.itemsize, idx.shape, x.device),
                        lambda: _take_along_plan(rows_x.shape, idx.shape, x.device))
    if plan.launches:
        plans.execute(plan, {"x": as_bits(rows_x)[0], "idx": idx, "out_bits": as_bits(out)[0],
                             "flag": deferred_checks.flag_for(x.device, "take_along_axis", x.shape[axis])})
    return axis_back(out, axis)


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
    op = COMBINE_CODES[reduce or "sum"]  # (reduce None: the last update wins, no fold)
    grid = (prod(rows_shape) // n, triton.cdiv(n, block))
    return LaunchPlan(device, (Launch(
        scatter_rows_kernel, grid, (Slot("rows"), Slot("idx"), Slot("src"), Slot("flag"), n, k),
        dict(BLOCK_P=block, BLOCK_J=block, REDUCE=0 if reduce is None else 1, INCLUDE_SELF=include_self,
             IDENTITY=_identity(reduce or "sum", work), OP=op,
             COMPUTE=tl_type(work) if reduce is None else compute_type(work), TAG=TAGS["scatter"],
             num_warps=tiles["num_warps"])),),
        copies=("idx", "src"))


@implements("scatter")
def scatter(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce, include_self: bool) -> Tensor:
    if x.dtype.is_complex:
        raise DTypeError("scatter of complex tensors has no kernel (Triton has no complex type)")
    if reduce in ("sum", "mean"):
        return scatter_add(x, dim, index, src, reduce == "mean", include_self)
    out = x.clone()
    region = out[tuple(slice(None) if d == dim else slice(0, s) for d, s in enumerate(index.shape))]
    rows = axis_last(region, dim)
    idx, updates = axis_last(index, dim), axis_last(src, dim)
    n, k = x.shape[dim], index.shape[dim]
    if rows.size == 0 or k == 0:
        return out
    plan = plans.cached("scatter", (rows.shape, x.dtype, k, reduce, include_self, x.device),
                        lambda: _scatter_plan(rows.shape, x.dtype, k, reduce, include_self, x.device))
    plans.execute(plan, {"rows": rows, "idx": idx, "src": updates,
                         "flag": deferred_checks.flag_for(x.device, "scatter", n)})
    region._copy_from(axis_back(rows, dim))
    return out


# the dtypes Triton's atomic add takes natively; the others accumulate in a wider copy, cast back
_ATOMIC = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64, dtypes.uint32, dtypes.uint64)


def _accumulator(dtype: DType) -> DType:
    return dtype if dtype in _ATOMIC else dtypes.float32 if dtype.kind == "float" else dtypes.int32


def _scatter_add_plan(frame, k: int, index_strides, src_strides, work: DType, mean: bool, include_self: bool,
                      device) -> LaunchPlan:
    """frame = (outer, n, inner) of the accumulator; the index and the updates are [outer, k, inner]."""
    outer, n, inner = frame
    tiles = launch.tiles("gather", device)
    rows_per, cols = row_tile(inner, tiles["block"])  # block updates a program: 8 atomics a thread
    grid = (triton.cdiv(outer * k, rows_per), triton.cdiv(inner, cols))

    def one(clear: bool) -> Launch:
        return Launch(scatter_add_kernel, grid, (Slot("acc"), Slot("idx"), Slot("src"), Slot("counts"), Slot("flag"),
                                                 n, k, outer * k, inner, *index_strides, *src_strides),
                      dict(ROWS=rows_per, COLS=cols, CLEAR=clear, TAG=TAGS["scatter"], num_warps=tiles["num_warps"],
                           ROW_INDEX=index_strides[2] == 0))   # an index one a row: checked once a row
    launches = (one(False),) if include_self else (one(True), one(False))
    counts = (plans.workspace("counts", (outer, n, inner), dtypes.int32),) if mean else ()
    return LaunchPlan(device, launches, workspace=counts, detail=(rows_per, cols))


def scatter_add(x: Tensor, dim: int, index: Tensor, src: Tensor, mean: bool, include_self: bool) -> Tensor:
    """The sum (or mean) scatter: one atomic add an update into a copy of x (duplicates in no fixed
    order, as torch's). Where index spans x in every other dim (index_add, index_put, embedding
    gradients) x is the accumulator as it lies and the index is read through its strides (an
    expanded row with stride 0); otherwise the indexed region is brought axis-last first."""
    from nbx.core.ops.creation import zeros
    out = x.clone()
    k, n = index.shape[dim], x.shape[dim]
    if index.size == 0:
        return out
    spans = all(index.shape[d] == x.shape[d] for d in range(x.ndim) if d != dim)
    region = out if spans else out[tuple(slice(None) if d == dim else slice(0, s) for d, s in enumerate(index.shape))]
    if spans:
        outer, inner = prod(x.shape[:dim]), prod(x.shape[dim + 1:])
        target, idx, updates = out, index.reshape(outer, k, inner), src.reshape(outer, k, inner)
    else:
        target = axis_last(region, dim)
        outer, inner = target.size // n, 1
        idx, updates = axis_last(index, dim).reshape(outer, k, 1), axis_last(src, dim).reshape(outer, k, 1)
    work = _accumulator(x.dtype)
    acc = target if work is x.dtype else target.to(dtype=work)
    plan = plans.cached("scatter_add", ((outer, n, inner), k, idx.strides, updates.strides, work, mean, include_self,
                                        x.device),
                        lambda: _scatter_add_plan((outer, n, inner), k, idx.strides, updates.strides, work, mean,
                                                  include_self, x.device))
    counts = zeros((outer, n, inner), dtype=dtypes.int32, device=x.device) if mean else None
    plans.execute(plan, {"acc": acc, "idx": idx, "src": updates, "counts": counts,
                         "flag": deferred_checks.flag_for(x.device, "scatter", n)})
    if mean:
        from nbx.core.ops.elementwise import where
        counts = counts.reshape(acc.shape)
        denom = (counts + int(include_self)).to(dtype=work)
        acc = where(counts > 0, acc / denom if work.kind == "float" else acc // denom, acc)
    if acc is not target:
        target._copy_from(acc)  # the copy casts a wider accumulator back
    if target is not region:
        region._copy_from(axis_back(target, dim))
    return out


# ---- data-dependent sizes: the count is read back, then one pass writes each place once ------------
def true_positions(mask: Tensor) -> Tensor:
    """The flat int64 positions of mask's True (non-zero) elements, in row-major order: a running
    count (the scan kernel), its total read back, then compact_kernel stores each position once."""
    from nbx.core.ops.elementwise import astype
    from nbx.core.ops.reductions import cumsum
    flat = astype(mask, dtypes.bool_).reshape(-1).contiguous()
    n = flat.size
    rank = cumsum(flat.to(dtype=dtypes.int32), dim=0, dtype=dtypes.INDEX)
    total = int(rank[-1].item()) if n else 0
    out = empty((total,), dtypes.INDEX, mask.device)
    if total:
        block = launch.tiles("gather", mask.device)["block"]
        plan = plans.cached("compact", (n, mask.device), lambda: LaunchPlan(mask.device, (Launch(
            compact_kernel, (triton.cdiv(n, block),), (Slot("mask"), Slot("rank"), Slot("out"), n),
            dict(BLOCK=block, num_warps=launch.tiles("gather", mask.device)["num_warps"])),)))
        plans.execute(plan, {"mask": as_bits(flat)[0], "rank": rank, "out": out})
    return out


@implements("argwhere")
def argwhere(x: Tensor) -> Tensor:
    from nbx.core.ops.datamove import stack
    flat = true_positions(x)
    if x.ndim == 0:
        return flat.reshape(-1, 0)
    coords, stride = [], 1
    for size in reversed(x.shape):
        coords.append((flat // stride) % size)
        stride *= size
    return stack(coords[::-1], axis=1) if flat.size else empty((0, x.ndim), dtypes.INDEX, x.device)


@implements("masked_select")
def masked_select(x: Tensor, mask: Tensor) -> Tensor:
    from nbx.core.ops.gather import take
    return take(x.reshape(-1), true_positions(mask), axis=0)


@implements("masked_scatter")
def masked_scatter(x: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """The running count of the mask names, at each True place, the source element it takes."""
    from nbx.core.errors import ShapeError
    from nbx.core.ops.elementwise import astype, clamp, where
    from nbx.core.ops.gather import take
    from nbx.core.ops.reductions import cumsum
    flat_mask = astype(mask, dtypes.bool_).reshape(-1)
    if flat_mask.size == 0:
        return x.clone()
    rank = cumsum(flat_mask.to(dtype=dtypes.int32), dim=0, dtype=dtypes.INDEX)
    count = int(rank[-1].item())
    if count > source.size:
        raise ShapeError(f"masked_scatter: {count} masked places, the source has {source.size} elements")
    if count == 0:
        return x.clone()
    taken = take(source.reshape(-1), clamp(rank - 1, min=0), axis=0)
    return where(flat_mask, taken, x.reshape(-1)).reshape(x.shape)


@implements("searchsorted")
def searchsorted(x1: Tensor, x2: Tensor, side: str) -> Tensor:
    from nbx.core.errors import ArgumentError
    from nbx.core.ops import elementwise as ew
    from nbx.core.ops.reductions import all as all_of
    seq = x1.contiguous()
    n = seq.shape[-1]
    if n > 1:
        lower, upper = seq[..., :-1], seq[..., 1:]
        ordered = ew.less_equal(lower, upper)
        if seq.dtype.kind == "float":
            ordered = ew.logical_or(ordered, ew.isnan(upper))
        if not all_of(ordered).item():
            raise ArgumentError("searchsorted: the sequence (through its sorter) is not sorted ascending")
    shared = seq.ndim == 1
    values = x2.reshape(1, -1) if shared else x2.reshape(-1, max(x2.shape[-1], 1) if x2.ndim else 1)
    values = values.contiguous()
    out = empty(values.shape, dtypes.INDEX, x2.device)
    if out.size and n:
        tiles = launch.tiles("gather", x2.device)
        rows, m = values.shape
        signature = (rows, m, n, seq.dtype, shared, side, x2.device)
        plan = plans.cached("searchsorted", signature, lambda: LaunchPlan(x2.device, (Launch(
            searchsorted_kernel, (rows, triton.cdiv(m, tiles["block"])),
            (Slot("seq"), Slot("v"), Slot("out"), n, m, n.bit_length() + 1),
            dict(ROWS_SHARED=shared, RIGHT=side == "right", BLOCK=tiles["block"], num_warps=tiles["num_warps"])),)))
        plans.execute(plan, {"seq": seq, "v": values, "out": out})
    elif out.size:
        out._copy_from(asarray(0, dtype=dtypes.INDEX, device=x2.device).broadcast_to(out.shape))
    return out.reshape(x2.shape)


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
    return Cost(buffers=(plans.output("out", indices.shape, x.dtype).buffer(),),
                bytes_moved=2 * out + indices.nbytes, notes=("x and indices are made axis-last contiguous first",))


@declares("scatter")
def _scatter_cost(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce=None, include_self=True) -> Cost:
    updates = index.nbytes + index.size * x.dtype.itemsize
    if reduce in ("sum", "add", "mean"):
        return Cost(buffers=(plans.output("out", x.shape, x.dtype).buffer(),),
                    bytes_moved=2 * x.nbytes + updates + index.size * x.dtype.itemsize,
                    launches=2 if include_self else 3,
                    notes=("the clone, then one atomic add an update (a read-modify-write of its place); bf16, f16 "
                           "and ints under 4 bytes accumulate in a float32 / int32 copy",))
    return Cost(buffers=(plans.output("out", x.shape, x.dtype).buffer(),),
                bytes_moved=2 * x.nbytes + updates, launches=4,
                notes=("the clone, the axis-last region copies in and out, the scatter",))


@implements("index_put")
def index_put(x: Tensor, indices: tuple, values: Tensor, accumulate: bool) -> Tensor:
    """x[indices] = values (or +=) as a scatter over x's indexed leading dims flattened: bool
    indices become their True positions, integer ones broadcast together and are raveled into one
    flat index (a bad entry made one the scatter kernel flags: raised at the next synchronization)."""
    from nbx.core import layout
    from nbx.core.errors import IndexingError, ShapeError
    from nbx.core.ops.gather import nonzero, ravel_checked, scatter
    arrays = []
    for index in indices:
        arrays.extend(nonzero(index) if index.dtype.kind == "bool" else (index,))
    if len(arrays) > x.ndim:
        raise IndexingError(f"index_put: {len(arrays)} indices for a tensor of {x.ndim} dims")
    shape = layout.broadcast_shapes(*(a.shape for a in arrays))
    lead, rest = x.shape[:len(arrays)], x.shape[len(arrays):]
    flat = ravel_checked("index_put", arrays, lead, shape)
    k = prod(shape)
    target = x.contiguous().reshape(prod(lead), *rest)
    try:
        src = values.broadcast_to(shape + rest).reshape(k, *rest)
    except ShapeError as exc:
        raise ShapeError(f"index_put: values of shape {values.shape} for {shape + rest}: {exc}") from None
    view = [k] + [1] * len(rest)
    full = flat.reshape(view).broadcast_to((k, *rest))
    return scatter(target, 0, full, src.contiguous(), reduce="sum" if accumulate else None).reshape(x.shape)


def _data_dependent_cost(x: Tensor, per_hit: int) -> Cost:
    """At most every element is a hit: the declared buffers are the bound, the count a readback."""
    bound = x.size * per_hit
    return Cost(buffers=(plans.output("out", (bound,), dtypes.uint8).buffer(),
                         plans.workspace("rank", (x.size,), dtypes.INDEX).buffer()),
                bytes_moved=x.nbytes + 16 * x.size + bound, launches=3,
                notes=("output size is data-dependent: the buffer is its bound; the count is read back",))


declares("argwhere")(lambda x: _data_dependent_cost(x, 8 * max(x.ndim, 1)))
declares("masked_select")(lambda x, mask: _data_dependent_cost(x, 8 + x.dtype.itemsize))
declares("masked_scatter")(lambda x, mask, source: _data_dependent_cost(x, x.dtype.itemsize))
declares("searchsorted")(lambda x1, x2, side="left": Cost(
    buffers=(plans.output("out", x2.shape, dtypes.INDEX).buffer(),),
    bytes_moved=x2.nbytes + 8 * x2.size + x1.nbytes, launches=3,
    notes=("a sortedness check (read back), then one binary search a value",)))

__all__ = ["TAKE", "take", "launch_take", "take_along_axis", "scatter", "as_bits", "axis_last", "axis_back",
           "true_positions", "argwhere", "masked_select", "masked_scatter", "searchsorted", "index_put"]
