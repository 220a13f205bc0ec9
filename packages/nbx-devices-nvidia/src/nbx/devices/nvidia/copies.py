"""copy_ and fill_ on cuda: what zeros/ones/full/clone/setitem/contiguous/to need.

copy_ between layouts: one cudaMemcpy when both are dense alike; cudaMemcpy2D when the pair of
layouts merges into at most two dims with unit inner strides (or one strided dim); a broadcast
source (all strides 0) becomes a fill. Anything else -- and a change of dtype -- goes through a
host round trip of the covered byte span: correct but slow. fill_ uses cudaMemset for zero
bytes, cuMemsetD8/16/32 for 1-, 2- and 4-byte patterns, else an uploaded pattern doubled by
device-to-device copies. Every dtype of the table is served, complex included.

nbx.kernels, when installed, serves copy_ and fill_ (its Triton kernels copy any layout and cast
on the device): these register at priority -1, the backend's own fallback, so whichever of the two
plugins loads first the kernels' serve, and these serve without nbx.kernels.
"""
from __future__ import annotations

import numpy as np
from nbx.core import layout
from nbx.core.dispatch import register
from nbx.core.errors import CrossDeviceError
from nbx.core.tensor import Tensor, empty

from . import driver_api, runtime
from .backend import BACKEND, check_range, copy_bytes
from .streams import current_stream

_PITCH_LIMIT = 1 << 31          # cudaMemcpy2D refuses pitches beyond the device's max pitch (2^31-1)
_PATTERN_CHUNK = 1 << 20        # bytes uploaded before a pattern fill doubles itself on the device


def _span_bytes(t: Tensor) -> tuple[int, int]:
    lo, hi = layout.element_span(t.shape, t.strides, t.storage_offset)
    item = t.dtype.itemsize
    return lo * item, (hi - lo) * item


def _check_tensor(t: Tensor, what: str) -> None:
    start, nbytes = _span_bytes(t)
    check_range(t.storage, start, nbytes, what)


def plan_2d(shape, dst_strides, src_strides, itemsize):
    """(width, height, dst_pitch, src_pitch) in bytes for one cudaMemcpy2D, or None."""
    sizes, (ds, ss) = layout.collapse_dims(shape, [dst_strides, src_strides])
    if not sizes:
        return itemsize, 1, itemsize, itemsize
    if len(sizes) == 1:
        n, d, s = sizes[0], ds[0], ss[0]
        if d == 1 and s == 1:
            return n * itemsize, 1, n * itemsize, n * itemsize
        rows, cols, dr, sr = n, 1, d, s
    elif len(sizes) == 2 and ds[1] == 1 and ss[1] == 1:
        rows, cols, dr, sr = sizes[0], sizes[1], ds[0], ss[0]
    else:
        return None
    width = cols * itemsize
    dpitch, spitch = dr * itemsize, sr * itemsize
    if dpitch < width or spitch < width or max(dpitch, spitch) >= _PITCH_LIMIT:
        return None
    return width, rows, dpitch, spitch


@register("copy_", "cuda", priority=-1)
def copy_(dst: Tensor, src: Tensor) -> None:
    if dst.size == 0:
        return
    if src.device.type != "cuda":
        if src.storage.host is None:
            raise CrossDeviceError(f"copy from {src.device} into {dst.device}; bring it to the cpu first")
        _check_tensor(dst, "copy destination")
        write_host_values(dst, src._host_view())
        return
    _check_tensor(dst, "copy destination")
    _check_tensor(src, "copy source")
    if src.dtype is not dst.dtype:
        write_host_values(dst, src.numpy().astype(dst.dtype.host))  # no cast kernel yet: via the host
        return
    if src.size > 1 and all(s == 0 for s, n in zip(src.strides, src.shape, strict=True) if n != 1):
        # a broadcast scalar (one element is copied on the device: a read-back would break a graph capture)
        fill_(dst, src._view((), (), src.storage_offset).numpy())
        return
    if src.storage is dst.storage and _overlap(dst, src):
        if dst.strides == src.strides and dst.storage_offset == src.storage_offset:
            return
        src = _clone_contiguous(src)
    if src.device.index != dst.device.index:
        _copy_across_devices(dst, src)
        return
    plan = plan_2d(dst.shape, dst.strides, src.strides, dst.dtype.itemsize)
    if plan is None:
        write_host_values(dst, src.numpy())  # strided beyond 2-D: host round trip until the kernel exists
        return
    width, height, dpitch, spitch = plan
    index = dst.device.index
    with runtime.device_guard(index):
        stream = current_stream(index).handle
        if height == 1 or (dpitch == width and spitch == width):
            runtime.memcpy_async(dst.data_ptr(), src.data_ptr(), width * height, runtime.DEVICE_TO_DEVICE, stream)
        else:
            runtime.memcpy_2d_async(dst.data_ptr(), dpitch, src.data_ptr(), spitch, width, height,
                                    runtime.DEVICE_TO_DEVICE, stream)


def _overlap(a: Tensor, b: Tensor) -> bool:
    a0, an = _span_bytes(a)
    b0, bn = _span_bytes(b)
    return a0 < b0 + bn and b0 < a0 + an


def _clone_contiguous(t: Tensor) -> Tensor:
    out = empty(t.shape, t.dtype, t.device)
    copy_(out, t)
    return out


def _copy_across_devices(dst: Tensor, src: Tensor) -> None:
    """Peer copy of dense bytes; a strided side is made dense on its own device first."""
    if not src.is_contiguous():
        src = _clone_contiguous(src)
    target = dst if dst.is_contiguous() else empty(dst.shape, dst.dtype, dst.device)
    copy_bytes(target.data_ptr(), target.device.index, src.data_ptr(), src.device.index, src.nbytes)
    if target is not dst:
        copy_(dst, target)


def write_host_values(dst: Tensor, values: np.ndarray) -> None:
    """Write host values (broadcastable to dst's shape) into dst's layout on the device."""
    item = dst.dtype.itemsize
    values = np.broadcast_to(np.asarray(values).astype(dst.dtype.host, copy=False), dst.shape)
    if dst.is_contiguous():
        BACKEND.upload(dst.storage, dst.storage_offset * item, np.ascontiguousarray(values))
        return
    start, nbytes = _span_bytes(dst)
    span = BACKEND.download(dst.storage, start, nbytes)  # read-modify-write keeps the gaps' bytes
    view = np.ndarray(dst.shape, dst.dtype.host, buffer=span, offset=dst.storage_offset * item - start,
                      strides=[s * item for s in dst.strides])
    view[...] = values
    BACKEND.upload(dst.storage, start, span)


@register("fill_", "cuda", priority=-1)
def fill_(out: Tensor, value) -> None:
    if out.size == 0:
        return
    pattern = np.asarray(value).astype(out.dtype.host).tobytes()
    if out.is_contiguous():
        _check_tensor(out, "fill")
        fill_bytes(out.device.index, out.data_ptr(), out.nbytes, pattern)
        return
    dense = empty(out.shape, out.dtype, out.device)
    fill_bytes(dense.device.index, dense.data_ptr(), dense.nbytes, pattern)
    copy_(out, dense)


def fill_bytes(index: int, ptr: int, nbytes: int, pattern: bytes) -> None:
    """Repeat pattern over nbytes at ptr (nbytes a multiple of its length), on the current stream."""
    size = len(pattern)
    with runtime.device_guard(index):
        stream = current_stream(index)
        handle = stream.handle
        if not any(pattern):
            runtime.memset_async(ptr, 0, nbytes, handle)
            return
        runtime.bind_context(index)  # the driver-API memsets below need the context on this thread
        if pattern == pattern[:1] * size:
            driver_api.memset_d8_async(ptr, pattern[0], nbytes, handle)
        elif size == 2 and ptr % 2 == 0:
            driver_api.memset_d16_async(ptr, int.from_bytes(pattern, "little"), nbytes // 2, handle)
        elif size % 4 == 0 and pattern == pattern[:4] * (size // 4) and ptr % 4 == 0:
            driver_api.memset_d32_async(ptr, int.from_bytes(pattern[:4], "little"), nbytes // 4, handle)
        else:
            first = min(nbytes, max(size, _PATTERN_CHUNK // size * size))
            host = np.frombuffer(pattern * (first // size), np.uint8)
            runtime.memcpy_async(ptr, host.ctypes.data, first, runtime.HOST_TO_DEVICE, handle)
            stream.synchronize()  # the host pattern goes out of scope after this call
            done = first
            while done < nbytes:  # double the filled prefix: log2(nbytes / chunk) device copies
                step = min(done, nbytes - done)
                runtime.memcpy_async(ptr + done, ptr, step, runtime.DEVICE_TO_DEVICE, handle)
                done += step
