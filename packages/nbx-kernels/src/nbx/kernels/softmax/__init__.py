"""softmax, log_softmax and scaled_masked_softmax over any dim, for rows of any length.

The reduced dim is read in place through its stride (rows.py); a row that fits max_block_n is one
pass, a longer one is walked twice by its program or, when the rows are too few to fill the
device, split over programs (kernel.py). Half types compute in fp32. Each call's
cost (output, the partials of split rows, any contiguous copy) is declared from the same plan the
launch follows.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

from nbx.core import dtypes, layout as core_layout
from nbx.core.dtypes import DType
from nbx.core.tensor import Tensor

from .. import launch
from ..cost import LAUNCH, Buffer, Cost, declares
from ..registry import implements
from ..types import compute_type
from .kernel import (ADDITIVE_MASK, KEEP_MASK, NO_MASK, chunk_stats_kernel, chunk_write_kernel,
                     softmax_rows_kernel)
from . import tuning
from .rows import (SPLIT, Blocks, Rows, as_rows, blocks, contiguous_strides, is_strided, pow2_at_least, row_path,
                   wide_columns)

FLOPS_PER_ELEMENT = 5   # scale or mask, max, subtract, exp, sum, divide: about five a pass


def work_dtype(dtype: DType) -> DType:
    """The dtype of a kernel's statistics: float64 for float64, else float32."""
    return dtypes.float64 if dtype is dtypes.float64 else dtypes.float32


def float_bits(value: float) -> int:
    """A Python float as the int64 of its float64 bits (see rows.float_argument)."""
    return struct.unpack("<q", struct.pack("<d", float(value)))[0]


@dataclass(frozen=True)
class Plan:
    layout: Rows               # after any copy
    tile: Blocks
    path: str                  # rows.ONE_PASS, LOOPED or SPLIT
    copies: tuple[str, ...]    # inputs read through a contiguous copy ("x", "mask")
    part_dtype: DType          # the partials of split rows


@lru_cache(maxsize=4096)
def _plan(shape, x_strides, dtype: DType, dim: int, mask_strides, device, setting) -> Plan:
    out_strides = contiguous_strides(shape)
    strides = [x_strides, out_strides] + ([mask_strides] if mask_strides is not None else [])
    layout = as_rows(shape, strides, dim)
    copies: tuple[str, ...] = ()
    if layout is None:  # row dims that do not collapse: every input is read through a dense copy
        copies = ("x",) + (("mask",) if mask_strides is not None else ())
        layout = as_rows(shape, [out_strides] * len(strides), dim)
    strided = is_strided(layout)
    if setting is None:  # certified for the launch key (the device file's tile on interp)
        setting = tuning.row_setting(tuning.SOFTMAX, device, layout.rows, layout.n, dtype, strided)
    tile = blocks(layout.rows, layout.n, strided, {**launch.tiles("softmax", device), **dict(setting)})
    return Plan(layout, tile, row_path(tile, device), copies, work_dtype(dtype))


def plan(x: Tensor, dim: int, mask: Tensor | None = None, setting=None) -> Plan:
    """The launch of softmax over dim of x (mask broadcast to x), kept per layout: a call site that
    repeats its shapes pays for the planning once. setting overrides the served one (the certifier's)."""
    return _plan(tuple(x.shape), tuple(x.strides), x.dtype, dim, None if mask is None else tuple(mask.strides),
                 x.device, launch.setting_key(setting))


class _Site:
    """A call site of launch_softmax: its plan's copies and partials, and its kernels' launches with
    every argument its key decides, so that a repeat allocates and replays (launch.CallSite)."""

    __slots__ = ("copies", "part_shape", "part_dtype", "launches")

    def __init__(self, x: Tensor, dim: int, log: bool, scaled: bool, mask: Tensor | None, setting):
        device = x.device
        p = plan(x, core_layout.normalize_dim(dim, x.ndim), mask, setting)
        lay, tile = p.layout, p.tile
        self.copies, self.part_dtype = p.copies, p.part_dtype
        mask_strides = lay.strides[2] if mask is not None else (0, 0, 0, 0)
        mask_kind = NO_MASK if mask is None else (KEEP_MASK if mask.dtype.kind == "bool" else ADDITIVE_MASK)
        flags = dict(SCALED=scaled, MASK_KIND=mask_kind, COMPUTE=compute_type(x.dtype), BLOCK_ROWS=tile.block_rows,
                     BLOCK_N=tile.block_n, WIDE=wide_columns(lay), num_warps=tile.num_warps)
        strides = (*lay.strides[0], *lay.strides[1], *mask_strides)
        b1, b2 = lay.batch[1], lay.batch[2]
        if p.path != SPLIT:  # x, out, mask
            self.part_shape = None
            self.launches = (launch.site(softmax_rows_kernel, (tile.row_tiles,), device, 3,
                                         (lay.rows, lay.n, b1, b2, *strides), LOG=log, ONE_PASS=tile.chunks == 1,
                                         **flags),)
            return
        self.part_shape = (2, lay.rows, tile.chunks)
        grid = (tile.row_tiles * tile.chunks,)
        part_block = min(pow2_at_least(tile.chunks), tile.block_rows * tile.block_n)  # partials read at once
        self.launches = (  # x, mask, partials; then x, out, mask, partials
            launch.site(chunk_stats_kernel, grid, device, 3,
                        (lay.rows, lay.n, tile.chunks, b1, b2, *lay.strides[0], *mask_strides), **flags),
            launch.site(chunk_write_kernel, grid, device, 4, (lay.rows, lay.n, tile.chunks, b1, b2, *strides),
                        LOG=log, PART_BLOCK=part_block, **flags))


_SITES = launch.Sites()


def launch_softmax(x: Tensor, dim: int, log: bool = False, scale: float = 1.0, mask: Tensor | None = None,
                   out: Tensor | None = None, setting=None) -> Tensor:
    """Softmax of x over dim into out (a new tensor, or a given contiguous one of x's shape and dtype);
    setting overrides the served (certified) one: the certifier launches this very path with it.

    The launches are kept per call site: by x's layout, dim, log, mask's layout and dtype, and
    whether there is a scale and the width of its bits (its value is an argument of every call)."""
    device = x.device
    out = launch.output(x.shape, x.dtype, device, out)
    if x.size == 0:
        return out
    bits = float_bits(scale)
    key = (x.shape, x.strides, x.dtype, device, dim, log, scale != 1.0, launch.int_width(bits),
           None if mask is None else (mask.strides, mask.dtype), launch.setting_key(setting))
    site = _SITES.get(key) or _SITES.remember(key, _Site(x, dim, log, scale != 1.0, mask, setting))
    if "x" in site.copies:
        x = x.contiguous()
    if mask is not None and "mask" in site.copies:
        mask = mask.contiguous()
    mask_arg = x if mask is None else mask  # never read without a mask
    if site.part_shape is None:
        site.launches[0].launch((x, out, mask_arg), bits)
        return out
    part = launch.output(site.part_shape, site.part_dtype, device)
    site.launches[0].launch((x, mask_arg, part), bits)
    site.launches[1].launch((x, out, mask_arg, part), bits)
    return out


def softmax_cost(x: Tensor, dim: int = -1, mask: Tensor | None = None) -> Cost:
    """The output; a second read of x for rows longer than the tile, and the partials when they are
    split over programs; any dense copy."""
    n = x.size
    item = x.dtype.itemsize
    buffers = [Buffer("out", n * item)]
    if n == 0:
        return Cost(tuple(buffers), 0, 0)
    p = plan(x, core_layout.normalize_dim(dim, x.ndim), mask)
    mask_bytes = 0 if mask is None else n * mask.dtype.itemsize
    moved = 0
    if "x" in p.copies:
        buffers.append(Buffer("x_contiguous", n * item, LAUNCH))
        moved += 2 * n * item
    if "mask" in p.copies:
        buffers.append(Buffer("mask_contiguous", mask_bytes, LAUNCH))
        moved += 2 * mask_bytes
    passes = 1 if p.tile.chunks == 1 else 2
    moved += passes * (n * item + mask_bytes) + n * item
    launches = 1 + len(p.copies)
    if p.path == SPLIT:
        part_bytes = 2 * p.layout.rows * p.tile.chunks * p.part_dtype.itemsize
        buffers.append(Buffer("partials", part_bytes, LAUNCH))
        moved += part_bytes + part_bytes * p.tile.chunks  # written once, read by each piece of its row
        launches += 1
    return Cost(tuple(buffers), moved, passes * FLOPS_PER_ELEMENT * n, launches)


def _broadcast_mask(x: Tensor, mask):
    return None if mask is None else mask.broadcast_to(x.shape)


@implements("softmax")
def _softmax(x: Tensor, dim: int) -> Tensor:
    return launch_softmax(x, dim)


@implements("log_softmax")
def _log_softmax(x: Tensor, dim: int) -> Tensor:
    return launch_softmax(x, dim, log=True)


@implements("scaled_masked_softmax")
def _scaled_masked_softmax(x: Tensor, scale: float, mask, dim: int) -> Tensor:
    return launch_softmax(x, dim, scale=scale, mask=mask)


declares("softmax")(lambda x, dim=-1: softmax_cost(x, dim))
declares("log_softmax")(lambda x, dim=-1: softmax_cost(x, dim))
declares("scaled_masked_softmax")(
    lambda x, scale=1.0, mask=None, dim=-1: softmax_cost(x, dim, _broadcast_mask(x, mask)))

__all__ = ["launch_softmax", "softmax_cost", "plan", "work_dtype", "float_bits"]
