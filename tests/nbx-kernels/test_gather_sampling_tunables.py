"""The take rows kernel's and the sampling step's tunables (gather/tuning.py, sampling/tuning.py):
their candidates and keys on the H200's device file, their workloads screened on interp at tiny
representatives (every screened candidate agrees exactly with the reference), the served setting
deciding the launch, and the shipped keys files being what tools/write_{gather,sampling}_keys.py
write."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import nbx.core as nbx
from nbx import autotune
from nbx.autotune import keys, records, screen
from nbx.core import device_files
from nbx.kernels import launch, plans

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hopper():
    return device_files.for_arch("sm_90")


def writer(name: str):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(ROOT / "tools"))


def test_take_and_sampling_declare_tunables_whose_defaults_are_the_device_files_tiles(interp, hopper):
    for name, tiles in (("take", "gather"), ("sampling", "sampling")):
        tunable = autotune.lookup(name)
        for facts in (hopper, launch.facts(interp)):
            record = facts.value(f"tiles.{tiles}")
            assert tunable.default(facts) == {p: record[p] for p in tunable.params}
        kept, _ = tunable.candidates(hopper, None)
        assert tunable.default(hopper) in kept


@pytest.mark.parametrize("row_bytes,ids,text", [
    (8192, 1, "row_bytes=8192,ids=1"), (7168, 3, "row_bytes=8192,ids=4"), (4096, 1024, "row_bytes=4096,ids=1024"),
    (2, 8192, "row_bytes=2,ids=16384"), (3000, 17, "row_bytes=4096,ids=64")])
def test_take_keys_are_the_row_bytes_to_a_power_of_two_and_the_rows_taken_to_a_power_of_four(
        hopper, row_bytes, ids, text):
    from nbx.kernels.gather.tuning import TAKE, take_key
    assert str(keys.form("take", TAKE.key, hopper, **take_key(row_bytes, ids))) == text


def test_sampling_keys_class_the_vocabulary_and_rows_on_the_dims_ladder(hopper):
    from nbx.kernels.sampling.tuning import SAMPLING, sampling_key
    form = lambda rows, vocab, dtype: str(keys.form("sampling", SAMPLING.key, hopper,  # noqa: E731
                                                    **sampling_key(rows, vocab, dtype)))
    assert form(64, 151936, "bfloat16") == "vocab=163840,rows=64,dtype=bf16"
    assert form(3, 128256, "float32") == "vocab=131072,rows=3,dtype=f32"


def test_settings_that_launch_alike_are_pruned_keeping_the_device_files_tile(hopper):
    from nbx.kernels.gather.tuning import TAKE
    from nbx.kernels.sampling.tuning import SAMPLING
    one_row, _ = SAMPLING.candidates(hopper, {"rows": 1, "vocab": 163840, "dtype": nbx.bfloat16})
    assert SAMPLING.default(hopper) in one_row and {s["programs"] for s in one_row} == {1056}  # one row: 80 blocks
    one_id, pruned = TAKE.candidates(hopper, {"row_bytes": 64, "ids": 4})
    assert {s["row_bytes"] for s in one_id} == {1024, TAKE.default(hopper)["row_bytes"]}
    assert any("bytes a program" in why for _, why in pruned)


def test_every_shipped_key_has_fewer_than_40_candidates_and_the_default_among_them(hopper):
    for name in ("write_gather_keys", "write_sampling_keys"):
        for rec in writer(name).key_records(hopper):
            tunable = autotune.lookup(rec.kernel)
            rep = keys.representative(keys.parse(tunable.name, tunable.key, rec.key, hopper, rec.observed),
                                      tunable.key, hopper)
            kept, _ = tunable.candidates(hopper, rep)
            assert 1 < len(kept) < 40, (rec.key, len(kept))
            assert tunable.default(hopper) in kept, rec.key


@pytest.mark.parametrize("rep", [{"row_bytes": 64, "ids": 64}, {"row_bytes": 2, "ids": 16}])
def test_every_screened_take_candidate_agrees_with_the_reference_on_its_workload(interp, hopper, rep):
    tunable = autotune.lookup("take")
    kept, _ = tunable.candidates(hopper, rep)
    chosen = kept[:2] + kept[-1:]
    result = screen.run(tunable.workload(rep, interp), chosen, launch.facts(interp))
    assert not result.excluded, [v.reason for v in result.excluded]
    assert len(result.passed) == len(chosen)


def test_the_sampling_workload_draws_the_references_tokens_under_two_tiles(interp):
    """Interp-sized tiles (the H200's 1024-4096 blocks and 4096-weight band sorts take the interpreter
    seconds): its own device file's, and one of half the block, more chunks a row, a smaller band cap."""
    tunable = autotune.lookup("sampling")
    default = tunable.default(launch.facts(interp))
    other = dict(block=default["block"] // 2, programs=2 * default["programs"], candidates=default["candidates"] // 2,
                 num_warps=4)
    rep = {"rows": 2, "vocab": 100, "dtype": nbx.bfloat16}
    result = screen.run(tunable.workload(rep, interp), [default, other], launch.facts(interp))
    assert not result.excluded, [v.reason for v in result.excluded]
    assert len(result.passed) == 2


def test_a_wrong_setting_fails_no_screen_because_a_workload_compares_exactly(interp):
    """The screen's reference is exact (words and tokens): a workload whose output differs is refused."""
    from nbx.kernels.gather.tuning import take_workload
    work = take_workload({"row_bytes": 32, "ids": 4}, interp)
    bad = screen.TensorWorkload(work.out, work.run, lambda r: work.reference(r) + 1)
    result = screen.run(bad, [{"row_bytes": 1024, "num_warps": 4}], launch.facts(interp))
    assert len(result.excluded) == 1


def test_take_and_sample_ask_their_tunables_for_the_launch_keys_tile(interp, monkeypatch):
    asked = []
    real = autotune.setting
    monkeypatch.setattr(autotune, "setting", lambda tunable, device, **key: tunable.name in ("take", "sampling")
                        and asked.append((tunable.name, key)) or real(tunable, device, **key))
    plans.reset()
    table = nbx.asarray(np.arange(40 * 12, dtype=np.float32).reshape(40, 12), device=interp).to(dtype=nbx.bfloat16)
    ids = nbx.asarray(np.array([3, 39, 0], np.int64), device=interp)
    np.testing.assert_array_equal(nbx.embedding(ids, table).numpy(), table.numpy()[[3, 39, 0]])
    logits = nbx.asarray(np.linspace(-2, 2, 2 * 50, dtype=np.float32).reshape(2, 50), device=interp)
    nbx.sample(logits, temperature=1.0, top_p=0.9, generator=nbx.Generator(seed=3))
    assert asked == [("take", {"row_bytes": 32, "ids": 4}),
                     ("sampling", {"vocab": 50, "rows": 2, "dtype": nbx.float32})]


def test_a_setting_given_to_take_decides_its_program_tile(interp):
    from nbx.kernels.gather import _plan_of_take
    table = nbx.asarray(np.zeros((10, 64), np.float32), device=interp)
    ids = nbx.asarray(np.arange(8, dtype=np.int64), device=interp)
    wide = _plan_of_take(table, ids, 0, {"row_bytes": 1024, "num_warps": 4})
    narrow = _plan_of_take(table, ids, 0, {"row_bytes": 64, "num_warps": 1})
    assert wide.detail[:2] == (4, 64) and narrow.detail[:2] == (1, 16)
    assert narrow.launches[0].meta["num_warps"] == 1


@pytest.mark.parametrize("name,file", [("write_gather_keys", "gather"), ("write_sampling_keys", "sampling")])
def test_the_shipped_keys_files_are_what_their_writers_write(hopper, tmp_path, name, file):
    written = tmp_path / "keys.json"
    records.save(written, writer(name).key_records(hopper))
    shipped = ROOT / "certificates" / "keys" / f"nvidia-h200-140gb-{file}.json"
    assert written.read_bytes() == shipped.read_bytes()
