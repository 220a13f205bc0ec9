"""Reduction test inputs (imported by the reduction and scan tests)."""
import zlib

import nbx.core as nbx
import numpy as np


def sample(dtype, shape, low=-3.0, high=3.0, int_low=-20, int_high=20):
    """Inputs that depend only on the arguments (the same data whatever order the tests run in);
    integers in [int_low, int_high) (from 0 for unsigned), floats in [low, high)."""
    rng = np.random.default_rng(zlib.crc32(repr((dtype, shape, low, high)).encode()))
    dt = nbx.as_dtype(dtype)
    if dt.kind == "bool":
        return rng.random(shape) > 0.5
    if dt.kind in ("int", "uint"):
        return rng.integers(0 if dt.kind == "uint" else int_low, int_high, shape)
    return rng.uniform(low, high, shape)


def on(device, array, dtype):
    return nbx.asarray(array, dtype=dtype).to(device)
