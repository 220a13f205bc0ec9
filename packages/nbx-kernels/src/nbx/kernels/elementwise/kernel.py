"""One Triton kernel for elementwise ops of one to three operands over any strides.

Each program handles BLOCK consecutive elements of the output in row-major order. The output and
each operand are
pointers indexed either by the linear index itself (DENSE) or through four sizes and their own
four strides (broadcast dims have stride 0); an operand may also be a scalar value (SCALAR). OP is a @triton.jit function
of the operands in the COMPUTE dtype; its result is rounded once to the output's dtype.
"""
import triton
import triton.language as tl


@triton.jit
def _offset(lin, s1, s2, s3, st0, st1, st2, st3, DENSE: tl.constexpr):
    if DENSE:
        offset = lin
    else:
        i3 = lin % s3
        rest = lin // s3
        i2 = rest % s2
        rest = rest // s2
        i1 = rest % s1
        i0 = rest // s1
        offset = i0 * st0 + i1 * st1 + i2 * st2 + i3 * st3
    return offset


@triton.jit
def _operand(ptr, lin, mask, s1, s2, s3, st0, st1, st2, st3,
             SCALAR: tl.constexpr, DENSE: tl.constexpr, COMPUTE: tl.constexpr):
    if SCALAR:
        value = tl.full(lin.shape, ptr, COMPUTE)
    else:
        value = tl.load(ptr + _offset(lin, s1, s2, s3, st0, st1, st2, st3, DENSE), mask=mask).to(COMPUTE)
    return value


@triton.jit
def elementwise_kernel(
    out_ptr, o0, o1, o2, o3, n, s1, s2, s3,
    a_ptr, a0, a1, a2, a3,
    b_ptr, b0, b1, b2, b3,
    c_ptr, c0, c1, c2, c3,
    OP: tl.constexpr, ARITY: tl.constexpr, COMPUTE: tl.constexpr,
    A_SCALAR: tl.constexpr, A_DENSE: tl.constexpr,
    B_SCALAR: tl.constexpr, B_DENSE: tl.constexpr,
    C_SCALAR: tl.constexpr, C_DENSE: tl.constexpr,
    OUT_DENSE: tl.constexpr, BLOCK: tl.constexpr,
):
    lin = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = lin < n
    a = _operand(a_ptr, lin, mask, s1, s2, s3, a0, a1, a2, a3, A_SCALAR, A_DENSE, COMPUTE)
    if ARITY == 1:
        result = OP(a)
    elif ARITY == 2:
        b = _operand(b_ptr, lin, mask, s1, s2, s3, b0, b1, b2, b3, B_SCALAR, B_DENSE, COMPUTE)
        result = OP(a, b)
    else:
        b = _operand(b_ptr, lin, mask, s1, s2, s3, b0, b1, b2, b3, B_SCALAR, B_DENSE, COMPUTE)
        c = _operand(c_ptr, lin, mask, s1, s2, s3, c0, c1, c2, c3, C_SCALAR, C_DENSE, COMPUTE)
        result = OP(a, b, c)
    out_offset = _offset(lin, s1, s2, s3, o0, o1, o2, o3, OUT_DENSE)
    tl.store(out_ptr + out_offset, result.to(out_ptr.dtype.element_ty), mask=mask)
