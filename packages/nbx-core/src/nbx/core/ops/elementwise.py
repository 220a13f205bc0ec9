"""Elementwise ops: every Array API elementwise function, where, clamp and casts.

Each op is one row of a table: its numpy reference, the dtypes it accepts (an Array API category)
and how its result dtype follows from the promoted input dtype. The front-ends, the CPU
implementation and the float64 oracle are all generated from that row.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

import numpy as np

from .. import dtypes, layout, reference
from ..dispatch import implementation, register
from ..dtypes import DType
from ..errors import DTypeError
from ..promotion import check_scalar, result_type
from ..spec import OpSpec, define, params
from ..tensor import Tensor
from ._common import (SCALARS, check_category, common_device, compute_dtype, default_float_for,
                      host_operand, oracle_dtype, wrap)


@dataclass(frozen=True)
class Elementwise:
    name: str
    ref: Callable
    accepts: str   # dtype category (ops._common.CATEGORIES)
    result: str    # same | bool | float (integers compute in the default float) | real (complex -> real)

    def out_dtype(self, dtype: DType) -> DType:
        if self.result == "bool":
            return dtypes.bool_
        if self.result == "float":
            return default_float_for(dtype)
        if self.result == "real" and dtype.is_complex:
            return dtypes.float32 if dtype is dtypes.complex64 else dtypes.float64
        return dtype

    def work_dtype(self, dtype: DType) -> DType:
        """The dtype operands are brought to before the reference runs."""
        return default_float_for(dtype) if self.result == "float" else dtype


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


UNARY = [Elementwise(*row) for row in [
    ("abs", np.abs, "numeric", "real"), ("acos", np.arccos, "numeric", "float"),
    ("acosh", np.arccosh, "numeric", "float"), ("asin", np.arcsin, "numeric", "float"),
    ("asinh", np.arcsinh, "numeric", "float"), ("atan", np.arctan, "numeric", "float"),
    ("atanh", np.arctanh, "numeric", "float"), ("bitwise_invert", np.invert, "integer_or_bool", "same"),
    ("ceil", np.ceil, "real", "same"), ("conj", np.conj, "numeric", "same"),
    ("cos", np.cos, "numeric", "float"), ("cosh", np.cosh, "numeric", "float"),
    ("exp", np.exp, "numeric", "float"), ("expm1", np.expm1, "numeric", "float"),
    ("floor", np.floor, "real", "same"), ("imag", np.imag, "complex", "real"),
    ("isfinite", np.isfinite, "numeric", "bool"), ("isinf", np.isinf, "numeric", "bool"),
    ("isnan", np.isnan, "numeric", "bool"), ("log", np.log, "numeric", "float"),
    ("log1p", np.log1p, "numeric", "float"), ("log2", np.log2, "numeric", "float"),
    ("log10", np.log10, "numeric", "float"), ("logical_not", np.logical_not, "any", "bool"),
    ("negative", np.negative, "numeric", "same"), ("positive", np.positive, "numeric", "same"),
    ("real", np.real, "numeric", "real"), ("reciprocal", np.reciprocal, "numeric", "float"),
    ("round", np.round, "numeric", "same"), ("sign", np.sign, "numeric", "same"),
    ("signbit", np.signbit, "real", "bool"), ("sin", np.sin, "numeric", "float"),
    ("sinh", np.sinh, "numeric", "float"), ("sqrt", np.sqrt, "numeric", "float"),
    ("square", np.square, "numeric", "same"), ("tan", np.tan, "numeric", "float"),
    ("tanh", np.tanh, "numeric", "float"), ("trunc", np.trunc, "real", "same"),
    # beyond the standard: what inference graphs use
    ("exp2", np.exp2, "numeric", "float"), ("rsqrt", lambda x: 1 / np.sqrt(x), "numeric", "float"),
    ("sigmoid", _sigmoid, "numeric", "float"), ("silu", lambda x: x * _sigmoid(x), "numeric", "float"),
    ("relu", lambda x: np.maximum(x, 0), "real", "same"),
]]

BINARY = [Elementwise(*row) for row in [
    ("add", np.add, "numeric", "same"), ("subtract", np.subtract, "numeric", "same"),
    ("multiply", np.multiply, "numeric", "same"), ("divide", np.true_divide, "numeric", "float"),
    ("floor_divide", np.floor_divide, "real", "same"), ("remainder", np.remainder, "real", "same"),
    ("pow", np.power, "numeric", "same"), ("atan2", np.arctan2, "real", "float"),
    ("hypot", np.hypot, "real", "float"), ("copysign", np.copysign, "real", "float"),
    ("logaddexp", np.logaddexp, "real", "float"), ("nextafter", np.nextafter, "real_floating", "same"),
    ("maximum", np.maximum, "real", "same"), ("minimum", np.minimum, "real", "same"),
    ("bitwise_and", np.bitwise_and, "integer_or_bool", "same"),
    ("bitwise_or", np.bitwise_or, "integer_or_bool", "same"),
    ("bitwise_xor", np.bitwise_xor, "integer_or_bool", "same"),
    ("bitwise_left_shift", np.left_shift, "integer", "same"),
    ("bitwise_right_shift", np.right_shift, "integer", "same"),
    ("equal", np.equal, "any", "bool"), ("not_equal", np.not_equal, "any", "bool"),
    ("greater", np.greater, "real", "bool"), ("greater_equal", np.greater_equal, "real", "bool"),
    ("less", np.less, "real", "bool"), ("less_equal", np.less_equal, "real", "bool"),
    ("logical_and", np.logical_and, "any", "bool"), ("logical_or", np.logical_or, "any", "bool"),
    ("logical_xor", np.logical_xor, "any", "bool"),
]]

OPS: dict[str, Elementwise] = {op.name: op for op in UNARY + BINARY}


def _reference(op: Elementwise):
    def run(*operands, precision=reference.NATIVE):
        dtype = result_type(*operands)
        work = op.work_dtype(dtype)
        if op.name == "nextafter":  # defined by the dtype's own spacing: computed in that dtype
            compute = work.host
        else:
            compute = oracle_dtype(work) if precision == reference.FLOAT64 else compute_dtype(work)
        args = [host_operand(o, compute) for o in operands]
        with np.errstate(all="ignore"):
            return op.ref(*args)
    return run


def _check(call, facts) -> None:
    """The rules every elementwise op shares (its spec's check): one device, the promoted dtype in
    the op's category, shapes that broadcast; the output dtype by the op's row."""
    op, operands = _ROWS[call.spec.name], call.values()
    facts.device = common_device(*operands)
    dtype = result_type(*operands)
    check_category(op.name, dtype, op.accepts)
    if op.name == "pow" and dtype.is_integer and any(isinstance(o, int) and o < 0 for o in operands[1:]):
        raise DTypeError("pow of an integer tensor to a negative integer power is not representable")
    facts.shape = layout.broadcast_shapes(*(o.shape for o in operands if isinstance(o, Tensor)))
    facts.op, facts.out_dtype, facts.work_dtype = op, op.out_dtype(dtype), op.work_dtype(dtype)


def _make_front_end(op: Elementwise):
    doc = f"Elementwise {op.name} (Array API semantics; accepts {op.accepts} dtypes)."
    op_spec = define(OpSpec(op.name, params("x") if op in UNARY else params("x1", "x2"), _check, doc=doc))
    call = op_spec.call
    if op in UNARY:
        def front_end(x):
            return call(x if isinstance(x, Tensor) else _as_tensor(x))
    else:
        def front_end(x1, x2):
            if isinstance(x1, Tensor) or isinstance(x2, Tensor):
                return call(x1, x2)
            return call(_as_tensor(x1), x2)
    front_end.__name__ = front_end.__qualname__ = op.name
    front_end.__doc__, front_end.spec = doc, op_spec
    return front_end


def _as_tensor(value) -> Tensor:
    """An elementwise op of Python scalars alone: the first becomes a tensor (asarray's dtype)."""
    from .creation import asarray
    return asarray(value)


def _check_broadcast(*operands) -> None:
    """Shapes that do not broadcast: the same ShapeError the kernels raise, not numpy's ValueError."""
    layout.broadcast_shapes(*(o.shape for o in operands if isinstance(o, Tensor)))


def _cpu(call) -> Tensor:
    return wrap(_REFS[call.spec.name](*call.values()), call.out_dtype)


_REFS = {}
_ROWS = OPS
for _op in OPS.values():
    _REFS[_op.name] = _reference(_op)
    reference.register(_op.name, _REFS[_op.name])
    register(_op.name, "cpu")(_cpu)
    globals()[_op.name] = _make_front_end(_op)


# ---- where, clamp, casts -------------------------------------------------------------------------
def where(condition, x1=None, x2=None):
    """x1 where condition, else x2; with the condition alone, nonzero(condition) (numpy's one-argument form)."""
    if x1 is None and x2 is None:
        from .gather import nonzero
        return nonzero(condition)
    if x1 is None or x2 is None:
        raise DTypeError("where takes a condition alone or with both x1 and x2")
    if not isinstance(condition, Tensor) or condition.dtype is not dtypes.bool_:
        raise DTypeError("where's condition must be a bool tensor")
    operands = (condition, x1, x2)
    device = common_device(*operands)
    dtype = result_type(*(o for o in (x1, x2)))
    return implementation("where", device)(condition, x1, x2, dtype)


def _where_reference(condition, x1, x2, precision=reference.NATIVE):
    dtype = result_type(x1, x2)
    compute = oracle_dtype(dtype) if precision == reference.FLOAT64 else dtype.host
    return np.where(host_operand(condition, np.dtype(bool)), host_operand(x1, compute), host_operand(x2, compute))


@register("where", "cpu")
def _where_cpu(condition, x1, x2, dtype: DType) -> Tensor:
    _check_broadcast(condition, x1, x2)
    return wrap(_where_reference(condition, x1, x2), dtype)


def clamp(x: Tensor, min=None, max=None) -> Tensor:
    """clip of the Array API: the result keeps x's dtype; bounds may be scalars or tensors."""
    check_category("clamp", x.dtype, "real")
    for bound in (min, max):
        if isinstance(bound, SCALARS):
            check_scalar(bound, x.dtype)
        elif bound is not None and result_type(x, bound) is not x.dtype:
            raise DTypeError(f"clamp bound of {bound.dtype.name} would change {x.dtype.name}'s dtype")
    common_device(x, min, max)
    return implementation("clamp", x.device)(x, min, max)


def _clamp_reference(x, min=None, max=None, precision=reference.NATIVE):
    compute = oracle_dtype(x.dtype) if precision == reference.FLOAT64 else compute_dtype(x.dtype)
    out = host_operand(x, compute)
    if min is not None:
        out = np.maximum(out, host_operand(min, compute))
    if max is not None:
        out = np.minimum(out, host_operand(max, compute))
    return out


@register("clamp", "cpu")
def _clamp_cpu(x, min, max) -> Tensor:
    _check_broadcast(x, min, max)
    return wrap(_clamp_reference(x, min, max), x.dtype)


clip = clamp


def astype(x: Tensor, dtype, copy: bool = True) -> Tensor:
    """Cast: float -> int truncates toward zero; -> half and float8 round to nearest even."""
    dt = dtypes.as_dtype(dtype)
    if dt is x.dtype and not copy:
        return x
    return implementation("astype", x.device)(x, dt)


def _astype_reference(x, dtype, precision=reference.NATIVE):
    return x.numpy().astype(dtypes.as_dtype(dtype).host)


@register("astype", "cpu")
def _astype_cpu(x: Tensor, dtype: DType) -> Tensor:
    with np.errstate(all="ignore"):
        return wrap(_astype_reference(x, dtype), dtype)


reference.register("where", _where_reference)
reference.register("clamp", _clamp_reference)
reference.register("astype", _astype_reference)

__all__ = sorted(OPS) + ["where", "clamp", "clip", "astype", "OPS", "UNARY", "BINARY"]
