"""Activations and the fused pointwise ops of inference graphs: front-ends and numpy references.

gelu (exact and tanh), erf, softplus, mish, elu, leaky_relu, hardswish, hardsigmoid, glu,
masked_fill, lerp, addcmul, addcdiv and nan_to_num, with torch's definitions. Integer inputs of the
floating functions compute in the default float dtype, as the elementwise table's do. The unary
activations are OpSpecs (nbx.core.spec: their implementations take one checked call); the other
ops' implementations receive the front-end's checked arguments followed by the output dtype
(masked_fill and nan_to_num keep x's dtype and receive none). The CPU implementation is the reference computed
in the op's compute dtype (float32 for half types), the oracle the same in float64.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes, layout, reference
from ..dispatch import implementation, register
from ..dtypes import DType
from ..errors import DTypeError, ShapeError
from ..promotion import check_scalar, result_type
from ..spec import OpSpec, define, front_end, params
from ..tensor import Tensor
from ._common import (check_category, common_device, compute_dtype, default_float_for,
                      host_operand, oracle_dtype, wrap)

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _compute(dtype: DType, precision) -> np.dtype:
    return oracle_dtype(dtype) if precision == reference.FLOAT64 else compute_dtype(dtype)


def _number(op: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DTypeError(f"{op}'s {name} must be a Python int or float, not {type(value).__name__}")
    return value


def _float_input(op: str, x) -> DType:
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op} takes a tensor, not {type(x).__name__}")
    check_category(op, x.dtype, "real")
    return default_float_for(x.dtype)


# ---- the references, in numpy ------------------------------------------------------------------
def _gelu(a, approximate):
    if approximate == "tanh":
        return 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3)))
    return 0.5 * a * (1 + _erf(a / math.sqrt(2)).astype(a.dtype))


def _softplus(a, beta=1.0, threshold=20.0):
    scaled = a * beta
    return np.where(scaled > threshold, a, np.log1p(np.exp(scaled)) / beta)


def _hardsigmoid(a):
    return np.clip(a + 3, 0, 6) / 6


_UNARY = {  # name -> (reference of a host array and the op's parameters, parameter names and defaults)
    "gelu": (_gelu, (("approximate", "none"),)),
    "erf": (lambda a: _erf(a).astype(a.dtype), ()),
    "softplus": (_softplus, (("beta", 1.0), ("threshold", 20.0))),
    "mish": (lambda a: a * np.tanh(_softplus(a)), ()),
    "elu": (lambda a, alpha: np.where(a > 0, a, alpha * np.expm1(a)), (("alpha", 1.0),)),
    "leaky_relu": (lambda a, slope: np.where(a > 0, a, a * slope), (("negative_slope", 0.01),)),
    "hardsigmoid": (_hardsigmoid, ()),
    "hardswish": (lambda a: a * _hardsigmoid(a), ()),
}


def _unary_reference(name):
    fn, spec = _UNARY[name]

    def ref(x, *params, precision=reference.NATIVE):
        params = list(params) + [default for _, default in spec[len(params):]]
        a = host_operand(x, _compute(default_float_for(x.dtype), precision))
        with np.errstate(all="ignore"):
            return fn(a, *params)
    return ref


def _check_unary(call, facts) -> None:
    """An activation's rules (its spec's check): a real tensor (integers compute in the default
    float), gelu's approximate named, every other parameter a Python number."""
    name = call.spec.name
    facts.out_dtype = _float_input(name, call.x)
    facts.device = call.x.device
    if name == "gelu":
        if call.approximate not in ("none", "tanh"):
            raise DTypeError(f"gelu's approximate must be 'none' or 'tanh', not {call.approximate!r}")
        return
    for p, _ in _UNARY[name][1]:
        _number(name, p, getattr(call, p))


def _unary_front_end(name):
    _, parameters = _UNARY[name]
    signature = ", ".join(f"{p}={d!r}" for p, d in parameters)
    return front_end(define(OpSpec(name, params("x", **dict(parameters)), _check_unary,
                                   doc=f"{name}(x{', ' + signature if signature else ''}) elementwise, as torch "
                                       f"defines it.")))


for _name in _UNARY:
    _ref = _unary_reference(_name)
    reference.register(_name, _ref)
    register(_name, "cpu")(lambda call, _ref=_ref: wrap(_ref(*call.values()), call.out_dtype))
    globals()[_name] = _unary_front_end(_name)


# ---- glu -----------------------------------------------------------------------------------------
def glu(x: Tensor, dim: int = -1) -> Tensor:
    """First half of x along dim times the sigmoid of the second half."""
    out_dtype = _float_input("glu", x)
    axis = layout.normalize_dim(dim, x.ndim)
    if x.shape[axis] % 2:
        raise ShapeError(f"glu halves dim {dim} of shape {x.shape}: its size {x.shape[axis]} is odd")
    return implementation("glu", x.device)(x, axis, out_dtype)


def _glu_reference(x, dim=-1, precision=reference.NATIVE):
    a, b = np.split(host_operand(x, _compute(default_float_for(x.dtype), precision)), 2, axis=dim)
    with np.errstate(all="ignore"):
        return a / (1 + np.exp(-b))


reference.register("glu", _glu_reference)
register("glu", "cpu")(lambda x, dim, out_dtype: wrap(_glu_reference(x, dim), out_dtype))


# ---- masked_fill, lerp, addcmul, addcdiv, nan_to_num --------------------------------------------
def masked_fill(x: Tensor, mask: Tensor, value) -> Tensor:
    """x with value where mask (a bool tensor broadcast to x's shape) is true; x's dtype."""
    if not isinstance(mask, Tensor) or mask.dtype is not dtypes.bool_:
        raise DTypeError("masked_fill's mask must be a bool tensor")
    if layout.broadcast_shapes(x.shape, mask.shape) != x.shape:
        raise ShapeError(f"masked_fill's mask of shape {mask.shape} does not broadcast to x's {x.shape}")
    if isinstance(value, Tensor):
        if value.ndim:
            raise ShapeError(f"masked_fill's value must be a scalar or a 0-d tensor, not shape {value.shape}")
    else:
        check_scalar(value, x.dtype)
    common_device(x, mask, value)
    return implementation("masked_fill", x.device)(x, mask, value)


def _masked_fill_reference(x, mask, value, precision=reference.NATIVE):
    compute = _compute(x.dtype, precision)
    return np.where(host_operand(mask, np.dtype(bool)), host_operand(value, compute), host_operand(x, compute))


def _float_operands(op: str, *operands) -> DType:
    dtype = result_type(*operands)
    check_category(op, dtype, "real_floating")
    common_device(*operands)
    return dtype


def lerp(start: Tensor, end: Tensor, weight) -> Tensor:
    """start + weight * (end - start), evaluated from the nearer end (exact at weights 0 and 1)."""
    dtype = _float_operands("lerp", start, end, weight)
    return implementation("lerp", common_device(start, end, weight))(start, end, weight, dtype)


def _lerp_reference(start, end, weight, precision=reference.NATIVE):
    compute = _compute(result_type(start, end, weight), precision)
    s, e, w = (host_operand(o, compute) for o in (start, end, weight))
    return np.where(np.abs(w) < 0.5, s + w * (e - s), e - (e - s) * (1 - w))


def _addc(name: str, divide: bool):
    def front_end(x: Tensor, tensor1: Tensor, tensor2: Tensor, value=1) -> Tensor:
        _number(name, "value", value)
        dtype = result_type(x, tensor1, tensor2, value)
        check_category(name, dtype, "real_floating" if divide else "real")
        device = common_device(x, tensor1, tensor2)
        return implementation(name, device)(x, tensor1, tensor2, value, dtype)

    def ref(x, tensor1, tensor2, value=1, precision=reference.NATIVE):
        compute = _compute(result_type(x, tensor1, tensor2, value), precision)
        a, b, c, v = (host_operand(o, compute) for o in (x, tensor1, tensor2, value))
        with np.errstate(all="ignore"):
            return a + v * (b / c if divide else b * c)

    front_end.__name__ = front_end.__qualname__ = name
    front_end.__doc__ = f"x + value * tensor1 {'/' if divide else '*'} tensor2, broadcast."
    reference.register(name, ref)
    register(name, "cpu")(lambda x, t1, t2, value, dtype: wrap(ref(x, t1, t2, value), dtype))
    return front_end


addcmul = _addc("addcmul", divide=False)
addcdiv = _addc("addcdiv", divide=True)


def nan_to_num(x: Tensor, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Tensor:
    """NaN -> nan, +inf -> posinf, -inf -> neginf (the dtype's extremes by default); x's dtype."""
    check_category("nan_to_num", x.dtype, "real")
    if x.dtype.kind != "float":
        return implementation("nan_to_num", x.device)(x, 0.0, 0.0, 0.0)
    info = dtypes.finfo(x.dtype)
    posinf = float(info.max) if posinf is None else _number("nan_to_num", "posinf", posinf)
    neginf = float(info.min) if neginf is None else _number("nan_to_num", "neginf", neginf)
    return implementation("nan_to_num", x.device)(x, _number("nan_to_num", "nan", nan), posinf, neginf)


def _nan_to_num_reference(x, nan=0.0, posinf=None, neginf=None, precision=reference.NATIVE):
    a = host_operand(x, _compute(x.dtype, precision))
    return np.nan_to_num(a, nan=nan, posinf=posinf, neginf=neginf) if a.dtype.kind == "f" else a


reference.register("masked_fill", _masked_fill_reference)
register("masked_fill", "cpu")(lambda x, mask, value: wrap(_masked_fill_reference(x, mask, value), x.dtype))
reference.register("lerp", _lerp_reference)
register("lerp", "cpu")(lambda start, end, weight, dtype: wrap(_lerp_reference(start, end, weight), dtype))
reference.register("nan_to_num", _nan_to_num_reference)
register("nan_to_num", "cpu")(lambda x, *values: wrap(_nan_to_num_reference(x, *values), x.dtype))

__all__ = list(_UNARY) + ["glu", "masked_fill", "lerp", "addcmul", "addcdiv", "nan_to_num"]
