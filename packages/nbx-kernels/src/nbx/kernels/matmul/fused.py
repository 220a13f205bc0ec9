"""The product with its epilogue fused into the store, split over K where a few tiles cover M x N.

    y = activation(alpha * (A @ B) + bias) + beta * residual            (plain)
    y = activation(A @ B) * (A @ G) + beta * residual                   (GATED: SwiGLU's pair)

A is (batch, M, K), B and G (batch, K, N) read through element strides (linear's weight [N, K] is
B read through its transpose, in place); bias and residual are read through strides over
(batch, M, N), 0 where they broadcast (a bias [N] has row stride 0, a per-row bias [M, N] does
not). The epilogue computes in the accumulator's type (float32; float64 for float64) and rounds
once to C's dtype, as the reference does.

Split K (SPLIT_K > 1): decode rows (M of 1 to 64) give a few tiles, too few programs to stream
the weight at the memory's bandwidth. Program (tile, s) then sums K steps s * per .. (s + 1) * per
into a float32 partial, and `split_epilogue_kernel` adds the SPLIT_K partials of each element in
the order s = 0, 1, ... (no atomics: the same bits every run) and applies the epilogue.
"""
import triton
import triton.language as tl

from ..dependent_launch import wait_for_predecessor
from ..elementwise import activations as act
from ..elementwise.casts import narrow, widen
from ..rows import float_argument
from .kernel import SCALE_BLOCK, _grouped_tile, gemv_k_steps, k_steps, normed_k_steps, rms_scale, tile_offsets


ROW_BIAS = tl.constexpr("row")   # HAS_BIAS of a bias whose row stride is 0 (epilogue)
ROW = "row"                      # the same, on the host


def bias_form(strides) -> bool | str:
    """HAS_BIAS of a bias read through (batch, row, column) strides (None: no bias)."""
    return False if strides is None else ROW if strides[1] == 0 else True


@triton.jit
def _activate(y, ACTIVATION: tl.constexpr):
    if ACTIVATION == "relu":
        y = act.relu(y)
    elif ACTIVATION == "silu":
        y = act.silu(y)
    elif ACTIVATION == "gelu":
        y = act.gelu(y)
    elif ACTIVATION == "gelu_tanh":
        y = act.gelu_tanh(y)
    return y


@triton.jit
def _addend(ptr, batch, rm, rn, s0, sm, sn, mask, ACC: tl.constexpr):
    return widen(tl.load(ptr + batch * s0 + rm * sm + rn * sn, mask=mask, other=0), ACC)


@triton.jit
def epilogue(acc, acc_g, batch, rm, rn, mask, N, bias_ptr, sbias0, sbias_m, sbias_n, res_ptr, sres0, sres_m, sres_n,
             alpha, beta, ACC: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
             HAS_RES: tl.constexpr, GATED: tl.constexpr):
    """The fused epilogue on accumulators at rows rm and columns rn (shaped to broadcast) of N
    columns. HAS_BIAS ROW_BIAS: a bias broadcast over the rows (a bias [N]), read as the vector it
    is: read as a [BLOCK_M, BLOCK_N] tile at unit stride, Triton loads it vectorized and converts it
    to the accumulator's layout through shared memory (32 KiB more at 128 x 256 on sm_90, which put
    a certified three-stage tile past the H200's limit)."""
    if ACC == tl.int32:  # int8 products: the exact sums alone
        y = acc
    elif GATED:
        y = _activate(acc, ACTIVATION) * acc_g
    else:
        y = acc * alpha
        if HAS_BIAS == ROW_BIAS:
            y += widen(tl.load(bias_ptr + batch * sbias0 + rn * sbias_n, mask=rn < N, other=0), ACC)
        elif HAS_BIAS:
            y += _addend(bias_ptr, batch, rm, rn, sbias0, sbias_m, sbias_n, mask, ACC)
        y = _activate(y, ACTIVATION)
    if HAS_RES:
        y += beta * _addend(res_ptr, batch, rm, rn, sres0, sres_m, sres_n, mask, ACC)
    return y


@triton.jit
def scaled(acc, xs_ptr, ws_ptr, rm, rn, M, N, sxs, sws, SCALED: tl.constexpr):
    """SCALED (float8 operands): acc times x's scale of each row and the weight's of each column
    (stride 0: one scale for the tensor)."""
    if SCALED:
        acc = acc * tl.load(xs_ptr + rm * sxs, mask=rm < M, other=0)[:, None]
        acc = acc * tl.load(ws_ptr + rn * sws, mask=rn < N, other=0)[None, :]
    return acc


@triton.jit(do_not_specialize=["alpha_bits", "beta_bits", "eps_bits"])
def fused_matmul_kernel(
    a_ptr, b_ptr, g_ptr, c_ptr, part_ptr, bias_ptr, res_ptr, xs_ptr, ws_ptr, nw_ptr, sq_ptr, M, N, K,
    sa0, sam, sak, sb0, sbk, sbn, sbias0, sbias_m, sbias_n, sres0, sres_m, sres_n, sxs, sws, sxk, swk,
    alpha_bits, beta_bits, eps_bits,
    DOT: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr, EVEN_K: tl.constexpr, WIDE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_RES: tl.constexpr,
    GATED: tl.constexpr, SCALED: tl.constexpr, BLOCK_SCALED: tl.constexpr, NORM: tl.constexpr,
    GEMV: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """Grid: (batch * tiles of M x N, SPLIT_K). GEMV: the decode rows' form, sums on the CUDA cores
    (gemv_k_steps; unsplit, not SCALED nor BLOCK_SCALED: the tuner offers it so). C is contiguous (batch, M, N); the partials are
    (2 if GATED else 1, batch, SPLIT_K, M, N) of ACC. NORM: A is rms_norm(A, weight nw [K], eps)
    (normed_k_steps: the rows' rstd applied to the accumulators once K is summed; split, each
    split's sums of squares go to sq [SPLIT_K, M], written by the tiles of column 0, for the split
    epilogue)."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    batch = (pid // tiles).to(tl.int64)
    tile_m, tile_n = _grouped_tile(pid % tiles, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    a_ptr += batch * sa0
    b_ptr += batch * sb0
    g_ptr += batch * sb0

    rm, rn, rk = tile_offsets(tile_m, tile_n, BLOCK_M, BLOCK_N, BLOCK_K, WIDE)
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    in_m = (rm < M)[:, None]
    in_n = (rn < N)[None, :]
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    g_ptrs = g_ptr + rk[:, None] * sbk + rn[None, :] * sbn

    total = tl.cdiv(K, BLOCK_K)
    per = tl.cdiv(total, SPLIT_K)
    first = split * per
    steps = tl.minimum(per, total - first)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    xs_ptrs = xs_ptr + rm[:, None] * sxs                 # block-scaled: x's scales [rows, K blocks]
    ws_ptrs = ws_ptr + (rn[None, :] // SCALE_BLOCK) * sws  # and the weight's [N blocks, K blocks]
    if GEMV:
        acc, acc_g, squares = gemv_k_steps(a_ptr, b_ptr, g_ptr, nw_ptr, rm, rn, rk, M, N, K, first, steps, sam, sak,
                                           sbk, sbn, ACC, EVEN_K, GATED, NORM, BLOCK_M, BLOCK_N, BLOCK_K)
    elif NORM:
        acc, acc_g, squares = normed_k_steps(acc, acc_g, a_ptrs, nw_ptr + rk, b_ptrs, g_ptrs, in_m, in_n, rk, first,
                                             steps, K, sak, sbk, DOT, ACC, PRECISION, EVEN_K, GATED, BLOCK_M,
                                             BLOCK_K)
    else:
        acc, acc_g = k_steps(acc, acc_g, a_ptrs, b_ptrs, g_ptrs, in_m, in_n, rk, first, steps, K, sak, sbk,
                             xs_ptrs, ws_ptrs, sxk, swk, DOT, ACC, PRECISION, EVEN_K, GATED, BLOCK_K, BLOCK_SCALED)
    if NORM:   # the rows' rstd once K is summed (the gemv form runs unsplit)
        if SPLIT_K == 1:
            rstd = rms_scale(squares, K, float_argument(eps_bits).to(ACC))[:, None]
            acc = acc * rstd
            acc_g = acc_g * rstd
        elif tile_n == 0:
            tl.store(sq_ptr + split * M + rm, squares, mask=rm < M)
    acc = scaled(acc, xs_ptr, ws_ptr, rm, rn, M, N, sxs, sws, SCALED)  # per split: the scales distribute

    mask = in_m & in_n
    at = rm[:, None] * N + rn[None, :]
    if SPLIT_K == 1:
        y = epilogue(acc, acc_g, batch, rm[:, None], rn[None, :], mask, N, bias_ptr, sbias0, sbias_m, sbias_n,
                     res_ptr, sres0, sres_m, sres_n, float_argument(alpha_bits).to(ACC),
                     float_argument(beta_bits).to(ACC), ACC, HAS_BIAS, ACTIVATION, HAS_RES, GATED)
        tl.store(c_ptr + batch * M * N + at, narrow(y, c_ptr.dtype.element_ty), mask=mask)
    else:
        part = part_ptr + (batch * SPLIT_K + split) * M * N + at
        tl.store(part, acc, mask=mask)
        if GATED:
            tl.store(part + tl.num_programs(0) // tiles * SPLIT_K * M * N, acc_g, mask=mask)


@triton.jit(do_not_specialize=["alpha_bits", "beta_bits", "eps_bits"])
def split_epilogue_kernel(
    part_ptr, c_ptr, bias_ptr, res_ptr, sq_ptr, M, N, K, BATCH,
    sbias0, sbias_m, sbias_n, sres0, sres_m, sres_n, alpha_bits, beta_bits, eps_bits,
    ACC: tl.constexpr, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr, HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr, HAS_RES: tl.constexpr, GATED: tl.constexpr, NORM: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """Grid: (cdiv(BATCH * M * N, BLOCK),): the partials of each element summed in split order
    (NORM: its row's sums of squares too, in the same order, then scaled by the row's rstd)."""
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mn = M * N
    mask = i < BATCH * mn
    batch = i // mn
    at = i % mn
    rm = at // N
    rn = at % N
    base = part_ptr + batch * SPLIT_K * mn + at
    gate_half = BATCH * SPLIT_K * mn
    acc = tl.zeros((BLOCK,), dtype=ACC)
    acc_g = tl.zeros((BLOCK,), dtype=ACC)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(base + s * mn, mask=mask, other=0)
        if GATED:
            acc_g += tl.load(base + gate_half + s * mn, mask=mask, other=0)
    if NORM:
        squares = tl.zeros((BLOCK,), dtype=ACC)
        for s in tl.static_range(SPLIT_K):
            squares += tl.load(sq_ptr + s * M + rm, mask=mask, other=0)
        rstd = rms_scale(squares, K, float_argument(eps_bits).to(ACC))
        acc = acc * rstd
        acc_g = acc_g * rstd
    y = epilogue(acc, acc_g, batch, rm, rn, mask, N, bias_ptr, sbias0, sbias_m, sbias_n, res_ptr, sres0, sres_m,
                 sres_n, float_argument(alpha_bits).to(ACC), float_argument(beta_bits).to(ACC), ACC, HAS_BIAS,
                 ACTIVATION, HAS_RES, GATED)
    tl.store(c_ptr + i, narrow(y, c_ptr.dtype.element_ty), mask=mask)
