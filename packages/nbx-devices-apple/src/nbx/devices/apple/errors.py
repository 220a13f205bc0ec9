"""The named errors of the Metal backend; each is a DeviceError, so under nbx's one NbxError."""
from __future__ import annotations

from nbx.core.errors import DeviceError


class MetalUnavailable(DeviceError):
    """Metal cannot be used here: not macOS on Apple silicon, no PyObjC Metal, no Triton build for Metal."""

    def __init__(self, problem: str, tried: list[str]):
        self.problem = problem
        self.tried = list(tried)
        lines = "".join(f"\n  {t}" for t in self.tried)
        super().__init__(f"the Metal backend is unavailable: {problem}; looked at:{lines}")


class MetalCommandBufferError(DeviceError):
    """A Metal command buffer that completed with an error; carries Metal's description."""
