"""concat, pad, flip, roll, repeat, tile, tril/triu on every Triton device.

concat, pad (every mode), flip and roll are the remap copy (remap.py, kernel.py): each output
element written once from its source element through a per-dim index map, one launch a call
(concat: one a part, each writing its slice of the output). repeat and tile are copies of
broadcast views; tril/triu a where.
"""
from __future__ import annotations

import numpy as np

from nbx.core import dtypes
from nbx.core.ops.creation import arange, asarray
from nbx.core.tensor import Tensor, empty

from ..cost import Buffer, Cost, declares
from ..registry import implements
from .concat import concat_rows, launches as concat_launches, parts_of
from .kernel import COPY, FLIP, ROLL
from .remap import MODES, remap_copy
from . import windows as _windows  # noqa: F401  (the windows front-ends' declared costs)


@implements("concat")
def concat(arrays: list[Tensor], axis: int) -> Tensor:
    first = arrays[0]
    shape = list(first.shape)
    shape[axis] = sum(a.shape[axis] for a in arrays)
    out = empty(tuple(shape), first.dtype, first.device)
    if concat_rows(out, arrays, axis):   # runs of rows alike: up to four parts a launch
        return out
    start = 0
    for a in arrays:
        remap_copy(out.narrow(axis, start, a.shape[axis]), a, COPY, (0,) * a.ndim)
        start += a.shape[axis]
    return out


@implements("pad")
def pad(x: Tensor, widths, mode: str, value) -> Tensor:
    """The crops are a view of x; the growth is the remap's map (one launch)."""
    crop = x[tuple(slice(-lo if lo < 0 else 0, x.shape[d] + hi if hi < 0 else None)
                   for d, (lo, hi) in enumerate(widths))]
    grow = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
    out = empty(tuple(s + lo + hi for s, (lo, hi) in zip(crop.shape, grow)), x.dtype, x.device)
    return remap_copy(out, crop, MODES[mode], tuple(lo for lo, _ in grow), value)


@implements("flip")
def flip(x: Tensor, axes) -> Tensor:
    return remap_copy(empty(x.shape, x.dtype, x.device), x, FLIP, tuple(int(d in axes) for d in range(x.ndim)))


@implements("roll")
def roll(x: Tensor, shifts) -> Tensor:
    """shifts: (axis, shift) pairs, each axis once, 0 <= shift < its size (the front-end's)."""
    by_axis = dict(shifts)
    return remap_copy(empty(x.shape, x.dtype, x.device), x, ROLL, tuple(by_axis.get(d, 0) for d in range(x.ndim)))


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


def _concat_cost(arrays, axis=0) -> Cost:
    """Parts that are runs of rows alike (contiguous ones into the dense output) go four a launch."""
    from nbx.core.layout import contiguous_strides
    total = list(arrays[0].shape)
    total[axis] = sum(a.shape[axis] for a in arrays)
    parts = parts_of(tuple(total), contiguous_strides(tuple(total)), [(a.shape, a.strides) for a in arrays], axis)
    nbytes = sum(a.nbytes for a in arrays)
    return _copy_cost(nbytes, nbytes, concat_launches(parts))


declares("concat")(_concat_cost)
def _pad_cost(x, widths, mode="constant", value=0) -> Cost:
    out = int(np.prod([s + lo + hi for s, (lo, hi) in zip(x.shape, widths)])) * x.dtype.itemsize
    return _copy_cost(out, min(x.nbytes, out))


declares("pad")(_pad_cost)
declares("flip")(lambda x, axes=None: _copy_cost(x.nbytes, x.nbytes))
declares("roll")(lambda x, shifts=(): _copy_cost(x.nbytes, x.nbytes))
declares("tril")(lambda x, k=0: _copy_cost(x.nbytes, x.nbytes))
declares("triu")(lambda x, k=0: _copy_cost(x.nbytes, x.nbytes))

__all__ = ["concat", "pad", "flip", "roll", "repeat", "tile"]
