"""matmul with the Array API's rules (1-D operands, broadcast batch dims)."""
from __future__ import annotations

import numpy as np

from .. import reference
from ..dispatch import register
from ..errors import NotSupportedError, ShapeError
from ..promotion import result_type
from ..spec import OpSpec, define, front_end, params
from ..tensor import Tensor
from ._common import check_category, common_device, compute_dtype, oracle_dtype, wrap


def _matmul_shape(a: tuple, b: tuple) -> tuple:
    if not a or not b:
        raise ShapeError("matmul does not take 0-d operands")
    ka = a[-1]
    kb = b[0] if len(b) == 1 else b[-2]
    if ka != kb:
        raise ShapeError(f"matmul of shapes {a} and {b}: inner sizes {ka} and {kb} differ")
    from ..layout import broadcast_shapes
    batch = broadcast_shapes(a[:-2], b[:-2])
    rows = a[-2:-1] if len(a) > 1 else ()
    cols = b[-1:] if len(b) > 1 else ()
    return batch + rows + cols


def _check(call, facts) -> None:
    x1, x2 = call.x1, call.x2
    if not isinstance(x1, Tensor) or not isinstance(x2, Tensor):
        raise ShapeError("matmul takes two tensors")
    facts.device = common_device(x1, x2)
    facts.out_dtype = result_type(x1, x2)
    check_category("matmul", facts.out_dtype, "numeric")
    for what, operand in (("x1", x1), ("x2", x2)):  # refused alike on every device: the kernels
        if operand.dtype.is_integer:                  # compute floating products only
            raise NotSupportedError(
                f"matmul of integer tensors is refused on every device: matmul does not take "
                f"{operand.dtype.name} ({what}); it computes products of float16, bfloat16, float32 and "
                f"float64 (complex too on the cpu); cast with .float()")
    facts.shape = _matmul_shape(x1.shape, x2.shape)


matmul = front_end(define(OpSpec("matmul", params("x1", "x2"), _check, doc="""x1 @ x2 by the Array API's rules
(a 1-D x1 is a row, a 1-D x2 a column; batch dims broadcast).""")))


def _matmul_reference(x1, x2, precision=reference.NATIVE):
    dtype = result_type(x1, x2)
    compute = oracle_dtype(dtype) if precision == reference.FLOAT64 else compute_dtype(dtype)
    return np.matmul(x1.numpy().astype(compute, copy=False), x2.numpy().astype(compute, copy=False))


@register("matmul", "cpu")
def _matmul_cpu(call) -> Tensor:
    return wrap(_matmul_reference(call.x1, call.x2), call.out_dtype)


reference.register("matmul", _matmul_reference)

__all__ = ["matmul"]
