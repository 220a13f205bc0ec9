"""Large uploads from pageable host memory through two pinned staging buffers.

A cudaMemcpy from pageable memory (a numpy array, a memory-mapped checkpoint) is staged by the
driver itself through its own small pinned buffers, one host thread copying. A checkpoint's load
is such copies back to back (a Llama-3-8B's 16 GB: 7.9 s of a warm first `generate`, issue 16). An
upload of at least the device file's `memory.staged_upload_from_bytes` (a measured fact: the size
from which staging beats the driver's copy; where the file states none, every upload is the
driver's) goes through two pinned buffers of CHUNK_BYTES instead: the host's cores copy chunk i + 1 into one buffer (nbx.core.host's pool; numpy releases the GIL) while
the copy engine moves chunk i out of the other. A buffer is refilled only after the event recorded
behind its last device copy has completed, and the upload returns when the stream has drained, as
the driver's own pageable copy does: the caller may change or free its source then.

`Pipeline` holds the order of that work with the device calls passed in, so the schedule is
tested without a GPU (tests/nbx-devices/test_nvidia_staging.py); `Stager` binds it to CUDA.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
from nbx.core import host

FACT = "memory.staged_upload_from_bytes"
CHUNK_BYTES = 32 << 20        # two such buffers pinned for the process's life, 64 MiB in all
BUFFERS = 2


def chunks(nbytes: int, chunk: int = CHUNK_BYTES) -> list[tuple[int, int, int]]:
    """(offset, length, buffer) for each chunk of an upload of nbytes, the buffers taken in turn."""
    return [(offset, min(chunk, nbytes - offset), i % BUFFERS) for i, offset in enumerate(range(0, nbytes, chunk))]


def host_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[:] = src (flat uint8, one length), spread over the host's cores in parts of at least
    host.MIN_CHUNK_BYTES."""
    parts = host.row_chunks(src.size, 1)
    if len(parts) == 1:
        np.copyto(dst, src)
        return
    list(host.pool().map(lambda part: np.copyto(dst[part], src[part]), parts))


class Pipeline:
    """The staged upload's schedule over injected device calls:

    to_device(dst_offset, buffer, length)  copies buffer[:length] to the destination, stream-ordered
    record(buffer)                          records buffer's event behind that copy
    wait(buffer)                            blocks the host until buffer's event has completed
    drain()                                 blocks the host until every copy has completed
    """

    def __init__(self, buffers: list[np.ndarray], to_device: Callable, record: Callable, wait: Callable,
                 drain: Callable, copy: Callable = host_copy):
        self.buffers, self.to_device, self.record, self.wait, self.drain, self.copy = (
            buffers, to_device, record, wait, drain, copy)

    def run(self, src: np.ndarray) -> None:
        chunk = self.buffers[0].size
        in_flight = [False] * len(self.buffers)
        try:
            for offset, length, b in chunks(src.size, chunk):
                if in_flight[b]:
                    self.wait(b)     # its previous chunk may still be read by the copy engine
                self.copy(self.buffers[b][:length], src[offset:offset + length])
                self.to_device(offset, b, length)
                self.record(b)
                in_flight[b] = True
        finally:
            self.drain()         # nothing is left reading a buffer, even after a failed call


class Stager:
    """The process's staging buffers (pinned lazily, on the first large upload) and their events per
    device; one upload at a time holds them."""

    def __init__(self):
        self._lock = threading.Lock()
        self._buffers: list[np.ndarray] | None = None
        self._events: dict[int, list] = {}

    def upload(self, dst: int, index: int, src: np.ndarray, stream) -> None:
        """src (flat uint8, pageable) to the device address dst of cuda:index, on stream; returns
        when the copies have landed. The caller holds cuda:index current."""
        from . import runtime
        from .streams import Event
        with self._lock:
            if self._buffers is None:
                self._buffers = [runtime.pinned_empty(CHUNK_BYTES) for _ in range(BUFFERS)]
            buffers = self._buffers
            events = self._events.get(index)
            if events is None:
                events = self._events[index] = [Event(index, timing=False) for _ in range(BUFFERS)]

            def to_device(offset: int, b: int, length: int) -> None:
                runtime.memcpy_async(dst + offset, buffers[b].ctypes.data, length, runtime.HOST_TO_DEVICE,
                                     stream.handle)

            Pipeline(buffers, to_device, lambda b: events[b].record(stream), lambda b: events[b].synchronize(),
                     stream.synchronize).run(src)


STAGER = Stager()
FROM_BYTES: dict[int, int | None] = {}   # device index -> the fact (None: not stated), read once


def staged_from(index: int) -> int | None:
    """The upload size from which cuda:index's uploads are staged, or None (the driver's copy always)."""
    if index not in FROM_BYTES:
        from nbx.core import device_files
        from nbx.core.device import Device
        facts = device_files.in_force(Device("cuda", index))
        FROM_BYTES[index] = facts.value(FACT) if FACT in facts else None
    return FROM_BYTES[index]
