"""The decoding step of nbx.core.ops.sampling without a sort, each row split over P programs
(the grid is rows x P: 64 rows alone would leave most of a GPU idle).

Every launch re-derives what earlier launches found from small tables (a few hundred words a row,
cheaper to re-read than a launch to write down): the row's max from the programs' partial maxima;
the k-th largest logit from the four digit histograms of top-k's radix select (sort/select.py,
on the logits' own keys: l = x / T is monotone in x, so the k-th largest l is the k-th largest x
times 1/T); the top-p threshold, the largest weight t whose {w >= t} holds the asked mass, one
4-bit digit of t a launch, most significant first, from histograms of kept mass by digit (11
digits cover the 41 bits of a weight). Weights are exp as int64 fixed point
computed in integer arithmetic (exp_weight, the same steps as nbx.core.ops.sampling.weight: a
device's exp differs from numpy's in its last bits, and one float32 ulp of a probability is about
a thousand weight units), and masses are their sums: exact in any order, so the chunk size and the
device do not change them, and the sets kept and the token drawn are the numpy reference's. The
launch keeps multiplies and adds apart (enable_fp_fusion=False): l - max l rounds as on the host."""
import triton
import triton.language as tl

from nbx.core.ops.sampling import EXP2_Q30, LOG2E_Q30, WEIGHT_BITS

from ..sort.kernel import order_key
from ..sort.select import DIGITS, _found

C0, C1, C2, C3, C4, C5, C6, C7, C8 = (tl.constexpr(c) for c in EXP2_Q30)
LOG2E = tl.constexpr(LOG2E_Q30)
SHIFT = tl.constexpr(WEIGHT_BITS - 30)
WEIGHT_OF_ONE = tl.constexpr(1 << WEIGHT_BITS)


@triton.jit
def exp_weight(d):
    """exp(d) * 2**40 as int64 for float32 d <= 0 (NaN and d < -64 weigh 0): see weight()."""
    ok = d >= -64.0
    x = (tl.where(ok, d, -64.0) * 16777216.0).to(tl.int64)  # * 2**24: exact, then truncated
    y = (x * LOG2E) >> 24
    k = y >> 30
    f = y - (k << 30)
    p = tl.zeros_like(f) + C8
    p = ((p * f) >> 30) + C7
    p = ((p * f) >> 30) + C6
    p = ((p * f) >> 30) + C5
    p = ((p * f) >> 30) + C4
    p = ((p * f) >> 30) + C3
    p = ((p * f) >> 30) + C2
    p = ((p * f) >> 30) + C1
    p = ((p * f) >> 30) + C0
    return tl.where(ok, (p << SHIFT) >> tl.minimum(-k, 63), 0)


PB_MAX = 1024  # a row's programs at most: each launch re-reads the row's partial results
MASS_DIGITS = tl.constexpr(11)
MASS_BINS = tl.constexpr(16)


@triton.jit
def _scaled(x_ptr, r, cols, V, inv_t):
    inside = cols < V
    return tl.load(x_ptr + r * V + cols, mask=inside, other=float("-inf")).to(tl.float32) * inv_t, inside


@triton.jit
def _weights(l, inside, m, kth, cut, FLOOR, MIN_P: tl.constexpr):
    """The kept weights of a chunk: top-k (key >= kth), top-p (w >= cut), min-p (w >= FLOOR)."""
    w = exp_weight(l - m)
    w = tl.where(inside & (order_key(l).to(tl.int64) >= kth) & (w >= cut), w, 0)
    if MIN_P:
        w = tl.where(w >= FLOOR, w, 0)
    return w


@triton.jit
def _may_reach(l, m, lo):
    """Whether a weight of the block may reach lo, from its largest l alone (one exp a block): the
    integer exp is within 1e-7 relative and 2 absolute of exp, so w(d1) <= 2 w(d2) + 8 for d1 <= d2."""
    top = tl.max(tl.where(l == l, l, float("-inf")), 0)
    return 2 * exp_weight(top - m) + 8 >= lo


@triton.jit
def _least_kept(cut, FLOOR, MIN_P: tl.constexpr):
    """The least weight a kept logit has (a kept weight is positive)."""
    least = tl.maximum(cut, 1)
    if MIN_P:
        least = tl.maximum(least, FLOOR)
    return least


@triton.jit
def _row_max(max_ptr, r, PB: tl.constexpr):
    p = tl.arange(0, PB)
    return tl.max(tl.load(max_ptr + r * tl.num_programs(1) + p, mask=p < tl.num_programs(1), other=float("-inf")), 0)


@triton.jit
def _kth(hist_ptr, r, K, inv_t, TOP_K: tl.constexpr):
    """The order key of the K-th largest l (every key >= 0 when top-k is off)."""
    kth = tl.zeros((), tl.int64)
    if TOP_K:
        key, _ = _found(hist_ptr, r, K, DIGITS)  # the select key of the K-th largest x: ~order_key
        key = ~key
        bits = tl.where((key >> 31) == 1, key & 0x7FFFFFFF, ~key)  # order_key's inverse (floats)
        kth = order_key(bits.to(tl.float32, bitcast=True) * inv_t).to(tl.int64)
    return kth


@triton.jit
def _cut(mass_ptr, r, P, PASSES: tl.constexpr):
    """The first PASSES digits of the top-p threshold t, as the integer they make shifted to their
    place. The passes add only the masses of digits 1-15 (bin 0 of the first holds the row's kept
    total): a digit-0 bin is what its parent's mass leaves."""
    bins = tl.arange(0, MASS_BINS)
    total = tl.load(mass_ptr + r * MASS_DIGITS * MASS_BINS)
    goal = total.to(tl.float64) * P
    above = tl.zeros((), tl.int64)
    inside = total  # the mass of the weights under the digits found so far
    prefix = tl.zeros((), tl.int64)
    for j in tl.static_range(PASSES):
        mass = tl.where(bins == 0, 0, tl.load(mass_ptr + (r * MASS_DIGITS + j) * MASS_BINS + bins))
        mass = tl.where(bins == 0, inside - tl.sum(mass, 0), mass)
        at_least = above + tl.sum(tl.where(bins[None, :] >= bins[:, None], mass[None, :], 0), 1)
        digit = tl.max(tl.where(at_least.to(tl.float64) >= goal, bins, 0), 0)
        above += tl.sum(tl.where(bins > digit, mass, 0), 0)
        inside = tl.sum(tl.where(bins == digit, mass, 0), 0)
        prefix = prefix | (digit.to(tl.int64) << (4 * (MASS_DIGITS - 1 - j)))
    return prefix


@triton.jit
def _state(max_ptr, hist_ptr, mass_ptr, r, K, P, inv_t, TOP_K: tl.constexpr, TOP_P: tl.constexpr,
           CUT_DIGITS: tl.constexpr, PB: tl.constexpr):
    m = _row_max(max_ptr, r, PB)
    kth = _kth(hist_ptr, r, K, inv_t, TOP_K)
    cut = tl.zeros((), tl.int64)
    if TOP_P:
        cut = _cut(mass_ptr, r, P, CUT_DIGITS)
        if CUT_DIGITS == MASS_DIGITS:  # goal 0 (top_p=0) finds every digit 15: the most likely token stays
            cut = tl.minimum(cut, WEIGHT_OF_ONE)
    return m, kth, cut


@triton.jit
def partial_max_kernel(x_ptr, max_ptr, V, inv_t, chunk, BLOCK: tl.constexpr):
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    m = float("-inf")
    for start in range(p * chunk, p * chunk + chunk, BLOCK):
        l, _ = _scaled(x_ptr, r, start + tl.arange(0, BLOCK), V, inv_t)
        m = tl.maximum(m, tl.max(l, axis=0))
    tl.store(max_ptr + r * tl.num_programs(1) + p, m)


@triton.jit
def mass_histogram_kernel(x_ptr, max_ptr, hist_ptr, mass_ptr, V, inv_t, K, P, chunk, TOP_K: tl.constexpr,
                          PASS: tl.constexpr, BLOCK: tl.constexpr, PB: tl.constexpr):
    """mass[row, PASS, d] += the kept weights of the chunk whose digits above PASS are the ones
    found and whose digit PASS is d >= 1 (the first pass adds the row's kept total to bin 0). Only
    a block whose weights may reach the least of those (prefix + 2**shift) computes them: past the
    first pass, whose exp of every logit makes the total, most blocks read the logits (L2-resident)
    and one exp, and move on."""
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    m, kth, prefix = _state(max_ptr, hist_ptr, mass_ptr, r, K, P, inv_t, TOP_K, PASS > 0, PASS, PB)
    shift = 4 * (MASS_DIGITS - 1 - PASS)
    lo = prefix + (1 << shift)
    bins = tl.arange(0, MASS_BINS)
    sums = tl.zeros((MASS_BINS,), tl.int64)
    total = tl.zeros((), tl.int64)
    for start in range(p * chunk, p * chunk + chunk, BLOCK):
        l, inside = _scaled(x_ptr, r, start + tl.arange(0, BLOCK), V, inv_t)
        if PASS == 0:
            w = _weights(l, inside, m, kth, 0, 0, False)
            total += tl.sum(w, 0)
            reach = tl.max(w, 0) >= lo
        else:
            reach = _may_reach(l, m, lo)
        if reach:
            w = _weights(l, inside, m, kth, 0, 0, False)
            digit = (w >> shift) & 0xF
            w = tl.where(((w >> (shift + 4)) == (prefix >> (shift + 4))) & (digit > 0), w, 0)
            sums += tl.sum(tl.where(digit[:, None] == bins[None, :], w[:, None], 0), 0)
    sums = tl.where(bins == 0, total, sums)
    tl.atomic_add(mass_ptr + (r * MASS_DIGITS + PASS) * MASS_BINS + bins, sums, sem="relaxed")


@triton.jit
def kept_mass_kernel(x_ptr, max_ptr, hist_ptr, mass_ptr, kept_ptr, V, inv_t, K, P, FLOOR, chunk,
                     TOP_K: tl.constexpr, TOP_P: tl.constexpr, MIN_P: tl.constexpr, BLOCK: tl.constexpr,
                     PB: tl.constexpr):
    """kept[row, p] = (the chunk's kept weight, its last kept index or -1)."""
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    m, kth, cut = _state(max_ptr, hist_ptr, mass_ptr, r, K, P, inv_t, TOP_K, TOP_P, MASS_DIGITS, PB)
    total = tl.zeros((), tl.int64)
    last = tl.full((), -1, tl.int64)
    for start in range(p * chunk, p * chunk + chunk, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        l, inside = _scaled(x_ptr, r, cols, V, inv_t)
        if _may_reach(l, m, _least_kept(cut, FLOOR, MIN_P)):  # a block of none kept adds nothing
            w = _weights(l, inside, m, kth, cut, FLOOR, MIN_P)
            total += tl.sum(w, 0)
            last = tl.maximum(last, tl.max(tl.where(w > 0, cols, -1), 0).to(tl.int64))
    at = (r * tl.num_programs(1) + p) * 2
    tl.store(kept_ptr + at, total)
    tl.store(kept_ptr + at + 1, last)


@triton.jit
def draw_kernel(x_ptr, u_ptr, max_ptr, hist_ptr, mass_ptr, kept_ptr, out_ptr, V, inv_t, K, P, FLOOR, chunk,
                TOP_K: tl.constexpr, TOP_P: tl.constexpr, MIN_P: tl.constexpr, BLOCK: tl.constexpr,
                PB: tl.constexpr):
    """The token: the first index whose running kept weight exceeds int64(u * kept); written by the
    program whose chunk holds it, or by program 0 when none does (the last kept index, else 0)."""
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    programs = tl.arange(0, PB)
    at = (r * tl.num_programs(1) + programs) * 2
    real = programs < tl.num_programs(1)
    masses = tl.load(kept_ptr + at, mask=real, other=0)
    kept = tl.sum(masses, 0)
    before = tl.sum(tl.where(programs < p, masses, 0), 0)
    mine = tl.sum(tl.where(programs == p, masses, 0), 0)
    target = (tl.load(u_ptr + r).to(tl.float64) * kept.to(tl.float64)).to(tl.int64)
    if (target >= before) & (target < before + mine):
        m, kth, cut = _state(max_ptr, hist_ptr, mass_ptr, r, K, P, inv_t, TOP_K, TOP_P, MASS_DIGITS, PB)
        running = before
        token = tl.full((), V, tl.int64)
        for start in range(p * chunk, p * chunk + chunk, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            l, inside = _scaled(x_ptr, r, cols, V, inv_t)
            if _may_reach(l, m, _least_kept(cut, FLOOR, MIN_P)):
                w = _weights(l, inside, m, kth, cut, FLOOR, MIN_P)
                sums = tl.cumsum(w, axis=0) + running
                token = tl.minimum(token, tl.min(tl.where((sums > target) & (w > 0), cols, V), axis=0).to(tl.int64))
                running += tl.sum(w, axis=0)
        tl.store(out_ptr + r, token)
    if (p == 0) & (target >= kept):
        last = tl.max(tl.load(kept_ptr + at + 1, mask=real, other=-1), 0)
        tl.store(out_ptr + r, tl.maximum(last, 0))
