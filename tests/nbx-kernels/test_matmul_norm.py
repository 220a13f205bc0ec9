"""linear and gated_linear with a fused RMS norm (norm=(weight, eps)): the product of
rms_norm(x, weight, eps) from one launch, against the float64 oracle of the unfused pair and the
unfused ops themselves, plain and split over K; its declared cost and its refusals."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.quant import QuantizedTensor
from nbx.kernels import plans
from nbx.kernels.cost import price
from nbx.kernels.matmul import epilogue

rng = np.random.default_rng(20)
SPLIT = {"kernel": "tiles", "block_m": 16, "block_n": 32, "block_k": 16, "group_m": 1, "num_warps": 4, "num_stages": 1,
         "programs": 1, "warp_specialize": 0}


def on(device, shape, dtype="float32", scale=1.0, offset=0.0):
    return nbx.asarray((offset + scale * rng.standard_normal(shape)).astype(nbx.as_dtype(dtype).host), device=device)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("m,k,n", [(1, 40, 33), (7, 33, 20)])
def test_a_normed_linear_matches_the_oracle_of_rms_norm_then_linear(device, check, dtype, m, k, n):
    x, w, nw, r = on(device, (m, k), dtype, 3.0), on(device, (n, k), dtype, 0.3), on(device, (k,), dtype, 0.2, 1.0), \
        on(device, (m, n), dtype)
    out = nbx.linear(x, w, residual=r, norm=(nw, 1e-5))
    assert out.dtype.name == dtype and out.shape == (m, n)
    check(out, nbx.oracle("linear", x, w, None, None, r, norm=(nw, 1e-5)), device)
    unfused = nbx.linear(nbx.rms_norm(x, (k,), nw, 1e-5), w, residual=r)
    check(out, unfused.numpy().astype(np.float64), device)


def test_a_normed_swiglu_pair_matches_the_unfused_norm_and_gated_product(device, check):
    x, nw = on(device, (3, 48), "bfloat16", 2.0), on(device, (48,), "bfloat16", 0.1, 1.0)
    wg, wu = on(device, (24, 48), "bfloat16", 0.3), on(device, (24, 48), "bfloat16", 0.3)
    out = nbx.gated_linear(x, wg, wu, norm=(nw, 1e-6))
    check(out, nbx.oracle("gated_linear", x, wg, wu, "silu", norm=(nw, 1e-6)), device)
    check(out, nbx.gated_linear(nbx.rms_norm(x, (48,), nw, 1e-6), wg, wu).numpy().astype(np.float64), device)


@pytest.mark.parametrize("split_k", [1, 3])
def test_each_program_of_a_split_norms_with_the_statistics_of_the_whole_row(device, check, split_k):
    x, nw = on(device, (5, 70), "bfloat16", 4.0), on(device, (70,), "bfloat16", 0.2, 1.0)
    w, wu = on(device, (40, 70), "bfloat16", 0.2), on(device, (40, 70), "bfloat16", 0.2)
    setting = {**SPLIT, "split_k": split_k}
    p = epilogue.plan(x, w, dtype=x.dtype, setting=setting, norm_weight=nw)
    assert p.norm and p.split_k == split_k and dict(p.meta)["NORM"]
    out = epilogue.launch_linear(x, w, setting=setting, norm=(nw, 1e-5))
    check(out, nbx.oracle("linear", x, w, norm=(nw, 1e-5)), device)
    gated = epilogue.launch_linear(x, w, activation="silu", up=wu, setting=setting, norm=(nw, 1e-5))
    check(gated, nbx.oracle("gated_linear", x, w, wu, "silu", norm=(nw, 1e-5)), device)


def test_repeated_normed_calls_of_one_signature_take_each_calls_norm_weight(device, check):
    x, w = on(device, (2, 32), "bfloat16"), on(device, (16, 32), "bfloat16", 0.3)
    for _ in range(2):   # the second and third calls replay the prepared launch
        nw = on(device, (32,), "bfloat16", 0.5, 1.0)
        check(nbx.linear(x, w, norm=(nw, 1e-5)), nbx.oracle("linear", x, w, norm=(nw, 1e-5)), device)
        check(nbx.gated_linear(x, w, w, norm=(nw, 1e-5)), nbx.oracle("gated_linear", x, w, w, "silu",
                                                                     norm=(nw, 1e-5)), device)


def test_a_cpu_normed_linear_is_its_reference():
    x, w, nw = on("cpu", (3, 16), "bfloat16"), on("cpu", (8, 16), "bfloat16"), on("cpu", (16,), "bfloat16", 0.1, 1.0)
    out = nbx.linear(x, w, norm=(nw, None))   # eps None: x's machine epsilon, as rms_norm's
    unfused = nbx.linear(nbx.rms_norm(x, (16,), nw), w)
    assert out.numpy().tobytes() == unfused.numpy().tobytes()


def test_the_declared_cost_adds_only_the_norm_weight_and_no_launch(device):
    x, w, nw = on(device, (4, 64), "bfloat16"), on(device, (16, 64), "bfloat16"), on(device, (64,), "bfloat16")
    plain, normed = price("linear", x, w), price("linear", x, w, norm_weight=nw, norm_eps=1e-5)
    assert normed.launches == plain.launches and normed.allocated == plain.allocated
    assert normed.bytes_moved == plain.bytes_moved + nw.nbytes and normed.flops == plain.flops + 3 * x.size
    gated = price("gated_linear", x, w, w, "silu", None, nw, 1e-5)
    assert gated.bytes_moved == price("gated_linear", x, w, w).bytes_moved + nw.nbytes


def test_a_split_normed_launch_declares_its_sums_of_squares_as_workspace(device, monkeypatch):
    monkeypatch.setattr(epilogue, "linear_setting", lambda *a, **k: {**SPLIT, "split_k": 4})
    plans.reset()
    try:
        x, w, nw = on(device, (3, 64)), on(device, (20, 64)), on(device, (64,))
        cost = price("linear", x, w, norm_weight=nw, norm_eps=1e-5)
        assert cost.launches == 2 and [b.name for b in cost.buffers] == ["out", "partials", "squares"]
        assert cost.buffers[-1].nbytes == 4 * 3 * 4 and cost.buffers[-1].lifetime == "launch"
    finally:
        plans.reset()


def test_a_fused_norm_is_refused_by_name_where_it_cannot_run(device):
    x, w = on(device, (2, 8)), on(device, (4, 8))
    with pytest.raises(nbx.errors.ShapeError, match="norm weight is"):
        nbx.linear(x, w, norm=(on(device, (4,)), 1e-5))
    with pytest.raises(nbx.errors.ArgumentError, match="norm is"):
        nbx.linear(x, w, norm=on(device, (8,)))
    with pytest.raises(nbx.errors.ShapeError, match="batched product"):
        nbx.linear(on(device, (2, 2, 8)), on(device, (2, 4, 8)), norm=(on(device, (8,)), 1e-5))
    tma = {**SPLIT, "kernel": "tma", "block_m": 64, "block_n": 64, "split_k": 1, "programs": 132}
    plans.reset()
    with pytest.raises(nbx.errors.NotSupportedError, match="normed product"):
        epilogue.plan(on(device, (64, 64), "bfloat16"), on(device, (64, 64), "bfloat16"), dtype=nbx.bfloat16,
                      setting=tma, norm_weight=on(device, (64,), "bfloat16"))


def test_an_int4_weight_refuses_a_fused_norm_by_name(device):
    q = QuantizedTensor.quantize(rng.standard_normal((16, 64)) * 0.1, 32).to(device)
    with pytest.raises(nbx.errors.NotSupportedError, match="int4 weight is not done"):
        nbx.linear(on(device, (2, 64)), q, norm=(on(device, (64,)), 1e-5))

