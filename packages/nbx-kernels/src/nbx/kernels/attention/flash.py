"""Flash-attention forward (online softmax, no score matrix in memory): prefill, varlen batches,
chunked prefill over a paged cache, and decode split over the keys (flash-decoding).

A program takes BLOCK_M rows of one KV head's query group: row r is token r // GROUP of query head
kv_head * GROUP + r % GROUP, so the GROUP query heads that share a KV head read each K and V block
once (GQA/MQA; GROUP 1 is plain multi-head). Keys are walked in BLOCK_N blocks in three ranges:
the blocks some row may not fully see (before and after), with every bound checked, and between
them the blocks every row sees whole, with no check at all (for causal prefill, most of them).

Keys come from one of three layouts (KV_MODE): DENSE (batch stride, every sequence k_len keys),
PACKED (sequence b at rows cu_k[b]:cu_k[b+1]) or PAGED (a block table per sequence, the sequence's
length in lens[b]; any block size). Queries are dense or packed (VARLEN_Q, rows cu_q[b]:cu_q[b+1]).
The head dim is read at unit stride (the wrapper copies where it is not).

TMA (DENSE and PACKED keys whose bases and strides are 16-byte aligned, a Tunable choice): K and V
blocks come through tensor descriptors made in the program (on sm_90 a TMA copy into shared memory,
which wgmma reads as is; K's [BLOCK_N, BLOCK_D] tile transposed as a view). The descriptor's shape
is the sequence's [kv_len, HEAD_DIM], so keys past the sequence and a padded head dim read as zeros
and no load carries a mask; the scores of such keys are dropped as on the pointer path (BOUNDED).

SPLIT (decode: the query rows of a program are all of its group's, a few tokens): program s of
axis 0 takes keys s * split_len .. (s + 1) * split_len and writes its normalized partial output
and log-sum-exp (float32); combine_kernel merges a row's partials in split order, a fixed tree
(tl.sum over the splits of one program), so a launch's bits are the same every run.
"""
import triton
import triton.language as tl

from ..dependent_launch import wait_for_predecessor
from ..elementwise.casts import narrow
from .common import LOG2E, dot_operand, finish, key_rows, online_step, prob_operand, scores

DENSE, PACKED, PAGED = 0, 1, 2


@triton.jit
def _tile(ptrs, keys_ok, dims_ok, BOUNDED: tl.constexpr, EVEN: tl.constexpr):
    """A K or V block: masked by the keys only where they may pass the sequence, by the head dim
    only where it is padded (an unmasked load vectorizes)."""
    if BOUNDED:
        x = tl.load(ptrs, mask=keys_ok & dims_ok, other=0.0)
    elif EVEN:
        x = tl.load(ptrs)
    else:
        x = tl.load(ptrs, mask=dims_ok, other=0.0)
    return x


@triton.jit
def _kv_block(base, start, b, kv_len, k_row0, table_ptr, stride_table, block_tokens, stride, DIM: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_DIM: tl.constexpr, BOUNDED: tl.constexpr, KV_MODE: tl.constexpr,
              WIDE: tl.constexpr, TMA: tl.constexpr, KEYS: tl.constexpr):
    """Keys start .. start + BLOCK_N: K as the [BLOCK_DIM, BLOCK_N] operand of q @ K^T (KEYS), or V's
    [BLOCK_N, BLOCK_DIM] block; base a descriptor (TMA) or the head's first row."""
    if TMA:
        x = base.load([start, 0])
        if KEYS:
            x = x.T
    else:
        j = start + tl.arange(0, BLOCK_N)
        in_keys = j < kv_len
        d = tl.arange(0, BLOCK_DIM)
        rows = key_rows(b, j, in_keys, table_ptr, stride_table, block_tokens, KV_MODE == 2, WIDE) + k_row0
        if KEYS:
            x = _tile(base + rows[None, :] * stride + d[:, None], in_keys[None, :], d[:, None] < DIM, BOUNDED,
                      DIM == BLOCK_DIM)
        else:
            x = _tile(base + rows[:, None] * stride + d[None, :], in_keys[:, None], d[None, :] < DIM, BOUNDED,
                      DIM == BLOCK_DIM)
    return x


@triton.jit
def _qk(q, k, DOT: tl.constexpr, IEEE: tl.constexpr):
    if IEEE:
        qk = tl.dot(q, dot_operand(k, DOT), input_precision="ieee")
    else:
        qk = tl.dot(q, dot_operand(k, DOT))
    return qk


@triton.jit
def _absorb(acc, m_i, l_i, qk, v, start, kv_len, pos, tok, h64, row_ok, slope, mask_base, sml, smh, sms,
            window_left, window_right, scale, softcap, BLOCK_N: tl.constexpr, BOUNDED: tl.constexpr,
            HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr,
            MASK_KIND: tl.constexpr, DOT: tl.constexpr, IEEE: tl.constexpr, FOLD: tl.constexpr):
    """acc, m_i, l_i after the block of keys at start whose q.k is qk and whose values are v."""
    j = start + tl.arange(0, BLOCK_N)
    c = scale * LOG2E if FOLD else 1.0
    mask_ptrs = mask_base + h64[:, None] * smh + tok[:, None] * sml + j[None, :].to(tl.int64) * sms
    s = scores(qk, scale, softcap, pos, j, kv_len, slope, mask_ptrs, window_left, window_right, BOUNDED,
               HAS_LEFT, HAS_RIGHT, SOFTCAP, ALIBI, MASK_KIND, row_ok[:, None] & (j < kv_len)[None, :], FOLD)
    p, alpha, m_i, l_i = online_step(s, m_i, l_i, c)
    if IEEE:
        acc = tl.dot(prob_operand(p, DOT), dot_operand(v, DOT), acc * alpha[:, None], input_precision="ieee")
    else:
        acc = tl.dot(prob_operand(p, DOT), dot_operand(v, DOT), acc * alpha[:, None])
    return acc, m_i, l_i


@triton.jit
def _attend(acc, m_i, l_i, q, lo, hi, b, kv_len, k_base, v_base, k_row0, table_ptr, stride_table, block_tokens,
            sks, svs, pos, tok, h64, row_ok, slope, mask_base, sml, smh, sms, window_left, window_right,
            scale, softcap, HEAD_DIM: tl.constexpr, V_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
            BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, BOUNDED: tl.constexpr, KV_MODE: tl.constexpr,
            HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr,
            MASK_KIND: tl.constexpr, DOT: tl.constexpr, IEEE: tl.constexpr, WIDE: tl.constexpr,
            TMA: tl.constexpr, FOLD: tl.constexpr):
    """acc, m_i, l_i after keys lo .. hi (lo a multiple of BLOCK_N). TMA: k_base and v_base are the
    sequence's K and V descriptors (rows from 0), no pointers."""
    for start in range(lo, hi, BLOCK_N):
        start = tl.multiple_of(start, BLOCK_N)
        qk = _qk(q, _kv_block(k_base, start, b, kv_len, k_row0, table_ptr, stride_table, block_tokens, sks,
                              HEAD_DIM, BLOCK_N, BLOCK_D, BOUNDED, KV_MODE, WIDE, TMA, True), DOT, IEEE)
        v = _kv_block(v_base, start, b, kv_len, k_row0, table_ptr, stride_table, block_tokens, svs, V_DIM, BLOCK_N,
                      BLOCK_DV, BOUNDED, KV_MODE, WIDE, TMA, False)
        acc, m_i, l_i = _absorb(acc, m_i, l_i, qk, v, start, kv_len, pos, tok, h64, row_ok, slope, mask_base, sml,
                                smh, sms, window_left, window_right, scale, softcap, BLOCK_N, BOUNDED, HAS_LEFT,
                                HAS_RIGHT, SOFTCAP, ALIBI, MASK_KIND, DOT, IEEE, FOLD)
    return acc, m_i, l_i


@triton.jit
def prefill_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, mask_ptr, slope_ptr, cu_q_ptr, kv_len_ptr, table_ptr,
                   q_len, k_len, kv_heads, window_left, window_right, block_tokens, stride_table,
                   sqb, sqh, sql, skb, skh, sks, svb, svh, svs, sob, soh, sol, slb, slh, sll,
                   smb, smh, sml, sms, sab, sah, scale, softcap, split_len, sos, sls,
                   GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, V_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, VARLEN_Q: tl.constexpr,
                   KV_MODE: tl.constexpr, BOTTOM_RIGHT: tl.constexpr, HAS_LEFT: tl.constexpr,
                   HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr, MASK_KIND: tl.constexpr,
                   WRITE_LSE: tl.constexpr, SPLIT: tl.constexpr, DOT: tl.constexpr, IEEE: tl.constexpr,
                   WIDE: tl.constexpr, TMA: tl.constexpr, FOLD: tl.constexpr, PDL: tl.constexpr = False):
    """Grid: (cdiv(longest q_len * GROUP, BLOCK_M), batch * kv_heads), or (splits, batch * kv_heads)
    with SPLIT (q_len * GROUP <= BLOCK_M; o_ptr, lse_ptr the partials, split s at s * sos, s * sls).
    window_right already holds causality (0, or the smaller bound); kv_len_ptr is cu_k (PACKED)
    or the lengths (PAGED). WIDE: a key's offset in K or V may pass int32 (64-bit offsets). TMA: K
    and V through descriptors (DENSE or PACKED, 16-byte aligned: the wrapper decides). FOLD: the
    scale applied in the softmax step (no softcap, ALiBi or additive mask; scale > 0)."""
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    pid_m = tl.program_id(0)
    split = 0
    if SPLIT:
        split = pid_m
        pid_m = 0
    elif HAS_RIGHT:  # causal: the last rows see the most keys; they start first, so no long tail waits
        pid_m = tl.num_programs(0) - 1 - pid_m
    pid_bh = tl.program_id(1)
    b = pid_bh // kv_heads
    kv_head = pid_bh % kv_heads
    q_row0 = 0
    if VARLEN_Q:
        q_row0 = tl.load(cu_q_ptr + b)
        q_len = tl.load(cu_q_ptr + b + 1) - q_row0
    k_row0 = 0
    kv_len = k_len
    if KV_MODE == 1:
        k_row0 = tl.load(kv_len_ptr + b)
        kv_len = tl.load(kv_len_ptr + b + 1) - k_row0
    elif KV_MODE == 2:
        kv_len = tl.load(kv_len_ptr + b)
    if pid_m * BLOCK_M >= q_len * GROUP:
        return
    f = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    tok = f // GROUP
    h = kv_head * GROUP + f % GROUP
    h64 = h.to(tl.int64)  # head offsets of a long sequence may pass int32
    row_ok = tok < q_len
    offset = kv_len - q_len if BOTTOM_RIGHT else 0
    pos = tok + offset
    b64 = b.to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    q_rows = (q_row0 + tok).to(tl.int64)
    q = tl.load(q_ptr + b64 * sqb + h64[:, None] * sqh + q_rows[:, None] * sql + d[None, :],
                mask=row_ok[:, None] & (d[None, :] < HEAD_DIM), other=0.0)
    q = dot_operand(q, DOT)
    slope = tl.zeros((BLOCK_M,), tl.float32)
    if ALIBI:
        slope = tl.load(slope_ptr + b64 * sab + h64 * sah).to(tl.float32)
    k_base = k_ptr + b64 * skb + kv_head.to(tl.int64) * skh
    v_base = v_ptr + b64 * svb + kv_head.to(tl.int64) * svh
    mask_base = mask_ptr + b64 * smb
    if TMA:  # the sequence's rows of this KV head: [kv_len, HEAD_DIM] at row stride sks (svs)
        row0 = tl.full((), 0, tl.int64) + k_row0
        rows = tl.maximum(kv_len, 1)   # an empty sequence loads nothing; its descriptor still has a row
        k_base = tl.make_tensor_descriptor(k_base + row0 * sks, shape=[rows, HEAD_DIM], strides=[sks, 1],
                                           block_shape=[BLOCK_N, BLOCK_D])
        v_base = tl.make_tensor_descriptor(v_base + row0 * svs, shape=[rows, V_DIM], strides=[svs, 1],
                                           block_shape=[BLOCK_N, BLOCK_DV])

    # the keys any row sees (lo, hi) and those every row sees (full_lo, full_hi)
    first = pid_m * BLOCK_M // GROUP + offset
    last = tl.minimum((pid_m * BLOCK_M + BLOCK_M - 1) // GROUP, q_len - 1) + offset
    lo = 0
    full_lo = 0
    hi = kv_len
    full_hi = kv_len
    if HAS_LEFT:
        lo = tl.maximum(first - window_left, 0)
        full_lo = tl.maximum(last - window_left, 0)
    if HAS_RIGHT:
        hi = tl.maximum(tl.minimum(last + window_right + 1, kv_len), 0)
        full_hi = tl.maximum(tl.minimum(first + window_right + 1, kv_len), 0)
    lo = lo // BLOCK_N * BLOCK_N
    full_lo = tl.cdiv(full_lo, BLOCK_N) * BLOCK_N
    full_hi = full_hi // BLOCK_N * BLOCK_N
    full_lo = tl.maximum(full_lo, lo)
    if full_hi <= full_lo:  # no block is seen whole: the checked walk after covers lo .. hi
        full_lo = lo
        full_hi = lo
    if SPLIT:  # this program's share of the keys (split_len a multiple of BLOCK_N)
        s_lo = split * split_len
        s_hi = s_lo + split_len
        lo = tl.maximum(lo, s_lo)
        hi = tl.minimum(hi, s_hi)
        full_lo = tl.minimum(tl.maximum(full_lo, s_lo), hi)
        full_hi = tl.maximum(tl.minimum(full_hi, s_hi), full_lo)

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)
    # three walks: the checked blocks before those every row sees (only a left window has any: without
    # one, lo == full_lo), the unchecked ones, and the checked ones after (the causal diagonal, the tail)
    if HAS_LEFT:
        acc, m_i, l_i = _attend(acc, m_i, l_i, q, lo, full_lo, b, kv_len, k_base, v_base, k_row0, table_ptr,
                                stride_table, block_tokens, sks, svs, pos, tok, h64, row_ok, slope, mask_base, sml, smh,
                                sms, window_left, window_right, scale, softcap, HEAD_DIM, V_DIM, BLOCK_N, BLOCK_D,
                                BLOCK_DV, True, KV_MODE, HAS_LEFT, HAS_RIGHT, SOFTCAP, ALIBI, MASK_KIND, DOT,
                                IEEE, WIDE, TMA, FOLD)
    acc, m_i, l_i = _attend(acc, m_i, l_i, q, full_lo, full_hi, b, kv_len, k_base, v_base, k_row0, table_ptr,
                            stride_table, block_tokens, sks, svs, pos, tok, h64, row_ok, slope, mask_base, sml, smh,
                            sms, window_left, window_right, scale, softcap, HEAD_DIM, V_DIM, BLOCK_N, BLOCK_D,
                            BLOCK_DV, False, KV_MODE, HAS_LEFT, HAS_RIGHT, SOFTCAP, ALIBI, MASK_KIND, DOT,
                            IEEE, WIDE, TMA, FOLD)
    acc, m_i, l_i = _attend(acc, m_i, l_i, q, full_hi, hi, b, kv_len, k_base, v_base, k_row0, table_ptr,
                            stride_table, block_tokens, sks, svs, pos, tok, h64, row_ok, slope, mask_base, sml, smh,
                            sms, window_left, window_right, scale, softcap, HEAD_DIM, V_DIM, BLOCK_N, BLOCK_D,
                            BLOCK_DV, True, KV_MODE, HAS_LEFT, HAS_RIGHT, SOFTCAP, ALIBI, MASK_KIND, DOT,
                            IEEE, WIDE, TMA, FOLD)
    out, lse = finish(acc, m_i, l_i)
    dv = tl.arange(0, BLOCK_DV)
    o_ptr += split * sos
    lse_ptr += split * sls
    tl.store(o_ptr + b64 * sob + h64[:, None] * soh + q_rows[:, None] * sol + dv[None, :],
             narrow(out, o_ptr.dtype.element_ty), mask=row_ok[:, None] & (dv[None, :] < V_DIM))
    if WRITE_LSE:
        tl.store(lse_ptr + b64 * slb + h64 * slh + q_rows * sll, lse, mask=row_ok)


@triton.jit
def combine_kernel(part_ptr, part_lse_ptr, o_ptr, lse_ptr, rows_per_batch, heads, splits,
                   sob, soh, sol, slb, slh, sll,
                   V_DIM: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_DV: tl.constexpr, WRITE_LSE: tl.constexpr, PDL: tl.constexpr = False):
    """Grid: (rows,), a row per (batch, head, token) in that order. The partials are (splits, rows,
    V_DIM) and (splits, rows) float32: out = sum_s exp(lse_s - max) o_s / sum_s exp(lse_s - max)."""
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    r = tl.program_id(0)
    s = tl.arange(0, BLOCK_S)
    dv = tl.arange(0, BLOCK_DV)
    rows = tl.num_programs(0)
    lse_s = tl.load(part_lse_ptr + s * rows + r, mask=s < splits, other=float("-inf"))
    top = tl.max(lse_s, 0)
    shift = tl.where(top == float("-inf"), 0.0, top)
    w = tl.exp(lse_s - shift)
    total = tl.sum(w, 0)
    parts = tl.load(part_ptr + (s[:, None] * rows + r).to(tl.int64) * V_DIM + dv[None, :],
                    mask=(s[:, None] < splits) & (dv[None, :] < V_DIM), other=0.0)
    out = tl.sum(parts * w[:, None], 0) / tl.where(total == 0.0, 1.0, total)
    b = r // rows_per_batch
    h = (r // (rows_per_batch // heads)) % heads
    t = r % (rows_per_batch // heads)
    tl.store(o_ptr + b.to(tl.int64) * sob + h * soh + t * sol + dv, narrow(out, o_ptr.dtype.element_ty),
             mask=dv < V_DIM)
    if WRITE_LSE:
        lse = tl.where(total == 0.0, float("-inf"), shift + tl.log(tl.where(total == 0.0, 1.0, total)))
        tl.store(lse_ptr + b.to(tl.int64) * slb + h * slh + t * sll, lse)
