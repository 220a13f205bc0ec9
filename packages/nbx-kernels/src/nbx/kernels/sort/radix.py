"""Sort of rows longer than one program: a onesweep LSD radix sort over 8-bit digits of the order key.

The key (order_key, complemented for descending) has 32 bits, four 8-bit digits (CUB's width); a
dtype whose low bits are a function of its higher ones (bfloat16's low 16, float16's low 13, ...)
skips the digits made of those only (VARYING_BITS). Launches for any row length: one zeroing of the
state, one histogram of the first pass's digit, then one scatter launch a pass (6 for float32, 4
for bfloat16):

  histogram  one read of the keys: the row's count of each value of the first pass's digit
  pass       one launch over rows x tiles of `block` keys. A program takes a virtual tile id from
             an atomic counter (a tile only ever waits on tiles of earlier ids, which are running
             or done: no deadlock whatever order the GPU starts programs in), reads the tile (the
             first pass: the values, which it packs with their column into 64-bit words; later
             passes: the words the pass before wrote), sorts it by digit with the family's
             bitonic network (sort_network) on (digit << 16 | place) words, in a layout whose low
             index bits are each thread's registers, reads the tile's digit counts off the sorted
             digits (a binary search a digit), publishes them in its status words and looks back
             over the earlier tiles of its row (decoupled look-back, WINDOW tiles a step, each
             digit's walk inside one warp) for where its keys of each digit start. It counts the
             next pass's digit into that pass's row counts (so no pass reads the keys for a
             histogram), and writes its words in digit order (a shared-memory gather), so each
             digit's keys leave as one coalesced run: the last pass writes the values and their
             int64 indices instead.

A word is (the value's bits << 32 | its column): one 8-byte load and store a key a pass, where
separate values and indices took two scattered stores. Every pass is stable (the network sorts
(digit, place) words: ties keep their places), so the sort is (ties in input order, descending too:
the key is complemented, not the position). A status word is 0 (not yet published), 1 + the tile's
count (its aggregate) or -(1 + the inclusive count of the row up to and including the tile). On
interp the programs run one after another in id order, so every look-back finds its predecessor's
inclusive word at once (a test walks aggregates on a hand-made status).
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
from .network import sort_network
from .select import zero_kernel
from .topk import served_plan, split

BINS = tl.constexpr(256)   # 8-bit digits
DIGIT_BITS = 8
COUNTERS = tl.constexpr(16)  # the state's first words: the passes' virtual tile counters (padded)
LOOK_BACK_WINDOW = 16      # tiles a look-back step reads for each digit (one load of each a thread)
MAX_TILE = 1 << 15         # a tile's places are 16-bit fields of its sort words
# the bits of a dtype's order key that vary: the others are functions of the higher ones (the sign
# decides them), so a digit of none of these bits needs no pass
VARYING_BITS = {"bfloat16": range(16, 32), "float16": range(13, 32), "int8": (*range(8), 31),
                "int16": (*range(16), 31), "uint8": range(8), "bool": (0,), "uint16": range(16)}


@triton.jit
def _bits(v):
    """The value's bits as a uint32 (zero-extended)."""
    if v.dtype == tl.int1:
        bits = v.to(tl.uint32)
    elif v.dtype.primitive_bitwidth == 32:
        bits = v.to(tl.uint32, bitcast=True)
    elif v.dtype.primitive_bitwidth == 16:
        bits = v.to(tl.uint16, bitcast=True).to(tl.uint32)
    else:
        bits = v.to(tl.uint8, bitcast=True).to(tl.uint32)
    return bits


@triton.jit
def _value(bits, DTYPE: tl.constexpr):
    """The DTYPE value whose bits (a uint32, _bits') these are."""
    if DTYPE == tl.int1:
        v = bits != 0
    elif DTYPE.primitive_bitwidth == 32:
        v = bits.to(DTYPE, bitcast=True)
    elif DTYPE.primitive_bitwidth == 16:
        v = bits.to(tl.uint16).to(DTYPE, bitcast=True)
    else:
        v = bits.to(tl.uint8).to(DTYPE, bitcast=True)
    return v


@triton.jit
def _key(v, DESCENDING: tl.constexpr):
    key = order_key(v)
    if DESCENDING:
        key = ~key
    return key


@triton.jit
def _digit(key, at):
    """Digit `at` (0 lowest; a kernel argument) of the keys."""
    return ((key >> (at * 8)) & 0xFF).to(tl.int32)


@triton.jit
def _tile_words(x_ptr, w_in, r, cols, inside, n):
    """Row r's words at cols: the first pass (w_in None) packs x's values with their columns."""
    if w_in is None:
        v = tl.load(x_ptr + r * n + cols, mask=inside)
        word = (_bits(v).to(tl.uint64) << 32) | cols.to(tl.uint64)
    else:
        word = tl.load(w_in + r * n + cols, mask=inside)
    return word


@triton.jit
def _tile_keys(x_ptr, w_in, r, cols, inside, n, DESCENDING: tl.constexpr):
    """Row r's order keys at cols, from x (the first pass) or from the words' values."""
    if w_in is None:
        v = tl.load(x_ptr + r * n + cols, mask=inside)
    else:
        v = _value((tl.load(w_in + r * n + cols, mask=inside) >> 32).to(tl.uint32), x_ptr.dtype.element_ty)
    return _key(v, DESCENDING)


@triton.jit
def radix_histogram_kernel(x_ptr, state_ptr, n, chunk, digit_at, DESCENDING: tl.constexpr, BLOCK: tl.constexpr):
    """The row's counts of each value of digit digit_at (the first pass's), added atomically by the
    rows x P programs into the first pass's row counts."""
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    counts = tl.zeros((BINS,), tl.int32)
    for start in range(p * chunk, p * chunk + chunk, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < n
        key = _key(tl.load(x_ptr + r * n + cols, mask=inside), DESCENDING)
        counts += tl.histogram(_digit(key, digit_at), BINS, mask=inside)
    tl.atomic_add(state_ptr + COUNTERS + r * BINS + tl.arange(0, BINS), counts, sem="relaxed")


@triton.jit
def _register_major(x, BLOCK: tl.constexpr, VECTOR: tl.constexpr, WARPS: tl.constexpr):
    """x [BLOCK] with its index bits reordered so each thread's registers (VECTOR-wide loads, then
    their repeats over the tile) are the low ones: the network's first stages then pair registers,
    not lanes. Any order sorts alike; this one only takes fewer shuffles."""
    REPS: tl.constexpr = BLOCK // (VECTOR * 32 * WARPS)
    if REPS >= 1:
        x = tl.reshape(tl.permute(tl.reshape(x, [REPS, WARPS, 32, VECTOR]), [1, 2, 0, 3]), [BLOCK])
    return x


@triton.jit
def _digit_starts(digits, BLOCK: tl.constexpr):
    """[BINS]: the first place of each digit in the tile's sorted digits (a branchless lower bound)."""
    bins = tl.arange(0, BINS)
    at = tl.zeros((BINS,), tl.int32)
    for k in tl.static_range(1, BLOCK.bit_length()):
        at = tl.where(tl.gather(digits, at + (BLOCK >> k) - 1, 0) < bins, at + (BLOCK >> k), at)
    return tl.where(tl.gather(digits, at, 0) < bins, at + 1, at)


@triton.jit
def _look_back(status_ptr, t, groups, WINDOW: tl.constexpr):
    """The keys of each digit in the row's tiles before t, from their status words ([BINS, groups]:
    a digit's tiles contiguous, a thread's digit its own). A step reads each digit's WINDOW nearest
    tiles not yet added (loads issued together: one round trip) and walks them nearest first in
    registers, adding aggregates until an inclusive word (added: that digit is done) or an
    unpublished one (the walk resumes there at the next step, which polls it again); tile 0 always
    publishes an inclusive word and places before it read as inclusive zeros, so every walk ends.
    CUB walks a tile a step, a thread a digit, likewise."""
    bins = tl.arange(0, BINS)
    prefix = tl.zeros((BINS,), tl.int32)
    end = tl.zeros((BINS,), tl.int64) + t        # each digit's tiles before `end` are not yet added
    pending = end > 0
    while tl.max(pending.to(tl.int32), 0) > 0:
        nearest = end - 1
        reading = pending
        walking = pending
        for k in tl.static_range(WINDOW):        # the loads depend on no word of this step: issued together
            tile = nearest - k
            word = tl.load(status_ptr + bins * groups + tile, mask=reading & (tile >= 0), other=-1, volatile=True)
            taken = walking & (word != 0)
            prefix += tl.where(taken, tl.where(word < 0, -word - 1, word - 1), 0)
            end -= taken.to(tl.int64)
            pending = pending & ~(taken & (word < 0))
            walking = taken & (word > 0)
    return prefix


# the digits and the pass are arguments, not constants: one compile serves every middle pass
@triton.jit(do_not_specialize=["digit_at", "next_at", "pass_at"])
def radix_pass_kernel(x_ptr, w_in, w_out, v_out, i_out, state_ptr, n, groups, digit_at, next_at, pass_at,
                      DESCENDING: tl.constexpr, HAS_NEXT: tl.constexpr, BLOCK: tl.constexpr,
                      VECTOR: tl.constexpr, WARPS: tl.constexpr, WINDOW: tl.constexpr):
    """One pass over digit digit_at (the pass_at-th pass run) of x's rows [rows, n]: w_in None reads
    x (the first pass), w_out None writes v_out and i_out (the last); HAS_NEXT counts digit next_at
    for the next pass. VECTOR: the keys a thread's load takes at once and WARPS the launch's warps
    (the network's layout)."""
    vid = tl.atomic_add(state_ptr + pass_at, 1, sem="relaxed").to(tl.int64)
    r, g = vid // groups, vid % groups
    rows = tl.num_programs(0).to(tl.int64) // groups
    region = state_ptr + COUNTERS + pass_at * rows * BINS * (1 + groups)   # this pass's row counts, then status
    status_ptr = region + rows * BINS + r * BINS * groups
    bins = tl.arange(0, BINS)
    local = tl.arange(0, BLOCK)
    cols = g * BLOCK + local
    inside = cols < n
    key = _tile_keys(x_ptr, w_in, r, cols, inside, n, DESCENDING)
    digit = _digit(key, digit_at)
    if HAS_NEXT:   # the next pass's digit, counted into its row counts while this tile is in registers
        tl.atomic_add(region + rows * BINS * (1 + groups) + r * BINS + bins,
                      tl.histogram(_digit(key, next_at), BINS, mask=inside), sem="relaxed")
    words = tl.where(inside, digit, BINS) << 16 | local   # keys past the row sort last
    order = tl.gather(sort_network(_register_major(words.to(tl.uint32), BLOCK, VECTOR, WARPS),
                                   BLOCK.bit_length() - 1), local, 0).to(tl.int32)
    sorted_digits = order >> 16
    starts = _digit_starts(sorted_digits, BLOCK)
    count = tl.minimum(n - g * BLOCK, BLOCK).to(tl.int32)
    counts = tl.where(bins == BINS - 1, count, tl.gather(starts, tl.minimum(bins + 1, BINS - 1), 0)) - starts
    mine = status_ptr + bins * groups + g
    if g != 0:
        tl.atomic_xchg(mine, counts + 1, sem="relaxed")
        before = _look_back(status_ptr, g, groups, WINDOW)
    else:
        before = tl.zeros((BINS,), tl.int32)
    tl.atomic_xchg(mine, -(before + counts + 1), sem="relaxed")
    row_counts = tl.load(region + r * BINS + bins)
    # where the tile's first key of each digit lands, less where that digit starts in the tile
    shift = tl.cumsum(row_counts, 0) - row_counts + before - starts
    kept = sorted_digits < BINS
    dest = tl.gather(shift, tl.where(kept, sorted_digits, 0), 0).to(tl.int64) + local
    # the words read again (L1/L2) rather than held through the network
    out = tl.gather(_tile_words(x_ptr, w_in, r, cols, inside, n), order & 0xFFFF, 0)
    if w_out is None:
        tl.store(v_out + r * n + dest, _value((out >> 32).to(tl.uint32), v_out.dtype.element_ty), mask=kept)
        tl.store(i_out + r * n + dest, (out & 0xFFFFFFFF).to(tl.int64), mask=kept)
    else:
        tl.store(w_out + r * n + dest, out, mask=kept)


def look_back_window(groups: int) -> int:
    """The tiles a look-back step reads: LOOK_BACK_WINDOW, no more than the row's tiles to a power of two."""
    return min(pow2_at_least(groups), LOOK_BACK_WINDOW)


def digit_passes(dtype) -> tuple[int, ...]:
    """The 8-bit digits (0 lowest) whose pass the dtype's order key needs."""
    varying = VARYING_BITS.get(dtype.name, range(32))
    return tuple(j for j in range(32 // DIGIT_BITS) if any(j * DIGIT_BITS <= b < (j + 1) * DIGIT_BITS for b in varying))


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


def state_words(rows: int, groups: int, passes: int) -> int:
    """The int32 state: the counters, then per pass the rows' digit counts and each tile's status words."""
    return COUNTERS.value + passes * rows * (1 << DIGIT_BITS) * (1 + groups)


def load_vector(itemsize: int, block: int, warps: int) -> int:
    """The keys a thread's 16-byte load takes (the network's register-major layout), at most its share."""
    return max(1, min(16 // itemsize, block // (32 * warps)))


def radix_plan(shape, dtype, descending: bool, device, setting=None) -> LaunchPlan:
    n = shape[-1]
    rows = prod(shape) // n
    s = {**launch.tiles("radix", device), **dict(setting or {})}
    block, warps = s["block"], s["num_warps"]
    if block > MAX_TILE or block & (block - 1):
        raise ArgumentError(f"a radix tile sorts its keys by 16-bit places in a bitonic network: block {block} is not "
                            f"a power of two up to {MAX_TILE}")
    groups = triton.cdiv(n, block)
    passes = digit_passes(dtype)
    words = state_words(rows, groups, len(passes))
    per_row, chunk = split(rows, n, block, launch.tiles("select", device)["programs"])
    launches = [Launch(zero_kernel, (triton.cdiv(words, 1024),), (Slot("state"), words), dict(BLOCK=1024, num_warps=4)),
                Launch(radix_histogram_kernel, (rows, per_row), (Slot("x"), Slot("state"), n, chunk, passes[0]),
                       dict(DESCENDING=descending, BLOCK=block, num_warps=warps))]
    for j, digit in enumerate(passes):
        first, last = j == 0, j == len(passes) - 1
        source = None if first else Slot("wa" if j % 2 else "wb")
        target = None if last else Slot("wb" if j % 2 else "wa")
        launches.append(Launch(radix_pass_kernel, (rows * groups,),
                               (Slot("x"), source, target, Slot("values") if last else None,
                                Slot("indices") if last else None, Slot("state"), n, groups, digit,
                                -1 if last else passes[j + 1], j),
                               dict(DESCENDING=descending, HAS_NEXT=not last, BLOCK=block,
                                    VECTOR=load_vector(dtype.itemsize if first else 8, block, warps), WARPS=warps,
                                    WINDOW=look_back_window(groups), num_warps=warps)))
    ping_pong = tuple(plans.workspace(name, (rows * n,), dtypes.uint64) for name in ("wa", "wb")[:min(2, len(passes) - 1)])
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


MAX_KEYS_A_THREAD = 32   # compiled for sm_90 (Triton 3.6): 16 keys a thread (4096 over 8 warps) take ~200
#                          registers; 32 (8192 over 8 warps) spill


def bounded_registers(setting, facts) -> bool | str:
    """A constraint: the candidates whose keys a thread stay in registers."""
    a_thread = setting["block"] // (setting["num_warps"] * facts.value("compute.warp_size"))
    if a_thread > MAX_KEYS_A_THREAD:
        return f"{a_thread} keys a thread (above {MAX_KEYS_A_THREAD}: the network's words and the tile's spill)"
    return True


RADIX_SORT = autotune.declare(autotune.Tunable(
    "radix_sort", params={"block": (2048, 4096, 8192), "num_warps": (4, 8, 16)},
    key={"width": "exact", "elements": "elements", "dtype": "dtype"}, default_from="tiles.radix",
    workload=radix_workload, constraint=bounded_registers))
