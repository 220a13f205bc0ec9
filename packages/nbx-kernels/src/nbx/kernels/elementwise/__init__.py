"""Elementwise kernels: nbx.core's elementwise ops, activations, where, clamp and casts, over any strides.

Operands are read in place through their strides (broadcast dims have stride 0): no contiguous
copy is made unless an operand keeps more than layout.MAX_RANK dims after collapsing, and then
the copy is declared in the launch's cost. Complex dtypes have no Triton type and are refused by
name (DTypeError) before anything is allocated.
"""
from __future__ import annotations

from math import prod

from nbx.core.spec import Arg, Slots
from nbx.core import dtypes, layout as core_layout
from nbx.core.dtypes import DType
from nbx.core.errors import NotSupportedError
from nbx.core.ops.elementwise import OPS
from nbx.core.promotion import result_type
from nbx.core.tensor import Tensor

from .. import launch, plans
from ..cost import Buffer, Cost, declares
from ..registry import implements
from ..types import compute_type, tl_type
from . import activations, callsite, functions

def launch_elementwise(fn, operands, out_dtype: DType, work_dtype: DType, out: Tensor | None = None,
                       compute=None, setting=None) -> Tensor:
    """fn over the broadcast operands into out (a new contiguous tensor, or any given layout).

    compute overrides the kernel's compute type (a same-dtype copy moves the dtype's own bits);
    setting overrides the served (certified) one: the certifier launches this very path with it."""
    plan = callsite.launch_plan(fn, operands, out_dtype, work_dtype, out, compute, setting)
    return _launch(plan, operands, out_dtype, work_dtype, out, compute, setting)


def _launch(plan, operands, out_dtype: DType, work_dtype: DType, out, compute=None, setting=None) -> Tensor:
    detail = plan.detail
    if detail.grid is not None:
        return callsite.run(plan, out, operands)
    if out is None:
        out = launch.output(detail.shape, out_dtype, detail.device)
    if detail.n:  # more dims than the kernel indexes, even collapsed: one launch per outer index
        wide = [o.broadcast_to(detail.shape) if isinstance(o, Tensor) else o for o in operands]
        for i in range(detail.shape[0]):
            launch_elementwise(detail.fn, [o[i] if isinstance(o, Tensor) else o for o in wide], out_dtype, work_dtype,
                               out[i], compute, setting)
    return out


def _scalars_as_work_dtype(operands, work: DType):
    """float64 kernels take float scalars as 0-d tensors (Triton passes Python floats as fp32)."""
    if work is not dtypes.float64:
        return operands
    from nbx.core.ops.creation import asarray
    device = next(o.device for o in operands if isinstance(o, Tensor))
    return [asarray(o, dtype=work, device=device) if isinstance(o, float) else o for o in operands]


def _pick(op, operands):
    """(the kernel function, the work dtype, the operands as the kernel takes them) of an op."""
    work = op.work_dtype(result_type(*operands))
    compute_type(work)  # complex: refused by name before any allocation
    fn = functions.pick(op.name, work.name)
    if fn is None:
        raise NotSupportedError(f"{op.name} has no Triton kernel yet")
    return fn, work, _scalars_as_work_dtype(operands, work)


def _elementwise(call) -> Tensor:
    """An elementwise op of nbx.core, its call checked by the op's spec."""
    operands = call.values()
    plan = callsite.op_plan(call.op, operands, call.out_dtype, _pick)
    detail = plan.detail
    if detail.tensor_scalars:
        operands = _scalars_as_work_dtype(operands, detail.work)
    return _launch(plan, operands, call.out_dtype, detail.work, None)


def _prepare(call):
    """The repeats of call's signature: its plan's launcher with the operands in their slots."""
    plan = callsite.op_plan(call.op, call.values(), call.out_dtype, _pick)
    run = plans.prepared(plan) if plan.detail.grid is not None and not plan.detail.tensor_scalars else None
    if run is None:
        return None
    if len(call.spec.params) == 1:
        return Slots(run, {"a": Arg("x"), "out": None}, "out")
    return Slots(run, {"a": Arg("x1"), "b": Arg("x2"), "out": None}, "out")


_elementwise.prepare = _prepare


def elementwise_cost(operands, out_dtype: DType, shape=None) -> Cost:
    """One output of the broadcast shape; every tensor operand read once, the output written once."""
    if shape is None:
        shape = core_layout.broadcast_shapes(*(o.shape for o in operands if isinstance(o, Tensor)))
    n = prod(shape)
    read = sum(o.nbytes for o in operands if isinstance(o, Tensor))
    return Cost(buffers=(Buffer("out", n * out_dtype.itemsize),), bytes_moved=read + n * out_dtype.itemsize, flops=n)


def _cost(call) -> Cost:
    return elementwise_cost(call.values(), call.out_dtype, call.shape)


for _name in OPS:
    implements(_name)(_elementwise)
    declares(_name)(_cost)


# ---- where, clamp, casts, copies -----------------------------------------------------------------
@implements("where")
def _where(condition: Tensor, x1, x2, dtype: DType) -> Tensor:
    operands = _scalars_as_work_dtype([condition, x1, x2], dtype)
    return launch_elementwise(functions.where, operands, dtype, dtype)


@implements("clamp")
def _clamp(x: Tensor, min=None, max=None) -> Tensor:
    bounds = [b for b in (min, max) if b is not None]
    fn = {2: activations.clamp, 0: functions.identity}.get(len(bounds)) or (
        activations.clamp_min if max is None else activations.clamp_max)
    operands = _scalars_as_work_dtype([x, *bounds], x.dtype)
    return launch_elementwise(fn, operands, x.dtype, x.dtype)


declares("where")(lambda condition, x1, x2: elementwise_cost([condition, x1, x2], result_type(x1, x2)))
declares("clamp")(lambda x, min=None, max=None: elementwise_cost([x, min, max], x.dtype))
declares("astype")(lambda x, dtype: elementwise_cost([x], dtypes.as_dtype(dtype)))


@implements("astype")
def _astype(x: Tensor, dtype: DType) -> Tensor:
    if dtype is x.dtype:  # a copy of the dtype's own bits
        return launch_elementwise(functions.identity, [x], dtype, dtype, compute=tl_type(dtype))
    return launch_elementwise(functions.identity, [x], dtype, x.dtype)


@implements("copy_")
def _copy(dst: Tensor, src: Tensor) -> None:
    """Any layout into any layout (casting to dst's dtype); a dense same-dtype copy is a byte copy."""
    from nbx.core.device import get_backend
    if src.dtype is dst.dtype and src.is_contiguous() and dst.is_contiguous() and src.shape == dst.shape:
        item = dst.dtype.itemsize
        get_backend(dst.device.type).copy(dst.storage, dst.storage_offset * item, src.storage,
                                          src.storage_offset * item, dst.nbytes)
        return
    if src.dtype is dst.dtype:  # rows contiguous on both sides: the remap copy's vectorised tiles
        from ..copies.remap import COPY, remap_copy, rows_copy
        if rows_copy(dst, src):
            remap_copy(dst, src, COPY, (0,) * dst.ndim)
            return
    if dst.dtype.is_complex and src.dtype is dst.dtype:  # Triton has no complex type: copy the parts
        launch_elementwise(functions.identity, [_parts(src)], _part_dtype(dst), _part_dtype(dst), out=_parts(dst),
                           compute=tl_type(_part_dtype(dst)))
        return
    raw = tl_type(src.dtype) if src.dtype is dst.dtype else None
    launch_elementwise(functions.identity, [src], dst.dtype, src.dtype, out=dst, compute=raw)


def _part_dtype(x: Tensor) -> DType:
    return dtypes.float32 if x.dtype is dtypes.complex64 else dtypes.float64


def _parts(x: Tensor) -> Tensor:
    """A complex tensor viewed as its real and imaginary parts: a trailing dim of 2 reals."""
    return Tensor(x.storage, _part_dtype(x), x.shape + (2,), tuple(2 * s for s in x.strides) + (1,),
                  2 * x.storage_offset)


@implements("fill_")
def _fill(out: Tensor, value) -> None:
    if out.dtype.is_complex:  # the real and the imaginary parts filled as reals
        parts = _parts(out)
        for index, part in enumerate((complex(value).real, complex(value).imag)):
            _fill(parts[..., index], part)
        return
    operands = _scalars_as_work_dtype([value, out], out.dtype)[:1]
    launch_elementwise(functions.identity, operands, out.dtype, out.dtype, out=out)


from . import extras  # noqa: E402,F401  (registers the activations and fused pointwise ops)

__all__ = ["launch_elementwise", "elementwise_cost"]
