"""One Triton kernel for elementwise ops of one to four operands over any strides.

Each program handles BLOCK consecutive elements of the output in row-major order. The output and
each operand are of one KIND:

- DENSE: a pointer indexed by the linear index itself (its strides are not passed);
- STRIDED: a pointer indexed through four sizes and its own four strides (broadcast dims have
  stride 0);
- VALUE: a Python scalar passed by value;
- SPLAT: a pointer to one element read once (a 0-d tensor, or every stride 0).

OP is a @triton.jit function of the operands in the COMPUTE type (casts.widen decodes them); its
result is rounded once to the output's element type (casts.narrow). Unused operand slots and the
strides of dense operands are passed as None. Indices are int32 unless INDEX64 says an offset may
pass 2**31 (int32 division is several times cheaper on GPUs).
"""
import triton
import triton.language as tl

from ..dependent_launch import wait_for_predecessor
from .casts import narrow, widen

DENSE, STRIDED, VALUE, SPLAT = 0, 1, 2, 3


@triton.jit
def strided_offset(lin, s1, s2, s3, st0, st1, st2, st3):
    """Where element lin (row-major over four sizes) lies, through four strides."""
    i3 = lin % s3
    rest = lin // s3
    i2 = rest % s2
    rest = rest // s2
    i1 = rest % s1
    i0 = rest // s1
    return i0 * st0 + i1 * st1 + i2 * st2 + i3 * st3


@triton.jit
def _operand(ptr, lin, mask, s1, s2, s3, st0, st1, st2, st3, KIND: tl.constexpr, COMPUTE: tl.constexpr):
    if KIND == 2:
        value = tl.full(lin.shape, ptr, COMPUTE)
    elif KIND == 3:
        value = tl.full(lin.shape, widen(tl.load(ptr), COMPUTE), COMPUTE)
    elif KIND == 0:
        value = widen(tl.load(ptr + lin, mask=mask), COMPUTE)
    else:
        value = widen(tl.load(ptr + strided_offset(lin, s1, s2, s3, st0, st1, st2, st3), mask=mask), COMPUTE)
    return value


@triton.jit
def elementwise_kernel(
    out_ptr, o0, o1, o2, o3, n, s1, s2, s3,
    a_ptr, a0, a1, a2, a3,
    b_ptr, b0, b1, b2, b3,
    c_ptr, c0, c1, c2, c3,
    d_ptr, d0, d1, d2, d3,
    OP: tl.constexpr, ARITY: tl.constexpr, COMPUTE: tl.constexpr,
    A: tl.constexpr, B: tl.constexpr, C: tl.constexpr, D: tl.constexpr, OUT: tl.constexpr,
    INDEX64: tl.constexpr, BLOCK: tl.constexpr,
    PDL: tl.constexpr = False,
):
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    if INDEX64:
        lin = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        lin = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = lin < n
    a = _operand(a_ptr, lin, mask, s1, s2, s3, a0, a1, a2, a3, A, COMPUTE)
    if ARITY == 1:
        result = OP(a)
    elif ARITY == 2:
        b = _operand(b_ptr, lin, mask, s1, s2, s3, b0, b1, b2, b3, B, COMPUTE)
        result = OP(a, b)
    elif ARITY == 3:
        b = _operand(b_ptr, lin, mask, s1, s2, s3, b0, b1, b2, b3, B, COMPUTE)
        c = _operand(c_ptr, lin, mask, s1, s2, s3, c0, c1, c2, c3, C, COMPUTE)
        result = OP(a, b, c)
    else:
        b = _operand(b_ptr, lin, mask, s1, s2, s3, b0, b1, b2, b3, B, COMPUTE)
        c = _operand(c_ptr, lin, mask, s1, s2, s3, c0, c1, c2, c3, C, COMPUTE)
        d = _operand(d_ptr, lin, mask, s1, s2, s3, d0, d1, d2, d3, D, COMPUTE)
        result = OP(a, b, c, d)
    if OUT == 0:
        out_offset = lin
    else:
        out_offset = strided_offset(lin, s1, s2, s3, o0, o1, o2, o3)
    tl.store(out_ptr + out_offset, narrow(result, out_ptr.dtype.element_ty), mask=mask)
