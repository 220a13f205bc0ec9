"""How work reaches a Metal queue: command buffers committed without waiting, within the device file's limits.

A launch encodes into the stream's open command buffer; after
`dispatch.max_dispatches_per_command_buffer` dispatches the buffer is committed, and when more than
`dispatch.max_command_buffers_in_flight` committed buffers are not known complete, the oldest is
waited for. Both limits are read from the device file in force; a file without them is refused by
name (nothing here falls back to a number of its own). Metal runs one queue's buffers in commit
order, so the limits bound latency and the work one failed buffer loses, not correctness.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from .errors import MetalCommandBufferError

STATUS_ERROR = 5  # MTLCommandBufferStatusError


@dataclass(frozen=True)
class DispatchLimits:
    max_command_buffers_in_flight: int
    max_dispatches_per_command_buffer: int

    @classmethod
    def from_facts(cls, facts) -> DispatchLimits:
        return cls(facts.value("dispatch.max_command_buffers_in_flight"),
                   facts.value("dispatch.max_dispatches_per_command_buffer"))


class CommandStream:
    def __init__(self, queue, limits: DispatchLimits):
        self.queue = queue
        self.limits = limits
        self._buffer = None
        self._encoder = None
        self._dispatches = 0
        self._in_flight: deque = deque()
        self._lock = threading.RLock()

    def encoder(self):
        """The compute encoder of the open command buffer (one is opened when none is)."""
        with self._lock:
            if self._buffer is None:
                self._buffer = self.queue.commandBuffer()
                self._encoder = self._buffer.computeCommandEncoder()
            return self._encoder

    def dispatched(self) -> None:
        """Count one dispatch encoded through encoder(); commit the buffer at the device file's limit."""
        with self._lock:
            self._dispatches += 1
            if self._dispatches >= self.limits.max_dispatches_per_command_buffer:
                self.commit()

    def commit(self) -> None:
        """Commit the open command buffer, waiting first for the oldest when too many are in flight."""
        with self._lock:
            if self._buffer is None:
                return
            self._encoder.endEncoding()
            self._buffer.commit()
            self._in_flight.append(self._buffer)
            self._buffer, self._encoder, self._dispatches = None, None, 0
            while len(self._in_flight) > self.limits.max_command_buffers_in_flight:
                _wait(self._in_flight.popleft())

    def synchronize(self) -> None:
        """Commit what is open and wait until every committed buffer has completed."""
        with self._lock:
            self.commit()
            while self._in_flight:
                _wait(self._in_flight.popleft())

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)


def _wait(buffer) -> None:
    buffer.waitUntilCompleted()
    if buffer.status() == STATUS_ERROR:
        raise MetalCommandBufferError(f"a Metal command buffer failed: {buffer.error()}")
