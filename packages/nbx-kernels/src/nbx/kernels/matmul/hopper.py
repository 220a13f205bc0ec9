"""The fused product through tensor descriptors (TMA on Hopper), in persistent programs.

PROGRAMS programs walk the tiles of C in the grouped order of `kernel._grouped_tile` (GROUP_M
tile rows at a time, so the tiles in flight share their A rows and B columns in L2), program p
taking tiles p, p + PROGRAMS, ... (`tl.range(..., flatten=True)` lets Triton pipeline the K steps
of one tile into the next). Every tile of A, B (and G) is loaded through a device-side tensor
descriptor (`tl.make_tensor_descriptor`: on sm_90 a TMA copy into shared memory, the operand
wgmma reads; its descriptor lives in global scratch, which Triton asks of the allocator nbx's
CUDA driver sets: triton_driver.scratch_allocator, nbx memory) and C is stored through one.
Out-of-range rows and columns of a tile read as zeros and are not written: no masks.

Descriptors need a unit-stride last dim and 16-byte aligned bases and row strides: A read along K
(layout "n?"), B along K (a linear weight [N, K], "nt") or along N ("nn"), C contiguous, no batch
(`eligible` in epilogue.py decides, and the launch key carries it). WARP_SPECIALIZE asks Triton to
split the K loop into producer (TMA) and consumer (wgmma) warps where it can; whether that is
faster is measured per key, as every other parameter. The epilogue is fused.epilogue, the same
as the pointer kernel's; bias and residual are read through pointers (they may be broadcast).

TF32 (B_ROUNDED): rounding a tile to TF32 (kernel.round_tf32) takes it out of shared memory into
registers. A is read from registers by wgmma anyway, so its rounding costs a few integer ops; a
rounded B tile would be written back to a new shared buffer every step, which on sm_90 made each
wgmma wait for the last one (warp_group_dot_wait 0 in the TTGIR: no overlap of K steps). So B is
rounded once before the product (`tf32_round_kernel`, one pass over the weight) and read as it
is: the same products, the K loop as asynchronous as bfloat16's.

A float32 (int32) C tile staged whole for its descriptor store takes 128 KiB at 128 x 256, which
left a 128 x 256 x 32 float32 tile no room for its stages: such tiles are stored in two halves
through one buffer of half the size (HALF_STORE; 192 KiB in all at three stages on sm_90, where the
whole tile asked 272). 16-bit outputs store the whole tile, as certified.
"""
import triton
import triton.language as tl

from ..elementwise.casts import narrow
from ..rows import float_argument
from .fused import epilogue, scaled
from .kernel import _dot_operand, _grouped_tile, _tf32_operand, round_tf32


@triton.jit
def _b_tile(desc, tile_n, k, B_KMAJOR: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The (BLOCK_K, BLOCK_N) tile of B at step k, from a K-major ([N, K]) or an N-major ([K, N]) matrix."""
    if B_KMAJOR:
        b = desc.load([tile_n * BLOCK_N, k * BLOCK_K]).T
    else:
        b = desc.load([k * BLOCK_K, tile_n * BLOCK_N])
    return b


@triton.jit(do_not_specialize=["alpha_bits", "beta_bits"])
def tma_matmul_kernel(
    a_ptr, b_ptr, g_ptr, c_ptr, bias_ptr, res_ptr, xs_ptr, ws_ptr, M, N, K, sam, sb,
    sbias_m, sbias_n, sres_m, sres_n, sxs, sws, alpha_bits, beta_bits,
    DOT: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr, B_KMAJOR: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PROGRAMS: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    HAS_RES: tl.constexpr, GATED: tl.constexpr, SCALED: tl.constexpr, B_ROUNDED: tl.constexpr,
    HALF_STORE: tl.constexpr,
):
    """Grid: (min(tiles, PROGRAMS),). sb: B's row stride ([N, K]: along N; [K, N]: along K).
    B_ROUNDED: B (and G) hold TF32 values already (tf32_round_kernel): only A is rounded here.
    HALF_STORE: C is staged and stored in two halves of BLOCK_N / 2 columns (tuning.HALF_STORE_BYTES)."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[sam, 1], block_shape=[BLOCK_M, BLOCK_K])
    if B_KMAJOR:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[sb, 1], block_shape=[BLOCK_N, BLOCK_K])
        g_desc = tl.make_tensor_descriptor(g_ptr, shape=[N, K], strides=[sb, 1], block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[sb, 1], block_shape=[BLOCK_K, BLOCK_N])
        g_desc = tl.make_tensor_descriptor(g_ptr, shape=[K, N], strides=[sb, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1],
                                       block_shape=[BLOCK_M, BLOCK_N // (1 + HALF_STORE)])
    alpha = float_argument(alpha_bits).to(ACC)
    beta = float_argument(beta_bits).to(ACC)

    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    steps = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), tiles, PROGRAMS, flatten=True, warp_specialize=WARP_SPECIALIZE):
        tile_m, tile_n = _grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
        acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
        for k in range(steps):
            a = _tf32_operand(_dot_operand(a_desc.load([tile_m * BLOCK_M, k * BLOCK_K]), DOT), PRECISION)
            b = _dot_operand(_b_tile(b_desc, tile_n, k, B_KMAJOR, BLOCK_N, BLOCK_K), DOT)
            if not B_ROUNDED:
                b = _tf32_operand(b, PRECISION)
            acc = tl.dot(a, b, acc, input_precision=PRECISION, out_dtype=ACC)
            if GATED:
                g = _dot_operand(_b_tile(g_desc, tile_n, k, B_KMAJOR, BLOCK_N, BLOCK_K), DOT)
                if not B_ROUNDED:
                    g = _tf32_operand(g, PRECISION)
                acc_g = tl.dot(a, g, acc_g, input_precision=PRECISION, out_dtype=ACC)
        rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (rm < M)[:, None] & (rn < N)[None, :]
        acc = scaled(acc, xs_ptr, ws_ptr, rm, rn, M, N, sxs, sws, SCALED)
        y = epilogue(acc, acc_g, 0, rm[:, None], rn[None, :], mask, N, bias_ptr, 0, sbias_m, sbias_n, res_ptr, 0,
                     sres_m, sres_n, alpha, beta, ACC, HAS_BIAS, ACTIVATION, HAS_RES, GATED)
        y = narrow(y, c_ptr.dtype.element_ty)
        if HALF_STORE:   # one staging buffer of half the tile, reused by the two stores
            y0, y1 = tl.split(tl.permute(tl.reshape(y, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            c_desc.store([tile_m * BLOCK_M, tile_n * BLOCK_N], y0)
            c_desc.store([tile_m * BLOCK_M, tile_n * BLOCK_N + BLOCK_N // 2], y1)
        else:
            c_desc.store([tile_m * BLOCK_M, tile_n * BLOCK_N], y)


@triton.jit
def tf32_round_kernel(src_ptr, dst_ptr, ROWS, COLS, stride, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Grid: (cdiv(ROWS, BLOCK_R), cdiv(COLS, BLOCK_C)): dst = round_tf32(src) over ROWS rows of
    COLS unit-stride elements, both with row stride `stride` (dst keeps src's descriptor layout)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    at = rows.to(tl.int64)[:, None] * stride + cols[None, :]
    mask = (rows < ROWS)[:, None] & (cols < COLS)[None, :]
    tl.store(dst_ptr + at, round_tf32(tl.load(src_ptr + at, mask=mask, other=0.0)), mask=mask)
