"""A kernel that keeps a stream busy for a given time: work queued behind it is timed by events
without the host's queueing in the figures (torch's _sleep plays this part for torch).

It reads the GPU's global nanosecond timer (PTX %globaltimer) until the time has passed, on one
program of one warp. Triton compiles it on first use (about a second), once per process.
"""
from __future__ import annotations

from functools import cache


@cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["ns"])
    def spin(ns):
        start = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                          is_pure=False, pack=1)
        now = start
        while now - start < ns:
            now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                            is_pure=False, pack=1)

    return spin


def hold(ms: float, index: int) -> None:
    """Queue, on cuda:index's current stream, a kernel that runs for ms milliseconds."""
    from . import runtime
    with runtime.device_guard(index):
        _kernel()[(1,)](int(ms * 1e6), num_warps=1)
