"""The 'metal' backend of nbx.core: shared-storage MTLBuffers through nbx.memory's allocator.

Host copies wait for the stream (the GPU may still be writing) and then move the bytes on the host:
the buffers live in the machine's one memory. The target of the device is its name, lowercased and
hyphenated ('apple-m4-pro'); the stream's dispatch limits come from the device file of that target.
"""
from __future__ import annotations

import ctypes
import threading
from contextlib import nullcontext

import numpy as np
from nbx.core import device_files
from nbx.core.device import Device
from nbx.core.errors import DeviceError
from nbx.core.storage import Storage

from .runtime import load
from .stream import CommandStream, DispatchLimits


def check_range(storage: Storage, byte_offset: int, nbytes: int, what: str) -> None:
    """A byte range outside the storage is refused before Metal is called."""
    storage.check_range(byte_offset, nbytes, what, "Metal")


class MetalBackend:
    name = "metal"
    runs_triton_kernels = True   # nbx.kernels' implementations serve it (nbx.core.dispatch.TRITON)
    indexed = True
    host_accessible = False   # the bytes are host memory, but only safe to read once the stream is done
    dlpack_device_type = 8    # kDLMetal

    def __init__(self):
        self._lock = threading.Lock()
        self._stream: CommandStream | None = None
        self._started = False

    def device_count(self) -> int:
        load()
        return 1

    def current_device(self) -> int:
        return 0

    def device_name(self, index: int) -> str:
        self._index(Device(self.name, index))
        return load().name()

    def device_guard(self, device: Device):
        """A Mac has one GPU: it is always the current one."""
        return nullcontext()

    def target(self, device: Device) -> str:
        self._index(device)
        return load().target()

    def stream(self) -> CommandStream:
        """The device's command stream, its limits read from the device file in force."""
        with self._lock:
            if self._stream is None:
                rt = load()
                limits = DispatchLimits.from_facts(device_files.for_arch(rt.target()))
                self._stream = CommandStream(rt.queue, limits)
            return self._stream

    def synchronize(self, device: Device) -> None:
        self._index(device)
        self.stream().synchronize()

    def _index(self, device: Device) -> int:
        if device.type != self.name or device.index not in (None, 0):
            raise DeviceError(f"the metal backend serves metal:0 only, not {device}")
        return 0

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            from nbx.memory import allocator
            allocator.register_default(  # the runtime is opened only when no allocator is registered
                self.name, lambda: allocator.PlainDeviceAllocator("metal-plain", load().malloc, load().free))
            self._started = True

    def allocate(self, nbytes: int, device: Device) -> Storage:
        self._index(device)
        self.start()
        from nbx.memory.allocator import get_allocator
        block = get_allocator(self.name).allocate(nbytes, Device(self.name, 0))
        return Storage(Device(self.name, 0), nbytes, block.ptr, owner=block)

    def upload(self, storage: Storage, byte_offset: int, data: np.ndarray) -> None:
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        check_range(storage, byte_offset, flat.nbytes, "upload")
        if flat.nbytes:
            self.stream().synchronize()
            ctypes.memmove(storage.data_ptr() + byte_offset, flat.ctypes.data, flat.nbytes)

    def download(self, storage: Storage, byte_offset: int, nbytes: int) -> np.ndarray:
        check_range(storage, byte_offset, nbytes, "download")
        out = np.empty(nbytes, np.uint8)
        if nbytes:
            self.stream().synchronize()
            ctypes.memmove(out.ctypes.data, storage.data_ptr() + byte_offset, nbytes)
        return out

    def copy(self, dst: Storage, dst_offset: int, src: Storage, src_offset: int, nbytes: int) -> None:
        check_range(dst, dst_offset, nbytes, "copy destination")
        check_range(src, src_offset, nbytes, "copy source")
        if nbytes:
            self.stream().synchronize()
            ctypes.memmove(dst.data_ptr() + dst_offset, src.data_ptr() + src_offset, nbytes)


BACKEND = MetalBackend()
