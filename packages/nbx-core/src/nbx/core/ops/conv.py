"""Convolutions and transposed convolutions, spelled as torch.nn.functional.

`conv1d/2d/3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)` with padding an
int, a tuple of one int per spatial dim, a tuple of (low, high) pairs (asymmetric), 'same' or
'valid'; `padding_mode=` ('zeros', or a mode of `pad`: 'reflect', 'replicate', 'circular', as
nn.Conv2d) pads through `pad` first. `conv_transpose1d/2d/3d(input, weight, bias=None, stride=1,
padding=0, output_padding=0, groups=1, dilation=1)` (torch's argument order). Input (N, C, *S) or
unbatched (C, *S); a channels-last input (strides of N, *S, C) is read in place by the kernels and
gives a channels-last output, as torch does. Half types compute in fp32; the oracle in float64.
"""
from __future__ import annotations

import numpy as np

from .. import layout, reference
from ..dispatch import implementation, register
from ..errors import ArgumentError, DTypeError, NotSupportedError, ShapeError
from ..tensor import Tensor
from ._common import check_category, common_device, compute_dtype, oracle_dtype, wrap

PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def spatial_tuple(value, n: int, name: str, minimum: int = 1) -> tuple[int, ...]:
    """An int or a tuple of n ints as n ints, each at least minimum."""
    values = (int(value),) * n if isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)
    if len(values) != n:
        raise ArgumentError(f"{name} {value!r} needs one value per spatial dim ({n})")
    if any(v < minimum for v in values):
        raise ArgumentError(f"{name} {value!r} must be at least {minimum} in every dim")
    return values


def conv_padding(padding, n: int, kernel, stride, dilation) -> tuple[tuple[int, int], ...]:
    """padding as (low, high) per spatial dim: 'valid' none; 'same' the total dilation * (k - 1)
    with the odd element high (torch's rule; stride 1 only); ints symmetric; pairs as given."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * n
        if padding != "same":
            raise ArgumentError(f"padding {padding!r} is none of 'same', 'valid', an int or a tuple")
        if any(s != 1 for s in stride):
            raise ArgumentError("padding='same' is not supported for strided convolutions (as torch)")
        totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in totals)
    if not isinstance(padding, (int, np.integer)) and len(padding) == n and all(
            not isinstance(p, (int, np.integer)) for p in padding):
        pairs = tuple((int(lo), int(hi)) for lo, hi in padding)
    else:
        pairs = tuple((p, p) for p in spatial_tuple(padding, n, "padding", 0))
    if any(lo < 0 or hi < 0 for lo, hi in pairs):
        raise ArgumentError(f"padding {padding!r} must not be negative")
    return pairs


def conv_out_size(size: int, lo: int, hi: int, k: int, stride: int, dilation: int) -> int:
    return (size + lo + hi - dilation * (k - 1) - 1) // stride + 1


def _check_operands(op: str, n: int, x: Tensor, weight: Tensor, bias: Tensor | None):
    for role, t in (("input", x), ("weight", weight), ("bias", bias)):
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise DTypeError(f"{op}: {role} must be a tensor, got {type(t).__name__}")
        check_category(f"{op} ({role})", t.dtype, "real_floating")
        if t.dtype is not x.dtype:
            raise DTypeError(f"{op}: {role} is {t.dtype.name}, input is {x.dtype.name} (they must match, as torch)")
    common_device(x, weight, bias)
    if x.ndim not in (n + 1, n + 2):
        raise ShapeError(f"{op} takes input (N, C, *{n} dims) or unbatched (C, *{n} dims), got shape {x.shape}")
    if weight.ndim != n + 2:
        raise ShapeError(f"{op} takes a weight of {n + 2} dims, got shape {weight.shape}")


def _batched(x: Tensor, n: int) -> tuple[Tensor, bool]:
    return (x.unsqueeze(0), True) if x.ndim == n + 1 else (x, False)


def conv_args(op: str, n: int, x, weight, bias, stride, padding, dilation, groups, upsample: int = 1):
    """The normalized arguments of a convolution: (stride, pads, dilation, groups), checked (of x's
    nearest upsampling by upsample)."""
    groups = int(groups)
    kernel = tuple(weight.shape[2:])
    stride, dilation = spatial_tuple(stride, n, "stride"), spatial_tuple(dilation, n, "dilation")
    pads = conv_padding(padding, n, kernel, stride, dilation)
    channels = x.shape[1]
    if groups < 1 or channels % groups or weight.shape[0] % groups:
        raise ShapeError(f"{op}: groups {groups} must divide the {channels} input and {weight.shape[0]} "
                         f"output channels")
    if weight.shape[1] * groups != channels:
        raise ShapeError(f"{op}: weight {weight.shape} takes {weight.shape[1] * groups} input channels "
                         f"({weight.shape[1]} a group x {groups} groups), input has {channels}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ShapeError(f"{op}: bias has shape {bias.shape}, expected ({weight.shape[0]},)")
    for d in range(n):
        if conv_out_size(x.shape[2 + d] * upsample, *pads[d], kernel[d], stride[d], dilation[d]) < 1:
            raise ShapeError(f"{op}: the kernel {kernel} (dilation {dilation}) is larger than the padded input "
                             f"{x.shape[2:]} in spatial dim {d}")
    return stride, pads, dilation, groups


def _checked(op: str, n: int, x, weight, bias, stride, padding, dilation, groups, activation, upsample):
    """The front-end's checks of a convolution of a batched x whose operands are checked, and its
    normalized (stride, pads, dilation, groups, activation, upsample)."""
    upsample = _upsample(op, x, weight, groups, upsample)
    stride, pads, dilation, groups = conv_args(op, n, x, weight, bias, stride, padding, dilation, groups, upsample)
    return stride, pads, dilation, groups, _activation(op, activation), upsample


def checked_convolution(x: Tensor, weight: Tensor, bias, stride, padding, dilation, groups, activation=None,
                        upsample: int = 1):
    """conv{n}d(x, weight, bias, stride, padding, dilation, groups, activation=, upsample=) of a
    batched x, checked as the front-end checks it, as a function run(band, pads) that convolves
    any input of x's channels, dtype and device (zero-padded by pads, (low, high) pairs of ints) by
    the device's implementation without checking it again: for a caller that convolves many inputs
    alike (tiled_conv_chain's bands), whose pads it derives itself. run(band, pads, into) writes the
    result into the view into (of its shape and dtype, any strides; the kernels store there
    directly) and returns it."""
    n = weight.ndim - 2
    op = f"conv{n}d"
    _check_operands(op, n, x, weight, bias)
    if x.ndim != n + 2:
        raise ShapeError(f"{op}: checked_convolution takes a batched input (N, C, *{n} dims), got {x.shape}")
    stride, _, dilation, groups, activation, upsample = _checked(op, n, x, weight, bias, stride, padding, dilation,
                                                                 groups, activation, upsample)
    impl, extra = implementation(op, x.device), (upsample,) if upsample > 1 else ()

    def run(band: Tensor, pads, into: Tensor | None = None) -> Tensor:
        if into is None:
            return impl(band, weight, bias, stride, pads, dilation, groups, activation, None, *extra)
        return impl(band, weight, bias, stride, pads, dilation, groups, activation, None, upsample, into=into)
    return run


def _conv_front_end(n: int):
    op = f"conv{n}d"

    def conv(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
             groups: int = 1, padding_mode: str = "zeros", *, activation=None, residual: Tensor | None = None,
             upsample: int = 1) -> Tensor:
        _check_operands(op, n, input, weight, bias)
        x, unbatched = _batched(input, n)
        stride, pads, dilation, groups, activation, upsample = _checked(op, n, x, weight, bias, stride, padding,
                                                                        dilation, groups, activation, upsample)
        if residual is not None:
            residual = _check_residual(op, n, x, weight, residual, stride, pads, dilation, unbatched, upsample)
        if padding_mode not in PADDING_MODES:
            raise ArgumentError(f"{op}: padding_mode {padding_mode!r} is none of {PADDING_MODES}")
        if padding_mode != "zeros" and any(lo or hi for lo, hi in pads):
            if upsample > 1:  # the pad reads the upsampled image's edge: upsample first
                from .resample import interpolate
                x, upsample = interpolate(x, scale_factor=upsample, mode="nearest"), 1
            x = pad_spatial(x, pads, padding_mode)
            pads = ((0, 0),) * n
        impl = implementation(op, x.device)
        out = impl(x, weight, bias, stride, pads, dilation, groups, activation, residual, *(
            (upsample,) if upsample > 1 else ()))
        return out.squeeze(0) if unbatched else out
    conv.__name__ = conv.__qualname__ = op
    conv.__doc__ = (f"torch.nn.functional.{op}: the {n}-D convolution (cross-correlation) of input by weight; "
                    f"activation(conv + bias) + residual with the keyword-only extensions (fused in the store); "
                    f"upsample=k: of interpolate(input, scale_factor=k, mode='nearest'), read by the kernel at "
                    f"(i // k) (a UNet's upsample block, without the upsampled image in memory).")
    return conv


def pad_spatial(x: Tensor, pads, mode: str) -> Tensor:
    """x (N, C, *S) padded by pads ((low, high) per spatial dim) with a mode of `pad`; a channels-last
    x is padded as its (N, *S, C) view, so the padded copy is channels-last too and the convolution
    after it reads it in place and keeps the layout (as it does unpadded)."""
    from .datamove import pad
    widths = [a for lo_hi in reversed(pads) for a in lo_hi]   # pad's order: the last dim first
    if layout.is_channels_last(x.shape, x.strides):
        moved = x.permute(0, *range(2, x.ndim), 1)
        return pad(moved, [0, 0, *widths], mode=mode).permute(0, x.ndim - 1, *range(1, x.ndim - 1))
    return pad(x, widths, mode=mode)


def _upsample(op: str, x: Tensor, weight: Tensor, groups, upsample) -> int:
    """upsample= checked: a positive integer factor, for a convolution the implicit GEMM serves."""
    if isinstance(upsample, bool) or not isinstance(upsample, (int, np.integer)) or upsample < 1:
        raise ArgumentError(f"{op}: upsample is a positive integer factor (nearest), got {upsample!r}")
    upsample = int(upsample)
    depthwise = weight.shape[1] == 1 and int(groups) == x.shape[1]
    if upsample > 1 and (depthwise or all(k == 1 for k in weight.shape[2:])):
        raise NotSupportedError(f"{op}: upsample= is fused into convolutions with a kernel larger than 1 x 1 that "
                                f"are not depthwise; upsample this one first (interpolate, mode='nearest')")
    return upsample


def _activation(op: str, activation):
    from .products import ACTIVATIONS
    if activation not in ACTIVATIONS:
        raise ArgumentError(f"{op}'s activation is one of {', '.join(map(str, ACTIVATIONS))}, got {activation!r}")
    return activation


def _check_residual(op: str, n: int, x: Tensor, weight: Tensor, residual, stride, pads, dilation, unbatched: bool,
                    upsample: int = 1):
    """The residual as a batched tensor of the output's shape and dtype."""
    if not isinstance(residual, Tensor) or residual.dtype is not x.dtype:
        raise DTypeError(f"{op}: residual must be a {x.dtype.name} tensor")
    common_device(x, residual)
    shape = (x.shape[0], weight.shape[0], *(conv_out_size(x.shape[2 + d] * upsample, *pads[d], weight.shape[2 + d],
                                                          stride[d], dilation[d]) for d in range(n)))
    batched = residual.unsqueeze(0) if unbatched else residual
    if tuple(batched.shape) != shape:
        raise ShapeError(f"{op}: residual has shape {tuple(residual.shape)}, the output's is {shape[unbatched:]}")
    return batched


conv1d, conv2d, conv3d = (_conv_front_end(n) for n in (1, 2, 3))


def transpose_out_size(size, lo, k, stride, dilation, output_padding) -> int:
    return (size - 1) * stride - 2 * lo + dilation * (k - 1) + output_padding + 1


def conv_transpose_args(op: str, n: int, x, weight, bias, stride, padding, output_padding, groups, dilation):
    """The normalized arguments of a transposed convolution: (stride, padding, output_padding,
    groups, dilation), checked. weight is (C_in, C_out / groups, *kernel)."""
    groups = int(groups)
    stride, dilation = spatial_tuple(stride, n, "stride"), spatial_tuple(dilation, n, "dilation")
    if isinstance(padding, str):
        raise ArgumentError(f"{op} takes int padding, not {padding!r} (as torch)")
    padding = spatial_tuple(padding, n, "padding", 0)
    output_padding = spatial_tuple(output_padding, n, "output_padding", 0)
    for p, s, d in zip(output_padding, stride, dilation):
        if p >= s and p >= d:
            raise ArgumentError(f"{op}: output_padding {output_padding} must be smaller than the stride {stride} "
                                f"or the dilation {dilation}")
    channels = x.shape[1]
    if groups < 1 or channels % groups:
        raise ShapeError(f"{op}: groups {groups} must divide the {channels} input channels")
    if weight.shape[0] != channels:
        raise ShapeError(f"{op}: weight {weight.shape} takes {weight.shape[0]} input channels, input has {channels}")
    if bias is not None and tuple(bias.shape) != (weight.shape[1] * groups,):
        raise ShapeError(f"{op}: bias has shape {bias.shape}, expected ({weight.shape[1] * groups},)")
    kernel = weight.shape[2:]
    for d in range(n):
        if transpose_out_size(x.shape[2 + d], padding[d], kernel[d], stride[d], dilation[d], output_padding[d]) < 1:
            raise ShapeError(f"{op}: padding {padding} leaves no output in spatial dim {d}")
    return stride, padding, output_padding, groups, dilation


def _transpose_front_end(n: int):
    op = f"conv_transpose{n}d"

    def conv_transpose(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                       output_padding=0, groups: int = 1, dilation=1) -> Tensor:
        _check_operands(op, n, input, weight, bias)
        x, unbatched = _batched(input, n)
        args = conv_transpose_args(op, n, x, weight, bias, stride, padding, output_padding, groups, dilation)
        out = implementation(op, x.device)(x, weight, bias, *args)
        return out.squeeze(0) if unbatched else out
    conv_transpose.__name__ = conv_transpose.__qualname__ = op
    conv_transpose.__doc__ = f"torch.nn.functional.{op}: the gradient of {n}-D convolution with respect to its input."
    return conv_transpose


conv_transpose1d, conv_transpose2d, conv_transpose3d = (_transpose_front_end(n) for n in (1, 2, 3))


# ---- references ----------------------------------------------------------------------------------

def _compute(t: Tensor, precision):
    dtype = oracle_dtype(t.dtype) if precision == reference.FLOAT64 else compute_dtype(t.dtype)
    return t.numpy().astype(dtype, copy=False), dtype


def _conv_compute(t: Tensor, precision):
    """A convolution's operand on the CPU: in float64 for every floating dtype, rounded once at the
    end. The BLAS product's summation order changes with the number of output positions, so float32
    sums would differ in their last bits between a band of the image and the whole of it; float64
    sums rounded to float32 (or a half type) agree, and tiled_conv_chain is bit-equal to the chain."""
    return _compute(t, reference.FLOAT64 if t.dtype.kind == "float" else precision)


def _group_product(windows: np.ndarray, w: np.ndarray, groups: int, n: int) -> np.ndarray:
    """windows (N, C, *O, *K) by w (F, C / groups, *K) -> (N, F, *O), group by group."""
    outs, ks = "xyz"[:n], "ijk"[:n]
    c_per, f_per = w.shape[1], w.shape[0] // groups
    parts = [np.einsum(f"nc{outs}{ks},fc{ks}->nf{outs}", windows[:, g * c_per:(g + 1) * c_per],
                       w[g * f_per:(g + 1) * f_per], optimize=True) for g in range(groups)]
    return np.concatenate(parts, axis=1)


def _conv_reference(n: int):
    def ref(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, padding_mode="zeros",
            activation=None, residual=None, upsample=1, precision=reference.NATIVE):
        from .products import apply_activation
        xb, unbatched = _batched(x, n)
        stride, pads, dilation, groups = conv_args(f"conv{n}d", n, xb, weight, bias, stride, padding, dilation, groups,
                                                   upsample)
        a, dtype = _conv_compute(xb, precision)
        for axis in range(2, 2 + n):   # nearest upsampling: input position i is stored position i // upsample
            a = np.repeat(a, upsample, axis=axis)
        w = weight.numpy().astype(dtype, copy=False)
        mode = {"zeros": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[padding_mode]
        a = np.pad(a, ((0, 0), (0, 0)) + pads, mode=mode)
        kernel = w.shape[2:]
        extents = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
        win = np.lib.stride_tricks.sliding_window_view(a, extents, axis=tuple(range(2, 2 + n)))
        win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride)
                  + tuple(slice(None, None, d) for d in dilation)]
        out = _group_product(win, w, groups, n)
        if bias is not None:
            out = out + bias.numpy().astype(dtype).reshape((1, -1) + (1,) * n)
        out = apply_activation(out, activation)
        if residual is not None:
            out = out + residual.numpy().astype(dtype).reshape(out.shape)
        return out[0] if unbatched else out
    return ref


def _transpose_reference(n: int):
    def ref(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1,
            precision=reference.NATIVE):
        xb, unbatched = _batched(x, n)
        stride, padding, output_padding, groups, dilation = conv_transpose_args(
            f"conv_transpose{n}d", n, xb, weight, bias, stride, padding, output_padding, groups, dilation)
        a, dtype = _compute(xb, precision)
        w = weight.numpy().astype(dtype, copy=False)
        batch, channels, sizes, kernel = a.shape[0], a.shape[1], a.shape[2:], w.shape[2:]
        c_per, f_per = channels // groups, w.shape[1]
        outs = [transpose_out_size(sizes[d], padding[d], kernel[d], stride[d], dilation[d], output_padding[d])
                for d in range(n)]
        full = [max((sizes[d] - 1) * stride[d] + dilation[d] * (kernel[d] - 1) + 1, padding[d] + outs[d])
                for d in range(n)]
        buf = np.zeros((batch, f_per * groups, *full), dtype)
        letters = "xyz"[:n]
        for k in np.ndindex(*kernel):  # each tap's product lands at i * stride + k * dilation
            for g in range(groups):
                part = np.einsum(f"nc{letters},cf->nf{letters}", a[:, g * c_per:(g + 1) * c_per],
                                 w[(slice(g * c_per, (g + 1) * c_per), slice(None)) + k], optimize=True)
                where = tuple(slice(k[d] * dilation[d], k[d] * dilation[d] + (sizes[d] - 1) * stride[d] + 1,
                                    stride[d]) for d in range(n))
                buf[(slice(None), slice(g * f_per, (g + 1) * f_per)) + where] += part
        out = buf[(slice(None), slice(None)) + tuple(slice(padding[d], padding[d] + outs[d]) for d in range(n))]
        if bias is not None:
            out = out + bias.numpy().astype(dtype).reshape((1, -1) + (1,) * n)
        return out[0] if unbatched else out
    return ref


def _register(op: str, ref) -> None:
    reference.register(op, ref)
    register(op, "cpu")(lambda x, *args: wrap(ref(x, *args), x.dtype))


def _register_conv(op: str, ref) -> None:
    reference.register(op, ref)

    @register(op, "cpu")
    def cpu(x, weight, bias, stride, pads, dilation, groups, activation, residual, upsample=1, into=None):
        out = wrap(ref(x, weight, bias, stride, pads, dilation, groups, activation=activation, residual=residual,
                       upsample=upsample), x.dtype)
        return out if into is None else _written(into, out)


def _written(into: Tensor, out: Tensor) -> Tensor:
    """into (an implementation's into=: a view of the output's shape and dtype, any strides) holding out."""
    into._copy_from(out)
    return into


for _n in (1, 2, 3):
    _register_conv(f"conv{_n}d", _conv_reference(_n))
    _register(f"conv_transpose{_n}d", _transpose_reference(_n))

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"]
