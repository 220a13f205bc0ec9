"""Certified settings of the expert GEMMs (kernel.py: gate/up and down share one setting, since
the alignment's row block is both products' block_m).

Two tunables: `moe_experts` (prefill) and `moe_band`, the one-token band (BAND_TOKENS or fewer
tokens, the issue's 1-16), whose row block may be 16 so that an expert's few pairs are not padded
to a prefill tile and each selected expert's weights are read once per column tile. Which one a
call takes is the band's definition (a token count), not a tuned choice; each has its own device
file default (tiles.moe_experts, tiles.moe_band) and its own certificates.

The launch key (launch_key): tokens (the power of two at or above the count), experts and top_k
(exact: they fix the pairs per expert), the intermediate and hidden sizes (dims ladder), the dtype, and the weights' form ("dense", or
"int4-<scheme>-g<group>": W4A16, or "fp8-<type>-b<rows>x<columns>": block-scaled float8, W8A16).
The representative launch routes token t's slot j to expert
(t * top_k + j) % experts: every expert gets its share of rows.
"""
from __future__ import annotations

import math

import numpy as np

from nbx import autotune
from nbx.core.dtypes import as_dtype
from nbx.core.ops.creation import asarray
from nbx.core.reference import oracle

from ..matmul.tuning import stage_bytes, stages_that_fit
from ..rows import pow2_at_least

BAND_TOKENS = 16
# block_k under 64 and 2 stages never paid for 16-bit operands in matmul's sweeps: left out to keep
# a key's sweep short; group_m is matmul's single value
# loads: the weights' tiles (and the down product's intermediate rows) through pointers, or through
# tensor descriptors (tma: Hopper's copy engine) where matrix_unit.tma holds. Compiled for sm_90
# (Triton 3.9), the pointer gate/up kernel spilled at every tile looked at (3648 bytes of stack at
# the band's certified 16 x 64 x 128, 4 warps; 4272 at 32 x 128 x 64) and kept 20 KiB of shared
# memory (its loads not pipelined); through descriptors none spilled (156-229 registers)
PARAMS = {"block_m": (16, 32, 64, 128), "block_n": (64, 128, 256), "block_k": (64, 128), "group_m": (8,),
          "num_warps": (4, 8), "num_stages": (3, 4), "loads": ("pointers", "tma")}
# the band adds 32-column tiles: one Qwen3-30B-A3B token's gate/up launch is 8 row blocks x 768 / 64
# = 96 programs at block_n 64, under the H200's 132 SMs, so its weights stream through part of them
BAND_PARAMS = {**PARAMS, "block_m": (16, 32), "block_n": (32, 64, 128, 256), "kernel": ("tiles", "gemv")}
# kernel: the band's tiled products, or their GEMV form (kernel.expert_gemv_*: a pair a program row,
# sums on the CUDA cores: one Qwen3-30B-A3B token's 8 pairs take 8 x 768 / 32 = 192 programs at
# block_n 32, none of them padded rows), which reads only block_n, block_k and num_warps: its other
# parameters stay at GEMV_CANONICAL so that it is swept once a tile. Certificates made before it ran
# the tiles (implied).
GEMV_CANONICAL = {"block_m": 16, "group_m": 8, "num_stages": 3, "loads": "pointers"}
# the gemv form keeps its products [block_n, block_k] per weight in registers, gate's and up's: 128 a
# thread compiled for sm_90 (Triton 3.9) in 235-245 registers without a spill (64 x 128 at 4 warps,
# 128 x 128 at 8); twice that cannot fit a thread's 255
GEMV_PRODUCTS_A_THREAD = 128
# tokens: the power of two at or above the count (rows.pow2_at_least, as the row kernels key their
# width): a tile's fit follows an expert's rows, tokens * top_k / experts, on an octave scale, and a
# model's prefill lengths then take 10 classes up to 8192 and the band 5, each screened or certified
# once (the dims ladder's steps of 16 to 128 tokens took ~140).
KEY = {"tokens": "exact", "experts": "exact", "top_k": "exact", "inter": "dims", "hidden": "dims", "dtype": "dtype",
       "weights": "label"}


def _gated_stage_bytes(setting, itemsize: int) -> int:
    """One stage of the gate/up product: the A tile and two weight tiles."""
    return setting["block_k"] * (setting["block_m"] + 2 * setting["block_n"]) * itemsize


def _fits(setting, rep, facts):
    """Rows per expert twice under block_m or four times over a block_m under 64 (a short sweep:
    a small row block pays only for a few rows an expert), tiles twice the key's sizes, and stages
    of the gated product that shared memory cannot hold; the GEMV form on dense weights only."""
    if setting.get("kernel") == "gemv":
        if rep["weights"] != "dense":
            return f"the gemv form sums float weights, not {rep['weights']}"
        small = min(rep["inter"], rep["hidden"])
        for block in ("block_n", "block_k"):
            if setting[block] > min(BAND_PARAMS[block]) and setting[block] // 2 >= small:
                return f"{block} {setting[block]} covers {small} twice over"
        return True
    if setting.get("loads") == "tma":
        itemsize = as_dtype(rep["dtype"]).itemsize
        if not facts.value("matrix_unit.tma"):
            return "matrix_unit.tma is false: no tensor-descriptor copies"
        if rep["weights"] != "dense" or itemsize == 8:
            return f"{rep['weights']} {rep['dtype']} weights take pointer loads"
        if (rep["hidden"] * itemsize) % 16 or (rep["inter"] * itemsize) % 16:
            return "the key's weight rows are not 16-byte multiples: no descriptor reads them"
    if rep["weights"] != "dense" and _k_group(rep["weights"]) % setting["block_k"]:
        return f"block_k {setting['block_k']} does not divide the K group of {rep['weights']}"
    rows = math.ceil(rep["tokens"] * rep["top_k"] / rep["experts"])
    if setting["block_m"] > 16 and setting["block_m"] // 2 >= rows:
        return f"block_m {setting['block_m']} pads an expert's {rows} rows twice over"
    if setting["block_m"] < 64 and 4 * setting["block_m"] <= rows:
        return f"block_m {setting['block_m']} under a quarter of an expert's {rows} rows"
    small = min(rep["inter"], rep["hidden"])
    for block in ("block_n", "block_k"):
        if setting[block] > min(PARAMS[block]) and setting[block] // 2 >= small:
            return f"{block} {setting[block]} covers {small} twice over"
    itemsize = as_dtype(rep["dtype"]).itemsize
    limit = facts.value("memory.max_shared_memory_per_block")
    if setting["num_stages"] * _gated_stage_bytes(setting, itemsize) > limit:
        return f"{setting['num_stages']} stages of the gated tile pass memory.max_shared_memory_per_block {limit}"
    if stages_that_fit(setting, itemsize, itemsize, facts) < setting["num_stages"]:
        return f"{setting['num_stages']} stages pass memory.max_shared_memory_per_block {limit}"
    return True


def _k_group(label: str) -> int:
    """The K columns a quantized weight's scale covers: int4-<scheme>-g<group>'s group,
    fp8-<type>-b<rows>x<columns>'s columns."""
    if label.startswith("fp8-"):
        return int(label.rsplit("x", 1)[1])
    return int(label.rsplit("-g", 1)[1])


def _gemv_rules(setting, facts):
    """The GEMV form reads none of GEMV_CANONICAL's parameters (one candidate a tile, not one a
    value), and holds at most GEMV_PRODUCTS_A_THREAD products a thread."""
    if setting.get("kernel") != "gemv":
        return True
    off = sorted(p for p, v in GEMV_CANONICAL.items() if setting[p] != v)
    if off:
        return f"the gemv form reads none of {off}: they stay at {GEMV_CANONICAL}"
    if "compute.warp_size" in facts:   # the interpreter states no warps
        products = 2 * setting["block_n"] * setting["block_k"] // (setting["num_warps"] * facts.value("compute.warp_size"))
        if products > GEMV_PRODUCTS_A_THREAD:
            return f"{products} gemv products a thread (above {GEMV_PRODUCTS_A_THREAD}: registers spill)"
    return True


def _warps(setting, facts):
    """No more than 4 warps over a matrix-unit tile under 64 x 128 (the gemv form's warps split K)."""
    if setting.get("kernel") != "gemv" and setting["num_warps"] > 4 and setting["block_m"] * setting["block_n"] < 64 * 128:
        return f"{setting['num_warps']} warps over a {setting['block_m']} x {setting['block_n']} tile"
    return True


def _normal(shape, seed: int, scale: float) -> np.ndarray:
    """Fixed pseudo-random normals of standard deviation scale: the screen's x and weights.

    Not sinusoids: over coherent rows and columns each product cancels (the gate's outputs came out
    about 250 times under the sum of their terms' magnitudes at hidden 2048), and the layer's output
    fell to ~1e-4 while the intermediate's and the pair rows' roundings (one each, as the torch loop
    rounds) did not shrink with it: a correct bfloat16 kernel deviated 0.05 to 0.1 from the oracle
    (a float64 emulation that rounds only those two reproduces the interpreter's 0.052 to three
    digits), so no tile passed. Over independent values the products keep their sqrt(K) size and a
    correct kernel stays near the output's own rounding. Drawn in float32 (half the host memory of
    float64 at Mixtral's 470 M weights an operand), then cast to the key's dtype."""
    values = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
    values *= np.float32(scale)
    return values


def _host_weights(count: int, inter: int, hidden: int, dtype: str) -> tuple:
    """w_gate, w_up, w_down of a layer on the host in the key's dtype (read-only), kept by
    autotune.kept_inputs for the next key of the same layer."""
    def draw():
        host = as_dtype(dtype).host
        return (_normal((count, inter, hidden), 21, 1 / math.sqrt(hidden)).astype(host),
                _normal((count, inter, hidden), 13, 1 / math.sqrt(hidden)).astype(host),
                _normal((count, hidden, inter), 17, 1 / math.sqrt(inter)).astype(host))
    return autotune.kept_inputs("moe experts", (count, inter, hidden, dtype), draw)


def representative_layer(rep, device):
    """(x, weights, experts, w_gate, w_up, w_down) of the key's sizes, every expert given rows."""
    tokens, count, k = rep["tokens"], rep["experts"], rep["top_k"]
    inter, hidden, dtype = rep["inter"], rep["hidden"], as_dtype(rep["dtype"])
    x = asarray(_normal((tokens, hidden), 37, 1.0).astype(dtype.host), device=device)
    w_gate, w_up, w_down = (asarray(w, device=device) for w in _host_weights(count, inter, hidden, dtype.name))
    if rep["weights"].startswith("fp8-"):   # fp8-<type>-b<rows>x<columns>: the same values, block-scaled
        from nbx.core.quant_float8 import Float8BlockWeight
        _, kind, block = rep["weights"].split("-")
        w_gate, w_up, w_down = (Float8BlockWeight.quantize(w, tuple(map(int, block[1:].split("x"))), f"float8_{kind}")
                                for w in (w_gate, w_up, w_down))
    elif rep["weights"] != "dense":   # int4-<scheme>-g<group>: the same values, quantized
        from nbx.core.quant import QuantizedTensor
        _, scheme, group = rep["weights"].split("-")
        w_gate, w_up, w_down = (QuantizedTensor.quantize(w, int(group[1:]), scheme, "bfloat16").to(device)
                                for w in (w_gate, w_up, w_down))
    ids = (np.arange(tokens * k) % count).reshape(tokens, k).astype(np.int32)
    weights = (0.5 + 0.4 * np.sin(np.arange(tokens * k))).reshape(tokens, k).astype(np.float32)
    return x, asarray(weights, device=device), asarray(ids, device=device), w_gate, w_up, w_down


def experts_workload(rep, device):
    """The key's layer into one output; the oracle of a window of rows runs on those tokens only
    (a token's output depends on its own row, weights and experts)."""
    from .. import launch
    from . import launch_experts
    operands = representative_layer(rep, device)
    out = launch.output(operands[0].shape, operands[0].dtype, device)
    return autotune.TensorWorkload(
        out, lambda setting: launch_experts(*operands, out=out, setting=setting),
        lambda rows: np.asarray(oracle("moe_experts", *(a[rows] for a in operands[:3]), *operands[3:])))


def _declare(name: str, params: dict, default: str, implied=None):
    return autotune.declare(autotune.Tunable(
        name, params=params, key=KEY, default_from=default, workload=experts_workload,
        constraint=autotune.all_of(autotune.shared_memory(lambda s: s["num_stages"] * stage_bytes(s)), _warps,
                                   _gemv_rules),
        fits=_fits, implied=implied))


EXPERTS = _declare("moe_experts", PARAMS, "tiles.moe_experts")
BAND = _declare("moe_band", BAND_PARAMS, "tiles.moe_band", implied={"kernel": "tiles"})


def launch_key(tokens: int, experts: int, top_k: int, inter: int, hidden: int, dtype, weights: str = "dense"
               ) -> tuple:
    """(tunable, key fields) of a layer's expert GEMMs: the band's for BAND_TOKENS tokens or fewer."""
    tunable = BAND if tokens <= BAND_TOKENS else EXPERTS
    return tunable, dict(tokens=pow2_at_least(tokens), experts=experts, top_k=top_k, inter=inter, hidden=hidden,
                         dtype=dtype, weights=weights)


def experts_setting(device, tokens: int, experts: int, top_k: int, inter: int, hidden: int, dtype,
                    weights: str = "dense"):
    """The served setting of a layer's expert GEMMs."""
    tunable, fields = launch_key(tokens, experts, top_k, inter, hidden, dtype, weights)
    return autotune.setting(tunable, device, **fields)


__all__ = ["EXPERTS", "BAND", "BAND_TOKENS", "PARAMS", "KEY", "launch_key", "experts_setting", "representative_layer"]
