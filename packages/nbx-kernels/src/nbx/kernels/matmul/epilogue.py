"""linear and gated_linear on the kernel devices (the epilogues of nbx.core.ops.products).

For now each is the product followed by the elementwise ops of its epilogue, in the order of the
reference: activation(alpha * (x @ weight.T) + bias) + beta * residual, then the output cast.
"""
from __future__ import annotations

import nbx.core as nbx
from nbx.core.dtypes import DType
from nbx.core.tensor import Tensor

from ..registry import implements
from . import launch_matmul


def _activate(y: Tensor, activation) -> Tensor:
    if activation is None:
        return y
    if activation == "gelu_tanh":
        return nbx.gelu(y, approximate="tanh")
    return getattr(nbx, activation)(y)


@implements("linear")
def _linear(x: Tensor, weight: Tensor, bias, activation, residual, alpha: float, beta: float, dtype: DType) -> Tensor:
    y = launch_matmul(x, weight.mT, dtype)
    if alpha != 1.0:
        y = y * alpha
    if bias is not None:
        y = y + bias
    y = _activate(y, activation)
    if residual is not None:
        y = y + (residual * beta if beta != 1.0 else residual)
    return y if y.dtype is dtype else y.to(dtype=dtype)


@implements("gated_linear")
def _gated_linear(x: Tensor, w_gate: Tensor, w_up: Tensor, activation, dtype: DType) -> Tensor:
    y = _activate(launch_matmul(x, w_gate.mT, dtype), activation) * launch_matmul(x, w_up.mT, dtype)
    return y if y.dtype is dtype else y.to(dtype=dtype)
