"""What every tools/write_<family>_keys.py shares: the H200 keys files (certificates/keys/) written
without a GPU, each key formed as the family's wrappers form it (nbx.autotune.keys.form over the
device file's ladders) from the shapes of the benchmarks and models.

    key_record(facts, tunable, **fields)   one launch key, as `nbx autotune record` would list it
    save_keys(path, recs, facts)           the file written afresh; its keys and candidates printed
    keys_path(name), h200_facts()          certificates/keys/<class>-<name>.json, the device file keys are classed by
    bench_constants(bench, names)          constants of a benchmark read without importing it (torch)
"""
from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from nbx.autotune import keys, lookup, records

ROOT = Path(__file__).resolve().parents[1]
CLASS, COMPILER = "nvidia-h200-140gb", "triton-3.6.0-cuda"   # the H200's, as in certificates/keys/


def h200_facts():
    """The device file the H200's keys are classed by (no GPU needed)."""
    from nbx.core import device_files
    return device_files.for_arch("sm_90")


def keys_path(name: str) -> Path:
    """certificates/keys/<the H200's class>-<name>.json"""
    return ROOT / "certificates" / "keys" / f"{CLASS}-{name}.json"


def key_record(facts, tunable, **fields) -> records.KeyRecord:
    key = keys.form(tunable.name, tunable.key_fields, facts, **fields)
    return records.KeyRecord(tunable.name, str(key), facts.name, CLASS, COMPILER, dict(key.observed))


def candidate_count(facts, rec: records.KeyRecord) -> int:
    """How many settings the certifier would time for rec (its tunable's candidates at the key's representative)."""
    tunable = lookup(rec.kernel)
    rep = keys.representative(keys.parse(tunable.name, tunable.key, rec.key, facts, rec.observed), tunable.key, facts)
    return len(tunable.candidates(facts, rep)[0])


def save_keys(path: Path, recs, facts) -> None:
    """Write recs to path afresh; print each kernel's keys and candidates, then the file's."""
    path.unlink(missing_ok=True)
    records.save(path, recs)
    counts = {id(r): candidate_count(facts, r) for r in recs}
    by_kernel, candidates = Counter(r.kernel for r in recs), Counter()
    for r in recs:
        candidates[r.kernel] += counts[id(r)]
    for kernel in by_kernel:
        print(f"  {kernel}: {by_kernel[kernel]} keys, {candidates[kernel]} candidates")
    print(f"{path.relative_to(ROOT)}: {len(recs)} keys, {sum(counts.values())} candidates")


def bench_constants(bench: str, names) -> dict:
    """The module-level constants `names` of tools/bench/<bench>, read without importing it."""
    tree = ast.parse((ROOT / "tools" / "bench" / bench).read_text())
    return {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in names}
