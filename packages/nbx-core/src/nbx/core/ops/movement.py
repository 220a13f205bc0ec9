"""What the data-movement front-ends share: exact references, index checks, one registration.

A data-movement op computes nothing, so its float64 oracle is its result in the input's own dtype
(exact); the few that compute (scatter's sum/prod/mean) say so in their own reference.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes, reference
from ..dispatch import register
from ..errors import DTypeError, IndexingError
from ..tensor import Tensor
from ._common import wrap


def host(value) -> np.ndarray:
    """A tensor's values as numpy (a view on the cpu); anything else through np.asarray."""
    return value.numpy() if isinstance(value, Tensor) else np.asarray(value)


def register_exact(name: str, ref, out_dtypes=None) -> None:
    """ref(*operands, **kw) -> numpy array (or tuple) becomes op `name`'s reference and its CPU
    implementation; the CPU result keeps the first operand's dtype unless out_dtypes(*args) says."""
    def oracle(*args, precision=reference.NATIVE, **kw):
        return ref(*args, **kw)
    reference.register(name, oracle)

    def cpu(*args, **kw):
        result = ref(*args, **kw)
        kinds = out_dtypes(*args, **kw) if out_dtypes else next(a for a in args if isinstance(a, Tensor)).dtype
        if isinstance(result, tuple):
            return tuple(wrap(r, d) for r, d in zip(result, kinds))
        return wrap(result, kinds)
    register(name, "cpu")(cpu)


def check_index_dtype(op: str, index: Tensor) -> None:
    if not isinstance(index, Tensor):
        raise DTypeError(f"{op} takes its indices as an integer tensor, got {type(index).__name__}")
    if not index.dtype.is_integer:
        raise DTypeError(f"{op} indexes with integer tensors, not {index.dtype.name}")


def wrapped_indices(op: str, index: np.ndarray, size: int) -> np.ndarray:
    """Indices in [-size, size) as int64 in [0, size); anything outside is refused by name."""
    idx = np.asarray(index).astype(np.int64, copy=False)
    if idx.size:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < -size or hi >= size:
            bad = lo if lo < -size else hi
            raise IndexingError(f"{op}: index {bad} is out of range for a dim of size {size}")
    return np.where(idx < 0, idx + size, idx)


def index_dtype() -> dtypes.DType:
    return dtypes.INDEX
