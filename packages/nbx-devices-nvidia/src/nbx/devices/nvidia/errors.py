"""The named errors of the CUDA backend; each is a DeviceError, so under nbx's one NbxError."""
from __future__ import annotations

from nbx.core.errors import DeviceError


class CudaLibraryNotFound(DeviceError):
    """No CUDA runtime (libcudart) or driver (libcuda) library could be opened; lists every place tried."""

    def __init__(self, library: str, tried: list[str]):
        self.library = library
        self.tried = list(tried)
        lines = "".join(f"\n  {t}" for t in self.tried)
        super().__init__(
            f"the CUDA {library} library could not be opened; places tried:{lines}\n"
            f"install the NVIDIA driver and `pip install nvidia-cuda-runtime-cu12` (a dependency of "
            f"nbx-devices-nvidia on Linux)")


class CudaError(DeviceError):
    """A CUDA runtime or driver call that returned an error code; carries the function, code and name."""

    def __init__(self, function: str, code: int, name: str, description: str = "", context: str = ""):
        self.function = function
        self.code = int(code)
        self.name = name
        self.description = description
        text = f"{function} failed with {name} ({self.code})"
        if description:
            text += f": {description}"
        if context:
            text += f" [{context}]"
        super().__init__(text)


class NvidiaDriverNotFound(CudaError):
    """No NVIDIA driver on this machine: the runtime answers 'insufficient driver' and libcuda opens nowhere."""

    def __init__(self, function: str, code: int, name: str, tried: list[str]):
        self.tried = list(tried)
        super().__init__(function, code, name)
        looked = ", ".join(place.split(" (")[0] for place in self.tried)
        self.args = (f"no NVIDIA driver found on this machine (the driver library libcuda opens nowhere; looked "
                     f"for {looked}), so {function} answered {name}: cuda devices need an NVIDIA GPU with its "
                     f"driver; use the 'cpu' device (or 'interp') here",)


class CopyOutOfBoundsError(DeviceError, IndexError):
    """A copy whose byte range lies outside its storage; refused before the driver is called."""


class StreamMismatchError(DeviceError):
    """A stream or event used with a device it does not belong to."""
