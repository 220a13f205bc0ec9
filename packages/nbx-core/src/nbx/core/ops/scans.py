"""Scans besides cumsum (in reductions.py): cumprod, and cummax / cummin with their indices.

cumprod accumulates as cumsum does (int64 for bool and signed integers, uint64 for unsigned, fp32
for the half types). cummax / cummin keep the input's dtype; the index of each running extreme is
the LAST position that holds it (ties move the index forward, as torch.cummax does), except for
NaN: the first NaN stays the extreme from there on, with its own index.
"""
from __future__ import annotations

import builtins

import numpy as np

from .. import dtypes, layout, reference
from ..dispatch import implementation, register
from ..dtypes import DType
from ..errors import ShapeError
from ..tensor import Tensor
from ._common import check_category, compute_dtype, oracle_dtype, wrap
from .reductions import accumulating_dtype
from .reductions_more import ValuesIndices


def _scan_dim(name: str, x: Tensor, dim) -> int:
    if dim is None:
        if x.ndim > 1:
            raise ShapeError(f"{name} of a {x.ndim}-D tensor needs a dim")
        dim = 0
    return layout.normalize_dim(dim, builtins.max(x.ndim, 1))


def cumprod(x: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    """Running product along dim (dim may be omitted for a 1-D tensor)."""
    check_category("cumprod", x.dtype, "numeric")
    out_dtype = dtypes.as_dtype(dtype) if dtype is not None else accumulating_dtype(x.dtype)
    return implementation("cumprod", x.device)(x, _scan_dim("cumprod", x, dim), out_dtype)


def _cumprod_reference(x, dim, out_dtype=None, precision=reference.NATIVE):
    out_dtype = accumulating_dtype(x.dtype) if out_dtype is None else dtypes.as_dtype(out_dtype)
    compute = oracle_dtype(out_dtype) if precision == reference.FLOAT64 else compute_dtype(out_dtype)
    a = x.numpy().astype(compute, copy=False)
    with np.errstate(all="ignore"):
        return np.cumprod(a.reshape(1) if a.ndim == 0 else a, axis=dim).reshape(a.shape)


def _running_extreme_reference(name: str):
    accumulate = np.maximum.accumulate if name == "cummax" else np.minimum.accumulate

    def run(x, dim, precision=reference.NATIVE):
        a = x.numpy()  # exact in the input's own dtype
        shape = a.shape
        a = a.reshape(1) if a.ndim == 0 else a
        if a.size == 0:
            return a.copy().reshape(shape), np.zeros(shape, np.int64)
        values = accumulate(a, axis=dim)  # numpy's maximum/minimum propagate NaN
        where = np.arange(a.shape[dim]).reshape([-1 if d == dim else 1 for d in range(a.ndim)])
        where = np.broadcast_to(where, a.shape)
        # the last position whose element equals the running extreme at that position
        last_hit = np.maximum.accumulate(np.where(a == values, where, 0), axis=dim)
        if not np.issubdtype(a.dtype, np.integer):  # floats, bfloat16 and float8 included
            nan = np.isnan(a.astype(np.float64))
            first_nan = np.minimum.accumulate(np.where(nan, where, a.shape[dim]), axis=dim)
            last_hit = np.where(np.isnan(values.astype(np.float64)), first_nan, last_hit)
        return values.reshape(shape), last_hit.astype(np.int64).reshape(shape)
    run.__name__ = name
    return run


def _running_extreme_front_end(name: str):
    def scan(x: Tensor, dim: int | None = None) -> ValuesIndices:
        check_category(name, x.dtype, "real")
        values, indices = implementation(name, x.device)(x, _scan_dim(name, x, dim))
        return ValuesIndices(values, indices)
    scan.__name__ = scan.__qualname__ = name
    scan.__doc__ = (f"Running {name[3:]} along dim and the last index holding it (a NaN, once seen, "
                    f"stays with its first index); dim may be omitted for a 1-D tensor.")
    return scan


@register("cumprod", "cpu")
def _cumprod_cpu(x: Tensor, dim: int, out_dtype: DType) -> Tensor:
    return wrap(_cumprod_reference(x, dim, out_dtype), out_dtype)


reference.register("cumprod", _cumprod_reference)

_REFERENCES = {name: _running_extreme_reference(name) for name in ("cummax", "cummin")}


def _running_extreme_cpu(name: str):
    def run(x: Tensor, dim: int):
        values, indices = _REFERENCES[name](x, dim)
        return wrap(values, x.dtype), wrap(indices, dtypes.INDEX)
    return run


for _name in _REFERENCES:
    reference.register(_name, _REFERENCES[_name])
    register(_name, "cpu")(_running_extreme_cpu(_name))
cummax = _running_extreme_front_end("cummax")
cummin = _running_extreme_front_end("cummin")

__all__ = ["cumprod", "cummax", "cummin"]
