"""Activations and the fused pointwise ops (gelu, erf, softplus, mish, elu, leaky_relu, hardswish,
hardsigmoid, glu, masked_fill, lerp, addcmul, addcdiv, nan_to_num, clamp, where) match the float64
oracle on every float dtype over strided and broadcast operands, keep their parameters as values,
and refuse what they cannot take by name."""
import numpy as np
import pytest

import nbx.core as nbx

rng = np.random.default_rng(21)
FLOATS = ["float32", "float16", "bfloat16", "float64"]


def _input(device, dtype, shape=(6, 9), low=-4.0, high=4.0):
    base = nbx.asarray(rng.uniform(low, high, shape[::-1]), dtype=dtype).to(device)
    return base.permute(*reversed(range(len(shape))))  # transposed: not contiguous


UNARY = [("gelu", ()), ("gelu", ("tanh",)), ("erf", ()), ("softplus", ()), ("softplus", (2.0, 3.0)),
         ("mish", ()), ("elu", ()), ("elu", (0.5,)), ("leaky_relu", ()), ("leaky_relu", (0.2,)),
         ("hardswish", ()), ("hardsigmoid", ()), ("relu", ()), ("sigmoid", ()), ("silu", ()),
         ("tanh", ())]


@pytest.mark.parametrize("dtype", FLOATS + ["int32"])
@pytest.mark.parametrize("name,params", UNARY)
def test_activations_match_the_oracle_on_every_float_dtype(device, name, params, dtype, check):
    shape = (64, 4097) if device.type == "cuda" else (6, 9)
    x = _input(device, dtype, shape, -6, 6) if dtype != "int32" else \
        nbx.asarray(rng.integers(-6, 6, shape), dtype="int32").to(device)
    if name == "relu" and dtype == "int32":
        params = ()
    out = getattr(nbx, name)(x, *params)
    assert out.shape == shape and out.device == device
    assert out.dtype is (x.dtype if dtype != "int32" or name == "relu" else nbx.float32)
    check(out, nbx.oracle(name, x, *params), device)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_glu_multiplies_one_half_by_the_sigmoid_of_the_other_along_any_dim(device, dtype, dim, check):
    x = _input(device, dtype, (4, 6, 8))
    out = nbx.glu(x, dim)
    shape = list(x.shape)
    shape[dim] //= 2
    assert out.shape == tuple(shape)
    check(out, nbx.oracle("glu", x, dim), device)


@pytest.mark.parametrize("dtype", FLOATS + ["int16", "bool"])
def test_masked_fill_broadcasts_its_mask_and_takes_a_scalar_or_a_0d_tensor(device, dtype, check):
    x = _input(device, "float64", (5, 7)).to(dtype=dtype)
    mask = nbx.asarray(rng.random(7) > 0.5).to(device)
    value = True if dtype == "bool" else 3 if dtype == "int16" else -1.5
    for fill in (value, nbx.asarray(value, dtype=dtype).to(device)):
        out = nbx.masked_fill(x, mask, fill)
        assert out.dtype is x.dtype
        expected = np.where(mask.numpy(), value, x.numpy())
        np.testing.assert_array_equal(out.numpy(), expected.astype(x.dtype.host))


@pytest.mark.parametrize("dtype", FLOATS)
def test_lerp_addcmul_addcdiv_over_broadcast_operands(device, dtype, check):
    start, end = _input(device, dtype, (5, 7)), _input(device, dtype, (7,))
    weight = nbx.asarray(rng.uniform(-0.5, 1.5, (5, 1)), dtype=dtype).to(device)
    for w in (weight, 0.25, 0.75):
        check(nbx.lerp(start, end, w), nbx.oracle("lerp", start, end, w), device)
    t2 = _input(device, dtype, (5, 7), 0.5, 2.0)
    for value in (1, 0.5, -2.0):
        check(nbx.addcmul(start, end, t2, value=value), nbx.oracle("addcmul", start, end, t2, value), device)
        check(nbx.addcdiv(start, end, t2, value=value), nbx.oracle("addcdiv", start, end, t2, value), device)


def test_lerp_is_exact_at_weights_zero_and_one(device):
    start, end = _input(device, "float32", (3, 5)), _input(device, "float32", (3, 5))
    np.testing.assert_array_equal(nbx.lerp(start, end, 0.0).numpy(), start.numpy())
    np.testing.assert_array_equal(nbx.lerp(start, end, 1.0).numpy(), end.numpy())


@pytest.mark.parametrize("dtype", FLOATS + ["int32"])
def test_nan_to_num_replaces_nan_and_infinities_by_defaults_or_given_values(device, dtype):
    values = np.array([np.nan, np.inf, -np.inf, 1.5, -2.0, 0.0]) if dtype != "int32" else np.arange(6)
    x = nbx.asarray(values, dtype=dtype).to(device)
    host = x.numpy()
    if dtype == "int32":
        np.testing.assert_array_equal(nbx.nan_to_num(x).numpy(), host)
        return
    info = nbx.finfo(x.dtype)
    wide = host.astype(np.float64)
    expected = np.nan_to_num(wide, posinf=float(info.max), neginf=float(info.min)).astype(host.dtype)
    np.testing.assert_array_equal(nbx.nan_to_num(x).numpy(), expected)
    got = nbx.nan_to_num(x, nan=7.0, posinf=100.0, neginf=-100.0).numpy()
    np.testing.assert_array_equal(got, np.nan_to_num(wide, nan=7.0, posinf=100.0, neginf=-100.0).astype(host.dtype))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64", "int8", "uint16"])
def test_clamp_takes_scalar_tensor_or_missing_bounds_and_propagates_nan(device, dtype):
    x = nbx.asarray(rng.uniform(-50, 50, (4, 9)), dtype=dtype).to(device)[:, ::2]
    low = nbx.asarray(rng.uniform(0, 10, (5,)), dtype=dtype).to(device)
    high = 20 if x.dtype.kind != "float" else 20.5
    for bounds in [(low, high), (None, high), (low, None), (None, None), (3, None)]:
        out = nbx.clamp(x, *bounds)
        np.testing.assert_array_equal(out.numpy(), nbx.clamp(x.to("cpu"), *[
            b.to("cpu") if isinstance(b, nbx.Tensor) else b for b in bounds]).numpy())
    if x.dtype.kind == "float":
        nan = nbx.asarray([np.nan, 1.0], dtype=dtype).to(device)
        assert np.isnan(nbx.clamp(nan, 0.0, 0.5).numpy()[0])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64", "int64", "bool"])
def test_where_picks_between_tensors_and_scalars(device, dtype):
    cond = nbx.asarray(rng.random((3, 1, 5)) > 0.5).to(device)
    a = nbx.asarray(rng.uniform(-9, 9, (4, 5)), dtype=dtype).to(device)
    other = True if dtype == "bool" else 2 if dtype == "int64" else 0.25
    for x1, x2 in [(a, a[::-1]), (a, other), (other, a)]:
        got = nbx.where(cond, x1, x2).numpy()
        expected = np.where(cond.numpy(), *(v.numpy() if isinstance(v, nbx.Tensor) else v for v in (x1, x2)))
        np.testing.assert_array_equal(got, expected.astype(a.dtype.host))


def test_activations_are_importable_from_nbx_core():
    for name in ("gelu", "erf", "softplus", "mish", "elu", "leaky_relu", "hardswish", "hardsigmoid", "glu",
                 "masked_fill", "lerp", "addcmul", "addcdiv", "nan_to_num", "clamp", "exp2", "rsqrt"):
        assert callable(getattr(nbx, name))


def test_refusals_name_what_is_wrong(device):
    x = _input(device, "float32", (3, 5))
    with pytest.raises(nbx.ShapeError, match="size 5 is odd"):
        nbx.glu(x, -1)
    with pytest.raises(nbx.DTypeError, match="mask must be a bool tensor"):
        nbx.masked_fill(x, x, 0.0)
    with pytest.raises(nbx.ShapeError, match="does not broadcast to x's"):
        nbx.masked_fill(x, nbx.asarray(np.ones((2, 3, 5), bool)).to(device), 0.0)
    with pytest.raises(nbx.DTypeError, match="approximate must be 'none' or 'tanh'"):
        nbx.gelu(x, "erf")
    with pytest.raises(nbx.DTypeError, match="alpha must be a Python int or float"):
        nbx.elu(x, "1")
    ints = nbx.asarray([1, 2], dtype="int32").to(device)
    with pytest.raises(nbx.DTypeError, match="lerp does not accept int32"):
        nbx.lerp(ints, ints, ints)
    with pytest.raises(nbx.DTypeError, match="addcdiv does not accept int32"):
        nbx.addcdiv(ints, ints, ints)
    z = nbx.asarray(np.array([1 + 1j]), dtype="complex64").to(device)
    with pytest.raises(nbx.DTypeError, match="gelu does not accept complex64"):
        nbx.gelu(z)
