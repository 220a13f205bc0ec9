"""scaled_linear: float8 e4m3 / e5m2 operands with per-tensor and per-row float32 scales,
accumulated in float32, through the pointer kernel (split K too) and the descriptor kernel,
against the float64 oracle of the dequantized product; the refusals of mismatched scales."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx.kernels.matmul import epilogue

rng = np.random.default_rng(8)


def fp8(device, shape, dtype="float8_e4m3fn"):
    return nbx.asarray(rng.standard_normal(shape).astype(np.float32), device=device).to(dtype=dtype)


def scale(device, count):
    return nbx.asarray(rng.uniform(0.5, 2.0, count).astype(np.float32), device=device)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("per", ["tensor", "row"])
def test_scaled_float8_products_match_the_dequantized_oracle(device, check, dtype, per):
    x, w, b = fp8(device, (7, 64), dtype), fp8(device, (40, 64), dtype), scale(device, 40)
    sx, sw = (scale(device, 1), scale(device, 1)) if per == "tensor" else (scale(device, 7), scale(device, 40))
    out = nbx.scaled_linear(x, w, sx, sw, b)
    assert out.dtype is nbx.bfloat16 and out.shape == (7, 40)
    check(out, nbx.oracle("scaled_linear", x, w, sx, sw, b), device)


def test_scaled_products_split_k_and_the_descriptor_kernel_agree_with_the_oracle(device, check):
    x, w = fp8(device, (70, 128)), fp8(device, (48, 128))
    sx, sw = scale(device, 70), scale(device, 48)
    expected = nbx.oracle("scaled_linear", x, w, sx, sw)
    tile = {"kernel": "tiles", "block_m": 16, "block_n": 32, "block_k": 32, "split_k": 2, "group_m": 2,
            "num_warps": 4, "num_stages": 1, "programs": 2, "warp_specialize": 0}
    out = epilogue.launch_linear(x, w, dtype=nbx.float32, scales=(sx, sw), setting=tile)
    check(out, expected, device)
    tma = {**tile, "kernel": "tma", "block_m": 64, "split_k": 1}
    check(epilogue.launch_linear(x, w, dtype=nbx.float16, scales=(sx, sw), setting=tma), expected, device)


def test_mismatched_scales_and_operands_are_refused_by_name(device):
    x, w = fp8(device, (4, 32)), fp8(device, (8, 32))
    with pytest.raises(nbx.errors.ShapeError, match="neither one scale nor one for each of the 4 rows"):
        nbx.scaled_linear(x, w, scale(device, 3), scale(device, 8))
    with pytest.raises(nbx.errors.DTypeError, match="scale_w is float32"):
        nbx.scaled_linear(x, w, scale(device, 4), scale(device, 8).to(dtype="bfloat16"))
    with pytest.raises(nbx.errors.DTypeError, match="multiplies float8 operands"):
        nbx.scaled_linear(x.to(dtype="bfloat16"), w, scale(device, 4), scale(device, 8))
    with pytest.raises(nbx.errors.NotSupportedError, match="two float8 operands of one type"):
        nbx.scaled_linear(x, fp8(device, (8, 32), "float8_e5m2"), scale(device, 4), scale(device, 8))


gpu_only = pytest.mark.parametrize("device", [pytest.param("cuda", marks=pytest.mark.gpu)], indirect=True)


@gpu_only
@pytest.mark.parametrize("kernel", ["tiles", "tma"])
def test_float8_per_row_products_at_a_4096_deep_layer_on_the_gpu(device, check, kernel):
    x, w = fp8(device, (512, 4096)), fp8(device, (1024, 4096))
    sx, sw = scale(device, 512), scale(device, 1024)
    setting = {"kernel": kernel, "block_m": 128, "block_n": 128, "block_k": 128, "split_k": 1, "group_m": 8,
               "num_warps": 8, "num_stages": 3, "programs": 132, "warp_specialize": 0}
    out = epilogue.launch_linear(x, w, scales=(sx, sw), setting=setting)
    check(out, nbx.oracle("scaled_linear", x, w, sx, sw), device)


def test_deepseek_block_scales_scale_each_128_block_of_k_and_128_by_128_block_of_the_weight(device, check):
    x, w = fp8(device, (5, 300)), fp8(device, (200, 300))      # K and N not multiples of 128
    sx = nbx.asarray(rng.uniform(0.5, 2.0, (5, 3)).astype(np.float32), device=device)
    sw = nbx.asarray(rng.uniform(0.5, 2.0, (2, 3)).astype(np.float32), device=device)
    expected = nbx.oracle("scaled_linear", x, w, sx, sw)
    check(nbx.scaled_linear(x, w, sx, sw), expected, device)
    tile = {"kernel": "tiles", "block_m": 16, "block_n": 64, "block_k": 64, "split_k": 2, "group_m": 2,
            "num_warps": 4, "num_stages": 1, "programs": 2, "warp_specialize": 0}
    check(epilogue.launch_linear(x, w, dtype=nbx.float32, scales=(sx, sw), setting=tile), expected, device)
    per_row = nbx.oracle("scaled_linear", x, w, sx[:, :1].contiguous(), sw[:1, :1].contiguous())
    assert not np.allclose(expected, per_row)      # the blocks' scales are really applied
    with pytest.raises(nbx.errors.ShapeError, match=r"block-scaled scale_x is \(5, 3\)"):
        nbx.scaled_linear(x, w, sx[:, :2].contiguous(), sw)
