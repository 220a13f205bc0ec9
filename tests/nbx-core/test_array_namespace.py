"""__array_namespace__ returns a namespace with the standard's spellings, refusing what is missing."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import NotSupportedError


def test_namespace_spells_functions_as_the_standard():
    x = nbx.asarray([[1.0, 2.0], [3.0, 4.0]])
    xp = x.__array_namespace__()
    assert xp.__array_api_version__ == "2024.12"
    assert xp.sum(x, axis=0, keepdims=True).tolist() == [[4.0, 6.0]]
    assert xp.permute_dims(x, (1, 0)).tolist() == [[1.0, 3.0], [2.0, 4.0]]
    assert xp.matrix_transpose(x).tolist() == [[1.0, 3.0], [2.0, 4.0]]
    assert xp.clip(x, 2.0, 3.0).tolist() == [[2.0, 2.0], [3.0, 3.0]]
    assert xp.isdtype(xp.float32, "real floating") and not xp.isdtype(xp.int8, ("bool", "real floating"))
    assert xp.can_cast(xp.int8, xp.int16) and not xp.can_cast(xp.float32, xp.int32)
    assert xp.moveaxis(xp.zeros((2, 3, 4)), 0, -1).shape == (3, 4, 2)
    assert xp.cumulative_sum(xp.asarray([1, 2, 3])).tolist() == [1, 3, 6]
    assert xp.reshape(x, (4,), copy=True).storage is not x.storage


def test_namespace_functions_agree_with_numpy_on_a_small_program():
    a = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    x = nbx.asarray(a)
    xp = x.__array_namespace__()
    got = xp.mean(xp.exp(x - xp.max(x, axis=1, keepdims=True)), axis=1)
    expected = np.mean(np.exp(a - a.max(axis=1, keepdims=True)), axis=1)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)


STANDARD_2024_12 = """
arange asarray empty empty_like eye from_dlpack full full_like linspace meshgrid ones ones_like tril triu zeros
zeros_like astype can_cast finfo iinfo isdtype result_type abs acos acosh add asin asinh atan atan2 atanh bitwise_and
bitwise_left_shift bitwise_invert bitwise_or bitwise_right_shift bitwise_xor ceil clip conj copysign cos cosh divide
equal exp expm1 floor floor_divide greater greater_equal hypot imag isfinite isinf isnan less less_equal log log1p
log2 log10 logaddexp logical_and logical_not logical_or logical_xor maximum minimum multiply negative nextafter
not_equal positive pow real reciprocal remainder round sign signbit sin sinh square sqrt subtract tan tanh trunc take
take_along_axis matmul matrix_transpose tensordot vecdot broadcast_arrays broadcast_to concat expand_dims flip
moveaxis permute_dims repeat reshape roll squeeze stack tile unstack argmax argmin count_nonzero nonzero searchsorted
where unique_all unique_counts unique_inverse unique_values argsort sort cumulative_prod cumulative_sum max mean min
prod std sum var all any diff e inf nan newaxis pi __array_namespace_info__
""".split()


def test_every_function_of_the_2024_12_main_namespace_is_there():
    xp = nbx.ones(1).__array_namespace__()
    assert [name for name in STANDARD_2024_12 if not hasattr(xp, name)] == []


def test_a_missing_name_is_an_attribute_error_so_probing_the_namespace_works():
    from nbx.core.errors import MissingFunctionError
    xp = nbx.ones(1).__array_namespace__()
    assert not hasattr(xp, "no_such_function") and getattr(xp, "fft_of_nothing", None) is None
    with pytest.raises(MissingFunctionError, match="no 'no_such_function'"):
        xp.no_such_function
    assert issubclass(MissingFunctionError, NotSupportedError) and issubclass(MissingFunctionError, AttributeError)


def test_the_namespace_is_an_importable_module_too():
    import nbx.core.array_api as xp
    x = xp.asarray([[1.0, 2.0], [3.0, 4.0]])
    assert xp.__array_api_version__ == "2024.12" and xp.concat([x, x], axis=0).shape == (4, 2)
    assert xp.sort is x.__array_namespace__().sort and not hasattr(xp, "no_such_function")


def test_new_functions_of_the_namespace_agree_with_numpy():
    import nbx.core.array_api as xp
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = xp.asarray(a)
    assert xp.cumulative_sum(xp.asarray([1, 2, 3]), include_initial=True).tolist() == [0, 1, 3, 6]
    assert xp.cumulative_prod(xp.asarray([1, 2, 3]), include_initial=True).tolist() == [1, 1, 2, 6]
    np.testing.assert_allclose(xp.vecdot(x, x).numpy(), (a * a).sum(-1))
    np.testing.assert_allclose(xp.tensordot(x, x.T, axes=1).numpy(), a @ a.T)
    np.testing.assert_allclose(xp.tensordot(x, x, axes=([0], [0])).numpy(), np.tensordot(a, a, axes=([0], [0])))
    assert xp.count_nonzero(x > 4, axis=(0, 1)).item() == 7


def test_devices_lists_what_exists_and_skips_a_backend_whose_driver_is_missing(monkeypatch):
    from nbx.core import device as core_device

    class NoDriver:
        indexed = True

        def device_count(self):
            raise nbx.DeviceError("libcuda.so not found")

    monkeypatch.setattr(core_device, "backends", lambda: {"cpu": core_device.get_backend("cpu"), "cuda": NoDriver()})
    assert nbx.ones(1).__array_namespace__().__array_namespace_info__().devices() == [nbx.as_device("cpu")]


def test_an_unknown_api_version_is_refused():
    with pytest.raises(NotSupportedError, match="Array API version 2019.01"):
        nbx.ones(1).__array_namespace__(api_version="2019.01")
