"""Finding and opening the HIP runtime library (libamdhip64), lazily.

Nothing here runs at import. The places looked at, in order: $ROCM_PATH/lib and $HIP_PATH/lib
when set, the sonames through the dynamic loader (LD_LIBRARY_PATH, the ldconfig cache),
ctypes.util.find_library, then /opt/rocm*/lib. None opening is HipLibraryNotFound, listing each
place with why it failed.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
import threading

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
    for pattern in INSTALL_GLOBS:
        matches = sorted(glob.glob(pattern))
        out += [(m, m) for m in matches] if matches else [(f"{pattern} (no match)", None)]
    return out


def open_first(places: list[tuple[str, str | None]], loader=ctypes.CDLL) -> tuple[object, str]:
    tried = []
    for shown, path in places:
        if path is None:
            tried.append(shown)
        elif os.sep in path and not os.path.exists(path):
            tried.append(f"{path} (no such file)")
        else:
            try:
                return loader(path), path
            except OSError as exc:
                tried.append(f"{path} ({exc})")
    raise HipLibraryNotFound(tried)


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
