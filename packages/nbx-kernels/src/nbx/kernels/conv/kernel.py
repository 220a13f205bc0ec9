"""The convolution kernels: an implicit GEMM on tl.dot, a window kernel (depthwise convolution and
every pooling), and the overlap-add of strided frames (istft's).

Implicit GEMM: the output of one group is the product of an (N * OD * OH * OW) x (C / groups *
KD * KH * KW) matrix of input taps, never formed in memory, by the (taps) x (O / groups) weight.
A program owns a BLOCK_M x BLOCK_N tile (output positions x output channels) and walks the kernel
taps, then the input channels BLOCK_K at a time, as one flat loop (Triton pipelines the
innermost loop only): each step's halo test (the tap's input position inside the input) is a few
integer operations on the tile's positions, and the channel steps read the input through its
strides, so a channels-last input is read along its contiguous channels and a
channels-first one along its contiguous width. A transposed convolution is a launch of it a
phase (conv/__init__.py), each phase an ordinary convolution of stride 1 whose dilation may be
negative (its later taps read earlier inputs).

The window kernel: a program owns a BLOCK_C x BLOCK_W tile of one output row (sample, depth,
height) - channels by output width, whichever is contiguous in memory is the coalesced one - and
walks the window's taps with scalar depth and height and vector width positions.
"""
import triton
import triton.language as tl

from ..elementwise.casts import narrow, widen
from ..matmul.fused import _activate
from ..matmul.kernel import _dot_operand, _grouped_tile, load_operand

DEPTHWISE, MAX, AVG = 0, 1, 2  # the window kernel's MODE (host side)
_DEPTHWISE, _MAX, _AVG = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)  # the same, read inside kernels


@triton.jit
def _tap(o, k, size, stride, pad, dilation):
    """The input position output position o reads at kernel tap k, and whether it exists."""
    i = o * stride - pad + k * dilation
    return i, (i >= 0) & (i < size)


@triton.jit
def epilogue(acc, res_ptrs, mask, ACTIVATION: tl.constexpr, HAS_RES: tl.constexpr):
    """activation(acc) + the residual, in float32 (the bias is in acc already)."""
    acc = _activate(acc, ACTIVATION)
    if HAS_RES:
        acc += widen(tl.load(res_ptrs, mask=mask, other=0.0), tl.float32)
    return acc


@triton.jit
def _inside(i, size):
    return (i >= 0) & (i < size)


@triton.jit
def _eighths(t, BK: tl.constexpr, BM: tl.constexpr):
    """A [BK, BM] tile's 8 [BK, BM // 8] slices by position mod 8 (0..7)."""
    t = tl.reshape(t, (BK, BM // 8, 2, 2, 2))   # position 8 g + 4 a + 2 b + c
    t0, t1 = tl.split(t)                         # by c
    t00, t01 = tl.split(t0)                      # by b
    t10, t11 = tl.split(t1)
    e0, e4 = tl.split(t00)                       # by a
    e2, e6 = tl.split(t01)
    e1, e5 = tl.split(t10)
    e3, e7 = tl.split(t11)
    return e0, e1, e2, e3, e4, e5, e6, e7


@triton.jit
def _nth(k: tl.constexpr, lo8, hi8):
    """Slice k of the 16 (lo's 8 then hi's)."""
    if k < 8:
        v = lo8[k]
    else:
        v = hi8[k - 8]
    return v


@triton.jit
def _shifted(lo, hi, R: tl.constexpr, BK: tl.constexpr, BM: tl.constexpr):
    """The [BK, BM] tile R (0..7) positions past lo's, from lo and hi (lo's positions + 8): within
    each group of 8 positions, position j is lo's j + R or hi's j + R - 8 (register moves: R is static)."""
    lo8 = _eighths(lo, BK, BM)
    hi8 = _eighths(hi, BK, BM)
    o0 = _nth(R, lo8, hi8)
    o1 = _nth(R + 1, lo8, hi8)
    o2 = _nth(R + 2, lo8, hi8)
    o3 = _nth(R + 3, lo8, hi8)
    o4 = _nth(R + 4, lo8, hi8)
    o5 = _nth(R + 5, lo8, hi8)
    o6 = _nth(R + 6, lo8, hi8)
    o7 = _nth(R + 7, lo8, hi8)
    # join appends a last dim: (a, b, c) back with c last, so a first
    t = tl.join(tl.join(tl.join(o0, o4), tl.join(o2, o6)), tl.join(tl.join(o1, o5), tl.join(o3, o7)))
    return tl.reshape(t, (BK, BM))


@triton.jit
def _shifted_a(x_pos, ow, W, ok, ck, c_ok, xs_c, S: tl.constexpr, DOT: tl.constexpr, BK: tl.constexpr,
               BM: tl.constexpr):
    """A_SHIFT's A tile [BM, BK] at input positions ow + S (S static): two 16-byte aligned loads of
    the positions ow + 8 Q and ow + 8 Q + 8 (Q = floor(S / 8)), then the static shift S - 8 Q."""
    Q: tl.constexpr = (S + 8 * 64) // 8 - 64
    lo_w = ow + 8 * Q
    hi_w = lo_w + 8
    ptrs = x_pos[None, :] + 8 * Q + ck[:, None] * xs_c
    lo = load_operand(ptrs, c_ok[:, None] & (ok & _inside(lo_w, W))[None, :], DOT)
    hi = load_operand(ptrs + 8, c_ok[:, None] & (ok & _inside(hi_w, W))[None, :], DOT)
    return tl.trans(_shifted(lo, hi, S - 8 * Q, BK, BM))


@triton.jit
def _mma(a, b, acc, IEEE: tl.constexpr):
    if IEEE:  # float32 operands multiply in float32, as the oracle
        acc = tl.dot(a, b, acc, input_precision="ieee", out_dtype=tl.float32)
    else:
        acc = tl.dot(a, b, acc, out_dtype=tl.float32)
    return acc


@triton.jit
def _first_step(first, SPLIT_K: tl.constexpr, C_G, BLOCK_K: tl.constexpr, KW, KH):
    """(tap, first channel, kw, kh, kd) of K step `first` (tensors: a loop's values keep one type)."""
    if SPLIT_K == 1:   # step 0
        tap = tl.zeros((), tl.int32)
        c0 = tl.zeros((), tl.int32)
        kw = tl.zeros((), tl.int32)
        kh = tl.zeros((), tl.int32)
        kd = tl.zeros((), tl.int32)
    else:   # a split's first step, by division once
        tap = first // tl.cdiv(C_G, BLOCK_K)
        c0 = (first - tap * tl.cdiv(C_G, BLOCK_K)) * BLOCK_K
        kw = tap % KW
        kh = (tap // KW) % KH
        kd = tap // (KW * KH)
    return tap, c0, kw, kh, kd


@triton.jit
def _next_step(tap, c0, kw, kh, kd, C_G, BLOCK_K: tl.constexpr, KW, KH):
    """The next step's counters: the next channel block, or the first of the next tap (kw fastest)."""
    c0 += BLOCK_K
    next_tap = c0 >= C_G
    c0 = tl.where(next_tap, 0, c0)
    kw = tl.where(next_tap, kw + 1, kw)
    tap = tl.where(next_tap, tap + 1, tap)
    next_row = kw == KW
    kw = tl.where(next_row, 0, kw)
    kh = tl.where(next_row, kh + 1, kh)
    next_plane = kh == KH
    kh = tl.where(next_plane, 0, kh)
    kd = tl.where(next_plane, kd + 1, kd)
    return tap, c0, kw, kh, kd


@triton.jit
def conv_gemm_kernel(
    x, w, bias, out, res,
    BATCH, C_G, D, H, W, O_G, OD, OH, OW, KD, KH, KW,
    sd, sh, sw, pd, ph, pw, dd, dh, dw,
    xs_n, xs_c, xs_d, xs_h, xs_w,
    ws_g, ws_o, ws_c, ws_d, ws_h, ws_w,
    os_n, os_c, os_d, os_h, os_w,
    rs_n, rs_c, rs_d, rs_h, rs_w, split_stride,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_RES: tl.constexpr,
    DOT: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    UP_D: tl.constexpr = 1, UP_H: tl.constexpr = 1, UP_W: tl.constexpr = 1,
    WIDE: tl.constexpr = True, EVEN_C: tl.constexpr = False, ONE_TAP: tl.constexpr = False,
    B_DESC: tl.constexpr = False, SPLIT_K: tl.constexpr = 1, A_TILE: tl.constexpr = False,
    A_SHIFT: tl.constexpr = False, TAPS_W: tl.constexpr = 1, PAD_W: tl.constexpr = 0, DIL_W: tl.constexpr = 1,
):
    """Grid: (tiles of (N * OD * OH * OW) x O_G, groups). The epilogue: activation(acc + bias) +
    res (res read through its strides, any layout). UP_*: a nearest upsampling fused into the
    input's load: D, H, W are the upsampled sizes and position i reads stored position i // UP.
    WIDE: offsets in int64 (a tensor past 2**31 elements), else int32. EVEN_C: BLOCK_K divides C_G
    (no channel mask). ONE_TAP: a kernel of one tap (KD = KH = KW = 1), whose border tests do not
    move with the step, so a channels-first input's rows vectorize. A kernel dim of 0 taps (a
    transposed convolution's phase no tap reaches): no step, the output is the bias alone.
    B_DESC: the weight is one [O, taps x C_G] matrix (channels-last: (O, KD, KH, KW, C_G) dense) read
    through a tensor descriptor, a [BLOCK_N, BLOCK_K] box at (output channel, tap x C_G + c0) a step
    (EVEN_C; rows past O read as zeros; rows of the next group land in columns that are not stored).
    A_TILE (LINEAR, not ONE_TAP): the A tile's pointers are formed once before the loop and a step
    adds one scalar offset to them: a channels-first input, whose taps shift its unit-stride positions
    by single elements, is read by scalar loads, and forming each element's 64-bit address a step cost
    ~100 of the loop's 325 SASS instructions on sm_90 (tools/sm90_conv_report.py: 229 with it).
    A_SHIFT (a channels-first conv1d, stride 1, OW a multiple of 8): one K loop a width tap (TAPS_W,
    its shift j * DIL_W - PAD_W static), the A tile from two 16-byte aligned loads and a static shift
    of each 8 positions (_shifted_a); the host keeps it to width-only kernels, whose sums then run in
    the flat loop's order (tap, then channels).
    SPLIT_K > 1 (grid (tiles, groups, SPLIT_K)): program s walks its share of the K steps and stores
    the float32 sums, no bias nor epilogue, at out + s * split_stride through the o strides (the
    partials, which conv/split.py's epilogue adds in split order).

    The K loop walks (tap, channel step) with both counters carried from step to step (no
    division a step). A plain convolution's tap moves every row's input by one offset
    (kd * dd * xs_d + kh * dh * xs_h + kw * dw * xs_w), so a step adds a scalar to the rows' origin
    offsets and tests each row's three coordinates against the borders; the upsampled form
    divides (its stored position is not linear in the tap) and takes _tap."""
    g = tl.program_id(1)
    M = BATCH * OD * OH * OW
    tile_m, tile_n = _grouped_tile(tl.program_id(0), M, O_G, BLOCK_M, BLOCK_N, GROUP_M)
    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if WIDE:
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    in_m = rm < M
    in_n = rn < O_G
    ow = rm % OW
    oh = (rm // OW) % OH
    od = (rm // (OW * OH)) % OD
    n = rm // (OW * OH * OD)
    LINEAR: tl.constexpr = UP_D == 1 and UP_H == 1 and UP_W == 1
    id0 = od * sd - pd   # the rows' input position at tap 0 (LINEAR)
    ih0 = oh * sh - ph
    iw0 = ow * sw - pw
    x_row = x + n * xs_n + (g * C_G).to(rm.dtype) * xs_c
    if LINEAR:
        x_row += id0 * xs_d + ih0 * xs_h + iw0 * xs_w
    w_base = w + g.to(rn.dtype) * ws_g + rn * ws_o
    if B_DESC:
        w_desc = tl.make_tensor_descriptor(w, shape=[O_G * tl.num_programs(1), KD * KH * KW * C_G],
                                           strides=[ws_o, 1], block_shape=[BLOCK_N, BLOCK_K])
        first_n = g * O_G + tile_n * BLOCK_N
    if A_SHIFT:   # the rows' input position at tap 0 without the width's padding (stride 1: ow itself)
        x_pos = x + n * xs_n + (g * C_G).to(rm.dtype) * xs_c + id0 * xs_d + ih0 * xs_h + ow
        kw_loop = 1   # the width's taps are unrolled in the step
    else:
        kw_loop = KW
    if A_TILE:   # a pointer a tile element, made once (LINEAR): a step adds its tap's and channels' one offset
        a_tile = x_row[:, None] + rk[None, :] * xs_c
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    total = KD * KH * kw_loop * tl.cdiv(C_G, BLOCK_K)
    if SPLIT_K == 1:
        first = 0
        last = total
    else:   # this split's steps (of each width tap's loop, A_SHIFT)
        per = tl.cdiv(total, SPLIT_K)
        first = tl.program_id(2) * per
        last = tl.minimum(first + per, total)
    if A_SHIFT:
        # one loop a width tap (static: its shift is), so each loop's pipeline holds one tap's tiles (the
        # taps of one loop took 7 stage sets of shared memory, 480 KB); the same (kd, kh, channel) steps each
        for j in tl.static_range(TAPS_W):
            tap, c0, kw, kh, kd = _first_step(first, SPLIT_K, C_G, BLOCK_K, kw_loop, KH)
            for step in range(first, last):
                ok = in_m & _inside(id0 + kd * dd, D) & _inside(ih0 + kh * dh, H)
                ck = c0 + rk
                c_ok = (ck < C_G) | EVEN_C
                a = _shifted_a(x_pos + (kd * dd * xs_d + kh * dh * xs_h), ow, W, ok, ck, c_ok, xs_c, j * DIL_W - PAD_W,
                               DOT, BLOCK_K, BLOCK_M)
                if B_DESC:
                    b = _dot_operand(w_desc.load([first_n, (tap * TAPS_W + j) * C_G + c0]).T, DOT)
                else:
                    b_ptrs = w_base[None, :] + (kd * ws_d + kh * ws_h + j * ws_w) + ck[:, None] * ws_c
                    b = load_operand(b_ptrs, c_ok[:, None] & in_n[None, :], DOT)
                acc = _mma(a, b, acc, IEEE)
                tap, c0, kw, kh, kd = _next_step(tap, c0, kw, kh, kd, C_G, BLOCK_K, kw_loop, KH)
    else:
        tap, c0, kw, kh, kd = _first_step(first, SPLIT_K, C_G, BLOCK_K, kw_loop, KH)
        # one flat loop over (tap, channel step), so Triton pipelines every load of the tile's K
        for step in range(first, last):
            if LINEAR and ONE_TAP:   # a product (conv_transpose1d's columns): the rows' tests alone, so they vectorize
                ok = in_m & _inside(id0, D) & _inside(ih0, H) & _inside(iw0, W)
                a_row = x_row
            elif LINEAR:
                ok = in_m & _inside(id0 + kd * dd, D) & _inside(ih0 + kh * dh, H) & _inside(iw0 + kw * dw, W)
                a_row = x_row + (kd * dd * xs_d + kh * dh * xs_h + kw * dw * xs_w)
            else:
                i_d, ok_d = _tap(od, kd, D, sd, pd, dd)
                i_h, ok_h = _tap(oh, kh, H, sh, ph, dh)
                i_w, ok_w = _tap(ow, kw, W, sw, pw, dw)
                ok = in_m & ok_d & ok_h & ok_w
                a_row = x_row + (i_d // UP_D) * xs_d + (i_h // UP_H) * xs_h + (i_w // UP_W) * xs_w
            ck = c0 + rk
            if A_TILE:
                a_ptrs = a_tile + (kd * dd * xs_d + kh * dh * xs_h + kw * dw * xs_w + c0 * xs_c)
            else:
                a_ptrs = a_row[:, None] + ck[None, :] * xs_c
            b_ptrs = w_base[None, :] + (kd * ws_d + kh * ws_h + kw * ws_w) + ck[:, None] * ws_c
            if B_DESC:
                a = load_operand(a_ptrs, ok[:, None], DOT)
                b = _dot_operand(w_desc.load([first_n, tap * C_G + c0]).T, DOT)
            elif EVEN_C:
                a = load_operand(a_ptrs, ok[:, None], DOT)
                b = load_operand(b_ptrs, in_n[None, :], DOT)
            else:
                in_k = ck < C_G
                a = load_operand(a_ptrs, ok[:, None] & in_k[None, :], DOT)
                b = load_operand(b_ptrs, in_k[:, None] & in_n[None, :], DOT)
            acc = _mma(a, b, acc, IEEE)
            tap, c0, kw, kh, kd = _next_step(tap, c0, kw, kh, kd, C_G, BLOCK_K, KW, KH)
    o = g * O_G + rn
    mask = in_m[:, None] & in_n[None, :]
    o_ptrs = out + (n * os_n + od * os_d + oh * os_h + ow * os_w)[:, None] + (o * os_c)[None, :]
    if SPLIT_K > 1:
        tl.store(o_ptrs + tl.program_id(2).to(rm.dtype) * split_stride, acc, mask=mask)
    else:
        if HAS_BIAS:
            acc += widen(tl.load(bias + o, mask=in_n, other=0.0), tl.float32)[None, :]
        r_ptrs = res + (n * rs_n + od * rs_d + oh * rs_h + ow * rs_w)[:, None] + (o * rs_c)[None, :]
        acc = epilogue(acc, r_ptrs, mask, ACTIVATION, HAS_RES)
        tl.store(o_ptrs, narrow(acc, out.dtype.element_ty), mask=mask)


@triton.jit
def _window_start(o, size, out_size, stride, pad, ADAPTIVE: tl.constexpr):
    """Where output o's window starts, and where it ends (adaptive windows; else unused)."""
    if ADAPTIVE:
        start = (o * size) // out_size
        end = ((o + 1) * size + out_size - 1) // out_size
    else:
        start = o * stride - pad
        end = start
    return start, end


@triton.jit
def _window_count(start, end, size, k, pad, ADAPTIVE: tl.constexpr, INCLUDE_PAD: tl.constexpr):
    """The elements of a window an average divides by along one dim."""
    if ADAPTIVE:
        count = end - start
    elif INCLUDE_PAD:
        count = tl.minimum(start + k, size + pad) - start
    else:
        count = tl.minimum(start + k, size) - tl.maximum(start, 0)
    return count


@triton.jit
def window_kernel(
    x, w, bias, out, indices, res,
    C, D, H, W, OD, OH, OW, KD, KH, KW, MULT,
    sd, sh, sw, pd, ph, pw, dd, dh, dw, DIVISOR,
    xs_n, xs_c, xs_d, xs_h, xs_w,
    ws_c, ws_d, ws_h, ws_w,
    os_n, os_c, os_d, os_h, os_w,
    rs_n, rs_c, rs_d, rs_h, rs_w,
    MODE: tl.constexpr, ADAPTIVE: tl.constexpr, INCLUDE_PAD: tl.constexpr, HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr, HAS_RES: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_W: tl.constexpr,
):
    """Grid: (N * OD * OH, tiles of OW, tiles of output channels). MODE: DEPTHWISE (output
    channel c reads input channel c // MULT with its own taps), MAX (value and flat index) or AVG.
    DIVISOR > 0 overrides an average's count. Depthwise takes conv_gemm_kernel's epilogue."""
    row = tl.program_id(0).to(tl.int64)
    oh = row % OH
    od = (row // OH) % OD
    n = row // (OH * OD)
    ow = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    oc = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    in_w = ow < OW
    in_c = oc < C * MULT
    ic = (oc // MULT).to(tl.int64)
    # the row's depth and height as vectors over the width: the interpreter mishandles a mask
    # combined from a scalar and a tensor condition
    zero = ow * 0
    start_d, end_d = _window_start(od + zero, D, OD, sd, pd, ADAPTIVE)
    start_h, end_h = _window_start(oh + zero, H, OH, sh, ph, ADAPTIVE)
    start_w, end_w = _window_start(ow, W, OW, sw, pw, ADAPTIVE)
    x_row = x + n * xs_n + ic[:, None] * xs_c
    if MODE == _MAX:
        acc = tl.full((BLOCK_C, BLOCK_W), float("-inf"), tl.float32)
        best = tl.full((BLOCK_C, BLOCK_W), -1, tl.int64)
    else:
        acc = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    for kd in range(0, KD):
        i_d = start_d + kd * dd
        ok_d = (i_d >= 0) & (i_d < D)
        if ADAPTIVE:
            ok_d = ok_d & (i_d < end_d)
        for kh in range(0, KH):
            i_h = start_h + kh * dh
            ok_h = ok_d & (i_h >= 0) & (i_h < H)
            if ADAPTIVE:
                ok_h = ok_h & (i_h < end_h)
            for kw in range(0, KW):
                i_w = start_w + kw * dw
                ok_w = in_w & (i_w >= 0) & (i_w < W)
                if ADAPTIVE:
                    ok_w = ok_w & (i_w < end_w)
                ok = in_c[:, None] & (ok_w & ok_h)[None, :]
                v = widen(tl.load(x_row + (i_d * xs_d + i_h * xs_h + i_w * xs_w)[None, :], mask=ok, other=0.0),
                          tl.float32)
                if MODE == _DEPTHWISE:
                    tap = widen(tl.load(w + oc * ws_c + kd * ws_d + kh * ws_h + kw * ws_w, mask=in_c, other=0.0),
                                tl.float32)
                    acc += v * tap[:, None]
                elif MODE == _MAX:
                    flat = (i_d * H + i_h) * W + i_w
                    take = ok & ((v > acc) | ((v != v) & (acc == acc)) | (best < 0))
                    acc = tl.where(take, v, acc)
                    best = tl.where(take, flat[None, :], best)
                else:
                    acc += v
    if MODE == _AVG:
        if DIVISOR > 0:
            acc = acc / DIVISOR
        else:
            count = (_window_count(start_d, end_d, D, KD, pd, ADAPTIVE, INCLUDE_PAD)
                     * _window_count(start_h, end_h, H, KH, ph, ADAPTIVE, INCLUDE_PAD)
                     * _window_count(start_w, end_w, W, KW, pw, ADAPTIVE, INCLUDE_PAD))
            acc = acc / count.to(tl.float32)[None, :]
    if HAS_BIAS:
        acc += widen(tl.load(bias + oc, mask=in_c, other=0.0), tl.float32)[:, None]
    offsets = n * os_n + od * os_d + oh * os_h + (oc.to(tl.int64) * os_c)[:, None] + (ow * os_w)[None, :]
    mask = in_c[:, None] & in_w[None, :]
    if MODE == _DEPTHWISE:
        r_ptrs = res + n * rs_n + od * rs_d + oh * rs_h + (oc.to(tl.int64) * rs_c)[:, None] + (ow * rs_w)[None, :]
        acc = epilogue(acc, r_ptrs, mask, ACTIVATION, HAS_RES)
    tl.store(out + offsets, narrow(acc, out.dtype.element_ty), mask=mask)
    if MODE == _MAX:
        tl.store(indices + offsets, best, mask=mask)


@triton.jit
def overlap_add_kernel(
    cols, bias, out, O, L, OL, K, stride, pad, dilation,
    cs_n, cs_o, cs_k, cs_l, os_n, os_o, os_l,
    HAS_BIAS: tl.constexpr, BLOCK_O: tl.constexpr, BLOCK_L: tl.constexpr,
):
    """out[n, o, t] = sum over taps k of cols[n, o, k, i] where i * stride + k * dilation - pad == t
    (col2im of strided frames, istft's: each output gathers its taps, no atomics).
    Grid: (N, tiles of OL, tiles of O)."""
    n = tl.program_id(0).to(tl.int64)
    t = tl.program_id(1) * BLOCK_L + tl.arange(0, BLOCK_L)
    o = tl.program_id(2) * BLOCK_O + tl.arange(0, BLOCK_O)
    in_t = t < OL
    in_o = o < O
    acc = tl.zeros((BLOCK_O, BLOCK_L), dtype=tl.float32)
    base = cols + n * cs_n + (o.to(tl.int64) * cs_o)[:, None]
    for k in range(0, K):
        num = t + pad - k * dilation
        i = num // stride
        ok = in_t & (num >= 0) & (num - i * stride == 0) & (i < L)
        v = tl.load(base + k * cs_k + (i * cs_l)[None, :], mask=in_o[:, None] & ok[None, :], other=0.0)
        acc += widen(v, tl.float32)
    if HAS_BIAS:
        acc += widen(tl.load(bias + o, mask=in_o, other=0.0), tl.float32)[:, None]
    ptrs = out + n * os_n + (o.to(tl.int64) * os_o)[:, None] + (t * os_l)[None, :]
    tl.store(ptrs, narrow(acc, out.dtype.element_ty), mask=in_o[:, None] & in_t[None, :])
