"""nbx.devices.amd: the 'hip' device of nbx on AMD GPUs, through the HIP runtime (libamdhip64).

Importing this package opens nothing. nbx.core's plugin discovery calls `register()`, which opens
the HIP runtime and registers the backend only when it loads; otherwise it raises the named error
(HipLibraryNotFound, listing every place tried), which nbx.core records as this plugin's error and
`nbx info` shows. The device files of AMD GPUs ship in data/devices (devices/amd in the repository):
the backend's target for a device is its gcnArchName.

    import nbx.core as nbx
    x = nbx.ones(4, device="hip")
"""
from __future__ import annotations

from .errors import HipError, HipLibraryNotFound, HipRuntimeTooOld
from .version import __version__

__all__ = ["register", "unavailable_reason", "HipError", "HipLibraryNotFound", "HipRuntimeTooOld", "__version__"]

_reason: str | None = None


def register() -> None:
    """Register the 'hip' backend if the HIP runtime opens; else record why and raise that named error."""
    global _reason
    from nbx.core.device import register_backend

    from .backend import BACKEND
    from .hip import runtime
    try:
        runtime().device_count()
    except Exception as exc:
        _reason = f"{type(exc).__name__}: {exc}"
        raise
    _reason = None
    register_backend(BACKEND)


def unavailable_reason() -> str | None:
    """Why the last register() did not register the backend, or None."""
    return _reason
