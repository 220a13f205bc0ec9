"""Finding and opening a native library (a GPU runtime, NCCL) through ctypes, keeping an account
of every place looked at, so that a library not found is refused with the whole list.

A place is (shown, path): `path` is what ctypes opens (a file path or a soname), `shown` what the
refusal prints; a place with path None was looked at and held nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from collections.abc import Callable, Iterable

Place = tuple[str, "str | None"]


class UnusableLibrary(Exception):
    """Raised by a loader for a library that opened but cannot serve (too old, wrong symbols)."""


def glob_places(patterns: Iterable[str]) -> list[Place]:
    out: list[Place] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern))
        out += [(m, m) for m in matches] if matches else [(f"{pattern} (no match)", None)]
    return out


def find_library_place(name: str) -> Place:
    found = ctypes.util.find_library(name)
    return (found, found) if found else (f"ctypes.util.find_library({name!r}) (found nothing)", None)


def open_first(places: Iterable[Place], not_found: Callable[[list[str]], Exception], loader=None):
    """(loader(path), path) for the first place that opens; else not_found(every place tried) is raised.

    The loader defaults to ctypes.CDLL, looked up at the call (tests replace it).
    """
    loader = loader or ctypes.CDLL
    tried: list[str] = []
    for shown, path in places:
        if path is None:
            tried.append(shown)
        elif os.sep in path and not os.path.exists(path):
            tried.append(f"{path} (no such file)")
        else:
            try:
                return loader(path), path
            except (OSError, UnusableLibrary) as exc:
                tried.append(f"{path} ({exc})")
    raise not_found(tried)
