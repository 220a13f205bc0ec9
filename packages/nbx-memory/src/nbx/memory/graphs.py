"""Capture and replay of launch sequences: a function's device work recorded once as a graph, replayed.

    graph = graphs.capture(step, "cuda:0")   # runs step once eagerly (warm-up), then captures it
    out = graph.replay()                     # the same launches again, on the current stream
    graph.close()                            # or let it be collected

What a capture needs from a device is the StreamCapture interface below; nbx.devices.nvidia.graphs
implements it with CUDA stream capture (cudaStreamBeginCapture / EndCapture / GraphInstantiate /
GraphLaunch) and registers it for 'cuda'. Only the launches are replayed: the Python of the function
runs at capture, never again, so its inputs must live in tensors allocated before the capture (write
new values into them between replays) and its outputs are the tensors it returned at capture, which
every replay overwrites.

Memory. Every allocation the capturing thread makes on the device (the warm-up's and the capture's)
comes from a pool private to the graph: the graph's launches hold those addresses, so no one else may
receive them while the graph lives. Blocks freed during the capture are reused by later launches of
the same capture (stream order makes that safe); the private pool gives its segments back to the
driver only once the graph is closed, and then as soon as each segment is wholly free (an output still
held keeps its own). While the capture runs, the private pool's own growth is the one driver
allocation allowed (the device adapter makes it outside the capture's rules, as torch's private pools
do; the addresses are fixed in the graph and never freed before it is gone). The warm-up usually
leaves the pool holding all the capture needs.

Refusals. Work that cannot be captured breaks the capture: a host synchronization (a stream or device
synchronize, a copy to pageable host memory such as `tensor.numpy()`), an allocation or a free from
the driver called by the function itself. The driver's error becomes GraphCaptureError naming the
call; the capture is ended and nothing of it is kept. A capture the driver invalidated without the
function seeing an error (one it swallowed) is refused the same way when it ends.
"""
from __future__ import annotations

import gc
import threading
import weakref
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

from nbx.core.device import Device, as_device
from nbx.core.errors import ArgumentError, DeviceError, GraphCaptureError, NotSupportedError

from . import allocator as _allocator
from .pool import NBX, Pool
from .rules import PoolRules


@runtime_checkable
class StreamCapture(Protocol):
    """What a device offers nbx.memory.graphs (streams are the device's own objects)."""

    def new_stream(self, device: Device) -> Any: ...          # a stream to capture on (never the default one)
    def current_stream(self, device: Device) -> Any: ...
    def use_stream(self, stream: Any): ...                    # context manager: nbx's work on its device goes to stream
    def wait(self, waiter: Any, stream: Any) -> None: ...     # waiter's later work waits for stream's work so far
    def synchronize(self, stream: Any) -> None: ...
    def begin(self, stream: Any) -> None: ...
    def end(self, stream: Any) -> Any: ...                    # the graph; GraphCaptureError if the capture broke
    def abort(self, stream: Any) -> None: ...                 # end a capture that failed, keep nothing of it
    def violation(self, exc: BaseException) -> str | None: ...  # why exc means "cannot be captured", else None
    def instantiate(self, graph: Any) -> Any: ...
    def launch(self, executable: Any, stream: Any) -> None: ...
    def destroy(self, graph: Any, executable: Any) -> None: ...
    def node_count(self, graph: Any) -> int | None: ...
    def segment_source(self, device: Device): ...             # driver memory for the private pool, allowed mid-capture


_CAPTURES: dict[str, StreamCapture] = {}


def register_capture(device_type: str, capture: StreamCapture) -> None:
    if not isinstance(capture, StreamCapture):
        raise DeviceError(f"{capture!r} does not implement nbx.memory.graphs.StreamCapture")
    _CAPTURES[device_type] = capture


def capture_support(device_type: str) -> StreamCapture:
    """The device type's capture; its backend is started first (the CUDA backend registers it then)."""
    if device_type not in _CAPTURES:
        try:
            from nbx.core.device import get_backend
            start = getattr(get_backend(device_type), "start", None)
        except DeviceError:
            start = None
        if start is not None:
            start()
    try:
        return _CAPTURES[device_type]
    except KeyError:
        raise NotSupportedError(f"devices of type {device_type!r} cannot capture launch sequences (graphs exist "
                                f"for {sorted(_CAPTURES) or 'no device type'} in this process)") from None


class _PrivateSource:
    """The private pool's driver: a segment it gives back is freed only once the graph is closed."""

    def __init__(self, inner):
        self.inner = inner
        self.open = True
        self.retired: list[int] = []
        self.live = 0  # segments held (from the driver, not yet freed)

    def allocate(self, nbytes: int) -> int | None:
        address = self.inner.allocate(nbytes)
        if address is not None:
            self.live += 1
        return address

    def free(self, address: int) -> None:
        if self.open:
            self.retired.append(address)  # the graph's launches may still name this memory
            return
        self.inner.free(address)
        self.live -= 1

    def memory_info(self):
        return self.inner.memory_info()

    def close(self) -> None:
        self.open = False
        while self.retired:
            self.inner.free(self.retired.pop())
            self.live -= 1


class _PrivateRouting:
    """The allocator registered while a graph is warmed up and captured: the capturing thread's
    allocations on the device come from the graph's pool, everything else from the usual allocator."""

    def __init__(self, inner, device: Device, pool: Pool):
        self.inner, self.device, self.pool = inner, device, pool
        self.thread = threading.get_ident()
        self.handed: weakref.WeakSet = weakref.WeakSet()

    def _private(self, device: Device) -> bool:
        return device == self.device and threading.get_ident() == self.thread

    def allocate(self, nbytes: int, device: Device, stream=None):
        if self._private(device):
            block = self.pool.allocate(nbytes, stream)
            self.handed.add(block)
            return block
        return self.inner.allocate(nbytes, device, stream)

    def record_stream(self, block, stream) -> None:
        if block in self.handed:
            self.pool.record_stream(block, stream)
        else:
            self.inner.record_stream(block, stream)

    def stats(self, device: Device):
        return self.inner.stats(device)

    def __getattr__(self, name: str):  # pool_stats, empty_cache, memory_summary... of the usual allocator
        return getattr(self.inner, name)


@contextmanager
def _routed(device: Device, pool: Pool):
    try:
        inner = _allocator.get_allocator(device.type)
    except DeviceError:
        inner = _NoAllocator(device.type)
    _allocator.register_allocator(device.type, _PrivateRouting(inner, device, pool))
    try:
        yield
    finally:
        if isinstance(inner, _NoAllocator):
            _allocator._ALLOCATORS.pop(device.type, None)
        else:
            _allocator.register_allocator(device.type, inner)


class _NoAllocator:
    def __init__(self, device_type: str):
        self.device_type = device_type

    def allocate(self, nbytes, device, stream=None):
        return _allocator.get_allocator(self.device_type).allocate(nbytes, device, stream)  # raises, by name

    def stats(self, device):
        return _allocator.AllocatorStats(0, 0, 0, 0)


class _Resources:
    """What a graph holds on the device; freed once, by close() or when the graph is collected."""

    def __init__(self, support: StreamCapture, source: _PrivateSource, pool: Pool):
        self.support, self.source, self.pool = support, source, pool
        self.graph = self.executable = None
        self.streams: list = []  # streams the graph was launched on (synchronized before its memory goes)
        self.last_stream = None

    def __call__(self) -> None:
        for stream in self.streams:
            self.support.synchronize(stream)
        self.streams, self.last_stream = [], None
        if self.graph is not None or self.executable is not None:
            self.support.destroy(self.graph, self.executable)
            self.graph = self.executable = None
        self.source.close()
        self.pool._parked_limit = 0  # from now on a wholly free segment goes back at once
        self.pool.empty_cache()


class Graph:
    """A captured launch sequence with its private memory; replay() runs it again."""

    def __init__(self, device: Device, outputs, resources: _Resources, nodes: int | None, stream):
        self.device = device
        self.outputs = outputs
        self.nodes = nodes           # launches and copies captured (None where the driver cannot say)
        self.pool = resources.pool   # the private pool: its stats say what the graph holds
        self.replays = 0
        self._capture_stream = stream
        self._resources = resources
        self._finalizer = weakref.finalize(self, resources)
        self._finalizer.atexit = False  # the process is ending: the driver takes everything back

    def replay(self, stream=None):
        """Launch the captured sequence on stream (the device's current stream by default); returns outputs."""
        res = self._resources
        if res.executable is None:
            raise ArgumentError("replay of a closed graph")
        stream = res.support.current_stream(self.device) if stream is None else stream
        res.support.launch(res.executable, stream)
        if stream is not res.last_stream:  # the same stream object again: already remembered
            res.last_stream = stream
            if stream not in res.streams:
                res.streams.append(stream)
        self.replays += 1
        return self.outputs

    def close(self) -> None:
        """Destroy the graph and give its private memory back (outputs still held keep theirs until dropped)."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> Graph:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.replays} replays"
        return f"Graph({self.device}, {self.nodes} nodes, {state})"


def capture(fn, device, *, warmup: int = 1, rules: PoolRules = NBX) -> Graph:
    """Run fn() `warmup` times eagerly, then capture one more call of it; returns the Graph.

    Both run on a fresh capture stream made current for the device, after the work already queued on
    the current stream, with their memory from the graph's private pool. The warm-up compiles and
    loads the kernels (which a capture cannot do) and fills the private pool.
    """
    device = device if isinstance(device, Device) else as_device(device)
    if not isinstance(warmup, int) or warmup < 0:
        raise ArgumentError(f"warmup is a count of eager runs before the capture (>= 0), not {warmup!r}")
    support = capture_support(device.type)
    source = _PrivateSource(support.segment_source(device))
    pool = Pool(source, rules, parked_fraction=1.0, device=device)  # nothing trimmed while the graph lives
    resources = _Resources(support, source, pool)
    stream = support.new_stream(device)
    try:
        support.wait(stream, support.current_stream(device))
        with _routed(device, pool), support.use_stream(stream):
            for _ in range(warmup):
                fn()
            support.synchronize(stream)
            outputs = _captured(support, stream, fn)
            resources.graph = support.end(stream)
        resources.executable = support.instantiate(resources.graph)
        nodes = support.node_count(resources.graph)
    except BaseException:
        resources()
        raise
    return Graph(device, outputs, resources, nodes, stream)


def _captured(support: StreamCapture, stream, fn):
    # Garbage collected mid-capture, an unrelated object's finalizer could call the driver (destroy a
    # stream, free memory) inside the capture: collect before, and not during.
    gc.collect()
    collecting = gc.isenabled()
    gc.disable()
    support.begin(stream)
    try:
        return fn()
    except BaseException as exc:
        support.abort(stream)
        why = support.violation(exc)
        if why is None:
            raise
        raise GraphCaptureError(f"the launch sequence cannot be captured: {why}; run such work before or after "
                                f"the captured function, not inside it",
                                operation=getattr(exc, "function", None)) from exc
    finally:
        if collecting:
            gc.enable()
