"""The cuda backend's logic on a simulated CUDA: a fake libcudart/libcuda whose 'device memory' is
host memory, so that copies, fills, strided layouts, multi-device guards, out-of-memory and the
DLPack stream handshake are checked on any machine. The same paths run for real in tests/gpu."""
from __future__ import annotations

import ctypes
import gc

import nbx.core as nbx
import numpy as np
import pytest
from nbx.core import dispatch, dlpack
from nbx.core.device import discover_plugins
from nbx.core.errors import CrossDeviceError, DeviceError, DLPackError, OutOfMemoryError
from nbx.devices import nvidia
from nbx.devices.nvidia import backend, copies, driver_api, properties, runtime, streams, triton_driver
from nbx.devices.nvidia.errors import CopyOutOfBoundsError
from nbx.memory import allocator

ERROR_NAMES = {0: "cudaSuccess", 1: "cudaErrorInvalidValue", 2: "cudaErrorMemoryAllocation",
               100: "cudaErrorNoDevice", 101: "cudaErrorInvalidDevice", 600: "cudaErrorNotReady"}


class _Fn:
    """A fake library function: callable, accepts argtypes/restype, logs (name, current device)."""

    def __init__(self, fake, name, impl):
        self.fake, self.name, self.impl = fake, name, impl

    def __call__(self, *args):
        self.fake.calls.append((self.name, self.fake.current))
        return self.impl(*args)


def _out(ref, value):
    ref._obj.value = value
    return 0


class FakeLibrary:
    def __init__(self):
        self.calls: list[tuple[str, int]] = []
        for name in dir(type(self)):
            if name.startswith(("cuda", "cu")) and callable(getattr(self, name)):
                setattr(self, name, _Fn(self, name, getattr(self, name)))

    def called(self, name: str) -> list[int]:
        """The current device at each call of name."""
        return [device for fn, device in self.calls if fn == name]


class FakeCudart(FakeLibrary):
    def __init__(self, devices: int = 1, memory: int = 1 << 30):
        self.devices, self.memory, self.current = devices, memory, 0
        self.blocks: dict[int, np.ndarray] = {}
        self.streams = 0x1000
        super().__init__()

    def cudaGetErrorName(self, code):
        return ERROR_NAMES.get(code, f"cudaError{code}").encode()

    def cudaGetErrorString(self, code):
        return b"simulated"

    def cudaGetLastError(self):
        return 0

    def cudaRuntimeGetVersion(self, p):
        return _out(p, 13000)

    cudaDriverGetVersion = cudaRuntimeGetVersion

    def cudaGetDeviceCount(self, p):
        return _out(p, self.devices)

    def cudaGetDevice(self, p):
        return _out(p, self.current)

    def cudaSetDevice(self, index):
        if not 0 <= index < self.devices:
            return 101
        self.current = index
        return 0

    def cudaDeviceGetAttribute(self, p, attr, device):
        return _out(p, {75: 9, 76: 0, 10: 32, 16: 132}.get(attr, 1))

    def cudaMemGetInfo(self, free, total):
        used = sum(b.nbytes for b in self.blocks.values())
        _out(free, self.memory - used)
        return _out(total, self.memory)

    def cudaMalloc(self, p, nbytes):
        if nbytes > self.memory - sum(b.nbytes for b in self.blocks.values()):
            return 2
        raw = np.empty(nbytes + 256, np.uint8)
        start = -raw.ctypes.data % 256
        block = raw[start:start + nbytes]
        block[:] = 0xAB  # poison: a fill or copy that misses bytes shows
        self.blocks[block.ctypes.data] = block
        return _out(p, block.ctypes.data)

    def cudaFree(self, ptr):
        self.blocks.pop(ptr)
        return 0

    def cudaHostAlloc(self, p, nbytes, flags):
        return self.cudaMalloc(p, nbytes)

    def cudaFreeHost(self, ptr):
        return self.cudaFree(ptr)

    def cudaMemcpy(self, dst, src, nbytes, kind):
        ctypes.memmove(dst, src, nbytes)
        return 0

    def cudaMemcpyAsync(self, dst, src, nbytes, kind, stream):
        return self.cudaMemcpy(dst, src, nbytes, kind)

    def cudaMemcpy2DAsync(self, dst, dpitch, src, spitch, width, height, kind, stream):
        if dpitch < width or spitch < width:
            return 1
        for row in range(height):
            ctypes.memmove(dst + row * dpitch, src + row * spitch, width)
        return 0

    def cudaMemcpyPeer(self, dst, dst_device, src, src_device, nbytes):
        ctypes.memmove(dst, src, nbytes)
        return 0

    def cudaMemcpyPeerAsync(self, dst, dst_device, src, src_device, nbytes, stream):
        return self.cudaMemcpyPeer(dst, dst_device, src, src_device, nbytes)

    def cudaMemset(self, ptr, value, nbytes):
        ctypes.memset(ptr, value, nbytes)
        return 0

    def cudaMemsetAsync(self, ptr, value, nbytes, stream):
        return self.cudaMemset(ptr, value, nbytes)

    def cudaStreamCreateWithPriority(self, p, flags, priority):
        self.streams += 0x10
        return _out(p, self.streams)

    def cudaEventCreateWithFlags(self, p, flags):
        return self.cudaStreamCreateWithPriority(p, flags, 0)

    def cudaEventElapsedTime(self, p, start, end):
        return _out(p, 1.0)

    def cudaDeviceGetStreamPriorityRange(self, least, greatest):
        _out(least, 0)
        return _out(greatest, -5)

    def cudaDeviceCanAccessPeer(self, p, a, b):
        return _out(p, 1)

    def _ok(self, *args):
        return 0

    cudaFreeHost2 = _ok
    cudaDeviceSynchronize = cudaDeviceEnablePeerAccess = cudaStreamDestroy = cudaStreamSynchronize = _ok
    cudaStreamQuery = cudaStreamWaitEvent = cudaEventDestroy = cudaEventRecord = _ok
    cudaEventQuery = cudaEventSynchronize = _ok


class FakeDriver(FakeLibrary):
    def __init__(self, cudart: FakeCudart):
        self.cudart = cudart
        super().__init__()

    @property
    def current(self):
        return self.cudart.current

    def cuInit(self, flags):
        return 0

    def cuGetErrorName(self, code, p):
        return _out(p, b"CUDA_ERROR_INVALID_VALUE" if code == 1 else b"CUDA_ERROR_UNKNOWN")

    def cuGetErrorString(self, code, p):
        return _out(p, b"simulated")

    def cuDriverGetVersion(self, p):
        return _out(p, 13000)

    def cuDeviceGet(self, p, index):
        return _out(p, index)

    def cuDeviceGetName(self, buf, size, device):
        buf.value = b"Simulated GPU"
        return 0

    def cuDeviceTotalMem_v2(self, p, device):
        return _out(p, self.cudart.memory)

    def cuMemGetAllocationGranularity(self, p, prop, flag):
        return _out(p, 2 << 20)

    def _fill(self, ctype, ptr, value, count):
        np.ctypeslib.as_array((ctype * count).from_address(ptr))[:] = value
        return 0

    def cuMemsetD8Async(self, ptr, value, count, stream):
        return self._fill(ctypes.c_uint8, ptr, value, count)

    def cuMemsetD16Async(self, ptr, value, count, stream):
        return self._fill(ctypes.c_uint16, ptr, value, count)

    def cuMemsetD32Async(self, ptr, value, count, stream):
        return self._fill(ctypes.c_uint32, ptr, value, count)


def _install(monkeypatch, devices: int) -> FakeCudart:
    fake = FakeCudart(devices)
    # a fresh caching pool for each fake: a pool kept from the last test holds that fake's addresses
    monkeypatch.setattr(backend.BACKEND, "_started", False)
    monkeypatch.setattr(allocator, "_ALLOCATORS", {k: v for k, v in allocator._ALLOCATORS.items() if k != "cuda"})
    monkeypatch.setattr(runtime, "_runtime", runtime.CudaRuntime(fake, "simulated libcudart"))
    monkeypatch.setattr(runtime, "_count", None)
    monkeypatch.setattr(driver_api, "_driver", driver_api.CudaDriverApi(FakeDriver(fake), "simulated libcuda"))
    monkeypatch.setattr(triton_driver, "install_if_triton", lambda: False)
    properties.properties.cache_clear()
    nvidia.register()
    discover_plugins()  # nbx.kernels registers Triton copy_/fill_ for cuda: no Triton on a fake device
    monkeypatch.setitem(dispatch._IMPLEMENTATIONS, ("copy_", "cuda"), copies.copy_)
    monkeypatch.setitem(dispatch._IMPLEMENTATIONS, ("fill_", "cuda"), copies.fill_)
    return fake


@pytest.fixture
def sim(monkeypatch):
    fake = _install(monkeypatch, 1)
    yield fake
    gc.collect()  # free the simulated blocks while the fake is still installed
    properties.properties.cache_clear()


@pytest.fixture
def sim2(monkeypatch):
    fake = _install(monkeypatch, 2)
    yield fake
    gc.collect()
    properties.properties.cache_clear()


ALL_DTYPES = sorted(nbx.dtypes.TABLE)


def _sample(dtype_name: str, shape=(5, 6)) -> np.ndarray:
    dt = nbx.dtypes.TABLE[dtype_name]
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    if dt.kind == "bool":
        raw = raw % 2
    return raw.view(dt.host).reshape(shape)


# ---- transfers and fills --------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL_DTYPES)
def test_to_cuda_and_back_is_byte_exact_for_every_dtype(sim, name):
    host = _sample(name)
    back = nbx.from_numpy(host).to("cuda").to("cpu").numpy()
    assert back.tobytes() == host.tobytes()


@pytest.mark.parametrize("name", ALL_DTYPES)
@pytest.mark.parametrize("value", [0, 1, 3])
def test_full_on_cuda_matches_the_cpu_bytes(sim, name, value):
    if name == "bool":
        value = bool(value)
    on_gpu = nbx.full((7, 5), value, dtype=name, device="cuda").numpy()
    on_cpu = nbx.full((7, 5), value, dtype=name).numpy()
    assert on_gpu.tobytes() == on_cpu.tobytes()


def test_fills_pick_memset_for_zero_and_the_driver_memsets_for_short_patterns(sim):
    nbx.zeros(10, dtype="float32", device="cuda")
    nbx.full((10,), 7, dtype="int8", device="cuda")
    nbx.ones(10, dtype="float16", device="cuda")
    nbx.ones(10, dtype="float32", device="cuda")
    names = [n for n, _ in sim.calls]
    assert "cudaMemsetAsync" in names
    assert {"cuMemsetD8Async", "cuMemsetD16Async", "cuMemsetD32Async"} <= {n for n, _ in driver_api.drv().lib.calls}


def test_an_eight_byte_pattern_larger_than_the_upload_chunk_doubles_on_the_device(sim, monkeypatch):
    monkeypatch.setattr(copies, "_PATTERN_CHUNK", 64)
    out = nbx.full((1001,), 1.25, dtype="float64", device="cuda")
    assert (out.numpy() == 1.25).all()
    assert len(sim.called("cudaMemcpyAsync")) > 3  # one upload, then doubling copies


# ---- strided copies -------------------------------------------------------------------------
def _views(t):
    return {
        "column slice": t[:, 1:4],
        "every other column": t[:, ::2],
        "row step": t[::2],
        "reversed rows": t[::-1],
        "transpose": t.T,
        "permuted 3-D": t.reshape(2, 3, 10).permute(2, 0, 1),
        "broadcast row": t[0:1].expand(6, 10),
        "single element": t[2, 3],
    }


@pytest.mark.parametrize("case", list(_views(nbx.zeros(6, 10))))
@pytest.mark.parametrize("name", ["uint8", "float16", "float32", "complex128"])
def test_contiguous_of_a_strided_view_on_cuda_matches_numpy(sim, case, name):
    host = _sample(name, (6, 10))
    gpu = nbx.from_numpy(host).to("cuda")
    view = _views(gpu)[case]
    expected = _views(nbx.from_numpy(host))[case].numpy()
    assert view.numpy().tobytes() == np.ascontiguousarray(expected).tobytes()
    assert view.contiguous().numpy().tobytes() == np.ascontiguousarray(expected).tobytes()


def test_a_column_slice_copies_with_one_2d_memcpy_and_no_host_round_trip(sim):
    gpu = nbx.from_numpy(np.arange(60, dtype=np.float32).reshape(6, 10)).to("cuda")
    sim.calls.clear()
    out = gpu[:, 2:5].contiguous()
    names = [n for n, _ in sim.calls]
    assert names.count("cudaMemcpy2DAsync") == 1
    assert "cudaMemcpyAsync" not in names[: names.index("cudaMemcpy2DAsync")]
    assert out.numpy().tolist() == np.arange(60).reshape(6, 10)[:, 2:5].tolist()


def test_setitem_into_strided_views_on_cuda_writes_what_numpy_writes(sim):
    host = np.arange(48, dtype=np.int32).reshape(6, 8)
    gpu = nbx.from_numpy(host).to("cuda")
    expected = host.copy()
    gpu[1:5, ::3] = nbx.from_numpy(np.full((4, 3), -1, np.int32)).to("cuda")
    expected[1:5, ::3] = -1
    gpu[::-2, 1] = 9
    expected[::-2, 1] = 9
    gpu[0] = np.arange(8, dtype=np.int32) * 100
    expected[0] = np.arange(8) * 100
    assert gpu.numpy().tolist() == expected.tolist()


def test_plan_2d_merges_dense_dims_and_refuses_what_cudaMemcpy2D_cannot_express():
    assert copies.plan_2d((4, 5), (5, 1), (5, 1), 4) == (80, 1, 80, 80)
    assert copies.plan_2d((4, 3), (3, 1), (10, 1), 2) == (6, 4, 6, 20)
    assert copies.plan_2d((7,), (1,), (3,), 8) == (8, 7, 8, 24)
    assert copies.plan_2d((4, 5), (5, 1), (1, 4), 4) is None  # a transpose
    assert copies.plan_2d((4,), (1,), (-1,), 4) is None        # a reversed source
    assert copies.plan_2d((2, 3, 4), (12, 4, 1), (24, 8, 2), 4) == (4, 24, 4, 8)  # merges to one strided dim
    assert copies.plan_2d((2, 3, 4), (12, 4, 1), (40, 10, 2), 4) is None


# ---- bounds, memory, errors -----------------------------------------------------------------
def test_an_out_of_bounds_copy_is_refused_before_the_driver_is_called(sim):
    a = nbx.zeros(4, dtype="float32", device="cuda")
    b = nbx.zeros(4, dtype="float32", device="cuda")
    sim.calls.clear()
    with pytest.raises(CopyOutOfBoundsError, match="copy source of 16 bytes at byte offset 8 is outside the 16-byte"):
        backend.BACKEND.copy(a.storage, 0, b.storage, 8, 16)
    with pytest.raises(CopyOutOfBoundsError, match="download of 4 bytes at byte offset 16"):
        backend.BACKEND.download(a.storage, 16, 4)
    with pytest.raises(CopyOutOfBoundsError, match="upload of 32 bytes"):
        backend.BACKEND.upload(a.storage, 0, np.zeros(8, np.float32))
    assert sim.calls == []


def test_a_view_reaching_past_its_storage_is_refused_before_the_driver(sim):
    a = nbx.zeros(4, dtype="float32", device="cuda")
    forged = nbx.Tensor(a.storage, a.dtype, (8,))
    sim.calls.clear()
    with pytest.raises(CopyOutOfBoundsError, match="copy source of 32 bytes"):
        forged.clone()
    assert "cudaMemcpyAsync" not in [n for n, _ in sim.calls]


def test_device_memory_goes_back_to_the_pool_with_the_last_tensor_viewing_it_and_to_the_driver_at_empty_cache(sim):
    t = nbx.zeros(1000, dtype="float32", device="cuda")
    view = t[10:20]
    ptr = t.storage.data_ptr()
    pool = allocator.get_allocator("cuda")
    del t
    gc.collect()
    assert ptr in sim.blocks and pool.stats(nbx.as_device("cuda:0")).live_bytes == 4000
    del view
    gc.collect()
    assert pool.stats(nbx.as_device("cuda:0")).live_bytes == 0
    pool.empty_cache(nbx.as_device("cuda:0"))
    assert ptr not in sim.blocks


def test_out_of_memory_is_a_named_error_carrying_the_requested_bytes(sim):
    keep = nbx.zeros(1 << 20, dtype="uint8", device="cuda")
    expected = r"cuda:0 is out of memory: requested 1.00 GiB \(1073741824 bytes"
    with pytest.raises(OutOfMemoryError, match=expected) as info:
        nbx.empty((1 << 30,), dtype="uint8", device="cuda")
    assert info.value.requested == 1 << 30
    assert info.value.live == keep.nbytes
    assert info.value.cached == (2 << 20) - keep.nbytes  # the rest of keep's 2 MiB small segment
    assert info.value.total == sim.memory and info.value.free == sim.memory - (2 << 20)


def test_a_failing_runtime_call_names_the_function_the_code_and_its_name(sim):
    with pytest.raises(nvidia.CudaError, match=r"cudaSetDevice failed with cudaErrorInvalidDevice \(101\)") as info:
        runtime.rt().call("cudaSetDevice", 7)
    assert (info.value.function, info.value.code, info.value.name) == ("cudaSetDevice", 101, "cudaErrorInvalidDevice")


def test_a_failing_driver_call_names_the_function_the_code_and_its_name(sim):
    driver_api.drv().lib.cuInit = _Fn(driver_api.drv().lib, "cuInit", lambda flags: 1)
    with pytest.raises(nvidia.CudaError, match=r"cuInit failed with CUDA_ERROR_INVALID_VALUE \(1\)"):
        driver_api.drv().call("cuInit", 0)


# ---- devices and streams --------------------------------------------------------------------
def test_a_tensor_on_cuda_1_with_one_gpu_names_the_device_count(sim):
    with pytest.raises(DeviceError, match=r"cuda:1 does not exist: 1 cuda device\(s\) found"):
        nbx.zeros(3, device="cuda:1")
    with pytest.raises(DeviceError, match=r"cuda:3 does not exist: 1 cuda device\(s\) found"):
        with nvidia.device_guard(3):
            pass


def test_device_guard_restores_the_previous_device(sim2):
    assert runtime.get_device() == 0
    with nvidia.device_guard(1):
        assert runtime.get_device() == 1
        with nvidia.device_guard(0):
            assert runtime.get_device() == 0
        assert runtime.get_device() == 1
    assert runtime.get_device() == 0


def test_work_for_a_tensor_on_cuda_1_runs_with_cuda_1_current_and_the_current_device_is_restored(sim2):
    sim2.calls.clear()
    t = nbx.ones(16, dtype="float32", device="cuda:1")
    host = t.numpy()
    assert runtime.get_device() == 0
    assert sim2.called("cudaMalloc") == [1]
    assert driver_api.drv().lib.called("cuMemsetD32Async") == [1]
    assert sim2.called("cudaMemcpyAsync") == [1]
    assert (host == 1).all()


def test_a_peer_copy_first_enables_direct_access_both_ways_and_only_once(sim2, monkeypatch):
    monkeypatch.setattr(runtime, "_peer_enabled", set())
    src = nbx.from_numpy(np.arange(12, dtype=np.float32)).to("cuda:0")
    sim2.calls.clear()
    for _ in range(3):
        assert src.to("cuda:1").numpy().tolist() == list(range(12))
    # the current device at each call: cuda:1 may reach cuda:0, then cuda:0 may reach cuda:1
    assert sim2.called("cudaDeviceEnablePeerAccess") == [1, 0]
    assert runtime.get_device() == 0


def test_to_another_cuda_device_is_a_peer_copy_without_a_host_round_trip(sim2):
    src = nbx.from_numpy(np.arange(12, dtype=np.float32)).to("cuda:0")
    sim2.calls.clear()
    dst = src.to("cuda:1")
    names = [n for n, _ in sim2.calls]
    assert dst.device == nbx.as_device("cuda:1")
    assert sim2.called("cudaMemcpyPeerAsync") == [1]
    assert "cudaMemcpyAsync" not in names
    assert dst.numpy().tolist() == list(range(12))
    strided = src[::3].to("cuda:1")
    assert strided.numpy().tolist() == [0, 3, 6, 9]


def test_an_op_on_tensors_of_two_devices_is_a_cross_device_error(sim2):
    a = nbx.zeros(3, device="cuda:0")
    b = nbx.zeros(3, device="cuda:1")
    with pytest.raises(CrossDeviceError, match="different devices"):
        nbx.add(a, b)
    with pytest.raises(CrossDeviceError, match="copy it with .to"):
        a[...] = b


def test_work_runs_on_the_stream_made_current_by_a_with_block(sim):
    t = nbx.zeros(8, device="cuda")
    with nvidia.Stream(priority=-1) as s:
        assert nvidia.current_stream(0) is s
        streams_seen = []
        original = sim.cudaMemsetAsync.impl
        sim.cudaMemsetAsync.impl = lambda p, v, n, stream: streams_seen.append(stream) or original(p, v, n, stream)
        nbx.zeros(8, device="cuda")
    assert streams_seen == [s.handle]
    assert nvidia.current_stream(0).is_default
    del t


def test_leaving_streams_out_of_order_is_refused(sim):
    a, b = nvidia.Stream(), nvidia.Stream()
    a.__enter__()
    b.__enter__()
    with pytest.raises(nvidia.StreamMismatchError, match="not the innermost current stream"):
        a.__exit__(None, None, None)
    b.__exit__(None, None, None)
    a.__exit__(None, None, None)


def test_properties_come_from_the_attributes_and_the_driver(sim):
    p = nvidia.device_properties(0)
    assert p.name == "Simulated GPU" and p.compute_capability == (9, 0) and p.arch == "sm_90"
    assert p.sm_count == 132 and p.warp_size == 32 and p.stream_priorities == (0, -5)
    assert backend.BACKEND.target(nbx.as_device("cuda:0")) == "sm_90"
    assert driver_api.allocation_granularity(0) == 2 << 20


# ---- DLPack on cuda -------------------------------------------------------------------------
def test_a_cuda_capsule_names_kdlcuda_and_the_device_id(sim2):
    t = nbx.zeros(4, device="cuda:1")
    assert t.__dlpack_device__() == (dlpack.DLDeviceType.kDLCUDA, 1)
    back = dlpack.from_capsule(t.__dlpack__(max_version=(1, 0), stream=-1))
    assert back.device == nbx.as_device("cuda:1") and back.data_ptr() == t.data_ptr()


def test_the_consumer_stream_waits_for_nbx_stream_only_when_they_differ(sim):
    t = nbx.zeros(4, device="cuda")
    sim.calls.clear()
    t.__dlpack__(stream=1, max_version=(1, 0))   # legacy default on both sides: nothing to do
    t.__dlpack__(stream=-1, max_version=(1, 0))  # the consumer asked for no synchronisation
    assert sim.called("cudaStreamWaitEvent") == []
    with nvidia.Stream():
        t.__dlpack__(stream=None, max_version=(1, 0))
    assert sim.called("cudaEventRecord") == [0] and sim.called("cudaStreamWaitEvent") == [0]


def test_stream_zero_is_refused_as_ambiguous(sim):
    t = nbx.zeros(4, device="cuda")
    with pytest.raises(DLPackError, match="stream 0 is ambiguous"):
        t.__dlpack__(stream=0, max_version=(1, 0))


def test_a_cuda_tensor_is_copied_to_the_cpu_only_when_a_copy_is_allowed(sim):
    t = nbx.from_numpy(np.arange(5, dtype=np.int16)).to("cuda")
    cpu = (dlpack.DLDeviceType.kDLCPU, 0)
    host = dlpack.from_capsule(t.__dlpack__(max_version=(1, 0), dl_device=cpu))
    assert host.device == nbx.as_device("cpu") and host.numpy().tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(DLPackError, match="needs a copy, and copy=False"):
        t.__dlpack__(max_version=(1, 0), dl_device=cpu, copy=False)


def test_from_dlpack_of_a_foreign_cuda_producer_wraps_its_memory_without_a_copy(sim):
    source = nbx.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3)).to("cuda")

    class Producer:  # what a CuPy array or torch tensor looks like to nbx
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
            self.stream = stream
            return source.__dlpack__(stream=stream, max_version=max_version)

    producer = Producer()
    t = nbx.from_dlpack(producer)
    assert producer.stream == 1  # nbx's current stream is the legacy default
    assert t.device == nbx.as_device("cuda:0") and t.data_ptr() == source.data_ptr()
    assert t.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]


# ---- the Triton driver ----------------------------------------------------------------------
def test_nbx_triton_driver_answers_device_stream_and_target_from_nbx(sim):
    pytest.importorskip("triton", reason="Triton is optional; this checks nbx's driver subclass of it")
    driver = triton_driver.driver_class()()  # __init__ imports no torch and compiles nothing
    assert driver.is_active() is True
    assert driver.get_current_device() == 0
    assert driver.get_device_capability(0) == (9, 0)
    target = driver.get_current_target()
    assert (target.backend, target.arch, target.warp_size) == ("cuda", 90, 32)
    with nvidia.Stream() as s:
        assert driver.get_current_stream(0) == s.handle
    assert driver.get_current_stream(0) == streams.LEGACY_DEFAULT
    assert driver.get_benchmarker().__name__ == "bench"
    with pytest.raises(nbx.NotSupportedError, match="torch-free"):
        driver.get_active_torch_device()
    with pytest.raises(nbx.NotSupportedError, match="no torch.cuda device interface"):
        driver.get_device_interface()
    cache = driver.get_empty_cache_for_benchmark()
    driver.clear_cache(cache)
    assert cache.nbytes == 256 << 20 and not cache.numpy()[:: 1 << 16].any()
    scratch = triton_driver.scratch_allocator(1000, 128, 0)
    assert scratch.data_ptr() % 128 == 0


def test_copy_and_fill_on_cuda_are_served_by_nbx_kernels_over_the_backends_own_fallback(sim, monkeypatch):
    """Both register copy_ and fill_ for cuda; the backend's at priority -1, so the kernels' serve
    however nbx was installed (entry points or a source tree load the plugins in either order)."""
    for op in ("copy_", "fill_"):
        monkeypatch.delitem(dispatch._IMPLEMENTATIONS, (op, "cuda"))   # the fixture's pin to the backend's
        assert dispatch.provider(op, "cuda") == "nbx.kernels.elementwise"
        assert {r.provider for r in dispatch._REGISTRATIONS[op, "cuda"]} == {"nbx.devices.nvidia.copies"}
