"""Evicting the L2 between timed runs by reading a buffer larger than it.

A read leaves the L2 full of clean lines, which the next run drops for free. A write (a memset, as
triton.testing.do_bench flushes) leaves dirty lines that the timed run must write back to HBM while
it runs: on the H200 that added 25-50 % to a read-only reduction of 32-64 MiB and nothing to a
kernel that writes what it reads (docs/autotune.md, "The flush"). That cost is the flush's, not
the kernel's, so it must not take part in ranking candidates.
"""
from __future__ import annotations

from functools import cache

METHOD = "read"   # how the L2 is flushed, as the certificates' proofs record it
BLOCK = 4096      # int32 words a program reads


@cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def read_words(src, sink, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        total = tl.sum(tl.load(src + offs, mask=offs < n, other=0), 0)
        if total == -1:  # never taken (the buffer holds zeros), but the loads cannot be dropped
            tl.store(sink, total)

    return read_words


class L2Flush:
    """A buffer of `nbytes` (rounded down to int32 words) on cuda:index, read by one kernel per flush."""

    def __init__(self, index: int, nbytes: int):
        from nbx.core.ops.creation import zeros
        where = f"cuda:{index}"
        self.index, self.words = index, nbytes // 4
        self.nbytes = 4 * self.words
        self._buffer = zeros(self.words, dtype="int32", device=where)
        self._sink = zeros(1, dtype="int32", device=where)

    def __call__(self) -> None:
        """Queue the read on cuda:index's current stream."""
        from . import runtime
        with runtime.device_guard(self.index):
            _kernel()[(-(-self.words // BLOCK),)](self._buffer, self._sink, self.words, BLOCK=BLOCK)
