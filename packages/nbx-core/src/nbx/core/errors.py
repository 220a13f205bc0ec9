"""Every error nbx raises is a subclass of NbxError and names what is missing or wrong.

A missing fact is never replaced by a default: the error says which fact, where it was looked
for, and carries the figures that explain the refusal.
"""
from __future__ import annotations


class NbxError(Exception):
    """Base class of every error nbx raises on purpose."""


class UnknownDTypeError(NbxError, TypeError):
    """A dtype name, code or object that the dtype table does not hold."""


class PromotionError(NbxError, TypeError):
    """Two dtypes (or a dtype and a Python scalar) whose promotion nbx refuses."""


class ScalarOutOfRangeError(PromotionError, OverflowError):
    """A Python int that the integer tensor's dtype cannot represent."""


class ShapeError(NbxError, ValueError):
    """Shapes that do not broadcast, a size that does not match, a dim out of range."""


class ViewError(NbxError, RuntimeError):
    """A view that would need a copy (use reshape, which copies only then)."""


class IndexingError(NbxError, IndexError):
    """An index that is out of bounds or of a kind the operation does not take."""


class DeviceError(NbxError, RuntimeError):
    """An unknown device, a backend that is not installed, or tensors on different devices."""


class CrossDeviceError(DeviceError):
    """An op whose operands live on different devices; copy explicitly with .to(device)."""


class NotSupportedError(NbxError, NotImplementedError):
    """A feature nbx does not implement (yet) for this backend, dtype or argument."""


class MissingFunctionError(NotSupportedError, AttributeError):
    """A name the Array API namespace lacks: an AttributeError too, so hasattr and getattr(..., None) work."""


class FileFormatError(NbxError, ValueError):
    """A malformed or truncated file (safetensors header, device file, certificate)."""


class PathNotFoundError(NbxError, FileNotFoundError):
    """A file or folder that is not there (a save into a missing folder)."""


class DLPackError(NbxError, BufferError):
    """A DLPack exchange that cannot be made (device, dtype, stream or copy request)."""


class MissingFactError(NbxError, KeyError):
    """A device fact that the device file in force does not state."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want the sentence.
        return str(self.args[0]) if self.args else ""


class DTypeError(NbxError, TypeError):
    """A dtype the operation does not accept (integer mean, bool arithmetic, float bitwise and)."""


class ArgumentError(NbxError, ValueError):
    """An argument outside what the operation accepts (a seed, a probability, a range, a scheme)."""


class SignatureError(ArgumentError, TypeError):
    """A call its op's signature does not take (a missing argument, an unknown keyword): a TypeError
    as Python's own, named."""


class OutOfMemoryError(DeviceError, MemoryError):
    """An allocation the device cannot serve; carries requested, live, cached, free and total bytes."""

    def __init__(self, message: str, *, requested: int, live: int | None = None, cached: int | None = None,
                 free: int | None = None, total: int | None = None, device=None):
        super().__init__(message)
        self.requested = requested
        self.live = live
        self.cached = cached
        self.free = free
        self.total = total
        self.device = device


class DeviceOOMError(OutOfMemoryError):
    """A caching pool's refusal after it synchronized, released its free segments and retried the driver."""

    def __init__(self, message: str, *, requested: int, live: int | None = None, cached: int | None = None,
                 free: int | None = None, total: int | None = None, device=None, segment: int | None = None):
        super().__init__(message, requested=requested, live=live, cached=cached, free=free, total=total,
                         device=device)
        self.segment = segment  # the bytes last asked of the driver (a segment's size, not the request's)


class UnknownTargetError(MissingFactError):
    """A target string that no device file claims (no file's prefix matches it)."""


class NoDeviceFileError(MissingFactError):
    """A device with no device file: the CPU, or no GPU backend with a device to ask."""


class FactConflictError(NbxError, ValueError):
    """A device fact stated by an application file and by a vendor file (or another application file)."""


class LaunchKeyError(NbxError, ValueError):
    """A launch key that cannot be formed (a missing or malformed input, a ladder the device file lacks)."""


class KeyNotCertified(NbxError, LookupError):
    """A launch with no certified setting (or no formable key) while certified-only mode is on."""

    def __init__(self, message: str, *, kernel: str, key: str | None, census_knew: bool | None):
        super().__init__(message)
        self.kernel = kernel
        self.key = key
        self.census_knew = census_knew


class CertificateError(FileFormatError):
    """A certificate refused: its schema, its compiler or device class, or parameters its kernel lacks."""


class ScreenRefusal(NbxError, RuntimeError):
    """A correctness screen that cannot decide (no tolerance stated) or that no candidate passes."""


class WitnessDriftError(NbxError, RuntimeError):
    """A sweep whose witness kernel timed differently before and after it, beyond the stated tolerance."""

    def __init__(self, message: str, *, before_ms: float, after_ms: float, drift: float, tolerance: float):
        super().__init__(message)
        self.before_ms = before_ms
        self.after_ms = after_ms
        self.drift = drift
        self.tolerance = tolerance


class TimingRefusal(NbxError, RuntimeError):
    """A timing that cannot be made as stated (no timer for the device, no L2 size to flush)."""


class DeviceClassError(DeviceError):
    """A device whose class (name and memory) or compiler cannot be named for its certificates."""


class GraphCaptureError(DeviceError):
    """A launch sequence that cannot be captured as a graph (a host sync, a driver allocation), or a failed capture."""

    def __init__(self, message: str, *, operation: str | None = None):
        super().__init__(message)
        self.operation = operation  # the call that broke the capture, where the driver names one


class DataDependentShapeError(GraphCaptureError):
    """A captured step whose outputs changed shape or dtype between two runs of the same captured key."""


class DuplicateRegistrationError(NbxError, RuntimeError):
    """Two providers implement one op on one backend and neither says which serves (a priority)."""
