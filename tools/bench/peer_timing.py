"""Timing nbx and its peer (torch) on the same GPU, shared by the tools/bench scripts.

torch is imported here because it is the peer; nbx itself never imports it. Three ways to time:
- `cold`: the certifier's method (nbx.autotune.timing.measure with the CUDA timer), for nbx and
  torch alike: each call alone between two events, the L2 flushed by a read before it, queued
  behind a hold, the median of 21. A benchmark's cold figure for nbx is what the certificate's
  best_ms states for the same launch: the two are compared to check the certificates.
- `measure`: back-to-back calls queued behind a GPU spin (torch.cuda._sleep), bracketed by CUDA
  events, so the events see GPU time alone; it also reports the host time a call took to queue and
  whether the GPU ran dry before the host had queued them all (host-bound).
- `call_ms`: the median of single calls between two events, host overhead included.

With NBX_BENCH_ONCE=1 each case runs once, untimed (its figures print as nan): how
`nbx autotune record` lists the launch keys a benchmark forms without paying for its timing.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch


ONCE = os.environ.get("NBX_BENCH_ONCE") == "1"


def spin_cycles_per_ms() -> float:
    """GPU clock cycles torch.cuda._sleep spins per millisecond on this device."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    start.record()
    torch.cuda._sleep(20_000_000)
    end.record()
    torch.cuda.synchronize()
    return 20_000_000 / start.elapsed_time(end)


def measure(fn, copies: int, cycles_per_ms: float, repeats: int = 3,
            min_iters: int = 20) -> tuple[float, float, bool]:
    """(GPU us a call, host us a call, host-bound?) for fn(i) over back-to-back calls behind a spin.

    fn takes the index of the input copy to read (i % copies), so that reads come from HBM. A slow
    case may ask for fewer calls (min_iters) and repeats, so a benchmark stays within its time.
    """
    if ONCE:
        fn(0)
        return math.nan, math.nan, False
    for i in range(2):
        fn(i % copies)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(5):
        fn(i % copies)
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / 5
    iters = int(min(200, max(min_iters, 0.02 / wall)))
    gpu, host, bound = [], [], False
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        spin_ms = 1.5 * wall * iters * 1e3 + 2
        torch.cuda._sleep(int(spin_ms * cycles_per_ms))
        start.record()
        t0 = time.perf_counter()
        for i in range(iters):
            fn(i % copies)
        queued = time.perf_counter() - t0
        end.record()
        torch.cuda.synchronize()
        bound |= queued * 1e3 > spin_ms
        gpu.append(start.elapsed_time(end) * 1e3 / iters)
        host.append(queued * 1e6 / iters)
    return min(gpu), statistics.median(host), bound


_timer = None


def cold(fn) -> float:
    """GPU microseconds of fn(0) by the certifier's method (see the module's doc)."""
    global _timer
    if ONCE:
        fn(0)
        return math.nan
    from nbx.autotune import timing
    from nbx.core.device import as_device
    if _timer is None:
        _timer = timing.timer_for(as_device(f"cuda:{torch.cuda.current_device()}"))
    return timing.measure(lambda: fn(0), _timer).median_ms * 1e3


@dataclass(frozen=True)
class Timed:
    """Both timings of one function (microseconds): back to back (GPU and host per call, and whether
    the host could not keep up) and cold."""
    gpu_us: float
    host_us: float
    host_bound: bool
    cold_us: float


def both(nbx_fn, torch_fn, copies: int, cycles_per_ms: float) -> tuple[Timed, Timed]:
    """nbx's and torch's Timed, by the same methods in the same order."""
    return tuple(Timed(*measure(fn, copies, cycles_per_ms), cold(fn)) for fn in (nbx_fn, torch_fn))


def call_ms(fn, reps: int) -> float:
    """Median milliseconds of one call of fn between two CUDA events (host overhead included)."""
    if ONCE:
        fn()
        return math.nan
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times)


def deviation(nbx_out, torch_out) -> float:
    """max|nbx - torch| / max|torch|, in float64."""
    a = np.asarray(nbx_out.numpy(), dtype=np.float64)
    b = torch_out.float().cpu().numpy().astype(np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def allocator_name() -> str:
    """The class of the allocator nbx's cuda backend registered (the backend is started first)."""
    from nbx.core.device import get_backend
    from nbx.memory.allocator import get_allocator
    get_backend("cuda").start()  # the allocator is registered when the backend starts
    return type(get_allocator("cuda")).__name__


def banner() -> float:
    """Print a benchmark's first line (the GPU, torch, nbx's allocator); return spin_cycles_per_ms()."""
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | allocator: {allocator_name()}")
    return spin_cycles_per_ms()
