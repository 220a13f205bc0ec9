"""linear, addmm, baddbmm and gated_linear on the kernel devices: every epilogue (bias [N] and per
row [M, N], activation, residual, alpha/beta, the SwiGLU pair, the output cast) against the float64
oracle of the unfused ops, in every float dtype, at odd sizes and the empty ones."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx

rng = np.random.default_rng(18)
FLOATS = ("float16", "bfloat16", "float32", "float64")


def on(device, shape, dtype="float32", scale=1.0):
    return nbx.asarray((scale * rng.standard_normal(shape)).astype(nbx.as_dtype(dtype).host), device=device)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("m,k,n", [(1, 7, 33), (7, 33, 5), (33, 20, 17)])
def test_linear_with_bias_matches_the_oracle_in_every_float_dtype(device, check, dtype, m, k, n):
    x, w, b = on(device, (m, k), dtype), on(device, (n, k), dtype), on(device, (n,), dtype)
    out = nbx.linear(x, w, b)
    assert out.dtype.name == dtype and out.shape == (m, n)
    check(out, nbx.oracle("linear", x, w, b), device)


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh", "silu"])
def test_every_activation_with_a_per_row_bias_a_residual_and_alpha_beta_matches_the_unfused_ops(
        device, check, activation):
    x, w = on(device, (9, 24), "bfloat16"), on(device, (40, 24), "bfloat16", 0.3)
    bias, residual = on(device, (9, 40), "bfloat16"), on(device, (9, 40), "bfloat16")
    out = nbx.linear(x, w, bias, activation=activation, residual=residual, alpha=0.5, beta=-1.5)
    check(out, nbx.oracle("linear", x, w, bias, activation, residual, 0.5, -1.5), device)


def test_linear_over_leading_dims_with_a_broadcast_residual_and_a_float32_output(device, check):
    x, w = on(device, (2, 3, 16), "float16"), on(device, (12, 16), "float16")
    residual = on(device, (3, 12), "float32")
    out = nbx.linear(x, w, residual=residual, out_dtype="float32")
    assert out.dtype.name == "float32" and out.shape == (2, 3, 12)
    check(out, nbx.oracle("linear", x, w, None, None, residual), device)


def test_addmm_and_baddbmm_scale_the_input_and_the_product(device, check):
    a, b, c = on(device, (5, 18)), on(device, (18, 7)), on(device, (7,))
    check(nbx.addmm(c, a, b, beta=0.25, alpha=2.0), nbx.oracle("addmm", c, a, b, 0.25, 2.0), device)
    x, y, z = on(device, (3, 4, 10)), on(device, (3, 10, 6)), on(device, (3, 4, 6))
    check(nbx.baddbmm(z, x, y, beta=-1.0, alpha=0.5), nbx.oracle("baddbmm", z, x, y, -1.0, 0.5), device)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("m", [1, 7, 33])
def test_the_swiglu_pair_matches_silu_of_the_gate_times_the_up_projection(device, check, dtype, m):
    x, wg, wu = on(device, (m, 40), dtype), on(device, (24, 40), dtype, 0.3), on(device, (24, 40), dtype, 0.3)
    out = nbx.gated_linear(x, wg, wu)
    assert out.dtype.name == dtype and out.shape == (m, 24)
    check(out, nbx.oracle("gated_linear", x, wg, wu, "silu"), device)


def test_empty_rows_give_an_empty_result_and_an_empty_sum_gives_the_epilogue_of_zero(device, check):
    assert nbx.linear(on(device, (0, 8)), on(device, (4, 8)), on(device, (4,))).shape == (0, 4)
    x, w, b, r = on(device, (3, 0)), on(device, (4, 0)), on(device, (4,)), on(device, (3, 4))
    check(nbx.linear(x, w, b, activation="relu", residual=r), nbx.oracle("linear", x, w, b, "relu", r), device)
    check(nbx.gated_linear(x, w, w), np.zeros((3, 4)), device)


# ---- split K, the plan, the declared cost, the certified settings -----------------------------
from nbx import autotune  # noqa: E402
from nbx.autotune import keys, screen  # noqa: E402
from nbx.core import device_files  # noqa: E402
from nbx.kernels import launch  # noqa: E402
from nbx.kernels.cost import price  # noqa: E402
from nbx.kernels import plans  # noqa: E402
from nbx.kernels import matmul as mm  # noqa: E402
from nbx.kernels.matmul import epilogue  # noqa: E402
from nbx.kernels.matmul.linear_tuning import LINEAR, launch_key  # noqa: E402
from nbx.kernels.matmul.tuning import dot_k_fits  # noqa: E402

MATMUL_TILE = {"block_m": 32, "block_n": 32, "block_k": 32, "group_m": 1, "num_warps": 4, "num_stages": 1}

SPLIT = {"kernel": "tiles", "block_m": 16, "block_n": 32, "block_k": 16, "group_m": 1, "num_warps": 4, "num_stages": 1,
         "programs": 1, "warp_specialize": 0}


@pytest.mark.parametrize("split_k", [2, 3, 8])
def test_split_k_sums_its_partials_in_order_before_the_epilogue_at_any_k(device, check, split_k):
    x, w, b, r = on(device, (5, 70), "bfloat16"), on(device, (40, 70), "bfloat16", 0.2), on(device, (40,)), \
        on(device, (5, 40), "bfloat16")
    setting = {**SPLIT, "split_k": split_k}
    p = epilogue.plan(x, w, b, r, activation="gelu", dtype=x.dtype, setting=setting)
    assert p.grid == (2, split_k) and p.split_k == split_k
    out = epilogue.launch_linear(x, w, b, "gelu", r, 1.5, 0.5, setting=setting)
    check(out, nbx.oracle("linear", x, w, b, "gelu", r, 1.5, 0.5), device)
    again = epilogue.launch_linear(x, w, b, "gelu", r, 1.5, 0.5, setting=setting)
    assert out.numpy().tobytes() == again.numpy().tobytes()


def test_split_k_of_the_gated_pair_and_of_a_batch_matches_the_oracle(device, check):
    x, wg, wu = on(device, (3, 64)), on(device, (20, 64), scale=0.3), on(device, (20, 64), scale=0.3)
    setting = {**SPLIT, "split_k": 4}
    out = epilogue.launch_linear(x, wg, activation="silu", up=wu, setting=setting)
    check(out, nbx.oracle("gated_linear", x, wg, wu, "silu"), device)
    x1, x2, z = on(device, (2, 3, 40)), on(device, (2, 40, 9)), on(device, (2, 1, 9))
    out = epilogue.launch_linear(x1, x2.mT, residual=z, beta=2.0, setting=setting)
    check(out, nbx.oracle("baddbmm", z, x1, x2, 2.0, 1.0), device)


def test_operands_that_cannot_merge_into_rows_are_copied_and_the_rest_read_in_place(device, check):
    x, w = on(device, (4, 6, 10)).permute(1, 0, 2), on(device, (7, 10))
    residual = on(device, (6, 4, 14))[..., :7]               # rows of stride 14 merge: read in place
    bias = on(device, (7,))                                 # row stride 0
    p = epilogue.plan(x, w, bias, residual, dtype=x.dtype)
    assert p.copies == ("x",) and p.bias[1] == 0 and p.residual[1:] == (14, 1)
    check(nbx.linear(x, w, bias, residual=residual), nbx.oracle("linear", x, w, bias, None, residual), device)
    cost = price("linear", x, w, bias, None, residual)
    assert [b.name for b in cost.buffers] == ["out", "x_contiguous"] and cost.buffers[1].nbytes == x.nbytes
    per_batch = on(device, (4, 1)).broadcast_to((6, 4, 7))   # broadcast over a leading dim: no single row stride
    p = epilogue.plan(x.contiguous(), w, per_batch, None, dtype=x.dtype)
    assert p.copies == ("bias",)
    check(nbx.linear(x, w, per_batch), nbx.oracle("linear", x, w, per_batch), device)


def test_the_declared_cost_counts_the_output_the_partials_and_two_products_for_the_gated_pair(device):
    x, w = on(device, (4, 64), "bfloat16"), on(device, (16, 64), "bfloat16")
    cost = price("gated_linear", x, w, w, "silu", nbx.bfloat16)
    assert cost.flops == 2 * 2 * 4 * 16 * 64 and cost.allocated == 4 * 16 * 2
    assert cost.bytes_moved == x.nbytes + 2 * w.nbytes + 4 * 16 * 2
    empty = price("linear", on(device, (0, 64)), on(device, (16, 64)))
    assert empty.allocated == 0 and empty.launches == 0


def test_a_split_launch_declares_its_partials_as_workspace(device, monkeypatch):
    from nbx.kernels.matmul import linear_tuning
    monkeypatch.setattr(epilogue, "linear_setting", lambda *a, **k: {**SPLIT, "split_k": 4})
    plans.reset()
    try:
        x, w = on(device, (3, 64)), on(device, (20, 64))
        cost = price("linear", x, w)
        assert cost.launches == 2 and cost.buffers[-1].name == "partials"
        assert cost.buffers[-1].nbytes == 4 * 3 * 20 * 4 and cost.buffers[-1].lifetime == "launch"
    finally:
        plans.reset()
    assert linear_tuning.LINEAR is LINEAR


def test_a_float64_result_of_narrower_operands_is_refused_by_name(device):
    with pytest.raises(nbx.errors.NotSupportedError, match="a float64 result needs float64 operands"):
        nbx.linear(on(device, (2, 4)), on(device, (3, 4)), out_dtype="float64")


def _hopper():
    return device_files.for_arch("sm_90")


def test_decode_keys_keep_split_k_candidates_and_large_keys_prune_them():
    decode = {"m": 1, "n": 4096, "k": 4096, "dtype": "bfloat16", "layout": "nt", "form": "plain", "tma": True,
              "precision": "none"}
    kept, pruned = LINEAR.candidates(_hopper(), decode)
    tiles = [s for s in kept if s["kernel"] != "gemv"]   # the gemv kernel's: test_matmul_gemv.py
    assert {s["block_m"] for s in tiles} == {16} and {s["split_k"] for s in tiles} == {1, 2, 4, 8}
    large = {**decode, "m": 4096, "n": 14336}
    kept, pruned = LINEAR.candidates(_hopper(), large)
    assert {s["split_k"] for s in kept} == {1} and any("decode rows (m <= 64) only" in why for _, why in pruned)
    gated = LINEAR.candidates(_hopper(), {**large, "form": "gated"})[0]
    assert gated and len(gated) < len(kept)
    assert LINEAR.default(_hopper()) == dict(LINEAR.default(_hopper()), split_k=1)


def test_a_float8_key_counts_its_stages_at_one_byte_and_keeps_the_widest_three_stage_descriptor_tile():
    rep = {"m": 4096, "n": 4096, "k": 4096, "dtype": "bfloat16", "layout": "nt", "form": "scaled", "tma": True,
           "precision": "none"}
    kept, pruned = LINEAR.candidates(_hopper(), rep)
    wide = {"kernel": "tma", "block_m": 128, "block_n": 256, "block_k": 128, "num_stages": 3}
    assert any(all(s[p] == v for p, v in wide.items()) for s in kept)
    assert {s["block_k"] for s in kept} == {128}   # 64-byte steps of float8 are too short on k = 4096
    bf16 = LINEAR.candidates(_hopper(), {**rep, "form": "plain"})[0]
    assert not any(all(s[p] == v for p, v in wide.items()) for s in bf16)   # twice the bytes: it does not fit


def test_bmm_takes_the_batched_form_whose_key_holds_no_batch_and_whose_workload_fills_the_device(interp):
    from nbx.kernels.matmul.linear_tuning import batch_entries
    x1, x2 = on(interp, (3, 20, 33)), on(interp, (3, 33, 17))
    p = epilogue.plan(x1, x2.mT)
    assert p.batch == 3 and not p.tma and mm.paired_batch(x1, x2)
    assert not mm.paired_batch(x1, on(interp, (1, 33, 17)))   # a broadcast batch takes the tiled kernel
    rep = {"m": 1024, "n": 1024, "k": 128, "dtype": "bfloat16", "layout": "nn", "form": "batched", "tma": False,
           "precision": "none"}
    assert batch_entries(rep) == 32 and batch_entries({**rep, "m": 8192, "n": 8192}) == 1


@pytest.mark.parametrize("layout", ["nn", "tn"])
def test_a_batched_keys_workload_forms_its_own_key_and_its_candidates_pass_the_screen(interp, layout,
                                                                                     monkeypatch):
    from nbx.kernels.matmul import linear_tuning
    monkeypatch.setattr(linear_tuning, "BATCH_OUTPUTS", 3 * 40 * 24)   # three entries: the interpreter is slow
    rep = {"m": 40, "n": 24, "k": 32, "dtype": nbx.float32, "layout": layout, "form": "batched", "tma": False,
           "precision": "ieee"}
    workload = LINEAR.workload(rep, interp)
    seen = []
    real = epilogue.linear_setting
    try:
        epilogue.linear_setting = lambda *args: seen.append(launch_key(*args[1:])) or real(*args)
        plans.reset()
        workload.launch(None)
    finally:
        epilogue.linear_setting = real
        plans.reset()
    assert seen == [rep] and workload.out_shape[0] == 3
    kept, _ = LINEAR.candidates(_hopper(), rep)
    result = screen.run(workload, kept[:1] + kept[-1:], launch.facts(interp))
    assert not result.excluded, [v.reason for v in result.excluded]


def test_linear_keys_add_the_form_to_matmuls_key():
    key = keys.form("linear", LINEAR.key, _hopper(), **launch_key(3, 4096, 4096, "bfloat16", (4096, 1), (1, 4096),
                                                                   "gated", True))
    assert str(key) == "m=3,n=4096,k=4096,dtype=bf16,layout=nt,form=gated,tma=1,precision=none"


def test_linear_keys_class_n_and_k_on_the_coarse_ladder_and_keep_decode_rows_exact():
    """On the H200 n and k one dims step away lost at most 1.7 / 2.0 %, m at decode rows 1 to 2 20.4 %."""
    key = keys.form("linear", LINEAR.key, _hopper(), **launch_key(3, 4000, 1920, "bfloat16", (1920, 1), (1, 1920),
                                                                   "plain", True))
    assert str(key) == "m=3,n=4096,k=2048,dtype=bf16,layout=nt,form=plain,tma=1,precision=none"


@pytest.mark.parametrize("rep", [
    {"m": 3, "n": 40, "k": 96, "dtype": "bfloat16", "layout": "nt", "form": "plain", "tma": True, "precision": "none"},
    {"m": 20, "n": 24, "k": 40, "dtype": "float32", "layout": "nn", "form": "gated", "tma": False, "precision": "ieee"},
    {"m": 80, "n": 24, "k": 64, "dtype": "float16", "layout": "nn", "form": "gated", "tma": True, "precision": "none"},
    {"m": 9, "n": 16, "k": 64, "dtype": "float32", "layout": "nt", "form": "plain", "tma": True, "precision": "tf32"},
    {"m": 70, "n": 32, "k": 64, "dtype": "int32", "layout": "nt", "form": "plain", "tma": True, "precision": "none"},
    {"m": 4, "n": 130, "k": 256, "dtype": "bfloat16", "layout": "nt", "form": "blockscaled", "tma": False,
     "precision": "none"}])
def test_the_workload_forms_its_own_key_and_its_candidates_pass_the_screen(interp, rep):
    from nbx.kernels.matmul.tuning import representative_operands
    rep = {**rep, "dtype": nbx.as_dtype(rep["dtype"])}
    a, b = representative_operands(rep, interp)
    assert launch_key(rep["m"], rep["n"], rep["k"], rep["dtype"], a.strides, b.strides, rep["form"], rep["tma"],
                      rep["precision"]) == rep
    kept, _ = LINEAR.candidates(_hopper(), rep)
    chosen = [s for s in kept if s["split_k"] > 1][:1] + kept[:1] + [s for s in kept if s["kernel"] == "tma"][:1]
    assert any(s["kernel"] == "tma" for s in kept) == (rep["tma"] and rep["m"] >= 64)
    result = screen.run(LINEAR.workload(rep, interp), chosen, launch.facts(interp))
    assert not result.excluded, [v.reason for v in result.excluded]
    assert autotune.lookup("linear") is LINEAR


@pytest.mark.parametrize("tma", [True, False])
def test_the_workloads_call_has_the_descriptor_eligibility_its_key_names(interp, tma):
    rep = {"m": 8, "n": 32, "k": 64, "dtype": nbx.bfloat16, "layout": "nt", "form": "plain", "tma": tma,
           "precision": "none"}
    workload = LINEAR.workload(rep, interp)
    seen = []
    real = epilogue.linear_setting
    try:
        epilogue.linear_setting = lambda *args: seen.append(args[-2]) or real(*args)
        plans.reset()
        workload.launch(None)
    finally:
        epilogue.linear_setting = real
        plans.reset()
    assert seen == [tma]


def test_tf32_asked_per_call_multiplies_tf32_rounded_operands_and_tf32x3_keeps_float32_accuracy(device, check):
    own = np.random.default_rng(32)
    x, w = (nbx.asarray(own.standard_normal(s).astype(np.float32), device=device) for s in ((9, 64), (16, 64)))
    tf32 = nbx.linear(x, w, input_precision="tf32")
    check(tf32, nbx.oracle("linear", x, w, input_precision="tf32"), device)
    from nbx.core.reference import deviation
    assert deviation(tf32.numpy(), nbx.oracle("linear", x, w)) > 3 * launch.screen_tolerance(nbx.float32, device)
    check(nbx.linear(x, w, input_precision="tf32x3"), nbx.oracle("linear", x, w), device)
    check(nbx.linear(x, w), nbx.oracle("linear", x, w), device)
    with pytest.raises(nbx.errors.ArgumentError, match="bfloat16 operands take none"):
        nbx.linear(x.to(dtype="bfloat16"), w.to(dtype="bfloat16"), input_precision="tf32")


# ---- realistic shapes on the GPU ------------------------------------------------------------

gpu_only = pytest.mark.parametrize("device", [pytest.param("cuda", marks=pytest.mark.gpu)], indirect=True)
DECODE = {"kernel": "tiles", "block_m": 16, "block_n": 64, "block_k": 128, "group_m": 8, "num_warps": 4,
          "num_stages": 4, "programs": 132, "warp_specialize": 0}


@gpu_only
@pytest.mark.parametrize("split_k", [1, 4])
def test_decode_rows_of_a_4096_wide_layer_with_split_k_on_the_gpu(device, check, split_k):
    x, w, b = on(device, (4, 4096), "bfloat16"), on(device, (4096, 4096), "bfloat16", 0.02), on(device, (4096,))
    out = epilogue.launch_linear(x, w, b, "silu", setting={**DECODE, "split_k": split_k})
    check(out, nbx.oracle("linear", x, w, b, "silu"), device)


@gpu_only
@pytest.mark.parametrize("split_k", [1, 4])
def test_a_normed_decode_qkv_and_swiglu_pair_at_llama_1b_sizes_on_the_gpu(device, check, split_k):
    """linear's norm= (test_matmul_norm.py) at the 1B decode step's sizes, split and not, and served."""
    x, nw = on(device, (1, 2048), "bfloat16", 3.0), on(device, (2048,), "bfloat16", 0.1) + 1.0
    wqkv, norm = on(device, (3072, 2048), "bfloat16", 0.02), (nw, 1e-5)
    setting = {**DECODE, "split_k": split_k}
    check(epilogue.launch_linear(x, wqkv, setting=setting, norm=norm), nbx.oracle("linear", x, wqkv, norm=norm), device)
    wg, wu = on(device, (8192, 2048), "bfloat16", 0.02), on(device, (8192, 2048), "bfloat16", 0.02)
    check(epilogue.launch_linear(x, wg, activation="silu", up=wu, setting=setting, norm=norm),
          nbx.oracle("gated_linear", x, wg, wu, "silu", norm=norm), device)
    check(nbx.linear(x, wqkv, norm=norm), nbx.oracle("linear", x, wqkv, norm=norm), device)


@gpu_only
def test_a_swiglu_up_projection_and_a_residual_down_projection_at_llama_sizes_on_the_gpu(device, check):
    x = on(device, (300, 1024), "bfloat16")
    wg, wu = on(device, (2816, 1024), "bfloat16", 0.03), on(device, (2816, 1024), "bfloat16", 0.03)
    h = nbx.gated_linear(x, wg, wu)
    check(h, nbx.oracle("gated_linear", x, wg, wu, "silu"), device)
    wd = on(device, (1024, 2816), "bfloat16", 0.02)
    check(nbx.linear(h, wd, residual=x), nbx.oracle("linear", h, wd, None, None, x), device)


def test_int8_products_give_exact_int32_sums_and_refuse_an_epilogue(device, check):
    own = np.random.default_rng(88)
    x = nbx.asarray(own.integers(-128, 128, (9, 70)).astype(np.int8), device=device)
    w = nbx.asarray(own.integers(-128, 128, (24, 70)).astype(np.int8), device=device)
    out = nbx.linear(x, w)
    assert out.dtype is nbx.int32
    np.testing.assert_array_equal(out.numpy(), x.numpy().astype(np.int64) @ w.numpy().astype(np.int64).T)
    setting = {**SPLIT, "split_k": 3}   # block_k 16: under the 32 an 8-bit dot takes on NVIDIA (Triton 3.6)
    least = launch.facts(device).value("matrix_unit.min_dot_k.one_byte")
    assert dict(epilogue.plan(x, w, dtype=nbx.int32, setting=setting).meta)["BLOCK_K"] == max(16, least)
    split = epilogue.launch_linear(x, w, dtype=nbx.int32, setting=setting)
    np.testing.assert_array_equal(split.numpy(), out.numpy())
    with pytest.raises(nbx.errors.ArgumentError, match="int32 product alone"):
        nbx.linear(x, w, bias=nbx.asarray(np.zeros(24, np.int32), device=device))
    with pytest.raises(nbx.errors.DTypeError, match="int8 by int8 only"):
        nbx.linear(x, w.to(dtype="float32"))


def test_a_served_k_tile_under_the_devices_smallest_dot_k_is_raised_to_it(device, monkeypatch):
    """With the H200's facts (matrix_unit.min_dot_k: 32 for 8-bit operands, 16 for 16-bit ones) a
    setting's block_k 16 is built as 32 for int8 and float8 and kept for bfloat16; 8 becomes 16."""
    hopper = device_files.for_arch("sm_90")
    monkeypatch.setattr(launch, "facts", lambda d: hopper)
    plans.reset()
    try:
        i8 = nbx.asarray(np.ones((4, 64), np.int8), device=device)
        bf = on(device, (4, 64), "bfloat16")
        f8 = bf.to(dtype="float8_e4m3fn")
        one = nbx.asarray(np.ones(1, np.float32), device=device)
        block_k = {name: dict(epilogue.plan(*args, setting={**SPLIT, "split_k": 1, "block_k": bk}, **kw).meta)["BLOCK_K"]
                   for name, bk, args, kw in (("int8", 16, (i8, i8), {"dtype": nbx.int32}),
                                              ("float8", 16, (f8, f8), {"dtype": nbx.bfloat16, "scales": (one, one)}),
                                              ("bfloat16", 16, (bf, bf), {"dtype": bf.dtype}),
                                              ("bfloat16 of 8", 8, (bf, bf), {"dtype": bf.dtype}))}
        assert block_k == {"int8": 32, "float8": 32, "bfloat16": 16, "bfloat16 of 8": 16}
        assert dict(mm.plan(bf, bf.mT, bf.dtype, setting={**MATMUL_TILE, "block_k": 8}).meta)["BLOCK_K"] == 16
    finally:
        plans.reset()


def test_no_candidate_and_no_default_tile_of_a_product_is_under_a_devices_smallest_dot_k():
    """The certifier never measures a tile that would be raised at launch, and the device files'
    default tiles (served to every uncertified key) need no raising on any device."""
    for vendor in device_files.vendor_files():
        facts = device_files.for_arch(vendor.targets[0])
        least = facts.value("matrix_unit.min_dot_k")
        for family in ("matmul", "linear"):
            assert facts.value(f"tiles.{family}")["block_k"] >= max(least.values()), (vendor.name, family)
    hopper = device_files.for_arch("sm_90")
    key = {"m": 16, "n": 4096, "k": 4096, "layout": "nt", "form": "plain", "tma": False, "precision": "none"}
    for dtype, least in (("int32", 32), ("bfloat16", 16)):
        kept, _ = LINEAR.candidates(hopper, {**key, "dtype": dtype})
        assert kept and min(s["block_k"] for s in kept) >= least
    assert dot_k_fits({"block_k": 16}, 1, hopper) != True and dot_k_fits({"block_k": 32}, 1, hopper) is True  # noqa: E712
    assert dot_k_fits({"block_k": 32}, 2, hopper, per_dot=2) is True
    assert dot_k_fits({"block_k": 16}, 2, hopper, per_dot=2) != True  # noqa: E712  (int4: two dots of 8)


@pytest.mark.parametrize("subscripts,shapes", [("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 6, 8)]),
                                               ("...d,ed->...e", [(2, 3, 16), (12, 16)]), ("bij->j", [(2, 3, 4)])])
def test_einsum_on_the_kernel_devices_contracts_through_matmul_as_numpy_does(device, check, subscripts, shapes):
    operands = [on(device, s) for s in shapes]
    check(nbx.einsum(subscripts, *operands), nbx.oracle("einsum", subscripts, *operands), device)
