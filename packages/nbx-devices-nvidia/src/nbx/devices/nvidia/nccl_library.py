"""Finding and opening NCCL (libnccl.so.2) through ctypes, lazily, and naming its error codes.

Nothing here runs at import: the library is opened at the first call that needs it, so nbx imports
on a machine without NCCL, and only making a unique id or a communicator there raises
NcclLibraryNotFound (listing every place tried). Looked for in this order: the file named by
NBX_NCCL_LIBRARY, libnccl.so.2 in the nvidia-nccl-cu12 / nvidia-nccl-cu13 wheels' folder (both
install nvidia/nccl/lib), the sonames through the dynamic loader (LD_LIBRARY_PATH, the ldconfig
cache), ctypes.util.find_library, the system's and the CUDA toolkit's folders.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
from ctypes import POINTER, Structure, c_char_p, c_int, c_size_t, c_ubyte, c_void_p

from nbx.core import native

from .library import _package_dirs
from .nccl_errors import NcclError, NcclLibraryNotFound

ENV_LIBRARY = "NBX_NCCL_LIBRARY"
_WHEELS = (("nvidia.nccl", "lib", "libnccl.so.2"),)   # nvidia-nccl-cu12 and nvidia-nccl-cu13 alike
_SONAMES = ("libnccl.so.2", "libnccl.so")
_SYSTEM_GLOBS = ("/usr/lib/x86_64-linux-gnu/libnccl.so*", "/usr/lib/aarch64-linux-gnu/libnccl.so*",
                 "/usr/local/cuda/lib64/libnccl.so*", "/usr/local/cuda/targets/*/lib/libnccl.so*",
                 "/usr/lib64/libnccl.so*")

SUCCESS = 0
IN_PROGRESS = 7
# ncclResult_t: NCCL's own names (ncclGetErrorString gives the sentence, not the name)
RESULT_NAMES = {0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
                4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress"}

UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES


class NcclUniqueIdStruct(Structure):
    """ncclUniqueId: 128 opaque bytes, passed by value to ncclCommInitRank."""
    _fields_ = [("internal", c_ubyte * UNIQUE_ID_BYTES)]


_IP, _VP = POINTER(c_int), POINTER(c_void_p)
_COMM = c_void_p    # ncclComm_t
_STREAM = c_void_p  # cudaStream_t
PROTOTYPES: dict[str, list] = {
    "ncclGetVersion": [_IP],
    "ncclGetUniqueId": [POINTER(NcclUniqueIdStruct)],
    "ncclCommInitRank": [_VP, c_int, NcclUniqueIdStruct, c_int],
    "ncclCommDestroy": [_COMM],
    "ncclCommAbort": [_COMM],
    "ncclCommCount": [_COMM, _IP],
    "ncclCommCuDevice": [_COMM, _IP],
    "ncclCommUserRank": [_COMM, _IP],
    "ncclCommGetAsyncError": [_COMM, _IP],
    "ncclAllReduce": [c_void_p, c_void_p, c_size_t, c_int, c_int, _COMM, _STREAM],
    "ncclBroadcast": [c_void_p, c_void_p, c_size_t, c_int, c_int, _COMM, _STREAM],
    "ncclReduce": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_int, _COMM, _STREAM],
    "ncclAllGather": [c_void_p, c_void_p, c_size_t, c_int, _COMM, _STREAM],
    "ncclReduceScatter": [c_void_p, c_void_p, c_size_t, c_int, c_int, _COMM, _STREAM],
    "ncclSend": [c_void_p, c_size_t, c_int, c_int, _COMM, _STREAM],
    "ncclRecv": [c_void_p, c_size_t, c_int, c_int, _COMM, _STREAM],
    "ncclGroupStart": [],
    "ncclGroupEnd": [],
}


def split_version(code: int) -> tuple[int, int, int]:
    """NCCL_VERSION_CODE as (major, minor, patch): major*10000+minor*100+patch since 2.9, *1000 before."""
    if code >= 10000:
        return code // 10000, code % 10000 // 100, code % 100
    return code // 1000, code % 1000 // 100, code % 100


class NcclLibrary:
    """One opened libnccl with its prototypes declared; `call` turns every failing code into NcclError."""

    def __init__(self, lib, path: str):
        missing = [name for name in (*PROTOTYPES, "ncclGetErrorString") if not hasattr(lib, name)]
        if missing:
            raise native.UnusableLibrary(f"lacks {', '.join(missing)}: nbx needs NCCL 2.7 or newer")
        self.lib = lib
        self.path = path
        for name, argtypes in PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.argtypes = argtypes
            fn.restype = c_int
        self.lib.ncclGetErrorString.argtypes = [c_int]
        self.lib.ncclGetErrorString.restype = c_char_p
        # ncclGetLastError arrived in NCCL 2.13; without it errors carry NCCL's sentence only
        self._last_error = getattr(lib, "ncclGetLastError", None)
        if self._last_error is not None:
            self._last_error.argtypes = [_COMM]
            self._last_error.restype = c_char_p
        code = c_int()
        self.call("ncclGetVersion", ctypes.byref(code))
        self.version_code = code.value
        self.version = split_version(code.value)

    def error(self, function: str, code: int, comm: int | None = None) -> NcclError:
        name = RESULT_NAMES.get(code, f"ncclResult {code}")
        message = self.lib.ncclGetErrorString(code)
        detail = self._last_error(comm) if self._last_error is not None else None
        return NcclError(function, code, name, message.decode() if message else "",
                         detail.decode().strip() if detail else "")

    def call(self, function: str, *args, comm: int | None = None) -> None:
        code = getattr(self.lib, function)(*args)
        if code != SUCCESS:
            raise self.error(function, code, comm)

    def has(self, major: int, minor: int) -> bool:
        return self.version[:2] >= (major, minor)

    @property
    def version_text(self) -> str:
        return "{}.{}.{}".format(*self.version)


def candidates() -> list[tuple[str, str | None]]:
    """Every place looked at for libnccl, in order: (what to tell the user, what to open or None)."""
    out: list[tuple[str, str | None]] = []
    named = os.environ.get(ENV_LIBRARY)
    out.append((named, named) if named else (f"${ENV_LIBRARY} (not set)", None))
    for package, sub, name in _WHEELS:
        dirs = _package_dirs(package)
        if not dirs:
            out.append((f"{package.replace('.', '/')}/{sub}/{name} (package {package} is not installed: "
                        f"nvidia-nccl-cu12 or nvidia-nccl-cu13)", None))
        out += [(os.path.join(d, sub, name),) * 2 for d in dirs]
    out += [(name, name) for name in _SONAMES]
    out.append(native.find_library_place("nccl"))
    return out + native.glob_places(_SYSTEM_GLOBS)


def _open_first(places: list[tuple[str, str | None]]) -> NcclLibrary:
    return native.open_first(places, NcclLibraryNotFound, lambda path: NcclLibrary(ctypes.CDLL(path), path))[0]


_lock = threading.Lock()
_library: NcclLibrary | None = None


def nccl() -> NcclLibrary:
    """The process's NCCL, opened at first use (NcclLibraryNotFound if there is none)."""
    global _library
    if _library is None:
        with _lock:
            if _library is None:
                if not sys.platform.startswith("linux"):
                    raise NcclLibraryNotFound([f"nothing: NCCL runs on Linux, not {sys.platform}"])
                _library = _open_first(candidates())
    return _library


def available() -> bool:
    """True when an NCCL library opens; never raises."""
    try:
        nccl()
    except (NcclLibraryNotFound, NcclError):
        return False
    return True


def forget() -> None:
    """Drop the opened library (tests that swap it); the next use opens it again."""
    global _library
    with _lock:
        _library = None
