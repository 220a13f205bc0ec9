"""Timing candidates: warm-up, L2 flushed before each run, the median of repeats, under a witness.

A Timer is what a backend offers: events recorded on its current stream, the milliseconds between
two of them, a synchronize, an L2 flush (the nvidia timer reads a buffer twice the L2 the device
reports; `flush_method` names how, and the proofs record it), a
hold (a kernel that keeps the stream busy for a given time) and a witness - a fixed reference kernel.

The timed runs are queued behind a hold long enough for the host to queue all of them, so the
events around a run see the GPU's time alone: a launch's host path (tens of microseconds) is longer
than many kernels, and events around a run queued on an idle GPU would time the host and rank
candidates partly on it. The witness is timed before and after a key's candidates; if
its time moved by more than `autotune.witness_drift_tolerance` of the device file, the GPU's regime
changed during the comparison (clocks, heat, another process) and the sweep is measured again, then
refused by name (WitnessDriftError). Timers come from the backends (nbx.devices.nvidia's EventTimer).
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from nbx.core.errors import MissingFactError, TimingRefusal, WitnessDriftError

WARMUP = 3      # runs before timing: the first run compiles; caches and clocks settle on the next
REPEATS = 21    # timed runs per candidate; the median is kept (robust to a stray slow run)
HOLD_MARGIN = 2.0   # the hold lasts this many times the host's queueing time, measured just before
HOLD_EXTRA_MS = 1.0
HOLD_MAX_MS = 2000.0


@dataclass(frozen=True)
class Witness:
    """A fixed reference kernel: what a timer's witness() returns (any object with these two)."""
    name: str
    run: Callable[[], None]


class Timer(Protocol):
    description: str
    flush_bytes: int
    flush_method: str

    def event(self): ...
    def record(self, event) -> None: ...
    def elapsed_ms(self, start, end) -> float: ...
    def synchronize(self) -> None: ...
    def flush_l2(self) -> None: ...
    def hold(self, ms: float) -> None: ...
    def witness(self) -> Witness: ...
    def clocks(self) -> dict | None: ...


@dataclass(frozen=True)
class Measurement:
    median_ms: float
    samples: tuple[float, ...]
    held_ms: float = 0.0        # how long the runs were queued behind a hold
    host_bound: bool = False    # queueing outlasted the hold: samples may include host time


def _queue_ms(fn: Callable[[], None], timer: Timer) -> float:
    """Host milliseconds to queue one flushed run (the GPU idle, so nothing waits on it)."""
    timer.synchronize()
    worst = 0.0
    for _ in range(2):
        t0 = time.perf_counter()
        timer.flush_l2()
        start, end = timer.event(), timer.event()
        timer.record(start)
        fn()
        timer.record(end)
        worst = max(worst, (time.perf_counter() - t0) * 1e3)
    timer.synchronize()
    return worst


def measure(fn: Callable[[], None], timer: Timer, warmup: int = WARMUP, repeats: int = REPEATS) -> Measurement:
    """fn's time: `warmup` untimed runs, then `repeats` runs each after an L2 flush, all queued
    behind a hold; the median. A queue that outlasted its hold is measured again behind a longer one."""
    if repeats < 1 or warmup < 0:
        raise TimingRefusal(f"a measurement needs repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    for _ in range(warmup):
        fn()
    queue_ms = _queue_ms(fn, timer)
    for _ in range(2):
        hold_ms = min(HOLD_MAX_MS, HOLD_MARGIN * repeats * queue_ms + HOLD_EXTRA_MS)
        pairs = [(timer.event(), timer.event()) for _ in range(repeats)]
        timer.hold(hold_ms)
        t0 = time.perf_counter()
        for start, end in pairs:
            timer.flush_l2()
            timer.record(start)
            fn()
            timer.record(end)
        queued_ms = (time.perf_counter() - t0) * 1e3
        timer.synchronize()
        host_bound = queued_ms > hold_ms
        if not host_bound or hold_ms >= HOLD_MAX_MS:
            break
        queue_ms = queued_ms / repeats
    samples = tuple(float(timer.elapsed_ms(a, b)) for a, b in pairs)
    return Measurement(statistics.median(samples), samples, hold_ms, host_bound)


@dataclass(frozen=True)
class Comparison:
    """Each candidate's median under a witness that held; `ranked` fastest first."""

    times: tuple[tuple[dict, Measurement], ...]
    witness_name: str
    before_ms: float
    after_ms: float
    drift: float
    tolerance: float
    attempts: int
    warmup: int
    repeats: int
    flush_bytes: int
    flush_method: str
    refused_attempts: tuple[tuple[float, float], ...] = field(default=())

    @property
    def ranked(self) -> list[tuple[dict, Measurement]]:
        order = sorted(range(len(self.times)), key=lambda i: (self.times[i][1].median_ms, i))
        return [self.times[i] for i in order]


def drift_tolerance(facts) -> float:
    try:
        return float(facts.value("autotune.witness_drift_tolerance"))
    except MissingFactError as exc:
        raise TimingRefusal(f"a sweep needs autotune.witness_drift_tolerance to judge its witness, which "
                            f"{getattr(facts, 'name', 'the device file')} does not state: {exc}") from exc


def compare(settings: list[Mapping], launch: Callable[[Mapping], None], timer: Timer, tolerance: float,
            warmup: int = WARMUP, repeats: int = REPEATS, retries: int = 1) -> Comparison:
    """Time each setting between two witness measurements; a drift above tolerance retries, then refuses."""
    witness = timer.witness()
    refused = []
    for attempt in range(1, retries + 2):
        before = measure(witness.run, timer, warmup, repeats).median_ms
        times = tuple((dict(s), measure(lambda s=s: launch(s), timer, warmup, repeats)) for s in settings)
        after = measure(witness.run, timer, warmup, repeats).median_ms
        if before <= 0:
            raise TimingRefusal(f"the witness {witness.name!r} measured {before} ms; a timer that cannot time "
                                f"it cannot time candidates")
        drift = abs(after - before) / before
        comparison = Comparison(times, witness.name, before, after, drift, tolerance, attempt, warmup, repeats,
                                timer.flush_bytes, timer.flush_method, tuple(refused))
        if drift <= tolerance:
            return comparison
        refused.append((before, after))
    attempts = ", ".join(f"{b:.4g} -> {a:.4g} ms" for b, a in refused)
    error = WitnessDriftError(
        f"the witness {witness.name!r} drifted above autotune.witness_drift_tolerance {tolerance:.3g} in each of "
        f"{len(refused)} attempt(s) ({attempts}): the device's regime changed while candidates were compared "
        f"(clocks, temperature, another process); the sweep is refused",
        before_ms=before, after_ms=after, drift=drift, tolerance=tolerance)
    error.last = comparison  # the last attempt's times: a run may use them for itself, never keep them
    raise error


def timer_for(device) -> Timer:
    """The timer a device's backend offers (`backend.timer(device)`: CUDA events on 'cuda');
    a backend without one is refused by name."""
    from nbx.core.device import get_backend
    make = getattr(get_backend(device.type), "timer", None) if device is not None else None
    if make is None:
        raise TimingRefusal(f"no timer for device {device}: sweeping a key needs one (CUDA events on 'cuda'); "
                            f"serve certified settings, or certify on a device nbx can time")
    return make(device)
