"""Shapes and strides, counted in elements: the arithmetic behind every view."""
from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from math import prod

from .errors import ShapeError, ViewError

Shape = tuple[int, ...]


def as_shape(shape) -> Shape:
    if type(shape) is tuple:  # the common case, a tuple of non-negative ints: as it is
        for s in shape:
            if type(s) is not int or s < 0:
                break
        else:
            return shape
    if isinstance(shape, int) or hasattr(shape, "__index__") and not isinstance(shape, Sequence):
        shape = (shape,)
    try:
        out = tuple(int(s.__index__()) for s in shape)
    except AttributeError:
        raise ShapeError(f"a shape holds integers, got {shape!r}") from None
    if any(s < 0 for s in out):
        raise ShapeError(f"negative dimension in shape {out}")
    return out


def shape_args(args) -> tuple:
    """f(2, 3) and f((2, 3)) both name the shape (2, 3)."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return tuple(args)


def contiguous_strides(shape: Shape) -> Shape:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


# contiguous_strides of the shapes asked most recently (as_shape's: plain ints, so equal keys are
# equal shapes): every allocation's lookup, made in C
dense_strides = lru_cache(maxsize=4096)(contiguous_strides)


def is_contiguous(shape: Shape, strides: Shape) -> bool:
    """Row-major dense; dims of size 1 may carry any stride, an empty tensor is contiguous."""
    if 0 in shape:
        return True
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1:
            if stride != expected:
                return False
            expected *= size
    return True


def collapse_dims(shape, strides_list) -> tuple[Shape, list[Shape]]:
    """shape walked by every layout of strides_list with the fewest dims: size-1 dims vanish and
    adjacent dims merge where every layout walks them as one (stride[i] == stride[i+1] * size[i+1]).
    The one collapse every launch planner (elementwise, rows, reductions, matmul batches, copies) uses."""
    merged: list[tuple[int, list[int]]] = []
    for i, size in enumerate(shape):
        if size == 1:
            continue
        st = [s[i] for s in strides_list]
        if merged and all(p == c * size for p, c in zip(merged[-1][1], st)):
            merged[-1] = (merged[-1][0] * size, st)
        else:
            merged.append((size, st))
    return tuple(size for size, _ in merged), [tuple(st[k] for _, st in merged) for k in range(len(strides_list))]


def normalize_dim(dim: int, ndim: int) -> int:
    if type(dim) is int and -ndim <= dim < ndim:  # the common case (no 0-d tensor, a plain int in range)
        return dim % ndim
    dim = int(dim.__index__())
    lo = -max(ndim, 1)
    hi = max(ndim, 1) - 1
    if not lo <= dim <= hi:
        raise ShapeError(f"dim {dim} is out of range for a tensor of {ndim} dims [{lo}, {hi}]")
    return dim % max(ndim, 1)


def normalize_dims(dims, ndim: int) -> tuple[int, ...]:
    """None -> every dim; an int or a sequence -> sorted, unique, non-negative dims."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int) or hasattr(dims, "__index__"):
        dims = (dims,)
    out = sorted(normalize_dim(d, ndim) for d in dims)
    if len(set(out)) != len(out):
        raise ShapeError(f"dims {tuple(dims)} repeat a dim")
    return tuple(out)


def broadcast_shapes(*shapes: Shape) -> Shape:
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(-ndim, 0):
        sizes = {s[axis] for s in shapes if len(s) >= -axis and s[axis] != 1}
        if len(sizes) > 1:
            raise ShapeError(f"shapes {', '.join(map(str, shapes))} do not broadcast (dim {axis}: {sorted(sizes)})")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def broadcast_strides(shape: Shape, strides: Shape, target: Shape) -> Shape:
    """Strides that read a tensor of `shape` as `target` (stride 0 along broadcast dims)."""
    lead = len(target) - len(shape)
    if lead < 0:
        raise ShapeError(f"cannot expand shape {shape} to fewer dims {target}")
    out = [0] * lead
    for size, stride, want in zip(shape, strides, target[lead:]):
        if size == want:
            out.append(stride)
        elif size == 1:
            out.append(0)
        else:
            raise ShapeError(f"cannot expand shape {shape} to {target}")
    return tuple(out)


def infer_shape(shape: Sequence[int], numel: int) -> Shape:
    """Resolve one -1 in shape so that it holds numel elements."""
    shape = [int(s.__index__()) for s in shape]
    holes = [i for i, s in enumerate(shape) if s == -1]
    if len(holes) > 1:
        raise ShapeError(f"only one dim may be -1, got {tuple(shape)}")
    if any(s < -1 for s in shape):
        raise ShapeError(f"invalid shape {tuple(shape)}")
    known = prod(s for s in shape if s != -1)
    if holes:
        if known == 0 or numel % known:
            raise ShapeError(f"shape {tuple(shape)} is invalid for {numel} elements")
        shape[holes[0]] = numel // known
    elif known != numel:
        raise ShapeError(f"shape {tuple(shape)} is invalid for {numel} elements")
    return tuple(shape)


def is_channels_last(shape, strides) -> bool:
    """Whether (N, C, *S) has its channels at unit stride with the spatial dims around them
    (torch's channels_last memory format), so an op's output keeps that layout too."""
    return len(shape) > 2 and shape[1] > 1 and strides[1] == 1 and prod(shape[2:]) > 1


def view_strides(old_shape: Shape, old_strides: Shape, new_shape: Shape) -> Shape | None:
    """Strides that read the old layout as new_shape without a copy, or None if none exist.

    The rule ATen's view follows: walk the old dims from the innermost, grouping dims that are
    contiguous with each other into chunks; each chunk must be covered exactly by new dims.
    """
    if not old_shape or prod(old_shape) == 0:
        return contiguous_strides(new_shape)
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base = old_strides[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[tensor_d]
        chunk_ends = tensor_d == 0 or (
            old_shape[tensor_d - 1] != 1 and old_strides[tensor_d - 1] != tensor_numel * chunk_base)
        if chunk_ends:
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base = old_strides[tensor_d - 1]
                tensor_numel = view_numel = 1
    if view_d != -1:
        return None
    return tuple(new_strides)


def element_span(shape: Shape, strides: Shape, offset: int) -> tuple[int, int]:
    """[lo, hi) of the element offsets a layout touches (hi == lo for an empty tensor)."""
    if 0 in shape:
        return offset, offset
    lo = offset + sum((s - 1) * st for s, st in zip(shape, strides) if st < 0)
    hi = offset + sum((s - 1) * st for s, st in zip(shape, strides) if st > 0) + 1
    return lo, hi


def reach(shape: Shape, strides: Shape) -> int:
    """One past the farthest |offset| from its first element a layout reaches: whether a kernel
    indexes it in int32 or int64 (the launch paths of every family ask)."""
    return 1 + sum((s - 1) * abs(st) for s, st in zip(shape, strides))


def slice_dim(size: int, stride: int, index: slice) -> tuple[int, int, int]:
    """(new size, new stride, element offset) of a slice with any step, numpy's semantics."""
    start, stop, step = index.indices(size)
    if step == 0:
        raise ViewError("slice step cannot be zero")
    length = len(range(start, stop, step))
    return length, stride * step, (start * stride if length else 0)


def as_c_contiguous(arr):
    """numpy's ascontiguousarray without its promotion of 0-d arrays to 1-d."""
    import numpy as np
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
