"""linear with a grouped int4 QuantizedTensor weight (W4A16) on the kernel devices: quantized.py.

x [..., K] is viewed as (rows, K) (copied only where its strides cannot merge); bias and residual
are read through their strides, as epilogue.py reads them. Decode rows and prefill take the same
kernel (int4_linear_kernel, the swapped product C^T = W @ x^T); the certified setting of the key
tells them apart: decode rows a 16-row tile of x over narrow weight tiles with split K (every SM
streams its share of the packed weight once), prefill wide tiles that keep the matrix unit busy.
A tile of at most FOLD_ROWS rows of x applies the scales to the dot's sums (fewer ops a weight
element, which decode rows, reading each weight element for one or a few rows, are bound by);
wider ones dequantize each element before the dot (its cost shared by the tile's rows).

kernel = prescaled: the same tiles, each K step's weight dequantized before the dot in one 16-bit fma
a pair from 16-bit halves of the packed weight (nibbles._halves_dequantized), so that the dot
accumulates across steps instead of waiting on its sums each step; any block_m, certified against
tiles per key (the rules of tiles hold for it; its prefill tiles take K steps of PREFILL_K and
REUSE_M rows of x or more, as every certified prefill winner of tiles did).

Decode rows have a second form, kernel = gemv (the kernel's GEMV constexpr): the sums on the CUDA
cores, any block_m from 1, no matrix unit (quantized._gemv_sums; one row of x: _gemv_row_sums, whose
loads the pipeliner stages and whose K step may span whole groups); the certificate picks it or the
tiles form per key. The tunable `linear_int4`: kernel (tiles | prescaled | gemv), block_m (rows of
x), block_n (weight rows), block_k, split_k, warps and stages, keyed by M, N, K, the activations'
dtype and the group size; its default is the device file's tiles.linear. block_k divides the group
(a K step lies in one group; the one-row gemv may take a multiple of it): others are pruned, and a
served tile whose block_k fits neither the group nor K runs with block_k = the group. A tile's K
step is one dot of block_k, held to the device's matrix_unit.min_dot_k. Whether a tile folds the
scales is a function of its certified kernel and block_m, never of the call's M. Pruned besides
(_fits): a tile twice the key's size, tiles of under 64 rows of x from m = 128 on (each weight tile
dequantized too often), prefill (m >= 1024) on tiles under 128 x 64, 16-bit K steps of 32 on long K,
split K outside decode rows (m <= 64), splits leaving a program under two K steps or passing
SPLIT_TILES_MAX programs, stages deeper than half a program's K steps, and stages whose x and weight
tiles pass a block's shared memory; narrow tiles (WIDE_TILE) outside the one-row gemv; the tiles
form under 16 rows of x, or on decode keys under block_n 128 (every H200 decode winner); the gemv
form outside decode rows (m <= 16), under the key's m, past 512 block_m x block_n on several rows
(at other than GEMV_STAGES there); the tiles form on m = 1 (the gemv won every such key); the
one-row gemv on K steps under ROW_GEMV_K, outside ROW_GEMV_NIBBLES a thread a step, split or at
other than ROW_GEMV_STAGES, and on steps of several groups that do not divide K.

The gated pair (`launch_gated_linear_int4`, gated_linear of two int4 weights of one layout:
check_pair) is the same kernel's GATED form, Tunable `gated_linear_int4`: linear_int4's space and
key, certified apart, where the rules count both weights: the several-row gemv's tile and the
one-row gemv's nibbles a thread, the tiles' stages (a second weight tile) and their two
accumulators a thread (at most GATED_ACC_MAX). A form field in linear_int4's key would refuse
every certificate made before it (store.validate checks a file's key_fields)."""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd, prod

import numpy as np
import triton.language as tl

from nbx import autotune
from nbx.core import dtypes
from nbx.core.dtypes import DType, as_dtype
from nbx.core.errors import NotSupportedError, ShapeError
from nbx.core.quant import QuantizedTensor
from nbx.core.reference import oracle
from nbx.core.tensor import Tensor

from .. import launch, plans
from ..cost import LAUNCH, Buffer, Cost, declares
from ..elementwise.casts import COMPILED
from ..plans import Launch, LaunchPlan, Slot
from ..registry import implements
from ..rows import float_bits
from ..types import tl_type
from . import INT32_MAX
from .epilogue import SPLIT_BLOCK, _addend_strides, _rows
from .fused import bias_form, split_epilogue_kernel
from .linear_tuning import GEMV_ROWS, PREFILL_M, gemv_products, steps_fit
from .quantized import int4_linear_kernel
from .tuning import _warps_for_tile, block_k_that_fits, dot_k_fits, stage_bytes, stages_that_fit

ACTIVATIONS_DTYPES = ("float16", "bfloat16", "float32")
PARAMS = {"kernel": ("tiles", "gemv", "prescaled"), "block_m": (1, 2, 4, 8, 16, 32, 64, 128, 256),
          "block_n": (4, 8, 16, 32, 64, 128), "block_k": (32, 64, 128, 256, 512, 1024, 2048),
          "split_k": (1, 2, 4, 8), "group_m": (8,), "num_warps": (1, 2, 4, 8), "num_stages": (2, 3, 4)}
KEY = {"m": "dims", "n": "dims", "k": "dims", "dtype": "dtype", "group": "exact"}
TILE_FORMS = ("tiles", "prescaled")   # the kernel values on the matrix unit (the rules of tiles hold for both)
FOLD_ROWS = 32       # tiles of at most this many rows of x scale the dot's sums, wider ones each weight element
REUSE_M = 128        # from here on, tiles of under 64 rows of x dequantize each weight tile too often
DOT_ROWS = 16        # the tiles kernel's least block_m: the matrix unit's least dot
GEMV_STAGES = 2      # the gemv kernel's depth on several rows of x (its words prefetched a step by hand)
ROW_GEMV_K = 256                 # the one-row gemv's least K step (128 bytes of a packed row)
ROW_GEMV_NIBBLES = (64, 256)     # the nibbles a thread of a one-row gemv tile takes a step
ROW_GEMV_STAGES = (3, 4)         # its staged depths
WIDE_TILE = dict(block_n=32, num_warps=4)   # the least weight rows and warps of the tiles and several-row gemv tiles
GEMV_TILE = 512      # rows of x times weight rows of a gemv tile of several rows of x
DECODE_TILE_N = 128  # the tiles kernel's decode tiles (16 rows of x) take this many weight rows
GATED_ACC_MAX = 128  # the gated tiles' two accumulators a thread: past it every tile spilled (ptxas sm_90)
PREFILL_K = 128      # the K step of the prescaled form's prefill tiles


def _kernel_fits(setting, rep, gated=False) -> str | bool:
    """The tiles kernel on tiles of 16 rows of x or more; the gemv kernel on decode rows, one tile of
    x (each tile of x streams the weight again). Narrow tiles (under WIDE_TILE's rows or warps) and
    K steps of several groups are the one-row gemv's (_gemv_row_sums)."""
    row_gemv = setting["kernel"] == "gemv" and setting["block_m"] == 1
    if not row_gemv:
        for name, least in WIDE_TILE.items():
            if setting[name] < least:
                return f"{name} {setting[name]} outside the one-row gemv: its tiles take {least} or more"
        if rep["group"] % setting["block_k"]:
            return f"block_k {setting['block_k']} does not divide the group size {rep['group']}"
    elif rep["group"] % setting["block_k"] and setting["block_k"] % rep["group"]:
        return f"block_k {setting['block_k']} is neither a part nor a multiple of the group size {rep['group']}"
    elif setting["block_k"] > rep["group"] and _whole_k(rep) % setting["block_k"]:
        return f"block_k {setting['block_k']} does not divide k={_whole_k(rep)} (its K steps would run as the group's)"
    if setting["kernel"] in TILE_FORMS:
        held = 2 * setting["block_m"] * setting["block_n"] // (32 * setting["num_warps"])
        if gated and held > GATED_ACC_MAX:
            return (f"a gated {setting['block_m']} x {setting['block_n']} tile over {setting['num_warps']} warps holds "
                    f"{held} accumulators a thread (two weights'): above {GATED_ACC_MAX} every such tile spilled")
        if setting["block_m"] < DOT_ROWS:
            return f"block_m {setting['block_m']} in the tiles kernel: its dot takes {DOT_ROWS} rows of x or more"
        if rep["m"] == 1:
            return ("the tiles kernel on one row of x: the gemv won every m=1 key of the H200 (certificates of "
                    "2026-12-02), and the one-row gemv's space takes the sweep's room")
        if setting["kernel"] == "prescaled" and setting["block_m"] > FOLD_ROWS and \
                (setting["block_k"] != PREFILL_K or setting["block_m"] < REUSE_M):
            return (f"a prescaled {setting['block_m']} x {setting['block_n']} x {setting['block_k']} prefill tile: "
                    f"every certified prefill winner of the tiles form (2026-12-03) took K steps of {PREFILL_K} and "
                    f"{REUSE_M} rows of x or more, and the sweep's room is shared by both forms")
        if rep["m"] <= GEMV_ROWS and setting["block_n"] < DECODE_TILE_N:
            return (f"block_n {setting['block_n']} on a decode tile of the tiles kernel: {DECODE_TILE_N} won on every "
                    f"decode key of the H200 (certificate of 2026-12-01); the sweep's room goes to the gemv kernel")
        return True
    if rep["group"] % 8:
        return f"the gemv kernel reads words of 8 nibbles: groups of {rep['group']} are not whole words"
    if rep["m"] > GEMV_ROWS:
        return f"the gemv kernel on m={rep['m']}: it serves decode rows (m <= {GEMV_ROWS})"
    if setting["block_m"] < rep["m"]:
        return f"block_m {setting['block_m']} in the gemv kernel on m={rep['m']}: the weight streamed once per tile of x"
    if not row_gemv:
        weights = 2 if gated else 1   # the gated form holds both weights' values
        if weights * setting["block_m"] * setting["block_n"] > GEMV_TILE:
            return (f"a {setting['block_m']} x {setting['block_n']} gemv tile{' of two weights' if gated else ''}: its "
                    f"weight values, held for every row of x, pass the registers (ptxas spilled 16 x 64 on sm_90; one "
                    f"row streams them)")
        if setting["num_stages"] != GEMV_STAGES:
            return f"{setting['num_stages']} stages in the gemv kernel on several rows: it runs at {GEMV_STAGES}"
        return True
    # the one-row gemv's space, from its exploration on the H200 (2026-12-02, nine decode shapes of the
    # Llama 1B and 8B layers, 151 tiles each): every best tile streamed K steps of 128 bytes a row or
    # more, gave a thread 64-256 nibbles a step, ran unsplit at 3 or 4 stages
    nibbles = gemv_products(setting) * (2 if gated else 1)   # the gated form: both weights' nibbles
    if setting["block_k"] < ROW_GEMV_K:
        return f"block_k {setting['block_k']} in the one-row gemv: its K steps take {ROW_GEMV_K} or more"
    if not ROW_GEMV_NIBBLES[0] <= nibbles <= ROW_GEMV_NIBBLES[1]:
        return (f"a 1 x {setting['block_n']} x {setting['block_k']} gemv tile over {setting['num_warps']} warps gives a "
                f"thread {nibbles} nibbles a step (the one-row gemv takes {ROW_GEMV_NIBBLES[0]}-{ROW_GEMV_NIBBLES[1]})")
    if setting["split_k"] != 1 or setting["num_stages"] not in ROW_GEMV_STAGES:
        return (f"split {setting['split_k']} at {setting['num_stages']} stages in the one-row gemv: it runs unsplit "
                f"at {' or '.join(map(str, ROW_GEMV_STAGES))}")
    return True


def _whole_k(rep) -> int:
    """The key's K as whole groups (its workload's: a class's representative need not be)."""
    return max(rep["group"], round(rep["k"] / rep["group"]) * rep["group"])


def _tile_fits(setting, rep) -> str | bool:
    for block, size in (("block_m", "m"), ("block_n", "n"), ("block_k", "k")):
        value = setting[block]
        least = DOT_ROWS if block == "block_m" and setting["kernel"] in TILE_FORMS else min(PARAMS[block])
        if value > least and value // 2 >= rep[size]:
            return f"{block} {value} covers {size}={rep[size]} twice over"
    if setting["block_m"] < 64 and rep["m"] >= REUSE_M:
        return f"block_m {setting['block_m']} on m={rep['m']} dequantizes each weight tile too often"
    if rep["m"] >= PREFILL_M and (setting["block_m"] < 128 or setting["block_n"] < 64):
        return f"a {setting['block_m']} x {setting['block_n']} tile on m={rep['m']}: prefill takes 128 x 64 or wider"
    steps = rep["k"] // (setting["block_k"] * setting["split_k"])
    row_gemv = setting["kernel"] == "gemv" and setting["block_m"] == 1   # its stages were measured (ROW_GEMV_STAGES)
    if setting["num_stages"] > max(2, steps // 2) and not row_gemv:
        return f"{setting['num_stages']} stages over {steps} K steps a program: deeper than the loop pays for"
    return steps_fit(setting, rep)


def _fits(setting, rep, facts, gated=False):
    found = _kernel_fits(setting, rep, gated)
    if found is not True or setting["kernel"] == "gemv":
        return found if found is not True else _tile_fits(setting, rep)
    itemsize = as_dtype(rep["dtype"]).itemsize
    found = dot_k_fits(setting, itemsize, facts)   # a K step: one dot of block_k (both tile forms)
    if found is not True:
        return found
    need, have = setting["num_stages"] * stage_bytes(setting, itemsize, 2 if gated else 1), \
        facts.value("memory.max_shared_memory_per_block")
    if need > have:
        return f"{setting['num_stages']} stages of x and weight tiles need {need} bytes of shared memory, above {have}"
    return _tile_fits(setting, rep)


def int4_workload(rep, device, gated=False):
    from nbx.core.ops.creation import asarray
    m, n, k, dtype = rep["m"], rep["n"], rep["k"], as_dtype(rep["dtype"])
    # a class's representative K (3984 in the (3968, 4096] class) need not be a whole number of
    # groups, which a quantized weight must be: the nearest one stands in for it
    k = max(rep["group"], round(k / rep["group"]) * rep["group"])
    x = asarray((np.sin(0.37 * np.arange(m * k) + 0.5)).reshape(m, k).astype(dtype.host), device=device)
    out = launch.output((m, n), dtype, device)
    if gated:   # two seeded normal weights (the gate and the up), silu as SwiGLU's: the sinusoids above cancel
        # in x @ w.T to a tenth of a random weight's output, so that the tiles' bf16 rounding of their dot
        # operands measured 0.031 of max|out| at 512 x 8192 x 2048 on the H200 (against 0.016 allowed)
        gate_up = np.random.default_rng(0).standard_normal((2, n, k)) / np.sqrt(k)
        weight, up = (QuantizedTensor.quantize(w, rep["group"], "asymmetric", "bfloat16").to(device) for w in gate_up)
        return autotune.TensorWorkload(
            out, lambda setting: launch_gated_linear_int4(x, weight, up, "silu", out=out, setting=setting),
            lambda rows: np.asarray(oracle("gated_linear_int4", x[rows], weight, up, "silu")))
    dense = (np.sin(0.21 * np.arange(n * k) + 0.5) / np.sqrt(k)).reshape(n, k)
    weight = QuantizedTensor.quantize(dense, rep["group"], "asymmetric", "bfloat16").to(device)
    return autotune.TensorWorkload(
        out, lambda setting: launch_linear_int4(x, weight, out=out, setting=setting),
        lambda rows: np.asarray(oracle("linear_int4", x[rows], weight)))


LINEAR_INT4 = autotune.declare(autotune.Tunable(
    "linear_int4", params=PARAMS, key=KEY, default_from="tiles.linear", workload=int4_workload,
    constraint=_warps_for_tile, fits=_fits))
# the gated pair (gated_linear of two int4 weights): the same kernel, space and key, certified apart
# (its tiles hold two weights: twice the registers and shared memory, its own winners); a form field in
# linear_int4's key would refuse the certificates made before it (store.validate checks key_fields)
GATED_LINEAR_INT4 = autotune.declare(autotune.Tunable(
    "gated_linear_int4", params=PARAMS, key=KEY, default_from="tiles.linear",
    workload=lambda rep, device: int4_workload(rep, device, gated=True), constraint=_warps_for_tile,
    fits=lambda setting, rep, facts: _fits(setting, rep, facts, gated=True)))


@dataclass(frozen=True)
class Int4Plan:
    m: int
    n: int
    k: int
    a: tuple
    bias: tuple | None
    residual: tuple | None
    copies: tuple
    split_k: int
    meta: tuple
    split_meta: tuple

    @property
    def grid(self) -> tuple[int, int]:
        meta = dict(self.meta)
        return (-(-self.m // meta["BLOCK_M"]) * -(-self.n // meta["BLOCK_N"]), self.split_k)


def _decide(x_shape, x_strides, w_shape, group: int, scheme: str, bias_layout, res_layout, operands: DType,
            dtype: DType, activation, device, setting, gated: bool = False) -> LaunchPlan:
    """The tile, the copies and the launches of one call layout (gated: of the pair's, gated_linear)."""
    n, k = w_shape
    m = prod(x_shape[:-1])
    shape = tuple(x_shape[:-1]) + (n,)
    copies = []
    a = _rows(x_shape, x_strides, m, k)
    if a is None:
        copies.append("x")
        a = (k, 1)
    addends = []
    for name, found in (("bias", bias_layout), ("residual", res_layout)):
        strides = None if found is None else _addend_strides(*found, shape, False, m)
        if found is not None and strides is None:
            copies.append(name)
            strides = (0, n, 1)
        addends.append(strides)
    tunable = GATED_LINEAR_INT4 if gated else LINEAR_INT4
    s = dict(setting if setting is not None else autotune.setting(tunable, device, m=m, n=n, k=k, dtype=operands,
                                                                  group=group))
    facts = launch.facts(device)
    gemv = s["kernel"] == "gemv"
    # a K step lies in one group, or (the one-row gemv) spans whole groups and divides K: the
    # served block_k's largest part that is whole groups and divides K
    spans = gcd(s["block_k"], k)
    whole_groups = gemv and s["block_m"] == 1 and s["block_k"] > group and spans % group == 0
    block_k = s["block_k"] if group % s["block_k"] == 0 else spans if whole_groups else group
    if not gemv:
        block_k = block_k_that_fits(block_k, operands.itemsize, facts)
    elif group % 8:
        raise NotSupportedError(f"the gemv kernel reads the packed weight in words of 8 nibbles: groups of {group} "
                                f"are not whole words")
    if group % block_k and not whole_groups:
        raise NotSupportedError(f"groups of {group} are under the K tile of {block_k} that a dot of "
                                f"{operands.name} needs on {device.type} (matrix_unit.min_dot_k)")
    s["block_k"] = block_k
    weights = 2 if gated else 1
    stages = stages_that_fit(s, operands.itemsize, weights, facts) if COMPILED and not gemv else s["num_stages"]
    wide = max((m + s["block_m"]) * abs(a[0]) + (k + block_k) * abs(a[1]), (n + s["block_n"]) * (k // 2 + 1),
               (m + s["block_m"]) * n) > INT32_MAX
    epilogue = dict(HAS_BIAS=bias_form(addends[0]), ACTIVATION=activation, HAS_RES=addends[1] is not None)
    meta = dict(DOT=tl_type(operands), PRECISION="ieee" if operands is dtypes.float32 else None, GROUP=group,
                SIGNED=scheme == "symmetric", ASYMMETRIC=scheme == "asymmetric",
                FOLD=s["kernel"] != "prescaled" and s["block_m"] <= FOLD_ROWS, PRESCALED=s["kernel"] == "prescaled",
                WIDE=wide, BLOCK_M=s["block_m"], BLOCK_N=s["block_n"], BLOCK_K=block_k, GROUP_M=s["group_m"],
                SPLIT_K=s["split_k"], GEMV=gemv, STAGES=stages, GATED=gated, **epilogue,
                num_warps=s["num_warps"], num_stages=stages)
    split_meta = dict(ACC=tl.float32, SPLIT_K=s["split_k"], BLOCK=SPLIT_BLOCK, GATED=gated, **epilogue, NORM=False)
    p = Int4Plan(m, n, k, a, addends[0], addends[1], tuple(copies), s["split_k"], tuple(meta.items()),
                 tuple(split_meta.items()))
    x = Slot("x")
    bias, residual = Slot("bias") if bias_layout else x, Slot("residual") if res_layout else x
    bias_s, res_s = p.bias or (0, 0, 0), p.residual or (0, 0, 0)
    scalars = (Slot("alpha"), Slot("beta"))
    part = Slot("part") if p.split_k > 1 else Slot("out")
    up = ("qweight2", "scales2", "zeros2") if gated else ("qweight", "scales", "zeros")
    args = (x, Slot("qweight"), Slot("scales"), Slot("zeros"), *map(Slot, up), Slot("out"), part, bias, residual,
            m, n, k, *a,
            Slot("q_stride"), Slot("s_stride"), *bias_s[1:], *res_s[1:], *scalars)
    launches = (Launch(int4_linear_kernel, p.grid, args, dict(p.meta)),)
    work = ()
    if p.split_k > 1:
        launches += (Launch(split_epilogue_kernel, (-(-m * n // SPLIT_BLOCK),),
                            (Slot("part"), Slot("out"), bias, residual, Slot("part"), m, n, p.k, 1, *bias_s, *res_s,
                             *scalars, 0),
                            dict(p.split_meta)),)
        work = (plans.workspace("part", (weights * p.split_k, m, n), dtypes.float32),)   # gated: the up's half
    return LaunchPlan(device, launches, (plans.output("out", shape, dtype),), work, p.copies, detail=p)


def _check(x: Tensor, weight: QuantizedTensor, dtype: DType) -> DType:
    if x.dtype.name not in ACTIVATIONS_DTYPES or dtype.name not in ACTIVATIONS_DTYPES + ("float64",):
        raise NotSupportedError(f"linear with an int4 weight on {x.device.type} multiplies float16, bfloat16 or "
                                f"float32 activations, not {x.dtype.name} (result {dtype.name})")
    if dtype is dtypes.float64:
        raise NotSupportedError("linear with an int4 weight accumulates in float32; a float64 result is refused")
    return x.dtype


def launch_plan(x, weight: QuantizedTensor, bias=None, residual=None, activation=None, dtype=None,
                setting=None, gated: bool = False) -> LaunchPlan:
    dtype = x.dtype if dtype is None else dtype
    operands = _check(x, weight, dtype)
    layout = lambda t: None if t is None else (tuple(t.shape), tuple(t.strides))  # noqa: E731
    signature = (tuple(x.shape), tuple(x.strides), tuple(weight.shape), weight.group_size, weight.scheme,
                 layout(bias), layout(residual), operands, dtype, activation, x.device, plans.setting_key(setting),
                 gated)
    return plans.cached("linear_int4", signature, lambda: _decide(*signature))


def plan(*args, **kwargs) -> Int4Plan:
    return launch_plan(*args, **kwargs).detail


def _output(x: Tensor, weight: QuantizedTensor, dtype: DType | None, out: Tensor | None):
    """(the output dtype, shape [..., out features], the output: new, or out checked to be one like it)."""
    dtype = x.dtype if dtype is None else dtype
    shape = tuple(x.shape[:-1]) + (weight.shape[0],)
    return dtype, shape, launch.output(shape, dtype, x.device, out)


def launch_linear_int4(x: Tensor, weight: QuantizedTensor, bias=None, activation=None, residual=None,
                       alpha: float = 1.0, beta: float = 1.0, dtype: DType | None = None, out: Tensor | None = None,
                       setting=None) -> Tensor:
    dtype, shape, out = _output(x, weight, dtype, out)
    if out.size == 0:
        return out
    lp = launch_plan(x, weight, bias, residual, activation, dtype, setting)
    copies = lp.copies
    q, scales = weight.qweight, weight.scales
    plans.execute(lp, {"x": x, "qweight": q, "scales": scales, "zeros": scales if weight.zeros is None else weight.zeros,
                       "q_stride": q.strides[0], "s_stride": scales.strides[0], "out": out,
                       "bias": bias.broadcast_to(shape) if "bias" in copies else bias,
                       "residual": residual.broadcast_to(shape) if "residual" in copies else residual,
                       "alpha": float_bits(alpha), "beta": float_bits(beta)})
    return out


def linear_int4_cost(x, weight, bias=None, activation=None, residual=None, alpha=1.0, beta=1.0, dtype=None) -> Cost:
    """The output and any split partials; x, the packed weight, its scales (and minima) and the
    addends read once: a decode launch moves about a quarter of its float16 weight's bytes."""
    dtype = x.dtype if dtype is None else dtype
    _check(x, weight, dtype)
    shape = tuple(x.shape[:-1]) + (weight.shape[0],)
    out_bytes = prod(shape) * dtype.itemsize
    buffers = [Buffer("out", out_bytes)]
    if out_bytes == 0:
        return Cost(tuple(buffers), 0, 0, launches=0)
    p = plan(x, weight, bias, residual, activation, dtype)
    copied = {"x": x.nbytes, "bias": out_bytes, "residual": out_bytes}
    buffers += [Buffer(f"{name}_contiguous", copied[name], LAUNCH) for name in p.copies]
    moved = x.nbytes + weight.nbytes + out_bytes + sum(t.nbytes for t in (bias, residual) if t is not None)
    if p.split_k > 1:
        buffers.append(Buffer("partials", p.split_k * p.m * p.n * 4, LAUNCH))
        moved += 2 * p.split_k * p.m * p.n * 4
    return Cost(tuple(buffers), moved, 2 * p.m * p.n * p.k, launches=2 if p.split_k > 1 else 1)


def check_pair(w_gate: QuantizedTensor, w_up: QuantizedTensor) -> None:
    """The gated kernel reads both weights through one set of strides, group and scheme: refused otherwise."""
    if tuple(w_gate.shape) != tuple(w_up.shape):
        raise ShapeError(f"gated_linear's int4 weights are of one shape, got {tuple(w_gate.shape)} and "
                         f"{tuple(w_up.shape)}")
    gate = (w_gate.group_size, w_gate.scheme, w_gate.qweight.strides, w_gate.scales.strides)
    up = (w_up.group_size, w_up.scheme, w_up.qweight.strides, w_up.scales.strides)
    if gate != up:
        raise NotSupportedError(f"gated_linear's int4 weights share one layout (group size, scheme, strides of the "
                                f"packed words and the scales): the gate's is {gate}, the up's {up}")


def launch_gated_linear_int4(x: Tensor, w_gate: QuantizedTensor, w_up: QuantizedTensor, activation="silu",
                             dtype: DType | None = None, out: Tensor | None = None, setting=None) -> Tensor:
    """activation(x @ w_gate.T) * (x @ w_up.T) in one launch (split: and its epilogue's), x read once."""
    check_pair(w_gate, w_up)
    dtype, _, out = _output(x, w_gate, dtype, out)
    if out.size == 0:
        return out
    lp = launch_plan(x, w_gate, None, None, activation, dtype, setting, gated=True)
    slots = {"x": x, "out": out, "alpha": float_bits(1.0), "beta": float_bits(1.0),
             "q_stride": w_gate.qweight.strides[0], "s_stride": w_gate.scales.strides[0]}
    for suffix, w in (("", w_gate), ("2", w_up)):
        slots.update({f"qweight{suffix}": w.qweight, f"scales{suffix}": w.scales,
                      f"zeros{suffix}": w.scales if w.zeros is None else w.zeros})
    plans.execute(lp, slots)
    return out


def gated_linear_int4_cost(x, w_gate, w_up, activation="silu", dtype=None) -> Cost:
    """linear_int4_cost's, both weights read once and x once; split, the partials of both weights."""
    dtype = x.dtype if dtype is None else dtype
    _check(x, w_gate, dtype)
    check_pair(w_gate, w_up)
    shape = tuple(x.shape[:-1]) + (w_gate.shape[0],)
    out_bytes = prod(shape) * dtype.itemsize
    buffers = [Buffer("out", out_bytes)]
    if out_bytes == 0:
        return Cost(tuple(buffers), 0, 0, launches=0)
    p = plan(x, w_gate, None, None, activation, dtype, gated=True)
    buffers += [Buffer("x_contiguous", x.nbytes, LAUNCH) for _ in p.copies]
    moved = x.nbytes + w_gate.nbytes + w_up.nbytes + out_bytes
    if p.split_k > 1:
        buffers.append(Buffer("partials", 2 * p.split_k * p.m * p.n * 4, LAUNCH))
        moved += 2 * 2 * p.split_k * p.m * p.n * 4
    return Cost(tuple(buffers), moved, 2 * 2 * p.m * p.n * p.k, launches=2 if p.split_k > 1 else 1)


@implements("linear_int4")
def _linear_int4(x, weight, bias, activation, residual, alpha, beta, dtype):
    return launch_linear_int4(x, weight, bias, activation, residual, alpha, beta, dtype)


@implements("gated_linear_int4")
def _gated_linear_int4(x, w_gate, w_up, activation, dtype):
    return launch_gated_linear_int4(x, w_gate, w_up, activation, dtype)


declares("linear_int4")(linear_int4_cost)
declares("gated_linear_int4")(gated_linear_int4_cost)

__all__ = ["launch_linear_int4", "launch_gated_linear_int4", "linear_int4_cost", "gated_linear_int4_cost", "plan",
           "check_pair", "LINEAR_INT4", "GATED_LINEAR_INT4"]
