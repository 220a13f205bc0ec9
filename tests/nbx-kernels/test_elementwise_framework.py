"""The elementwise kernel reads any strides and broadcasts in place and writes any layout."""
import itertools

import numpy as np
import pytest

import nbx.core as nbx
from nbx.kernels.cost import price

rng = np.random.default_rng(5)


def on(device, array, dtype=None):
    return nbx.asarray(array, dtype=dtype).to(device)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "maximum", "minimum"])
def test_binary_ops_over_transposed_broadcast_and_reversed_operands_match_the_oracle(device, op, dtype, check):
    a = on(device, rng.uniform(0.5, 2, (5, 7, 3)), dtype).permute(2, 0, 1)  # (3, 5, 7), not contiguous
    b = on(device, rng.uniform(0.5, 2, (7,)), dtype)[::-1]                  # broadcast, negative stride
    out = getattr(nbx, op)(a, b)
    assert out.device == device and out.dtype is nbx.as_dtype(dtype) and out.shape == (3, 5, 7)
    check(out, nbx.oracle(op, a, b), device)


@pytest.mark.parametrize("shape", [(0,), (1,), (1023,), (1025,), (3, 0, 2), (2, 3, 4, 5, 6)])
def test_zero_size_single_element_odd_lengths_and_high_rank_shapes(device, shape, check):
    a = on(device, rng.standard_normal(shape), "float32")
    out = nbx.exp(a) + 1.0
    assert out.shape == shape
    check(out, np.exp(a.numpy().astype(np.float64)) + 1.0, device)


def test_a_layout_that_does_not_collapse_to_four_dims_is_read_through_a_dense_copy(device, check):
    base = on(device, rng.standard_normal((2, 3, 4, 5, 6, 2)), "float32")
    strided = base[:, :, ::2, :, ::3, 1]  # five dims that do not merge
    check(nbx.negative(strided), -strided.numpy().astype(np.float64), device)


def test_python_scalars_are_weak_and_float64_keeps_their_precision(device, check):
    x = on(device, [1.0, 2.0], "float64")
    assert (x * 0.1).numpy().tolist() == [0.1, 0.2]
    h = on(device, [1.0, 2.0], "float16")
    assert (h + 1).dtype is nbx.float16


TRITON_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"]


@pytest.mark.parametrize("src,dst", list(itertools.product(TRITON_DTYPES, TRITON_DTYPES)))
def test_casts_round_like_the_reference(device, src, dst, check):
    values = rng.uniform(-40, 40, 257) if src != "bool" else rng.random(257) > 0.5
    x = on(device, values, src)
    out = x.to(dtype=dst)
    expected = x.numpy().astype(nbx.as_dtype(dst).host)
    got = out.numpy()
    same = got.view(f"u{got.itemsize}") == expected.view(f"u{expected.itemsize}")  # bits, sign of zero too
    if out.dtype.kind == "float":  # NaN payloads are the device's; NaN-ness must agree
        same |= np.isnan(got.astype(np.float64)) & np.isnan(expected.astype(np.float64))
    assert same.all(), [(got[i], expected[i]) for i in np.flatnonzero(~same)][:5]


def test_where_comparisons_and_setitem_into_strided_views(device, check):
    x = on(device, np.arange(12.0).reshape(3, 4), "float32")
    mask = x > 5
    assert mask.dtype is nbx.bool
    np.testing.assert_array_equal(nbx.where(mask, x, -x).numpy(), np.where(np.arange(12.0).reshape(3, 4) > 5,
                                                                          np.arange(12.0).reshape(3, 4),
                                                                          -np.arange(12.0).reshape(3, 4)))
    x[:, ::2] = 0.5
    x[1] = on(device, [9.0, 8.0, 7.0, 6.0], "float32")
    expected = np.arange(12.0).reshape(3, 4)
    expected[:, ::2] = 0.5
    expected[1] = [9, 8, 7, 6]
    np.testing.assert_array_equal(x.numpy(), expected)
    assert nbx.zeros((2, 2), dtype=nbx.int8, device=device).numpy().tolist() == [[0, 0], [0, 0]]


def test_the_declared_cost_counts_the_output_and_the_bytes_moved(device, check):
    a = on(device, np.ones((4, 8)), "float16")
    b = on(device, np.ones(8), "float32")
    cost = price("add", a, b)
    assert cost.allocated == 4 * 8 * 4  # the float32 output
    assert cost.bytes_moved == a.nbytes + b.nbytes + 4 * 8 * 4
    assert cost.flops == 32


def test_a_layout_of_five_dims_that_do_not_merge_is_copied_and_computed_without_recursion(device, check):
    base = on(device, rng.standard_normal((2, 4, 3, 4, 5)), "float32")
    view = base[:, ::2, :, ::2, :][..., ::2].permute(0, 2, 1, 3, 4)
    dense = view.contiguous()
    assert dense.is_contiguous()
    np.testing.assert_array_equal(dense.numpy(), view.numpy())
    target = nbx.zeros((2, 4, 3, 4, 5), device=device)
    target[:, ::2, :, ::2, :][..., ::2] = 1.0  # a strided five-dim write
    np.testing.assert_array_equal(target.numpy()[:, ::2, :, ::2, ::2], 1.0)
    assert target.numpy().sum() == 2 * 2 * 3 * 2 * 3


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_tensors_fill_copy_and_transpose_through_their_parts(device, dtype):
    z = nbx.zeros((3, 2), dtype=dtype, device=device)
    z[1] = nbx.asarray([1 + 2j, 3 - 1j], dtype=dtype).to(device)
    expected = np.zeros((3, 2), nbx.as_dtype(dtype).host)
    expected[1] = [1 + 2j, 3 - 1j]
    np.testing.assert_array_equal(z.numpy(), expected)
    np.testing.assert_array_equal(z.T.contiguous().numpy(), expected.T)
    np.testing.assert_array_equal(nbx.full((2,), 1 - 1j, dtype=dtype, device=device).numpy(), [1 - 1j, 1 - 1j])
