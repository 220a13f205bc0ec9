"""Diagonals, sliding windows and sub-pixel moves, spelled as torch (the Array API names none):

    nbx.diagonal(x, offset=0, dim1=0, dim2=1)       a view (torch.diagonal)
    nbx.diag_embed(x, offset=0, dim1=-2, dim2=-1)   x's last dim on the diagonals of new dims
    x.unfold(dim, size, step)                       sliding windows: a view (Tensor.unfold)
    nbx.unfold(x, kernel_size, dilation=1, padding=0, stride=1)              im2col (F.unfold)
    nbx.fold(x, output_size, kernel_size, dilation=1, padding=0, stride=1)   col2im (F.fold)
    nbx.pixel_shuffle(x, r), nbx.pixel_unshuffle(x, r)

Each is views plus the ops that already run on every device: zeros, pad, the strided copy of a view
into a view (contiguous(), __setitem__) and elementwise add, so the CPU computes them through the
numpy references of those ops and a GPU through their kernels; none has a kernel of its own.
"""
from __future__ import annotations

from .. import dtypes, layout
from ..errors import ArgumentError, ShapeError
from ..tensor import Tensor
from .conv import conv_out_size, spatial_tuple


def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """A view of the diagonal of dims dim1 and dim2 (offset > 0 above it), appended as the last dim."""
    return input.diagonal(offset, dim1, dim2)


def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """torch.diag_embed: a tensor of zeros with input's last dim written on the offset diagonal of
    the output's dims dim1 and dim2 (size n + |offset|); input's other dims keep their order."""
    if input.ndim == 0:
        raise ShapeError("diag_embed of a 0-d tensor: it needs a last dim to put on the diagonal")
    ndim = input.ndim + 1
    a, b = layout.normalize_dim(dim1, ndim), layout.normalize_dim(dim2, ndim)
    if a == b:
        raise ShapeError(f"diag_embed needs two different dims, got {dim1} and {dim2}")
    side = input.shape[-1] + abs(int(offset))
    shape = list(input.shape[:-1])
    for d in sorted((a, b)):
        shape.insert(d, side)
    from .creation import zeros
    out = zeros(tuple(shape), dtype=input.dtype, device=input.device)
    out.diagonal(int(offset), a, b)[...] = input
    return out


def sliding_windows(x: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """Tensor.unfold: a view whose dim `dimension` indexes the windows of `size` elements `step`
    apart along it, their elements a new last dim."""
    dim = layout.normalize_dim(dimension, max(x.ndim, 1))
    size, step = int(size), int(step)
    length = x.shape[dim] if x.ndim else 1
    if step < 1 or size < 0 or size > length:
        raise ShapeError(f"unfold: windows of {size} elements {step} apart do not fit a dim of {length}")
    if x.ndim == 0:
        return x.reshape(size)
    shape, strides = list(x.shape), list(x.strides)
    shape[dim], strides[dim] = (length - size) // step + 1, strides[dim] * step
    return x._view(shape + [size], strides + [x.strides[dim]])


def pair(name: str, value, low: int) -> tuple[int, int]:
    return spatial_tuple(value, 2, name, low)


def window_frame(kernel_size, dilation, padding, stride):
    return (pair("kernel_size", kernel_size, 1), pair("dilation", dilation, 1), pair("padding", padding, 0),
            pair("stride", stride, 1))


def window_blocks(op: str, size: int, kernel: int, dilation: int, padding: int, stride: int) -> int:
    """How many windows fit along a dim of size (padded both sides); a ShapeError where none does."""
    count = conv_out_size(size, padding, padding, kernel, stride, dilation)
    if count < 1:
        raise ShapeError(f"{op}: a window of {kernel} taps dilated {dilation} does not fit {size} + 2 * {padding}")
    return count


def _window_view(padded: Tensor, kernel, dilation, stride, blocks) -> Tensor:
    """padded [N, C, H, W] as [N, C, kh, kw, Lh, Lw]: every tap of every window, a view."""
    sn, sc, sh, sw = padded.strides
    return padded._view([*padded.shape[:2], *kernel, *blocks],
                        [sn, sc, dilation[0] * sh, dilation[1] * sw, stride[0] * sh, stride[1] * sw])


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """torch.nn.functional.unfold (im2col): [N, C, H, W] (or [C, H, W]) to [N, C * kh * kw, L], the
    windows' taps in (channel, row, column) order, L = Lh * Lw windows in row-major order."""
    kernel, dilation, padding, stride = window_frame(kernel_size, dilation, padding, stride)
    if input.ndim not in (3, 4):
        raise ShapeError(f"unfold takes [N, C, H, W] or [C, H, W] inputs, got {input.shape}")
    x = input if input.ndim == 4 else input.unsqueeze(0)
    blocks = tuple(window_blocks("unfold", x.shape[2 + i], kernel[i], dilation[i], padding[i], stride[i]) for i in (0, 1))
    from .datamove import pad
    padded = pad(x, (padding[1], padding[1], padding[0], padding[0])) if any(padding) else x
    cols = _window_view(padded, kernel, dilation, stride, blocks)
    out = cols.reshape(x.shape[0], x.shape[1] * kernel[0] * kernel[1], blocks[0] * blocks[1])
    return out if input.ndim == 4 else out.squeeze(0)


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """torch.nn.functional.fold (col2im): [N, C * kh * kw, L] (or [C * kh * kw, L]) to
    [N, C, H, W], each window's taps added at their places (overlaps sum). One strided add a tap,
    in tap order (the same order on every device); half-precision inputs add in float32."""
    kernel, dilation, padding, stride = window_frame(kernel_size, dilation, padding, stride)
    out_hw = pair("output_size", output_size, 1)
    if input.ndim not in (2, 3):
        raise ShapeError(f"fold takes [N, C * kh * kw, L] or [C * kh * kw, L] inputs, got {input.shape}")
    x = input if input.ndim == 3 else input.unsqueeze(0)
    taps = kernel[0] * kernel[1]
    blocks = tuple(window_blocks("fold", out_hw[i], kernel[i], dilation[i], padding[i], stride[i]) for i in (0, 1))
    if x.shape[1] % taps or x.shape[2] != blocks[0] * blocks[1]:
        raise ShapeError(f"fold: {x.shape[1:]} is not [C * {taps}, {blocks[0] * blocks[1]}] for kernel {kernel} "
                         f"and output {out_hw}")
    from .creation import zeros
    work = dtypes.computes_in(x.dtype)
    n, c = x.shape[0], x.shape[1] // taps
    padded = zeros((n, c, out_hw[0] + 2 * padding[0], out_hw[1] + 2 * padding[1]), dtype=work, device=x.device)
    cols = x.reshape(n, c, kernel[0], kernel[1], blocks[0], blocks[1])
    places = _window_view(padded, kernel, dilation, stride, blocks)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            target = places[:, :, i, j]
            target[...] = target + cols[:, :, i, j].to(dtype=work)
    out = padded[:, :, padding[0]:padding[0] + out_hw[0], padding[1]:padding[1] + out_hw[1]].to(dtype=x.dtype)
    out = out.contiguous()
    return out if input.ndim == 3 else out.squeeze(0)


def _check_sub_pixel(op: str, x: Tensor, factor) -> int:
    r = int(factor)
    if r < 1:
        raise ArgumentError(f"{op}: the factor {factor} must be a positive int")
    if x.ndim < 3:
        raise ShapeError(f"{op} takes [..., C, H, W] inputs, got {x.shape}")
    return r


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """torch.nn.functional.pixel_shuffle: [..., C * r * r, H, W] to [..., C, H * r, W * r]."""
    r = _check_sub_pixel("pixel_shuffle", input, upscale_factor)
    *batch, c, h, w = input.shape
    if c % (r * r):
        raise ShapeError(f"pixel_shuffle: {c} channels are not a multiple of {r} * {r}")
    b = len(batch)
    x = input.reshape(*batch, c // (r * r), r, r, h, w)
    x = x.permute(*range(b), b, b + 3, b + 1, b + 4, b + 2)
    return x.reshape(*batch, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """torch.nn.functional.pixel_unshuffle: [..., C, H * r, W * r] to [..., C * r * r, H, W]."""
    r = _check_sub_pixel("pixel_unshuffle", input, downscale_factor)
    *batch, c, h, w = input.shape
    if h % r or w % r:
        raise ShapeError(f"pixel_unshuffle: {h} x {w} is not divisible by {r}")
    b = len(batch)
    x = input.reshape(*batch, c, h // r, r, w // r, r)
    x = x.permute(*range(b), b, b + 2, b + 4, b + 1, b + 3)
    return x.reshape(*batch, c * r * r, h // r, w // r)


__all__ = ["diagonal", "diag_embed", "unfold", "fold", "pixel_shuffle", "pixel_unshuffle"]
