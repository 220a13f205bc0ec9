"""sort / argsort and top-k on Triton kernels (tiles.sort of the device file).

A row of up to max_block_n keys is sorted by one program (sort/kernel.py). A longer row (up to
2**31 keys) is sorted by a onesweep LSD radix sort (sort/radix.py: one histogram launch, then one
scatter launch a pass of 4- or 8-bit digits, over rows x groups of tiles), and its top-k is a radix select
(sort/select.py, sort/topk.py) or, for many rows and a small k, chunk candidates (sort/chunks.py). 64-bit
keys (int64, uint64, float64) are sorted as two 32-bit words by those kernels (sort/wide.py).
"""
from __future__ import annotations

from math import prod

import triton

from nbx.core import dtypes
from nbx.core.errors import DTypeError, NotSupportedError
from nbx.core.tensor import Tensor

from .. import launch, plans
from ..cost import LAUNCH, Buffer, Cost, declares
from ..plans import Launch, LaunchPlan, Slot
from ..gather import axis_back, axis_last
from ..registry import implements
from .topk import select_rows, select_rows_plan
from .kernel import sort_rows_kernel
from .radix import radix_sort, radix_sort_plan
from .wide import is_wide, sort_wide, wide_cost


def _rows(x: Tensor, axis: int) -> Tensor:
    if (x.dtype.itemsize > 4 and not is_wide(x.dtype)) or x.dtype.is_complex:
        raise DTypeError(f"the sort kernels take real keys of at most 64 bits, not {x.dtype.name}")
    return axis_last(x, axis)


def _sort_rows(rows: Tensor, n_out: int, descending: bool) -> tuple[Tensor, Tensor]:
    """rows [..., n] (n <= max_block_n) sorted, their first n_out values and original indices."""
    plan = _sort_rows_plan(rows.shape, rows.dtype, n_out, descending, rows.device)
    done = plans.execute(plan, {"rows": rows})
    return done["values"], done["indices"]


def _sort_rows_plan(shape, dtype, n_out: int, descending: bool, device) -> LaunchPlan:
    """The cached plan of one program a row (_sort_rows runs it, the costs read it)."""
    signature = (tuple(shape), dtype, n_out, descending, device)
    return plans.cached("sort", signature, lambda: _sort_plan(*signature))


def _rows_shape(x: Tensor, axis: int) -> tuple[int, ...]:
    """The shape of x's rows along axis (_rows' layout: axis moved last)."""
    return x.shape[:axis] + x.shape[axis + 1:] + (x.shape[axis],)


def _sort_plan(shape, dtype, n_out: int, descending: bool, device) -> LaunchPlan:
    n = shape[-1]
    count = prod(shape) // n if n else 0
    tiles = launch.tiles("sort", device)
    launches = () if not (count and n_out) else (Launch(
        sort_rows_kernel, (count,), (Slot("rows"), Slot("values"), Slot("indices"), n, n_out),
        dict(DESCENDING=descending, BLOCK=triton.next_power_of_2(n), num_warps=tiles["num_warps"])),)
    out_shape = tuple(shape[:-1]) + (n_out,)
    return LaunchPlan(device, launches, outputs=(plans.output("values", out_shape, dtype),
                                                 plans.output("indices", out_shape, dtypes.INDEX)))


@implements("sort")
def sort(x: Tensor, axis: int, descending: bool) -> tuple[Tensor, Tensor]:
    limit = launch.tiles("sort", x.device)["max_block_n"]
    rows = _rows(x, axis)
    if is_wide(x.dtype):
        values, indices = sort_wide(rows, descending, sort)
    elif x.shape[axis] > limit:
        if x.shape[axis] >= 2 ** 31:  # the passes carry each key's index as an int32
            raise NotSupportedError(f"sorting rows of 2**31 keys or more (this one has {x.shape[axis]})")
        values, indices = radix_sort(rows, descending)
    else:
        values, indices = _sort_rows(rows, x.shape[axis], descending)
    return axis_back(values, axis), axis_back(indices, axis)


@implements("topk")
def topk(x: Tensor, k: int, dim: int, largest: bool) -> tuple[Tensor, Tensor]:
    """Rows up to max_block_n: one program a row sorts it. Longer rows: the radix select of
    topk.py for k up to max_block_n (its last step sorts the k survivors in one program), the
    full sort's first k beyond."""
    limit = launch.tiles("sort", x.device)["max_block_n"]
    rows = _rows(x, dim)
    n = rows.shape[-1]
    wide = is_wide(x.dtype)
    if not wide and (n <= limit or k == 0):
        values, indices = _sort_rows(rows, k, largest)
    elif not wide and k <= limit:
        values, indices = select_rows(rows, k, largest)
    else:  # 64-bit keys, or k past max_block_n: the stable full sort's first k (ties to the lower index)
        values, indices = sort(rows, rows.ndim - 1, largest)
        values, indices = values[..., :k].contiguous(), indices[..., :k].contiguous()
    return axis_back(values, dim), axis_back(indices, dim)


@declares("sort")
def _sort_cost(x: Tensor, axis: int = -1, descending: bool = False) -> Cost:
    """The buffers and launches of the plan that runs: one program a row, or the radix sort's."""
    if x.ndim == 0:
        return Cost(buffers=(Buffer("values", x.nbytes), Buffer("indices", x.size * 8)),
                    bytes_moved=3 * x.nbytes + x.size * 8)
    axis %= x.ndim
    shape = _rows_shape(x, axis)
    if is_wide(x.dtype):
        last = [d for d in range(x.ndim) if d != axis] + [axis]
        return wide_cost(x, _sort_cost(_word_keys(x), axis), moved=not x.permute(last).is_contiguous())
    if shape[-1] <= launch.tiles("sort", x.device)["max_block_n"]:  # one program a row
        plan = _sort_rows_plan(shape, x.dtype, shape[-1], descending, x.device)
        return Cost(buffers=plan.buffers(), bytes_moved=3 * x.nbytes + x.size * 8, launches=len(plan.launches))
    # the onesweep radix sort: one histogram read of the keys, then per pass one read and one write
    # of keys and int32 indices (the first pass reads no indices, the last writes int64 ones: even)
    plan = radix_sort_plan(shape, x.dtype, descending, x.device)
    passes, bits = len(plan.launches) - 2, plan.launches[-1].meta["BITS"]   # the zeroing, the histogram, the scatters
    state = next(b.nbytes for b in plan.workspace if b.name == "state")
    moved = x.nbytes + passes * 2 * (x.nbytes + x.size * 4) + 2 * state  # the state zeroed, then read and written
    return Cost(buffers=plan.buffers(), bytes_moved=moved, launches=len(plan.launches),
                notes=(f"a onesweep LSD radix sort: {passes} passes of {bits}-bit digits, one scatter launch each "
                       "after one histogram launch",))


@declares("topk")
def _topk_cost(x: Tensor, k: int, dim: int = -1, largest: bool = True) -> Cost:
    """The buffers and launches of the plan that runs: one program a row (rows up to
    tiles.sort.max_block_n, or k = 0), the radix select or the chunk candidates (k up to
    max_block_n, the served setting's method), else the full sort's
    (its outputs the call's workspace) and the copies of its first k (their sum bounds that path's
    peak: the sort's workspace is freed before the copies)."""
    dim %= max(x.ndim, 1)
    shape = _rows_shape(x, dim)
    limit = launch.tiles("sort", x.device)["max_block_n"]
    out = x.size // max(shape[-1], 1) * k
    written = out * (x.dtype.itemsize + 8)
    if is_wide(x.dtype):  # the sort's temporaries are gone before its first k are copied out
        sort = _sort_cost(x, dim, largest)
        temporaries = sum(b.nbytes for b in sort.buffers if b.lifetime == LAUNCH)
        full = tuple(Buffer(b.name, b.nbytes, LAUNCH) for b in sort.buffers if b.lifetime != LAUNCH)
        firsts = (Buffer("values", out * x.dtype.itemsize), Buffer("indices", out * 8),
                  Buffer("temporaries", max(0, temporaries - written), LAUNCH))
        return Cost(full + firsts, sort.bytes_moved + 2 * written, launches=sort.launches + 2,
                    notes=sort.notes + ("then its first k copied",))
    if shape[-1] <= limit or k == 0:
        plan = _sort_rows_plan(shape, x.dtype, k, largest, x.device)
        return Cost(buffers=plan.buffers(), bytes_moved=x.nbytes + written, launches=len(plan.launches),
                    notes=("one program a row sorts it",))
    if k > limit:
        sort = _sort_cost(x, dim, largest)
        full = tuple(Buffer(b.name, b.nbytes, LAUNCH) for b in sort.buffers)
        firsts = (Buffer("values", out * x.dtype.itemsize), Buffer("indices", out * 8))
        return Cost(full + firsts, sort.bytes_moved + 2 * written, launches=sort.launches + 2,
                    notes=sort.notes + ("then its first k copied",))
    plan = select_rows_plan(shape, x.dtype, k, largest, x.device)
    if plan.detail is not None and plan.detail["method"] == "chunks":
        # one read of each row (two with the row's bound); each candidate word written once and read
        # once by the next round; the outputs written and their values re-read from the row (the
        # words a stage-1 program compacts under its bound depend on the data: counted as none)
        words, passes = plan.detail["candidate_words"], plan.detail["passes"]
        return Cost(buffers=plan.buffers(),
                    bytes_moved=passes * x.nbytes + 2 * 8 * words + out * (8 + 2 * x.dtype.itemsize),
                    launches=len(plan.launches),
                    notes=(f"chunk candidates: {passes} pass(es) over each row (the second: the row's bound "
                           "first), then merge rounds",))
    # k = 1: one reduction pass; else two full passes (the top-digit histogram, the filter), then
    # passes over the candidates only (their count depends on the data: counted here as none)
    passes = 1 if k == 1 else 2
    return Cost(buffers=plan.buffers(), bytes_moved=passes * x.nbytes + out * (16 + 2 * x.dtype.itemsize),
                launches=len(plan.launches),
                notes=(f"{passes} passes over each row, then over its candidates (a radix select)",))


def _word_keys(x: Tensor) -> Tensor:
    """A uint32 stand-in of x's shape on its device (no storage read): what one word sort of a
    64-bit sort sorts, for its cost."""
    return Tensor._of(x.storage, dtypes.uint32, x.shape, x.strides, 0)


__all__ = ["sort", "topk"]


@implements("unique")
def unique(x: Tensor):
    """Sorted unique values, first indices, inverse indices and counts from one stable sort: a
    value starts a group where it differs from its sorted neighbour (NaN differs from itself, so
    each NaN is its own value, as the standard says); the inverse is the group of each sorted
    position taken through the inverse permutation (a second argsort, of the sort order)."""
    from nbx.core.ops.creation import asarray, full
    from nbx.core.ops.datamove import concat
    from nbx.core.ops.elementwise import not_equal
    from nbx.core.ops.gather import take
    from nbx.core.ops.reductions import cumsum
    from nbx.core.ops.sorting import take_sorted
    from ..gather import true_positions
    flat = x.reshape(-1)
    n = flat.size
    if n == 0:
        empty_index = full((0,), 0, dtype=dtypes.INDEX, device=x.device)
        return flat.contiguous(), empty_index, empty_index.reshape(x.shape), empty_index
    ordered, order = take_sorted(flat, 0, False)
    starts = concat([full((1,), True, dtype=dtypes.bool_, device=x.device), not_equal(ordered[1:], ordered[:-1])])
    first = true_positions(starts)
    values = take(ordered, first, axis=0)
    counts = concat([first[1:], asarray([n], dtype=dtypes.INDEX, device=x.device)]) - first
    group = cumsum(starts.to(dtype=dtypes.int32), dim=0, dtype=dtypes.INDEX) - 1
    back = take_sorted(order.to(dtype=dtypes.int32), 0, False)[1]  # the inverse permutation
    return values, take(order, first, axis=0), take(group, back, axis=0).reshape(x.shape), counts


@implements("quantile")
def quantile(x: Tensor, qs, dim: int, keepdim: bool, interpolation: str, keepdim_axes):
    """numpy's methods over one sort along dim: each q's two neighbouring order statistics (their
    places computed on the host in float64, as numpy's) blended on the device; a row holding a NaN
    gives NaN, as numpy's."""
    import numpy as np
    from nbx.core.ops import elementwise as ew
    from nbx.core.ops.datamove import stack
    from nbx.core.ops.reductions import any as any_of
    work = dtypes.float32 if x.dtype.itemsize < 4 else x.dtype
    ordered = take_sorted_values(x.to(dtype=work), dim)
    n = x.shape[dim]
    has_nan = any_of(ew.isnan(x), dim=dim, keepdim=True)
    out = []
    for q in np.atleast_1d(qs):
        place = float(q) * (n - 1)
        lo, hi = int(np.floor(place)), int(np.ceil(place))
        a, b = ordered.narrow(dim, lo, 1), ordered.narrow(dim, hi, 1)
        t = place - lo
        if interpolation == "lower":
            value = a
        elif interpolation == "higher":
            value = b
        elif interpolation == "nearest":
            value = ordered.narrow(dim, int(np.around(place)), 1)
        elif interpolation == "midpoint":
            value = (a + b) * 0.5
        else:  # numpy's _lerp: from the nearer end
            value = b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t
        value = ew.where(has_nan, float("nan"), value)
        out.append(value if keepdim and keepdim_axes is None else value.squeeze(dim))
    result = stack(out, axis=0) if np.ndim(qs) else out[0]
    if keepdim and keepdim_axes is not None:
        result = result.reshape(tuple(np.shape(qs)) + (1,) * keepdim_axes)
    return result.to(dtype=x.dtype)


def take_sorted_values(x: Tensor, dim: int) -> Tensor:
    from nbx.core.ops.sorting import take_sorted
    return take_sorted(x, dim, False)[0]
