"""The persistent tensor-descriptor kernel (matmul/hopper.py) on interp (Triton's interpreter runs
descriptor loads and stores) and on the H200: layouts nt and nn, every epilogue, the gated pair,
sizes that leave partial tiles, against the float64 oracle; which calls it can read, and where the
tunable offers it."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core import device_files
from nbx.kernels.matmul import epilogue
from nbx.kernels.matmul.linear_tuning import LINEAR

rng = np.random.default_rng(90)
TMA = {"kernel": "tma", "block_m": 64, "block_n": 32, "block_k": 32, "split_k": 1, "group_m": 2, "num_warps": 4,
       "num_stages": 2, "programs": 2, "warp_specialize": 0}


def on(device, shape, dtype="bfloat16", scale=1.0):
    return nbx.asarray((scale * rng.standard_normal(shape)).astype(nbx.as_dtype(dtype).host), device=device)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("weight_layout", ["out_in", "in_out"])
def test_the_persistent_descriptor_kernel_matches_the_oracle_with_partial_tiles(device, check, dtype, weight_layout):
    x, bias, residual = on(device, (70, 40), dtype), on(device, (48,), dtype), on(device, (70, 48), dtype)
    weight = on(device, (48, 40), dtype, 0.2) if weight_layout == "out_in" else on(device, (40, 48), dtype, 0.2).mT
    p = epilogue.plan(x, weight, bias, residual, activation="silu", dtype=x.dtype, setting=TMA)
    assert p.tma and p.grid == (2,) and dict(p.meta)["B_KMAJOR"] == (weight_layout == "out_in")
    out = epilogue.launch_linear(x, weight, bias, "silu", residual, 0.5, 2.0, setting=TMA)
    check(out, nbx.oracle("linear", x, weight, bias, "silu", residual, 0.5, 2.0), device)


def test_the_descriptor_kernel_computes_the_gated_pair(device, check):
    x, wg, wu = on(device, (65, 48)), on(device, (40, 48), scale=0.2), on(device, (40, 48), scale=0.2)
    out = epilogue.launch_linear(x, wg, activation="silu", up=wu, setting=TMA)
    check(out, nbx.oracle("gated_linear", x, wg, wu, "silu"), device)


@pytest.mark.parametrize("weight_layout", ["out_in", "in_out"])
def test_a_tf32_product_rounds_a_float32_weight_once_before_the_descriptor_kernel_to_the_oracles_products(
        device, check, weight_layout):
    x = on(device, (70, 64), "float32")
    weight = on(device, (48, 64), "float32") if weight_layout == "out_in" else on(device, (64, 48), "float32").mT
    plan = epilogue.launch_plan(x, weight, setting=TMA, input_precision="tf32")
    assert [launch.kernel.fn.__name__ for launch in plan.launches] == ["tf32_round_kernel", "tma_matmul_kernel"]
    assert epilogue.linear_cost(x, weight, input_precision="tf32").launches == 1   # served the device file's tiles
    out = epilogue.launch_linear(x, weight, setting=TMA, input_precision="tf32")
    check(out, nbx.oracle("linear", x, weight, input_precision="tf32"), device)
    # the gated pair and a float16 weight (TF32 values already) round in the K loop, with no pass
    wu = on(device, (48, 64), "float32") if weight_layout == "out_in" else on(device, (64, 48), "float32").mT
    gated = epilogue.launch_plan(x, weight, up=wu, activation="silu", setting=TMA, input_precision="tf32")
    narrow = epilogue.launch_plan(x, weight.to(dtype="float16"), setting=TMA, input_precision="tf32")
    assert len(gated.launches) == len(narrow.launches) == 1
    check(epilogue.launch_linear(x, weight.to(dtype="float16"), dtype=nbx.float32, setting=TMA, input_precision="tf32"),
          nbx.oracle("linear", x, weight.to(dtype="float16"), input_precision="tf32"), device)


def test_calls_descriptors_cannot_read_are_not_eligible_and_a_tma_setting_for_them_is_refused(device):
    x, w = on(device, (8, 40)), on(device, (24, 40))
    assert epilogue.plan(x, w, dtype=x.dtype, setting=TMA).tma
    odd_rows = on(device, (8, 41))[:, :40]           # a row stride of 82 bytes
    unaligned = on(device, (8 * 40 + 1,))[1:].reshape(8, 40)   # a base 2 bytes past alignment
    for a in (odd_rows, unaligned, on(device, (40, 8)).mT):
        with pytest.raises(nbx.errors.NotSupportedError, match="cannot read these operands"):
            epilogue.plan(a, w, dtype=x.dtype, setting=TMA)
    with pytest.raises(nbx.errors.NotSupportedError, match="cannot read these operands"):
        epilogue.plan(on(device, (2, 8, 40)), on(device, (2, 24, 40)), dtype=x.dtype, setting=TMA)
    with pytest.raises(nbx.errors.NotSupportedError, match="cannot read these operands"):
        epilogue.plan(on(device, (8, 40), "float64"), on(device, (24, 40), "float64"), dtype=nbx.float64,
                      setting=TMA)


def test_a_mixed_dtype_call_is_eligible_by_the_row_bytes_of_its_stored_operands_and_computes_right(device, check):
    """A float16 x of a float32 product is read through its descriptor as float16 rows: 12 of
    them are 24 bytes, no descriptor row, though 12 float32s (48 bytes) would be one."""
    w = on(device, (24, 12), "float32")
    assert epilogue.plan(on(device, (8, 12), "float32"), w, dtype=nbx.float32, setting=TMA).tma
    x = on(device, (8, 12), "float16")
    with pytest.raises(nbx.errors.NotSupportedError, match="cannot read these operands"):
        epilogue.plan(x, w, dtype=nbx.float32, setting=TMA)
    wide = on(device, (8, 16), "float16")        # 32-byte rows: eligible, widened after the load
    w16 = on(device, (24, 16), "float32")
    assert epilogue.plan(wide, w16, dtype=nbx.float32, setting=TMA).tma
    check(epilogue.launch_linear(wide, w16, setting=TMA), nbx.oracle("linear", wide, w16), device)


def test_the_tunable_offers_the_tma_kernel_only_on_devices_with_descriptor_copies_and_eligible_keys():
    key = {"m": 4096, "n": 4096, "k": 4096, "dtype": "bfloat16", "layout": "nt", "form": "plain", "tma": True}
    hopper = device_files.for_arch("sm_90")
    kept, _ = LINEAR.candidates(hopper, key)
    tma = [s for s in kept if s["kernel"] == "tma"]
    assert tma and all(s["split_k"] == 1 and s["block_m"] >= 64 for s in tma)
    assert {s["warp_specialize"] for s in tma} == {0, 1}
    assert all(s["warp_specialize"] == 0 for s in kept if s["kernel"] == "tiles")
    assert not [s for s in LINEAR.candidates(hopper, {**key, "tma": False})[0] if s["kernel"] == "tma"]
    ampere = device_files.for_arch("sm_80")
    assert not [s for s in LINEAR.candidates(ampere, key)[0] if s["kernel"] == "tma"]
    assert len(kept) < 120


gpu_only = pytest.mark.parametrize("device", [pytest.param("cuda", marks=pytest.mark.gpu)], indirect=True)


@gpu_only
def test_tf32_and_float8_through_the_descriptor_kernel_at_the_benchmarks_widest_tiles_on_the_gpu(device, check):
    setting = {**TMA, "block_m": 128, "block_n": 128, "block_k": 32, "num_warps": 8, "num_stages": 3, "programs": 132}
    x, w = on(device, (1000, 4096), "float32"), on(device, (1024, 4096), "float32", 0.05)
    check(epilogue.launch_linear(x, w, setting=setting, input_precision="tf32"),
          nbx.oracle("linear", x, w, input_precision="tf32"), device)
    x8, w8 = x.to(dtype="float8_e4m3fn"), (w * 20).to(dtype="float8_e4m3fn")
    sx = nbx.asarray(rng.uniform(0.5, 2.0, 1000).astype(np.float32), device=device)
    sw = nbx.asarray(rng.uniform(0.5, 2.0, 1024).astype(np.float32), device=device)
    wide = {**setting, "block_n": 256, "block_k": 128}
    for ws in (0, 1):
        out = epilogue.launch_linear(x8, w8, dtype=nbx.bfloat16, scales=(sx, sw), setting={**wide, "warp_specialize": ws})
        check(out, nbx.oracle("scaled_linear", x8, w8, sx, sw), device)


@gpu_only
@pytest.mark.parametrize("warp_specialize", [0, 1])
def test_the_descriptor_kernel_at_a_llama_shape_on_the_gpu(device, check, warp_specialize):
    setting = {**TMA, "block_m": 128, "block_n": 128, "block_k": 64, "num_warps": 8, "num_stages": 3, "programs": 132,
               "warp_specialize": warp_specialize}
    x, w, b = on(device, (1000, 4096)), on(device, (1024, 4096), scale=0.05), on(device, (1024,))
    check(epilogue.launch_linear(x, w, b, "gelu", setting=setting), nbx.oracle("linear", x, w, b, "gelu"), device)
    wu = on(device, (1024, 4096), scale=0.05)
    check(epilogue.launch_linear(x, w, activation="silu", up=wu, setting=setting),
          nbx.oracle("gated_linear", x, w, wu, "silu"), device)
