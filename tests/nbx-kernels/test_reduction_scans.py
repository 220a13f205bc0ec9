"""The scan kernels (cumsum, cumprod, cummax, cummin) agree with the float64 oracle for every dtype
their front-ends accept, over any layout, and give the same bits on every run."""
import nbx.core as nbx
import numpy as np
import pytest
from nbx.core.errors import DTypeError, ShapeError

import reduction_samples
from reduction_samples import on

DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool"]
ACCEPTS = {"cumsum": "int uint float", "cumprod": "int uint float", "cummax": "int uint float",
           "cummin": "int uint float"}


def sample(dtype, shape, low=-3.0, high=3.0):
    """reduction_samples.sample with integers in -4..4 (the scans were written against these)."""
    return reduction_samples.sample(dtype, shape, low, high, int_low=-4, int_high=5)


def check_scan(op, x, dim, device, check):
    out = getattr(nbx, op)(x, dim)
    expected = nbx.oracle(op, x, dim)
    if op in ("cummax", "cummin"):
        check(out.values, expected[0], device)
        check(out.indices, expected[1], device)
        return out.values
    check(out, expected, device)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", sorted(ACCEPTS))
def test_every_scan_matches_the_oracle_or_refuses_the_dtype(device, op, dtype, check):
    low, high = (0.8, 1.25) if op == "cumprod" else (-3.0, 3.0)
    x = on(device, sample(dtype, (3, 37), low, high), dtype)
    if nbx.as_dtype(dtype).kind not in ACCEPTS[op]:
        with pytest.raises(DTypeError, match=f"{op} does not accept {dtype}"):
            getattr(nbx, op)(x, 1)
        return
    out = check_scan(op, x, 1, device, check)
    assert out.device == device and out.shape == (3, 37)


@pytest.mark.parametrize("op", sorted(ACCEPTS))
def test_scans_along_strided_transposed_and_middle_dims(device, op, check):
    low, high = (0.8, 1.25) if op == "cumprod" else (-3.0, 3.0)
    base = on(device, sample("float32", (5, 6, 7), low, high), "float32")
    check_scan(op, base[:, ::2, 1:], 1, device, check)   # strided, kept dims collapse to two
    check_scan(op, base.permute(2, 0, 1), 0, device, check)
    check_scan(op, base.permute(1, 2, 0), 2, device, check)
    four = on(device, sample("float32", (3, 2, 4, 5), low, high), "float32").permute(0, 2, 1, 3)
    check_scan(op, four, 3, device, check)  # three kept dims that do not collapse: a contiguous copy


@pytest.mark.parametrize("op", sorted(ACCEPTS))
def test_rows_longer_than_the_block_carry_across_steps(device, op, check):
    cols = 1300 if device.type == "interp" else 151936  # longer than the block (1024 on interp)
    if op == "cumprod" and device.type != "interp":
        cols = 16384  # pairwise float32 products of ~1e5 factors near 1 drift ~1e-4 (numpy's too)
    low, high = (0.999, 1.001) if op == "cumprod" else (-3.0, 3.0)
    x = on(device, sample("float32", (2, cols), low, high), "float32")
    check_scan(op, x, 1, device, check)
    check_scan(op, x.T, 0, device, check)


def test_cumsum_of_integers_and_bool_is_exact_in_int64(device):
    a = np.full((2, 1500), 2**40 + 3, np.int64)
    np.testing.assert_array_equal(nbx.cumsum(on(device, a, "int64"), 1).numpy(), np.cumsum(a, axis=1))
    b = np.full(1500, 120, np.int8)
    out = nbx.cumsum(on(device, b, "int8"))
    assert out.dtype is nbx.int64 and out.numpy()[-1] == 180000
    out = nbx.cumsum(on(device, np.ones(3, np.uint8) * 200, "uint8"))
    assert out.dtype is nbx.uint64 and out.numpy().tolist() == [200, 400, 600]


def test_cummax_ties_move_the_index_and_the_first_nan_stays_across_steps(device):
    a = np.zeros(1500, np.float32)
    a[1100] = np.nan  # in the second step of 1024 columns (on interp)
    a[1300] = np.nan
    values, indices = nbx.cummax(on(device, a, "float32"), 0)
    assert indices.numpy()[:1100].tolist() == list(range(1100))  # zeros tie: each index moves forward
    assert np.isnan(values.numpy()[1100:]).all() and set(indices.numpy()[1100:].tolist()) == {1100}


def test_empty_single_element_and_scalar_scans(device, check):
    for op in ACCEPTS:
        empty = getattr(nbx, op)(on(device, np.zeros((0, 3)), "float32"), 0)
        assert (empty[0] if isinstance(empty, tuple) else empty).shape == (0, 3)
        check_scan(op, on(device, [2.5], "float64"), 0, device, check)
        check_scan(op, on(device, 2.5, "float64"), 0, device, check)


def test_the_same_input_gives_the_same_bits_on_every_run(device):
    x = on(device, sample("float32", (3, 1500)), "float32")
    for op in ("cumsum", "cumprod"):
        assert getattr(nbx, op)(x, 1).numpy().tobytes() == getattr(nbx, op)(x, 1).numpy().tobytes(), op


def test_scans_refuse_a_missing_dim_and_dtypes_without_a_kernel(device):
    with pytest.raises(ShapeError, match="cumsum of a 2-D tensor needs a dim"):
        nbx.cumsum(on(device, np.ones((2, 2)), "float32"))
    z = nbx.asarray(np.ones(3, np.complex64)).to(device)
    with pytest.raises(DTypeError, match="Triton has no element type for complex64"):
        nbx.cumsum(z, 0)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "int16", "uint32", "uint64"])
def test_float8_and_the_other_integer_widths(device, dtype, check):
    x = on(device, sample("float64", (3, 20), 0.0, 2.0) if "float" in dtype else sample(dtype, (3, 20)), dtype)
    for op in ACCEPTS:
        check_scan(op, x, 1, device, check)
