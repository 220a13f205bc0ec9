"""What a numpy or torch user reaches for in the first hour: casts by name, dtype spellings, shape functions."""
import ml_dtypes
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import UnknownDTypeError, ViewError


@pytest.mark.parametrize("method, dtype", [("float", "float32"), ("double", "float64"), ("half", "float16"),
                                           ("bfloat16", "bfloat16"), ("int", "int32"), ("long", "int64"),
                                           ("bool", "bool")])
def test_the_torch_cast_methods_give_their_dtype_and_keep_the_values(method, dtype):
    x = nbx.asarray([0.0, 1.0, 2.0, 3.0])
    out = getattr(x, method)()
    assert out.dtype is nbx.as_dtype(dtype)
    np.testing.assert_array_equal(out.numpy().astype(np.float64), [0.0, 1.0, 2.0, 3.0] if dtype != "bool"
                                  else [0.0, 1.0, 1.0, 1.0])


def test_a_cast_to_the_dtype_already_held_is_the_tensor_itself_and_type_as_takes_the_other_dtype():
    x = nbx.asarray([1.0, 2.0])
    assert x.float() is x
    assert x.type_as(nbx.ones(1, dtype=nbx.float16)).dtype is nbx.float16


def test_copy_and_clone_give_fresh_memory_with_the_same_values():
    x = nbx.asarray([1.0, 2.0])
    for fresh in (x.copy(), x.clone()):
        assert fresh.data_ptr() != x.data_ptr() and fresh.tolist() == [1.0, 2.0]
    x[0] = 5.0
    assert x.copy().tolist() == [5.0, 2.0]


@pytest.mark.parametrize("spelling, name", [
    ("bf16", "bfloat16"), ("fp16", "float16"), ("half", "float16"), ("float", "float32"), ("f4", "float32"),
    ("<f8", "float64"), ("double", "float64"), ("long", "int64"), ("i4", "int32"), ("u1", "uint8"),
    (np.float32, "float32"), (np.dtype("int16"), "int16"), (ml_dtypes.bfloat16, "bfloat16"),
    (float, "float64"), (int, "int64"), (bool, "bool"), (complex, "complex128")])
def test_common_dtype_spellings_name_the_dtype_numpy_or_torch_would(spelling, name):
    assert nbx.as_dtype(spelling) is nbx.dtypes.TABLE[name]
    assert nbx.zeros(1, dtype=spelling).dtype is nbx.dtypes.TABLE[name]


def test_a_tensor_to_a_dtype_spelling_casts_and_an_unknown_one_is_refused():
    assert nbx.ones(2).to("bf16").dtype is nbx.bfloat16
    assert nbx.ones(2).to("cpu", "fp16").dtype is nbx.float16
    with pytest.raises(UnknownDTypeError, match="unknown dtype 'float128'"):
        nbx.as_dtype("float128")


def test_a_dtype_compares_as_numpy_dtypes_do():
    dt = nbx.ones(1).dtype
    assert dt == np.float32 and np.float32 == dt and dt == np.dtype("float32") and np.dtype("float32") == dt
    assert dt == "float32" and dt == "f4" and dt != np.float64 and dt != "int8"
    assert dt != "not a dtype" and dt != None  # noqa: E711
    assert nbx.bfloat16 == ml_dtypes.bfloat16
    assert {nbx.float32: 1}[nbx.float32] == 1 and nbx.float32 is nbx.dtypes.float32


def test_reshape_permute_dims_expand_dims_and_broadcast_to_exist_at_the_top_level():
    x = nbx.arange(6)
    assert nbx.reshape(x, (2, 3)).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert nbx.permute_dims(nbx.reshape(x, (2, 3)), (1, 0)).tolist() == [[0, 3], [1, 4], [2, 5]]
    assert nbx.expand_dims(x, axis=0).shape == (1, 6)
    assert nbx.broadcast_to(nbx.ones(3), (2, 3)).strides == (0, 1)
    with pytest.raises(ViewError):
        nbx.reshape(nbx.reshape(x, (2, 3)).T, (6,), copy=False)
    assert nbx.reshape(x, (6,), copy=True).data_ptr() != x.data_ptr()
