"""Launching the scans: cumsum, cumprod (scan_kernel) and cummax, cummin (running_extreme_kernel).

The scanned dim is the column axis; the input is read in place unless its kept dims do not
collapse to two (then through a contiguous copy, declared in the cost). The output is a new
contiguous tensor of the input's shape, written through its own strides.
"""
from __future__ import annotations

from dataclasses import dataclass

from nbx.core import dtypes
from nbx.core.layout import contiguous_strides
from nbx.core.dtypes import DType, computes_in
from nbx.core.tensor import Tensor

from .. import launch, plans
from ..cost import LAUNCH, Buffer, Cost
from ..plans import Launch, LaunchPlan, Slot
from ..types import tl_type
from . import layout
from .combine import Code as C
from .launches import accumulator, extreme_identity
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
    shape, x_strides = (x.shape, x.strides) if x.ndim else ((1,), (1,))
    out_strides = contiguous_strides(shape)
    x_view, out_view = layout.scan_plan(shape, x_strides, out_strides, dim)
    copy = x_view is None
    if copy:  # read a contiguous copy: it shares the output's strides, which always collapse
        x_view, out_view = layout.scan_plan(shape, out_strides, out_strides, dim)
    s = launch.tiles("reduction", x.device)
    t = layout.tile(x_view, s, split=False)
    return ScanPlan(x_view, out_view, copy, t.block_r, t.block_c, s)


def _scan_plan(kernel, x: Tensor, dim: int, outputs: tuple, op: int, identity, acc: DType) -> LaunchPlan:
    p = plan(x, dim)
    v, o = p.x_view, p.out_view
    launches = () if x.size == 0 else (Launch(kernel, (layout.cdiv(v.rows, p.block_r),), (
        Slot("x"), *(Slot(b.name) for b in outputs), v.rows, v.cols, v.inner, v.stride0, v.stride1, v.col_stride,
        o.stride0, o.stride1, o.col_stride), dict(OP=op, IDENTITY=identity, ACC=tl_type(acc), BLOCK_R=p.block_r,
                                                  BLOCK_C=p.block_c, num_warps=p.settings["num_warps"])),)
    return LaunchPlan(x.device, launches, outputs, (), ("x",) if p.copy and launches else (), p)


def _scan(kernel, x: Tensor, dim: int, outputs: tuple, op: int, identity, acc: DType) -> dict:
    tl_type(x.dtype)
    key = (x.shape, x.strides, x.dtype, x.device, dim, kernel, outputs, op)
    lp = plans.cached("scan", key, lambda: _scan_plan(kernel, x, dim, outputs, op, identity, acc))
    return plans.execute(lp, {"x": x})


def accumulating_scan(x: Tensor, dim: int, out_dtype: DType, op: int) -> Tensor:
    """cumsum (op ADD) or cumprod (MUL) along dim into a new tensor of out_dtype."""
    return _scan(scan_kernel, x, dim, (plans.output("out", x.shape, out_dtype),), op, 0 if op == C.ADD else 1,
                 accumulator(out_dtype))["out"]


def running_extreme(x: Tensor, dim: int, op: int) -> tuple[Tensor, Tensor]:
    """cummax (op MAX) or cummin (MIN): the running extreme and the index holding it."""
    acc = computes_in(x.dtype)
    values = _scan(running_extreme_kernel, x, dim, (plans.output("values", x.shape, x.dtype),
                                                    plans.output("indices", x.shape, dtypes.INDEX)),
                   op, extreme_identity(acc, op), acc)
    return values["values"], values["indices"]


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
