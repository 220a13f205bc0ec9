"""linear with a grouped int4 weight (W4A16) on the kernel devices: asymmetric and symmetric,
group sizes 32/64/128, decode rows and prefill, split K, the epilogue, against dequantize-then-
matmul on the float64 oracle; the refusals; the declared cost; the tunable's pruning."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core import device_files
from nbx.core.quant import QuantizedTensor
from nbx.kernels.cost import price
from nbx.kernels.matmul import int4

rng = np.random.default_rng(4)
TILE = {"kernel": "tiles", "block_m": 16, "block_n": 32, "block_k": 32, "split_k": 1, "group_m": 2, "num_warps": 4, "num_stages": 1}


def weight(device, n, k, group, scheme="asymmetric", scale_dtype="bfloat16"):
    return QuantizedTensor.quantize(rng.standard_normal((n, k)) * 0.1, group, scheme, scale_dtype).to(device)


def on(device, shape, dtype="bfloat16"):
    return nbx.asarray(rng.standard_normal(shape).astype(nbx.as_dtype(dtype).host), device=device)


@pytest.mark.parametrize("scheme", ["asymmetric", "symmetric"])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_int4_products_match_dequantize_then_matmul_on_the_oracle(device, check, scheme, group):
    w = weight(device, 40, 256, group, scheme)
    for rows in (1, 7):
        x = on(device, (rows, 256))
        out = nbx.linear(x, w)
        assert out.dtype is nbx.bfloat16 and out.shape == (rows, 40)
        check(out, nbx.oracle("linear_int4", x, w), device)


@pytest.mark.parametrize("split_k", [1, 4])
def test_prefill_rows_split_k_and_the_epilogue_with_int4_weights(device, check, split_k):
    w, b, r = weight(device, 48, 128, 32, scale_dtype="float16"), on(device, (48,), "float32"), on(device, (33, 48))
    x = on(device, (33, 128), "float16")
    setting = {**TILE, "split_k": split_k}
    out = int4.launch_linear_int4(x, w, b, "silu", r, 0.5, 2.0, nbx.float16, setting=setting)
    check(out, nbx.oracle("linear_int4", x, w, b, "silu", r, 0.5, 2.0), device)
    x32 = on(device, (3, 2, 128), "float32")
    check(nbx.linear(x32, w, b), nbx.oracle("linear_int4", x32, w, b), device)


@pytest.mark.parametrize("scheme,dtype", [("asymmetric", "bfloat16"), ("symmetric", "float16")])
def test_wide_tiles_that_dequantize_each_weight_element_before_the_dot_match_the_oracle(device, check, scheme, dtype):
    """A tile of more than FOLD_ROWS rows of x scales each weight element (the prefill form); the
    16-row tiles above scale the dot's sums (the decode form): both against the same oracle."""
    w = weight(device, 40, 128, 64, scheme)
    x = on(device, (37, 128), dtype)
    setting = {**TILE, "block_m": 2 * int4.FOLD_ROWS, "block_k": 64}
    check(int4.launch_linear_int4(x, w, setting=setting), nbx.oracle("linear_int4", x, w), device)


@pytest.mark.parametrize("rows,block_m,split_k,scheme,dtype,group", [
    (3, 16, 2, "asymmetric", "bfloat16", 64), (16, 16, 1, "symmetric", "float16", 32),
    (37, 128, 1, "symmetric", "bfloat16", 128), (5, 32, 4, "asymmetric", "float32", 32)])
def test_prescaled_tiles_that_dequantize_from_16_bit_halves_before_the_dot_match_the_oracle(
        device, check, rows, block_m, split_k, scheme, dtype, group):
    """kernel = prescaled: each K step's weight dequantized from its 16-bit halves (q * scale +
    minimum, one rounding to x's dtype) before a dot that accumulates across steps, at decode and
    prefill tiles, split or not, every scheme and activation dtype."""
    w = weight(device, 40, 256, group, scheme)
    x = on(device, (rows, 256), dtype)
    setting = {**TILE, "kernel": "prescaled", "block_m": block_m, "block_k": 32, "split_k": split_k}
    check(int4.launch_linear_int4(x, w, setting=setting), nbx.oracle("linear_int4", x, w), device)


@pytest.mark.parametrize("rows,block_m,split_k,scheme,dtype", [(1, 1, 1, "asymmetric", "bfloat16"),
                                                                (1, 1, 2, "symmetric", "float16"),
                                                                (3, 4, 2, "symmetric", "float16"),
                                                                (2, 2, 4, "asymmetric", "float32")])
def test_the_gemv_kernel_matches_the_oracle_at_decode_rows_with_split_k_and_the_epilogue(device, check, rows, block_m,
                                                                                         split_k, scheme, dtype):
    """The CUDA-core decode kernel (eight nibbles a word to 1 + q / 16 in float32, the scales on the
    row sums): both schemes, the three activation dtypes, a tile wider than the rows (masked x),
    a weight tile past N, split K and the epilogue (bias, activation, residual, alpha, beta)."""
    w = weight(device, 40, 256, 64, scheme)
    x = on(device, (rows, 256), dtype)
    setting = {**TILE, "kernel": "gemv", "block_m": block_m, "block_k": 64, "split_k": split_k}
    check(int4.launch_linear_int4(x, w, setting=setting), nbx.oracle("linear_int4", x, w), device)
    if split_k == 2:
        b, r = on(device, (40,), "float32"), on(device, (rows, 40), dtype)
        out = int4.launch_linear_int4(x, w, b, "silu", r, 0.5, 2.0, setting=setting)
        check(out, nbx.oracle("linear_int4", x, w, b, "silu", r, 0.5, 2.0), device)


@pytest.mark.parametrize("k,block_k,served,scheme,dtype", [(512, 256, 256, "asymmetric", "bfloat16"),
                                                            (512, 512, 512, "symmetric", "float16"),
                                                            (320, 256, 64, "asymmetric", "float32"),
                                                            (256, 32, 32, "symmetric", "bfloat16")])
def test_the_one_row_gemv_takes_k_steps_of_several_groups_and_falls_back_to_the_group(device, check, k, block_k, served,
                                                                                       scheme, dtype):
    """One row of x (_gemv_row_sums): a K step of four or eight groups of 64 (their scales and minima
    per group of the step), a K of 320 that 256 does not divide (served a step of the group), a step
    inside a group; a weight tile past N (rows clamped, the store masked)."""
    w = weight(device, 40, k, 64, scheme)
    x = on(device, (1, k), dtype)
    setting = {**TILE, "kernel": "gemv", "block_m": 1, "block_n": 16, "block_k": block_k, "split_k": 1,
               "num_warps": 1, "num_stages": 3}
    assert dict(int4.plan(x, w, setting=setting).meta)["BLOCK_K"] == served
    check(int4.launch_linear_int4(x, w, setting=setting), nbx.oracle("linear_int4", x, w), device)


def test_the_gemv_kernel_refuses_groups_that_are_not_whole_words(device):
    w = weight(device, 8, 48, 4)
    with pytest.raises(nbx.errors.NotSupportedError, match="groups of 4 are not whole words"):
        int4.launch_linear_int4(on(device, (1, 48)), w, setting={**TILE, "kernel": "gemv", "block_m": 1})


def test_int4_refusals_and_the_declared_cost(device):
    w = weight(device, 32, 64, 32)
    with pytest.raises(nbx.errors.ShapeError, match="last dim must be in=64"):
        nbx.linear(on(device, (2, 32)), w)
    with pytest.raises(nbx.errors.NotSupportedError, match="not float64"):
        nbx.linear(on(device, (2, 64), "float64"), w)
    with pytest.raises(nbx.errors.ShapeError, match="group size 48 does not divide"):
        QuantizedTensor.quantize(np.ones((4, 64)), 48)
    x = on(device, (2, 64))
    cost = price("linear_int4", x, w)
    assert cost.allocated == 2 * 32 * 2 and cost.flops == 2 * 2 * 32 * 64
    assert cost.bytes_moved == x.nbytes + w.nbytes + 2 * 32 * 2
    assert w.nbytes < 32 * 64 * 2 / 3     # a third of the bfloat16 weight (packed bytes, scales, minima)


def test_the_int4_tunable_prunes_block_k_that_does_not_divide_the_group():
    hopper = device_files.for_arch("sm_90")
    kept, pruned = int4.LINEAR_INT4.candidates(hopper, {"m": 1, "n": 4096, "k": 4096, "dtype": "bfloat16",
                                                        "group": 64})
    # one row of x: the one-row gemv alone, its K steps whole groups (of 64: block_k 256 on)
    assert kept and {s["kernel"] for s in kept} == {"gemv"} and {s["block_m"] for s in kept} == {1}
    assert {s["block_k"] for s in kept} <= {256, 512, 1024, 2048} and {s["split_k"] for s in kept} == {1}
    assert any("its K steps take 256 or more" in why for _, why in pruned)
    kept, pruned = int4.LINEAR_INT4.candidates(hopper, {"m": 1, "n": 4096, "k": 3072, "dtype": "bfloat16",
                                                        "group": 128})
    assert kept and all(3072 % s["block_k"] == 0 for s in kept)   # steps of 2048 would run as the group's
    assert any("does not divide k=3072" in why for _, why in pruned)
    kept, pruned = int4.LINEAR_INT4.candidates(hopper, {"m": 4, "n": 4096, "k": 4096, "dtype": "bfloat16",
                                                        "group": 64})
    assert kept and {s["block_k"] for s in kept} <= {32, 64}
    assert {s["block_m"] for s in kept if s["kernel"] == "tiles"} == {16}
    assert {s["block_m"] for s in kept if s["kernel"] == "gemv"} == {4}
    assert any("does not divide the group size 64" in why for _, why in pruned)
    assert {s["split_k"] for s in kept if s["kernel"] == "tiles"} == {s["split_k"] for s in kept} == {1, 2, 4, 8}
    kept, _ = int4.LINEAR_INT4.candidates(hopper, {"m": 16, "n": 4096, "k": 4096, "dtype": "bfloat16", "group": 128})
    assert {s["block_m"] for s in kept if s["kernel"] == "gemv"} == {16}
    kept, pruned = int4.LINEAR_INT4.candidates(hopper, {"m": 2048, "n": 4096, "k": 4096, "dtype": "bfloat16",
                                                        "group": 128})
    assert kept and all(s["block_m"] >= 128 and s["block_n"] >= 64 and s["split_k"] == 1 for s in kept)
    assert {s["kernel"] for s in kept} == set(int4.TILE_FORMS)
    assert any("it serves decode rows" in why for _, why in pruned)
    assert any("prefill takes 128 x 64 or wider" in why for _, why in pruned)


def test_the_shipped_int4_keys_are_the_writers_each_with_a_short_sweep_of_decode_or_prefill_tiles():
    """certificates/keys/nvidia-h200-140gb-int4.json is what tools/write_int4_keys.py writes; a key's
    sweep stays short (the certification budget: both tile forms of a prefill key), decode keys sweep
    split K over 16-row tiles of both forms."""
    import json
    import sys
    from pathlib import Path
    from nbx.autotune import keys
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "tools"))
    try:
        writer = __import__("write_int4_keys")
    finally:
        sys.path.remove(str(root / "tools"))
    hopper = device_files.for_arch("sm_90")
    recs = writer.key_records(hopper)
    shipped = json.loads((root / "certificates" / "keys" / "nvidia-h200-140gb-int4.json").read_text())["keys"]
    assert sorted(r["key"] for r in shipped) == sorted(r.key for r in recs)
    for rec in recs:
        rep = keys.representative(keys.parse("linear_int4", int4.KEY, rec.key, hopper, rec.observed), int4.KEY, hopper)
        kept, _ = int4.LINEAR_INT4.candidates(hopper, rep)
        assert 16 <= len(kept) <= 88, (rec.key, len(kept))
        if rep["m"] == 1:   # the one-row gemv alone, unsplit
            assert {(s["kernel"], s["block_m"], s["split_k"]) for s in kept} == {("gemv", 1, 1)}, rec.key
        elif rep["m"] <= 16:
            for form in int4.TILE_FORMS:
                tiles = [s for s in kept if s["kernel"] == form]
                assert {s["block_m"] for s in tiles} == {16} and {s["split_k"] for s in tiles} >= {1, 2, 4}, rec.key
            assert {s["split_k"] for s in kept if s["kernel"] == "gemv"} >= {1, 2}, rec.key


@pytest.mark.parametrize("tunable", ["linear_int4", "gated_linear_int4"])
def test_the_int4_workload_passes_the_screen_for_a_decode_and_a_split_candidate(tunable):
    from nbx import kernels
    from nbx.autotune import screen
    from nbx.kernels import launch
    kernels.register()
    interp = nbx.as_device("interp")
    rep = {"m": 2, "n": 40, "k": 128, "dtype": nbx.bfloat16, "group": 32}
    declared = int4.LINEAR_INT4 if tunable == "linear_int4" else int4.GATED_LINEAR_INT4
    kept, _ = declared.candidates(device_files.for_arch("sm_90"), rep)
    chosen = kept[:1] + [s for s in kept if s["split_k"] == 2][:1]
    result = screen.run(declared.workload(rep, interp), chosen, launch.facts(interp))
    assert len(chosen) == 2 and not result.excluded and len(result.passed) == 2


gpu_only = pytest.mark.parametrize("device", [pytest.param("cuda", marks=pytest.mark.gpu)], indirect=True)
# (kernel, rows of x, split_k, scheme, dtype) of the GPU tests at a 4096-wide layer, plain and gated
GPU_FORMS = pytest.mark.parametrize("kernel,rows,split_k,scheme,dtype", [
    ("tiles", 1, 4, "asymmetric", "bfloat16"), ("tiles", 16, 2, "symmetric", "bfloat16"),
    ("tiles", 3, 1, "asymmetric", "float16"), ("tiles", 512, 1, "asymmetric", "bfloat16"),
    ("tiles", 200, 1, "symmetric", "float16"), ("gemv", 1, 8, "asymmetric", "bfloat16"),
    ("gemv", 16, 2, "symmetric", "bfloat16"), ("gemv", 3, 1, "asymmetric", "float16"),
    ("row", 1, 1, "asymmetric", "bfloat16"), ("row", 1, 1, "symmetric", "float16"),
    ("row", 1, 1, "asymmetric", "float32"), ("prescaled", 16, 4, "asymmetric", "bfloat16"),
    ("prescaled", 3, 2, "symmetric", "float16"), ("prescaled", 512, 1, "symmetric", "bfloat16"),
    ("prescaled", 200, 1, "asymmetric", "float16")])


@gpu_only
@GPU_FORMS
def test_int4_decode_and_prefill_at_a_4096_wide_layer_on_the_gpu(device, check, kernel, rows, split_k, scheme, dtype):
    """Decode tiles (the scales on the dot's sums) and prefill tiles (each element scaled), both
    nibble conversions of the inline PTX (bfloat16 and float16, unsigned and signed); the prescaled
    tiles' halves (the same four cases, decode and prefill); the gemv
    kernel's word conversion (unsigned and signed) at one, three and sixteen rows; the one-row gemv
    at K steps of eight groups, its paired conversion (16-bit activations) and its word one (float32)."""
    w = weight(device, 4096, 4096, 128, scheme)
    x = on(device, (rows, 4096), dtype)
    check(int4.launch_linear_int4(x, w, setting=gpu_form_setting(kernel, rows, split_k)),
          nbx.oracle("linear_int4", x, w), device)


def gpu_form_setting(kernel: str, rows: int, split_k: int, weights: int = 1) -> dict:
    """A GPU_FORMS case's setting; the gemv forms' weight rows divided by the weights a launch reads."""
    setting = {"kernel": kernel, "block_m": 16 if rows <= 16 else 128, "block_n": 128,
               "block_k": 128 if rows <= 16 else 64, "split_k": split_k, "group_m": 8,
               "num_warps": 4 if rows <= 16 else 8, "num_stages": 3}
    if kernel == "gemv":
        setting.update(block_m=1 << (rows - 1).bit_length(), block_n=(32 if rows > 4 else 128) // weights, num_stages=2)
    if kernel == "row":
        setting.update(kernel="gemv", block_m=1, block_n=32 // weights, block_k=1024, num_warps=4)
    return setting


def test_the_screen_workload_of_a_class_whose_representative_k_is_no_whole_number_of_groups_builds_and_agrees(device, check):
    """A key's representative K (e.g. 3984 of the (3968, 4096] class) need not divide into groups;
    the workload takes the nearest whole number of groups instead of refusing (the H200 bench's
    int4 rows failed so)."""
    rep = {"m": 2, "n": 32, "k": 200, "dtype": "bf16", "group": 64}
    work = int4.int4_workload(rep, nbx.as_device(device))
    work.launch(TILE)
    assert work.out.shape == (2, 32)
    check(work.out, work.reference_rows(slice(0, 2)), device)
