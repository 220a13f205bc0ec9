"""Certified settings of the fused product (fused.py): linear, addmm, baddbmm, gated_linear.

Tuned: the tile (block_m x block_n stepping K by block_k, block_m down to 16 for decode rows),
split_k (how many programs share one tile's K: 1 is the plain tiled product; more lets a few tiles
of decode rows keep every SM streaming the weight), warps and stages; group_m has one value.
Whether decode rows take a split-K launch is this certified parameter, never an `if` on M.

The launch key: M, N, K classed on the dims ladder, the output dtype, the operands' layout (as
matmul's: a linear weight [N, K] is B = weight.T, layout "nt"), and the form, "plain" or "gated"
(two accumulators: twice the registers a tile holds). Bias, activation and residual cost the same
store pass at any tile, so they are not in the key.

Pruned: what matmul prunes (shared memory of the stages, eight warps on small tiles, a tile twice
the key's size), a split whose share of K is under two block_k steps, and splits of launches that
already have many tiles (tiles x split_k above SPLIT_TILES_MAX: more programs than the split can
pay for in partial traffic).
"""
from __future__ import annotations

import math

import numpy as np

from nbx import autotune
from nbx.core.reference import oracle

from nbx.core.dtypes import as_dtype

from .tuning import _warps_for_tile, representative_operands, stage_bytes, stages_that_fit

PARAMS = {"block_m": (16, 32, 64, 128), "block_n": (32, 64, 128), "block_k": (32, 64, 128), "split_k": (1, 2, 4, 8),
          "group_m": (8,), "num_warps": (4, 8), "num_stages": (3, 4)}
KEY = {"m": "dims", "n": "dims", "k": "dims", "dtype": "dtype", "layout": "label", "form": "label"}
FORMS = ("plain", "gated")
SPLIT_TILES_MAX = 1024


def _gated_stage_bytes(setting, itemsize: int) -> int:
    """One stage of the gated form: the A tile and two B tiles."""
    return setting["block_k"] * (setting["block_m"] + 2 * setting["block_n"]) * itemsize


def _split_fits(setting, rep, facts):
    split = setting["split_k"]
    if split == 1:
        return True
    if rep["k"] < 2 * split * setting["block_k"]:
        return f"split_k {split} leaves under two block_k {setting['block_k']} steps of k={rep['k']} a program"
    tiles = math.ceil(rep["m"] / setting["block_m"]) * math.ceil(rep["n"] / setting["block_n"])
    if tiles * split > SPLIT_TILES_MAX:
        return f"{tiles} tiles x split_k {split} pass {SPLIT_TILES_MAX} programs"
    return True


def _fits(setting, rep, facts):
    """matmul's pruning (tuning._fits_key) over this kernel's tile ladder, the gated form's second
    B tile in shared memory, and the split's."""
    for block, size in (("block_m", "m"), ("block_n", "n"), ("block_k", "k")):
        value = setting[block]
        if value > min(PARAMS[block]) and value // 2 >= rep[size]:
            return f"{block} {value} covers {size}={rep[size]} twice over"
    itemsize = as_dtype(rep["dtype"]).itemsize
    limit = facts.value("memory.max_shared_memory_per_block")
    if stages_that_fit(setting, itemsize, itemsize, facts) < setting["num_stages"]:
        return (f"{setting['num_stages']} stages of {as_dtype(rep['dtype']).name} operands pass "
                f"memory.max_shared_memory_per_block {limit}")
    if rep["form"] == "gated" and setting["num_stages"] * _gated_stage_bytes(setting, itemsize) > limit:
        return f"{setting['num_stages']} stages of a gated tile pass memory.max_shared_memory_per_block {limit}"
    return _split_fits(setting, rep, facts)


def launch_key(m, n, k, dtype, a_strides, b_strides, form: str) -> dict:
    from .tuning import launch_key as matmul_key
    return {**matmul_key(m, n, k, dtype, a_strides, b_strides), "form": form}


def linear_workload(rep, device):
    from .. import launch
    from .epilogue import launch_linear
    a, b = representative_operands(rep, device)
    gated = rep["form"] == "gated"
    up = b if gated else None   # the gated form's two weights: one tensor read twice (timing and oracle alike)
    out = launch.output((rep["m"], rep["n"]), rep["dtype"], device)

    def run(setting):
        launch_linear(a, b.mT, activation="silu" if gated else None, up=up.mT if gated else None, out=out,
                      setting=setting)

    def reference(rows):
        if gated:
            return np.asarray(oracle("gated_linear", a[rows], b.mT, up.mT, "silu"))
        return np.asarray(oracle("matmul", a[rows], b))
    return autotune.TensorWorkload(out, run, reference)


LINEAR = autotune.declare(autotune.Tunable(
    "linear", params=PARAMS, key=KEY, default_from="tiles.linear", workload=linear_workload,
    constraint=autotune.all_of(autotune.shared_memory(lambda s: s["num_stages"] * stage_bytes(s)), _warps_for_tile),
    fits=_fits))


def linear_setting(device, m, n, k, dtype, a_strides, b_strides, form: str):
    return autotune.setting(LINEAR, device, **launch_key(m, n, k, dtype, a_strides, b_strides, form))


__all__ = ["LINEAR", "PARAMS", "KEY", "FORMS", "launch_key", "linear_setting", "SPLIT_TILES_MAX"]
