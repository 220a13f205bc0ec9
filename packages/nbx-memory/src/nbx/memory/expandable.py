"""The expandable range: one reserved address range per device, physical chunks mapped as it grows.

Written against an abstract physical memory, so a fake implements it on the CPU and the CUDA
driver API (cuMemAddressReserve, cuMemCreate, cuMemMap + cuMemSetAccess, cuMemUnmap, cuMemRelease,
cuMemAddressFree) implements it on the GPU:

    granularity                       the driver's allocation granularity (bytes)
    reserve(nbytes) -> address        reserve a range of address space (no memory behind it)
    free_range(address, nbytes)
    create(nbytes) -> handle | None   a physical chunk; None when the device refuses
    map(address, nbytes, handle)      map a chunk at address and make it accessible
    unmap(address, nbytes)
    release(handle)
    memory_info() -> (free, total)    None where the driver cannot say

The range knows which chunk slots are mapped; the pool (nbx.memory.pool) keeps the blocks carved
in the range and tells it which address spans are free. At a refusal the pool asks for every
chunk lying wholly inside a free block to be unmapped; those chunks are kept as spares and mapped
again where the request needs them (creating a chunk costs far more than mapping one), and the
spares left over are released.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from nbx.core.errors import ArgumentError


@runtime_checkable
class PhysicalMemory(Protocol):
    granularity: int

    def reserve(self, nbytes: int) -> int: ...
    def free_range(self, address: int, nbytes: int) -> None: ...
    def create(self, nbytes: int) -> Any | None: ...
    def map(self, address: int, nbytes: int, handle: Any) -> None: ...
    def unmap(self, address: int, nbytes: int) -> None: ...
    def release(self, handle: Any) -> None: ...
    def memory_info(self) -> tuple[int | None, int | None]: ...


class ExpandableRange:
    """range_bytes of address space (rounded up to whole chunks) with chunk_bytes chunks mapped on demand.

    chunk_bytes is a measured fact of the device (its file's vmm chunk); the caller reads it and
    builds no range when the file does not state it.
    """

    def __init__(self, physical: PhysicalMemory, chunk_bytes: int, range_bytes: int):
        granularity = physical.granularity
        if not isinstance(chunk_bytes, int) or chunk_bytes <= 0 or chunk_bytes % granularity:
            raise ArgumentError(
                f"the expandable range's chunk must be a positive multiple of the driver's granularity "
                f"({granularity} bytes); got {chunk_bytes!r}")
        if range_bytes <= 0:
            raise ArgumentError(f"the expandable range must hold some bytes; got {range_bytes}")
        self.physical = physical
        self.chunk = chunk_bytes
        self.slots = -(-range_bytes // chunk_bytes)
        self.size = self.slots * chunk_bytes
        self.base = physical.reserve(self.size)
        self._mapped = bytearray(self.slots)   # 1 where a chunk is mapped
        self._handles: dict[int, Any] = {}     # slot -> handle
        self._spares: list[Any] = []           # unmapped chunks kept for the request being served
        self.mapped_chunks = 0
        self.maps = self.creates = self.unmaps = self.releases = 0

    # -- figures ---------------------------------------------------------------------------------
    @property
    def held_bytes(self) -> int:
        """Physical memory the range holds: mapped chunks and spares."""
        return (self.mapped_chunks + len(self._spares)) * self.chunk

    def _span(self, start: int, end: int) -> tuple[int, int]:
        """Slots touched by [start, end)."""
        return (start - self.base) // self.chunk, -(-(end - self.base) // self.chunk)

    def _inside(self, start: int, end: int) -> tuple[int, int]:
        """Slots lying wholly inside [start, end)."""
        return -(-(start - self.base) // self.chunk), (end - self.base) // self.chunk

    def unmapped_in(self, start: int, end: int) -> int:
        """Chunks [start, end) still needs mapped."""
        c0, c1 = self._span(start, end)
        return self._mapped.count(0, c0, c1)

    def mapped_inside(self, start: int, end: int) -> int:
        """Bytes of mapped chunks lying wholly inside [start, end)."""
        c0, c1 = self._inside(start, end)
        return self._mapped.count(1, c0, c1) * self.chunk if c1 > c0 else 0

    # -- growth and reclaim ----------------------------------------------------------------------
    def map(self, start: int, end: int) -> bool:
        """Map every chunk [start, end) touches, spares first; False when the device refuses a chunk."""
        c0, c1 = self._span(start, end)
        slot = self._mapped.find(0, c0, c1)
        while slot >= 0:
            if self._spares:
                handle = self._spares.pop()
            else:
                handle = self.physical.create(self.chunk)
                if handle is None:
                    return False
                self.creates += 1
            self.physical.map(self.base + slot * self.chunk, self.chunk, handle)
            self._handles[slot] = handle
            self._mapped[slot] = 1
            self.mapped_chunks += 1
            self.maps += 1
            slot = self._mapped.find(0, slot + 1, c1)
        return True

    def unmap_inside(self, spans, keep: bool) -> int:
        """Unmap the chunks lying wholly inside the free spans; keep them as spares or release them.

        Returns the bytes unmapped. The caller guarantees no stream still uses these spans.
        """
        count = 0
        for start, end in spans:
            c0, c1 = self._inside(start, end)
            slot = self._mapped.find(1, c0, c1) if c1 > c0 else -1
            while slot >= 0:
                self.physical.unmap(self.base + slot * self.chunk, self.chunk)
                handle = self._handles.pop(slot)
                self._mapped[slot] = 0
                self.mapped_chunks -= 1
                self.unmaps += 1
                count += 1
                if keep:
                    self._spares.append(handle)
                else:
                    self._release(handle)
                slot = self._mapped.find(1, slot + 1, c1)
        return count * self.chunk

    def release_spares(self) -> int:
        """Give back the spares a reclaim kept and the request did not need; returns their bytes."""
        released = len(self._spares) * self.chunk
        while self._spares:
            self._release(self._spares.pop())
        return released

    def _release(self, handle) -> None:
        self.physical.release(handle)
        self.releases += 1

    def close(self) -> None:
        """Unmap and release everything and give the address range back (the pool must hold no block)."""
        self.unmap_inside([(self.base, self.base + self.size)], keep=False)
        self.release_spares()
        self.physical.free_range(self.base, self.size)
