"""int4 nibbles to floats in registers, for the int4 kernels (quantized.py): the magic-number trick
(a nibble ORed into the low mantissa bits of a float whose ulp is 1, less that float) compiled as
inline PTX on 32-bit registers of packed weight, and the same values in portable Triton (the
interpreter, float32 activations).

_nibble_values: elementwise, any dtype. _nibble_pairs (_PAIRS_ASM): four packed bytes into the low
and the high nibbles as 16-bit pairs (the wide tiles). _halves_values (_HALVES_ASM): two 16-bit
halves into four pairs C + q, one lop3 each (the decode tiles, which take C off through the sums of
x). _halves_dequantized (_PRESCALED_ASM): the same pairs less C, then q * scale + minimum in one
16-bit fma a pair (the prescaled tiles). _scaled: q * scale (+ minimum) in float32 rounded to the
dot's type.
"""
import triton
import triton.language as tl

from ..elementwise.casts import COMPILED, narrow
from .kernel import _dot_operand


@triton.jit
def _nibble_values(n, SIGNED: tl.constexpr, DOT: tl.constexpr):
    """The nibbles n (uint8, 0..15) as the integers q they code, exactly, in DOT: the nibble ORed
    into the low mantissa bits of a float whose ulp is 1 (bfloat16 128, float16 1024, float32 2^23),
    less that float, in place of an integer-to-float conversion per element. (The interpreter's
    numpy has no bfloat16: there a bfloat16 dot takes float32 operands.)"""
    bias: tl.constexpr = 8 if SIGNED else 0
    if SIGNED:
        n = n ^ 8
    if DOT == tl.bfloat16 and COMPILED:
        q = (n.to(tl.uint16) | 0x4300).to(tl.bfloat16, bitcast=True) - (128.0 + bias)
    elif DOT == tl.float16:
        q = (n.to(tl.uint16) | 0x6400).to(tl.float16, bitcast=True) - (1024.0 + bias)
    else:
        q = (n.to(tl.uint32) | 0x4B000000).to(tl.float32, bitcast=True) - (8388608.0 + bias)
    return q


# Four packed bytes (one register) to the low and the high nibbles as 16-bit float pairs, the same
# magic numbers on pairs: bytes 0 and 1 (2 and 3) permuted into the two halves of a word, masked and
# ORed with the magic pair in one lop3 (signed: XORed, which flips bit 3 and sets the magic's bits
# at once), the high nibbles likewise after a shift by 4, then one packed fma less the magic.
_PAIRS_ASM = """{
.reg .b32 t0, t1, mask, magic, one, less;
mov.b32 mask, 0x000F000F;
mov.b32 magic, MAGIC;
mov.b32 one, ONE;
mov.b32 less, LESS;
prmt.b32 t0, $4, $4, 0x0100;
prmt.b32 t1, $4, $4, 0x0302;
lop3.b32 $0, t0, mask, magic, LUT;
lop3.b32 $1, t1, mask, magic, LUT;
shr.u32 t0, t0, 4;
shr.u32 t1, t1, 4;
lop3.b32 $2, t0, mask, magic, LUT;
lop3.b32 $3, t1, mask, magic, LUT;
fma.rn.TYPE $0, $0, one, less;
fma.rn.TYPE $1, $1, one, less;
fma.rn.TYPE $2, $2, one, less;
fma.rn.TYPE $3, $3, one, less;
}"""
# (magic, one, less) of each (bfloat16?, signed?) 16-bit dot type (signed: q ^ 8, then less 8 more)
_CONSTANTS = {(True, False): ("0x43004300", "0x3F803F80", "0xC300C300"),
              (True, True): ("0x43084308", "0x3F803F80", "0xC308C308"),
              (False, False): ("0x64006400", "0x3C003C00", "0xE400E400"),
              (False, True): ("0x64086408", "0x3C003C00", "0xE408E408")}


def _filled(template: str) -> dict:
    """template with MAGIC, ONE, LESS, LUT (signed: XOR) and TYPE filled in, by (bfloat16?, signed?)."""
    return {(bf, signed): template.replace("MAGIC", magic).replace("ONE", one).replace("LESS", less)
            .replace("LUT", "0x6A" if signed else "0xEA").replace("TYPE", "bf16x2" if bf else "f16x2")
            for (bf, signed), (magic, one, less) in _CONSTANTS.items()}


_PAIRS = _filled(_PAIRS_ASM)
PAIRS_BF16, PAIRS_BF16_SIGNED = tl.constexpr(_PAIRS[True, False]), tl.constexpr(_PAIRS[True, True])
PAIRS_F16, PAIRS_F16_SIGNED = tl.constexpr(_PAIRS[False, False]), tl.constexpr(_PAIRS[False, True])


@triton.jit
def _nibble_pairs(packed, SIGNED: tl.constexpr, DOT: tl.constexpr):
    """(q of the low nibbles, q of the high nibbles) of packed bytes, exactly, in DOT: compiled for
    a 16-bit DOT, four bytes a few instructions (_PAIRS_ASM; elementwise code of the same numbers
    spends three byte permutes a pair); else _nibble_values."""
    if COMPILED and (DOT == tl.bfloat16 or DOT == tl.float16):
        if DOT == tl.bfloat16:
            low, high = tl.inline_asm_elementwise(PAIRS_BF16_SIGNED if SIGNED else PAIRS_BF16, "=r,=r,=r,=r,r",
                                                  [packed], dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
        else:
            low, high = tl.inline_asm_elementwise(PAIRS_F16_SIGNED if SIGNED else PAIRS_F16, "=r,=r,=r,=r,r",
                                                  [packed], dtype=(tl.float16, tl.float16), is_pure=True, pack=4)
    else:
        low, high = _nibble_values(packed & 0xF, SIGNED, DOT), _nibble_values(packed >> 4, SIGNED, DOT)
    return low, high


# Two 16-bit halves of packed weight (one register: K 4h .. 4h + 7, nibble j of half h at K 4h + j) to
# four 16-bit float pairs C + q, one lop3 each (magic ORed in; signed: XORed, as _PAIRS_ASM): pair j holds
# nibble j of each half. Elementwise in the halves (output j of half h is its nibble j), so the register
# pairs are the compiler's to reorder into K order. The magic C stays in the values (exact: a 16-bit
# float's ulp is 1 there) and comes off once a K step through the sum of x (_fold_step).
_HALVES_ASM = """{
.reg .b32 t1, t2, t3, mask, magic;
mov.b32 mask, 0x000F000F;
mov.b32 magic, MAGIC;
shr.u32 t1, $4, 4;
shr.u32 t2, $4, 8;
shr.u32 t3, $4, 12;
lop3.b32 $0, $4, mask, magic, LUT;
lop3.b32 $1, t1, mask, magic, LUT;
lop3.b32 $2, t2, mask, magic, LUT;
lop3.b32 $3, t3, mask, magic, LUT;
}"""
_HALVES = _filled(_HALVES_ASM)
HALVES_BF16, HALVES_BF16_SIGNED = tl.constexpr(_HALVES[True, False]), tl.constexpr(_HALVES[True, True])
HALVES_F16, HALVES_F16_SIGNED = tl.constexpr(_HALVES[False, False]), tl.constexpr(_HALVES[False, True])


@triton.jit
def halves_magic(DOT: tl.constexpr, SIGNED: tl.constexpr):
    """C of _halves_values: the float whose ulp is 1 (float16's 1024, else 128: exact in bfloat16 and
    float32), 8 more for a signed nibble (stored as C + 8 + q)."""
    return (1024.0 if DOT == tl.float16 else 128.0) + (8.0 if SIGNED else 0.0)


@triton.jit
def _halves_values(halves, SIGNED: tl.constexpr, DOT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The (BLOCK_N, BLOCK_K) values C + q in DOT, in K order, of packed halves (BLOCK_N, BLOCK_K / 4);
    signed q = (n ^ 8) - 8 is stored as C + 8 + q. Compiled for a 16-bit DOT: _HALVES_ASM; else the
    same values from _nibble_values."""
    if COMPILED and (DOT == tl.bfloat16 or DOT == tl.float16):
        if DOT == tl.bfloat16:
            o0, o1, o2, o3 = tl.inline_asm_elementwise(HALVES_BF16_SIGNED if SIGNED else HALVES_BF16,
                                                       "=r,=r,=r,=r,r", [halves], dtype=(tl.bfloat16,) * 4,
                                                       is_pure=True, pack=2)
        else:
            o0, o1, o2, o3 = tl.inline_asm_elementwise(HALVES_F16_SIGNED if SIGNED else HALVES_F16,
                                                       "=r,=r,=r,=r,r", [halves], dtype=(tl.float16,) * 4,
                                                       is_pure=True, pack=2)
    else:
        magic = halves_magic(DOT, SIGNED)
        o0 = _nibble_values(halves & 0xF, SIGNED, DOT) + magic
        o1 = _nibble_values((halves >> 4) & 0xF, SIGNED, DOT) + magic
        o2 = _nibble_values((halves >> 8) & 0xF, SIGNED, DOT) + magic
        o3 = _nibble_values(halves >> 12, SIGNED, DOT) + magic
    return tl.reshape(tl.join(tl.join(o0, o2), tl.join(o1, o3)), (BLOCK_N, BLOCK_K))


# _HALVES_ASM's pairs C + q less C (exact), then q * scale + minimum in one fma a pair (one rounding, as
# the reference's cast of the float32 value rounds): the dot's operand dequantized, two halves a register.
_PRESCALED_ASM = _HALVES_ASM.replace("mask, magic;", "mask, magic, one, less;").replace(
    "mov.b32 magic, MAGIC;", "mov.b32 magic, MAGIC;\nmov.b32 one, ONE;\nmov.b32 less, LESS;").replace(
    "}", "".join(f"fma.rn.TYPE ${j}, ${j}, one, less;\nfma.rn.TYPE ${j}, ${j}, $5, $6;\n" for j in range(4)) + "}")
_PRESCALED = _filled(_PRESCALED_ASM)
PRESCALED_BF16, PRESCALED_BF16_SIGNED = tl.constexpr(_PRESCALED[True, False]), tl.constexpr(_PRESCALED[True, True])
PRESCALED_F16, PRESCALED_F16_SIGNED = tl.constexpr(_PRESCALED[False, False]), tl.constexpr(_PRESCALED[False, True])


@triton.jit
def _halves_dequantized(halves, scale, minimum, SIGNED: tl.constexpr, DOT: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr):
    """The (BLOCK_N, BLOCK_K) weight q * scale + minimum in DOT, in K order, of packed halves
    (BLOCK_N, BLOCK_K / 4) and each row's group scale and minimum (float32; symmetric: minimum 0).
    Compiled for a 16-bit DOT: _PRESCALED_ASM (scale and minimum in DOT: the stored scales' own
    16-bit values); else _halves_values less C, through _scaled."""
    if COMPILED and (DOT == tl.bfloat16 or DOT == tl.float16):
        s = tl.broadcast_to(scale.to(DOT)[:, None], (BLOCK_N, BLOCK_K // 4))
        z = tl.broadcast_to(minimum.to(DOT)[:, None], (BLOCK_N, BLOCK_K // 4))
        if DOT == tl.bfloat16:
            o0, o1, o2, o3 = tl.inline_asm_elementwise(PRESCALED_BF16_SIGNED if SIGNED else PRESCALED_BF16,
                                                       "=r,=r,=r,=r,r,r,r", [halves, s, z], dtype=(tl.bfloat16,) * 4,
                                                       is_pure=True, pack=2)
        else:
            o0, o1, o2, o3 = tl.inline_asm_elementwise(PRESCALED_F16_SIGNED if SIGNED else PRESCALED_F16,
                                                       "=r,=r,=r,=r,r,r,r", [halves, s, z], dtype=(tl.float16,) * 4,
                                                       is_pure=True, pack=2)
        w = tl.reshape(tl.join(tl.join(o0, o2), tl.join(o1, o3)), (BLOCK_N, BLOCK_K))
    else:
        q = _halves_values(halves, SIGNED, DOT, BLOCK_N, BLOCK_K) - halves_magic(DOT, SIGNED)
        w = _scaled(q, scale, minimum, True, DOT)
    return w


@triton.jit
def _scaled(q, scale, minimum, ASYMMETRIC: tl.constexpr, DOT: tl.constexpr):
    """q * scale (+ minimum) in float32, rounded to DOT as the reference rounds a cast (compiled:
    the hardware's rounding; a weight is never NaN where its scale is not)."""
    w = q.to(tl.float32) * scale[:, None]
    if ASYMMETRIC:
        w += minimum[:, None]
    if DOT != tl.float32:
        if COMPILED:
            w = w.to(DOT, fp_downcast_rounding="rtne")
        else:
            w = narrow(w, DOT)
    return _dot_operand(w, DOT)
