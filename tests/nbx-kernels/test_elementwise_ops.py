"""Every elementwise op of nbx.core's table, for every dtype of its category that Triton has,
matches the float64 oracle over non-contiguous and broadcast operands; the ops numpy defines
exactly (remainder, floor_divide, round, nextafter, ...) match numpy bit for bit, special values
included; complex dtypes are refused by name."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.ops._common import CATEGORIES
from nbx.core.ops.elementwise import BINARY, OPS, UNARY

rng = np.random.default_rng(55)

TRITON_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"]
# inputs where each op is defined and well conditioned (the oracle is exact, the kernel may round)
DOMAIN = {"log": (0.1, 5), "log2": (0.1, 5), "log10": (0.1, 5), "sqrt": (0, 5), "rsqrt": (0.1, 5),
          "acosh": (1, 5), "atanh": (-0.9, 0.9), "asin": (-1, 1), "acos": (-1, 1), "log1p": (-0.9, 5),
          "reciprocal": (0.5, 3), "pow": (0.5, 2), "divide": (0.5, 3), "tan": (-1.2, 1.2),
          "floor_divide": (0.5, 9), "remainder": (0.5, 9)}


def _values(op: str, dtype: str, shape):
    low, high = DOMAIN.get(op, (-3, 3))
    kind = nbx.as_dtype(dtype).kind
    if kind == "bool":
        return rng.random(shape) > 0.5
    if kind in ("int", "uint"):
        if op in ("pow", "bitwise_left_shift", "bitwise_right_shift"):
            return rng.integers(0, 5, shape)
        values = rng.integers(-60 if kind == "int" else 0, 60, shape)
        return np.where(values == 0, 7, values) if op in ("floor_divide", "remainder") else values
    return rng.uniform(low, high, shape)


def _cases():
    for op in UNARY + BINARY:
        for dtype in TRITON_DTYPES:
            if nbx.as_dtype(dtype).kind in CATEGORIES[op.accepts] and op.name != "imag":
                yield op.name, dtype


def _assert_agrees(out, expected, device, check):
    if out.dtype.kind in ("bool", "int", "uint"):
        np.testing.assert_array_equal(out.numpy(), np.asarray(expected).astype(out.dtype.host))
    else:
        check(out, expected, device)


@pytest.mark.parametrize("op,dtype", list(_cases()))
def test_each_op_and_dtype_over_a_transposed_operand_and_a_reversed_broadcast_one(device, op, dtype, check):
    rows, cols = (37, 515) if device.type == "cuda" else (5, 7)
    a = nbx.asarray(_values(op, dtype, (cols, rows)), dtype=dtype).to(device).permute(1, 0)
    operands = [a]
    if OPS[op] in BINARY:
        operands.append(nbx.asarray(_values(op, dtype, (cols,)), dtype=dtype).to(device)[::-1])
    out = getattr(nbx, op)(*operands)
    assert out.device == device and out.shape == (rows, cols)
    assert out.dtype is OPS[op].out_dtype(nbx.as_dtype(dtype))
    _assert_agrees(out, nbx.oracle(op, *operands), device, check)


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e-40, 3.0, -7.0,
                    1e30, -1e30, 100.0, 0.1])


def _same_as_numpy(got: np.ndarray, expected: np.ndarray, rtol: float, op: str = ""):
    """Equal, or both NaN, or (for floats) within rtol of each other with the same sign of zero."""
    g, e = got.astype(np.float64), expected.astype(np.float64)
    with np.errstate(all="ignore"):
        ok = (g == e) | (np.isnan(g) & np.isnan(e)) | np.isclose(g, e, rtol=rtol, atol=0)
    ok &= ~((g == 0) & (e == 0) & (np.signbit(g) != np.signbit(e)))
    if got.dtype == np.float32:
        # Triton's float32 math on the GPU flushes subnormal results to zero (FTZ): a subnormal
        # expected value may come back as a zero of its own sign, and nothing else may
        tiny = np.abs(e) < np.finfo(np.float32).tiny
        ok |= tiny & (g == 0) & (np.signbit(g) == np.signbit(e))
    assert ok.all(), (op, [(i, got[i], expected[i]) for i in np.flatnonzero(~ok)][:5])


@pytest.mark.parametrize("dtype,rtol", [("float32", 1e-5), ("float64", 1e-13)])
def test_special_values_give_numpys_results(device, dtype, rtol):
    x = nbx.asarray(SPECIAL, dtype=dtype)
    on_device = x.to(device)
    for op in UNARY:
        if op.accepts in ("integer_or_bool", "complex"):
            continue
        _same_as_numpy(getattr(nbx, op.name)(on_device).numpy(), getattr(nbx, op.name)(x).numpy(), rtol, op.name)
    grid_a, grid_b = (g.ravel() for g in np.meshgrid(SPECIAL, SPECIAL))
    a, b = nbx.asarray(grid_a, dtype=dtype), nbx.asarray(grid_b, dtype=dtype)
    for op in BINARY:
        if op.accepts not in ("integer_or_bool", "integer"):
            _same_as_numpy(getattr(nbx, op.name)(a.to(device), b.to(device)).numpy(),
                           getattr(nbx, op.name)(a, b).numpy(), rtol, op.name)


def _bits_equal(got: np.ndarray, expected: np.ndarray):
    same = got.view(f"u{got.itemsize}") == expected.view(f"u{expected.itemsize}")
    same |= np.isnan(got.astype(np.float64)) & np.isnan(expected.astype(np.float64))
    assert same.all(), [(got[i], expected[i]) for i in np.flatnonzero(~same)][:5]


@pytest.mark.parametrize("dtype,exponents", [("float32", (-140, 120)), ("float64", (-145, 145))])
def test_remainder_floor_divide_round_and_nextafter_are_exact_across_exponents(device, dtype, exponents):
    n = 2000 if device.type == "cuda" else 400
    a = rng.standard_normal(n) * 2.0 ** rng.integers(*exponents, n)
    b = rng.standard_normal(n) * 2.0 ** rng.integers(*exponents, n)
    a, b = a.astype(dtype), b.astype(dtype)
    ta, tb = nbx.asarray(a).to(device), nbx.asarray(b).to(device)
    with np.errstate(all="ignore"):
        _bits_equal(nbx.remainder(ta, tb).numpy(), np.remainder(a, b))
        _bits_equal(nbx.floor_divide(ta, tb).numpy(), np.floor_divide(a, b))
        _bits_equal(nbx.nextafter(ta, tb).numpy(), np.nextafter(a, b))
    halves = np.concatenate([np.arange(-8, 8) + 0.5, a * 2.0 ** -20]).astype(dtype)
    _bits_equal(nbx.round(nbx.asarray(halves).to(device)).numpy(), np.round(halves))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_nextafter_steps_in_the_storage_formats_own_spacing(device, dtype):
    host = nbx.as_dtype(dtype).host
    width = np.dtype(host).itemsize
    values = np.arange(2 ** (8 * width), dtype=f"u{width}").view(host)
    if width == 2 and device.type != "cuda":
        values = values[::37]
    target = np.where(rng.random(values.size) > 0.5, 1, -1) * np.array(448 if dtype == "float8_e4m3fn" else np.inf)
    target = target.astype(host)
    got = nbx.nextafter(nbx.asarray(values).to(device), nbx.asarray(target).to(device)).numpy()
    with np.errstate(invalid="ignore"):
        _bits_equal(got, np.nextafter(values, target))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint64"])
def test_integer_division_shifts_and_powers_follow_numpy_at_the_edges(device, dtype):
    info = np.iinfo(dtype)
    a = np.array([info.min, info.max, 7, 0, 1, info.min + 1, 5, 9], dtype)
    b = np.array([-1 if info.min else 3, 0, -2 if info.min else 2, 5, 0, 3, 2, 7], dtype)
    ta, tb = nbx.asarray(a).to(device), nbx.asarray(b).to(device)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(nbx.floor_divide(ta, tb).numpy(), np.floor_divide(a, b))
        np.testing.assert_array_equal(nbx.remainder(ta, tb).numpy(), np.remainder(a, b))
    counts = np.array([0, 1, 7, 8, 31, 63, 64, 65], dtype)
    tc = nbx.asarray(counts).to(device)
    np.testing.assert_array_equal(nbx.bitwise_left_shift(ta, tc).numpy(), np.left_shift(a, counts))
    np.testing.assert_array_equal(nbx.bitwise_right_shift(ta, tc).numpy(), np.right_shift(a, counts))
    powers = np.array([0, 1, 2, 3, 13, 40, 63, 5], dtype)
    np.testing.assert_array_equal(nbx.pow(ta, nbx.asarray(powers).to(device)).numpy(), np.power(a, powers))


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 0, 2), (1023,), (1025,), (2, 3, 4, 5, 6)])
def test_zero_size_single_element_odd_and_high_rank_shapes_of_unary_and_binary_ops(device, shape, check):
    a = nbx.asarray(rng.uniform(-2, 2, shape), dtype="bfloat16").to(device)
    b = nbx.asarray(rng.uniform(-2, 2, shape[-1:]), dtype="float32").to(device)
    for out, expected in [(nbx.atan2(a, b), nbx.oracle("atan2", a, b)), (nbx.tanh(a), nbx.oracle("tanh", a)),
                          (nbx.remainder(a, 0.75), nbx.oracle("remainder", a, 0.75))]:
        assert out.shape == shape
        check(out, expected, device)


def test_large_rows_are_computed_whole(device, check):
    rows, cols = (32, 151936) if device.type == "cuda" else (2, 5000)
    a = nbx.asarray(rng.standard_normal((rows, cols)), dtype="bfloat16").to(device)
    check(nbx.silu(a) * a, nbx.oracle("silu", a) * a.numpy().astype(np.float64), device)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_operands_are_refused_by_name(device, dtype):
    z = nbx.asarray(np.array([1 + 2j, 3 - 1j]), dtype=dtype).to(device)
    for fn in (lambda: nbx.add(z, z), lambda: nbx.abs(z), lambda: nbx.exp(z), lambda: nbx.imag(z)):
        with pytest.raises(nbx.DTypeError, match=f"Triton has no element type for {dtype}"):
            fn()
    with pytest.raises(nbx.DTypeError, match=f"Triton has no element type for {dtype}"):
        nbx.asarray([1.0, 2.0], dtype="float32").to(device).to(dtype=dtype)


def test_every_op_of_the_table_has_a_kernel():
    from nbx.kernels.elementwise import functions
    assert sorted(set(OPS) - set(functions.FUNCTIONS)) == []
