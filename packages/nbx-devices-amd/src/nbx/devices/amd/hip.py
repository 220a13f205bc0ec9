"""The HIP runtime calls nbx uses, through ctypes; every failing call becomes a HipError.

`runtime()` opens libamdhip64 at first use (library.py says where it looks). A HipRuntime can
also wrap any object whose attributes are the HIP functions, which is how the tests drive this
code without an AMD GPU.
"""
from __future__ import annotations

import ctypes
import threading

from nbx.core.device import Device
from nbx.core.errors import DeviceError, OutOfMemoryError

from . import library
from .errors import HipError, HipRuntimeTooOld
from .props import ATTRIBUTES, ERROR_NO_DEVICE, ERROR_OUT_OF_MEMORY, PROPS_BUFFER_BYTES, DevicePropR0600

_p_int, _p_size = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t)
_p_void = ctypes.POINTER(ctypes.c_void_p)
_SIGNATURES = {
    "hipGetDeviceCount": (_p_int,),
    "hipSetDevice": (ctypes.c_int,),
    "hipGetDevice": (_p_int,),
    "hipMalloc": (_p_void, ctypes.c_size_t),
    "hipFree": (ctypes.c_void_p,),
    "hipMemcpy": (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int),
    "hipMemcpyPeer": (ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t),
    "hipMemset": (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t),
    "hipDeviceSynchronize": (),
    "hipDeviceGetAttribute": (_p_int, ctypes.c_int, ctypes.c_int),
    "hipDeviceGetName": (ctypes.c_char_p, ctypes.c_int, ctypes.c_int),
    "hipMemGetInfo": (_p_size, _p_size),
    "hipRuntimeGetVersion": (_p_int,),
    "hipGetDevicePropertiesR0600": (ctypes.c_void_p, ctypes.c_int),
}


class HipRuntime:
    def __init__(self, lib, path: str):
        self.path = path
        self._lib = lib
        self._functions: dict[str, object] = {}
        self._props: dict[int, DevicePropR0600] = {}
        self._lock = threading.Lock()
        for name in ("hipGetErrorName", "hipGetErrorString"):
            fn = self._symbol(name)
            fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_char_p

    def _symbol(self, name: str):
        try:
            return getattr(self._lib, name)
        except AttributeError:
            raise HipRuntimeTooOld(f"{self.path} has no {name}: nbx's HIP backend needs ROCm 6.0 or later") from None

    def _fn(self, name: str):
        fn = self._functions.get(name)
        if fn is None:
            fn = self._symbol(name)
            fn.argtypes, fn.restype = list(_SIGNATURES[name]), ctypes.c_int
            self._functions[name] = fn
        return fn

    def error_name(self, code: int) -> str:
        name = self._lib.hipGetErrorName(code)
        return name.decode() if name else f"hipError {code}"

    def call(self, name: str, *args) -> None:
        code = self._fn(name)(*args)
        if code != 0:
            text = self._lib.hipGetErrorString(code)
            raise HipError(name, code, self.error_name(code), text.decode() if text else "")

    # ---- devices ---------------------------------------------------------------------------
    def version(self) -> int:
        out = ctypes.c_int()
        self.call("hipRuntimeGetVersion", ctypes.byref(out))
        return out.value

    def device_count(self) -> int:
        count = ctypes.c_int()
        code = self._fn("hipGetDeviceCount")(ctypes.byref(count))
        if code == ERROR_NO_DEVICE:  # HIP's way of saying zero
            return 0
        if code != 0:
            raise HipError("hipGetDeviceCount", code, self.error_name(code))
        return count.value

    def check_ordinal(self, index: int) -> None:
        count = self.device_count()
        if not 0 <= index < count:
            raise DeviceError(f"hip:{index} does not exist: {count} HIP device(s) found")

    def set_device(self, index: int) -> None:
        self.call("hipSetDevice", index)

    def get_device(self) -> int:
        out = ctypes.c_int()
        self.call("hipGetDevice", ctypes.byref(out))
        return out.value

    def attribute(self, name: str, index: int) -> int:
        out = ctypes.c_int()
        self.call("hipDeviceGetAttribute", ctypes.byref(out), ATTRIBUTES[name], index)
        return out.value

    def device_name(self, index: int) -> str:
        buf = ctypes.create_string_buffer(256)
        self.call("hipDeviceGetName", buf, len(buf), index)
        return buf.value.decode(errors="replace")

    def properties(self, index: int) -> DevicePropR0600:
        with self._lock:
            if index not in self._props:
                buf = ctypes.create_string_buffer(PROPS_BUFFER_BYTES)
                self.call("hipGetDevicePropertiesR0600", ctypes.addressof(buf), index)
                self._props[index] = DevicePropR0600.from_buffer_copy(buf)
            return self._props[index]

    def arch_name(self, index: int) -> str:
        """The gcnArchName ('gfx942:sramecc+:xnack-'): the target string nbx's device files match."""
        props = self.properties(index)
        name = props.gcnArchName.decode(errors="replace")
        warp = self.attribute("warp_size", index)
        if not name.startswith("gfx") or props.warpSize != warp:
            raise HipRuntimeTooOld(
                f"{self.path}: hipGetDevicePropertiesR0600 wrote a layout nbx does not know (gcnArchName "
                f"{name[:40]!r}, warpSize {props.warpSize} against the attribute's {warp})")
        return name

    def mem_get_info(self, index: int) -> tuple[int, int]:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.set_device(index)
        self.call("hipMemGetInfo", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def synchronize(self, index: int) -> None:
        self.set_device(index)
        self.call("hipDeviceSynchronize")

    # ---- memory ----------------------------------------------------------------------------
    def malloc(self, nbytes: int, index: int) -> int:
        self.set_device(index)
        ptr = ctypes.c_void_p()
        code = self._fn("hipMalloc")(ctypes.byref(ptr), nbytes)
        if code == ERROR_OUT_OF_MEMORY:
            free, total = self.mem_get_info(index)
            raise OutOfMemoryError(f"hipMalloc of {nbytes} bytes on hip:{index} failed: {free} of {total} bytes free",
                                   requested=nbytes, free=free, total=total, device=Device("hip", index))
        if code != 0:
            raise HipError("hipMalloc", code, self.error_name(code))
        return ptr.value or 0

    def free(self, ptr: int, index: int) -> None:
        self.set_device(index)
        self.call("hipFree", ptr)

    def memcpy(self, dst: int, src: int, nbytes: int, kind: int) -> None:
        self.call("hipMemcpy", dst, src, nbytes, kind)

    def memcpy_peer(self, dst: int, dst_index: int, src: int, src_index: int, nbytes: int) -> None:
        self.call("hipMemcpyPeer", dst, dst_index, src, src_index, nbytes)

    def memset(self, ptr: int, value: int, nbytes: int) -> None:
        self.call("hipMemset", ptr, value, nbytes)


_runtime: HipRuntime | None = None
_runtime_lock = threading.Lock()


def runtime() -> HipRuntime:
    """The process's HIP runtime, opened at first use (HipLibraryNotFound when it cannot be)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            lib, path = library.open_library()
            _runtime = HipRuntime(lib, path)
        return _runtime


def use_runtime(rt: HipRuntime | None) -> None:
    """Replace the process's runtime (tests drive the backend through a fake one); None forgets it."""
    global _runtime
    with _runtime_lock:
        _runtime = rt
