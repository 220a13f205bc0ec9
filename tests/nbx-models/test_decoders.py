"""The decoder families against float64 references on small seeded checkpoints in the HF layout."""
from __future__ import annotations

import json
import types

import numpy as np
import pytest
from model_checks import assert_close, assert_greedy_matches, model_dtype
from model_reference import decoder_logits, dequantized, read_weights_bf16_aware

import nbx.core as nbx
from nbx import models
from nbx.models import decoder, kv_cache
from nbx.models.writer import small_config

PROMPT = [1, 17, 42, 5, 99, 23, 64, 8]    # longer than Mistral's small window (5)
FAMILIES = ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MixtralForCausalLM",
            "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"]


def checkpoint(tmp_path, architecture, device, **overrides):
    # interp runs every kernel in Triton's interpreter: one layer keeps a case to seconds
    layers = {"num_hidden_layers": 1} if device.type == "interp" else {}
    config = small_config(architecture, **layers, **overrides)
    return models.write_checkpoint(tmp_path / architecture, config, seed=11, dtype=model_dtype(device))


@pytest.mark.parametrize("architecture", FAMILIES)
def test_each_decoder_family_matches_its_float64_reference_in_logits_and_greedy_tokens(tmp_path, architecture,
                                                                                      device):
    folder = checkpoint(tmp_path, architecture, device)
    model = models.load(folder, device=device)
    dtype = model_dtype(device)
    logits = model.logits(PROMPT)
    assert logits.dtype == nbx.float32 and tuple(logits.shape) == (len(PROMPT), 128)
    assert_close(logits.numpy(), decoder_logits(folder, PROMPT), dtype, device, "prompt logits")
    # the interpreter runs a forward in about a second: there Llama decodes (the cache path is the
    # same code for all) and Mistral (paged attention's sliding window at decode rows, the prompt
    # longer than the window), every family on the other devices
    if device.type == "interp" and architecture not in ("LlamaForCausalLM", "MistralForCausalLM"):
        return
    new = model.generate(PROMPT, max_new_tokens=2 if device.type == "interp" else 6)
    assert_greedy_matches(new, decoder_logits(folder, PROMPT + new), len(PROMPT), dtype, device)


def test_several_prompts_of_different_lengths_generate_what_each_generates_alone(tmp_path):
    model = models.load(checkpoint(tmp_path, "LlamaForCausalLM", nbx.as_device("cpu")))
    prompts = [PROMPT, [3, 4], PROMPT[:5]]
    assert model.generate_batch(prompts, max_new_tokens=5) == [model.generate(p, 5) for p in prompts]
    batched = model.logits_batch(prompts)
    for prompt, logits in zip(prompts, batched):
        np.testing.assert_allclose(logits.numpy(), model.logits(prompt).numpy(), rtol=1e-5, atol=1e-5)


def test_generation_stops_after_an_eos_id_and_at_max_new_tokens(tmp_path):
    folder = checkpoint(tmp_path, "LlamaForCausalLM", nbx.as_device("cpu"))
    free = models.load(folder).generate(PROMPT, max_new_tokens=6)
    assert len(free) == 6
    config = json.loads((folder / "config.json").read_text())
    config["eos_token_id"] = [free[2], 127]
    (folder / "config.json").write_text(json.dumps(config))
    assert models.load(folder).generate(PROMPT, max_new_tokens=6) == free[:free.index(free[2]) + 1]


def test_generation_config_json_eos_ids_stop_a_generation_in_place_of_config_jsons(tmp_path):
    # transformers' generate stops at generation_config.json's eos_token_id (an instruct model's
    # end-of-turn ids are often only there); config.json's is used when that file names none
    folder = checkpoint(tmp_path, "LlamaForCausalLM", nbx.as_device("cpu"))
    free = models.load(folder).generate(PROMPT, max_new_tokens=6)
    assert len(free) == 6   # config.json's eos id (2) is not among them: the stop below is the file's
    stops = [127, free[3]]
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": stops}))
    first = min(i for i, token in enumerate(free) if token in stops)
    assert models.load(folder).generate(PROMPT, max_new_tokens=6) == free[:first + 1]
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1}))
    assert models.load(folder).eos == (2,)


def test_a_prompt_and_its_new_tokens_past_max_position_embeddings_are_refused(tmp_path):
    model = models.load(checkpoint(tmp_path, "LlamaForCausalLM", nbx.as_device("cpu")))
    with pytest.raises(nbx.ArgumentError, match="max_position_embeddings 256"):
        model.generate(PROMPT, max_new_tokens=250)
    with pytest.raises(nbx.ArgumentError, match="a prompt of 257 tokens .* max_position_embeddings 256"):
        model.logits([3] * 257)


def test_sampled_generation_repeats_for_a_seed_and_stays_in_the_top_k(tmp_path):
    folder = checkpoint(tmp_path, "Qwen3ForCausalLM", nbx.as_device("cpu"))
    model = models.load(folder)
    first = model.generate(PROMPT, 6, temperature=1.5, top_k=3, seed=5)
    assert first == model.generate(PROMPT, 6, temperature=1.5, top_k=3, seed=5)
    reference = decoder_logits(folder, PROMPT + first)
    for step, token in enumerate(first):
        assert token in np.argsort(reference[len(PROMPT) - 1 + step])[-3:]


def test_sharded_checkpoints_with_an_index_load_the_same_model_as_one_file(tmp_path):
    config = small_config("MistralForCausalLM")
    one = models.write_checkpoint(tmp_path / "one", config, seed=3)
    three = models.write_checkpoint(tmp_path / "three", config, seed=3, shards=3)
    assert sorted(p.name for p in three.glob("*.safetensors")) == [f"model-0000{i}-of-00003.safetensors"
                                                                   for i in (1, 2, 3)]
    index = json.loads((three / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 3
    np.testing.assert_array_equal(models.load(one).logits(PROMPT).numpy(),
                                  models.load(three).logits(PROMPT).numpy())


def test_tied_embeddings_serve_as_the_lm_head_when_the_checkpoint_has_none(tmp_path):
    folder = checkpoint(tmp_path, "Qwen2ForCausalLM", nbx.as_device("cpu"))   # tie_word_embeddings true
    assert "lm_head.weight" not in nbx.load_safetensors(folder / "model.safetensors")
    model = models.load(folder)
    assert model.lm_head is model.embed
    assert_close(model.logits(PROMPT).numpy(), decoder_logits(folder, PROMPT), nbx.float32, nbx.as_device("cpu"))


def test_a_dtype_given_at_load_converts_the_stored_weights(tmp_path):
    config = small_config("LlamaForCausalLM")
    folder = models.write_checkpoint(tmp_path / "bf16", config, seed=2, dtype="bfloat16")
    stored = models.load(folder)
    widened = models.load(folder, dtype=nbx.float32)
    assert stored.embed.dtype == nbx.bfloat16 and widened.embed.dtype == nbx.float32
    np.testing.assert_array_equal(widened.embed.numpy(), stored.embed.numpy().astype(np.float32))
    assert_close(widened.logits(PROMPT).numpy(), decoder_logits(folder, PROMPT), nbx.float32, nbx.as_device("cpu"))
    half = models.load(folder, dtype="float16")   # bfloat16's values held exactly in float16's range here
    assert half.embed.dtype == nbx.float16 and half.logits(PROMPT).dtype == nbx.float32
    assert_close(half.logits(PROMPT).numpy(), decoder_logits(folder, PROMPT), nbx.float16, nbx.as_device("cpu"))


def test_the_old_rope_scaling_and_the_new_rope_parameters_layouts_give_one_model(tmp_path):
    old = small_config("LlamaForCausalLM")
    new = {k: v for k, v in old.items() if k not in ("rope_theta", "rope_scaling")}
    new["rope_parameters"] = {**old["rope_scaling"], "rope_theta": old["rope_theta"]}
    a = models.load(models.write_checkpoint(tmp_path / "old", old, seed=4)).logits(PROMPT)
    b = models.load(models.write_checkpoint(tmp_path / "new", new, seed=4)).logits(PROMPT)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    plain = models.load(models.write_checkpoint(tmp_path / "plain", {**old, "rope_scaling": None}, seed=4))
    assert not np.array_equal(plain.logits(PROMPT).numpy(), a.numpy())  # llama3 scaling does change positions


def test_an_unknown_architecture_is_refused_with_the_ones_nbx_knows(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(models.UnknownArchitectureError) as refused:
        models.load(tmp_path)
    assert refused.value.found == "GPT2LMHeadModel"
    assert set(models.KNOWN_ARCHITECTURES) <= set(str(refused.value).replace(",", " ").split())
    assert isinstance(refused.value, nbx.NbxError)


def test_a_tensor_missing_from_the_checkpoint_and_a_wrong_shape_are_named(tmp_path):
    config = small_config("Qwen2ForCausalLM")
    folder = models.write_checkpoint(tmp_path / "m", config, seed=1)
    weights = dict(nbx.load_safetensors(folder / "model.safetensors"))
    bias = weights.pop("model.layers.1.self_attn.k_proj.bias")
    nbx.save_safetensors(weights, folder / "model.safetensors")
    with pytest.raises(models.CheckpointError, match="no tensor model.layers.1.self_attn.k_proj.bias"):
        models.load(folder)
    weights["model.layers.1.self_attn.k_proj.bias"] = nbx.concat([bias, bias])
    nbx.save_safetensors(weights, folder / "model.safetensors")
    with pytest.raises(models.CheckpointError, match=r"k_proj.bias has shape \(64,\); the config implies \(32,\)"):
        models.load(folder)


@pytest.mark.parametrize("pair_fused", [False, True], ids=["two-launches", "gated-pair"])
def test_int4_projections_load_as_quantized_tensors_and_give_the_dequantized_models_logits_and_tokens(tmp_path,
                                                                                                    device, pair_fused,
                                                                                                    monkeypatch):
    # W4A16: every projection through linear's int4 path (the linear_int4 kernel on interp and cuda)
    layers = {"num_hidden_layers": 1} if device.type == "interp" else {}
    dtype = model_dtype(device)
    folder = models.write_checkpoint(tmp_path / "int4", small_config("LlamaForCausalLM", **layers), seed=6,
                                     int4=(32, "asymmetric"), dtype=dtype)
    stored = nbx.load_safetensors(folder / "model.safetensors")
    assert "model.layers.0.mlp.up_proj.qweight" in stored and "model.layers.0.mlp.up_proj.weight" not in stored
    model = models.load(folder, device=device)
    assert isinstance(model.layers[0].up, nbx.QuantizedTensor) and model.layers[0].up.group_size == 32
    assert isinstance(model.layers[0].wqkv, nbx.QuantizedTensor)   # q, k and v stacked by their words
    monkeypatch.setattr(decoder, "INT4_PAIR_FUSED", pair_fused)
    assert model.mlp_fused(model.layers[0]) == pair_fused   # gate and up: one gated_linear of two int4 weights
    weights = dequantized(read_weights_bf16_aware(folder))
    assert_close(model.logits(PROMPT).numpy(), decoder_logits(folder, PROMPT, weights=weights), dtype, device)
    if device.type == "interp":   # a forward is seconds there; the decode path is the same code
        return
    new = model.generate(PROMPT, max_new_tokens=4)   # on cuda: the int4 products inside captured decode steps
    assert_greedy_matches(new, decoder_logits(folder, PROMPT + new, weights=weights), len(PROMPT), dtype, device)


def test_int4_experts_of_a_mixtral_stack_into_one_quantized_tensor_a_layer_and_give_the_dequantized_logits(tmp_path):
    config = small_config("MixtralForCausalLM", num_hidden_layers=1)
    folder = models.write_checkpoint(tmp_path / "int4-moe", config, seed=7, int4=(32, "symmetric"))
    model = models.load(folder)
    experts = model.layers[0].sparse
    assert isinstance(experts.gate, nbx.QuantizedTensor) and experts.gate.shape == (4, 32, 64)
    assert experts.down.shape == (4, 64, 32)
    reference = decoder_logits(folder, PROMPT, weights=dequantized(read_weights_bf16_aware(folder)))
    assert_close(model.logits(PROMPT).numpy(), reference, nbx.float32, nbx.as_device("cpu"))


def test_bfloat16_weights_on_the_cpu_stay_within_bfloat16s_tolerance_of_the_reference(tmp_path):
    folder = models.write_checkpoint(tmp_path / "bf16", small_config("Qwen3ForCausalLM"), seed=12, dtype="bfloat16")
    model = models.load(folder)
    assert model.dtype == nbx.bfloat16
    cpu = nbx.as_device("cpu")
    assert_close(model.logits(PROMPT).numpy(), decoder_logits(folder, PROMPT), nbx.bfloat16, cpu)
    new = model.generate(PROMPT, 4)
    assert_greedy_matches(new, decoder_logits(folder, PROMPT + new), len(PROMPT), nbx.bfloat16, cpu)


def test_the_paged_and_the_contiguous_kv_caches_decode_the_same_tokens(tmp_path, monkeypatch):
    model = models.load(checkpoint(tmp_path, "MistralForCausalLM", nbx.as_device("cpu")))
    prompts = [PROMPT, [3, 4, 5]]
    assert isinstance(model.new_cache([4]), kv_cache.PagedCache)
    paged = model.generate_batch(prompts, 7)
    monkeypatch.setattr(kv_cache, "_paged_cache_class", lambda: None)
    assert isinstance(model.new_cache([4]), kv_cache.ContiguousCache)
    assert model.generate_batch(prompts, 7) == paged


@pytest.mark.gpu
def test_the_decode_step_replayed_as_a_captured_graph_gives_the_eager_decodes_tokens(tmp_path):
    cuda = nbx.as_device("cuda")
    model = models.load(checkpoint(tmp_path, "LlamaForCausalLM", cuda), device=cuda)
    prompts = [PROMPT, [3, 4, 5]]
    model.graph_decoding = False
    eager = model.generate_batch(prompts, 12)
    assert model.last_decode == "eager"
    model.graph_decoding = True
    assert model.generate_batch(prompts, 12) == eager
    assert model.last_decode == "graph"


class _EagerStep:
    """nbx.graph's Step reduced to what GraphDecode uses, run eagerly: the wiring of the captured
    function (its state on the device, advanced by each run) checked on the cpu, where front-ends
    read hosts."""
    captured, reserved = False, 0

    def __init__(self, fn, device):
        self.fn = fn
        self.outputs = fn()   # the capture's run is the step's first run, as nbx.graph's eager fallback

    def replay(self):
        self.outputs = self.fn()
        return self.outputs

    def close(self):
        pass


def _power_of_two_bucket(n, device, max_length):
    return min(max_length, 1 << (n - 1).bit_length())   # any bound >= n serves


def test_the_captured_decode_steps_function_decodes_the_eager_forwards_tokens(tmp_path, monkeypatch):
    from nbx.models import decoder
    model = models.load(checkpoint(tmp_path, "MistralForCausalLM", nbx.as_device("cpu")))
    prompts = [PROMPT, [3, 4, 5]]
    eager = model.generate_batch(prompts, 7)
    assert model.last_decode == "eager"
    model.release_cache()   # the kept cache was made without a graph decode
    monkeypatch.setattr(decoder, "graph_available", lambda cache: True)
    monkeypatch.setattr(nbx, "graph", types.SimpleNamespace(capture=_EagerStep, length_bucket=_power_of_two_bucket),
                        raising=False)
    assert model.generate_batch(prompts, 7) == eager
    assert model.last_decode == "graph"


def test_a_second_generation_of_the_same_sizes_reuses_the_kept_cache_and_decodes_the_same(tmp_path):
    model = models.load(checkpoint(tmp_path, "Qwen3ForCausalLM", nbx.as_device("cpu")))
    first = model.generate_batch([PROMPT, [7, 8]], 5)
    kept = model._kept[1]
    assert model.generate_batch([PROMPT, [7, 8]], 5) == first and model._kept[1] is kept
    model.generate_batch([PROMPT], 5)
    assert model._kept[1] is not kept     # other capacities: a new cache, the old one given back


def test_growing_the_rope_tables_gives_back_the_kept_cache_whose_steps_read_the_old_ones(tmp_path):
    model = models.load(checkpoint(tmp_path, "LlamaForCausalLM", nbx.as_device("cpu")))
    model.generate(PROMPT, 3)
    assert model._kept is not None and model._cos.shape[0] == 64
    model.logits(list(range(1, 100)))           # 99 positions: the tables grow to 128
    assert model._cos.shape[0] == 128 and model._kept is None


def test_layer_types_choose_the_sliding_layers_and_a_wrong_list_is_named():
    from nbx.models.decoder import layer_windows
    config = small_config("Qwen2ForCausalLM", num_hidden_layers=3, sliding_window=4, use_sliding_window=True,
                          max_window_layers=1)
    assert layer_windows(config) == [None, 4, 4]
    assert layer_windows({**config, "layer_types": ["sliding_attention", "full_attention", "full_attention"]}) == [
        4, None, None]
    with pytest.raises(models.CheckpointError, match="lists 2 layers; num_hidden_layers is 3"):
        layer_windows({**config, "layer_types": ["full_attention"] * 2})
