"""Sort of rows longer than one program: an LSD radix sort over 4-bit digits of the order key.

Each of the 8 passes (digit j = bits 4j..4j+3 of order_key, complemented for descending) is three
launches over the rows x tiles grid (a batch of rows is sorted segment-wise by the same passes),
after one zeroing of the digit totals: 25 launches for any row length.

  histogram  hist[row, digit, tile] = how many of the tile's keys have that digit (and the row's
             totals by digit, added atomically)
  offsets    the exclusive scan of hist over (digit, tile) in that order, one program a (row,
             digit) starting from the totals of the smaller digits: where tile t's first key of
             digit d lands in the row
  scatter    each key to offsets[row, digit, tile] + its rank among the tile's keys of that digit,
             the rank read from a cumsum of the tile's one-hot digits, packed four 16-bit counters
             to a uint64 (four cumsums a key instead of sixteen)

so every pass is stable and the sort is too (ties in input order, descending included: the key is
complemented, not the position). The keys travel as their own values (no decoding at the end) with
their original index (int32) beside them; the last pass writes the outputs (int64 indices).
"""
from __future__ import annotations

from math import prod

import numpy as np

import triton
import triton.language as tl

from nbx import autotune
from nbx.core import dtypes

from .. import launch, plans
from ..plans import Launch, LaunchPlan, Slot
from ..rows import pow2_at_least
from .kernel import order_key
from .select import zero_kernel
from .topk import lanes, served_plan

PASSES = 8
RADIX = tl.constexpr(16)


@triton.jit
def _digits(v_ptr, r, cols, n, SHIFT: tl.constexpr, DESCENDING: tl.constexpr):
    inside = cols < n
    v = tl.load(v_ptr + r * n + cols, mask=inside)
    key = order_key(v)
    if DESCENDING:
        key = ~key
    return v, ((key >> SHIFT) & 0xF).to(tl.int32), inside


@triton.jit
def radix_histogram_kernel(v_ptr, hist_ptr, totals_ptr, n, SHIFT: tl.constexpr, DESCENDING: tl.constexpr,
                           BLOCK: tl.constexpr):
    """hist[row, d, tile] and, added atomically, the pass's row totals by digit (totals[pass, row, d])."""
    r, t = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    tiles = tl.num_programs(1)
    _, digit, inside = _digits(v_ptr, r, t * BLOCK + tl.arange(0, BLOCK), n, SHIFT, DESCENDING)
    counts = tl.histogram(digit, RADIX, mask=inside)
    bins = tl.arange(0, RADIX)
    tl.store(hist_ptr + (r * RADIX + bins) * tiles + t, counts)
    tl.atomic_add(totals_ptr + ((SHIFT // 4) * tl.num_programs(0) + r) * RADIX + bins, counts, sem="relaxed")


@triton.jit
def radix_offsets_kernel(hist_ptr, totals_ptr, off_ptr, tiles, SHIFT: tl.constexpr, SCAN: tl.constexpr):
    """off[row, d, t] = the keys of the row with a smaller digit, plus those of digit d in earlier tiles."""
    r, d = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    row = hist_ptr + r * RADIX * tiles
    slots = tl.arange(0, SCAN)
    bins = tl.arange(0, RADIX)
    totals = tl.load(totals_ptr + ((SHIFT // 4) * tl.num_programs(0) + r) * RADIX + bins)
    carry = tl.sum(tl.where(bins < d, totals, 0), 0)  # the keys of the digits below d
    for start in range(0, tiles, SCAN):
        at = d * tiles + start + slots
        counts = tl.load(row + at, mask=start + slots < tiles, other=0)
        tl.store(off_ptr + r * RADIX * tiles + at, carry + tl.cumsum(counts, 0) - counts, mask=start + slots < tiles)
        carry += tl.sum(counts, 0)


@triton.jit
def _field_sum(digit, inside, q: tl.constexpr):
    one = tl.full(digit.shape, 1, tl.uint64) << (16 * (digit & 3)).to(tl.uint64)
    return tl.cumsum(tl.where(inside & ((digit >> 2) == q), one, 0).to(tl.uint64), 0)


@triton.jit
def radix_scatter_kernel(v_ptr, i_ptr, off_ptr, v_out, i_out, n, SHIFT: tl.constexpr, DESCENDING: tl.constexpr,
                         BLOCK: tl.constexpr):
    """i_ptr None: the first pass (each key's index is its column)."""
    r, t = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    tiles = tl.num_programs(1)
    cols = t * BLOCK + tl.arange(0, BLOCK)
    v, digit, inside = _digits(v_ptr, r, cols, n, SHIFT, DESCENDING)
    if i_ptr is None:
        index = cols.to(tl.int32)
    else:
        index = tl.load(i_ptr + r * n + cols, mask=inside)
    q = digit >> 2
    sums = tl.where(q == 0, _field_sum(digit, inside, 0), tl.where(q == 1, _field_sum(digit, inside, 1), tl.where(
        q == 2, _field_sum(digit, inside, 2), _field_sum(digit, inside, 3))))
    rank = ((sums >> (16 * (digit & 3)).to(tl.uint64)) & 0xFFFF).to(tl.int32) - 1
    dest = tl.load(off_ptr + (r * RADIX + digit) * tiles + t, mask=inside, other=0) + rank
    tl.store(v_out + r * n + dest, v, mask=inside)
    tl.store(i_out + r * n + dest, index.to(i_out.dtype.element_ty), mask=inside)


def radix_setting(device, rows: int, n: int, dtype) -> dict:
    return autotune.setting(RADIX_SORT, device, width=pow2_at_least(n), elements=rows * n, dtype=dtype)


def radix_sort(rows, descending: bool, setting=None, values=None):
    """(values, indices) of rows [..., n] (contiguous) sorted along the last dim; setting overrides
    the served one (the certifier's), values is the output to write (its workload's)."""
    plan = served_plan("sort.radix", rows, (descending,), setting, radix_setting, radix_plan)
    done = plans.execute(plan, {"x": rows, "values": values})
    return done["values"], done["indices"]


def radix_plan(shape, dtype, descending: bool, device, setting=None) -> LaunchPlan:
    n = shape[-1]
    rows = prod(shape) // n
    s = {**launch.tiles("radix", device), **dict(setting or {})}
    block, warps = s["block"], s["num_warps"]
    tiles = triton.cdiv(n, block)
    grid = (rows, tiles)
    meta = dict(DESCENDING=descending, BLOCK=block, num_warps=warps)
    totals = PASSES * rows * 16
    launches = [Launch(zero_kernel, (triton.cdiv(totals, 1024),), (Slot("totals"), totals),
                       dict(BLOCK=1024, num_warps=4))]
    for j in range(PASSES):
        source = "x" if j == 0 else "va" if j % 2 else "vb"
        index = None if j == 0 else Slot("ia" if j % 2 else "ib")
        last = j == PASSES - 1
        target, target_index = ("values", "indices") if last else ("vb", "ib") if j % 2 else ("va", "ia")
        launches += [
            Launch(radix_histogram_kernel, grid, (Slot(source), Slot("hist"), Slot("totals"), n),
                   {**meta, "SHIFT": 4 * j}),
            Launch(radix_offsets_kernel, (rows, 16), (Slot("hist"), Slot("totals"), Slot("offsets"), tiles),
                   dict(SHIFT=4 * j, SCAN=min(lanes(tiles), 4096), num_warps=4)),
            Launch(radix_scatter_kernel, grid, (Slot(source), index, Slot("offsets"), Slot(target), Slot(target_index),
                                                n), {**meta, "SHIFT": 4 * j})]
    table = rows * 16 * tiles
    return LaunchPlan(device, tuple(launches),
                      outputs=(plans.output("values", shape, dtype), plans.output("indices", shape, dtypes.INDEX)),
                      workspace=(plans.workspace("va", (rows * n,), dtype), plans.workspace("vb", (rows * n,), dtype),
                                 plans.workspace("ia", (rows * n,), dtypes.int32),
                                 plans.workspace("ib", (rows * n,), dtypes.int32),
                                 plans.workspace("hist", (table,), dtypes.int32),
                                 plans.workspace("offsets", (table,), dtypes.int32),
                                 plans.workspace("totals", (totals,), dtypes.int32)))


def radix_workload(rep, device):
    from nbx.core.ops.creation import asarray
    from nbx.core.reference import oracle
    n = rep["width"]
    count = max(1, rep["elements"] // n)
    x = asarray((np.sin(0.37 * np.arange(count * n)).reshape(count, n) * 4.0).astype(rep["dtype"].host), device=device)
    out = launch.output((count, n), x.dtype, device)
    reference = oracle("sort", x, 1, False)[0]
    return autotune.TensorWorkload(out, lambda s: radix_sort(x, False, setting=s, values=out),
                                   lambda r: np.asarray(reference)[r])


RADIX_SORT = autotune.declare(autotune.Tunable(
    "radix_sort", params={"block": (1024, 2048, 4096), "num_warps": (4, 8, 16)},
    key={"width": "exact", "elements": "elements", "dtype": "dtype"}, default_from="tiles.radix",
    workload=radix_workload))
