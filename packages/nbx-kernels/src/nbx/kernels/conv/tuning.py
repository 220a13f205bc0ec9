"""Certified settings of the implicit-GEMM convolution: the tile, its warps and stages.

The launch key: the GEMM's M (output positions), N (output channels a group) and K (input
channels a group x kernel taps) on the dims ladder, the output dtype, and whether the input is
channels-last (its channels at unit stride). The representative launch is a 3 x 3 convolution,
stride 1, padding 1, of one sample whose sizes give the key's M, N and K, laid out as the key says
(channels-last: the weight too).
The window kernels (depthwise, pooling) and the resampling kernel are memory-bound and take the
device file's tiles.window and tiles.resample.

Candidates (<= ~20 a key, what the H200's certification can time): tiles of 64 or 128 positions by
64, 128 or 256 output channels, K steps of 32 to 128 channels, 2 to 4 stages, pruned by shared
memory (16-bit stages), by warps (8 for tiles of 128 x 128 and more: a warpgroup's wgmma is 64 rows;
4 up to 128 x 128 x 64: a 128 x 256 float32 accumulator over 128 threads passes the registers, and
128 x 128 x 128 took 232-255 with spills), and per
key: a tile twice the key's M or N, 64-row tiles on 4096 positions or more (each weight tile read
too often), tiles past 128 x 128 under 4096 positions (too few programs), K steps of 128 on
64-row tiles, K steps under 128 bytes on a long K (too short to pipeline), block_k past twice the
representative's channels a tap, and 2 stages where 3 fit.

split_k (1, 2, 4, 8): programs that share one tile's K loop, each summing its share of the (tap,
channel) steps into float32 partials that the split epilogue adds in split order (conv/split.py).
Kept on SPLIT_TILE alone (128 x 128 x 64, 4 and 8 warps, at the most stages that fit: two
candidates a key, so a key stays within ~20), where its tiles are fewer than SPLIT_WAVES waves of
the device's multiprocessors (a device file without `compute.multiprocessors` keeps none), at the
least split that fills those waves, each split keeping SPLIT_MIN_STEPS K steps or more (SD's
16^2 x 1280 key: 40 tiles on 132 SMs, 184 steps: split_k 8). Certificates made before split_k
existed ran unsplit: `implied`.
"""
from __future__ import annotations

import math

import numpy as np

from nbx import autotune
from nbx.core.ops.creation import asarray
from nbx.core.reference import oracle

from nbx.core.dtypes import as_dtype

from ..matmul.tuning import _warps_for_tile, stage_bytes, stages_that_fit

PARAMS = {"block_m": (64, 128), "block_n": (64, 128, 256), "block_k": (32, 64, 128), "group_m": (8,),
          "num_warps": (4, 8), "num_stages": (2, 3, 4), "split_k": (1, 2, 4, 8)}
IMPLIED = {"split_k": 1}   # what a certified setting without split_k ran with
SPLIT_WAVES = 2          # split K only where the tiles are fewer than this many waves of the multiprocessors
SPLIT_MIN_STEPS = 8      # K steps each split keeps at least
SPLIT_TILE = (128, 128, 64)   # the tile split K is tried on: few programs of it are what a split multiplies
WIDE_M = 4096            # positions from which only 128-row tiles are kept
SWIZZLE_ROW = 128        # bytes: a K step narrower than the widest shared-memory swizzle row
WARPGROUP_ACC = 128 * 128   # the widest tile 4 warps (one warpgroup) hold in registers
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
    w = (np.cos(0.21 * np.arange(out_channels * channels * TAPS)).reshape(out_channels, channels, 3, 3)
         / math.sqrt(channels * TAPS)).astype(dtype.host)
    if rep["channels_last"]:   # the weight laid out as a model converts it at load (docs/conv.md): channels at unit
        # stride, so the B tile is read as the served call reads it (a (O, C, 3, 3) weight is read scalar, on sm_90
        # 334 SASS instructions a K step against 183)
        return x, asarray(np.ascontiguousarray(w.transpose(0, 2, 3, 1)), device=device).permute(0, 3, 1, 2)
    return x, asarray(w, device=device)


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
    # the screen compares windows of rows: the output's image rows lead (its one sample would be every row),
    # and each window's oracle convolves only the input rows it reads (a 1024^2 key's whole float64
    # oracle took the certifier 40-65 s)
    padded = np.pad(x.numpy().astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    w64 = asarray(w.numpy().astype(np.float64))

    def reference(rows: slice) -> np.ndarray:
        start, stop, _ = rows.indices(side)
        image = asarray(np.ascontiguousarray(padded[:, :, start:stop + 2]))
        return np.asarray(oracle("conv2d", image, w64, None, 1, 0, 1, 1)).transpose(2, 0, 1, 3)

    return autotune.TensorWorkload(
        out.permute(2, 0, 1, 3), lambda setting: launch_conv(x, w, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1,
                                                             out=storage, setting=setting),
        reference)


def _warps_fit(setting, facts):
    if setting["num_warps"] == 4 and setting["block_m"] * setting["block_n"] > WARPGROUP_ACC:
        return (f"4 warps over a {setting['block_m']} x {setting['block_n']} tile: its float32 accumulator passes "
                f"a warpgroup's registers")
    if (setting["num_warps"] == 4 and setting["block_m"] * setting["block_n"] == WARPGROUP_ACC
            and setting["block_k"] == max(PARAMS["block_k"])):
        return ("4 warps over a 128 x 128 x 128 tile: on sm_90 232-255 registers, 240 bytes spilled where a "
                "channels-first input is read scalar (tools/sm90_conv_report.py --all)")
    return _warps_for_tile(setting, facts)


def _fits(setting, rep, facts):
    for block, size in (("block_m", "m"), ("block_n", "n")):
        if setting[block] > min(PARAMS[block]) and setting[block] // 2 >= rep[size]:
            return f"{block} {setting[block]} covers {size}={rep[size]} twice over"
    if setting["block_m"] < max(PARAMS["block_m"]) and rep["m"] >= WIDE_M:
        return f"block_m {setting['block_m']} on m={rep['m']}: each weight tile is read too often"
    if rep["m"] < WIDE_M and setting["block_m"] * setting["block_n"] > WARPGROUP_ACC:
        return (f"a {setting['block_m']} x {setting['block_n']} tile on m={rep['m']}: {WIDE_M // 128} x n/256 "
                f"programs at most, too few to fill the device")
    if setting["block_m"] < max(PARAMS["block_m"]) and setting["block_k"] == max(PARAMS["block_k"]):
        return f"block_k {setting['block_k']} on a {setting['block_m']}-row tile: 64 keeps its stages and its programs"
    itemsize = as_dtype(rep["dtype"]).itemsize
    if setting["block_k"] * itemsize < SWIZZLE_ROW and rep["k"] >= 16 * setting["block_k"]:
        return f"block_k {setting['block_k']} on k={rep['k']}: {setting['block_k'] * itemsize}-byte steps"
    channels = max(1, rep["k"] // TAPS)
    if setting["block_k"] > min(PARAMS["block_k"]) and setting["block_k"] // 2 >= channels:
        return f"block_k {setting['block_k']} covers the representative's {channels} channels a tap twice over"
    split = _split_fits(setting, rep, facts)
    if split is not True:
        return split
    limit = facts.value("memory.max_shared_memory_per_block")
    if setting["num_stages"] * stage_bytes(setting, itemsize, itemsize) > limit:
        return f"{setting['num_stages']} stages of {itemsize}-byte operands pass {limit} bytes of shared memory"
    if setting["num_stages"] == 2 and stages_that_fit({**setting, "num_stages": 3}, itemsize, itemsize, facts) == 3:
        return "2 stages where 3 fit in shared memory"
    return True


def _split_fits(setting, rep, facts):
    split = setting["split_k"]
    if split == 1:
        return True
    tile = tuple(setting[b] for b in ("block_m", "block_n", "block_k"))
    if tile != SPLIT_TILE:
        return f"split_k {split} on a {' x '.join(map(str, tile))} tile: the split candidates are {SPLIT_TILE}'s"
    if "compute.multiprocessors" not in facts:
        return f"split_k {split}: the device file states no compute.multiprocessors to judge a split by"
    itemsize = as_dtype(rep["dtype"]).itemsize
    most = stages_that_fit({**setting, "num_stages": max(PARAMS["num_stages"])}, itemsize, itemsize, facts)
    if setting["num_stages"] < most:
        return f"split_k {split} at {setting['num_stages']} stages where {most} fit"
    waves = SPLIT_WAVES * facts.value("compute.multiprocessors")
    tiles = -(-rep["m"] // setting["block_m"]) * -(-rep["n"] // setting["block_n"])
    if tiles >= waves:
        return f"split_k {split} on {tiles} tiles: {SPLIT_WAVES} waves of the multiprocessors are filled unsplit"
    steps = TAPS * -(-max(1, rep["k"] // TAPS) // setting["block_k"])
    fills = next((s for s in PARAMS["split_k"] if tiles * s >= waves), max(PARAMS["split_k"]))
    if split != fills:
        return f"split_k {split} on {tiles} tiles: split_k {fills} is the least that fills {SPLIT_WAVES} waves"
    if steps < SPLIT_MIN_STEPS * split:
        return f"split_k {split} of {steps} K steps: under {SPLIT_MIN_STEPS} steps a split"
    return True


CONV = autotune.declare(autotune.Tunable(
    "conv", params=PARAMS, key=KEY, default_from="tiles.conv", workload=conv_workload,
    constraint=autotune.all_of(autotune.shared_memory(lambda s: s["num_stages"] * stage_bytes(s)), _warps_fit),
    fits=_fits, implied=IMPLIED))


def conv_setting(device, m: int, n: int, k: int, dtype, channels_last: bool):
    """The served setting of an implicit GEMM of output dtype."""
    return autotune.setting(CONV, device, **conv_key(m, n, k, dtype, channels_last))


__all__ = ["CONV", "PARAMS", "KEY", "conv_key", "conv_setting"]
