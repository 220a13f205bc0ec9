"""The 'cuda' backend of nbx.core: memory through nbx.memory's caching pool, copies through cudaMemcpy.

Every call makes the storage's own device current (device_guard) and runs on that device's
current stream; calls that hand bytes to or from the host wait for that stream. Byte ranges are
checked against the storage before the driver is called (CopyOutOfBoundsError).
"""
from __future__ import annotations

import threading

import numpy as np
from nbx.core.device import Device
from nbx.core.errors import DLPackError
from nbx.core.storage import Storage
from nbx.memory import allocator as _allocators  # imported once: an import per allocation costs host time

from . import runtime, staging
from . import streams as _streams
from .errors import CopyOutOfBoundsError
from .streams import LEGACY_DEFAULT, Event, Stream, current_handle, current_stream


_new = object.__new__


def check_range(storage: Storage, byte_offset: int, nbytes: int, what: str) -> None:
    """A byte range outside the storage is refused before the driver is called."""
    storage.check_range(byte_offset, nbytes, what, "the driver", CopyOutOfBoundsError)


class CudaBackend:
    name = "cuda"
    runs_triton_kernels = True   # nbx.kernels' implementations serve it (nbx.core.dispatch.TRITON)
    indexed = True
    host_accessible = False
    dlpack_device_type = 2  # kDLCUDA

    def __init__(self):
        self._started = False
        self._start_lock = threading.Lock()
        self._routes: dict = {}  # device index -> (the allocator registered, the function serving its requests)

    # the handle of device index's current stream, where nbx.kernels launches go (nbx.kernels.plans
    # asks it per launch: a plain function, no Triton driver between)
    launch_stream = staticmethod(current_handle)

    # ---- devices ---------------------------------------------------------------------------
    def device_count(self) -> int:
        return runtime.device_count()

    def current_device(self) -> int:
        return runtime.get_device()

    def synchronize(self, device: Device) -> None:
        runtime.synchronize(device.index)

    def device_guard(self, device: Device):
        """Context manager: device is the current CUDA device inside, the previous one after."""
        return runtime.device_guard(device.index)

    def target(self, device: Device) -> str:
        """The string device files are matched by: f"sm_{major}{minor}" ('sm_90' on Hopper)."""
        from .properties import compute_capability
        major, minor = compute_capability(runtime.check_ordinal(device.index))
        return f"sm_{major}{minor}"

    def device_name(self, index: int) -> str:
        from .properties import properties
        return properties(index).name

    # ---- tensor parallelism (nbx.models finds these on the backend: it imports no vendor code) --
    def tensor_parallel_communicator(self, timeout: float = 120.0):
        """This rank's NCCL communicator, from what nccl_launch set in its environment."""
        from .nccl import Communicator
        return Communicator.from_env(timeout=timeout)

    def tensor_parallel_launch(self, argv: list[str], nproc: int, timeout: float | None = None) -> int:
        """Run argv once per GPU (rank r on cuda:r) through nccl_launch; the first failing rank's status."""
        from .nccl_launch import launch
        return launch(argv, nproc, timeout=timeout).exit_code

    def total_memory(self, index: int) -> int:
        from .properties import properties
        return properties(index).total_memory

    def timer(self, device: Device):
        """CUDA events for nbx.autotune's sweeps (its Timer protocol)."""
        from .timing import EventTimer
        return EventTimer(device)

    def device_summary(self, index: int) -> str:
        """One line for `nbx info`: name, capability, memory, and the runtime library opened."""
        from .properties import properties
        p = properties(index)
        version = runtime.runtime_version()
        return (f"{p.name}, compute capability {p.compute_capability[0]}.{p.compute_capability[1]}, "
                f"{p.total_memory / 2**30:.1f} GiB, {p.sm_count} SMs; runtime {runtime.rt().path} "
                f"(CUDA {version // 1000}.{version % 1000 // 10}), driver CUDA {runtime.driver_version() // 1000}")

    def start(self) -> None:
        """Once per process, at first allocation: the allocator, graph capture, and Triton's torch-free driver."""
        if self._started:
            return
        with self._start_lock:
            if self._started:
                return
            from nbx.memory import allocator

            from . import graphs, memory
            from .triton_driver import install_if_triton
            allocator.register_default(self.name, memory.make_allocator)  # the caching pool, one per device
            graphs.register()  # launch-sequence capture for nbx.memory.graphs
            install_if_triton()
            self._started = True

    # ---- memory ----------------------------------------------------------------------------
    def allocate(self, nbytes: int, device: Device) -> Storage:
        index = device.index
        # the allocator looked up per call: a graph capture registers its private routing for a while.
        # A route is made only for a checked ordinal of a started backend (_checked_route): finding
        # it for this allocator is that check.
        route = self._routes.get(index)
        if route is None or route[0] is not _allocators._ALLOCATORS.get(self.name) or type(index) is not int:
            route = self._checked_route(device)
        stacks = _streams._local.stacks   # current_stream(index), inline: every allocation asks
        stack = stacks.get(index) if stacks else None
        stream = stack[-1] if stack else _streams._defaults.get(index) or current_stream(index)
        block = route[1](nbytes, stream)
        storage = _new(Storage)  # Storage(device, nbytes, block.ptr, None, block), with no __init__ frame
        storage.device, storage.nbytes, storage._ptr, storage.host, storage.owner, storage.readonly = (
            device, nbytes, block.ptr, None, block, False)
        return storage

    def _checked_route(self, device: Device) -> tuple:
        if not self._started:
            self.start()
        index = device.index
        count = runtime._count  # check_ordinal's test, inline (the count is read once per process)
        if count is None or type(index) is not int or not 0 <= index < count:
            runtime.check_ordinal(index)
        allocator = _allocators._ALLOCATORS.get(self.name)
        route = self._routes.get(index)
        if route is None or route[0] is not allocator:
            route = self._route(allocator, device)
        return route

    def _route(self, allocator, device: Device) -> tuple:
        """(allocator, its function serving device's requests (nbytes, stream)): a caching pool's own
        allocate, with no lookup of the device's pool per request."""
        if allocator is None:
            allocator = _allocators.get_allocator(self.name)  # raises, naming what is registered
        serving = getattr(type(allocator), "serving", None)  # its class's own: a wrapper forwards attributes
        route = self._routes[device.index] = (allocator, serving(allocator, device) if serving is not None else
                                              lambda nbytes, stream: allocator.allocate(nbytes, device, stream))
        return route

    def upload(self, storage: Storage, byte_offset: int, data: np.ndarray) -> None:
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        check_range(storage, byte_offset, flat.nbytes, "upload")
        if not flat.nbytes:
            return
        index = storage.device.index
        with runtime.device_guard(index):
            stream = current_stream(index)
            staged_from = staging.staged_from(index)
            if staged_from is not None and flat.nbytes >= staged_from and not runtime.is_pinned(flat):
                staging.STAGER.upload(storage.data_ptr() + byte_offset, index, flat, stream)   # a checkpoint's load
                return
            runtime.memcpy_async(storage.data_ptr() + byte_offset, flat.ctypes.data, flat.nbytes,
                                 runtime.HOST_TO_DEVICE, stream.handle)
            stream.synchronize()

    def download(self, storage: Storage, byte_offset: int, nbytes: int) -> np.ndarray:
        check_range(storage, byte_offset, nbytes, "download")
        out = np.empty(nbytes, np.uint8)
        if nbytes:
            index = storage.device.index
            with runtime.device_guard(index):
                stream = current_stream(index)
                runtime.memcpy_async(out.ctypes.data, storage.data_ptr() + byte_offset, nbytes,
                                     runtime.DEVICE_TO_HOST, stream.handle)
                stream.synchronize()
        return out

    def copy(self, dst: Storage, dst_offset: int, src: Storage, src_offset: int, nbytes: int) -> None:
        """Device to device, stream-ordered: on the destination's current stream (peer across devices)."""
        check_range(dst, dst_offset, nbytes, "copy destination")
        check_range(src, src_offset, nbytes, "copy source")
        copy_bytes(dst.data_ptr() + dst_offset, dst.device.index, src.data_ptr() + src_offset,
                   src.device.index, nbytes)


    # ---- DLPack's stream handshake (nbx.core.dlpack calls these) ---------------------------------
    def dlpack_export_sync(self, index: int, stream) -> None:
        """Make the consumer's stream wait for nbx's current stream (an event), unless they are one.

        DLPack's numbering: None or 1 the legacy default stream, 2 the per-thread default stream,
        -1 no synchronisation, any other integer a cudaStream_t; 0 is ambiguous and refused.
        """
        if stream == -1:
            return
        if stream == 0:
            raise DLPackError("stream 0 is ambiguous in DLPack (legacy or per-thread default?); pass 1 or 2")
        handle = LEGACY_DEFAULT if stream in (None, 1) else int(stream)
        ours = current_stream(index)
        consumer = Stream.wrap(handle, index)
        if consumer != ours:
            consumer.wait_event(Event(index, timing=False).record(ours))

    def dlpack_consumer_stream(self, index: int) -> int:
        """The stream number nbx passes to a producer: its current stream of that device."""
        ours = current_stream(index)
        return 1 if ours.is_default else ours.handle


def copy_bytes(dst_ptr: int, dst_device: int, src_ptr: int, src_device: int, nbytes: int) -> None:
    """nbytes from src to dst on the destination's current stream; across devices the source's
    current stream is waited for first (an event), then a peer copy runs (direct where peer access
    can be enabled, else staged by CUDA through the host)."""
    if not nbytes:
        return
    with runtime.device_guard(dst_device):
        stream = current_stream(dst_device)
        if dst_device == src_device:
            runtime.memcpy_async(dst_ptr, src_ptr, nbytes, runtime.DEVICE_TO_DEVICE, stream.handle)
            return
        runtime.enable_peer_access(dst_device, src_device)  # direct over NVLink/PCIe where the hardware can
        runtime.enable_peer_access(src_device, dst_device)
        source_stream = current_stream(src_device)
        stream.wait_event(Event(src_device, timing=False).record(source_stream))
        runtime.memcpy_peer_async(dst_ptr, dst_device, src_ptr, src_device, nbytes, stream.handle)
        # later writes to the source, queued on its own stream, must wait for this read
        source_stream.wait_event(Event(dst_device, timing=False).record(stream))


BACKEND = CudaBackend()
