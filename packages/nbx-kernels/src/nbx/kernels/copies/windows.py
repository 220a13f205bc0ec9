"""Declared costs of the windows front-ends (nbx.core.ops.windows): each runs views and the fills,
copies and adds of other ops, so each is priced from the steps it runs. A buffer is one of those
steps' allocations; inputs are taken as laid out (a view that needs a copy to reshape is counted)."""
from __future__ import annotations

from math import prod

from nbx.core import dtypes, layout

from nbx.core.ops.windows import pair, window_blocks, window_frame

from ..cost import LAUNCH, RESULT, Buffer, Cost, declares


def _reshape_copies(shape, strides, new_shape) -> bool:
    return prod(shape) > 0 and layout.view_strides(tuple(shape), tuple(strides), tuple(new_shape)) is None


def _sub_pixel_cost(x, split, order, merged) -> Cost:
    """x reshaped to split (a view, or a copy), permuted by order and reshaped to merged: one copy
    when the permuted view cannot be read as merged."""
    buffers, moved = [], 0
    strides = layout.view_strides(x.shape, x.strides, split)
    if strides is None:
        buffers.append(Buffer("input", x.nbytes, LAUNCH))
        moved += 2 * x.nbytes
        strides = layout.contiguous_strides(split)
    if _reshape_copies([split[d] for d in order], [strides[d] for d in order], merged):
        buffers.append(Buffer("out", x.nbytes))
        moved += 2 * x.nbytes
    return Cost(buffers=tuple(buffers), bytes_moved=moved, launches=len(buffers))


@declares("pixel_shuffle")
def _pixel_shuffle_cost(input, upscale_factor) -> Cost:
    r, (*batch, c, h, w), b = int(upscale_factor), input.shape, input.ndim - 3
    return _sub_pixel_cost(input, (*batch, c // (r * r), r, r, h, w), (*range(b), b, b + 3, b + 1, b + 4, b + 2),
                           (*batch, c // (r * r), h * r, w * r))


@declares("pixel_unshuffle")
def _pixel_unshuffle_cost(input, downscale_factor) -> Cost:
    r, (*batch, c, h, w), b = int(downscale_factor), input.shape, input.ndim - 3
    return _sub_pixel_cost(input, (*batch, c, h // r, r, w // r, r), (*range(b), b, b + 2, b + 4, b + 1, b + 3),
                           (*batch, c * r * r, h // r, w // r))


@declares("diag_embed")
def _diag_embed_cost(input, offset=0, dim1=-2, dim2=-1) -> Cost:
    """zeros of the output (one fill), then input copied onto the diagonal view (one copy)."""
    side = input.shape[-1] + abs(int(offset))
    out = prod(input.shape[:-1]) * side * side * input.dtype.itemsize
    return Cost(buffers=(Buffer("out", out),), bytes_moved=out + 2 * input.nbytes, launches=2)


@declares("unfold")
def _unfold_cost(input, kernel_size, dilation=1, padding=0, stride=1) -> Cost:
    """The pad (when padding) and the copy of the windows' view into the columns (when that view
    cannot be read as [N, C * kh * kw, L])."""
    kernel, dilation, padding, stride = window_frame(kernel_size, dilation, padding, stride)
    shape = input.shape if input.ndim == 4 else (1,) + input.shape
    strides = input.strides if input.ndim == 4 else (0,) + input.strides
    n, c, h, w = shape
    item = input.dtype.itemsize
    blocks = [window_blocks("unfold", (h, w)[i], kernel[i], dilation[i], padding[i], stride[i]) for i in (0, 1)]
    buffers, moved = [], 0
    if any(padding):
        padded_shape = (n, c, h + 2 * padding[0], w + 2 * padding[1])
        buffers.append(Buffer("padded", prod(padded_shape) * item, LAUNCH))
        moved += input.nbytes + prod(padded_shape) * item
        strides = layout.contiguous_strides(padded_shape)
    sn, sc, sh, sw = strides
    view = ([n, c, *kernel, *blocks], [sn, sc, dilation[0] * sh, dilation[1] * sw, stride[0] * sh, stride[1] * sw])
    if _reshape_copies(*view, (n, c * kernel[0] * kernel[1], blocks[0] * blocks[1])):
        out = prod(view[0]) * item
        buffers.append(Buffer("out", out))
        moved += 2 * out
    return Cost(buffers=tuple(buffers), bytes_moved=moved, launches=len(buffers))


@declares("fold")
def _fold_cost(input, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Cost:
    """zeros of the padded output (in float32 for half precision), then per tap: the tap cast
    (half precision), the add to its places, the copy back; then the crop cast or copied out. A
    tap's temporaries are freed before the next tap and before the output is made, so the peak is
    padded + max(temporaries, out): the buffer `temporaries` is the part of them above out."""
    kernel, dilation, padding, stride = window_frame(kernel_size, dilation, padding, stride)
    out_hw = pair("output_size", output_size, 1)
    n = input.shape[0] if input.ndim == 3 else 1
    taps = kernel[0] * kernel[1]
    c = input.shape[-2] // taps
    work = dtypes.computes_in(input.dtype)
    cast = work is not input.dtype
    blocks = [window_blocks("fold", out_hw[i], kernel[i], dilation[i], padding[i], stride[i]) for i in (0, 1)]
    padded = n * c * (out_hw[0] + 2 * padding[0]) * (out_hw[1] + 2 * padding[1]) * work.itemsize
    tap = n * c * blocks[0] * blocks[1] * work.itemsize
    temporaries = (2 if cast else 1) * tap
    cropped = cast or any(padding)
    out = n * c * out_hw[0] * out_hw[1] * input.dtype.itemsize if cropped else 0
    buffers = (Buffer("padded", padded, LAUNCH if cropped else RESULT), Buffer("out", out),
               Buffer("temporaries", max(0, temporaries - out), LAUNCH))
    per_tap = (tap // work.itemsize * input.dtype.itemsize + tap if cast else 0) + 3 * tap + 2 * tap
    moved = padded + taps * per_tap + (out // input.dtype.itemsize * work.itemsize + out if cropped else 0)
    launches = 1 + taps * (3 if cast else 2) + (1 if cropped else 0)
    return Cost(buffers=tuple(b for b in buffers if b.nbytes), bytes_moved=moved, launches=launches,
                notes=("one strided add a tap, in tap order",))
