"""The float64 oracle: each op's numpy reference, computed in float64 (complex128).

The CPU backend runs the same references at the op's own precision (fp32 for the half types);
kernel tests and the certifier compare every kernel's output with `oracle(op, ...)`.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .errors import NotSupportedError

NATIVE = "native"
FLOAT64 = "float64"

_REFERENCES: dict[str, Callable] = {}


def register(op: str, fn: Callable) -> None:
    """fn(*operands, precision=..., **kw) -> np.ndarray (or a tuple of them)."""
    _REFERENCES[op] = fn


def oracle(op: str, *operands, **kwargs) -> np.ndarray:
    """op's result computed from the same operands in float64, as a numpy array."""
    try:
        fn = _REFERENCES[op]
    except KeyError:
        raise NotSupportedError(f"no numpy reference is registered for {op!r}") from None
    return fn(*operands, precision=FLOAT64, **kwargs)


def ops_with_reference() -> list[str]:
    return sorted(_REFERENCES)
