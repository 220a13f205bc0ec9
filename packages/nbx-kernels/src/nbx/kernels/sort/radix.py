"""Sort of rows longer than one program: a onesweep LSD radix sort over digits of the order key.

The key (order_key, complemented for descending) has 32 bits; a digit is `digit_bits` of them (the
setting: 4 or 8). A dtype whose low bits are a function of its higher ones (bfloat16's low 16,
float16's low 13, int8's 8-30 ...) skips the digits made of those only (VARYING_BITS). Launches for
any row length: one zeroing of the state, one histogram, one scatter a pass (10 for float32 in
4-bit digits, 6 in 8-bit):

  histogram  one read of the keys: the row's counts of every digit of every pass (hist[row, digit
             position, digit]), rows x P programs adding their counts atomically
  scatter    one launch a pass over rows x groups, each program one group of `group` tiles of
             `block` keys: it takes a virtual group id from an atomic counter (so a group only ever
             waits on groups that took an earlier id, which are running or done: no deadlock
             whatever order the GPU starts programs in), reads and counts the group's keys (every
             tile's load in flight at once, with the row's counts and the first tile's indices),
             publishes the counts in its status words, and looks back over the earlier groups of
             its row (decoupled look-back: a group's word holds its own counts until it knows its
             inclusive prefix, then that) to learn where its keys of each digit start; a one-tile
             group ranks its keys before looking back, giving the earlier groups that long to
             publish. The tiles are then ranked inside the tile stably (4-bit digits: cumsums of
             one-hot digits, four 16-bit counters packed in a uint64, four cumsums a key; 8-bit
             digits: one tl.sort of (digit << 16 | place) words, then the values and indices
             gathered into that order so a digit's keys leave as one run) and written one after
             another, the next tile's loads in flight meanwhile. Each pass reads keys and indices
             once from DRAM (a group's later tiles twice, the second time from L2) and writes them
             once.

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

# the status words a look-back step reads (one load each, two a thread of 256): 32 tiles of 16
# digits, 8 of 256; a row of fewer tiles reads their count to a power of two
LOOK_BACK_WORDS = 512
COUNTERS = 16   # the state's first words: the passes' virtual tile counters (padded)
# the bits of a dtype's order key that vary: the others are functions of the higher ones (the sign
# decides them), so a digit of none of these bits needs no pass
VARYING_BITS = {"bfloat16": range(16, 32), "float16": range(13, 32), "int8": (*range(8), 31),
                "int16": (*range(16), 31), "uint8": range(8), "bool": (0,), "uint16": range(16)}


@triton.jit
def _sort_keys(v_ptr, r, cols, n, limit, DESCENDING: tl.constexpr):
    """(values, order keys, inside) of row r's keys at cols (those below limit)."""
    inside = cols < limit
    v = tl.load(v_ptr + r * n + cols, mask=inside)
    key = order_key(v)
    if DESCENDING:
        key = ~key
    return v, key, inside


@triton.jit
def _digit(key, at, BITS: tl.constexpr):
    """Digit `at` (0 lowest; a constant or a kernel argument) of BITS bits of the keys."""
    return ((key >> (at * BITS)) & ((1 << BITS) - 1)).to(tl.int32)


@triton.jit
def radix_histogram_kernel(v_ptr, state_ptr, n, chunk, DESCENDING: tl.constexpr, BITS: tl.constexpr,
                           BLOCK: tl.constexpr):
    """state[COUNTERS + (row * digits + j) * bins + d] += the keys of this chunk whose digit j is d."""
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    DIGITS: tl.constexpr = 32 // BITS
    BINS: tl.constexpr = 1 << BITS
    which = tl.arange(0, DIGITS)[:, None]
    counts = tl.zeros((DIGITS, BINS), tl.int32)
    for start in range(p * chunk, p * chunk + chunk, BLOCK):
        values, key, inside = _sort_keys(v_ptr, r, start + tl.arange(0, BLOCK), n, n, DESCENDING)
        for j in tl.static_range(DIGITS):
            counts += tl.where(which == j, tl.histogram(_digit(key, j, BITS), BINS, mask=inside)[None, :], 0)
    at = (r * DIGITS + which) * BINS + tl.arange(0, BINS)[None, :]
    tl.atomic_add(state_ptr + 16 + at, counts, sem="relaxed")


@triton.jit
def _look_back(status_ptr, r, t, tiles, BINS: tl.constexpr, WINDOW: tl.constexpr):
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
def _field_sum(digit, inside, q: tl.constexpr):
    one = tl.full(digit.shape, 1, tl.uint64) << (16 * (digit & 3)).to(tl.uint64)
    return tl.cumsum(tl.where(inside & ((digit >> 2) == q), one, 0).to(tl.uint64), 0)


@triton.jit
def _tile(v_ptr, i_ptr, r, cols, n, limit, digit_at, DESCENDING: tl.constexpr, BITS: tl.constexpr):
    """(values, indices, digits, inside) of row r's keys at cols below limit; i_ptr None: the first
    pass (each key's index is its column)."""
    v, key, inside = _sort_keys(v_ptr, r, cols, n, limit, DESCENDING)
    if i_ptr is None:
        index = cols.to(tl.int32)
    else:
        index = tl.load(i_ptr + r * n + cols, mask=inside)
    return v, index, _digit(key, digit_at, BITS), inside


@triton.jit
def _ranked(v, index, digit, inside, counts, BITS: tl.constexpr, BLOCK: tl.constexpr):
    """(values, indices, digits, ranks, kept) of a tile: a key's rank is its place among the tile's
    keys of its digit, in input order; 8-bit tiles come back permuted into digit order."""
    local = tl.arange(0, BLOCK)
    BINS: tl.constexpr = 1 << BITS
    if BITS == 8:
        # one sort of (digit, place) words: the keys in digit order, equal digits in input order;
        # a key's rank is its place in that order less where its digit starts in the tile, and
        # the tile's values and indices follow that order (a gather through shared memory), so
        # each digit's keys leave as one coalesced run
        ranked = tl.sort(tl.where(inside, digit, BINS) << 16 | local)
        place = ranked & 0xFFFF
        d = ranked >> 16
        kept = d < BINS
        d = tl.where(kept, d, 0)
        v = tl.gather(v, place, 0)
        index = tl.gather(index, place, 0)
        rank = local - tl.gather(tl.cumsum(counts, 0) - counts, d, 0)
    else:
        # 16 digits: a key's rank among the tile's keys of its digit is a cumsum of one-hot digits,
        # four 16-bit counters packed to a uint64 (four cumsums a key instead of sixteen)
        kept = inside
        d = digit
        rank = tl.zeros((BLOCK,), tl.int32)
        for q in tl.static_range(4):  # one cumsum live at a time (registers: a tile of 16 keys a thread)
            field = (_field_sum(digit, inside, q) >> (16 * (digit & 3)).to(tl.uint64)) & 0xFFFF
            rank = tl.where((digit >> 2) == q, field.to(tl.int32) - 1, rank)
    return v, index, d, rank, kept


# the digit and the pass are arguments, not constants: one compile serves every pass but the first
# (which reads no indices), where constants made one a pass (10 a setting for 4-bit float32 keys)
@triton.jit(do_not_specialize=["digit_at", "pass_at"])
def radix_scatter_kernel(v_ptr, i_ptr, v_out, i_out, state_ptr, n, groups, digit_at, pass_at,
                         DESCENDING: tl.constexpr, BITS: tl.constexpr, BLOCK: tl.constexpr, GROUP: tl.constexpr,
                         WINDOW: tl.constexpr):
    """One pass over digit digit_at of BITS bits (the pass_at-th pass run); i_ptr None: the first pass.
    A program sorts one group of GROUP tiles of BLOCK keys, the unit of the look-back. The order of
    the steps hides latency: the group's keys are read (every tile's load in flight at once) and
    counted first, and (GROUP 1) the tile is ranked between publishing its counts and looking back
    (a group's reads gave the earlier groups that time); the tiles are then ranked and written one
    after another, each tile's keys and indices loaded while the one before is ranked."""
    DIGITS: tl.constexpr = 32 // BITS
    BINS: tl.constexpr = 1 << BITS
    vid = tl.atomic_add(state_ptr + pass_at, 1, sem="relaxed").to(tl.int64)
    r, g = vid // groups, vid % groups
    total = tl.num_programs(0).to(tl.int64)   # rows x groups
    status_ptr = state_ptr + 16 + total // groups * DIGITS * BINS + pass_at * total * BINS
    bins = tl.arange(0, BINS)
    local = tl.arange(0, BLOCK)
    first = g * (GROUP * BLOCK)
    v, index, digit, inside = _tile(v_ptr, i_ptr, r, first + local, n, n, digit_at, DESCENDING, BITS)
    row_counts = tl.load(state_ptr + 16 + (r * DIGITS + digit_at) * BINS + bins)
    tile_counts = tl.histogram(digit, BINS, mask=inside)
    counts = tile_counts
    for j in tl.static_range(1, GROUP):   # the group's other tiles: keys only, counted
        other_v, other, other_inside = _sort_keys(v_ptr, r, first + j * BLOCK + local, n, n, DESCENDING)
        counts += tl.histogram(_digit(other, digit_at, BITS), BINS, mask=other_inside)
    mine = status_ptr + (r * groups + g) * BINS + bins
    if g != 0:
        tl.atomic_xchg(mine, counts + 1, sem="relaxed")
    if GROUP == 1:  # ranked before the look-back (a group's reads gave the earlier groups that time)
        v, index, d, rank, kept = _ranked(v, index, digit, inside, tile_counts, BITS, BLOCK)
    if g == 0:
        before = tl.zeros((BINS,), tl.int32)
    else:
        before = _look_back(status_ptr, r, g, groups, BINS, WINDOW)
    tl.atomic_xchg(mine, -(before + counts + 1), sem="relaxed")
    starts = tl.cumsum(row_counts, 0) - row_counts + before  # where the group's first key of each digit lands
    for j in range(GROUP):
        if GROUP > 1:  # the next tile's loads in flight while this one is ranked and written
            limit = tl.where(j + 1 < GROUP, n, 0)   # past the group's last tile: nothing
            next_v, next_index, next_digit, next_inside = _tile(v_ptr, i_ptr, r, first + (j + 1) * BLOCK + local, n,
                                                                limit, digit_at, DESCENDING, BITS)
            v, index, d, rank, kept = _ranked(v, index, digit, inside, tile_counts, BITS, BLOCK)
        dest = tl.gather(starts, d, 0).to(tl.int64) + rank
        tl.store(v_out + r * n + dest, v, mask=kept)
        tl.store(i_out + r * n + dest, index.to(i_out.dtype.element_ty), mask=kept)
        if GROUP > 1:
            starts += tile_counts
            v, index, digit, inside = next_v, next_index, next_digit, next_inside
            tile_counts = tl.histogram(digit, BINS, mask=inside)


def look_back_window(bits: int, groups: int) -> int:
    """The groups a look-back step reads: LOOK_BACK_WORDS status words (at least 8 groups), no more
    than the row's groups to a power of two."""
    return min(pow2_at_least(groups), max(8, LOOK_BACK_WORDS >> bits))


def digit_passes(dtype, bits: int) -> tuple[int, ...]:
    """The digits (0 lowest) of `bits` bits whose pass the dtype's order key needs."""
    varying = VARYING_BITS.get(dtype.name, range(32))
    return tuple(j for j in range(32 // bits) if any(j * bits <= b < (j + 1) * bits for b in varying))


def radix_setting(device, rows: int, n: int, dtype) -> dict:
    return autotune.setting(RADIX_SORT, device, width=pow2_at_least(n), elements=rows * n, dtype=dtype)


def radix_sort_plan(shape, dtype, descending: bool, device, setting=None) -> LaunchPlan:
    """The radix sort's cached plan over rows of this shape (radix_sort runs it, the sort's cost reads it)."""
    return served_plan("sort.radix", shape, dtype, device, (descending,), setting, radix_setting, radix_plan)


def radix_sort(rows, descending: bool, setting=None, values=None):
    """(values, indices) of rows [..., n] (contiguous) sorted along the last dim; setting overrides
    the served one (the certifier's), values is the output to write (its workload's)."""
    plan = radix_sort_plan(rows.shape, rows.dtype, descending, rows.device, setting)
    done = plans.execute(plan, {"x": rows, "values": values})
    return done["values"], done["indices"]


def state_words(rows: int, groups: int, passes: int, bits: int) -> int:
    """The int32 state: the counters, the row histograms, a pass's status words per group and digit."""
    return COUNTERS + (rows * (32 // bits) + passes * rows * groups) * (1 << bits)


def groups_of(n: int, setting) -> int:
    """A row's groups of `group` tiles of `block` keys (a scatter program each)."""
    return triton.cdiv(n, setting["block"] * setting["group"])


def radix_plan(shape, dtype, descending: bool, device, setting=None) -> LaunchPlan:
    n = shape[-1]
    rows = prod(shape) // n
    s = {**launch.tiles("radix", device), **dict(setting or {})}
    block, warps, bits = s["block"], s["num_warps"], s["digit_bits"]
    if block >= 1 << 16 or bits not in (4, 8):
        raise ArgumentError(f"a radix tile ranks its keys by 16-bit places or counters, over digits of 4 or 8 bits: "
                            f"block {block} and digit_bits {bits} are not such")
    groups = groups_of(n, s)
    passes = digit_passes(dtype, bits)
    words = state_words(rows, groups, len(passes), bits)
    per_row, chunk = split(rows, n, block, launch.tiles("select", device)["programs"])
    meta = dict(DESCENDING=descending, BITS=bits, BLOCK=block, num_warps=warps)
    launches = [Launch(zero_kernel, (triton.cdiv(words, 1024),), (Slot("state"), words), dict(BLOCK=1024, num_warps=4)),
                Launch(radix_histogram_kernel, (rows, per_row), (Slot("x"), Slot("state"), n, chunk), meta)]
    for j, digit in enumerate(passes):
        source = "x" if j == 0 else "va" if j % 2 else "vb"
        index = None if j == 0 else Slot("ia" if j % 2 else "ib")
        last = j == len(passes) - 1
        target, target_index = ("values", "indices") if last else ("vb", "ib") if j % 2 else ("va", "ia")
        launches.append(Launch(radix_scatter_kernel, (rows * groups,),
                               (Slot(source), index, Slot(target), Slot(target_index), Slot("state"), n, groups,
                                digit, j),
                               {**meta, "GROUP": s["group"],
                                "WINDOW": look_back_window(bits, groups)}))
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


MAX_KEYS_A_THREAD = 16   # compiled for sm_90: 16 keys a thread take 148 registers (4-bit) and compile in ~10 s;
#                          32 take 255 and 64 compile for 105 s (4-bit, 8192 keys over 128 threads)
MAX_BITONIC_TILE = 4096  # 8-bit tiles rank by a bitonic tl.sort: 4096 keys 300 barriers, 8192 keys 443 and 26-54 s
MAX_GROUP_KEYS = 16384   # a program's keys: 2^24 keys make 1024 programs, a [64, 151936] batch 640


def bounded_compile(setting, facts) -> bool | str:
    """A constraint: the candidates whose compile time is bounded (the certifier compiles them all)."""
    a_thread = setting["block"] // (setting["num_warps"] * facts.value("compute.warp_size"))
    if a_thread > MAX_KEYS_A_THREAD:
        return f"{a_thread} keys a thread (above {MAX_KEYS_A_THREAD}: registers spill and the compile runs for minutes)"
    if setting["digit_bits"] == 8 and setting["block"] > MAX_BITONIC_TILE:
        return f"an 8-bit tile above {MAX_BITONIC_TILE} keys (its bitonic ranking: 400+ barriers, a minute to compile)"
    if setting["group"] > 1 and setting["block"] * setting["group"] > MAX_GROUP_KEYS:
        return f"groups of more than {MAX_GROUP_KEYS} keys (too few programs to fill the GPU)"
    return True


RADIX_SORT = autotune.declare(autotune.Tunable(
    "radix_sort", params={"block": (1024, 2048, 4096, 8192), "num_warps": (4, 8, 16), "digit_bits": (4, 8), "group": (1, 4)},
    key={"width": "exact", "elements": "elements", "dtype": "dtype"}, default_from="tiles.radix",
    workload=radix_workload, constraint=bounded_compile))
