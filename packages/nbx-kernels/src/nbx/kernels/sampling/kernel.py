"""The decoding step of nbx.core.ops.sampling in one program a row, without a sort.

Each threshold is found by bisection (each step a pass over the row, which stays in L2): the k-th
largest logit exactly, over the order keys of float32 values, and the top-p threshold as the
largest weight t whose {w >= t} holds the asked mass. Weights are exp as int64 fixed point
computed in integer arithmetic (exp_weight, the same steps as nbx.core.ops.sampling.weight: a
device's exp differs from numpy's in its last bits, and one float32 ulp of a probability is about
a thousand weight units), and masses are their sums: exact in any order, so the chunk size and the
device do not change them, and the sets kept and the token drawn are the numpy reference's. The
launch keeps multiplies and adds apart (enable_fp_fusion=False): l - max l rounds as on the host."""
import triton
import triton.language as tl

from nbx.core.ops.sampling import EXP2_Q30, LOG2E_Q30, WEIGHT_BITS

from ..sort.kernel import order_key

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
def _row_total(x_ptr, r, V, inv_t, m, kth, cut, FLOOR, MIN_P: tl.constexpr, OF_KEYS: tl.constexpr,
               BLOCK: tl.constexpr):
    """OF_KEYS: how many keys are >= kth; else the sum of the row's kept weights (int64: exact
    in any order)."""
    total = tl.zeros((), tl.int64)
    for start in range(0, V, BLOCK):
        l, inside = _scaled(x_ptr, r, start + tl.arange(0, BLOCK), V, inv_t)
        if OF_KEYS:
            total += tl.sum((inside & (order_key(l).to(tl.int64) >= kth)).to(tl.int64), axis=0)
        else:
            total += tl.sum(_weights(l, inside, m, kth, cut, FLOOR, MIN_P), axis=0)
    return total


@triton.jit
def _largest_threshold(x_ptr, r, V, inv_t, m, kth, goal, top, STEPS: tl.constexpr, OF_KEYS: tl.constexpr,
                       BLOCK: tl.constexpr):
    """The largest t in [0, top) whose total (keys >= t, or kept weights >= t) is >= goal, by
    STEPS halvings (2**STEPS >= top)."""
    lo = tl.zeros((), tl.int64)
    hi = tl.full((), top, tl.int64)
    for _ in range(STEPS):
        mid = (lo + hi) // 2
        if OF_KEYS:
            total = _row_total(x_ptr, r, V, inv_t, m, mid, 0, 0, False, True, BLOCK)
        else:
            total = _row_total(x_ptr, r, V, inv_t, m, kth, mid, 0, False, False, BLOCK)
        ok = total.to(tl.float64) >= goal
        lo = tl.where(ok, mid, lo)
        hi = tl.where(ok, hi, mid)
    return lo


@triton.jit
def sample_kernel(x_ptr, u_ptr, out_ptr, V, inv_t, K, P, FLOOR,
                  TOP_K: tl.constexpr, TOP_P: tl.constexpr, MIN_P: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    base = tl.arange(0, BLOCK)
    m = float("-inf")
    for start in range(0, V, BLOCK):
        l, inside = _scaled(x_ptr, r, start + base, V, inv_t)
        m = tl.maximum(m, tl.max(l, axis=0))
    kth = tl.zeros((), tl.int64)  # every key >= 0: all kept
    if TOP_K:
        kth = _largest_threshold(x_ptr, r, V, inv_t, m, kth, K, 1 << 32, 32, True, BLOCK)
    cut = tl.zeros((), tl.int64)  # the smallest weight kept by top-p
    if TOP_P:
        goal = _row_total(x_ptr, r, V, inv_t, m, kth, 0, 0, False, False, BLOCK).to(tl.float64) * P
        cut = _largest_threshold(x_ptr, r, V, inv_t, m, kth, goal, WEIGHT_OF_ONE + 1, 41, False, BLOCK)
    kept = _row_total(x_ptr, r, V, inv_t, m, kth, cut, FLOOR, MIN_P, False, BLOCK)
    target = (tl.load(u_ptr + r).to(tl.float64) * kept.to(tl.float64)).to(tl.int64)
    running = tl.zeros((), tl.int64)
    token = tl.full((), -1, tl.int64)
    last = tl.zeros((), tl.int64)
    for start in range(0, V, BLOCK):
        cols = start + base
        l, inside = _scaled(x_ptr, r, cols, V, inv_t)
        w = _weights(l, inside, m, kth, cut, FLOOR, MIN_P)
        sums = tl.cumsum(w, axis=0) + running
        first = tl.min(tl.where((sums > target) & (w > 0), cols, V), axis=0).to(tl.int64)
        token = tl.where((token < 0) & (first < V), first, token)
        last = tl.maximum(last, tl.max(tl.where(w > 0, cols, 0), axis=0).to(tl.int64))
        running += tl.sum(w, axis=0)
    tl.store(out_ptr + r, tl.where(token < 0, last, token))
