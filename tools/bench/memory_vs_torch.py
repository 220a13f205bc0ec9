#!/usr/bin/env python3
"""nbx's caching pool against torch's caching allocator, in one run on one GPU (torch is the peer).

1. Latency of allocating and freeing a cached block, per pair, median of batches: the pool's own
   interface (Pool.allocate + Block.release) against torch.cuda.caching_allocator_alloc/_delete, and
   the tensor front-ends (nbx.empty against torch.empty), for several sizes.
2. Fragmentation on allocation traces (the shipped synthetic one, and the H200 trace given with
   --trace): reserved at peak / live at peak, for nbx's pool replayed by nbx.memory.pool.simulate
   (driver segments, and the expandable range), nbx's pool replayed on this GPU (it must match
   simulate), and torch's allocator replaying the same trace on this GPU (caching_allocator_alloc
   of each row's bytes on its stream, max_memory_reserved / max_memory_allocated) with its default
   settings and with expandable_segments, each in a fresh process of its own. record rows (record_stream)
   are not replayed for torch (its raw allocation interface has none); the traces here have none.
3. The slab plan's extent against the live peak on the same traces (the issue's goal: within 5 %).

    python3 tools/bench/memory_vs_torch.py [--trace h200_trace.tsv] [--quick]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(p) for p in sorted((ROOT / "packages").glob("*/src"))]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # host_timing, beside this file

from host_timing import per_call_us  # noqa: E402

MiB = 1 << 20
SIZES = (4096, 1 * MiB, 8 * MiB, 256 * MiB)
CHUNKS = (2 * MiB, 8 * MiB, 32 * MiB)


def per_pair_us(fn, pairs: int) -> float:
    return per_call_us(fn, pairs, batches=7, warmup=1, pick=statistics.median)


def latency_table(pairs: int) -> list[dict]:
    import nbx.core as nbx
    import torch
    from nbx.core.device import Device
    from nbx.devices import nvidia
    from nbx.memory import allocator

    dev = Device("cuda", 0)
    nbx.zeros(1, device="cuda")
    pool = allocator.get_allocator("cuda").pool(dev)
    stream = nvidia.current_stream(0)
    torch_stream = torch.cuda.current_stream()
    rows = []
    print(f"\n1. cached allocate + free, microseconds per pair (median of 7 batches of {pairs}; host time)")
    print(f"{'bytes':>12} {'nbx pool':>10} {'torch raw':>10} {'ratio':>7}   {'nbx.empty':>10} {'torch.empty':>12} "
          f"{'ratio':>7}")
    for size in SIZES:
        nbx_raw = per_pair_us(lambda n=size: pool.allocate(n, stream).release(), pairs)
        torch_raw = per_pair_us(lambda n=size: torch.cuda.caching_allocator_delete(
            torch.cuda.caching_allocator_alloc(n, 0, torch_stream)), pairs)
        nbx_t = per_pair_us(lambda n=size: nbx.empty((n,), dtype="uint8", device="cuda"), pairs)
        torch_t = per_pair_us(lambda n=size: torch.empty(n, dtype=torch.uint8, device="cuda"), pairs)
        rows.append(dict(bytes=size, nbx_pool_us=nbx_raw, torch_raw_us=torch_raw, nbx_empty_us=nbx_t,
                         torch_empty_us=torch_t))
        print(f"{size:>12} {nbx_raw:>10.2f} {torch_raw:>10.2f} {nbx_raw / torch_raw:>7.2f}   {nbx_t:>10.2f} "
              f"{torch_t:>12.2f} {nbx_t / torch_t:>7.2f}", flush=True)
    return rows


def torch_replay(paths: list[str]) -> dict:
    """Replay traces through torch's caching allocator in this process, one after the other; the peaks
    of each (child mode: torch's allocator settings are read when CUDA starts, so each setting gets a process)."""
    import torch
    from nbx.memory.trace import read_trace

    torch.cuda.init()
    alloc, delete = torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete
    out = {}
    for path in paths:
        trace = read_trace(path)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        streams = {0: torch.cuda.current_stream()}
        ptrs = {}
        t0 = time.perf_counter()
        for e in trace.events:
            if e.event == "alloc":
                s = streams.get(e.stream)
                if s is None:
                    s = streams[e.stream] = torch.cuda.Stream()
                ptrs[e.block] = alloc(e.nbytes, 0, s) if e.nbytes else None
            elif e.event == "free":
                p = ptrs.pop(e.block)
                if p is not None:
                    delete(p)
            elif e.event == "sync":
                torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        for p in ptrs.values():
            if p is not None:
                delete(p)
        out[path] = dict(reserved_peak=torch.cuda.max_memory_reserved(),
                         allocated_peak=torch.cuda.max_memory_allocated(), seconds=seconds)
    return out


def torch_replays(paths: list[str], conf: str | None) -> dict:
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    done = subprocess.run([sys.executable, __file__, "--torch-replay", *paths], env=env, capture_output=True,
                          text=True, timeout=300)
    if done.returncode:
        raise RuntimeError(f"torch replay ({conf or 'default'}) failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def device_replay(trace, chunk: int | None) -> dict:
    """Replay through nbx's Pool on this GPU (driver segments, or a range of chunk bytes)."""
    from nbx.devices import nvidia
    from nbx.devices.nvidia import memory, runtime
    from nbx.memory.expandable import ExpandableRange
    from nbx.memory.pool import NBX, Pool
    from nbx.memory.sources import DriverSource

    total = runtime.memory_info(0)[1]
    rng = ExpandableRange(memory.CudaPhysicalMemory(0), chunk, memory.RANGE_PER_MEMORY * total) if chunk else None
    pool = Pool(DriverSource(runtime.malloc, runtime.free, 0, runtime.memory_info), NBX, parked_fraction=1.0,
                events=memory.CudaStreamEvents(0), synchronize=lambda: runtime.synchronize(0), expandable=rng)
    streams = {0: nvidia.current_stream(0)}
    blocks = {}
    t0 = time.perf_counter()
    for e in trace.events:
        if e.event in ("alloc", "record") and e.stream not in streams:
            streams[e.stream] = nvidia.Stream(0)
        if e.event == "alloc":
            blocks[e.block] = pool.allocate(e.nbytes, streams[e.stream])
        elif e.event == "free":
            blocks.pop(e.block).release()
        elif e.event == "record":
            pool.record_stream(blocks[e.block], streams[e.stream])
        else:
            runtime.synchronize(0)
    seconds = time.perf_counter() - t0
    stats = pool.stats()
    blocks.clear()
    gc.collect()
    pool.empty_cache()
    if rng is not None:
        rng.close()
    return dict(reserved_peak=stats.reserved_peak, allocated_peak=stats.allocated_peak, seconds=seconds)


def fragmentation_table(name: str, trace, chunks, torch_peaks: dict) -> dict:
    from nbx.memory.pool import NBX, simulate

    live = trace.live_peak
    print(f"\n2. {name}: {len(trace)} rows, live at peak {live / MiB:.1f} MiB ({trace.meta.get('source', '')[:80]})")
    print(f"{'allocator':44} {'reserved at peak':>17} {'/ live':>8} {'allocated at peak':>18}")
    rows = {}

    def show(label, reserved, allocated):
        rows[label] = dict(reserved_peak=reserved, allocated_peak=allocated, ratio=reserved / live)
        print(f"{label:44} {reserved / MiB:>13.1f} MiB {reserved / live:>8.4f} {allocated / MiB:>14.1f} MiB",
              flush=True)

    sim = simulate(trace, NBX)
    show("nbx simulate, driver segments", sim.reserved_peak, sim.allocated_peak)
    dev = device_replay(trace, None)
    show("nbx on this GPU, driver segments", dev["reserved_peak"], dev["allocated_peak"])
    rows["device_matches_simulate"] = dev["reserved_peak"] == sim.reserved_peak
    for chunk in chunks:
        r = simulate(trace, NBX, vmm_chunk=chunk)
        show(f"nbx simulate, expandable range {chunk // MiB} MiB chunks", r.reserved_peak, r.allocated_peak)
    dev_range = device_replay(trace, chunks[0])
    show(f"nbx on this GPU, range of {chunks[0] // MiB} MiB chunks", dev_range["reserved_peak"],
         dev_range["allocated_peak"])
    rows["range_device_matches_simulate"] = (
        dev_range["reserved_peak"] == simulate(trace, NBX, vmm_chunk=chunks[0]).reserved_peak)
    for conf, peaks in torch_peaks.items():
        t = peaks[trace.meta["path"]]
        show(f"torch {torch_version()}, {conf}", t["reserved_peak"], t["allocated_peak"])
    print(f"device replays match simulate: segments {rows['device_matches_simulate']}, "
          f"range {rows['range_device_matches_simulate']}")
    return rows


def slab_table(name: str, trace) -> dict:
    from nbx.memory import slab

    out = {}
    print(f"\n3. slab plan, {name}")
    print(f"{'run':24} {'live peak':>12} {'first fit':>12} {'x':>7} {'greedy by size':>15} {'x':>7} {'within 5 %':>10}")
    for label, skip in (("whole run", False), ("without the weights", True)):
        plan = slab.greedy_by_size(slab.events_from_trace(trace, alignment=256, skip_whole_run=skip))
        out[label] = dict(live_peak=plan.live_peak, first_fit=plan.first_fit_extent, extent=plan.extent)
        ratio = plan.extent / plan.live_peak
        print(f"{label:24} {plan.live_peak / MiB:8.1f} MiB {plan.first_fit_extent / MiB:8.1f} MiB "
              f"{plan.first_fit_extent / plan.live_peak:7.4f} {plan.extent / MiB:11.1f} MiB {ratio:7.4f} "
              f"{'yes' if ratio <= 1.05 else 'NO':>10}")
    return out


def torch_version() -> str:
    import torch
    return torch.__version__


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="append", default=[], help="a trace file (repeatable)")
    parser.add_argument("--quick", action="store_true", help="fewer timing pairs")
    parser.add_argument("--torch-replay", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.torch_replay:
        print(json.dumps(torch_replay(args.torch_replay)))
        return 0

    from nbx.core import device_files
    from nbx.core.device import Device
    from nbx.devices import nvidia
    from nbx.memory.trace import read_trace, shipped_traces

    t0 = time.perf_counter()
    name = nvidia.device_properties(0).name
    print(f"memory_vs_torch on {name}, torch {torch_version()}")
    results = {"device": name, "latency": latency_table(200 if args.quick else 2000)}
    facts = device_files.in_force(Device("cuda", 0))
    stated = (facts.value("memory.vmm.chunk_bytes"),) if "memory.vmm.chunk_bytes" in facts else ()
    chunks = tuple(dict.fromkeys(stated + CHUNKS))  # the device file's chunk first (replayed on the GPU too)
    folder = ROOT / "packages/nbx-memory/src/nbx/memory/traces"
    paths = [folder / n for n in shipped_traces()] + [Path(p) for p in args.trace if Path(p).exists()]
    for p in args.trace:
        if not Path(p).exists():
            print(f"\n(no trace at {p}: skipped)")
    torch_peaks = {conf or "default": torch_replays([str(p) for p in paths], conf)
                   for conf in (None, "expandable_segments:True")}
    for path in paths:
        trace = read_trace(path)
        trace.meta["path"] = str(path)
        results[path.name] = dict(fragmentation=fragmentation_table(path.name, trace, chunks, torch_peaks),
                                  slab=slab_table(path.name, trace))
    print(f"\nresults (JSON): {json.dumps(results)}")
    print(f"memory_vs_torch took {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
