"""Replaying a trace through the pool's own rules on a fake device (public as nbx.memory.pool.simulate).

The replay runs the very Pool the device runs, over nbx.memory.fakes: the same rounding, classes,
half rule, merging, stream order and recovery. Events complete where the trace says the program
synchronized (`sync` rows) and at the pool's own synchronization at a refusal; a replay is
therefore never more optimistic about cross-stream reuse than the run was.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nbx.core.errors import DeviceOOMError, FileFormatError

from .expandable import ExpandableRange
from .fakes import FakeDevice, FakeStreams
from .pool import Pool
from .rules import PoolRules
from .stats import PoolStats
from .trace import Trace, read_trace, shipped_trace, shipped_traces


@dataclass(frozen=True)
class SimulationReport:
    rules: str
    vmm_chunk: int | None
    events: int               # rows replayed (all of them when completed)
    completed: bool
    error: DeviceOOMError | None
    live_peak: int            # the most bytes requested and live at once
    allocated_peak: int       # the same in the pool's rounded block sizes
    reserved_peak: int        # the most bytes the pool held from the device at once
    stats: PoolStats          # the pool's figures at the end (or at the refusal)

    @property
    def overhead(self) -> float:
        """Reserved at peak over live at peak (1.0: the pool held nothing beyond what was live)."""
        return self.reserved_peak / self.live_peak if self.live_peak else 1.0

    def line(self) -> str:
        from .stats import human
        rules = self.rules + (f" + range/{human(self.vmm_chunk)}" if self.vmm_chunk else "")
        state = "completed" if self.completed else f"refused at row {self.events}"
        return (f"{rules:34} reserved at peak {human(self.reserved_peak):>11}  live at peak "
                f"{human(self.live_peak):>11}  ratio {self.overhead:6.4f}  driver calls "
                f"{self.stats.segment_allocations:>6}  refusals {self.stats.refusals:>3}  {state}")


def _as_trace(trace) -> Trace:
    if isinstance(trace, Trace):
        return trace
    if isinstance(trace, str) and trace in shipped_traces():
        return shipped_trace(trace)
    if isinstance(trace, (str, Path)):
        return read_trace(trace)
    raise FileFormatError(f"simulate needs a Trace, a path to a trace or a shipped trace's name, not {trace!r}")


def simulate(trace, rules: PoolRules, *, capacity: int | None = None, vmm_chunk: int | None = None,
             range_bytes: int | None = None, parked_fraction: float = 1.0) -> SimulationReport:
    """Replay trace under rules; reserved at peak against live at peak.

    capacity: the fake device's bytes (None: unlimited; a refusal then never happens).
    vmm_chunk: large blocks grow in an expandable range of these chunks (None: driver segments).
    range_bytes: the range's size (default: the capacity, else every byte the trace allocates).
    parked_fraction: the share of the capacity the pool may keep parked (1.0: no trimming).
    """
    trace = _as_trace(trace)
    device = FakeDevice(capacity)
    streams = FakeStreams()
    expandable = None
    if vmm_chunk is not None:
        if range_bytes is None:
            range_bytes = capacity or sum(e.nbytes for e in trace.events if e.event == "alloc")
        expandable = ExpandableRange(device.physical, vmm_chunk, range_bytes)
    pool = Pool(device.segments, rules, parked_fraction=parked_fraction, events=streams,
                synchronize=streams.synchronize, expandable=expandable)
    blocks = {}
    error = None
    done = 0
    malloc, free, record = pool._malloc, pool._free, pool._record_stream
    try:
        for e in trace.events:
            kind = e.event
            if kind == "alloc":
                blocks[e.block] = malloc(e.nbytes, e.stream)
            elif kind == "free":
                free(blocks.pop(e.block))
            elif kind == "record":
                record(blocks[e.block], e.stream)
            else:
                streams.complete_all()
            done += 1
    except DeviceOOMError as exc:
        error = exc
    stats = pool.stats()
    return SimulationReport(rules.name, vmm_chunk, done, error is None, error, trace.live_peak if error is None
                            else _live_peak(trace, done), stats.allocated_peak, stats.reserved_peak, stats)


def _live_peak(trace: Trace, upto: int) -> int:
    return Trace(trace.events[:upto]).live_peak
