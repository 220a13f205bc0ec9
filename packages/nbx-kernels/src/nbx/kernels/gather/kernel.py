"""Gather and scatter kernels. Every index is read as int64, a negative one counts from the end,
and one outside [-n, n) is masked (never dereferenced: a bad index reads or writes nothing out of
bounds) and raises the device's pending record (nbx.core.deferred_checks: an int64 the host reads
at its next synchronization) by an atomic max of TAG | n, TAG the op's code shifted; the check
costs no extra pass over the indices (it rides on the load the gather does anyway)."""
import triton
import triton.language as tl

from ..dependent_launch import wait_for_predecessor
from ..reduction import combine


@triton.jit
def _wrap(i, n, flag_ptr, mask, TAG: tl.constexpr):
    i = i.to(tl.int64)
    i = tl.where(i < 0, i + n, i)
    bad = mask & ((i < 0) | (i >= n))
    tl.atomic_max(flag_ptr + tl.zeros_like(i).to(tl.int32), i * 0 + n + TAG, mask=bad)
    return i, mask & ~bad


@triton.jit
def take_rows_kernel(x_ptr, idx_ptr, out_ptr, flag_ptr, n, m, rows, inner, ROWS: tl.constexpr, COLS: tl.constexpr,
                     TAG: tl.constexpr, PDL: tl.constexpr = False):
    """out[o, j, :] = x[o, idx[j], :] over x viewed as [outer, n, inner] and out as [rows = outer * m,
    inner]: a program moves ROWS output rows of COLS columns (column block program_id(1)). Each
    row's index is loaded once, so its columns are one contiguous run the compiler moves in
    16-byte vectors (inner a multiple of 16 keeps every row aligned)."""
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    live = r < rows
    o = r // m
    j = r % m
    cols = tl.program_id(1).to(tl.int64) * COLS + tl.arange(0, COLS)
    i, ok = _wrap(tl.load(idx_ptr + j, mask=live, other=0), n, flag_ptr, live, TAG)
    inside = live[:, None] & (cols[None, :] < inner)
    values = tl.load(x_ptr + ((o * n + i) * inner)[:, None] + cols[None, :], mask=ok[:, None] & inside)
    tl.store(out_ptr + (r * inner)[:, None] + cols[None, :], values, mask=inside)


@triton.jit
def take_along_kernel(x_ptr, idx_ptr, out_ptr, flag_ptr, n, m, BLOCK: tl.constexpr, TAG: tl.constexpr):
    """out[r, j] = x[r, idx[r, j]] over rows of x [rows, n] and of idx [rows, m]."""
    r = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < m
    i, ok = _wrap(tl.load(idx_ptr + r * m + cols, mask=inside, other=0), n, flag_ptr, inside, TAG)
    tl.store(out_ptr + r * m + cols, tl.load(x_ptr + r * n + i, mask=ok), mask=inside)


@triton.jit
def scatter_rows_kernel(out_ptr, idx_ptr, src_ptr, flag_ptr, n, k, BLOCK_P: tl.constexpr,
                        BLOCK_J: tl.constexpr, REDUCE: tl.constexpr, INCLUDE_SELF: tl.constexpr,
                        IDENTITY: tl.constexpr, OP: tl.constexpr, COMPUTE: tl.constexpr, TAG: tl.constexpr):
    """Row r of out [rows, n] takes the updates of row r of idx/src [rows, k] that name each of
    its places, folded in update order within a block and block by block: the same result on
    every run (no atomics on the values). REDUCE=0: the last update wins; else the combine of op
    code OP (combine.Code; NaN propagating in max/min, as numpy's maximum/minimum) folds them,
    starting from IDENTITY (sums and means take scatter_add_kernel's atomics instead). The
    combine is picked by constexpr branches (Triton 3.6 rejects a function passed as a constexpr)."""
    r = tl.program_id(0).to(tl.int64)
    places = tl.program_id(1).to(tl.int64) * BLOCK_P + tl.arange(0, BLOCK_P)
    inside = places < n
    acc = tl.load(out_ptr + r * n + places, mask=inside).to(COMPUTE)
    hits = tl.zeros([BLOCK_P], tl.int32)
    for start in range(0, k, BLOCK_J):
        js = start + tl.arange(0, BLOCK_J)
        valid = js < k
        i, ok = _wrap(tl.load(idx_ptr + r * k + js, mask=valid, other=0), n, flag_ptr, valid, TAG)
        src = tl.load(src_ptr + r * k + js, mask=ok).to(COMPUTE)
        match = (i[None, :] == places[:, None]) & ok[None, :]
        if REDUCE == 0:
            last = tl.max(tl.where(match, js[None, :], -1), axis=1)
            pick = tl.sum(tl.where(js[None, :] == last[:, None], src[None, :], 0), axis=1)
            acc = tl.where(last >= 0, pick.to(acc.dtype), acc)
        else:
            n_hits = tl.sum(match.to(tl.int32), axis=1)
            update = combine.reduce_lanes(tl.where(match, src[None, :], IDENTITY).to(acc.dtype), OP)
            if INCLUDE_SELF:
                folded = combine.combine(acc, update, OP)
            else:
                folded = tl.where(hits == 0, update, combine.combine(acc, update, OP))
            acc = tl.where(n_hits > 0, folded, acc)
            hits += n_hits
    tl.store(out_ptr + r * n + places, acc.to(out_ptr.dtype.element_ty), mask=inside)


# the op code of each reduction's fold
COMBINE_CODES = {"sum": combine.Code.ADD, "prod": combine.Code.MUL, "amax": combine.Code.MAX,
                 "amin": combine.Code.MIN}


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


@triton.jit
def scatter_add_kernel(out_ptr, idx_ptr, src_ptr, count_ptr, flag_ptr, n, k, rows, inner, idx_s0, idx_s1, idx_s2,
                       src_s0, src_s1, src_s2, ROWS: tl.constexpr, COLS: tl.constexpr, CLEAR: tl.constexpr,
                       TAG: tl.constexpr, ROW_INDEX: tl.constexpr = False):
    """out[o, idx[o, j, c], c] += src[o, j, c] over out viewed as [outer, n, inner] (contiguous) and
    idx/src as [outer, k, inner] of any strides (an expanded index row is read with stride 0): one
    atomic add an update, so duplicates sum in no fixed order, as torch's scatter_add/index_add.
    The adds are relaxed (no ordering is promised between them, so none is paid: Triton's default
    acq_rel made each a returning atom). A program takes ROWS update rows (r = o * k + j) of COLS
    columns. ROW_INDEX: the index is one a row (idx_s2 == 0: index_add, index_put), loaded and
    checked once a row, so the row's mask is uniform along its columns and the source loads are
    16-byte vectors. CLEAR: store 0 at each indexed place instead (include_self=False's first pass).
    count_ptr, when not None, counts the updates of each place (a mean's denominator)."""
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    o = r // k
    j = r % k
    cols = tl.program_id(1).to(tl.int64) * COLS + tl.arange(0, COLS)
    live_rows = r < rows
    live = live_rows[:, None] & (cols < inner)[None, :]
    if ROW_INDEX:
        i_row, ok_row = _wrap(tl.load(idx_ptr + o * idx_s0 + j * idx_s1, mask=live_rows, other=0), n, flag_ptr,
                              live_rows, TAG)
        i = i_row[:, None]
        ok = ok_row[:, None] & (cols < inner)[None, :]
    else:
        at = (o * idx_s0 + j * idx_s1)[:, None] + cols[None, :] * idx_s2
        i, ok = _wrap(tl.load(idx_ptr + at, mask=live, other=0), n, flag_ptr, live, TAG)
    place = out_ptr + (o[:, None] * n + i) * inner + cols[None, :]
    if CLEAR:
        tl.store(place, tl.zeros([ROWS, COLS], out_ptr.dtype.element_ty), mask=ok)
    else:
        values = tl.load(src_ptr + (o * src_s0 + j * src_s1)[:, None] + cols[None, :] * src_s2, mask=ok)
        tl.atomic_add(place, values.to(out_ptr.dtype.element_ty), mask=ok, sem="relaxed")
        if count_ptr is not None:
            tl.atomic_add(count_ptr + (o[:, None] * n + i) * inner + cols[None, :], 1, mask=ok, sem="relaxed")
