"""The pool's bookkeeping: segments, the blocks carved from them, and the free blocks by size.

A segment is one driver allocation (small or large class) or the expandable range. Its blocks
tile it exactly, linked by address (prev/next). Free blocks of equal size are ordered by their
segment's rank (the pool's count of segments at its allocation) and their offset in it, never by
the driver's addresses: the pool then makes the same choices on any device, and a replay on the
fake device (nbx.memory.pool.simulate) reproduces the device's pool exactly (ordering by address
made them differ wherever the driver handed a later segment a lower address). A free block remembers the stream it was freed on
(`free_on`) and the events that must complete before another stream may reuse it; `ANY` marks a
block every stream may take (fresh memory, or its events have completed).
"""
from __future__ import annotations

from bisect import bisect_left, insort

FREE, LIVE, PENDING, HELD = 0, 1, 2, 3  # HELD: free, its merge with the free block before it waiting
# (a later piece of the pool's run of unmerged free blocks: nbx.memory.pool's _runs)


class _AnyStream:
    def __repr__(self) -> str:
        return "ANY"


ANY = _AnyStream()


_OFFSET_BITS = 48          # a block's offset in its segment (256 TiB)
_SIZE_SHIFT = 96           # a free block's sort key: size << 96 | rank << 48 | offset


class Segment:
    __slots__ = ("address", "size", "small", "head", "is_range", "order")

    def __init__(self, address: int, size: int, small: bool, is_range: bool = False, rank: int = 0):
        self.address, self.size, self.small, self.is_range = address, size, small, is_range
        self.head: Block | None = None
        self.order = (rank << _OFFSET_BITS) - address  # + a block's ptr: its place among equal sizes


class Block:
    __slots__ = ("ptr", "size", "seg", "prev", "next", "state", "requested", "stream", "used_on",
                 "free_on", "events", "waiting", "serial")

    def __init__(self, ptr: int, size: int, seg: Segment):
        self.ptr, self.size, self.seg = ptr, size, seg
        self.prev: Block | None = None
        self.next: Block | None = None
        self.state = FREE
        self.requested = 0
        self.stream = None
        self.used_on: set | None = None     # extra streams named by record_stream
        self.free_on = ANY
        self.events: list = []              # completed -> reusable on any stream
        self.waiting: list = []             # record_stream events that must complete before reuse at all
        self.serial = 0

    @property
    def end(self) -> int:
        return self.ptr + self.size

    def wholly_free(self) -> bool:
        return self.state == FREE and self.prev is None and self.next is None

    def __repr__(self) -> str:
        state = ("free", "live", "pending", "held")[self.state]
        return f"<block {self.size} B at 0x{self.ptr:x} {state} stream={self.stream!r} free_on={self.free_on!r}>"


def compatible(a: Block, b: Block) -> bool:
    """Two free neighbours merge unless they wait on different streams (the merged block would serve none)."""
    return a.free_on is ANY or b.free_on is ANY or a.free_on is b.free_on or a.free_on == b.free_on


class SizeIndex:
    """Free blocks ordered by (size, segment rank, offset): best fit is the first eligible from bisect.

    A key is one int (size << 96 | rank << 48 | offset): bisect compares ints, no tuples are built.
    """

    __slots__ = ("keys", "blocks")

    def __init__(self):
        self.keys: list[int] = []
        self.blocks: dict[int, Block] = {}

    def add(self, blk: Block) -> None:
        key = (blk.size << _SIZE_SHIFT) + blk.seg.order + blk.ptr
        insort(self.keys, key)
        self.blocks[key] = blk

    def remove(self, blk: Block) -> None:
        keys = self.keys
        key = (blk.size << _SIZE_SHIFT) + blk.seg.order + blk.ptr
        i = bisect_left(keys, key)
        if i == len(keys) or keys[i] != key:
            raise AssertionError(f"pool bookkeeping: {blk!r} is not in its free index")
        del keys[i]
        del self.blocks[key]

    def take_exact(self, size: int, stream) -> Block | None:
        """The first free block (by rank and offset) of exactly size bytes, taken out of the index when
        stream may use it at once (freed on it, or on any stream, with no events to drop); else None.

        Best fit would choose that very block (no smaller one holds the request, and the half rule
        allows an exact one): this is the pool's fast path, a bisect and two deletions.
        """
        keys = self.keys
        i = bisect_left(keys, size << _SIZE_SHIFT)
        if i == len(keys):
            return None
        key = keys[i]
        if key >> _SIZE_SHIFT != size:
            return None
        blk = self.blocks[key]
        if blk.events or not (blk.free_on is ANY or blk.free_on is stream):
            return None
        del keys[i]
        del self.blocks[key]
        return blk

    def from_size(self, size: int):
        """Free blocks of at least size bytes, smallest first."""
        keys, blocks = self.keys, self.blocks
        for i in range(bisect_left(keys, size << _SIZE_SHIFT), len(keys)):
            yield blocks[keys[i]]

    def __len__(self) -> int:
        return len(self.keys)

    def largest(self) -> int:
        return self.keys[-1] >> _SIZE_SHIFT if self.keys else 0
