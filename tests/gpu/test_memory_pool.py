"""On a real GPU: the caching pool the cuda backend registers. Filling the card ends in a DeviceOOMError
with its figures and the memory serves again after; a refusal releases cached segments and retries;
a mixed workload on two streams gives every byte back; pinned host buffers wait for their copies."""
from __future__ import annotations

import gc

import nbx.core as nbx
import numpy as np
import pytest
from nbx.core.device import Device
from nbx.core.errors import DeviceOOMError
from nbx.devices import nvidia
from nbx.devices.nvidia import memory, runtime
from nbx.memory import allocator
from nbx.memory.caching import CachingAllocator
from nbx.memory.pinned import PinnedPool
from nbx.memory.pool import NBX

pytestmark = pytest.mark.gpu

MiB, GiB = 1 << 20, 1 << 30
DEV = Device("cuda", 0)
BIG = 4 * GiB


def cuda_pool():
    nbx.zeros(1, device="cuda")  # starts the backend, which registers its allocator
    alloc = allocator.get_allocator("cuda")
    assert isinstance(alloc, CachingAllocator), f"the cuda backend registered {alloc!r}, not the caching pool"
    return alloc, alloc.pool(DEV)


def fill(alloc, size: int, limit: int) -> tuple[list, DeviceOOMError | None]:
    """Allocate blocks of size until the pool refuses (at most limit of them)."""
    blocks, stream = [], nvidia.current_stream(0)
    for _ in range(limit):
        try:
            blocks.append(alloc.allocate(size, DEV, stream))
        except DeviceOOMError as exc:
            return blocks, exc
    return blocks, None


def test_filling_the_card_ends_in_a_device_oom_error_with_its_figures_and_the_memory_serves_again():
    alloc, pool = cuda_pool()
    free0, total = runtime.memory_info(0)
    live0 = pool.stats().allocated
    blocks, err = fill(alloc, BIG, total // BIG + 2)
    assert err is not None, f"{len(blocks)} blocks of 4 GiB and no refusal on a {total / GiB:.1f} GiB card"
    held = len(blocks) * BIG
    print(f"\nrefused after {len(blocks)} x 4 GiB ({held / GiB:.0f} GiB) of {total / GiB:.1f} GiB; {err}")
    assert held > free0 - 2 * BIG  # the card was filled, not refused early
    assert err.requested == BIG and err.segment == BIG
    assert err.live == live0 + held
    stats = pool.stats()
    assert err.cached == stats.reserved - stats.allocated and err.cached >= 0
    assert err.total == total and err.free is not None and 0 <= err.free < free0 - held + 256 * MiB
    assert f"requested 4.00 GiB ({BIG} bytes" in str(err) and "cuda:0 is out of memory" in str(err)
    assert stats.ooms >= 1 and stats.refusals >= 1
    count = len(blocks)
    del blocks, err
    gc.collect()
    assert pool.stats().allocated == live0
    again, err2 = fill(alloc, BIG, count)  # recovery: the same blocks again, from the pool and the driver
    assert len(again) == count and err2 is None
    assert (nbx.ones(4, device="cuda").numpy() == 1).all()
    del again
    gc.collect()
    alloc.empty_cache(DEV)
    assert runtime.memory_info(0)[0] >= free0 - 256 * MiB


def test_a_refusal_releases_the_cached_segments_and_the_retry_succeeds():
    alloc, pool = cuda_pool()
    _, total = runtime.memory_info(0)
    blocks, err = fill(alloc, BIG, total // BIG + 2)
    assert err is not None
    del err  # its traceback holds the list
    kept = [b for i, b in enumerate(blocks) if i % 3]
    del blocks  # every third 4 GiB block back to the pool: cached (within the parked fraction), never adjacent
    gc.collect()
    before = pool.stats()
    assert before.cached >= 2 * BIG
    double = alloc.allocate(2 * BIG, DEV, nvidia.current_stream(0))  # no cached block holds it: refusal, release
    after = pool.stats()
    assert after.refusals == before.refusals + 1 and after.segment_frees >= before.segment_frees + 2
    assert double.nbytes == 2 * BIG
    del double, kept
    gc.collect()
    alloc.empty_cache(DEV)


def test_a_mixed_workload_on_two_streams_keeps_every_block_apart_and_gives_every_byte_back():
    alloc, pool = cuda_pool()
    start = pool.stats()
    rng = np.random.default_rng(4)
    side = nvidia.Stream(0)
    live: dict[int, tuple[object, int]] = {}
    for i in range(400):
        if live and rng.random() < 0.45:
            key = int(rng.choice(list(live)))
            tensor, value = live.pop(key)
            assert (tensor.numpy() == value).all(), f"tensor {key} lost its bytes: a block was handed out twice"
            continue
        n = int(rng.choice([1, 300, 5000, 70_000, 600_000, 3_000_000, 40_000_000]))
        value = i % 251
        if rng.random() < 0.3:
            with side:
                t = nbx.full((n,), value, dtype="uint8", device="cuda")
        else:
            t = nbx.full((n,), value, dtype="uint8", device="cuda")
        spans = sorted((x.data_ptr(), x.data_ptr() + x.nbytes) for x, _ in live.values())
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
        live[i] = (t, value)
    for key, (tensor, value) in live.items():
        assert (tensor.numpy() == value).all(), f"tensor {key} lost its bytes"
    del live, tensor, t
    gc.collect()
    runtime.synchronize(0)
    end = pool.stats()
    print("\n" + alloc.memory_summary(DEV))
    assert (end.allocated, end.requested) == (start.allocated, start.requested)
    assert end.allocations - start.allocations == end.frees - start.frees
    released = alloc.empty_cache(DEV)
    assert pool.stats().pending == 0 and released > 0


def test_a_block_freed_on_a_busy_stream_is_reused_elsewhere_only_once_that_stream_has_passed_the_free():
    alloc, pool = cuda_pool()
    busy = nvidia.Stream(0)
    scratch = nbx.empty((GiB,), dtype="uint8", device="cuda")
    with busy:
        block = alloc.allocate(64 * MiB, DEV, busy)
        for i in range(30):  # ~10 ms of memsets queued on busy
            runtime.memset_async(scratch.data_ptr(), i, GiB, busy.handle)
        runtime.memset_async(block.ptr, 1, 64 * MiB, busy.handle)
    ptr = block.ptr
    alloc.allocate(1024, DEV, nvidia.current_stream(0)).release()  # a second stream is in use
    block.release()
    other = alloc.allocate(64 * MiB, DEV, nvidia.current_stream(0))
    assert other.ptr != ptr, "a block still written by a busy stream was handed to another stream"
    busy.synchronize()
    again = alloc.allocate(64 * MiB, DEV, nvidia.current_stream(0))
    assert again.ptr == ptr
    del other, again, scratch


def test_pinned_host_buffers_from_cudaHostAlloc_are_reused_only_after_their_asynchronous_copy():
    events = memory.CudaStreamEvents(0)
    pinned = PinnedPool(memory.CudaPinnedAllocator(), NBX, parked_fraction=1.0, events=events,
                        synchronize=lambda: runtime.synchronize(0))
    size = 64 * MiB
    copier = nvidia.Stream(0)
    device = nbx.empty((size,), dtype="uint8", device="cuda")
    staging = pinned.allocate(size, copier)
    view = pinned.array(staging)
    view.reshape(-1, 256)[:] = np.arange(256, dtype=np.uint8)
    for _ in range(8):  # ~10 ms of copies: the host gets ahead of them
        runtime.memcpy_async(device.data_ptr(), staging.ptr, size, runtime.HOST_TO_DEVICE, copier.handle)
    ptr = staging.ptr
    del view, staging
    gc.collect()
    other = pinned.allocate(size)  # another stream: the block comes back only once the copies passed
    assert other.ptr != ptr or copier.query()
    copier.synchronize()
    again = pinned.allocate(size)
    assert ptr in (other.ptr, again.ptr), "the freed staging buffer was not reused once its copies passed"
    assert (device.numpy()[:4096] == np.tile(np.arange(256, dtype=np.uint8), 16)).all()
    del other, again
    gc.collect()
    assert pinned.empty_cache() >= 2 * size
