"""The scalar functions of nbx.core's elementwise ops, as @triton.jit functions the kernel calls.

Each computes in the kernel's COMPUTE type (float32 for the half and float8 types, the dtype itself
otherwise) and branches at compile time on it: integer and floating inputs of one op share a name.
FUNCTIONS maps nbx.core's op names to them; `pick(name, dtype)` chooses the variant of the ops that
depend on the storage format (nextafter.py). Special values follow numpy.
"""
import triton
import triton.language as tl

from . import mathfns as m
from .activations import relu, sigmoid, silu
from .nextafter import BY_FORMAT as _BY_FORMAT, nextafter


# ---- arithmetic ----------------------------------------------------------------------------------
@triton.jit
def add(a, b):
    return a + b


@triton.jit
def subtract(a, b):
    return a - b


@triton.jit
def multiply(a, b):
    return a * b


@triton.jit
def divide(a, b):
    return m.div(a, b)


@triton.jit
def floor_divide(a, b):
    if a.dtype.is_floating():
        q, r = m.py_divmod(a, b)
    else:
        q, r = m.int_divmod(a, b)
    return q


@triton.jit
def remainder(a, b):
    if a.dtype.is_floating():
        q, r = m.py_divmod(a, b)
    else:
        q, r = m.int_divmod(a, b)
    return r


@triton.jit
def pow(a, b):
    if a.dtype.is_floating():
        r = m.float_pow(a, b)
    else:
        r = m.int_pow(a, b, a.dtype.primitive_bitwidth)
    return r


@triton.jit
def maximum(a, b):
    return tl.where((a > b) | (a != a), a, b)  # NaN propagates, as numpy's maximum


@triton.jit
def minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def negative(a):
    if a.dtype.is_floating():
        r = m.flip_sign(a)
    else:
        r = -a
    return r


@triton.jit
def positive(a):
    return a


@triton.jit
def identity(a):
    return a


@triton.jit
def abs(a):
    if a.dtype.is_int_unsigned():
        r = a
    else:
        r = tl.abs(a)
    return r


@triton.jit
def square(a):
    return a * a


@triton.jit
def reciprocal(a):
    return m.div(1.0, a)


@triton.jit
def sign(a):
    if a.dtype.is_floating():  # from the bits: GPU code flushes float32 subnormals (sign(1e-40) is 1)
        if a.dtype == tl.float64:
            bits = a.to(tl.int64, bitcast=True)
            magnitude, inf = bits & 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000
        else:
            bits = a.to(tl.int32, bitcast=True)
            magnitude, inf = bits & 0x7FFFFFFF, 0x7F800000
        r = tl.where(magnitude == 0, 0.0, tl.where(bits < 0, -1.0, 1.0)).to(a.dtype)
        r = tl.where(magnitude > inf, a, r)
    elif a.dtype.is_int_unsigned():
        r = (a > 0).to(a.dtype)
    else:
        r = (a > 0).to(a.dtype) - (a < 0).to(a.dtype)
    return r


@triton.jit
def _is_subnormal32(a):
    bits = a.to(tl.int32, bitcast=True)
    return ((bits & 0x7F800000) == 0) & ((bits & 0x007FFFFF) != 0)


@triton.jit
def floor(a):
    if a.dtype == tl.float32:  # GPU code flushes float32 subnormals: floor(-1e-40) must stay -1
        r = tl.where(_is_subnormal32(a) & (a.to(tl.int32, bitcast=True) < 0), -1.0, tl.floor(a))
    elif a.dtype.is_floating():
        r = tl.floor(a)
    else:
        r = a
    return r


@triton.jit
def ceil(a):
    if a.dtype == tl.float32:  # GPU code flushes float32 subnormals: ceil(1e-40) must stay 1
        r = tl.where(_is_subnormal32(a) & (a.to(tl.int32, bitcast=True) > 0), 1.0, tl.ceil(a))
    elif a.dtype.is_floating():
        r = tl.ceil(a)
    else:
        r = a
    return r


@triton.jit
def trunc(a):
    if a.dtype.is_floating():
        r = m.trunc(a)
    else:
        r = a
    return r


@triton.jit
def round(a):
    if a.dtype.is_floating():
        r = m.rint(a)
    else:
        r = a
    return r


@triton.jit
def copysign(a, b):
    return m.copysign(a, b)


@triton.jit
def signbit(a):
    return m.signbit(a)


@triton.jit
def hypot(a, b):
    hi = tl.maximum(tl.abs(a), tl.abs(b))
    lo = tl.minimum(tl.abs(a), tl.abs(b))
    q = m.div(lo, tl.where(hi == 0, 1.0, hi))
    r = hi * m.sqrt(1.0 + q * q)
    r = tl.where((a != a) | (b != b), a + b, r)
    return tl.where(hi == float("inf"), hi, r)


@triton.jit
def logaddexp(a, b):
    hi = tl.maximum(a, b)
    r = hi + m.log1p(tl.exp(-tl.abs(a - b)))
    r = tl.where(a == b, a + m.LN2, r)  # equal infinities too, where a - b is NaN
    return tl.where((a != a) | (b != b), a + b, r)


# ---- exponentials, logarithms, trigonometry -----------------------------------------------------
@triton.jit
def exp(a):
    return tl.exp(a)


@triton.jit
def exp2(a):
    return tl.exp2(a)


@triton.jit
def expm1(a):
    return m.expm1(a)


@triton.jit
def log(a):
    return tl.log(a)


@triton.jit
def log2(a):
    return tl.log2(a)


@triton.jit
def log10(a):
    return tl.log2(a) * m.LOG10_2


@triton.jit
def log1p(a):
    return m.log1p(a)


@triton.jit
def sqrt(a):
    return m.sqrt(a)


@triton.jit
def rsqrt(a):
    return m.div(1.0, m.sqrt(a))


@triton.jit
def sin(a):
    return tl.sin(a)


@triton.jit
def cos(a):
    return tl.cos(a)


@triton.jit
def tan(a):
    return m.div(tl.sin(a), tl.cos(a))


@triton.jit
def asin(a):
    return m.asin(a)


@triton.jit
def acos(a):
    return m.acos(a)


@triton.jit
def atan(a):
    return m.atan(a)


@triton.jit
def atan2(a, b):
    return m.atan2(a, b)


@triton.jit
def sinh(a):
    return m.sinh(a)


@triton.jit
def cosh(a):
    return m.cosh(a)


@triton.jit
def tanh(a):
    return m.tanh(a)


@triton.jit
def asinh(a):
    return m.asinh(a)


@triton.jit
def acosh(a):
    return m.acosh(a)


@triton.jit
def atanh(a):
    return m.atanh(a)


# ---- classification, comparison, logic, bits ----------------------------------------------------
@triton.jit
def isnan(a):
    return a != a


@triton.jit
def isinf(a):
    if a.dtype.is_floating():
        r = tl.abs(a) == float("inf")
    else:
        r = a != a
    return r


@triton.jit
def isfinite(a):
    if a.dtype.is_floating():
        r = tl.abs(a) < float("inf")
    else:
        r = a == a
    return r


@triton.jit
def equal(a, b):
    return a == b


@triton.jit
def not_equal(a, b):
    return a != b


@triton.jit
def less(a, b):
    return a < b


@triton.jit
def less_equal(a, b):
    return a <= b


@triton.jit
def greater(a, b):
    return a > b


@triton.jit
def greater_equal(a, b):
    return a >= b


@triton.jit
def logical_not(a):
    return a == 0


@triton.jit
def logical_and(a, b):
    return (a != 0) & (b != 0)


@triton.jit
def logical_or(a, b):
    return (a != 0) | (b != 0)


@triton.jit
def logical_xor(a, b):
    return (a != 0) != (b != 0)


@triton.jit
def bitwise_and(a, b):
    return a & b


@triton.jit
def bitwise_or(a, b):
    return a | b


@triton.jit
def bitwise_xor(a, b):
    return a ^ b


@triton.jit
def bitwise_invert(a):
    return ~a


@triton.jit
def bitwise_left_shift(a, b):
    """numpy's rule: a count outside [0, bits) gives 0 (hardware shifts would wrap it)."""
    inside = (b >= 0) & (b < a.dtype.primitive_bitwidth)
    return tl.where(inside, a << tl.where(inside, b, 0), 0)


@triton.jit
def bitwise_right_shift(a, b):
    """numpy's rule: a count outside [0, bits) gives 0, or -1 for a negative a."""
    inside = (b >= 0) & (b < a.dtype.primitive_bitwidth)
    shifted = a >> tl.where(inside, b, 0)
    if a.dtype.is_int_signed():
        outside = tl.where(a < 0, -1, 0).to(a.dtype)
    else:
        outside = a * 0
    return tl.where(inside, shifted, outside)


@triton.jit
def where(condition, a, b):
    return tl.where(condition != 0, a, b)


FUNCTIONS = {fn.__name__: fn for fn in [
    add, subtract, multiply, divide, floor_divide, remainder, pow, maximum, minimum, negative,
    positive, abs, square, reciprocal, sign, floor, ceil, trunc, round, copysign, signbit, hypot,
    logaddexp, exp, exp2, expm1, log, log2, log10, log1p, sqrt, rsqrt, sin, cos, tan, asin, acos,
    atan, atan2, sinh, cosh, tanh, asinh, acosh, atanh, isnan, isinf, isfinite, equal, not_equal,
    less, less_equal, greater, greater_equal, logical_not, logical_and, logical_or, logical_xor,
    bitwise_and, bitwise_or, bitwise_xor, bitwise_invert, bitwise_left_shift, bitwise_right_shift,
    nextafter, relu, sigmoid, silu,
]}
# the real part of a real dtype, and its conjugate, are itself (complex dtypes have no kernel)
FUNCTIONS.update(real=identity, conj=identity, imag=identity)


def pick(name: str, dtype_name: str):
    """The function of op `name` for operands of dtype `dtype_name` (None when there is none)."""
    return _BY_FORMAT.get((name, dtype_name)) or FUNCTIONS.get(name)
