"""gated_linear with two grouped int4 weights (SwiGLU's pair, W4A16) in one launch: every form of
the int4 kernel (tiles folding the scales, wide tiles, the several-row and the one-row gemv), split
and unsplit, both schemes, the three activation dtypes, against activation(x @ dequant(Wg).T) *
(x @ dequant(Wu).T) on the float64 oracle; the refusals; the declared cost; the tunable's pruning."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core import device_files
from nbx.core.quant import QuantizedTensor
from nbx.kernels.cost import price
from nbx.kernels.matmul import int4
from test_matmul_int4 import GPU_FORMS, gpu_form_setting, gpu_only

rng = np.random.default_rng(11)
TILE = {"kernel": "tiles", "block_m": 16, "block_n": 32, "block_k": 32, "split_k": 1, "group_m": 2, "num_warps": 4,
        "num_stages": 1}
ROW = {**TILE, "kernel": "gemv", "block_m": 1, "block_n": 16, "num_warps": 1, "num_stages": 3}


def weight(device, n, k, group, scheme="asymmetric", scale_dtype="bfloat16"):
    return QuantizedTensor.quantize(rng.standard_normal((n, k)) * 0.1, group, scheme, scale_dtype).to(device)


def on(device, shape, dtype="bfloat16"):
    return nbx.asarray(rng.standard_normal(shape).astype(nbx.as_dtype(dtype).host), device=device)


def oracle(x, gate, up, activation="silu"):
    """activation(x @ dequant(gate).T) * (x @ dequant(up).T) in float64."""
    a = x.numpy().astype(np.float64)
    g, u = (w.dequantize("float64").numpy() for w in (gate, up))
    y = a @ g.T
    act = {"silu": y / (1 + np.exp(-y)), "relu": np.maximum(y, 0)}.get(activation)
    if act is None:   # gelu (erf)
        from math import erf
        act = 0.5 * y * (1 + np.vectorize(erf)(y / np.sqrt(2)))
    return act * (a @ u.T)


@pytest.mark.parametrize("form,rows,n,k,group,split_k,scheme,dtype,activation", [
    ("tiles", 3, 64, 128, 32, 1, "asymmetric", "bfloat16", "silu"),
    ("tiles", 16, 96, 256, 64, 2, "symmetric", "float16", "gelu"),
    ("tiles", 40, 64, 128, 32, 4, "asymmetric", "float32", "relu"),
    ("wide", 40, 72, 128, 64, 1, "symmetric", "bfloat16", "silu"),
    ("wide", 16, 64, 256, 64, 2, "asymmetric", "float16", "silu"),
    ("prescaled", 3, 72, 256, 64, 2, "asymmetric", "bfloat16", "silu"),
    ("prescaled", 16, 64, 128, 32, 1, "symmetric", "float16", "gelu"),
    ("gemv", 3, 64, 256, 64, 1, "asymmetric", "bfloat16", "silu"),
    ("gemv", 16, 72, 128, 32, 2, "symmetric", "float32", "gelu"),
    ("row", 1, 96, 512, 64, 1, "asymmetric", "bfloat16", "silu"),
    ("row", 1, 72, 256, 32, 1, "symmetric", "float16", "relu"),
    ("row", 1, 64, 128, 32, 1, "asymmetric", "float32", "silu")])
def test_every_form_of_the_gated_int4_pair_matches_the_float64_oracle(device, check, form, rows, n, k, group, split_k,
                                                                     scheme, dtype, activation):
    """A weight tile past N (72, 96 on tiles of 32 and 16), x rows past the tile (3 of 16, 40 of 64)."""
    gate, up = weight(device, n, k, group, scheme), weight(device, n, k, group, scheme)
    x = on(device, (rows, k), dtype)
    setting = {"tiles": {**TILE, "split_k": split_k},
               "wide": {**TILE, "block_m": 2 * int4.FOLD_ROWS, "block_k": 32, "split_k": split_k},
               "prescaled": {**TILE, "kernel": "prescaled", "split_k": split_k},
               "gemv": {**TILE, "kernel": "gemv", "block_m": 1 << (rows - 1).bit_length(), "block_n": 32,
                        "split_k": split_k, "num_stages": 2},
               "row": {**ROW, "block_k": min(k, 256)}}[form]
    meta = dict(int4.plan(x, gate, activation=activation, setting=setting, gated=True).meta)
    assert meta["GATED"] and meta["SPLIT_K"] == split_k and meta["GEMV"] == (form in ("gemv", "row"))
    assert meta["FOLD"] == (form != "prescaled" and setting["block_m"] <= int4.FOLD_ROWS)
    assert meta["PRESCALED"] == (form == "prescaled")
    out = int4.launch_gated_linear_int4(x, gate, up, activation, setting=setting)
    assert out.dtype is nbx.as_dtype(dtype) and out.shape == (rows, n)
    expected = oracle(x, gate, up, activation)
    check(out, expected, device)
    np.testing.assert_allclose(np.asarray(nbx.oracle("gated_linear_int4", x, gate, up, activation)), expected,
                               rtol=1e-12, atol=1e-12)


def test_gated_linear_dispatches_a_pair_of_int4_weights_on_the_device_and_the_cpu(device, check):
    gate, up = weight(device, 64, 128, 32), weight(device, 64, 128, 32)
    x = on(device, (2, 3, 128))
    out = nbx.gated_linear(x, gate, up, activation="silu")
    assert out.shape == (2, 3, 64) and out.dtype is nbx.bfloat16
    check(out, oracle(x.reshape(6, 128), gate, up).reshape(2, 3, 64), device)
    cpu = nbx.gated_linear(x.to("cpu"), gate.to("cpu"), up.to("cpu"), activation="silu", out_dtype="float32")
    assert cpu.dtype is nbx.float32 and cpu.device.type == "cpu"
    check(cpu, oracle(x.reshape(6, 128), gate, up).reshape(2, 3, 64), device)   # at float32's tolerance


def test_the_gated_int4_refusals(device):
    gate, x = weight(device, 32, 64, 32), on(device, (2, 64))
    dense = on(device, (32, 64))
    with pytest.raises(nbx.errors.NotSupportedError, match="one int4 .* and one Tensor"):
        nbx.gated_linear(x, gate, dense)
    with pytest.raises(nbx.errors.NotSupportedError, match="one int4 .* and one Tensor"):
        nbx.gated_linear(x, dense, gate)
    with pytest.raises(nbx.errors.ShapeError, match="of one shape"):
        nbx.gated_linear(x, gate, weight(device, 48, 64, 32))
    with pytest.raises(nbx.errors.NotSupportedError, match="share one layout"):
        nbx.gated_linear(x, gate, weight(device, 32, 64, 64))
    with pytest.raises(nbx.errors.NotSupportedError, match="share one layout"):
        nbx.gated_linear(x, gate, weight(device, 32, 64, 32, "symmetric"))
    with pytest.raises(nbx.errors.NotSupportedError, match="norm="):
        nbx.gated_linear(x, gate, gate, norm=(on(device, (64,)), None))
    with pytest.raises(nbx.errors.ShapeError, match="last dim must be in=64"):
        nbx.gated_linear(on(device, (2, 32)), gate, gate)


@pytest.mark.parametrize("split_k", [1, 2])
def test_the_declared_cost_of_the_gated_pair_is_what_its_plan_allocates(device, monkeypatch, split_k):
    """Both weights, x and the output moved once; split, both weights' partials allocated and moved twice."""
    from nbx.kernels import plans
    gate, up = weight(device, 32, 128, 32), weight(device, 32, 128, 32)
    x = on(device, (2, 128))
    setting = {**TILE, "split_k": split_k}
    plans.reset()
    monkeypatch.setattr(int4.autotune, "setting", lambda *args, **kwargs: setting)   # the served setting
    try:
        cost = price("gated_linear_int4", x, gate, up, "silu")
        lp = int4.launch_plan(x, gate, activation="silu", gated=True)
        assert cost.allocated == sum(b.nbytes for b in lp.buffers())
        partials = 2 * split_k * 2 * 32 * 4 if split_k > 1 else 0
        assert cost.allocated == 2 * 32 * 2 + partials
        assert cost.bytes_moved == x.nbytes + gate.nbytes + up.nbytes + 2 * 32 * 2 + 2 * partials
        assert cost.flops == 2 * 2 * 2 * 32 * 128 and cost.launches == len(lp.launches) == (2 if split_k > 1 else 1)
    finally:
        plans.reset()


def test_the_gated_int4_tunable_prunes_the_tiles_that_hold_two_weights_past_the_plain_limits():
    """Same space and key as linear_int4, certified apart: the several-row gemv's tile, the one-row
    gemv's nibbles a thread, the tiles' accumulators and shared memory count both weights."""
    hopper = device_files.for_arch("sm_90")
    for rep in ({"m": 1, "n": 14336, "k": 4096, "dtype": "bfloat16", "group": 128},
                {"m": 16, "n": 14336, "k": 4096, "dtype": "bfloat16", "group": 128},
                {"m": 512, "n": 14336, "k": 4096, "dtype": "bfloat16", "group": 128}):
        gated, pruned = int4.GATED_LINEAR_INT4.candidates(hopper, rep)
        plain, _ = int4.LINEAR_INT4.candidates(hopper, rep)
        assert gated and plain and gated != plain
        if rep["m"] == 1:
            nibbles = [2 * s["block_n"] * s["block_k"] // (32 * s["num_warps"]) for s in gated]
            assert all(int4.ROW_GEMV_NIBBLES[0] <= t <= int4.ROW_GEMV_NIBBLES[1] for t in nibbles)
            assert any("gives a thread" in why for _, why in pruned)
        elif rep["m"] == 16:
            assert all(2 * s["block_m"] * s["block_n"] <= int4.GEMV_TILE for s in gated if s["kernel"] == "gemv")
            assert any("of two weights" in why for _, why in pruned)
        else:
            held = [2 * s["block_m"] * s["block_n"] // (32 * s["num_warps"]) for s in gated]
            assert max(held) <= int4.GATED_ACC_MAX < max(2 * s["block_m"] * s["block_n"] // (32 * s["num_warps"])
                                                         for s in plain)
            assert any("accumulators a thread" in why for _, why in pruned)
    assert int4.GATED_LINEAR_INT4.key_fields == int4.LINEAR_INT4.key_fields


@gpu_only
@GPU_FORMS
def test_the_gated_int4_pair_at_a_4096_wide_layer_on_the_gpu(device, check, kernel, rows, split_k, scheme, dtype):
    """Every compiled form (the inline PTX conversions) with two weights, as the plain GPU test's settings."""
    gate, up = weight(device, 4096, 4096, 128, scheme), weight(device, 4096, 4096, 128, scheme)
    x = on(device, (rows, 4096), dtype)
    setting = gpu_form_setting(kernel, rows, split_k, weights=2)
    check(int4.launch_gated_linear_int4(x, gate, up, "silu", setting=setting), oracle(x, gate, up), device)
