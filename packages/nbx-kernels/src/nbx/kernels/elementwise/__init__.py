"""Elementwise kernels: nbx.core's elementwise ops, where and casts, over any strides.

Operands are read in place through their strides (broadcast dims have stride 0): no contiguous
copy is made unless an operand keeps more than layout.MAX_RANK dims after collapsing, and then
the copy is declared in the launch's cost.
"""
from __future__ import annotations

from math import prod

import triton

from nbx.core import dtypes, layout as core_layout
from nbx.core.dtypes import DType
from nbx.core.errors import NotSupportedError
from nbx.core.ops.elementwise import OPS
from nbx.core.ops._common import SCALARS
from nbx.core.promotion import result_type
from nbx.core.tensor import Tensor

from .. import launch
from ..cost import Buffer, Cost, declares
from ..registry import implements
from ..types import compute_type
from . import functions, layout
from .kernel import elementwise_kernel

_NO_STRIDES = (0, 0, 0, 0)


def _prepared(out: Tensor, operands, shape):
    """The output's strides, and each operand as (pointer-or-scalar, strides, scalar?, dense?)."""
    strides = [core_layout.broadcast_strides(o.shape, o.strides, shape) if isinstance(o, Tensor) else None
               for o in operands]
    tensor_strides = [out.strides] + [s for s in strides if s is not None]
    collapsed = layout.padded(shape, tensor_strides)
    if collapsed is None:  # too many dims even after collapsing: read dense copies instead
        if not out.is_contiguous():
            raise NotSupportedError(f"an elementwise write into a layout of {out.ndim} dims that do not "
                                    f"collapse to {layout.MAX_RANK} (strides {out.strides})")
        operands = [o.broadcast_to(shape).contiguous() if isinstance(o, Tensor) else o for o in operands]
        return _prepared(out, operands, shape)
    sizes, tensor_strides = collapsed
    out_strides = tensor_strides[0]
    it = iter(tensor_strides[1:])
    prepared = [(out, out_strides, False, layout.is_dense(sizes, out_strides))]
    for operand in operands:
        if isinstance(operand, Tensor):
            st = next(it)
            prepared.append((operand, st, False, layout.is_dense(sizes, st)))
        else:
            prepared.append((operand, _NO_STRIDES, True, False))
    return sizes, prepared


def launch_elementwise(fn, operands, out_dtype: DType, work_dtype: DType, out: Tensor | None = None) -> Tensor:
    """fn over the broadcast operands into out (a new contiguous tensor, or any given layout)."""
    tensors = [o for o in operands if isinstance(o, Tensor)] + ([out] if out is not None else [])
    device = tensors[0].device
    shape = out.shape if out is not None else core_layout.broadcast_shapes(*(t.shape for t in tensors))
    out = launch.output(shape, out_dtype, device) if out is None else out
    n = prod(shape)
    if n == 0:
        return out
    sizes, prepared = _prepared(out, list(operands), shape)
    (_, out_strides, _, out_dense), operand_slots = prepared[0], prepared[1:]
    while len(operand_slots) < 3:  # unused operand slots point at the output and are never read
        operand_slots.append((out, _NO_STRIDES, False, True))
    args = []
    flags = {"OUT_DENSE": out_dense}
    for name, (value, st, scalar, dense) in zip("ABC", operand_slots):
        args += [value, *st]
        flags[f"{name}_SCALAR"], flags[f"{name}_DENSE"] = scalar, dense
    settings = launch.tiles("elementwise", device)
    block = settings["block"]
    launch.run(elementwise_kernel, (triton.cdiv(n, block),), device, out, *out_strides, n, sizes[1], sizes[2],
               sizes[3], *args, OP=fn, ARITY=len(operands), COMPUTE=compute_type(work_dtype), BLOCK=block,
               num_warps=settings["num_warps"], **flags)
    return out


def _function(name: str):
    try:
        return functions.FUNCTIONS[name]
    except KeyError:
        raise NotSupportedError(f"{name} has no Triton kernel yet") from None


def _work_dtype(op, operands) -> DType:
    return op.work_dtype(result_type(*operands))


def _scalars_as_work_dtype(operands, work: DType):
    """float64 kernels take float scalars as 0-d tensors (Triton passes Python floats as fp32)."""
    if work is not dtypes.float64 and work is not dtypes.complex128:
        return operands
    from nbx.core.ops.creation import asarray
    device = next(o.device for o in operands if isinstance(o, Tensor))
    return [asarray(o, dtype=work, device=device) if isinstance(o, SCALARS) else o for o in operands]


def _elementwise(op, operands, out_dtype: DType) -> Tensor:
    work = _work_dtype(op, operands)
    return launch_elementwise(_function(op.name), _scalars_as_work_dtype(operands, work), out_dtype, work)


def elementwise_cost(operands, out_dtype: DType) -> Cost:
    """One output of the broadcast shape; every tensor operand read once, the output written once."""
    shape = core_layout.broadcast_shapes(*(o.shape for o in operands if isinstance(o, Tensor)))
    n = prod(shape)
    read = sum(o.nbytes for o in operands if isinstance(o, Tensor))
    return Cost(buffers=(Buffer("out", n * out_dtype.itemsize),), bytes_moved=read + n * out_dtype.itemsize, flops=n)


def _declare(op):
    def cost(*operands) -> Cost:
        return elementwise_cost(operands, op.out_dtype(result_type(*operands)))
    declares(op.name)(cost)


for _name in functions.FUNCTIONS:
    if _name in OPS:
        implements(_name)(_elementwise)
        _declare(OPS[_name])


@implements("where")
def _where(condition: Tensor, x1, x2, dtype: DType) -> Tensor:
    operands = _scalars_as_work_dtype([condition, x1, x2], dtype)
    return launch_elementwise(functions.where, operands, dtype, dtype)


declares("where")(lambda condition, x1, x2: elementwise_cost([condition, x1, x2], result_type(x1, x2)))
declares("astype")(lambda x, dtype: elementwise_cost([x], dtypes.as_dtype(dtype)))


@implements("astype")
def _astype(x: Tensor, dtype: DType) -> Tensor:
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
    launch_elementwise(functions.identity, [src], dst.dtype, src.dtype, out=dst)


@implements("fill_")
def _fill(out: Tensor, value) -> None:
    operands = _scalars_as_work_dtype([value, out], out.dtype)[:1]
    launch_elementwise(functions.identity, operands, out.dtype, out.dtype, out=out)


__all__ = ["launch_elementwise", "elementwise_cost"]
