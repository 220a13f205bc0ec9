"""The staged upload's schedule (nbx.devices.nvidia.staging.Pipeline) over a fake copy engine that
reads a staging buffer only when the host waits for it, as a DMA engine may: a buffer refilled
before its event completed would land the wrong bytes."""
from __future__ import annotations

import numpy as np
import pytest

from nbx.devices.nvidia import staging


class LazyCopyEngine:
    """Queued copies run in order, and only when the host waits on an event behind them or drains."""

    def __init__(self, buffers, nbytes):
        self.buffers, self.device = buffers, np.zeros(nbytes, np.uint8)
        self.queue, self.events, self.log = [], {}, []

    def to_device(self, offset, b, length):
        self.queue.append((offset, b, length))
        self.log.append(("copy", b))

    def record(self, b):
        self.events[b] = len(self.queue)   # done once the queue has run this far

    def _run_until(self, count):
        while self.queue and count > 0:
            offset, b, length = self.queue.pop(0)
            self.device[offset:offset + length] = self.buffers[b][:length]
            count -= 1
            for e in self.events:
                self.events[e] -= 1

    def wait(self, b):
        self.log.append(("wait", b))
        self._run_until(self.events[b])

    def drain(self):
        self.log.append(("drain",))
        self._run_until(len(self.queue))


def staged(nbytes, chunk):
    src = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    buffers = [np.zeros(chunk, np.uint8) for _ in range(staging.BUFFERS)]
    engine = LazyCopyEngine(buffers, nbytes)
    staging.Pipeline(buffers, engine.to_device, engine.record, engine.wait, engine.drain).run(src)
    return src, engine


@pytest.mark.parametrize("nbytes", [1, 999, 1000, 1001, 4000, 4321])
def test_every_byte_lands_with_a_copy_engine_that_reads_late(nbytes):
    src, engine = staged(nbytes, chunk=1000)
    np.testing.assert_array_equal(engine.device, src)
    assert engine.log[-1] == ("drain",) and not engine.queue


def test_a_buffer_is_refilled_only_after_its_last_copy_was_waited_for():
    _, engine = staged(5000, chunk=1000)
    copies = [entry for entry in engine.log if entry[0] == "copy"]
    assert [b for _, b in copies] == [0, 1, 0, 1, 0]
    waits = [entry for entry in engine.log if entry[0] == "wait"]
    assert [b for _, b in waits] == [0, 1, 0]   # before chunks 2, 3 and 4


def test_the_copies_are_drained_when_a_host_copy_fails():
    buffers = [np.zeros(8, np.uint8) for _ in range(staging.BUFFERS)]
    engine = LazyCopyEngine(buffers, 32)
    calls = []

    def failing_copy(dst, src):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("the mapped file went away")
        dst[:] = src

    with pytest.raises(OSError):
        staging.Pipeline(buffers, engine.to_device, engine.record, engine.wait, engine.drain,
                         copy=failing_copy).run(np.ones(32, np.uint8))
    assert engine.log[-1] == ("drain",) and not engine.queue


def test_chunks_take_the_buffers_in_turn_and_cover_the_upload():
    assert staging.chunks(10, 4) == [(0, 4, 0), (4, 4, 1), (8, 2, 0)]
    assert staging.chunks(0, 4) == []


def test_the_host_copy_spreads_large_copies_and_copies_every_byte():
    src = np.random.default_rng(0).integers(0, 256, (9 << 20) + 7, dtype=np.uint8)
    dst = np.zeros_like(src)
    staging.host_copy(dst, src)
    np.testing.assert_array_equal(dst, src)
