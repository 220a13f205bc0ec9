"""The 'hip' backend of nbx.core: memory through nbx.memory's allocator, copies through hipMemcpy.

Every call makes the storage's own device current first. Byte ranges are checked against the
storage before HIP is called. hipMemcpy between host and device returns once the copy is done
(nbx's host arrays are pageable), so uploads and downloads need no extra wait.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np
from nbx.core.device import Device
from nbx.core.errors import DeviceError
from nbx.core.storage import Storage

from .hip import runtime
from .props import MEMCPY_DEVICE_TO_DEVICE, MEMCPY_DEVICE_TO_HOST, MEMCPY_HOST_TO_DEVICE


def check_range(storage: Storage, byte_offset: int, nbytes: int, what: str) -> None:
    """A byte range outside the storage is refused before HIP is called."""
    storage.check_range(byte_offset, nbytes, what, "HIP")


class HipBackend:
    name = "hip"
    runs_triton_kernels = True   # nbx.kernels' implementations serve it (nbx.core.dispatch.TRITON)
    indexed = True
    host_accessible = False
    dlpack_device_type = 10  # kDLROCM

    def __init__(self):
        self._started = False
        self._lock = threading.Lock()
        self._targets: dict[int, str] = {}

    # ---- devices ---------------------------------------------------------------------------
    def device_count(self) -> int:
        return runtime().device_count()

    def current_device(self) -> int:
        return runtime().get_device()

    def device_name(self, index: int) -> str:
        return runtime().device_name(index)

    def target(self, device: Device) -> str:
        """The device's gcnArchName, e.g. 'gfx942:sramecc+:xnack-'; device files match its prefix."""
        index = self._index(device)
        with self._lock:
            if index not in self._targets:
                runtime().check_ordinal(index)
                self._targets[index] = runtime().arch_name(index)
            return self._targets[index]

    def synchronize(self, device: Device) -> None:
        runtime().synchronize(self._index(device))

    @contextmanager
    def device_guard(self, device: Device):
        """device is HIP's current device inside the block; the previous one comes back after."""
        index, previous = self._index(device), runtime().get_device()
        if index != previous:
            runtime().set_device(index)
        try:
            yield
        finally:
            if index != previous:
                runtime().set_device(previous)

    def _index(self, device: Device) -> int:
        if device.type != self.name:
            raise DeviceError(f"the hip backend was handed a {device.type} device ({device})")
        return 0 if device.index is None else device.index

    def start(self) -> None:
        """Once per process, at first allocation: the plain allocator unless a pool is registered."""
        with self._lock:
            if self._started:
                return
            from nbx.memory import allocator
            allocator.register_default(  # the runtime is opened only when no allocator is registered
                self.name, lambda: allocator.PlainDeviceAllocator("hip-plain", runtime().malloc, runtime().free))
            self._started = True

    # ---- memory ----------------------------------------------------------------------------
    def allocate(self, nbytes: int, device: Device) -> Storage:
        self.start()
        from nbx.memory.allocator import get_allocator
        index = self._index(device)
        runtime().check_ordinal(index)
        block = get_allocator(self.name).allocate(nbytes, Device(self.name, index))
        return Storage(Device(self.name, index), nbytes, block.ptr, owner=block)

    def upload(self, storage: Storage, byte_offset: int, data: np.ndarray) -> None:
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        check_range(storage, byte_offset, flat.nbytes, "upload")
        if flat.nbytes:
            rt = runtime()
            rt.set_device(self._index(storage.device))
            rt.memcpy(storage.data_ptr() + byte_offset, flat.ctypes.data, flat.nbytes, MEMCPY_HOST_TO_DEVICE)

    def download(self, storage: Storage, byte_offset: int, nbytes: int) -> np.ndarray:
        check_range(storage, byte_offset, nbytes, "download")
        out = np.empty(nbytes, np.uint8)
        if nbytes:
            rt = runtime()
            rt.set_device(self._index(storage.device))
            rt.memcpy(out.ctypes.data, storage.data_ptr() + byte_offset, nbytes, MEMCPY_DEVICE_TO_HOST)
        return out

    def copy(self, dst: Storage, dst_offset: int, src: Storage, src_offset: int, nbytes: int) -> None:
        check_range(dst, dst_offset, nbytes, "copy destination")
        check_range(src, src_offset, nbytes, "copy source")
        if not nbytes:
            return
        rt = runtime()
        d, s = self._index(dst.device), self._index(src.device)
        rt.set_device(d)
        if d == s:
            rt.memcpy(dst.data_ptr() + dst_offset, src.data_ptr() + src_offset, nbytes, MEMCPY_DEVICE_TO_DEVICE)
        else:
            rt.memcpy_peer(dst.data_ptr() + dst_offset, d, src.data_ptr() + src_offset, s, nbytes)

    def fill_bytes(self, storage: Storage, byte_offset: int, nbytes: int, value: int) -> None:
        """Set nbytes of the storage to one byte value (hipMemset)."""
        check_range(storage, byte_offset, nbytes, "fill")
        if nbytes:
            rt = runtime()
            rt.set_device(self._index(storage.device))
            rt.memset(storage.data_ptr() + byte_offset, value, nbytes)


BACKEND = HipBackend()
