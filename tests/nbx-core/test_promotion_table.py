"""The promotion table in data equals the Array API standard's rules, derived here independently."""
import itertools

import pytest

import nbx.core as nbx
from nbx.core import dtypes
from nbx.core.errors import PromotionError, ScalarOutOfRangeError
from nbx.core.promotion import TABLE, promote_types, result_type

SIGNED = ["int8", "int16", "int32", "int64"]
UNSIGNED = ["uint8", "uint16", "uint32", "uint64"]
REAL = ["float16", "float32", "float64"]
COMPLEX = ["complex64", "complex128"]
STANDARD = ["bool"] + SIGNED + UNSIGNED + REAL + COMPLEX


def standard_rule(a: str, b: str):
    """The standard's promotion, from its prose: None where it leaves the pair undefined."""
    da, db = dtypes.TABLE[a], dtypes.TABLE[b]
    if a == b:
        return a
    kinds = {da.kind, db.kind}
    if "bool" in kinds:
        return None
    if kinds <= {"int", "uint"}:
        if da.kind == db.kind:
            return a if da.bits >= db.bits else b
        signed, unsigned = (da, db) if da.kind == "int" else (db, da)
        for candidate in SIGNED:
            if dtypes.TABLE[candidate].bits > unsigned.bits and dtypes.TABLE[candidate].bits >= signed.bits:
                return candidate
        return None
    if kinds <= {"float", "complex"}:
        precision = max(d.bits // (2 if d.kind == "complex" else 1) for d in (da, db))
        if "complex" in kinds:
            return "complex64" if precision <= 32 else "complex128"
        return {16: "float16", 32: "float32", 64: "float64"}[precision]
    if kinds & {"int", "uint"} and kinds & {"float", "complex"}:
        return a if da.kind in ("float", "complex") else b  # nbx's mixed-kinds rule: the floating dtype
    return None


@pytest.mark.parametrize("a,b", list(itertools.product(STANDARD, STANDARD)))
def test_every_standard_pair_promotes_as_the_standard_says_or_is_refused(a, b):
    expected = standard_rule(a, b)
    if expected is None:
        with pytest.raises(PromotionError, match="not defined by the Array API standard"):
            promote_types(dtypes.TABLE[a], dtypes.TABLE[b])
    else:
        assert promote_types(dtypes.TABLE[a], dtypes.TABLE[b]) is dtypes.TABLE[expected]


def test_promotion_is_symmetric_for_every_pair_in_the_table():
    for (a, b), result in TABLE.items():
        assert TABLE[b, a] is result


def test_bfloat16_meets_float16_at_float32_and_float8_promotes_only_with_itself():
    assert promote_types(nbx.bfloat16, nbx.float16) is nbx.float32
    assert promote_types(nbx.bfloat16, nbx.bfloat16) is nbx.bfloat16
    with pytest.raises(PromotionError, match="float8_e4m3fn with float16"):
        promote_types(nbx.float8_e4m3fn, nbx.float16)


def test_uint64_with_a_signed_integer_is_refused_by_name():
    with pytest.raises(PromotionError, match="uint64 with int32"):
        nbx.ones(2, dtype=nbx.uint64) + nbx.ones(2, dtype=nbx.int32)


def test_python_int_outside_the_integer_range_is_refused():
    with pytest.raises(ScalarOutOfRangeError, match=r"Python int 256 is outside the range of uint8 \[0, 255\]"):
        nbx.ones(2, dtype=nbx.uint8) + 256
    with pytest.raises(ScalarOutOfRangeError, match="outside the range of int8"):
        result_type(nbx.int8, -129)


def test_weak_scalars_keep_the_tensor_dtype():
    assert (nbx.ones(2, dtype=nbx.float16) + 1.5).dtype is nbx.float16
    assert (nbx.ones(2, dtype=nbx.int8) * 3).dtype is nbx.int8
    assert (nbx.ones(2, dtype=nbx.complex64) + 1j).dtype is nbx.complex64
    assert (2 - nbx.ones(2, dtype=nbx.uint16)).dtype is nbx.uint16


@pytest.mark.parametrize("dtype,scalar", [("bool", 1.5), ("float32", 1j), ("bool", 1), ("int8", True)])
def test_a_scalar_of_a_kind_the_standard_does_not_pair_with_the_dtype_is_refused(dtype, scalar):
    with pytest.raises(PromotionError, match="cannot combine with a"):
        result_type(dtypes.TABLE[dtype], scalar)


def test_bool_tensor_with_a_number_tensor_is_refused_not_guessed():
    with pytest.raises(PromotionError, match="bool with float32"):
        nbx.ones(2, dtype=nbx.bool) + nbx.ones(2, dtype=nbx.float32)
