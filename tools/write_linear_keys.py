"""Write the `linear` keys the H200 benchmarks form, without a GPU: certificates/keys/nvidia-h200-140gb-linear-*.json.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') python3 tools/write_linear_keys.py

A linear key is a function of the call's shapes (nbx.kernels.matmul.linear_tuning.launch_key, classed
by the device file's ladders through nbx.autotune.keys.form), so it can be listed from the shapes:

- decode:  tools/bench/bench_matmul.py's decode rows (DECODE_ROWS x DECODE_SHAPES) and one-token steps
           of tools/bench/bench_models.py's Llama-3.2-1B at batch 1 (M = 1: fused qkv, o, the gated
           gate/up pair, down, the tied lm_head of 128256);
- prefill: bench_matmul's GEMM shapes and its 8192^3 nn product, and the 1B's 512-token prompt;
- batch:   the 1B's one-token steps at M = 2, 4, 8, 16 (bench_models --batch), certified after;
- fp:      bench_matmul's fp32 group (4096^3 IEEE nn and nt, TF32 and 3xTF32 nt), its fp8 group (float8
           e4m3 with per-row scales, form "scaled", bfloat16 out) and its 8192^3 nn bfloat16 product
           (also in prefill: this file certifies alone in ~150 s), and its batched group (bmm).

Every call is bfloat16, x dense and the weight [N, K] read through its transpose ("nt"; the square
product "nn"), no dtype override ("none" precision), and descriptor-eligible (16-byte rows, aligned
bases: torch's and nbx's allocations both are). nbx.models fuses q, k and v (one stacked
weight) and gate and up (gated_linear), which these keys and the census (nbx.autotune.census) follow.
"""
from __future__ import annotations

from nbx.autotune import records
from nbx.kernels.matmul.linear_tuning import LINEAR

from keys_files import bench_constants, h200_facts, key_record, keys_path, save_keys

LLAMA_1B = dict(hidden=2048, intermediate=8192, vocab=128256, heads=32, kv_heads=8, head_dim=64)
LLAMA_8B = dict(hidden=4096, intermediate=14336, vocab=128256, heads=32, kv_heads=8, head_dim=128)
PROMPT = 512


def decoder_calls(rows: int, m=LLAMA_1B) -> list[tuple]:
    """(M, N, K, form) of one layer's products and the lm_head over rows tokens (nbx.models.decoder)."""
    q, kv = m["heads"] * m["head_dim"], m["kv_heads"] * m["head_dim"]
    return [(rows, q + 2 * kv, m["hidden"], "plain"), (rows, m["hidden"], q, "plain"),
            (rows, m["intermediate"], m["hidden"], "gated"), (rows, m["hidden"], m["intermediate"], "plain")]


def record(facts, m, n, k, form="plain", layout="nt", dtype="bfloat16", precision="none") -> records.KeyRecord:
    return key_record(facts, LINEAR, m=m, n=n, k=k, dtype=dtype, layout=layout, form=form,
                      tma=form != "batched", precision=precision)   # a batch is read through pointers


def fp_records(facts) -> list[records.KeyRecord]:
    """bench_matmul's fp32, fp8 and batched groups and its 8192^3 product (its shapes, as it calls them)."""
    side = 4096
    recs = [record(facts, side, side, side, layout=layout, dtype="float32", precision=precision)
            for layout, precision in (("nn", "ieee"), ("nt", "ieee"), ("nt", "tf32"), ("nt", "tf32x3"))]
    recs += [record(facts, m, n, k, form="scaled") for m, n, k in ((4096, 4096, 4096), (4096, 14336, 4096),
                                                                    (16, 4096, 4096))]
    recs.append(record(facts, 8192, 8192, 8192, layout="nn"))
    recs.append(record(facts, 1024, 1024, 128, form="batched", layout="nn"))   # bmm: 32 entries in the bench
    return recs


def main() -> int:
    facts = h200_facts()
    bench = bench_constants("bench_matmul.py", {"GEMM", "DECODE_ROWS", "DECODE_SHAPES"})
    head = (1, LLAMA_1B["vocab"], LLAMA_1B["hidden"], "plain")   # the last position's logits, prefill and decode
    groups = {
        "decode": [(m, n, k, "plain") for n, k in bench["DECODE_SHAPES"] for m in bench["DECODE_ROWS"]]
        + decoder_calls(1) + [head],
        "prefill": [(m, n, k, "plain") for _, m, n, k in bench["GEMM"]] + decoder_calls(PROMPT),
        "batch": [call for rows in (2, 4, 8, 16) for call in decoder_calls(rows) + [(rows, *head[1:])]],
    }
    seen: set = set()
    for name, calls in groups.items():
        recs = [record(facts, *call) for call in calls]
        if name == "prefill":
            recs.append(record(facts, 8192, 8192, 8192, layout="nn"))   # bench_matmul's square nn product
        recs = [r for r in records.merge(recs) if r.identity not in seen]
        seen.update(r.identity for r in recs)
        save_keys(keys_path(f"linear-{name}"), recs, facts)
    # certified on its own: the 8192^3 key is repeated there
    save_keys(keys_path("linear-fp"), fp_records(facts), facts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
