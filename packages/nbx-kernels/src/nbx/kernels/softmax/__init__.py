"""softmax, log_softmax and scaled_masked_softmax over any dim, for rows of any length.

The reduced dim is read in place through its stride (nbx/kernels/rows.py); a row that fits max_block_n is one
pass, a longer one is walked twice by its program or, when the rows are too few to fill the
device, split over programs (kernel.py). Half types compute in fp32. Each call's
cost (output, the partials of split rows, any contiguous copy) is declared from the same plan the
launch follows.
"""
from __future__ import annotations

from dataclasses import dataclass

from nbx.core.spec import Arg, Slots
from nbx.core import layout as core_layout
from nbx.core.dtypes import DType, statistics_dtype
from nbx.core.ops.nn import operand
from nbx.core.tensor import Tensor

from .. import launch, plans
from ..cost import LAUNCH, Buffer, Cost, declares
from ..plans import Launch, LaunchPlan, Slot
from ..registry import implements
from ..types import compute_type
from .kernel import (ADDITIVE_MASK, KEEP_MASK, NO_MASK, chunk_stats_kernel, chunk_write_kernel,
                     softmax_rows_kernel)
from . import tuning
from ..rows import (SPLIT, Blocks, Rows, as_rows, blocks, contiguous_strides, float_bits, is_strided, pow2_at_least,
                    row_path, wide_columns)

FLOPS_PER_ELEMENT = 5   # scale or mask, max, subtract, exp, sum, divide: about five a pass


@dataclass(frozen=True)
class Plan:
    layout: Rows               # after any copy
    tile: Blocks
    path: str                  # rows.ONE_PASS, LOOPED or SPLIT
    copies: tuple[str, ...]    # inputs read through a contiguous copy ("x", "mask")
    part_dtype: DType          # the partials of split rows


def _decide(shape, x_strides, dtype: DType, dim: int, mask_strides, device, setting) -> Plan:
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
    return Plan(layout, tile, row_path(tile, device), copies, statistics_dtype(dtype))


def _build(shape, x_strides, dtype: DType, device, dim: int, log: bool, scaled: bool, mask_strides, mask_dtype,
           setting) -> LaunchPlan:
    """The launches of softmax over dim: one row launch, or, for split rows, partials then a write."""
    p = _decide(shape, x_strides, dtype, dim, mask_strides, device, setting)
    lay, tile = p.layout, p.tile
    mask_st = lay.strides[2] if mask_strides is not None else (0, 0, 0, 0)
    mask_kind = NO_MASK if mask_dtype is None else (KEEP_MASK if mask_dtype.kind == "bool" else ADDITIVE_MASK)
    flags = dict(SCALED=scaled, MASK_KIND=mask_kind, COMPUTE=compute_type(dtype), BLOCK_ROWS=tile.block_rows,
                 BLOCK_N=tile.block_n, WIDE=wide_columns(lay), num_warps=tile.num_warps)
    strides = (*lay.strides[0], *lay.strides[1], *mask_st)
    rows = (lay.rows, lay.n, lay.batch[1], lay.batch[2])
    x, out, bits = Slot("x"), Slot("out"), Slot("scale_bits")
    mask = x if mask_dtype is None else Slot("mask")  # without a mask, x's pointer (never read)
    outputs = (plans.output("out", shape, dtype),)
    if p.path != SPLIT:
        return LaunchPlan(device, (Launch(softmax_rows_kernel, (tile.row_tiles,), (x, out, mask, *rows, *strides, bits),
                                          dict(LOG=log, ONE_PASS=tile.chunks == 1, **flags)),),
                          outputs, (), p.copies, p)
    grid = (tile.row_tiles * tile.chunks,)
    part_block = min(pow2_at_least(tile.chunks), tile.block_rows * tile.block_n)  # partials read at once
    part = Slot("partials")
    fixed = (lay.rows, lay.n, tile.chunks, *rows[2:])
    return LaunchPlan(device, (
        Launch(chunk_stats_kernel, grid, (x, mask, part, *fixed, *lay.strides[0], *mask_st, bits), flags),
        Launch(chunk_write_kernel, grid, (x, out, mask, part, *fixed, *strides, bits),
               dict(LOG=log, PART_BLOCK=part_block, **flags))),
        outputs, (plans.workspace("partials", (2, lay.rows, tile.chunks), p.part_dtype),), p.copies, p)


def launch_plan(x: Tensor, dim: int, log: bool = False, scaled: bool = False, mask: Tensor | None = None,
                setting=None) -> LaunchPlan:
    """The plan of softmax over dim (normalized) of x, mask broadcast to x; setting overrides the
    served one (the certifier's). Kept per layout: a call site that repeats its shapes plans once."""
    mask_strides, mask_dtype = (None, None) if mask is None else (mask.strides, mask.dtype)
    signature = (x.shape, x.strides, x.dtype, x.device, dim, log, scaled, mask_strides, mask_dtype,
                 plans.setting_key(setting))
    return plans.cached("softmax", signature, lambda: _build(x.shape, x.strides, x.dtype, x.device, dim, log, scaled,
                                                            mask_strides, mask_dtype, setting))


def plan(x: Tensor, dim: int, mask: Tensor | None = None, setting=None) -> Plan:
    """The decisions (layout, tile, path, copies) of softmax over dim of x."""
    return launch_plan(x, core_layout.normalize_dim(dim, x.ndim), mask=mask, setting=setting).detail


def launch_softmax(x: Tensor, dim: int, log: bool = False, scale: float = 1.0, mask: Tensor | None = None,
                   out: Tensor | None = None, setting=None) -> Tensor:
    """Softmax of x over dim into out (a new tensor, or a given contiguous one of x's shape and dtype);
    setting overrides the served (certified) one: the certifier launches this very path with it.
    scale's value is an argument of every call (as its float64 bits: rows.float_argument)."""
    if out is not None or x.size == 0:
        out = launch.output(x.shape, x.dtype, x.device, out)
        if x.size == 0:
            return out
    p = launch_plan(x, core_layout.normalize_dim(dim, x.ndim), log, scale != 1.0, mask, setting)
    return plans.execute(p, {"x": x, "out": out, "mask": mask, "scale_bits": float_bits(scale)})["out"]


def softmax_cost(x: Tensor, dim: int = -1, mask: Tensor | None = None) -> Cost:
    """The plan's output and partials (of rows split over programs); a second read of x for rows
    longer than the tile; any dense copy."""
    n = x.size
    item = x.dtype.itemsize
    if n == 0:
        return Cost((Buffer("out", n * item),), 0, 0)
    lp = launch_plan(x, core_layout.normalize_dim(dim, x.ndim), mask=mask)
    p = lp.detail
    mask_bytes = 0 if mask is None else n * mask.dtype.itemsize
    buffers, moved = [b.buffer() for b in lp.outputs], 0
    if "x" in p.copies:
        buffers.append(Buffer("x_contiguous", n * item, LAUNCH))
        moved += 2 * n * item
    if "mask" in p.copies:
        buffers.append(Buffer("mask_contiguous", mask_bytes, LAUNCH))
        moved += 2 * mask_bytes
    passes = 1 if p.tile.chunks == 1 else 2
    moved += passes * (n * item + mask_bytes) + n * item
    for part in lp.workspace:  # the partials: written once, read by each piece of its row
        buffers.append(part.buffer())
        moved += part.nbytes + part.nbytes * p.tile.chunks
    return Cost(tuple(buffers), moved, passes * FLOPS_PER_ELEMENT * n, len(lp.launches) + len(p.copies))


def _broadcast_mask(x: Tensor, mask):
    return None if mask is None else mask.broadcast_to(x.shape)


def _softmax_op(log: bool):
    def run(call) -> Tensor:
        return launch_softmax(operand(call), call.row_dim, log=log)

    def prepare(call):
        """A signature's repeats: its plan's launcher, scale 1, no mask."""
        if call.x.dtype is not call.out_dtype or call.x.size == 0:
            return None
        execute = plans.prepared(launch_plan(call.x, call.row_dim, log))
        if execute is None:
            return None
        return Slots(execute, {"x": Arg("x"), "out": None, "mask": None, "scale_bits": _ONE_BITS}, "out")
    run.prepare = prepare
    return run


_ONE_BITS = float_bits(1.0)
implements("softmax")(_softmax_op(False))
implements("log_softmax")(_softmax_op(True))


@implements("scaled_masked_softmax")
def _scaled_masked_softmax(x: Tensor, scale: float, mask, dim: int) -> Tensor:
    return launch_softmax(x, dim, scale=scale, mask=mask)


declares("softmax")(lambda call: softmax_cost(call.x, call.row_dim))
declares("log_softmax")(lambda call: softmax_cost(call.x, call.row_dim))
declares("scaled_masked_softmax")(
    lambda x, scale=1.0, mask=None, dim=-1: softmax_cost(x, dim, _broadcast_mask(x, mask)))

__all__ = ["launch_softmax", "softmax_cost", "plan", "launch_plan"]
