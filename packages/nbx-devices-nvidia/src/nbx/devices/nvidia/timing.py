"""Timing device work with CUDA events, torch-free (triton.testing.do_bench imports torch).

`bench` keeps do_bench's call shape (warmup and rep in milliseconds, quantiles, return_mode) so
that it can serve as Triton's benchmarker: the autotuner calls driver.get_benchmarker()(fn, ...).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from nbx.core.errors import NotSupportedError, TimingRefusal

from . import flush, runtime, spin
from .streams import Event, current_stream

L2_FLUSH_BYTES = 256 << 20  # read between timed runs so that no run finds its inputs in L2


def bench(fn, warmup: float = 25, rep: float = 100, grad_to_none=None, quantiles=None,
          return_mode: str = "mean", flush_l2: bool = True):
    """Milliseconds per call of fn on the current device and stream, timed by events around each call."""
    if grad_to_none is not None:
        raise NotSupportedError("bench(grad_to_none=...) is for autograd frameworks; nbx has no gradients")
    if return_mode not in ("min", "max", "mean", "median", "all"):
        raise NotSupportedError(f"bench return_mode {return_mode!r}: use min, max, mean, median or all")
    index = runtime.get_device()
    stream = current_stream(index)
    flusher = flush.L2Flush(index, L2_FLUSH_BYTES) if flush_l2 else None
    fn()
    stream.synchronize()
    start, end = Event(index), Event(index)
    start.record(stream)
    for _ in range(5):
        if flusher:
            flusher()
        fn()
    end.record(stream)
    end.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-4)
    for _ in range(max(1, int(warmup / estimate))):
        fn()
    n = max(1, int(rep / estimate))
    pairs = [(Event(index), Event(index)) for _ in range(n)]
    for begin, finish in pairs:
        if flusher:
            flusher()
        begin.record(stream)
        fn()
        finish.record(stream)
    stream.synchronize()
    times = np.array([b.elapsed_time(f) for b, f in pairs], dtype=np.float64)
    if quantiles is not None:
        values = [float(v) for v in np.quantile(times, list(quantiles))]
        return values[0] if len(values) == 1 else values
    if return_mode == "all":
        return times.tolist()
    return float(getattr(np, return_mode)(times))


WITNESS_BYTES = 256 << 20  # the witness copies this many bytes: HBM-bound, far above any L2


class EventTimer:
    """The timer nbx.autotune sweeps with (its Timer protocol): CUDA events on the device's current
    stream, an L2 flush that reads twice the L2 the device reports (flush.py says why a read), a
    hold (a spin kernel that timed runs queue behind, so events see GPU time alone) and a witness
    (a fixed copy)."""

    def __init__(self, device):
        from nbx.core import tensor

        from . import properties, streams

        self._runtime, self._streams = runtime, streams
        self.index = device.index if device.index is not None else runtime.get_device()
        props = properties.properties(self.index)
        if not props.l2_cache_bytes:
            raise TimingRefusal(f"cuda:{self.index} ({props.name}) reports no L2 size; the flush between runs "
                                f"reads twice the L2 and cannot be sized")
        self._props = props
        where = f"cuda:{self.index}"
        self.flush_l2 = flush.L2Flush(self.index, 2 * props.l2_cache_bytes)
        self.flush_bytes, self.flush_method = self.flush_l2.nbytes, flush.METHOD
        self._src = tensor.empty((WITNESS_BYTES,), "uint8", where)
        self._dst = tensor.empty((WITNESS_BYTES,), "uint8", where)
        self.description = f"CUDA events on {where} ({props.name}), L2 flush: a read of {self.flush_bytes} bytes"

    def _stream(self):
        return self._streams.current_stream(self.index)

    def event(self):
        return self._streams.Event(self.index)

    def record(self, event) -> None:
        event.record(self._stream())

    def elapsed_ms(self, start, end) -> float:
        return start.elapsed_time(end)

    def synchronize(self) -> None:
        self._stream().synchronize()

    def hold(self, ms: float) -> None:
        spin.hold(ms, self.index)

    def witness(self) -> SimpleNamespace:  # .name and .run(), as nbx.autotune.timing.Witness
        def copy():
            with self._runtime.device_guard(self.index):
                self._runtime.memcpy_async(self._dst.data_ptr(), self._src.data_ptr(), WITNESS_BYTES,
                                           self._runtime.DEVICE_TO_DEVICE, self._stream().handle)
        return SimpleNamespace(name=f"device-to-device copy of {WITNESS_BYTES >> 20} MiB", run=copy)

    def clocks(self) -> dict | None:
        p = self._props
        return {"sm_clock_max_khz": p.clock_khz, "memory_clock_max_khz": p.memory_clock_khz}
