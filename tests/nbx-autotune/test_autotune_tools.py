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
