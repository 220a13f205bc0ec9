"""The dtype table (dtypes.yml) as long-lived DType objects, one per dtype.

Triton accepts any pointer argument whose dtype's str() ends in the dtype's name, and caches by
the object, so each dtype exists exactly once: compare with `is` or `==`, both hold.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

import ml_dtypes
import numpy as np
import yaml

from .errors import UnknownDTypeError

_KINDS = ("bool", "int", "uint", "float", "complex")


@dataclass(frozen=True, eq=False)
class DType:
    name: str
    bits: int
    itemsize: int
    kind: str
    safetensors: str | None
    dlpack: tuple[int, int, int]
    host: np.dtype
    triton: str | None
    key: str

    def __str__(self) -> str:
        return f"nbx.{self.name}"

    def __eq__(self, other) -> bool:
        """Equal to itself and to every spelling of itself, as numpy's dtypes compare:
        nbx.float32 == np.float32 == "float32" == "f4"; anything that is no dtype is unequal."""
        if other is self:
            return True
        if type(other) is DType:
            return False
        try:
            return as_dtype(other) is self
        except (UnknownDTypeError, TypeError, ValueError):
            return False

    __hash__ = object.__hash__  # one object per dtype: hash by identity, as before __eq__ existed

    __repr__ = __str__

    def __reduce__(self):  # pickles as a lookup, so the one object per dtype survives
        return (as_dtype, (self.name,))

    @property
    def is_floating(self) -> bool:
        return self.kind == "float"

    @property
    def is_complex(self) -> bool:
        return self.kind == "complex"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        return self.kind in ("int", "float", "complex")


def _host_dtype(name: str) -> np.dtype:
    if hasattr(ml_dtypes, name) and not hasattr(np, name):
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def _load_table() -> dict[str, DType]:
    text = resources.files(__package__).joinpath("dtypes.yml").read_text()
    table = {}
    for name, row in yaml.safe_load(text).items():
        if row["kind"] not in _KINDS:
            raise UnknownDTypeError(f"dtypes.yml: {name} has unknown kind {row['kind']!r}")
        table[name] = DType(
            name=name, bits=row["bits"], itemsize=row["itemsize"], kind=row["kind"],
            safetensors=row.get("safetensors"), dlpack=tuple(row["dlpack"]),
            host=_host_dtype(row["host"]), triton=row.get("triton"), key=row["key"],
        )
    return table


TABLE: dict[str, DType] = _load_table()
_BY_HOST = {dt.host: dt for dt in TABLE.values()}
_BY_SAFETENSORS = {dt.safetensors: dt for dt in TABLE.values() if dt.safetensors}
_BY_DLPACK = {dt.dlpack: dt for dt in TABLE.values()}
_BY_KEY = {dt.key: dt for dt in TABLE.values()}

globals().update(TABLE)  # nbx.core.dtypes.float16 and friends
bool_ = TABLE["bool"]

DEFAULT_FLOAT = TABLE["float32"]
DEFAULT_INT = TABLE["int64"]
DEFAULT_COMPLEX = TABLE["complex64"]
INDEX = TABLE["int64"]


# Short spellings users bring from torch and the ML libraries. numpy's own strings ("f4", "<i8",
# "float64", "double") are read by numpy below; torch's "float" (float32) and "long" (int64) are
# listed here because numpy would read "float" as float64. The Python types map as numpy maps them.
ALIASES = {
    "bf16": "bfloat16", "fp16": "float16", "f16": "float16", "half": "float16",
    "fp32": "float32", "f32": "float32", "float": "float32", "fp64": "float64", "f64": "float64",
    "double": "float64", "fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "float8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2", "int": "int64", "long": "int64", "short": "int16",
    "cfloat": "complex64", "cdouble": "complex128",
}
_PYTHON_TYPES = {bool: "bool", int: "int64", float: "float64", complex: "complex128"}


def as_dtype(value: Any) -> DType:
    """The table's DType for a DType, a name or alias (ALIASES), a numpy dtype, scalar type or
    string ("f4"), or a Python type (float is float64, int int64, as numpy maps them); else a
    named error."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        found = TABLE.get(value)  # a table name ("float32"): no alias or numpy spelling to read
        if found is not None:
            return found
        if value.startswith("nbx."):  # nbx's own spelling (str(nbx.float32)): the table's names only
            name, host = value.removeprefix("nbx."), None
        else:
            name = ALIASES.get(value, value)
            try:
                host = None if name in TABLE else np.dtype(name)
            except TypeError:
                host = None
        if name in TABLE:
            return TABLE[name]
        if host is not None and host in _BY_HOST:
            return _BY_HOST[host]
        raise UnknownDTypeError(f"unknown dtype {value!r}: the dtype table holds {sorted(TABLE)}, "
                                f"and the aliases {sorted(ALIASES)}")
    if value in _PYTHON_TYPES and isinstance(value, type):
        return TABLE[_PYTHON_TYPES[value]]
    try:
        host = np.dtype(value)
    except TypeError:
        host = None
    if host is not None and host in _BY_HOST:
        return _BY_HOST[host]
    name = getattr(value, "name", None) or str(value).rsplit(".", 1)[-1]
    if name in TABLE:  # a foreign dtype object (torch.float16, jnp.bfloat16) spelled like ours
        return TABLE[name]
    raise UnknownDTypeError(f"unknown dtype {value!r}: the dtype table holds {sorted(TABLE)}")


def from_safetensors(code: str) -> DType:
    try:
        return _BY_SAFETENSORS[code]
    except KeyError:
        raise UnknownDTypeError(
            f"safetensors dtype code {code!r} is not in nbx's dtype table "
            f"(known: {sorted(_BY_SAFETENSORS)})") from None


def from_dlpack(code: int, bits: int, lanes: int) -> DType:
    try:
        return _BY_DLPACK[(code, bits, lanes)]
    except KeyError:
        raise UnknownDTypeError(
            f"DLPack dtype (code={code}, bits={bits}, lanes={lanes}) is not in nbx's dtype table") from None


def from_key(key: str) -> DType:
    try:
        return _BY_KEY[key]
    except KeyError:
        raise UnknownDTypeError(f"autotune key dtype spelling {key!r} is not in nbx's dtype table") from None


def computes_in(dtype: DType) -> DType:
    """The dtype arithmetic on dtype runs in: float32 for the half and float8 types (one rounding
    at the store), else dtype itself. The one statement of the rule: CPU references and kernels read it."""
    return TABLE["float32"] if dtype.kind == "float" and dtype.itemsize < 4 else dtype


def statistics_dtype(dtype: DType) -> DType:
    """The dtype a row's statistics (softmax's max and sum, a norm's moments) and a random draw's
    arithmetic are kept in: float64 for float64, else float32."""
    return TABLE["float64"] if dtype is TABLE["float64"] else TABLE["float32"]


def iinfo(dtype: Any) -> np.iinfo:
    dt = as_dtype(dtype)
    if not dt.is_integer:
        raise UnknownDTypeError(f"iinfo needs an integer dtype, got {dt}")
    return np.iinfo(dt.host)


def finfo(dtype: Any):
    dt = as_dtype(dtype)
    if dt.kind not in ("float", "complex"):
        raise UnknownDTypeError(f"finfo needs a floating dtype, got {dt}")
    return ml_dtypes.finfo(dt.host)
