"""The pool's deferred merges (a mixin of nbx.memory.pool.Pool): the held block and the runs.

On one stream every free block is free on that stream (or fresh) and carries no events, so free
neighbours always merge; the pool's fast path defers those merges. The last block freed next to free
blocks is held out of the size index (Pool._held: FREE before a free block, HELD after a free block
alone), the index keeping its neighbours' keys. Any other such block is joined: the index takes the
merged block's key (its size and first address, all that best fit compares) and the pieces wait as a
run, linked in Pool._runs (first piece -> last, last -> first; the first FREE and indexed, the later
ones HELD). _merge_held makes every deferred merge before anything reads the blocks themselves.
"""
from __future__ import annotations

from bisect import bisect_left, insort

from .blocks import _SIZE_SHIFT, ANY, FREE, HELD, Block


class HeldRuns:
    def _join(self, blk: Block) -> None:
        """blk, freed on the one stream and not in its index, joins its free neighbours: the index takes
        the merged block's key (what best fit compares) and the pieces wait as a run, their merges
        deferred to _merge_held. On one stream every free block is free on it (or fresh) with no
        events: free neighbours always merge."""
        seg = blk.seg
        index = self._small if seg.small else self._large
        keys, blocks, runs = index.keys, index.blocks, self._runs
        first = last = blk
        prv, nxt = blk.prev, blk.next
        if prv is not None and (prv.state == FREE or prv.state == HELD):  # alone, or its run's last piece
            first = runs.pop(prv) if prv.state == HELD else prv
            key = ((blk.ptr - first.ptr) << _SIZE_SHIFT) + seg.order + first.ptr  # its merged block's
            del blocks[key]  # (a bookkeeping fault raises here, before the keys change)
            del keys[bisect_left(keys, key)]
            if first.free_on is ANY:  # _absorb's
                first.free_on = blk.free_on
            blk.state = HELD
        else:
            blk.state = FREE
        if nxt is not None and nxt.state == FREE:  # alone, or its run's first piece
            last = runs.pop(nxt, nxt)
            key = ((last.ptr + last.size - nxt.ptr) << _SIZE_SHIFT) + seg.order + nxt.ptr
            del blocks[key]
            del keys[bisect_left(keys, key)]
            nxt.state = HELD
        if first is not last:
            runs[first], runs[last] = last, first
        key = ((last.ptr + last.size - first.ptr) << _SIZE_SHIFT) + seg.order + first.ptr
        insort(keys, key)
        blocks[key] = first

    def _merge_held(self) -> None:
        """The deferred merges made: the held block joins its neighbours, and each run's pieces become
        its first piece's one block, as their frees would have merged them (the free index holds that
        block's key already)."""
        held = self._held
        if held is not None:
            self._held = None
            self._join(held)
        runs = self._runs
        if not runs:
            return
        self._runs = {}
        for first, last in runs.items():
            if first.state == FREE:  # a first piece's entry (a last piece's maps back to its first)
                end = last.next
                while first.next is not end:
                    self._absorb(first, first.next)
