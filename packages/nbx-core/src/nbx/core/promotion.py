"""Type promotion by the Array API standard's table (promotion.yml), with weak Python scalars.

A Python scalar does not take part in the dtype lattice: it adopts the tensor's dtype when its kind
fits (bool with bool; int with integer, floating and complex; float with floating and complex;
complex with complex) and is refused by name otherwise, or when an int does not fit the dtype.
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
        check_scalar(scalar, result)
    return result


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
