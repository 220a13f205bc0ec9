"""Top-k by radix select (the method of CUB and torch): the k smallest select keys of a row, where
the select key is order_key (smallest) or its complement (largest), so one rule serves both and
NaN stays the largest value.

A row is split over P programs of `chunk` elements (the grid is rows x P, so a long row keeps the
whole GPU busy). Four histogram passes find the k-th key one 8-bit digit at a time, most
significant first: pass j counts the digits j of the keys that share the digits found so far and
adds its counts to hist[row, j] atomically; every program of the next launch re-derives the digits
found from those histograms (four cumsums of 256 bins: cheaper than a launch that would write them
down). Then one pass counts, per program, the keys below the threshold T and equal to it; the
compaction writes the keys below T and the first ties (ties go to the lower index) into k packed
words (key << 32 | index) at places given by those per-program counts, and one program per row
sorts the k words. k = 1 is a reduction: each program's smallest word, then the smallest of those.
Launch count: 8 for any row length, the histograms' zeroing included (2 for k = 1).
"""
import triton
import triton.language as tl

from .kernel import order_key

DIGITS = tl.constexpr(4)   # 8-bit digits of a 32-bit key
BINS = tl.constexpr(256)


@triton.jit
def select_key(x, LARGEST: tl.constexpr):
    key = order_key(x)
    if LARGEST:
        key = ~key
    return key


@triton.jit
def _found(hist_ptr, r, k, PASSES: tl.constexpr):
    """(prefix, rank): the first PASSES digits of the k-th smallest key of row r, and the rank
    (from 1) of that key among the keys that share those digits."""
    bins = tl.arange(0, BINS)
    prefix = tl.zeros((), tl.uint32)
    rank = tl.zeros((), tl.int32) + k
    for j in tl.static_range(PASSES):
        counts = tl.load(hist_ptr + (r * DIGITS + j) * BINS + bins)
        digit = tl.min(tl.where(tl.cumsum(counts, 0) >= rank, bins, BINS), 0)
        rank -= tl.sum(tl.where(bins < digit, counts, 0), 0)
        prefix = (prefix << 8) | digit.to(tl.uint32)
    return prefix, rank


@triton.jit
def _keys(x_ptr, r, cols, n, LARGEST: tl.constexpr):
    inside = cols < n
    return select_key(tl.load(x_ptr + r * n + cols, mask=inside), LARGEST), inside


@triton.jit
def select_histogram_kernel(x_ptr, hist_ptr, n, k, chunk, LARGEST: tl.constexpr, PASS: tl.constexpr,
                           BLOCK: tl.constexpr):
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    prefix, _ = _found(hist_ptr, r, k, PASS)
    counts = tl.zeros((BINS,), tl.int32)
    for start in range(p * chunk, p * chunk + chunk, BLOCK):
        u, inside = _keys(x_ptr, r, start + tl.arange(0, BLOCK), n, LARGEST)
        if PASS > 0:
            inside = inside & ((u >> (32 - 8 * PASS)) == prefix)
        counts += tl.histogram(((u >> (24 - 8 * PASS)) & 0xFF).to(tl.int32), BINS, mask=inside)
    tl.atomic_add(hist_ptr + (r * DIGITS + PASS) * BINS + tl.arange(0, BINS), counts, sem="relaxed")


@triton.jit
def select_counts_kernel(x_ptr, hist_ptr, counts_ptr, n, k, chunk, LARGEST: tl.constexpr, BLOCK: tl.constexpr):
    """counts[row, p] = (keys < T, keys == T) of program p's chunk."""
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    threshold, _ = _found(hist_ptr, r, k, DIGITS)
    less = tl.zeros((), tl.int32)
    equal = tl.zeros((), tl.int32)
    for start in range(p * chunk, p * chunk + chunk, BLOCK):
        u, inside = _keys(x_ptr, r, start + tl.arange(0, BLOCK), n, LARGEST)
        less += tl.sum((inside & (u < threshold)).to(tl.int32), 0)
        equal += tl.sum((inside & (u == threshold)).to(tl.int32), 0)
    at = (r * tl.num_programs(1) + p) * 2
    tl.store(counts_ptr + at, less)
    tl.store(counts_ptr + at + 1, equal)


@triton.jit
def select_compact_kernel(x_ptr, hist_ptr, counts_ptr, words_ptr, n, k, chunk, LARGEST: tl.constexpr,
                         BLOCK: tl.constexpr, PROGRAMS: tl.constexpr):
    """The k selected keys of the row as packed words, in index order: the keys below T first,
    then the first `ties` keys equal to T (PROGRAMS: the programs a row, to a power of two)."""
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    threshold, ties = _found(hist_ptr, r, k, DIGITS)
    earlier = tl.arange(0, PROGRAMS)
    at = (r * tl.num_programs(1) + earlier) * 2
    less_before = tl.sum(tl.load(counts_ptr + at, mask=earlier < p, other=0), 0)
    equal_before = tl.sum(tl.load(counts_ptr + at + 1, mask=earlier < p, other=0), 0)
    first_tie = k - ties
    for start in range(p * chunk, p * chunk + chunk, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        u, inside = _keys(x_ptr, r, cols, n, LARGEST)
        below = inside & (u < threshold)
        tie = inside & (u == threshold)
        below_at = less_before + tl.cumsum(below.to(tl.int32), 0) - 1
        tie_rank = equal_before + tl.cumsum(tie.to(tl.int32), 0) - 1
        word = (u.to(tl.uint64) << 32) | cols.to(tl.uint64)
        tl.store(words_ptr + r * k + below_at, word, mask=below)
        tl.store(words_ptr + r * k + first_tie + tie_rank, word, mask=tie & (tie_rank < ties))
        less_before += tl.sum(below.to(tl.int32), 0)
        equal_before += tl.sum(tie.to(tl.int32), 0)


@triton.jit
def best_word_kernel(x_ptr, words_ptr, n, chunk, LARGEST: tl.constexpr, BLOCK: tl.constexpr):
    """words[row, p] = the smallest packed word of program p's chunk (k = 1)."""
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    best = _last_word(BLOCK)
    for start in range(p * chunk, p * chunk + chunk, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        u, inside = _keys(x_ptr, r, cols, n, LARGEST)
        best = tl.minimum(best, tl.where(inside, (u.to(tl.uint64) << 32) | cols.to(tl.uint64), best))
    tl.store(words_ptr + r * tl.num_programs(1) + p, tl.min(best, 0))


@triton.jit
def _last_word(BLOCK: tl.constexpr):
    ones = tl.full((BLOCK,), 0xFFFFFFFF, tl.uint32).to(tl.uint64)
    return (ones << 32) | ones


@triton.jit
def sort_words_kernel(x_ptr, words_ptr, vals_ptr, idx_ptr, n, count, n_out, BLOCK: tl.constexpr):
    """Row r's `count` packed words (count <= BLOCK) sorted; the first n_out written as the values
    they index in x and those indices."""
    r = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    words = tl.load(words_ptr + r * count + cols, mask=cols < count)
    words = tl.sort(tl.where(cols < count, words, _last_word(BLOCK)))
    pos = (words & 0xFFFFFFFF).to(tl.int64)
    written = cols < n_out
    tl.store(vals_ptr + r * n_out + cols, tl.load(x_ptr + r * n + pos, mask=written), mask=written)
    tl.store(idx_ptr + r * n_out + cols, pos, mask=written)


@triton.jit
def zero_kernel(ptr, n, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(ptr + cols, tl.zeros((BLOCK,), ptr.dtype.element_ty), mask=cols < n)
