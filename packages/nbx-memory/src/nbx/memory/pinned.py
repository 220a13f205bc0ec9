"""A pool of page-locked host buffers for asynchronous copies: the caching pool over a pinned allocator.

The pool is nbx.memory.pool.Pool itself (same classes, half rule, merging, stream order): a pinned
allocator is a segment source whose addresses are host memory. On CUDA the allocator is
cudaHostAlloc / cudaFreeHost (the NVIDIA backend provides it); on the CPU, HostAlignedAllocator
stands in with page-aligned numpy buffers (ordinary, pageable memory: it exercises the pool's
rules and gives numpy views, not DMA).

A host buffer handed to an asynchronous copy on stream S must be declared with
`record_stream(block, S)`: its memory is reused only after S has passed the copy.
"""
from __future__ import annotations

import os
from typing import Protocol, runtime_checkable

import numpy as np

from nbx.core.errors import ArgumentError

from .allocator import Block
from .pool import Pool
from .rules import PoolRules


@runtime_checkable
class PinnedAllocator(Protocol):
    def allocate(self, nbytes: int) -> int | None: ...
    def free(self, address: int) -> None: ...
    def memory_info(self) -> tuple[int | None, int | None]: ...


class HostAlignedAllocator:
    """The CPU stand-in for cudaHostAlloc: aligned numpy buffers, refused beyond an optional capacity."""

    def __init__(self, alignment: int = 4096, capacity: int | None = None):
        if alignment <= 0 or alignment & (alignment - 1):
            raise ArgumentError(f"host buffer alignment must be a power of two, not {alignment!r}")
        self.alignment, self.capacity = alignment, capacity
        self._buffers: dict[int, np.ndarray] = {}
        self.used = 0

    def allocate(self, nbytes: int) -> int | None:
        if self.capacity is not None and self.used + nbytes > self.capacity:
            return None
        raw = np.empty(nbytes + self.alignment, np.uint8)
        start = -raw.ctypes.data % self.alignment
        buf = raw[start:start + nbytes]
        self._buffers[buf.ctypes.data] = buf
        self.used += nbytes
        return buf.ctypes.data

    def free(self, address: int) -> None:
        buf = self._buffers.pop(address, None)
        if buf is None:
            raise ArgumentError(f"host allocator: free of 0x{address:x}, which it did not allocate")
        self.used -= buf.nbytes

    def memory_info(self) -> tuple[int | None, int | None]:
        if self.capacity is not None:
            return self.capacity - self.used, self.capacity
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return None, None
        return None, total


class PinnedPool:
    """Host buffers from a pinned allocator, cached by the caching pool's rules."""

    def __init__(self, allocator: PinnedAllocator, rules: PoolRules, *, parked_fraction: float,
                 events=None, synchronize=None):
        self.allocator = allocator
        self.pool = Pool(allocator, rules, parked_fraction=parked_fraction, events=events,
                         synchronize=synchronize, device="pinned host")

    def allocate(self, nbytes: int, stream=None) -> Block:
        return self.pool.allocate(nbytes, stream)

    def array(self, block: Block) -> np.ndarray:
        """A uint8 numpy view of the block's bytes; the view keeps the block alive."""
        return np.asarray(_HostView(block))

    def record_stream(self, block: Block, stream) -> None:
        self.pool.record_stream(block, stream)

    def stats(self):
        return self.pool.stats()

    def memory_summary(self) -> str:
        return self.pool.memory_summary()

    def empty_cache(self) -> int:
        return self.pool.empty_cache()


class _HostView:
    """numpy's base for a block's bytes: holding it holds the block."""

    def __init__(self, block: Block):
        self.block = block
        self.__array_interface__ = {"shape": (block.nbytes,), "typestr": "|u1", "version": 3,
                                    "data": (block.ptr if block.nbytes else 0, False)}
