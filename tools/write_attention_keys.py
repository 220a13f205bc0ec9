"""Write the attention family's launch keys for the H200, without a GPU: certificates/keys/nvidia-h200-140gb-attention.json
(decode and rope) and nvidia-h200-140gb-attention-prefill.json (the flash prefill, certified on its own: its
candidates cost the most to compile).

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') python3 tools/write_attention_keys.py

The keys of `attention` (flash prefill), `attention_decode` (split-K decode) and `rope` are functions
of the calls' shapes (nbx.kernels.attention.tuning, classed by the device file's ladders through
nbx.autotune.keys.form), so they can be listed from the shapes, as tools/write_linear_keys.py lists
linear's:

- tools/bench/bench_attention.py: its PREFILL (dense SDPA: K and V descriptor-ready), DECODE (one
  query token, GQA 32/8, D 128, contiguous and paged) and ROPE_TOKENS cases (q [T, 32, 128] and k
  [T, 8, 128]; the fused and the plain cache write of k and v, which run the rope kernel too, and the
  write that ropes q in the same launch, [T, 32 + 8, 128] of work);
- Llama-3.2-1B (32/8 heads, D 64) and Llama-3.1-8B (32/8, D 128) as nbx.models runs them: prefill
  of 512 - 16k tokens through paged_attention with packed queries (pointer loads: a paged cache is
  no descriptor's), decode steps over contexts of 1k - 128k (the plan's context is the longest
  rounded up to a power of two, so every power of two in between), batch 1 - 64, the rope of q and
  k in the cache write's one launch (rotary_kv_cache_write(q=): the key counts both tensors'
  elements), prefill and decode alike.

Every call is bfloat16. The decode keys hold the batch (sequences, to a power of two): the bench's
batches, and the models' decode steps at bench_models' batches (MODEL_BATCHES). The paged cache's block
size is in no key (a block table is read per key alike).
"""
from __future__ import annotations

import sys

from nbx.autotune import records
from nbx.kernels.attention.tuning import ATTENTION, ATTENTION_DECODE, ROPE

from keys_files import ROOT, h200_facts, key_record, keys_path, save_keys

sys.path.insert(0, str(ROOT / "tools" / "bench"))
from attention_shapes import DECODE, DECODE_HEADS, PREFILL, ROPE_TOKENS  # noqa: E402  (torch-free)

MODELS = {"llama-3.2-1b": dict(heads=32, kv_heads=8, head_dim=64, layers=16),
          "llama-3.1-8b": dict(heads=32, kv_heads=8, head_dim=128, layers=32)}
PROMPTS = (512, 1024, 2048, 4096, 8192, 16384)
CONTEXTS = tuple(2 ** p for p in range(10, 18))          # 1k .. 128k
BATCHES = (1, 2, 4, 8, 16, 32, 64)
MODEL_BATCHES = (1, 16)   # bench_models' --batch runs: the decode keys certified for the models
KV_CACHE_BUDGET = 64 << 30   # bytes of bf16 K and V a decode step's batch and context may hold on one H200
DTYPE = "bfloat16"



def prefill(facts, q_len, k_len, head_dim, group, causal, tma):
    return key_record(facts, ATTENTION, q_len=q_len, k_len=k_len, head_dim=head_dim, v_dim=head_dim, group=group,
                  dtype=DTYPE, causal=causal, tma=tma)


def decode(facts, k_len, rows, head_dim, paged, batch):
    return key_record(facts, ATTENTION_DECODE, k_len=k_len, rows=rows, head_dim=head_dim, dtype=DTYPE, paged=paged,
                      batch=batch)


def rope(facts, tokens, heads, head_dim):
    return key_record(facts, ROPE, elements=tokens * heads * head_dim, head_dim=head_dim, dtype=DTYPE)


def prefill_records(facts) -> list[records.KeyRecord]:
    """The bench's dense SDPA cases (descriptor-ready K and V) and the models' packed prompts over the paged
    cache (pointer loads), 512 - 16k tokens."""
    out = [prefill(facts, n, n, d, hq // hk, causal, True) for d, hq, hk, n, causal in PREFILL]
    for m in MODELS.values():
        out += [prefill(facts, n, n, m["head_dim"], m["heads"] // m["kv_heads"], True, False) for n in PROMPTS]
    return out


def decode_rope_records(facts) -> list[records.KeyRecord]:
    hq, hk, d = DECODE_HEADS
    out = []
    for batch, ctx in DECODE:   # one query token: a KV head's group of rows a program; contiguous and paged
        out += [decode(facts, ctx, hq // hk, d, paged, batch) for paged in (False, True)]
    for tokens in ROPE_TOKENS:
        out += [rope(facts, tokens, 32, 128), rope(facts, tokens, 8, 128), rope(facts, tokens, 32 + 8, 128)]
    for m in MODELS.values():
        group, d = m["heads"] // m["kv_heads"], m["head_dim"]
        for n in PROMPTS:   # a prompt's rope of q and k, fused with the cache write
            out += [rope(facts, n, m["heads"] + m["kv_heads"], d)]
        out += [decode(facts, ctx, group, d, True, batch) for ctx in CONTEXTS for batch in MODEL_BATCHES
                if batch * ctx * m["layers"] * m["kv_heads"] * d * 4 <= KV_CACHE_BUDGET]   # reachable steps only
        for batch in BATCHES:   # a decode step's rope of q and k: one token a sequence
            out += [rope(facts, batch, m["heads"] + m["kv_heads"], d)]
    return out


def all_records(facts) -> list[records.KeyRecord]:
    return prefill_records(facts) + decode_rope_records(facts)


def main() -> int:
    facts = h200_facts()
    save_keys(keys_path("attention"), records.merge(decode_rope_records(facts)), facts)
    save_keys(keys_path("attention-prefill"), records.merge(prefill_records(facts)), facts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
