"""What a CUDA device reports about itself: read through cudaDeviceGetAttribute (stable across
CUDA 12 and 13, unlike the cudaDeviceProp struct) and the driver API for name and memory."""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

from . import driver_api, runtime

# cudaDeviceAttr values (driver_types.h); the same in CUDA 12 and 13
ATTRIBUTES = {
    "max_threads_per_block": 1,
    "shared_memory_per_block": 8,
    "warp_size": 10,
    "registers_per_block": 12,
    "clock_khz": 13,
    "sm_count": 16,
    "memory_clock_khz": 36,
    "memory_bus_width_bits": 37,
    "l2_cache_bytes": 38,
    "max_threads_per_sm": 39,
    "async_engine_count": 40,
    "unified_addressing": 41,
    "pci_bus_id": 33,
    "pci_device_id": 34,
    "pci_domain_id": 50,
    "compute_capability_major": 75,
    "compute_capability_minor": 76,
    "shared_memory_per_sm": 81,
    "registers_per_sm": 82,
    "cooperative_launch": 95,
    "shared_memory_per_block_optin": 97,
    "max_blocks_per_sm": 106,
    "max_persisting_l2_bytes": 108,
    "reserved_shared_memory_per_block": 111,
    "cluster_launch": 120,
}


@dataclass(frozen=True)
class DeviceProperties:
    index: int
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    total_memory: int
    l2_cache_bytes: int
    shared_memory_per_block: int        # without opting in
    shared_memory_per_block_optin: int  # the most a kernel may ask for (cudaFuncSetAttribute)
    shared_memory_per_sm: int
    reserved_shared_memory_per_block: int
    registers_per_block: int
    registers_per_sm: int
    warp_size: int
    max_threads_per_block: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    clock_khz: int
    memory_clock_khz: int
    memory_bus_width_bits: int
    async_engine_count: int
    max_persisting_l2_bytes: int
    cooperative_launch: bool
    cluster_launch: bool
    pci_bus_id: str
    stream_priorities: tuple[int, int]  # (lowest, highest); a higher priority is a lower number

    @property
    def arch(self) -> str:
        """The target string device files are matched by, e.g. 'sm_90'."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    def as_dict(self) -> dict:
        return asdict(self)


@functools.cache
def properties(index: int) -> DeviceProperties:
    runtime.check_ordinal(index)
    a = {key: runtime.attribute(code, index) for key, code in ATTRIBUTES.items()}
    with runtime.device_guard(index):
        name = driver_api.device_name(index)
        total = driver_api.total_memory(index)
        least, greatest = stream_priority_range(index)
    return DeviceProperties(
        index=index, name=name,
        compute_capability=(a["compute_capability_major"], a["compute_capability_minor"]),
        sm_count=a["sm_count"], total_memory=total, l2_cache_bytes=a["l2_cache_bytes"],
        shared_memory_per_block=a["shared_memory_per_block"],
        shared_memory_per_block_optin=a["shared_memory_per_block_optin"],
        shared_memory_per_sm=a["shared_memory_per_sm"],
        reserved_shared_memory_per_block=a["reserved_shared_memory_per_block"],
        registers_per_block=a["registers_per_block"], registers_per_sm=a["registers_per_sm"],
        warp_size=a["warp_size"], max_threads_per_block=a["max_threads_per_block"],
        max_threads_per_sm=a["max_threads_per_sm"], max_blocks_per_sm=a["max_blocks_per_sm"],
        clock_khz=a["clock_khz"], memory_clock_khz=a["memory_clock_khz"],
        memory_bus_width_bits=a["memory_bus_width_bits"], async_engine_count=a["async_engine_count"],
        max_persisting_l2_bytes=a["max_persisting_l2_bytes"],
        cooperative_launch=bool(a["cooperative_launch"]), cluster_launch=bool(a["cluster_launch"]),
        pci_bus_id=f"{a['pci_domain_id']:08X}:{a['pci_bus_id']:02X}:{a['pci_device_id']:02X}.0",
        stream_priorities=(least, greatest))


def compute_capability(index: int) -> tuple[int, int]:
    return properties(index).compute_capability


def stream_priority_range(index: int) -> tuple[int, int]:
    """(least, greatest) stream priority; greatest is the numerically lowest (e.g. (0, -5))."""
    from ctypes import byref, c_int
    least, greatest = c_int(), c_int()
    with runtime.device_guard(index):
        runtime.rt().call("cudaDeviceGetStreamPriorityRange", byref(least), byref(greatest))
    return least.value, greatest.value
