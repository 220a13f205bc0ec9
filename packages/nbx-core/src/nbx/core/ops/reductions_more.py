"""Reductions nbx.core's Array API set lacks: max/min with their indices, count_nonzero, vector_norm.

max_with_indices / min_with_indices return (values, indices) like argmax: the first index of the
extreme, and a NaN is the extreme (its first index is returned, its value propagates), as numpy.
"""
from __future__ import annotations

import builtins
import math
from typing import NamedTuple

import numpy as np

from .. import dtypes, layout, reference
from ..dispatch import implementation, register
from ..dtypes import DType
from ..errors import ArgumentError, ShapeError
from ..tensor import Tensor
from ._common import check_category, compute_dtype, oracle_dtype, wrap


class ValuesIndices(NamedTuple):
    """The result of a reduction or scan that reports where its values came from."""
    values: Tensor
    indices: Tensor


def real_dtype(dtype: DType) -> DType:
    """The real dtype of a complex one (the magnitude's dtype); a real dtype itself."""
    return {"complex64": dtypes.float32, "complex128": dtypes.float64}.get(dtype.name, dtype)


# -- max / min with indices ----------------------------------------------------------------------

def _extreme_reference(name: str):
    values_fn, index_fn = (np.max, np.argmax) if name == "max_with_indices" else (np.min, np.argmin)

    def run(x, dim=None, keepdim=False, precision=reference.NATIVE):
        a = x.numpy()  # exact in the input's own dtype, as max and argmax
        if dim is None:  # over the flattened tensor, as argmax(dim=None)
            flat = a.reshape(-1)
            shape = (1,) * x.ndim if keepdim else ()
            return (np.reshape(values_fn(flat), shape), np.reshape(np.int64(index_fn(flat)), shape))
        axis = dim[0] if isinstance(dim, tuple) else dim
        if a.ndim == 0:
            return a.copy(), np.zeros((), np.int64)
        with np.errstate(all="ignore"):
            return values_fn(a, axis=axis, keepdims=keepdim), index_fn(a, axis=axis, keepdims=keepdim)
    run.__name__ = name
    return run


def _extreme_front_end(name: str):
    def reduce(x: Tensor, dim: int | None = None, keepdim: bool = False) -> ValuesIndices:
        check_category(name, x.dtype, "real")
        if dim is not None and not isinstance(dim, int):
            raise ShapeError(f"{name} reduces over one dim or all of them, got dim={dim}")
        dims = layout.normalize_dims(dim, x.ndim)
        if builtins.any(x.shape[d] == 0 for d in dims) or (dim is None and x.size == 0):
            raise ShapeError(f"{name} of an empty tensor (shape {x.shape}) has no identity")
        values, indices = implementation(name, x.device)(x, dims if dim is not None else None, keepdim, x.dtype)
        return ValuesIndices(values, indices)
    reduce.__name__ = reduce.__qualname__ = name
    reduce.__doc__ = (f"({name.split('_')[0]} over dim, the first index of it): dim None reduces the "
                      f"flattened tensor; a NaN is the extreme and its first index is returned.")
    return reduce


def _extreme_cpu(name: str):
    def run(x: Tensor, dims, keepdim: bool, out_dtype: DType):
        values, indices = _REFERENCES[name](x, dims, keepdim)
        return wrap(values, out_dtype), wrap(indices, dtypes.INDEX)
    return run


# -- count_nonzero -------------------------------------------------------------------------------

def _count_nonzero_reference(x, dim=None, keepdim=False, precision=reference.NATIVE):
    a = x.numpy()
    dims = layout.normalize_dims(dim, x.ndim)
    return np.asarray(np.count_nonzero(a, axis=dims, keepdims=keepdim), dtype=np.int64)


def count_nonzero(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """How many elements are not zero (NaN counts; False does not), over dim (None: every dim); int64."""
    check_category("count_nonzero", x.dtype, "any")
    dims = layout.normalize_dims(dim, x.ndim)
    return implementation("count_nonzero", x.device)(x, dims, keepdim, dtypes.INDEX)


# -- vector_norm ---------------------------------------------------------------------------------

def _vector_norm_reference(x, dim=None, keepdim=False, ord=2, precision=reference.NATIVE):
    out_dtype = real_dtype(x.dtype)
    compute = oracle_dtype(out_dtype) if precision == reference.FLOAT64 else compute_dtype(out_dtype)
    a = np.abs(x.numpy()).astype(compute, copy=False)
    axis = layout.normalize_dims(dim, x.ndim)
    p = float(ord)
    with np.errstate(all="ignore"):
        if p == math.inf:
            return np.max(a, axis=axis, keepdims=keepdim)
        if p == -math.inf:
            return np.min(a, axis=axis, keepdims=keepdim)
        if p == 0:
            return np.sum(a != 0, axis=axis, keepdims=keepdim).astype(compute)
        if p == 1:
            return np.sum(a, axis=axis, keepdims=keepdim)
        if p == 2:
            return np.sqrt(np.sum(a * a, axis=axis, keepdims=keepdim))
        return np.sum(a ** p, axis=axis, keepdims=keepdim) ** (1 / p)


def vector_norm(x: Tensor, ord=2, dim=None, keepdim: bool = False) -> Tensor:
    """(sum |x|^ord)^(1/ord) over dim (None: every dim); ord may be inf, -inf, 0 (the count of
    non-zeros) or any other float. Complex inputs give their real dtype; half types compute in fp32."""
    check_category("vector_norm", x.dtype, "floating")
    if isinstance(ord, bool) or not isinstance(ord, (int, float)) or math.isnan(ord):
        raise ArgumentError(f"vector_norm's ord must be a number (inf, -inf and 0 included), got {ord!r}")
    dims = layout.normalize_dims(dim, x.ndim)
    if abs(ord) == math.inf and (builtins.any(x.shape[d] == 0 for d in dims) or x.size == 0):
        raise ShapeError(f"vector_norm of ord {ord} over an empty tensor (shape {x.shape}) has no identity")
    return implementation("vector_norm", x.device)(x, dims, keepdim, real_dtype(x.dtype), ord=float(ord))


_REFERENCES = {name: _extreme_reference(name) for name in ("max_with_indices", "min_with_indices")}
for _name in _REFERENCES:
    reference.register(_name, _REFERENCES[_name])
    register(_name, "cpu")(_extreme_cpu(_name))
max_with_indices = _extreme_front_end("max_with_indices")
min_with_indices = _extreme_front_end("min_with_indices")

reference.register("count_nonzero", _count_nonzero_reference)
reference.register("vector_norm", _vector_norm_reference)


@register("count_nonzero", "cpu")
def _count_nonzero_cpu(x: Tensor, dims, keepdim: bool, out_dtype: DType) -> Tensor:
    return wrap(_count_nonzero_reference(x, dims, keepdim), out_dtype)


@register("vector_norm", "cpu")
def _vector_norm_cpu(x: Tensor, dims, keepdim: bool, out_dtype: DType, ord=2.0) -> Tensor:
    return wrap(_vector_norm_reference(x, dims, keepdim, ord), out_dtype)


__all__ = ["ValuesIndices", "max_with_indices", "min_with_indices", "count_nonzero", "vector_norm"]
