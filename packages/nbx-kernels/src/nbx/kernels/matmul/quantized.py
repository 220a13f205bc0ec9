"""W4A16: x @ W.T with W a grouped int4 QuantizedTensor, dequantized in registers.

The weight never exists in memory as floats. qweight is [N, K / 2] bytes, byte j of a row holding
q[2j] in its low nibble and q[2j + 1] in its high one. BLOCK_K divides the group size, so a K
step lies in one group and loads each weight row's scale (and minimum) once.

int4_linear_kernel (linear): the swapped product C^T = W @ x^T, weight rows on the matrix unit's
long side, so that decode rows (M 1-16) fill a dot of 16 and the packed weight is streamed once
along its rows; every tile form multiplies x^T as it lies, straight from shared memory. Decode
(FOLD) tiles read the weight in 16-bit halves, decoded into values C + q (nibbles._halves_values),
and scale the dot's sums once a K step; prescaled tiles dequantize the halves before the dot
(nibbles._halves_dequantized); wide tiles decode bytes (nibbles._nibble_pairs), scale each element
in float32 and interleave them back into K order (tl.join). int4_step: the K step of a (x rows,
weight columns) tile (two half-K dots over x read at stride 2, float32 dequantization), which the
MoE kernels share. Split K, the epilogue and its fixed-order partials are those of the float
kernel (fused.py).

GATED (SwiGLU's pair, activation(x @ Wg.T) * (x @ Wu.T)): a second packed weight of the first's
shape, group, scheme and strides (q2, s2, z2) summed in the same K loop from the same loads of x,
in every form; the epilogue (or, split, the split epilogue over both halves of the partials) is
the float kernel's gated one.
"""
import triton
import triton.language as tl

from ..dependent_launch import wait_for_predecessor
from ..elementwise.casts import COMPILED, narrow, widen
from ..rows import float_argument
from .fused import epilogue
from .kernel import _dot_operand, _grouped_tile
from .nibbles import _halves_dequantized, _halves_values, _nibble_pairs, _scaled, halves_magic


@triton.jit
def _dequantized(nibbles, scale, minimum, SIGNED: tl.constexpr, ASYMMETRIC: tl.constexpr, DOT: tl.constexpr):
    """q * scale (+ minimum) in float32, rounded to the dot's type as the reference rounds a cast."""
    q = nibbles.to(tl.int32)
    if SIGNED:
        q = (q ^ 8) - 8
    w = q.to(tl.float32) * scale[None, :]
    if ASYMMETRIC:
        w += minimum[None, :]
    if DOT != tl.float32:
        w = narrow(w, DOT)
    return _dot_operand(w, DOT)


@triton.jit
def _group_scales(s_ptrs, z_ptrs, in_n, k, GROUP: tl.constexpr, ASYMMETRIC: tl.constexpr, BLOCK_K: tl.constexpr):
    """(scale, minimum) as float32 of each column's group at K step k (minimum = scale: symmetric)."""
    group = (k * BLOCK_K) // GROUP
    scale = widen(tl.load(s_ptrs + group, mask=in_n, other=0), tl.float32)
    minimum = scale
    if ASYMMETRIC:
        minimum = widen(tl.load(z_ptrs + group, mask=in_n, other=0), tl.float32)
    return scale, minimum


@triton.jit
def int4_step(acc, a_even, a_odd, q_ptrs, s_ptrs, z_ptrs, in_n, k, DOT: tl.constexpr, PRECISION: tl.constexpr,
              GROUP: tl.constexpr, SIGNED: tl.constexpr, ASYMMETRIC: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc += A @ W over K step k: the step's packed (BLOCK_K / 2, BLOCK_N) bytes at q_ptrs, its
    group's scale (and minimum) of each column at s_ptrs (z_ptrs) + group, A's even and odd columns
    given (loaded by the caller, who may multiply them by several weights)."""
    scale, minimum = _group_scales(s_ptrs, z_ptrs, in_n, k, GROUP, ASYMMETRIC, BLOCK_K)
    packed = tl.load(q_ptrs + k * (BLOCK_K // 2), mask=in_n[None, :], other=0)
    acc = tl.dot(a_even, _dequantized(packed & 0xF, scale, minimum, SIGNED, ASYMMETRIC, DOT), acc,
                 input_precision=PRECISION)
    return tl.dot(a_odd, _dequantized(packed >> 4, scale, minimum, SIGNED, ASYMMETRIC, DOT), acc,
                  input_precision=PRECISION)


@triton.jit(do_not_specialize=["alpha_bits", "beta_bits"])
def int4_linear_kernel(
    a_ptr, q_ptr, s_ptr, z_ptr, q2_ptr, s2_ptr, z2_ptr, c_ptr, part_ptr, bias_ptr, res_ptr, M, N, K,
    sam, sak, sqn, ssn, sbias_m, sbias_n, sres_m, sres_n, alpha_bits, beta_bits,
    DOT: tl.constexpr, PRECISION: tl.constexpr, GROUP: tl.constexpr, SIGNED: tl.constexpr,
    ASYMMETRIC: tl.constexpr, FOLD: tl.constexpr, WIDE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_RES: tl.constexpr,
    GEMV: tl.constexpr = False, STAGES: tl.constexpr = 2, GATED: tl.constexpr = False,
    PDL: tl.constexpr = False, PRESCALED: tl.constexpr = False,
):
    """C^T = W @ x^T by tiles of (BLOCK_N weight rows, BLOCK_M rows of x): the dequantized weight
    is the dot's first operand, which the matrix unit takes from registers (Hopper's wgmma), and
    x^T the second, from shared memory; each weight row's packed bytes are read along K, 16 bytes
    a load from BLOCK_K = 32 on. Decode rows take BLOCK_M = 16 (the dot's least) and split K so
    that every SM streams the weight; prefill rows take wide tiles. FOLD: the dot sums x * q and
    the group's scale (and minimum, times the sum of x) multiply the sums once a K step (fewer
    ops per weight element: decode); else each element is dequantized before the dot. GEMV: the
    sums on the CUDA cores instead (_gemv_sums: decode rows, any BLOCK_M; DOT, PRECISION, FOLD unused;
    STAGES: the one-row gemv's pipelined depth, which Triton takes from tl.range alone in a loop with no dot).
    Grid: (tiles of M x N, SPLIT_K). sqn, ssn: the row strides of qweight (bytes) and of the
    scales and minima (groups); both are read at unit stride along K. GATED: q2, s2, z2 the up
    weight's (the same strides), C = activation(x @ W.T) * (x @ W2.T). PRESCALED (not FOLD): each K
    step's weight dequantized from 16-bit halves, one 16-bit fma a pair (_halves_dequantized), the dot
    accumulating across steps."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    tile_m, tile_n = _grouped_tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rh = tl.arange(0, BLOCK_K // 2)
    rk = tl.arange(0, BLOCK_K)
    rq = tl.arange(0, BLOCK_K // 4)
    rw = tl.arange(0, BLOCK_K // 8)
    if WIDE:
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
        rh = rh.to(tl.int64)
        rk = rk.to(tl.int64)
        rq = rq.to(tl.int64)
        rw = rw.to(tl.int64)
    in_m = rm < M
    in_n = rn < N
    # x^T (BLOCK_K, BLOCK_M), which both tile forms multiply as it lies (straight from shared memory): wide
    # tiles by the weight's nibbles interleaved back into K order, FOLD tiles by the values of its halves
    x_ptrs = a_ptr + rm[None, :] * sam + rk[:, None] * sak
    q_at = rn[:, None] * sqn + rh[None, :]                                # (BLOCK_N, BLOCK_K / 2) bytes
    h_at = rn[:, None] * (sqn // 2) + rq[None, :]                         # (BLOCK_N, BLOCK_K / 4) halves

    total = K // BLOCK_K
    per = tl.cdiv(total, SPLIT_K)
    first = split * per
    steps = tl.minimum(per, total - first)
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    if GEMV:
        if BLOCK_M == 1:
            acc, acc_u = _gemv_row_sums(a_ptr, q_ptr, s_ptr, z_ptr, q2_ptr, s2_ptr, z2_ptr, rn, in_n, tile_m, sam, sak,
                                        sqn, ssn, first, steps, DOT, GROUP, SIGNED, ASYMMETRIC, BLOCK_N, BLOCK_K,
                                        STAGES, GATED)
        else:
            acc, acc_u = _gemv_sums(a_ptr, q_ptr, s_ptr, z_ptr, q2_ptr, s2_ptr, z2_ptr, rn, rw, in_n, tile_m, M, sam,
                                    sak, sqn, ssn, first, steps, GROUP, SIGNED, ASYMMETRIC, BLOCK_M, BLOCK_N, BLOCK_K,
                                    GATED)
    else:
        acc, acc_u = _dot_sums(q_ptr, s_ptr, z_ptr, q2_ptr, s2_ptr, z2_ptr, q_at, h_at, rn * ssn, x_ptrs, in_m,
                               in_n, sak, first, steps, DOT, PRECISION, GROUP, SIGNED, ASYMMETRIC, FOLD, BLOCK_M,
                               BLOCK_N, BLOCK_K, GATED, PRESCALED)
    _transposed_out(acc, acc_u, rm, rn, in_m, in_n, split, c_ptr, part_ptr, bias_ptr, res_ptr, M, N, sbias_m,
                    sbias_n, sres_m, sres_n, alpha_bits, beta_bits, SPLIT_K, HAS_BIAS, ACTIVATION, HAS_RES, GATED)


@triton.jit
def _fold_step(acc, h_ptrs, scale, minimum, in_n, k, x_t, x_sums, DOT: tl.constexpr, PRECISION: tl.constexpr,
               SIGNED: tl.constexpr, ASYMMETRIC: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc += one weight's K step k on x^T, one dot of the values C + q (_halves_values), the step's
    group scale (and minimum) on the dot's sums: sum(q x) s + m sum(x) = s sums + (m - C s) sum(x)
    (x_sums: the step's sums of x; symmetric m = 0, C 8 more)."""
    halves = tl.load(h_ptrs + k * (BLOCK_K // 4), mask=in_n[:, None], other=0)
    values = _dot_operand(_halves_values(halves, SIGNED, DOT, BLOCK_N, BLOCK_K), DOT)
    sums = tl.dot(values, x_t, input_precision=PRECISION)
    offset = -halves_magic(DOT, SIGNED) * scale
    if ASYMMETRIC:
        offset += minimum
    return acc + sums * scale[:, None] + offset[:, None] * x_sums


@triton.jit
def _prescaled_step(acc, h_ptrs, scale, minimum, in_n, k, x_t, DOT: tl.constexpr, PRECISION: tl.constexpr,
                    SIGNED: tl.constexpr, ASYMMETRIC: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc += one weight's K step k on x^T, the weight dequantized in the halves' registers
    (_halves_dequantized) before the dot, so that the dot accumulates across steps (no wait on its sums)."""
    halves = tl.load(h_ptrs + k * (BLOCK_K // 4), mask=in_n[:, None], other=0)
    if not ASYMMETRIC:
        minimum = 0.0 * scale
    w = _dot_operand(_halves_dequantized(halves, scale, minimum, SIGNED, DOT, BLOCK_N, BLOCK_K), DOT)
    return tl.dot(w, x_t, acc, input_precision=PRECISION)


@triton.jit
def _wide_step(acc, q_ptrs, scale, minimum, in_n, k, x_t, DOT: tl.constexpr, PRECISION: tl.constexpr,
               SIGNED: tl.constexpr, ASYMMETRIC: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc += one weight's K step k on x^T, each element dequantized (its group's scale and minimum)
    before the dot."""
    packed = tl.load(q_ptrs + k * (BLOCK_K // 2), mask=in_n[:, None], other=0)
    low, high = _nibble_pairs(packed, SIGNED, DOT)
    w = tl.reshape(tl.join(_scaled(low, scale, minimum, ASYMMETRIC, DOT),
                           _scaled(high, scale, minimum, ASYMMETRIC, DOT)), (BLOCK_N, BLOCK_K))
    return tl.dot(w, x_t, acc, input_precision=PRECISION)


@triton.jit
def _dot_sums(q_ptr, s_ptr, z_ptr, q2_ptr, s2_ptr, z2_ptr, q_at, h_at, s_at, x_ptrs, in_m, in_n, sak, first,
              steps, DOT: tl.constexpr, PRECISION: tl.constexpr, GROUP: tl.constexpr, SIGNED: tl.constexpr,
              ASYMMETRIC: tl.constexpr, FOLD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, GATED: tl.constexpr, PRESCALED: tl.constexpr):
    """The tiles form's (BLOCK_N, BLOCK_M) sums of C^T over K steps first .. first + steps, on the
    matrix unit (GATED: the second weight's too, from the same x tiles): FOLD, the scales on the
    dot's sums; PRESCALED, each step's weight dequantized from its halves; else, from its bytes."""
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    # FOLD and PRESCALED: the weight streams as 16-bit halves (four nibbles) at h_at, K along a row
    h_ptr, h2_ptr = q_ptr.to(tl.pointer_type(tl.uint16)), q2_ptr.to(tl.pointer_type(tl.uint16))
    # a step's group scales (and minima) are loaded a step ahead: their loads are too narrow for the
    # pipeliner's copies, and loaded in the step they held it for a memory latency each
    last = first + steps - 1            # at most the last K step (an empty split reads that one)
    scale, minimum = _group_scales(s_ptr + s_at, z_ptr + s_at, in_n, tl.minimum(first, last), GROUP, ASYMMETRIC,
                                   BLOCK_K)
    scale_u, minimum_u = scale, minimum
    if GATED:
        scale_u, minimum_u = _group_scales(s2_ptr + s_at, z2_ptr + s_at, in_n, tl.minimum(first, last), GROUP,
                                           ASYMMETRIC, BLOCK_K)
    for k in range(first, first + steps):
        ahead = tl.minimum(k + 1, last)
        scale_next, minimum_next = _group_scales(s_ptr + s_at, z_ptr + s_at, in_n, ahead, GROUP, ASYMMETRIC, BLOCK_K)
        scale_u_next, minimum_u_next = scale_next, minimum_next
        if GATED:
            scale_u_next, minimum_u_next = _group_scales(s2_ptr + s_at, z2_ptr + s_at, in_n, ahead, GROUP, ASYMMETRIC,
                                                         BLOCK_K)
        x = tl.load(x_ptrs + k * BLOCK_K * sak, mask=in_m[None, :], other=0)
        x_t = _dot_operand(x, DOT)
        if FOLD:
            x_sums = tl.sum(widen(x, tl.float32), axis=0)[None, :]
            acc = _fold_step(acc, h_ptr + h_at, scale, minimum, in_n, k, x_t, x_sums, DOT, PRECISION, SIGNED,
                             ASYMMETRIC, BLOCK_N, BLOCK_K)
            if GATED:
                acc_u = _fold_step(acc_u, h2_ptr + h_at, scale_u, minimum_u, in_n, k, x_t, x_sums, DOT, PRECISION,
                                   SIGNED, ASYMMETRIC, BLOCK_N, BLOCK_K)
        elif PRESCALED:
            acc = _prescaled_step(acc, h_ptr + h_at, scale, minimum, in_n, k, x_t, DOT, PRECISION, SIGNED, ASYMMETRIC,
                                  BLOCK_N, BLOCK_K)
            if GATED:
                acc_u = _prescaled_step(acc_u, h2_ptr + h_at, scale_u, minimum_u, in_n, k, x_t, DOT, PRECISION, SIGNED,
                                        ASYMMETRIC, BLOCK_N, BLOCK_K)
        else:
            acc = _wide_step(acc, q_ptr + q_at, scale, minimum, in_n, k, x_t, DOT, PRECISION, SIGNED, ASYMMETRIC,
                             BLOCK_N, BLOCK_K)
            if GATED:
                acc_u = _wide_step(acc_u, q2_ptr + q_at, scale_u, minimum_u, in_n, k, x_t, DOT, PRECISION, SIGNED,
                                   ASYMMETRIC, BLOCK_N, BLOCK_K)
        scale, minimum, scale_u, minimum_u = scale_next, minimum_next, scale_u_next, minimum_u_next
    return acc, acc_u


@triton.jit
def _transposed_out(acc, acc_u, rm, rn, in_m, in_n, split, c_ptr, part_ptr, bias_ptr, res_ptr, M, N, sbias_m, sbias_n,
                    sres_m, sres_n, alpha_bits, beta_bits, SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr,
                    ACTIVATION: tl.constexpr, HAS_RES: tl.constexpr, GATED: tl.constexpr):
    """A (BLOCK_N, BLOCK_M) tile of C^T to C through the epilogue, or to its split's partials
    (GATED: the up sums in the partials' second half, as split_epilogue_kernel reads them)."""
    mask = in_n[:, None] & in_m[None, :]
    at = rm[None, :] * N + rn[:, None]
    if SPLIT_K == 1:
        y = epilogue(acc, acc_u, 0, rm[None, :], rn[:, None], mask, N, bias_ptr, 0, sbias_m, sbias_n, res_ptr, 0,
                     sres_m, sres_n, float_argument(alpha_bits).to(tl.float32),
                     float_argument(beta_bits).to(tl.float32), tl.float32, HAS_BIAS, ACTIVATION, HAS_RES, GATED)
        tl.store(c_ptr + at, narrow(y, c_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(part_ptr + split * M * N + at, acc, mask=mask)
        if GATED:
            tl.store(part_ptr + (SPLIT_K + split) * M * N + at, acc_u, mask=mask)


# One 32-bit word of packed weight (nibbles 0..7 = K 8w .. 8w + 7, low first) to eight float32
# v = 1 + n / 16: each nibble shifted to the top four mantissa bits and ORed with 1.0's bits in one
# lop3 (signed: XORed with 1.5's, which flips the nibble's bit 3 as (q ^ 8) does). v is exact and
# in [1, 2): the products v * x keep float32's precision, and sum(q x) = 16 sum(v x) - C sum(x)
# (C = 16, signed 24) costs two ops a group instead of a conversion a weight element.
_WORD_ASM = """{
.reg .b32 t, mask, magic;
mov.b32 mask, 0x00780000;
mov.b32 magic, MAGIC;
""" + "".join(f"{'shl' if shift > 0 else 'shr'}.b32 t, $8, {abs(shift)};\nlop3.b32 ${j}, t, mask, magic, LUT;\n"
              for j, shift in enumerate(19 - 4 * j for j in range(8))) + "}"
WORD_VALUES = tl.constexpr(_WORD_ASM.replace("MAGIC", "0x3F800000").replace("LUT", "0xEA"))
WORD_VALUES_SIGNED = tl.constexpr(_WORD_ASM.replace("MAGIC", "0x3FC00000").replace("LUT", "0x6A"))


@triton.jit
def _nibble_v(words, j: tl.constexpr, SIGNED: tl.constexpr):
    n = (words >> (4 * j)) & 0xF
    if SIGNED:
        n = n ^ 8
    return n.to(tl.float32) * 0.0625 + 1.0


@triton.jit
def _word_values(words, SIGNED: tl.constexpr):
    """The eight v = 1 + n / 16 (n: nibble j of each word, XORed with 8 if SIGNED), float32."""
    if COMPILED:
        v0, v1, v2, v3, v4, v5, v6, v7 = tl.inline_asm_elementwise(
            WORD_VALUES_SIGNED if SIGNED else WORD_VALUES, "=r,=r,=r,=r,=r,=r,=r,=r,r", [words],
            dtype=(tl.float32, tl.float32, tl.float32, tl.float32, tl.float32, tl.float32, tl.float32, tl.float32),
            is_pure=True, pack=1)
    else:
        v0, v1, v2, v3 = _nibble_v(words, 0, SIGNED), _nibble_v(words, 1, SIGNED), _nibble_v(words, 2, SIGNED), \
            _nibble_v(words, 3, SIGNED)
        v4, v5, v6, v7 = _nibble_v(words, 4, SIGNED), _nibble_v(words, 5, SIGNED), _nibble_v(words, 6, SIGNED), \
            _nibble_v(words, 7, SIGNED)
    return v0, v1, v2, v3, v4, v5, v6, v7


@triton.jit
def _gemv_step(upcoming, w_ptrs, s_ptrs, z_ptrs, in_n, none, k, first, steps, GROUP: tl.constexpr,
               SIGNED: tl.constexpr, ASYMMETRIC: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """K step k of the several-row gemv (_gemv_sums): its words (loaded a step ahead: upcoming) as the values v
    (BLOCK_N, BLOCK_K / 8, 8), nibble j of word w at [:, w, j] in K order (the joins stay in a thread's
    registers), the next step's words loaded, and the step's group scale (and minimum)."""
    words = upcoming
    upcoming = tl.load(w_ptrs + (k + 1) * (BLOCK_K // 8), mask=in_n[:, None] & (none + k + 1 < first + steps), other=0)
    scale, minimum = _group_scales(s_ptrs, z_ptrs, in_n, k, GROUP, ASYMMETRIC, BLOCK_K)
    v0, v1, v2, v3, v4, v5, v6, v7 = _word_values(words, SIGNED)
    v = tl.reshape(tl.join(tl.join(tl.join(v0, v4), tl.join(v2, v6)), tl.join(tl.join(v1, v5), tl.join(v3, v7))),
                   (BLOCK_N, BLOCK_K // 8, 8))
    return v, upcoming, scale, minimum


@triton.jit
def _gemv_part(v, x, x_sum, scale, minimum, SIGNED: tl.constexpr, ASYMMETRIC: tl.constexpr):
    """One row of x's (BLOCK_N,) sums of a K step over one weight's values v (_gemv_step)."""
    bias: tl.constexpr = 24.0 if SIGNED else 16.0
    part = (16.0 * tl.sum(tl.sum(v * x[None, :, :], axis=2), axis=1) - bias * x_sum) * scale
    if ASYMMETRIC:
        part += minimum * x_sum
    return part


@triton.jit
def _gemv_sums(a_ptr, q_ptr, s_ptr, z_ptr, q2_ptr, s2_ptr, z2_ptr, rn, rw, in_n, tile_m, M, sam, sak, sqn, ssn, first,
               steps, GROUP: tl.constexpr, SIGNED: tl.constexpr, ASYMMETRIC: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GATED: tl.constexpr):
    """The GEMV form's (BLOCK_N, BLOCK_M) sums of C^T over K steps first .. first + steps, on the
    CUDA cores (no matrix unit: no 16-row tile for one row, no trip of the weight through shared
    memory). The weight rows' packed bytes stream as 32-bit words (16-byte loads of four words a
    thread, the next step's loaded before this one's are used); each word becomes eight float32
    values in eight ops (_WORD_ASM), multiplied into each of the BLOCK_M rows of x (read from the
    caches, in float32); the scale (and minimum) apply once a K step to the row sums. sqn, the
    packed row stride in bytes, is a multiple of 4. GATED: the second weight's sums too, from the
    same loads of x."""
    w_at = rn[:, None] * (sqn // 4) + rw[None, :]                                            # (BLOCK_N, BLOCK_K / 8)
    w_ptrs = q_ptr.to(tl.pointer_type(tl.int32)) + w_at
    w2_ptrs = q2_ptr.to(tl.pointer_type(tl.int32)) + w_at
    columns = tl.arange(0, BLOCK_M)[None, :]
    x_at = 8 * rw[:, None] + tl.arange(0, 8)[None, :]           # (BLOCK_K / 8, 8): K offsets of a step's x

    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    # the next step's words are loaded before this step's are used: two steps of weight in flight a
    # thread (the one-row form lets the pipeliner stage its loads instead: _gemv_row_sums)
    none = 0 * rw[None, :]                     # makes a scalar test a tensor mask (the interpreter's need)
    upcoming = tl.load(w_ptrs + first * (BLOCK_K // 8), mask=in_n[:, None] & (none + steps > 0), other=0)
    upcoming_u = upcoming
    if GATED:
        upcoming_u = tl.load(w2_ptrs + first * (BLOCK_K // 8), mask=in_n[:, None] & (none + steps > 0), other=0)
    for k in range(first, first + steps):
        v, upcoming, scale, minimum = _gemv_step(upcoming, w_ptrs, s_ptr + rn * ssn, z_ptr + rn * ssn, in_n, none, k,
                                                 first, steps, GROUP, SIGNED, ASYMMETRIC, BLOCK_N, BLOCK_K)
        v_u, scale_u, minimum_u = v, scale, minimum
        if GATED:
            v_u, upcoming_u, scale_u, minimum_u = _gemv_step(upcoming_u, w2_ptrs, s2_ptr + rn * ssn, z2_ptr + rn * ssn,
                                                             in_n, none, k, first, steps, GROUP, SIGNED, ASYMMETRIC,
                                                             BLOCK_N, BLOCK_K)
        for r in tl.static_range(BLOCK_M):
            row = tile_m * BLOCK_M + r
            ok = row + 0 * x_at < M          # a tensor mask: the interpreter takes no scalar one
            x = tl.load(a_ptr + row * sam + (k * BLOCK_K + x_at) * sak, mask=ok, other=0).to(tl.float32)
            x_sum = tl.sum(tl.sum(x, axis=1), axis=0)
            acc += tl.where(columns == r, _gemv_part(v, x, x_sum, scale, minimum, SIGNED, ASYMMETRIC)[:, None], 0.0)
            if GATED:
                acc_u += tl.where(columns == r,
                                  _gemv_part(v_u, x, x_sum, scale_u, minimum_u, SIGNED, ASYMMETRIC)[:, None], 0.0)
    return acc, acc_u


# One word of packed weight (nibbles 0..7 = K 8w .. 8w + 7, low first) to eight float32 v_j = C + q_j + e_j
# in 11 integer ops (the integer pipe is half the FMA pipe's rate, and bound the word form's 16): nibbles
# j and j + 4 lie 16 bits apart, so one lop3 puts both into a bfloat16 pair 128 + n (signed: n ^ 8, as
# _PAIRS_ASM); the pair's high half read as a float32 is 128 + n + low / 65536 (low: the other half's
# bits, 0x4300 + its nibble), and a prmt moves each low half up. C = 128 + 0x4300 / 65536 (+ 8 signed) is
# taken off through the sum of x; e_j < 16 / 65536 is the paired nibble's leftover, under half an ulp of
# a 16-bit result's worth of the product, so only 16-bit activations take this form.
_PAIRED_ASM = """{
.reg .b32 t1, t2, t3, p0, p1, p2, p3, mask, magic;
mov.b32 mask, 0x000F000F;
mov.b32 magic, MAGIC;
shr.u32 t1, $8, 4;
shr.u32 t2, $8, 8;
shr.u32 t3, $8, 12;
lop3.b32 p0, $8, mask, magic, LUT;
lop3.b32 p1, t1, mask, magic, LUT;
lop3.b32 p2, t2, mask, magic, LUT;
lop3.b32 p3, t3, mask, magic, LUT;
prmt.b32 $0, p0, p1, 0x1054;
prmt.b32 $1, p1, p0, 0x1054;
prmt.b32 $2, p2, p3, 0x1054;
prmt.b32 $3, p3, p2, 0x1054;
mov.b32 $4, p0;
mov.b32 $5, p1;
mov.b32 $6, p2;
mov.b32 $7, p3;
}"""
PAIRED_VALUES = tl.constexpr(_PAIRED_ASM.replace("MAGIC", "0x43004300").replace("LUT", "0xEA"))
PAIRED_VALUES_SIGNED = tl.constexpr(_PAIRED_ASM.replace("MAGIC", "0x43084308").replace("LUT", "0x6A"))
PAIRED_BIAS = tl.constexpr(128.0 + 0x4300 / 65536)     # C, unsigned (signed: 8 more)


@triton.jit
def _paired_values(words, SIGNED: tl.constexpr):
    """The eight v_j = C + q_j + e_j of each word (_PAIRED_ASM), float32; compiled only."""
    return tl.inline_asm_elementwise(
        PAIRED_VALUES_SIGNED if SIGNED else PAIRED_VALUES, "=r,=r,=r,=r,=r,=r,=r,=r,r", [words],
        dtype=(tl.float32, tl.float32, tl.float32, tl.float32, tl.float32, tl.float32, tl.float32, tl.float32),
        is_pure=True, pack=1)


@triton.jit
def _row_step(w_ptrs, s_ptrs, z_ptrs, k, group, x, x_sums, SIGNED: tl.constexpr, ASYMMETRIC: tl.constexpr,
              PAIRED: tl.constexpr, BIAS: tl.constexpr, UNIT: tl.constexpr, BLOCK_N: tl.constexpr, G: tl.constexpr,
              WPG: tl.constexpr, BLOCK_K: tl.constexpr):
    """One weight's (BLOCK_N, G, WPG) per-word sums of K step k of the one-row gemv (_gemv_row_sums)."""
    words = tl.reshape(tl.load(w_ptrs + k * (BLOCK_K // 8)), (BLOCK_N, G, WPG))
    scale = widen(tl.load(s_ptrs + group), tl.float32)
    offset = -BIAS * scale
    if ASYMMETRIC:
        offset += widen(tl.load(z_ptrs + group), tl.float32)
    if PAIRED:
        v0, v1, v2, v3, v4, v5, v6, v7 = _paired_values(words, SIGNED)
    else:
        v0, v1, v2, v3, v4, v5, v6, v7 = _word_values(words, SIGNED)
    v = tl.reshape(tl.join(tl.join(tl.join(v0, v4), tl.join(v2, v6)), tl.join(tl.join(v1, v5), tl.join(v3, v7))),
                   (BLOCK_N, G, WPG, 8))
    return tl.sum(v * x[None, :, :, :], 3) * (UNIT * scale)[:, :, None] + offset[:, :, None] * x_sums[None, :, :]


@triton.jit
def _gemv_row_sums(a_ptr, q_ptr, s_ptr, z_ptr, q2_ptr, s2_ptr, z2_ptr, rn, in_n, row, sam, sak, sqn, ssn, first, steps,
                   DOT: tl.constexpr, GROUP: tl.constexpr, SIGNED: tl.constexpr, ASYMMETRIC: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr, GATED: tl.constexpr):
    """_gemv_sums of one row of x, (BLOCK_N, 1). A K step spans G = BLOCK_K / GROUP whole groups (or lies in
    one); its words are loaded (BLOCK_N, BLOCK_K / 8), so that the threads spread along K and a thread's x
    serves all its weight rows, and the loop's loads are staged by the pipeliner (tl.range's STAGES,
    cp.async through shared memory: on the H200 the manual one-step prefetch held 188 registers a
    thread and kept too little in flight). Rows past N are clamped to row 0 rather than masked (the
    store masks them), so that the scale loads stay unmasked vectors the pipeliner can stage. Each
    step sums v * x over a word's eight nibbles in a thread, then applies the word's group scale:
    sum(q x) s + m sum(x) = s (sum(v x) - C sum(x)) + m sum(x), kept per word, summed once after the
    loop. GATED: the second weight's sums too, from the same loads of x."""
    G: tl.constexpr = BLOCK_K // GROUP if BLOCK_K >= GROUP else 1
    WPG: tl.constexpr = BLOCK_K // 8 // G
    PAIRED: tl.constexpr = COMPILED and (DOT == tl.bfloat16 or DOT == tl.float16)
    if PAIRED:
        bias: tl.constexpr = PAIRED_BIAS + (8.0 if SIGNED else 0.0)
        unit: tl.constexpr = 1.0
    else:   # _word_values: v = 1 + n / 16
        bias: tl.constexpr = 24.0 if SIGNED else 16.0
        unit: tl.constexpr = 16.0
    rows = tl.where(in_n, rn, 0)
    rg = tl.arange(0, G)
    w_at = rows[:, None] * (sqn // 4) + tl.arange(0, BLOCK_K // 8)[None, :]
    s_at = rows[:, None] * ssn + rg[None, :]                                  # (BLOCK_N, G)
    x_at = 8 * (rg[:, None, None] * WPG + tl.arange(0, WPG)[None, :, None]) + tl.arange(0, 8)[None, None, :]
    x_ptrs = a_ptr + row * sam + x_at * sak                                   # (G, WPG, 8)
    acc = tl.zeros((BLOCK_N, G, WPG), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_N, G, WPG), dtype=tl.float32)
    for k in tl.range(first, first + steps, num_stages=STAGES):
        group = (k * BLOCK_K) // GROUP
        x = widen(tl.load(x_ptrs + k * BLOCK_K * sak), tl.float32)
        x_sums = tl.sum(x, 2)
        acc += _row_step(q_ptr.to(tl.pointer_type(tl.int32)) + w_at, s_ptr + s_at, z_ptr + s_at, k, group, x, x_sums,
                         SIGNED, ASYMMETRIC, PAIRED, bias, unit, BLOCK_N, G, WPG, BLOCK_K)
        if GATED:
            acc_u += _row_step(q2_ptr.to(tl.pointer_type(tl.int32)) + w_at, s2_ptr + s_at, z2_ptr + s_at, k, group, x,
                               x_sums, SIGNED, ASYMMETRIC, PAIRED, bias, unit, BLOCK_N, G, WPG, BLOCK_K)
    return tl.sum(tl.sum(acc, 2), 1)[:, None], tl.sum(tl.sum(acc_u, 2), 1)[:, None]
