"""The scalar functions of the elementwise ops, as @triton.jit functions the kernel calls.

Each computes in the kernel's COMPUTE dtype (float32 for half types). FUNCTIONS maps nbx.core's op
names to them; an op without an entry has no kernel yet and is refused by name.
"""
import triton
import triton.language as tl


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
    return a / b


@triton.jit
def maximum(a, b):
    return tl.where((a > b) | (a != a), a, b)  # NaN propagates, as numpy's maximum


@triton.jit
def minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)


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
def negative(a):
    return -a


@triton.jit
def positive(a):
    return a


@triton.jit
def identity(a):
    return a


@triton.jit
def exp(a):
    return tl.exp(a)


@triton.jit
def log(a):
    return tl.log(a)


@triton.jit
def sqrt(a):
    return tl.sqrt(a)


@triton.jit
def abs(a):
    return tl.abs(a)


@triton.jit
def relu(a):
    return tl.where(a > 0, a, 0)


@triton.jit
def sigmoid(a):
    return 1 / (1 + tl.exp(-a))


@triton.jit
def silu(a):
    return a / (1 + tl.exp(-a))


@triton.jit
def where(condition, a, b):
    return tl.where(condition != 0, a, b)


FUNCTIONS = {
    "add": add, "subtract": subtract, "multiply": multiply, "divide": divide,
    "maximum": maximum, "minimum": minimum, "equal": equal, "not_equal": not_equal,
    "less": less, "less_equal": less_equal, "greater": greater, "greater_equal": greater_equal,
    "negative": negative, "positive": positive, "exp": exp, "log": log, "sqrt": sqrt, "abs": abs,
    "relu": relu, "sigmoid": sigmoid, "silu": silu,
}
