"""The Metal backend without a Mac: target naming, refusals, dispatch limits from the device file, and
the backend's copies driven through a fake MTLDevice whose buffers are host memory."""
from __future__ import annotations

import sys

import numpy as np
import pytest
from nbx.core import device_files
from nbx.core.device import _BACKENDS, Device
from nbx.core.errors import DeviceError, IndexingError, MissingFactError, OutOfMemoryError
from nbx.devices import apple
from nbx.devices.apple import backend as metal_backend
from nbx.devices.apple import runtime
from nbx.devices.apple.errors import MetalCommandBufferError, MetalUnavailable
from nbx.devices.apple.stream import CommandStream, DispatchLimits
from nbx.memory import allocator


def test_the_target_is_the_device_name_lowercased_and_hyphenated():
    assert runtime.target_from_name("Apple M4 Pro") == "apple-m4-pro"
    assert runtime.target_from_name("Apple  M1 ") == "apple-m1"
    assert device_files.for_arch(runtime.target_from_name("Apple M2 Ultra")).name == "apple/apple_m2_ultra"


@pytest.mark.skipif(sys.platform == "darwin", reason="this machine may have Metal; the refusal is for other systems")
def test_off_a_mac_metal_is_refused_naming_the_platform():
    runtime.use_runtime(None)
    with pytest.raises(MetalUnavailable, match=rf"Metal needs macOS on Apple silicon \(darwin, arm64\); looked at:\n"
                                               rf"  platform {sys.platform} on "):
        runtime.load()


def test_without_a_triton_build_for_metal_every_place_looked_at_is_listed(monkeypatch):
    monkeypatch.setattr(runtime.metadata, "entry_points", lambda group: [])
    monkeypatch.setattr(runtime.importlib.util, "find_spec", lambda name: None)
    where, tried = runtime.find_triton_metal()
    assert where is None
    assert tried == ["entry points triton.backends named metal or apple (none)",
                     "module triton.backends.metal (not installed)", "module triton.backends.apple (not installed)",
                     "module triton_msl (not installed)", "module triton_metal (not installed)"]


def test_register_without_metal_records_why_and_raises_it(monkeypatch):
    monkeypatch.setattr(runtime, "_load", lambda: (_ for _ in ()).throw(MetalUnavailable("no Metal here", ["x"])))
    runtime.use_runtime(None)
    monkeypatch.delitem(_BACKENDS, "metal", raising=False)
    with pytest.raises(MetalUnavailable, match=r"the Metal backend is unavailable: no Metal here; looked at:\n  x"):
        apple.register()
    assert "metal" not in _BACKENDS
    assert apple.unavailable_reason() == "MetalUnavailable: the Metal backend is unavailable: no Metal here; " \
                                         "looked at:\n  x"


# ---- the command stream -------------------------------------------------------------------------

class FakeCommandBuffer:
    def __init__(self, log, failed=False):
        self.log, self.failed, self.dispatch_encoder_ended = log, failed, False

    def computeCommandEncoder(self):
        return self

    def endEncoding(self):
        self.dispatch_encoder_ended = True

    def commit(self):
        self.log.append(("commit", id(self)))

    def waitUntilCompleted(self):
        self.log.append(("wait", id(self)))

    def status(self):
        return 5 if self.failed else 4  # MTLCommandBufferStatusError / Completed

    def error(self):
        return "the GPU took a page fault"


class FakeQueue:
    def __init__(self, fail_every=None):
        self.log, self.buffers, self.fail_every = [], [], fail_every

    def commandBuffer(self):
        failed = self.fail_every is not None and len(self.buffers) % self.fail_every == self.fail_every - 1
        self.buffers.append(FakeCommandBuffer(self.log, failed))
        return self.buffers[-1]


def test_dispatch_limits_are_read_from_the_device_file_in_force():
    limits = DispatchLimits.from_facts(device_files.for_arch("apple-m4-pro"))
    assert limits == DispatchLimits(max_command_buffers_in_flight=32, max_dispatches_per_command_buffer=512)


def test_a_device_file_without_dispatch_limits_is_refused_by_name():
    with pytest.raises(MissingFactError, match=r"'dispatch\.max_command_buffers_in_flight' is not stated for target "
                                               r"'sm_90'; files consulted: \S*hopper\.yml"):
        DispatchLimits.from_facts(device_files.for_arch("sm_90"))


def test_a_command_buffer_is_committed_at_the_dispatch_limit():
    queue = FakeQueue()
    stream = CommandStream(queue, DispatchLimits(8, 3))
    for _ in range(7):
        stream.encoder()
        stream.dispatched()
    commits = [event for event in queue.log if event[0] == "commit"]
    assert len(commits) == 2 and len(queue.buffers) == 3 and stream.in_flight == 2
    assert all(b.dispatch_encoder_ended for b in queue.buffers[:2])


def test_the_oldest_buffer_is_waited_for_when_too_many_are_in_flight():
    queue = FakeQueue()
    stream = CommandStream(queue, DispatchLimits(2, 1))
    for _ in range(3):
        stream.encoder()
        stream.dispatched()
    first = id(queue.buffers[0])
    assert queue.log[-1] == ("wait", first) and stream.in_flight == 2
    stream.synchronize()
    assert stream.in_flight == 0 and [e for e in queue.log if e[0] == "wait"][-1] == ("wait", id(queue.buffers[2]))


def test_a_failed_command_buffer_is_a_named_error():
    stream = CommandStream(FakeQueue(fail_every=1), DispatchLimits(4, 100))
    stream.encoder()
    with pytest.raises(MetalCommandBufferError, match=r"a Metal command buffer failed: the GPU took a page fault"):
        stream.synchronize()


# ---- the backend over a fake MTLDevice ----------------------------------------------------------

class FakeContents:
    def __init__(self, nbytes):
        self.memory = bytearray(nbytes)

    def as_buffer(self, nbytes):
        return memoryview(self.memory)[:nbytes]


class FakeBuffer:
    def __init__(self, nbytes):
        self._contents = FakeContents(nbytes)

    def contents(self):
        return self._contents


class FakeMTLDevice:
    def __init__(self, limit=1 << 20):
        self.limit, self.queue = limit, FakeQueue()

    def name(self):
        return "Apple M4 Pro"

    def newCommandQueue(self):
        return self.queue

    def newBufferWithLength_options_(self, nbytes, options):
        return None if nbytes > self.limit else FakeBuffer(nbytes)


@pytest.fixture
def fake_metal(monkeypatch):
    rt = runtime.MetalRuntime(FakeMTLDevice(), "module triton_msl")
    runtime.use_runtime(rt)
    monkeypatch.delitem(allocator._ALLOCATORS, "metal", raising=False)
    backend = metal_backend.MetalBackend()
    monkeypatch.setitem(_BACKENDS, "metal", backend)
    yield rt, backend
    runtime.use_runtime(None)
    allocator._ALLOCATORS.pop("metal", None)


def test_the_backend_reports_its_target_and_the_chip_file_is_in_force(fake_metal):
    rt, backend = fake_metal
    assert backend.target(Device("metal", 0)) == "apple-m4-pro"
    facts = device_files.in_force("metal")
    assert facts.name == "apple/apple_m4_pro" and facts.value("memory.max_shared_memory_per_block") == 32768
    assert backend.stream().limits.max_dispatches_per_command_buffer == 512


def test_bytes_round_trip_through_shared_buffers(fake_metal):
    rt, backend = fake_metal
    data = np.arange(32, dtype=np.float16)
    a = backend.allocate(data.nbytes, Device("metal", 0))
    b = backend.allocate(data.nbytes, Device("metal", 0))
    backend.upload(a, 0, data)
    backend.copy(b, 0, a, 0, data.nbytes)
    assert np.array_equal(backend.download(b, 0, data.nbytes).view(np.float16), data)
    assert rt.buffer_at(a.data_ptr()) is not rt.buffer_at(b.data_ptr())


def test_a_host_copy_waits_for_the_gpu_work_in_flight(fake_metal):
    rt, backend = fake_metal
    a = backend.allocate(8, Device("metal", 0))
    backend.stream().encoder()
    backend.stream().dispatched()
    backend.download(a, 0, 8)
    assert rt.queue.log[-2:] == [("commit", id(rt.queue.buffers[0])), ("wait", id(rt.queue.buffers[0]))]


def test_an_out_of_bounds_copy_and_a_second_device_are_refused(fake_metal):
    rt, backend = fake_metal
    a = backend.allocate(8, Device("metal", 0))
    with pytest.raises(IndexingError, match=r"upload of 16 bytes at byte offset 0 is outside the 8-byte storage"):
        backend.upload(a, 0, np.zeros(4, np.float32))
    with pytest.raises(DeviceError, match=r"the metal backend serves metal:0 only, not metal:1"):
        backend.allocate(8, Device("metal", 1))


def test_a_buffer_metal_refuses_is_out_of_memory(fake_metal):
    rt, backend = fake_metal
    with pytest.raises(OutOfMemoryError, match=r"metal:0 is out of memory: requested 2.00 MiB"):
        backend.allocate(2 << 20, Device("metal", 0))
