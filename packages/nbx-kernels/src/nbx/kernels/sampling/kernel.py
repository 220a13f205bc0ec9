"""The decoding step of nbx.core.ops.sampling in one program a row, without a sort.

Each threshold is found by bisection over the order keys of float32 values (32 halvings of the
key range, each a pass over the row, which stays in L2): the k-th largest logit exactly, and the
top-p threshold as the largest probability t whose {p >= t} holds the asked mass. The sets kept
are the ones the numpy reference keeps; the sums are float32 in chunk order."""
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
    total = tl.zeros((), tl.float32)
    for start in range(0, V, BLOCK):
        l, inside = _scaled(x_ptr, r, start + base, V, inv_t)
        keep = inside & (order_key(l).to(tl.int64) >= kth)
        total += tl.sum(tl.where(keep, tl.exp(l - m), 0.0), axis=0)
    cut = tl.zeros((), tl.int64)  # bits of the smallest probability kept by top-p
    if TOP_P:
        goal = P * total
        lo = tl.zeros((), tl.int64)
        hi = tl.full((), 0x3F800001, tl.int64)  # just above the bits of 1.0
        for _ in range(31):
            mid = (lo + hi) // 2
            mass = tl.zeros((), tl.float32)
            for start in range(0, V, BLOCK):
                l, inside = _scaled(x_ptr, r, start + base, V, inv_t)
                q = tl.where(inside & (order_key(l).to(tl.int64) >= kth), tl.exp(l - m), 0.0)
                mass += tl.sum(tl.where(q.to(tl.int32, bitcast=True).to(tl.int64) >= mid, q, 0.0), axis=0)
            ok = mass >= goal
            lo = tl.where(ok, mid, lo)
            hi = tl.where(ok, hi, mid)
        cut = lo
    kept_total = tl.zeros((), tl.float32)
    for start in range(0, V, BLOCK):
        l, inside = _scaled(x_ptr, r, start + base, V, inv_t)
        q = _kept(l, inside, m, kth, cut, FLOOR, MIN_P)
        kept_total += tl.sum(q, axis=0)
    target = tl.load(u_ptr + r) * kept_total
    running = tl.zeros((), tl.float32)
    token = tl.full((), -1, tl.int64)
    last = tl.zeros((), tl.int64)
    for start in range(0, V, BLOCK):
        cols = start + base
        l, inside = _scaled(x_ptr, r, cols, V, inv_t)
        q = _kept(l, inside, m, kth, cut, FLOOR, MIN_P)
        sums = tl.cumsum(q, axis=0) + running
        first = tl.min(tl.where((sums > target) & (q > 0), cols, V), axis=0).to(tl.int64)
        token = tl.where((token < 0) & (first < V), first, token)
        last = tl.maximum(last, tl.max(tl.where(q > 0, cols, 0), axis=0).to(tl.int64))
        running += tl.sum(q, axis=0)
    tl.store(out_ptr + r, tl.where(token < 0, last, token))


@triton.jit
def _kept(l, inside, m, kth, cut, FLOOR, MIN_P: tl.constexpr):
    q = tl.where(inside & (order_key(l).to(tl.int64) >= kth), tl.exp(l - m), 0.0)
    q = tl.where(q.to(tl.int32, bitcast=True).to(tl.int64) >= cut, q, 0.0)
    if MIN_P:
        q = tl.where(q >= FLOOR, q, 0.0)
    return q
