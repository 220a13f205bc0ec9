"""Streams and events, and the current stream of each device (per thread).

Every nbx operation on a cuda device runs on that device's current stream: the legacy default
stream (handle 0) unless a `with stream:` block (or `use_stream`) names another. Triton launches
take the same stream (see triton_driver). A Stream made here is a blocking stream by default: it
orders with the legacy default stream, so work on the default stream never races with it.
"""
from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from ctypes import byref, c_float, c_void_p

from . import runtime
from .errors import StreamMismatchError

LEGACY_DEFAULT = 0       # the handle the runtime takes for the legacy default stream
LEGACY_HANDLE = 1        # cudaStreamLegacy: the same stream, named explicitly (DLPack's 1)
PER_THREAD_HANDLE = 2    # cudaStreamPerThread (DLPack's 2)


class Stream:
    """A CUDA stream of one device: created here (owned, destroyed when collected) or wrapped."""

    __slots__ = ("device", "handle", "priority", "_finalizer", "__weakref__")

    def __init__(self, device: int | None = None, priority: int = 0, non_blocking: bool = False):
        index = runtime.get_device() if device is None else runtime.check_ordinal(device)
        handle = c_void_p()
        flags = runtime.STREAM_NON_BLOCKING if non_blocking else 0
        with runtime.device_guard(index):
            runtime.rt().call("cudaStreamCreateWithPriority", byref(handle), flags, priority,
                              context=f"cuda:{index} priority {priority}")
        self.device = index
        self.handle = handle.value or 0
        self.priority = priority
        self._finalizer = weakref.finalize(self, _destroy_stream, index, self.handle)
        self._finalizer.atexit = False

    @classmethod
    def wrap(cls, handle: int, device: int | None = None) -> Stream:
        """A stream someone else owns (a consumer's stream, the default streams); never destroyed here."""
        self = object.__new__(cls)
        self.device = runtime.get_device() if device is None else runtime.check_ordinal(device)
        self.handle = int(handle)
        self.priority = 0
        self._finalizer = None
        return self

    @classmethod
    def default(cls, device: int | None = None) -> Stream:
        return cls.wrap(LEGACY_DEFAULT, device)

    @property
    def is_default(self) -> bool:
        return self.handle in (LEGACY_DEFAULT, LEGACY_HANDLE)

    def synchronize(self) -> None:
        with runtime.device_guard(self.device):
            runtime.rt().call("cudaStreamSynchronize", self.handle)

    def query(self) -> bool:
        """True when every piece of work queued so far has finished."""
        with runtime.device_guard(self.device):
            return runtime.rt().query("cudaStreamQuery", self.handle)

    def wait_event(self, event: Event) -> None:
        """Work queued after this call waits until the event's recorded work is done (no host wait)."""
        with runtime.device_guard(self.device):
            runtime.rt().call("cudaStreamWaitEvent", self.handle, event.handle, 0)

    def wait_stream(self, other: Stream) -> None:
        if other == self:
            return
        self.wait_event(Event(other.device, timing=False).record(other))

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event(self.device)
        return event.record(self)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Stream) or other.device != self.device:
            return False
        return other.handle == self.handle or (other.is_default and self.is_default)

    def __hash__(self) -> int:
        return hash((self.device, LEGACY_DEFAULT if self.is_default else self.handle))

    def __enter__(self) -> Stream:
        _push(self)
        return self

    def __exit__(self, *exc) -> None:
        _pop(self)

    def __repr__(self) -> str:
        name = "default" if self.is_default else f"0x{self.handle:x}"
        return f"Stream(cuda:{self.device}, {name}, priority={self.priority})"


def _destroy_stream(index: int, handle: int) -> None:
    with runtime.device_guard(index):
        runtime.rt().call("cudaStreamDestroy", handle)


class Event:
    """A CUDA event: record it on a stream, wait for it on another, time between two of them."""

    __slots__ = ("device", "handle", "timing", "_finalizer", "__weakref__")

    def __init__(self, device: int | None = None, timing: bool = True, blocking: bool = False):
        index = runtime.get_device() if device is None else runtime.check_ordinal(device)
        flags = (0 if timing else runtime.EVENT_DISABLE_TIMING) | (runtime.EVENT_BLOCKING_SYNC if blocking else 0)
        handle = c_void_p()
        with runtime.device_guard(index):
            runtime.rt().call("cudaEventCreateWithFlags", byref(handle), flags)
        self.device = index
        self.handle = handle.value or 0
        self.timing = timing
        self._finalizer = weakref.finalize(self, _destroy_event, index, self.handle)
        self._finalizer.atexit = False

    def record(self, stream: Stream | None = None) -> Event:
        stream = current_stream(self.device) if stream is None else stream
        if stream.device != self.device:
            raise StreamMismatchError(f"an event of cuda:{self.device} cannot be recorded on {stream}")
        with runtime.device_guard(self.device):
            runtime.rt().call("cudaEventRecord", self.handle, stream.handle)
        return self

    def wait(self, stream: Stream | None = None) -> None:
        """Make stream (the current one by default) wait for this event."""
        (current_stream(self.device) if stream is None else stream).wait_event(self)

    def query(self) -> bool:
        with runtime.device_guard(self.device):
            return runtime.rt().query("cudaEventQuery", self.handle)

    def synchronize(self) -> None:
        with runtime.device_guard(self.device):
            runtime.rt().call("cudaEventSynchronize", self.handle)

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event to end (both recorded and complete, both timing events)."""
        ms = c_float()
        with runtime.device_guard(self.device):
            runtime.rt().call("cudaEventElapsedTime", byref(ms), self.handle, end.handle)
        return ms.value

    def __repr__(self) -> str:
        return f"Event(cuda:{self.device}, 0x{self.handle:x})"


def _destroy_event(index: int, handle: int) -> None:
    with runtime.device_guard(index):
        runtime.rt().call("cudaEventDestroy", handle)


# ---- the current stream of each device, per thread --------------------------------------------
class _PerThread(threading.local):
    stacks = None  # device index -> the streams entered on this thread (use_stream), innermost last


_local = _PerThread()


def _stack(device: int) -> list[Stream]:
    stacks = _local.stacks
    if stacks is None:
        stacks = _local.stacks = {}
    return stacks.setdefault(device, [])


def _push(stream: Stream) -> None:
    _stack(stream.device).append(stream)


def _pop(stream: Stream) -> None:
    stack = _stack(stream.device)
    if not stack or stack[-1] is not stream:
        raise StreamMismatchError(f"{stream} is not the innermost current stream of cuda:{stream.device}")
    stack.pop()


_defaults: dict[int, Stream] = {}


def current_stream(device: int | None = None) -> Stream:
    """The stream nbx's work (and every Triton launch) on device goes to; asked once per launch."""
    index = runtime.get_device() if device is None else device
    stacks = _local.stacks  # _stack(index), without making an empty one
    if stacks:
        stack = stacks.get(index)
        if stack:
            return stack[-1]
    default = _defaults.get(index)
    if default is None:
        default = _defaults[index] = Stream.default(index)
    return default


def current_handle(device: int) -> int:
    """current_stream(device).handle in one frame: the stream handle every kernel launch on device asks for."""
    stacks = _local.stacks
    if stacks:
        stack = stacks.get(device)
        if stack:
            return stack[-1].handle
    default = _defaults.get(device)
    return (current_stream(device) if default is None else default).handle


@contextmanager
def use_stream(stream: Stream):
    """Run the block with stream as its device's current stream."""
    with stream:
        yield stream
