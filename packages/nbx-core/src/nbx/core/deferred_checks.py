"""Bounds checks deferred inside a captured step (nbx.core.graph).

Eager take / embedding / take_along_axis / scatter / index_put read their kernel's bounds flag
back at once and raise IndexingError. Inside a step's function a read-back is impossible where
steps are graphs (a host synchronization, refused by the capture; and a graph replays no Python),
so there the kernels raise the device's *step flag* instead: an int32 made before the capture,
which no replay clears. A bad index is still masked in the kernel (never read or written out of
bounds). The flag is read at the next check: the next host read of a tensor of that device
(`numpy()`, `item()`, `.to("cpu")`: reading the step's outputs, for instance) or the next eager
bounds check there; it is cleared when read, and a raised one is an IndexingError naming the
deferred ops. The eager fallback (cpu, interp) runs every call of a step the same way, so a step
behaves alike on every device. On cpu the ops check on the host at once (nothing to read back).
A loop that reads every step's outputs can read them under `postponed()` and check once at its end.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

from .device import Device
from .errors import IndexingError


@dataclass
class _StepFlag:
    flag: object                                  # Tensor int32 (1,) on the device
    ops: dict = field(default_factory=dict)       # op -> the dim sizes it checked, for the message
    armed: bool = False                           # a step may have raised it since the last read


_FLAGS: dict[Device, _StepFlag] = {}
_LOCAL = threading.local()


def prepare(device: Device) -> None:
    """Make device's step flag (zeroed) before a capture: a capture cannot allocate or fill it first."""
    if device not in _FLAGS and device.type != "cpu":
        from . import dtypes
        from .ops.creation import zeros
        _FLAGS[device] = _StepFlag(zeros(1, dtype=dtypes.int32, device=device))


@contextmanager
def step_running():
    """While a step's function runs (each run: warm-up, capture, eager fallback), ops defer their checks."""
    _LOCAL.depth = getattr(_LOCAL, "depth", 0) + 1
    try:
        yield
    finally:
        _LOCAL.depth -= 1


def deferring() -> bool:
    return getattr(_LOCAL, "depth", 0) > 0


def step_flag(device: Device, op: str, size: int):
    """The flag an op inside a step raises for a bad index (prepare() made it before the capture)."""
    state = _FLAGS.get(device)
    if state is None:  # a step made outside nbx.graph.capture: made now (not inside a device capture)
        prepare(device)
        state = _FLAGS[device]
    state.ops.setdefault(op, set()).add(size)
    state.armed = True
    return state.flag


def replayed(device: Device) -> None:
    """A step ran on device (a graph replay runs no Python): its flag may have been raised."""
    state = _FLAGS.get(device)
    if state is not None and state.ops:
        state.armed = True


def check(device: Device) -> None:
    """Read device's step flag if a step may have raised it since the last read; clear it, and raise
    IndexingError if it was raised. Nothing is read inside a step, nor when nothing is pending."""
    state = _FLAGS.get(device)
    if state is None or not state.armed or deferring() or getattr(_LOCAL, "postponed", 0):
        return
    state.armed = False  # before the read: the read itself is a host read that checks
    if state.flag.numpy()[0]:
        from .dispatch import implementation
        implementation("fill_", device)(state.flag, 0)
        ops = ", ".join(f"{op} (dims of size {', '.join(map(str, sorted(sizes)))})"
                        for op, sizes in sorted(state.ops.items()))
        raise IndexingError(f"an index was out of range in a captured step on {device} (checked when read: "
                            f"nothing was read or written out of bounds); the ops checked inside steps there: {ops}")


@contextmanager
def postponed():
    """Host reads in the block leave the step flags armed, for the next read after it (or an
    explicit check) to read: a decode loop reads each replayed step's tokens under it and checks
    once after its last step, one read a token rather than two (the tokens, then the flag)."""
    _LOCAL.postponed = getattr(_LOCAL, "postponed", 0) + 1
    try:
        yield
    finally:
        _LOCAL.postponed -= 1
