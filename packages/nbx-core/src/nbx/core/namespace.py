"""The Array API namespace that Tensor.__array_namespace__ returns.

It renames nbx's front-ends to the standard's spellings (axis/keepdims, permute_dims,
cumulative_sum, ...). A function of the standard that nbx does not implement yet is refused by
name (NotSupportedError) when it is looked up, never approximated.
"""
from __future__ import annotations

import math
import types

from . import dtypes, ops
from .device import CPU
from .errors import NotSupportedError, PromotionError
from .promotion import promote_types, result_type
from .tensor import Tensor

API_VERSION = "2024.12"

# Standard names nbx does not implement yet: looking one up raises NotSupportedError.
NOT_YET = {
    "meshgrid", "tril", "triu", "take", "take_along_axis", "tensordot", "vecdot", "concat",
    "flip", "repeat", "roll", "stack", "tile", "nonzero", "searchsorted",
    "unique_all", "unique_counts", "unique_inverse", "unique_values", "argsort", "sort",
    "cumulative_prod", "diff",
}

_ELEMENTWISE_RENAMES = {"clip": "clamp"}


def _axis_reduction(name):
    fn = getattr(ops, name)

    def reduce(x, /, *, axis=None, keepdims=False, **kw):
        return fn(x, dim=axis, keepdim=keepdims, **kw)
    reduce.__name__ = name
    return reduce


def _creation(name):
    fn = getattr(ops, name)

    def create(shape, *, dtype=None, device=None):
        return fn(shape, dtype=dtype, device=device)
    create.__name__ = name
    return create


def isdtype(dtype, kind) -> bool:
    dt = dtypes.as_dtype(dtype)
    if isinstance(kind, tuple):
        return any(isdtype(dt, k) for k in kind)
    if not isinstance(kind, str):
        return dt is dtypes.as_dtype(kind)
    groups = {"bool": ("bool",), "signed integer": ("int",), "unsigned integer": ("uint",),
              "integral": ("int", "uint"), "real floating": ("float",), "complex floating": ("complex",),
              "numeric": ("int", "uint", "float", "complex")}
    if kind not in groups:
        raise NotSupportedError(f"isdtype kind {kind!r} is not one the standard names")
    return dt.kind in groups[kind]


def can_cast(from_, to) -> bool:
    src = from_.dtype if isinstance(from_, Tensor) else dtypes.as_dtype(from_)
    try:
        return promote_types(src, dtypes.as_dtype(to)) is dtypes.as_dtype(to)
    except PromotionError:
        return False


def _cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    out = ops.cumsum(x, dim=axis, dtype=dtype)
    if include_initial:
        raise NotSupportedError("cumulative_sum(include_initial=True) needs concat, which is not implemented yet")
    return out


def _moveaxis(x, source, destination, /):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [s % x.ndim for s in src]
    dst = [d % x.ndim for d in dst]
    order = [d for d in range(x.ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return x.permute(order)


def _broadcast_arrays(*arrays):
    from .layout import broadcast_shapes
    shape = broadcast_shapes(*(a.shape for a in arrays))
    return [a.broadcast_to(shape) for a in arrays]


class _Info:
    def capabilities(self):
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": None}

    def default_device(self):
        return CPU

    def default_dtypes(self, *, device=None):
        return {"real floating": dtypes.DEFAULT_FLOAT, "complex floating": dtypes.DEFAULT_COMPLEX,
                "integral": dtypes.DEFAULT_INT, "indexing": dtypes.INDEX}

    def devices(self):
        from .device import Device, backends
        return [Device(name, 0 if b.indexed else None) for name, b in backends().items() if b.device_count()]

    def dtypes(self, *, device=None, kind=None):
        return {n: d for n, d in dtypes.TABLE.items() if kind is None or isdtype(d, kind)}


class ArrayNamespace(types.SimpleNamespace):
    def __getattr__(self, name):
        if name in NOT_YET:
            raise NotSupportedError(f"the Array API function {name} is not implemented in nbx yet")
        raise AttributeError(f"the Array API namespace has no {name!r}")


def _build() -> ArrayNamespace:
    ns = {name: getattr(ops, name) for name in ops.elementwise.OPS}
    ns.update({std: getattr(ops, ours) for std, ours in _ELEMENTWISE_RENAMES.items()})
    ns.update({name: _axis_reduction(name) for name in
               ("sum", "prod", "mean", "max", "min", "var", "std", "all", "any", "argmax", "argmin",
                "count_nonzero")})
    ns.update({name: _creation(name) for name in ("empty", "zeros", "ones")})
    ns.update({dt.name: dt for dt in dtypes.TABLE.values()})
    ns.update(
        __array_api_version__=API_VERSION, e=math.e, pi=math.pi, inf=math.inf, nan=math.nan, newaxis=None,
        arange=ops.arange, asarray=ops.asarray, empty_like=ops.empty_like, eye=ops.eye, full=ops.full,
        full_like=ops.full_like, linspace=ops.linspace, ones_like=ops.ones_like, zeros_like=ops.zeros_like,
        astype=lambda x, dtype, /, *, copy=True, device=None: x.to(device=device, dtype=dtype, copy=copy),
        can_cast=can_cast, finfo=dtypes.finfo, iinfo=dtypes.iinfo, isdtype=isdtype, result_type=result_type,
        matmul=ops.matmul, matrix_transpose=lambda x, /: x.mT, where=ops.where,
        broadcast_to=ops.broadcast_to, broadcast_arrays=_broadcast_arrays,
        expand_dims=ops.expand_dims, permute_dims=ops.permute_dims,
        reshape=ops.reshape, squeeze=lambda x, /, axis: x.squeeze(axis), moveaxis=_moveaxis,
        unstack=lambda x, /, *, axis=0: x.unbind(axis), cumulative_sum=_cumulative_sum,
        __array_namespace_info__=_Info,
    )
    ns["bool"] = dtypes.bool_
    from .dlpack import from_dlpack
    ns["from_dlpack"] = from_dlpack
    return ArrayNamespace(**ns)


_NAMESPACE: ArrayNamespace | None = None


def namespace(api_version: str | None = None) -> ArrayNamespace:
    global _NAMESPACE
    if api_version not in (None, API_VERSION, "2023.12", "2022.12"):
        raise NotSupportedError(f"Array API version {api_version} is not supported (nbx follows {API_VERSION})")
    if _NAMESPACE is None:
        _NAMESPACE = _build()
    return _NAMESPACE
