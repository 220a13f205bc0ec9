"""Write the `take` keys (the embedding / index_select rows kernel's tile) that the H200 benchmark
and model shapes form, without a GPU: certificates/keys/nvidia-h200-140gb-gather.json.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') python3 tools/write_gather_keys.py

A take key is the row's bytes to a power of two and the rows taken in powers of four
(nbx.kernels.gather.tuning.take_key), so it is listed from the shapes: tools/bench/bench_datamove.py's
embedding of 1, 64, 1024 and 8192 ids from a 151936 x 4096 bf16 table (its loop's EMBEDDING_IDS), and
the token embeddings of the models nbx runs (MODELS: Llama-3.2-1B's 2048-wide and Llama-3.1-8B's
4096-wide bf16 rows) at decode batches 1 - 64 and prompts of 512 - 16k tokens. take_along_axis,
scatter, searchsorted and the compaction still read tiles.gather's block: no tunable, no key.
"""
from __future__ import annotations

from nbx.autotune import records
from nbx.kernels.gather.tuning import TAKE, take_key

from keys_files import h200_facts, key_record, keys_path, save_keys

BF16 = 2                                 # bytes
EMBEDDING_IDS, BENCH_WIDTH = (1, 64, 1024, 8192), 4096
MODELS = {"llama-3.2-1b": dict(hidden=2048, vocab=128256), "llama-3.1-8b": dict(hidden=4096, vocab=128256)}
BATCHES = (1, 2, 4, 8, 16, 32, 64)       # decode steps: one id a sequence
PROMPTS = (512, 1024, 2048, 4096, 8192, 16384)


def calls():
    """(row bytes, ids) of each take."""
    found = [(BENCH_WIDTH * BF16, ids) for ids in EMBEDDING_IDS]
    for model in MODELS.values():
        found += [(model["hidden"] * BF16, ids) for ids in BATCHES + PROMPTS]
    return found


def key_records(facts) -> list[records.KeyRecord]:
    return records.merge([key_record(facts, TAKE, **take_key(row_bytes, ids)) for row_bytes, ids in calls()])


def main() -> int:
    facts = h200_facts()
    save_keys(keys_path("gather"), key_records(facts), facts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
