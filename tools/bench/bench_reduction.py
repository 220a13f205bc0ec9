"""Reductions of nbx (Triton kernels) against torch on one GPU.

    python tools/bench/bench_reduction.py [--reps 20]

sum, max, argmax and logsumexp over the rows of 4096 x 4096, 32 x 151936 and 2048 x 8192, and a
sum of every element of a 256 MiB tensor, in float32 and bfloat16. For each case:

- kernel ms: GPU time per call with the host out of the way: the stream is held by a long sleep
  kernel while `reps` calls are queued behind it, and CUDA events bracket the queued calls. Each
  call reads another copy of its input, and the copies add up to at least 256 MiB (the H200's L2
  is 50 MB), so the reads come from HBM, as in the other benchmarks. The
  outputs and partials are reused from call to call (launch.output answers from a cache): an
  allocation per call may synchronize (a cudaMalloc/cudaFree), which would let the host back in;
- TB/s over the bytes the op must move (the input read once, the output written), from that time;
- call ms: one call between two CUDA events (what a caller waits for, host overhead included);
- cold ms: one call alone after an L2 flush, the certifier's method (peer_timing.cold): nbx's is what
  the certificate's best_ms states for the same launch key;
- ratio: torch's time over nbx's (above 1: nbx is faster), for kernels, calls and cold calls.

torch's peers: torch.sum, torch.amax, torch.argmax, torch.logsumexp. Then the host time of one
small call of each (and where nbx's goes, by cProfile). Settings are nbx.autotune's for each launch
key (NBX_AUTOTUNE_REPORT=1 prints where they came from).

nbx and torch both launch on the legacy default stream. torch is imported here only as the peer:
nbx itself never imports it.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import nbx.core as nbx
from peer_timing import ONCE, call_ms, cold
import numpy as np
import torch
from nbx.kernels import launch

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
ROWS = [(4096, 4096), (32, 151936), (2048, 8192)]
FULL_MIB = 256
PEERS = {"sum": lambda t: torch.sum(t, dim=1), "max": lambda t: torch.amax(t, dim=1),
         "argmax": lambda t: torch.argmax(t, dim=1), "logsumexp": lambda t: torch.logsumexp(t, dim=1)}


class ReusedOutputs:
    """Within it, nbx's kernels write into one cached tensor per (shape, dtype, device) instead of a
    new one per call (their results are overwritten: for timing only)."""

    def __enter__(self):
        self.original, cache = launch.output, {}

        def output(shape, dtype, device, out=None):
            if out is not None:  # a caller's output (a split launch's partials): as given
                return self.original(shape, dtype, device, out)
            key = (tuple(shape), dtype, device)
            if key not in cache:
                cache[key] = self.original(shape, dtype, device)
            return cache[key]
        launch.output = output
        return self

    def __exit__(self, *exc):
        launch.output = self.original


def kernel_ms(fn, reps: int, copies: int) -> float:
    """GPU milliseconds per call of fn(i), i the input copy: reps calls queued behind a sleep kernel,
    bracketed by events."""
    if ONCE:
        fn(0)
        return float("nan")
    with ReusedOutputs():
        fn(0)
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(120_000_000)  # ~60 ms at 1.98 GHz: longer than queueing reps calls takes
        begin.record()
        for i in range(reps):
            fn(i % copies)
        end.record()
        end.synchronize()
    return begin.elapsed_time(end) / reps


def pair(shape, dtype: str, device):
    """The same values as an nbx tensor and a torch tensor on the GPU."""
    t = torch.randn(shape, dtype=TORCH_DTYPES[dtype], device="cuda")
    host = t.float().cpu().numpy()
    return nbx.asarray(host, dtype=dtype).to(device), t


def copies_of(shape, dtype: str, device):
    """Enough (nbx, torch) copies of one input that together they pass 256 MiB (at least one)."""
    nbytes = int(np.prod(shape)) * nbx.as_dtype(dtype).itemsize
    x, t = pair(shape, dtype, device)
    xs, ts = [x], [t]
    for _ in range(1, max(1, -(-(FULL_MIB << 20) // nbytes))):
        ts.append(t.clone())
        xs.append(nbx.from_dlpack(ts[-1]))
    return xs, ts


def cases(device):
    for dtype in TORCH_DTYPES:
        for shape in ROWS:
            xs, ts = copies_of(shape, dtype, device)
            for op in ("sum", "max", "argmax", "logsumexp"):
                out_bytes = shape[0] * (8 if op == "argmax" else xs[0].itemsize)
                yield (op, dtype, f"{shape[0]} x {shape[1]}", xs[0].nbytes + out_bytes, len(xs),
                       (lambda i, op=op, xs=xs: getattr(nbx, op)(xs[i], dim=1)),
                       (lambda i, op=op, ts=ts: PEERS[op](ts[i])))
        n = (FULL_MIB << 20) // nbx.as_dtype(dtype).itemsize
        xs, ts = copies_of((n,), dtype, device)
        yield ("sum (all)", dtype, f"{n} ({FULL_MIB} MiB)", xs[0].nbytes + xs[0].itemsize, len(xs),
               (lambda i, xs=xs: nbx.sum(xs[i])), (lambda i, ts=ts: torch.sum(ts[i])))


def check_agrees(op: str, ours, theirs) -> None:
    """A benchmarked result is also a correct one (the test suites check against the oracle)."""
    a = np.asarray(ours.numpy(), dtype=np.float64)
    b = theirs.float().cpu().numpy().astype(np.float64)
    if op == "argmax":
        assert np.array_equal(a, b), f"{op}: nbx and torch disagree"
    else:
        assert np.allclose(a, b, rtol=2e-2, atol=1e-2), f"{op}: nbx and torch disagree"


def bench(reps: int) -> None:
    device = nbx.as_device("cuda")
    print(f"== reductions; {torch.cuda.get_device_name()}, torch {torch.__version__}; settings per launch key "
          f"(nbx.autotune); kernel: {reps} queued calls, call: median of {reps}")
    print(f"{'op':10} {'dtype':9} {'shape':22} {'nbx kern ms':>11} {'torch kern':>10} {'nbx TB/s':>9} "
          f"{'torch TB/s':>10} {'ratio':>6} {'nbx call':>9} {'torch call':>10} {'ratio':>6} {'nbx cold':>9} "
          f"{'torch cold':>10} {'ratio':>6}")
    for op, dtype, shape, moved, copies, ours, theirs in cases(device):
        check_agrees(op.split()[0], ours(0), theirs(0))
        k_nbx, k_torch = kernel_ms(ours, reps, copies), kernel_ms(theirs, reps, copies)
        c_nbx, c_torch = call_ms(lambda: ours(0), reps), call_ms(lambda: theirs(0), reps)
        with ReusedOutputs():
            cold_nbx = cold(ours) / 1e3
        cold_torch = cold(theirs) / 1e3
        print(f"{op:10} {dtype:9} {shape:22} {k_nbx:>11.4f} {k_torch:>10.4f} {moved / k_nbx / 1e9:>9.3f} "
              f"{moved / k_torch / 1e9:>10.3f} {k_torch / k_nbx:>6.3f} {c_nbx:>9.4f} {c_torch:>10.4f} "
              f"{c_torch / c_nbx:>6.3f} {cold_nbx:>9.4f} {cold_torch:>10.4f} {cold_torch / cold_nbx:>6.3f}", flush=True)


def host_overhead() -> None:
    """Host microseconds per call of a small reduction (launch-bound), and where nbx's time goes."""
    device = nbx.as_device("cuda")
    x, t = pair((4, 1024), "float32", device)
    for name, fn in [("nbx.sum(x, dim=1)", lambda: nbx.sum(x, dim=1)), ("torch.sum(t, 1)", lambda: torch.sum(t, 1)),
                     ("nbx.argmax(x, dim=1)", lambda: nbx.argmax(x, dim=1)),
                     ("torch.argmax(t, 1)", lambda: torch.argmax(t, 1))]:
        for _ in range(30):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(300):
            fn()
        host = (time.perf_counter() - start) / 300 * 1e6
        torch.cuda.synchronize()
        print(f"host time {name:24} {host:7.1f} us per call", flush=True)
    profiler = cProfile.Profile()
    profiler.runcall(lambda: [nbx.sum(x, dim=1) for _ in range(300)])
    pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    bench(args.reps)
    host_overhead()


if __name__ == "__main__":
    main()
