"""Reductions over any set of dims and scans along one, as Triton kernels.

Implements nbx.core's sum, prod, mean, max, min, argmax, argmin, var, std, any, all, logsumexp,
max_with_indices, min_with_indices, count_nonzero, vector_norm, cumsum, cumprod, cummax and
cummin. Half types accumulate in float32, integer sums in int64; the order of accumulation is a
function of the shapes and the device file's settings only (no atomics), so the same input gives
the same bits on every run. Each op declares its cost (outputs, the partials of split rows and a
contiguous copy, when one is needed, as workspace of the launch).
"""
from __future__ import annotations

import math

from nbx.core.spec import Arg, Slots
from nbx.core import dtypes
from nbx.core import layout as core_layout
from nbx.core.dtypes import DType, computes_in
from nbx.core.ops.reductions import accumulating_dtype
from nbx.core.ops.reductions_more import real_dtype
from nbx.core.tensor import Tensor

from .. import plans
from ..cost import Cost, declares
from ..registry import implements
from . import launches as L
from . import scans as S
from .combine import Code as C


def _float_accumulator(*dts: DType) -> DType:
    return dtypes.float64 if any(d is dtypes.float64 for d in dts) else dtypes.float32


# -- one accumulator -----------------------------------------------------------------------------

def _norm_launch(ord: float):
    """(combine, contribution, finish, identity) of a vector norm of order ord."""
    if ord == math.inf:
        return C.MAX, C.ABS, C.KEEP, 0.0
    if ord == -math.inf:
        return C.MIN, C.ABS, C.KEEP, math.inf
    if ord == 0:
        return C.ADD, C.NONZERO, C.KEEP, 0.0
    if ord == 1:
        return C.ADD, C.ABS, C.KEEP, 0.0
    if ord == 2:
        return C.ADD, C.SQUARE, C.SQRT, 0.0
    return C.ADD, C.POWER, C.ROOT, 0.0


def _accumulation(name: str, x_dtype: DType, out_dtype: DType, ord: float = 2.0):
    """(combine, contribution, finish, accumulator dtype, identity) of a one-accumulator op."""
    if name in ("sum", "prod"):
        return (C.ADD, C.VALUE, C.KEEP, L.accumulator(out_dtype), 0) if name == "sum" else \
            (C.MUL, C.VALUE, C.KEEP, L.accumulator(out_dtype), 1)
    if name == "mean":
        return C.ADD, C.VALUE, C.MEAN, _float_accumulator(x_dtype, out_dtype), 0
    if name in ("max", "min"):
        op, acc = (C.MAX if name == "max" else C.MIN), computes_in(x_dtype)
        return op, C.VALUE, C.KEEP, acc, L.extreme_identity(acc, op)
    if name in ("any", "all"):
        return (C.MAX, C.NONZERO, C.KEEP, dtypes.int32, 0) if name == "any" else \
            (C.MIN, C.NONZERO, C.KEEP, dtypes.int32, 1)
    if name == "count_nonzero":
        return C.ADD, C.NONZERO, C.KEEP, dtypes.int64, 0
    op, contribution, finish, identity = _norm_launch(ord)
    return op, contribution, finish, _float_accumulator(out_dtype), identity


def _accumulating(name: str):
    def run(x: Tensor, dims, keepdim: bool, out_dtype: DType, dtype=None, ord: float = 2.0) -> Tensor:
        op, contribution, finish, acc, identity = _accumulation(name, x.dtype, out_dtype, ord)
        return L.accumulate(x, dims, keepdim, out_dtype, op, contribution, finish, acc, identity,
                            power=float(ord) if contribution == C.POWER or finish == C.ROOT else 0.0)
    run.__name__ = f"{name}_kernel"
    return run


mean = _accumulating("mean")   # a global average pool runs it (pool/)


def _accumulating_call(name: str):
    """sum, prod, mean, max, min, any, all of a checked call (nbx.core.ops.reductions' specs)."""
    def run(call) -> Tensor:
        return one(call.x, call.dims, call.keepdim, call.out_dtype)

    def prepare(call):
        """A signature's repeats: its plan's launcher (None where the plan reads a copy or launches nothing)."""
        x = call.x
        op, contribution, finish, acc, identity = _accumulation(name, x.dtype, call.out_dtype)
        lp = L.accumulate_plan(x, call.dims, call.keepdim, call.out_dtype, op, contribution, finish, acc, identity)
        execute = plans.prepared(lp) if lp.launches and lp.detail.view.copy is None else None
        if execute is None:
            return None
        return Slots(execute, {"x": Arg("x"), "out": None, "power": 0.0}, "out")
    one = _accumulating(name)
    run.prepare = prepare
    return run


for _name in ("sum", "prod", "mean", "max", "min", "any", "all"):
    implements(_name)(_accumulating_call(_name))
for _name in ("count_nonzero", "vector_norm"):
    implements(_name)(_accumulating(_name))


# -- the extreme and its index, moments, logsumexp --------------------------------------------

@implements("argmax")
def _argmax(call) -> Tensor:
    return L.extreme_index(call.x, call.dims, call.keepdim, None, C.MAX)[1]


@implements("argmin")
def _argmin(call) -> Tensor:
    return L.extreme_index(call.x, call.dims, call.keepdim, None, C.MIN)[1]


@implements("max_with_indices")
def _max_with_indices(x: Tensor, dims, keepdim: bool, out_dtype: DType):
    return L.extreme_index(x, dims, keepdim, out_dtype, C.MAX)


@implements("min_with_indices")
def _min_with_indices(x: Tensor, dims, keepdim: bool, out_dtype: DType):
    return L.extreme_index(x, dims, keepdim, out_dtype, C.MIN)


@implements("var")
def _var(call) -> Tensor:
    return L.moments(call.x, call.dims, call.keepdim, call.out_dtype, C.VAR, call.correction)


@implements("std")
def _std(call) -> Tensor:
    return L.moments(call.x, call.dims, call.keepdim, call.out_dtype, C.STD, call.correction)


@implements("logsumexp")
def _logsumexp(call) -> Tensor:
    return L.logsumexp(call.x, call.dims, call.keepdim, call.out_dtype)


# -- scans ---------------------------------------------------------------------------------------

@implements("cumsum")
def _cumsum(x: Tensor, dim: int, out_dtype: DType) -> Tensor:
    return S.accumulating_scan(x, dim, out_dtype, C.ADD)


@implements("cumprod")
def _cumprod(x: Tensor, dim: int, out_dtype: DType) -> Tensor:
    return S.accumulating_scan(x, dim, out_dtype, C.MUL)


@implements("cummax")
def _cummax(x: Tensor, dim: int):
    return S.running_extreme(x, dim, C.MAX)


@implements("cummin")
def _cummin(x: Tensor, dim: int):
    return S.running_extreme(x, dim, C.MIN)


# -- costs (the front-ends' arguments: price("sum", x, dim=1, keepdim=True)) ---------------------

def _dims(x: Tensor, dim):
    return core_layout.normalize_dims(dim, x.ndim)


def _state(name: str, x_dtype: DType, out: DType, ord: float = 2.0) -> list:
    if name in ("var", "std", "logsumexp"):
        return [L.accumulator(x_dtype)] * (3 if name != "logsumexp" else 2)
    return [_accumulation(name, x_dtype, out, ord)[3]]


def _reduction_cost(name: str):
    """The cost of a checked call (the ops with a spec: price("sum", x, dim=1) binds it)."""
    def cost(call) -> Cost:
        x = call.x
        return L.plan(x, call.dims, call.keepdim, ordered=False).cost(x, [("out", call.out_dtype)],
                                                                      _state(name, x.dtype, call.out_dtype))
    return cost


def _counting_cost(name: str):
    def cost(x: Tensor, dim=None, keepdim: bool = False, ord=2) -> Cost:
        out = dtypes.INDEX if name == "count_nonzero" else real_dtype(x.dtype)
        return L.plan(x, _dims(x, dim), keepdim, ordered=False).cost(x, [("out", out)],
                                                                     _state(name, x.dtype, out, float(ord)))
    return cost


def _extreme_index_call_cost(call) -> Cost:
    return _extreme_index_cost(False)(call.x, call.dims, call.keepdim)


def _extreme_index_cost(with_values: bool):
    def cost(x: Tensor, dim=None, keepdim: bool = False) -> Cost:
        dims = None if dim is None else _dims(x, dim)
        outputs = ([("values", x.dtype)] if with_values else []) + [("indices", dtypes.INDEX)]
        state = [computes_in(x.dtype), dtypes.INDEX]
        return L.plan(x, dims, keepdim, ordered=True).cost(x, outputs, state)
    return cost


def _scan_dim(x: Tensor, dim) -> int:
    return core_layout.normalize_dim(0 if dim is None else dim, max(x.ndim, 1))


def _accumulating_scan_cost(x: Tensor, dim=None, dtype=None) -> Cost:
    out = dtypes.as_dtype(dtype) if dtype is not None else accumulating_dtype(x.dtype)
    return S.scan_cost(x, _scan_dim(x, dim), [("out", out)])


def _running_extreme_cost(x: Tensor, dim=None) -> Cost:
    return S.scan_cost(x, _scan_dim(x, dim), [("values", x.dtype), ("indices", dtypes.INDEX)])


for _name in ("sum", "prod", "mean", "max", "min", "any", "all", "var", "std", "logsumexp"):
    declares(_name)(_reduction_cost(_name))
declares("count_nonzero")(_counting_cost("count_nonzero"))


@declares("vector_norm")
def _vector_norm_cost(x: Tensor, ord=2, dim=None, keepdim: bool = False) -> Cost:
    return _counting_cost("vector_norm")(x, dim, keepdim, ord=ord)


for _name in ("argmax", "argmin"):
    declares(_name)(_extreme_index_call_cost)
for _name in ("max_with_indices", "min_with_indices"):
    declares(_name)(_extreme_index_cost(True))
for _name in ("cumsum", "cumprod"):
    declares(_name)(_accumulating_scan_cost)
for _name in ("cummax", "cummin"):
    declares(_name)(_running_extreme_cost)
