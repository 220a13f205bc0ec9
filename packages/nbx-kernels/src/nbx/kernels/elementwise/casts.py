"""Exact conversions at an elementwise kernel's loads and stores, the same bits on every device.

Triton's own `.to()` is not enough: its interpreter rounds float32 -> bfloat16 by truncation, its
float8 paths are not IEEE (no infinities or NaNs, no ties to even), and GPU conversions return
other NaN encodings. So values are widened from and rounded to bfloat16 and the float8 types
through integer bit operations, with the rules of the reference (ml_dtypes and numpy):

- round to nearest, ties to even; float64 reaches bfloat16 and float8 through float32 (two
  roundings, as ml_dtypes does) but float16 directly (one rounding, as numpy does);
- bfloat16, float16 and float8_e5m2 overflow to infinity; float8_e4m3fn has no infinity: what
  rounds past its largest value 448 is NaN (464, the tie, rounds to 448; 500 is NaN);
- a NaN stays a NaN of the same sign (quiet, canonical payload);
- float -> integer truncates toward zero (unsigned targets wrap through int64, as numpy does on
  x86); -> bool is `!= 0`.
"""
import triton
import triton.language as tl

# Whether this module's kernels are compiled for a GPU: Triton makes the same decision when it
# decorates them (knobs.runtime.interpret, from TRITON_INTERPRET at import). A GPU rounds
# float32 -> bfloat16 to nearest even in one instruction (cvt.rn.bf16.f32), which the bit-operation
# path costs about nine for; the interpreter truncates, so it keeps the bit operations.
COMPILED = tl.constexpr(not triton.knobs.runtime.interpret)


@triton.jit
def _rtne_shift(v, shift):
    """v >> shift rounded to nearest, ties to even (v >= 0; 1 <= shift < the bit width of v)."""
    q = v >> shift
    rem = v - (q << shift)
    half = (v * 0 + 1) << (shift - 1)
    up = (rem > half) | ((rem == half) & ((q & 1) == 1))
    return q + up.to(v.dtype)


@triton.jit
def _encode(x, W: tl.constexpr, SRC_MANT: tl.constexpr, SRC_BIAS: tl.constexpr,
            EXP: tl.constexpr, MANT: tl.constexpr, BIAS: tl.constexpr, FINITE_ONLY: tl.constexpr):
    """The bits of x (a W-bit IEEE float) rounded to a format of EXP exponent bits, MANT mantissa
    bits and bias BIAS, as an integer of x's width (sign bit at EXP + MANT)."""
    if W == 64:
        bits = x.to(tl.int64, bitcast=True)
    else:
        bits = x.to(tl.int32, bitcast=True)
    sign = (bits >> (W - 1)) & 1
    mag = bits & ((1 << (W - 1)) - 1)
    exponent = mag >> SRC_MANT
    # normal results: re-bias the exponent field, then drop mantissa bits with one rounding
    code = _rtne_shift(mag - ((SRC_BIAS - BIAS) << SRC_MANT), SRC_MANT - MANT)
    if BIAS != SRC_BIAS:  # subnormal results: the significand shifted into the format's units
        significand = (mag & ((1 << SRC_MANT) - 1)) | (1 << SRC_MANT)
        shift = tl.minimum((SRC_BIAS + SRC_MANT + 1 - BIAS - MANT) - exponent, W - 1)
        code = tl.where(exponent - SRC_BIAS + BIAS >= 1, code, _rtne_shift(significand, shift))
    inf_code = ((1 << EXP) - 1) << MANT
    if FINITE_ONLY:  # float8_e4m3fn: what rounds past 448 (infinities and NaNs too) is NaN
        code = tl.where(code > (inf_code | ((1 << MANT) - 2)), inf_code | ((1 << MANT) - 1), code)
    else:
        code = tl.minimum(code, inf_code)
        src_inf = ((1 << (W - 1 - SRC_MANT)) - 1) << SRC_MANT
        code = tl.where(mag > src_inf, inf_code | (1 << (MANT - 1)), code)
    return code | (sign << (EXP + MANT))


@triton.jit
def _bfloat16_bits(f):
    """float32 f rounded to bfloat16: add half an ulp less one, plus the kept lowest bit, and drop
    16 bits (overflow carries into the exponent: infinity); NaN is 0x7FC0 with f's sign."""
    bits = f.to(tl.uint32, bitcast=True)
    rounded = (bits + (((bits >> 16) & 1) + 0x7FFF)) >> 16
    return tl.where(f != f, ((bits >> 16) & 0x8000) | 0x7FC0, rounded)


@triton.jit
def _from_float32(f, OUT: tl.constexpr):
    """float32 f rounded to bfloat16 or a float8 type."""
    if OUT == tl.bfloat16:
        if COMPILED:  # the hardware's rounding; a NaN as the reference writes it
            nan = (((f.to(tl.uint32, bitcast=True) >> 16) & 0x8000) | 0x7FC0).to(tl.uint16)
            y = tl.where(f != f, nan.to(tl.bfloat16, bitcast=True), f.to(tl.bfloat16, fp_downcast_rounding="rtne"))
        else:
            y = _bfloat16_bits(f).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    elif OUT == tl.float8e5:
        y = _encode(f, 32, 23, 127, 5, 2, 15, False).to(tl.uint8).to(tl.float8e5, bitcast=True)
    else:
        tl.static_assert(OUT == tl.float8e4nv, "no rounding rule for this element type")
        y = _encode(f, 32, 23, 127, 4, 3, 7, True).to(tl.uint8).to(tl.float8e4nv, bitcast=True)
    return y


@triton.jit
def narrow(x, OUT: tl.constexpr):
    """x (the kernel's result) in the output's element type OUT, rounded as the reference does."""
    if x.dtype == OUT:
        y = x
    elif OUT == tl.int1:
        y = x != 0
    elif OUT == tl.float64:
        y = x.to(tl.float64)
    elif OUT == tl.float32:
        y = x.to(tl.float32)
    elif OUT == tl.float16:
        if x.dtype == tl.float64:
            y = _encode(x, 64, 52, 1023, 5, 10, 15, False).to(tl.uint16).to(tl.float16, bitcast=True)
        else:
            y = x.to(tl.float32).to(tl.float16)
    elif OUT.is_floating():
        y = _from_float32(x.to(tl.float32), OUT)
    elif x.dtype.is_floating():
        if OUT == tl.uint64:
            y = tl.where(x < 0, x.to(tl.int64).to(tl.uint64), x.to(tl.uint64))
        elif OUT.is_int_unsigned():
            y = x.to(tl.int64).to(OUT)
        else:
            y = x.to(OUT)
    else:
        y = x.to(OUT)
    return y


@triton.jit
def widen(v, COMPUTE: tl.constexpr):
    """v as loaded, exactly, in the compute type (bfloat16 and float8 decoded from their bits)."""
    if v.dtype == COMPUTE:
        y = v
    elif v.dtype == tl.bfloat16:
        y = (v.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True).to(COMPUTE)
    elif v.dtype == tl.float8e5:  # the upper byte of a float16
        y = (v.to(tl.uint8, bitcast=True).to(tl.uint16) << 8).to(tl.float16, bitcast=True).to(COMPUTE)
    elif v.dtype == tl.float8e4nv:
        # exponent and mantissa placed in a float16 read 2**-8 times the value (subnormals too)
        b = v.to(tl.uint8, bitcast=True)
        low = b & 0x7F
        mag = (low.to(tl.uint16) << 7).to(tl.float16, bitcast=True).to(tl.float32) * 256.0
        mag = tl.where(low == 0x7F, float("nan"), mag)
        sign = (b >> 7).to(tl.uint32) << 31  # or'ed into the bits: -x would lose -0.0 in Triton 3.6
        y = (mag.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True).to(COMPUTE)
    else:
        y = v.to(COMPUTE)
    return y
