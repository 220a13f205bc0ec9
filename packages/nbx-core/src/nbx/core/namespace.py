"""The Array API namespace that Tensor.__array_namespace__ returns.

It renames nbx's front-ends to the standard's spellings (axis/keepdims, permute_dims,
cumulative_sum, ...). A name it lacks raises MissingFunctionError, a NotSupportedError that is
also an AttributeError, so hasattr(xp, name) and getattr(xp, name, None) answer as they should.
`import nbx.core.array_api as xp` is the same namespace as a module.
"""
from __future__ import annotations

import math
import types

from . import dtypes, ops
from .device import CPU
from .errors import DeviceError, MissingFunctionError, NotSupportedError, PromotionError
from .promotion import promote_types, result_type
from .tensor import Tensor

API_VERSION = "2024.12"

# Standard names nbx does not implement yet: looking one up raises MissingFunctionError.
NOT_YET: set[str] = set()

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


def _cumulative(name):
    fn = getattr(ops, name)

    def cumulative(x, /, *, axis=None, dtype=None, include_initial=False):
        out = fn(x, dim=axis, dtype=dtype)
        if include_initial:
            dim = 0 if axis is None else axis
            shape = list(out.shape)
            shape[dim] = 1
            first = ops.full(tuple(shape), 0 if name == "cumsum" else 1, dtype=out.dtype, device=out.device)
            out = ops.concat([first, out], axis=dim)
        return out
    cumulative.__name__ = {"cumsum": "cumulative_sum", "cumprod": "cumulative_prod"}[name]
    return cumulative


def _count_nonzero(x, /, *, axis=None, keepdims=False):
    return ops.count_nonzero(x, dim=axis, keepdim=keepdims)


def vecdot(x1, x2, /, *, axis=-1):
    """sum(conj(x1) * x2) over axis, the operands broadcast."""
    return ops.sum(ops.conj(x1) * x2 if x1.dtype.is_complex else x1 * x2, dim=axis)


def tensordot(x1, x2, /, *, axes=2):
    """Contraction of x1's last (or listed) axes with x2's first (or listed) ones, through matmul."""
    if isinstance(axes, int):
        if axes < 0:
            raise NotSupportedError(f"tensordot axes={axes} is negative")
        a1, a2 = list(range(x1.ndim - axes, x1.ndim)), list(range(axes))
    else:
        a1, a2 = [a % x1.ndim for a in axes[0]], [a % x2.ndim for a in axes[1]]
    free1 = [d for d in range(x1.ndim) if d not in a1]
    free2 = [d for d in range(x2.ndim) if d not in a2]
    k = math.prod(x1.shape[d] for d in a1)
    left = x1.permute(free1 + a1).reshape(math.prod(x1.shape[d] for d in free1), k)
    right = x2.permute(a2 + free2).reshape(k, math.prod(x2.shape[d] for d in free2))
    return ops.matmul(left, right).reshape(*[x1.shape[d] for d in free1], *[x2.shape[d] for d in free2])


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
        """Every device that exists here; a backend whose driver is missing has none (it is not an error)."""
        from .device import Device, backends
        found = []
        for name, b in backends().items():
            try:
                count = b.device_count()
            except (DeviceError, OSError):  # a plugin installed on a machine without its driver
                continue
            found += [Device(name, i) for i in range(count)] if b.indexed else [Device(name)] if count else []
        return found

    def dtypes(self, *, device=None, kind=None):
        return {n: d for n, d in dtypes.TABLE.items() if kind is None or isdtype(d, kind)}


class ArrayNamespace(types.SimpleNamespace):
    def __getattr__(self, name):
        if name in NOT_YET:
            raise MissingFunctionError(f"the Array API function {name} is not implemented in nbx yet")
        raise MissingFunctionError(f"the Array API namespace has no {name!r}")


def _build() -> ArrayNamespace:
    ns = {name: getattr(ops, name) for name in ops.elementwise.OPS}
    ns.update({std: getattr(ops, ours) for std, ours in _ELEMENTWISE_RENAMES.items()})
    ns.update({name: _axis_reduction(name) for name in
               ("sum", "prod", "mean", "max", "min", "var", "std", "all", "any", "argmax", "argmin")})
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
        unstack=lambda x, /, *, axis=0: x.unbind(axis), cumulative_sum=_cumulative("cumsum"),
        cumulative_prod=_cumulative("cumprod"), count_nonzero=_count_nonzero, vecdot=vecdot, tensordot=tensordot,
        concat=ops.concat, stack=ops.stack, flip=ops.flip, roll=ops.roll, repeat=ops.repeat, tile=ops.tile,
        tril=ops.tril, triu=ops.triu, meshgrid=ops.meshgrid, diff=ops.diff, take=ops.take,
        take_along_axis=ops.take_along_axis, nonzero=ops.nonzero, searchsorted=ops.searchsorted,
        sort=ops.sort, argsort=ops.argsort, unique_all=ops.unique_all, unique_counts=ops.unique_counts,
        unique_inverse=ops.unique_inverse, unique_values=ops.unique_values,
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
