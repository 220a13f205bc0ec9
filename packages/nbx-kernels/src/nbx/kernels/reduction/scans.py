"""Launching the scans: cumsum, cumprod (scan_kernel) and cummax, cummin (running_extreme_kernel).

The scanned dim is the column axis; the input is read in place unless its kept dims do not
collapse to two (then through a contiguous copy, declared in the cost). The output is a new
contiguous tensor of the input's shape, written through its own strides.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from nbx.core import dtypes
from nbx.core.layout import contiguous_strides
from nbx.core.dtypes import DType
from nbx.core.tensor import Tensor

from .. import launch
from ..cost import LAUNCH, Buffer, Cost
from ..types import tl_type
from . import layout
from .combine import Code as C
from .launches import accumulator, comparison_dtype, extreme_identity, settings
from .scan_kernels import running_extreme_kernel, scan_kernel


@dataclass(frozen=True)
class ScanPlan:
    x_view: layout.Rows
    out_view: layout.Rows
    copy: bool
    block_r: int
    block_c: int
    settings: dict


def plan(x: Tensor, dim: int) -> ScanPlan:
    s = settings(x.device)
    return _plan(x.shape if x.ndim else (1,), x.strides if x.ndim else (1,), dim, tuple(sorted(s.items())))


@functools.lru_cache(maxsize=1024)
def _plan(shape, x_strides, dim: int, settings_items) -> ScanPlan:
    out_strides = contiguous_strides(shape)
    x_view, out_view = layout.scan_plan(shape, x_strides, out_strides, dim)
    copy = x_view is None
    if copy:  # read a contiguous copy: it shares the output's strides, which always collapse
        x_view, out_view = layout.scan_plan(shape, out_strides, out_strides, dim)
    s = dict(settings_items)
    t = layout.tile(x_view, s, split=False)
    return ScanPlan(x_view, out_view, copy, t.block_r, t.block_c, s)


def _launch(kernel, x: Tensor, dim: int, outputs: list[Tensor], op: int, identity, acc: DType) -> None:
    p = plan(x, dim)
    if x.size == 0:
        return
    src = x.contiguous() if p.copy else x
    v, o = p.x_view, p.out_view
    launch.run(kernel, (layout.cdiv(v.rows, p.block_r),), x.device, src, *outputs, v.rows, v.cols,
               v.inner, v.stride0, v.stride1, v.col_stride, o.stride0, o.stride1, o.col_stride,
               OP=op, IDENTITY=identity, ACC=tl_type(acc), BLOCK_R=p.block_r, BLOCK_C=p.block_c,
               num_warps=p.settings["num_warps"])


def accumulating_scan(x: Tensor, dim: int, out_dtype: DType, op: int) -> Tensor:
    """cumsum (op ADD) or cumprod (MUL) along dim into a new tensor of out_dtype."""
    tl_type(x.dtype)
    out = launch.output(x.shape, out_dtype, x.device)
    acc = accumulator(out_dtype)
    _launch(scan_kernel, x, dim, [out], op, 0 if op == C.ADD else 1, acc)
    return out


def running_extreme(x: Tensor, dim: int, op: int) -> tuple[Tensor, Tensor]:
    """cummax (op MAX) or cummin (MIN): the running extreme and the index holding it."""
    tl_type(x.dtype)
    values = launch.output(x.shape, x.dtype, x.device)
    index = launch.output(x.shape, dtypes.INDEX, x.device)
    acc = comparison_dtype(x.dtype)
    _launch(running_extreme_kernel, x, dim, [values, index], op, extreme_identity(acc, op), acc)
    return values, index


def scan_cost(x: Tensor, dim: int, outputs: list[tuple[str, DType]]) -> Cost:
    p = plan(x, dim)
    n = x.size
    buffers = [Buffer(name, n * dt.itemsize) for name, dt in outputs]
    moved = n * x.itemsize + sum(b.nbytes for b in buffers)
    launches = 1 if n else 0
    if p.copy and n:
        buffers.append(Buffer("contiguous copy", n * x.itemsize, LAUNCH))
        moved, launches = moved + 2 * n * x.itemsize, 2
    return Cost(tuple(buffers), moved, n, launches)
