"""The pool's steady state in one frame to allocate (Pool.allocate) and one to free (Pool._release), with the general path's
choices: stream order, record_stream and the peak figures are those of a pool without the fast path."""
import sys
from pathlib import Path

from nbx.memory.fakes import FakeDevice, FakeStreams
from nbx.memory.pool import NBX, Pool
from nbx.memory.trace import shipped_trace

KiB, MiB = 1 << 10, 1 << 20
POOL_FILES = ("pool.py", "general.py", "blocks.py", "carving.py", "runs.py")


def pool_frames(fn) -> list[str]:
    """The pool's own Python functions fn's call enters (nbx.memory's pool, its general path, blocks, carving, runs), by name."""
    entered = []

    def profile(frame, event, arg):
        if event == "call" and Path(frame.f_code.co_filename).name in POOL_FILES:
            entered.append(frame.f_code.co_name)
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return entered


def streams_pool(fast: bool = True) -> tuple[Pool, FakeStreams]:
    streams = FakeStreams()
    pool = Pool(FakeDevice().segments, NBX, parked_fraction=1.0, events=streams, synchronize=streams.synchronize)
    pool._fast = fast
    return pool, streams


def test_a_repeat_of_an_exact_hole_or_the_held_block_is_one_frame_to_allocate_and_one_to_free():
    pool = Pool(FakeDevice().segments, NBX, parked_fraction=1.0)
    a, b, c = (pool.allocate(4 * KiB) for _ in range(3))
    b.release()                                   # a hole between live blocks
    held = []
    assert pool_frames(lambda: held.append(pool.allocate(4 * KiB))) == ["allocate"]  # _Handed made with no __init__
    assert held[0].ptr == b.ptr
    assert pool_frames(held.pop().release) == ["release", "_release"]
    refilled = pool.allocate(4 * KiB)             # the hole again (best fit would take it before the held block)
    c.release()                                   # before the segment's free rest: the held block
    again = []
    assert pool_frames(lambda: again.append(pool.allocate(4 * KiB))) == ["allocate"]
    assert again[0].ptr == c.ptr
    assert pool_frames(again.pop().release) == ["release", "_release"] and refilled.ptr == b.ptr


def test_a_block_freed_on_one_stream_is_not_handed_to_another_before_its_event_and_then_is():
    outcomes = []
    for fast in (True, False):
        pool, streams = streams_pool(fast)
        a, b, c = (pool.allocate(4 * KiB, "s0") for _ in range(3))
        pool.allocate(512, "s1").release()      # a second stream: frees record events from now on
        pool.allocate(4 * KiB, "s0").release()  # the last request's stream is s0 again
        hole = b.ptr
        b.release()
        early = pool.allocate(4 * KiB, "s1")    # a new stream for the request: not the hole
        streams.complete("s0")
        late = pool.allocate(4 * KiB, "s1")
        outcomes.append((early.ptr, late.ptr, pool.stats(), pool.snapshot(), streams.outstanding))
        assert early.ptr != hole and late.ptr == hole
    assert outcomes[0] == outcomes[1]


def test_a_block_used_on_another_stream_waits_for_that_stream_even_for_its_own():
    outcomes = []
    for fast in (True, False):
        pool, streams = streams_pool(fast)
        a, b, c = (pool.allocate(4 * KiB, "s0") for _ in range(3))
        pool.record_stream(b, "s1")
        hole = b.ptr
        b.release()                              # pending until s1 passes the free
        before = pool.allocate(4 * KiB, "s0")
        streams.complete("s1")
        after = pool.allocate(4 * KiB, "s0")
        assert before.ptr != hole and after.ptr == hole
        outcomes.append((before.ptr, after.ptr, pool.stats(), pool.snapshot(), streams.outstanding))
    assert outcomes[0] == outcomes[1]


def test_the_peaks_of_a_decode_trace_are_the_same_with_and_without_the_fast_path():
    # the shipped H200 decode trace through the public allocate/release (the fast path's way in)
    trace = shipped_trace("h200_decode_llama1b_shapes.2026-11-29.tsv")
    figures = []
    for fast in (True, False):
        pool, streams = streams_pool(fast)
        live = {}
        for e in trace.events:
            if e.event == "alloc":
                live[e.block] = pool.allocate(e.nbytes, e.stream)
            elif e.event == "free":
                live.pop(e.block).release()
        s = pool.stats()
        figures.append((s.allocated_peak, s.requested_peak, s.reserved_peak, s.allocations, s.frees,
                        pool.snapshot()))
    assert figures[0] == figures[1]


def test_a_chain_of_same_sized_outputs_keeps_the_general_paths_blocks_and_figures():
    # the decode chain silu(rms_norm(x + r, w)) * x: each output freed once the next is made
    states = []
    for fast in (True, False):
        pool, _ = streams_pool(fast)
        inputs = [pool.allocate(8 * KiB, "s0") for _ in range(3)]
        ptrs = []
        for _ in range(20):
            t1 = pool.allocate(8 * KiB, "s0")
            t2 = pool.allocate(8 * KiB, "s0")
            t1.release()
            t3 = pool.allocate(8 * KiB, "s0")
            t2.release()
            t4 = pool.allocate(8 * KiB, "s0")
            t3.release()
            ptrs.append((t1.ptr, t2.ptr, t3.ptr, t4.ptr))
            t4.release()
        states.append((ptrs, pool.stats(), pool.snapshot(), len(inputs)))
    assert states[0] == states[1]
