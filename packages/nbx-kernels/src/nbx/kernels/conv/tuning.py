"""Certified settings of the implicit-GEMM convolution: the tile, its warps and stages.

The launch key: the GEMM's M (output positions), N (output channels a group) and K (input
channels a group x kernel taps) on the dims ladder, the output dtype, whether the input is
channels-last (its channels at unit stride), and `spatial`, the convolution's spatial dims ("1":
conv1d and conv_transpose1d's phases, "2", "3"; a label: keys of other dims are no neighbours).
With channels_last the two decide the kernel's path (conv/__init__.py): a channels-first conv1d
reads A through A_SHIFT (a static shift a width tap), a channels-first 2-D/3-D one through A_TILE.

The representative launch (representative()): one sample, stride 1, 'same' padding (an even kernel:
its extra pad after), the input laid out as the key says, the weight with its channels at unit
stride (as a model converts it at load), whose GEMM is the key's: M positions (2-D: an isqrt(M)
square; 3-D: an icbrt(M) cube; 1-D: a length M), N output channels, and K = taps x channels inside
the key's K class. The taps: 3 a dim in 2-D and 3-D; in 1-D the largest of 7, 3, 2, 1 dividing the
K class's top into a multiple of 64 channels, else 3 (HiFi-GAN's k 7 x 512 is K 3584: 7 taps; its
upsampler's phases, 512 x 2: 2). An even 1-D key is a transposed convolution's phase (its keys'
launches are): its representative is one phase launch of conv_transpose1d of stride PHASE_STRIDE,
kernel taps x stride and padding stride / 2 (HiFi-GAN's x8 upsampler: k 16, s 8, p 4), taken from
the transposed plan (phase_plan): A_SHIFT with a negative dilation, its output every stride-th
position, each phase's outputs M (the input M - taps + 2 long), the weight as the phases read their
dense copy (taps `stride` apart, no descriptor: B_DESC off), so no copy a run. The channels: the
multiple of 64, else of 16, else of 8 nearest under top / taps whose K stays in the class (a
channel count models have, so rows are 16-byte aligned and the weight's descriptor path B_DESC is
taken where the launch takes it), else top // taps (a class of one value: K itself). A device file
without the dims ladder classes K as itself. The representative and the screen's smallest launch
(keys.smallest) take the same taps and channels: they follow the class, not the size.
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
existed ran unsplit: `implied`. A phase's key keeps none: the phases run unsplit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nbx import autotune
from nbx.core.ops.creation import asarray
from nbx.core.reference import oracle

from nbx.core import device_files
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
KEY = {"m": "dims", "n": "dims", "k": "dims", "dtype": "dtype", "channels_last": "flag", "spatial": "label"}
SPATIAL = ("1", "2", "3")   # the key's spatial labels (the device file's autotune.key_space lists them)
ONE_D_TAPS = (7, 3, 2, 1)   # a 1-D representative's taps, the first whose channels are a multiple of 64
CHANNEL_ALIGN = (64, 16, 8)  # a representative's channels: a multiple of the first that keeps K in its class
DIMS_LADDER = "autotune.buckets.dims"
PHASE_STRIDE = 8            # an even 1-D representative's transposed stride (HiFi-GAN's x8 upsampler)
PHASE = 0                   # the phase it runs: residue 0, o0 = stride / 2, PAD_W -1 (conv.phases)


def conv_key(m: int, n: int, k: int, dtype, channels_last: bool, spatial: int) -> dict:
    """spatial: the convolution's spatial dims (1, 2, 3; a transposed convolution's phases: its own)."""
    return {"m": m, "n": n, "k": k, "dtype": dtype, "channels_last": bool(channels_last), "spatial": str(spatial)}


@dataclass(frozen=True)
class Geometry:
    """The representative convolution: its spatial sizes (the output's too), taps a dim, channels,
    and (low, high) padding a dim."""
    sizes: tuple[int, ...]
    taps: int
    channels: int

    @property
    def kernel(self) -> tuple[int, ...]:
        return (self.taps,) * len(self.sizes)

    @property
    def pad(self) -> tuple[int, int]:
        return (self.taps - 1) // 2, self.taps // 2

    @property
    def steps_a_block(self) -> int:
        """Kernel taps (K steps per channel block)."""
        return self.taps ** len(self.sizes)

    @property
    def is_phase(self) -> bool:
        """An even 1-D kernel: a transposed convolution's phase (the module's docstring)."""
        return len(self.sizes) == 1 and self.taps % 2 == 0

    @property
    def phase_input(self) -> int:
        """The transposed convolution's input length: each phase's outputs are sizes[0]."""
        return max(1, self.sizes[0] - self.taps + 2)


def _class_of(facts):
    """The dims ladder's class of a size (the size itself on a device file stating no ladder)."""
    if DIMS_LADDER not in facts:
        return lambda size: size
    ladder = facts.value(DIMS_LADDER)
    return lambda size: device_files.bucket(ladder, size)


def _root(m: int, n: int) -> int:
    """The largest side whose n-th power is at most m (at least 1)."""
    side = max(1, round(m ** (1 / n)))
    while side > 1 and side ** n > m:
        side -= 1
    while (side + 1) ** n <= m:
        side += 1
    return side


def representative_channels(k: int, taps: int, class_of) -> int:
    """Channels c whose K = taps x c lies in k's class: the multiple of 64, 16 or 8 (the first that
    fits) at or under the class's top / taps, else top // taps."""
    top = class_of(k)
    for align in CHANNEL_ALIGN:
        c = top // taps // align * align
        if c and class_of(c * taps) == top:
            return c
    return max(1, top // taps)


def geometry(rep, facts) -> Geometry:
    spatial, m, k = int(rep["spatial"]), rep["m"], rep["k"]
    class_of = _class_of(facts)
    if spatial == 1:
        top = class_of(k)
        taps = next((t for t in ONE_D_TAPS if top % t == 0 and top // t % max(CHANNEL_ALIGN) == 0), 3)
        sizes = (max(1, m),)
    else:
        taps, sizes = 3, (_root(m, spatial),) * spatial
    return Geometry(sizes, taps, representative_channels(k, taps ** spatial, class_of))


def representative(rep, device):
    """(x, weight, geometry) of the key's representative convolution (the module's docstring); a phase's
    weight is conv_transpose1d's (C, N, taps x PHASE_STRIDE)."""
    from .. import launch
    geo = geometry(rep, launch.facts(device))
    s, channels, out_channels, dtype = len(geo.sizes), geo.channels, rep["n"], rep["dtype"]
    taps = geo.steps_a_block * (PHASE_STRIDE if geo.is_phase else 1)
    sizes = (geo.phase_input,) if geo.is_phase else geo.sizes
    values = np.sin(0.37 * np.arange(channels * math.prod(sizes)) + 0.5).reshape(1, channels, *sizes)
    kernel = (taps,) if geo.is_phase else geo.kernel
    w = (np.cos(0.21 * np.arange(out_channels * channels * taps)).reshape(out_channels, channels, *kernel)
         / math.sqrt(channels * geo.steps_a_block)).astype(dtype.host)
    last = (0, *range(2, s + 2), 1)   # channels at unit stride, the logical (N, C, *S) a view of it
    back = (0, s + 1, *range(1, s + 1))
    if rep["channels_last"]:
        x = asarray(np.ascontiguousarray(values.transpose(last)).astype(dtype.host), device=device).permute(*back)
    else:
        x = asarray(values.astype(dtype.host), device=device)
    # the weight laid out as a model converts it at load (docs/conv.md) and as a transposed convolution's
    # phases read their copy: channels at unit stride, so the B tile is read as the served call reads it (a
    # (O, C, 3, 3) weight is read scalar, on sm_90 334 SASS instructions a K step against 183)
    dense = asarray(np.ascontiguousarray(w.transpose(last)), device=device)
    if geo.is_phase:   # (N, K, C) dense: conv_transpose1d's (C, N, K) a view, the phases' copy's layout
        return x, dense.permute(2, 0, 1), geo
    return x, dense.permute(*back), geo


def representative_args(geo: Geometry) -> tuple:
    """launch_conv's (stride, pads, dilation, groups) of the representative; a phase's: transpose_plan's
    (stride, padding, output_padding, groups, dilation)."""
    s = len(geo.sizes)
    if geo.is_phase:
        return (PHASE_STRIDE,), (PHASE_STRIDE // 2,), (0,), 1, (1,)
    return (1,) * s, (geo.pad,) * s, (1,) * s, 1


def representative_phase(geo: Geometry):
    """(the transposed output's length, the conv.Phase PHASE) of a phase's representative."""
    from nbx.core.ops.conv import transpose_out_size
    from . import phases
    (stride,), (padding,), _, _, _ = representative_args(geo)
    kernel = geo.taps * stride
    size = transpose_out_size(geo.phase_input, padding, kernel, stride, 1, 0)
    return size, phases(size, kernel, stride, padding, 1)[PHASE]


def phase_plan(x, w, geo: Geometry, setting=None):
    """The plan of the one launch PHASE of the representative's transposed plan (its storage output,
    which that phase writes every stride-th position of)."""
    from ..plans import LaunchPlan
    from . import transpose_plan
    whole = transpose_plan(x, w, None, *representative_args(geo), setting=setting)
    return LaunchPlan(whole.device, whole.launches[PHASE:PHASE + 1], whole.outputs, detail=whole.detail)


def transposed_rows(x64: np.ndarray, w64, stride: int, padding: int, first: int, count: int, step: int):
    """conv_transpose1d's float64 oracle (no bias, groups 1) at output positions first + step j, j < count,
    as (positions, N, O): it transposes only the inputs that reach them (output o is position o + padding
    of the unpadded output, which input i's tap j reaches at i stride + j)."""
    kernel, length = w64.shape[2], x64.shape[2]
    low, high = first + padding, first + step * (count - 1) + padding
    lo, hi = max(0, -(-(low - kernel + 1) // stride)), min(length, high // stride + 1)
    part = np.asarray(oracle("conv_transpose1d", asarray(np.ascontiguousarray(x64[:, :, lo:hi])), w64, None,
                             stride, 0, 0, 1, 1))
    at = low - lo * stride
    return part[:, :, at:at + step * count:step].transpose(2, 0, 1)


def _phase_workload(rep, device, x, w, geo: Geometry):
    """The phase launch into its strided view of the output; its oracle conv_transpose1d's at those
    positions, each window of them transposing only the inputs it reads."""
    from .. import launch, plans
    from . import storage_layout
    size, phase = representative_phase(geo)
    shape, _, logical = storage_layout(1, rep["n"], (size,), rep["channels_last"])
    storage = launch.output(shape, rep["dtype"], device)
    view = storage.permute(*logical)[:, :, phase.o0::PHASE_STRIDE]
    x64, w64 = x.numpy().astype(np.float64), asarray(w.numpy().astype(np.float64))
    (stride,), (padding,), _, _, _ = representative_args(geo)

    def reference(rows: slice) -> np.ndarray:
        start, stop, _ = rows.indices(view.shape[2])
        return transposed_rows(x64, w64, stride, padding, phase.o0 + stride * start, stop - start, stride)

    def run(setting):
        plans.execute(phase_plan(x, w, geo, setting), {"x": x, "w": w, "bias": x, "out": storage})

    return autotune.TensorWorkload(view.permute(2, 0, 1), run, reference)


def conv_workload(rep, device):
    from .. import launch
    from . import launch_conv
    x, w, geo = representative(rep, device)
    if geo.is_phase:
        return _phase_workload(rep, device, x, w, geo)
    s, n, outs = len(geo.sizes), rep["n"], geo.sizes
    if rep["channels_last"]:  # the output keeps the input's layout
        storage = launch.output((1, *outs, n), rep["dtype"], device)
        out = storage.permute(0, s + 1, *range(1, s + 1))
    else:
        storage = out = launch.output((1, n, *outs), rep["dtype"], device)
    # the screen compares windows of rows: the output's first spatial dim leads (its one sample would be every
    # row; 1-D: positions), and each window's oracle convolves only the input it reads, the halo included (a
    # 1024^2 key's whole float64 oracle took the certifier 40-65 s)
    lead = (2, 0, 1, *range(3, s + 2))
    padded = np.pad(x.numpy().astype(np.float64), ((0, 0), (0, 0), *[geo.pad] * s))
    w64 = asarray(w.numpy().astype(np.float64))
    args = representative_args(geo)

    def reference(rows: slice) -> np.ndarray:
        start, stop, _ = rows.indices(outs[0])
        image = asarray(np.ascontiguousarray(padded[:, :, start:stop + geo.taps - 1]))
        return np.asarray(oracle(f"conv{s}d", image, w64, None, 1, 0, 1, 1)).transpose(lead)

    return autotune.TensorWorkload(
        out.permute(*lead), lambda setting: launch_conv(x, w, None, *args, out=storage, setting=setting), reference)


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
    channels = geometry(rep, facts).channels
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
    if geometry(rep, facts).is_phase:   # its launch would time the unsplit tile under a split's name
        return f"split_k {split} on a transposed convolution's phase: the phases run unsplit (conv._transpose_plan)"
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
    geo = geometry(rep, facts)
    steps = geo.steps_a_block * -(-geo.channels // setting["block_k"])
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


def conv_setting(device, m: int, n: int, k: int, dtype, channels_last: bool, spatial: int):
    """The served setting of an implicit GEMM of output dtype."""
    return autotune.setting(CONV, device, **conv_key(m, n, k, dtype, channels_last, spatial))


__all__ = ["CONV", "PARAMS", "KEY", "SPATIAL", "conv_key", "conv_setting", "geometry", "representative",
           "phase_plan", "representative_phase", "transposed_rows"]
