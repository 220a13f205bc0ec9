"""W4A16: x @ W.T with W a grouped int4 QuantizedTensor, dequantized in registers.

The weight never exists in memory as floats: each program loads a (BLOCK_K / 2, BLOCK_N) tile of
packed bytes (qweight [N, K / 2], byte j of a row holding q[2j] in its low nibble, q[2j + 1] in
its high one), the scale (and minimum) of the tile's group for each of its BLOCK_N columns, and
forms w = q * scale (+ minimum) in float32, rounded to x's dtype for the dot. The low nibbles
multiply the even columns of the x tile and the high nibbles the odd ones: two dots of BLOCK_K / 2
over x read at stride 2, so no interleave of the unpacked nibbles is needed (x's tile is small and
stays in cache). BLOCK_K divides the group size, so a tile of K lies in one group.

Split K, the epilogue and its fixed-order partials are those of the float kernel (fused.py).
"""
import triton
import triton.language as tl

from ..elementwise.casts import narrow, widen
from ..softmax.rows import float_argument
from .fused import epilogue
from .kernel import _dot_operand, _grouped_tile


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
def int4_step(acc, a_even, a_odd, q_ptrs, s_ptrs, z_ptrs, in_n, k, DOT: tl.constexpr, PRECISION: tl.constexpr,
              GROUP: tl.constexpr, SIGNED: tl.constexpr, ASYMMETRIC: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc += A @ W over K step k: the step's packed (BLOCK_K / 2, BLOCK_N) bytes at q_ptrs, its
    group's scale (and minimum) of each column at s_ptrs (z_ptrs) + group, A's even and odd columns
    given (loaded by the caller, who may multiply them by several weights)."""
    group = (k * BLOCK_K) // GROUP
    scale = widen(tl.load(s_ptrs + group, mask=in_n, other=0), tl.float32)
    minimum = scale
    if ASYMMETRIC:
        minimum = widen(tl.load(z_ptrs + group, mask=in_n, other=0), tl.float32)
    packed = tl.load(q_ptrs + k * (BLOCK_K // 2), mask=in_n[None, :], other=0)
    acc = tl.dot(a_even, _dequantized(packed & 0xF, scale, minimum, SIGNED, ASYMMETRIC, DOT), acc,
                 input_precision=PRECISION)
    return tl.dot(a_odd, _dequantized(packed >> 4, scale, minimum, SIGNED, ASYMMETRIC, DOT), acc,
                  input_precision=PRECISION)


@triton.jit(do_not_specialize=["alpha_bits", "beta_bits"])
def int4_matmul_kernel(
    a_ptr, q_ptr, s_ptr, z_ptr, c_ptr, part_ptr, bias_ptr, res_ptr, M, N, K,
    sam, sak, sqn, ssn, sbias_m, sbias_n, sres_m, sres_n, alpha_bits, beta_bits,
    DOT: tl.constexpr, PRECISION: tl.constexpr, GROUP: tl.constexpr, SIGNED: tl.constexpr, ASYMMETRIC: tl.constexpr, WIDE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_RES: tl.constexpr,
):
    """Grid: (tiles of M x N, SPLIT_K). sqn, ssn: the row strides of qweight (bytes) and of the
    scales and minima (groups); both are read at unit stride along K."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    tile_m, tile_n = _grouped_tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rh = tl.arange(0, BLOCK_K // 2)
    if WIDE:
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
        rh = rh.to(tl.int64)
    in_m = (rm < M)[:, None]
    in_n = rn < N
    even_ptrs = a_ptr + rm[:, None] * sam + (2 * rh[None, :]) * sak
    q_ptrs = q_ptr + rn[None, :] * sqn + rh[:, None]

    total = K // BLOCK_K
    per = tl.cdiv(total, SPLIT_K)
    first = split * per
    steps = tl.minimum(per, total - first)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(first, first + steps):
        a_even = _dot_operand(tl.load(even_ptrs + k * BLOCK_K * sak, mask=in_m, other=0), DOT)
        a_odd = _dot_operand(tl.load(even_ptrs + (k * BLOCK_K + 1) * sak, mask=in_m, other=0), DOT)
        acc = int4_step(acc, a_even, a_odd, q_ptrs, s_ptr + rn * ssn, z_ptr + rn * ssn, in_n, k, DOT, PRECISION,
                        GROUP, SIGNED, ASYMMETRIC, BLOCK_K)

    mask = in_m & in_n[None, :]
    at = rm[:, None] * N + rn[None, :]
    if SPLIT_K == 1:
        y = epilogue(acc, acc, 0, rm[:, None], rn[None, :], mask, bias_ptr, 0, sbias_m, sbias_n, res_ptr, 0, sres_m,
                     sres_n, float_argument(alpha_bits).to(tl.float32), float_argument(beta_bits).to(tl.float32),
                     tl.float32, HAS_BIAS, ACTIVATION, HAS_RES, False)
        tl.store(c_ptr + at, narrow(y, c_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(part_ptr + split * M * N + at, acc, mask=mask)
