"""Reductions over any set of dims with keepdim, and the cumulative sum.

Half and float8 inputs accumulate in fp32 (the CPU reference and the kernels alike); sums of
integers and bools accumulate in int64 (uint64 for unsigned), as the Array API standard says.
"""
from __future__ import annotations

import builtins

import numpy as np

from .. import dtypes, layout, reference
from ..dispatch import implementation, register
from ..spec import OpSpec, define, front_end, params
from ..dtypes import DType
from ..errors import ShapeError
from ..tensor import Tensor
from ._common import check_category, compute_dtype, oracle_dtype, wrap


def accumulating_dtype(dtype: DType) -> DType:
    """What sums and products of dtype accumulate in (and give): int64 for bool and signed, uint64 for unsigned."""
    if dtype.kind in ("bool", "int"):
        return dtypes.int64
    if dtype.kind == "uint":
        return dtypes.uint64
    return dtype


# name: (numpy function, accepted category, result rule)
#   result rule: "accumulate" (sum-like), "same", "bool", "index"
_SPECS = {
    "sum": (np.sum, "numeric", "accumulate"),
    "prod": (np.prod, "numeric", "accumulate"),
    "mean": (np.mean, "floating", "same"),
    "max": (np.max, "real", "same"),
    "min": (np.min, "real", "same"),
    "argmax": (np.argmax, "real", "index"),
    "argmin": (np.argmin, "real", "index"),
    "var": (np.var, "real_floating", "same"),
    "std": (np.std, "real_floating", "same"),
    "any": (np.any, "any", "bool"),
    "all": (np.all, "any", "bool"),
    "logsumexp": (None, "real_floating", "same"),
}


def _out_dtype(name: str, dtype: DType, requested) -> DType:
    rule = _SPECS[name][2]
    if rule == "bool":
        return dtypes.bool_
    if rule == "index":
        return dtypes.INDEX
    if requested is not None:
        return dtypes.as_dtype(requested)
    return accumulating_dtype(dtype) if rule == "accumulate" else dtype


def _logsumexp(a, axis, keepdims):
    m = np.max(a, axis=axis, keepdims=True, initial=-np.inf)  # an empty reduction: log(0) = -inf
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def _reference(name: str):
    fn = _SPECS[name][0]

    def run(x, dim=None, keepdim=False, precision=reference.NATIVE, dtype=None, correction=0):
        out_dtype = _out_dtype(name, x.dtype, dtype)
        work = out_dtype if _SPECS[name][2] in ("accumulate",) else x.dtype
        if name in ("any", "all", "argmax", "argmin", "max", "min"):
            compute = x.dtype.host  # exact in the input's own dtype
        else:
            compute = oracle_dtype(work) if precision == reference.FLOAT64 else compute_dtype(work)
        a = x.numpy().astype(compute, copy=False)
        dims = layout.normalize_dims(dim, x.ndim)
        with np.errstate(all="ignore"):
            if name in ("argmax", "argmin"):
                if dim is None:
                    out = fn(a.reshape(-1)) if a.ndim else np.int64(0)
                    return np.reshape(out, (1,) * x.ndim) if keepdim else np.asarray(out)
                return fn(a, axis=dims[0], keepdims=keepdim)
            if name in ("var", "std"):
                return fn(a, axis=dims, keepdims=keepdim, ddof=correction)
            if name == "logsumexp":
                return _logsumexp(a, dims, keepdim)
            return fn(a, axis=dims, keepdims=keepdim)
    run.__name__ = name
    return run


def _cpu(name: str):
    def run(call) -> Tensor:
        kw = {"correction": call.correction} if name in ("var", "std") else {}
        return wrap(_REFERENCES[name](call.x, call.dims, call.keepdim, dtype=getattr(call, "dtype", None), **kw), call.out_dtype)
    return run


def _check(call, facts) -> None:
    """The rules of every reduction (its spec's check): the category, one dim for an index, an
    identity for an empty extreme; the reduced dims normalized, the output dtype by the op's rule."""
    name, x, dim = call.spec.name, call.x, call.dim
    check_category(name, x.dtype, _SPECS[name][1])
    if name in ("argmax", "argmin") and dim is not None and not isinstance(dim, int):
        raise ShapeError(f"{name} reduces over one dim or all of them, got dim={dim}")
    dims = layout.normalize_dims(dim, x.ndim)
    if name in ("max", "min", "argmax", "argmin") and builtins.any(x.shape[d] == 0 for d in dims):
        raise ShapeError(f"{name} of an empty tensor (shape {x.shape}) has no identity")
    facts.device, facts.out_dtype = x.device, _out_dtype(name, x.dtype, getattr(call, "dtype", None))
    facts.dims = dims if name not in ("argmax", "argmin") or dim is not None else None


def _signature(name: str):
    if name in ("var", "std"):
        return params("x", dim=None, keepdim=False, correction=0, dtype=None)
    if name in ("argmax", "argmin"):
        return params("x", dim=None, keepdim=False)
    return params("x", dim=None, keepdim=False, dtype=None)


def _front_end(name: str):
    doc = f"{name} over dim (None: every dim), keepdim as the Array API says ({_SPECS[name][2]})."
    return front_end(define(OpSpec(name, _signature(name), _check, doc=doc)))


_REFERENCES = {name: _reference(name) for name in _SPECS}
for _name in _SPECS:
    reference.register(_name, _REFERENCES[_name])
    register(_name, "cpu")(_cpu(_name))
    globals()[_name] = _front_end(_name)


def cumsum(x: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    """Running sum along dim (dim may be omitted for a 1-D tensor)."""
    check_category("cumsum", x.dtype, "numeric")
    if dim is None:
        if x.ndim != 1:
            raise ShapeError(f"cumsum of a {x.ndim}-D tensor needs a dim")
        dim = 0
    out_dtype = dtypes.as_dtype(dtype) if dtype is not None else accumulating_dtype(x.dtype)
    return implementation("cumsum", x.device)(x, layout.normalize_dim(dim, builtins.max(x.ndim, 1)), out_dtype)


def _cumsum_reference(x, dim, out_dtype=None, precision=reference.NATIVE):
    out_dtype = accumulating_dtype(x.dtype) if out_dtype is None else dtypes.as_dtype(out_dtype)
    compute = oracle_dtype(out_dtype) if precision == reference.FLOAT64 else compute_dtype(out_dtype)
    a = x.numpy().astype(compute, copy=False)
    return np.cumsum(a.reshape(1) if a.ndim == 0 else a, axis=dim).reshape(a.shape)


@register("cumsum", "cpu")
def _cumsum_cpu(x, dim, out_dtype) -> Tensor:
    return wrap(_cumsum_reference(x, dim, out_dtype), out_dtype)


reference.register("cumsum", _cumsum_reference)

__all__ = sorted(_SPECS) + ["cumsum"]
