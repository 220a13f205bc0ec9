"""The grouped expert GEMMs over block-scaled float8 expert weights (W8A16: DeepSeek-V3's and
Qwen3-FP8's checkpoints, nbx.core.Float8BlockWeight).

One kernel serves both products of the layer (GATED: gate/up with SwiGLU into the intermediate in
sorted order; else down, with the routed weight in the epilogue, into the pair rows), over the same
alignment tables and tile order as kernel.py's float and int4 kernels. Each K step loads the
weight's float8 tile and its block's scale of each column (BLOCK_K divides the scale block's
columns, so a step lies in one block), dequantizes in float32 and rounds once to the activations'
type, as the int4 step does: the weights never exist in memory as wider floats.
"""
import triton
import triton.language as tl

from ..elementwise import activations as act
from ..elementwise.casts import narrow, widen
from ..matmul.kernel import _dot_operand, _tf32_operand, load_operand
from .kernel import _block_tile


@triton.jit
def _float8_tile(w_ptrs, s_ptrs, in_n, mask, k, DOT: tl.constexpr, BLOCK_K: tl.constexpr, SCALE_K: tl.constexpr):
    """K step k's weight tile (BLOCK_K, BLOCK_N): the float8 values (w_ptrs at step 0, 0 where
    masked) times their columns' block scale (s_ptrs at block 0), in DOT."""
    w = tl.where(mask, widen(tl.load(w_ptrs + k * BLOCK_K, mask=mask), tl.float32), 0.0)
    scale = tl.load(s_ptrs + (k * BLOCK_K) // SCALE_K, mask=in_n, other=0)
    w = w * scale[None, :]
    if DOT != tl.float32:
        w = narrow(w, DOT)
    return _dot_operand(w, DOT)


@triton.jit
def expert_float8_kernel(a_ptr, wg_ptr, wu_ptr, sg_ptr, su_ptr, out_ptr, weights_ptr, sorted_ptr, block_experts_ptr,
                         ROWS, N, K, P, TOP_K, sa_t, sa_k, sw_e, sw_n, ss_e, ss_n,
                         DOT: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr, GATED: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                         SCALE_N: tl.constexpr, SCALE_K: tl.constexpr):
    """Grid: (ROWS / BLOCK_M * cdiv(N, BLOCK_N),). The weights are contiguous float8 [E, N, K]
    (sw_e, sw_n their strides, K's 1) with float32 scales [E, cdiv(N, SCALE_N), cdiv(K, SCALE_K)]
    (ss_e, ss_n; K's 1). GATED: out[row] = silu(a[t] W_g[e]^T) * (a[t] W_u[e]^T), a = x gathered
    by token t = pair // TOP_K (strides sa_t, sa_k), out contiguous [ROWS, N]. Else: out[pair] =
    weight[pair] * (a[row] W_g[e]^T), a the intermediate in sorted order, out contiguous [P, N]."""
    expert, rows, pairs, valid, rn, _, _ = _block_tile(sorted_ptr, block_experts_ptr, P, ROWS, N, BLOCK_M, BLOCK_N,
                                                       GROUP_M)
    if expert < 0:
        return
    rk = tl.arange(0, BLOCK_K)
    in_m = valid[:, None]
    in_n = rn < N
    if GATED:
        a_rows = pairs // TOP_K
    else:
        a_rows = rows
    a_ptrs = a_ptr + a_rows[:, None] * sa_t + rk[None, :] * sa_k
    w_at = expert * sw_e + rn[None, :] * sw_n + rk[:, None]
    s_at = expert * ss_e + (rn // SCALE_N) * ss_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        in_k = rk < K - k * BLOCK_K
        a = _tf32_operand(load_operand(a_ptrs + k * BLOCK_K * sa_k, in_m & in_k[None, :], DOT), PRECISION)
        w_mask = in_n[None, :] & in_k[:, None]
        b = _tf32_operand(_float8_tile(wg_ptr + w_at, sg_ptr + s_at, in_n, w_mask, k, DOT, BLOCK_K, SCALE_K),
                          PRECISION)
        acc = tl.dot(a, b, acc, input_precision=PRECISION, out_dtype=ACC)
        if GATED:
            u = _tf32_operand(_float8_tile(wu_ptr + w_at, su_ptr + s_at, in_n, w_mask, k, DOT, BLOCK_K, SCALE_K),
                              PRECISION)
            acc_u = tl.dot(a, u, acc_u, input_precision=PRECISION, out_dtype=ACC)
    mask = in_m & in_n[None, :]
    if GATED:
        y = act.silu(acc) * acc_u
        tl.store(out_ptr + rows[:, None] * N + rn[None, :], narrow(y, out_ptr.dtype.element_ty), mask=mask)
    else:
        routed = widen(tl.load(weights_ptr + pairs, mask=valid, other=0), ACC)
        y = acc * routed[:, None]
        tl.store(out_ptr + pairs[:, None] * N + rn[None, :], narrow(y, out_ptr.dtype.element_ty), mask=mask)
