"""concat, pad, flip, roll, repeat, tile, tril/triu on every Triton device, built on one kernel:
the strided any-view-to-any-view copy (copy_, the elementwise identity over both operands'
strides). Each op writes its output once through views of it (narrow, negative steps, expand):
no intermediate copy is made, except that roll over several axes rolls one axis at a time.
"""
from __future__ import annotations

import numpy as np

from nbx.core import dtypes
from nbx.core.ops.creation import arange, asarray
from nbx.core.tensor import Tensor, empty

from ..cost import Buffer, Cost, declares
from ..registry import implements


def _reversed(t: Tensor, dim: int) -> Tensor:
    return t[(slice(None),) * dim + (slice(None, None, -1),)]


@implements("concat")
def concat(arrays: list[Tensor], axis: int) -> Tensor:
    first = arrays[0]
    shape = list(first.shape)
    shape[axis] = sum(a.shape[axis] for a in arrays)
    out = empty(tuple(shape), first.dtype, first.device)
    start = 0
    for a in arrays:
        if a.size:
            out.narrow(axis, start, a.shape[axis])._copy_from(a)
        start += a.shape[axis]
    return out


@implements("pad")
def pad(x: Tensor, widths, mode: str, value) -> Tensor:
    """The cropped interior copied once; then, dim by dim over the whole extent of the others, the
    borders are copied from the output itself (corners come right because each dim's borders are
    taken from rows whose earlier dims are already padded)."""
    crop = x[tuple(slice(-lo if lo < 0 else 0, x.shape[d] + hi if hi < 0 else None)
                   for d, (lo, hi) in enumerate(widths))]
    grow = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
    out = empty(tuple(s + lo + hi for s, (lo, hi) in zip(crop.shape, grow)), x.dtype, x.device)
    if out.size == 0:
        return out
    if mode == "constant" and any(lo or hi for lo, hi in grow):
        out._copy_from(asarray(value, dtype=x.dtype, device=x.device).broadcast_to(out.shape))
    interior = out[tuple(slice(lo, lo + s) for s, (lo, _) in zip(crop.shape, grow))]
    if crop.size:
        interior._copy_from(crop)
    if mode == "constant":
        return out
    for d, (lo, hi) in enumerate(grow):
        size = crop.shape[d]
        for start, length, source in ((0, lo, _border_source(out, d, mode, lo, size, True, lo)),
                                      (lo + size, hi, _border_source(out, d, mode, lo, size, False, hi))):
            if length:
                out.narrow(d, start, length)._copy_from(source)
    return out


def _border_source(out: Tensor, d: int, mode: str, lo: int, size: int, left: bool, length: int):
    if not length:
        return None
    if mode == "replicate":
        edge = out.narrow(d, lo if left else lo + size - 1, 1)
        shape = list(out.shape)
        shape[d] = length
        return edge.broadcast_to(tuple(shape))
    if mode == "reflect":
        start = lo + 1 if left else lo + size - 1 - length
        return _reversed(out.narrow(d, start, length), d)
    return out.narrow(d, lo + size - length if left else lo, length)  # circular


@implements("flip")
def flip(x: Tensor, axes) -> Tensor:
    return x[tuple(slice(None, None, -1) if d in axes else slice(None) for d in range(x.ndim))].clone()


@implements("roll")
def roll(x: Tensor, shifts) -> Tensor:
    out = x
    for axis, s in shifts:
        n = x.shape[axis]
        rolled = empty(x.shape, x.dtype, x.device)
        if x.size:
            rolled.narrow(axis, s, n - s)._copy_from(out.narrow(axis, 0, n - s))
            if s:
                rolled.narrow(axis, 0, s)._copy_from(out.narrow(axis, n - s, s))
        out = rolled
    return out.clone() if out is x else out


@implements("repeat")
def repeat(x: Tensor, repeats, axis: int) -> Tensor:
    if isinstance(repeats, Tensor):  # counts per element: a gather of the repeated positions
        from nbx.core.ops.gather import take
        counts = repeats.numpy().astype(np.int64).reshape(-1)
        positions = np.repeat(np.arange(x.shape[axis]), counts)
        return take(x, asarray(positions, dtype=dtypes.INDEX, device=x.device), axis=axis)
    shape = list(x.shape)
    wide = x.unsqueeze(axis + 1).expand(*shape[:axis + 1], repeats, *shape[axis + 1:])
    shape[axis] *= repeats
    return wide.contiguous().reshape(tuple(shape))


@implements("tile")
def tile(x: Tensor, reps) -> Tensor:
    interleaved = []
    for r, s in zip(reps, x.shape):
        interleaved += [1, s]
    wide = x.reshape(tuple(interleaved)).expand(*[v for r, s in zip(reps, x.shape) for v in (r, s)])
    return wide.contiguous().reshape(tuple(r * s for r, s in zip(reps, x.shape)))


def _triangle(lower: bool):
    def run(x: Tensor, k: int) -> Tensor:
        from nbx.core.ops.elementwise import where
        rows = arange(x.shape[-2], dtype=dtypes.int64, device=x.device).reshape(-1, 1)
        cols = arange(x.shape[-1], dtype=dtypes.int64, device=x.device).reshape(1, -1)
        keep = (cols - rows <= k) if lower else (cols - rows >= k)
        zero = asarray(0, dtype=x.dtype, device=x.device)
        return where(keep, x, zero)
    return run


implements("tril")(_triangle(True))
implements("triu")(_triangle(False))


def _copy_cost(out_bytes: int, read: int, launches: int = 1) -> Cost:
    return Cost(buffers=(Buffer("out", out_bytes),), bytes_moved=read + out_bytes, launches=launches)


declares("concat")(lambda arrays, axis=0: _copy_cost(sum(a.nbytes for a in arrays), sum(a.nbytes for a in arrays),
                                                     len(arrays)))
declares("flip")(lambda x, axes=None: _copy_cost(x.nbytes, x.nbytes))
declares("roll")(lambda x, shifts=(): _copy_cost(x.nbytes, x.nbytes, 2 * max(len(shifts), 1)))
declares("tril")(lambda x, k=0: _copy_cost(x.nbytes, x.nbytes))
declares("triu")(lambda x, k=0: _copy_cost(x.nbytes, x.nbytes))

__all__ = ["concat", "pad", "flip", "roll", "repeat", "tile"]
