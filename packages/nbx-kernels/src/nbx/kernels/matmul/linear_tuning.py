"""Certified settings of the fused product (fused.py): linear, addmm, baddbmm, gated_linear.

Tuned: the tile (block_m x block_n stepping K by block_k, block_m down to 16 for decode rows),
split_k (how many programs share one tile's K: 1 is the plain tiled product; more lets a few tiles
of decode rows keep every SM streaming the weight), warps and stages; group_m has one value.
Whether decode rows take a split-K launch is this certified parameter, never an `if` on M. The
kernel parameter picks the tiles (`tl.dot`), tma (hopper.py) or gemv kernel: decode rows
(m <= 16) of the plain, gated and batched forms may run the fused kernel's GEMV form, whose sums
are on the CUDA cores over tiles of 1-4 rows of x, 4-16 weight rows and K steps of 256-512
(GEMV), unsplit, one launch; on the H200 it streamed the Llama-3.2-1B shape's decode weights at
1.3-1.6x the split dot tiles' speed (their partials' epilogue is a second launch). Each kernel
keeps its own tile values (TILES, GEMV); eight warps over a gemv tile are pruned as over any small tile.

The launch key: M classed on the dims ladder (decode rows exact up to 64: on the H200 a 1-row
class's setting served 2 rows lost 20.4 % worst), N and K on the coarser coarse_dims (one dims step
away lost 0.0 / 1.7 % and 0.9 / 2.0 % median / worst), the output dtype, the operands' layout (as
matmul's: a linear weight [N, K] is B = weight.T, layout "nt"), and the form, "plain" or "gated"
(two accumulators: twice the registers a tile holds), "scaled" / "blockscaled" (float8), or
"batched" (a weight per batch entry: bmm, baddbmm; timed over a batch that fills the device,
batch_entries, since the key holds no batch count). Bias, activation and residual cost the same
store pass at any tile, so they are not in the key.

Pruned: what matmul prunes (shared memory of the stages, eight warps on small tiles, a tile twice
the key's size), a split whose share of K is under two block_k steps, and splits of launches that
already have many tiles (tiles x split_k above SPLIT_TILES_MAX: more programs than the split can
pay for in partial traffic). Shared memory is counted at the operands' own width per key (float8
stages take half a bfloat16 one: a 128 x 256 x 128 float8 tile keeps three stages), and K steps of
under 128 bytes (the widest swizzle row) are pruned on a long K at every width, except for IEEE
products (float32, float64): they run on FMA units with the K step's operand tiles in registers,
where 16 and 32 fit (128 x 128 x 16 float32 of 8 warps: 190 registers, no spill on sm_90), 64
spills, and so do more than 64 accumulators a thread.
"""
from __future__ import annotations

import math

import numpy as np

from nbx import autotune
from nbx.core.reference import oracle

from nbx.core.dtypes import as_dtype

from .tuning import _warps_for_tile, dot_k_fits, epilogue_bytes, representative_operands, stage_bytes, stages_that_fit
from .kernel import GEMV_DEPTH

TILES = {"block_m": (16, 32, 64, 128), "block_n": (32, 64, 128, 256), "block_k": (16, 32, 64, 128)}
# the gemv kernel's tiles: a few rows of x, a few weight rows, long K steps (gemv_k_steps)
GEMV = {"block_m": (1, 2, 4), "block_n": (4, 8, 16), "block_k": (256, 512)}
PARAMS = {"kernel": ("tiles", "tma", "gemv"), **{name: GEMV[name] + TILES[name] for name in TILES},
          "split_k": (1, 2, 4, 8), "group_m": (8,), "num_warps": (4, 8), "num_stages": (3, 4),
          "programs": (132,), "warp_specialize": (0, 1)}
KEY = {"m": "dims", "n": "coarse_dims", "k": "coarse_dims", "dtype": "dtype", "layout": "label", "form": "label",
       "tma": "flag", "precision": "label"}
WGMMA_ROWS = 64      # a warpgroup's wgmma covers 64 rows: the tma kernel's smallest tile
DECODE_M = 64        # decode rows: the keys whose few tiles may split K
PREFILL_M = 1024     # from here on, only the widest tiles (128 rows, 128 or 256 columns) keep the tensor cores fed
WIDE_N = 1024        # from here on, 32-column tiles read each A tile too often
FORMS = ("plain", "gated", "scaled", "blockscaled", "batched")
BATCH_OUTPUTS = 1 << 25   # a batched key's representative: 32 Mi outputs (bench_matmul's bmm: 32 of 1024 x 1024)
SPLIT_TILES_MAX = 1024
NARROWEST = 1        # bytes: float8 and int8 operands, the narrowest linear takes (each key's: _fits)
SWIZZLE_ROW = 128    # bytes: a K step narrower than the widest shared-memory swizzle row is too short a step
FMA_MAX_K = 32       # an IEEE float32/float64 product (FMA, no tensor cores): the longest K step it keeps
FMA_MAX_ACC = 64     # and the most accumulators a thread holds beside the step's operands
GEMV_ROWS = 16       # the gemv kernels (this and linear_int4's) serve decode rows up to this many
GEMV_PRODUCTS = 64   # the most (row, column, k) products a thread of a gemv tile keeps in registers
GEMV_STAGES = GEMV_DEPTH.value   # the gemv kernel's one depth, staged by its tl.range (kernel.GEMV_DEPTH)
GEMV_FORMS = ("plain", "gated", "batched")   # float8's scales and int8's exact sums run in the tiles


def _gated_stage_bytes(setting, itemsize: int) -> int:
    """One stage of the gated form: the A tile and two B tiles."""
    return setting["block_k"] * (setting["block_m"] + 2 * setting["block_n"]) * itemsize


def tile_fits(setting, rep) -> str | bool:
    """The rules on the tile and the split a key's sizes decide (shared with linear_int4):
    a tile dimension twice the key's size, tiles too small for their M or N, K steps too short to
    pipeline, and split K outside decode rows or where it leaves a program too few steps."""
    found = covers_twice(setting, rep, TILES)
    if found is not True:
        return found
    if setting["block_m"] < WGMMA_ROWS and rep["m"] >= 2 * WGMMA_ROWS:
        return f"block_m {setting['block_m']} on m={rep['m']} reuses each B tile too little"
    if rep["m"] >= PREFILL_M and (setting["block_m"] < max(PARAMS["block_m"]) or setting["block_n"] < 128):
        return f"a {setting['block_m']} x {setting['block_n']} tile on m={rep['m']}: prefill takes 128 x 128 or wider"
    if setting["block_n"] == min(TILES["block_n"]) and rep["n"] >= WIDE_N:
        return f"block_n {setting['block_n']} on n={rep['n']} reads each A tile too often"
    return steps_fit(setting, rep)


def steps_fit(setting, rep) -> str | bool:
    """The rules on K steps and the split (shared with linear_int4, whose keys have no form nor
    precision): IEEE (FMA) steps and accumulators that pass the registers, K steps under 128 bytes
    on long K, split K outside decode rows, a split leaving a program under two steps or passing
    SPLIT_TILES_MAX programs."""
    step_bytes = setting["block_k"] * operand_itemsize(rep)
    fma_k = FMA_MAX_K // (2 if setting.get("kernel") == "tma" else 1)   # the persistent kernel holds more state
    if rep.get("precision") == "ieee" and setting["block_k"] > fma_k:
        return (f"block_k {setting['block_k']} of an IEEE (FMA) product in the {setting.get('kernel', 'tiles')} "
                f"kernel: its operand tiles' K step is held in registers (on sm_90 ptxas spilled the pointer kernel's "
                f"128 x 128 x 64 float32 tile and the tma kernel's 128 x 128 x 32 one, to 5 KiB of stack)")
    per_thread = setting["block_m"] * setting["block_n"] // (32 * setting["num_warps"])
    if rep.get("precision") == "ieee" and per_thread > FMA_MAX_ACC:
        return (f"{per_thread} accumulators a thread of an IEEE (FMA) product: with its operands they pass the "
                f"registers (ptxas spilled 128 x 128 float32 tiles of 4 warps and 128 x 256 of 8 on sm_90)")
    if rep.get("precision") != "ieee" and step_bytes < SWIZZLE_ROW and rep["k"] >= 16 * setting["block_k"]:
        return (f"block_k {setting['block_k']} of {operand_itemsize(rep)}-byte operands on k={rep['k']}: "
                f"{step_bytes}-byte steps, too short to pipeline")
    split = setting["split_k"]
    if split == 1:
        return True
    if rep["m"] > DECODE_M:
        return f"split_k {split} on m={rep['m']}: K is split for decode rows (m <= {DECODE_M}) only"
    if rep["k"] < 2 * split * setting["block_k"]:
        return f"split_k {split} leaves under two block_k {setting['block_k']} steps of k={rep['k']} a program"
    tiles = math.ceil(rep["m"] / setting["block_m"]) * math.ceil(rep["n"] / setting["block_n"])
    if tiles * split > SPLIT_TILES_MAX:
        return f"{tiles} tiles x split_k {split} pass {SPLIT_TILES_MAX} programs"
    return True


def _kernel_fits(setting, facts):
    """Each kernel on its own tiles (TILES, GEMV); the tma kernel only where the device has
    descriptor copies, unsplit, on wgmma-sized tiles; warp specialisation is the tma kernel's
    alone; the gemv kernel unsplit, on tiles whose products pass no registers."""
    tiles = GEMV if setting["kernel"] == "gemv" else TILES
    for name, values in tiles.items():
        if setting[name] not in values:
            return f"{name} {setting[name]} is not one of the {setting['kernel']} kernel's {values}"
    if setting["kernel"] == "gemv":
        if setting["split_k"] > 1 or setting["warp_specialize"]:
            return "the gemv kernel runs unsplit and unspecialised"
        if gemv_products(setting) > GEMV_PRODUCTS:
            return (f"a {setting['block_m']} x {setting['block_n']} x {setting['block_k']} gemv tile keeps "
                    f"{gemv_products(setting)} products a thread (at most {GEMV_PRODUCTS})")
        if setting["num_stages"] != GEMV_STAGES:
            return f"{setting['num_stages']} stages in the gemv kernel: it runs at {GEMV_STAGES} (no dot to feed)"
        return True
    if setting["kernel"] == "tiles":
        return True if not setting["warp_specialize"] else "warp_specialize is a parameter of the tma kernel"
    if not facts.value("matrix_unit.tma"):
        return "matrix_unit.tma is false: no tensor-descriptor copies"
    if setting["split_k"] > 1:
        return "the tma kernel does not split K"
    if setting["block_m"] < WGMMA_ROWS:
        return f"the tma kernel's tile has at least {WGMMA_ROWS} rows (one warpgroup's wgmma)"
    return True


def _fits(setting, rep, facts):
    """The key's tile rules, the tma kernel only for keys it can read, and the stages (the gated
    form's second B tile included) in shared memory."""
    if setting["kernel"] == "tma" and not rep["tma"]:
        return "the key's operands cannot be read through tensor descriptors"
    if setting["kernel"] == "gemv":
        return _gemv_fits(setting, rep)
    found = tile_fits(setting, rep)
    if found is not True:
        return found
    itemsize = operand_itemsize(rep)
    found = dot_k_fits(setting, itemsize, facts)
    if found is not True:
        return found
    out_itemsize = as_dtype(rep["dtype"]).itemsize   # the operands are of itemsize (float8 under a bf16 result)
    limit = facts.value("memory.max_shared_memory_per_block")
    if stages_that_fit(setting, itemsize, itemsize, facts, epilogue_bytes(setting, out_itemsize)) < setting["num_stages"]:
        return (f"{setting['num_stages']} stages of {itemsize}-byte operands and the {as_dtype(rep['dtype']).name} "
                f"epilogue pass memory.max_shared_memory_per_block {limit}")
    if rep["form"] == "gated" and setting["num_stages"] * _gated_stage_bytes(setting, itemsize) > limit:
        return f"{setting['num_stages']} stages of a gated tile pass memory.max_shared_memory_per_block {limit}"
    return True


def covers_twice(setting, rep, tiles) -> str | bool:
    """A tile dimension above its kernel's least (tiles: its values) twice the key's size or more."""
    for block, size in (("block_m", "m"), ("block_n", "n"), ("block_k", "k")):
        if setting[block] > min(tiles[block]) and setting[block] // 2 >= rep[size]:
            return f"{block} {setting[block]} covers {size}={rep[size]} twice over"
    return True


def gemv_products(setting) -> int:
    """The (row of x, weight row, k) products a thread of a gemv tile keeps (quantized's too)."""
    return setting["block_m"] * setting["block_n"] * setting["block_k"] // (32 * setting["num_warps"])


def _gemv_fits(setting, rep) -> str | bool:
    """The gemv kernel on decode rows of the plain, gated and batched forms with 16-bit or IEEE
    operands; tiles no larger than the key needs; the gated form's two weights hold twice the
    products."""
    if rep["m"] > GEMV_ROWS:
        return f"the gemv kernel on m={rep['m']}: it serves decode rows (m <= {GEMV_ROWS})"
    if rep["form"] not in GEMV_FORMS or as_dtype(rep["dtype"]).name == "int32":
        return f"the gemv kernel multiplies 16-bit or IEEE float operands: not the {rep['form']} form of {rep['dtype']}"
    if rep["precision"] not in ("none", "ieee"):
        return f"the gemv kernel's sums are IEEE: not {rep['precision']}"
    found = covers_twice(setting, rep, GEMV)
    if found is not True:
        return found
    if rep["form"] == "gated" and 2 * gemv_products(setting) > GEMV_PRODUCTS:
        return f"a gated {setting['block_m']} x {setting['block_n']} x {setting['block_k']} gemv tile: two weights' products"
    return True


def operand_itemsize(rep) -> int:
    """The width of a key's dot operands: int8 for an int32 product, float8 for the scaled forms,
    else the output dtype's (the operands the certifier multiplies are of it)."""
    if rep.get("form") in ("scaled", "blockscaled") or as_dtype(rep["dtype"]).name == "int32":   # int4: no form
        return 1
    return as_dtype(rep["dtype"]).itemsize


def launch_key(m, n, k, dtype, a_strides, b_strides, form: str, tma: bool = False, precision=None) -> dict:
    """matmul's key, the form, whether the call's operands can be read through tensor descriptors
    (epilogue.eligible: unit-stride rows, 16-byte aligned, no batch), and how float32 operands are
    multiplied (ieee, tf32, tf32x3; none for 16-bit operands)."""
    from .tuning import launch_key as matmul_key
    return {**matmul_key(m, n, k, dtype, a_strides, b_strides), "form": form, "tma": bool(tma),
            "precision": precision or "none"}


def _unaligned(t):
    """t's values (a dense matrix) one element past an aligned base: a call no descriptor reads."""
    from nbx.core.ops.creation import asarray
    host = t.numpy()
    return asarray(np.concatenate([np.zeros(1, host.dtype), host.ravel()]), device=t.device)[1:].reshape(*t.shape)


def _int8_operands(rep, device):
    """An int32 key's operands: int8 values in -7..7 of the key's sizes and layout."""
    from .tuning import operand
    m, n, k, int8 = rep["m"], rep["n"], rep["k"], as_dtype("int8")
    a = operand((np.arange(m * k) % 15 - 7).reshape(m, k), int8, rep["layout"][0] == "t", device)
    b = operand((np.arange(k * n) * 7 % 15 - 7).reshape(k, n), int8, rep["layout"][1] == "t", device)
    return a, b


def _float8(t):
    """t's values as float8_e4m3fn in t's layout (a transposed view stays one)."""
    if t.strides[-1] == 1 or t.shape[-1] == 1:
        return t.to(dtype="float8_e4m3fn")
    return t.mT.to(dtype="float8_e4m3fn").mT


def batch_entries(rep) -> int:
    """The entries of a batched key's representative: the batch, not one entry's tiles, fills the
    device (a batch of one 1024 x 1024 product is 64 tiles: a certifier timing it would pick
    small tiles that a batch of 32 runs slower)."""
    return max(1, min(256, -(-BATCH_OUTPUTS // (rep["m"] * rep["n"]))))


def _batched_operands(rep, device):
    """A batched key's (a [B, m, k], b [B, k, n]): distinct entries of the key's layout."""
    from .tuning import _values, operand
    m, n, k, entries, dtype = rep["m"], rep["n"], rep["k"], batch_entries(rep), as_dtype(rep["dtype"])
    a = operand(_values(entries * m * k, entries * m, 0.37, 1.0).reshape(entries, m, k), dtype,
                rep["layout"][0] == "t", device)
    b = operand(_values(entries * k * n, entries * k, 0.21, 1.0 / math.sqrt(max(k, 1))).reshape(entries, k, n), dtype,
                rep["layout"][1] == "t", device)
    return a, b


def linear_workload(rep, device):
    from .. import launch
    from .epilogue import launch_linear
    batched = rep["form"] == "batched"
    if batched:
        a, b = _batched_operands(rep, device)
    elif as_dtype(rep["dtype"]).name == "int32":
        a, b = _int8_operands(rep, device)
    else:
        a, b = representative_operands(rep, device)
    if not rep["tma"] and rep["layout"][0] == "n" and not batched:   # a batch alone keeps descriptors off
        a = _unaligned(a)
    gated = rep["form"] == "gated"
    up = b if gated else None   # the gated form's two weights: one tensor read twice (timing and oracle alike)
    out = launch.output(((batch_entries(rep),) if batched else ()) + (rep["m"], rep["n"]), rep["dtype"], device)

    precision = None if rep["precision"] in ("none", "ieee") else rep["precision"]
    scales = None
    if rep["form"] in ("scaled", "blockscaled"):   # float8_e4m3fn operands of the key's layout
        from nbx.core.ops.creation import asarray
        a, b = _float8(a), _float8(b)
        kb = -(-rep["k"] // 128)
        shapes = ((rep["m"],), (rep["n"],)) if rep["form"] == "scaled" else ((rep["m"], kb), (-(-rep["n"] // 128), kb))
        scales = tuple(asarray(np.linspace(0.5, 1.5, int(np.prod(s))).reshape(s).astype(np.float32), device=device)
                       for s in shapes)

    def run(setting):
        launch_linear(a, b.mT, activation="silu" if gated else None, dtype=as_dtype(rep["dtype"]),
                      up=up.mT if gated else None, out=out, setting=setting, input_precision=precision, scales=scales)

    def reference(rows):
        if gated:
            return np.asarray(oracle("gated_linear", a[rows], b.mT, up.mT, "silu"))
        if scales is not None:
            return np.asarray(oracle("scaled_linear", a[rows], b.mT, scales[0][rows], scales[1]))
        return np.asarray(oracle("linear", a[rows], b.mT[rows] if batched else b.mT, input_precision=precision))
    return autotune.TensorWorkload(out, run, reference)


LINEAR = autotune.declare(autotune.Tunable(
    "linear", params=PARAMS, key=KEY, default_from="tiles.linear", workload=linear_workload,
    constraint=autotune.all_of(autotune.shared_memory(lambda s: s["num_stages"] * stage_bytes(s, NARROWEST, NARROWEST)),
                               _warps_for_tile, _kernel_fits),
    fits=_fits))


def linear_setting(device, m, n, k, dtype, a_strides, b_strides, form: str, tma: bool, precision=None):
    return autotune.setting(LINEAR, device, **launch_key(m, n, k, dtype, a_strides, b_strides, form, tma, precision))


__all__ = ["LINEAR", "PARAMS", "TILES", "GEMV", "KEY", "FORMS", "launch_key", "linear_setting", "SPLIT_TILES_MAX"]
