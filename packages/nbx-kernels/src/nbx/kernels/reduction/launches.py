"""Launching the reduction kernels: the plan of one call (shared with its cost), then one launch,
or two when long rows are split (partials, then a merge in range order).

A plan is computed from shapes, strides, dtypes and the device file's settings alone, so
nbx.kernels.price reports exactly the buffers a call allocates without touching memory. Each op's
launch plan (nbx.kernels.plans) is kept per call site: x's layout and dtype, the dims, the output
dtype and the kernel's constants.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import triton.language as tl

from nbx.core import dtypes
from nbx.core.dtypes import DType, computes_in  # max / min compare in it (exact)
from nbx.core.tensor import Tensor

from .. import launch, plans
from ..cost import LAUNCH, Buffer, Cost
from ..plans import Launch, LaunchPlan, Slot
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
    return dtypes.statistics_dtype(dtype)


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


def plan(x: Tensor, dims, keepdim: bool, ordered: bool, setting=None) -> Plan:
    """ordered: the result depends on the order of the reduced dims (an index), so keep it.
    setting overrides the served (certified) one: the certifier launches this very path with it."""
    dims = None if dims is None else tuple(dims)
    view = layout.plan(x.shape, x.strides, dims, ordered)
    if setting is None:  # certified for the launch key (the device file's tile on interp)
        setting = tuning.setting(x.device, view, x.dtype)
    s = {**launch.tiles("reduction", x.device), **dict(setting)}
    tile = layout.tile(view, s)
    merge = None
    if tile.splits > 1:
        merge = layout.tile(layout.Rows(view.rows, tile.splits, 1, tile.splits, 0, 1), s, split=False)
    return Plan(view, tile, merge, reduced_shape(x.shape, dims, keepdim), s)


def _source(x: Tensor, view: layout.Rows) -> Tensor:
    """x itself, or its contiguous copy with the kept dims first (workspace of this call)."""
    return x if view.copy is None else x.permute(*view.copy).contiguous()


def _view_args(view: layout.Rows) -> tuple[int, ...]:
    return (view.rows, view.cols, *view.row_args, view.col_stride)


def _launch(kernel, p: Plan, tile: layout.Tile, view: layout.Rows, tensors: tuple, n_splits: int, tail: tuple,
            meta: dict) -> Launch:
    """tail: what follows the split count (the reduced length, per-call scalars)."""
    return Launch(kernel, tile.grid(view.rows), (*tensors, *_view_args(view), tile.split_len, n_splits, *tail),
                  dict(BLOCK_R=tile.block_r, BLOCK_C=tile.block_c, num_warps=p.settings["num_warps"], **meta))


def _reduction_plan(kernel, p: Plan, device, outputs: tuple, workspace: tuple, whole: tuple, partial: tuple,
                    merge: tuple, tail: tuple, **meta) -> LaunchPlan:
    """One launch over the rows (whole: its tensors and constants) or, when the plan splits them,
    one into partials (partial's) and one over the partials (merge's); tail follows the split count."""
    if prod(p.out_shape) == 0:
        launches = ()
    elif p.merge is None:
        launches = (_launch(kernel, p, p.tile, p.view, whole[0], 1, tail, {**meta, **whole[1]}),)
    else:
        launches = (_launch(kernel, p, p.tile, p.view, partial[0], p.tile.splits, tail, {**meta, **partial[1]}),
                    _launch(kernel, p, p.merge, p.merge_view, merge[0], 1, tail, {**meta, **merge[1]}))
    return LaunchPlan(device, launches, outputs, workspace if p.merge is not None and launches else (), (), p)


def _checked_plan(x: Tensor, dims, keepdim: bool, ordered: bool, setting=None) -> Plan:
    tl_type(x.dtype)  # a dtype no kernel takes is refused by name
    return plan(x, dims, keepdim, ordered, setting)


def _key(x: Tensor, dims, keepdim: bool, *rest) -> tuple:
    return (x.shape, x.strides, x.dtype, x.device, None if dims is None else tuple(dims), keepdim, *rest)


def _run(launch_plan: LaunchPlan, x: Tensor, **values) -> dict:
    """The plan run over x (or its contiguous copy, when the plan reads one and launches at all)."""
    return plans.execute(launch_plan, dict(values, x=_source(x, launch_plan.detail.view) if launch_plan.launches else x))


_X, _OUT, _PART = Slot("x"), Slot("out"), Slot("partials")


def accumulate(x: Tensor, dims, keepdim: bool, out_dtype: DType, op: int, contribution: int, final: int,
               acc: DType, identity, power: float = 0.0, out: Tensor | None = None, setting=None) -> Tensor:
    """One accumulator over dims, into out when given (contiguous, of the result's shape and out_dtype)."""
    lp = accumulate_plan(x, dims, keepdim, out_dtype, op, contribution, final, acc, identity, setting)
    if out is not None:
        launch.output(lp.detail.out_shape, out_dtype, x.device, out)
    return _run(lp, x, out=out, power=power)["out"]


def accumulate_plan(x: Tensor, dims, keepdim: bool, out_dtype: DType, op: int, contribution: int, final: int,
                    acc: DType, identity, setting=None) -> LaunchPlan:
    """accumulate's launch plan, kept per layout."""
    def build() -> LaunchPlan:
        p = _checked_plan(x, dims, keepdim, False, setting)
        return _reduction_plan(
            accumulate_kernel, p, x.device, (plans.output("out", p.out_shape, out_dtype),),
            (plans.workspace("partials", (p.view.rows, p.tile.splits), acc),),
            ((_X, _OUT), dict(MAP=contribution, FINAL=final)), ((_X, _PART), dict(MAP=contribution, FINAL=C.KEEP)),
            ((_PART, _OUT), dict(MAP=C.VALUE, FINAL=final)), (p.view.cols, Slot("power")),
            OP=op, IDENTITY=identity, ACC=tl_type(acc))
    key = _key(x, dims, keepdim, accumulate_kernel, out_dtype, op, contribution, final, acc, identity,
               type(identity), plans.setting_key(setting))
    return plans.cached("reduction", key, build)


INDEX32_LIMIT = 2**31 - 1


def index_lanes(cols: int) -> dict:
    """The type the index kernels keep lane indices in: int32 when every index of the reduced dim
    (and the int32 maximum, which no index is) fits, else int64."""
    if cols < INDEX32_LIMIT:
        return dict(INDEX=tl.int32, LAST=2**31 - 1)
    return dict(INDEX=tl.int64, LAST=2**63 - 1)


def extreme_index(x: Tensor, dims, keepdim: bool, values_dtype: DType | None, op: int):
    """(values, indices) of the first extreme; values None when values_dtype is None (argmax)."""
    def build() -> LaunchPlan:
        p = _checked_plan(x, dims, keepdim, True)
        acc, write = computes_in(x.dtype), values_dtype is not None
        index, best, where = Slot("indices"), Slot("best"), Slot("where")
        final_values = Slot("values") if write else index
        outputs = ((plans.output("values", p.out_shape, values_dtype),) if write else ()) + (
            plans.output("indices", p.out_shape, dtypes.INDEX),)
        parts = (p.view.rows, p.tile.splits)
        return _reduction_plan(
            extreme_index_kernel, p, x.device, outputs,
            (plans.workspace("best", parts, acc), plans.workspace("where", parts, dtypes.INDEX)),
            ((_X, index, final_values, index), dict(FROM_PARTIALS=False, WRITE_VALUES=write)),
            ((_X, where, best, where), dict(FROM_PARTIALS=False, WRITE_VALUES=True)),
            ((best, where, final_values, index), dict(FROM_PARTIALS=True, WRITE_VALUES=write)), (),
            OP=op, IDENTITY=extreme_identity(acc, op), ACC=tl_type(acc), **index_lanes(p.view.cols))
    lp = plans.cached("reduction", _key(x, dims, keepdim, extreme_index_kernel, values_dtype, op), build)
    values = _run(lp, x)
    return values.get("values"), values["indices"]


def _state_plan(kernel, x: Tensor, dims, keepdim: bool, out_dtype: DType, states: int, whole: tuple, partial: tuple,
                merge: tuple, tail: tuple, **meta) -> LaunchPlan:
    """A plan whose split rows keep `states` partials each (views of one workspace, "state")."""
    p = _checked_plan(x, dims, keepdim, False)
    return _reduction_plan(kernel, p, x.device, (plans.output("out", p.out_shape, out_dtype),),
                           (plans.workspace("state", (states, p.view.rows, p.tile.splits), accumulator(x.dtype)),),
                           whole, partial, merge, (p.view.cols, *tail) if tail else (),  # moments: n_total, correction
                           ACC=tl_type(accumulator(x.dtype)), **meta)


_STATE = tuple(Slot("state", part=i) for i in range(3))


def moments(x: Tensor, dims, keepdim: bool, out_dtype: DType, final: int, correction: float) -> Tensor:
    count, mean, m2 = _STATE
    lp = plans.cached("reduction", _key(x, dims, keepdim, moments_kernel, out_dtype, final), lambda: _state_plan(
        moments_kernel, x, dims, keepdim, out_dtype, 3, ((_X, _OUT, _OUT, _OUT), dict(FROM_PARTIALS=False, FINAL=final)),
        ((_X, count, mean, m2), dict(FROM_PARTIALS=False, FINAL=C.PARTIAL)),
        ((count, _OUT, mean, m2), dict(FROM_PARTIALS=True, FINAL=final)), (Slot("correction"),)))
    return _run(lp, x, correction=float(correction))["out"]


def logsumexp(x: Tensor, dims, keepdim: bool, out_dtype: DType) -> Tensor:
    running_max, total = _STATE[:2]
    lp = plans.cached("reduction", _key(x, dims, keepdim, logsumexp_kernel, out_dtype), lambda: _state_plan(
        logsumexp_kernel, x, dims, keepdim, out_dtype, 2, ((_X, _X, _OUT, _OUT), dict(FROM_PARTIALS=False, FINAL=C.RESULT)),
        ((_X, _X, running_max, total), dict(FROM_PARTIALS=False, FINAL=C.PARTIAL)),
        ((running_max, total, _OUT, _OUT), dict(FROM_PARTIALS=True, FINAL=C.RESULT)), ()))
    return _run(lp, x)["out"]
