"""Kernel implementations of nbx.core's activations and fused pointwise ops (nbx/core/ops/activations.py).

The activations receive their spec's checked call (nbx.core.spec); the fused pointwise ops the
front-end's checked arguments (parameters then the output dtype). Each launches the one
elementwise kernel with the op's function and its parameters as scalar operands.
"""
from __future__ import annotations

from nbx.core.dtypes import DType
from nbx.core.tensor import Tensor

from ..cost import Cost, declares
from ..registry import implements
from . import activations as act
from . import _scalars_as_work_dtype, elementwise_cost, launch_elementwise


def _launch(fn, operands, out_dtype: DType, work: DType | None = None) -> Tensor:
    work = out_dtype if work is None else work
    return launch_elementwise(fn, _scalars_as_work_dtype(list(operands), work), out_dtype, work)


def _tensors_cost(*operands_then_dtype) -> Cost:
    *operands, out_dtype = operands_then_dtype
    return elementwise_cost([o for o in operands if isinstance(o, Tensor)], out_dtype)


@implements("gelu")
def _gelu(call) -> Tensor:
    return _launch(act.gelu_tanh if call.approximate == "tanh" else act.gelu, [call.x], call.out_dtype)


def _parametrised(name: str, fn):
    @implements(name)
    def run(call) -> Tensor:   # x, then the activation's parameters (scalar operands of the kernel)
        return _launch(fn, list(call.values()), call.out_dtype)
    declares(name)(_activation_cost)


def _activation_cost(call) -> Cost:
    return elementwise_cost([call.x], call.out_dtype)


for _name in ("erf", "mish", "hardswish", "hardsigmoid", "softplus", "elu", "leaky_relu"):
    _parametrised(_name, act.FUNCTIONS[_name])
declares("gelu")(_activation_cost)


@implements("glu")
def _glu(x: Tensor, dim: int, out_dtype: DType) -> Tensor:
    half = x.shape[dim] // 2
    lead = (slice(None),) * dim
    return _launch(act.glu, [x[lead + (slice(0, half),)], x[lead + (slice(half, None),)]], out_dtype)


def _glu_cost(x: Tensor, dim: int, out_dtype: DType) -> Cost:
    shape = list(x.shape)
    shape[dim] //= 2
    return elementwise_cost([x], out_dtype, shape=tuple(shape))


declares("glu")(_glu_cost)


@implements("masked_fill")
def _masked_fill(x: Tensor, mask: Tensor, value) -> Tensor:
    return _launch(act.masked_fill, [x, mask, value], x.dtype)


@implements("lerp")
def _lerp(start, end, weight, dtype: DType) -> Tensor:
    return _launch(act.lerp, [start, end, weight], dtype)


@implements("addcmul")
def _addcmul(x, tensor1, tensor2, value, dtype: DType) -> Tensor:
    return _launch(act.addcmul, [x, tensor1, tensor2, value], dtype)


@implements("addcdiv")
def _addcdiv(x, tensor1, tensor2, value, dtype: DType) -> Tensor:
    return _launch(act.addcdiv, [x, tensor1, tensor2, value], dtype)


@implements("nan_to_num")
def _nan_to_num(x: Tensor, nan: float, posinf: float, neginf: float) -> Tensor:
    return _launch(act.nan_to_num, [x, nan, posinf, neginf], x.dtype)


declares("masked_fill")(lambda x, mask, value: elementwise_cost([x, mask, value], x.dtype))
declares("nan_to_num")(lambda x, *values: elementwise_cost([x], x.dtype))
for _name in ("lerp", "addcmul", "addcdiv"):
    declares(_name)(_tensors_cost)
