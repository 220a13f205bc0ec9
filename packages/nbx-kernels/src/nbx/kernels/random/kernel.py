"""One Triton kernel for every draw of nbx.core.random, on nbx.core's Philox stream.

A program takes BLOCK counters of the draw and runs Triton's own Philox4x32-10 (tl.philox_impl)
once per counter under the key (seed_lo, seed_hi): four words a call, the words
nbx.core.random.philox computes on the host, bit for bit. Word j of the draw (lane j % 4 of counter
offset + j // 4) makes element j, and randint's element j takes words 2j, 2j + 1: a program writes
4 * BLOCK elements (randint 2 * BLOCK). The lanes are put in element order with tl.interleave
(interleave(interleave(l0, l2), interleave(l1, l3)) = l0, l1, l2, l3 of each counter in turn): the
joined dims stay in one thread's registers, so a thread holds whole runs of consecutive elements
and writes them with vector stores (sm_90 PTX, Triton 3.9: float32 two st.global.v4.b32 a thread,
bfloat16 one; four strided stores, one per lane, compile to eight scalar st.global a thread).

Every 64-bit quantity (seed, offset, randint's span and low) and every float parameter (as its bit
pattern) arrives as two 32-bit words passed as int32: one argument type whatever the value, so the
kernel compiles once per draw and dtype instead of once per range of the seed or offset (Triton
types a Python int by its range and makes a value of 1 a constant). The counter's low word
carries into the high word, as a 64-bit counter does.

DRAW picks what is made of the words; X is the tensor operand of bernoulli (probabilities,
broadcast) and dropout (the input), read through four sizes and strides, or densely. PHASE (0-3)
skips the first words of the first counter: only a launch that continues a draw split over several
launches starts inside a counter (a draw itself always starts on lane 0).
"""
import triton
import triton.language as tl

from ..elementwise.kernel import strided_offset

# what DRAW selects: ints for the wrappers, the same values as constexprs for the kernel
RAND, RANDN, RANDINT, UNIFORM, NORMAL, BERNOULLI, BERNOULLI_TENSOR, DROPOUT_MASK, DROPOUT = range(9)
_RAND, _RANDN, _RANDINT, _UNIFORM, _NORMAL = (tl.constexpr(v) for v in (RAND, RANDN, RANDINT, UNIFORM, NORMAL))
_BERNOULLI, _BERNOULLI_TENSOR, _DROPOUT_MASK = (tl.constexpr(v) for v in (BERNOULLI, BERNOULLI_TENSOR, DROPOUT_MASK))

# integer arguments never specialised on their values (Triton would compile again for a value of 1
# or a multiple of 16, which tells it nothing here); n stays specialised: a multiple of 16 lets the
# masked stores be vectorised
_UNSPECIALISED = ["seed_lo", "seed_hi", "off_lo", "off_hi", "a_lo", "a_hi", "b_lo", "b_hi",
                  "s1", "s2", "s3", "x0", "x1", "x2", "x3"]


@triton.jit
def _u32(word):
    return word.to(tl.uint32, bitcast=True)


@triton.jit
def _u64(lo, hi):
    return (_u32(hi).to(tl.uint64) << 32) | _u32(lo).to(tl.uint64)


@triton.jit
def _scalar(lo, hi, COMPUTE: tl.constexpr):
    """A float parameter from its bits: float32 in lo, or float64 across (lo, hi)."""
    if COMPUTE == tl.float64:
        value = _u64(lo, hi).to(tl.float64, bitcast=True)
    else:
        value = _u32(lo).to(tl.float32, bitcast=True)
    return value


@triton.jit
def _to(value, out_ty: tl.constexpr):
    """value in out's dtype, rounded to nearest even. float32 -> bfloat16 rounds through the bits
    (Triton's interpreter truncates that cast; the GPU's cvt.rn gives these same bits)."""
    if value.dtype == tl.int1 and out_ty.is_floating():  # via float32: the interpreter cannot cast
        value = value.to(tl.float32)                        # int1 to bfloat16 or float8 directly
    if out_ty == tl.bfloat16 and value.dtype == tl.float32:
        bits = value.to(tl.uint32, bitcast=True)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        bits = tl.where(value != value, bits >> 16, rounded)  # a NaN keeps its high bits
        result = bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        result = value.to(out_ty)
    return result


@triton.jit
def _index(lin, s1, s2, s3, st0, st1, st2, st3, DENSE: tl.constexpr):
    """Where element lin (row-major over four sizes) of an operand lies, through its strides."""
    if DENSE:
        at = lin
    else:
        at = strided_offset(lin, s1, s2, s3, st0, st1, st2, st3)
    return at


@triton.jit
def _box_muller(u1, u2):
    """Both branches of Box-Muller in float32 (cosine, sine), as nbx.core.random.philox.box_muller.
    sqrt_rn: the correctly rounded root numpy takes (tl.sqrt may be approximate on a GPU)."""
    u1 = tl.maximum(1.0e-7, u1)
    theta = 6.283185307179586 * u2
    radius = tl.sqrt_rn(-2.0 * tl.log(u1))
    return radius * tl.cos(theta), radius * tl.sin(theta)


@triton.jit
def _in_lane_order(l0, l1, l2, l3):
    """Four per-counter blocks as one block of 4 * BLOCK: l0[k], l1[k], l2[k], l3[k] for each k."""
    return tl.interleave(tl.interleave(l0, l2), tl.interleave(l1, l3))


@triton.jit
def _bits64(lo, hi):
    return lo.to(tl.uint64) | (hi.to(tl.uint64) << 32)


@triton.jit(do_not_specialize=_UNSPECIALISED)
def random_kernel(
    out_ptr, n,
    seed_lo, seed_hi, off_lo, off_hi,
    a_lo, a_hi, b_lo, b_hi,
    x_ptr, s1, s2, s3, x0, x1, x2, x3,
    DRAW: tl.constexpr, COMPUTE: tl.constexpr, BELOW_ONE: tl.constexpr, FULL_RANGE: tl.constexpr,
    X_DENSE: tl.constexpr, WIDE: tl.constexpr, PHASE: tl.constexpr, BLOCK: tl.constexpr,
):
    if WIDE:  # indices and counters past 2**31 - 1
        first = tl.program_id(0).to(tl.int64) * BLOCK
    else:
        first = tl.program_id(0) * BLOCK
    rel = first + tl.arange(0, BLOCK)  # this program's counters, counted from the draw's offset

    # counter offset + rel, as (low word, high word) with the carry
    base_lo = _u32(off_lo)
    c0 = base_lo + rel.to(tl.uint32)
    c1 = _u32(off_hi) + (c0 < base_lo).to(tl.uint32)
    if WIDE:
        c1 = c1 + (rel >> 32).to(tl.uint32)
    zero = tl.zeros_like(c0)
    w0, w1, w2, w3 = tl.philox_impl(c0, c1, zero, zero, _u32(seed_lo), _u32(seed_hi))

    out_ty = out_ptr.dtype.element_ty
    if DRAW == _RANDINT:  # two elements a counter, 64 bits each
        lin = first * 2 + tl.arange(0, 2 * BLOCK)
        mask = lin < n
        bits = tl.interleave(_bits64(w0, w1), _bits64(w2, w3))
        if not FULL_RANGE:
            bits = bits % _u64(a_lo, a_hi)
        value = (bits + _u64(b_lo, b_hi)).to(out_ty)  # wraps mod 2**64, then keeps the low bits
    else:  # four elements a counter
        lin = first * 4 + tl.arange(0, 4 * BLOCK) - PHASE
        mask = lin < n
        if PHASE != 0:
            mask = mask & (lin >= 0)
        if DRAW == _RANDN or DRAW == _NORMAL:
            n0, n1 = _box_muller(tl.uint_to_uniform_float(w0), tl.uint_to_uniform_float(w1))
            n2, n3 = _box_muller(tl.uint_to_uniform_float(w2), tl.uint_to_uniform_float(w3))
            normal = _in_lane_order(n0, n1, n2, n3)
            if DRAW == _NORMAL:
                normal = normal.to(COMPUTE) * _scalar(a_lo, a_hi, COMPUTE) + _scalar(b_lo, b_hi, COMPUTE)
            value = _to(normal, out_ty)
        else:
            u = _in_lane_order(tl.uint_to_uniform_float(w0), tl.uint_to_uniform_float(w1),
                               tl.uint_to_uniform_float(w2), tl.uint_to_uniform_float(w3))
            if DRAW == _RAND:
                if BELOW_ONE != 0.0:  # a narrow dtype: values that would round to 1.0 take the largest below
                    u = tl.minimum(u, BELOW_ONE)
                value = _to(u, out_ty)
            elif DRAW == _UNIFORM:
                value = _to(u.to(COMPUTE) * _scalar(a_lo, a_hi, COMPUTE) + _scalar(b_lo, b_hi, COMPUTE), out_ty)
            elif DRAW == _BERNOULLI:
                value = _to(u < _scalar(a_lo, a_hi, tl.float32), out_ty)
            elif DRAW == _DROPOUT_MASK:
                value = _to(u >= _scalar(a_lo, a_hi, tl.float32), out_ty)
            else:
                operand = tl.load(x_ptr + _index(lin, s1, s2, s3, x0, x1, x2, x3, X_DENSE), mask=mask).to(COMPUTE)
                if DRAW == _BERNOULLI_TENSOR:
                    value = _to(u.to(COMPUTE) < operand, out_ty)
                else:  # DROPOUT
                    keep = u >= _scalar(a_lo, a_hi, tl.float32)
                    scaled = operand * _scalar(b_lo, b_hi, COMPUTE)
                    value = _to(tl.where(keep, scaled, tl.zeros_like(scaled)), out_ty)
    tl.store(out_ptr + lin, value, mask=mask)
