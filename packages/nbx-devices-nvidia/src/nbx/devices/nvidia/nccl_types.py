"""nbx dtypes and reduction names as NCCL's ncclDataType_t and ncclRedOp_t, per NCCL version.

A collective that only moves data (broadcast, all_gather, send/recv) takes every dtype of the
table: a dtype NCCL has no type for moves as its bytes (ncclUint8, itemsize bytes an element).
A reduction needs NCCL to know the arithmetic: the dtype's own NCCL type; complex dtypes for sum
and avg as pairs of their real components; bool for max and min as uint8 (or / and). Anything
else is refused by name (NcclDTypeError), never reduced as bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from nbx.core.dtypes import DType, as_dtype
from nbx.core.errors import ArgumentError

from .nccl_errors import NcclDTypeError

# nbx dtype name -> (ncclDataType_t, NCCL's name, first NCCL version that has it)
NCCL_TYPES: dict[str, tuple[int, str, tuple[int, int]]] = {
    "int8": (0, "ncclInt8", (2, 0)),
    "uint8": (1, "ncclUint8", (2, 0)),
    "int32": (2, "ncclInt32", (2, 0)),
    "uint32": (3, "ncclUint32", (2, 0)),
    "int64": (4, "ncclInt64", (2, 0)),
    "uint64": (5, "ncclUint64", (2, 0)),
    "float16": (6, "ncclFloat16", (2, 0)),
    "float32": (7, "ncclFloat32", (2, 0)),
    "float64": (8, "ncclFloat64", (2, 0)),
    "bfloat16": (9, "ncclBfloat16", (2, 10)),
    "float8_e4m3fn": (10, "ncclFloat8e4m3", (2, 24)),   # NCCL's e4m3 is OCP's finite-only (fn) format
    "float8_e5m2": (11, "ncclFloat8e5m2", (2, 24)),
}
UINT8 = NCCL_TYPES["uint8"][0]

# reduction name -> (ncclRedOp_t, NCCL's name, first NCCL version that has it)
REDUCE_OPS: dict[str, tuple[int, str, tuple[int, int]]] = {
    "sum": (0, "ncclSum", (2, 0)),
    "prod": (1, "ncclProd", (2, 0)),
    "max": (2, "ncclMax", (2, 0)),
    "min": (3, "ncclMin", (2, 0)),
    "avg": (4, "ncclAvg", (2, 10)),   # the sum divided by the world size (integers: truncated)
}

# dtypes NCCL has no type for but whose reduction is NCCL's on another type
_COMPONENTS = {"complex64": "float32", "complex128": "float64"}   # sum and avg act on each component
_COMPONENT_OPS = ("sum", "avg")
_BOOL_OPS = ("max", "min")   # any / all; a sum of bools would leave {0, 1}


@dataclass(frozen=True)
class Wire:
    """How a buffer of `numel` nbx elements goes to NCCL: NCCL's type code, name and element count."""
    code: int
    name: str
    count: int


def _version_text(version: tuple[int, ...]) -> str:
    return ".".join(str(v) for v in version)


def reduce_op(op: str, version: tuple[int, ...]) -> int:
    """ncclRedOp_t of a reduction name; an unknown name or one this NCCL lacks is refused."""
    if op not in REDUCE_OPS:
        raise ArgumentError(f"unknown reduction {op!r}; NCCL reductions: {', '.join(REDUCE_OPS)}")
    code, name, since = REDUCE_OPS[op]
    if tuple(version[:2]) < since:
        raise NcclDTypeError(f"the reduction {op!r} ({name}) needs NCCL >= {_version_text(since)}; "
                             f"this is NCCL {_version_text(version)}")
    return code


def _native(dtype: DType, version: tuple[int, ...]) -> tuple[int, str] | None:
    entry = NCCL_TYPES.get(dtype.name)
    if entry is None or tuple(version[:2]) < entry[2]:
        return None
    return entry[0], entry[1]


def wire(dtype, numel: int, version: tuple[int, ...], op: str | None = None) -> Wire:
    """How numel elements of dtype go to NCCL: for a reduction by op, or (op None) only moved."""
    dtype = as_dtype(dtype)
    native = _native(dtype, version)
    if op is None:
        if native is not None:
            return Wire(native[0], native[1], numel)
        return Wire(UINT8, "ncclUint8", numel * dtype.itemsize)   # moved as bytes: any dtype
    reduce_op(op, version)
    if native is not None:
        return Wire(native[0], native[1], numel)
    component = _COMPONENTS.get(dtype.name)
    if component is not None and op in _COMPONENT_OPS:
        code, name, _ = NCCL_TYPES[component]
        return Wire(code, name, numel * 2)
    if dtype.name == "bool" and op in _BOOL_OPS:
        return Wire(UINT8, "ncclUint8", numel)
    raise NcclDTypeError(_refusal(dtype, op, version))


def _refusal(dtype: DType, op: str, version: tuple[int, ...]) -> str:
    entry = NCCL_TYPES.get(dtype.name)
    if entry is not None:
        return (f"a {op} reduction of {dtype.name} needs {entry[1]}, which arrived in NCCL "
                f"{_version_text(entry[2])}; this is NCCL {_version_text(version)} (data movement of "
                f"{dtype.name} works, as bytes)")
    if dtype.name in _COMPONENTS:
        return (f"NCCL reduces {dtype.name} only by {' and '.join(_COMPONENT_OPS)} (over its real "
                f"components); {op!r} of complex values is not componentwise")
    if dtype.name == "bool":
        return f"NCCL reduces bool only by {' and '.join(_BOOL_OPS)} (any / all), not by {op!r}"
    return (f"NCCL has no type for {dtype.name}, so it cannot {op}-reduce it (broadcast, all_gather and "
            f"send/recv move it as bytes); reducible dtypes: {', '.join(NCCL_TYPES)}, complex64/128 "
            f"(sum, avg), bool (max, min)")


def reducible(dtype, op: str, version: tuple[int, ...]) -> bool:
    try:
        wire(dtype, 1, version, op)
    except NcclDTypeError:
        return False
    return True
