"""Collectives between the GPUs of one host through NCCL: one process per GPU, one Communicator each.

    from nbx.devices.nvidia import nccl
    comm = nccl.Communicator.from_env()          # NBX_NCCL_RANK / _WORLD_SIZE / _DEVICE / the id
    with comm:                                   # destroyed on leaving (aborted if the block raised)
        total = comm.all_reduce(x, "sum")        # a new tensor; comm.all_reduce_(x) writes into x
        parts = comm.all_gather(x)               # shape (world_size, *x.shape)

Every collective runs on a CUDA stream of the communicator's device: the device's current stream
(nbx's work is ordered with it) unless `stream=` names another, whose ordering is then the caller's.
Buffers must be contiguous tensors on the communicator's device (CrossDeviceError otherwise);
dtypes map through nccl_types (bytes for pure data movement, refusals named for reductions). NCCL
calls return once the work is queued; a `.numpy()` of a result waits for the current stream.
"""
from __future__ import annotations

import os
import weakref
from contextlib import contextmanager
from ctypes import byref, c_int, c_void_p

from nbx.core.device import Device, as_device
from nbx.core.errors import ArgumentError, CrossDeviceError, DTypeError, ShapeError, ViewError
from nbx.core.tensor import Tensor, empty

from . import runtime
from .errors import StreamMismatchError
from .nccl_bootstrap import ENV_DEVICE, ENV_ID_FILE, ENV_UNIQUE_ID, UniqueId, rank_from_env, shared_id, unique_id
from .nccl_errors import CommunicatorClosedError, NcclBootstrapError, NcclDTypeError, NcclError, NcclLibraryNotFound
from .nccl_library import IN_PROGRESS, SUCCESS, NcclUniqueIdStruct, nccl
from .nccl_types import REDUCE_OPS, reduce_op, wire
from .streams import Stream, current_stream

__all__ = ["Communicator", "UniqueId", "unique_id", "group", "REDUCE_OPS", "NcclError", "NcclLibraryNotFound",
           "NcclDTypeError", "NcclBootstrapError", "CommunicatorClosedError", "ENV_DEVICE", "ENV_ID_FILE",
           "ENV_UNIQUE_ID"]


@contextmanager
def group():
    """ncclGroupStart / ncclGroupEnd: the NCCL calls inside are launched together (send/recv pairs
    issued in any order, or one process driving several communicators)."""
    lib = nccl()
    lib.call("ncclGroupStart")
    try:
        yield
    finally:
        lib.call("ncclGroupEnd")


def _cuda_device(device) -> Device:
    if isinstance(device, int) and not isinstance(device, bool):
        device = Device("cuda", device)
    dev = as_device(device)
    if dev.type != "cuda":
        raise CrossDeviceError(f"an NCCL communicator works on a cuda device, not {dev}")
    runtime.check_ordinal(dev.index)
    return dev


def _destroy(lib, index: int, handle: int) -> None:
    with runtime.device_guard(index):
        lib.call("ncclCommDestroy", handle, comm=handle)


class Communicator:
    """One rank of an NCCL communicator: made by every rank together, destroyed by every rank."""

    def __init__(self, rank: int, world_size: int, unique_id, device):
        if not isinstance(world_size, int) or world_size < 1:
            raise ArgumentError(f"world_size is the number of ranks (>= 1), got {world_size!r}")
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ArgumentError(f"rank {rank!r} is outside 0..{world_size - 1} (world size {world_size})")
        uid = unique_id if isinstance(unique_id, UniqueId) else UniqueId(unique_id)
        self._lib = nccl()
        self.rank, self.world_size = rank, world_size
        self.device = _cuda_device(device)
        handle = c_void_p()
        with runtime.device_guard(self.device.index):
            self._lib.call("ncclCommInitRank", byref(handle), world_size,
                           NcclUniqueIdStruct.from_buffer_copy(uid.raw), rank)
        self._handle: int | None = handle.value
        self._ended = ""
        self._finalizer = weakref.finalize(self, _destroy, self._lib, self.device.index, self._handle)
        self._finalizer.atexit = False

    @classmethod
    def from_env(cls, device=None, environ=None, timeout: float = 120.0) -> Communicator:
        """The communicator a launcher prepared: rank and world size from NBX_NCCL_RANK and
        NBX_NCCL_WORLD_SIZE, the id from NBX_NCCL_UNIQUE_ID or NBX_NCCL_ID_FILE (rank 0 writes it),
        the device from the argument or NBX_NCCL_DEVICE. The device becomes this process's current
        one (one process per GPU: a plain "cuda" then means this rank's GPU)."""
        environ = os.environ if environ is None else environ
        rank, world = rank_from_env(environ)
        if device is None:
            device = environ.get(ENV_DEVICE)
            if not device:
                raise NcclBootstrapError(f"no device for rank {rank}: pass device= or set ${ENV_DEVICE} "
                                         f"(e.g. cuda:{rank})")
        device = _cuda_device(device)  # checked before rank 0 makes an id the others would wait on
        runtime.set_device(device.index)
        return cls(rank, world, shared_id(rank, environ, timeout), device)

    # ---- lifecycle ---------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._handle is None

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise CommunicatorClosedError(f"rank {self.rank} of {self.world_size} on {self.device} was "
                                          f"{self._ended}; make a new Communicator (every rank together)")
        return self._handle

    def _end(self, function: str, how: str) -> None:
        if self._handle is None:
            return
        handle = self._handle
        self._finalizer.detach()
        self._handle, self._ended = None, how
        with runtime.device_guard(self.device.index):
            self._lib.call(function, handle, comm=handle)

    def destroy(self) -> None:
        """ncclCommDestroy: waits for this rank's queued work; later use is CommunicatorClosedError."""
        self._end("ncclCommDestroy", "destroyed")

    def abort(self) -> None:
        """ncclCommAbort: tears down without waiting (after an error on some rank)."""
        self._end("ncclCommAbort", "aborted")

    def __enter__(self) -> Communicator:
        self.handle  # noqa: B018  (refuses a closed communicator at the door)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()   # the other ranks may never join the queued work: don't wait for it
        else:
            self.destroy()

    def check(self) -> None:
        """Raise the error NCCL recorded asynchronously for this communicator, if any."""
        code = c_int()
        handle = self.handle
        self._lib.call("ncclCommGetAsyncError", handle, byref(code), comm=handle)
        if code.value not in (SUCCESS, IN_PROGRESS):
            raise self._lib.error("ncclCommGetAsyncError", code.value, handle)

    @property
    def nccl_version(self) -> tuple[int, int, int]:
        return self._lib.version

    def __repr__(self) -> str:
        state = self._ended or "open"
        return f"Communicator(rank {self.rank} of {self.world_size}, {self.device}, {state})"

    # ---- checks ------------------------------------------------------------------------------
    def _buffer(self, t, what: str) -> Tensor:
        if not isinstance(t, Tensor):
            raise ArgumentError(f"{what} must be an nbx Tensor, got {type(t).__name__}")
        if t.device != self.device:
            raise CrossDeviceError(f"{what} is on {t.device}, but rank {self.rank}'s communicator works on "
                                   f"{self.device}; copy it with .to('{self.device}')")
        if not t.is_contiguous():
            raise ViewError(f"{what} (shape {t.shape}, strides {t.strides}) is not contiguous; NCCL reads "
                            f"dense buffers: pass .contiguous()")
        return t

    def _stream(self, stream: Stream | None) -> int:
        s = current_stream(self.device.index) if stream is None else stream
        if s.device != self.device.index:
            raise StreamMismatchError(f"{s} is not a stream of {self.device}, where rank {self.rank}'s "
                                      f"communicator works")
        return s.handle

    def _output(self, out, shape, dtype, numel: int, what: str) -> Tensor:
        if out is None:
            return empty(shape, dtype, self.device)
        out = self._buffer(out, what)
        if out.dtype is not dtype:
            raise DTypeError(f"{what} is {out.dtype.name}, the input {dtype.name}; NCCL does not convert")
        if out.size != numel:
            raise ShapeError(f"{what} holds {out.size} elements (shape {out.shape}); {numel} are needed")
        return out

    def _peer(self, peer: int, what: str) -> int:
        if not isinstance(peer, int) or not 0 <= peer < self.world_size:
            raise ArgumentError(f"{what} {peer!r} is outside 0..{self.world_size - 1}")
        return peer

    def _launch(self, function: str, *args, stream: int) -> None:
        handle = self.handle
        with runtime.device_guard(self.device.index):
            self._lib.call(function, *args, handle, stream, comm=handle)

    def _chunk(self, t: Tensor, what: str) -> int:
        if t.size % self.world_size:
            raise ShapeError(f"{what} holds {t.size} elements, not a multiple of the world size "
                             f"{self.world_size}")
        return t.size // self.world_size

    # ---- collectives -------------------------------------------------------------------------
    def all_reduce(self, x: Tensor, op: str = "sum", *, out: Tensor | None = None,
                   stream: Stream | None = None) -> Tensor:
        """Every rank gets the reduction (sum, prod, max, min, avg) of every rank's x."""
        x = self._buffer(x, "all_reduce's input")
        out = self._output(out, x.shape, x.dtype, x.size, "all_reduce's output")
        return self._all_reduce(x, out, op, stream)

    def all_reduce_(self, x: Tensor, op: str = "sum", *, stream: Stream | None = None) -> Tensor:
        """all_reduce in place: x holds the reduction afterwards."""
        x = self._buffer(x, "all_reduce_'s buffer")
        return self._all_reduce(x, x, op, stream)

    def _all_reduce(self, x, out, op, stream) -> Tensor:
        w, code = wire(x.dtype, x.size, self._lib.version, op), reduce_op(op, self._lib.version)
        if w.count:
            self._launch("ncclAllReduce", x.data_ptr(), out.data_ptr(), w.count, w.code, code,
                         stream=self._stream(stream))
        return out

    def all_gather(self, x: Tensor, *, out: Tensor | None = None, stream: Stream | None = None) -> Tensor:
        """Every rank gets every rank's x, in rank order: shape (world_size, *x.shape) unless out is given."""
        x = self._buffer(x, "all_gather's input")
        n = self.world_size * x.size
        out = self._output(out, (self.world_size, *x.shape), x.dtype, n, "all_gather's output")
        return self._all_gather(x.data_ptr(), out, x.size, stream)

    def all_gather_(self, out: Tensor, *, stream: Stream | None = None) -> Tensor:
        """all_gather in place: this rank's part is already in its rank-th chunk of out (flat order)."""
        out = self._buffer(out, "all_gather_'s buffer")
        chunk = self._chunk(out, "all_gather_'s buffer")
        return self._all_gather(out.data_ptr() + self.rank * chunk * out.itemsize, out, chunk, stream)

    def _all_gather(self, send_ptr: int, out: Tensor, per_rank: int, stream) -> Tensor:
        w = wire(out.dtype, per_rank, self._lib.version)
        if w.count:
            self._launch("ncclAllGather", send_ptr, out.data_ptr(), w.count, w.code, stream=self._stream(stream))
        return out

    def reduce_scatter(self, x: Tensor, op: str = "sum", *, out: Tensor | None = None,
                       stream: Stream | None = None) -> Tensor:
        """Rank r gets the r-th block of dim 0 of the reduction of every rank's x."""
        x = self._buffer(x, "reduce_scatter's input")
        chunk = self._chunk(x, "reduce_scatter's input")
        if out is None:
            out = empty(self._block_shape(x), x.dtype, self.device)
        out = self._output(out, None, x.dtype, chunk, "reduce_scatter's output")
        return self._reduce_scatter(x, out, chunk, op, stream)

    def reduce_scatter_(self, x: Tensor, op: str = "sum", *, stream: Stream | None = None) -> Tensor:
        """reduce_scatter in place: returns the view of x's r-th block, which holds the result."""
        x = self._buffer(x, "reduce_scatter_'s buffer")
        chunk = self._chunk(x, "reduce_scatter_'s buffer")
        block = x.reshape(self.world_size, chunk)[self.rank].reshape(self._block_shape(x))
        return self._reduce_scatter(x, block, chunk, op, stream)

    def _block_shape(self, x: Tensor) -> tuple[int, ...]:
        if not x.ndim or x.shape[0] % self.world_size:
            raise ShapeError(f"reduce_scatter splits dim 0 among {self.world_size} ranks; shape {x.shape} "
                             f"does not split (pass out= of {x.size // self.world_size} elements)")
        return (x.shape[0] // self.world_size, *x.shape[1:])

    def _reduce_scatter(self, x, out, chunk, op, stream) -> Tensor:
        w, code = wire(x.dtype, chunk, self._lib.version, op), reduce_op(op, self._lib.version)
        if w.count:
            self._launch("ncclReduceScatter", x.data_ptr(), out.data_ptr(), w.count, w.code, code,
                         stream=self._stream(stream))
        return out

    def broadcast(self, x: Tensor, root: int = 0, *, out: Tensor | None = None,
                  stream: Stream | None = None) -> Tensor:
        """Every rank gets root's x (a new tensor); on the other ranks x gives only shape and dtype."""
        x = self._buffer(x, "broadcast's input")
        out = self._output(out, x.shape, x.dtype, x.size, "broadcast's output")
        return self._broadcast(x.data_ptr(), out, root, stream)

    def broadcast_(self, x: Tensor, root: int = 0, *, stream: Stream | None = None) -> Tensor:
        """broadcast in place: x holds root's values afterwards."""
        x = self._buffer(x, "broadcast_'s buffer")
        return self._broadcast(x.data_ptr(), x, root, stream)

    def _broadcast(self, send_ptr: int, out: Tensor, root: int, stream) -> Tensor:
        root = self._peer(root, "root")
        w = wire(out.dtype, out.size, self._lib.version)
        if w.count:
            self._launch("ncclBroadcast", send_ptr, out.data_ptr(), w.count, w.code, root,
                         stream=self._stream(stream))
        return out

    def send(self, x: Tensor, peer: int, *, stream: Stream | None = None) -> None:
        """Send x to rank peer, which calls recv with a buffer of the same size and dtype."""
        x = self._buffer(x, "send's buffer")
        peer = self._peer(peer, "peer")
        w = wire(x.dtype, x.size, self._lib.version)
        if w.count:
            self._launch("ncclSend", x.data_ptr(), w.count, w.code, peer, stream=self._stream(stream))

    def recv(self, out: Tensor, peer: int, *, stream: Stream | None = None) -> Tensor:
        """Receive into out what rank peer sends; returns out."""
        out = self._buffer(out, "recv's buffer")
        peer = self._peer(peer, "peer")
        w = wire(out.dtype, out.size, self._lib.version)
        if w.count:
            self._launch("ncclRecv", out.data_ptr(), w.count, w.code, peer, stream=self._stream(stream))
        return out

    def group(self):
        """ncclGroupStart/End around the block (see the module function group())."""
        self.handle  # noqa: B018
        return group()

    def barrier(self, stream: Stream | None = None) -> None:
        """Return once every rank has reached it: a one-element all_reduce, waited for on the host."""
        s = current_stream(self.device.index) if stream is None else stream
        token = empty((1,), "int32", self.device)
        self.all_reduce_(token, "sum", stream=s)
        s.synchronize()
