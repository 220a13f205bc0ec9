"""The slab planner: offsets in one slab for a run whose allocations and frees are known in advance.

A run is a sequence of events, in order: ("alloc", id, size, alignment) and ("free", id). A block
never freed lives to the end. Three figures describe it:

- live_peak: the most bytes live at once: no plan can do with less.
- first_fit_extent: the highest offset a first-fit slab reaches when it serves the events as they
  come (lowest aligned gap that holds each block): between the live peak and the sum of the blocks.
- greedy_by_size(...).extent: the plan that knows every lifetime: blocks placed largest first,
  each in the smallest gap left by the already-placed blocks whose lifetimes overlap its own (the
  method of TFLite's and ONNX Runtime's memory planners), reported against the live peak.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

import numpy as np

from nbx.core.errors import ArgumentError

_TOP = 1 << 62  # the slab above its highest block is one gap up to here


@dataclass(frozen=True)
class Lifetime:
    id: object
    size: int
    alignment: int
    start: int  # index of the alloc event
    end: int    # index of the free event (len(events) when never freed)


@dataclass(frozen=True)
class SlabPlan:
    offsets: dict          # id -> byte offset in the slab
    extent: int            # the slab's size under this plan
    live_peak: int
    first_fit_extent: int

    @property
    def ratio(self) -> float:
        """extent / live peak (1.0: the plan needs no byte more than the run's peak)."""
        return self.extent / self.live_peak if self.live_peak else 1.0


def lifetimes(events) -> list[Lifetime]:
    open_: dict = {}
    done: list[Lifetime] = []
    n = 0
    for n, ev in enumerate(events):
        if ev[0] == "alloc":
            _, ident, size, alignment = ev
            if ident in open_ or size < 0 or alignment <= 0 or alignment & (alignment - 1):
                raise ArgumentError(f"slab event {n}: {ev!r} (id already live, negative size, or an alignment "
                                    f"that is not a power of two)")
            open_[ident] = (size, alignment, n)
        elif ev[0] == "free":
            if ev[1] not in open_:
                raise ArgumentError(f"slab event {n}: free of {ev[1]!r}, which is not live")
            size, alignment, start = open_.pop(ev[1])
            done.append(Lifetime(ev[1], size, alignment, start, n))
        else:
            raise ArgumentError(f"slab event {n}: {ev!r} is neither ('alloc', id, size, alignment) nor ('free', id)")
    end = n + 1
    done += [Lifetime(i, s, a, st, end) for i, (s, a, st) in open_.items()]
    return sorted(done, key=lambda t: t.start)


def live_peak(events) -> int:
    live = peak = 0
    sizes: dict = {}
    for ev in events:
        if ev[0] == "alloc":
            sizes[ev[1]] = ev[2]
            live += ev[2]
            peak = max(peak, live)
        else:
            live -= sizes.pop(ev[1])
    return peak


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


def first_fit_extent(events) -> int:
    """Serve the events in order from one slab, each block at the lowest aligned gap that holds it."""
    starts = [0]                  # gap starts, sorted
    gap_end = {0: _TOP}           # gap start -> end
    gap_at_end = {_TOP: 0}        # gap end -> start
    placed: dict = {}
    extent = 0
    for ev in events:
        if ev[0] == "alloc":
            _, ident, size, alignment = ev
            for s in starts:
                e = gap_end[s]
                off = _align(s, alignment)
                if off + size <= e:
                    break
            _remove_gap(starts, gap_end, gap_at_end, s)
            if off > s:
                _add_gap(starts, gap_end, gap_at_end, s, off)
            if off + size < e:
                _add_gap(starts, gap_end, gap_at_end, off + size, e)
            placed[ident] = (off, size)
            extent = max(extent, off + size)
        else:
            off, size = placed.pop(ev[1])
            s, e = off, off + size
            if s in gap_at_end:           # merge with the gap below
                below = gap_at_end[s]
                _remove_gap(starts, gap_end, gap_at_end, below)
                s = below
            if e in gap_end:              # and with the gap above
                above_end = gap_end[e]
                _remove_gap(starts, gap_end, gap_at_end, e)
                e = above_end
            _add_gap(starts, gap_end, gap_at_end, s, e)
    return extent


def _add_gap(starts, gap_end, gap_at_end, s, e):
    if e > s:
        insort(starts, s)
        gap_end[s] = e
        gap_at_end[e] = s


def _remove_gap(starts, gap_end, gap_at_end, s):
    del starts[bisect_left(starts, s)]
    del gap_at_end[gap_end.pop(s)]


def greedy_by_size(events) -> SlabPlan:
    """Largest block first, each in the smallest gap among the placed blocks whose lifetimes overlap it."""
    events = list(events)
    spans = sorted(lifetimes(events), key=lambda t: (-t.size, t.start))
    n = len(spans)
    p_start, p_end = np.empty(n, np.int64), np.empty(n, np.int64)
    p_off, p_top = np.empty(n, np.int64), np.empty(n, np.int64)
    offsets: dict = {}
    extent = 0
    for k, t in enumerate(spans):
        hits = np.flatnonzero((p_start[:k] < t.end) & (p_end[:k] > t.start))
        best = 0
        if hits.size:
            order = hits[np.argsort(p_off[hits], kind="stable")]
            offs, tops = p_off[order], p_top[order]
            below = np.empty_like(tops)  # the highest top among the blocks under each one
            below[0] = 0
            np.maximum.accumulate(tops[:-1], out=below[1:])
            a = t.alignment
            at = -(-below // a) * a
            gaps = offs - at
            fits = np.flatnonzero(gaps >= t.size)
            if fits.size:
                best = int(at[fits[np.argmin(gaps[fits])]])
            else:
                best = _align(int(max(below[-1], tops[-1])), a)
        p_start[k], p_end[k], p_off[k], p_top[k] = t.start, t.end, best, best + t.size
        offsets[t.id] = best
        extent = max(extent, best + t.size)
    return SlabPlan(offsets, extent, live_peak(events), first_fit_extent(events))


def events_from_trace(trace, alignment: int = 256, skip_whole_run: bool = False) -> list[tuple]:
    """A trace's allocations and frees as slab events (one stream's order; record/sync rows dropped).

    skip_whole_run leaves out the blocks never freed (weights): what a per-step slab would plan.
    """
    rows = [e for e in trace.events if e.event in ("alloc", "free")]
    if skip_whole_run:
        freed = {e.block for e in rows if e.event == "free"}
        rows = [e for e in rows if e.block in freed]
    ids: dict[int, int] = {}
    out = []
    for n, e in enumerate(rows):
        if e.event == "alloc":
            ids[e.block] = n  # block ids may be reused by a trace; the alloc's row makes them unique
            out.append(("alloc", n, e.nbytes, alignment))
        else:
            out.append(("free", ids.pop(e.block)))
    return out
