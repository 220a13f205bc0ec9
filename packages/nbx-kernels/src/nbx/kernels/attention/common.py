"""The pieces the prefill and decode kernels share: where a key's row lives (contiguous or paged),
a block of scores with every option applied, and one step of the online softmax.

Scores are kept in base 2 (s * log2(e)) so that the softmax takes exp2. With no option between q.k
and the softmax and a positive scale (FOLD, the wrapper decides), the scale and log2(e) are one
factor applied inside the softmax step: the row max of the raw q.k times it, and exp2(qk * c - m)
one fused multiply-add a score (Triton's fused-attention tutorial does the same). A row with nothing to
attend to keeps m = -inf; its shift is taken as 0, so exp2(-inf - 0) = 0 and it never makes a
NaN: its sum stays 0, its output 0 and its log-sum-exp -inf.
"""
import triton
import triton.language as tl

from ..elementwise.casts import COMPILED, narrow, widen
from ..matmul.kernel import _dot_operand as dot_operand  # noqa: F401  (a loaded tile as the dot's operand)

# constants a jit function reads must be constexpr (Triton refuses other globals when it compiles)
LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)

NO_MASK, KEEP_MASK, ADDITIVE_MASK = 0, 1, 2   # MASK_KIND's values (the kernels test the literals)


@triton.jit
def prob_operand(p, DOT: tl.constexpr):
    """The probabilities (float32) as the P @ V operand: rounded to the dot's type (to nearest even
    on every device: the interpreter's .to() truncates), widened again on the interpreter, whose
    bfloat16 dot multiplies integer bits (dot_operand widens the other operand alike)."""
    if DOT == tl.float32:
        y = p
    elif COMPILED:
        y = p.to(DOT)
    elif DOT == tl.bfloat16:  # the interpreter's bfloat16 dot operands are float32 (dot_operand)
        y = widen(narrow(p, DOT), tl.float32)
    else:
        y = narrow(p, DOT)
    return y


@triton.jit
def key_rows(b, j, valid, table_ptr, stride_table, BLOCK_TOKENS, PAGED: tl.constexpr, WIDE: tl.constexpr):
    """The row (in units of the cache's token stride) of key j of sequence b: j itself for a
    contiguous cache, block_table[b, j // BLOCK_TOKENS] * BLOCK_TOKENS + j % BLOCK_TOKENS for a
    paged one (any block size; the table is read per key, from L1 after the first of a block; a
    key not valid, past the sequence, reads no entry and gets row 0). WIDE: as int64, for offsets
    past int32 once multiplied by the token stride."""
    if PAGED:
        block = tl.load(table_ptr + b.to(tl.int64) * stride_table + j // BLOCK_TOKENS, mask=valid, other=0)
        rows = block * BLOCK_TOKENS + j % BLOCK_TOKENS
    else:
        rows = j
    if WIDE:
        rows = rows.to(tl.int64)
    return rows


@triton.jit
def scores(qk, scale, softcap, pos, j, kv_len, slope, mask_ptrs, window_left, window_right,
           BOUNDED: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
           ALIBI: tl.constexpr, MASK_KIND: tl.constexpr, mask_valid, FOLD: tl.constexpr):
    """A block of base-2 scores from q.k (float32, [rows, keys]): scale, softcap, ALiBi, the mask,
    and (BOUNDED) the keys past kv_len, before pos - window_left or after pos + window_right
    dropped. pos: each row's aligned position; j: each key's index. FOLD: q.k as it is (the
    softmax step applies scale * log2(e))."""
    if FOLD:
        s = qk
    elif not SOFTCAP and not ALIBI and MASK_KIND != 2:  # scale and log2(e) in one multiply
        s = qk * (scale * LOG2E)
    else:
        s = qk * scale
        if SOFTCAP:  # softcap * tanh(s / softcap), tanh through exp (no tanh on every backend)
            e = tl.exp(-2.0 * tl.abs(s) / softcap)
            t = (1.0 - e) / (1.0 + e)
            s = softcap * tl.where(s < 0, -t, t)
        if ALIBI:
            distance = tl.abs(pos[:, None] - j[None, :]).to(tl.float32)
            s = s - slope[:, None] * distance
        if MASK_KIND == 2:  # additive
            s = s + tl.load(mask_ptrs, mask=mask_valid, other=0.0).to(tl.float32)
        s = s * LOG2E
    if MASK_KIND == 1:  # bool: keep where true
        keep = tl.load(mask_ptrs, mask=mask_valid, other=0) != 0
        s = tl.where(keep, s, float("-inf"))
    if BOUNDED:
        ok = j[None, :] < kv_len
        if HAS_RIGHT:
            ok = ok & (j[None, :] <= pos[:, None] + window_right)
        if HAS_LEFT:
            ok = ok & (j[None, :] >= pos[:, None] - window_left)
        s = tl.where(ok, s, float("-inf"))
    return s


@triton.jit
def online_step(s, m_i, l_i, c):
    """(p, alpha, m_new, l_new): the block's probabilities against the running max, the factor
    the running sums are rescaled by, the new max and sum; the base-2 scores are s * c (c > 0:
    the max commutes with it; 1.0 where s is scaled already)."""
    m_new = tl.maximum(m_i, tl.max(s, 1) * c)
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s * c - shift[:, None])
    alpha = tl.exp2(m_i - shift)
    l_new = l_i * alpha + tl.sum(p, 1)
    return p, alpha, m_new, l_new


@triton.jit
def finish(acc, m_i, l_i):
    """(out, lse): acc / l (0 where nothing was attended to) and the natural log-sum-exp."""
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), m_i * LN2 + tl.log(tl.where(empty, 1.0, l_i)))
    return out, lse
