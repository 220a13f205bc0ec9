"""The pinned host pool and the caching allocator reuse the one pool; a backend's malloc becomes a source."""
import gc

import numpy as np
import pytest

from nbx.core.device import Device
from nbx.core.errors import ArgumentError, DeviceOOMError, OutOfMemoryError
from nbx.memory import allocator as allocators
from nbx.memory.allocator import Allocator, AllocatorStats, register_allocator
from nbx.memory.caching import CachingAllocator
from nbx.memory.fakes import FakeDevice, FakeStreams
from nbx.memory.pinned import HostAlignedAllocator, PinnedPool
from nbx.memory.pool import NBX, Pool
from nbx.memory.sources import DriverSource

KiB, MiB = 1 << 10, 1 << 20


def test_pinned_buffers_are_numpy_views_that_keep_their_block_alive():
    host = HostAlignedAllocator(capacity=64 * MiB)
    pinned = PinnedPool(host, NBX, parked_fraction=1.0)
    block = pinned.allocate(3 * KiB)
    view = pinned.array(block)
    view[:] = np.arange(view.size, dtype=np.uint8)
    ptr = block.ptr
    del block
    gc.collect()
    assert pinned.stats().allocated == 3 * KiB and view.ctypes.data == ptr  # the view holds the block
    assert int(view.sum()) == int(np.arange(3 * KiB, dtype=np.uint8).sum())
    del view
    gc.collect()
    assert pinned.stats().allocated == 0 and host.used == 2 * MiB  # the small segment stays parked
    assert pinned.empty_cache() == 2 * MiB and host.used == 0


def test_pinned_buffers_follow_the_pools_classes_and_stream_order():
    streams = FakeStreams()
    pinned = PinnedPool(HostAlignedAllocator(), NBX, parked_fraction=1.0, events=streams,
                        synchronize=streams.synchronize)
    staging = pinned.allocate(8 * MiB)
    ptr = staging.ptr
    assert ptr % 4096 == 0
    pinned.record_stream(staging, "copy")  # an asynchronous upload reads it
    staging.release()
    other = pinned.allocate(8 * MiB)
    assert other.ptr != ptr  # the copy has not passed: not reused
    streams.complete("copy")
    again = pinned.allocate(8 * MiB)
    assert again.ptr == ptr
    assert "rules 'nbx'" in pinned.memory_summary()


def test_the_host_allocator_refuses_beyond_its_capacity_and_the_pool_says_so():
    pinned = PinnedPool(HostAlignedAllocator(capacity=4 * MiB), NBX, parked_fraction=1.0)
    keep = pinned.allocate(3 * MiB)
    with pytest.raises(DeviceOOMError, match="pinned host is out of memory"):
        pinned.allocate(2 * MiB)
    with pytest.raises(ArgumentError, match="power of two"):
        HostAlignedAllocator(alignment=3000)
    del keep


def make_caching(capacity=None):
    devices = {}

    def make_pool(device):
        fake = devices[device] = FakeDevice(capacity)
        return Pool(fake.segments, NBX, parked_fraction=1.0, device=device)
    return CachingAllocator("fake pool", make_pool), devices


def test_a_backends_default_allocator_is_made_only_when_none_is_registered(monkeypatch):
    monkeypatch.setattr(allocators, "_ALLOCATORS", {})
    made = []

    def make():
        made.append(make_caching()[0])
        return made[-1]
    first = allocators.register_default("fakedefault", make)
    assert made == [first] and allocators.get_allocator("fakedefault") is first
    assert allocators.register_default("fakedefault", make) is first and len(made) == 1
    mine = make_caching()[0]
    register_allocator("fakeuser", mine)  # a user's (or a test's) allocator stays in place
    assert allocators.register_default("fakeuser", make) is mine and len(made) == 1


def test_the_caching_allocator_serves_the_allocator_interface_one_pool_per_device():
    alloc, devices = make_caching()
    assert isinstance(alloc, Allocator)
    register_allocator("fakepool", alloc)
    d0, d1 = Device("fakepool", 0), Device("fakepool", 1)
    a = alloc.allocate(1000, d0)
    b = alloc.allocate(3 * MiB, d1, stream=5)
    assert (a.device, a.nbytes, b.device, b.stream) == (d0, 1000, d1, 5)
    assert set(devices) == {d0, d1}
    assert alloc.stats(d0) == AllocatorStats(live_bytes=1000, cached_bytes=2 * MiB - 1024, peak_live_bytes=1000,
                                             allocations=1)
    a.release()
    assert alloc.stats(d0).live_bytes == 0 and alloc.stats(d0).cached_bytes == 2 * MiB
    assert alloc.empty_cache(d0) == 2 * MiB
    assert "fakepool:1" in alloc.memory_summary(d1)
    del b


def test_a_backend_malloc_that_raises_out_of_memory_becomes_a_refusal_the_pool_recovers_from():
    freed = []
    budget = {"left": 4 * MiB}

    def malloc(nbytes, index):
        if nbytes > budget["left"]:
            raise OutOfMemoryError("cudaMalloc refused", requested=nbytes, free=budget["left"], total=4 * MiB)
        budget["left"] -= nbytes
        return 0x1000_0000 + 0x100_0000 * len(freed) + (4 * MiB - budget["left"])

    def free(ptr, index):
        freed.append(ptr)

    source = DriverSource(malloc, free, 0, memory_info=lambda index: (budget["left"], 4 * MiB))
    pool = Pool(source, NBX, parked_fraction=1.0)
    first = pool.allocate(3 * MiB)
    with pytest.raises(DeviceOOMError) as info:
        pool.allocate(2 * MiB)
    assert (info.value.free, info.value.total, info.value.segment) == (0, 4 * MiB, 2 * MiB)
    assert DriverSource(malloc, free, 0).memory_info() == (None, None)
    del first
