"""The fused product's GEMV form (kernel "gemv": decode rows summed on the CUDA cores, unsplit, one
launch) against the float64 oracle: every epilogue, the SwiGLU pair, the fused norm, a batch, K and
N that no tile divides; which keys the tuner offers it to and which calls it refuses by name."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core import device_files
from nbx.core.errors import NotSupportedError
from nbx.kernels import plans
from nbx.kernels.cost import price
from nbx.kernels.matmul import epilogue
from nbx.kernels.matmul.linear_tuning import GEMV, GEMV_PRODUCTS, LINEAR, gemv_products

rng = np.random.default_rng(90)
GEMV_TILE = {"kernel": "gemv", "block_m": 1, "block_n": 8, "block_k": 256, "split_k": 1, "group_m": 8,
             "num_warps": 4, "num_stages": 3, "programs": 132, "warp_specialize": 0}


def on(device, shape, dtype="float32", scale=1.0, offset=0.0):
    return nbx.asarray((offset + scale * rng.standard_normal(shape)).astype(nbx.as_dtype(dtype).host), device=device)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("m,block_m", [(1, 1), (3, 2)])
def test_the_gemv_form_with_every_epilogue_matches_the_oracle_at_sizes_no_tile_divides(device, check, dtype, m,
                                                                                        block_m):
    x, w = on(device, (m, 300), dtype), on(device, (37, 300), dtype, 0.2)
    b, r = on(device, (37,), dtype), on(device, (m, 37), dtype)
    setting = {**GEMV_TILE, "block_m": block_m}
    p = epilogue.plan(x, w, b, r, activation="gelu", dtype=x.dtype, setting=setting)
    assert dict(p.meta)["GEMV"] and p.split_k == 1 and not dict(p.meta)["EVEN_K"]
    out = epilogue.launch_linear(x, w, b, "gelu", r, 1.5, 0.5, setting=setting)
    check(out, nbx.oracle("linear", x, w, b, "gelu", r, 1.5, 0.5), device)


@pytest.mark.parametrize("block_m", [1, 2])
def test_the_gemv_form_of_the_swiglu_pair_of_a_normed_row_and_of_a_batch_matches_the_oracle(device, check, block_m):
    x, nw = on(device, (2, 512), "bfloat16", 3.0), on(device, (512,), "bfloat16", 0.1, 1.0)
    wg, wu = on(device, (20, 512), "bfloat16", 0.05), on(device, (20, 512), "bfloat16", 0.05)
    setting = {**GEMV_TILE, "block_m": block_m, "block_n": 4, "block_k": 512}
    out = epilogue.launch_linear(x, wg, activation="silu", up=wu, setting=setting)
    check(out, nbx.oracle("gated_linear", x, wg, wu, "silu"), device)
    normed = epilogue.launch_linear(x, wg, activation="silu", up=wu, setting=setting, norm=(nw, 1e-5))
    check(normed, nbx.oracle("gated_linear", x, wg, wu, "silu", norm=(nw, 1e-5)), device)
    check(epilogue.launch_linear(x, wg, setting=setting, norm=(nw, 1e-5)),
          nbx.oracle("linear", x, wg, norm=(nw, 1e-5)), device)
    x1, x2, z = on(device, (3, 1, 256)), on(device, (3, 256, 9)), on(device, (3, 1, 9))
    out = epilogue.launch_linear(x1, x2.mT, residual=z, beta=2.0, setting=GEMV_TILE)
    check(out, nbx.oracle("baddbmm", z, x1, x2, 2.0, 1.0), device)


def test_a_gemv_launch_is_one_launch_with_no_workspace_and_the_same_bits_every_run(device, monkeypatch):
    monkeypatch.setattr(epilogue, "linear_setting", lambda *a, **k: dict(GEMV_TILE))
    plans.reset()
    try:
        x, w = on(device, (1, 256), "bfloat16"), on(device, (24, 256), "bfloat16")
        cost = price("linear", x, w)
        assert cost.launches == 1 and all(b.name != "partials" for b in cost.buffers)
        first, again = nbx.linear(x, w), nbx.linear(x, w)
        assert first.numpy().tobytes() == again.numpy().tobytes()
    finally:
        plans.reset()


def test_the_gemv_form_refuses_by_name_what_it_does_not_sum(device):
    x, w = on(device, (1, 256)), on(device, (8, 256))
    with pytest.raises(NotSupportedError, match="gemv kernel"):
        epilogue.launch_linear(x, w, setting={**GEMV_TILE, "split_k": 2})
    with pytest.raises(NotSupportedError, match="gemv kernel"):
        epilogue.launch_linear(x, w, setting=GEMV_TILE, input_precision="tf32")


def test_decode_keys_offer_the_gemv_kernel_and_prefill_scaled_and_tf32_keys_do_not():
    hopper = device_files.for_arch("sm_90")
    decode = {"m": 1, "n": 2048, "k": 2048, "dtype": "bfloat16", "layout": "nt", "form": "plain", "tma": True,
              "precision": "none"}
    kept, _ = LINEAR.candidates(hopper, decode)
    gemv = [s for s in kept if s["kernel"] == "gemv"]
    assert gemv and {s["block_m"] for s in gemv} == {1} and {s["split_k"] for s in gemv} == {1}
    assert {s["block_n"] for s in gemv} == set(GEMV["block_n"]) and {s["num_warps"] for s in gemv} == {4}
    assert all(s["block_n"] >= 32 and s["block_k"] <= 128 for s in kept if s["kernel"] != "gemv")
    assert {s["num_stages"] for s in gemv} == {3}
    gated = [s for s in LINEAR.candidates(hopper, {**decode, "form": "gated"})[0] if s["kernel"] == "gemv"]
    assert gated and all(2 * gemv_products(s) <= GEMV_PRODUCTS for s in gated) and len(gated) < len(gemv)
    for other in ({"m": 64}, {"form": "scaled"}, {"dtype": "float32", "precision": "tf32"}):
        kept, pruned = LINEAR.candidates(hopper, {**decode, **other})
        assert kept and not any(s["kernel"] == "gemv" for s in kept), other
        assert any("gemv kernel" in why for _, why in pruned), other


gpu_only = pytest.mark.parametrize("device", [pytest.param("cuda", marks=pytest.mark.gpu)], indirect=True)


@gpu_only
@pytest.mark.parametrize("block_n,block_k", [(4, 512), (16, 256)])
def test_the_gemv_form_at_the_llama_1b_decode_steps_sizes_on_the_gpu(device, check, block_n, block_k):
    x, nw = on(device, (1, 2048), "bfloat16", 3.0), on(device, (2048,), "bfloat16", 0.1, 1.0)
    setting = {**GEMV_TILE, "block_n": block_n, "block_k": block_k}
    wqkv, wo = on(device, (3072, 2048), "bfloat16", 0.02), on(device, (2048, 2048), "bfloat16", 0.02)
    check(epilogue.launch_linear(x, wqkv, setting=setting, norm=(nw, 1e-5)),
          nbx.oracle("linear", x, wqkv, norm=(nw, 1e-5)), device)
    check(epilogue.launch_linear(x, wo, residual=x, setting=setting), nbx.oracle("linear", x, wo, None, None, x), device)
    if block_n * block_k * 2 <= 8192:
        wg, wu = on(device, (8192, 2048), "bfloat16", 0.02), on(device, (8192, 2048), "bfloat16", 0.02)
        check(epilogue.launch_linear(x, wg, activation="silu", up=wu, setting=setting),
              nbx.oracle("gated_linear", x, wg, wu, "silu"), device)
    h, wd = on(device, (1, 8192), "bfloat16"), on(device, (2048, 8192), "bfloat16", 0.01)
    check(epilogue.launch_linear(h, wd, residual=x, setting=setting), nbx.oracle("linear", h, wd, None, None, x), device)
