"""Type promotion by the Array API standard's table (promotion.yml), with weak Python scalars.

Mixed kinds, which the standard leaves open, follow torch and JAX (promotion.yml's mixed_kinds):
an integer dtype with a floating or complex dtype gives the floating operand's dtype.

A Python scalar does not take part in the dtype lattice: it adopts the tensor's dtype when its kind
fits (bool with bool; int with integer, floating and complex; float with floating and complex;
complex with complex). A Python float with an integer tensor gives the default float dtype
(float32), a Python complex the default complex dtype, as numpy, torch and JAX do. Anything else
is refused by name, and so is an int that does not fit an integer tensor's dtype.
"""
from __future__ import annotations

from importlib import resources

import numpy as np
import yaml

from . import dtypes
from .dtypes import DType
from .errors import PromotionError, ScalarOutOfRangeError


def _load() -> dict[tuple[DType, DType], DType]:
    spec = yaml.safe_load(resources.files(__package__).joinpath("promotion.yml").read_text())
    names = {abbr: dtypes.TABLE[name] for abbr, name in spec["names"].items()}
    table: dict[tuple[DType, DType], DType] = {}
    std = spec["standard"]
    columns = std["columns"]
    for row_abbr, cells in std.items():
        if row_abbr == "columns":
            continue
        for col_abbr, cell in zip(columns, cells, strict=True):
            if cell != "x":
                table[names[row_abbr], names[col_abbr]] = names[cell]
    for a, b, result in spec["extension"]:
        table[names[a], names[b]] = table[names[b], names[a]] = names[result]
    winners = spec["mixed_kinds"]["integer_with"]
    for integer in (d for d in dtypes.TABLE.values() if d.is_integer):
        for wide in (d for d in dtypes.TABLE.values() if d.kind in winners):
            table[integer, wide] = table[wide, integer] = wide
    return table


TABLE = _load()


def result_type(*operands) -> DType:
    """The promoted dtype of tensors, dtypes and Python scalars, by the standard's rules."""
    arrays, scalars = [], []
    for op in operands:
        dt = _dtype_of(op)
        if dt is None:
            scalars.append(op)
        else:
            arrays.append(dt)
    if not arrays:
        raise PromotionError("result_type needs at least one tensor or dtype; got only Python scalars")
    result = arrays[0]
    for other in arrays[1:]:
        result = promote_types(result, other)
    for scalar in scalars:
        result = _with_scalar(scalar, result)
    return result


def _with_scalar(value, dtype: DType) -> DType:
    """dtype after meeting a Python scalar: a float or complex lifts an integer dtype to the default."""
    if dtype.is_integer and not isinstance(value, bool):
        if isinstance(value, float):
            return dtypes.DEFAULT_FLOAT
        if isinstance(value, complex):
            return dtypes.DEFAULT_COMPLEX
    check_scalar(value, dtype)
    return dtype


def promote_types(a: DType, b: DType) -> DType:
    if a is b and type(a) is DType:
        return a
    a, b = dtypes.as_dtype(a), dtypes.as_dtype(b)
    try:
        return TABLE[a, b]
    except KeyError:
        raise PromotionError(
            f"promotion of {a.name} with {b.name} is not defined by the Array API standard and "
            f"nbx refuses to guess; cast one operand explicitly") from None


def check_scalar(value, dtype: DType) -> None:
    """Refuse a Python scalar whose kind does not fit dtype, or an int outside its range."""
    if isinstance(value, bool):
        fits = dtype.kind == "bool"
    elif isinstance(value, int):
        fits = dtype.kind in ("int", "uint", "float", "complex")
        if dtype.is_integer:
            info = np.iinfo(dtype.host)
            if not info.min <= value <= info.max:
                raise ScalarOutOfRangeError(
                    f"Python int {value} is outside the range of {dtype.name} "
                    f"[{info.min}, {info.max}]")
    elif isinstance(value, float):
        fits = dtype.kind in ("float", "complex")
    elif isinstance(value, complex):
        fits = dtype.kind == "complex"
    else:
        raise PromotionError(f"{type(value).__name__} is not a tensor, a dtype or a Python scalar")
    if not fits:
        raise PromotionError(
            f"a Python {type(value).__name__} cannot combine with a {dtype.name} tensor "
            f"(the Array API standard leaves it undefined); make the scalar a tensor of the dtype you want")


def _dtype_of(op) -> DType | None:
    if isinstance(op, (bool, int, float, complex)):
        return None
    if isinstance(op, DType):
        return op
    dt = getattr(op, "dtype", None)
    if type(dt) is DType:  # a tensor's
        return dt
    if dt is not None:
        return dtypes.as_dtype(dt)
    return dtypes.as_dtype(op)
