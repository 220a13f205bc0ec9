"""Bounds checks that cost no host synchronization: a device's pending record, read at the next sync.

take / embedding / index_select / take_along_axis / gather / scatter / index_put (and getitem and
setitem with integer arrays) check each index their kernel loads: one outside [-n, n) is masked
(never read or written out of bounds) and raises the device's *record*, one int64 a device, made
(zeroed) once and never per call, into which the kernel's atomic max writes
`op code << TAG_SHIFT | the dim's size` (the check rides on the index load the gather does anyway).
Nothing is read back at the call. The record is read at the next point where the host waits for
that device anyway, as a GPU's asynchronous errors surface (torch's device-side asserts): a host
read of one of its tensors (`numpy()`, `item()`, `tolist()`, `repr`, `.to("cpu")`, a DLPack
export the host reads) or `nbx.synchronize(device)`. It is cleared when read, and a raised one is
an IndexingError naming the op and the dim's size (of the largest code and size raised since the
last read, when several were). `x[i] = v` checks before it writes back (a sync: a refused
assignment leaves x unchanged); the out-of-place ops return their result and raise at the next read.

Inside a captured step (nbx.core.graph) the kernels raise the same record: made before the capture
(prepare(); a capture can neither allocate nor fill it), raised by a replay's kernels (a replay
runs no Python: replayed() marks it to be read), read alike. The eager fallback runs every call of
a step the same way, so a step behaves alike on every device.

Devices: cpu checks on the host at once (its ops are numpy's: nothing to defer); interp (Triton's
interpreter) follows the GPU semantics, so CI runs the path the GPU runs. A loop that reads every
step's outputs can read them under `postponed()` and check once at its end.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

from .device import Device, get_backend
from .errors import IndexingError

# the op a kernel names in the record (kernels pass `code << TAG_SHIFT` as a constexpr)
OP_CODES = {"take": 1, "take_along_axis": 2, "scatter": 3}
TAG_SHIFT = 48


@dataclass
class _Record:
    flag: object                                  # Tensor int64 (1,) on the device
    ops: dict = field(default_factory=dict)       # op -> the dim sizes checked inside steps, for the message
    armed: bool = False                           # a kernel may have raised it since the last read


_RECORDS: dict[Device, _Record] = {}
_LOCAL = threading.local()


def prepare(device: Device) -> None:
    """Make device's record (zeroed) once: before a capture, which can neither allocate nor fill it."""
    if device not in _RECORDS and device.type != "cpu":
        from . import dtypes
        from .ops.creation import zeros
        _RECORDS[device] = _Record(zeros(1, dtype=dtypes.int64, device=device))


@contextmanager
def step_running():
    """While a step's function runs (each run: warm-up, capture, eager fallback), no record is read."""
    _LOCAL.depth = getattr(_LOCAL, "depth", 0) + 1
    try:
        yield
    finally:
        _LOCAL.depth -= 1


def deferring() -> bool:
    return getattr(_LOCAL, "depth", 0) > 0


def flag_for(device: Device, op: str, size: int):
    """The record a checking kernel of op is launched with (nothing allocated or zeroed per call);
    marked to be read at the next synchronization."""
    record = _RECORDS.get(device)
    if record is None:
        prepare(device)
        record = _RECORDS[device]
    if deferring():
        record.ops.setdefault(op, set()).add(size)
    record.armed = True
    return record.flag


def replayed(device: Device) -> None:
    """A step ran on device (a graph replay runs no Python): its kernels may have raised the record."""
    record = _RECORDS.get(device)
    if record is not None and record.ops:
        record.armed = True


def check(device: Device) -> None:
    """Read device's record if a kernel may have raised it since the last read; clear it, and raise
    IndexingError if it was raised. Nothing is read inside a step, nor when nothing is pending."""
    record = _RECORDS.get(device)
    if record is None or not record.armed or deferring() or getattr(_LOCAL, "postponed", 0):
        return
    record.armed = False  # before the read: the read itself is a host read that checks
    tag = int(record.flag.numpy()[0])
    if tag:
        from .dispatch import implementation
        implementation("fill_", device)(record.flag, 0)
        raise IndexingError(describe(tag, device, record.ops))


@contextmanager
def postponed():
    """Host reads in the block leave the records armed, for the next read after it (or an
    explicit check) to read: a decode loop reads each replayed step's tokens under it and checks
    once after its last step, one read a token rather than two (the tokens, then the record)."""
    _LOCAL.postponed = getattr(_LOCAL, "postponed", 0) + 1
    try:
        yield
    finally:
        _LOCAL.postponed -= 1


def describe(tag: int, device: Device, step_ops: dict) -> str:
    names = {code: op for op, code in OP_CODES.items()}
    op, size = names.get(tag >> TAG_SHIFT, f"op code {tag >> TAG_SHIFT}"), tag & ((1 << TAG_SHIFT) - 1)
    steps = "; ops checked inside captured steps there: " + ", ".join(
        f"{name} (dims of size {', '.join(map(str, sorted(sizes)))})" for name, sizes in sorted(step_ops.items())) \
        if step_ops else ""
    return (f"{op}: an index is out of range for a dim of size {size} (flagged on {device} by its kernel, raised at "
            f"the next synchronization: nothing was read or written out of bounds{steps})")


def synchronize(device=None) -> None:
    """Wait for device's queued work, then raise the IndexingError a bounds check of its kernels
    left pending there, as torch.cuda.synchronize() raises a device-side assert. With no device:
    the current device of every numbered (GPU) backend loaded, as torch.cuda.synchronize() waits
    for the current one, and every device holding a record."""
    from .device import as_device
    targets = [as_device(device)] if device is not None else list(dict.fromkeys([*_current_devices(), *_RECORDS]))
    for dev in targets:
        get_backend(dev.type).synchronize(dev)
        check(dev)


def _current_devices() -> list[Device]:
    """The current device of each numbered backend registered so far that has devices (a backend
    not loaded has queued nothing; one whose driver is absent here has no device to wait for)."""
    from .device import _BACKENDS
    from .errors import NbxError
    current = []
    for name, backend in list(_BACKENDS.items()):
        if not backend.indexed:
            continue
        try:
            if backend.device_count() > 0:
                current.append(Device(name, backend.current_device()))
        except NbxError:
            continue
    return current
