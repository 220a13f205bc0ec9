"""Allocation traces: what a run asked of its allocator, in order, as a TSV file.

Format (version 1): comment lines start with '#'; a comment `# key: value` is a fact about the
trace (its source, device, model). The first other line names the columns, then one row per event:

    event    alloc | free | record | sync
    bytes    the bytes requested (alloc, free), 0 otherwise
    stream   the stream, numbered by first appearance (alloc: the block's stream;
             record: the extra stream named by record_stream; sync: 0)
    block    the block's id, unique among the live blocks (0 for sync)
    time_ns  nanoseconds since the recording began (a synthetic trace says how it counts)

`sync` marks a point where the program waited for the device (every event has completed by then).
A pool records into a TraceRecorder when one is set as its `recorder`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from nbx.core.errors import FileFormatError

COLUMNS = ("event", "bytes", "stream", "block", "time_ns")
EVENTS = ("alloc", "free", "record", "sync")
VERSION_LINE = "# nbx allocation trace v1"


@dataclass(frozen=True)
class TraceEvent:
    event: str
    nbytes: int
    stream: int
    block: int
    time_ns: int


@dataclass
class Trace:
    events: list[TraceEvent]
    meta: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.events)

    @property
    def live_peak(self) -> int:
        """The most bytes requested and not yet freed at any moment of the run."""
        live = peak = 0
        for e in self.events:
            if e.event == "alloc":
                live += e.nbytes
                peak = max(peak, live)
            elif e.event == "free":
                live -= e.nbytes
        return peak


def parse_trace(text: str, source: str = "<text>") -> Trace:
    meta: dict[str, str] = {}
    events: list[TraceEvent] = []
    live: dict[int, int] = {}
    header_seen = False
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if sep and not header_seen:
                meta[key.strip()] = value.strip()
            continue
        cells = line.split("\t")
        if not header_seen:
            if tuple(cells) != COLUMNS:
                raise FileFormatError(f"{source}:{lineno}: the column line must be {' '.join(COLUMNS)!r}, "
                                      f"not {line!r}")
            header_seen = True
            continue
        if len(cells) != len(COLUMNS) or cells[0] not in EVENTS:
            raise FileFormatError(f"{source}:{lineno}: expected 5 tab-separated cells starting with one of "
                                  f"{EVENTS}, got {line!r}")
        try:
            nbytes, stream, block, t = (int(c) for c in cells[1:])
        except ValueError:
            raise FileFormatError(f"{source}:{lineno}: bytes, stream, block and time_ns must be integers: "
                                  f"{line!r}") from None
        kind = cells[0]
        if kind == "alloc":
            if block in live or nbytes < 0:
                raise FileFormatError(f"{source}:{lineno}: block {block} allocated while live, or negative bytes")
            live[block] = nbytes
        elif kind == "free":
            if live.pop(block, None) != nbytes:
                raise FileFormatError(f"{source}:{lineno}: free of block {block} ({nbytes} bytes), "
                                      f"which is not live with that size")
        elif kind == "record" and block not in live:
            raise FileFormatError(f"{source}:{lineno}: record_stream of block {block}, which is not live")
        events.append(TraceEvent(kind, nbytes, stream, block, t))
    if not header_seen:
        raise FileFormatError(f"{source}: no column line ({' '.join(COLUMNS)!r}); is this an nbx trace?")
    return Trace(events, meta)


def read_trace(path) -> Trace:
    path = Path(path)
    return parse_trace(path.read_text(), str(path))


def format_trace(trace: Trace) -> str:
    lines = [VERSION_LINE]
    lines += [f"# {k}: {v}" for k, v in trace.meta.items()]
    lines.append("\t".join(COLUMNS))
    lines += [f"{e.event}\t{e.nbytes}\t{e.stream}\t{e.block}\t{e.time_ns}" for e in trace.events]
    return "\n".join(lines) + "\n"


def write_trace(path, trace: Trace) -> None:
    Path(path).write_text(format_trace(trace))


def shipped_traces() -> list[str]:
    """Names of the traces nbx.memory carries (nbx/memory/traces/*.tsv)."""
    folder = resources.files("nbx.memory") / "traces"
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tsv"))


def shipped_trace(name: str) -> Trace:
    folder = resources.files("nbx.memory") / "traces"
    if name not in shipped_traces():
        raise FileNotFoundError(f"no shipped trace {name!r}; shipped: {shipped_traces()}")
    return parse_trace((folder / name).read_text(), f"nbx.memory/traces/{name}")


class TraceRecorder:
    """Set as a pool's `recorder`: collects its allocations, frees and record_stream calls as a Trace."""

    def __init__(self, **meta: str):
        self.meta = {k: str(v) for k, v in meta.items()}
        self.events: list[TraceEvent] = []
        self._streams: dict = {}
        self._t0 = time.perf_counter_ns()

    def _stream(self, stream) -> int:
        return self._streams.setdefault(stream, len(self._streams))

    def _add(self, kind: str, nbytes: int, stream: int, block: int) -> None:
        self.events.append(TraceEvent(kind, nbytes, stream, block, time.perf_counter_ns() - self._t0))

    def alloc(self, block: int, nbytes: int, stream) -> None:
        self._add("alloc", nbytes, self._stream(stream), block)

    def free(self, block: int, nbytes: int, stream) -> None:
        self._add("free", nbytes, self._stream(stream), block)

    def record_stream(self, block: int, stream) -> None:
        self._add("record", 0, self._stream(stream), block)

    def sync(self) -> None:
        """Call where the program waits for the device (a backend's synchronize)."""
        self._add("sync", 0, 0, 0)

    def trace(self) -> Trace:
        return Trace(list(self.events), dict(self.meta))
