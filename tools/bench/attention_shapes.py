"""The cases of tools/bench/bench_attention.py, torch-free, so tools/write_attention_keys.py lists
their launch keys without importing torch.

PREFILL: (head dim, query heads, KV heads, tokens, causal), one bf16 sequence.
DECODE: (batch, context), one query token, GQA 32/8, head dim 128.
ROPE_TOKENS: token counts of the rope cases (q [T, 32, 128], k [T, 8, 128]).
"""
PREFILL = [(128, 32, hk, n, causal) for hk in (32, 8) for n in (1024, 4096, 16384) for causal in (False, True)]
PREFILL += [(d, 32, 8, 4096, causal) for d in (64, 256) for causal in (False, True)]
DECODE = [(1, 1024), (1, 32768), (1, 131072), (8, 8192), (8, 32768), (64, 1024), (64, 8192), (64, 32768)]
DECODE_HEADS = (32, 8, 128)   # query heads, KV heads, head dim
ROPE_TOKENS = (4096, 16384)
