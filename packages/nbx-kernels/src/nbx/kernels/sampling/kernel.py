"""The decoding step of nbx.core.ops.sampling over rows x C programs (a row split into C chunks, so
a few rows still fill the GPU), without a sort.

Weights are exp as int64 fixed point computed in integer arithmetic (exp_weight, the same steps as
nbx.core.ops.sampling.weight: a device's exp differs from numpy's in its last bits), and masses are
their sums: exact in any order, so the chunking does not change them and the kept set and the token
are the numpy reference's. The launches, in order (sampling/__init__.py builds them):

  chunk_max      each chunk's max of l = x * (1 / T); every later program merges the C maxima
  (top-k)        top_k_digits: four radix-select digit histograms of x over the whole row (select's
                 digits and _found): the k-th largest x, scaled, is the k-th largest l (x -> x * (1/T)
                 is monotone)
  mass           (top-p) each chunk's kept weight and a count histogram of its weights' digits
                 (weight_digit: bit length and 3 bits below the leading one, monotone in w)
  band           (top-p, one program a row) the total, the goal p * total, and from the counts
                 (each bin's weights lie within a factor 9/8) the digits [d_min, d_max] that must
                 hold the threshold t; the band's weights bracket t: lo <= t < hi
  compact        (top-p) the exact mass above the band per chunk, the band's weights copied out,
                 and the counts of the band's weights in FINE equal steps of [lo, hi)
  resolve        (top-p, one program a row) t among the copied weights, sorted (held in registers
                 when they fit a block); a band larger than `cap` narrows to the fine steps that
                 must hold t (count bounds, as band's), whose weights one sweep of the row copies;
                 only where those too pass the cap (nearly equal weights) t is bisected over the row
  kept           each chunk's kept mass and last kept index (top-k, w >= t, min-p)
  draw           (one program a row) the chunk where the running kept mass passes u * kept, then
                 the token inside that one chunk

Every load is masked, row offsets are int64, grids come from the shapes on the host. The launches
keep multiplies and adds apart (enable_fp_fusion=False): l - max l rounds as on the host."""
import triton
import triton.language as tl

from nbx.core.ops.sampling import EXP2_Q30, LOG2E_Q30, WEIGHT_BITS

from ..sort.kernel import order_key
from ..sort.select import _found, digit_counts

C0, C1, C2, C3, C4, C5, C6, C7, C8 = (tl.constexpr(c) for c in EXP2_Q30)
LOG2E = tl.constexpr(LOG2E_Q30)
SHIFT = tl.constexpr(WEIGHT_BITS - 30)
WEIGHT_OF_ONE = tl.constexpr(1 << WEIGHT_BITS)
TOP_BIT = tl.constexpr(WEIGHT_BITS)
BINS = tl.constexpr(512)          # weight_digit < 8 * 42


@triton.jit
def top_k_digits_kernel(x_ptr, hist_ptr, n, k, chunk, PASS: tl.constexpr, BLOCK: tl.constexpr):
    """hist[row, PASS] += the counts of digit PASS (8 bits, from the top) of program p's chunk of
    row r, among the keys whose earlier digits are those of the row's k-th largest key (the earlier
    passes' histograms, read with _found). Four passes give that key whole; top-k of long rows in
    sort/ reads the row twice and then only candidates, which a step that needs only the k-th
    value's digits does not."""
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    digit_counts(x_ptr, hist_ptr, r, p, n, k, chunk, True, PASS, BLOCK)

# the bounds' margins (float32-exact: a float constant enters a kernel as float32)
MORE, LESS = tl.constexpr(1.0 + 2.0 ** -20), tl.constexpr(1.0 - 2.0 ** -20)
TINY = tl.constexpr(2.0 ** -40)
BAND = tl.constexpr(6)            # a row's band record: lo, hi, d_min, d_max, its weights' count, the fine
                                  # steps' copies (-1: none taken)
PIVOTS = tl.constexpr(8)          # the masses one sweep of the row bisection weighs
# A band past the cap is cut into FINE equal steps of [lo, hi): a step of a band holds about 1/FINE
# of it (a band's digits span a factor 9/8, whose weights are rarely spread evenly, but 5,200 of a
# 163840-token row of smooth logits fall to a few tens a step); one sweep of the row then copies
# the steps that hold t, where a row bisection swept it once for each PIVOTS-way split (on the H200
# 1.59 ms for one such 163840-token row, 0.12 ms for 131072 tokens whose band fit the cap).
FINE = tl.constexpr(256)


@triton.jit
def exp_weight(d):
    """exp(d) * 2**40 as int64 for float32 d <= 0 (NaN and d < -64 weigh 0): see weight(). The
    polynomial runs in 32 bits: every partial sum of EXP2_Q30 is below 2**31 and the fraction f
    below 2**30, so (p * f) >> 30 is exactly umulhi(p, 4 f)."""
    ok = d >= -64.0
    x = (tl.where(ok, d, -64.0) * 16777216.0).to(tl.int32)  # * 2**24: exact, then truncated
    y = (x.to(tl.int64) * LOG2E) >> 24
    k = y >> 30
    f4 = ((y & 0x3FFFFFFF) << 2).to(tl.uint32)
    p = tl.zeros_like(f4) + C8
    p = tl.umulhi(p, f4) + C7
    p = tl.umulhi(p, f4) + C6
    p = tl.umulhi(p, f4) + C5
    p = tl.umulhi(p, f4) + C4
    p = tl.umulhi(p, f4) + C3
    p = tl.umulhi(p, f4) + C2
    p = tl.umulhi(p, f4) + C1
    p = tl.umulhi(p, f4) + C0
    return tl.where(ok, (p.to(tl.int64) << SHIFT) >> tl.minimum(-k, 63), 0)


@triton.jit
def weight_digit(w):
    """8 * (bit length of w) + the 3 bits below its leading one, for int64 w in [0, 2**40]; 0 for
    w = 0. Read from w's float64 bits (exact for w < 2**53), so it is monotone in w."""
    bits = w.to(tl.float64).to(tl.int64, bitcast=True)
    return tl.where(w > 0, (bits >> 49) - (1022 << 3), 0).to(tl.int32)


@triton.jit
def _scaled(x_ptr, r, cols, V, inv_t):
    inside = cols < V
    return tl.load(x_ptr + r * V + cols, mask=inside, other=float("-inf")).to(tl.float32) * inv_t, inside


@triton.jit
def _weights(l, inside, m, kth, cut, FLOOR, MIN_P: tl.constexpr):
    """The kept weights of a block: top-k (key >= kth), top-p (w >= cut), min-p (w >= FLOOR)."""
    w = exp_weight(l - m)
    w = tl.where(inside & (order_key(l).to(tl.int64) >= kth) & (w >= cut), w, 0)
    if MIN_P:
        w = tl.where(w >= FLOOR, w, 0)
    return w


@triton.jit
def _row_total(x_ptr, r, V, inv_t, m, kth, cut, BLOCK: tl.constexpr):
    """The sum of row r's weights kept by top-k and >= cut (int64: exact in any order)."""
    total = tl.zeros((), tl.int64)
    for start in range(0, V, BLOCK):
        l, inside = _scaled(x_ptr, r, start + tl.arange(0, BLOCK), V, inv_t)
        total += tl.sum(_weights(l, inside, m, kth, cut, 0, False), axis=0)
    return total


@triton.jit
def _row_max(max_ptr, r, C, CB: tl.constexpr):
    chunks = tl.arange(0, CB)
    return tl.max(tl.load(max_ptr + r * C + chunks, mask=chunks < C, other=float("-inf")), axis=0)


@triton.jit
def _row_sum(ptr, r, C, CB: tl.constexpr):
    chunks = tl.arange(0, CB)
    return tl.sum(tl.load(ptr + r * C + chunks, mask=chunks < C, other=0), axis=0)


@triton.jit
def _kth_key(sel_ptr, r, K, inv_t, TOP_K: tl.constexpr):
    """The order key of the k-th largest l (every key >= 0 without top-k): the select key of the
    k-th largest x from select's histograms, turned back into x, then scaled."""
    kth = tl.zeros((), tl.int64)
    if TOP_K:
        threshold, _ = _found(sel_ptr, r, K, 4)
        key = ~threshold
        bits = tl.where((key >> 31) == 1, key ^ 0x80000000, ~key)
        kth = order_key(bits.to(tl.float32, bitcast=True) * inv_t).to(tl.int64)
    return kth


@triton.jit
def chunk_max_kernel(x_ptr, max_ptr, V, inv_t, chunk, BLOCK: tl.constexpr):
    r, c = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    m = float("-inf")
    for start in range(c * chunk, c * chunk + chunk, BLOCK):
        l, _ = _scaled(x_ptr, r, start + tl.arange(0, BLOCK), V, inv_t)
        m = tl.maximum(m, tl.max(l, axis=0))
    tl.store(max_ptr + r * tl.num_programs(1) + c, m)


@triton.jit
def mass_kernel(x_ptr, max_ptr, sel_ptr, total_ptr, hist_ptr, V, inv_t, K, chunk,
                TOP_K: tl.constexpr, CB: tl.constexpr, BLOCK: tl.constexpr):
    """total[r, c]: chunk c's weight kept by top-k; hist[r, c, :]: the counts of its digits."""
    r, c = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    C = tl.num_programs(1)
    m = _row_max(max_ptr, r, C, CB)
    kth = _kth_key(sel_ptr, r, K, inv_t, TOP_K)
    total = tl.zeros((), tl.int64)
    counts = tl.zeros((BINS,), tl.int32)
    for start in range(c * chunk, c * chunk + chunk, BLOCK):
        l, inside = _scaled(x_ptr, r, start + tl.arange(0, BLOCK), V, inv_t)
        w = _weights(l, inside, m, kth, 0, 0, False)
        total += tl.sum(w, axis=0)
        counts += tl.histogram(weight_digit(w), BINS, mask=w > 0)
    tl.store(total_ptr + r * C + c, total)
    tl.store(hist_ptr + (r * C + c) * BINS + tl.arange(0, BINS), counts)


@triton.jit
def _bin_bounds(d):
    """(floor of the least, ceil of the bound above) the weights of digit d (both 0 for d < 8)."""
    e = ((d >> 3) - 1).to(tl.int64)
    m3 = (d & 7).to(tl.int64)
    e = tl.minimum(tl.maximum(e, 0), TOP_BIT)  # digits past 8 * 42 hold no weight
    low = ((8 + m3) << e) >> 3
    high = (((9 + m3) << e) + 7) >> 3
    return tl.where(d >= 8, low, 0), tl.where(d >= 8, high, 0)


@triton.jit
def _bin_mass(hist_ptr, r, C, d, LOW: tl.constexpr):
    """(the least if LOW, else the most) mass row r's weights of digit d can hold, float64."""
    n = tl.zeros((BINS,), tl.int32)
    real = (d >= 0) & (d < BINS)
    for c in range(0, C):
        n += tl.load(hist_ptr + (r * C + c) * BINS + d, mask=real, other=0)
    low, high = _bin_bounds(d)
    if LOW:
        return n.to(tl.float64) * low.to(tl.float64) * LESS
    return n.to(tl.float64) * high.to(tl.float64) * MORE


@triton.jit
def band_kernel(total_ptr, hist_ptr, band_ptr, count_ptr, P, C, CB: tl.constexpr):
    """The band of digits that must hold row r's top-p threshold t, from count bounds on the
    bins' masses (float64 with a 2**-20 margin, far above the sums' rounding), and [lo, hi).
    Each bound on a mass above a digit is also read off the exact total minus the bound on the
    mass below it, so the band stays narrow for p near 1 too."""
    r = tl.program_id(0).to(tl.int64)
    total = _row_sum(total_ptr, r, C, CB).to(tl.float64)
    goal = total * P
    i = tl.arange(0, BINS)
    d = BINS - 1 - i                      # i = 0: the heaviest digit
    # at most the mass of the digits >= d; at least the mass of the digits > d
    # (the slack total * TINY: the total and the masses as float64 are rounded)
    most = tl.minimum(tl.cumsum(_bin_mass(hist_ptr, r, C, d, False), 0),
                      total + total * TINY - tl.cumsum(_bin_mass(hist_ptr, r, C, d - 1, True), 0, reverse=True))
    least_above = tl.maximum(tl.cumsum(_bin_mass(hist_ptr, r, C, d + 1, True), 0),
                             total - total * TINY - tl.cumsum(_bin_mass(hist_ptr, r, C, d, False), 0, reverse=True))
    # t's digit d* has mass(>= d*) >= goal and mass(> d*) < goal
    d_max = BINS - 1 - tl.min(tl.where(most >= goal, i, BINS), axis=0)
    d_min = BINS - 1 - tl.max(tl.where(least_above < goal, i, -1), axis=0)
    low, high = _bin_bounds(d)
    lo = tl.sum(tl.where(d == d_min, low, 0), axis=0)
    hi = tl.sum(tl.where(d == d_max, high, 0), axis=0)
    lost = d_min > d_max                  # never expected: then the band is every weight
    lo = tl.where(lost, 0, lo)
    hi = tl.where(lost, WEIGHT_OF_ONE + 1, hi)
    d_min = tl.where(lost, 0, d_min)
    d_max = tl.where(lost, BINS - 1, d_max)
    nothing = goal <= 0.0                 # p = 0, or no weight: the bisection's answer, 2**40
    lo = tl.where(nothing, WEIGHT_OF_ONE, lo)
    hi = tl.where(nothing, WEIGHT_OF_ONE + 1, hi)
    d_min = tl.where(nothing, BINS, d_min)
    d_max = tl.where(nothing, BINS, d_max)
    tl.store(band_ptr + r * BAND, lo.to(tl.int64))
    tl.store(band_ptr + r * BAND + 1, hi.to(tl.int64))
    tl.store(band_ptr + r * BAND + 2, d_min.to(tl.int64))
    tl.store(band_ptr + r * BAND + 3, d_max.to(tl.int64))
    # the band's weights, counted exactly from the digits' histograms: compact counts fine steps past the cap only
    inside = (i >= d_min) & (i <= d_max)   # only the band's few digits are read from each chunk's histogram
    held = tl.zeros((BINS,), tl.int32)
    for c in range(0, C):
        held += tl.load(hist_ptr + (r * C + c) * BINS + i, mask=inside, other=0)
    tl.store(band_ptr + r * BAND + 4, tl.sum(held.to(tl.int64), axis=0))
    tl.store(band_ptr + r * BAND + 5, -1)
    tl.store(count_ptr + r, 0)


@triton.jit
def _fine_step(w, lo, width):
    """The step of [lo, lo + width) among FINE equal ones that holds w (clamped to the steps)."""
    return tl.minimum(tl.maximum((w - lo) * FINE // width, 0), FINE - 1).to(tl.int32)


@triton.jit
def _fine_start(lo, width, step):
    """The least weight of fine step `step` (the first w with (w - lo) * FINE // width >= step)."""
    return lo + (step.to(tl.int64) * width + FINE - 1) // FINE


@triton.jit
def _band_of(w, digit, d_min, d_max):
    return (w > 0) & (digit >= d_min) & (digit <= d_max)


@triton.jit
def compact_kernel(x_ptr, max_ptr, sel_ptr, band_ptr, count_ptr, above_ptr, cand_ptr, fine_ptr, V, inv_t, K,
                   chunk, CAP, TOP_K: tl.constexpr, CB: tl.constexpr, BLOCK: tl.constexpr):
    """above[r, c]: chunk c's mass above the band; the band's weights appended to cand[r, :CAP]
    (the count goes on past CAP: resolve then narrows the band); fine[r, c, :]: for a band of more
    than CAP weights, the counts of chunk c's in each fine step of [lo, hi)."""
    r, c = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    C = tl.num_programs(1)
    m = _row_max(max_ptr, r, C, CB)
    kth = _kth_key(sel_ptr, r, K, inv_t, TOP_K)
    lo = tl.load(band_ptr + r * BAND)
    width = tl.maximum(tl.load(band_ptr + r * BAND + 1) - lo, 1)
    d_min = tl.load(band_ptr + r * BAND + 2)
    d_max = tl.load(band_ptr + r * BAND + 3)
    wide = tl.load(band_ptr + r * BAND + 4) > CAP   # resolve reads the fine steps of such a band alone
    above = tl.zeros((), tl.int64)
    fine = tl.zeros((FINE,), tl.int32)
    for start in range(c * chunk, c * chunk + chunk, BLOCK):
        l, inside = _scaled(x_ptr, r, start + tl.arange(0, BLOCK), V, inv_t)
        w = _weights(l, inside, m, kth, 0, 0, False)
        digit = weight_digit(w).to(tl.int64)
        above += tl.sum(tl.where(digit > d_max, w, 0), axis=0)
        chosen = _band_of(w, digit, d_min, d_max)
        if wide:
            fine += tl.histogram(_fine_step(w, lo, width), FINE, mask=chosen)
        n = tl.sum(chosen.to(tl.int32), axis=0)
        if n > 0:
            base = tl.atomic_add(count_ptr + r, n, sem="relaxed")
            at = base + tl.cumsum(chosen.to(tl.int32), axis=0) - 1
            tl.store(cand_ptr + r * CAP + at, w, mask=chosen & (at < CAP))
    tl.store(above_ptr + r * C + c, above)
    if wide:
        tl.store(fine_ptr + (r * C + c) * FINE + tl.arange(0, FINE), fine)


@triton.jit
def _sorted_threshold(cand_ptr, r, CAP, count, above, goal, WIDTH: tl.constexpr):
    """The largest copied weight v whose {w >= v} holds float64 mass >= goal (above: the mass over
    the band): the copies sorted, their mass from each one up a reverse cumsum (at the first of
    equal weights it holds them all)."""
    lanes = tl.arange(0, WIDTH)
    held = tl.sort(tl.load(cand_ptr + r * CAP + lanes, mask=lanes < count, other=0))
    mass = (above + tl.cumsum(held, 0, reverse=True)).to(tl.float64)
    return tl.max(tl.where((held > 0) & (mass >= goal), held, 0), axis=0)


@triton.jit
def resolve_kernel(x_ptr, max_ptr, sel_ptr, total_ptr, band_ptr, count_ptr, above_ptr, cand_ptr, fine_ptr, cut_ptr,
                   V, inv_t, K, P, C, TOP_K: tl.constexpr, CB: tl.constexpr, BLOCK: tl.constexpr,
                   SMALL: tl.constexpr, CAP: tl.constexpr):
    """cut[r] = the largest t whose {w >= t} holds float64 mass >= goal: t is one of the band's
    weights, found among their copies when they all fit (CAP; a short sort for SMALL or fewer),
    else among the copies of the fine steps that must hold it (_fine_threshold)."""
    r = tl.program_id(0).to(tl.int64)
    goal = _row_sum(total_ptr, r, C, CB).to(tl.float64) * P
    count = tl.load(count_ptr + r).to(tl.int64)
    lo = tl.load(band_ptr + r * BAND)
    if count <= SMALL:
        if count > 0:
            lo = _sorted_threshold(cand_ptr, r, CAP, count, _row_sum(above_ptr, r, C, CB), goal, SMALL)
    elif count <= CAP:
        lo = _sorted_threshold(cand_ptr, r, CAP, count, _row_sum(above_ptr, r, C, CB), goal, CAP)
    else:                                 # a band too wide to copy
        lo = _fine_threshold(x_ptr, max_ptr, sel_ptr, band_ptr, above_ptr, cand_ptr, fine_ptr, r, lo, goal, V, inv_t,
                             K, C, TOP_K, CB, BLOCK, CAP)
    tl.store(cut_ptr + r, lo)


@triton.jit
def _fine_threshold(x_ptr, max_ptr, sel_ptr, band_ptr, above_ptr, cand_ptr, fine_ptr, r, lo, goal, V, inv_t, K, C,
                    TOP_K: tl.constexpr, CB: tl.constexpr, BLOCK: tl.constexpr, CAP: tl.constexpr):
    """t of a band past the cap. From the fine steps' counts, bounds on the mass at and above each
    step (as band_kernel's on digits) give the steps [s_min, s_max] that must hold t; one sweep of
    the row copies their weights and sums the band's above them, and t is found among the copies.
    Steps holding more than CAP (nearly equal weights) leave t to a bisection over the row within
    those steps' weights."""
    hi = tl.load(band_ptr + r * BAND + 1)
    d_min = tl.load(band_ptr + r * BAND + 2)
    d_max = tl.load(band_ptr + r * BAND + 3)
    width = tl.maximum(hi - lo, 1)
    above = _row_sum(above_ptr, r, C, CB)
    step = tl.arange(0, FINE)
    n = tl.zeros((FINE,), tl.int32)
    for c in range(0, C):
        n += tl.load(fine_ptr + (r * C + c) * FINE + step)
    first = _fine_start(lo, width, step)
    bound = tl.where(step == FINE - 1, hi, _fine_start(lo, width, step + 1))   # past the step's weights
    held = n.to(tl.int64)
    # the least and the most mass of the weights at or above each step (exact int64, then float64 with
    # the bounds' margins); t's step s* has mass(>= s*) >= goal and mass(> s*) < goal
    least = (above + tl.cumsum(held * first, 0, reverse=True)).to(tl.float64) * LESS
    most = (above + tl.cumsum(held * (bound - 1), 0, reverse=True)).to(tl.float64) * MORE
    s_max = tl.max(tl.where(most >= goal, step, -1), axis=0)
    s_min = tl.max(tl.where(least >= goal, step, 0), axis=0)
    copies = tl.sum(tl.where((step >= s_min) & (step <= s_max), held, 0), axis=0)
    m = _row_max(max_ptr, r, C, CB)
    kth = _kth_key(sel_ptr, r, K, inv_t, TOP_K)
    if (s_max >= s_min) & (copies <= CAP):
        higher = tl.zeros((), tl.int64)   # the band's mass above the steps
        taken = tl.zeros((), tl.int32)
        for start in range(0, V, BLOCK):
            l, inside = _scaled(x_ptr, r, start + tl.arange(0, BLOCK), V, inv_t)
            w = _weights(l, inside, m, kth, 0, 0, False)
            chosen = _band_of(w, weight_digit(w).to(tl.int64), d_min, d_max)
            at_step = _fine_step(w, lo, width)
            higher += tl.sum(tl.where(chosen & (at_step > s_max), w, 0), axis=0)
            keep = chosen & (at_step >= s_min) & (at_step <= s_max)
            at = taken + tl.cumsum(keep.to(tl.int32), axis=0) - 1
            tl.store(cand_ptr + r * CAP + at, w, mask=keep)
            taken += tl.sum(keep.to(tl.int32), axis=0)
        tl.debug_barrier()                # the copies, stored by every thread, read back by all
        tl.store(band_ptr + r * BAND + 5, copies)
        lo = _sorted_threshold(cand_ptr, r, CAP, copies, above + higher, goal, CAP)
    else:                                 # the steps' weights too many to copy: the row itself
        if s_max >= s_min:
            hi = tl.where(s_max == FINE - 1, hi, _fine_start(lo, width, s_max + 1))
            lo = _fine_start(lo, width, s_min)
        j = tl.arange(0, PIVOTS)
        while hi - lo > 1:
            pace = tl.maximum((hi - lo) // (PIVOTS + 1), 1)
            pivots = tl.minimum(lo + pace * (j + 1), hi - 1)
            mass = tl.zeros((PIVOTS,), tl.int64)
            for start in range(0, V, BLOCK):
                l, inside = _scaled(x_ptr, r, start + tl.arange(0, BLOCK), V, inv_t)
                w = _weights(l, inside, m, kth, 0, 0, False)
                mass += tl.sum(tl.where(w[:, None] >= pivots[None, :], w[:, None], 0), axis=0)
            ok = mass.to(tl.float64) >= goal     # true up to some pivot: the mass falls as they rise
            below = tl.max(tl.where(ok, pivots, lo), axis=0)
            hi = tl.min(tl.where(ok, hi, pivots), axis=0)
            lo = below
    return lo


@triton.jit
def kept_kernel(x_ptr, max_ptr, sel_ptr, cut_ptr, kept_ptr, last_ptr, V, inv_t, K, FLOOR, chunk,
                TOP_K: tl.constexpr, TOP_P: tl.constexpr, MIN_P: tl.constexpr, CB: tl.constexpr,
                BLOCK: tl.constexpr):
    """kept[r, c], last[r, c]: chunk c's kept mass and its last kept index (-1: none)."""
    r, c = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    C = tl.num_programs(1)
    m = _row_max(max_ptr, r, C, CB)
    kth = _kth_key(sel_ptr, r, K, inv_t, TOP_K)
    cut = tl.zeros((), tl.int64)
    if TOP_P:
        cut = tl.load(cut_ptr + r)
    kept = tl.zeros((), tl.int64)
    last = tl.full((), -1, tl.int64)
    for start in range(c * chunk, c * chunk + chunk, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        l, inside = _scaled(x_ptr, r, cols, V, inv_t)
        w = _weights(l, inside, m, kth, cut, FLOOR, MIN_P)
        kept += tl.sum(w, axis=0)
        last = tl.maximum(last, tl.max(tl.where(w > 0, cols, -1), axis=0).to(tl.int64))
    tl.store(kept_ptr + r * C + c, kept)
    tl.store(last_ptr + r * C + c, last)


@triton.jit
def draw_kernel(x_ptr, max_ptr, sel_ptr, cut_ptr, kept_ptr, last_ptr, u_ptr, out_ptr, V, inv_t, K, FLOOR, chunk, C,
                TOP_K: tl.constexpr, TOP_P: tl.constexpr, MIN_P: tl.constexpr, CB: tl.constexpr,
                BLOCK: tl.constexpr):
    """The first index whose running kept mass exceeds int64(u * kept) (float64 product), found in
    the one chunk where the chunks' running mass passes it; else the last kept index (0: none)."""
    r = tl.program_id(0).to(tl.int64)
    chunks = tl.arange(0, CB)
    real = chunks < C
    kept = tl.load(kept_ptr + r * C + chunks, mask=real, other=0)
    target = (tl.load(u_ptr + r).to(tl.float64) * tl.sum(kept, axis=0).to(tl.float64)).to(tl.int64)
    c = tl.min(tl.where(real & (tl.cumsum(kept, axis=0) > target), chunks, CB), axis=0).to(tl.int64)
    last = tl.max(tl.load(last_ptr + r * C + chunks, mask=real, other=-1), axis=0)
    token = tl.maximum(last, 0)
    if c < C:
        running = tl.sum(tl.where(chunks < c, kept, 0), axis=0)
        m = _row_max(max_ptr, r, C, CB)
        kth = _kth_key(sel_ptr, r, K, inv_t, TOP_K)
        cut = tl.zeros((), tl.int64)
        if TOP_P:
            cut = tl.load(cut_ptr + r)
        token = tl.full((), V, tl.int64)
        for start in range(c * chunk, c * chunk + chunk, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            l, inside = _scaled(x_ptr, r, cols, V, inv_t)
            w = _weights(l, inside, m, kth, cut, FLOOR, MIN_P)
            sums = tl.cumsum(w, axis=0) + running
            token = tl.minimum(token, tl.min(tl.where((sums > target) & (w > 0), cols, V), axis=0).to(tl.int64))
            running += tl.sum(w, axis=0)
    tl.store(out_ptr + r, token)
