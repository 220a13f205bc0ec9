"""interpolate, spelled as torch.nn.functional.interpolate(input, size=None, scale_factor=None,
mode='nearest', align_corners=None, recompute_scale_factor=None, antialias=False).

Modes: nearest, nearest-exact, linear (3-D input), bilinear and bicubic (4-D), trilinear (5-D),
area (adaptive average pooling). The output size is size, else floor(input size * scale_factor);
the source coordinate of output o uses 1 / scale_factor when a scale_factor is given and
recompute_scale_factor is not True, else input size / output size (torch's rule). Every mode is
separable: the reference applies one (output, input) weight matrix per spatial dim, in float64 for
the oracle. antialias is refused by name.
"""
from __future__ import annotations

import math

import numpy as np

from .. import reference
from ..dispatch import implementation, register
from ..errors import ArgumentError, DTypeError, NotSupportedError, ShapeError
from ..tensor import Tensor
from ._common import check_category, compute_dtype, oracle_dtype, wrap
from .pooling import adaptive_window

MODES = {"nearest": None, "nearest-exact": None, "area": None, "linear": 1, "bilinear": 2, "trilinear": 3,
         "bicubic": 2}
CUBIC_A = -0.75  # torch's bicubic coefficient


def interpolate_args(x: Tensor, size, scale_factor, mode: str, align_corners, recompute_scale_factor):
    """(output sizes, scales: the source step per dim or None to use in / out, align_corners)."""
    if mode not in MODES:
        raise ArgumentError(f"interpolate: mode {mode!r} is none of {sorted(MODES)}")
    n = x.ndim - 2
    if n < 1 or (MODES[mode] is not None and MODES[mode] != n):
        raise ShapeError(f"interpolate: mode {mode!r} does not take a {x.ndim}-D input {x.shape}")
    if align_corners is not None and mode not in ("linear", "bilinear", "trilinear", "bicubic"):
        raise ArgumentError(f"interpolate: align_corners only goes with the linear and cubic modes, not {mode!r}")
    if (size is None) == (scale_factor is None):
        raise ArgumentError("interpolate takes exactly one of size and scale_factor")
    sizes_in = x.shape[2:]
    if size is not None:
        sizes = (int(size),) * n if isinstance(size, (int, np.integer)) else tuple(int(s) for s in size)
        if len(sizes) != n:
            raise ArgumentError(f"interpolate: size {size!r} needs {n} entries")
        scales = (None,) * n
    else:
        factors = (float(scale_factor),) * n if isinstance(scale_factor, (int, float)) else \
            tuple(float(s) for s in scale_factor)
        if len(factors) != n or any(f <= 0 for f in factors):
            raise ArgumentError(f"interpolate: scale_factor {scale_factor!r} needs {n} positive entries")
        sizes = tuple(int(math.floor(s * f)) for s, f in zip(sizes_in, factors))
        keep = recompute_scale_factor is not True and mode != "area"
        scales = tuple(1.0 / f for f in factors) if keep else (None,) * n
    if any(s < 1 for s in sizes) or any(s < 1 for s in sizes_in):
        raise ShapeError(f"interpolate: input {tuple(sizes_in)} to output {sizes}: every size must be positive")
    return sizes, scales, bool(align_corners)


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                recompute_scale_factor=None, antialias: bool = False) -> Tensor:
    """torch.nn.functional.interpolate (see the module's text)."""
    if not isinstance(input, Tensor):
        raise DTypeError(f"interpolate: input must be a tensor, got {type(input).__name__}")
    check_category("interpolate", input.dtype, "real_floating")
    if antialias:
        raise NotSupportedError("interpolate: antialias=True is not implemented yet")
    sizes, scales, corners = interpolate_args(input, size, scale_factor, mode, align_corners, recompute_scale_factor)
    return implementation("interpolate", input.device)(input, sizes, scales, mode, corners)


def source_scale(size_in: int, size_out: int, scale, align_corners: bool) -> float:
    """The step in input coordinates between outputs (torch's area_pixel_compute_scale)."""
    if align_corners:
        return (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
    return scale if scale is not None else size_in / size_out


def _cubic(t: np.ndarray) -> list[np.ndarray]:
    a = CUBIC_A

    def near(s):
        return ((a + 2) * s - (a + 3)) * s * s + 1

    def far(s):
        return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def weight_matrix(size_in: int, size_out: int, scale, mode: str, align_corners: bool) -> np.ndarray:
    """The (size_out, size_in) float64 matrix of one spatial dim of the resampling."""
    m = np.zeros((size_out, size_in))
    o = np.arange(size_out)
    rows = o
    if mode == "area":
        start, end = adaptive_window(size_in, size_out)
        for i in range(size_out):
            m[i, start[i]:end[i]] = 1.0 / (end[i] - start[i])
        return m
    step = source_scale(size_in, size_out, scale, align_corners)
    if mode in ("nearest", "nearest-exact"):
        # float32 products as torch computes them, so ties fall the same way
        shift = np.float32(0.5 if mode == "nearest-exact" else 0.0)
        src = np.floor((o.astype(np.float32) + shift) * np.float32(step)).astype(np.int64)
        m[rows, np.minimum(src, size_in - 1)] = 1.0
        return m
    src = o * step if align_corners else (o + 0.5) * step - 0.5
    if mode == "bicubic":
        i0 = np.floor(src).astype(np.int64)
        for j, w in enumerate(_cubic(src - i0)):
            np.add.at(m, (rows, np.clip(i0 - 1 + j, 0, size_in - 1)), w)
        return m
    src = np.maximum(src, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), size_in - 1)
    i1 = np.minimum(i0 + 1, size_in - 1)
    frac = src - i0
    np.add.at(m, (rows, i0), 1.0 - frac)
    np.add.at(m, (rows, i1), frac)
    return m


def resample(x: Tensor, sizes, scales, mode: str, align_corners: bool, precision=reference.NATIVE) -> np.ndarray:
    """x resampled to sizes from the normalized arguments (interpolate_args)."""
    dtype = oracle_dtype(x.dtype) if precision == reference.FLOAT64 else compute_dtype(x.dtype)
    a = x.numpy().astype(dtype, copy=False)
    for d, (s_out, scale) in enumerate(zip(sizes, scales)):
        axis = 2 + d
        m = weight_matrix(a.shape[axis], s_out, scale, mode, align_corners).astype(dtype)
        a = np.moveaxis(np.tensordot(a, m, axes=([axis], [1])), -1, axis)
    return a


def _interpolate_reference(x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                           recompute_scale_factor=None, precision=reference.NATIVE):
    sizes, scales, corners = interpolate_args(x, size, scale_factor, mode, align_corners, recompute_scale_factor)
    return resample(x, sizes, scales, mode, corners, precision)


reference.register("interpolate", _interpolate_reference)


@register("interpolate", "cpu")
def _interpolate_cpu(x, sizes, scales, mode, align_corners):
    return wrap(resample(x, sizes, scales, mode, align_corners), x.dtype)


__all__ = ["interpolate"]
