"""The CPU backend: host memory, numpy references as the op implementations."""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from .device import CPU, Device, register_backend
from .storage import Storage

ALIGNMENT = 64  # bytes; what AVX-512 loads and most DLPack consumers prefer


def aligned_host_buffer(nbytes: int) -> np.ndarray:
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + nbytes]


class HostMemoryBackend:
    """Memory that numpy can view in place; the base of `cpu` and of Triton's interpreter device."""

    indexed = False
    host_accessible = True

    def __init__(self, name: str):
        self.name = name

    def device_count(self) -> int:
        return 1

    def current_device(self) -> int:
        return 0

    def allocate(self, nbytes: int, device: Device) -> Storage:
        return Storage.from_host(device, aligned_host_buffer(nbytes))

    def upload(self, storage: Storage, byte_offset: int, data: np.ndarray) -> None:
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        storage.host[byte_offset:byte_offset + flat.nbytes] = flat

    def download(self, storage: Storage, byte_offset: int, nbytes: int) -> np.ndarray:
        return storage.host[byte_offset:byte_offset + nbytes].copy()

    def copy(self, dst: Storage, dst_offset: int, src: Storage, src_offset: int, nbytes: int) -> None:
        dst.host[dst_offset:dst_offset + nbytes] = src.host[src_offset:src_offset + nbytes]

    def synchronize(self, device: Device) -> None:
        return None

    def device_guard(self, device: Device):
        return nullcontext()


CPU_BACKEND = HostMemoryBackend(CPU.type)
register_backend(CPU_BACKEND)
