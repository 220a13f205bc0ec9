"""The caching pool: blocks carved from driver segments (or an expandable range), kept for reuse.

Rules (nbx.memory.rules holds them as data; docs/memory.md gives the measurements):
- A request is rounded up to the granularity (512 B). Up to small_limit (1 MiB) it is of the small
  class and is carved from small segments (2 MiB); above, from large segments (the request rounded
  to 2 MiB) or from the expandable range. The classes never share a block: a scalar cannot carve a
  freed multi-gigabyte block and pin its remainder.
- Best fit within the class, and the half rule for large blocks: a free large block serves a
  request only when what is left after the split is at most the request (block <= 2 x request)
  or at most the rules' slack (56 MiB for nbx's).
  A block twice the request or more is left whole; the pool grows instead. Only at a refusal, as
  the last thing before an out-of-memory error, may a large request break the half rule.
- Free neighbours merge within their segment; wholly free segments stay parked across growths and
  go back to the driver at a refusal, at empty_cache(), or when the parked bytes exceed the
  parked fraction of the device (a device-file fact the caller passes; it is required).
- Stream order: a block freed on stream S is reusable on S at once; on another stream only after
  an event recorded on S at the free has completed. A block used on extra streams
  (record_stream) is reusable at all only after an event on each of them has completed.
- At a refusal: synchronize, then look again, release wholly free segments, retry the driver at
  the segment's size (not the request's), and raise DeviceOOMError with requested, live,
  cached, driver-free and total bytes (None where the driver cannot say).

The fast path (the steady state of an inference loop): a request whose rounded size has a cached
free block of exactly that size, usable on its stream at once, takes it with a bisect and two
deletions; a freed block with no free neighbour goes back with one insertion. A block freed next to
free blocks on one stream is not merged with them (nbx.memory.runs): the last such block is held
out of the index, the others joined as runs whose merged block's key the index holds while the
pieces stay apart. When best fit would carve a request from such a merged block and its front piece
is of the request's size, that piece is handed out as it is and the rest keeps the split's key: a
decode chain's same-size outputs, freed in an interleaved order, come and go with no split and no
merge. Anything that reads the blocks themselves (the general path, a second stream, trim, a
snapshot, the stats) makes the merges first. All of these are the blocks and figures the general
best-fit/split/merge path gives (nbx.memory.general, a mixin of the Pool; tests/nbx-memory/
test_pool_fast_path.py runs both side by side); `_fast = False` turns them off for that comparison.
"""
from __future__ import annotations

import threading
from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass
from nbx.core.errors import ArgumentError, DeviceOOMError, MissingFactError

from .allocator import Block as HandedBlock
from .blocks import _SIZE_SHIFT, ANY, FREE, HELD, LIVE, Block, Segment, SizeIndex
from .carving import RangeCarving
from .general import GeneralPath
from .runs import HeldRuns
from .rules import NBX, RULE_SETS, PoolRules  # noqa: F401  (nbx.memory.pool.NBX, .RULE_SETS re-exported)
from .stats import PoolStats, human
from .stats import memory_summary as _summary


class _AddressSet(dict):
    """The expandable range's free blocks (placement there weighs mapping, not size alone)."""

    def add(self, blk: Block) -> None:
        self[blk.ptr] = blk

    def remove(self, blk: Block) -> None:
        del self[blk.ptr]


class Pool(GeneralPath, RangeCarving, HeldRuns):
    """One device's caching pool over a segment source (see nbx.memory.sources)."""

    def __init__(self, source, rules: PoolRules, *, parked_fraction: float, events=None, synchronize=None,
                 expandable=None, device=None):
        if not isinstance(parked_fraction, (int, float)) or not 0 < parked_fraction <= 1:
            raise ArgumentError(f"the parked fraction must lie in (0, 1] (the device file's value); "
                                f"got {parked_fraction!r}")
        self.rules, self.device = rules, device
        self._source, self._events, self._synchronize, self._range = source, events, synchronize, expandable
        self._seg_bytes = self._pending_bytes = 0
        self._limit = None
        if parked_fraction < 1:
            total = source.memory_info()[1]
            if total is None:
                raise MissingFactError("the pool's parked fraction needs the device's total memory, "
                                       "which its segment source cannot give")
            self._limit = int(parked_fraction * total)
        self._small, self._large, self._range_free = SizeIndex(), SizeIndex(), _AddressSet()
        self._segments: dict[int, Segment] = {}
        self._pending: list[Block] = []
        self._streams: set = set()
        self._last_stream = _NO_STREAM  # the stream of the last request: known without hashing it again
        self._multi = False
        self._fast_on = True  # the exact-fit fast paths (off: the general path alone, for comparison)
        self._recorder = None  # nbx.memory.trace.TraceRecorder, or anything with its methods
        # the runs of unmerged free neighbours: each run's first piece -> its last, and last -> first
        self._runs: dict[Block, Block] = {}
        # freed next to free blocks, its joining deferred (not indexed): FREE before a free block, HELD
        # after a free block alone (the merge starting there)
        self._held: Block | None = None
        self._ranks = 0
        # the rules' rounding and class limit as plain ints: read by every request
        self._granularity = rules.granularity
        self._small_limit = rules.small_limit if rules.size_classes else -1
        self._half_rule = rules.half_rule
        self._lock = threading.Lock()
        self._deferred: deque = deque()
        self._serial = 0  # blocks handed out so far: each one's serial, and the stats' allocation count
        self._allocated = self._requested = 0
        self._allocated_peak = self._requested_peak = self._reserved_peak = 0
        self._n_seg_alloc = self._n_seg_free = self._refusals = self._ooms = 0
        self._derive_tests()
        if expandable is not None:
            seg = Segment(expandable.base, expandable.size, small=False, is_range=True)
            seg.head = Block(seg.address, seg.size, seg)
            self._range_seg = seg
            self._range_free.add(seg.head)

    # the tests of the steady state, each one flag or comparison (_derive_tests)
    @property
    def _fast(self) -> bool:
        return self._fast_on

    @_fast.setter
    def _fast(self, on: bool) -> None:
        with self._lock:
            self._merge_held()
        self._fast_on = on
        self._derive_tests()

    @property
    def recorder(self):
        """nbx.memory.trace.TraceRecorder (or anything with its methods) seeing every request, or None."""
        return self._recorder

    @recorder.setter
    def recorder(self, recorder) -> None:
        self._recorder = recorder
        self._derive_tests()

    @property
    def _parked_limit(self) -> int | None:
        """The cached bytes above which a free gives wholly free segments back (None: no limit)."""
        return self._limit

    @_parked_limit.setter
    def _parked_limit(self, limit: int | None) -> None:
        self._limit = limit
        self._derive_tests()

    def _derive_tests(self) -> None:
        """The steady state's tests from what they read, made again whenever that changes: _quick
        (the fast paths on, nothing pending: an allocation may take an exact block), _plain (the fast
        paths on, one stream, no recorder: a free may go back in _release's frame) and _trim_below
        (_trim's test as one comparison: a free trims when the live bytes fall below it, the cached
        bytes then exceeding the limit; with the range, every free trims)."""
        self._quick = self._fast_on and not self._pending
        self._plain = self._fast_on and not self._multi and self._recorder is None
        limit = self._limit
        self._trim_below = (float("-inf") if limit is None else float("inf") if self._range is not None
                            else self._seg_bytes - self._pending_bytes - limit)

    # -- public interface (nbx.memory.allocator's Block) -----------------------------------------
    def allocate(self, nbytes: int, stream=None) -> HandedBlock:
        """A block of at least nbytes on stream; freed when the returned Block is released or collected.

        The steady state of an inference loop is served here and in _hand_out (its figures): best fit's
        block usable on the stream at once, when it is of exactly the request's size (take_exact's
        bisect, inline), a run's merged block whose first piece is, or the held block's merge whose
        front is. Anything else is _malloc's general path, which makes the same choices."""
        if type(nbytes) is not int or nbytes <= 0:
            return self._allocate_checked(nbytes, stream)
        g = self._granularity
        size = -(-nbytes // g) * g   # rules.round, inline
        with self._lock:
            if self._deferred:
                self._drain()
            blk = None
            small = size <= self._small_limit
            if stream is self._last_stream and self._quick and (small or self._range is None):
                index = self._small if small else self._large
                keys, held = index.keys, self._held
                lo = bisect_left(keys, size << _SIZE_SHIFT)
                # a held block of the other size class is left held: its neighbours' keys are in that class's
                # index, and its free left neighbour (a split's rest, a merge) may be of this request's size
                if held is None or held.seg.small is not small:
                    pass
                elif held.state == FREE:
                    # the index holds the key of the held block's free right neighbour's block, not of
                    # their merge: best fit's block is the first other key or the merged block's key
                    nxt = held.next
                    last = self._runs.get(nxt, nxt)
                    merged = last.ptr + last.size - held.ptr
                    if lo < len(keys) and index.blocks[keys[lo]] is nxt:
                        lo += 1
                    if lo == len(keys) or keys[lo] > (merged << _SIZE_SHIFT) + held.seg.order + held.ptr:
                        self._held = None
                        if (held.size == size and held.free_on is stream and not nxt.events
                                and (small or not self._half_rule or merged <= self.rules.half_limit(size))):
                            # carved from the merge's front: the held block itself, the neighbour's block
                            # the split's rest with the merged block's stream (_absorb: the held block's)
                            nxt.free_on = stream
                            blk = held
                        else:  # its joining first: the index then holds every free block's key
                            self._join(held)
                            lo = bisect_left(keys, size << _SIZE_SHIFT)
                else:
                    # held after a free block alone (prv) and maybe before a free one (nxt): the index holds
                    # their keys, not their merge's; its front is prv
                    blocks, prv, nxt = index.blocks, held.prev, held.next
                    if nxt is not None and nxt.state == FREE:
                        last = self._runs.get(nxt, nxt)
                        end = last.ptr + last.size
                    else:
                        nxt, end = None, held.ptr + held.size
                    while lo < len(keys) and (blocks[keys[lo]] is prv or blocks[keys[lo]] is nxt):
                        lo += 1
                    start, order = prv.ptr, prv.seg.order
                    if lo == len(keys) or keys[lo] > ((end - start) << _SIZE_SHIFT) + order + start:
                        self._held = None
                        if (prv.size == size and held.free_on is stream and not prv.events
                                and (nxt is None or not nxt.events)
                                and (small or not self._half_rule or end - start <= self.rules.half_limit(size))):
                            # carved from the merge's front: prv itself; the rest (held onwards) keeps the
                            # merged block's stream, the held block's (_absorb)
                            key = (size << _SIZE_SHIFT) + order + start
                            del blocks[key]
                            del keys[bisect_left(keys, key)]
                            blk = prv
                            held.state = FREE   # no longer after a free block
                            if nxt is None:  # nothing free beside it now: index.add, a plain free block
                                key = (held.size << _SIZE_SHIFT) + order + held.ptr
                                insort(keys, key)
                                blocks[key] = held
                            else:  # before its free neighbour: held so
                                self._held = held
                        else:
                            self._join(held)
                            lo = bisect_left(keys, size << _SIZE_SHIFT)
                if blk is None:
                    if lo < len(keys):  # best fit's block (the first one of at least size), when usable at once
                        key = keys[lo]
                        found = index.blocks[key]
                        if found.size == size and not found.events and (found.free_on is ANY or found.free_on is stream):
                            if key >> _SIZE_SHIFT == size:  # take_exact
                                del index.blocks[keys.pop(lo)]
                                blk = found
                            elif small or not self._half_rule or key >> _SIZE_SHIFT <= self.rules.half_limit(size):
                                # a run's first piece, of the request's size: best fit would split the merged
                                # block there. The rest of the run takes the split's key; its next piece heads it.
                                del index.blocks[keys.pop(lo)]
                                runs, rest = self._runs, found.next
                                last = runs.pop(found)
                                rest.state, rest.free_on = FREE, found.free_on
                                if rest is last:
                                    del runs[last]
                                else:
                                    runs[rest], runs[last] = last, rest
                                key += size - (size << _SIZE_SHIFT)  # rest's: size less, address size more
                                insort(keys, key)
                                index.blocks[key] = rest
                                blk = found
            if blk is None:
                blk = self._malloc(nbytes, stream)
            else:  # _hand_out's figures, inline (a frame less on every steady-state request)
                serial = self._serial = self._serial + 1
                blk.state, blk.requested, blk.stream, blk.serial = LIVE, nbytes, stream, serial
                allocated = self._allocated = self._allocated + size
                requested = self._requested = self._requested + nbytes
                if allocated > self._allocated_peak:
                    self._allocated_peak = allocated
                if requested > self._requested_peak:
                    self._requested_peak = requested
                if self._recorder is not None:
                    self._recorder.alloc(serial, nbytes, stream)
        handed = _new(_Handed)  # _Handed(blk.ptr, nbytes, self.device, stream, self, blk), with no __init__ frame
        handed.ptr, handed.nbytes, handed.device, handed.stream, handed._pool, handed._release = (
            blk.ptr, nbytes, self.device, stream, self, [blk])
        return handed

    def _allocate_checked(self, nbytes, stream) -> HandedBlock:
        if not isinstance(nbytes, int) or nbytes < 0:
            raise ArgumentError(f"cannot allocate {nbytes!r} bytes: a byte count is a non-negative int")
        if nbytes == 0:  # no memory and nothing to free: a null pointer, as CUDA gives for size 0
            return HandedBlock(0, 0, self.device, stream, _nothing)
        with self._lock:  # an int subclass (a bool): the general path
            if self._deferred:
                self._drain()
            blk = self._malloc(nbytes, stream)
        return _Handed(blk.ptr, nbytes, self.device, stream, self, blk)

    def record_stream(self, block: HandedBlock, stream) -> None:
        """Declare that stream uses block: its memory is reused only after that stream passes the free."""
        with self._lock:
            self._drain()
            try:  # a live block of this pool holds its pool block until released (then its list is empty)
                blk = block._release[0] if type(block) is _Handed and block._pool is self else None
            except IndexError:  # released: the one liveness test (block.alive reads the same list)
                blk = None
            if blk is None:
                raise ArgumentError(f"record_stream: {block!r} is not a live block of this pool")
            self._record_stream(blk, stream)

    def stats(self) -> PoolStats:
        with self._lock:
            self._drain()
            return PoolStats(
                self._allocated, self._requested, self._pending_bytes, self.reserved, self._allocated_peak,
                self._requested_peak, self._reserved_peak,
                sum(s.small for s in self._segments.values()), sum(not s.small for s in self._segments.values()),
                self._range.mapped_chunks * self._range.chunk if self._range else 0, self._largest_free(),
                self._serial, self._serial - self._live_blocks(), self._n_seg_alloc + (self._range.creates if self._range else 0),
                self._n_seg_free + (self._range.releases if self._range else 0), self._refusals, self._ooms)

    def reset_peak(self) -> None:
        with self._lock:
            self._allocated_peak, self._requested_peak = self._allocated, self._requested
            self._reserved_peak = self.reserved

    def memory_summary(self) -> str:
        return _summary(self.stats(), f"{self.device or 'device'}, rules {self.rules.name!r}")

    def empty_cache(self) -> int:
        """Synchronize, then give every wholly free segment and free chunk back; returns the bytes released."""
        with self._lock:
            self._drain()
            self._settle()
            return self._release_cached()

    def snapshot(self) -> list[SegmentView]:
        """Every segment (and the range) with its blocks in address order: for tests and for reading."""
        with self._lock:
            self._drain()
            self._merge_held()
            return [SegmentView(seg.address, seg.size, "range" if seg.is_range else "small" if seg.small else "large",
                                tuple(_walk(seg))) for seg in self._all_segments()]

    @property
    def reserved(self) -> int:
        return self._seg_bytes + (self._range.held_bytes if self._range else 0)

    # -- freeing ---------------------------------------------------------------------------------
    def _release(self, blk: Block) -> None:
        """A handed-out Block was released or collected. The collector may run inside the pool's own
        work (or on another thread): then the free waits in a queue the pool drains before its next step.

        The steady state's free is served here in this one frame: one stream, no record_stream, not in
        the range. On one stream every free block is free on that stream (or fresh) with no events, so
        free neighbours always merge: the block goes back to its index alone, or joins its free
        neighbours' runs, the index taking the merged block's key (_make_free's merges, deferred).
        Anything else is _free's general path."""
        if not self._lock.acquire(False):  # not blocking (positional: a keyword costs the call more)
            self._deferred.append(blk)
            return
        try:
            seg = blk.seg
            if self._plain and blk.state == LIVE and blk.used_on is None and not seg.is_range:
                size = blk.size
                allocated = self._allocated = self._allocated - size
                self._requested -= blk.requested
                blk.free_on = blk.stream
                if self._held is not None:  # the last free's joining, first
                    self._join(self._held)
                    self._held = None
                prv, nxt = blk.prev, blk.next
                if prv is None or prv.state == LIVE:
                    blk.state = FREE
                    if nxt is None or nxt.state != FREE:  # no free neighbour: index.add, inline
                        index = self._small if seg.small else self._large
                        key = (size << _SIZE_SHIFT) + seg.order + blk.ptr
                        insort(index.keys, key)
                        index.blocks[key] = blk
                    else:  # before a free block: held, the next request may be of its size
                        self._held = blk
                elif prv.state == FREE:  # after a free block alone: held, the next request may be of prv's size
                    blk.state = HELD
                    self._held = blk
                else:  # after a run's last piece
                    self._join(blk)
                if allocated < self._trim_below:  # _trim's test: a free under the limit trims nothing
                    self._trim()
            else:
                self._free(blk)
            if self._deferred:
                self._drain()
        finally:
            self._lock.release()

    # -- helpers ---------------------------------------------------------------------------------
    def _index_of(self, blk: Block):
        seg = blk.seg
        if seg.is_range:
            return self._range_free
        return self._small if seg.small else self._large

    def _all_segments(self):
        yield from self._segments.values()
        if self._range is not None:
            yield self._range_seg

    def _free_blocks(self):
        self._merge_held()
        yield from self._small.blocks.values()
        yield from self._large.blocks.values()
        yield from self._range_free.values()

    @staticmethod
    def _link_after(blk: Block, new: Block) -> None:
        new.prev, new.next = blk, blk.next
        if blk.next is not None:
            blk.next.prev = new
        blk.next = new

    @staticmethod
    def _absorb(a: Block, b: Block) -> None:
        """a takes b, its free right neighbour (the lower block survives, so a segment's head never moves)."""
        a.size += b.size
        a.next = b.next
        if b.next is not None:
            b.next.prev = a
        if a.free_on is ANY:
            a.free_on = b.free_on
        a.events = a.events + b.events

    def _drop_events(self, events: list) -> None:
        for e in events:
            self._events.release(e)

    def _live_blocks(self) -> int:
        """How many handed-out blocks are live (the frees so far are the hand-outs less these: a free
        counts nothing of its own)."""
        live = 0
        for seg in self._all_segments():
            blk = seg.head
            while blk is not None:
                live += blk.state == LIVE
                blk = blk.next
        return live

    def _largest_free(self) -> int:
        self._merge_held()
        largest = max(self._small.largest(), self._large.largest())
        if self._range is not None:
            for blk in self._range_free.values():
                largest = max(largest, self._range.mapped_inside(blk.ptr, blk.end))
        return largest

    def _oom(self, nbytes: int, size: int, segment: int | None, why: str) -> DeviceOOMError:
        self._ooms += 1
        source = self._range.physical if self._range is not None else self._source
        free, total = source.memory_info()
        live, cached = self._allocated, self.reserved - self._allocated
        return DeviceOOMError(
            f"{self.device or 'the device'} is out of memory: requested {human(nbytes)} ({nbytes} bytes, "
            f"{size} rounded) and {why}; after synchronizing and releasing its free segments the pool holds "
            f"{human(live)} live and {human(cached)} cached; the device has {human(free)} free of {human(total)}",
            requested=nbytes, live=live, cached=cached, free=free, total=total, device=self.device, segment=segment)


@dataclass(frozen=True)
class SegmentView:
    address: int
    size: int
    kind: str      # small | large | range
    blocks: tuple  # (ptr, size, state) with state free | live | pending, in address order


def _walk(seg: Segment):
    blk = seg.head
    while blk is not None:
        yield blk.ptr, blk.size, ("free", "live", "pending")[blk.state]
        blk = blk.next


def _nothing() -> None:
    return None


class _Handed(HandedBlock):
    """A block the pool handed out: its release is the pool's own, with no closure made per block."""

    __slots__ = ("_pool",)

    def __init__(self, ptr: int, nbytes: int, device, stream, pool: Pool, blk: Block):
        self.ptr, self.nbytes, self.device, self.stream, self._pool = ptr, nbytes, device, stream, pool
        self._release = [blk]  # list.pop is atomic: two threads releasing at once free it once

    def release(self) -> None:
        try:
            blk = self._release.pop()
        except IndexError:
            return
        self._pool._release(blk)

    def __del__(self) -> None:  # HandedBlock's, with release inline: every tensor's storage pays it
        if not self._exiting:
            try:
                blk = self._release.pop()
            except IndexError:  # released already
                return
            self._pool._release(blk)


_NO_STREAM = object()  # no request seen yet (None is a stream: the default one)
_new = object.__new__


def simulate(trace, rules: PoolRules, **options):
    """Replay an allocation trace through the pool's own rules on a fake device (see nbx.memory.replay)."""
    from .replay import simulate as _simulate
    return _simulate(trace, rules, **options)
