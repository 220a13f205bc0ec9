"""Launching the reduction kernels: the plan of one call (shared with its cost), then one launch,
or two when long rows are split (partials, then a merge in range order).

A plan is computed from shapes, strides, dtypes and the device file's settings alone, so
nbx.kernels.price reports exactly the buffers a call allocates without touching memory.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from math import prod

import triton.language as tl

from nbx.core import dtypes
from nbx.core.dtypes import DType
from nbx.core.tensor import Tensor

from .. import launch
from ..cost import LAUNCH, Buffer, Cost
from ..types import tl_type
from . import layout, tuning
from .combine import Code as C
from .kernels import accumulate_kernel, extreme_index_kernel, logsumexp_kernel, moments_kernel


def accumulator(dtype: DType) -> DType:
    """What a sum into dtype accumulates in: int64 / uint64 for integers and bool, float64 for
    float64, float32 for every other float."""
    if dtype.kind in ("bool", "int"):
        return dtypes.int64
    if dtype.kind == "uint":
        return dtypes.uint64
    return dtypes.float64 if dtype is dtypes.float64 else dtypes.float32


def comparison_dtype(dtype: DType) -> DType:
    """max / min compare in the input's own dtype, the half and float8 types widened to float32 (exact)."""
    return dtypes.float32 if dtype.kind == "float" and dtype.itemsize < 4 else dtype


def extreme_identity(dtype: DType, op: int):
    """The value every element beats in a max (op MAX) or a min: -inf / +inf, or the integer bounds."""
    if dtype.kind == "float":
        return float("-inf") if op == C.MAX else float("inf")
    info = dtypes.iinfo(dtype)
    return int(info.min) if op == C.MAX else int(info.max)


def reduced_shape(shape, dims, keepdim: bool) -> tuple[int, ...]:
    dims = range(len(shape)) if dims is None else dims
    if keepdim:
        return tuple(1 if d in dims else s for d, s in enumerate(shape))
    return tuple(s for d, s in enumerate(shape) if d not in dims)


@dataclass(frozen=True)
class Plan:
    view: layout.Rows
    tile: layout.Tile
    merge: layout.Tile | None   # the second launch's tile, when rows are split
    out_shape: tuple[int, ...]
    settings: dict

    @property
    def merge_view(self) -> layout.Rows:
        """The partials as rows x splits, contiguous."""
        s = self.tile.splits
        return layout.Rows(self.view.rows, s, 1, s, 0, 1)

    def cost(self, x: Tensor, outputs: list[tuple[str, DType]], state: list[DType]) -> Cost:
        """outputs: (name, dtype) of each result; state: the dtypes of one partial state."""
        n_out, n_in = prod(self.out_shape), self.view.rows * self.view.cols
        buffers = [Buffer(name, n_out * dt.itemsize) for name, dt in outputs]
        moved, launches = n_in * x.itemsize + sum(b.nbytes for b in buffers), 1
        if self.view.copy is not None and n_out:
            buffers.append(Buffer("contiguous copy", n_in * x.itemsize, LAUNCH))
            moved, launches = moved + 2 * n_in * x.itemsize, launches + 1
        if self.merge is not None and n_out:
            partials = self.view.rows * self.tile.splits * sum(dt.itemsize for dt in state)
            buffers.append(Buffer("partials", partials, LAUNCH))
            moved, launches = moved + 2 * partials, launches + 1
        return Cost(tuple(buffers), moved, n_in, launches if n_out else 0)


_SETTINGS: dict = {}


def settings(device) -> dict:
    """tiles.reduction of the device file in force for device, read once per device (per call
    site cost: a reduction's host time is part of every decode step)."""
    found = _SETTINGS.get(device)
    if found is None:
        found = _SETTINGS[device] = dict(launch.tiles("reduction", device))
    return found


def plan(x: Tensor, dims, keepdim: bool, ordered: bool, setting=None) -> Plan:
    """ordered: the result depends on the order of the reduced dims (an index), so keep it.
    setting overrides the served (certified) one: the certifier launches this very path with it."""
    return _plan(x.shape, x.strides, None if dims is None else tuple(dims), keepdim, ordered, x.dtype, x.device,
                 launch.setting_key(setting))


@functools.lru_cache(maxsize=4096)
def _plan(shape, strides, dims, keepdim: bool, ordered: bool, dtype: DType, device, setting) -> Plan:
    view = layout.plan(shape, strides, dims, ordered)
    if setting is None:  # certified for the launch key (the device file's tile on interp)
        setting = tuning.setting(device, view, dtype)
    s = {**settings(device), **dict(setting)}
    tile = layout.tile(view, s)
    merge = None
    if tile.splits > 1:
        merge = layout.tile(layout.Rows(view.rows, tile.splits, 1, tile.splits, 0, 1), s, split=False)
    return Plan(view, tile, merge, reduced_shape(shape, dims, keepdim), s)


def _source(x: Tensor, view: layout.Rows) -> Tensor:
    """x itself, or its contiguous copy with the kept dims first (workspace of this call)."""
    return x if view.copy is None else x.permute(*view.copy).contiguous()


def _view_args(view: layout.Rows) -> tuple[int, ...]:
    return (view.rows, view.cols, *view.row_args, view.col_stride)


def _site(kernel, p: Plan, tile: layout.Tile, view: layout.Rows, device, n_tensors: int, n_splits: int, cols: bool,
          meta: dict) -> launch.CallSite:
    fixed = (*_view_args(view), tile.split_len, n_splits, *((p.view.cols,) if cols else ()))
    return launch.site(kernel, tile.grid(view.rows), device, n_tensors, fixed, BLOCK_R=tile.block_r,
                       BLOCK_C=tile.block_c, num_warps=p.settings["num_warps"], **meta)


class _Site:
    """A call site of a reduction: its plan and launches, with every argument its key decides (each
    op's: x's layout and dtype, the dims, the output dtype and the kernel's constants), replayed by its
    repeats. One launch over the rows (`whole`'s constants), or, when the plan splits them, one into
    partials (`partial`'s) and one over the partials (`merge`'s). cols: the kernel takes the reduced
    length after the split count."""

    __slots__ = ("plan", "launches")

    def __init__(self, kernel, p: Plan, device, n_tensors: int, cols: bool, whole: dict, partial: dict, merge: dict,
                 **meta):
        self.plan = p
        if p.merge is None:
            self.launches = (_site(kernel, p, p.tile, p.view, device, n_tensors, 1, cols, {**meta, **whole}),)
            return
        self.launches = (_site(kernel, p, p.tile, p.view, device, n_tensors, p.tile.splits, cols, {**meta, **partial}),
                         _site(kernel, p, p.merge, p.merge_view, device, n_tensors, 1, cols, {**meta, **merge}))


def _checked_plan(x: Tensor, dims, keepdim: bool, ordered: bool, setting=None) -> Plan:
    tl_type(x.dtype)  # a dtype no kernel takes is refused by name
    return plan(x, dims, keepdim, ordered, setting)


_SITES = launch.Sites()


def _key(x: Tensor, dims, keepdim: bool, *rest) -> tuple:
    return (x.shape, x.strides, x.dtype, x.device, None if dims is None else tuple(dims), keepdim, *rest)


def accumulate(x: Tensor, dims, keepdim: bool, out_dtype: DType, op: int, contribution: int, final: int,
               acc: DType, identity, power: float = 0.0, out: Tensor | None = None, setting=None) -> Tensor:
    """One accumulator over dims, into out when given (contiguous, of the result's shape and out_dtype)."""
    key = _key(x, dims, keepdim, accumulate_kernel, out_dtype, op, contribution, final, acc, identity,
               type(identity), launch.setting_key(setting))
    site = _SITES.get(key) or _SITES.remember(key, _Site(
        accumulate_kernel, _checked_plan(x, dims, keepdim, False, setting), x.device, 2, True,
        dict(MAP=contribution, FINAL=final), dict(MAP=contribution, FINAL=C.KEEP), dict(MAP=C.VALUE, FINAL=final),
        OP=op, IDENTITY=identity, ACC=tl_type(acc)))
    p = site.plan
    out = launch.output(p.out_shape, out_dtype, x.device, out)
    if out.size == 0:
        return out
    src = _source(x, p.view)
    if p.merge is None:
        site.launches[0].launch((src, out), power)
        return out
    partials = launch.output((p.view.rows, p.tile.splits), acc, x.device)
    site.launches[0].launch((src, partials), power)
    site.launches[1].launch((partials, out), power)
    return out


INDEX32_LIMIT = 2**31 - 1


def index_lanes(cols: int) -> dict:
    """The type the index kernels keep lane indices in: int32 when every index of the reduced dim
    (and the int32 maximum, which no index is) fits, else int64."""
    if cols < INDEX32_LIMIT:
        return dict(INDEX=tl.int32, LAST=2**31 - 1)
    return dict(INDEX=tl.int64, LAST=2**63 - 1)


def extreme_index(x: Tensor, dims, keepdim: bool, values_dtype: DType | None, op: int):
    """(values, indices) of the first extreme; values None when values_dtype is None (argmax)."""
    key = _key(x, dims, keepdim, extreme_index_kernel, values_dtype, op)
    site = _SITES.get(key) or _SITES.remember(key, _extreme_index_site(x, dims, keepdim, values_dtype, op))
    p = site.plan
    values = launch.output(p.out_shape, values_dtype, x.device) if values_dtype is not None else None
    index = launch.output(p.out_shape, dtypes.INDEX, x.device)
    if index.size == 0:
        return values, index
    src = _source(x, p.view)
    final_values = values if values is not None else index
    if p.merge is None:
        site.launches[0].launch((src, index, final_values, index))
        return values, index
    best = launch.output((p.view.rows, p.tile.splits), comparison_dtype(x.dtype), x.device)
    where = launch.output((p.view.rows, p.tile.splits), dtypes.INDEX, x.device)
    site.launches[0].launch((src, where, best, where))
    site.launches[1].launch((best, where, final_values, index))
    return values, index


def _extreme_index_site(x: Tensor, dims, keepdim: bool, values_dtype: DType | None, op: int) -> _Site:
    p = _checked_plan(x, dims, keepdim, True)
    acc, write = comparison_dtype(x.dtype), values_dtype is not None
    return _Site(extreme_index_kernel, p, x.device, 4, False,
                 dict(FROM_PARTIALS=False, WRITE_VALUES=write), dict(FROM_PARTIALS=False, WRITE_VALUES=True),
                 dict(FROM_PARTIALS=True, WRITE_VALUES=write), OP=op, IDENTITY=extreme_identity(acc, op),
                 ACC=tl_type(acc), **index_lanes(p.view.cols))


def moments(x: Tensor, dims, keepdim: bool, out_dtype: DType, final: int, correction: float) -> Tensor:
    key = _key(x, dims, keepdim, moments_kernel, out_dtype, final)
    site = _SITES.get(key) or _SITES.remember(key, _Site(
        moments_kernel, _checked_plan(x, dims, keepdim, False), x.device, 4, True,
        dict(FROM_PARTIALS=False, FINAL=final),
        dict(FROM_PARTIALS=False, FINAL=C.PARTIAL), dict(FROM_PARTIALS=True, FINAL=final),
        ACC=tl_type(accumulator(x.dtype))))
    p = site.plan
    out = launch.output(p.out_shape, out_dtype, x.device)
    if out.size == 0:
        return out
    src, correction = _source(x, p.view), float(correction)
    if p.merge is None:
        site.launches[0].launch((src, out, out, out), correction)
        return out
    state = launch.output((3, p.view.rows, p.tile.splits), accumulator(x.dtype), x.device)
    count, mean, m2 = state[0], state[1], state[2]
    site.launches[0].launch((src, count, mean, m2), correction)
    site.launches[1].launch((count, out, mean, m2), correction)
    return out


def logsumexp(x: Tensor, dims, keepdim: bool, out_dtype: DType) -> Tensor:
    key = _key(x, dims, keepdim, logsumexp_kernel, out_dtype)
    site = _SITES.get(key) or _SITES.remember(key, _Site(
        logsumexp_kernel, _checked_plan(x, dims, keepdim, False), x.device, 4, False,
        dict(FROM_PARTIALS=False, FINAL=C.RESULT),
        dict(FROM_PARTIALS=False, FINAL=C.PARTIAL), dict(FROM_PARTIALS=True, FINAL=C.RESULT),
        ACC=tl_type(accumulator(x.dtype))))
    p = site.plan
    out = launch.output(p.out_shape, out_dtype, x.device)
    if out.size == 0:
        return out
    src = _source(x, p.view)
    if p.merge is None:
        site.launches[0].launch((src, src, out, out))
        return out
    state = launch.output((2, p.view.rows, p.tile.splits), accumulator(x.dtype), x.device)
    running_max, total = state[0], state[1]
    site.launches[0].launch((src, src, running_max, total))
    site.launches[1].launch((running_max, total, out, out))
    return out
