"""Activations and the fused pointwise ops of inference graphs, as @triton.jit functions.

Parameters (slopes, alphas, fill values) arrive as extra operands, usually Python scalars passed
by value, so one compiled kernel serves every value. Formulas follow torch's definitions, which
nbx.core's float64 references (nbx/core/ops/activations.py) use too.
"""
import triton
import triton.language as tl

from . import mathfns as m

SQRT_HALF = tl.constexpr(0.7071067811865476)
SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)


@triton.jit
def relu(a):
    return tl.where((a > 0) | (a != a), a, tl.zeros_like(a))


# Activations divide with Triton's `/` (an approximate division on GPUs, within 2 ulp of float32):
# the correctly rounded division would double their instructions, and a half-type result rounds
# the difference away.
@triton.jit
def sigmoid(a):
    return 1.0 / (1.0 + tl.exp(-a))


@triton.jit
def silu(a):
    return a / (1.0 + tl.exp(-a))


@triton.jit
def _erfc_nonneg(u):
    """erfc(u) for float32 u >= 0 as exp(-u * g(u)), g fitted (degree 10 in t = u / 2.25 - 1, least
    squares on Chebyshev nodes of [0, 4.5] against 30-digit values); 0 past 4.5 (erfc < 2e-10).
    Branch-free, no cancellation: 1 + erf(x) = 2 - erfc(|x|) or erfc(|x|) within 1.2e-7, erfc
    itself within 3e-6 relative, where libdevice's erff needs twice the instructions."""
    t = tl.minimum(u, 4.5) * 0.4444444444444444 - 1.0
    p = -0.00023882437657236406
    p = p * t + 0.000510496579666974
    p = p * t - 0.00017439988851103452
    p = p * t - 0.0006089330818011846
    p = p * t + 0.0025132429505296105
    p = p * t - 0.008351141078526563
    p = p * t + 0.022672562212515804
    p = p * t - 0.05425384484929059
    p = p * t + 0.12163130046272703
    p = p * t + 1.9818213620432785
    p = p * t + 2.9010932894153494
    return tl.where(u < 4.5, tl.exp(-(u * p)), 0.0)


@triton.jit
def gelu(a):
    """x * Phi(x); float32 through _erfc_nonneg, float64 through erf."""
    if a.dtype == tl.float64:
        r = 0.5 * a * (1.0 + tl.erf(a * SQRT_HALF))
    else:
        tail = _erfc_nonneg(tl.abs(a) * SQRT_HALF)
        r = 0.5 * a * tl.where(a >= 0, 2.0 - tail, tail)
    return r


@triton.jit
def gelu_tanh(a):
    return 0.5 * a * (1.0 + m.tanh((a + 0.044715 * a * a * a) * SQRT_2_OVER_PI))


@triton.jit
def erf(a):
    return tl.erf(a)


@triton.jit
def softplus(a, beta, threshold):
    """log(1 + exp(beta * a)) / beta, and a itself where beta * a > threshold (torch's rule)."""
    scaled = a * beta
    return tl.where(scaled > threshold, a, m.div(m.log1p(tl.exp(scaled)), beta))


@triton.jit
def mish(a):
    soft = tl.where(a > 20.0, a, m.log1p(tl.exp(a)))
    return a * m.tanh(soft)


@triton.jit
def elu(a, alpha):
    return tl.where(a > 0, a, alpha * m.expm1(a))


@triton.jit
def leaky_relu(a, slope):
    return tl.where(a > 0, a, a * slope)


@triton.jit
def hardsigmoid(a):
    return tl.minimum(tl.maximum(a + 3.0, 0.0), 6.0) / 6.0


@triton.jit
def hardswish(a):
    return a * (tl.minimum(tl.maximum(a + 3.0, 0.0), 6.0) / 6.0)


@triton.jit
def glu(a, b):
    return a / (1.0 + tl.exp(-b))


@triton.jit
def masked_fill(x, mask, value):
    return tl.where(mask != 0, value, x)


@triton.jit
def lerp(start, end, weight):
    """torch's two-sided form: exact at weight 0 and at weight 1."""
    diff = end - start
    return tl.where(tl.abs(weight) < 0.5, start + weight * diff, end - diff * (1.0 - weight))


@triton.jit
def addcmul(x, t1, t2, value):
    return x + value * t1 * t2


@triton.jit
def addcdiv(x, t1, t2, value):
    return x + value * m.div(t1, t2)


@triton.jit
def nan_to_num(x, nan, posinf, neginf):
    if x.dtype.is_floating():
        r = tl.where(x != x, nan, x)
        r = tl.where(x == float("inf"), posinf, r)
        r = tl.where(x == -float("inf"), neginf, r)
    else:
        r = x
    return r


@triton.jit
def clamp_min(x, low):
    return tl.where((x < low) | (low != low), low, x)


@triton.jit
def clamp_max(x, high):
    return tl.where((x > high) | (high != high), high, x)


@triton.jit
def clamp(x, low, high):
    return clamp_max(clamp_min(x, low), high)


FUNCTIONS = {fn.__name__: fn for fn in [
    relu, sigmoid, silu, gelu, gelu_tanh, erf, softplus, mish, elu, leaky_relu, hardsigmoid,
    hardswish, glu, masked_fill, lerp, addcmul, addcdiv, nan_to_num, clamp_min, clamp_max, clamp,
]}
