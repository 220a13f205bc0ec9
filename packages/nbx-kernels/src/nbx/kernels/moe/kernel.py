"""The mixture-of-experts kernels: routing, alignment, the grouped expert GEMMs and the combine.

Routing: a program takes BLOCK_T tokens' rows of all E logits, computes the scores in float32 and
picks the experts one at a time (the highest key, the lowest index among equal keys), so the
choice is the reference's on every device. No sort is needed at these widths (E <= a few hundred).
Its float sums (softmax's, in fixed point, and the renormalization's, in slot order) have an order
no layout changes, so route_kernel and the band's route_align_kernel give the same weights' bits.

Alignment: program e of `align_count_kernel` counts expert e's pairs; program e of
`align_place_kernel` finds its run's start from every expert's padded count, then walks the pairs
in order, placing its own with a running prefix count (exact integers: the same on every device
and run, no atomics); its last program pads the tail past the used blocks.

The expert GEMMs walk the alignment's row blocks (in matmul's grouped tile order, GROUP_M blocks
at a time across the columns): block b of BLOCK_M sorted pairs belongs to one expert (block_experts[b]; -1: an unused block, whose programs return at once), so each program is a
plain tiled product of gathered rows of x (or of the intermediate) by that expert's weight, through
matmul's k_steps. The gate/up kernel computes silu(x W_g^T) * (x W_u^T) in one pass (both weights'
tiles per A tile) into the intermediate, in sorted order; the down kernel multiplies it by W_d,
scales each row by its pair's routed weight in the epilogue and stores the row at its pair's id.
The combine sums each token's k rows in slot order in float32 and rounds once. Int4 expert
weights (W4A16) take matmul's int4 K step (quantized.int4_step) in the same two kernels. The band
has a GEMV form of both products too (expert_gemv_*: a pair a program row, the sums on the CUDA
cores, no row padded), the setting's kernel = gemv.

Routing, alignment, the GEMV form and the combine launch dependent (nbx.kernels.dependent_launch):
on the H200 one Qwen3-30B-A3B token's layer went from 34.4 to 25.0 us with them (2026-12-04). The
tiled expert GEMMs launch plainly: in the same run Mixtral's one-token band (the tiles) took 203.8 us
against 183.6 and 185.5 in two earlier runs without it, not yet told apart from run-to-run spread.
"""
import triton
import triton.language as tl

from ..dependent_launch import wait_for_predecessor
from ..elementwise import activations as act
from ..elementwise.casts import narrow, widen
from ..matmul.kernel import _dot_operand, _grouped_tile, _tf32_operand, gemv_k_steps, k_steps, load_operand
from ..matmul.quantized import int4_step
from ..rows import float_argument


@triton.jit
def _first_of(candidates, index, BIG: tl.constexpr):
    """Each row's lowest index where candidates holds (BIG where none does)."""
    return tl.min(tl.where(candidates, index, BIG), axis=1)


@triton.jit
def _pick(key, allowed, index, BIG: tl.constexpr):
    """Each row's index of the highest key among allowed, the lowest index among equal keys."""
    best = tl.max(tl.where(allowed, key, float("-inf")), axis=1)
    return _first_of(allowed & (key == best[:, None]), index, BIG)


@triton.jit
def _fixed_point_sum(p):
    """Each row's sum of p (values in [0, 1]) as the exact int64 sum of p in units of 2^-48, rounded
    once to float32: integer sums are associative, so the bits do not depend on the reduction order
    (a float tl.sum's follows the layout, hence BLOCK_T and num_warps: route_kernel and the band's
    route_align_kernel gave weights 1 ulp apart on sm_90). The truncated bits, under E * 2^-48 of a
    sum of at least 1 (the row's maximum scores 1), lie far under float32's rounding; E < 2^15."""
    units = (p * 281474976710656.0).to(tl.int64)
    return tl.sum(units, axis=1).to(tl.float32) * (1.0 / 281474976710656.0)


@triton.jit
def _route_rows(logits_ptr, bias_ptr, rt, T, E, GROUP_SIZE, s_t, s_e, scaling,
                TOP_K: tl.constexpr, SIGMOID: tl.constexpr, RENORM: tl.constexpr, HAS_BIAS: tl.constexpr,
                GROUPS: tl.constexpr, KEPT: tl.constexpr, TOP2: tl.constexpr, BLOCK_T: tl.constexpr,
                BLOCK_E: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_K: tl.constexpr):
    """Tokens rt's routing: (weights float32 [BLOCK_T, BLOCK_K], experts int32 [BLOCK_T, BLOCK_K],
    slot int32 [BLOCK_T, BLOCK_E]), slot j in column j (columns past TOP_K and rows past T hold no
    choice); slot[t, e] is the slot that chose expert e for token t, -1 where none did (the band's
    alignment reads it; route_kernel does not, and the compiler drops it)."""
    re = tl.arange(0, BLOCK_E)
    in_t = rt < T
    in_e = (re < E)[None, :]
    rows = rt.to(tl.int64)[:, None]
    a = widen(tl.load(logits_ptr + rows * s_t + re[None, :] * s_e, mask=in_t[:, None] & in_e, other=0), tl.float32)
    a = tl.where(in_e, a, float("-inf"))
    if SIGMOID:
        scores = 1.0 / (1.0 + tl.exp(-a))
    else:
        p = tl.exp(a - tl.max(a, axis=1)[:, None])
        scores = p / _fixed_point_sum(p)[:, None]
    if HAS_BIAS:
        key = tl.where(in_e, scores + tl.load(bias_ptr + re, mask=re < E, other=0)[None, :], float("-inf"))
    else:
        key = a   # softmax and sigmoid keep the logits' order: the choice is exact
    allowed = in_e & (rt >= 0)[:, None]
    if GROUPS > 1:
        group = (re // GROUP_SIZE)[None, :]
        rg = tl.arange(0, BLOCK_G)[None, :]
        group_key = tl.full((BLOCK_T, BLOCK_G), float("-inf"), tl.float32)
        for g in tl.static_range(GROUPS):
            member = (group == g) & in_e
            score = tl.max(tl.where(member, key, float("-inf")), axis=1)
            if TOP2:
                first = _pick(key, member, re[None, :], BLOCK_E)
                score += tl.max(tl.where(member & (re[None, :] != first[:, None]), key, float("-inf")), axis=1)
            group_key = tl.where(rg == g, score[:, None], group_key)
        kept = rg < 0
        for _ in tl.static_range(KEPT):
            g = _pick(group_key, (rg < GROUPS) & ~kept, rg, BLOCK_G)
            kept = kept | (rg == g[:, None])
        allowed = in_e & (rt < 0)[:, None]
        for g in tl.static_range(GROUPS):
            chosen = tl.max(tl.where(rg == g, kept.to(tl.int32), 0), axis=1) > 0
            allowed = allowed | ((group == g) & chosen[:, None])
    rk = tl.arange(0, BLOCK_K)[None, :]
    weights = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)
    ids = tl.zeros((BLOCK_T, BLOCK_K), tl.int32)
    slot = tl.full((BLOCK_T, BLOCK_E), -1, tl.int32)
    total = tl.zeros((BLOCK_T,), tl.float32)
    for j in tl.static_range(TOP_K):
        e = _pick(key, allowed, re[None, :], BLOCK_E)
        hit = re[None, :] == e[:, None]
        allowed = allowed & ~hit
        weight = tl.sum(tl.where(hit, scores, 0.0), axis=1)   # one score and zeros: exact in any order
        weights = tl.where(rk == j, weight[:, None], weights)
        total += weight   # in slot order: a tl.sum's order follows the layout
        ids = tl.where(rk == j, e[:, None], ids)
        slot = tl.where(hit, j, slot)
    if RENORM:
        weights = weights / total[:, None]
    return weights * scaling, ids, slot


@triton.jit(do_not_specialize=["scaling_bits"])
def route_kernel(logits_ptr, bias_ptr, weights_ptr, experts_ptr, T, E, GROUP_SIZE, s_t, s_e, scaling_bits,
                 TOP_K: tl.constexpr, SIGMOID: tl.constexpr, RENORM: tl.constexpr, HAS_BIAS: tl.constexpr,
                 GROUPS: tl.constexpr, KEPT: tl.constexpr, TOP2: tl.constexpr, BLOCK_T: tl.constexpr,
                 BLOCK_E: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr = False):
    """Grid: (cdiv(T, BLOCK_T),). weights (float32) and experts (int32) are contiguous [T, TOP_K]."""
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    rt = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    weights, ids, _ = _route_rows(logits_ptr, bias_ptr, rt, T, E, GROUP_SIZE, s_t, s_e,
                                  float_argument(scaling_bits).to(tl.float32), TOP_K, SIGMOID, RENORM, HAS_BIAS,
                                  GROUPS, KEPT, TOP2, BLOCK_T, BLOCK_E, BLOCK_G, BLOCK_K)
    rk = tl.arange(0, BLOCK_K)[None, :]
    at = rt.to(tl.int64)[:, None] * TOP_K + rk
    mask = (rt < T)[:, None] & (rk < TOP_K)
    tl.store(weights_ptr + at, weights, mask=mask)
    tl.store(experts_ptr + at, ids, mask=mask)


@triton.jit(do_not_specialize=["scaling_bits"])
def route_align_kernel(logits_ptr, bias_ptr, weights_ptr, experts_ptr, sorted_ptr, block_experts_ptr, inverse_ptr,
                       padded_ptr, T, E, GROUP_SIZE, s_t, s_e, scaling_bits, CAPACITY,
                       TOP_K: tl.constexpr, SIGMOID: tl.constexpr, RENORM: tl.constexpr, HAS_BIAS: tl.constexpr,
                       GROUPS: tl.constexpr, KEPT: tl.constexpr, TOP2: tl.constexpr, BLOCK_T: tl.constexpr,
                       BLOCK_E: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCKS_PER_EXPERT: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """Grid: (1,), T <= BLOCK_T: the routing of route_kernel and the alignment of align_count_kernel
    and align_place_kernel (the same tables) in one program, for the one-token band, where those
    three launches cost more than their work. A token's experts are distinct, so the pairs are the
    chosen cells of the routing's [tokens, experts] slot matrix, an expert's pairs in token order
    are in pair order, and an expert has at most T of them (BLOCKS_PER_EXPERT row blocks): its
    counts are the matrix's column sums, each run starts at the prefix sum of the padded counts, and
    a pair's rank in its run is the running count down its column. The pairs, each run's padding and
    the tail are disjoint positions: no store overwrites another."""
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    rt = tl.arange(0, BLOCK_T)
    weights, ids, slot = _route_rows(logits_ptr, bias_ptr, rt, T, E, GROUP_SIZE, s_t, s_e,
                                     float_argument(scaling_bits).to(tl.float32), TOP_K, SIGMOID, RENORM, HAS_BIAS,
                                     GROUPS, KEPT, TOP2, BLOCK_T, BLOCK_E, BLOCK_G, BLOCK_K)
    rk = tl.arange(0, BLOCK_K)[None, :]
    in_pair = (rt < T)[:, None] & (rk < TOP_K)
    tl.store(weights_ptr + rt[:, None] * TOP_K + rk, weights, mask=in_pair)
    tl.store(experts_ptr + rt[:, None] * TOP_K + rk, ids, mask=in_pair)
    P = T * TOP_K
    re = tl.arange(0, BLOCK_E)
    chosen = (slot >= 0) & (rt < T)[:, None]                    # [tokens, experts]: a pair each
    member = chosen.to(tl.int32)
    # the per-expert vectors stay [1, experts] tiles (the prefix over experts a scan along axis 1):
    # from a 1-D scan, broadcast into the 2-D stores, Triton 3.6's TritonGPURemoveLayoutConversions
    # (sm_90) built IR that broke dominance ("operand #0 does not dominate this use")
    counts = tl.sum(member, axis=0)[None, :]
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    start = tl.cumsum(padded, axis=1) - padded
    at = start + tl.cumsum(member, axis=0) - member
    pair = rt[:, None] * TOP_K + slot
    tl.store(sorted_ptr + at, pair, mask=chosen)
    tl.store(inverse_ptr + pair, at, mask=chosen)
    rm = tl.arange(0, BLOCK_M)[:, None]
    tl.store(sorted_ptr + start + counts + rm, P, mask=rm < padded - counts)
    rb = tl.arange(0, BLOCKS_PER_EXPERT)[:, None]
    tl.store(block_experts_ptr + start // BLOCK_M + rb, re[None, :], mask=rb < padded // BLOCK_M)
    used = tl.sum(tl.sum(padded, axis=1), axis=0)
    tl.store(padded_ptr, used)
    r = tl.arange(0, BLOCK)
    for first in range(used, CAPACITY, BLOCK):
        tl.store(sorted_ptr + first + r, P, mask=first + r < CAPACITY)
    for b in range(used // BLOCK_M, CAPACITY // BLOCK_M, BLOCK):
        tl.store(block_experts_ptr + b + r, -1, mask=b + r < CAPACITY // BLOCK_M)


@triton.jit
def align_count_kernel(experts_ptr, counts_ptr, P, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """Grid: (E,): counts[e] = how many of the P pairs go to expert e."""
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    e = tl.program_id(0)
    total = tl.zeros((BLOCK,), tl.int32)
    for start in range(0, P, BLOCK):
        at = start + tl.arange(0, BLOCK)
        ids = tl.load(experts_ptr + at, mask=at < P, other=-1)
        total += (ids == e).to(tl.int32)
    tl.store(counts_ptr + e, tl.sum(total, axis=0))


@triton.jit
def align_place_kernel(experts_ptr, counts_ptr, sorted_ptr, block_experts_ptr, inverse_ptr, padded_ptr, P, E,
                       CAPACITY, BLOCK: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_M: tl.constexpr,
                       PDL: tl.constexpr = False):
    """Grid: (E + 1,): program e < E places expert e's pairs, its padding and its blocks' expert;
    program E writes the used length, pads the tail with P and marks the unused blocks -1."""
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    e = tl.program_id(0)
    re = tl.arange(0, BLOCK_E)
    counts = tl.load(counts_ptr + re, mask=re < E, other=0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    start = tl.sum(tl.where(re < e, padded, 0), axis=0)
    r = tl.arange(0, BLOCK)
    if e == E:
        tl.store(padded_ptr, start)
        for at in range(start, CAPACITY, BLOCK):
            tl.store(sorted_ptr + at + r, P, mask=at + r < CAPACITY)
        for b in range(start // BLOCK_M, CAPACITY // BLOCK_M, BLOCK):
            tl.store(block_experts_ptr + b + r, -1, mask=b + r < CAPACITY // BLOCK_M)
    else:
        placed = 0
        for first in range(0, P, BLOCK):
            pair = first + r
            hit = tl.load(experts_ptr + pair, mask=pair < P, other=-1) == e
            at = start + placed + tl.cumsum(hit.to(tl.int32), axis=0) - 1
            tl.store(sorted_ptr + at, pair, mask=hit)
            tl.store(inverse_ptr + pair, at, mask=hit)
            placed += tl.sum(hit.to(tl.int32), axis=0)
        mine = tl.sum(tl.where(re == e, padded, 0), axis=0)
        rm = tl.arange(0, BLOCK_M)
        tl.store(sorted_ptr + start + placed + rm, P, mask=placed + rm < mine)
        for b in range(0, mine // BLOCK_M, BLOCK):
            tl.store(block_experts_ptr + start // BLOCK_M + b + r, e, mask=b + r < mine // BLOCK_M)


@triton.jit
def _block_tile(sorted_ptr, block_experts_ptr, P, ROWS, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                GROUP_M: tl.constexpr):
    """This program's tile in matmul's grouped order over (ROWS / BLOCK_M row blocks, N columns),
    so that the programs running together share their rows and their weight tiles in the L2: the
    block's expert (int64; -1: an unused block), its rows' positions and pair ids, its columns."""
    block, tile_n = _grouped_tile(tl.program_id(0), ROWS, N, BLOCK_M, BLOCK_N, GROUP_M)
    expert = tl.load(block_experts_ptr + block).to(tl.int64)
    rows = block.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    pairs = tl.load(sorted_ptr + rows).to(tl.int64)
    return expert, rows, pairs, pairs < P, tile_n * BLOCK_N + tl.arange(0, BLOCK_N), block, tile_n


@triton.jit
def _descriptor_steps(acc, acc_g, a_ptrs, in_m, rk, a_desc, a_row, b_desc, g_desc, b_row, K, sak,
                      DOT: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr, A_DESC: tl.constexpr,
                      GATED: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc (and acc_g: GATED) over every K step, the weight tiles read through descriptors over the
    stacked weights as one [E * N, K] matrix, at row b_row = expert * N + the tile's first column (a
    tile past the expert's N rows reads the next expert's, in columns never stored; past the last,
    zeros; K's tail reads zeros); A through a_desc at row a_row (A_DESC: rows that lie in order) or
    gathered through pointers (a_ptrs at step 0, rows in_m, K's tail masked)."""
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if A_DESC:
            a = _dot_operand(a_desc.load([a_row, k * BLOCK_K]), DOT)
        else:
            a = load_operand(a_ptrs + k * BLOCK_K * sak, in_m & (rk[None, :] < K - k * BLOCK_K), DOT)
        a = _tf32_operand(a, PRECISION)
        b = _tf32_operand(_dot_operand(b_desc.load([b_row, k * BLOCK_K]).T, DOT), PRECISION)
        acc = tl.dot(a, b, acc, input_precision=PRECISION, out_dtype=ACC)
        if GATED:
            g = _tf32_operand(_dot_operand(g_desc.load([b_row, k * BLOCK_K]).T, DOT), PRECISION)
            acc_g = tl.dot(a, g, acc_g, input_precision=PRECISION, out_dtype=ACC)
    return acc, acc_g


@triton.jit
def _int4_pointers(q_ptr, s_ptr, z_ptr, expert, rn, rh, sq_e, sq_n, ss_e, ss_n):
    """An int4 expert weight's packed bytes (a K step's (BLOCK_K / 2, BLOCK_N) tile at step 0) and
    its columns' scales and minima (at group 0)."""
    scales = expert * ss_e + rn * ss_n
    return q_ptr + expert * sq_e + rn[None, :] * sq_n + rh[:, None], s_ptr + scales, z_ptr + scales


@triton.jit
def _int4_operands(a_ptrs, k, sak, in_m, DOT: tl.constexpr, BLOCK_K: tl.constexpr):
    """A's even and odd columns of K step k (a_ptrs: the even columns of step 0)."""
    a_even = _dot_operand(tl.load(a_ptrs + k * BLOCK_K * sak, mask=in_m, other=0), DOT)
    return a_even, _dot_operand(tl.load(a_ptrs + (k * BLOCK_K + 1) * sak, mask=in_m, other=0), DOT)


@triton.jit
def expert_gate_up_kernel(x_ptr, wg_ptr, wu_ptr, sg_ptr, zg_ptr, su_ptr, zu_ptr, h_ptr, sorted_ptr, block_experts_ptr,
                          ROWS, N, K, P, TOP_K, sx_t, sx_k, sw_e, sw_n, sw_k, ss_e, ss_n, W_ROWS,
                          DOT: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr, EVEN_K: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                          INT4: tl.constexpr, GROUP: tl.constexpr, SIGNED: tl.constexpr, ASYMMETRIC: tl.constexpr,
                          TMA: tl.constexpr):
    """Grid: (ROWS / BLOCK_M * cdiv(N, BLOCK_N),). h[row] = silu(x[t] W_g[e]^T) * (x[t] W_u[e]^T) over
    N = I columns for the pair of each sorted row (t = pair // TOP_K); h is contiguous [rows, N].
    INT4: the weights are packed int4 (W4A16, matmul/quantized.py's step; sw_* index their bytes,
    ss_* their scales and minima); else float, read through sw_* (element strides), or (TMA) through
    descriptors over the contiguous weights as [W_ROWS = E * N, K] (x's rows, gathered, by pointers)."""
    expert, rows, pairs, valid, rn, _, tile_n = _block_tile(sorted_ptr, block_experts_ptr, P, ROWS, N, BLOCK_M,
                                                            BLOCK_N, GROUP_M)
    if expert < 0:
        return
    tokens = pairs // TOP_K
    in_m = valid[:, None]
    in_n = (rn < N)[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    if INT4:
        rh = tl.arange(0, BLOCK_K // 2)
        a_ptrs = x_ptr + tokens[:, None] * sx_t + (2 * rh[None, :]) * sx_k
        qg, sg, zg = _int4_pointers(wg_ptr, sg_ptr, zg_ptr, expert, rn, rh, sw_e, sw_n, ss_e, ss_n)
        qu, su, zu = _int4_pointers(wu_ptr, su_ptr, zu_ptr, expert, rn, rh, sw_e, sw_n, ss_e, ss_n)
        for k in range(0, K // BLOCK_K):
            a_even, a_odd = _int4_operands(a_ptrs, k, sx_k, in_m, DOT, BLOCK_K)
            acc = int4_step(acc, a_even, a_odd, qg, sg, zg, rn < N, k, DOT, PRECISION, GROUP, SIGNED, ASYMMETRIC,
                            BLOCK_K)
            acc_u = int4_step(acc_u, a_even, a_odd, qu, su, zu, rn < N, k, DOT, PRECISION, GROUP, SIGNED,
                              ASYMMETRIC, BLOCK_K)
    elif TMA:
        rk = tl.arange(0, BLOCK_K)
        a_ptrs = x_ptr + tokens[:, None] * sx_t + rk[None, :] * sx_k
        g_desc = tl.make_tensor_descriptor(wg_ptr, shape=[W_ROWS, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
        u_desc = tl.make_tensor_descriptor(wu_ptr, shape=[W_ROWS, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
        acc, acc_u = _descriptor_steps(acc, acc_u, a_ptrs, in_m, rk, g_desc, 0, g_desc, u_desc,
                                       (expert * N + tile_n * BLOCK_N).to(tl.int32), K, sx_k, DOT, ACC, PRECISION,
                                       False, True, BLOCK_K)
    else:
        rk = tl.arange(0, BLOCK_K)
        a_ptrs = x_ptr + tokens[:, None] * sx_t + rk[None, :] * sx_k
        b_ptrs = wg_ptr + expert * sw_e + rk[:, None] * sw_k + rn[None, :] * sw_n
        g_ptrs = wu_ptr + expert * sw_e + rk[:, None] * sw_k + rn[None, :] * sw_n
        acc, acc_u = k_steps(acc, acc_u, a_ptrs, b_ptrs, g_ptrs, in_m, in_n, rk, 0, tl.cdiv(K, BLOCK_K), K, sx_k,
                             sw_k, x_ptr, x_ptr, 0, 0, DOT, ACC, PRECISION, EVEN_K, True, BLOCK_K, False)
    y = act.silu(acc) * acc_u
    tl.store(h_ptr + rows[:, None] * N + rn[None, :], narrow(y, h_ptr.dtype.element_ty), mask=in_m & in_n)


@triton.jit
def expert_down_kernel(h_ptr, wd_ptr, sd_ptr, zd_ptr, out_ptr, weights_ptr, sorted_ptr, block_experts_ptr, ROWS, N, K,
                       P, sw_e, sw_n, sw_k, ss_e, ss_n, W_ROWS,
                       DOT: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr, EVEN_K: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                       INT4: tl.constexpr, GROUP: tl.constexpr, SIGNED: tl.constexpr, ASYMMETRIC: tl.constexpr,
                       TMA: tl.constexpr):
    """Grid: (ROWS / BLOCK_M * cdiv(N, BLOCK_N),). out[pair] = weight[pair] * (h[row] W_d[e]^T) over
    N = H columns; h is contiguous [rows, K = I], out contiguous [P, N], weights contiguous [P];
    INT4 and TMA as the gate/up kernel's (TMA: h's rows, in sorted order, through a descriptor too;
    a padding row's product is never stored)."""
    expert, rows, pairs, valid, rn, block, tile_n = _block_tile(sorted_ptr, block_experts_ptr, P, ROWS, N, BLOCK_M,
                                                                BLOCK_N, GROUP_M)
    if expert < 0:
        return
    in_m = valid[:, None]
    in_n = (rn < N)[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    if INT4:
        rh = tl.arange(0, BLOCK_K // 2)
        a_ptrs = h_ptr + rows[:, None] * K + 2 * rh[None, :]
        q, sc, z = _int4_pointers(wd_ptr, sd_ptr, zd_ptr, expert, rn, rh, sw_e, sw_n, ss_e, ss_n)
        for k in range(0, K // BLOCK_K):
            a_even, a_odd = _int4_operands(a_ptrs, k, 1, in_m, DOT, BLOCK_K)
            acc = int4_step(acc, a_even, a_odd, q, sc, z, rn < N, k, DOT, PRECISION, GROUP, SIGNED, ASYMMETRIC,
                            BLOCK_K)
    elif TMA:
        h_desc = tl.make_tensor_descriptor(h_ptr, shape=[ROWS, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
        d_desc = tl.make_tensor_descriptor(wd_ptr, shape=[W_ROWS, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
        acc, _ = _descriptor_steps(acc, acc, h_ptr, in_m, rn, h_desc, block * BLOCK_M, d_desc, d_desc,
                                   (expert * N + tile_n * BLOCK_N).to(tl.int32), K, 1, DOT, ACC, PRECISION, True,
                                   False, BLOCK_K)
    else:
        rk = tl.arange(0, BLOCK_K)
        a_ptrs = h_ptr + rows[:, None] * K + rk[None, :]
        b_ptrs = wd_ptr + expert * sw_e + rk[:, None] * sw_k + rn[None, :] * sw_n
        acc, _ = k_steps(acc, acc, a_ptrs, b_ptrs, b_ptrs, in_m, in_n, rk, 0, tl.cdiv(K, BLOCK_K), K, 1, sw_k,
                         h_ptr, h_ptr, 0, 0, DOT, ACC, PRECISION, EVEN_K, False, BLOCK_K, False)
    routed = widen(tl.load(weights_ptr + pairs, mask=valid, other=0), ACC)
    y = acc * routed[:, None]
    tl.store(out_ptr + pairs[:, None] * N + rn[None, :], narrow(y, out_ptr.dtype.element_ty), mask=in_m & in_n)


@triton.jit
def expert_gemv_gate_up_kernel(x_ptr, wg_ptr, wu_ptr, h_ptr, experts_ptr, N, K, TOP_K, sx_t, sx_k, sw_e, sw_n, sw_k,
                               ACC: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_N: tl.constexpr,
                               BLOCK_K: tl.constexpr, PDL: tl.constexpr = False):
    """The band's GEMV form. Grid: (P * cdiv(N, BLOCK_N),): program (pair, tile) writes h[pair] =
    silu(x[t] W_g[e]^T) * (x[t] W_u[e]^T) over BLOCK_N of the N = I columns, t = pair // TOP_K and
    e = experts[pair]; no row is padded (one pair a program) and the sums run on the CUDA cores
    (matmul's gemv_k_steps: the weights' rows read [BLOCK_N, BLOCK_K], K fastest), so a token's few
    pairs spread over P times the column tiles' programs. h is contiguous [>= P, N]."""
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    tiles = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    pair = (pid // tiles).to(tl.int64)
    rn = (pid % tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
    w = tl.load(experts_ptr + pair).to(tl.int64) * sw_e
    token = pair // TOP_K + tl.arange(0, 1)   # a tensor of one row: gemv_k_steps' other form indexes it
    up, gate, _ = gemv_k_steps(x_ptr, wu_ptr + w, wg_ptr + w, x_ptr, token, rn, tl.arange(0, BLOCK_K), 1, N, K, 0,
                               tl.cdiv(K, BLOCK_K), sx_t, sx_k, sw_k, sw_n, ACC, EVEN_K, True, False, 1, BLOCK_N,
                               BLOCK_K)
    y = act.silu(gate) * up
    tl.store(h_ptr + pair * N + rn[None, :], narrow(y, h_ptr.dtype.element_ty), mask=(rn < N)[None, :])


@triton.jit
def expert_gemv_down_kernel(h_ptr, wd_ptr, out_ptr, weights_ptr, experts_ptr, N, K, sw_e, sw_n, sw_k,
                            ACC: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            PDL: tl.constexpr = False):
    """The band's GEMV form of the down product. Grid: (P * cdiv(N, BLOCK_N),): out[pair] =
    weight[pair] * (h[pair] W_d[e]^T) over BLOCK_N of the N = H columns; h contiguous [>= P, K = I],
    out contiguous [P, N], weights contiguous [P]."""
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    tiles = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    pair = (pid // tiles).to(tl.int64)
    rn = (pid % tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
    w = wd_ptr + tl.load(experts_ptr + pair).to(tl.int64) * sw_e
    acc, _, _ = gemv_k_steps(h_ptr, w, w, h_ptr, pair + tl.arange(0, 1), rn, tl.arange(0, BLOCK_K), 1, N, K, 0,
                             tl.cdiv(K, BLOCK_K), K, 1, sw_k, sw_n, ACC, EVEN_K, False, False, 1, BLOCK_N, BLOCK_K)
    y = acc * widen(tl.load(weights_ptr + pair), ACC)
    tl.store(out_ptr + pair * N + rn[None, :], narrow(y, out_ptr.dtype.element_ty), mask=(rn < N)[None, :])


@triton.jit
def combine_kernel(pairs_ptr, out_ptr, N, TOP_K: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr,
                   PDL: tl.constexpr = False):
    """Grid: (T, cdiv(N, BLOCK)): out[t] = sum over j = 0, 1, ... of pairs[t * TOP_K + j], in that order."""
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    acc = tl.zeros((BLOCK,), ACC)
    for j in tl.static_range(TOP_K):
        acc += widen(tl.load(pairs_ptr + (t * TOP_K + j) * N + cols, mask=mask, other=0), ACC)
    tl.store(out_ptr + t * N + cols, narrow(acc, out_ptr.dtype.element_ty), mask=mask)
