"""Certified settings of the matmul kernel: what is tuned, the launch key, the workload.

Tuned: the tile (block_m x block_n, stepping K by block_k), its warps and its pipeline stages;
group_m, the tile rows that run together for L2 reuse, is declared with one value. Candidates are
pruned by the shared memory their stages take (the device file's
`memory.max_shared_memory_per_block`): counted at 16-bit operands (the narrowest matmul takes)
for every key, and at the key's own dtype per key, so that a float32 or float64 key never
compares candidates that differ only by stages its operands cannot hold. Eight warps are kept for the
128 x 128 tile only (a smaller tile leaves each warp too little work), and a key's shape prunes
tiles twice as large as a dimension they cover (a 128-row tile on 40 rows only pads). A setting
served without that pruning (the device file's tile) is held to the limit at launch, which lowers
its stages (`stages_that_fit`).

The launch key: M, N and K classed on the device file's `autotune.buckets.coarse_dims`, the output dtype,
and the operands' layout, "nn", "nt", "tn" or "tt" ("t": the operand's last dim, K of A or N of B,
is not read at unit stride, as in a transposed view). The representative launch is a 2-D product
of the key's sizes, its operands laid out as the key says.
"""
from __future__ import annotations

import math

import numpy as np

from nbx import autotune
from nbx.core.dtypes import as_dtype
from nbx.core.ops.creation import asarray
from nbx.core.reference import oracle

PARAMS = {"block_m": (64, 128), "block_n": (64, 128), "block_k": (32, 64), "group_m": (8,),
          "num_warps": (4, 8), "num_stages": (3, 4)}
KEY = {"m": "coarse_dims", "n": "coarse_dims", "k": "coarse_dims", "dtype": "dtype", "layout": "label"}
HALF_BYTES = 2        # the candidates' shared memory is counted for 16-bit operands
LARGE_TILE = 128 * 128


def operand_letter(last_stride: int, last_size: int) -> str:
    """'n' when an operand's last dim is read at unit stride (or has one element), else 't'."""
    return "n" if last_size <= 1 or last_stride == 1 else "t"


def launch_key(m: int, n: int, k: int, dtype, a_strides, b_strides) -> dict:
    """The key fields of the product of an (m, k) operand with strides a_strides and a (k, n) one."""
    layout = operand_letter(a_strides[1], k) + operand_letter(b_strides[1], n)
    return {"m": m, "n": n, "k": k, "dtype": dtype, "layout": layout}


def stage_bytes(setting, a_itemsize: int = HALF_BYTES, b_itemsize: int = HALF_BYTES) -> int:
    """Shared memory of one pipeline stage: an A tile and a B tile."""
    return setting["block_k"] * (setting["block_m"] * a_itemsize + setting["block_n"] * b_itemsize)


def stages_that_fit(setting, a_itemsize: int, b_itemsize: int, facts, reserved: int = 0) -> int:
    """The setting's stages, fewer where its operands' stages would pass the shared memory a block
    may have (a float32 or float64 product served a setting certified for 16-bit ones) beside the
    reserved bytes the epilogue stages (epilogue_bytes)."""
    stages = setting["num_stages"]
    if stages <= 1:
        return stages
    fit = (facts.value("memory.max_shared_memory_per_block") - reserved) // stage_bytes(setting, a_itemsize, b_itemsize)
    return max(1, min(stages, fit))


def epilogue_bytes(setting, out_itemsize: int, residual_itemsize: int = 0) -> int:
    """Shared memory the epilogue of a tile takes beside the pipeline's stages: the tma kernel
    stages C for its descriptor store, and an addend read as a tile through pointers (a residual,
    a bias of more than one row: residual_itemsize, their widths summed) is converted into the
    accumulator's layout through shared memory (on the H200 a 128 x 256 bf16 tile with a residual
    asked 96 KiB more than the stages: without this, a setting certified without one fails to
    compile with one). The tma kernel's persistent loop keeps the next tile's stages live through
    the epilogue, so its buffers add to them: C staged, a bias [N] read as a vector (fused.ROW_BIAS)
    converted at 4 bytes a column (counted always: the key holds no bias; as a [BLOCK_M, BLOCK_N]
    tile it asked 32 KiB and put the certified 128 x 256 x 64 tile 13 KiB past the H200's limit),
    and the stages' barriers (the pointer kernel reuses its stages' buffers for a bias). Checked
    against Triton's own count (tests/nbx-kernels/test_kernels_lower_for_hopper.py)."""
    tile = setting["block_m"] * setting["block_n"]
    if setting.get("kernel") != "tma":
        return tile * residual_itemsize
    staged = out_itemsize // 2 if half_store(out_itemsize) else out_itemsize   # C (hopper.py's HALF_STORE)
    vectors = setting["block_n"] * BIAS_VECTOR_BYTES + setting["num_stages"] * BARRIER_BYTES
    return tile * (staged + residual_itemsize) + vectors


def shared_bytes(setting, itemsize: int, out_itemsize: int, residual_itemsize: int = 0) -> int:
    """The shared memory a launch of setting asks: its stages of itemsize-byte operands and its
    epilogue (what the candidates' pruning holds to memory.max_shared_memory_per_block)."""
    return setting["num_stages"] * stage_bytes(setting, itemsize, itemsize) + epilogue_bytes(
        setting, out_itemsize, residual_itemsize)


BIAS_VECTOR_BYTES = 4   # a column of the bias vector, converted in float32
BARRIER_BYTES = 8       # a stage's mbarrier


HALF_STORE_BYTES = 4   # outputs this wide or wider: the tma kernel stages and stores C in two halves


def half_store(out_itemsize: int) -> bool:
    return out_itemsize >= HALF_STORE_BYTES


DOT_WIDTHS = {1: "one_byte", 2: "two_byte", 4: "four_byte", 8: "eight_byte"}


def min_dot_k(facts, itemsize: int) -> int:
    """The smallest K tile tl.dot compiles for operands of itemsize bytes on this device
    (matrix_unit.min_dot_k: Triton 3.6 on NVIDIA refuses an 8-bit dot under 32, a 16-bit one under 16)."""
    return facts.value(f"matrix_unit.min_dot_k.{DOT_WIDTHS[itemsize]}")


def block_k_that_fits(block_k: int, itemsize: int, facts, per_dot: int = 1) -> int:
    """A served block_k, raised where its dots (block_k // per_dot of K each) would fall under the
    device's smallest dot K: a tile below it is never built (as stages_that_fit holds a served
    setting to the shared memory). Both are powers of two, so the result stays one."""
    return max(block_k, per_dot * min_dot_k(facts, itemsize))


def dot_k_fits(setting, itemsize: int, facts, per_dot: int = 1) -> str | bool:
    """Prune a candidate whose dots would be raised at launch (block_k_that_fits): the certifier
    measures only tiles that are built as they are stated."""
    least = per_dot * min_dot_k(facts, itemsize)
    if setting["block_k"] < least:
        return (f"block_k {setting['block_k']} is under matrix_unit.min_dot_k of {itemsize}-byte operands "
                f"({least // per_dot}{f' a dot, {per_dot} dots a step' if per_dot > 1 else ''})")
    return True


def _warps_for_tile(setting, facts):
    if setting["num_warps"] > 4 and setting["block_m"] * setting["block_n"] < LARGE_TILE:
        return (f"{setting['num_warps']} warps over a {setting['block_m']} x {setting['block_n']} tile leave each "
                f"warp too little work")
    return True


def _fits_key(setting, rep, facts):
    """Prune a tile dimension twice as large as the key's size when a smaller candidate covers it,
    and stages the key's operands (of its dtype) cannot hold in shared memory."""
    for block, size in (("block_m", "m"), ("block_n", "n"), ("block_k", "k")):
        value = setting[block]
        if value > min(PARAMS[block]) and value // 2 >= rep[size]:
            return f"{block} {value} covers {size}={rep[size]} twice over"
    itemsize = as_dtype(rep["dtype"]).itemsize   # the operands meet in the result dtype
    found = dot_k_fits(setting, itemsize, facts)
    if found is not True:
        return found
    if stages_that_fit(setting, itemsize, itemsize, facts) < setting["num_stages"]:
        return (f"{setting['num_stages']} stages of {as_dtype(rep['dtype']).name} operands take "
                f"{setting['num_stages'] * stage_bytes(setting, itemsize, itemsize)} bytes, above "
                f"memory.max_shared_memory_per_block {facts.value('memory.max_shared_memory_per_block')}")
    return True


def _values(count: int, rows: int, phase: float, scale: float) -> np.ndarray:
    return (scale * np.sin(phase * np.arange(count, dtype=np.float64) + 0.5)).reshape(rows, -1)


def operand(values: np.ndarray, dtype, transposed: bool, device):
    """values (2-D, or a batch of them) as a tensor of dtype on device; transposed: read through the
    transpose of the last two dims of a dense copy with them swapped, so its last dim has stride rows."""
    if not transposed:
        return asarray(values.astype(dtype.host), device=device)
    swapped = (*range(values.ndim - 2), values.ndim - 1, values.ndim - 2)
    return asarray(np.ascontiguousarray(np.swapaxes(values, -1, -2)).astype(dtype.host), device=device).permute(*swapped)


def representative_operands(rep, device):
    """(a, b) of the key's sizes and layout; B scaled by 1/sqrt(k) so that a float16 output stays
    far from overflow at any K."""
    m, n, k, dtype = rep["m"], rep["n"], rep["k"], rep["dtype"]
    a = operand(_values(m * k, m, 0.37, 1.0), dtype, rep["layout"][0] == "t", device)
    b = operand(_values(k * n, k, 0.21, 1.0 / math.sqrt(max(k, 1))), dtype, rep["layout"][1] == "t", device)
    return a, b


def matmul_workload(rep, device):
    from .. import launch
    from . import launch_matmul
    a, b = representative_operands(rep, device)
    out = launch.output((rep["m"], rep["n"]), rep["dtype"], device)
    return autotune.TensorWorkload(
        out, lambda setting: launch_matmul(a, b, rep["dtype"], out=out, setting=setting),
        lambda rows: np.asarray(oracle("matmul", a[rows], b)))


MATMUL = autotune.declare(autotune.Tunable(
    "matmul", params=PARAMS, key=KEY, default_from="tiles.matmul", workload=matmul_workload,
    constraint=autotune.all_of(autotune.shared_memory(lambda s: s["num_stages"] * stage_bytes(s)), _warps_for_tile),
    fits=_fits_key))


def matmul_setting(device, m: int, n: int, k: int, dtype, a_strides, b_strides):
    """The served setting of an (m, k) @ (k, n) product of output dtype."""
    return autotune.setting(MATMUL, device, **launch_key(m, n, k, dtype, a_strides, b_strides))


__all__ = ["MATMUL", "PARAMS", "KEY", "launch_key", "matmul_setting", "stages_that_fit", "epilogue_bytes", "shared_bytes", "representative_operands",
           "min_dot_k", "block_k_that_fits", "dot_k_fits"]
