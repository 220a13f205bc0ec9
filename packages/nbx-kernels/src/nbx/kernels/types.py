"""nbx dtypes as Triton element types, and the dtype a kernel computes in."""
from __future__ import annotations

import triton.language as tl

from nbx.core.dtypes import DType, computes_in
from nbx.core.errors import DTypeError

# the dtype table's `triton` spelling -> the triton.language attribute
_TL_NAMES = {
    "i1": "int1", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64",
    "fp8e4nv": "float8e4nv", "fp8e5": "float8e5",
}


def tl_type(dtype: DType):
    if dtype.triton is None:
        raise DTypeError(f"Triton has no element type for {dtype.name}; no kernel takes it")
    return getattr(tl, _TL_NAMES[dtype.triton])


def compute_type(dtype: DType):
    """The Triton type a kernel computes dtype in (nbx.core.dtypes.computes_in)."""
    return tl_type(computes_in(dtype))
