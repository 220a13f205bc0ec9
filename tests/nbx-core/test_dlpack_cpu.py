"""DLPack on the CPU: zero-copy both ways with numpy, capsules that keep memory alive, versioned and
legacy capsules, flags, and every refusal by its message."""
from __future__ import annotations

import ctypes
import gc
import weakref

import ml_dtypes
import nbx.core as nbx
import numpy as np
import pytest
from nbx.core import dlpack
from nbx.core.errors import DLPackError, UnknownDTypeError


class Holder:
    """A producer that hands out one prepared capsule (what a foreign library would do)."""

    def __init__(self, capsule, device=(1, 0)):
        self.capsule, self.device = capsule, device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return self.capsule

    def __dlpack_device__(self):
        return self.device


def test_numpy_sees_an_nbx_tensor_without_a_copy_and_writes_through():
    t = nbx.arange(12, dtype="float32").reshape(3, 4)
    a = np.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr() and a.shape == (3, 4)
    a[1, 2] = -5
    assert t[1, 2].item() == -5


def test_numpy_sees_strided_and_reversed_views_without_a_copy():
    t = nbx.arange(24, dtype="int16").reshape(4, 6)
    for view in (t[:, ::2], t[::-1, 1:5], t.T, t[2]):
        a = np.from_dlpack(view)
        assert a.ctypes.data == view.data_ptr()
        assert a.tolist() == view.tolist()


def test_nbx_sees_a_numpy_array_without_a_copy_for_any_layout():
    base = np.arange(30, dtype=np.float64).reshape(5, 6)
    for arr in (base, base[:, ::-2], base.T, base[3:, 1:4]):
        t = nbx.from_dlpack(arr)
        assert t.data_ptr() == arr.ctypes.data and t.shape == arr.shape
        assert t.numpy().tolist() == arr.tolist()
    nbx.from_dlpack(base)[0, 0] = 99
    assert base[0, 0] == 99


def test_the_storage_outlives_the_tensor_while_numpy_holds_the_export():
    t = nbx.arange(1000, dtype="int64")
    storage = weakref.ref(t.storage)
    a = np.from_dlpack(t)
    del t
    gc.collect()
    assert storage() is not None
    assert a.sum() == 999 * 1000 // 2
    del a
    gc.collect()
    assert storage() is None


def test_an_unconsumed_capsule_keeps_the_storage_until_it_is_collected():
    before = dlpack.live_exports()
    t = nbx.arange(5, dtype="float32")
    storage = weakref.ref(t.storage)
    capsule = t.__dlpack__(max_version=(1, 0))
    del t
    gc.collect()
    assert storage() is not None and dlpack.live_exports() == before + 1
    assert np.from_dlpack(Holder(capsule)).tolist() == [0, 1, 2, 3, 4]
    del capsule
    gc.collect()
    assert storage() is None and dlpack.live_exports() == before


def test_a_capsule_collected_without_a_consumer_releases_its_export():
    before = dlpack.live_exports()
    for max_version in (None, (1, 0)):
        capsule = nbx.ones(3).__dlpack__(max_version=max_version)
        del capsule
    gc.collect()
    assert dlpack.live_exports() == before


def test_the_capsule_is_versioned_from_max_version_1_0_and_legacy_before():
    t = nbx.ones(2)
    assert 'dltensor_versioned' in repr(t.__dlpack__(max_version=(1, 0)))
    assert 'dltensor_versioned' in repr(t.__dlpack__(max_version=(1, 3)))
    assert '"dltensor"' in repr(t.__dlpack__())
    assert '"dltensor"' in repr(t.__dlpack__(max_version=(0, 8)))


@pytest.mark.parametrize("max_version", [None, (1, 0)])
@pytest.mark.parametrize("name", sorted(nbx.dtypes.TABLE))
def test_every_dtype_round_trips_through_a_capsule_bit_exact(name, max_version):
    dt = nbx.dtypes.TABLE[name]
    raw = np.random.default_rng(3).integers(0, 256, 7 * dt.itemsize, dtype=np.uint8)
    if dt.kind == "bool":
        raw %= 2
    t = nbx.from_numpy(raw.view(dt.host))
    back = dlpack.from_capsule(t.__dlpack__(max_version=max_version))
    assert back.dtype is dt and back.data_ptr() == t.data_ptr()
    assert back.numpy().tobytes() == raw.tobytes()


def test_the_dtype_codes_follow_the_dtype_table():
    t = nbx.zeros(2, dtype="float8_e4m3fn")
    capsule = t.__dlpack__(max_version=(1, 0))
    pointer = dlpack._get_pointer(capsule, b"dltensor_versioned")
    managed = dlpack.DLManagedTensorVersioned.from_address(pointer)
    dtype = managed.dl_tensor.dtype
    assert (dtype.code, dtype.bits, dtype.lanes) == (10, 8, 1)
    assert (managed.version.major, managed.version.minor) == dlpack.VERSION
    assert (managed.dl_tensor.device.device_type, managed.dl_tensor.device.device_id) == (1, 0)


def test_bool_round_trips_with_numpy_both_ways():
    mask = np.array([True, False, True])
    t = nbx.from_dlpack(mask)
    assert t.dtype is nbx.bool and t.data_ptr() == mask.ctypes.data
    assert np.from_dlpack(t).tolist() == [True, False, True]


def test_copy_true_gives_fresh_memory_and_copy_false_shares():
    t = nbx.arange(4, dtype="float32")
    copied = np.from_dlpack(t, copy=True)
    shared = np.from_dlpack(t, copy=False)
    assert copied.ctypes.data != t.data_ptr() and shared.ctypes.data == t.data_ptr()
    arr = np.arange(4.0)
    assert nbx.from_dlpack(arr, copy=True).data_ptr() != arr.ctypes.data
    assert nbx.from_dlpack(arr, copy=False).data_ptr() == arr.ctypes.data


def test_a_copied_export_carries_the_is_copied_flag():
    capsule = nbx.ones(2).__dlpack__(max_version=(1, 0), copy=True)
    managed = dlpack.DLManagedTensorVersioned.from_address(dlpack._get_pointer(capsule, b"dltensor_versioned"))
    assert managed.flags & dlpack.FLAG_IS_COPIED


def test_read_only_memory_stays_read_only_across_the_exchange():
    arr = np.arange(3.0)
    arr.flags.writeable = False
    t = nbx.from_dlpack(arr)
    assert t.storage.readonly
    assert not np.from_dlpack(t).flags.writeable
    with pytest.raises(DLPackError, match="a read-only tensor needs a versioned DLPack capsule"):
        t.__dlpack__()


def test_the_device_is_kdlcpu_zero():
    device = nbx.ones(1).__dlpack_device__()
    assert device == (dlpack.DLDeviceType.kDLCPU, 0) and isinstance(device[0], int)


def test_a_request_for_another_device_is_refused_by_name():
    t = nbx.ones(2)
    with pytest.raises(DLPackError, match=r"cannot export a tensor on cpu to DLPack device \(2, 0\)"):
        t.__dlpack__(max_version=(1, 0), dl_device=(2, 0))
    assert np.from_dlpack(t, device="cpu").tolist() == [1.0, 1.0]


def test_a_stream_for_a_cpu_tensor_is_refused_by_name():
    with pytest.raises(DLPackError, match="stream must be None for a host-memory"):
        nbx.ones(2).__dlpack__(stream=7)


def test_a_capsule_is_consumed_once():
    capsule = nbx.ones(2).__dlpack__(max_version=(1, 0))
    dlpack.from_capsule(capsule)
    with pytest.raises(DLPackError, match="a capsule can be consumed once"):
        dlpack.from_capsule(capsule)


def test_an_object_without_dlpack_is_refused_by_name():
    with pytest.raises(DLPackError, match="list does not implement __dlpack__"):
        nbx.from_dlpack([1, 2])


def test_a_device_without_an_nbx_backend_is_refused_by_name():
    with pytest.raises(DLPackError, match="DLPack device kDLVulkan:0 has no nbx backend installed"):
        nbx.from_dlpack(Holder(None, device=(7, 0)))


def _foreign_capsule(code: int, bits: int, major: int, deleted: list):
    """A capsule made the way a C producer makes one, with a deleter that counts its calls."""
    data = (ctypes.c_uint8 * 8)()
    shape = (ctypes.c_int64 * 1)(8 * 8 // bits)
    tensor = dlpack.DLTensor(data=ctypes.addressof(data), device=dlpack.DLDevice(1, 0), ndim=1,
                             dtype=dlpack.DLDataType(code, bits, 1), shape=shape, strides=None, byte_offset=0)
    keep = [data, shape]

    @dlpack.DELETER
    def deleter(address):
        deleted.append(address)
        keep.clear()

    managed = dlpack.DLManagedTensorVersioned(version=dlpack.DLPackVersion(major, 0), deleter=deleter, dl_tensor=tensor)
    keep += [managed, deleter]
    capsule = dlpack._capsule_new(ctypes.addressof(managed), b"dltensor_versioned", None)
    return capsule, ctypes.addressof(managed), data


def test_a_foreign_capsule_without_strides_is_read_as_contiguous_and_its_deleter_runs_once():
    deleted = []
    capsule, address, data = _foreign_capsule(1, 16, 1, deleted)
    data[:] = list(range(8))
    t = nbx.from_dlpack(Holder(capsule))
    assert t.dtype is nbx.uint16 and t.shape == (4,) and t.strides == (1,)
    assert t.numpy().tolist() == [256, 3 * 256 + 2, 5 * 256 + 4, 7 * 256 + 6]
    del t
    gc.collect()
    assert deleted == [address]


def test_an_unknown_dtype_code_is_refused_and_the_deleter_still_runs():
    deleted = []
    capsule, address, _ = _foreign_capsule(2, 8, 1, deleted)  # float of 8 bits: not in the table
    with pytest.raises(UnknownDTypeError, match=r"DLPack dtype \(code=2, bits=8, lanes=1\)"):
        nbx.from_dlpack(Holder(capsule))
    gc.collect()
    assert deleted == [address]


def test_an_unsupported_major_version_is_refused_and_the_deleter_still_runs():
    deleted = []
    capsule, address, _ = _foreign_capsule(1, 8, 2, deleted)
    with pytest.raises(DLPackError, match=r"DLPack version 2.0 is not supported"):
        nbx.from_dlpack(Holder(capsule))
    gc.collect()
    assert deleted == [address]


def test_bfloat16_and_float8_survive_an_nbx_to_nbx_exchange():
    values = np.array([1.5, -2.25, 3.0], dtype=ml_dtypes.bfloat16)
    t = nbx.from_numpy(values)
    back = nbx.from_dlpack(t)
    assert back.dtype is nbx.bfloat16 and back.data_ptr() == t.data_ptr()
    f8 = nbx.from_numpy(np.array([0.5, 1.0], dtype=ml_dtypes.float8_e5m2))
    assert nbx.from_dlpack(f8).dtype is nbx.float8_e5m2
