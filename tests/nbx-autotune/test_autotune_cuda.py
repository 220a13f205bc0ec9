"""On a CUDA device: its class and compiler, and the CUDA timer's witness (run by the GPU run, skipped here)."""
from __future__ import annotations

import pytest
from nbx.autotune import device_class, timing

pytestmark = pytest.mark.gpu


def test_the_cuda_device_is_classed_by_name_and_memory_and_the_compiler_names_triton():
    from nbx.core.device import as_device
    identity = device_class.identify(as_device("cuda:0"))
    assert identity.vendor == "nvidia" and identity.device_class.startswith("nvidia-")
    assert identity.device_class.endswith("gb") and identity.compiler.startswith("triton-")
    assert identity.compiler.endswith("-cuda")


def test_the_cuda_timer_times_its_witness_with_events_after_a_flush_of_twice_the_l2():
    from nbx.core.device import as_device
    timer = timing.timer_for(as_device("cuda:0"))
    assert timer.flush_bytes >= 2 * (1 << 20)
    witness = timer.witness()
    first = timing.measure(witness.run, timer, warmup=2, repeats=11)
    second = timing.measure(witness.run, timer, warmup=2, repeats=11)
    assert 0 < first.median_ms < 50 and len(first.samples) == 11
    assert abs(second.median_ms - first.median_ms) / first.median_ms < 0.05, (first, second)
    assert set(timer.clocks()) == {"sm_clock_max_khz", "memory_clock_max_khz"}


def test_the_cuda_hold_keeps_the_stream_busy_so_queued_runs_are_timed_without_the_hosts_time():
    import time

    from nbx.core.device import as_device
    timer = timing.timer_for(as_device("cuda:0"))
    start, end = timer.event(), timer.event()
    timer.hold(0.1)  # compiles the spin kernel
    timer.record(start)
    timer.hold(5.0)
    timer.record(end)
    timer.synchronize()
    assert 4.9 <= timer.elapsed_ms(start, end) < 6.0

    def slow_host_small_kernel():  # 2 ms of host time before a tiny launch: events must not see it
        time.sleep(0.002)
        timer.flush_l2()

    m = timing.measure(slow_host_small_kernel, timer, warmup=1, repeats=5)
    assert not m.host_bound and m.held_ms > 5 * 2.0
    assert m.median_ms < 1.0, m  # a flush of twice the L2 takes well under a millisecond on the GPU


def test_the_read_flush_evicts_what_the_l2_held_so_a_run_after_it_reads_from_hbm(monkeypatch):
    from nbx.core.device import as_device
    from nbx.devices.nvidia.flush import L2Flush
    timer = timing.timer_for(as_device("cuda:0"))
    assert timer.flush_method == "read" and timer.flush_bytes >= 2 * (1 << 20)
    reread = L2Flush(0, 16 << 20)   # a read of 16 MiB, which the L2 holds once read
    cold = timing.measure(reread, timer).median_ms
    monkeypatch.setattr(timer, "flush_l2", reread)   # the same read before each run: it finds the L2 warm
    warm = timing.measure(reread, timer).median_ms
    print(f"16 MiB read: {warm * 1e3:.1f} us from the L2, {cold * 1e3:.1f} us after the read flush")
    assert cold > 1.2 * warm, (warm, cold)


def test_on_the_gpu_an_uncertified_softmax_key_is_served_a_certified_neighbours_setting_and_computes_right(monkeypatch):
    """(77, 768) float32: the key width=1024, elements=65536 is not certified on the H200; a neighbour serves it."""
    import numpy as np
    monkeypatch.delenv("NBX_AUTOTUNE_NO_SWEEP", raising=False)  # gpu_run.sh lists keys that way; serve as users are

    import nbx.core as nbx
    from nbx import autotune
    from nbx.autotune import serving
    from nbx.core.reference import oracle
    x = nbx.asarray(np.random.default_rng(0).standard_normal((77, 768), dtype=np.float32), device="cuda:0")
    serving.reset()  # after the upload: its copy kernel's certified key is not the softmax's
    got = nbx.softmax(x, dim=-1).numpy()
    assert np.max(np.abs(got - np.asarray(oracle("softmax", x, -1)))) < 1e-5
    report = serving.report()
    # the softmax key is the one neighbour-served key; other launches of the call (the screen's own
    # uploads, the download) may be served their certified keys, but nothing is swept
    served = [key for (kernel, key) in report.from_neighbour if kernel == "softmax"]
    assert (report.swept, report.neighbour, len(served)) == (0, 1, 1), autotune.report_line()
    assert "width=1024" in served[0], served
    serving.reset()


def test_on_the_gpu_a_later_process_reads_the_neighbours_kept_screen_verdict_instead_of_screening(monkeypatch):
    """The same (77, 768) float32 softmax twice, the second time as a later process would (serving reset, the
    same local cache): the neighbour's verdict is read, no screen runs, and the result is still right."""
    import numpy as np
    monkeypatch.delenv("NBX_AUTOTUNE_NO_SWEEP", raising=False)

    import nbx.core as nbx
    from nbx.autotune import neighbours, serving
    from nbx.core.reference import oracle
    x = nbx.asarray(np.random.default_rng(0).standard_normal((77, 768), dtype=np.float32), device="cuda:0")
    screened = []
    original = neighbours.screen.run
    monkeypatch.setattr(neighbours.screen, "run", lambda *a, **k: screened.append(1) or original(*a, **k))
    for later in (False, True):
        serving.reset()
        got = nbx.softmax(x, dim=-1).numpy()
        assert np.max(np.abs(got - np.asarray(oracle("softmax", x, -1)))) < 1e-5
        assert serving.report().neighbour >= 1 and serving.report().swept == 0
        assert (len(screened) == 0) if later else (len(screened) >= 1), (later, screened)
        screened.clear()
    serving.reset()
