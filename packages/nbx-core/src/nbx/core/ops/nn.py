"""softmax and log_softmax over one dim (half types compute in fp32)."""
from __future__ import annotations

import numpy as np

from .. import layout, reference
from ..dispatch import implementation, register
from ..tensor import Tensor
from ._common import check_category, compute_dtype, oracle_dtype, wrap


def _softmax_reference(x, dim=-1, precision=reference.NATIVE, log=False):
    compute = oracle_dtype(x.dtype) if precision == reference.FLOAT64 else compute_dtype(x.dtype)
    a = x.numpy().astype(compute, copy=False)
    if a.ndim == 0:
        a = a.reshape(1)
    axis = layout.normalize_dim(dim, a.ndim)
    with np.errstate(all="ignore"):
        m = np.max(a, axis=axis, keepdims=True) if a.size else a
        m = np.where(np.isfinite(m), m, 0)
        shifted = a - m
        total = np.sum(np.exp(shifted), axis=axis, keepdims=True)
        out = shifted - np.log(total) if log else np.exp(shifted) / total
    return out.reshape(x.shape)


def _front_end(name: str, log: bool):
    def op(x: Tensor, dim: int = -1, dtype=None) -> Tensor:
        if dtype is not None:
            x = x.to(dtype=dtype)
        check_category(name, x.dtype, "real_floating")
        layout.normalize_dim(dim, x.ndim)
        return implementation(name, x.device)(x, dim)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"{name} over dim, computed stably (the row's max subtracted first)."
    return op


softmax = _front_end("softmax", log=False)
log_softmax = _front_end("log_softmax", log=True)


def _register(name: str, log: bool):
    def ref(x, dim=-1, precision=reference.NATIVE):
        return _softmax_reference(x, dim, precision, log=log)
    reference.register(name, ref)
    register(name, "cpu")(lambda x, dim: wrap(ref(x, dim), x.dtype))


_register("softmax", False)
_register("log_softmax", True)

__all__ = ["softmax", "log_softmax"]
