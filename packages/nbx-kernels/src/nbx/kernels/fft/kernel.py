"""One Stockham (auto-sort) pass of a batched complex FFT, complex values as interleaved float32 pairs.

A transform of length n = R_1 x ... x R_P runs P passes (Bainville's formulation): pass p, with
ns = R_1 x ... x R_{p-1} points already combined, takes each of the n / R butterflies j, reads
its legs x[j + r n / R] (r < R), turns leg r by the twiddle w^(r (j mod ns)) with w the
(ns R)-th root of unity, takes their R-point DFT and writes leg s to
y[(j div ns) ns R + (j mod ns) + s ns]. The last pass leaves the spectrum in natural order: no
bit reversal pass. A program owns BLOCK_J consecutive butterflies of the rows' (rows x n / R)
(short rows share a program); the R-point DFT is a product by
the R x R DFT matrix (R_PAD, the next power of two, with the extra legs masked off), formed from
exact integer phases in float32.

The first pass may read a real row (rfft), a Hermitian half spectrum extended by conjugate
symmetry (irfft), or make Bluestein's chirp sequence itself; it may multiply what it read by the
chirp exp(i CHIRP_SIGN pi t^2 / chirp_n) or by a spectrum row (the convolution's pointwise
product). The last pass may multiply by the chirp again, scales (the norm mode) and stores complex
pairs or the real parts, only the first dst_len bins (rfft's n / 2 + 1).
"""
import triton
import triton.language as tl

PI = tl.constexpr(3.141592653589793)

# what the first pass reads
COMPLEX, REAL, HERMITIAN, CHIRP_SEQUENCE, REAL_PAIRS = 0, 1, 2, 3, 4
# what multiplies a value read (PRE) or written (POST)
NONE, CHIRP, SPECTRUM = 0, 1, 2
# what the last pass stores
PAIRS, REAL_PART = 0, 1
# the same codes as the kernels read them: Triton's compiler takes a global only as a tl.constexpr
_COMPLEX, _REAL, _HERMITIAN, _CHIRP_SEQUENCE, _REAL_PAIRS = (tl.constexpr(c) for c in range(5))
_NONE, _CHIRP, _SPECTRUM = (tl.constexpr(c) for c in range(3))
_PAIRS, _REAL_PART = tl.constexpr(0), tl.constexpr(1)


@triton.jit
def _root(q, period, SIGN: tl.constexpr):
    """cos and sin of SIGN 2 pi q / period for integers 0 <= q < period, the phase first reduced
    exactly to [-pi, pi] so float32 keeps its accuracy at every length."""
    q = tl.where(2 * q > period, q - period, q)
    angle = (q.to(tl.float32) / period.to(tl.float32)) * (SIGN * 2 * PI)
    return tl.cos(angle), tl.sin(angle)


@triton.jit
def _chirp(t, chirp_n, SIGN: tl.constexpr):
    """exp(i SIGN pi t^2 / chirp_n): t^2 taken modulo 2 chirp_n in int64, exactly."""
    t = t.to(tl.int64)
    period = 2 * chirp_n.to(tl.int64)
    return _root(t * t % period, period, SIGN)


@triton.jit(do_not_specialize=["total", "n", "ns", "length", "src_len", "dst_len", "chirp_n"])
def fft_pass_kernel(src, dst, aux, total, n, ns, length, src_len, src_row, dst_row, dst_len, chirp_n, scale,
                    R: tl.constexpr, R_PAD: tl.constexpr, BLOCK_J: tl.constexpr, SIGN: tl.constexpr,
                    LOAD: tl.constexpr, PRE: tl.constexpr, POST: tl.constexpr, CHIRP_SIGN: tl.constexpr,
                    STORE: tl.constexpr):
    m = n // R                                   # butterflies a row; their legs lie m apart
    g = tl.program_id(0).to(tl.int64) * BLOCK_J + tl.arange(0, BLOCK_J)   # butterflies of all rows in a row
    row = (g // m)[:, None]
    j = (g % m).to(tl.int32)
    r = tl.arange(0, R_PAD)
    live = (g < total)[:, None] & (r < R)[None, :]
    t = j[:, None] + r[None, :] * m              # each leg's input index
    # ---- read (a leg at or past `length`, or past the stored src_len, reads zero) ----
    if LOAD == _CHIRP_SEQUENCE:                   # b_t = b_(n - t) = exp(-i pi t^2 / chirp_n), |t| < chirp_n
        u = tl.where(t < length, t, n - t)
        inside = live & ((t < length) | (n - t < length))
        c, s = _chirp(u, chirp_n, -CHIRP_SIGN)
        re = tl.where(inside, c, 0.0)
        im = tl.where(inside, s, 0.0)
    elif LOAD == _REAL:
        ok = live & (t < length) & (t < src_len)
        re = tl.load(src + row * src_row + t, mask=ok, other=0.0).to(tl.float32)
        im = tl.zeros_like(re)
    elif LOAD == _REAL_PAIRS:                     # a real row of 2 n values read as n pairs (rfft's half-length transform)
        ok = live & (t < length)
        re = tl.load(src + row * src_row + 2 * t, mask=ok & (2 * t < src_len), other=0.0).to(tl.float32)
        im = tl.load(src + row * src_row + 2 * t + 1, mask=ok & (2 * t + 1 < src_len), other=0.0).to(tl.float32)
    elif LOAD == _HERMITIAN:                      # X[t] = conj(X[length - t]) above the half
        mirrored = 2 * t > length
        u = tl.where(mirrored, length - t, t)
        ok = live & (t < length) & (u < src_len)
        re = tl.load(src + row * src_row + 2 * u, mask=ok, other=0.0)
        im = tl.load(src + row * src_row + 2 * u + 1, mask=ok, other=0.0)
        im = tl.where(mirrored, -im, im)
    else:
        ok = live & (t < length) & (t < src_len)
        re = tl.load(src + row * src_row + 2 * t, mask=ok, other=0.0)
        im = tl.load(src + row * src_row + 2 * t + 1, mask=ok, other=0.0)
    if PRE == _CHIRP:
        c, s = _chirp(t, chirp_n, CHIRP_SIGN)
        re, im = re * c - im * s, re * s + im * c
    elif PRE == _SPECTRUM:                        # one spectrum row for every row
        c = tl.load(aux + 2 * t, mask=live, other=0.0)
        s = tl.load(aux + 2 * t + 1, mask=live, other=0.0)
        re, im = re * c - im * s, re * s + im * c
    # ---- twiddle leg r by w^(r k), w the (ns R)-th root, k the butterfly's place in its sub-transform ----
    k = j % ns
    c, s = _root(r[None, :] * k[:, None], ns * R, SIGN)
    re, im = re * c - im * s, re * s + im * c
    # ---- the R-point DFT: out[s] = sum_r leg[r] exp(SIGN 2 pi i r s / R) ----
    wc, ws = _root((r[:, None] * r[None, :]) % R, R + 0 * r[:, None], SIGN)
    out_re = tl.sum(re[:, :, None] * wc[None, :, :] - im[:, :, None] * ws[None, :, :], axis=1)
    out_im = tl.sum(re[:, :, None] * ws[None, :, :] + im[:, :, None] * wc[None, :, :], axis=1)
    # ---- write leg s at (j div ns) ns R + k + s ns ----
    d = (j // ns * ns * R + k)[:, None] + r[None, :] * ns
    if POST == _CHIRP:
        c, s = _chirp(d, chirp_n, CHIRP_SIGN)
        out_re, out_im = out_re * c - out_im * s, out_re * s + out_im * c
    keep = live & (d < dst_len)
    if STORE == _REAL_PART:
        tl.store(dst + row * dst_row + d, out_re * scale, mask=keep)
    else:
        tl.store(dst + row * dst_row + 2 * d, out_re * scale, mask=keep)
        tl.store(dst + row * dst_row + 2 * d + 1, out_im * scale, mask=keep)


@triton.jit
def _twiddled(a_re, a_im, b_re, b_im, k, n, SIGN: tl.constexpr):
    """E = (a + conj b) / 2 and O = (a - conj b) / 2 turned by exp(SIGN 2 pi i k / n)."""
    e_re, e_im = 0.5 * (a_re + b_re), 0.5 * (a_im - b_im)
    d_re, d_im = 0.5 * (a_re - b_re), 0.5 * (a_im + b_im)
    c, s = _root(k, n + 0 * k, SIGN)
    return e_re, e_im, d_re * c - d_im * s, d_re * s + d_im * c


@triton.jit(do_not_specialize=["total", "h"])
def real_spectrum_kernel(z, out, total, h, z_row, out_row, scale, BLOCK: tl.constexpr):
    """rfft's post-pass: Z = FFT_h(x_even + i x_odd) to X[k] = E[k] + exp(-2 pi i k / 2h) O[k],
    E = (Z[k] + conj Z[h - k]) / 2, O = (Z[k] - conj Z[h - k]) / 2i, for k = 0..h (h + 1 bins a row)."""
    g = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    row = g // (h + 1)
    k = (g % (h + 1)).to(tl.int32)
    live = g < total
    a = tl.where(k == h, 0, k)
    b = tl.where(k == 0, 0, h - k)
    a_re = tl.load(z + row * z_row + 2 * a, mask=live, other=0.0)
    a_im = tl.load(z + row * z_row + 2 * a + 1, mask=live, other=0.0)
    b_re = tl.load(z + row * z_row + 2 * b, mask=live, other=0.0)
    b_im = tl.load(z + row * z_row + 2 * b + 1, mask=live, other=0.0)
    e_re, e_im, o_re, o_im = _twiddled(a_re, a_im, b_re, b_im, k, 2 * h, -1)
    # X = E + O / i  (O above is (Z[k] - conj Z[h - k]) / 2 turned): / i is (re, im) -> (im, -re)
    tl.store(out + row * out_row + 2 * k, (e_re + o_im) * scale, mask=live)
    tl.store(out + row * out_row + 2 * k + 1, (e_im - o_re) * scale, mask=live)


@triton.jit(do_not_specialize=["total", "h", "src_len"])
def half_spectrum_kernel(x, z, total, h, src_len, x_row, z_row, BLOCK: tl.constexpr):
    """irfft's pre-pass: the half spectrum X[0..h] (src_len bins stored, the rest zero; the imaginary
    parts of X[0] and X[h] ignored, as a real inverse does) to Z[k] = E[k] + i O[k], k < h, whose
    inverse h-point transform is x_even + i x_odd: E = (X[k] + conj X[h - k]) / 2,
    O = (X[k] - conj X[h - k]) exp(2 pi i k / 2h) / 2."""
    g = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    row = g // h
    k = (g % h).to(tl.int32)
    live = g < total
    b = h - k
    a_re = tl.load(x + row * x_row + 2 * k, mask=live & (k < src_len), other=0.0)
    a_im = tl.load(x + row * x_row + 2 * k + 1, mask=live & (k < src_len) & (k > 0), other=0.0)
    b_re = tl.load(x + row * x_row + 2 * b, mask=live & (b < src_len), other=0.0)
    b_im = tl.load(x + row * x_row + 2 * b + 1, mask=live & (b < src_len) & (b < h), other=0.0)
    e_re, e_im, o_re, o_im = _twiddled(a_re, a_im, b_re, b_im, k, 2 * h, 1)
    tl.store(z + row * z_row + 2 * k, e_re - o_im, mask=live)
    tl.store(z + row * z_row + 2 * k + 1, e_im + o_re, mask=live)
