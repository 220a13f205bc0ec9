"""The tiled matrix product C[b] = A[b] @ B[b].

One program computes a BLOCK_M x BLOCK_N tile of one batch entry's C, walking K in steps of
BLOCK_K and accumulating with `tl.dot` (float32; float64 for float64 products). The programs of a
batch entry run in groups of GROUP_M tile rows, so that the tiles running together share the rows
of A and the columns of B they read (the L2 serves them once). A and B are read through element
strides: a transposed operand is read in place, and a broadcast batch dim has stride 0. The batch
index is split over up to three batch dims (the wrapper merges what merges); C is contiguous.

Operands are converted to the dot's element type before `tl.dot` (a float16 operand of a float32
product widened exactly). Triton's interpreter multiplies bfloat16 blocks by their integer bits,
so there a bfloat16 product is computed from operands widened to float32: the same products, since
float32 holds a product of two bfloat16 values exactly. The store rounds as the reference does
(casts.narrow).
"""
import triton
import triton.language as tl

from ..elementwise.casts import COMPILED, narrow, widen


@triton.jit
def _dot_operand(x, DOT: tl.constexpr):
    """A loaded tile in the dot's element type (float32 for bfloat16 and float8 in the
    interpreter, whose numpy has neither: float32 holds their products exactly)."""
    if DOT == tl.bfloat16 or DOT == tl.float8e4nv or DOT == tl.float8e5:
        if COMPILED:  # both operands are of DOT (no other dtype promotes to it; scaled fp8 takes one type)
            y = x
        else:
            y = widen(x, tl.float32)
    else:
        y = widen(x, DOT)
    return y


@triton.jit
def _grouped_tile(t, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Tile t of a batch entry as (tile row, tile column), GROUP_M tile rows a group, column-major
    within the group."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (t // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (t % per_group) % group_rows
    tile_n = (t % per_group) // group_rows
    return tile_m, tile_n


@triton.jit
def tile_offsets(tile_m, tile_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 WIDE: tl.constexpr):
    """The rows and columns of tile (tile_m, tile_n) and the K offsets of a step (int64 when WIDE)."""
    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    if WIDE:
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
        rk = rk.to(tl.int64)
    return rm, rn, rk


@triton.jit
def _batch_offset(b, D1, D2, s0, s1, s2):
    """The element offset of batch entry b (int64) over batch dims (D0, D1, D2) with strides s."""
    b = b.to(tl.int64)
    return (b // (D1 * D2)) * s0 + ((b // D2) % D1) * s1 + (b % D2) * s2


@triton.jit
def load_operand(ptrs, mask, DOT: tl.constexpr):
    """A tile of an operand, 0 where masked, in the dot's element type (_dot_operand). The
    interpreter cannot cast the fill value to float8: its float8 tiles are widened, then filled."""
    if (DOT == tl.float8e4nv or DOT == tl.float8e5) and not COMPILED:
        y = tl.where(mask, _dot_operand(tl.load(ptrs, mask=mask), DOT), 0.0)
    elif DOT == tl.int8:
        y = tl.load(ptrs, mask=mask, other=0)
    else:
        y = _dot_operand(tl.load(ptrs, mask=mask, other=0.0), DOT)
    return y


@triton.jit
def round_tf32(x):
    """float32 x rounded to TF32 (10 mantissa bits), to nearest with ties away from zero, as
    nbx.core.ops.products.round_tf32: the operands a "tf32" product multiplies exactly, the same
    on every device (the tensor cores then drop only zero bits)."""
    bits = x.to(tl.uint32, bitcast=True)
    rounded = ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)
    return tl.where((bits & 0x7F800000) != 0x7F800000, rounded, x)   # infinities and NaNs kept


@triton.jit
def _tf32_operand(x, PRECISION: tl.constexpr):
    if PRECISION == "tf32":
        x = round_tf32(x)
    return x


SCALE_BLOCK = tl.constexpr(128)   # block-scaled float8: one scale per 128 of K (x) and 128 x 128 (weight)


@triton.jit
def _k_masks(in_m, in_n, rk, K, k, EVEN_K: tl.constexpr, BLOCK_K: tl.constexpr):
    """The A and B masks of K step k (rows and columns only where K divides into whole steps)."""
    if EVEN_K:
        a_mask = in_m
        b_mask = in_n
    else:
        k_left = K - k * BLOCK_K
        a_mask = in_m & (rk[None, :] < k_left)
        b_mask = (rk[:, None] < k_left) & in_n
    return a_mask, b_mask


@triton.jit
def _k_step(acc, acc_g, a, b_ptrs, g_ptrs, b_mask, in_m, in_n, k, xs_ptrs, ws_ptrs, sxk, swk,
            DOT: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr, GATED: tl.constexpr,
            BLOCK_K: tl.constexpr, BLOCK_SCALED: tl.constexpr):
    """One K step's products of the loaded A tile a: B's (and G's) tile loaded and multiplied in."""
    b = _tf32_operand(load_operand(b_ptrs, b_mask, DOT), PRECISION)
    if BLOCK_SCALED:
        block = (k * BLOCK_K) // SCALE_BLOCK
        part = tl.dot(a, b, tl.zeros_like(acc), input_precision=PRECISION, out_dtype=ACC)
        acc += part * tl.load(xs_ptrs + block * sxk, mask=in_m, other=0) * \
            tl.load(ws_ptrs + block * swk, mask=in_n, other=0)
    else:
        acc = tl.dot(a, b, acc, input_precision=PRECISION, out_dtype=ACC)
    if GATED:
        g = _tf32_operand(load_operand(g_ptrs, b_mask, DOT), PRECISION)
        acc_g = tl.dot(a, g, acc_g, input_precision=PRECISION, out_dtype=ACC)
    return acc, acc_g


@triton.jit
def k_steps(acc, acc_g, a_ptrs, b_ptrs, g_ptrs, in_m, in_n, rk, first, steps, K, sak, sbk,
            xs_ptrs, ws_ptrs, sxk, swk,
            DOT: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr, EVEN_K: tl.constexpr,
            GATED: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_SCALED: tl.constexpr):
    """acc += A @ B over K steps first .. first + steps of BLOCK_K (the pointers at step 0); GATED:
    acc_g += A @ G too, from the same A tile (G read with B's strides). PRECISION: tl.dot's
    input_precision (None: Triton's default for the operand type). BLOCK_SCALED (float8 with
    DeepSeek-V3's scales; BLOCK_K divides SCALE_BLOCK): each step's product is scaled by x's scale
    of its rows and K block (xs_ptrs [BLOCK_M, 1] + block * sxk) and the weight's of its column and
    K block (ws_ptrs [1, BLOCK_N] + block * swk) before it is added."""
    a_ptrs += first * BLOCK_K * sak
    b_ptrs += first * BLOCK_K * sbk
    g_ptrs += first * BLOCK_K * sbk
    for k in range(first, first + steps):
        a_mask, b_mask = _k_masks(in_m, in_n, rk, K, k, EVEN_K, BLOCK_K)
        a = _tf32_operand(load_operand(a_ptrs, a_mask, DOT), PRECISION)
        acc, acc_g = _k_step(acc, acc_g, a, b_ptrs, g_ptrs, b_mask, in_m, in_n, k, xs_ptrs, ws_ptrs, sxk, swk,
                             DOT, ACC, PRECISION, GATED, BLOCK_K, BLOCK_SCALED)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk
        g_ptrs += BLOCK_K * sbk
    return acc, acc_g


@triton.jit
def normed_k_steps(acc, acc_g, a_ptrs, nw_ptrs, b_ptrs, g_ptrs, in_m, in_n, rk, first, steps, K, sak, sbk,
                   DOT: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr, EVEN_K: tl.constexpr,
                   GATED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """k_steps of A = rms_norm(x, w) (nw_ptrs: w [BLOCK_K] at step 0) without knowing the rows' rms
    yet: rms_norm(x) @ B = rstd * ((x * w) @ B), so the steps multiply x * w (rounded once to x's
    dtype) and return, with acc and acc_g, the sums of x**2 over this program's K steps (in ACC):
    the caller scales by rstd once they are complete. No extra pass over x and no extra latency:
    the squares come from the A tiles the product loads anyway."""
    a_ptrs += first * BLOCK_K * sak
    nw_ptrs += first * BLOCK_K
    b_ptrs += first * BLOCK_K * sbk
    g_ptrs += first * BLOCK_K * sbk
    squares = tl.zeros((BLOCK_M, BLOCK_K), dtype=ACC)
    # the weight's slice of the next step loaded a step ahead: too narrow (2 bytes a thread) for the
    # pipeliner's asynchronous copies, it would otherwise wait a memory latency every step
    w_next = tl.load(nw_ptrs, mask=rk < K - first * BLOCK_K, other=0.0)
    for k in range(first, first + steps):
        a_mask, b_mask = _k_masks(in_m, in_n, rk, K, k, EVEN_K, BLOCK_K)
        w = widen(w_next, ACC)
        nw_ptrs += BLOCK_K
        # past K masked; a split's last prefetch reads the next split's slice, unused
        w_next = tl.load(nw_ptrs, mask=rk < K - (k + 1) * BLOCK_K, other=0.0)
        x = widen(tl.load(a_ptrs, mask=a_mask, other=0.0), ACC)
        squares += x * x
        a = _tf32_operand(_dot_operand(narrow(x * w[None, :], a_ptrs.dtype.element_ty), DOT), PRECISION)
        acc, acc_g = _k_step(acc, acc_g, a, b_ptrs, g_ptrs, b_mask, in_m, in_n, k, a_ptrs, a_ptrs, 0, 0,
                             DOT, ACC, PRECISION, GATED, BLOCK_K, False)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk
        g_ptrs += BLOCK_K * sbk
    return acc, acc_g, tl.sum(squares, 1)


@triton.jit
def _within_k(mask, rk, K, k, EVEN_K: tl.constexpr, BLOCK_K: tl.constexpr):
    """mask ([rows, 1]) over K step k's BLOCK_K columns, those past K off (all on where K divides into
    whole steps)."""
    if EVEN_K:
        out = mask
    else:
        out = mask & (rk[None, :] < K - k * BLOCK_K)
    return out


GEMV_DEPTH = tl.constexpr(3)   # the gemv kernel's staged depth (linear_tuning.GEMV_STAGES)


@triton.jit
def _gemv_row_steps(a_ptr, b_ptr, g_ptr, nw_ptr, rn, rk, N, K, first, steps, sak, sbk, sbn,
                    ACC: tl.constexpr, EVEN_K: tl.constexpr, GATED: tl.constexpr, NORM: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """gemv_k_steps of one row of x (a_ptr at it): products kept [BLOCK_N, BLOCK_K], x a vector, so
    each step's tiles keep the layout they are loaded in (no 3-D broadcast to convert into). A step's
    addresses are worked out from k, not carried through the loop (a carried offset lost its
    contiguity: 2-byte loads on sm_90), and tl.range stages the loads GEMV_DEPTH deep (Triton takes a
    dot-less loop's depth from tl.range alone, not from the launch's num_stages)."""
    x_ptrs = a_ptr + rk * sak
    w_at = rn[:, None] * sbn + rk[None, :] * sbk
    in_n = (rn < N)[:, None]
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=ACC)
    acc_g = tl.zeros((BLOCK_N, BLOCK_K), dtype=ACC)
    squares = tl.zeros((BLOCK_K,), dtype=ACC)
    for k in tl.range(first, first + steps, num_stages=GEMV_DEPTH):
        if EVEN_K:
            x_mask = rk < BLOCK_K
            w_mask = in_n
        else:
            x_mask = rk < K - k * BLOCK_K
            w_mask = in_n & x_mask[None, :]
        x = widen(tl.load(x_ptrs + k * BLOCK_K * sak, mask=x_mask, other=0.0), ACC)
        if NORM:   # rms_norm(x) @ B = rstd * ((x * w) @ B), as normed_k_steps
            squares += x * x
            nw = widen(tl.load(nw_ptr + k * BLOCK_K + rk, mask=rk < K - k * BLOCK_K, other=0.0), ACC)
            x = widen(narrow(x * nw, a_ptr.dtype.element_ty), ACC)
        step_at = w_at + k * BLOCK_K * sbk
        acc += widen(tl.load(b_ptr + step_at, mask=w_mask, other=0.0), ACC) * x[None, :]
        if GATED:
            acc_g += widen(tl.load(g_ptr + step_at, mask=w_mask, other=0.0), ACC) * x[None, :]
    return tl.sum(acc, 1)[None, :], tl.sum(acc_g, 1)[None, :], tl.sum(squares[None, :], 1)


@triton.jit
def gemv_k_steps(a_ptr, b_ptr, g_ptr, nw_ptr, rm, rn, rk, M, N, K, first, steps, sam, sak, sbk, sbn,
                 ACC: tl.constexpr, EVEN_K: tl.constexpr, GATED: tl.constexpr, NORM: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The GEMV form of k_steps for decode rows: (acc, acc_g) [BLOCK_M, BLOCK_N] and the rows' sums
    of x**2 (NORM) over K steps first .. first + steps, on the CUDA cores. The weight's tile is read
    [BLOCK_N, BLOCK_K] (K fastest: a linear weight's rows, 16-byte loads) and the products are kept
    per (row, column, k) in registers, summed over k once after the loop: no per-step reduction
    across threads, so each step is loads and FMAs only (on the H200 this streams a 1 x 2048 x 2048
    bf16 weight at 1.5 TB/s where the split-K dot tiles and their epilogue launch reach 1.0)."""
    if BLOCK_M == 1:
        acc, acc_g, squares = _gemv_row_steps(a_ptr + rm * sam, b_ptr, g_ptr, nw_ptr, rn, rk, N, K, first, steps,
                                              sak, sbk, sbn, ACC, EVEN_K, GATED, NORM, BLOCK_N, BLOCK_K)
        return acc, acc_g, squares
    x_ptrs = a_ptr + rm[:, None] * sam + (first * BLOCK_K + rk)[None, :] * sak
    w_at = rn[:, None] * sbn + (first * BLOCK_K + rk)[None, :] * sbk
    in_m = (rm < M)[:, None]
    in_n = (rn < N)[:, None]
    acc3 = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=ACC)
    acc3_g = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=ACC)
    squares = tl.zeros((BLOCK_M, BLOCK_K), dtype=ACC)
    for k in tl.range(first, first + steps):
        x = widen(tl.load(x_ptrs, mask=_within_k(in_m, rk, K, k, EVEN_K, BLOCK_K), other=0.0), ACC)
        w_mask = _within_k(in_n, rk, K, k, EVEN_K, BLOCK_K)
        if NORM:
            squares += x * x
            nw = widen(tl.load(nw_ptr + k * BLOCK_K + rk, mask=rk < K - k * BLOCK_K, other=0.0), ACC)
            x = widen(narrow(x * nw[None, :], a_ptr.dtype.element_ty), ACC)
        w = widen(tl.load(b_ptr + w_at, mask=w_mask, other=0.0), ACC)
        acc3 += x[:, None, :] * w[None, :, :]
        if GATED:
            acc3_g += x[:, None, :] * widen(tl.load(g_ptr + w_at, mask=w_mask, other=0.0), ACC)[None, :, :]
        x_ptrs += BLOCK_K * sak
        w_at += BLOCK_K * sbk
    return tl.sum(acc3, 2), tl.sum(acc3_g, 2), tl.sum(squares, 1)


@triton.jit
def rms_scale(squares, K, eps):
    """1 / sqrt(mean(x**2) + eps) of rows whose sums of squares over all of K are squares."""
    return 1 / tl.sqrt(squares / K + eps)


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K, D1, D2,
    sa0, sa1, sa2, sam, sak, sb0, sb1, sb2, sbk, sbn,
    DOT: tl.constexpr, ACC: tl.constexpr, IEEE: tl.constexpr, EVEN_K: tl.constexpr, WIDE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """Grid: (batch * tiles of M x N,). WIDE: offsets within one matrix may pass int32."""
    pid = tl.program_id(0)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    batch = pid // tiles
    tile_m, tile_n = _grouped_tile(pid % tiles, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    a_ptr += _batch_offset(batch, D1, D2, sa0, sa1, sa2)
    b_ptr += _batch_offset(batch, D1, D2, sb0, sb1, sb2)
    c_ptr += batch.to(tl.int64) * M * N

    rm, rn, rk = tile_offsets(tile_m, tile_n, BLOCK_M, BLOCK_N, BLOCK_K, WIDE)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    in_m = (rm < M)[:, None]
    in_n = (rn < N)[None, :]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    steps = tl.cdiv(K, BLOCK_K)
    if IEEE:
        acc, _ = k_steps(acc, acc, a_ptrs, b_ptrs, b_ptrs, in_m, in_n, rk, 0, steps, K, sak, sbk, a_ptr, a_ptr, 0, 0,
                         DOT, ACC, "ieee", EVEN_K, False, BLOCK_K, False)
    else:
        acc, _ = k_steps(acc, acc, a_ptrs, b_ptrs, b_ptrs, in_m, in_n, rk, 0, steps, K, sak, sbk, a_ptr, a_ptr, 0, 0,
                         DOT, ACC, None, EVEN_K, False, BLOCK_K, False)

    c_ptrs = c_ptr + rm[:, None] * N + rn[None, :]
    tl.store(c_ptrs, narrow(acc, c_ptr.dtype.element_ty), mask=in_m & in_n)
