"""What a pool draws memory from, and how it learns that a stream has passed a point.

A segment source is the driver seen from the pool: `allocate(nbytes) -> address` or None when the
device refuses, `free(address)`, and `memory_info() -> (free, total)` with None for a figure the
driver cannot give. Stream events are the pool's only view of the device's progress:
`record(stream) -> event`, `query(event) -> bool` (has the stream passed it?), `release(event)`.
The CUDA backend implements both with cudaMalloc/cudaFree/cudaMemGetInfo and
cudaEventRecord/cudaEventQuery/cudaEventDestroy; nbx.memory.fakes implements them on the CPU.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from nbx.core.errors import OutOfMemoryError


@runtime_checkable
class SegmentSource(Protocol):
    def allocate(self, nbytes: int) -> int | None: ...
    def free(self, address: int) -> None: ...
    def memory_info(self) -> tuple[int | None, int | None]: ...


@runtime_checkable
class StreamEvents(Protocol):
    def record(self, stream: Any) -> Any: ...
    def query(self, event: Any) -> bool: ...
    def release(self, event: Any) -> None: ...


class DriverSource:
    """A segment source over a backend's malloc(nbytes, index) / free(ptr, index).

    The backend's malloc raises OutOfMemoryError when the device refuses; the pool wants a None it
    can act on (synchronize, release, retry), so the refusal is turned into one here and the
    device's figures are kept for the pool's own error.
    """

    def __init__(self, malloc: Callable[[int, int], int], free: Callable[[int, int], None], index: int,
                 memory_info: Callable[[int], tuple[int, int]] | None = None):
        self._malloc, self._free, self.index = malloc, free, index
        self._memory_info = memory_info

    def allocate(self, nbytes: int) -> int | None:
        try:
            return self._malloc(nbytes, self.index)
        except OutOfMemoryError:
            return None

    def free(self, address: int) -> None:
        self._free(address, self.index)

    def memory_info(self) -> tuple[int | None, int | None]:
        if self._memory_info is None:
            return None, None
        free, total = self._memory_info(self.index)
        return free, total
