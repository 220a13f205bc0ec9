"""Write the mixture-of-experts keys tools/bench/bench_moe.py forms, without a GPU:
certificates/keys/nvidia-h200-140gb-moe.json.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') python3 tools/write_moe_keys.py

The expert GEMMs' key is a function of the layer's sizes (nbx.kernels.moe.tuning.launch_key: tokens
to the power of two at or above, inter and hidden classed by the device file's dims ladder through
nbx.autotune.keys.form): tokens, experts, top_k, the intermediate and
hidden sizes, the dtype and the weights' form. bench_moe's layers (LAYERS: Qwen3-30B-A3B's 128
experts top-8 2048/768 and Mixtral's 8 experts top-2 4096/14336) at its token counts (TOKENS:
prefill 512 and 4096, decode 1, 8 and 64), bfloat16, dense weights; a count of BAND_TOKENS or fewer
takes `moe_band`, the others `moe_experts` (launch_key says which). Routing and alignment run at their device file tiles
(tiles.moe_route, tiles.moe_align): they have no tunable, hence no key.
"""
from __future__ import annotations

import ast
from pathlib import Path

from nbx.autotune import keys, lookup, records
from nbx.core import device_files
from nbx.kernels.moe.tuning import launch_key

ROOT = Path(__file__).resolve().parents[1]
CLASS, COMPILER = "nvidia-h200-140gb", "triton-3.6.0-cuda"   # the H200's, as in certificates/keys/


def bench_constants(names) -> dict:
    """LAYERS and TOKENS of bench_moe.py, read without importing it (it imports torch)."""
    tree = ast.parse((ROOT / "tools" / "bench" / "bench_moe.py").read_text())
    return {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in names}


def record(facts, tokens, count, k, hidden, inter, weights="dense") -> records.KeyRecord:
    tunable, fields = launch_key(tokens, count, k, inter, hidden, "bfloat16", weights)
    key = keys.form(tunable.name, tunable.key_fields, facts, **fields)
    return records.KeyRecord(tunable.name, str(key), facts.name, CLASS, COMPILER, dict(key.observed))


def candidates(facts, rec) -> list[dict]:
    tunable = lookup(rec.kernel)
    rep = keys.representative(keys.parse(tunable.name, tunable.key, rec.key, facts, rec.observed), tunable.key, facts)
    return tunable.candidates(facts, rep)[0]


def main() -> int:
    facts = device_files.for_arch("sm_90")
    bench = bench_constants({"LAYERS", "TOKENS"})
    recs = records.merge([record(facts, tokens, count, k, hidden, inter)
                          for count, k, hidden, inter in bench["LAYERS"].values() for tokens in bench["TOKENS"]])
    path = ROOT / "certificates" / "keys" / f"{CLASS}-moe.json"
    path.unlink(missing_ok=True)
    records.save(path, recs)
    for rec in recs:
        print(f"{rec.kernel:<12} {rec.key}: {len(candidates(facts, rec))} candidates")
    print(f"{path.relative_to(ROOT)}: {len(recs)} keys, {sum(len(candidates(facts, r)) for r in recs)} candidates")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
