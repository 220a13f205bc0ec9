"""Sort of rows longer than one program: a onesweep LSD radix sort over 8-bit digits of the order key.

The key (order_key, complemented for descending) has 4 digits; a dtype whose low digits are a
function of its higher ones (bfloat16's low 16 bits, float16's low 8, int8's middle 16 ...) skips
those passes (DIGIT_PASSES). Launches for any row length: one zeroing of the state, one histogram,
one scatter a pass (6 for float32):

  histogram  one read of the keys: the row's counts of every digit of every pass (hist[row, pass,
             digit]), rows x P programs adding their counts atomically
  scatter    one launch a pass over rows x tiles, each program one tile of `block` keys: it takes a
             virtual tile id from an atomic counter (so a tile only ever waits on tiles that took
             an earlier id, which are running or done: no deadlock whatever order the GPU starts
             programs in), publishes its digit counts in its status words, and looks back over the
             earlier tiles of its row (decoupled look-back: a tile's word holds its own counts
             until it knows its inclusive prefix, then that) to learn where its keys of each digit
             start. Its keys are ranked inside the tile by one tl.sort of (digit << 16 | place),
             which keeps equal digits in input order, and written where they belong with their
             original index beside them: each pass reads keys and indices once and writes them once.

Every pass is stable, so the sort is (ties in input order, descending too: the key is complemented,
not the position). A status word is 0 (not yet published), 1 + the tile's count (its aggregate) or
-(1 + the inclusive count of the row up to and including the tile). On interp the programs run one
after another in id order, so every look-back finds its predecessor's inclusive word at once.
"""
from __future__ import annotations

from math import prod

import numpy as np

import triton
import triton.language as tl

from nbx import autotune
from nbx.core import dtypes
from nbx.core.errors import ArgumentError

from .. import launch, plans
from ..plans import Launch, LaunchPlan, Slot
from ..rows import pow2_at_least
from .kernel import order_key
from .select import zero_kernel
from .topk import served_plan, split

DIGITS = 4
BINS = tl.constexpr(256)
LOOK_BACK = 8   # the most tiles a look-back step reads (a row of fewer tiles: their count to a power of two)
COUNTERS = 16   # the state's first words: the passes' virtual tile counters (padded)
# the digits (0 lowest) a dtype's order key needs sorted: the others are functions of the higher
# digits (the sign decides them), so skipping their passes keeps the order
DIGIT_PASSES = {"bfloat16": (2, 3), "float16": (1, 2, 3), "int8": (0, 3), "int16": (0, 1, 3),
                "uint8": (0,), "bool": (0,), "uint16": (0, 1)}


@triton.jit
def _sort_keys(v_ptr, r, cols, n, DESCENDING: tl.constexpr):
    inside = cols < n
    v = tl.load(v_ptr + r * n + cols, mask=inside)
    key = order_key(v)
    if DESCENDING:
        key = ~key
    return key, inside


@triton.jit
def _digit(key, DIGIT: tl.constexpr):
    return ((key >> (8 * DIGIT)) & 0xFF).to(tl.int32)


@triton.jit
def radix_histogram_kernel(v_ptr, state_ptr, n, chunk, DESCENDING: tl.constexpr, BLOCK: tl.constexpr):
    """state[COUNTERS + (row * 4 + digit) * 256 + d] += the keys of this chunk whose digit is d."""
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    c0 = tl.zeros((BINS,), tl.int32)
    c1 = tl.zeros((BINS,), tl.int32)
    c2 = tl.zeros((BINS,), tl.int32)
    c3 = tl.zeros((BINS,), tl.int32)
    for start in range(p * chunk, p * chunk + chunk, BLOCK):
        key, inside = _sort_keys(v_ptr, r, start + tl.arange(0, BLOCK), n, DESCENDING)
        c0 += tl.histogram(_digit(key, 0), BINS, mask=inside)
        c1 += tl.histogram(_digit(key, 1), BINS, mask=inside)
        c2 += tl.histogram(_digit(key, 2), BINS, mask=inside)
        c3 += tl.histogram(_digit(key, 3), BINS, mask=inside)
    at = state_ptr + 16 + r * 4 * BINS + tl.arange(0, BINS)
    tl.atomic_add(at, c0, sem="relaxed")
    tl.atomic_add(at + BINS, c1, sem="relaxed")
    tl.atomic_add(at + 2 * BINS, c2, sem="relaxed")
    tl.atomic_add(at + 3 * BINS, c3, sem="relaxed")


@triton.jit
def _look_back(status_ptr, r, t, tiles, WINDOW: tl.constexpr):
    """The keys of each digit in row r's tiles before t, from their status words, WINDOW tiles a
    step (one round trip covers them; CUB walks one at a time, a thread a digit): a digit's step adds the
    words back to the nearest inclusive one if all between are published (then it is done), all
    WINDOW aggregates if no inclusive is among them (then it steps back), nothing if an
    unpublished word comes first (then it polls again). Tile 0 always publishes an inclusive word
    and windows past it read as inclusive zeros, so every digit's walk ends."""
    bins = tl.arange(0, BINS)
    back = tl.arange(0, WINDOW)[:, None]           # 0: the nearest tile of the window
    prefix = tl.zeros((BINS,), tl.int32)
    cursor = tl.zeros((BINS,), tl.int64) + t - 1  # each digit's nearest tile not yet added
    pending = cursor >= 0
    while tl.max(pending.to(tl.int32), 0) > 0:
        tile = cursor[None, :] - back
        word = tl.load(status_ptr + (r * tiles + tile) * BINS + bins[None, :], mask=pending[None, :] & (tile >= 0),
                       other=-1, volatile=True)
        first_inclusive = tl.min(tl.where(word < 0, back, WINDOW), 0)
        first_unpublished = tl.min(tl.where(word == 0, back, WINDOW), 0)
        ready = pending & ((first_unpublished == WINDOW) | (first_inclusive < first_unpublished))
        done = ready & (first_inclusive < WINDOW)
        added = tl.where(word < 0, -word - 1, word - 1)
        taken = (back <= first_inclusive[None, :]) & ready[None, :]
        prefix += tl.sum(tl.where(taken, added, 0), 0)
        cursor -= tl.where(ready & ~done, WINDOW, 0).to(tl.int64)
        pending = pending & ~done
    return prefix


@triton.jit
def radix_scatter_kernel(v_ptr, i_ptr, v_out, i_out, state_ptr, n, tiles, DIGIT: tl.constexpr, PASS: tl.constexpr,
                         DESCENDING: tl.constexpr, BLOCK: tl.constexpr, RANK_BY_SORT: tl.constexpr,
                         WINDOW: tl.constexpr):
    """One pass over digit DIGIT (the PASS-th pass run); i_ptr None: the first pass (each key's
    index is its column)."""
    vid = tl.atomic_add(state_ptr + PASS, 1, sem="relaxed").to(tl.int64)
    r, t = vid // tiles, vid % tiles
    total = tl.num_programs(0).to(tl.int64)   # rows x tiles
    status_ptr = state_ptr + 16 + total // tiles * 4 * BINS + PASS * total * BINS
    bins = tl.arange(0, BINS)
    local = tl.arange(0, BLOCK)
    key, inside = _sort_keys(v_ptr, r, t * BLOCK + local, n, DESCENDING)
    digit = _digit(key, DIGIT)
    counts = tl.histogram(digit, BINS, mask=inside)
    mine = status_ptr + (r * tiles + t) * BINS + bins
    if t == 0:
        before = tl.zeros((BINS,), tl.int32)
    else:
        tl.atomic_xchg(mine, counts + 1, sem="relaxed")
        before = _look_back(status_ptr, r, t, tiles, WINDOW)
    tl.atomic_xchg(mine, -(before + counts + 1), sem="relaxed")
    row_counts = tl.load(state_ptr + 16 + (r * 4 + DIGIT) * BINS + bins)
    starts = tl.cumsum(row_counts, 0) - row_counts + before  # where the tile's first key of each digit lands
    if RANK_BY_SORT:
        # one sort of (digit, place) words: the keys in digit order, equal digits in input order;
        # a key's rank is its place in that order less where its digit starts in the tile
        ranked = tl.sort(tl.where(inside, digit, BINS) << 16 | local)
        place = ranked & 0xFFFF
        d = ranked >> 16
        kept = d < BINS
        dest = tl.gather(starts - (tl.cumsum(counts, 0) - counts), tl.where(kept, d, 0), 0).to(tl.int64) + local
        cols = t * BLOCK + place
        v = tl.load(v_ptr + r * n + cols, mask=kept)
    else:
        # the interpreter's way (its bitonic network is slow): the equal digits before each key
        # counted over a BLOCK x BLOCK comparison (small tiles only)
        kept = inside
        cols = t * BLOCK + local
        earlier = (digit[None, :] == digit[:, None]) & (local[None, :] < local[:, None]) & inside[None, :]
        rank = tl.sum(earlier.to(tl.int32), 1)
        dest = tl.gather(starts, digit, 0).to(tl.int64) + rank
        v = tl.load(v_ptr + r * n + cols, mask=kept)
    if i_ptr is None:
        index = cols.to(tl.int32)
    else:
        index = tl.load(i_ptr + r * n + cols, mask=kept)
    tl.store(v_out + r * n + dest, v, mask=kept)
    tl.store(i_out + r * n + dest, index.to(i_out.dtype.element_ty), mask=kept)


def digit_passes(dtype) -> tuple[int, ...]:
    return DIGIT_PASSES.get(dtype.name, tuple(range(DIGITS)))


def radix_setting(device, rows: int, n: int, dtype) -> dict:
    return autotune.setting(RADIX_SORT, device, width=pow2_at_least(n), elements=rows * n, dtype=dtype)


def radix_sort(rows, descending: bool, setting=None, values=None):
    """(values, indices) of rows [..., n] (contiguous) sorted along the last dim; setting overrides
    the served one (the certifier's), values is the output to write (its workload's)."""
    plan = served_plan("sort.radix", rows, (descending,), setting, radix_setting, radix_plan)
    done = plans.execute(plan, {"x": rows, "values": values})
    return done["values"], done["indices"]


def state_words(rows: int, tiles: int, passes: int) -> int:
    """The int32 state: the counters, the row histograms, a pass's status words per tile and digit."""
    return COUNTERS + rows * DIGITS * 256 + passes * rows * tiles * 256


def radix_plan(shape, dtype, descending: bool, device, setting=None) -> LaunchPlan:
    n = shape[-1]
    rows = prod(shape) // n
    s = {**launch.tiles("radix", device), **dict(setting or {})}
    block, warps = s["block"], s["num_warps"]
    if block > (1 << 16 if s["rank_by_sort"] else 256):
        raise ArgumentError(f"a radix tile of {block} keys is over what its ranking takes (rank_by_sort "
                         f"{s['rank_by_sort']}: 16-bit places, else a block x block comparison of at most 256)")
    tiles = triton.cdiv(n, block)
    passes = digit_passes(dtype)
    words = state_words(rows, tiles, len(passes))
    per_row, chunk = split(rows, n, block, launch.tiles("select", device)["programs"])
    meta = dict(DESCENDING=descending, BLOCK=block, num_warps=warps)
    launches = [Launch(zero_kernel, (triton.cdiv(words, 1024),), (Slot("state"), words), dict(BLOCK=1024, num_warps=4)),
                Launch(radix_histogram_kernel, (rows, per_row), (Slot("x"), Slot("state"), n, chunk), meta)]
    for j, digit in enumerate(passes):
        source = "x" if j == 0 else "va" if j % 2 else "vb"
        index = None if j == 0 else Slot("ia" if j % 2 else "ib")
        last = j == len(passes) - 1
        target, target_index = ("values", "indices") if last else ("vb", "ib") if j % 2 else ("va", "ia")
        launches.append(Launch(radix_scatter_kernel, (rows * tiles,),
                               (Slot(source), index, Slot(target), Slot(target_index), Slot("state"), n, tiles),
                               {**meta, "DIGIT": digit, "PASS": j, "RANK_BY_SORT": bool(s["rank_by_sort"]),
                                "WINDOW": min(LOOK_BACK, pow2_at_least(tiles))}))
    ping_pong = () if len(passes) == 1 else (
        plans.workspace("va", (rows * n,), dtype), plans.workspace("ia", (rows * n,), dtypes.int32)) + (
        () if len(passes) == 2 else (plans.workspace("vb", (rows * n,), dtype),
                                     plans.workspace("ib", (rows * n,), dtypes.int32)))
    return LaunchPlan(device, tuple(launches),
                      outputs=(plans.output("values", shape, dtype), plans.output("indices", shape, dtypes.INDEX)),
                      workspace=ping_pong + (plans.workspace("state", (words,), dtypes.int32),))


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
    "radix_sort", params={"block": (1024, 2048, 4096, 8192), "num_warps": (4, 8, 16)},
    key={"width": "exact", "elements": "elements", "dtype": "dtype"}, default_from="tiles.radix",
    workload=radix_workload))
