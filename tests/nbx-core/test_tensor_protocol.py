"""Tensor behaves as a Python object the way the Array API standard and numpy users expect."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import DeviceError, NotSupportedError, ShapeError, ViewError


def test_repr_is_numpys_with_dtype_and_device_when_not_default():
    assert repr(nbx.asarray([1.0, 2.5])) == "Tensor([1. , 2.5])"
    assert repr(nbx.asarray([1, 2], dtype=nbx.int8)) == "Tensor([1, 2], dtype=int8)"
    assert repr(nbx.zeros((0, 2))) == "Tensor([], shape=(0, 2), dtype=float32)"


def test_len_iter_and_scalar_conversions():
    t = nbx.asarray([[1, 2], [3, 4]])
    assert len(t) == 2
    assert [row.tolist() for row in t] == [[1, 2], [3, 4]]
    assert int(t[1, 0]) == 3 and float(t[0, 1]) == 2.0 and bool(t[0, 0])
    assert [10, 20, 30][t[0, 0]] == 20  # __index__ of a 0-d integer tensor
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(t[0, 0])
    with pytest.raises(ShapeError, match="bool\\(\\) of a tensor needs exactly one element"):
        bool(t)
    with pytest.raises(TypeError, match="only a 0-d integer tensor is an index"):
        [1, 2][nbx.asarray(1.0)]


def test_item_and_tolist_give_python_scalars_for_every_dtype():
    for dt in nbx.dtypes.TABLE.values():
        t = nbx.ones(2, dtype=dt)
        value = t[0].item()
        assert isinstance(value, (bool, int, float, complex))
        assert t.tolist() == [value, value]


def test_to_moves_dtype_and_copies_only_when_asked():
    t = nbx.arange(4)
    assert t.to("cpu") is t
    assert t.to(dtype=nbx.int64) is t
    copy = t.to(copy=True)
    assert copy.storage is not t.storage and copy.tolist() == t.tolist()
    assert t.to(nbx.float16).dtype is nbx.float16
    with pytest.raises(DeviceError, match="no backend for device type 'nodevice'"):
        t.to("nodevice")


def test_asarray_copy_false_refuses_what_needs_a_copy():
    a = np.arange(3, dtype=np.float32)
    assert nbx.asarray(a, copy=False).storage.host.ctypes.data == a.ctypes.data
    with pytest.raises(ViewError, match="would need a cast"):
        nbx.asarray(a, dtype=nbx.float64, copy=False)
    b = nbx.asarray(a, copy=True)
    b[0] = 9
    assert a[0] == 0


def test_python_sequences_get_the_standard_default_dtypes():
    assert nbx.asarray([1, 2]).dtype is nbx.int64
    assert nbx.asarray([1.0, 2]).dtype is nbx.float32
    assert nbx.asarray([True]).dtype is nbx.bool
    assert nbx.asarray(1j).dtype is nbx.complex64
    assert nbx.asarray([1, 2], dtype=nbx.bfloat16).dtype is nbx.bfloat16


def test_creation_ops_fill_what_they_say():
    assert nbx.full((2,), 7, dtype=nbx.uint8).tolist() == [7, 7]
    assert nbx.eye(2, 3, k=1).tolist() == [[0, 1, 0], [0, 0, 1]]
    assert nbx.linspace(0, 1, 5).tolist() == [0, 0.25, 0.5, 0.75, 1]
    assert nbx.arange(0, 1, 0.25).tolist() == [0, 0.25, 0.5, 0.75]
    assert nbx.arange(5, 0, -2).tolist() == [5, 3, 1]
    assert nbx.zeros_like(nbx.ones((2, 2), dtype=nbx.int8)).dtype is nbx.int8
    with pytest.raises(NotSupportedError, match="arange step cannot be zero"):
        nbx.arange(0, 3, 0)


def test_tensors_are_not_hashable_since_they_compare_elementwise():
    with pytest.raises(TypeError):
        hash(nbx.ones(1))
    assert (nbx.asarray([1, 2]) == nbx.asarray([1, 3])).tolist() == [True, False]


def test_read_only_storage_refuses_writes_by_name():
    a = np.arange(3.0)
    a.flags.writeable = False
    t = nbx.from_numpy(a)
    with pytest.raises(NotSupportedError, match="read-only"):
        t[0] = 1.0


def test_a_numpy_view_keeps_the_memory_alive_after_the_tensor_is_gone():
    import gc
    view = (nbx.asarray(np.arange(100_000.0)) * 2).numpy()  # the product tensor dies here
    gc.collect()
    churn = [np.full(100_000, 7.0) for _ in range(8)]  # would reuse freed memory
    assert view[1] == 2.0 and view[-1] == 199_998.0
    del churn
