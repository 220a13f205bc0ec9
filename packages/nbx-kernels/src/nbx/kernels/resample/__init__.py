"""interpolate on the resampling kernel (resample/kernel.py): nearest, nearest-exact, linear,
bilinear, trilinear and bicubic in one launch; area is adaptive average pooling (the pool family's
window kernel). grid_sample (bilinear, nearest; zeros, border, reflection) on its own kernel: a
program a tile of output pixels by channels. The output keeps the input's layout; tiles: the
device file's tiles.window (its long side along the contiguous dim).
"""
from __future__ import annotations

from math import prod

import numpy as np

from nbx.core.dispatch import implementation
from nbx.core.ops.resample import source_scale

from .. import plans
from ..conv import check_dtype, is_channels_last, storage_layout, three, window_tile
from ..cost import Cost, declares, price
from ..plans import Launch, LaunchPlan, Slot
from ..registry import implements
from .kernel import BORDER, CUBIC, LINEAR, NEAREST, NEAREST_EXACT, REFLECTION, ZEROS, grid_sample_kernel, resample_kernel

MODES = {"nearest": (NEAREST, 1), "nearest-exact": (NEAREST_EXACT, 1), "linear": (LINEAR, 2),
         "bilinear": (LINEAR, 2), "trilinear": (LINEAR, 2), "bicubic": (CUBIC, 4)}


def _plan(shape, strides, dtype, device, sizes, scales, mode: str, align_corners: bool) -> LaunchPlan:
    n = len(sizes)
    batch, channels = shape[0], shape[1]
    cl = is_channels_last(shape, strides)
    storage, o_strides, view = storage_layout(batch, channels, tuple(sizes), cl)
    kind, taps = MODES[mode]
    steps = three([float(np.float32(source_scale(shape[2 + d], sizes[d], scales[d], align_corners)))
                   for d in range(n)], 0.0)
    taps3 = three([taps] * n, 1)
    tile = window_tile(device, cl)
    outs3 = three(sizes, 1)
    args = (Slot("x"), Slot("out"), channels, *three(shape[2:], 1), *outs3, *steps,
            strides[0], strides[1], *three(strides[2:], 0), o_strides[0], o_strides[1], *three(o_strides[2:], 0))
    grid = (batch * outs3[0] * outs3[1], -(-outs3[2] // tile["block_w"]), -(-channels // tile["block_c"]))
    modes = three([kind] * n, NEAREST)
    meta = dict(MODE_D=modes[0], MODE_H=modes[1], MODE_W=modes[2], ALIGN=align_corners, TAPS_D=taps3[0], TAPS_H=taps3[1], TAPS_W=taps3[2],
                BLOCK_C=tile["block_c"], BLOCK_W=tile["block_w"], num_warps=tile["num_warps"])
    return LaunchPlan(device, (Launch(resample_kernel, grid, args, meta),), (plans.output("out", storage, dtype),),
                      detail=view)


def _cached(x, sizes, scales, mode, align_corners) -> LaunchPlan:
    key = (x.shape, x.strides, x.dtype, x.device, tuple(sizes), tuple(scales), mode, align_corners)
    return plans.cached("interpolate", key, lambda: _plan(x.shape, x.strides, x.dtype, x.device, sizes, scales, mode,
                                                          align_corners))


@implements("interpolate")
def _interpolate(x, sizes, scales, mode, align_corners):
    check_dtype("interpolate", x.dtype)
    if mode == "area":
        return implementation(f"adaptive_avg_pool{len(sizes)}d", x.device)(x, tuple(sizes))
    plan = _cached(x, sizes, scales, mode, align_corners)
    return plans.execute(plan, {"x": x})["out"].permute(*plan.detail)


@declares("interpolate")
def _interpolate_cost(x, sizes, scales, mode, align_corners) -> Cost:
    if mode == "area":
        return price(f"adaptive_avg_pool{len(sizes)}d", x, tuple(sizes))
    plan = _plan(x.shape, x.strides, x.dtype, x.device, sizes, scales, mode, align_corners)
    written = sum(b.nbytes for b in plan.buffers())
    taps = MODES[mode][1] ** len(sizes)
    return Cost(plan.buffers(), x.size * x.dtype.itemsize + written, 2 * taps * prod(plan.outputs[0].shape), 1)


# ---- grid_sample ------------------------------------------------------------------------------------

PADDINGS = {"zeros": ZEROS, "border": BORDER, "reflection": REFLECTION}


def _grid_plan(x, grid, mode: str, padding_mode: str, align_corners: bool) -> LaunchPlan:
    batch, channels, height, width = x.shape
    out_h, out_w = grid.shape[1:3]
    cl = is_channels_last(x.shape, x.strides)
    storage, o_strides, view = storage_layout(batch, channels, (out_h, out_w), cl)
    tile = window_tile(device := x.device, cl)
    # pixels by channels: a channels-last tile's long side (block_c after the swap) runs along C
    block_p, block_c = (tile["block_w"], tile["block_c"])
    args = (Slot("x"), Slot("grid"), Slot("out"), batch, channels, height, width, out_h, out_w, *x.strides,
            *grid.strides, *o_strides)
    grid_dims = (-(-batch * out_h * out_w // block_p), -(-channels // block_c))
    meta = dict(NEAREST_MODE=mode == "nearest", PADDING=PADDINGS[padding_mode], ALIGN=align_corners,
                BLOCK_P=block_p, BLOCK_C=block_c, num_warps=tile["num_warps"],
                enable_fp_fusion=False)  # coordinates rounded op by op, as the oracle: nearest's ties fall alike
    return LaunchPlan(device, (Launch(grid_sample_kernel, grid_dims, args, meta),),
                      (plans.output("out", storage, x.dtype),), detail=view)


def _grid_cached(x, grid, mode, padding_mode, align_corners) -> LaunchPlan:
    key = (x.shape, x.strides, x.dtype, grid.shape, grid.strides, x.device, mode, padding_mode, align_corners)
    return plans.cached("grid_sample", key, lambda: _grid_plan(x, grid, mode, padding_mode, align_corners))


@implements("grid_sample")
def _grid_sample(x, grid, mode, padding_mode, align_corners):
    check_dtype("grid_sample", x.dtype)
    plan = _grid_cached(x, grid, mode, padding_mode, align_corners)
    return plans.execute(plan, {"x": x, "grid": grid})["out"].permute(*plan.detail)


@declares("grid_sample")
def _grid_sample_cost(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False) -> Cost:
    plan = _grid_plan(x, grid, mode, padding_mode, bool(align_corners))
    written = sum(b.nbytes for b in plan.buffers())
    taps = 1 if mode == "nearest" else 4
    read = taps * written + grid.size * grid.dtype.itemsize  # each output reads its taps (gathers, often cached)
    return Cost(plan.buffers(), read + written, 2 * taps * prod(plan.outputs[0].shape), 1)
