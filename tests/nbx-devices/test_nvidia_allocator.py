"""The allocator interface and the plain device allocator the cuda backend uses until the caching
pool exists: every block freed once, live bytes counted, out-of-memory enriched with the figures."""
from __future__ import annotations

import gc

import pytest
from nbx.core.device import Device
from nbx.core.errors import DeviceError, OutOfMemoryError
from nbx.memory import allocator as alloc

DEV = Device("cuda", 0)


class FakeMemory:
    def __init__(self, capacity: int):
        self.capacity, self.next, self.live, self.freed = capacity, 0x1000, {}, []

    def malloc(self, nbytes: int, index: int) -> int:
        if nbytes > self.capacity - sum(self.live.values()):
            raise OutOfMemoryError("fake device full", requested=nbytes, free=self.capacity - sum(self.live.values()),
                                   total=self.capacity)
        ptr, self.next = self.next, self.next + nbytes
        self.live[ptr] = nbytes
        return ptr

    def free(self, ptr: int, index: int) -> None:
        self.freed.append(ptr)
        del self.live[ptr]


def test_a_block_is_freed_once_when_released_and_not_again_when_collected():
    mem = FakeMemory(1000)
    a = alloc.PlainDeviceAllocator("test", mem.malloc, mem.free)
    block = a.allocate(100, DEV)
    assert a.stats(DEV).live_bytes == 100 and block.alive
    block.release()
    del block
    gc.collect()
    assert mem.freed == [0x1000] and a.stats(DEV).live_bytes == 0


def test_a_block_is_freed_when_the_last_reference_goes():
    mem = FakeMemory(1000)
    a = alloc.PlainDeviceAllocator("test", mem.malloc, mem.free)
    block = a.allocate(10, DEV)
    ptr = block.ptr
    del block
    gc.collect()
    assert mem.freed == [ptr]
    assert a.stats(DEV) == alloc.AllocatorStats(live_bytes=0, cached_bytes=0, peak_live_bytes=10, allocations=1)


def test_zero_bytes_need_no_memory_and_negative_bytes_are_refused():
    mem = FakeMemory(10)
    a = alloc.PlainDeviceAllocator("test", mem.malloc, mem.free)
    assert a.allocate(0, DEV).ptr == 0 and mem.live == {}
    with pytest.raises(DeviceError, match="negative byte count"):
        a.allocate(-1, DEV)


def test_out_of_memory_carries_requested_live_cached_free_and_total_bytes():
    mem = FakeMemory(3 << 20)
    a = alloc.PlainDeviceAllocator("test", mem.malloc, mem.free)
    keep = a.allocate(2 << 20, DEV)
    expected = (r"cuda:0 is out of memory: requested 2.00 MiB \(2097152 bytes\); "
                r"device free 1.00 MiB of 3.00 MiB; allocator 'test' holds 2.00 MiB live")
    with pytest.raises(OutOfMemoryError, match=expected) as info:
        a.allocate(2 << 20, DEV)
    err = info.value
    assert (err.requested, err.live, err.cached, err.free, err.total) == (2 << 20, 2 << 20, 0, 1 << 20, 3 << 20)
    del keep


def test_an_unregistered_device_type_has_no_allocator_by_name():
    with pytest.raises(DeviceError, match="no allocator is registered for device type 'nowhere'"):
        alloc.get_allocator("nowhere")
    with pytest.raises(DeviceError, match="does not implement the Allocator interface"):
        alloc.register_allocator("nowhere", object())
