"""Storage: a run of bytes on one device, shared by every tensor viewing it."""
from __future__ import annotations

import numpy as np

from .device import Device
from .errors import IndexingError


class Storage:
    """nbytes of memory at data_ptr() on device.

    `host` is a uint8 numpy array over the bytes when the device's memory is host memory (cpu,
    interp), else None. `owner` keeps alive whatever the bytes belong to (an allocator block,
    a foreign array, an mmap, a DLPack capsule); the memory is released when the last tensor
    viewing it is gone.
    """

    __slots__ = ("device", "nbytes", "_ptr", "host", "owner", "readonly", "__weakref__")

    def __init__(self, device: Device, nbytes: int, ptr: int, host: np.ndarray | None = None,
                 owner=None, readonly: bool = False):
        self.device = device
        self.nbytes = nbytes
        self._ptr = ptr
        self.host = host
        self.owner = owner
        self.readonly = readonly

    def data_ptr(self) -> int:
        return self._ptr

    def check_range(self, byte_offset: int, nbytes: int, what: str, runtime: str, error=None) -> None:
        """Refuse, before any call into the device's runtime, a byte range not inside this storage."""
        if byte_offset < 0 or nbytes < 0 or byte_offset + nbytes > self.nbytes:
            raise (error or IndexingError)(
                f"{what} of {nbytes} bytes at byte offset {byte_offset} is outside the {self.nbytes}-byte "
                f"storage on {self.device} (refused before calling {runtime})")

    def __repr__(self) -> str:
        return f"Storage({self.device}, {self.nbytes} bytes at 0x{self._ptr:x})"

    @classmethod
    def from_host(cls, device: Device, buffer: np.ndarray, owner=None) -> "Storage":
        """Wrap a contiguous uint8 host array without copying."""
        assert buffer.dtype == np.uint8 and buffer.ndim == 1
        return cls(device, buffer.nbytes, buffer.ctypes.data if buffer.nbytes else 0, host=buffer,
                   owner=owner if owner is not None else buffer, readonly=not buffer.flags.writeable)


class _HostMemory:
    """Exposes raw host memory to numpy and keeps its owner alive as the array's base."""

    def __init__(self, ptr: int, nbytes: int, owner, readonly: bool):
        self.owner = owner
        self.__array_interface__ = {"data": (ptr, readonly), "shape": (nbytes,), "typestr": "|u1", "version": 3}


def host_bytes(ptr: int, nbytes: int, owner, readonly: bool = False) -> np.ndarray:
    """A uint8 array over nbytes of host memory at ptr; every view of it keeps owner alive."""
    if nbytes == 0:
        return np.empty(0, np.uint8)
    return np.asarray(_HostMemory(ptr, nbytes, owner, readonly))
