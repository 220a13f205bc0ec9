"""Finding and opening the HIP runtime library (libamdhip64), lazily.

Nothing here runs at import. The places looked at, in order: $ROCM_PATH/lib and $HIP_PATH/lib
when set, the sonames through the dynamic loader (LD_LIBRARY_PATH, the ldconfig cache),
ctypes.util.find_library, then /opt/rocm*/lib. None opening is HipLibraryNotFound, listing each
place with why it failed.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading

from nbx.core import native

from .errors import HipLibraryNotFound

SONAMES = ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6")
INSTALL_GLOBS = ("/opt/rocm/lib/libamdhip64.so*", "/opt/rocm-*/lib/libamdhip64.so*")
ENV_VARS = ("ROCM_PATH", "HIP_PATH")

_lock = threading.Lock()
_opened: tuple[object, str] | None = None


def candidates() -> list[tuple[str, str | None]]:
    """Every place looked at: (what to tell the user, what to open, or None when there is nothing to open)."""
    out: list[tuple[str, str | None]] = []
    for var in ENV_VARS:
        root = os.environ.get(var)
        if not root:
            out.append((f"${var}/lib/libamdhip64.so (${var} is not set)", None))
            continue
        path = os.path.join(root, "lib", "libamdhip64.so")
        out.append((path, path))
    out += [(name, name) for name in SONAMES]
    found = ctypes.util.find_library("amdhip64")
    out.append((found, found) if found else ("ctypes.util.find_library('amdhip64') (found nothing)", None))
    return out + native.glob_places(INSTALL_GLOBS)


def open_first(places: list[tuple[str, str | None]], loader=None) -> tuple[object, str]:
    return native.open_first(places, HipLibraryNotFound, loader)


def open_library() -> tuple[object, str]:
    """The opened libamdhip64 and the path it was opened from; opened once per process."""
    global _opened
    with _lock:
        if _opened is None:
            if not sys.platform.startswith("linux"):
                raise HipLibraryNotFound([f"nothing: nbx's HIP backend supports Linux, not {sys.platform}"],
                                         hint="use a Linux machine with ROCm 6 or later")
            _opened = open_first(candidates())
        return _opened


def forget() -> None:
    """Drop the opened library (tests); the next use opens it again."""
    global _opened
    with _lock:
        _opened = None
