"""On a real GPU, torch-free: DLPack capsules of cuda tensors (kDLCUDA, device id, the stream
handshake), zero-copy exchange with CuPy both ways, and copies to the host only when allowed."""
from __future__ import annotations

import gc

import nbx.core as nbx
import numpy as np
import pytest
from nbx.core import dlpack
from nbx.core.errors import DLPackError
from nbx.devices import nvidia
from nbx.devices.nvidia import runtime

pytestmark = pytest.mark.gpu


def test_a_cuda_tensor_exports_kdlcuda_with_its_device_id():
    t = nbx.ones(8, device="cuda")
    assert t.__dlpack_device__() == (dlpack.DLDeviceType.kDLCUDA, 0)
    back = nbx.from_dlpack(t)
    assert back.device == t.device and back.data_ptr() == t.data_ptr()


@pytest.mark.parametrize("name", ["bool", "bfloat16", "float8_e4m3fn", "complex64", "uint64"])
def test_every_table_dtype_survives_an_nbx_to_nbx_cuda_exchange(name):
    dt = nbx.dtypes.TABLE[name]
    raw = np.random.default_rng(5).integers(0, 256, 64 * dt.itemsize, dtype=np.uint8)
    if dt.kind == "bool":
        raw %= 2
    t = nbx.from_numpy(raw.view(dt.host), "cuda")
    back = dlpack.from_capsule(t.__dlpack__(max_version=(1, 0)))
    assert back.dtype is dt and back.data_ptr() == t.data_ptr()
    assert back.numpy().tobytes() == raw.tobytes()


def test_the_capsule_keeps_device_memory_alive_after_the_tensor_is_gone():
    t = nbx.full((1 << 20,), 3, dtype="int32", device="cuda")
    capsule = t.__dlpack__(max_version=(1, 0))
    ptr = t.data_ptr()
    del t
    gc.collect()
    filler = nbx.full((1 << 20,), 9, dtype="int32", device="cuda")  # would reuse freed memory
    assert filler.data_ptr() != ptr
    back = dlpack.from_capsule(capsule)
    assert back.data_ptr() == ptr and (back.numpy() == 3).all()


def test_numpy_gets_a_host_copy_of_a_cuda_tensor_only_when_a_copy_is_allowed():
    t = nbx.from_numpy(np.arange(10, dtype=np.float32), "cuda")
    assert np.from_dlpack(t, device="cpu").tolist() == list(range(10))
    with pytest.raises(BufferError, match="needs a copy, and copy=False"):
        np.from_dlpack(t, device="cpu", copy=False)
    with pytest.raises(DLPackError, match="cannot export a tensor on cuda:0 to DLPack device"):
        t.__dlpack__(max_version=(1, 0), dl_device=(dlpack.DLDeviceType.kDLROCM, 0))


def test_the_consumer_stream_waits_for_work_queued_on_nbx_stream():
    big = 1 << 28
    t = nbx.zeros(big, dtype="int32", device="cuda")
    s = nvidia.Stream()
    consumer = nvidia.Stream()
    with s:
        for value in range(1, 11):  # ~10 passes of 1 GiB queued on s
            runtime.memset_async(t.data_ptr(), value, t.nbytes, s.handle)
        capsule = t.__dlpack__(stream=consumer.handle, max_version=(1, 0))
    out = nbx.empty(t.nbytes, dtype="uint8", device="cuda")
    runtime.memcpy_async(out.data_ptr(), t.data_ptr(), t.nbytes, runtime.DEVICE_TO_DEVICE, consumer.handle)
    consumer.synchronize()
    assert (out.numpy()[:: 1 << 16] == 10).all()
    del capsule


@pytest.fixture
def cupy():
    return pytest.importorskip("cupy", reason="the CuPy exchange needs cupy (cupy-cuda13x is on the GPU machine)")


def test_cupy_sees_nbx_memory_without_a_copy(cupy):
    t = nbx.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4), "cuda")
    c = cupy.from_dlpack(t)
    assert c.data.ptr == t.data_ptr() and c.shape == (3, 4)
    c[1, 1] = -7
    assert t.numpy()[1, 1] == -7
    assert cupy.asnumpy(cupy.from_dlpack(t[:, ::2])).tolist() == t[:, ::2].tolist()


def test_nbx_sees_cupy_memory_without_a_copy(cupy):
    c = cupy.arange(20, dtype=cupy.int64).reshape(4, 5)[:, 1:]
    t = nbx.from_dlpack(c)
    assert t.device == nbx.as_device("cuda:0") and t.data_ptr() == c.data.ptr
    assert t.numpy().tolist() == cupy.asnumpy(c).tolist()
    t[0, 0] = 100
    assert int(c[0, 0]) == 100


def test_cupy_memory_stays_alive_while_nbx_views_it(cupy):
    c = cupy.full((1 << 20,), 4, dtype=cupy.float32)
    t = nbx.from_dlpack(c)
    del c
    gc.collect()
    cupy.get_default_memory_pool().free_all_blocks()
    assert (t.numpy() == 4).all()


def test_cupy_on_its_own_stream_sees_nbx_work_finished(cupy):
    t = nbx.zeros(1 << 28, dtype="int32", device="cuda")
    s = nvidia.Stream()
    with s:
        for value in range(1, 11):
            runtime.memset_async(t.data_ptr(), value, t.nbytes, s.handle)
        with cupy.cuda.Stream(non_blocking=True) as cs:
            c = cupy.from_dlpack(t)
            total = int((c == 0x0A0A0A0A).sum())
            cs.synchronize()
    assert total == t.size
