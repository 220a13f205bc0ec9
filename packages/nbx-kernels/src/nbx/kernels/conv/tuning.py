"""Certified settings of the implicit-GEMM convolution: the tile, its warps and stages.

The launch key: the GEMM's M (output positions), N (output channels a group) and K (input
channels a group x kernel taps) on the dims ladder, the output dtype, and whether the input is
channels-last (its channels at unit stride). The representative launch is a 3 x 3 convolution,
stride 1, padding 1, of one sample whose sizes give the key's M, N and K, laid out as the key says.
The window kernels (depthwise, pooling) and the resampling kernel are memory-bound and take the
device file's tiles.window and tiles.resample.
"""
from __future__ import annotations

import math

import numpy as np

from nbx import autotune
from nbx.core.ops.creation import asarray
from nbx.core.reference import oracle

from ..matmul.tuning import stage_bytes

PARAMS = {"block_m": (64, 128), "block_n": (64, 128), "block_k": (32, 64), "group_m": (8,),
          "num_warps": (4, 8), "num_stages": (2, 3, 4)}
KEY = {"m": "dims", "n": "dims", "k": "dims", "dtype": "dtype", "channels_last": "flag"}
TAPS = 9  # the representative 3 x 3 kernel


def conv_key(m: int, n: int, k: int, dtype, channels_last: bool) -> dict:
    return {"m": m, "n": n, "k": k, "dtype": dtype, "channels_last": bool(channels_last)}


def representative(rep, device):
    """(x, weight) of a 3 x 3 convolution whose GEMM is about the key's M x N x K."""
    side = max(1, math.isqrt(rep["m"]))
    channels, out_channels = max(1, rep["k"] // TAPS), rep["n"]
    dtype = rep["dtype"]
    values = np.sin(0.37 * np.arange(channels * side * side) + 0.5).reshape(1, channels, side, side)
    if rep["channels_last"]:
        x = asarray(np.ascontiguousarray(values.transpose(0, 2, 3, 1)).astype(dtype.host), device=device)
        x = x.permute(0, 3, 1, 2)
    else:
        x = asarray(values.astype(dtype.host), device=device)
    w = np.cos(0.21 * np.arange(out_channels * channels * TAPS)).reshape(out_channels, channels, 3, 3)
    return x, asarray((w / math.sqrt(channels * TAPS)).astype(dtype.host), device=device)


def conv_workload(rep, device):
    from .. import launch
    from . import launch_conv
    x, w = representative(rep, device)
    n, side = w.shape[0], x.shape[2]
    if rep["channels_last"]:  # the output keeps the input's layout
        storage = launch.output((1, side, side, n), rep["dtype"], device)
        out = storage.permute(0, 3, 1, 2)
    else:
        storage = out = launch.output((1, n, side, side), rep["dtype"], device)
    expected = np.asarray(oracle("conv2d", x, w, None, 1, 1, 1, 1))
    return autotune.TensorWorkload(
        out, lambda setting: launch_conv(x, w, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, out=storage,
                                         setting=setting),
        lambda rows: expected[rows])


CONV = autotune.declare(autotune.Tunable(
    "conv", params=PARAMS, key=KEY, default_from="tiles.conv", workload=conv_workload,
    constraint=autotune.shared_memory(lambda s: s["num_stages"] * stage_bytes(s))))


def conv_setting(device, m: int, n: int, k: int, dtype, channels_last: bool):
    """The served setting of an implicit GEMM of output dtype."""
    return autotune.setting(CONV, device, **conv_key(m, n, k, dtype, channels_last))


__all__ = ["CONV", "PARAMS", "KEY", "conv_key", "conv_setting"]
