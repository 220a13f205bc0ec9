"""Copies and layout: concat, stack, pad, flip, roll, repeat, tile, tril/triu, meshgrid, diff.

Spelled as the Array API where it names the op (`concat(arrays, axis=)`, `flip(x, axis=)`,
`roll(x, shift, axis=)`, `repeat(x, repeats, axis=)` which repeats elements, `tile`), else as
torch.nn.functional (`pad(x, (left, right, top, bottom), mode=, value=)`, `repeat_interleave`).
Every front-end validates and normalizes its arguments, then calls its device's implementation
with them; on the CPU that is the op's numpy reference, exact in the operands' dtype.
"""
from __future__ import annotations

import numpy as np

from .. import layout
from ..dispatch import implementation
from ..errors import ArgumentError, DTypeError, ShapeError
from ..promotion import result_type
from ..tensor import Tensor
from ._common import common_device
from .movement import check_index_dtype, host, register_exact

PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _tensors(op: str, arrays) -> list[Tensor]:
    arrays = list(arrays)
    if not arrays:
        raise ArgumentError(f"{op} needs at least one tensor")
    if not all(isinstance(a, Tensor) for a in arrays):
        raise DTypeError(f"{op} takes a sequence of tensors")
    common_device(*arrays)
    dtype = result_type(*arrays)
    return [a if a.dtype is dtype else a.to(dtype=dtype) for a in arrays]


# ---- concat / stack ------------------------------------------------------------------------------
def concat(arrays, /, *, axis: int | None = 0) -> Tensor:
    """The tensors joined along axis (axis=None: each flattened, then joined); dtypes promote."""
    arrays = _tensors("concat", arrays)
    if axis is None:
        arrays = [a.reshape(-1) for a in arrays]
        axis = 0
    first = arrays[0]
    if first.ndim == 0:
        raise ShapeError("concat of 0-d tensors: stack them, or pass axis=None")
    axis = layout.normalize_dim(axis, first.ndim)
    for a in arrays[1:]:
        if a.ndim != first.ndim or any(s != t for d, (s, t) in enumerate(zip(a.shape, first.shape)) if d != axis):
            raise ShapeError(f"concat along axis {axis}: shape {a.shape} does not match {first.shape}")
    return implementation("concat", first.device)(arrays, axis)


def cat(tensors, dim: int = 0) -> Tensor:
    """torch's spelling of concat."""
    return concat(tensors, axis=dim)


def stack(arrays, /, *, axis: int = 0) -> Tensor:
    """The tensors (all of one shape) joined along a new axis."""
    arrays = _tensors("stack", arrays)
    if any(a.shape != arrays[0].shape for a in arrays):
        raise ShapeError(f"stack needs tensors of one shape, got {[a.shape for a in arrays]}")
    axis = layout.normalize_dim(axis, arrays[0].ndim + 1)
    return concat([a.unsqueeze(axis) for a in arrays], axis=axis)


def _concat_ref(arrays, axis):
    return np.concatenate([host(a) for a in arrays], axis=axis)


# ---- pad -----------------------------------------------------------------------------------------
def pad(x: Tensor, pad, mode: str = "constant", value=None) -> Tensor:
    """torch.nn.functional.pad: pad = (left, right) of the last dim, then of the one before, ...;
    negative amounts crop. reflect needs each pad < the dim's size, circular <= it."""
    if mode not in PAD_MODES:
        raise ArgumentError(f"pad mode {mode!r} is none of {sorted(PAD_MODES)}")
    amounts = [int(p) for p in pad]
    if len(amounts) % 2 or len(amounts) // 2 > x.ndim:
        raise ShapeError(f"pad {tuple(amounts)} needs pairs for at most {x.ndim} trailing dims")
    if mode != "constant" and value not in (None, 0):
        raise ArgumentError(f"pad mode {mode!r} takes no value")
    widths = [(0, 0)] * x.ndim
    for i in range(len(amounts) // 2):
        widths[x.ndim - 1 - i] = (amounts[2 * i], amounts[2 * i + 1])
    for d, (lo, hi) in enumerate(widths):
        size = x.shape[d] + min(lo, 0) + min(hi, 0)
        if size < 0 or x.shape[d] + lo + hi < 0:
            raise ShapeError(f"pad {(lo, hi)} crops more than dim {d}'s size {x.shape[d]}")
        limit = size - 1 if mode == "reflect" else size if mode == "circular" else None
        if limit is not None and max(lo, hi) > limit:
            raise ShapeError(f"{mode} pad {(lo, hi)} of dim {d} needs each amount <= {limit} (its size is {size})")
        if mode == "replicate" and size == 0 and max(lo, hi) > 0:
            raise ShapeError(f"replicate pad of the empty dim {d}")
    fill = 0 if value is None else value
    if mode == "constant":
        from ..promotion import check_scalar
        check_scalar(fill, x.dtype)
    return implementation("pad", x.device)(x, tuple(widths), mode, fill)


def _pad_ref(x, widths, mode, value):
    a = host(x)
    a = a[tuple(slice(-lo if lo < 0 else 0, a.shape[d] + hi if hi < 0 else None)
                for d, (lo, hi) in enumerate(widths))]
    grow = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
    if mode == "constant":
        return np.pad(a, grow, mode="constant", constant_values=np.asarray(value).astype(a.dtype))
    return np.pad(a, grow, mode=PAD_MODES[mode])


# ---- flip / roll ---------------------------------------------------------------------------------
def flip(x: Tensor, /, *, axis=None) -> Tensor:
    """The elements in reverse order along axis (None: every axis)."""
    return implementation("flip", x.device)(x, layout.normalize_dims(axis, x.ndim))


def _flip_ref(x, axes):
    return np.flip(host(x), axis=axes) if axes else host(x).copy()


def roll(x: Tensor, /, shift, *, axis=None) -> Tensor:
    """Elements shifted by shift along axis, wrapping around (axis=None: over the flattened tensor)."""
    shifts = (shift,) if isinstance(shift, int) else tuple(int(s) for s in shift)
    if axis is None:
        if len(shifts) != 1:
            raise ShapeError("roll with axis=None takes one shift")
        return roll(x.reshape(-1), shifts[0], axis=0).reshape(x.shape)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if len(axes) != len(shifts):
        raise ShapeError(f"roll: {len(shifts)} shifts for {len(axes)} axes")
    total = {}
    for s, a in zip(shifts, axes):
        a = layout.normalize_dim(a, x.ndim)
        total[a] = total.get(a, 0) + s
    return implementation("roll", x.device)(x, tuple((a, s % max(x.shape[a], 1)) for a, s in sorted(total.items())))


def _roll_ref(x, shifts):
    a = host(x)
    for axis, s in shifts:
        a = np.roll(a, s, axis=axis)
    return np.array(a, copy=True)


# ---- repeat / tile -------------------------------------------------------------------------------
def repeat(x: Tensor, repeats, /, *, axis: int | None = None) -> Tensor:
    """Each element repeated (the Array API's repeat, torch's repeat_interleave): repeats is an int
    or a 1-D integer tensor of counts, one per element along axis (None: the flattened tensor)."""
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = layout.normalize_dim(axis, x.ndim)
    if isinstance(repeats, Tensor):
        check_index_dtype("repeat", repeats)
        if repeats.ndim > 1 or repeats.size not in (1, x.shape[axis]):
            raise ShapeError(f"repeat: {repeats.size} counts for a dim of size {x.shape[axis]}")
        counts = host(repeats).astype(np.int64).reshape(-1)
        if counts.size and counts.min() < 0:
            raise ArgumentError("repeat counts must not be negative")
        if counts.size == 1:
            repeats = int(counts[0])
        else:
            return implementation("repeat", x.device)(x, repeats, axis)
    if int(repeats) < 0:
        raise ArgumentError(f"repeat count {repeats} is negative")
    return implementation("repeat", x.device)(x, int(repeats), axis)


def repeat_interleave(input: Tensor, repeats=None, dim: int | None = None) -> Tensor:
    """torch's spelling of repeat; repeat_interleave(counts) alone (a 1-D integer tensor) repeats
    each position i counts[i] times, as torch's one-argument form does."""
    if repeats is None:
        if not isinstance(input, Tensor) or input.ndim != 1 or dim is not None:
            raise ShapeError("repeat_interleave(repeats) alone takes a 1-D integer tensor of counts")
        from .creation import arange
        return repeat(arange(input.shape[0], device=input.device), input, axis=0)
    return repeat(input, repeats, axis=dim)


def _repeat_ref(x, repeats, axis):
    return np.repeat(host(x), host(repeats).astype(np.int64) if isinstance(repeats, Tensor) else repeats, axis=axis)


def tile(x: Tensor, repetitions, /) -> Tensor:
    """x repeated as a whole repetitions[d] times along each dim (leading ones prepended)."""
    reps = tuple(int(r) for r in repetitions)
    if any(r < 0 for r in reps):
        raise ArgumentError(f"tile repetitions {reps} must not be negative")
    ndim = max(len(reps), x.ndim)
    reps = (1,) * (ndim - len(reps)) + reps
    x = x.reshape((1,) * (ndim - x.ndim) + x.shape)
    return implementation("tile", x.device)(x, reps)


def _tile_ref(x, reps):
    return np.tile(host(x), reps)


# ---- tril / triu ---------------------------------------------------------------------------------
def _triangle(name: str):
    def op(x: Tensor, /, *, k: int = 0) -> Tensor:
        if x.ndim < 2:
            raise ShapeError(f"{name} needs at least 2 dims, got {x.ndim}")
        return implementation(name, x.device)(x, int(k))
    op.__name__ = op.__qualname__ = name
    op.__doc__ = (f"The {'lower' if name == 'tril' else 'upper'} triangle of the last two dims from "
                  f"diagonal k (k > 0 above the main one); the rest zeros.")
    return op


tril, triu = _triangle("tril"), _triangle("triu")


def _triangle_ref(name):
    fn = np.tril if name == "tril" else np.triu
    return lambda x, k: fn(host(x), k)


# ---- meshgrid / diff -----------------------------------------------------------------------------
def meshgrid(*arrays, indexing: str = "xy") -> list[Tensor]:
    """Coordinate grids of 1-D tensors (broadcast views, as the standard allows; copy to write)."""
    if indexing not in ("xy", "ij"):
        raise ArgumentError(f"meshgrid indexing {indexing!r} is neither 'xy' nor 'ij'")
    arrays = _tensors("meshgrid", arrays)
    if any(a.ndim != 1 for a in arrays):
        raise ShapeError("meshgrid takes 1-D tensors")
    shape = [a.shape[0] for a in arrays]
    if indexing == "xy" and len(arrays) > 1:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, a in enumerate(arrays):
        d = (1 - i if i < 2 else i) if indexing == "xy" and len(arrays) > 1 else i
        view = [1] * len(arrays)
        view[d] = a.shape[0]
        out.append(a.reshape(view).broadcast_to(tuple(shape)))
    return out


def diff(x: Tensor, /, *, axis: int = -1, n: int = 1, prepend=None, append=None) -> Tensor:
    """The n-th forward difference along axis, after prepend/append (tensors) are joined on."""
    if x.ndim == 0:
        raise ShapeError("diff of a 0-d tensor")
    axis = layout.normalize_dim(axis, x.ndim)
    if n < 0:
        raise ArgumentError(f"diff order {n} is negative")
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = concat(parts, axis=axis)
    for _ in range(n):
        size = x.shape[axis]
        if size == 0:
            break
        upper, lower = x.narrow(axis, 1, size - 1), x.narrow(axis, 0, size - 1)
        x = (upper != lower) if x.dtype.kind == "bool" else upper - lower
    return x


register_exact("concat", lambda arrays, axis: _concat_ref(arrays, axis),
               out_dtypes=lambda arrays, axis: arrays[0].dtype)
register_exact("pad", _pad_ref)
register_exact("flip", _flip_ref)
register_exact("roll", _roll_ref)
register_exact("repeat", _repeat_ref)
register_exact("tile", _tile_ref)
for _name in ("tril", "triu"):
    register_exact(_name, _triangle_ref(_name))

__all__ = ["concat", "cat", "stack", "pad", "flip", "roll", "repeat", "repeat_interleave", "tile", "tril", "triu",
           "meshgrid", "diff", "PAD_MODES"]
