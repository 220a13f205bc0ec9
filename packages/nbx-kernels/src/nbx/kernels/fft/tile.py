"""A whole row of N = N1 x N2 points in one program, as two dense DFT products on the matrix unit
(the four-step, Bailey's decomposition): one read of the row and one write of its spectrum.

With n = N2 n1 + n2 and k = k1 + N1 k2, X[k] = sum_n2 w_N2^(n2 k2) w_N^(n2 k1) sum_n1 w_N1^(n1 k1)
x[N2 n1 + n2]. A program takes ROWS rows at once, read as the [ROWS, N2, N1] block A (one wide
load of contiguous rows; the n1 axis last so that the first DFT is a product on the right):
B = A F1 over [ROWS N2, N1] (an N1-point DFT of each column), B times the twiddles w_N^(n2 k1),
then the block seen as [ROWS, N1, N2] (a permute: the layout conversion a product's operand takes
anyway), C = B F2 over [ROWS N1, N2], C[r, k1, k2] stored at bin k1 + N1 k2 (the compiler's
coalescing pass stages the transposed store through shared memory). The rows stacked in the
products' M dimension make them tall (ROWS x 16 to 64 rows: Hopper's warpgroup products take
M >= 64) where one row a product (M = N1, 16) ran the small synchronous MMA, serially a row, one
row's load in flight, 254 registers and spills (ptxas, sm_90, 1024 points, tf32x3). A complex
product by a constant matrix is three real tl.dot's (Gauss's), input_precision a certified choice:
"ieee" (exact float32 products) or "tf32x3" (the tensor cores, three TF32 products whose error is
float32's). The DFT matrices and twiddles are formed once a program from exact integer phases.
Dims pad to powers of two of at least 16 (tl.dot's smallest); the padded entries of the matrices
are zero, so any N1, N2 <= 64 serve.

A real row (rfft, HALF) needs bins 0..N/2 only: with N2 even, k2 < N2 / 2 gives bins 0..N/2 - 1,
the Nyquist bin N/2 = sum_n (-1)^n x[n] a reduction; B = A F1 of a real A is two products, C half
the columns. irfft_tile_kernel runs the same steps backwards on a half spectrum.

A longer row (N = R M, M a tile's row) first takes one or two column passes (fft_column_kernel):
the R-point DFT of each column of the row read as [R, M] (k1 of n1, strided M apart), times
w_N^(k1 m), written in place of the columns (one read, one write); each [k1, :] is then an M-point
row whose bin k is the long row's k1 + R k: the tile stores it there. Its product too stacks the
BLOCK_M columns in M: [BLOCK_M, R] times the R-point DFT matrix.
"""
import triton
import triton.language as tl

from .kernel import _REAL, _REAL_PAIRS, _root


@triton.jit
def _dft_matrix(r, c, R_LIMIT: tl.constexpr, C_LIMIT: tl.constexpr, PERIOD: tl.constexpr, SIGN: tl.constexpr):
    """cos and sin of SIGN 2 pi r c / PERIOD for r < R_LIMIT, c < C_LIMIT; zero in the padding."""
    q = (r[:, None] * c[None, :]) % PERIOD
    cos, sin = _root(q, PERIOD + 0 * q, SIGN)
    inside = (r < R_LIMIT)[:, None] & (c < C_LIMIT)[None, :]
    return tl.where(inside, cos, 0.0), tl.where(inside, sin, 0.0)


@triton.jit
def _tf32(x):
    """x as a TF32 value (its low 13 mantissa bits dropped) and the float32 rest, exact: x = hi + lo."""
    hi = (x.to(tl.uint32, bitcast=True) & 0xFFFFE000).to(tl.float32, bitcast=True)
    return hi, x - hi


@triton.jit
def _dot(a, f, PRECISION: tl.constexpr):
    """a f, f a constant matrix: exact float32 products (ieee), or three TF32 products of the parts
    (tf32x3: a_hi f_lo + a_lo f_hi + a_hi f_hi chained in one accumulator, the parts split here
    once a value so that a program's products share them)."""
    if PRECISION == "ieee":
        return tl.dot(a, f, input_precision="ieee")
    a_hi, a_lo = _tf32(a)
    f_hi, f_lo = _tf32(f)
    acc = tl.dot(a_hi, f_lo, input_precision="tf32")
    acc = tl.dot(a_lo, f_hi, acc, input_precision="tf32")
    return tl.dot(a_hi, f_hi, acc, input_precision="tf32")


@triton.jit
def _cdot(ar, ai, fr, fi, PRECISION: tl.constexpr):
    """(ar + i ai)(fr + i fi), f a constant matrix, as three real products (Gauss's): (ar + ai) fr
    less ai (fr + fi), and plus ar (fi - fr); a quarter of the four-product form's work saved."""
    both = _dot(ar + ai, fr, PRECISION)
    re = both - _dot(ai, fr + fi, PRECISION)
    im = both + _dot(ar, fi - fr, PRECISION)
    return re, im


@triton.jit
def _turn(re, im, cos, sin):
    """(re + i im)(cos + i sin)."""
    return re * cos - im * sin, re * sin + im * cos


@triton.jit
def _pairs(src, offsets, mask):
    """The complex values at float offsets `offsets` (pairs: re at 2 t, im at 2 t + 1), as float32."""
    values = tl.load(src + offsets, mask=mask, other=0.0).to(tl.float32)
    return tl.split(values)


@triton.jit
def _rows_in(src, base, t, inside, shape, src_len, live, LOAD: tl.constexpr):
    """The samples of the rows at float offsets base ([ROWS, 1, 1]) as float32: a real row's
    [ROWS, n2, n1] (LOAD REAL), else their complex pairs [ROWS, n2, n1, 2]; nothing read where
    live is false (zeros)."""
    if LOAD == _REAL:
        x = tl.load(src + base + t, mask=inside & live, other=0.0).to(tl.float32)
    else:
        pairs = 2 * t[:, :, :, None] + tl.arange(0, 2)[None, None, None, :]
        if LOAD == _REAL_PAIRS:    # a real row of src_len values read as pairs (rfft's half length)
            stored = shape[:, :, :, None] & (pairs < src_len)
        else:
            stored = inside[:, :, :, None]
        x = tl.load(src + base[:, :, :, None] + pairs, mask=stored & live, other=0.0).to(tl.float32)
    return x


@triton.jit(do_not_specialize=["rows", "src_len"])
def fft_tile_kernel(src, dst, window, rows, src_len, src_row, dst_row, scale, N1: tl.constexpr, N2: tl.constexpr,
                    P1: tl.constexpr, P2: tl.constexpr, K2: tl.constexpr, PK2: tl.constexpr, SIGN: tl.constexpr,
                    LOAD: tl.constexpr, HALF: tl.constexpr, ROWS: tl.constexpr, PRECISION: tl.constexpr,
                    GA: tl.constexpr, GB: tl.constexpr, WINDOWED: tl.constexpr, STEPS: tl.constexpr):
    """STEPS groups of ROWS rows a program, the next group read before the products of this one:
    complex pairs (a real row, LOAD REAL; a real row as pairs, REAL_PAIRS) of src_len stored values,
    the first N1 N2 transformed; writes bins k1 + N1 k2 for k2 < K2 as pairs (HALF: K2 = N2 / 2 and
    the Nyquist bin N / 2 too, rfft's N / 2 + 1 bins). After column passes (fft_column_kernel) of
    radices GA and GB a row s is the sub-row (r, k1, k2) of a longer row r, s = (r GA + k1) GB + k2,
    its bin k that row's k1 + GA k2 + GA GB k: stored there, dst_row apart a row r. WINDOWED (a real
    row): each sample times window[n] as it is read (stft's frames, src_row = the hop apart in the
    signal: no frames in memory)."""
    N: tl.constexpr = N1 * N2
    a = tl.arange(0, P1)                                  # n1 of the input, k1 of the output
    b = tl.arange(0, P2)                                  # n2
    c = tl.arange(0, PK2)                                 # k2
    first = tl.program_id(0).to(tl.int64) * (STEPS * ROWS) + tl.arange(0, ROWS)
    f1r, f1i = _dft_matrix(a, a, N1, N1, N1, SIGN)        # [n1, k1] (symmetric)
    f2r, f2i = _dft_matrix(b, c, N2, K2, N2, SIGN)        # [n2, k2]
    tr, ti = _dft_matrix(b, a, N2, N1, N, SIGN)           # the twiddles [n2, k1]
    t = (a[None, :] * N2 + b[:, None])[None, :, :]        # each sample's index, [1, n2, n1]
    shape = ((a < N1)[None, :] & (b < N2)[:, None])[None, :, :]
    inside = shape & (t < src_len)
    if WINDOWED:
        w = tl.load(window + t, mask=inside, other=0.0)
    k = (a[:, None] + N1 * c[None, :])[None, :, :, None]            # each output's bin, [1, k1, k2, 1]
    keep = ((a < N1)[:, None] & (c < K2)[None, :])[None, :, :, None]
    # past the last row the last program redoes the last row (the same values written again): no row masks
    ahead = _rows_in(src, tl.minimum(first, rows - 1)[:, None, None] * src_row, t, inside, shape, src_len, True, LOAD)
    for step in range(STEPS):
        row = tl.minimum(first + step * ROWS, rows - 1)[:, None, None]
        here = ahead
        ahead = _rows_in(src, tl.minimum(first + (step + 1) * ROWS, rows - 1)[:, None, None] * src_row, t, inside,
                         shape, src_len, step + 1 < STEPS, LOAD)
        if LOAD == _REAL:
            xr = here * w if WINDOWED else here                       # [ROWS, n2, n1]
            flat = tl.reshape(xr, (ROWS * P2, P1))
            br = _dot(flat, f1r, PRECISION)
            bi = _dot(flat, f1i, PRECISION)
        else:
            xr, xi = tl.split(here)
            br, bi = _cdot(tl.reshape(xr, (ROWS * P2, P1)), tl.reshape(xi, (ROWS * P2, P1)), f1r, f1i, PRECISION)
        br, bi = _turn(tl.reshape(br, (ROWS, P2, P1)), tl.reshape(bi, (ROWS, P2, P1)), tr[None, :, :], ti[None, :, :])
        br = tl.reshape(tl.permute(br, (0, 2, 1)), (ROWS * P1, P2))     # [ROWS, k1, n2]
        bi = tl.reshape(tl.permute(bi, (0, 2, 1)), (ROWS * P1, P2))
        cr, ci = _cdot(br, bi, f2r, f2i, PRECISION)
        inner = row % (GA * GB)
        out = dst + (row // (GA * GB) * dst_row + 2 * (inner // GB + GA * (inner % GB)))[:, :, :, None]
        values = tl.join(tl.reshape(cr, (ROWS, P1, PK2)), tl.reshape(ci, (ROWS, P1, PK2))) * scale
        tl.store(out + 2 * (GA * GB) * k + tl.arange(0, 2)[None, None, None, :], values, mask=keep)
        if HALF:   # the Nyquist bin, real: sum_n (-1)^n x[n]
            nyquist = tl.sum(tl.sum(tl.where(t % 2 == 1, -xr, xr), axis=2), axis=1)
            ends = dst + tl.reshape(row, (ROWS,)) * dst_row + N
            tl.store(ends, nyquist * scale)
            tl.store(ends + 1, nyquist * 0.0)


@triton.jit(do_not_specialize=["rows", "src_len"])
def irfft_tile_kernel(src, dst, rows, src_len, src_row, dst_row, scale, N1: tl.constexpr, N2: tl.constexpr,
                      P1: tl.constexpr, P2: tl.constexpr, K2: tl.constexpr, PK2: tl.constexpr, ROWS: tl.constexpr,
                      PRECISION: tl.constexpr, STEPS: tl.constexpr):
    """irfft of N = N1 N2 points (N2 even, K2 = N2 / 2) from a half spectrum of src_len stored bins
    (the rest zero): x[n] = Re sum_(k < N/2) Y[k] w^(n k) + (-1)^n Re X[N/2], Y[0] = Re X[0] and
    Y[k] = 2 X[k]. STEPS groups of ROWS rows a program (the next read before this one's products),
    Y read as the [ROWS, k1, k2] block (k = k1 + N1 k2), B = Y G2 over [ROWS N1, K2] (k2 to n2), the
    twiddles w_N^(k1 n2), then seen as [ROWS, n2, k1]: x = Re(B G1) over [ROWS N2, N1] (k1 to n1),
    stored at n = N2 n1 + n2."""
    N: tl.constexpr = N1 * N2
    a = tl.arange(0, P1)                                  # k1 of the input, n1 of the output
    b = tl.arange(0, P2)                                  # n2
    c = tl.arange(0, PK2)                                 # k2
    first = tl.program_id(0).to(tl.int64) * (STEPS * ROWS) + tl.arange(0, ROWS)
    g2r, g2i = _dft_matrix(c, b, K2, N2, N2, 1)           # [k2, n2]
    tr, ti = _dft_matrix(a, b, N1, N2, N1 * N2, 1)        # the twiddles [k1, n2]
    g1r, g1i = _dft_matrix(a, a, N1, N1, N1, 1)           # [k1, n1] (symmetric)
    k = (a[:, None] + N1 * c[None, :])[None, :, :, None]  # [1, k1, k2, 1]
    bins = 2 * k + tl.arange(0, 2)[None, None, None, :]
    inside = ((a < N1)[:, None] & (c < K2)[None, :])[None, :, :, None] & (k < src_len)
    weight = tl.where(bins == 1, 0.0, tl.where(k == 0, 1.0, 2.0))   # Y[0] = Re X[0]: its imaginary part dropped
    t = (a[None, :] * N2 + b[:, None])[None, :, :]        # [1, n2, n1]
    stored = ((a < N1)[None, :] & (b < N2)[:, None])[None, :, :]
    ahead = tl.load(src + tl.minimum(first, rows - 1)[:, None, None, None] * src_row + bins, mask=inside, other=0.0)
    for step in range(STEPS):
        row = tl.minimum(first + step * ROWS, rows - 1)[:, None, None]
        here = ahead
        ahead = tl.load(src + tl.minimum(first + (step + 1) * ROWS, rows - 1)[:, None, None, None] * src_row + bins,
                        mask=inside & (step + 1 < STEPS), other=0.0)
        yr, yi = tl.split(here * weight)
        br, bi = _cdot(tl.reshape(yr, (ROWS * P1, PK2)), tl.reshape(yi, (ROWS * P1, PK2)), g2r, g2i, PRECISION)
        br, bi = _turn(tl.reshape(br, (ROWS, P1, P2)), tl.reshape(bi, (ROWS, P1, P2)), tr[None, :, :], ti[None, :, :])
        br = tl.reshape(tl.permute(br, (0, 2, 1)), (ROWS * P2, P1))     # [ROWS, n2, k1]
        bi = tl.reshape(tl.permute(bi, (0, 2, 1)), (ROWS * P2, P1))
        x = _dot(br, g1r, PRECISION) - _dot(bi, g1i, PRECISION)
        nyquist = tl.load(src + row * src_row + N, mask=0 * row + N // 2 < src_len, other=0.0)
        x = tl.reshape(x, (ROWS, P2, P1)) + tl.where(t % 2 == 1, -nyquist, nyquist)
        tl.store(dst + row * dst_row + t, x * scale, mask=stored)


@triton.jit(do_not_specialize=["src_len"])
def fft_column_kernel(src, dst, src_len, src_row, M: tl.constexpr, R: tl.constexpr, RP: tl.constexpr,
                      BLOCK_M: tl.constexpr, SIGN: tl.constexpr, LOAD: tl.constexpr, PRECISION: tl.constexpr):
    """A column pass of an N = R M point row (program (row, block)): Y[m, k1] = w_N^(k1 m)
    sum_n1 x[n1 M + m] w_R^(n1 k1) for the block's BLOCK_M columns m, as one [BLOCK_M, RP] x [RP, RP]
    complex product (the columns stacked in M); reads src_len stored values a row (complex pairs,
    a real row or a real row as pairs), writes the row's 2 N floats of pairs (dst rows 2 N apart)."""
    row = tl.program_id(0).to(tl.int64)
    r = tl.arange(0, RP)
    m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    t = r[None, :] * M + m[:, None]                           # [m, n1]
    inside = (r < R)[None, :] & (m < M)[:, None]
    fr, fi = _dft_matrix(r, r, R, R, R, SIGN)                 # [n1, k1] (symmetric)
    tr, ti = _dft_matrix(m, r, M, R, R * M, SIGN)             # the twiddles [m, k1]
    part = tl.arange(0, 2)[None, None, :]
    if LOAD == _REAL:
        xr = tl.load(src + row * src_row + t, mask=inside & (t < src_len), other=0.0).to(tl.float32)
        yr = _dot(xr, fr, PRECISION)
        yi = _dot(xr, fi, PRECISION)
    else:
        pairs = 2 * t[:, :, None] + part
        if LOAD == _REAL_PAIRS:
            stored = pairs < src_len
        else:
            stored = t[:, :, None] < src_len
        xr, xi = _pairs(src + row * src_row, pairs, inside[:, :, None] & stored)
        yr, yi = _cdot(xr, xi, fr, fi, PRECISION)
    yr, yi = _turn(yr, yi, tr, ti)
    tl.store(dst + row * (2 * R * M) + 2 * t[:, :, None] + part, tl.join(yr, yi), mask=inside[:, :, None])
