"""Finding and opening the CUDA runtime (libcudart) and driver (libcuda) libraries, lazily.

Nothing here runs at import: the libraries are opened at first use, so importing nbx on a machine
without CUDA works, and only using a cuda device raises CudaLibraryNotFound (listing every place
tried). The runtime is looked for in this order: libcudart.so.12 in the nvidia-cuda-runtime-cu12
wheel's folder, libcudart.so.13 in the CUDA 13 wheel's folder, the sonames through the dynamic
loader (LD_LIBRARY_PATH, the ldconfig cache), ctypes.util.find_library, the CUDA toolkit folders.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
import threading

from nbx.core.native import find_library_place, glob_places, open_first

from .errors import CudaLibraryNotFound

# (python package holding the wheel's library folder, sub-folder, file name)
_RUNTIME_WHEELS = (
    ("nvidia.cuda_runtime", "lib", "libcudart.so.12"),   # nvidia-cuda-runtime-cu12
    ("nvidia.cu13", "lib", "libcudart.so.13"),            # nvidia-cuda-runtime 13.x
    ("nvidia.cuda_runtime", "lib", "libcudart.so.13"),
)
_RUNTIME_SONAMES = ("libcudart.so.12", "libcudart.so.13", "libcudart.so")
_TOOLKIT_GLOBS = ("/usr/local/cuda/lib64/libcudart.so*", "/usr/local/cuda/targets/*/lib/libcudart.so*",
                  "/usr/lib/x86_64-linux-gnu/libcudart.so*", "/usr/lib64/libcudart.so*")
_DRIVER_SONAMES = ("libcuda.so.1", "libcuda.so")

_lock = threading.Lock()
_opened: dict[str, tuple[ctypes.CDLL, str]] = {}


def _package_dirs(package: str) -> list[str]:
    """Folders of an (often namespace) package, found without importing anything heavy."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    return list(spec.submodule_search_locations or [])


def runtime_candidates() -> list[tuple[str, str | None]]:
    """Every place looked at for libcudart, in order: (what to tell the user, what to open or None)."""
    out: list[tuple[str, str | None]] = []
    for package, sub, name in _RUNTIME_WHEELS:
        dirs = _package_dirs(package)
        if not dirs:
            out.append((f"{package.replace('.', '/')}/{sub}/{name} (package {package} is not installed)", None))
        out += [(os.path.join(d, sub, name),) * 2 for d in dirs]
    out += [(name, name) for name in _RUNTIME_SONAMES]
    out.append(find_library_place("cudart"))
    return out + glob_places(_TOOLKIT_GLOBS)


def driver_candidates() -> list[tuple[str, str | None]]:
    return [(name, name) for name in _DRIVER_SONAMES] + [find_library_place("cuda")]


def _open_first(kind: str, candidates: list[tuple[str, str | None]]) -> tuple[ctypes.CDLL, str]:
    return open_first(candidates, lambda tried: CudaLibraryNotFound(kind, tried))


def open_library(kind: str) -> tuple[ctypes.CDLL, str]:
    """The opened library ('runtime' or 'driver') and the path it was opened from; opened once.

    Opened RTLD_LOCAL (ctypes' default), so another copy of cudart in the process (torch's, CuPy's)
    keeps its own symbols; both share the driver's primary context.
    """
    with _lock:
        if kind not in _opened:
            name = "runtime (libcudart)" if kind == "runtime" else "driver (libcuda)"
            if not sys.platform.startswith("linux"):
                raise CudaLibraryNotFound(name, [f"nothing: nbx's CUDA backend supports Linux, not {sys.platform}"])
            candidates = runtime_candidates() if kind == "runtime" else driver_candidates()
            _opened[kind] = _open_first(name, candidates)
        return _opened[kind]


def forget() -> None:
    """Drop the opened libraries (tests); the next use opens them again."""
    with _lock:
        _opened.clear()
