"""nbx.devices.apple: the 'metal' device of nbx on Apple silicon, through a Triton build for Metal.

Importing this package loads nothing. nbx.core's plugin discovery calls `register()`, which checks
for macOS on Apple silicon, PyObjC's Metal and a Triton build for Metal, and registers the backend
only when all are there; otherwise it raises MetalUnavailable (naming everything looked at), which
nbx.core records as this plugin's error and `nbx info` shows. The device files of the M series ship
in data/devices (devices/apple in the repository); a device's target is its name, lowercased and
hyphenated ('apple-m4-pro').
"""
from __future__ import annotations

from .errors import MetalCommandBufferError, MetalUnavailable
from .version import __version__

__all__ = ["register", "unavailable_reason", "MetalUnavailable", "MetalCommandBufferError", "__version__"]

_reason: str | None = None


def register() -> None:
    """Register the 'metal' backend if Metal and its Triton build load; else record why and raise."""
    global _reason
    from nbx.core.device import register_backend

    from .backend import BACKEND
    from .runtime import load
    try:
        load()
    except Exception as exc:
        _reason = f"{type(exc).__name__}: {exc}"
        raise
    _reason = None
    register_backend(BACKEND)


def unavailable_reason() -> str | None:
    """Why the last register() did not register the backend, or None."""
    return _reason
