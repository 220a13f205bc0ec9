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


def deviation(out, ref) -> float:
    """max|out - ref| / max|ref| over the elements, computed in float64 (complex128).

    Infinite when the two disagree on which elements are finite (a NaN or an infinity in one and
    not the other, or infinities of different signs); 0 for two empty arrays. Integer and bool
    outputs are compared exactly by their callers: for them any non-zero deviation is a mismatch.
    """
    out = np.asarray(out)
    ref = np.asarray(ref)
    wide = np.complex128 if np.iscomplexobj(out) or np.iscomplexobj(ref) else np.float64
    out, ref = out.astype(wide), ref.astype(wide)
    if out.shape != ref.shape:
        raise ValueError(f"deviation of shapes {out.shape} and {ref.shape}")
    if out.size == 0:
        return 0.0
    finite_out, finite_ref = np.isfinite(out), np.isfinite(ref)
    if not np.array_equal(finite_out, finite_ref):
        return float("inf")
    special = ~finite_ref
    if special.any() and not np.array_equal(out[special], ref[special], equal_nan=True):
        return float("inf")
    if not finite_ref.any():
        return 0.0
    scale = np.max(np.abs(ref[finite_ref]))
    error = np.max(np.abs(out[finite_ref] - ref[finite_ref]))
    return float(error / scale) if scale > 0 else float(error)
