"""The decoding step of nbx.core.ops.sampling in one program a row, without a sort.

Each threshold is found by bisection over the order keys of float32 values (32 halvings of the
key range, each a pass over the row, which stays in L2): the k-th largest logit exactly, and the
top-p threshold as the largest probability t whose {p >= t} holds the asked mass. Masses are
sums of int64 weights (p * 2**40, truncated): exact in any order, so the chunk size and the
device do not change them, and the sets kept and the token drawn are the numpy reference's."""
import triton
import triton.language as tl

from ..sort.kernel import order_key


@triton.jit
def _scaled(x_ptr, r, cols, V, inv_t):
    inside = cols < V
    return tl.load(x_ptr + r * V + cols, mask=inside, other=float("-inf")).to(tl.float32) * inv_t, inside


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
        lo = tl.zeros((), tl.int64)
        hi = tl.full((), 1 << 32, tl.int64)
        for _ in range(32):
            mid = (lo + hi) // 2
            count = tl.zeros((), tl.int64)
            for start in range(0, V, BLOCK):
                l, inside = _scaled(x_ptr, r, start + base, V, inv_t)
                count += tl.sum((inside & (order_key(l).to(tl.int64) >= mid)).to(tl.int64), axis=0)
            ok = count >= K
            lo = tl.where(ok, mid, lo)
            hi = tl.where(ok, hi, mid)
        kth = lo
    total = _kept_mass(x_ptr, r, V, inv_t, m, kth, 0, FLOOR, False, BLOCK)
    cut = tl.zeros((), tl.int64)  # bits of the smallest probability kept by top-p
    if TOP_P:
        goal = total.to(tl.float64) * P
        lo = tl.zeros((), tl.int64)
        hi = tl.full((), 0x3F800001, tl.int64)  # just above the bits of 1.0
        for _ in range(31):
            mid = (lo + hi) // 2
            ok = _kept_mass(x_ptr, r, V, inv_t, m, kth, mid, FLOOR, False, BLOCK).to(tl.float64) >= goal
            lo = tl.where(ok, mid, lo)
            hi = tl.where(ok, hi, mid)
        cut = lo
    kept = _kept_mass(x_ptr, r, V, inv_t, m, kth, cut, FLOOR, MIN_P, BLOCK)
    target = (tl.load(u_ptr + r).to(tl.float64) * kept.to(tl.float64)).to(tl.int64)
    running = tl.zeros((), tl.int64)
    token = tl.full((), -1, tl.int64)
    last = tl.zeros((), tl.int64)
    for start in range(0, V, BLOCK):
        cols = start + base
        l, inside = _scaled(x_ptr, r, cols, V, inv_t)
        w = _weight(_kept(l, inside, m, kth, cut, FLOOR, MIN_P))
        sums = tl.cumsum(w, axis=0) + running
        first = tl.min(tl.where((sums > target) & (w > 0), cols, V), axis=0).to(tl.int64)
        token = tl.where((token < 0) & (first < V), first, token)
        last = tl.maximum(last, tl.max(tl.where(w > 0, cols, 0), axis=0).to(tl.int64))
        running += tl.sum(w, axis=0)
    tl.store(out_ptr + r, tl.where(token < 0, last, token))


@triton.jit
def _kept(l, inside, m, kth, cut, FLOOR, MIN_P: tl.constexpr):
    q = tl.where(inside & (order_key(l).to(tl.int64) >= kth), tl.exp(l - m), 0.0)
    q = tl.where(q.to(tl.int32, bitcast=True).to(tl.int64) >= cut, q, 0.0)
    if MIN_P:
        q = tl.where(q >= FLOOR, q, 0.0)
    return q


@triton.jit
def _kept_mass(x_ptr, r, V, inv_t, m, kth, cut, FLOOR, MIN_P: tl.constexpr, BLOCK: tl.constexpr):
    """The sum of the row's kept weights (int64: exact in any order)."""
    mass = tl.zeros((), tl.int64)
    for start in range(0, V, BLOCK):
        l, inside = _scaled(x_ptr, r, start + tl.arange(0, BLOCK), V, inv_t)
        mass += tl.sum(_weight(_kept(l, inside, m, kth, cut, FLOOR, MIN_P)), axis=0)
    return mass


@triton.jit
def _weight(q):
    """A probability as int64 fixed point, q * 2**40 truncated (the scaling is exact in float32)."""
    return (q * 1099511627776.0).to(tl.int64)
