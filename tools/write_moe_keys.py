"""Write the mixture-of-experts keys tools/bench/bench_moe.py forms, without a GPU:
certificates/keys/nvidia-h200-140gb-moe.json.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') python3 tools/write_moe_keys.py

The expert GEMMs' key is a function of the layer's sizes (nbx.kernels.moe.tuning.launch_key: tokens
to the power of two at or above, inter and hidden classed by the device file's dims ladder through
nbx.autotune.keys.form): tokens, experts, top_k, the intermediate and
hidden sizes, the dtype and the weights' form. bench_moe's layers (LAYERS: Qwen3-30B-A3B's 128
experts top-8 2048/768 and Mixtral's 8 experts top-2 4096/14336) at its token counts (TOKENS:
prefill 512 and 4096, decode 1, 8 and 64), bfloat16, dense weights; a count of BAND_TOKENS or fewer
takes `moe_band`, the others `moe_experts` (launch_key says which). bench_moe also routes every count
(`moe_route`, keyed by the tokens, experts, top_k, the logits' dtype and the routing: bench_moe's router
logits are float32, softmax) and aligns them for the layer of given experts (`moe_align`, keyed by the
pairs and experts; nbx.kernels.moe.routing_tuning); the routed layer's band routes and aligns in one
program that takes neither setting.
"""
from __future__ import annotations

from nbx.autotune import records
from nbx.kernels.moe.routing_tuning import ALIGN, ROUTE, align_key, route_key
from nbx.kernels.moe.tuning import launch_key

from keys_files import bench_constants, h200_facts, key_record, keys_path, save_keys



def record(facts, tokens, count, k, hidden, inter, weights="dense") -> records.KeyRecord:
    tunable, fields = launch_key(tokens, count, k, inter, hidden, "bfloat16", weights)
    return key_record(facts, tunable, **fields)



def routing_records(facts, tokens, count, k) -> list[records.KeyRecord]:
    """The routing's and alignment's keys of a layer at tokens (moe_route and moe_experts' own alignment
    launch at every count; only the routed layer's band takes neither)."""
    return [key_record(facts, ROUTE, **route_key(tokens, count, k, "float32")),
            key_record(facts, ALIGN, **align_key(tokens * k, count))]


def main() -> int:
    facts = h200_facts()
    bench = bench_constants("bench_moe.py", {"LAYERS", "TOKENS"})
    layers = [(tokens, *layer) for layer in bench["LAYERS"].values() for tokens in bench["TOKENS"]]
    recs = records.merge([record(facts, tokens, count, k, hidden, inter) for tokens, count, k, hidden, inter in layers] +
                         [r for tokens, count, k, _, _ in layers for r in routing_records(facts, tokens, count, k)])
    save_keys(keys_path("moe"), recs, facts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
