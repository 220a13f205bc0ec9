"""Write the sort and top-k keys the H200 benchmarks form, without a GPU:
certificates/keys/nvidia-h200-140gb-sort.json.

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') python3 tools/write_sort_keys.py

The keys of tools/bench/bench_datamove.py's sort and top-k cases (a key is the row length
to a power of two, the element count's class and the dtype, classed by the device file's ladders):
`select` (top-k's radix select) on [1|64, 151936] float32, `radix_sort` on 2^24 and 2^26 float32
keys and [64, 151936] float32 rows. (The sampling step's keys: tools/write_sampling_keys.py.)
"""
from __future__ import annotations

from nbx.autotune import records
from nbx.kernels.rows import pow2_at_least
from nbx.kernels.sort.radix import RADIX_SORT
from nbx.kernels.sort.topk import SELECT

from keys_files import h200_facts, key_record, keys_path, save_keys
VOCAB = 151936
CALLS = [(SELECT, 1, VOCAB, "float32"), (SELECT, 64, VOCAB, "float32"),
         (RADIX_SORT, 1, 1 << 24, "float32"), (RADIX_SORT, 1, 1 << 26, "float32"), (RADIX_SORT, 64, VOCAB, "float32")]


def record(facts, tunable, rows: int, n: int, dtype: str) -> records.KeyRecord:
    return key_record(facts, tunable, width=pow2_at_least(n), elements=rows * n, dtype=dtype)


def main() -> int:
    facts = h200_facts()
    save_keys(keys_path("sort"), records.merge([record(facts, *c) for c in CALLS]),
              facts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
