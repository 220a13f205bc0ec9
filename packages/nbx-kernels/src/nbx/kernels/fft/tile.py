"""A whole row of N = N1 x N2 points in one program, as two dense DFT products on the matrix unit
(the four-step, Bailey's decomposition): one read of the row and one write of its spectrum.

With n = N2 n1 + n2 and k = k1 + N1 k2, X[k] = sum_n2 w_N2^(n2 k2) w_N^(n2 k1) sum_n1 w_N1^(n1 k1)
x[N2 n1 + n2]: the row read as the [N1, N2] tile A (rows of N2 contiguous samples), B = F1 A (an
N1-point DFT of each column), B times the twiddles w_N^(k1 n2) (in registers), C = B F2 (an
N2-point DFT of each row of B), C[k1, k2] stored at bin k1 + N1 k2 (the transpose is the store's
layout, which Triton stages through shared memory). Each complex product is four real tl.dot's,
input_precision a certified choice: "ieee" (exact float32 products) or "tf32x3" (the tensor cores,
three TF32 products whose error is float32's). The DFT matrices and twiddles are formed once a
program from exact integer phases and serve its ROWS rows. Dims pad to powers of two of at least 16
(tl.dot's smallest); the padded entries of the matrices are zero, so any N1, N2 <= 64 serve.

A real row (rfft, HALF) needs bins 0..N/2 only: with N2 even, k2 < N2 / 2 gives bins 0..N/2 - 1,
the Nyquist bin N/2 = sum_n (-1)^n x[n] a reduction; B = F1 A of a real A is two products, C half
the columns. irfft_tile_kernel runs the same steps backwards on a half spectrum.

A longer row (N = R M, M a tile's row) first takes one or two column passes (fft_column_kernel):
the R-point DFT of each column of the row read as [R, M] (k1 of n1, strided M apart), times
w_N^(k1 m), written in place of the columns (one read, one write); each [k1, :] is then an M-point
row whose bin k is the long row's k1 + R k: the tile stores it there.
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
def _cdot(ar, ai, br, bi, PRECISION: tl.constexpr):
    """(ar + i ai)(br + i bi) as four real products."""
    re = tl.dot(ar, br, input_precision=PRECISION) - tl.dot(ai, bi, input_precision=PRECISION)
    im = tl.dot(ar, bi, input_precision=PRECISION) + tl.dot(ai, br, input_precision=PRECISION)
    return re, im


@triton.jit(do_not_specialize=["rows", "src_len"])
def fft_tile_kernel(src, dst, window, rows, src_len, src_row, dst_row, scale, N1: tl.constexpr, N2: tl.constexpr,
                    P1: tl.constexpr, P2: tl.constexpr, K2: tl.constexpr, PK2: tl.constexpr, SIGN: tl.constexpr,
                    LOAD: tl.constexpr, HALF: tl.constexpr, ROWS: tl.constexpr, PRECISION: tl.constexpr,
                    GA: tl.constexpr, GB: tl.constexpr, WINDOWED: tl.constexpr):
    """ROWS rows a program: complex pairs (a real row, LOAD REAL; a real row as pairs, REAL_PAIRS) of
    src_len stored values, the
    first N1 N2 transformed; writes bins k1 + N1 k2 for k2 < K2 as pairs (HALF: K2 = N2 / 2 and the
    Nyquist bin N / 2 too, rfft's N / 2 + 1 bins). After column passes (fft_column_kernel) of
    radices GA and GB a row s is the sub-row (r, k1, k2) of a longer row r, s = (r GA + k1) GB + k2,
    its bin k that row's k1 + GA k2 + GA GB k: stored there, dst_row apart a row r. WINDOWED (a
    real row): each sample times window[n] as it is read (stft's frames, src_row = the hop apart in
    the signal: no frames in memory)."""
    N: tl.constexpr = N1 * N2
    a = tl.arange(0, P1)                                  # n1 of the input, k1 of the output
    b = tl.arange(0, P2)                                  # n2
    c = tl.arange(0, PK2)                                 # k2
    f1r, f1i = _dft_matrix(a, a, N1, N1, N1, SIGN)        # [k1, n1]
    f2r, f2i = _dft_matrix(b, c, N2, K2, N2, SIGN)        # [n2, k2]
    tr, ti = _dft_matrix(a, b, N1, N2, N1 * N2, SIGN)     # the twiddles [k1, n2]
    t = a[:, None] * N2 + b[None, :]                      # each sample's index
    inside = (a < N1)[:, None] & (b < N2)[None, :]
    k = a[:, None] + N1 * c[None, :]                      # each output's bin
    keep = ((a < N1)[:, None] & (c < K2)[None, :])[:, :, None]
    part = tl.arange(0, 2)[None, None, :]
    if WINDOWED:
        w = tl.load(window + t, mask=inside & (t < src_len), other=0.0)
    for i in range(ROWS):
        # past the last row the last program redoes the last row (the same values written again): no masks
        row = tl.minimum(tl.program_id(0).to(tl.int64) * ROWS + i, rows - 1)
        if LOAD == _REAL:
            xr = tl.load(src + row * src_row + t, mask=inside & (t < src_len), other=0.0).to(tl.float32)
            if WINDOWED:
                xr = xr * w
            br = tl.dot(f1r, xr, input_precision=PRECISION)
            bi = tl.dot(f1i, xr, input_precision=PRECISION)
        else:
            if LOAD == _REAL_PAIRS:    # a real row of src_len values read as pairs (rfft's half length)
                stored = 2 * t[:, :, None] + part < src_len
            else:
                stored = t[:, :, None] < src_len
            pairs = tl.load(src + row * src_row + 2 * t[:, :, None] + part, mask=inside[:, :, None] & stored,
                            other=0.0)
            xr, xi = tl.split(pairs.to(tl.float32))
            br, bi = _cdot(f1r, f1i, xr, xi, PRECISION)
        br, bi = br * tr - bi * ti, br * ti + bi * tr
        cr, ci = _cdot(br, bi, f2r, f2i, PRECISION)
        inner = row % (GA * GB)
        out = dst + row // (GA * GB) * dst_row + 2 * (inner // GB + GA * (inner % GB))
        tl.store(out + 2 * (GA * GB) * k[:, :, None] + part, tl.join(cr, ci) * scale, mask=keep)
        if HALF:   # the Nyquist bin, real: sum_n (-1)^n x[n]
            nyquist = tl.sum(tl.sum(tl.where(t % 2 == 1, -xr, xr), axis=1), axis=0)
            tl.store(dst + row * dst_row + N, nyquist * scale)
            tl.store(dst + row * dst_row + N + 1, nyquist * 0.0)


@triton.jit(do_not_specialize=["rows", "src_len"])
def irfft_tile_kernel(src, dst, rows, src_len, src_row, dst_row, scale, N1: tl.constexpr, N2: tl.constexpr,
                      P1: tl.constexpr, P2: tl.constexpr, K2: tl.constexpr, PK2: tl.constexpr, ROWS: tl.constexpr,
                      PRECISION: tl.constexpr):
    """irfft of N = N1 N2 points (N2 even, K2 = N2 / 2) from a half spectrum of src_len stored bins
    (the rest zero): x[n] = Re sum_(k < N/2) Y[k] w^(n k) + (-1)^n Re X[N/2], Y[0] = Re X[0] and
    Y[k] = 2 X[k]. Y read as the [k1, k2] tile (k = k1 + N1 k2), B = Y G2 (k2 to n2), the twiddles
    w_N^(k1 n2), x = Re(G1 B) (k1 to n1), stored at n = N2 n1 + n2."""
    N: tl.constexpr = N1 * N2
    a = tl.arange(0, P1)                                  # k1 of the input, n1 of the output
    b = tl.arange(0, P2)                                  # n2
    c = tl.arange(0, PK2)                                 # k2
    g2r, g2i = _dft_matrix(c, b, K2, N2, N2, 1)           # [k2, n2]
    tr, ti = _dft_matrix(a, b, N1, N2, N1 * N2, 1)        # the twiddles [k1, n2]
    g1r, g1i = _dft_matrix(a, a, N1, N1, N1, 1)           # [n1, k1]
    k = a[:, None] + N1 * c[None, :]
    inside = (a < N1)[:, None] & (c < K2)[None, :] & (k < src_len)
    part = tl.arange(0, 2)[None, None, :]
    weight = tl.where(k[:, :, None] == 0, 1.0 - part, 2.0)   # Y[0] = Re X[0]: its imaginary part dropped
    t = a[:, None] * N2 + b[None, :]
    sign = tl.where(t % 2 == 1, -1.0, 1.0)
    stored = (a < N1)[:, None] & (b < N2)[None, :]
    for i in range(ROWS):
        # past the last row the last program redoes the last row (the same values written again): no masks
        row = tl.minimum(tl.program_id(0).to(tl.int64) * ROWS + i, rows - 1)
        y = tl.load(src + row * src_row + 2 * k[:, :, None] + part, mask=inside[:, :, None], other=0.0)
        yr, yi = tl.split(y * weight)
        br, bi = _cdot(yr, yi, g2r, g2i, PRECISION)
        br, bi = br * tr - bi * ti, br * ti + bi * tr
        x = tl.dot(g1r, br, input_precision=PRECISION) - tl.dot(g1i, bi, input_precision=PRECISION)
        nyquist = tl.load(src + row * src_row + N, mask=N // 2 < src_len, other=0.0)
        tl.store(dst + row * dst_row + t, (x + sign * nyquist) * scale, mask=stored)


@triton.jit(do_not_specialize=["src_len"])
def fft_column_kernel(src, dst, src_len, src_row, M: tl.constexpr, R: tl.constexpr, RP: tl.constexpr,
                      BLOCK_M: tl.constexpr, SIGN: tl.constexpr, LOAD: tl.constexpr, PRECISION: tl.constexpr):
    """A column pass of an N = R M point row (program (row, block)): Y[k1, m] = w_N^(k1 m)
    sum_n1 w_R^(n1 k1) x[n1 M + m] for the block's BLOCK_M columns m, as one [RP, RP] x [RP, BLOCK_M]
    complex product; reads src_len stored values a row (complex pairs, a real row or a real row as
    pairs), writes the row's 2 N floats of pairs (dst rows 2 N apart)."""
    row = tl.program_id(0).to(tl.int64)
    r = tl.arange(0, RP)
    m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    t = r[:, None] * M + m[None, :]
    inside = (r < R)[:, None] & (m < M)[None, :]
    fr, fi = _dft_matrix(r, r, R, R, R, SIGN)                 # [k1, n1]
    tr, ti = _dft_matrix(r, m, R, M, R * M, SIGN)             # the twiddles [k1, m]
    part = tl.arange(0, 2)[None, None, :]
    if LOAD == _REAL:
        xr = tl.load(src + row * src_row + t, mask=inside & (t < src_len), other=0.0).to(tl.float32)
        yr = tl.dot(fr, xr, input_precision=PRECISION)
        yi = tl.dot(fi, xr, input_precision=PRECISION)
    else:
        if LOAD == _REAL_PAIRS:
            stored = 2 * t[:, :, None] + part < src_len
        else:
            stored = t[:, :, None] < src_len
        pairs = tl.load(src + row * src_row + 2 * t[:, :, None] + part, mask=inside[:, :, None] & stored, other=0.0)
        xr, xi = tl.split(pairs.to(tl.float32))
        yr, yi = _cdot(fr, fi, xr, xi, PRECISION)
    yr, yi = yr * tr - yi * ti, yr * ti + yi * tr
    tl.store(dst + row * (2 * R * M) + 2 * t[:, :, None] + part, tl.join(yr, yi), mask=inside[:, :, None])
