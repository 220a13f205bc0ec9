"""The named errors of nbx's NCCL layer; each is a DeviceError, so under nbx's one NbxError."""
from __future__ import annotations

from nbx.core.errors import DeviceError, DTypeError


class NcclLibraryNotFound(DeviceError):
    """No NCCL library (libnccl.so.2) could be opened; lists every place tried."""

    def __init__(self, tried: list[str]):
        self.tried = list(tried)
        lines = "".join(f"\n  {t}" for t in self.tried)
        super().__init__(
            f"the NCCL library (libnccl.so.2) could not be opened; places tried:{lines}\n"
            f"`pip install nvidia-nccl-cu12` (CUDA 12) or `pip install nvidia-nccl-cu13` (CUDA 13), "
            f"or name a libnccl.so.2 in NBX_NCCL_LIBRARY")


class NcclError(DeviceError):
    """An NCCL call that returned an error code; carries the function, code, name and NCCL's message."""

    def __init__(self, function: str, code: int, name: str, message: str = "", detail: str = ""):
        self.function = function
        self.code = int(code)
        self.name = name
        self.message = message
        self.detail = detail   # ncclGetLastError: NCCL's own account of the last failure, where it has one
        text = f"{function} failed with {name} ({self.code})"
        if message:
            text += f": {message}"
        if detail:
            text += f" [{detail}]"
        super().__init__(text)


class NcclDTypeError(DeviceError, DTypeError):
    """A dtype NCCL (or this NCCL version) has no type for, or a reduction NCCL cannot apply to it."""


class NcclBootstrapError(DeviceError):
    """A unique id that cannot be made, written or read: its length, its hex, a missing file or variable."""


class CommunicatorClosedError(DeviceError):
    """A communicator used after destroy() or abort(); make a new one (every rank together)."""
