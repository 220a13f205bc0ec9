"""The flash-attention kernel (prefill, varlen, split-K decode) against the float64 oracle.

On interp the tiles are 16 x 16 and the decode path splits over 4 programs, so tiny shapes already
take the checked, the unchecked and the split ranges; the gpu-marked tests at the end run real
sizes on the H200."""
import math

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import NotSupportedError
from nbx.core.ops.attention import AttentionOptions
from nbx.kernels.attention import dense_layout, served
from nbx.kernels.cost import price

rng = np.random.default_rng(19)


def on(device, a, dtype="float32"):
    return nbx.asarray(np.asarray(a, dtype=np.float32), dtype=dtype).to(device)


def qkv(device, b, hq, hk, q_len, k_len, e=16, ev=None, dtype="float32", scale=1.0):
    ev = e if ev is None else ev
    return (on(device, rng.standard_normal((b, hq, q_len, e)) * scale, dtype),
            on(device, rng.standard_normal((b, hk, k_len, e)) * scale, dtype),
            on(device, rng.standard_normal((b, hk, k_len, ev)), dtype))


def oracle(q, k, v, mask=None, slopes=None, **kw):
    opts = dict(is_causal=False, causal_alignment="top_left", window=None, softcap=None)
    opts.update(kw)
    options = AttentionOptions(1 / math.sqrt(q.shape[-1]) if kw.get("scale") is None else kw["scale"],
                               opts["is_causal"], opts["causal_alignment"],
                               *(opts["window"] or (None, None)), opts["softcap"] or 0.0)
    return nbx.oracle("scaled_dot_product_attention", q, k, v, mask, slopes, options, True)


def sdpa(q, k, v, **kw):
    kw.setdefault("enable_gqa", q.shape[-3] != k.shape[-3])
    return nbx.scaled_dot_product_attention(q, k, v, return_lse=True, **kw)


@pytest.mark.parametrize("dtype,causal", [("float32", False), ("float16", True), ("bfloat16", True)])
def test_prefill_with_gqa_matches_the_oracle_for_each_dtype(device, dtype, causal, check):
    q, k, v = qkv(device, 2, 4, 2, 29, 29, dtype=dtype)
    out, lse = sdpa(q, k, v, is_causal=causal)
    expected, expected_lse = oracle(q, k, v, is_causal=causal)
    check(out, expected, device)
    check(lse, expected_lse, device)


@pytest.mark.parametrize("q_len,k_len", [(7, 33), (33, 7), (127, 1)])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_causal_q_shorter_and_longer_than_k_in_both_alignments(device, q_len, k_len, alignment, check):
    q, k, v = qkv(device, 1, 2, 2, q_len, k_len)
    out, lse = sdpa(q, k, v, is_causal=True, causal_alignment=alignment)
    expected, expected_lse = oracle(q, k, v, is_causal=True, causal_alignment=alignment)
    check(out, expected, device)
    check(lse, expected_lse, device)
    assert not np.isnan(out.numpy()).any()


def test_bool_and_additive_masks_broadcast_and_fully_masked_rows_give_zeros(device, check):
    q, k, v = qkv(device, 2, 2, 2, 9, 21)
    keep = rng.random((2, 1, 9, 21)) > 0.4
    keep[0, 0, 3] = False  # a row with nothing to attend to
    bias = rng.standard_normal((9, 21))
    for mask in (nbx.asarray(keep).to(device), on(device, bias)):
        out, lse = sdpa(q, k, v, attn_mask=mask)
        expected, expected_lse = oracle(q, k, v, mask.broadcast_to((2, 2, 9, 21)))
        check(out, expected, device)
        check(lse, expected_lse, device)
    out, lse = sdpa(q, k, v, attn_mask=nbx.asarray(keep).to(device))
    assert np.all(out.numpy()[0, :, 3] == 0) and np.isneginf(lse.numpy()[0, :, 3]).all()


@pytest.mark.parametrize("options", [
    dict(window=(5, 3)), dict(window=(4, None), is_causal=True), dict(softcap=2.5),
    dict(is_causal=True, causal_alignment="bottom_right", softcap=4.0, window=(6, 0))])
def test_window_softcap_and_their_combinations(device, options, check):
    q, k, v = qkv(device, 1, 4, 1, 19, 45, scale=2.0)
    out, lse = sdpa(q, k, v, **options)
    expected, expected_lse = oracle(q, k, v, **options)
    check(out, expected, device)
    check(lse, expected_lse, device)


def test_alibi_slopes_per_head_and_per_batch_and_head(device, check):
    q, k, v = qkv(device, 2, 4, 2, 11, 23)
    for slopes in (on(device, [0.5, 0.25, 0.125, 0.0625]), on(device, rng.random((2, 4)))):
        out, _ = sdpa(q, k, v, alibi_slopes=slopes, is_causal=True, causal_alignment="bottom_right")
        expected, _ = oracle(q, k, v, slopes=slopes, is_causal=True, causal_alignment="bottom_right")
        check(out, expected, device)


@pytest.mark.parametrize("e,ev", [(64, 64), (80, 80), (96, 64)])
def test_head_dims_that_pad_the_tile_and_differing_v_head_dims(device, e, ev, check):
    q, k, v = qkv(device, 1, 2, 2, 5, 18, e=e, ev=ev, dtype="bfloat16")
    out, _ = sdpa(q, k, v, is_causal=True)
    assert out.shape == (1, 2, 5, ev)
    check(out, oracle(q, k, v, is_causal=True)[0], device)


def test_strided_inputs_and_three_dim_operands(device, check):
    q, k, v = qkv(device, 1, 6, 6, 12, 12)
    qt = q[0].permute(1, 0, 2).contiguous().permute(1, 0, 2)  # heads strided past tokens
    out, _ = sdpa(qt, k[0], v[0, :, :, :])
    check(out, oracle(qt, k[0], v[0])[0], device)


def test_varlen_attention_with_empty_sequences_and_longer_queries_than_keys(device, check):
    lens_q, lens_k = [3, 0, 17, 5, 1], [20, 4, 6, 0, 33]
    cu_q, cu_k = np.concatenate([[0], np.cumsum(lens_q)]), np.concatenate([[0], np.cumsum(lens_k)])
    q = on(device, rng.standard_normal((sum(lens_q), 4, 16)), "bfloat16")
    k = on(device, rng.standard_normal((sum(lens_k), 2, 16)), "bfloat16")
    v = on(device, rng.standard_normal((sum(lens_k), 2, 16)), "bfloat16")
    cq, ck = nbx.asarray(cu_q, dtype=nbx.int32).to(device), nbx.asarray(cu_k, dtype=nbx.int32).to(device)
    for causal in (False, True):
        out, lse = nbx.varlen_attention(q, k, v, cq, ck, is_causal=causal, causal_alignment="bottom_right",
                                        return_lse=True)
        options = AttentionOptions(0.25, causal, "bottom_right")
        expected, expected_lse = nbx.oracle("varlen_attention", q, k, v, cq, ck, None, options, True)
        check(out, expected, device)
        check(lse, expected_lse, device)


def check_decode_twice(q, k, v, device, check):
    """Causal bottom-right decode: two runs give the same bits, both agree with the oracle."""
    first, lse = sdpa(q, k, v, is_causal=True, causal_alignment="bottom_right")
    again, _ = sdpa(q, k, v, is_causal=True, causal_alignment="bottom_right")
    np.testing.assert_array_equal(first.numpy().view(np.uint16), again.numpy().view(np.uint16))
    expected, expected_lse = oracle(q, k, v, is_causal=True, causal_alignment="bottom_right")
    check(first, expected, device)
    check(lse, expected_lse, device)


@pytest.mark.parametrize("q_len", [1, 3])
def test_decode_splits_the_keys_and_gives_the_same_bits_every_run(device, q_len, check):
    q, k, v = qkv(device, 1, 8, 2, q_len, 97, dtype="bfloat16")
    options = AttentionOptions(0.25, True, "bottom_right")
    assert served(dense_layout(q, k, v, None, None, False)[0], options)[0] == "decode"
    check_decode_twice(q, k, v, device, check)
    if device.type == "interp":  # interp's tile: 7 blocks of keys over 4 programs, 2 a KV group: a split
        assert price("scaled_dot_product_attention", q, k, v).launches == 2


def test_decode_with_window_and_alibi_over_a_context_of_odd_length(device, check):
    q, k, v = qkv(device, 2, 4, 4, 1, 71)
    slopes = on(device, [0.3, 0.2, 0.1, 0.05])
    out, lse = sdpa(q, k, v, window=(40, 0), alibi_slopes=slopes, causal_alignment="bottom_right")
    expected, expected_lse = oracle(q, k, v, slopes=slopes, window=(40, 0), causal_alignment="bottom_right")
    check(out, expected, device)
    check(lse, expected_lse, device)
    if device.type == "interp":  # 2 x 4 groups fill interp's 4 decode programs: no split, no merge
        assert price("scaled_dot_product_attention", q, k, v).launches == 1


def _tile(loads, block_m=16, block_n=16, warps=4, stages=1):
    return {"block_m": block_m, "block_n": block_n, "num_warps": warps, "num_stages": stages, "loads": loads,
            "max_registers": 0}


@pytest.mark.parametrize("e,ev", [(80, 48)])   # both head dims padded: the descriptor's zeros past them
def test_descriptor_and_pointer_loads_of_k_and_v_both_match_the_oracle(device, e, ev, check):
    if device.type == "cpu":
        pytest.skip("the cpu runs the reference, no kernel")
    from nbx.kernels.attention import launch_sdpa
    q, k, v = qkv(device, 1, 2, 1, 9, 35, e=e, ev=ev, dtype="bfloat16")
    lay, _ = dense_layout(q, k, v, None, None, False)
    assert lay.tma   # contiguous, 16-byte rows: descriptor-ready
    options = AttentionOptions(1 / math.sqrt(e), True, "bottom_right")
    expected = nbx.oracle("scaled_dot_product_attention", q, k, v, None, None, options)
    for loads in ("tma", "pointers"):
        out, _ = launch_sdpa(q, k, v, None, None, options, setting=_tile(loads))
        check(out, expected, device)


def test_packed_keys_through_descriptors_stop_at_each_sequences_end(device, check):
    """A packed sequence's descriptor spans its own rows: the next sequence's keys read as zeros."""
    if device.type == "cpu":
        pytest.skip("the cpu runs the reference, no kernel")
    lens = [19, 0, 5, 12]
    cu = nbx.asarray(np.concatenate([[0], np.cumsum(lens)]), dtype=nbx.int32).to(device)
    q, k, v = (on(device, rng.standard_normal((sum(lens), h, 16)), "bfloat16") for h in (2, 1, 1))
    out = nbx.varlen_attention(q, k, v, cu, cu)
    check(out, nbx.oracle("varlen_attention", q, k, v, cu, cu, None, AttentionOptions(0.25)), device)


def test_rows_not_16_byte_aligned_are_read_through_pointers_whatever_the_setting(device, check):
    if device.type == "cpu":
        pytest.skip("the cpu runs the reference, no kernel")
    from nbx.kernels.attention import launch_plan, launch_sdpa
    q, k, v = qkv(device, 1, 2, 2, 20, 37, e=20, dtype="bfloat16")   # 40-byte rows
    lay, _ = dense_layout(q, k, v, None, None, False)
    options = AttentionOptions(1 / math.sqrt(20), True)
    assert not lay.tma and dict(launch_plan(lay, options, _tile("tma")).launches[0].meta)["TMA"] is False
    out, _ = launch_sdpa(q, k, v, None, None, options, setting=_tile("tma"))
    check(out, nbx.oracle("scaled_dot_product_attention", q, k, v, None, None, options), device)


def test_a_negative_scale_is_applied_before_the_row_max_not_folded_into_the_softmax(device, check):
    """The folded scale (the row max of raw q.k times scale) holds only for a positive scale."""
    q, k, v = qkv(device, 1, 2, 2, 9, 20, dtype="bfloat16")
    out, lse = sdpa(q, k, v, scale=-0.3)
    expected, expected_lse = oracle(q, k, v, scale=-0.3)
    check(out, expected, device)
    check(lse, expected_lse, device)


def test_float64_and_head_dims_past_256_are_refused_by_name(device):
    q, k, v = qkv(device, 1, 1, 1, 2, 2, e=16)
    with pytest.raises(NotSupportedError):
        nbx.scaled_dot_product_attention(q.astype(nbx.float64), k.astype(nbx.float64), v.astype(nbx.float64))
    wide = on(device, np.ones((1, 1, 2, 264)))
    with pytest.raises(NotSupportedError):
        nbx.scaled_dot_product_attention(wide, wide, wide)


def test_the_declared_cost_names_the_output_and_counts_causal_flops_as_half(device):
    q, k, v = qkv(device, 1, 2, 2, 64, 64, dtype="bfloat16")
    full = price("scaled_dot_product_attention", q, k, v)
    causal = price("scaled_dot_product_attention", q, k, v, None, None, AttentionOptions(0.25, True))
    assert full.buffers[0].name == "out" and full.outputs == 2 * 64 * 16 * 2
    assert causal.flops * 2 == full.flops == 2 * 2 * 64 * 64 * 32


# ---- the H200 at real sizes ------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("e", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("loads", ["served", "tma"])   # tma: not served until a key is certified with it
def test_gpu_prefill_of_a_thousand_tokens_gqa_32_8_in_bfloat16(e, causal, loads, check):
    from nbx.kernels.attention import launch_sdpa
    device = nbx.as_device("cuda")
    q, k, v = qkv(device, 1, 8, 2, 1031, 1031, e=e, dtype="bfloat16")
    if loads == "served":
        out, lse = sdpa(q, k, v, is_causal=causal)
    else:
        out, lse = launch_sdpa(q, k, v, None, None, AttentionOptions(1 / math.sqrt(e), causal), return_lse=True,
                               setting=_tile("tma", 128, 64, 8, 2 if e == 256 else 3))
    expected, expected_lse = oracle(q, k, v, is_causal=causal)
    check(out, expected, device)
    check(lse, expected_lse, device)


@pytest.mark.gpu
@pytest.mark.parametrize("q_len", [1, 4, 8])
def test_gpu_decode_over_4097_keys_matches_the_oracle(q_len, check):
    device = nbx.as_device("cuda")
    q, k, v = qkv(device, 2, 32, 8, q_len, 4097, e=128, dtype="bfloat16")
    check_decode_twice(q, k, v, device, check)


@pytest.mark.gpu
def test_gpu_float32_prefill_is_ieee_float32(check):
    device = nbx.as_device("cuda")
    q, k, v = qkv(device, 1, 4, 4, 300, 300, e=128)
    out, _ = sdpa(q, k, v, is_causal=True)
    check(out, oracle(q, k, v, is_causal=True)[0], device)


@pytest.mark.gpu
@pytest.mark.parametrize("q_len,lse", [(1, False), (1, True), (300, True)])
def test_gpu_the_declared_allocation_equals_the_pools_measured_peak(q_len, lse):
    from test_kernel_costs import measured  # tests/gpu: the pool's peak over one call
    device = nbx.as_device("cuda")
    q, k, v = qkv(device, 1, 8, 2, q_len, 2000, e=128, dtype="bfloat16")
    declared = price("scaled_dot_product_attention", q, k, v, None, None, AttentionOptions(1 / math.sqrt(128)), lse)
    peak, _ = measured(lambda: nbx.scaled_dot_product_attention(q, k, v, enable_gqa=True, return_lse=lse))
    assert declared.allocated == peak


@pytest.mark.gpu
def test_gpu_gemma_style_softcap_and_sliding_window_prefill(check):
    device = nbx.as_device("cuda")
    q, k, v = qkv(device, 1, 8, 4, 2048, 2048, e=256, dtype="bfloat16", scale=2.0)
    out, lse = sdpa(q, k, v, is_causal=True, window=(511, None), softcap=50.0, scale=256 ** -0.5)
    expected, expected_lse = oracle(q, k, v, is_causal=True, window=(511, None), softcap=50.0, scale=256 ** -0.5)
    check(out, expected, device)
    check(lse, expected_lse, device)


@pytest.mark.gpu
def test_gpu_varlen_prefill_of_uneven_sequences_gqa_8_2(check):
    device = nbx.as_device("cuda")
    lens = [1, 7, 127, 4097, 0, 900]
    cu = np.concatenate([[0], np.cumsum(lens)])
    q = on(device, rng.standard_normal((cu[-1], 8, 128)), "bfloat16")
    k = on(device, rng.standard_normal((cu[-1], 2, 128)), "bfloat16")
    v = on(device, rng.standard_normal((cu[-1], 2, 128)), "bfloat16")
    cq = nbx.asarray(cu, dtype=nbx.int32).to(device)
    out = nbx.varlen_attention(q, k, v, cq, cq, is_causal=True)
    options = AttentionOptions(1 / math.sqrt(128), True)
    check(out, nbx.oracle("varlen_attention", q, k, v, cq, cq, None, options), device)



@pytest.mark.gpu
@pytest.mark.parametrize("length", [1024, 4096])
@pytest.mark.parametrize("e,group", [(128, 1), (128, 4), (64, 4), (256, 4)])
def test_gpu_non_causal_bf16_prefill_keys_pass_their_screen_with_the_device_files_tile(length, e, group,
                                                                                        device_tile_screen):
    """The keys of bench_attention's non-causal rows, which failed (0.085 to 0.91) on the sinusoid
    instance while the kernel was right."""
    from nbx.kernels.attention import tuning
    verdict, bound = device_tile_screen(tuning.ATTENTION, nbx.as_device("cuda"), q_len=length, k_len=length,
                                        head_dim=e, v_dim=e, group=group, dtype=nbx.bfloat16, causal=False,
                                        tma=True)
    assert verdict.passed and verdict.deviation < bound / 3, verdict.reason


@pytest.mark.gpu
@pytest.mark.parametrize("length", [1024, 4096])
def test_gpu_non_causal_bf16_prefill_of_1024_and_4096_tokens_gqa_8_2_matches_the_oracle(length, check):
    device = nbx.as_device("cuda")
    q, k, v = qkv(device, 1, 8, 2, length, length, e=128, dtype="bfloat16")
    out, lse = sdpa(q, k, v)
    expected, expected_lse = oracle(q, k, v)
    check(out, expected, device)
    check(lse, expected_lse, device)


@pytest.mark.gpu
@pytest.mark.parametrize("group,causal", [(1, False), (4, True)])
def test_gpu_the_register_capped_and_the_fullest_shared_memory_prefill_candidates_run_right_on_the_h200(group, causal):
    """Two candidates the sm_90 compile put at an edge: 128 x 64 at 8 warps capped at 128 registers
    (two programs an SM) and 128 x 128 at 3 stages (230 400 bytes of the 232 448 a block may have)."""
    from nbx import autotune
    from nbx.autotune import screen
    from nbx.kernels import launch
    device = nbx.as_device("cuda")
    tunable = autotune.lookup("attention")
    rep = {"q_len": 1024, "k_len": 1024, "head_dim": 128, "v_dim": 128, "group": group, "dtype": nbx.bfloat16,
           "causal": causal, "tma": True}
    edge = [dict(block_m=128, block_n=64, num_warps=8, num_stages=2, loads="tma", max_registers=128),
            dict(block_m=128, block_n=128, num_warps=8, num_stages=3, loads="tma", max_registers=0)]
    kept = tunable.candidates(launch.facts(device), rep)[0]
    assert all(s in kept for s in edge)
    result = screen.run(tunable.workload(rep, device), edge, launch.facts(device))
    assert [v.passed for v in result.verdicts] == [True, True], [v.reason for v in result.verdicts]


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_varlen_with_every_option_at_once_gqa_and_differing_head_dims(device, alignment, check):
    """Window, softcap, per-sequence ALiBi, causal, a scale, GQA 4/2, E 24 / Ev 40 and a sequence
    with queries but no keys, together, in one packed batch."""
    lens_q, lens_k = [5, 0, 19, 1, 3], [9, 3, 19, 6, 0]
    cu_q, cu_k = (nbx.asarray(np.concatenate([[0], np.cumsum(n)]), dtype=nbx.int32).to(device)
                  for n in (lens_q, lens_k))
    q = on(device, rng.standard_normal((sum(lens_q), 4, 24)), "bfloat16")
    k = on(device, rng.standard_normal((sum(lens_k), 2, 24)), "bfloat16")
    v = on(device, rng.standard_normal((sum(lens_k), 2, 40)), "bfloat16")
    slopes = on(device, rng.random((5, 4)))
    out, lse = nbx.varlen_attention(q, k, v, cu_q, cu_k, is_causal=True, scale=0.3, causal_alignment=alignment,
                                    window=(4, 2), softcap=3.0, alibi_slopes=slopes, return_lse=True)
    options = AttentionOptions(0.3, True, alignment, 4, 2, 3.0)
    expected, expected_lse = nbx.oracle("varlen_attention", q, k, v, cu_q, cu_k, slopes, options, True)
    check(out, expected, device)
    check(lse, expected_lse, device)
