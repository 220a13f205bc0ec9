"""Block-scaled float8 weights (DeepSeek-V3's and Qwen3-FP8's checkpoints).

A weight of shape (..., N, K) is stored as float8 values (float8_e4m3fn or float8_e5m2) and one
float32 scale per block of block = (bn, bk) elements (128 x 128 in those checkpoints, whose
`weight_scale_inv` is this `scales`): w[..., n, k] ~ weight[..., n, k] * scales[..., n // bn, k // bk],
scales of shape (..., ceil(N / bn), ceil(K / bk)). Dequantization multiplies in float64 on the
host (the oracle's values) and casts once.
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from .device import as_device
from .errors import ArgumentError, CrossDeviceError, DTypeError, ShapeError
from .tensor import Tensor

FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
DEFAULT_BLOCK = (128, 128)


def _blocks(shape: tuple, block: tuple) -> tuple:
    return tuple(shape[:-2]) + (-(-shape[-2] // block[0]), -(-shape[-1] // block[1]))


class Float8BlockWeight:
    """A float8 weight (..., N, K) with float32 scales per (bn, bk) block."""

    def __init__(self, weight: Tensor, scales: Tensor, block: tuple = DEFAULT_BLOCK):
        if not isinstance(weight, Tensor) or weight.dtype.name not in FLOAT8:
            raise DTypeError(f"a block-scaled float8 weight is one of {FLOAT8}, got "
                             f"{getattr(weight, 'dtype', type(weight).__name__)}")
        if not isinstance(scales, Tensor) or scales.dtype.name != "float32":
            raise DTypeError(f"a float8 weight's block scales are float32, got "
                             f"{getattr(scales, 'dtype', type(scales).__name__)}")
        block = tuple(int(b) for b in block)
        if len(block) != 2 or min(block) < 1:
            raise ArgumentError(f"a float8 weight's scale block is (rows, columns) of positive sizes, got {block}")
        if weight.ndim < 2 or tuple(scales.shape) != _blocks(tuple(weight.shape), block):
            raise ShapeError(f"block scales of weight {weight.shape} at block {block} are "
                             f"{_blocks(tuple(weight.shape), block) if weight.ndim >= 2 else '(..., N, K)'}, "
                             f"got {scales.shape}")
        if weight.device != scales.device:
            raise CrossDeviceError(f"a float8 weight on {weight.device} with its scales on {scales.device}")
        self.weight, self.scales, self.block = weight, scales, block

    @property
    def shape(self) -> tuple:
        return tuple(self.weight.shape)

    @property
    def dtype(self):
        return self.weight.dtype

    @property
    def device(self):
        return self.weight.device

    @property
    def nbytes(self) -> int:
        return self.weight.nbytes + self.scales.nbytes

    def to(self, device) -> "Float8BlockWeight":
        dev = as_device(device)
        return Float8BlockWeight(self.weight.to(dev), self.scales.to(dev), self.block)

    def dequantize(self, dtype=None) -> Tensor:
        """weight * its block's scale, in float64, cast once to dtype (float32 unless asked), on the weight's device."""
        from .ops.creation import asarray
        dt = dtypes.DEFAULT_FLOAT if dtype is None else dtypes.as_dtype(dtype)
        if dt.kind != "float":
            raise DTypeError(f"float8 weights dequantize to a float dtype, not {dt.name}")
        n, k = self.shape[-2:]
        scale = _per_element(self.scales.numpy(), self.block, n, k)
        return asarray((self.weight.numpy().astype(np.float64) * scale).astype(dt.host), device=self.device)

    @staticmethod
    def quantize(w: Tensor, block: tuple = DEFAULT_BLOCK, dtype="float8_e4m3fn") -> "Float8BlockWeight":
        """w (..., N, K) as float8 with a scale per block: each block's largest magnitude maps to
        the float8 type's largest finite value (an all-zero block takes scale 1)."""
        from .ops.creation import asarray
        if not isinstance(w, Tensor) or w.ndim < 2 or w.dtype.kind != "float":
            raise ShapeError(f"float8 block quantization takes a float weight (..., N, K), got "
                             f"{getattr(w, 'shape', type(w).__name__)}")
        target = dtypes.as_dtype(dtype)
        if target.name not in FLOAT8:
            raise DTypeError(f"float8 block quantization makes one of {FLOAT8}, not {target.name}")
        block = tuple(int(b) for b in block)
        values = w.numpy().astype(np.float64)
        n, k = values.shape[-2:]
        grid = _blocks(values.shape, block)
        padded = np.zeros(grid[:-2] + (grid[-2] * block[0], grid[-1] * block[1]))
        padded[..., :n, :k] = values
        tiles = padded.reshape(grid[:-2] + (grid[-2], block[0], grid[-1], block[1]))
        amax = np.abs(tiles).max(axis=(-3, -1))
        scales = np.where(amax > 0, amax / float(dtypes.finfo(target).max), 1.0).astype(np.float32)
        full = _per_element(scales, block, n, k)
        weight = (values / full).astype(target.host)
        return Float8BlockWeight(asarray(weight, device=w.device), asarray(scales, device=w.device), block)

    def __repr__(self) -> str:
        return (f"Float8BlockWeight(shape={self.shape}, dtype={self.dtype.name}, block={self.block}, "
                f"device='{self.device}')")


def _per_element(scales: np.ndarray, block: tuple, n: int, k: int) -> np.ndarray:
    """Each block's scale repeated over its elements, in float64, cut to the weight's (N, K)."""
    return np.repeat(np.repeat(scales.astype(np.float64), block[0], axis=-2), block[1], axis=-1)[..., :n, :k]


__all__ = ["Float8BlockWeight", "FLOAT8", "DEFAULT_BLOCK"]
