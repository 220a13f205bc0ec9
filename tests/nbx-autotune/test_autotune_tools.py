"""The GPU scripts of issue 16 on the CPU: bucket_loss lists its pairs from the shipped certificates; first_run loads."""
from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path

from nbx.autotune import Identity, keys, space
from nbx.core.device import discover_plugins

BENCH = Path(__file__).resolve().parents[2] / "tools" / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bucket_loss_pairs_each_certified_key_with_the_classes_one_rung_either_side_of_each_size_field(hopper):
    discover_plugins()
    bucket_loss = _load("bucket_loss")
    identity = Identity("nvidia", "nvidia-h200-140gb", "triton-3.6.0-cuda")
    pairs = bucket_loss.jobs(identity, hopper, ["softmax", "matmul"], 3, 1, 1 << 26)
    assert {p[0] for p in pairs} == {"softmax", "matmul"}
    from nbx.autotune import declared
    for family, text, setting, name, signed, other in pairs:
        tunable = declared()[family]
        certified = keys.parse(family, tunable.key, text, hopper)
        moved = [f for f, a, b in zip(tunable.key_fields, certified.fields, other.fields) if a != b]
        assert [f[0] for f in moved] == [name] and abs(signed) == 1
        kind = dict(tunable.key_fields)[name]
        if kind == "dims":
            ladder = hopper.value("autotune.buckets.dims")
            assert space.class_index(ladder, dict(other.fields)[name]) - space.class_index(
                ladder, dict(certified.fields)[name]) == signed
        assert setting and set(setting) == set(tunable.params)
    assert len({p[1] for p in pairs if p[0] == "matmul"}) == 3
    only_m = bucket_loss.jobs(identity, hopper, ["matmul"], 3, 1, 1 << 26, moved_fields={"m"})
    assert only_m and {p[3] for p in only_m} == {"m"}
    assert sorted(map(str, only_m)) == sorted(str(p) for p in pairs if p[0] == "matmul" and p[3] == "m")


def test_first_run_lists_issue_16s_seven_shapes_in_two_dtypes():
    first_run = _load("first_run")
    assert len(first_run.SHAPES) == 7 and first_run.DTYPES == ("float32", "bfloat16")


def test_bucket_loss_proposes_the_coarsest_step_whose_losses_at_every_shorter_distance_meet_the_goals():
    bucket_loss = _load("bucket_loss")
    row = ("softmax", "elements", "up_to 1048576 step 1048576")
    wide = ("matmul", "m", "up_to 8192 step 128")
    losses = {row + (1,): [0.01, 0.02, 0.05], row + (2,): [0.02, 0.12],      # d=2 worst 12 %: x2 only
              wide + (1,): [0.04, 0.05]}                                      # median 4.5 %: keep
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bucket_loss.propose(losses, 2)
    lines = [line for line in out.getvalue().splitlines() if line and not line.startswith("#")]
    assert [line.split()[:2] for line in lines] == [["matmul", "m"], ["softmax", "elements"]]
    assert lines[0].endswith(" keep the step") and lines[1].endswith(" step x2")


def test_first_generate_times_a_load_and_two_generates_in_one_child_and_reports_its_counts(tmp_path, capsys, monkeypatch):
    """The child of tools/bench/first_generate.py (issue 16's model goal) on the cpu: a small seeded
    Llama loaded and generated twice; one JSON line with each part's seconds and the report's counts."""
    import json

    from nbx import models
    from nbx.models.writer import small_config
    monkeypatch.syspath_prepend(str(BENCH))
    first_generate = _load("first_generate")
    folder = models.write_checkpoint(tmp_path / "llama", small_config("LlamaForCausalLM"), seed=0, dtype="bfloat16")
    assert first_generate.child(str(folder), "cpu", 6, 2) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["first"] > 0 and line["second"] > 0 and line["swept"] == 0 and "line" in line


def test_on_the_simulated_cuda_each_neighbours_screen_compiles_the_specialization_its_keys_launch_then_loads():
    """first_run.py --count-compiles: issue 16's seven-shape run over the tests' simulated CUDA, each Triton
    launch bound by Triton's own binder for sm_90 and keyed by its cache key. Every compile a neighbour's
    screen makes is one the key's own launch reuses (none by a screen only: 33 of 89 were, screened on the
    key's smallest launch), and the autotune report (NBX_AUTOTUNE_REPORT's) counts the compiles and names
    what each recompiled kernel's specializations differ in. About 4 s (one process)."""
    import os
    import re
    import subprocess
    import sys
    root = BENCH.parents[1]
    env = dict(os.environ, TRITON_INTERPRET="0",
               PYTHONPATH=os.pathsep.join(str(p) for p in sorted((root / "packages").glob("*/src"))))
    for name in ("NBX_AUTOTUNE_SWEEP", "NBX_AUTOTUNE_NO_SWEEP", "NBX_AUTOTUNE_CERTIFIED_ONLY", "NBX_CACHE_DIR"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, str(BENCH / "first_run.py"), "--count-compiles"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = re.search(r"(\d+) distinct: (\d+) by the run only, (\d+) screened then reused by the key's launch, "
                        r"(\d+) by a screen only", done.stdout)
    assert summary, done.stdout[-2000:]
    total, run_only, shared, screen_only = map(int, summary.groups())
    assert screen_only == 0 and shared > 0 and total == run_only + shared <= 56, summary.group(0)
    assert "10 key(s) served without a sweep, 0 swept at runtime" in done.stdout and "30 from a neighbour" in done.stdout
    compiles = re.search(r"\[autotune\] compiles: (\d+) specialization\(s\) of \d+ kernel\(s\)", done.stderr)
    assert compiles and int(compiles.group(1)) == total, done.stderr[-2000:]
    softmax = [line for line in done.stderr.splitlines() if "recompiled nbx.kernels.softmax.kernel.softmax_rows_kernel"
               in line]
    assert softmax and "n: i32 | i32/16" in softmax[0], softmax
