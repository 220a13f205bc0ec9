"""The matrix products of inference graphs: linear, addmm, bmm, baddbmm, gated_linear.

linear(x, weight, bias) reads weight in [out, in] layout, as checkpoints store it, and is
x @ weight.T + bias over any leading dims of x. Its keywords are the epilogue a kernel fuses into
the product's store (one pass over the output):

    y = activation(alpha * (x @ weight.T) + bias) + beta * residual

bias is [out] or any shape that broadcasts to the result (a per-row bias [rows, out] of any number
of rows); residual broadcasts the same way; activation is None, "relu", "gelu", "gelu_tanh" or
"silu". gated_linear(x, w_gate, w_up) is the gated pair of a SwiGLU MLP,
activation(x @ w_gate.T) * (x @ w_up.T), which a kernel computes from one pass over x.
Both take norm=(weight, eps): the product of rms_norm(x, (in,), weight, eps) instead of x, which a
kernel fuses into its loads of x (a decode step's norm before its projections: one launch less).
addmm and baddbmm are torch's beta * input + alpha * (mat1 @ mat2) and bmm its batched product of
3-D operands of equal batch; they and linear share one implementation per backend ("linear"
receives every epilogue, addmm is linear with residual=input). einsum (einsum.py) contracts
through matmul.

The CPU implementations are the references (float32 for half types, rounded once to the output
dtype); the oracle computes them in float64. The output dtype is the promoted dtype of the
operands (out_dtype overrides it: the fused output cast).
"""
from __future__ import annotations

import math

import numpy as np

from .. import reference
from ..dispatch import implementation, register
from ..dtypes import DType, as_dtype
from ..errors import ArgumentError, DTypeError, ShapeError
from ..layout import broadcast_shapes
from ..promotion import result_type
from ..spec import OpSpec, define, params
from ..tensor import Tensor
from ._common import check_category, common_device, compute_dtype, oracle_dtype, wrap
from .linalg import _matmul_shape, matmul

ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")


def _tensors(op: str, **named) -> None:
    for name, value in named.items():
        if not isinstance(value, Tensor):
            raise ShapeError(f"{op}'s {name} is a tensor, not {type(value).__name__}")


def _number(op: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ArgumentError(f"{op}'s {name} is a finite Python int or float, got {value!r}")
    return float(value)


def _activation(op: str, activation):
    if activation not in ACTIVATIONS:
        raise ArgumentError(f"{op}'s activation is one of {', '.join(map(str, ACTIVATIONS))}, got {activation!r}")
    return activation


def _out_dtype(op: str, operands, out_dtype) -> DType:
    dtype = result_type(*operands) if out_dtype is None else as_dtype(out_dtype)
    check_category(op, result_type(*operands), "real_floating")
    check_category(op, dtype, "real_floating")
    return dtype


INPUT_PRECISIONS = ("ieee", "tf32", "tf32x3")


def _input_precision(op: str, name, operands: DType):
    if name is None:
        return None
    if name not in INPUT_PRECISIONS:
        raise ArgumentError(f"{op}'s input_precision is one of {', '.join(INPUT_PRECISIONS)}, got {name!r}")
    if operands.name != "float32":
        raise ArgumentError(f"{op}'s input_precision says how float32 operands are multiplied; "
                            f"{operands.name} operands take none")
    return name


def round_tf32(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 (10 mantissa bits), to nearest with ties away from zero
    (cvt.rna.tf32.f32): infinities and NaNs kept."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    bits = a.view(np.uint32)
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(a), rounded, a)


def _addend(op: str, name: str, t, shape: tuple) -> None:
    """bias or residual: a tensor broadcast to the result's shape (never the other way)."""
    if t is None:
        return
    _tensors(op, **{name: t})
    try:
        if broadcast_shapes(t.shape, shape) == shape:
            return
    except ShapeError:
        pass
    raise ShapeError(f"{op}'s {name} of shape {t.shape} does not broadcast to the result's {shape}")


def _check_norm(op: str, call, facts, x: Tensor, batched: bool = False) -> None:
    """A fused RMS norm's weight ([in], a float tensor on x's device) and eps (torch's rule: None
    is x's machine epsilon), as the facts norm_epsilon."""
    w = call.norm_weight
    facts.norm_epsilon = None
    if w is None:
        if call.norm_eps is not None:
            raise ArgumentError(f"{op}'s norm_eps is the eps of a fused norm: give norm_weight too")
        return
    from .norms import _rms_eps
    _tensors(op, norm_weight=w)
    if batched:
        raise ShapeError(f"{op}'s fused norm (norm=) takes a 2-D weight: a batched product normalizes nothing")
    if w.shape != (x.shape[-1],):
        raise ShapeError(f"{op}'s norm weight is [in={x.shape[-1]}], got shape {w.shape}")
    check_category(op, w.dtype, "real_floating")
    common_device(x, w)
    facts.norm_epsilon = _rms_eps(x, call.norm_eps)


def _split_norm(op: str, norm) -> tuple:
    """norm=(weight, eps) as (norm_weight, norm_eps); None as (None, None)."""
    if norm is None:
        return None, None
    if not isinstance(norm, tuple) or len(norm) != 2:
        raise ArgumentError(f"{op}'s norm is (weight, eps), got {norm!r}")
    weight, eps = norm
    return weight, None if eps is None else _number(op, "norm's eps", eps)


def _check_linear_call(call, facts) -> None:
    """linear's rules, once a signature: the operands' shapes, dtypes and device, the epilogue's
    options (alpha and beta by value: the int8 product refuses any but 1)."""
    x, weight, bias, residual = call.x, call.weight, call.bias, call.residual
    _tensors("linear", x=x, weight=weight)
    _check_linear(x, tuple(weight.shape), bias, residual)
    alpha, beta = _number("linear", "alpha", call.alpha), _number("linear", "beta", call.beta)
    activation = _activation("linear", call.activation)
    if x.dtype.name == "int8" or weight.dtype.name == "int8":
        if x.dtype.name != "int8" or weight.dtype.name != "int8":
            raise DTypeError(f"linear multiplies int8 by int8 only, got {x.dtype.name} and {weight.dtype.name}")
        if (call.out_dtype is not None and as_dtype(call.out_dtype).name != "int32") or bias is not None \
                or residual is not None or activation is not None or alpha != 1.0 or beta != 1.0 \
                or call.input_precision is not None or call.norm_weight is not None:
            raise ArgumentError("linear of int8 operands gives their int32 product alone: no out_dtype but int32, no "
                                "bias, activation, residual, alpha, beta, input_precision or norm")
        facts.norm_epsilon = None
        facts.device = common_device(x, weight)
        facts.result_dtype = facts.compute_dtype = as_dtype("int32")
        facts.precision = None
        return
    operands = [t for t in (x, weight, bias, residual) if t is not None]
    facts.device = common_device(*operands)
    facts.result_dtype = _out_dtype("linear", operands, call.out_dtype)
    facts.compute_dtype = compute_dtype(facts.result_dtype)
    facts.precision = _input_precision("linear", call.input_precision, result_type(x, weight))
    _check_norm("linear", call, facts, x, batched=weight.ndim == 3)


_LINEAR = define(OpSpec("linear", params("x", "weight", bias=None, activation=None, residual=None, alpha=1.0, beta=1.0,
                                         out_dtype=None, input_precision=None, norm_weight=None, norm_eps=None),
                        _check_linear_call, by_value=("alpha", "beta", "norm_eps")))
_linear_call = _LINEAR.call


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, *, activation=None, residual=None,
           alpha=1.0, beta=1.0, out_dtype=None, input_precision=None, norm=None) -> Tensor:
    """activation(alpha * (x @ weight.T) + bias) + beta * residual; weight is [out, in], a float
    tensor or a grouped int4 QuantizedTensor (W4A16: dequantized inside the product).

    input_precision (float32 operands only, asked per call): "ieee" (the default: float32
    products), "tf32" (operands rounded to TF32, to nearest with ties away from zero, then
    multiplied exactly and summed in float32) or "tf32x3" (each operand split into two TF32
    parts, three products: close to float32 at TF32 speed).

    norm=(weight [in], eps): the product of rms_norm(x, (in,), weight, eps) (rounded to x's dtype
    as rms_norm stores it), fused into the kernel's loads of x; eps None is x's machine epsilon.

    A dense weight's calls go through linear's OpSpec (checked once a signature: the operands'
    layouts, alpha and beta by value, every other option by value); the implementation receives
    the call, its facts result_dtype and precision."""
    if type(weight) is not Tensor:
        from ..quant import QuantizedTensor
        if isinstance(weight, QuantizedTensor):
            if norm is not None:
                from ..errors import NotSupportedError
                raise NotSupportedError("linear's fused norm (norm=) with an int4 weight is not done: rms_norm x first")
            _int4_precision(x, input_precision)
            return _linear_int4(x, weight, bias, activation, residual, alpha, beta, out_dtype)
    if norm is not None:
        return _linear_call(x, weight, bias, activation, residual, alpha, beta, out_dtype, input_precision,
                            *_split_norm("linear", norm))
    if type(alpha) is float and type(beta) is float and alpha == 1.0 and beta == 1.0 and out_dtype is None \
            and input_precision is None:   # the common call: its signature without the defaults spelled out
        return _linear_call(x, weight, bias, activation, residual)
    return _linear_call(x, weight, bias, activation, residual, alpha, beta, out_dtype, input_precision)


def _int4_precision(x, input_precision) -> None:
    """An int4 weight is dequantized to x's dtype and multiplied as that dtype (float32: IEEE), so
    input_precision is refused where the dense product would refuse it, and TF32 is not done."""
    _tensors("linear", x=x)
    if _input_precision("linear", input_precision, x.dtype) not in (None, "ieee"):
        from ..errors import NotSupportedError
        raise NotSupportedError(f"linear with an int4 weight multiplies float32 x as IEEE float32; "
                                f"input_precision={input_precision!r} is not supported yet")


def _check_linear(x: Tensor, w_shape: tuple, bias, residual) -> None:
    """x [..., in] against a weight [out, in] (or a batch [B, rows, in] against [B, out, in]: addmm
    and baddbmm lend their products to linear); bias and residual broadcast to the result."""
    batched = len(w_shape) == 3 and x.ndim == 3 and x.shape[0] == w_shape[0]
    if len(w_shape) != 2 and not batched:
        raise ShapeError(f"linear's weight is [out, in] (2-D), got shape {w_shape}")
    if x.ndim < 1 or x.shape[-1] != w_shape[-1]:
        raise ShapeError(f"linear of x {x.shape} with weight {w_shape}: x's last dim must be in={w_shape[-1]}")
    shape = tuple(x.shape[:-1]) + (w_shape[-2],)
    _addend("linear", "bias", bias, shape)
    _addend("linear", "residual", residual, shape)


def _linear_int4(x, weight, bias, activation, residual, alpha, beta, out_dtype) -> Tensor:
    _tensors("linear", x=x)
    _check_linear(x, tuple(weight.shape), bias, residual)
    operands = [t for t in (x, bias, residual) if t is not None]
    device = common_device(*operands, weight.qweight)
    dtype = _out_dtype("linear", operands, out_dtype)
    return implementation("linear_int4", device)(x, weight, bias, _activation("linear", activation), residual,
                                                 _number("linear", "alpha", alpha), _number("linear", "beta", beta),
                                                 dtype)


def _check_gated(call, facts) -> None:
    x, w_gate, w_up = call.x, call.w_gate, call.w_up
    _tensors("gated_linear", x=x, w_gate=w_gate, w_up=w_up)
    if w_gate.ndim != 2 or w_gate.shape != w_up.shape:
        raise ShapeError(f"gated_linear's weights are two [out, in] matrices of one shape, got {w_gate.shape} "
                         f"and {w_up.shape}")
    if x.ndim < 1 or x.shape[-1] != w_gate.shape[1]:
        raise ShapeError(f"gated_linear of x {x.shape} with weights {w_gate.shape}: x's last dim must be "
                         f"in={w_gate.shape[1]}")
    if call.activation is None:
        raise ArgumentError("gated_linear's activation names the gate's function (silu for SwiGLU); None is not one")
    _activation("gated_linear", call.activation)
    facts.device = common_device(x, w_gate, w_up)
    facts.result_dtype = _out_dtype("gated_linear", [x, w_gate, w_up], call.out_dtype)
    facts.compute_dtype = compute_dtype(facts.result_dtype)
    _check_norm("gated_linear", call, facts, x)


_gated_call = define(OpSpec("gated_linear", params("x", "w_gate", "w_up", activation="silu", out_dtype=None,
                                                   norm_weight=None, norm_eps=None),
                            _check_gated, by_value=("norm_eps",))).call


def gated_linear(x: Tensor, w_gate: Tensor, w_up: Tensor, activation="silu", out_dtype=None, *, norm=None) -> Tensor:
    """activation(x @ w_gate.T) * (x @ w_up.T): the gated pair of a SwiGLU (GeGLU) MLP, checked once
    a signature (the implementation reads call.result_dtype). norm=(weight, eps): of rms_norm(x)
    instead of x, as linear's."""
    from ..quant import QuantizedTensor
    if isinstance(w_gate, QuantizedTensor) or isinstance(w_up, QuantizedTensor):
        return _gated_int4(x, w_gate, w_up, activation, out_dtype, norm)
    if norm is None:
        return _gated_call(x, w_gate, w_up, activation, out_dtype)
    return _gated_call(x, w_gate, w_up, activation, out_dtype, *_split_norm("gated_linear", norm))


def _gated_int4(x, w_gate, w_up, activation, out_dtype, norm) -> Tensor:
    """The pair of two grouped int4 weights (W4A16), one launch over x on the kernel devices."""
    from ..errors import NotSupportedError
    from ..quant import QuantizedTensor
    if not (isinstance(w_gate, QuantizedTensor) and isinstance(w_up, QuantizedTensor)):
        dense = w_up if isinstance(w_gate, QuantizedTensor) else w_gate
        raise NotSupportedError(f"gated_linear of one int4 (QuantizedTensor) weight and one {type(dense).__name__}: "
                                f"both weights are int4 or both dense")
    if norm is not None:
        raise NotSupportedError("gated_linear's fused norm (norm=) with int4 weights is not done: rms_norm x first")
    _tensors("gated_linear", x=x)
    if tuple(w_gate.shape) != tuple(w_up.shape):
        raise ShapeError(f"gated_linear's weights are two [out, in] matrices of one shape, got {tuple(w_gate.shape)} "
                         f"and {tuple(w_up.shape)}")
    if x.ndim < 1 or x.shape[-1] != w_gate.shape[1]:
        raise ShapeError(f"gated_linear of x {x.shape} with weights {tuple(w_gate.shape)}: x's last dim must be "
                         f"in={w_gate.shape[1]}")
    if activation is None:
        raise ArgumentError("gated_linear's activation names the gate's function (silu for SwiGLU); None is not one")
    device = common_device(x, w_gate.qweight, w_up.qweight)
    dtype = _out_dtype("gated_linear", [x], out_dtype)
    return implementation("gated_linear_int4", device)(x, w_gate, w_up, _activation("gated_linear", activation), dtype)


FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
SCALE_BLOCK = 128   # DeepSeek-V3's float8 layout: x scaled per row and 128 of K, the weight per 128 x 128


def scaled_linear(x: Tensor, weight: Tensor, scale_x: Tensor, scale_w: Tensor, bias: Tensor | None = None, *,
                  activation=None, residual=None, out_dtype="bfloat16") -> Tensor:
    """(x @ weight.T) * scale_x * scale_w (+ bias, activation, residual as linear's): float8
    operands with float32 scales, one a tensor (size 1) or one a row: scale_x [rows] (or
    [rows, 1]) of x's rows, scale_w [out] (or [out, 1]) of the weight's, as torch._scaled_mm
    takes them; or DeepSeek-V3's block scales, scale_x [rows, ceil(in / 128)] (a row's 128 values
    of K) and scale_w [ceil(out / 128), ceil(in / 128)] (128 x 128 blocks of the weight), applied
    to each block's partial product. The product accumulates in float32; out_dtype is bfloat16
    unless asked."""
    _tensors("scaled_linear", x=x, weight=weight, scale_x=scale_x, scale_w=scale_w)
    if x.dtype.name not in FLOAT8 or weight.dtype.name not in FLOAT8:
        raise DTypeError(f"scaled_linear multiplies float8 operands, got {x.dtype.name} and {weight.dtype.name}")
    if weight.ndim != 2 or x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise ShapeError(f"scaled_linear of x {x.shape} with weight {weight.shape} (weight [out, in], x [..., in])")
    rows = math.prod(x.shape[:-1])
    k_blocks = -(-x.shape[-1] // SCALE_BLOCK)
    blocks = {"scale_x": (rows, k_blocks), "scale_w": (-(-weight.shape[0] // SCALE_BLOCK), k_blocks)}
    block_scaled = scale_x.ndim == 2 and scale_w.ndim == 2 and tuple(scale_w.shape) == blocks["scale_w"]
    for name, scale, count in (("scale_x", scale_x, rows), ("scale_w", scale_w, weight.shape[0])):
        if scale.dtype.name != "float32":
            raise DTypeError(f"scaled_linear's {name} is float32, got {scale.dtype.name}")
        if block_scaled:
            if tuple(scale.shape) != blocks[name]:
                raise ShapeError(f"scaled_linear's block-scaled {name} is {blocks[name]} (128-wide blocks of K"
                                 f"{', 128 x 128 of the weight' if name == 'scale_w' else ''}), got {scale.shape}")
        elif scale.size not in (1, count) or (scale.size == count and scale.ndim > 1 and scale.shape[-1] != 1):
            raise ShapeError(f"scaled_linear's {name} of shape {scale.shape} is neither one scale nor one for each of "
                             f"the {count} rows it scales (nor 128-block scales {blocks[name]})")
    shape = tuple(x.shape[:-1]) + (weight.shape[0],)
    _addend("scaled_linear", "bias", bias, shape)
    _addend("scaled_linear", "residual", residual, shape)
    device = common_device(*(t for t in (x, weight, scale_x, scale_w, bias, residual) if t is not None))
    dtype = as_dtype(out_dtype)
    check_category("scaled_linear", dtype, "real_floating")
    flat = [s.contiguous() if block_scaled else s.reshape(-1).contiguous() for s in (scale_x, scale_w)]
    return implementation("scaled_linear", device)(x, weight, *flat, bias, _activation("scaled_linear", activation),
                                                   residual, dtype)


def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta=1.0, alpha=1.0) -> Tensor:  # noqa: A002
    """beta * input + alpha * (mat1 @ mat2), mat1 and mat2 2-D, input broadcast to the result."""
    _tensors("addmm", input=input, mat1=mat1, mat2=mat2)
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise ShapeError(f"addmm multiplies two matrices, got shapes {mat1.shape} and {mat2.shape}")
    return _add_product("addmm", input, mat1, mat2, beta, alpha)


def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta=1.0, alpha=1.0) -> Tensor:  # noqa: A002
    """beta * input + alpha * (batch1 @ batch2) over a batch of equal size in both (3-D)."""
    _tensors("baddbmm", input=input, batch1=batch1, batch2=batch2)
    _check_bmm("baddbmm", batch1, batch2)
    return _add_product("baddbmm", input, batch1, batch2, beta, alpha)


def _add_product(op, input, x1, x2, beta, alpha):  # noqa: A002
    shape = _matmul_shape(x1.shape, x2.shape)
    _addend(op, "input", input, shape)
    beta, alpha = _number(op, "beta", beta), _number(op, "alpha", alpha)
    common_device(input, x1, x2)
    dtype = _out_dtype(op, [input, x1, x2], None)
    # linear's weight is [out, in]: mat2 is read through its transpose, a view
    return _linear_call(x1, x2.mT, None, None, None if beta == 0 else input, alpha, beta, dtype)


def _check_bmm(op, x1, x2):
    if x1.ndim != 3 or x2.ndim != 3 or x1.shape[0] != x2.shape[0]:
        raise ShapeError(f"{op} multiplies two 3-D batches of equal size, got shapes {x1.shape} and {x2.shape}")


def bmm(x1: Tensor, x2: Tensor) -> Tensor:
    """The batched product of two 3-D tensors of equal batch size (no broadcasting)."""
    _tensors("bmm", x1=x1, x2=x2)
    _check_bmm("bmm", x1, x2)
    return matmul(x1, x2)


# ---- references ------------------------------------------------------------------------------
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def apply_activation(a: np.ndarray, activation) -> np.ndarray:
    """The epilogue's activation on a host array (the definitions of nbx's elementwise ops)."""
    if activation is None:
        return a
    with np.errstate(all="ignore"):
        if activation == "relu":
            return np.maximum(a, 0)
        if activation == "silu":
            return a / (1 + np.exp(-a))
        if activation == "gelu_tanh":
            return 0.5 * a * (1 + np.tanh(_SQRT_2_OVER_PI * (a + 0.044715 * a ** 3)))
        erf = np.vectorize(math.erf, otypes=[np.float64])
        return 0.5 * a * (1 + erf(a / math.sqrt(2)).astype(a.dtype))


def _host(t, compute):
    return None if t is None else t.numpy().astype(compute, copy=False)


def _compute(dtype, precision):
    return oracle_dtype(dtype) if precision == reference.FLOAT64 else compute_dtype(dtype)


def _normed(x, norm, compute, precision):
    """x as rms_norm(x, (in,), weight, eps) gives it (norm: (weight, eps)), in compute; rounded to
    x's dtype first, as rms_norm stores it, except in the oracle's float64."""
    from .norms import _rms_norm_reference
    weight, eps = norm
    y = _rms_norm_reference(x, (x.shape[-1],), weight, eps, precision)
    if precision != reference.FLOAT64:
        y = y.astype(x.dtype.host)
    return y.astype(compute)


def _linear_reference(x, weight, bias=None, activation=None, residual=None, alpha=1.0, beta=1.0, out_dtype=None,
                      precision=reference.NATIVE, input_precision=None, norm=None):
    dtype = result_type(*(t for t in (x, weight, bias, residual) if t is not None))
    compute = np.dtype(np.int64) if dtype.kind == "int" else _compute(dtype, precision)   # int8 products: exact
    a, w = _host(x, compute) if norm is None else _normed(x, norm, compute, precision), _host(weight, compute)
    if input_precision == "tf32":  # the products of TF32-rounded operands, exact in float64
        a, w = round_tf32(a).astype(compute), round_tf32(w).astype(compute)
    y = alpha * np.matmul(a, np.swapaxes(w, -1, -2))
    if bias is not None:
        y = y + _host(bias, compute)
    y = apply_activation(y, activation)
    if residual is not None:
        y = y + beta * _host(residual, compute)
    return y


def _linear_int4_reference(x, weight, bias=None, activation=None, residual=None, alpha=1.0, beta=1.0,
                           out_dtype=None, precision=reference.NATIVE):
    """The int4 weight dequantized (float64 for the oracle, else x's compute dtype), then linear."""
    dtype = result_type(*(t for t in (x, bias, residual) if t is not None))
    dense = weight.dequantize("float64" if precision == reference.FLOAT64 else compute_dtype(dtype))
    return _linear_reference(x, dense, bias, activation, residual, alpha, beta, precision=precision)


def _gated_int4_reference(x, w_gate, w_up, activation="silu", out_dtype=None, precision=reference.NATIVE):
    """Both int4 weights dequantized (float64 for the oracle, else x's compute dtype), then gated_linear."""
    dense = "float64" if precision == reference.FLOAT64 else compute_dtype(x.dtype)
    return _gated_reference(x, w_gate.dequantize(dense), w_up.dequantize(dense), activation, precision=precision)


def _scaled_reference(x, weight, scale_x, scale_w, bias=None, activation=None, residual=None, out_dtype=None,
                      precision=reference.NATIVE):
    compute = np.float64 if precision == reference.FLOAT64 else np.float32
    k = x.shape[-1]
    sx, sw = _host(scale_x, compute), _host(scale_w, compute)
    if sx.ndim == 2 and sw.ndim == 2 and sw.shape[1] == -(-k // SCALE_BLOCK) and sx.shape[1] == sw.shape[1]:
        sx = np.repeat(sx, SCALE_BLOCK, axis=1)[:, :k]                                        # [rows, K]
        sw = np.repeat(np.repeat(sw, SCALE_BLOCK, axis=0), SCALE_BLOCK, axis=1)[:weight.shape[0], :k]   # [N, K]
    else:
        sx, sw = sx.reshape(-1, 1), sw.reshape(-1, 1)
    a = _host(x, compute).reshape(-1, k) * sx
    w = _host(weight, compute) * sw
    y = (a @ w.T).reshape(tuple(x.shape[:-1]) + (weight.shape[0],))
    if bias is not None:
        y = y + _host(bias, compute)
    y = apply_activation(y, activation)
    return y if residual is None else y + _host(residual, compute)


def _gated_reference(x, w_gate, w_up, activation="silu", out_dtype=None, precision=reference.NATIVE, norm=None):
    compute = _compute(result_type(x, w_gate, w_up), precision)
    a = _host(x, compute) if norm is None else _normed(x, norm, compute, precision)
    return apply_activation(np.matmul(a, _host(w_gate, compute).T), activation) * np.matmul(a, _host(w_up, compute).T)


def _addmm_reference(input, x1, x2, beta=1.0, alpha=1.0, precision=reference.NATIVE):  # noqa: A002
    compute = _compute(result_type(input, x1, x2), precision)
    product = alpha * np.matmul(_host(x1, compute), _host(x2, compute))
    return product if beta == 0 else beta * _host(input, compute) + product


def _bmm_reference(x1, x2, precision=reference.NATIVE):
    compute = _compute(result_type(x1, x2), precision)
    return np.matmul(_host(x1, compute), _host(x2, compute))


reference.register("linear", _linear_reference)
reference.register("gated_linear", _gated_reference)
reference.register("linear_int4", _linear_int4_reference)
reference.register("gated_linear_int4", _gated_int4_reference)
reference.register("scaled_linear", _scaled_reference)
reference.register("addmm", _addmm_reference)
reference.register("baddbmm", _addmm_reference)
reference.register("bmm", _bmm_reference)


@register("linear", "cpu")
def _linear_cpu(call) -> Tensor:
    return wrap(_linear_reference(call.x, call.weight, call.bias, call.activation, call.residual, call.alpha,
                                  call.beta, input_precision=call.precision, norm=_call_norm(call)), call.result_dtype)


def _call_norm(call):
    return None if call.norm_weight is None else (call.norm_weight, call.norm_epsilon)


@register("scaled_linear", "cpu")
def _scaled_cpu(x, weight, scale_x, scale_w, bias, activation, residual, dtype) -> Tensor:
    return wrap(_scaled_reference(x, weight, scale_x, scale_w, bias, activation, residual), dtype)


@register("linear_int4", "cpu")
def _linear_int4_cpu(x, weight, bias, activation, residual, alpha, beta, dtype) -> Tensor:
    return wrap(_linear_int4_reference(x, weight, bias, activation, residual, alpha, beta), dtype)


@register("gated_linear_int4", "cpu")
def _gated_int4_cpu(x, w_gate, w_up, activation, dtype) -> Tensor:
    return wrap(_gated_int4_reference(x, w_gate, w_up, activation), dtype)


@register("gated_linear", "cpu")
def _gated_cpu(call) -> Tensor:
    return wrap(_gated_reference(call.x, call.w_gate, call.w_up, call.activation, norm=_call_norm(call)),
                call.result_dtype)




__all__ = ["linear", "scaled_linear", "gated_linear", "addmm", "baddbmm", "bmm", "ACTIVATIONS", "INPUT_PRECISIONS"]
