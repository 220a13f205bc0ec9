"""Seeded checkpoints in the Hugging Face layout, written through nbx's safetensors writer.

    write_checkpoint(folder, small_config("LlamaForCausalLM"), seed=0, dtype="bfloat16", shards=2)

writes config.json and model.safetensors (or model-0000i-of-0000n.safetensors with
model.safetensors.index.json), as transformers' save_pretrained lays them out, with weights drawn
from nbx's Philox stream of the seed: the same seed gives the same checkpoint on every machine.
Tests, `nbx demo` and the benchmarks build their models with it.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import nbx.core as nbx

from .families import check_known, parameter_shapes

# Shapes of small models of each family: tests and the demo (overrides change any key).
_SMALL_DECODER = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
                  "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False}
SMALL = {
    "LlamaForCausalLM": {**_SMALL_DECODER, "model_type": "llama", "rope_theta": 500000.0,
                         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
    "MistralForCausalLM": {**_SMALL_DECODER, "model_type": "mistral", "rope_theta": 10000.0, "sliding_window": 5},
    "Qwen2ForCausalLM": {**_SMALL_DECODER, "model_type": "qwen2", "rope_theta": 1000000.0, "use_sliding_window": False,
                         "tie_word_embeddings": True},
    "Qwen3ForCausalLM": {**_SMALL_DECODER, "model_type": "qwen3", "head_dim": 32, "attention_bias": False,
                         "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}},
    "MixtralForCausalLM": {**_SMALL_DECODER, "model_type": "mixtral", "rope_theta": 1000000.0,
                           "num_local_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 32},
    "Qwen2MoeForCausalLM": {**_SMALL_DECODER, "model_type": "qwen2_moe", "rope_theta": 1000000.0,
                            "use_sliding_window": False, "num_experts": 4, "num_experts_per_tok": 2,
                            "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
                            "norm_topk_prob": False, "decoder_sparse_step": 1, "mlp_only_layers": []},
    "Qwen3MoeForCausalLM": {**_SMALL_DECODER, "model_type": "qwen3_moe", "head_dim": 32, "attention_bias": False,
                            "rope_theta": 1000000.0, "num_experts": 8, "num_experts_per_tok": 2,
                            "moe_intermediate_size": 32, "norm_topk_prob": True, "decoder_sparse_step": 1,
                            "mlp_only_layers": [1]},
    # layer 0 dense, layer 1 sparse (8 experts, top-3, 2 shared); v's head dim (16) not q/k's (12 + 8)
    "DeepseekV2ForCausalLM": {**_SMALL_DECODER, "model_type": "deepseek_v2", "num_key_value_heads": 4,
                              "q_lora_rank": None, "kv_lora_rank": 32, "qk_nope_head_dim": 12, "qk_rope_head_dim": 8,
                              "v_head_dim": 16, "n_routed_experts": 8, "n_shared_experts": 2,
                              "num_experts_per_tok": 3, "moe_intermediate_size": 16, "first_k_dense_replace": 1,
                              "moe_layer_freq": 1, "topk_method": "greedy", "n_group": 1, "topk_group": 1,
                              "norm_topk_prob": False, "routed_scaling_factor": 1.0, "scoring_func": "softmax",
                              "attention_bias": False, "rope_theta": 10000.0,
                              "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                                               "beta_fast": 32, "beta_slow": 1, "mscale": 0.707,
                                               "mscale_all_dim": 0.707}},
    "BertModel": {"model_type": "bert", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                  "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 64, "type_vocab_size": 2,
                  "layer_norm_eps": 1e-12, "hidden_act": "gelu", "position_embedding_type": "absolute",
                  "pad_token_id": 0},
}


def small_config(architecture: str, **overrides) -> dict:
    """The config.json of a small model of the family (KNOWN_ARCHITECTURES), overrides applied."""
    check_known({"architectures": [architecture]})
    return {"architectures": [architecture], **SMALL.get(architecture, SMALL["BertModel"]), **overrides}


def draw(name: str, shape: tuple[int, ...], generator, device) -> nbx.Tensor:
    """Weights whose forward stays well scaled: norms near 1, small biases, products ~1/sqrt(fan-in)."""
    values = nbx.randn(*shape, dtype=nbx.float32, device=device, generator=generator)
    if name.endswith("norm.weight") or name.endswith("LayerNorm.weight"):
        return values * 0.1 + 1.0
    if name.endswith(".bias"):
        return values * 0.1
    if "embed" in name or name == "lm_head.weight":
        return values
    return values * (1.0 / math.sqrt(shape[-1]))


def _projection(name: str, shape) -> bool:
    return len(shape) == 2 and name.endswith(".weight") and "embed" not in name and name != "lm_head.weight"


def _quantized_rows(values: nbx.Tensor, int4, dtype, prefix: str) -> dict:
    """values [rows, K] as nbx's grouped int4 weight, quantized in row blocks on the host's cores (a
    group lies in one row, so the blocks give the words, scales and minima of the whole; an 8B
    model's projections take minutes on one core)."""
    import os
    from concurrent.futures import ThreadPoolExecutor
    rows = values.shape[0]
    step = max(1, -(-rows // (os.cpu_count() or 1)))
    blocks = [values[i:i + step] for i in range(0, rows, step)]
    with ThreadPoolExecutor(len(blocks)) as pool:   # numpy's array work lets go of the GIL
        parts = list(pool.map(lambda block: nbx.QuantizedTensor.quantize(block, int4[0], int4[1], scale_dtype=dtype)
                              .to_safetensors_dict(prefix), blocks))
    return {name: nbx.concat([part[name] for part in parts], axis=0) for name in parts[0]}


def write_checkpoint(folder, config: dict, *, seed: int = 0, dtype="float32", shards: int = 1,
                     sentence_transformers: dict | None = None, device=None, int4=None) -> Path:
    """Write config and seeded weights of config's family into folder (created); returns it.

    int4: (group_size, scheme) stores every projection (a 2-D `*_proj.weight` or BERT `dense`/
    query/key/value weight) as nbx's grouped int4 weight (<prefix>.qweight, .scales, .zeros),
    quantized from the drawn values with scales in dtype.
    device: where the weights are drawn (a GPU draws a billion in a moment; Philox streams give
    the same numbers on every device, so the checkpoint is the same).
    sentence_transformers (encoders): {"pooling": ["mean_tokens", ...], "normalize": bool} writes
    modules.json and 1_Pooling/config.json as sentence-transformers saves them."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dtype = nbx.as_dtype(dtype)
    shapes = parameter_shapes(config)
    if not 1 <= shards <= len(shapes):
        raise nbx.ArgumentError(f"shards is 1 to {len(shapes)} (one tensor each at most), got {shards}")
    generator = nbx.Generator(seed=seed)
    tensors = {}
    for name, shape in shapes.items():
        values = draw(name, shape, generator, device)
        if int4 is not None and _projection(name, shape):
            tensors.update(_quantized_rows(values.to("cpu"), int4, dtype, name.removesuffix(".weight")))
        else:
            tensors[name] = values.to(dtype=dtype).to("cpu")
    (folder / "config.json").write_text(json.dumps({**config, "torch_dtype": dtype.name}, indent=2) + "\n")
    metadata = {"format": "pt"}
    if shards == 1:
        nbx.save_safetensors(tensors, folder / "model.safetensors", metadata=metadata)
    else:
        names = list(tensors)
        per = math.ceil(len(names) / shards)
        weight_map = {}
        for i in range(shards):
            file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            part = {name: tensors[name] for name in names[i * per:(i + 1) * per]}
            nbx.save_safetensors(part, folder / file, metadata=metadata)
            weight_map.update(dict.fromkeys(part, file))
        index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    if sentence_transformers is not None:
        _write_sentence_transformers(folder, config, **sentence_transformers)
    return folder


def _write_sentence_transformers(folder: Path, config: dict, pooling=("mean_tokens",), normalize=True) -> None:
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (folder / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    (folder / "1_Pooling").mkdir(exist_ok=True)
    modes = {f"pooling_mode_{m}": m in pooling for m in ("cls_token", "mean_tokens", "max_tokens",
                                                          "mean_sqrt_len_tokens")}
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": config["hidden_size"], **modes}, indent=2) + "\n")
