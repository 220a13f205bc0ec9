"""The pool's general path (a mixin of nbx.memory.pool.Pool): what its fast paths do not serve.

Allocation by best fit within the size class with the half rule for large blocks, splitting the
block chosen; frees that merge free neighbours (unless they wait on different streams) and stamp an
event where another stream may reuse the block; record_stream's pending blocks; growing by a driver
segment; the recovery at a refusal (synchronize, look again, release wholly free segments, retry at
the segment's size, then the out-of-memory error); giving wholly free segments back. The fast paths in
nbx.memory.pool make the same choices with fewer steps (tests/nbx-memory/test_pool_fast_path.py runs
both side by side; `Pool._fast = False` leaves this path alone).
"""
from __future__ import annotations

from nbx.core.errors import ArgumentError

from .blocks import ANY, FREE, LIVE, PENDING, Block, Segment, SizeIndex, compatible
from .stats import human


class GeneralPath:
    # -- allocation ------------------------------------------------------------------------------
    def _malloc(self, nbytes: int, stream) -> Block:
        if self._pending:
            self._process_pending()
        if stream is not self._last_stream:
            if stream not in self._streams:
                self._new_stream(stream)
            self._last_stream = stream
        g = self._granularity
        size = -(-nbytes // g) * g or g   # rules.round and rules.is_small, inline: every request asks
        small = size <= self._small_limit
        if not small and self._range is not None:
            blk, at_end = self._from_range(size, stream, nbytes)
            return self._take(blk, size, stream, nbytes, at_end)
        index = self._small if small else self._large
        self._merge_held()  # best fit reads the blocks themselves
        if self._fast_on:
            blk = index.take_exact(size, stream)
            if blk is not None:
                return self._hand_out(blk, size, stream, nbytes)
        rules = self.rules
        half = rules.half_rule and not small
        blk = self._find(size, index, stream, half)
        if blk is None:
            seg_size = rules.segment_size(size, small)
            blk = self._grow(seg_size, small) or self._recover(size, index, stream, half, seg_size, nbytes)
        return self._take(blk, size, stream, nbytes, False)

    def _find(self, size: int, index: SizeIndex, stream, half: bool) -> Block | None:
        limit = self.rules.half_limit(size) if half else None
        for blk in index.from_size(size):
            if limit is not None and blk.size > limit:
                return None
            if self._eligible(blk, stream):
                return blk
        return None

    def _eligible(self, blk: Block, stream) -> bool:
        if blk.free_on is ANY or blk.free_on is stream or blk.free_on == stream:  # `is` first: Stream's == is Python
            return True
        if blk.events and all(self._events.query(e) for e in blk.events):
            self._drop_events(blk.events)
            blk.events, blk.free_on = [], ANY
            return True
        return False

    def _grow(self, seg_size: int, small: bool) -> Block | None:
        address = self._source.allocate(seg_size)
        if address is None:
            return None
        self._ranks += 1
        seg = Segment(address, seg_size, small, rank=self._ranks)
        seg.head = Block(address, seg_size, seg)
        self._segments[address] = seg
        self._seg_bytes += seg_size
        self._derive_tests()
        self._n_seg_alloc += 1
        self._reserved_peak = max(self._reserved_peak, self.reserved)
        self._index_of(seg.head).add(seg.head)
        return seg.head

    def _recover(self, size, index, stream, half, seg_size, nbytes) -> Block:
        """The device refused a segment: synchronize, look again, release, retry at the segment's size."""
        self._refusals += 1
        self._settle()
        blk = self._find(size, index, stream, half)
        if blk is None:
            self._release_cached()
            blk = self._grow(seg_size, index is self._small)
        if blk is None and index is self._large:  # a 20 MiB segment refused: the request's own may still fit
            own = self.rules.segment_size(size, False, buffered=False)
            if own < seg_size:
                seg_size = own
                blk = self._grow(own, False)
        if blk is None and half:  # the last resort: a block of more than twice the request beats an OOM
            blk = self._find(size, index, stream, half=False)
        if blk is None:
            raise self._oom(nbytes, size, seg_size, f"the driver refused a segment of {human(seg_size)}")
        return blk

    def _take(self, blk: Block, size: int, stream, nbytes: int, at_end: bool) -> Block:
        index = self._index_of(blk)  # a segment's blocks all live in one index
        index.remove(blk)
        if blk.size > size:
            if at_end:  # the remainder stays in front, as blk (which keeps its events)
                taken = Block(blk.end - size, size, blk.seg)
                blk.size -= size
                self._link_after(blk, taken)
                index.add(blk)
                blk = taken
            else:
                rest = Block(blk.ptr + size, blk.size - size, blk.seg)
                rest.free_on, rest.events, blk.events = blk.free_on, blk.events, []
                blk.size = size
                self._link_after(blk, rest)
                index.add(rest)
        if blk.events:
            self._drop_events(blk.events)
            blk.events = []
        return self._hand_out(blk, size, stream, nbytes)

    def _hand_out(self, blk: Block, size: int, stream, nbytes: int) -> Block:
        """blk (out of its free index, of exactly size bytes, no events) becomes live: the figures follow."""
        self._serial += 1
        blk.state, blk.requested, blk.stream, blk.serial = LIVE, nbytes, stream, self._serial
        allocated = self._allocated = self._allocated + size
        requested = self._requested = self._requested + nbytes
        if allocated > self._allocated_peak:
            self._allocated_peak = allocated
        if requested > self._requested_peak:
            self._requested_peak = requested
        if self._recorder is not None:
            self._recorder.alloc(blk.serial, nbytes, stream)
        return blk

    # -- freeing ---------------------------------------------------------------------------------
    def _drain(self) -> None:
        while self._deferred:
            self._free(self._deferred.popleft())

    def _free(self, blk: Block) -> None:
        if blk.state != LIVE:
            raise ArgumentError(f"{blk!r} freed twice")
        self._allocated -= blk.size
        self._requested -= blk.requested
        if self._recorder is not None:
            self._recorder.free(blk.serial, blk.requested, blk.stream)
        if blk.used_on is None:  # no record_stream: free at once (the common case)
            if self._multi and self._events is not None:  # another stream may want it: stamp the free
                self._make_free(blk, blk.stream, [self._events.record(blk.stream)])
            else:
                self._make_free(blk, blk.stream, [])
            if self._allocated < self._trim_below:  # _trim's test: a free under the limit trims nothing
                self._trim()
            return
        extra = [s for s in blk.used_on if s != blk.stream]
        blk.used_on = None
        if extra:
            blk.waiting = [self._events.record(s) for s in extra]
            blk.events = [self._events.record(blk.stream)]
            blk.state = PENDING
            self._pending.append(blk)
            self._pending_bytes += blk.size
            self._derive_tests()
        else:
            cross = self._multi and self._events is not None  # another stream may want it: stamp the free
            self._make_free(blk, blk.stream, [self._events.record(blk.stream)] if cross else [])
            self._trim()

    def _make_free(self, blk: Block, free_on, events: list) -> None:
        seg = blk.seg  # a segment's blocks all live in one index (_index_of, inline)
        if not seg.is_range:  # its neighbours may be a run's pieces or the held block (the range has none)
            self._merge_held()
        blk.state, blk.free_on, blk.events = FREE, free_on, events
        nxt, prv = blk.next, blk.prev
        index = self._range_free if seg.is_range else self._small if seg.small else self._large
        if nxt is not None and nxt.state == FREE and compatible(blk, nxt):
            index.remove(nxt)
            self._absorb(blk, nxt)
        if prv is not None and prv.state == FREE and compatible(prv, blk):
            index.remove(prv)
            self._absorb(prv, blk)
            blk = prv
        index.add(blk)

    def _process_pending(self) -> None:
        if not self._pending:
            return
        waiting = []
        for blk in self._pending:
            if all(self._events.query(e) for e in blk.waiting):
                self._drop_events(blk.waiting)
                blk.waiting = []
                self._pending_bytes -= blk.size
                self._make_free(blk, blk.stream, blk.events)
            else:
                waiting.append(blk)
        self._pending = waiting
        self._derive_tests()

    def _record_stream(self, blk: Block, stream) -> None:
        if stream == blk.stream:
            return
        if self._events is None:
            raise ArgumentError("record_stream needs stream events: this pool was built without them")
        if blk.used_on is None:
            blk.used_on = set()
        blk.used_on.add(stream)
        if stream not in self._streams:
            self._new_stream(stream)
        if self._recorder is not None:
            self._recorder.record_stream(blk.serial, stream)

    def _new_stream(self, stream) -> None:
        """A second stream appears: blocks freed so far on the first get the event their free did not record."""
        self._streams.add(stream)
        if len(self._streams) == 2:
            self._multi = True
            self._derive_tests()
            self._merge_held()  # runs are made on one stream only (_release)
            if self._events is not None:
                for blk in self._free_blocks():
                    if blk.free_on is not ANY and not blk.events:
                        blk.events = [self._events.record(blk.free_on)]

    # -- giving memory back ----------------------------------------------------------------------
    def _settle(self) -> None:
        """Synchronize (when the pool can): every event has completed, every free block serves any stream."""
        if self._synchronize is None:
            self._process_pending()
            return
        self._synchronize()
        self._merge_held()
        for blk in self._pending:
            self._drop_events(blk.waiting)
            blk.waiting = []
            self._pending_bytes -= blk.size
            self._make_free(blk, blk.stream, blk.events)
        self._pending = []
        self._derive_tests()
        for blk in self._free_blocks():
            self._drop_events(blk.events)
            blk.events, blk.free_on = [], ANY
        for seg in self._all_segments():  # neighbours kept apart by their streams merge now
            blk = seg.head
            while blk is not None:
                nxt = blk.next
                if blk.state == FREE and nxt is not None and nxt.state == FREE:
                    index = self._index_of(blk)
                    index.remove(blk)
                    index.remove(nxt)
                    self._absorb(blk, nxt)
                    index.add(blk)
                else:
                    blk = nxt

    def _release_segments(self, limit: int | None = None) -> int:
        """Return wholly free segments to the driver, largest first, until the cache is down to limit."""
        self._merge_held()
        released = 0
        for seg in sorted(self._segments.values(), key=lambda s: -s.size):
            if limit is not None and self.reserved - self._allocated - self._pending_bytes <= limit:
                break
            if seg.head.wholly_free():
                self._index_of(seg.head).remove(seg.head)
                self._drop_events(seg.head.events)
                del self._segments[seg.address]
                self._source.free(seg.address)
                self._seg_bytes -= seg.size
                self._n_seg_free += 1
                released += seg.size
        if released:
            self._derive_tests()
        return released

    def _release_cached(self) -> int:
        released = self._release_segments()
        if self._range is not None:
            released += self._range.unmap_inside(self._free_spans(settled_only=True), keep=False)
        return released

    def _trim(self) -> None:
        limit = self._parked_limit
        if limit is None or self.reserved - self._allocated - self._pending_bytes <= limit:
            return
        self._release_segments(limit)
        if self._range is not None and self.reserved - self._allocated - self._pending_bytes > limit:
            self._range.unmap_inside(self._free_spans(settled_only=True), keep=False)
