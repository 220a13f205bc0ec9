"""Write the `sampling` keys (the row-split sampling step's tile) that the H200 benchmark and model
shapes form, without a GPU: certificates/keys/nvidia-h200-140gb-sampling.json.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') python3 tools/write_sampling_keys.py

A sampling key is the vocabulary and the rows on the device file's dims ladder and the logits'
dtype (nbx.kernels.sampling.tuning.sampling_key), so it is listed from the shapes:
tools/bench/bench_sampling.py's [1|64, VOCAB] bf16 logits (top-p, top-k + top-p, min-p and plain
draws share a key), and the decode steps of the models nbx runs (write_gather_keys.MODELS: a
128256-token vocabulary, the step's logits in the model's bf16) at batches 1 - 64.
"""
from __future__ import annotations

from nbx.autotune import records
from nbx.kernels.sampling.tuning import SAMPLING, sampling_key

from keys_files import bench_constants, h200_facts, key_record, keys_path, save_keys
from write_gather_keys import BATCHES, MODELS

BENCH_ROWS, DTYPE = (1, 64), "bfloat16"


def calls():
    """(rows, vocab) of each step."""
    vocab = bench_constants("bench_sampling.py", ["VOCAB"])["VOCAB"]
    found = [(rows, vocab) for rows in BENCH_ROWS]
    for model in MODELS.values():
        found += [(rows, model["vocab"]) for rows in BATCHES]
    return found


def key_records(facts) -> list[records.KeyRecord]:
    return records.merge([key_record(facts, SAMPLING, **sampling_key(rows, vocab, DTYPE)) for rows, vocab in calls()])


def main() -> int:
    facts = h200_facts()
    save_keys(keys_path("sampling"), key_records(facts), facts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
