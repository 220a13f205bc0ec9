"""Write the sort and top-k keys the H200 benchmarks form, without a GPU:
certificates/keys/nvidia-h200-140gb-sort.json.

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') python3 tools/write_sort_keys.py

The keys of tools/bench/bench_datamove.py's and bench_topk_methods.py's sort and top-k cases (a key
is the row length to a power of two, the element count's class and the dtype, classed by the device
file's ladders; top-k's also k to a power of two): `select` (top-k of long rows: the radix select or
the chunk candidates) of k = 50 and 1024 on [1|64, 151936] float32 and of k = 50 on [64, 151936]
bfloat16, `radix_sort` on 2^24 and 2^26 float32 keys and [64, 151936] float32 rows. (The sampling
step's keys: tools/write_sampling_keys.py.)
"""
from __future__ import annotations

from nbx.autotune import records
from nbx.kernels.rows import pow2_at_least
from nbx.kernels.sort.radix import RADIX_SORT
from nbx.kernels.sort.topk import SELECT

from keys_files import h200_facts, key_record, keys_path, save_keys
VOCAB = 151936
SELECTS = [(rows, k, "float32") for rows in (64, 1) for k in (50, 1024)] + [(64, 50, "bfloat16")]
SORTS = [(1, 1 << 24), (1, 1 << 26), (64, VOCAB)]


def key_records(facts) -> list[records.KeyRecord]:
    selects = [key_record(facts, SELECT, width=pow2_at_least(VOCAB), k=k, elements=rows * VOCAB, dtype=dtype)
               for rows, k, dtype in SELECTS]
    sorts = [key_record(facts, RADIX_SORT, width=pow2_at_least(n), elements=rows * n, dtype="float32")
             for rows, n in SORTS]
    return records.merge(sorts + selects)


def main() -> int:
    facts = h200_facts()
    save_keys(keys_path("sort"), key_records(facts), facts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
