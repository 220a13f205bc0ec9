"""nextafter: one step from a toward b in the spacing of the operands' own storage format.

float32 and float64 compute in their own type and step their bits. The 16- and 8-bit formats
compute in float32: the value (exact there) is encoded in its format, its sign-magnitude code
stepped, and the neighbour decoded again.
"""
import triton
import triton.language as tl

from .casts import _from_float32, widen


@triton.jit
def _step(bits, x, y, mag_mask, sign_bit):
    """The neighbour of x (bits its sign-magnitude code) toward y."""
    mag = bits & mag_mask
    away = (y > x) == (x > 0)
    stepped = tl.where(away, bits + 1, bits - 1)
    tiny = tl.where(y < 0, sign_bit | 1, 1)  # from a zero: the smallest subnormal toward y
    return tl.where(mag == 0, tiny + bits * 0, stepped)


@triton.jit
def nextafter(a, b):
    """For float32 and float64 (the compute type is the storage type)."""
    if a.dtype == tl.float64:
        bits = a.to(tl.int64, bitcast=True)
        r = _step(bits, a, b, 0x7FFFFFFFFFFFFFFF, -0x8000000000000000).to(tl.float64, bitcast=True)
    else:
        bits = a.to(tl.int32, bitcast=True)
        r = _step(bits, a, b, 0x7FFFFFFF, -0x80000000).to(tl.float32, bitcast=True)
    r = tl.where(a == b, b, r)
    return tl.where((a != a) | (b != b), a + b, r)


@triton.jit
def _nextafter_small(a, b, FORMAT: tl.constexpr, BITS: tl.constexpr):
    """For a 16- or 8-bit format: a (exact in float32) encoded, stepped, and decoded again."""
    encoded = _from_float32(a.to(tl.float32), FORMAT)
    if BITS == 16:
        bits = encoded.to(tl.uint16, bitcast=True).to(tl.int32)
        r = _step(bits, a, b, 0x7FFF, 0x8000).to(tl.uint16).to(FORMAT, bitcast=True)
    else:
        bits = encoded.to(tl.uint8, bitcast=True).to(tl.int32)
        r = _step(bits, a, b, 0x7F, 0x80).to(tl.uint8).to(FORMAT, bitcast=True)
    r = widen(r, a.dtype)
    r = tl.where(a == b, b, r)
    return tl.where((a != a) | (b != b), a + b, r)


@triton.jit
def nextafter_float16(a, b):
    bits = a.to(tl.float16).to(tl.uint16, bitcast=True).to(tl.int32)
    r = _step(bits, a, b, 0x7FFF, 0x8000).to(tl.uint16).to(tl.float16, bitcast=True).to(a.dtype)
    r = tl.where(a == b, b, r)
    return tl.where((a != a) | (b != b), a + b, r)


@triton.jit
def nextafter_bfloat16(a, b):
    return _nextafter_small(a, b, tl.bfloat16, 16)


@triton.jit
def nextafter_float8_e4m3fn(a, b):
    return _nextafter_small(a, b, tl.float8e4nv, 8)


@triton.jit
def nextafter_float8_e5m2(a, b):
    return _nextafter_small(a, b, tl.float8e5, 8)


BY_FORMAT = {
    ("nextafter", "float16"): nextafter_float16, ("nextafter", "bfloat16"): nextafter_bfloat16,
    ("nextafter", "float8_e4m3fn"): nextafter_float8_e4m3fn,
    ("nextafter", "float8_e5m2"): nextafter_float8_e5m2,
}
