"""The four-op decode chain silu(rms_norm(x + r, w)) * x on one bfloat16 row of 4096: nbx eager, nbx
captured (nbx.graph), torch eager and torch's own CUDA graph of the same chain, in one process on
the same GPU (torch is the peer here; nbx itself never imports it).

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_graph.py

Columns, microseconds a call:
- wall+sync: one call then a device synchronize, the median of many (what a decode loop that reads
  its token back pays per step): the figure of issue 14's goals.
- wall: back-to-back calls, one synchronize at the end, per call (the host's rate when it never waits).
- gpu: CUDA events around back-to-back calls queued behind a GPU spin (peer_timing.measure): device
  time alone, the host's launch cost hidden; host: the time a call took to queue there.
ratio = torch eager's wall+sync / this row's (goals: nbx captured >= 3.0, and >= torch graph's ratio).
Captured rows replay with the inputs already in place (a decode step writes them in place); the
"nbx step(...)" row calls the step with its static inputs (the key lookup, no copies).
"""
from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F

import nbx.core as nbx
from peer_timing import allocator_name, deviation, measure, spin_cycles_per_ms

HIDDEN = 4096
EPS = 1e-6


def chain_nbx(x, r, w):
    return nbx.silu(nbx.rms_norm(x + r, (HIDDEN,), w, EPS)) * x


def chain_torch(x, r, w):
    return F.silu(F.rms_norm(x + r, (HIDDEN,), w, EPS)) * x


def wall_sync_us(fn, reps: int = 400) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def wall_us(fn, calls: int = 2000) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def torch_graph(x, r, w):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            chain_torch(x, r, w)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = chain_torch(x, r, w)
    return graph, out


def main() -> int:
    torch.manual_seed(0)
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | allocator: {allocator_name()}")
    print(f"# chain: silu(rms_norm(x + r, (4096,), w, eps={EPS})) * x, x r: bfloat16 (1, 4096), w: bfloat16 (4096,)")
    cycles = spin_cycles_per_ms()
    x, r = (torch.randn(1, HIDDEN, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    w = torch.randn(HIDDEN, device="cuda", dtype=torch.bfloat16)
    nx, nr, nw = (nbx.from_dlpack(t) for t in (x, r, w))

    step = nbx.graph.capture(chain_nbx, nx, nr, nw)
    graph, torch_out = torch_graph(x, r, w)
    eager_out = chain_nbx(nx, nr, nw)
    step.replay()
    graph.replay()
    torch.cuda.synchronize()
    print(f"# nbx captured == nbx eager (bytes): {step.outputs.numpy().tobytes() == eager_out.numpy().tobytes()}; "
          f"deviation from torch: eager {deviation(eager_out, chain_torch(x, r, w)):.2e}, "
          f"captured {deviation(step.outputs, torch_out):.2e}; nbx graph nodes: {step.nodes}")
    memory = step.memory
    print(f"# nbx step memory: declared {memory.declared.allocated} B in {memory.declared.launches} launches, "
          f"plan live peak {memory.live_peak} B, extent {memory.plan.extent} B, private pool {memory.reserved} B")

    rows = [("nbx eager", lambda: chain_nbx(nx, nr, nw)),
            ("nbx captured", step.replay),
            ("nbx step(...)", lambda: step(nx, nr, nw)),
            ("torch eager", lambda: chain_torch(x, r, w)),
            ("torch graph", graph.replay)]
    figures = {}
    for name, fn in rows:
        gpu, host, _ = measure(lambda i, fn=fn: fn(), 1, cycles)
        figures[name] = (wall_sync_us(fn), wall_us(fn), gpu, host)
    base = figures["torch eager"][0]
    print(f"{'case':<14} {'wall+sync us':>12} {'wall us':>8} {'gpu us':>7} {'host us':>8} {'x torch eager':>13}")
    for name, (sync, wall, gpu, host) in figures.items():
        print(f"{name:<14} {sync:12.1f} {wall:8.1f} {gpu:7.1f} {host:8.1f} {base / sync:13.2f}")
    captured, graph_sync = figures["nbx captured"][0], figures["torch graph"][0]
    print(f"# goals: captured >= 3.0x torch eager: {base / captured:.2f}x; "
          f">= 1.0x torch's CUDA graph: {graph_sync / captured:.2f}x")
    step.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
