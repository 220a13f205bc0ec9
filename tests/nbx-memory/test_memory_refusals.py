"""The remaining named refusals of nbx.memory and of its fake device, each by its message."""
from dataclasses import replace

import pytest

from nbx.core.errors import ArgumentError, DeviceError
from nbx.memory.expandable import ExpandableRange
from nbx.memory.fakes import FakeDevice, FakeStreams
from nbx.memory.pinned import HostAlignedAllocator
from nbx.memory.pool import NBX, Pool
from nbx.memory.trace import shipped_trace

MiB = 1 << 20


def test_a_large_buffer_that_is_not_a_multiple_of_the_large_rounding_is_refused():
    with pytest.raises(ArgumentError, match="large_buffer .* must be a multiple of large_round"):
        replace(NBX, name="bad", large_buffer=3 * MiB, large_buffer_below=1 * MiB)


def test_an_empty_expandable_range_is_refused():
    with pytest.raises(ArgumentError, match="must hold some bytes"):
        ExpandableRange(FakeDevice().physical, 2 * MiB, 0)


def test_a_block_freed_twice_inside_the_pool_is_refused():
    pool = Pool(FakeDevice().segments, NBX, parked_fraction=1.0)
    blk = pool._malloc(100, None)
    pool._free(blk)
    with pytest.raises(ArgumentError, match="freed twice"):
        pool._free(blk)


def test_an_unknown_shipped_trace_is_refused_with_the_list():
    with pytest.raises(FileNotFoundError, match="no shipped trace 'nope.tsv'; shipped: "):
        shipped_trace("nope.tsv")


def test_the_host_allocator_refuses_a_free_it_did_not_allocate():
    with pytest.raises(ArgumentError, match="which it did not allocate"):
        HostAlignedAllocator().free(12345)


def test_the_fake_driver_checks_what_the_real_one_would():
    device = FakeDevice(None)
    with pytest.raises(DeviceError, match="never allocated or already freed"):
        device.segments.free(0x1000)
    phys = device.physical
    with pytest.raises(DeviceError, match="not a multiple of"):
        phys.create(3 * MiB)
    base = phys.reserve(8 * MiB)
    handle = phys.create(2 * MiB)
    with pytest.raises(DeviceError, match="outside every reserved range"):
        phys.map(base + 8 * MiB, 2 * MiB, handle)
    phys.map(base, 2 * MiB, handle)
    with pytest.raises(DeviceError, match="is not an unmapped chunk"):
        phys.map(base + 2 * MiB, 2 * MiB, handle)
    with pytest.raises(DeviceError, match="released while mapped"):
        phys.release(handle)
    with pytest.raises(DeviceError, match="freed while chunks are still mapped"):
        phys.free_range(base, 8 * MiB)
    with pytest.raises(DeviceError, match="nothing of 2097152 bytes is mapped"):
        phys.unmap(base + 2 * MiB, 2 * MiB)
    with pytest.raises(DeviceError, match="no reserved range"):
        phys.free_range(base + 2 * MiB, 8 * MiB)
    streams = FakeStreams()
    event = streams.record("s")
    streams.release(event)
    with pytest.raises(DeviceError, match="released twice"):
        streams.release(event)
    with pytest.raises(DeviceError, match="queried after its release"):
        streams.query(event)
