"""The caching pool behind nbx.memory.allocator's interface: one Pool per device, built on first use.

A backend switches from the plain allocator by registering one of these:

    register_allocator("cuda", CachingAllocator("cuda pool", make_pool))

where make_pool(device) builds the device's Pool from its segment source (DriverSource over the
backend's malloc/free), its stream events, its synchronize, the device file's parked fraction and,
when the file states a vmm chunk, an ExpandableRange over the driver's VMM calls.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

from nbx.core.device import Device

from .allocator import AllocatorStats, Block
from .pool import Pool
from .stats import PoolStats


class CachingAllocator:
    def __init__(self, name: str, make_pool: Callable[[Device], Pool]):
        self.name = name
        self._make_pool = make_pool
        self._pools: dict[tuple, Pool] = {}  # by (type, index): a tuple hashes in C, a Device in Python
        self._lock = threading.Lock()

    def pool(self, device: Device) -> Pool:
        key = (device.type, device.index)
        pool = self._pools.get(key)
        if pool is None:
            with self._lock:
                pool = self._pools.get(key)
                if pool is None:
                    pool = self._pools[key] = self._make_pool(device)
        return pool

    def allocate(self, nbytes: int, device: Device, stream=None) -> Block:
        pool = self._pools.get((device.type, device.index))  # pool(device)'s lookup, inline: every allocation
        return (pool or self.pool(device)).allocate(nbytes, stream)

    def serving(self, device: Device) -> Callable[[int, object], Block]:
        """allocate(nbytes, device, stream) for device as f(nbytes, stream), for a backend to keep."""
        return self.pool(device).allocate

    def record_stream(self, block: Block, stream) -> None:
        self.pool(block.device).record_stream(block, stream)

    def stats(self, device: Device) -> AllocatorStats:
        s = self.pool_stats(device)
        return AllocatorStats(live_bytes=s.requested, cached_bytes=s.cached, peak_live_bytes=s.requested_peak,
                              allocations=s.allocations)

    def pool_stats(self, device: Device) -> PoolStats:
        return self.pool(device).stats()

    def reset_peak(self, device: Device) -> None:
        self.pool(device).reset_peak()

    def memory_summary(self, device: Device) -> str:
        return self.pool(device).memory_summary()

    def empty_cache(self, device: Device) -> int:
        return self.pool(device).empty_cache()
