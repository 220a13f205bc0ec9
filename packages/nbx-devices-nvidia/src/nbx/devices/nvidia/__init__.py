"""nbx.devices.nvidia: the 'cuda' device of nbx, with no torch in the process.

The CUDA runtime and driver libraries are reached through ctypes and opened at first use, so
importing this package on a machine without CUDA works; using a cuda device there raises
CudaLibraryNotFound, listing every place looked at. nbx.core's plugin discovery calls
`register()`, which registers the backend and its copy_/fill_ implementations.

    import nbx.core as nbx
    from nbx.devices import nvidia
    x = nbx.ones(4, device="cuda")
    with nvidia.Stream(priority=-1):   # nbx's work and Triton launches in the block run on it
        y = x.clone()
"""
from __future__ import annotations

from .errors import CopyOutOfBoundsError, CudaError, CudaLibraryNotFound, StreamMismatchError
from .version import __version__

__all__ = ["register", "CudaError", "CudaLibraryNotFound", "CopyOutOfBoundsError", "StreamMismatchError",
           "Stream", "Event", "current_stream", "use_stream", "device_guard", "device_properties", "synchronize",
           "pinned_empty", "__version__"]

_LAZY = {
    "Stream": "streams", "Event": "streams", "current_stream": "streams", "use_stream": "streams",
    "device_guard": "runtime", "synchronize": "runtime", "pinned_empty": "runtime",
    "device_count": "runtime", "available": "runtime", "device_properties": "properties",
}
_RENAMED = {"device_properties": "properties"}


def register() -> None:
    """Register the cuda backend and its copy_/fill_ with nbx.core; touches no CUDA library."""
    from nbx.core.device import register_backend

    from . import copies  # noqa: F401  (registers copy_ and fill_ for 'cuda')
    from .backend import BACKEND
    register_backend(BACKEND)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), _RENAMED.get(name, name))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
