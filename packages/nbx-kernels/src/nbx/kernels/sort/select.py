"""Top-k by radix select (the method of CUB and torch): the k smallest select keys of a row, where
the select key is order_key (smallest) or its complement (largest), so one rule serves both and
NaN stays the largest value.

A row is split over P programs of `chunk` elements (the grid is rows x P, so a long row keeps the
whole GPU busy). Only two launches read the whole row: the first counts the top 8-bit digits of its
keys (hist[row, 0], added atomically); the second, the filter, re-derives from that histogram the
top digit D of the k-th key, writes the keys whose top digit is below D (sure winners: fewer than
k) as packed words (key << 32 | index) into the row's k words at places taken from an atomic
counter, and keeps the columns of the keys whose top digit is D (the candidates) in its own region
of a candidate list, in index order, counting their next digit as it goes (hist[row, 1]). The rest
read only the candidates (a few percent of a row of logits): two histograms find the next digits of
the k-th key T, one pass counts per program the candidates below T and equal to it, and the
compaction writes those below T and the first ties (ties go to the lower index: regions and the
columns in them are in index order) after the sure winners; one program per row sorts the k words.
k = 1 is a reduction: each program's smallest word, then the smallest of those.
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
def digit_counts(x_ptr, hist_ptr, r, p, n, k, chunk, LARGEST: tl.constexpr, PASS: tl.constexpr,
                 BLOCK: tl.constexpr):
    """hist[r, PASS] += the counts of digit PASS (8 bits, from the top) of program p's chunk of row
    r, among the keys whose earlier digits are those of the row's k-th key (the earlier passes'
    histograms, read with _found; PASS 0: every key, k unused)."""
    prefix, _ = _found(hist_ptr, r, k, PASS)
    counts = tl.zeros((BINS,), tl.int32)
    for start in range(p * chunk, p * chunk + chunk, BLOCK):
        u, inside = _keys(x_ptr, r, start + tl.arange(0, BLOCK), n, LARGEST)
        if PASS > 0:
            inside = inside & ((u >> (32 - 8 * PASS)) == prefix)
        counts += tl.histogram(((u >> (24 - 8 * PASS)) & 0xFF).to(tl.int32), BINS, mask=inside)
    tl.atomic_add(hist_ptr + (r * DIGITS + PASS) * BINS + tl.arange(0, BINS), counts, sem="relaxed")


@triton.jit
def select_histogram_kernel(x_ptr, hist_ptr, n, chunk, LARGEST: tl.constexpr, BLOCK: tl.constexpr):
    """hist[row, 0] += the top digits of program p's chunk of the row."""
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    digit_counts(x_ptr, hist_ptr, r, p, n, 0, chunk, LARGEST, 0, BLOCK)


@triton.jit
def select_filter_kernel(x_ptr, hist_ptr, words_ptr, cand_ptr, taken_ptr, n, k, chunk, LARGEST: tl.constexpr,
                         BLOCK: tl.constexpr):
    """The sure winners of program p's chunk into the row's words (after the others', by an atomic
    counter after the histograms), the columns of its candidates into cand[row, p * chunk:] in
    index order (taken[row, p]: how many), their second digits into hist[row, 1]."""
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    top, _ = _found(hist_ptr, r, k, 1)
    sure_count = hist_ptr + tl.num_programs(0) * DIGITS * BINS + r
    counts = tl.zeros((BINS,), tl.int32)
    taken = tl.zeros((), tl.int32)
    for start in range(p * chunk, p * chunk + chunk, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        u, inside = _keys(x_ptr, r, cols, n, LARGEST)
        sure = inside & ((u >> 24) < top)
        candidate = inside & ((u >> 24) == top)
        sure_n = tl.sum(sure.to(tl.int32), 0)
        if sure_n > 0:
            at = tl.atomic_add(sure_count, sure_n, sem="relaxed") + tl.cumsum(sure.to(tl.int32), 0) - 1
            tl.store(words_ptr + r * k + at, (u.to(tl.uint64) << 32) | cols.to(tl.uint64), mask=sure)
        place = taken + tl.cumsum(candidate.to(tl.int32), 0) - 1
        tl.store(cand_ptr + r * n + p * chunk + place, cols.to(tl.int32), mask=candidate)
        taken += tl.sum(candidate.to(tl.int32), 0)
        counts += tl.histogram(((u >> 16) & 0xFF).to(tl.int32), BINS, mask=candidate)
    tl.store(taken_ptr + r * tl.num_programs(1) + p, taken)
    tl.atomic_add(hist_ptr + (r * DIGITS + 1) * BINS + tl.arange(0, BINS), counts, sem="relaxed")


@triton.jit
def _candidates(x_ptr, cand_ptr, r, p, start, taken, n, chunk, LARGEST: tl.constexpr, BLOCK: tl.constexpr):
    """(select keys, columns, inside) of candidates start.. start + BLOCK of program p's region
    (of `taken` candidates)."""
    slots = start + tl.arange(0, BLOCK)
    inside = slots < taken
    cols = tl.load(cand_ptr + r * n + p * chunk + slots, mask=inside, other=0)
    u = select_key(tl.load(x_ptr + r * n + cols, mask=inside), LARGEST)
    return u, cols, inside


@triton.jit
def candidate_histogram_kernel(x_ptr, hist_ptr, cand_ptr, taken_ptr, n, k, chunk, LARGEST: tl.constexpr,
                               PASS: tl.constexpr, BLOCK: tl.constexpr):
    """hist[row, PASS] += digit PASS (from the top) of program p's candidates that share the
    digits found so far."""
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    prefix, _ = _found(hist_ptr, r, k, PASS)
    counts = tl.zeros((BINS,), tl.int32)
    taken = tl.load(taken_ptr + r * tl.num_programs(1) + p)
    for start in range(0, taken, BLOCK):
        u, cols, inside = _candidates(x_ptr, cand_ptr, r, p, start, taken, n, chunk, LARGEST, BLOCK)
        inside = inside & ((u >> (32 - 8 * PASS)) == prefix)
        counts += tl.histogram(((u >> (24 - 8 * PASS)) & 0xFF).to(tl.int32), BINS, mask=inside)
    tl.atomic_add(hist_ptr + (r * DIGITS + PASS) * BINS + tl.arange(0, BINS), counts, sem="relaxed")


@triton.jit
def select_counts_kernel(x_ptr, hist_ptr, cand_ptr, taken_ptr, counts_ptr, n, k, chunk, LARGEST: tl.constexpr,
                         BLOCK: tl.constexpr):
    """counts[row, p] = (candidates < T, candidates == T) of program p's region."""
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    threshold, _ = _found(hist_ptr, r, k, DIGITS)
    less = tl.zeros((), tl.int32)
    equal = tl.zeros((), tl.int32)
    taken = tl.load(taken_ptr + r * tl.num_programs(1) + p)
    for start in range(0, taken, BLOCK):
        u, cols, inside = _candidates(x_ptr, cand_ptr, r, p, start, taken, n, chunk, LARGEST, BLOCK)
        less += tl.sum((inside & (u < threshold)).to(tl.int32), 0)
        equal += tl.sum((inside & (u == threshold)).to(tl.int32), 0)
    at = (r * tl.num_programs(1) + p) * 2
    tl.store(counts_ptr + at, less)
    tl.store(counts_ptr + at + 1, equal)


@triton.jit
def select_compact_kernel(x_ptr, hist_ptr, cand_ptr, taken_ptr, counts_ptr, words_ptr, n, k, chunk,
                          LARGEST: tl.constexpr, BLOCK: tl.constexpr, PROGRAMS: tl.constexpr):
    """The row's k words completed: after its sure winners, the candidates below T in index order,
    then the first `ties` candidates equal to T (PROGRAMS: the programs a row, to a power of two)."""
    r, p = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    threshold, ties = _found(hist_ptr, r, k, DIGITS)
    _, rank_in_top = _found(hist_ptr, r, k, 1)
    earlier = tl.arange(0, PROGRAMS)
    at = (r * tl.num_programs(1) + earlier) * 2
    less_before = k - rank_in_top + tl.sum(tl.load(counts_ptr + at, mask=earlier < p, other=0), 0)
    equal_before = tl.sum(tl.load(counts_ptr + at + 1, mask=earlier < p, other=0), 0)
    first_tie = k - ties
    taken = tl.load(taken_ptr + r * tl.num_programs(1) + p)
    for start in range(0, taken, BLOCK):
        u, cols, inside = _candidates(x_ptr, cand_ptr, r, p, start, taken, n, chunk, LARGEST, BLOCK)
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
