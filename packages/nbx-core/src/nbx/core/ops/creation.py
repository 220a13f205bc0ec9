"""Creation ops: empty, zeros, ones, full, arange, linspace, eye, the *_like forms, asarray."""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes, layout
from ..device import CPU, as_device
from ..dispatch import implementation, register
from ..errors import ArgumentError, DTypeError, NotSupportedError, ShapeError
from ..promotion import check_scalar
from ..tensor import Tensor, empty, from_numpy


def _fill(out: Tensor, value) -> Tensor:
    implementation("fill_", out.device)(out, value)
    return out


def zeros(*shape, dtype=None, device=None) -> Tensor:
    return _fill(empty(layout.shape_args(shape), dtype, device), 0)


def ones(*shape, dtype=None, device=None) -> Tensor:
    return _fill(empty(layout.shape_args(shape), dtype, device), 1)


def full(shape, fill_value, dtype=None, device=None) -> Tensor:
    if dtype is None:
        dtype = _scalar_dtype(fill_value)
    dt = dtypes.as_dtype(dtype)
    check_scalar(fill_value, dt)
    return _fill(empty(shape, dt, device), fill_value)


def empty_like(x: Tensor, dtype=None, device=None) -> Tensor:
    return empty(x.shape, dtype or x.dtype, device or x.device)


def zeros_like(x: Tensor, dtype=None, device=None) -> Tensor:
    return zeros(x.shape, dtype=dtype or x.dtype, device=device or x.device)


def ones_like(x: Tensor, dtype=None, device=None) -> Tensor:
    return ones(x.shape, dtype=dtype or x.dtype, device=device or x.device)


def full_like(x: Tensor, fill_value, dtype=None, device=None) -> Tensor:
    return full(x.shape, fill_value, dtype=dtype or x.dtype, device=device or x.device)


def _scalar_dtype(value):
    if isinstance(value, bool):
        return dtypes.bool_
    if isinstance(value, int):
        return dtypes.DEFAULT_INT
    if isinstance(value, float):
        return dtypes.DEFAULT_FLOAT
    if isinstance(value, complex):
        return dtypes.DEFAULT_COMPLEX
    raise DTypeError(f"fill value {value!r} is not a Python scalar")


def arange(start, stop=None, step=1, *, dtype=None, device=None) -> Tensor:
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise NotSupportedError("arange step cannot be zero")
    if dtype is None:
        dtype = dtypes.DEFAULT_FLOAT if any(isinstance(v, float) for v in (start, stop, step)) else dtypes.DEFAULT_INT
    dt = dtypes.as_dtype(dtype)
    length = max(math.ceil((stop - start) / step), 0)
    values = start + np.arange(length, dtype=np.float64 if dt.kind == "float" else np.int64) * step
    return from_numpy(values.astype(dt.host), as_device(device), copy=True)


def linspace(start, stop, num: int, *, dtype=None, device=None, endpoint: bool = True) -> Tensor:
    dt = dtypes.as_dtype(dtype) if dtype is not None else dtypes.DEFAULT_FLOAT
    if dt.kind not in ("float", "complex"):
        raise DTypeError(f"linspace makes floating tensors, not {dt.name}")
    values = np.linspace(start, stop, num, endpoint=endpoint, dtype=np.complex128 if dt.is_complex else np.float64)
    return from_numpy(values.astype(dt.host), as_device(device), copy=True)


def eye(n_rows: int, n_cols: int | None = None, *, k: int = 0, dtype=None, device=None) -> Tensor:
    dt = dtypes.as_dtype(dtype) if dtype is not None else dtypes.DEFAULT_FLOAT
    values = np.eye(n_rows, n_cols, k=k, dtype=np.float64).astype(dt.host)
    return from_numpy(values, as_device(device), copy=True)


def asarray(obj, dtype=None, device=None, copy: bool | None = None) -> Tensor:
    """A tensor from a tensor, a numpy array, a DLPack producer, a Python scalar or nested sequence.

    copy=None copies only when needed, copy=True always, copy=False never (a named error if it must).
    """
    dt = None if dtype is None else dtypes.as_dtype(dtype)
    if isinstance(obj, Tensor):
        target = obj.device if device is None else as_device(device)
        if copy is False and (target != obj.device or (dt is not None and dt is not obj.dtype)):
            from ..errors import ViewError
            raise ViewError("asarray(copy=False) would need a copy (another device or dtype)")
        out = obj.to(device=target, dtype=dt)
        return out.clone() if copy and out is obj else out
    if isinstance(obj, np.ndarray) or (hasattr(obj, "__array_interface__") and not hasattr(obj, "__dlpack__")):
        arr = np.asarray(obj)
    elif hasattr(obj, "__dlpack__") and not isinstance(obj, np.generic):
        from ..dlpack import from_dlpack
        out = from_dlpack(obj, copy=copy)
        return asarray(out, dtype=dt, device=device, copy=False if copy is None else None)
    else:
        arr = _from_python(obj, dt)
    if dt is not None and arr.dtype != dt.host:
        if copy is False:
            from ..errors import ViewError
            raise ViewError(f"asarray(copy=False) would need a cast from {arr.dtype} to {dt.name}")
        arr = arr.astype(dt.host)
    return from_numpy(arr, device, copy=copy)


def _from_python(obj, dt):
    """Python scalars and nested sequences: the standard's default dtypes, or dt when given."""
    if dt is not None:
        wide = {"float": np.float64, "complex": np.complex128}.get(dt.kind, dt.host)
        return _nested_array(obj, wide).astype(dt.host)
    if isinstance(obj, (bool, int, float, complex)):
        return np.asarray(obj, dtype=_scalar_dtype(obj).host)
    arr = _nested_array(obj, None)
    default = {"f": dtypes.DEFAULT_FLOAT, "i": dtypes.DEFAULT_INT, "u": dtypes.DEFAULT_INT,
               "c": dtypes.DEFAULT_COMPLEX, "b": dtypes.bool_}.get(arr.dtype.kind)
    if default is None:
        raise DTypeError(f"cannot make a tensor from {type(obj).__name__} of numpy dtype {arr.dtype}")
    return arr.astype(default.host, copy=False)


def _nested_array(obj, dtype) -> np.ndarray:
    try:
        return np.asarray(obj, dtype=dtype)
    except ValueError as error:
        uneven = _uneven_rows(obj) if isinstance(obj, (list, tuple)) else None
        if uneven is not None:
            raise ShapeError(f"a nested sequence whose rows have different lengths is ragged and makes no "
                             f"tensor (row lengths at the first uneven level: {uneven})") from None
        raise ArgumentError(f"cannot make a tensor from this {type(obj).__name__}: {error}") from None


def _uneven_rows(obj) -> list | None:
    """The row lengths at the first level of a nested sequence where they differ; None if none do."""
    rows = [r for r in obj if isinstance(r, (list, tuple))]
    if not rows:
        return None
    if len(rows) != len(obj) or len({len(r) for r in rows}) > 1:
        return [len(r) if isinstance(r, (list, tuple)) else "scalar" for r in obj]
    return _uneven_rows([x for r in rows for x in r])


# ---- CPU implementations ----------------------------------------------------------------------
@register("fill_", "cpu")
def _fill_cpu(out: Tensor, value) -> None:
    out._host_view()[...] = np.asarray(value).astype(out.dtype.host)


@register("copy_", "cpu")
def _copy_cpu(dst: Tensor, src: Tensor) -> None:
    np.copyto(dst._host_view(), src._host_view().astype(dst.dtype.host, copy=False), casting="unsafe")


__all__ = ["empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like",
           "arange", "linspace", "eye", "asarray", "from_numpy", "CPU"]
