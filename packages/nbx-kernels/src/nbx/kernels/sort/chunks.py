"""Top-k by chunk candidates, for many rows and a small k: the radix select's eight launches and
two passes over each row cost more than one read of the row when every row has few programs.

Stage 1 (grid rows x chunks): a program reads CHUNK keys of its row, packs each as the radix
select's word (select key << 32 | column: the smallest words are the winners, ties to the lower
column, NaN the largest value) and keeps the k smallest words of its chunk in the workspace
[rows, chunks, k]. A word that wins the row wins its chunk (fewer than k words of the row, so of
the chunk, are smaller), so the row's winners are among these candidates. Merge rounds (grid
rows x groups): a program takes `group` consecutive sorted lists of k candidates (group * K <=
CHUNK words, K = k to a power of two) and keeps their k smallest by the halvings of a bitonic
top-k alone (the lists are its sorted runs already), until one list a row is left; the last
round (or stage 1, for a row of one chunk) writes the values and the indices instead, in word
order: ascending words are descending values for the largest, ascending for the smallest, and
equal values in index order.

A program selects with tl.topk, the bitonic top-k (Triton's standard library): it sorts runs of
K, then halves the words log2(CHUNK / K) times keeping the smaller of each pair of runs, about
log2(K)**2 / 2 compare-exchanges a word, in registers, no atomics. The words are unique (their
columns differ), so the result does not depend on how a network breaks ties. tl.topk keeps the
largest: it runs on the words' complements. A bound first leaves it few words
(_few_smallest_words): the largest of K groups' smallest words, the chunk's own groups' (~300 of
4096 words under it for k = 50 of iid logits) or, where a chunk is too short for that (k =
1024), the row's (row_bound_kernel, one more launch reading the row: ~200 words of a chunk of
4096 for k = 1024), so stage 1 costs about a read of the row and a top-k of a few hundred words.
"""
import triton
import triton.language as tl
try:   # tl.topk's merge step: private in Triton (3.6 and 3.9 have it); a Triton without it serves the radix select
    from triton.language.standard import _bitonic_merge_hypercube
except ImportError:
    _bitonic_merge_hypercube = None
MERGES = _bitonic_merge_hypercube is not None

from .select import _keys, _last_word


@triton.jit
def _smallest_words(words, K: tl.constexpr):
    """The K smallest of a power-of-two block of words, ascending."""
    return ~tl.topk(~words, K)


@triton.jit
def _keep(best, x_ptr, out_ptr, vals_ptr, idx_ptr, r, at, n, k, FINAL: tl.constexpr, K: tl.constexpr):
    """The first k of best (ascending words): into list `at` of row r's candidates, or (FINAL) as
    row r's values and indices."""
    slots = tl.arange(0, K)
    kept = slots < k
    if FINAL:
        pos = (best & 0xFFFFFFFF).to(tl.int64)
        tl.store(vals_ptr + r * k + slots, tl.load(x_ptr + r * n + pos, mask=kept), mask=kept)
        tl.store(idx_ptr + r * k + slots, pos, mask=kept)
    else:
        tl.store(out_ptr + at * k + slots, best, mask=kept)


@triton.jit
def _chunk_bound(words, CHUNK: tl.constexpr, K: tl.constexpr):
    """The largest of K groups' smallest words (K groups of consecutive words of the chunk)."""
    return tl.max(tl.min(tl.reshape(words, [K, CHUNK // K]), axis=1), axis=0)


@triton.jit
def _few_smallest_words(words, inside, bound, scratch_ptr, at, CHUNK: tl.constexpr, K: tl.constexpr,
                        CAP: tl.constexpr):
    """The K smallest of a chunk's words, or (CAP < K) its words <= bound ascending then last
    words, given a bound above the row's winners (the largest of K groups' smallest words: K words
    are at or below it, the groups' smallest): either holds the chunk's winners. Where at most CAP
    words are <= bound, they are compacted into this program's CAP words of scratch (at: its
    place) and only those are sorted; else (ties, a short chunk) all the words go through tl.topk."""
    keep = inside & (words <= bound)
    count = tl.sum(keep.to(tl.int32), 0)
    if count <= CAP:
        place = tl.cumsum(keep.to(tl.int32), 0) - 1
        tl.store(scratch_ptr + at * CAP + place, words, mask=keep)
        tl.debug_barrier()   # the program's own stores, read back by its other threads
        slots = tl.arange(0, CAP)
        few = tl.load(scratch_ptr + at * CAP + slots, mask=slots < count)
        few = tl.where(slots < count, few, _last_word(CAP))
        if CAP >= K:
            best = _smallest_words(few, K)
        else:   # sorted in CAP, widened to K through the scratch (past CAP: last words)
            few = _smallest_words(few, CAP)
            tl.debug_barrier()   # every thread has read the scratch before it is written again
            tl.store(scratch_ptr + at * CAP + slots, few)
            tl.debug_barrier()
            wide = tl.arange(0, K)
            best = tl.load(scratch_ptr + at * CAP + wide, mask=wide < CAP)
            best = tl.where(wide < CAP, best, _last_word(K))
    else:
        best = _smallest_words(words, K)
    return best


@triton.jit
def _words(x_ptr, r, c, n, LARGEST: tl.constexpr, CHUNK: tl.constexpr):
    cols = c * CHUNK + tl.arange(0, CHUNK)
    u, inside = _keys(x_ptr, r, cols, n, LARGEST)
    return tl.where(inside, (u.to(tl.uint64) << 32) | cols.to(tl.uint64), _last_word(CHUNK)), inside


@triton.jit
def row_bound_kernel(x_ptr, bound_ptr, n, LARGEST: tl.constexpr, CHUNK: tl.constexpr, K: tl.constexpr):
    """bound[row, g] = the complement of the smallest word of the row's group g (its columns = g
    mod K), by an atomic max of complements (bound zeroed first; a group with no column stays 0)."""
    r, c = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    words, inside = _words(x_ptr, r, c, n, LARGEST, CHUNK)
    flipped = tl.max(tl.reshape(tl.where(inside, ~words, 0), [CHUNK // K, K]), axis=0)
    tl.atomic_max(bound_ptr + r * K + tl.arange(0, K), flipped, sem="relaxed")


@triton.jit
def chunk_candidates_kernel(x_ptr, out_ptr, vals_ptr, idx_ptr, scratch_ptr, bound_ptr, n, k, LARGEST: tl.constexpr,
                            FINAL: tl.constexpr, CHUNK: tl.constexpr, K: tl.constexpr, CAP: tl.constexpr,
                            ROW_BOUND: tl.constexpr):
    """out[row, c] = the k smallest words of chunk c of the row (K: k to a power of two, <= CHUNK;
    CAP: the survivors of the bound a program compacts, 0 for no bound; ROW_BOUND: the bound is
    the row's, from row_bound_kernel's groups, else the chunk's own)."""
    r, c = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    at = r * tl.num_programs(1) + c
    words, inside = _words(x_ptr, r, c, n, LARGEST, CHUNK)
    if CAP == 0:
        best = _smallest_words(words, K)
    else:
        if ROW_BOUND:
            bound = ~tl.min(tl.load(bound_ptr + r * K + tl.arange(0, K)), 0)
        else:
            bound = _chunk_bound(words, CHUNK, K)
        best = _few_smallest_words(words, inside, bound, scratch_ptr, at, CHUNK, K, CAP)
    _keep(best, x_ptr, out_ptr, vals_ptr, idx_ptr, r, at, n, k, FINAL, K)


@triton.jit
def _smallest_of_runs(words, LOG_N: tl.constexpr, LOG_K: tl.constexpr):
    """The 2**LOG_K smallest of 2**LOG_N words in runs of 2**LOG_K, each run sorted, even runs
    descending and odd ones ascending: the second half of tl.topk (its first half sorts such runs)
    on the complements: log2(runs) halvings, each keeping the smaller word of each pair of runs
    and merging the bitonic result (LOG_K compare-exchange stages), the last one ascending."""
    h = tl.reshape(~words, [2] * LOG_N)
    for i in tl.static_range(LOG_K + 1, LOG_N + 1):
        h = tl.max(h, axis=LOG_N - i)
        h = _bitonic_merge_hypercube(h, LOG_K, 2 if i < LOG_N else 1)
    return ~tl.reshape(h, [2 ** LOG_K])


@triton.jit
def merge_candidates_kernel(x_ptr, in_ptr, out_ptr, vals_ptr, idx_ptr, n, k, lists, group,
                            FINAL: tl.constexpr, LOG_RUNS: tl.constexpr, LOG_K: tl.constexpr):
    """out[row, g] = the k smallest words of lists g * group .. of the row's `lists` lists of k
    ascending words (group <= 2**LOG_RUNS >= 2 lists a program, K = 2**LOG_K >= k): each list read
    as a run of K, padded with the last word, even runs reversed, so only the halvings remain."""
    r, g = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    K: tl.constexpr = 2 ** LOG_K
    run = tl.arange(0, 2 ** LOG_RUNS)[:, None]
    slot = tl.arange(0, K)[None, :]
    src = tl.where(run % 2 == 0, K - 1 - slot, slot)
    listed = g * group + run
    inside = (run < group) & (listed < lists) & (src < k)
    words = tl.load(in_ptr + (r * lists + listed) * k + src, mask=inside)
    words = tl.where(inside, words, _last_word(K)[None, :])
    best = _smallest_of_runs(tl.reshape(words, [2 ** (LOG_RUNS + LOG_K)]), LOG_RUNS + LOG_K, LOG_K)
    _keep(best, x_ptr, out_ptr, vals_ptr, idx_ptr, r, r * tl.num_programs(1) + g, n, k, FINAL, K)
