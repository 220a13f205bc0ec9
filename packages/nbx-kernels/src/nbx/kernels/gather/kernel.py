"""Gather and scatter kernels. Every index is read as int64, a negative one counts from the end,
and one outside [-n, n) raises a flag (an int32 the wrapper reads back after the launch) instead
of being dereferenced: a bad index never reads or writes out of bounds, and costs no extra pass
over the indices (the check rides on the load the gather does anyway)."""
import triton
import triton.language as tl

from ..reduction import combine


@triton.jit
def _wrap(i, n, flag_ptr, mask):
    i = i.to(tl.int64)
    i = tl.where(i < 0, i + n, i)
    bad = mask & ((i < 0) | (i >= n))
    tl.atomic_max(flag_ptr + tl.zeros_like(i).to(tl.int32), 1, mask=bad)
    return i, mask & ~bad


@triton.jit
def take_rows_kernel(x_ptr, idx_ptr, out_ptr, flag_ptr, n, m, inner, BLOCK: tl.constexpr):
    """out[o, j, :] = x[o, idx[j], :] over x viewed as [outer, n, inner]; program (o * m + j, column block)."""
    row = tl.program_id(0).to(tl.int64)
    o = row // m
    j = row % m
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < inner
    i, ok = _wrap(tl.load(idx_ptr + j + tl.zeros_like(cols)), n, flag_ptr, inside)
    values = tl.load(x_ptr + (o * n + i) * inner + cols, mask=ok)
    tl.store(out_ptr + row * inner + cols, values, mask=inside)


@triton.jit
def take_along_kernel(x_ptr, idx_ptr, out_ptr, flag_ptr, n, m, BLOCK: tl.constexpr):
    """out[r, j] = x[r, idx[r, j]] over rows of x [rows, n] and of idx [rows, m]."""
    r = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < m
    i, ok = _wrap(tl.load(idx_ptr + r * m + cols, mask=inside, other=0), n, flag_ptr, inside)
    tl.store(out_ptr + r * m + cols, tl.load(x_ptr + r * n + i, mask=ok), mask=inside)


@triton.jit
def scatter_rows_kernel(out_ptr, idx_ptr, src_ptr, count_ptr, flag_ptr, n, k, BLOCK_P: tl.constexpr,
                        BLOCK_J: tl.constexpr, REDUCE: tl.constexpr, INCLUDE_SELF: tl.constexpr,
                        IDENTITY: tl.constexpr, COMBINE: tl.constexpr, COMPUTE: tl.constexpr):
    """Row r of out [rows, n] takes the updates of row r of idx/src [rows, k] that name each of
    its places, folded in update order within a block and block by block: the same result on
    every run (no atomics on the values). REDUCE=0: the last update wins; else COMBINE folds them,
    starting from IDENTITY; count_ptr (sum's counts, for a mean) is written when not None."""
    r = tl.program_id(0).to(tl.int64)
    places = tl.program_id(1).to(tl.int64) * BLOCK_P + tl.arange(0, BLOCK_P)
    inside = places < n
    acc = tl.load(out_ptr + r * n + places, mask=inside).to(COMPUTE)
    hits = tl.zeros([BLOCK_P], tl.int32)
    for start in range(0, k, BLOCK_J):
        js = start + tl.arange(0, BLOCK_J)
        valid = js < k
        i, ok = _wrap(tl.load(idx_ptr + r * k + js, mask=valid, other=0), n, flag_ptr, valid)
        src = tl.load(src_ptr + r * k + js, mask=ok).to(COMPUTE)
        match = (i[None, :] == places[:, None]) & ok[None, :]
        if REDUCE == 0:
            last = tl.max(tl.where(match, js[None, :], -1), axis=1)
            pick = tl.sum(tl.where(js[None, :] == last[:, None], src[None, :], 0), axis=1)
            acc = tl.where(last >= 0, pick.to(acc.dtype), acc)
        else:
            n_hits = tl.sum(match.to(tl.int32), axis=1)
            update = tl.reduce(tl.where(match, src[None, :], IDENTITY).to(acc.dtype), 1, COMBINE)
            if INCLUDE_SELF:
                folded = COMBINE(acc, update)
            else:
                folded = tl.where(hits == 0, update, COMBINE(acc, update))
            acc = tl.where(n_hits > 0, folded, acc)
            hits += n_hits
    tl.store(out_ptr + r * n + places, acc.to(out_ptr.dtype.element_ty), mask=inside)
    if count_ptr is not None:
        tl.store(count_ptr + r * n + places, hits, mask=inside)


# the folds of a reduction, NaN propagating in amax/amin as numpy's maximum/minimum
COMBINERS = {"sum": combine.add, "prod": combine.mul, "amax": combine.max_nan, "amin": combine.min_nan}


@triton.jit
def compact_kernel(mask_ptr, rank_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[rank[i] - 1] = i where mask[i]: the flat positions of a mask's True elements in order,
    rank being the mask's running count (inclusive cumsum); each destination is written once."""
    lin = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = lin < n
    hit = inside & (tl.load(mask_ptr + lin, mask=inside, other=0) != 0)
    rank = tl.load(rank_ptr + lin, mask=hit, other=1)
    tl.store(out_ptr + rank - 1, lin, mask=hit)


@triton.jit
def searchsorted_kernel(seq_ptr, v_ptr, out_ptr, n, m, steps, ROWS_SHARED: tl.constexpr, RIGHT: tl.constexpr,
                        BLOCK: tl.constexpr):
    """For each value of row r of v [rows, m], the first place p of row r of seq [rows, n] (one row
    for all when ROWS_SHARED) whose element is above v (RIGHT) or not below it, by a binary search
    in each lane (steps = n.bit_length() + 1 halvings); NaN is the largest value, as numpy's."""
    r = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < m
    v = tl.load(v_ptr + r * m + cols, mask=inside)
    base = 0 if ROWS_SHARED else r * n
    lo = tl.zeros([BLOCK], tl.int64)
    hi = tl.zeros([BLOCK], tl.int64) + n
    for _ in range(steps):
        active = lo < hi
        mid = (lo + hi) // 2
        s = tl.load(seq_ptr + base + tl.minimum(mid, n - 1), mask=inside & active)
        if RIGHT:
            go_right = ~((v < s) | ((s != s) & (v == v)))
        else:
            go_right = (s < v) | ((v != v) & (s == s))
        lo = tl.where(active & go_right, mid + 1, lo)
        hi = tl.where(active & ~go_right, mid, hi)
    tl.store(out_ptr + r * m + cols, lo, mask=inside)
