"""The kernel families that nbx.autotune certifies: their declarations, keys and workloads.

The certifier screens each candidate on the family's workload, which must launch the wrapper's own
code path with the candidate's setting; here that path runs on `interp` at small representative
shapes, and every candidate of the declared space must agree with the float64 oracle.
"""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx import autotune
from nbx.autotune import keys, screen
from nbx.core import device_files
from nbx.kernels import launch

FAMILIES = ("elementwise", "elementwise_heavy", "softmax", "norm", "reduction")


def _hopper():
    return device_files.for_arch("sm_90")


def test_every_tiled_family_declares_a_tunable_whose_parameters_its_tiles_hold(interp):
    declared = autotune.declared()
    for family in FAMILIES:
        assert family in declared, f"{family} declares no tunable"
        for facts in (_hopper(), launch.facts(interp)):
            default = declared[family].default(facts)
            assert set(default) == set(declared[family].params)


def test_the_device_file_tile_is_always_among_the_candidates(interp):
    facts = _hopper()
    for family in FAMILIES:
        tunable = autotune.lookup(family)
        kept, _ = tunable.candidates(facts, None)
        assert tunable.default(facts) in kept


@pytest.mark.parametrize("n,dtype,strided,text", [
    (1000, "float32", False, "n=65536,dtype=f32,strided=0"),
    (70000, "bfloat16", True, "n=1048576,dtype=bf16,strided=1"),
    (5, "bool", False, "n=65536,dtype=b1,strided=0"),
])
def test_elementwise_keys_class_the_element_count_on_the_h200_ladder(interp, n, dtype, strided, text):
    tunable = autotune.lookup("elementwise")
    assert str(keys.form("elementwise", tunable.key, _hopper(), n=n, dtype=dtype, strided=strided)) == text


def test_row_keys_round_the_width_up_to_a_power_of_two():
    from nbx.kernels.rows import ROW_KEY
    key = keys.form("softmax", ROW_KEY, _hopper(), width=8192, elements=32 * 151936, dtype="float16",
                    strided=False)
    assert str(key) == "width=8192,elements=8388608,dtype=f16,strided=0"


WORKLOADS = [
    ("elementwise", {"n": 37, "dtype": "float32", "strided": False}),
    ("elementwise", {"n": 40, "dtype": "bfloat16", "strided": True}),
    ("elementwise", {"n": 33, "dtype": "int16", "strided": False}),
    ("elementwise", {"n": 29, "dtype": "bool", "strided": True}),
    ("elementwise", {"n": 31, "dtype": "float8_e4m3fn", "strided": False}),
    ("elementwise", {"n": 30, "dtype": "float8_e5m2", "strided": True}),
    ("elementwise", {"n": 35, "dtype": "float64", "strided": False}),
    ("elementwise", {"n": 36, "dtype": "float16", "strided": False}),
    ("elementwise_heavy", {"n": 37, "dtype": "bfloat16", "strided": False}),
    ("elementwise_heavy", {"n": 38, "dtype": "float32", "strided": True}),
    ("elementwise_heavy", {"n": 39, "dtype": "float64", "strided": False}),
    ("softmax", {"width": 64, "elements": 64 * 5, "dtype": "float32", "strided": False}),
    ("softmax", {"width": 16, "elements": 16 * 6, "dtype": "float16", "strided": True}),
    ("norm", {"width": 32, "elements": 32 * 3, "dtype": "bfloat16", "strided": False}),
    ("reduction", {"width": 128, "elements": 128 * 3, "dtype": "float32", "strided": False}),
    ("reduction", {"width": 8, "elements": 8 * 9, "dtype": "int32", "strided": True}),
]


@pytest.mark.parametrize("family,rep", WORKLOADS, ids=[f"{f}-{r['dtype']}" for f, r in WORKLOADS])
def test_every_candidate_of_a_family_passes_the_screen_on_its_workload(interp, family, rep):
    tunable = autotune.lookup(family)
    rep = {**rep, "dtype": nbx.as_dtype(rep["dtype"])}
    facts = _hopper()
    kept, _ = tunable.candidates(facts, rep)
    work = tunable.workload(rep, interp)
    result = screen.run(work, kept[:3] + kept[-1:], launch.facts(interp))
    assert not result.excluded, [v.reason for v in result.excluded]
    assert len(result.passed) == len(kept[:3] + kept[-1:])


def test_a_setting_given_to_the_wrapper_decides_its_launch(interp):
    """The certifier's setting, not the served one, decides the launch: the plan takes its block and
    the grid follows it."""
    from nbx.kernels.elementwise import functions, launch_elementwise
    a = nbx.asarray(np.arange(10, dtype=np.float32), device=interp)
    out = launch.output((10,), a.dtype, interp)
    launch_elementwise(functions.add, [a, a], a.dtype, a.dtype, out=out, setting={"block": 16, "num_warps": 1})
    np.testing.assert_array_equal(out.numpy(), 2 * np.arange(10, dtype=np.float32))
    from nbx.kernels.elementwise import callsite
    plan = callsite.plan_for(functions.add, [a, a], a.dtype, a.dtype, out, setting={"block": 16, "num_warps": 1})
    assert plan.grid == (1,) and plan.meta["BLOCK"] == 16


def test_compute_bound_ops_take_their_own_tunable_and_memory_bound_ones_the_plain_one(interp, monkeypatch):
    """gelu is served by elementwise_heavy (ranked on gelu), an add by elementwise (ranked on an add):
    one tile cannot serve both on the H200 (elementwise/tuning.py)."""
    from nbx.kernels import plans
    asked = []
    real = autotune.setting
    monkeypatch.setattr(autotune, "setting", lambda tunable, device, **key: asked.append(tunable.name)
                        or real(tunable, device, **key))
    plans.reset()
    x = nbx.asarray(np.linspace(-3.0, 3.0, 40, dtype=np.float32), device=interp)
    np.testing.assert_allclose(nbx.gelu(x).numpy(), oracle_gelu(x.numpy()), rtol=1e-6, atol=1e-7)
    nbx.add(x, x)
    assert asked == ["elementwise_heavy", "elementwise"]


def oracle_gelu(values):
    from nbx.core.reference import oracle
    return oracle("gelu", nbx.asarray(values))
