"""Integer with floating promotes as torch and JAX do (the standard leaves it open), on every device."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import PromotionError, ScalarOutOfRangeError
from nbx.core.promotion import promote_types, result_type

INTEGERS = [nbx.int8, nbx.int16, nbx.int32, nbx.int64, nbx.uint8, nbx.uint16, nbx.uint32, nbx.uint64]
FLOATING = [nbx.float16, nbx.bfloat16, nbx.float32, nbx.float64, nbx.float8_e4m3fn, nbx.float8_e5m2,
            nbx.complex64, nbx.complex128]


@pytest.mark.parametrize("integer", INTEGERS, ids=str)
@pytest.mark.parametrize("floating", FLOATING, ids=str)
def test_an_integer_dtype_with_a_floating_dtype_gives_the_floating_dtype_both_ways(integer, floating):
    assert promote_types(integer, floating) is floating
    assert promote_types(floating, integer) is floating


def test_an_integer_tensor_times_a_python_float_gives_the_default_float():
    out = nbx.asarray([1, 2, 3]) * 2.0
    assert out.dtype is nbx.float32
    assert out.tolist() == [2.0, 4.0, 6.0]
    assert (nbx.ones(2, dtype=nbx.uint8) + 0.5).dtype is nbx.float32
    assert result_type(nbx.int16, 1j) is nbx.complex64


def test_a_rotary_table_of_int_positions_times_float_frequencies_builds():
    positions = nbx.arange(4)
    inv_freq = nbx.asarray([1.0, 0.5], dtype=nbx.float32)
    table = positions[:, None] * inv_freq[None]
    assert table.dtype is nbx.float32
    np.testing.assert_array_equal(table.numpy(), np.arange(4)[:, None] * np.array([1.0, 0.5], np.float32))
    assert (nbx.asarray([1, 2, 3]) + nbx.asarray(0.5)).tolist() == [1.5, 2.5, 3.5]


def test_the_refusals_the_standard_defines_stay():
    with pytest.raises(PromotionError, match="uint64 with int64"):
        promote_types(nbx.uint64, nbx.int64)
    with pytest.raises(ScalarOutOfRangeError, match="outside the range of int8"):
        nbx.ones(2, dtype=nbx.int8) + 1000
    with pytest.raises(PromotionError, match="bool with int32"):
        promote_types(nbx.bool, nbx.int32)
    with pytest.raises(PromotionError, match="cannot combine"):
        nbx.ones(2, dtype=nbx.bool) + 0.5
