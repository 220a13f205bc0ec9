"""The plan of an elementwise launch (nbx.kernels.plans), worked out once per call site.

A call site is keyed by the function, the dtypes, and each operand's shape, strides and dtype (a
Python scalar by its type and Triton's specialisation class). From the key follow the collapsed
layout, the kinds of the operands, every integer argument, the grid and the settings: `Plan`
records them and its launch plan replays them, so a repeated call only allocates its output and
gathers its pointers.
"""
from __future__ import annotations

from math import prod

import triton

from nbx.core import layout as core_layout
from nbx.core.dtypes import DType
from nbx.core.tensor import Tensor

from .. import plans
from ..plans import Launch, LaunchPlan, Slot
from ..types import compute_type, tl_type
from . import layout, tuning
from .kernel import DENSE, SPLAT, STRIDED, VALUE, elementwise_kernel

_INT32 = 2 ** 31
OPERANDS = ("a", "b", "c", "d")   # the slot names of the operands; the output's is "out"


def _scalar_class(value) -> tuple:
    """The part of a scalar argument Triton specialises on (ints: == 1, % 16, width)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return (type(value),)
    return (int, *plans.int_class(value))


def _operand_key(o) -> tuple:
    if isinstance(o, Tensor):
        return (o.shape, o.strides, o.dtype)
    return _scalar_class(o)


class Plan:
    """One call site: the kernel arguments that follow from its key."""

    __slots__ = ("device", "shape", "n", "template", "meta", "grid", "fn", "work", "tensor_scalars")

    def __init__(self, fn, operands, out_dtype: DType, compute, out: Tensor | None, device, setting=None):
        tensors = [o for o in operands if isinstance(o, Tensor)]
        self.device, self.fn, self.work, self.tensor_scalars = device, fn, None, False
        shape = out.shape if out is not None else core_layout.broadcast_shapes(*(t.shape for t in tensors))
        self.shape, self.n = shape, prod(shape)
        self.grid = None
        tl_type(out_dtype)  # refuses, by name, a dtype Triton has no type for (complex)
        if self.n == 0:
            return
        out_strides = out.strides if out is not None else core_layout.contiguous_strides(shape)
        strides = [core_layout.broadcast_strides(o.shape, o.strides, shape) if isinstance(o, Tensor) else None
                   for o in operands]
        collapsed = layout.padded(shape, [out_strides] + [s for s in strides if s is not None])
        if collapsed is None:  # more dims than the kernel indexes: the caller reads dense copies
            return
        sizes, (out_st, *tensor_st) = collapsed
        it = iter(tensor_st)
        kinds, operand_strides = [], []
        extent = self.n
        for operand in operands:
            st = next(it) if isinstance(operand, Tensor) else None
            if st is None:
                kinds.append(VALUE)
            else:
                extent = max(extent, core_layout.reach(sizes, st))
                kinds.append(DENSE if layout.is_dense(sizes, st) else STRIDED if any(st) else SPLAT)
            operand_strides.append(st)
        out_kind = DENSE if layout.is_dense(sizes, out_st) else STRIDED
        extent = max(extent, core_layout.reach(sizes, out_st))
        indexed = out_kind == STRIDED or STRIDED in kinds
        # the kernel's arguments: out, its strides, n, the inner sizes, then four operand slots
        # (pointer or value, strides); what the kernel does not read is None (a constant to Triton)
        args = [None, *(out_st if out_kind == STRIDED else (None,) * 4), self.n,
                *(sizes[1:] if indexed else (None,) * 3)]
        args[0] = Slot("out")
        for index in range(4):
            if index < len(operands):
                args.append(Slot(OPERANDS[index]))
            else:
                args.append(None)
            kind, st = (kinds[index], operand_strides[index]) if index < len(operands) else (DENSE, None)
            args += [*(st if kind == STRIDED else (None,) * 4)]
        if setting is None:  # certified for the launch key (the device file's tile on interp)
            setting = tuning.setting(device, self.n, out_dtype, indexed, fn)
        block = setting["block"]
        self.template = args
        kinds += [DENSE] * (4 - len(kinds))
        self.meta = dict(OP=fn, ARITY=len(operands), COMPUTE=compute, A=kinds[0], B=kinds[1], C=kinds[2],
                         D=kinds[3], OUT=out_kind, INDEX64=extent + block >= _INT32, BLOCK=block)
        self.meta["num_warps"] = setting["num_warps"]
        self.grid = (triton.cdiv(self.n, block),)

    def launch_plan(self, out_dtype: DType) -> LaunchPlan:
        if self.grid is None:  # nothing to launch (empty), or launched per outer index (elementwise._launch)
            return LaunchPlan(self.device, (), detail=self)
        return LaunchPlan(self.device, (Launch(elementwise_kernel, self.grid, tuple(self.template), self.meta),),
                          (plans.output("out", self.shape, out_dtype),), detail=self)


def _device_of(operands, out):
    return next(o.device for o in ([out] if out is not None else []) + list(operands) if isinstance(o, Tensor))


def launch_plan(fn, operands, out_dtype: DType, work_dtype: DType, out: Tensor | None, compute=None,
                setting=None) -> LaunchPlan:
    """The call site's launch plan; setting (block, num_warps) overrides the served one (the certifier's)."""
    device = _device_of(operands, out)
    key = (fn, out_dtype, work_dtype, compute, device, None if out is None else (out.shape, out.strides),
           tuple(_operand_key(o) for o in operands), plans.setting_key(setting))
    return plans.cached("elementwise", key, lambda: Plan(
        fn, operands, out_dtype, compute_type(work_dtype) if compute is None else compute, out, device,
        setting).launch_plan(out_dtype))


def op_plan(op, operands, out_dtype: DType, pick) -> LaunchPlan:
    """The launch plan of an elementwise op of nbx.core (its function and work dtype picked from the
    operands' dtypes by pick(op, operands) -> (fn, work, operands as the kernel takes them))."""
    key = (op.name, out_dtype, _device_of(operands, None), tuple(_operand_key(o) for o in operands))

    def build() -> LaunchPlan:
        fn, work, taken = pick(op, operands)
        plan = Plan(fn, taken, out_dtype, compute_type(work), None, _device_of(operands, None), None)
        plan.work, plan.tensor_scalars = work, any(a is not b for a, b in zip(taken, operands))
        return plan.launch_plan(out_dtype)
    return plans.cached("elementwise", key, build)


def plan_for(fn, operands, out_dtype: DType, work_dtype: DType, out: Tensor | None, compute=None,
             setting=None) -> Plan:
    """The call site's decisions (layout, kinds, grid, constants)."""
    return launch_plan(fn, operands, out_dtype, work_dtype, out, compute, setting).detail


def run(plan: LaunchPlan, out: Tensor | None, operands) -> Tensor:
    """Launch plan's kernel writing out (a new one when None); its compiled launcher is called
    directly on repeats."""
    values = dict(zip(OPERANDS, operands))
    values["out"] = out
    return plans.execute(plan, values)["out"]
