"""max/min with indices, count_nonzero, vector_norm, cumprod, cummax and cummin on the CPU: numpy's
answers, the documented index rules, the dtypes of their results and their refusals."""
import math

import nbx.core as nbx
import numpy as np
import pytest
from nbx.core.errors import ArgumentError, DTypeError, ShapeError

rng = np.random.default_rng(11)


def test_max_with_indices_returns_numpy_max_and_the_first_index_of_a_tie():
    a = np.array([[3, 7, 7, 1], [9, 9, 2, 9]], np.int32)
    values, indices = nbx.max_with_indices(nbx.asarray(a), dim=1)
    assert values.dtype is nbx.int32 and indices.dtype is nbx.int64
    assert values.numpy().tolist() == [7, 9] and indices.numpy().tolist() == [1, 0]
    low = nbx.min_with_indices(nbx.asarray(a), dim=0, keepdim=True)
    assert low.values.shape == (1, 4) and low.indices.numpy().tolist() == [[0, 0, 1, 0]]


def test_a_nan_is_the_extreme_and_its_first_index_is_returned():
    a = np.array([1.0, np.nan, 5.0, np.nan], np.float32)
    for name in ("max_with_indices", "min_with_indices"):
        values, indices = getattr(nbx, name)(nbx.asarray(a), dim=0)
        assert math.isnan(values.item()) and indices.item() == 1


def test_max_with_indices_over_every_dim_indexes_the_flattened_tensor():
    a = rng.standard_normal((3, 4, 5))
    values, indices = nbx.max_with_indices(nbx.asarray(a))
    assert values.item() == a.max() and indices.item() == a.argmax()
    kept = nbx.max_with_indices(nbx.asarray(a), keepdim=True)
    assert kept.values.shape == (1, 1, 1) and kept.indices.shape == (1, 1, 1)


def test_max_with_indices_refuses_bool_empty_and_several_dims():
    with pytest.raises(DTypeError, match="max_with_indices does not accept bool"):
        nbx.max_with_indices(nbx.asarray([True, False]), dim=0)
    with pytest.raises(ShapeError, match="min_with_indices of an empty tensor .* has no identity"):
        nbx.min_with_indices(nbx.zeros((2, 0)), dim=1)
    with pytest.raises(ShapeError, match="reduces over one dim or all of them"):
        nbx.max_with_indices(nbx.zeros((2, 3)), dim=(0, 1))


def test_count_nonzero_counts_nan_and_true_and_returns_int64():
    a = np.array([[0.0, np.nan, 2.0], [0.0, 0.0, -0.0]])
    assert nbx.count_nonzero(nbx.asarray(a)).item() == 2
    out = nbx.count_nonzero(nbx.asarray(a), dim=1, keepdim=True)
    assert out.dtype is nbx.int64 and out.numpy().tolist() == [[2], [0]]
    assert nbx.count_nonzero(nbx.asarray([True, False, True]), dim=0).item() == 2
    assert nbx.count_nonzero(nbx.zeros((0, 3)), dim=0).numpy().tolist() == [0, 0, 0]


@pytest.mark.parametrize("ord", [2, 1, math.inf, -math.inf, 0, 3, -1, 0.5])
def test_vector_norm_matches_numpy_linalg_norm_for_every_order(ord):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    a[0, 0] = 0.0  # a zero: |0|^-1 is inf, and a negative order's norm of that row is 0
    out = nbx.vector_norm(nbx.asarray(a), ord, dim=1)
    with np.errstate(divide="ignore"):
        expected = np.linalg.norm(a.astype(np.float64), ord=ord, axis=1)
    assert out.dtype is nbx.float32
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)


def test_vector_norm_of_complex_is_real_and_of_half_types_keeps_the_dtype():
    z = (rng.standard_normal(5) + 1j * rng.standard_normal(5)).astype(np.complex64)
    out = nbx.vector_norm(nbx.asarray(z))
    assert out.dtype is nbx.float32
    np.testing.assert_allclose(out.item(), np.linalg.norm(z.astype(np.complex128)), rtol=1e-6)
    assert nbx.vector_norm(nbx.asarray(z.real, dtype=nbx.bfloat16), dim=0).dtype is nbx.bfloat16
    assert nbx.vector_norm(nbx.zeros((0,)), 2).item() == 0.0


def test_vector_norm_refuses_integers_bad_orders_and_inf_orders_of_empty_tensors():
    with pytest.raises(DTypeError, match="vector_norm does not accept int32"):
        nbx.vector_norm(nbx.asarray([1, 2], dtype=nbx.int32))
    with pytest.raises(ArgumentError, match="ord must be a number"):
        nbx.vector_norm(nbx.ones(3), "fro")
    with pytest.raises(ArgumentError, match="ord must be a number"):
        nbx.vector_norm(nbx.ones(3), math.nan)
    with pytest.raises(ShapeError, match="vector_norm of ord inf over an empty tensor"):
        nbx.vector_norm(nbx.zeros((2, 0)), math.inf, dim=1)


@pytest.mark.parametrize("dtype,expected", [("int8", "int64"), ("uint8", "uint64"), ("float16", "float16"),
                                            ("float64", "float64")])
def test_cumprod_accumulates_like_cumsum_and_matches_numpy(dtype, expected):
    a = rng.integers(1, 3, (3, 5))
    x = nbx.asarray(a, dtype=dtype)
    out = nbx.cumprod(x, dim=1)
    assert out.dtype is nbx.as_dtype(expected)
    np.testing.assert_array_equal(out.numpy().astype(np.float64), np.cumprod(a.astype(np.float64), axis=1))


def test_cumprod_needs_a_dim_above_one_dim_takes_a_scalar_and_refuses_bool_as_cumsum():
    with pytest.raises(DTypeError, match="cumprod does not accept bool"):
        nbx.cumprod(nbx.asarray([True, False]))
    with pytest.raises(ShapeError, match="cumprod of a 2-D tensor needs a dim"):
        nbx.cumprod(nbx.ones((2, 2)))
    assert nbx.cumprod(nbx.asarray(3.0)).item() == 3.0
    assert nbx.cumprod(nbx.asarray([2, 3, 4]), dtype=nbx.float32).numpy().tolist() == [2.0, 6.0, 24.0]


def test_cummax_moves_the_index_forward_on_ties_and_keeps_the_first_nan():
    a = np.array([[1.0, 3.0, 3.0, np.nan, 5.0, np.nan], [2.0, 2.0, 1.0, 0.0, 7.0, 7.0]], np.float32)
    values, indices = nbx.cummax(nbx.asarray(a), dim=1)
    np.testing.assert_array_equal(values.numpy(), np.maximum.accumulate(a, axis=1))
    assert indices.numpy().tolist() == [[0, 1, 2, 3, 3, 3], [0, 1, 1, 1, 4, 5]]
    low = nbx.cummin(nbx.asarray(a), dim=1)
    np.testing.assert_array_equal(low.values.numpy(), np.minimum.accumulate(a, axis=1))
    assert low.indices.numpy().tolist() == [[0, 0, 0, 3, 3, 3], [0, 1, 2, 3, 3, 3]]


def test_cummax_along_the_first_dim_of_integers_and_refusals():
    a = rng.integers(-5, 5, (6, 3)).astype(np.int16)
    values, indices = nbx.cummax(nbx.asarray(a), dim=0)
    assert values.dtype is nbx.int16 and indices.dtype is nbx.int64
    np.testing.assert_array_equal(values.numpy(), np.maximum.accumulate(a, axis=0))
    np.testing.assert_array_equal(np.take_along_axis(a, indices.numpy(), 0), values.numpy())
    with pytest.raises(DTypeError, match="cummin does not accept bool"):
        nbx.cummin(nbx.asarray([True]), dim=0)
    with pytest.raises(ShapeError, match="cummax of a 2-D tensor needs a dim"):
        nbx.cummax(nbx.ones((2, 2)))
    empty = nbx.cummax(nbx.zeros((0, 4)), dim=0)
    assert empty.values.shape == (0, 4) and empty.indices.shape == (0, 4)


def test_the_oracles_of_the_new_ops_compute_in_float64():
    x = nbx.asarray(rng.standard_normal(7).astype(np.float16))
    assert nbx.oracle("vector_norm", x, (0,), False, ord=2).dtype == np.float64
    assert nbx.oracle("cumprod", x, 0).dtype == np.float64
    values, indices = nbx.oracle("max_with_indices", x, (0,), False)
    assert values.dtype == np.float16 and indices.dtype == np.int64
