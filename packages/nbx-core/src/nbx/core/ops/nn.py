"""softmax and log_softmax over one dim (half types compute in fp32)."""
from __future__ import annotations

import numpy as np

from .. import dtypes, layout, reference
from ..dispatch import register
from ..spec import OpSpec, define, front_end, params
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


def _check(call, facts) -> None:
    x = call.x
    facts.device = x.device
    facts.out_dtype = x.dtype if call.dtype is None else dtypes.as_dtype(call.dtype)
    check_category(call.spec.name, facts.out_dtype, "real_floating")
    facts.row_dim = layout.normalize_dim(call.dim, x.ndim)


def operand(call) -> Tensor:
    """x in the requested dtype (dtype=: a cast first, as torch's)."""
    return call.x if call.x.dtype is call.out_dtype else call.x.to(dtype=call.out_dtype)


def _front_end(name: str):
    doc = f"{name} over dim, computed stably (the row's max subtracted first)."
    return front_end(define(OpSpec(name, params("x", dim=-1, dtype=None), _check, doc=doc)))


softmax = _front_end("softmax")
log_softmax = _front_end("log_softmax")


def _register(name: str, log: bool):
    def ref(x, dim=-1, precision=reference.NATIVE):
        return _softmax_reference(x, dim, precision, log=log)
    reference.register(name, ref)
    register(name, "cpu")(lambda call: wrap(ref(operand(call), call.row_dim), call.out_dtype))


_register("softmax", False)
_register("log_softmax", True)

__all__ = ["softmax", "log_softmax"]
