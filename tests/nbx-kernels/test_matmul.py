"""matmul on the kernel devices: every float dtype, odd sizes, the Array API's 1-D and batch rules,
strided operands, empty products, the refusals, the declared cost and the certified settings.

Every result is compared with the float64 oracle at the device file's tolerance for its dtype.
Shapes are small on interp; realistic ones run on the GPU (marked gpu)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import nbx.core as nbx
from nbx import autotune
from nbx.autotune import keys, screen
from nbx.core import device_files
from nbx.kernels import launch
from nbx.kernels.cost import price
from nbx.kernels.matmul import plan
from nbx.kernels.matmul.tuning import (MATMUL, epilogue_bytes, launch_key, representative_operands, stage_bytes,
                                      stages_that_fit)

rng = np.random.default_rng(7)
FLOATS = ("float16", "bfloat16", "float32", "float64")


def on(device, shape, dtype="float32"):
    return nbx.asarray(rng.standard_normal(shape).astype(nbx.as_dtype(dtype).host), device=device)


def product(device, check, x1, x2):
    out = nbx.matmul(x1, x2)
    check(out, nbx.oracle("matmul", x1, x2), device)
    return out


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 5, 13), (33, 65, 17)])
def test_products_of_odd_sizes_match_the_oracle_in_every_float_dtype(device, check, dtype, m, k, n):
    out = product(device, check, on(device, (m, k), dtype), on(device, (k, n), dtype))
    assert out.dtype.name == dtype and out.shape == (m, n)


def test_mixed_float_operands_multiply_in_the_promoted_dtype(device, check):
    """Both calls are float32 products of one layout, in this order on purpose: on a GPU the second
    must not repeat the first's compiled kernel, which reads its pointers as float16 and float32."""
    out = product(device, check, on(device, (9, 20), "float16"), on(device, (20, 6), "float32"))
    assert out.dtype.name == "float32"
    out = product(device, check, on(device, (9, 20), "bfloat16"), on(device, (20, 6), "float16"))
    assert out.dtype.name == "float32"


def test_bfloat16_products_round_their_float32_sums_as_numpy_does(device):
    """Exact sums (small integers) leave the store's rounding alone to decide the bits."""
    ints = rng.integers(-20, 21, (8, 16)).astype(np.float32)
    x1 = nbx.asarray(ints, device=device).astype("bfloat16")
    x2 = nbx.asarray(rng.integers(-20, 21, (16, 12)).astype(np.float32), device=device).astype("bfloat16")
    expected = nbx.matmul(x1.cpu(), x2.cpu()).numpy()
    assert nbx.matmul(x1, x2).numpy().tobytes() == expected.tobytes()


@pytest.mark.parametrize("s1,s2", [((5,), (5,)), ((5,), (5, 3)), ((4, 5), (5,)), ((2, 3, 5), (5,)),
                                   ((5,), (2, 5, 3))])
def test_one_dimensional_operands_are_a_row_or_a_column_dropped_from_the_result(device, check, s1, s2):
    out = product(device, check, on(device, s1), on(device, s2))
    assert out.shape == np.matmul(np.zeros(s1), np.zeros(s2)).shape


@pytest.mark.parametrize("s1,s2", [((3, 4, 5), (3, 5, 6)), ((3, 4, 5), (5, 6)), ((4, 5), (2, 3, 5, 6)),
                                   ((2, 1, 4, 5), (1, 3, 5, 6))])
def test_batch_dims_broadcast_without_copies(device, check, s1, s2):
    x1, x2 = on(device, s1), on(device, s2)
    assert price("matmul", x1, x2).allocated == np.matmul(np.zeros(s1), np.zeros(s2)).size * 4
    product(device, check, x1, x2)


def test_batch_dims_that_do_not_merge_into_three_launch_once_per_leading_index(device, check):
    x1, x2 = on(device, (2, 1, 2, 1, 3, 4)), on(device, (1, 2, 1, 2, 4, 3))
    assert plan(x1, x2, x1.dtype).launches == 2
    product(device, check, x1, x2)


def test_transposed_and_strided_operands_are_read_in_place(device, check):
    product(device, check, on(device, (5, 4)).T, on(device, (6, 5)).T)
    product(device, check, on(device, (3, 40, 33)).mT, on(device, (3, 17, 40)).mT)
    product(device, check, on(device, (3, 4, 5)).permute(1, 0, 2), on(device, (5, 6)))
    product(device, check, on(device, (9, 70))[::2, ::3], on(device, (25, 8))[1:, ::2])


def test_offsets_past_int32_are_computed_in_int64_to_the_same_product(device, check, monkeypatch):
    from nbx.kernels import matmul, plans
    x1, x2 = on(device, (2, 33, 20)).mT, on(device, (2, 33, 9))
    monkeypatch.setattr(matmul, "INT32_MAX", 0)   # every launch counts as wide
    plans.reset()
    try:
        assert dict(plan(x1, x2, x1.dtype).meta)["WIDE"]
        product(device, check, x1, x2)
    finally:
        plans.reset()


def test_empty_products_give_empty_results_and_an_empty_sum_gives_zeros(device):
    assert nbx.matmul(on(device, (3, 0, 5)), on(device, (5, 4))).shape == (3, 0, 4)
    assert nbx.matmul(on(device, (0, 4, 5)), on(device, (5, 6))).shape == (0, 4, 6)
    for dtype in FLOATS:
        out = nbx.matmul(on(device, (3, 4, 0), dtype), on(device, (0, 6), dtype))
        assert out.dtype.name == dtype
        np.testing.assert_array_equal(out.numpy().astype(np.float64), np.zeros((3, 4, 6)))
    from nbx.kernels.matmul import launch_matmul
    stale = nbx.asarray(np.full((4, 6), np.nan, np.float32), device=device)
    launch_matmul(on(device, (4, 0)), on(device, (0, 6)), out=stale)
    np.testing.assert_array_equal(stale.numpy(), np.zeros((4, 6)))


@pytest.mark.parametrize("d1,d2,named", [("int32", "int32", "int32 (x1)"), ("uint8", "uint8", "uint8 (x1)"),
                                         ("float8_e4m3fn", "float8_e4m3fn", "float8_e4m3fn (x1)"),
                                         ("float8_e5m2", "float8_e5m2", "float8_e5m2 (x1)"),
                                         ("float32", "complex64", "complex64 (x2)")])
def test_non_float_and_float8_products_are_refused_by_name(device, d1, d2, named):
    x1, x2 = on(device, (3, 4), d1), on(device, (4, 2), d2)
    message = re.escape(f"does not take {named}; it computes products of float16, bfloat16, float32 and float64")
    with pytest.raises(nbx.errors.NotSupportedError, match=message):
        nbx.matmul(x1, x2)
    with pytest.raises(nbx.errors.NotSupportedError, match="does not take"):
        price("matmul", x1, x2)


def test_bool_products_are_refused_by_the_front_end(device):
    x = nbx.asarray(np.ones((2, 2), bool), device=device)
    with pytest.raises(nbx.errors.DTypeError, match="matmul does not accept bool"):
        nbx.matmul(x, x)


def test_the_declared_cost_is_the_output_the_bytes_read_and_written_and_two_m_n_k_flops(device):
    x1, x2 = on(device, (4, 1, 6, 10), "bfloat16"), on(device, (3, 10, 7), "bfloat16")
    cost = price("matmul", x1, x2)
    out_bytes = 4 * 3 * 6 * 7 * 2
    assert cost.allocated == cost.outputs == out_bytes and cost.launches == 1
    assert cost.bytes_moved == x1.nbytes + x2.nbytes + out_bytes
    assert cost.flops == 2 * 6 * 7 * 10 * 12
    empty = price("matmul", on(device, (0, 3)), on(device, (3, 5)))
    assert empty.allocated == 0 and empty.flops == 0 and empty.launches == 0
    no_k = price("matmul", on(device, (2, 0)), on(device, (0, 5)))
    assert no_k.allocated == no_k.bytes_moved == 2 * 5 * 4 and no_k.flops == 0


# ---- the certified settings -----------------------------------------------------------------

def _hopper():
    return device_files.for_arch("sm_90")


def test_matmul_declares_a_tunable_whose_parameters_both_tiles_hold(interp):
    assert autotune.lookup("matmul") is MATMUL
    for facts in (_hopper(), launch.facts(interp)):
        assert set(MATMUL.default(facts)) == set(MATMUL.params)
    kept, pruned = MATMUL.candidates(_hopper(), None)
    assert MATMUL.default(_hopper()) in kept
    assert len(kept) == 20 and all("too little work" in why for _, why in pruned)


class _Facts:
    """A device file's facts with some values replaced."""

    def __init__(self, facts, **replaced):
        self.facts, self.replaced = facts, {k.replace("__", "."): v for k, v in replaced.items()}

    def value(self, key):
        return self.replaced[key] if key in self.replaced else self.facts.value(key)


def test_candidates_are_pruned_by_shared_memory_and_by_sizes_a_smaller_tile_covers():
    small = _Facts(_hopper(), memory__max_shared_memory_per_block=64 * 1024)
    kept, pruned = MATMUL.candidates(small, None)
    assert kept and all(s["num_stages"] * s["block_k"] * (s["block_m"] + s["block_n"]) * 2 <= 64 * 1024 for s in kept)
    assert any("above memory.max_shared_memory_per_block 65536" in why for _, why in pruned)
    kept, pruned = MATMUL.candidates(_hopper(), {"m": 8, "n": 4096, "k": 32, "dtype": "bfloat16"})
    assert {(s["block_m"], s["block_k"]) for s in kept} == {(64, 32)}
    assert any("covers m=8" in why for _, why in pruned)


def test_a_float32_or_float64_key_prunes_the_stages_its_operands_cannot_hold():
    hopper, big = _hopper(), {"m": 4096, "n": 4096, "k": 4096}
    limit = hopper.value("memory.max_shared_memory_per_block")
    for dtype, itemsize in (("bfloat16", 2), ("float32", 4), ("float64", 8)):
        kept, pruned = MATMUL.candidates(hopper, {**big, "dtype": dtype})
        assert kept and all(s["num_stages"] * stage_bytes(s, itemsize, itemsize) <= limit for s in kept)
        assert all(stages_that_fit(s, itemsize, itemsize, hopper) == s["num_stages"] for s in kept)
        cut = [why for _, why in pruned if f"of {dtype} operands" in why]
        assert (not cut) if itemsize == 2 else cut, (dtype, cut)


def test_wider_operands_are_served_fewer_stages_where_theirs_would_not_fit():
    setting = {"block_m": 128, "block_n": 128, "block_k": 64, "num_stages": 4}
    hopper = _hopper()
    assert stages_that_fit(setting, 2, 2, hopper) == 4
    assert stages_that_fit(setting, 4, 4, hopper) == 3    # 4 x 64 KiB > 227 KiB
    assert stages_that_fit(setting, 8, 8, hopper) == 1
    no_memory = _Facts(hopper, memory__max_shared_memory_per_block=0)
    assert stages_that_fit({**setting, "num_stages": 1}, 8, 8, no_memory) == 1   # one stage is never cut


def test_a_residual_epilogue_is_served_the_stages_its_staged_tiles_leave_room_for():
    """The H200 refused 3 stages of a 128 x 256 x 64 tma tile with a residual (245,784 bytes asked,
    232,448 there): the certified setting is served 2 with one, and keeps 3 without."""
    tma = {"kernel": "tma", "block_m": 128, "block_n": 256, "block_k": 64, "num_stages": 3}
    hopper = _hopper()
    assert stages_that_fit(tma, 2, 2, hopper, epilogue_bytes(tma, 2)) == 3
    assert stages_that_fit(tma, 2, 2, hopper, epilogue_bytes(tma, 2, 2)) == 2
    tiles = {**tma, "kernel": "tiles", "block_m": 16}
    assert epilogue_bytes(tiles, 2) == 0 and epilogue_bytes(tiles, 2, 2) == 16 * 256 * 2


@pytest.mark.parametrize("m,n,k,dtype,a_strides,b_strides,text", [
    (4096, 11008, 4096, "bfloat16", (4096, 1), (11008, 1), "m=4096,n=11264,k=4096,dtype=bf16,layout=nn"),
    (32, 4096, 4096, "float16", (4096, 1), (1, 4096), "m=32,n=4096,k=4096,dtype=f16,layout=nt"),
    (100, 1, 70, "float32", (1, 100), (5, 3), "m=128,n=2,k=96,dtype=f32,layout=tn"),   # steps 32 to 256, 2 to 64
])
def test_matmul_keys_class_m_n_k_on_the_h200_coarse_dims_ladder_with_the_operands_layout(m, n, k, dtype, a_strides,
                                                                                         b_strides, text):
    key = keys.form("matmul", MATMUL.key, _hopper(), **launch_key(m, n, k, dtype, a_strides, b_strides))
    assert str(key) == text


REPS = [{"m": 40, "n": 24, "k": 72, "dtype": "float32", "layout": "nn"},
        {"m": 9, "n": 70, "k": 33, "dtype": "bfloat16", "layout": "tt"},
        {"m": 65, "n": 5, "k": 130, "dtype": "float16", "layout": "nt"},
        {"m": 3, "n": 8, "k": 20, "dtype": "float64", "layout": "tn"}]


@pytest.mark.parametrize("rep", REPS, ids=[f"{r['dtype']}-{r['layout']}" for r in REPS])
def test_the_workload_forms_its_own_key_and_every_candidate_passes_its_screen(interp, rep):
    rep = {**rep, "dtype": nbx.as_dtype(rep["dtype"])}
    a, b = representative_operands(rep, interp)
    assert launch_key(rep["m"], rep["n"], rep["k"], rep["dtype"], a.strides, b.strides) == rep
    kept, _ = MATMUL.candidates(_hopper(), rep)
    chosen = kept[:2] + kept[-1:]
    result = screen.run(MATMUL.workload(rep, interp), chosen, launch.facts(interp))
    assert not result.excluded, [v.reason for v in result.excluded]
    assert len(result.passed) == len(chosen)


def test_a_setting_given_to_the_wrapper_decides_its_launch(device, check):
    x1, x2 = on(device, (70, 40)), on(device, (40, 50))
    setting = {"block_m": 64, "block_n": 32, "block_k": 16, "group_m": 2, "num_warps": 4, "num_stages": 1}
    p = plan(x1, x2, x1.dtype, setting)
    meta = dict(p.meta)
    assert (meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"], meta["GROUP_M"]) == (64, 32, 16, 2)
    assert p.grid == (2 * 2,) and meta["EVEN_K"] is False
    from nbx.kernels.matmul import launch_matmul
    out = launch.output((70, 50), x1.dtype, device)
    launch_matmul(x1, x2, out=out, setting=setting)
    check(out, nbx.oracle("matmul", x1, x2), device)


# ---- realistic shapes on the GPU ------------------------------------------------------------

gpu_only = pytest.mark.parametrize("device", [pytest.param("cuda", marks=pytest.mark.gpu)], indirect=True)


@gpu_only
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_a_512_by_768_by_1024_product_on_the_gpu(device, check, dtype):
    product(device, check, on(device, (512, 768), dtype), on(device, (768, 1024), dtype))
    product(device, check, on(device, (512, 768), dtype), on(device, (1024, 768), dtype).T)


@gpu_only
def test_a_batched_8_by_256_by_128_by_64_product_on_the_gpu(device, check):
    for dtype in ("bfloat16", "float16", "float32", "float64"):
        product(device, check, on(device, (8, 256, 64), dtype), on(device, (8, 64, 128), dtype))
    product(device, check, on(device, (8, 256, 64), "bfloat16"), on(device, (64, 128), "bfloat16"))


@gpu_only
def test_decode_rows_and_a_linear_layers_transposed_weight_on_the_gpu(device, check):
    weight = on(device, (4096, 1024), "bfloat16")
    for rows in (1, 8, 33):
        product(device, check, on(device, (rows, 1024), "bfloat16"), weight.T)
    product(device, check, on(device, (1024,), "float16"), on(device, (1024, 4096), "float16"))
