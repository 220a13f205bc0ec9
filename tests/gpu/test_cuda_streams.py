"""On a real GPU: streams and events order work, time it, and let copies overlap compute; Triton
kernels run on nbx's current stream through nbx's torch-free driver."""
from __future__ import annotations

import sys

import nbx.core as nbx
import numpy as np
import pytest
from nbx.devices import nvidia
from nbx.devices.nvidia import runtime, streams

pytestmark = pytest.mark.gpu
triton = pytest.importorskip("triton", reason="the Triton tests need triton (present on the GPU machine)")
from nbx.devices.nvidia import selftest, triton_driver  # noqa: E402

BIG = 1 << 30  # bytes: long enough that the host always gets ahead of the device


def fill_slowly(buffer, value: int, times: int, stream) -> None:
    """Queue `times` full passes over buffer on stream, the last writing value (each pass ~0.3 ms)."""
    ptr, n = buffer.data_ptr(), buffer.nbytes
    for i in range(times):
        runtime.memset_async(ptr, value if i == times - 1 else (i % 200) + 1, n, stream.handle)


def test_an_event_wait_orders_a_copy_on_one_stream_after_a_fill_on_another():
    src = nbx.zeros(BIG, dtype="uint8", device="cuda")
    dst = nbx.zeros(BIG, dtype="uint8", device="cuda")
    producer, consumer = nvidia.Stream(), nvidia.Stream()
    fill_slowly(src, 7, 20, producer)
    done = nvidia.Event().record(producer)
    consumer.wait_event(done)
    runtime.memcpy_async(dst.data_ptr(), src.data_ptr(), BIG, runtime.DEVICE_TO_DEVICE, consumer.handle)
    consumer.synchronize()
    sample = dst.numpy()
    assert (sample == 7).all()


def test_a_query_says_not_done_while_work_is_queued_and_done_after_synchronize():
    buf = nbx.empty(BIG, dtype="uint8", device="cuda")
    s = nvidia.Stream()
    fill_slowly(buf, 3, 30, s)
    event = nvidia.Event().record(s)
    assert s.query() is False and event.query() is False
    event.synchronize()
    assert event.query() is True and s.query() is True


def test_event_timing_of_a_memset_gives_a_plausible_bandwidth():
    buf = nbx.empty(BIG, dtype="uint8", device="cuda")
    s = nvidia.Stream()
    start, end = nvidia.Event(), nvidia.Event()
    fill_slowly(buf, 0, 1, s)  # warm
    start.record(s)
    fill_slowly(buf, 0, 10, s)
    end.record(s)
    end.synchronize()
    ms = start.elapsed_time(end)
    tb_per_s = 10 * BIG / (ms / 1e3) / 1e12
    assert 0.5 < tb_per_s < 10, f"{tb_per_s:.2f} TB/s"


def test_streams_take_every_priority_of_the_device_range():
    least, greatest = nvidia.device_properties(0).stream_priorities
    for priority in range(greatest, least + 1):
        s = nvidia.Stream(priority=priority)
        fill_slowly(nbx.empty(1024, dtype="uint8", device="cuda"), 1, 1, s)
        s.synchronize()


def test_nbx_operations_run_on_the_stream_of_a_with_block():
    buf = nbx.empty(BIG, dtype="uint8", device="cuda")
    s = nvidia.Stream()
    with s:
        assert nvidia.current_stream() is s
        fill_slowly(buf, 9, 20, nvidia.current_stream())
        out = nbx.full((BIG,), 5, dtype="uint8", device="cuda")  # a fill on the current stream
        assert s.query() is False
    assert nvidia.current_stream().is_default
    s.synchronize()
    assert out.numpy()[::4096].tolist() == [5] * (BIG // 4096)


def test_the_active_triton_driver_is_nbx_and_answers_from_nbx():
    import triton.runtime
    nbx.zeros(1, device="cuda")  # the backend starts (and installs the driver) at its first allocation
    active = triton.runtime.driver.active
    assert type(active).__name__ == "NbxCudaDriver" and active is triton_driver.installed()
    assert active.get_current_device() == runtime.get_device()
    assert active.get_device_capability(0) == nvidia.device_properties(0).compute_capability
    s = nvidia.Stream()
    with s:
        assert active.get_current_stream(0) == s.handle
    assert active.get_current_stream(0) == streams.LEGACY_DEFAULT


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "int32"])
def test_a_triton_add_on_nbx_tensors_matches_numpy(name):
    dt = nbx.dtypes.TABLE[name]
    rng = np.random.default_rng(1)
    a = rng.integers(-100, 101, 100_003) / 4  # quarters: exact in every dtype here, and so are their sums
    b = rng.integers(-100, 101, 100_003) / 4
    x, y = nbx.from_numpy(a.astype(dt.host), "cuda"), nbx.from_numpy(b.astype(dt.host), "cuda")
    out = selftest.add(x, y).numpy()
    expected = (a.astype(dt.host).astype(np.float64) + b.astype(dt.host).astype(np.float64)).astype(dt.host)
    assert out.tobytes() == expected.tobytes()
    assert "torch" not in sys.modules


def test_a_triton_launch_through_nbx_costs_little_host_time():
    import time
    x = nbx.ones(1024, device="cuda")
    out = nbx.empty(1024, device="cuda")
    for _ in range(20):
        selftest.add(x, x, out)
    runtime.synchronize(0)
    n = 2000
    start = time.perf_counter()
    for _ in range(n):
        selftest.add(x, x, out)
    host_us = (time.perf_counter() - start) / n * 1e6
    runtime.synchronize(0)
    print(f"\nhost time per Triton launch through nbx's driver (selftest.add, device_guard included): {host_us:.1f} us")
    assert host_us < 60
    assert (out.numpy() == 2).all()


def test_a_triton_kernel_runs_on_the_current_nbx_stream():
    out = nbx.empty(1 << 24, dtype="float32", device="cuda")
    selftest.spin(out, 10)  # compiled and loaded before the timed part
    runtime.synchronize(0)
    s = nvidia.Stream()
    with s:
        selftest.spin(out, 20_000)
        assert s.query() is False  # the kernel is on s, not on the default stream
    s.synchronize()
    assert s.query() is True


def test_an_async_copy_from_pinned_memory_overlaps_a_kernel_on_another_stream():
    nbytes = 1 << 30
    pinned = nvidia.pinned_empty(nbytes)
    pinned[:] = 1
    assert runtime.is_pinned(pinned)
    dst = nbx.empty(nbytes, dtype="uint8", device="cuda")
    work = nbx.empty(1 << 22, dtype="float32", device="cuda")
    copy_stream, compute_stream = nvidia.Stream(), nvidia.Stream()

    def copy():
        runtime.memcpy_async(dst.data_ptr(), pinned.ctypes.data, nbytes, runtime.HOST_TO_DEVICE, copy_stream.handle)

    def timed(*actions) -> float:
        runtime.synchronize(0)
        start = nvidia.Event().record(copy_stream)
        compute_stream.wait_event(start)
        for action in actions:
            action()
        compute_stream.wait_event(nvidia.Event().record(copy_stream))
        end = nvidia.Event().record(compute_stream)
        end.synchronize()
        return start.elapsed_time(end)

    copy_ms = timed(copy)
    iterations = 2000
    with compute_stream:
        selftest.spin(work, iterations)
    kernel_ms = timed(lambda: _spin_on(compute_stream, work, iterations))
    iterations = max(1, int(iterations * copy_ms / kernel_ms))  # a kernel about as long as the copy
    kernel_ms = timed(lambda: _spin_on(compute_stream, work, iterations))
    both_ms = timed(copy, lambda: _spin_on(compute_stream, work, iterations))
    print(f"\noverlap: copy {copy_ms:.2f} ms ({nbytes / copy_ms / 1e6:.1f} GB/s), kernel {kernel_ms:.2f} ms, "
          f"both {both_ms:.2f} ms, sum {copy_ms + kernel_ms:.2f} ms")
    assert both_ms < 0.8 * (copy_ms + kernel_ms)
    assert dst.numpy()[:: 1 << 20].tolist() == [1] * (nbytes >> 20)


def _spin_on(stream, work, iterations):
    with stream:
        selftest.spin(work, iterations)
