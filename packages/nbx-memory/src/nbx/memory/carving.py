"""How the pool carves large blocks from the expandable range (a mixin of nbx.memory.pool.Pool).

Placement weighs what a block costs in mapped memory: among the free blocks of the range that
hold the request (at either end), the one needing the fewest new chunks mapped, then one the half
rule allows, then the smallest. At a refusal the pool synchronizes, releases its wholly free
driver segments, unmaps every chunk lying wholly inside a free block (keeping the chunks), places
again, maps the kept chunks where the request needs them and releases the rest.
"""
from __future__ import annotations

from .blocks import ANY, Block
from .stats import human


class RangeCarving:
    def _from_range(self, size: int, stream, nbytes: int) -> tuple[Block, bool]:
        rng = self._range
        if size > rng.size:
            raise self._oom(nbytes, size, None, f"it is larger than the whole expandable range ({human(rng.size)})")
        choice = self._place(size, stream)
        if choice is not None and self._map(choice, size):
            return choice[0], choice[1]
        self._refusals += 1
        self._settle()
        self._release_segments()
        rng.unmap_inside(self._free_spans(settled_only=True), keep=True)
        choice = self._place(size, stream)
        mapped = choice is not None and self._map(choice, size)
        if not mapped:  # what the failed attempt mapped lies in free blocks: give it back before raising
            rng.unmap_inside(self._free_spans(settled_only=True), keep=False)
        rng.release_spares()
        if not mapped:
            raise self._oom(nbytes, size, None, f"the driver refused the range's chunks of {human(rng.chunk)}")
        return choice[0], choice[1]

    def _place(self, size: int, stream):
        """The free block and end to carve from: fewest chunks to map, then the half rule, then best fit."""
        rng, rules = self._range, self.rules
        half = rules.half_rule
        best = best_key = None
        for blk in self._range_free.values():
            if blk.size < size or not self._eligible(blk, stream):
                continue
            for at_end in ((False, True) if blk.size > size else (False,)):
                start = blk.end - size if at_end else blk.ptr
                key = (rng.unmapped_in(start, start + size), half and blk.size > rules.half_limit(size), blk.size, start)
                if best_key is None or key < best_key:
                    best, best_key = (blk, at_end), key
        return best

    def _map(self, choice, size: int) -> bool:
        blk, at_end = choice
        start = blk.end - size if at_end else blk.ptr
        ok = self._range.map(start, start + size)
        self._reserved_peak = max(self._reserved_peak, self.reserved)
        return ok

    def _free_spans(self, settled_only: bool = False):
        return [(b.ptr, b.end) for b in self._range_free.values() if not settled_only or b.free_on is ANY]
