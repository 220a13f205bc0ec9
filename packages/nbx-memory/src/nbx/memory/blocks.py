"""The pool's bookkeeping: segments, the blocks carved from them, and the free blocks by size.

A segment is one driver allocation (small or large class) or the expandable range. Its blocks
tile it exactly, linked by address (prev/next). A free block remembers the stream it was freed on
(`free_on`) and the events that must complete before another stream may reuse it; `ANY` marks a
block every stream may take (fresh memory, or its events have completed).
"""
from __future__ import annotations

from bisect import bisect_left, insort

FREE, LIVE, PENDING = 0, 1, 2


class _AnyStream:
    def __repr__(self) -> str:
        return "ANY"


ANY = _AnyStream()


class Segment:
    __slots__ = ("address", "size", "small", "head", "is_range")

    def __init__(self, address: int, size: int, small: bool, is_range: bool = False):
        self.address, self.size, self.small, self.is_range = address, size, small, is_range
        self.head: Block | None = None


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
        state = ("free", "live", "pending")[self.state]
        return f"<block {self.size} B at 0x{self.ptr:x} {state} stream={self.stream!r} free_on={self.free_on!r}>"


def compatible(a: Block, b: Block) -> bool:
    """Two free neighbours merge unless they wait on different streams (the merged block would serve none)."""
    return a.free_on is ANY or b.free_on is ANY or a.free_on == b.free_on


class SizeIndex:
    """Free blocks ordered by (size, address): best fit is the first eligible from bisect."""

    __slots__ = ("keys", "blocks")

    def __init__(self):
        self.keys: list[tuple[int, int]] = []
        self.blocks: dict[int, Block] = {}

    def add(self, blk: Block) -> None:
        insort(self.keys, (blk.size, blk.ptr))
        self.blocks[blk.ptr] = blk

    def remove(self, blk: Block) -> None:
        keys = self.keys
        i = bisect_left(keys, (blk.size, blk.ptr))
        if i == len(keys) or keys[i] != (blk.size, blk.ptr):
            raise AssertionError(f"pool bookkeeping: {blk!r} is not in its free index")
        del keys[i]
        del self.blocks[blk.ptr]

    def from_size(self, size: int):
        """Free blocks of at least size bytes, smallest first."""
        keys, blocks = self.keys, self.blocks
        for i in range(bisect_left(keys, (size, -1)), len(keys)):
            yield blocks[keys[i][1]]

    def __len__(self) -> int:
        return len(self.keys)

    def largest(self) -> int:
        return self.keys[-1][0] if self.keys else 0
