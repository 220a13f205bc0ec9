#!/usr/bin/env python3
"""Measure the expandable range's chunk on an NVIDIA GPU: the smallest multiple of the virtual-memory
granularity whose growth (cuMemCreate + cuMemMap + cuMemSetAccess) costs no more host time than a
cudaMalloc of the same size, and print it as YAML ready for devices/nvidia/<arch>.yml
(memory.vmm.chunk_bytes) with its provenance, after the table it was read from.

The sizes tried are the granularity times 1, 2, 4, ... up to --max-mib. Each is timed `--repeats`
times, alternating the two ways so drift hits both alike, each call after a device synchronize, through
the very adapters the pool uses (nbx.devices.nvidia.memory.CudaPhysicalMemory, runtime.malloc): what
the pool pays per chunk. What is undone after each (cuMemUnmap + cuMemRelease, cudaFree) is timed too
and shown, not compared. Medians in microseconds. Changes no device setting; gives everything back.

    python3 tools/measure_vmm_chunk.py [--device 0] [--repeats 25] [--max-mib 512]
"""
from __future__ import annotations

import argparse
import datetime as _dt
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for src in sorted(ROOT.glob("packages/*/src")):
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))

from nbx.devices import nvidia  # noqa: E402
from nbx.devices.nvidia import runtime  # noqa: E402
from nbx.devices.nvidia.memory import CudaPhysicalMemory  # noqa: E402

MiB = 1 << 20


def _us(t0: int) -> float:
    return (time.perf_counter_ns() - t0) / 1e3


def time_map(phys: CudaPhysicalMemory, base: int, size: int) -> tuple[float, float]:
    """(grow, undo) microseconds: create + map + set access of one chunk of size at base; unmap + release."""
    runtime.synchronize(phys.index)
    t0 = time.perf_counter_ns()
    handle = phys.create(size)
    if handle is None:
        raise MemoryError(f"cuMemCreate refused {size} bytes")
    phys.map(base, size, handle)  # cuMemMap + cuMemSetAccess
    grow = _us(t0)
    t0 = time.perf_counter_ns()
    phys.unmap(base, size)
    phys.release(handle)
    return grow, _us(t0)


def time_malloc(index: int, size: int) -> tuple[float, float]:
    runtime.synchronize(index)
    t0 = time.perf_counter_ns()
    ptr = runtime.malloc(size, index)
    grow = _us(t0)
    t0 = time.perf_counter_ns()
    runtime.free(ptr, index)
    return grow, _us(t0)


def measure(index: int, repeats: int, max_bytes: int):
    phys = CudaPhysicalMemory(index)
    g = phys.granularity
    sizes, k = [], 1
    while k * g <= max_bytes:
        sizes.append(k * g)
        k *= 2
    base = phys.reserve(sizes[-1])
    rows = []
    try:
        time_map(phys, base, g)  # first calls pay for lazy initialisation: not counted
        time_malloc(index, g)
        for size in sizes:
            maps, mallocs = [], []
            for _ in range(repeats):
                maps.append(time_map(phys, base, size))
                mallocs.append(time_malloc(index, size))
            rows.append((size, statistics.median(m[0] for m in maps), statistics.median(m[0] for m in mallocs),
                         statistics.median(m[1] for m in maps), statistics.median(m[1] for m in mallocs)))
    finally:
        phys.free_range(base, sizes[-1])
    return g, rows


def choose(rows):
    """The first (smallest) size whose growth costs no more than cudaMalloc's, or None."""
    for size, grow_map, grow_malloc, _, _ in rows:
        if grow_map <= grow_malloc:
            return size, grow_map, grow_malloc
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--max-mib", type=int, default=512)
    args = parser.parse_args(argv)
    name = nvidia.device_properties(args.device).name
    granularity, rows = measure(args.device, args.repeats, args.max_mib * MiB)
    print(f"# {name}: host time of growing by one chunk, medians of {args.repeats} (microseconds)")
    print(f"# {'chunk':>10} {'create+map+access':>18} {'cudaMalloc':>11} {'ratio':>6}   "
          f"{'unmap+release':>14} {'cudaFree':>9}")
    for size, gm, gc_, um, uc in rows:
        print(f"# {size // MiB:>6} MiB {gm:>18.1f} {gc_:>11.1f} {gm / gc_:>6.2f}   {um:>14.1f} {uc:>9.1f}")
    found = choose(rows)
    date = _dt.date.today().isoformat()
    how = (f"{name}, {date}, tools/measure_vmm_chunk.py")
    if found is None:
        print(f"# no chunk up to {args.max_mib} MiB grows as cheaply as cudaMalloc: memory.vmm.chunk_bytes stays "
              f"unstated (the pool keeps driver segments); measured {how}")
        return 0
    size, gm, gc_ = found
    print(f"# chosen: {size // MiB} MiB, the smallest multiple of the {granularity // MiB} MiB granularity whose "
          f"create+map+access ({gm:.1f} us) costs no more than cudaMalloc ({gc_:.1f} us)")
    print("memory:\n  vmm:\n    chunk_bytes:")
    print(f"      value: {size}")
    print(f'      measured: "{how}"')
    print(f"      # create+map+access {gm:.1f} us vs cudaMalloc {gc_:.1f} us (medians of {args.repeats}); "
          f"granularity {granularity}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
