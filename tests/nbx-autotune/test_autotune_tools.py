"""The GPU scripts of issue 16 on the CPU: bucket_loss lists its pairs from the shipped certificates; first_run loads."""
from __future__ import annotations

import importlib.util
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
