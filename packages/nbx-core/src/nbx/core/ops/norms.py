"""Scaled and masked softmax and the normalizations: layer, RMS, group (with a fused activation:
GroupNorm -> SiLU), instance, batch (inference) norm and the fused residual add + RMS norm.

Statistics of the half and float8 types are computed in fp32 (the CPU reference and the kernels
alike); the output has the input's dtype. Weights, biases and masks may have another floating
dtype: they are read in the compute dtype.
"""
from __future__ import annotations

from math import prod

import numpy as np

from .. import layout, reference
from ..dispatch import implementation, register
from ..dtypes import finfo
from ..errors import ArgumentError, DTypeError, NotSupportedError, ShapeError
from ..spec import OpSpec, define, front_end, params
from ..tensor import Tensor
from ._common import check_category, common_device, compute_dtype, oracle_dtype, wrap


def _precision_dtype(dtype, precision):
    return oracle_dtype(dtype) if precision == reference.FLOAT64 else compute_dtype(dtype)


def _array(t: Tensor | None, compute):
    return None if t is None else t.numpy().astype(compute, copy=False)


def _check_floating(op: str, **tensors) -> None:
    for role, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise DTypeError(f"{op}: {role} must be a tensor, got {type(t).__name__}")
        check_category(f"{op} ({role})", t.dtype, "real_floating")


def _check_shape(op: str, role: str, t: Tensor | None, shape: tuple[int, ...]) -> None:
    if t is not None and tuple(t.shape) != tuple(shape):
        raise ShapeError(f"{op}: {role} has shape {tuple(t.shape)}, expected {tuple(shape)}")


def _stable_softmax(a: np.ndarray, axis: int, log: bool = False) -> np.ndarray:
    """The row's max subtracted first; a row whose max is not finite is shifted by 0 (so a row of
    -inf gives NaN, as softmax of nothing is undefined)."""
    with np.errstate(all="ignore"):
        m = np.max(a, axis=axis, keepdims=True) if a.size else a
        m = np.where(np.isfinite(m), m, 0)
        shifted = a - m
        total = np.sum(np.exp(shifted), axis=axis, keepdims=True)
        return shifted - np.log(total) if log else np.exp(shifted) / total


# ---- scaled and masked softmax ---------------------------------------------------------------

def scaled_masked_softmax(x: Tensor, scale: float = 1.0, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """softmax(x * scale + mask) over dim.

    mask broadcasts to x's shape. A bool mask keeps the elements where it is True and drops the
    others (as -inf: a row with every element dropped is NaN); a floating mask is added after the
    scaling (an additive bias such as 0 / -inf).
    """
    _check_floating("scaled_masked_softmax", x=x)
    if mask is not None:
        if not isinstance(mask, Tensor):
            raise DTypeError(f"scaled_masked_softmax: mask must be a tensor, got {type(mask).__name__}")
        if mask.dtype.kind not in ("bool", "float"):
            raise DTypeError(f"scaled_masked_softmax: a mask is bool (keep) or floating (added), got {mask.dtype.name}")
        common_device(x, mask)
        try:
            fits = layout.broadcast_shapes(mask.shape, x.shape) == tuple(x.shape)
        except ShapeError:
            fits = False
        if not fits:
            raise ShapeError(f"scaled_masked_softmax: mask of shape {tuple(mask.shape)} does not broadcast "
                             f"to x's shape {tuple(x.shape)}")
        mask = mask.broadcast_to(x.shape)
    dim = layout.normalize_dim(dim, x.ndim)
    return implementation("scaled_masked_softmax", x.device)(x, float(scale), mask, dim)


def _masked_softmax_reference(x, scale=1.0, mask=None, dim=-1, precision=reference.NATIVE):
    compute = _precision_dtype(x.dtype, precision)
    a = x.numpy().astype(compute, copy=False) * compute.type(scale)
    if mask is not None:
        m = np.broadcast_to(mask.numpy(), a.shape)
        a = np.where(m, a, -np.inf) if mask.dtype.kind == "bool" else a + m.astype(compute)
    a = a.reshape(1) if a.ndim == 0 else a
    return _stable_softmax(a, layout.normalize_dim(dim, a.ndim)).reshape(x.shape)


# ---- layer norm and RMS norm over the trailing dims --------------------------------------------

def _normalized_dims(op: str, x: Tensor, normalized_shape) -> tuple[int, ...]:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(int(s) for s in normalized_shape)
    if not shape or len(shape) > x.ndim or tuple(x.shape[x.ndim - len(shape):]) != shape:
        raise ShapeError(f"{op}: normalized_shape {shape} does not match the trailing dims of x's shape "
                         f"{tuple(x.shape)}")
    return shape


def _check_layer_norm(call, facts) -> None:
    x, weight, bias = call.x, call.weight, call.bias
    _check_floating("layer_norm", x=x, weight=weight, bias=bias)
    facts.shape = _normalized_dims("layer_norm", x, call.normalized_shape)
    _check_shape("layer_norm", "weight", weight, facts.shape)
    _check_shape("layer_norm", "bias", bias, facts.shape)
    facts.device, facts.out_dtype, facts.epsilon = common_device(x, weight, bias), x.dtype, float(call.eps)


layer_norm = front_end(define(OpSpec(
    "layer_norm", params("x", "normalized_shape", weight=None, bias=None, eps=1e-5), _check_layer_norm,
    by_value=("eps",), doc="""(x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_shape dims
    (the biased variance, as torch.nn.functional.layer_norm).""")))


def _rms_eps(x: Tensor, eps) -> float:
    """torch's rule: eps None is the machine epsilon of x's dtype."""
    return float(finfo(x.dtype).eps) if eps is None else float(eps)


def _check_rms_norm(call, facts) -> None:
    x, weight = call.x, call.weight
    _check_floating("rms_norm", x=x, weight=weight)
    facts.shape = _normalized_dims("rms_norm", x, call.normalized_shape)
    _check_shape("rms_norm", "weight", weight, facts.shape)
    facts.device, facts.out_dtype, facts.epsilon = common_device(x, weight), x.dtype, _rms_eps(x, call.eps)


rms_norm = front_end(define(OpSpec(
    "rms_norm", params("x", "normalized_shape", weight=None, eps=None), _check_rms_norm, by_value=("eps",),
    doc="""x / sqrt(mean(x**2) + eps) * weight over the trailing normalized_shape dims
    (eps None: the machine epsilon of x's dtype, as torch.nn.functional.rms_norm).""")))


def _trailing_stats_reference(a: np.ndarray, k: int, rms: bool, eps: float):
    axes = tuple(range(a.ndim - k, a.ndim))
    with np.errstate(all="ignore"):
        if rms:
            return a / np.sqrt(np.mean(a * a, axis=axes, keepdims=True) + eps)
        mean = np.mean(a, axis=axes, keepdims=True)
        centred = a - mean
        return centred / np.sqrt(np.mean(centred * centred, axis=axes, keepdims=True) + eps)


def _layer_norm_reference(x, normalized_shape, weight=None, bias=None, eps=1e-5, precision=reference.NATIVE):
    compute = _precision_dtype(x.dtype, precision)
    k = len(_normalized_dims("layer_norm", x, normalized_shape))
    out = _trailing_stats_reference(x.numpy().astype(compute, copy=False), k, False, eps)
    if weight is not None:
        out = out * _array(weight, compute)
    if bias is not None:
        out = out + _array(bias, compute)
    return out


def _rms_norm_reference(x, normalized_shape, weight=None, eps=None, precision=reference.NATIVE):
    compute = _precision_dtype(x.dtype, precision)
    k = len(_normalized_dims("rms_norm", x, normalized_shape))
    out = _trailing_stats_reference(x.numpy().astype(compute, copy=False), k, True, _rms_eps(x, eps))
    return out if weight is None else out * _array(weight, compute)


# ---- group norm and batch norm over channels (dim 1) -------------------------------------------

def _channels(op: str, x: Tensor) -> int:
    if x.ndim < 2:
        raise ShapeError(f"{op} takes x of shape (N, C, *), got {x.ndim} dims")
    return x.shape[1]


def group_norm(x: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5, *, activation=None) -> Tensor:
    """Each of num_groups groups of consecutive channels of x (N, C, *) normalized as one (mean and
    biased variance over its channels and positions), then weight[c] and bias[c] per channel, then
    activation (keyword-only, linear's names: "silu" is a diffusion UNet's GroupNorm -> SiLU), fused
    into the kernel's store. A channels-last x gives a channels-last result, as conv2d."""
    from .products import _activation
    activation = _activation("group_norm", activation)
    _check_floating("group_norm", x=x, weight=weight, bias=bias)
    channels = _channels("group_norm", x)
    num_groups = int(num_groups)
    if num_groups < 1 or channels % num_groups:
        raise ShapeError(f"group_norm: num_groups {num_groups} does not divide the {channels} channels")
    _check_shape("group_norm", "weight", weight, (channels,))
    _check_shape("group_norm", "bias", bias, (channels,))
    common_device(x, weight, bias)
    return implementation("group_norm", x.device)(x, num_groups, weight, bias, float(eps), activation)


def _per_channel(t: Tensor | None, compute, ndim: int):
    a = _array(t, compute)
    return None if a is None else a.reshape((1, -1) + (1,) * (ndim - 2))


def _group_norm_reference(x, num_groups, weight=None, bias=None, eps=1e-5, activation=None,
                          precision=reference.NATIVE):
    from .products import apply_activation
    compute = _precision_dtype(x.dtype, precision)
    a = x.numpy().astype(compute, copy=False)
    grouped = a.reshape(a.shape[0], num_groups, prod(a.shape[1:]) // num_groups)
    out = _trailing_stats_reference(grouped, 1, False, eps).reshape(a.shape)
    if weight is not None:
        out = out * _per_channel(weight, compute, a.ndim)
    if bias is not None:
        out = out + _per_channel(bias, compute, a.ndim)
    return apply_activation(out, activation)


def batch_norm(x: Tensor, running_mean: Tensor, running_var: Tensor, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Inference batch norm of x (N, C, *): (x - running_mean[c]) / sqrt(running_var[c] + eps)
    * weight[c] + bias[c]."""
    _check_floating("batch_norm", x=x, running_mean=running_mean, running_var=running_var, weight=weight, bias=bias)
    channels = _channels("batch_norm", x)
    for role, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        _check_shape("batch_norm", role, t, (channels,))
    common_device(x, running_mean, running_var, weight, bias)
    return implementation("batch_norm", x.device)(x, running_mean, running_var, weight, bias, float(eps))


def _batch_norm_reference(x, running_mean, running_var, weight=None, bias=None, eps=1e-5,
                          precision=reference.NATIVE):
    compute = _precision_dtype(x.dtype, precision)
    a = x.numpy().astype(compute, copy=False)
    with np.errstate(all="ignore"):
        out = (a - _per_channel(running_mean, compute, a.ndim)) / np.sqrt(_per_channel(running_var, compute, a.ndim) + eps)
    if weight is not None:
        out = out * _per_channel(weight, compute, a.ndim)
    if bias is not None:
        out = out + _per_channel(bias, compute, a.ndim)
    return out


def _instance_norm_mode(x, running_mean, running_var, weight, bias, use_input_stats: bool) -> str:
    """"group" (each (sample, channel) by its own statistics) or "batch" (by the running ones), checked."""
    _check_floating("instance_norm", x=x, running_mean=running_mean, running_var=running_var, weight=weight,
                    bias=bias)
    channels = _channels("instance_norm", x)
    if x.ndim < 3:
        raise ShapeError(f"instance_norm takes x of shape (N, C, *spatial), got {tuple(x.shape)}")
    for role, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        _check_shape("instance_norm", role, t, (channels,))
    common_device(x, running_mean, running_var, weight, bias)
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ArgumentError("instance_norm: use_input_stats=False normalizes by running_mean and running_var; "
                                "give both")
        return "batch"
    if running_mean is not None or running_var is not None:
        raise NotSupportedError("instance_norm: running statistics with use_input_stats=True would be updated "
                                "(training); nbx runs inference: pass use_input_stats=False to use them")
    if prod(x.shape[2:]) < 2:
        raise ShapeError(f"instance_norm: expected more than 1 spatial element per channel, got {tuple(x.shape)}")
    return "group"


def instance_norm(input: Tensor, running_mean: Tensor | None = None, running_var: Tensor | None = None,
                  weight: Tensor | None = None, bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.instance_norm for inference: each (sample, channel) of input (N, C, *)
    normalized by its own mean and biased variance over the positions (use_input_stats, the group
    norm kernels with one channel a group), or by running_mean / running_var (use_input_stats=False,
    batch norm's map); then weight[c] and bias[c]. momentum only moves running statistics, which
    inference never updates. A channels-last input is read in place and gives a channels-last result."""
    mode = _instance_norm_mode(input, running_mean, running_var, weight, bias, use_input_stats)
    if mode == "batch":
        return implementation("batch_norm", input.device)(input, running_mean, running_var, weight, bias, float(eps))
    return implementation("group_norm", input.device)(input, input.shape[1], weight, bias, float(eps), None)


def _instance_norm_reference(x, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                             momentum=0.1, eps=1e-5, precision=reference.NATIVE):
    mode = _instance_norm_mode(x, running_mean, running_var, weight, bias, use_input_stats)
    if mode == "batch":
        return _batch_norm_reference(x, running_mean, running_var, weight, bias, eps, precision)
    return _group_norm_reference(x, x.shape[1], weight, bias, eps, precision=precision)


# ---- fused residual add + RMS norm --------------------------------------------------------------

def _check_add_rms_norm(call, facts) -> None:
    x, residual, weight = call.x, call.residual, call.weight
    _check_floating("add_rms_norm", x=x, residual=residual, weight=weight)
    if x.ndim < 1:
        raise ShapeError("add_rms_norm needs x of at least one dim")
    if tuple(x.shape) != tuple(residual.shape):
        raise ShapeError(f"add_rms_norm: residual has shape {tuple(residual.shape)}, expected x's {tuple(x.shape)}")
    if x.dtype is not residual.dtype:
        raise DTypeError(f"add_rms_norm: residual is {residual.dtype.name}, x is {x.dtype.name} (they must match)")
    _check_shape("add_rms_norm", "weight", weight, (x.shape[-1],))
    facts.device, facts.out_dtype = common_device(x, residual, weight), x.dtype
    facts.shape, facts.epsilon = (x.shape[-1],), _rms_eps(x, call.eps)


add_rms_norm = front_end(define(OpSpec(
    "add_rms_norm", params("x", "residual", weight=None, eps=None), _check_add_rms_norm, by_value=("eps",),
    doc="""(normed, new_residual): new_residual = x + residual (rounded to the dtype), normed =
    rms_norm(new_residual) over the last dim. The kernel reads x and residual once.""")))


def _add_rms_norm_reference(x, residual, weight=None, eps=None, precision=reference.NATIVE):
    compute = _precision_dtype(x.dtype, precision)
    total = x.numpy().astype(compute, copy=False) + residual.numpy().astype(compute, copy=False)
    if precision != reference.FLOAT64:  # the new residual is stored in x's dtype, and normalized as stored
        total = total.astype(x.dtype.host).astype(compute)
    out = _trailing_stats_reference(total, 1, True, _rms_eps(x, eps))
    return (out if weight is None else out * _array(weight, compute)), total


# ---- registration -------------------------------------------------------------------------------

reference.register("scaled_masked_softmax", _masked_softmax_reference)
reference.register("layer_norm", _layer_norm_reference)
reference.register("rms_norm", _rms_norm_reference)
reference.register("group_norm", _group_norm_reference)
reference.register("batch_norm", _batch_norm_reference)
reference.register("instance_norm", _instance_norm_reference)
reference.register("add_rms_norm", _add_rms_norm_reference)


@register("scaled_masked_softmax", "cpu")
def _scaled_masked_softmax_cpu(x, scale, mask, dim):
    return wrap(_masked_softmax_reference(x, scale, mask, dim), x.dtype)


@register("layer_norm", "cpu")
def _layer_norm_cpu(call):
    return wrap(_layer_norm_reference(call.x, call.shape, call.weight, call.bias, call.epsilon), call.out_dtype)


@register("rms_norm", "cpu")
def _rms_norm_cpu(call):
    return wrap(_rms_norm_reference(call.x, call.shape, call.weight, call.epsilon), call.out_dtype)


@register("group_norm", "cpu")
def _group_norm_cpu(x, num_groups, weight, bias, eps, activation=None):
    return wrap(_group_norm_reference(x, num_groups, weight, bias, eps, activation), x.dtype)


@register("batch_norm", "cpu")
def _batch_norm_cpu(x, running_mean, running_var, weight, bias, eps):
    return wrap(_batch_norm_reference(x, running_mean, running_var, weight, bias, eps), x.dtype)


@register("add_rms_norm", "cpu")
def _add_rms_norm_cpu(call):
    normed, total = _add_rms_norm_reference(call.x, call.residual, call.weight, call.epsilon)
    return wrap(normed, call.out_dtype), wrap(total, call.out_dtype)


__all__ = ["scaled_masked_softmax", "layer_norm", "rms_norm", "group_norm", "instance_norm", "batch_norm",
           "add_rms_norm"]
