"""The decoder shapes the model benchmarks write seeded checkpoints of (torch-free: bench_models and
first_generate both read them)."""
from __future__ import annotations

from nbx.models.writer import small_config

SHAPES = {
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
               num_hidden_layers=16, vocab_size=128256, tie_word_embeddings=True, rope_theta=500000.0,
               rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192}),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
               num_hidden_layers=32, vocab_size=128256, tie_word_embeddings=False, rope_theta=500000.0,
               rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192}),
    # Qwen2.5-7B: q/k/v biases (nbx's Qwen2 family; torch's forward adds them where the checkpoint has them)
    "qwen7b": dict(hidden_size=3584, intermediate_size=18944, num_attention_heads=28, num_key_value_heads=4,
                   head_dim=128, num_hidden_layers=28, vocab_size=152064, tie_word_embeddings=False,
                   rope_theta=1000000.0, use_sliding_window=False),
}
ARCHITECTURES = {"qwen7b": "Qwen2ForCausalLM"}   # the others are Llamas
NAMES = {"1b": "Llama-3.2-1B", "8b": "Llama-3-8B", "qwen7b": "Qwen2.5-7B"}


def config_of(shape: str) -> dict:
    if shape in ARCHITECTURES:   # no rope scaling; eos = <|endoftext|>
        return small_config(ARCHITECTURES[shape], **SHAPES[shape], max_position_embeddings=131072, rms_norm_eps=1e-6,
                            bos_token_id=151643, eos_token_id=151643)
    return small_config("LlamaForCausalLM", **SHAPES[shape], max_position_embeddings=131072, rms_norm_eps=1e-5,
                        bos_token_id=128000, eos_token_id=128001)


if __name__ == "__main__":   # tools/gpu_certify.sh's models step: the config.json a census of a shape reads
    import json
    import sys
    # the benchmarks write bfloat16 checkpoints of these shapes; a census reads the dtype from torch_dtype
    print(json.dumps({**config_of(sys.argv[1]), "torch_dtype": "bfloat16"}, indent=1))
