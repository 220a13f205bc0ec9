"""The allocator interface every GPU backend allocates through, and a plain device allocator.

A backend asks `get_allocator(device_type).allocate(nbytes, device, stream)` for a Block and keeps
the Block as its Storage's owner: the memory goes back when the last tensor viewing it is gone
(or at `block.release()`). The plain allocator calls the backend's malloc and free for every
block; the caching pool (a later part of nbx.memory) replaces it behind the same interface.

A backend's malloc raises nbx.core.errors.OutOfMemoryError when the device cannot serve the
request; the allocator raises it again carrying its own figures (live and cached bytes).
"""
from __future__ import annotations

import atexit
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from nbx.core.device import Device
from nbx.core.errors import DeviceError, OutOfMemoryError


class Block:
    """nbytes of device memory at ptr on device; returned to its allocator once released or collected.

    The release runs from __del__ rather than a weakref.finalize: it is the same moment (the last
    reference gone, or the cycle collected) at a fraction of the host time per block, which every
    tensor pays. As with finalize(atexit=False), nothing is released once the process is exiting
    (the driver takes the memory back), and a release runs once however many threads ask for it.
    """

    __slots__ = ("ptr", "nbytes", "device", "stream", "_release", "__weakref__")
    _exiting = False  # set at interpreter exit (see _at_exit)

    def __init__(self, ptr: int, nbytes: int, device: Device, stream, release: Callable[[], None]):
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device
        self.stream = stream
        self._release = [release]  # list.pop is atomic: two threads releasing at once free it once

    def data_ptr(self) -> int:
        return self.ptr

    @property
    def alive(self) -> bool:
        return bool(self._release)

    def release(self) -> None:
        """Give the memory back now; the block must not be used afterwards."""
        try:
            release = self._release.pop()
        except IndexError:
            return
        release()

    def __del__(self) -> None:
        if self._release and not self._exiting:
            self.release()

    def __repr__(self) -> str:
        state = "live" if self.alive else "released"
        return f"Block({self.device}, {self.nbytes} bytes at 0x{self.ptr:x}, {state})"


def _at_exit() -> None:
    Block._exiting = True


atexit.register(_at_exit)


@dataclass(frozen=True)
class AllocatorStats:
    live_bytes: int      # in blocks handed out and not yet released
    cached_bytes: int    # held by the allocator for reuse, not handed out
    peak_live_bytes: int
    allocations: int     # blocks handed out so far


@runtime_checkable
class Allocator(Protocol):
    def allocate(self, nbytes: int, device: Device, stream=None) -> Block: ...
    def stats(self, device: Device) -> AllocatorStats: ...


class PlainDeviceAllocator:
    """One backend malloc per block and one free per release; caches nothing.

    malloc(nbytes, device_index) -> ptr, free(ptr, device_index); free_memory(device_index) ->
    (free, total) is asked only to explain an out-of-memory error.
    """

    def __init__(self, name: str, malloc: Callable[[int, int], int], free: Callable[[int, int], None]):
        self.name = name
        self._malloc = malloc
        self._free = free
        self._lock = threading.Lock()
        self._live: dict[Device, int] = defaultdict(int)
        self._peak: dict[Device, int] = defaultdict(int)
        self._count: dict[Device, int] = defaultdict(int)

    def allocate(self, nbytes: int, device: Device, stream=None) -> Block:
        if nbytes < 0:
            raise DeviceError(f"cannot allocate a negative byte count ({nbytes})")
        if nbytes == 0:  # no memory, nothing to free; a null pointer as CUDA gives for size 0
            return Block(0, 0, device, stream, _nothing)
        try:
            ptr = self._malloc(nbytes, device.index)
        except OutOfMemoryError as exc:
            raise self._out_of_memory(nbytes, device, exc) from None
        with self._lock:
            self._live[device] += nbytes
            self._count[device] += 1
            self._peak[device] = max(self._peak[device], self._live[device])
        return Block(ptr, nbytes, device, stream, _Release(self, ptr, nbytes, device))

    def _give_back(self, ptr: int, nbytes: int, device: Device) -> None:
        with self._lock:
            self._live[device] -= nbytes
        self._free(ptr, device.index)

    def stats(self, device: Device) -> AllocatorStats:
        with self._lock:
            return AllocatorStats(self._live[device], 0, self._peak[device], self._count[device])

    def _out_of_memory(self, nbytes: int, device: Device, exc: OutOfMemoryError) -> OutOfMemoryError:
        live = self.stats(device).live_bytes
        free = "unknown" if exc.free is None else _human(exc.free)
        total = "unknown" if exc.total is None else _human(exc.total)
        return OutOfMemoryError(
            f"{device} is out of memory: requested {_human(nbytes)} ({nbytes} bytes); device free {free} "
            f"of {total}; allocator {self.name!r} holds {_human(live)} live and 0 bytes cached",
            requested=nbytes, live=live, cached=0, free=exc.free, total=exc.total, device=device)


class _Release:
    """The finalizer's callable: holds the allocator, not the block, so the block can be collected."""

    __slots__ = ("allocator", "ptr", "nbytes", "device")

    def __init__(self, allocator: PlainDeviceAllocator, ptr: int, nbytes: int, device: Device):
        self.allocator, self.ptr, self.nbytes, self.device = allocator, ptr, nbytes, device

    def __call__(self) -> None:
        self.allocator._give_back(self.ptr, self.nbytes, self.device)


def _nothing() -> None:
    return None


def _human(nbytes: int) -> str:
    value = float(nbytes)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{nbytes} bytes"


_ALLOCATORS: dict[str, Allocator] = {}


def register_allocator(device_type: str, allocator: Allocator) -> None:
    """Make allocator serve every allocation on devices of device_type (the last one registered wins)."""
    if not isinstance(allocator, Allocator):
        raise DeviceError(f"{allocator!r} does not implement the Allocator interface (allocate, stats)")
    _ALLOCATORS[device_type] = allocator


def register_default(device_type: str, make) -> Allocator:
    """The allocator serving device_type: one registered already (a user's, a test's) stays;
    else make() is registered. A backend calls it when it starts."""
    found = _ALLOCATORS.get(device_type)
    if found is None:
        found = make()
        register_allocator(device_type, found)
    return found


def get_allocator(device_type: str) -> Allocator:
    try:
        return _ALLOCATORS[device_type]
    except KeyError:
        raise DeviceError(
            f"no allocator is registered for device type {device_type!r} "
            f"(registered: {sorted(_ALLOCATORS)}); its backend registers one when it starts") from None
