"""The resampling kernels: interpolate's (nearest, nearest-exact, (bi/tri)linear and bicubic) and
grid_sample's (bilinear and nearest, zeros / border / reflection padding).

Every mode is separable: along each spatial dim, output position o reads TAPS input positions
(1: nearest, 2: linear, 4: cubic) with weights computed in float32 from o as torch computes them
(the nearest index as floorf(o * scale) in float32, so ties fall the same way). A program owns a
BLOCK_C x BLOCK_W tile of one output row (sample, depth, height): channels by width, the layout
of the input decides which is contiguous.
"""
import triton
import triton.language as tl

from ..elementwise.casts import narrow, widen

NEAREST, NEAREST_EXACT, LINEAR, CUBIC = 0, 1, 2, 3  # a dim's MODE (host side)
_NEAREST, _NEAREST_EXACT, _LINEAR = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)  # read inside kernels
CUBIC_A = tl.constexpr(-0.75)  # torch's bicubic coefficient


@triton.jit
def _cubic_weight(t, j: tl.constexpr):
    """The weight of tap j (0..3, at i0 - 1 + j) at fraction t (torch's A = -0.75)."""
    if j == 0:
        s = t + 1.0
        w = ((CUBIC_A * s - 5.0 * CUBIC_A) * s + 8.0 * CUBIC_A) * s - 4.0 * CUBIC_A
    elif j == 1:
        w = ((CUBIC_A + 2.0) * t - (CUBIC_A + 3.0)) * t * t + 1.0
    elif j == 2:
        s = 1.0 - t
        w = ((CUBIC_A + 2.0) * s - (CUBIC_A + 3.0)) * s * s + 1.0
    else:
        s = 2.0 - t
        w = ((CUBIC_A * s - 5.0 * CUBIC_A) * s + 8.0 * CUBIC_A) * s - 4.0 * CUBIC_A
    return w


@triton.jit
def _source(o, j: tl.constexpr, size, scale, MODE: tl.constexpr, ALIGN: tl.constexpr):
    """(input index, weight) of tap j of output position o along one dim."""
    of = o.to(tl.float32)
    if MODE == _NEAREST or MODE == _NEAREST_EXACT:
        if MODE == _NEAREST_EXACT:
            of = of + 0.5
        i = tl.minimum(tl.floor(of * scale).to(tl.int32), size - 1)
        w = of * 0.0 + 1.0
    else:
        if ALIGN:
            src = of * scale
        else:
            src = (of + 0.5) * scale - 0.5
        if MODE == _LINEAR:
            src = tl.maximum(src, 0.0)
            i0 = tl.minimum(tl.floor(src).to(tl.int32), size - 1)
            frac = src - i0.to(tl.float32)
            if j == 0:
                i = i0
                w = 1.0 - frac
            else:
                i = tl.minimum(i0 + 1, size - 1)
                w = frac
        else:
            i0 = tl.floor(src).to(tl.int32)
            w = _cubic_weight(src - i0.to(tl.float32), j)
            i = tl.minimum(tl.maximum(i0 - 1 + j, 0), size - 1)
    return i, w


@triton.jit
def resample_kernel(
    x, out, C, D, H, W, OD, OH, OW, scale_d, scale_h, scale_w,
    xs_n, xs_c, xs_d, xs_h, xs_w, os_n, os_c, os_d, os_h, os_w,
    MODE_D: tl.constexpr, MODE_H: tl.constexpr, MODE_W: tl.constexpr, ALIGN: tl.constexpr, TAPS_D: tl.constexpr, TAPS_H: tl.constexpr, TAPS_W: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_W: tl.constexpr,
):
    """Grid: (N * OD * OH, tiles of OW, tiles of C). A leading dim the input lacks (D of a 2-D
    resampling) takes one nearest tap."""
    row = tl.program_id(0)
    oh = row % OH
    od = (row // OH) % OD
    n = (row // (OH * OD)).to(tl.int64)
    ow = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    c = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (c < C)[:, None] & (ow < OW)[None, :]
    base = x + n * xs_n + (c.to(tl.int64) * xs_c)[:, None]
    acc = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    for jd in tl.static_range(TAPS_D):
        i_d, w_d = _source(od, jd, D, scale_d, MODE_D, ALIGN)
        for jh in tl.static_range(TAPS_H):
            i_h, w_h = _source(oh, jh, H, scale_h, MODE_H, ALIGN)
            for jw in tl.static_range(TAPS_W):
                i_w, w_w = _source(ow, jw, W, scale_w, MODE_W, ALIGN)
                v = widen(tl.load(base + (i_d * xs_d + i_h * xs_h) + (i_w * xs_w)[None, :], mask=mask, other=0.0),
                          tl.float32)
                acc += v * (w_d * w_h * w_w)[None, :]
    ptrs = out + n * os_n + od * os_d + oh * os_h + (c.to(tl.int64) * os_c)[:, None] + (ow * os_w)[None, :]
    tl.store(ptrs, narrow(acc, out.dtype.element_ty), mask=mask)


# ---- grid_sample ------------------------------------------------------------------------------------

ZEROS, BORDER, REFLECTION = 0, 1, 2  # grid_sample's PADDING (host side)
_BORDER, _REFLECTION = tl.constexpr(1), tl.constexpr(2)


@triton.jit
def _reflect(coord, twice_low, twice_high):
    """torch's reflect_coordinates (twice_low < twice_high): coord into [twice_low / 2, twice_high / 2]."""
    low = twice_low * 0.5
    span = (twice_high - twice_low) * 0.5
    distance = tl.abs(coord - low)
    flips = tl.floor(tl.div_rn(distance, span))  # rounded as the host divides (nearest's ties)
    extra = distance - flips * span
    odd = (flips.to(tl.int32) % 2) != 0
    return tl.where(odd, span - extra + low, extra + low)


@triton.jit
def _grid_source(g, size, PADDING: tl.constexpr, ALIGN: tl.constexpr):
    """The float32 source coordinate of normalized grid values g along a dim of size pixels,
    held to [-2, size + 1] (outside it every tap reads the padding: the int casts stay in range)."""
    fsize = tl.cast(size, tl.float32)   # size may be a constexpr 1 (Triton specializes it)
    if ALIGN:
        coord = (g + 1.0) * 0.5 * (fsize - 1.0)
    else:
        coord = ((g + 1.0) * fsize - 1.0) * 0.5
    if PADDING == _REFLECTION:
        if ALIGN:
            if size > 1:
                coord = _reflect(coord, 0.0, 2.0 * (fsize - 1.0))
            else:
                coord = coord * 0.0
        else:
            coord = _reflect(coord, -1.0, 2.0 * fsize - 1.0)
    if PADDING == _BORDER or PADDING == _REFLECTION:
        coord = tl.minimum(tl.maximum(coord, 0.0), fsize - 1.0)
    return tl.minimum(tl.maximum(coord, -2.0), fsize + 1.0)


@triton.jit
def _nearest(coord):
    """coord rounded half to even (nearbyint), as an int32."""
    f = tl.floor(coord)
    d = coord - f
    i = f.to(tl.int32)
    return i + ((d > 0.5) | ((d == 0.5) & ((i & 1) != 0))).to(tl.int32)


@triton.jit
def _tap(base, yi, xi, H, W, xs_h, xs_w, c_ok, in_p):
    """[BLOCK_P, BLOCK_C] float32 values at integer (yi, xi), 0 outside the input."""
    ok = in_p & (xi >= 0) & (xi < W) & (yi >= 0) & (yi < H)
    offsets = yi.to(tl.int64) * xs_h + xi.to(tl.int64) * xs_w
    return widen(tl.load(base + offsets[:, None], mask=ok[:, None] & c_ok[None, :], other=0.0), tl.float32)


@triton.jit
def grid_sample_kernel(
    x, grid, out, N, C, H, W, OH, OW,
    xs_n, xs_c, xs_h, xs_w, gs_n, gs_h, gs_w, gs_k, os_n, os_c, os_h, os_w,
    NEAREST_MODE: tl.constexpr, PADDING: tl.constexpr, ALIGN: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """A program owns BLOCK_P output pixels (of the flat N * OH * OW) by BLOCK_C channels: each
    pixel's grid point is read and turned into its taps once, then every channel of the tile is
    gathered at those taps (a channels-last input reads each tap's channels contiguously).
    Grid: (tiles of N * OH * OW, tiles of C)."""
    p = tl.program_id(0).to(tl.int64) * BLOCK_P + tl.arange(0, BLOCK_P)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    in_p = p < N * OH * OW
    c_ok = c < C
    ow = p % OW
    oh = (p // OW) % OH
    n = p // (OW * OH)
    g_ptrs = grid + n * gs_n + oh * gs_h + ow * gs_w
    gx = widen(tl.load(g_ptrs, mask=in_p, other=0.0), tl.float32)
    gy = widen(tl.load(g_ptrs + gs_k, mask=in_p, other=0.0), tl.float32)
    ix = _grid_source(gx, W, PADDING, ALIGN)
    iy = _grid_source(gy, H, PADDING, ALIGN)
    base = x + (n * xs_n)[:, None] + (c.to(tl.int64) * xs_c)[None, :]
    if NEAREST_MODE:
        acc = _tap(base, _nearest(iy), _nearest(ix), H, W, xs_h, xs_w, c_ok, in_p)
    else:
        fx0 = tl.floor(ix)
        fy0 = tl.floor(iy)
        x0 = fx0.to(tl.int32)
        y0 = fy0.to(tl.int32)
        wx1 = (ix - fx0)[:, None]
        wy1 = (iy - fy0)[:, None]
        wx0 = 1.0 - wx1
        wy0 = 1.0 - wy1
        acc = _tap(base, y0, x0, H, W, xs_h, xs_w, c_ok, in_p) * wx0 * wy0
        acc += _tap(base, y0, x0 + 1, H, W, xs_h, xs_w, c_ok, in_p) * wx1 * wy0
        acc += _tap(base, y0 + 1, x0, H, W, xs_h, xs_w, c_ok, in_p) * wx0 * wy1
        acc += _tap(base, y0 + 1, x0 + 1, H, W, xs_h, xs_w, c_ok, in_p) * wx1 * wy1
    o_ptrs = out + (n * os_n + oh * os_h + ow * os_w)[:, None] + (c.to(tl.int64) * os_c)[None, :]
    tl.store(o_ptrs, narrow(acc, out.dtype.element_ty), mask=in_p[:, None] & c_ok[None, :])
