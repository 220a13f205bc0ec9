"""The CPU op front-ends compute what numpy computes, with the standard's dtypes and refusals."""
import zlib

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core import dtypes
from nbx.core.errors import CrossDeviceError, DTypeError, ShapeError
from nbx.core.ops.elementwise import BINARY, UNARY


DOMAIN = {"acosh": (1.1, 3.0), "acos": (-0.9, 0.9), "asin": (-0.9, 0.9), "atanh": (-0.9, 0.9),
          "log": (0.1, 3.0), "log2": (0.1, 3.0), "log10": (0.1, 3.0), "log1p": (-0.5, 3.0),
          "sqrt": (0.1, 3.0), "rsqrt": (0.1, 3.0), "reciprocal": (0.5, 3.0)}


def sample(dtype, shape=(3, 5), lo=-3.0, hi=3.0):
    """Inputs that depend only on the arguments, so a test sees the same data in any order."""
    rng = np.random.default_rng(zlib.crc32(repr((dtype, shape, lo, hi)).encode()))
    dt = dtypes.as_dtype(dtype)
    if dt.kind == "bool":
        return rng.random(shape) > 0.5
    if dt.kind in ("int", "uint"):
        low = 0 if dt.kind == "uint" else -20
        return rng.integers(low, 20, shape).astype(dt.host)
    if dt.kind == "complex":
        return (rng.uniform(lo, hi, shape) + 1j * rng.uniform(lo, hi, shape)).astype(dt.host)
    return rng.uniform(lo, hi, shape).astype(dt.host)


@pytest.mark.parametrize("op", UNARY, ids=lambda op: op.name)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_unary_ops_on_floats_match_numpy_in_float64_within_one_rounding(op, dtype):
    from nbx.core.ops._common import CATEGORIES
    a = sample(dtype, lo=DOMAIN.get(op.name, (-3, 3))[0], hi=DOMAIN.get(op.name, (-3, 3))[1])
    x = nbx.asarray(a)
    if "float" not in CATEGORIES[op.accepts]:
        with pytest.raises(DTypeError, match=f"{op.name} does not accept {dtype}"):
            getattr(nbx, op.name)(x)
        return
    out = getattr(nbx, op.name)(x)
    assert out.dtype is op.out_dtype(x.dtype)
    expected = nbx.oracle(op.name, x)
    got = out.numpy().astype(np.float64)
    eps = float(nbx.finfo(out.dtype).eps) if out.dtype.kind == "float" else 0
    np.testing.assert_allclose(got, expected.astype(np.float64), rtol=2 * eps, atol=2 * eps)


@pytest.mark.parametrize("op", BINARY, ids=lambda op: op.name)
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64", "float32", "bool"])
def test_binary_ops_match_numpy_exactly_or_refuse_the_dtype(op, dtype):
    a, b = sample(dtype, (4, 1)), sample(dtype, (1, 5))
    if op.name in ("floor_divide", "remainder") and dtypes.as_dtype(dtype).is_integer:
        b = np.where(b == 0, 3, b).astype(b.dtype)
    if op.name.startswith("bitwise_") and "shift" in op.name:
        b = (np.abs(b) % 5).astype(b.dtype)
    if op.name == "pow" and dtypes.as_dtype(dtype).is_integer:
        b = (np.abs(b) % 3).astype(b.dtype)
    x, y = nbx.asarray(a), nbx.asarray(b)
    dt = dtypes.as_dtype(dtype)
    from nbx.core.ops._common import CATEGORIES
    if dt.kind not in CATEGORIES[op.accepts]:
        with pytest.raises(DTypeError, match=f"{op.name} does not accept {dtype}"):
            getattr(nbx, op.name)(x, y)
        return
    out = getattr(nbx, op.name)(x, y)
    assert out.shape == (4, 5)
    assert out.dtype is op.out_dtype(dt)
    with np.errstate(all="ignore"):
        work = np.float32 if op.result == "float" and dt.kind != "float" else None
        expected = op.ref(a.astype(work) if work else a, b.astype(work) if work else b)
    np.testing.assert_array_equal(out.numpy(), expected.astype(out.dtype.host))


def test_complex_ops_keep_complex_and_real_parts_come_back_real():
    a = sample("complex64")
    x = nbx.asarray(a)
    assert nbx.abs(x).dtype is nbx.float32 and nbx.imag(x).dtype is nbx.float32
    np.testing.assert_allclose(nbx.multiply(x, x).numpy(), a * a, rtol=1e-6)
    with pytest.raises(DTypeError, match="imag does not accept float32"):
        nbx.imag(nbx.ones(2))


def test_integer_inputs_of_floating_functions_compute_in_the_default_float():
    x = nbx.arange(1, 5, dtype=nbx.int16)
    assert nbx.exp(x).dtype is nbx.float32
    assert (x / 2).dtype is nbx.float32
    np.testing.assert_allclose((x / 2).numpy(), [0.5, 1, 1.5, 2])


def test_bool_arithmetic_is_refused_and_bool_logic_is_served():
    m = nbx.asarray([True, False])
    with pytest.raises(DTypeError, match="add does not accept bool"):
        m + m
    assert (m & m).dtype is nbx.bool and (~m).tolist() == [False, True]


def test_integer_tensor_to_a_negative_power_is_refused():
    with pytest.raises(DTypeError, match="negative integer power"):
        nbx.arange(3) ** -1


def test_in_place_operators_keep_dtype_and_shape_or_refuse():
    x = nbx.ones((2, 3), dtype=nbx.float16)
    x += nbx.ones(3, dtype=nbx.float16)
    x *= 2
    assert x.tolist() == [[4.0] * 3] * 2
    with pytest.raises(DTypeError, match="in-place add would change float16 into float32"):
        x += nbx.ones(3, dtype=nbx.float32)
    with pytest.raises(ShapeError, match=r"would change shape \(3,\) into \(2, 3\)"):
        y = nbx.ones(3, dtype=nbx.float16)
        y += x


@pytest.mark.parametrize("name", ["sum", "prod", "mean", "max", "min", "var", "std", "any", "all", "logsumexp"])
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_over_any_dims_match_the_float64_oracle(name, dim, keepdim):
    a = sample("float32", (3, 4, 5), 0.5, 1.5)
    x = nbx.asarray(a)[:, ::-1]  # a strided input
    out = getattr(nbx, name)(x, dim=dim, keepdim=keepdim)
    expected = nbx.oracle(name, x, dim=dim, keepdim=keepdim)
    assert out.shape == np.shape(expected)
    np.testing.assert_allclose(out.numpy().astype(np.float64), expected, rtol=1e-5)


def test_reduction_dtypes_follow_the_standard():
    assert nbx.sum(nbx.ones(3, dtype=nbx.int8)).dtype is nbx.int64
    assert nbx.sum(nbx.ones(3, dtype=nbx.uint8)).dtype is nbx.uint64
    with pytest.raises(DTypeError, match="sum does not accept bool"):
        nbx.sum(nbx.ones(3, dtype=nbx.bool))
    assert nbx.sum(nbx.ones(3, dtype=nbx.float16)).dtype is nbx.float16
    assert nbx.argmax(nbx.asarray([[1, 9], [7, 3]])).item() == 1
    assert nbx.argmin(nbx.asarray([[1, 9], [7, 0]]), dim=1, keepdim=True).tolist() == [[0], [1]]
    with pytest.raises(DTypeError, match="mean does not accept int64"):
        nbx.mean(nbx.arange(3))
    with pytest.raises(ShapeError, match="max of an empty tensor"):
        nbx.max(nbx.ones((0, 3)), dim=0)


def test_half_precision_sums_accumulate_in_float32():
    x = nbx.ones(4096, dtype=nbx.float16) * 0.1
    # float16 accumulation would stall near 256; the fp32 accumulator reaches 409.5 before one rounding
    assert abs(nbx.sum(x).item() - 409.5) < 0.5


def test_var_and_std_take_the_correction():
    a = sample("float64", (10,))
    np.testing.assert_allclose(nbx.var(nbx.asarray(a), correction=1).item(), np.var(a, ddof=1))
    np.testing.assert_allclose(nbx.std(nbx.asarray(a)).item(), np.std(a))


def test_cumsum_and_logsumexp_are_stable_and_typed():
    assert nbx.cumsum(nbx.arange(5, dtype=nbx.int8)).dtype is nbx.int64
    big = nbx.asarray([1000.0, 1000.0])
    assert abs(nbx.logsumexp(big).item() - (1000 + np.log(2))) < 1e-3
    with pytest.raises(ShapeError, match="needs a dim"):
        nbx.cumsum(nbx.ones((2, 2)))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_softmax_and_log_softmax_rows_match_the_oracle(dtype):
    a = sample(dtype, (4, 33), -20, 20)
    x = nbx.asarray(a)
    for name in ("softmax", "log_softmax"):
        out = getattr(nbx, name)(x, dim=-1)
        assert out.dtype is x.dtype
        eps = float(nbx.finfo(x.dtype).eps)
        np.testing.assert_allclose(out.numpy().astype(np.float64), nbx.oracle(name, x, dim=-1),
                                   rtol=2 * eps, atol=2 * eps * 8)
    np.testing.assert_allclose(nbx.softmax(x, dim=0).numpy().astype(np.float64).sum(0), 1, rtol=8 * eps)


def test_softmax_of_a_row_of_minus_infinity_with_one_finite_value_is_one_hot():
    x = nbx.asarray([[-np.inf, 0.0, -np.inf]])
    assert nbx.softmax(x).tolist() == [[0.0, 1.0, 0.0]]


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((4,), (4, 2)), ((2, 3, 4), (4,)), ((2, 1, 3, 4), (5, 4, 2))])
def test_matmul_follows_the_standard_shapes(sa, sb):
    a, b = sample("float64", sa), sample("float64", sb)
    out = nbx.matmul(nbx.asarray(a), nbx.asarray(b))
    np.testing.assert_allclose(out.numpy(), a @ b)
    assert (nbx.asarray(a) @ nbx.asarray(b)).shape == (a @ b).shape


def test_matmul_refuses_mismatched_inner_sizes():
    with pytest.raises(ShapeError, match="inner sizes 4 and 3 differ"):
        nbx.ones((2, 4)) @ nbx.ones((3, 2))


def test_where_clamp_and_casts():
    x = nbx.asarray([-2.0, 0.5, 3.0])
    assert nbx.where(x > 0, x, 0.0).tolist() == [0.0, 0.5, 3.0]
    assert nbx.clamp(x, min=-1.0, max=1.0).tolist() == [-1.0, 0.5, 1.0]
    assert x.astype(nbx.int32).tolist() == [-2, 0, 3]
    assert nbx.asarray([1.0, 2.5, 3.5]).to(nbx.bfloat16).to(nbx.float32).tolist() == [1.0, 2.5, 3.5]
    assert nbx.asarray([0.1]).to(nbx.float8_e4m3fn).item() == pytest.approx(0.1015625)
    with pytest.raises(DTypeError, match="where's condition must be a bool tensor"):
        nbx.where(x, x, x)


def test_operands_on_different_devices_are_refused(monkeypatch):
    from nbx.core.device import Device
    from nbx.core.ops._common import common_device
    a = nbx.ones(2)
    fake = nbx.Tensor(a.storage, a.dtype, a.shape)
    object.__setattr__  # storage device decides a tensor's device; give the copy another one
    storage = type(a.storage)(Device("interp"), a.storage.nbytes, a.storage.data_ptr(), host=a.storage.host)
    fake = nbx.Tensor(storage, a.dtype, a.shape)
    with pytest.raises(CrossDeviceError, match="operands live on different devices"):
        common_device(a, fake)
