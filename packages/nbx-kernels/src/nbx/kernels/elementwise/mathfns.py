"""Scalar math the elementwise functions share, from primitives every Triton backend has.

Only operations that Triton lowers on every backend and that its interpreter runs are used (exp,
exp2, log, log2, sin, cos, erf, floor, ceil, fma, IEEE division and square root): libdevice calls
would not run on `interp`, so inverse trigonometric and hyperbolic functions are built here.
Inputs are float32 or float64 (half types compute in float32). Special values follow C99/numpy.
"""
import triton
import triton.language as tl

PI = tl.constexpr(3.141592653589793)
HALF_PI = tl.constexpr(1.5707963267948966)
QUARTER_PI = tl.constexpr(0.7853981633974483)
LN2 = tl.constexpr(0.6931471805599453)
LOG10_2 = tl.constexpr(0.30102999566398120)
TAN_PI_8 = tl.constexpr(0.41421356237309503)
TAN_3PI_8 = tl.constexpr(2.414213562373095)
INF = tl.constexpr(float("inf"))


@triton.jit
def div(a, b):
    """a / b correctly rounded (Triton's float32 `/` is an approximation on GPUs)."""
    if b.dtype == tl.float32:
        r = tl.div_rn(a, b)
    else:
        r = a / b
    return r


@triton.jit
def sqrt(x):
    if x.dtype == tl.float32:
        r = tl.sqrt_rn(x)
    else:
        r = tl.sqrt(x)
    return r


@triton.jit
def signbit(x):
    """True where the sign bit is set (-0.0 and negative NaNs included); x < 0 for integers."""
    if x.dtype == tl.float64:
        r = x.to(tl.int64, bitcast=True) < 0
    elif x.dtype == tl.float32:
        r = x.to(tl.int32, bitcast=True) < 0
    else:
        r = x < 0
    return r


@triton.jit
def flip_sign(x):
    """-x with the sign bit flipped, as numpy negates (Triton 3.6 computes float -x as 0 - x,
    which turns -0.0 into +0.0)."""
    if x.dtype == tl.float64:
        r = (x.to(tl.int64, bitcast=True) ^ -0x8000000000000000).to(tl.float64, bitcast=True)
    else:
        r = (x.to(tl.int32, bitcast=True) ^ -0x80000000).to(tl.float32, bitcast=True)
    return r


@triton.jit
def copysign(x, y):
    """The magnitude of x with the sign bit of y (bit operations: exact for zeros and NaNs)."""
    if x.dtype == tl.float64:
        sign = -0x8000000000000000
        bits = (x.to(tl.int64, bitcast=True) & ~sign) | (y.to(tl.int64, bitcast=True) & sign)
        r = bits.to(tl.float64, bitcast=True)
    else:
        sign = -0x80000000
        bits = (x.to(tl.int32, bitcast=True) & ~sign) | (y.to(tl.int32, bitcast=True) & sign)
        r = bits.to(tl.float32, bitcast=True)
    return r


@triton.jit
def trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def rint(x):
    """Round half to even: adding 2**p (p the mantissa width) leaves only the integer part."""
    if x.dtype == tl.float64:
        big = 4503599627370496.0  # 2**52
    else:
        big = 8388608.0  # 2**23
    ax = tl.abs(x)
    r = tl.where(ax < big, (ax + big) - big, ax)
    return copysign(r, x)


@triton.jit
def log1p(x):
    """log(1 + x) accurate near 0: log(u) * x / (u - 1) with u = 1 + x rounded (Goldberg)."""
    u = 1.0 + x
    d = u - 1.0
    r = tl.where(d == 0, x, tl.log(u) * div(x, d))
    return tl.where(u == INF, u, r)


@triton.jit
def expm1(x):
    """exp(x) - 1 accurate near 0: (u - 1) * x / log(u) with u = exp(x) rounded (Kahan)."""
    u = tl.exp(x)
    d = u - 1.0
    r = tl.where(u == 1.0, x, d * div(x, tl.log(u)))
    r = tl.where(d == -1.0, -1.0, r)
    return tl.where(u == INF, u, r)


@triton.jit
def tanh(x):
    em = expm1(-2.0 * tl.abs(x))
    return copysign(div(-em, 2.0 + em), x)


@triton.jit
def sinh(x):
    em = expm1(tl.abs(x))
    s = 0.5 * em + 0.5 * div(em, em + 1.0)
    return copysign(tl.where(em == INF, em, s), x)


@triton.jit
def cosh(x):
    e = tl.exp(tl.abs(x))
    return 0.5 * e + div(0.5, e)


@triton.jit
def _atan_poly(t):
    """atan(t) for |t| <= tan(pi/8): t + t**3 * P(t**2), P fitted by least squares on Chebyshev
    nodes against 40-digit values (max error 6e-17)."""
    z = t * t
    p = 0.0227809558022482
    p = p * z - 0.044856875692542576
    p = p * z + 0.05737090339342485
    p = p * z - 0.06649745453703791
    p = p * z + 0.07691068505251017
    p = p * z - 0.09090853351562138
    p = p * z + 0.11111109663106705
    p = p * z - 0.14285714266542224
    p = p * z + 0.1999999999990128
    p = p * z - 0.3333333333333323
    return t + t * z * p


@triton.jit
def _atan_nonneg(ax):
    """atan of ax >= 0 (or NaN): reduced to |t| <= tan(pi/8) around 0, pi/4 or pi/2."""
    big = ax > TAN_3PI_8
    mid = ax > TAN_PI_8
    t = tl.where(big, div(-1.0, ax), tl.where(mid, div(ax - 1.0, ax + 1.0), ax))
    base = tl.where(big, HALF_PI, tl.where(mid, QUARTER_PI, tl.zeros_like(t)))  # in t's type
    return base + _atan_poly(t)


@triton.jit
def atan(x):
    return copysign(_atan_nonneg(tl.abs(x)), x)


@triton.jit
def atan2(y, x):
    ax = tl.abs(x)
    ay = tl.abs(y)
    hi = tl.maximum(ax, ay)
    lo = tl.minimum(ax, ay)
    q = tl.where(hi == 0, 0.0, tl.where(lo == INF, 1.0, div(lo, hi)))
    q = tl.where((x != x) | (y != y), x + y, q)
    r = _atan_nonneg(q)
    r = tl.where(ay > ax, -r + HALF_PI, r)  # constants right of tensors: Triton folds them
    r = tl.where(signbit(x), -r + PI, r)
    return copysign(r, y)


@triton.jit
def asin(x):
    return atan2(x, sqrt((1.0 - x) * (1.0 + x)))


@triton.jit
def acos(x):
    return atan2(sqrt((1.0 - x) * (1.0 + x)), x)


@triton.jit
def asinh(x):
    ax = tl.abs(x)
    small = log1p(ax + div(ax * ax, 1.0 + sqrt(1.0 + ax * ax)))
    return copysign(tl.where(ax > 268435456.0, tl.log(ax) + LN2, small), x)


@triton.jit
def acosh(x):
    t = x - 1.0
    small = log1p(t + sqrt(2.0 * t + t * t))
    r = tl.where(x > 268435456.0, tl.log(x) + LN2, small)
    return tl.where(x < 1.0, float("nan"), r)


@triton.jit
def atanh(x):
    return 0.5 * log1p(div(2.0 * x, 1.0 - x))


@triton.jit
def _exponent(x):
    """The unbiased exponent field of float64 x >= 0."""
    return (x.to(tl.int64, bitcast=True) >> 52) - 1023


@triton.jit
def fmod(a, b):
    """C's fmod (sign of a), exact: |a| is reduced in float64 by |b| * 2**k, at most 50 bits of the
    quotient a step, each step one fma whose result is exact. Six steps cover every float32 pair
    and float64 pairs with |a / b| < 2**300."""
    whole = tl.abs(a.to(tl.float64))
    d = tl.abs(b.to(tl.float64))
    r = whole
    for _ in tl.static_range(6):
        gap = tl.minimum(tl.maximum(_exponent(r) - _exponent(d) - 50, 0), 1000)
        scaled = d * ((gap + 1023) << 52).to(tl.float64, bitcast=True)
        q = tl.floor(r / scaled)
        r = tl.fma(-q, scaled, r)
        r = tl.where(r < 0, r + scaled, r)  # a quotient rounded up to the next integer: step back
    r = tl.where(d == INF, tl.where(whole < INF, whole, whole - whole), r)  # fmod(a, inf) = a
    return copysign(r, a.to(tl.float64)).to(a.dtype)


@triton.jit
def py_divmod(a, b):
    """(floor quotient, remainder with the divisor's sign) by numpy's rule for floats."""
    mod = fmod(a, b)
    quotient = div(a - mod, b)
    fix = (mod != 0) & ((b < 0) != (mod < 0))
    quotient = tl.where(fix, quotient - 1.0, quotient)
    mod = tl.where(fix, mod + b, tl.where(mod == 0, copysign(mod, b), mod))
    floor_q = tl.floor(quotient)
    floor_q = tl.where(quotient - floor_q > 0.5, floor_q + 1.0, floor_q)
    floor_q = tl.where(quotient == 0, copysign(quotient, div(a, b)), floor_q)
    by_zero = b == 0
    return tl.where(by_zero, div(a, b), floor_q), tl.where(by_zero, fmod(a, b), mod)


@triton.jit
def int_divmod(a, b):
    """Python's integer floor division and modulo; numpy's 0 for a zero divisor, wrap for MIN // -1."""
    minus_one = b == -1 if a.dtype.is_int_signed() else b != b
    safe = tl.where((b == 0) | minus_one, 1, b)
    q = a // safe
    r = a % safe
    if a.dtype.is_int_signed():
        fix = (r != 0) & ((r < 0) != (safe < 0))
        q = tl.where(fix, q - 1, q)
        r = tl.where(fix, r + safe, r)
        q = tl.where(minus_one, -a, q)
    zero = b == 0
    return tl.where(zero, 0, q), tl.where(zero | minus_one, 0, r)


@triton.jit
def float_pow(a, b):
    """a ** b by C99's special cases; float32 computes through float64 (one final rounding)."""
    a64 = a.to(tl.float64)
    b64 = b.to(tl.float64)
    aa = tl.abs(a64)
    r = tl.exp2(b64 * tl.log2(aa))
    integral = tl.floor(b64) == b64
    odd = integral & (tl.floor(b64 * 0.5) != b64 * 0.5)
    r = tl.where((a64 < 0) & (a64 > -INF) & ~integral, float("nan"), r)
    r = tl.where(signbit(a64) & odd, flip_sign(r), r)
    r = tl.where((b64 == 0) | (a64 == 1) | ((aa == 1) & (tl.abs(b64) == INF)), 1.0, r)
    return r.to(a.dtype)


@triton.jit
def int_pow(a, b, BITS: tl.constexpr):
    """a ** b by squaring over the BITS bits of b, wrapping like numpy; a negative exponent gives 0
    unless |a| == 1."""
    result = tl.full(a.shape, 1, a.dtype)
    base = a
    e = b
    for _ in tl.static_range(BITS):
        result = tl.where((e & 1) != 0, result * base, result)
        base = base * base
        e = e >> 1
    if a.dtype.is_int_signed():
        negative = tl.where(a == 1, 1, tl.where(a == -1, 1 - 2 * (b & 1), 0)).to(a.dtype)
        result = tl.where(b < 0, negative, result)
    return result
