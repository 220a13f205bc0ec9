"""CUDA stream capture behind nbx.memory.graphs: capture on a stream, instantiate, launch.

    from nbx.memory import graphs
    graph = graphs.capture(step, "cuda:0")
    graph.replay()

The capture runs in the global mode: any call of this thread that could make the device work
unordered with the capture (a synchronize, cudaMalloc, cudaFree, a copy to pageable host memory)
fails with one of the stream-capture error codes and invalidates the capture; violation() names it.
The one exception is the graph's private pool growing mid-capture: its cudaMalloc runs with the
thread switched to the relaxed mode for that call alone (the addresses it returns are fixed in the
graph; the pool never frees them while the graph lives).

The graph functions are declared on the runtime library at first use, so a runtime without them
(or a simulated one) serves everything else.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from ctypes import POINTER, byref, c_int, c_size_t, c_ulonglong, c_void_p

from nbx.core.device import Device
from nbx.core.errors import GraphCaptureError

from . import runtime
from .errors import CudaError
from .streams import Event, Stream, current_stream, use_stream

# cudaStreamCaptureMode
CAPTURE_GLOBAL, CAPTURE_THREAD_LOCAL, CAPTURE_RELAXED = 0, 1, 2
# cudaStreamCaptureStatus
CAPTURE_NONE, CAPTURE_ACTIVE, CAPTURE_INVALIDATED = 0, 1, 2

# the runtime's stream-capture error codes (driver_types.h), by name
CAPTURE_ERRORS = {
    900: "cudaErrorStreamCaptureUnsupported", 901: "cudaErrorStreamCaptureInvalidated",
    902: "cudaErrorStreamCaptureMerge", 903: "cudaErrorStreamCaptureUnmatched",
    904: "cudaErrorStreamCaptureUnjoined", 905: "cudaErrorStreamCaptureIsolation",
    906: "cudaErrorStreamCaptureImplicit", 907: "cudaErrorCapturedEvent", 908: "cudaErrorStreamCaptureWrongThread",
}
HOST_SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "cudaMemcpyPeer", "cudaMemset", "cudaStreamQuery", "cudaEventQuery")
DRIVER_ALLOCATIONS = ("cudaMalloc", "cudaFree", "cudaHostAlloc", "cudaFreeHost", "cuMemCreate", "cuMemMap",
                      "cuMemUnmap", "cuMemRelease", "cuMemAddressReserve", "cuMemAddressFree")

GRAPH_PROTOTYPES: dict[str, list] = {
    "cudaStreamBeginCapture": [c_void_p, c_int],
    "cudaStreamEndCapture": [c_void_p, POINTER(c_void_p)],
    "cudaStreamIsCapturing": [c_void_p, POINTER(c_int)],
    "cudaThreadExchangeStreamCaptureMode": [POINTER(c_int)],
    "cudaGraphInstantiateWithFlags": [POINTER(c_void_p), c_void_p, c_ulonglong],
    "cudaGraphLaunch": [c_void_p, c_void_p],
    "cudaGraphExecDestroy": [c_void_p],
    "cudaGraphDestroy": [c_void_p],
    "cudaGraphGetNodes": [c_void_p, c_void_p, POINTER(c_size_t)],
}


def _rt() -> runtime.CudaRuntime:
    rt = runtime.rt()
    if not getattr(rt, "graphs_declared", False):
        for name, argtypes in GRAPH_PROTOTYPES.items():
            fn = getattr(rt.lib, name)
            fn.argtypes = argtypes
            fn.restype = c_int
        rt.graphs_declared = True
    return rt


def capture_status(stream: Stream) -> int:
    """CAPTURE_NONE, CAPTURE_ACTIVE or CAPTURE_INVALIDATED."""
    status = c_int()
    with runtime.device_guard(stream.device):
        _rt().call("cudaStreamIsCapturing", stream.handle, byref(status))
    return status.value


@contextmanager
def relaxed_capture():
    """This thread may make calls a capture forbids (a cudaMalloc) inside the block."""
    mode = c_int(CAPTURE_RELAXED)
    _rt().call("cudaThreadExchangeStreamCaptureMode", byref(mode))
    try:
        yield
    finally:
        _rt().call("cudaThreadExchangeStreamCaptureMode", byref(mode))


def _malloc_in_capture(nbytes: int, index: int) -> int:
    with relaxed_capture():
        return runtime.malloc(nbytes, index)


class CudaCapture:
    """nbx.memory.graphs.StreamCapture for 'cuda' devices."""

    def new_stream(self, device: Device) -> Stream:
        # non-blocking: work that others queue on the legacy default stream meanwhile does not join the capture
        return Stream(device.index, non_blocking=True)

    def current_stream(self, device: Device) -> Stream:
        return current_stream(device.index)

    def use_stream(self, stream: Stream):
        return use_stream(stream)

    def wait(self, waiter: Stream, stream: Stream) -> None:
        if waiter != stream:
            waiter.wait_event(Event(stream.device, timing=False).record(stream))

    def synchronize(self, stream: Stream) -> None:
        stream.synchronize()

    def begin(self, stream: Stream) -> None:
        with runtime.device_guard(stream.device):
            _rt().call("cudaStreamBeginCapture", stream.handle, CAPTURE_GLOBAL)

    def end(self, stream: Stream):
        graph = c_void_p()
        rt = _rt()
        with runtime.device_guard(stream.device):
            code = rt.lib.cudaStreamEndCapture(stream.handle, byref(graph))
        if code != runtime.SUCCESS:
            err = rt.error("cudaStreamEndCapture", code)
            raise GraphCaptureError(f"the capture on {stream} was invalidated ({err.name}): a call inside it broke "
                                    f"the capture's rules even though the function did not raise", operation=None)
        return graph.value

    def abort(self, stream: Stream) -> None:
        """End a capture after an error, whatever state it is in; drop the partial graph."""
        rt = _rt()
        graph = c_void_p()
        with runtime.device_guard(stream.device):
            status = c_int()
            if rt.lib.cudaStreamIsCapturing(stream.handle, byref(status)) != runtime.SUCCESS:
                rt.lib.cudaGetLastError()
            if status.value == CAPTURE_NONE:
                return
            rt.lib.cudaStreamEndCapture(stream.handle, byref(graph))
            rt.lib.cudaGetLastError()  # an invalidated capture ends with an error: expected here
            if graph.value:
                rt.lib.cudaGraphDestroy(graph.value)

    def violation(self, exc: BaseException) -> str | None:
        if not isinstance(exc, CudaError) or exc.code not in CAPTURE_ERRORS:
            return None
        what = exc.function
        if what in HOST_SYNCS or what.startswith(("cudaMemcpy", "cudaStreamSynchronize")):
            kind = "a host synchronization"
        elif what in DRIVER_ALLOCATIONS:
            kind = "an allocation (or free) from the driver"
        else:
            kind = "an operation stream capture does not allow"
        return f"{what} is {kind} and failed with {exc.name} ({exc.code})"

    def instantiate(self, graph):
        executable = c_void_p()
        _rt().call("cudaGraphInstantiateWithFlags", byref(executable), graph, 0)
        return executable.value

    def launch(self, executable, stream: Stream) -> None:
        # a replay's host cost is the point of a graph: no context manager and no new ctypes objects
        # on the common path (the stream's device already current), the guard only otherwise. With one
        # device visible it is always current: the query (1.1 us of the H200 host's 3.1) is skipped.
        rt = _rt()
        if runtime.device_count() > 1 and not _is_current(rt, stream.device):
            with runtime.device_guard(stream.device):
                rt.call("cudaGraphLaunch", executable, stream.handle)
            return
        code = rt.lib.cudaGraphLaunch(executable, stream.handle)
        if code != runtime.SUCCESS:
            raise rt.error("cudaGraphLaunch", code)

    def destroy(self, graph, executable) -> None:
        if executable:
            _rt().call("cudaGraphExecDestroy", executable)
        if graph:
            _rt().call("cudaGraphDestroy", graph)

    def node_count(self, graph) -> int | None:
        count = c_size_t()
        code = _rt().lib.cudaGraphGetNodes(graph, None, byref(count))
        if code != runtime.SUCCESS:
            _rt().lib.cudaGetLastError()
            return None
        return count.value

    def segment_source(self, device: Device):
        from nbx.memory.sources import DriverSource
        return DriverSource(_malloc_in_capture, runtime.free, device.index, runtime.memory_info)


_LAUNCH = threading.local()  # .device: the c_int cudaGetDevice writes, one per thread


def _is_current(rt, index: int) -> bool:
    device = _LAUNCH.__dict__.get("device")
    if device is None:
        device = _LAUNCH.device = c_int()
    rt.lib.cudaGetDevice(byref(device))
    return device.value == index
CAPTURE = CudaCapture()


def register() -> None:
    from nbx.memory.graphs import register_capture
    register_capture("cuda", CAPTURE)
