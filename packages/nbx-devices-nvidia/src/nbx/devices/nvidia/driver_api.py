"""The CUDA driver API (libcuda) for what the runtime lacks: device names without the versioned
cudaDeviceProp struct, virtual memory management (granularity, reserve, create, map, unmap), and
memset of 2- and 4-byte patterns.

The runtime makes a device's primary context current (cudaSetDevice), and the driver calls here
run in that context, so callers hold a runtime device_guard for the device.
"""
from __future__ import annotations

import threading
from ctypes import (
    POINTER,
    Structure,
    byref,
    c_char_p,
    c_int,
    c_size_t,
    c_ubyte,
    c_uint,
    c_uint64,
    c_ushort,
    c_void_p,
    create_string_buffer,
)

from . import library
from .errors import CudaError

CUDA_SUCCESS = 0

# CUmemAllocationGranularity_flags
GRANULARITY_MINIMUM, GRANULARITY_RECOMMENDED = 0, 1
_ALLOCATION_TYPE_PINNED = 1
_LOCATION_TYPE_DEVICE = 1
_ACCESS_READ_WRITE = 3           # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
CUDA_ERROR_OUT_OF_MEMORY = 2


class _MemLocation(Structure):
    _fields_ = [("type", c_int), ("id", c_int)]


class _AllocFlags(Structure):
    _fields_ = [("compressionType", c_ubyte), ("gpuDirectRDMACapable", c_ubyte), ("usage", c_ushort),
                ("reserved", c_ubyte * 4)]


class MemAllocationProp(Structure):
    """CUmemAllocationProp (cuda.h): what cuMemCreate would allocate; the granularity query needs it."""
    _fields_ = [("type", c_int), ("requestedHandleTypes", c_int), ("location", _MemLocation),
                ("win32HandleMetaData", c_void_p), ("allocFlags", _AllocFlags)]


class MemAccessDesc(Structure):
    """CUmemAccessDesc: which device may access a mapped range, and how."""
    _fields_ = [("location", _MemLocation), ("flags", c_int)]


PROTOTYPES: dict[str, list] = {
    "cuInit": [c_uint],
    "cuDriverGetVersion": [POINTER(c_int)],
    "cuDeviceGet": [POINTER(c_int), c_int],
    "cuDeviceGetName": [c_char_p, c_int, c_int],
    "cuDeviceTotalMem_v2": [POINTER(c_size_t), c_int],
    "cuMemGetAllocationGranularity": [POINTER(c_size_t), POINTER(MemAllocationProp), c_int],
    "cuMemsetD8Async": [c_uint64, c_ubyte, c_size_t, c_void_p],
    "cuMemsetD16Async": [c_uint64, c_ushort, c_size_t, c_void_p],
    "cuMemsetD32Async": [c_uint64, c_uint, c_size_t, c_void_p],
}


# Virtual memory management, declared at first use (a driver or a fake without it keeps working).
VMM_PROTOTYPES: dict[str, list] = {
    "cuMemAddressReserve": [POINTER(c_uint64), c_size_t, c_size_t, c_uint64, c_uint64],
    "cuMemAddressFree": [c_uint64, c_size_t],
    "cuMemCreate": [POINTER(c_uint64), c_size_t, POINTER(MemAllocationProp), c_uint64],
    "cuMemRelease": [c_uint64],
    "cuMemMap": [c_uint64, c_size_t, c_size_t, c_uint64, c_uint64],
    "cuMemSetAccess": [c_uint64, c_size_t, POINTER(MemAccessDesc), c_size_t],
    "cuMemUnmap": [c_uint64, c_size_t],
}


class CudaDriverApi:
    def __init__(self, lib, path: str):
        self.lib = lib
        self.path = path
        for name, argtypes in PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.argtypes = argtypes
            fn.restype = c_int
        for name in ("cuGetErrorName", "cuGetErrorString"):
            fn = getattr(lib, name)
            fn.argtypes = [c_int, POINTER(c_char_p)]
            fn.restype = c_int
        self.call("cuInit", 0)

    def error_name(self, code: int) -> str:
        text = c_char_p()
        if self.lib.cuGetErrorName(code, byref(text)) == CUDA_SUCCESS and text.value:
            return text.value.decode()
        return f"CUresult {code}"

    def call(self, function: str, *args, context: str = "") -> None:
        code = getattr(self.lib, function)(*args)
        if code != CUDA_SUCCESS:
            text = c_char_p()
            self.lib.cuGetErrorString(code, byref(text))
            raise CudaError(function, code, self.error_name(code), (text.value or b"").decode(), context)


_lock = threading.Lock()
_driver: CudaDriverApi | None = None


def drv() -> CudaDriverApi:
    """The process's driver API, opened (and cuInit called) at first use."""
    global _driver
    if _driver is None:
        with _lock:
            if _driver is None:
                lib, path = library.open_library("driver")
                _driver = CudaDriverApi(lib, path)
    return _driver


def _handle(index: int) -> int:
    dev = c_int()
    drv().call("cuDeviceGet", byref(dev), index)
    return dev.value


def device_name(index: int) -> str:
    buf = create_string_buffer(256)
    drv().call("cuDeviceGetName", buf, len(buf), _handle(index))
    return buf.value.decode()


def total_memory(index: int) -> int:
    value = c_size_t()
    drv().call("cuDeviceTotalMem_v2", byref(value), _handle(index))
    return value.value


def driver_version() -> int:
    value = c_int()
    drv().call("cuDriverGetVersion", byref(value))
    return value.value


def _device_memory(index: int) -> MemAllocationProp:
    """What cuMemCreate allocates: pinned memory of device index, no shareable handle."""
    prop = MemAllocationProp()
    prop.type = _ALLOCATION_TYPE_PINNED
    prop.location.type = _LOCATION_TYPE_DEVICE
    prop.location.id = index
    return prop


def allocation_granularity(index: int, recommended: bool = False) -> int:
    """Bytes a virtual-memory mapping (cuMemCreate/cuMemMap) on device index is a multiple of."""
    prop = _device_memory(index)
    value = c_size_t()
    flag = GRANULARITY_RECOMMENDED if recommended else GRANULARITY_MINIMUM
    drv().call("cuMemGetAllocationGranularity", byref(value), byref(prop), flag)
    return value.value


def _vmm() -> CudaDriverApi:
    d = drv()
    if not getattr(d, "vmm_declared", False):
        for name, argtypes in VMM_PROTOTYPES.items():
            fn = getattr(d.lib, name)
            fn.argtypes = argtypes
            fn.restype = c_int
        d.vmm_declared = True
    return d


def address_reserve(nbytes: int, alignment: int) -> int:
    """Reserve nbytes of device address space (no memory behind it)."""
    address = c_uint64()
    _vmm().call("cuMemAddressReserve", byref(address), nbytes, alignment, 0, 0, context=f"{nbytes} bytes")
    return address.value


def address_free(address: int, nbytes: int) -> None:
    _vmm().call("cuMemAddressFree", address, nbytes)


def mem_create(nbytes: int, index: int) -> int | None:
    """A physical allocation of nbytes on device index; None when the device has no room for it."""
    handle = c_uint64()
    d = _vmm()
    code = d.lib.cuMemCreate(byref(handle), nbytes, byref(_device_memory(index)), 0)
    if code == CUDA_ERROR_OUT_OF_MEMORY:
        return None
    if code != CUDA_SUCCESS:
        raise CudaError("cuMemCreate", code, d.error_name(code), context=f"{nbytes} bytes on cuda:{index}")
    return handle.value


def mem_release(handle: int) -> None:
    _vmm().call("cuMemRelease", handle)


def mem_map(address: int, nbytes: int, handle: int, index: int) -> None:
    """Map a physical allocation at address and let device index read and write it."""
    d = _vmm()
    d.call("cuMemMap", address, nbytes, 0, handle, 0, context=f"{nbytes} bytes at 0x{address:x}")
    access = MemAccessDesc()
    access.location.type = _LOCATION_TYPE_DEVICE
    access.location.id = index
    access.flags = _ACCESS_READ_WRITE
    try:
        d.call("cuMemSetAccess", address, nbytes, byref(access), 1, context=f"cuda:{index}")
    except CudaError:
        d.call("cuMemUnmap", address, nbytes)
        raise


def mem_unmap(address: int, nbytes: int) -> None:
    _vmm().call("cuMemUnmap", address, nbytes, context=f"{nbytes} bytes at 0x{address:x}")


def memset_d8_async(ptr: int, value: int, count: int, stream: int = 0) -> None:
    if count:
        drv().call("cuMemsetD8Async", ptr, value, count, stream)


def memset_d16_async(ptr: int, value: int, count: int, stream: int = 0) -> None:
    """count 2-byte elements; ptr must be 2-byte aligned."""
    if count:
        drv().call("cuMemsetD16Async", ptr, value, count, stream)


def memset_d32_async(ptr: int, value: int, count: int, stream: int = 0) -> None:
    """count 4-byte elements; ptr must be 4-byte aligned."""
    if count:
        drv().call("cuMemsetD32Async", ptr, value, count, stream)


def forget() -> None:
    global _driver
    with _lock:
        _driver = None
