"""The expandable range: growth maps chunks, a refusal remaps the chunks free blocks held, figures on OOM."""
import pytest

from nbx.core.errors import ArgumentError, DeviceOOMError
from nbx.memory.expandable import ExpandableRange
from nbx.memory.fakes import FakeDevice, FakeStreams
from nbx.memory.pool import NBX, Pool

MiB = 1 << 20


def make(capacity, chunk=2 * MiB, range_bytes=None):
    device = FakeDevice(capacity)
    streams = FakeStreams()
    rng = ExpandableRange(device.physical, chunk, range_bytes or capacity or 64 * MiB)
    pool = Pool(device.segments, NBX, parked_fraction=1.0, events=streams, synchronize=streams.synchronize,
                expandable=rng, device="fake:0")
    return pool, device, rng


def test_large_blocks_grow_the_range_chunk_by_chunk_and_small_ones_keep_driver_segments():
    pool, device, rng = make(None, chunk=4 * MiB)
    a = pool.allocate(5 * MiB)
    assert a.ptr == rng.base and device.physical.creates == 2 and pool.stats().reserved == 8 * MiB
    b = pool.allocate(3 * MiB)  # fits in the mapped rest of the second chunk: nothing new mapped
    assert b.ptr == rng.base + 5 * MiB and device.physical.creates == 2
    s = pool.allocate(1000)
    assert device.segments.requests == [2 * MiB] and not rng.base <= s.ptr < rng.base + rng.size
    assert pool.stats().range_mapped == 8 * MiB and pool.stats().reserved == 10 * MiB
    del a, b, s


def test_at_a_refusal_chunks_inside_free_blocks_are_unmapped_and_mapped_again_where_needed():
    pool, device, rng = make(16 * MiB, range_bytes=64 * MiB)  # address space is cheap: reserve more than the card
    a, b, c = pool.allocate(6 * MiB), pool.allocate(2 * MiB), pool.allocate(6 * MiB)
    assert device.physical.creates == 7
    a.release()
    c.release()  # 12 MiB free but split by the live b, 2 MiB left on the device
    d = pool.allocate(10 * MiB)
    assert d.ptr == b.ptr + 2 * MiB
    phys = device.physical
    # the first try created one chunk before the refusal; then the 7 chunks inside free blocks were
    # unmapped, 5 of them mapped again under the request and 2 released: nothing created twice
    assert (phys.creates, phys.unmaps, phys.releases, phys.maps) == (8, 7, 2, 8 + 5)
    assert pool.stats().reserved == 12 * MiB == device.used and pool.stats().refusals == 1
    mapped = set(phys.mapped)
    assert all(rng.base + i * 2 * MiB in mapped for i in range(3, 9))
    del b, d


def test_a_range_no_larger_than_the_card_can_lack_the_addresses_its_memory_could_serve():
    pool, device, rng = make(16 * MiB, range_bytes=16 * MiB)
    a, b, c = pool.allocate(6 * MiB), pool.allocate(2 * MiB), pool.allocate(6 * MiB)
    a.release()
    c.release()  # 14 MiB could be mapped, but no 10 MiB run of addresses is free around b
    with pytest.raises(DeviceOOMError, match="requested 10.00 MiB"):
        pool.allocate(10 * MiB)
    del b


def test_a_request_larger_than_the_whole_range_is_an_out_of_memory_error_with_its_figures():
    pool, device, rng = make(64 * MiB, range_bytes=32 * MiB)
    live = pool.allocate(4 * MiB)
    with pytest.raises(DeviceOOMError, match="larger than the whole expandable range") as info:
        pool.allocate(40 * MiB)
    err = info.value
    assert (err.requested, err.live, err.cached, err.free, err.total) == (40 * MiB, 4 * MiB, 0, 60 * MiB, 64 * MiB)
    del live


def test_a_range_that_cannot_map_enough_chunks_raises_with_the_figures():
    pool, device, rng = make(8 * MiB, range_bytes=64 * MiB)
    live = pool.allocate(6 * MiB)
    with pytest.raises(DeviceOOMError, match=r"refused the range's chunks of 2.00 MiB") as info:
        pool.allocate(4 * MiB)
    err = info.value
    # the chunk mapped before the refusal lay inside a free block: the recovery gave it back
    assert (err.live, err.cached, err.free, err.total) == (6 * MiB, 0, 2 * MiB, 8 * MiB)
    assert pool.stats().reserved == device.used == 6 * MiB
    del live


def test_the_chunk_must_be_a_multiple_of_the_driver_granularity():
    device = FakeDevice(None)
    with pytest.raises(ArgumentError, match="multiple of the driver's granularity"):
        ExpandableRange(device.physical, 3 * MiB, 64 * MiB)
    with pytest.raises(ArgumentError, match="multiple of the driver's granularity"):
        ExpandableRange(device.physical, None, 64 * MiB)


def test_empty_cache_unmaps_every_free_chunk_and_close_gives_the_range_back():
    pool, device, rng = make(None)
    blocks = [pool.allocate(3 * MiB) for _ in range(5)]
    for b in blocks[::2]:
        b.release()
    pool.empty_cache()
    # the two live 3 MiB blocks straddle chunk borders: they keep 4 chunks mapped
    assert pool.stats().range_mapped == 8 * MiB == device.used
    del blocks
    pool.empty_cache()
    assert device.used == 0 and not device.physical.handles
    rng.close()
    assert not device.physical.ranges
