"""The CUDA adapters of nbx.memory on a simulated CUDA (host memory behind 'device' pointers): stream
events, the driver's virtual memory calls under the expandable range, cudaHostAlloc under the pinned
pool, the pool the backend registers from the device file, and stream capture behind graphs.
tests/gpu/test_memory_*.py runs the same paths on the H200."""
from __future__ import annotations

import gc
import threading

import nbx.core as nbx
import numpy as np
import pytest
import yaml
from nbx.core import device_files, dispatch
from nbx.core.device import Device, discover_plugins
from nbx.core.errors import ArgumentError, DeviceOOMError, GraphCaptureError
from nbx.devices import nvidia
from nbx.devices.nvidia import backend, copies, driver_api, graphs, memory, properties, runtime, triton_driver
from nbx.devices.nvidia.errors import CudaError
from nbx.memory import allocator
from nbx.memory import graphs as memory_graphs
from nbx.memory.expandable import ExpandableRange
from nbx.memory.pinned import PinnedPool
from nbx.memory.pool import NBX, Pool
from nbx.memory.sources import DriverSource
from nbx.memory.rules import STRICT_HALF

MiB = 1 << 20
GRANULE = 2 * MiB
DEV = Device("cuda", 0)


class _Fn:
    """A fake library function: takes argtypes/restype like a ctypes one, logs its calls."""

    def __init__(self, lib, name, impl):
        self.lib, self.name, self.impl = lib, name, impl

    def __call__(self, *args):
        self.lib.calls.append(self.name)
        return self.impl(*args)


def _out(ref, value):
    ref._obj.value = value
    return 0


class FakeLib:
    """Functions defined by a subclass are simulated; any other cuda*/cu* function succeeds doing nothing."""

    def __init__(self):
        self.calls: list[str] = []
        for name in dir(type(self)):
            if name.startswith("cu"):
                setattr(self, name, _Fn(self, name, getattr(self, name)))

    def __getattr__(self, name):
        if not name.startswith("cu"):
            raise AttributeError(name)
        fn = _Fn(self, name, lambda *args: 0)
        setattr(self, name, fn)
        return fn

    def count(self, name: str) -> int:
        return self.calls.count(name)


class FakeCudart(FakeLib):
    def __init__(self, memory: int = 256 * MiB):
        self.memory, self.used, self.current = memory, 0, 0
        self.blocks: dict[int, np.ndarray] = {}
        self.handles = 0x1000
        self.event_flags: dict[int, int] = {}
        self.recorded: list[tuple[int, int]] = []   # (event, stream)
        self.not_done: set[int] = set()             # events whose stream has not passed them
        self.capturing: dict[int, bool] = {}        # stream -> invalidated?
        self.thread_modes: dict[int, int] = {}
        self.graphs: dict[int, list] = {}
        self.launched: list[tuple[int, int]] = []   # (executable, stream)
        self.destroyed: list[int] = []
        super().__init__()

    def cudaGetErrorName(self, code):
        return {2: b"cudaErrorMemoryAllocation", 900: b"cudaErrorStreamCaptureUnsupported",
                901: b"cudaErrorStreamCaptureInvalidated", 600: b"cudaErrorNotReady"}.get(code, b"cudaErrorUnknown")

    def cudaGetErrorString(self, code):
        return b"simulated"

    def cudaGetDeviceCount(self, p):
        return _out(p, 1)

    def cudaGetDevice(self, p):
        return _out(p, self.current)

    def cudaDeviceGetAttribute(self, p, attr, device):
        return _out(p, {75: 9, 76: 0, 10: 32, 16: 132}.get(attr, 1))

    def cudaMemGetInfo(self, free, total):
        _out(free, self.memory - self.used)
        return _out(total, self.memory)

    def _new_handle(self):
        self.handles += 0x10
        return self.handles

    # memory: host memory, refused beyond the capacity and, mid-capture, unless the thread is relaxed
    def _capture_forbids(self) -> bool:
        if self.thread_modes.get(threading.get_ident(), 0) == graphs.CAPTURE_RELAXED:
            return False
        live = [s for s, broken in self.capturing.items()]
        for s in live:
            self.capturing[s] = True  # the unsafe call invalidates every capture in global mode
        return bool(live)

    def cudaMalloc(self, p, nbytes):
        if self._capture_forbids():
            return 900
        if self.used + nbytes > self.memory:
            return 2
        raw = np.empty(nbytes + 256, np.uint8)
        block = raw[-raw.ctypes.data % 256:][:nbytes]
        self.blocks[block.ctypes.data] = block
        self.used += nbytes
        return _out(p, block.ctypes.data)

    def cudaFree(self, ptr):
        if self._capture_forbids():
            return 900
        self.used -= self.blocks.pop(ptr).nbytes
        return 0

    def cudaHostAlloc(self, p, nbytes, flags):
        return self.cudaMalloc(p, nbytes)

    def cudaFreeHost(self, ptr):
        return self.cudaFree(ptr)

    # streams and events
    def cudaStreamCreateWithPriority(self, p, flags, priority):
        return _out(p, self._new_handle())

    def cudaEventCreateWithFlags(self, p, flags):
        handle = self._new_handle()
        self.event_flags[handle] = flags
        return _out(p, handle)

    def cudaEventRecord(self, event, stream):
        self.recorded.append((event, stream))
        self.not_done.add(event)
        return 0

    def cudaEventQuery(self, event):
        return 600 if event in self.not_done else 0

    def cudaDeviceSynchronize(self):
        if self.capturing:
            self._capture_forbids()
            return 900
        self.not_done.clear()
        return 0

    def cudaStreamSynchronize(self, stream):
        if stream in self.capturing:
            self.capturing[stream] = True
            return 900
        return 0

    # stream capture
    def cudaStreamBeginCapture(self, stream, mode):
        self.capturing[stream] = False
        return 0

    def cudaStreamIsCapturing(self, stream, p):
        state = self.capturing.get(stream)
        return _out(p, 0 if state is None else 2 if state else 1)

    def cudaStreamEndCapture(self, stream, p):
        broken = self.capturing.pop(stream)
        if broken:
            return 901
        handle = self._new_handle()
        self.graphs[handle] = ["kernel"] * 3
        return _out(p, handle)

    def cudaThreadExchangeStreamCaptureMode(self, p):
        me = threading.get_ident()
        old = self.thread_modes.get(me, 0)
        self.thread_modes[me] = p._obj.value
        return _out(p, old)

    def cudaGraphInstantiateWithFlags(self, p, graph, flags):
        return _out(p, graph + 1)

    def cudaGraphLaunch(self, executable, stream):
        self.launched.append((executable, stream))
        return 0

    def cudaGraphExecDestroy(self, executable):
        self.destroyed.append(executable)
        return 0

    def cudaGraphDestroy(self, graph):
        self.destroyed.append(graph)
        return 0

    def cudaGraphGetNodes(self, graph, nodes, p):
        return _out(p, len(self.graphs[graph]))


class FakeDriver(FakeLib):
    """libcuda's virtual memory: reserved ranges, chunks within a capacity, mappings checked like the driver."""

    def __init__(self, cudart: FakeCudart, chunk_capacity: int = 64 * MiB):
        self.cudart = cudart
        self.capacity, self.held = chunk_capacity, 0
        self.next_address = 1 << 40
        self.ranges: dict[int, int] = {}
        self.chunks: dict[int, int] = {}                 # handle -> bytes
        self.mapped: dict[int, tuple[int, int]] = {}     # address -> (bytes, handle)
        self.access: list[tuple[int, int, int, int]] = []  # (address, bytes, device, flags)
        self.created_on: list[int] = []
        super().__init__()

    def cuGetErrorName(self, code, p):
        return _out(p, {2: b"CUDA_ERROR_OUT_OF_MEMORY"}.get(code, b"CUDA_ERROR_INVALID_VALUE"))

    def cuGetErrorString(self, code, p):
        return _out(p, b"simulated")

    def cuDeviceGet(self, p, index):
        return _out(p, index)

    def cuDeviceGetName(self, buf, size, device):
        buf.value = b"Simulated GPU"
        return 0

    def cuMemGetAllocationGranularity(self, p, prop, flag):
        return _out(p, GRANULE)

    def cuMemAddressReserve(self, p, size, alignment, addr, flags):
        if size % GRANULE or alignment % GRANULE:
            return 1
        address = -(-self.next_address // alignment) * alignment
        self.next_address = address + size + GRANULE
        self.ranges[address] = size
        return _out(p, address)

    def cuMemAddressFree(self, address, size):
        if self.ranges.pop(address, None) != size or any(address <= a < address + size for a in self.mapped):
            return 1
        return 0

    def cuMemCreate(self, p, size, prop, flags):
        if prop._obj.type != 1 or prop._obj.location.type != 1 or size % GRANULE:
            return 1
        if self.held + size > self.capacity:
            return 2
        self.created_on.append(prop._obj.location.id)
        self.held += size
        handle = 0x7000 + len(self.created_on)
        self.chunks[handle] = size
        return _out(p, handle)

    def cuMemRelease(self, handle):
        if any(h == handle for _, h in self.mapped.values()):
            return 1
        self.held -= self.chunks.pop(handle)
        return 0

    def cuMemMap(self, address, size, offset, handle, flags):
        if self.chunks.get(handle) != size or address in self.mapped or address % GRANULE:
            return 1
        if not any(a <= address and address + size <= a + n for a, n in self.ranges.items()):
            return 1
        self.mapped[address] = (size, handle)
        return 0

    def cuMemSetAccess(self, address, size, desc, count):
        d = desc._obj
        self.access.append((address, size, d.location.id, d.flags))
        return 0

    def cuMemUnmap(self, address, size):
        entry = self.mapped.pop(address, None)
        return 0 if entry is not None and entry[0] == size else 1


@pytest.fixture
def cuda(monkeypatch):
    """The simulated runtime and driver installed, a fresh backend start and allocator registry."""
    fake = FakeCudart()
    monkeypatch.setattr(runtime, "_runtime", runtime.CudaRuntime(fake, "simulated libcudart"))
    monkeypatch.setattr(runtime, "_count", None)
    fake.driver = FakeDriver(fake)
    monkeypatch.setattr(driver_api, "_driver", driver_api.CudaDriverApi(fake.driver, "simulated libcuda"))
    monkeypatch.setattr(triton_driver, "install_if_triton", lambda: False)
    monkeypatch.setattr(backend.BACKEND, "_started", False)
    monkeypatch.setattr(allocator, "_ALLOCATORS", {k: v for k, v in allocator._ALLOCATORS.items() if k != "cuda"})
    monkeypatch.setattr(memory_graphs, "_CAPTURES", dict(memory_graphs._CAPTURES))
    properties.properties.cache_clear()
    nvidia.register()
    discover_plugins()
    monkeypatch.setitem(dispatch._IMPLEMENTATIONS, ("copy_", "cuda"), copies.copy_)
    monkeypatch.setitem(dispatch._IMPLEMENTATIONS, ("fill_", "cuda"), copies.fill_)
    yield fake
    gc.collect()
    properties.properties.cache_clear()


# ---- stream events ------------------------------------------------------------------------------
def test_stream_events_are_timing_free_recorded_on_the_stream_and_recycled(cuda):
    events = memory.CudaStreamEvents(0)
    s = nvidia.Stream(0)
    e = events.record(s)
    assert cuda.event_flags[e.handle] & runtime.EVENT_DISABLE_TIMING
    assert cuda.recorded[-1] == (e.handle, s.handle)
    assert events.query(e) is False
    cuda.not_done.discard(e.handle)
    assert events.query(e) is True
    events.release(e)
    again = events.record(None)  # None: the legacy default stream
    assert again is e and events.created == 1 and cuda.recorded[-1] == (e.handle, 0)


def test_a_pool_over_cuda_events_reuses_a_block_on_another_stream_only_after_its_event(cuda):
    src = DriverSource(runtime.malloc, runtime.free, 0, runtime.memory_info)
    # the strict half rule's 4 MiB segments: nbx's 20 MiB ones would leave a better fit in the second
    pool = Pool(src, STRICT_HALF, parked_fraction=1.0, events=memory.CudaStreamEvents(0),
                synchronize=lambda: runtime.synchronize(0), device=DEV)
    a, b = nvidia.Stream(0), nvidia.Stream(0)
    block = pool.allocate(4 * MiB, a)
    pool.allocate(1024, b).release()  # a second stream: frees are stamped with events from now on
    ptr = block.ptr
    block.release()
    other = pool.allocate(4 * MiB, b)
    assert other.ptr != ptr  # a's event has not completed
    cuda.not_done.clear()
    assert pool.allocate(4 * MiB, b).ptr == ptr


# ---- the expandable range over the driver's virtual memory --------------------------------------
def test_physical_memory_reserves_creates_maps_with_read_write_access_and_gives_everything_back(cuda):
    phys = memory.CudaPhysicalMemory(0)
    assert phys.granularity == GRANULE
    rng = ExpandableRange(phys, 4 * MiB, range_bytes=64 * MiB)
    drv = cuda.driver
    assert drv.ranges == {rng.base: 64 * MiB} and rng.base % GRANULE == 0
    assert rng.map(rng.base, rng.base + 6 * MiB)
    assert sorted(drv.mapped) == [rng.base, rng.base + 4 * MiB]
    assert drv.access == [(rng.base, 4 * MiB, 0, 3), (rng.base + 4 * MiB, 4 * MiB, 0, 3)]  # RW for cuda:0
    assert drv.created_on == [0, 0]
    rng.close()
    assert drv.ranges == {} and drv.mapped == {} and drv.chunks == {} and drv.held == 0


def test_a_chunk_the_device_cannot_hold_is_a_refusal_the_range_acts_on_not_an_error(cuda):
    phys = memory.CudaPhysicalMemory(0)
    cuda.driver.capacity = 8 * MiB
    assert phys.create(8 * MiB) is not None
    assert phys.create(2 * MiB) is None
    with pytest.raises(CudaError, match=r"cuMemCreate failed with CUDA_ERROR_INVALID_VALUE \(1\)"):
        phys.create(3 * MiB)  # not a multiple of the granularity: a real error


def test_the_pool_grows_in_the_range_and_reclaims_free_chunks_at_a_refusal(cuda):
    cuda.driver.capacity = 24 * MiB
    rng = ExpandableRange(memory.CudaPhysicalMemory(0), 4 * MiB, range_bytes=128 * MiB)
    src = DriverSource(runtime.malloc, runtime.free, 0, runtime.memory_info)
    pool = Pool(src, NBX, parked_fraction=1.0, events=memory.CudaStreamEvents(0),
                synchronize=lambda: runtime.synchronize(0), expandable=rng, device=DEV)
    a = pool.allocate(8 * MiB)
    b = pool.allocate(8 * MiB)
    assert pool.stats().range_mapped == 16 * MiB
    a.release()
    c = pool.allocate(16 * MiB)  # 8 MiB of chunks free in the budget: a's chunks are unmapped and mapped again
    stats = pool.stats()
    assert stats.refusals == 1 and stats.range_mapped == 24 * MiB == cuda.driver.held
    assert rng.unmaps == 4 and rng.creates == 6  # a's 2 chunks and the 2 the failed attempt mapped, reused
    assert c.ptr + 16 * MiB <= b.ptr or b.ptr + 8 * MiB <= c.ptr  # no overlap with the live block
    with pytest.raises(DeviceOOMError, match="larger than the whole expandable range"):
        pool.allocate(256 * MiB)
    b.release()
    c.release()
    pool.empty_cache()
    rng.close()
    assert cuda.driver.held == 0 and cuda.driver.ranges == {}


# ---- pinned host memory ------------------------------------------------------------------------
def test_pinned_host_buffers_come_from_cudaHostAlloc_and_a_refusal_is_a_none(cuda):
    pinned = memory.CudaPinnedAllocator()
    pool = PinnedPool(pinned, NBX, parked_fraction=1.0)
    block = pool.allocate(3000)
    view = pool.array(block)
    view[:] = 7
    assert cuda.count("cudaHostAlloc") == 1 and int(view.sum()) == 7 * 3000
    assert pinned.allocate(1 << 40) is None
    free, total = pinned.memory_info()
    assert free is None and total > 0
    del view, block
    gc.collect()
    assert pool.empty_cache() == 2 * MiB and cuda.count("cudaFreeHost") == 1


# ---- the pool the backend registers -------------------------------------------------------------
def test_the_backend_registers_a_caching_pool_with_the_device_files_parked_fraction_and_no_range(cuda):
    t = nbx.zeros(1000, dtype="float32", device="cuda")
    alloc = allocator.get_allocator("cuda")
    pool = alloc.pool(DEV)
    facts = device_files.in_force(DEV)
    assert "memory.vmm.chunk_bytes" not in facts  # hopper.yml states none until it is measured
    assert pool._range is None
    assert pool._parked_limit == int(facts.value("memory.pool_parked_fraction") * cuda.memory)
    assert alloc.stats(DEV).live_bytes == 4000 and cuda.count("cudaMalloc") == 1
    del t
    u = nbx.zeros(1000, dtype="float32", device="cuda")  # served from the pool: no second cudaMalloc
    assert cuda.count("cudaMalloc") == 1
    assert "memory summary: cuda:0" in alloc.memory_summary(DEV)
    assert memory_graphs.capture_support("cuda") is graphs.CAPTURE
    del u


def test_a_stated_vmm_chunk_gives_the_pool_an_expandable_range_four_times_the_device(cuda, tmp_path):
    path = tmp_path / "engine.yml"
    path.write_text(yaml.safe_dump({"schema": 1, "application": "engine", "targets": ["sm_90"], "facts": {
        "memory": {"vmm": {"chunk_bytes": {"value": 8 * MiB, "measured": "Simulated GPU, 2026-12-01, tests"}}}}}))
    device_files.add_application_file(path)
    try:
        cuda.driver.capacity = cuda.memory
        t = nbx.empty((3 * MiB,), dtype="uint8", device="cuda")  # large: carved from the range (fake addresses)
        pool = allocator.get_allocator("cuda").pool(DEV)
        assert pool._range is not None and pool._range.chunk == 8 * MiB
        assert pool._range.size == memory.RANGE_PER_MEMORY * cuda.memory
        assert pool.stats().range_mapped == 8 * MiB and cuda.count("cudaMalloc") == 0
        assert pool._range.base <= t.data_ptr() < pool._range.base + pool._range.size
    finally:
        device_files.remove_application_file(path)


# ---- stream capture ----------------------------------------------------------------------------
def _step(x):
    return lambda: nbx.zeros(x.shape, dtype=x.dtype, device="cuda")  # memsets: capturable work


def test_a_capture_begins_on_a_side_stream_ends_instantiates_and_replays_on_the_current_stream(cuda):
    x = nbx.zeros(256, dtype="float32", device="cuda")
    graph = memory_graphs.capture(_step(x), "cuda:0")
    assert graph.nodes == 3 and cuda.count("cudaStreamBeginCapture") == 1
    assert cuda.count("cudaGraphInstantiateWithFlags") == 1
    out = graph.replay()
    assert out.shape == x.shape and cuda.launched[-1][1] == 0  # the legacy default stream, current here
    with nvidia.Stream(0) as s:
        graph.replay()
    assert cuda.launched[-1][1] == s.handle
    graph.close()
    assert len(cuda.destroyed) == 2


def test_a_replay_asks_the_current_device_only_where_several_are_visible(cuda, monkeypatch):
    x = nbx.zeros(256, dtype="float32", device="cuda")
    graph = memory_graphs.capture(_step(x), "cuda:0")
    asked = cuda.count("cudaGetDevice")
    graph.replay()  # one device: always current, so the replay is the launch alone
    assert cuda.count("cudaGetDevice") == asked and cuda.count("cudaGraphLaunch") == 1
    monkeypatch.setattr(runtime, "_count", 2)
    graph.replay()  # several: the stream's device is checked to be current before the launch
    assert cuda.count("cudaGetDevice") == asked + 1 and cuda.count("cudaGraphLaunch") == 2
    graph.close()


def test_a_host_sync_in_the_capture_is_a_graph_capture_error_naming_the_call(cuda):
    x = nbx.zeros(256, dtype="float32", device="cuda")

    def step():
        y = nbx.zeros(x.shape, dtype=x.dtype, device="cuda")
        nvidia.current_stream(0).synchronize()
        return y

    with pytest.raises(GraphCaptureError, match=r"cudaStreamSynchronize is a host synchronization and failed with "
                                                r"cudaErrorStreamCaptureUnsupported \(900\)") as info:
        memory_graphs.capture(step, "cuda:0")
    assert info.value.operation == "cudaStreamSynchronize"
    assert cuda.capturing == {}  # the capture was ended
    del info
    gc.collect()


def test_a_driver_allocation_in_the_capture_is_refused_but_the_private_pool_may_grow(cuda):
    def allocates():
        runtime.malloc(4096, 0)
        return None

    with pytest.raises(GraphCaptureError, match="cudaMalloc is an allocation \\(or free\\) from the driver"):
        memory_graphs.capture(allocates, "cuda:0")
    before = cuda.count("cudaMalloc")
    graph = memory_graphs.capture(lambda: nbx.empty((4 * MiB,), dtype="uint8", device="cuda"), "cuda:0", warmup=0)
    assert cuda.count("cudaMalloc") == before + 1  # the private pool's segment, made mid-capture in relaxed mode
    assert graph.pool.stats().reserved == 20 * MiB  # nbx's rules: a segment of 20 MiB under 10 MiB
    graph.close()


def test_an_invalidated_capture_whose_error_was_swallowed_is_refused_at_its_end(cuda):
    def swallows():
        try:
            runtime.synchronize(0)
        except CudaError:
            pass
        return nbx.zeros(4, device="cuda")

    with pytest.raises(GraphCaptureError, match="was invalidated \\(cudaErrorStreamCaptureInvalidated\\)"):
        memory_graphs.capture(swallows, "cuda:0")


def test_the_capture_adapter_names_only_capture_errors_as_violations():
    capture = graphs.CudaCapture()
    assert capture.violation(CudaError("cudaMemcpyAsync", 900, "cudaErrorStreamCaptureUnsupported")).startswith(
        "cudaMemcpyAsync is a host synchronization")
    assert capture.violation(CudaError("cudaLaunchKernel", 906, "cudaErrorStreamCaptureImplicit")).startswith(
        "cudaLaunchKernel is an operation stream capture does not allow")
    assert capture.violation(CudaError("cudaMalloc", 2, "cudaErrorMemoryAllocation")) is None
    assert capture.violation(ArgumentError("no")) is None
