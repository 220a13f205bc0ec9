"""What every op front-end does first: operands to tensors, one device, dtype checks."""
from __future__ import annotations

import functools
import inspect

import numpy as np

from .. import dtypes
from ..layout import as_c_contiguous
from ..device import CPU, Device
from ..dtypes import DType
from ..errors import ArgumentError, CrossDeviceError, DTypeError
from ..tensor import Tensor

SCALARS = (bool, int, float, complex)

# dtype categories of the Array API standard, plus "any"
CATEGORIES = {
    "any": ("bool", "int", "uint", "float", "complex"),
    "numeric": ("int", "uint", "float", "complex"),
    "real": ("int", "uint", "float"),
    "integer": ("int", "uint"),
    "integer_or_bool": ("bool", "int", "uint"),
    "floating": ("float", "complex"),
    "real_floating": ("float",),
    "bool": ("bool",),
    "complex": ("complex",),
}


def common_device(*operands) -> Device:
    devices = {o.device for o in operands if isinstance(o, Tensor)}
    if len(devices) > 1:
        raise CrossDeviceError(
            f"operands live on different devices ({', '.join(sorted(map(str, devices)))}); "
            f"copy explicitly with .to(device)")
    return devices.pop() if devices else CPU


def check_category(op: str, dtype: DType, category: str) -> None:
    if dtype.kind not in CATEGORIES[category]:
        raise DTypeError(f"{op} does not accept {dtype.name} (it takes {category} dtypes)")


def compute_dtype(dtype: DType) -> np.dtype:
    """The host dtype a CPU reference computes in (dtypes.computes_in)."""
    return dtypes.computes_in(dtype).host


def host_operand(value, compute: np.dtype) -> np.ndarray:
    """A tensor (viewed in place) or a weak Python scalar, in the compute dtype."""
    if isinstance(value, Tensor):
        return value.numpy().astype(compute, copy=False)
    return np.asarray(value, dtype=compute)


def oracle_dtype(dtype: DType) -> np.dtype:
    """float64 (complex128) for floating dtypes: the precision of the oracle."""
    if dtype.kind == "float":
        return np.dtype(np.float64)
    if dtype.kind == "complex":
        return np.dtype(np.complex128)
    return dtype.host


def wrap(arr: np.ndarray, dtype: DType, device: Device = CPU) -> Tensor:
    """A numpy result as a tensor of dtype (rounded once from the compute dtype)."""
    from ..tensor import from_numpy
    arr = np.asarray(arr)
    if arr.dtype != dtype.host:
        arr = arr.astype(dtype.host)
    return from_numpy(as_c_contiguous(arr), device)


def default_float_for(dtype: DType) -> DType:
    """Integer and bool inputs of floating functions compute in the default float dtype."""
    return dtype if dtype.kind in ("float", "complex") else dtypes.DEFAULT_FLOAT


_NUMPY_SPELLINGS = {"axis": "dim", "keepdims": "keepdim"}


def accepts_axis(fn):
    """fn, also taking numpy's spellings axis= and keepdims= for its dim= and keepdim= (torch's)."""
    params = inspect.signature(fn).parameters
    if "dim" not in params or "axis" in params:
        return fn

    @functools.wraps(fn)
    def front_end(*args, **kw):
        if kw and ("axis" in kw or "keepdims" in kw):
            for numpy_name, name in _NUMPY_SPELLINGS.items():
                if numpy_name in kw:
                    if name in kw:
                        raise ArgumentError(f"{fn.__name__} got both {name}= and {numpy_name}=; pass one")
                    kw[name] = kw.pop(numpy_name)
        return fn(*args, **kw)
    return front_end
