"""DeepSeek-V2 (mla.py: MLA attention, DeepSeek's MoE) against the float64 reference of DeepSeek's
modeling code (model_reference.deepseek_v2_logits) on small seeded checkpoints."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from model_checks import assert_close, assert_greedy_matches, model_dtype
from model_reference import deepseek_v2_logits, dequantized, read_weights_bf16_aware

import nbx.core as nbx
from nbx import models
from nbx.models import kv_cache, mla, moe
from nbx.models.writer import small_config

PROMPT = [1, 17, 42, 5, 99, 23, 64, 8]
ARCH = "DeepseekV2ForCausalLM"
# DeepSeek-V2-Lite's attention and rope settings
LITE_YARN = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
             "mscale": 0.707, "mscale_all_dim": 0.707}
LITE = {"num_attention_heads": 16, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "kv_lora_rank": 512, "rope_scaling": LITE_YARN}


def checkpoint(tmp_path, device, name="ds", **overrides):
    # interp: one layer, sparse (the MoE block with DeepSeek's routing and shared experts), a forward in seconds
    layers = {"num_hidden_layers": 1, "first_k_dense_replace": 0} if device.type == "interp" else {}
    return models.write_checkpoint(tmp_path / name, small_config(ARCH, **{**layers, **overrides}), seed=11,
                                   dtype=model_dtype(device))


def test_deepseek_v2_matches_its_float64_reference_in_logits_and_greedy_tokens(tmp_path, device):
    folder = checkpoint(tmp_path, device)
    model = models.load(folder, device=device)
    dtype = model_dtype(device)
    sparse = [layer.sparse is not None for layer in model.layers]
    assert sparse == ([True] if device.type == "interp" else [False, True])   # first_k_dense_replace 1 on cpu/cuda
    logits = model.logits(PROMPT)
    assert logits.dtype == nbx.float32 and tuple(logits.shape) == (len(PROMPT), 128)
    assert_close(logits.numpy(), deepseek_v2_logits(folder, PROMPT), dtype, device, "prompt logits")
    new = model.generate(PROMPT, max_new_tokens=2 if device.type == "interp" else 6)
    assert model.last_decode == ("eager" if device.type == "cpu" else "graph")
    assert_greedy_matches(new, deepseek_v2_logits(folder, PROMPT + new), len(PROMPT), dtype, device)


@pytest.mark.parametrize("overrides", [
    {"q_lora_rank": 24},                                                   # V2's q_a_proj, q_a_layernorm, q_b_proj
    {"topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.5},
    {"norm_topk_prob": True, "routed_scaling_factor": 3.0},                # renormalized: the scaling is not applied
    {"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "mscale": 1.0,
                      "mscale_all_dim": 0.8}},                              # cos/sin scaled by an mscale ratio != 1
    {"rope_scaling": None, "tie_word_embeddings": True, "n_shared_experts": None},
    {"num_hidden_layers": 4, "first_k_dense_replace": 1, "moe_layer_freq": 2},   # sparse layer 2 only
], ids=["q-lora", "group-limited", "norm-topk", "mscale-ratio", "plain-rope-tied-unshared", "layer-freq"])
def test_each_deepseek_v2_option_matches_the_reference(tmp_path, overrides):
    cpu = nbx.as_device("cpu")
    folder = checkpoint(tmp_path, cpu, **overrides)
    model = models.load(folder)
    if "moe_layer_freq" in overrides:
        assert [layer.sparse is not None for layer in model.layers] == [False, False, True, False]
    assert_close(model.logits(PROMPT).numpy(), deepseek_v2_logits(folder, PROMPT), nbx.float32, cpu)


def test_rope_dims_stored_interleaved_are_rotated_in_pairs_as_deepseeks_de_interleave_orders_them():
    # one head: nope dim n0, then rope dims stored interleaved: pairs (x0, x1) and (x2, x3)
    rows = nbx.asarray(np.array([[9.0], [1.0], [2.0], [3.0], [4.0]], dtype=np.float32))
    ordered = mla.rope_first(rows, blocks=1, nope=1, rope=4)
    np.testing.assert_array_equal(ordered.numpy()[:, 0], [1, 3, 2, 4, 9])   # [x0, x2, x1, x3, n0]
    kept_last = mla.rope_first(rows, blocks=1, nope=1, rope=4, first=False)   # kv_a_proj_with_mqa's: latent first
    np.testing.assert_array_equal(kept_last.numpy()[:, 0], [9, 1, 3, 2, 4])
    # position 1, theta 10000, rope dim 4: pair 0 turns by 1 rad, pair 1 by 10000^(-1/2) = 0.01 rad
    config = {"num_attention_heads": 1, "qk_nope_head_dim": 1, "qk_rope_head_dim": 4, "v_head_dim": 1,
              "kv_lora_rank": 1, "hidden_size": 5, "rope_theta": 10000.0, "max_position_embeddings": 8}
    cos, sin = nbx.rope_tables(mla.rope_config(config), 2)
    x = ordered.reshape(1, 1, 5)
    out = nbx.rotary_embedding(x, cos, sin, nbx.asarray(np.array([1]))).numpy().reshape(5)
    c0, s0, c1, s1 = math.cos(1), math.sin(1), math.cos(0.01), math.sin(0.01)
    expected = [1 * c0 - 2 * s0, 3 * c1 - 4 * s1, 2 * c0 + 1 * s0, 4 * c1 + 3 * s1, 9]   # each pair rotated
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_the_softmax_scale_carries_yarns_mscale_of_mscale_all_dim_squared():
    # V2-Lite: 1/sqrt(128 + 64) * (0.1 * 0.707 * ln 40 + 1)^2
    assert mla.softmax_scale(LITE) == pytest.approx((0.0707 * math.log(40) + 1) ** 2 / math.sqrt(192), rel=1e-12)
    assert mla.softmax_scale({**LITE, "rope_scaling": None}) == pytest.approx(192 ** -0.5, rel=1e-12)
    no_all_dim = {k: v for k, v in LITE_YARN.items() if k != "mscale_all_dim"}
    assert mla.softmax_scale({**LITE, "rope_scaling": no_all_dim}) == pytest.approx(192 ** -0.5, rel=1e-12)
    # the rope's cos/sin factor: mscale / mscale_all_dim, 1 in V2-Lite; DeepSeek's defaults (1, 0) otherwise
    assert mla.rope_config(LITE)["rope_scaling"]["attention_factor"] == pytest.approx(1.0)
    defaulted = mla.rope_config({**LITE, "rope_scaling": {"type": "yarn", "factor": 40}})["rope_scaling"]
    assert defaulted["attention_factor"] == pytest.approx(0.1 * math.log(40) + 1)


def test_deepseek_v2_lites_checkpoint_names_and_shapes_are_deepseeks():
    config = small_config(ARCH, **LITE, hidden_size=2048, num_hidden_layers=2, n_routed_experts=64,
                          num_experts_per_tok=6, moe_intermediate_size=1408, intermediate_size=10944, vocab_size=102400)
    shapes = models.families.parameter_shapes(config)
    a = "model.layers.0.self_attn."
    assert shapes[a + "q_proj.weight"] == (16 * 192, 2048)
    assert shapes[a + "kv_a_proj_with_mqa.weight"] == (512 + 64, 2048)
    assert shapes[a + "kv_a_layernorm.weight"] == (512,)
    assert shapes[a + "kv_b_proj.weight"] == (16 * 256, 512)
    assert shapes[a + "o_proj.weight"] == (2048, 16 * 128)
    assert shapes["model.layers.0.mlp.gate_proj.weight"] == (10944, 2048)
    assert shapes["model.layers.1.mlp.gate.weight"] == (64, 2048)
    assert shapes["model.layers.1.mlp.experts.63.down_proj.weight"] == (2048, 1408)
    assert shapes["model.layers.1.mlp.shared_experts.up_proj.weight"] == (2 * 1408, 2048)
    assert "model.layers.1.mlp.shared_expert_gate.weight" not in shapes
    assert moe.routing(ARCH, config) == {"renormalize": False, "scaling": 1.0}


def test_the_paged_and_the_contiguous_caches_decode_the_same_tokens_with_v_narrower_than_k(tmp_path, monkeypatch):
    model = models.load(checkpoint(tmp_path, nbx.as_device("cpu")))
    prompts = [PROMPT, [3, 4, 5]]
    assert isinstance(model.new_cache([4]), kv_cache.PagedCache)
    paged = model.generate_batch(prompts, 5)
    monkeypatch.setattr(kv_cache, "_paged_cache_class", lambda: None)
    cache = model.new_cache([4])
    assert isinstance(cache, kv_cache.ContiguousCache) and tuple(cache.values[0][0].shape) == (4, 4, 16)
    assert model.generate_batch(prompts, 5) == paged


def test_int4_mla_projections_reorder_their_words_and_give_the_dequantized_logits(tmp_path):
    # no shared experts: nbx.moe_block runs them through gated_linear, which refuses int4 weights by name
    config = small_config(ARCH, q_lora_rank=32, n_shared_experts=None)
    folder = models.write_checkpoint(tmp_path / "int4", config, seed=5, int4=(16, "asymmetric"))   # experts 16 wide
    model = models.load(folder)
    layer = model.layers[0]
    assert isinstance(layer.w_in, nbx.QuantizedTensor) and isinstance(layer.q_b, nbx.QuantizedTensor)
    reference = deepseek_v2_logits(folder, PROMPT, weights=dequantized(read_weights_bf16_aware(folder)))
    assert_close(model.logits(PROMPT).numpy(), reference, nbx.float32, nbx.as_device("cpu"))


@pytest.mark.parametrize("overrides, refusal", [
    ({"topk_method": "noaux_tc"}, "topk_method 'noaux_tc'"),
    ({"scoring_func": "sigmoid"}, "scoring_func 'sigmoid'"),
    ({"attention_bias": True}, "attention_bias"),
])
def test_deepseek_options_nbx_does_not_build_are_refused_by_name(tmp_path, overrides, refusal):
    folder = models.write_checkpoint(tmp_path / "ok", small_config(ARCH), seed=1)
    config = small_config(ARCH, **overrides)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(nbx.NotSupportedError, match=refusal):
        models.load(folder)


def test_tensor_parallel_loading_and_the_memory_plan_refuse_deepseek_by_name(tmp_path):
    folder = models.write_checkpoint(tmp_path / "ds", small_config(ARCH), seed=1)
    with pytest.raises(nbx.NotSupportedError, match="DeepseekV2ForCausalLM.s MLA attention is not split"):
        models.load(folder, tensor_parallel=2)
    with pytest.raises(nbx.NotSupportedError, match="MLA"):
        models.load(folder).memory_plan([8], 4)


@pytest.mark.gpu
def test_deepseek_v2_lites_attention_sizes_on_cuda_match_the_reference_in_logits_and_tokens(tmp_path):
    # V2-Lite's heads (16 of q/k 192 and v 128, one 64-dim rope key, a 512 latent, its yarn) at a small
    # hidden size: paged_attention at head dim 192 / v 128 inside captured decode steps, bfloat16
    cuda = nbx.as_device("cuda")
    config = small_config(ARCH, **LITE, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                          n_routed_experts=16, num_experts_per_tok=6, moe_intermediate_size=128, vocab_size=512,
                          max_position_embeddings=1024)
    folder = models.write_checkpoint(tmp_path / "lite", config, seed=3, dtype="bfloat16")
    model = models.load(folder, device=cuda)
    assert_close(model.logits(PROMPT).numpy(), deepseek_v2_logits(folder, PROMPT), nbx.bfloat16, cuda)
    new = model.generate(PROMPT, 8)
    assert model.last_decode == "graph"
    assert_greedy_matches(new, deepseek_v2_logits(folder, PROMPT + new), len(PROMPT), nbx.bfloat16, cuda)
