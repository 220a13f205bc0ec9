"""The same input gets the same answer, or the same named error, on the cpu and on the kernels' devices."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import NotSupportedError, ShapeError


def exact(out, expected):  # the values chosen are exact in every dtype here: no tolerance needed
    np.testing.assert_array_equal(out.numpy().astype(np.float64), expected)


@pytest.fixture(params=["cpu", "kernels"])
def each_device(request, device):
    return nbx.as_device("cpu") if request.param == "cpu" else device


def test_int_positions_times_float_frequencies_give_float32_on_every_device(each_device):
    positions = nbx.arange(6).to(each_device)
    inv_freq = nbx.asarray([1.0, 0.25, 0.0625], dtype=nbx.float32).to(each_device)
    table = positions[:, None] * inv_freq[None]
    assert table.dtype is nbx.float32 and table.device == each_device
    exact(table, np.arange(6)[:, None] * np.array([1.0, 0.25, 0.0625]))
    scaled = positions * 0.5
    assert scaled.dtype is nbx.float32
    exact(scaled, np.arange(6) * 0.5)


def test_uint8_with_bfloat16_gives_bfloat16_on_every_device(each_device):
    a = nbx.asarray([1, 2, 250], dtype=nbx.uint8).to(each_device)
    b = nbx.asarray([0.5, 0.25, 2.0], dtype=nbx.bfloat16).to(each_device)
    out = a + b
    assert out.dtype is nbx.bfloat16
    exact(out, np.array([1.5, 2.25, 252.0]))


def test_a_broadcasting_mismatch_is_the_same_shape_error_on_every_device(each_device):
    a, b = nbx.ones(2).to(each_device), nbx.ones(3).to(each_device)
    with pytest.raises(ShapeError, match=r"shapes \(2,\), \(3,\) do not broadcast"):
        a + b


def test_an_integer_matmul_is_the_same_named_refusal_on_every_device(each_device):
    a = nbx.asarray([[1, 2], [3, 4]], dtype=nbx.int32).to(each_device)
    with pytest.raises(NotSupportedError, match=r"refused on every device: matmul does not take int32 \(x1\)"):
        nbx.matmul(a, a)


def test_an_integer_operand_with_a_float_one_is_refused_by_matmul_alike_on_every_device(each_device):
    a = nbx.asarray([[1, 2], [3, 4]]).to(each_device)
    with pytest.raises(NotSupportedError, match=r"matmul does not take int64 \(x1\)"):
        nbx.matmul(a, a.float())
