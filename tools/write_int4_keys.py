"""Write the `linear_int4` (W4A16) keys the H200 benchmarks and models form, without a GPU:
certificates/keys/nvidia-h200-140gb-int4.json, and the gated pair's (`gated_linear_int4`):
certificates/keys/nvidia-h200-140gb-int4-gated.json.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') python3 tools/write_int4_keys.py

A linear_int4 key is M, N, K classed on the device file's dims ladder, the activations' dtype and
the group size (nbx.kernels.matmul.int4.KEY), so it is listed from the shapes:
- tools/bench/bench_matmul.py's int4 rows (INT4_SHAPES);
- the projections of tools/bench/bench_models.py's Llama-3.2-1B and Llama-3-8B shapes (SHAPES) as
  nbx.models ran them with int4 weights: the fused qkv, o, gate and up apart, down; at one decode
  row, a batch of 16 and the 512-token prompt (bench_models --prompt's default). With
  decoder.INT4_PAIR_FUSED the decoder runs an int4 gate and up as one gated_linear (Tunable
  gated_linear_int4, the same key fields): gated_key_records lists those, at 1, 16 and 512 rows
  of both shapes' MLP. The lm_head and embeddings stay bfloat16 (bench_models quantizes the projections).
Every call is bfloat16 activations, group 128 (the benchmarks' quantization).
"""
from __future__ import annotations

from nbx.autotune import records
from nbx.kernels.matmul.int4 import GATED_LINEAR_INT4, LINEAR_INT4

from keys_files import bench_constants, h200_facts, key_record, keys_path, save_keys
from write_linear_keys import LLAMA_1B, LLAMA_8B, PROMPT, decoder_calls

GROUP = 128
GATED_ROWS = (1, 16, PROMPT)   # decode, a batch of 16, the prompt
DECODE_ROWS = GATED_ROWS       # the projections' rows likewise


def key_records(facts) -> list[records.KeyRecord]:
    calls = list(bench_constants("bench_matmul.py", {"INT4_SHAPES"})["INT4_SHAPES"])
    # a layer's products (the int4 gate and up are two of the gated shape) at decode and prompt rows
    calls += [call[:3] for shape in (LLAMA_1B, LLAMA_8B) for rows in DECODE_ROWS for call in decoder_calls(rows, shape)]
    return records.merge([key_record(facts, LINEAR_INT4, m=m, n=n, k=k, dtype="bfloat16", group=GROUP)
                          for m, n, k in calls])


def gated_key_records(facts) -> list[records.KeyRecord]:
    """The gated pair's keys: the gate's shape (the up's too) of each model at GATED_ROWS rows."""
    return records.merge([key_record(facts, GATED_LINEAR_INT4, m=rows, n=shape["intermediate"], k=shape["hidden"],
                                     dtype="bfloat16", group=GROUP)
                          for rows in GATED_ROWS for shape in (LLAMA_8B, LLAMA_1B)])


def main() -> int:
    facts = h200_facts()
    save_keys(keys_path("int4"), key_records(facts), facts)
    save_keys(keys_path("int4-gated"), gated_key_records(facts), facts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
