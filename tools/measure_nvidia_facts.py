#!/usr/bin/env python3
"""Measure what an NVIDIA GPU reports about itself, through nbx's torch-free CUDA backend, and print
the facts as YAML ready for devices/nvidia/<arch>.yml, each with its provenance:
'measured on <device name> <date> by tools/measure_nvidia_facts.py'.

Reads attributes (SM count, shared memory per block default and opt-in, registers, warp size, L2,
memory, clocks), the virtual-memory granularity (cuMemGetAllocationGranularity), and times copies
with CUDA events: device-to-device (bytes read + written), host-to-device and device-to-host from
pinned memory, and a device memset. Run on the GPU machine: `python3 tools/measure_nvidia_facts.py`.
Changes no device setting.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for src in sorted(ROOT.glob("packages/*/src")):
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))

import nbx.core as nbx  # noqa: E402
from nbx.devices import nvidia  # noqa: E402
from nbx.devices.nvidia import driver_api, runtime  # noqa: E402


def timed_ms(action, stream, repeats: int) -> float:
    """Median milliseconds of action() on stream, timed with events, after one warm-up."""
    action()
    stream.synchronize()
    times = []
    for _ in range(repeats):
        start, end = nvidia.Event().record(stream), nvidia.Event()
        action()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def bandwidths(index: int, nbytes: int, repeats: int) -> dict[str, float]:
    """GB/s (1e9 bytes per second) of the copies nbx makes."""
    with nvidia.device_guard(index):
        stream = nvidia.Stream(index)
        src = nbx.empty((nbytes,), dtype="uint8", device=f"cuda:{index}").data_ptr()
        dst_tensor = nbx.empty((nbytes,), dtype="uint8", device=f"cuda:{index}")
        dst = dst_tensor.data_ptr()
        pinned = nvidia.pinned_empty(nbytes)
        pinned[:] = 1
        host, s = pinned.ctypes.data, stream.handle

        def copy(to, frm, kind):
            return timed_ms(lambda: runtime.memcpy_async(to, frm, nbytes, kind, s), stream, repeats)

        d2d = copy(dst, src, runtime.DEVICE_TO_DEVICE)
        h2d = copy(dst, host, runtime.HOST_TO_DEVICE)
        d2h = copy(host, src, runtime.DEVICE_TO_HOST)
        fill = timed_ms(lambda: runtime.memset_async(dst, 0, nbytes, s), stream, repeats)
    gb = nbytes / 1e9
    return {"copy_device_to_device_gbps": 2 * gb / (d2d / 1e3), "copy_host_to_device_pinned_gbps": gb / (h2d / 1e3),
            "copy_device_to_host_pinned_gbps": gb / (d2h / 1e3), "memset_gbps": gb / (fill / 1e3)}


# fact name -> (DeviceProperties field, where the value comes from)
ATTRIBUTE_FACTS = {
    "sm_count": ("sm_count", "cudaDevAttrMultiProcessorCount"),
    "warp_size": ("warp_size", "cudaDevAttrWarpSize"),
    "shared_memory_per_block_bytes": ("shared_memory_per_block", "cudaDevAttrMaxSharedMemoryPerBlock"),
    "shared_memory_per_block_optin_bytes": ("shared_memory_per_block_optin", "cudaDevAttrMaxSharedMemoryPerBlockOptin"),
    "shared_memory_per_sm_bytes": ("shared_memory_per_sm", "cudaDevAttrMaxSharedMemoryPerMultiprocessor"),
    "reserved_shared_memory_per_block_bytes": ("reserved_shared_memory_per_block",
                                               "cudaDevAttrReservedSharedMemoryPerBlock"),
    "registers_per_block": ("registers_per_block", "cudaDevAttrMaxRegistersPerBlock"),
    "registers_per_sm": ("registers_per_sm", "cudaDevAttrMaxRegistersPerMultiprocessor"),
    "max_threads_per_block": ("max_threads_per_block", "cudaDevAttrMaxThreadsPerBlock"),
    "max_threads_per_sm": ("max_threads_per_sm", "cudaDevAttrMaxThreadsPerMultiProcessor"),
    "max_blocks_per_sm": ("max_blocks_per_sm", "cudaDevAttrMaxBlocksPerMultiprocessor"),
    "l2_cache_bytes": ("l2_cache_bytes", "cudaDevAttrL2CacheSize"),
    "max_persisting_l2_bytes": ("max_persisting_l2_bytes", "cudaDevAttrMaxPersistingL2CacheSize"),
    "memory_bus_width_bits": ("memory_bus_width_bits", "cudaDevAttrGlobalMemoryBusWidth"),
    "async_engine_count": ("async_engine_count", "cudaDevAttrAsyncEngineCount"),
    "cluster_launch": ("cluster_launch", "cudaDevAttrClusterLaunch"),
}


def facts(index: int, nbytes: int, repeats: int) -> tuple[str, dict[str, tuple[object, str]]]:
    p = nvidia.device_properties(index)
    free, total = runtime.memory_info(index)
    with nvidia.device_guard(index):
        granularity = driver_api.allocation_granularity(index)
        recommended = driver_api.allocation_granularity(index, recommended=True)
    major, minor = p.compute_capability
    out: dict[str, tuple[object, str]] = {"compute_capability": (f"{major}.{minor}", "cudaDevAttrComputeCapability*")}
    out.update({key: (getattr(p, field), source) for key, (field, source) in ATTRIBUTE_FACTS.items()})
    out.update({
        "memory_total_bytes": (total, "cudaMemGetInfo"),
        "memory_free_bytes_at_measurement": (free, "cudaMemGetInfo"),
        "sm_clock_max_mhz": (p.clock_khz // 1000, "cudaDevAttrClockRate"),
        "memory_clock_max_mhz": (p.memory_clock_khz // 1000, "cudaDevAttrMemoryClockRate"),
        "memory_bandwidth_theoretical_gbps": (round(2 * p.memory_clock_khz * p.memory_bus_width_bits / 8 / 1e6, 1),
                                              "2 x memory clock x bus width (double data rate)"),
        "stream_priority_range": (list(p.stream_priorities), "cudaDeviceGetStreamPriorityRange (least, greatest)"),
        "vmm_granularity_bytes": (granularity, "cuMemGetAllocationGranularity MINIMUM, pinned device memory"),
        "vmm_granularity_recommended_bytes": (recommended, "cuMemGetAllocationGranularity RECOMMENDED"),
    })
    for key, value in bandwidths(index, nbytes, repeats).items():
        how = f"CUDA events, median of {repeats}, {nbytes >> 20} MiB"
        if key.startswith("copy_device_to_device"):
            how += ", bytes read + written"
        out[key] = (round(value, 1), how)
    return p.name, out


def _version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def to_yaml(name: str, found: dict[str, tuple[object, str]], date: str) -> str:
    provenance = f"measured on {name} {date} by tools/measure_nvidia_facts.py"
    lines = [f"# {provenance}",
             f"# CUDA runtime {_version(runtime.runtime_version())} ({runtime.rt().path}), "
             f"driver API {_version(runtime.driver_version())}",
             f"device: {name!r}", "facts:"]
    for key, (value, how) in found.items():
        shown = str(value).lower() if isinstance(value, bool) else (f"'{value}'" if isinstance(value, str) else value)
        lines.append(f"  {key}: {{value: {shown}, provenance: '{provenance} ({how})'}}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--bytes", type=int, default=1 << 30, help="copy size for the bandwidth figures")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    name, found = facts(args.device, args.bytes, args.repeats)
    print(to_yaml(name, found, _dt.date.today().isoformat()), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
