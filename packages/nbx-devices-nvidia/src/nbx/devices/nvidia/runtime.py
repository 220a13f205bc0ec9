"""The CUDA runtime (libcudart) through ctypes: devices, memory, copies and memset.

Every call goes through `call()`, which turns a failing return code into a CudaError carrying
the function, the code and its name (cudaGetErrorName). The library is opened at first use.
Pointers are Python ints; streams are raw cudaStream_t handles (0 is the legacy default stream).
"""
from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from ctypes import POINTER, byref, c_char_p, c_float, c_int, c_size_t, c_uint, c_void_p

import numpy as np
from nbx.core.errors import DeviceError, OutOfMemoryError

from . import library
from .errors import CudaError, CudaLibraryNotFound, NvidiaDriverNotFound

SUCCESS = 0
ERROR_MEMORY_ALLOCATION = 2
ERROR_CUDART_UNLOADING = 4
ERROR_INSUFFICIENT_DRIVER = 35
ERROR_NO_DEVICE = 100
ERROR_NOT_READY = 600
ERROR_PEER_ACCESS_ALREADY_ENABLED = 704

# cudaMemcpyKind
HOST_TO_HOST, HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE, DEFAULT = 0, 1, 2, 3, 4

HOST_ALLOC_PORTABLE = 0x01   # pinned memory seen as pinned by every CUDA context
STREAM_NON_BLOCKING = 0x01
EVENT_BLOCKING_SYNC = 0x01
EVENT_DISABLE_TIMING = 0x02

_IP, _SP, _VP = POINTER(c_int), POINTER(c_size_t), POINTER(c_void_p)
PROTOTYPES: dict[str, list] = {
    "cudaGetLastError": [],
    "cudaRuntimeGetVersion": [_IP],
    "cudaDriverGetVersion": [_IP],
    "cudaGetDeviceCount": [_IP],
    "cudaGetDevice": [_IP],
    "cudaSetDevice": [c_int],
    "cudaDeviceGetAttribute": [_IP, c_int, c_int],
    "cudaDeviceSynchronize": [],
    "cudaDeviceCanAccessPeer": [_IP, c_int, c_int],
    "cudaDeviceEnablePeerAccess": [c_int, c_uint],
    "cudaDeviceGetStreamPriorityRange": [_IP, _IP],
    "cudaMemGetInfo": [_SP, _SP],
    "cudaMalloc": [_VP, c_size_t],
    "cudaFree": [c_void_p],
    "cudaHostAlloc": [_VP, c_size_t, c_uint],
    "cudaFreeHost": [c_void_p],
    "cudaMemcpy": [c_void_p, c_void_p, c_size_t, c_int],
    "cudaMemcpyAsync": [c_void_p, c_void_p, c_size_t, c_int, c_void_p],
    "cudaMemcpy2DAsync": [c_void_p, c_size_t, c_void_p, c_size_t, c_size_t, c_size_t, c_int, c_void_p],
    "cudaMemcpyPeer": [c_void_p, c_int, c_void_p, c_int, c_size_t],
    "cudaMemcpyPeerAsync": [c_void_p, c_int, c_void_p, c_int, c_size_t, c_void_p],
    "cudaMemset": [c_void_p, c_int, c_size_t],
    "cudaMemsetAsync": [c_void_p, c_int, c_size_t, c_void_p],
    "cudaStreamCreateWithPriority": [_VP, c_uint, c_int],
    "cudaStreamDestroy": [c_void_p],
    "cudaStreamSynchronize": [c_void_p],
    "cudaStreamQuery": [c_void_p],
    "cudaStreamWaitEvent": [c_void_p, c_void_p, c_uint],
    "cudaEventCreateWithFlags": [_VP, c_uint],
    "cudaEventDestroy": [c_void_p],
    "cudaEventRecord": [c_void_p, c_void_p],
    "cudaEventQuery": [c_void_p],
    "cudaEventSynchronize": [c_void_p],
    "cudaEventElapsedTime": [POINTER(c_float), c_void_p, c_void_p],
}


class CudaRuntime:
    """One opened libcudart with its prototypes declared; `call` checks every return code."""

    def __init__(self, lib, path: str):
        self.lib = lib
        self.path = path
        for name, argtypes in PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.argtypes = argtypes
            fn.restype = c_int
        for name in ("cudaGetErrorName", "cudaGetErrorString"):
            fn = getattr(lib, name)
            fn.argtypes = [c_int]
            fn.restype = c_char_p

    def error_name(self, code: int) -> str:
        name = self.lib.cudaGetErrorName(code)
        return name.decode() if name else f"cudaError {code}"

    def error(self, function: str, code: int, context: str = "") -> CudaError:
        name = self.error_name(code)
        text = self.lib.cudaGetErrorString(code)
        self.lib.cudaGetLastError()  # a non-sticky error must not resurface in the next call
        if code == ERROR_INSUFFICIENT_DRIVER:  # reads as "upgrade your driver"; with no driver at all, say so
            try:
                library.open_library("driver")
            except CudaLibraryNotFound as missing:
                return NvidiaDriverNotFound(function, code, name, missing.tried)
        return CudaError(function, code, name, text.decode() if text else "", context)

    def call(self, function: str, *args, context: str = "") -> None:
        code = getattr(self.lib, function)(*args)
        if code != SUCCESS:
            raise self.error(function, code, context)

    def query(self, function: str, handle) -> bool:
        """cudaStreamQuery / cudaEventQuery: True when done, False when not ready yet."""
        code = getattr(self.lib, function)(handle)
        if code == SUCCESS:
            return True
        if code == ERROR_NOT_READY:
            self.lib.cudaGetLastError()
            return False
        raise self.error(function, code)


_lock = threading.Lock()
_runtime: CudaRuntime | None = None


def rt() -> CudaRuntime:
    """The process's CUDA runtime, opened at first use (CudaLibraryNotFound if there is none)."""
    global _runtime
    if _runtime is None:
        with _lock:
            if _runtime is None:
                lib, path = library.open_library("runtime")
                _runtime = CudaRuntime(lib, path)
    return _runtime


def available() -> bool:
    """True when a CUDA runtime opens and sees at least one device; never raises."""
    try:
        return device_count() > 0
    except DeviceError:
        return False


def _int_out(function: str, *args) -> int:
    value = c_int()
    rt().call(function, byref(value), *args)
    return value.value


def runtime_version() -> int:
    return _int_out("cudaRuntimeGetVersion")


def driver_version() -> int:
    return _int_out("cudaDriverGetVersion")


# ---- devices ---------------------------------------------------------------------------------
_count: int | None = None


def device_count() -> int:
    """Visible CUDA devices; 0 when the driver reports none. Counted once per process."""
    global _count
    if _count is None:
        value = c_int()
        code = rt().lib.cudaGetDeviceCount(byref(value))
        if code == ERROR_NO_DEVICE:
            rt().lib.cudaGetLastError()
            _count = 0
        elif code != SUCCESS:
            raise rt().error("cudaGetDeviceCount", code)
        else:
            _count = value.value
    return _count


def check_ordinal(index: int) -> int:
    count = device_count()
    if not isinstance(index, int) or not 0 <= index < count:
        raise DeviceError(f"cuda:{index} does not exist: {count} cuda device(s) found")
    return index


def get_device() -> int:
    return _int_out("cudaGetDevice")


def set_device(index: int) -> None:
    rt().call("cudaSetDevice", check_ordinal(index))


@contextmanager
def device_guard(index: int | None):
    """Make device `index` current for the block and restore the previous one after (None: no change)."""
    if index is None:
        yield
        return
    previous = get_device()
    if previous == index:
        yield
        return
    set_device(index)
    try:
        yield
    finally:
        set_device(previous)


def bind_context(index: int) -> None:
    """Make device index's primary context current on this thread before a driver-API call.

    Runtime calls bind it lazily; a driver call made first on a fresh thread would find none.
    """
    rt().call("cudaSetDevice", check_ordinal(index))


def attribute(attr: int, index: int) -> int:
    return _int_out("cudaDeviceGetAttribute", attr, check_ordinal(index))


def memory_info(index: int) -> tuple[int, int]:
    """(free, total) bytes of device memory, as the driver reports them now."""
    free, total = c_size_t(), c_size_t()
    with device_guard(index):
        rt().call("cudaMemGetInfo", byref(free), byref(total))
    return free.value, total.value


def synchronize(index: int | None = None) -> None:
    with device_guard(index):
        rt().call("cudaDeviceSynchronize")


def can_access_peer(index: int, peer: int) -> bool:
    return bool(_int_out("cudaDeviceCanAccessPeer", check_ordinal(index), check_ordinal(peer)))


_peer_enabled: set = set()


def enable_peer_access(index: int, peer: int) -> bool:
    """Let device index reach peer's memory directly (NVLink or PCIe), once per ordered pair, so that
    peer copies take the direct path instead of a staging through the host; False where the
    hardware cannot (cudaDeviceCanAccessPeer)."""
    if (index, peer) in _peer_enabled:
        return True
    if not can_access_peer(index, peer):
        return False
    with device_guard(index):
        code = rt().lib.cudaDeviceEnablePeerAccess(peer, 0)
        if code == ERROR_PEER_ACCESS_ALREADY_ENABLED:  # enabled by someone else: fine, clear the error
            rt().lib.cudaGetLastError()
        elif code != SUCCESS:
            raise rt().error("cudaDeviceEnablePeerAccess", code, f"cuda:{index} -> cuda:{peer}")
    _peer_enabled.add((index, peer))
    return True


# ---- memory ----------------------------------------------------------------------------------
def malloc(nbytes: int, index: int) -> int:
    """cudaMalloc on device index; OutOfMemoryError (with the device's free and total) when it cannot."""
    ptr = c_void_p()
    with device_guard(index):
        code = rt().lib.cudaMalloc(byref(ptr), nbytes)
        if code == ERROR_MEMORY_ALLOCATION:
            err = rt().error("cudaMalloc", code)
            free, total = memory_info(index)
            raise OutOfMemoryError(f"cuda:{index}: {err}; requested {nbytes} bytes, free {free} of {total}",
                                   requested=nbytes, free=free, total=total)
        if code != SUCCESS:
            raise rt().error("cudaMalloc", code, context=f"{nbytes} bytes on cuda:{index}")
    return ptr.value or 0


def free(ptr: int, index: int) -> None:
    with device_guard(index):
        code = rt().lib.cudaFree(ptr)
        if code not in (SUCCESS, ERROR_CUDART_UNLOADING):
            raise rt().error("cudaFree", code, context=f"0x{ptr:x} on cuda:{index}")


class PinnedHostBuffer:
    """Page-locked host memory from cudaHostAlloc; numpy views it (np.asarray) and keeps it alive."""

    def __init__(self, nbytes: int):
        ptr = c_void_p()
        if nbytes:
            rt().call("cudaHostAlloc", byref(ptr), nbytes, HOST_ALLOC_PORTABLE, context=f"{nbytes} bytes")
        self.ptr = ptr.value or 0
        self.nbytes = nbytes
        self._finalizer = weakref.finalize(self, _free_host, self.ptr)
        self._finalizer.atexit = False

    @property
    def __array_interface__(self) -> dict:
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3}


def _free_host(ptr: int) -> None:
    if ptr:
        code = rt().lib.cudaFreeHost(ptr)
        if code not in (SUCCESS, ERROR_CUDART_UNLOADING):
            raise rt().error("cudaFreeHost", code)


def pinned_empty(shape, dtype=np.uint8) -> np.ndarray:
    """A numpy array in pinned host memory (what asynchronous host copies need)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.asarray(PinnedHostBuffer(count * dtype.itemsize))
    return raw.view(dtype).reshape(shape)


def is_pinned(array: np.ndarray) -> bool:
    base = array
    while base is not None and not isinstance(base, PinnedHostBuffer):
        base = getattr(base, "base", None)
    return base is not None


# ---- copies and memset (stream-ordered; stream 0 is the legacy default stream) -----------------
def memcpy(dst: int, src: int, nbytes: int, kind: int) -> None:
    """Synchronous copy (the host waits until it is done)."""
    if nbytes:
        rt().call("cudaMemcpy", dst, src, nbytes, kind)


def memcpy_async(dst: int, src: int, nbytes: int, kind: int, stream: int = 0) -> None:
    if nbytes:
        rt().call("cudaMemcpyAsync", dst, src, nbytes, kind, stream)


def memcpy_2d_async(dst: int, dst_pitch: int, src: int, src_pitch: int, width: int, height: int,
                    kind: int, stream: int = 0) -> None:
    if width and height:
        rt().call("cudaMemcpy2DAsync", dst, dst_pitch, src, src_pitch, width, height, kind, stream)


def memcpy_peer(dst: int, dst_device: int, src: int, src_device: int, nbytes: int) -> None:
    if nbytes:
        rt().call("cudaMemcpyPeer", dst, dst_device, src, src_device, nbytes)


def memcpy_peer_async(dst: int, dst_device: int, src: int, src_device: int, nbytes: int, stream: int = 0) -> None:
    if nbytes:
        rt().call("cudaMemcpyPeerAsync", dst, dst_device, src, src_device, nbytes, stream)


def memset(ptr: int, value: int, nbytes: int) -> None:
    if nbytes:
        rt().call("cudaMemset", ptr, value, nbytes)


def memset_async(ptr: int, value: int, nbytes: int, stream: int = 0) -> None:
    if nbytes:
        rt().call("cudaMemsetAsync", ptr, value, nbytes, stream)


def forget() -> None:
    """Drop the opened runtime and the device count (tests that swap the library)."""
    global _runtime, _count
    with _lock:
        _runtime = None
        _count = None


__all__ = ["CudaRuntime", "rt", "available", "device_count", "get_device", "set_device", "device_guard",
           "attribute", "memory_info", "synchronize", "malloc", "free", "pinned_empty", "memcpy",
           "memcpy_async", "memcpy_2d_async", "memcpy_peer", "memcpy_peer_async", "memset", "memset_async",
           "runtime_version", "driver_version", "can_access_peer", "enable_peer_access", "is_pinned", "bind_context"]
