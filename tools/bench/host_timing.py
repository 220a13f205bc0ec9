"""Host microseconds per call of a Python callable, shared by the host-time tools (host_parts,
host_sim, memory_latency, memory_vs_torch); no imports beyond the standard library, so CPU-only
tools can use it."""
from __future__ import annotations

import time


def per_call_us(fn, calls: int, batches: int = 3, warmup: int = 100, pick=min) -> float:
    """fn's microseconds a call over `batches` timed runs of `calls` calls, after `warmup` calls;
    pick chooses among the batches (min: the least disturbed one, on a shared machine)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(batches):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter_ns() - t0) / calls / 1e3)
    return pick(times)
