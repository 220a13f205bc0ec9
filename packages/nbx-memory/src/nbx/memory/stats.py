"""A pool's figures at one moment, and the readable summary of them."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PoolStats:
    allocated: int          # bytes of the blocks handed out and not yet freed (rounded sizes)
    requested: int          # bytes asked for by those blocks (before rounding)
    pending: int            # bytes freed but waiting for another stream's event (record_stream)
    reserved: int           # bytes held from the device: driver segments + the range's chunks
    allocated_peak: int
    requested_peak: int
    reserved_peak: int
    small_segments: int
    large_segments: int
    range_mapped: int       # bytes of the expandable range mapped (0 without a range)
    largest_free: int       # the largest free block whose memory the pool holds
    allocations: int
    frees: int
    segment_allocations: int  # driver allocations (segments) and chunk creations
    segment_frees: int
    refusals: int           # times the device refused and the pool ran its recovery
    ooms: int               # DeviceOOMErrors raised

    @property
    def segments(self) -> int:
        return self.small_segments + self.large_segments

    @property
    def cached(self) -> int:
        """Bytes held but not handed out: free blocks and blocks waiting on events."""
        return self.reserved - self.allocated

    @property
    def fragmentation(self) -> float:
        """The share of the free held bytes outside the largest free block (0: all in one block)."""
        free = self.reserved - self.allocated - self.pending
        return 0.0 if free <= 0 else 1.0 - min(self.largest_free, free) / free


def human(nbytes: int | None) -> str:
    if nbytes is None:
        return "unknown"
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} TiB"


def memory_summary(stats: PoolStats, title: str = "pool") -> str:
    rows = [
        ("allocated", stats.allocated, stats.allocated_peak),
        ("requested", stats.requested, stats.requested_peak),
        ("reserved", stats.reserved, stats.reserved_peak),
        ("cached", stats.cached, None),
        ("  waiting on events", stats.pending, None),
        ("  largest free block", stats.largest_free, None),
        ("  range mapped", stats.range_mapped, None),
    ]
    lines = [f"memory summary: {title}", f"{'':22}{'now':>14}{'peak':>14}"]
    for name, now, peak in rows:
        lines.append(f"{name:22}{human(now):>14}{'' if peak is None else human(peak):>14}")
    lines += [
        f"{'segments':22}{stats.segments:>14}   ({stats.small_segments} small, {stats.large_segments} large)",
        f"{'fragmentation':22}{stats.fragmentation:>14.1%}   (free bytes outside the largest free block)",
        f"{'allocations / frees':22}{stats.allocations:>14} / {stats.frees}",
        f"{'driver calls':22}{stats.segment_allocations:>14} allocations / {stats.segment_frees} frees",
        f"{'refusals / OOM errors':22}{stats.refusals:>14} / {stats.ooms}",
    ]
    return "\n".join(lines)
