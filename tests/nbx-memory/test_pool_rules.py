"""The caching pool's rules, one example each, over the fake device."""
import gc

import pytest

from nbx.core.errors import ArgumentError, DeviceOOMError, MissingFactError, NbxError, OutOfMemoryError
from nbx.memory.fakes import FakeDevice, FakeStreams
from nbx.memory.pool import NBX, Pool
from nbx.memory.rules import ONE_CLASS, STRICT_HALF, PoolRules

KiB, MiB = 1 << 10, 1 << 20


# The mechanisms are shown under the strict half rule with 2 MiB-rounded large segments (nbx's rules
# until 2026-11-29), whose figures are simplest; NBX's 20 MiB segments and slack have tests of their own.
def make_pool(capacity=None, rules=STRICT_HALF, parked_fraction=1.0, sync=True):
    device = FakeDevice(capacity)
    streams = FakeStreams()
    pool = Pool(device.segments, rules, parked_fraction=parked_fraction, events=streams,
                synchronize=streams.synchronize if sync else None, device="fake:0")
    return pool, device, streams


def kinds(pool):
    return sorted(view.kind for view in pool.snapshot())


def test_requests_round_up_to_512_bytes_and_the_small_class_ends_at_one_mebibyte():
    pool, device, _ = make_pool()
    a = pool.allocate(1)
    b = pool.allocate(1 * MiB)
    assert pool.stats().allocated == 512 + 1 * MiB
    assert b.ptr == a.ptr + 512  # both carved from the same 2 MiB small segment
    assert device.segments.requests == [2 * MiB]
    c = pool.allocate(1 * MiB + 1)
    assert device.segments.requests == [2 * MiB, 2 * MiB]  # large: the request rounded to 2 MiB
    assert kinds(pool) == ["large", "small"]
    assert pool.stats().allocated == 512 + 1 * MiB + (1 * MiB + 512)
    del a, b, c


def test_a_large_segment_is_the_request_rounded_to_two_mebibytes():
    pool, device, _ = make_pool()
    blk = pool.allocate(5 * MiB + 3)
    assert device.segments.requests == [6 * MiB]
    assert pool.stats().reserved == 6 * MiB
    del blk


def test_a_scalar_never_carves_a_freed_large_block():
    pool, device, _ = make_pool()
    big = pool.allocate(100 * MiB)
    big_ptr = big.ptr
    big.release()
    scalar = pool.allocate(17 * KiB)
    assert not big_ptr <= scalar.ptr < big_ptr + 100 * MiB
    assert device.segments.requests == [100 * MiB, 2 * MiB]


def test_the_half_rule_leaves_a_block_of_more_than_twice_the_request_whole():
    pool, device, _ = make_pool()
    big = pool.allocate(100 * MiB)
    big_ptr = big.ptr
    big.release()
    third = pool.allocate(30 * MiB)          # 100 - 30 = 70 left > 30: the pool grows instead
    assert not big_ptr <= third.ptr < big_ptr + 100 * MiB
    assert device.segments.requests == [100 * MiB, 30 * MiB]
    sixty = pool.allocate(60 * MiB)          # 100 - 60 = 40 left <= 60: split
    assert sixty.ptr == big_ptr
    half = pool.allocate(20 * MiB)           # the 40 MiB remainder: 20 left <= 20
    assert half.ptr == big_ptr + 60 * MiB
    assert len(device.segments.requests) == 2
    del third, sixty, half


def test_without_the_half_rule_a_small_large_request_carves_the_big_block():
    pool, device, _ = make_pool(rules=ONE_CLASS)
    big = pool.allocate(100 * MiB)
    big_ptr = big.ptr
    big.release()
    scalar = pool.allocate(17 * KiB)
    assert scalar.ptr == big_ptr  # the failure the size classes and the half rule exist for
    del scalar


def test_free_neighbours_merge_and_a_wholly_free_segment_stays_parked():
    pool, device, _ = make_pool()
    blocks = [pool.allocate(256 * KiB) for _ in range(4)]
    for b in (blocks[1], blocks[3], blocks[2]):
        b.release()
    (view,) = pool.snapshot()
    assert [(size, state) for _, size, state in view.blocks] == [(256 * KiB, "live"), (2 * MiB - 256 * KiB, "free")]
    blocks[0].release()
    (view,) = pool.snapshot()
    assert [(size, state) for _, size, state in view.blocks] == [(2 * MiB, "free")]
    assert device.segments.frees == 0 and pool.stats().reserved == 2 * MiB


def test_a_block_freed_on_a_stream_is_reused_there_at_once_and_elsewhere_only_after_its_event():
    pool, device, streams = make_pool()
    a = pool.allocate(4 * MiB, stream="s")
    ptr = a.ptr
    a.release()
    again = pool.allocate(4 * MiB, stream="s")
    assert again.ptr == ptr
    again.release()
    other = pool.allocate(4 * MiB, stream="t")  # the event recorded at the free has not completed
    assert other.ptr != ptr
    streams.complete("s")
    later = pool.allocate(4 * MiB, stream="t")
    assert later.ptr == ptr
    del other, later


def test_record_stream_holds_a_block_until_every_stream_that_used_it_passes_its_event():
    pool, device, streams = make_pool()
    a = pool.allocate(4 * MiB, stream="s")
    ptr = a.ptr
    pool.record_stream(a, "copy")
    a.release()
    assert pool.stats().pending == 4 * MiB
    b = pool.allocate(4 * MiB, stream="s")  # not even its own stream may take it yet
    assert b.ptr != ptr
    streams.complete("copy")
    c = pool.allocate(4 * MiB, stream="s")
    assert c.ptr == ptr and pool.stats().pending == 0
    del b, c


def test_record_stream_without_stream_events_is_refused_by_name():
    device = FakeDevice()
    pool = Pool(device.segments, NBX, parked_fraction=1.0)
    a = pool.allocate(1 * KiB, stream="s")
    with pytest.raises(ArgumentError, match="record_stream needs stream events"):
        pool.record_stream(a, "copy")


def test_record_stream_of_a_released_block_is_refused_by_name():
    pool, _, _ = make_pool()
    a = pool.allocate(1 * KiB)
    a.release()
    with pytest.raises(ArgumentError, match="not a live block of this pool"):
        pool.record_stream(a, "copy")


def test_the_parked_fraction_is_required_and_checked():
    device = FakeDevice(64 * MiB)
    with pytest.raises(TypeError):
        Pool(device.segments, NBX)
    with pytest.raises(ArgumentError, match=r"parked fraction must lie in \(0, 1\]"):
        Pool(device.segments, NBX, parked_fraction=1.5)
    with pytest.raises(MissingFactError, match="needs the device's total memory"):
        Pool(FakeDevice(None).segments, NBX, parked_fraction=0.5)


def test_free_segments_beyond_the_parked_fraction_go_back_to_the_driver():
    pool, device, _ = make_pool(capacity=100 * MiB, parked_fraction=0.1)  # 10 MiB may stay parked
    a, b = pool.allocate(8 * MiB), pool.allocate(8 * MiB)
    a.release()
    assert pool.stats().reserved == 16 * MiB
    b.release()  # 16 MiB parked > 10 MiB: the largest free segments go until it is within
    assert pool.stats().reserved == 8 * MiB and device.segments.frees == 1


def test_a_refused_small_request_is_retried_at_the_segment_size():
    pool, device, _ = make_pool(capacity=8 * MiB)
    big = pool.allocate(6 * MiB)
    big.release()                       # 6 MiB parked, 2 MiB left on the device
    smalls = [pool.allocate(1 * MiB) for _ in range(2)]   # fills the first small segment
    third = pool.allocate(1 * KiB)       # refused, the parked segment released, retried
    assert device.segments.refusals == [2 * MiB]
    assert device.segments.requests[-1] == 2 * MiB
    assert pool.stats().refusals == 1 and pool.stats().reserved == 4 * MiB
    del smalls, third


def test_an_out_of_memory_error_carries_its_figures_and_none_where_the_driver_cannot_say():
    pool, device, _ = make_pool(capacity=16 * MiB)
    live = pool.allocate(10 * MiB)
    with pytest.raises(DeviceOOMError, match=r"requested 8.00 MiB .* holds 10.00 MiB live") as info:
        pool.allocate(8 * MiB)
    err = info.value
    assert isinstance(err, NbxError) and isinstance(err, MemoryError) and isinstance(err, OutOfMemoryError)
    assert (err.requested, err.live, err.cached) == (8 * MiB, 10 * MiB, 0)
    assert (err.free, err.total, err.segment) == (6 * MiB, 16 * MiB, 8 * MiB)
    assert pool.stats().ooms == 1

    unknown = Pool(_RefusingSource(), NBX, parked_fraction=1.0)
    with pytest.raises(DeviceOOMError, match="device has unknown free of unknown") as info:
        unknown.allocate(4 * MiB)
    assert info.value.free is None and info.value.total is None and info.value.live == 0
    del live


class _RefusingSource:
    def allocate(self, nbytes):
        return None

    def free(self, address):
        raise AssertionError("nothing was allocated")

    def memory_info(self):
        return None, None


def test_at_a_refusal_the_pool_synchronizes_and_takes_another_streams_block():
    pool, device, streams = make_pool(capacity=8 * MiB)
    a = pool.allocate(6 * MiB, stream="s")
    ptr = a.ptr
    a.release()  # its event on s is not complete: t may not take it ...
    b = pool.allocate(6 * MiB, stream="t")  # ... until the refusal's synchronize completes it
    assert b.ptr == ptr and pool.stats().refusals == 1
    del b


def test_the_half_rule_gives_way_only_before_an_out_of_memory_error():
    pool, device, _ = make_pool(capacity=12 * MiB)
    pool.allocate(12 * MiB).release()
    a = pool.allocate(6 * MiB)          # 12 - 6 = 6 <= 6: split
    b = pool.allocate(4 * MiB)          # from the 6 MiB remainder: 2 left <= 4
    assert (a.ptr + 6 * MiB, pool.stats().reserved) == (b.ptr, 12 * MiB)
    a_ptr = a.ptr
    a.release()                         # 6 MiB free beside the live b: its segment is not wholly free
    c = pool.allocate(2 * MiB + 512)    # 6 MiB > 2 x the request and the device refuses 4 MiB more
    assert c.ptr == a_ptr
    assert pool.stats().refusals == 1 and device.segments.refusals == [4 * MiB, 4 * MiB]
    del b, c


def test_a_block_collected_inside_the_pool_is_freed_after_the_pool_step():
    pool, _, _ = make_pool()
    a = pool.allocate(1 * KiB)
    pool._lock.acquire()       # as when the collector runs inside the pool's own work
    try:
        del a
        gc.collect()
        assert len(pool._deferred) == 1
    finally:
        pool._lock.release()
    assert pool.stats().allocated == 0 and pool.stats().frees == 1


def test_zero_bytes_give_a_null_block_and_a_negative_count_is_refused():
    pool, device, _ = make_pool()
    z = pool.allocate(0)
    assert (z.ptr, z.nbytes) == (0, 0) and device.segments.requests == []
    with pytest.raises(ArgumentError, match="non-negative int"):
        pool.allocate(-1)


def test_stats_peaks_reset_and_summary_reads_as_text():
    pool, _, _ = make_pool()
    a = pool.allocate(3 * MiB)
    b = pool.allocate(100)
    a.release()
    s = pool.stats()
    assert (s.allocated, s.requested, s.allocated_peak, s.requested_peak) == (512, 100, 3 * MiB + 512, 3 * MiB + 100)
    assert (s.reserved, s.reserved_peak, s.small_segments, s.large_segments) == (6 * MiB, 6 * MiB, 1, 1)
    assert s.largest_free == 4 * MiB and s.fragmentation == pytest.approx(1 - 4 * MiB / (6 * MiB - 512))
    pool.reset_peak()
    assert pool.stats().allocated_peak == 512
    text = pool.memory_summary()
    assert "reserved" in text and "6.00 MiB" in text and "fragmentation" in text and "1 small, 1 large" in text
    assert pool.empty_cache() == 4 * MiB
    del b


def test_rules_that_contradict_themselves_are_refused_by_name():
    with pytest.raises(ArgumentError, match="granularity must be a positive multiple of 512"):
        PoolRules("bad", 100, MiB, 2 * MiB, 2 * MiB, 0, 0, True, True)
    with pytest.raises(ArgumentError, match="small class limit"):
        PoolRules("bad", 512, 4 * MiB, 2 * MiB, 2 * MiB, 0, 0, True, True)


def test_nbx_gives_a_large_request_under_ten_mebibytes_a_twenty_mebibyte_segment_that_others_share():
    pool, device, _ = make_pool(rules=NBX)
    a = pool.allocate(3 * MiB)
    b = pool.allocate(6 * MiB)  # leaves 11 MiB: more than the request, within the 56 MiB slack
    assert device.segments.requests == [20 * MiB] and b.ptr == a.ptr + 3 * MiB
    c = pool.allocate(12 * MiB)  # 10 MiB or more: its own segment, rounded to 2 MiB
    assert device.segments.requests == [20 * MiB, 12 * MiB]
    del a, b, c


def test_nbx_half_rule_slack_still_leaves_a_block_far_larger_than_the_request_whole():
    pool, device, _ = make_pool(rules=NBX)
    big = pool.allocate(100 * MiB)
    big.release()
    mid = pool.allocate(40 * MiB)  # would leave 60 MiB: more than the request and than the slack
    assert device.segments.requests == [100 * MiB, 40 * MiB]
    del mid
    fits = pool.allocate(46 * MiB)  # leaves 54 MiB: within the slack
    assert device.segments.requests == [100 * MiB, 40 * MiB] and fits.ptr == big.ptr


def test_a_refused_twenty_mebibyte_segment_is_retried_at_the_requests_own_size():
    pool, device, _ = make_pool(capacity=8 * MiB, rules=NBX)
    blk = pool.allocate(3 * MiB)
    assert device.segments.requests == [20 * MiB, 20 * MiB, 4 * MiB] and pool.stats().reserved == 4 * MiB
    with pytest.raises(DeviceOOMError, match="refused a segment of 6.00 MiB") as info:
        pool.allocate(5 * MiB + 1)
    assert info.value.segment == 6 * MiB
    del blk


def test_half_rule_slack_must_be_a_non_negative_multiple_of_512():
    from dataclasses import replace
    with pytest.raises(ArgumentError, match="half_rule_slack must be a non-negative multiple of 512"):
        replace(NBX, half_rule_slack=100)
