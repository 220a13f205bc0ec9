"""The certifier's loop and `nbx autotune certify|check|coverage`, on the CPU with the fake kernel."""
from __future__ import annotations

import io
import json
import re

import pytest
from nbx.autotune import candidates, certify, records, store
from nbx.autotune import cli as autotune_cli
from nbx.autotune.records import KeyRecord
from nbx.core import cli

H200, COMPILER = "nvidia-h200-140gb", "triton-3.6.0-cuda"
LADDER = ({"up_to": 65536, "step": 65536}, {"up_to": None, "step": 1 << 20})  # a short top row keeps the test fast


@pytest.fixture
def kernel(fakes, monkeypatch):
    clock = fakes.Clock()
    tunable = fakes.make_tunable(clock)
    monkeypatch.setattr(candidates, "_registry", {tunable.name: tunable})
    monkeypatch.setattr(autotune_cli, "_load_kernels", candidates.declared)
    return tunable, clock


def recorded():
    return [
        KeyRecord("fake_scale", "n=65536,dtype=f32", "nvidia/hopper", H200, COMPILER, {"n": 900}),
        KeyRecord("fake_scale", "n=1048576,dtype=f32", "nvidia/hopper", H200, COMPILER, {"n": 70_000}),
        KeyRecord("fake_scale", "n=65536,dtype=f16", "nvidia/ampere", H200, COMPILER, {}),
        KeyRecord("gone", "n=65536", "nvidia/hopper", H200, COMPILER, {}),
        KeyRecord("fake_scale", "n=65536,dtype=f64", "nvidia/hopper", "nvidia-h100-hbm3-80gb", COMPILER, {}),
    ]


def run_certify(fakes, hopper, kernel, tmp_path, missing_only=False):
    tunable, clock = kernel
    progress = io.StringIO()
    facts = fakes.Overlay(hopper, autotune__buckets__elements=LADDER)
    done = certify.certify(recorded(), tunables={tunable.name: tunable}, facts=facts, identity=fakes.IDENTITY,
                           device=None, timer=fakes.FakeTimer(clock), out=tmp_path / "out", warmup=0, repeats=1,
                           progress=progress, missing_only=missing_only)
    return done, progress.getvalue()


def test_certify_of_missing_keys_only_proves_none_that_the_tree_already_certifies(fakes, hopper, kernel, tmp_path):
    first, _ = run_certify(fakes, hopper, kernel, tmp_path, missing_only=True)
    assert len(first.certified) == 2
    again, progress = run_certify(fakes, hopper, kernel, tmp_path, missing_only=True)
    assert again.certified == []
    assert [(k, key) for k, key, why in again.skipped if why.startswith("certified already")] == [
        ("fake_scale", "n=65536,dtype=f32"), ("fake_scale", "n=1048576,dtype=f32")]
    assert len(progress.splitlines()) == 1  # only the refused key of a kernel nobody declares is tried


def test_certify_proves_each_key_writes_it_and_lists_what_it_refused_or_skipped(fakes, hopper, kernel, tmp_path):
    done, progress = run_certify(fakes, hopper, kernel, tmp_path)
    assert [(k, key) for k, key, _, _ in done.certified] == [("fake_scale", "n=65536,dtype=f32"),
                                                             ("fake_scale", "n=1048576,dtype=f32")]
    assert done.refused == [
        ("fake_scale", "n=65536,dtype=f16", "classed by the ladders of nvidia/ampere, this device's file is "
                                            "nvidia/hopper: record the keys again"),
        ("gone", "n=65536", "NbxError: no installed kernel declares 'gone' (declared: ['fake_scale'])")]
    assert done.skipped == [("fake_scale", "n=65536,dtype=f64", "recorded on nvidia-h100-hbm3-80gb")]
    path = tmp_path / "out" / "nvidia" / H200 / COMPILER / "fake_scale.json"
    cert = store.read(path, kernel[0])
    assert cert.entries["n=1048576,dtype=f32"].proof["representative"] == {"n": 70_000, "dtype": "float32"}
    lines = progress.splitlines()
    assert len(lines) == 3
    assert re.fullmatch(r"\[#{6}-{14}\] 1/3 fake_scale n=65536,dtype=f32: \{'block': 128, 'num_warps': 1\} "
                        r"0\.31 ms \(\d+\.\d s; about \d+ s left\)", lines[0]), lines[0]
    assert lines[2].startswith("[####################] 3/3 gone n=65536: refused (NbxError)")


def test_check_validates_every_file_and_names_the_refused_ones(fakes, hopper, kernel, tmp_path, capsys):
    run_certify(fakes, hopper, kernel, tmp_path)
    tree = tmp_path / "out"
    assert cli.main(["autotune", "check", str(tree)]) == 0
    out = capsys.readouterr().out
    assert "ok       " in out and "fake_scale.json (2 key(s))" in out
    assert "nbx autotune check: 1 certificate file(s), 0 refused" in out
    path = tree / "nvidia" / H200 / COMPILER / "fake_scale.json"
    doc = json.loads(path.read_text())
    doc["compiler"] = "triton-3.5.0-cuda"
    path.write_text(json.dumps(doc))
    assert cli.main(["autotune", "check", str(tree)]) == 1
    out = capsys.readouterr().out
    assert (f"REFUSED  {path}: compiler says 'triton-3.5.0-cuda' but the file lies where 'triton-3.6.0-cuda' is "
            f"expected") in out
    assert "nbx autotune check: 1 certificate file(s), 1 refused" in out


def test_coverage_lists_the_keys_without_a_certificate_and_fails_until_all_are(fakes, hopper, kernel, tmp_path,
                                                                             capsys):
    run_certify(fakes, hopper, kernel, tmp_path)
    keys_file = tmp_path / "keys.json"
    records.save(keys_file, recorded()[:2] + [KeyRecord("fake_scale", "n=65536,dtype=f16", "nvidia/hopper", H200,
                                                        COMPILER, {})])
    args = ["autotune", "coverage", "--keys", str(keys_file), "--certificates", str(tmp_path / "out")]
    assert cli.main(args) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [f"missing  fake_scale n=65536,dtype=f16 ({H200}, {COMPILER}): not certified",
                   "nbx autotune coverage: 2 of 3 key(s) certified"]
    records.save(keys_file, [])  # merging nothing keeps the file as it is
    assert len(records.load(keys_file)) == 3


def test_coverage_of_a_census_without_a_device_class_is_refused_by_name(kernel, tmp_path, capsys):
    keys_file = tmp_path / "census.json"
    records.save(keys_file, [KeyRecord("fake_scale", "n=65536,dtype=f32", "nvidia/hopper")])
    assert cli.main(["autotune", "coverage", "--keys", str(keys_file)]) == 2
    assert ("records no device class or compiler for fake_scale n=65536,dtype=f32 (a census made without a "
            "device); give --device-class and --compiler") in capsys.readouterr().err
    assert cli.main(["autotune", "coverage", "--keys", str(keys_file), "--device-class", H200, "--compiler",
                     COMPILER, "--certificates", str(tmp_path)]) == 1


def test_certify_on_a_device_without_a_class_is_refused_in_one_line(kernel, tmp_path, capsys):
    keys_file = tmp_path / "keys.json"
    records.save(keys_file, recorded()[:1])
    status = cli.main(["autotune", "certify", "--device-class", H200, "--keys", str(keys_file), "--out",
                       str(tmp_path / "out"), "--device", "cpu"])
    assert status == 2
    assert capsys.readouterr().err.strip() == (
        "nbx autotune certify: DeviceClassError: device cpu has no vendor known to nbx.autotune (known device "
        "types: ['cuda', 'hip', 'interp', 'metal'])")


def test_a_malformed_keys_file_is_refused_by_name(kernel, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": 1, "kind": "nbx-autotune-keys", "keys": [{"kernel": "k"}]}))
    assert cli.main(["autotune", "coverage", "--keys", str(bad), "--device-class", H200, "--compiler",
                     COMPILER]) == 2
    assert f"keys file {bad}: keys[0] must have exactly the fields" in capsys.readouterr().err


def test_record_without_a_command_says_how_to_give_one(capsys):
    assert cli.main(["autotune", "record", "--out", "k.json"]) == 2
    assert "give the command to run after --" in capsys.readouterr().err


def test_compile_ahead_launches_each_key_to_prove_in_exactly_one_shard_and_times_none(fakes, hopper, kernel,
                                                                                      tmp_path):
    tunable, clock = kernel
    facts = fakes.Overlay(hopper, autotune__buckets__elements=LADDER)
    screened = [certify.compile_ahead(recorded(), tunables={tunable.name: tunable}, facts=facts,
                                      identity=fakes.IDENTITY, device=None, out=tmp_path / "out", shard=i, shards=2)
                for i in range(2)]
    # the two keys of this class and device file (the others are certify's to refuse), six candidates each,
    # one key a shard
    assert screened == [6, 6]
    assert clock.launches == 2 * 6 and clock.now == pytest.approx(sum(  # each candidate of each key ran once
        ms + 0.01 * w for ms in fakes.BLOCK_MS.values() for w in (1, 2)) * 2)
    assert not (tmp_path / "out").exists()


def _loads(owned):
    return [sum(part.stop - part.start for _, part in parts) for parts in owned]


def _covered(owned, counts):
    """Every candidate of every key in exactly one shard's part."""
    seen = sorted((i, c) for parts in owned for i, part in parts for c in range(part.start, part.stop))
    return seen == [(i, c) for i, n in enumerate(counts) for c in range(n)]


def test_compile_shards_take_whole_keys_balanced_by_their_candidate_counts():
    counts = [29, 5, 29, 15, 15, 10, 10, 33, 8]   # attention, copies and a radix sort key, as on the H200
    owned = certify.shard_parts(counts, 4)
    assert _covered(owned, counts)
    assert all(part == slice(0, counts[i]) for parts in owned for i, part in parts)   # none above the share of 39
    assert sorted(_loads(owned)) == [38, 38, 39, 39]   # largest first: 33, 29, 29, 15 alone, then the lightest
    assert owned == certify.shard_parts(counts, 4)   # every shard's process computes the same split
    assert _loads(certify.shard_parts([3, 3], 4)) == [2, 2, 1, 1]   # two keys on four shards: each cut in two


def test_a_key_above_a_shards_share_is_split_over_the_idle_shards():
    # the H200's three radix sort keys on 16 compile jobs: 3 shards compiled for minutes, 13 idled
    counts = [33, 33, 30]
    owned = certify.shard_parts(counts, 16)
    assert _covered(owned, counts)
    assert max(_loads(owned)) == 7 and min(_loads(owned)) == 5   # 16 parts of 5 to 7 (33 in 6, 33 in 5, 30 in 5)
    assert all(len(parts) == 1 for parts in owned)   # a shard builds one workload
    assert certify.shard_parts([0, 5], 2) == [[(1, slice(2, 5))], [(1, slice(0, 2))]]   # a key of none: no part; larger first


def test_compile_jobs_start_one_certify_process_per_shard_with_the_same_keys_and_wait_for_all(monkeypatch, capsys):
    import argparse
    started = []

    class Job:
        def __init__(self, command, env=None):   # subprocess.Popen's signature, as run_shards calls it
            started.append(command)

        def wait(self):
            return 0

    monkeypatch.setattr(autotune_cli.subprocess, "Popen", Job)
    args = argparse.Namespace(device_class=H200, keys="k.json", out="tree", device="cuda:0", kernel=["matmul"],
                              missing=True, compile_jobs=3)
    autotune_cli._compile_in_shards(args)
    assert [c[-2:] for c in started] == [["--compile-shard", "0"], ["--compile-shard", "1"], ["--compile-shard", "2"]]
    for command in started:
        assert command[1:5] == ["-m", "nbx.core.cli", "autotune", "certify"]
        assert command[5:15] == ["--device-class", H200, "--keys", "k.json", "--out", "tree", "--device", "cuda:0",
                                 "--compile-jobs", "3"]
        assert "--kernel=matmul" in command and "--missing" in command
    assert "3 compile shards" in capsys.readouterr().err
