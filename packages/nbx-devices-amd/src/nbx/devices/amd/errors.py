"""The named errors of the HIP backend; each is a DeviceError, so under nbx's one NbxError."""
from __future__ import annotations

from nbx.core.errors import DeviceError


class HipLibraryNotFound(DeviceError):
    """No HIP runtime library (libamdhip64) could be opened; lists every place tried."""

    def __init__(self, tried: list[str], hint: str = ""):
        self.tried = list(tried)
        lines = "".join(f"\n  {t}" for t in self.tried)
        super().__init__(f"the HIP runtime library (libamdhip64) could not be opened; places tried:{lines}\n"
                         + (hint or "install ROCm 6 or later (the HIP runtime), or set ROCM_PATH to its folder"))


class HipRuntimeTooOld(DeviceError):
    """A HIP runtime that lacks a function nbx needs (ROCm 6.0 or later is required)."""


class HipError(DeviceError):
    """A HIP runtime call that returned an error code; carries the function, the code and its name."""

    def __init__(self, function: str, code: int, name: str, description: str = ""):
        self.function = function
        self.code = int(code)
        self.name = name
        self.description = description
        super().__init__(f"{function} failed with {name} ({self.code})" + (f": {description}" if description else ""))
