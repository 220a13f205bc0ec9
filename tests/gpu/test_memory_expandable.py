"""On a real GPU: the expandable range over the driver's virtual memory calls. It grows chunk by chunk
into memory that holds data; at a refusal (a budget of chunks stands in for a full card) the chunks
under free blocks are unmapped and mapped again where the request needs them while a live block's
bytes stay put; a request larger than the range is refused with its figures; everything goes back."""
from __future__ import annotations

import gc

import nbx.core as nbx
import numpy as np
import pytest
from nbx.core import device_files
from nbx.core.device import Device
from nbx.core.errors import DeviceOOMError
from nbx.devices.nvidia import memory, runtime
from nbx.memory import allocator
from nbx.memory.expandable import ExpandableRange
from nbx.memory.pool import NBX, Pool
from nbx.memory.sources import DriverSource

pytestmark = pytest.mark.gpu

MiB, GiB = 1 << 20, 1 << 30
DEV = Device("cuda", 0)


class Budget:
    """The real driver's physical memory, refused beyond `limit` bytes of chunks held: a full card in small."""

    def __init__(self, physical: memory.CudaPhysicalMemory, limit: int):
        self.physical, self.limit, self.held = physical, limit, 0
        self.granularity = physical.granularity
        self.sizes: dict[int, int] = {}

    def create(self, nbytes):
        if self.held + nbytes > self.limit:
            return None
        handle = self.physical.create(nbytes)
        if handle is not None:
            self.held += nbytes
            self.sizes[handle] = nbytes
        return handle

    def release(self, handle):
        self.physical.release(handle)
        self.held -= self.sizes.pop(handle)

    def __getattr__(self, name):
        return getattr(self.physical, name)


def write(ptr: int, nbytes: int, value: int) -> None:
    runtime.memset(ptr, value, nbytes)


def read(ptr: int, nbytes: int) -> np.ndarray:
    out = np.empty(nbytes, np.uint8)
    runtime.synchronize(0)
    runtime.memcpy(out.ctypes.data, ptr, nbytes, runtime.DEVICE_TO_HOST)
    return out


def range_pool(budget: int, chunk: int, span: int):
    phys = Budget(memory.CudaPhysicalMemory(0), budget)
    rng = ExpandableRange(phys, chunk, range_bytes=span)
    pool = Pool(DriverSource(runtime.malloc, runtime.free, 0, runtime.memory_info), NBX, parked_fraction=1.0,
                events=memory.CudaStreamEvents(0), synchronize=lambda: runtime.synchronize(0), expandable=rng,
                device=DEV)
    return phys, rng, pool


def test_the_range_grows_chunk_by_chunk_into_memory_that_holds_data_and_gives_it_all_back():
    phys, rng, pool = range_pool(1 * GiB, 8 * MiB, 4 * GiB)
    free0 = runtime.memory_info(0)[0]
    a = pool.allocate(40 * MiB)
    b = pool.allocate(100 * MiB)
    assert rng.base <= a.ptr and b.ptr + 100 * MiB <= rng.base + rng.size
    assert pool.stats().range_mapped == phys.held == 144 * MiB  # 5 + 13 chunks of 8 MiB
    write(a.ptr, a.nbytes, 0x11)
    write(b.ptr, b.nbytes, 0x22)
    assert (read(a.ptr, a.nbytes) == 0x11).all() and (read(b.ptr, b.nbytes) == 0x22).all()
    assert free0 - runtime.memory_info(0)[0] >= 140 * MiB  # the driver counts the chunks as used
    del a, b
    gc.collect()
    pool.empty_cache()
    rng.close()
    assert phys.held == 0 and rng.creates == rng.releases


def test_at_a_refusal_free_chunks_are_remapped_where_the_request_needs_them_and_live_bytes_stay():
    phys, rng, pool = range_pool(128 * MiB, 8 * MiB, 1 * GiB)
    a = pool.allocate(48 * MiB)
    b = pool.allocate(48 * MiB)
    write(b.ptr, b.nbytes, 0x5A)
    a.release()
    c = pool.allocate(64 * MiB)  # 32 MiB of budget left: a's six chunks are unmapped and mapped under c
    stats = pool.stats()
    assert stats.refusals == 1 and rng.unmaps >= 6
    assert stats.range_mapped == 48 * MiB + 64 * MiB and phys.held <= 128 * MiB
    assert c.ptr + c.nbytes <= b.ptr or b.ptr + b.nbytes <= c.ptr
    write(c.ptr, c.nbytes, 0xC3)
    assert (read(c.ptr, c.nbytes) == 0xC3).all()
    assert (read(b.ptr, b.nbytes) == 0x5A).all()  # the live block's chunks were never unmapped
    with pytest.raises(DeviceOOMError, match="larger than the whole expandable range") as info:
        pool.allocate(2 * GiB)
    assert info.value.requested == 2 * GiB and info.value.total == runtime.memory_info(0)[1]
    with pytest.raises(DeviceOOMError, match="the driver refused the range's chunks of 8.00 MiB"):
        pool.allocate(96 * MiB)  # more than the budget holds beside b and c
    assert phys.held <= 128 * MiB and pool.stats().range_mapped == 112 * MiB
    del b, c, info
    gc.collect()
    pool.empty_cache()
    rng.close()
    assert phys.held == 0


def test_a_range_four_times_the_cards_memory_can_be_reserved_and_freed():
    total = runtime.memory_info(0)[1]
    phys = memory.CudaPhysicalMemory(0)
    rng = ExpandableRange(phys, phys.granularity, range_bytes=memory.RANGE_PER_MEMORY * total)
    assert rng.size >= 4 * total and rng.base % phys.granularity == 0
    rng.close()


def test_the_backends_pool_has_a_range_exactly_when_the_device_file_states_a_chunk():
    nbx.zeros(1, device="cuda")
    pool = allocator.get_allocator("cuda").pool(DEV)
    facts = device_files.in_force(DEV)
    if "memory.vmm.chunk_bytes" in facts:
        assert pool._range is not None and pool._range.chunk == facts.value("memory.vmm.chunk_bytes")
        t = nbx.ones(64 * MiB, dtype="uint8", device="cuda")
        assert pool._range.base <= t.data_ptr() < pool._range.base + pool._range.size
        assert (t.numpy() == 1).all()
    else:
        assert pool._range is None
        print("\nthe device file states no memory.vmm.chunk_bytes: the pool keeps driver segments")
