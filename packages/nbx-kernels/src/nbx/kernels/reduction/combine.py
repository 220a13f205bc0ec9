"""The scalar pieces of the reduction and scan kernels: combines, the map applied to each element
before it is combined, and the finish applied to a row's result.

Loads are widened and results rounded with the elementwise family's exact conversions (Triton's
own .to() truncates to bfloat16 and mis-rounds float8 in its interpreter). Op codes are module
constants (constexpr): a kernel branches on them at compile time, so each (op, dtype) pair
compiles to straight-line code. tl.reduce and tl.associative_scan take the combines directly (a
function passed through a constexpr argument is not accepted there); the library's own tl.sum,
tl.max, tl.min and tl.cumsum are used where they apply (the interpreter runs those as numpy).
"""
import triton
import triton.language as tl

from ..elementwise.casts import narrow, widen  # noqa: F401  (exact conversions, re-exported to the kernels)


class Code:
    """The op codes as Python ints, for wrappers; the kernels read the constexpr copies below."""
    # how two partial results combine
    ADD, MUL, MAX, MIN = 0, 1, 2, 3          # MAX / MIN: NaN propagates (numpy's max)
    # what each element contributes
    VALUE, NONZERO, ABS, SQUARE, POWER = 0, 1, 2, 3, 4  # NONZERO: NaN counts; SQUARE |x|^2; POWER |x|^p
    # what a row's combined result becomes
    KEEP, MEAN, SQRT, ROOT = 0, 1, 2, 3      # MEAN: / n; ROOT: ^(1/p)
    # what the moments and logsumexp kernels write: their running state (for a merge), or the result
    PARTIAL, VAR, STD, RESULT = 0, 1, 2, 1


ADD = tl.constexpr(Code.ADD)
MUL = tl.constexpr(Code.MUL)
MAX = tl.constexpr(Code.MAX)
MIN = tl.constexpr(Code.MIN)
VALUE = tl.constexpr(Code.VALUE)
NONZERO = tl.constexpr(Code.NONZERO)
ABS = tl.constexpr(Code.ABS)
SQUARE = tl.constexpr(Code.SQUARE)
POWER = tl.constexpr(Code.POWER)
KEEP = tl.constexpr(Code.KEEP)
MEAN = tl.constexpr(Code.MEAN)
SQRT = tl.constexpr(Code.SQRT)
ROOT = tl.constexpr(Code.ROOT)
PARTIAL = tl.constexpr(Code.PARTIAL)
VAR = tl.constexpr(Code.VAR)
STD = tl.constexpr(Code.STD)
RESULT = tl.constexpr(Code.RESULT)


@triton.jit
def add(a, b):
    return a + b


@triton.jit
def mul(a, b):
    return a * b


@triton.jit
def max_nan(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def min_nan(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def combine(a, b, OP: tl.constexpr):
    if OP == ADD:
        r = a + b
    elif OP == MUL:
        r = a * b
    elif OP == MAX:
        r = max_nan(a, b)
    else:
        r = min_nan(a, b)
    return r


@triton.jit
def max_lanes(acc):
    """acc [R, C] -> [R]: the largest of each row, NaN when the row holds one (numpy's max)."""
    r = tl.max(acc, 1)
    if acc.dtype.is_floating():
        r = tl.where(tl.max((acc != acc).to(tl.int32), 1) > 0, float("nan"), r)
    return r


@triton.jit
def min_lanes(acc):
    r = tl.min(acc, 1)
    if acc.dtype.is_floating():
        r = tl.where(tl.max((acc != acc).to(tl.int32), 1) > 0, float("nan"), r)
    return r


@triton.jit
def reduce_lanes(acc, OP: tl.constexpr):
    """acc [R, C] -> [R], combined along the columns in the tree's fixed order. The library's own
    sum, max and min (which Triton's interpreter also runs as numpy reductions) where they apply."""
    if OP == ADD:
        r = tl.sum(acc, 1)
    elif OP == MUL:
        r = tl.reduce(acc, 1, mul)
    elif OP == MAX:
        r = max_lanes(acc)
    else:
        r = min_lanes(acc)
    return r


@triton.jit
def contribution(raw, p, MAP: tl.constexpr, ACC: tl.constexpr):
    """What an element as loaded adds to the accumulator (widened exactly, bfloat16 and float8 too)."""
    if MAP == NONZERO:
        if raw.dtype.is_floating() and raw.dtype != tl.float64:
            nonzero = widen(raw, tl.float32) != 0
        else:
            nonzero = raw != 0
        r = nonzero.to(tl.int32).to(ACC)  # through int32: the interpreter mis-sizes int1 -> float
    else:
        x = widen(raw, ACC)
        if MAP == ABS:
            r = tl.abs(x)
        elif MAP == SQUARE:
            r = x * x
        elif MAP == POWER:
            r = tl.exp(tl.log(tl.abs(x)) * p)  # 0 -> 0 (p > 0) or inf (p < 0), as numpy
        else:
            r = x
    return r


@triton.jit
def finish(acc, n, p, FINAL: tl.constexpr):
    if FINAL == MEAN:
        r = acc / (tl.zeros_like(acc) + n)  # n converted in acc's dtype (exact in float64)
    elif FINAL == SQRT:
        r = tl.sqrt(acc)
    elif FINAL == ROOT:
        r = tl.exp(tl.log(acc) / p)
    else:
        r = acc
    return r


@triton.jit
def first_extreme_of_max(v1, i1, v2, i2):
    """The larger value, NaN above all; on a tie the smaller index (numpy's argmax)."""
    better = (v2 > v1) | ((v2 != v2) & (v1 == v1))
    tie = (v2 == v1) | ((v2 != v2) & (v1 != v1))
    take = better | (tie & (i2 < i1))
    return tl.where(take, v2, v1), tl.where(take, i2, i1)


@triton.jit
def first_extreme_of_min(v1, i1, v2, i2):
    """The smaller value, NaN below all; on a tie the smaller index (numpy's argmin)."""
    better = (v2 < v1) | ((v2 != v2) & (v1 == v1))
    tie = (v2 == v1) | ((v2 != v2) & (v1 != v1))
    take = better | (tie & (i2 < i1))
    return tl.where(take, v2, v1), tl.where(take, i2, i1)


@triton.jit
def running_max(v1, i1, v2, i2):
    """Scan combine, (v1, i1) before (v2, i2): a later equal value moves the index; a NaN stays."""
    take = (v1 == v1) & ((v2 >= v1) | (v2 != v2))
    return tl.where(take, v2, v1), tl.where(take, i2, i1)


@triton.jit
def running_min(v1, i1, v2, i2):
    take = (v1 == v1) & ((v2 <= v1) | (v2 != v2))
    return tl.where(take, v2, v1), tl.where(take, i2, i1)


@triton.jit
def merge_moments(c1, m1, q1, c2, m2, q2):
    """Two (count, mean, sum of squared deviations) states as one (Chan et al.'s pairwise update)."""
    c = c1 + c2
    d = m2 - m1
    w = tl.where(c > 0, c2 / tl.maximum(c, 1), 0)
    return c, m1 + d * w, q1 + q2 + d * d * c1 * w


@triton.jit
def merge_moment_lanes(count, mean, m2):
    """[R, C] (count, mean, m2) states -> [R]: the pooled mean, then each lane's squares about it."""
    total = tl.sum(count, 1)
    pooled = tl.sum(count * mean, 1) / tl.maximum(total, 1)
    spread = mean - pooled[:, None]
    return total, pooled, tl.sum(m2 + count * spread * spread, 1)


@triton.jit
def scale(a, m):
    """exp(a - m) with exp(-inf - -inf) = 0 and exp(inf - inf) = 1 (a logsumexp's rescaling)."""
    return tl.where(a == float("-inf"), 0.0, tl.where(a == m, 1.0, tl.exp(a - m)))
