"""moe_route and moe_align as tunables: their defaults, candidates and workloads (the integer
tables screened exactly), and the served settings reaching the launches."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx import autotune
from nbx.autotune import screen
from nbx.core import device_files
from nbx.kernels import launch


def test_each_routing_tunable_takes_its_default_from_every_device_file(interp):
    for name in ("moe_route", "moe_align"):
        tunable = autotune.lookup(name)
        for facts in (device_files.for_arch("sm_90"), device_files.for_arch("sm_80"), launch.facts(interp)):
            assert set(tunable.default(facts)) == set(tunable.params)


def test_routing_candidates_hold_1_to_16_logits_a_thread_and_no_more_tokens_than_the_key():
    from nbx.kernels.moe.routing_tuning import ROUTE_ELEMENTS_A_THREAD, route_key
    hopper = device_files.for_arch("sm_90")
    tunable = autotune.lookup("moe_route")
    rep = route_key(512, 128, 8, "float32")
    kept, pruned = tunable.candidates(hopper, rep)
    assert kept and pruned
    for s in kept:
        per_thread = s["block_tokens"] * 128 / (32 * s["num_warps"])
        assert 1 <= per_thread <= ROUTE_ELEMENTS_A_THREAD
    small = route_key(3, 8, 2, "bfloat16")   # 4 tokens to the power of two
    assert small["tokens"] == 4
    assert all(s["block_tokens"] <= 4 for s in tunable.candidates(hopper, small)[0])


def test_a_key_smaller_than_one_warp_keeps_its_one_warp_candidate():
    # one token of Mixtral's 8 experts: 8 logits, fewer than a warp's 32 threads; the H200's certifier
    # refused the key when every candidate was pruned as idle
    from nbx.kernels.moe.routing_tuning import route_key
    kept, pruned = autotune.lookup("moe_route").candidates(device_files.for_arch("sm_90"), route_key(1, 8, 2, "float32"))
    assert kept == [{"block_tokens": 1, "num_warps": 1}]
    assert any("idle threads" in reason for _, reason in pruned)


def test_alignment_candidates_stop_at_a_step_of_twice_the_pairs():
    from nbx.kernels.moe.routing_tuning import align_key
    hopper = device_files.for_arch("sm_90")
    kept, pruned = autotune.lookup("moe_align").candidates(hopper, align_key(100, 8))   # 128 pairs
    assert {s["block"] for s in kept} == {256}
    assert any("twice over" in reason for _, reason in pruned)


@pytest.mark.parametrize("name,rep", [
    ("moe_route", {"tokens": 8, "experts": 16, "top_k": 2, "dtype": "bfloat16", "routing": "softmax"}),
    ("moe_route", {"tokens": 4, "experts": 8, "top_k": 2, "dtype": "float32", "routing": "softmax"}),
    ("moe_route", {"tokens": 8, "experts": 16, "top_k": 3, "dtype": "float32", "routing": "sigmoid-g4k2-top2-bias"}),
    ("moe_align", {"pairs": 96, "experts": 8}),
])
def test_the_first_and_last_candidates_pass_the_exact_screen_on_interp(interp, name, rep):
    tunable = autotune.lookup(name)
    kept, _ = tunable.candidates(device_files.for_arch("sm_90"), rep)
    workload = tunable.workload(rep, interp)
    assert workload.out_dtype.name == "int32"   # an integer table: compared exactly
    result = screen.run(workload, [kept[0], kept[-1]], launch.facts(interp))
    assert not result.excluded, [v.reason for v in result.excluded]
    assert len(result.passed) == 2 and result.tolerance == 0


def test_the_routing_label_names_what_the_kernel_is_compiled_for():
    from nbx.kernels.moe.routing_tuning import _routing_of, route_label
    assert route_label("softmax", 1, 1, "max", False) == "softmax"
    label = route_label("sigmoid", 8, 4, "top2", True)
    assert label == "sigmoid-g8k4-top2-bias"
    assert _routing_of(label) == dict(scoring="sigmoid", groups=8, kept=4, group_score="top2", bias=True)


def test_a_setting_given_to_moe_route_and_moe_align_reaches_their_launches(interp):
    from nbx.kernels.moe import align_plan, route_experts, route_plan, _route_options
    logits = nbx.asarray(np.random.default_rng(0).standard_normal((6, 16)).astype(np.float32), device=interp)
    options, _, _ = _route_options(logits, 2)
    plan = route_plan(logits, options, {"block_tokens": 2, "num_warps": 1})
    assert plan.launches[0].grid == (3,) and plan.launches[0].meta["num_warps"] == 1
    expected = nbx.moe_route(logits.to("cpu"), 2).experts.numpy()
    assert (route_experts(logits, 2, setting={"block_tokens": 2, "num_warps": 1}).numpy() == expected).all()
    ids = nbx.asarray(np.arange(12, dtype=np.int32).reshape(6, 2) % 5, device=interp)
    launches = align_plan(ids, 5, 4, {"block": 256, "num_warps": 2}).launches
    assert [(s.meta["BLOCK"], s.meta["num_warps"]) for s in launches] == [(256, 2), (256, 2)]
