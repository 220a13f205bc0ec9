"""nbx.memory's caching pool on CUDA: the adapters its interfaces ask for, and the pool of each device.

- CudaStreamEvents: the pool's view of a stream's progress (timing-free events, recycled).
- CudaPhysicalMemory: the expandable range's physical memory (the driver's virtual memory calls).
- CudaPinnedAllocator: page-locked host memory (cudaHostAlloc) for nbx.memory.pinned.PinnedPool.
- make_pool(device): the pool the backend registers, built from the device file's facts: the parked
  fraction (memory.pool_parked_fraction, required) and, only where the file states one, the
  expandable range's chunk (memory.vmm.chunk_bytes); without it the pool keeps driver segments.
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from ctypes import byref, c_void_p

from nbx.core.device import Device

from . import driver_api, runtime
from .streams import Event, Stream

RANGE_PER_MEMORY = 4  # address space reserved per byte of device memory (docs/memory.md says why)


class CudaStreamEvents:
    """record(stream) -> a timing-free event recorded on it; query; release (kept for reuse)."""

    def __init__(self, index: int, keep: int = 256):
        self.index = index
        self.keep = keep
        self._spare: list[Event] = []
        self._lock = threading.Lock()
        self.created = 0

    def record(self, stream) -> Event:
        if stream is None:
            stream = Stream.default(self.index)
        with self._lock:
            event = self._spare.pop() if self._spare else None
        if event is None:
            event = Event(self.index, timing=False)
            self.created += 1
        return event.record(stream)

    def query(self, event: Event) -> bool:
        return event.query()

    def release(self, event: Event) -> None:
        with self._lock:
            if len(self._spare) < self.keep:
                self._spare.append(event)  # re-recording an event is legal; creating one costs a driver call


class CudaPhysicalMemory:
    """The PhysicalMemory of nbx.memory.expandable on device index (cuMemAddressReserve ... cuMemRelease)."""

    def __init__(self, index: int):
        self.index = runtime.check_ordinal(index)
        with self._current():
            self.granularity = driver_api.allocation_granularity(index)

    @contextmanager
    def _current(self):
        """The device's primary context current on this thread: driver calls need one."""
        with runtime.device_guard(self.index):
            runtime.bind_context(self.index)
            yield

    def reserve(self, nbytes: int) -> int:
        with self._current():
            return driver_api.address_reserve(nbytes, self.granularity)

    def free_range(self, address: int, nbytes: int) -> None:
        with self._current():
            driver_api.address_free(address, nbytes)

    def create(self, nbytes: int) -> int | None:
        with self._current():
            return driver_api.mem_create(nbytes, self.index)

    def map(self, address: int, nbytes: int, handle: int) -> None:
        with self._current():
            driver_api.mem_map(address, nbytes, handle, self.index)

    def unmap(self, address: int, nbytes: int) -> None:
        with self._current():
            driver_api.mem_unmap(address, nbytes)

    def release(self, handle: int) -> None:
        with self._current():
            driver_api.mem_release(handle)

    def memory_info(self) -> tuple[int, int]:
        return runtime.memory_info(self.index)


class CudaPinnedAllocator:
    """Page-locked host memory (cudaHostAlloc, portable) as a segment source of nbx.memory.pinned."""

    def allocate(self, nbytes: int) -> int | None:
        ptr = c_void_p()
        code = runtime.rt().lib.cudaHostAlloc(byref(ptr), nbytes, runtime.HOST_ALLOC_PORTABLE)
        if code == runtime.ERROR_MEMORY_ALLOCATION:
            runtime.rt().lib.cudaGetLastError()
            return None
        if code != runtime.SUCCESS:
            raise runtime.rt().error("cudaHostAlloc", code, context=f"{nbytes} bytes")
        return ptr.value or 0

    def free(self, address: int) -> None:
        code = runtime.rt().lib.cudaFreeHost(address)
        if code not in (runtime.SUCCESS, runtime.ERROR_CUDART_UNLOADING):
            raise runtime.rt().error("cudaFreeHost", code, context=f"0x{address:x}")

    def memory_info(self) -> tuple[int | None, int | None]:
        """(None, the host's physical memory): how much of it may still be pinned, nobody can say."""
        try:
            return None, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return None, None


def make_pool(device: Device):
    """The caching pool of one cuda device, as its device file says (the backend registers this)."""
    from nbx.core import device_files
    from nbx.memory.expandable import ExpandableRange
    from nbx.memory.pool import NBX, Pool
    from nbx.memory.sources import DriverSource

    index = runtime.check_ordinal(device.index)
    facts = device_files.in_force(device)
    parked = facts.value("memory.pool_parked_fraction")
    source = DriverSource(runtime.malloc, runtime.free, index, runtime.memory_info)
    expandable = None
    if "memory.vmm.chunk_bytes" in facts:
        total = runtime.memory_info(index)[1]
        expandable = ExpandableRange(CudaPhysicalMemory(index), facts.value("memory.vmm.chunk_bytes"),
                                     range_bytes=RANGE_PER_MEMORY * total)
    return Pool(source, NBX, parked_fraction=parked, events=CudaStreamEvents(index),
                synchronize=lambda: runtime.synchronize(index), expandable=expandable, device=device)


def make_allocator():
    """The CachingAllocator the cuda backend registers: one pool per device, built at its first allocation."""
    from nbx.memory.caching import CachingAllocator
    return CachingAllocator("cuda pool", make_pool)
