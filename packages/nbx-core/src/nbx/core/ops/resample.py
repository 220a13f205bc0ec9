"""interpolate, spelled as torch.nn.functional.interpolate(input, size=None, scale_factor=None,
mode='nearest', align_corners=None, recompute_scale_factor=None, antialias=False).

Modes: nearest, nearest-exact, linear (3-D input), bilinear and bicubic (4-D), trilinear (5-D),
area (adaptive average pooling). The output size is size, else floor(input size * scale_factor);
the source coordinate of output o uses 1 / scale_factor when a scale_factor is given and
recompute_scale_factor is not True, else input size / output size (torch's rule). Every mode is
separable: the reference applies one (output, input) weight matrix per spatial dim, in float64 for
the oracle. antialias is refused by name.

grid_sample(input, grid, mode='bilinear', padding_mode='zeros', align_corners=None), as torch:
input (N, C, H, W), grid (N, Ho, Wo, 2) of (x, y) in [-1, 1]; -1 and 1 are the corner pixels'
centres (align_corners) or their outer edges; 'zeros' reads 0 outside, 'border' clips the source
coordinate, 'reflection' reflects it about the edges (the centres with align_corners, else the
outer edges) and then clips. The source coordinates are computed in float32 (float64 for a float64
input), as torch's kernels compute them, so nearest's rounding (half to even) falls the same way in
the oracle; the bilinear weights and the sums in float64 there.
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
    if recompute_scale_factor and size is not None:
        raise ArgumentError("interpolate: recompute_scale_factor is not meaningful with an explicit size (as torch)")
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


GRID_MODES = ("bilinear", "nearest")
GRID_PADDING = ("zeros", "border", "reflection")


def grid_sample_args(input: Tensor, grid: Tensor, mode: str, padding_mode: str, align_corners):
    """(mode, padding_mode, align_corners), checked; a named error for what grid_sample refuses."""
    for role, t in (("input", input), ("grid", grid)):
        if not isinstance(t, Tensor):
            raise DTypeError(f"grid_sample: {role} must be a tensor, got {type(t).__name__}")
        check_category(f"grid_sample ({role})", t.dtype, "real_floating")
    if grid.dtype is not input.dtype:
        raise DTypeError(f"grid_sample: grid is {grid.dtype.name}, input is {input.dtype.name} (they must match, "
                         f"as torch)")
    if mode == "bicubic" or input.ndim == 5:
        raise NotSupportedError(f"grid_sample: {'bicubic' if mode == 'bicubic' else 'a 5-D (volumetric) input'} "
                                f"is not implemented yet (2-D bilinear and nearest are)")
    if mode not in GRID_MODES:
        raise ArgumentError(f"grid_sample: mode {mode!r} is none of {GRID_MODES}")
    if padding_mode not in GRID_PADDING:
        raise ArgumentError(f"grid_sample: padding_mode {padding_mode!r} is none of {GRID_PADDING}")
    if input.ndim != 4 or grid.ndim != 4 or grid.shape[3] != 2 or grid.shape[0] != input.shape[0]:
        raise ShapeError(f"grid_sample takes input (N, C, H, W) and grid (N, Ho, Wo, 2) of the same N; got "
                         f"{tuple(input.shape)} and {tuple(grid.shape)}")
    if min(input.shape[2:]) < 1:
        raise ShapeError(f"grid_sample: input {tuple(input.shape)} has no pixel to sample")
    from ._common import common_device
    common_device(input, grid)
    return mode, padding_mode, bool(align_corners)


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners=None) -> Tensor:
    """torch.nn.functional.grid_sample of a 4-D input (see the module's text); align_corners None is
    False, as torch. A channels-last input gives a channels-last output."""
    mode, padding_mode, corners = grid_sample_args(input, grid, mode, padding_mode, align_corners)
    return implementation("grid_sample", input.device)(input, grid, mode, padding_mode, corners)


def _reflect(coord: np.ndarray, twice_low: int, twice_high: int) -> np.ndarray:
    """torch's reflect_coordinates: coord reflected into [twice_low / 2, twice_high / 2]."""
    t = coord.dtype.type
    if twice_low == twice_high:
        return np.zeros_like(coord)
    low, span = t(twice_low / 2), t((twice_high - twice_low) / 2)
    distance = np.abs(coord - low)
    flips = np.floor(distance / span)
    extra = distance - flips * span
    return np.where(flips % 2 == 0, extra + low, span - extra + low)


def grid_source(g: np.ndarray, size: int, padding_mode: str, align_corners: bool) -> np.ndarray:
    """The source coordinate (in g's dtype, pixel units) of normalized grid values g along a dim
    of size pixels (torch's grid_sampler_compute_source_index)."""
    t = g.dtype.type
    if align_corners:
        coord = (g + t(1)) * t(0.5) * t(size - 1)
    else:
        coord = ((g + t(1)) * t(size) - t(1)) * t(0.5)
    if padding_mode == "reflection":
        coord = _reflect(coord, 0, 2 * (size - 1)) if align_corners else _reflect(coord, -1, 2 * size - 1)
    if padding_mode != "zeros":
        coord = np.clip(coord, t(0), t(size - 1))
    return coord


def _grid_sample_reference(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None,
                           precision=reference.NATIVE):
    mode, padding_mode, corners = grid_sample_args(input, grid, mode, padding_mode, align_corners)
    dtype = oracle_dtype(input.dtype) if precision == reference.FLOAT64 else compute_dtype(input.dtype)
    coord_dtype = np.float64 if input.dtype.name == "float64" else np.float32
    a = input.numpy().astype(dtype, copy=False)
    g = grid.numpy().astype(coord_dtype)
    height, width = a.shape[2:]
    with np.errstate(all="ignore"):
        ix = grid_source(g[..., 0], width, padding_mode, corners)
        iy = grid_source(g[..., 1], height, padding_mode, corners)
    batch = np.arange(a.shape[0])[:, None, None]

    def tap(yi, xi):  # (N, C, Ho, Wo) values at integer positions, 0 outside
        inside = (xi >= 0) & (xi < width) & (yi >= 0) & (yi < height)
        v = a[batch, :, np.clip(yi, 0, height - 1), np.clip(xi, 0, width - 1)]  # (N, Ho, Wo, C)
        return np.moveaxis(np.where(inside[..., None], v, 0), -1, 1)
    if mode == "nearest":
        return tap(np.rint(iy).astype(np.int64), np.rint(ix).astype(np.int64))  # half to even, as nearbyint
    x0, y0 = np.floor(ix), np.floor(iy)
    fx, fy = (ix - x0).astype(dtype)[:, None], (iy - y0).astype(dtype)[:, None]
    x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
    return (tap(y0, x0) * (1 - fx) * (1 - fy) + tap(y0, x0 + 1) * fx * (1 - fy)
            + tap(y0 + 1, x0) * (1 - fx) * fy + tap(y0 + 1, x0 + 1) * fx * fy)


reference.register("interpolate", _interpolate_reference)
reference.register("grid_sample", _grid_sample_reference)


@register("grid_sample", "cpu")
def _grid_sample_cpu(input, grid, mode, padding_mode, align_corners):
    return wrap(_grid_sample_reference(input, grid, mode, padding_mode, align_corners), input.dtype)


@register("interpolate", "cpu")
def _interpolate_cpu(x, sizes, scales, mode, align_corners):
    return wrap(resample(x, sizes, scales, mode, align_corners), x.dtype)


__all__ = ["interpolate", "grid_sample"]
